//! A campaign worker: one client process (a node's application) doing random operations on
//! the campaign's tree through the native client library until a deadline, recording each.
//!
//! Each worker has its own files (made, rewritten, renamed, relinked and unlinked by it
//! alone), a shared file only it writes and every worker reads, a file only it publishes by
//! rename and every worker reads, and races every other worker for O_EXCL names and for the
//! lock of one counter. A file whose operation failed is left alone from then on, so each
//! own file's history has at most one uncertain step, its last.

use std::path::PathBuf;
use std::time::Duration;

use rand::{RngExt, SeedableRng};
use rand_xorshift::XorShiftRng;
use surge_client::surge_proto::LockKind;
use surge_client::{Client, ClientOptions, LockRange};

use crate::history::{classify, contents, now_us, record, Line, Op, Outcome, Recorder};
use crate::layout;

/// A client gives up on a server that does not answer after this (faults last longer).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(3);
/// An operation not ended after this has hung: recorded as such (a violation).
pub const HANG: Duration = Duration::from_secs(60);
/// Own files a worker keeps at most.
const OWN_FILES: usize = 12;

pub struct Worker {
    pub slot: u64,
    /// Unique across the campaign and growing with each restart of a slot: it orders the
    /// versions of a slot's shared and published files across incarnations.
    pub incarnation: u64,
    pub workers: u64,
    pub seed: u64,
    pub until_us: u64,
    pub pause_ms: u64,
    pub history: PathBuf,
    /// A mount's directory to work through with POSIX calls ([`crate::posix`]); None: the
    /// native client.
    pub through: Option<PathBuf>,
}

struct State {
    client: Client,
    rng: XorShiftRng,
    recorder: Recorder,
    seq: u64,
    versions: u64,
    names: u64,
    /// Own files believed whole: (path, version).
    own: Vec<(String, u64)>,
}

impl Worker {
    pub async fn run(self) -> anyhow::Result<()> {
        let name = std::env::var("SURGE_INSTANCE")?;
        let opts = ClientOptions { timeout: CLIENT_TIMEOUT, node: None, local_io: false, ..Default::default() };
        let client = Client::for_instance(&name, opts)?;
        let mut state = State {
            client,
            rng: XorShiftRng::seed_from_u64(self.seed ^ self.incarnation.wrapping_mul(0x2545_f491_4f6c_dd1d)),
            recorder: Recorder::create(&self.history)?,
            seq: 0,
            versions: 0,
            names: 0,
            own: Vec::new(),
        };
        while now_us() < self.until_us {
            let op = state.choose(&self);
            state.seq += 1;
            let seq = state.seq;
            state.recorder.record(&Line::Invoke { worker: self.incarnation, seq, at: now_us(), op: op.clone() });
            let outcome = match &self.through {
                // Blocking calls: a hang there keeps the worker past the deadline, which the
                // campaign reports.
                Some(root) => crate::posix::apply(root, self.incarnation, &op),
                None => match tokio::time::timeout(HANG, state.apply(&self, &op)).await {
                    Ok(outcome) => outcome,
                    Err(_) => Outcome::Failed { code: "Hung".into(), maybe_applied: true },
                },
            };
            state.note(&op, &outcome);
            state.recorder.record(&Line::Done { worker: self.incarnation, seq, at: now_us(), outcome });
            if self.pause_ms > 0 {
                let pause = state.rng.random_range(0..=self.pause_ms);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        }
        Ok(())
    }
}

/// A failure: its code, and whether any of the operation may have been done.
fn failed(e: surge_client::Error, maybe_applied: bool) -> Outcome {
    let lost = e.code.is_lost_contact() || e.code == surge_client::surge_proto::ErrorCode::Io;
    Outcome::Failed { code: format!("{:?}", e.code), maybe_applied: maybe_applied || lost }
}

impl State {
    fn version(&mut self, worker: &Worker) -> u64 {
        self.versions += 1;
        worker.incarnation * 1_000_000 + self.versions
    }

    fn own_name(&mut self, worker: &Worker) -> String {
        self.names += 1;
        let dir = layout::OWN_DIRS[self.rng.random_range(0..layout::OWN_DIRS.len())];
        format!("{dir}/w{}-{}", worker.incarnation, self.names)
    }

    fn choose(&mut self, worker: &Worker) -> Op {
        let roll = self.rng.random_range(0..100);
        let any_slot = self.rng.random_range(0..worker.workers);
        match roll {
            0..35 => self.choose_own(worker),
            35..50 => Op::Update { path: layout::shared(worker.slot), version: self.version(worker) },
            50..65 => Op::Read { path: layout::shared(any_slot) },
            65..75 => {
                let version = self.version(worker);
                Op::Publish { path: layout::published(worker.slot), temp: layout::publish_temp(worker.slot, version), version }
            }
            75..88 => Op::Read { path: layout::published(any_slot) },
            88..93 => Op::Exclusive { path: layout::exclusive(now_us() / 400_000) },
            93..96 => Op::Append { path: layout::LOG.into(), tag: self.seq + 1 },
            _ => Op::Increment { path: layout::COUNTER.into() },
        }
    }

    fn choose_own(&mut self, worker: &Worker) -> Op {
        if self.own.len() < OWN_FILES / 2 || (self.own.len() < OWN_FILES && self.rng.random_bool(0.3)) {
            let path = self.own_name(worker);
            return Op::Put { path, version: self.version(worker) };
        }
        let (path, _) = self.own[self.rng.random_range(0..self.own.len())].clone();
        match self.rng.random_range(0..4) {
            0 => Op::Rewrite { path, version: self.version(worker) },
            1 => Op::Rename { from: path, to: self.own_name(worker) },
            2 => Op::Relink { from: path, to: self.own_name(worker) },
            _ => Op::Unlink { path },
        }
    }

    /// What this worker believes of its own files after `op` ended so.
    fn note(&mut self, op: &Op, outcome: &Outcome) {
        let ok = !matches!(outcome, Outcome::Failed { .. });
        let at = |own: &Vec<(String, u64)>, path: &str| own.iter().position(|(p, _)| p == path);
        match op {
            Op::Put { path, version } if ok => self.own.push((path.clone(), *version)),
            Op::Rewrite { path, version } => {
                if let Some(i) = at(&self.own, path) {
                    if ok {
                        self.own[i].1 = *version;
                    } else {
                        self.own.remove(i);
                    }
                }
            }
            Op::Rename { from, to } | Op::Relink { from, to } => {
                if let Some(i) = at(&self.own, from) {
                    if ok {
                        self.own[i].0 = to.clone();
                    } else {
                        self.own.remove(i);
                    }
                }
            }
            Op::Unlink { path } => self.own.retain(|(p, _)| p != path),
            _ => {}
        }
    }

    async fn apply(&mut self, worker: &Worker, op: &Op) -> Outcome {
        let c = &self.client;
        match op {
            Op::Put { path, version } => {
                let file = match c.create(path, 0o644).await {
                    Ok(file) => file,
                    Err(e) => return failed(e, false),
                };
                write_whole(file, *version).await
            }
            Op::Rewrite { path, version } | Op::Update { path, version } => {
                let file = match c.open(path, false).await {
                    Ok(file) => file,
                    Err(e) => return failed(e, false),
                };
                let bytes = contents(*version);
                if let Err(e) = file.set_len(bytes.len() as u64).await {
                    return failed(e, true);
                }
                write_whole(file, *version).await
            }
            Op::Rename { from, to } => c.rename(from, to).await.map_or_else(|e| failed(e, false), |_| Outcome::Ok),
            Op::Relink { from, to } => {
                if let Err(e) = c.link(from, to).await {
                    return failed(e, false);
                }
                c.unlink(from).await.map_or_else(|e| failed(e, true), |_| Outcome::Ok)
            }
            Op::Unlink { path } => c.unlink(path).await.map_or_else(|e| failed(e, false), |_| Outcome::Ok),
            Op::Read { path } => {
                let file = match c.open(path, false).await {
                    Ok(file) => file,
                    Err(e) => return failed(e, false),
                };
                let read = file.pread(0, file.size() as usize).await;
                let _ = file.close().await;
                match read {
                    Ok(bytes) => Outcome::Read { seen: classify(&bytes) },
                    Err(e) => failed(e, false),
                }
            }
            Op::Publish { path, temp, version } => {
                let file = match c.create(temp, 0o644).await {
                    Ok(file) => file,
                    Err(e) => return failed(e, false),
                };
                if let failure @ Outcome::Failed { .. } = write_whole(file, *version).await {
                    let _ = c.unlink(temp).await;
                    // Never renamed: the published name is untouched.
                    return match failure {
                        Outcome::Failed { code, .. } => Outcome::Failed { code, maybe_applied: false },
                        other => other,
                    };
                }
                c.rename(temp, path).await.map_or_else(|e| failed(e, false), |_| Outcome::Ok)
            }
            Op::Exclusive { path } => {
                let file = match c.create(path, 0o644).await {
                    Ok(file) => file,
                    Err(e) => return failed(e, false),
                };
                let written = file.pwrite(0, &worker.incarnation.to_le_bytes()).await;
                let closed = file.close().await;
                match written.and(closed) {
                    Ok(_) => Outcome::Ok,
                    Err(e) => failed(e, true),
                }
            }
            Op::Increment { path } => self.increment(worker, path).await,
            Op::Append { path, tag } => {
                let file = match c.open(path, false).await {
                    Ok(file) => file,
                    Err(e) => return failed(e, false),
                };
                let appended = file.append(bytes::Bytes::copy_from_slice(&record(worker.incarnation, *tag))).await;
                let closed = file.close().await;
                match appended.and(closed) {
                    Ok(()) => Outcome::Ok,
                    Err(e) => failed(e, true),
                }
            }
        }
    }

    async fn increment(&self, worker: &Worker, path: &str) -> Outcome {
        let c = &self.client;
        let ino = match c.stat(path).await {
            Ok(attr) => attr.ino,
            Err(e) => return failed(e, false),
        };
        let lock = |kind| LockRange { owner: worker.incarnation, pid: std::process::id(), kind, start: 0, end: u64::MAX };
        if let Err(e) = c.set_lock(ino, lock(LockKind::Write), true).await {
            return failed(e, false);
        }
        let locked_at = now_us();
        let counted = async {
            let file = c.open(path, false).await?;
            let bytes = file.pread(0, 8).await?;
            let read = bytes.get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()));
            file.pwrite(0, &(read + 1).to_le_bytes()).await?;
            file.close().await?;
            Ok::<u64, surge_client::Error>(read)
        }
        .await;
        let unlocking_at = now_us();
        let unlocked = c.set_lock(ino, lock(LockKind::Unlock), false).await;
        match (counted, unlocked) {
            (Ok(read), Ok(())) => Outcome::Incremented { read, locked_at, unlocking_at },
            (Err(e), _) | (Ok(_), Err(e)) => failed(e, true),
        }
    }
}

/// Writes version `version` over an open file from offset 0 and closes it.
async fn write_whole(file: surge_client::File, version: u64) -> Outcome {
    let written = file.pwrite(0, &contents(version)).await;
    let closed = file.close().await;
    match written.and(closed) {
        Ok(_) => Outcome::Ok,
        Err(e) => failed(e, true),
    }
}
