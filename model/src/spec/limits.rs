//! Every limit on a spec, in one place: sizes, counts, durations and ranges the validation holds
//! a spec to, and the rule for an environment variable's name, shared by `env`, `secret_env` and
//! run parameters (which must agree).

use std::time::Duration;

/// Largest serialized spec.
pub const MAX_SPEC_BYTES: usize = 64 * 1024;
/// Longest shell command.
pub const MAX_COMMAND_BYTES: usize = 16 * 1024;
/// Longest description.
pub const MAX_DESCRIPTION_LEN: usize = 4096;
/// Longest team name.
pub const MAX_TEAM_LEN: usize = 63;
/// Longest task timeout.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);
/// Most retries.
pub const MAX_RETRIES: u32 = 100;
/// Longest retry backoff.
pub const MAX_BACKOFF: Duration = Duration::from_secs(24 * 3600);
/// Most shards.
pub const MAX_SHARDS: u32 = 1000;
/// Most dependent jobs per list.
pub const MAX_DEPENDENTS: usize = 32;
/// Smallest and largest per-job output cap.
pub const MAX_OUTPUT_RANGE: std::ops::RangeInclusive<u64> = 256..=16 * 1024 * 1024;
/// Default and largest `max_queue`.
pub const DEFAULT_MAX_QUEUE: u32 = 5;
pub const MAX_QUEUE: u32 = 100;
/// Default and largest `max_catchup`.
pub const DEFAULT_MAX_CATCHUP: u32 = 100;
pub const MAX_CATCHUP: u32 = 1000;
/// Largest `pause_after_failures`.
pub const MAX_PAUSE_AFTER_FAILURES: u32 = 1000;
/// Most expressions in a spec's `schedules`.
pub const MAX_SCHEDULES: usize = 10;
/// Most calendars one job may name in `skip_calendars`.
pub const MAX_SKIP_CALENDARS: usize = 10;
/// Longest `jitter`.
pub const MAX_JITTER: Duration = Duration::from_secs(3600);
/// How many of a job's next ticks a save (or a preview) looks at to find the shortest time
/// between two, which `jitter` must stay below.
pub const JITTER_GAP_SAMPLE: usize = 500;
/// Largest HTTP task body.
pub const MAX_HTTP_BODY: usize = 32 * 1024;
/// Longest HTTP task URL.
pub const MAX_URL_LEN: usize = 4096;
/// Smallest, default and largest `start_deadline`: how late a schedule tick may still be raced.
pub const START_DEADLINE_RANGE: std::ops::RangeInclusive<Duration> = Duration::from_secs(1)..=Duration::from_secs(3600);
pub const DEFAULT_START_DEADLINE: Duration = Duration::from_secs(10);
/// Shortest task timeout: below it no task can even start.
pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);
/// Smallest and largest `limits.memory` (address space of each process of a shell task).
pub const MEMORY_LIMIT_RANGE: std::ops::RangeInclusive<u64> = 1 << 20..=1 << 40;
/// Smallest and largest `limits.cpu` (CPU time of each process of a shell task).
pub const CPU_LIMIT_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(7 * 24 * 3600);
/// Smallest and largest `limits.open_files` (per process of a shell task).
pub const OPEN_FILES_RANGE: std::ops::RangeInclusive<u64> = 16..=1_048_576;

/// Most environment variables, headers, labels or selector entries.
pub const MAX_MAP_ENTRIES: usize = 64;
/// Longest label/selector/env key.
pub const MAX_MAP_KEY_LEN: usize = 128;
/// Longest label/selector/env/header value.
pub const MAX_MAP_VALUE_LEN: usize = 4096;

/// An environment variable's name: letters, digits and `_`, not starting with a digit.
pub(crate) fn env_key_ok(k: &str) -> bool {
    !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Longest user or group name (as `useradd` allows).
pub const MAX_ACCOUNT_NAME_LEN: usize = 32;

/// A job's `priority` when it names none.
pub const DEFAULT_PRIORITY: u8 = 50;
/// The highest `priority`.
pub const MAX_PRIORITY: u8 = 100;
/// Most slots of its pool one run holds (`pool_slots`): each is a compare and a put in the
/// claim transaction, within etcd's operations per transaction.
pub const MAX_SLOTS_PER_RUN: u32 = 16;
