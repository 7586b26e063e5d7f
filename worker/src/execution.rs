//! One fire of a job on this worker: take a capacity slot, race for the claim (in rendezvous
//! order), run the task, close the claim under the retention lease, log the record. Also the
//! registry of running executions that kill commands and lease loss act on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::metrics::METRICS;
use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use etcron_common::claim::{self, ClaimOutcome, CompleteOutcome, LockClaim, RetentionLeases, RunClaim};
use etcron_common::job::{Concurrency, JobSpec, Misfire, Mode, OnWorkerLoss, Task};
use etcron_common::keys::{ExecutionId, Keys, KillTarget, Part, Tick};
use etcron_common::model::{
    labels_match, Claim, ClaimState, ExecutionRecord, KillCommand, RunningExecution, Status, TriggerKind,
    TriggerRequest,
};
use etcron_common::{now_ms, rfc3339_ms, UnixMs};
use tokio::sync::{oneshot, watch, Semaphore};
use tracing::Instrument;

use crate::config::Config;
use crate::executor::{self, Ending, Finished, ShellJob, StopReason};
use crate::http_task::{self, HttpJob};
use crate::log_sink::LogSink;
use crate::membership::Members;
use etcron_common::store::{RecordWrite, WriteMode};

/// How long a task must run before its running marker is updated with pid and fencing token.
const RUNNING_DETAIL_AFTER: Duration = Duration::from_secs(1);

/// Everything an execution needs, shared by all of them.
pub struct Context {
    pub client: Client,
    pub keys: Keys,
    pub config: Config,
    pub hostname: String,
    pub members: Members,
    /// The current session lease; `None` while the worker has no session.
    pub lease: watch::Receiver<Option<i64>>,
    pub retention: RetentionLeases,
    pub registry: Registry,
    /// Group commit of claims and closes.
    pub batchers: crate::batcher::Batchers,
    /// Claims seen written (a watch): a ranked-later worker looks here before reading etcd.
    pub taken: Arc<crate::taken::Taken>,
    /// Closes of finished executions not yet taken by etcd: shutdown waits for them.
    pub closing: Pending,
    pub capacity: Arc<Semaphore>,
    pub sink: LogSink,
    pub jobs: JobTable,
    /// Schedule ticks whose fate this worker could not learn while etcd failed it.
    pub unsettled: crate::catchup::Unsettled,
    /// Webhook notifications of final records (queued here, delivered in the background).
    pub notifier: crate::notifier::Notifier,
    /// Output of the running shell tasks, followable while they run.
    pub live: Arc<crate::live_output::LiveOutputs>,
    /// The worker's variables that `task_env_passthrough` names, read once at start: the base of
    /// every shell task's environment.
    pub task_env: std::collections::BTreeMap<String, String>,
    /// Where masters reach the live output, and the token they present; advertised in the
    /// worker's registration.
    pub output_endpoint: Option<OutputEndpoint>,
}

/// A count of pieces of work in progress that shutdown waits for (`enter` until the guard drops).
#[derive(Debug, Default)]
pub struct Pending {
    count: watch::Sender<usize>,
}

/// Ends one piece of pending work when dropped.
pub struct PendingGuard<'a>(&'a Pending);

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.0.count.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Pending {
    pub fn enter(&self) -> PendingGuard<'_> {
        self.count.send_modify(|n| *n += 1);
        PendingGuard(self)
    }

    #[must_use]
    pub fn count(&self) -> usize {
        *self.count.borrow()
    }

    /// Waits until nothing is pending, at most `limit`; `false` when something still is.
    pub async fn wait_empty(&self, limit: Duration) -> bool {
        let mut rx = self.count.subscribe();
        let empty = tokio::time::timeout(limit, rx.wait_for(|n| *n == 0)).await.is_ok();
        empty
    }
}

/// The live output server as advertised to masters.
#[derive(Debug, Clone)]
pub struct OutputEndpoint {
    pub url: String,
    pub token: String,
}

/// How long after a tick nobody may have claimed it before it is recorded `missed`.
pub const MISSED_AFTER: Duration = Duration::from_secs(5);

/// One execution to race for: a schedule tick's (part), or a run request's.
#[derive(Debug, Clone)]
pub struct Fire {
    pub id: ExecutionId,
    pub spec: Arc<JobSpec>,
    /// The job key's mod revision the spec was read at.
    pub job_revision: i64,
    pub scheduled_ms: UnixMs,
    pub trigger: TriggerKind,
    /// Record the tick as `skipped` with this reason instead of running it.
    pub skip: Option<String>,
    /// The run request (`{ns}/trigger/...`) this fire answers; consumed with the claim.
    pub request_key: Option<String>,
    pub parent: Option<ExecutionId>,
    /// Catch-up ticks to run after this one.
    pub then: Vec<UnixMs>,
}

/// A job as the scheduler last saw it.
#[derive(Debug, Clone)]
pub struct JobRef {
    pub spec: Arc<JobSpec>,
    pub mod_revision: i64,
    /// When this worker started scheduling the job's current timing (schedule and timezone):
    /// no tick of it is due before, so a sweep of an outage never reaches further back.
    pub timing_since_ms: UnixMs,
}

/// The scheduler's jobs, readable by executions (failover needs the lost run's job spec).
#[derive(Debug, Default)]
pub struct JobTable {
    inner: std::sync::RwLock<HashMap<String, JobRef>>,
}

impl JobTable {
    #[must_use]
    pub fn get(&self, job: &str) -> Option<JobRef> {
        self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(job).cloned()
    }
    /// The names of all jobs.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner).keys().cloned().collect()
    }

    pub fn set(&self, job: &str, entry: Option<JobRef>) {
        let mut inner = self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        match entry {
            Some(e) => inner.insert(job.to_owned(), e),
            None => inner.remove(job),
        };
    }
}

struct RunningHandle {
    job: String,
    fencing_token: i64,
    stop: watch::Sender<Option<StopReason>>,
}

struct KillEntry {
    job: String,
    target: KillTarget,
    mod_revision: i64,
    reason: String,
}

impl KillEntry {
    fn describe(&self) -> String {
        if self.reason.is_empty() {
            format!("kill command at revision {}", self.mod_revision)
        } else {
            format!("kill command at revision {} ({})", self.mod_revision, self.reason)
        }
    }
}

#[derive(Default)]
struct RegistryInner {
    running: HashMap<ExecutionId, RunningHandle>,
    /// Live kill commands by key, so an execution registered after the command still sees it.
    kills: HashMap<Vec<u8>, KillEntry>,
}

/// Running executions of this worker and the kill commands that apply to them.
pub struct Registry {
    inner: Mutex<RegistryInner>,
    count: watch::Sender<usize>,
}

impl Default for Registry {
    fn default() -> Self {
        Self { inner: Mutex::default(), count: watch::channel(0).0 }
    }
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, RegistryInner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a won execution; a kill command written after its claim stops it at once.
    fn register(&self, id: &ExecutionId, fencing_token: i64) -> watch::Receiver<Option<StopReason>> {
        let (stop, rx) = watch::channel(None);
        let mut inner = self.lock();
        if let Some(kill) = inner.kills.values().find(|k| kill_applies(k, id, fencing_token)) {
            let _ = stop.send(Some(StopReason::Killed(kill.describe())));
        }
        inner.running.insert(id.clone(), RunningHandle { job: id.job.clone(), fencing_token, stop });
        let n = inner.running.len();
        drop(inner);
        self.count.send_replace(n);
        rx
    }

    fn deregister(&self, id: &ExecutionId) {
        let mut inner = self.lock();
        inner.running.remove(id);
        let n = inner.running.len();
        drop(inner);
        self.count.send_replace(n);
    }

    #[must_use]
    pub fn running(&self) -> usize {
        *self.count.borrow()
    }

    /// Records a kill command and stops every execution it applies to.
    pub fn apply_kill(&self, key: Vec<u8>, job: String, target: KillTarget, mod_revision: i64, reason: String) {
        let mut inner = self.lock();
        let entry = KillEntry { job, target, mod_revision, reason };
        for (id, handle) in &inner.running {
            if kill_applies(&entry, id, handle.fencing_token) && handle.stop.borrow().is_none() {
                tracing::info!(execution_id = %id, job = %handle.job, kill_revision = mod_revision, "kill command: stopping execution");
                let _ = handle.stop.send(Some(StopReason::Killed(entry.describe())));
            }
        }
        inner.kills.insert(key, entry);
    }

    pub fn remove_kill(&self, key: &[u8]) {
        self.lock().kills.remove(key);
    }

    /// Forgets all kill commands (before applying a fresh snapshot).
    pub fn clear_kills(&self) {
        self.lock().kills.clear();
    }

    /// Stops every running execution.
    pub fn stop_all(&self, reason: &StopReason) {
        let inner = self.lock();
        for handle in inner.running.values() {
            if handle.stop.borrow().is_none() {
                let _ = handle.stop.send(Some(reason.clone()));
            }
        }
    }

    /// Waits until nothing runs, or `limit` passes; true when empty.
    pub async fn wait_empty(&self, limit: Duration) -> bool {
        let mut rx = self.count.subscribe();
        let drained = tokio::time::timeout(limit, rx.wait_for(|n| *n == 0)).await.is_ok();
        drained
    }

    /// A receiver of the running count.
    #[must_use]
    pub fn watch_count(&self) -> watch::Receiver<usize> {
        self.count.subscribe()
    }
}

/// A kill applies to executions of its job claimed before it was written: ordering by etcd
/// revision needs no clock agreement between master and worker.
fn kill_applies(kill: &KillEntry, id: &ExecutionId, fencing_token: i64) -> bool {
    kill.job == id.job
        && fencing_token < kill.mod_revision
        && match &kill.target {
            KillTarget::All => true,
            KillTarget::Execution(target) => target == id,
        }
}

/// Runs one fire end to end; see the module docs.
pub async fn run_fire(ctx: Arc<Context>, fire: Fire) {
    METRICS.ticks_due.with_label_values(&[fire.trigger.as_str()]).inc();
    let span = tracing::info_span!("execution", job = %fire.id.job, execution_id = %fire.id, worker_id = %ctx.config.worker_id);
    race_and_run(ctx, fire).instrument(span).await;
}

/// Why this worker did not race for a fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NotRaced {
    Selector,
    Capacity,
    NoLease,
    Unknown,
}

async fn race_and_run(ctx: Arc<Context>, fire: Fire) {
    let id = fire.id.clone();
    let claim_key = ctx.keys.claim(&id);
    let me = ctx.config.worker_id.as_str();
    // A broadcast job's part belongs to one worker: no race, nobody else's business.
    let own_part = match &id.part {
        Part::Worker(w) if w == me => true,
        Part::Worker(_) => return,
        _ => false,
    };
    let rank = if own_part { 0 } else { ctx.members.rank(me, &claim_key) };
    if let Some(reason) = fire.skip.clone() {
        // One worker records the skipped tick; the claim makes it exactly one.
        if rank == 0 {
            record_not_run(&ctx, &fire, Status::Skipped, reason).await;
        }
        return;
    }
    if !labels_match(&ctx.config.labels, &fire.spec.selector) {
        tracing::trace!("selector does not match this worker's labels");
        METRICS.not_raced.with_label_values(&["selector"]).inc();
        watch_for_miss(&ctx, &fire, rank, NotRaced::Selector);
        return;
    }
    if rank > 0 {
        // Give the workers ranked before this one a head start, then look before writing. No
        // capacity slot is taken before: a tick that is taken already must not make this
        // worker look full. A tick raced ahead of its time can space the ranks out over the
        // lead at no cost to its start, so fewer rank-0 claims are still in flight when the
        // next rank looks.
        let ahead_ms = u64::try_from(fire.scheduled_ms - now_ms()).unwrap_or(0);
        let step = ctx.config.claim_stagger.max(Duration::from_millis(ahead_ms / 4));
        tokio::time::sleep(step * u32::try_from(rank).unwrap_or(u32::MAX)).await;
        if already_taken(&ctx, &fire, &claim_key).await {
            return;
        }
    }
    let permit = match ctx.capacity.clone().try_acquire_owned() {
        Ok(p) => p,
        Err(_) if fire.request_key.is_some() => match wait_for_capacity(&ctx, &fire).await {
            Some(p) => p,
            None => return,
        },
        Err(_) if own_part => {
            tracing::warn!(capacity = ctx.config.capacity, "worker at capacity: this worker's broadcast run is missed");
            METRICS.not_raced.with_label_values(&["capacity"]).inc();
            let reason = format!("worker {me} was at capacity ({} running)", ctx.config.capacity);
            record_not_run(&ctx, &fire, Status::Missed, reason).await;
            return;
        }
        Err(_) => {
            tracing::warn!(capacity = ctx.config.capacity, "worker at capacity: leaving this tick to other workers");
            METRICS.not_raced.with_label_values(&["capacity"]).inc();
            watch_for_miss(&ctx, &fire, rank, NotRaced::Capacity);
            return;
        }
    };
    let Some(lease) = *ctx.lease.borrow() else {
        tracing::warn!("no session lease: not claiming");
        METRICS.not_raced.with_label_values(&["no_lease"]).inc();
        ctx.unsettled.note(&fire);
        watch_for_miss(&ctx, &fire, rank, NotRaced::NoLease);
        return;
    };
    let claimed_ms = now_ms();
    let worker_id = ctx.config.worker_id.clone();
    let claim_value = Claim {
        worker_id: worker_id.clone(),
        execution_id: id.clone(),
        attempt: id.attempt,
        state: ClaimState::Running,
        status: None,
    };
    let mut running = RunningExecution {
        worker_id: worker_id.clone(),
        execution_id: id.clone(),
        pid: None,
        started_at: rfc3339_ms(claimed_ms),
        fencing_token: None,
        trigger: Some(fire.trigger),
        scheduled_ms: Some(fire.scheduled_ms),
    };
    let running_key = ctx.keys.running(&id);
    let lock_key = ctx.keys.lock(&id.job, &id.part);
    let lock_value = to_json(&id);
    // The claim outlives the session on the retention lease: a won attempt is never won again.
    let retention_lease = match ctx.retention.get().await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "retention lease unavailable: not claiming");
            METRICS.not_raced.with_label_values(&["no_lease"]).inc();
            ctx.unsettled.note(&fire);
            watch_for_miss(&ctx, &fire, 0, NotRaced::Unknown);
            return;
        }
    };
    let lock = match fire.spec.concurrency {
        Concurrency::Allow => None,
        policy => {
            let blocked = Claim {
                state: ClaimState::Done,
                status: Some(Status::Skipped),
                worker_id: worker_id.clone(),
                ..claim_value.clone()
            };
            Some(LockClaim {
                key: lock_key.clone(),
                value: lock_value.clone(),
                replace: policy == Concurrency::Replace,
                blocked_claim: to_json(&blocked),
            })
        }
    };
    let uses_lock = lock.is_some();
    let claim_started = std::time::Instant::now();
    let outcome = ctx
        .batchers
        .claim(
            &id.job,
            RunClaim {
                claim_key: claim_key.clone(),
                claim_value: to_json(&claim_value),
                running_key: running_key.clone(),
                running_value: to_json(&running),
                session_lease: lease,
                retention_lease,
                lock,
                extra: taken_ops(&ctx, &fire),
            },
        )
        .await;
    METRICS.claim_seconds.observe(claim_started.elapsed().as_secs_f64());
    METRICS.claims.with_label_values(&[outcome.label()]).inc();
    let fencing_token = match outcome {
        ClaimOutcome::Won { fencing_token, replaced } => {
            if let Some(old) = replaced.and_then(|v| serde_json::from_slice::<ExecutionId>(&v).ok()) {
                if old != id {
                    replace_running(&ctx, &old, &id);
                }
            }
            fencing_token
        }
        ClaimOutcome::Blocked { fencing_token, holder } => {
            let holder = serde_json::from_slice::<ExecutionId>(&holder)
                .map_or_else(|_| "another execution".to_owned(), |h| h.to_string());
            let reason = format!("concurrency forbid: {holder} was still running");
            tracing::info!(%reason, "tick skipped");
            let record = not_run_record(&ctx, &fire, Status::Skipped, reason, fencing_token);
            log_record(&record, 0);
            ctx.sink.submit(RecordWrite { mode: WriteMode::Replace, record });
            continue_catchup(&ctx, &fire).await;
            return;
        }
        ClaimOutcome::Lost => {
            tracing::trace!("claim lost to another worker");
            return;
        }
        ClaimOutcome::Unknown(e) => {
            // The txn may have committed (etcd lost the answer, not the write): then the tick is
            // ours and nobody else may run it, so it must run here, late, or never at all.
            match resolve_unknown_claim(&ctx, &running_key, &id, lease).await {
                Some(token) => {
                    METRICS.claims.with_label_values(&["unknown_won"]).inc();
                    tracing::warn!(error = %e, scheduled_ms = fire.scheduled_ms, fencing_token = token, "claim outcome was unknown, but the claim is ours: running the tick late");
                    token
                }
                None => {
                    tracing::warn!(error = %e, scheduled_ms = fire.scheduled_ms, "claim outcome unknown: not running this tick here");
                    ctx.unsettled.note(&fire);
                    watch_for_miss(&ctx, &fire, 0, NotRaced::Unknown);
                    return;
                }
            }
        }
    };
    let mut stop = ctx.registry.register(&id, fencing_token);
    // A tick claimed ahead (`claim_ahead`) starts at its scheduled time, not before; a kill or a
    // lost lease meanwhile still applies (the task is then never started).
    let wait_ms = fire.scheduled_ms - now_ms();
    if fire.trigger == TriggerKind::Schedule && wait_ms > 0 {
        let wait = tokio::time::sleep(Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0)));
        tokio::select! {
            () = wait => {}
            _ = executor::wait_stop(&mut stop) => {}
        }
    }
    // Handed to the executor now; a shell task's start is when its process was spawned.
    let handed_ms = now_ms();
    let mut record = base_record(&ctx, &fire, Status::Running, Some(fencing_token));
    record.claimed_at = Some(rfc3339_ms(claimed_ms));
    record.started_at = Some(rfc3339_ms(handed_ms));
    ctx.sink.submit(RecordWrite { mode: WriteMode::IfAbsent, record: record.clone() });
    let (pid_tx, pid_rx) = oneshot::channel();
    let run = execute(&ctx, &fire, &id, fencing_token, stop, pid_tx);
    tokio::pin!(run);
    let finished = tokio::select! {
        f = &mut run => f,
        () = tokio::time::sleep(RUNNING_DETAIL_AFTER) => {
            // A long run: fill in pid and fencing token for operators reading etcd.
            running.pid = pid_rx.await.ok();
            running.fencing_token = Some(fencing_token);
            let mut kv = ctx.client.kv_client();
            let put = kv.put(running_key.clone(), to_json(&running), Some(PutOptions::new().with_lease(lease)));
            // Informational only (pid, token); the claim already guards the execution.
            match etcron_common::etcd::request("put_running", put).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "updating the running marker with pid and token failed"),
                Err(_) => tracing::warn!("updating the running marker with pid and token timed out"),
            }
            run.await
        }
    };
    drop(permit);
    let finished_ms = now_ms();
    let started_ms = finished.spawned_ms.unwrap_or(handed_ms);
    if fire.trigger == TriggerKind::Schedule {
        #[allow(clippy::cast_precision_loss)] // milliseconds of lateness fit an f64 exactly
        METRICS.lateness.observe((started_ms - fire.scheduled_ms).max(0) as f64 / 1000.0);
    }
    ctx.registry.deregister(&id);
    let (status, mut error) = status_of(&finished);
    if let (Status::Failed, Some(limits), Some(e)) = (status, &fire.spec.limits, &mut error) {
        if let Some(note) = executor::limit_note(limits, &finished) {
            *e = format!("{e}: {note}");
        }
    }
    let done = Claim { state: ClaimState::Done, status: Some(status), ..claim_value };
    let (follow, notes) = follow_ups(&ctx, &fire, status, fencing_token, finished_ms);
    let close = claim::Close {
        claim_key: claim_key.clone(),
        fencing_token,
        done_value: to_json(&done),
        running_key: running_key.clone(),
        lock: uses_lock.then(|| (lock_key.clone(), lock_value.clone())),
        extra: follow,
    };
    let closed = close_claim(&ctx, &id.job, close).await == Closed::Done;
    record.started_at = Some(rfc3339_ms(started_ms));
    record.finished_at = Some(rfc3339_ms(finished_ms));
    record.duration_ms = u64::try_from(finished_ms - started_ms).ok();
    record.status = status;
    record.exit_code = finished.exit_code;
    record.signal = finished.signal;
    record.output = finished.output;
    record.output_truncated = finished.output_truncated;
    record.http_status = finished.http_status;
    record.error = error;
    if closed {
        if !notes.is_empty() {
            record.reason = Some(notes.join("; "));
        }
    } else {
        // The loss handling closed the claim first: it recorded the run lost (and requested
        // the failover rerun), so this run must not count as the tick's outcome.
        record.reason = Some(format!(
            "this worker lost its session and could not close the claim before the loss handling recorded the run lost; the task ended as {}",
            status.as_str()
        ));
        record.status = Status::Lost;
    }
    log_record(&record, started_ms - fire.scheduled_ms);
    if closed {
        // Not when the claim was lost: the survivor that records the run `lost` notifies.
        ctx.notifier.record(&fire.spec, &record);
    }
    ctx.sink.submit(RecordWrite { mode: WriteMode::Replace, record });
}

/// Whether a ranked-later worker finds the claim taken: seen in its watch of claims (no etcd
/// request), or, for a claim that would go alone (a concurrency lock), read from etcd — a
/// losing claim alone costs a raft proposal, a read does not. A batchable claim not seen yet is
/// raced: in a batch, losing costs no proposal of its own.
async fn already_taken(ctx: &Context, fire: &Fire, claim_key: &str) -> bool {
    if ctx.taken.contains(claim_key) {
        METRICS.claims.with_label_values(&["taken_seen"]).inc();
        return true;
    }
    if fire.spec.concurrency == Concurrency::Allow {
        return false;
    }
    match claim::claim_exists(&ctx.client, claim_key).await {
        Ok(true) => {
            METRICS.claims.with_label_values(&["taken"]).inc();
            true
        }
        Ok(false) => false,
        Err(e) => {
            tracing::debug!(error = %e, "claim pre-check failed; racing anyway");
            false
        }
    }
}

/// How long a worker keeps asking etcd whether a claim whose txn had an unknown outcome is its own.
const RESOLVE_UNKNOWN_FOR: Duration = Duration::from_secs(30);

/// After a claim txn with an unknown outcome: reads the running marker (written by the same
/// txn) until etcd answers. `Some(token)` when it holds this execution under this worker's
/// session lease (the txn committed: the marker's create revision is the claim's, the fencing
/// token); `None` when it is absent, someone else's, or etcd did not answer in time.
async fn resolve_unknown_claim(ctx: &Context, running_key: &str, id: &ExecutionId, lease: i64) -> Option<i64> {
    let deadline = tokio::time::Instant::now() + RESOLVE_UNKNOWN_FOR;
    while tokio::time::Instant::now() < deadline {
        let mut kv = ctx.client.kv_client();
        match etcron_common::etcd::request("claim_read", kv.get(running_key, None)).await {
            Ok(Ok(resp)) => {
                let kv = resp.kvs().first()?;
                let running: RunningExecution = serde_json::from_slice(kv.value()).ok()?;
                let ours =
                    kv.lease() == lease && running.worker_id == ctx.config.worker_id && &running.execution_id == id;
                return ours.then(|| kv.create_revision());
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    None
}

/// Most time a run request waits on this worker for a free capacity slot.
const REQUEST_CAPACITY_WAIT: Duration = Duration::from_secs(600);

/// Run requests (retries, dependencies, catch-up, failover, manual runs) wait for capacity
/// while their request key exists; `None` when another worker took it or the wait ran out.
async fn wait_for_capacity(ctx: &Arc<Context>, fire: &Fire) -> Option<tokio::sync::OwnedSemaphorePermit> {
    let key = fire.request_key.as_deref()?;
    tracing::info!(capacity = ctx.config.capacity, "worker at capacity: run request waits for a free slot");
    let deadline = tokio::time::Instant::now() + REQUEST_CAPACITY_WAIT;
    while tokio::time::Instant::now() < deadline {
        if let Ok(Ok(p)) = tokio::time::timeout(Duration::from_secs(1), ctx.capacity.clone().acquire_owned()).await {
            return Some(p);
        }
        if let Ok(false) = claim::key_exists(&ctx.client, key, false).await {
            return None;
        }
    }
    tracing::warn!("run request waited {}s for capacity", REQUEST_CAPACITY_WAIT.as_secs());
    watch_for_miss(ctx, fire, 0, NotRaced::Capacity);
    None
}

/// Ops written whenever a fire's execution is taken (run, skipped or recorded): the job state
/// moves forward for schedule ticks, and the run request that asked for it is consumed.
fn taken_ops(ctx: &Context, fire: &Fire) -> Vec<TxnOp> {
    let mut ops = Vec::new();
    if let (Some(ms), 1) = (fire.id.tick.scheduled_ms(), fire.id.attempt) {
        ops.push(claim::advance_state(&ctx.keys.state(&fire.id.job), ms));
    }
    if let Some(key) = &fire.request_key {
        ops.push(TxnOp::delete(key.as_str(), None));
    }
    ops
}

/// `concurrency: replace`: stop the execution this one took the lock from, wherever it runs.
fn replace_running(ctx: &Arc<Context>, old: &ExecutionId, new: &ExecutionId) {
    let (ctx, old, new) = (ctx.clone(), old.clone(), new.clone());
    tokio::spawn(async move {
        let lease = match ctx.retention.get().await {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, replaced = %old, "cannot write the kill for the replaced execution");
                return;
            }
        };
        let command = KillCommand {
            requested_at: rfc3339_ms(now_ms()),
            reason: format!("concurrency replace: replaced by {new}"),
        };
        let key = ctx.keys.kill(&old.job, &KillTarget::Execution(old.clone()));
        let mut kv = ctx.client.kv_client();
        let put = kv.put(key, to_json(&command), Some(PutOptions::new().with_lease(lease)));
        match etcron_common::etcd::request("put_kill", put).await {
            Ok(Ok(_)) => tracing::info!(replaced = %old, "concurrency replace: kill written for the running execution"),
            Ok(Err(e)) => {
                tracing::error!(error = %e, replaced = %old, "writing the kill for the replaced execution failed")
            }
            Err(_) => tracing::error!(replaced = %old, "writing the kill for the replaced execution timed out"),
        }
    });
}

/// How long the loss handling leaves a departed worker to close its own claims: a session TTL,
/// enough for a worker that was cut off to learn its session ended, reconnect and retry its
/// pending closes (retried every `CLOSE_RETRY_MAX` at most).
#[must_use]
pub fn loss_grace(config: &Config) -> Duration {
    config.session_ttl
}

/// Most failover reruns of one tick on top of its retries (a task that crashes every worker it
/// runs on must not circle forever).
pub const MAX_FAILOVERS: u32 = 3;

/// What follows a finished execution, written in the transaction that closes its claim so it
/// happens exactly once: a retry, the dependent jobs' runs, the next catch-up tick, and the
/// disabling of a one-shot job. Also returns notes for the record.
fn follow_ups(
    ctx: &Context,
    fire: &Fire,
    status: Status,
    fencing_token: i64,
    now: UnixMs,
) -> (Vec<TxnOp>, Vec<String>) {
    let spec = &fire.spec;
    let id = &fire.id;
    let mut ops = Vec::new();
    let mut notes = Vec::new();
    let failed = matches!(status, Status::Failed | Status::TimedOut);
    let retry = retried(spec, id, status);
    if retry {
        let delay = spec.retries.delay(id.attempt, rand::random::<f64>());
        let not_before = now + i64::try_from(delay.as_millis()).unwrap_or(i64::MAX / 2);
        let next = id.next_attempt();
        notes.push(format!("retry {next} at {}", rfc3339_ms(not_before)));
        let request = TriggerRequest {
            kind: TriggerKind::Retry,
            execution_id: Some(next),
            scheduled_ms: Some(fire.scheduled_ms),
            not_before_ms: Some(not_before),
            parent: Some(id.clone()),
            ..TriggerRequest::manual(now, &format!("retry after {} of {id}", status.as_str()))
        };
        ops.push(put_request(&ctx.keys, &id.job, &format!("retry-{fencing_token}"), &request));
    }
    if status == Status::Lost {
        let (loss_ops, note) = after_loss(&ctx.keys, id, spec, fire.scheduled_ms, fencing_token, now);
        ops.extend(loss_ops);
        notes.extend(note);
    }
    let dependents = match status {
        Status::Succeeded => &spec.on_success,
        _ if failed && !retry => &spec.on_failure,
        _ => &[][..],
    };
    ops.extend(dependency_requests(&ctx.keys, id, dependents, fencing_token, now, &mut notes));
    if let Some(op) = next_catchup(&ctx.keys, fire, now) {
        ops.push(op);
    }
    if fire.spec.parsed_schedule().is_ok_and(|s| s.is_one_shot())
        && matches!(fire.trigger, TriggerKind::Schedule | TriggerKind::Catchup)
    {
        // `@at` jobs run once: disable the job, unless it was edited since this run began.
        let disabled = JobSpec { enabled: false, ..(**spec).clone() };
        let key = ctx.keys.job(&id.job);
        ops.push(TxnOp::txn(
            Txn::new()
                .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, fire.job_revision)])
                .and_then([TxnOp::put(key.as_str(), to_json(&disabled), None)]),
        ));
        notes.push("one-shot job disabled after its run".to_owned());
    }
    (ops, notes)
}

/// Whether a run that ended `status` gets another attempt (`retries.max` not used up). Such a
/// failure is not final: neither `on_failure` nor a failure notification follows it.
pub(crate) fn retried(spec: &JobSpec, id: &ExecutionId, status: Status) -> bool {
    matches!(status, Status::Failed | Status::TimedOut) && id.attempt <= spec.retries.max
}

/// Whether a run lost with its worker is rerun (`on_worker_loss: rerun`, not a broadcast part,
/// at most `MAX_FAILOVERS` reruns on top of the retries); otherwise the loss is final.
pub(crate) fn rerun_after_loss(spec: &JobSpec, id: &ExecutionId) -> bool {
    spec.on_worker_loss == OnWorkerLoss::Rerun
        && !matches!(id.part, Part::Worker(_))
        && id.attempt <= spec.retries.max + MAX_FAILOVERS
}

/// What follows a run lost with its worker's session, per `on_worker_loss`: a failover rerun
/// (next attempt, same scheduled time; not for broadcast parts, and at most `MAX_FAILOVERS` on
/// top of the retries), or the `on_failure` jobs. Also a note for the record's reason.
fn after_loss(
    keys: &Keys,
    id: &ExecutionId,
    spec: &JobSpec,
    scheduled_ms: UnixMs,
    fencing_token: i64,
    now: UnixMs,
) -> (Vec<TxnOp>, Option<String>) {
    if rerun_after_loss(spec, id) {
        let next = id.next_attempt();
        let note = format!("on_worker_loss rerun: {next} requested");
        let request = TriggerRequest {
            kind: TriggerKind::Failover,
            execution_id: Some(next),
            scheduled_ms: Some(scheduled_ms),
            parent: Some(id.clone()),
            ..TriggerRequest::manual(now, &format!("failover of {id}"))
        };
        return (vec![put_request(keys, &id.job, &format!("failover-{fencing_token}"), &request)], Some(note));
    }
    let mut notes = Vec::new();
    if spec.on_worker_loss == OnWorkerLoss::Rerun {
        notes.push("not rerun (broadcast run or failover limit reached)".to_owned());
    }
    let ops = dependency_requests(keys, id, &spec.on_failure, fencing_token, now, &mut notes);
    (ops, (!notes.is_empty()).then(|| notes.join("; ")))
}

fn dependency_requests(
    keys: &Keys,
    parent: &ExecutionId,
    dependents: &[String],
    fencing_token: i64,
    now: UnixMs,
    notes: &mut Vec<String>,
) -> Vec<TxnOp> {
    let mut ops = Vec::new();
    for child in dependents {
        let tick = Tick::dependency(fencing_token, &parent.job);
        let request_id = tick.to_string();
        let execution = ExecutionId::new(child, tick);
        notes.push(format!("triggered {execution}"));
        let request = TriggerRequest {
            kind: TriggerKind::Dependency,
            execution_id: Some(execution),
            parent: Some(parent.clone()),
            ..TriggerRequest::manual(now, &format!("dependency of {parent}"))
        };
        ops.push(put_request(keys, child, &request_id, &request));
    }
    ops
}

/// The next run of a `misfire: run_all` catch-up chain.
fn next_catchup(keys: &Keys, fire: &Fire, now: UnixMs) -> Option<TxnOp> {
    let (&next, rest) = fire.then.split_first()?;
    Some(catchup_request(keys, &fire.id.job, next, rest.to_vec(), now))
}

/// A catch-up run request for one tick (and the ticks to run after it).
pub fn catchup_request(keys: &Keys, job: &str, tick_ms: UnixMs, then: Vec<UnixMs>, now: UnixMs) -> TxnOp {
    let request = TriggerRequest {
        kind: TriggerKind::Catchup,
        execution_id: Some(ExecutionId::new(job, Tick::Scheduled(tick_ms))),
        scheduled_ms: Some(tick_ms),
        then,
        ..TriggerRequest::manual(now, &format!("catch-up of the tick at {}", rfc3339_ms(tick_ms)))
    };
    put_request(keys, job, &format!("catchup-{tick_ms}"), &request)
}

/// A run request, written only while its job exists: a request for a deleted (or never
/// created) job would outlive it, since requests have no lease.
fn put_request(keys: &Keys, job: &str, request_id: &str, request: &TriggerRequest) -> TxnOp {
    TxnOp::txn(Txn::new().when([Compare::version(keys.job(job), CompareOp::Greater, 0)]).and_then([TxnOp::put(
        keys.trigger(job, request_id),
        to_json(request),
        None,
    )]))
}

/// A catch-up chain whose tick was skipped goes on with its next tick.
async fn continue_catchup(ctx: &Context, fire: &Fire) {
    let Some(op) = next_catchup(&ctx.keys, fire, now_ms()) else { return };
    let mut kv = ctx.client.kv_client();
    match etcron_common::etcd::request("put_request", kv.txn(Txn::new().and_then([op]))).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            tracing::error!(error = %e, remaining = fire.then.len(), "catch-up chain broken: could not request its next tick")
        }
        Err(_) => {
            tracing::error!(remaining = fire.then.len(), "catch-up chain broken: requesting its next tick timed out")
        }
    }
}

/// The record of a fire, before it ran.
fn base_record(ctx: &Context, fire: &Fire, status: Status, fencing_token: Option<i64>) -> ExecutionRecord {
    let mut record = blank_record(&fire.id, fire.scheduled_ms, fire.trigger, status, Some(fire.spec.mode));
    record.worker_id.clone_from(&ctx.config.worker_id);
    record.hostname.clone_from(&ctx.hostname);
    record.fencing_token = fencing_token;
    record.parent.clone_from(&fire.parent);
    record
}

/// A record with only the execution's identity filled in.
fn blank_record(
    id: &ExecutionId,
    scheduled_ms: UnixMs,
    trigger: TriggerKind,
    status: Status,
    mode: Option<Mode>,
) -> ExecutionRecord {
    ExecutionRecord {
        id: id.clone(),
        job: id.job.clone(),
        scheduled_at: rfc3339_ms(scheduled_ms),
        scheduled_ms,
        claimed_at: None,
        started_at: None,
        finished_at: None,
        duration_ms: None,
        worker_id: String::new(),
        hostname: String::new(),
        attempt: id.attempt,
        trigger,
        status,
        exit_code: None,
        signal: None,
        output: String::new(),
        output_truncated: false,
        error: None,
        reason: None,
        fencing_token: None,
        parent: None,
        http_status: None,
        shard: match (&id.part, mode) {
            (Part::Shard(i), Some(Mode::Sharded(n))) => Some((*i, n)),
            _ => None,
        },
    }
}

fn not_run_record(ctx: &Context, fire: &Fire, status: Status, reason: String, fencing_token: i64) -> ExecutionRecord {
    let mut record = base_record(ctx, fire, status, Some(fencing_token));
    record.finished_at = Some(rfc3339_ms(now_ms()));
    record.reason = Some(reason);
    record
}

/// Records a fire that did not run, exactly once across the cluster (via its claim key).
pub(crate) async fn record_not_run(ctx: &Context, fire: &Fire, status: Status, reason: String) -> bool {
    let lease = match ctx.retention.get().await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, status = status.as_str(), "cannot record tick: retention lease unavailable");
            return false;
        }
    };
    let claim = Claim {
        worker_id: ctx.config.worker_id.clone(),
        execution_id: fire.id.clone(),
        attempt: fire.id.attempt,
        state: ClaimState::Done,
        status: Some(status),
    };
    let mut extra = taken_ops(ctx, fire);
    extra.extend(next_catchup(&ctx.keys, fire, now_ms()));
    match claim::claim_done(&ctx.client, &ctx.keys.claim(&fire.id), to_json(&claim), lease, extra).await {
        ClaimOutcome::Won { fencing_token, .. } | ClaimOutcome::Blocked { fencing_token, .. } => {
            let record = not_run_record(ctx, fire, status, reason, fencing_token);
            log_record(&record, 0);
            ctx.notifier.record(&fire.spec, &record);
            ctx.sink.submit(RecordWrite { mode: WriteMode::Replace, record });
            true
        }
        ClaimOutcome::Lost => false,
        ClaimOutcome::Unknown(e) => {
            tracing::warn!(error = %e, status = status.as_str(), "recording a tick that did not run: outcome unknown; settling it once etcd answers");
            ctx.unsettled.note(fire);
            false
        }
    }
}

/// When this worker did not race for a fire, the first-ranked one checks after `MISSED_AFTER`
/// that somebody did. If nobody had: a schedule tick of a job with `misfire: run_once|run_all`
/// that found no free worker gets a catch-up run; anything else is recorded `missed`.
fn watch_for_miss(ctx: &Arc<Context>, fire: &Fire, rank: usize, why: NotRaced) {
    // A broadcast part is watched by the tick's first-ranked worker, for the whole tick.
    let broadcast = matches!(fire.id.part, Part::Worker(_));
    let rank = if broadcast {
        ctx.members.rank(&ctx.config.worker_id, &ctx.keys.tick_claims_prefix(&fire.id.job, &fire.id.tick))
    } else {
        rank
    };
    if rank != 0 {
        return;
    }
    let (ctx, mut fire) = (ctx.clone(), fire.clone());
    tokio::spawn(async move {
        tokio::time::sleep(MISSED_AFTER).await;
        let taken = if broadcast {
            fire.id.part = Part::Whole;
            claim::prefix_exists(&ctx.client, &ctx.keys.tick_claims_prefix(&fire.id.job, &fire.id.tick)).await
        } else {
            claim::claim_exists(&ctx.client, &ctx.keys.claim(&fire.id)).await
        };
        match taken {
            Ok(true) => {}
            Ok(false) => {
                let catch_up = why != NotRaced::Selector
                    && fire.trigger == TriggerKind::Schedule
                    && fire.spec.misfire != Misfire::Skip;
                if catch_up {
                    if let Some(ms) = fire.id.tick.scheduled_ms() {
                        request_catchup_of(&ctx, &fire, ms).await;
                        return;
                    }
                }
                let reason = ctx.members.miss_reason(&fire.spec.selector, MISSED_AFTER);
                tracing::warn!(job = %fire.id.job, scheduled_ms = fire.scheduled_ms, %reason, "tick missed");
                record_not_run(&ctx, &fire, Status::Missed, reason).await;
            }
            Err(e) => {
                // etcd did not answer: the settler looks again once it does.
                tracing::warn!(error = %e, job = %fire.id.job, scheduled_ms = fire.scheduled_ms, "checking for a missed tick failed; settling it once etcd answers");
                ctx.unsettled.note(&fire);
            }
        }
    });
}

/// A tick nobody could take: ask for a catch-up run of it, unless it got claimed meanwhile.
async fn request_catchup_of(ctx: &Context, fire: &Fire, tick_ms: UnixMs) {
    let claim_key = ctx.keys.claim(&fire.id);
    let txn = Txn::new()
        .when([Compare::create_revision(claim_key.as_str(), CompareOp::Equal, 0)])
        .and_then([catchup_request(&ctx.keys, &fire.id.job, tick_ms, Vec::new(), now_ms())]);
    let mut kv = ctx.client.kv_client();
    match etcron_common::etcd::request("put_request", kv.txn(txn)).await {
        Ok(Ok(r)) if r.succeeded() => {
            tracing::warn!(job = %fire.id.job, scheduled_ms = tick_ms, misfire = ?fire.spec.misfire, "tick not claimed in time: catch-up run requested");
        }
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "requesting a catch-up run failed; settling the tick once etcd answers");
            ctx.unsettled.note(fire);
        }
        Err(_) => {
            tracing::warn!("requesting a catch-up run timed out; settling the tick once etcd answers");
            ctx.unsettled.note(fire);
        }
    }
}

/// Records `lost` for executions that ran on a worker whose session ended (its registration
/// was deleted at `revision` by lease expiry), and requests their failover rerun when the job
/// says `on_worker_loss: rerun`. Only the first-ranked survivor does it.
///
/// It first gives the departed worker a chance to close its own claims: a worker whose session
/// ended while etcd was out of its reach (a stall, a partition) closes the claims of the tasks
/// that finished as soon as etcd answers it again, and a run closed that way is not lost. A
/// survivor waits `loss_grace`; a worker handling its own departure knows its pending closes
/// and waits for them. What is still unclosed afterwards may not have finished: recorded lost.
pub async fn record_lost(ctx: Arc<Context>, departed: String, revision: i64) {
    if ctx.members.rank(&ctx.config.worker_id, &format!("lost/{departed}/{revision}")) != 0 {
        return;
    }
    let noticed = now_ms();
    if departed == ctx.config.worker_id {
        ctx.closing.wait_empty(CLOSE_FOR).await;
    } else {
        tokio::time::sleep(loss_grace(&ctx.config)).await;
    }
    if let Some(resp) = list_running_at(&ctx, &departed, revision - 1).await {
        for item in resp.kvs() {
            let Ok(running) = serde_json::from_slice::<RunningExecution>(item.value()) else { continue };
            if running.worker_id == departed {
                settle_lost(&ctx, &departed, revision, &running, item.create_revision()).await;
            }
        }
    }
    // The departed worker was the first-ranked one for some ticks, the one to record them
    // `missed` had nobody claimed them; it may have died before it could. Sweep every job's
    // ticks since it may have stopped answering (its lease expired a TTL after that).
    let ttl = i64::try_from(ctx.config.session_ttl.as_millis()).unwrap_or(i64::MAX / 4);
    let missed_after = i64::try_from(MISSED_AFTER.as_millis()).unwrap_or(0);
    ctx.unsettled.note_all(noticed - 2 * ttl - missed_after, noticed, crate::catchup::Gap::WorkerDeparted);
}

/// Tries of an etcd step of the loss handling before it gives up (loudly).
const LOSS_TRIES: u32 = 30;

/// The running markers as of `revision`, retried while etcd fails (up to `LOSS_TRIES`).
async fn list_running_at(ctx: &Context, departed: &str, revision: i64) -> Option<etcd_client::GetResponse> {
    let opts = etcd_client::GetOptions::new().with_prefix().with_revision(revision);
    for _ in 0..LOSS_TRIES {
        let mut kv = ctx.client.kv_client();
        let get = kv.get(ctx.keys.running_prefix(), Some(opts.clone()));
        match etcron_common::etcd::request("list_running", get).await {
            Ok(Ok(r)) => return Some(r),
            Ok(Err(e)) if e.to_string().contains("compacted") => {
                tracing::error!(worker = %departed, error = %e, "what the departed worker was running was compacted away; its executions are not recorded lost");
                return None;
            }
            Ok(Err(e)) => {
                tracing::warn!(worker = %departed, error = %e, "listing what the departed worker was running failed; retrying")
            }
            Err(_) => {
                tracing::warn!(worker = %departed, "listing what the departed worker was running timed out; retrying")
            }
        }
        tokio::time::sleep(CLOSE_RETRY_MAX).await;
    }
    tracing::error!(worker = %departed, "cannot list what the departed worker was running; its executions are not recorded lost");
    None
}

/// Closes one execution of a departed worker as `lost` (with its failover rerun or
/// `on_failure` requests), unless its worker or another survivor closed it first.
async fn settle_lost(ctx: &Context, departed: &str, revision: i64, running: &RunningExecution, created: i64) {
    let id = running.execution_id.clone();
    let fencing_token = running.fencing_token.unwrap_or(created);
    let scheduled_ms = running.scheduled_ms.or(id.tick.scheduled_ms()).unwrap_or_else(now_ms);
    let claim = Claim {
        worker_id: departed.to_owned(),
        execution_id: id.clone(),
        attempt: id.attempt,
        state: ClaimState::Done,
        status: Some(Status::Lost),
    };
    let spec = ctx.jobs.get(&id.job).map(|j| j.spec);
    let mut reason = format!(
        "worker {departed} lost its session (lease expired at revision {revision}) while running this execution"
    );
    let mut follow = Vec::new();
    let now = now_ms();
    if let Some(spec) = &spec {
        let (ops, note) = after_loss(&ctx.keys, &id, spec, scheduled_ms, fencing_token, now);
        follow = ops;
        if let Some(note) = note {
            reason.push_str(&format!("; {note}"));
        }
    }
    // Close the execution's claim (still as its winner wrote it) as done/lost: recorded once,
    // whichever survivors try, and never after its worker closed it. The rerun request rides
    // in the same txn.
    let claim_key = ctx.keys.claim(&id);
    let mut won = false;
    for _ in 0..LOSS_TRIES {
        let outcome = match ctx.retention.get().await {
            Ok(lease) => {
                claim::mark_lost(&ctx.client, &claim_key, fencing_token, to_json(&claim), lease, follow.clone()).await
            }
            Err(e) => ClaimOutcome::Unknown(format!("retention lease unavailable: {e}")),
        };
        match outcome {
            ClaimOutcome::Won { .. } | ClaimOutcome::Blocked { .. } => {
                won = true;
                break;
            }
            ClaimOutcome::Lost => {
                tracing::info!(execution_id = %id, worker = %departed, "execution of a departed worker was closed already (by that worker, or another survivor): not lost");
                return;
            }
            ClaimOutcome::Unknown(e) => {
                tracing::warn!(execution_id = %id, error = %e, "recording a lost execution: outcome unknown; retrying");
                tokio::time::sleep(CLOSE_RETRY_MAX).await;
            }
        }
    }
    if !won {
        tracing::error!(execution_id = %id, worker = %departed, "etcd did not take the lost record of a departed worker's execution; its claim stays running");
        return;
    }
    let trigger = running.trigger.unwrap_or_else(|| trigger_of(&id.tick));
    let mut record = blank_record(&id, scheduled_ms, trigger, Status::Lost, spec.as_ref().map(|s| s.mode));
    record.claimed_at = Some(running.started_at.clone());
    record.started_at = Some(running.started_at.clone());
    record.finished_at = Some(rfc3339_ms(now));
    record.worker_id = departed.to_owned();
    record.reason = Some(reason);
    record.fencing_token = Some(fencing_token);
    log_record(&record, 0);
    if let Some(spec) = &spec {
        ctx.notifier.record(spec, &record);
    }
    ctx.sink.submit(RecordWrite { mode: WriteMode::Replace, record });
}

/// What triggered an execution, as far as its tick tells (markers from before `trigger`).
fn trigger_of(tick: &Tick) -> TriggerKind {
    match tick {
        Tick::Scheduled(_) => TriggerKind::Schedule,
        Tick::Manual(_) => TriggerKind::Manual,
        Tick::Dependency(_) => TriggerKind::Dependency,
    }
}

async fn execute(
    ctx: &Context,
    fire: &Fire,
    id: &ExecutionId,
    fencing_token: i64,
    stop: watch::Receiver<Option<StopReason>>,
    pid_tx: oneshot::Sender<u32>,
) -> Finished {
    // Stopped before it started (killed while claimed ahead, lease lost): nothing is started.
    if let Some(reason) = stop.borrow().clone() {
        return Finished::not_started(Ending::Stopped(reason));
    }
    match &fire.spec.task {
        Task::Shell(shell) => {
            // Only the configured names of the worker's environment, then the job's own.
            let mut env = ctx.task_env.clone();
            env.extend(shell.env.iter().map(|(k, v)| (k.clone(), v.clone())));
            env.extend(shell.secret_env.iter().filter_map(|(k, v)| Some((k.clone(), v.clone()?))));
            env.insert("ETCRON_JOB".into(), id.job.clone());
            env.insert("ETCRON_EXECUTION_ID".into(), id.to_string());
            env.insert("ETCRON_SCHEDULED_AT".into(), rfc3339_ms(fire.scheduled_ms));
            env.insert("ETCRON_SCHEDULED_AT_MS".into(), fire.scheduled_ms.to_string());
            env.insert("ETCRON_ATTEMPT".into(), id.attempt.to_string());
            env.insert("ETCRON_TRIGGER".into(), fire.trigger.as_str().to_owned());
            if let (Part::Shard(i), Mode::Sharded(n)) = (&id.part, fire.spec.mode) {
                env.insert("ETCRON_SHARD_INDEX".into(), i.to_string());
                env.insert("ETCRON_SHARD_COUNT".into(), n.to_string());
            }
            if let Some(parent) = &fire.parent {
                env.insert("ETCRON_PARENT_EXECUTION_ID".into(), parent.to_string());
            }
            env.insert("ETCRON_WORKER_ID".into(), ctx.config.worker_id.clone());
            env.insert("ETCRON_FENCING_TOKEN".into(), fencing_token.to_string());
            let max_output = fire
                .spec
                .output_limit()
                .map_or(ctx.config.max_output, |m| usize::try_from(m).unwrap_or(usize::MAX).min(ctx.config.max_output));
            // Followable from now until the run ends (the guard's drop ends the followers).
            let live = ctx.live.open(&id.to_string(), max_output);
            let job = ShellJob {
                command: shell.command.clone(),
                env,
                cwd: shell.cwd.clone(),
                worker_id: ctx.config.worker_id.clone(),
                timeout: fire.spec.timeout.map(|t| t.0),
                kill_grace: ctx.config.kill_grace,
                output: live.output(),
                limits: fire.spec.limits.unwrap_or_default(),
            };
            executor::run_shell(job, stop, pid_tx).await
        }
        Task::Http(http) => {
            // No process: nobody waits for a pid.
            drop(pid_tx);
            let identity = [
                ("X-Etcron-Job", id.job.clone()),
                ("X-Etcron-Execution-Id", id.to_string()),
                ("X-Etcron-Scheduled-At", rfc3339_ms(fire.scheduled_ms)),
                ("X-Etcron-Attempt", id.attempt.to_string()),
                ("X-Etcron-Worker-Id", ctx.config.worker_id.clone()),
                ("X-Etcron-Fencing-Token", fencing_token.to_string()),
            ];
            let job = HttpJob {
                method: http.method.clone(),
                url: http.url.clone(),
                headers: http_task::with_default_headers(
                    &http
                        .headers
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .chain(http.secret_headers.iter().filter_map(|(k, v)| Some((k.clone(), v.clone()?))))
                        .collect(),
                    identity.map(|(name, value)| (name.to_owned(), value)),
                ),
                secret_headers: http.secret_headers.keys().cloned().collect(),
                body: http.body.clone(),
                expect_status: http.expect_status,
                timeout: fire.spec.timeout.map(|t| t.0),
                max_output: fire.spec.output_limit().map_or(ctx.config.max_output, |m| {
                    usize::try_from(m).unwrap_or(usize::MAX).min(ctx.config.max_output)
                }),
            };
            http_task::run_http(job, stop).await
        }
    }
}

fn status_of(finished: &Finished) -> (Status, Option<String>) {
    match &finished.ending {
        Ending::Exited(0) => (Status::Succeeded, None),
        Ending::Exited(code) => (Status::Failed, Some(format!("exit code {code}"))),
        Ending::Signaled(sig) => (Status::Failed, Some(format!("terminated by signal {sig}"))),
        Ending::TimedOut => (
            Status::TimedOut,
            Some("timeout reached; task stopped (process group killed, or HTTP request aborted)".to_owned()),
        ),
        Ending::Stopped(StopReason::Killed(why)) => (Status::Killed, Some(format!("killed: {why}"))),
        // Not an operator's kill: the run was lost with the worker's session, and is handled
        // as any lost run (rerun or `on_failure`, per `on_worker_loss`).
        Ending::Stopped(StopReason::LeaseLost) => {
            (Status::Lost, Some("stopped: this worker lost its session lease while running it".to_owned()))
        }
        Ending::Stopped(StopReason::Shutdown) => (Status::Killed, Some("killed: worker shut down".to_owned())),
        Ending::SpawnFailed(e) => (Status::Failed, Some(e.clone())),
        Ending::Http { ok: true, .. } => (Status::Succeeded, None),
        Ending::Http { status, ok: false, expected } => {
            let expected = expected.map_or_else(|| "2xx".to_owned(), |s| s.to_string());
            (Status::Failed, Some(format!("HTTP status {status}, expected {expected}")))
        }
        Ending::RequestFailed(e) => (Status::Failed, Some(e.clone())),
    }
}

/// How a close ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closed {
    /// The claim is `done` with this run's status; its follow-ups are written.
    Done,
    /// The loss handling closed it first (recorded `lost`), or etcd did not take the close
    /// within the claim's retention: this run is not the tick's outcome.
    NotOurs,
}

/// Longest a close keeps trying: past the claim's shortest retention the claim is gone and
/// can no longer be closed by its winner.
const CLOSE_FOR: Duration = claim::MIN_RETENTION;

/// Most time between two tries of a close etcd failed.
const CLOSE_RETRY_MAX: Duration = Duration::from_secs(1);

/// Closes a won claim, trying until etcd takes it or somebody else closed it. A close that
/// could not land before the session ended still lands once etcd answers (its fence is the
/// claim, not the session): the loss handling waits a grace period before it records the run
/// `lost`, so a task that finished is recorded as it ended, not rerun.
async fn close_claim(ctx: &Context, job: &str, close: claim::Close) -> Closed {
    let _pending = ctx.closing.enter();
    let deadline = tokio::time::Instant::now() + CLOSE_FOR;
    let mut delay = Duration::from_millis(50);
    let mut tries = 0u32;
    while tokio::time::Instant::now() < deadline {
        tries += 1;
        let outcome = match ctx.retention.get().await {
            Ok(lease) => ctx.batchers.complete(job, close.clone(), lease).await,
            Err(e) => Err(format!("retention lease unavailable: {e}")),
        };
        match outcome {
            Ok(CompleteOutcome::Closed) => {
                if tries > 1 {
                    tracing::info!(
                        tries,
                        fencing_token = close.fencing_token,
                        "claim closed after etcd failed earlier tries"
                    );
                }
                return Closed::Done;
            }
            Ok(CompleteOutcome::Fenced) => {
                tracing::warn!(
                    fencing_token = close.fencing_token,
                    "claim closed by the loss handling before this worker could: the run is recorded lost"
                );
                return Closed::NotOurs;
            }
            Err(e) => {
                if tries == 1 {
                    tracing::warn!(error = %e, "closing the claim failed; retrying until etcd takes it");
                }
                METRICS.close_retries.inc();
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(CLOSE_RETRY_MAX);
            }
        }
    }
    tracing::error!(
        fencing_token = close.fencing_token,
        tries,
        "etcd did not take the claim's close within its retention; the run is left to the loss handling"
    );
    Closed::NotOurs
}

fn log_record(record: &ExecutionRecord, lateness_ms: i64) {
    METRICS.executions.with_label_values(&[record.job.as_str(), record.status.as_str()]).inc();
    tracing::info!(
        target: "etcron::execution",
        execution_id = %record.id,
        job = %record.job,
        status = record.status.as_str(),
        scheduled_at = %record.scheduled_at,
        started_at = record.started_at.as_deref().unwrap_or(""),
        duration_ms = record.duration_ms.unwrap_or(0),
        lateness_ms,
        attempt = record.attempt,
        trigger = record.trigger.as_str(),
        exit_code = record.exit_code,
        signal = record.signal,
        fencing_token = record.fencing_token,
        output_bytes = record.output.len(),
        output_truncated = record.output_truncated,
        error = record.error.as_deref().unwrap_or(""),
        reason = record.reason.as_deref().unwrap_or(""),
        "execution finished"
    );
}

fn to_json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain structs cannot fail: no maps with non-string keys, no floats.
    serde_json::to_vec(value).unwrap_or_default()
}
