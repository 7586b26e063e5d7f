//! Pauses that end by themselves (`until`): every master looks at the pauses once a second and
//! deletes those whose time has come, each only at the revision it read, so a pause written
//! again meanwhile (a new reason, a new `until`, or none) is never deleted. Several masters
//! racing to delete the same pause is harmless: one transaction wins, the others find it
//! changed. Workers learn of the end as of any resume, through their watch of `{ns}/paused/`.
//! Only the pause ends: a spec that says `enabled: false` stays disabled.

use std::sync::LazyLock;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp};
use etcron_common::etcd::{request, EtcdError};
use etcron_common::metrics::counter;
use etcron_model::keys::{Key, Keys};
use etcron_model::now_ms;
use etcron_model::stored::Pause;
use prometheus::IntCounter;

/// How often the pauses are looked at: a pause ends within about this of its `until`.
pub const EVERY: Duration = Duration::from_secs(1);

static ENDED: LazyLock<IntCounter> =
    LazyLock::new(|| counter("etcron_pauses_ended_total", "Pauses this master ended because their `until` had come."));

/// Starts the loop.
pub fn start(client: Client, keys: Keys) {
    LazyLock::force(&ENDED);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            end_due(&client, &keys).await;
        }
    });
}

/// Deletes the pauses whose `until` has come; errors are logged and tried again next time.
async fn end_due(client: &Client, keys: &Keys) {
    let mut kv = client.kv_client();
    let listed = request("list_pauses", kv.get(keys.paused_prefix(), Some(GetOptions::new().with_prefix()))).await;
    let resp = match listed {
        Ok(resp) => resp,
        Err(EtcdError::Failed(e)) => return tracing::warn!(error = %e, "listing pauses failed; retrying"),
        Err(EtcdError::Timeout) => return tracing::warn!("listing pauses timed out; retrying"),
    };
    let now = now_ms();
    for item in resp.kvs() {
        let Some(Key::Paused(job)) = keys.parse(item.key()) else { continue };
        // A value that does not parse is a pause without an end (fail safe).
        let Ok(pause) = Pause::from_bytes(item.value()) else { continue };
        if !pause.expired(now) {
            continue;
        }
        let txn = Txn::new()
            .when([Compare::mod_revision(item.key().to_vec(), CompareOp::Equal, item.mod_revision())])
            .and_then([TxnOp::delete(item.key().to_vec(), None)]);
        match request("txn", kv.txn(txn)).await {
            Ok(r) if r.succeeded() => {
                ENDED.inc();
                tracing::info!(job = %job, by = pause.by.as_deref().unwrap_or(""), "pause ended at its until; job resumed");
            }
            Ok(_) => tracing::debug!(job = %job, "pause changed before its end; left as it is"),
            Err(EtcdError::Failed(e)) => tracing::warn!(job = %job, error = %e, "ending a pause failed; retrying"),
            Err(EtcdError::Timeout) => tracing::warn!(job = %job, "ending a pause timed out; retrying"),
        }
    }
}
