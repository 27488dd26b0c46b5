//! What the control plane's root-side parts (the node agents, the nodes' prolog) and its
//! daemons do on a node alike: make directories and files that belong to a job's user, know
//! that user's groups, and wait for the signal that stops a daemon.

use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

fn with_path<'p>(what: &str, path: &'p Path) -> impl FnOnce(io::Error) -> io::Error + 'p {
    let what = what.to_string();
    move |e| io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

/// Makes `path` (and missing parents) a directory owned by `uid:gid`, mode 0700.
pub fn owned_dir(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
    std::fs::create_dir_all(path).map_err(with_path("create", path))?;
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(with_path(&format!("give to uid {uid}"), path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(with_path("restrict", path))
}

/// Writes `text` as `path`, a file owned by `uid:gid` with mode 0600. Written under a new
/// name and renamed into place, so a link planted at `path` is replaced, never followed.
pub fn owned_file(path: &Path, text: &str, uid: u32, gid: u32) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(with_path("create", &tmp))?;
    io::Write::write_all(&mut file, text.as_bytes()).map_err(with_path("write", &tmp))?;
    std::os::unix::fs::chown(&tmp, Some(uid), Some(gid)).map_err(with_path(&format!("give to uid {uid}"), &tmp))?;
    std::fs::rename(&tmp, path).map_err(with_path("write", path))
}

/// The groups a process of a job's user gets on this node, as a login's (see
/// [`surge_proto::host::user_groups`]): a server started for the user has them, so that it
/// reaches on the PFS what the user may reach through a supplementary group, as the job does.
pub use surge_proto::host::user_groups;

/// Completes on SIGTERM or SIGINT (on SIGINT alone where SIGTERM cannot be watched).
pub async fn stop_signal() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut sigterm) => {
            tokio::select! {
                _ = sigterm.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn an_owned_file_replaces_a_planted_link_instead_of_writing_through_it() {
        let dir = std::env::temp_dir().join(format!("surge-host-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let planted = dir.join("x.token");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        // Whoever runs the test: the owner of what it just made.
        let (uid, gid) = (std::fs::metadata(&dir).unwrap().uid(), std::fs::metadata(&dir).unwrap().gid());
        owned_file(&planted, "secret", uid, gid).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        let meta = std::fs::symlink_metadata(&planted).unwrap();
        assert!(meta.is_file() && meta.mode() & 0o777 == 0o600);
        assert_eq!(std::fs::read_to_string(&planted).unwrap(), "secret");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
