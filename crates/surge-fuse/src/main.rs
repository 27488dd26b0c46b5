//! `surge-fuse NAME MOUNTPOINT`: serves a FUSE mount of instance NAME until it is unmounted.
//! Normally started by `surge mount` (which waits for the mount to appear), not by hand.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use surge_client::{Client, ClientOptions};
use surge_fuse_session::{Filesystem, Flow, MountOptions, Session, Transport};

#[derive(Parser)]
#[command(version, about = "Surge FUSE mount daemon")]
struct Args {
    instance: String,
    mountpoint: PathBuf,
    /// This node's address (connection source; picks the namespace in private mode).
    #[arg(long, env = "SURGE_NODE")]
    node: Option<std::net::IpAddr>,
    /// Tokio worker threads answering FUSE requests. One is fastest on small nodes: requests
    /// and their replies then meet on one thread instead of waking each other's.
    #[arg(long, env = "SURGE_FUSE_THREADS", default_value_t = 1)]
    threads: usize,
    /// Seconds the kernel may keep attributes and names without asking. Changes made through
    /// other clients are pushed to it by the servers at once whatever this is; opens always ask.
    /// 0: no kernel caching.
    #[arg(long, env = "SURGE_FUSE_CACHE_SECS", default_value_t = 600.0)]
    cache_secs: f64,
    /// Kernel read-ahead for the mount, KiB (set when running as root; 0: kernel default).
    #[arg(long, default_value_t = 4096)]
    read_ahead_kb: u32,
    /// Only the user running this daemon may use the mount (FUSE's default; not even root):
    /// how a job's buffer is mounted for the job's user. Without it, others may, as the
    /// files' permissions allow (needs root, or user_allow_other in /etc/fuse.conf).
    #[arg(long)]
    owner_only: bool,
    /// Mount read-only: the kernel refuses every change with EROFS (`mount -o remount,rw`
    /// lifts it).
    #[arg(long)]
    read_only: bool,
    /// Execute no program from the mount.
    #[arg(long)]
    no_exec: bool,
    /// Serve a mount a privileged helper already made on this open /dev/fuse descriptor
    /// (as `surge bb prolog` does for a job's user), instead of mounting here. Who may enter
    /// is the files' permissions' business (the helper mounts with default_permissions).
    #[arg(long)]
    fuse_fd: Option<i32>,
    /// Never hand the kernel a data file (FUSE passthrough): every read and write then goes
    /// through this daemon. Passthrough needs CAP_SYS_ADMIN and Linux 6.9+, and is used for
    /// files whose chunks all live on this node's server.
    #[arg(long, env = "SURGE_FUSE_NO_PASSTHROUGH", value_parser = clap::builder::FalseyValueParser::new())]
    no_passthrough: bool,
    /// Take the kernel's requests through io_uring ring entries, one queue per CPU served by a
    /// thread kept on that CPU, where the kernel offers it (Linux 6.14+ with the fuse module's
    /// enable_uring; /dev/fuse otherwise, said in the log). A caller's request is then answered
    /// on its own CPU: mdtest creates 1.5-2x those through /dev/fuse (bench/RESULTS.md).
    /// `--io-uring false` (or SURGE_FUSE_IO_URING=0): always /dev/fuse.
    #[arg(long, env = "SURGE_FUSE_IO_URING", default_value_t = true, action = clap::ArgAction::Set,
          value_parser = clap::builder::FalseyValueParser::new())]
    io_uring: bool,
    /// Most ring entries one CPU's queue grows to (from 32, as requests held long, such as
    /// blocking lock waits, take them). Each costs a header and the address space of a payload
    /// buffer whose pages are only made when used; at the limit, lock waits that would take
    /// the last 16 entries are answered ENOLCK so that the requests that end them still pass.
    #[arg(long, env = "SURGE_FUSE_RING_ENTRIES", default_value_t = 1024, value_parser = clap::value_parser!(u16).range(32..=16384))]
    ring_entries: u16,
    /// Read /dev/fuse on a thread of its own that hands each request to the runtime, instead
    /// of on the runtime's thread where the requests' work runs (which spares a thread
    /// wake-up per request: 4 context switches per create or unlink of mount and server
    /// instead of 7, bench/RESULTS.md). /dev/fuse carries every request without io_uring,
    /// and with it forgets, interrupts and what comes before the rings are set up.
    #[arg(long, env = "SURGE_FUSE_SESSION_THREAD", value_parser = clap::builder::FalseyValueParser::new())]
    session_thread: bool,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SURGE_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: logs go to files and test output too.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    keep_buffers_mapped();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(args.threads).enable_all().build()?;
    let client = Client::for_instance(&args.instance, ClientOptions { node: args.node, ..Default::default() })
        .with_context(|| format!("instance '{}'", args.instance))?;
    let fs = surge_fuse::SurgeFs::new(
        client.clone(),
        runtime.handle().clone(),
        std::time::Duration::from_secs_f64(args.cache_secs),
        !args.no_passthrough,
    );
    // Fail before mounting when the instance does not answer.
    runtime.block_on(client.getattr(surge_client::surge_proto::ROOT_INO)).context("instance root not reachable")?;
    if args.fuse_fd.is_some() {
        // The helper that mounted waits for this line: the instance answered, serving starts.
        println!("ready");
    }
    let notifier = fs.notifier_slot();
    let ops = fs.operations();
    // Each ring queue on a thread of its own, kept on its CPU: driven from the runtime's
    // thread instead, a request of another CPU waits for that thread to be woken there.
    let transport =
        Transport { io_uring: args.io_uring, ring_threads: true, ring_max_depth: args.ring_entries.into(), ..Default::default() };
    let session = match args.fuse_fd {
        Some(fd) => {
            use std::os::fd::FromRawFd;
            // SAFETY: the descriptor was handed to this process open, for it alone, by the
            // helper that mounted it (the command line says which); nothing else here uses it.
            let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
            Session::from_fd(fs, fd, transport)
        }
        None => {
            let options = MountOptions {
                fsname: format!("surge:{}", args.instance),
                subtype: "surge".into(),
                default_permissions: true,
                allow_other: !args.owner_only,
                read_only: args.read_only,
                no_exec: args.no_exec,
            };
            Session::mount(fs, &args.mountpoint, &options, transport).with_context(|| format!("mount {}", args.mountpoint.display()))?
        }
    };
    let _ = notifier.set(session.notifier());
    if args.read_ahead_kb > 0 && args.fuse_fd.is_none() {
        let (mountpoint, kib) = (args.mountpoint.clone(), args.read_ahead_kb);
        std::thread::spawn(move || {
            if let Err(e) = set_read_ahead(&mountpoint, kib) {
                tracing::info!("kernel read-ahead left at its default: {e:#}");
            }
        });
    }
    let served = if !args.session_thread {
        runtime.block_on(async move { tokio::spawn(serve_on_runtime(session)).await.map_err(std::io::Error::other)? })
    } else {
        session.run()
    };
    // Unmounted: what was answered under a delegation reaches the servers before the
    // process ends.
    runtime.block_on(ops.settle_with_servers());
    served.with_context(|| format!("serve {}", args.mountpoint.display()))?;
    Ok(())
}

/// A descriptor a session owns, registered with the runtime's reactor while the session lives.
struct Polled(std::os::fd::RawFd);

impl std::os::fd::AsRawFd for Polled {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0
    }
}

/// What the reactor waits for: readable, or an error (an unmounted connection polls as an
/// error only; the next read or completion reports the end).
const READY: tokio::io::Interest = tokio::io::Interest::READABLE.add(tokio::io::Interest::ERROR);

/// Over io_uring, how long /dev/fuse is left unread once it is found empty after forgets
/// and interrupts only. It then carries those (and the odd request queued there as the rings
/// became ready: then it is read at once), and the kernel sends a forget
/// for every inode it drops: read as they came, each unlinked file cost a wake-up of the
/// runtime, a fifth of mdtest's removal rate on two CPUs; left to gather, they come a few
/// dozen to a read (FUSE_BATCH_FORGET).
const FORGETS_GATHER_FOR: std::time::Duration = std::time::Duration::from_millis(1);

/// Serves the session from a task: requests are read when /dev/fuse is readable, on the
/// runtime's thread, and their work starts there without waking another thread.
async fn serve_on_runtime<FS: Filesystem>(mut session: Session<FS>) -> std::io::Result<()> {
    session.set_nonblocking()?;
    // SAFETY: the descriptor is the session's, open until the session is dropped, which is
    // after `dev` (declared later, dropped first); it always names the same /dev/fuse.
    let dev = unsafe { tokio::io::unix::AsyncFd::register_with_interest(Polled(session.fd()), READY)? };
    loop {
        let mut ready = dev.ready(READY).await?;
        // A bounded batch, so the replies and server traffic of those requests get their turn.
        match session.serve_waiting(64)? {
            Flow::Idle => {
                ready.clear_ready();
                // Not after a request: more may follow it here.
                if session.over_rings() && !session.took_requests() {
                    tokio::time::sleep(FORGETS_GATHER_FOR).await;
                }
            }
            Flow::More => {
                drop(ready);
                tokio::task::yield_now().await;
            }
            Flow::Unmounted => return Ok(()),
        }
    }
}

/// Raises the kernel's read-ahead for the mount. FUSE mounts get at most 128 KiB whatever the
/// file system asks for at init, and a sequential reader then waits on 128 KiB requests;
/// larger read-ahead lets the kernel send 1 MiB requests and keep several in flight.
/// The kernel sets the value when it handles the init reply, so this first waits for the mount
/// to answer (a stat, served by the session once it runs), which also gives its device number.
fn set_read_ahead(mountpoint: &std::path::Path, kib: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(mountpoint)?.dev();
    let bdi = format!("/sys/class/bdi/{}:{}/read_ahead_kb", libc::major(dev), libc::minor(dev));
    std::fs::write(&bdi, kib.to_string()).with_context(|| bdi.clone())?;
    Ok(())
}

/// Every read and write moves 1 MiB buffers. glibc serves allocations that large with mmap by
/// default, so each one costs page faults and zeroed pages (a tenth of the daemon's time in a
/// sequential read); keeping them on the heap lets freed buffers be reused as they are.
fn keep_buffers_mapped() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only tunes glibc's allocator; called before any other thread runs.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}
