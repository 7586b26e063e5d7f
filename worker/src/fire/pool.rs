//! Pools in the race phase: a claim of a job in a pool takes `pool_slots` slots of it in the
//! claim transaction itself (each slot one key, created only while absent), so across every
//! worker the pool is never over its slots. A claim that finds too few slots free, or a tick
//! of a higher priority (or the same priority and an earlier time) waiting, writes nothing but
//! the tick's entry in the pool's queue; every worker that raced for the tick then waits with
//! it, and races again when its mirror of the pool says the tick's turn may have come. Past the
//! tick's start deadline (a run request: `SLOT_WAIT_MAX`) the tick is recorded `missed`,
//! naming the pool.
//!
//! The slots live on the winner's session lease and are released by its close (compared by
//! their create revision, the claim's fencing token), or with the session when the worker dies:
//! exactly when its task's keeper has ended the task.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use etcron_common::claim::{ClaimOutcome, PoolClaim, RunClaim};
use etcron_model::now_ms;
use etcron_model::pool::{full_reason, HeldSlot, Waiting};
use etcron_model::record::{Status, TriggerKind};

use crate::cluster::pools::Pick;
use crate::context::batcher::{Hold, Raced};
use crate::context::slots::SLOT_WAIT_MAX;
use crate::context::Context;
use crate::fire::race::WonClaim;
use crate::metrics::METRICS;
use crate::timing::fire::{to_json, Fire};

/// How often a waiting tick looks again without a change of its pool (a change wakes it at
/// once): what a lost watch event would cost.
const RECHECK: Duration = Duration::from_secs(2);
/// The head start of each rank when a slot comes free: the first-ranked worker waiting with
/// the tick races first, the next one this much later (if the tick is still not taken).
const RANK_STAGGER: Duration = Duration::from_millis(150);
/// Claims sent again at once after naming a slot another claim took just before.
const MAX_COLLISIONS: u32 = 3;
const COLLISION_BACKOFF: Duration = Duration::from_millis(5);
/// The wait before waiting again after each claim a turn sent found the pool full.
const FUTILE_BACKOFF: Duration = Duration::from_millis(50);

/// How a pool claim ended.
pub(crate) enum Pooled {
    /// Sent and answered (won, lost, blocked, unknown): the race phase goes on with it.
    Raced(ClaimOutcome, Hold),
    /// Recorded `missed` (or taken elsewhere, or given up with the session): nothing to run.
    Settled,
}

/// Races for `fire`'s claim with its pool's slots, waiting in the pool's queue while it is
/// full; `won` gets the slots' keys when the claim is ours.
pub(crate) async fn race(
    ctx: &Arc<Context>,
    fire: &Fire,
    (mut request, rank): (RunClaim, usize),
    won: &mut WonClaim,
) -> Pooled {
    let Some((pool, n)) = fire.spec.pool_claim() else { return Pooled::Settled };
    let priority = fire.priority();
    let wait_key = ctx.keys.pool_wait(pool, etcron_model::pool::place(priority), fire.scheduled_ms, &fire.id);
    let first_wait = now_ms();
    let deadline_ms = deadline_ms(fire, first_wait);
    let mut waiting: Option<WaitingGauge> = None;
    // Claims sent on a turn that found the pool full again (the mirror behind etcd): each next
    // one waits longer, so a stale view never spins.
    let mut futile = 0u32;
    let mut collisions = 0u32;
    loop {
        let slots = match ctx.pools.pick(pool, n) {
            Pick::Missing => return missed(ctx, fire, pool, format!("pool {pool:?} does not exist")).await,
            Pick::Slots { slots, full } => (slots, full),
        };
        request.pool = Some(claim_part(ctx, fire, (pool, &slots.0), (&wait_key, priority, first_wait)));
        let raced = ctx.batchers.claim(&fire.id, request.clone(), rank).await;
        if !slots.1 {
            ctx.pools.done(pool, &slots.0);
        }
        let (outcome, hold) = match raced {
            Raced::Sent(outcome, hold) => (outcome, hold),
            Raced::SeenTaken => (ClaimOutcome::Lost, Hold::none()),
        };
        METRICS.claims.with_label_values(&[outcome.label()]).inc();
        if !matches!(outcome, ClaimOutcome::PoolFull) {
            // Won, or perhaps won (read back later): its close releases the slots it may hold.
            if matches!(outcome, ClaimOutcome::Won { .. } | ClaimOutcome::Unknown(_)) {
                won.pool_slots = slots.0.iter().map(|&i| ctx.keys.pool_slot(pool, i)).collect();
            }
            return Pooled::Raced(outcome, hold);
        }
        // Enough slots free as this worker sees them, nobody ahead: another claim took a slot
        // this one named just before. Again at once with other slots (a few times), not queued.
        if ctx.pools.turn(pool, n, &wait_key).0 && collisions < MAX_COLLISIONS {
            collisions += 1;
            tokio::time::sleep(COLLISION_BACKOFF * collisions).await;
            continue;
        }
        collisions = 0;
        let lease = *ctx.lease.borrow();
        if let (Some(part), Some(lease)) = (&request.pool, lease) {
            if let Err(e) = etcron_common::claim::enqueue(&ctx.client, part, lease).await {
                tracing::warn!(pool, error = ?e, "queuing the tick failed: it waits all the same");
                METRICS.pool_enqueue_errors.with_label_values(&[pool]).inc();
            }
        }
        if waiting.is_none() {
            tracing::info!(pool, priority, "pool full: the tick waits in its queue");
            METRICS.pool_waits.with_label_values(&[pool]).inc();
            waiting = Some(WaitingGauge::new(ctx, pool, &fire.id));
        }
        if futile > 0 {
            tokio::time::sleep(FUTILE_BACKOFF * futile.min(20)).await;
        }
        match wait_turn(ctx, fire, (pool, n), (&wait_key, rank, deadline_ms)).await {
            Turn::Again => futile += 1,
            Turn::Taken => return Pooled::Settled,
            Turn::SessionEnded => {
                // Its queue entry may go with the session: the sweeps settle a tick nobody took.
                ctx.unsettled.note(fire);
                return Pooled::Settled;
            }
            Turn::Deadline => {
                let state = ctx.pools.state(pool);
                let holders: Vec<String> = state.held.values().map(|h| h.execution_id.to_string()).collect();
                let reason = full_reason(pool, state.slots.unwrap_or(0), now_ms() - first_wait, &holders);
                let settled = missed(ctx, fire, pool, reason).await;
                delete_wait(ctx, &wait_key).await;
                return settled;
            }
        }
    }
}

/// Until when a tick may wait for its pool: its start deadline (schedule ticks), or
/// `SLOT_WAIT_MAX` from its first wait (run requests, which have none).
fn deadline_ms(fire: &Fire, first_wait: i64) -> i64 {
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4);
    if fire.trigger == TriggerKind::Schedule {
        fire.scheduled_ms + ms(fire.spec.start_deadline())
    } else {
        first_wait + ms(SLOT_WAIT_MAX)
    }
}

/// The pool part of a claim naming `slots`.
fn claim_part(ctx: &Context, fire: &Fire, (pool, slots): (&str, &[u32]), wait: (&str, u8, i64)) -> PoolClaim {
    let (wait_key, priority, since_ms) = wait;
    let held = HeldSlot {
        execution_id: fire.id.clone(),
        worker_id: ctx.config.worker_id.clone(),
        since_ms: now_ms(),
        priority,
    };
    let waiting = Waiting { execution_id: fire.id.clone(), scheduled_ms: fire.scheduled_ms, priority, since_ms };
    PoolClaim {
        slot_keys: slots.iter().map(|&i| ctx.keys.pool_slot(pool, i)).collect(),
        slot_value: to_json(&held),
        wait_key: wait_key.to_owned(),
        wait_value: to_json(&waiting),
        wait_prefix: ctx.keys.pool_wait_prefix(pool),
    }
}

enum Turn {
    /// The tick's turn may have come: race again.
    Again,
    /// Its claim was taken: nothing more to do here.
    Taken,
    /// This worker's session ended.
    SessionEnded,
    /// Its start deadline passed.
    Deadline,
}

/// Waits until the pool's mirror says the tick's turn may have come (enough slots free and
/// nothing waiting ahead of it), its deadline passes, or its claim is seen taken.
async fn wait_turn(
    ctx: &Arc<Context>,
    fire: &Fire,
    (pool, n): (&str, u32),
    (wait_key, rank, deadline_ms): (&str, usize, i64),
) -> Turn {
    let claim_key = ctx.keys.claim(&fire.id);
    let lease = *ctx.lease.borrow();
    let mut changed = ctx.pools.subscribe();
    // Since when the same entries have stood ahead (a claim's removal of its own entry reaches
    // this mirror a moment after the claim itself: only entries that stay are stale).
    let mut blocked: Option<(Vec<String>, tokio::time::Instant)> = None;
    // The tick's entry seen in the queue: gone since (its writer's session ended), it is
    // written again under this worker's session by claiming again.
    let mut seen_queued = false;
    loop {
        if ctx.taken.contains(&claim_key) {
            return Turn::Taken;
        }
        if lease.is_none() || *ctx.lease.borrow() != lease {
            return Turn::SessionEnded;
        }
        let left = deadline_ms - now_ms();
        if left <= 0 {
            return Turn::Deadline;
        }
        let queued = ctx.pools.queued(pool, wait_key);
        if seen_queued && !queued {
            // Gone with its claim (the other watch may not have said so yet), or with a session.
            if crate::fire::decide::already_taken(ctx, fire, &claim_key).await {
                return Turn::Taken;
            }
            return Turn::Again;
        }
        seen_queued |= queued;
        let (turn, ahead) = ctx.pools.turn(pool, n, wait_key);
        if turn {
            // The first-ranked worker waiting with it goes first; the others only if it did not.
            let stagger = RANK_STAGGER * u32::try_from(rank).unwrap_or(u32::MAX / 1000).min(20);
            tokio::time::sleep(stagger).await;
            if ctx.taken.contains(&claim_key) {
                return Turn::Taken;
            }
            return Turn::Again;
        }
        let keys: Vec<String> = ahead.iter().map(|(k, _, _)| k.clone()).collect();
        match &blocked {
            Some((same, since)) if *same == keys && since.elapsed() >= RECHECK => {
                drop_stale(ctx, &ahead).await;
                blocked = None;
            }
            Some((same, _)) if *same == keys => {}
            _ => blocked = Some((keys, tokio::time::Instant::now())),
        }
        let nap = RECHECK.min(Duration::from_millis(u64::try_from(left).unwrap_or(0)));
        tokio::select! {
            _ = changed.changed() => {}
            () = tokio::time::sleep(nap) => {}
        }
    }
}

/// Queue entries ahead of a waiting tick whose execution's claim this worker has seen taken
/// (their writer died between the claim and the entry's removal, or a job edit changed their
/// priority): removed, each only while unchanged.
async fn drop_stale(ctx: &Context, ahead: &[(String, i64, Waiting)]) {
    for (key, mod_revision, waiting) in ahead {
        if !ctx.taken.contains(&ctx.keys.claim(&waiting.execution_id)) {
            continue;
        }
        let txn = Txn::new()
            .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, *mod_revision)])
            .and_then([TxnOp::delete(key.as_str(), None)]);
        let mut kv = ctx.client.kv_client();
        if etcron_common::etcd::request("pool_wait_stale", kv.txn(txn)).await.is_ok() {
            tracing::info!(entry = %key, execution_id = %waiting.execution_id, "stale pool queue entry removed: its tick was taken");
        }
    }
}

/// Records the tick `missed` for `why` (once across the cluster, through its claim key).
async fn missed(ctx: &Context, fire: &Fire, pool: &str, why: String) -> Pooled {
    tracing::warn!(pool, reason = %why, "tick not run: its pool");
    if crate::fire::not_run::record_not_run(ctx, fire, Status::Missed, why).await {
        METRICS.pool_missed.with_label_values(&[pool]).inc();
    }
    Pooled::Settled
}

/// Removes the tick's queue entry (it stopped waiting); a failure leaves it to the waiting
/// ticks behind it, which remove entries whose claim they have seen taken.
async fn delete_wait(ctx: &Context, wait_key: &str) {
    let mut kv = ctx.client.kv_client();
    if let Err(e) = etcron_common::etcd::request("pool_wait_delete", kv.delete(wait_key, None)).await {
        tracing::warn!(entry = wait_key, error = ?e, "removing a pool queue entry failed");
    }
}

/// A tick this worker waits with, counted and known to the sweeps (which leave such a tick to
/// its waiting workers) while it waits.
struct WaitingGauge<'a> {
    ctx: &'a Context,
    pool: String,
    id: String,
}

impl<'a> WaitingGauge<'a> {
    fn new(ctx: &'a Context, pool: &str, id: &etcron_model::keys::ExecutionId) -> Self {
        METRICS.pool_waiting.with_label_values(&[pool]).inc();
        let id = id.to_string();
        ctx.pools.set_waiting_here(&id, true);
        Self { ctx, pool: pool.to_owned(), id }
    }
}

impl Drop for WaitingGauge<'_> {
    fn drop(&mut self) {
        METRICS.pool_waiting.with_label_values(&[&self.pool]).dec();
        self.ctx.pools.set_waiting_here(&self.id, false);
    }
}
