//! Directory delegations against a real server in this process (docs/delegation.md, step 1):
//! who is granted one, what a holder writes back, how another client's step recalls it, and
//! how a delegation ends (given back, its holder gone, its holder silent past the deadline),
//! and how a holder that lost its connection reclaims it to write back the rest.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use surge_client::surge_proto::admin::{ListInodes, Notice, WriteBack};
use surge_client::surge_proto::frame::decode_message;
use surge_client::surge_proto::namespace::{CreateAs, Delegate, Delegated, GiveBack, Lookup, NamespaceRequest, Reclaim, Renew, Unlink};
use surge_client::surge_proto::{ino, DirEntry, ErrorCode, Ino, ROOT_INO};
use surge_client::{Client, ClientOptions, Watcher};
use surge_server::in_process::InProcessInstance;

/// Notices a client was sent, in order.
#[derive(Default)]
struct Notices(Mutex<Vec<Notice>>);

impl Watcher for Notices {
    fn notice(&self, notice: Notice, _seen: surge_client::Seen) {
        self.0.lock().unwrap().push(notice);
    }
    fn lost(&self, _server: usize) {}
}

impl Notices {
    fn recalls(&self) -> Vec<Ino> {
        self.0.lock().unwrap().iter().filter_map(|n| if let Notice::Recall { dir } = n { Some(*dir) } else { None }).collect()
    }

    /// Runs `answer` (the holder's side) once the next recall has come.
    fn on_recall(self: &Arc<Self>, answer: impl std::future::Future<Output = ()> + Send + 'static) -> tokio::task::JoinHandle<()> {
        let (notices, seen) = (self.clone(), self.recalls().len());
        tokio::spawn(async move {
            while notices.recalls().len() == seen {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            answer.await;
        })
    }
}

struct Fixture {
    instance: Option<InProcessInstance>,
    root: std::path::PathBuf,
}

impl Fixture {
    async fn new(test: &str) -> Fixture {
        let root = std::env::temp_dir().join(format!("surge-delegation-test-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let instance = InProcessInstance::start(&root, 2, 1 << 30).await.expect("start the servers");
        Fixture { instance: Some(instance), root }
    }

    fn client(&self) -> Client {
        let instance = self.instance.as_ref().unwrap();
        let opts = ClientOptions { local_io: false, ..Default::default() };
        Client::from_parts(instance.addrs.clone(), 1 << 20, instance.secret, opts).unwrap()
    }

    /// A client that watches, with the notices it gets.
    fn watching(&self) -> (Client, Arc<Notices>) {
        let client = self.client();
        let notices = Arc::new(Notices::default());
        assert!(client.watch(notices.clone()));
        (client, notices)
    }

    async fn stop(mut self) {
        if let Some(instance) = self.instance.take() {
            instance.stop().await;
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

async fn delegate(client: &Client, dir: Ino, count: u32) -> surge_client::Result<Delegated> {
    client.call(ino::home(dir), Delegate { dir, count, place_on: None }).await
}

fn create_as(dir: Ino, name: &str, ino: Ino) -> CreateAs {
    CreateAs { parent: dir, name: name.into(), ino, mode: 0o644, umask: 0o022, uid: 0, gid: 0, open: false }
}

/// Writes `step` back as step `seq` of delegation `token`'s log: its outcome (a create's
/// entry; other steps' replies are not looked at).
async fn write_back(
    client: &Client,
    dir: Ino,
    token: Ino,
    seq: u64,
    step: impl Into<NamespaceRequest>,
) -> surge_client::Result<Option<DirEntry>> {
    let write_back = WriteBack { dir, token, first_seq: seq, steps: vec![step.into()] };
    let outcome = client.call(ino::home(dir), write_back).await?.pop().expect("one outcome");
    let message = outcome?;
    Ok(decode_message::<DirEntry>(&message).ok())
}

/// A holder's creates written back are found by others; another client's lookup is answered
/// only after the holder was recalled and gave the directory back, and finds what the holder
/// wrote back before giving it up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_lookup_recalls_the_delegation_and_sees_what_was_written_back() {
    let fx = Fixture::new("recall").await;
    let (a, a_notices) = fx.watching();
    let b = fx.client();
    let dir = a.mkdir_at(ROOT_INO, "out", 0o755).await.unwrap().ino;
    let granted = delegate(&a, dir, 8).await.unwrap();
    assert_eq!(granted.inos.len(), 8);
    assert!(granted.inos.iter().all(|&i| ino::home(i) == ino::home(dir)), "numbers homed with the directory");
    // Written back while held.
    let home = ino::home(dir);
    let token = granted.token;
    assert_eq!(token, granted.inos[0], "a delegation is named by its first number");
    let made = write_back(&a, dir, token, 1, create_as(dir, "f0", granted.inos[0])).await.unwrap().unwrap();
    assert_eq!(made.ino, granted.inos[0]);
    // A number not set aside for this directory is refused, and so is a create outside a
    // write-back, or one quoting another token.
    let stray = write_back(&a, dir, token, 2, create_as(dir, "f1", granted.inos[0] + 1_000_000)).await.unwrap_err();
    assert_eq!(stray.code, ErrorCode::Invalid, "{stray}");
    let outside = a.call(home, create_as(dir, "f1", granted.inos[1])).await.unwrap_err();
    assert_eq!(outside.code, ErrorCode::Invalid, "{outside}");
    let forged = write_back(&a, dir, token + 1, 2, create_as(dir, "f1", granted.inos[1])).await.unwrap_err();
    assert_eq!(forged.code, ErrorCode::Invalid, "{forged}");

    // The holder answers a recall by writing its last step back and giving the directory up.
    let (holder, second) = (a.clone(), granted.inos[1]);
    let answering = a_notices.on_recall(async move {
        write_back(&holder, dir, token, 2, create_as(dir, "f1", second)).await.unwrap();
        holder.call(ino::home(dir), GiveBack { dir, token }).await.unwrap();
    });
    let asked = Instant::now();
    let found = b.lookup(dir, "f1").await.expect("found once the holder gave the directory back");
    assert_eq!(found.ino, granted.inos[1]);
    // The holder's deadline is 60 s: an answer well before it came from the recall.
    assert!(asked.elapsed() < Duration::from_secs(20), "answered after the recall, not the deadline: {:?}", asked.elapsed());
    answering.await.unwrap();
    assert_eq!(a_notices.recalls(), vec![dir], "one recall");

    // Given back: the holder's write-backs are refused, everybody's steps go on as usual.
    let late = write_back(&a, dir, token, 3, create_as(dir, "f2", granted.inos[2])).await.unwrap_err();
    assert_eq!(late.code, ErrorCode::Invalid, "{late}");
    b.call(home, Unlink { parent: dir, name: "f0".into() }).await.unwrap();
    let names: Vec<String> = b.readdir_ino(dir).await.unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, vec!["f1".to_string()]);
    // The numbers set aside are never handed out again.
    let next = b.create_at(dir, "plain", 0o644, true).await.unwrap();
    assert!(!granted.inos.contains(&next.ino()), "a plain create took a number set aside");
    fx.stop().await;
}

/// Who may hold a delegation: only a watching connection, not of a directory another watcher
/// holds names of, nor of a sticky one, nor twice; a holder's write-back only in its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegation_is_granted_only_where_the_holder_needs_no_check_of_the_server() {
    let fx = Fixture::new("grant").await;
    let (a, _) = fx.watching();
    let (c, _) = fx.watching();
    let plain = fx.client();
    let dir = a.mkdir_at(ROOT_INO, "mine", 0o755).await.unwrap().ino;
    let refused = delegate(&plain, dir, 4).await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::NotPermitted, "a connection that does not watch: {refused}");
    let too_many = delegate(&a, dir, 1 << 20).await.unwrap_err();
    assert_eq!(too_many.code, ErrorCode::Invalid, "{too_many}");

    // Another watcher listed the directory: it holds its names.
    let listed = a.mkdir_at(ROOT_INO, "listed", 0o755).await.unwrap().ino;
    c.readdir_ino(listed).await.unwrap();
    let refused = delegate(&a, listed, 4).await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::NotPermitted, "names held elsewhere: {refused}");

    let sticky = a.mkdir_at(ROOT_INO, "sticky", 0o1777).await.unwrap().ino;
    let refused = delegate(&a, sticky, 4).await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::NotPermitted, "sticky: {refused}");

    let granted = delegate(&a, dir, 4).await.unwrap();
    let twice = delegate(&a, dir, 4).await.unwrap_err();
    assert_eq!(twice.code, ErrorCode::NotPermitted, "{twice}");
    // Another client's write-back into it, even quoting the token, is refused: the holder is
    // connected, and it is not the holder.
    let theirs = write_back(&c, dir, granted.token, 1, create_as(dir, "x", granted.inos[0])).await.unwrap_err();
    assert_eq!(theirs.code, ErrorCode::Invalid, "{theirs}");
    fx.stop().await;
}

/// A holder whose connection ended and that does not come back loses its delegation after
/// the recall deadline (what it wrote back stays; others wait for that meanwhile), and a scan
/// of the share (`surge fsck`) recalls every delegation first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_goes_loses_its_delegation_after_the_deadline_and_scans_wait_for_recalls() {
    let fx = Fixture::new("ends").await;
    let b = fx.client();
    let (dir, kept) = {
        let (a, _) = fx.watching();
        let dir = a.mkdir_at(ROOT_INO, "gone", 0o755).await.unwrap().ino;
        let granted = delegate(&a, dir, 4).await.unwrap();
        write_back(&a, dir, granted.token, 1, create_as(dir, "kept", granted.inos[0])).await.unwrap();
        (dir, granted.inos[0])
    };
    // The holder's client is dropped: its connections close. The home keeps the directory
    // for it to reclaim until the deadline (5 s), then answers.
    let asked = Instant::now();
    let found = b.lookup(dir, "kept").await.unwrap();
    assert_eq!(found.ino, kept);
    let waited = asked.elapsed();
    assert!(waited >= Duration::from_secs(4) && waited < Duration::from_secs(9), "answered after {waited:?}");

    let (a, a_notices) = fx.watching();
    let dir = a.mkdir_at(ROOT_INO, "scanned", 0o755).await.unwrap().ino;
    let token = delegate(&a, dir, 4).await.unwrap().token;
    let holder = a.clone();
    a_notices.on_recall(async move { holder.call(ino::home(dir), GiveBack { dir, token }).await.unwrap() });
    b.call(ino::home(dir), ListInodes { after: None }).await.expect("the scan goes on once the directory is given back");
    assert_eq!(a_notices.recalls(), vec![dir]);
    fx.stop().await;
}

/// A holder whose connection ended reclaims its delegation over a new one with its token:
/// the home says which steps of its log it applied, takes the rest (numbered on), and ends
/// the delegation at the give-back. Meanwhile everybody else waits. A wrong token, a step
/// outside the directory and a reclaim after the end are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_lost_its_connection_reclaims_and_writes_back_the_rest() {
    let fx = Fixture::new("reclaim").await;
    let b = fx.client();
    let (dir, granted) = {
        let (a, _) = fx.watching();
        let dir = a.mkdir_at(ROOT_INO, "away", 0o755).await.unwrap().ino;
        let granted = delegate(&a, dir, 8).await.unwrap();
        for (seq, name) in [(1, "f1"), (2, "f2")] {
            write_back(&a, dir, granted.token, seq, create_as(dir, name, granted.inos[seq as usize - 1])).await.unwrap();
        }
        (dir, granted)
    };
    let (home, token) = (ino::home(dir), granted.token);
    // Another client's step waits for the holder (it retries `Recalling`).
    let b_lookup = {
        let b = b.clone();
        tokio::spawn(async move { (b.lookup(dir, "f3").await, Instant::now()) })
    };
    // The holder, over a new connection (it need not watch).
    let again = fx.client();
    let wrong = again.call(home, Reclaim { dir, token: token + 1 }).await.unwrap_err();
    assert_eq!(wrong.code, ErrorCode::NotFound, "{wrong}");
    assert_eq!(again.call(home, Reclaim { dir, token }).await.unwrap(), 2, "the last step applied");
    let made = write_back(&again, dir, token, 3, create_as(dir, "f3", granted.inos[2])).await.unwrap().unwrap();
    assert_eq!(made.ino, granted.inos[2]);
    let outside = write_back(&again, dir, token, 4, Lookup { parent: ROOT_INO, name: "away".into() }).await.unwrap_err();
    assert_eq!(outside.code, ErrorCode::Invalid, "{outside}");
    let given_back = Instant::now();
    again.call(home, GiveBack { dir, token }).await.unwrap();
    let (found, answered) = b_lookup.await.unwrap();
    assert_eq!(found.expect("b sees the create written back after the reclaim").ino, granted.inos[2]);
    assert!(answered >= given_back, "b was answered before the give-back");
    let ended = again.call(home, Reclaim { dir, token }).await.unwrap_err();
    assert_eq!(ended.code, ErrorCode::NotFound, "{ended}");
    let names: Vec<String> = b.readdir_ino(dir).await.unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, vec!["f1".to_string(), "f2".to_string(), "f3".to_string()]);
    fx.stop().await;
}

/// The library's side (step 2): a holder answers creates and unlinks of its own files alone,
/// and another client's listing, which recalls the directory, sees exactly what the holder
/// answered — its names, with the numbers it gave them — once the holder gave it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holders_creates_and_unlinks_reach_the_home_in_order_at_the_recall() {
    let fx = Fixture::new("holder").await;
    let (a, a_notices) = fx.watching();
    let b = fx.client();
    let dir = a.mkdir_at(ROOT_INO, "ranks", 0o755).await.unwrap().ino;
    let plain = fx.client();
    assert!(plain.delegate(dir, 8).await.unwrap().is_none(), "refused to a client that does not watch");
    let held = Arc::new(a.delegate(dir, 64).await.unwrap().expect("granted"));
    let mut made = std::collections::BTreeMap::new();
    for i in 0..50 {
        let name = format!("file.{i:02}");
        let attr = held.create(&name, 0o666, 0o022, 0, 0).unwrap().expect("answered here");
        assert_eq!((attr.mode, attr.size, attr.nlink), (0o644, 0, 1));
        made.insert(name, attr.ino);
    }
    assert_eq!(held.create("file.00", 0o644, 0, 0, 0).unwrap_err().code, ErrorCode::Exists);
    for i in (0..50).step_by(5) {
        let name = format!("file.{i:02}");
        assert!(held.unlink(&name).unwrap(), "a file made here is unlinked here");
        made.remove(&name);
    }
    assert_eq!(held.unlink("file.00").unwrap_err().code, ErrorCode::NotFound);
    assert_eq!(held.pending(), 60, "50 creates and 10 unlinks, none sent yet");

    // The holder gives the directory back when recalled.
    let holder = held.clone();
    let answering = a_notices.on_recall(async move { holder.give_back().await.unwrap() });
    let listed: std::collections::BTreeMap<String, Ino> = b.readdir_ino(dir).await.unwrap().into_iter().map(|e| (e.name, e.ino)).collect();
    answering.await.unwrap();
    assert_eq!(listed, made, "the home holds what the holder answered");
    assert!(!held.is_held());
    assert!(held.create("late", 0o644, 0, 0, 0).unwrap().is_none(), "nothing answered after the give-back");
    // Files made under the delegation are ordinary files now.
    let f = b.open_ino(made["file.01"]).await.unwrap();
    f.pwrite(0, b"data").await.unwrap();
    f.close().await.unwrap();
    assert_eq!(b.lookup(dir, "file.01").await.unwrap().size, 4);
    fx.stop().await;
}

/// A holder whose numbers run out renews its delegation and goes on creating without giving
/// the directory back; only the holder may renew, and not once the directory is recalled. The
/// home holds every create made under either set of numbers, and hands none of them out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_renews_its_numbers_and_keeps_the_directory() {
    let fx = Fixture::new("renew").await;
    let (a, a_notices) = fx.watching();
    let (c, _) = fx.watching();
    let b = fx.client();
    let dir = a.mkdir_at(ROOT_INO, "burst", 0o755).await.unwrap().ino;
    let held = Arc::new(a.delegate(dir, 4).await.unwrap().expect("granted"));
    let mut made = std::collections::BTreeMap::new();
    for i in 0..4 {
        made.insert(format!("f{i}"), held.create(&format!("f{i}"), 0o644, 0, 0, 0).unwrap().expect("answered here").ino);
    }
    assert!(held.create("f4", 0o644, 0, 0, 0).unwrap().is_none(), "no number left");
    assert!(held.renew(4).await.unwrap(), "renewed");
    assert_eq!(held.numbers_left(), 4);
    for i in 4..8 {
        let attr = held.create(&format!("f{i}"), 0o644, 0, 0, 0).unwrap().expect("answered with a renewed number");
        assert_eq!(ino::home(attr.ino), ino::home(dir), "renewed numbers are homed with the directory");
        made.insert(format!("f{i}"), attr.ino);
    }
    let distinct: std::collections::BTreeSet<Ino> = made.values().copied().collect();
    assert_eq!(distinct.len(), 8, "no number given twice: {made:?}");
    held.write_back().await.unwrap();
    // Nobody else renews it: not another connection, not a made-up token.
    let home = ino::home(dir);
    let token = made["f0"];
    let other = c.call(home, Renew { dir, token, count: 4, place_on: None }).await.unwrap_err();
    assert_eq!(other.code, ErrorCode::Invalid, "{other}");
    let forged = a.call(home, Renew { dir, token: token + 1, count: 4, place_on: None }).await.unwrap_err();
    assert_eq!(forged.code, ErrorCode::Invalid, "{forged}");
    let none_asked = a.call(home, Renew { dir, token, count: 0, place_on: None }).await.unwrap_err();
    assert_eq!(none_asked.code, ErrorCode::Invalid, "{none_asked}");

    // Recalled: the holder's renewal is refused, and it gives the directory back.
    let holder = held.clone();
    let answering = a_notices.on_recall(async move {
        assert!(!holder.renew(4).await.unwrap(), "a recalled delegation was renewed");
        holder.give_back().await.unwrap();
    });
    let listed: std::collections::BTreeMap<String, Ino> = b.readdir_ino(dir).await.unwrap().into_iter().map(|e| (e.name, e.ino)).collect();
    answering.await.unwrap();
    assert_eq!(listed, made, "the home holds the creates of both sets of numbers");
    let next = b.create_at(dir, "plain", 0o644, true).await.unwrap();
    assert!(!distinct.contains(&next.ino()), "a plain create took a number set aside");
    fx.stop().await;
}

/// Handles of files made under a delegation (step 3's `File`): the home hears of such a file
/// only when a handle needs it to — a flush of written data writes the delegation back first
/// and registers the still-open handle; a clean release is logged behind the create — and it
/// counts each open exactly once, so an unlink from elsewhere removes every file at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_made_under_a_delegation_reach_the_home_only_when_they_must() {
    let fx = Fixture::new("handles").await;
    let (a, a_notices) = fx.watching();
    let b = fx.client();
    let dir = a.mkdir_at(ROOT_INO, "out", 0o755).await.unwrap().ino;
    let held = Arc::new(a.delegate(dir, 64).await.unwrap().expect("granted"));
    let made = |name: &str| held.create(name, 0o644, 0o022, 0, 0).unwrap().expect("answered here");

    let empty = a.file_made_under(&held, &made("empty"), 0);
    assert!(empty.release_logged(), "a clean handle's release goes into the log");
    assert_eq!(held.pending(), 2, "its create and its release, nothing sent");

    let written = made("written");
    let f = a.file_made_under(&held, &written, 1 << 20);
    f.pwrite(0, b"data").await.unwrap();
    assert_eq!(held.pending(), 3, "a write needs only the data servers");
    f.flush().await.unwrap();
    assert_eq!(held.pending(), 0, "the flush wrote the delegation back before publishing");
    assert!(!f.release_logged(), "registered at the write-back: released the ordinary way");
    let second = a.open_ino(written.ino).await.unwrap();
    f.release().await.unwrap();

    let scratch = made("scratch");
    let s = a.file_made_under(&held, &scratch, 0);
    assert!(held.unlink("scratch").unwrap());
    s.pwrite(0, b"gone soon").await.unwrap();
    assert_eq!(s.pread(0, 9).await.unwrap(), b"gone soon", "unlinked here, still open");
    held.write_back().await.unwrap();
    assert_eq!(a.getattr(scratch.ino).await.unwrap().nlink, 0, "kept for its open handle");
    s.release().await.unwrap();

    let holder = held.clone();
    let answering = a_notices.on_recall(async move { holder.give_back().await.unwrap() });
    let names: Vec<String> = b.readdir_ino(dir).await.unwrap().into_iter().map(|e| e.name).collect();
    answering.await.unwrap();
    assert_eq!(names, vec!["empty".to_string(), "written".to_string()]);
    assert_eq!(b.lookup(dir, "written").await.unwrap().size, 4);
    let reopened = b.open_ino(written.ino).await.unwrap();
    assert_eq!(reopened.pread(0, 4).await.unwrap(), b"data");
    reopened.close().await.unwrap();
    assert_eq!(b.getattr(scratch.ino).await.unwrap_err().code, ErrorCode::NotFound, "the last close removed it");
    // The home counted the made-under handle's open and the second one: the first's release
    // left the second's, which keeps the file after an unlink until it closes.
    b.unlink_at(dir, "written").await.unwrap();
    assert_eq!(second.pread(0, 4).await.unwrap(), b"data", "an open handle keeps an unlinked file");
    second.close().await.unwrap();
    assert_eq!(b.getattr(written.ino).await.unwrap_err().code, ErrorCode::NotFound, "its last close removed it");
    // No open was counted twice (or left behind): an unlink removes a closed file at once.
    let ino = b.lookup(dir, "empty").await.unwrap().ino;
    b.unlink_at(dir, "empty").await.unwrap();
    assert_eq!(b.getattr(ino).await.unwrap_err().code, ErrorCode::NotFound, "outlived its unlink");
    fx.stop().await;
}

/// Another client's rmdir of a delegated directory (named by its parent and name, not its
/// number) recalls it first: the holder's creates, not yet written back, keep it from being
/// removed as empty. So does a rename onto it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rmdir_elsewhere_recalls_the_directory_and_finds_the_holders_files() {
    let fx = Fixture::new("rmdir").await;
    let (a, a_notices) = fx.watching();
    let b = fx.client();
    let dir = a.mkdir_at(ROOT_INO, "busy", 0o755).await.unwrap().ino;
    b.mkdir_at(ROOT_INO, "other", 0o755).await.unwrap();
    let held = Arc::new(a.delegate(dir, 8).await.unwrap().expect("granted"));
    held.create("made", 0o644, 0o022, 0, 0).unwrap().expect("answered here");
    let holder = held.clone();
    let answering = a_notices.on_recall(async move { holder.give_back().await.unwrap() });
    let refused = b.rmdir_at(ROOT_INO, "busy").await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::NotEmpty, "{refused}");
    answering.await.unwrap();
    assert_eq!(b.lookup(dir, "made").await.unwrap().kind, surge_client::surge_proto::FileKind::File);

    let again = Arc::new(a.delegate(dir, 8).await.unwrap().expect("granted again"));
    assert!(again.unlink("made").unwrap());
    let holder = again.clone();
    let answering = a_notices.on_recall(async move { holder.give_back().await.unwrap() });
    // The unlink was not written back either: the rename onto the directory must not see it
    // empty before the recall, and may replace it after.
    b.rename_at(ROOT_INO, "other", ROOT_INO, "busy", false).await.expect("replaces the emptied directory");
    answering.await.unwrap();
    assert_eq!(a_notices.recalls(), vec![dir, dir], "the rename recalled the directory it replaced");
    fx.stop().await;
}
