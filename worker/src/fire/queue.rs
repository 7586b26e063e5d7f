//! `concurrency: queue`: a tick that finds its job's lock held waits in the job's queue
//! (`{ns}/queue/{job}/q/`, oldest first), its claim `queued`; when the run holding the lock
//! ends, the lock is handed to the oldest waiting execution together with its run request, in
//! one transaction ([`pump`]). The queue lives in etcd: it survives every worker.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse};
use etcron_common::claim::QueueClaim;
use etcron_common::etcd::EtcdError;
use etcron_model::keys::{ExecutionId, Part, Tick};
use etcron_model::now_ms;
use etcron_model::spec::Concurrency;
use etcron_model::stored::{Claim, QueuedRun};

use crate::context::Context;
use crate::metrics::METRICS;
use crate::timing::fire::{to_json, Fire};

/// Tries of one hand-over before it gives up, loudly (the next run's end tries again).
const PUMP_TRIES: u32 = 10;

/// What a claim of `fire` writes should the job's lock be held: its queue entry (naming the
/// execution holding the lock now), unless the queue holds `max_queue` executions already (then
/// the tick is skipped as under `forbid`). `None` for other jobs. The lock and the queue's
/// length are read just before the claim (one request): ticks racing at the same instant may
/// each find the last free place.
pub(crate) async fn claim_part(ctx: &Context, fire: &Fire) -> Option<QueueClaim> {
    if fire.spec.concurrency != Concurrency::Queue {
        return None;
    }
    let prefix = ctx.keys.queue_prefix(&fire.id.job, &fire.id.part);
    let read = Txn::new().and_then([
        TxnOp::get(ctx.keys.lock(&fire.id.job, &fire.id.part), None),
        TxnOp::get(prefix.as_str(), Some(GetOptions::new().with_prefix().with_count_only())),
    ]);
    let mut kv = ctx.client.kv_client();
    let (lock_value, waiting) = match etcron_common::etcd::request("queue_len", kv.txn(read)).await {
        Ok(resp) => {
            let mut answers = resp.op_responses().into_iter();
            let lock_value = match answers.next() {
                Some(TxnOpResponse::Get(g)) => g.kvs().first().map(|kv| kv.value().to_vec()),
                _ => None,
            };
            let waiting = match answers.next() {
                Some(TxnOpResponse::Get(g)) => usize::try_from(g.count()).unwrap_or(usize::MAX),
                _ => 0,
            };
            (lock_value, waiting)
        }
        // Unknown: queue it; at worst the queue holds one more than `max_queue`.
        _ => {
            tracing::warn!(job = %fire.id.job, "reading the queue's lock and length failed: queuing without the limit");
            (None, 0)
        }
    };
    let holder = lock_value.as_deref().and_then(|v| serde_json::from_slice::<ExecutionId>(v).ok());
    if let (Some(id), Some(value)) = (&holder, lock_value) {
        heal(ctx, id, value).await;
    }
    if waiting >= fire.spec.queue_limit() {
        return None;
    }
    let entry = QueuedRun {
        execution_id: fire.id.clone(),
        scheduled_ms: fire.scheduled_ms,
        trigger: fire.trigger,
        params: fire.params.clone(),
        parent: fire.parent.clone(),
        queued_at_ms: now_ms(),
        behind: holder,
    };
    Some(QueueClaim {
        queued_claim: to_json(&Claim::waiting()),
        entry_key: ctx.keys.queue_entry(&fire.id, fire.scheduled_ms),
        entry_value: to_json(&entry),
        prefix,
    })
}

/// A lock still naming a run that has ended (its hand-over failed: etcd failed it for longer
/// than [`pump`] tries) would hold the queue until that worker's session ends: the next tick
/// of the job finds it so and hands the lock on.
async fn heal(ctx: &Context, holder: &ExecutionId, lock_value: Vec<u8>) {
    let mut kv = ctx.client.kv_client();
    let read =
        Txn::new().and_then([TxnOp::get(ctx.keys.claim(holder), None), TxnOp::get(ctx.keys.running(holder), None)]);
    let Ok(resp) = etcron_common::etcd::request("claim_read", kv.txn(read)).await else { return };
    let mut answers = resp.op_responses().into_iter();
    let (Some(TxnOpResponse::Get(claim)), Some(TxnOpResponse::Get(marker))) = (answers.next(), answers.next()) else {
        return;
    };
    // Closed; or gone with no running marker (a run past its claim's retention keeps one).
    let ended = match claim.kvs().first() {
        Some(kv) => serde_json::from_slice::<Claim>(kv.value()).is_ok_and(|c| c.status.is_some()),
        None => marker.kvs().is_empty(),
    };
    if ended {
        tracing::warn!(job = %holder.job, holder = %holder, "the queue's lock names a run that has ended: handing it on");
        crate::fire::queue::pump(ctx, &holder.job, &holder.part, Some(lock_value)).await;
    }
}

/// Whether a queued execution's claim was taken (it no longer says `queued`): a ranked-later
/// worker looks before racing for its turn. Unknown (etcd failing) counts as not taken: the
/// claim transaction decides.
pub(crate) async fn left_queue(ctx: &Context, claim_key: &str) -> bool {
    let mut kv = ctx.client.kv_client();
    match etcron_common::etcd::request("claim_read", kv.get(claim_key, None)).await {
        Ok(resp) => {
            resp.kvs().first().is_none_or(|kv| serde_json::from_slice::<Claim>(kv.value()).map_or(true, |c| !c.queued))
        }
        _ => false,
    }
}

/// The run request id of a queued execution: `queue-{tick}-{attempt}`.
fn request_id(id: &ExecutionId) -> String {
    match &id.tick {
        Tick::Scheduled(ms) => format!("queue-{ms}-{}", id.attempt),
        other => format!("queue-{other}-{}", id.attempt),
    }
}

/// Hands the lock of `job`'s queue (part `part`) on: to the oldest waiting execution with its
/// run request, or, when nothing waits, releases it. `holder` is the lock's value as the run
/// that ended wrote it; `None` when the lock went with its holder's session (the loss
/// handling, or a tick that found the lock free and the queue not empty). Nothing happens when
/// someone else holds the lock: its end hands it on.
pub(crate) async fn pump(ctx: &Context, job: &str, part: &Part, holder: Option<Vec<u8>>) {
    let lock = ctx.keys.lock(job, part);
    let prefix = ctx.keys.queue_prefix(job, part);
    for attempt in 1..=PUMP_TRIES {
        match pump_once(ctx, (job, &lock, &prefix), holder.as_deref()).await {
            Ok(()) => return,
            Err(e) => tracing::warn!(job, attempt, error = %e, "handing the queue's lock on failed; trying again"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tracing::error!(job, "the queue's lock could not be handed on: the next run's end will");
    METRICS.queue_stalls.inc();
}

/// One try of [`pump`]: `Ok` once the lock is handed on or released, or held by someone else.
async fn pump_once(
    ctx: &Context,
    (job, lock, prefix): (&str, &str, &str),
    holder: Option<&[u8]>,
) -> Result<(), String> {
    let mut kv = ctx.client.kv_client();
    let opts = GetOptions::new().with_prefix().with_limit(1).with_sort(SortTarget::Key, SortOrder::Ascend);
    let resp = etcron_common::etcd::request("queue_head", kv.get(prefix, Some(opts))).await.map_err(|e| match e {
        EtcdError::Timeout => "reading the queue timed out".to_owned(),
        EtcdError::Failed(e) => e.to_string(),
    })?;
    let held_by_holder = match holder {
        Some(h) => Compare::value(lock, CompareOp::Equal, h.to_vec()),
        None => Compare::create_revision(lock, CompareOp::Equal, 0),
    };
    let Some(head) = resp.kvs().first() else {
        // Nothing waits: release the lock, unless an entry arrived meanwhile (then hand it on).
        let Some(h) = holder else { return Ok(()) };
        let txn = Txn::new()
            .when([
                Compare::value(lock, CompareOp::Equal, h.to_vec()),
                Compare::version(prefix, CompareOp::Equal, 0).with_prefix(),
            ])
            .and_then([TxnOp::delete(lock, None)]);
        let resp = etcron_common::etcd::request("queue_release", kv.txn(txn)).await.map_err(|e| match e {
            EtcdError::Timeout => "releasing the lock timed out".to_owned(),
            EtcdError::Failed(e) => e.to_string(),
        })?;
        return if resp.succeeded() || !still_held(ctx, lock, holder).await? {
            Ok(())
        } else {
            Err("an execution was queued while the lock was released".to_owned())
        };
    };
    let entry_key = head.key().to_vec();
    let Ok(entry) = serde_json::from_slice::<QueuedRun>(head.value()) else {
        tracing::error!(key = %String::from_utf8_lossy(&entry_key), "queue entry in etcd is malformed; removed");
        let _ = kv.delete(entry_key, None).await;
        return Err("a malformed entry was removed".to_owned());
    };
    let Some(lease) = *ctx.lease.borrow() else { return Err("no session to hold the lock".to_owned()) };
    let request = entry.request(now_ms());
    let put_request = TxnOp::txn(
        Txn::new().when([Compare::version(ctx.keys.job(job), CompareOp::Greater, 0)]).and_then([TxnOp::put(
            ctx.keys.trigger(job, &request_id(&entry.execution_id)),
            to_json(&request),
            None,
        )]),
    );
    // Nothing queued ahead of the head since it was read (a failover's rerun of an earlier
    // tick, queued meanwhile, goes first): the lock goes to the queue's first entry, always.
    let none_ahead = Compare::version(prefix, CompareOp::Equal, 0).with_range(entry_key.clone());
    let txn = Txn::new()
        .when([held_by_holder, Compare::version(entry_key.clone(), CompareOp::Greater, 0), none_ahead])
        .and_then([
            TxnOp::delete(entry_key, None),
            TxnOp::put(lock, to_json(&entry.execution_id), Some(PutOptions::new().with_lease(lease))),
            put_request,
        ]);
    let resp = etcron_common::etcd::request("queue_hand_over", kv.txn(txn)).await.map_err(|e| match e {
        EtcdError::Timeout => "handing the lock on timed out".to_owned(),
        EtcdError::Failed(e) => e.to_string(),
    })?;
    if resp.succeeded() {
        tracing::info!(job, execution_id = %entry.execution_id, "queued execution's turn: lock handed over");
        return Ok(());
    }
    if still_held(ctx, lock, holder).await? {
        Err("the queue's head changed meanwhile".to_owned())
    } else {
        Ok(())
    }
}

/// Whether the lock is still as `holder` says (its value, or absent for `None`).
async fn still_held(ctx: &Context, lock: &str, holder: Option<&[u8]>) -> Result<bool, String> {
    let mut kv = ctx.client.kv_client();
    let resp = etcron_common::etcd::request("queue_lock", kv.get(lock, None)).await.map_err(|e| match e {
        EtcdError::Timeout => "reading the lock timed out".to_owned(),
        EtcdError::Failed(e) => e.to_string(),
    })?;
    Ok(match (resp.kvs().first(), holder) {
        (Some(kv), Some(h)) => kv.value() == h,
        (None, None) => true,
        _ => false,
    })
}
