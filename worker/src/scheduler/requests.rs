//! The scheduler's mirror of `{ns}/trigger/`: run requests (manual runs, retries, dependency,
//! catch-up, failover and backfill runs) waiting in the wheel for their `not_before_ms`, raced
//! for when due. A request stays known by key until whoever claims it deletes the key.

use std::sync::Arc;
use std::time::Duration;

use etcron_model::keys::Key;
use etcron_model::record::TriggerKind;
use etcron_model::stored::{halt, TriggerRequest};

use super::{Due, Scheduler};
use crate::cluster::watcher::{Kv, Mirror};
use crate::timing::fire::Fire;
use crate::timing::wheel::EntryKey;

/// How long after a claim of unknown outcome its run request is raced for again.
const RACE_AGAIN_AFTER_MS: u64 = 5_000;
/// How long a trigger waits for its job: the lifetime of a trigger key.
const EARLY_TRIGGER_WAIT: Duration = Duration::from_secs(60);
/// Most triggers waiting for their jobs.
const MAX_EARLY_TRIGGERS: usize = 10_000;

/// A run request waiting in the wheel.
pub(super) struct WaitingRequest {
    job: String,
    request_id: String,
    request: TriggerRequest,
    pub(super) wheel_key: Option<EntryKey>,
}

/// A manual-run request that arrived before its job: triggers and jobs come on separate watch
/// streams, so a brand-new job's trigger can overtake it.
pub(super) type EarlyTrigger = (tokio::time::Instant, String, String, TriggerRequest);

/// The scheduler seen as the mirror of `{ns}/trigger/`.
pub(super) struct Requests<'a>(pub(super) &'a mut Scheduler);

impl Mirror for Requests<'_> {
    fn listed(&mut self, kvs: Vec<Kv>, _revision: i64) {
        let s = &mut *self.0;
        let listed: etcron_common::hash::HashSet<Vec<u8>> = kvs.iter().map(|kv| kv.key.clone()).collect();
        let gone: Vec<Arc<str>> = s.requests.keys().filter(|k| !listed.contains(k.as_bytes())).cloned().collect();
        for key in gone {
            s.forget_request(&key);
        }
        for kv in kvs {
            if !s.requests.contains_key(String::from_utf8_lossy(&kv.key).as_ref()) {
                s.trigger(&kv);
            }
        }
    }

    fn put(&mut self, kv: Kv) {
        self.0.trigger(&kv);
    }

    fn deleted(&mut self, key: Vec<u8>, _mod_revision: i64) {
        self.0.forget_request(String::from_utf8_lossy(&key).as_ref());
    }
}

impl Scheduler {
    /// A request that was claimed (or withdrawn) leaves the wheel.
    fn forget_request(&mut self, key: &str) {
        if let Some(p) = self.requests.remove(key) {
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
        self.requests.insert(key.clone(), WaitingRequest { job, request_id, request, wheel_key: None });
        self.schedule_request(&key);
    }

    /// A request whose claim's outcome stayed unknown (etcd did not answer, or had not applied
    /// it): it is still pending until its key goes, and nothing else fires it again before the
    /// request mirror re-lists. Raced for again, under the same execution id, a little later.
    pub(super) fn race_again(&mut self, key: &str, now: u64) {
        let Some(key) = self.requests.get_key_value(key).map(|(k, _)| k.clone()) else { return };
        let at = now + RACE_AGAIN_AFTER_MS;
        let Some(p) = self.requests.get_mut(&key) else { return };
        if p.wheel_key.is_some() {
            return;
        }
        if let Ok(k) = self.wheel.insert(at, Due::Request(key)) {
            p.wheel_key = Some(k);
        }
    }

    /// Puts a pending request into the wheel at its `not_before_ms`, or runs it when due.
    pub(super) fn schedule_request(&mut self, key: &Arc<str>) {
        let Some(p) = self.requests.get_mut(key) else { return };
        let at = u64::try_from(p.request.not_before_ms.unwrap_or(0)).unwrap_or(0);
        match self.wheel.insert(at, Due::Request(key.clone())) {
            Ok(k) => p.wheel_key = Some(k),
            Err(_) => self.request_due(key),
        }
    }

    /// Runs the held requests of a job that just arrived.
    pub(super) fn run_early_triggers(&mut self, name: &str) {
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
    pub(super) fn request_due(&mut self, key: &Arc<str>) {
        let Some(p) = self.requests.get_mut(key) else { return };
        p.wheel_key = None;
        let Some(entry) = self.jobs.get(p.job.as_str()) else { return };
        // Said and counted by `decode` when it fails; the request stays for another worker.
        let Some(spec) = entry.spec.decode(&p.job) else { return };
        let request = &p.request;
        // Manual runs and backfills (with their retries and failover reruns) work on paused jobs:
        // an operator asked, and a backfill's ticks left out the skip calendars' dates when it
        // was made. Other retries, dependency runs and catch-up runs of a paused (or disabled)
        // job are recorded `skipped`.
        // A queued execution was fired before any pause: it runs, as a tick raced ahead would.
        let asked = matches!(request.kind, TriggerKind::Manual | TriggerKind::Backfill)
            || request.params.backfill.is_some()
            || request.dequeued;
        let skip = match halt(&spec, self.ctx.paused.get(&p.job).as_ref()) {
            Some(h) if !asked => Some(format!("{}; {} run not started", h.reason(), request.kind.as_str())),
            // A catch-up run is a missed tick's: its date counts as the tick's would have.
            None if request.kind == TriggerKind::Catchup && !request.dequeued => {
                let tick = request.scheduled_ms.unwrap_or(request.requested_at_ms);
                self.ctx.calendars.skip_reason(&p.job, &spec, tick)
            }
            _ => None,
        };
        let fire = Fire::requested(key, (&p.job, &p.request_id, request), (spec, entry.mod_revision), skip);
        self.spawn_parts(fire);
    }
}
