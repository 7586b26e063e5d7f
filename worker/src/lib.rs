//! etcron worker: watches jobs in etcd, keeps their next ticks in a timing wheel, races for
//! per-execution claims and runs the tasks it wins.
//!
//! Folders, from the bottom up; each imports only folders above it in this list, never below
//! (`tests/tests/it/meta/structure.rs` holds it):
//! - [`timing`]: the timing wheel and the [`timing::fire::Fire`] it hands out; pure.
//! - [`tasks`]: running a task (shell, HTTP, gRPC) and what a running task reports; nothing
//!   of claims, records or the fire path.
//! - [`cluster`]: this worker's view of the cluster, mirrored from etcd watches.
//! - [`notify`]: notifications and job health.
//! - [`context`]: what every execution shares, and what it holds (group commit, slots,
//!   provisional records, unsettled ticks, the record sink).
//! - [`fire`]: one fire through its phases: decide, race, run, close; what does not run is
//!   settled; records, queues, backfills and alerts.
//! - [`ledger`]: ticks settled after the fact: the catch-up after downtime and the
//!   executions of departed workers.
//! - Beside them: [`config`], [`metrics`], [`rules`] (what follows an execution), [`failpoint`];
//!   and at the top [`scheduler`] (the loop that owns the wheel), [`node`] (one worker wired) and
//!   [`metrics_server`].

pub mod cluster;
pub mod config;
pub mod context;
pub mod executor;
pub mod failpoint;
pub mod fire;
pub mod ledger;
pub mod metrics;
pub mod metrics_server;
pub mod node;
pub mod notify;
pub mod rules;
pub mod scheduler;
pub mod tasks;
pub mod timing;
