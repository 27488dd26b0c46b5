//! The workflow calls of `include/surge.h`: following the files published in a directory
//! (`surge_watch_*`) and taking them as a consumer of a group (`surge_queue_*`), over the
//! client library's [`surge_client::workflow`].
//!
//! A path that does not fit the caller's buffer (-ERANGE) does not cost the caller its item:
//! a watch keeps the publication and hands it again on its next call; a claim is kept by the
//! library and handed again to the next claim of the same directory and group in this
//! process, while its lease lasts.

use std::collections::HashMap;
use std::ffi::{c_char, c_int};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use surge_client::surge_proto::workflow::{Publication, MAX_LEASE_MS};
use surge_client::workflow::Publications;
use surge_client::Client;

use crate::call::{call, resolve, runtime, text, CallResult, Failure};

/// A reader of one directory's publications, for C.
pub struct Watch {
    client: Client,
    reader: Publications,
    /// The directory as the caller named it: paths handed back start with it.
    shown: String,
    /// A publication whose path did not fit the caller's buffer: the next call hands it again.
    pending: Option<Publication>,
}

/// `timeout_ms` as a wait: negative waits for ever.
fn wait_of(timeout_ms: c_int) -> Option<Duration> {
    (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64))
}

/// Copies `value` with its NUL into the caller's `size` bytes at `out`.
fn copy_out(value: &str, out: *mut c_char, size: usize) -> CallResult<()> {
    let bytes = value.as_bytes();
    if out.is_null() || bytes.len() + 1 > size || bytes.contains(&0) {
        return Err(Failure::new(libc::ERANGE, format!("{value}: does not fit the {size} bytes given")));
    }
    // SAFETY: the caller guarantees `size` writable bytes at `out`; bytes.len() + 1 <= size.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), out, bytes.len());
        *out.add(bytes.len()) = 0;
    }
    Ok(())
}

fn set<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: the caller passes NULL or a pointer to a T.
        unsafe { *out = value };
    }
}

fn optional_text(p: *const c_char, what: &str) -> CallResult<Option<String>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: not NULL (checked above); the C caller passes a NUL-terminated string (surge.h).
    unsafe { text(p, what) }.map(Some)
}

/// # Safety
/// `dir` is a NUL-terminated string, `pattern` one or NULL, `out` a pointer to a pointer.
#[no_mangle]
pub unsafe extern "C" fn surge_watch_open(dir: *const c_char, pattern: *const c_char, from_cursor: u64, out: *mut *mut Watch) -> c_int {
    call(|| {
        if out.is_null() {
            return Err(Failure::new(libc::EINVAL, "out is NULL"));
        }
        // SAFETY: the C caller passes a NUL-terminated string (surge.h).
        let shown = unsafe { text(dir, "directory")? };
        let pattern = optional_text(pattern, "pattern")?;
        let (client, inner) = resolve(&shown)?;
        let reader = runtime().block_on(client.publications(&inner, pattern.as_deref(), from_cursor))?;
        let watch = Box::new(Watch { client, reader, shown: shown.trim_end_matches('/').to_string(), pending: None });
        // SAFETY: checked not NULL above.
        unsafe { *out = Box::into_raw(watch) };
        Ok(())
    })
}

/// # Safety
/// `watch` comes from `surge_watch_open`; `path` has room for `size` bytes; `cursor` and
/// `file_size` are NULL or point to a uint64_t.
#[no_mangle]
pub unsafe extern "C" fn surge_watch_next(
    watch: *mut Watch,
    timeout_ms: c_int,
    path: *mut c_char,
    size: usize,
    cursor: *mut u64,
    file_size: *mut u64,
) -> c_int {
    call(|| {
        if watch.is_null() {
            return Err(Failure::new(libc::EINVAL, "watch is NULL"));
        }
        // SAFETY: not NULL (checked above), from surge_watch_open and not yet closed.
        let watch = unsafe { &mut *watch };
        let p = match watch.pending.take() {
            Some(p) => p,
            None => match runtime().block_on(watch.reader.next(wait_of(timeout_ms)))? {
                Some(p) => p,
                None => {
                    let detail = format!("nothing published in {} within {timeout_ms} ms", watch.shown);
                    return Err(Failure::new(libc::ETIMEDOUT, detail));
                }
            },
        };
        if let Err(e) = copy_out(&format!("{}/{}", watch.shown, p.name), path, size) {
            // Kept, not lost: the next call (with a bigger buffer) hands this one again.
            watch.pending = Some(p);
            return Err(e);
        }
        set(cursor, p.cursor);
        set(file_size, p.size.unwrap_or(u64::MAX));
        Ok(())
    })
}

/// # Safety
/// `watch` comes from `surge_watch_open` (or is NULL) and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn surge_watch_close(watch: *mut Watch) {
    if !watch.is_null() {
        // SAFETY: made by Box::into_raw in surge_watch_open; the caller gives it up here.
        let watch = unsafe { Box::from_raw(watch) };
        drop(watch.client);
    }
}

/// A claim whose path did not fit the caller's buffer. The protocol has no way to give a
/// claim back to its group (only `Done`, which would mark the file processed, or the lease
/// running out), so the library keeps it for this process — the group's consumer, as the
/// instance sees it (`libsurge:<pid>`) — and the next claim of the same directory and group
/// hands it out again, under the same token, while its lease lasts.
struct Held {
    /// The file's name in the directory.
    name: String,
    token: u64,
    /// When its lease runs out at the latest (counted from before the claim was asked for).
    until: Instant,
}

/// Held claims by (directory as the caller named it, group), oldest first.
type HeldClaims = HashMap<(String, String), Vec<Held>>;

fn held() -> std::sync::MutexGuard<'static, HeldClaims> {
    static HELD: OnceLock<Mutex<HeldClaims>> = OnceLock::new();
    HELD.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// The oldest held claim of `key` whose lease has not run out (those that ran out went back
/// to the group: they are dropped).
fn take_held(key: &(String, String)) -> Option<Held> {
    let mut held = held();
    let claims = held.get_mut(key)?;
    let now = Instant::now();
    claims.retain(|c| c.until > now);
    let first = (!claims.is_empty()).then(|| claims.remove(0));
    if claims.is_empty() {
        held.remove(key);
    }
    first
}

/// Keeps `claim` for the next claim of `key` (at the front when it was taken from there).
fn keep_held(key: (String, String), claim: Held, front: bool) {
    let mut held = held();
    let claims = held.entry(key).or_default();
    if front {
        claims.insert(0, claim);
    } else {
        claims.push(claim);
    }
}

/// # Safety
/// `dir` and `group` are NUL-terminated strings, `pattern` one or NULL; `path` has room for
/// `size` bytes; `token` is NULL or points to a uint64_t.
#[no_mangle]
pub unsafe extern "C" fn surge_queue_claim(
    dir: *const c_char,
    group: *const c_char,
    pattern: *const c_char,
    lease_seconds: f64,
    timeout_ms: c_int,
    path: *mut c_char,
    size: usize,
    token: *mut u64,
) -> c_int {
    call(|| {
        // SAFETY: the C caller passes NUL-terminated strings (surge.h).
        let (shown, group) = unsafe { (text(dir, "directory")?, text(group, "group")?) };
        let pattern = optional_text(pattern, "pattern")?;
        let lease = Duration::try_from_secs_f64(lease_seconds).map_err(|_| Failure::new(libc::EINVAL, "bad lease"))?;
        let prefix = shown.trim_end_matches('/').to_string();
        // No name is shorter than a byte: a buffer without room for "<dir>/x" cannot take any
        // claim, so none is made.
        if size < prefix.len() + 3 {
            return Err(Failure::new(libc::ERANGE, format!("no path in {prefix} fits the {size} bytes given")));
        }
        let key = (prefix.clone(), group.clone());
        let (claim, was_held) = match take_held(&key) {
            Some(claim) => (claim, true),
            None => {
                let (client, inner) = resolve(&shown)?;
                let consumer = format!("libsurge:{}", std::process::id());
                let asked = Instant::now();
                let claimed =
                    runtime().block_on(client.claim(&inner, &group, pattern.as_deref(), &consumer, lease, wait_of(timeout_ms)))?;
                let Some(claimed) = claimed else {
                    let detail = format!("nothing to claim in {shown} for group '{group}' within {timeout_ms} ms");
                    return Err(Failure::new(libc::ETIMEDOUT, detail));
                };
                let until = asked + lease.min(Duration::from_millis(MAX_LEASE_MS));
                (Held { name: claimed.name, token: claimed.token, until }, false)
            }
        };
        if let Err(e) = copy_out(&format!("{prefix}/{}", claim.name), path, size) {
            // Kept, not lost until its lease runs out: the next claim here hands it again.
            keep_held(key, claim, was_held);
            return Err(e);
        }
        set(token, claim.token);
        Ok(())
    })
}

/// # Safety
/// `path` is a NUL-terminated string, `group` one or NULL.
#[no_mangle]
pub unsafe extern "C" fn surge_queue_done(path: *const c_char, group: *const c_char, token: u64) -> c_int {
    call(|| {
        // SAFETY: the C caller passes a NUL-terminated string (surge.h).
        let path = unsafe { text(path, "path")? };
        let group = optional_text(group, "group")?;
        let (client, inner) = resolve(&path)?;
        runtime().block_on(client.claim_done(&inner, group.as_deref(), (token != 0).then_some(token)))?;
        Ok(())
    })
}

/// One consumer group's counts and rates, as `surge_queue_status` fills them (see `surge.h`).
#[repr(C)]
pub struct QueueCounts {
    pub produced: u64,
    pub claimed: u64,
    pub done: u64,
    pub backlog: u64,
    pub expired: u64,
    pub production_per_s: f64,
    pub consumption_per_s: f64,
}

/// # Safety
/// `dir` and `group` are NUL-terminated strings; `out` points to a `surge_queue_counts`.
#[no_mangle]
pub unsafe extern "C" fn surge_queue_status(dir: *const c_char, group: *const c_char, out: *mut QueueCounts) -> c_int {
    call(|| {
        if out.is_null() {
            return Err(Failure::new(libc::EINVAL, "out is NULL"));
        }
        // SAFETY: the C caller passes NUL-terminated strings (surge.h).
        let (shown, group) = unsafe { (text(dir, "directory")?, text(group, "group")?) };
        let (client, inner) = resolve(&shown)?;
        let groups = runtime().block_on(client.queue_status(&inner))?;
        let Some(g) = groups.into_iter().find(|g| g.group == group) else {
            return Err(Failure::new(libc::ENOENT, format!("{shown} has no consumer group '{group}'")));
        };
        let counts = QueueCounts {
            produced: g.produced,
            claimed: g.claimed,
            done: g.done,
            backlog: g.backlog,
            expired: g.expired,
            production_per_s: g.production_per_s,
            consumption_per_s: g.consumption_per_s,
        };
        // SAFETY: checked not NULL above; the caller passes a pointer to a surge_queue_counts.
        unsafe { *out = counts };
        Ok(())
    })
}
