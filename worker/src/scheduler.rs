//! The scheduler: the one task that owns the timing wheel and the table of jobs. It applies job,
//! trigger and pause updates from the watchers, sleeps until the wheel's next expiration, and
//! hands every due tick to a fresh execution task. It never blocks on etcd.

use etcron_common::hash::HashMap;
use std::sync::Arc;
use std::time::Duration;

use etcron_model::keys::{Key, Part};
use etcron_model::record::TriggerKind;
use etcron_model::schedule::{Schedule, ScheduleCache};
use etcron_model::spec::{Concurrency, JobSpec, Mode};
use etcron_model::stored::{halt, Pause, TriggerRequest};
use etcron_model::{now_ms, UnixMs};
use tokio::sync::{mpsc, watch};

use crate::cluster::watcher::{Kv, Update};
use crate::context::{Context, JobRef};
use crate::fire::execution::run_fire;
use crate::timing::fire::Fire;
use crate::timing::wheel::{EntryKey, Wheel};

/// Longest sleep between looks at the wall clock (so clock jumps are noticed).
const MAX_SLEEP: Duration = Duration::from_millis(500);
/// A wall clock this far behind the wheel counts as a backwards jump: rebuild the wheel.
const BACKWARD_JUMP_MS: u64 = 1_000;

struct JobEntry {
    spec: Arc<JobSpec>,
    schedule: Schedule,
    mod_revision: i64,
    wheel_key: Option<EntryKey>,
}

/// What a wheel entry stands for.
#[derive(Debug, Clone)]
enum Due {
    /// The next schedule tick of a job, at its scheduled time (the wheel holds it `claim_ahead`
    /// earlier for jobs that may claim ahead).
    Tick(Arc<str>, u64),
    /// A run request whose `not_before_ms` has not come yet (a retry's backoff), by key.
    Request(Arc<str>),
}

/// A run request waiting in the wheel.
struct Pending {
    job: String,
    request_id: String,
    request: TriggerRequest,
    wheel_key: Option<EntryKey>,
}

/// What the watchers hand the scheduler: mirrors of `{ns}/jobs/`, `{ns}/trigger/`,
/// `{ns}/paused/` and `{ns}/calendars/`.
pub struct Updates {
    pub jobs: mpsc::Receiver<Update>,
    pub triggers: mpsc::Receiver<Update>,
    pub paused: mpsc::Receiver<Update>,
    pub calendars: mpsc::Receiver<Update>,
    /// Run requests to race for again (`Context::race_again`).
    pub again: mpsc::UnboundedReceiver<String>,
}

/// How long after a claim of unknown outcome its run request is raced for again.
const RACE_AGAIN_AFTER_MS: u64 = 5_000;

pub struct Scheduler {
    ctx: Arc<Context>,
    wheel: Wheel<Due>,
    jobs: HashMap<Arc<str>, JobEntry>,
    pending: HashMap<Arc<str>, Pending>,
    /// One parsed copy of each distinct schedule the jobs use.
    schedules: ScheduleCache,
    /// Manual-run requests that arrived before their job: triggers and jobs come on separate
    /// watch streams, so a brand-new job's trigger can overtake it.
    early_triggers: Vec<(tokio::time::Instant, String, String, TriggerRequest)>,
}

/// How long a trigger waits for its job: the lifetime of a trigger key.
const EARLY_TRIGGER_WAIT: Duration = Duration::from_secs(60);
/// Most triggers waiting for their jobs.
const MAX_EARLY_TRIGGERS: usize = 10_000;

/// How long before a tick this job's race for it starts: `claim_ahead` for jobs whose runs may
/// overlap (`concurrency: allow`); none for `forbid`/`replace`, whose lock must be taken when the
/// tick is due (claiming early could find the previous run still going, or kill it early).
fn claim_ahead_ms(config: &crate::config::Config, spec: &JobSpec) -> u64 {
    if spec.concurrency == Concurrency::Allow {
        u64::try_from(config.claim_ahead.as_millis()).unwrap_or(0)
    } else {
        0
    }
}

fn wall_ms() -> u64 {
    u64::try_from(now_ms()).unwrap_or(0)
}

impl Scheduler {
    #[must_use]
    pub fn new(ctx: Arc<Context>) -> Self {
        Self {
            ctx,
            wheel: Wheel::new(wall_ms()),
            jobs: HashMap::default(),
            pending: HashMap::default(),
            schedules: ScheduleCache::default(),
            early_triggers: Vec::new(),
        }
    }

    /// Runs until `stop` flips (or the update channels close).
    pub async fn run(mut self, updates: Updates, mut stop: watch::Receiver<bool>) {
        let Updates { mut jobs, mut triggers, mut paused, mut calendars, mut again } = updates;
        // No tick fires before this worker knows which jobs are paused and which dates are
        // skipped: the listings of `{ns}/paused/` and `{ns}/calendars/` (the first thing each
        // mirror sends) are applied before anything else, and job updates wait in their
        // channel until then.
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            first = paused.recv() => match first {
                Some(update) => self.apply_pause_update(update),
                None => return,
            },
        }
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            first = calendars.recv() => match first {
                Some(update) => self.ctx.calendars.apply(&self.ctx.keys, update),
                None => return,
            },
        }
        let mut due = Vec::new();
        loop {
            let now = wall_ms();
            if now + BACKWARD_JUMP_MS < self.wheel.elapsed_ms() {
                tracing::warn!(
                    wheel_ms = self.wheel.elapsed_ms(),
                    wall_ms = now,
                    "wall clock jumped backwards; rebuilding the timing wheel"
                );
                self.rebuild(now);
            }
            self.wheel.poll(now, &mut due);
            for (_, item) in due.drain(..) {
                match item {
                    Due::Tick(name, scheduled_ms) => self.fire_due(&name, scheduled_ms, now),
                    Due::Request(key) => self.request_due(&key),
                }
            }
            let m = &*crate::metrics::METRICS;
            m.jobs.set(i64::try_from(self.jobs.len()).unwrap_or(i64::MAX));
            m.wheel_entries.set(i64::try_from(self.wheel.len()).unwrap_or(i64::MAX));
            let sleep = match self.wheel.next_expiration() {
                Some(t) => Duration::from_millis(t.saturating_sub(wall_ms()).max(1)).min(MAX_SLEEP),
                None => MAX_SLEEP,
            };
            tokio::select! {
                biased;
                _ = stop.changed() => return,
                () = tokio::time::sleep(sleep) => {}
                Some(update) = paused.recv() => self.apply_pause_update(update),
                Some(update) = calendars.recv() => self.ctx.calendars.apply(&self.ctx.keys, update),
                Some(update) = jobs.recv() => self.apply_job_update(update),
                Some(update) = triggers.recv() => self.apply_trigger_update(update),
                Some(key) = again.recv() => self.race_again(&key, now),
            }
        }
    }

    fn rebuild(&mut self, now: u64) {
        self.wheel = Wheel::new(now);
        let names: Vec<Arc<str>> = self.jobs.keys().cloned().collect();
        for name in names {
            if let Some(entry) = self.jobs.get_mut(&name) {
                entry.wheel_key = None;
            }
            self.schedule_next(&name, now);
        }
        let keys: Vec<Arc<str>> = self.pending.keys().cloned().collect();
        for key in keys {
            if let Some(p) = self.pending.get_mut(&key) {
                p.wheel_key = None;
            }
            self.schedule_request(&key);
        }
    }

    /// Puts the job's next tick after `after_ms` into the wheel.
    fn schedule_next(&mut self, name: &Arc<str>, after_ms: u64) {
        let Some(entry) = self.jobs.get_mut(name) else {
            return;
        };
        if let Some(key) = entry.wheel_key.take() {
            self.wheel.remove(key);
        }
        let Some(next) = entry.schedule.next_after(i64::try_from(after_ms).unwrap_or(i64::MAX)) else {
            tracing::debug!(job = %name, "schedule has no further fire times");
            return;
        };
        let next = u64::try_from(next).unwrap_or(0);
        let ahead = claim_ahead_ms(&self.ctx.config, &entry.spec);
        match self.wheel.insert(next.saturating_sub(ahead), Due::Tick(name.clone(), next)) {
            Ok(key) => entry.wheel_key = Some(key),
            Err(_) => {
                // Due already (the wheel is ahead of `after_ms`): fire it now.
                let now = self.wheel.elapsed_ms();
                self.fire_due(name, next, now);
            }
        }
    }

    /// Fires the tick scheduled at `deadline` (now, or up to `claim_ahead` before it).
    fn fire_due(&mut self, name: &Arc<str>, deadline: u64, now: u64) {
        let Some(entry) = self.jobs.get_mut(name) else {
            return;
        };
        entry.wheel_key = None;
        let spec = entry.spec.clone();
        let job_revision = entry.mod_revision;
        let late_ms = now.saturating_sub(deadline);
        if late_ms > 1_000 {
            tracing::warn!(job = %name, scheduled_ms = deadline, late_ms, "tick fired late (worker paused or overloaded); later ticks missed meanwhile are left to other workers and the sweep");
        }
        // The next tick comes after both this one and now, so a late wake-up never bursts; the
        // ticks passed over are noted for the sweep, which finds them claimed by the other
        // workers, or settles them (`misfire`) when nobody could.
        // (A tick raced ahead, the usual case, passed over nothing: no schedule walk.)
        if now > deadline {
            let (after, until) = (UnixMs::try_from(deadline).unwrap_or(0), UnixMs::try_from(now).unwrap_or(0));
            if let Some(first) = entry.schedule.next_after(after).filter(|t| *t <= until) {
                self.ctx.unsettled.note_job(name, first, until);
            }
        }
        self.schedule_next(name, deadline.max(now));
        // A paused (or disabled) job keeps ticking in the wheel so each tick is recorded
        // `skipped`; whether it runs is decided here, when the tick fires, by the one rule.
        let scheduled_ms = UnixMs::try_from(deadline).unwrap_or(0);
        let skip = halt(&spec, self.ctx.paused.get(name).as_ref())
            .map(|h| h.reason())
            .or_else(|| self.ctx.calendars.skip_reason(name, &spec, scheduled_ms));
        self.spawn_parts(Fire::schedule_tick(name, (spec, job_revision), scheduled_ms, skip));
    }

    /// Starts one execution task per part of the fire: one for a single job, one per shard, and
    /// this worker's own for a broadcast job. A fire that names a part already (a retry of one
    /// shard) runs as it is.
    fn spawn_parts(&self, fire: Fire) {
        if fire.id.part != Part::Whole || fire.id.attempt != 1 {
            etcron_common::task::spawn(run_fire(self.ctx.clone(), fire));
            return;
        }
        match fire.spec.mode {
            Mode::Single => {
                etcron_common::task::spawn(run_fire(self.ctx.clone(), fire));
            }
            Mode::Broadcast => {
                let mut fire = fire;
                fire.id.part = Part::Worker(self.ctx.config.worker_id.clone());
                etcron_common::task::spawn(run_fire(self.ctx.clone(), fire));
            }
            Mode::Sharded(n) => {
                for i in 0..n {
                    let mut part = fire.clone();
                    part.id.part = Part::Shard(i);
                    etcron_common::task::spawn(run_fire(self.ctx.clone(), part));
                }
            }
        }
    }

    fn apply_job_update(&mut self, update: Update) {
        match update {
            Update::Snapshot { kvs, revision } => {
                let known: etcron_common::hash::HashSet<Arc<str>> = self.jobs.keys().cloned().collect();
                let mut seen = etcron_common::hash::HashSet::default();
                for kv in kvs {
                    if let Some(name) = self.upsert(&kv, true) {
                        seen.insert(name);
                    }
                }
                let added: Vec<String> = seen.difference(&known).map(ToString::to_string).collect();
                if !added.is_empty() {
                    // Ticks before now are not in the wheel: the catch-up scan accounts for
                    // those that nobody claimed while this worker was away.
                    let upto = UnixMs::try_from(self.wheel.elapsed_ms().max(wall_ms())).unwrap_or(0);
                    etcron_common::task::spawn(crate::ledger::catchup::scan(self.ctx.clone(), added, upto, revision));
                }
                let gone: Vec<Arc<str>> = self.jobs.keys().filter(|n| !seen.contains(*n)).cloned().collect();
                for name in gone {
                    self.remove(&name);
                }
                self.schedules.prune();
                self.ctx.jobs.mark_loaded();
                tracing::info!(jobs = self.jobs.len(), schedules = self.schedules.len(), revision, "job list loaded");
                crate::metrics::METRICS.jobs_revision.set(revision);
            }
            Update::Put(kv) => {
                self.upsert(&kv, false);
                self.prune_schedules();
                crate::metrics::METRICS.jobs_revision.set(kv.mod_revision);
            }
            Update::Delete { key, mod_revision } => {
                if let Some(Key::Job(name)) = self.ctx.keys.parse(&key) {
                    self.remove(&Arc::from(name.as_str()));
                    self.prune_schedules();
                }
                crate::metrics::METRICS.jobs_revision.set(mod_revision);
            }
        }
    }

    /// Drops cached schedules no job uses, once there are many more of them than jobs (so a
    /// stream of edits costs O(1) amortised).
    fn prune_schedules(&mut self) {
        if self.schedules.len() > 1_024 && self.schedules.len() > 2 * self.jobs.len() {
            self.schedules.prune();
        }
    }

    fn remove(&mut self, name: &Arc<str>) {
        self.ctx.jobs.set(name, None);
        if let Some(entry) = self.jobs.remove(name) {
            if let Some(key) = entry.wheel_key {
                self.wheel.remove(key);
            }
            tracing::info!(job = %name, "job removed");
        }
    }

    /// Adds or replaces a job from its etcd value; returns its name when the key is a job key.
    /// `listed`: part of a (re-)list, logged per job at debug level only (the list is logged
    /// once; 100 000 lines would slow a worker's start).
    fn upsert(&mut self, kv: &Kv, listed: bool) -> Option<Arc<str>> {
        let Some(Key::Job(name)) = self.ctx.keys.parse(&kv.key) else {
            tracing::error!(
                key = %String::from_utf8_lossy(&kv.key),
                "key under the jobs prefix is not a job (names match ^[a-z0-9][a-z0-9._-]{{0,127}}$); ignored"
            );
            return None;
        };
        let name: Arc<str> = Arc::from(name.as_str());
        if self.jobs.get(&name).is_some_and(|e| e.mod_revision >= kv.mod_revision) {
            return Some(name);
        }
        let (spec, schedule) = match JobSpec::from_json_cached(&kv.value, &name, &mut self.schedules) {
            Ok(parsed) => parsed,
            Err(e) => {
                tracing::error!(job = %name, key = %String::from_utf8_lossy(&kv.key), mod_revision = kv.mod_revision, bytes = kv.value.len(), error = %e, "job spec in etcd is invalid; job not scheduled until it is fixed");
                self.remove(&name);
                return None;
            }
        };
        let now = self.wheel.elapsed_ms().max(wall_ms());
        match self.jobs.get_mut(&name) {
            Some(entry) => {
                let timing_same = entry.spec.same_timing(&spec);
                entry.spec = Arc::new(spec);
                let timing_since_ms = match self.ctx.jobs.get(&name) {
                    Some(old) if timing_same => old.timing_since_ms,
                    _ => etcron_model::now_ms(),
                };
                let job = JobRef { spec: entry.spec.clone(), mod_revision: kv.mod_revision, timing_since_ms };
                self.ctx.jobs.set(&name, Some(job));
                entry.schedule = schedule;
                entry.mod_revision = kv.mod_revision;
                if listed {
                    tracing::debug!(job = %name, mod_revision = kv.mod_revision, "job updated");
                } else {
                    tracing::info!(job = %name, mod_revision = kv.mod_revision, "job updated");
                }
                if timing_same && entry.wheel_key.is_some() {
                    // The pending tick stays; it runs with the new spec.
                    return Some(name);
                }
            }
            None => {
                let spec = Arc::new(spec);
                // Seen appear while this worker ran: its timing starts now. In the first listing
                // of a worker that just started: unknown (the sweeps ask etcd when it was made).
                let timing_since_ms =
                    if self.ctx.jobs.loaded() { etcron_model::now_ms() } else { crate::context::TIMING_UNKNOWN };
                let job = JobRef { spec: spec.clone(), mod_revision: kv.mod_revision, timing_since_ms };
                self.ctx.jobs.set(&name, Some(job));
                self.jobs
                    .insert(name.clone(), JobEntry { spec, schedule, mod_revision: kv.mod_revision, wheel_key: None });
                if listed {
                    tracing::debug!(job = %name, mod_revision = kv.mod_revision, "job added");
                } else {
                    tracing::info!(job = %name, mod_revision = kv.mod_revision, "job added");
                }
                self.run_early_triggers(&name);
            }
        }
        self.schedule_next(&name, now);
        Some(name)
    }

    /// Applies a change of `{ns}/paused/`. The key's existence is the pause: a value that does
    /// not parse is logged and counts as a pause by someone unknown (fail safe).
    fn apply_pause_update(&mut self, update: Update) {
        match update {
            Update::Snapshot { kvs, revision } => {
                let mut all = HashMap::default();
                for kv in kvs {
                    if let Some((job, pause)) = self.parse_pause(&kv) {
                        all.insert(job, pause);
                    }
                }
                tracing::info!(paused = all.len(), revision, "paused jobs listed");
                self.ctx.paused.replace(all);
            }
            Update::Put(kv) => {
                if let Some((job, pause)) = self.parse_pause(&kv) {
                    tracing::info!(job = %job, by = pause.by.as_deref().unwrap_or("unknown"), reason = pause.reason.as_deref().unwrap_or(""), mod_revision = kv.mod_revision, "job paused");
                    self.ctx.paused.set(&job, Some(pause));
                }
            }
            Update::Delete { key, mod_revision } => {
                if let Some(Key::Paused(job)) = self.ctx.keys.parse(&key) {
                    if self.ctx.paused.set(&job, None) {
                        tracing::info!(job = %job, mod_revision, "job resumed");
                    }
                }
            }
        }
    }

    /// A key under `{ns}/paused/` as (job, pause); `None` (logged) when the key names no job.
    fn parse_pause(&self, kv: &Kv) -> Option<(String, Pause)> {
        let Some(Key::Paused(job)) = self.ctx.keys.parse(&kv.key) else {
            tracing::error!(
                key = %String::from_utf8_lossy(&kv.key),
                "key under the paused prefix is not a job's pause (names match ^[a-z0-9][a-z0-9._-]{{0,127}}$); ignored"
            );
            return None;
        };
        let pause = Pause::from_bytes(&kv.value).unwrap_or_else(|e| {
            tracing::error!(
                job = %job,
                key = %String::from_utf8_lossy(&kv.key),
                error = %e,
                "pause in etcd is malformed; the job counts as paused (by someone unknown) all the same"
            );
            Pause::default()
        });
        Some((job, pause))
    }

    fn apply_trigger_update(&mut self, update: Update) {
        match update {
            Update::Snapshot { kvs, .. } => {
                let listed: etcron_common::hash::HashSet<Vec<u8>> = kvs.iter().map(|kv| kv.key.clone()).collect();
                let gone: Vec<Arc<str>> =
                    self.pending.keys().filter(|k| !listed.contains(k.as_bytes())).cloned().collect();
                for key in gone {
                    self.forget_request(&key);
                }
                for kv in kvs {
                    if !self.pending.contains_key(String::from_utf8_lossy(&kv.key).as_ref()) {
                        self.trigger(&kv);
                    }
                }
            }
            Update::Put(kv) => self.trigger(&kv),
            Update::Delete { key, .. } => self.forget_request(String::from_utf8_lossy(&key).as_ref()),
        }
    }

    /// A request that was claimed (or withdrawn) leaves the wheel.
    fn forget_request(&mut self, key: &str) {
        if let Some(p) = self.pending.remove(key) {
            if let Some(k) = p.wheel_key {
                self.wheel.remove(k);
            }
        }
    }

    fn trigger(&mut self, kv: &Kv) {
        let Some(Key::Trigger { job, request_id }) = self.ctx.keys.parse(&kv.key) else {
            tracing::error!(key = %String::from_utf8_lossy(&kv.key), "key under the trigger prefix is not a run request key; ignored");
            return;
        };
        let request: TriggerRequest = match serde_json::from_slice(&kv.value) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(job = %job, request_id = %request_id, key = %String::from_utf8_lossy(&kv.key), error = %e, "run request in etcd is malformed; ignored");
                return;
            }
        };
        if !self.jobs.contains_key(job.as_str()) {
            self.early_triggers.retain(|(at, ..)| at.elapsed() < EARLY_TRIGGER_WAIT);
            if self.early_triggers.len() >= MAX_EARLY_TRIGGERS {
                tracing::error!(job = %job, request_id = %request_id, "too many run requests waiting for unknown jobs; this worker ignores this one");
                return;
            }
            tracing::info!(job = %job, request_id = %request_id, "run requested before this worker saw the job; holding it");
            self.early_triggers.push((tokio::time::Instant::now(), job, request_id, request));
            return;
        }
        self.add_request(job, request_id, request);
    }

    fn add_request(&mut self, job: String, request_id: String, request: TriggerRequest) {
        let key: Arc<str> = Arc::from(self.ctx.keys.trigger(&job, &request_id).as_str());
        self.forget_request(&key);
        self.pending.insert(key.clone(), Pending { job, request_id, request, wheel_key: None });
        self.schedule_request(&key);
    }

    /// A request whose claim's outcome stayed unknown (etcd did not answer, or had not applied
    /// it): it is still pending until its key goes, and nothing else fires it again before the
    /// request mirror re-lists. Raced for again, under the same execution id, a little later.
    fn race_again(&mut self, key: &str, now: u64) {
        let Some(key) = self.pending.get_key_value(key).map(|(k, _)| k.clone()) else { return };
        let at = now + RACE_AGAIN_AFTER_MS;
        let Some(p) = self.pending.get_mut(&key) else { return };
        if p.wheel_key.is_some() {
            return;
        }
        if let Ok(k) = self.wheel.insert(at, Due::Request(key)) {
            p.wheel_key = Some(k);
        }
    }

    /// Puts a pending request into the wheel at its `not_before_ms`, or runs it when due.
    fn schedule_request(&mut self, key: &Arc<str>) {
        let Some(p) = self.pending.get_mut(key) else { return };
        let at = u64::try_from(p.request.not_before_ms.unwrap_or(0)).unwrap_or(0);
        match self.wheel.insert(at, Due::Request(key.clone())) {
            Ok(k) => p.wheel_key = Some(k),
            Err(_) => self.request_due(key),
        }
    }

    /// Runs the held requests of a job that just arrived.
    fn run_early_triggers(&mut self, name: &str) {
        let (mine, rest): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.early_triggers).into_iter().partition(|(_, job, ..)| job == name);
        self.early_triggers = rest;
        for (at, job, request_id, request) in mine {
            if at.elapsed() < EARLY_TRIGGER_WAIT {
                self.add_request(job, request_id, request);
            }
        }
    }

    /// A request's time has come: race for the execution it names. It stays pending (known
    /// by key) until its key is deleted by whoever claims it.
    fn request_due(&mut self, key: &Arc<str>) {
        let Some(p) = self.pending.get_mut(key) else { return };
        p.wheel_key = None;
        let Some(entry) = self.jobs.get(p.job.as_str()) else { return };
        let request = &p.request;
        let id = request.execution(&p.job, &p.request_id);
        // Manual runs and backfills (with their retries and failover reruns) work on paused jobs:
        // an operator asked, and a backfill's ticks left out the skip calendars' dates when it
        // was made. Other retries, dependency runs and catch-up runs of a paused (or disabled)
        // job are recorded `skipped`.
        // A queued execution was fired before any pause: it runs, as a tick raced ahead would.
        let asked = matches!(request.kind, TriggerKind::Manual | TriggerKind::Backfill)
            || request.params.backfill.is_some()
            || request.dequeued;
        let skip = match halt(&entry.spec, self.ctx.paused.get(&p.job).as_ref()) {
            Some(h) if !asked => Some(format!("{}; {} run not started", h.reason(), request.kind.as_str())),
            // A catch-up run is a missed tick's: its date counts as the tick's would have.
            None if request.kind == TriggerKind::Catchup && !request.dequeued => {
                let tick = request.scheduled_ms.unwrap_or(request.requested_at_ms);
                self.ctx.calendars.skip_reason(&p.job, &entry.spec, tick)
            }
            _ => None,
        };
        let fire = Fire {
            id,
            spec: entry.spec.clone(),
            job_revision: entry.mod_revision,
            scheduled_ms: request.scheduled_ms.unwrap_or(request.requested_at_ms),
            trigger: request.kind,
            skip,
            request_key: Some(key.to_string()),
            parent: request.parent.clone(),
            then: request.then.clone(),
            params: request.params.clone(),
            dequeued: request.dequeued,
            avoid: request.avoid.clone(),
        };
        self.spawn_parts(fire);
    }
}
