//! Property tests of the decoder: whatever bytes arrive, decoding returns a value or an error,
//! never panics, and a header that passes validation never asks for more than the limits.

use proptest::prelude::*;
use surge_proto::admin::{Batch, StatFs};
use surge_proto::data::Write;
use surge_proto::frame::{decode_message, encode_frame};
use surge_proto::handshake::{Challenge, Hello, Welcome};
use surge_proto::namespace::{Create, Lookup, Readdir, Rename, SetAttr};
use surge_proto::*;

fn sample_requests() -> Vec<Request> {
    vec![
        Lookup { parent: ROOT_INO, name: "plot_0001.h5".into() }.into(),
        Create { parent: 5, name: "x".into(), mode: 0o644, umask: 0, uid: 1000, gid: 1000, exclusive: true, open: true, place_on: None }
            .into(),
        Rename { src_parent: 1, src_name: "a.tmp".into(), dst_parent: 1, dst_name: "a".into(), noreplace: false, retired_target: None }
            .into(),
        Write { ino: 1 << 48 | 9, offset: 1 << 40, ticket: None, may_wait: true }.into(),
        Readdir { ino: 1, after: Some("m".into()), limit: 1024, watch_names: true, watch_attrs: false }.into(),
        SetAttr { ino: 3, changes: AttrChanges { mode: Some(0o600), size: Some(12), ..Default::default() } }.into(),
        Batch {
            requests: vec![
                Lookup { parent: 1, name: "a".into() }.into(),
                Create {
                    parent: 1,
                    name: "b".into(),
                    mode: 0o600,
                    umask: 0o022,
                    uid: 0,
                    gid: 0,
                    exclusive: false,
                    open: false,
                    place_on: Some(3),
                }
                .into(),
            ],
        }
        .into(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn header_decoder_never_panics(bytes in proptest::array::uniform20(any::<u8>())) {
        if let Ok(h) = FrameHeader::decode(&bytes) {
            prop_assert!(h.message_len as usize <= MAX_MESSAGE_LEN);
            prop_assert!(h.payload_len as usize <= MAX_PAYLOAD_LEN);
        }
    }

    #[test]
    fn message_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_message::<Request>(&bytes);
        let _ = decode_message::<Hello>(&bytes);
        let _ = decode_message::<Challenge>(&bytes);
        let _ = decode_message::<Welcome>(&bytes);
        let _ = decode_message::<Error>(&bytes);
        let _ = decode_message::<DirPage>(&bytes);
        let _ = decode_message::<Vec<surge_proto::admin::BatchOutcome>>(&bytes);
    }

    #[test]
    fn mutated_frames_are_rejected_or_decoded(which in 0usize..7, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6), cut in any::<usize>()) {
        let request = &sample_requests()[which];
        let mut frame = encode_frame(FrameKind::Request, 42, request, 0);
        for (pos, val) in flips {
            let i = pos % frame.len();
            frame[i] ^= val;
        }
        let cut = cut % (frame.len() + 1);
        frame.truncate(cut.max(FRAME_HEADER_LEN.min(frame.len())));
        if frame.len() >= FRAME_HEADER_LEN {
            let header: [u8; FRAME_HEADER_LEN] = frame[..FRAME_HEADER_LEN].try_into().unwrap();
            if let Ok(h) = FrameHeader::decode(&header) {
                let body = &frame[FRAME_HEADER_LEN..];
                let end = (h.message_len as usize).min(body.len());
                let _ = decode_message::<Request>(&body[..end]);
            }
        }
    }
}

#[test]
fn every_sample_round_trips() {
    for request in sample_requests() {
        let frame = encode_frame(FrameKind::Request, 99, &request, 0);
        let header = FrameHeader::decode(frame[..FRAME_HEADER_LEN].try_into().unwrap()).unwrap();
        assert_eq!(header.request_id, 99);
        assert_eq!(header.kind, FrameKind::Request);
        assert_eq!(header.message_len as usize, frame.len() - FRAME_HEADER_LEN);
        let back: Request = decode_message(&frame[FRAME_HEADER_LEN..]).unwrap();
        assert_eq!(back, request);
    }
}

#[test]
fn oversized_and_foreign_headers_are_refused() {
    let mut frame = encode_frame(FrameKind::Request, 1, &Request::from(StatFs), 0);
    frame[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    let header: [u8; FRAME_HEADER_LEN] = frame[..FRAME_HEADER_LEN].try_into().unwrap();
    assert_eq!(FrameHeader::decode(&header), Err(FrameError::PayloadTooLarge(u32::MAX)));
    let mut header = header;
    header[2] = 200;
    assert!(matches!(FrameHeader::decode(&header), Err(FrameError::VersionMismatch { peer: 200, .. })));
    assert!(matches!(FrameHeader::decode(b"GET / HTTP/1.1\r\nHost:"[..20].try_into().unwrap()), Err(FrameError::BadMagic(_))));
}

#[test]
fn trailing_bytes_are_an_error() {
    let frame = encode_frame(FrameKind::Request, 1, &Request::from(StatFs), 0);
    let mut body = frame[FRAME_HEADER_LEN..].to_vec();
    body.push(0);
    assert!(decode_message::<Request>(&body).is_err());
}
