//! # surge-manager — Surge's control plane
//!
//! One manager per cluster owns the burst buffer's capacity: the pools of its configuration
//! (dedicated burst-buffer nodes, or the jobs' own compute nodes), the instances cut from them
//! for jobs and persistent reservations, and the jobs' stage-in and stage-out. The workload
//! manager's hooks (Slurm's burst_buffer/lua script, through `surge bb ...`) and the nodes'
//! prolog and epilog are its short-lived clients; node agents (`surge-agent`) start the
//! servers it asks for; the stage coordinators beside the servers do the copies, which it
//! submits and follows.
//!
//! * [`config`]: the configuration file;
//! * [`store`]: the durable state, in SQLite;
//! * [`pools`]: rounding to a pool's unit and placing servers (pure);
//! * [`manager`]: each request's work, and reconciliation with what runs after a restart;
//! * [`service`]: the local socket, where callers are known by their kernel credentials.

pub mod config;
pub mod manager;
pub mod pools;
pub mod service;
pub mod store;
