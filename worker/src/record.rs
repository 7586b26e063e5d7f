//! Execution records as the fire path builds them, and the log line of a finished one.

use etcron_common::job::Mode;
use etcron_common::keys::{ExecutionId, Part, Tick};
use etcron_common::model::{ExecutionRecord, Status, TriggerKind};
use etcron_common::{now_ms, rfc3339_ms, UnixMs};

use crate::executor::{Ending, Finished, StopReason};
use crate::fire::Fire;
use crate::metrics::METRICS;
use crate::state::Context;

/// The record of a fire, before it ran.
pub(crate) fn base_record(ctx: &Context, fire: &Fire, status: Status, fencing_token: Option<i64>) -> ExecutionRecord {
    let mut record = blank_record(&fire.id, fire.scheduled_ms, fire.trigger, status, Some(fire.spec.mode));
    record.worker_id.clone_from(&ctx.config.worker_id);
    record.hostname.clone_from(&ctx.hostname);
    record.fencing_token = fencing_token;
    record.parent.clone_from(&fire.parent);
    record
}

/// A record with only the execution's identity filled in.
pub(crate) fn blank_record(
    id: &ExecutionId,
    scheduled_ms: UnixMs,
    trigger: TriggerKind,
    status: Status,
    mode: Option<Mode>,
) -> ExecutionRecord {
    ExecutionRecord {
        id: id.clone(),
        job: id.job.clone(),
        scheduled_at: rfc3339_ms(scheduled_ms),
        scheduled_ms,
        claimed_at: None,
        started_at: None,
        finished_at: None,
        duration_ms: None,
        worker_id: String::new(),
        hostname: String::new(),
        attempt: id.attempt,
        trigger,
        status,
        exit_code: None,
        signal: None,
        output: String::new(),
        output_truncated: false,
        error: None,
        reason: None,
        fencing_token: None,
        parent: None,
        http_status: None,
        shard: match (&id.part, mode) {
            (Part::Shard(i), Some(Mode::Sharded(n))) => Some((*i, n)),
            _ => None,
        },
    }
}

pub(crate) fn not_run_record(
    ctx: &Context,
    fire: &Fire,
    status: Status,
    reason: String,
    fencing_token: i64,
) -> ExecutionRecord {
    let mut record = base_record(ctx, fire, status, Some(fencing_token));
    record.finished_at = Some(rfc3339_ms(now_ms()));
    record.reason = Some(reason);
    record
}

pub(crate) fn status_of(finished: &Finished) -> (Status, Option<String>) {
    match &finished.ending {
        Ending::Exited(0) => (Status::Succeeded, None),
        Ending::Exited(code) => (Status::Failed, Some(format!("exit code {code}"))),
        Ending::Signaled(sig) => (Status::Failed, Some(format!("terminated by signal {sig}"))),
        Ending::TimedOut => (
            Status::TimedOut,
            Some("timeout reached; task stopped (process group killed, or HTTP request aborted)".to_owned()),
        ),
        Ending::Stopped(StopReason::Killed(why)) => (Status::Killed, Some(format!("killed: {why}"))),
        // Not an operator's kill: the run was lost with the worker's session, and is handled
        // as any lost run (rerun or `on_failure`, per `on_worker_loss`).
        Ending::Stopped(StopReason::LeaseLost) => {
            (Status::Lost, Some("stopped: this worker lost its session lease while running it".to_owned()))
        }
        Ending::Stopped(StopReason::Shutdown) => (Status::Killed, Some("killed: worker shut down".to_owned())),
        Ending::SpawnFailed(e) => (Status::Failed, Some(e.clone())),
        Ending::Http { ok: true, .. } => (Status::Succeeded, None),
        Ending::Http { status, ok: false, expected } => {
            let expected = expected.map_or_else(|| "2xx".to_owned(), |s| s.to_string());
            (Status::Failed, Some(format!("HTTP status {status}, expected {expected}")))
        }
        Ending::RequestFailed(e) => (Status::Failed, Some(e.clone())),
    }
}

pub(crate) fn log_record(record: &ExecutionRecord, lateness_ms: i64) {
    METRICS.executions.with_label_values(&[record.job.as_str(), record.status.as_str()]).inc();
    tracing::info!(
        target: "etcron::execution",
        execution_id = %record.id,
        job = %record.job,
        status = record.status.as_str(),
        scheduled_at = %record.scheduled_at,
        started_at = record.started_at.as_deref().unwrap_or(""),
        duration_ms = record.duration_ms.unwrap_or(0),
        lateness_ms,
        attempt = record.attempt,
        trigger = record.trigger.as_str(),
        exit_code = record.exit_code,
        signal = record.signal,
        fencing_token = record.fencing_token,
        output_bytes = record.output.len(),
        output_truncated = record.output_truncated,
        error = record.error.as_deref().unwrap_or(""),
        reason = record.reason.as_deref().unwrap_or(""),
        "execution finished"
    );
}

/// What triggered an execution, as far as its tick tells (markers from before `trigger`).
pub(crate) fn trigger_of(tick: &Tick) -> TriggerKind {
    match tick {
        Tick::Scheduled(_) => TriggerKind::Schedule,
        Tick::Manual(_) => TriggerKind::Manual,
        Tick::Dependency(_) => TriggerKind::Dependency,
    }
}
