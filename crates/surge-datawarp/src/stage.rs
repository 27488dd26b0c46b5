//! DataWarp's staging calls: `dw_stage_*`, `dw_query_*_stage`, `dw_wait_*_stage`,
//! `dw_terminate_*_stage` and `dw_set_stage_concurrency`.
//!
//! A file or directory call acts on the stages submitted for that path (a directory's query,
//! wait and terminate also on those of the paths below it); a list call on each of its files.
//! Of a path, the stage that stands for it is its latest one that was not terminated or
//! revoked: a stage submitted again supersedes an earlier failure, as DataWarp's restart does.
//!
//! `DW_ACTIVATE_DEFERRED_STAGE`: the coordinator starts deferred stages only all at once, at
//! job end. To start those of one path now, each is submitted again as an immediate stage of
//! the same direction, kind and paths, and, once that one is planned, the deferred one is
//! cancelled: a failure in between leaves the deferred stage in place (never neither), at
//! worst beside the new one. A stage submitted with `surge stage out --verify` is activated
//! without the verification.

use std::ffi::{c_char, c_int};

use surge::call::{call, resolve, runtime, text, CallResult, Failure};
use surge::staging::{self as capi, failure_errno};
use surge_client::stage::StageCounts;
use surge_client::surge_proto::stage::{StageDirection, StageKind, StageState, StageSummary, StageWhen};
use surge_client::surge_proto::ErrorCode;
use surge_client::Client;

/// `enum dw_stage_type`, as datawarp.h numbers it.
const DW_STAGE_IMMEDIATE: c_int = 0;
const DW_STAGE_AT_JOB_END: c_int = 1;
const DW_REVOKE_STAGE_AT_JOB_END: c_int = 2;
const DW_ACTIVATE_DEFERRED_STAGE: c_int = 3;

/// What a call acts on: the stages submitted for one path, or for a directory and every path
/// below it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    Path,
    Tree,
}

/// A DataWarp path, resolved.
struct Target {
    /// As the caller wrote it, for messages.
    shown: String,
    client: Client,
    /// Inside the instance.
    inner: String,
}

impl Target {
    fn of(shown: &str) -> CallResult<Target> {
        let (client, inner) = resolve(shown)?;
        Ok(Target { shown: shown.to_string(), client, inner })
    }

    fn covers(&self, scope: Scope, bb_path: &str) -> bool {
        let dir = self.inner.trim_end_matches('/');
        bb_path == self.inner || (scope == Scope::Tree && bb_path.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/')))
    }

    /// The stages in `scope`, oldest first.
    fn stages(&self, scope: Scope) -> CallResult<Vec<StageSummary>> {
        Ok(match scope {
            Scope::Path => runtime().block_on(self.client.stage_list(Some(&self.inner)))?,
            Scope::Tree => {
                runtime().block_on(self.client.stage_list(None))?.into_iter().filter(|s| self.covers(scope, &s.bb_path)).collect()
            }
        })
    }

    fn exists(&self) -> CallResult<bool> {
        match runtime().block_on(self.client.stat(&self.inner)) {
            Ok(_) => Ok(true),
            Err(e) if e.code == ErrorCode::NotFound => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// DataWarp's answer for a path with nothing to act on: -ENOENT if it does not exist,
    /// else -EINVAL.
    fn nothing(&self, what: &str) -> Failure {
        match self.exists() {
            Ok(false) => Failure::new(libc::ENOENT, format!("{}: no such file or directory", self.shown)),
            Ok(true) => Failure::new(libc::EINVAL, format!("{}: {what}", self.shown)),
            Err(e) => e,
        }
    }
}

/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn target(p: *const c_char) -> CallResult<Target> {
    // SAFETY: the caller's promise, passed on.
    Target::of(&unsafe { text(p, "DataWarp path") }?)
}

/// The strings of a NULL-terminated array.
///
/// # Safety
/// `list` is NULL or a NULL-terminated array of NUL-terminated strings.
unsafe fn strings(list: *const *const c_char, what: &str) -> CallResult<Vec<String>> {
    if list.is_null() {
        return Err(Failure::new(libc::EINVAL, format!("{what} is NULL")));
    }
    let mut out = Vec::new();
    loop {
        // SAFETY: the array goes on up to its NULL entry (the caller's promise).
        let item = unsafe { *list.add(out.len()) };
        if item.is_null() {
            return Ok(out);
        }
        // SAFETY: a non-NULL entry is a NUL-terminated string.
        out.push(unsafe { text(item, what) }?);
    }
}

/// `dir/NAME`, NAME the last component of `path`.
fn into_dir(dir: &str, path: &str) -> CallResult<String> {
    let name = path.trim_end_matches('/').rsplit('/').next().filter(|n| !n.is_empty() && *n != "." && *n != "..");
    let name = name.ok_or_else(|| Failure::new(libc::EINVAL, format!("'{path}' names no file")))?;
    Ok(format!("{}/{name}", dir.trim_end_matches('/')))
}

/// A stage-out of `bb` as `stage_type` asks.
fn stage_out(kind: StageKind, bb: &str, pfs: Option<&str>, stage_type: c_int) -> CallResult<()> {
    let pfs_needed = || pfs.ok_or_else(|| Failure::new(libc::EINVAL, format!("{bb}: the PFS path is NULL")));
    match stage_type {
        DW_STAGE_IMMEDIATE => capi::submit(StageDirection::Out, kind, StageWhen::Immediate, bb, pfs_needed()?).map(drop),
        DW_STAGE_AT_JOB_END => {
            let pfs = pfs_needed()?;
            // Deferred stages are planned at job end; DataWarp wants the source now.
            let target = Target::of(bb)?;
            if !target.exists()? {
                return Err(Failure::new(libc::ENOENT, format!("{bb}: no such file or directory")));
            }
            capi::submit(StageDirection::Out, kind, StageWhen::JobEnd, bb, pfs).map(drop)
        }
        DW_REVOKE_STAGE_AT_JOB_END => match capi::revoke(bb) {
            Err(f) if f.errno == libc::ENOENT => Err(Target::of(bb)?.nothing("no stage deferred to job end to revoke")),
            other => other,
        },
        DW_ACTIVATE_DEFERRED_STAGE => activate(bb),
        other => Err(Failure::new(libc::EINVAL, format!("unknown stage type {other}"))),
    }
}

/// Starts the deferred stages of `bb` now (see the module's notes).
fn activate(bb: &str) -> CallResult<()> {
    let target = Target::of(bb)?;
    let deferred: Vec<StageSummary> = target.stages(Scope::Path)?.into_iter().filter(|s| s.state == StageState::Deferred).collect();
    if deferred.is_empty() {
        return Err(target.nothing("no stage deferred to job end to activate"));
    }
    let client = &target.client;
    for stage in deferred {
        let spec = client.stage_spec(stage.direction, stage.kind, StageWhen::Immediate, &stage.bb_path, &stage.pfs_path, false);
        runtime().block_on(async {
            client.stage_submit_checked(spec).await.map_err(|e| Failure::new(e.errno(), format!("{bb}: {}", e.detail)))?;
            client.stage_cancel(stage.id).await.map_err(Failure::from)
        })?;
    }
    Ok(())
}

/// Counts by state, DataWarp's four.
#[derive(Default)]
struct Counts {
    complete: c_int,
    pending: c_int,
    deferred: c_int,
    failed: c_int,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        self.complete += other.complete;
        self.pending += other.pending;
        self.deferred += other.deferred;
        self.failed += other.failed;
    }

    fn write(&self, complete: *mut c_int, pending: *mut c_int, deferred: *mut c_int, failed: *mut c_int) {
        for (out, value) in [(complete, self.complete), (pending, self.pending), (deferred, self.deferred), (failed, self.failed)] {
            if !out.is_null() {
                // SAFETY: the caller passes NULL or a pointer to an int.
                unsafe { *out = value };
            }
        }
    }
}

/// Of each path, the stage that stands for it: the latest one not terminated or revoked.
fn standing(stages: &[StageSummary]) -> Vec<&StageSummary> {
    let mut latest = std::collections::BTreeMap::new();
    for stage in stages.iter().filter(|s| s.state != StageState::Cancelled) {
        latest.insert(stage.bb_path.as_str(), stage);
    }
    latest.into_values().collect()
}

fn query(target: &Target, scope: Scope) -> CallResult<Counts> {
    let stages = target.stages(scope)?;
    if stages.is_empty() {
        // A file with no stage: DataWarp's -EINVAL (or -ENOENT); a directory: nothing to count.
        if scope == Scope::Path || !target.exists()? {
            return Err(target.nothing("no stage of it was submitted"));
        }
    }
    let counts = StageCounts::of(standing(&stages));
    let int = |n: u32| c_int::try_from(n).unwrap_or(c_int::MAX);
    Ok(Counts { complete: int(counts.complete), pending: int(counts.pending), deferred: int(counts.deferred), failed: int(counts.failed) })
}

fn wait(target: &Target, scope: Scope) -> CallResult<()> {
    let bb_path = (scope == Scope::Path).then_some(target.inner.as_str());
    let stages = runtime().block_on(target.client.wait_stages(bb_path, |s| target.covers(scope, &s.bb_path), |_| {}))?;
    if stages.is_empty() {
        return if scope == Scope::Path || !target.exists()? { Err(target.nothing("no stage of it was submitted")) } else { Ok(()) };
    }
    // Of each path, the latest stage that ran or was to run now: deferred ones wait for job
    // end, and one cancelled while deferred was revoked or activated, not run.
    let mut deciding = std::collections::BTreeMap::new();
    for stage in &stages {
        let revoked = stage.state == StageState::Cancelled && stage.when == StageWhen::JobEnd;
        if stage.state != StageState::Deferred && !revoked {
            deciding.insert(stage.bb_path.as_str(), stage);
        }
    }
    let deciding: Vec<&StageSummary> = deciding.into_values().collect();
    if let Some(failed) = deciding.iter().filter(|s| s.state == StageState::Failed).min_by_key(|s| s.id) {
        let why = failed.error.clone().unwrap_or_default();
        return Err(Failure::new(failure_errno(failed), format!("{}: stage {} failed: {why}", target.shown, failed.id)));
    }
    if let Some(cancelled) = deciding.iter().find(|s| s.state == StageState::Cancelled) {
        return Err(Failure::new(libc::ECANCELED, format!("{}: stage {} was terminated", target.shown, cancelled.id)));
    }
    Ok(())
}

fn terminate(target: &Target, scope: Scope) -> CallResult<()> {
    let stages = target.stages(scope)?;
    if stages.is_empty() {
        return Err(target.nothing("no stage of it was submitted"));
    }
    runtime().block_on(async {
        for stage in stages.iter().filter(|s| !s.state.is_final()) {
            target.client.stage_cancel(stage.id).await?;
        }
        Ok(())
    })
}

/// # Safety
/// `dw_instance_path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dw_set_stage_concurrency(dw_instance_path: *const c_char, concurrent_stages: u32) -> c_int {
    call(|| {
        // SAFETY: the C caller passes a NUL-terminated string (datawarp.h).
        let target = unsafe { target(dw_instance_path) }?;
        if !target.exists()? {
            return Err(Failure::new(libc::ENOENT, format!("{}: no such file or directory", target.shown)));
        }
        // No such setting in the coordinator: accepted, as a hint the system may constrain.
        let _ = concurrent_stages;
        Ok(())
    })
}

/// # Safety
/// Arguments are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn dw_stage_file_in(dw_file_path: *const c_char, pfs_file_path: *const c_char) -> c_int {
    call(|| {
        // SAFETY: the C caller passes NUL-terminated strings (datawarp.h).
        let (bb, pfs) = unsafe { (text(dw_file_path, "DataWarp path")?, text(pfs_file_path, "PFS path")?) };
        capi::submit(StageDirection::In, StageKind::File, StageWhen::Immediate, &bb, &pfs).map(drop)
    })
}

/// # Safety
/// Arguments are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn dw_stage_directory_in(dw_directory: *const c_char, pfs_directory: *const c_char) -> c_int {
    call(|| {
        // SAFETY: the C caller passes NUL-terminated strings (datawarp.h).
        let (bb, pfs) = unsafe { (text(dw_directory, "DataWarp directory")?, text(pfs_directory, "PFS directory")?) };
        capi::submit(StageDirection::In, StageKind::Directory, StageWhen::Immediate, &bb, &pfs).map(drop)
    })
}

/// # Safety
/// `dw_directory` is a NUL-terminated string, `pfs_list` a NULL-terminated array of them.
#[no_mangle]
pub unsafe extern "C" fn dw_stage_list_in(dw_directory: *const c_char, pfs_list: *const *const c_char) -> c_int {
    call(|| {
        // SAFETY: the C caller passes a NUL-terminated string and a NULL-terminated array (datawarp.h).
        let (dir, list) = unsafe { (text(dw_directory, "DataWarp directory")?, strings(pfs_list, "PFS list")?) };
        for pfs in list {
            capi::submit(StageDirection::In, StageKind::File, StageWhen::Immediate, &into_dir(&dir, &pfs)?, &pfs)?;
        }
        Ok(())
    })
}

/// # Safety
/// `pfs` is NULL or a NUL-terminated string.
unsafe fn optional_text(pfs: *const c_char, what: &str) -> CallResult<Option<String>> {
    // SAFETY: not NULL here, and NUL-terminated (the caller's promise).
    (!pfs.is_null()).then(|| unsafe { text(pfs, what) }).transpose()
}

/// # Safety
/// `dw_file_path` is a NUL-terminated string, `pfs_file_path` one or NULL (revoke, activate).
#[no_mangle]
pub unsafe extern "C" fn dw_stage_file_out(dw_file_path: *const c_char, pfs_file_path: *const c_char, stage_type: c_int) -> c_int {
    call(|| {
        // SAFETY: the C caller passes NUL-terminated strings, the PFS one possibly NULL (datawarp.h).
        let (bb, pfs) = unsafe { (text(dw_file_path, "DataWarp path")?, optional_text(pfs_file_path, "PFS path")?) };
        stage_out(StageKind::File, &bb, pfs.as_deref(), stage_type)
    })
}

/// # Safety
/// `dw_directory` is a NUL-terminated string, `pfs_directory` one or NULL (revoke, activate).
#[no_mangle]
pub unsafe extern "C" fn dw_stage_directory_out(dw_directory: *const c_char, pfs_directory: *const c_char, stage_type: c_int) -> c_int {
    call(|| {
        // SAFETY: the C caller passes NUL-terminated strings, the PFS one possibly NULL (datawarp.h).
        let (bb, pfs) = unsafe { (text(dw_directory, "DataWarp directory")?, optional_text(pfs_directory, "PFS directory")?) };
        stage_out(StageKind::Directory, &bb, pfs.as_deref(), stage_type)
    })
}

/// # Safety
/// `dw_list` is a NULL-terminated array of NUL-terminated strings; `pfs_directory` one or
/// NULL (revoke, activate).
#[no_mangle]
pub unsafe extern "C" fn dw_stage_list_out(dw_list: *const *const c_char, pfs_directory: *const c_char, stage_type: c_int) -> c_int {
    call(|| {
        // SAFETY: the C caller passes a NULL-terminated array and a string or NULL (datawarp.h).
        let (list, dir) = unsafe { (strings(dw_list, "DataWarp list")?, optional_text(pfs_directory, "PFS directory")?) };
        for bb in list {
            let pfs = dir.as_deref().map(|dir| into_dir(dir, &bb)).transpose()?;
            stage_out(StageKind::File, &bb, pfs.as_deref(), stage_type)?;
        }
        Ok(())
    })
}

/// # Safety
/// `path` is a NUL-terminated string; the counters are NULL or point to ints.
#[no_mangle]
pub unsafe extern "C" fn dw_query_file_stage(
    dw_file_path: *const c_char,
    complete: *mut c_int,
    pending: *mut c_int,
    deferred: *mut c_int,
    failed: *mut c_int,
) -> c_int {
    call(|| {
        // SAFETY: the C caller passes a NUL-terminated string (datawarp.h).
        let target = unsafe { target(dw_file_path) }?;
        query(&target, Scope::Path)?.write(complete, pending, deferred, failed);
        Ok(())
    })
}

/// # Safety
/// `path` is a NUL-terminated string; the counters are NULL or point to ints.
#[no_mangle]
pub unsafe extern "C" fn dw_query_directory_stage(
    dw_directory_path: *const c_char,
    complete: *mut c_int,
    pending: *mut c_int,
    deferred: *mut c_int,
    failed: *mut c_int,
) -> c_int {
    call(|| {
        // SAFETY: the C caller passes a NUL-terminated string (datawarp.h).
        let target = unsafe { target(dw_directory_path) }?;
        query(&target, Scope::Tree)?.write(complete, pending, deferred, failed);
        Ok(())
    })
}

/// # Safety
/// `dw_list_path` is a NULL-terminated array of NUL-terminated strings; the counters are
/// NULL or point to ints.
#[no_mangle]
pub unsafe extern "C" fn dw_query_list_stage(
    dw_list_path: *const *const c_char,
    complete: *mut c_int,
    pending: *mut c_int,
    deferred: *mut c_int,
    failed: *mut c_int,
) -> c_int {
    call(|| {
        let mut counts = Counts::default();
        // SAFETY: the C caller passes a NULL-terminated array of strings (datawarp.h).
        for path in unsafe { strings(dw_list_path, "DataWarp list") }? {
            counts.add(&query(&Target::of(&path)?, Scope::Path)?);
        }
        counts.write(complete, pending, deferred, failed);
        Ok(())
    })
}

/// Runs `each` on every path of a list, all of them whatever happens; the first failure is
/// the answer.
///
/// # Safety
/// `list` is a NULL-terminated array of NUL-terminated strings.
unsafe fn each_of(list: *const *const c_char, each: impl Fn(&Target) -> CallResult<()>) -> c_int {
    call(|| {
        let mut first = Ok(());
        // SAFETY: the caller's promise, passed on.
        for path in unsafe { strings(list, "DataWarp list") }? {
            let outcome = Target::of(&path).and_then(|target| each(&target));
            if first.is_ok() {
                first = outcome;
            }
        }
        first
    })
}

/// # Safety
/// `dw_file_path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dw_wait_file_stage(dw_file_path: *const c_char) -> c_int {
    // SAFETY: the C caller passes a NUL-terminated string (datawarp.h).
    call(|| wait(&unsafe { target(dw_file_path) }?, Scope::Path))
}

/// # Safety
/// `dw_directory_path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dw_wait_directory_stage(dw_directory_path: *const c_char) -> c_int {
    // SAFETY: the C caller passes a NUL-terminated string (datawarp.h).
    call(|| wait(&unsafe { target(dw_directory_path) }?, Scope::Tree))
}

/// # Safety
/// `dw_list` is a NULL-terminated array of NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn dw_wait_list_stage(dw_list: *const *const c_char) -> c_int {
    // SAFETY: the C caller passes a NULL-terminated array of strings (datawarp.h).
    unsafe { each_of(dw_list, |target| wait(target, Scope::Path)) }
}

/// # Safety
/// `dw_file_path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dw_terminate_file_stage(dw_file_path: *const c_char) -> c_int {
    // SAFETY: the C caller passes a NUL-terminated string (datawarp.h).
    call(|| terminate(&unsafe { target(dw_file_path) }?, Scope::Path))
}

/// # Safety
/// `dw_directory_path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dw_terminate_directory_stage(dw_directory_path: *const c_char) -> c_int {
    // SAFETY: the C caller passes a NUL-terminated string (datawarp.h).
    call(|| terminate(&unsafe { target(dw_directory_path) }?, Scope::Tree))
}

/// # Safety
/// `dw_list` is a NULL-terminated array of NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn dw_terminate_list_stage(dw_list: *const *const c_char) -> c_int {
    // SAFETY: the C caller passes a NULL-terminated array of strings (datawarp.h).
    unsafe { each_of(dw_list, |target| terminate(target, Scope::Path)) }
}
