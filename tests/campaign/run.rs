//! A campaign's run: a 4-server instance (servers 0-2 on loopback addresses, server 3 on a
//! node of its own behind a veth link), one worker process per slot, and faults one after
//! another at random (seeded) until the deadline: a server killed (-9) and restarted, a
//! server stopped (SIGSTOP) and continued, server 3's link cut, silenced one way or shaped
//! to a trickle, a worker killed (-9) and started again as a new incarnation. Then every
//! fault is healed, the workers end, and the checker reads the histories and the tree;
//! `surge fsck` must find nothing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};
use rand_xorshift::XorShiftRng;
use surge_client::ClientOptions;
use surge_tests::netns::NetNode;
use surge_tests::{text, Instance};

use crate::check::{self, FinalState, Invocation};
use crate::history::{classify, now_us, read_lines, Fault, Line, Op, Outcome, Recorder};
use crate::layout;
use crate::worker::HANG;

pub struct Campaign {
    pub secs: u64,
    pub seed: u64,
    pub workers: u64,
    pub pause_ms: u64,
    pub out: PathBuf,
    pub subnet: u8,
    /// How many workers (the last ones) work through FUSE mounts, one each.
    pub mounts: u64,
}

/// What a campaign found.
pub struct Report {
    pub summary: String,
    pub violations: Vec<String>,
}

const SERVERS: usize = 4;
/// The server moved to a node of its own.
const NETWORKED: usize = 3;

struct Running<'a> {
    campaign: &'a Campaign,
    inst: Instance,
    node: NetNode,
    node_listen: String,
    rng: XorShiftRng,
    faults: Recorder,
    /// Restarted servers (this process waits for them).
    servers: Vec<Child>,
    /// The worker of each slot and its incarnation.
    workers: Vec<(Child, u64)>,
    incarnations: u64,
    until_us: u64,
    /// The mounts' directories (unmounted when the workers are done, or at the drop).
    mounts: Vec<PathBuf>,
}

impl Campaign {
    pub fn run(&self) -> anyhow::Result<Report> {
        // A run's files only: an earlier run's histories would be checked with this one's.
        let _ = std::fs::remove_dir_all(&self.out);
        std::fs::create_dir_all(&self.out)?;
        let inst = Instance::up_on(
            &format!("campaign{}", std::process::id() % 10_000),
            "127.0.9",
            11,
            SERVERS,
            &["--capacity", "2G", "--chunk-size", "64K"],
        );
        let node = NetNode::new("campaign", self.subnet);
        let node_listen = format!("{}:7475", node.addr);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let faults = Recorder::create(&self.out.join("faults.jsonl"))?;
        inst.kill_server(NETWORKED);
        let mut running = Running {
            campaign: self,
            servers: vec![inst.restart_server_with(NETWORKED, &node_listen, &["ip", "netns", "exec", &node.name])],
            inst,
            node,
            node_listen,
            rng: XorShiftRng::seed_from_u64(self.seed),
            faults,
            workers: Vec::new(),
            incarnations: 0,
            until_us: now_us() + self.secs * 1_000_000,
            mounts: Vec::new(),
        };
        for m in 0..self.mounts {
            running.mount(&self.out.join(format!("mount-{m}")))?;
        }
        let client = running.inst.client_with(ClientOptions { node: None, local_io: false, ..Default::default() });
        runtime.block_on(layout::make(&client, self.workers))?;
        for slot in 0..self.workers {
            let worker = running.start_worker(slot)?;
            running.workers.push(worker);
        }
        running.inject_until_the_deadline()?;
        let mut violations = running.end_workers();
        // What the mounts hold back (their delegations' logs) reaches the servers before the
        // tree is read.
        violations.extend(running.unmount());
        let history: Vec<Line> = histories(&self.out)?;
        let invocations = check::invocations(history);
        let faults: Vec<Fault> = read_lines(&self.out.join("faults.jsonl"))?;
        // A client of its own: the faults are over, every server up.
        let end = runtime.block_on(final_state(&running.inst.client_with(ClientOptions {
            node: None,
            local_io: false,
            ..Default::default()
        })))?;
        let mut judged = check::Judged::default();
        violations.extend(check::check_counting(&invocations, &faults, &end, &mut judged));
        if judged.files_acknowledged == 0 || judged.reads_exact == 0 || judged.exclusive_names == 0 || faults.is_empty() {
            violations.push(format!("a campaign that judged next to nothing ({judged:?}, {} faults): run it longer", faults.len()));
        }
        let (left, wrong) = running.fsck()?;
        violations.extend(wrong);
        let summary = format!("{}\n{judged:?}\n\n{left}", summarize(&invocations, &faults, self));
        Ok(Report { summary, violations })
    }
}

impl Running<'_> {
    fn mount(&mut self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        let out = self.inst.surge(&["mount", &self.inst.name, dir.to_str().unwrap()]);
        anyhow::ensure!(out.status.success(), "surge mount {}: {}", dir.display(), text(&out));
        self.mounts.push(dir.to_path_buf());
        Ok(())
    }

    /// Unmounts every mount; a refusal is a violation (something still held there).
    fn unmount(&mut self) -> Vec<String> {
        let mut violations = Vec::new();
        for dir in std::mem::take(&mut self.mounts) {
            let out = self.inst.surge(&["umount", dir.to_str().unwrap()]);
            if !out.status.success() {
                violations.push(format!("surge umount {} after the campaign: {}", dir.display(), text(&out)));
            }
        }
        violations
    }

    fn start_worker(&mut self, slot: u64) -> anyhow::Result<(Child, u64)> {
        self.incarnations += 1;
        let incarnation = slot + 1 + 1000 * self.incarnations;
        let log = std::fs::File::create(self.campaign.out.join(format!("worker-{incarnation}.log")))?;
        let first_through_a_mount = self.campaign.workers - self.campaign.mounts;
        let through = (slot >= first_through_a_mount).then(|| self.mounts[(slot - first_through_a_mount) as usize].clone());
        let child = Command::new(std::env::current_exe()?)
            .arg("worker")
            .args(["--slot", &slot.to_string(), "--incarnation", &incarnation.to_string()])
            .args(["--workers", &self.campaign.workers.to_string(), "--seed", &self.campaign.seed.to_string()])
            .args(["--until-us", &self.until_us.to_string(), "--pause-ms", &self.campaign.pause_ms.to_string()])
            .arg("--history")
            .arg(self.campaign.out.join(format!("history-{incarnation}.jsonl")))
            .args(through.iter().flat_map(|dir| [std::ffi::OsStr::new("--through"), dir.as_os_str()]))
            .env("SURGE_HOME", &self.inst.home)
            .env("SURGE_INSTANCE", &self.inst.name)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        Ok((child, incarnation))
    }

    fn sleep_ms(&mut self, range: std::ops::Range<u64>) {
        std::thread::sleep(Duration::from_millis(self.rng.random_range(range)));
    }

    fn inject_until_the_deadline(&mut self) -> anyhow::Result<()> {
        // Faults end a few seconds before the workers do, so the last operations meet a
        // healed instance.
        let last_fault = self.until_us.saturating_sub(5_000_000);
        while now_us() < last_fault {
            self.sleep_ms(1500..6000);
            if now_us() >= last_fault {
                break;
            }
            let server = self.rng.random_range(0..SERVERS);
            let from = now_us();
            let (kind, target) = match self.rng.random_range(0..6) {
                0 => {
                    self.inst.kill_server(server);
                    self.sleep_ms(300..2000);
                    self.restart(server);
                    ("server killed (-9) and restarted", format!("server {server}"))
                }
                1 => {
                    self.inst.signal_server(server, libc::SIGSTOP);
                    self.sleep_ms(500..4000);
                    self.inst.signal_server(server, libc::SIGCONT);
                    ("server stopped (SIGSTOP), continued", format!("server {server}"))
                }
                2 => {
                    self.node.cut();
                    self.sleep_ms(500..4000);
                    self.node.mend();
                    ("link cut", format!("server {NETWORKED}"))
                }
                3 => {
                    self.node.silence();
                    self.sleep_ms(500..4000);
                    self.node.unsilence();
                    ("link silenced (the node's packets lost)", format!("server {NETWORKED}"))
                }
                4 => {
                    self.node.shape("2mbit");
                    self.sleep_ms(1000..5000);
                    self.node.unshape();
                    ("link shaped to 2 Mbit/s", format!("server {NETWORKED}"))
                }
                _ => {
                    let slot = self.rng.random_range(0..self.workers.len());
                    let incarnation = {
                        let (child, incarnation) = &mut self.workers[slot];
                        let _ = child.kill();
                        let _ = child.wait();
                        *incarnation
                    };
                    self.workers[slot] = self.start_worker(slot as u64)?;
                    ("worker killed (-9), started again", format!("worker {incarnation}"))
                }
            };
            self.faults.record(&Fault { kind: kind.into(), target, from, to: now_us() });
        }
        Ok(())
    }

    fn restart(&mut self, server: usize) {
        let child = if server == NETWORKED {
            let wrapper = ["ip", "netns", "exec", self.node.name.as_str()];
            self.inst.restart_server_with(server, &self.node_listen, &wrapper)
        } else {
            self.inst.restart_server(server)
        };
        self.servers.push(child);
    }

    /// Waits for every worker to end by itself after the deadline; one still running long
    /// after it hung.
    fn end_workers(&mut self) -> Vec<String> {
        let mut violations = Vec::new();
        let give_up = Instant::now() + Duration::from_micros(self.until_us.saturating_sub(now_us())) + HANG + Duration::from_secs(15);
        for (child, incarnation) in &mut self.workers {
            loop {
                match child.try_wait() {
                    Ok(Some(status)) if status.success() => break,
                    Ok(Some(status)) => {
                        violations.push(format!("worker {incarnation} failed ({status}): see worker-{incarnation}.log"));
                        break;
                    }
                    _ if Instant::now() > give_up => {
                        violations.push(format!("worker {incarnation} still running long after the deadline: killed"));
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    _ => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        }
        violations
    }

    /// `surge fsck` after the campaign. Faults may leave what an operation cut off halfway
    /// leaves for a later cleanup (docs/faults.md): data of a file whose unlink or rename-over
    /// did not reach every server, a file whose last name went while its home was cut off,
    /// data a failed writer wrote past the size it never published, a link count one too high
    /// after a two-server step whose second half was not known to be applied. Those are
    /// counted, then repaired, and the instance must then be clean; any other finding (a link
    /// count below the file's names among them) is a violation.
    fn fsck(&self) -> anyhow::Result<(String, Vec<String>)> {
        const LEFT_BY_FAULTS: [&str; 3] = ["orphan-data", "orphan-inode", "data-past-size"];
        let name = self.inst.name.as_str();
        let scan = self.inst.surge(&["fsck", name, "--json"]);
        std::fs::write(self.campaign.out.join("fsck.json"), &scan.stdout)?;
        let report: serde_json::Value =
            serde_json::from_slice(&scan.stdout).map_err(|e| anyhow::anyhow!("fsck --json: {e}: {}", text(&scan)))?;
        let mut left = std::collections::BTreeMap::<String, u64>::new();
        let mut wrong = Vec::new();
        for finding in report[0]["report"]["findings"].as_array().into_iter().flatten() {
            let mut class = finding["finding"].as_str().unwrap_or("?").to_string();
            if class == "link-count" && finding["recorded"].as_u64() > finding["names"].as_u64() {
                class = "link-count (too high)".into();
            }
            if LEFT_BY_FAULTS.contains(&class.as_str()) || class == "link-count (too high)" {
                *left.entry(class).or_default() += 1;
            } else {
                wrong.push(format!("surge fsck: {finding}"));
            }
        }
        if !left.is_empty() {
            let repair = self.inst.surge(&["fsck", name, "--repair"]);
            let again = self.inst.surge(&["fsck", name]);
            if !repair.status.success() || !again.status.success() {
                wrong.push(format!("after surge fsck --repair the instance is not clean: {}", text(&again)));
            }
        }
        let mut table = "| left by faults for `surge fsck --repair` | found |\n|---|---|\n".to_string();
        for (class, count) in &left {
            table += &format!("| {class} | {count} |\n");
        }
        Ok((table, wrong))
    }
}

/// Whatever ends the run (also an error half-way), no worker or restarted server outlives
/// it; the instance then goes down with `surge down`.
impl Drop for Running<'_> {
    fn drop(&mut self) {
        for (child, _) in &mut self.workers {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.unmount();
        for child in &mut self.servers {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn histories(out: &Path) -> anyhow::Result<Vec<Line>> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(out)? {
        let path = entry?.path();
        if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("history-")) {
            lines.extend(read_lines::<Line>(&path)?);
        }
    }
    Ok(lines)
}

/// Every own file read whole, every exclusive name's bytes.
async fn final_state(client: &surge_client::Client) -> anyhow::Result<FinalState> {
    let mut end = FinalState::default();
    for dir in layout::OWN_DIRS {
        for entry in client.readdir(dir).await? {
            let path = format!("{dir}/{}", entry.name);
            match read_whole(client, &path).await {
                Ok(bytes) => drop(end.own.insert(path, classify(&bytes))),
                // A name whose inode is gone: recorded, a violation of its own.
                Err(e) if e.code == surge_client::surge_proto::ErrorCode::NotFound => end.dangling.push(format!("{path}: {e}")),
                Err(e) => return Err(e.into()),
            }
        }
    }
    end.log = read_whole(client, layout::LOG).await?;
    for entry in client.readdir(layout::EXCLUSIVE_DIR).await? {
        let path = format!("{}/{}", layout::EXCLUSIVE_DIR, entry.name);
        end.exclusive.insert(path.clone(), read_whole(client, &path).await?);
    }
    Ok(end)
}

async fn read_whole(client: &surge_client::Client, path: &str) -> surge_client::Result<Vec<u8>> {
    let file = client.open(path, false).await?;
    let bytes = file.pread(0, file.size() as usize).await;
    file.close().await?;
    bytes
}

/// Operations by kind with their outcomes, and the faults by kind, as Markdown.
fn summarize(invocations: &[Invocation], faults: &[Fault], campaign: &Campaign) -> String {
    use std::collections::BTreeMap;
    let mut ops: BTreeMap<&str, [u64; 3]> = BTreeMap::new();
    for inv in invocations {
        let kind = match inv.op {
            Op::Put { .. } => "put (own file)",
            Op::Rewrite { .. } => "rewrite (own file)",
            Op::Rename { .. } => "rename (own file)",
            Op::Relink { .. } => "link + unlink (own file)",
            Op::Unlink { .. } => "unlink (own file)",
            Op::Update { .. } => "update (shared file)",
            Op::Read { .. } => "read (shared or published)",
            Op::Publish { .. } => "publish (write, rename over)",
            Op::Exclusive { .. } => "O_EXCL create",
            Op::Increment { .. } => "locked increment",
            Op::Append { .. } => "append (shared log)",
        };
        let column = match &inv.done {
            None => 2,
            Some((_, Outcome::Failed { .. })) => 1,
            Some(_) => 0,
        };
        ops.entry(kind).or_default()[column] += 1;
    }
    let mut by_fault: BTreeMap<&str, u64> = BTreeMap::new();
    for fault in faults {
        *by_fault.entry(&fault.kind).or_default() += 1;
    }
    let mut out = format!(
        "campaign: {} s, seed {}, {} workers ({} through FUSE mounts), 4 servers (server 3 behind a veth link)\n\n| operation | succeeded | failed | cut short (worker killed) |\n|---|---|---|---|\n",
        campaign.secs, campaign.seed, campaign.workers, campaign.mounts
    );
    for (kind, [ok, failed, cut]) in &ops {
        out += &format!("| {kind} | {ok} | {failed} | {cut} |\n");
    }
    out += "\n| fault | times |\n|---|---|\n";
    for (kind, count) in &by_fault {
        out += &format!("| {kind} | {count} |\n");
    }
    out
}
