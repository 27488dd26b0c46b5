//! Surge's fuzz targets as plain functions of the fuzzer's bytes, so that the same code runs
//! under libFuzzer (`fuzz_targets/`, nightly) and, for a few thousand seeded inputs and every
//! finding kept under `fuzz/regressions/`, in the stable test suite
//! (`crates/surge-server/tests/fuzz_corpus.rs` includes this file). It depends on nothing
//! but Surge's own crates and tokio for that reason.
//!
//! * [`frame`]: the frame header and message decoders, on bytes as they come off the wire;
//! * [`directives`]: any text as a batch script through the `#DW` parser;
//! * [`requests`]: sequences of valid-looking requests against a real server, and the
//!   namespace and data checked after each sequence;
//! * [`journal`]: a metadata directory as a crash or a bug may leave it, opened as a
//!   restarting server opens it;
//! * [`input`]: how a target reads its choices out of the fuzzer's bytes.

pub mod directives;
pub mod frame;
pub mod input;
pub mod journal;
pub mod requests;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// A new directory for one run of `target`: in memory when the machine has /dev/shm, so runs
/// cost no disk I/O.
fn scratch_dir(target: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    base.join(format!("surge-fuzz-{target}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)))
}
