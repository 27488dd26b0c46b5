//! Replication: this server's share mirrored on its successor, and its predecessor's share
//! mirrored here (see [`surge_proto::mirror`] for the protocol and what a mirror holds).
//!
//! * [`Feed`]: what changed here, in order, for the link to send. Changes are noted after
//!   they are made, as *what* changed, not with the bytes: a data change is a byte range of a
//!   data file, which the link reads back when it sends it. Since every change is noted after
//!   it was made and each note is sent with the file as it is then, the mirror ends up with
//!   every byte's last value whatever the order concurrent writers interleave in, and a range
//!   sent twice (while the whole share is sent at the start) is harmless. The journal is the
//!   exception: its bytes are sent as written, in the order written (noted under the
//!   journal's file lock), since records replayed twice are not harmless.
//! * [`link`]: the connection to the successor: fills the mirror (the whole share), then
//!   sends each change; a request whose change must be on both nodes before it is answered
//!   waits for the mirror's reply ([`Feed::reached`]). When the successor cannot be reached
//!   the share goes on alone (and the log says so) until it can, then fills the mirror again.
//! * [`replica`]: the predecessor's share mirrored here, and taking its share over once it is lost.
//! * [`failover`]: the checks that take a lost server's share over without being asked, and
//!   fence this server when it is the one cut off.
//! * [`Replication`]: all of it as one server holds it.

pub mod failover;
pub mod link;
pub mod replica;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::server::ServerState;

/// A server's part in replication: the feed of its share's changes and the link that sends
/// them to its mirror, the failover checks and whether they fenced it, the predecessor's share
/// mirrored here, and the lost servers' shares it serves from their mirrors.
pub struct Replication {
    /// Changes of this share for its mirror.
    pub feed: Arc<Feed>,
    /// The link sending them (see [`link`]).
    pub(crate) link: Mutex<Option<tokio::task::AbortHandle>>,
    /// Automatic failover's checks (see [`failover`]).
    pub(crate) failover: Mutex<Option<tokio::task::AbortHandle>>,
    /// Set by the checks when this server is cut off from most of the instance: it answers
    /// nothing, lest its share be served twice.
    pub(crate) fenced: AtomicBool,
    /// The previous server's share mirrored here (instances with two replicas).
    pub(crate) replica: Option<Mutex<replica::Replica>>,
    /// Shares of lost servers served from their mirrors here, by server index.
    pub(crate) stand_ins: Mutex<HashMap<usize, Arc<ServerState>>>,
}

impl Replication {
    pub(crate) fn new(feed: Arc<Feed>, replica: Option<Mutex<replica::Replica>>) -> Replication {
        Replication {
            feed,
            link: Mutex::new(None),
            failover: Mutex::new(None),
            fenced: AtomicBool::new(false),
            replica,
            stand_ins: Mutex::new(HashMap::new()),
        }
    }
}

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use surge_meta::poison_free::LockRecover;
use surge_proto::{Ino, MirrorState};
use tokio::sync::{mpsc, watch};

/// One change to send, as noted.
#[derive(Debug)]
pub(crate) enum Change {
    /// Journal bytes written at byte `at` of the journal file, holding the records up to `seq`.
    Journal { at: u64, bytes: Vec<u8>, seq: u64 },
    /// The journal was folded: the new snapshot (holding the records up to `seq`); the
    /// journal is empty after it.
    Snapshot { bytes: Vec<u8>, seq: u64 },
    /// `ino`'s data file changed over `[from, to)` (or whole), or went; `sync`: and was
    /// made durable.
    Data { ino: Ino, range: Option<(u64, u64)>, sync: bool },
    /// Every data file, whole (filling the mirror).
    AllData,
    /// The mirror is complete.
    Filled,
}

/// The changes of this server's share, for the link to its mirror.
pub struct Feed {
    /// Where changes go while a link is up, and which link task may use it.
    queue: Mutex<Queue>,
    /// Number of the last change queued (under `queue`'s lock).
    queued: AtomicU64,
    /// Number of the last change the mirror has, and the last journal record it has.
    mirrored: watch::Sender<u64>,
    journal_mirrored: watch::Sender<u64>,
    /// None: the instance has one replica.
    state: watch::Sender<Option<MirrorState>>,
    /// When the mirror last answered anything (pings included).
    heard: Mutex<std::time::Instant>,
}

/// Where changes go while a link is up (None: nobody mirrors; changes are not kept, the next
/// link sends everything). `epoch` numbers the link task that may open, end and bring in step
/// a link: a task stopped (aborted) may still finish the step it was in, and the task reading
/// its mirror's replies outlives it until the connection closes, so a task whose epoch is
/// over must change nothing (it once put a feed with no link back in step, and every change
/// then waited for acknowledgements that never came).
#[derive(Default)]
struct Queue {
    epoch: u64,
    sender: Option<mpsc::UnboundedSender<(u64, Change)>>,
}

impl Feed {
    /// A feed of a server in an instance with `replicas` copies of each share.
    pub fn new(replicas: u8) -> Feed {
        let state = (replicas > 1).then_some(MirrorState::Unreached);
        Feed {
            queue: Mutex::new(Queue::default()),
            queued: AtomicU64::new(0),
            mirrored: watch::Sender::new(0),
            journal_mirrored: watch::Sender::new(0),
            state: watch::Sender::new(state),
            heard: Mutex::new(std::time::Instant::now()),
        }
    }

    /// How long since the mirror last answered (an idle link pings it every second).
    pub fn silent_for(&self) -> std::time::Duration {
        self.heard.lock_or_recover().elapsed()
    }

    fn heard_from(&self) {
        *self.heard.lock_or_recover() = std::time::Instant::now();
    }

    pub fn state(&self) -> Option<MirrorState> {
        *self.state.borrow()
    }

    /// Notes a change (kept only while a link is up).
    pub(crate) fn note(&self, change: Change) {
        let queue = self.queue.lock_or_recover();
        if let Some(queue) = queue.sender.as_ref() {
            let seq = self.queued.fetch_add(1, Ordering::Relaxed) + 1;
            let _ = queue.send((seq, change));
        }
    }

    /// `ino`'s data file changed over `len` bytes at `offset`.
    pub fn data_changed(&self, ino: Ino, offset: u64, len: u64) {
        self.note(Change::Data { ino, range: Some((offset, offset.saturating_add(len))), sync: false });
    }

    /// `ino`'s data file changed anywhere, or went (`sync`: and was made durable).
    pub fn file_changed(&self, ino: Ino, sync: bool) {
        self.note(Change::Data { ino, range: None, sync });
    }

    /// What a request that changed something here must wait for before it is answered: the
    /// number of the last change noted, while the mirror is in step (otherwise nothing: the
    /// share goes on alone).
    pub fn barrier(&self) -> Option<u64> {
        (self.state() == Some(MirrorState::InStep)).then(|| self.queued.load(Ordering::Relaxed))
    }

    /// Completes once the mirror has change `seq`, or is no longer in step.
    pub async fn reached(&self, seq: u64) {
        Self::wait_for(&self.mirrored, &self.state, seq).await
    }

    /// Completes once the mirror has journal record `seq`, or is no longer in step.
    pub async fn journal_reached(&self, seq: u64) {
        Self::wait_for(&self.journal_mirrored, &self.state, seq).await
    }

    async fn wait_for(progress: &watch::Sender<u64>, state: &watch::Sender<Option<MirrorState>>, seq: u64) {
        let mut progress = progress.subscribe();
        let mut state = state.subscribe();
        loop {
            if *progress.borrow_and_update() >= seq || *state.borrow_and_update() != Some(MirrorState::InStep) {
                return;
            }
            tokio::select! {
                changed = progress.changed() => if changed.is_err() { return },
                changed = state.changed() => if changed.is_err() { return },
            }
        }
    }

    /// Whether link task `epoch` is the one that may link (see [`Queue`]).
    fn is_current(&self, epoch: u64) -> bool {
        self.queue.lock_or_recover().epoch == epoch
    }

    /// Link task `epoch`'s link starts: changes are queued from now on (None: the task's
    /// epoch is over).
    fn open(&self, epoch: u64) -> Option<mpsc::UnboundedReceiver<(u64, Change)>> {
        let mut queue = self.queue.lock_or_recover();
        if queue.epoch != epoch {
            return None;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        queue.sender = Some(tx);
        self.state.send_replace(Some(MirrorState::Filling));
        Some(rx)
    }

    /// Link task `epoch`'s link ended (a task whose epoch is over changes nothing).
    fn link_ended(&self, epoch: u64) {
        let mut queue = self.queue.lock_or_recover();
        if queue.epoch == epoch {
            self.go_alone(&mut queue);
        }
    }

    /// No link from now on, until a task of the epoch this returns opens one: changes are
    /// made here alone, and nobody waits for the mirror.
    pub(crate) fn close(&self) -> u64 {
        let mut queue = self.queue.lock_or_recover();
        queue.epoch += 1;
        self.go_alone(&mut queue);
        queue.epoch
    }

    fn go_alone(&self, queue: &mut Queue) {
        queue.sender = None;
        self.state.send_if_modified(|state| {
            let changed = state.is_some() && *state != Some(MirrorState::Unreached);
            if state.is_some() {
                *state = Some(MirrorState::Unreached);
            }
            changed
        });
    }

    /// The mirror replied to change `seq` (carrying journal records up to `journal`).
    fn acknowledged(&self, seq: u64, journal: Option<u64>) {
        self.mirrored.send_if_modified(|done| std::mem::replace(done, (*done).max(seq)) < seq);
        if let Some(journal) = journal {
            self.journal_mirrored.send_if_modified(|done| std::mem::replace(done, (*done).max(journal)) < journal);
        }
    }

    /// Link task `epoch`'s mirror is complete (a task whose epoch is over, or whose link
    /// ended, changes nothing).
    fn in_step(&self, epoch: u64) {
        let queue = self.queue.lock_or_recover();
        if queue.epoch == epoch && queue.sender.is_some() {
            self.state.send_replace(Some(MirrorState::InStep));
        }
    }
}

/// What the journal writes goes to the mirror as written, in the order written.
impl surge_meta::journal::Observer for Feed {
    fn journal_written(&self, at: u64, bytes: Vec<u8>, seq: u64) {
        self.note(Change::Journal { at, bytes, seq });
    }

    fn snapshot_written(&self, bytes: Vec<u8>, seq: u64) {
        self.note(Change::Snapshot { bytes, seq });
    }
}

impl Default for Feed {
    /// The feed of a share nobody mirrors.
    fn default() -> Feed {
        Feed::new(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change is waited for only while the mirror is in step, and the wait ends when the
    /// mirror has it or the link goes.
    #[tokio::test]
    async fn changes_wait_for_the_mirror_only_while_it_is_in_step() {
        let second = std::time::Duration::from_secs(1);
        let feed = std::sync::Arc::new(Feed::new(2));
        feed.data_changed(1, 0, 10);
        assert_eq!(feed.barrier(), None, "no link: nothing noted, nothing to wait for");
        let epoch = feed.close();
        let mut queue = feed.open(epoch).expect("the current epoch opens");
        feed.data_changed(1, 0, 10);
        assert_eq!(feed.barrier(), None, "filling: changes are sent, not waited for");
        feed.in_step(epoch);
        feed.data_changed(1, 10, 10);
        let seq = feed.barrier().expect("in step");
        assert_eq!(seq, 2, "the change noted before the link is not counted");
        assert!(matches!(queue.recv().await, Some((1, Change::Data { range: Some((0, 10)), .. }))));

        let waiter = tokio::spawn({
            let feed = feed.clone();
            async move { feed.reached(seq).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "answered before the mirror had the change");
        feed.acknowledged(seq, None);
        tokio::time::timeout(second, waiter).await.expect("answered once the mirror has it").unwrap();

        feed.data_changed(1, 20, 10);
        let later = feed.barrier().unwrap();
        let waiter = tokio::spawn({
            let feed = feed.clone();
            async move { feed.reached(later).await }
        });
        let next = feed.close();
        tokio::time::timeout(second, waiter).await.expect("the link went: no more waiting").unwrap();
        assert_eq!(feed.state(), Some(MirrorState::Unreached));
        assert_eq!(feed.barrier(), None);

        // The stopped task (and its reply reader) change nothing any more: no step back in
        // step with no link, no link closed under its successor.
        feed.in_step(epoch);
        assert_eq!(feed.state(), Some(MirrorState::Unreached), "a stopped link does not bring the feed in step");
        assert!(feed.open(epoch).is_none());
        let _queue = feed.open(next).expect("the new task links");
        feed.link_ended(epoch);
        feed.in_step(next);
        assert_eq!(feed.state(), Some(MirrorState::InStep), "the old task did not end the new link");
        feed.link_ended(next);
        assert_eq!(feed.state(), Some(MirrorState::Unreached));
    }

    #[test]
    fn an_instance_with_one_copy_has_no_mirror_state() {
        assert_eq!(Feed::new(1).state(), None);
        assert_eq!(Feed::new(2).state(), Some(MirrorState::Unreached));
    }
}
