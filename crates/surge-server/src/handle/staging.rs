//! The staging service: chunk copies this server does for its own chunks
//! ([`crate::stage_copy`], on a blocking thread: PFS calls may take long), and everything else,
//! handed to the stage coordinator attached beside the server.

use surge_meta::error::{Result, ServerError};
use surge_proto::stage::*;

use super::Answer;

use crate::session::Session;

impl Session {
    pub(super) fn staging(&mut self, request: StagingRequest) -> Answer {
        let shared = self.shared.clone();
        match request {
            StagingRequest::CopyOrder(order) => Answer::later::<CopyOrder>(async move {
                let copier = shared.clone();
                let work =
                    tokio::task::spawn_blocking(move || crate::stage_copy::execute(&copier.data, copier.index, copier.count, &order));
                let outcomes = work.await.map_err(|e| ServerError::new(surge_proto::ErrorCode::Io, format!("copy order failed: {e}")))?;
                // A stage-in's chunks are on the mirror too before the order counts as done.
                if let Some(seq) = shared.mirror.barrier() {
                    shared.mirror.reached(seq).await;
                }
                Ok(outcomes)
            }),
            // What a stage creates is its submitter's (when this server knows who that is).
            StagingRequest::StageSubmit(submit)
                if self.caller.as_ref().is_some_and(|c| c.check_new_owner(submit.spec.uid, submit.spec.gid, None).is_err()) =>
            {
                Answer::Failure(ServerError::new(surge_proto::ErrorCode::NotPermitted, "a stage runs as the user who submits it"))
            }
            StagingRequest::StageSubmit(submit) => match shared.coordinator() {
                Ok(coordinator) => {
                    let submitted = coordinator.submit(submit.spec);
                    Answer::later::<StageSubmit>(async move { submitted.await.map_err(ServerError::from) })
                }
                Err(e) => Answer::Failure(e),
            },
            StagingRequest::StageList(list) => {
                Answer::of::<StageList>(shared.coordinator().map(|c| c.list(list.bb_path.as_deref(), list.after)))
            }
            StagingRequest::StageFiles(f) => Answer::of::<StageFiles>(coordinated(&self.shared, |c| {
                let (files, total) = c.files(f.id, f.offset, f.limit)?;
                Ok(StageFilesPage { files, total })
            })),
            StagingRequest::StageCancel(c) => Answer::of::<StageCancel>(coordinated(&self.shared, |co| co.cancel(c.id))),
            StagingRequest::StageRevoke(r) => Answer::of::<StageRevoke>(coordinated(&self.shared, |c| c.revoke(&r.bb_path))),
            StagingRequest::StageJobEnd(_) => Answer::of::<StageJobEnd>(shared.coordinator().map(|c| c.job_end())),
        }
    }
}

/// Asks the coordinator beside this server.
fn coordinated<T>(shared: &crate::Shared, ask: impl FnOnce(&dyn StageService) -> std::result::Result<T, surge_proto::Error>) -> Result<T> {
    Ok(ask(shared.coordinator()?.as_ref())?)
}
