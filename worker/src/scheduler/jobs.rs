//! The scheduler's mirror of `{ns}/jobs/`: each job's parsed spec and schedule, and its next
//! tick in the wheel. A tick that comes due is fired here, as one [`Fire`] per tick.

use std::sync::Arc;

use etcron_model::keys::Key;
use etcron_model::schedule::Schedule;
use etcron_model::spec::{Concurrency, JobSpec};
use etcron_model::stored::halt;
use etcron_model::UnixMs;

use super::{wall_ms, Due, Scheduler};
use crate::cluster::watcher::{Kv, Mirror};
use crate::context::spec_bytes::SpecBytes;
use crate::context::Known;
use crate::timing::fire::Fire;
use crate::timing::wheel::EntryKey;

/// A job as the scheduler holds it: its spec as bytes (decoded when a tick fires), its parsed
/// schedule (shared with the other jobs of the same schedule) and its place in the wheel.
pub(super) struct JobEntry {
    pub(super) spec: SpecBytes,
    schedule: Schedule,
    pub(super) mod_revision: i64,
    pub(super) wheel_key: Option<EntryKey>,
    /// Its runs may overlap (`concurrency: allow`): its race starts `claim_ahead` early.
    claims_ahead: bool,
}

/// How long before a tick this job's race for it starts: `claim_ahead` for jobs whose runs may
/// overlap (`concurrency: allow`); none for `forbid`/`replace`, whose lock must be taken when the
/// tick is due (claiming early could find the previous run still going, or kill it early).
fn claim_ahead_ms(config: &crate::config::Config, entry: &JobEntry) -> u64 {
    if entry.claims_ahead {
        u64::try_from(config.claim_ahead.as_millis()).unwrap_or(0)
    } else {
        0
    }
}

/// The scheduler seen as the mirror of `{ns}/jobs/`.
pub(super) struct Jobs<'a>(pub(super) &'a mut Scheduler);

impl Mirror for Jobs<'_> {
    fn listed(&mut self, kvs: Vec<Kv>, revision: i64) {
        let s = &mut *self.0;
        let known: etcron_common::hash::HashSet<Arc<str>> = s.jobs.keys().cloned().collect();
        let mut seen = etcron_common::hash::HashSet::default();
        for kv in kvs {
            if let Some(name) = s.upsert(&kv, true) {
                seen.insert(name);
            }
        }
        let added: Vec<String> = seen.difference(&known).map(ToString::to_string).collect();
        if !added.is_empty() {
            // Ticks before now are not in the wheel: the catch-up scan accounts for
            // those that nobody claimed while this worker was away.
            let upto = UnixMs::try_from(s.wheel.elapsed_ms().max(wall_ms())).unwrap_or(0);
            etcron_common::task::spawn(crate::ledger::catchup::scan(s.ctx.clone(), added, upto, revision));
        }
        let gone: Vec<Arc<str>> = s.jobs.keys().filter(|n| !seen.contains(*n)).cloned().collect();
        for name in gone {
            s.remove(&name);
        }
        s.schedules.prune();
        s.ctx.jobs.mark_loaded();
        tracing::info!(jobs = s.jobs.len(), schedules = s.schedules.len(), revision, "job list loaded");
        crate::metrics::METRICS.jobs_revision.set(revision);
    }

    fn put(&mut self, kv: Kv) {
        self.0.upsert(&kv, false);
        self.0.prune_schedules();
        crate::metrics::METRICS.jobs_revision.set(kv.mod_revision);
    }

    fn deleted(&mut self, key: Vec<u8>, mod_revision: i64) {
        if let Some(Key::Job(name)) = self.0.ctx.keys.parse(&key) {
            self.0.remove(&Arc::from(name.as_str()));
            self.0.prune_schedules();
        }
        crate::metrics::METRICS.jobs_revision.set(mod_revision);
    }
}

impl Scheduler {
    /// Puts the job's next tick after `after_ms` into the wheel.
    pub(super) fn schedule_next(&mut self, name: &Arc<str>, after_ms: u64) {
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
        let ahead = claim_ahead_ms(&self.ctx.config, entry);
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
    pub(super) fn fire_due(&mut self, name: &Arc<str>, deadline: u64, now: u64) {
        let Some(entry) = self.jobs.get_mut(name) else {
            return;
        };
        entry.wheel_key = None;
        let Some(spec) = entry.spec.decode(name) else {
            // Said and counted by `decode`; later ticks try again.
            self.schedule_next(name, deadline.max(now));
            return;
        };
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
        let bytes = SpecBytes::accepted(&kv.value);
        let claims_ahead = spec.concurrency == Concurrency::Allow;
        match self.jobs.get_mut(&name) {
            Some(entry) => {
                let timing_same = entry.spec.decode(&name).is_some_and(|old| old.same_timing(&spec));
                entry.spec = bytes.clone();
                let timing_since_ms = match self.ctx.jobs.timing_since(&name) {
                    Some(old) if timing_same => old,
                    _ => etcron_model::now_ms(),
                };
                let known = Known { spec: bytes, mod_revision: kv.mod_revision, timing_since_ms };
                self.ctx.jobs.set(&name, Some((known, &spec)));
                entry.schedule = schedule;
                entry.mod_revision = kv.mod_revision;
                entry.claims_ahead = claims_ahead;
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
                // Seen appear while this worker ran: its timing starts now. In the first listing
                // of a worker that just started: unknown (the sweeps ask etcd when it was made).
                let timing_since_ms =
                    if self.ctx.jobs.loaded() { etcron_model::now_ms() } else { crate::context::TIMING_UNKNOWN };
                let known = Known { spec: bytes.clone(), mod_revision: kv.mod_revision, timing_since_ms };
                self.ctx.jobs.set(&name, Some((known, &spec)));
                let entry =
                    JobEntry { spec: bytes, schedule, mod_revision: kv.mod_revision, wheel_key: None, claims_ahead };
                self.jobs.insert(name.clone(), entry);
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
}
