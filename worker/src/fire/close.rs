//! The close phase: the claim rewritten `done` with the run's status and its follow-ups (one
//! transaction, batched with others), retried until etcd takes it; then the final record and
//! its notification.

use std::time::Duration;

use etcron_common::backoff::Backoff;
use etcron_common::claim::{self, CompleteOutcome};
use etcron_common::store::{RecordWrite, WriteMode};
use etcron_model::record::{ExecutionRecord, Status};
use etcron_model::stored::Claim;
use etcron_model::{now_ms, rfc3339_ms, UnixMs};

use crate::context::batcher::CloseError;
use crate::context::Context;
use crate::fire::race::WonClaim;
use crate::fire::record::{log_record, status_of};
use crate::fire::run::Ran;
use crate::fire::spans::Step;
use crate::fire::workflow::StepOf;
use crate::metrics::METRICS;
use crate::notify::health;
use crate::rules::follow_ups;
use crate::tasks::shell;
use crate::timing::fire::{to_json, Fire, CLOSE_RETRY_MAX};

/// How a close ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    /// The claim is `done` with this run's status; its follow-ups are written.
    Done,
    /// The loss handling closed it first (recorded `lost`), or etcd did not take the close
    /// within the claim's retention: this run is not the tick's outcome.
    NotOurs,
}

/// Longest a close keeps trying: past the claim's shortest retention the claim is gone and
/// can no longer be closed by its winner.
pub(crate) const CLOSE_FOR: Duration = claim::MIN_RETENTION;

/// Closes a won claim, trying until etcd takes it or somebody else closed it. A close that
/// could not land before the session ended still lands once etcd answers (its fence is the
/// claim, not the session): the loss handling waits a grace period before it records the run
/// `lost`, so a task that finished is recorded as it ended, not rerun.
pub(crate) async fn close_claim(ctx: &Context, job: &str, close: claim::Close) -> Closed {
    let _pending = ctx.closing.enter();
    let deadline = tokio::time::Instant::now() + CLOSE_FOR;
    let mut delay = Backoff::new(Duration::from_millis(50), CLOSE_RETRY_MAX);
    let mut tries = 0u32;
    while tokio::time::Instant::now() < deadline {
        tries += 1;
        let outcome = match ctx.retention.get().await {
            Ok(lease) => ctx.batchers.complete(job, close.clone(), lease).await,
            Err(e) => Err(CloseError::NoRetention(e)),
        };
        match outcome {
            Ok(CompleteOutcome::Closed) => {
                if tries > 1 {
                    tracing::info!(
                        tries,
                        fencing_token = close.fencing_token,
                        "claim closed after etcd failed earlier tries"
                    );
                }
                return Closed::Done;
            }
            Ok(CompleteOutcome::Fenced) => {
                tracing::warn!(
                    fencing_token = close.fencing_token,
                    "claim closed by the loss handling before this worker could: the run is recorded lost"
                );
                return Closed::NotOurs;
            }
            Err(e) => {
                if tries == 1 {
                    tracing::warn!(error = %e, "closing the claim failed; retrying until etcd takes it");
                }
                METRICS.close_retries.inc();
                tokio::time::sleep(delay.next_delay()).await;
            }
        }
    }
    tracing::error!(
        fencing_token = close.fencing_token,
        tries,
        "etcd did not take the claim's close within its retention; the run is left to the loss handling"
    );
    Closed::NotOurs
}

/// Makes sure the outcome is counted in the job's health (by the close, or now) and says, for
/// the record, when it paused the job.
async fn count_failures(ctx: &Context, fire: &Fire, outcome: health::Outcome<'_>) -> Option<String> {
    let after = fire.spec.pause_after_failures;
    match health::update(&ctx.client, &ctx.keys, &fire.id.job, after, outcome).await {
        Ok(t) if t.paused => {
            tracing::warn!(
                job = %fire.id.job,
                execution_id = outcome.execution_id,
                failures = t.failures,
                "JOB PAUSED: pause_after_failures reached; resume it when it is fixed"
            );
            METRICS.jobs_paused.inc();
            Some(format!("job paused: {} final failures in a row (pause_after_failures)", t.failures))
        }
        Ok(_) => None,
        Err(e) => {
            tracing::error!(
                job = %fire.id.job,
                execution_id = outcome.execution_id,
                error = %e,
                "this outcome is not counted towards pause_after_failures"
            );
            METRICS.health_errors.inc();
            None
        }
    }
}

/// What the transaction closing a claim writes besides the claim, and what the record notes.
struct CloseOps {
    follow: Vec<etcd_client::TxnOp>,
    notes: Vec<String>,
    /// Whether the outcome counted toward `pause_after_failures` is a failure, when the job
    /// counts them.
    failing: Option<bool>,
}

/// The one place a close's follow-ups are gathered: the rules' (retry, dependents, catch-up,
/// one-shot), a rebalance's continuation, the failure count, the next backfill item, and the
/// inflight key's delete.
async fn close_ops(
    ctx: &std::sync::Arc<Context>,
    fire: &Fire,
    (won, workflow): (&WonClaim, Option<(&StepOf, Option<&serde_json::Value>)>),
    finished: &shell::Finished,
    (status, finished_ms): (Status, UnixMs),
) -> CloseOps {
    let team_of = |job: &str| ctx.jobs.get(job).map(|j| j.spec.team.clone());
    let (mut follow, mut notes) = follow_ups(&ctx.keys, fire, (status, &team_of), won.fencing_token, finished_ms);
    if finished.ending == shell::Ending::Stopped(shell::StopReason::Rebalance) {
        // The task asked to be moved: its continuation is requested with the close, once.
        let me = ctx.config.worker_id.as_str();
        let (op, note) = crate::rules::rebalance_request(&ctx.keys, fire, won.fencing_token, finished_ms, me);
        follow.extend(op);
        notes.push(note);
    }
    // A job that pauses after failures counts this outcome with the close (see `health`).
    let failing = fire.spec.pause_after_failures.and(health::failing(&fire.spec, &fire.id, status));
    if let Some(failing) = failing {
        let execution_id = fire.id.to_string();
        let outcome = health::Outcome { failing, execution_id: &execution_id, finished_ms };
        follow.extend(Box::pin(health::close_op(&ctx.client, &ctx.keys, &fire.spec, &fire.id.job, outcome)).await);
    }
    // Boxed, as the other rare awaits of a close: a burst's closes wait together (while its
    // claims are backlogged), each carrying only what it reaches.
    follow.extend(Box::pin(crate::fire::backfill::next_op(ctx, &fire.id.job, fire.trigger, &fire.params)).await);
    if let Some((step, result)) = workflow {
        match Box::pin(ctx.long_leases.get()).await {
            Ok(lease) => {
                let (ops, more) =
                    crate::fire::workflow::close_ops(ctx, fire, (step, status, result), lease, finished_ms);
                follow.extend(ops);
                notes.extend(more);
            }
            Err(e) => {
                tracing::error!(run = %step.run, error = ?e, "the step's outcome is not kept for its workflow run: no lease");
                notes.push(format!(
                    "workflow run {}: this step's outcome was not kept (etcd lease unavailable)",
                    step.run
                ));
            }
        }
    }
    // The last open execution of its claim transaction removes the inflight key with its close.
    follow.extend(won.hold.close_ops());
    CloseOps { follow, notes, failing }
}

/// Closes the claim of a run that ended, then writes its final record (and notifies); `trace`
/// is the close's span, the record's span its child (ended by the sink once MongoDB took it).
pub(crate) async fn close(ctx: &std::sync::Arc<Context>, fire: &Fire, won: WonClaim, ran: Ran, mut trace: Step) {
    let Ran { finished, handed_ms, mut record, mut step } = ran;
    let late = if step.is_none() { crate::fire::workflow::late_root(ctx, fire) } else { None };
    let fire = match late {
        Some((ref root, ref of)) => {
            record.workflow = Some(of.run.clone());
            step = Some(of.clone());
            root
        }
        None => fire,
    };
    let finished_ms = now_ms();
    let started_ms = finished.spawned_ms.unwrap_or(handed_ms);
    let (status, mut error) = status_of(&finished);
    if let (Status::Failed, Some(limits), Some(e)) = (status, &fire.spec.limits, &mut error) {
        if let Some(note) = shell::limit_note(limits, &finished) {
            *e = format!("{e}: {note}");
        }
    }
    let done = Claim::closed(status);
    let workflow = step.as_ref().map(|s| (s, record.reports.result.as_ref()));
    let CloseOps { follow, notes, failing } =
        close_ops(ctx, fire, (&won, workflow), &finished, (status, finished_ms)).await;
    let execution_id = fire.id.to_string();
    let outcome = failing.map(|failing| health::Outcome { failing, execution_id: &execution_id, finished_ms });
    let queue = fire.spec.concurrency == etcron_model::spec::Concurrency::Queue;
    let request = claim::Close {
        claim_key: won.claim_key,
        fencing_token: won.fencing_token,
        done_value: to_json(&done),
        running_key: won.running_key,
        marker_revision: won.marker_revision,
        lock: won.lock.clone(),
        queue_prefix: queue.then(|| ctx.keys.queue_prefix(&fire.id.job, &fire.id.part)),
        extra: follow,
        pool_slots: won.pool_slots.clone(),
        alone: step.is_some() && crate::fire::workflow::close_alone(ctx, fire),
    };
    finish_record(&mut record, finished, (status, error), (started_ms, finished_ms), &notes);
    // The record is journaled before the claim is closed: a worker killed right after its close
    // committed would otherwise leave a closed claim (nothing for the loss handling to do) and
    // no record. Killed before the close, the journal replays a record of a run that did
    // happen, and the loss handling records it lost (or reruns it) as before.
    trace.set("etcron.status", || status.as_str());
    let record_span = trace.child(&ctx.tracer, "record");
    ctx.sink.submit_traced(RecordWrite { mode: WriteMode::Replace, record: record.clone() }, record_span);
    let closed = close_claim(ctx, &fire.id.job, request).await == Closed::Done;
    trace.set("etcron.claim.closed", || closed);
    if status != Status::Succeeded {
        trace.fail(|| record.error.clone().unwrap_or_else(|| status.as_str().to_owned()));
    }
    won.hold.closed(closed);
    if let (true, Some((_, value))) = (closed && queue, &won.lock) {
        // The lock stayed ours if executions wait: the oldest gets it, with its run request.
        Box::pin(crate::fire::queue::pump(ctx, &fire.id.job, &fire.id.part, Some(value.clone()))).await;
    }
    let closing = Closing { closed, outcome, started_ms, finished_ms };
    after_close(ctx, fire, record, notes, closing).await;
}

/// The run's final record: when it ran, how it ended, and the notes of its follow-ups.
fn finish_record(
    record: &mut ExecutionRecord,
    finished: shell::Finished,
    (status, error): (Status, Option<String>),
    (started_ms, finished_ms): (UnixMs, UnixMs),
    notes: &[String],
) {
    record.started_at = Some(rfc3339_ms(started_ms));
    record.finished_at = Some(rfc3339_ms(finished_ms));
    record.duration_ms = u64::try_from(finished_ms - started_ms).ok();
    record.status = status;
    record.exit_code = finished.exit_code;
    record.signal = finished.signal;
    record.output = finished.output;
    record.output_truncated = finished.output_truncated;
    record.http_status = finished.http_status;
    record.error = error;
    if !notes.is_empty() {
        record.reason = Some(notes.join("; "));
    }
}

/// How a run's close went, for what follows it.
struct Closing<'a> {
    /// The claim was closed by this worker (else the loss handling closed it first).
    closed: bool,
    /// The outcome `pause_after_failures` counts, for a job that has it.
    outcome: Option<health::Outcome<'a>>,
    started_ms: UnixMs,
    finished_ms: UnixMs,
}

/// After the close: the failure count, the record rewritten when it changed (the job paused,
/// or the run found lost), the `stale` alert's clock, the log line and the notification.
async fn after_close(
    ctx: &std::sync::Arc<Context>,
    fire: &Fire,
    mut record: ExecutionRecord,
    mut notes: Vec<String>,
    closing: Closing<'_>,
) {
    let Closing { closed, outcome, started_ms, finished_ms } = closing;
    let status = record.status;
    let mut changed = false;
    if let (true, Some(outcome)) = (closed, outcome) {
        if let Some(note) = Box::pin(count_failures(ctx, fire, outcome)).await {
            notes.push(note);
            record.reason = Some(notes.join("; "));
            changed = true;
        }
    }
    if !closed {
        // The loss handling closed the claim first: it recorded the run lost (and requested
        // the failover rerun), so this run must not count as the tick's outcome.
        record.reason = Some(format!(
            "this worker lost its session and could not close the claim before the loss handling recorded the run lost; the task ended as {}",
            status.as_str()
        ));
        record.status = Status::Lost;
        changed = true;
    }
    if closed && status == Status::Succeeded {
        crate::fire::alerts::succeeded(ctx, &fire.spec, &fire.id.job, finished_ms);
    }
    log_record(&record, started_ms - fire.scheduled_ms);
    if closed {
        // Not when the claim was lost: the survivor that records the run `lost` notifies.
        ctx.notifier.record(&fire.spec, &record);
    }
    if changed {
        // After the first in the sink's order, so this one is what MongoDB keeps.
        ctx.sink.submit(RecordWrite { mode: WriteMode::Replace, record });
    }
}
