//! Reading and writing whole frames on tokio streams (feature `io`). The reader checks the
//! header before allocating, so a peer can make it allocate at most the limits it is given.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::frame::{encode_frame, FrameError, FrameHeader, FrameKind, FRAME_HEADER_LEN};

pub struct Frame {
    pub header: FrameHeader,
    pub message: Vec<u8>,
    pub payload: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("connection error: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Frame(#[from] FrameError),
    #[error("frame exceeds this connection's limit ({what} of {len} bytes, limit {limit})")]
    OverLimit { what: &'static str, len: usize, limit: usize },
}

/// Reads one frame. `Ok(None)` is a clean end of stream between frames; a stream that ends
/// inside a frame is an `UnexpectedEof` error.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, max_message: usize, max_payload: usize) -> Result<Option<Frame>, ReadError> {
    let mut head = [0u8; FRAME_HEADER_LEN];
    let first = r.read(&mut head).await?;
    if first == 0 {
        return Ok(None);
    }
    r.read_exact(&mut head[first..]).await?;
    let header = FrameHeader::decode(&head)?;
    let (message_len, payload_len) = (header.message_len as usize, header.payload_len as usize);
    if message_len > max_message {
        return Err(ReadError::OverLimit { what: "message", len: message_len, limit: max_message });
    }
    if payload_len > max_payload {
        return Err(ReadError::OverLimit { what: "payload", len: payload_len, limit: max_payload });
    }
    let message = read_exactly(r, message_len).await?;
    let payload = read_exactly(r, payload_len).await?;
    Ok(Some(Frame { header, message, payload }))
}

/// Reads exactly `len` bytes into a new vector without zero-filling it first (a payload is a
/// full chunk: clearing it would be one more pass over every byte received).
async fn read_exactly<R: AsyncRead + Unpin>(r: &mut R, len: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(len);
    let got = r.take(len as u64).read_to_end(&mut buf).await?;
    if got < len {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, format!("frame cut short: {got} of {len} bytes")));
    }
    Ok(buf)
}

/// Writes one frame (not flushed: callers batch pipelined frames and flush when idle).
pub async fn write_frame<W: AsyncWrite + Unpin, M: serde::Serialize>(
    w: &mut W,
    kind: FrameKind,
    request_id: u64,
    message: &M,
    payload: &[u8],
) -> std::io::Result<()> {
    let head = encode_frame(kind, request_id, message, payload.len());
    w.write_all(&head).await?;
    if !payload.is_empty() {
        w.write_all(payload).await?;
    }
    Ok(())
}
