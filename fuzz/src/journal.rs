//! Target `journal`: a server's metadata directory as a crash or a bug may leave it, opened
//! the way a restarting server opens it. The records come out of the fuzzer's bytes, each
//! one decoded as a journal record and then framed as the journal frames them (checksums
//! right, so that they reach the replay rather than stop at the framing); some go to the
//! snapshot, the rest to the journal, which may be cut at any byte as a crash cuts it.
//!
//! Two modes, the second for inputs whose first byte is [`STEPS_MODE`]:
//!
//! * **records**: whatever the records say (entries naming inodes that do not exist,
//!   directories that are their own parents, attributes that do not read, publications of
//!   files never made), opening must answer a namespace share or an error, never panic or
//!   hang. A share that opens must then survive a clean stop: folded into a snapshot and
//!   opened again, it is the same share, item for item, and its counts are those of what it
//!   holds.
//! * **steps**: real steps on a live store (creates, mkdir as its two steps, unlinks, rmdir,
//!   renames, exchanges, hard links, symlinks, nodes, attributes, extended attributes,
//!   closes that publish, retention policies, consumer groups' claims and acknowledgements),
//!   each step's change record journaled as a server journals it. The journal alone must give
//!   back the live store as a restart sees it (the files unlinked while open dropped); so
//!   must the journal replayed over a snapshot of the live store, as a crash between a fold's
//!   snapshot and its emptying of the journal leaves them; and so must the clean stop after.

use std::path::Path;

use surge_meta::journal::{framed, Journal, FORMAT};
use surge_meta::{MetaStore, Record};
use surge_proto::call::encode_reply;
use surge_proto::frame::decode_message;
use surge_proto::placement::DirLayout;
use surge_proto::workflow::RetentionPolicy;
use surge_proto::xattr::XattrSetMode;
use surge_proto::{AttrChanges, FileKind, Ino, ROOT_INO};

use super::input::Input;

/// Most records an input makes (a run also ends where its bytes do).
const MAX_RECORDS: usize = 32;
/// Largest encoded record read from the input.
const MAX_RECORD_LEN: usize = 8192;

/// The first byte of an input in steps mode (any other starts one in records mode).
pub const STEPS_MODE: u8 = 0xff;

pub fn run(data: &[u8]) {
    if let Some((&STEPS_MODE, rest)) = data.split_first() {
        return steps(&mut Input::new(rest));
    }
    let mut input = Input::new(data);
    let in_snapshot = input.below(4);
    let cut = if input.one_in(3) { input.u16() as usize } else { 0 };
    let mut records = Vec::new();
    while !input.is_empty() && records.len() < MAX_RECORDS {
        if let Ok(record) = decode_message::<Record>(input.bytes(MAX_RECORD_LEN)) {
            records.push(record);
        }
    }
    if std::env::var_os("SURGE_FUZZ_TRACE").is_some() {
        eprintln!("{in_snapshot} record(s) in the snapshot, the journal cut by {cut} byte(s):");
        records.iter().for_each(|record| eprintln!("{record:?}"));
    }
    let split = in_snapshot.min(records.len());
    let (snapshot, journal) = records.split_at(split);
    let mut journal_bytes = framed(journal);
    journal_bytes.truncate(journal_bytes.len().saturating_sub(cut));

    let root = super::scratch_dir("journal");
    write_meta(&root, &framed(snapshot), &journal_bytes);

    if let Some(first) = open(&root) {
        // Opened: the clean stop's snapshot must give back the same share.
        let again = open(&root).expect("a share folded at a clean stop opens again");
        assert_eq!(canonical(&again), canonical(&first), "a share changed across a clean stop and a restart");
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// Names steps draw from, so that they meet each other's entries.
const NAMES: [&str; 4] = ["a", "b", "c", "d"];

/// Steps mode (see the module notes).
fn steps(input: &mut Input) {
    let mut live = MetaStore::new(0, 0, 0);
    live.track_changes();
    let _ = live.take_changes();
    // What a first start writes before any step (the root's state among it).
    let started = live.snapshot().split();
    let mut records = Vec::new();
    let (mut dirs, mut inodes) = (vec![ROOT_INO], vec![ROOT_INO]);
    let now = || surge_proto::Timestamp { secs: 1_000, nanos: 0 };
    for _ in 0..MAX_RECORDS {
        if input.is_empty() {
            break;
        }
        let pick = |input: &mut Input, from: &[Ino]| from[input.below(from.len())];
        let (dir, name, ino) = (pick(input, &dirs), NAMES[input.below(NAMES.len())], pick(input, &inodes));
        match input.below(16) {
            0 => {
                if let Ok(entry) = live.create(dir, name, 0o644, 0, 0, 0, input.bool(), input.bool(), None) {
                    inodes.push(entry.ino);
                }
            }
            1 => {
                if let Ok(attr) = live.make_dir_inode(dir, 0o755, 0, 0, 0, None, DirLayout::default(), None, None) {
                    match live.insert_entry(dir, name, attr.ino, FileKind::Dir, false, None) {
                        Ok(_) => dirs.push(attr.ino),
                        Err(_) => drop(live.drop_inode(attr.ino)),
                    }
                }
            }
            2 => drop(live.unlink(dir, name)),
            3 => drop(live.rmdir(dir, name)),
            4 => drop(live.rename(dir, name, pick(input, &dirs), NAMES[input.below(NAMES.len())], input.bool(), None)),
            5 => drop(live.exchange(dir, name, pick(input, &dirs), NAMES[input.below(NAMES.len())])),
            6 => {
                if let Ok(attr) = live.add_link(ino) {
                    if live.insert_entry(dir, name, ino, attr.kind, false, None).is_err() {
                        drop(live.drop_link(ino));
                    }
                }
            }
            7 => {
                if let Ok(attr) = live.symlink(dir, name, "target", 0, 0) {
                    inodes.push(attr.ino);
                }
            }
            8 => {
                if let Ok(attr) = live.make_node(dir, name, FileKind::Fifo, 0o644, 0, 0, 0) {
                    inodes.push(attr.ino);
                }
            }
            9 => {
                let changes = AttrChanges {
                    mode: Some(input.u16() as u32),
                    size: input.bool().then(|| input.size() % (1 << 40)),
                    ..Default::default()
                };
                drop(live.setattr(ino, &changes));
            }
            10 => match input.bool() {
                true => drop(live.set_xattr(ino, ["user.x", "user.y"][input.below(2)], input.bytes(64).to_vec(), XattrSetMode::Either)),
                false => drop(live.remove_xattr(ino, ["user.x", "user.y"][input.below(2)])),
            },
            11 => drop(live.open(ino)),
            12 => drop(live.commit(ino, Some(input.size() % (1 << 40)), None, input.bool(), input.bool())),
            13 => {
                let policy = input.bool().then(|| RetentionPolicy {
                    pattern: "*".into(),
                    keep_last: Some(1 + input.below(3) as u32),
                    after_groups: input.bool(),
                    stage_out: None,
                    stage_every: 1,
                });
                drop(live.set_retention(dir, "/", policy));
            }
            14 => drop(live.claim(dir, "g", None, "consumer", 60_000, now())),
            _ => drop(live.done(dir, Some("g"), name, None, now())),
        }
        records.push(live.take_changes());
    }
    // What a fold during the run would have written, before the crash that left its journal.
    let folded = live.snapshot().split();
    live.settle();
    let expected = canonical(&live);

    let root = super::scratch_dir("journal");
    let journal = framed(&records);
    write_meta(&root, &framed(&started), &journal);
    let replayed = open(&root).expect("a journal of real steps opens");
    assert_eq!(canonical(&replayed), expected, "the journal does not give back the store that wrote it");
    let restarted = open(&root).expect("a share folded at a clean stop opens again");
    assert_eq!(canonical(&restarted), expected, "a share changed across a clean stop and a restart");

    write_meta(&root, &framed(&folded), &journal);
    let crashed = open(&root).expect("a journal replayed over its fold's snapshot opens");
    assert_eq!(canonical(&crashed), expected, "a journal replayed over the snapshot that holds it gives another store");
    let _ = std::fs::remove_dir_all(&root);
}

/// Writes a metadata directory of this build's format under `root`: `snapshot` and `journal`
/// files with these bytes (an empty snapshot reads as none).
fn write_meta(root: &Path, snapshot: &[u8], journal: &[u8]) {
    let meta = root.join("meta");
    std::fs::create_dir_all(&meta).expect("a scratch directory");
    std::fs::write(meta.join("format"), format!("{FORMAT}\n")).expect("the format marker");
    std::fs::write(meta.join("snapshot"), snapshot).expect("the snapshot");
    std::fs::write(meta.join("journal"), journal).expect("the journal");
}

/// Opens the share under `root` as a server 0 does at its start, checks its counts and stops
/// it cleanly (a fold into a new snapshot); None when the directory is refused.
fn open(root: &Path) -> Option<MetaStore> {
    let mut store = MetaStore::new(0, 0, 0);
    let (journal, _orphans) = Journal::open(root, &mut store, std::sync::Arc::new(())).ok()?;
    let snapshot = store.snapshot();
    let (inodes, files, dirs) = store.counts();
    assert_eq!(inodes as usize, snapshot.inodes.len(), "the inode count is not the number of inodes held");
    let held_dirs = snapshot.inodes.iter().filter(|i| i.attr.kind == FileKind::Dir).count() as u64;
    assert_eq!((files, dirs), (inodes - held_dirs, held_dirs), "files and directories miscounted");
    journal.close(&store).expect("a clean stop writes its snapshot");
    Some(store)
}

/// What a share holds, in an order that does not depend on its maps' iteration order.
fn canonical(store: &MetaStore) -> Vec<Vec<String>> {
    let snapshot = store.snapshot();
    let sorted = |items: Vec<String>| {
        let mut items = items;
        items.sort();
        items
    };
    vec![
        vec![snapshot.next_local.to_string()],
        sorted(snapshot.inodes.iter().map(|i| format!("{i:?}")).collect()),
        sorted(snapshot.entries.iter().map(|e| format!("{e:?}")).collect()),
        sorted(snapshot.xattrs.iter().map(|x| format!("{x:?}")).collect()),
        sorted(snapshot.workflow.iter().map(|w| format!("{w:?}")).collect()),
    ]
}

/// Records-mode inputs made of the records real steps write (files, a symlink, an attribute,
/// a size published at close, a retention policy, an unlink, a rename), whole and in part,
/// and a few steps-mode inputs: where the fuzzer starts, and what the stable short run
/// mutates.
pub fn seeds() -> Vec<Vec<u8>> {
    let mut store = MetaStore::new(0, 0, 0);
    store.track_changes();
    let mut records = Vec::new();
    let a = store.create(ROOT_INO, "a", 0o644, 0o022, 1000, 1000, true, true, None).map(|e| e.ino);
    records.push(store.take_changes());
    let _ = store.create(ROOT_INO, "b", 0o600, 0, 0, 0, true, false, None);
    records.push(store.take_changes());
    let _ = store.symlink(ROOT_INO, "l", "a", 0, 0);
    records.push(store.take_changes());
    if let Ok(a) = a {
        let _ = store.set_xattr(a, "user.note", b"value".to_vec(), XattrSetMode::Either);
        records.push(store.take_changes());
        let _ = store.commit(a, Some(10), None, true, true);
        records.push(store.take_changes());
    }
    let policy = RetentionPolicy { pattern: "*".into(), keep_last: Some(1), after_groups: false, stage_out: None, stage_every: 1 };
    let _ = store.set_retention(ROOT_INO, "/", Some(policy));
    records.push(store.take_changes());
    let _ = store.unlink(ROOT_INO, "b");
    records.push(store.take_changes());
    let _ = store.rename(ROOT_INO, "a", ROOT_INO, "c", false, None);
    records.push(store.take_changes());
    (0..=records.len())
        .map(|upto| {
            // Snapshot records, no cut, then the records as `Input::bytes` reads them.
            let mut input = vec![(upto % 4) as u8, 1];
            for record in &records[..upto] {
                let bytes = encode_reply(record);
                input.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
                input.extend_from_slice(&bytes);
            }
            input
        })
        // And steps-mode inputs: each step kind in turn, then a mixed run.
        .chain((0u8..16).map(|step| [STEPS_MODE, 0, 0, 0, 0, step, 1, 1, 0, 0, step, 2, 1, 0, 0].to_vec()))
        .chain(std::iter::once([STEPS_MODE].into_iter().chain((0u8..200).map(|i| i.wrapping_mul(37))).collect()))
        .collect()
}
