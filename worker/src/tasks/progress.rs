//! Progress, checkpoints and results of a running task (`etcron_model::progress`): the
//! [`Tracker`] of one execution takes its reports — lines of its output, or POSTs to
//! `ETCRON_PROGRESS_URL` with `ETCRON_PROGRESS_TOKEN` (served by `live_output`) — keeps the
//! latest progress for followers and the API, and the latest result for the record, and writes
//! each checkpoint to `{ns}/checkpoints/{job}/{tick}{part}`, fenced by the execution's claim: a
//! worker whose claim was closed (its run recorded lost, and rerun elsewhere) cannot overwrite
//! the checkpoint the rerun resumes from. A failover rerun reads it at its start
//! ([`resume_point`]). A task is also given its parents' results ([`parent_values`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use etcron_common::claim::RetentionLeases;
use etcron_common::etcd::EtcdError;
use etcron_model::keys::ExecutionId;
use etcron_model::progress::{Checkpoint, Progress, Report, Resumed, ScannedLine};
use etcron_model::{now_ms, rfc3339_ms};
use serde_json::Value;
use tokio::sync::watch;

/// What followers and the API see of a running task's reports.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Snapshot {
    /// Bumped by every report that changed something.
    #[serde(skip)]
    pub seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// The latest checkpoint etcd took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Value>,
    /// The latest result reported: the record's once the run ends (not sent to followers, and
    /// not counted in `seq`: up to 64 KiB, it would go with every later progress report).
    #[serde(skip)]
    pub result: Option<Value>,
}

/// Why a report was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The execution's claim is no longer its own (recorded lost, rerun elsewhere).
    Fenced,
    /// etcd failed the checkpoint's write; the task may report it again.
    Unavailable(String),
}

/// Where a tracker writes checkpoints.
pub struct Fence {
    pub client: Client,
    pub leases: Arc<RetentionLeases>,
    pub claim_key: String,
    pub fencing_token: i64,
    pub checkpoint_key: String,
    /// Called once the task asked to be moved and its checkpoints asked for so far are
    /// settled: stops the run (the close phase then requests its continuation).
    pub rebalance: Box<dyn Fn() + Send + Sync>,
}

/// One running execution's reports.
pub struct Tracker {
    execution_id: String,
    token: String,
    fence: Fence,
    state: watch::Sender<Snapshot>,
    /// Checkpoint writes one at a time, in order.
    writing: tokio::sync::Mutex<()>,
    /// The newest checkpoint a line asked for (older ones not yet written are skipped).
    wanted: AtomicU64,
    /// The newest checkpoint whose write ended (written, skipped or failed).
    settled: watch::Sender<u64>,
    /// A malformed report line was logged already.
    warned: AtomicBool,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker").field("execution_id", &self.execution_id).finish_non_exhaustive()
    }
}

impl Tracker {
    #[must_use]
    pub fn new(execution_id: &ExecutionId, token: String, fence: Fence) -> Arc<Self> {
        Arc::new(Self {
            execution_id: execution_id.to_string(),
            token,
            fence,
            state: watch::channel(Snapshot::default()).0,
            writing: tokio::sync::Mutex::new(()),
            wanted: AtomicU64::new(0),
            settled: watch::channel(0).0,
            warned: AtomicBool::new(false),
        })
    }

    /// The bearer token a report must carry (`ETCRON_PROGRESS_TOKEN`).
    #[must_use]
    pub fn token(&self) -> &str {
        &self.token
    }

    #[must_use]
    pub fn snapshot(&self) -> Snapshot {
        self.state.borrow().clone()
    }

    #[must_use]
    pub fn subscribe(&self) -> watch::Receiver<Snapshot> {
        self.state.subscribe()
    }

    /// Takes a POSTed report: its progress at once, its checkpoint once etcd has it (the
    /// answer waits for it, so a task that continues after a 2xx knows it is durable).
    pub async fn report(&self, report: Report) -> Result<(), Refusal> {
        self.progress(&report);
        if let Some(value) = report.result {
            self.result(value);
        }
        if let Some(value) = report.checkpoint {
            let seq = self.wanted.fetch_add(1, Ordering::SeqCst) + 1;
            self.write(value, seq, false).await?;
        }
        if report.rebalance {
            self.move_run().await;
        }
        Ok(())
    }

    /// Asks the run to be moved once the checkpoints asked for so far are written (or failed:
    /// the rerun then starts from the last one etcd took).
    async fn move_run(&self) {
        let asked = self.wanted.load(Ordering::SeqCst);
        // The sender lives in `self`: waiting cannot fail.
        let _ = self.settled.subscribe().wait_for(|settled| *settled >= asked).await;
        tracing::info!(execution_id = %self.execution_id, "the task asked to be moved (rebalance): stopping it here");
        (self.fence.rebalance)();
    }

    /// Takes a report line of the task's output; never waits (its checkpoint is written in the
    /// background, the newest first when several wait). A refused result is the one refusal
    /// the output is told of: the line to add after the report's.
    pub fn line(self: &Arc<Self>, line: &ScannedLine) -> Option<String> {
        let report = match line.report() {
            Ok(report) => report,
            Err(e) => {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(execution_id = %self.execution_id, error = %e, "a report line of the task's output was not understood (further ones are not logged)");
                }
                return (e.field == "result").then(|| format!("etcron: result refused, not kept: {e}"));
            }
        };
        self.progress(&report);
        if let Some(value) = report.result {
            self.result(value);
        }
        if let Some(value) = report.checkpoint {
            let seq = self.wanted.fetch_add(1, Ordering::SeqCst) + 1;
            let me = self.clone();
            etcron_common::task::spawn(async move {
                if let Err(e) = me.write(value, seq, true).await {
                    tracing::warn!(execution_id = %me.execution_id, error = ?e, "a checkpoint from the task's output was not written");
                }
            });
        }
        if report.rebalance {
            let me = self.clone();
            etcron_common::task::spawn(async move { me.move_run().await });
        }
        None
    }

    /// Keeps `value` as the run's result (the last one reported wins); followers are not woken.
    fn result(&self, value: Value) {
        self.state.send_if_modified(|s| {
            s.result = Some(value);
            false
        });
    }

    fn progress(&self, report: &Report) {
        self.state.send_if_modified(|s| {
            let next = Progress::after(s.progress.as_ref(), report, rfc3339_ms(now_ms()));
            if next == s.progress {
                return false;
            }
            s.progress = next;
            s.seq += 1;
            true
        });
    }

    /// Writes checkpoint number `seq`, fenced by the claim; `skippable` when a newer one
    /// waiting makes this one pointless (lines, which nobody waits for).
    async fn write(&self, value: Value, seq: u64, skippable: bool) -> Result<(), Refusal> {
        let _turn = self.writing.lock().await;
        let outcome = self.put(value, seq, skippable).await;
        if outcome.is_err() {
            // The caller says why (a log line, or the POST's answer); a rerun resumes from an
            // older checkpoint.
            crate::metrics::METRICS.checkpoint_errors.inc();
        }
        self.settled.send_if_modified(|settled| {
            let newer = seq > *settled;
            *settled = (*settled).max(seq);
            newer
        });
        outcome
    }

    async fn put(&self, value: Value, seq: u64, skippable: bool) -> Result<(), Refusal> {
        if skippable && self.wanted.load(Ordering::SeqCst) != seq {
            return Ok(());
        }
        let f = &self.fence;
        let lease = f.leases.get().await.map_err(|e| Refusal::Unavailable(e.to_string()))?;
        let stored = Checkpoint { execution_id: self.execution_id.clone(), at_ms: now_ms(), value: value.clone() };
        let txn = Txn::new()
            .when([Compare::mod_revision(f.claim_key.as_str(), CompareOp::Equal, f.fencing_token)])
            .and_then([TxnOp::put(
                f.checkpoint_key.as_str(),
                serde_json::to_vec(&stored).unwrap_or_default(),
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let mut kv = f.client.kv_client();
        match etcron_common::etcd::request("checkpoint", kv.txn(txn)).await {
            Ok(resp) if resp.succeeded() => {
                self.state.send_modify(|s| {
                    s.checkpoint = Some(value);
                    s.seq += 1;
                });
                Ok(())
            }
            Ok(_) => Err(Refusal::Fenced),
            Err(EtcdError::Failed(e)) => Err(Refusal::Unavailable(e.to_string())),
            Err(EtcdError::Timeout) => Err(Refusal::Unavailable("no answer from etcd".to_owned())),
        }
    }
}

/// Longest header (HTTP tasks) or metadata value (gRPC) of the parents' results: many servers
/// refuse a request with a longer header line (nginx's default, 8 KiB), so a longer one is left
/// out, and the run's output says so.
pub const MAX_PARENT_HEADER_BYTES: usize = 8 * 1024;
/// Longest variable of the parents' results a shell task is given: the kernel refuses to start
/// a program with one environment string over 128 KiB (`MAX_ARG_STRLEN`, name included).
pub const MAX_PARENT_ENV_BYTES: usize = 120 * 1024;

/// A task variable, named without `ETCRON_`, and its value.
pub type TaskValue = (&'static str, String);

/// The parents' results as a task is given them, named as task variables without `ETCRON_`:
/// `PARENT_RESULT`, the result of the one parent (only when there is exactly one), and `PARENTS`,
/// every parent's by job (`{}` when none), each as JSON (`ascii`: every non-ASCII character
/// escaped, for headers). A value longer than `max` bytes is left out: its name and length are
/// in the second list.
#[must_use]
pub fn parent_values(
    parents: &BTreeMap<String, Value>,
    max: usize,
    ascii: bool,
) -> (Vec<TaskValue>, Vec<(&'static str, usize)>) {
    let text = |v: &Value| if ascii { etcron_model::json::ascii(v) } else { v.to_string() };
    let mut values: Vec<TaskValue> = Vec::new();
    if let (1, Some(only)) = (parents.len(), parents.values().next()) {
        values.push(("PARENT_RESULT", text(only)));
    }
    let all = serde_json::to_value(parents).unwrap_or_default();
    values.push(("PARENTS", text(&all)));
    let (kept, long): (Vec<_>, Vec<_>) = values.into_iter().partition(|(_, v)| v.len() <= max);
    (kept, long.into_iter().map(|(name, v)| (name, v.len())).collect())
}

/// A fresh per-execution token (`ETCRON_PROGRESS_TOKEN`): 128 random bits, hex.
#[must_use]
pub fn new_token() -> String {
    rand::random::<[u8; 16]>().iter().map(|b| format!("{b:02x}")).collect()
}

/// The checkpoint a failover rerun of `id` starts from: the tick's latest, written by an
/// earlier attempt. `None` for other runs, when there is none, or when etcd cannot tell (the
/// rerun then starts over, with a warning).
pub async fn resume_point(client: &Client, key: &str, id: &ExecutionId) -> Option<Resumed> {
    let mut kv = client.kv_client();
    let found = match etcron_common::etcd::request("checkpoint_read", kv.get(key, None)).await {
        Ok(resp) => resp.kvs().first().map(|kv| kv.value().to_vec())?,
        _ => {
            tracing::warn!(execution_id = %id, "reading the tick's checkpoint failed: the rerun starts over");
            return None;
        }
    };
    let stored: Checkpoint = serde_json::from_slice(&found).ok()?;
    let earlier = stored.execution_id.parse::<ExecutionId>().is_ok_and(|e| e.attempt < id.attempt);
    earlier.then(|| Resumed {
        execution_id: stored.execution_id,
        at: rfc3339_ms(stored.at_ms),
        checkpoint: stored.value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parents(pairs: &[(&str, Value)]) -> BTreeMap<String, Value> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
    }

    #[test]
    fn one_parent_gives_its_result_and_the_map_several_only_the_map() {
        let one = parents(&[("extract", json!({"rows": 12, "name": "é"}))]);
        let (values, left) = parent_values(&one, MAX_PARENT_ENV_BYTES, false);
        assert_eq!(
            values,
            [
                ("PARENT_RESULT", r#"{"rows":12,"name":"é"}"#.to_owned()),
                ("PARENTS", r#"{"extract":{"rows":12,"name":"é"}}"#.to_owned())
            ]
        );
        assert!(left.is_empty());
        let (values, _) = parent_values(&one, MAX_PARENT_HEADER_BYTES, true);
        assert_eq!(values[0].1, r#"{"rows":12,"name":"\u00e9"}"#, "escaped to ASCII for a header");
        let two = parents(&[("a", json!(1)), ("b", Value::Null)]);
        assert_eq!(parent_values(&two, 1024, false).0, [("PARENTS", r#"{"a":1,"b":null}"#.to_owned())]);
        assert_eq!(parent_values(&BTreeMap::new(), 1024, false).0, [("PARENTS", "{}".to_owned())]);
    }

    #[test]
    fn a_value_over_the_limit_is_left_out_with_its_length() {
        let big = parents(&[("a", json!("x".repeat(100))), ("b", json!(2))]);
        let (values, left) = parent_values(&big, 64, true);
        assert!(values.is_empty());
        assert_eq!(left, [("PARENTS", r#"{"a":"","b":2}"#.len() + 100)]);
        let one = parents(&[("a", json!("x".repeat(100)))]);
        let (values, left) = parent_values(&one, 104, false);
        assert_eq!(values.iter().map(|(n, _)| *n).collect::<Vec<_>>(), ["PARENT_RESULT"], "102 bytes fit, 108 do not");
        assert_eq!(left, [("PARENTS", 108)]);
    }
}
