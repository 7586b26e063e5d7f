//! Fires that do not run here: recorded (`skipped`, `missed`) exactly once through their claim
//! key, handed to the misfire policy as a catch-up run, or noted for the sweep when etcd
//! cannot say.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use etcron_common::claim::{self, ClaimOutcome};
use etcron_common::etcd::EtcdError;
use etcron_common::store::{RecordWrite, WriteMode};
use etcron_model::keys::Part;
use etcron_model::record::{ExecutionRecord, Status, TriggerKind};
use etcron_model::spec::{JobSpec, Misfire};
use etcron_model::stored::Claim;
use etcron_model::{now_ms, UnixMs};

use crate::context::provisional::{judge, ClaimRead, Stored, Verdict};
use crate::context::Context;
use crate::fire::record::{log_record, not_run_record};
use crate::rules::{catchup_request, late_catchup_request, next_catchup, LATE_CATCHUP};
use crate::timing::fire::{to_json, Fire, CLOSE_RETRY_MAX, LOSS_TRIES, MISSED_AFTER};

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

/// Records a fire that did not run, exactly once across the cluster (via its claim key). The
/// record is written to the data dir before the claim closes (`provisional`) and submitted
/// once the claim transaction says it closed it: a worker killed in between delivers it at its
/// next start, and a worker that lost the claim writes none.
pub(crate) async fn record_not_run(ctx: &Context, fire: &Fire, status: Status, reason: String) -> bool {
    let claim_key = ctx.keys.claim(&fire.id);
    let mut record = not_run_record(ctx, fire, status, reason, None);
    // Before the lease: a close applied with it holds the key `MIN_RETENTION` past this write.
    let pending = ctx.provisional.write(&claim_key, &record);
    let lease = match ctx.retention.get().await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, status = status.as_str(), "cannot record tick: retention lease unavailable");
            ctx.provisional.remove(pending);
            return false;
        }
    };
    let claim = Claim::closed(status);
    let mut extra = taken_ops(ctx, fire, true);
    extra.extend(next_catchup(&ctx.keys, fire, now_ms()));
    extra.extend(crate::fire::backfill::next_op(ctx, &fire.id.job, fire.trigger, &fire.params).await);
    match claim::claim_done(&ctx.client, &claim_key, to_json(&claim), lease, extra).await {
        ClaimOutcome::Won { fencing_token, .. } | ClaimOutcome::Blocked { fencing_token, .. } => {
            crate::failpoint::hit(crate::failpoint::NOT_RUN_AFTER_CLOSE);
            record.fencing_token = Some(fencing_token);
            deliver(ctx, Some(&fire.spec), record, WriteMode::IfAbsent);
            ctx.provisional.remove(pending);
            true
        }
        ClaimOutcome::Lost | ClaimOutcome::PoolFull => {
            ctx.provisional.remove(pending);
            false
        }
        ClaimOutcome::Unknown(e) => {
            tracing::warn!(error = %e, status = status.as_str(), "recording a tick that did not run: outcome unknown; settling it once etcd answers");
            resolve_unknown(ctx, fire, &claim_key, record, pending).await;
            false
        }
    }
}

/// A not-run record whose closed claim etcd may or may not have applied: once etcd answers,
/// a claim closed with the record's status (ours, or another worker's doing the same) gets the
/// record — `IfAbsent`, keyed by the execution id, so it is never written twice; a claim that
/// says anything else belongs to whoever took it; no claim yet means the close has not been
/// applied *yet* (it may be, late: the tick is noted for the sweep, and the record waits until
/// the key exists, one way or the other). When that takes longer than this worker watches, the
/// provisional record stays for the provisional loop.
async fn resolve_unknown(
    ctx: &Context,
    fire: &Fire,
    claim_key: &str,
    mut record: ExecutionRecord,
    pending: crate::context::provisional::ProvisionalFile,
) {
    let mut noted = false;
    for _ in 0..LOSS_TRIES {
        tokio::time::sleep(CLOSE_RETRY_MAX).await;
        let read = read_claim(ctx, claim_key).await;
        match judge(read, record.status, Duration::ZERO) {
            Verdict::Keep => continue,
            Verdict::Wait => {
                // Not applied yet: it may be, late; the sweep settles the tick otherwise (and
                // creates its claim key, which ends the wait either way).
                if !std::mem::replace(&mut noted, true) {
                    ctx.unsettled.note(fire);
                }
                continue;
            }
            Verdict::Submit { fencing_token } => {
                tracing::info!(
                    status = record.status.as_str(),
                    "the record's claim was applied after all: recording it"
                );
                record.fencing_token = fencing_token.or(record.fencing_token);
                deliver(ctx, Some(&fire.spec), record, WriteMode::IfAbsent);
            }
            Verdict::Drop => {
                tracing::info!(execution_id = %record.id, status = record.status.as_str(), claim = ?read, "record of a tick that did not run dropped: its claim says another outcome");
            }
        }
        ctx.provisional.remove(pending);
        return;
    }
    ctx.provisional.release(pending);
    ctx.unsettled.note(fire);
}

/// The claim at `key` as a provisional record's settlement needs it.
pub(crate) async fn read_claim(ctx: &Context, key: &str) -> ClaimRead {
    let mut kv = ctx.client.kv_client();
    let Ok(resp) = etcron_common::etcd::request("claim_read", kv.get(key, None)).await else {
        return ClaimRead::Unreadable;
    };
    match resp.kvs().first() {
        None => ClaimRead::Absent,
        Some(item) => ClaimRead::Present {
            status: serde_json::from_slice::<Claim>(item.value()).ok().and_then(|c| c.status),
            create_revision: item.create_revision(),
        },
    }
}

/// A final record of a claim this worker closed (or found closed as the record says): logged,
/// notified (when the job is known here), and submitted to the log sink, which journals it.
pub(crate) fn deliver(ctx: &Context, spec: Option<&JobSpec>, record: ExecutionRecord, mode: WriteMode) {
    log_record(&record, 0);
    if let Some(spec) = spec {
        ctx.notifier.record(spec, &record);
    }
    ctx.sink.submit(RecordWrite { mode, record });
}

/// How often the provisional records left by a crash or an unanswered close are looked at.
pub const PROVISIONAL_EVERY: Duration = Duration::from_secs(5);

/// Longest the first look at leftover provisional records waits for the job list (whose specs
/// their notifications need).
const PROVISIONAL_FIRST_WAIT: Duration = Duration::from_secs(10);

/// Settles the provisional records nobody in this process is handling — those a previous run
/// of the worker left (killed between a close and its record), and those whose close etcd did
/// not answer — from what their claims say now (`provisional::judge`), at start and then every
/// `PROVISIONAL_EVERY` while any is left. A record whose claim etcd cannot read is kept for the
/// next pass.
pub async fn provisional_loop(ctx: Arc<Context>) {
    let waited = tokio::time::Instant::now();
    while !ctx.jobs.loaded() && waited.elapsed() < PROVISIONAL_FIRST_WAIT {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    loop {
        if ctx.provisional.has_left() {
            resolve_provisional(&ctx).await;
        }
        tokio::time::sleep(PROVISIONAL_EVERY).await;
    }
}

/// One pass over the leftover provisional records.
async fn resolve_provisional(ctx: &Context) {
    for (name, stored) in ctx.provisional.leftovers() {
        let Stored { claim_key, written_ms, mut record } = stored;
        let age = Duration::from_millis(u64::try_from(now_ms() - written_ms).unwrap_or(0));
        let read = read_claim(ctx, &claim_key).await;
        let (id, status) = (record.id.to_string(), record.status.as_str());
        match judge(read, record.status, age) {
            Verdict::Keep => {
                tracing::warn!(execution_id = %id, status, "provisional record kept: etcd does not answer for its claim");
                continue;
            }
            Verdict::Wait => {
                tracing::debug!(execution_id = %id, status, "provisional record waits: its claim is absent (its close may still be applied, or the sweeps settle the tick)");
                // Noted for this worker's sweep again: the note made when the close went
                // unanswered lives in memory only, and the sweep that took it may have died
                // with its worker (or left the tick to a pool's waiters) before settling it.
                if record.trigger == TriggerKind::Schedule && record.id.attempt == 1 {
                    ctx.unsettled.note_job(&record.job, record.scheduled_ms, record.scheduled_ms);
                }
                continue;
            }
            Verdict::Submit { fencing_token } => {
                if read == ClaimRead::Absent {
                    tracing::warn!(execution_id = %id, status, age_s = age.as_secs(), "provisional record: its claim's retention is over, so whether it was closed cannot be told; recorded unless a record exists");
                } else {
                    tracing::info!(execution_id = %id, status, "provisional record: its claim was closed as it says; recorded");
                }
                record.fencing_token = record.fencing_token.or(fencing_token);
                let job = ctx.jobs.get(&record.job);
                deliver(ctx, job.as_ref().map(|j| &*j.spec), record, WriteMode::IfAbsent);
            }
            Verdict::Drop => {
                tracing::info!(execution_id = %id, status, claim = ?read, "provisional record dropped: its claim was not closed by this record's close (another worker's run or outcome, or the close never applied)");
            }
        }
        ctx.provisional.settled(&name);
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
    etcron_common::task::spawn(async move {
        tokio::time::sleep(MISSED_AFTER).await;
        let taken = if broadcast {
            fire.id.part = Part::Whole;
            claim::prefix_exists(&ctx.client, &ctx.keys.tick_claims_prefix(&fire.id.job, &fire.id.tick)).await
        } else {
            claim::claim_exists(&ctx.client, &ctx.keys.claim(&fire.id)).await
        };
        match taken {
            Ok(true) => {}
            Ok(false) => record_unclaimed(&ctx, &fire, why).await,
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
async fn record_unclaimed(ctx: &Context, fire: &Fire, why: NotRaced) {
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
        etcron_model::duration::HumanDuration(deadline)
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
        Ok(r) if r.succeeded() => {
            tracing::warn!(job = %job, scheduled_ms = tick_ms, misfire = ?fire.spec.misfire, "tick not claimed in time: catch-up run requested");
            Catchup::Done
        }
        // Claimed meanwhile, or (coalescing) a catch-up run is pending.
        Ok(_) if coalesce && matches!(claim::claim_exists(&ctx.client, &claim_key).await, Ok(false)) => {
            Catchup::Coalesced
        }
        Ok(_) => Catchup::Done,
        Err(EtcdError::Failed(e)) => {
            tracing::warn!(error = %e, "requesting a catch-up run failed; settling the tick once etcd answers");
            ctx.unsettled.note(fire);
            Catchup::Done
        }
        Err(EtcdError::Timeout) => {
            tracing::warn!("requesting a catch-up run timed out; settling the tick once etcd answers");
            ctx.unsettled.note(fire);
            Catchup::Done
        }
    }
}

/// A catch-up chain or backfill whose tick was skipped goes on with its next tick.
pub(crate) async fn continue_catchup(ctx: &Context, fire: &Fire) {
    let mut ops: Vec<TxnOp> = next_catchup(&ctx.keys, fire, now_ms()).into_iter().collect();
    ops.extend(crate::fire::backfill::next_op(ctx, &fire.id.job, fire.trigger, &fire.params).await);
    if ops.is_empty() {
        return;
    }
    let mut kv = ctx.client.kv_client();
    match etcron_common::etcd::request("put_request", kv.txn(Txn::new().and_then(ops))).await {
        Ok(_) => {}
        Err(EtcdError::Failed(e)) => {
            tracing::error!(error = %e, remaining = fire.then.len(), "catch-up chain broken: could not request its next tick")
        }
        Err(EtcdError::Timeout) => {
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
