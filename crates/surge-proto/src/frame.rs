//! Frame header: the only part of a frame read before its lengths are known, so it is where
//! malformed input is stopped. Layout (little endian):
//!
//! ```text
//! offset 0  magic       b"SG"
//!        2  version     u8   (PROTOCOL_VERSION)
//!        3  kind        u8   (FrameKind)
//!        4  message_len u32  (postcard bytes that follow the header)
//!        8  payload_len u32  (raw bytes that follow the message)
//!       12  request_id  u64  (echoed in the reply; lets many requests share one connection)
//! ```

use crate::PROTOCOL_VERSION;

pub const FRAME_HEADER_LEN: usize = 20;
/// Largest encoded message. Metadata messages are small; a readdir page or a batch's replies
/// are the largest.
pub const MAX_MESSAGE_LEN: usize = 1 << 20;
/// Largest bulk payload: one chunk of the largest allowed chunk size.
pub const MAX_PAYLOAD_LEN: usize = 64 << 20;

const MAGIC: [u8; 2] = *b"SG";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    Request = 1,
    Reply = 2,
    /// Server to client, unasked: a [`crate::admin::Notice`] for a watching connection.
    Notice = 3,
    /// The answer to a request that failed: an [`crate::Error`] instead of the call's reply.
    Failure = 4,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub kind: FrameKind,
    pub message_len: u32,
    pub payload_len: u32,
    pub request_id: u64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("not a Surge frame (bad magic {0:02x?})")]
    BadMagic([u8; 2]),
    #[error("peer speaks protocol version {peer}, this build speaks {ours}")]
    VersionMismatch { peer: u8, ours: u8 },
    #[error("unknown frame kind {0}")]
    BadKind(u8),
    #[error("message of {0} bytes exceeds the limit of {MAX_MESSAGE_LEN}")]
    MessageTooLarge(u32),
    #[error("payload of {0} bytes exceeds the limit of {MAX_PAYLOAD_LEN}")]
    PayloadTooLarge(u32),
    #[error("undecodable message: {0}")]
    BadMessage(String),
}

impl FrameHeader {
    pub fn encode(&self) -> [u8; FRAME_HEADER_LEN] {
        let mut out = [0u8; FRAME_HEADER_LEN];
        out[0..2].copy_from_slice(&MAGIC);
        out[2] = PROTOCOL_VERSION;
        out[3] = self.kind as u8;
        out[4..8].copy_from_slice(&self.message_len.to_le_bytes());
        out[8..12].copy_from_slice(&self.payload_len.to_le_bytes());
        out[12..20].copy_from_slice(&self.request_id.to_le_bytes());
        out
    }

    /// Validates everything that can be validated before reading the rest of the frame: a
    /// header that passes never makes the reader allocate more than the two limits.
    pub fn decode(bytes: &[u8; FRAME_HEADER_LEN]) -> Result<Self, FrameError> {
        let magic = [bytes[0], bytes[1]];
        if magic != MAGIC {
            return Err(FrameError::BadMagic(magic));
        }
        if bytes[2] != PROTOCOL_VERSION {
            return Err(FrameError::VersionMismatch { peer: bytes[2], ours: PROTOCOL_VERSION });
        }
        let kind = match bytes[3] {
            1 => FrameKind::Request,
            2 => FrameKind::Reply,
            3 => FrameKind::Notice,
            4 => FrameKind::Failure,
            other => return Err(FrameError::BadKind(other)),
        };
        let message_len = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
        let payload_len = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
        if message_len as usize > MAX_MESSAGE_LEN {
            return Err(FrameError::MessageTooLarge(message_len));
        }
        if payload_len as usize > MAX_PAYLOAD_LEN {
            return Err(FrameError::PayloadTooLarge(payload_len));
        }
        let request_id = u64::from_le_bytes(bytes[12..20].try_into().unwrap());
        Ok(FrameHeader { kind, message_len, payload_len, request_id })
    }
}

/// Encodes `message` and returns header + message bytes, ready to be followed by `payload_len`
/// payload bytes on the wire.
pub fn encode_frame<M: serde::Serialize>(kind: FrameKind, request_id: u64, message: &M, payload_len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; FRAME_HEADER_LEN];
    let mut buf = postcard::to_extend(message, std::mem::take(&mut buf)).expect("Vec writes never fail");
    let message_len = buf.len() - FRAME_HEADER_LEN;
    assert!(message_len <= MAX_MESSAGE_LEN, "message too large for the protocol: {message_len} bytes");
    assert!(payload_len <= MAX_PAYLOAD_LEN, "payload too large for the protocol: {payload_len} bytes");
    let header = FrameHeader { kind, message_len: message_len as u32, payload_len: payload_len as u32, request_id };
    buf[..FRAME_HEADER_LEN].copy_from_slice(&header.encode());
    buf
}

/// Decodes a message body, turning any postcard error (truncation, bad tag, trailing bytes,
/// invalid UTF-8 ...) into a [`FrameError::BadMessage`].
pub fn decode_message<'a, M: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<M, FrameError> {
    let (message, rest) = postcard::take_from_bytes(bytes).map_err(|e| FrameError::BadMessage(e.to_string()))?;
    if !rest.is_empty() {
        return Err(FrameError::BadMessage(format!("{} trailing bytes", rest.len())));
    }
    Ok(message)
}
