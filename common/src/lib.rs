//! Shared vocabulary of etcron: job model and validation, the job dependency graph, schedules,
//! the etcd key layout, the records stored in etcd, the etcd session and claim helpers,
//! bounded task output, and webhook notification targets and records.

#[cfg(test)]
mod check;
pub mod claim;
pub mod dependency;
pub mod duration;
pub mod etcd;
pub mod job;
pub mod keys;
pub mod metrics;
pub mod model;
pub mod notify;
pub mod output;
pub mod schedule;
pub mod session;
pub mod settings;
pub mod size;
pub mod store;

/// Milliseconds since the Unix epoch, the unit of every instant etcron stores.
pub type UnixMs = i64;

/// The current wall-clock time in Unix milliseconds.
#[must_use]
pub fn now_ms() -> UnixMs {
    chrono::Utc::now().timestamp_millis()
}

/// Formats Unix milliseconds as RFC 3339 with millisecond precision in UTC.
#[must_use]
pub fn rfc3339_ms(ms: UnixMs) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        None => ms.to_string(),
    }
}

/// The version every binary reports (workers put it into their registration).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
