//! Webhook notifications as they happen: the job health kept in etcd for `recovery` and
//! `pause_after_failures`, and the delivery record stored in MongoDB (collection
//! `notifications`). The targets and events are part of the spec (`crate::spec::notify`).

use serde::{Deserialize, Serialize};

use crate::spec::notify::{NotifyEvent, NotifyFormat};
use crate::UnixMs;

/// `{ns}/health/{job}`: whether the job's last final outcome was a failure, and how many final
/// failures came in a row. Kept only for jobs with a target that asks for `recovery` or
/// `paused`, or with `pause_after_failures`; workers move it with a compare-and-set on its mod
/// revision (or in the transaction that closes the claim), so of two workers finishing at once
/// exactly one makes each change: one sends the `recovery`, one pauses the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobHealth {
    pub failing: bool,
    /// The execution whose outcome was recorded last.
    pub execution_id: String,
    /// When the latest recorded outcome finished: an older one processed late does not undo it.
    pub finished_ms: UnixMs,
    /// Final failures in a row; 0 when ok.
    #[serde(default)]
    pub failures: u32,
    /// The success that ended the last run of failures (the job's last recovery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_by: Option<String>,
    /// The executions recorded lately, newest last (at most [`RECENT_OUTCOMES`]): an outcome
    /// recorded again (by the notifier after the close, or after a lost answer while others
    /// wrote) is not counted twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent: Vec<String>,
}

/// Outcomes a health value remembers.
pub const RECENT_OUTCOMES: usize = 16;

/// What recording one final outcome does to a job's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthStep {
    /// This execution's outcome is recorded already; `recovered` says whether it was the
    /// job's recovery.
    Recorded { recovered: bool },
    /// Nothing to write: a success while ok, or an outcome older than a change the current
    /// state records.
    Unchanged,
    /// The state to write over the current one.
    Write(JobHealth),
}

impl JobHealth {
    /// The step from `current` (none: never recorded, or unreadable) for an outcome of
    /// `execution_id` finished at `finished_ms`, `failing` for a final failure. Failures count
    /// in the order they are recorded; a failure or success older than the current state's
    /// latest outcome does not flip it.
    #[must_use]
    pub fn step(current: Option<&JobHealth>, failing: bool, execution_id: &str, finished_ms: UnixMs) -> HealthStep {
        if let Some(c) =
            current.filter(|c| c.execution_id == execution_id || c.recent.iter().any(|r| r == execution_id))
        {
            return HealthStep::Recorded { recovered: c.recovered_by.as_deref() == Some(execution_id) };
        }
        let was_failing = current.is_some_and(|c| c.failing);
        let older = current.is_some_and(|c| c.finished_ms > finished_ms);
        if (!failing && !was_failing) || (failing != was_failing && older) {
            return HealthStep::Unchanged;
        }
        let mut recent: Vec<String> = current.map(|c| c.recent.clone()).unwrap_or_default();
        recent.push(execution_id.to_owned());
        let excess = recent.len().saturating_sub(RECENT_OUTCOMES);
        recent.drain(..excess);
        let before = current.filter(|c| c.failing).map_or(0, |c| c.failures.max(1));
        let recovered_by =
            if failing { current.and_then(|c| c.recovered_by.clone()) } else { Some(execution_id.to_owned()) };
        HealthStep::Write(JobHealth {
            failing,
            execution_id: execution_id.to_owned(),
            finished_ms: current.map_or(finished_ms, |c| c.finished_ms.max(finished_ms)),
            failures: if failing { before.saturating_add(1) } else { 0 },
            recovered_by,
            recent,
        })
    }

    /// True when this state pauses a job with `pause_after_failures: after`: every `after`-th
    /// failure in a row (so a job resumed while still failing pauses again `after` failures
    /// later).
    #[must_use]
    pub fn pauses(&self, after: Option<u32>) -> bool {
        self.failing && after.is_some_and(|n| n > 0 && self.failures > 0 && self.failures.is_multiple_of(n))
    }
}

/// How a delivery ended, or that it is still being tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryState {
    Pending,
    Delivered,
    Failed,
    /// Not sent: the target's `silence` window for this event of the job was open.
    Silenced,
    /// Not sent: an alert was raised and no target listens for its event (the job's `notify`,
    /// or the worker's default targets when it has none).
    #[serde(rename = "no_target")]
    NoTarget,
}

impl DeliveryState {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
            DeliveryState::Silenced => "silenced",
            DeliveryState::NoTarget => "no_target",
        }
    }
}

/// One try to deliver a notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// RFC 3339 (ms), when the request was sent.
    pub at: String,
    pub duration_ms: u64,
    /// The answer's status, when there was one.
    pub http_status: Option<u16>,
    /// Why the attempt failed (status and start of the body, connection error, timeout).
    pub error: Option<String>,
}

/// One notification to one target (MongoDB collection `notifications`, `_id` = `id`), with
/// every attempt to deliver it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// `{execution_id}/{event}/{target}`: stable across retries (`X-Etcron-Delivery`), so a
    /// receiver can drop repeats. `{target}` is the target's position in the job's list, or
    /// `default-{n}` for a worker's default target.
    pub id: String,
    pub job: String,
    /// The job's `team` when the delivery was made (none for jobs without a team, and for
    /// deliveries recorded before teams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// The execution the event is about; for `stale`, which is about none, the occurrence
    /// `{job}@stale-{window start, Unix ms}`.
    pub execution_id: String,
    pub event: NotifyEvent,
    /// The target as [`NotifyTarget::shown_url`] shows it (no secret).
    pub target: String,
    pub target_name: Option<String>,
    /// Sent to a worker's default target (the job has no `notify`).
    pub default_target: bool,
    pub format: NotifyFormat,
    pub worker_id: String,
    pub state: DeliveryState,
    pub attempts: Vec<Attempt>,
    /// RFC 3339 (ms).
    pub created_at: String,
    pub finished_at: Option<String>,
}

/// The delivery id of `event` for `execution_id` to the target named by `target_ref`.
#[must_use]
pub fn delivery_id(execution_id: &str, event: NotifyEvent, target_ref: &str) -> String {
    format!("{execution_id}/{}/{target_ref}", event.as_str())
}
#[cfg(test)]
mod health_tests {
    use super::*;

    #[test]
    fn delivery_ids_name_the_execution_event_and_target() {
        assert_eq!(delivery_id("a@1#1", NotifyEvent::Failure, "0"), "a@1#1/failure/0");
    }

    fn written(step: HealthStep) -> JobHealth {
        match step {
            HealthStep::Write(h) => h,
            other => panic!("expected a write, got {other:?}"),
        }
    }

    #[test]
    fn failures_count_up_and_a_success_recovers() {
        let first = written(JobHealth::step(None, true, "j@1#1", 10));
        assert_eq!((first.failing, first.failures, first.recovered_by.as_deref()), (true, 1, None));
        let second = written(JobHealth::step(Some(&first), true, "j@2#1", 20));
        assert_eq!(second.failures, 2);
        let ok = written(JobHealth::step(Some(&second), false, "j@3#1", 30));
        assert_eq!((ok.failing, ok.failures, ok.recovered_by.as_deref()), (false, 0, Some("j@3#1")));
        assert_eq!(JobHealth::step(Some(&ok), false, "j@4#1", 40), HealthStep::Unchanged, "ok stays ok unwritten");
        assert_eq!(JobHealth::step(None, false, "j@4#1", 40), HealthStep::Unchanged);
        let again = written(JobHealth::step(Some(&ok), true, "j@5#1", 50));
        assert_eq!(again.failures, 1, "a success ends the run of failures");
        // A state written before the count existed reads as one failure.
        let old: JobHealth =
            serde_json::from_str(r#"{"failing":true,"execution_id":"j@0#1","finished_ms":1}"#).unwrap();
        assert_eq!(written(JobHealth::step(Some(&old), true, "j@1#1", 2)).failures, 2);
    }

    #[test]
    fn an_outcome_is_recorded_once_and_late_ones_do_not_flip_the_state() {
        let a = written(JobHealth::step(None, true, "j@1#1", 10));
        let b = written(JobHealth::step(Some(&a), true, "j@2#1", 20));
        // Recorded again after another one was: still not counted twice.
        assert_eq!(JobHealth::step(Some(&b), true, "j@1#1", 10), HealthStep::Recorded { recovered: false });
        let ok = written(JobHealth::step(Some(&b), false, "j@3#1", 30));
        let c = written(JobHealth::step(Some(&ok), true, "j@4#1", 40));
        assert_eq!(JobHealth::step(Some(&c), false, "j@3#1", 30), HealthStep::Recorded { recovered: true });
        // A failure that finished before the recovery, recorded late, does not undo it; a
        // success older than the latest failure does not end the run of failures.
        assert_eq!(JobHealth::step(Some(&ok), true, "j@0#2", 25), HealthStep::Unchanged);
        assert_eq!(JobHealth::step(Some(&c), false, "j@0#3", 35), HealthStep::Unchanged);
        // A failure finished earlier but recorded later, during failures, counts.
        let late = written(JobHealth::step(Some(&c), true, "j@0#4", 35));
        assert_eq!((late.failures, late.finished_ms), (2, 40));
        // The memory of recorded outcomes is bounded.
        let mut h = late;
        for k in 0..40 {
            h = written(JobHealth::step(Some(&h), true, &format!("j@{k}#9"), 100 + k));
        }
        assert_eq!(h.recent.len(), RECENT_OUTCOMES);
        assert_eq!(h.recent.last().map(String::as_str), Some("j@39#9"));
    }

    #[test]
    fn every_nth_failure_in_a_row_pauses() {
        let at = |failures| JobHealth {
            failing: true,
            execution_id: "x".into(),
            finished_ms: 0,
            failures,
            recovered_by: None,
            recent: Vec::new(),
        };
        assert!(!at(2).pauses(Some(3)));
        assert!(at(3).pauses(Some(3)));
        assert!(!at(4).pauses(Some(3)), "resumed while failing: not at once");
        assert!(at(6).pauses(Some(3)));
        assert!(!at(3).pauses(None));
        assert!(!JobHealth { failing: false, ..at(0) }.pauses(Some(1)));
        assert!(at(1).pauses(Some(1)));
    }
}
