//! What `surge fsck` reads of a namespace share, a page at a time (every inode, every entry),
//! and the one repair that has no other step: a file's link count set to its number of names.
//!
//! Pages are in a fixed order (inodes by number, entries by directory and name) and each
//! resumes after the last item of the one before, so a scan sees every item that stays in
//! place while it runs; each page is one step under the metadata lock, not a snapshot of the
//! whole share (fsck judges only what two scans both find).

use std::ops::Bound;

use surge_proto::admin::{DirSummary, EntryPage, EntrySummary, InodePage, InodeSummary, SCAN_PAGE_BYTES};
use surge_proto::{Attr, ErrorCode, FileKind, Ino};

use crate::error::Result;
use crate::model::{fail, Body, MetaStore};

/// Inodes per page: a summary encodes in well under 64 bytes, so a page stays far below the
/// frame limit.
const INODES_PER_PAGE: usize = 4096;

impl MetaStore {
    /// The inodes above `after`, in inode order.
    pub fn inode_page(&self, after: Option<Ino>) -> InodePage {
        let after = after.unwrap_or(0);
        let mut inos: Vec<Ino> = self.inodes.keys().copied().filter(|&ino| ino > after).collect();
        let more = inos.len() > INODES_PER_PAGE;
        if more {
            inos.select_nth_unstable(INODES_PER_PAGE);
            inos.truncate(INODES_PER_PAGE);
        }
        inos.sort_unstable();
        let inodes = inos
            .into_iter()
            .map(|ino| {
                let inode = &self.inodes[&ino];
                let dir = match &inode.body {
                    Body::Dir(d) => Some(DirSummary { parent: d.parent, retired: d.retired }),
                    _ => None,
                };
                InodeSummary {
                    ino,
                    kind: inode.attr.kind,
                    nlink: inode.attr.nlink,
                    size: inode.attr.size,
                    opens: inode.opens + inode.kept,
                    dir,
                }
            })
            .collect();
        InodePage { inodes, more }
    }

    /// The entries after `after`, ordered by (directory, name), as many as fit a page.
    pub fn entry_page(&self, after: Option<(Ino, String)>) -> EntryPage {
        let mut dirs: Vec<Ino> = self
            .inodes
            .iter()
            .filter(|(&ino, inode)| matches!(inode.body, Body::Dir(_)) && after.as_ref().is_none_or(|(d, _)| ino >= *d))
            .map(|(&ino, _)| ino)
            .collect();
        dirs.sort_unstable();
        let (mut entries, mut bytes) = (Vec::new(), 0);
        for dir_ino in dirs {
            let Body::Dir(dir) = &self.inodes[&dir_ino].body else { continue };
            let lower = match &after {
                Some((d, name)) if *d == dir_ino => Bound::Excluded(name.as_str()),
                _ => Bound::Unbounded,
            };
            for (name, e) in dir.entries.range::<str, _>((lower, Bound::Unbounded)) {
                let summary = EntrySummary { dir: dir_ino, name: name.clone(), ino: e.ino, kind: e.kind, locked: e.is_locked() };
                if bytes + summary.encoded_bound() > SCAN_PAGE_BYTES {
                    return EntryPage { entries, more: true };
                }
                bytes += summary.encoded_bound();
                entries.push(summary);
            }
        }
        EntryPage { entries, more: false }
    }

    pub fn set_links(&mut self, ino: Ino, expected: u32, nlink: u32) -> Result<Attr> {
        let inode = self.inode(ino)?;
        if inode.attr.kind == FileKind::Dir {
            return fail(ErrorCode::IsDir, "a directory's link count follows its subdirectories");
        }
        if inode.attr.nlink != expected {
            return fail(ErrorCode::Stale, format!("inode {ino:#x} has {} links now, not {expected}", inode.attr.nlink));
        }
        if nlink == 0 {
            return fail(ErrorCode::Invalid, "a link count of 0 would delete the file: unlink its names instead");
        }
        let inode = self.inode_mut(ino)?;
        inode.attr.nlink = nlink;
        inode.attr.ctime = surge_proto::Timestamp::now();
        Ok(inode.attr.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with_files(n: usize) -> MetaStore {
        let mut store = MetaStore::new(0, 0, 0);
        for i in 0..n {
            let name = format!("{i:0>200}");
            store.create(surge_proto::ROOT_INO, &name, 0o644, 0, 0, 0, true, false, None).unwrap();
        }
        store
    }

    #[test]
    fn inode_pages_cover_every_inode_once_in_order() {
        let store = store_with_files(10_000);
        let (mut seen, mut after) = (Vec::new(), None);
        loop {
            let page = store.inode_page(after);
            assert!(page.inodes.len() <= INODES_PER_PAGE);
            seen.extend(page.inodes.iter().map(|i| i.ino));
            after = seen.last().copied();
            if !page.more {
                break;
            }
        }
        assert_eq!(seen.len(), 10_001, "every file and the root");
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "in inode order, no repeats");
    }

    #[test]
    fn entry_pages_fit_a_frame_and_cover_every_entry() {
        let store = store_with_files(6_000);
        let (mut count, mut after, mut pages) = (0, None, 0);
        loop {
            let page = store.entry_page(after);
            let encoded = postcard::to_allocvec(&page).unwrap();
            assert!(encoded.len() <= SCAN_PAGE_BYTES, "a page of {} bytes", encoded.len());
            count += page.entries.len();
            pages += 1;
            after = page.entries.last().map(|e| (e.dir, e.name.clone()));
            if !page.more {
                break;
            }
        }
        assert_eq!(count, 6_000);
        assert!(pages > 1, "200-byte names cannot all fit one page");
    }

    #[test]
    fn set_links_is_conditional_and_refuses_zero_and_directories() {
        let mut store = store_with_files(1);
        let file = store.lookup(surge_proto::ROOT_INO, &format!("{:0>200}", 0)).unwrap().ino;
        assert_eq!(store.set_links(file, 2, 3).unwrap_err().code, ErrorCode::Stale);
        assert_eq!(store.set_links(file, 1, 0).unwrap_err().code, ErrorCode::Invalid);
        assert_eq!(store.set_links(surge_proto::ROOT_INO, 2, 3).unwrap_err().code, ErrorCode::IsDir);
        assert_eq!(store.set_links(file, 1, 2).unwrap().nlink, 2);
    }
}
