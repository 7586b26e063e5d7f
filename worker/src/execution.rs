//! One fire of a job on this worker: take a capacity slot, race for the claim (in rendezvous
//! order), run the task, close the claim under the retention lease, log the record. Also the
//! registry of running executions that kill commands and lease loss act on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, PutOptions};
use etcron_common::claim::{self, ClaimOutcome, CompleteOutcome, RetentionLeases};
use etcron_common::job::{JobSpec, Task};
use etcron_common::keys::{ExecutionId, Keys, KillTarget, Part, Tick};
use etcron_common::model::{labels_match, Claim, ClaimState, ExecutionRecord, RunningExecution, Status, TriggerKind};
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
    pub capacity: Arc<Semaphore>,
    pub sink: LogSink,
}

/// How long after a tick nobody may have claimed it before it is recorded `missed`.
pub const MISSED_AFTER: Duration = Duration::from_secs(5);

/// A tick (or manual run) to race for.
#[derive(Debug, Clone)]
pub struct Fire {
    pub job: String,
    pub spec: Arc<JobSpec>,
    pub tick: Tick,
    pub scheduled_ms: UnixMs,
    pub attempt: u32,
    pub trigger: TriggerKind,
    /// Record the tick as `skipped` with this reason instead of running it.
    pub skip: Option<String>,
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
            let _ = stop.send(Some(StopReason::Killed(format!("kill command at revision {}", kill.mod_revision))));
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
    pub fn apply_kill(&self, key: Vec<u8>, job: String, target: KillTarget, mod_revision: i64) {
        let mut inner = self.lock();
        let entry = KillEntry { job, target, mod_revision };
        for (id, handle) in &inner.running {
            if kill_applies(&entry, id, handle.fencing_token) && handle.stop.borrow().is_none() {
                tracing::info!(execution_id = %id, job = %handle.job, kill_revision = mod_revision, "kill command: stopping execution");
                let _ = handle.stop.send(Some(StopReason::Killed(format!("kill command at revision {mod_revision}"))));
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
    let id = ExecutionId { job: fire.job.clone(), tick: fire.tick.clone(), part: Part::Whole, attempt: fire.attempt };
    let span = tracing::info_span!("execution", job = %fire.job, execution_id = %id, worker_id = %ctx.config.worker_id);
    race_and_run(ctx, fire, id).instrument(span).await;
}

async fn race_and_run(ctx: Arc<Context>, fire: Fire, id: ExecutionId) {
    let claim_key = ctx.keys.claim(&id);
    let rank = ctx.members.rank(&ctx.config.worker_id, &claim_key);
    if let Some(reason) = fire.skip.clone() {
        // One worker records the skipped tick; the claim makes it exactly one.
        if rank == 0 {
            record_not_run(&ctx, &fire, &id, &claim_key, Status::Skipped, reason).await;
        }
        return;
    }
    if !labels_match(&ctx.config.labels, &fire.spec.selector) {
        tracing::trace!("selector does not match this worker's labels");
        watch_for_miss(&ctx, &fire, &id, &claim_key, rank);
        return;
    }
    let Ok(_permit) = ctx.capacity.clone().try_acquire_owned() else {
        tracing::warn!(capacity = ctx.config.capacity, "worker at capacity: leaving this tick to other workers");
        watch_for_miss(&ctx, &fire, &id, &claim_key, rank);
        return;
    };
    if rank > 0 {
        // Give the workers ranked before this one a head start, then look before writing: a
        // read costs etcd no raft proposal, a losing txn does.
        tokio::time::sleep(ctx.config.claim_stagger * u32::try_from(rank).unwrap_or(u32::MAX)).await;
        match claim::claim_exists(&ctx.client, &claim_key).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => tracing::debug!(error = %e, "claim pre-check failed; racing anyway"),
        }
    }
    let Some(lease) = *ctx.lease.borrow() else {
        tracing::warn!("no session lease: not claiming");
        watch_for_miss(&ctx, &fire, &id, &claim_key, rank);
        return;
    };
    let claimed_ms = now_ms();
    let worker_id = ctx.config.worker_id.clone();
    let claim_value = Claim {
        worker_id: worker_id.clone(),
        execution_id: id.clone(),
        attempt: fire.attempt,
        state: ClaimState::Running,
        status: None,
    };
    let mut running = RunningExecution {
        worker_id: worker_id.clone(),
        execution_id: id.clone(),
        pid: None,
        started_at: rfc3339_ms(claimed_ms),
        fencing_token: None,
    };
    let running_key = ctx.keys.running(&id);
    let outcome =
        claim::try_claim(&ctx.client, &claim_key, to_json(&claim_value), (&running_key, to_json(&running)), lease)
            .await;
    let fencing_token = match outcome {
        ClaimOutcome::Won { fencing_token } => fencing_token,
        ClaimOutcome::Lost => {
            tracing::trace!("claim lost to another worker");
            return;
        }
        ClaimOutcome::Unknown(e) => {
            tracing::warn!(error = %e, scheduled_ms = fire.scheduled_ms, "claim outcome unknown: not running this tick here");
            watch_for_miss(&ctx, &fire, &id, &claim_key, 0);
            return;
        }
    };
    let stop = ctx.registry.register(&id, fencing_token);
    let started_ms = now_ms();
    let mut record = ExecutionRecord {
        id: id.clone(),
        job: fire.job.clone(),
        scheduled_at: rfc3339_ms(fire.scheduled_ms),
        scheduled_ms: fire.scheduled_ms,
        claimed_at: Some(rfc3339_ms(claimed_ms)),
        started_at: Some(rfc3339_ms(started_ms)),
        finished_at: None,
        duration_ms: None,
        worker_id,
        hostname: ctx.hostname.clone(),
        attempt: fire.attempt,
        trigger: fire.trigger,
        status: Status::Running,
        exit_code: None,
        signal: None,
        output: String::new(),
        output_truncated: false,
        error: None,
        reason: None,
        fencing_token: Some(fencing_token),
        parent: None,
        http_status: None,
        shard: None,
    };
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
            match tokio::time::timeout(etcron_common::etcd::REQUEST_TIMEOUT, put).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "updating the running marker with pid and token failed"),
                Err(_) => tracing::warn!("updating the running marker with pid and token timed out"),
            }
            run.await
        }
    };
    let finished_ms = now_ms();
    ctx.registry.deregister(&id);
    let (status, error) = status_of(&finished);
    let done = Claim { state: ClaimState::Done, status: Some(status), ..claim_value };
    let closed = close_claim(&ctx, &claim_key, fencing_token, &done, &running_key).await;
    record.finished_at = Some(rfc3339_ms(finished_ms));
    record.duration_ms = u64::try_from(finished_ms - started_ms).ok();
    record.status = status;
    record.exit_code = finished.exit_code;
    record.signal = finished.signal;
    record.output = finished.output;
    record.output_truncated = finished.output_truncated;
    record.error = error;
    if !closed {
        // The claim went with the session: the tick belongs to whoever holds it now, so this
        // run must not count as the tick's outcome.
        record.reason = Some(format!(
            "this worker lost its claim (session lease) before the task ended; the task ended as {}",
            status.as_str()
        ));
        record.status = Status::Lost;
    }
    log_record(&record, started_ms - fire.scheduled_ms);
    ctx.sink.submit(RecordWrite { mode: WriteMode::Replace, record });
}

/// Records a tick that did not run, exactly once across the cluster (via its claim key).
async fn record_not_run(ctx: &Context, fire: &Fire, id: &ExecutionId, claim_key: &str, status: Status, reason: String) {
    let lease = match ctx.retention.get().await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, status = status.as_str(), "cannot record tick: retention lease unavailable");
            return;
        }
    };
    let claim = Claim {
        worker_id: ctx.config.worker_id.clone(),
        execution_id: id.clone(),
        attempt: fire.attempt,
        state: ClaimState::Done,
        status: Some(status),
    };
    match claim::claim_done(&ctx.client, claim_key, to_json(&claim), lease).await {
        ClaimOutcome::Won { fencing_token } => {
            let now = rfc3339_ms(now_ms());
            let record = ExecutionRecord {
                id: id.clone(),
                job: fire.job.clone(),
                scheduled_at: rfc3339_ms(fire.scheduled_ms),
                scheduled_ms: fire.scheduled_ms,
                claimed_at: None,
                started_at: None,
                finished_at: Some(now),
                duration_ms: None,
                worker_id: ctx.config.worker_id.clone(),
                hostname: ctx.hostname.clone(),
                attempt: fire.attempt,
                trigger: fire.trigger,
                status,
                exit_code: None,
                signal: None,
                output: String::new(),
                output_truncated: false,
                error: None,
                reason: Some(reason),
                fencing_token: Some(fencing_token),
                parent: None,
                http_status: None,
                shard: None,
            };
            log_record(&record, 0);
            ctx.sink.submit(RecordWrite { mode: WriteMode::Replace, record });
        }
        ClaimOutcome::Lost => {}
        ClaimOutcome::Unknown(e) => {
            tracing::warn!(error = %e, status = status.as_str(), "recording a tick that did not run: outcome unknown")
        }
    }
}

/// When this worker did not race for a tick, the first-ranked one checks after `MISSED_AFTER`
/// that somebody did, and records the tick `missed` if nobody had.
fn watch_for_miss(ctx: &Arc<Context>, fire: &Fire, id: &ExecutionId, claim_key: &str, rank: usize) {
    if rank != 0 {
        return;
    }
    let (ctx, fire, id, claim_key) = (ctx.clone(), fire.clone(), id.clone(), claim_key.to_owned());
    tokio::spawn(async move {
        tokio::time::sleep(MISSED_AFTER).await;
        match claim::claim_exists(&ctx.client, &claim_key).await {
            Ok(true) => {}
            Ok(false) => {
                let reason = ctx.members.miss_reason(&fire.spec.selector, MISSED_AFTER);
                tracing::warn!(job = %fire.job, scheduled_ms = fire.scheduled_ms, %reason, "tick missed");
                record_not_run(&ctx, &fire, &id, &claim_key, Status::Missed, reason).await;
            }
            Err(e) => tracing::warn!(error = %e, "checking for a missed tick failed"),
        }
    });
}

/// Records `lost` for executions that ran on a worker whose session ended (its registration
/// was deleted at `revision` by lease expiry). Only the first-ranked survivor does it.
pub async fn record_lost(ctx: Arc<Context>, departed: String, revision: i64) {
    if ctx.members.rank(&ctx.config.worker_id, &format!("lost/{departed}/{revision}")) != 0 {
        return;
    }
    let mut kv = ctx.client.kv_client();
    let opts = etcd_client::GetOptions::new().with_prefix().with_revision(revision - 1);
    let resp = match tokio::time::timeout(
        etcron_common::etcd::REQUEST_TIMEOUT,
        kv.get(ctx.keys.running_prefix(), Some(opts)),
    )
    .await
    {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            tracing::error!(worker = %departed, error = %e, "cannot list what the departed worker was running; its executions are not recorded lost");
            return;
        }
        Err(_) => {
            tracing::error!(worker = %departed, "listing what the departed worker was running timed out");
            return;
        }
    };
    for item in resp.kvs() {
        let Ok(running) = serde_json::from_slice::<RunningExecution>(item.value()) else { continue };
        if running.worker_id != departed {
            continue;
        }
        let id = running.execution_id.clone();
        let scheduled_ms = match &id.tick {
            Tick::Scheduled(ms) => *ms,
            Tick::Manual(_) | Tick::Dependency(_) => item.create_revision(),
        };
        let trigger = if matches!(id.tick, Tick::Manual(_)) { TriggerKind::Manual } else { TriggerKind::Schedule };
        let lease = match ctx.retention.get().await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot record lost execution: retention lease unavailable");
                return;
            }
        };
        let claim_key = ctx.keys.claim(&id);
        let claim = Claim {
            worker_id: departed.clone(),
            execution_id: id.clone(),
            attempt: id.attempt,
            state: ClaimState::Done,
            status: Some(Status::Lost),
        };
        // Re-create the tick's claim (it went with the lease) as done/lost: recorded once, and no
        // late worker can claim the tick again.
        if let ClaimOutcome::Won { .. } = claim::claim_done(&ctx.client, &claim_key, to_json(&claim), lease).await {
            let record = ExecutionRecord {
                id: id.clone(),
                job: id.job.clone(),
                scheduled_at: rfc3339_ms(scheduled_ms),
                scheduled_ms,
                claimed_at: Some(running.started_at.clone()),
                started_at: Some(running.started_at.clone()),
                finished_at: Some(rfc3339_ms(now_ms())),
                duration_ms: None,
                worker_id: departed.clone(),
                hostname: String::new(),
                attempt: id.attempt,
                trigger,
                status: Status::Lost,
                exit_code: None,
                signal: None,
                output: String::new(),
                output_truncated: false,
                error: None,
                reason: Some(format!("worker {departed} lost its session (lease expired at revision {revision}) while running this execution")),
                fencing_token: Some(running.fencing_token.unwrap_or_else(|| item.create_revision())),
                parent: None,
                http_status: None,
                shard: None,
            };
            log_record(&record, 0);
            ctx.sink.submit(RecordWrite { mode: WriteMode::Replace, record });
        }
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
    match &fire.spec.task {
        Task::Shell(shell) => {
            let mut env = shell.env.clone();
            env.insert("ETCRON_JOB".into(), fire.job.clone());
            env.insert("ETCRON_EXECUTION_ID".into(), id.to_string());
            env.insert("ETCRON_SCHEDULED_AT".into(), rfc3339_ms(fire.scheduled_ms));
            env.insert("ETCRON_SCHEDULED_AT_MS".into(), fire.scheduled_ms.to_string());
            env.insert("ETCRON_ATTEMPT".into(), fire.attempt.to_string());
            env.insert("ETCRON_WORKER_ID".into(), ctx.config.worker_id.clone());
            env.insert("ETCRON_FENCING_TOKEN".into(), fencing_token.to_string());
            let job = ShellJob {
                command: shell.command.clone(),
                env,
                cwd: shell.cwd.clone(),
                timeout: fire.spec.timeout.map(|t| t.0),
                kill_grace: ctx.config.kill_grace,
                max_output: fire.spec.max_output.map_or(ctx.config.max_output, |m| {
                    usize::try_from(m).unwrap_or(usize::MAX).min(ctx.config.max_output)
                }),
            };
            executor::run_shell(job, stop, pid_tx).await
        }
        Task::Http(http) => {
            // No process: nobody waits for a pid.
            drop(pid_tx);
            let identity = [
                ("X-Etcron-Job", fire.job.clone()),
                ("X-Etcron-Execution-Id", id.to_string()),
                ("X-Etcron-Scheduled-At", rfc3339_ms(fire.scheduled_ms)),
                ("X-Etcron-Attempt", fire.attempt.to_string()),
                ("X-Etcron-Worker-Id", ctx.config.worker_id.clone()),
                ("X-Etcron-Fencing-Token", fencing_token.to_string()),
            ];
            let job = HttpJob {
                method: http.method.clone(),
                url: http.url.clone(),
                headers: http_task::with_default_headers(
                    &http.headers,
                    identity.map(|(name, value)| (name.to_owned(), value)),
                ),
                body: http.body.clone(),
                expect_status: http.expect_status,
                timeout: fire.spec.timeout.map(|t| t.0),
                max_output: fire.spec.max_output.map_or(ctx.config.max_output, |m| {
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
        Ending::TimedOut => (Status::TimedOut, Some("timeout reached; process group killed".to_owned())),
        Ending::Stopped(StopReason::Killed(why)) => (Status::Killed, Some(format!("killed: {why}"))),
        Ending::Stopped(StopReason::LeaseLost) => {
            (Status::Killed, Some("killed: worker lost its session lease".to_owned()))
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

async fn close_claim(ctx: &Context, claim_key: &str, fencing_token: i64, done: &Claim, running_key: &str) -> bool {
    let mut delay = Duration::from_millis(100);
    for attempt in 1..=5 {
        let lease = match ctx.retention.get().await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, attempt, "retention lease unavailable; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
                continue;
            }
        };
        match claim::complete(&ctx.client, claim_key, fencing_token, to_json(done), running_key, lease).await {
            Ok(CompleteOutcome::Closed) => return true,
            Ok(CompleteOutcome::Fenced) => {
                tracing::warn!(fencing_token, "claim no longer ours (session lost); execution not marked done");
                return false;
            }
            Err(e) => {
                tracing::warn!(error = %e, attempt, "closing claim failed; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
        }
    }
    tracing::error!(fencing_token, "could not close claim; it stays `running` until this worker's session lease ends");
    true
}

fn log_record(record: &ExecutionRecord, lateness_ms: i64) {
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
        trigger = ?record.trigger,
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
