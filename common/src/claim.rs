//! Per-execution claims: the etcd transactions that decide which worker runs a tick, and that
//! close the claim when the execution ends.
//!
//! A claim is won by `create_revision(claim) == 0 -> put(claim)`. The claim lives on a
//! retention lease, so a won execution can never be won again whatever happens to the winner's
//! session. What says the execution is still looked after lives on the session lease: the
//! transaction also writes one `{ns}/inflight/{worker}/{batch}` key listing the executions it
//! raced for ([`InflightPut`]; one per transaction, not per claim: a batch of 100 claims writes
//! one), and an execution that runs longer than a second gets its own running marker. The
//! claim's create revision (the inflight key's too: same transaction) is the execution's
//! fencing token. The claim is closed by `mod_revision(claim) == token -> put(claim done)`, by
//! its winner (`complete`, also after the winner's session ended: a finished task's close may
//! land late) or by the loss handling (`mark_lost`, a grace period after the session ended):
//! the compare lets exactly one of them write. Concurrency locks, the job state and follow-up
//! run requests ride in the same transactions; claims and closes of different jobs can share
//! one transaction (`claim_batch`, `complete_batch`), so a burst costs etcd a few raft
//! proposals, and a fire two key revisions: the claim and its close.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::etcd::{request, EtcdError};

/// The result of a claim attempt. Never run the task on `Unknown`: the transaction may or may
/// not have committed.
#[derive(Debug)]
pub enum ClaimOutcome {
    /// The tick is ours to run. `replaced` is the lock value of the execution this one replaces
    /// (`concurrency: replace`).
    Won {
        fencing_token: i64,
        replaced: Option<Vec<u8>>,
    },
    /// `concurrency: forbid` found the job's lock held by `holder`: the tick was closed as
    /// skipped in the same transaction.
    Blocked {
        fencing_token: i64,
        holder: Vec<u8>,
    },
    Lost,
    /// The tick's pool had too few of the slots it named free, or ticks of a higher priority
    /// (or earlier time) waiting: nothing was written.
    PoolFull,
    Unknown(String),
}

impl ClaimOutcome {
    /// The outcome's name in metrics: `won`, `blocked`, `lost` or `unknown`.
    #[must_use]
    pub fn label(&self) -> &'static str {
        match self {
            Self::Won { .. } => "won",
            Self::Blocked { .. } => "blocked",
            Self::Lost => "lost",
            Self::PoolFull => "pool_full",
            Self::Unknown(_) => "unknown",
        }
    }
}

/// A job's concurrency lock, taken with the claim (`forbid` / `replace`).
#[derive(Debug, Clone)]
pub struct LockClaim {
    pub key: String,
    /// What the lock holds while this execution runs (its execution id).
    pub value: Vec<u8>,
    pub replace: bool,
    /// The claim as closed when `forbid` finds the lock held (`done`, `skipped`).
    pub blocked_claim: Vec<u8>,
    /// `concurrency: queue` with room in the queue: a lock held queues the execution instead.
    pub queue: Option<QueueClaim>,
}

/// What queuing an execution writes when its job's lock is held: its claim as `queued` (on no
/// lease: it waits as long as the runs before it take) and its queue entry.
#[derive(Debug, Clone)]
pub struct QueueClaim {
    pub queued_claim: Vec<u8>,
    pub entry_key: String,
    pub entry_value: Vec<u8>,
    /// The queue's prefix: a lock is free for a new execution only while the queue is empty
    /// (otherwise it would run ahead of the executions waiting).
    pub prefix: String,
}

/// The pool part of a claim: the slots it takes (created only while absent, on the session
/// lease), and the tick's place in the pool's queue, which must have nobody ahead of it. When
/// either fails, nothing of the claim is written.
#[derive(Debug, Clone)]
pub struct PoolClaim {
    pub slot_keys: Vec<String>,
    /// What each held slot holds (`HeldSlot`).
    pub slot_value: Vec<u8>,
    /// The tick's queue entry (`Keys::pool_wait`) and its value (`Waiting`).
    pub wait_key: String,
    pub wait_value: Vec<u8>,
    /// The pool's queue prefix: no key in `[wait_prefix, wait_key)` may exist.
    pub wait_prefix: String,
}

/// Everything a run claim writes.
#[derive(Debug, Clone)]
pub struct RunClaim {
    pub claim_key: String,
    pub claim_value: Vec<u8>,
    /// The execution's running marker: not written by the claim, but it must be absent (a run
    /// that outlasted its claim's retention still holds it).
    pub running_key: String,
    /// The lease of the inflight key and of the lock.
    pub session_lease: i64,
    /// The claim's lease: it outlives the session (see the module docs).
    pub retention_lease: i64,
    pub lock: Option<LockClaim>,
    /// Written whenever the tick is taken, run or blocked: the job state's advance, the removal
    /// of the run request that asked for this execution.
    pub extra: Vec<TxnOp>,
    /// An execution whose turn in its job's queue came: its claim holds this value (`queued`)
    /// instead of being absent, and the lock holds this execution (handed over by the run
    /// before it) or nothing (that run's session ended since).
    pub dequeued: Option<Vec<u8>>,
    /// The job's pool: its slots are taken with the claim, or the tick waits.
    pub pool: Option<PoolClaim>,
}

/// The `{ns}/inflight/{worker}/{batch}` key a claim transaction writes on the session lease:
/// the executions it raced for (a JSON list of ids).
#[derive(Debug, Clone)]
pub struct InflightPut {
    pub key: String,
    pub value: Vec<u8>,
    pub session_lease: i64,
}

impl InflightPut {
    fn op(&self) -> TxnOp {
        TxnOp::put(self.key.as_str(), self.value.clone(), Some(PutOptions::new().with_lease(self.session_lease)))
    }
}

/// Races for a claim. The claim goes on the retention lease; the inflight key and the lock on
/// the session lease: if the worker dies, those disappear, the execution counts as lost, and
/// the claim still keeps anyone from winning it again. The inflight key is written only when
/// the claim is won.
pub async fn try_claim(client: &Client, c: RunClaim, inflight: &InflightPut) -> ClaimOutcome {
    let replace = c.lock.as_ref().is_some_and(|l| l.replace);
    let locked = c.lock.is_some();
    let pooled = c.pool.is_some();
    let mut kv = client.kv_client();
    let txn = claim_txn_with(&c, Some(inflight.op()));
    let resp = match request("claim", kv.txn(txn)).await {
        Ok(resp) => resp,
        Err(EtcdError::Failed(e)) => return ClaimOutcome::Unknown(e.to_string()),
        Err(EtcdError::Timeout) => return ClaimOutcome::Unknown("claim txn timed out".to_owned()),
    };
    if !resp.succeeded() {
        return ClaimOutcome::Lost;
    }
    let Some(fencing_token) = resp.header().map(etcd_client::ResponseHeader::revision) else {
        return ClaimOutcome::Unknown("txn response without header".to_owned());
    };
    if pooled {
        return pool_outcome(resp.op_responses().into_iter().next(), locked, fencing_token);
    }
    // The first answer that is not a put's: the lock's read (`replace`) or its nested txn.
    let first = resp.op_responses().into_iter().find(|r| !matches!(r, TxnOpResponse::Put(_)));
    match (locked, replace, first) {
        (true, true, Some(TxnOpResponse::Get(get))) => {
            ClaimOutcome::Won { fencing_token, replaced: get.kvs().first().map(|kv| kv.value().to_vec()) }
        }
        (true, false, Some(TxnOpResponse::Txn(inner))) => match blocked_by(inner) {
            Some(holder) => ClaimOutcome::Blocked { fencing_token, holder },
            None => ClaimOutcome::Won { fencing_token, replaced: None },
        },
        _ => ClaimOutcome::Won { fencing_token, replaced: None },
    }
}

/// The outcome of a pool claim from the answer of its one nested transaction: the pool part
/// (or, with a `forbid` lock, the lock part holding the pool part).
fn pool_outcome(first: Option<TxnOpResponse>, locked: bool, fencing_token: i64) -> ClaimOutcome {
    let Some(TxnOpResponse::Txn(mut part)) = first else {
        return ClaimOutcome::Unknown("pool claim answered without its nested transaction".to_owned());
    };
    if locked {
        if !part.succeeded() {
            return ClaimOutcome::Blocked { fencing_token, holder: blocked_by(part).unwrap_or_default() };
        }
        match part.op_responses().into_iter().next() {
            Some(TxnOpResponse::Txn(pool)) => part = pool,
            _ => return ClaimOutcome::Unknown("pool claim answered without its pool part".to_owned()),
        }
    }
    if part.succeeded() {
        ClaimOutcome::Won { fencing_token, replaced: None }
    } else {
        ClaimOutcome::PoolFull
    }
}

/// The pool part of a claim: `run` (everything the claim writes when it runs) only while the
/// slots are free and nobody waits ahead, the slots taken with it and the tick's queue entry
/// removed; otherwise nothing (the worker queues the tick only when its view says the pool
/// is full: [`enqueue`]), so a claim that named a slot another took just before costs no entry.
fn pool_txn(pool: &PoolClaim, run: Vec<TxnOp>, session: &Option<PutOptions>) -> Txn {
    let wait = pool.wait_key.as_str();
    let mut free: Vec<Compare> =
        pool.slot_keys.iter().map(|k| Compare::create_revision(k.as_str(), CompareOp::Equal, 0)).collect();
    free.push(Compare::version(pool.wait_prefix.as_str(), CompareOp::Equal, 0).with_range(wait));
    let mut then = run;
    then.extend(pool.slot_keys.iter().map(|k| TxnOp::put(k.as_str(), pool.slot_value.clone(), session.clone())));
    then.push(TxnOp::delete(wait, None));
    Txn::new().when(free).and_then(then)
}

/// Puts a tick's entry in its pool's queue (on the waiting worker's session lease), unless it
/// is there; `Ok(false)` when it was (another waiter's).
///
/// # Errors
/// When etcd failed or did not answer.
pub async fn enqueue(client: &Client, pool: &PoolClaim, session_lease: i64) -> Result<bool, EtcdError> {
    let wait = pool.wait_key.as_str();
    let txn = Txn::new().when([Compare::create_revision(wait, CompareOp::Equal, 0)]).and_then([TxnOp::put(
        wait,
        pool.wait_value.clone(),
        Some(PutOptions::new().with_lease(session_lease)),
    )]);
    let mut kv = client.kv_client();
    Ok(request("pool_enqueue", kv.txn(txn)).await?.succeeded())
}

/// What releases the slots a claim took (`slot_keys`, created with the claim at
/// `fencing_token`): each deleted only while it is still that claim's.
#[must_use]
pub fn release_slots(slot_keys: &[String], fencing_token: i64) -> Vec<TxnOp> {
    slot_keys
        .iter()
        .map(|k| {
            TxnOp::txn(
                Txn::new()
                    .when([Compare::create_revision(k.as_str(), CompareOp::Equal, fencing_token)])
                    .and_then([TxnOp::delete(k.as_str(), None)]),
            )
        })
        .collect()
}

/// Who holds the lock when the lock part of a claim ([`lock_txn`]) did not take it (its answer
/// is the `get` of the lock, possibly one nested level down); `None` when it took the lock.
fn blocked_by(lock_part: etcd_client::TxnResponse) -> Option<Vec<u8>> {
    if lock_part.succeeded() {
        return None;
    }
    for r in lock_part.op_responses() {
        match r {
            // The lock's read comes before any extras (whose answers may be transactions too).
            TxnOpResponse::Get(g) => return Some(g.kvs().first().map(|kv| kv.value().to_vec()).unwrap_or_default()),
            TxnOpResponse::Txn(nested) => return blocked_by(nested),
            _ => {}
        }
    }
    Some(Vec::new())
}

/// The transaction of one claim: it commits (succeeds) only for the first writer of the
/// execution's key. Also the unit of a batch ([`claim_batch`]).
#[must_use]
pub fn claim_txn(c: &RunClaim) -> Txn {
    claim_txn_with(c, None)
}

/// [`claim_txn`], writing `first` (the inflight key of a claim sent alone) when it wins.
fn claim_txn_with(c: &RunClaim, first: Option<TxnOp>) -> Txn {
    let session = Some(PutOptions::new().with_lease(c.session_lease));
    let retention = Some(PutOptions::new().with_lease(c.retention_lease));
    let mut run = vec![TxnOp::put(c.claim_key.as_str(), c.claim_value.clone(), retention.clone())];
    let mut then: Vec<TxnOp> = first.into_iter().collect();
    if let Some(pool) = &c.pool {
        // Everything the claim writes when it runs (its inflight key, the lock of `forbid`,
        // the extras) waits for the slots; a pool job is never `replace` or `queue`.
        run.splice(0..0, then.drain(..));
        run.extend(c.lock.iter().map(|l| TxnOp::put(l.key.as_str(), l.value.clone(), session.clone())));
        run.extend(c.extra.iter().cloned());
        let pooled = vec![TxnOp::txn(pool_txn(pool, run, &session))];
        match &c.lock {
            None => then = pooled,
            // A tick `forbid` skips is taken too: its extras go with the skipped claim.
            Some(lock) => then.push(TxnOp::txn(lock_txn(c, lock, (pooled, c.extra.clone()), retention))),
        }
    } else {
        match &c.lock {
            None => then.append(&mut run),
            Some(lock) if lock.replace => {
                // Read the holder before overwriting it: that execution gets killed.
                then.push(TxnOp::get(lock.key.as_str(), None));
                then.append(&mut run);
                then.push(TxnOp::put(lock.key.as_str(), lock.value.clone(), session));
            }
            Some(lock) => {
                run.push(TxnOp::put(lock.key.as_str(), lock.value.clone(), session));
                then.push(TxnOp::txn(lock_txn(c, lock, (run, Vec::new()), retention)));
            }
        }
        then.extend(c.extra.iter().cloned());
    }
    // Only the first writer of this execution's key wins; a claim (kept for the retention
    // period after it was written) makes later attempts lose too, and so does a live running
    // marker, should a run outlast its claim's retention. An execution leaving its job's queue
    // takes its own `queued` claim instead.
    let claim_free = match &c.dequeued {
        Some(queued) => Compare::value(c.claim_key.as_str(), CompareOp::Equal, queued.clone()),
        None => Compare::create_revision(c.claim_key.as_str(), CompareOp::Equal, 0),
    };
    Txn::new().when([claim_free, Compare::create_revision(c.running_key.as_str(), CompareOp::Equal, 0)]).and_then(then)
}

/// The lock part of a `forbid` or `queue` claim: nothing of this job runs (for `queue`, nor
/// waits) -> take the lock with the claim (`run`); deciding inside the claim txn is what keeps
/// two workers from both seeing "idle". Something runs -> `forbid` closes the tick as skipped,
/// `queue` queues it; either says who holds the lock. An execution whose turn in the queue came
/// takes the lock handed to it, or a lock left free by a holder whose session ended.
fn lock_txn(
    c: &RunClaim,
    lock: &LockClaim,
    (run, blocked_extra): (Vec<TxnOp>, Vec<TxnOp>),
    retention: Option<PutOptions>,
) -> Txn {
    let key = lock.key.as_str();
    let held = TxnOp::get(key, None);
    let (mut free, blocked) = match &lock.queue {
        Some(q) => (
            vec![
                Compare::create_revision(key, CompareOp::Equal, 0),
                Compare::version(q.prefix.as_str(), CompareOp::Equal, 0).with_prefix(),
            ],
            vec![
                TxnOp::put(c.claim_key.as_str(), q.queued_claim.clone(), None),
                TxnOp::put(q.entry_key.as_str(), q.entry_value.clone(), None),
                held,
            ],
        ),
        None => (
            vec![Compare::create_revision(key, CompareOp::Equal, 0)],
            [vec![TxnOp::put(c.claim_key.as_str(), lock.blocked_claim.clone(), retention), held], blocked_extra]
                .concat(),
        ),
    };
    if c.dequeued.is_none() {
        return Txn::new().when(free).and_then(run).or_else(blocked);
    }
    // Its turn: the lock is this execution's (handed over), or free (the queue holds the
    // others, so only the lock is compared).
    free.truncate(1);
    let taken_over = Txn::new().when(free).and_then(run.clone()).or_else(blocked);
    Txn::new()
        .when([Compare::value(key, CompareOp::Equal, lock.value.clone())])
        .and_then(run)
        .or_else([TxnOp::txn(taken_over)])
}

/// Most claims or closes in one batch transaction: etcd refuses a transaction with more than
/// `--max-txn-ops` (128 by default) operations in a branch, and a nested transaction's own
/// operations count against what the outer one leaves.
pub const MAX_BATCH: usize = 100;

/// Claims several executions in one transaction (one raft proposal): each claim is a nested
/// transaction with its own compare, so one taken claim does not fail the others; the inflight
/// key listing them all is written once, whatever they find. The claims must not write the same
/// key twice (etcd refuses the whole transaction): at most one claim per job, and no locks.
/// One outcome per claim, in order; all won claims share the transaction's revision as their
/// fencing token (it still grows per job: a job has one claim per batch). An error is the whole
/// batch's: every outcome is unknown.
///
/// # Errors
/// [`BatchError::Refused`] when etcd refused the transaction as invalid (nothing was written:
/// send the claims one by one); [`BatchError::Failed`] when it failed or did not answer.
pub async fn claim_batch(
    client: &Client,
    claims: &[RunClaim],
    inflight: &InflightPut,
) -> Result<Vec<ClaimOutcome>, BatchError> {
    let n = claims.len();
    let ops = std::iter::once(inflight.op()).chain(claims.iter().map(|c| TxnOp::txn(claim_txn(c))));
    let txn = Txn::new().and_then(ops.collect::<Vec<_>>());
    let mut kv = client.kv_client();
    let resp = match request("claim_batch", kv.txn(txn)).await {
        Ok(r) => r,
        Err(EtcdError::Failed(e)) => return Err(BatchError::from(e)),
        Err(EtcdError::Timeout) => return Err(BatchError::Failed("claim batch txn timed out".to_owned())),
    };
    let Some(fencing_token) = resp.header().map(etcd_client::ResponseHeader::revision) else {
        return Ok((0..n).map(|_| ClaimOutcome::Unknown("txn response without header".to_owned())).collect());
    };
    let mut outcomes: Vec<ClaimOutcome> = resp
        .op_responses()
        .into_iter()
        .skip(1)
        .map(|r| match r {
            TxnOpResponse::Txn(inner) if inner.succeeded() => ClaimOutcome::Won { fencing_token, replaced: None },
            _ => ClaimOutcome::Lost,
        })
        .collect();
    outcomes.resize_with(n, || ClaimOutcome::Unknown("claim batch answered fewer claims than asked".to_owned()));
    Ok(outcomes)
}

/// Runs a claim txn; a committed one's header revision is the new key's create revision, i.e.
/// the fencing token.
async fn run_claim(client: &Client, txn: Txn) -> ClaimOutcome {
    let mut kv = client.kv_client();
    match request("claim", kv.txn(txn)).await {
        Ok(resp) if resp.succeeded() => match resp.header() {
            Some(h) => ClaimOutcome::Won { fencing_token: h.revision(), replaced: None },
            None => ClaimOutcome::Unknown("txn response without header".to_owned()),
        },
        Ok(_) => ClaimOutcome::Lost,
        Err(EtcdError::Failed(e)) => ClaimOutcome::Unknown(e.to_string()),
        Err(EtcdError::Timeout) => ClaimOutcome::Unknown("claim txn timed out".to_owned()),
    }
}

/// Claims a tick that will not run and closes it in one step (`skipped`, `missed`, `lost`
/// ledger entries): the key goes straight to the retention lease, so the tick can neither be
/// recorded twice nor claimed later. `extra` is written with it (follow-up requests, state).
pub async fn claim_done(
    client: &Client,
    claim_key: &str,
    done_value: Vec<u8>,
    retention_lease: i64,
    extra: Vec<TxnOp>,
) -> ClaimOutcome {
    let mut then = vec![TxnOp::put(claim_key, done_value, Some(PutOptions::new().with_lease(retention_lease)))];
    then.extend(extra);
    let txn = Txn::new()
        // The same rule as a run: first writer of the execution's key only.
        .when([Compare::create_revision(claim_key, CompareOp::Equal, 0)])
        .and_then(then);
    run_claim(client, txn).await
}

/// True when a claim exists: a cheap read that avoids a losing write.
pub async fn claim_exists(client: &Client, claim_key: &str) -> Result<bool, EtcdError> {
    key_exists(client, claim_key, false).await
}

/// True when any key starts with `prefix`.
pub async fn prefix_exists(client: &Client, prefix: &str) -> Result<bool, EtcdError> {
    key_exists(client, prefix, true).await
}

/// True when `key` exists (or, with `prefix`, any key under it).
pub async fn key_exists(client: &Client, key: &str, prefix: bool) -> Result<bool, EtcdError> {
    let mut kv = client.kv_client();
    let mut opts = etcd_client::GetOptions::new().with_count_only();
    if prefix {
        opts = opts.with_prefix();
    }
    Ok(request("claim_read", kv.get(key, Some(opts))).await?.count() > 0)
}

#[derive(Debug, PartialEq, Eq)]
pub enum CompleteOutcome {
    /// The claim is now `done` under the retention lease.
    Closed,
    /// Somebody else closed the claim (the loss handling recorded it `lost`), or it is gone
    /// and so is the running marker: nothing was written.
    Fenced,
}

/// Everything the close of a won claim writes.
#[derive(Debug, Clone)]
pub struct Close {
    pub claim_key: String,
    /// The claim's create revision: the fencing token.
    pub fencing_token: i64,
    /// The claim as closed (`done`, with the execution's status).
    pub done_value: Vec<u8>,
    pub running_key: String,
    /// The create revision of the execution's running marker, when it ran long enough to get
    /// one (the close deletes it; a claim past its retention is closed only while it lives).
    pub marker_revision: Option<i64>,
    /// The job's lock and the value this execution wrote into it, when it took one.
    pub lock: Option<(String, Vec<u8>)>,
    /// `concurrency: queue`: the queue's prefix. The lock is released only while the queue is
    /// empty; otherwise it stays this execution's until it hands it to the next in line.
    pub queue_prefix: Option<String>,
    /// Follow-up run requests (retry, dependents, catch-up, failover), written only by the
    /// transaction that closes the claim.
    pub extra: Vec<TxnOp>,
    /// The pool slots the claim took (released while still its own).
    pub pool_slots: Vec<String>,
    /// Sent in a transaction of its own, never in a batch: its follow-ups compare keys that
    /// another close of the same batch may write (a workflow's fan-in).
    pub alone: bool,
}

/// Marks a won claim done (fenced by the claim itself), deletes the running marker if it has
/// one, releases the job's lock if this execution still holds it, and writes the follow-ups
/// (among them, for the last open execution of its claim transaction, the inflight key's delete).
///
/// The fence is the claim as the winning transaction wrote it (`mod_revision == fencing_token`):
/// nobody else has closed it, so this close may land even after the winner's session ended (a
/// task that finished before the session was lost is then recorded as it ended, not rerun). The
/// loss handling (`mark_lost`) uses the same compare, so exactly one of the two closes the
/// claim. A claim gone after a run longer than its retention is closed only while the running
/// marker from the winning transaction still lives. Idempotent: a retry after an unknown
/// outcome finds the claim holding exactly `done_value` and reports `Closed` without writing
/// the follow-ups twice.
pub async fn complete(client: &Client, close: &Close, retention_lease: i64) -> Result<CompleteOutcome, EtcdError> {
    let mut kv = client.kv_client();
    let resp = request("close", kv.txn(close_txn(close, retention_lease))).await?;
    Ok(if resp.succeeded() { CompleteOutcome::Closed } else { close_outcome(resp.op_responses(), &close.done_value) })
}

/// Closes several claims in one transaction (one raft proposal), each a nested [`close_txn`]
/// with its own fence. The closes must not write the same key twice (etcd refuses the whole
/// transaction): no locks, and at most one close per job. One outcome per close, in order; an
/// error is the whole batch's.
///
/// # Errors
/// As [`claim_batch`].
pub async fn complete_batch(
    client: &Client,
    closes: &[Close],
    retention_lease: i64,
) -> Result<Vec<CompleteOutcome>, BatchError> {
    let ops: Vec<TxnOp> = closes.iter().map(|c| TxnOp::txn(close_txn(c, retention_lease))).collect();
    let mut kv = client.kv_client();
    let resp = match request("close_batch", kv.txn(Txn::new().and_then(ops))).await {
        Ok(r) => r,
        Err(EtcdError::Failed(e)) => return Err(BatchError::from(e)),
        Err(EtcdError::Timeout) => return Err(BatchError::Failed("close batch txn timed out".to_owned())),
    };
    let outcomes: Vec<CompleteOutcome> = resp
        .op_responses()
        .into_iter()
        .zip(closes)
        .map(|(r, close)| match r {
            TxnOpResponse::Txn(inner) if inner.succeeded() => CompleteOutcome::Closed,
            TxnOpResponse::Txn(inner) => close_outcome(inner.op_responses(), &close.done_value),
            _ => CompleteOutcome::Fenced,
        })
        .collect();
    if outcomes.len() == closes.len() {
        Ok(outcomes)
    } else {
        Err(BatchError::Failed("close batch answered fewer closes than asked".to_owned()))
    }
}

/// Why a batch transaction wrote nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// etcd refused the request as invalid (too many operations, a key written twice): each
    /// item may still be sent alone.
    Refused(String),
    /// etcd failed or did not answer: the outcome of every item is unknown.
    Failed(String),
}

impl From<etcd_client::Error> for BatchError {
    fn from(e: etcd_client::Error) -> Self {
        match &e {
            etcd_client::Error::GRpcStatus(s) if s.code() == tonic::Code::InvalidArgument => {
                Self::Refused(s.message().to_owned())
            }
            _ => Self::Failed(e.to_string()),
        }
    }
}

impl std::error::Error for BatchError {}

impl std::fmt::Display for BatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused(e) => write!(f, "etcd refused the batch: {e}"),
            Self::Failed(e) => f.write_str(e),
        }
    }
}

/// The transaction of one close (see [`complete`]); also the unit of a batch.
#[must_use]
pub fn close_txn(close: &Close, retention_lease: i64) -> Txn {
    let Close {
        claim_key,
        fencing_token,
        done_value,
        running_key,
        marker_revision,
        lock,
        queue_prefix,
        extra,
        pool_slots,
        ..
    } = close;
    let (claim_key, running_key, fencing_token) = (claim_key.as_str(), running_key.as_str(), *fencing_token);
    // A fresh retention lease: the done claim lives its full retention from now.
    let mut then = vec![TxnOp::put(claim_key, done_value.clone(), Some(PutOptions::new().with_lease(retention_lease)))];
    if marker_revision.is_some() {
        then.push(TxnOp::delete(running_key, None));
    }
    if let Some((key, value)) = lock {
        // Release the lock only if it is still ours: `replace` may have handed it on; and for
        // `queue`, only while nothing waits for it.
        let mut ours = vec![Compare::value(key.as_str(), CompareOp::Equal, value.clone())];
        ours.extend(queue_prefix.iter().map(|p| Compare::version(p.as_str(), CompareOp::Equal, 0).with_prefix()));
        then.push(TxnOp::txn(Txn::new().when(ours).and_then([TxnOp::delete(key.as_str(), None)])));
    }
    then.extend(release_slots(pool_slots, fencing_token));
    then.extend(extra.iter().cloned());
    let otherwise = match marker_revision {
        // A run longer than its claim's retention: the claim is gone, its marker still lives.
        Some(marker) => TxnOp::txn(
            Txn::new()
                .when([
                    Compare::create_revision(claim_key, CompareOp::Equal, 0),
                    Compare::create_revision(running_key, CompareOp::Equal, *marker),
                ])
                .and_then(then.clone())
                .or_else([TxnOp::get(claim_key, None)]),
        ),
        None => TxnOp::get(claim_key, None),
    };
    Txn::new()
        .when([Compare::mod_revision(claim_key, CompareOp::Equal, fencing_token)])
        .and_then(then)
        .or_else([otherwise])
}

/// The outcome of a close whose claim compare failed: the nested transaction for a claim past
/// its retention succeeded, or the claim already holds exactly what this close writes (an
/// earlier try committed), or somebody else closed it.
fn close_outcome(responses: Vec<TxnOpResponse>, done_value: &[u8]) -> CompleteOutcome {
    let read = match responses.into_iter().next() {
        Some(TxnOpResponse::Txn(inner)) if inner.succeeded() => return CompleteOutcome::Closed,
        Some(TxnOpResponse::Txn(inner)) => inner.op_responses().into_iter().next(),
        other => other,
    };
    match read {
        Some(TxnOpResponse::Get(g)) if g.kvs().first().is_some_and(|kv| kv.value() == done_value) => {
            CompleteOutcome::Closed
        }
        _ => CompleteOutcome::Fenced,
    }
}

/// How the loss handling knows an execution was the departed worker's to close.
#[derive(Debug, Clone)]
pub enum Held {
    /// Listed by the worker's inflight key: the claim counts only as its claim transaction
    /// wrote it (`value`, version 1); a claim gone or rewritten is not this worker's to close.
    Claimed { value: Vec<u8> },
    /// The worker's running marker of the execution (a run longer than a second): the claim
    /// may also be gone, its retention over during the run.
    Marked,
}

/// Closes the claim of an execution whose worker's session ended before it closed it: the
/// claim still as its winning txn wrote it (`mod_revision == fencing_token`), or
/// gone (its retention ended during a run longer than the retention, [`Held::Marked`] only), is
/// written `lost_value` with `extra` (the failover rerun). `Won` when this call wrote it, or
/// finds it holding `lost_value` (an earlier try whose answer was lost, or another survivor:
/// the record is the same); `Lost` when the worker itself closed it.
pub async fn mark_lost(
    client: &Client,
    claim_key: &str,
    fencing_token: i64,
    held: Held,
    lost_value: Vec<u8>,
    retention_lease: i64,
    extra: Vec<TxnOp>,
) -> ClaimOutcome {
    let mut then = vec![TxnOp::put(claim_key, lost_value.clone(), Some(PutOptions::new().with_lease(retention_lease)))];
    then.extend(extra);
    // As the winning transaction wrote it: nothing wrote it since (a claim taken from the
    // queue was written before, `queued`, so its create revision is older than the token).
    let mut as_won = vec![Compare::mod_revision(claim_key, CompareOp::Equal, fencing_token)];
    let gone = match held {
        Held::Claimed { value } => {
            as_won.push(Compare::value(claim_key, CompareOp::Equal, value));
            Vec::new()
        }
        Held::Marked => vec![TxnOp::txn(
            Txn::new().when([Compare::create_revision(claim_key, CompareOp::Equal, 0)]).and_then(then.clone()),
        )],
    };
    // Otherwise the claim as it is now: holding exactly `lost_value`, it was closed lost by an
    // earlier try of this close whose answer was lost (or by another survivor: the same value,
    // the same record).
    let mut otherwise = gone;
    otherwise.push(TxnOp::get(claim_key, None));
    let running = Txn::new().when(as_won).and_then(then).or_else(otherwise);
    let mut kv = client.kv_client();
    match request("claim", kv.txn(running)).await {
        Ok(resp) => {
            let won = resp.succeeded()
                || resp.op_responses().into_iter().any(|r| match r {
                    TxnOpResponse::Txn(inner) => inner.succeeded(),
                    TxnOpResponse::Get(get) => get.kvs().first().is_some_and(|kv| kv.value() == lost_value),
                    _ => false,
                });
            match (won, resp.header()) {
                (true, Some(h)) => ClaimOutcome::Won { fencing_token: h.revision(), replaced: None },
                (true, None) => ClaimOutcome::Unknown("txn response without header".to_owned()),
                (false, _) => ClaimOutcome::Lost,
            }
        }
        Err(EtcdError::Failed(e)) => ClaimOutcome::Unknown(e.to_string()),
        Err(EtcdError::Timeout) => ClaimOutcome::Unknown("claim txn timed out".to_owned()),
    }
}

/// Moves `{ns}/state/{job}` forward to `tick` (never back): an op for a claim transaction.
#[must_use]
pub fn advance_state(state_key: &str, tick_ms: etcron_model::UnixMs) -> TxnOp {
    let value = etcron_model::stored::JobState { last_tick_ms: tick_ms }.to_bytes();
    // A missing key fails a value compare, so this never creates the state: the master does
    // when the job is created, the catch-up scan when it is missing.
    TxnOp::txn(
        Txn::new()
            .when([Compare::value(state_key, CompareOp::Less, value.clone())])
            .and_then([TxnOp::put(state_key, value, None)]),
    )
}

/// Hands out leases for done claims without a grant per claim: one lease of `ttl` is reused for
/// `ttl - min_retention`, so every key attached to it lives at least `min_retention`.
///
/// The reuse is short ([`RETENTION_REUSE`]): when a lease ends etcd deletes every key on it in one
/// raft entry, and a lease that gathered minutes of claims (tens of thousands of keys at hundreds
/// of fires per second) makes that one entry, and etcd's heap while applying it, large.
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

/// How long one retention lease is handed out: claims live between `min_retention` and
/// `min_retention + RETENTION_REUSE`, and a worker grants one lease per this while it claims.
pub const RETENTION_REUSE: Duration = Duration::from_secs(30);

impl RetentionLeases {
    /// Done claims live between `min_retention` and `min_retention + reuse_for`; a worker
    /// passes [`MIN_RETENTION`] and [`RETENTION_REUSE`].
    #[must_use]
    pub fn new(client: Client, min_retention: Duration, reuse_for: Duration) -> Self {
        let min_retention = min_retention.max(MIN_RETENTION);
        Self { client, ttl: min_retention + reuse_for, reuse_for, current: Mutex::new(None) }
    }

    /// A lease that lives at least the minimum retention from now.
    pub async fn get(&self) -> Result<i64, EtcdError> {
        let mut current = self.current.lock().await;
        if let Some((id, granted)) = *current {
            if granted.elapsed() < self.reuse_for {
                return Ok(id);
            }
        }
        let granted = Instant::now();
        let ttl = i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX);
        let mut leases = self.client.lease_client();
        let resp = request("lease_grant", leases.grant(ttl, None)).await?;
        *current = Some((resp.id(), granted));
        Ok(resp.id())
    }
}

#[cfg(test)]
mod batch_error_tests {
    use super::BatchError;

    #[test]
    fn an_invalid_request_is_refused_anything_else_failed() {
        let status = |code, message: &str| etcd_client::Error::GRpcStatus(tonic::Status::new(code, message));
        let refused =
            BatchError::from(status(tonic::Code::InvalidArgument, "etcdserver: duplicate key given in txn request"));
        assert_eq!(refused, BatchError::Refused("etcdserver: duplicate key given in txn request".to_owned()));
        let failed = BatchError::from(status(tonic::Code::ResourceExhausted, "etcdserver: too many requests"));
        assert!(matches!(failed, BatchError::Failed(ref e) if e.contains("too many requests")), "{failed:?}");
    }
}
