//! A file's allocation: fallocate(2) (space set aside, holes punched, ranges zeroed) and
//! SEEK_DATA / SEEK_HOLE. Each server holds its chunks in one sparse data file at their own
//! offsets, so the servers' data files together are the file's allocation map: a range is
//! changed by sending each server the pieces in its chunks, and a file's data is the union of
//! the data ranges each server finds in its data file, and its `st_blocks` the sum of the
//! space those data files take.

use std::collections::BTreeMap;

use bytes::Bytes;
use surge_proto::data::{Allocate, AllocateMode, Allocated, DataExtents, MAX_ALLOCATED};
use surge_proto::namespace::{AllocationNote, NoteAllocation};
use surge_proto::{ino, Attr, ErrorCode};

use crate::client::first_failure;
use crate::error::{Error, Result};
use crate::file::File;
use crate::Client;

impl File {
    /// fallocate(2) of `[offset, offset + len)`: `mode` on every server holding part of it
    /// (after this handle's writes have landed, so none overtakes it). Unless `keep_size`,
    /// a range past the end makes the file that long (as mode 0 and ZERO_RANGE do).
    pub async fn allocate(&self, offset: u64, len: u64, mode: AllocateMode, keep_size: bool) -> Result<()> {
        let end = offset.checked_add(len).filter(|&end| end <= i64::MAX as u64);
        let (Some(end), true) = (end, len > 0) else {
            return Err(Error::new(ErrorCode::Invalid, format!("fallocate of {len} bytes at {offset}")));
        };
        self.wait_writes().await?;
        let client = self.client();
        let may_wait = self.may_wait(offset).await?;
        // One request per run of consecutive pieces on the same server: a node-local file's
        // whole range is one.
        let mut runs: Vec<(usize, Allocate)> = Vec::new();
        for piece in client.layout().pieces(self.ino(), offset, len) {
            match runs.last_mut() {
                Some((server, run)) if *server == piece.server && run.offset + run.len == piece.file_offset => run.len += piece.len,
                _ => runs.push((
                    piece.server,
                    Allocate { ino: self.ino(), offset: piece.file_offset, len: piece.len, mode, ticket: self.ticket(), may_wait },
                )),
            }
        }
        let size_before = self.size();
        let outcomes = client.send_all(runs.clone()).await;
        let failed = outcomes.iter().any(Result::is_err);
        if mode != AllocateMode::PunchHole && failed {
            self.give_back_past(size_before, &runs, &outcomes).await;
        }
        if !failed && !keep_size && mode != AllocateMode::PunchHole && end > self.size() {
            self.set_len(end).await?;
        }
        if mode != AllocateMode::Reserve {
            // Bytes changed (zeroed), as by a write: the next flush publishes a new mtime, so
            // the file's content version moves and every node's next open drops its pages.
            self.changed_content();
        }
        // The space changed, maybe without the size: the home forgets what it knew of it, and
        // notes how far the servers may now hold data files of it (past the size, even empty
        // after a failure, its removal must reach them too).
        let set_aside_to = (mode != AllocateMode::PunchHole).then_some(end);
        let forget = AllocationNote { ino: self.ino(), version: self.content_version(), blocks: None, set_aside_to };
        let noted = client.call_home(self.ino(), NoteAllocation { notes: vec![forget] }).await;
        first_failure(outcomes)?;
        noted
    }

    /// After a fallocate that failed on some servers (out of space, most often): punches
    /// what the others set aside past the file's end, which no size covers, so that nothing
    /// would free it (a removal frees the chunks below the size) and the space comes back at
    /// once. Within the size, what was set aside stays: the file's own, freed with it.
    async fn give_back_past<T>(&self, size_before: u64, runs: &[(usize, Allocate)], outcomes: &[Result<T>]) {
        let end = size_before.max(self.size());
        let punches: Vec<(usize, Allocate)> = runs
            .iter()
            .zip(outcomes)
            .filter(|(_, outcome)| outcome.is_ok())
            .filter_map(|((server, run), _)| {
                let from = run.offset.max(end);
                let to = run.offset + run.len;
                (from < to).then(|| (*server, Allocate { offset: from, len: to - from, mode: AllocateMode::PunchHole, ..run.clone() }))
            })
            .collect();
        for outcome in self.client().send_all(punches).await {
            if let Err(e) = outcome {
                tracing::warn!("inode {:#x}: space set aside by a failed fallocate not given back: {e}", self.ino());
            }
        }
    }

    /// lseek(2)'s SEEK_DATA (`hole` false: the first offset at or after `offset` that holds
    /// data) and SEEK_HOLE (the first that does not; the file's end counts as a hole).
    /// PastEnd (ENXIO) at or past the end, and for SEEK_DATA where only holes follow.
    pub async fn seek_data(&self, offset: u64, hole: bool) -> Result<u64> {
        self.wait_writes().await?;
        let size = self.size();
        let past_end = || Error::new(ErrorCode::PastEnd, format!("no data at or after offset {offset} (size {size})"));
        if offset >= size {
            return Err(past_end());
        }
        let mut from = offset;
        while from < size {
            let (ranges, horizon) = self.data_ranges(from, size).await?;
            // `run_end`: the end of the data covering `from` (`from` itself in a hole), with
            // ranges merged where they touch (chunks of different servers side by side);
            // `next_data`: where data starts after a hole at `from`.
            let (mut run_end, mut next_data) = (from, None);
            for &(start, end) in &ranges {
                if end <= run_end {
                    continue;
                }
                if start > run_end {
                    next_data = Some(start);
                    break;
                }
                run_end = end;
            }
            // Below `horizon` every server's answer is complete.
            match hole {
                true if run_end < horizon || horizon >= size => return Ok(run_end.min(size)),
                false if run_end > from => return Ok(from),
                false => match next_data {
                    Some(start) if start < horizon => return Ok(start),
                    _ if horizon >= size => return Err(past_end()),
                    _ => {}
                },
                true => {}
            }
            from = horizon; // an answer was full: ask again from where it stopped
        }
        if hole {
            Ok(size)
        } else {
            Err(past_end())
        }
    }

    /// The data ranges of this file in `[from, to)`, sorted, from every server holding chunks
    /// there, and the offset below which all of them answered in full.
    async fn data_ranges(&self, from: u64, to: u64) -> Result<(Vec<(u64, u64)>, u64)> {
        let client = self.client();
        let chunk = client.chunk_size();
        let servers = client.layout().chunk_servers(self.ino(), from / chunk..to.div_ceil(chunk));
        let mut pending = Vec::with_capacity(servers.len());
        for server in servers {
            let ask = DataExtents { ino: self.ino(), from, to, ticket: self.ticket() };
            pending.push(client.send(server, &ask.into(), Bytes::new()).await?);
        }
        let (mut ranges, mut horizon) = (Vec::new(), to);
        for p in pending {
            let extents = p.wait(client.timeout()).await?.reply::<DataExtents>()?;
            horizon = horizon.min(extents.scanned_to);
            ranges.extend(extents.ranges);
        }
        ranges.sort_unstable();
        Ok((ranges, horizon))
    }
}

impl Client {
    /// Fills in `st_blocks` (`Attr::blocks`) of the files whose homes did not know it: asks
    /// every server that may hold chunks of them (all of a striped file's, whose chunks past
    /// its end may hold space set aside; the one of a node-local file), one request per server
    /// for all the files, and tells the homes what it found so that the next stat needs no
    /// measuring. A file a server could not be asked about keeps `None` (the mount then shows
    /// its size in 512-byte units): a stat does not fail for want of a block count.
    pub async fn measure_blocks(&self, mut attrs: Vec<&mut Attr>) {
        let unknown: Vec<usize> = (0..attrs.len()).filter(|&i| attrs[i].blocks.is_none()).collect();
        if unknown.is_empty() {
            return;
        }
        let mut asked: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &i in &unknown {
            for server in self.layout().chunk_servers(attrs[i].ino, 0..u64::MAX) {
                asked.entry(server).or_default().push(i);
            }
        }
        let mut pending = Vec::new();
        for (server, files) in asked {
            for files in files.chunks(MAX_ALLOCATED) {
                let ask = Allocated { inos: files.iter().map(|&i| attrs[i].ino).collect() };
                pending.push((files.to_vec(), self.send(server, &ask.into(), Bytes::new()).await));
            }
        }
        let (mut blocks, mut unanswered) = (vec![0u64; attrs.len()], vec![false; attrs.len()]);
        for (files, sent) in pending {
            let answer = match sent {
                Ok(p) => p.wait(self.timeout()).await.and_then(|a| a.reply::<Allocated>()),
                Err(e) => Err(e),
            };
            match answer {
                Ok(counts) if counts.len() == files.len() => files.iter().zip(counts).for_each(|(&i, n)| blocks[i] += n),
                outcome => {
                    tracing::debug!("st_blocks of {} files not measured: {:?}", files.len(), outcome.err());
                    files.iter().for_each(|&i| unanswered[i] = true);
                }
            }
        }
        let mut notes: BTreeMap<usize, Vec<AllocationNote>> = BTreeMap::new();
        for i in unknown.into_iter().filter(|&i| !unanswered[i]) {
            let attr = &mut *attrs[i];
            attr.blocks = Some(blocks[i]);
            let note = AllocationNote { ino: attr.ino, version: attr.content_version(), blocks: attr.blocks, set_aside_to: None };
            notes.entry(ino::home(attr.ino)).or_default().push(note);
        }
        // Not waited for: the caller has its answer, and a note lost costs only a measurement.
        for (home, notes) in notes {
            let _ = self.send(home, &NoteAllocation { notes }.into(), Bytes::new()).await;
        }
    }
}
