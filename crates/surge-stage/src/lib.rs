//! # surge-stage — the stage coordinator
//!
//! Moves files between the parallel file system (PFS) and a Surge instance. The coordinator
//! answers the staging service ([`surge_proto::stage::StageService`]): it plans a stage (which
//! files, which sizes: [`plan`]), drives the copy in batches and windows ([`run`]), and keeps
//! the stage's state and per-file progress. It moves no file data itself and holds no server
//! state: it is a client of the instance ([`surge_client`]), reaching the servers whose
//! addresses its configuration names ([`Peers`]), and each server, a *worker*, copies the
//! chunks it owns between the PFS and its node-local store when asked (`StageCopy`).
//!
//! The daemon (`surge-server`) hosts a coordinator beside each data server and hands it the
//! staging requests the server receives; a control plane could host it instead.
//!
//! That state is journaled in `<root>/stages/<id>.json` (written under a temporary name, then
//! renamed) at every change of state and about once a second while bytes move, so it survives
//! a restart of the coordinator. A stage that was queued or running when the coordinator
//! stopped is reported failed after the restart, and the temporary files of its unfinished
//! files are removed: a stage is never reported done unless every file was published.

mod plan;
mod run;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use surge_proto::auth::Secret;
use surge_proto::stage::{Answer, StageDirection, StageFile, StageService, StageSpec, StageState, StageSummary, StageWhen};
use surge_proto::{Error, ErrorCode, Timestamp};

/// How often progress of running stages is journaled.
const JOURNAL_EVERY: Duration = Duration::from_secs(1);

/// What a restart tells about a stage it interrupted.
const INTERRUPTED: &str = "interrupted: the coordinating server stopped before the stage finished; unfinished files were not published";

/// Hidden name a file is written under before it gets its own: unique per stage and file,
/// and short enough for any file-name limit.
pub(crate) fn temporary_name(id: u64, index: usize) -> String {
    format!(".surge-stage-{id}-{index}.tmp")
}

/// The temporary PFS path of file `index` of stage-out `id`: beside its final name, so the
/// rename that publishes it stays within one directory.
pub(crate) fn pfs_temporary(final_path: &str, id: u64, index: usize) -> String {
    let (dir, _) = plan::split_path(final_path);
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
    fn report(&self) -> StageFile {
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
    fn summary(&self) -> StageSummary {
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
    fn finish_unfinished(&mut self, state: StageState, why: &str) {
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

/// Where the instance's servers listen, in index order.
#[derive(Clone, Debug)]
pub enum Peers {
    /// Known when the coordinator starts (a one-server instance: the server beside it).
    Fixed(Vec<SocketAddr>),
    /// Read from the instance's descriptor when a stage starts: the servers' addresses are
    /// known only once all of them are up, after the coordinators started.
    Descriptor { path: PathBuf, count: usize },
}

impl Peers {
    fn resolve(&self) -> Result<Vec<SocketAddr>, Error> {
        match self {
            Peers::Fixed(addrs) => Ok(addrs.clone()),
            Peers::Descriptor { path, count } => {
                let desc = surge_client::InstanceDescriptor::load_from(path)?;
                let mut servers = desc.servers;
                servers.sort_by_key(|s| s.index);
                if servers.len() != *count {
                    let detail = format!("{} lists {} servers; this instance has {count}", path.display(), servers.len());
                    return Err(Error::new(ErrorCode::Invalid, detail));
                }
                Ok(servers.into_iter().map(|s| s.addr).collect())
            }
        }
    }
}

/// What a coordinator needs to know of its instance.
#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    pub peers: Peers,
    pub chunk_size: u64,
    pub secret: Secret,
    /// This node's address: connections to the servers start from it.
    pub node: IpAddr,
}

/// The stages one coordinator runs.
pub struct Coordinator {
    stages: Arc<Stages>,
}

impl Coordinator {
    /// Loads the journal kept in `dir`, failing the stages a stop interrupted, and starts
    /// journaling progress (call inside a tokio runtime).
    pub fn open(dir: &Path, config: CoordinatorConfig) -> std::io::Result<Coordinator> {
        let stages = Stages::open(dir, config)?;
        stages.start_journal();
        Ok(Coordinator { stages })
    }
}

impl StageService for Coordinator {
    fn submit(&self, spec: StageSpec) -> Answer<u64> {
        let stages = self.stages.clone();
        Box::pin(async move { stages.submit(spec).await })
    }

    fn list(&self, bb_path: Option<&str>) -> Vec<StageSummary> {
        self.stages.list(bb_path)
    }

    fn files(&self, id: u64, offset: u32, limit: u32) -> Result<(Vec<StageFile>, u64), Error> {
        self.stages.files(id, offset, limit)
    }

    fn cancel(&self, id: u64) -> Result<(), Error> {
        self.stages.cancel(id)
    }

    fn revoke(&self, bb_path: &str) -> Result<(), Error> {
        self.stages.revoke(bb_path)
    }

    fn job_end(&self) {
        self.stages.job_end()
    }
}

/// The stages this coordinator runs, and their journal.
pub(crate) struct Stages {
    dir: PathBuf,
    pub(crate) config: CoordinatorConfig,
    next_id: AtomicU64,
    table: Mutex<BTreeMap<u64, Arc<Stage>>>,
}

impl Stages {
    /// Loads the journal; stages interrupted by a stop of this server are failed now.
    fn open(dir: &Path, config: CoordinatorConfig) -> std::io::Result<Arc<Stages>> {
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
    fn start_journal(self: &Arc<Self>) {
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
    async fn submit(self: &Arc<Self>, spec: StageSpec) -> Result<u64, Error> {
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

    fn list(&self, bb_path: Option<&str>) -> Vec<StageSummary> {
        // Filter before summarizing: a summary walks every file of its stage.
        self.all()
            .iter()
            .filter_map(|s| {
                let record = s.record.lock().unwrap();
                bb_path.is_none_or(|p| record.spec.bb_path == p).then(|| record.summary())
            })
            .collect()
    }

    fn files(&self, id: u64, offset: u32, limit: u32) -> Result<(Vec<StageFile>, u64), Error> {
        let stage = self.get(id)?;
        let record = stage.record.lock().unwrap();
        let files = record.files.iter().skip(offset as usize).take(limit as usize).map(FileRecord::report).collect();
        Ok((files, record.files.len() as u64))
    }

    /// A stage that has not started ends at once; a running one stops after the copies in
    /// flight, removing what it had not published.
    fn cancel(&self, id: u64) -> Result<(), Error> {
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
    fn revoke(&self, bb_path: &str) -> Result<(), Error> {
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
    fn job_end(self: &Arc<Self>) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use surge_client::{Client, ClientOptions};
    use surge_proto::stage::StageKind;
    use surge_server::in_process::InProcessInstance;

    /// A coordinator beside in-process servers stages a PFS tree in (every server copying its
    /// chunks), reports it done with every byte, and after a restart on its journal still
    /// knows the stage.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stage_in_runs_to_done_and_its_record_survives_a_restart() {
        let scratch = std::env::temp_dir().join(format!("surge-coordinator-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        let (pfs, journal) = (scratch.join("pfs"), scratch.join("stages"));
        std::fs::create_dir_all(pfs.join("sub")).unwrap();
        let big: Vec<u8> = (0..(5 << 20) + 3).map(|i| (i * 7 % 256) as u8).collect();
        std::fs::write(pfs.join("big.dat"), &big).unwrap();
        std::fs::write(pfs.join("sub/small.dat"), b"small").unwrap();

        let config = |addrs: &[SocketAddr], secret: &Secret| CoordinatorConfig {
            peers: Peers::Fixed(addrs.to_vec()),
            chunk_size: 1 << 20,
            secret: *secret,
            node: "127.0.0.1".parse().unwrap(),
        };
        let instance = InProcessInstance::start_with(&scratch.join("servers"), 3, 1 << 30, move |index, addrs, secret| {
            (index == 0).then(|| Arc::new(Coordinator::open(&journal, config(addrs, secret)).unwrap()) as Arc<dyn StageService>)
        })
        .await
        .unwrap();
        let opts = ClientOptions { local_io: false, ..Default::default() };
        let client = Client::from_parts(instance.addrs.clone(), 1 << 20, instance.secret, opts).unwrap();
        let spec = client.stage_spec(StageDirection::In, StageKind::Directory, StageWhen::Immediate, "/in", pfs.to_str().unwrap(), true);
        let stage = client.stage_submit_checked(spec).await.unwrap();
        let done = client.wait_stages(None, |s| s.id == stage.id, |_| {}).await.unwrap();
        assert_eq!(done[0].state, StageState::Done, "{:?}", done[0].error);
        assert_eq!((done[0].files_done, done[0].bytes_done), (2, big.len() as u64 + 5));
        let f = client.open("/in/big.dat", false).await.unwrap();
        assert_eq!(f.pread(0, big.len()).await.unwrap(), big);
        f.close().await.unwrap();

        instance.stop().await;
        let reopened = Coordinator::open(&scratch.join("stages"), config(&[], &[0; 32])).unwrap();
        let listed = reopened.list(Some("/in"));
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].id, listed[0].state), (stage.id, StageState::Done));
        let _ = std::fs::remove_dir_all(&scratch);
    }
}
