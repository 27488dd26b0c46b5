//! Who a client is, proven across nodes: a MUNGE credential, made by the munged of the
//! client's node for the uid and gid of the process that asks (as Slurm's daemons prove
//! theirs), and checked by the munged of the server's node (every node shares the cluster's
//! MUNGE key). The instance token proves a client may talk to an instance at all; a server
//! started with `--identity munge` also wants the credential, and checks every request's
//! permissions against that uid and gid (not against what the client says it is).
//!
//! The credential's payload is the server's challenge (hex), so a credential is good for one
//! connection, and munged refuses one that is replayed. The `munge` and `unmunge` programs do
//! the work (one run per connection, a few milliseconds); `SURGE_MUNGE_SOCKET` names munged's
//! socket when it is not the default.

use std::io::Write;
use std::process::{Command, Stdio};

/// The uid and gid a credential proves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proven {
    pub uid: u32,
    pub gid: u32,
}

fn munge_command(program: &str) -> Command {
    let mut command = Command::new(program);
    if let Some(socket) = std::env::var_os("SURGE_MUNGE_SOCKET") {
        command.arg("--socket").arg(socket);
    }
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    command
}

/// The payload a credential for `challenge` carries.
pub fn payload_of(challenge: &[u8]) -> String {
    challenge.iter().map(|b| format!("{b:02x}")).collect()
}

/// A credential of this process carrying `payload`.
pub fn credential(payload: &str) -> Result<String, String> {
    let out = munge_command("munge")
        .arg("--string")
        .arg(payload)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("munge: {e} (is MUNGE installed?)"))?;
    if !out.status.success() {
        return Err(format!("munge: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Checks `credential` with munged: valid, not replayed, carrying `payload`. Answers whom it
/// proves.
pub fn verify(credential: &str, payload: &str) -> Result<Proven, String> {
    let mut child = munge_command("unmunge")
        .args(["--numeric", "--keys", "STATUS,UID,GID"])
        .spawn()
        .map_err(|e| format!("unmunge: {e} (is MUNGE installed?)"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A credential is printable text; one that is not is refused by unmunge.
        let _ = stdin.write_all(credential.as_bytes());
    }
    let out = child.wait_with_output().map_err(|e| format!("unmunge: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (metadata, carried) = text.split_once("\n\n").unwrap_or((&text, ""));
    let field =
        |key: &str| -> Option<u32> { metadata.lines().find_map(|line| line.strip_prefix(key)?.strip_prefix(':')?.trim().parse().ok()) };
    match field("STATUS") {
        Some(0) => {}
        Some(status) => return Err(format!("MUNGE credential refused (status {status}): {}", String::from_utf8_lossy(&out.stderr).trim())),
        None => return Err(format!("unmunge: {}", String::from_utf8_lossy(&out.stderr).trim())),
    }
    if carried != payload {
        return Err("MUNGE credential made for another connection".into());
    }
    match (field("UID"), field("GID")) {
        (Some(uid), Some(gid)) => Ok(Proven { uid, gid }),
        _ => Err("unmunge gave no uid or gid".into()),
    }
}
