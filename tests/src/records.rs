//! Synthetic execution records for the search tests and the record benchmarks: reproducible,
//! with realistic shares of statuses, triggers and workers.

use etcron_common::store::{RecordWrite, WriteMode};
use etcron_model::keys::{ExecutionId, Tick};
use etcron_model::record::{ExecutionRecord, Status, TriggerKind};

/// Jobs in the synthetic data; records are one per job per second.
pub const JOBS: i64 = 500;
pub const BASE_MS: i64 = 1_790_000_000_000;

/// A 64-bit mix of `i` (splitmix64), for reproducible pseudo-random fields.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Record `i` of the synthetic data with `JOBS` jobs; see [`record_of`].
#[must_use]
pub fn record(i: u64) -> RecordWrite {
    record_of(i, JOBS)
}

/// Record `i` of the synthetic data with `jobs` jobs: job `i % jobs` at second `i / jobs`; 90 % succeeded, 8 %
/// failed, the rest timed out, killed, lost, missed or skipped; 95 % schedule ticks; 10
/// workers; output of about 60 bytes (11 words), one in 200 with `disk_full`.
#[must_use]
pub fn record_of(i: u64, jobs: i64) -> RecordWrite {
    let n = i64::try_from(i).unwrap_or(i64::MAX);
    let job = format!("job-{:03}", n % jobs);
    let ms = BASE_MS + (n / jobs) * 1000;
    let h = mix(i);
    let status = match h % 1000 {
        0..=899 => Status::Succeeded,
        900..=979 => Status::Failed,
        980..=989 => Status::TimedOut,
        990..=994 => Status::Killed,
        995..=996 => Status::Lost,
        997..=998 => Status::Missed,
        _ => Status::Skipped,
    };
    let trigger = match (h >> 10) % 1000 {
        0..=949 => TriggerKind::Schedule,
        950..=969 => TriggerKind::Retry,
        970..=979 => TriggerKind::Manual,
        980..=989 => TriggerKind::Catchup,
        990..=994 => TriggerKind::Dependency,
        _ => TriggerKind::Failover,
    };
    let mut output = format!("started backup of db\nwrote {} rows\ndone in {} ms\n", (h >> 20) % 5000, (h >> 33) % 900);
    if i.is_multiple_of(200) {
        output.push_str("error: disk_full on /var/backups\n");
    }
    RecordWrite {
        mode: WriteMode::Replace,
        record: ExecutionRecord {
            id: ExecutionId::new(&job, Tick::Scheduled(ms)),
            job,
            // Each job in one of three teams, so team searches have a third of the records.
            team: Some(format!("team-{}", (n % jobs) % 3)),
            scheduled_at: etcron_model::rfc3339_ms(ms),
            scheduled_ms: ms,
            claimed_at: Some(etcron_model::rfc3339_ms(ms + 2)),
            started_at: Some(etcron_model::rfc3339_ms(ms + 3)),
            finished_at: Some(etcron_model::rfc3339_ms(ms + 50)),
            duration_ms: Some(47),
            worker_id: format!("w{}", (h >> 43) % 10),
            hostname: "bench".into(),
            attempt: 1,
            trigger,
            status,
            exit_code: Some(i32::from(status != Status::Succeeded)),
            signal: None,
            output,
            output_truncated: false,
            error: None,
            reason: None,
            fencing_token: Some(ms),
            parent: None,
            http_status: None,
            shard: None,
            params: etcron_model::record::RunParams::default(),
            jitter_ms: None,
            workflow: None,
            priority: None,
            pool: None,
            trace_id: None,
            reports: Default::default(),
        },
    }
}
