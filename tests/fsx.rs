//! `surge-fsx`: a file-system exerciser for one file seen through two mounts of the same file
//! system (two nodes of one instance). It applies a seeded random sequence of operations (read,
//! write, mmap read and write, truncate, fallocate, punch hole, zero range, copy_file_range)
//! to the file through one mount's open descriptor and to an in-memory model of the file's
//! bytes and size, and compares every read with the model at once. Now and then it closes the
//! descriptor, opens the file through the other mount, checks its size (fstat) and every byte
//! against the model, and goes on through that mount: the two mounts swap roles, so what one
//! node wrote is always checked as the other node sees it right after the close.
//!
//! The first mismatch stops the run with a report (the last operations, expected and actual
//! size, the first differing offset and a hexdump around it) and the expected and actual
//! contents saved as `<name>.fsxgood` and `<name>.fsxbad`, with every operation of the run in
//! `<name>.fsxlog`. A run is a function of its arguments: the same seed replays the same
//! operations.
//!
//! `--mix` takes the parameters of xfstests generic/127's six runs: a 256 KiB file,
//! operations of up to 64 KiB; "lite" keeps the file at a fixed size (no truncate, nothing
//! written past its end), "nommap" leaves out the mmap reads and writes, "flush" writes the
//! file back and drops its cached pages after every operation that changes it.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, ValueEnum};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mix {
    LiteNommap,
    LiteMmap,
    StdNommap,
    StdMmap,
    StdNommapFlush,
    StdMmapFlush,
}

impl Mix {
    fn name(self) -> &'static str {
        match self {
            Mix::LiteNommap => "lite-nommap",
            Mix::LiteMmap => "lite-mmap",
            Mix::StdNommap => "std-nommap",
            Mix::StdMmap => "std-mmap",
            Mix::StdNommapFlush => "std-nommap-flush",
            Mix::StdMmapFlush => "std-mmap-flush",
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "surge-fsx",
    about = "Random file operations through one mount, each close checked through another, the two swapping roles"
)]
struct Args {
    /// The directory of the test file, through the first mount.
    #[arg(long)]
    a: PathBuf,
    /// The same directory through the second mount (the same as --a checks a single mount).
    #[arg(long)]
    b: PathBuf,
    /// The test file's name in that directory.
    #[arg(long, default_value = "fsx.file")]
    name: String,
    /// Operations to do (closes not counted).
    #[arg(long, default_value_t = 10_000)]
    ops: u64,
    /// The random generator's seed.
    #[arg(long, default_value_t = 191_110_531)]
    seed: u64,
    /// Presets for the options below (an option given explicitly wins over the preset).
    #[arg(long, value_enum)]
    mix: Option<Mix>,
    /// The file's largest size, in bytes (in lite mode, its size).
    #[arg(long)]
    max_len: Option<u64>,
    /// An operation's largest length, in bytes.
    #[arg(long)]
    max_op: Option<u64>,
    /// The file keeps its size: it starts as that many zeros and nothing changes its size.
    #[arg(long)]
    lite: Option<bool>,
    /// Reads through a shared mapping.
    #[arg(long)]
    mmap_reads: Option<bool>,
    /// Writes through a shared mapping (msync'd before unmapping).
    #[arg(long)]
    mmap_writes: Option<bool>,
    /// fallocate, mode 0 and FALLOC_FL_KEEP_SIZE.
    #[arg(long)]
    fallocate: Option<bool>,
    /// fallocate FALLOC_FL_PUNCH_HOLE.
    #[arg(long)]
    punch_hole: Option<bool>,
    /// fallocate FALLOC_FL_ZERO_RANGE, with and without KEEP_SIZE.
    #[arg(long)]
    zero_range: Option<bool>,
    /// copy_file_range from one range of the file to another.
    #[arg(long)]
    copy_range: Option<bool>,
    /// ftruncate to a random size (never in lite mode).
    #[arg(long)]
    truncate: Option<bool>,
    /// After each operation that changes the file: fsync, and drop its cached pages.
    #[arg(long)]
    flush: Option<bool>,
    /// After each operation, close and check through the other mount with a chance of 1 in K
    /// (0: only at the end).
    #[arg(long, default_value_t = 10)]
    close_every: u64,
    /// Where a failed run saves `<name>.fsxgood`, `.fsxbad` and `.fsxlog` (default: beside
    /// the test file, through the mount the failure was seen on).
    #[arg(long)]
    save_dir: Option<PathBuf>,
    /// Checks the checker: after this operation, changes one byte of the file through the
    /// other mount behind the model's back; the run must then fail.
    #[arg(long, hide = true)]
    corrupt_after: Option<u64>,
}

/// What a run does, from the mix and the explicit options.
#[derive(Clone, Debug)]
struct Config {
    max_len: u64,
    max_op: u64,
    lite: bool,
    kinds: Vec<Kind>,
    flush: bool,
}

impl Config {
    fn from(args: &Args) -> Result<Config, String> {
        let mix = args.mix.unwrap_or(Mix::StdMmap);
        let lite_mix = matches!(mix, Mix::LiteNommap | Mix::LiteMmap);
        let mmap_mix = matches!(mix, Mix::LiteMmap | Mix::StdMmap | Mix::StdMmapFlush);
        let flush_mix = matches!(mix, Mix::StdNommapFlush | Mix::StdMmapFlush);
        let lite = args.lite.unwrap_or(lite_mix);
        let on = |explicit: Option<bool>, preset: bool| explicit.unwrap_or(preset);
        let mut kinds = vec![Kind::Read, Kind::Write];
        for (kind, enabled) in [
            (Kind::MapRead, on(args.mmap_reads, mmap_mix)),
            (Kind::MapWrite, on(args.mmap_writes, mmap_mix)),
            (Kind::Truncate, on(args.truncate, !lite)),
            (Kind::Fallocate, on(args.fallocate, true)),
            (Kind::PunchHole, on(args.punch_hole, true)),
            (Kind::ZeroRange, on(args.zero_range, true)),
            (Kind::CopyRange, on(args.copy_range, true)),
        ] {
            if enabled {
                kinds.push(kind);
            }
        }
        if lite && kinds.contains(&Kind::Truncate) {
            return Err("--truncate true changes the size, which lite mode keeps".into());
        }
        let config = Config {
            max_len: args.max_len.unwrap_or(256 * 1024),
            max_op: args.max_op.unwrap_or(64 * 1024),
            lite,
            kinds,
            flush: on(args.flush, flush_mix),
        };
        if config.max_len == 0 || config.max_op == 0 {
            return Err("--max-len and --max-op must be at least 1".into());
        }
        Ok(config)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Read,
    Write,
    MapRead,
    MapWrite,
    Truncate,
    Fallocate,
    PunchHole,
    ZeroRange,
    CopyRange,
    Close,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::MapRead => "mapread",
            Kind::MapWrite => "mapwrite",
            Kind::Truncate => "truncate",
            Kind::Fallocate => "fallocate",
            Kind::PunchHole => "punch_hole",
            Kind::ZeroRange => "zero_range",
            Kind::CopyRange => "copy_range",
            Kind::Close => "close",
        }
    }
}

/// One operation as done (or skipped), for the log and the failure report.
#[derive(Clone, Debug)]
enum Op {
    Read {
        off: u64,
        len: u64,
    },
    Write {
        off: u64,
        len: u64,
    },
    MapRead {
        off: u64,
        len: u64,
    },
    MapWrite {
        off: u64,
        len: u64,
    },
    Truncate {
        to: u64,
    },
    Fallocate {
        off: u64,
        len: u64,
        keep_size: bool,
    },
    PunchHole {
        off: u64,
        len: u64,
    },
    ZeroRange {
        off: u64,
        len: u64,
        keep_size: bool,
    },
    CopyRange {
        src: u64,
        dst: u64,
        len: u64,
    },
    /// Closed here, reopened and checked through the other mount.
    Close,
    /// Nothing to do (e.g. a read of an empty file).
    Skip {
        kind: Kind,
        why: &'static str,
    },
    /// `--corrupt-after`: one byte changed through the other mount.
    Corrupt {
        off: u64,
    },
}

impl Op {
    fn kind(&self) -> Kind {
        match self {
            Op::Read { .. } => Kind::Read,
            Op::Write { .. } => Kind::Write,
            Op::MapRead { .. } => Kind::MapRead,
            Op::MapWrite { .. } => Kind::MapWrite,
            Op::Truncate { .. } => Kind::Truncate,
            Op::Fallocate { .. } => Kind::Fallocate,
            Op::PunchHole { .. } => Kind::PunchHole,
            Op::ZeroRange { .. } => Kind::ZeroRange,
            Op::CopyRange { .. } => Kind::CopyRange,
            Op::Close | Op::Corrupt { .. } => Kind::Close,
            Op::Skip { kind, .. } => *kind,
        }
    }
}

fn range(off: u64, len: u64) -> String {
    format!("{off:#8x} .. {:#8x} ({len:#x} bytes)", off + len)
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keep = |k: &bool| if *k { " keep_size" } else { "" };
        match self {
            Op::Read { off, len } => write!(f, "read       {}", range(*off, *len)),
            Op::Write { off, len } => write!(f, "write      {}", range(*off, *len)),
            Op::MapRead { off, len } => write!(f, "mapread    {}", range(*off, *len)),
            Op::MapWrite { off, len } => write!(f, "mapwrite   {}", range(*off, *len)),
            Op::Truncate { to } => write!(f, "truncate   to {to:#x}"),
            Op::Fallocate { off, len, keep_size } => write!(f, "fallocate  {}{}", range(*off, *len), keep(keep_size)),
            Op::PunchHole { off, len } => write!(f, "punch_hole {}", range(*off, *len)),
            Op::ZeroRange { off, len, keep_size } => write!(f, "zero_range {}{}", range(*off, *len), keep(keep_size)),
            Op::CopyRange { src, dst, len } => write!(f, "copy_range {} to {dst:#x}", range(*src, *len)),
            Op::Close => write!(f, "close, reopen through the other mount, check"),
            Op::Skip { kind, why } => write!(f, "{:<10} skipped: {why}", kind.name()),
            Op::Corrupt { off } => write!(f, "CORRUPT    one byte at {off:#x} through the other mount (--corrupt-after)"),
        }
    }
}

/// An operation in the log: its number, the mount it went through, the size it left.
struct Record {
    number: u64,
    mount: usize,
    op: Op,
    size_before: u64,
    size_after: u64,
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let size = if self.size_before == self.size_after {
            format!("size {:#x}", self.size_after)
        } else {
            format!("size {:#x} -> {:#x}", self.size_before, self.size_after)
        };
        write!(f, "{:>7} {} {:<62} {size}", self.number, MOUNT_NAMES[self.mount], self.op.to_string())
    }
}

const MOUNT_NAMES: [&str; 2] = ["a", "b"];

/// SplitMix64: small, fast and fixed, so that a seed replays the same run on any build.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0); the modulo bias is far below what matters here.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

/// The bytes operation `number` writes at file offset `at..`: never zero (so that a hole or a
/// lost write shows), and different from one operation to the next and along the range (so that
/// a byte put at the wrong offset shows).
fn write_pattern(number: u64, at: u64, len: u64) -> Vec<u8> {
    (at..at + len).map(|x| (number.wrapping_mul(131).wrapping_add(x) % 255 + 1) as u8).collect()
}

/// Why a run stopped early.
enum Failure {
    /// The file differs from the model.
    Mismatch(String),
    /// A call failed that should not have.
    Error(String),
}

struct Fsx {
    args: Args,
    config: Config,
    rng: Rng,
    paths: [PathBuf; 2],
    /// The mount the open descriptor is on.
    current: usize,
    file: Option<File>,
    /// What the file must hold: its length is the file's size.
    model: Vec<u8>,
    log: Vec<Record>,
    done: BTreeMap<Kind, u64>,
    skipped: u64,
    page: u64,
    /// Where the last whole-file read that disagreed with the model put what it read.
    bad: Option<Vec<u8>>,
}

fn errno_text(what: &str, e: io::Error) -> Failure {
    Failure::Error(format!("{what}: {e}"))
}

fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).write(true).open(path)
}

/// Reads the whole file through `file` until end of file.
fn read_whole(file: &File) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read_at(&mut buf, out.len() as u64)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// Reads `len` bytes at `off` through `file`, fewer where the file ends.
fn read_range(file: &File, off: u64, len: u64) -> io::Result<Vec<u8>> {
    let mut out = vec![0u8; len as usize];
    let mut got = 0;
    while got < out.len() {
        let n = file.read_at(&mut out[got..], off + got as u64)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    out.truncate(got);
    Ok(out)
}

fn os_result(ret: libc::c_int) -> io::Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn fallocate(file: &File, mode: libc::c_int, off: u64, len: u64) -> io::Result<()> {
    // SAFETY: fallocate(2) takes a descriptor this process owns and plain integers.
    os_result(unsafe { libc::fallocate(file.as_raw_fd(), mode, off as libc::off_t, len as libc::off_t) })
}

/// A shared mapping of `[start, start + len)` of a file, unmapped when dropped.
struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    fn new(file: &File, start: u64, len: usize, writable: bool) -> io::Result<Mapping> {
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: a new mapping chosen by the kernel (no fixed address), of a descriptor this
        // process owns; nothing else refers to the memory until it is returned.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, file.as_raw_fd(), start as libc::off_t) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no reference into it outlives self.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

impl Fsx {
    /// The open descriptor (absent only between a close and the next open).
    fn file(&self) -> &File {
        self.file.as_ref().expect("the file is open")
    }

    fn size(&self) -> u64 {
        self.model.len() as u64
    }

    /// The file as the model has it after `[.., end)` came into existence: what grows is zeros.
    fn grow_to(&mut self, end: u64) {
        if end > self.size() {
            self.model.resize(end as usize, 0);
        }
    }

    /// An offset and a length for an operation that may reach up to `limit` (the largest size,
    /// or in lite mode and for ranges that must exist, the current size); None if `limit` is 0.
    fn pick_range(&mut self, limit: u64) -> Option<(u64, u64)> {
        if limit == 0 {
            return None;
        }
        let off = self.rng.below(limit);
        let len = (1 + self.rng.below(self.config.max_op)).min(limit - off);
        Some((off, len))
    }

    /// How far a write-like operation may reach.
    fn write_limit(&self) -> u64 {
        if self.config.lite {
            self.size()
        } else {
            self.config.max_len
        }
    }

    /// A read of `len` bytes at `off` returned `got`: it must be what the model holds there.
    fn compare_read(&mut self, what: &str, off: u64, len: u64, got: &[u8]) -> Result<(), Failure> {
        let size = self.size();
        let want = self.model[off.min(size) as usize..(off + len).min(size) as usize].to_vec();
        if want == got {
            return Ok(());
        }
        Err(self.mismatch_in(what, off, &want, got))
    }

    fn mismatch_in(&mut self, what: &str, off: u64, want: &[u8], got: &[u8]) -> Failure {
        let mut text = format!("{what} at {off:#x}: expected {:#x} bytes, got {:#x}\n", want.len(), got.len());
        text += &describe_difference(off, want, got);
        // What the whole file holds now, through this same descriptor, for `.fsxbad`.
        self.bad = read_whole(self.file()).ok();
        Failure::Mismatch(text)
    }

    fn flush(&self, off: u64, len: u64) -> Result<(), Failure> {
        if !self.config.flush {
            return Ok(());
        }
        self.file().sync_all().map_err(|e| errno_text("fsync (flush)", e))?;
        // SAFETY: posix_fadvise(2) takes a descriptor this process owns and plain integers.
        let ret =
            unsafe { libc::posix_fadvise(self.file().as_raw_fd(), off as libc::off_t, len as libc::off_t, libc::POSIX_FADV_DONTNEED) };
        if ret != 0 {
            return Err(errno_text("posix_fadvise DONTNEED (flush)", io::Error::from_raw_os_error(ret)));
        }
        Ok(())
    }

    /// The size the file system reports for the open descriptor must be the model's.
    fn check_fstat(&mut self, when: &str) -> Result<(), Failure> {
        let size = self.file().metadata().map_err(|e| errno_text("fstat", e))?.len();
        if size != self.size() {
            self.bad = read_whole(self.file()).ok();
            return Err(Failure::Mismatch(format!("fstat {when}: size {size:#x}, expected {:#x}", self.size())));
        }
        Ok(())
    }

    /// Chooses, does and checks operation `number`; returns what it did.
    fn step(&mut self, number: u64) -> Result<Op, Failure> {
        let kind = self.config.kinds[self.rng.below(self.config.kinds.len() as u64) as usize];
        let skip = |why| Ok(Op::Skip { kind, why });
        match kind {
            Kind::Read | Kind::MapRead => {
                let size = self.size();
                let Some((off, len)) = self.pick_range(size) else { return skip("empty file") };
                let got = if kind == Kind::Read {
                    read_range(self.file(), off, len).map_err(|e| errno_text("pread", e))?
                } else {
                    // A mapping past the end of the file faults (SIGBUS): the size first.
                    self.check_fstat("before mapread")?;
                    self.map_read(off, len).map_err(|e| errno_text("mmap (read)", e))?
                };
                let what = if kind == Kind::Read { "read" } else { "mapread" };
                self.compare_read(what, off, len, &got)?;
                Ok(if kind == Kind::Read { Op::Read { off, len } } else { Op::MapRead { off, len } })
            }
            Kind::Write | Kind::MapWrite => {
                let limit = self.write_limit();
                let Some((off, len)) = self.pick_range(limit) else { return skip("empty file (lite)") };
                let data = write_pattern(number, off, len);
                if kind == Kind::Write {
                    self.file().write_all_at(&data, off).map_err(|e| errno_text("pwrite", e))?;
                } else {
                    if off + len > self.size() {
                        // A mapping reaches only what exists: extend first.
                        self.file().set_len(off + len).map_err(|e| errno_text("ftruncate (before mapwrite)", e))?;
                        self.grow_to(off + len);
                    }
                    self.check_fstat("before mapwrite")?;
                    self.map_write(off, &data).map_err(|e| errno_text("mmap (write)", e))?;
                }
                self.grow_to(off + len);
                self.model[off as usize..(off + len) as usize].copy_from_slice(&data);
                self.flush(off, len)?;
                Ok(if kind == Kind::Write { Op::Write { off, len } } else { Op::MapWrite { off, len } })
            }
            Kind::Truncate => {
                let to = self.rng.below(self.config.max_len + 1);
                self.file().set_len(to).map_err(|e| errno_text("ftruncate", e))?;
                self.model.resize(to as usize, 0);
                self.flush(0, 0)?;
                Ok(Op::Truncate { to })
            }
            Kind::Fallocate => {
                let limit = self.write_limit();
                let Some((off, len)) = self.pick_range(limit) else { return skip("empty file (lite)") };
                let keep_size = self.rng.chance();
                let mode = if keep_size { libc::FALLOC_FL_KEEP_SIZE } else { 0 };
                fallocate(self.file(), mode, off, len).map_err(|e| errno_text("fallocate", e))?;
                if !keep_size {
                    self.grow_to(off + len);
                }
                self.flush(off, len)?;
                Ok(Op::Fallocate { off, len, keep_size })
            }
            Kind::PunchHole => {
                let size = self.size();
                let Some((off, len)) = self.pick_range(size) else { return skip("empty file") };
                fallocate(self.file(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, off, len)
                    .map_err(|e| errno_text("fallocate PUNCH_HOLE", e))?;
                self.model[off as usize..(off + len) as usize].fill(0);
                self.flush(off, len)?;
                Ok(Op::PunchHole { off, len })
            }
            Kind::ZeroRange => {
                let limit = self.write_limit();
                let Some((off, len)) = self.pick_range(limit) else { return skip("empty file (lite)") };
                let keep_size = self.rng.chance();
                let mode = libc::FALLOC_FL_ZERO_RANGE | if keep_size { libc::FALLOC_FL_KEEP_SIZE } else { 0 };
                fallocate(self.file(), mode, off, len).map_err(|e| errno_text("fallocate ZERO_RANGE", e))?;
                if !keep_size {
                    self.grow_to(off + len);
                }
                let size = self.size();
                self.model[off.min(size) as usize..(off + len).min(size) as usize].fill(0);
                self.flush(off, len)?;
                Ok(Op::ZeroRange { off, len, keep_size })
            }
            Kind::CopyRange => {
                let size = self.size();
                let Some((src, len)) = self.pick_range(size) else { return skip("empty file") };
                let limit = self.write_limit();
                if len >= limit {
                    return skip("no room for a second range");
                }
                // The two ranges of one file must not overlap (EINVAL): a few tries.
                let dst = (0..8).map(|_| self.rng.below(limit - len + 1)).find(|&dst| dst + len <= src || src + len <= dst);
                let Some(dst) = dst else { return skip("no range found that does not overlap the source") };
                self.copy_range(src, dst, len).map_err(|e| errno_text("copy_file_range", e))?;
                let data = self.model[src as usize..(src + len) as usize].to_vec();
                self.grow_to(dst + len);
                self.model[dst as usize..(dst + len) as usize].copy_from_slice(&data);
                self.flush(dst, len)?;
                Ok(Op::CopyRange { src, dst, len })
            }
            Kind::Close => unreachable!("closes are not drawn as operations"),
        }
    }

    fn map_read(&self, off: u64, len: u64) -> io::Result<Vec<u8>> {
        let start = off & !(self.page - 1);
        let delta = (off - start) as usize;
        let map = Mapping::new(self.file(), start, delta + len as usize, false)?;
        let mut out = vec![0u8; len as usize];
        // SAFETY: `[delta, delta + len)` lies inside the mapping, which the file covers (its
        // size was checked); `out` is a separate allocation of `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping((map.ptr as *const u8).add(delta), out.as_mut_ptr(), len as usize) };
        Ok(out)
    }

    fn map_write(&self, off: u64, data: &[u8]) -> io::Result<()> {
        let start = off & !(self.page - 1);
        let delta = (off - start) as usize;
        let map = Mapping::new(self.file(), start, delta + data.len(), true)?;
        // SAFETY: `[delta, delta + len)` lies inside the writable mapping, which the file covers
        // (extended beforehand); `data` is a separate allocation.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (map.ptr as *mut u8).add(delta), data.len()) };
        let flags = if self.config.flush { libc::MS_SYNC | libc::MS_INVALIDATE } else { libc::MS_SYNC };
        // SAFETY: the whole of the mapping made above, still mapped.
        os_result(unsafe { libc::msync(map.ptr, map.len, flags) })
    }

    fn copy_range(&self, src: u64, dst: u64, len: u64) -> io::Result<()> {
        let fd = self.file().as_raw_fd();
        let (mut from, mut to) = (src as libc::loff_t, dst as libc::loff_t);
        let mut left = len as usize;
        while left > 0 {
            // SAFETY: one descriptor this process owns, both offsets are locals it updates.
            let n = unsafe { libc::copy_file_range(fd, &mut from, fd, &mut to, left, 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            if n == 0 {
                return Err(io::Error::other(format!(
                    "copied only {:#x} of {len:#x} bytes: end of file at {from:#x}",
                    len as usize - left
                )));
            }
            left -= n as usize;
        }
        Ok(())
    }

    /// Closes the descriptor, opens the file through the other mount, checks its size and every
    /// byte there, and goes on through that mount.
    fn close_and_check(&mut self) -> Result<(), Failure> {
        let other = 1 - self.current;
        drop(self.file.take());
        let path = &self.paths[other];
        self.file = Some(open(path).map_err(|e| errno_text(&format!("open {}", path.display()), e))?);
        self.current = other;
        let size = self.file().metadata().map_err(|e| errno_text("fstat", e))?.len();
        let got = read_whole(self.file()).map_err(|e| errno_text("read of the whole file", e))?;
        if size == self.size() && got == self.model {
            return Ok(());
        }
        let mut text = format!("after the close, through {}: fstat size {size:#x}, expected {:#x}\n", MOUNT_NAMES[other], self.size());
        text += &format!("read the whole file: {:#x} bytes, expected {:#x}\n", got.len(), self.size());
        text += &describe_difference(0, &self.model, &got);
        self.bad = Some(got);
        Err(Failure::Mismatch(text))
    }

    /// `--corrupt-after`: changes one byte through the other mount without telling the model.
    fn corrupt(&mut self) -> Result<Op, Failure> {
        let size = self.size();
        if size == 0 {
            // Nothing to change: a byte past the end makes the size wrong instead.
            let f = open(&self.paths[1 - self.current]).map_err(|e| errno_text("open (corrupt)", e))?;
            f.write_all_at(&[0x5a], 0).map_err(|e| errno_text("pwrite (corrupt)", e))?;
            return Ok(Op::Corrupt { off: 0 });
        }
        let off = self.rng.below(size);
        let f = open(&self.paths[1 - self.current]).map_err(|e| errno_text("open (corrupt)", e))?;
        f.write_all_at(&[!self.model[off as usize]], off).map_err(|e| errno_text("pwrite (corrupt)", e))?;
        Ok(Op::Corrupt { off })
    }

    fn record(&mut self, number: u64, mount: usize, op: Op, size_before: u64) {
        match op {
            Op::Skip { .. } => self.skipped += 1,
            Op::Corrupt { .. } => {}
            _ => *self.done.entry(op.kind()).or_default() += 1,
        }
        self.log.push(Record { number, mount, op, size_before, size_after: self.size() });
    }

    fn run(&mut self) -> Result<(), (u64, Failure)> {
        for number in 1..=self.args.ops {
            let (mount, before) = (self.current, self.size());
            match self.step(number) {
                Ok(op) => self.record(number, mount, op, before),
                Err(failure) => return Err((number, failure)),
            }
            // A corruption is checked for at once: a later operation could overwrite it.
            let corrupted = self.args.corrupt_after == Some(number);
            if corrupted {
                let op = self.corrupt().map_err(|f| (number, f))?;
                self.record(number, 1 - mount, op, before);
            }
            let drawn = self.args.close_every > 0 && self.rng.below(self.args.close_every) == 0;
            let close = drawn || corrupted || number == self.args.ops;
            if close {
                let (mount, before) = (self.current, self.size());
                self.close_and_check().map_err(|f| (number, f))?;
                self.record(number, mount, Op::Close, before);
            }
        }
        Ok(())
    }

    fn summary(&self) -> String {
        let kinds: Vec<String> = self.done.iter().map(|(kind, n)| format!("{} {n}", kind.name())).collect();
        format!(
            "surge-fsx: {} operations clean (seed {}, mix {}): {}, skipped {}",
            self.args.ops,
            self.args.seed,
            self.args.mix.map_or("-", Mix::name),
            kinds.join(", "),
            self.skipped
        )
    }

    /// Prints the failure report and saves the expected and actual contents and the log.
    fn report(&self, number: u64, failure: &Failure) {
        let (kind, text) = match failure {
            Failure::Mismatch(text) => ("MISMATCH", text),
            Failure::Error(text) => ("ERROR", text),
        };
        let mut out = format!("surge-fsx: {kind} at operation {number} (through mount {})\n", MOUNT_NAMES[self.current]);
        for line in text.lines() {
            out += &format!("  {line}\n");
        }
        out += &format!("the last operations (number, mount, operation, the size it left), of {}:\n", self.log.len());
        for record in &self.log[self.log.len().saturating_sub(20)..] {
            out += &format!("  {record}\n");
        }
        let command: Vec<String> = std::env::args().collect();
        out += &format!("seed {}, mix {}; replay: {}\n", self.args.seed, self.args.mix.map_or("-", Mix::name), command.join(" "));
        let dir = self.args.save_dir.clone().unwrap_or_else(|| [&self.args.a, &self.args.b][self.current].clone());
        let saved = self.save(&dir);
        match saved {
            Ok(base) => out += &format!("saved {base}.fsxgood (expected), {base}.fsxbad (actual), {base}.fsxlog (every operation)\n"),
            Err(e) => out += &format!("could not save the contents in {}: {e}\n", dir.display()),
        }
        eprint!("{out}");
    }

    fn save(&self, dir: &Path) -> io::Result<String> {
        let base = dir.join(&self.args.name);
        let with = |ext: &str| PathBuf::from(format!("{}.{ext}", base.display()));
        std::fs::write(with("fsxgood"), &self.model)?;
        let bad = match (&self.bad, &self.file) {
            (Some(bad), _) => bad.clone(),
            (None, Some(file)) => read_whole(file).unwrap_or_default(),
            (None, None) => Vec::new(),
        };
        std::fs::write(with("fsxbad"), bad)?;
        let log: String = self.log.iter().map(|r| format!("{r}\n")).collect();
        std::fs::write(with("fsxlog"), log)?;
        Ok(base.display().to_string())
    }
}

/// The first differing offset, how many bytes differ, and a hexdump of both around it.
fn describe_difference(base: u64, want: &[u8], got: &[u8]) -> String {
    let common = want.len().min(got.len());
    let first = (0..common).find(|&i| want[i] != got[i]).unwrap_or(common);
    let differing = (0..common).filter(|&i| want[i] != got[i]).count();
    let mut out = format!(
        "first differing offset {:#x}; {differing} of the {common} bytes present in both differ{}\n",
        base + first as u64,
        if want.len() != got.len() {
            format!(", and the lengths differ ({:#x} expected, {:#x} got)", want.len(), got.len())
        } else {
            String::new()
        }
    );
    let start = (first & !15).saturating_sub(32);
    let end = (start + 96).min(want.len().max(got.len()));
    out += &format!("{:>10}  {:<48} {:<48}\n", "offset", "expected", "got");
    let hex = |bytes: &[u8], from: usize, to: usize| -> String {
        (from..to).map(|i| bytes.get(i).map_or("  ".to_string(), |b| format!("{b:02x}"))).collect::<Vec<_>>().join(" ")
    };
    for row in (start..end).step_by(16) {
        let to = (row + 16).min(end);
        let marker = if (row..to).any(|i| want.get(i) != got.get(i)) { "*" } else { " " };
        out += &format!("{:>#10x}{marker} {:<48} {:<48}\n", base + row as u64, hex(want, row, to), hex(got, row, to));
    }
    out
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match Config::from(&args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("surge-fsx: {e}");
            return ExitCode::from(2);
        }
    };
    let paths = [args.a.join(&args.name), args.b.join(&args.name)];
    let _ = std::fs::remove_file(&paths[0]);
    let created = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&paths[0]);
    let file = match created {
        Ok(file) => file,
        Err(e) => {
            eprintln!("surge-fsx: cannot create {}: {e}", paths[0].display());
            return ExitCode::from(2);
        }
    };
    let model = if config.lite { vec![0u8; config.max_len as usize] } else { Vec::new() };
    // Lite mode starts from a file of real zeros (not a hole), as a preallocated file would be.
    if let Err(e) = file.write_all_at(&model, 0) {
        eprintln!("surge-fsx: cannot fill {}: {e}", paths[0].display());
        return ExitCode::from(2);
    }
    // SAFETY: sysconf(3) only reads a system value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    let mut fsx = Fsx {
        rng: Rng(args.seed),
        config,
        paths,
        current: 0,
        file: Some(file),
        model,
        log: Vec::new(),
        done: BTreeMap::new(),
        skipped: 0,
        page,
        bad: None,
        args,
    };
    match fsx.run() {
        Ok(()) => {
            println!("{}", fsx.summary());
            ExitCode::SUCCESS
        }
        Err((number, failure)) => {
            fsx.report(number, &failure);
            ExitCode::from(1)
        }
    }
}
