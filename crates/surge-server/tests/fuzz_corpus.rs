//! The fuzz targets of `fuzz/` (see docs/fuzzing.md) on stable Rust, in the ordinary test
//! suite: every input a long fuzzing run found and kept under `fuzz/regressions/<target>/`
//! replays without a failure, and each target runs over a few thousand seeded pseudo-random
//! inputs, a few seconds' worth. The targets' code is the fuzz crate's own, included here, so
//! what the fuzzer checks and what the CI checks cannot drift apart.

#[path = "../../../fuzz/src/lib.rs"]
mod surge_fuzz;

use std::path::PathBuf;

/// xorshift64*: a few lines, reproducible from its seed, and no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn bytes(&mut self, max_len: usize) -> Vec<u8> {
        let len = self.next() as usize % (max_len + 1);
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// Runs `target` on every input kept under `fuzz/regressions/<target>/`: at least one, so
/// that a folder moved or emptied fails here instead of replaying nothing.
fn replay_regressions(target: &str, run: fn(&[u8])) {
    let found = regressions(target);
    assert!(!found.is_empty(), "no regression inputs for {target} under fuzz/regressions/{target}/");
    for (path, bytes) in found {
        eprintln!("replaying {}", path.display());
        run(&bytes);
    }
}

fn regressions(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions").join(target);
    let mut found: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_file() && !path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.')))
        .map(|path| {
            let bytes = std::fs::read(&path).expect("a regression input");
            (path, bytes)
        })
        .collect();
    found.sort();
    found
}

#[test]
fn frame_regressions_replay() {
    replay_regressions("frame", surge_fuzz::frame::run);
}

#[test]
fn requests_regressions_replay() {
    replay_regressions("requests", surge_fuzz::requests::run);
}

/// A tool for a fuzzing session, not part of the suite: runs the `requests` target on the one
/// input `SURGE_FUZZ_REPLAY` names (with `SURGE_FUZZ_TRACE=1`, to read what it does):
/// `SURGE_FUZZ_REPLAY=path cargo test --release -p surge-server --test fuzz_corpus replay_one -- --ignored`.
#[test]
#[ignore = "by hand: SURGE_FUZZ_REPLAY=<input> ... -- --ignored"]
fn replay_one() {
    let path = std::env::var_os("SURGE_FUZZ_REPLAY").expect("SURGE_FUZZ_REPLAY names the input to replay");
    surge_fuzz::requests::run(&std::fs::read(path).expect("the input to replay"));
}

/// Random bytes, and real frames with a few bytes changed (random bytes alone seldom get past
/// the magic and the version).
#[test]
fn frame_short_run() {
    use surge_proto::frame::encode_frame;
    use surge_proto::namespace::{Create, Lookup, Readdir};
    use surge_proto::{FrameKind, Request, ROOT_INO};
    let samples: Vec<Vec<u8>> = [
        Request::from(Lookup { parent: ROOT_INO, name: "a".into() }),
        Create { parent: 5, name: "x".into(), mode: 0o644, umask: 0, uid: 1, gid: 2, exclusive: true, open: true, place_on: None }.into(),
        Readdir { ino: 1, after: Some("m".into()), limit: 7, watch_names: true, watch_attrs: false }.into(),
        surge_proto::admin::ListEntries { after: Some((1, "b".into())) }.into(),
    ]
    .iter()
    .map(|r| encode_frame(FrameKind::Request, 9, r, 0))
    .collect();
    let mut rng = Rng(0x5eed_f00d);
    for i in 0..20_000 {
        let bytes = if i % 2 == 0 {
            rng.bytes(256)
        } else {
            let mut frame = samples[i / 2 % samples.len()].clone();
            for _ in 0..1 + rng.next() % 3 {
                let at = rng.next() as usize % frame.len();
                frame[at] ^= rng.next() as u8;
            }
            frame
        };
        replay_or_keep("frame", i, &bytes, surge_fuzz::frame::run);
    }
}

/// Short random sequences, half in each mode (the first byte picks it).
#[test]
fn requests_short_run() {
    let mut rng = Rng(0xfeed_beef);
    for i in 0..300 {
        replay_or_keep("requests", i, &rng.bytes(160), surge_fuzz::requests::run);
    }
}

/// The `requests` target in raw mode on bytes that lean to its delegation steps: a byte of
/// 25 is `Watch` (a delegation's holder must watch) or, read as a sub-choice, a grant; 56 the
/// delegation step (a write-back, as a sub-choice); random bytes between them pick the
/// directories, numbers, give-backs and the second client's steps that recall.
#[test]
fn requests_delegation_short_run() {
    let mut rng = Rng(0xde1e_6a7e);
    for i in 0..2000 {
        let mut bytes = rng.bytes(160);
        for byte in bytes.iter_mut() {
            *byte = match rng.next() % 20 {
                0..=4 => 56,
                5..=7 => 25,
                _ => *byte,
            };
        }
        if let Some(mode) = bytes.first_mut() {
            *mode |= 1;
        }
        replay_or_keep("requests", 10_000 + i, &bytes, surge_fuzz::requests::run);
    }
}

/// Runs `target` on `bytes`; if it fails, keeps the input where `cargo fuzz tmin` can take it
/// (and this file's regressions can keep it once minimised), then fails.
fn replay_or_keep(target: &str, index: usize, bytes: &[u8], run: fn(&[u8])) {
    if std::panic::catch_unwind(|| run(bytes)).is_err() {
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz-{target}-failure-{index}"));
        std::fs::write(&path, bytes).expect("the failing input kept");
        panic!("{target} input {index} failed; kept in {}", path.display());
    }
}

#[test]
fn directives_regressions_replay() {
    replay_regressions("directives", surge_fuzz::directives::run);
}

/// Scripts of random lines built from the words of the `#DW` language (the fuzzer's
/// dictionary) and random bytes.
#[test]
fn directives_short_run() {
    let words: Vec<String> = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/directives.dict"))
        .expect("the dictionary")
        .lines()
        .filter_map(|line| line.strip_prefix('"')?.strip_suffix('"').map(|w| w.replace("\\x0a", "\n")))
        .collect();
    assert!(words.len() > 20, "the dictionary was not read");
    let mut rng = Rng(0xd1ec_7173);
    for i in 0..20_000 {
        let mut script = Vec::new();
        for _ in 0..rng.next() % 24 {
            match rng.next() % 8 {
                0 => script.extend(rng.bytes(6)),
                1 => script.push(b'\n'),
                _ => script.extend(words[rng.next() as usize % words.len()].as_bytes()),
            }
        }
        replay_or_keep("directives", i, &script, surge_fuzz::directives::run);
    }
}

#[test]
fn journal_regressions_replay() {
    replay_regressions("journal", surge_fuzz::journal::run);
}

/// The records real steps write, whole and with a few bytes changed (the records still
/// framed right, so the changes reach the replay), and random bytes.
/// `SURGE_FUZZ_SEEDS=dir` also writes the unchanged seeds there: the fuzzer's first corpus.
#[test]
fn journal_short_run() {
    let seeds = surge_fuzz::journal::seeds();
    assert!(seeds.len() > 20 && seeds.iter().any(|s| s.len() > 200), "the seeds hold records");
    if let Some(dir) = std::env::var_os("SURGE_FUZZ_SEEDS") {
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(PathBuf::from(&dir).join(format!("seed-{i}")), seed).expect("a seed written");
        }
    }
    let mut rng = Rng(0x70a5_7ed5);
    for i in 0..3_000 {
        let bytes = match i % 4 {
            0 => rng.bytes(512),
            _ => {
                let mut input = seeds[i % seeds.len()].clone();
                for _ in 0..1 + rng.next() % 4 {
                    let at = 2 + rng.next() as usize % input.len().saturating_sub(2).max(1);
                    if at < input.len() {
                        input[at] ^= rng.next() as u8;
                    }
                }
                input
            }
        };
        replay_or_keep("journal", i, &bytes, surge_fuzz::journal::run);
    }
}
