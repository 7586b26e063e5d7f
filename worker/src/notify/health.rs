//! A job's health, `{ns}/health/{job}`: its last final outcome and its final failures in a row,
//! moved once per outcome. It decides two things exactly once across the cluster: which
//! success is the job's `recovery` (the notifier asks), and which failure pauses a job with
//! `pause_after_failures` (written with the pause, `{ns}/paused/{job}`, in one transaction).
//!
//! For a job with `pause_after_failures` the move is part of the transaction that closes the
//! execution's claim (a nested transaction guarded by the health key's revision as read just
//! before), so the count and the pause cannot be lost between the close and a later write.
//! When that guard fails (another execution of the job moved the health meanwhile) or etcd did
//! not answer the read, [`update`] makes the move afterwards by compare-and-set. Both are keyed by
//! the execution id: an outcome already recorded is never counted twice.

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use etcron_common::etcd::EtcdError;
use etcron_model::keys::{ExecutionId, Keys};
use etcron_model::notify::{HealthStep, JobHealth};
use etcron_model::record::Status;
use etcron_model::spec::JobSpec;
use etcron_model::stored::Pause;
use etcron_model::UnixMs;

use crate::timing::fire::to_json;

/// Compare-and-set rounds on a job's health key before giving up.
const HEALTH_ATTEMPTS: u32 = 8;

/// Who a pause written by `pause_after_failures` says paused the job.
pub const PAUSED_BY: &str = "etcron";

/// One final outcome to record.
#[derive(Debug, Clone, Copy)]
pub struct Outcome<'a> {
    /// A final failure (else a success).
    pub failing: bool,
    pub execution_id: &'a str,
    pub finished_ms: UnixMs,
}

/// What recording an outcome did (or had done, when it was recorded already).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tracked {
    /// This call wrote the health.
    pub changed: bool,
    /// The outcome is the job's recovery (a success after failures).
    pub recovered: bool,
    /// The outcome paused the job (`pause_after_failures`).
    pub paused: bool,
    /// Final failures in a row, this one included (0 after a success).
    pub failures: u32,
}

/// Why the job's health could not be updated.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("etcd request failed: {0}")]
    Etcd(#[source] etcd_client::Error),
    #[error("etcd did not answer in time")]
    Timeout,
    #[error("the health key kept changing ({HEALTH_ATTEMPTS} tries)")]
    Contended,
}

async fn etcd<T>(
    op: &'static str,
    fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, HealthError> {
    match etcron_common::etcd::request(op, fut).await {
        Ok(v) => Ok(v),
        Err(EtcdError::Failed(e)) => Err(HealthError::Etcd(e)),
        Err(EtcdError::Timeout) => Err(HealthError::Timeout),
    }
}

/// The outcome an execution's status is for its job's health: a success, a final failure (the
/// same rule as `on_failure` and the `failure` notification), or `None` (retried, killed,
/// skipped, rerun after a loss: not final, or not the task's doing).
#[must_use]
pub fn failing(spec: &JobSpec, id: &ExecutionId, status: Status) -> Option<bool> {
    match status {
        Status::Succeeded => Some(false),
        Status::Failed | Status::TimedOut if !crate::rules::retried(spec, id, status) => Some(true),
        Status::Lost if !crate::rules::rerun_after_loss(spec, id) => Some(true),
        _ => None,
    }
}

/// The pause the `failures`-th final failure in a row of `job` writes.
#[must_use]
pub fn auto_pause(health: &JobHealth, now_ms: UnixMs) -> Pause {
    Pause {
        by: Some(PAUSED_BY.to_owned()),
        at_ms: Some(now_ms),
        reason: Some(format!(
            "pause_after_failures: {} final failures in a row, the last {}",
            health.failures, health.execution_id
        )),
        until_ms: None,
        execution_id: Some(health.execution_id.clone()),
    }
}

/// The operations that move the health to `next`: its put and, when `next` pauses the job, the
/// pause, written only if the job is not paused already.
fn write_ops(keys: &Keys, job: &str, next: &JobHealth, pause_after: Option<u32>, now_ms: UnixMs) -> Vec<TxnOp> {
    let mut ops = vec![TxnOp::put(keys.health(job), to_json(next), None)];
    if next.pauses(pause_after) {
        let pause_key = keys.paused(job);
        ops.push(TxnOp::txn(
            Txn::new().when([Compare::version(pause_key.as_str(), CompareOp::Equal, 0)]).and_then([TxnOp::put(
                pause_key.as_str(),
                to_json(&auto_pause(next, now_ms)),
                None,
            )]),
        ));
    }
    ops
}

/// The move over the state read at `revision` (0: absent), only while the job exists.
fn guarded(keys: &Keys, job: &str, revision: i64, ops: Vec<TxnOp>) -> Txn {
    let health_key = keys.health(job);
    let job_key = keys.job(job);
    Txn::new()
        .when([
            // Only over the state read: of two workers finishing at once one writes, the other
            // reads the new state and counts from it.
            Compare::mod_revision(health_key.as_str(), CompareOp::Equal, revision),
            // Never recreate the health of a deleted job.
            Compare::version(job_key.as_str(), CompareOp::Greater, 0),
        ])
        .and_then(ops)
        .or_else([TxnOp::get(job_key.as_str(), None)])
}

/// The current health and its mod revision (0 when absent; a value that does not parse reads
/// as absent and is overwritten).
async fn read(client: &Client, keys: &Keys, job: &str) -> Result<(i64, Option<JobHealth>), HealthError> {
    let resp = etcd("health_get", client.kv_client().get(keys.health(job), None)).await?;
    Ok(match resp.kvs().first() {
        Some(item) => (item.mod_revision(), serde_json::from_slice::<JobHealth>(item.value()).ok()),
        None => (0, None),
    })
}

/// For the transaction closing the claim of an execution of a job with `pause_after_failures`:
/// the nested transaction moving its health, guarded by the revision read now. `None` when
/// there is nothing to write or the read failed ([`update`] after the close does it then).
pub async fn close_op(client: &Client, keys: &Keys, spec: &JobSpec, job: &str, outcome: Outcome<'_>) -> Option<TxnOp> {
    let (revision, current) = read(client, keys, job).await.ok()?;
    let HealthStep::Write(next) =
        JobHealth::step(current.as_ref(), outcome.failing, outcome.execution_id, outcome.finished_ms)
    else {
        return None;
    };
    let ops = write_ops(keys, job, &next, spec.pause_after_failures, outcome.finished_ms);
    Some(TxnOp::txn(guarded(keys, job, revision, ops)))
}

/// Records `outcome` in the job's health by compare-and-set, unless it is recorded already (by
/// the close, or by an earlier try whose answer was lost). Of several workers recording outcomes
/// at once, each change is made by exactly one; an outcome older than the one that set the
/// current state changes nothing; the key is only written while the job exists.
pub async fn update(
    client: &Client,
    keys: &Keys,
    job: &str,
    pause_after: Option<u32>,
    outcome: Outcome<'_>,
) -> Result<Tracked, HealthError> {
    let mut kv = client.kv_client();
    for _ in 0..HEALTH_ATTEMPTS {
        let (revision, current) = read(client, keys, job).await?;
        let next = match JobHealth::step(current.as_ref(), outcome.failing, outcome.execution_id, outcome.finished_ms) {
            HealthStep::Unchanged => return Ok(Tracked::default()),
            HealthStep::Recorded { recovered } => {
                let Some(current) = current else { return Ok(Tracked::default()) };
                let paused = current.pauses(pause_after) && paused_by(client, keys, job, outcome.execution_id).await?;
                return Ok(Tracked { changed: false, recovered, paused, failures: current.failures });
            }
            HealthStep::Write(next) => next,
        };
        let ops = write_ops(keys, job, &next, pause_after, outcome.finished_ms);
        match etcd("health_txn", kv.txn(guarded(keys, job, revision, ops))).await {
            Ok(r) if r.succeeded() => {
                let responses = r.op_responses();
                // The nested pause transaction is the second operation, when there is one.
                let paused = responses.get(1).is_some_and(|op| matches!(op, TxnOpResponse::Txn(t) if t.succeeded()));
                return Ok(Tracked { changed: true, recovered: !next.failing, paused, failures: next.failures });
            }
            Ok(r) => {
                let job_exists =
                    r.op_responses().into_iter().any(|op| matches!(op, TxnOpResponse::Get(g) if !g.kvs().is_empty()));
                if !job_exists {
                    return Ok(Tracked::default());
                }
            }
            // It may have committed: the next read tells (`Recorded`).
            Err(e) => tracing::debug!(error = %e, job, "health txn outcome unknown; reading it back"),
        }
    }
    Err(HealthError::Contended)
}

/// Whether the job's pause is the one `execution_id`'s failure wrote.
async fn paused_by(client: &Client, keys: &Keys, job: &str, execution_id: &str) -> Result<bool, HealthError> {
    let resp = etcd("pause_get", client.kv_client().get(keys.paused(job), None)).await?;
    Ok(resp
        .kvs()
        .first()
        .and_then(|kv| Pause::from_bytes(kv.value()).ok())
        .is_some_and(|p| p.execution_id.as_deref() == Some(execution_id)))
}
