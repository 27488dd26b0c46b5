//! What the control plane's root-side parts (the node agents, the nodes' prolog) and its
//! daemons do on a node alike: make directories and files that belong to a job's user, wait
//! for the signal that stops a daemon, and look users and groups up as the node knows them
//! (its passwd and group databases, through the C library: files, LDAP, SSSD alike).

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

/// A user as the node's passwd database knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    /// The user's primary group.
    pub gid: u32,
}

/// Room for what getpw*_r and getgr*_r write (names, and a group's member list).
const LOOKUP_BUFFER: usize = 64 * 1024;

fn account(pwd: &libc::passwd) -> Account {
    // SAFETY: a passwd filled by getpw*_r: pw_name is a NUL-terminated string in its buffer.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) }.to_string_lossy().into_owned();
    Account { name, uid: pwd.pw_uid, gid: pwd.pw_gid }
}

/// The user of this uid, if the node knows one.
pub fn user_by_uid(uid: u32) -> Option<Account> {
    let mut buf = vec![0 as libc::c_char; LOOKUP_BUFFER];
    // SAFETY: getpwuid_r writes into `pwd` and `buf`, of the sizes given; `found` points at
    // `pwd` (or is null) and is read while `buf` lives.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        (libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) == 0 && !found.is_null()).then(|| account(&pwd))
    }
}

/// The user of this name, if the node knows one.
pub fn user_by_name(name: &str) -> Option<Account> {
    let name = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; LOOKUP_BUFFER];
    // SAFETY: as in `user_by_uid`; `name` is NUL-terminated and outlives the call.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        (libc::getpwnam_r(name.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) == 0 && !found.is_null()).then(|| account(&pwd))
    }
}

/// The gid of the group of this name, if the node knows one.
pub fn group_by_name(name: &str) -> Option<u32> {
    let name = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; LOOKUP_BUFFER];
    // SAFETY: getgrnam_r writes into `grp` and `buf`, of the sizes given; `name` is
    // NUL-terminated and outlives the call.
    unsafe {
        let mut grp: libc::group = std::mem::zeroed();
        let mut found: *mut libc::group = std::ptr::null_mut();
        (libc::getgrnam_r(name.as_ptr(), &mut grp, buf.as_mut_ptr(), buf.len(), &mut found) == 0 && !found.is_null()).then_some(grp.gr_gid)
    }
}

/// The name of the group of this gid, if the node knows one.
pub fn group_name(gid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; LOOKUP_BUFFER];
    // SAFETY: getgrgid_r writes into `grp` and `buf`, of the sizes given; gr_name points into
    // `buf`, read while it lives.
    unsafe {
        let mut grp: libc::group = std::mem::zeroed();
        let mut found: *mut libc::group = std::ptr::null_mut();
        (libc::getgrgid_r(gid, &mut grp, buf.as_mut_ptr(), buf.len(), &mut found) == 0 && !found.is_null())
            .then(|| std::ffi::CStr::from_ptr(grp.gr_name).to_string_lossy().into_owned())
    }
}

/// Every group the user of this uid is in as the node knows it: the primary group and the
/// supplementary ones (empty for a uid the node does not know; the primary group alone when
/// the group database cannot be asked).
pub fn groups_of(uid: u32) -> Vec<u32> {
    surge_proto::host::login_groups(uid).unwrap_or_else(|| user_by_uid(uid).map(|user| vec![user.gid]).unwrap_or_default())
}

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

    /// root is uid 0 in group 0 on every Linux node; a name nobody has is nobody's.
    #[test]
    fn users_and_groups_are_looked_up_as_the_node_knows_them() {
        let root = user_by_uid(0).unwrap();
        assert_eq!((root.name.as_str(), root.uid, root.gid), ("root", 0, 0));
        assert_eq!(user_by_name("root"), Some(root));
        assert_eq!(group_by_name("root"), Some(0));
        assert_eq!(group_name(0).as_deref(), Some("root"));
        assert!(groups_of(0).contains(&0));
        assert_eq!(user_by_name("no-such-user-here"), None);
        assert_eq!(group_by_name("no-such-group-here"), None);
        assert!(groups_of(3_999_999_999).is_empty());
    }
}
