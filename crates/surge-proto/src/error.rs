//! Failures: [`ErrorCode`], which maps one-to-one onto POSIX errno values so that the FUSE mount
//! and the C API can pass a failure on as the errno a program expects, and [`Error`], a code
//! with a message saying what failed where: what a server answers a failed request with, and
//! what the client library returns.

use serde::{Deserialize, Serialize};

/// Failure reasons. Each maps onto one errno so the FUSE layer and the C API can pass them on.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    NotFound,
    Exists,
    NotEmpty,
    IsDir,
    NotDir,
    NameTooLong,
    NoSpace,
    AccessDenied,
    NotPermitted,
    Invalid,
    /// The entry is locked by a rename in progress; retry shortly.
    Busy,
    /// A rename would replace a directory homed on another server: retire it first.
    NeedsRetire,
    Io,
    Stale,
    NotSupported,
    Protocol,
    Unauthenticated,
    ServerDown,
    TimedOut,
    TooManyLinks,
    /// A file handle that is not open (a client-side failure: the FUSE mount's EBADF).
    BadHandle,
    /// A lock another owner holds (a lock asked for without waiting).
    Locked,
    /// A wait for a lock ended without it (its owner let go of the file meanwhile).
    Interrupted,
    /// No such extended attribute (ENODATA, as getxattr and removexattr say it).
    NoData,
    /// An extended attribute's value larger than any may be (E2BIG).
    TooBig,
    /// An extended attribute's name empty or longer than any may be (ERANGE, as Linux answers
    /// it).
    OutOfRange,
    /// No data or hole at or past an offset at or past the file's end (SEEK_DATA and
    /// SEEK_HOLE's ENXIO).
    PastEnd,
    /// The directory (or an inode made in it) is delegated to another client, which is being
    /// asked to write its steps back and give it up: retry shortly (NFSv4's NFS4ERR_DELAY).
    Recalling,
    /// A size or offset past the largest file the servers' file systems hold (EFBIG).
    FileTooLarge,
}

impl ErrorCode {
    /// The peer was not reached, or did not answer in time: whether it did what was asked is
    /// not known.
    pub fn is_lost_contact(self) -> bool {
        matches!(self, ErrorCode::ServerDown | ErrorCode::TimedOut)
    }

    pub fn errno(self) -> i32 {
        match self {
            ErrorCode::NotFound => libc::ENOENT,
            ErrorCode::Exists => libc::EEXIST,
            ErrorCode::NotEmpty => libc::ENOTEMPTY,
            ErrorCode::IsDir => libc::EISDIR,
            ErrorCode::NotDir => libc::ENOTDIR,
            ErrorCode::NameTooLong => libc::ENAMETOOLONG,
            ErrorCode::NoSpace => libc::ENOSPC,
            ErrorCode::AccessDenied => libc::EACCES,
            ErrorCode::NotPermitted => libc::EPERM,
            ErrorCode::Invalid => libc::EINVAL,
            ErrorCode::Busy => libc::EBUSY,
            ErrorCode::NeedsRetire => libc::EXDEV,
            ErrorCode::Io => libc::EIO,
            ErrorCode::Stale => libc::ESTALE,
            ErrorCode::NotSupported => libc::ENOTSUP,
            ErrorCode::Protocol => libc::EPROTO,
            ErrorCode::Unauthenticated => libc::EACCES,
            ErrorCode::ServerDown => libc::EHOSTDOWN,
            ErrorCode::TimedOut => libc::ETIMEDOUT,
            ErrorCode::TooManyLinks => libc::EMLINK,
            ErrorCode::BadHandle => libc::EBADF,
            ErrorCode::Locked => libc::EAGAIN,
            ErrorCode::Interrupted => libc::EINTR,
            ErrorCode::NoData => libc::ENODATA,
            ErrorCode::TooBig => libc::E2BIG,
            ErrorCode::OutOfRange => libc::ERANGE,
            ErrorCode::PastEnd => libc::ENXIO,
            ErrorCode::Recalling => libc::EAGAIN,
            ErrorCode::FileTooLarge => libc::EFBIG,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            ErrorCode::NotFound => "no such file or directory",
            ErrorCode::Exists => "file exists",
            ErrorCode::NotEmpty => "directory not empty",
            ErrorCode::IsDir => "is a directory",
            ErrorCode::NotDir => "not a directory",
            ErrorCode::NameTooLong => "file name too long",
            ErrorCode::NoSpace => "no space left on the burst buffer instance",
            ErrorCode::AccessDenied => "permission denied",
            ErrorCode::NotPermitted => "operation not permitted",
            ErrorCode::Invalid => "invalid argument",
            ErrorCode::Busy => "entry busy (rename in progress)",
            ErrorCode::NeedsRetire => "target directory lives on another server",
            ErrorCode::Io => "I/O error",
            ErrorCode::Stale => "stale file handle",
            ErrorCode::NotSupported => "operation not supported",
            ErrorCode::Protocol => "protocol error",
            ErrorCode::Unauthenticated => "not authenticated for this instance",
            ErrorCode::ServerDown => "server unreachable",
            ErrorCode::TimedOut => "server did not answer in time",
            ErrorCode::TooManyLinks => "too many links",
            ErrorCode::BadHandle => "bad file handle",
            ErrorCode::Locked => "locked by another owner",
            ErrorCode::Interrupted => "wait for a lock given up",
            ErrorCode::NoData => "no such attribute",
            ErrorCode::TooBig => "attribute value too large",
            ErrorCode::OutOfRange => "attribute name empty or too long",
            ErrorCode::PastEnd => "no data past this offset",
            ErrorCode::Recalling => "directory delegated elsewhere, being recalled",
            ErrorCode::FileTooLarge => "file too large for the servers' file systems",
        }
    }
}

impl ErrorCode {
    /// The code of an operating-system error: the one place an errno becomes a Surge failure
    /// (a data file on a full device, a PFS file that is missing or refused ...).
    pub fn of_io(err: &std::io::Error) -> ErrorCode {
        match err.raw_os_error() {
            Some(libc::ENOENT) => ErrorCode::NotFound,
            Some(libc::EEXIST) => ErrorCode::Exists,
            Some(libc::ENOTEMPTY) => ErrorCode::NotEmpty,
            Some(libc::EISDIR) => ErrorCode::IsDir,
            Some(libc::ENOTDIR) => ErrorCode::NotDir,
            Some(libc::ENAMETOOLONG) => ErrorCode::NameTooLong,
            Some(libc::ENOSPC | libc::EDQUOT) => ErrorCode::NoSpace,
            Some(libc::EACCES) => ErrorCode::AccessDenied,
            Some(libc::EPERM) => ErrorCode::NotPermitted,
            Some(libc::EINVAL) => ErrorCode::Invalid,
            Some(libc::ESTALE) => ErrorCode::Stale,
            Some(libc::EOPNOTSUPP) => ErrorCode::NotSupported,
            Some(libc::ETIMEDOUT) => ErrorCode::TimedOut,
            Some(libc::EMLINK) => ErrorCode::TooManyLinks,
            Some(libc::EBADF) => ErrorCode::BadHandle,
            Some(libc::ENODATA) => ErrorCode::NoData,
            Some(libc::E2BIG) => ErrorCode::TooBig,
            Some(libc::ERANGE) => ErrorCode::OutOfRange,
            Some(libc::ENXIO) => ErrorCode::PastEnd,
            Some(libc::EFBIG) => ErrorCode::FileTooLarge,
            _ => match err.kind() {
                std::io::ErrorKind::NotFound => ErrorCode::NotFound,
                std::io::ErrorKind::PermissionDenied => ErrorCode::AccessDenied,
                _ => ErrorCode::Io,
            },
        }
    }
}

impl ErrorCode {
    /// The code of a failure of a node's own data store (a server's chunk files, or a client
    /// writing them itself): a full device is a full burst buffer, anything else an I/O error
    /// (a permission problem there is not the user's file refusing them).
    pub fn of_store_io(err: &std::io::Error) -> ErrorCode {
        match ErrorCode::of_io(err) {
            code @ (ErrorCode::NoSpace | ErrorCode::FileTooLarge) => code,
            _ => ErrorCode::Io,
        }
    }
}

/// A failure: its code and what happened, in words (which server, which path, which step).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, thiserror::Error)]
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

    /// The same failure, its message prefixed with `context` (a path, a step).
    pub fn context(mut self, context: &str) -> Self {
        self.detail = if self.detail.is_empty() { context.to_string() } else { format!("{context}: {}", self.detail) };
        self
    }
}

impl From<ErrorCode> for Error {
    fn from(code: ErrorCode) -> Self {
        Error { code, detail: String::new() }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_keep_their_meaning() {
        let of = |errno| ErrorCode::of_io(&std::io::Error::from_raw_os_error(errno));
        assert_eq!(of(libc::ENOENT), ErrorCode::NotFound);
        assert_eq!(of(libc::EDQUOT), ErrorCode::NoSpace);
        assert_eq!(of(libc::EACCES), ErrorCode::AccessDenied);
        assert_eq!(of(libc::EIO), ErrorCode::Io);
        for code in [
            ErrorCode::NotFound,
            ErrorCode::Exists,
            ErrorCode::NoSpace,
            ErrorCode::IsDir,
            ErrorCode::NotDir,
            ErrorCode::TooManyLinks,
            ErrorCode::NoData,
            ErrorCode::TooBig,
            ErrorCode::OutOfRange,
        ] {
            assert_eq!(of(code.errno()), code, "{code:?} survives errno and back");
        }
    }
}
