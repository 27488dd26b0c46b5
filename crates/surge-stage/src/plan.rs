//! Turns a stage's spec into the list of files to copy: walks the source tree (on the PFS
//! for a stage-in, in the instance for a stage-out) or reads a list file.
//!
//! A plan lists regular files only, each with its size (and, for a stage-out, its inode), and
//! the directories the destination needs, parents before children; what it leaves out
//! (sockets, devices, a stage-out's symlinks) is listed for the log. A stage-in follows the
//! PFS's symlinks (the buffer gets the data). What cannot be planned as asked fails with the
//! code the C API turns into an errno and a message naming the path.

use std::os::unix::fs::PermissionsExt;
use surge_client::surge_proto::host::with_fs_ids;

use surge_client::Client;
use surge_proto::stage::{StageDirection, StageKind, StageSpec};
use surge_proto::{Error, ErrorCode, FileKind, Ino};

/// A file to copy.
#[derive(Clone, Debug)]
pub(crate) struct PlannedFile {
    pub bb_path: String,
    pub pfs_path: String,
    pub size: u64,
    pub mode: u32,
    /// Stage-out: the file's inode in the instance.
    pub ino: Option<Ino>,
}

#[derive(Debug)]
pub(crate) struct Plan {
    /// Directories the destination side needs, parents before children.
    pub dirs: Vec<String>,
    pub files: Vec<PlannedFile>,
    /// What the walk left out (sockets, devices, symlinks in a stage-out), for the log.
    pub skipped: Vec<String>,
}

/// Why a stage could not be planned: its code becomes the C API's errno, its detail the
/// stage's error.
pub(crate) type PlanResult<T> = Result<T, Error>;

/// A stage that cannot be planned as asked (a wrong type, a malformed list, a relative path).
fn invalid(detail: String) -> Error {
    Error::new(ErrorCode::Invalid, detail)
}

/// Splits `/a/b/c` into (`/a/b`, `c`); the root's children have parent `/`.
pub(crate) fn split_path(path: &str) -> (String, &str) {
    let trimmed = path.trim_end_matches('/');
    match trimmed.rsplit_once('/') {
        Some(("", name)) => ("/".to_string(), name),
        Some((parent, name)) => (parent.to_string(), name),
        None => ("/".to_string(), trimmed),
    }
}

fn join(dir: &str, rel: &str) -> String {
    if rel.is_empty() {
        dir.to_string()
    } else {
        format!("{}/{rel}", dir.trim_end_matches('/'))
    }
}

pub(crate) async fn make(client: &Client, spec: &StageSpec) -> PlanResult<Plan> {
    match spec.direction {
        StageDirection::In => {
            let spec = spec.clone();
            // The PFS as the stage's user sees it.
            let (uid, gid) = (spec.uid, spec.gid);
            tokio::task::spawn_blocking(move || as_user(uid, gid, || plan_in(&spec)))
                .await
                .map_err(|e| invalid(format!("planning stopped: {e}")))?
        }
        StageDirection::Out => plan_out(client, spec).await,
    }
}

/// Runs `work` on the PFS as the stage's user (see [`with_fs_ids`]); a thread that cannot
/// take that identity fails the work (the plan, or a copy's step).
pub(crate) fn as_user<T>(uid: u32, gid: u32, work: impl FnOnce() -> PlanResult<T>) -> PlanResult<T> {
    with_fs_ids(uid, gid, work).map_err(|e| Error::new(ErrorCode::of_io(&e), e.to_string()))?
}

fn pfs_error(path: &str, err: std::io::Error) -> Error {
    Error::new(ErrorCode::of_io(&err), format!("{path}: {err}"))
}

fn bb_error(path: &str, err: Error) -> Error {
    Error::new(err.code, format!("{path} (burst buffer): {err}"))
}

/// PFS side of a stage-in: one file, a tree, or a list of `PFS_SOURCE BB_DESTINATION` lines.
fn plan_in(spec: &StageSpec) -> PlanResult<Plan> {
    let mut plan = Plan { dirs: Vec::new(), files: Vec::new(), skipped: Vec::new() };
    match spec.kind {
        StageKind::File => {
            let file = pfs_file(&spec.pfs_path, &spec.bb_path)?;
            plan.dirs.push(split_path(&spec.bb_path).0);
            plan.files.push(file);
        }
        StageKind::Directory => {
            let meta = std::fs::metadata(&spec.pfs_path).map_err(|e| pfs_error(&spec.pfs_path, e))?;
            if !meta.is_dir() {
                return Err(invalid(format!("{}: not a directory (stage it with type file)", spec.pfs_path)));
            }
            plan.dirs.push(spec.bb_path.clone());
            // Depth-first with an explicit stack: trees can be deeper than a thread's stack likes.
            let mut stack = vec![String::new()];
            while let Some(rel) = stack.pop() {
                let dir = join(&spec.pfs_path, &rel);
                let mut entries: Vec<_> =
                    std::fs::read_dir(&dir).map_err(|e| pfs_error(&dir, e))?.collect::<Result<_, _>>().map_err(|e| pfs_error(&dir, e))?;
                entries.sort_by_key(|e| e.file_name());
                for entry in entries {
                    let name = entry.file_name().to_string_lossy().to_string();
                    let child_rel = join(&rel, &name).trim_start_matches('/').to_string();
                    let pfs = join(&spec.pfs_path, &child_rel);
                    // Follows symlinks, as `cp -rL` would: the buffer gets the data.
                    match std::fs::metadata(&pfs) {
                        Ok(m) if m.is_dir() => {
                            plan.dirs.push(join(&spec.bb_path, &child_rel));
                            stack.push(child_rel);
                        }
                        Ok(m) if m.is_file() => plan.files.push(PlannedFile {
                            bb_path: join(&spec.bb_path, &child_rel),
                            pfs_path: pfs,
                            size: m.len(),
                            mode: m.permissions().mode() & 0o7777,
                            ino: None,
                        }),
                        Ok(_) => plan.skipped.push(pfs),
                        Err(e) => return Err(pfs_error(&pfs, e)),
                    }
                }
            }
        }
        StageKind::List => {
            for (source, destination) in read_list(&spec.pfs_path)? {
                let bb = if destination.starts_with('/') { destination } else { join(&spec.bb_path, &destination) };
                if !source.starts_with('/') {
                    return Err(invalid(format!("{}: PFS source '{source}' must be absolute", spec.pfs_path)));
                }
                let file = pfs_file(&source, &bb)?;
                plan.dirs.push(split_path(&bb).0);
                plan.files.push(file);
            }
        }
    }
    plan.dirs.dedup();
    Ok(plan)
}

fn pfs_file(pfs: &str, bb: &str) -> PlanResult<PlannedFile> {
    let meta = std::fs::metadata(pfs).map_err(|e| pfs_error(pfs, e))?;
    if meta.is_dir() {
        return Err(invalid(format!("{pfs}: is a directory (stage it with type directory)")));
    }
    Ok(PlannedFile {
        bb_path: bb.to_string(),
        pfs_path: pfs.to_string(),
        size: meta.len(),
        mode: meta.permissions().mode() & 0o7777,
        ino: None,
    })
}

/// A list file: one `SOURCE DESTINATION` pair per line; blank lines and `#` comments ignored.
fn read_list(path: &str) -> PlanResult<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path).map_err(|e| pfs_error(path, e))?;
    let mut pairs = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [source, destination] = fields[..] else {
            return Err(invalid(format!("{path}:{}: expected 'SOURCE DESTINATION', found '{line}'", number + 1)));
        };
        pairs.push((source.to_string(), destination.to_string()));
    }
    Ok(pairs)
}

/// Burst-buffer side of a stage-out: one file, a tree, or a list of `BB_SOURCE PFS_DESTINATION`.
async fn plan_out(client: &Client, spec: &StageSpec) -> PlanResult<Plan> {
    let mut plan = Plan { dirs: Vec::new(), files: Vec::new(), skipped: Vec::new() };
    match spec.kind {
        StageKind::File => {
            plan.files.push(bb_file(client, &spec.bb_path, &spec.pfs_path).await?);
            plan.dirs.push(split_path(&spec.pfs_path).0);
        }
        StageKind::Directory => {
            let root = client.stat(&spec.bb_path).await.map_err(|e| bb_error(&spec.bb_path, e))?;
            if root.kind != FileKind::Dir {
                return Err(invalid(format!("{} (burst buffer): not a directory (stage it with type file)", spec.bb_path)));
            }
            plan.dirs.push(spec.pfs_path.clone());
            let mut stack = vec![(String::new(), root.ino)];
            while let Some((rel, ino)) = stack.pop() {
                let dir = join(&spec.bb_path, &rel);
                let entries = client.readdir_ino(ino).await.map_err(|e| bb_error(&dir, e))?;
                for entry in entries {
                    let child_rel = join(&rel, &entry.name).trim_start_matches('/').to_string();
                    match entry.kind {
                        FileKind::Dir => {
                            plan.dirs.push(join(&spec.pfs_path, &child_rel));
                            stack.push((child_rel, entry.ino));
                        }
                        FileKind::File => {
                            let attr = match entry.attr {
                                Some(attr) => attr,
                                None => client.getattr(entry.ino).await.map_err(|e| bb_error(&join(&dir, &entry.name), e))?,
                            };
                            plan.files.push(PlannedFile {
                                bb_path: join(&spec.bb_path, &child_rel),
                                pfs_path: join(&spec.pfs_path, &child_rel),
                                size: attr.size,
                                mode: attr.mode,
                                ino: Some(attr.ino),
                            });
                        }
                        // Links and node-local special files are not data to stage.
                        FileKind::Symlink
                        | FileKind::Fifo
                        | FileKind::Socket
                        | FileKind::CharDevice { .. }
                        | FileKind::BlockDevice { .. } => plan.skipped.push(join(&spec.bb_path, &child_rel)),
                    }
                }
            }
        }
        StageKind::List => {
            let (list, uid, gid) = (spec.pfs_path.clone(), spec.uid, spec.gid);
            let pairs =
                tokio::task::spawn_blocking(move || as_user(uid, gid, || read_list(&list))).await.map_err(|e| invalid(e.to_string()))??;
            for (source, destination) in pairs {
                let bb = if source.starts_with('/') { source } else { join(&spec.bb_path, &source) };
                if !destination.starts_with('/') {
                    return Err(invalid(format!("{}: PFS destination '{destination}' must be absolute", spec.pfs_path)));
                }
                plan.files.push(bb_file(client, &bb, &destination).await?);
                plan.dirs.push(split_path(&destination).0);
            }
        }
    }
    plan.dirs.dedup();
    Ok(plan)
}

async fn bb_file(client: &Client, bb: &str, pfs: &str) -> PlanResult<PlannedFile> {
    let attr = client.stat(bb).await.map_err(|e| bb_error(bb, e))?;
    if attr.kind != FileKind::File {
        return Err(invalid(format!("{bb} (burst buffer): not a regular file")));
    }
    Ok(PlannedFile { bb_path: bb.to_string(), pfs_path: pfs.to_string(), size: attr.size, mode: attr.mode, ino: Some(attr.ino) })
}

/// For the log: what a plan holds.
pub(crate) fn describe(plan: &Plan) -> String {
    let bytes: u64 = plan.files.iter().map(|f| f.size).sum();
    let mut text = format!("{} files, {} bytes, {} directories", plan.files.len(), bytes, plan.dirs.len());
    if !plan.skipped.is_empty() {
        text.push_str(&format!("; skipped {} entries that are not files or directories (first: {})", plan.skipped.len(), plan.skipped[0]));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_client::ClientOptions;
    use surge_proto::stage::StageWhen;
    use surge_server::in_process::InProcessInstance;

    struct Fixture {
        instance: InProcessInstance,
        scratch: std::path::PathBuf,
        client: Client,
    }

    impl Fixture {
        async fn new(test: &str) -> Fixture {
            let scratch = std::env::temp_dir().join(format!("surge-plan-test-{test}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&scratch);
            std::fs::create_dir_all(scratch.join("pfs")).unwrap();
            let instance = InProcessInstance::start(&scratch.join("servers"), 3, 1 << 30).await.unwrap();
            let opts = ClientOptions { local_io: false, ..Default::default() };
            let client = Client::from_parts(instance.addrs.clone(), 1 << 20, instance.secret, opts).unwrap();
            Fixture { instance, scratch, client }
        }

        fn pfs(&self, rel: &str) -> String {
            self.scratch.join("pfs").join(rel).to_string_lossy().to_string()
        }

        fn spec(&self, direction: StageDirection, kind: StageKind, bb_path: &str, pfs_path: &str) -> StageSpec {
            self.client.stage_spec(direction, kind, StageWhen::Immediate, bb_path, pfs_path, false)
        }

        async fn stop(self) {
            self.instance.stop().await;
            let _ = std::fs::remove_dir_all(&self.scratch);
        }
    }

    /// A stage-out of a tree lists every regular file with its size and inode, the directories
    /// the PFS side needs (parents first), and leaves symlinks out, saying so.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stage_out_plans_the_tree_it_finds() {
        let fx = Fixture::new("out-tree").await;
        let c = &fx.client;
        c.mkdir_all("/out/sub", 0o755).await.unwrap();
        let small = c.create("/out/a.h5", 0o600).await.unwrap();
        small.pwrite(0, b"ten bytes!").await.unwrap();
        small.close().await.unwrap();
        let large = c.create("/out/sub/b.h5", 0o644).await.unwrap();
        large.pwrite(0, &vec![7u8; 3 << 20]).await.unwrap();
        large.close().await.unwrap();
        c.symlink("a.h5", "/out/latest").await.unwrap();

        let plan = make(c, &fx.spec(StageDirection::Out, StageKind::Directory, "/out", &fx.pfs("out"))).await.unwrap();
        let mut files: Vec<(String, String, u64, u32)> =
            plan.files.iter().map(|f| (f.bb_path.clone(), f.pfs_path.clone(), f.size, f.mode)).collect();
        files.sort();
        assert_eq!(
            files,
            vec![
                ("/out/a.h5".to_string(), fx.pfs("out/a.h5"), 10, 0o600),
                ("/out/sub/b.h5".to_string(), fx.pfs("out/sub/b.h5"), 3 << 20, 0o644),
            ]
        );
        assert!(plan.files.iter().all(|f| f.ino.is_some()), "a stage-out copies by inode");
        assert_eq!(plan.dirs, vec![fx.pfs("out"), fx.pfs("out/sub")]);
        assert_eq!(plan.skipped, vec!["/out/latest".to_string()]);
        fx.stop().await;
    }

    /// What cannot be planned fails with the code a caller turns into an errno, and a message
    /// that names the path.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn planning_failures_name_the_path_and_keep_their_code() {
        let fx = Fixture::new("failures").await;
        let c = &fx.client;
        let missing = make(c, &fx.spec(StageDirection::In, StageKind::File, "/in/x", &fx.pfs("nope.h5"))).await.unwrap_err();
        assert_eq!(missing.code, ErrorCode::NotFound);
        assert!(missing.detail.contains("nope.h5"), "{missing:?}");

        c.mkdir_all("/dir", 0o755).await.unwrap();
        let not_a_file = make(c, &fx.spec(StageDirection::Out, StageKind::File, "/dir", &fx.pfs("dir"))).await.unwrap_err();
        assert_eq!(not_a_file.code, ErrorCode::Invalid);

        let list = fx.pfs("list.txt");
        std::fs::write(&list, format!("# inputs\n{} in/a\nonly-one-field\n", fx.pfs("a"))).unwrap();
        std::fs::write(fx.pfs("a"), b"a").unwrap();
        let malformed = make(c, &fx.spec(StageDirection::In, StageKind::List, "/in", &list)).await.unwrap_err();
        assert_eq!(malformed.code, ErrorCode::Invalid);
        assert!(malformed.detail.contains("list.txt:3"), "the line is named: {malformed:?}");
        fx.stop().await;
    }

    /// A list's relative destinations are inside the stage's burst-buffer directory; a tree on
    /// the PFS is walked in name order, its directories before their files' copies.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stage_in_plans_lists_and_trees() {
        let fx = Fixture::new("in").await;
        std::fs::create_dir_all(fx.pfs("tree/b")).unwrap();
        std::fs::write(fx.pfs("tree/a.dat"), vec![1u8; 5]).unwrap();
        std::fs::write(fx.pfs("tree/b/c.dat"), vec![2u8; 7]).unwrap();
        let plan = make(&fx.client, &fx.spec(StageDirection::In, StageKind::Directory, "/inputs", &fx.pfs("tree"))).await.unwrap();
        let files: Vec<(&str, u64)> = plan.files.iter().map(|f| (f.bb_path.as_str(), f.size)).collect();
        assert_eq!(files, vec![("/inputs/a.dat", 5), ("/inputs/b/c.dat", 7)]);
        assert_eq!(plan.dirs, vec!["/inputs".to_string(), "/inputs/b".to_string()]);

        let list = fx.pfs("list.txt");
        std::fs::write(&list, format!("{} rel/a.dat\n\n{} /abs/c.dat\n", fx.pfs("tree/a.dat"), fx.pfs("tree/b/c.dat"))).unwrap();
        let plan = make(&fx.client, &fx.spec(StageDirection::In, StageKind::List, "/stage", &list)).await.unwrap();
        let files: Vec<&str> = plan.files.iter().map(|f| f.bb_path.as_str()).collect();
        assert_eq!(files, vec!["/stage/rel/a.dat", "/abs/c.dat"]);
        fx.stop().await;
    }
}
