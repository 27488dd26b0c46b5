//! A directory held alone under a delegation (docs/delegation.md, step 2): creates and
//! unlinks of the files made in it are answered here at once and logged, and the log is
//! written back to the directory's home later, in order, in batches.
//!
//! The home grants a delegation ([`Client::delegate`]) only where it would make no check of
//! its own per step (see `surge_proto::namespace::Delegate`), and sets inode numbers aside
//! for the creates, so what this module answers is what the home will hold once the log is
//! written back. A caller must write back ([`DelegatedDir::write_back`]) before anything
//! makes a step visible elsewhere or names a file made here to the home (a handle's flush of
//! written data, an fsync, a request about such a file), and give the directory up
//! ([`DelegatedDir::give_back`]) when the home recalls it (`Notice::Recall`). Everything this
//! module does not answer (links, renames, names it did not make) takes the ordinary path,
//! after a write-back.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use surge_proto::namespace::{CreateAs, Delegate, GiveBack, NamespaceRequest, Unlink};
use surge_proto::{ino, Attr, ErrorCode, FileKind, Ino, Timestamp};

use crate::conn::Answer;
use crate::error::{Error, Result};
use crate::Client;

/// A directory delegated to this client.
pub struct DelegatedDir {
    client: Client,
    dir: Ino,
    state: Mutex<Held>,
    /// One write-back at a time, so that batches reach the home in the log's order.
    writing_back: tokio::sync::Mutex<()>,
}

struct Held {
    /// The directory's entries as the home will hold them once the log is written back.
    names: HashMap<String, Entry>,
    /// Numbers set aside for creates, not used yet.
    free: VecDeque<Ino>,
    /// Steps answered here, not yet written back, in order.
    log: Vec<NamespaceRequest>,
    /// Given back (or refused a write-back): nothing more is answered here.
    ended: bool,
}

#[derive(Clone, Copy)]
struct Entry {
    ino: Ino,
    kind: FileKind,
    /// Made under this delegation: a file of one name, homed here, which an unlink may remove
    /// without asking the home anything.
    made_here: bool,
}

impl Client {
    /// Asks for directory `dir`'s delegation with `count` numbers for creates. The client
    /// must watch ([`Client::watch`]): the home's recall comes as a notice. None when the home
    /// refuses (the directory is another's, shared, or needs the home's checks).
    pub async fn delegate(&self, dir: Ino, count: u32) -> Result<Option<DelegatedDir>> {
        let place_on = self.near_server().map(|server| server as u32);
        let granted = match self.call_home(dir, Delegate { dir, count, place_on }).await {
            Ok(granted) => granted,
            Err(e) if e.code == ErrorCode::NotPermitted => return Ok(None),
            Err(e) => return Err(e),
        };
        // Nobody else may change the directory now: its listing stays exact.
        let names = self
            .readdir_ino(dir)
            .await?
            .into_iter()
            .map(|entry| (entry.name, Entry { ino: entry.ino, kind: entry.kind, made_here: false }))
            .collect();
        let held = Held { names, free: granted.inos.into(), log: Vec::new(), ended: false };
        Ok(Some(DelegatedDir { client: self.clone(), dir, state: Mutex::new(held), writing_back: Default::default() }))
    }
}

impl DelegatedDir {
    pub fn dir(&self) -> Ino {
        self.dir
    }

    /// What `name` names in the directory, as far as this holder knows (None: nothing).
    pub fn lookup(&self, name: &str) -> Option<(Ino, FileKind)> {
        self.state.lock().unwrap().names.get(name).map(|entry| (entry.ino, entry.kind))
    }

    /// Whether the delegation still answers here (not given back).
    pub fn is_held(&self) -> bool {
        !self.state.lock().unwrap().ended
    }

    /// Steps answered here and not written back yet.
    pub fn pending(&self) -> usize {
        self.state.lock().unwrap().log.len()
    }

    /// Whether `ino` is a file made under this delegation (the home may not know it yet).
    pub fn made_here(&self, ino: Ino) -> bool {
        self.state.lock().unwrap().names.values().any(|entry| entry.made_here && entry.ino == ino)
    }

    /// Creates file `name` (exclusively) with `mode` less `umask`, owned by `uid:gid`, at once:
    /// its attributes as the home will hold them. None when it cannot be answered here: the
    /// delegation ended, or its numbers are used up (write back, give it up, create as usual).
    pub fn create(&self, name: &str, mode: u32, umask: u32, uid: u32, gid: u32) -> Result<Option<Attr>> {
        surge_proto::check_name(name)?;
        let mut held = self.state.lock().unwrap();
        if held.ended {
            return Ok(None);
        }
        if held.names.contains_key(name) {
            return Err(Error::new(ErrorCode::Exists, format!("'{name}' exists")));
        }
        let Some(ino) = held.free.pop_front() else { return Ok(None) };
        held.names.insert(name.to_string(), Entry { ino, kind: FileKind::File, made_here: true });
        held.log.push(CreateAs { parent: self.dir, name: name.to_string(), ino, mode, umask, uid, gid, open: false }.into());
        let now = Timestamp::now();
        Ok(Some(Attr {
            ino,
            kind: FileKind::File,
            mode: mode & !umask & 0o7777,
            uid,
            gid,
            size: 0,
            nlink: 1,
            atime: now,
            mtime: now,
            ctime: now,
            blocks: Some(0),
        }))
    }

    /// Unlinks `name` at once when it is a file made under this delegation (true); false when
    /// it must take the ordinary path (after a write-back): a name the holder did not make.
    pub fn unlink(&self, name: &str) -> Result<bool> {
        let mut held = self.state.lock().unwrap();
        if held.ended {
            return Ok(false);
        }
        match held.names.get(name) {
            None => Err(Error::new(ErrorCode::NotFound, format!("no entry '{name}'"))),
            Some(entry) if entry.made_here => {
                held.names.remove(name);
                held.log.push(Unlink { parent: self.dir, name: name.to_string() }.into());
                Ok(true)
            }
            Some(_) => Ok(false),
        }
    }

    /// Writes the log back to the directory's home, in order. A step the home refuses (the
    /// delegation was taken back, or a bug) ends the delegation here: its error is returned
    /// once every other step was tried.
    pub async fn write_back(&self) -> Result<()> {
        let _in_order = self.writing_back.lock().await;
        let log = std::mem::take(&mut self.state.lock().unwrap().log);
        if log.is_empty() {
            return Ok(());
        }
        let unlinks: Vec<bool> = log.iter().map(|step| matches!(step, NamespaceRequest::Unlink(_))).collect();
        let outcomes = self.client.batch_steps(ino::home(self.dir), log).await?;
        let mut first_failure = None;
        for (unlink, outcome) in unlinks.into_iter().zip(outcomes) {
            let outcome = match outcome {
                Ok(message) if unlink => self.finish_unlink(message).await,
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = outcome {
                first_failure.get_or_insert(e);
            }
        }
        match first_failure {
            None => Ok(()),
            Some(e) => {
                self.state.lock().unwrap().ended = true;
                tracing::warn!(dir = format!("{:#x}", self.dir), "a delegation's write-back was refused: {e}");
                Err(e)
            }
        }
    }

    /// Purges what an unlink written back left without a name.
    async fn finish_unlink(&self, message: Vec<u8>) -> Result<()> {
        let unlinked = Answer { message, payload: Vec::new() }.reply::<Unlink>()?;
        self.client.finish_unlinked(&unlinked).await
    }

    /// Writes the log back and gives the directory up (what a recall asks). Nothing is
    /// answered here afterwards.
    pub async fn give_back(&self) -> Result<()> {
        let written = self.write_back().await;
        self.state.lock().unwrap().ended = true;
        let given = self.client.call_home(self.dir, GiveBack { dir: self.dir }).await;
        written.and(given)
    }
}
