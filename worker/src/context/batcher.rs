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
//! Claims queue by their worker's rank for the tick (first-ranked, second, later): a batch takes
//! the first-ranked ones first, so under a burst a worker spends its transactions on the ticks
//! it is meant to win. A ranked-later claim is checked against the watch of claims
//! ([`crate::cluster::taken`]) as its batch is formed, not only when it was queued: one the first-ranked
//! worker took meanwhile is answered [`Raced::SeenTaken`] without a write (a race nobody could
//! win, otherwise lost in etcd at the cost of the transaction's work on every side).
//!
//! Starts before bookkeeping: while this worker's claims are backlogged (more queued than the
//! next few batches take, [`BACKLOG`]), closes wait — for at most [`CLOSE_DEFER_MAX`] from the moment the backlog
//! began, so a backlog that lasts does not hold them longer. A close's transaction, the follow-ups
//! it writes, the watch events they cause on every worker and the record after it are work a
//! burst's late ticks would otherwise queue behind. Closes that release a concurrency lock go
//! alone and never wait: the job's next tick depends on them.
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
use etcron_common::etcd::EtcdError;
use etcron_model::keys::{ExecutionId, Keys};
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::cluster::taken::Taken;

/// Batch transactions of one kind outstanding at once.
const IN_FLIGHT: usize = 2;

/// How long a batch waits for more requests after its first one: a few ms, small against the
/// claim-ahead lead (200 ms) and a task's run.
const WINDOW: Duration = Duration::from_millis(3);

/// Requests waiting for a batch (beyond it, callers wait for room: backpressure).
const QUEUE: usize = 8_192;

/// Longest closes wait for a backlog of claims to clear, counted from when it began: a finished
/// run left unclosed is one the loss handling would rerun should the worker die meanwhile.
pub const CLOSE_DEFER_MAX: Duration = Duration::from_secs(2);

/// Claims queued beyond what the next few rounds of batches take: a backlog. A tick shared by
/// a few hundred jobs (each worker first-ranked for a third of them) does not make one; a
/// burst of thousands does.
const BACKLOG: usize = 4 * MAX_BATCH;

/// When this worker's claim backlog began (`None`: no backlog), as the claim loop publishes it.
type Backlog = tokio::sync::watch::Receiver<Option<tokio::time::Instant>>;

struct ClaimJob {
    id: ExecutionId,
    claim: RunClaim,
    /// This worker's rank for the execution (0: first).
    rank: usize,
    reply: oneshot::Sender<Raced>,
}

/// Why a close handed to the batcher has no outcome: it may or may not have been applied, and
/// the caller tries again (a retry of an applied close finds it applied).
#[derive(Debug, thiserror::Error)]
pub enum CloseError {
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    /// The close's batch failed as a whole; every close in it shares this message.
    #[error("close batch failed: {0}")]
    Batch(String),
    #[error("retention lease unavailable: {0}")]
    NoRetention(EtcdError),
    #[error("close batcher stopped")]
    Stopped,
    #[error("close batch dropped")]
    Dropped,
}

/// How a claim handed to the batcher ended.
pub enum Raced {
    /// Sent to etcd (alone or in a batch): what etcd answered, and the execution's share of
    /// its transaction's inflight key.
    Sent(ClaimOutcome, Hold),
    /// Not sent: by the time its batch was formed, the watch of claims had seen the claim
    /// written by another transaction (a lost race that cost nothing).
    SeenTaken,
}

/// Rank queues: first-ranked, second-ranked, and every later rank together.
const RANKS: usize = 3;

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
    if tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    let mut kv = client.kv_client();
    // In the worker's task group, as all its work: a simulated worker's crash ends it, and its
    // request goes through that worker's admission limiter, not the process's.
    etcron_common::task::spawn(async move {
        let why = match etcron_common::etcd::request("delete_inflight", kv.delete(key.as_str(), None)).await {
            Ok(_) => return,
            Err(EtcdError::Failed(e)) => e.to_string(),
            Err(EtcdError::Timeout) => "timed out".to_owned(),
        };
        tracing::debug!(key, error = %why, "deleting an inflight key failed; it goes with the session");
    });
}

/// An execution's share of its claim transactions' inflight keys: one, or two when its claim
/// was sent again (the first transaction, given up with its outcome unknown, may still be
/// applied and be the one that won). Released once: by the close ([`Hold::close_ops`] +
/// [`Hold::closed`]), or when the last clone is dropped.
#[derive(Clone)]
pub struct Hold(Vec<Arc<HoldInner>>);

struct HoldInner {
    batch: Arc<Batch>,
    released: AtomicBool,
    /// The close transaction carries this key's delete ([`Hold::close_ops`]).
    delete_sent: AtomicBool,
}

impl Drop for HoldInner {
    fn drop(&mut self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            self.batch.release(false);
        }
    }
}

impl Hold {
    /// A hold on nothing (an execution no claim transaction of this worker lists).
    #[must_use]
    pub fn none() -> Self {
        Self(Vec::new())
    }

    fn on(batch: &Arc<Batch>) -> Self {
        let inner =
            HoldInner { batch: batch.clone(), released: AtomicBool::new(false), delete_sent: AtomicBool::new(false) };
        Self(vec![Arc::new(inner)])
    }

    /// This hold and `other`'s together: a claim sent again keeps the first transaction's key
    /// until the execution is settled, since the loss handling reads the token from either.
    #[must_use]
    pub fn with(mut self, other: Hold) -> Self {
        self.0.extend(other.0);
        self
    }

    /// The deletes of the inflight keys this execution is the last open one of, for its close
    /// transaction: its close and the keys' removal land together, so a key never goes while
    /// an execution it lists is unclosed.
    #[must_use]
    pub fn close_ops(&self) -> Vec<TxnOp> {
        let last = |inner: &&Arc<HoldInner>| {
            !inner.released.load(Ordering::Acquire) && inner.batch.open.load(Ordering::Acquire) == 1
        };
        self.0
            .iter()
            .filter(last)
            .map(|inner| {
                inner.delete_sent.store(true, Ordering::Release);
                TxnOp::delete(inner.batch.key.as_str(), None)
            })
            .collect()
    }

    /// The execution is settled (closed, or found not to be this worker's); `committed` when
    /// its close transaction, carrying [`Hold::close_ops`], committed.
    pub fn closed(&self, committed: bool) {
        for inner in &self.0 {
            if !inner.released.swap(true, Ordering::AcqRel) {
                inner.batch.release(committed && inner.delete_sent.load(Ordering::Acquire));
            }
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
        InflightPut { key, value: etcron_model::keys::inflight_value(ids), session_lease }
    }
}

struct CloseJob {
    job: String,
    close: Close,
    lease: i64,
    reply: oneshot::Sender<Result<CompleteOutcome, CloseError>>,
}

/// The worker's claim and close batchers.
#[derive(Clone)]
pub struct Batchers {
    client: Client,
    namer: Arc<Namer>,
    backlog: Backlog,
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
    pub fn start(client: Client, keys: Keys, worker_id: String, taken: Arc<Taken>) -> Self {
        let (claims, claim_rx) = mpsc::channel(QUEUE);
        let (closes, close_rx) = mpsc::channel(QUEUE);
        let namer = Arc::new(Namer { keys, worker_id, seq: AtomicU64::new(0) });
        let (backlog_tx, backlog) = tokio::sync::watch::channel(None);
        etcron_common::task::spawn(claim_loop(client.clone(), namer.clone(), taken, claim_rx, backlog_tx));
        etcron_common::task::spawn(close_loop(client.clone(), close_rx, backlog.clone()));
        Self { client, namer, backlog, claims, closes }
    }

    /// Races for a claim this worker ranks `rank` for, in a batch when it can share one. The
    /// [`Hold`] keeps the claim transaction's inflight key while the execution is open.
    pub async fn claim(&self, id: &ExecutionId, claim: RunClaim, rank: usize) -> Raced {
        if claim.lock.is_some() || claim.pool.is_some() {
            // Boxed: a batched claim's future does not carry a lone transaction's.
            let (outcome, hold) = Box::pin(claim_alone(&self.client, &self.namer, id, claim)).await;
            return Raced::Sent(outcome, hold);
        }
        let (reply, answer) = oneshot::channel();
        if self.claims.send(ClaimJob { id: id.clone(), claim, rank, reply }).await.is_err() {
            return Raced::Sent(ClaimOutcome::Unknown("claim batcher stopped".to_owned()), Hold::none());
        }
        answer
            .await
            .unwrap_or_else(|_| Raced::Sent(ClaimOutcome::Unknown("claim batch dropped".to_owned()), Hold::none()))
    }

    /// Waits while this worker's claims are backlogged (at most [`CLOSE_DEFER_MAX`] from when
    /// the backlog began): a ranked-later claim queued now would only wait behind the
    /// first-ranked ones, and by the time they are sent most of its ticks are taken.
    pub async fn after_backlog(&self) -> bool {
        after_claim_backlog(&mut self.backlog.clone()).await
    }

    /// Closes a claim of `job`, in a batch when it can share one.
    pub async fn complete(&self, job: &str, close: Close, lease: i64) -> Result<CompleteOutcome, CloseError> {
        if close.lock.is_some() || !close.pool_slots.is_empty() || close.alone {
            return Ok(Box::pin(claim::complete(&self.client, &close, lease)).await?);
        }
        let (reply, answer) = oneshot::channel();
        if self.closes.send(CloseJob { job: job.to_owned(), close, lease, reply }).await.is_err() {
            return Err(CloseError::Stopped);
        }
        answer.await.unwrap_or(Err(CloseError::Dropped))
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

async fn claim_loop(
    client: Client,
    namer: Arc<Namer>,
    taken: Arc<Taken>,
    mut rx: mpsc::Receiver<ClaimJob>,
    backlog: tokio::sync::watch::Sender<Option<tokio::time::Instant>>,
) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut queued = RankQueues::default();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        if !queued.fill(&mut rx).await {
            return;
        }
        let batch = queued.take(|claim_key| taken.contains(claim_key));
        // More left than the next rounds of batches take: a backlog (kept from when it began).
        let backlogged = queued.len() >= BACKLOG;
        backlog.send_if_modified(|since| match (backlogged, since.is_some()) {
            (true, false) => since.replace(tokio::time::Instant::now()).is_none(),
            (false, true) => since.take().is_some(),
            _ => false,
        });
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

/// Claims waiting for a batch, one queue per rank ([`RANKS`]), each in arrival order.
#[derive(Default)]
struct RankQueues {
    queues: [VecDeque<ClaimJob>; RANKS],
}

impl RankQueues {
    fn len(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }

    fn push(&mut self, job: ClaimJob) {
        self.queues[job.rank.min(RANKS - 1)].push_back(job);
    }

    /// Waits for a claim when none is queued, then `WINDOW` for more (a batch's worth at
    /// most), then takes what else has arrived, up to `QUEUE` held here (beyond it, callers
    /// wait: backpressure). `false` when the channel closed with nothing queued.
    async fn fill(&mut self, rx: &mut mpsc::Receiver<ClaimJob>) -> bool {
        if self.len() == 0 {
            let Some(job) = rx.recv().await else { return false };
            self.push(job);
            let deadline = tokio::time::Instant::now() + WINDOW;
            while self.len() < MAX_BATCH {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(job)) => self.push(job),
                    _ => break,
                }
            }
        }
        while self.len() < QUEUE {
            match rx.try_recv() {
                Ok(job) => self.push(job),
                Err(_) => break,
            }
        }
        true
    }

    /// The next batch: up to `MAX_BATCH` claims, first-ranked first, at most one per job (a
    /// second one keeps its place for the next batch). A claim `seen_taken` (its key written by
    /// another transaction, as the watch of claims saw) is answered [`Raced::SeenTaken`] here.
    /// An execution leaving its job's queue owns a `queued` claim already: it is always sent.
    fn take(&mut self, seen_taken: impl Fn(&str) -> bool) -> Vec<ClaimJob> {
        let mut batch = Vec::new();
        let mut jobs = HashSet::default();
        for queue in &mut self.queues {
            let mut kept = Vec::new();
            while batch.len() < MAX_BATCH {
                let Some(job) = queue.pop_front() else { break };
                if job.claim.dequeued.is_none() && seen_taken(&job.claim.claim_key) {
                    let _ = job.reply.send(Raced::SeenTaken);
                } else if jobs.insert(job.id.job.clone()) {
                    batch.push(job);
                } else {
                    kept.push(job);
                }
            }
            for job in kept.into_iter().rev() {
                queue.push_front(job);
            }
        }
        batch
    }
}

/// A claim in a transaction of its own (its inflight key is written only if it wins).
async fn claim_alone(client: &Client, namer: &Namer, id: &ExecutionId, claim: RunClaim) -> (ClaimOutcome, Hold) {
    let inflight = namer.put(&[id], claim.session_lease);
    let outcome = claim::try_claim(client, claim, &inflight).await;
    let written = !matches!(outcome, ClaimOutcome::Lost | ClaimOutcome::PoolFull);
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
            let (outcome, hold) = claim_alone(client, namer, &job.id, job.claim).await;
            let _ = job.reply.send(Raced::Sent(outcome, hold));
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
                let _ = reply.send(Raced::Sent(outcome, hold));
            }
        }
        Err(e @ BatchError::Refused(_)) => {
            tracing::warn!(error = %e, claims = claims.len(), "claiming one by one");
            for ((id, reply), claim) in rest.into_iter().zip(claims) {
                let (outcome, hold) = claim_alone(client, namer, &id, claim).await;
                let _ = reply.send(Raced::Sent(outcome, hold));
            }
        }
        Err(e) => {
            let outcomes: Vec<ClaimOutcome> = rest.iter().map(|_| ClaimOutcome::Unknown(e.to_string())).collect();
            let holds = hold_open(client, inflight.key, &outcomes, true);
            for (((_, reply), outcome), hold) in rest.into_iter().zip(outcomes).zip(holds) {
                let _ = reply.send(Raced::Sent(outcome, hold));
            }
        }
    }
}

/// Waits while the claim backlog lasts, until [`CLOSE_DEFER_MAX`] after it began; `false`
/// when there was none to wait for.
async fn after_claim_backlog(backlog: &mut Backlog) -> bool {
    let Some(since) = *backlog.borrow_and_update() else { return false };
    let until = since + CLOSE_DEFER_MAX;
    if tokio::time::Instant::now() >= until {
        return false;
    }
    let _ = tokio::time::timeout_at(until, backlog.wait_for(Option::is_none)).await;
    true
}

async fn close_loop(client: Client, mut rx: mpsc::Receiver<CloseJob>, mut backlog: Backlog) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut carry = VecDeque::new();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        if after_claim_backlog(&mut backlog).await {
            crate::metrics::METRICS.closes_deferred.inc();
        }
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
            let _ = job.reply.send(claim::complete(client, &job.close, job.lease).await.map_err(CloseError::from));
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
                let _ = reply.send(claim::complete(client, close, lease).await.map_err(CloseError::from));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(CloseError::Batch(e.to_string())));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcron_model::keys::Tick;

    fn job(name: &str, at: i64, rank: usize, dequeued: bool) -> (ClaimJob, oneshot::Receiver<Raced>) {
        let (reply, answer) = oneshot::channel();
        let claim = RunClaim {
            claim_key: format!("claims/{name}/{at}"),
            claim_value: Vec::new(),
            running_key: format!("running/{name}/{at}"),
            session_lease: 1,
            retention_lease: 2,
            lock: None,
            extra: Vec::new(),
            dequeued: dequeued.then(Vec::new),
            pool: None,
        };
        (ClaimJob { id: ExecutionId::new(name, Tick::Scheduled(at)), claim, rank, reply }, answer)
    }

    fn keys(batch: &[ClaimJob]) -> Vec<&str> {
        batch.iter().map(|j| j.claim.claim_key.as_str()).collect()
    }

    #[test]
    fn a_batch_takes_first_ranked_claims_first_and_answers_claims_seen_taken_without_sending_them() {
        let mut queued = RankQueues::default();
        let mut answers = Vec::new();
        for (name, rank) in [("later", 2), ("second", 1), ("first", 0), ("taken", 1), ("also-first", 0), ("deep", 7)] {
            let (j, a) = job(name, 1, rank, false);
            queued.push(j);
            answers.push((name, a));
        }
        let (j, dequeued_answer) = job("dequeued", 1, 1, true);
        queued.push(j);
        let seen = |key: &str| key.starts_with("claims/taken/") || key.starts_with("claims/dequeued/");
        let batch = queued.take(seen);
        assert_eq!(
            keys(&batch),
            [
                "claims/first/1",
                "claims/also-first/1",
                "claims/second/1",
                "claims/dequeued/1",
                "claims/later/1",
                "claims/deep/1"
            ],
            "rank 0, then 1, then every later rank, each in arrival order; a dequeued claim is always sent"
        );
        assert_eq!(queued.len(), 0);
        for (name, mut answer) in answers {
            let got = answer.try_recv();
            if name == "taken" {
                assert!(matches!(got, Ok(Raced::SeenTaken)), "{name}");
            } else {
                assert!(got.is_err(), "{name} is in the batch, not answered yet");
            }
        }
        drop(batch);
        assert!(dequeued_answer.blocking_recv().is_err(), "sent, then dropped with the batch");
    }

    #[test]
    fn a_batch_holds_one_claim_per_job_and_at_most_max_batch_the_rest_keep_their_places() {
        let mut queued = RankQueues::default();
        let mut answers = Vec::new();
        for at in 0..3 {
            let (j, a) = job("same", at, 1, false);
            queued.push(j);
            answers.push(a);
        }
        for i in 0..MAX_BATCH + 5 {
            let (j, a) = job(&format!("job-{i}"), 0, 0, false);
            queued.push(j);
            answers.push(a);
        }
        let first = queued.take(|_| false);
        assert_eq!(first.len(), MAX_BATCH, "full of first-ranked claims");
        assert!(first.iter().all(|j| j.rank == 0));
        let second = queued.take(|_| false);
        assert_eq!(
            keys(&second),
            [
                "claims/job-100/0",
                "claims/job-101/0",
                "claims/job-102/0",
                "claims/job-103/0",
                "claims/job-104/0",
                "claims/same/0"
            ],
            "the remaining first-ranked, then one claim of `same`"
        );
        assert_eq!(keys(&queued.take(|_| false)), ["claims/same/1"], "the next of `same`, in its order");
        assert_eq!(keys(&queued.take(|_| false)), ["claims/same/2"]);
        assert!(queued.take(|_| false).is_empty());
    }
}
