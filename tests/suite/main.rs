//! The cross-component tests, one module per subject, in one test executable: each file
//! would otherwise be a binary of its own that links the whole workspace again, and linking
//! them was most of the suite's build time. `scripts/run-tests.py` still runs each module as
//! a part of its own (`surge-tests:fuse`, ...), side by side; by hand, a module is a filter:
//! `cargo test --release -p surge-tests --test suite fuse::`.

mod campaign;
mod capi;
mod cli;
mod cluster;
mod data_plane;
mod datawarp;
mod faults;
mod fsck;
mod fsstress_mounts;
mod fsx_mounts;
mod fuse;
mod identity;
mod namespace;
mod nodes;
mod preload;
mod slurm;
mod soak;
mod staging;
mod workflow;
