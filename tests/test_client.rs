//! `surge-test-client`: a client process for the cross-component tests. Each invocation is a
//! separate process (a separate "node" when SURGE_NODE gives it its own address) that does one
//! access pattern through the native client library and exits non-zero on any error.
//!
//!   write-blocks PATH RANK RANKS BLOCK COUNT   N-1 pattern: blocks RANK, RANK+RANKS, ... of one shared file
//!   publish PATH ITERATIONS                      write PATH.tmp (versioned content), close, rename over PATH
//!   watch PATH ITERATIONS                        open+read PATH repeatedly; fail on any partial/mixed file
//!   chunk-server PATH                            print the server index holding chunk 0 of PATH
//!   small-files DIR OPS SECS SEED                at least OPS small-file operations (write, read
//!                                                back, stat, rename, unlink, list) on 200 files in
//!                                                DIR, going on until SECS passed; each checked
//!   posix-small-files DIR OPS SECS SEED          the same through the POSIX calls, DIR on a mount
//!   stream PATH MIB SECS                         write PATH (MIB MiB), close, read it back,
//!                                                checked; again until SECS passed
//!   lock PATH wait|try SECS                      a write lock on the whole of PATH (waited for,
//!                                                or refused if held): prints "locked after S s"
//!                                                once held, then holds it SECS

use std::process::ExitCode;

use surge_client::surge_proto::acl::AclKind;
use surge_client::surge_proto::{FileKind, LockKind, XattrSetMode};
use surge_client::{Client, ClientOptions};
use surge_tests::pattern;

fn client() -> Client {
    let name = std::env::var("SURGE_INSTANCE").expect("SURGE_INSTANCE");
    let mut opts = ClientOptions::default();
    // A client that says it is someone else (the new inodes' owner it asks for).
    if let Some(uid) = std::env::var("SURGE_TEST_CLAIM_UID").ok().and_then(|u| u.parse().ok()) {
        opts.uid = uid;
    }
    Client::for_instance(&name, opts).expect("client")
}

/// A published version: 16-byte header (version, length) then a body derived from the version.
fn version_bytes(version: u64) -> Vec<u8> {
    let len = 200_000 + (version as usize * 7919) % 3_000_000;
    let mut out = Vec::with_capacity(len + 16);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(len as u64).to_le_bytes());
    out.extend(pattern(version, len));
    out
}

async fn run(args: &[String]) -> Result<String, String> {
    let c = client();
    let e = |e: surge_client::Error| e.to_string();
    match args.first().map(String::as_str) {
        Some("write-blocks") => {
            let path = &args[1];
            let [rank, ranks, block, count]: [u64; 4] = core::array::from_fn(|i| args[2 + i].parse().unwrap());
            let f = c.create_or_open(path).await.map_err(e)?;
            let mut b = rank;
            while b < count {
                f.pwrite(b * block, &pattern(b, block as usize)).await.map_err(e)?;
                b += ranks;
            }
            f.close().await.map_err(e)?;
            Ok(String::new())
        }
        Some("publish") => {
            let path = &args[1];
            let n: u64 = args[2].parse().unwrap();
            for v in 1..=n {
                let tmp = format!("{path}.tmp");
                let f = c.create_or_truncate(&tmp, 0o644).await.map_err(e)?;
                f.pwrite(0, &version_bytes(v)).await.map_err(e)?;
                f.close().await.map_err(e)?;
                c.rename(&tmp, path).await.map_err(e)?;
            }
            Ok(String::new())
        }
        Some("watch") => {
            let path = &args[1];
            let n: u64 = args[2].parse().unwrap();
            let (mut seen, mut versions) = (0u64, std::collections::BTreeSet::new());
            while seen < n {
                let f = match c.open(path, false).await {
                    Ok(f) => f,
                    Err(err) if err.code == surge_client::surge_proto::ErrorCode::NotFound => continue,
                    Err(err) => return Err(err.to_string()),
                };
                let data = f.pread(0, 64 << 20).await.map_err(e)?;
                f.close().await.map_err(e)?;
                if data.len() < 16 {
                    return Err(format!("read {} bytes: partial file under the final name", data.len()));
                }
                let version = u64::from_le_bytes(data[0..8].try_into().unwrap());
                if data != version_bytes(version) {
                    return Err(format!("version {version}: content or size wrong ({} bytes)", data.len()));
                }
                versions.insert(version);
                seen += 1;
            }
            Ok(format!("{}", versions.len()))
        }
        Some("lock") => {
            let attr = c.stat(&args[1]).await.map_err(e)?;
            let me = std::process::id();
            let whole = surge_client::LockRange { owner: me as u64, pid: me, kind: LockKind::Write, start: 0, end: u64::MAX };
            let started = std::time::Instant::now();
            c.set_lock(attr.ino, whole, args[2] == "wait").await.map_err(e)?;
            // At once, not at exit: whoever started this waits for it.
            println!("locked after {:.1} s", started.elapsed().as_secs_f64());
            tokio::time::sleep(std::time::Duration::from_secs(args[3].parse().unwrap())).await;
            Ok(String::new())
        }
        Some("chunk-server") => {
            let attr = c.stat(&args[1]).await.map_err(e)?;
            let layout = surge_client::Layout::new(c.chunk_size(), c.server_count());
            Ok(layout.chunk_server(attr.ino, 0).to_string())
        }
        Some(kind @ ("small-files" | "posix-small-files")) => {
            let [ops, secs, seed]: [u64; 3] = core::array::from_fn(|i| args[2 + i].parse().unwrap());
            let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
            let done = if kind == "small-files" {
                c.mkdir_all(&args[1], 0o755).await.map_err(e)?;
                small_files(&Library(c), &args[1], ops, until, seed).await?
            } else {
                std::fs::create_dir_all(&args[1]).map_err(|e| e.to_string())?;
                small_files(&Posix, &args[1], ops, until, seed).await?
            };
            Ok(done.to_string())
        }
        Some("stream") => {
            let [mib, secs]: [u64; 2] = core::array::from_fn(|i| args[2 + i].parse().unwrap());
            let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
            let (body, mut rounds) = (pattern(mib, (mib << 20) as usize), 0u64);
            while rounds == 0 || std::time::Instant::now() < until {
                let f = c.create_or_truncate(&args[1], 0o644).await.map_err(e)?;
                for (i, block) in body.chunks(1 << 20).enumerate() {
                    f.pwrite((i as u64) << 20, block).await.map_err(e)?;
                }
                f.close().await.map_err(e)?;
                if Library(c.clone()).read(&args[1]).await? != body {
                    return Err(format!("{}: round {rounds}: other bytes read back", args[1]));
                }
                rounds += 1;
            }
            Ok(rounds.to_string())
        }
        Some("getattr-ino") => {
            // One request to the inode's home alone (no path walked from the root).
            use surge_client::surge_proto::{ino::home, namespace::GetAttr};
            let ino = u64::from_str_radix(args[1].trim_start_matches("0x"), 16).map_err(|e| e.to_string())?;
            c.call(home(ino), GetAttr { ino }).await.map(|attr| format!("size {}", attr.size)).map_err(e)
        }
        Some("try") => {
            let mut lines = Vec::new();
            for op in &args[1..] {
                lines.push(format!("{op} -> {}", try_op(&c, op).await));
            }
            Ok(lines.join("\n"))
        }
        _ => {
            Err("usage: surge-test-client write-blocks|publish|watch|chunk-server|small-files|posix-small-files|stream|getattr-ino|try ..."
                .into())
        }
    }
}

/// One operation `VERB:PATH[:ARG]` through the library, as this process's user: "ok" (or what
/// it read; a file made by `create` holds its own path), else the error's errno name; for the
/// permission tests.
async fn try_op(c: &Client, op: &str) -> String {
    let mut parts = op.splitn(3, ':');
    let (verb, path, arg) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let mode = || u32::from_str_radix(arg, 8).unwrap_or(0o644);
    let outcome: surge_client::Result<String> = async {
        Ok(match verb {
            "create" => {
                let f = c.create(path, mode()).await?;
                f.pwrite(0, path.as_bytes()).await?;
                f.close().await?;
                "ok".into()
            }
            "read" => {
                let f = c.open(path, false).await?;
                let data = f.pread(0, 4096).await?;
                f.close().await?;
                String::from_utf8_lossy(&data).into_owned()
            }
            "append" => {
                let f = c.open(path, false).await?;
                let end = f.refresh().await?;
                f.pwrite(end, arg.as_bytes()).await?;
                f.close().await?;
                "ok".into()
            }
            "mkdir" => c.mkdir(path, mode()).await.map(|_| "ok".into())?,
            "link" => c.link(path, arg).await.map(|_| "ok".into())?,
            "mkfifo" => c.mknod(path, FileKind::Fifo, 0o644).await.map(|_| "ok".into())?,
            "mknodc" => c.mknod(path, FileKind::CharDevice { rdev: 0x103 }, 0o644).await.map(|_| "ok".into())?,
            "lock" => {
                let ino = c.stat(path).await?.ino;
                let whole = surge_client::LockRange { owner: 1, pid: std::process::id(), kind: LockKind::Write, start: 0, end: u64::MAX };
                c.set_lock(ino, whole, false).await.map(|()| "ok".into())?
            }
            "list" => c.readdir(path).await?.len().to_string(),
            // Extended attributes: ARG is NAME (or NAME=VALUE to set); an ACL is given as
            // `surge_tests::acl` reads it.
            "getxattr" => String::from_utf8_lossy(&c.getxattr(path, arg).await?).into_owned(),
            "setxattr" => {
                let (name, value) = arg.split_once('=').unwrap_or((arg, ""));
                c.setxattr(path, name, value.as_bytes(), XattrSetMode::Either).await.map(|_| "ok".into())?
            }
            "listxattr" => c.listxattr(path).await?.join(","),
            "removexattr" => c.removexattr(path, arg).await.map(|_| "ok".into())?,
            "setacl" => {
                let name = AclKind::Access.xattr_name();
                c.setxattr(path, name, &surge_tests::acl(arg), XattrSetMode::Either).await.map(|a| format!("{:o}", a.mode))?
            }
            "stat" => c.stat(path).await.map(|a| format!("{:o} {}", a.mode, a.uid))?,
            "unlink" => c.unlink(path).await.map(|()| "ok".into())?,
            "rmdir" => c.rmdir(path).await.map(|()| "ok".into())?,
            "rename" => c.rename(path, arg).await.map(|()| "ok".into())?,
            "chmod" => c.chmod(path, mode()).await.map(|_| "ok".into())?,
            "chown" => c.chown(path, arg.parse().ok(), None).await.map(|_| "ok".into())?,
            "truncate" => c.truncate(path, 0).await.map(|_| "ok".into())?,
            // A client that skips the namespace's steps and sends data requests itself, to
            // every server: without a ticket, and with a forged one.
            // A file staged between the PFS path ARG and PATH, waited for: "ok", or why not.
            "stagein" | "stageout" => {
                use surge_client::surge_proto::stage::{StageDirection, StageKind, StageState, StageWhen};
                let direction = if verb == "stagein" { StageDirection::In } else { StageDirection::Out };
                let spec = c.stage_spec(direction, StageKind::File, StageWhen::Immediate, path, arg, false);
                let id = c.stage_submit_checked(spec).await?.id;
                loop {
                    let stage = c.stage(id).await?;
                    if stage.state.is_final() {
                        break match stage.state {
                            StageState::Done => "ok".into(),
                            _ => format!("{}: {}", stage.state.label(), stage.error.unwrap_or_default()),
                        };
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            }
            // What runs the instance itself, asked of server 0 (for the instance's owner alone).
            "shutdown" => c.call(0, surge_client::surge_proto::admin::Shutdown).await.map(|()| "ok".to_string())?,
            "mirrorto" => {
                let stop_mirroring = surge_client::surge_proto::admin::MirrorTo { to: None, peers: Vec::new(), failover_after_ms: None };
                c.call(0, stop_mirroring).await.map(|()| "ok".to_string())?
            }
            "rawdroplink" => {
                use surge_client::surge_proto::namespace::DropLink;
                let ino = c.stat(path).await?.ino;
                c.call(surge_client::surge_proto::ino::home(ino), DropLink { ino, ticket: None }).await.map(|_| "ok".to_string())?
            }
            "rawread" | "rawpurge" | "forgedwrite" => {
                use surge_client::surge_proto::data::{PurgeData, Read, Write};
                use surge_client::surge_proto::ticket::{Ticket, PURGE, READ, WRITE};
                let ino = c.stat(path).await?.ino;
                // SAFETY: geteuid takes no arguments and cannot fail.
                let forged = Ticket { ino, uid: unsafe { libc::geteuid() }, rights: READ | WRITE | PURGE, mac: [0; 32] };
                for server in 0..c.server_count() {
                    match verb {
                        "rawread" => c.call(server, Read { ino, offset: 0, len: 64, ticket: None }).await?,
                        "rawpurge" => c.call(server, PurgeData { ino, ticket: None }).await?,
                        _ => c.call(server, Write { ino, offset: 0, ticket: Some(forged), may_wait: false }).await.map(|_| ())?,
                    }
                }
                "ok".into()
            }
            other => return Err(surge_client::Error::new(surge_client::surge_proto::ErrorCode::Invalid, format!("no verb {other}"))),
        })
    }
    .await;
    outcome.unwrap_or_else(|e| match e.code.errno() {
        libc::EACCES => "EACCES".into(),
        libc::EPERM => "EPERM".into(),
        libc::ENOENT => "ENOENT".into(),
        libc::ENODATA => "ENODATA".into(),
        errno => format!("errno {errno}: {e}"),
    })
}

/// The file operations of the small-file workload, through the library or the POSIX calls.
trait Files {
    async fn write(&self, path: &str, data: &[u8]) -> Result<(), String>;
    async fn read(&self, path: &str) -> Result<Vec<u8>, String>;
    async fn size(&self, path: &str) -> Result<u64, String>;
    async fn rename(&self, from: &str, to: &str) -> Result<(), String>;
    async fn unlink(&self, path: &str) -> Result<(), String>;
    async fn count(&self, dir: &str) -> Result<usize, String>;
}

struct Library(Client);
struct Posix;

impl Files for Library {
    async fn write(&self, path: &str, data: &[u8]) -> Result<(), String> {
        let f = self.0.create_or_truncate(path, 0o644).await.map_err(|e| e.to_string())?;
        f.pwrite(0, data).await.map_err(|e| e.to_string())?;
        f.close().await.map_err(|e| e.to_string())
    }
    async fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        let f = self.0.open(path, false).await.map_err(|e| e.to_string())?;
        let data = f.pread(0, f.size() as usize).await.map_err(|e| e.to_string())?;
        f.close().await.map_err(|e| e.to_string())?;
        Ok(data)
    }
    async fn size(&self, path: &str) -> Result<u64, String> {
        self.0.stat(path).await.map(|a| a.size).map_err(|e| e.to_string())
    }
    async fn rename(&self, from: &str, to: &str) -> Result<(), String> {
        self.0.rename(from, to).await.map_err(|e| e.to_string())
    }
    async fn unlink(&self, path: &str) -> Result<(), String> {
        self.0.unlink(path).await.map_err(|e| e.to_string())
    }
    async fn count(&self, dir: &str) -> Result<usize, String> {
        self.0.readdir(dir).await.map(|entries| entries.len()).map_err(|e| e.to_string())
    }
}

impl Files for Posix {
    async fn write(&self, path: &str, data: &[u8]) -> Result<(), String> {
        std::fs::write(path, data).map_err(|e| format!("{path}: {e}"))
    }
    async fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        std::fs::read(path).map_err(|e| format!("{path}: {e}"))
    }
    async fn size(&self, path: &str) -> Result<u64, String> {
        std::fs::metadata(path).map(|m| m.len()).map_err(|e| format!("{path}: {e}"))
    }
    async fn rename(&self, from: &str, to: &str) -> Result<(), String> {
        std::fs::rename(from, to).map_err(|e| format!("{from} -> {to}: {e}"))
    }
    async fn unlink(&self, path: &str) -> Result<(), String> {
        std::fs::remove_file(path).map_err(|e| format!("{path}: {e}"))
    }
    async fn count(&self, dir: &str) -> Result<usize, String> {
        Ok(std::fs::read_dir(dir).map_err(|e| format!("{dir}: {e}"))?.count())
    }
}

/// Small-file operations on 200 files in `dir`, each checked against what this process last
/// wrote: at least `ops` of them, and until `until`. Returns how many were done.
async fn small_files(fs: &impl Files, dir: &str, ops: u64, until: std::time::Instant, seed: u64) -> Result<u64, String> {
    const FILES: usize = 200;
    let mut versions: Vec<Option<u64>> = vec![None; FILES];
    let body = |slot: usize, version: u64| pattern(seed ^ ((slot as u64) << 32) ^ version, 100 + (version as usize * 7919) % 8000);
    let mut rng = seed | 1;
    let mut done = 0u64;
    while done < ops || std::time::Instant::now() < until {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let slot = (rng % FILES as u64) as usize;
        let path = format!("{dir}/f{slot}");
        match (rng >> 32) % 8 {
            _ if versions[slot].is_none() => {
                fs.write(&path, &body(slot, done)).await?;
                versions[slot] = Some(done);
            }
            0 | 1 => {
                fs.write(&path, &body(slot, done)).await?;
                versions[slot] = Some(done);
            }
            2 | 3 => {
                if fs.read(&path).await? != body(slot, versions[slot].unwrap()) {
                    return Err(format!("{path}: other bytes than written"));
                }
            }
            4 => {
                if fs.size(&path).await? != body(slot, versions[slot].unwrap()).len() as u64 {
                    return Err(format!("{path}: another size than written"));
                }
            }
            5 => {
                fs.rename(&path, &format!("{path}.moved")).await?;
                fs.rename(&format!("{path}.moved"), &path).await?;
            }
            6 => {
                fs.unlink(&path).await?;
                versions[slot] = None;
            }
            _ => {
                let live = versions.iter().filter(|v| v.is_some()).count();
                let listed = fs.count(dir).await?;
                if listed != live {
                    return Err(format!("{dir}: {listed} names listed, {live} files live"));
                }
            }
        }
        done += 1;
    }
    Ok(done)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    match rt.block_on(run(&args)) {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("surge-test-client: {err}");
            ExitCode::FAILURE
        }
    }
}
