//! A notification target's `silence`: after a delivery of an event of a job, that event of that
//! job is not sent to the target again until the window ends (it is recorded `silenced`). The
//! window is a key, `{ns}/alerts/{job}/silence/{target}/{event}` (`Silence`), opened by a
//! compare-and-set on what was read, so of workers notifying at once exactly one opens it and
//! sends. When etcd cannot tell, the notification is sent: a repeated page is better than a
//! lost one.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use etcron_model::keys::Keys;
use etcron_model::notify::Delivery;
use etcron_model::spec::alerts::Silence;
use etcron_model::{now_ms, UnixMs};

use crate::metrics::METRICS;

/// Compare-and-set rounds lost to other workers before the notification is sent regardless.
const TRIES: u32 = 3;

/// Whether `delivery` falls in an open silence window of its target (`target`: the target's
/// name, or its position); when not, this worker has opened a new window with it.
pub(crate) async fn silenced(
    client: &Client,
    keys: &Keys,
    delivery: &Delivery,
    target: &str,
    window: Duration,
) -> bool {
    let key = keys.silence(&delivery.job, target, delivery.event.as_str());
    let mut kv = client.kv_client();
    for _ in 0..TRIES {
        let now = now_ms();
        let guard = match etcron_common::etcd::request("silence_read", kv.get(key.as_str(), None)).await {
            Ok(resp) => match resp.kvs().first() {
                Some(found) => {
                    let open = serde_json::from_slice::<Silence>(found.value()).is_ok_and(|s| s.until_ms > now);
                    if open {
                        return true;
                    }
                    Compare::mod_revision(key.as_str(), CompareOp::Equal, found.mod_revision())
                }
                None => Compare::version(key.as_str(), CompareOp::Equal, 0),
            },
            _ => return unknown(delivery),
        };
        let mine = Silence { until_ms: now.saturating_add(ms(window)), delivery: delivery.id.clone() };
        let value = serde_json::to_vec(&mine).unwrap_or_default();
        let txn = Txn::new().when([guard]).and_then([TxnOp::put(key.as_str(), value, None)]);
        match etcron_common::etcd::request("silence_open", kv.txn(txn)).await {
            Ok(resp) if resp.succeeded() => return false,
            // Another worker moved the window meanwhile: read it again.
            Ok(_) => {}
            _ => return unknown(delivery),
        }
    }
    tracing::warn!(delivery = %delivery.id, "the silence window kept changing under this worker: sending");
    METRICS.silence_unknown.inc();
    false
}

fn unknown(delivery: &Delivery) -> bool {
    tracing::warn!(delivery = %delivery.id, "etcd did not answer about the target's silence window: sending");
    METRICS.silence_unknown.inc();
    false
}

fn ms(d: Duration) -> UnixMs {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
