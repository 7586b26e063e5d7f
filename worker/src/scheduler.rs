//! The scheduler: the one task that owns the timing wheel. It applies the watchers' updates to
//! its three mirrors — jobs (`jobs`), run requests (`requests`) and pauses (`pauses`) —, sleeps
//! until the wheel's next expiration, and hands every due tick to a fresh execution task. It
//! never blocks on etcd.

use etcron_common::hash::HashMap;
use std::sync::Arc;
use std::time::Duration;

use etcron_model::keys::Part;
use etcron_model::now_ms;
use etcron_model::schedule::ScheduleCache;
use etcron_model::spec::Mode;
use tokio::sync::{mpsc, watch};

use crate::cluster::watcher::Update;
use crate::context::Context;
use crate::fire::execution::run_fire;
use crate::timing::fire::Fire;
use crate::timing::wheel::Wheel;

mod jobs;
mod pauses;
mod requests;

/// Longest sleep between looks at the wall clock (so clock jumps are noticed).
const MAX_SLEEP: Duration = Duration::from_millis(500);
/// A wall clock this far behind the wheel counts as a backwards jump: rebuild the wheel.
const BACKWARD_JUMP_MS: u64 = 1_000;

/// What a wheel entry stands for.
#[derive(Debug, Clone)]
enum Due {
    /// The next schedule tick of a job, at its scheduled time (the wheel holds it `claim_ahead`
    /// earlier for jobs that may claim ahead).
    Tick(Arc<str>, u64),
    /// A run request whose `not_before_ms` has not come yet (a retry's backoff), by key.
    Request(Arc<str>),
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

pub struct Scheduler {
    ctx: Arc<Context>,
    wheel: Wheel<Due>,
    jobs: HashMap<Arc<str>, jobs::JobEntry>,
    /// Run requests known by key.
    requests: HashMap<Arc<str>, requests::WaitingRequest>,
    /// One parsed copy of each distinct schedule the jobs use.
    schedules: ScheduleCache,
    /// Manual-run requests that arrived before their job.
    early_triggers: Vec<requests::EarlyTrigger>,
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
            requests: HashMap::default(),
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
                Some(update) => update.apply(&mut pauses::Pauses(&self.ctx)),
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
                Some(update) = paused.recv() => update.apply(&mut pauses::Pauses(&self.ctx)),
                Some(update) = calendars.recv() => self.ctx.calendars.apply(&self.ctx.keys, update),
                Some(update) = jobs.recv() => update.apply(&mut jobs::Jobs(&mut self)),
                Some(update) = triggers.recv() => update.apply(&mut requests::Requests(&mut self)),
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
        let keys: Vec<Arc<str>> = self.requests.keys().cloned().collect();
        for key in keys {
            if let Some(p) = self.requests.get_mut(&key) {
                p.wheel_key = None;
            }
            self.schedule_request(&key);
        }
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
}
