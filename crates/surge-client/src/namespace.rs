//! The namespace by inode: lookups, attributes, creation and removal, rename and listings.
//! Single-server operations are one call to the home server of the inode they name; the few
//! that span two servers (mkdir, removing a directory homed elsewhere, rename between
//! directories homed on different servers) are sequenced here from atomic steps, so that a
//! failure half-way undoes what was done and no name ever points at something half-made.

use surge_proto::acl::AclKind;
use surge_proto::data::{PurgeData, TruncateData};
use surge_proto::ino::{self, Ino};
use surge_proto::namespace::{
    AddLink, Commit, Create, DropInode, DropLink, Exchange, GetAttr, InsertEntry, IssueTicket, Lookup, MakeDir, MakeDirInode, MakeNode,
    Open, OpenAt, Readdir, Readlink, RemoveEntry, Rename, RenameFinish, RenamePrepare, RetireDir, Rmdir, SetAttr, SetParent, SwapEntry,
    Symlink, Unlink, UnretireDir,
};
use surge_proto::ticket::Ticket;
use surge_proto::{check_name, Attr, AttrChanges, DirEntry, DirInheritance, DirPage, ErrorCode, FileKind, LinkOutcome, Unlinked, ROOT_INO};

use crate::client::{OnBusy, BUSY_RETRY_FOR};
use crate::error::{Error, Result};
use crate::{Client, File};

/// Entries asked for per readdir page.
const READDIR_PAGE: u32 = 4096;
/// Times a mkdir makes its directory before it gives up on a parent whose default ACL keeps
/// changing under it (once is the rule, twice where the parent has one).
const MKDIR_ATTEMPTS: u32 = 3;
/// Times a rename over, or an rmdir of, a directory homed on another server tries before it
/// gives up on a name other clients keep replacing between its steps (once is the rule).
const TARGET_CHANGED_ATTEMPTS: u32 = 8;
/// Times a truncate cuts the servers' data before it sets the size regardless of writes
/// published meanwhile (see [`Client::setattr_unmeasured`]).
const CUT_ATTEMPTS: u32 = 4;
/// How long a removed file's data is purged again while its servers cannot be reached.
const PURGE_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(600);
/// How long a step that puts a name in on another server than the inode's (a link's, a
/// mkdir's, a rename's between servers), or takes the source's away, is sent again while its
/// answer is lost. The step around it must know whether it was applied: undoing a link on a
/// guess would leave a name its inode does not count (and, once its other names go, a name
/// of nothing); a rename whose source stays would leave one inode two names and a count of one.
const INSERT_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(30);
/// The first pause between those attempts, doubled up to a second.
const INSERT_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// A step that found its name changed by another client (Stale) after every attempt: to a
/// program, the name is busy (EBUSY), not a stale handle.
fn busy_if_stale(e: Error) -> Error {
    if e.code == ErrorCode::Stale {
        Error::new(ErrorCode::Busy, format!("other clients kept replacing the name: {}", e.detail))
    } else {
        e
    }
}

/// What an open by name found ([`Client::open_name`]).
pub enum OpenedName {
    /// A regular file, opened.
    File(Box<File>),
    /// Something else has the name (a directory, a symbolic link, a special file): not opened.
    Other(DirEntry),
}

impl Client {
    /// A file's attributes, `st_blocks` measured where its home did not know it.
    pub async fn getattr(&self, ino: Ino) -> Result<Attr> {
        let attr = self.call_home(ino, GetAttr { ino }).await?;
        Ok(self.with_blocks(attr).await)
    }

    /// Looks `name` up in directory `parent`; fetches the attributes from the inode's own home
    /// when it lives elsewhere than the directory.
    pub async fn lookup(&self, parent: Ino, name: &str) -> Result<Attr> {
        match self.lookup_entry(parent, name).await? {
            DirEntry { attr: Some(attr), .. } => Ok(self.with_blocks(attr).await),
            DirEntry { ino, .. } => self.getattr(ino).await,
        }
    }

    async fn with_blocks(&self, mut attr: Attr) -> Attr {
        self.measure_blocks(vec![&mut attr]).await;
        attr
    }

    /// The directory that holds directory `dir` (itself for the root).
    pub async fn parent_of(&self, dir: Ino) -> Result<Ino> {
        Ok(self.lookup_entry(dir, "..").await?.ino)
    }

    pub(crate) async fn lookup_entry(&self, parent: Ino, name: &str) -> Result<DirEntry> {
        if name != ".." {
            check_name(name)?;
        }
        self.call_home(parent, Lookup { parent, name: name.to_string() }).await
    }

    /// Changes attributes. Shrinking a file drops its data beyond the new size on every server
    /// first, so no stale bytes reappear if it grows again (where servers check identities,
    /// with a ticket from the file's home: the others do not know its permissions).
    pub async fn setattr(&self, ino: Ino, changes: AttrChanges) -> Result<Attr> {
        let attr = self.setattr_unmeasured(ino, changes).await?;
        Ok(self.with_blocks(attr).await)
    }

    /// [`Client::setattr`] for a caller that has no use for `st_blocks` (a handle's own
    /// truncation): the answer may leave it unknown.
    ///
    /// A new size is set in two steps: the data past it is cut on every server, then the home
    /// sets it, on condition that the file has not changed since the cut began
    /// ([`AttrChanges::cut_at`], the version the caller knew, or asked of the home here). A
    /// write on another node can land between the two steps, past the new size, and be
    /// published before it; the condition catches that, and the cut is made again (the write
    /// came first: a truncate after it removes it), [`CUT_ATTEMPTS`] times, the last one
    /// without the condition.
    pub(crate) async fn setattr_unmeasured(&self, ino: Ino, mut changes: AttrChanges) -> Result<Attr> {
        let Some(size) = changes.size else { return self.call_home(ino, SetAttr { ino, changes }).await };
        let ticket = self.ticket_for(ino).await?;
        let mut known = changes.cut_at.take();
        for attempt in 1..=CUT_ATTEMPTS {
            changes.cut_at = match known.take() {
                _ if attempt == CUT_ATTEMPTS => None,
                Some(version) => Some(version),
                None => Some(self.call_home(ino, GetAttr { ino }).await?.content_version()),
            };
            self.broadcast(TruncateData { ino, size, ticket }).await?;
            match self.call_home(ino, SetAttr { ino, changes: changes.clone() }).await {
                // Asked again: the version the home has now, before the next cut.
                Err(e) if e.code == ErrorCode::Stale && attempt < CUT_ATTEMPTS => {}
                other => return other,
            }
        }
        unreachable!("the last attempt sets the size whatever happened")
    }

    /// Creates (or with `exclusive == false` opens an existing) regular file and registers an
    /// open handle on it. Its mode is `mode`, or what the directory's default ACL makes of it.
    pub async fn create_at(&self, parent: Ino, name: &str, mode: u32, exclusive: bool) -> Result<File> {
        self.create_at_with_umask(parent, name, mode, 0, exclusive).await
    }

    /// [`Client::create_at`] for a caller with a umask, applied as the kernel would: `mode`
    /// less `umask`, unless the directory has a default ACL, which then decides with `mode`
    /// alone. (Pass the mode as asked, not already masked.)
    pub async fn create_at_with_umask(&self, parent: Ino, name: &str, mode: u32, umask: u32, exclusive: bool) -> Result<File> {
        let (uid, gid) = self.identity();
        let place_on = self.near_server().map(|server| server as u32);
        let create = Create { parent, name: name.to_string(), mode, umask, uid, gid, exclusive, open: true, place_on };
        let mut attempts = 0;
        let attr = loop {
            attempts += 1;
            let entry = self.call_home(parent, create.clone()).await?;
            match entry.attr {
                Some(attr) => break attr,
                // An existing file homed elsewhere (renamed in from another directory), opened
                // there; gone if the name was replaced meanwhile: asked again.
                None => match self.open_ino(entry.ino).await {
                    Err(e) if e.code == ErrorCode::NotFound && attempts < crate::paths::NAME_RACE_ATTEMPTS => continue,
                    opened => return opened,
                },
            }
        };
        if attr.kind != FileKind::File {
            return Err(Error::new(ErrorCode::Invalid, format!("'{name}' is not a regular file")));
        }
        let file = self.file_with_ticket(attr).await?;
        file.opened_for_writing();
        Ok(file)
    }

    /// Where servers check identities, the ticket of `ino`'s data for this caller, from its
    /// home (see [`surge_proto::ticket`]); elsewhere none is needed.
    pub(crate) async fn ticket_for(&self, ino: Ino) -> Result<Option<Ticket>> {
        if !self.connection(ino::home(ino)).await?.checks_identity() {
            return Ok(None);
        }
        self.call_home(ino, IssueTicket { ino }).await.map(Some)
    }

    /// A handle of a file whose open was registered, with its ticket; without one (refused)
    /// the registration is undone.
    async fn file_with_ticket(&self, attr: Attr) -> Result<File> {
        match self.ticket_for(attr.ino).await {
            Ok(ticket) => Ok(File::new(self.clone(), &attr, ticket)),
            Err(e) => {
                let _ = self.call_home(attr.ino, Commit { ino: attr.ino, size: None, mtime: None, release: true, wrote: false }).await;
                Err(e)
            }
        }
    }

    /// Opens `parent/name` if it is a regular file: one round trip when the file is homed
    /// with its directory (as a file made there is), two otherwise. Anything else with the
    /// name is answered as its entry, not opened.
    pub async fn open_name(&self, parent: Ino, name: &str) -> Result<OpenedName> {
        let entry = self.call_home(parent, OpenAt { parent, name: name.to_string() }).await?;
        match (entry.kind, entry.attr) {
            (FileKind::File, Some(attr)) => self.file_with_ticket(attr).await.map(|f| OpenedName::File(Box::new(f))),
            (FileKind::File, None) => self.open_ino(entry.ino).await.map(|f| OpenedName::File(Box::new(f))),
            (_, attr) => Ok(OpenedName::Other(DirEntry { attr, ..entry })),
        }
    }

    /// Opens an existing file by inode (registers an open handle; see [`File::close`]).
    pub async fn open_ino(&self, ino: Ino) -> Result<File> {
        self.open_ino_keeping(ino, false).await
    }

    /// [`Client::open_ino`] that also keeps the file at its home, to answer later read-only
    /// opens of it here ([`File::split_kept`], [`File::sharing`]): on a watching connection,
    /// the home tells this client of every change to the file's attributes, and waits for
    /// its word, before the change is answered (see [`crate::Watcher`]). Until then the file
    /// is as this open saw it.
    pub async fn open_ino_kept(&self, ino: Ino) -> Result<File> {
        self.open_ino_keeping(ino, true).await
    }

    async fn open_ino_keeping(&self, ino: Ino, keep: bool) -> Result<File> {
        let attr = self.call_home(ino, Open { ino, keep }).await?;
        if attr.kind == FileKind::File {
            return self.file_with_ticket(attr).await;
        }
        // Undo the registration before refusing.
        let _ = self.call_home(ino, Commit { ino, size: None, mtime: None, release: true, wrote: false }).await;
        Err(Error::new(if attr.kind == FileKind::Dir { ErrorCode::IsDir } else { ErrorCode::Invalid }, "not a regular file"))
    }

    /// A directory `parent/name` with `mode`, or what the parent's default ACL makes of it.
    pub async fn mkdir_at(&self, parent: Ino, name: &str, mode: u32) -> Result<Attr> {
        self.mkdir_at_with_umask(parent, name, mode, 0).await
    }

    /// [`Client::mkdir_at`] for a caller with a umask (see [`Client::create_at_with_umask`]).
    ///
    /// The new directory is homed by a hash of (parent, name), often not with its parent;
    /// the parent's default ACL and layout must reach whichever server makes it. When that is
    /// the parent's home, one step there (`MakeDir`) makes and links it. Otherwise this first
    /// supposes the parent has no default ACL and the instance's default layout (so the
    /// common mkdir stays two steps), and the parent's home, linking the name, checks that:
    /// if the parent has others, the directory made without them is dropped, and made again
    /// with them as read from the parent.
    pub async fn mkdir_at_with_umask(&self, parent: Ino, name: &str, mode: u32, umask: u32) -> Result<Attr> {
        check_name(name)?;
        // Spread directories over servers by (parent, name), so a tree's metadata load spreads.
        let target = self.layout().dir_home(parent, name);
        let (uid, gid) = self.identity();
        if target == ino::home(parent) {
            // Homed with its parent: inode and name in one step on that server.
            return self.call_home(parent, MakeDir { parent, name: name.to_string(), mode, umask, uid, gid, ino: None }).await;
        }
        let mut inherited = DirInheritance { default_acl: None, layout: self.default_layout(), group: None };
        let mut attempts = 0;
        loop {
            attempts += 1;
            let make = MakeDirInode { parent, mode, umask, uid, gid, inherited: inherited.clone() };
            let attr = self.call(target, make).await?;
            // Linked on another server: with what it inherited, for the parent's home to check.
            let new_dir = Some(inherited.clone());
            let insert = InsertEntry {
                parent,
                name: name.to_string(),
                ino: attr.ino,
                kind: FileKind::Dir,
                replace: false,
                retired_target: None,
                new_dir,
            };
            match self.insert_entry(insert, OnBusy::Wait).await {
                Ok(_) => return Ok(attr),
                // Not known to be linked: the directory stays, at worst nameless (`surge fsck`
                // finds it), never named and dropped.
                Err(e) if e.code.is_lost_contact() => return Err(e),
                Err(e) => {
                    let _ = self.call(target, DropInode { ino: attr.ino }).await;
                    // Stale: the parent's default ACL or layout was not what the directory
                    // inherited.
                    if e.code != ErrorCode::Stale || attempts == MKDIR_ATTEMPTS {
                        return Err(e);
                    }
                    let group = self.getattr(parent).await?.set_gid_group();
                    inherited =
                        DirInheritance { default_acl: self.default_acl_of(parent).await?, layout: self.layout_of(parent).await?, group };
                }
            }
        }
    }

    /// A directory's default ACL, in its xattr form (None: it has none).
    async fn default_acl_of(&self, dir: Ino) -> Result<Option<Vec<u8>>> {
        match self.get_xattr(dir, AclKind::Default.xattr_name()).await {
            Ok(acl) => Ok(Some(acl)),
            Err(e) if e.code == ErrorCode::NoData => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn symlink_at(&self, parent: Ino, name: &str, target: &str) -> Result<Attr> {
        let (uid, gid) = self.identity();
        self.call_home(parent, Symlink { parent, name: name.to_string(), target: target.to_string(), uid, gid }).await
    }

    /// A hard link: a new name `parent/name` for the non-directory `ino`, in any directory
    /// on any server. Its link count goes up first on its home, then the name is made; if
    /// the name cannot be made, the count goes back down. Where the directory's home could
    /// not be reached, whether the name went in is not known: the count stays up (one too
    /// high at worst, which `surge fsck` lowers; never one too low).
    pub async fn link_at(&self, ino: Ino, parent: Ino, name: &str) -> Result<Attr> {
        check_name(name)?;
        let added = self.call_home(ino, AddLink { ino }).await?;
        let kind = added.attr.kind;
        let insert = InsertEntry { parent, name: name.to_string(), ino, kind, replace: false, retired_target: None, new_dir: None };
        if let Err(e) = self.insert_entry(insert, OnBusy::Wait).await {
            if e.code.is_lost_contact() {
                tracing::warn!(ino = format!("{ino:#x}"), "a link's name may or may not be in: its directory's home did not answer ({e})");
                return Err(e);
            }
            // The link added is taken back as any lost name's, and with it the file if its
            // other names went meanwhile (another node unlinked them), data and all; a
            // failure there is logged by `finish_unlinked`.
            let undo = Unlinked { ino, kind, remote: true, purge: false, size: 0, ticket: added.undo, dir_attr: None };
            let _ = self.finish_unlinked(&undo).await;
            return Err(e);
        }
        Ok(added.attr)
    }

    /// Puts a name in at its directory's home (`InsertEntry`), sent again while that server
    /// cannot be reached (see [`Client::call_home_until_answered`]). An attempt whose answer
    /// was lost may have been applied: the next then finds the name already naming
    /// `insert.ino`, which is that attempt's success (what it replaced, if anything, keeps a
    /// link count one too high, which `surge fsck` lowers, rather than being finished off
    /// twice). A lost-contact error means: not known whether the name is in.
    async fn insert_entry(&self, insert: InsertEntry, on_busy: OnBusy) -> Result<LinkOutcome> {
        let (parent, name, ino) = (insert.parent, insert.name.clone(), insert.ino);
        match self.call_home_until_answered(parent, insert, on_busy).await {
            (Err(e), true) if e.code == ErrorCode::Exists => match self.lookup_entry(parent, &name).await? {
                entry if entry.ino == ino => Ok(LinkOutcome::default()),
                _ => Err(e),
            },
            (outcome, _) => outcome,
        }
    }

    /// Ends a rename between servers at its source (`RenameFinish`), sent again while the
    /// source's home cannot be reached: a commit whose answer was lost may have removed the
    /// name, so the next finds it gone, which is that commit's success.
    async fn rename_finish(&self, finish: RenameFinish) -> Result<()> {
        let commit = finish.commit;
        match self.call_home_until_answered(finish.parent, finish, OnBusy::Wait).await {
            (Err(e), true) if commit && e.code == ErrorCode::NotFound => Ok(()),
            (outcome, _) => outcome,
        }
    }

    /// [`Client::call`] to `ino`'s home for the steps of a two-server operation whose next
    /// step depends on whether this one was applied. An attempt sent whose answer is lost
    /// (the server stopped, restarting, cut off, or killed with it in flight) may have been
    /// applied, even after later attempts: the call is sent again until an answer comes, for
    /// up to [`INSERT_RETRY_FOR`]; the second value says whether that happened (the caller's
    /// step must be one a repeat refuses or repeats harmlessly). A server that cannot even be
    /// connected to was not sent this attempt: with no earlier attempt in doubt, that error
    /// is returned at once.
    async fn call_home_until_answered<C: surge_proto::Call>(&self, ino: Ino, call: C, on_busy: OnBusy) -> (Result<C::Reply>, bool) {
        let started = tokio::time::Instant::now();
        let mut pause = INSERT_RETRY_PAUSE;
        let mut in_doubt = false;
        loop {
            let outcome = match self.connection(ino::home(ino)).await {
                Err(e) if !in_doubt => return (Err(e), false),
                Err(e) => Err(e),
                Ok(_) => self.call_on_busy(ino::home(ino), call.clone(), on_busy).await,
            };
            match outcome {
                Err(e) if e.code.is_lost_contact() && started.elapsed() + pause < INSERT_RETRY_FOR => {
                    in_doubt = true;
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                }
                outcome => return (outcome, in_doubt),
            }
        }
    }

    /// mknod of a FIFO, socket or device node (`kind`), owned by this client's identity.
    pub async fn mknod_at(&self, parent: Ino, name: &str, kind: FileKind, mode: u32) -> Result<Attr> {
        self.mknod_at_with_umask(parent, name, kind, mode, 0).await
    }

    /// [`Client::mknod_at`] for a caller with a umask (see [`Client::create_at_with_umask`]).
    pub async fn mknod_at_with_umask(&self, parent: Ino, name: &str, kind: FileKind, mode: u32, umask: u32) -> Result<Attr> {
        let (uid, gid) = self.identity();
        self.call_home(parent, MakeNode { parent, name: name.to_string(), kind, mode, umask, uid, gid }).await
    }

    pub async fn readlink_ino(&self, ino: Ino) -> Result<String> {
        self.call_home(ino, Readlink { ino }).await
    }

    /// Finishes off an inode that lost a name: drops the link at its home when that is another
    /// server, and purges its chunks everywhere once nothing refers to it.
    pub async fn finish_unlinked(&self, unlinked: &Unlinked) -> Result<()> {
        self.finish_unlinked_saying_gone(unlinked).await.map(drop)
    }

    /// [`Client::finish_unlinked`], saying whether the inode is gone (true) or lives on,
    /// under another name or an open handle.
    pub(crate) async fn finish_unlinked_saying_gone(&self, unlinked: &Unlinked) -> Result<bool> {
        let finished = self.finish_unlinked_once(unlinked).await;
        if let Err(e) = &finished {
            // The name is gone whatever the caller is told: what is left is a link count too
            // high, or data without a file, until `surge fsck` repairs it.
            tracing::warn!(ino = format!("{:#x}", unlinked.ino), "an inode that lost a name was not finished off: {e}");
        }
        finished
    }

    async fn finish_unlinked_once(&self, unlinked: &Unlinked) -> Result<bool> {
        let (mut purge, mut size, mut ticket) = (unlinked.purge, unlinked.size, unlinked.ticket);
        if unlinked.remote {
            if unlinked.kind == FileKind::Dir {
                // A retired directory replaced by a rename.
                return self.call_home(unlinked.ino, DropInode { ino: unlinked.ino }).await.map(|()| true);
            }
            let fate = self.call_home(unlinked.ino, DropLink { ino: unlinked.ino, ticket: unlinked.ticket }).await?;
            (purge, size, ticket) = (fate.purge, fate.size, fate.ticket);
        }
        if purge {
            // The name is gone and the data nobody's: nothing the caller does next waits for it.
            self.purge_data_behind(unlinked.ino, size, ticket).await;
        }
        Ok(purge)
    }

    /// [`Client::purge_data`] for a file nobody holds any longer, with the answers left to the
    /// background ([`crate::background`]): the purges are sent now, so each server takes its
    /// own before this client's next request to it; one that cannot be reached gets them
    /// again later ([`Client::purge_later`]).
    pub(crate) async fn purge_data_behind(&self, ino: Ino, size: u64, ticket: Option<Ticket>) {
        let mut pending = Vec::new();
        for server in self.data_holders(ino, size) {
            match self.send(server, &PurgeData { ino, ticket }.into(), bytes::Bytes::new()).await {
                Ok(sent) => pending.push(sent),
                Err(e) if e.code.is_lost_contact() => return self.purge_later(ino, size, ticket, e),
                Err(e) => return tracing::warn!(ino = format!("{ino:#x}"), "the data of a removed file was not freed: {e}"),
            }
        }
        if pending.is_empty() {
            return;
        }
        let (client, timeout) = (self.clone(), self.timeout());
        self.in_background(async move {
            for sent in pending {
                match sent.wait(timeout).await.and_then(|answer| answer.reply::<PurgeData>()) {
                    Ok(()) => {}
                    Err(e) if e.code.is_lost_contact() => return client.purge_later(ino, size, ticket, e),
                    Err(e) => tracing::warn!(ino = format!("{ino:#x}"), "the data of a removed file was not freed: {e}"),
                }
            }
        })
        .await;
    }

    /// Purges a gone file's data again and again, in the background, while the servers that
    /// hold it cannot be reached (stopped, restarting, cut off): until every one has answered,
    /// for up to [`PURGE_RETRY_FOR`]. Purging is idempotent. What is still left after that, or
    /// when this client ends first, is orphaned data that `surge fsck --repair` frees.
    fn purge_later(&self, ino: Ino, size: u64, ticket: Option<Ticket>, first: Error) {
        tracing::info!(ino = format!("{ino:#x}"), "the data of a removed file will be freed once its servers answer: {first}");
        let client = self.clone();
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let mut pause = std::time::Duration::from_secs(1);
            while started.elapsed() < PURGE_RETRY_FOR {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(30));
                match client.purge_data(ino, size, ticket).await {
                    Ok(()) => return,
                    Err(e) if e.code.is_lost_contact() => continue,
                    Err(e) => {
                        tracing::warn!(ino = format!("{ino:#x}"), "the data of a removed file was not freed: {e}");
                        return;
                    }
                }
            }
            tracing::warn!(
                ino = format!("{ino:#x}"),
                "the data of a removed file was not freed: its servers did not answer for {PURGE_RETRY_FOR:?}"
            );
        });
    }

    /// Deletes a gone file's chunks on the servers that can hold some: those of the chunks
    /// below how far its data reached (its final size, or more: [`Unlinked::size`]; none for
    /// a striped file that never held data, which makes unlinking small and empty files one
    /// round trip). A file held whole by one server may have a data file
    /// there even when empty (a passthrough handle makes it at open): that server is told in
    /// any case, and for an empty file the answer is not waited for.
    pub(crate) async fn purge_data(&self, ino: Ino, size: u64, ticket: Option<Ticket>) -> Result<()> {
        if let Some(server) = self.layout().sole_server(ino) {
            let pending = self.send(server, &PurgeData { ino, ticket }.into(), bytes::Bytes::new()).await?;
            if size == 0 {
                return Ok(());
            }
            return pending.wait(self.timeout()).await?.reply::<PurgeData>();
        }
        self.send_to(self.data_holders(ino, size).into_iter(), PurgeData { ino, ticket }).await
    }

    /// The servers that can hold data of file `ino` whose data reaches `reach` bytes: the one
    /// that holds it whole, or those of its chunks below `reach` (none for a striped file that
    /// never held data).
    pub(crate) fn data_holders(&self, ino: Ino, reach: u64) -> Vec<usize> {
        match self.layout().sole_server(ino) {
            Some(holder) => vec![holder],
            None => self.layout().chunk_servers(ino, 0..reach.div_ceil(self.chunk_size())).into_iter().collect(),
        }
    }

    pub async fn unlink_at(&self, parent: Ino, name: &str) -> Result<()> {
        self.unlink_telling_dir(parent, name).await.map(drop)
    }

    /// [`Client::unlink_at`], answering the directory's attributes right after the unlink,
    /// as its home gave them (for a client that caches them: the mount).
    pub async fn unlink_telling_dir(&self, parent: Ino, name: &str) -> Result<Unlinked> {
        let unlinked = self.call_home(parent, Unlink { parent, name: name.to_string() }).await?;
        self.finish_unlinked(&unlinked).await?;
        Ok(unlinked)
    }

    pub async fn rmdir_at(&self, parent: Ino, name: &str) -> Result<()> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.call_home(parent, Rmdir { parent, name: name.to_string() }).await {
                Err(e) if e.code == ErrorCode::NeedsRetire => {
                    // The directory is homed elsewhere: retire it there (fails if not empty, and
                    // keeps it empty), unlink its entry here, then delete it.
                    let ino = self.lookup_entry(parent, name).await?.ino;
                    self.call_home(ino, RetireDir { ino }).await?;
                    match self.call_home(parent, RemoveEntry { parent, name: name.to_string(), ino }).await {
                        Ok(()) => return self.call_home(ino, DropInode { ino }).await,
                        Err(e) => {
                            self.give_back_retired(ino).await;
                            // Stale: another client replaced the name meanwhile; what it names
                            // now is removed (or refused) afresh.
                            if e.code != ErrorCode::Stale || attempts == TARGET_CHANGED_ATTEMPTS {
                                return Err(busy_if_stale(e));
                            }
                        }
                    }
                }
                other => return other,
            }
        }
    }

    /// Atomic rename, also over an existing target and of directories. A target directory
    /// homed on a third server is retired first; another client replacing it meanwhile makes
    /// the rename retire the new one and try again, [`TARGET_CHANGED_ATTEMPTS`] times in all
    /// before it gives up with EBUSY.
    pub async fn rename_at(&self, src_parent: Ino, src_name: &str, dst_parent: Ino, dst_name: &str, noreplace: bool) -> Result<()> {
        check_name(dst_name)?;
        let mut retired: Option<Ino> = None;
        let mut attempts = 0;
        let result = loop {
            attempts += 1;
            let attempt = if ino::home(src_parent) == ino::home(dst_parent) {
                if src_parent != dst_parent {
                    // The home checks `..` only as far as it holds the chain.
                    self.check_not_moved_into_itself(src_parent, src_name, dst_parent).await?;
                }
                let rename = Rename {
                    src_parent,
                    src_name: src_name.to_string(),
                    dst_parent,
                    dst_name: dst_name.to_string(),
                    noreplace,
                    retired_target: retired,
                };
                self.call_home(src_parent, rename).await
            } else {
                self.rename_across(src_parent, src_name, dst_parent, dst_name, noreplace, retired).await
            };
            match attempt {
                Err(e) if e.code == ErrorCode::NeedsRetire && attempts < TARGET_CHANGED_ATTEMPTS => {
                    // The target is an (empty) directory homed on a third server: retire it so
                    // it stays empty, then retry with that proof. Asked again, it means another
                    // client replaced the target meanwhile: the one retired is given back.
                    if let Some(before) = retired.take() {
                        self.give_back_retired(before).await;
                    }
                    let target = self.lookup_entry(dst_parent, dst_name).await?.ino;
                    self.call_home(target, RetireDir { ino: target }).await?;
                    retired = Some(target);
                }
                Err(e) if e.code == ErrorCode::NeedsRetire => break Err(Error::new(ErrorCode::Busy, "the target kept being replaced")),
                other => break other,
            }
        };
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(e) => {
                if let Some(target) = retired {
                    self.give_back_retired(target).await;
                }
                return Err(e);
            }
        };
        // The directory retired for the rename was moved away by another client before the
        // rename came (it then replaced nothing, or something else): it is given back.
        if let Some(target) = retired.filter(|&target| outcome.replaced.as_ref().map(|u| u.ino) != Some(target)) {
            self.give_back_retired(target).await;
        }
        self.finish_renamed(outcome, dst_parent).await
    }

    /// Undoes a `RetireDir` a step took and could not use. Best effort: a directory gone
    /// meanwhile has nothing to give back, and one left retired is what `surge fsck` finds.
    async fn give_back_retired(&self, dir: Ino) {
        let _ = self.call_home(dir, UnretireDir { ino: dir }).await;
    }

    /// Finishes a rename into `dst_parent` its home applied: a directory moved from another
    /// parent learns its new one at its own home, and what the rename replaced is finished off.
    /// Both steps are made whatever the other's outcome (a directory removed meanwhile fails
    /// its `..`, and the replaced inode must still lose its link); the first failure is told.
    pub(crate) async fn finish_renamed(&self, outcome: LinkOutcome, dst_parent: Ino) -> Result<()> {
        let reparented = match outcome.reparent {
            Some(ino) => self.call_home(ino, SetParent { ino, parent: dst_parent }).await.map(drop),
            None => Ok(()),
        };
        let finished = match &outcome.replaced {
            Some(u) => self.finish_unlinked(u).await,
            None => Ok(()),
        };
        reparented.and(finished)
    }

    /// Rename between directories homed on different servers: lock the source entry, link the
    /// target, then remove the source. The target never names anything half-made; for a
    /// moment both names refer to the same complete inode. A target locked by another rename
    /// makes this one let go of its source and try again after a random pause: two renames
    /// that cross (a to b while b to a) would otherwise each wait for the other's lock.
    async fn rename_across(
        &self,
        src_parent: Ino,
        src_name: &str,
        dst_parent: Ino,
        dst_name: &str,
        noreplace: bool,
        retired: Option<Ino>,
    ) -> Result<LinkOutcome> {
        until_uncrossed(|| self.rename_across_once(src_parent, src_name, dst_parent, dst_name, noreplace, retired)).await
    }

    /// One attempt of [`Client::rename_across`]: Busy when the target was locked (the source
    /// is let go again).
    async fn rename_across_once(
        &self,
        src_parent: Ino,
        src_name: &str,
        dst_parent: Ino,
        dst_name: &str,
        noreplace: bool,
        retired: Option<Ino>,
    ) -> Result<LinkOutcome> {
        let entry = self.call_home(src_parent, RenamePrepare { parent: src_parent, name: src_name.to_string() }).await?;
        let finish = |commit| self.rename_finish(RenameFinish { parent: src_parent, name: src_name.to_string(), ino: entry.ino, commit });
        let linked = async {
            if entry.kind == FileKind::Dir {
                self.check_not_ancestor(entry.ino, dst_parent).await?;
            }
            let insert = InsertEntry {
                parent: dst_parent,
                name: dst_name.to_string(),
                ino: entry.ino,
                kind: entry.kind,
                replace: !noreplace,
                retired_target: retired,
                new_dir: None,
            };
            self.insert_entry(insert, OnBusy::Return).await
        }
        .await;
        match linked {
            // The target is already another name of the same file (a link made meanwhile):
            // rename(2) then does nothing, and the source name stays.
            Err(e) if e.code == ErrorCode::Exists && !noreplace => {
                finish(false).await?;
                Ok(LinkOutcome::default())
            }
            Ok(outcome) => match finish(true).await {
                Ok(()) => Ok(outcome),
                Err(e) => {
                    // The target names the inode now, and what it named lost that name: that
                    // inode is finished off all the same, or its link count (and its data,
                    // if that was its last name) would outlive it.
                    if let Err(finishing) = self.finish_renamed(outcome, dst_parent).await {
                        tracing::warn!("finishing a rename whose source could not be removed ({e}): {finishing}");
                    }
                    Err(e)
                }
            },
            Err(e) => {
                let _ = finish(false).await;
                Err(e)
            }
        }
    }

    /// RENAME_EXCHANGE: `parent_a/name_a` and `parent_b/name_b` swap what they name. One
    /// step when both directories are homed on one server; otherwise both names are locked
    /// (as a rename between servers locks its source), then each is pointed at the other's
    /// inode. Programs see either the old pair or the new one: a name locked for the swap
    /// makes lookups wait (Busy) until it is done. A failure between the two pointings puts
    /// the first back; a crash there leaves both names on one inode, which `surge fsck`
    /// reports (the other inode goes to /lost+found).
    pub async fn exchange_at(&self, parent_a: Ino, name_a: &str, parent_b: Ino, name_b: &str) -> Result<()> {
        check_name(name_a)?;
        check_name(name_b)?;
        let moved = if ino::home(parent_a) == ino::home(parent_b) {
            let exchange = Exchange { parent_a, name_a: name_a.to_string(), parent_b, name_b: name_b.to_string() };
            self.call_home(parent_a, exchange).await?
        } else {
            // Two exchanges (or an exchange and a rename) that cross each let go and try again,
            // as renames between servers do.
            until_uncrossed(|| self.exchange_across(parent_a, name_a, parent_b, name_b)).await?
        };
        for (dir, parent) in moved {
            self.call_home(dir, SetParent { ino: dir, parent }).await?;
        }
        Ok(())
    }

    async fn exchange_across(&self, parent_a: Ino, name_a: &str, parent_b: Ino, name_b: &str) -> Result<Vec<(Ino, Ino)>> {
        let unlock = |parent: Ino, name: &str, ino: Ino| RenameFinish { parent, name: name.to_string(), ino, commit: false };
        let a = self.call_home(parent_a, RenamePrepare { parent: parent_a, name: name_a.to_string() }).await?;
        let prepare_b = RenamePrepare { parent: parent_b, name: name_b.to_string() };
        let b = match self.call_on_busy(ino::home(parent_b), prepare_b, OnBusy::Return).await {
            Ok(b) => b,
            Err(e) => {
                let _ = self.call_home(parent_a, unlock(parent_a, name_a, a.ino)).await;
                return Err(e);
            }
        };
        let swap = |parent: Ino, name: &str, expected: &DirEntry, to: &DirEntry| SwapEntry {
            parent,
            name: name.to_string(),
            expected: expected.ino,
            ino: to.ino,
            kind: to.kind,
        };
        let first = async {
            if a.kind == FileKind::Dir {
                self.check_not_ancestor(a.ino, parent_b).await?;
            }
            if b.kind == FileKind::Dir {
                self.check_not_ancestor(b.ino, parent_a).await?;
            }
            self.call_home(parent_a, swap(parent_a, name_a, &a, &b)).await
        };
        // One file under both names: nothing to swap.
        let first = if a.ino == b.ino { Ok(None) } else { first.await.map(Some) };
        let moved_b = match first {
            Ok(Some(moved)) => moved,
            other => {
                let _ = self.call_home(parent_a, unlock(parent_a, name_a, a.ino)).await;
                let _ = self.call_home(parent_b, unlock(parent_b, name_b, b.ino)).await;
                return other.map(|_| Vec::new());
            }
        };
        match self.call_home(parent_b, swap(parent_b, name_b, &b, &a)).await {
            Ok(moved_a) => Ok(moved_a.map(|dir| (dir, parent_b)).into_iter().chain(moved_b.map(|dir| (dir, parent_a))).collect()),
            Err(e) => {
                let _ = self.call_home(parent_a, swap(parent_a, name_a, &b, &a)).await;
                let _ = self.call_home(parent_b, unlock(parent_b, name_b, b.ino)).await;
                Err(e)
            }
        }
    }

    /// Refuses to move `parent/name` below itself, if it is a directory.
    async fn check_not_moved_into_itself(&self, parent: Ino, name: &str, target: Ino) -> Result<()> {
        let entry = self.lookup_entry(parent, name).await?;
        if entry.kind == FileKind::Dir {
            self.check_not_ancestor(entry.ino, target).await?;
        }
        Ok(())
    }

    /// Refuses to move directory `dir` below itself: walks `..` from `target` to the root.
    async fn check_not_ancestor(&self, dir: Ino, mut target: Ino) -> Result<()> {
        for _ in 0..4096 {
            if target == dir {
                return Err(Error::new(ErrorCode::Invalid, "cannot move a directory into itself"));
            }
            if target == ROOT_INO {
                return Ok(());
            }
            target = self.lookup_entry(target, "..").await?.ino;
        }
        Err(Error::new(ErrorCode::Invalid, "directory tree too deep"))
    }

    /// One page of a directory, in name order, starting after `after`, with the attributes
    /// of the entries its home holds (their `st_blocks` measured where unknown, all at once).
    pub async fn readdir_page(&self, ino: Ino, after: Option<String>, limit: u32) -> Result<DirPage> {
        self.readdir_page_watching(ino, after, limit, false).await
    }

    /// [`Client::readdir_page`] whose entries' attributes are watched as a lookup's are (a
    /// change made elsewhere comes as a notice): for a client that keeps them.
    pub async fn readdir_page_watching_attrs(&self, ino: Ino, after: Option<String>, limit: u32) -> Result<DirPage> {
        self.readdir_page_watching(ino, after, limit, true).await
    }

    /// `watch_attrs`: see [`Readdir`].
    async fn readdir_page_watching(&self, ino: Ino, after: Option<String>, limit: u32, watch_attrs: bool) -> Result<DirPage> {
        let mut page: DirPage = self.call_home(ino, Readdir { ino, after, limit, watch_names: true, watch_attrs }).await?;
        self.measure_blocks(page.entries.iter_mut().filter_map(|e| e.attr.as_mut()).collect()).await;
        Ok(page)
    }

    /// One page of a directory's names, with their numbers and kinds, in name order after
    /// `after`: for a listing that needs no attributes (`readdir(3)`), whose entries' blocks are
    /// then not measured, and whose names are handed on and not kept (not watched).
    pub async fn readdir_names_page(&self, ino: Ino, after: Option<String>, limit: u32) -> Result<DirPage> {
        self.call_home(ino, Readdir { ino, after, limit, watch_names: false, watch_attrs: false }).await
    }

    pub async fn readdir_ino(&self, ino: Ino) -> Result<Vec<DirEntry>> {
        self.readdir_all(ino, false).await
    }

    /// The whole directory, its entries' attributes watched as a lookup's are (a change made
    /// elsewhere comes as a notice): for a mount that hands them to its kernel with the names.
    pub async fn readdir_ino_watching_attrs(&self, ino: Ino) -> Result<Vec<DirEntry>> {
        self.readdir_all(ino, true).await
    }

    async fn readdir_all(&self, ino: Ino, watch_attrs: bool) -> Result<Vec<DirEntry>> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let DirPage { entries, more } = self.readdir_page_watching(ino, after, READDIR_PAGE, watch_attrs).await?;
            after = entries.last().map(|e| e.name.clone());
            all.extend(entries);
            if !more {
                return Ok(all);
            }
        }
    }
}

/// Runs `attempt` (a rename or exchange between servers, which hands back `Busy` after
/// letting go of what it locked) again after [`crossed_pause`] while it is `Busy`, for up to
/// [`BUSY_RETRY_FOR`].
async fn until_uncrossed<T, F: std::future::Future<Output = Result<T>>>(mut attempt: impl FnMut() -> F) -> Result<T> {
    let started = tokio::time::Instant::now();
    let mut round = 0;
    loop {
        match attempt().await {
            Err(e) if e.code == ErrorCode::Busy && started.elapsed() < BUSY_RETRY_FOR => {
                tokio::time::sleep(crossed_pause(round)).await;
                round += 1;
            }
            outcome => return outcome,
        }
    }
}

/// A pause before a rename that let go of its locked entry tries again: random, up to twice
/// as long each round (1 ms at first, 32 ms at most), so that two renames that crossed do not
/// cross again in step.
fn crossed_pause(round: u32) -> std::time::Duration {
    let mut random = [0u8; 4];
    let _ = getrandom::getrandom(&mut random);
    let ceiling = 1000u64 << round.min(5);
    std::time::Duration::from_micros(100 + u64::from(u32::from_le_bytes(random)) % ceiling)
}
