//! `surge-fsstress`: seeded random namespace and data operations on one directory tree, meant
//! to run as several processes at once on different mounts of the same file system (different
//! nodes of one instance), all in the same tree, so that each one's names keep changing under
//! the others: a file unlinked or renamed over on one node while another node holds it open,
//! writes to it, truncates it or reserves space in it; a directory removed while the other
//! node creates in it; hard links, symlinks, extended attributes and modes.
//!
//! Like xfstests' fsstress it does not check contents (tests/fsx.rs does that, for one file).
//! It checks that every call succeeds or fails with an error that a name changed by someone
//! else can give (ENOENT, EEXIST, ENOTEMPTY, ...): any other error (EIO, ENOTCONN, ESTALE,
//! ENOSPC, EBADF, ...) stops the run with exit status 1 and a report of the last operations,
//! except ESTALE from a rename, a kernel limit for directories moved on another node
//! (docs/consistency.md, guarantee 7), counted apart.
//! What the tree holds afterwards is for the caller to judge (`surge fsck`, the space every
//! server reports, the tree as each node sees it). A run is a function of its arguments, but
//! runs on several mounts interleave as timing decides.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use rand::{RngExt, SeedableRng};
use rand_xorshift::XorShiftRng;
use rustix::fs::{FallocateFlags, XattrFlags};

#[derive(Parser, Debug)]
#[command(name = "surge-fsstress", about = "Random namespace and data operations on a tree shared with other processes on other mounts")]
struct Args {
    /// The tree's root (made if missing); the processes of one run all get the same tree,
    /// each through its own mount.
    #[arg(long)]
    dir: PathBuf,
    /// Operations to do.
    #[arg(long, default_value_t = 10_000)]
    ops: u64,
    /// The random generator's seed (give each process of a run its own).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Names a directory may hold: fewer names, more collisions between the processes.
    #[arg(long, default_value_t = 4)]
    names: usize,
    /// How deep the tree may grow.
    #[arg(long, default_value_t = 3)]
    depth: usize,
    /// The largest offset plus length of a write, truncate or reservation, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    max_size: u64,
    /// Files kept open across operations (their names may change or go meanwhile).
    #[arg(long, default_value_t = 4)]
    held: usize,
}

/// What one step does. The `Held*` ones act on a descriptor opened by an earlier `Open`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Create,
    Write,
    Append,
    Truncate,
    Reserve,
    Read,
    Mkdir,
    Rmdir,
    Unlink,
    Rename,
    Link,
    Symlink,
    List,
    Chmod,
    SetXattr,
    RemoveXattr,
    Fsync,
    Open,
    HeldWrite,
    HeldTruncate,
    HeldReserve,
    HeldRead,
    UnlinkHeld,
    Close,
}

/// How often each kind is drawn, relative to the others.
const WEIGHTS: [(Kind, u32); 24] = [
    (Kind::Create, 8),
    (Kind::Write, 6),
    (Kind::Append, 3),
    (Kind::Truncate, 3),
    (Kind::Reserve, 3),
    (Kind::Read, 3),
    (Kind::Mkdir, 6),
    (Kind::Rmdir, 3),
    (Kind::Unlink, 5),
    (Kind::Rename, 6),
    (Kind::Link, 3),
    (Kind::Symlink, 2),
    (Kind::List, 3),
    (Kind::Chmod, 2),
    (Kind::SetXattr, 2),
    (Kind::RemoveXattr, 1),
    (Kind::Fsync, 1),
    (Kind::Open, 4),
    (Kind::HeldWrite, 4),
    (Kind::HeldTruncate, 2),
    (Kind::HeldReserve, 2),
    (Kind::HeldRead, 2),
    (Kind::UnlinkHeld, 2),
    (Kind::Close, 3),
];

/// One step as drawn: its kind and the names and numbers it uses.
#[derive(Clone, Debug)]
struct Step {
    kind: Kind,
    path: PathBuf,
    other: Option<PathBuf>,
    offset: u64,
    len: u64,
    /// Which held descriptor (`Held*`, `UnlinkHeld`, `Close`), or a variant (mode, flags).
    choice: usize,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} {}", self.kind, self.path.display())?;
        if let Some(other) = &self.other {
            write!(f, " -> {}", other.display())?;
        }
        write!(f, " off {:#x} len {:#x} choice {}", self.offset, self.len, self.choice)
    }
}

/// Errors a call may give because another process changed the names it uses, or because the
/// random draw asked for something the tree's current shape refuses (a link to a directory,
/// a directory renamed into itself, a symlink loop, an attribute that is not there).
fn expected(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ENOENT
                | libc::EEXIST
                | libc::ENOTEMPTY
                | libc::ENOTDIR
                | libc::EISDIR
                | libc::EINVAL
                | libc::ELOOP
                | libc::EPERM
                | libc::ENODATA
                | libc::EMLINK
        )
    )
}

/// A rename whose source or target is a directory another node moved while this node holds
/// something open inside it gets ESTALE from the kernel (docs/consistency.md).
fn moved_elsewhere(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ESTALE)
}

/// A descriptor kept open, with the name it was opened by (which may no longer be its name).
struct Held {
    file: File,
    path: PathBuf,
}

struct Stress {
    args: Args,
    rng: XorShiftRng,
    held: Vec<Option<Held>>,
    recent: VecDeque<(u64, Step, String)>,
    counts: BTreeMap<Kind, (u64, u64)>,
    refusals: BTreeMap<String, u64>,
}

const RECENT: usize = 20;

impl Stress {
    fn draw_kind(&mut self) -> Kind {
        let total: u32 = WEIGHTS.iter().map(|(_, w)| w).sum();
        let mut pick = self.rng.random_range(0..total);
        for (kind, weight) in WEIGHTS {
            if pick < weight {
                return kind;
            }
            pick -= weight;
        }
        unreachable!("the weights add up to the total")
    }

    /// A path of directories `dN` ending in a directory's name (`dN`) or a file's (`fN`), or
    /// now and then the other kind's, so that the kinds meet too.
    fn draw_path(&mut self, directory: bool) -> PathBuf {
        let depth = self.rng.random_range(1..=self.args.depth);
        let mut path = self.args.dir.clone();
        for _ in 1..depth {
            path.push(format!("d{}", self.rng.random_range(0..self.args.names)));
        }
        let directory = directory != self.rng.random_bool(1.0 / 16.0);
        path.push(format!("{}{}", if directory { 'd' } else { 'f' }, self.rng.random_range(0..self.args.names)));
        path
    }

    fn draw_range(&mut self) -> (u64, u64) {
        let max = self.args.max_size;
        let offset = self.rng.random_range(0..max);
        let len = self.rng.random_range(1..=(max - offset).min(256 << 10));
        (offset, len)
    }

    fn draw(&mut self) -> Step {
        let kind = self.draw_kind();
        let directory = match kind {
            Kind::Mkdir | Kind::Rmdir | Kind::List => true,
            Kind::Rename | Kind::Chmod | Kind::SetXattr | Kind::RemoveXattr => self.rng.random_bool(0.3),
            _ => false,
        };
        let path = self.draw_path(directory);
        let other = matches!(kind, Kind::Rename | Kind::Link | Kind::Symlink).then(|| self.draw_path(directory));
        let (offset, len) = self.draw_range();
        let choice = self.rng.random_range(0..self.args.held.max(1) * 8);
        Step { kind, path, other, offset, len, choice }
    }

    /// The bytes a write puts down: which step wrote them can be told from them.
    fn bytes(number: u64, len: u64) -> Vec<u8> {
        let tag = number.to_le_bytes();
        (0..len as usize).map(|i| tag[i % 8] ^ (i / 8) as u8).collect()
    }

    fn held_slot(&self, step: &Step) -> usize {
        step.choice % self.held.len()
    }

    /// Does the step; `Ok(None)` when the held descriptor it names is not open.
    fn apply(&mut self, number: u64, step: &Step) -> io::Result<Option<()>> {
        let reserve_modes = [
            FallocateFlags::empty(),
            FallocateFlags::KEEP_SIZE,
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            FallocateFlags::ZERO_RANGE,
            FallocateFlags::ZERO_RANGE | FallocateFlags::KEEP_SIZE,
        ];
        let path = step.path.as_path();
        match step.kind {
            Kind::Create => {
                let mut options = OpenOptions::new();
                options.write(true).mode(0o644);
                if step.choice.is_multiple_of(2) {
                    options.create_new(true);
                } else {
                    options.create(true).truncate(true);
                }
                let mut file = options.open(path)?;
                file.write_all(&Self::bytes(number, step.len % (64 << 10)))?;
            }
            Kind::Write => {
                let file = OpenOptions::new().write(true).open(path)?;
                file.write_all_at(&Self::bytes(number, step.len), step.offset)?;
            }
            Kind::Append => {
                let mut file = OpenOptions::new().append(true).open(path)?;
                file.write_all(&Self::bytes(number, step.len % (64 << 10) + 1))?;
            }
            Kind::Truncate => OpenOptions::new().write(true).open(path)?.set_len(step.offset)?,
            Kind::Reserve => {
                let file = OpenOptions::new().write(true).open(path)?;
                rustix::fs::fallocate(&file, reserve_modes[step.choice % reserve_modes.len()], step.offset, step.len)?;
            }
            Kind::Read => {
                let mut body = Vec::new();
                File::open(path)?.read_to_end(&mut body)?;
            }
            Kind::Mkdir => fs::create_dir(path)?,
            Kind::Rmdir => fs::remove_dir(path)?,
            Kind::Unlink => fs::remove_file(path)?,
            Kind::Rename => fs::rename(path, step.other.as_ref().expect("a rename has a target"))?,
            Kind::Link => fs::hard_link(path, step.other.as_ref().expect("a link has a target"))?,
            Kind::Symlink => {
                // A name in the link's own directory, which may or may not exist (or be a loop,
                // or a link itself); never a way out of the tree.
                let target = path.file_name().expect("a drawn path has a name");
                std::os::unix::fs::symlink(target, step.other.as_ref().expect("a symlink has a name"))?
            }
            Kind::List => {
                for entry in fs::read_dir(path)? {
                    match entry.and_then(|e| fs::symlink_metadata(e.path())) {
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            Kind::Chmod => fs::set_permissions(path, fs::Permissions::from_mode(0o600 | (step.choice as u32 & 0o177)))?,
            Kind::SetXattr => {
                let name = format!("user.k{}", step.choice % 3);
                rustix::fs::setxattr(path, name.as_str(), &Self::bytes(number, step.len % 200), XattrFlags::empty())?
            }
            Kind::RemoveXattr => rustix::fs::removexattr(path, format!("user.k{}", step.choice % 3).as_str())?,
            Kind::Fsync => File::open(path)?.sync_all()?,
            Kind::Open => {
                let slot = self.held_slot(step);
                let file = OpenOptions::new().read(true).write(true).open(path)?;
                self.held[slot] = Some(Held { file, path: path.to_path_buf() });
            }
            Kind::HeldWrite | Kind::HeldTruncate | Kind::HeldReserve | Kind::HeldRead | Kind::UnlinkHeld | Kind::Close => {
                let slot = self.held_slot(step);
                if step.kind == Kind::Close {
                    let Some(held) = self.held[slot].take() else { return Ok(None) };
                    held.file.sync_all()?;
                    return Ok(Some(()));
                }
                let Some(held) = &self.held[slot] else { return Ok(None) };
                match step.kind {
                    Kind::HeldWrite => held.file.write_all_at(&Self::bytes(number, step.len), step.offset)?,
                    Kind::HeldTruncate => held.file.set_len(step.offset)?,
                    Kind::HeldReserve => {
                        rustix::fs::fallocate(&held.file, reserve_modes[step.choice % reserve_modes.len()], step.offset, step.len)?
                    }
                    Kind::HeldRead => {
                        let mut body = vec![0; step.len as usize];
                        held.file.read_at(&mut body, step.offset)?;
                    }
                    _ => fs::remove_file(&held.path)?,
                }
            }
        }
        Ok(Some(()))
    }

    /// Descriptor calls never meet a changed name: no error is expected of them.
    fn on_descriptor(kind: Kind) -> bool {
        matches!(kind, Kind::HeldWrite | Kind::HeldTruncate | Kind::HeldReserve | Kind::HeldRead | Kind::Close)
    }

    fn run(&mut self) -> Result<(), String> {
        for number in 1..=self.args.ops {
            let step = self.draw();
            let result = self.apply(number, &step);
            let outcome = match &result {
                Ok(Some(())) => "ok".to_string(),
                Ok(None) => "no descriptor".to_string(),
                Err(e) => e.to_string(),
            };
            if self.recent.len() == RECENT {
                self.recent.pop_front();
            }
            self.recent.push_back((number, step.clone(), outcome));
            let count = self.counts.entry(step.kind).or_default();
            match result {
                Ok(Some(())) => count.0 += 1,
                Ok(None) => {}
                Err(e) if (expected(&e) && !Self::on_descriptor(step.kind)) || (step.kind == Kind::Rename && moved_elsewhere(&e)) => {
                    count.1 += 1;
                    *self.refusals.entry(errno_name(&e)).or_default() += 1;
                }
                Err(e) => return Err(format!("operation {number}, {step}: {e} ({})", errno_name(&e))),
            }
        }
        for slot in 0..self.held.len() {
            if let Some(held) = self.held[slot].take() {
                held.file.sync_all().map_err(|e| format!("closing {}: {e}", held.path.display()))?;
            }
        }
        Ok(())
    }
}

/// `ENOENT` and the like, as the error is known by its errno.
fn errno_name(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => format!("{:?}", nix::errno::Errno::from_raw(code)),
        None => format!("{:?}", e.kind()),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.names == 0 || args.depth == 0 || args.max_size == 0 {
        eprintln!("surge-fsstress: --names, --depth and --max-size must be at least 1");
        return ExitCode::from(2);
    }
    if let Err(e) = fs::create_dir_all(&args.dir) {
        eprintln!("surge-fsstress: cannot make {}: {e}", args.dir.display());
        return ExitCode::from(2);
    }
    let mut stress = Stress {
        rng: XorShiftRng::seed_from_u64(args.seed),
        held: (0..args.held.max(1)).map(|_| None).collect(),
        recent: VecDeque::new(),
        counts: BTreeMap::new(),
        refusals: BTreeMap::new(),
        args,
    };
    let failed = stress.run().err();
    let done: u64 = stress.counts.values().map(|c| c.0).sum();
    let refused: u64 = stress.counts.values().map(|c| c.1).sum();
    let refusals: Vec<String> = stress.refusals.iter().map(|(name, n)| format!("{name} {n}")).collect();
    println!(
        "{} operations (seed {}): {done} done, {refused} refused as expected ({})",
        stress.args.ops,
        stress.args.seed,
        refusals.join(", ")
    );
    let Some(failure) = failed else { return ExitCode::SUCCESS };
    eprintln!("surge-fsstress --dir {} --seed {}: FAILED at {failure}", stress.args.dir.display(), stress.args.seed);
    eprintln!("the last operations:");
    for (number, step, outcome) in &stress.recent {
        eprintln!("{number:>7} {step}: {outcome}");
    }
    ExitCode::from(1)
}
