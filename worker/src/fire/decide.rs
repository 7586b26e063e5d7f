//! The decide phase: whether this worker races for a fire at all — its part, its rank (and the
//! head start of the workers ranked before it), the job's selector, a free capacity slot, a
//! session — and what happens to a fire it does not race for.

use std::sync::Arc;
use std::time::Duration;

use etcron_common::claim;
use etcron_model::keys::Part;
use etcron_model::now_ms;
use etcron_model::record::Status;
use etcron_model::spec::Concurrency;
use etcron_model::stored::labels_match;

use crate::context::Context;
use crate::fire::not_run::{record_not_run, watch_for_miss, NotRaced};
use crate::metrics::METRICS;
use crate::timing::fire::{past_deadline, Fire};

/// Whether a ranked-later worker finds the claim taken: seen in its watch of claims (no etcd
/// request), or, for a claim that would go alone (a concurrency lock, a pool), read from etcd — a
/// losing claim alone costs a raft proposal, a read does not. A batchable claim not seen yet is
/// raced: in a batch, losing costs no proposal of its own.
pub(crate) async fn already_taken(ctx: &Context, fire: &Fire, claim_key: &str) -> bool {
    if fire.dequeued {
        // Its claim exists by design (`queued`): taken once it says anything else.
        return Box::pin(crate::fire::queue::left_queue(ctx, claim_key)).await;
    }
    if ctx.taken.contains(claim_key) {
        METRICS.claims.with_label_values(&["taken_seen"]).inc();
        return true;
    }
    if fire.spec.concurrency == Concurrency::Allow && fire.spec.pool.is_none() {
        return false;
    }
    // Boxed, as every etcd request on a fire's common path: a fire's task carries only the
    // futures of the awaits it reaches (a burst holds a task per due tick on every worker).
    match Box::pin(claim::claim_exists(&ctx.client, claim_key)).await {
        Ok(true) => {
            METRICS.claims.with_label_values(&["taken"]).inc();
            true
        }
        Ok(false) => false,
        Err(e) => {
            tracing::debug!(error = %e, "claim pre-check failed; racing anyway");
            false
        }
    }
}

/// How long the worker a run was moved away from (`rebalance`) leaves it to the others.
pub(crate) const MOVED_AWAY_WAIT: Duration = Duration::from_secs(2);

/// Most time a run request waits on this worker for a free capacity slot.
pub(crate) const REQUEST_CAPACITY_WAIT: Duration = Duration::from_secs(600);

/// Run requests (retries, dependencies, catch-up, failover, manual runs) wait for a free slot
/// while their request key exists; `None` when another worker took it or the wait ran out.
pub(crate) async fn wait_for_capacity(ctx: &Arc<Context>, fire: &Fire) -> Option<()> {
    let key = fire.request_key.as_deref()?;
    tracing::info!(capacity = ctx.config.capacity, "worker at capacity: run request waits for a free slot");
    let deadline = tokio::time::Instant::now() + REQUEST_CAPACITY_WAIT;
    while tokio::time::Instant::now() < deadline {
        if ctx.slots.free() {
            return Some(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        if let Ok(false) = claim::key_exists(&ctx.client, key, false).await {
            return None;
        }
    }
    tracing::warn!("run request waited {}s for capacity", REQUEST_CAPACITY_WAIT.as_secs());
    watch_for_miss(ctx, fire, 0, NotRaced::Capacity);
    None
}

/// What the decide phase hands on: this worker races for the fire as of session `lease`. It
/// holds no capacity slot: a slot is taken when the run it wins starts (`run`), so capacity
/// counts runs, not races.
pub struct Go {
    pub lease: i64,
    /// This worker's rank for the execution (0: first; a broadcast part is its own worker's).
    pub rank: usize,
}

/// Decides whether this worker races for `fire`; `None` when it does not (what happens to the
/// fire then is arranged here: recorded, watched for a miss, or left to the others).
pub async fn decide(ctx: &Arc<Context>, fire: &Fire) -> Option<Go> {
    let claim_key = ctx.keys.claim(&fire.id);
    let me = ctx.config.worker_id.as_str();
    // A broadcast job's part belongs to one worker: no race, nobody else's business.
    let own_part = match &fire.id.part {
        Part::Worker(w) if w == me => true,
        Part::Worker(_) => return None,
        _ => false,
    };
    let mut rank = if own_part { 0 } else { ctx.members.rank(me, &claim_key) };
    if fire.avoid.as_deref() == Some(me) && !own_part {
        // Moved away from this worker (`rebalance`): the others go first; it takes the run
        // back only when none of them did.
        tokio::time::sleep(MOVED_AWAY_WAIT).await;
        rank = rank.max(1);
    }
    if let Some(reason) = fire.skip.clone() {
        // One worker records the skipped tick; the claim makes it exactly one. The first-ranked
        // records it at once, the others after their head start unless it did: it may be
        // stopped or dead, and a tick nobody records would be dropped silently.
        if rank == 0 || head_start(ctx, fire, &claim_key, rank).await {
            Box::pin(record_not_run(ctx, fire, Status::Skipped, reason)).await;
        }
        return None;
    }
    if ctx.members.cordoned(me) {
        // Cordoned (or draining): nothing new, its own broadcast part included; the others
        // rank it last, and the first of them watches for a miss.
        tracing::debug!("this worker is cordoned: not racing");
        METRICS.not_raced.with_label_values(&["cordoned"]).inc();
        watch_for_miss(ctx, fire, rank, NotRaced::Selector);
        return None;
    }
    if let Some(why) = not_eligible(&ctx.config, &ctx.handler_names, &fire.spec) {
        tracing::trace!(why, "this worker may not run the job");
        METRICS.not_raced.with_label_values(&[why]).inc();
        watch_for_miss(ctx, fire, rank, NotRaced::Selector);
        return None;
    }
    if rank > 0 && !head_start(ctx, fire, &claim_key, rank).await {
        // A backfill item whose execution another request took (the live schedule's, or
        // another backfill's): its request is consumed and its chain goes on, whichever worker
        // gets there (the first-ranked may be stopped or dead).
        Box::pin(crate::fire::backfill::taken_elsewhere(ctx, fire)).await;
        return None;
    }
    let deadline = fire.spec.start_deadline();
    let late = past_deadline(fire.trigger, fire.scheduled_ms, now_ms(), deadline).filter(|_| !fire.dequeued);
    if let Some(late_ms) = late {
        // Racing it would add to the backlog that made it late: the misfire policy decides.
        tracing::warn!(late_ms, start_deadline = ?deadline, "tick past its start deadline: not raced");
        METRICS.not_raced.with_label_values(&["late"]).inc();
        watch_for_miss(ctx, fire, rank, NotRaced::Late(late_ms));
        return None;
    }
    if !ctx.slots.free() {
        // Boxed: the future of a rare path is not carried by every fire's task.
        Box::pin(capacity(ctx, fire, rank, own_part)).await?;
    }
    // Past the session deadline its keepers end whatever starts: a claim now would only burn
    // an attempt (and with it one of the tick's failover reruns) on a run that cannot start.
    let lease = (*ctx.lease.borrow()).filter(|_| !ctx.session_deadline.passed());
    let Some(lease) = lease else {
        tracing::warn!("no session lease, or its deadline passed: not claiming");
        METRICS.not_raced.with_label_values(&["no_lease"]).inc();
        ctx.unsettled.note(fire);
        watch_for_miss(ctx, fire, rank, NotRaced::NoLease);
        // A run request stays until claimed, and nothing else fires it again here until the
        // request mirror re-lists (a renewed session re-lists nothing): raced for again later.
        if let Some(key) = &fire.request_key {
            let _ = ctx.race_again.send(key.clone());
        }
        return None;
    };
    Some(Go { lease, rank })
}

/// Why this worker does not race for a job's ticks at all (the metric's reason), or `None`
/// when it may: its labels miss the job's selector, the task runs as a user this worker does
/// not allow, the worker is bound to teams the job is not of, or it does not run the task's
/// kind (a handler it has not registered; any other kind on an executor).
fn not_eligible(
    config: &crate::config::Config,
    handlers: &[String],
    spec: &etcron_model::spec::JobSpec,
) -> Option<&'static str> {
    if !etcron_model::stored::runs_task(handlers, spec.task.handler()) {
        return Some("handler");
    }
    if !labels_match(&config.labels, &spec.selector) {
        return Some("selector");
    }
    if !etcron_model::stored::may_run_as(&config.run_as_users, spec.run_as_user()) {
        return Some("run_as");
    }
    if !etcron_model::stored::serves_team(&config.teams, spec.team.as_deref()) {
        return Some("team");
    }
    None
}

/// Gives the workers ranked before this one a head start (and, while this worker's claims are
/// backlogged, until the backlog clears: see `Batchers::after_backlog`), then looks before
/// writing: `false` when the claim is taken. No capacity slot is taken before: a tick that is taken already must
/// not make this worker look full. A tick raced ahead of its time can space the ranks out over
/// the lead at no cost to its start, so fewer rank-0 claims are still in flight when the next
/// rank looks.
pub(crate) async fn head_start(ctx: &Context, fire: &Fire, claim_key: &str, rank: usize) -> bool {
    let ahead_ms = u64::try_from(fire.scheduled_ms - now_ms()).unwrap_or(0);
    let step = ctx.config.claim_stagger.max(Duration::from_millis(ahead_ms / 4));
    tokio::time::sleep(step * u32::try_from(rank).unwrap_or(u32::MAX)).await;
    if ctx.batchers.after_backlog().await {
        METRICS.claims_held.inc();
    }
    !already_taken(ctx, fire, claim_key).await
}

/// Whether this worker has room to race (`Slots::free`), or `None` when it is full: a run
/// request waits for room, a broadcast part is recorded missed, a tick is left to the other
/// workers.
pub(crate) async fn capacity(ctx: &Arc<Context>, fire: &Fire, rank: usize, own_part: bool) -> Option<()> {
    if ctx.slots.free() {
        return Some(());
    }
    if fire.request_key.is_some() {
        return wait_for_capacity(ctx, fire).await;
    }
    METRICS.not_raced.with_label_values(&["capacity"]).inc();
    if own_part {
        tracing::warn!(capacity = ctx.config.capacity, "worker at capacity: this worker's broadcast run is missed");
        let reason = format!("worker {} was at capacity ({} running)", ctx.config.worker_id, ctx.config.capacity);
        record_not_run(ctx, fire, Status::Missed, reason).await;
    } else {
        tracing::warn!(capacity = ctx.config.capacity, "worker at capacity: leaving this tick to other workers");
        watch_for_miss(ctx, fire, rank, NotRaced::Capacity);
    }
    None
}
