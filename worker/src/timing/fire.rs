//! What the scheduler hands to the fire path: one execution to race for (a schedule tick's,
//! or a run request's), and the rules every phase shares about ticks.

use std::sync::Arc;
use std::time::Duration;

use etcron_model::keys::ExecutionId;
use etcron_model::record::RunParams;
use etcron_model::record::TriggerKind;
use etcron_model::spec::JobSpec;
use etcron_model::stored::TriggerRequest;
use etcron_model::UnixMs;

/// How long after a tick nobody may have claimed it before it is recorded `missed`.
pub const MISSED_AFTER: Duration = Duration::from_secs(5);

/// Most time between two tries of a close (or of closing a claim as `lost` or `missed`) that
/// etcd failed.
/// How far (in ticks' scheduled time) a worker lets `{ns}/state/{job}` trail the newest tick it
/// claimed: a claim carries the state's advance only when this worker's last one for the job is
/// this old, so a job firing every second writes its state about once a minute per worker, not
/// every second. The catch-up scan allows for it (`catchup::plan_gap`).
pub const STATE_EVERY: Duration = Duration::from_secs(60);

pub(crate) const CLOSE_RETRY_MAX: Duration = Duration::from_secs(1);

/// Tries of an etcd step of the loss handling (or of closing an orphaned claim) before it gives
/// up, loudly.
pub(crate) const LOSS_TRIES: u32 = 30;

/// One execution to race for: a schedule tick's (part), or a run request's.
#[derive(Debug, Clone)]
pub struct Fire {
    pub id: ExecutionId,
    pub spec: Arc<JobSpec>,
    /// The job key's mod revision the spec was read at.
    pub job_revision: i64,
    pub scheduled_ms: UnixMs,
    pub trigger: TriggerKind,
    /// Record the tick as `skipped` with this reason instead of running it.
    pub skip: Option<String>,
    /// The run request (`{ns}/trigger/...`) this fire answers; consumed with the claim.
    pub request_key: Option<String>,
    pub parent: Option<ExecutionId>,
    /// Catch-up ticks to run after this one.
    pub then: Vec<UnixMs>,
    /// The run's parameters (from its run request).
    pub params: RunParams,
    /// Its turn in its job's queue came (`concurrency: queue`): its claim is `queued`, and the
    /// lock was handed to it.
    pub dequeued: bool,
    /// A worker that races for it last (the one a `rebalance` moved it away from).
    pub avoid: Option<String>,
    /// This run's priority, when its run request set one (else the job's).
    pub priority: Option<u8>,
    /// The W3C `traceparent` its run request carries (the trace it continues).
    pub traceparent: Option<String>,
}

impl Fire {
    /// A schedule tick of `job` (the whole job; the scheduler splits it into its parts), to
    /// run, or to record `skipped` for `skip`.
    #[must_use]
    pub fn schedule_tick(
        job: &str,
        (spec, job_revision): (Arc<JobSpec>, i64),
        scheduled_ms: UnixMs,
        skip: Option<String>,
    ) -> Self {
        Self {
            id: ExecutionId::new(job, etcron_model::keys::Tick::Scheduled(scheduled_ms)),
            spec,
            job_revision,
            scheduled_ms,
            trigger: TriggerKind::Schedule,
            skip,
            request_key: None,
            parent: None,
            then: Vec::new(),
            params: RunParams::default(),
            dequeued: false,
            avoid: None,
            priority: None,
            traceparent: None,
        }
    }

    /// The execution run request `request_id` of `job` (at `key`) names, to run, or to record
    /// `skipped` for `skip`.
    #[must_use]
    pub fn requested(
        key: &str,
        (job, request_id, request): (&str, &str, &TriggerRequest),
        (spec, job_revision): (Arc<JobSpec>, i64),
        skip: Option<String>,
    ) -> Self {
        Self {
            id: request.execution(job, request_id),
            spec,
            job_revision,
            scheduled_ms: request.scheduled_ms.unwrap_or(request.requested_at_ms),
            trigger: request.kind,
            skip,
            request_key: Some(key.to_owned()),
            parent: request.parent.clone(),
            then: request.then.clone(),
            params: RunParams {
                workflow: request.workflow.clone().or_else(|| request.params.workflow.clone()),
                ..request.params.clone()
            },
            dequeued: request.dequeued,
            avoid: request.avoid.clone(),
            priority: request.priority,
            traceparent: request.traceparent.clone(),
        }
    }
}

impl Fire {
    /// The run's priority: its run request's, else its job's.
    #[must_use]
    pub fn priority(&self) -> u8 {
        self.priority.unwrap_or_else(|| self.spec.priority())
    }
}

/// How many ms a fire is past its start deadline at `now_ms`, when it is. Only schedule ticks
/// have one: run requests (manual, retry, failover, dependency, catch-up) are raced however late.
#[must_use]
pub fn past_deadline(trigger: TriggerKind, scheduled_ms: UnixMs, now_ms: UnixMs, deadline: Duration) -> Option<i64> {
    let late = now_ms - scheduled_ms;
    let deadline_ms = i64::try_from(deadline.as_millis()).unwrap_or(i64::MAX);
    (trigger == TriggerKind::Schedule && late > deadline_ms).then_some(late)
}

/// A value as etcd stores it. Serializing these plain structs cannot fail: no maps with
/// non-string keys, no floats.
pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_schedule_ticks_later_than_their_deadline_are_past_it() {
        let d = Duration::from_secs(10);
        assert_eq!(past_deadline(TriggerKind::Schedule, 1_000, 11_000, d), None, "exactly at the deadline");
        assert_eq!(past_deadline(TriggerKind::Schedule, 1_000, 11_001, d), Some(10_001));
        assert_eq!(past_deadline(TriggerKind::Schedule, 1_000, 500, d), None, "raced ahead of its time");
        for trigger in [
            TriggerKind::Manual,
            TriggerKind::Retry,
            TriggerKind::Failover,
            TriggerKind::Dependency,
            TriggerKind::Catchup,
        ] {
            assert_eq!(past_deadline(trigger, 1_000, 1_000_000, d), None, "{trigger:?}");
        }
    }
}
