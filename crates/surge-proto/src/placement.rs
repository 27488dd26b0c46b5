//! Placement: which server holds what. Clients route by it and servers copy staged chunks by
//! it, so both sides must compute it alike, which is why it lives in the protocol crate.
//!
//! A file is cut into fixed-size chunks and chunk `c` of inode `ino` is kept by server
//! `(spread(ino) + c) mod N`. Consecutive chunks go to consecutive servers, so a large
//! sequential request keeps every server busy, and the start server differs per file, so many
//! small files spread evenly. Directories are homed by a hash of (parent, name); an inode's
//! home is in its number ([`crate::ino`]).
//!
//! A directory may instead lay its new files out node-local ([`DirLayout::NodeLocal`]): each
//! file created there keeps all its chunks on the server of the node that creates it (its
//! number says which, [`crate::ino::make_placed`]), so a file-per-process writer writes to its
//! own node's storage, and the mount can hand the file to the kernel (passthrough).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::ino::{spread, Ino};

/// Where the files a directory gets are put; set per directory, inherited by the directories
/// made in it (as Lustre's stripe settings), the root's from the instance's default.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "kebab-case")]
pub enum DirLayout {
    /// A file's chunks go round the servers (bandwidth of all of them for one file).
    #[default]
    Striped,
    /// A file's chunks all go to the server of the node that creates it; a file created
    /// where no server runs (or by stage-in, which has no node of its own) is striped.
    NodeLocal,
}

impl DirLayout {
    pub const ALL: [DirLayout; 2] = [DirLayout::Striped, DirLayout::NodeLocal];

    pub fn name(self) -> &'static str {
        match self {
            DirLayout::Striped => "striped",
            DirLayout::NodeLocal => "node-local",
        }
    }
}

impl fmt::Display for DirLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DirLayout {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        DirLayout::ALL.into_iter().find(|l| l.name() == s).ok_or_else(|| {
            let names: Vec<&str> = DirLayout::ALL.iter().map(|l| l.name()).collect();
            format!("unknown layout '{s}' (one of: {})", names.join(", "))
        })
    }
}

/// The chunk sizes an instance may have, 4 KiB to 64 MiB: `surge up` accepts these, and a
/// server refuses a copy order outside them.
pub const CHUNK_SIZES: std::ops::RangeInclusive<u64> = 4096..=(64 << 20);

#[derive(Clone, Debug)]
pub struct Layout {
    chunk_size: u64,
    servers: usize,
}

/// The part of a request that falls into one chunk.
#[derive(Debug, PartialEq, Eq)]
pub struct Piece {
    pub server: usize,
    pub file_offset: u64,
    pub buf_offset: usize,
    pub len: u64,
}

impl Layout {
    pub fn new(chunk_size: u64, servers: usize) -> Self {
        assert!(chunk_size > 0 && servers > 0);
        Layout { chunk_size, servers }
    }

    pub fn chunk_size(&self) -> u64 {
        self.chunk_size
    }

    pub fn chunk_server(&self, ino: Ino, chunk: u64) -> usize {
        if let Some(server) = self.sole_server(ino) {
            return server;
        }
        ((spread(ino) % self.servers as u64 + chunk % self.servers as u64) % self.servers as u64) as usize
    }

    /// The one server holding every chunk of `ino`, if there is one: in an instance of one
    /// server (each node's namespace in private mode), and for a file made in the node-local
    /// layout ([`crate::ino::data_server`]; a number naming no server of this instance, which
    /// only a corrupt request can carry, falls back to striping rather than to a bad index).
    pub fn sole_server(&self, ino: Ino) -> Option<usize> {
        if self.servers == 1 {
            return Some(0);
        }
        crate::ino::data_server(ino).filter(|&s| s < self.servers)
    }

    /// The servers holding chunks `chunks` of `ino`, each once. Consecutive chunks go to
    /// consecutive servers, so at most as many chunks as servers are looked at, however long
    /// the range.
    pub fn chunk_servers(&self, ino: Ino, chunks: std::ops::Range<u64>) -> std::collections::BTreeSet<usize> {
        let end = chunks.end.min(chunks.start.saturating_add(self.servers as u64));
        (chunks.start..end).map(|chunk| self.chunk_server(ino, chunk)).collect()
    }

    /// Splits `[offset, offset + len)` at chunk boundaries.
    pub fn pieces(&self, ino: Ino, offset: u64, len: u64) -> impl Iterator<Item = Piece> + '_ {
        let end = offset + len;
        let mut at = offset;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let chunk = at / self.chunk_size;
            let chunk_end = ((chunk + 1) * self.chunk_size).min(end);
            let piece =
                Piece { server: self.chunk_server(ino, chunk), file_offset: at, buf_offset: (at - offset) as usize, len: chunk_end - at };
            at = chunk_end;
            Some(piece)
        })
    }

    /// Server that homes a new directory `name` in `parent`.
    pub fn dir_home(&self, parent: Ino, name: &str) -> usize {
        let h = name_hash(name.as_bytes()) ^ spread(parent);
        (spread(h) % self.servers as u64) as usize
    }
}

/// FNV-1a: a dependency-free, stable string hash (placement must agree across builds).
fn name_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_read_back_their_names() {
        for layout in DirLayout::ALL {
            assert_eq!(layout.name().parse::<DirLayout>(), Ok(layout));
        }
        let err = "local".parse::<DirLayout>().unwrap_err();
        assert!(err.contains("striped, node-local"), "{err}");
    }

    #[test]
    fn chunk_servers_name_each_holder_once() {
        let layout = Layout::new(1024, 4);
        assert_eq!(layout.chunk_servers(7, 0..0).len(), 0);
        assert_eq!(layout.chunk_servers(7, 3..5).len(), 2);
        assert_eq!(layout.chunk_servers(7, 10..u64::MAX), (0..4).collect(), "every server, without walking the range");
        let placed = crate::ino::make_placed(0, 2, 9);
        assert_eq!(layout.chunk_servers(placed, 0..1000), [2].into());
    }

    #[test]
    fn pieces_cover_the_range_at_chunk_boundaries() {
        let layout = Layout::new(1024, 4);
        let pieces: Vec<Piece> = layout.pieces(7, 1000, 3000).collect();
        assert_eq!(pieces.iter().map(|p| p.len).sum::<u64>(), 3000);
        assert_eq!(pieces[0].len, 24);
        assert_eq!(pieces[1].file_offset, 1024);
        let servers: Vec<usize> = pieces.iter().map(|p| p.server).collect();
        assert_eq!(servers.len(), 4);
        let mut unique = servers.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 4, "four consecutive chunks land on four servers");
    }

    #[test]
    fn a_placed_file_keeps_every_chunk_on_its_server() {
        let layout = Layout::new(1024, 4);
        let ino = crate::ino::make_placed(0, 2, 9);
        assert!(layout.pieces(ino, 0, 10_000).all(|p| p.server == 2));
        assert_eq!(layout.sole_server(ino), Some(2));
        assert_eq!(layout.sole_server(crate::ino::make_placed(0, 9, 9)), None, "no server 9 here");
        assert_eq!(layout.sole_server(crate::ino::make(0, 9)), None);
    }

    #[test]
    fn directories_spread_over_servers() {
        let layout = Layout::new(1 << 20, 4);
        let mut counts = [0; 4];
        for i in 0..400 {
            counts[layout.dir_home(1, &format!("d{i}"))] += 1;
        }
        assert!(counts.iter().all(|&c| c > 60), "uneven: {counts:?}");
    }
}
