//! etcron worker: watches jobs in etcd, keeps their next ticks in a timing wheel, races for
//! per-execution claims and runs the tasks it wins.

pub mod alerts;
pub mod backfill;
pub mod batcher;
pub mod calendars;
pub mod catchup;
pub mod close;
pub mod config;
pub mod decide;
pub mod execution;
pub mod executor;
pub mod fire;
pub mod health;
pub mod http_task;
pub mod identity;
pub mod ledger;
pub mod live_output;
pub mod log_sink;
pub mod loss;
pub mod membership;
pub mod metrics;
pub mod metrics_server;
pub mod notifier;
pub mod queue;
pub mod race;
pub mod record;
pub mod rules;
pub mod run;
pub mod run_as;
pub mod scheduler;
pub mod settle;
pub mod silence;
pub mod state;
pub mod taken;
pub mod watcher;
pub mod wheel;
