//! Target `frame`: bytes as a peer might send them, through what reads a frame. The first 20
//! bytes go to the header decoder, the rest to the message decoder as every message type of
//! the protocol (requests, handshake frames, failures, notices, replies): whatever the bytes,
//! decoding returns a value or an error and never panics; a header that passes never exceeds
//! the limits and re-encodes to the very bytes it came from; a decoded message re-encodes to
//! bytes that decode to the same message.

use serde::de::DeserializeOwned;
use serde::Serialize;
use surge_proto::admin::{BatchOutcome, DataFilePage, EntryPage, InodePage, Notice};
use surge_proto::call::encode_reply;
use surge_proto::frame::{decode_message, encode_frame};
use surge_proto::handshake::{Challenge, Hello, Welcome};
use surge_proto::stage::{CopyOutcome, StageFilesPage, StagePage};
use surge_proto::*;

pub fn run(data: &[u8]) {
    let body = match data.split_first_chunk::<FRAME_HEADER_LEN>() {
        Some((head, body)) => {
            if let Ok(header) = FrameHeader::decode(head) {
                assert!(header.message_len as usize <= MAX_MESSAGE_LEN && header.payload_len as usize <= MAX_PAYLOAD_LEN);
                assert_eq!(&header.encode(), head, "a header that decodes re-encodes to its bytes");
                // What a reader takes as the message: as many bytes as the header says.
                let message = &body[..body.len().min(header.message_len as usize)];
                request(message, header.request_id);
            }
            body
        }
        None => data,
    };
    request(body, 7);
    round_trip::<Challenge>(body);
    round_trip::<Hello>(body);
    round_trip::<Welcome>(body);
    round_trip::<Error>(body);
    round_trip::<Notice>(body);
    round_trip::<Attr>(body);
    round_trip::<DirEntry>(body);
    round_trip::<DirPage>(body);
    round_trip::<Unlinked>(body);
    round_trip::<LinkOutcome>(body);
    round_trip::<InodeFate>(body);
    round_trip::<ServerStats>(body);
    round_trip::<InodePage>(body);
    round_trip::<EntryPage>(body);
    round_trip::<DataFilePage>(body);
    round_trip::<StagePage>(body);
    round_trip::<StageFilesPage>(body);
    round_trip::<String>(body);
    round_trip::<u64>(body);
    if let Some(outcomes) = round_trip::<Vec<BatchOutcome>>(body) {
        // A batch's replies are messages of their own, nested.
        for reply in outcomes.iter().flatten() {
            round_trip::<DirEntry>(reply);
            round_trip::<Attr>(reply);
        }
    }
    round_trip::<Vec<CopyOutcome>>(body);
}

/// `bytes` as a request: if it decodes, it must come out of a whole frame equal, under the
/// same id.
fn request(bytes: &[u8], request_id: u64) {
    let Some(request) = round_trip::<Request>(bytes) else { return };
    let _ = request.name();
    let frame = encode_frame(FrameKind::Request, request_id, &request, 0);
    let (head, message) = frame.split_first_chunk::<FRAME_HEADER_LEN>().expect("a frame has a header");
    let header = FrameHeader::decode(head).expect("an encoded frame's header decodes");
    assert_eq!(
        (header.kind, header.request_id, header.message_len as usize, header.payload_len),
        (FrameKind::Request, request_id, message.len(), 0)
    );
    assert_eq!(decode_message::<Request>(message).expect("an encoded request decodes"), request);
}

/// Decodes `bytes` as an `M`; if that works, `M` re-encoded decodes and re-encodes to the
/// same bytes (compared as bytes: some replies carry floating-point seconds).
fn round_trip<M: Serialize + DeserializeOwned>(bytes: &[u8]) -> Option<M> {
    let message: M = decode_message(bytes).ok()?;
    let encoded = encode_reply(&message);
    let again: M = decode_message(&encoded).expect("an encoded message decodes");
    assert_eq!(encode_reply(&again), encoded, "a message survives encoding and decoding");
    Some(message)
}
