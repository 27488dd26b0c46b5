//! A file's allocation: fallocate(2) (space set aside, holes punched, ranges zeroed) and
//! SEEK_DATA / SEEK_HOLE. Each server holds its chunks in one sparse data file at their own
//! offsets, so the servers' data files together are the file's allocation map: a range is
//! changed by sending each server the pieces in its chunks, and a file's data is the union of
//! the data ranges each server finds in its data file.

use bytes::Bytes;
use surge_proto::data::{Allocate, AllocateMode, DataExtents};
use surge_proto::ErrorCode;

use crate::client::first_failure;
use crate::error::{Error, Result};
use crate::file::File;

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
        // One request per run of consecutive pieces on the same server: a node-local file's
        // whole range is one.
        let mut runs: Vec<(usize, Allocate)> = Vec::new();
        for piece in client.layout().pieces(self.ino(), offset, len) {
            match runs.last_mut() {
                Some((server, run)) if *server == piece.server && run.offset + run.len == piece.file_offset => run.len += piece.len,
                _ => runs.push((
                    piece.server,
                    Allocate { ino: self.ino(), offset: piece.file_offset, len: piece.len, mode, ticket: self.ticket() },
                )),
            }
        }
        first_failure(client.send_all(runs).await)?;
        if !keep_size && mode != AllocateMode::PunchHole && end > self.size() {
            self.set_len(end).await?;
        }
        Ok(())
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
