//! Directories' publication logs (see [`surge_proto::workflow`]): which files were published
//! in a directory homed here, in order, each under the cursor a watcher resumes from.
//!
//! A file is published by the close of a handle that wrote it ([`MetaStore::commit`] with
//! `wrote`) and by a rename or link into a directory. The close names the file by the last
//! name this server gave it (`Inode::named`): files are homed with the directory they are
//! made in, so the name is here unless the file was moved to a directory homed elsewhere
//! (then the rename into that directory published it there). Logs are journaled with the
//! namespace (a publication is there after a crash exactly when the step that made it is)
//! and keep the newest [`KEPT_PER_DIRECTORY`] publications of each directory.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use surge_proto::workflow::{Publication, PublicationPage};
use surge_proto::{ErrorCode, FileKind, Ino, Timestamp};

use super::groups::Group;
use crate::error::{Result, ServerError};
use crate::model::{Body, Inodes, MetaStore};

/// Publications a directory's log keeps; older ones are dropped (a watcher whose cursor is
/// older is told, see [`PublicationPage::oldest`]).
pub const KEPT_PER_DIRECTORY: usize = 100_000;
/// Publications one read looks at, matched or not: bounds the time it holds the metadata lock.
const EXAMINED_PER_READ: usize = 65_536;

/// One directory's log, and the consumer groups that take from it.
#[derive(Default)]
pub(crate) struct PublicationLog {
    pub(crate) entries: Entries,
    pub(crate) groups: BTreeMap<String, Group>,
    pub(crate) retention: Option<super::retention::RetentionState>,
}

/// A log's publications.
#[derive(Default)]
pub(crate) struct Entries {
    kept: VecDeque<Publication>,
    /// The cursor of the next publication.
    next: u64,
}

impl Entries {
    fn push(&mut self, publication: Publication) {
        self.next = self.next.max(publication.cursor.saturating_add(1));
        self.kept.push_back(publication);
        while self.kept.len() > KEPT_PER_DIRECTORY {
            self.kept.pop_front();
        }
    }

    /// A journaled publication, replayed. One the log has already is skipped: after a crash
    /// between a snapshot and the emptying of the journal, the journal's records are replayed
    /// over the snapshot that holds them. One that would leave a gap is refused: cursors in a
    /// log are consecutive (what [`Entries::get`] relies on), and no step writes a gap.
    fn restore(&mut self, publication: Publication) -> std::result::Result<(), String> {
        let next = self.next.max(1);
        if publication.cursor < next {
            return Ok(());
        }
        if publication.cursor == u64::MAX || (!self.kept.is_empty() && publication.cursor > next) {
            return Err(format!("publication {} where {next} was next", publication.cursor));
        }
        self.push(publication);
        Ok(())
    }

    /// The oldest cursor kept (the next one when none is).
    pub(crate) fn oldest(&self) -> u64 {
        self.kept.front().map_or(self.next.max(1), |p| p.cursor)
    }

    /// The publication numbered `cursor`, if kept. Cursors in the log are consecutive: it
    /// is found by its number.
    pub(crate) fn get(&self, cursor: u64) -> Option<&Publication> {
        self.kept.get(cursor.checked_sub(self.oldest())? as usize)
    }

    /// The publications kept, newest first.
    pub(crate) fn newest_first(&self) -> impl Iterator<Item = &Publication> {
        self.kept.iter().rev()
    }

    /// The publications kept from `cursor` on.
    pub(crate) fn from(&self, cursor: u64) -> impl Iterator<Item = &Publication> {
        let start = cursor.saturating_sub(self.oldest()).min(self.kept.len() as u64) as usize;
        self.kept.range(start..)
    }
}

/// What the journal keeps of a publication: its directory and itself.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct PublicationState {
    pub dir: Ino,
    pub publication: Publication,
}

/// A glob over names, as a shell matches them: `*` and `?` do not match a leading `.`.
pub struct NamePattern(glob::Pattern);

impl NamePattern {
    pub fn new(pattern: &str) -> Result<NamePattern> {
        if pattern.len() > surge_proto::workflow::MAX_PATTERN_LEN {
            return Err(ServerError::new(ErrorCode::Invalid, "pattern too long"));
        }
        glob::Pattern::new(pattern)
            .map(NamePattern)
            .map_err(|e| ServerError::new(ErrorCode::Invalid, format!("bad pattern '{pattern}': {e}")))
    }

    pub fn matches(&self, name: &str) -> bool {
        let options = glob::MatchOptions { case_sensitive: true, require_literal_separator: true, require_literal_leading_dot: true };
        self.0.matches_with(name, options)
    }
}

impl Default for NamePattern {
    fn default() -> NamePattern {
        NamePattern::new("*").expect("'*' is a pattern")
    }
}

/// Whether `dir/name` names `ino` among `inodes` (for callers that hold another part of the
/// store mutably).
pub(crate) fn names_in(inodes: &Inodes, dir: Ino, name: &str, ino: Ino) -> bool {
    matches!(inodes.get(&dir).map(|i| &i.body), Some(Body::Dir(d)) if d.entries.get(name).is_some_and(|e| e.ino == ino))
}

impl MetaStore {
    /// Publishes the file `ino` under the last name this server gave it, if it still has it.
    pub(crate) fn publish(&mut self, ino: Ino) {
        let Some(inode) = self.inodes.get(&ino) else { return };
        let Some(named) = inode.named.as_deref() else { return };
        let (dir, name) = (named.0, named.1.to_string());
        if inode.attr.kind == FileKind::File && self.names(dir, &name, ino) {
            self.publish_entry(dir, name, ino);
        }
    }

    /// Whether a rename or link published `ino` while it was open, under the name it still
    /// has and with the size and mtime it still has: then the close that follows has nothing
    /// new to publish. The kernel sends a FUSE release after close(2) has returned, so a
    /// program's write, close, rename reaches the server as flush, rename, release; without
    /// this the file would be published twice (a group would hand it out twice).
    pub(crate) fn published_as_it_is(&self, ino: Ino) -> bool {
        let Some(&(dir, cursor)) = self.published_while_open.get(&ino) else { return false };
        let (Some(inode), Some(publication)) = (self.inodes.get(&ino), self.publications.get(&dir).and_then(|log| log.entries.get(cursor)))
        else {
            return false;
        };
        // Under the name the close would publish (which does nothing if the name is gone).
        publication.size == Some(inode.attr.size)
            && publication.mtime == Some(inode.attr.mtime)
            && inode.named.as_deref().is_some_and(|named| named.0 == dir && *named.1 == *publication.name)
    }

    /// Publishes `dir/name`, which names `ino` (a file homed here or elsewhere).
    pub(crate) fn publish_entry(&mut self, dir: Ino, name: String, ino: Ino) {
        let attr = self.inodes.get(&ino).map(|inode| &inode.attr);
        let (size, mtime) = (attr.map(|a| a.size), attr.map(|a| a.mtime));
        let log = &mut self.publications.entry(dir).or_default().entries;
        let publication = Publication { cursor: log.next.max(1), name, ino, size, mtime, at: Timestamp::now() };
        if let Some(changes) = self.changes.as_mut() {
            changes.workflow.push(crate::WorkflowChange::Published(PublicationState { dir, publication: publication.clone() }));
        }
        log.push(publication.clone());
        if self.inodes.get(&ino).is_some_and(|inode| inode.opens > 0) {
            self.published_while_open.insert(ino, (dir, publication.cursor));
        }
        self.count_for_retention(dir, &publication);
        self.publications_made += 1;
    }

    /// Publications made since this store was created: changes when a log grows.
    pub fn publications_made(&self) -> u64 {
        self.publications_made
    }

    /// Whether `dir/name` names `ino`.
    fn names(&self, dir: Ino, name: &str, ino: Ino) -> bool {
        names_in(&self.inodes, dir, name, ino)
    }

    /// `dir`'s publications after `after` whose file still has the name it was published
    /// under and whose name `pattern` matches, at most `limit`.
    pub fn publications(&self, dir: Ino, after: u64, limit: usize, pattern: &NamePattern) -> Result<PublicationPage> {
        self.dir(dir)?;
        let Some(log) = self.publications.get(&dir).map(|log| &log.entries) else {
            return Ok(PublicationPage { publications: Vec::new(), next: after, oldest: 1 });
        };
        let oldest = log.oldest();
        let mut page = PublicationPage { publications: Vec::new(), next: after.max(oldest.saturating_sub(1)), oldest };
        for publication in log.from(after.saturating_add(1)).take(EXAMINED_PER_READ) {
            if page.publications.len() >= limit {
                break;
            }
            page.next = publication.cursor;
            if pattern.matches(&publication.name) && self.names(dir, &publication.name, publication.ino) {
                page.publications.push(publication.clone());
            }
        }
        Ok(page)
    }

    /// Replays a journaled publication.
    pub(crate) fn restore_publication(&mut self, state: PublicationState) {
        if self.holds_dir(state.dir) {
            if let Err(e) = self.publications.entry(state.dir).or_default().entries.restore(state.publication) {
                tracing::error!(dir = state.dir, "a journaled publication is not replayed: {e}");
            }
        }
    }

    /// Every log, for a snapshot.
    pub(crate) fn all_publications(&self) -> impl Iterator<Item = PublicationState> + '_ {
        self.publications
            .iter()
            .flat_map(|(&dir, log)| log.entries.kept.iter().map(move |p| PublicationState { dir, publication: p.clone() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::ROOT_INO;

    fn names(page: &PublicationPage) -> Vec<&str> {
        page.publications.iter().map(|p| p.name.as_str()).collect()
    }

    /// Closes after writing and renames publish, in order; a close of a handle that did not
    /// write, a file still open for writing, a hidden name and a removed file do not show.
    #[test]
    fn closes_after_writing_and_renames_publish_in_order() {
        let mut s = MetaStore::new(0, 0, 0);
        let all = NamePattern::default();
        let create = |s: &mut MetaStore, name: &str| s.create(ROOT_INO, name, 0o644, 0, 0, 0, true, true, None).unwrap().ino;
        let a = create(&mut s, "a");
        s.commit(a, Some(10), None, false, false).unwrap(); // a flush: still open
        assert!(s.publications(ROOT_INO, 0, 10, &all).unwrap().publications.is_empty());
        s.commit(a, None, None, true, true).unwrap();
        let reader = create(&mut s, "read-only");
        s.commit(reader, None, None, true, false).unwrap();
        let tmp = create(&mut s, ".b.tmp");
        s.commit(tmp, Some(3), None, true, true).unwrap();
        s.rename(ROOT_INO, ".b.tmp", ROOT_INO, "b", false, None).unwrap();
        let gone = create(&mut s, "gone");
        s.commit(gone, Some(1), None, true, true).unwrap();
        s.unlink(ROOT_INO, "gone").unwrap();
        let page = s.publications(ROOT_INO, 0, 10, &all).unwrap();
        assert_eq!(names(&page), ["a", "b"]);
        assert_eq!(page.publications[0].size, Some(10));
        assert_eq!((page.next, page.oldest), (4, 1), "the hidden and the removed file were looked at");
        // Resuming after a's cursor; a limit of one.
        let after_a = s.publications(ROOT_INO, page.publications[0].cursor, 1, &all).unwrap();
        assert_eq!(names(&after_a), ["b"]);
        assert_eq!(after_a.next, page.publications[1].cursor);
        assert_eq!(names(&s.publications(ROOT_INO, 0, 10, &NamePattern::new(".*").unwrap()).unwrap()), Vec::<&str>::new());
        // A file renamed onto a published name replaces it: the old publication names a
        // file that no longer has that name.
        let c = create(&mut s, ".c");
        s.commit(c, Some(2), None, true, true).unwrap();
        s.rename(ROOT_INO, ".c", ROOT_INO, "a", false, None).unwrap();
        assert_eq!(names(&s.publications(ROOT_INO, 0, 10, &all).unwrap()), ["b", "a"]);
        assert_eq!(s.publications(ROOT_INO + 999, 0, 10, &all).unwrap_err().code, ErrorCode::NotFound);
    }

    /// A journal replayed over the snapshot that already holds its records (a crash between
    /// writing a snapshot and emptying the journal) leaves each publication once, and a
    /// record that would leave a gap in a log's cursors is not replayed.
    #[test]
    fn publications_replayed_twice_are_kept_once() {
        let mut s = MetaStore::new(0, 0, 0);
        s.track_changes();
        let _ = s.take_changes();
        for name in ["a", "b"] {
            let f = s.create(ROOT_INO, name, 0o644, 0, 0, 0, true, true, None).unwrap().ino;
            s.commit(f, Some(1), None, true, true).unwrap();
        }
        let journal = s.take_changes();
        let mut replayed = MetaStore::new(0, 0, 0);
        for record in [s.snapshot(), journal] {
            replayed.apply(record).unwrap();
        }
        let all = NamePattern::default();
        let page = replayed.publications(ROOT_INO, 0, 10, &all).unwrap();
        assert_eq!(names(&page), ["a", "b"]);
        assert_eq!(page.publications.iter().map(|p| p.cursor).collect::<Vec<_>>(), [1, 2]);

        let gap = |cursor| PublicationState { dir: ROOT_INO, publication: Publication { cursor, ..page.publications[0].clone() } };
        for cursor in [9, u64::MAX] {
            let record = crate::Record { workflow: vec![crate::WorkflowChange::Published(gap(cursor))], ..Default::default() };
            replayed.apply(record).unwrap();
        }
        assert_eq!(names(&replayed.publications(ROOT_INO, 0, 10, &all).unwrap()), ["a", "b"], "a gap was replayed");
    }

    /// Write, close, rename as it reaches the server through a mount (flush, rename, then the
    /// release the kernel sends later): one publication. A handle that writes after the
    /// rename publishes again at its close.
    #[test]
    fn a_file_renamed_into_place_before_its_release_is_published_once() {
        let mut s = MetaStore::new(0, 0, 0);
        let all = NamePattern::default();
        let f = s.create(ROOT_INO, ".f.tmp", 0o644, 0, 0, 0, true, true, None).unwrap().ino;
        s.commit(f, Some(5), Some(Timestamp { secs: 7, nanos: 0 }), false, false).unwrap(); // the flush
        s.rename(ROOT_INO, ".f.tmp", ROOT_INO, "f", false, None).unwrap();
        s.commit(f, None, None, true, true).unwrap(); // the release
        assert_eq!(names(&s.publications(ROOT_INO, 0, 10, &all).unwrap()), ["f"]);
        let g = s.create(ROOT_INO, ".g.tmp", 0o644, 0, 0, 0, true, true, None).unwrap().ino;
        s.rename(ROOT_INO, ".g.tmp", ROOT_INO, "g", false, None).unwrap();
        s.commit(g, Some(9), Some(Timestamp { secs: 8, nanos: 0 }), true, true).unwrap(); // written after the rename
        let page = s.publications(ROOT_INO, 0, 10, &all).unwrap();
        assert_eq!(names(&page), ["f", "g", "g"]);
        assert_eq!(page.publications[2].size, Some(9));
        // Closed and reopened: the rename's publication no longer stands for the handle.
        s.open(f).unwrap();
        s.commit(f, None, None, true, true).unwrap();
        assert_eq!(names(&s.publications(ROOT_INO, 0, 10, &all).unwrap()), ["f", "g", "g", "f"]);
    }

    /// A log keeps its newest publications; a reader from before them is told where it
    /// resumes. A snapshot replayed gives the same log.
    #[test]
    fn a_log_keeps_its_newest_publications_and_survives_a_snapshot() {
        let mut s = MetaStore::new(0, 0, 0);
        let f = s.create(ROOT_INO, "f", 0o644, 0, 0, 0, true, false, None).unwrap().ino;
        for _ in 0..KEPT_PER_DIRECTORY + 5 {
            s.open(f).unwrap();
            s.commit(f, None, None, true, true).unwrap();
        }
        let page = s.publications(ROOT_INO, 0, 3, &NamePattern::default()).unwrap();
        assert_eq!(page.oldest, 6);
        assert_eq!(page.publications.iter().map(|p| p.cursor).collect::<Vec<_>>(), [6, 7, 8]);
        let mut replayed = MetaStore::new(0, 0, 0);
        for record in s.snapshot().split() {
            replayed.apply(record).unwrap();
        }
        let again = replayed.publications(ROOT_INO, 0, 3, &NamePattern::default()).unwrap();
        assert_eq!(again, page);
        // New publications continue the numbering.
        replayed.open(f).unwrap();
        replayed.commit(f, None, None, true, true).unwrap();
        let last = replayed.publications(ROOT_INO, KEPT_PER_DIRECTORY as u64 + 5, 3, &NamePattern::default()).unwrap();
        assert_eq!(last.publications[0].cursor, KEPT_PER_DIRECTORY as u64 + 6);
    }

    #[test]
    fn patterns_match_as_a_shell_does() {
        let star = NamePattern::default();
        assert!(star.matches("plt00001.h5"));
        assert!(!star.matches(".plt00001.h5.tmp"), "a leading dot is matched only literally");
        let plots = NamePattern::new("plt*.h5").unwrap();
        assert!(plots.matches("plt00001.h5") && !plots.matches("chk00001.h5"));
        assert!(NamePattern::new(".*.tmp").unwrap().matches(".x.tmp"));
        assert!(NamePattern::new("[").is_err());
        assert!(NamePattern::new(&"*".repeat(5000)).is_err());
    }
}
