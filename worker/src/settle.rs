//! Fires that do not run here: recorded (`skipped`, `missed`) exactly once through their claim
//! key, handed to the misfire policy as a catch-up run, or noted for the sweep when etcd
//! cannot say.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use etcron_common::claim::{self, ClaimOutcome};
use etcron_common::job::Misfire;
use etcron_common::keys::Part;
use etcron_common::model::{Claim, Status, TriggerKind};
use etcron_common::store::{RecordWrite, WriteMode};
use etcron_common::{now_ms, UnixMs};

use crate::fire::{to_json, Fire, CLOSE_RETRY_MAX, LOSS_TRIES, MISSED_AFTER};
use crate::record::{log_record, not_run_record};
use crate::rules::{catchup_request, late_catchup_request, next_catchup, LATE_CATCHUP};
use crate::state::Context;

/// Why this worker did not race for a fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotRaced {
    Selector,
    Capacity,
    NoLease,
    Unknown,
    /// Past the job's `start_deadline` by this many ms when this worker would have raced.
    Late(i64),
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
    let claim = Claim::closed(status);
    let mut extra = taken_ops(ctx, fire, true);
    extra.extend(next_catchup(&ctx.keys, fire, now_ms()));
    extra.extend(crate::backfill::next_op(ctx, &fire.id.job, fire.trigger, &fire.params).await);
    match claim::claim_done(&ctx.client, &ctx.keys.claim(&fire.id), to_json(&claim), lease, extra).await {
        ClaimOutcome::Won { fencing_token, .. } | ClaimOutcome::Blocked { fencing_token, .. } => {
            crate::failpoint::hit(crate::failpoint::NOT_RUN_AFTER_CLOSE);
            submit_not_run(ctx, fire, status, reason, fencing_token);
            true
        }
        ClaimOutcome::Lost => false,
        ClaimOutcome::Unknown(e) => {
            tracing::warn!(error = %e, status = status.as_str(), "recording a tick that did not run: outcome unknown; settling it once etcd answers");
            if !settle_unknown(ctx, fire, status, &reason).await {
                ctx.unsettled.note(fire);
            }
            false
        }
    }
}

/// A not-run record whose closed claim etcd may or may not have applied: once etcd answers,
/// a claim closed with `status` (ours, or another worker's doing the same) gets its record —
/// `IfAbsent`, keyed by the execution id, so it is never written twice; a claim that says
/// anything else belongs to whoever took it. `false` when etcd did not answer in time, or no
/// claim exists (the sweep then settles the tick).
async fn settle_unknown(ctx: &Context, fire: &Fire, status: Status, reason: &str) -> bool {
    let key = ctx.keys.claim(&fire.id);
    for _ in 0..LOSS_TRIES {
        tokio::time::sleep(CLOSE_RETRY_MAX).await;
        let mut kv = ctx.client.kv_client();
        let Ok(Ok(resp)) = etcron_common::etcd::request("claim_read", kv.get(key.as_str(), None)).await else {
            continue;
        };
        let Some(item) = resp.kvs().first() else { return false };
        let closed = serde_json::from_slice::<Claim>(item.value()).is_ok_and(|c| c.status == Some(status));
        if closed {
            tracing::info!(status = status.as_str(), "the record's claim was applied after all: recording it");
            submit_not_run(ctx, fire, status, reason.to_owned(), item.create_revision());
        }
        return true;
    }
    false
}

/// The record of a fire that did not run, once its claim says so: logged, notified, written
/// unless a record of the execution exists (a tick the catch-up scan could not tell from one
/// that ran, `catchup::Unsure`, must not overwrite the run's record).
pub(crate) fn submit_not_run(ctx: &Context, fire: &Fire, status: Status, reason: String, fencing_token: i64) {
    let record = not_run_record(ctx, fire, status, reason, fencing_token);
    log_record(&record, 0);
    ctx.notifier.record(&fire.spec, &record);
    ctx.sink.submit(RecordWrite { mode: WriteMode::IfAbsent, record });
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
            Ok(false) => settle_unclaimed(&ctx, &fire, why).await,
            Err(e) => {
                // etcd did not answer: the settler looks again once it does.
                tracing::warn!(error = %e, job = %fire.id.job, scheduled_ms = fire.scheduled_ms, "checking for a missed tick failed; settling it once etcd answers");
                ctx.unsettled.note(&fire);
            }
        }
    });
}

/// A tick nobody claimed: a catch-up run per `misfire` (not when no worker matches: waiting
/// would not help), else recorded `missed` with why.
async fn settle_unclaimed(ctx: &Context, fire: &Fire, why: NotRaced) {
    let misfire = fire.spec.misfire;
    if why != NotRaced::Selector && fire.trigger == TriggerKind::Schedule && misfire != Misfire::Skip {
        if let Some(ms) = fire.id.tick.scheduled_ms() {
            // Late ticks under `run_once` share one pending catch-up run: a backlog shrinks.
            let coalesce = matches!(why, NotRaced::Late(_)) && misfire == Misfire::RunOnce;
            if request_catchup_of(ctx, fire, ms, coalesce).await != Catchup::Coalesced {
                return;
            }
        }
    }
    let reason = match why {
        NotRaced::Late(late_ms) => late_reason(late_ms, fire.spec.start_deadline(), misfire),
        _ => ctx.members.miss_reason(&fire.spec, MISSED_AFTER),
    };
    tracing::warn!(job = %fire.id.job, scheduled_ms = fire.scheduled_ms, %reason, "tick missed");
    record_not_run(ctx, fire, Status::Missed, reason).await;
}

/// Why a tick past its start deadline was not run.
pub(crate) fn late_reason(late_ms: i64, deadline: std::time::Duration, misfire: Misfire) -> String {
    #[allow(clippy::cast_precision_loss)] // a lateness in ms fits an f64 exactly
    let late = late_ms as f64 / 1000.0;
    let then = match misfire {
        Misfire::Skip => "misfire: skip",
        Misfire::RunOnce => "misfire: run_once, and a catch-up run of this job was already pending",
        Misfire::RunAll => "misfire: run_all",
    };
    format!(
        "not started: raced {late:.1} s after its scheduled time, past start_deadline {}; {then}",
        etcron_common::duration::HumanDuration(deadline)
    )
}

/// What asking for a catch-up run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Catchup {
    /// Requested, or the tick was claimed meanwhile, or etcd failed (the tick is noted).
    Done,
    /// `coalesce`: a catch-up run of the job is pending already; this tick gets none.
    Coalesced,
}

/// A tick nobody could take: ask for a catch-up run of it, unless it got claimed meanwhile
/// (or, with `coalesce`, a late tick's catch-up run of the job is pending already).
pub(crate) async fn request_catchup_of(ctx: &Context, fire: &Fire, tick_ms: UnixMs, coalesce: bool) -> Catchup {
    let job = &fire.id.job;
    let claim_key = ctx.keys.claim(&fire.id);
    let mut when = vec![Compare::create_revision(claim_key.as_str(), CompareOp::Equal, 0)];
    let request = if coalesce {
        when.push(Compare::create_revision(ctx.keys.trigger(job, LATE_CATCHUP), CompareOp::Equal, 0));
        late_catchup_request(&ctx.keys, job, tick_ms, now_ms())
    } else {
        catchup_request(&ctx.keys, job, tick_ms, Vec::new(), now_ms())
    };
    let txn = Txn::new().when(when).and_then([request]);
    let mut kv = ctx.client.kv_client();
    match etcron_common::etcd::request("put_request", kv.txn(txn)).await {
        Ok(Ok(r)) if r.succeeded() => {
            tracing::warn!(job = %job, scheduled_ms = tick_ms, misfire = ?fire.spec.misfire, "tick not claimed in time: catch-up run requested");
            Catchup::Done
        }
        // Claimed meanwhile, or (coalescing) a catch-up run is pending.
        Ok(Ok(_)) if coalesce && matches!(claim::claim_exists(&ctx.client, &claim_key).await, Ok(false)) => {
            Catchup::Coalesced
        }
        Ok(Ok(_)) => Catchup::Done,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "requesting a catch-up run failed; settling the tick once etcd answers");
            ctx.unsettled.note(fire);
            Catchup::Done
        }
        Err(_) => {
            tracing::warn!("requesting a catch-up run timed out; settling the tick once etcd answers");
            ctx.unsettled.note(fire);
            Catchup::Done
        }
    }
}

/// A catch-up chain or backfill whose tick was skipped goes on with its next tick.
pub(crate) async fn continue_catchup(ctx: &Context, fire: &Fire) {
    let mut ops: Vec<TxnOp> = next_catchup(&ctx.keys, fire, now_ms()).into_iter().collect();
    ops.extend(crate::backfill::next_op(ctx, &fire.id.job, fire.trigger, &fire.params).await);
    if ops.is_empty() {
        return;
    }
    let mut kv = ctx.client.kv_client();
    match etcron_common::etcd::request("put_request", kv.txn(Txn::new().and_then(ops))).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            tracing::error!(error = %e, remaining = fire.then.len(), "catch-up chain broken: could not request its next tick")
        }
        Err(_) => {
            tracing::error!(remaining = fire.then.len(), "catch-up chain broken: requesting its next tick timed out")
        }
    }
}

/// The tick a fire's claim moves the job state to: a first attempt of a scheduled tick.
pub(crate) fn state_tick(fire: &Fire) -> Option<UnixMs> {
    fire.id.tick.scheduled_ms().filter(|_| fire.id.attempt == 1)
}

/// Ops written whenever a fire's execution is taken (run, skipped or recorded): the job state
/// moves forward for schedule ticks (with `advance`), and the run request that asked for it is
/// consumed.
pub(crate) fn taken_ops(ctx: &Context, fire: &Fire, advance: bool) -> Vec<TxnOp> {
    let mut ops = Vec::new();
    if let (Some(ms), 1, true) = (state_tick(fire), fire.id.attempt, advance) {
        ops.push(claim::advance_state(&ctx.keys.state(&fire.id.job), ms));
    }
    if let Some(key) = &fire.request_key {
        ops.push(TxnOp::delete(key.as_str(), None));
    }
    ops
}
