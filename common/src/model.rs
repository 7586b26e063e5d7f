//! The JSON values stored in etcd (other than `JobSpec`) and the execution record.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::keys::ExecutionId;
use crate::UnixMs;

/// `{ns}/workers/{worker_id}`, under the worker's session lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    pub id: String,
    pub hostname: String,
    pub pid: u32,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub capacity: u32,
    pub running: u32,
    pub version: String,
    /// RFC 3339.
    pub started_at: String,
}

impl WorkerInfo {
    /// True when the worker's labels include every entry of `selector`.
    #[must_use]
    pub fn matches(&self, selector: &BTreeMap<String, String>) -> bool {
        labels_match(&self.labels, selector)
    }
}

/// True when `labels` include every entry of `selector` (an empty selector matches all).
#[must_use]
pub fn labels_match(labels: &BTreeMap<String, String>, selector: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClaimState {
    Running,
    Done,
}

/// `{ns}/claims/{job}/{tick}`: who won a tick. The key's create revision is the fencing token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub worker_id: String,
    pub execution_id: ExecutionId,
    pub attempt: u32,
    pub state: ClaimState,
    /// Final status once `state` is `done`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
}

/// `{ns}/running/{job}/{execution_id}`, under the worker's session lease.
///
/// Written in the same transaction as the claim, before the task's pid or the claim's revision
/// are known; the worker fills `pid` and `fencing_token` in once the task has run for a second.
/// Readers take the fencing token from the key's create revision when the field is absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningExecution {
    pub worker_id: String,
    pub execution_id: ExecutionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// RFC 3339.
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<i64>,
}

/// `{ns}/kill/{job}/{execution_id|all}`. Applies to executions claimed before the key was
/// written (claim create revision < kill mod revision), so it never kills later runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillCommand {
    /// RFC 3339.
    pub requested_at: String,
    #[serde(default)]
    pub reason: String,
}

/// `{ns}/trigger/{job}/{request_id}`: run the job now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerRequest {
    /// RFC 3339.
    pub requested_at: String,
    pub requested_at_ms: UnixMs,
    #[serde(default)]
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
}

/// One execution (or one tick that did not run), as logged and stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionRecord {
    /// The execution id.
    pub id: ExecutionId,
    pub job: String,
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
}
