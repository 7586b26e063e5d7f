//! The chain of a backfill (`{ns}/backfills/{job}/{id}`): each item's first run, once it is
//! settled (closed, recorded not run, lost, or taken by another request of the same execution),
//! writes the run request of the item `parallel` places after it, in the same transaction, so
//! each item is requested exactly once and a backfill keeps at most `parallel` runs going.
//! The master writes the first `parallel` requests with the backfill itself. A cancelled
//! backfill (its key rewritten, version > 1) requests nothing more.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use etcron_common::etcd::EtcdError;
use etcron_model::backfill::Backfill;
use etcron_model::record::RunParams;
use etcron_model::record::TriggerKind;
use etcron_model::{now_ms, UnixMs};

use crate::context::Context;
use crate::metrics::METRICS;
use crate::timing::fire::{to_json, Fire};

/// Tries to read a backfill before the chain is reported broken.
const READ_TRIES: u32 = 10;

/// The backfill at `key`, from the cache or etcd (retried while etcd fails); `None` when it
/// does not exist (deleted with its job) or cannot be read.
async fn read(ctx: &Context, key: &str) -> Option<Arc<Backfill>> {
    if let Some(b) = ctx.backfills.get(key) {
        return Some(b);
    }
    for attempt in 1..=READ_TRIES {
        let mut kv = ctx.client.kv_client();
        match etcron_common::etcd::request("backfill_get", kv.get(key, None)).await {
            Ok(resp) => {
                let kv = resp.kvs().first()?;
                return match serde_json::from_slice::<Backfill>(kv.value()) {
                    Ok(b) => {
                        let b = Arc::new(b);
                        ctx.backfills.put(key, b.clone());
                        Some(b)
                    }
                    Err(e) => {
                        tracing::error!(key, error = %e, "backfill in etcd is malformed; its chain stops here");
                        None
                    }
                };
            }
            Err(EtcdError::Failed(e)) => tracing::warn!(key, attempt, error = %e, "reading a backfill failed"),
            Err(EtcdError::Timeout) => tracing::warn!(key, attempt, "reading a backfill timed out"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    None
}

/// The operation requesting the item after this one, for the transaction that settles this
/// item's first run (`trigger: backfill`; its retries and reruns are not items). Nothing for
/// other runs, for the last items, or once the backfill is gone.
pub(crate) async fn next_op(ctx: &Context, job: &str, trigger: TriggerKind, params: &RunParams) -> Option<TxnOp> {
    let backfill_ref = params.backfill.as_ref().filter(|_| trigger == TriggerKind::Backfill)?;
    let key = ctx.keys.backfill(job, &backfill_ref.id);
    let Some(backfill) = read(ctx, &key).await else {
        tracing::error!(job, backfill = %backfill_ref.id, index = backfill_ref.index, "backfill could not be read: its chain stops at this item");
        METRICS.backfill_chain_broken.inc();
        return None;
    };
    let next = backfill.next_index(usize::try_from(backfill_ref.index).ok()?)?;
    Some(request_op(ctx, &backfill, (job, &backfill_ref.id), next, now_ms()))
}

/// The run request of item `index`, written only while the job exists and the backfill is
/// as created (not cancelled).
fn request_op(ctx: &Context, backfill: &Backfill, (job, id): (&str, &str), index: usize, now: UnixMs) -> TxnOp {
    let request = backfill.request((job, id), index, now);
    let key = ctx.keys.trigger(job, &Backfill::request_id(id, index));
    TxnOp::txn(
        Txn::new()
            .when([
                Compare::version(ctx.keys.job(job), CompareOp::Greater, 0),
                Compare::version(ctx.keys.backfill(job, id), CompareOp::Equal, 1),
            ])
            .and_then([TxnOp::put(key, to_json(&request), None)]),
    )
}

/// An item whose execution somebody else claimed first (another backfill's request for the
/// same attempt, or the live schedule): its request is consumed and the chain goes on, in one
/// transaction that applies only while the request exists, so only one worker does it and
/// never after the request's own claim consumed it.
pub(crate) async fn taken_elsewhere(ctx: &Context, fire: &Fire) {
    let Some(request_key) = fire.request_key.as_deref().filter(|_| fire.trigger == TriggerKind::Backfill) else {
        return;
    };
    // Usually the request's own claim consumed it already: a read, not a write, says so.
    if let Ok(false) = etcron_common::claim::key_exists(&ctx.client, request_key, false).await {
        return;
    }
    let mut ops = vec![TxnOp::delete(request_key, None)];
    ops.extend(next_op(ctx, &fire.id.job, fire.trigger, &fire.params).await);
    let txn = Txn::new().when([Compare::version(request_key, CompareOp::Greater, 0)]).and_then(ops);
    for _ in 0..READ_TRIES {
        let mut kv = ctx.client.kv_client();
        match etcron_common::etcd::request("backfill_taken", kv.txn(txn.clone())).await {
            Ok(_) => return,
            Err(EtcdError::Failed(e)) => {
                tracing::warn!(execution_id = %fire.id, error = %e, "consuming a backfill request failed")
            }
            Err(EtcdError::Timeout) => {
                tracing::warn!(execution_id = %fire.id, "consuming a backfill request timed out")
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tracing::error!(execution_id = %fire.id, "backfill request taken elsewhere could not be consumed: its chain stops at this item");
    METRICS.backfill_chain_broken.inc();
}
