//! What every call of the C API goes through: a runtime of its own, one client per instance
//! for the life of the process, failures kept per thread for `surge_last_error` and returned
//! as negative errnos, never a panic unwinding into C.
//!
//! Public for the other C libraries built on this one (`surge-datawarp`, DataWarp's own
//! names): their calls go through the same runtime, clients and error record.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::{Mutex, OnceLock};

use surge_client::target::{self, BbPath, Unnamed};
use surge_client::{Client, ClientOptions};

/// A failed call: the errno it returns (positive here) and what to tell the user.
pub struct Failure {
    pub errno: i32,
    pub message: String,
}

impl Failure {
    pub fn new(errno: i32, message: impl Into<String>) -> Failure {
        Failure { errno, message: message.into() }
    }
}

impl From<surge_client::Error> for Failure {
    fn from(e: surge_client::Error) -> Failure {
        Failure::new(e.errno(), e.to_string())
    }
}

pub type CallResult<T> = Result<T, Failure>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("libsurge")
            .enable_all()
            .build()
            .expect("libsurge: cannot start its runtime")
    })
}

/// One client per instance for the life of the process: connections are reused across calls.
pub fn client(instance: &str) -> CallResult<Client> {
    static CLIENTS: OnceLock<Mutex<HashMap<String, Client>>> = OnceLock::new();
    let mut clients = CLIENTS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = clients.get(instance) {
        return Ok(c.clone());
    }
    let c = Client::for_instance(instance, ClientOptions::default())?;
    clients.insert(instance.to_string(), c.clone());
    Ok(c)
}

/// Runs one API call: records the failure message and turns it into `-errno`; a panic
/// becomes -EIO instead of unwinding into C.
pub fn call(work: impl FnOnce() -> CallResult<()>) -> c_int {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
        .unwrap_or_else(|_| Err(Failure::new(libc::EIO, "internal error in libsurge")));
    let (code, message) = match outcome {
        Ok(()) => (0, String::new()),
        Err(f) => (-f.errno.abs().max(1), f.message),
    };
    LAST_ERROR.with(|last| *last.borrow_mut() = CString::new(message.replace('\0', " ")).unwrap_or_default());
    code
}

/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub unsafe fn text(p: *const c_char, what: &str) -> CallResult<String> {
    if p.is_null() {
        return Err(Failure::new(libc::EINVAL, format!("{what} is NULL")));
    }
    // SAFETY: not NULL (checked above) and NUL-terminated (the caller's promise).
    unsafe { CStr::from_ptr(p) }.to_str().map(str::to_string).map_err(|_| Failure::new(libc::EINVAL, format!("{what} is not UTF-8")))
}

/// The instance a burst-buffer path belongs to (the mounted one, or `SURGE_INSTANCE`'s) and
/// the path inside it.
pub fn resolve(bb_path: &str) -> CallResult<(Client, String)> {
    let named = std::env::var("SURGE_INSTANCE").ok();
    let BbPath { instance, inner } = target::resolve_bb_path(bb_path, named.as_deref(), Unnamed::Refuse)?;
    Ok((client(&instance)?, inner))
}

/// The message of this thread's last failed call.
pub fn last_error() -> *const c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}
