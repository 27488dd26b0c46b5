//! The Surge mounts this process can see, from the kernel's own table
//! (`/proc/self/mountinfo`): type `fuse.surge`, source `surge:INSTANCE`, as `surge-fuse` and
//! the job prolog mount them. A mount is known by its device number: the kernel reports it in
//! every `stat` of a file there, so a path the kernel resolved (symbolic links, `..`, bind
//! mounts) is recognised whichever way it was written.

use std::path::{Path, PathBuf};

/// One Surge mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted.
    pub point: PathBuf,
    /// The device number `stat` reports for its files.
    pub dev: u64,
    /// The mount's number in the table (what `name_to_handle_at` reports for a path there).
    pub id: i32,
    /// The instance it serves.
    pub instance: String,
}

/// The Surge mounts of one reading of the mount table.
#[derive(Debug, Default, Clone)]
pub struct Mounts {
    pub mounts: Vec<Mount>,
}

impl Mounts {
    /// The Surge mounts among `mountinfo`'s lines (the format of proc(5)); other lines,
    /// and lines that do not parse, are not Surge's.
    pub fn parse(mountinfo: &str) -> Mounts {
        Mounts { mounts: mountinfo.lines().filter_map(parse_line).collect() }
    }

    /// Whether an absolute path (as written, before the kernel resolves it) starts at a
    /// Surge mount point. A path written otherwise may still reach one (through a symbolic
    /// link): the kernel serves it then, through the mount.
    pub fn may_hold(&self, absolute: &Path) -> bool {
        // Most paths under a mount are written plainly: a byte comparison answers them; the
        // component-wise one (which reads `a//b` and `a/./b` as `a/b`) answers the rest.
        self.mounts.iter().any(|m| starts_plainly(absolute, &m.point) || absolute.starts_with(&m.point))
    }

    /// The mount whose files `stat` reports with device `dev`.
    pub fn by_dev(&self, dev: u64) -> Option<&Mount> {
        self.mounts.iter().find(|m| m.dev == dev)
    }

    /// The mount numbered `id` in the table.
    pub fn by_id(&self, id: i32) -> Option<&Mount> {
        self.mounts.iter().find(|m| m.id == id)
    }

    /// Only the mounts at the points listed (colon-separated, as the mount table writes them:
    /// `SURGE_PRELOAD_MOUNTS`, for a program that should use the library on some mounts and
    /// the kernel on others); all of them for None.
    pub fn only(mut self, points: Option<&std::ffi::OsStr>) -> Mounts {
        if let Some(points) = points {
            let listed: Vec<PathBuf> = std::env::split_paths(points).collect();
            self.mounts.retain(|m| listed.contains(&m.point));
        }
        self
    }

    pub fn is_empty(&self) -> bool {
        self.mounts.is_empty()
    }
}

/// Whether `path` is `point` or below it, byte for byte.
fn starts_plainly(path: &Path, point: &Path) -> bool {
    let (path, point) = (path.as_os_str().as_encoded_bytes(), point.as_os_str().as_encoded_bytes());
    path.starts_with(point) && (path.len() == point.len() || path[point.len()] == b'/' || point.ends_with(b"/"))
}

fn parse_line(line: &str) -> Option<Mount> {
    let (before, after) = line.split_once(" - ")?;
    let mut fields = before.split(' ');
    let (id, _parent, dev, _root, point) = (fields.next()?, fields.next()?, fields.next()?, fields.next()?, fields.next()?);
    let mut after = after.split(' ');
    let (fstype, source) = (after.next()?, after.next()?);
    if fstype != "fuse.surge" {
        return None;
    }
    let instance = unescape(source).strip_prefix("surge:")?.to_string();
    let (major, minor) = dev.split_once(':')?;
    let dev = libc::makedev(major.parse().ok()?, minor.parse().ok()?);
    Some(Mount { point: PathBuf::from(unescape(point)), dev, id: id.parse().ok()?, instance })
}

/// The kernel writes a space, tab, newline and backslash in a path as `\ooo` (octal).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(digits) => {
                out.push(digits.iter().fold(0u8, |n, d| n.wrapping_mul(8) + (d - b'0')));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
97 22 0:52 / /mnt/bb rw,nosuid,nodev,relatime shared:60 - fuse.surge surge:job42 rw,user_id=1000,group_id=1000
98 22 0:53 / /tmp/with\\040space rw,nosuid,nodev shared:61 - fuse.surge surge:other rw,user_id=0,group_id=0
99 22 0:54 / /mnt/other rw shared:62 - fuse.sshfs host:/x rw
100 22 0:55 /sub /mnt/bound rw master:7 - fuse.surge surge:job42 rw
bad line without a separator
";

    #[test]
    fn surge_mounts_are_found_by_type_and_source_with_their_devices() {
        let mounts = Mounts::parse(TABLE);
        let points: Vec<_> = mounts.mounts.iter().map(|m| (m.point.to_str().unwrap(), m.instance.as_str())).collect();
        assert_eq!(points, [("/mnt/bb", "job42"), ("/tmp/with space", "other"), ("/mnt/bound", "job42")]);
        assert_eq!(mounts.by_dev(libc::makedev(0, 53)).unwrap().instance, "other");
        assert!(mounts.by_dev(libc::makedev(0, 54)).is_none(), "sshfs is not Surge");
        assert!(mounts.by_dev(libc::makedev(259, 1)).is_none());
        assert_eq!(mounts.by_id(100).unwrap().point, Path::new("/mnt/bound"));
        assert!(mounts.by_id(99).is_none(), "sshfs is not Surge");
    }

    #[test]
    fn paths_are_matched_by_whole_components() {
        let mounts = Mounts::parse(TABLE);
        assert!(mounts.may_hold(Path::new("/mnt/bb/run/out.h5")));
        assert!(mounts.may_hold(Path::new("/mnt/bb")));
        assert!(!mounts.may_hold(Path::new("/mnt/bbx/out")), "a namesake prefix");
        assert!(mounts.may_hold(Path::new("/mnt//bb/./run")), "written with doubled slashes and a dot");
        assert!(!mounts.may_hold(Path::new("/home/user/out")));
        assert!(Mounts::parse("").is_empty());
    }

    #[test]
    fn a_list_of_points_keeps_only_those_mounts() {
        let only = Mounts::parse(TABLE).only(Some(std::ffi::OsStr::new("/mnt/bound:/nowhere")));
        assert_eq!(only.mounts.len(), 1);
        assert_eq!(only.mounts[0].point, Path::new("/mnt/bound"));
        assert_eq!(Mounts::parse(TABLE).only(None).mounts.len(), 3);
    }
}
