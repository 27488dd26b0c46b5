//! # surge-stage — the stage coordinator
//!
//! Moves files between the parallel file system (PFS) and a Surge instance. The coordinator
//! answers the staging service ([`surge_proto::stage::StageService`]): it plans a stage (which
//! files, which sizes: `plan`), drives the copy in batches and windows (`run`), and keeps
//! the stage's state and per-file progress. It moves no file data itself and holds no server
//! state: it is a client of the instance ([`surge_client`]), reaching the servers whose
//! addresses its configuration names ([`Peers`]), and each server, a *worker*, copies the
//! chunks it owns between the PFS and its node-local store when asked (`StageCopy`).
//!
//! The daemon (`surge-server`) hosts a coordinator beside each data server and hands it the
//! staging requests the server receives; a control plane could host it instead. Beside
//! server 0 it also runs the [`retention`] keeper, which applies directories' retention
//! policies (stage out, then remove) through the same coordinator, and beside every server
//! the [`purges`] keeper, which purges what clients left of the data of the files that
//! server ended.
//!
//! That state is journaled in `<root>/stages/<id>.json` (written under a temporary name, then
//! renamed) at every change of state and about once a second while bytes move, so it survives
//! a restart of the coordinator. A stage that was queued or running when the coordinator
//! stopped is reported failed after the restart, and the temporary files of its unfinished
//! files are removed: a stage is never reported done unless every file was published.

mod coordinator;
mod plan;
pub mod purges;
mod records;
pub mod retention;
mod run;
mod stages;

pub use coordinator::{Coordinator, CoordinatorConfig, Peers};
