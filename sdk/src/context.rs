//! What a handler gets: its execution, its values, its parents' results, the checkpoint it
//! resumes from, and how it reports progress, checkpoints and output, and learns it is
//! cancelled.

use std::collections::BTreeMap;

use etcron_worker::tasks::handler::{Call, Reports};
use serde_json::Value;
use tokio::sync::watch;

/// One run of a handler.
pub struct Context {
    execution_id: String,
    job: String,
    scheduled_ms: Option<i64>,
    attempt: u32,
    fencing_token: i64,
    env: BTreeMap<String, String>,
    checkpoint: Option<Value>,
    traceparent: String,
    reports: Reports,
    cancelled: watch::Receiver<bool>,
}

impl Context {
    pub(crate) fn new(call: Call) -> Self {
        let Call {
            execution_id,
            job,
            scheduled_ms,
            attempt,
            fencing_token,
            env,
            checkpoint,
            traceparent,
            reports,
            cancelled,
            ..
        } = call;
        Self {
            execution_id,
            job,
            scheduled_ms,
            attempt,
            fencing_token,
            env,
            checkpoint,
            traceparent,
            reports,
            cancelled,
        }
    }

    /// The execution id (`job@tick#attempt`), as records and the API name it.
    #[must_use]
    pub fn execution_id(&self) -> &str {
        &self.execution_id
    }

    #[must_use]
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The tick this run is for (Unix ms); `None` for a manual run.
    #[must_use]
    pub fn scheduled_ms(&self) -> Option<i64> {
        self.scheduled_ms
    }

    /// 1 for the tick's first attempt, then each retry or failover rerun.
    #[must_use]
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The claim's fencing token: it grows from attempt to attempt of a job, so a store that
    /// remembers the highest one it saw can refuse a write of an older run.
    #[must_use]
    pub fn fencing_token(&self) -> i64 {
        self.fencing_token
    }

    /// A value of the task's `env` or `secret_env`, or a parameter the run was started with
    /// (`jobs run --env NAME=value`).
    #[must_use]
    pub fn env(&self, name: &str) -> Option<&str> {
        self.env.get(name).map(String::as_str)
    }

    /// The run's W3C trace context (`00-{trace id}-{span id}-01`): the parent of the spans the
    /// handler makes, so they continue the run's trace (the same a shell task gets as
    /// `TRACEPARENT`).
    #[must_use]
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The checkpoint this run resumes from: the last one the tick's previous attempt stored,
    /// when that attempt was lost with its executor (a failover rerun); `None` otherwise.
    #[must_use]
    pub fn checkpoint(&self) -> Option<&Value> {
        self.checkpoint.as_ref()
    }

    /// The results of the run's parents, by job name (a parent that reported none maps to
    /// `null`): set for a dependency run (`on_success`/`on_failure`) or a workflow step (`after`),
    /// `None` otherwise. The same values a shell task gets as `ETCRON_PARENTS`.
    #[must_use]
    pub fn parent_results(&self) -> Option<&BTreeMap<String, Value>> {
        self.reports.parent_results()
    }

    /// The result of the run's one parent: `None` when it has none, or not exactly one.
    #[must_use]
    pub fn parent_result(&self) -> Option<&Value> {
        self.parent_results().filter(|p| p.len() == 1).and_then(|p| p.values().next())
    }

    /// Reports progress (`percent` 0–100) and what is being done: shown live in the console and
    /// kept in the record.
    pub async fn progress(&self, percent: f64, message: &str) {
        self.reports.progress(Some(percent), Some(message.to_owned())).await;
    }

    /// Stores `value` as the tick's checkpoint, fenced by this run's claim: once it returns
    /// `Ok`, a failover rerun resumes from it.
    ///
    /// # Errors
    /// etcd did not take it (unreachable), or the claim is no longer this run's (the run was
    /// lost: stop).
    pub async fn save_checkpoint(&self, value: Value) -> Result<(), String> {
        self.reports.checkpoint(value).await.map_err(|e| match e {
            etcron_worker::tasks::handler::Refusal::Fenced => {
                "the run's claim is no longer its own (it was lost): stop".to_owned()
            }
            etcron_worker::tasks::handler::Refusal::Unavailable(why) => {
                format!("etcd did not take the checkpoint: {why}")
            }
        })
    }

    /// Appends `text` to the run's output (kept with its record, followable live; bounded like
    /// any task's).
    pub fn output(&self, text: &str) {
        self.reports.output(text);
    }

    /// Whether the run was cancelled: killed, past its timeout, or its executor's session lost.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        *self.cancelled.borrow()
    }

    /// Resolves once the run is cancelled (killed, past its timeout, or its executor's session
    /// lost). The handler then has the worker's `kill_grace` to return; after that it is dropped.
    pub async fn cancelled(&self) {
        let mut rx = self.cancelled.clone();
        let _ = rx.wait_for(|c| *c).await;
    }
}
