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
//!
//! Each step has a number in the log, and the home journals with each step it applies its
//! number. A write-back that loses its connection (the home crashed, or the network broke)
//! keeps its steps: applied or not, nobody knows yet. The holder then stops answering here,
//! reconnects, reclaims the delegation (the home keeps it a few seconds for it, answering
//! everybody else `Recalling`), learns the last step applied, writes back the rest and gives
//! the directory up ([`DelegatedDir::give_back`] does all of it, retrying while the home is
//! away for up to `ClientOptions::reclaim_for`, [`RECLAIM_FOR`] by default). What the holder
//! answered is lost only if the holder dies too, or the home stays away longer than that.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use surge_proto::namespace::{
    Commit, CreateAs, Delegate, GiveBack, MakeDir, NamespaceRequest, Reclaim, Rename, Renew, Rmdir, SetAttr, Unlink,
};
use surge_proto::{ino, Attr, AttrChanges, ErrorCode, FileKind, Ino, LinkOutcome, Timestamp};

use crate::conn::Answer;
use crate::error::{Error, Result};
use crate::{Client, File};

mod holder;
pub use holder::Delegations;

/// How long a holder that lost its home tries to reach it again to write back and give the
/// directory up, by default (a restart takes a few seconds; the home keeps the delegation a
/// few seconds after it is back): `ClientOptions::reclaim_for`.
pub const RECLAIM_FOR: Duration = Duration::from_secs(60);
/// The first pause between those tries, doubled up to [`RECLAIM_PAUSE_MAX`].
const RECLAIM_PAUSE: Duration = Duration::from_millis(50);
const RECLAIM_PAUSE_MAX: Duration = Duration::from_secs(1);

/// A directory delegated to this client.
pub struct DelegatedDir {
    client: Client,
    dir: Ino,
    /// The delegation's name, quoted by its write-backs, reclaim and give-back.
    token: Ino,
    /// The directory's group if it is set-group-ID (see `Delegated::group`): the holder gives
    /// the directory up before changing its mode or group.
    group: Option<u32>,
    /// The directory's attributes, once asked for ([`DelegatedDir::fetch_dir_attr`]). Its
    /// mode, owner and group stay so while it is held (another client's change recalls it
    /// first, and the holder gives it up before changing them): what a holder checks its own
    /// permissions against.
    attr: std::sync::OnceLock<Attr>,
    state: Mutex<Held>,
    /// One write-back at a time, so that batches reach the home in the log's order.
    writing_back: tokio::sync::Mutex<()>,
    /// One give-back at a time: a second waits for the first, then finds nothing to do.
    giving_back: tokio::sync::Mutex<()>,
}

/// The holder's maps, looked up on every create and unlink it answers: hashed with aHash
/// (keyed per process) rather than SipHash.
type Map<K, V> = HashMap<K, V, ahash::RandomState>;
type Set<K> = HashSet<K, ahash::RandomState>;

struct Held {
    /// The directory's names as the home will hold them once the log is written back.
    names: Map<String, Named>,
    /// Numbers set aside for creates, not used yet.
    free: VecDeque<Ino>,
    /// Steps answered here, not yet written back (or not known to be applied), in order.
    log: Vec<NamespaceRequest>,
    /// The number of `log`'s first step (numbers start at 1).
    first_seq: u64,
    /// A write-back lost its connection: the next one reclaims the delegation first, to learn
    /// which of `log`'s steps the home applied.
    away: bool,
    /// When the home was first found away: give-backs try to reach it until
    /// `ClientOptions::reclaim_for` after (every give-back the same deadline, however many).
    away_since: Option<tokio::time::Instant>,
    /// The home ended the delegation (given back, or not reclaimed in time): nothing more to
    /// write back or give back.
    gone: bool,
    /// Files made here whose creating handle is still open and whose `CreateAs` is still in
    /// `log`: the write-back registers that open at the home (`open: true`), or the handle's
    /// release is logged after it ([`DelegatedDir::log_release`]). A file is here exactly as
    /// long as its `CreateAs` waits in `log` and its handle is open.
    open_here: Set<Ino>,
    /// Files made here whose `CreateAs` is still in `log`, with their attributes as the home
    /// will hold them once it is written back: their times are set here too
    /// ([`DelegatedDir::set_times`]).
    unwritten: Map<Ino, Attr>,
    /// Given back (or refused a write-back): nothing more is answered here.
    ended: bool,
}

/// What a step written back may leave to finish (see [`DelegatedDir::write_back`]).
#[derive(Clone, Copy)]
enum Finish {
    Nothing,
    Unlink,
    Rename,
}

/// What a name in a delegated directory is, as far as an unlink needs to know.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Named {
    /// A file made under this delegation (its number).
    Made(Ino),
    /// A directory made under this delegation (its number): nobody else can name anything in
    /// it while the delegation is held (the home recalls the delegation first), so its holder
    /// knows whether it is empty.
    MadeDir(Ino),
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
    fn lost_home(&mut self) {
        self.ended = true;
        self.away = !self.gone;
        self.away_since.get_or_insert_with(tokio::time::Instant::now);
    }

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

/// The attributes a new inode made under a delegation will have at the home.
fn new_attr(ino: Ino, kind: FileKind, mode: u32, uid: u32, gid: u32) -> Attr {
    let now = Timestamp::now();
    let nlink = if kind == FileKind::Dir { 2 } else { 1 };
    Attr { ino, kind, mode: mode & 0o7777, uid, gid, size: 0, nlink, atime: now, mtime: now, ctime: now, blocks: Some(0) }
}

impl Client {
    /// Asks for directory `dir`'s delegation with `count` numbers for creates. The client
    /// must watch ([`Client::watch`]): the home's recall comes as a notice. None when the home
    /// refuses (the directory is another's, shared, or needs the home's checks).
    pub async fn delegate(&self, dir: Ino, count: u32) -> Result<Option<DelegatedDir>> {
        let place_on = self.place_on();
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
        let held = Held {
            names,
            free: granted.inos.into(),
            log: Vec::new(),
            first_seq: 1,
            away: false,
            away_since: None,
            gone: false,
            open_here: Set::default(),
            unwritten: Map::default(),
            ended: false,
        };
        let token = granted.token;
        Ok(Some(DelegatedDir {
            client: self.clone(),
            dir,
            token,
            group: granted.group,
            attr: Default::default(),
            state: Mutex::new(held),
            writing_back: Default::default(),
            giving_back: Default::default(),
        }))
    }

    /// Where a delegation's numbers are placed in a node-local directory: on this node's
    /// server, as the files this client creates there.
    fn place_on(&self) -> Option<u32> {
        self.near_server().map(|server| server as u32)
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

    /// The directory's attributes if fetched already (see [`DelegatedDir::fetch_dir_attr`]).
    pub fn dir_attr(&self) -> Option<&Attr> {
        self.attr.get()
    }

    /// The directory's attributes, asked of its home once (its mode, owner and group hold
    /// while it is held; its times and size do not).
    pub async fn fetch_dir_attr(&self) -> Result<Attr> {
        if let Some(attr) = self.attr.get() {
            return Ok(attr.clone());
        }
        let attr = self.client.getattr(self.dir).await?;
        Ok(self.attr.get_or_init(|| attr).clone())
    }

    /// Whether the delegation still answers here (not given back).
    pub fn is_held(&self) -> bool {
        !self.state.lock().unwrap().ended
    }

    /// Whether its home was lost with steps perhaps not applied: they are written back once
    /// the home is reached again ([`DelegatedDir::give_back`]), and the home holds the
    /// directory for them meanwhile. Nobody need wait for them here.
    pub fn is_away(&self) -> bool {
        self.state.lock().unwrap().away
    }

    /// The connection to the home was lost: nothing more is answered here, and the next
    /// write-back reclaims the delegation first.
    pub fn lost_home(&self) {
        self.state.lock().unwrap().lost_home();
    }

    /// Numbers left for creates and mkdirs here.
    pub fn numbers_left(&self) -> usize {
        self.state.lock().unwrap().free.len()
    }

    /// Asks the home for `count` more numbers for creates, keeping the directory (see
    /// [`Renew`]). False when the home refused (the delegation is being recalled, or ended):
    /// the holder goes on with what it has.
    pub async fn renew(&self, count: u32) -> Result<bool> {
        if !self.is_held() {
            return Ok(false);
        }
        let place_on = self.client.place_on();
        match self.client.call_home(self.dir, Renew { dir: self.dir, token: self.token, count, place_on }).await {
            Ok(inos) => {
                self.state.lock().unwrap().free.extend(inos);
                Ok(true)
            }
            Err(e) if e.code.is_lost_contact() => Err(e),
            Err(e) => {
                tracing::debug!(dir = format!("{:#x}", self.dir), "a delegation not renewed: {e}");
                Ok(false)
            }
        }
    }

    /// Steps answered here and not written back yet.
    pub fn pending(&self) -> usize {
        self.state.lock().unwrap().log.len()
    }

    /// Steps answered here since the grant, written back or not: whether the directory is in
    /// use, also when the holder's ordinary steps there write the log back (each after a
    /// write-back) before its periodic write-back finds anything pending.
    pub fn steps_answered(&self) -> u64 {
        let held = self.state.lock().unwrap();
        held.first_seq - 1 + held.log.len() as u64
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
        let made = self.make(name, FileKind::File, |ino| {
            CreateAs { parent: self.dir, name: name.to_string(), ino, mode, umask, uid, gid, open: false }.into()
        });
        Ok(made?.map(|ino| {
            let attr = new_attr(ino, FileKind::File, mode & !umask, uid, self.group.unwrap_or(gid));
            self.state.lock().unwrap().unwritten.insert(ino, attr.clone());
            attr
        }))
    }

    /// Makes directory `name` with `mode` less `umask`, owned by `uid:gid`, at once: its
    /// attributes as the home will hold them (it is homed with this directory, on a number
    /// the delegation set aside). None as for [`DelegatedDir::create`], and when the
    /// placement of directories (`Layout::dir_home`) homes this one on another server: it is
    /// then made the ordinary way, there, so that a tree made under a delegation spreads over
    /// the servers as any other does (answered here, all of it would be homed with its root,
    /// whose server would then do all the work of what is made in it).
    pub fn mkdir(&self, name: &str, mode: u32, umask: u32, uid: u32, gid: u32) -> Result<Option<Attr>> {
        // The ordinary path checks the name as `make` would.
        if self.client.layout().dir_home(self.dir, name) != ino::home(self.dir) {
            return Ok(None);
        }
        let made = self.make(name, FileKind::Dir, |ino| {
            MakeDir { parent: self.dir, name: name.to_string(), mode, umask, uid, gid, ino: Some(ino) }.into()
        });
        let set_gid = if self.group.is_some() { libc::S_ISGID } else { 0 };
        Ok(made?.map(|ino| new_attr(ino, FileKind::Dir, (mode & !umask) | set_gid, uid, self.group.unwrap_or(gid))))
    }

    /// Logs `step(ino)`, which makes `name` (new) a `kind` with a number set aside; the number.
    /// A file counts as open by its creator from then on (in the same breath: a write-back
    /// must not find its create without it).
    fn make(&self, name: &str, kind: FileKind, step: impl FnOnce(Ino) -> NamespaceRequest) -> Result<Option<Ino>> {
        surge_proto::check_name(name)?;
        let mut held = self.state.lock().unwrap();
        if held.ended {
            return Ok(None);
        }
        if held.names.contains_key(name) {
            return Err(Error::new(ErrorCode::Exists, format!("'{name}' exists")));
        }
        let Some(ino) = held.free.pop_front() else { return Ok(None) };
        let named = match kind {
            FileKind::Dir => Named::MadeDir(ino),
            _ => {
                held.open_here.insert(ino);
                Named::Made(ino)
            }
        };
        held.names.insert(name.to_string(), named);
        held.log.push(step(ino));
        Ok(Some(ino))
    }

    /// The directory `name` names, if it was made under this delegation.
    pub fn made_dir(&self, name: &str) -> Option<Ino> {
        match self.state.lock().unwrap().names.get(name) {
            Some(&Named::MadeDir(ino)) => Some(ino),
            _ => None,
        }
    }

    /// Removes directory `name`, made under this delegation, at once (true); the caller has
    /// checked that it is empty ([`Named::MadeDir`] says why it can). False: the ordinary
    /// path (the delegation ended, or `name` is not such a directory any more).
    pub fn rmdir(&self, name: &str) -> bool {
        let mut held = self.state.lock().unwrap();
        if held.ended || !matches!(held.names.get(name), Some(Named::MadeDir(_))) {
            return false;
        }
        held.names.remove(name);
        held.log.push(Rmdir { parent: self.dir, name: name.to_string() }.into());
        true
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
            Some(Named::Other | Named::MadeDir(_)) => Ok(false),
            Some(&named) => {
                held.names.remove(name);
                if let Named::Made(ino) = named {
                    held.unwritten.remove(&ino);
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

    /// Renames `src` to `dst` in this directory at once (true), when the mount knows both:
    /// `src` is not a name of unknown kind, and `dst` is free, or a file made here when `src`
    /// is one too (its inode loses that link at the write-back, as at an unlink), or an empty
    /// directory made here when `src` is one too (`may_replace(dir)`: the caller knows it
    /// empty and not held itself).
    /// False: the ordinary path. Errors as rename(2) gives them (EEXIST under `noreplace`,
    /// EISDIR, ENOTDIR).
    pub fn rename(&self, src: &str, dst: &str, noreplace: bool, may_replace: impl FnOnce(Ino) -> bool) -> Result<bool> {
        surge_proto::check_name(dst)?;
        let mut held = self.state.lock().unwrap();
        if held.ended || src == dst {
            return Ok(false);
        }
        let moving = match held.names.get(src) {
            None => return Err(Error::new(ErrorCode::NotFound, format!("no entry '{src}'"))),
            Some(Named::Other) => return Ok(false),
            Some(&moving) => moving,
        };
        let moving_dir = matches!(moving, Named::MadeDir(_));
        match held.names.get(dst).copied() {
            None => {}
            Some(_) if noreplace => return Err(Error::new(ErrorCode::Exists, format!("'{dst}' exists"))),
            Some(Named::Other) => return Ok(false),
            Some(Named::MadeDir(_)) if !moving_dir => return Err(Error::new(ErrorCode::IsDir, format!("'{dst}' is a directory"))),
            Some(Named::MadeDir(target)) if !may_replace(target) => return Ok(false),
            Some(Named::MadeDir(_)) => {}
            Some(_) if moving_dir => return Err(Error::new(ErrorCode::NotDir, format!("'{dst}' is not a directory"))),
            // Two files made here are two inodes; otherwise both names may be links to one
            // (rename(2) then does nothing): the home knows.
            Some(Named::Made(target)) if matches!(moving, Named::Made(_)) => {
                // Replaced while its creator holds it open: as at an unlink.
                held.unwritten.remove(&target);
                let replaced_while_open = held.open_here.remove(&target);
                if replaced_while_open {
                    held.register_open(target);
                }
            }
            Some(_) => return Ok(false),
        }
        held.names.remove(src);
        held.names.insert(dst.to_string(), moving);
        let (src_name, dst_name) = (src.to_string(), dst.to_string());
        let step = Rename { src_parent: self.dir, src_name, dst_parent: self.dir, dst_name, noreplace, retired_target: None };
        held.log.push(step.into());
        Ok(true)
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
        if let Some(attr) = held.unwritten.get_mut(&ino) {
            attr.size = commit.size.unwrap_or(attr.size);
            attr.mtime = commit.mtime.unwrap_or(attr.mtime);
            attr.ctime = attr.ctime.max(attr.mtime);
        }
        held.log.push(commit.into());
        true
    }

    /// Sets the access and modification times of file `ino` at once, when it was made here
    /// and the home has not been told of it yet (its `CreateAs` waits in the log): the
    /// change is logged behind it, and the file's attributes as the home will hold them come
    /// back. None when `changes` sets anything else, or the file is not such a one: the
    /// ordinary path (after a write-back). What `touch`, `cp -p` and `tar x` do to each new
    /// file then costs no request of its own.
    pub fn set_times(&self, ino: Ino, changes: &AttrChanges) -> Option<Attr> {
        let times_only = AttrChanges { atime: None, mtime: None, by: None, ..changes.clone() } == AttrChanges::default();
        if !times_only || (changes.atime.is_none() && changes.mtime.is_none()) {
            return None;
        }
        let mut held = self.state.lock().unwrap();
        if held.ended {
            return None;
        }
        let attr = held.unwritten.get_mut(&ino)?;
        attr.atime = changes.atime.unwrap_or(attr.atime);
        attr.mtime = changes.mtime.unwrap_or(attr.mtime);
        attr.ctime = Timestamp::now().max(attr.ctime);
        let attr = attr.clone();
        held.log.push(SetAttr { ino, changes: changes.clone() }.into());
        Some(attr)
    }

    /// Writes the log back to the directory's home, in order; returns once every step
    /// answered here before the call is applied there (or refused). A step the home refuses
    /// (the delegation was taken back, or a bug) ends the delegation here: its error is
    /// returned once every other step was tried. A lost connection keeps the steps for the
    /// next call, which reclaims the delegation first (see the module's doc).
    pub async fn write_back(&self) -> Result<()> {
        let _in_order = self.writing_back.lock().await;
        if self.is_away() {
            self.reclaim().await?;
        }
        let (first_seq, log) = {
            let mut held = self.state.lock().unwrap();
            let mut log = std::mem::take(&mut held.log);
            for step in &mut log {
                if let NamespaceRequest::CreateAs(create) = step {
                    // Still open here: the home counts the open from now on.
                    create.open |= held.open_here.remove(&create.ino);
                    held.unwritten.remove(&create.ino);
                }
            }
            let first_seq = held.first_seq;
            held.first_seq += log.len() as u64;
            (first_seq, log)
        };
        if log.is_empty() {
            return Ok(());
        }
        // What each step leaves to finish once applied: an inode that lost its last name.
        let finishing: Vec<Finish> = log
            .iter()
            .map(|step| match step {
                NamespaceRequest::Unlink(_) => Finish::Unlink,
                NamespaceRequest::Rename(_) => Finish::Rename,
                _ => Finish::Nothing,
            })
            .collect();
        let outcomes = match self.client.write_back_steps(self.dir, self.token, first_seq, log.clone()).await {
            Ok(outcomes) => outcomes,
            Err(e) if e.code.is_lost_contact() => {
                // Applied or not, nobody knows: the steps wait, in front of any logged since,
                // for the home to say which it has.
                let mut held = self.state.lock().unwrap();
                let later = std::mem::replace(&mut held.log, log);
                held.log.extend(later);
                held.first_seq = first_seq;
                held.lost_home();
                tracing::warn!(
                    dir = format!("{:#x}", self.dir),
                    "a delegation's write-back lost its home ({e}): written back once it is reached again"
                );
                return Err(e);
            }
            Err(e) => {
                self.state.lock().unwrap().ended = true;
                tracing::warn!(dir = format!("{:#x}", self.dir), "a delegation's write-back failed: {e}");
                return Err(e);
            }
        };
        let mut first_failure = None;
        for (finish, outcome) in finishing.into_iter().zip(outcomes) {
            let outcome = match outcome {
                Ok(message) => self.finish(finish, message).await,
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

    /// Takes the delegation up again after a lost connection: the steps the home applied
    /// leave the log. A home that ended the delegation meanwhile (its holder did not come back
    /// in time) has lost what is left of the log: said in the log, and the error returned.
    async fn reclaim(&self) -> Result<()> {
        let applied = match self.client.call_home(self.dir, Reclaim { dir: self.dir, token: self.token }).await {
            Ok(applied) => applied,
            Err(e) if e.code.is_lost_contact() => return Err(e),
            Err(e) => {
                let mut held = self.state.lock().unwrap();
                let lost = std::mem::take(&mut held.log).len();
                held.away = false;
                held.gone = true;
                if lost == 0 {
                    return Ok(());
                }
                tracing::error!(dir = format!("{:#x}", self.dir), "{lost} step(s) of a delegation were lost: its home ended it ({e})");
                return Err(e);
            }
        };
        let mut held = self.state.lock().unwrap();
        let done = (applied + 1).saturating_sub(held.first_seq).min(held.log.len() as u64);
        held.log.drain(..done as usize);
        held.first_seq += done;
        held.away = false;
        tracing::info!(dir = format!("{:#x}", self.dir), "a delegation reclaimed: {} step(s) left to write back", held.log.len());
        Ok(())
    }

    /// Finishes what a step written back left without a name (its reply: `message`).
    async fn finish(&self, finish: Finish, message: Vec<u8>) -> Result<()> {
        let answer = Answer { message, payload: Vec::new() };
        match finish {
            Finish::Nothing => Ok(()),
            // An inode that lost a name here and lives on changed its link count and ctime
            // only now: what this client's caches took from its home before is stale.
            Finish::Unlink => {
                let unlinked = answer.reply::<Unlink>()?;
                let gone = self.client.finish_unlinked_saying_gone(&unlinked).await;
                if !matches!(gone, Ok(true)) {
                    self.client.tell_own_watcher(unlinked.ino);
                }
                gone.map(drop)
            }
            Finish::Rename => {
                let outcome: LinkOutcome = answer.reply::<Rename>()?;
                let replaced = outcome.replaced.as_ref().map(|u| u.ino);
                let finished = self.client.finish_renamed(outcome, self.dir).await;
                if let Some(ino) = replaced {
                    self.client.tell_own_watcher(ino);
                }
                finished
            }
        }
    }

    /// Writes the log back and gives the directory up (what a recall asks). Nothing is
    /// answered here from the call on: a step answered after the write-back took the log
    /// would be lost with the delegation. Where the home is away, tries again (reclaiming the
    /// delegation) until it is back, for up to `ClientOptions::reclaim_for`.
    pub async fn give_back(&self) -> Result<()> {
        self.state.lock().unwrap().ended = true;
        let _one_at_a_time = self.giving_back.lock().await;
        let mut pause = RECLAIM_PAUSE;
        loop {
            let outcome = match self.write_back().await {
                Err(e) if e.code.is_lost_contact() => Err(e),
                written if self.state.lock().unwrap().gone => written,
                // Given back even after a refused write-back (which ended it here): the home
                // would otherwise hold the directory for nobody until the recall deadline.
                written => {
                    let given = self.client.call_home(self.dir, GiveBack { dir: self.dir, token: self.token }).await;
                    if given.is_ok() {
                        self.state.lock().unwrap().gone = true;
                    }
                    written.and(given)
                }
            };
            if matches!(&outcome, Err(e) if e.code.is_lost_contact()) {
                // Whether the give-back got there is not known either: reclaim first.
                self.lost_home();
            }
            let reclaim_for = self.client.reclaim_for();
            let deadline = self.state.lock().unwrap().away_since.map(|since| since + reclaim_for);
            match outcome {
                Err(e) if e.code.is_lost_contact() && deadline.is_some_and(|deadline| tokio::time::Instant::now() + pause < deadline) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RECLAIM_PAUSE_MAX);
                }
                Err(e) if e.code.is_lost_contact() => {
                    let dir = format!("{:#x}", self.dir);
                    match self.state.lock().unwrap().log.len() {
                        // Nothing lost: a home that comes back ends the delegation itself.
                        0 => {
                            tracing::info!(dir, "a delegation not given back: its home was away for {reclaim_for:?} ({e})");
                            return Ok(());
                        }
                        lost => tracing::error!(
                            dir,
                            "{lost} step(s) of a delegation not written back: its home was away for {reclaim_for:?} ({e})"
                        ),
                    }
                    return Err(e);
                }
                outcome => return outcome,
            }
        }
    }
}
