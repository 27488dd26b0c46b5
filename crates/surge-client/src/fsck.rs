//! Checking an instance's consistency, and repairing it (`surge fsck`).
//!
//! Each server's share is consistent on its own: a namespace step is atomic there, and its
//! journal replays whole steps only. What can go wrong lies *between* servers, where the client
//! sequences single-server steps and can die halfway (so can its node):
//! * `mkdir`: the directory's inode is made on its home, then linked in its parent: an
//!   **orphaned empty directory**;
//! * a rename between servers links the target, removes the source, then sets a moved
//!   directory's `..`: **two names** for one inode (a file's link count then says 1; a
//!   directory has an **extra name**), or a **wrong `..`**;
//! * removing a directory homed elsewhere retires it, removes its entry, then deletes it: a
//!   **retired directory still named** (lookups of it fail) or an orphaned one;
//! * removing a name whose inode is homed elsewhere, then the inode's last link: an
//!   **orphaned inode** that keeps its data;
//! * a removed file's data is purged on each server after its metadata: **orphaned data
//!   files** that hold capacity; a writer that dies before publishing its size leaves **data
//!   past the size** nobody can read.
//!
//! Plus what no sequence makes but a damaged share would: an entry naming an inode that does
//! not exist (**dangling entry**).
//!
//! A scan reads every server's inodes, entries and data files ([`surge_proto::admin`]);
//! [`analyse`] finds the above in it. A live instance is always between steps somewhere, so a
//! finding counts only if a second scan, a moment later, finds it again; repairs are
//! conditional steps (they fail as stale if what they repair changed meanwhile). Orphans with
//! content go to `/lost+found` (named `#<inode>`), never deleted: a burst buffer may hold the
//! only copy of a job's output.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde::Serialize;
use surge_proto::admin::{DataFileSummary, EntrySummary, InodeSummary, ListDataFiles, ListEntries, ListInodes, SyncMetadata};
use surge_proto::data::{PurgeData, TruncateData};
use surge_proto::namespace::{DropInode, InsertEntry, RemoveEntry, SetLinks, SetParent, UnretireDir};
use surge_proto::{ErrorCode, FileKind, Ino, ROOT_INO};

use crate::client::Client;
use crate::error::Result;

/// Where orphans with content are linked.
pub const LOST_AND_FOUND: &str = "lost+found";
/// How long to wait between the two scans whose findings must agree.
const RESCAN_AFTER: Duration = Duration::from_secs(1);

/// Everything a check looks at, read from every server.
#[derive(Debug, Default, Clone)]
pub struct Scan {
    pub inodes: HashMap<Ino, InodeSummary>,
    pub entries: Vec<EntrySummary>,
    /// Data files, with the index of the server holding each.
    pub data_files: Vec<(usize, DataFileSummary)>,
}

/// One inconsistency, with what its repair does.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "finding", rename_all = "kebab-case")]
pub enum Finding {
    /// `dir/name` names an inode that does not exist: the name is removed.
    DanglingEntry { dir: Ino, name: String, ino: Ino },
    /// A directory named twice (a rename between servers stopped halfway): the name that is
    /// not its `..` is removed.
    ExtraDirName { dir: Ino, name: String, ino: Ino },
    /// A directory's `..` is not the directory that names it: `..` is set to that one.
    WrongParent { ino: Ino, recorded: Ino, actual: Ino },
    /// A file's link count is not its number of names: set to the number of names (a file
    /// left with two names by a stopped rename keeps both, as hard links).
    LinkCount { ino: Ino, recorded: u32, names: u32 },
    /// A retired (half-removed) directory that still has a name: it is brought back.
    RetiredNamed { ino: Ino },
    /// An empty directory nothing names: deleted.
    OrphanEmptyDir { ino: Ino },
    /// A file, symlink or non-empty directory nothing names: linked as `/lost+found/#<ino>`
    /// (a file's link count then set to that one name).
    OrphanInode { ino: Ino, kind: FileKind, size: u64, nlink: u32 },
    /// Data of an inode that does not exist: deleted, which frees `allocated` bytes.
    OrphanData { server: usize, ino: Ino, allocated: u64 },
    /// Data past a closed file's size (a writer died before publishing it): dropped.
    DataPastSize { server: usize, ino: Ino, len: u64, size: u64 },
}

impl Finding {
    /// Short name of its class, for tables.
    pub fn class(&self) -> &'static str {
        let rank = match self {
            Finding::DanglingEntry { .. } => 0,
            Finding::ExtraDirName { .. } => 1,
            Finding::WrongParent { .. } => 2,
            Finding::LinkCount { .. } => 3,
            Finding::RetiredNamed { .. } => 4,
            Finding::OrphanEmptyDir { .. } => 5,
            Finding::OrphanInode { .. } => 6,
            Finding::OrphanData { .. } => 7,
            Finding::DataPastSize { .. } => 8,
        };
        Self::CLASSES[rank]
    }

    /// All classes, in the order a report lists them.
    pub const CLASSES: [&'static str; 9] = [
        "dangling entry",
        "directory named twice",
        "wrong ..",
        "link count",
        "retired directory named",
        "orphaned empty directory",
        "orphaned inode",
        "orphaned data file",
        "data past size",
    ];
}

/// Finds the inconsistencies of a scan. Names held by a rename in progress and inodes open
/// now are not judged (they are legitimately between states).
pub fn analyse(scan: &Scan) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut names: HashMap<Ino, Vec<&EntrySummary>> = HashMap::new();
    let mut children: HashSet<Ino> = HashSet::new();
    let mut busy: HashSet<Ino> = HashSet::new();
    for e in &scan.entries {
        children.insert(e.dir);
        if e.locked {
            busy.insert(e.ino);
        }
        if scan.inodes.contains_key(&e.ino) {
            names.entry(e.ino).or_default().push(e);
        } else if !e.locked {
            findings.push(Finding::DanglingEntry { dir: e.dir, name: e.name.clone(), ino: e.ino });
        }
    }
    let mut inodes: Vec<&InodeSummary> = scan.inodes.values().collect();
    inodes.sort_by_key(|i| i.ino);
    for inode in inodes {
        let ino = inode.ino;
        if ino == ROOT_INO || busy.contains(&ino) {
            continue;
        }
        let refs = names.get(&ino).map(Vec::as_slice).unwrap_or_default();
        if refs.is_empty() && inode.nlink == 0 && inode.opens > 0 {
            // Unlinked while open: it goes at its last close.
            continue;
        }
        match &inode.dir {
            Some(dir) if dir.retired => {
                if refs.is_empty() {
                    findings.push(Finding::OrphanEmptyDir { ino });
                } else {
                    findings.push(Finding::RetiredNamed { ino });
                }
            }
            Some(dir) => {
                let Some(kept) = refs.iter().find(|e| e.dir == dir.parent).or(refs.first()) else {
                    if children.contains(&ino) {
                        findings.push(Finding::OrphanInode { ino, kind: inode.kind, size: inode.size, nlink: inode.nlink });
                    } else {
                        findings.push(Finding::OrphanEmptyDir { ino });
                    }
                    continue;
                };
                for extra in refs.iter().filter(|e| !(e.dir == kept.dir && e.name == kept.name)) {
                    findings.push(Finding::ExtraDirName { dir: extra.dir, name: extra.name.clone(), ino });
                }
                if kept.dir != dir.parent {
                    findings.push(Finding::WrongParent { ino, recorded: dir.parent, actual: kept.dir });
                }
            }
            None if refs.is_empty() => findings.push(Finding::OrphanInode { ino, kind: inode.kind, size: inode.size, nlink: inode.nlink }),
            None if refs.len() as u32 != inode.nlink => {
                findings.push(Finding::LinkCount { ino, recorded: inode.nlink, names: refs.len() as u32 })
            }
            None => {}
        }
    }
    for (server, file) in &scan.data_files {
        match scan.inodes.get(&file.ino) {
            Some(inode) if inode.kind == FileKind::File => {
                if inode.opens == 0 && file.len > inode.size {
                    findings.push(Finding::DataPastSize { server: *server, ino: file.ino, len: file.len, size: inode.size });
                }
            }
            // Inode numbers are never reused: data without its file is nobody's.
            _ => findings.push(Finding::OrphanData { server: *server, ino: file.ino, allocated: file.allocated }),
        }
    }
    findings
}

/// What [`Client::fsck`] found and did.
#[derive(Debug, Default, Serialize)]
pub struct FsckReport {
    pub inodes: u64,
    pub entries: u64,
    pub data_files: u64,
    /// Found by both scans.
    pub findings: Vec<Finding>,
    /// Found by the first scan only: steps that were in progress.
    pub transient: usize,
    /// Per finding (same order) when repairing: None if repaired, else why not.
    pub repairs: Vec<Option<String>>,
}

impl FsckReport {
    /// How many findings are left unrepaired (all of them when no repair was asked for).
    pub fn unrepaired(&self) -> usize {
        self.findings.len() - self.repairs.iter().filter(|r| r.is_none()).count()
    }
}

impl Client {
    /// Reads every server's inodes, entries and data files.
    pub async fn fsck_scan(&self) -> Result<Scan> {
        let mut scan = Scan::default();
        for server in 0..self.server_count() {
            let mut after = None;
            loop {
                let page = self.call(server, ListInodes { after }).await?;
                after = page.inodes.last().map(|i| i.ino);
                scan.inodes.extend(page.inodes.into_iter().map(|i| (i.ino, i)));
                if !page.more {
                    break;
                }
            }
            let mut after = None;
            loop {
                let page = self.call(server, ListEntries { after }).await?;
                after = page.entries.last().map(|e| (e.dir, e.name.clone()));
                scan.entries.extend(page.entries);
                if !page.more {
                    break;
                }
            }
            let mut after = None;
            loop {
                let page = self.call(server, ListDataFiles { after }).await?;
                after = page.files.last().map(|f| f.ino);
                scan.data_files.extend(page.files.into_iter().map(|f| (server, f)));
                if !page.more {
                    break;
                }
            }
        }
        Ok(scan)
    }

    /// Checks the instance (two scans, see the module's documentation) and, with `repair`,
    /// repairs what both found.
    pub async fn fsck(&self, repair: bool) -> Result<FsckReport> {
        let mut scan = self.fsck_scan().await?;
        let first = analyse(&scan);
        let mut findings = Vec::new();
        if !first.is_empty() {
            tokio::time::sleep(RESCAN_AFTER).await;
            scan = self.fsck_scan().await?;
            let again: HashSet<Finding> = analyse(&scan).into_iter().collect();
            findings = first.iter().filter(|f| again.contains(f)).cloned().collect();
        }
        let mut report = FsckReport {
            inodes: scan.inodes.len() as u64,
            entries: scan.entries.len() as u64,
            data_files: scan.data_files.len() as u64,
            transient: first.len() - findings.len(),
            findings,
            repairs: Vec::new(),
        };
        if repair && !report.findings.is_empty() {
            for finding in &report.findings {
                let outcome = self.fsck_repair(finding).await;
                report.repairs.push(outcome.err().map(|e| e.to_string()));
            }
            // Not every repair step is durable on its own (a removal is not, in normal
            // operation): the check is done once they all are.
            self.broadcast(SyncMetadata).await?;
        }
        Ok(report)
    }

    /// Repairs one finding with a conditional step on the server concerned.
    pub async fn fsck_repair(&self, finding: &Finding) -> Result<()> {
        match finding.clone() {
            Finding::DanglingEntry { dir, name, ino } | Finding::ExtraDirName { dir, name, ino } => {
                self.call_home(dir, RemoveEntry { parent: dir, name, ino }).await
            }
            Finding::WrongParent { ino, actual, .. } => self.call_home(ino, SetParent { ino, parent: actual }).await,
            Finding::LinkCount { ino, recorded, names } => {
                self.call_home(ino, SetLinks { ino, expected: recorded, nlink: names }).await.map(drop)
            }
            Finding::RetiredNamed { ino } => self.call_home(ino, UnretireDir { ino }).await,
            Finding::OrphanEmptyDir { ino } => self.call_home(ino, DropInode { ino }).await,
            Finding::OrphanInode { ino, kind, nlink, .. } => {
                let lost = self.lost_and_found().await?;
                let insert =
                    InsertEntry { parent: lost, name: format!("#{ino:x}"), ino, kind, replace: false, retired_target: None, new_dir: None };
                if let Some(moved) = self.call_home(lost, insert).await?.reparent {
                    self.call_home(moved, SetParent { ino: moved, parent: lost }).await?;
                }
                // A file left nameless with a count above zero (a link whose name was not
                // known to be in, names removed since): its one name now.
                if kind != FileKind::Dir && nlink != 1 {
                    self.call_home(ino, SetLinks { ino, expected: nlink, nlink: 1 }).await?;
                }
                Ok(())
            }
            Finding::OrphanData { server, ino, .. } => self.call(server, PurgeData { ino, ticket: None }).await,
            Finding::DataPastSize { server, ino, size, .. } => self.call(server, TruncateData { ino, size, ticket: None }).await,
        }
    }

    /// `/lost+found`, made if missing (owner only: what it holds lost its directory's
    /// permissions).
    async fn lost_and_found(&self) -> Result<Ino> {
        match self.mkdir_at(ROOT_INO, LOST_AND_FOUND, 0o700).await {
            Ok(attr) => Ok(attr.ino),
            Err(e) if e.code == ErrorCode::Exists => Ok(self.lookup(ROOT_INO, LOST_AND_FOUND).await?.ino),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::admin::DirSummary;
    use surge_proto::ino;

    fn file(ino: Ino, nlink: u32, size: u64) -> InodeSummary {
        InodeSummary { ino, kind: FileKind::File, nlink, size, opens: 0, dir: None }
    }

    fn dir(ino: Ino, parent: Ino, retired: bool) -> InodeSummary {
        InodeSummary { ino, kind: FileKind::Dir, nlink: 2, size: 0, opens: 0, dir: Some(DirSummary { parent, retired }) }
    }

    fn entry(dir: Ino, name: &str, ino: Ino, kind: FileKind) -> EntrySummary {
        EntrySummary { dir, name: name.to_string(), ino, kind, locked: false }
    }

    fn scan(inodes: Vec<InodeSummary>, entries: Vec<EntrySummary>, data: Vec<(usize, DataFileSummary)>) -> Scan {
        let root = dir(ROOT_INO, ROOT_INO, false);
        Scan { inodes: inodes.into_iter().chain([root]).map(|i| (i.ino, i)).collect(), entries, data_files: data }
    }

    // ino::make(1, 1), ino::make(2, 1), ino::make(0, 5)
    const D1: Ino = 1 << 48 | 1;
    const D2: Ino = 2 << 48 | 1;
    const F: Ino = 5;

    #[test]
    fn a_consistent_share_has_no_findings() {
        assert_eq!((D1, D2, F), (ino::make(1, 1), ino::make(2, 1), ino::make(0, 5)));

        let s = scan(
            vec![dir(D1, ROOT_INO, false), file(F, 1, 10)],
            vec![entry(ROOT_INO, "d", D1, FileKind::Dir), entry(D1, "f", F, FileKind::File)],
            vec![(0, DataFileSummary { ino: F, len: 10, allocated: 4096 })],
        );
        assert_eq!(analyse(&s), vec![]);
    }

    #[test]
    fn a_stopped_rename_of_a_file_is_two_names_kept_as_links() {
        let s = scan(
            vec![dir(D1, ROOT_INO, false), file(F, 1, 0)],
            vec![entry(ROOT_INO, "d", D1, FileKind::Dir), entry(ROOT_INO, "old", F, FileKind::File), entry(D1, "new", F, FileKind::File)],
            vec![],
        );
        assert_eq!(analyse(&s), vec![Finding::LinkCount { ino: F, recorded: 1, names: 2 }]);
    }

    #[test]
    fn a_stopped_rename_of_a_directory_keeps_the_name_its_dotdot_agrees_with() {
        let s = scan(
            vec![dir(D1, ROOT_INO, false), dir(D2, D1, false)],
            vec![entry(ROOT_INO, "d", D1, FileKind::Dir), entry(ROOT_INO, "old", D2, FileKind::Dir), entry(D1, "new", D2, FileKind::Dir)],
            vec![],
        );
        assert_eq!(analyse(&s), vec![Finding::ExtraDirName { dir: ROOT_INO, name: "old".into(), ino: D2 }]);
        // Stopped after the source went but before `..` moved.
        let s = scan(
            vec![dir(D1, ROOT_INO, false), dir(D2, ROOT_INO, false)],
            vec![entry(ROOT_INO, "d", D1, FileKind::Dir), entry(D1, "new", D2, FileKind::Dir)],
            vec![],
        );
        assert_eq!(analyse(&s), vec![Finding::WrongParent { ino: D2, recorded: ROOT_INO, actual: D1 }]);
    }

    #[test]
    fn orphans_and_half_removed_directories() {
        let full = ino::make(3, 1);
        let s = scan(
            vec![dir(D1, ROOT_INO, true), dir(D2, ROOT_INO, false), dir(full, ROOT_INO, false), file(F, 1, 7)],
            vec![entry(ROOT_INO, "gone", D1, FileKind::Dir), entry(full, "child", ino::make(3, 2), FileKind::File)],
            vec![],
        );
        let found = analyse(&s);
        assert!(found.contains(&Finding::RetiredNamed { ino: D1 }), "{found:?}");
        assert!(found.contains(&Finding::OrphanEmptyDir { ino: D2 }), "{found:?}");
        assert!(found.contains(&Finding::OrphanInode { ino: full, kind: FileKind::Dir, size: 0, nlink: 2 }), "{found:?}");
        assert!(found.contains(&Finding::OrphanInode { ino: F, kind: FileKind::File, size: 7, nlink: 1 }), "{found:?}");
        assert!(found.contains(&Finding::DanglingEntry { dir: full, name: "child".into(), ino: ino::make(3, 2) }), "{found:?}");
        assert_eq!(found.len(), 5, "{found:?}");
    }

    #[test]
    fn data_without_file_and_past_size_but_not_of_open_files() {
        let mut open = file(ino::make(0, 9), 0, 0);
        open.opens = 1;
        let s = scan(
            vec![file(F, 1, 100), open],
            vec![entry(ROOT_INO, "f", F, FileKind::File)],
            vec![
                (1, DataFileSummary { ino: F, len: 4096, allocated: 4096 }),
                (2, DataFileSummary { ino: ino::make(0, 8), len: 10, allocated: 4096 }),
                (2, DataFileSummary { ino: ino::make(0, 9), len: 1 << 20, allocated: 1 << 20 }),
            ],
        );
        assert_eq!(
            analyse(&s),
            vec![
                Finding::DataPastSize { server: 1, ino: F, len: 4096, size: 100 },
                Finding::OrphanData { server: 2, ino: ino::make(0, 8), allocated: 4096 },
            ]
        );
    }

    #[test]
    fn an_open_file_is_judged_by_its_names_unless_it_was_unlinked() {
        let (unlinked, named_nowhere, miscounted) = (ino::make(0, 9), ino::make(0, 10), ino::make(0, 11));
        let mut inodes = vec![file(unlinked, 0, 5), file(named_nowhere, 1, 5), file(miscounted, 2, 5)];
        for inode in &mut inodes {
            inode.opens = 1;
        }
        let s = scan(inodes, vec![entry(ROOT_INO, "f", miscounted, FileKind::File)], vec![]);
        assert_eq!(
            analyse(&s),
            vec![
                Finding::OrphanInode { ino: named_nowhere, kind: FileKind::File, size: 5, nlink: 1 },
                Finding::LinkCount { ino: miscounted, recorded: 2, names: 1 },
            ]
        );
    }

    #[test]
    fn names_held_by_a_rename_in_progress_are_not_judged() {
        let mut held = entry(ROOT_INO, "old", F, FileKind::File);
        held.locked = true;
        let s = scan(vec![dir(D1, ROOT_INO, false), file(F, 1, 0)], vec![held, entry(D1, "new", F, FileKind::File)], vec![]);
        let mut with_d1 = s.clone();
        with_d1.entries.push(entry(ROOT_INO, "d", D1, FileKind::Dir));
        assert_eq!(analyse(&with_d1), vec![]);
    }
}
