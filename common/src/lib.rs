//! etcron's shared I/O: etcd requests and errors, the session and claim helpers, admission
//! control, the MongoDB store, metrics, the HTTP serving loop, settings and trace export. The
//! pure vocabulary (specs, schedules, keys, records) is the `etcron-model` crate, which callers
//! name themselves (`etcron_model::spec::JobSpec`): this crate does not re-export it.

pub mod admission;
pub mod backoff;
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
pub mod trace;
