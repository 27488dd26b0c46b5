//! The stages one coordinator runs: its table, kept in step with the journal (saved at every
//! change of state and about once a second while bytes move), and what the staging service's
//! requests do to it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use surge_proto::stage::{StageFile, StagePage, StageSpec, StageState, StageWhen, PAGE_BYTES};
use surge_proto::{Error, ErrorCode, Timestamp};

use crate::records::{FileRecord, Stage, StageRecord};
use crate::{run, CoordinatorConfig};

/// How often progress of running stages is journaled.
const JOURNAL_EVERY: Duration = Duration::from_secs(1);

/// What a restart tells about a stage it interrupted.
const INTERRUPTED: &str = "interrupted: the coordinating server stopped before the stage finished; unfinished files were not published";

/// The stages this coordinator runs, and their journal.
pub(crate) struct Stages {
    dir: PathBuf,
    pub(crate) config: CoordinatorConfig,
    next_id: AtomicU64,
    table: Mutex<BTreeMap<u64, Arc<Stage>>>,
}

impl Stages {
    /// Loads the journal; stages interrupted by a stop of this server are failed now.
    pub(crate) fn open(dir: &Path, config: CoordinatorConfig) -> std::io::Result<Arc<Stages>> {
        std::fs::create_dir_all(dir)?;
        let mut table = BTreeMap::new();
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let record: StageRecord =
                match std::fs::read(&path).map_err(|e| e.to_string()).and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string())) {
                    Ok(record) => record,
                    Err(e) => {
                        tracing::warn!(path = %path.display(), "unreadable stage journal, ignored: {e}");
                        continue;
                    }
                };
            let stage = Arc::new(Stage { record: Mutex::new(record), cancel: AtomicBool::new(false), dirty: AtomicBool::new(false) });
            table.insert(stage.id(), stage);
        }
        let stages = Arc::new(Stages {
            dir: dir.to_path_buf(),
            config,
            next_id: AtomicU64::new(table.keys().max().map_or(1, |m| m + 1)),
            table: Mutex::new(table),
        });
        for stage in stages.all() {
            let interrupted = {
                let mut record = stage.record.lock().unwrap();
                let interrupted = matches!(record.state, StageState::Queued | StageState::Running);
                if interrupted {
                    tracing::warn!(id = record.id, "stage interrupted by a restart: marked failed");
                    record.finish_unfinished(StageState::Failed, INTERRUPTED);
                }
                interrupted
            };
            if interrupted {
                stages.save(&stage);
            }
        }
        Ok(stages)
    }

    /// Journals running stages' progress periodically. Runs until the process ends.
    pub(crate) fn start_journal(self: &Arc<Self>) {
        let stages = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(JOURNAL_EVERY).await;
                for stage in stages.all() {
                    if stage.dirty.swap(false, Ordering::Relaxed) {
                        let stages = stages.clone();
                        let _ = tokio::task::spawn_blocking(move || stages.save(&stage)).await;
                    }
                }
            }
        });
    }

    fn all(&self) -> Vec<Arc<Stage>> {
        self.table.lock().unwrap().values().cloned().collect()
    }

    fn get(&self, id: u64) -> Result<Arc<Stage>, Error> {
        self.table.lock().unwrap().get(&id).cloned().ok_or_else(|| Error::new(ErrorCode::NotFound, format!("no stage {id}")))
    }

    /// Writes a stage's journal file (temporary name, then rename: never half a record).
    pub(crate) fn save(&self, stage: &Stage) {
        let (id, bytes) = {
            let record = stage.record.lock().unwrap();
            (record.id, serde_json::to_vec(&*record).expect("a stage record serializes"))
        };
        let path = self.dir.join(format!("{id}.json"));
        let tmp = self.dir.join(format!("{id}.json.tmp"));
        if let Err(e) = std::fs::write(&tmp, bytes).and_then(|_| std::fs::rename(&tmp, &path)) {
            tracing::error!(id, "could not journal stage: {e}");
        }
    }

    /// Records a new stage. Immediate stages are planned before this returns (so a missing
    /// source or a bad path fails the stage at once, and the caller can say so), then copied
    /// in the background; job-end stages wait for [`Stages::job_end`].
    pub(crate) async fn submit(self: &Arc<Self>, spec: StageSpec) -> Result<u64, Error> {
        for (what, path) in [("burst-buffer", &spec.bb_path), ("PFS", &spec.pfs_path)] {
            if !path.starts_with('/') {
                return Err(Error::new(ErrorCode::Invalid, format!("{what} path '{path}' must be absolute")));
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = match spec.when {
            StageWhen::Immediate => StageState::Queued,
            StageWhen::JobEnd => StageState::Deferred,
        };
        let record = StageRecord {
            id,
            spec,
            state,
            submitted: Timestamp::now(),
            started: None,
            finished: None,
            error: None,
            error_code: None,
            files: Vec::new(),
        };
        let stage = Arc::new(Stage { record: Mutex::new(record), cancel: AtomicBool::new(false), dirty: AtomicBool::new(false) });
        self.table.lock().unwrap().insert(id, stage.clone());
        self.save(&stage);
        if state == StageState::Queued {
            let planned = run::start(self.clone(), stage);
            // The run reports once its file list is known (or the stage failed planning).
            let _ = planned.await;
        }
        Ok(id)
    }

    pub(crate) fn list(&self, bb_path: Option<&str>, after: Option<u64>) -> StagePage {
        let (mut stages, mut bytes) = (Vec::new(), 0);
        let from = after.map_or(0, |id| id.saturating_add(1));
        let table: Vec<Arc<Stage>> = self.table.lock().unwrap().range(from..).map(|(_, s)| s.clone()).collect();
        for stage in table {
            // Filter before summarizing: a summary walks every file of its stage.
            let record = stage.record.lock().unwrap();
            if bb_path.is_some_and(|p| record.spec.bb_path != p) {
                continue;
            }
            let summary = record.summary();
            bytes += summary.encoded_bound();
            if bytes > PAGE_BYTES && !stages.is_empty() {
                return StagePage { stages, more: true };
            }
            stages.push(summary);
        }
        StagePage { stages, more: false }
    }

    pub(crate) fn files(&self, id: u64, offset: u32, limit: u32) -> Result<(Vec<StageFile>, u64), Error> {
        let stage = self.get(id)?;
        let record = stage.record.lock().unwrap();
        let (mut files, mut bytes) = (Vec::new(), 0);
        for file in record.files.iter().skip(offset as usize).take(limit as usize).map(FileRecord::report) {
            bytes += file.encoded_bound();
            if bytes > PAGE_BYTES && !files.is_empty() {
                break;
            }
            files.push(file);
        }
        Ok((files, record.files.len() as u64))
    }

    /// A stage that has not started ends at once; a running one stops after the copies in
    /// flight, removing what it had not published.
    pub(crate) fn cancel(&self, id: u64) -> Result<(), Error> {
        let stage = self.get(id)?;
        {
            let mut record = stage.record.lock().unwrap();
            match record.state {
                StageState::Deferred | StageState::Queued => record.finish_unfinished(StageState::Cancelled, "cancelled before it started"),
                StageState::Running => stage.cancel.store(true, Ordering::Relaxed),
                _ => return Ok(()),
            }
        }
        self.save(&stage);
        Ok(())
    }

    /// Drops the deferred stages of `bb_path`.
    pub(crate) fn revoke(&self, bb_path: &str) -> Result<(), Error> {
        let mut found = false;
        for stage in self.all() {
            let revoked = {
                let mut record = stage.record.lock().unwrap();
                let matches = record.state == StageState::Deferred && record.spec.bb_path == bb_path;
                if matches {
                    record.finish_unfinished(StageState::Cancelled, "revoked before job end");
                }
                matches
            };
            if revoked {
                found = true;
                self.save(&stage);
            }
        }
        if found {
            Ok(())
        } else {
            Err(Error::new(ErrorCode::NotFound, format!("no job-end stage of {bb_path} to revoke")))
        }
    }

    /// The job ends: every deferred stage starts now.
    pub(crate) fn job_end(self: &Arc<Self>) {
        for stage in self.all() {
            let start = {
                let mut record = stage.record.lock().unwrap();
                let deferred = record.state == StageState::Deferred;
                if deferred {
                    record.state = StageState::Queued;
                }
                deferred
            };
            if start {
                self.save(&stage);
                drop(run::start(self.clone(), stage));
            }
        }
    }
}
