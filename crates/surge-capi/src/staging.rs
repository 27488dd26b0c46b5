//! The staging calls of `include/surge.h`, each a C entry point over the client library's
//! staging API, and the Rust functions under them that `surge-datawarp` shares.
//!
//! An immediate stage is planned before the call returns, so one that cannot be made (a
//! missing source, a wrong type) fails the call itself with its errno, not later as a failed
//! stage. A wait is decided by the latest stage of the path that is not deferred to job end.

use std::ffi::{c_char, c_int, CString};

use surge_client::stage::StageCounts;
use surge_client::surge_proto::stage::{StageDirection, StageKind, StageState, StageSummary, StageWhen};
use surge_client::target;
use surge_client::Client;

use crate::call::{self, call, resolve, runtime, text, CallResult, Failure};

/// Submits a stage between `bb` (a burst-buffer path as the caller wrote it) and `pfs`. An
/// immediate stage is planned before this returns: one that cannot be (a missing source) is
/// an error now, with its errno, and stays in the coordinator's list as a failed stage.
pub fn submit(direction: StageDirection, kind: StageKind, when: StageWhen, bb: &str, pfs: &str) -> CallResult<StageSummary> {
    let (client, inner) = resolve(bb)?;
    let spec = client.stage_spec(direction, kind, when, &inner, &target::absolute_pfs_path(pfs)?, false);
    runtime().block_on(client.stage_submit_checked(spec)).map_err(|e| Failure::new(e.errno(), format!("{bb}: {}", e.detail)))
}

/// Drops the job-end stages of `bb` that have not started; -ENOENT when it has none.
pub fn revoke(bb: &str) -> CallResult<()> {
    let (client, inner) = resolve(bb)?;
    runtime().block_on(client.stage_revoke(&inner)).map_err(Into::into)
}

/// The errno a failed stage stands for: that of its failure before any copy (a missing
/// source: ENOENT), else EIO (a copy failed; its message says why).
pub fn failure_errno(stage: &StageSummary) -> i32 {
    stage.error_code.map_or(libc::EIO, |code| code.errno())
}

fn submit_typed(direction: StageDirection, kind: StageKind, bb: *const c_char, pfs: *const c_char, stage_type: c_int) -> c_int {
    call(|| {
        // SAFETY: the C caller passes NUL-terminated strings (surge.h).
        let (bb, pfs) = unsafe { (text(bb, "burst-buffer path")?, text(pfs, "PFS path")?) };
        let when = match stage_type {
            0 => StageWhen::Immediate,
            1 => StageWhen::JobEnd,
            2 => return revoke(&bb),
            other => return Err(Failure::new(libc::EINVAL, format!("unknown stage type {other}"))),
        };
        submit(direction, kind, when, &bb, &pfs).map(drop)
    })
}

/// The stages submitted for `bb` (a C string).
fn stages_of(bb: *const c_char) -> CallResult<(Client, String, Vec<StageSummary>)> {
    // SAFETY: the C caller passes a NUL-terminated string (surge.h).
    let bb = unsafe { text(bb, "burst-buffer path")? };
    let (client, inner) = resolve(&bb)?;
    let stages = runtime().block_on(client.stage_list(Some(&inner)))?;
    Ok((client, bb, stages))
}

fn query(bb: *const c_char, complete: *mut c_int, pending: *mut c_int, deferred: *mut c_int, failed: *mut c_int) -> c_int {
    call(|| {
        let (_, _, stages) = stages_of(bb)?;
        let counts = StageCounts::of(&stages);
        for (out, value) in [(complete, counts.complete), (pending, counts.pending), (deferred, counts.deferred), (failed, counts.failed)] {
            if !out.is_null() {
                // SAFETY: the caller passes NULL or a pointer to an int.
                unsafe { *out = value as c_int };
            }
        }
        Ok(())
    })
}

fn wait(bb: *const c_char) -> c_int {
    call(|| {
        // SAFETY: the C caller passes a NUL-terminated string (surge.h).
        let bb = unsafe { text(bb, "burst-buffer path")? };
        let (client, inner) = resolve(&bb)?;
        let stages = runtime().block_on(client.wait_stages(Some(&inner), |_| true, |_| {}))?;
        // The latest stage that is not waiting for job end decides.
        let Some(last) = stages.iter().filter(|s| s.state != StageState::Deferred).max_by_key(|s| s.id) else {
            return if stages.is_empty() { Err(Failure::new(libc::ENOENT, format!("no stage of {bb}"))) } else { Ok(()) };
        };
        match last.state {
            StageState::Done => Ok(()),
            StageState::Cancelled => Err(Failure::new(libc::ECANCELED, format!("stage {} of {bb} was terminated", last.id))),
            _ => Err(Failure::new(libc::EIO, format!("stage {} of {bb} failed: {}", last.id, last.error.clone().unwrap_or_default()))),
        }
    })
}

fn terminate(bb: *const c_char) -> c_int {
    call(|| {
        let (client, bb, stages) = stages_of(bb)?;
        let open: Vec<u64> = stages.iter().filter(|s| !s.state.is_final()).map(|s| s.id).collect();
        if open.is_empty() {
            return Err(Failure::new(libc::ENOENT, format!("no pending stage of {bb}")));
        }
        runtime().block_on(async {
            for id in open {
                client.stage_cancel(id).await?;
            }
            Ok(())
        })
    })
}

macro_rules! stage_calls {
    ($($in_fn:ident, $out_fn:ident, $query_fn:ident, $wait_fn:ident, $terminate_fn:ident => $kind:expr;)*) => {$(
        /// # Safety
        /// Arguments are NUL-terminated strings.
        #[no_mangle]
        pub unsafe extern "C" fn $in_fn(bb: *const c_char, pfs: *const c_char) -> c_int {
            submit_typed(StageDirection::In, $kind, bb, pfs, 0)
        }
        /// # Safety
        /// Arguments are NUL-terminated strings.
        #[no_mangle]
        pub unsafe extern "C" fn $out_fn(bb: *const c_char, pfs: *const c_char, stage_type: c_int) -> c_int {
            submit_typed(StageDirection::Out, $kind, bb, pfs, stage_type)
        }
        /// # Safety
        /// `bb` is a NUL-terminated string; the counters are NULL or point to ints.
        #[no_mangle]
        pub unsafe extern "C" fn $query_fn(bb: *const c_char, complete: *mut c_int, pending: *mut c_int, deferred: *mut c_int, failed: *mut c_int) -> c_int {
            query(bb, complete, pending, deferred, failed)
        }
        /// # Safety
        /// `bb` is a NUL-terminated string.
        #[no_mangle]
        pub unsafe extern "C" fn $wait_fn(bb: *const c_char) -> c_int {
            wait(bb)
        }
        /// # Safety
        /// `bb` is a NUL-terminated string.
        #[no_mangle]
        pub unsafe extern "C" fn $terminate_fn(bb: *const c_char) -> c_int {
            terminate(bb)
        }
    )*};
}

stage_calls! {
    surge_stage_file_in, surge_stage_file_out, surge_query_file_stage, surge_wait_file_stage, surge_terminate_file_stage => StageKind::File;
    surge_stage_dir_in, surge_stage_dir_out, surge_query_dir_stage, surge_wait_dir_stage, surge_terminate_dir_stage => StageKind::Directory;
    surge_stage_list_in, surge_stage_list_out, surge_query_list_stage, surge_wait_list_stage, surge_terminate_list_stage => StageKind::List;
}

/// A failed stage (or a failed file of one): its burst-buffer path as the caller wrote the
/// directory it was asked of (a mount path stays a mount path), and the errno it stands for.
pub struct FailedStage {
    pub path: String,
    pub errno: i32,
}

/// The failed stages at or below `dir` (a burst-buffer path as the caller wrote it), oldest
/// first; of a stage that copied files, each file that failed. With `skip_retried`, a failure
/// is left out once a later stage was submitted for the same path (the stage's, or the failed
/// file's), whatever became of that one: the failure was retried.
pub fn failed_stages(dir: &str, skip_retried: bool) -> CallResult<Vec<FailedStage>> {
    let (client, inner) = resolve(dir)?;
    let inner_dir = inner.trim_end_matches('/');
    let prefix = format!("{inner_dir}/");
    let user_dir = dir.trim_end_matches('/');
    runtime().block_on(async {
        let stages = client.stage_list(None).await?;
        let retried = |after: u64, path: &str| skip_retried && stages.iter().any(|s| s.id > after && s.bb_path == path);
        let mut found = Vec::new();
        for stage in &stages {
            if stage.state != StageState::Failed || !(stage.bb_path == inner || stage.bb_path.starts_with(&prefix)) {
                continue;
            }
            if retried(stage.id, &stage.bb_path) {
                continue;
            }
            let files: Vec<String> =
                client.stage_files(stage.id).await?.into_iter().filter(|f| f.state == StageState::Failed).map(|f| f.bb_path).collect();
            let errno = failure_errno(stage);
            if files.is_empty() {
                found.push(FailedStage { path: stage.bb_path.clone(), errno });
            }
            found.extend(files.into_iter().filter(|f| !retried(stage.id, f)).map(|path| FailedStage { path, errno }));
        }
        // Shown in the form the caller used.
        for failed in found.iter_mut() {
            failed.path = format!("{user_dir}{}", &failed.path[inner_dir.len()..]);
        }
        Ok(found)
    })
}

/// The failed-stage iterator of `surge_open_failed_stage`.
pub struct FailedStages {
    paths: std::iter::Peekable<std::vec::IntoIter<CString>>,
}

/// # Safety
/// `bb_dir` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn surge_open_failed_stage(bb_dir: *const c_char) -> *mut FailedStages {
    let mut found = Vec::new();
    let code = call(|| {
        // SAFETY: the C caller passes a NUL-terminated string (surge.h).
        let dir = unsafe { text(bb_dir, "burst-buffer directory")? };
        found = failed_stages(&dir, false)?;
        Ok(())
    });
    if code != 0 {
        // SAFETY: errno is thread-local and always writable.
        unsafe { *libc::__errno_location() = -code };
        return std::ptr::null_mut();
    }
    let paths: Vec<CString> = found.into_iter().filter_map(|f| CString::new(f.path).ok()).collect();
    Box::into_raw(Box::new(FailedStages { paths: paths.into_iter().peekable() }))
}

/// # Safety
/// `failed` comes from `surge_open_failed_stage`; `path` has room for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn surge_next_failed_stage(failed: *mut FailedStages, path: *mut c_char, size: usize) -> c_int {
    if failed.is_null() || path.is_null() {
        return -libc::EINVAL;
    }
    // SAFETY: not NULL (checked above), from surge_open_failed_stage and not yet closed.
    let iter = unsafe { &mut *failed };
    let Some(next) = iter.paths.peek() else { return 0 };
    let bytes = next.as_bytes_with_nul();
    if bytes.len() > size {
        // Kept for the next call: a caller with a bigger buffer still gets it.
        return -libc::ERANGE;
    }
    // SAFETY: the caller guarantees `size` writable bytes at `path`.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), path, bytes.len()) };
    iter.paths.next();
    1
}

/// # Safety
/// `failed` comes from `surge_open_failed_stage` (or is NULL) and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn surge_close_failed_stage(failed: *mut FailedStages) {
    if !failed.is_null() {
        // SAFETY: made by Box::into_raw in surge_open_failed_stage; the caller gives it up here.
        drop(unsafe { Box::from_raw(failed) });
    }
}

/// The message of this thread's last failed call.
#[no_mangle]
pub extern "C" fn surge_last_error() -> *const c_char {
    call::last_error()
}
