//! Per-execution claims: the etcd transactions that decide which worker runs a tick, and that
//! close the claim when the execution ends.
//!
//! A claim is won by `create_revision(claim) == 0 -> put(claim), put(running)` under the
//! worker's session lease. The claim's create revision is the execution's fencing token. The
//! claim is closed by `create_revision(claim) == token -> put(claim done, retention lease),
//! delete(running)`: a worker whose claim vanished with its lease cannot close someone else's.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use tokio::sync::Mutex;
use tokio::time::{timeout, Instant};

use crate::etcd::REQUEST_TIMEOUT;

/// The result of a claim attempt. Never run the task on `Unknown`: the transaction may or may
/// not have committed.
#[derive(Debug)]
pub enum ClaimOutcome {
    Won { fencing_token: i64 },
    Lost,
    Unknown(String),
}

/// Races for `claim_key`. `running` is put in the same transaction under the same lease.
pub async fn try_claim(
    client: &Client,
    claim_key: &str,
    claim_value: Vec<u8>,
    running: (&str, Vec<u8>),
    session_lease: i64,
) -> ClaimOutcome {
    let lease = Some(PutOptions::new().with_lease(session_lease));
    let txn = Txn::new()
        // Only the first writer of this tick's key wins; a done claim (kept for the retention
        // period) makes later attempts lose too.
        .when([Compare::create_revision(claim_key, CompareOp::Equal, 0)])
        .and_then([
            // The claim and the running marker share the session lease: if the worker dies,
            // both disappear and the execution counts as lost.
            TxnOp::put(claim_key, claim_value, lease.clone()),
            TxnOp::put(running.0, running.1, lease),
        ]);
    run_claim(client, txn).await
}

/// Runs a claim txn; a committed one's header revision is the new key's create revision, i.e.
/// the fencing token.
async fn run_claim(client: &Client, txn: Txn) -> ClaimOutcome {
    let mut kv = client.kv_client();
    match timeout(REQUEST_TIMEOUT, kv.txn(txn)).await {
        Ok(Ok(resp)) if resp.succeeded() => match resp.header() {
            Some(h) => ClaimOutcome::Won { fencing_token: h.revision() },
            None => ClaimOutcome::Unknown("txn response without header".to_owned()),
        },
        Ok(Ok(_)) => ClaimOutcome::Lost,
        Ok(Err(e)) => ClaimOutcome::Unknown(e.to_string()),
        Err(_) => ClaimOutcome::Unknown("claim txn timed out".to_owned()),
    }
}

/// Claims a tick that will not run and closes it in one step (`skipped`, `missed`, `lost`
/// ledger entries): the key goes straight to the retention lease, so the tick can neither be
/// recorded twice nor claimed later.
pub async fn claim_done(client: &Client, claim_key: &str, done_value: Vec<u8>, retention_lease: i64) -> ClaimOutcome {
    let txn = Txn::new()
        // The same rule as a run: first writer of the tick's key only.
        .when([Compare::create_revision(claim_key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(claim_key, done_value, Some(PutOptions::new().with_lease(retention_lease)))]);
    run_claim(client, txn).await
}

/// True when a claim for this key already exists (a cheap read that avoids a losing write).
pub async fn claim_exists(client: &Client, claim_key: &str) -> Result<bool, String> {
    let mut kv = client.kv_client();
    let opts = etcd_client::GetOptions::new().with_count_only();
    match timeout(REQUEST_TIMEOUT, kv.get(claim_key, Some(opts))).await {
        Ok(Ok(resp)) => Ok(resp.count() > 0),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("claim read timed out".to_owned()),
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum CompleteOutcome {
    /// The claim is now `done` under the retention lease.
    Closed,
    /// The claim is no longer ours (lease lost, key gone or re-claimed): nothing was written.
    Fenced,
}

/// Marks a won claim done (fenced by `fencing_token`) and deletes the running marker.
pub async fn complete(
    client: &Client,
    claim_key: &str,
    fencing_token: i64,
    done_value: Vec<u8>,
    running_key: &str,
    retention_lease: i64,
) -> Result<CompleteOutcome, String> {
    let txn = Txn::new()
        // Still our claim: created by our winning txn, not by a later claimant.
        .when([Compare::create_revision(claim_key, CompareOp::Equal, fencing_token)])
        .and_then([
            // Moving the key to the retention lease keeps it past the session, so no late or
            // clock-skewed worker can claim this tick again.
            TxnOp::put(claim_key, done_value, Some(PutOptions::new().with_lease(retention_lease))),
            TxnOp::delete(running_key, None),
        ]);
    let mut kv = client.kv_client();
    match timeout(REQUEST_TIMEOUT, kv.txn(txn)).await {
        Ok(Ok(resp)) if resp.succeeded() => Ok(CompleteOutcome::Closed),
        Ok(Ok(_)) => Ok(CompleteOutcome::Fenced),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("complete txn timed out".to_owned()),
    }
}

/// Hands out leases for done claims without a grant per claim: one lease of `ttl` is reused for
/// `ttl - min_retention`, so every key attached to it lives at least `min_retention`.
pub struct RetentionLeases {
    client: Client,
    ttl: Duration,
    reuse_for: Duration,
    current: Mutex<Option<(i64, Instant)>>,
}

impl std::fmt::Debug for RetentionLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetentionLeases").field("ttl", &self.ttl).finish()
    }
}

/// Shortest retention of a done claim.
pub const MIN_RETENTION: Duration = Duration::from_secs(600);

impl RetentionLeases {
    /// Done claims live between `min_retention` and `1.5 * min_retention`.
    #[must_use]
    pub fn new(client: Client, min_retention: Duration) -> Self {
        let min_retention = min_retention.max(MIN_RETENTION);
        let reuse_for = min_retention / 2;
        Self { client, ttl: min_retention + reuse_for, reuse_for, current: Mutex::new(None) }
    }

    /// A lease that lives at least the minimum retention from now.
    pub async fn get(&self) -> Result<i64, String> {
        let mut current = self.current.lock().await;
        if let Some((id, granted)) = *current {
            if granted.elapsed() < self.reuse_for {
                return Ok(id);
            }
        }
        let granted = Instant::now();
        let ttl = i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX);
        let mut leases = self.client.lease_client();
        match timeout(REQUEST_TIMEOUT, leases.grant(ttl, None)).await {
            Ok(Ok(resp)) => {
                *current = Some((resp.id(), granted));
                Ok(resp.id())
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("retention lease grant timed out".to_owned()),
        }
    }
}
