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
//!
//! Every claim transaction writes one `{ns}/inflight/{worker}/{batch}` key on the session
//! lease, listing the executions it raced for: what the loss handling reads if the session ends
//! before they are closed. [`Hold`] counts a batch's executions still open; the close of the
//! last one deletes the key in its own transaction.

use std::collections::VecDeque;

use etcron_common::hash::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, TxnOp};
use etcron_common::claim::{self, BatchError, ClaimOutcome, Close, CompleteOutcome, InflightPut, RunClaim, MAX_BATCH};
use etcron_common::keys::{ExecutionId, Keys};
use tokio::sync::{mpsc, oneshot, Semaphore};

/// Batch transactions of one kind outstanding at once.
const IN_FLIGHT: usize = 2;

/// How long a batch waits for more requests after its first one: a few ms, small against the
/// claim-ahead lead (200 ms) and a task's run.
const WINDOW: Duration = Duration::from_millis(3);

/// Requests waiting for a batch (beyond it, callers wait for room: backpressure).
const QUEUE: usize = 8_192;

struct ClaimJob {
    id: ExecutionId,
    claim: RunClaim,
    reply: oneshot::Sender<(ClaimOutcome, Hold)>,
}

/// One claim transaction's inflight key and how many of its executions are still open (won,
/// or of unknown outcome, and not yet closed).
struct Batch {
    client: Client,
    key: String,
    open: AtomicUsize,
}

impl Batch {
    /// One execution fewer; deletes the key when none is left, unless `deleted` (its close
    /// transaction deleted it already).
    fn release(&self, deleted: bool) {
        if self.open.fetch_sub(1, Ordering::AcqRel) == 1 && !deleted {
            delete_key(&self.client, self.key.clone());
        }
    }
}

/// Deletes an inflight key none of whose executions is open any more (best effort: one left
/// behind goes with the session, and the loss handling finds its executions closed).
fn delete_key(client: &Client, key: String) {
    // A hold dropped outside the runtime (the process exiting): the key goes with the session.
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
    let mut kv = client.kv_client();
    runtime.spawn(async move {
        let why = match etcron_common::etcd::request("delete_inflight", kv.delete(key.as_str(), None)).await {
            Ok(Ok(_)) => return,
            Ok(Err(e)) => e.to_string(),
            Err(_) => "timed out".to_owned(),
        };
        tracing::debug!(key, error = %why, "deleting an inflight key failed; it goes with the session");
    });
}

/// An execution's share of its claim transaction's inflight key. Released once: by the close
/// ([`Hold::close_op`] + [`Hold::closed`]), or when the last clone is dropped.
#[derive(Clone)]
pub struct Hold(Arc<HoldInner>);

struct HoldInner {
    batch: Option<Arc<Batch>>,
    released: AtomicBool,
}

impl Drop for HoldInner {
    fn drop(&mut self) {
        if let (Some(batch), false) = (&self.batch, self.released.swap(true, Ordering::AcqRel)) {
            batch.release(false);
        }
    }
}

impl Hold {
    /// A hold on nothing (an execution no claim transaction of this worker lists).
    #[must_use]
    pub fn none() -> Self {
        Self(Arc::new(HoldInner { batch: None, released: AtomicBool::new(true) }))
    }

    fn on(batch: &Arc<Batch>) -> Self {
        Self(Arc::new(HoldInner { batch: Some(batch.clone()), released: AtomicBool::new(false) }))
    }

    /// The delete of the inflight key, for the close transaction of the batch's last open
    /// execution: its close and the key's removal land together, so the key never goes while
    /// an execution it lists is unclosed.
    #[must_use]
    pub fn close_op(&self) -> Option<TxnOp> {
        let batch = self.0.batch.as_ref()?;
        (!self.0.released.load(Ordering::Acquire) && batch.open.load(Ordering::Acquire) == 1)
            .then(|| TxnOp::delete(batch.key.as_str(), None))
    }

    /// The execution is settled (closed, or found not to be this worker's); `deleted` when
    /// its close transaction carried [`Hold::close_op`] and committed.
    pub fn closed(&self, deleted: bool) {
        if let (Some(batch), false) = (&self.0.batch, self.0.released.swap(true, Ordering::AcqRel)) {
            batch.release(deleted);
        }
    }
}

/// Names claim transactions' inflight keys: this process's session lease and a sequence.
struct Namer {
    keys: Keys,
    worker_id: String,
    seq: AtomicU64,
}

impl Namer {
    fn put(&self, ids: &[&ExecutionId], session_lease: i64) -> InflightPut {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let key = self.keys.inflight(&self.worker_id, &format!("{session_lease:x}-{seq}"));
        InflightPut { key, value: etcron_common::keys::inflight_value(ids), session_lease }
    }
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
    namer: Arc<Namer>,
    claims: mpsc::Sender<ClaimJob>,
    closes: mpsc::Sender<CloseJob>,
}

impl std::fmt::Debug for ClaimJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimJob").field("id", &self.id).finish_non_exhaustive()
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
    pub fn start(client: Client, keys: Keys, worker_id: String) -> Self {
        let (claims, claim_rx) = mpsc::channel(QUEUE);
        let (closes, close_rx) = mpsc::channel(QUEUE);
        let namer = Arc::new(Namer { keys, worker_id, seq: AtomicU64::new(0) });
        etcron_common::task::spawn(claim_loop(client.clone(), namer.clone(), claim_rx));
        etcron_common::task::spawn(close_loop(client.clone(), close_rx));
        Self { client, namer, claims, closes }
    }

    /// Races for a claim, in a batch when it can share one. The [`Hold`] keeps the claim
    /// transaction's inflight key while the execution is open.
    pub async fn claim(&self, id: &ExecutionId, claim: RunClaim) -> (ClaimOutcome, Hold) {
        if claim.lock.is_some() {
            return claim_alone(&self.client, &self.namer, id, claim).await;
        }
        let (reply, answer) = oneshot::channel();
        if self.claims.send(ClaimJob { id: id.clone(), claim, reply }).await.is_err() {
            return (ClaimOutcome::Unknown("claim batcher stopped".to_owned()), Hold::none());
        }
        answer.await.unwrap_or_else(|_| (ClaimOutcome::Unknown("claim batch dropped".to_owned()), Hold::none()))
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

async fn claim_loop(client: Client, namer: Arc<Namer>, mut rx: mpsc::Receiver<ClaimJob>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut carry = VecDeque::new();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let mut jobs = HashSet::default();
        let Some(batch) = next_batch(&mut rx, &mut carry, |j: &ClaimJob| jobs.insert(j.id.job.clone())).await else {
            return;
        };
        if batch.is_empty() {
            continue;
        }
        let (client, namer) = (client.clone(), namer.clone());
        etcron_common::task::spawn(async move {
            commit_claims(&client, &namer, batch).await;
            drop(slot);
        });
    }
}

/// A claim in a transaction of its own (its inflight key is written only if it wins).
async fn claim_alone(client: &Client, namer: &Namer, id: &ExecutionId, claim: RunClaim) -> (ClaimOutcome, Hold) {
    let inflight = namer.put(&[id], claim.session_lease);
    let outcome = claim::try_claim(client, claim, &inflight).await;
    let written = !matches!(outcome, ClaimOutcome::Lost);
    let holds = hold_open(client, inflight.key, std::slice::from_ref(&outcome), written);
    (outcome, holds.into_iter().next().unwrap_or_else(Hold::none))
}

/// The holds of a claim transaction's executions: one per won (or unknown) outcome; when there
/// is none and the key may have been `written`, it is deleted at once.
fn hold_open(client: &Client, key: String, outcomes: &[ClaimOutcome], written: bool) -> Vec<Hold> {
    let open = outcomes.iter().filter(|o| matches!(o, ClaimOutcome::Won { .. } | ClaimOutcome::Unknown(_))).count();
    if open == 0 && written {
        delete_key(client, key.clone());
    }
    let batch = Arc::new(Batch { client: client.clone(), key, open: AtomicUsize::new(open) });
    outcomes
        .iter()
        .map(|o| match o {
            ClaimOutcome::Won { .. } | ClaimOutcome::Unknown(_) => Hold::on(&batch),
            _ => Hold::none(),
        })
        .collect()
}

/// One transaction for the batch; if etcd refuses it as a whole (not a lost race: an invalid
/// request), each claim is tried on its own.
async fn commit_claims(client: &Client, namer: &Namer, batch: Vec<ClaimJob>) {
    if batch.len() == 1 {
        for job in batch {
            let _ = job.reply.send(claim_alone(client, namer, &job.id, job.claim).await);
        }
        return;
    }
    crate::metrics::METRICS.batch_size.with_label_values(&["claim"]).observe(batch.len() as f64);
    let ids: Vec<&ExecutionId> = batch.iter().map(|j| &j.id).collect();
    let inflight = namer.put(&ids, batch[0].claim.session_lease);
    let (claims, rest): (Vec<RunClaim>, Vec<_>) = batch.into_iter().map(|j| (j.claim, (j.id, j.reply))).unzip();
    match claim::claim_batch(client, &claims, &inflight).await {
        Ok(outcomes) => {
            let holds = hold_open(client, inflight.key, &outcomes, true);
            for (((_, reply), outcome), hold) in rest.into_iter().zip(outcomes).zip(holds) {
                let _ = reply.send((outcome, hold));
            }
        }
        Err(e @ BatchError::Refused(_)) => {
            tracing::warn!(error = %e, claims = claims.len(), "claiming one by one");
            for ((id, reply), claim) in rest.into_iter().zip(claims) {
                let _ = reply.send(claim_alone(client, namer, &id, claim).await);
            }
        }
        Err(e) => {
            let outcomes: Vec<ClaimOutcome> = rest.iter().map(|_| ClaimOutcome::Unknown(e.to_string())).collect();
            let holds = hold_open(client, inflight.key, &outcomes, true);
            for (((_, reply), outcome), hold) in rest.into_iter().zip(outcomes).zip(holds) {
                let _ = reply.send((outcome, hold));
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
        let (mut lease, mut jobs) = (None, HashSet::default());
        let admit = |j: &CloseJob| *lease.get_or_insert(j.lease) == j.lease && jobs.insert(j.job.clone());
        let Some(batch) = next_batch(&mut rx, &mut carry, admit).await else { return };
        if batch.is_empty() {
            continue;
        }
        let client = client.clone();
        etcron_common::task::spawn(async move {
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
