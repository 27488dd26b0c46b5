//! # libsurge — Surge's C API
//!
//! Staging calls for applications, declared in `include/surge.h`, with the semantics of Cray
//! DataWarp's libdatawarp so that a code written against it (Chombo-Crunch stages its
//! checkpoints out with `dw_stage_file_out(..., DW_STAGE_IMMEDIATE)`) ports by renaming calls.
//! The Python module `surge.staging` binds the same library with ctypes.
//!
//! Each call resolves the burst-buffer path to an instance (a path on a recorded Surge mount,
//! or a path inside the instance named by `SURGE_INSTANCE`), then talks to that instance's
//! stage coordinator through the native client library on a small runtime of its own. Calls
//! return 0 or a negative errno and never unwind into C; the message of the last failure is
//! kept per thread for `surge_last_error`.
//!
//! It also follows the files published in a directory and takes them as a consumer of a group
//! (`surge_watch_*`, `surge_queue_*`: see `docs/workflow.md`).
//!
//! [`call`] holds what every call goes through; [`staging`] and [`workflow`] the entry points.
//! The crate is also a Rust library: `surge-datawarp` (libdatawarp, the same staging under
//! DataWarp's own names and conventions) calls [`call`] and the Rust functions of [`staging`].

pub mod call;
pub mod staging;
pub mod workflow;
