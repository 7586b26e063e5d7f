//! etcron's pure vocabulary, shared by every binary and by etcronctl: job specs and their
//! validation, the job dependency graph, schedules, the etcd key layout, the values stored in
//! etcd and MongoDB, bounded task output, webhook notification rules, and the pure half of gRPC
//! tasks (descriptors, JSON read as messages). No I/O: nothing here talks to etcd, MongoDB or
//! the network, or knows about metrics or command lines.

pub mod backfill;
pub mod calendar;
#[cfg(test)]
mod check;
pub mod dependency;
pub mod diff;
pub mod duration;
pub mod json;
pub mod keys;
pub mod notify;
pub mod output;
pub mod pool;
pub mod progress;
pub mod record;
pub mod schedule;
pub mod size;
pub mod spec;
pub mod stored;
pub mod workflow;

/// Milliseconds since the Unix epoch, the unit of every instant etcron stores.
pub type UnixMs = i64;

/// The current wall-clock time in Unix milliseconds (the simulated clock's, in a process that
/// set one with [`simulate_clock`]).
#[must_use]
pub fn now_ms() -> UnixMs {
    match SIMULATED_CLOCK.get() {
        Some(clock) => clock(),
        None => chrono::Utc::now().timestamp_millis(),
    }
}

static SIMULATED_CLOCK: std::sync::OnceLock<fn() -> UnixMs> = std::sync::OnceLock::new();

/// Makes [`now_ms`] read `clock` for the rest of the process: the simulation of the fire path
/// runs workers on tokio's paused clock, and their wall clock must move with it. `false` when a
/// clock was set already.
pub fn simulate_clock(clock: fn() -> UnixMs) -> bool {
    SIMULATED_CLOCK.set(clock).is_ok()
}

/// Whether this process runs on a simulated clock ([`simulate_clock`]).
#[must_use]
pub fn clock_is_simulated() -> bool {
    SIMULATED_CLOCK.get().is_some()
}

/// Formats Unix milliseconds as RFC 3339 with millisecond precision in UTC.
#[must_use]
pub fn rfc3339_ms(ms: UnixMs) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        None => ms.to_string(),
    }
}

/// Percent-encodes `s` as one URL path segment or query value: everything but RFC 3986's
/// unreserved characters (execution ids hold `@`, `#` and `:`).
#[must_use]
pub fn percent_encode(s: &str) -> String {
    use std::fmt::Write as _;
    s.bytes().fold(String::with_capacity(s.len()), |mut out, b| {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
        out
    })
}

/// The version every binary reports (workers put it into their registration).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_percent_encoded_as_one_segment() {
        assert_eq!(super::percent_encode("nightly-report@1700000000000#2"), "nightly-report%401700000000000%232");
        assert_eq!(super::percent_encode("a:shard-1 b/c~d_e.f"), "a%3Ashard-1%20b%2Fc~d_e.f");
        assert_eq!(super::percent_encode("ü"), "%C3%BC");
    }
}
