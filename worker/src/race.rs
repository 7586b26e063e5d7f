//! The claim phase: race for the execution's claim (batched with other claims), and learn
//! whether it is ours — won, lost, blocked by `concurrency: forbid`, or unknown and then read
//! back from the running marker.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::PutOptions;
use etcron_common::claim::{ClaimOutcome, LockClaim, RunClaim};
use etcron_common::job::Concurrency;
use etcron_common::keys::{ExecutionId, KillTarget};
use etcron_common::model::{Claim, ClaimState, KillCommand, RunningExecution, Status};
use etcron_common::store::{RecordWrite, WriteMode};
use etcron_common::{now_ms, rfc3339_ms};

use crate::fire::{to_json, Fire};
use crate::metrics::METRICS;
use crate::record::{log_record, not_run_record};
use crate::settle::{continue_catchup, taken_ops, watch_for_miss, NotRaced};
use crate::state::Context;

/// How long a worker keeps asking etcd whether a claim whose txn had an unknown outcome is its own.
pub(crate) const RESOLVE_UNKNOWN_FOR: Duration = Duration::from_secs(30);

/// After a claim txn with an unknown outcome: reads the running marker (written by the same
/// txn) until etcd answers. `Some(token)` when it holds this execution under this worker's
/// session lease (the txn committed: the marker's create revision is the claim's, the fencing
/// token); `None` when it is absent, someone else's, or etcd did not answer in time.
pub(crate) async fn resolve_unknown_claim(
    ctx: &Context,
    running_key: &str,
    id: &ExecutionId,
    lease: i64,
) -> Option<i64> {
    let deadline = tokio::time::Instant::now() + RESOLVE_UNKNOWN_FOR;
    while tokio::time::Instant::now() < deadline {
        let mut kv = ctx.client.kv_client();
        match etcron_common::etcd::request("claim_read", kv.get(running_key, None)).await {
            Ok(Ok(resp)) => {
                let kv = resp.kvs().first()?;
                let running: RunningExecution = serde_json::from_slice(kv.value()).ok()?;
                let ours =
                    kv.lease() == lease && running.worker_id == ctx.config.worker_id && &running.execution_id == id;
                return ours.then(|| kv.create_revision());
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    None
}

/// `concurrency: replace`: stop the execution this one took the lock from, wherever it runs.
pub(crate) fn replace_running(ctx: &Arc<Context>, old: &ExecutionId, new: &ExecutionId) {
    let (ctx, old, new) = (ctx.clone(), old.clone(), new.clone());
    tokio::spawn(async move {
        let lease = match ctx.retention.get().await {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, replaced = %old, "cannot write the kill for the replaced execution");
                return;
            }
        };
        let command = KillCommand {
            requested_at: rfc3339_ms(now_ms()),
            reason: format!("concurrency replace: replaced by {new}"),
        };
        let key = ctx.keys.kill(&old.job, &KillTarget::Execution(old.clone()));
        let mut kv = ctx.client.kv_client();
        let put = kv.put(key, to_json(&command), Some(PutOptions::new().with_lease(lease)));
        match etcron_common::etcd::request("put_kill", put).await {
            Ok(Ok(_)) => tracing::info!(replaced = %old, "concurrency replace: kill written for the running execution"),
            Ok(Err(e)) => {
                tracing::error!(error = %e, replaced = %old, "writing the kill for the replaced execution failed")
            }
            Err(_) => tracing::error!(replaced = %old, "writing the kill for the replaced execution timed out"),
        }
    });
}

/// A claim this worker won: what the run and close phases need of it.
pub struct WonClaim {
    pub claim_key: String,
    pub running_key: String,
    pub fencing_token: i64,
    /// The claim as won (`running`); the close rewrites it `done`.
    pub claim: Claim,
    /// The running marker as written (the run phase fills in pid and token).
    pub running: RunningExecution,
    /// The job's lock and the value this execution holds in it (`forbid`/`replace`).
    pub lock: Option<(String, Vec<u8>)>,
    /// The session lease the marker (and lock) live on.
    pub lease: i64,
    pub claimed_ms: i64,
}

/// Races for `fire`'s claim under session `lease`; `Some` when it is ours to run.
pub async fn claim(ctx: &Arc<Context>, fire: &Fire, lease: i64) -> Option<WonClaim> {
    // The claim outlives the session on the retention lease: a won attempt is never won again.
    let retention_lease = match ctx.retention.get().await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "retention lease unavailable: not claiming");
            METRICS.not_raced.with_label_values(&["no_lease"]).inc();
            ctx.unsettled.note(fire);
            watch_for_miss(ctx, fire, 0, NotRaced::Unknown);
            return None;
        }
    };
    let won = prepare(ctx, fire, lease);
    let request = RunClaim {
        claim_key: won.claim_key.clone(),
        claim_value: to_json(&won.claim),
        running_key: won.running_key.clone(),
        running_value: to_json(&won.running),
        session_lease: lease,
        retention_lease,
        lock: lock_claim(fire, &won),
        extra: taken_ops(ctx, fire),
    };
    let started = std::time::Instant::now();
    let outcome = ctx.batchers.claim(&fire.id.job, request).await;
    METRICS.claim_seconds.observe(started.elapsed().as_secs_f64());
    METRICS.claims.with_label_values(&[outcome.label()]).inc();
    let fencing_token = settle_outcome(ctx, fire, &won, outcome).await?;
    Some(WonClaim { fencing_token, ..won })
}

/// The claim, marker and lock this worker would write for `fire` (token not yet known).
pub(crate) fn prepare(ctx: &Context, fire: &Fire, lease: i64) -> WonClaim {
    let id = &fire.id;
    let claimed_ms = now_ms();
    let worker_id = ctx.config.worker_id.clone();
    let claim = Claim {
        worker_id: worker_id.clone(),
        execution_id: id.clone(),
        attempt: id.attempt,
        state: ClaimState::Running,
        status: None,
    };
    let running = RunningExecution {
        worker_id,
        execution_id: id.clone(),
        pid: None,
        started_at: rfc3339_ms(claimed_ms),
        fencing_token: None,
        trigger: Some(fire.trigger),
        scheduled_ms: Some(fire.scheduled_ms),
    };
    let lock = (fire.spec.concurrency != Concurrency::Allow).then(|| (ctx.keys.lock(&id.job, &id.part), to_json(id)));
    WonClaim {
        claim_key: ctx.keys.claim(id),
        running_key: ctx.keys.running(id),
        fencing_token: 0,
        claim,
        running,
        lock,
        lease,
        claimed_ms,
    }
}

/// The lock part of the claim transaction (`forbid`: skip when held; `replace`: take it over).
pub(crate) fn lock_claim(fire: &Fire, won: &WonClaim) -> Option<LockClaim> {
    let (key, value) = won.lock.clone()?;
    let blocked = Claim { state: ClaimState::Done, status: Some(Status::Skipped), ..won.claim.clone() };
    Some(LockClaim {
        key,
        value,
        replace: fire.spec.concurrency == Concurrency::Replace,
        blocked_claim: to_json(&blocked),
    })
}

/// The fencing token when the claim is ours; otherwise what follows a lost, blocked or unknown
/// claim is done here and `None` returned.
pub(crate) async fn settle_outcome(
    ctx: &Arc<Context>,
    fire: &Fire,
    won: &WonClaim,
    outcome: ClaimOutcome,
) -> Option<i64> {
    let id = &fire.id;
    match outcome {
        ClaimOutcome::Won { fencing_token, replaced } => {
            if let Some(old) = replaced.and_then(|v| serde_json::from_slice::<ExecutionId>(&v).ok()) {
                if &old != id {
                    replace_running(ctx, &old, id);
                }
            }
            Some(fencing_token)
        }
        ClaimOutcome::Blocked { fencing_token, holder } => {
            let holder = serde_json::from_slice::<ExecutionId>(&holder)
                .map_or_else(|_| "another execution".to_owned(), |h| h.to_string());
            let reason = format!("concurrency forbid: {holder} was still running");
            tracing::info!(%reason, "tick skipped");
            let record = not_run_record(ctx, fire, Status::Skipped, reason, fencing_token);
            log_record(&record, 0);
            ctx.sink.submit(RecordWrite { mode: WriteMode::Replace, record });
            continue_catchup(ctx, fire).await;
            None
        }
        ClaimOutcome::Lost => {
            tracing::trace!("claim lost to another worker");
            None
        }
        ClaimOutcome::Unknown(e) => {
            // The txn may have committed (etcd lost the answer, not the write): then the tick is
            // ours and nobody else may run it, so it must run here, late, or never at all.
            let token = resolve_unknown_claim(ctx, &won.running_key, id, won.lease).await;
            if let Some(token) = token {
                METRICS.claims.with_label_values(&["unknown_won"]).inc();
                tracing::warn!(error = %e, scheduled_ms = fire.scheduled_ms, fencing_token = token, "claim outcome was unknown, but the claim is ours: running the tick late");
            } else {
                tracing::warn!(error = %e, scheduled_ms = fire.scheduled_ms, "claim outcome unknown: not running this tick here");
                ctx.unsettled.note(fire);
                watch_for_miss(ctx, fire, 0, NotRaced::Unknown);
            }
            token
        }
    }
}
