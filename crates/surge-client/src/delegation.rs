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

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use surge_proto::namespace::{Commit, CreateAs, Delegate, GiveBack, NamespaceRequest, Unlink};
use surge_proto::{ino, Attr, ErrorCode, FileKind, Ino, Timestamp};

use crate::conn::Answer;
use crate::error::{Error, Result};
use crate::{Client, File};

/// A directory delegated to this client.
pub struct DelegatedDir {
    client: Client,
    dir: Ino,
    state: Mutex<Held>,
    /// One write-back at a time, so that batches reach the home in the log's order.
    writing_back: tokio::sync::Mutex<()>,
}

struct Held {
    /// The directory's names as the home will hold them once the log is written back.
    names: HashMap<String, Named>,
    /// Numbers set aside for creates, not used yet.
    free: VecDeque<Ino>,
    /// Steps answered here, not yet written back, in order.
    log: Vec<NamespaceRequest>,
    /// Files made here whose creating handle is still open and whose `CreateAs` is still in
    /// `log`: the write-back registers that open at the home (`open: true`), or the handle's
    /// release is logged after it ([`DelegatedDir::log_release`]). A file is here exactly as
    /// long as its `CreateAs` waits in `log` and its handle is open.
    open_here: HashSet<Ino>,
    /// Given back (or refused a write-back): nothing more is answered here.
    ended: bool,
}

/// What a name in a delegated directory is, as far as an unlink needs to know.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Named {
    /// A file made under this delegation (its number).
    Made(Ino),
    /// Not a directory: an unlink is answered here (the home drops the name at the
    /// write-back, and the inode with it or not, as for any unlink).
    NotDirectory,
    /// A directory, or not known: an unlink takes the ordinary path.
    Other,
}

impl Named {
    fn of(kind: FileKind) -> Named {
        match kind {
            FileKind::Dir => Named::Other,
            _ => Named::NotDirectory,
        }
    }
}

impl Held {
    /// The logged `CreateAs` of `ino` registers its creator's open at the home.
    fn register_open(&mut self, ino: Ino) {
        for step in &mut self.log {
            if let NamespaceRequest::CreateAs(create) = step {
                if create.ino == ino {
                    create.open = true;
                }
            }
        }
    }
}

impl Client {
    /// Asks for directory `dir`'s delegation with `count` numbers for creates. The client
    /// must watch ([`Client::watch`]): the home's recall comes as a notice. None when the home
    /// refuses (the directory is another's, shared, or needs the home's checks).
    pub async fn delegate(&self, dir: Ino, count: u32) -> Result<Option<DelegatedDir>> {
        let place_on = self.near_server().map(|server| server as u32);
        let granted = match self.call_home(dir, Delegate { dir, count, place_on }).await {
            Ok(granted) => granted,
            Err(e) if e.code == ErrorCode::NotPermitted => {
                tracing::debug!(dir = format!("{dir:#x}"), "no delegation: {e}");
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        // Nobody else may change the directory now: its listing stays exact.
        let names = self.readdir_ino(dir).await?.into_iter().map(|entry| (entry.name, Named::of(entry.kind))).collect();
        let held = Held { names, free: granted.inos.into(), log: Vec::new(), open_here: HashSet::new(), ended: false };
        Ok(Some(DelegatedDir { client: self.clone(), dir, state: Mutex::new(held), writing_back: Default::default() }))
    }

    /// Whether the servers check identities (the home of `ino` does; every server of an
    /// instance does or none).
    pub async fn checks_identity(&self, ino: Ino) -> Result<bool> {
        Ok(self.connection(ino::home(ino)).await?.checks_identity())
    }

    /// The handle of a file just made by `dir`'s [`DelegatedDir::create`] (`attr`): a handle
    /// the home has not registered. Its writes go to the data servers as any handle's (they
    /// need nothing of the home); whatever it would ask the home (a publication, a truncation,
    /// an append) writes the delegation back first; a release with nothing asked before is
    /// logged ([`DelegatedDir::log_release`]), so a file created and closed costs no request.
    /// `write_behind`: its window, as [`File::set_write_behind`] sets it.
    pub fn file_made_under(&self, dir: &Arc<DelegatedDir>, attr: &Attr, write_behind: u64) -> File {
        // A delegated directory has no retention policy or consumer group: writers there are
        // not held at the high-water mark (what the home would answer, asked).
        File::new(self.clone(), attr, None).made_under(dir.clone(), false, write_behind)
    }
}

impl DelegatedDir {
    pub fn dir(&self) -> Ino {
        self.dir
    }

    /// Whether the delegation still answers here (not given back).
    pub fn is_held(&self) -> bool {
        !self.state.lock().unwrap().ended
    }

    /// Steps answered here and not written back yet.
    pub fn pending(&self) -> usize {
        self.state.lock().unwrap().log.len()
    }

    /// Nothing to write back and no write-back under way: every step answered here is
    /// applied at the home (or was refused).
    pub fn is_quiet(&self) -> bool {
        // The log first: a write-back takes its lock before it takes the log, so a log found
        // empty and then the lock found free means nothing answered before is still on its way.
        self.state.lock().unwrap().log.is_empty() && self.writing_back.try_lock().is_ok()
    }

    /// The holder changed `name` the ordinary way (after a write-back): it names what
    /// `now` says, or nothing. Keeps the names this delegation answers creates and unlinks
    /// from exact.
    pub fn learned(&self, name: &str, now: Option<Named>) {
        let mut held = self.state.lock().unwrap();
        match now {
            Some(named) => held.names.insert(name.to_string(), named),
            None => held.names.remove(name),
        };
    }

    /// Creates file `name` (exclusively) with `mode` less `umask`, owned by `uid:gid`, at once:
    /// its attributes as the home will hold them. None when it cannot be answered here: the
    /// delegation ended, or its numbers are used up (write back, give it up, create as usual).
    /// The file counts as open by its creator until [`DelegatedDir::log_release`] (see
    /// [`Client::file_made_under`] for its handle).
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
        held.names.insert(name.to_string(), Named::Made(ino));
        held.open_here.insert(ino);
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

    /// Unlinks `name` at once when it is not a directory (true); false when it must take the
    /// ordinary path (after a write-back): a directory, or a name of unknown kind.
    pub fn unlink(&self, name: &str) -> Result<bool> {
        let mut held = self.state.lock().unwrap();
        if held.ended {
            return Ok(false);
        }
        match held.names.get(name) {
            None => Err(Error::new(ErrorCode::NotFound, format!("no entry '{name}'"))),
            Some(Named::Other) => Ok(false),
            Some(&named) => {
                held.names.remove(name);
                if let Named::Made(ino) = named {
                    if held.open_here.remove(&ino) {
                        // Unlinked while its creator holds it open: the home must count that open,
                        // or the unlink would remove the file under the handle. Its release then
                        // takes the ordinary path.
                        held.register_open(ino);
                    }
                }
                held.log.push(Unlink { parent: self.dir, name: name.to_string() }.into());
                Ok(true)
            }
        }
    }

    /// Ends the creating handle of file `ino` made here, if the home has not been told of
    /// the file yet: `commit` (its release, with what it publishes) is logged behind the
    /// file's `CreateAs`, and true comes back — the handle owes the home nothing more. False:
    /// the home counts the handle's open (the file was written back while it was open), so
    /// its release is an ordinary one, sent after a write-back.
    pub fn log_release(&self, ino: Ino, commit: Commit) -> bool {
        let mut held = self.state.lock().unwrap();
        if !held.open_here.remove(&ino) {
            return false;
        }
        held.log.push(commit.into());
        true
    }

    /// Writes the log back to the directory's home, in order; returns once every step
    /// answered here before the call is applied there (or refused). A step the home refuses
    /// (the delegation was taken back, or a bug) ends the delegation here: its error is
    /// returned once every other step was tried.
    pub async fn write_back(&self) -> Result<()> {
        let _in_order = self.writing_back.lock().await;
        let log = {
            let mut held = self.state.lock().unwrap();
            let mut log = std::mem::take(&mut held.log);
            for step in &mut log {
                if let NamespaceRequest::CreateAs(create) = step {
                    // Still open here: the home counts the open from now on.
                    create.open |= held.open_here.remove(&create.ino);
                }
            }
            log
        };
        if log.is_empty() {
            return Ok(());
        }
        let unlinks: Vec<bool> = log.iter().map(|step| matches!(step, NamespaceRequest::Unlink(_))).collect();
        let outcomes = match self.client.batch_steps(ino::home(self.dir), log).await {
            Ok(outcomes) => outcomes,
            Err(e) => {
                // Whether the home applied the batch is unknown: nothing more is answered here.
                self.state.lock().unwrap().ended = true;
                tracing::warn!(dir = format!("{:#x}", self.dir), "a delegation's write-back failed: {e}");
                return Err(e);
            }
        };
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
    /// answered here from the call on: a step answered after the write-back took the log
    /// would be lost with the delegation.
    pub async fn give_back(&self) -> Result<()> {
        self.state.lock().unwrap().ended = true;
        let written = self.write_back().await;
        let given = self.client.call_home(self.dir, GiveBack { dir: self.dir }).await;
        written.and(given)
    }
}
