//! What the coordinator journals of a stage: its spec, state and per-file progress, one JSON
//! file per stage in the journal directory, and the temporary names unfinished files carry.
//!
//! A temporary name follows from the stage's id and the file's index alone, so after a crash
//! the record is enough to find every temporary an unfinished file left; a stage-out's
//! temporary sits beside its final name, so the rename that publishes it stays within one
//! directory.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use surge_proto::stage::{StageDirection, StageFile, StageSpec, StageState, StageSummary};
use surge_proto::{ErrorCode, Timestamp};

/// Hidden name a file is written under before it gets its own: unique per stage and file,
/// and short enough for any file-name limit.
pub(crate) fn temporary_name(id: u64, index: usize) -> String {
    format!(".surge-stage-{id}-{index}.tmp")
}

/// The temporary PFS path of file `index` of stage-out `id`: beside its final name, so the
/// rename that publishes it stays within one directory.
pub(crate) fn pfs_temporary(final_path: &str, id: u64, index: usize) -> String {
    let (dir, _) = crate::plan::split_path(final_path);
    format!("{}/{}", dir.trim_end_matches('/'), temporary_name(id, index))
}

pub(crate) fn now_secs() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default()
}

/// One file of a stage, as journaled.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub(crate) struct FileRecord {
    pub bb_path: String,
    pub pfs_path: String,
    pub size: u64,
    pub done: u64,
    pub state: StageState,
    pub started: Option<f64>,
    pub finished: Option<f64>,
    pub error: Option<String>,
}

impl FileRecord {
    pub(crate) fn report(&self) -> StageFile {
        StageFile {
            bb_path: self.bb_path.clone(),
            pfs_path: self.pfs_path.clone(),
            state: self.state,
            bytes_total: self.size,
            bytes_done: self.done,
            elapsed: elapsed(self.started, self.finished),
            error: self.error.clone(),
        }
    }
}

fn elapsed(started: Option<f64>, finished: Option<f64>) -> f64 {
    match started {
        Some(start) => (finished.unwrap_or_else(now_secs) - start).max(0.0),
        None => 0.0,
    }
}

/// One stage, as journaled.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub(crate) struct StageRecord {
    pub id: u64,
    pub spec: StageSpec,
    pub state: StageState,
    pub submitted: Timestamp,
    pub started: Option<f64>,
    pub finished: Option<f64>,
    pub error: Option<String>,
    /// The error's code when the stage failed before copying (missing source...).
    #[serde(default)]
    pub error_code: Option<ErrorCode>,
    pub files: Vec<FileRecord>,
}

impl StageRecord {
    pub(crate) fn summary(&self) -> StageSummary {
        let count = |state| self.files.iter().filter(|f| f.state == state).count() as u64;
        StageSummary {
            id: self.id,
            direction: self.spec.direction,
            kind: self.spec.kind,
            when: self.spec.when,
            bb_path: self.spec.bb_path.clone(),
            pfs_path: self.spec.pfs_path.clone(),
            state: self.state,
            files_total: self.files.len() as u64,
            files_done: count(StageState::Done),
            files_failed: count(StageState::Failed),
            bytes_total: self.files.iter().map(|f| f.size).sum(),
            bytes_done: self.files.iter().map(|f| f.done).sum(),
            submitted: self.submitted,
            elapsed: elapsed(self.started, self.finished),
            error: self.error.clone(),
            error_code: self.error_code,
        }
    }

    /// Ends every unfinished file (and the stage) in `state`, removing stage-out temporaries
    /// (their names follow from the record, so none is missed after a crash).
    pub(crate) fn finish_unfinished(&mut self, state: StageState, why: &str) {
        let now = now_secs();
        let (id, direction) = (self.id, self.spec.direction);
        for (index, file) in self.files.iter_mut().enumerate().filter(|(_, f)| !f.state.is_final()) {
            file.state = state;
            file.error.get_or_insert_with(|| why.to_string());
            file.finished = Some(now);
            if direction == StageDirection::Out {
                remove_temporary(Path::new(&pfs_temporary(&file.pfs_path, id, index)));
            }
        }
        self.state = state;
        self.error.get_or_insert_with(|| why.to_string());
        self.finished = Some(now);
    }
}

/// A stage in this coordinator's table.
pub(crate) struct Stage {
    pub record: Mutex<StageRecord>,
    pub cancel: AtomicBool,
    /// Progress not yet journaled.
    pub dirty: AtomicBool,
}

impl Stage {
    pub fn id(&self) -> u64 {
        self.record.lock().unwrap().id
    }

    pub fn spec(&self) -> StageSpec {
        self.record.lock().unwrap().spec.clone()
    }

    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// Changes one file's record and marks the stage for journaling.
    pub fn update_file(&self, index: usize, change: impl FnOnce(&mut FileRecord)) {
        change(&mut self.record.lock().unwrap().files[index]);
        self.dirty.store(true, Ordering::Relaxed);
    }
}

/// Removes a temporary file of a stage that did not finish (missing is fine).
pub(crate) fn remove_temporary(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => tracing::info!(path = %path.display(), "removed the temporary file of an unfinished stage"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(path = %path.display(), "could not remove a temporary stage file: {e}"),
    }
}
