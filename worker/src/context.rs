//! The worker's shared state: what every execution reads (configuration, etcd client, leases,
//! members, jobs, batchers, the record sink), the registry of running executions that kill
//! commands and lease loss act on, and the count of pending closes shutdown waits for.
//!
//! Beside the [`Context`], in this folder, what it holds: group commit of claims and closes
//! ([`batcher`]), capacity ([`slots`]), provisional records, the ledger of unsettled ticks
//! ([`unsettled`]), the record sink ([`log_sink`]) and the simulated tasks of the simulation.
//! Imports `tasks`, `timing`, `cluster` and `notify`, nothing of the fire path.

pub mod batcher;
pub mod log_sink;
pub mod provisional;
pub mod simulated;
pub mod slots;
pub mod spec_bytes;
pub mod unsettled;

use etcron_common::hash::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::Client;
use etcron_common::claim::RetentionLeases;
use etcron_model::duration::HumanDuration;
use etcron_model::keys::{ExecutionId, Keys, KillTarget};
use etcron_model::spec::JobSpec;
use etcron_model::stored::Pause;
use etcron_model::UnixMs;
use tokio::sync::watch;

use crate::cluster::membership::Members;
use crate::config::Config;
use crate::context::log_sink::LogSink;
use crate::context::spec_bytes::SpecBytes;
use crate::tasks::shell::StopReason;

/// Everything an execution needs, shared by all of them.
pub struct Context {
    pub client: Client,
    pub keys: Keys,
    pub config: Config,
    pub hostname: String,
    pub members: Members,
    /// The current session lease; `None` while the worker has no session.
    pub lease: watch::Receiver<Option<i64>>,
    /// The session deadline keepers watch, and its lapses (a keeper's kill is a lost run).
    pub session_deadline: crate::tasks::keeper::SessionDeadline,
    /// This node's slot of the keepers' page (`None` in the simulation, which has no keepers).
    pub keeper_slot: Option<crate::tasks::keeper::Slot>,
    pub retention: RetentionLeases,
    /// Leases of raised alerts' keys and checkpoints: 25 h from their last write
    /// (`etcron_model::spec::alerts::ALERT_MEMORY`).
    pub long_leases: Arc<RetentionLeases>,
    pub registry: Registry,
    /// Group commit of claims and closes.
    pub batchers: crate::context::batcher::Batchers,
    /// Claims seen written (a watch): a ranked-later worker looks here before reading etcd.
    pub taken: Arc<crate::cluster::taken::Taken>,
    /// Closes of finished executions not yet taken by etcd: shutdown waits for them.
    pub closing: Outstanding,
    /// Slots for concurrent runs (`capacity`), taken when a run starts.
    pub slots: Arc<crate::context::slots::Slots>,
    pub sink: LogSink,
    /// Records of claims this worker is closing, written before the close
    /// (`<data_dir>/provisional/`).
    pub provisional: crate::context::provisional::Provisional,
    /// Departures this worker saw and has not seen handled yet (`<data_dir>/departures/`).
    pub departures: crate::cluster::departures::Owed,
    pub jobs: JobTable,
    /// The jobs operators paused (`{ns}/paused/`), as the scheduler last saw them.
    pub paused: PauseTable,
    /// The skip calendars (`{ns}/calendars/`), as the scheduler last saw them.
    pub calendars: crate::cluster::calendars::CalendarTable,
    /// The resource pools, their held slots and queues (`{ns}/pool…`).
    pub pools: crate::cluster::pools::PoolTable,
    /// The backfills whose chains this worker continued.
    pub backfills: BackfillCache,
    /// When this worker last moved each job's state forward.
    pub state_marks: StateMarks,
    /// Schedule ticks whose fate this worker could not learn while etcd failed it.
    pub unsettled: crate::context::unsettled::Unsettled,
    /// Webhook notifications of final records (queued here, delivered in the background).
    pub notifier: crate::notify::notifier::Notifier,
    /// Output of the running shell tasks, followable while they run.
    pub live: Arc<crate::tasks::live_output::LiveOutputs>,
    /// The worker's variables that `task_env_passthrough` names, read once at start: the base of
    /// every shell task's environment.
    pub task_env: std::collections::BTreeMap<String, String>,
    /// Where tasks on this machine reach the progress listener (`live_output::serve_progress`;
    /// `http://127.0.0.1:PORT` when it listens on every address): the base of
    /// `ETCRON_PROGRESS_URL`.
    pub local_output_url: Option<String>,
    /// Where masters reach the live output, and the token they present; advertised in the
    /// worker's registration.
    pub output_endpoint: Option<OutputEndpoint>,
    /// Where HTTP and gRPC tasks may connect (`task_network_allow`, the control plane).
    pub task_network: Arc<crate::tasks::network::TaskNetwork>,
    /// Run requests whose claim's outcome stayed unknown, for the scheduler to race for again.
    pub race_again: tokio::sync::mpsc::UnboundedSender<String>,
    /// Runs every task instead of the real ones: the simulation of the fire path only.
    pub simulated: Option<Arc<dyn crate::context::simulated::Tasks>>,
    /// The handlers of the process embedding this worker (`etcron-sdk`), and their names.
    pub handlers: Option<Arc<dyn crate::tasks::handler::Handlers>>,
    pub handler_names: Vec<String>,
    /// Trace spans of the fire path (`fire::spans`): off without `otlp_endpoint`.
    pub tracer: etcron_common::trace::Tracer,
}

/// The newest tick whose claim by this worker moved each job's `{ns}/state/{job}` forward: a
/// claim carries the state's advance again only `STATE_EVERY` of ticks later.
#[derive(Debug, Default)]
pub struct StateMarks(Mutex<HashMap<String, UnixMs>>);

impl StateMarks {
    /// True when a claim of `tick` should move the job's state forward.
    #[must_use]
    pub fn due(&self, job: &str, tick: UnixMs) -> bool {
        let every = i64::try_from(crate::timing::fire::STATE_EVERY.as_millis()).unwrap_or(i64::MAX);
        let marks = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        marks.get(job).is_none_or(|last| tick < *last || tick - *last >= every)
    }

    /// A claim of `tick` that carried the advance was won.
    pub fn advanced(&self, job: &str, tick: UnixMs) {
        let mut marks = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        marks.insert(job.to_owned(), tick);
    }
}

/// A count of pieces of work in progress that shutdown waits for (`enter` until the guard drops).
#[derive(Debug, Default)]
pub struct Outstanding {
    count: watch::Sender<usize>,
}

/// Ends one piece of pending work when dropped.
pub struct OutstandingGuard<'a>(&'a Outstanding);

impl Drop for OutstandingGuard<'_> {
    fn drop(&mut self) {
        self.0.count.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Outstanding {
    pub fn enter(&self) -> OutstandingGuard<'_> {
        self.count.send_modify(|n| *n += 1);
        OutstandingGuard(self)
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

/// [`JobRef::timing_since_ms`] of a job listed when the worker started.
pub const TIMING_UNKNOWN: UnixMs = UnixMs::MIN;

/// A job as the scheduler last saw it, its spec decoded.
#[derive(Debug, Clone)]
pub struct JobRef {
    pub spec: Arc<JobSpec>,
    pub mod_revision: i64,
    /// When this worker started scheduling the job's current timing (schedule and timezone):
    /// no tick of it is due before, so a sweep of an outage never reaches further back.
    /// [`TIMING_UNKNOWN`] for a job of the worker's first listing: it may be much older than
    /// the worker.
    pub timing_since_ms: UnixMs,
}

/// A job as the table keeps it: its spec as bytes ([`SpecBytes`]).
#[derive(Debug, Clone)]
pub struct Known {
    pub spec: SpecBytes,
    pub mod_revision: i64,
    pub timing_since_ms: UnixMs,
}

/// The scheduler's jobs, readable by executions (failover needs the lost run's job spec).
#[derive(Debug, Default)]
pub struct JobTable {
    inner: std::sync::RwLock<HashMap<Arc<str>, Known>>,
    /// `after` read backwards: a job → the jobs naming it in their `after` (workflow children).
    children: std::sync::RwLock<HashMap<String, std::collections::BTreeSet<String>>>,
    /// The jobs with a `no_success_within` alert, and its window (few of all jobs: the stale
    /// check passes over these only).
    stale_windows: std::sync::RwLock<HashMap<Arc<str>, HumanDuration>>,
    /// Set once the scheduler applied its first listing of the jobs.
    loaded: std::sync::atomic::AtomicBool,
}

impl JobTable {
    /// The scheduler applied its first listing of the jobs.
    pub fn mark_loaded(&self) {
        self.loaded.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether the table holds a listing of the jobs yet.
    #[must_use]
    pub fn loaded(&self) -> bool {
        self.loaded.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The job, its spec decoded.
    #[must_use]
    pub fn get(&self, job: &str) -> Option<JobRef> {
        let known = self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(job).cloned()?;
        Some(JobRef {
            spec: known.spec.decode(job)?,
            mod_revision: known.mod_revision,
            timing_since_ms: known.timing_since_ms,
        })
    }

    /// [`JobRef::timing_since_ms`] of the job, without decoding its spec.
    #[must_use]
    pub fn timing_since(&self, job: &str) -> Option<UnixMs> {
        self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(job).map(|k| k.timing_since_ms)
    }

    /// The names of all jobs.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner).keys().map(ToString::to_string).collect()
    }

    /// The jobs with a `no_success_within` alert, and its window.
    #[must_use]
    pub fn stale_windows(&self) -> Vec<(String, HumanDuration)> {
        let windows = self.stale_windows.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        windows.iter().map(|(job, window)| (job.to_string(), *window)).collect()
    }

    /// Sets the job (`Some`: as kept, and its spec parsed) or removes it (`None`).
    pub fn set(&self, job: &Arc<str>, entry: Option<(Known, &JobSpec)>) {
        let mut inner = self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut children = self.children.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut windows = self.stale_windows.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (old, keep) = match entry {
            Some((known, spec)) => {
                for parent in &spec.after {
                    children.entry(parent.clone()).or_default().insert(job.to_string());
                }
                match spec.alerts.as_ref().and_then(|a| a.no_success_within) {
                    Some(window) => windows.insert(job.clone(), window),
                    None => windows.remove(&**job),
                };
                (inner.insert(job.clone(), known), spec.after.clone())
            }
            None => {
                windows.remove(&**job);
                (inner.remove(&**job), Vec::new())
            }
        };
        // The old spec's `after` edges that the new one does not keep.
        let Some(old) = old.and_then(|o| o.spec.decode(job)) else { return };
        for parent in old.after.iter().filter(|p| !keep.contains(p)) {
            if let Some(set) = children.get_mut(parent) {
                set.remove(&**job);
                if set.is_empty() {
                    children.remove(parent);
                }
            }
        }
    }

    /// The jobs naming `job` in their `after` (its workflow children), with their specs.
    #[must_use]
    pub fn after_children(&self, job: &str) -> Vec<(String, JobRef)> {
        let names: Vec<String> = {
            let children = self.children.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            let Some(names) = children.get(job) else { return Vec::new() };
            names.iter().cloned().collect()
        };
        names.into_iter().filter_map(|n| self.get(&n).map(|j| (n, j))).collect()
    }
}

/// The jobs operators paused, by name: a mirror of `{ns}/paused/` kept by the scheduler (the
/// task that fires ticks), readable by the catch-up scans.
#[derive(Debug, Default)]
pub struct PauseTable {
    inner: std::sync::RwLock<HashMap<String, Pause>>,
}

impl PauseTable {
    /// The job's pause, if it is paused.
    #[must_use]
    pub fn get(&self, job: &str) -> Option<Pause> {
        self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(job).cloned()
    }

    /// Sets (`Some`) or clears (`None`) one job's pause; returns whether it was paused before.
    pub fn set(&self, job: &str, pause: Option<Pause>) -> bool {
        let mut inner = self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        match pause {
            Some(p) => inner.insert(job.to_owned(), p).is_some(),
            None => inner.remove(job).is_some(),
        }
    }

    /// Replaces every pause (a listing of the prefix).
    pub fn replace(&self, all: HashMap<String, Pause>) {
        *self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner) = all;
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
    pub(crate) fn register(&self, id: &ExecutionId, fencing_token: i64) -> watch::Receiver<Option<StopReason>> {
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

    /// Stops one running execution (its own request, `rebalance`), unless something stopped it
    /// already.
    pub(crate) fn stop(&self, id: &ExecutionId, reason: StopReason) {
        if let Some(handle) = self.lock().running.get(id) {
            if handle.stop.borrow().is_none() {
                let _ = handle.stop.send(Some(reason));
            }
        }
    }

    pub(crate) fn deregister(&self, id: &ExecutionId) {
        let mut inner = self.lock();
        inner.running.remove(id);
        let n = inner.running.len();
        drop(inner);
        self.count.send_replace(n);
    }

    #[must_use]
    /// Whether this worker runs `id` under the claim with this fencing token.
    pub(crate) fn runs(&self, id: &ExecutionId, fencing_token: i64) -> bool {
        self.lock().running.get(id).is_some_and(|h| h.fencing_token == fencing_token)
    }

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

/// Backfills read so far (`worker/src/fire/backfill.rs`), by key. Their items never change (a
/// cancel only sets `cancelled`, and the chain's compare on the key's version sees that), so a
/// read is kept.
#[derive(Debug, Default)]
pub struct BackfillCache(Mutex<HashMap<String, Arc<etcron_model::backfill::Backfill>>>);

/// Most backfills kept in the cache (cleared when full).
const BACKFILL_CACHE_MAX: usize = 256;

impl BackfillCache {
    pub(crate) fn get(&self, key: &str) -> Option<Arc<etcron_model::backfill::Backfill>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(key).cloned()
    }

    pub(crate) fn put(&self, key: &str, backfill: Arc<etcron_model::backfill::Backfill>) {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= BACKFILL_CACHE_MAX {
            map.clear();
        }
        map.insert(key.to_owned(), backfill);
    }
}
