//! Instance lifecycle: `surge up`, `surge down`, `surge status`.
//!
//! Servers on this machine (loopback or one of its own addresses) are started directly as
//! detached processes; servers on other hosts are started through the scheduler's launcher
//! (`srun`), never by a home-made remote shell. `up` returns only once every server answered
//! an authenticated request.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use surge_client::descriptor::{self, ServerInfo};
use surge_client::servers::link_mirrors;
pub use surge_client::servers::single_server_client;
use surge_client::surge_proto::admin::TakeOver;
use surge_client::surge_proto::mirror::mirror_of;
use surge_client::surge_proto::placement::{DirLayout, CHUNK_SIZES};
use surge_client::surge_proto::workflow::Watermarks;
use surge_client::surge_proto::{ErrorCode, ServerStats};
use surge_client::{ClientOptions, InstanceDescriptor, Mode};

use crate::table::{human_bytes, Table};

/// Port servers listen on when started on another host (where their ready file can't be read).
pub const REMOTE_PORT: u16 = 46000;
const START_TIMEOUT: Duration = Duration::from_secs(20);

pub struct UpParams {
    pub name: String,
    pub servers: usize,
    pub capacity: u64,
    pub root: PathBuf,
    pub hosts: Vec<String>,
    pub mode: Mode,
    pub chunk_size: u64,
    /// Servers check permissions against MUNGE-proven identities (`--check-identity`).
    pub check_identity: bool,
    /// The root directory's layout, which directories made in it inherit (`--layout`).
    pub layout: DirLayout,
    /// Back-pressure on every server's share (`--high-water`, `--low-water`).
    pub watermarks: Option<Watermarks>,
    /// Copies of each server's share (`--replicas`).
    pub replicas: u8,
    /// Seconds after which a lost server's share is taken over by itself (`--failover-after`).
    pub failover_after: Option<f64>,
}

/// Default hosts: loopback aliases 127.0.0.11, .12, ... — one address per "node".
pub fn default_hosts(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("127.0.0.{}", 11 + i)).collect()
}

/// A program installed beside this one (`surge-server`, `surge-fuse`), else from PATH.
pub fn sibling_binary(name: &str) -> PathBuf {
    if let Ok(exe) = std::env::current_exe() {
        let candidate = exe.with_file_name(name);
        if candidate.exists() {
            return candidate;
        }
    }
    PathBuf::from(name)
}

/// A host this machine is: one of its addresses, or the unspecified address (listen on all).
fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || ip.is_unspecified() || surge_client::is_this_hosts(ip)
}

struct Launched {
    index: usize,
    host: String,
    root: PathBuf,
    child: std::process::Child,
    /// Known address for remote servers; local ones announce theirs in ROOT/ready.
    fixed_addr: Option<SocketAddr>,
}

pub async fn up(p: &UpParams) -> Result<(InstanceDescriptor, Duration)> {
    descriptor::check_instance_name(&p.name)?;
    anyhow::ensure!(p.servers >= 1, "an instance needs at least one server");
    anyhow::ensure!(p.servers < 65536, "at most 65535 servers");
    anyhow::ensure!(CHUNK_SIZES.contains(&p.chunk_size), "chunk size must be between 4 KiB and 64 MiB");
    anyhow::ensure!(p.capacity >= p.servers as u64 * 4096, "capacity too small for {} servers", p.servers);
    anyhow::ensure!((1..=2).contains(&p.replicas), "--replicas is 1 or 2");
    if p.replicas > 1 {
        anyhow::ensure!(p.servers >= 2, "--replicas 2 needs at least two servers (each mirrors its share on the next)");
        anyhow::ensure!(
            p.mode == Mode::Striped,
            "--replicas 2 is for striped instances (a private namespace lives and dies with its node)"
        );
    }
    if let Some(after) = p.failover_after {
        anyhow::ensure!(p.replicas > 1, "--failover-after needs --replicas 2");
        anyhow::ensure!(p.servers >= 3, "--failover-after needs three servers or more: a majority decides that one is lost");
        anyhow::ensure!(
            after >= 5.0 && after.is_finite(),
            "--failover-after is at least 5 seconds (a cut-off server must fence itself well before its share is taken over)"
        );
    }
    let desc_path = descriptor::descriptor_path(&p.name);
    let instance_file = std::path::absolute(&desc_path).with_context(|| format!("locate {}", desc_path.display()))?;
    if desc_path.exists() {
        bail!("instance '{}' already exists ({}); run `surge down {}` first", p.name, desc_path.display(), p.name);
    }
    let hosts = if p.hosts.is_empty() { default_hosts(p.servers) } else { p.hosts.clone() };
    // Absolute, so that `surge down` from another directory removes what `up` made.
    let root = std::path::absolute(&p.root).with_context(|| format!("locate --root {}", p.root.display()))?;
    let share = p.capacity / p.servers as u64;
    // A server with replicas also holds its predecessor's share.
    check_local_space(&root, &hosts, p.servers, share * p.replicas as u64)?;
    let start = Instant::now();
    let token_path = descriptor::instances_dir().join(format!("{}.token", p.name));
    descriptor::create_token(&token_path)?;
    // The servers' own key for data tickets (same format as a token; no client gets it).
    let ticket_key_path = match p.check_identity {
        true => {
            let path = descriptor::instances_dir().join(format!("{}.servers.key", p.name));
            descriptor::create_token(&path)?;
            Some(path)
        }
        false => None,
    };
    let instance_root = root.join(&p.name);
    let server_binary = sibling_binary("surge-server");

    let mut launched: Vec<Launched> = Vec::new();
    let result: Result<Vec<ServerInfo>> = async {
        for index in 0..p.servers {
            let host = hosts[index % hosts.len()].clone();
            let root = instance_root.join(format!("server-{index}"));
            if host.parse().is_ok_and(is_local) && root.exists() {
                std::fs::remove_dir_all(&root).with_context(|| format!("clear {}", root.display()))?;
            }
            let plan = ServerLaunch {
                index,
                host,
                root,
                port: 0,
                share,
                mode: p.mode,
                servers: p.servers,
                token_path: &token_path,
                chunk_size: p.chunk_size,
                instance_file: &instance_file,
                ticket_key_path: ticket_key_path.as_deref(),
                layout: p.layout,
                watermarks: p.watermarks,
                replicas: p.replicas,
            };
            launched.push(launch(&server_binary, plan).await?);
        }
        let mut servers = Vec::new();
        for l in launched.iter_mut() {
            let addr = wait_ready(l).await?;
            servers.push(ServerInfo { index: l.index, host: l.host.clone(), addr, pid: Some(l.child.id()), root: l.root.clone() });
        }
        Ok(servers)
    }
    .await;

    let servers = match result {
        Ok(servers) => servers,
        Err(e) => {
            for l in launched.iter_mut() {
                let _ = l.child.kill();
                let _ = l.child.wait();
            }
            let _ = std::fs::remove_file(&token_path);
            if let Some(path) = &ticket_key_path {
                let _ = std::fs::remove_file(path);
            }
            return Err(e);
        }
    };
    let desc = InstanceDescriptor {
        name: p.name.clone(),
        mode: p.mode,
        chunk_size: p.chunk_size,
        capacity: p.capacity,
        // SAFETY: geteuid/getegid take no arguments and cannot fail.
        owner_uid: unsafe { libc::geteuid() },
        token_path,
        root: instance_root,
        created: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs(),
        servers,
        ticket_key_path,
        layout: p.layout,
        watermarks: p.watermarks,
        replicas: p.replicas,
        failover_after: p.failover_after,
    };
    // Every server must answer an authenticated request before the instance counts as up.
    for stats in probe(&desc).await {
        if let Err(e) = stats {
            let _ = down(&desc, true).await;
            bail!("instance '{}' did not come up: {e}", p.name);
        }
    }
    if let Err(e) = link_mirrors(&desc, None).await {
        let _ = down(&desc, true).await;
        bail!("instance '{}' did not come up: {e}", p.name);
    }
    desc.save()?;
    Ok((desc, start.elapsed()))
}

/// The servers started on this machine share the device of `root`: their shares together must
/// fit its free space (each server checks its own share on its node too, which also covers
/// remote hosts).
fn check_local_space(root: &Path, hosts: &[String], servers: usize, share: u64) -> Result<()> {
    let here = (0..servers).filter(|i| hosts[i % hosts.len()].parse().is_ok_and(is_local)).count() as u64;
    if here == 0 {
        return Ok(());
    }
    let existing = root.ancestors().find(|a| a.exists()).unwrap_or(Path::new("/"));
    let free =
        surge_client::surge_proto::host::available_bytes(existing).with_context(|| format!("free space of {}", existing.display()))?;
    if share * here > free {
        bail!(
            "{here} servers on this machine would hold {} in {}, which has {} free: ask for less --capacity, or give --root on a larger device",
            human_bytes(share * here),
            existing.display(),
            human_bytes(free)
        );
    }
    Ok(())
}

/// One server to start: where, on which directory, with which share of which instance.
struct ServerLaunch<'a> {
    index: usize,
    host: String,
    root: PathBuf,
    /// Port to listen on for a server on this machine (0: any, announced in ROOT/ready).
    port: u16,
    share: u64,
    mode: Mode,
    servers: usize,
    token_path: &'a Path,
    chunk_size: u64,
    instance_file: &'a Path,
    /// The servers' ticket key file, when they check identities.
    ticket_key_path: Option<&'a Path>,
    /// The instance's default layout (a fresh root's).
    layout: DirLayout,
    watermarks: Option<Watermarks>,
    replicas: u8,
}

/// Starts one server: on this machine as a detached process, on another host through the
/// scheduler's launcher (inside the allocation).
async fn launch(server_binary: &Path, s: ServerLaunch<'_>) -> Result<Launched> {
    // Private mode: every server is a namespace of its own.
    let (srv_index, srv_count) = match s.mode {
        Mode::Striped => (s.index, s.servers),
        Mode::Private => (0, 1),
    };
    let mut cmd;
    let fixed_addr;
    match s.host.parse::<IpAddr>() {
        Ok(ip) if is_local(ip) => {
            std::fs::create_dir_all(&s.root).with_context(|| format!("create {}", s.root.display()))?;
            // Owner only from the start (the server's log is made here before the server runs).
            std::fs::set_permissions(&s.root, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .with_context(|| format!("restrict {} to its owner", s.root.display()))?;
            cmd = Command::new(server_binary);
            cmd.arg("--listen").arg(SocketAddr::new(ip, s.port).to_string());
            let log = std::fs::OpenOptions::new().create(true).append(true).open(s.root.join("server.log"))?;
            cmd.stdout(Stdio::null()).stderr(log);
            fixed_addr = None;
        }
        _ => {
            cmd = Command::new("srun");
            cmd.args(["--nodes=1", "--ntasks=1", "--overlap", "--nodelist"]).arg(&s.host).arg(server_binary);
            cmd.arg("--listen").arg(format!("0.0.0.0:{REMOTE_PORT}"));
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
            let addr = format!("{}:{REMOTE_PORT}", s.host);
            fixed_addr = Some(
                tokio::net::lookup_host(&addr)
                    .await
                    .with_context(|| format!("resolve {addr}"))?
                    .next()
                    .with_context(|| format!("resolve {addr}"))?,
            );
        }
    }
    cmd.arg("--root").arg(&s.root);
    cmd.arg("--capacity").arg(s.share.to_string());
    cmd.arg("--index").arg(srv_index.to_string());
    cmd.arg("--count").arg(srv_count.to_string());
    cmd.arg("--token-file").arg(s.token_path);
    // The coordinator beside each server finds the others here once all are up.
    cmd.arg("--chunk-size").arg(s.chunk_size.to_string());
    cmd.arg("--instance-file").arg(s.instance_file);
    if let Some(path) = s.ticket_key_path {
        cmd.arg("--ticket-key-file").arg(path);
    }
    cmd.arg("--layout").arg(s.layout.name());
    cmd.arg("--replicas").arg(s.replicas.to_string());
    if let Some(marks) = s.watermarks {
        cmd.arg("--high-water").arg(marks.high.to_string()).arg("--low-water").arg(marks.low.to_string());
        cmd.arg("--pressure-wait").arg(marks.wait_secs.to_string());
    }
    cmd.stdin(Stdio::null());
    detach(&mut cmd);
    let child = cmd.spawn().with_context(|| format!("start {}", server_binary.display()))?;
    Ok(Launched { index: s.index, host: s.host, root: s.root, child, fixed_addr })
}

/// `surge restart`: starts again, on their directories and addresses, the servers of an
/// instance that are not answering (or the one given); each comes back with its namespace
/// share and data (see the server's journal). Clients and mounts reconnect by themselves.
pub async fn restart(desc: &mut InstanceDescriptor, only: Option<usize>) -> Result<Vec<usize>> {
    let stats = probe(desc).await;
    let share = desc.capacity / desc.servers.len() as u64;
    let instance_file = std::path::absolute(descriptor::descriptor_path(&desc.name))?;
    let server_binary = sibling_binary("surge-server");
    let mut restarted = Vec::new();
    for (position, stat) in stats.iter().enumerate() {
        let server = desc.servers[position].clone();
        match only {
            Some(i) if i != server.index => continue,
            None if stat.is_ok() => continue,
            _ => {}
        }
        if stat.is_ok() {
            bail!("server {} of '{}' is up and answering: stop it first to restart it", server.index, desc.name);
        }
        if let Some(pid) = server.pid.filter(|&pid| pid_running(pid)) {
            bail!("server {} (pid {pid}) is running but not answering: stop it (kill {pid}) to restart it", server.index);
        }
        if let Some(next) = stand_in_for(desc, &stats, position) {
            bail!(
                "server {}'s share is served by server {next} since it was taken over: its own directory is older than the \
                 share, and it does not come back (the share stays with server {next} until the instance ends)",
                server.index
            );
        }
        let _ = std::fs::remove_file(server.root.join("ready"));
        let plan = ServerLaunch {
            index: server.index,
            host: server.host.clone(),
            root: server.root.clone(),
            port: server.addr.port(),
            share,
            mode: desc.mode,
            servers: desc.servers.len(),
            token_path: &desc.token_path,
            chunk_size: desc.chunk_size,
            instance_file: &instance_file,
            ticket_key_path: desc.ticket_key_path.as_deref(),
            layout: desc.layout,
            watermarks: desc.watermarks,
            replicas: desc.replicas,
        };
        let mut launched = launch(&server_binary, plan).await?;
        let addr = wait_ready(&mut launched).await?;
        anyhow::ensure!(addr == server.addr, "server {} came back on {addr}, not {}", server.index, server.addr);
        desc.servers[position].pid = Some(launched.child.id());
        // It mirrors its share again (filling the mirror anew); its predecessor's link finds
        // it by itself.
        link_mirrors(desc, Some(server.index)).await?;
        restarted.push(server.index);
    }
    desc.save()?;
    Ok(restarted)
}

/// The server serving server `position`'s share in its place (its successor, after a
/// failover), as `stats` (one per server) tell.
fn stand_in_for(desc: &InstanceDescriptor, stats: &[surge_client::Result<ServerStats>], position: usize) -> Option<usize> {
    if desc.replicas < 2 {
        return None;
    }
    let next = mirror_of(position, desc.servers.len());
    let index = desc.servers[position].index as u32;
    match &stats[next] {
        Ok(s) if s.standing_in_for.contains(&index) => Some(desc.servers[next].index),
        _ => None,
    }
}

/// How long `surge failover` waits for the lost server's mirror connection to end (it ends
/// by TCP keepalive when the server's node died without a word).
const FAILOVER_WAIT: Duration = Duration::from_secs(60);

/// `surge failover`: server `index` is lost; its successor serves its share from the mirror
/// it holds, and clients find it there by themselves. Refused while the server answers.
pub async fn failover(desc: &InstanceDescriptor, index: usize) -> Result<(usize, Duration)> {
    anyhow::ensure!(
        desc.replicas > 1,
        "instance '{}' keeps one copy of each share (started without --replicas 2): nothing to fail over to",
        desc.name
    );
    let position = desc.servers.iter().position(|s| s.index == index).with_context(|| format!("no server {index} in '{}'", desc.name))?;
    let stats = probe(desc).await;
    if stats[position].is_ok() {
        bail!("server {index} of '{}' is up and answering: a failover is for a lost server", desc.name);
    }
    if let Some(pid) = desc.servers[position].pid.filter(|&pid| pid_running(pid)) {
        bail!("server {index} (pid {pid}) is running but not answering: stop it (kill -9 {pid}) first, so that it cannot come back");
    }
    let next = &desc.servers[mirror_of(position, desc.servers.len())];
    let opts = ClientOptions { timeout: Duration::from_secs(30), node: None, ..Default::default() };
    let client = single_server_client(desc, next, &opts)?;
    let start = Instant::now();
    let mut said = false;
    loop {
        match client.call(0, TakeOver { index: index as u32 }).await {
            Ok(()) => return Ok((next.index, start.elapsed())),
            Err(e) if e.code == ErrorCode::Busy && start.elapsed() < FAILOVER_WAIT => {
                if !said {
                    eprintln!("waiting for server {index}'s mirror connection to server {} to end ...", next.index);
                    said = true;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => bail!("server {} could not take server {index}'s share over: {e}", next.index),
        }
    }
}

/// Runs the command in a session of its own: it outlives this command and its terminal.
pub fn detach(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid is async-signal-safe, as required between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
}

async fn wait_ready(l: &mut Launched) -> Result<SocketAddr> {
    let deadline = Instant::now() + START_TIMEOUT;
    let ready = l.root.join("ready");
    loop {
        if let Some(status) = l.child.try_wait()? {
            let log = std::fs::read_to_string(l.root.join("server.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            bail!(
                "server {} on {} exited with {status} before it was ready: {}",
                l.index,
                l.host,
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            );
        }
        match l.fixed_addr {
            Some(addr) => {
                if tokio::net::TcpStream::connect(addr).await.is_ok() {
                    return Ok(addr);
                }
            }
            None => {
                if let Ok(text) = std::fs::read_to_string(&ready) {
                    return text.trim().parse().with_context(|| format!("bad address in {}", ready.display()));
                }
            }
        }
        if Instant::now() > deadline {
            bail!("server {} on {} not ready after {START_TIMEOUT:?}", l.index, l.host);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Asks every server for its statistics.
pub async fn probe(desc: &InstanceDescriptor) -> Vec<surge_client::Result<ServerStats>> {
    let opts = ClientOptions { timeout: Duration::from_secs(5), node: None, ..Default::default() };
    let mut out = Vec::new();
    for server in &desc.servers {
        let stats = match single_server_client(desc, server, &opts) {
            Ok(client) => client.statfs().await.pop().expect("one server"),
            Err(e) => Err(e),
        };
        out.push(stats);
    }
    out
}

/// The process exists (a zombie too: `down` waits until its parent has collected it).
fn pid_alive(pid: u32) -> bool {
    // SAFETY: kill(2) takes plain integers; a stale pid only makes it fail.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

/// The process runs: it exists and is not a zombie (a killed server whose parent has not
/// collected it holds no socket and no file any more).
fn pid_running(pid: u32) -> bool {
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')));
    pid_alive(pid) && !zombie
}

/// Unmounts the instance (a busy mount stops this unless `force`, see `mount::umount`), stops
/// the servers (politely, then by signal) and removes the instance's data, token and
/// descriptor. Works on a partly dead instance.
pub async fn down(desc: &InstanceDescriptor, force: bool) -> Result<()> {
    crate::mount::umount_all(&desc.name, force)?;
    let opts = ClientOptions { timeout: Duration::from_secs(3), node: None, ..Default::default() };
    for server in &desc.servers {
        if let Ok(client) = single_server_client(desc, server, &opts) {
            let _ = client.shutdown_server(0).await;
        }
    }
    for server in &desc.servers {
        let Some(pid) = server.pid else { continue };
        let deadline = Instant::now() + Duration::from_secs(3);
        while pid_alive(pid) && Instant::now() < deadline {
            reap(pid);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if pid_alive(pid) {
            // SAFETY: kill(2) takes plain integers; a stale pid only makes it fail.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            reap(pid);
        }
    }
    for server in &desc.servers {
        remove_tree(&server.root);
    }
    remove_tree(&desc.root);
    // The --root directory given to `up`, if this instance was all it held.
    if let Some(parent) = desc.root.parent() {
        let _ = std::fs::remove_dir(parent);
    }
    let _ = std::fs::remove_file(&desc.token_path);
    if let Some(path) = &desc.ticket_key_path {
        let _ = std::fs::remove_file(path);
    }
    let _ = std::fs::remove_file(descriptor::descriptor_path(&desc.name));
    Ok(())
}

/// Collects a server we started ourselves in this process (so it does not linger as a zombie).
fn reap(pid: u32) {
    // SAFETY: WNOHANG waitpid on our own child, with no status pointer to write.
    unsafe {
        libc::waitpid(pid as i32, std::ptr::null_mut(), libc::WNOHANG);
    }
}

fn remove_tree(path: &Path) {
    if path.exists() {
        if let Err(e) = std::fs::remove_dir_all(path) {
            eprintln!("warning: could not remove {}: {e}", path.display());
        }
    }
}

/// A server that answers: up, and what holds writes back or how its share is mirrored.
fn up_state(s: &ServerStats) -> String {
    let mut state = String::from(if s.fenced { "FENCED (cut off from most servers)" } else { "up" });
    // Past the high-water mark, writes needing room on this server wait.
    if s.holding_writers {
        state.push_str(", writers wait");
    }
    if let Some(mirror) = s.mirror {
        state.push_str(&format!(", mirror {}", mirror.describe()));
    }
    for lost in &s.standing_in_for {
        state.push_str(&format!(", serving {lost}'s share"));
    }
    state
}

pub fn servers_table(desc: &InstanceDescriptor, stats: &[surge_client::Result<ServerStats>]) -> String {
    let mut table = Table::new(&["server", "host", "address", "state", "used", "capacity", "use%", "files", "dirs"]);
    let (mut used, mut capacity, mut files, mut dirs, mut up) = (0u64, 0u64, 0u64, 0u64, 0usize);
    for (position, (server, stat)) in desc.servers.iter().zip(stats).enumerate() {
        match stat {
            Ok(s) => {
                up += 1;
                used += s.used;
                capacity += s.capacity;
                files += s.files;
                dirs += s.dirs;
                table.row(vec![
                    server.index.to_string(),
                    server.host.clone(),
                    server.addr.to_string(),
                    up_state(s),
                    human_bytes(s.used),
                    human_bytes(s.capacity),
                    format!("{:.1}", 100.0 * s.used as f64 / s.capacity.max(1) as f64),
                    s.files.to_string(),
                    s.dirs.to_string(),
                ]);
            }
            Err(e) => table.row(vec![
                server.index.to_string(),
                server.host.clone(),
                server.addr.to_string(),
                match stand_in_for(desc, stats, position) {
                    Some(next) => format!("LOST, served by {next}"),
                    None => format!("DOWN ({})", e.code.describe()),
                },
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]),
        }
    }
    table.row(vec![
        "total".into(),
        String::new(),
        String::new(),
        format!("{up}/{} up", desc.servers.len()),
        human_bytes(used),
        human_bytes(capacity),
        format!("{:.1}", 100.0 * used as f64 / capacity.max(1) as f64),
        files.to_string(),
        dirs.to_string(),
    ]);
    table.render()
}
