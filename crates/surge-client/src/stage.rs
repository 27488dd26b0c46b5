//! Staging from a client's side: submit a copy between the PFS and the instance, ask how it
//! goes, wait for it, stop it. The copying itself is done by the servers (see
//! `surge_proto::stage`); these calls talk to the stage coordinator, server 0 of the instance
//! as this client sees it.
//!
//! Stages are named by id, or, as in DataWarp's libdatawarp, by the burst-buffer path they
//! were submitted for: [`Client::stage_counts`] and [`Client::wait_stages`] take that path.

use std::time::Duration;

use surge_proto::stage::{
    StageCancel, StageDirection, StageFile, StageFiles, StageFilesPage, StageJobEnd, StageKind, StageList, StageRevoke, StageSpec,
    StageState, StageSubmit, StageSummary, StageWhen,
};
use surge_proto::ErrorCode;

use crate::{Client, Error, Result};

/// The coordinator of every stage this client submits.
const COORDINATOR: usize = 0;
/// Files per `StageFiles` page: a page stays far below the message size limit.
const FILES_PAGE: u32 = 2000;
/// How often waiting re-asks the coordinator: quickly at first (a short stage should not
/// wait a whole period for its answer), then backing off to the longest period.
const POLL_FIRST: Duration = Duration::from_millis(2);
const POLL_LONGEST: Duration = Duration::from_millis(100);

/// How many stages of a path are in which state (libdatawarp's query counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageCounts {
    pub complete: u32,
    pub pending: u32,
    pub deferred: u32,
    pub failed: u32,
}

impl StageCounts {
    pub fn of<'a>(stages: impl IntoIterator<Item = &'a StageSummary>) -> StageCounts {
        let mut counts = StageCounts::default();
        for stage in stages {
            match stage.state {
                StageState::Done => counts.complete += 1,
                StageState::Queued | StageState::Running => counts.pending += 1,
                StageState::Deferred => counts.deferred += 1,
                StageState::Failed => counts.failed += 1,
                StageState::Cancelled => {}
            }
        }
        counts
    }
}

impl Client {
    /// A stage of `bb_path` (inside the instance) and `pfs_path` (absolute), for this
    /// instance and this client's identity.
    pub fn stage_spec(
        &self,
        direction: StageDirection,
        kind: StageKind,
        when: StageWhen,
        bb_path: &str,
        pfs_path: &str,
        verify: bool,
    ) -> StageSpec {
        let (uid, gid) = self.identity();
        StageSpec { direction, kind, when, bb_path: bb_path.to_string(), pfs_path: pfs_path.to_string(), verify, uid, gid }
    }

    /// Submits a stage; returns its id at once (the copy runs in the background).
    pub async fn stage_submit(&self, spec: StageSpec) -> Result<u64> {
        if !spec.bb_path.starts_with('/') {
            return Err(Error::new(
                ErrorCode::Invalid,
                format!("burst-buffer path '{}' must be absolute within the instance", spec.bb_path),
            ));
        }
        if !spec.pfs_path.starts_with('/') {
            return Err(Error::new(ErrorCode::Invalid, format!("PFS path '{}' must be absolute", spec.pfs_path)));
        }
        self.call(COORDINATOR, StageSubmit { spec }).await
    }

    /// Submits a stage and answers it as it stands once submitted. An immediate stage is
    /// planned before the answer: one that could not be (a missing source, a bad list) is an
    /// error now, with the planning failure's code (a missing source: NotFound), rather than a
    /// stage that a later query finds failed.
    pub async fn stage_submit_checked(&self, spec: StageSpec) -> Result<StageSummary> {
        let id = self.stage_submit(spec).await?;
        let stage = self.stage(id).await?;
        if stage.state == StageState::Failed {
            let code = stage.error_code.unwrap_or(ErrorCode::Io);
            return Err(Error::new(code, format!("stage {id} failed: {}", stage.error.unwrap_or_default())));
        }
        Ok(stage)
    }

    /// Every stage (`None`), or the stages submitted for `bb_path`.
    pub async fn stage_list(&self, bb_path: Option<&str>) -> Result<Vec<StageSummary>> {
        let mut all = Vec::new();
        loop {
            let after = all.last().map(|s: &StageSummary| s.id);
            let page = self.call(COORDINATOR, StageList { bb_path: bb_path.map(str::to_string), after }).await?;
            all.extend(page.stages);
            if !page.more {
                return Ok(all);
            }
        }
    }

    /// One stage by id.
    pub async fn stage(&self, id: u64) -> Result<StageSummary> {
        self.stage_list(None)
            .await?
            .into_iter()
            .find(|s| s.id == id)
            .ok_or_else(|| Error::new(ErrorCode::NotFound, format!("no stage {id}")))
    }

    /// The files of stage `id` with their states.
    pub async fn stage_files(&self, id: u64) -> Result<Vec<StageFile>> {
        let mut all = Vec::new();
        loop {
            let StageFilesPage { files, total } =
                self.call(COORDINATOR, StageFiles { id, offset: all.len() as u32, limit: FILES_PAGE }).await?;
            let last_page = files.is_empty();
            all.extend(files);
            if last_page || all.len() as u64 >= total {
                return Ok(all);
            }
        }
    }

    pub async fn stage_cancel(&self, id: u64) -> Result<()> {
        self.call(COORDINATOR, StageCancel { id }).await
    }

    /// Drops the job-end stages of `bb_path` that have not started.
    pub async fn stage_revoke(&self, bb_path: &str) -> Result<()> {
        self.call(COORDINATOR, StageRevoke { bb_path: bb_path.to_string() }).await
    }

    /// Starts every deferred (job-end) stage.
    pub async fn stage_job_end(&self) -> Result<()> {
        self.call(COORDINATOR, StageJobEnd).await
    }

    pub async fn stage_counts(&self, bb_path: &str) -> Result<StageCounts> {
        Ok(StageCounts::of(&self.stage_list(Some(bb_path)).await?))
    }

    /// Waits until none of the stages `select` picks from the list is queued or running,
    /// calling `progress` with them after every poll; returns them in their final states.
    /// Deferred stages do not hold the wait up: they start only at job end.
    pub async fn wait_stages<F>(
        &self,
        bb_path: Option<&str>,
        select: impl Fn(&StageSummary) -> bool,
        mut progress: F,
    ) -> Result<Vec<StageSummary>>
    where
        F: FnMut(&[StageSummary]),
    {
        let mut period = POLL_FIRST;
        loop {
            let stages: Vec<StageSummary> = self.stage_list(bb_path).await?.into_iter().filter(|s| select(s)).collect();
            progress(&stages);
            if stages.iter().all(|s| !matches!(s.state, StageState::Queued | StageState::Running)) {
                return Ok(stages);
            }
            tokio::time::sleep(period).await;
            period = (period * 2).min(POLL_LONGEST);
        }
    }
}
