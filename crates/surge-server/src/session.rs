//! What one connection holds on this server: its open handles, the room set aside for its
//! local writes, its watch registration, and the acknowledgements the request being answered
//! waits for. All of it is given back when the connection ends, however it ends.

use std::sync::Arc;

use surge_meta::access::Caller;
use surge_meta::poison_free::LockRecover;
use surge_meta::InoMap;
use surge_proto::Ino;

use crate::conn::SharedWriter;
use crate::watch::WatcherId;
use crate::ServerState;

pub(crate) struct Session {
    pub server: Arc<ServerState>,
    /// Where answers and notices go.
    pub writer: SharedWriter,
    /// Where the connection comes from.
    pub peer: std::net::SocketAddr,
    /// Open handles this connection registered, released if it goes away without closing them.
    pub opens: InoMap<u32>,
    /// Files this connection keeps (`Open { keep }`), let go if it goes away.
    pub kept: InoMap<u32>,
    /// Set once the connection asked to be told of changes (`Watch`).
    pub watcher: Option<WatcherId>,
    /// Its changes to attributes wait for the watchers' acknowledgements (`AwaitWatchers`).
    pub awaits_watchers: bool,
    /// Acknowledgements of the notices the current request caused, awaited before its reply.
    pub awaited: Vec<tokio::sync::oneshot::Receiver<()>>,
    /// Capacity set aside for this client's local writes, by inode (given back if it goes).
    pub reserved: InoMap<u64>,
    /// The journal record the current request's answer waits for (a close publishing sizes).
    pub durable: Option<u64>,
    /// The change of this share the current request's answer waits for the mirror to have.
    pub mirrored: Option<u64>,
    /// Whom this connection's requests are checked as (when the server checks identities).
    pub caller: Option<Caller>,
    /// This connection's number among lock holders (its locks go with it).
    pub lock_connection: u64,
    /// The write-back step being answered: journaled as applied with the step's own changes
    /// (see [`surge_meta::delegated`]).
    pub written_back: Option<WrittenBack>,
    /// A write-back is being applied: its steps are journaled together once it has been (one
    /// record and one write for the batch, not one per step).
    pub journal_at_end: bool,
}

/// Step `seq` of the log of delegation `token` of directory `dir`.
#[derive(Clone, Copy)]
pub(crate) struct WrittenBack {
    pub dir: Ino,
    pub token: Ino,
    pub seq: u64,
}

impl Session {
    pub fn new(server: Arc<ServerState>, writer: SharedWriter, peer: std::net::SocketAddr) -> Session {
        Session {
            peer,
            lock_connection: server.locks.connection(),
            server,
            writer,
            opens: InoMap::default(),
            kept: InoMap::default(),
            watcher: None,
            awaits_watchers: false,
            awaited: Vec::new(),
            reserved: InoMap::default(),
            durable: None,
            mirrored: None,
            caller: None,
            written_back: None,
            journal_at_end: false,
        }
    }

    /// From now on this connection is told of changes to what it was told about (`keeps`:
    /// see `surge_proto::admin::Watch`).
    pub fn watch(&mut self, keeps: surge_proto::admin::Keeps) {
        if self.watcher.is_none() {
            let (id, notices) = self.server.watchers.register(keeps, self.peer);
            tracing::debug!(watcher = id, peer = %self.peer, ?keeps, "a connection watches");
            self.watcher = Some(id);
            let written = self.server.watchers.written_mark(id);
            tokio::spawn(crate::conn::send_notices(notices, self.writer.clone(), written));
        }
    }
}

impl Drop for Session {
    /// The client went away (or the connection failed): what it held is given back. An open
    /// handle of a file unlinked meanwhile was the last thing keeping its data: the chunks here
    /// go; chunks on other servers stay until the instance ends (servers never talk to each
    /// other), which is logged.
    fn drop(&mut self) {
        for (ino, reserved) in std::mem::take(&mut self.reserved) {
            // What the client wrote itself before it went is kept and accounted.
            let _ = self.server.data.local_written(ino, reserved);
        }
        let kept = std::mem::take(&mut self.kept).into_iter().map(|(ino, count)| (ino, count, true));
        let opens = std::mem::take(&mut self.opens).into_iter().map(|(ino, count)| (ino, count, false));
        for (ino, count, kept) in kept.chain(opens) {
            for _ in 0..count {
                let released = {
                    let mut meta = self.server.meta.lock_or_recover();
                    let released = if kept { meta.release_kept(ino) } else { meta.commit(ino, None, None, true, false) };
                    self.server.journal_changes(&mut meta);
                    released
                };
                if let Ok(fate) = released {
                    if fate.purge {
                        tracing::info!(
                            ino = format!("{ino:#x}"),
                            "released an unlinked file of a vanished client; its chunks on other servers remain until teardown"
                        );
                        let _ = self.server.data.purge(ino);
                    }
                }
            }
        }
        if let Some(replica) = &self.server.replication.replica {
            replica.lock_or_recover().connection_ended(self.lock_connection);
        }
        if let Some(id) = self.watcher {
            for dir in self.server.delegations.connection_ended(id) {
                tracing::info!(
                    dir = format!("{dir:#x}"),
                    "a delegation's holder went away: it may reclaim the directory for a few seconds"
                );
            }
            self.server.watchers.unregister(id);
        }
        self.server.locks.drop_connection(self.lock_connection);
    }
}
