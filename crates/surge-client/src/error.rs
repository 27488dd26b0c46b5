//! The client's error type: a protocol error code (which maps onto an errno) and a message
//! saying which server and which operation failed.

use surge_proto::ErrorCode;

#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {detail}", code.describe())]
pub struct Error {
    pub code: ErrorCode,
    pub detail: String,
}

impl Error {
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Error { code, detail: detail.into() }
    }

    pub fn errno(&self) -> i32 {
        self.code.errno()
    }
}

impl From<ErrorCode> for Error {
    fn from(code: ErrorCode) -> Self {
        Error { code, detail: String::new() }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
