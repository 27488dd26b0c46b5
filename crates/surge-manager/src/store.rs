//! The manager's durable state, in SQLite (`<state_dir>/surge.db`): instances and where their
//! servers run, jobs and their stages. Every change is one transaction, committed before the
//! request that made it is answered, so a manager killed at any point comes back knowing every
//! instance it charged and every server it asked for (WAL mode, synchronous=FULL).
//!
//! Jobs (DataWarp's sessions), instances and servers (its fragments) carry a number the store
//! gives each when it is inserted, from one counter kept in the file and never given twice:
//! what `dwstat` shows as their ids stays the same for as long as they exist, whatever else
//! comes and goes. A state file from before these numbers gets them on opening
//! ([`Store::open`] adds what the schema lacks, as it does for every column added since).

use std::path::Path;

use anyhow::{Context, Result};
use rusqlite::{params, Connection, OptionalExtension, Row};
use surge_control::manager::Direction;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS instances (
    name TEXT PRIMARY KEY,
    job INTEGER,
    persistent TEXT UNIQUE,
    pool TEXT NOT NULL,
    mode TEXT NOT NULL,
    capacity INTEGER NOT NULL,
    uid INTEGER NOT NULL,
    gid INTEGER NOT NULL,
    state TEXT NOT NULL,
    created INTEGER NOT NULL,
    secret TEXT NOT NULL,
    chunk_size INTEGER NOT NULL,
    replicas INTEGER NOT NULL DEFAULT 1,
    share_gid INTEGER,
    share_uids TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS servers (
    instance TEXT NOT NULL REFERENCES instances(name) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    node TEXT NOT NULL,
    share INTEGER NOT NULL,
    addr TEXT,
    PRIMARY KEY (instance, idx)
);
CREATE TABLE IF NOT EXISTS jobs (
    job INTEGER PRIMARY KEY,
    uid INTEGER NOT NULL,
    gid INTEGER NOT NULL,
    script TEXT NOT NULL,
    state TEXT NOT NULL,
    nodes TEXT NOT NULL,
    message TEXT,
    created INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS orphans (
    instance TEXT NOT NULL,
    node TEXT NOT NULL,
    since INTEGER NOT NULL,
    PRIMARY KEY (instance, node)
);
CREATE TABLE IF NOT EXISTS stages (
    job INTEGER NOT NULL REFERENCES jobs(job) ON DELETE CASCADE,
    direction TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    source TEXT NOT NULL,
    destination TEXT NOT NULL,
    instance TEXT NOT NULL,
    bb_path TEXT NOT NULL,
    pfs_path TEXT NOT NULL,
    stage_id INTEGER,
    state TEXT NOT NULL,
    files_done INTEGER NOT NULL DEFAULT 0,
    files_total INTEGER NOT NULL DEFAULT 0,
    bytes_done INTEGER NOT NULL DEFAULT 0,
    bytes_total INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    server INTEGER,
    PRIMARY KEY (job, direction, seq)
);
";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceRecord {
    /// The store's number for it (0 until it is inserted; see the module's note).
    pub id: u64,
    pub name: String,
    pub job: Option<u64>,
    pub persistent: Option<String>,
    pub pool: String,
    /// `striped` or `private`.
    pub mode: String,
    pub capacity: u64,
    pub uid: u32,
    pub gid: u32,
    /// `planned` (charged, no servers yet), `starting`, `ready`, `degraded` (a server missing
    /// after a restart), `stopping` (a stop that did not reach every node), `failed`.
    pub state: String,
    pub created: u64,
    pub secret: String,
    pub chunk_size: u64,
    /// Copies of each share (1 or 2, from its pool when it was made).
    pub replicas: u8,
    /// A reservation shared with a group: the group (its members' jobs may use it).
    pub share_gid: Option<u32>,
    /// A reservation shared with users: their uids.
    pub share_uids: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerRecord {
    /// The store's number for it (0 until it is inserted).
    pub id: u64,
    pub instance: String,
    pub index: usize,
    pub node: String,
    /// Bytes of the node's storage this server holds for its instance: its share of the data
    /// and, with two copies, its predecessor's mirror (the server's capacity is `share /
    /// replicas`).
    pub share: u64,
    /// Known once it runs.
    pub addr: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    /// The store's number for it, its session's id (0 until it is inserted).
    pub id: u64,
    pub job: u64,
    pub uid: u32,
    pub gid: u32,
    pub script: String,
    pub state: String,
    pub nodes: Vec<String>,
    pub message: Option<String>,
    pub created: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageRecord {
    pub job: u64,
    pub direction: Direction,
    pub seq: usize,
    /// `file`, `directory`, `list`.
    pub kind: String,
    /// As the script wrote them.
    pub source: String,
    pub destination: String,
    /// Resolved: the instance and the path inside it, and the PFS side.
    pub instance: String,
    pub bb_path: String,
    pub pfs_path: String,
    /// The coordinator's id once submitted.
    pub stage_id: Option<u64>,
    /// `waiting` (for the job's nodes), then the coordinator's states in lower case.
    pub state: String,
    pub files_done: u64,
    pub files_total: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub error: Option<String>,
    /// The server whose coordinator runs it, for a stage an application asked a private
    /// instance's server for; `None`: the instance's coordinator (server 0's).
    pub server: Option<usize>,
}

impl StageRecord {
    pub fn is_final(&self) -> bool {
        matches!(self.state.as_str(), "done" | "failed" | "cancelled")
    }
}

pub struct Store {
    db: Connection,
}

fn direction_text(direction: Direction) -> &'static str {
    match direction {
        Direction::In => "in",
        Direction::Out => "out",
    }
}

fn instance_row(row: &Row) -> rusqlite::Result<InstanceRecord> {
    Ok(InstanceRecord {
        id: row.get(13)?,
        name: row.get(0)?,
        job: row.get(1)?,
        persistent: row.get(2)?,
        pool: row.get(3)?,
        mode: row.get(4)?,
        capacity: row.get(5)?,
        uid: row.get(6)?,
        gid: row.get(7)?,
        state: row.get(8)?,
        created: row.get(9)?,
        secret: row.get(10)?,
        chunk_size: row.get(11)?,
        replicas: row.get(12)?,
        share_gid: row.get(14)?,
        share_uids: uid_list(&row.get::<_, String>(15)?),
    })
}

/// A list of uids as a column keeps it: decimal, comma-separated.
fn uid_list(text: &str) -> Vec<u32> {
    text.split(',').filter_map(|uid| uid.parse().ok()).collect()
}

fn uid_text(uids: &[u32]) -> String {
    uids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

const INSTANCE_COLUMNS: &str = "name, job, persistent, pool, mode, capacity, uid, gid, state, created, secret, chunk_size, replicas";
/// What is read of an instance: its columns, its number and whom it is shared with.
const INSTANCE_READ: &str =
    "name, job, persistent, pool, mode, capacity, uid, gid, state, created, secret, chunk_size, replicas, id, share_gid, share_uids";

fn job_row(row: &Row) -> rusqlite::Result<JobRecord> {
    let nodes: String = row.get(5)?;
    Ok(JobRecord {
        id: row.get(8)?,
        job: row.get(0)?,
        uid: row.get(1)?,
        gid: row.get(2)?,
        script: row.get(3)?,
        state: row.get(4)?,
        nodes: nodes.split(',').filter(|n| !n.is_empty()).map(str::to_string).collect(),
        message: row.get(6)?,
        created: row.get(7)?,
    })
}

const JOB_COLUMNS: &str = "job, uid, gid, script, state, nodes, message, created";
const JOB_READ: &str = "job, uid, gid, script, state, nodes, message, created, id";

fn stage_row(row: &Row) -> rusqlite::Result<StageRecord> {
    let direction: String = row.get(1)?;
    Ok(StageRecord {
        job: row.get(0)?,
        direction: if direction == "in" { Direction::In } else { Direction::Out },
        seq: row.get(2)?,
        kind: row.get(3)?,
        source: row.get(4)?,
        destination: row.get(5)?,
        instance: row.get(6)?,
        bb_path: row.get(7)?,
        pfs_path: row.get(8)?,
        stage_id: row.get(9)?,
        state: row.get(10)?,
        files_done: row.get(11)?,
        files_total: row.get(12)?,
        bytes_done: row.get(13)?,
        bytes_total: row.get(14)?,
        error: row.get(15)?,
        server: row.get(16)?,
    })
}

const STAGE_COLUMNS: &str =
    "job, direction, seq, kind, source, destination, instance, bb_path, pfs_path, stage_id, state, files_done, files_total, bytes_done, bytes_total, error, server";

impl Store {
    pub fn open(path: &Path) -> Result<Store> {
        let mut db = Connection::open(path).with_context(|| format!("open {}", path.display()))?;
        db.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;")?;
        db.execute_batch(SCHEMA).context("create the schema")?;
        add_replicas_column(&db)?;
        add_stage_server_column(&db)?;
        add_share_columns(&db)?;
        add_ids(&mut db)?;
        Ok(Store { db })
    }

    /// Runs `f` in one transaction: all its changes are durable together, or none is.
    pub fn transaction<T>(&mut self, f: impl FnOnce(&rusqlite::Transaction) -> Result<T>) -> Result<T> {
        let tx = self.db.transaction()?;
        let value = f(&tx)?;
        tx.commit()?;
        Ok(value)
    }

    pub fn instances(&self) -> Result<Vec<InstanceRecord>> {
        let mut q = self.db.prepare(&format!("SELECT {INSTANCE_READ} FROM instances ORDER BY created, name"))?;
        let rows = q.query_map([], instance_row)?.collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    pub fn instance(&self, name: &str) -> Result<Option<InstanceRecord>> {
        Ok(self.db.query_row(&format!("SELECT {INSTANCE_READ} FROM instances WHERE name = ?1"), [name], instance_row).optional()?)
    }

    pub fn persistent(&self, name: &str) -> Result<Option<InstanceRecord>> {
        Ok(self.db.query_row(&format!("SELECT {INSTANCE_READ} FROM instances WHERE persistent = ?1"), [name], instance_row).optional()?)
    }

    pub fn job_instances(&self, job: u64) -> Result<Vec<InstanceRecord>> {
        let mut q = self.db.prepare(&format!("SELECT {INSTANCE_READ} FROM instances WHERE job = ?1 ORDER BY name"))?;
        let rows = q.query_map([job], instance_row)?.collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    pub fn set_instance_state(&self, name: &str, state: &str) -> Result<()> {
        self.db.execute("UPDATE instances SET state = ?2 WHERE name = ?1", params![name, state])?;
        Ok(())
    }

    pub fn servers(&self, instance: &str) -> Result<Vec<ServerRecord>> {
        let mut q = self.db.prepare("SELECT instance, idx, node, share, addr, id FROM servers WHERE instance = ?1 ORDER BY idx")?;
        let rows = q
            .query_map([instance], |row| {
                Ok(ServerRecord {
                    id: row.get(5)?,
                    instance: row.get(0)?,
                    index: row.get(1)?,
                    node: row.get(2)?,
                    share: row.get(3)?,
                    addr: row.get(4)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Bytes of each node's storage held by servers of any instance, by node name.
    pub fn node_use(&self) -> Result<std::collections::HashMap<String, u64>> {
        let mut q = self.db.prepare("SELECT node, SUM(share) FROM servers GROUP BY node")?;
        let rows = q.query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, u64>(1)?)))?.collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    pub fn set_server_addr(&self, instance: &str, index: usize, addr: &str) -> Result<()> {
        self.db.execute("UPDATE servers SET addr = ?3 WHERE instance = ?1 AND idx = ?2", params![instance, index, addr])?;
        Ok(())
    }

    pub fn job(&self, job: u64) -> Result<Option<JobRecord>> {
        Ok(self.db.query_row(&format!("SELECT {JOB_READ} FROM jobs WHERE job = ?1"), [job], job_row).optional()?)
    }

    pub fn jobs(&self) -> Result<Vec<JobRecord>> {
        let mut q = self.db.prepare(&format!("SELECT {JOB_READ} FROM jobs ORDER BY job"))?;
        let rows = q.query_map([], job_row)?.collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    pub fn set_job_state(&self, job: u64, state: &str, message: Option<&str>) -> Result<()> {
        self.db.execute("UPDATE jobs SET state = ?2, message = ?3 WHERE job = ?1", params![job, state, message])?;
        Ok(())
    }

    pub fn set_job_nodes(&self, job: u64, nodes: &[String]) -> Result<()> {
        self.db.execute("UPDATE jobs SET nodes = ?2 WHERE job = ?1", params![job, nodes.join(",")])?;
        Ok(())
    }

    pub fn stages(&self, job: Option<u64>, direction: Option<Direction>) -> Result<Vec<StageRecord>> {
        let mut q = self.db.prepare(&format!(
            "SELECT {STAGE_COLUMNS} FROM stages WHERE (?1 IS NULL OR job = ?1) AND (?2 IS NULL OR direction = ?2) ORDER BY job, direction, seq"
        ))?;
        let rows = q.query_map(params![job, direction.map(direction_text)], stage_row)?.collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Servers owed a stop on nodes that were unreachable: (instance, node).
    pub fn orphans(&self) -> Result<Vec<(String, String)>> {
        let mut q = self.db.prepare("SELECT instance, node FROM orphans ORDER BY since, instance, node")?;
        let rows = q.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?.collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    pub fn remove_orphan(&self, instance: &str, node: &str) -> Result<()> {
        self.db.execute("DELETE FROM orphans WHERE instance = ?1 AND node = ?2", params![instance, node])?;
        Ok(())
    }

    pub fn update_stage(&self, s: &StageRecord) -> Result<()> {
        self.db.execute(
            "UPDATE stages SET stage_id = ?4, state = ?5, files_done = ?6, files_total = ?7, bytes_done = ?8, bytes_total = ?9, error = ?10
             WHERE job = ?1 AND direction = ?2 AND seq = ?3",
            params![
                s.job,
                direction_text(s.direction),
                s.seq,
                s.stage_id,
                s.state,
                s.files_done,
                s.files_total,
                s.bytes_done,
                s.bytes_total,
                s.error
            ],
        )?;
        Ok(())
    }
}

fn has_column(db: &Connection, table: &str, column: &str) -> Result<bool> {
    Ok(db.query_row("SELECT COUNT(*) > 0 FROM pragma_table_info(?1) WHERE name = ?2", [table, column], |row| row.get(0))?)
}

/// A state file from before instances could keep two copies gets the column, every instance
/// in it one copy.
fn add_replicas_column(db: &Connection) -> Result<()> {
    if !has_column(db, "instances", "replicas")? {
        db.execute_batch("ALTER TABLE instances ADD COLUMN replicas INTEGER NOT NULL DEFAULT 1").context("add the replicas column")?;
    }
    Ok(())
}

/// A state file from before the manager followed the stages an application asked for: every
/// stage in it is its instance's coordinator's (no server named).
fn add_stage_server_column(db: &Connection) -> Result<()> {
    if !has_column(db, "stages", "server")? {
        db.execute_batch("ALTER TABLE stages ADD COLUMN server INTEGER").context("add the stages' server column")?;
    }
    Ok(())
}

/// A state file from before reservations could be shared: every instance in it its owner's
/// alone.
fn add_share_columns(db: &Connection) -> Result<()> {
    if !has_column(db, "instances", "share_gid")? {
        db.execute_batch(
            "ALTER TABLE instances ADD COLUMN share_gid INTEGER; ALTER TABLE instances ADD COLUMN share_uids TEXT NOT NULL DEFAULT ''",
        )
        .context("add the instances' share columns")?;
    }
    Ok(())
}

/// The tables whose rows are numbered, each with the order in which rows from before the
/// numbers get theirs (the order they were made in).
const NUMBERED: [(&str, &str); 3] = [("jobs", "created, job"), ("instances", "created, name"), ("servers", "instance, idx")];

/// A state file from before rows were numbered gets the counter and the `id` columns, and its
/// rows their numbers, once (all in one transaction: a manager killed half-way finds none of it).
fn add_ids(db: &mut Connection) -> Result<()> {
    let tx = db.transaction()?;
    tx.execute_batch("CREATE TABLE IF NOT EXISTS counter (next INTEGER NOT NULL)")?;
    if tx.query_row("SELECT COUNT(*) FROM counter", [], |row| row.get::<_, u64>(0))? == 0 {
        tx.execute("INSERT INTO counter (next) VALUES (1)", [])?;
    }
    for (table, order) in NUMBERED {
        if !has_column(&tx, table, "id")? {
            tx.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN id INTEGER")).with_context(|| format!("add {table}.id"))?;
        }
        let unnumbered: Vec<i64> = tx
            .prepare(&format!("SELECT rowid FROM {table} WHERE id IS NULL ORDER BY {order}"))?
            .query_map([], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        for rowid in unnumbered {
            let id = next_id(&tx)?;
            tx.execute(&format!("UPDATE {table} SET id = ?2 WHERE rowid = ?1"), params![rowid, id])?;
        }
        tx.execute_batch(&format!("CREATE UNIQUE INDEX IF NOT EXISTS {table}_id ON {table} (id)"))?;
    }
    tx.commit()?;
    Ok(())
}

/// The next number of the counter, never given before.
fn next_id(tx: &rusqlite::Transaction) -> Result<u64> {
    Ok(tx.query_row("UPDATE counter SET next = next + 1 RETURNING next - 1", [], |row| row.get(0))?)
}

/// Inserts an instance, numbered, and its servers; the record's `id` is not read.
pub fn insert_instance(tx: &rusqlite::Transaction, i: &InstanceRecord, servers: &[ServerRecord]) -> Result<()> {
    let id = next_id(tx)?;
    tx.execute(
        &format!(
            "INSERT INTO instances ({INSTANCE_COLUMNS}, id, share_gid, share_uids) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
        ),
        params![
            i.name,
            i.job,
            i.persistent,
            i.pool,
            i.mode,
            i.capacity,
            i.uid,
            i.gid,
            i.state,
            i.created,
            i.secret,
            i.chunk_size,
            i.replicas,
            id,
            i.share_gid,
            uid_text(&i.share_uids)
        ],
    )?;
    insert_servers(tx, servers)
}

/// Replaces an instance's planned servers (an on-demand instance once the job's nodes are known).
pub fn replace_servers(tx: &rusqlite::Transaction, instance: &str, servers: &[ServerRecord]) -> Result<()> {
    tx.execute("DELETE FROM servers WHERE instance = ?1", [instance])?;
    insert_servers(tx, servers)
}

/// Inserts servers, each numbered (their records' `id` is not read).
fn insert_servers(tx: &rusqlite::Transaction, servers: &[ServerRecord]) -> Result<()> {
    for s in servers {
        let id = next_id(tx)?;
        tx.execute(
            "INSERT INTO servers (instance, idx, node, share, addr, id) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![s.instance, s.index, s.node, s.share, s.addr, id],
        )?;
    }
    Ok(())
}

/// A server of a removed instance on a node that could not be reached: its agent is asked to
/// stop it (and remove its storage) once the node answers again.
pub fn insert_orphan(tx: &rusqlite::Transaction, instance: &str, node: &str, since: u64) -> Result<()> {
    tx.execute("INSERT OR IGNORE INTO orphans (instance, node, since) VALUES (?1, ?2, ?3)", params![instance, node, since])?;
    Ok(())
}

pub fn delete_instance(tx: &rusqlite::Transaction, name: &str) -> Result<()> {
    tx.execute("DELETE FROM instances WHERE name = ?1", [name])?;
    Ok(())
}

/// Inserts a job, numbered (the record's `id` is not read).
pub fn insert_job(tx: &rusqlite::Transaction, j: &JobRecord) -> Result<()> {
    let id = next_id(tx)?;
    tx.execute(
        &format!("INSERT INTO jobs ({JOB_COLUMNS}, id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"),
        params![j.job, j.uid, j.gid, j.script, j.state, j.nodes.join(","), j.message, j.created, id],
    )?;
    Ok(())
}

pub fn delete_job(tx: &rusqlite::Transaction, job: u64) -> Result<()> {
    tx.execute("DELETE FROM jobs WHERE job = ?1", [job])?;
    Ok(())
}

pub fn insert_stage(tx: &rusqlite::Transaction, s: &StageRecord) -> Result<()> {
    tx.execute(
        &format!(
            "INSERT INTO stages ({STAGE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"
        ),
        params![
            s.job,
            direction_text(s.direction),
            s.seq,
            s.kind,
            s.source,
            s.destination,
            s.instance,
            s.bb_path,
            s.pfs_path,
            s.stage_id,
            s.state,
            s.files_done,
            s.files_total,
            s.bytes_done,
            s.bytes_total,
            s.error,
            s.server
        ],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(name: &str, job: Option<u64>) -> InstanceRecord {
        InstanceRecord {
            id: 0,
            name: name.into(),
            job,
            persistent: None,
            pool: "bb".into(),
            mode: "striped".into(),
            capacity: 2 << 30,
            uid: 1000,
            gid: 1000,
            state: "ready".into(),
            created: 1,
            secret: "00".repeat(32),
            chunk_size: 1 << 20,
            replicas: 1,
            share_gid: None,
            share_uids: Vec::new(),
        }
    }

    /// An empty directory of the test's own, and the state file's path in it.
    fn scratch(test: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("surge-store-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("surge.db");
        (dir, path)
    }

    #[test]
    fn a_state_file_from_before_replicas_gets_one_copy_for_each_instance() {
        let (dir, path) = scratch("old");
        {
            // The instances table as it was, with one instance in it.
            let old = SCHEMA.replace(
                ",\n    replicas INTEGER NOT NULL DEFAULT 1,\n    share_gid INTEGER,\n    share_uids TEXT NOT NULL DEFAULT ''",
                "",
            );
            assert_ne!(old, SCHEMA, "the old schema lacks the column");
            let db = Connection::open(&path).unwrap();
            db.execute_batch(&old).unwrap();
            let columns = INSTANCE_COLUMNS.trim_end_matches(", replicas");
            db.execute(
                &format!(
                    "INSERT INTO instances ({columns}) VALUES ('old', NULL, NULL, 'bb', 'striped', 1, 1000, 1000, 'ready', 1, '', 1048576)"
                ),
                [],
            )
            .unwrap();
        }
        let mut store = Store::open(&path).unwrap();
        assert_eq!(store.instance("old").unwrap().unwrap().replicas, 1);
        let two = InstanceRecord { replicas: 2, ..instance("new", None) };
        store.transaction(|tx| insert_instance(tx, &two, &[])).unwrap();
        drop(store);
        // Opened again: the column is not added twice, and what was written stays.
        let store = Store::open(&path).unwrap();
        assert_eq!(store.instance("new").unwrap().unwrap().replicas, 2);
        let old = store.instance("old").unwrap().unwrap();
        assert_eq!((old.share_gid, old.share_uids.len()), (None, 0), "what was made before sharing is its owner's alone");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn whom_a_reservation_is_shared_with_is_kept() {
        let (dir, path) = scratch("shared");
        {
            let mut store = Store::open(&path).unwrap();
            let shared = InstanceRecord { share_gid: Some(4000), share_uids: vec![1002, 1003], ..instance("ps-team", None) };
            store.transaction(|tx| insert_instance(tx, &shared, &[])).unwrap();
        }
        let store = Store::open(&path).unwrap();
        let found = store.instance("ps-team").unwrap().unwrap();
        assert_eq!((found.share_gid, found.share_uids), (Some(4000), vec![1002, 1003]));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn what_is_committed_is_there_after_reopening_and_servers_go_with_their_instance() {
        let (dir, path) = scratch("committed");
        {
            let mut store = Store::open(&path).unwrap();
            store
                .transaction(|tx| {
                    let servers = [0, 1].map(|i| ServerRecord {
                        id: 0,
                        instance: "job-1".into(),
                        index: i,
                        node: format!("bb{i}"),
                        share: 1 << 30,
                        addr: None,
                    });
                    insert_instance(tx, &instance("job-1", Some(1)), &servers)?;
                    insert_instance(tx, &instance("job-2", Some(2)), &[])
                })
                .unwrap();
            // A transaction that fails half-way leaves nothing.
            let failed = store.transaction(|tx| {
                delete_instance(tx, "job-2")?;
                insert_instance(tx, &instance("job-1", Some(1)), &[])
            });
            assert!(failed.is_err());
        }
        let mut store = Store::open(&path).unwrap();
        assert_eq!(store.instances().unwrap().len(), 2);
        assert_eq!(store.node_use().unwrap().get("bb1"), Some(&(1 << 30)));
        store.transaction(|tx| delete_instance(tx, "job-1")).unwrap();
        assert!(store.servers("job-1").unwrap().is_empty(), "servers deleted with their instance");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn job(job: u64, created: u64) -> JobRecord {
        JobRecord {
            id: 0,
            job,
            uid: 1000,
            gid: 1000,
            script: String::new(),
            state: "setup".into(),
            nodes: Vec::new(),
            message: None,
            created,
        }
    }

    fn server(instance: &str, index: usize) -> ServerRecord {
        ServerRecord { id: 0, instance: instance.into(), index, node: format!("bb{index}"), share: 1 << 30, addr: None }
    }

    #[test]
    fn rows_keep_their_numbers_and_a_number_is_never_given_twice() {
        let (dir, path) = scratch("numbers");
        {
            // A state file from before the numbers: two jobs, their instances and servers,
            // made in the order 7, then 5.
            let db = Connection::open(&path).unwrap();
            db.execute_batch(SCHEMA).unwrap();
            for (job, created) in [(7u64, 10u64), (5, 20)] {
                db.execute(
                    &format!("INSERT INTO jobs ({JOB_COLUMNS}) VALUES (?1, 1000, 1000, '', 'running', '', NULL, ?2)"),
                    params![job, created],
                )
                .unwrap();
                db.execute(
                    &format!(
                        "INSERT INTO instances ({INSTANCE_COLUMNS}) VALUES ('job-' || ?1, ?1, NULL, 'bb', 'striped', 1, 1000, 1000, 'ready', ?2, '', 1048576, 1)"
                    ),
                    params![job, created],
                )
                .unwrap();
                db.execute("INSERT INTO servers (instance, idx, node, share) VALUES ('job-' || ?1, 0, 'bb1', 1)", [job]).unwrap();
            }
        }
        let mut store = Store::open(&path).unwrap();
        let ids = |store: &Store| -> Vec<(String, u64)> {
            let mut ids: Vec<(String, u64)> = store.jobs().unwrap().iter().map(|j| (format!("job {}", j.job), j.id)).collect();
            for i in store.instances().unwrap() {
                ids.extend(store.servers(&i.name).unwrap().iter().map(|s| (format!("server of {}", s.instance), s.id)));
                ids.push((i.name, i.id));
            }
            ids.sort();
            ids
        };
        let before = ids(&store);
        let numbers: std::collections::HashSet<u64> = before.iter().map(|(_, id)| *id).collect();
        assert_eq!(numbers.len(), 6, "every row numbered, no number twice: {before:?}");
        assert!(!numbers.contains(&0), "{before:?}");
        // Numbered in the order they were made: job 7 before job 5.
        let (seven, five) = (store.job(7).unwrap().unwrap().id, store.job(5).unwrap().unwrap().id);
        assert!(seven < five, "job 7 ({seven}) was made first, job 5 ({five}) after");

        // Another job comes and goes: nobody else's number changes, and its numbers are not
        // given again.
        store
            .transaction(|tx| {
                insert_job(tx, &job(9, 30))?;
                insert_instance(tx, &instance("job-9", Some(9)), &[server("job-9", 0), server("job-9", 1)])
            })
            .unwrap();
        let gone = store.instance("job-9").unwrap().unwrap().id;
        assert!(gone > *numbers.iter().max().unwrap());
        store.transaction(|tx| delete_job(tx, 9).and_then(|()| delete_instance(tx, "job-9"))).unwrap();
        assert_eq!(ids(&store), before, "numbers unchanged by another job's coming and going");
        store.transaction(|tx| insert_instance(tx, &instance("ps-x", None), &[])).unwrap();
        assert!(store.instance("ps-x").unwrap().unwrap().id > gone + 2, "numbers are never given twice");
        drop(store);

        // Opened again: the same numbers, none given twice.
        let store = Store::open(&path).unwrap();
        let again = ids(&store);
        assert_eq!(again.iter().filter(|(name, _)| name != "ps-x").cloned().collect::<Vec<_>>(), before);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
