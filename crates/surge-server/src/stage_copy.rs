//! The worker side of staging: copy the chunks this server owns between a PFS file and the
//! local store. Runs on a blocking thread (PFS calls may take a long time); one order is a
//! bounded amount of work (a window of a large file, or a batch of small files), so the
//! coordinator sees progress and a dead PFS or server is noticed within one order.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};

use surge_meta::error::{Result, ServerError};
use surge_proto::host::with_fs_ids;
use surge_proto::placement::{Layout, CHUNK_SIZES};
use surge_proto::stage::{CopyItem, CopyOrder, CopyOutcome, StageDirection};
use surge_proto::ErrorCode;

use crate::data::DataStore;

/// Chunks at least this large are copied inside the kernel (`copy_file_range`); smaller ones
/// through a buffer, which costs fewer system calls for the small files of a tree.
const KERNEL_COPY_MIN: usize = 256 << 10;

/// Chunks one copy order may cover, all its items together: a coordinator sends a window of
/// 16 chunks per server of one large file (at most 2^16 servers), or a batch of 256 one-chunk
/// files.
const MAX_ORDER_CHUNKS: u64 = 16 << 16;

/// Burst-buffer-side failures say so (the code's description), next to the server's detail.
fn bb_error(e: ServerError) -> ServerError {
    let what = e.code.describe();
    e.context(what)
}

/// Why an order cannot be carried out as given, if it cannot: a chunk size no instance has,
/// or a file whose chunks or end lie beyond what a file can hold. (Checked before any
/// arithmetic, so nothing overflows and no loop runs away.)
fn refuse(order: &CopyOrder, servers: usize) -> Option<String> {
    if !CHUNK_SIZES.contains(&order.chunk_size) || servers == 0 {
        return Some(format!("a copy order with chunk size {} over {servers} servers", order.chunk_size));
    }
    let bad = order.items.iter().find(|item| {
        let chunks = item.file_size.div_ceil(order.chunk_size);
        item.file_size > i64::MAX as u64 || item.first_chunk > item.end_chunk || item.end_chunk > chunks.max(1)
    });
    if let Some(bad) = bad {
        return Some(format!("a copy order for chunks {}..{} of a {}-byte file", bad.first_chunk, bad.end_chunk, bad.file_size));
    }
    // The plan lists every chunk of the order this server owns before copying: a file of
    // 2^63 bytes in 4 KiB chunks would have it allocate until the process dies.
    let chunks = order.items.iter().map(|item| item.end_chunk - item.first_chunk).fold(0u64, u64::saturating_add);
    if chunks > MAX_ORDER_CHUNKS {
        return Some(format!("a copy order for {chunks} chunks: at most {MAX_ORDER_CHUNKS} fit one order"));
    }
    None
}

/// Carries out one order; one outcome per item, in order.
pub fn execute(data: &DataStore, me: usize, servers: usize, order: &CopyOrder) -> Vec<CopyOutcome> {
    if let Some(why) = refuse(order, servers) {
        return order.items.iter().map(|_| Err(surge_proto::Error::new(ErrorCode::Invalid, why.clone()))).collect();
    }
    let layout = Layout::new(order.chunk_size, servers);
    let plans: Vec<Vec<(u64, usize)>> = order
        .items
        .iter()
        .map(|item| {
            (item.first_chunk..item.end_chunk)
                .filter(|&c| layout.chunk_server(item.ino, c) == me)
                .map(|c| c * order.chunk_size)
                .take_while(|&offset| offset < item.file_size)
                .map(|offset| (offset, (item.file_size - offset).min(order.chunk_size) as usize))
                .collect()
        })
        .collect();
    let mut buf = Vec::new();
    match order.direction {
        StageDirection::In => {
            // Open every source and ask for all of its chunks first, then copy: the PFS gets
            // the whole order as one deep queue instead of one read at a time (a batch of
            // small files would otherwise pay a full PFS latency per file).
            let sources: Vec<io::Result<File>> =
                order.items.iter().zip(&plans).map(|(item, chunks)| open_prefetched(&item.pfs_path, chunks, order)).collect();
            order
                .items
                .iter()
                .zip(&plans)
                .zip(sources)
                .map(|((item, chunks), source)| {
                    let source = source.map_err(|e| ServerError::pfs(&item.pfs_path, e))?;
                    copy_in(data, item, &source, chunks, order.verify, &mut buf)
                })
                .map(|outcome| outcome.map_err(Into::into))
                .collect()
        }
        StageDirection::Out => {
            let copy = |(item, chunks): (&CopyItem, &Vec<(u64, usize)>)| copy_out(data, item, chunks, order, &mut buf);
            order.items.iter().zip(&plans).map(copy).map(|outcome| outcome.map_err(Into::into)).collect()
        }
    }
}

/// Runs `work` on the PFS as the order's user, with the user's groups: the paths it names are
/// opened, made, renamed and removed as that user's (the data moves through the descriptors,
/// this server's own). Fails when this thread cannot take that identity.
fn as_user<T>(order: &CopyOrder, work: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    with_fs_ids(order.uid, order.gid, work)?
}

/// Opens a PFS file (as the order's user) and starts reading the given chunks in the
/// background.
fn open_prefetched(path: &str, chunks: &[(u64, usize)], order: &CopyOrder) -> io::Result<File> {
    let file = as_user(order, || File::open(path))?;
    for &(offset, len) in chunks {
        // SAFETY: plain advice on a descriptor we own; a failure only loses the hint.
        unsafe {
            libc::posix_fadvise(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                offset as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            )
        };
    }
    Ok(file)
}

/// PFS -> local store: inside the kernel where it can, else through a buffer.
fn copy_in(data: &DataStore, item: &CopyItem, source: &File, chunks: &[(u64, usize)], verify: bool, buf: &mut Vec<u8>) -> Result<u64> {
    let mut copied = 0;
    for &(offset, len) in chunks {
        let in_kernel = len >= KERNEL_COPY_MIN
            && data.copy_from(item.ino, offset, len as u64, source).map_err(|e| bb_or_pfs_error(e, &item.pfs_path))?;
        if !in_kernel || verify {
            buf.resize(len, 0);
            read_exact_at(source, buf, offset).map_err(|e| ServerError::pfs(&item.pfs_path, e))?;
        }
        if !in_kernel {
            data.write(item.ino, offset, buf).map_err(bb_error)?;
        }
        if verify {
            let back = data.read(item.ino, offset, len as u32).map_err(bb_error)?;
            check_same(buf, &back, &item.pfs_path, offset)?;
        }
        copied += len as u64;
    }
    Ok(copied)
}

/// A failed in-kernel copy: a full share is the buffer's fault; anything else names the PFS file.
fn bb_or_pfs_error(e: ServerError, pfs_path: &str) -> ServerError {
    if e.code == ErrorCode::NoSpace && e.detail.starts_with("server share full") {
        bb_error(e)
    } else {
        e.on_pfs(pfs_path)
    }
}

/// Local store -> PFS. With `publish`, this server holds the whole file: it creates the
/// temporary file, fills it, and renames it to its final name itself.
fn copy_out(data: &DataStore, item: &CopyItem, chunks: &[(u64, usize)], order: &CopyOrder, buf: &mut Vec<u8>) -> Result<u64> {
    let (path, verify) = (item.pfs_path.as_str(), order.verify);
    let target = as_user(order, || match &item.publish {
        Some(_) => OpenOptions::new().write(true).read(true).create(true).truncate(true).mode(item.mode).open(path),
        None => OpenOptions::new().write(true).read(true).open(path),
    })
    .map_err(|e| ServerError::pfs(path, e))?;
    let result = (|| {
        let mut copied = 0;
        for &(offset, len) in chunks {
            let in_kernel =
                len >= KERNEL_COPY_MIN && data.copy_to(item.ino, offset, len as u64, &target).map_err(|e| bb_or_pfs_error(e, path))?;
            if in_kernel && !verify {
                copied += len as u64;
                continue;
            }
            let mut bytes = data.read(item.ino, offset, len as u32).map_err(bb_error)?;
            // A hole in the burst-buffer file reads short: it is zeros up to the chunk's end.
            bytes.resize(len, 0);
            if !in_kernel {
                target.write_all_at(&bytes, offset).map_err(|e| ServerError::pfs(path, e))?;
            }
            if verify {
                buf.resize(len, 0);
                read_exact_at(&target, buf, offset).map_err(|e| ServerError::pfs(path, e))?;
                check_same(&bytes, buf, path, offset)?;
            }
            copied += len as u64;
        }
        if let Some(final_path) = &item.publish {
            // Trailing holes: the file must have its full size before it gets its name.
            target.set_len(item.file_size).map_err(|e| ServerError::pfs(path, e))?;
            drop(target);
            as_user(order, || std::fs::rename(path, final_path)).map_err(|e| ServerError::pfs(final_path, e))?;
        }
        Ok(copied)
    })();
    if result.is_err() && item.publish.is_some() {
        // Nothing half-written stays behind under any name this server made.
        let _ = as_user(order, || std::fs::remove_file(path));
    }
    result
}

fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    file.read_exact_at(buf, offset).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being staged")
        } else {
            e
        }
    })
}

/// `--verify`: what was written must read back with the checksum of what was read.
fn check_same(expected: &[u8], written: &[u8], path: &str, offset: u64) -> Result<()> {
    if blake3::hash(expected) == blake3::hash(written) {
        Ok(())
    } else {
        Err(ServerError::new(ErrorCode::Io, format!("verify: checksum mismatch in {path} at offset {offset} ({} bytes)", expected.len())))
    }
}
