//! The execution record: one execution (or one tick that did not run), as logged by a worker
//! and stored in MongoDB, with its status and what triggered it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::keys::{ExecutionId, Part, Tick};
use crate::spec::{JobSpec, Mode};
use crate::{rfc3339_ms, UnixMs};

/// A run's parameters (`POST /api/jobs/{job}/run` with `env` and/or `scheduled_at`): carried
/// by its run request, its claim and running marker, its retries and failover reruns, and
/// recorded with each of its executions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    /// Environment variables over the spec's (shell tasks).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// "Run as of": the scheduled time the run is given (`ETCRON_SCHEDULED_AT`), Unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of_ms: Option<UnixMs>,
    /// The backfill this run is an item of (`trigger: backfill` and its retries and reruns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfill: Option<BackfillRef>,
    /// The workflow run this run is a step of (the workflow module), carried like the rest to
    /// its retries and failover reruns; a record shows it as its top-level `workflow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
}

/// Which backfill, and which of its items, a run is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackfillRef {
    pub id: String,
    pub index: u32,
}

impl RunParams {
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.env.is_empty() && self.as_of_ms.is_none() && self.backfill.is_none() && self.workflow.is_none()
    }
}

/// How an execution ended (or that it is still running, or never ran: `skipped`, `missed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Running,
    Succeeded,
    Failed,
    TimedOut,
    Killed,
    Lost,
    Skipped,
    Missed,
}

impl Status {
    /// Every status.
    pub const ALL: [Status; 8] = [
        Status::Running,
        Status::Succeeded,
        Status::Failed,
        Status::TimedOut,
        Status::Killed,
        Status::Lost,
        Status::Skipped,
        Status::Missed,
    ];

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::TimedOut => "timed_out",
            Status::Killed => "killed",
            Status::Lost => "lost",
            Status::Skipped => "skipped",
            Status::Missed => "missed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerKind {
    Schedule,
    Manual,
    Retry,
    Dependency,
    Catchup,
    Failover,
    Backfill,
}

impl TriggerKind {
    /// What triggered an execution, as far as its tick tells (markers from before `trigger`).
    #[must_use]
    pub fn of_tick(tick: &Tick) -> Self {
        match tick {
            Tick::Scheduled(_) => TriggerKind::Schedule,
            Tick::Manual(_) => TriggerKind::Manual,
            Tick::Dependency(_) => TriggerKind::Dependency,
        }
    }

    /// Every trigger.
    pub const ALL: [TriggerKind; 7] = [
        TriggerKind::Schedule,
        TriggerKind::Manual,
        TriggerKind::Retry,
        TriggerKind::Dependency,
        TriggerKind::Catchup,
        TriggerKind::Failover,
        TriggerKind::Backfill,
    ];

    /// The name used in records, the API and `ETCRON_TRIGGER`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerKind::Schedule => "schedule",
            TriggerKind::Manual => "manual",
            TriggerKind::Retry => "retry",
            TriggerKind::Dependency => "dependency",
            TriggerKind::Catchup => "catchup",
            TriggerKind::Failover => "failover",
            TriggerKind::Backfill => "backfill",
        }
    }
}

/// One execution (or one tick that did not run), as logged and stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionRecord {
    /// The execution id.
    pub id: ExecutionId,
    pub job: String,
    /// The job's `team` when the worker ran (or settled) it; records written before teams, and
    /// records of jobs without a team, have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// RFC 3339 (ms).
    pub scheduled_at: String,
    pub scheduled_ms: UnixMs,
    pub claimed_at: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub duration_ms: Option<u64>,
    pub worker_id: String,
    pub hostname: String,
    pub attempt: u32,
    pub trigger: TriggerKind,
    pub status: Status,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub output: String,
    pub output_truncated: bool,
    pub error: Option<String>,
    /// Why a tick did not run (`skipped`, `missed`, `lost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub fencing_token: Option<i64>,
    /// The execution that caused this one: the failed attempt a retry follows, the lost run a
    /// failover reruns, the parent job's run of a dependency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ExecutionId>,
    /// HTTP tasks: the response status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// Sharded jobs: this execution's shard and the shard count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<(u32, u32)>,
    /// The parameters the run was given (`POST /api/jobs/{job}/run`).
    #[serde(default, skip_serializing_if = "RunParams::is_empty")]
    pub params: RunParams,
    /// How much the job's `jitter` moved this tick (ms); `scheduled_at` includes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<i64>,
    /// The workflow run this execution is a step of (the workflow module).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// The run's priority, when not the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// The pool whose slots the run held (or waited for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// The trace the run belongs to (32 hex digits): the one its task's `traceparent` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// What the task reported (`progress`, `checkpoint`) and where it resumed from
    /// (`resumed_from`): top-level fields of the record.
    #[serde(default, flatten)]
    pub reports: TaskReports,
}

/// What a shell task reported while it ran (`crate::progress`), as its record keeps it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskReports {
    /// The latest progress it reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<crate::progress::Progress>,
    /// The latest checkpoint it reported that etcd took (what a failover rerun resumes from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<serde_json::Value>,
    /// The checkpoint this execution started from (a failover rerun of a lost one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<crate::progress::Resumed>,
    /// The run's result (`crate::progress`): what its task reported or returned (at most 64 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
}

impl TaskReports {
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.progress.is_none() && self.checkpoint.is_none() && self.resumed_from.is_none() && self.result.is_none()
    }
}

impl ExecutionRecord {
    /// A record with only the execution's identity filled in, and from the job's spec (when
    /// known) its team and shard count.
    #[must_use]
    pub fn blank(
        id: &ExecutionId,
        scheduled_ms: UnixMs,
        trigger: TriggerKind,
        status: Status,
        spec: Option<&JobSpec>,
    ) -> Self {
        let mode = spec.map(|s| s.mode);
        ExecutionRecord {
            id: id.clone(),
            job: id.job.clone(),
            team: spec.and_then(|s| s.team.clone()),
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
            params: RunParams::default(),
            jitter_ms: None,
            workflow: None,
            priority: spec.and_then(|s| s.priority),
            pool: spec.and_then(|s| s.pool.clone()),
            trace_id: None,
            reports: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_names_match_their_json() {
        use TriggerKind::*;
        for t in [Schedule, Manual, Retry, Dependency, Catchup, Failover, Backfill] {
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
    }
}
