//! # surge-directives — the `#DW` lines of a batch script
//!
//! Users of a DataWarp burst buffer ask for it with `#DW` lines in their batch script
//! (`jobdw`, `persistentdw`, `create_persistent`, `destroy_persistent`, `stage_in`,
//! `stage_out`); Surge takes them unchanged. This crate turns a script into a checked
//! [`JobRequest`], or into every problem found, each naming its line and what is wrong in words
//! a user can act on: what Slurm's submit hook shows when it refuses a job. It does no I/O.
//!
//! * [`script`]: finding the directives (anywhere in the script: a `#DW stage_out` may follow
//!   the commands) and turning them into a [`JobRequest`]; sizes (`capacity=200GiB`) follow
//!   Surge's one rule, `surge_units`.
//! * [`submit`]: what a job's text becomes at submission under Slurm's burst_buffer/lua
//!   plugin: Slurm's own `#BB create_persistent`/`destroy_persistent` lines as `#DW` lines,
//!   a `--bb` option in DataWarp's short form as a `#DW jobdw` line, the default pool where
//!   none is named.

pub mod script;
pub mod submit;

pub use script::{
    parse_script, resolve_bb_path, AccessMode, Buffer, DirectiveError, JobDw, JobRequest, Persistent, Stage, StageKind, DATAWARP_TUNING,
    SWAP_REFUSED,
};
