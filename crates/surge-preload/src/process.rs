//! The library's state in one process: a small runtime of its own, one client per mounted
//! instance (with the directories it holds under delegations), the mount table, and the rule
//! that keeps the library out of its own way.
//!
//! * **Reentrancy.** Every thread has an "inside" mark. While it is set (during the
//!   library's own work, and always on the runtime's threads) every intercepted call goes
//!   straight to the C library: the client's sockets, its local I/O on servers' data files and
//!   the reading of the mount table are never taken for the program's calls.
//! * **The runtime's threads** block every signal (the program's handlers run on its own
//!   threads only) and are named `surge-preload`.
//! * **fork**: the child gets a fresh state on first use; the parent's runtime and client
//!   are left behind untouched (their threads do not exist there). See `descriptors` for what
//!   happens to open files.
//! * **Delegations** (docs/delegation.md): each client watches its servers and holds the
//!   directories it creates and unlinks in most, answering those steps in the process and
//!   writing them back every few milliseconds. Everything held is given back before the
//!   process ends or runs another program ([`Library::settle_with_servers`]); a process killed
//!   outright loses the steps of its last few milliseconds, as it loses writes not yet
//!   published.

use std::cell::Cell;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use surge_client::surge_proto::admin::{Keeps, Notice};
use surge_client::{Client, ClientOptions, DelegatedDir, Delegations, Seen, Watcher};

use crate::cache::Cache;
use crate::mounts::{Mount, Mounts};

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is doing the library's own work (or cannot tell, while it exits).
pub(crate) fn inside() -> bool {
    INSIDE.try_with(Cell::get).unwrap_or(true)
}

/// Marks this thread as doing the library's work until dropped; None if it already is.
pub(crate) struct Inside(());

impl Inside {
    pub(crate) fn enter() -> Option<Inside> {
        INSIDE.try_with(|inside| !inside.replace(true)).unwrap_or(false).then_some(Inside(()))
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|inside| inside.set(false));
    }
}

/// Stops the process with a message: for the impossible (a C library without `read`).
pub(crate) fn die(why: &str) -> ! {
    let line = format!("surge-preload: {why}\n");
    // SAFETY: writes a valid buffer of the stated length to standard error.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
    std::process::abort()
}

pub(crate) struct Library {
    /// Started with the first client: a process that never touches a Surge file gets no
    /// thread of the library's (a thread changes how set*id and capabilities behave).
    runtime: OnceLock<Option<tokio::runtime::Runtime>>,
    mounts: Mutex<MountTable>,
    /// Per instance: its client, or None when it cannot be reached from here (the kernel then
    /// serves its mounts, through `surge-fuse`).
    instances: Mutex<HashMap<String, Option<Arc<Instance>>>>,
    /// The process's umask, as last set through `umask` (read once at start).
    umask: AtomicU32,
}

struct MountTable {
    /// Shared with the calls under way: a change of the table makes a new one.
    mounts: Arc<Mounts>,
    /// /proc/self/mountinfo, kept open: it polls as changed when a mount comes or goes.
    watch: Option<std::fs::File>,
}

static LIBRARY: AtomicPtr<Library> = AtomicPtr::new(std::ptr::null_mut());
static STARTING: AtomicBool = AtomicBool::new(false);

/// The library's state, made on first use (without threads: see `Library::runtime`).
pub(crate) fn library() -> Option<&'static Library> {
    let current = LIBRARY.load(Ordering::Acquire);
    if !current.is_null() {
        // SAFETY: a published state is leaked, never freed: it lives as long as the process.
        return Some(unsafe { &*current });
    }
    // Made by one thread; the others pass to the kernel meanwhile (a first call racing
    // another is served as if the library were not loaded, which is always correct).
    if STARTING.swap(true, Ordering::AcqRel) {
        return None;
    }
    let made = Library::new().map(|library| Box::into_raw(Box::new(library)));
    if let Some(made) = made {
        LIBRARY.store(made, Ordering::Release);
        at_fork_once();
    }
    STARTING.store(false, Ordering::Release);
    // SAFETY: as above.
    made.map(|made| unsafe { &*made })
}

/// The library's state if it was made already (never makes it).
pub(crate) fn current() -> Option<&'static Library> {
    let current = LIBRARY.load(Ordering::Acquire);
    // SAFETY: as in `library`.
    (!current.is_null()).then(|| unsafe { &*current })
}

impl Library {
    fn new() -> Option<Library> {
        Some(Library {
            runtime: OnceLock::new(),
            mounts: Mutex::new(MountTable::read()),
            instances: Mutex::new(HashMap::new()),
            umask: AtomicU32::new(umask_at_start()),
        })
    }

    /// Runs `work` to its end on this thread (its I/O is driven by the runtime's thread).
    /// Not the runtime's `block_on`: the program may call from inside a runtime of its own.
    pub(crate) fn run<F: Future>(&self, work: F) -> F::Output {
        let Some(runtime) = self.runtime.get().and_then(Option::as_ref) else {
            die("a call was served before the library's runtime started");
        };
        let _context = runtime.enter();
        futures_executor::block_on(work)
    }

    /// The runtime, started on first use; None if its thread cannot be started.
    fn runtime(&self) -> Option<&tokio::runtime::Runtime> {
        self.runtime
            .get_or_init(|| {
                log_if_asked();
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("surge-preload")
                    .on_thread_start(library_thread)
                    .enable_all()
                    .build()
                    .ok()
            })
            .as_ref()
    }

    /// The current Surge mounts (re-read when the table changed: one poll of it per call).
    pub(crate) fn mounts(&self) -> Arc<Mounts> {
        let mut table = self.mounts.lock().unwrap_or_else(|e| e.into_inner());
        if table.changed() {
            *table = MountTable::read();
        }
        table.mounts.clone()
    }

    /// `mount`'s instance: its client and delegations, connected on first use.
    pub(crate) fn instance(&self, mount: &Mount) -> Option<Arc<Instance>> {
        let mut instances = self.instances.lock().unwrap_or_else(|e| e.into_inner());
        // Every served call asks: found without making a key.
        if let Some(known) = instances.get(&mount.instance) {
            return known.clone();
        }
        instances
            .entry(mount.instance.clone())
            .or_insert_with(|| {
                let runtime = self.runtime()?;
                let _context = runtime.enter();
                // The program asks the kernel too (the calls the library leaves to the mount):
                // once a change of ours is answered, the mount's kernel must not hold the old
                // attributes any more.
                let options = ClientOptions { await_watchers: true, ..Default::default() };
                let client = Client::for_instance(&mount.instance, options).ok()?;
                let delegations = Delegations::new(client.clone(), runtime.handle().clone());
                delegations.back_off_after_recalls();
                let cache = Cache::new(client.clone(), runtime.handle().clone());
                // Before the client sends anything: only connections opened afterwards bring
                // notices (a recall among them).
                client.watch(Arc::new(Notices { delegations: delegations.clone(), cache: cache.clone() }));
                Some(Arc::new(Instance { client, delegations, cache }))
            })
            .clone()
    }

    /// Whether this process holds any directory under a delegation, or asked for one.
    pub(crate) fn holds_delegations(&self) -> bool {
        self.instances.lock().unwrap_or_else(|e| e.into_inner()).values().flatten().any(|i| i.delegations.any_wanted())
    }

    /// Every instance this process reached.
    pub(crate) fn instances(&self) -> Vec<Arc<Instance>> {
        self.instances.lock().unwrap_or_else(|e| e.into_inner()).values().flatten().cloned().collect()
    }

    /// Runs `work` once every step answered under a delegation is applied at its home: what a
    /// request of this process's may depend on (a file made here and named again, a name
    /// removed here and looked up).
    pub(crate) fn run_settled<T>(&self, work: impl Future<Output = surge_client::Result<T>>) -> surge_client::Result<T> {
        let instances = self.instances();
        self.run(async {
            for instance in &instances {
                instance.delegations.settle().await?;
            }
            work.await
        })
    }

    /// Whether the servers have yet to hear of something this process did: a delegation is
    /// held (what it answered lives only here), or answers are left to the background.
    pub(crate) fn owes_servers(&self) -> bool {
        self.holds_delegations() || self.instances().iter().any(|instance| instance.client.has_background())
    }

    /// Writes back and gives up every delegation this process holds, and waits for the
    /// answers left to the background: before the process ends or becomes another program.
    pub(crate) fn settle_with_servers(&self) {
        let instances = self.instances();
        if !instances.is_empty() {
            self.run(async {
                for instance in &instances {
                    instance.delegations.give_all_back().await;
                    instance.client.background_done().await;
                }
            });
        }
    }

    pub(crate) fn umask(&self) -> u32 {
        self.umask.load(Ordering::Relaxed)
    }

    pub(crate) fn set_umask(&self, mask: u32) {
        self.umask.store(mask & 0o777, Ordering::Relaxed);
    }
}

/// A Surge instance this process reached.
pub(crate) struct Instance {
    pub client: Client,
    pub delegations: Arc<Delegations>,
    /// The names and attributes `stat` is answered from (see `cache`).
    pub cache: Arc<Cache>,
}

impl Instance {
    /// The delegation of directory `dir` while it answers here.
    pub(crate) fn delegated(&self, dir: u64) -> Option<Arc<DelegatedDir>> {
        self.delegations.held(dir).filter(|d| d.is_held())
    }
}

/// What the servers tell this process's client: changes to the names and attributes its
/// cache keeps (dropped before the notice is acknowledged), and the recalls of its delegated
/// directories.
struct Notices {
    delegations: Arc<Delegations>,
    cache: Arc<Cache>,
}

impl Watcher for Notices {
    fn notice(&self, notice: Notice, _seen: Seen) {
        self.cache.notice(&notice);
        if let Notice::Recall { dir } = notice {
            self.delegations.recall(dir);
        }
    }

    fn lost(&self, server: usize) {
        self.cache.lost(server);
        self.delegations.home_lost(server);
    }

    fn keeps(&self) -> Keeps {
        Keeps::Exactly
    }
}

impl MountTable {
    fn read() -> MountTable {
        let watch = std::fs::File::open("/proc/self/mountinfo").ok().and_then(out_of_the_way);
        let text = watch.as_ref().and_then(|mut f| std::io::read_to_string(&mut f).ok()).unwrap_or_default();
        let mounts = Mounts::parse(&text).only(std::env::var_os("SURGE_PRELOAD_MOUNTS").as_deref());
        MountTable { mounts: Arc::new(mounts), watch }
    }

    /// The kernel marks the open table (POLLPRI) when a mount comes or goes.
    fn changed(&self) -> bool {
        use std::os::fd::AsRawFd;
        let Some(watch) = &self.watch else { return true };
        let mut poll = libc::pollfd { fd: watch.as_raw_fd(), events: libc::POLLPRI, revents: 0 };
        // SAFETY: one valid pollfd, no wait.
        unsafe { libc::poll(&mut poll, 1, 0) > 0 }
    }
}

/// `file` moved to a descriptor number of 1000 or more (close-on-exec): the low numbers are
/// the program's, which may count on getting the lowest free one.
fn out_of_the_way(file: std::fs::File) -> Option<std::fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let high = (crate::next::FCNTL.get())(file.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 1000);
    // SAFETY: a descriptor just made by F_DUPFD, owned by nothing else.
    (high >= 0).then(|| unsafe { std::fs::File::from_raw_fd(high) })
}

/// With `SURGE_PRELOAD_LOG` set (a filter, as `RUST_LOG` takes: `debug`, `surge_client=debug`),
/// the library's own messages go to standard error, as the daemons' do.
fn log_if_asked() {
    let Some(filter) = std::env::var_os("SURGE_PRELOAD_LOG") else { return };
    let filter = tracing_subscriber::EnvFilter::new(filter.to_string_lossy());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// Every runtime thread: the library's own, deaf to the program's signals.
fn library_thread() {
    let _ = INSIDE.try_with(|inside| inside.set(true));
    // SAFETY: a full set, blocked on this thread only.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

/// The umask the process started with, from the kernel's status file (reading it with
/// umask(2) would change it for a moment under the program's other threads).
fn umask_at_start() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| status.lines().find_map(|l| l.strip_prefix("Umask:")).and_then(|v| u32::from_str_radix(v.trim(), 8).ok()))
        .unwrap_or(0o022)
}

fn at_fork_once() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: the handlers are plain functions that live as long as the process.
        unsafe { libc::pthread_atfork(Some(before_fork), None, Some(in_child)) };
    });
}

/// Before any fork: every descriptor the library serves is handed to the kernel, so parent
/// and child share it as POSIX says (one offset), and the child needs nothing of ours.
extern "C" fn before_fork() {
    let Some(_inside) = Inside::enter() else { return };
    crate::descriptors::hand_all_to_kernel();
}

/// In the child: the parent's runtime threads are not here; a fresh state is made on first
/// use. (The parent's state is leaked, not dropped: dropping it would wait for threads that
/// do not exist.)
extern "C" fn in_child() {
    LIBRARY.store(std::ptr::null_mut(), Ordering::Release);
    STARTING.store(false, Ordering::Release);
    crate::descriptors::after_fork_in_child();
}
