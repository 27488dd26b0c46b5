//! The coordinator's driver: runs one stage from plan to published files.
//!
//! Small files (one chunk or less) go in batches: one `Batch` of creates (or opens) to the
//! directory's home server, one `StageCopy` per server that holds first chunks, one batch of
//! commits and one of renames: a few round trips per few hundred files, and the files of a
//! tree spread over all servers because their first chunks do. Large files go window by
//! window: every server copies its chunks of the window at once, three windows in flight.
//!
//! Nothing unfinished ever carries its final name: a stage-in writes under a hidden
//! temporary name in the instance and renames when the data is complete; a stage-out writes
//! a hidden temporary file on the PFS and renames it when complete.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use surge_client::{Client, ClientOptions};
use surge_proto::ino::{self, Ino};
use surge_proto::namespace::{Commit, Create, NamespaceRequest, Open, Rename, Unlink};
use surge_proto::stage::{CopyItem, CopyOrder, CopyOutcome, StageDirection, StageSpec, StageState};
use surge_proto::{Call, Error, ErrorCode, FileKind, LinkOutcome};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use crate::plan::{self, split_path, Plan, PlannedFile};
use crate::records::{now_secs, pfs_temporary, remove_temporary, temporary_name, FileRecord, Stage};
use crate::stages::Stages;

/// Small files per batch request.
const BATCH_FILES: usize = 256;
/// Small-file batches in flight at once.
const BATCHES_IN_FLIGHT: usize = 16;
/// Large files copied at once.
const LARGE_FILES_IN_FLIGHT: usize = 2;
/// Chunks each server copies per window of a large file.
const WINDOW_CHUNKS_PER_SERVER: u64 = 16;
/// Windows of one large file in flight.
const WINDOWS_IN_FLIGHT: usize = 3;

/// A stage's or a file's outcome: why it failed is what its journal record keeps (see
/// [`describe_error`]).
type RunResult<T> = Result<T, Error>;

/// A failure found by the coordinator itself, in the words its record keeps.
fn failed(detail: impl Into<String>) -> Error {
    Error::new(ErrorCode::Io, detail)
}

/// What every task of one stage shares.
struct Ctx {
    stage: Arc<Stage>,
    client: Client,
    spec: StageSpec,
    id: u64,
}

/// Starts a stage in the background. The receiver fires once the file list is known (or the
/// stage failed before that).
pub(crate) fn start(stages: Arc<Stages>, stage: Arc<Stage>) -> oneshot::Receiver<()> {
    let (planned_tx, planned_rx) = oneshot::channel();
    tokio::spawn(run(stages, stage, planned_tx));
    planned_rx
}

async fn run(stages: Arc<Stages>, stage: Arc<Stage>, planned: oneshot::Sender<()>) {
    // The submitter waits for this: sent once the plan is recorded, or dropped at the end,
    // once a stage that failed planning is recorded as failed (not before: it asks next).
    let mut planned = Some(planned);
    {
        let mut record = stage.record.lock().unwrap();
        record.state = StageState::Running;
        record.started = Some(now_secs());
    }
    stages.save(&stage);
    let spec = stage.spec();
    let id = stage.id();
    let config = &stages.config;
    let opts = ClientOptions { node: Some(config.node), uid: spec.uid, gid: spec.gid, ..ClientOptions::default() };
    let client = config.peers.resolve().and_then(|peers| Client::from_parts(peers, config.chunk_size, config.secret, opts));
    let result = match client {
        Ok(client) => {
            let ctx = Arc::new(Ctx { stage: stage.clone(), client, spec: spec.clone(), id });
            drive(ctx, &stages, &mut planned).await
        }
        Err(e) => Err(failed(format!("cannot reach the instance's servers: {e}"))),
    };
    {
        let mut record = stage.record.lock().unwrap();
        if let Err(e) = &result {
            record.error.get_or_insert_with(|| describe_error(e));
        }
        if stage.cancelled() {
            record.finish_unfinished(StageState::Cancelled, "cancelled");
        } else if result.is_err() || record.files.iter().any(|f| f.state == StageState::Failed) {
            let first_failure = record.files.iter().find(|f| f.state == StageState::Failed).map(|f| {
                let path = if spec.direction == StageDirection::In { &f.pfs_path } else { &f.bb_path };
                format!("{path}: {}", f.error.as_deref().unwrap_or("failed"))
            });
            let why = record.error.clone().or(first_failure).unwrap_or_else(|| "failed".into());
            record.finish_unfinished(StageState::Failed, &why);
        } else {
            record.state = StageState::Done;
            record.finished = Some(now_secs());
        }
        let summary = record.summary();
        tracing::info!(
            id,
            state = summary.state.label(),
            files = summary.files_total,
            failed = summary.files_failed,
            bytes = summary.bytes_done,
            seconds = format!("{:.3}", summary.elapsed),
            error = summary.error.as_deref().unwrap_or(""),
            "{} finished",
            spec.direction.label()
        );
    }
    stages.save(&stage);
    drop(planned);
}

async fn drive(ctx: Arc<Ctx>, stages: &Stages, planned: &mut Option<oneshot::Sender<()>>) -> RunResult<()> {
    let plan = plan::make(&ctx.client, &ctx.spec).await.inspect_err(|e| {
        ctx.stage.record.lock().unwrap().error_code = Some(e.code);
    })?;
    tracing::info!(id = ctx.id, "{} planned: {}", ctx.spec.direction.label(), plan::describe(&plan));
    ctx.stage.record.lock().unwrap().files = plan
        .files
        .iter()
        .map(|f| FileRecord {
            bb_path: f.bb_path.clone(),
            pfs_path: f.pfs_path.clone(),
            size: f.size,
            done: 0,
            state: StageState::Queued,
            started: None,
            finished: None,
            error: None,
        })
        .collect();
    stages.save(&ctx.stage);
    if let Some(planned) = planned.take() {
        let _ = planned.send(());
    }
    match ctx.spec.direction {
        StageDirection::In => stage_in(ctx, plan).await,
        StageDirection::Out => stage_out(ctx, plan).await,
    }
}

fn started(ctx: &Ctx, index: usize) {
    ctx.stage.update_file(index, |f| {
        f.state = StageState::Running;
        f.started = Some(now_secs());
    });
}

fn progressed(ctx: &Ctx, index: usize, bytes: u64) {
    ctx.stage.update_file(index, |f| f.done += bytes);
}

fn finished(ctx: &Ctx, index: usize, outcome: RunResult<()>) {
    ctx.stage.update_file(index, |f| {
        f.finished = Some(now_secs());
        match outcome {
            Ok(()) => {
                f.state = StageState::Done;
                f.done = f.size;
            }
            Err(e) => {
                f.state = StageState::Failed;
                f.error = Some(describe_error(&e));
            }
        }
    });
}

/// Files grouped for batching: small ones by `key`, in batches; large ones alone.
fn partition(plan: &Plan, chunk_size: u64, key: impl Fn(&PlannedFile) -> String) -> (Vec<(String, Vec<usize>)>, Vec<usize>) {
    let mut small: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut large = Vec::new();
    for (index, file) in plan.files.iter().enumerate() {
        if file.size <= chunk_size {
            small.entry(key(file)).or_default().push(index);
        } else {
            large.push(index);
        }
    }
    let batches = small
        .into_iter()
        .flat_map(|(k, indices)| indices.chunks(BATCH_FILES).map(|c| (k.clone(), c.to_vec())).collect::<Vec<_>>())
        .collect();
    (batches, large)
}

/// Runs `work` over `items` with at most `limit` at once; stops starting new work once the
/// stage is cancelled.
async fn for_each_limited<T, F, Fut>(ctx: &Arc<Ctx>, items: Vec<T>, limit: usize, work: F)
where
    T: Send + 'static,
    F: Fn(Arc<Ctx>, T) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut running = JoinSet::new();
    for item in items {
        if ctx.stage.cancelled() {
            break;
        }
        if running.len() >= limit {
            running.join_next().await;
        }
        running.spawn(work(ctx.clone(), item));
    }
    while running.join_next().await.is_some() {}
}

/// Sends copy orders (one per server) at once and gathers the outcomes in order.
async fn send_orders(client: &Client, orders: Vec<(usize, CopyOrder)>) -> Vec<(usize, RunResult<Vec<CopyOutcome>>)> {
    let mut pending = JoinSet::new();
    for (position, (server, order)) in orders.into_iter().enumerate() {
        let client = client.clone();
        let count = order.items.len();
        pending.spawn(async move {
            let outcome = match client.call(server, order).await {
                Ok(outcomes) if outcomes.len() == count => Ok(outcomes),
                Ok(outcomes) => Err(failed(format!("server {server}: {} outcomes for a copy order of {count} items", outcomes.len()))),
                Err(e) => Err(failed(format!("server {server}: {e}"))),
            };
            (position, server, outcome)
        });
    }
    let mut results: Vec<(usize, usize, RunResult<Vec<CopyOutcome>>)> = Vec::new();
    while let Some(joined) = pending.join_next().await {
        results.push(joined.unwrap_or_else(|e| (usize::MAX, 0, Err(failed(format!("copy task failed: {e}"))))));
    }
    results.sort_by_key(|r| r.0);
    results.into_iter().map(|(_, server, outcome)| (server, outcome)).collect()
}

/// What a file's record says of a worker's failure: its message, or what its code means.
fn describe_error(e: &Error) -> String {
    if e.detail.is_empty() {
        e.code.describe().to_string()
    } else {
        e.detail.clone()
    }
}

// ------------------------------------------------------------------ stage-in

async fn stage_in(ctx: Arc<Ctx>, plan: Plan) -> RunResult<()> {
    let mut dirs = DirCache::default();
    for dir in &plan.dirs {
        dirs.ensure(&ctx.client, dir).await?;
    }
    let (batches, large) = partition(&plan, ctx.client.chunk_size(), |f| split_path(&f.bb_path).0);
    let plan = Arc::new(plan);
    let parent_of = |dirs: &DirCache, index: usize| dirs.get(&split_path(&plan.files[index].bb_path).0);
    let batches: Vec<(Ino, Vec<usize>)> = batches.into_iter().map(|(parent, files)| (dirs.get(&parent), files)).collect();
    let large: Vec<(Ino, usize)> = large.into_iter().map(|i| (parent_of(&dirs, i), i)).collect();
    let p = plan.clone();
    for_each_limited(&ctx, batches, BATCHES_IN_FLIGHT, move |ctx, (parent, files)| stage_in_batch(ctx, p.clone(), parent, files)).await;
    let p = plan.clone();
    for_each_limited(&ctx, large, LARGE_FILES_IN_FLIGHT, move |ctx, (parent, index)| stage_in_large(ctx, p.clone(), parent, index)).await;
    Ok(())
}

/// Directories of the instance by path, created on first need (`mkdir -p`).
#[derive(Default)]
struct DirCache {
    known: HashMap<String, Ino>,
}

impl DirCache {
    fn get(&self, path: &str) -> Ino {
        *self.known.get(path).expect("every parent directory is created before its files")
    }

    async fn ensure(&mut self, client: &Client, path: &str) -> RunResult<Ino> {
        let mut at = String::new();
        let mut ino = surge_proto::ROOT_INO;
        self.known.insert("/".into(), ino);
        for name in path.split('/').filter(|n| !n.is_empty()) {
            at = format!("{at}/{name}");
            if let Some(&known) = self.known.get(&at) {
                ino = known;
                continue;
            }
            let attr = match client.lookup(ino, name).await {
                Ok(attr) => attr,
                Err(e) if e.code == ErrorCode::NotFound => match client.mkdir_at(ino, name, 0o755).await {
                    Ok(attr) => attr,
                    Err(e) if e.code == ErrorCode::Exists => {
                        client.lookup(ino, name).await.map_err(|e| failed(format!("{at} (burst buffer): {e}")))?
                    }
                    Err(e) => return Err(failed(format!("{at} (burst buffer): {e}"))),
                },
                Err(e) => return Err(failed(format!("{at} (burst buffer): {e}"))),
            };
            if attr.kind != FileKind::Dir {
                return Err(failed(format!("{at} (burst buffer): not a directory")));
            }
            ino = attr.ino;
            self.known.insert(at.clone(), ino);
        }
        Ok(ino)
    }
}

/// A batch of small files of one directory.
async fn stage_in_batch(ctx: Arc<Ctx>, plan: Arc<Plan>, parent: Ino, files: Vec<usize>) {
    let client = &ctx.client;
    let home = ino::home(parent);
    let (uid, gid) = (ctx.spec.uid, ctx.spec.gid);
    for &i in &files {
        started(&ctx, i);
    }
    // A staged file keeps its PFS mode, as a copy would: no umask.
    let creates = files
        .iter()
        .map(|&i| Create {
            parent,
            name: temporary_name(ctx.id, i),
            mode: plan.files[i].mode,
            umask: 0,
            uid,
            gid,
            exclusive: true,
            open: true,
            // Staged files are striped whatever the directory's layout: stage-in has no node
            // of its own, and every server's bandwidth reads them back fastest.
            place_on: None,
        })
        .collect();
    let created = batch_each(client, home, creates, |entry| entry.ino).await;
    // Copy: one order per server holding first chunks.
    let mut orders: BTreeMap<usize, Vec<(usize, CopyItem)>> = BTreeMap::new();
    for (k, &i) in files.iter().enumerate() {
        let (Ok(ino), file) = (&created[k], &plan.files[i]) else { continue };
        if file.size > 0 {
            let item = CopyItem {
                ino: *ino,
                pfs_path: file.pfs_path.clone(),
                file_size: file.size,
                first_chunk: 0,
                end_chunk: 1,
                publish: None,
                mode: file.mode,
            };
            orders.entry(client.layout().chunk_server(*ino, 0)).or_default().push((k, item));
        }
    }
    let mut outcome: Vec<RunResult<()>> = created.iter().map(|c| c.as_ref().map(|_| ()).map_err(Clone::clone)).collect();
    apply_copy_outcomes(&ctx, &files, orders, StageDirection::In, &mut outcome).await;

    // Publish: commit every created file's size (releasing the open), then rename the
    // complete ones into place and remove the others.
    let commits = files
        .iter()
        .enumerate()
        .filter_map(|(k, &i)| {
            created[k].as_ref().ok().map(|&ino| Commit { ino, size: Some(plan.files[i].size), mtime: None, release: true, wrote: false })
        })
        .collect::<Vec<_>>();
    if !commits.is_empty() {
        if let Err(e) = client.batch(home, commits).await {
            for o in outcome.iter_mut().filter(|o| o.is_ok()) {
                *o = Err(failed(format!("burst buffer: commit: {e}")));
            }
        }
    }
    let mut renames = Vec::new();
    let mut rename_of = Vec::new();
    for (k, &i) in files.iter().enumerate() {
        if outcome[k].is_ok() && !ctx.stage.cancelled() {
            let (_, name) = split_path(&plan.files[i].bb_path);
            renames.push(Rename {
                src_parent: parent,
                src_name: temporary_name(ctx.id, i),
                dst_parent: parent,
                dst_name: name.to_string(),
                noreplace: false,
                retired_target: None,
            });
            rename_of.push(k);
        } else if outcome[k].is_ok() {
            outcome[k] = Err(failed("cancelled"));
        }
    }
    if !renames.is_empty() {
        match client.batch(home, renames).await {
            Ok(replies) => {
                for (reply, &k) in replies.into_iter().zip(&rename_of) {
                    match reply {
                        Ok(LinkOutcome { replaced: Some(old), .. }) => {
                            if let Err(e) = client.finish_unlinked(&old).await {
                                tracing::warn!("stage-in replaced a file whose old data could not be purged: {e}");
                            }
                        }
                        Ok(_) => {}
                        Err(e) => outcome[k] = Err(failed(format!("burst buffer: rename into place: {e}"))),
                    }
                }
            }
            Err(e) => {
                for &k in &rename_of {
                    outcome[k] = Err(failed(format!("burst buffer: rename into place: {e}")));
                }
            }
        }
    }
    let unlinks: Vec<Unlink> = files
        .iter()
        .enumerate()
        .filter(|(k, _)| created[*k].is_ok() && outcome[*k].is_err())
        .map(|(_, &i)| Unlink { parent, name: temporary_name(ctx.id, i) })
        .collect();
    remove_bb_temporaries(client, home, unlinks).await;
    for (&i, outcome) in files.iter().zip(outcome) {
        finished(&ctx, i, outcome);
    }
}

/// Sends a batch and takes what `pick` wants from each reply: one outcome per call (all failed
/// alike when the batch itself could not be sent).
async fn batch_each<C: Call + Into<NamespaceRequest>, T>(
    client: &Client,
    server: usize,
    calls: Vec<C>,
    pick: impl Fn(C::Reply) -> T,
) -> Vec<RunResult<T>> {
    let count = calls.len();
    match client.batch(server, calls).await {
        Ok(replies) => replies.into_iter().map(|reply| reply.map(&pick).map_err(|e| failed(format!("burst buffer: {e}")))).collect(),
        Err(e) => (0..count).map(|_| Err(failed(format!("burst buffer: {e}")))).collect(),
    }
}

/// Removes temporary files of a stage-in that will not be published, with their data.
async fn remove_bb_temporaries(client: &Client, home: usize, unlinks: Vec<Unlink>) {
    if unlinks.is_empty() {
        return;
    }
    if let Ok(replies) = client.batch(home, unlinks).await {
        for unlinked in replies.into_iter().flatten() {
            let _ = client.finish_unlinked(&unlinked).await;
        }
    }
}

/// Sends per-server orders of a batch and records each file's outcome and bytes.
async fn apply_copy_outcomes(
    ctx: &Ctx,
    files: &[usize],
    orders: BTreeMap<usize, Vec<(usize, CopyItem)>>,
    direction: StageDirection,
    outcome: &mut [RunResult<()>],
) {
    let mut positions = Vec::new();
    let mut requests = Vec::new();
    for (server, items) in orders {
        positions.push(items.iter().map(|(k, _)| *k).collect::<Vec<_>>());
        let order = CopyOrder {
            direction,
            chunk_size: ctx.client.chunk_size(),
            verify: ctx.spec.verify,
            items: items.into_iter().map(|(_, item)| item).collect(),
            uid: ctx.spec.uid,
            gid: ctx.spec.gid,
        };
        requests.push((server, order));
    }
    for ((_, result), ks) in send_orders(&ctx.client, requests).await.into_iter().zip(positions) {
        match result {
            Ok(outcomes) => {
                for (copied, k) in outcomes.into_iter().zip(ks) {
                    match copied {
                        Ok(bytes) => progressed(ctx, files[k], bytes),
                        Err(e) => outcome[k] = Err(e),
                    }
                }
            }
            Err(e) => {
                for k in ks {
                    outcome[k] = Err(e.clone());
                }
            }
        }
    }
}

/// A file larger than a chunk: created under a temporary name, copied window by window by
/// all servers at once, committed, renamed.
async fn stage_in_large(ctx: Arc<Ctx>, plan: Arc<Plan>, parent: Ino, index: usize) {
    let file = &plan.files[index];
    let client = &ctx.client;
    started(&ctx, index);
    let temp = temporary_name(ctx.id, index);
    let (uid, gid) = (ctx.spec.uid, ctx.spec.gid);
    let create = Create { parent, name: temp.clone(), mode: file.mode, umask: 0, uid, gid, exclusive: true, open: true, place_on: None };
    let ino = match client.call(ino::home(parent), create).await {
        Ok(entry) => entry.ino,
        Err(e) => return finished(&ctx, index, Err(failed(format!("burst buffer: {e}")))),
    };
    let mut outcome = copy_windows(&ctx, index, ino, file, StageDirection::In, None).await;
    let commit = Commit { ino, size: Some(file.size), mtime: None, release: true, wrote: false };
    if let Err(e) = client.call(ino::home(ino), commit).await {
        outcome = outcome.and(Err(failed(format!("burst buffer: commit: {e}"))));
    }
    if outcome.is_ok() && ctx.stage.cancelled() {
        outcome = Err(failed("cancelled"));
    }
    if outcome.is_ok() {
        let (_, name) = split_path(&file.bb_path);
        if let Err(e) = client.rename_at(parent, &temp, parent, name, false).await {
            outcome = Err(failed(format!("burst buffer: rename into place: {e}")));
        }
    }
    if outcome.is_err() {
        remove_bb_temporaries(client, ino::home(parent), vec![Unlink { parent, name: temp }]).await;
    }
    finished(&ctx, index, outcome);
}

/// Copies a large file window by window; every server copies its chunks of a window at once.
async fn copy_windows(
    ctx: &Arc<Ctx>,
    index: usize,
    ino: Ino,
    file: &PlannedFile,
    direction: StageDirection,
    pfs_path: Option<&str>,
) -> RunResult<()> {
    let servers = ctx.client.server_count() as u64;
    let chunks = file.size.div_ceil(ctx.client.chunk_size());
    let window = WINDOW_CHUNKS_PER_SERVER * servers;
    let mut in_flight: JoinSet<RunResult<u64>> = JoinSet::new();
    let mut first = 0;
    let mut result = Ok(());
    while first < chunks && result.is_ok() {
        if ctx.stage.cancelled() {
            result = Err(failed("cancelled"));
            break;
        }
        let end = (first + window).min(chunks);
        let item = CopyItem {
            ino,
            pfs_path: pfs_path.unwrap_or(&file.pfs_path).to_string(),
            file_size: file.size,
            first_chunk: first,
            end_chunk: end,
            publish: None,
            mode: file.mode,
        };
        let owners = ctx.client.layout().chunk_servers(ino, first..end);
        let orders = owners
            .into_iter()
            .map(|server| {
                let order = CopyOrder {
                    direction,
                    chunk_size: ctx.client.chunk_size(),
                    verify: ctx.spec.verify,
                    items: vec![item.clone()],
                    uid: ctx.spec.uid,
                    gid: ctx.spec.gid,
                };
                (server, order)
            })
            .collect::<Vec<_>>();
        let client = ctx.client.clone();
        in_flight.spawn(async move {
            let mut bytes = 0;
            for (server, outcome) in send_orders(&client, orders).await {
                match outcome?.pop() {
                    Some(Ok(n)) => bytes += n,
                    Some(Err(e)) => return Err(e),
                    None => return Err(failed(format!("server {server}: empty answer to a copy order"))),
                }
            }
            Ok(bytes)
        });
        first = end;
        while in_flight.len() >= WINDOWS_IN_FLIGHT {
            result = collect_window(ctx, index, in_flight.join_next().await);
            if result.is_err() {
                break;
            }
        }
    }
    while let Some(done) = in_flight.join_next().await {
        let r = collect_window(ctx, index, Some(done));
        result = result.and(r);
    }
    result
}

fn collect_window(ctx: &Ctx, index: usize, joined: Option<Result<RunResult<u64>, tokio::task::JoinError>>) -> RunResult<()> {
    match joined {
        Some(Ok(Ok(bytes))) => {
            progressed(ctx, index, bytes);
            Ok(())
        }
        Some(Ok(Err(e))) => Err(e),
        Some(Err(e)) => Err(failed(format!("copy task failed: {e}"))),
        None => Ok(()),
    }
}

// ------------------------------------------------------------------ stage-out

async fn stage_out(ctx: Arc<Ctx>, plan: Plan) -> RunResult<()> {
    let dirs = plan.dirs.clone();
    on_pfs(&ctx, move || {
        for dir in &dirs {
            std::fs::create_dir_all(dir).map_err(|e| failed(format!("{dir}: {e}")))?;
        }
        Ok(())
    })
    .await?;
    // Small files batch by the home server of their inode (for open and commit).
    let (batches, large) =
        partition(&plan, ctx.client.chunk_size(), |f| ino::home(f.ino.expect("stage-out files have inodes")).to_string());
    let plan = Arc::new(plan);
    let batches: Vec<Vec<usize>> = batches.into_iter().map(|(_, files)| files).collect();
    let p = plan.clone();
    for_each_limited(&ctx, batches, BATCHES_IN_FLIGHT, move |ctx, files| stage_out_batch(ctx, p.clone(), files)).await;
    let p = plan.clone();
    for_each_limited(&ctx, large, LARGE_FILES_IN_FLIGHT, move |ctx, index| stage_out_large(ctx, p.clone(), index)).await;
    Ok(())
}

/// Small files held whole by their first-chunk server: each server writes, then renames, its
/// files on the PFS itself. The files stay open in the instance meanwhile, so an unlink
/// cannot take their data away mid-copy.
async fn stage_out_batch(ctx: Arc<Ctx>, plan: Arc<Plan>, files: Vec<usize>) {
    let client = &ctx.client;
    let home = ino::home(plan.files[files[0]].ino.expect("inode"));
    for &i in &files {
        started(&ctx, i);
    }
    let opens = files.iter().map(|&i| Open { ino: plan.files[i].ino.expect("inode"), keep: false }).collect();
    let opened = batch_each(client, home, opens, |attr| attr.size).await;
    let mut outcome: Vec<RunResult<()>> = opened.iter().map(|o| o.as_ref().map(|_| ()).map_err(Clone::clone)).collect();
    let mut orders: BTreeMap<usize, Vec<(usize, CopyItem)>> = BTreeMap::new();
    let mut grown = Vec::new();
    for (k, &i) in files.iter().enumerate() {
        let Ok(size) = opened[k] else { continue };
        let file = &plan.files[i];
        let ino = file.ino.expect("inode");
        if size > ctx.client.chunk_size() {
            // It grew past one chunk since the plan: copy it the large-file way below.
            grown.push(k);
            continue;
        }
        let temp = pfs_temporary(&file.pfs_path, ctx.id, i);
        ctx.stage.update_file(i, |f| f.size = size);
        let item = CopyItem {
            ino,
            pfs_path: temp,
            file_size: size,
            first_chunk: 0,
            end_chunk: 1,
            publish: Some(file.pfs_path.clone()),
            mode: file.mode,
        };
        orders.entry(client.layout().chunk_server(ino, 0)).or_default().push((k, item));
    }
    apply_copy_outcomes(&ctx, &files, orders, StageDirection::Out, &mut outcome).await;
    for k in grown {
        let i = files[k];
        let file = &plan.files[i];
        let sized = PlannedFile { size: opened[k].clone().unwrap_or_default(), ..file.clone() };
        outcome[k] = copy_out_large(&ctx, i, &sized).await;
    }
    let releases = files
        .iter()
        .enumerate()
        .filter(|(k, _)| opened[*k].is_ok())
        .map(|(_, &i)| Commit { ino: plan.files[i].ino.expect("inode"), size: None, mtime: None, release: true, wrote: false })
        .collect::<Vec<_>>();
    if !releases.is_empty() {
        if let Err(e) = client.batch(home, releases).await {
            tracing::warn!(id = ctx.id, "stage-out could not release its opens: {e}");
        }
    }
    for (&i, outcome) in files.iter().zip(outcome) {
        finished(&ctx, i, outcome);
    }
}

async fn stage_out_large(ctx: Arc<Ctx>, plan: Arc<Plan>, index: usize) {
    let file = &plan.files[index];
    let ino = file.ino.expect("inode");
    started(&ctx, index);
    let outcome = match ctx.client.call(ino::home(ino), Open { ino, keep: false }).await {
        Ok(attr) => {
            let sized = PlannedFile { size: attr.size, ..file.clone() };
            let outcome = copy_out_large(&ctx, index, &sized).await;
            let release = Commit { ino, size: None, mtime: None, release: true, wrote: false };
            if let Err(e) = ctx.client.call(ino::home(ino), release).await {
                tracing::warn!(id = ctx.id, "stage-out could not release its open: {e}");
            }
            outcome
        }
        Err(e) => Err(failed(format!("burst buffer: {e}"))),
    };
    finished(&ctx, index, outcome);
}

/// Writes a (held open) file to a temporary PFS file sized in advance, all servers at once,
/// then checks its size and renames it into place.
async fn copy_out_large(ctx: &Arc<Ctx>, index: usize, file: &PlannedFile) -> RunResult<()> {
    let temp = pfs_temporary(&file.pfs_path, ctx.id, index);
    ctx.stage.update_file(index, |f| f.size = file.size);
    let (path, size, mode) = (temp.clone(), file.size, file.mode);
    on_pfs(ctx, move || {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&path)
            .map_err(|e| failed(format!("PFS: {path}: {e}")))?;
        f.set_len(size).map_err(|e| failed(format!("PFS: {path}: {e}")))
    })
    .await?;
    let copied = copy_windows(ctx, index, file.ino.expect("inode"), file, StageDirection::Out, Some(&temp)).await;
    let (path, final_path, cancelled) = (temp.clone(), file.pfs_path.clone(), ctx.stage.cancelled());
    let published = on_pfs(ctx, move || {
        copied?;
        if cancelled {
            return Err(failed("cancelled"));
        }
        let written = std::fs::metadata(&path).map_err(|e| failed(format!("PFS: {path}: {e}")))?.len();
        if written != size {
            return Err(failed(format!("verify: {path} holds {written} bytes, expected {size}")));
        }
        std::fs::rename(&path, &final_path).map_err(|e| failed(format!("PFS: {final_path}: {e}")))
    })
    .await;
    if published.is_err() {
        let path = std::path::PathBuf::from(&temp);
        let _ = on_pfs(ctx, move || {
            remove_temporary(&path);
            Ok(())
        })
        .await;
    }
    published
}

/// Runs `work` on the PFS, on a blocking thread, as the stage's user ([`plan::as_user`]).
async fn on_pfs<T: Send + 'static>(ctx: &Ctx, work: impl FnOnce() -> RunResult<T> + Send + 'static) -> RunResult<T> {
    let (uid, gid) = (ctx.spec.uid, ctx.spec.gid);
    tokio::task::spawn_blocking(move || plan::as_user(uid, gid, work)).await.map_err(|e| failed(format!("PFS task failed: {e}")))?
}
