//! The node a process runs on, as servers and clients both see it: its boot (to recognise a
//! server's data directory as being on the client's own node, [`crate::LocalData`]), the
//! free space of a directory's device (what a capacity share must fit), a user's groups as
//! the node's user database knows them, and a thread's file-system identity (whose files a
//! stage touches on the PFS).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The running kernel's boot id: differs between nodes, and between boots of one node.
pub fn boot_id() -> std::io::Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?.trim().to_string())
}

/// Bytes an unprivileged writer may still put on the file system holding `dir`.
pub fn available_bytes(dir: &std::path::Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated and `stats` has room for one statvfs, which the call
    // fills when it succeeds (it is only read then).
    let stats = unsafe {
        if libc::statvfs(path.as_ptr(), stats.as_mut_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        stats.assume_init()
    };
    Ok(stats.f_bavail as u64 * stats.f_frsize as u64)
}

/// How long a user's groups, once looked up, are taken as they were: a stage asks for them
/// at every PFS file it touches, and the user database may be a directory service.
pub const GROUPS_KEPT: Duration = Duration::from_secs(30);

/// The groups a process of `uid` running with group `gid` has: `gid` first, then the groups a
/// login gives the user (the primary group of its passwd entry and every group that lists
/// it as a member: `getgrouplist`), as this node's user database (NSS: /etc/group, LDAP,
/// SSSD ...) knows them, which on a cluster answers alike on every node. A uid without a
/// passwd entry has no name to find its groups by: it has `gid` alone; so does one whose
/// lookup fails (never more groups than the user has). Answers are kept [`GROUPS_KEPT`] (a
/// lookup that failed is not kept), so a user added to or removed from a group is seen so
/// within that time. More groups than the kernel allows a process (`NGROUPS_MAX`) are cut to
/// that many.
pub fn user_groups(uid: u32, gid: u32) -> Arc<[u32]> {
    /// Groups looked up, by uid and gid, with when.
    type Kept = HashMap<(u32, u32), (Instant, Arc<[u32]>)>;
    static KEPT: OnceLock<Mutex<Kept>> = OnceLock::new();
    let kept = KEPT.get_or_init(Default::default);
    if let Some((at, groups)) = kept.lock().unwrap_or_else(|e| e.into_inner()).get(&(uid, gid)) {
        if at.elapsed() < GROUPS_KEPT {
            return groups.clone();
        }
    }
    // Looked up without the lock held: a slow directory service holds up only this caller.
    let Some(found) = login_groups(uid) else {
        return Arc::from([gid]);
    };
    let mut groups = vec![gid];
    groups.extend(found.into_iter().filter(|&g| g != gid));
    // SAFETY: sysconf takes a plain constant.
    let most = unsafe { libc::sysconf(libc::_SC_NGROUPS_MAX) };
    groups.truncate(if most > 0 { most as usize } else { 65536 });
    let groups: Arc<[u32]> = groups.into();
    let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
    kept.retain(|_, (at, _)| at.elapsed() < GROUPS_KEPT);
    kept.insert((uid, gid), (Instant::now(), groups.clone()));
    groups
}

/// The groups a login of `uid` has (its passwd entry's group first), asked of the user
/// database now (not kept: see [`user_groups`] for that); empty when the uid has no passwd
/// entry; `None` when the user database could not be asked.
pub fn login_groups(uid: u32) -> Option<Vec<u32>> {
    // SAFETY: sysconf takes a plain constant.
    let hint = unsafe { libc::sysconf(libc::_SC_GETPW_R_SIZE_MAX) };
    let mut size = if hint > 0 { (hint as usize).max(1024) } else { 16 << 10 };
    loop {
        let mut buf = vec![0 as libc::c_char; size];
        // SAFETY: an all-zero passwd is a valid value (null pointers, zero ids) for
        // getpwuid_r to fill.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: getpwuid_r writes the entry into `entry` and its strings into `buf`, of the
        // size given, and points `found` at `entry` or leaves it null.
        let rc = unsafe { libc::getpwuid_r(uid, &mut entry, buf.as_mut_ptr(), buf.len(), &mut found) };
        match rc {
            libc::ERANGE if size < 1 << 20 => {
                size *= 2;
                continue;
            }
            // Not found, as the various user databases say it.
            0 | libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM if found.is_null() => return Some(Vec::new()),
            0 => {}
            _ => return None,
        }
        let mut list = vec![0 as libc::gid_t; 64];
        loop {
            let mut count = list.len() as libc::c_int;
            // SAFETY: `entry.pw_name` points into `buf`, alive here, at a NUL-terminated name;
            // getgrouplist writes at most `count` ids into `list`, which has room for them.
            let rc = unsafe { libc::getgrouplist(entry.pw_name, entry.pw_gid, list.as_mut_ptr(), &mut count) };
            if rc >= 0 {
                list.truncate(count.max(0) as usize);
                return Some(list);
            }
            // Too many for `list`: glibc says how many there are; others do not, so grow.
            let wanted = (count.max(0) as usize).max(list.len() * 2);
            if wanted > 1 << 20 {
                return None;
            }
            list.resize(wanted, 0);
        }
    }
}

/// Runs `work` on this thread with the file-system identity of `uid`:`gid` and that user's
/// groups ([`user_groups`]: looked up on this node, so a stage can write a project directory
/// its user may write through a supplementary group, and nothing more), so that what it
/// opens, makes, lists or renames is checked, and owned, as that user's: how a stage touches
/// the PFS as the user who submitted it when the servers run as root (a shared instance).
///
/// A process that is not root cannot take another identity, nor needs to: its servers run
/// as the instance's owner, and `work` runs as it is, with the process's own credentials and
/// the groups it was started with (the user's own when the user ran `surge up`; the owner's
/// groups when a node agent started it, which gives them). A stage of root's runs as it is
/// too.
///
/// Linux keeps credentials per thread, and `setfsuid`/`setfsgid` change only the calling
/// thread's; the groups are set by the raw system call for the same reason (glibc's
/// `setgroups` changes every thread's). This thread's identity is put back when `work`
/// returns or panics, so call this on a thread of its own (a blocking task), never on an
/// async worker. Fails, without running `work`, when the identity cannot be taken (a root
/// process denied `CAP_SETUID` or `CAP_SETGID`): `work` never runs as root in its stead.
pub fn with_fs_ids<T>(uid: u32, gid: u32, work: impl FnOnce() -> T) -> std::io::Result<T> {
    // SAFETY: geteuid takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 || uid == 0 {
        return Ok(work());
    }
    let groups = user_groups(uid, gid);
    let _restore = FsIds::take(uid, gid, &groups)?;
    Ok(work())
}

/// A thread's file-system identity, as it was before [`FsIds::take`]; put back when dropped.
struct FsIds {
    uid: u32,
    gid: u32,
    groups: Vec<libc::gid_t>,
}

/// Asking for this id changes nothing: `setfsuid`/`setfsgid` then only say the current one.
const NO_ID: u32 = u32::MAX;

impl FsIds {
    /// This thread's identity as it is now.
    fn current() -> std::io::Result<FsIds> {
        // SAFETY: getgroups with a zero size only counts; the second call fills `groups`,
        // which has room for that many. setfsuid/setfsgid of an invalid id change nothing.
        unsafe {
            let count = libc::getgroups(0, std::ptr::null_mut());
            if count < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut groups = vec![0 as libc::gid_t; count as usize];
            let count = libc::getgroups(count, groups.as_mut_ptr());
            if count < 0 {
                return Err(std::io::Error::last_os_error());
            }
            groups.truncate(count as usize);
            Ok(FsIds { uid: libc::setfsuid(NO_ID) as u32, gid: libc::setfsgid(NO_ID) as u32, groups })
        }
    }

    /// Gives this thread `uid`, `gid` and `groups`; answers what to put back. Anything taken
    /// before a step fails is put back at once.
    fn take(uid: u32, gid: u32, groups: &[u32]) -> std::io::Result<FsIds> {
        let before = FsIds::current()?;
        let failed = |what: &str, e: std::io::Error| {
            std::io::Error::new(e.kind(), format!("cannot take the file-system identity of uid {uid} gid {gid} ({what}): {e}"))
        };
        // SAFETY: plain system calls on this thread's own credentials; `groups` holds
        // `groups.len()` ids.
        unsafe {
            if libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) != 0 {
                return Err(failed("groups", std::io::Error::last_os_error()));
            }
            libc::setfsgid(gid);
            if libc::setfsgid(NO_ID) as u32 != gid {
                return Err(failed("group", std::io::Error::from_raw_os_error(libc::EPERM)));
            }
            libc::setfsuid(uid);
            if libc::setfsuid(NO_ID) as u32 != uid {
                return Err(failed("user", std::io::Error::from_raw_os_error(libc::EPERM)));
            }
        }
        Ok(before)
    }
}

impl Drop for FsIds {
    fn drop(&mut self) {
        // SAFETY: plain system calls on this thread's own credentials; `groups` holds
        // `groups.len()` ids.
        let restored = unsafe {
            libc::setfsuid(self.uid);
            libc::setfsgid(self.gid);
            libc::syscall(libc::SYS_setgroups, self.groups.len(), self.groups.as_ptr()) == 0
                && libc::setfsuid(NO_ID) as u32 == self.uid
                && libc::setfsgid(NO_ID) as u32 == self.gid
        };
        if !restored {
            // A thread left with a user's identity would do the next work, someone else's
            // perhaps, with that user's rights: nothing may run on it.
            eprintln!("surge: cannot put back this thread's file-system identity: {}", std::io::Error::last_os_error());
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The groups `id -G` gives a login of `name`, sorted; `None` without such a user.
    fn id_groups(name: &str) -> Option<Vec<u32>> {
        let out = std::process::Command::new("id").arg("-G").arg(name).output().ok()?;
        let mut groups: Vec<u32> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(|g| g.parse().unwrap()).collect();
        groups.sort();
        out.status.success().then_some(groups)
    }

    fn sorted(groups: &[u32]) -> Vec<u32> {
        let mut groups = groups.to_vec();
        groups.sort();
        groups
    }

    #[test]
    fn a_users_groups_are_a_logins_and_a_uid_without_an_entry_has_its_group_alone() {
        assert_eq!(sorted(&user_groups(0, 0)), id_groups("root").unwrap());
        if let Some(nobody) = id_groups("nobody") {
            assert_eq!(sorted(&user_groups(65534, nobody[0])), nobody);
        }
        // Another group than the user's own comes first, and the login's groups stay.
        let other = user_groups(0, 4321);
        assert_eq!(other[0], 4321);
        assert_eq!(sorted(&other[1..]), id_groups("root").unwrap());
        // No passwd entry: no name to look groups up by.
        assert!(id_groups("#3999999").is_none());
        assert_eq!(&*user_groups(3_999_999, 77), &[77]);
    }

    /// This thread's fsuid, fsgid and groups, as the kernel says.
    fn identity() -> (u32, u32, Vec<u32>) {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let field = |key: &str| -> Vec<u32> {
            let line = status.lines().find(|l| l.starts_with(key)).unwrap();
            line[key.len()..].split_whitespace().map(|n| n.parse().unwrap()).collect()
        };
        // Uid: and Gid: are real, effective, saved, file system.
        (field("Uid:")[3], field("Gid:")[3], sorted(&field("Groups:")))
    }

    #[test]
    fn the_identity_is_the_threads_alone_and_is_put_back_even_after_a_panic() {
        // SAFETY: geteuid takes no arguments and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: only root takes another identity");
            return;
        }
        let before = identity();
        // Another thread, asked while this one is someone else.
        let (ask, asked) = std::sync::mpsc::channel::<()>();
        let (tell, told) = std::sync::mpsc::channel();
        let other = std::thread::spawn(move || {
            while asked.recv().is_ok() {
                tell.send(identity()).unwrap();
            }
        });
        let (inside, beside) = with_fs_ids(65534, 4321, || {
            ask.send(()).unwrap();
            (identity(), told.recv().unwrap())
        })
        .unwrap();
        assert_eq!(inside, (65534, 4321, sorted(&user_groups(65534, 4321))));
        assert!(inside.2.contains(&4321) && !inside.2.contains(&0), "{inside:?}");
        assert_eq!(beside, before, "another thread changed with this one");
        assert_eq!(identity(), before, "not put back");

        let panicked = std::panic::catch_unwind(|| with_fs_ids(65534, 4321, || panic!("in the user's work")));
        assert!(panicked.is_err());
        assert_eq!(identity(), before, "not put back after a panic");
        // Root's own work runs as it is.
        assert_eq!(with_fs_ids(0, 0, identity).unwrap(), before);
        drop(ask);
        other.join().unwrap();
    }
}
