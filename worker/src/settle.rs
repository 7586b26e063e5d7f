//! Fires that do not run here: recorded (`skipped`, `missed`) exactly once through their claim
//! key, handed to the misfire policy as a catch-up run, or noted for the sweep when etcd
//! cannot say.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use etcron_common::claim::{self, ClaimOutcome};
use etcron_common::job::Misfire;
use etcron_common::keys::Part;
use etcron_common::model::{Claim, ClaimState, Status, TriggerKind};
use etcron_common::store::{RecordWrite, WriteMode};
use etcron_common::{now_ms, UnixMs};

use crate::fire::{to_json, Fire, MISSED_AFTER};
use crate::record::{log_record, not_run_record};
use crate::rules::{catchup_request, next_catchup};
use crate::state::Context;

/// Why this worker did not race for a fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotRaced {
    Selector,
    Capacity,
    NoLease,
    Unknown,
}

/// Records a fire that did not run, exactly once across the cluster (via its claim key).
pub(crate) async fn record_not_run(ctx: &Context, fire: &Fire, status: Status, reason: String) -> bool {
    let lease = match ctx.retention.get().await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, status = status.as_str(), "cannot record tick: retention lease unavailable");
            return false;
        }
    };
    let claim = Claim {
        worker_id: ctx.config.worker_id.clone(),
        execution_id: fire.id.clone(),
        attempt: fire.id.attempt,
        state: ClaimState::Done,
        status: Some(status),
    };
    let mut extra = taken_ops(ctx, fire);
    extra.extend(next_catchup(&ctx.keys, fire, now_ms()));
    match claim::claim_done(&ctx.client, &ctx.keys.claim(&fire.id), to_json(&claim), lease, extra).await {
        ClaimOutcome::Won { fencing_token, .. } | ClaimOutcome::Blocked { fencing_token, .. } => {
            let record = not_run_record(ctx, fire, status, reason, fencing_token);
            log_record(&record, 0);
            ctx.notifier.record(&fire.spec, &record);
            ctx.sink.submit(RecordWrite { mode: WriteMode::Replace, record });
            true
        }
        ClaimOutcome::Lost => false,
        ClaimOutcome::Unknown(e) => {
            tracing::warn!(error = %e, status = status.as_str(), "recording a tick that did not run: outcome unknown; settling it once etcd answers");
            ctx.unsettled.note(fire);
            false
        }
    }
}

/// When this worker did not race for a fire, the first-ranked one checks after `MISSED_AFTER`
/// that somebody did. If nobody had: a schedule tick of a job with `misfire: run_once|run_all`
/// that found no free worker gets a catch-up run; anything else is recorded `missed`.
pub(crate) fn watch_for_miss(ctx: &Arc<Context>, fire: &Fire, rank: usize, why: NotRaced) {
    // A broadcast part is watched by the tick's first-ranked worker, for the whole tick.
    let broadcast = matches!(fire.id.part, Part::Worker(_));
    let rank = if broadcast {
        ctx.members.rank(&ctx.config.worker_id, &ctx.keys.tick_claims_prefix(&fire.id.job, &fire.id.tick))
    } else {
        rank
    };
    if rank != 0 {
        return;
    }
    let (ctx, mut fire) = (ctx.clone(), fire.clone());
    tokio::spawn(async move {
        tokio::time::sleep(MISSED_AFTER).await;
        let taken = if broadcast {
            fire.id.part = Part::Whole;
            claim::prefix_exists(&ctx.client, &ctx.keys.tick_claims_prefix(&fire.id.job, &fire.id.tick)).await
        } else {
            claim::claim_exists(&ctx.client, &ctx.keys.claim(&fire.id)).await
        };
        match taken {
            Ok(true) => {}
            Ok(false) => {
                let catch_up = why != NotRaced::Selector
                    && fire.trigger == TriggerKind::Schedule
                    && fire.spec.misfire != Misfire::Skip;
                if catch_up {
                    if let Some(ms) = fire.id.tick.scheduled_ms() {
                        request_catchup_of(&ctx, &fire, ms).await;
                        return;
                    }
                }
                let reason = ctx.members.miss_reason(&fire.spec.selector, MISSED_AFTER);
                tracing::warn!(job = %fire.id.job, scheduled_ms = fire.scheduled_ms, %reason, "tick missed");
                record_not_run(&ctx, &fire, Status::Missed, reason).await;
            }
            Err(e) => {
                // etcd did not answer: the settler looks again once it does.
                tracing::warn!(error = %e, job = %fire.id.job, scheduled_ms = fire.scheduled_ms, "checking for a missed tick failed; settling it once etcd answers");
                ctx.unsettled.note(&fire);
            }
        }
    });
}

/// A tick nobody could take: ask for a catch-up run of it, unless it got claimed meanwhile.
pub(crate) async fn request_catchup_of(ctx: &Context, fire: &Fire, tick_ms: UnixMs) {
    let claim_key = ctx.keys.claim(&fire.id);
    let txn = Txn::new()
        .when([Compare::create_revision(claim_key.as_str(), CompareOp::Equal, 0)])
        .and_then([catchup_request(&ctx.keys, &fire.id.job, tick_ms, Vec::new(), now_ms())]);
    let mut kv = ctx.client.kv_client();
    match etcron_common::etcd::request("put_request", kv.txn(txn)).await {
        Ok(Ok(r)) if r.succeeded() => {
            tracing::warn!(job = %fire.id.job, scheduled_ms = tick_ms, misfire = ?fire.spec.misfire, "tick not claimed in time: catch-up run requested");
        }
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "requesting a catch-up run failed; settling the tick once etcd answers");
            ctx.unsettled.note(fire);
        }
        Err(_) => {
            tracing::warn!("requesting a catch-up run timed out; settling the tick once etcd answers");
            ctx.unsettled.note(fire);
        }
    }
}

/// A catch-up chain whose tick was skipped goes on with its next tick.
pub(crate) async fn continue_catchup(ctx: &Context, fire: &Fire) {
    let Some(op) = next_catchup(&ctx.keys, fire, now_ms()) else { return };
    let mut kv = ctx.client.kv_client();
    match etcron_common::etcd::request("put_request", kv.txn(Txn::new().and_then([op]))).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            tracing::error!(error = %e, remaining = fire.then.len(), "catch-up chain broken: could not request its next tick")
        }
        Err(_) => {
            tracing::error!(remaining = fire.then.len(), "catch-up chain broken: requesting its next tick timed out")
        }
    }
}

/// Ops written whenever a fire's execution is taken (run, skipped or recorded): the job state
/// moves forward for schedule ticks, and the run request that asked for it is consumed.
pub(crate) fn taken_ops(ctx: &Context, fire: &Fire) -> Vec<TxnOp> {
    let mut ops = Vec::new();
    if let (Some(ms), 1) = (fire.id.tick.scheduled_ms(), fire.id.attempt) {
        ops.push(claim::advance_state(&ctx.keys.state(&fire.id.job), ms));
    }
    if let Some(key) = &fire.request_key {
        ops.push(TxnOp::delete(key.as_str(), None));
    }
    ops
}
