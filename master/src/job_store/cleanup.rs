//! What goes when a job goes, and what a save leaves behind: the keys deleted with a job, the
//! executions queued for it dropped after its delete, and its oldest saved versions pruned after
//! a save.

use etcd_client::{Client, Compare, CompareOp, DeleteOptions, GetOptions, Txn, TxnOp};
use etcron_model::keys::Keys;
use etcron_model::stored::MAX_SPEC_VERSIONS;

use super::{etcd, JobStore, Outcome, Write, Written, TXN_CHANGES};

impl JobStore {
    /// Everything that goes with a job when it is deleted.
    #[must_use]
    pub fn delete_ops(&self, job: &str) -> Vec<TxnOp> {
        vec![
            TxnOp::delete(self.keys.job(job), None),
            // The catch-up state belongs to the job and goes with it.
            TxnOp::delete(self.keys.state(job), None),
            // So is the health that `recovery` notifications read.
            TxnOp::delete(self.keys.health(job), None),
            // And an operator's pause: a job created later under the name starts unpaused.
            TxnOp::delete(self.keys.paused(job), None),
            // And its saved versions: a job created later under the name starts a history.
            TxnOp::delete(self.keys.history_of(job), Some(DeleteOptions::new().with_prefix())),
            // Pending run requests (manual runs, retries, dependency runs, catch-up) must not
            // start the job, or a job of the same name created later, after the delete.
            TxnOp::delete(self.keys.job_trigger_prefix(job), Some(DeleteOptions::new().with_prefix())),
            // And its backfills (their pending requests went with the run requests).
            TxnOp::delete(self.keys.job_backfills_prefix(job), Some(DeleteOptions::new().with_prefix())),
            // And its checkpoints: a job created later under the name starts afresh.
            TxnOp::delete(self.keys.job_checkpoints_prefix(job), Some(DeleteOptions::new().with_prefix())),
            // And what its alerts remember (raised alerts, the `stale` window, silences).
            TxnOp::delete(self.keys.job_alerts_prefix(job), Some(DeleteOptions::new().with_prefix())),
            // Claims, running markers and the lock stay: they belong to executions still running
            // under worker leases, and expire with them.
        ]
    }

    /// After [`apply`](Self::apply), in the background: a save that wrote prunes the job's oldest
    /// saved versions, a delete drops the executions queued for the job.
    pub(super) fn clean_up(&self, writes: &[Write], outcomes: &[Outcome]) {
        for (w, o) in writes.iter().zip(outcomes) {
            match o {
                Ok(Written::Saved { unchanged: false, .. }) => {
                    let max_bytes = self.limits.settings.max_history_bytes_per_job;
                    tokio::spawn(prune_history(self.client.clone(), self.keys.clone(), w.job.clone(), max_bytes));
                }
                Ok(Written::Deleted { .. }) => {
                    tokio::spawn(drop_queue(self.client.clone(), self.keys.clone(), w.job.clone()));
                }
                _ => {}
            }
        }
    }
}

/// After `job` was deleted: the executions waiting in its queue (`concurrency: queue`) will not
/// run; their entries go, and so do their `queued` claims (which have no lease). Any master may,
/// at once: each claim is deleted only while it still says `queued`.
async fn drop_queue(client: Client, keys: Keys, job: String) {
    let mut kv = client.kv_client();
    let opts = GetOptions::new().with_prefix();
    let resp = match etcd("queue_list", kv.get(keys.job_queue_prefix(&job), Some(opts))).await {
        Ok(resp) => resp,
        Err(e) => {
            tracing::warn!(job, error = %e, "listing the queue of a deleted job failed: its entries and queued claims stay");
            return;
        }
    };
    let waiting = serde_json::to_vec(&etcron_model::stored::Claim::waiting()).unwrap_or_default();
    for kv_entry in resp.kvs() {
        let mut ops = vec![TxnOp::delete(kv_entry.key(), None)];
        let entry = serde_json::from_slice::<etcron_model::stored::QueuedRun>(kv_entry.value());
        if let Err(e) = &entry {
            let key = String::from_utf8_lossy(kv_entry.key());
            tracing::error!(job, %key, error = %e, "queue entry in etcd is malformed: removed, its claim (if any) stays");
        }
        if let Ok(entry) = entry {
            let claim = keys.claim(&entry.execution_id);
            ops.push(TxnOp::txn(
                Txn::new()
                    .when([Compare::value(claim.as_str(), CompareOp::Equal, waiting.clone())])
                    .and_then([TxnOp::delete(claim.as_str(), None)]),
            ));
        }
        if let Err(e) = etcd("queue_drop", kv.txn(Txn::new().and_then(ops))).await {
            tracing::warn!(job, error = %e, "dropping the queue of a deleted job failed");
            return;
        }
    }
    if !resp.kvs().is_empty() {
        tracing::info!(job, dropped = resp.kvs().len(), "deleted job: its queued executions will not run");
    }
}

/// Deletes the oldest saved versions of `job` beyond [`MAX_SPEC_VERSIONS`] or beyond
/// `max_bytes` in all ([`versions_to_prune`]; after a save; any master may, at once: deleting
/// a deleted key is harmless).
async fn prune_history(client: Client, keys: Keys, job: String, max_bytes: u64) {
    let mut kv = client.kv_client();
    // Values too, for their sizes: at most MAX_SPEC_VERSIONS of them, each within a spec's limit.
    let opts = GetOptions::new().with_prefix();
    let Ok(resp) = etcd("history_list", kv.get(keys.history_of(&job), Some(opts))).await else { return };
    let versions: Vec<(i64, u64, Vec<u8>)> =
        resp.kvs().iter().map(|kv| (kv.create_revision(), kv.value().len() as u64, kv.key().to_vec())).collect();
    let old = versions_to_prune(versions, max_bytes);
    if old.is_empty() {
        return;
    }
    tracing::debug!(job, pruned = old.len(), "old saved versions deleted (count or bytes kept per job)");
    for old in old.chunks(TXN_CHANGES) {
        let ops: Vec<TxnOp> = old.iter().map(|key| TxnOp::delete(key.clone(), None)).collect();
        if let Err(e) = etcd("history_prune", kv.txn(Txn::new().and_then(ops))).await {
            tracing::warn!(job, error = %e, "deleting old saved versions failed; the next save tries again");
            return;
        }
    }
}

/// The keys of the saved versions (create revision, size, key) to delete: the oldest, until
/// at most [`MAX_SPEC_VERSIONS`] are left holding at most `max_bytes` in all. The newest is
/// always kept.
fn versions_to_prune(mut versions: Vec<(i64, u64, Vec<u8>)>, max_bytes: u64) -> Vec<Vec<u8>> {
    versions.sort_unstable_by_key(|v| std::cmp::Reverse(v.0));
    let mut total = 0u64;
    let mut kept = 0usize;
    for (_, size, _) in &versions {
        if kept > 0 && (kept >= MAX_SPEC_VERSIONS || total + size > max_bytes) {
            break;
        }
        total += size;
        kept += 1;
    }
    versions.into_iter().skip(kept).map(|(_, _, key)| key).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_keeps_the_newest_versions_within_count_and_bytes() {
        let versions =
            |n: i64, size: u64| (1..=n).map(|rev| (rev, size, rev.to_string().into_bytes())).collect::<Vec<_>>();
        let names = |keys: Vec<Vec<u8>>| keys.into_iter().map(|k| String::from_utf8(k).unwrap()).collect::<Vec<_>>();
        // Small versions: only the count binds (the oldest 20 of 120 go).
        let pruned = names(versions_to_prune(versions(120, 10), 1 << 20));
        assert_eq!(pruned.len(), 20);
        assert!(pruned.iter().all(|k| k.parse::<i64>().unwrap() <= 20));
        // Large versions: 1000 bytes each within 3500 keeps the newest 3.
        let pruned = names(versions_to_prune(versions(10, 1000), 3500));
        assert_eq!(pruned, vec!["7", "6", "5", "4", "3", "2", "1"]);
        // The newest is kept whatever its size.
        assert!(versions_to_prune(versions(1, 9000), 100).is_empty());
        assert!(versions_to_prune(Vec::new(), 100).is_empty());
    }
}
