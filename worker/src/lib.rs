//! etcron worker: watches jobs in etcd, keeps their next ticks in a timing wheel, races for
//! per-execution claims and runs the tasks it wins.

pub mod batcher;
pub mod catchup;
pub mod config;
pub mod execution;
pub mod executor;
pub mod http_task;
pub mod live_output;
pub mod log_sink;
pub mod membership;
pub mod metrics;
pub mod notifier;
pub mod scheduler;
pub mod taken;
pub mod watcher;
pub mod wheel;
