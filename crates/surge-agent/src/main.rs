//! `surge-agent`: the resident node agent of a Surge cluster, one per node that lends its
//! storage to instances (a dedicated burst-buffer node, or a compute node of an on-demand pool).
//!
//! It does one thing: start and stop `surge-server` processes on this node when the manager
//! asks (over TCP, authenticated with the cluster key), each as the instance owner (with the
//! owner's groups, as a job of theirs has them) on a directory of its own under the node's
//! storage (`--root`). What it started is recorded under `<root>/.agent` (root's, not the
//! user's), so that an agent that restarts still knows which servers are its own and a
//! restarted manager can ask what runs on the node. Servers are detached: an agent that stops
//! or dies leaves them serving.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use surge_control::agent::{AgentReply, AgentRequest, RunningServer, ServerPlan};
use surge_control::host::{self, owned_dir, owned_file};
use surge_control::wire;
use tokio::io::BufReader;

const START_TIMEOUT: Duration = Duration::from_secs(20);
const STOP_GRACE: Duration = Duration::from_secs(5);

#[derive(Parser)]
#[command(version, about = "Surge node agent: runs instance servers on this node for the manager")]
struct Args {
    /// Address to listen on for the manager: this node's address (servers listen on it too).
    #[arg(long)]
    listen: SocketAddr,
    /// This node's directory for burst-buffer data; every server gets a directory below it.
    #[arg(long)]
    root: PathBuf,
    /// The cluster key file (0600, 64 hex digits), the same as the manager's.
    #[arg(long)]
    key_file: PathBuf,
    /// The server program (default: `surge-server` beside this program, else on PATH).
    #[arg(long)]
    server_binary: Option<PathBuf>,
}

/// A server this agent started (with its process handle while this agent is its parent).
struct Tracked {
    server: RunningServer,
    child: Option<Child>,
}

struct Agent {
    root: PathBuf,
    ip: IpAddr,
    server_binary: PathBuf,
    servers: Mutex<HashMap<String, Tracked>>,
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SURGE_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    let key = wire::read_key(&args.key_file).with_context(|| format!("cluster key {}", args.key_file.display()))?;
    std::fs::create_dir_all(args.root.join(".agent")).with_context(|| format!("create {}", args.root.display()))?;
    std::fs::set_permissions(args.root.join(".agent"), std::fs::Permissions::from_mode(0o700))?;
    let server_binary = args.server_binary.unwrap_or_else(|| {
        let beside = std::env::current_exe().ok().map(|exe| exe.with_file_name("surge-server"));
        beside.filter(|p| p.exists()).unwrap_or_else(|| PathBuf::from("surge-server"))
    });
    let agent = Arc::new(Agent { root: args.root, ip: args.listen.ip(), server_binary, servers: Mutex::new(HashMap::new()) });
    agent.adopt_recorded();
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("listen on {}", args.listen))?;
        tracing::info!(listen = %args.listen, root = %agent.root.display(), "agent ready");
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, peer) = accepted?;
                    let agent = agent.clone();
                    tokio::spawn(async move {
                        if let Err(e) = serve(agent, stream, &key).await {
                            tracing::warn!(%peer, "connection: {e}");
                        }
                    });
                }
                _ = host::stop_signal() => break,
            }
        }
        tracing::info!("agent stopping; its servers keep running");
        Ok(())
    })
}

async fn serve(agent: Arc<Agent>, stream: tokio::net::TcpStream, key: &[u8; 32]) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    wire::accept_manager(&mut read, &mut write, key).await?;
    wire::serve_lines(read, write, |request: AgentRequest| {
        let agent = agent.clone();
        async move {
            let outcome = match request {
                AgentRequest::Start(plan) => agent.start(plan).await.map(AgentReply::Started),
                AgentRequest::Describe { instance, descriptor } => agent.describe(&instance, &descriptor).map(|()| AgentReply::Done),
                AgentRequest::Stop { instance } => agent.stop(&instance).await.map(|()| AgentReply::Done),
                AgentRequest::List => Ok(AgentReply::Servers(agent.list())),
            };
            outcome.unwrap_or_else(|e| AgentReply::Failed(format!("{e:#}")))
        }
    })
    .await
}

/// Instance names become directory names here: letters, digits, `-`, `_`, `.`, not leading.
fn check_name(name: &str) -> Result<()> {
    let tame = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !tame {
        bail!("bad instance name '{name}'");
    }
    Ok(())
}

fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists; no signal is sent.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

impl Agent {
    fn instance_dir(&self, instance: &str) -> PathBuf {
        self.root.join(instance)
    }

    fn record_path(&self, instance: &str) -> PathBuf {
        self.root.join(".agent").join(format!("{instance}.json"))
    }

    /// Servers recorded by an earlier run of this agent that still run are this agent's again.
    fn adopt_recorded(&self) {
        let Ok(entries) = std::fs::read_dir(self.root.join(".agent")) else { return };
        let mut servers = self.servers.lock().expect("agent state");
        for entry in entries.flatten() {
            let Ok(text) = std::fs::read_to_string(entry.path()) else { continue };
            let Ok(server) = serde_json::from_str::<RunningServer>(&text) else { continue };
            if pid_alive(server.pid) {
                tracing::info!(instance = %server.instance, pid = server.pid, "server still running: adopted");
                servers.insert(server.instance.clone(), Tracked { server, child: None });
            }
        }
    }

    async fn start(&self, plan: ServerPlan) -> Result<RunningServer> {
        check_name(&plan.instance)?;
        anyhow::ensure!(plan.index < plan.count, "server index {} of {}", plan.index, plan.count);
        anyhow::ensure!(plan.uid != 0, "servers do not run as root");
        if let Some(running) = self.list().into_iter().find(|s| s.instance == plan.instance) {
            bail!("a server of '{}' already runs here (pid {})", plan.instance, running.pid);
        }
        let dir = self.instance_dir(&plan.instance);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("clear {}", dir.display()))?;
        }
        owned_dir(&dir, plan.uid, plan.gid)?;
        let root = dir.join("server");
        owned_dir(&root, plan.uid, plan.gid)?;
        owned_file(&dir.join("token"), &plan.secret, plan.uid, plan.gid)?;
        let log_path = dir.join("server.log");
        owned_file(&log_path, "", plan.uid, plan.gid)?;
        let log = std::fs::OpenOptions::new().append(true).open(&log_path)?;

        // The owner's groups, as a login of theirs (and their job) has them: looked up before
        // the fork, as the user database may be a directory service.
        let (uid, gid) = (plan.uid, plan.gid);
        let groups = tokio::task::spawn_blocking(move || host::user_groups(uid, gid)).await?;
        let mut command = Command::new(&self.server_binary);
        command
            .arg("--listen")
            .arg(SocketAddr::new(self.ip, 0).to_string())
            .arg("--root")
            .arg(&root)
            .arg("--capacity")
            .arg(plan.capacity.to_string())
            .arg("--index")
            .arg(plan.index.to_string())
            .arg("--count")
            .arg(plan.count.to_string())
            .arg("--token-file")
            .arg(dir.join("token"))
            .arg("--owner-uid")
            .arg(plan.uid.to_string())
            .arg("--owner-gid")
            .arg(plan.gid.to_string())
            .arg("--chunk-size")
            .arg(plan.chunk_size.to_string())
            .arg("--replicas")
            .arg(plan.replicas.to_string())
            .arg("--instance-file")
            .arg(dir.join("instance.json"))
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        // As the owner, with the owner's groups (root's are dropped), whose rights the data and
        // the stage copies get: a stage reaches a project directory the user may write
        // through a supplementary group. A session of its own keeps the server out of this
        // agent's signals.
        // SAFETY: between fork and exec only system calls run (no allocation: `groups` was
        // made before the fork), in the child, which has this one thread: the raw setgroups
        // sets its groups, as glibc's would.
        unsafe {
            command.pre_exec(move || {
                libc::setsid();
                if libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command.spawn().with_context(|| format!("start {}", self.server_binary.display()))?;
        let addr = match wait_ready(&mut child, &root, &log_path).await {
            Ok(addr) => addr,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        let server = RunningServer {
            instance: plan.instance.clone(),
            index: plan.index,
            addr: addr.to_string(),
            pid: child.id(),
            root: root.display().to_string(),
        };
        std::fs::write(self.record_path(&plan.instance), serde_json::to_string(&server)?)?;
        tracing::info!(instance = %plan.instance, index = plan.index, %addr, pid = server.pid, uid = plan.uid, "server started");
        self.servers.lock().expect("agent state").insert(plan.instance, Tracked { server: server.clone(), child: Some(child) });
        Ok(server)
    }

    fn describe(&self, instance: &str, descriptor: &str) -> Result<()> {
        check_name(instance)?;
        let dir = self.instance_dir(instance);
        let meta = std::fs::metadata(&dir).with_context(|| format!("no server of '{instance}' here"))?;
        use std::os::unix::fs::MetadataExt;
        Ok(owned_file(&dir.join("instance.json"), descriptor, meta.uid(), meta.gid())?)
    }

    async fn stop(&self, instance: &str) -> Result<()> {
        check_name(instance)?;
        let tracked = self.servers.lock().expect("agent state").remove(instance);
        if let Some(mut tracked) = tracked {
            let pid = tracked.server.pid;
            // SAFETY: kill with a pid this agent recorded for a server it started.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + STOP_GRACE;
            loop {
                let gone = match tracked.child.as_mut() {
                    Some(child) => child.try_wait()?.is_some(),
                    None => !pid_alive(pid),
                };
                if gone {
                    break;
                }
                if Instant::now() > deadline {
                    tracing::warn!(instance, pid, "server ignored SIGTERM: killed");
                    // SAFETY: as above.
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                    if let Some(child) = tracked.child.as_mut() {
                        let _ = child.wait();
                    }
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tracing::info!(instance, pid, "server stopped");
        }
        let _ = std::fs::remove_file(self.record_path(instance));
        let dir = self.instance_dir(instance);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("remove {}", dir.display()))?;
        }
        Ok(())
    }

    /// Running servers; those that exited are reaped and forgotten (their directory stays
    /// until the manager stops the instance).
    fn list(&self) -> Vec<RunningServer> {
        let mut servers = self.servers.lock().expect("agent state");
        servers.retain(|_, tracked| match tracked.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => pid_alive(tracked.server.pid),
        });
        let mut list: Vec<RunningServer> = servers.values().map(|t| t.server.clone()).collect();
        list.sort_by(|a, b| a.instance.cmp(&b.instance));
        list
    }
}

/// Waits for the server's ready file (its bound address), or its early exit.
async fn wait_ready(child: &mut Child, root: &Path, log: &Path) -> Result<SocketAddr> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait()? {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            bail!("server exited with {status} before it was ready: {}", log.lines().last().unwrap_or("(no log)"));
        }
        if let Ok(text) = std::fs::read_to_string(root.join("ready")) {
            return text.trim().parse().with_context(|| format!("bad address in {}/ready", root.display()));
        }
        if Instant::now() > deadline {
            bail!("server not ready after {START_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
