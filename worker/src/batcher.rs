//! Group commit of claims and closes: the claims (and closes) that come due together go to etcd
//! as one transaction, so a burst costs etcd a few raft proposals instead of two per fire.
//!
//! Each loop keeps at most `IN_FLIGHT` batch transactions outstanding; while they are, new
//! requests queue, and the next batch takes everything queued (up to `claim::MAX_BATCH`), after
//! waiting `WINDOW` for more to arrive. At a trickle a request goes alone, at once; under a burst
//! batches fill. Claims and closes of executions with a concurrency lock go alone: etcd refuses
//! a transaction that writes one key twice, and two of them can write the same lock. A batch
//! holds at most one claim (or close) per job: a claim writes the job state, a close's
//! follow-ups may write the job's spec (an `@at` job disabled) or a run request named by the
//! fencing token, which claims of one batch share. A second one waits for the next batch. If
//! etcd refuses a batch as a whole (an invalid request, never a lost race), each item is sent
//! on its own.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::Client;
use etcron_common::claim::{self, BatchError, ClaimOutcome, Close, CompleteOutcome, RunClaim, MAX_BATCH};
use tokio::sync::{mpsc, oneshot, Semaphore};

/// Batch transactions of one kind outstanding at once.
const IN_FLIGHT: usize = 2;

/// How long a batch waits for more requests after its first one: a few ms, small against the
/// claim-ahead lead (200 ms) and a task's run.
const WINDOW: Duration = Duration::from_millis(3);

/// Requests waiting for a batch (beyond it, callers wait for room: backpressure).
const QUEUE: usize = 8_192;

struct ClaimJob {
    job: String,
    claim: RunClaim,
    reply: oneshot::Sender<ClaimOutcome>,
}

struct CloseJob {
    job: String,
    close: Close,
    lease: i64,
    reply: oneshot::Sender<Result<CompleteOutcome, String>>,
}

/// The worker's claim and close batchers.
#[derive(Clone)]
pub struct Batchers {
    client: Client,
    claims: mpsc::Sender<ClaimJob>,
    closes: mpsc::Sender<CloseJob>,
}

impl std::fmt::Debug for ClaimJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimJob").field("job", &self.job).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CloseJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloseJob").field("claim_key", &self.close.claim_key).finish_non_exhaustive()
    }
}

impl Batchers {
    /// Starts both loops (they end when the last `Batchers` is dropped).
    #[must_use]
    pub fn start(client: Client) -> Self {
        let (claims, claim_rx) = mpsc::channel(QUEUE);
        let (closes, close_rx) = mpsc::channel(QUEUE);
        tokio::spawn(claim_loop(client.clone(), claim_rx));
        tokio::spawn(close_loop(client.clone(), close_rx));
        Self { client, claims, closes }
    }

    /// Races for a claim, in a batch when it can share one.
    pub async fn claim(&self, job: &str, claim: RunClaim) -> ClaimOutcome {
        if claim.lock.is_some() {
            return claim::try_claim(&self.client, claim).await;
        }
        let (reply, answer) = oneshot::channel();
        if self.claims.send(ClaimJob { job: job.to_owned(), claim, reply }).await.is_err() {
            return ClaimOutcome::Unknown("claim batcher stopped".to_owned());
        }
        answer.await.unwrap_or_else(|_| ClaimOutcome::Unknown("claim batch dropped".to_owned()))
    }

    /// Closes a claim of `job`, in a batch when it can share one.
    pub async fn complete(&self, job: &str, close: Close, lease: i64) -> Result<CompleteOutcome, String> {
        if close.lock.is_some() {
            return claim::complete(&self.client, &close, lease).await;
        }
        let (reply, answer) = oneshot::channel();
        if self.closes.send(CloseJob { job: job.to_owned(), close, lease, reply }).await.is_err() {
            return Err("close batcher stopped".to_owned());
        }
        answer.await.unwrap_or_else(|_| Err("close batch dropped".to_owned()))
    }
}

/// Takes the next batch: what `carry` holds and what arrives within `WINDOW`, up to
/// `MAX_BATCH`, skipping (into `carry`) items `admit` refuses. `None` when the channel closed.
async fn next_batch<T>(
    rx: &mut mpsc::Receiver<T>,
    carry: &mut VecDeque<T>,
    mut admit: impl FnMut(&T) -> bool,
) -> Option<Vec<T>> {
    let mut batch = Vec::new();
    let mut skipped = VecDeque::new();
    while let Some(item) = carry.pop_front() {
        if batch.len() < MAX_BATCH && admit(&item) {
            batch.push(item);
        } else {
            skipped.push_back(item);
        }
    }
    *carry = skipped;
    if batch.is_empty() {
        let item = rx.recv().await?;
        if admit(&item) {
            batch.push(item);
        } else {
            carry.push_back(item);
            return Some(batch);
        }
    }
    let deadline = tokio::time::Instant::now() + WINDOW;
    while batch.len() < MAX_BATCH {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(item)) if admit(&item) => batch.push(item),
            Ok(Some(item)) => carry.push_back(item),
            _ => break,
        }
    }
    Some(batch)
}

async fn claim_loop(client: Client, mut rx: mpsc::Receiver<ClaimJob>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut carry = VecDeque::new();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let mut jobs = HashSet::new();
        let Some(batch) = next_batch(&mut rx, &mut carry, |j: &ClaimJob| jobs.insert(j.job.clone())).await else {
            return;
        };
        if batch.is_empty() {
            continue;
        }
        let client = client.clone();
        tokio::spawn(async move {
            commit_claims(&client, batch).await;
            drop(slot);
        });
    }
}

/// One transaction for the batch; if etcd refuses it as a whole (not a lost race: an invalid
/// request), each claim is tried on its own.
async fn commit_claims(client: &Client, batch: Vec<ClaimJob>) {
    if batch.len() == 1 {
        for job in batch {
            let _ = job.reply.send(claim::try_claim(client, job.claim).await);
        }
        return;
    }
    crate::metrics::METRICS.batch_size.with_label_values(&["claim"]).observe(batch.len() as f64);
    let (claims, replies): (Vec<RunClaim>, Vec<_>) = batch.into_iter().map(|j| (j.claim, j.reply)).unzip();
    match claim::claim_batch(client, &claims).await {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                let _ = reply.send(outcome);
            }
        }
        Err(e @ BatchError::Refused(_)) => {
            tracing::warn!(error = %e, claims = claims.len(), "claiming one by one");
            for (reply, claim) in replies.into_iter().zip(claims) {
                let _ = reply.send(claim::try_claim(client, claim).await);
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(ClaimOutcome::Unknown(e.to_string()));
            }
        }
    }
}

async fn close_loop(client: Client, mut rx: mpsc::Receiver<CloseJob>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut carry = VecDeque::new();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        // One lease per batch, and one close per job: the follow-ups of two closes of one job
        // could write the same key (an `@at` job's spec).
        let (mut lease, mut jobs) = (None, HashSet::new());
        let admit = |j: &CloseJob| *lease.get_or_insert(j.lease) == j.lease && jobs.insert(j.job.clone());
        let Some(batch) = next_batch(&mut rx, &mut carry, admit).await else { return };
        if batch.is_empty() {
            continue;
        }
        let client = client.clone();
        tokio::spawn(async move {
            commit_closes(&client, batch).await;
            drop(slot);
        });
    }
}

async fn commit_closes(client: &Client, batch: Vec<CloseJob>) {
    let lease = batch[0].lease;
    if batch.len() == 1 {
        for job in batch {
            let _ = job.reply.send(claim::complete(client, &job.close, job.lease).await);
        }
        return;
    }
    crate::metrics::METRICS.batch_size.with_label_values(&["close"]).observe(batch.len() as f64);
    let (closes, replies): (Vec<Close>, Vec<_>) = batch.into_iter().map(|j| (j.close, j.reply)).unzip();
    match claim::complete_batch(client, &closes, lease).await {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                let _ = reply.send(Ok(outcome));
            }
        }
        Err(e @ BatchError::Refused(_)) => {
            tracing::warn!(error = %e, closes = closes.len(), "closing one by one");
            for (reply, close) in replies.into_iter().zip(&closes) {
                let _ = reply.send(claim::complete(client, close, lease).await);
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.to_string()));
            }
        }
    }
}
