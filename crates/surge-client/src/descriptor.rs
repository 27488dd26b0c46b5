//! Instance descriptors: the JSON file `surge up` writes and every client reads to find an
//! instance (servers, mode, chunk size, owner, token path), and the instance's token file.
//!
//! Descriptors live in `$SURGE_HOME/instances/NAME.json` (`SURGE_HOME` defaults to `~/.surge`).
//! A descriptor is written under a temporary name and renamed into place, so a reader finds
//! the old one or the new one, whole. A token file is made 0600; one that another user owns,
//! or that others may read, is refused rather than used.

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use surge_proto::auth::{self, Secret};
use surge_proto::ErrorCode;

use crate::error::{Error, Result};

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One namespace; file data striped in chunks over all servers.
    Striped,
    /// One namespace per node, whose data stays on that node's server.
    Private,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "striped" => Ok(Mode::Striped),
            "private" => Ok(Mode::Private),
            other => Err(format!("unknown access mode '{other}' (expected striped or private)")),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Striped => "striped",
            Mode::Private => "private",
        })
    }
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct ServerInfo {
    pub index: usize,
    /// Host the server runs on, as given to `surge up --hosts`.
    pub host: String,
    /// Address it listens on.
    pub addr: SocketAddr,
    /// Process id, when it was started on this machine.
    pub pid: Option<u32>,
    /// The server's node-local directory.
    pub root: PathBuf,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct InstanceDescriptor {
    pub name: String,
    pub mode: Mode,
    pub chunk_size: u64,
    /// Total capacity in bytes, shared equally by the servers.
    pub capacity: u64,
    pub owner_uid: u32,
    pub token_path: PathBuf,
    /// Parent of the servers' node-local directories.
    pub root: PathBuf,
    /// Unix time of creation.
    pub created: u64,
    pub servers: Vec<ServerInfo>,
    /// Set when the servers check each request's permissions against the uid and gid MUNGE
    /// proves for its client (an instance several users share), not the token holder's word:
    /// the servers' key for data tickets (0600, the instance owner's; no client reads it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket_key_path: Option<PathBuf>,
    /// The layout the instance's root was made with (`surge up --layout`); directories may
    /// have another since (`surge layout`). Clients suppose it of a new directory's parent.
    #[serde(default)]
    pub layout: surge_proto::placement::DirLayout,
    /// Back-pressure on every server's share (`surge up --high-water --low-water`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermarks: Option<surge_proto::workflow::Watermarks>,
    /// Copies of each server's share (`surge up --replicas`): with 2, server i's share is
    /// mirrored on server i+1 (mod N), which serves it once i is lost and taken over.
    #[serde(default = "one_replica", skip_serializing_if = "is_one_replica")]
    pub replicas: u8,
    /// With replicas: seconds after which a lost server's share is taken over by itself
    /// (`surge up --failover-after`; None: only by `surge failover`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover_after: Option<f64>,
}

fn one_replica() -> u8 {
    1
}

fn is_one_replica(replicas: &u8) -> bool {
    *replicas == 1
}

/// `$SURGE_HOME`, or `~/.surge`.
pub fn surge_home() -> PathBuf {
    if let Some(home) = std::env::var_os("SURGE_HOME") {
        return PathBuf::from(home);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".surge")
}

pub fn instances_dir() -> PathBuf {
    surge_home().join("instances")
}

pub fn descriptor_path(name: &str) -> PathBuf {
    instances_dir().join(format!("{name}.json"))
}

/// Names of the instances whose descriptors are on this machine, sorted.
pub fn known_instances() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(instances_dir()) else { return Vec::new() };
    let mut names: Vec<String> =
        entries.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".json")).map(str::to_string)).collect();
    names.sort();
    names
}

/// Instance names become file names: keep them tame.
pub fn check_instance_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && !name.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(Error::new(ErrorCode::Invalid, format!("bad instance name '{name}': use letters, digits, '-', '_', '.'")))
    }
}

impl InstanceDescriptor {
    pub fn load(name: &str) -> Result<Self> {
        check_instance_name(name)?;
        Self::load_from(&descriptor_path(name))
    }

    pub fn load_from(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            let code = if e.kind() == std::io::ErrorKind::NotFound { ErrorCode::NotFound } else { ErrorCode::Io };
            Error::new(code, format!("no instance descriptor at {}: {e}", path.display()))
        })?;
        serde_json::from_str(&text).map_err(|e| Error::new(ErrorCode::Invalid, format!("bad instance descriptor {}: {e}", path.display())))
    }

    /// Writes the descriptor under a temporary name and renames it into place.
    pub fn save(&self) -> Result<PathBuf> {
        let path = descriptor_path(&self.name);
        let io = |e: std::io::Error| Error::new(ErrorCode::Io, format!("write {}: {e}", path.display()));
        std::fs::create_dir_all(instances_dir()).map_err(io)?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(self).expect("serializable")).map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)?;
        Ok(path)
    }

    /// Reads the instance's secret, refusing a token file that others could read or that
    /// belongs to someone else (as ssh does with private keys).
    pub fn read_secret(&self) -> Result<Secret> {
        read_token(&self.token_path)
    }
}

pub fn read_token(path: &Path) -> Result<Secret> {
    let denied = |why: String| Error::new(ErrorCode::Unauthenticated, format!("token file {}: {why}", path.display()));
    let meta = std::fs::metadata(path).map_err(|e| denied(e.to_string()))?;
    // SAFETY: geteuid/getegid take no arguments and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if meta.uid() != euid {
        return Err(denied(format!("owned by uid {}, not by you (uid {euid})", meta.uid())));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(denied(format!("mode {:o} lets others read it; it must be 0600", meta.mode() & 0o777)));
    }
    let text = std::fs::read_to_string(path).map_err(|e| denied(e.to_string()))?;
    auth::parse_secret(&text).ok_or_else(|| denied("does not hold 64 hex digits".into()))
}

/// Creates a new random token file with mode 0600.
pub fn create_token(path: &Path) -> Result<Secret> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut secret = [0u8; auth::SECRET_LEN];
    getrandom::getrandom(&mut secret).map_err(|e| Error::new(ErrorCode::Io, format!("no randomness: {e}")))?;
    let io = |e: std::io::Error| Error::new(ErrorCode::Io, format!("write token {}: {e}", path.display()));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path).map_err(io)?;
    file.write_all(auth::format_secret(&secret).as_bytes()).map_err(io)?;
    Ok(secret)
}

/// Where the FUSE mounts of instance `name` on this machine are recorded (`surge mount`
/// writes it; `surge down` unmounts what it lists; paths under a mount resolve to the instance).
pub fn mounts_file(name: &str) -> PathBuf {
    mounts_file_in(&instances_dir(), name)
}

/// [`mounts_file`] in another home's instances directory (a job's, written by its prolog).
pub fn mounts_file_in(instances: &Path, name: &str) -> PathBuf {
    instances.join(format!("{name}.mounts"))
}

/// Mount points of instance `name` recorded on this machine.
pub fn recorded_mounts(name: &str) -> Vec<PathBuf> {
    std::fs::read_to_string(mounts_file(name)).unwrap_or_default().lines().filter(|l| !l.is_empty()).map(PathBuf::from).collect()
}

/// Replaces the record of instance `name`'s mount points.
pub fn record_mounts(name: &str, mounts: &[PathBuf]) -> Result<()> {
    let text: String = mounts.iter().map(|m| format!("{}\n", m.display())).collect();
    std::fs::write(mounts_file(name), text).map_err(|e| Error::new(ErrorCode::Io, format!("record mounts of '{name}': {e}")))
}

/// Every (instance, mount point) recorded on this machine.
pub fn all_recorded_mounts() -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(instances_dir()) else { return Vec::new() };
    let mut all = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "mounts") {
            let name = path.file_stem().unwrap_or_default().to_string_lossy().to_string();
            all.extend(recorded_mounts(&name).into_iter().map(|m| (name.clone(), m)));
        }
    }
    all
}

/// Maps a path on a Surge mount (`/mnt/bb/run1/plt0001.h5`) to its instance and the path
/// inside it (`/run1/plt0001.h5`), so programs can name burst-buffer files the way they open
/// them. `None` when the path is under no recorded mount. Paths are compared lexically after
/// making them absolute, without touching the mount (which may be busy or gone).
pub fn resolve_mount_path(path: &Path) -> Option<(String, String)> {
    let absolute = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir().ok()?.join(path) };
    let absolute = normalize(&absolute);
    all_recorded_mounts()
        .into_iter()
        .filter_map(|(name, mount)| {
            let rest = absolute.strip_prefix(&mount).ok()?;
            Some((mount.components().count(), name, format!("/{}", rest.display())))
        })
        .max_by_key(|(depth, _, _)| *depth)
        .map(|(_, name, inner)| (name, inner.replace("//", "/")))
}

/// Removes `.` and resolves `..` lexically.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
