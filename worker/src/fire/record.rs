//! Execution records as the fire path builds them, and the log line of a finished one.

use etcron_model::record::{ExecutionRecord, Status, TriggerKind};
use etcron_model::{now_ms, rfc3339_ms};

use crate::context::Context;
use crate::metrics::METRICS;
use crate::tasks::shell::{Ending, Finished, StopReason};
use crate::timing::fire::Fire;

/// The record of a fire, before it ran.
pub(crate) fn base_record(ctx: &Context, fire: &Fire, status: Status, fencing_token: Option<i64>) -> ExecutionRecord {
    let mut record = ExecutionRecord::blank(&fire.id, fire.scheduled_ms, fire.trigger, status, Some(&fire.spec));
    record.worker_id.clone_from(&ctx.config.worker_id);
    record.hostname.clone_from(&ctx.hostname);
    record.fencing_token = fencing_token;
    record.parent.clone_from(&fire.parent);
    record.params.clone_from(&fire.params);
    // The workflow run is the record's own field, not one of its parameters.
    record.workflow = record.params.workflow.take();
    record.priority = fire.priority.or(fire.spec.priority);
    record.jitter_ms = jitter_of(fire);
    record
}

/// How much the job's `jitter` moved the tick a fire is for; `None` for runs that are not a
/// schedule tick's (manual, dependency) and for jobs without jitter.
fn jitter_of(fire: &Fire) -> Option<i64> {
    if fire.spec.jitter.is_none() || matches!(fire.trigger, TriggerKind::Manual | TriggerKind::Dependency) {
        return None;
    }
    fire.spec.parsed_schedule(&fire.id.job).ok()?.jitter_at(fire.scheduled_ms)
}

pub(crate) fn not_run_record(
    ctx: &Context,
    fire: &Fire,
    status: Status,
    reason: String,
    fencing_token: Option<i64>,
) -> ExecutionRecord {
    let mut record = base_record(ctx, fire, status, fencing_token);
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
            Some(
                "timeout reached; task stopped (process group killed, or HTTP request or gRPC call aborted)".to_owned(),
            ),
        ),
        Ending::Stopped(StopReason::Killed(why)) => (Status::Killed, Some(format!("killed: {why}"))),
        // Not an operator's kill: the run was lost with the worker's session, and is handled
        // as any lost run (rerun or `on_failure`, per `on_worker_loss`).
        Ending::Stopped(StopReason::LeaseLost) => {
            (Status::Lost, Some("stopped: this worker lost its session lease while running it".to_owned()))
        }
        Ending::Stopped(StopReason::Shutdown) => (Status::Killed, Some("killed: worker shut down".to_owned())),
        Ending::Stopped(StopReason::Rebalance) => (
            Status::Killed,
            Some(
                "stopped: the task asked to be moved (rebalance); another worker continues it from its checkpoint"
                    .to_owned(),
            ),
        ),
        Ending::SpawnFailed(e) => (Status::Failed, Some(e.clone())),
        Ending::Http { ok: true, .. } => (Status::Succeeded, None),
        Ending::Http { status, ok: false, expected } => {
            let expected = expected.map_or_else(|| "2xx".to_owned(), |s| s.to_string());
            (Status::Failed, Some(format!("HTTP status {status}, expected {expected}")))
        }
        Ending::Grpc { code: "OK", .. } => (Status::Succeeded, None),
        Ending::Grpc { code, message } => (Status::Failed, Some(format!("gRPC status {code}: {message}"))),
        Ending::RequestFailed(e) | Ending::RemoteFailed(e) => (Status::Failed, Some(e.clone())),
        Ending::NoCapacity(why) => (Status::Missed, Some(why.clone())),
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
