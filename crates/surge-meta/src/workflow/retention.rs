//! Directories' retention policies (see [`surge_proto::workflow::RetentionPolicy`]): which
//! published files may leave the burst buffer now, and which must be staged out first. The
//! directory's home decides from what it alone knows — its log, its groups' acknowledgements,
//! which files are open — and a keeper beside server 0 acts (stages out, removes) and
//! reports back. Journaled with the namespace: which files are to be staged survives a
//! restart of either.

use std::collections::{BTreeSet, HashSet};

use serde::{Deserialize, Serialize};
use surge_proto::workflow::{Due, DueAction, Publication, RetentionPolicy, RetentionStatus};
use surge_proto::{ErrorCode, Ino};

use super::groups::Group;
use super::publications::{names_in, Entries, NamePattern, PublicationLog};
use crate::error::{Result, ServerError};
use crate::model::{Inodes, MetaStore};

/// What the journal keeps of a directory's policy.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RetentionState {
    pub policy: RetentionPolicy,
    /// The directory's path in the instance, which stage-outs name.
    pub path: String,
    /// Files published under the policy so far (numbering them for `stage_every`).
    pub published: u64,
    /// Publications to stage out that are not staged yet.
    pub to_stage: BTreeSet<u64>,
    pub staged: u64,
    pub removed: u64,
}

/// A policy's state after a step, or its removal (None), for the journal.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RetentionChange {
    pub dir: Ino,
    pub state: Option<RetentionState>,
}

/// Whether every group of the directory that takes `p` has acknowledged it (and one does).
fn acknowledged(groups: &std::collections::BTreeMap<String, Group>, p: &Publication) -> bool {
    let mut takers = groups.values().filter(|g| g.matches(&p.name)).peekable();
    takers.peek().is_some() && takers.all(|g| g.finished(p))
}

/// Whether the publication numbered `cursor` in `dir`'s log can still be staged out: it is
/// kept and its file still has the name it was published under.
fn stageable(inodes: &Inodes, entries: &Entries, dir: Ino, cursor: u64) -> bool {
    entries.get(cursor).is_some_and(|p| names_in(inodes, dir, &p.name, p.ino))
}

impl MetaStore {
    fn retention_changed(&mut self, dir: Ino) {
        if let Some(changes) = self.changes.as_mut() {
            changes.retentions.insert(dir);
        }
    }

    pub fn set_retention(&mut self, dir: Ino, path: &str, policy: Option<RetentionPolicy>) -> Result<()> {
        self.dir(dir)?;
        if let Some(policy) = &policy {
            NamePattern::new(&policy.pattern)?;
            if policy.keep_last.is_none() && !policy.after_groups && policy.stage_out.is_none() {
                return Err(ServerError::new(ErrorCode::Invalid, "a policy keeps the last N, waits for groups, or stages out"));
            }
            if policy.stage_every == 0 || policy.stage_out.as_deref().is_some_and(|to| !to.starts_with('/')) {
                return Err(ServerError::new(ErrorCode::Invalid, "stage_every is 1 or more, and stage_out an absolute PFS path"));
            }
        }
        let log = self.publications.entry(dir).or_default();
        log.retention = policy.map(|policy| {
            let kept = log.retention.take();
            let (published, to_stage, staged, removed) = match kept {
                // Counts and files still to stage go on under a changed policy.
                Some(old) => (old.published, old.to_stage, old.staged, old.removed),
                None => (0, BTreeSet::new(), 0, 0),
            };
            RetentionState { policy, path: path.to_string(), published, to_stage, staged, removed }
        });
        self.retention_changed(dir);
        Ok(())
    }

    pub fn retention(&self, dir: Ino) -> Result<Option<RetentionStatus>> {
        self.dir(dir)?;
        let Some(log) = self.publications.get(&dir) else { return Ok(None) };
        Ok(log.retention.as_ref().map(|s| RetentionStatus {
            policy: s.policy.clone(),
            path: s.path.clone(),
            published: s.published,
            staged: s.staged,
            removed: s.removed,
            to_stage: s.to_stage.iter().filter(|&&cursor| stageable(&self.inodes, &log.entries, dir, cursor)).count() as u64,
        }))
    }

    /// A publication in `dir`: counted by its policy, marked to stage when its turn. The
    /// same file published again under the same name while still to stage (rewritten, or
    /// renamed into place and then closed) stays one file: its mark moves to the newer
    /// publication, and it is not numbered again.
    pub(crate) fn count_for_retention(&mut self, dir: Ino, publication: &Publication) {
        let inodes = &self.inodes;
        let Some(log) = self.publications.get_mut(&dir) else { return };
        let Some(state) = log.retention.as_mut() else { return };
        if !NamePattern::new(&state.policy.pattern).is_ok_and(|m| m.matches(&publication.name)) {
            return;
        }
        let entries = &log.entries;
        // The mark of the same file's older publication.
        let superseded =
            |c: &u64| *c != publication.cursor && entries.get(*c).is_some_and(|p| p.ino == publication.ino && p.name == publication.name);
        let again = state.to_stage.iter().any(superseded);
        // Let go too: marks that can no longer be acted on (the file was removed or renamed
        // away before its stage-out, or its publication left the log).
        state.to_stage.retain(|c| !superseded(c) && stageable(inodes, entries, dir, *c));
        if again {
            state.to_stage.insert(publication.cursor);
        } else {
            state.published += 1;
            if state.policy.stage_out.is_some() && state.published % state.policy.stage_every as u64 == 0 {
                state.to_stage.insert(publication.cursor);
            }
        }
        self.retention_changed(dir);
    }

    /// What every policy here wants done now: stage-outs of the files to stage (as soon as
    /// they are published), removals of the files the policy lets go. Nothing for a file
    /// open anywhere.
    pub fn retention_due(&self) -> Vec<DueAction> {
        let mut due = Vec::new();
        for (&dir, log) in &self.publications {
            if let Some(state) = &log.retention {
                self.due_in(dir, log, state, &mut due);
            }
        }
        due
    }

    fn due_in(&self, dir: Ino, log: &PublicationLog, state: &RetentionState, due: &mut Vec<DueAction>) {
        let Ok(matcher) = NamePattern::new(&state.policy.pattern) else { return };
        // Each file by its latest publication, newest first.
        let mut seen = HashSet::new();
        let files: Vec<&Publication> = log
            .entries
            .newest_first()
            .filter(|p| matcher.matches(&p.name) && names_in(&self.inodes, dir, &p.name, p.ino) && seen.insert(p.ino))
            .collect();
        let keep = state.policy.keep_last.map_or(0, |n| n as usize);
        for (age, p) in files.iter().enumerate() {
            if self.inodes.get(&p.ino).is_some_and(|i| i.opens > 0) {
                continue; // Being written, read or staged.
            }
            let action = |action| DueAction { dir, cursor: p.cursor, name: p.name.clone(), ino: p.ino, action };
            if state.to_stage.contains(&p.cursor) {
                if let Some(to) = &state.policy.stage_out {
                    let from = format!("{}/{}", state.path.trim_end_matches('/'), p.name);
                    due.push(action(Due::StageOut { from, to: format!("{}/{}", to.trim_end_matches('/'), p.name) }));
                }
                continue;
            }
            let kept = (state.policy.keep_last.is_some() && age < keep) || (state.policy.after_groups && !acknowledged(&log.groups, p));
            if !kept {
                due.push(action(Due::Remove));
            }
        }
    }

    /// Whether writes to `ino` wait at the high-water mark: its directory (by the last name
    /// this server gave it) has a retention policy or a consumer group, or is not known here.
    pub fn waits_for_room(&self, ino: Ino) -> bool {
        let Some(named) = self.inodes.get(&ino).and_then(|inode| inode.named.as_deref()) else { return true };
        match self.publications.get(&named.0) {
            Some(log) => log.retention.is_some() || !log.groups.is_empty(),
            None => !self.inodes.contains_key(&named.0),
        }
    }

    /// The keeper did what was due for `dir`'s publication `cursor`.
    pub fn retained(&mut self, dir: Ino, cursor: u64, staged: bool) -> Result<()> {
        self.dir(dir)?;
        let Some(state) = self.publications.get_mut(&dir).and_then(|log| log.retention.as_mut()) else {
            return Err(ServerError::new(ErrorCode::NotFound, "the directory has no retention policy"));
        };
        if staged {
            if state.to_stage.remove(&cursor) {
                state.staged += 1;
            }
        } else {
            state.removed += 1;
        }
        self.retention_changed(dir);
        Ok(())
    }

    /// Replays a journaled policy.
    pub(crate) fn restore_retention(&mut self, change: RetentionChange) {
        if self.holds_dir(change.dir) {
            self.publications.entry(change.dir).or_default().retention = change.state;
        }
    }

    pub(crate) fn retention_change(&self, dir: Ino) -> RetentionChange {
        RetentionChange { dir, state: self.publications.get(&dir).and_then(|log| log.retention.clone()) }
    }

    pub(crate) fn all_retentions(&self) -> impl Iterator<Item = RetentionChange> + '_ {
        self.publications.iter().filter_map(|(&dir, log)| log.retention.clone().map(|state| RetentionChange { dir, state: Some(state) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{FileKind, Timestamp, ROOT_INO};

    fn publish(s: &mut MetaStore, name: &str) -> Ino {
        let ino = s.create(ROOT_INO, name, 0o644, 0, 0, 0, true, true, None).unwrap().ino;
        s.commit(ino, Some(1), None, true, true).unwrap();
        ino
    }

    fn due(s: &MetaStore) -> Vec<(String, bool)> {
        let mut due: Vec<(String, bool)> =
            s.retention_due().into_iter().map(|d| (d.name, matches!(d.action, Due::StageOut { .. }))).collect();
        due.sort();
        due
    }

    fn policy(keep_last: Option<u32>, after_groups: bool, stage_out: Option<&str>, stage_every: u32) -> RetentionPolicy {
        RetentionPolicy { pattern: "c*".into(), keep_last, after_groups, stage_out: stage_out.map(Into::into), stage_every }
    }

    /// Keep the last two, stage every second out first: stage-outs are due at once, removals
    /// of the older files once staged (if they are to be); open files and other names wait.
    #[test]
    fn policies_name_what_is_due() {
        let mut s = MetaStore::new(0, 0, 0);
        s.set_retention(ROOT_INO, "/", Some(policy(Some(2), false, Some("/pfs"), 2))).unwrap();
        let c1 = publish(&mut s, "c1");
        publish(&mut s, "c2");
        publish(&mut s, "other");
        publish(&mut s, "c3");
        publish(&mut s, "c4");
        assert_eq!(due(&s), [("c1".into(), false), ("c2".into(), true), ("c4".into(), true)]);
        s.open(c1).unwrap();
        assert_eq!(due(&s), [("c2".into(), true), ("c4".into(), true)], "an open file is not removed");
        let c2_cursor = s.retention_due().into_iter().find(|d| d.name == "c2").unwrap().cursor;
        s.retained(ROOT_INO, c2_cursor, true).unwrap();
        assert!(due(&s).contains(&("c2".into(), false)), "staged: now removable");
        let status = s.retention(ROOT_INO).unwrap().unwrap();
        assert_eq!((status.published, status.staged, status.to_stage), (4, 1, 1));
        assert_eq!(s.set_retention(ROOT_INO, "/", Some(policy(None, false, None, 1))).unwrap_err().code, ErrorCode::Invalid);
        assert_eq!(s.set_retention(ROOT_INO, "/", Some(policy(None, false, Some("pfs"), 1))).unwrap_err().code, ErrorCode::Invalid);
    }

    /// A file published again while still to stage is staged once, as its newer
    /// publication; a file removed or renamed away before its stage-out is no longer waited
    /// for.
    #[test]
    fn each_file_is_staged_once_and_a_removed_one_is_not_waited_for() {
        let mut s = MetaStore::new(0, 0, 0);
        s.set_retention(ROOT_INO, "/", Some(policy(None, false, Some("/pfs"), 1))).unwrap();
        let c1 = publish(&mut s, "c1");
        s.open(c1).unwrap();
        s.commit(c1, Some(2), None, true, true).unwrap();
        publish(&mut s, "c2");
        publish(&mut s, "c3");
        assert_eq!(due(&s), [("c1".into(), true), ("c2".into(), true), ("c3".into(), true)]);
        s.unlink(ROOT_INO, "c2").unwrap();
        s.rename(ROOT_INO, "c3", ROOT_INO, "elsewhere", false, None).unwrap();
        let status = s.retention(ROOT_INO).unwrap().unwrap();
        assert_eq!((status.published, status.to_stage), (3, 1), "c1 once; c2 and c3 gone: {status:?}");
        let c1_due = s.retention_due().into_iter().find(|d| d.name == "c1").unwrap();
        s.retained(ROOT_INO, c1_due.cursor, true).unwrap();
        let status = s.retention(ROOT_INO).unwrap().unwrap();
        assert_eq!((status.staged, status.to_stage), (1, 0));
        publish(&mut s, "c4");
        assert_eq!(s.publications[&ROOT_INO].retention.as_ref().unwrap().to_stage.len(), 1, "the dead marks were let go");
    }

    /// Writes wait at the high-water mark for files in directories something drains (a
    /// policy or a group), and for files whose directory is not known here.
    #[test]
    fn only_drained_directories_hold_their_writers() {
        let mut s = MetaStore::new(0, 0, 0);
        let frames = s.make_dir_inode(ROOT_INO, 0o755, 0, 0, 0, None, Default::default(), None, None).unwrap().ino;
        s.insert_entry(ROOT_INO, "frames", frames, FileKind::Dir, false, None).unwrap();
        let frame = s.create(frames, "f1", 0o644, 0, 0, 0, true, true, None).unwrap().ino;
        let c1 = publish(&mut s, "c1");
        assert!(!s.waits_for_room(c1) && !s.waits_for_room(frame), "nothing drains either directory yet");
        s.claim(ROOT_INO, "vis", None, "x", 60_000, Timestamp { secs: 10, nanos: 0 }).unwrap();
        assert!(s.waits_for_room(c1), "a consumer group drains the root");
        s.set_retention(frames, "/frames", Some(policy(Some(5), false, None, 1))).unwrap();
        assert!(s.waits_for_room(frame), "so does a retention policy");
        assert!(s.waits_for_room(ROOT_INO + 999), "not known here: held, as before");
    }

    /// After groups: a file goes once every group taking it acknowledged it, not before, and
    /// not with no group at all.
    #[test]
    fn after_groups_waits_for_every_group() {
        let mut s = MetaStore::new(0, 0, 0);
        s.set_retention(ROOT_INO, "/", Some(policy(None, true, None, 1))).unwrap();
        publish(&mut s, "c1");
        assert!(due(&s).is_empty(), "no group has it yet");
        let now = Timestamp { secs: 10, nanos: 0 };
        for group in ["vis", "archive"] {
            s.claim(ROOT_INO, group, None, "x", 60_000, now).unwrap();
        }
        s.done(ROOT_INO, Some("vis"), "c1", None, now).unwrap();
        assert!(due(&s).is_empty(), "one group still holds it");
        s.done(ROOT_INO, Some("archive"), "c1", None, now).unwrap();
        assert_eq!(due(&s), [("c1".into(), false)]);
    }
}
