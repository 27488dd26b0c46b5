//! DataWarp's walk over failed stages: `dw_open_failed_stage`, `dw_read_failed_stage`,
//! `dw_close_failed_stage`, over libsurge's list of failed stages (the coordinator's stages
//! in the failed state, a directory stage's failed files one by one), leaving out those
//! whose path was staged again since, as DataWarp does for a restarted stage.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, CString};

use surge::call::{call, text, Failure};
use surge::staging::failed_stages;

/// `dw_failed_stage_t`: what is left to read of a walk, each path with its errno.
pub struct FailedStageState {
    left: VecDeque<(CString, c_int)>,
}

/// # Safety
/// `dw_instance_path` is a NUL-terminated string; `handle` points to a pointer.
#[no_mangle]
pub unsafe extern "C" fn dw_open_failed_stage(dw_instance_path: *const c_char, handle: *mut *mut FailedStageState) -> c_int {
    call(|| {
        if handle.is_null() {
            return Err(Failure::new(libc::EINVAL, "handle is NULL"));
        }
        // SAFETY: the C caller passes a NUL-terminated string (datawarp.h).
        let dir = unsafe { text(dw_instance_path, "DataWarp path") }?;
        let left = failed_stages(&dir, true)?.into_iter().filter_map(|f| Some((CString::new(f.path).ok()?, f.errno))).collect();
        // SAFETY: checked not NULL above; the caller's pointer to a handle.
        unsafe { *handle = Box::into_raw(Box::new(FailedStageState { left })) };
        Ok(())
    })
}

/// # Safety
/// `handle` comes from `dw_open_failed_stage` and is not closed; `path` has room for
/// `path_size` bytes; `ret_errno` is NULL or points to an int.
#[no_mangle]
pub unsafe extern "C" fn dw_read_failed_stage(
    handle: *mut FailedStageState,
    path: *mut c_char,
    path_size: c_int,
    ret_errno: *mut c_int,
) -> c_int {
    if handle.is_null() || path.is_null() || path_size < 0 {
        return -libc::EINVAL;
    }
    // SAFETY: not NULL (checked above), from dw_open_failed_stage and not yet closed.
    let walk = unsafe { &mut *handle };
    let Some((next, errno)) = walk.left.front() else { return 0 };
    let bytes = next.as_bytes_with_nul();
    if bytes.len() > path_size as usize {
        // Kept: the next call, with more room, gets it.
        return -libc::ERANGE;
    }
    // SAFETY: the caller guarantees `path_size` writable bytes at `path`; bytes fit in them.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), path, bytes.len()) };
    if !ret_errno.is_null() {
        // SAFETY: not NULL: the caller's pointer to an int.
        unsafe { *ret_errno = -errno };
    }
    let length = bytes.len() as c_int - 1;
    walk.left.pop_front();
    length
}

/// # Safety
/// `handle` comes from `dw_open_failed_stage` (or is NULL) and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn dw_close_failed_stage(handle: *mut FailedStageState) -> c_int {
    if handle.is_null() {
        return -libc::EINVAL;
    }
    // SAFETY: made by Box::into_raw in dw_open_failed_stage; the caller gives it up here.
    drop(unsafe { Box::from_raw(handle) });
    0
}
