//! The operations layer's tests (the mount's answers, no kernel), in one executable: the
//! servers run in this process, the mount's operations over them (see `common`).

mod cache;
mod common;
mod files;
mod semantics;
