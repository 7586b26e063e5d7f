//! The cluster compacts etcd itself when etcd does not: one master at a time — the holder of
//! `{ns}/compactor`, a key on a `LEASE_TTL` lease created only if absent — compacts every
//! `every` to the newest revision etcd had at least `retention` ago (as the storage poller saw
//! it), unless etcd already compacted past that revision on its own.
//!
//! The rule it keeps: never compact history workers still read. They read a few seconds to a
//! minute back (a departed worker's inflight keys and running markers as of the revision before
//! its session ended; a registration's delete missed while re-listing; job states at load),
//! so the retention may not go under `MIN_RETENTION`. A watch that falls behind a compaction
//! re-lists anyway.

use std::sync::LazyLock;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use etcron_common::etcd::{request, EtcdError};
use etcron_common::metrics::counter_vec;
use etcron_model::keys::Keys;
use prometheus::IntCounterVec;

use crate::duties::etcd_storage::StorageWatch;

/// The shortest history the compactor keeps.
pub const MIN_RETENTION: Duration = Duration::from_secs(300);
/// Defaults: compact every 5 minutes, keeping 10 minutes of history.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(300);
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(600);
/// The election lease: a master that dies hands the job on within this.
const LEASE_TTL: i64 = 15;
/// Keep-alives and election attempts.
const TICK: Duration = Duration::from_secs(5);

static COMPACTIONS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "etcron_etcd_compactions_total",
        "Compactions of etcd by this master's compactor, by outcome (compacted, skipped_already: etcd had compacted past the target itself, failed).",
        &["outcome"],
    )
});

/// When and how far back the compactor compacts.
#[derive(Debug, Clone, Copy)]
pub struct CompactorSettings {
    /// Zero turns the compactor off.
    pub every: Duration,
    pub retention: Duration,
}

/// Starts the compactor (a no-op when `every` is zero).
pub fn start(client: Client, keys: &Keys, storage: StorageWatch, settings: CompactorSettings, me: String) {
    if settings.every.is_zero() {
        tracing::info!("etcd compactor off (--compact-every 0)");
        return;
    }
    for outcome in ["compacted", "skipped_already", "failed"] {
        COMPACTIONS.with_label_values(&[outcome]);
    }
    let key = keys.compactor();
    tokio::spawn(async move {
        loop {
            match campaign(&client, &key, &me).await {
                Some(lease) => {
                    tracing::info!(key, "this master compacts etcd");
                    lead(&client, lease, &storage, settings).await;
                    tracing::warn!(key, "this master no longer compacts etcd (its lease ended)");
                }
                None => tokio::time::sleep(TICK).await,
            }
        }
    });
}

/// Takes `{ns}/compactor` if nobody holds it; the lease when this master does.
async fn campaign(client: &Client, key: &str, me: &str) -> Option<i64> {
    let mut leases = client.lease_client();
    let lease = request("lease_grant", leases.grant(LEASE_TTL, None)).await.ok()?.id();
    let txn = Txn::new().when([Compare::create_revision(key, CompareOp::Equal, 0)]).and_then([TxnOp::put(
        key,
        format!("{{\"master\":{me:?}}}"),
        Some(PutOptions::new().with_lease(lease)),
    )]);
    let mut kv = client.kv_client();
    match request("compactor_campaign", kv.txn(txn)).await {
        Ok(resp) if resp.succeeded() => Some(lease),
        _ => {
            let _ = request("lease_revoke", leases.revoke(lease)).await;
            None
        }
    }
}

/// Keeps the lease alive and compacts every `settings.every` until the lease is lost.
async fn lead(client: &Client, lease: i64, storage: &StorageWatch, settings: CompactorSettings) {
    let mut leases = client.lease_client();
    let Ok((mut keeper, mut answers)) = request("lease_keep_alive", leases.keep_alive(lease)).await else {
        return;
    };
    let mut next = tokio::time::Instant::now() + settings.every;
    loop {
        if keeper.keep_alive().await.is_err() {
            return;
        }
        match tokio::time::timeout(TICK, answers.message()).await {
            Ok(Ok(Some(answer))) if answer.ttl() > 0 => {}
            _ => return,
        }
        if tokio::time::Instant::now() >= next {
            next += settings.every;
            compact_once(client, storage, settings.retention).await;
        }
        tokio::time::sleep(TICK).await;
    }
}

/// One compaction to the revision etcd had `retention` ago, unless etcd is past it already.
async fn compact_once(client: &Client, storage: &StorageWatch, retention: Duration) {
    let Some(revision) = storage.revision_before(retention) else {
        tracing::debug!("no revision old enough to compact to yet");
        return;
    };
    // A read at the target fails once etcd compacted past it (its own auto-compaction).
    let mut kv = client.kv_client();
    let probe = kv.get("/", Some(GetOptions::new().with_revision(revision).with_count_only()));
    match request("compactor_probe", probe).await {
        Err(EtcdError::Failed(e)) if e.to_string().contains("compacted") => {
            COMPACTIONS.with_label_values(&["skipped_already"]).inc();
            tracing::debug!(revision, "etcd compacted past the target itself");
            return;
        }
        Ok(_) => {}
        _ => {
            COMPACTIONS.with_label_values(&["failed"]).inc();
            return;
        }
    }
    match request("compact", kv.compact(revision, None)).await {
        Ok(_) => {
            COMPACTIONS.with_label_values(&["compacted"]).inc();
            tracing::info!(revision, retention_secs = retention.as_secs(), "compacted etcd");
        }
        Err(EtcdError::Failed(e)) if e.to_string().contains("compacted") => {
            COMPACTIONS.with_label_values(&["skipped_already"]).inc();
        }
        Err(EtcdError::Failed(e)) => {
            COMPACTIONS.with_label_values(&["failed"]).inc();
            tracing::warn!(revision, error = %e, "compacting etcd failed");
        }
        Err(EtcdError::Timeout) => {
            COMPACTIONS.with_label_values(&["failed"]).inc();
            tracing::warn!(revision, "compacting etcd timed out");
        }
    }
}
