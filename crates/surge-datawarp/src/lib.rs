//! # libdatawarp for Surge — Cray DataWarp's C API, drop-in
//!
//! `include/datawarp.h` declares DataWarp's calls with DataWarp's own names, argument types,
//! enum values and return conventions, and this library (`libdatawarp.so`) carries them out
//! on a Surge instance, so that a code written for DataWarp (Chombo-Crunch's
//! `dw_stage_file_out(bb, lustre, DW_STAGE_IMMEDIATE)`, libhio's stripe queries) builds with
//! `-ldatawarp` and runs unmodified.
//!
//! It is a thin adapter: paths are resolved, calls run, failures recorded and panics stopped
//! by libsurge's own machinery (`surge-capi`, linked in as a Rust library), and stages are
//! submitted through its Rust functions; what is here is what DataWarp does differently from
//! libsurge:
//! * its errors: of a path, -ENOENT when it does not exist, -EINVAL when it has no stage for
//!   the call to act on; a failed stage's own errno (not -EIO for all) from a wait;
//! * its lists, NULL-terminated arrays of paths, each file a stage of its own;
//! * its query counts, one per path (the path's latest stage), and a directory covering the
//!   stages of the paths below it;
//! * `DW_ACTIVATE_DEFERRED_STAGE`, which the coordinator has no request for: the deferred
//!   stages of the path are submitted again as immediate ones, then dropped ([`stage`]);
//! * the stripe calls, answered from the instance's placement ([`stripe`]).
//!
//! Guarantees: every call returns 0 (a length, for `dw_read_failed_stage`) or a negative
//! errno, and never unwinds into C; calls are thread-safe; the stages are the instance's, as
//! `surge stage status` and libsurge see them, journaled by its coordinator.

pub mod failed;
pub mod stage;
pub mod stripe;
