//! The claim phase: race for the execution's claim (batched with other claims), and learn
//! whether it is ours — won, lost, blocked by `concurrency: forbid`, or unknown and then read
//! back from the claim and this worker's registration (an orphaned claim of ours is closed
//! `missed`).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse};
use etcron_common::claim::{self, ClaimOutcome, LockClaim, QueueClaim, RunClaim};
use etcron_common::etcd::EtcdError;
use etcron_common::store::{RecordWrite, WriteMode};
use etcron_model::keys::{ExecutionId, KillTarget};
use etcron_model::record::Status;
use etcron_model::spec::Concurrency;
use etcron_model::stored::{Claim, ClaimState, KillCommand, RunningExecution};
use etcron_model::{now_ms, rfc3339_ms};

use crate::context::batcher::{Hold, Raced};
use crate::context::Context;
use crate::fire::not_run::{continue_catchup, deliver, state_tick, taken_ops, watch_for_miss, NotRaced};
use crate::fire::record::{log_record, not_run_record};
use crate::metrics::METRICS;
use crate::timing::fire::{to_json, Fire, CLOSE_RETRY_MAX, LOSS_TRIES, MISSED_AFTER};

/// How long a worker keeps asking etcd whether a claim whose txn had an unknown outcome is its own.
pub(crate) const RESOLVE_UNKNOWN_FOR: Duration = Duration::from_secs(30);

/// What reading back a claim whose txn had an unknown outcome found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// The claim is this worker's, never closed, and the session that claimed it still lives
    /// (so does the claim transaction's inflight key): the txn committed (the claim's create
    /// revision, the fencing token).
    Ours(i64),
    /// The claim is this worker's and never closed, but the session that claimed it ended
    /// before etcd answered (its inflight key went with it). Nobody runs it.
    Orphaned(i64),
    /// Somebody else's claim (or one closed already).
    NotOurs,
    /// No claim at all: the transaction was not applied (or not yet: a stalled etcd may apply
    /// it late, which the recheck looks for).
    Absent,
    /// etcd did not answer within `RESOLVE_UNKNOWN_FOR`.
    NoAnswer,
}

/// After a claim txn with an unknown outcome: reads the claim and this worker's registration
/// (on the session lease the txn used) until etcd answers, at most `RESOLVE_UNKNOWN_FOR`.
pub(crate) async fn resolve_unknown_claim(ctx: &Context, fire: &Fire, won: &WonClaim) -> Resolved {
    let deadline = tokio::time::Instant::now() + RESOLVE_UNKNOWN_FOR;
    let registration = ctx.keys.worker(&ctx.config.worker_id);
    while tokio::time::Instant::now() < deadline {
        let reads =
            Txn::new().and_then([TxnOp::get(registration.as_str(), None), TxnOp::get(won.claim_key.as_str(), None)]);
        let mut kv = ctx.client.kv_client();
        match etcron_common::etcd::request("claim_read", kv.txn(reads)).await {
            Ok(resp) => {
                let mut found = resp.op_responses().into_iter().map(|r| match r {
                    TxnOpResponse::Get(get) => get.kvs().first().cloned(),
                    _ => None,
                });
                let (registered, claim) = (found.next().flatten(), found.next().flatten());
                return read_back(
                    &ctx.config.worker_id,
                    (won.lease, fire.dequeued),
                    registered.as_ref().map(ReadKey::from),
                    claim.as_ref().map(ReadKey::from),
                );
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    Resolved::NoAnswer
}

/// A key as read back: its value, lease and revisions.
#[derive(Debug, Clone, Copy)]
struct ReadKey<'a> {
    value: &'a [u8],
    lease: i64,
    mod_revision: i64,
    /// Writes since it was created: 1 for a claim its winning txn created, 2 for a queued
    /// claim taken by its turn's txn.
    version: i64,
}

impl<'a> From<&'a KeyValue> for ReadKey<'a> {
    fn from(kv: &'a KeyValue) -> Self {
        Self { value: kv.value(), lease: kv.lease(), mod_revision: kv.mod_revision(), version: kv.version() }
    }
}

/// Whose the execution is, from its claim and this worker's registration as read back.
fn read_back(
    worker_id: &str,
    (lease, dequeued): (i64, bool),
    registered: Option<ReadKey>,
    claim: Option<ReadKey>,
) -> Resolved {
    // This fire's txn creates the claim (version 1), or, for an execution whose turn in the
    // queue came, takes the queued one (version 2). A claim taken by this worker through
    // another txn — the run request its queue handed over, after this fire's txn wrote it
    // `queued` — is not this fire's: running it here too would run it twice.
    let written_by_this_txn = if dequeued { 2 } else { 1 };
    let Some(claim) = claim else { return Resolved::Absent };
    let claim_ours = Some(claim).and_then(|kv| {
        let claim: Claim = serde_json::from_slice(kv.value).ok()?;
        // As the winning txn wrote it (its revision is the token): taken by this worker, open.
        let open = claim.worker_id == worker_id && claim.state() == ClaimState::Running;
        (open && kv.version == written_by_this_txn).then_some(kv.mod_revision)
    });
    let Some(token) = claim_ours else { return Resolved::NotOurs };
    if registered.is_some_and(|kv| kv.lease == lease) {
        Resolved::Ours(token)
    } else {
        Resolved::Orphaned(token)
    }
}

/// A claim this worker gave up on (its outcome unknown, nothing found when read back) is read
/// again after `MISSED_AFTER`: a txn etcd applied after the read (it was queued behind a stall)
/// leaves a claim of ours that nobody runs, which is then closed `missed`. A claim of ours this
/// worker runs is left alone: it was raced for again and won (a run request raced again).
fn recheck_unknown_claim(ctx: &Arc<Context>, fire: &Fire, won: &WonClaim) {
    let (ctx, fire, won) = (ctx.clone(), fire.clone(), won.clone());
    etcron_common::task::spawn(async move {
        tokio::time::sleep(MISSED_AFTER).await;
        match resolve_unknown_claim(&ctx, &fire, &won).await {
            Resolved::Ours(token) | Resolved::Orphaned(token) if ctx.registry.runs(&fire.id, token) => {}
            Resolved::Ours(token) | Resolved::Orphaned(token) => record_orphan(&ctx, &fire, &won, token).await,
            Resolved::NotOurs | Resolved::Absent => {}
            Resolved::NoAnswer => {
                tracing::error!(execution_id = %fire.id, "reading a given-up claim again: etcd did not answer; if etcd applied it late, the tick stays claimed and unrecorded");
                METRICS.claims.with_label_values(&["unknown_unresolved"]).inc();
            }
        }
    });
}

/// A claim of this worker's that it never ran (its txn's outcome was unknown, and the session
/// that wrote it ended before etcd answered, or etcd applied it after this worker had given up):
/// closed `missed` through its fencing token, with its running marker and lock released, unless
/// somebody closed it first. Retried while etcd fails (the close is fenced, so idempotent): the
/// sweeps settle only unclaimed ticks, so an orphan left open would stay unrecorded.
pub(crate) async fn record_orphan(ctx: &Context, fire: &Fire, won: &WonClaim, fencing_token: i64) {
    let claim = Claim::closed(Status::Missed);
    let held = claim::Held::Claimed { value: to_json(&won.claim) };
    let mut release: Vec<TxnOp> =
        crate::fire::backfill::next_op(ctx, &fire.id.job, fire.trigger, &fire.params).await.into_iter().collect();
    // `queue`: the lock is handed on (or released) once the orphan is closed.
    let queue = fire.spec.concurrency == Concurrency::Queue;
    let hand_on = won.lock.as_ref().filter(|_| queue).map(|(_, value)| value.clone());
    if let (Some((key, value)), false) = (&won.lock, queue) {
        release.push(TxnOp::txn(
            Txn::new()
                .when([Compare::value(key.as_str(), CompareOp::Equal, value.clone())])
                .and_then([TxnOp::delete(key.as_str(), None)]),
        ));
    }
    release.extend(claim::release_slots(&won.pool_slots, fencing_token));
    let reason = "claimed by this worker while etcd did not answer, but its session ended (or it had given the \
                  claim up) before etcd confirmed it: not run";
    let record = not_run_record(ctx, fire, Status::Missed, reason.to_owned(), Some(fencing_token));
    // Durable before the close, submitted once the close is ours (`provisional`).
    let pending = ctx.provisional.write(&won.claim_key, &record);
    for _ in 0..LOSS_TRIES {
        let outcome = match ctx.retention.get().await {
            Ok(lease) => {
                let (value, extra) = (to_json(&claim), release.clone());
                claim::mark_lost(&ctx.client, &won.claim_key, fencing_token, held.clone(), value, lease, extra).await
            }
            Err(e) => ClaimOutcome::Unknown(format!("retention lease unavailable: {e}")),
        };
        match outcome {
            ClaimOutcome::Won { .. } | ClaimOutcome::Blocked { .. } => {
                tracing::warn!(job = %fire.id.job, scheduled_ms = fire.scheduled_ms, fencing_token, "orphaned claim closed missed");
                deliver(ctx, Some(&fire.spec), record, WriteMode::IfAbsent);
                ctx.provisional.remove(pending);
                if let Some(value) = hand_on {
                    crate::fire::queue::pump(ctx, &fire.id.job, &fire.id.part, Some(value)).await;
                }
                return;
            }
            ClaimOutcome::Lost | ClaimOutcome::PoolFull => {
                ctx.provisional.remove(pending);
                return;
            }
            ClaimOutcome::Unknown(e) => {
                tracing::warn!(error = %e, "closing an orphaned claim: outcome unknown; retrying");
                tokio::time::sleep(CLOSE_RETRY_MAX).await;
            }
        }
    }
    // Its close may have been applied: the provisional loop looks once etcd answers.
    ctx.provisional.release(pending);
    tracing::error!(execution_id = %fire.id, fencing_token, "etcd did not take the close of an orphaned claim; its tick stays claimed and unrecorded (unless the close was applied after all: its record waits in the data dir until etcd answers)");
    METRICS.claims.with_label_values(&["unknown_unresolved"]).inc();
}

/// `concurrency: replace`: stop the execution this one took the lock from, wherever it runs.
pub(crate) fn replace_running(ctx: &Arc<Context>, old: &ExecutionId, new: &ExecutionId) {
    let (ctx, old, new) = (ctx.clone(), old.clone(), new.clone());
    etcron_common::task::spawn(async move {
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
            Ok(_) => tracing::info!(replaced = %old, "concurrency replace: kill written for the running execution"),
            Err(EtcdError::Failed(e)) => {
                tracing::error!(error = %e, replaced = %old, "writing the kill for the replaced execution failed")
            }
            Err(EtcdError::Timeout) => {
                tracing::error!(replaced = %old, "writing the kill for the replaced execution timed out")
            }
        }
    });
}

/// A claim this worker won: what the run and close phases need of it.
#[derive(Clone)]
pub struct WonClaim {
    pub claim_key: String,
    pub running_key: String,
    pub fencing_token: i64,
    /// The claim as won (`running`); the close rewrites it `done`.
    pub claim: Claim,
    /// The running marker, written once the run has lasted a second (with pid and token).
    pub running: RunningExecution,
    /// The marker's create revision once written.
    pub marker_revision: Option<i64>,
    /// The job's lock and the value this execution holds in it (`forbid`/`replace`).
    pub lock: Option<(String, Vec<u8>)>,
    /// The session lease the inflight key, the marker and the lock live on.
    pub lease: i64,
    /// This execution's share of its claim transaction's inflight key.
    pub hold: Hold,
    pub claimed_ms: i64,
    /// The pool slots the claim took (their keys), released by its close.
    pub pool_slots: Vec<String>,
}

/// Races for `fire`'s claim under session `lease`, as the worker ranked `rank` for it (first
/// ranks go first in the batcher); `Some` when it is ours to run.
pub async fn claim(ctx: &Arc<Context>, fire: &Fire, lease: i64, rank: usize) -> Option<WonClaim> {
    // A claim the job's lock may block closes the tick `skipped` in the claim transaction
    // itself: its record is durable first (before the lease, as `not_run::record_not_run`).
    let skipped = blockable(fire).then(|| {
        let record = not_run_record(ctx, fire, Status::Skipped, blocked_reason(fire, None), None);
        ctx.provisional.write(&ctx.keys.claim(&fire.id), &record)
    });
    // The claim outlives the session on the retention lease: a won attempt is never won again.
    // Boxed, as the other rare awaits of this phase: a burst holds the claim phases of every
    // tick a worker races for at once, and each carries only what it reaches.
    let retention_lease = match Box::pin(ctx.retention.get()).await {
        Ok(l) => l,
        Err(e) => {
            if let Some(pending) = skipped {
                ctx.provisional.remove(pending);
            }
            tracing::warn!(error = %e, "retention lease unavailable: not claiming");
            METRICS.not_raced.with_label_values(&["no_lease"]).inc();
            ctx.unsettled.note(fire);
            watch_for_miss(ctx, fire, 0, NotRaced::Unknown);
            return None;
        }
    };
    let won = prepare(ctx, fire, lease);
    // The job state trails this worker's claims by up to `STATE_EVERY` (see there).
    let advance = state_tick(fire).is_some_and(|ms| ctx.state_marks.due(&fire.id.job, ms));
    let queue = Box::pin(crate::fire::queue::claim_part(ctx, fire)).await;
    let queued = queue.is_some();
    let request = RunClaim {
        claim_key: won.claim_key.clone(),
        claim_value: to_json(&won.claim),
        running_key: won.running_key.clone(),
        session_lease: lease,
        retention_lease,
        lock: lock_claim(fire, &won, queue),
        extra: taken_ops(ctx, fire, advance),
        dequeued: fire.dequeued.then(|| to_json(&Claim::waiting())),
        pool: None,
    };
    // A plain tick's claim may be sent again when its answer is lost and nothing was written.
    let again = sendable_again(fire, queued).then(|| request.clone());
    let started = std::time::Instant::now();
    let mut won = won;
    let Some((outcome, hold)) = race_for(ctx, fire, (request, rank), &mut won).await else {
        record_skipped(ctx, skipped, false);
        return None;
    };
    METRICS.claim_seconds.observe(started.elapsed().as_secs_f64());
    let mut won = WonClaim { hold, ..won };
    if let (true, ClaimOutcome::Won { .. }, Some(ms)) = (advance, &outcome, state_tick(fire)) {
        ctx.state_marks.advanced(&fire.id.job, ms);
    }
    let closed_skipped = !queued && matches!(outcome, ClaimOutcome::Blocked { .. });
    if closed_skipped {
        crate::failpoint::hit(crate::failpoint::SKIPPED_AFTER_CLAIM);
    }
    let unknown = matches!(outcome, ClaimOutcome::Unknown(_));
    if let (true, ClaimOutcome::Blocked { holder, .. }) = (queued, &outcome) {
        record_skipped(ctx, skipped, false);
        queued_behind(ctx, fire, holder);
        return None;
    }
    let settled = resolve_claim(ctx, fire, &mut won, outcome, again).await;
    record_skipped(ctx, skipped, unknown);
    Some(WonClaim { fencing_token: settled?, ..won })
}

/// The provisional record of a tick `forbid` may skip, once the claim's outcome is in: known,
/// it goes (the real record is submitted, or none is to be); unknown, the provisional loop
/// decides from the claim.
fn record_skipped(ctx: &Context, pending: Option<crate::context::provisional::ProvisionalFile>, unknown: bool) {
    match (pending, unknown) {
        (Some(p), true) => ctx.provisional.release(p),
        (Some(p), false) => ctx.provisional.remove(p),
        (None, _) => {}
    }
}

/// The claim raced: with its pool's slots (waiting while the pool is full), or plain. `None`
/// when a pool's wait settled the tick (recorded missed, or taken by another worker).
async fn race_for(
    ctx: &Arc<Context>,
    fire: &Fire,
    (request, rank): (RunClaim, usize),
    won: &mut WonClaim,
) -> Option<(ClaimOutcome, Hold)> {
    if fire.spec.pool.is_none() {
        return Some(send(ctx, fire, request, rank).await);
    }
    match Box::pin(crate::fire::pool::race(ctx, fire, (request, rank), won)).await {
        crate::fire::pool::Pooled::Raced(outcome, hold) => Some((outcome, hold)),
        crate::fire::pool::Pooled::Settled => None,
    }
}

/// Sends a claim (in a batch when it can share one) and counts its outcome.
async fn send(ctx: &Arc<Context>, fire: &Fire, request: RunClaim, rank: usize) -> (ClaimOutcome, Hold) {
    match ctx.batchers.claim(&fire.id, request, rank).await {
        Raced::Sent(outcome, hold) => {
            METRICS.claims.with_label_values(&[outcome.label()]).inc();
            (outcome, hold)
        }
        Raced::SeenTaken => {
            // Another transaction wrote the claim while this one waited for its batch: what
            // etcd would have answered (`Lost`), without the write.
            METRICS.claims.with_label_values(&["taken_seen"]).inc();
            (ClaimOutcome::Lost, Hold::none())
        }
    }
}

/// Whether `fire`'s claim may be sent a second time when the first one's answer was lost and
/// etcd, read back, holds no claim of it: a tick of a job without a lock or queue (whose claim
/// writes nothing else that a second send could double), not a run request (raced again by
/// `race_again`) nor a queued turn.
fn sendable_again(fire: &Fire, queued: bool) -> bool {
    fire.spec.concurrency == Concurrency::Allow
        && fire.spec.pool.is_none()
        && !queued
        && !fire.dequeued
        && fire.request_key.is_none()
}

/// The claim sent again (`sendable_again`), at the head of the batcher's queue; its hold joins
/// the first send's, whose transaction etcd may still apply (queued behind a stall) and win.
async fn send_again(ctx: &Arc<Context>, fire: &Fire, request: RunClaim, won: &mut WonClaim) -> ClaimOutcome {
    let (outcome, hold) = match ctx.batchers.claim(&fire.id, request, 0).await {
        Raced::Sent(outcome, hold) => (outcome, hold),
        Raced::SeenTaken => (ClaimOutcome::Lost, Hold::none()),
    };
    METRICS.claims.with_label_values(&[outcome.label()]).inc();
    // The first transaction's key stays too: applied late, it is the one that won.
    won.hold = if crate::context::simulated::holes::open(crate::context::simulated::holes::FIRST_SEND_LET_GO) {
        hold
    } else {
        std::mem::replace(&mut won.hold, Hold::none()).with(hold)
    };
    outcome
}

/// Whether the job's lock may block a claim of `fire`, closing it `skipped` (`forbid`, and
/// `queue` when its queue is full); `replace` takes the lock over, `allow` has none.
fn blockable(fire: &Fire) -> bool {
    matches!(fire.spec.concurrency, Concurrency::Forbid | Concurrency::Queue)
}

/// Why a blocked claim's tick was skipped; `holder`: the execution holding the lock, when known.
fn blocked_reason(fire: &Fire, holder: Option<&str>) -> String {
    let holder = holder.unwrap_or("another execution");
    match fire.spec.concurrency {
        Concurrency::Queue => {
            format!("concurrency queue: the queue is full (max_queue {}) behind {holder}", fire.spec.queue_limit())
        }
        _ => format!("concurrency forbid: {holder} was still running"),
    }
}

/// A tick queued behind the run holding its job's lock waits there (no record until it runs;
/// the API lists the queue). A lock found free with executions waiting (their holder's session
/// ended before it handed the lock on) is handed on here.
fn queued_behind(ctx: &Arc<Context>, fire: &Fire, holder: &[u8]) {
    let holder = serde_json::from_slice::<ExecutionId>(holder).ok();
    tracing::info!(holder = ?holder.as_ref().map(ToString::to_string), dequeued = fire.dequeued, "execution queued: the job's lock is held");
    METRICS.queued.inc();
    crate::fire::alerts::queued(ctx, fire);
    if holder.is_none() {
        let (ctx, job, part) = (ctx.clone(), fire.id.job.clone(), fire.id.part.clone());
        etcron_common::task::spawn(async move { crate::fire::queue::pump(&ctx, &job, &part, None).await });
    }
}

/// The claim, marker and lock this worker would write for `fire` (token not yet known).
pub(crate) fn prepare(ctx: &Context, fire: &Fire, lease: i64) -> WonClaim {
    let id = &fire.id;
    let claimed_ms = now_ms();
    let worker_id = ctx.config.worker_id.clone();
    let claim = Claim { params: fire.params.clone(), ..Claim::taken(&worker_id) };
    let running = RunningExecution {
        worker_id,
        execution_id: id.clone(),
        pid: None,
        started_at: rfc3339_ms(claimed_ms),
        task_started_ms: None,
        fencing_token: None,
        trigger: Some(fire.trigger),
        scheduled_ms: Some(fire.scheduled_ms),
        params: fire.params.clone(),
    };
    let lock = (fire.spec.concurrency != Concurrency::Allow).then(|| (ctx.keys.lock(&id.job, &id.part), to_json(id)));
    WonClaim {
        claim_key: ctx.keys.claim(id),
        running_key: ctx.keys.running(id),
        fencing_token: 0,
        claim,
        running,
        marker_revision: None,
        lock,
        lease,
        hold: Hold::none(),
        claimed_ms,
        pool_slots: Vec::new(),
    }
}

/// The lock part of the claim transaction (`forbid`: skip when held; `replace`: take it over;
/// `queue`: wait in the queue, when `queue` offers a place).
pub(crate) fn lock_claim(fire: &Fire, won: &WonClaim, queue: Option<QueueClaim>) -> Option<LockClaim> {
    let (key, value) = won.lock.clone()?;
    let blocked = Claim::closed(Status::Skipped);
    Some(LockClaim {
        key,
        value,
        replace: fire.spec.concurrency == Concurrency::Replace,
        blocked_claim: to_json(&blocked),
        queue,
    })
}

/// The fencing token when the claim is ours; otherwise what follows a lost, blocked or unknown
/// claim is done here and `None` returned.
///
/// `again`: the claim to send a second time when its answer was lost and nothing was written
/// (`sendable_again`), while the tick is within its start deadline and the session lives.
pub(crate) async fn resolve_claim(
    ctx: &Arc<Context>,
    fire: &Fire,
    won: &mut WonClaim,
    outcome: ClaimOutcome,
    again: Option<RunClaim>,
) -> Option<i64> {
    match outcome {
        ClaimOutcome::Won { fencing_token, replaced } => {
            Box::pin(resolve_won(ctx, fire, won, fencing_token, replaced)).await
        }
        ClaimOutcome::Blocked { fencing_token, holder } => {
            let holder = serde_json::from_slice::<ExecutionId>(&holder).ok().map(|h| h.to_string());
            let reason = blocked_reason(fire, holder.as_deref());
            tracing::info!(%reason, "tick skipped");
            let record = not_run_record(ctx, fire, Status::Skipped, reason, Some(fencing_token));
            log_record(&record, 0);
            ctx.sink.submit(RecordWrite { mode: WriteMode::Replace, record });
            Box::pin(continue_catchup(ctx, fire)).await;
            None
        }
        ClaimOutcome::Lost | ClaimOutcome::PoolFull => {
            tracing::trace!("claim lost to another worker");
            Box::pin(crate::fire::backfill::taken_elsewhere(ctx, fire)).await;
            None
        }
        ClaimOutcome::Unknown(_)
            if crate::context::simulated::holes::open(crate::context::simulated::holes::UNKNOWN_CLAIM_DROPPED) =>
        {
            None
        }
        ClaimOutcome::Unknown(e) => Box::pin(resolve_unknown_outcome(ctx, fire, won, &e, again)).await,
    }
}

/// A claim won: a `replace` run it took over is stopped; one won after this worker's session
/// ended is not run (its keeper would end it at once, and the loss handling owns it) but closed
/// `missed`.
async fn resolve_won(
    ctx: &Arc<Context>,
    fire: &Fire,
    won: &WonClaim,
    fencing_token: i64,
    replaced: Option<Vec<u8>>,
) -> Option<i64> {
    let id = &fire.id;
    if let Some(old) = replaced.and_then(|v| serde_json::from_slice::<ExecutionId>(&v).ok()) {
        if &old != id {
            replace_running(ctx, &old, id);
        }
    }
    // Won, but the session that claimed it ended before etcd answered (a leader change
    // can keep the lease alive in etcd past this worker's deadline): its task's keeper
    // would end it at once, and the loss handling owns the claim. Not run: closed missed.
    if *ctx.lease.borrow() != Some(won.lease) {
        METRICS.claims.with_label_values(&["won_orphaned"]).inc();
        tracing::warn!(
            scheduled_ms = fire.scheduled_ms,
            fencing_token,
            "claim won after this worker's session ended: not running it"
        );
        record_orphan(ctx, fire, won, fencing_token).await;
        return None;
    }
    Some(fencing_token)
}

/// A claim whose answer was lost: read back, and run here late, given up, or sent again.
async fn resolve_unknown_outcome(
    ctx: &Arc<Context>,
    fire: &Fire,
    won: &mut WonClaim,
    e: &str,
    again: Option<RunClaim>,
) -> Option<i64> {
    // The txn may have committed (etcd lost the answer, not the write): then the tick is
    // ours and nobody else may run it, so it must run here, late, or never at all.
    match resolve_unknown_claim(ctx, fire, won).await {
        Resolved::Ours(token) if *ctx.lease.borrow() != Some(won.lease) => {
            // etcd kept the session (a leader change extends leases), this worker did not.
            METRICS.claims.with_label_values(&["won_orphaned"]).inc();
            tracing::warn!(error = %e, scheduled_ms = fire.scheduled_ms, fencing_token = token, "claim outcome was unknown and the claim is ours, but this worker's session ended meanwhile: not running it");
            record_orphan(ctx, fire, won, token).await;
            None
        }
        Resolved::Ours(token) => {
            METRICS.claims.with_label_values(&["unknown_won"]).inc();
            tracing::warn!(error = %e, scheduled_ms = fire.scheduled_ms, fencing_token = token, "claim outcome was unknown, but the claim is ours: running the tick late");
            Some(token)
        }
        Resolved::Orphaned(token) => {
            METRICS.claims.with_label_values(&["unknown_orphaned"]).inc();
            tracing::warn!(error = %e, scheduled_ms = fire.scheduled_ms, fencing_token = token, "claim outcome was unknown; the claim is ours but its session ended before etcd answered: not running it");
            record_orphan(ctx, fire, won, token).await;
            None
        }
        Resolved::Absent if again.is_some() && young(ctx, fire, won) => {
            let request = again?;
            Box::pin(claim_again(ctx, fire, won, request, e)).await
        }
        Resolved::NotOurs | Resolved::Absent | Resolved::NoAnswer => {
            tracing::warn!(error = %e, scheduled_ms = fire.scheduled_ms, "claim outcome unknown: not running this tick here");
            ctx.unsettled.note(fire);
            watch_for_miss(ctx, fire, 0, NotRaced::Unknown);
            recheck_unknown_claim(ctx, fire, won);
            // A run request stays until claimed: raced for again under the same id (the
            // sweeps settle schedule ticks only).
            if let Some(key) = &fire.request_key {
                let _ = ctx.race_again.send(key.clone());
            }
            None
        }
    }
}

/// Whether a claim may still be sent again: the session that sent it lives and the tick is
/// within its start deadline.
fn young(ctx: &Context, fire: &Fire, won: &WonClaim) -> bool {
    let deadline = fire.spec.start_deadline();
    *ctx.lease.borrow() == Some(won.lease)
        && crate::timing::fire::past_deadline(fire.trigger, fire.scheduled_ms, now_ms(), deadline).is_none()
}

/// A tick's claim whose answer was lost and that etcd, read back, does not hold: nothing was
/// written, so it is sent once more (a leader lost mid-claim loses the claims in flight to it).
/// The first transaction may still be applied late (queued behind a stall): then the second is
/// refused, and the claim read back is ours to run. Only once this worker has decided — the
/// claim runs here under a token, or it gave the tick up — is the first transaction rechecked
/// (`recheck_unknown_claim`), and only when it gave the tick up (a claim it runs holds the key
/// the first transaction would create): a recheck started before the decision could close
/// `missed` a claim the decision then runs (the worker simulation's seed 187 did). The same steps as the simulation's
/// model (`sim/src/world.rs`, `read_back`).
async fn claim_again(
    ctx: &Arc<Context>,
    fire: &Fire,
    won: &mut WonClaim,
    request: RunClaim,
    error: &str,
) -> Option<i64> {
    METRICS.claims.with_label_values(&["sent_again"]).inc();
    tracing::info!(%error, scheduled_ms = fire.scheduled_ms, "claim outcome unknown and etcd holds no claim of the tick: claiming it again");
    let outcome = match send_again(ctx, fire, request, won).await {
        ClaimOutcome::Lost => match resolve_unknown_claim(ctx, fire, won).await {
            // The first transaction was applied after all.
            Resolved::Ours(token) => ClaimOutcome::Won { fencing_token: token, replaced: None },
            Resolved::Orphaned(token) => {
                record_orphan(ctx, fire, won, token).await;
                return None;
            }
            Resolved::NotOurs | Resolved::Absent | Resolved::NoAnswer => ClaimOutcome::Lost,
        },
        outcome => outcome,
    };
    let runs = Box::pin(resolve_claim(ctx, fire, won, outcome, None)).await;
    if runs.is_none() {
        recheck_unknown_claim(ctx, fire, won);
    }
    runs
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn claim(worker: &str, state: ClaimState) -> Vec<u8> {
        let status = (state == ClaimState::Done).then_some(Status::Succeeded);
        serde_json::to_vec(&Claim {
            worker_id: worker.to_owned(),
            status,
            params: etcron_model::record::RunParams::default(),
            queued: state == ClaimState::Queued,
        })
        .unwrap()
    }

    fn key(value: &[u8], lease: i64, version: i64) -> ReadKey<'_> {
        // A rewrite (version 2) moved the mod revision past the winning txn's.
        ReadKey { value, lease, mod_revision: 40 + version - 1, version }
    }

    #[test]
    fn a_claim_read_back_is_ours_orphaned_or_not_ours() {
        let registration = br#"{"id":"w1"}"#;
        let (running, closed, foreign) =
            (claim("w1", ClaimState::Running), claim("w1", ClaimState::Done), claim("w2", ClaimState::Running));
        let back = |r: Option<ReadKey>, c: Option<ReadKey>| read_back("w1", (7, false), r, c);
        let back_dequeued = |r: Option<ReadKey>, c: Option<ReadKey>| read_back("w1", (7, true), r, c);
        // The txn committed and the session that made it still lives: run it.
        assert_eq!(back(Some(key(registration, 7, 1)), Some(key(&running, 9, 1))), Resolved::Ours(40));
        // The session ended between the commit and the read (gone, or registered anew).
        assert_eq!(back(None, Some(key(&running, 9, 1))), Resolved::Orphaned(40));
        assert_eq!(back(Some(key(registration, 8, 1)), Some(key(&running, 9, 1))), Resolved::Orphaned(40));
        // Closed already (a status, or rewritten), or someone else's: not ours to settle.
        assert_eq!(back(Some(key(registration, 7, 1)), Some(key(&closed, 9, 2))), Resolved::NotOurs);
        assert_eq!(back(Some(key(registration, 7, 1)), Some(key(&closed, 9, 1))), Resolved::NotOurs);
        assert_eq!(back(Some(key(registration, 7, 1)), Some(key(&foreign, 9, 1))), Resolved::NotOurs);
        // Waiting in its job's queue: nobody's yet. Taken from the queue (written twice: queued,
        // then taken): ours, its token the revision that took it.
        let queued = claim("", ClaimState::Queued);
        assert_eq!(back(Some(key(registration, 7, 1)), Some(key(&queued, 9, 1))), Resolved::NotOurs);
        assert_eq!(back_dequeued(Some(key(registration, 7, 1)), Some(key(&running, 9, 2))), Resolved::Ours(41));
        // A tick whose txn wrote it `queued` (answer lost), handed the lock since and taken by
        // this same worker's run of its turn: not the tick's first txn's to run (it would run
        // twice: the chaos suite found it).
        assert_eq!(back(Some(key(registration, 7, 1)), Some(key(&running, 9, 2))), Resolved::NotOurs);
        // Nothing written: the txn failed (or has not been applied yet).
        assert_eq!(back(Some(key(registration, 7, 1)), None), Resolved::Absent);
        assert_eq!(back(Some(key(registration, 7, 1)), Some(key(b"not json", 9, 1))), Resolved::NotOurs);
    }
}
