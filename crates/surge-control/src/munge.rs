//! MUNGE credentials: how a caller on one node proves its uid and gid to the manager on
//! another, with the cluster's own credential service (the one Slurm uses), so that Surge needs
//! no key of its own on the compute and login nodes.
//!
//! A credential is made by the caller's node's munged and carries the request itself as its
//! payload; the manager's node's munged checks it and answers who made it. What a request
//! claims about its caller is never taken: only the uid and gid munged vouches for. munged also
//! refuses a credential decoded before (a replay) and one older than its time to live.
//!
//! libmunge is opened when first needed (`libmunge.so.2`), so that the tools run where munge
//! is not installed as long as nobody asks for a credential.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io;
use std::sync::OnceLock;

/// Who munged says made a credential, and what it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vouched {
    pub uid: u32,
    pub gid: u32,
    pub payload: Vec<u8>,
}

type Encode = unsafe extern "C" fn(*mut *mut c_char, *mut c_void, *const c_void, c_int) -> c_int;
type Decode = unsafe extern "C" fn(*const c_char, *mut c_void, *mut *mut c_void, *mut c_int, *mut u32, *mut u32) -> c_int;
type Strerror = unsafe extern "C" fn(c_int) -> *const c_char;

struct Library {
    encode: Encode,
    decode: Decode,
    strerror: Strerror,
    /// Keeps the functions above loaded.
    _library: libloading::Library,
}

/// MUNGE's status for a credential decoded before (`EMUNGE_CRED_REPLAYED`).
const CRED_REPLAYED: c_int = 17;

fn library() -> io::Result<&'static Library> {
    static LIBRARY: OnceLock<Result<Library, String>> = OnceLock::new();
    let loaded = LIBRARY.get_or_init(|| {
        // SAFETY: libmunge's initialisers have no preconditions, and the symbols are looked up
        // with the signatures munge.h gives them.
        unsafe {
            let library = libloading::Library::new("libmunge.so.2").map_err(|e| format!("libmunge.so.2 (apt-get install munge): {e}"))?;
            let encode = *library.get::<Encode>(b"munge_encode\0").map_err(|e| e.to_string())?;
            let decode = *library.get::<Decode>(b"munge_decode\0").map_err(|e| e.to_string())?;
            let strerror = *library.get::<Strerror>(b"munge_strerror\0").map_err(|e| e.to_string())?;
            Ok(Library { encode, decode, strerror, _library: library })
        }
    });
    loaded.as_ref().map_err(|why| io::Error::new(io::ErrorKind::Unsupported, why.clone()))
}

fn failure(library: &Library, status: c_int, doing: &str) -> io::Error {
    // SAFETY: munge_strerror answers a static string for any status.
    let why = unsafe { CStr::from_ptr((library.strerror)(status)) }.to_string_lossy().into_owned();
    let kind = if status == CRED_REPLAYED { io::ErrorKind::PermissionDenied } else { io::ErrorKind::Other };
    io::Error::new(kind, format!("munge {doing}: {why}"))
}

/// A credential for this process's uid and gid carrying `payload`, from this node's munged.
/// Blocks on munged's socket: call it off the async runtime's threads.
pub fn encode(payload: &[u8]) -> io::Result<String> {
    let library = library()?;
    let len = c_int::try_from(payload.len()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "payload too large"))?;
    let mut credential: *mut c_char = std::ptr::null_mut();
    // SAFETY: a null context takes munged's defaults; payload is valid for len bytes; on
    // success credential points to a NUL-terminated string the caller frees.
    let status = unsafe { (library.encode)(&mut credential, std::ptr::null_mut(), payload.as_ptr().cast(), len) };
    if status != 0 {
        return Err(failure(library, status, "encode"));
    }
    // SAFETY: set by munge_encode on success, allocated with malloc.
    let text = unsafe { CStr::from_ptr(credential) }.to_string_lossy().into_owned();
    // SAFETY: freed once, with the allocator that made it.
    unsafe { libc_free(credential.cast()) };
    Ok(text)
}

/// Checks `credential` with this node's munged: who made it and its payload. Refused: a
/// credential that is malformed, expired, replayed, or made with another key. Blocks on
/// munged's socket: call it off the async runtime's threads.
pub fn decode(credential: &str) -> io::Result<Vouched> {
    let library = library()?;
    let text = CString::new(credential).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "credential with a NUL byte"))?;
    let (mut payload, mut len, mut uid, mut gid): (*mut c_void, c_int, u32, u32) = (std::ptr::null_mut(), 0, u32::MAX, u32::MAX);
    // SAFETY: text is NUL-terminated; every out-pointer is valid; on return payload, when
    // not null, is a malloc'd buffer of len bytes the caller frees (also on some failures).
    let status = unsafe { (library.decode)(text.as_ptr(), std::ptr::null_mut(), &mut payload, &mut len, &mut uid, &mut gid) };
    let bytes = if payload.is_null() || len <= 0 {
        Vec::new()
    } else {
        // SAFETY: payload holds len bytes, as munge_decode says.
        unsafe { std::slice::from_raw_parts(payload.cast::<u8>(), len as usize) }.to_vec()
    };
    if !payload.is_null() {
        // SAFETY: freed once, with the allocator that made it.
        unsafe { libc_free(payload) };
    }
    if status != 0 {
        return Err(failure(library, status, "decode"));
    }
    Ok(Vouched { uid, gid, payload: bytes })
}

extern "C" {
    #[link_name = "free"]
    fn libc_free(pointer: *mut c_void);
}
