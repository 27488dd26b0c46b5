//! The staging service: chunk copies this server does for its own chunks
//! ([`crate::stage_copy`], on a blocking thread: PFS calls may take long), and everything else,
//! handed to the stage coordinator attached beside the server.

use surge_meta::error::{Result, ServerError};
use surge_proto::call::Handle;
use surge_proto::stage::*;

use super::Answer;

use crate::session::Session;

impl Handle<CopyOrder, Answer> for Session {
    fn handle(&mut self, order: CopyOrder) -> Answer {
        let server = self.server.clone();
        Answer::later::<CopyOrder>(async move {
            let copier = server.clone();
            let work = tokio::task::spawn_blocking(move || crate::stage_copy::execute(&copier.data, copier.index, copier.count, &order));
            let outcomes = work.await.map_err(|e| ServerError::new(surge_proto::ErrorCode::Io, format!("copy order failed: {e}")))?;
            // A stage-in's chunks are on the mirror too before the order counts as done.
            if let Some(seq) = server.replication.feed.barrier() {
                server.replication.feed.reached(seq).await;
            }
            Ok(outcomes)
        })
    }
}

/// Why a stage of `uid` is refused by servers that check no identities and run as `server_uid`:
/// the coordinator touches the parallel file system with the servers' user's rights, and a
/// server that is not root cannot take another's, so a stage of another user would read and
/// write there as the servers' user (a reservation shared with other users: as its owner).
/// Root's stages (an administrator's) run with those lesser rights and are let through.
fn foreign_stage(uid: u32, server_uid: u32) -> Option<String> {
    (server_uid != 0 && uid != server_uid && uid != 0).then(|| {
        format!(
            "this instance's stages run as uid {server_uid}, the user its servers run as, who cannot act as another: \
             a stage of uid {uid} is refused (copy through the mount instead)"
        )
    })
}

impl Handle<StageSubmit, Answer> for Session {
    fn handle(&mut self, submit: StageSubmit) -> Answer {
        // What a stage creates is its submitter's (when this server knows who that is).
        if self.caller.as_ref().is_some_and(|c| c.check_new_owner(submit.spec.uid, submit.spec.gid, None).is_err()) {
            return Answer::Failure(ServerError::new(surge_proto::ErrorCode::NotPermitted, "a stage runs as the user who submits it"));
        }
        if self.caller.is_none() {
            // SAFETY: geteuid takes no arguments and cannot fail.
            let server_uid = unsafe { libc::geteuid() };
            if let Some(why) = foreign_stage(submit.spec.uid, server_uid) {
                return Answer::Failure(ServerError::new(surge_proto::ErrorCode::NotPermitted, why));
            }
        }
        match self.server.coordinator() {
            Ok(coordinator) => {
                let submitted = coordinator.submit(submit.spec);
                Answer::later::<StageSubmit>(async move { submitted.await.map_err(ServerError::from) })
            }
            Err(e) => Answer::Failure(e),
        }
    }
}

impl Handle<StageList, Answer> for Session {
    fn handle(&mut self, list: StageList) -> Answer {
        Answer::of::<StageList>(self.server.coordinator().map(|c| c.list(list.bb_path.as_deref(), list.after)))
    }
}

impl Handle<StageFiles, Answer> for Session {
    fn handle(&mut self, f: StageFiles) -> Answer {
        Answer::of::<StageFiles>(coordinated(&self.server, |c| {
            let (files, total) = c.files(f.id, f.offset, f.limit)?;
            Ok(StageFilesPage { files, total })
        }))
    }
}

impl Handle<StageCancel, Answer> for Session {
    fn handle(&mut self, c: StageCancel) -> Answer {
        Answer::of::<StageCancel>(coordinated(&self.server, |co| co.cancel(c.id)))
    }
}

impl Handle<StageRevoke, Answer> for Session {
    fn handle(&mut self, r: StageRevoke) -> Answer {
        Answer::of::<StageRevoke>(coordinated(&self.server, |c| c.revoke(&r.bb_path)))
    }
}

impl Handle<StageJobEnd, Answer> for Session {
    fn handle(&mut self, _: StageJobEnd) -> Answer {
        Answer::of::<StageJobEnd>(self.server.coordinator().map(|c| c.job_end()))
    }
}

/// Asks the coordinator beside this server.
fn coordinated<T>(
    server: &crate::ServerState,
    ask: impl FnOnce(&dyn StageService) -> std::result::Result<T, surge_proto::Error>,
) -> Result<T> {
    Ok(ask(server.coordinator()?.as_ref())?)
}

#[cfg(test)]
mod tests {
    use super::foreign_stage;

    #[test]
    fn servers_of_a_user_stage_for_that_user_and_root_alone() {
        assert_eq!(foreign_stage(1000, 1000), None, "the owner's own stage");
        assert_eq!(foreign_stage(0, 1000), None, "root's, with the owner's rights");
        assert_eq!(foreign_stage(1001, 0), None, "servers running as root take the submitter's rights");
        let refused = foreign_stage(1001, 1000).unwrap();
        assert!(refused.contains("run as uid 1000") && refused.contains("uid 1001 is refused"), "{refused}");
    }
}
