//! The namespace service: each request is one atomic step on this server's share of the
//! namespace ([`surge_meta`]), run under the metadata lock and, when some connection watches,
//! under the watch ledger, which records what the step told this connection and notifies the
//! others of what it changed ([`crate::watch`]).

use surge_meta::access::{Caller, Named, EXEC, READ, WRITE};
use surge_meta::error::{Result, ServerError};
use surge_meta::poison_free::LockRecover;
use surge_meta::InoMap;
use surge_meta::MetaStore;
use surge_proto::acl::Acl;
use surge_proto::admin::BatchOutcome;
use surge_proto::call::Handle;
use surge_proto::namespace::*;
use surge_proto::placement::DirLayout;
use surge_proto::{Call, DirEntry, DirPage, Ino, LinkOutcome, Unlinked};

use super::Answer;
use surge_proto::ticket::{Ticket, TicketKey, PURGE, UNLINK};

use crate::session::Session;
use crate::watch::Effects;
use surge_proto::ErrorCode;

/// What a step may touch besides the namespace: the connection's open handles; and whom it
/// checks permissions as (when the server checks identities).
pub(crate) struct StepContext<'a> {
    pub meta: &'a mut MetaStore,
    pub opens: &'a mut InoMap<u32>,
    /// Files this connection keeps (`Open { keep }`), let go if it goes away.
    pub kept: &'a mut InoMap<u32>,
    pub caller: Option<&'a Caller>,
    /// The servers' ticket key, when they check identities.
    pub ticket_key: Option<&'a TicketKey>,
    /// The largest size a file may have: what this server's data directory holds.
    pub largest_file: u64,
}

/// The permission checks of the steps, on the inodes this server homes. Without a caller
/// (a server that trusts its token holders) they pass.
///
/// The follow-up steps of operations spanning servers: `DropLink` needs the ticket the
/// server that removed the name gave; `RenameFinish` is checked as the removal it finishes;
/// `SetParent` takes write on the moved directory, `SetLinks` (fsck's) root. `RetireDir`,
/// `UnretireDir` and `DropInode` act only on empty directories (and unlinked inodes) and
/// are not checked.
impl StepContext<'_> {
    fn check(&self, ino: Ino, want: u32, what: &str) -> Result<()> {
        match self.caller {
            Some(caller) => caller.check(self.meta.perms(ino)?, want, what),
            None => Ok(()),
        }
    }

    /// Removing or replacing `parent/name` (sticky directories included).
    fn check_remove(&self, parent: Ino, name: &str) -> Result<()> {
        let Some(caller) = self.caller else { return Ok(()) };
        let entry = self.meta.lookup(parent, name).ok();
        let named = match &entry {
            None => Named::Nothing,
            Some(DirEntry { attr: Some(attr), .. }) => Named::Here(attr),
            Some(_) => Named::Elsewhere,
        };
        caller.check_remove(self.meta.perms(parent)?, named)
    }

    /// The ticket a purge of `ino`'s data needs, for this caller (when servers check
    /// identities): given with the answer of the step that left the file without names or
    /// handles.
    fn purge_ticket(&self, ino: Ino, purge: bool) -> Option<Ticket> {
        self.ticket(ino, PURGE).filter(|_| purge)
    }

    /// A ticket for `right` on `ino`, for this caller (where servers check identities).
    fn ticket(&self, ino: Ino, right: u32) -> Option<Ticket> {
        crate::caller::ticket_for(self.ticket_key, self.caller, ino, right)
    }

    /// An inode that lost a name here, with the ticket what remains to do needs: a purge of
    /// its data, or the drop of its link on its home (another server).
    fn with_ticket(&self, mut unlinked: Unlinked) -> Unlinked {
        unlinked.ticket = if unlinked.remote { self.ticket(unlinked.ino, UNLINK) } else { self.purge_ticket(unlinked.ino, unlinked.purge) };
        unlinked
    }

    /// Where servers check identities, a step that finishes what another server checked
    /// needs that server's ticket (root needs none).
    fn check_ticket(&self, ticket: &Option<Ticket>, ino: Ino, right: u32, what: &str) -> Result<()> {
        match (self.ticket_key, self.caller) {
            (Some(key), Some(caller)) if caller.uid != 0 => match ticket {
                Some(ticket) if ticket.allows(key, ino, caller.uid, right) => Ok(()),
                _ => Err(ServerError::new(ErrorCode::AccessDenied, format!("{what}: no valid ticket for uid {}", caller.uid))),
            },
            _ => Ok(()),
        }
    }

    /// A new name in `parent` for an inode owned by `uid:gid`.
    fn check_create(&self, parent: Ino, uid: u32, gid: u32) -> Result<()> {
        let Some(caller) = self.caller else { return Ok(()) };
        let dir = self.meta.perms(parent)?;
        caller.check(dir, WRITE | EXEC, "create")?;
        caller.check_new_owner(uid, gid, Some(dir.attr.gid))
    }
}

/// One namespace request as a step on this server.
pub(crate) trait Step: Call {
    /// Whether the step can tell or change anything a watcher holds (then it runs under the
    /// watch ledger, when anybody watches).
    const WATCHED: bool = true;
    /// Whether its changes must be durable before it is answered with `outcome`: a close or
    /// fsync publishing what a writer did, and every step a client follows with a step on
    /// another server that relies on this one (linking a name to a new inode, dropping an
    /// inode whose name was removed, purging a removed file's data): a crash here must not
    /// take back what the other server already built on. Others are durable a moment after.
    fn durable(&self, _outcome: &Result<Self::Reply>) -> bool {
        false
    }

    /// Why the step is taken only in a delegation's write-back (it names an inode number the
    /// holder chose), if it is: elsewhere it is refused before it runs.
    fn written_back_only(&self) -> Option<&'static str> {
        None
    }

    fn run(&self, cx: &mut StepContext) -> Result<Self::Reply>;

    /// What the step, answered with `reply`, told its connection and changed.
    fn effects(&self, _reply: &Self::Reply) -> Effects {
        Effects::default()
    }
}

/// A namespace step is answered by running it ([`Session::step`]); the calls that are no
/// steps have handlers of their own, with their features ([`crate::delegations`],
/// [`crate::locks`]).
impl<S: Step> Handle<S, Answer> for Session {
    fn handle(&mut self, step: S) -> Answer {
        if self.written_back.is_none() {
            if let Some(why) = step.written_back_only() {
                return Answer::Failure(ServerError::new(ErrorCode::Invalid, why));
            }
        }
        Answer::of::<S>(self.step(step))
    }
}

impl Session {
    /// Answers a namespace call, after the delegations' guard.
    pub(super) fn namespace(&mut self, request: NamespaceRequest) -> Answer {
        if let Err(e) = self.guard_delegated(&request) {
            return Answer::Failure(e);
        }
        request.dispatch(self)
    }

    /// One step of a batch: its encoded reply, or why it failed.
    pub(crate) fn batched(&mut self, request: NamespaceRequest) -> BatchOutcome {
        match self.namespace(request) {
            Answer::Reply { message, .. } => Ok(message),
            Answer::Failure(e) => Err(e.into()),
            // Namespace steps answer at once; a step that did not would be a bug here, told
            // to the client rather than taking the connection down.
            _ => Err(surge_proto::Error::new(surge_proto::ErrorCode::Io, "a batched step did not answer at once")),
        }
    }

    /// Runs a step under the metadata lock; when anybody watches, under the ledger too, so no
    /// change can slip between what a watcher is told and its registration.
    fn step<S: Step>(&mut self, step: S) -> Result<S::Reply> {
        let server = self.server.clone();
        let watching = S::WATCHED && (self.watcher.is_some() || server.watchers.any());
        let mut ledger = watching.then(|| server.watchers.lock());
        let reply = {
            let mut meta = server.meta.lock_or_recover();
            let mut cx = StepContext {
                meta: &mut meta,
                opens: &mut self.opens,
                kept: &mut self.kept,
                caller: self.caller.as_ref(),
                ticket_key: server.ticket_key.as_ref(),
                largest_file: server.data.largest_file(),
            };
            let reply = step.run(&mut cx);
            // Every step with its outcome, in the order applied (SURGE_LOG=surge_server::steps=trace):
            // an inode's history across the servers, for whoever hunts an inconsistency.
            tracing::trace!(target: "surge_server::steps", connection = self.lock_connection, written_back = self.written_back.is_some(), "{step:?} -> {reply:?}");
            if let Some(mark) = self.written_back.take() {
                meta.delegation_applied(mark.dir, mark.token, mark.seq);
            }
            // Journaled whatever the outcome: a failed step may have changed nothing, or
            // something before it failed. A write-back's steps are journaled at its end, which
            // its answer waits for.
            if !self.journal_at_end {
                let seq = server.journal_changes(&mut meta);
                if step.durable(&reply) {
                    self.durable = self.durable.max(Some(seq));
                }
            }
            reply?
        };
        if let Some(ledger) = ledger.as_mut() {
            let effects = Effects { attrs_awaited: self.awaits_watchers, ..step.effects(&reply) };
            let awaited = ledger.apply(self.watcher, effects);
            self.awaited.extend(awaited);
        }
        Ok(reply)
    }
}

/// An ACL a client sends in its xattr form (a header alone: none).
fn decode_acl(value: &Option<Vec<u8>>) -> Result<Option<Acl>> {
    Ok(value.as_deref().map(Acl::decode).transpose()?.flatten())
}

/// An open handle registered by this connection.
fn opened(cx: &mut StepContext, ino: Ino) {
    *cx.opens.entry(ino).or_default() += 1;
}

/// Takes one off what this connection counts of `ino` (its open handles, or what it keeps):
/// false when it counted none (another connection's, or one that broke and came back).
fn counted_down(counts: &mut InoMap<u32>, ino: Ino) -> bool {
    let Some(count) = counts.get_mut(&ino) else { return false };
    *count -= 1;
    if *count == 0 {
        counts.remove(&ino);
    }
    true
}

/// What a lookup of a name in `parent` told its connection: the directory's names, and the
/// attributes of what the name is if they came with it (homed here).
fn looked_up(parent: Ino, entry: &DirEntry) -> Effects {
    let mut fx = Effects { told_dirs: vec![parent], queried: true, ..Default::default() };
    if entry.attr.is_some() {
        fx.told_attrs.push(entry.ino);
    }
    fx
}

impl Step for Lookup {
    fn run(&self, cx: &mut StepContext) -> Result<DirEntry> {
        cx.check(self.parent, EXEC, "lookup")?;
        cx.meta.lookup(self.parent, &self.name)
    }

    fn effects(&self, entry: &DirEntry) -> Effects {
        looked_up(self.parent, entry)
    }
}

impl Step for GetAttr {
    fn run(&self, cx: &mut StepContext) -> Result<surge_proto::Attr> {
        cx.meta.getattr(self.ino)
    }

    fn effects(&self, _: &surge_proto::Attr) -> Effects {
        Effects { told_attrs: vec![self.ino], queried: true, ..Default::default() }
    }
}

impl Step for SetAttr {
    fn run(&self, cx: &mut StepContext) -> Result<surge_proto::Attr> {
        if let Some(caller) = cx.caller {
            caller.check_setattr(cx.meta.perms(self.ino)?, &self.changes)?;
        }
        if let Some(size) = self.changes.size.filter(|size| *size > cx.largest_file) {
            // Data files hold chunks at their offsets: a size past what they can reach could
            // never be written up to (ext4 refuses 16 TiB, as it refuses this truncate).
            return Err(ServerError::new(
                surge_proto::ErrorCode::FileTooLarge,
                format!("size {size} is past the largest file ({} bytes) the servers hold", cx.largest_file),
            ));
        }
        cx.meta.setattr_as(self.ino, &self.changes, cx.caller)
    }

    fn effects(&self, _: &surge_proto::Attr) -> Effects {
        Effects { changed_attrs: vec![self.ino], told_attrs: vec![self.ino], ..Default::default() }
    }
}

impl Step for Create {
    fn run(&self, cx: &mut StepContext) -> Result<DirEntry> {
        cx.check_create(self.parent, self.uid, self.gid)?;
        if let (Some(caller), Ok(DirEntry { attr: Some(existing), .. })) = (cx.caller, cx.meta.lookup(self.parent, &self.name)) {
            // Opening the file that is there already.
            if self.open && !self.exclusive {
                caller.check_open(cx.meta.perms(existing.ino)?)?;
            }
        }
        let place_on = self.place_on.map(|server| server as usize);
        let entry =
            cx.meta.create(self.parent, &self.name, self.mode, self.umask, self.uid, self.gid, self.exclusive, self.open, place_on)?;
        if self.open && entry.attr.is_some() {
            opened(cx, entry.ino);
        }
        Ok(entry)
    }

    fn effects(&self, entry: &DirEntry) -> Effects {
        let mut fx = Effects::default();
        fx.new_name(self.parent, &self.name, Some(entry.ino));
        fx
    }
}

/// A create written back by a delegation's holder (which [`Session::namespace`] checked):
/// the checks a create makes, with the holder's inode number.
impl Step for CreateAs {
    fn written_back_only(&self) -> Option<&'static str> {
        Some("a create-as is written back only in a delegation's write-back")
    }

    fn run(&self, cx: &mut StepContext) -> Result<DirEntry> {
        cx.check_create(self.parent, self.uid, self.gid)?;
        let entry = cx.meta.create_as(self.parent, &self.name, self.ino, self.mode, self.umask, self.uid, self.gid, self.open)?;
        if self.open {
            opened(cx, entry.ino);
        }
        Ok(entry)
    }

    fn effects(&self, entry: &DirEntry) -> Effects {
        let mut fx = Effects::default();
        fx.new_name(self.parent, &self.name, Some(entry.ino));
        fx
    }
}

impl Step for MakeNode {
    fn run(&self, cx: &mut StepContext) -> Result<surge_proto::Attr> {
        cx.check_create(self.parent, self.uid, self.gid)?;
        if matches!(self.kind, surge_proto::FileKind::CharDevice { .. } | surge_proto::FileKind::BlockDevice { .. })
            && cx.caller.is_some_and(|c| c.uid != 0)
        {
            return Err(ServerError::new(ErrorCode::NotPermitted, "only root makes device nodes"));
        }
        cx.meta.make_node(self.parent, &self.name, self.kind, self.mode, self.umask, self.uid, self.gid)
    }

    fn effects(&self, attr: &surge_proto::Attr) -> Effects {
        let mut fx = Effects::default();
        fx.new_name(self.parent, &self.name, Some(attr.ino));
        fx
    }
}

impl Step for Symlink {
    fn run(&self, cx: &mut StepContext) -> Result<surge_proto::Attr> {
        cx.check_create(self.parent, self.uid, self.gid)?;
        cx.meta.symlink(self.parent, &self.name, &self.target, self.uid, self.gid)
    }

    fn effects(&self, attr: &surge_proto::Attr) -> Effects {
        let mut fx = Effects::default();
        fx.new_name(self.parent, &self.name, Some(attr.ino));
        fx
    }
}

impl Step for Readlink {
    const WATCHED: bool = false;

    fn run(&self, cx: &mut StepContext) -> Result<String> {
        cx.meta.readlink(self.ino)
    }
}

impl Step for MakeDirInode {
    /// A new directory's inode: durable before its name is linked on another server, so that a
    /// crash cannot leave a name pointing at nothing.
    fn durable(&self, _: &Result<Self::Reply>) -> bool {
        true
    }

    fn run(&self, cx: &mut StepContext) -> Result<surge_proto::Attr> {
        // Its name, and the parent's permissions, are checked where it is linked (InsertEntry).
        if let Some(caller) = cx.caller {
            caller.check_new_owner(self.uid, self.gid, None)?;
        }
        let remote_default = decode_acl(&self.inherited.default_acl)?;
        let (layout, group) = (self.inherited.layout, self.inherited.group);
        cx.meta.make_dir_inode(self.parent, self.mode, self.umask, self.uid, self.gid, remote_default.as_ref(), layout, group, None)
    }

    /// Watched from birth: a client that made a directory may know all its names.
    fn effects(&self, attr: &surge_proto::Attr) -> Effects {
        Effects { told_attrs: vec![attr.ino], made_dir: Some(attr.ino), ..Default::default() }
    }
}

impl Step for LayoutOf {
    /// Watchers hold no layouts.
    const WATCHED: bool = false;

    fn run(&self, cx: &mut StepContext) -> Result<DirLayout> {
        if let Some(layout) = self.set {
            if let Some(caller) = cx.caller {
                caller.check_owner(&cx.meta.getattr(self.dir)?, "set a directory's layout")?;
            }
            cx.meta.set_layout(self.dir, layout)?;
        }
        cx.meta.layout_of(self.dir)
    }
}

impl Step for NoteAllocation {
    /// Not checked: a hint about a file's `st_blocks`, which is all it can change, and which
    /// the home keeps only while the file's content is at the version the note names.
    fn run(&self, cx: &mut StepContext) -> Result<()> {
        cx.meta.note_allocation(&self.notes);
        Ok(())
    }

    /// An allocation that changed (fallocate, a punched hole) drops the attributes other
    /// nodes' kernels hold; a measurement changes nothing they hold.
    fn effects(&self, _: &()) -> Effects {
        let changed_attrs = self.notes.iter().filter(|n| n.blocks.is_none()).map(|n| n.ino).collect();
        Effects { changed_attrs, ..Default::default() }
    }
}

impl Step for DropInode {
    const WATCHED: bool = false;

    fn run(&self, cx: &mut StepContext) -> Result<()> {
        cx.meta.drop_inode(self.ino)
    }
}

impl Step for MakeDir {
    /// Durable once answered, as the link step of a mkdir in two steps is.
    fn durable(&self, _: &Result<Self::Reply>) -> bool {
        true
    }

    fn written_back_only(&self) -> Option<&'static str> {
        self.ino.map(|_| "a mkdir with a number is written back only in a delegation's write-back")
    }

    fn run(&self, cx: &mut StepContext) -> Result<surge_proto::Attr> {
        cx.check(self.parent, WRITE | EXEC, "make a directory")?;
        if let Some(caller) = cx.caller {
            caller.check_new_owner(self.uid, self.gid, None)?;
        }
        cx.meta.make_dir(self.parent, &self.name, self.mode, self.umask, self.uid, self.gid, self.ino)
    }

    /// The new name, and the new directory watched from birth (as `MakeDirInode`'s).
    fn effects(&self, attr: &surge_proto::Attr) -> Effects {
        let mut fx = Effects::default();
        fx.new_name(self.parent, &self.name, Some(attr.ino));
        fx.made_dir = Some(attr.ino);
        fx
    }
}

impl Step for InsertEntry {
    /// The new name of a cross-server rename (or a new directory): durable once answered.
    fn durable(&self, _: &Result<Self::Reply>) -> bool {
        true
    }

    fn run(&self, cx: &mut StepContext) -> Result<LinkOutcome> {
        cx.check(self.parent, WRITE | EXEC, "link a name")?;
        if self.replace {
            cx.check_remove(self.parent, &self.name)?;
        }
        if let Some(inherited) = &self.new_dir {
            // A new directory made elsewhere is linked only with the default ACL, layout and
            // group it should have inherited (the client asks again, and makes it again, on
            // Stale).
            if decode_acl(&inherited.default_acl)?.as_ref() != cx.meta.default_acl_of(self.parent) {
                return Err(ServerError::new(ErrorCode::Stale, "the new directory did not inherit its parent's default ACL"));
            }
            if inherited.layout != cx.meta.layout_of(self.parent)? {
                return Err(ServerError::new(ErrorCode::Stale, "the new directory did not inherit its parent's layout"));
            }
            if inherited.group != cx.meta.set_gid_group(self.parent) {
                return Err(ServerError::new(ErrorCode::Stale, "the new directory did not inherit its set-group-ID parent's group"));
            }
        }
        let mut outcome = cx.meta.insert_entry(self.parent, &self.name, self.ino, self.kind, self.replace, self.retired_target)?;
        outcome.replaced = outcome.replaced.map(|unlinked| cx.with_ticket(unlinked));
        Ok(outcome)
    }

    fn effects(&self, outcome: &LinkOutcome) -> Effects {
        let mut fx = Effects::default();
        fx.new_name(self.parent, &self.name, None);
        fx.lost_link(outcome.replaced.as_ref());
        fx
    }
}

impl Step for Unlink {
    /// Before the client drops the link at the inode's home or purges the file's data.
    fn durable(&self, unlinked: &Result<Unlinked>) -> bool {
        unlinked.as_ref().is_ok_and(|u| u.remote || (u.purge && u.size > 0))
    }

    fn run(&self, cx: &mut StepContext) -> Result<Unlinked> {
        cx.check_remove(self.parent, &self.name)?;
        let mut unlinked = cx.meta.unlink(self.parent, &self.name)?;
        unlinked.dir_attr = cx.meta.getattr(self.parent).ok();
        Ok(cx.with_ticket(unlinked))
    }

    fn effects(&self, unlinked: &Unlinked) -> Effects {
        let mut fx = Effects::default();
        fx.removed_name(self.parent, &self.name);
        fx.lost_link(Some(unlinked));
        fx
    }
}

impl Step for Rmdir {
    fn run(&self, cx: &mut StepContext) -> Result<()> {
        cx.check_remove(self.parent, &self.name)?;
        cx.meta.rmdir(self.parent, &self.name)
    }

    fn effects(&self, _: &()) -> Effects {
        let mut fx = Effects::default();
        fx.removed_name(self.parent, &self.name);
        fx
    }
}

impl Step for RetireDir {
    const WATCHED: bool = false;

    /// Before the directory's name is removed on its parent's server.
    fn durable(&self, _: &Result<()>) -> bool {
        true
    }

    fn run(&self, cx: &mut StepContext) -> Result<()> {
        cx.meta.set_retired(self.ino, true)
    }
}

impl Step for UnretireDir {
    const WATCHED: bool = false;

    fn run(&self, cx: &mut StepContext) -> Result<()> {
        cx.meta.set_retired(self.ino, false)
    }
}

impl Step for RemoveEntry {
    /// Before the directory it named is dropped on its own server.
    fn durable(&self, _: &Result<()>) -> bool {
        true
    }

    fn run(&self, cx: &mut StepContext) -> Result<()> {
        cx.check_remove(self.parent, &self.name)?;
        cx.meta.remove_entry(self.parent, &self.name, self.ino)
    }

    fn effects(&self, _: &()) -> Effects {
        let mut fx = Effects::default();
        fx.removed_name(self.parent, &self.name);
        fx
    }
}

impl Step for DropLink {
    /// Before the client purges the data of the file it ended.
    fn durable(&self, fate: &Result<surge_proto::InodeFate>) -> bool {
        fate.as_ref().is_ok_and(|fate| fate.purge && fate.size > 0)
    }

    fn run(&self, cx: &mut StepContext) -> Result<surge_proto::InodeFate> {
        cx.check_ticket(&self.ticket, self.ino, UNLINK, "drop a link")?;
        let mut fate = cx.meta.drop_link(self.ino)?;
        fate.ticket = cx.purge_ticket(self.ino, fate.purge);
        Ok(fate)
    }

    fn effects(&self, fate: &surge_proto::InodeFate) -> Effects {
        let mut fx = Effects { changed_attrs: vec![self.ino], ..Default::default() };
        if fate.purge {
            fx.gone.push(self.ino);
        }
        fx
    }
}

impl Step for AddLink {
    /// Before the new name goes in on the directory's server: a count that a crash took back
    /// would be one below the names.
    fn durable(&self, _: &Result<surge_proto::LinkAdded>) -> bool {
        true
    }

    fn run(&self, cx: &mut StepContext) -> Result<surge_proto::LinkAdded> {
        if let Some(caller) = cx.caller {
            caller.check_link(cx.meta.perms(self.ino)?)?;
        }
        let attr = cx.meta.add_link(self.ino)?;
        Ok(surge_proto::LinkAdded { attr, undo: cx.ticket(self.ino, UNLINK) })
    }

    fn effects(&self, _: &surge_proto::LinkAdded) -> Effects {
        Effects { changed_attrs: vec![self.ino], told_attrs: vec![self.ino], ..Default::default() }
    }
}

impl Step for SetParent {
    fn run(&self, cx: &mut StepContext) -> Result<()> {
        // A directory moved to another parent: its `..` changes, which takes write on it.
        cx.check(self.ino, WRITE, "move a directory")?;
        cx.meta.set_parent(self.ino, self.parent)
    }

    fn effects(&self, _: &()) -> Effects {
        Effects { changed_attrs: vec![self.ino], ..Default::default() }
    }
}

impl Step for SetLinks {
    /// A repair is answered once it would survive a crash.
    fn durable(&self, _: &Result<Self::Reply>) -> bool {
        true
    }

    fn run(&self, cx: &mut StepContext) -> Result<surge_proto::Attr> {
        if cx.caller.is_some_and(|caller| caller.uid != 0) {
            return Err(ServerError::new(ErrorCode::NotPermitted, "set-links is fsck's repair: root only"));
        }
        cx.meta.set_links(self.ino, self.expected, self.nlink)
    }

    fn effects(&self, _: &surge_proto::Attr) -> Effects {
        Effects { changed_attrs: vec![self.ino], ..Default::default() }
    }
}

impl Step for Rename {
    /// A rename publishes a file under its final name: once answered, it survives a crash.
    fn durable(&self, _: &Result<Self::Reply>) -> bool {
        true
    }

    fn run(&self, cx: &mut StepContext) -> Result<LinkOutcome> {
        cx.check_remove(self.src_parent, &self.src_name)?;
        cx.check(self.dst_parent, WRITE | EXEC, "rename")?;
        if !self.noreplace {
            cx.check_remove(self.dst_parent, &self.dst_name)?;
        }
        let mut outcome =
            cx.meta.rename(self.src_parent, &self.src_name, self.dst_parent, &self.dst_name, self.noreplace, self.retired_target)?;
        outcome.replaced = outcome.replaced.map(|unlinked| cx.with_ticket(unlinked));
        Ok(outcome)
    }

    fn effects(&self, outcome: &LinkOutcome) -> Effects {
        let mut fx = Effects::default();
        fx.removed_name(self.src_parent, &self.src_name);
        fx.new_name(self.dst_parent, &self.dst_name, None);
        fx.lost_link(outcome.replaced.as_ref());
        fx
    }
}

impl Step for Exchange {
    /// Like a rename: durable once answered.
    fn durable(&self, _: &Result<Self::Reply>) -> bool {
        true
    }

    fn run(&self, cx: &mut StepContext) -> Result<Vec<(Ino, Ino)>> {
        // Each name is replaced: the rules of removing it apply to both.
        cx.check_remove(self.parent_a, &self.name_a)?;
        cx.check_remove(self.parent_b, &self.name_b)?;
        cx.meta.exchange(self.parent_a, &self.name_a, self.parent_b, &self.name_b)
    }

    fn effects(&self, _: &Vec<(Ino, Ino)>) -> Effects {
        let mut fx = Effects::default();
        fx.new_name(self.parent_a, &self.name_a, None);
        fx.new_name(self.parent_b, &self.name_b, None);
        fx
    }
}

impl Step for SwapEntry {
    fn durable(&self, _: &Result<Self::Reply>) -> bool {
        true
    }

    fn run(&self, cx: &mut StepContext) -> Result<Option<Ino>> {
        cx.check_remove(self.parent, &self.name)?;
        cx.meta.swap_entry(self.parent, &self.name, self.expected, self.ino, self.kind)
    }

    fn effects(&self, _: &Option<Ino>) -> Effects {
        let mut fx = Effects::default();
        fx.new_name(self.parent, &self.name, None);
        fx
    }
}

impl Step for RenamePrepare {
    const WATCHED: bool = false;

    fn run(&self, cx: &mut StepContext) -> Result<DirEntry> {
        cx.check_remove(self.parent, &self.name)?;
        cx.meta.rename_prepare(self.parent, &self.name)
    }
}

impl Step for RenameFinish {
    /// The end of a cross-server rename: durable once answered, like a rename on one server.
    fn durable(&self, _: &Result<Self::Reply>) -> bool {
        true
    }

    fn run(&self, cx: &mut StepContext) -> Result<()> {
        if self.commit {
            cx.check_remove(self.parent, &self.name)?;
        }
        cx.meta.rename_finish(self.parent, &self.name, self.ino, self.commit)
    }

    fn effects(&self, _: &()) -> Effects {
        let mut fx = Effects::default();
        if self.commit {
            fx.removed_name(self.parent, &self.name);
        }
        fx
    }
}

impl Step for Readdir {
    fn run(&self, cx: &mut StepContext) -> Result<DirPage> {
        cx.check(self.ino, READ, "list")?;
        let (entries, more) = cx.meta.readdir(self.ino, self.after.as_deref(), self.limit)?;
        Ok(DirPage { entries, more })
    }

    fn effects(&self, page: &DirPage) -> Effects {
        let told_attrs = match self.watch_attrs {
            true => page.entries.iter().filter(|e| e.attr.is_some()).map(|e| e.ino).collect(),
            false => Vec::new(),
        };
        let told_dirs = if self.watch_names { vec![self.ino] } else { Vec::new() };
        Effects { told_dirs, told_attrs, listed: self.watch_attrs.then_some(self.ino), queried: true, ..Default::default() }
    }
}

impl Step for Append {
    fn run(&self, cx: &mut StepContext) -> Result<u64> {
        if let Some(caller) = cx.caller {
            caller.check_publish(cx.meta.perms(self.ino)?)?;
        }
        cx.meta.append(self.ino, self.len)
    }

    fn effects(&self, _: &u64) -> Effects {
        Effects { changed_attrs: vec![self.ino], ..Default::default() }
    }
}

impl Step for IssueTicket {
    const WATCHED: bool = false;

    fn run(&self, cx: &mut StepContext) -> Result<Ticket> {
        let (Some(key), Some(caller)) = (cx.ticket_key, cx.caller) else {
            return Err(ServerError::new(ErrorCode::NotSupported, "this server does not check identities: no tickets"));
        };
        let perms = cx.meta.perms(self.ino)?;
        let mut rights = 0;
        if caller.may(perms, READ) {
            rights |= surge_proto::ticket::READ;
        }
        // The owner may write a file it made read-only (see Caller::check_publish).
        if caller.may(perms, WRITE) || perms.attr.uid == caller.uid {
            rights |= surge_proto::ticket::WRITE;
        }
        if rights == 0 {
            return Err(ServerError::new(ErrorCode::AccessDenied, format!("open: permission denied to uid {}", caller.uid)));
        }
        Ok(Ticket::issue(key, self.ino, caller.uid, rights))
    }
}

impl Step for Open {
    fn run(&self, cx: &mut StepContext) -> Result<surge_proto::Attr> {
        if let Some(caller) = cx.caller {
            caller.check_open(cx.meta.perms(self.ino)?)?;
        }
        let attr = cx.meta.open(self.ino)?;
        opened(cx, self.ino);
        if self.keep && attr.kind == surge_proto::FileKind::File {
            cx.meta.keep(self.ino)?;
            *cx.kept.entry(self.ino).or_default() += 1;
        }
        Ok(attr)
    }

    fn effects(&self, attr: &surge_proto::Attr) -> Effects {
        let kept_open = (self.keep && attr.kind == surge_proto::FileKind::File).then_some(self.ino);
        Effects { told_attrs: vec![self.ino], kept_open, ..Default::default() }
    }
}

impl Step for OpenAt {
    fn run(&self, cx: &mut StepContext) -> Result<DirEntry> {
        cx.check(self.parent, EXEC, "lookup")?;
        let mut entry = cx.meta.lookup(self.parent, &self.name)?;
        if entry.kind == surge_proto::FileKind::File && entry.attr.is_some() {
            if let Some(caller) = cx.caller {
                caller.check_open(cx.meta.perms(entry.ino)?)?;
            }
            entry.attr = Some(cx.meta.open(entry.ino)?);
            opened(cx, entry.ino);
        }
        Ok(entry)
    }

    fn effects(&self, entry: &DirEntry) -> Effects {
        // What the open tells is not kept by a watcher that keeps exactly (it opened, not asked).
        Effects { queried: false, ..looked_up(self.parent, entry) }
    }
}

impl Step for ReleaseKept {
    /// Only what this connection kept is let go (as `Commit` releases only its own handles).
    fn run(&self, cx: &mut StepContext) -> Result<surge_proto::InodeFate> {
        if !counted_down(cx.kept, self.ino) {
            return Ok(surge_proto::InodeFate { purge: false, size: 0, ticket: None, published: None });
        }
        let mut fate = cx.meta.release_kept(self.ino)?;
        fate.ticket = cx.purge_ticket(self.ino, fate.purge);
        Ok(fate)
    }

    fn effects(&self, fate: &surge_proto::InodeFate) -> Effects {
        Effects { gone: if fate.purge { vec![self.ino] } else { Vec::new() }, ..Default::default() }
    }
}

impl Step for Commit {
    /// A close or fsync that publishes a size or time: what close-to-open promises other
    /// nodes must survive a crash once answered. (A close with nothing to publish, after a
    /// create or a read, waits for nothing.)
    fn durable(&self, _: &Result<Self::Reply>) -> bool {
        self.size.is_some() || self.mtime.is_some()
    }

    fn run(&self, cx: &mut StepContext) -> Result<surge_proto::InodeFate> {
        // Only a handle this connection opened is released: another connection's stays open
        // (its file is not purged under it). A client whose connection broke and came back
        // releases nothing here, its handles went with the old connection.
        if let (Some(caller), true) = (cx.caller, self.size.is_some() || self.mtime.is_some()) {
            caller.check_publish(cx.meta.perms(self.ino)?)?;
        }
        let held = self.release && counted_down(cx.opens, self.ino);
        let mut fate = cx.meta.commit(self.ino, self.size, self.mtime, held, self.wrote)?;
        fate.ticket = cx.purge_ticket(self.ino, fate.purge);
        Ok(fate)
    }

    fn effects(&self, fate: &surge_proto::InodeFate) -> Effects {
        let mut fx = Effects::default();
        if self.size.is_some() || self.mtime.is_some() {
            fx.changed_attrs.push(self.ino);
        }
        if fate.purge {
            fx.gone.push(self.ino);
        }
        fx
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{Attr, AttrChanges, FileKind, InodeFate, Timestamp};

    /// Every step that tells or changes something a watcher holds runs under the ledger; the
    /// ones that skip it (readlink, the retire and drop steps of cross-server operations, the
    /// rename lock) have nothing to record.
    #[test]
    fn every_step_with_effects_is_watched() {
        let attr = Attr {
            ino: 7,
            kind: FileKind::File,
            mode: 0o644,
            uid: 0,
            gid: 0,
            size: 0,
            nlink: 1,
            atime: Timestamp::default(),
            mtime: Timestamp::default(),
            ctime: Timestamp::default(),
            blocks: Some(0),
        };
        let entry = DirEntry { name: "x".into(), ino: 7, kind: FileKind::File, attr: Some(attr.clone()), has_xattrs: false };
        let unlinked = Unlinked { ino: 7, kind: FileKind::File, remote: false, purge: true, size: 0, ticket: None, dir_attr: None };
        let replaced = LinkOutcome { replaced: Some(unlinked.clone()), reparent: None };
        let name = || "x".to_string();
        fn watched<S: Step>(step: S, reply: S::Reply) -> (bool, bool) {
            (S::WATCHED, step.effects(&reply) != Effects::default())
        }
        let cases = [
            ("lookup", watched(Lookup { parent: 1, name: name() }, entry.clone())),
            ("getattr", watched(GetAttr { ino: 7 }, attr.clone())),
            ("open", watched(Open { ino: 7, keep: false }, attr.clone())),
            ("setattr", watched(SetAttr { ino: 7, changes: AttrChanges::default() }, attr.clone())),
            (
                "create",
                watched(
                    Create { parent: 1, name: name(), mode: 0o644, umask: 0, uid: 0, gid: 0, exclusive: true, open: true, place_on: None },
                    entry.clone(),
                ),
            ),
            ("symlink", watched(Symlink { parent: 1, name: name(), target: "t".into(), uid: 0, gid: 0 }, attr.clone())),
            (
                "mkdir-inode",
                watched(MakeDirInode { parent: 1, mode: 0o755, umask: 0, uid: 0, gid: 0, inherited: Default::default() }, attr.clone()),
            ),
            (
                "insert-entry",
                watched(
                    InsertEntry {
                        parent: 1,
                        name: name(),
                        ino: 7,
                        kind: FileKind::File,
                        replace: true,
                        retired_target: None,
                        new_dir: None,
                    },
                    replaced.clone(),
                ),
            ),
            ("unlink", watched(Unlink { parent: 1, name: name() }, unlinked.clone())),
            ("rmdir", watched(Rmdir { parent: 1, name: name() }, ())),
            ("remove-entry", watched(RemoveEntry { parent: 1, name: name(), ino: 7 }, ())),
            ("rename-finish", watched(RenameFinish { parent: 1, name: name(), ino: 7, commit: true }, ())),
            (
                "rename",
                watched(
                    Rename { src_parent: 1, src_name: name(), dst_parent: 2, dst_name: name(), noreplace: false, retired_target: None },
                    LinkOutcome::default(),
                ),
            ),
            ("drop-link", watched(DropLink { ino: 7, ticket: None }, InodeFate { purge: true, size: 0, ticket: None, published: None })),
            ("set-parent", watched(SetParent { ino: 7, parent: 2 }, ())),
            (
                "commit",
                watched(
                    Commit { ino: 7, size: Some(1), mtime: None, release: false, wrote: false },
                    InodeFate { purge: false, size: 1, ticket: None, published: None },
                ),
            ),
            ("readdir", watched(Readdir { ino: 1, after: None, limit: 10, watch_names: true, watch_attrs: false }, DirPage::default())),
            ("readlink", watched(Readlink { ino: 7 }, "t".into())),
            ("retire-dir", watched(RetireDir { ino: 7 }, ())),
            ("unretire-dir", watched(UnretireDir { ino: 7 }, ())),
            ("drop-inode", watched(DropInode { ino: 7 }, ())),
            ("rename-prepare", watched(RenamePrepare { parent: 1, name: name() }, entry.clone())),
            ("get-xattr", watched(GetXattr { ino: 7, name: "user.x".into() }, Vec::new())),
            ("list-xattr", watched(ListXattr { ino: 7 }, Vec::new())),
            (
                "set-xattr",
                watched(
                    SetXattr { ino: 7, name: "user.x".into(), value: Vec::new(), mode: surge_proto::XattrSetMode::Either, by: None },
                    attr.clone(),
                ),
            ),
            ("remove-xattr", watched(RemoveXattr { ino: 7, name: "user.x".into() }, attr.clone())),
            ("note-allocation", watched(NoteAllocation { notes: Vec::new() }, ())),
        ];
        for (name, (is_watched, has_effects)) in cases {
            assert!(!has_effects || is_watched, "{name} has effects and must take the ledger");
        }
        let with_effects = cases.iter().filter(|(_, (_, fx))| *fx).count();
        assert_eq!(with_effects, 19, "the steps that tell or change what watchers hold");
    }
}
