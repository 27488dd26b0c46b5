//! What a campaign records: each worker's operations as JSON lines (an `invoke` line before
//! the operation, a `done` line after it, so an operation cut short by a kill shows as
//! invoked and never done), the faults injected with their time windows, and the contents
//! the workers write, which say by themselves which version they are.

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Microseconds since the epoch. Every process of a campaign runs on one host, so these
/// order events across workers (the checker's real-time order).
pub fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// An operation a worker asks for.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Creates the worker's own file `path` (O_EXCL) and writes version `version`, closes.
    Put { path: String, version: u64 },
    /// Overwrites the worker's own file with `version` (open, set length, write, close).
    Rewrite { path: String, version: u64 },
    /// Renames the worker's own file.
    Rename { from: String, to: String },
    /// A hard link made to the worker's own file at `to`, then the old name `from` unlinked:
    /// a move through link(2), the file never nameless.
    Relink { from: String, to: String },
    /// Unlinks the worker's own file.
    Unlink { path: String },
    /// Writes `version` over a shared file this worker alone writes (its slot's).
    Update { path: String, version: u64 },
    /// Opens a shared or published file and reads it whole.
    Read { path: String },
    /// Writes `version` to the temporary name `temp`, closes, renames it over `path`.
    Publish { path: String, temp: String, version: u64 },
    /// An O_EXCL create of `path` that every worker races for; the winner writes its
    /// incarnation into it.
    Exclusive { path: String },
    /// Takes a write lock on the counter file, reads it, writes it plus one, closes, unlocks.
    Increment { path: String },
    /// Appends this worker's record `tag` (its operation's number) to the log every worker
    /// appends to (O_APPEND across nodes).
    Append { path: String, tag: u64 },
}

/// What came of an operation.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// A read's result: what the file held.
    Read {
        seen: Seen,
    },
    /// An increment's: the value read, and when the lock was held (from its grant to the
    /// unlock's request).
    Incremented {
        read: u64,
        locked_at: u64,
        unlocking_at: u64,
    },
    /// Failed with `code` (ErrorCode's name, or `Hung` for an operation that did not end
    /// within the campaign's bound). `maybe_applied`: whether some of its effect may have
    /// happened (lost contact, or a later step failing after an earlier one was done); false
    /// only for a refusal before anything changed.
    Failed {
        code: String,
        maybe_applied: bool,
    },
}

/// A file's contents as a reader classifies them.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(tag = "as", rename_all = "snake_case")]
pub enum Seen {
    /// No bytes.
    Empty,
    /// Exactly version `version` as [`contents`] makes it.
    Whole { version: u64 },
    /// Anything else: a mixture, a part, foreign bytes.
    Torn,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(tag = "line", rename_all = "snake_case")]
pub enum Line {
    Invoke { worker: u64, seq: u64, at: u64, op: Op },
    Done { worker: u64, seq: u64, at: u64, outcome: Outcome },
}

/// A fault and its window.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub kind: String,
    pub target: String,
    pub from: u64,
    pub to: u64,
}

/// Appends lines to a history file, each written through at once (a killed worker's history
/// ends at its last whole line).
pub struct Recorder {
    file: std::fs::File,
}

impl Recorder {
    pub fn create(path: &Path) -> std::io::Result<Recorder> {
        Ok(Recorder { file: std::fs::OpenOptions::new().create(true).append(true).open(path)? })
    }

    pub fn record<T: Serialize>(&mut self, line: &T) {
        let mut text = serde_json::to_vec(line).expect("a history line serializes");
        text.push(b'\n');
        // One write(2) per line: whole lines only, whatever kills the process.
        self.file.write_all(&text).expect("write the history");
    }
}

/// Every line of a JSON-lines file; a last line cut short by a kill is left out.
pub fn read_lines<T: for<'de> Deserialize<'de>>(path: &Path) -> std::io::Result<Vec<T>> {
    let file = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut lines = Vec::new();
    for line in file.lines() {
        if let Ok(parsed) = serde_json::from_str(&line?) {
            lines.push(parsed);
        }
    }
    Ok(lines)
}

/// Version `version` of a file: a 16-byte header (the version, the whole length) and bytes
/// drawn from the version, 0 to 300 KiB in all (several chunks at the campaign's chunk size).
pub fn contents(version: u64) -> Vec<u8> {
    let len = 16 + (version.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize % (300 << 10);
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(len as u64).to_le_bytes());
    let mut state = version ^ 0x5851_f42d_4c95_7f2d;
    while out.len() < len {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        out.extend_from_slice(&state.to_le_bytes()[..(len - out.len()).min(8)]);
    }
    out
}

/// The size of an appended record.
pub const RECORD: usize = 32;

/// Worker `worker`'s record `tag`: the two numbers, a check of them, and a mark.
pub fn record(worker: u64, tag: u64) -> [u8; RECORD] {
    let mut out = [0u8; RECORD];
    out[..8].copy_from_slice(&worker.to_le_bytes());
    out[8..16].copy_from_slice(&tag.to_le_bytes());
    out[16..24].copy_from_slice(&(worker.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ tag.rotate_left(17)).to_le_bytes());
    out[24..].copy_from_slice(b"surgelog");
    out
}

/// A whole record's worker and tag; None for anything else (zeros where an append's range was
/// set aside and its write failed, or a part of one).
pub fn parse_record(bytes: &[u8]) -> Option<(u64, u64)> {
    let worker = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let tag = u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?);
    (bytes.len() == RECORD && record(worker, tag) == bytes).then_some((worker, tag))
}

/// What `bytes` are: empty, a whole version, or torn.
pub fn classify(bytes: &[u8]) -> Seen {
    if bytes.is_empty() {
        return Seen::Empty;
    }
    let Some(version) = bytes.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap())) else { return Seen::Torn };
    if contents(version) == bytes {
        Seen::Whole { version }
    } else {
        Seen::Torn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contents_say_which_version_they_are_and_a_change_tears_them() {
        for version in [1, 2, 77, 1_000_003] {
            let bytes = contents(version);
            assert_eq!(classify(&bytes), Seen::Whole { version });
            let mut torn = bytes.clone();
            let last = torn.len() - 1;
            torn[last] ^= 1;
            assert_eq!(classify(&torn), Seen::Torn);
            assert_eq!(classify(&bytes[..bytes.len() - 1]), Seen::Torn);
        }
        assert_eq!(classify(b""), Seen::Empty);
        let (a, b) = (contents(5), contents(6));
        let mixed: Vec<u8> = b.iter().take(20).chain(a.iter().skip(20)).copied().collect();
        assert_eq!(classify(&mixed), Seen::Torn);
        assert_eq!(parse_record(&record(1001, 7)), Some((1001, 7)));
        let mut torn = record(1001, 7);
        torn[20] = 0;
        assert_eq!(parse_record(&torn), None);
        assert_eq!(parse_record(&[0; RECORD]), None);
    }
}
