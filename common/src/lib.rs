//! etcron's shared I/O: etcd requests and errors, the session and claim helpers, admission
//! control, the MongoDB store, metrics, the HTTP serving loop and settings. The pure vocabulary
//! (specs, schedules, keys, records) is the `etcron-model` crate, re-exported here so the
//! servers name one crate.

pub mod admission;
pub mod claim;
pub mod etcd;
pub mod harden;
pub mod hash;
pub mod metrics;
pub mod serve;
pub mod session;
pub mod settings;
pub mod store;
pub mod task;

pub use etcron_model::{
    alerts, backfill, calendar, clock_is_simulated, dependency, diff, duration, grpc, headers, http_async, job, json,
    keys, model, notify, now_ms, output, params, percent_encode, progress, rfc3339_ms, schedule, simulate_clock, size,
    UnixMs, VERSION,
};
