//! The server's error, one type for the namespace store and the server around it: a protocol
//! error code (the errno the client will see), what happened in words, and the underlying
//! cause when there is one (for the server's log). A request that fails is answered with the
//! code and the words; the cause stays here.

use surge_proto::ErrorCode;

#[derive(Debug, thiserror::Error)]
#[error("{}: {detail}", code.describe())]
pub struct ServerError {
    pub code: ErrorCode,
    pub detail: String,
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl ServerError {
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        ServerError { code, detail: detail.into(), source: None }
    }

    /// A failure of the operating system under this server (`context`: what it was doing:
    /// binding its address, creating its directory ...).
    pub fn os(context: &str, err: std::io::Error) -> Self {
        ServerError { code: ErrorCode::of_io(&err), detail: format!("{context}: {err}"), source: Some(Box::new(err)) }
    }

    /// A failure of this server's own store (`context`: what it was doing).
    pub fn store(context: &str, err: std::io::Error) -> Self {
        ServerError { code: ErrorCode::of_store_io(&err), detail: format!("{context}: {err}"), source: Some(Box::new(err)) }
    }

    /// A failure on the PFS side of a stage copy, named as a user reads it; the errno's
    /// meaning is kept (a missing source is NotFound, a full PFS NoSpace).
    pub fn pfs(path: &str, err: std::io::Error) -> Self {
        ServerError { code: ErrorCode::of_io(&err), detail: err.to_string(), source: Some(Box::new(err)) }.on_pfs(path)
    }

    /// The same failure, said to have happened on the PFS at `path`.
    pub fn on_pfs(self, path: &str) -> Self {
        let what = if self.code == ErrorCode::NoSpace { "PFS full" } else { "PFS" };
        self.context(&format!("{what}: {path}"))
    }

    /// The same failure, its message prefixed with `context`.
    pub fn context(mut self, context: &str) -> Self {
        self.detail = if self.detail.is_empty() { context.to_string() } else { format!("{context}: {}", self.detail) };
        self
    }
}

/// A connection's socket failed.
impl From<std::io::Error> for ServerError {
    fn from(err: std::io::Error) -> Self {
        ServerError::os("connection", err)
    }
}

/// What the client is told: the code and the words.
impl From<ServerError> for surge_proto::Error {
    fn from(e: ServerError) -> Self {
        surge_proto::Error::new(e.code, e.detail)
    }
}

/// A failure answered by a service hosted beside the server (the stage coordinator).
impl From<surge_proto::Error> for ServerError {
    fn from(e: surge_proto::Error) -> Self {
        ServerError::new(e.code, e.detail)
    }
}

pub type Result<T> = std::result::Result<T, ServerError>;
