//! Whole-chunk read cache of one open handle, for streaming readers.
//!
//! The kernel splits a sequential read into readahead requests of up to `max_pages` that are
//! sent concurrently and reach the daemon in any order, so "the next read starts where the last
//! one ended" does not hold even for `cat`. Instead, once a handle is seen streaming (a read at
//! offset 0 or at the end of a recent read), whole chunks are fetched and shared by every
//! request that falls into them, and the chunks after the newest request are fetched before
//! they are asked for. Other reads use chunks already cached, else (random 4 KiB) go straight
//! to the servers for just the bytes asked: fetching whole chunks for them would multiply
//! traffic (a 1 MiB chunk for a 4 KiB read is 256 times the bytes asked).
//!
//! Memory is bounded per handle (the chunks around the newest request) and for the whole mount
//! (`Budget`): over budget, nothing more is fetched ahead. A write through any handle of the
//! file on this node drops the cache ([`ChunkCache::clear`]), and a new open starts empty, so
//! the cache never serves what close-to-open says must be re-read.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use surge_client::File;
use tokio::sync::OnceCell;

/// Bytes held by every handle's cache together, against a fixed limit.
pub struct Budget {
    used: AtomicU64,
    limit: u64,
}

impl Budget {
    pub fn new(limit: u64) -> Arc<Budget> {
        Arc::new(Budget { used: AtomicU64::new(0), limit })
    }

    fn exhausted(&self) -> bool {
        self.used.load(Ordering::Relaxed) >= self.limit
    }
}

/// A fetched chunk; gives its bytes back to the budget when the last request using it is done.
pub struct Chunk {
    data: Bytes,
    budget: Arc<Budget>,
}

impl Drop for Chunk {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.data.len() as u64, Ordering::Relaxed);
    }
}

/// A chunk being fetched or fetched: concurrent requests for it wait for one fetch.
type Cell = Arc<OnceCell<surge_client::Result<Arc<Chunk>>>>;

/// How a read request is served.
pub enum Route {
    /// At or past the end of the file.
    Empty,
    /// Straight from the servers: just the `len` bytes asked (clamped to the file's size).
    Servers { len: u64 },
    /// From whole chunks, fetched or being fetched.
    Chunks { cells: Vec<Cell>, len: u64 },
}

/// How many recent request ends are remembered to recognise a stream.
const RECENT: usize = 8;

#[derive(Default)]
struct State {
    cells: BTreeMap<u64, Cell>,
    /// End offsets of recent requests (a ring).
    ends: [u64; RECENT],
    next_end: usize,
}

pub struct ChunkCache {
    chunk: u64,
    /// Chunks fetched ahead of the newest request.
    ahead: u64,
    budget: Arc<Budget>,
    state: Mutex<State>,
}

impl ChunkCache {
    pub fn new(chunk: u64, window: u64, budget: Arc<Budget>) -> ChunkCache {
        ChunkCache { chunk, ahead: (window / chunk).max(1), budget, state: Default::default() }
    }

    /// Drops every cached chunk (the file was written on this node).
    pub fn clear(&self) {
        self.state.lock().unwrap().cells.clear();
    }

    /// Reads up to `len` bytes at `offset` through `file`, stopping at its size. A request
    /// within one chunk is a slice of it, not a copy.
    pub async fn read(&self, file: &Arc<File>, offset: u64, len: u64) -> surge_client::Result<Bytes> {
        let route = self.route(file, offset, len);
        self.read_routed(file, route, offset).await
    }

    /// Decides how a request is served (and records it: call once per request), starting the
    /// fetches a stream needs.
    pub fn route(&self, file: &Arc<File>, offset: u64, len: u64) -> Route {
        let size = file.size();
        if offset >= size || len == 0 {
            return Route::Empty;
        }
        let len = len.min(size - offset);
        let (first, last) = (offset / self.chunk, (offset + len - 1) / self.chunk);
        let cells = {
            let mut st = self.state.lock().unwrap();
            let streaming = offset == 0 || st.ends.contains(&offset);
            let slot = st.next_end;
            st.ends[slot] = offset + len;
            st.next_end = (slot + 1) % RECENT;
            if !streaming {
                // Served from chunks already there (a readahead request that overtook the one
                // before it), but fetches nothing more: a random reader that happens to land
                // in a cached chunk must not set off a stream of whole chunks.
                (first..=last).map(|c| st.cells.get(&c).cloned()).collect::<Option<Vec<Cell>>>()
            } else {
                // Keep the chunk before the request (an earlier request may still want it)
                // up to the horizon; forget the rest.
                let horizon = (last + self.ahead).min((size - 1) / self.chunk);
                st.cells.retain(|&c, _| c + 1 >= first && c <= horizon);
                let wanted: Vec<Cell> = (first..=last).map(|c| st.cells.entry(c).or_default().clone()).collect();
                for c in last + 1..=horizon {
                    if self.budget.exhausted() {
                        break;
                    }
                    if !st.cells.contains_key(&c) {
                        let cell = st.cells.entry(c).or_default().clone();
                        let (file, budget, chunk) = (file.clone(), self.budget.clone(), self.chunk);
                        tokio::spawn(async move {
                            cell.get_or_init(|| fetch(file, budget, c * chunk, chunk)).await;
                        });
                    }
                }
                Some(wanted)
            }
        };
        match cells {
            Some(cells) => Route::Chunks { cells, len },
            None => Route::Servers { len },
        }
    }

    /// Serves a request as `route` (from [`ChunkCache::route`]) says.
    pub async fn read_routed(&self, file: &Arc<File>, route: Route, offset: u64) -> surge_client::Result<Bytes> {
        let (cells, len) = match route {
            Route::Empty => return Ok(Bytes::new()),
            Route::Servers { len } => return file.pread(offset, len as usize).await.map(Bytes::from),
            Route::Chunks { cells, len } => (cells, len),
        };
        let (first, last) = (offset / self.chunk, (offset + len - 1) / self.chunk);
        let mut out = Vec::new();
        for (c, cell) in (first..=last).zip(cells) {
            let chunk = match cell.get_or_init(|| fetch(file.clone(), self.budget.clone(), c * self.chunk, self.chunk)).await {
                Ok(chunk) => chunk.clone(),
                Err(e) => {
                    // Not kept: the next request tries again.
                    self.state.lock().unwrap().cells.remove(&c);
                    return Err(e.clone());
                }
            };
            let start = (offset + out.len() as u64 - c * self.chunk) as usize;
            let want = (len as usize - out.len()).min(chunk.data.len().saturating_sub(start));
            if first == last {
                return Ok(chunk.data.slice(start..start + want));
            }
            if want == 0 {
                // The chunk ends early: the file is shorter than the handle believed.
                break;
            }
            out.extend_from_slice(&chunk.data[start..start + want]);
        }
        Ok(Bytes::from(out))
    }
}

async fn fetch(file: Arc<File>, budget: Arc<Budget>, offset: u64, len: u64) -> surge_client::Result<Arc<Chunk>> {
    let data = file.pread(offset, len as usize).await?;
    budget.used.fetch_add(data.len() as u64, Ordering::Relaxed);
    Ok(Arc::new(Chunk { data: Bytes::from(data), budget }))
}
