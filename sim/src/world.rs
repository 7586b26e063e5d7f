//! The simulated cluster: workers as step machines over the in-memory etcd, a clock that only
//! moves from event to event, and every choice (delays, crashes, lost answers, stalls, freezes,
//! task durations) drawn from one seeded RNG. Each worker step does one externally visible
//! thing (an etcd call, a journal append), and a worker may crash before any step, so every
//! crash point between two of them is reachable.

use std::collections::{BTreeMap, BTreeSet};

use crate::etcd::{Etcd, LeaseId, Txn};
use crate::machine::{self, claim_key, Exec, Outcome, Value};
use crate::rng::Rng;

/// Bugs the simulation must find, each re-introduced on its own (all off: the protocol as
/// built).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Holes {
    /// A claim whose answer was lost is taken as lost, not read back: committed during a stall,
    /// it is orphaned.
    pub unknown_claim_dropped: bool,
    /// The loss handling journals the lost record after closing the claim.
    pub lost_journaled_after_close: bool,
    /// A requested run whose claim answer was lost is claimed again under a new id.
    pub request_retried_under_new_id: bool,
    /// A not-run record is journaled after its claim is closed, with nothing durable before.
    pub not_run_journaled_after_close: bool,
    /// Only the first-ranked survivor handles a departure.
    pub departure_single_handler: bool,
    /// Ranks 0..=2 handle a departure and nobody else owes it: when they all die midway, the
    /// rest of the departed worker's claims stay taken.
    pub departure_not_owed: bool,
    /// A claim given up on and read again later (the recheck) is closed as an orphan even while
    /// this worker runs it (raced again and won under the same id).
    pub recheck_closes_running: bool,
}

impl Holes {
    /// The hole named `name` (as the `--hole` flag takes it).
    #[must_use]
    pub fn named(name: &str) -> Option<Self> {
        let mut h = Self::default();
        match name {
            "unknown-claim-dropped" => h.unknown_claim_dropped = true,
            "lost-journaled-after-close" => h.lost_journaled_after_close = true,
            "request-retried-under-new-id" => h.request_retried_under_new_id = true,
            "not-run-journaled-after-close" => h.not_run_journaled_after_close = true,
            "departure-single-handler" => h.departure_single_handler = true,
            "departure-not-owed" => h.departure_not_owed = true,
            "recheck-closes-running" => h.recheck_closes_running = true,
            _ => return None,
        }
        Some(h)
    }

    pub const NAMES: [&'static str; 7] = [
        "unknown-claim-dropped",
        "lost-journaled-after-close",
        "request-retried-under-new-id",
        "not-run-journaled-after-close",
        "departure-single-handler",
        "departure-not-owed",
        "recheck-closes-running",
    ];
}

/// The shape of one simulated run.
#[derive(Debug, Clone)]
pub struct Params {
    pub workers: usize,
    pub jobs: u32,
    /// Ticks every this many ms, from 1 s to `end_ms`.
    pub period_ms: u64,
    pub end_ms: u64,
    pub ttl_ms: u64,
    pub holes: Holes,
}

impl Default for Params {
    fn default() -> Self {
        Self { workers: 3, jobs: 3, period_ms: 2_000, end_ms: 30_000, ttl_ms: 3_000, holes: Holes::default() }
    }
}

const STAGGER_MS: u64 = 50;
const MISSED_AFTER_MS: u64 = 5_000;
/// A tick's claim is sent again (its answer lost, nothing found when read back) only this soon
/// after the tick (the worker's bound is the job's start deadline).
const CLAIM_AGAIN_WITHIN_MS: u64 = 3_000;
const RESUME_MS: u64 = 4_000;
const MAX_ATTEMPTS: u32 = 4;
const LOSS_HANDLERS: usize = 3;
/// Per-mille chances per worker step.
const CRASH: u64 = 6;
const LOST_ANSWER: u64 = 30;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    Tick {
        job: u32,
        t: u64,
    },
    Race {
        w: usize,
        inc: u32,
        e: Exec,
        requested: bool,
        tries: u32,
    },
    ReadBack {
        w: usize,
        inc: u32,
        e: Exec,
        requested: bool,
        key: String,
        /// Claims of this execution sent so far by this worker's race (1: the first).
        tries: u32,
        /// The later look at a claim given up on (`worker/src/fire/race.rs` `recheck_unknown_claim`).
        recheck: bool,
    },
    /// A transaction a stalled etcd took and applies late, after the stall (its sender heard
    /// nothing and may have read the key back meanwhile).
    Apply {
        txn: Txn,
    },
    TaskEnd {
        w: usize,
        inc: u32,
        e: Exec,
        run: usize,
    },
    Journal {
        w: usize,
        inc: u32,
        e: Exec,
        outcome: Outcome,
        replace: bool,
    },
    Close {
        w: usize,
        inc: u32,
        e: Exec,
        token: i64,
        outcome: Outcome,
    },
    KeepAlive {
        w: usize,
        inc: u32,
    },
    Lose {
        w: usize,
        inc: u32,
        items: Vec<(Exec, i64)>,
        phase: u8,
        /// The departure (its session) whose done marker goes once `items` are settled.
        of: LeaseId,
    },
    /// A departure this survivor owes: handled when its rank (among the workers whose session
    /// lives, re-ranked each look) is under `LOSS_HANDLERS` and its turn came, unless its done
    /// marker is there.
    Owe {
        w: usize,
        inc: u32,
        of: LeaseId,
        /// When its turns are counted from (the grace's end).
        since: u64,
        first_rank: usize,
    },
    NotRun {
        w: usize,
        inc: u32,
        e: Exec,
        phase: u8,
        orphan: Option<i64>,
    },
    Flush {
        w: usize,
        inc: u32,
    },
    Crash {
        w: usize,
    },
    Restart {
        w: usize,
    },
    Freeze {
        w: usize,
        until: u64,
    },
    Stall {
        until: u64,
    },
}

#[derive(Debug, Default)]
struct Worker {
    alive: bool,
    inc: u32,
    session: Option<LeaseId>,
    frozen_until: u64,
    /// Durable: records appended, not yet in MongoDB (outcome, replace?).
    journal: Vec<(Exec, Outcome, bool)>,
    /// Durable: not-run records written before their claim's close.
    provisional: BTreeMap<Exec, Option<i64>>,
    /// Durable: departures seen and not yet seen handled, with what the departed session held
    /// (the worker reads that from etcd's history at the departure's revision).
    owed: BTreeMap<LeaseId, Vec<(Exec, i64)>>,
    /// Durable: its last session (a restart owes its departure when it ended meanwhile).
    last_session: Option<LeaseId>,
    /// Runs of this incarnation: exec → (index into `runs`, token, session).
    tasks: BTreeMap<Exec, (usize, i64, LeaseId)>,
}

/// One started task: what ran where, and when it was alive.
#[derive(Debug, Clone)]
pub struct Run {
    pub e: Exec,
    pub worker: usize,
    pub start: u64,
    pub end: Option<u64>,
    session: LeaseId,
}

/// What a seed did, for the invariants and a failing seed's trace.
#[derive(Debug, Default)]
pub struct Outcomes {
    pub runs: Vec<Run>,
    pub records: BTreeMap<Exec, Outcome>,
    pub ticks: BTreeSet<(u32, u64)>,
    pub claims: BTreeMap<String, Value>,
    pub requests_left: Vec<String>,
    pub trace: Vec<String>,
}

pub struct World {
    p: Params,
    rng: Rng,
    now: u64,
    seq: u64,
    events: BTreeMap<(u64, u64), Ev>,
    etcd: Etcd,
    stalled_until: u64,
    workers: Vec<Worker>,
    session_owner: BTreeMap<LeaseId, usize>,
    /// What each ended session held (etcd's history at its expiry).
    held_by: BTreeMap<LeaseId, Vec<(Exec, i64)>>,
    out: Outcomes,
}

impl World {
    #[must_use]
    pub fn new(seed: u64, p: Params) -> Self {
        let mut w = Self {
            rng: Rng::new(seed),
            now: 0,
            seq: 0,
            events: BTreeMap::new(),
            etcd: Etcd::default(),
            stalled_until: 0,
            workers: (0..p.workers).map(|_| Worker::default()).collect(),
            session_owner: BTreeMap::new(),
            held_by: BTreeMap::new(),
            out: Outcomes::default(),
            p,
        };
        for i in 0..w.p.workers {
            w.start_worker(i);
        }
        for job in 0..w.p.jobs {
            let first = 1_000 + w.rng.below(w.p.period_ms);
            w.at(first, Ev::Tick { job, t: first });
        }
        // Faults: crashes, freezes, stalls of etcd, at random moments of the window.
        for _ in 0..w.rng.between(0, 2) {
            let (at, wk) = (w.rng.between(2_000, w.p.end_ms), w.rng.below(w.p.workers as u64) as usize);
            w.at(at, Ev::Crash { w: wk });
        }
        for _ in 0..w.rng.between(0, 1) {
            let (at, wk) = (w.rng.between(2_000, w.p.end_ms), w.rng.below(w.p.workers as u64) as usize);
            let until = at + w.rng.between(500, 3 * w.p.ttl_ms);
            w.at(at, Ev::Freeze { w: wk, until });
        }
        for _ in 0..w.rng.between(0, 1) {
            let at = w.rng.between(2_000, w.p.end_ms);
            let until = at + w.rng.between(200, 2 * w.p.ttl_ms);
            w.at(at, Ev::Stall { until });
        }
        w
    }

    fn at(&mut self, time: u64, ev: Ev) {
        self.seq += 1;
        self.events.insert((time.max(self.now), self.seq), ev);
    }

    fn note(&mut self, s: String) {
        self.out.trace.push(format!("{:>7} {s}", self.now));
    }

    fn start_worker(&mut self, i: usize) {
        let lease = self.etcd.grant(self.now, self.p.ttl_ms);
        self.session_owner.insert(lease, i);
        let w = &mut self.workers[i];
        w.alive = true;
        w.inc += 1;
        w.session = Some(lease);
        w.last_session = Some(lease);
        w.tasks.clear();
        let inc = w.inc;
        let keep = self.p.ttl_ms / 3;
        self.at(self.now + keep, Ev::KeepAlive { w: i, inc });
        self.at(self.now + 20, Ev::Flush { w: i, inc });
        self.note(format!("w{i} starts (session {lease})"));
    }

    fn stalled(&self) -> bool {
        self.now < self.stalled_until
    }

    /// A worker's transaction: applied or not, and whether the worker hears the answer.
    fn call(&mut self, txn: &Txn) -> Answer {
        if self.stalled() {
            // A stalled etcd may still apply what it was sent, then or once the stall ends;
            // nobody hears back.
            if self.rng.chance(500) {
                let (ok, _) = self.etcd.txn(txn);
                self.watched(txn, ok);
            } else if self.rng.chance(300) {
                let at = self.stalled_until + self.rng.between(1, 400);
                self.at(at, Ev::Apply { txn: txn.clone() });
            }
            return Answer::Unknown;
        }
        let (ok, rev) = self.etcd.txn(txn);
        self.watched(txn, ok);
        if self.rng.chance(LOST_ANSWER) {
            return Answer::Unknown;
        }
        if ok {
            Answer::Done(rev)
        } else {
            Answer::Refused
        }
    }

    /// What the workers' watch of run requests delivers: a request written is raced for.
    fn watched(&mut self, txn: &Txn, applied: bool) {
        if !applied {
            return;
        }
        for op in &txn.then {
            if let crate::etcd::Op::Put { key, value: Value::Request, .. } = op {
                if let Some(e) = parse_exec(key.trim_start_matches("requests/")) {
                    self.race_by_rank(e, true);
                }
            }
        }
    }

    /// A worker's read of one key; `None` when etcd does not answer.
    fn read(&mut self, key: &str) -> Option<Option<(Value, i64, i64)>> {
        if self.stalled() || self.rng.chance(LOST_ANSWER) {
            return None;
        }
        Some(self.etcd.get(key).map(|kv| (kv.value.clone(), kv.create_rev, kv.mod_rev)))
    }

    /// Runs the seed to its end and past it until everything settled.
    #[must_use]
    pub fn run(mut self) -> Outcomes {
        let horizon = self.p.end_ms + 60_000;
        while let Some(((time, _), ev)) = self.events.pop_first() {
            if time > horizon {
                break;
            }
            self.now = time;
            self.expire();
            self.step(ev);
        }
        self.out.claims = self.etcd.range("claims/").map(|(k, kv)| (k.clone(), kv.value.clone())).collect();
        self.out.requests_left = self.etcd.range("requests/").map(|(k, _)| k.clone()).collect();
        self.out
    }

    /// Leases past their TTL go with their keys; a worker's session going ends its tasks (its
    /// keepers kill them at the deadline) and is seen by the others as a departure.
    fn expire(&mut self) {
        if !self.etcd.leases.values().any(|l| l.expires_at <= self.now) {
            return;
        }
        let before: BTreeMap<LeaseId, Vec<(Exec, i64)>> = self
            .etcd
            .leases
            .iter()
            .filter(|(_, l)| l.expires_at <= self.now)
            .map(|(id, _)| {
                let held = self
                    .etcd
                    .kvs
                    .values()
                    .filter(|kv| kv.lease == Some(*id))
                    .filter_map(|kv| match kv.value {
                        Value::Inflight(e) => Some((e, kv.create_rev)),
                        _ => None,
                    })
                    .collect();
                (*id, held)
            })
            .collect();
        if before.is_empty() {
            return;
        }
        let expiry: BTreeMap<LeaseId, u64> =
            before.keys().map(|id| (*id, self.etcd.leases.get(id).map_or(self.now, |l| l.expires_at))).collect();
        self.etcd.expire(self.now);
        for (lease, held) in before {
            let Some(&departed) = self.session_owner.get(&lease) else { continue };
            let at = expiry[&lease];
            // Keepers: the session's tasks die at its deadline, whatever the worker does.
            for run in self.out.runs.iter_mut().filter(|r| r.session == lease && r.end.is_none()) {
                run.end = Some(at);
            }
            self.note(format!("session {lease} of w{departed} expired; held {held:?}"));
            self.held_by.insert(lease, held.clone());
            self.departure(departed, lease, held);
        }
    }

    /// Every survivor owes a departure (durably) until it sees it handled; ranks 0..=2 handle
    /// it (rank r after the grace and r × RESUME_MS), the others move up when those die. With
    /// the holes: rank 0 alone, or ranks 0..=2 alone and owing nothing.
    fn departure(&mut self, departed: usize, lease: LeaseId, held: Vec<(Exec, i64)>) {
        // Every running worker sees the registration go (its own earlier session's too).
        let _ = departed;
        let mut live: Vec<usize> = (0..self.workers.len()).filter(|&i| self.workers[i].alive).collect();
        live.sort_by_key(|&i| hash(lease, i as u64));
        let owing = if self.p.holes.departure_single_handler {
            1
        } else if self.p.holes.departure_not_owed {
            LOSS_HANDLERS
        } else {
            live.len()
        };
        let grace = self.p.ttl_ms.min(5_000);
        for (rank, &w) in live.iter().take(owing).enumerate() {
            let inc = self.workers[w].inc;
            if !self.p.holes.departure_not_owed && !self.p.holes.departure_single_handler {
                self.workers[w].owed.insert(lease, held.clone());
            }
            let since = self.now + 100 + grace;
            self.at(since, Ev::Owe { w, inc, of: lease, since, first_rank: rank });
        }
    }

    /// The live workers (their session lives, as the registrations a worker watches say), in
    /// rank order for departure `of`.
    fn members(&self, of: LeaseId) -> Vec<usize> {
        let mut live: Vec<usize> = (0..self.workers.len())
            .filter(|&i| self.workers[i].alive)
            .filter(|&i| self.etcd.leases.keys().any(|l| self.session_owner.get(l) == Some(&i)))
            .collect();
        live.sort_by_key(|&i| hash(of, i as u64));
        live
    }

    /// One look at an owed departure.
    fn owe(&mut self, w: usize, inc: u32, of: LeaseId, since: u64, first_rank: usize) {
        let rank = self.members(of).iter().position(|&i| i == w).unwrap_or(0);
        let due = since + rank as u64 * RESUME_MS;
        let again = |s: &mut Self, at: u64| s.at(at, Ev::Owe { w, inc, of, since, first_rank });
        if rank >= LOSS_HANDLERS || self.now < due {
            let at = if rank >= LOSS_HANDLERS { self.now + RESUME_MS } else { due };
            if rank >= LOSS_HANDLERS || first_rank >= LOSS_HANDLERS {
                // Waiting ranks look at the marker.
                if let Some(Some(_)) = self.read(&machine::departure_key(of)) {
                    self.workers[w].owed.remove(&of);
                    return;
                }
            }
            again(self, at);
            return;
        }
        if rank > 0 || first_rank > 0 {
            match self.read(&machine::departure_key(of)) {
                None => return again(self, self.now + 300),
                Some(Some(_)) => {
                    self.workers[w].owed.remove(&of);
                    return;
                }
                Some(None) => {}
            }
        }
        let items = match self.workers[w].owed.get(&of) {
            Some(items) => items.clone(),
            // Owing nothing durable (the holes): what the departed session held, read now.
            None => self.held_by.get(&of).cloned().unwrap_or_default(),
        };
        if first_rank >= LOSS_HANDLERS {
            self.note(format!("w{w} moved up to rank {rank} for departure {of}: handling it"));
        }
        self.at(self.now + 1, Ev::Lose { w, inc, items, phase: 0, of });
    }

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Tick { job, t } => self.tick(job, t),
            Ev::Crash { w } => self.crash(w),
            Ev::Restart { w } => self.restart(w),
            Ev::Freeze { w, until } => {
                self.workers[w].frozen_until = until;
                self.note(format!("w{w} frozen until {until}"));
            }
            Ev::Stall { until } => {
                self.stalled_until = until;
                self.note(format!("etcd unreachable until {until}"));
            }
            Ev::Apply { txn } => {
                let (ok, _) = self.etcd.txn(&txn);
                self.watched(&txn, ok);
                self.note(format!("etcd applies late ({}): {txn:?}", if ok { "done" } else { "refused" }));
            }
            other => self.worker_step(other),
        }
    }

    fn tick(&mut self, job: u32, t: u64) {
        if t + self.p.period_ms <= self.p.end_ms {
            self.at(t + self.p.period_ms, Ev::Tick { job, t: t + self.p.period_ms });
        }
        self.out.ticks.insert((job, t));
        let e = (job, t, 1);
        self.race_by_rank(e, false);
        // Whoever ranks first records the tick missed if nobody claimed it; the next ranks
        // follow, should it be gone.
        for (rank, w) in self.ranked(e).into_iter().take(3).enumerate() {
            let inc = self.workers[w].inc;
            self.at(t + MISSED_AFTER_MS + rank as u64 * 1_000, Ev::NotRun { w, inc, e, phase: 0, orphan: None });
        }
    }

    fn ranked(&self, e: Exec) -> Vec<usize> {
        let mut live: Vec<usize> = (0..self.workers.len()).filter(|&i| self.workers[i].alive).collect();
        live.sort_by_key(|&i| hash(u64::from(e.0) << 40 ^ e.1 ^ u64::from(e.2) << 56, i as u64));
        live
    }

    fn race_by_rank(&mut self, e: Exec, requested: bool) {
        for (rank, w) in self.ranked(e).into_iter().enumerate() {
            let inc = self.workers[w].inc;
            self.at(self.now + rank as u64 * STAGGER_MS, Ev::Race { w, inc, e, requested, tries: 0 });
        }
    }

    fn crash(&mut self, w: usize) {
        if !self.workers[w].alive {
            return;
        }
        self.note(format!("w{w} crashes"));
        let now = self.now;
        let worker = &mut self.workers[w];
        worker.alive = false;
        worker.session = None;
        for (_, (run, _, _)) in std::mem::take(&mut worker.tasks) {
            // Its keepers see it gone and end its tasks.
            if self.out.runs[run].end.is_none() {
                self.out.runs[run].end = Some(now);
            }
        }
        let back = self.now + self.rng.between(500, 6_000);
        self.at(back, Ev::Restart { w });
    }

    fn restart(&mut self, w: usize) {
        if self.workers[w].alive {
            return;
        }
        let prev = self.workers[w].last_session;
        // Its earlier session still registered: revoked at once (its departure is then seen by
        // everyone running, this worker included).
        if let Some(lease) = prev.and_then(|p| self.etcd.leases.get_mut(&p)) {
            lease.expires_at = self.now;
        }
        self.start_worker(w);
        let inc = self.workers[w].inc;
        // The journal goes to MongoDB; provisional not-run records are settled against etcd.
        self.at(self.now + 1, Ev::Flush { w, inc });
        let provisional: Vec<(Exec, Option<i64>)> = self.workers[w].provisional.iter().map(|(e, o)| (*e, *o)).collect();
        for (e, orphan) in provisional {
            self.at(self.now + 10, Ev::NotRun { w, inc, e, phase: 3, orphan });
        }
        // Its previous session, if it ended while this worker was down: nobody alive may have
        // seen it go, so its departure is owed now.
        if let Some(prev) = prev {
            if let (false, Some(held)) = (self.workers[w].owed.contains_key(&prev), self.held_by.get(&prev)) {
                if !self.p.holes.departure_not_owed && !self.p.holes.departure_single_handler {
                    let held = held.clone();
                    self.workers[w].owed.insert(prev, held);
                }
            }
        }
        // Departures owed by its previous life: looked at again (their grace is over).
        let owed: Vec<LeaseId> = self.workers[w].owed.keys().copied().collect();
        for of in owed {
            let first_rank = self.members(of).iter().position(|&i| i == w).unwrap_or(0).max(1);
            self.at(self.now + 10, Ev::Owe { w, inc, of, since: self.now, first_rank });
        }
        // Run requests and unclaimed ticks of the recent past: a restarted worker lists them.
        let requests: Vec<String> = self.etcd.range("requests/").map(|(k, _)| k.clone()).collect();
        for key in requests {
            if let Some(e) = parse_exec(key.trim_start_matches("requests/")) {
                self.at(self.now + 20, Ev::Race { w, inc, e, requested: true, tries: 0 });
            }
        }
        let recent: Vec<(u32, u64)> = self.out.ticks.iter().filter(|(_, t)| *t + 60_000 >= self.now).copied().collect();
        for (job, t) in recent {
            self.at(self.now + 30, Ev::NotRun { w, inc, e: (job, t, 1), phase: 0, orphan: None });
        }
    }

    fn worker_step(&mut self, ev: Ev) {
        let (w, inc) = match &ev {
            Ev::Race { w, inc, .. }
            | Ev::ReadBack { w, inc, .. }
            | Ev::TaskEnd { w, inc, .. }
            | Ev::Journal { w, inc, .. }
            | Ev::Close { w, inc, .. }
            | Ev::KeepAlive { w, inc }
            | Ev::Lose { w, inc, .. }
            | Ev::NotRun { w, inc, .. }
            | Ev::Flush { w, inc }
            | Ev::Owe { w, inc, .. } => (*w, *inc),
            _ => return,
        };
        let worker = &self.workers[w];
        if !worker.alive || worker.inc != inc {
            return;
        }
        if self.now < worker.frozen_until {
            let until = worker.frozen_until;
            self.at(until, ev);
            return;
        }
        if !matches!(ev, Ev::Flush { .. } | Ev::KeepAlive { .. }) && self.rng.chance(CRASH) {
            self.crash(w);
            return;
        }
        match ev {
            Ev::Race { w, inc, e, requested, tries } => self.race(w, inc, e, requested, tries),
            Ev::ReadBack { w, inc, e, requested, key, tries, recheck } => {
                self.read_back(w, inc, (e, requested), &key, (tries, recheck));
            }
            Ev::TaskEnd { w, inc, e, run } => self.task_end(w, inc, e, run),
            Ev::Journal { w, inc, e, outcome, replace } => {
                self.workers[w].journal.push((e, outcome, replace));
                let _ = inc;
            }
            Ev::Close { w, inc, e, token, outcome } => self.close(w, inc, e, token, outcome),
            Ev::KeepAlive { w, inc } => self.keep_alive(w, inc),
            Ev::Lose { w, inc, items, phase, of } => self.lose(w, inc, items, phase, of),
            Ev::NotRun { w, inc, e, phase, orphan } => self.not_run(w, inc, e, phase, orphan),
            Ev::Flush { w, inc } => self.flush(w, inc),
            Ev::Owe { w, inc, of, since, first_rank } => self.owe(w, inc, of, since, first_rank),
            _ => {}
        }
    }

    fn keep_alive(&mut self, w: usize, inc: u32) {
        let Some(lease) = self.workers[w].session else { return };
        let ok = !self.stalled() && self.etcd.keep_alive(lease, self.now);
        if !ok && !self.etcd.leases.contains_key(&lease) {
            // Lost: its tasks died with it (their keepers); close them, then a new session.
            self.note(format!("w{w} lost session {lease}"));
            let tasks: Vec<(Exec, usize, i64)> =
                self.workers[w].tasks.iter().filter(|(_, t)| t.2 == lease).map(|(e, t)| (*e, t.0, t.1)).collect();
            for (e, run, _) in tasks {
                self.at(self.now + 1, Ev::TaskEnd { w, inc, e, run });
            }
            let new = self.etcd.grant(self.now, self.p.ttl_ms);
            self.session_owner.insert(new, w);
            self.workers[w].session = Some(new);
            self.workers[w].last_session = Some(new);
        }
        self.at(self.now + self.p.ttl_ms / 3, Ev::KeepAlive { w, inc });
    }

    fn race(&mut self, w: usize, inc: u32, e: Exec, requested: bool, tries: u32) {
        let Some(session) = self.workers[w].session else { return };
        if let Some(Some(_)) = self.read(&claim_key(e)) {
            return; // taken already
        }
        let txn = if requested { machine::claim_requested(e, w, session) } else { machine::claim(e, w, session) };
        let read_back = |s: &mut Self, tries| {
            let key = claim_key(e);
            s.at(s.now + 200, Ev::ReadBack { w, inc, e, requested, key, tries, recheck: false });
        };
        match self.call(&txn) {
            Answer::Done(token) => self.won(w, inc, e, token, session),
            // Sent again: refused may mean the first transaction was applied after the read (then
            // it is ours to run; the recheck alone would close it missed).
            Answer::Refused if !requested && tries > 0 => {
                read_back(self, tries + 1);
            }
            Answer::Refused => {}
            Answer::Unknown if self.p.holes.request_retried_under_new_id && requested && tries < 3 => {
                // The hole: the request is claimed again, under an id of this try's own.
                let again = (e.0, e.1, e.2);
                self.note(format!("w{w} claim of requested {e:?} unknown: claims it anew"));
                let txn = machine::claim((again.0, again.1 + 1_000_000 * u64::from(tries + 1), again.2), w, session);
                if let Answer::Done(token) = self.call(&txn) {
                    self.won(w, inc, e, token, session);
                }
            }
            Answer::Unknown if self.p.holes.unknown_claim_dropped => {}
            Answer::Unknown => read_back(self, tries + 1),
        }
    }

    /// A claim whose answer was lost: ours → run it (or close it as an orphan when its session
    /// is gone); another's → nothing; none → a requested run is raced again while its request
    /// stands, a tick's claim is sent once more while the tick is young, and either way the key
    /// is read again later (the recheck), since etcd may apply the lost transaction late; no
    /// answer → ask again. The recheck closes a claim of ours nobody runs as an orphan.
    fn read_back(
        &mut self,
        w: usize,
        inc: u32,
        (e, requested): (Exec, bool),
        key: &str,
        (tries, recheck): (u32, bool),
    ) {
        let again = |s: &mut Self, at: u64, recheck| {
            let key = key.to_owned();
            s.at(at, Ev::ReadBack { w, inc, e, requested, key, tries, recheck });
        };
        match self.read(key) {
            None => again(self, self.now + 500, recheck),
            Some(Some((Value::Taken { worker }, token, mod_rev))) if worker == w && token == mod_rev => {
                let running = self.workers[w].tasks.get(&e).is_some_and(|t| t.1 == token);
                if recheck && running && !self.p.holes.recheck_closes_running {
                    return; // raced again and won: this worker runs it
                }
                let lease = self.etcd.kvs.get(&machine::inflight_key(w, e)).and_then(|kv| kv.lease);
                match (lease, self.workers[w].session, recheck) {
                    (Some(l), Some(s), false) if l == s => self.won(w, inc, e, token, s),
                    _ => {
                        self.note(format!("w{w} orphaned claim {e:?}: closing it missed"));
                        self.at(self.now + 1, Ev::NotRun { w, inc, e, phase: 0, orphan: Some(token) });
                    }
                }
            }
            Some(None) if recheck => {}
            Some(None) => {
                if requested && self.etcd.kvs.contains_key(&machine::request_key(e)) {
                    self.at(self.now + 200, Ev::Race { w, inc, e, requested, tries });
                } else if !requested && tries == 1 && self.now < e.1 + CLAIM_AGAIN_WITHIN_MS {
                    self.note(format!("w{w} claim of {e:?} unknown and absent: claims it again"));
                    self.at(self.now + 20, Ev::Race { w, inc, e, requested, tries });
                }
                again(self, self.now + MISSED_AFTER_MS, true);
            }
            Some(_) => {}
        }
    }

    fn won(&mut self, w: usize, inc: u32, e: Exec, token: i64, session: LeaseId) {
        let run = self.out.runs.len();
        self.out.runs.push(Run { e, worker: w, start: self.now, end: None, session });
        self.workers[w].tasks.insert(e, (run, token, session));
        self.note(format!("w{w} runs {e:?} (token {token})"));
        let dur = self.rng.between(50, 2 * self.p.ttl_ms);
        self.at(self.now + dur, Ev::TaskEnd { w, inc, e, run });
    }

    fn task_end(&mut self, w: usize, inc: u32, e: Exec, run: usize) {
        let Some((_, token, _)) = self.workers[w].tasks.get(&e).copied() else { return };
        if self.out.runs[run].end.is_none() {
            self.out.runs[run].end = Some(self.now);
        }
        // Journaled before the close: a crash after the close still leaves the record.
        self.workers[w].journal.push((e, Outcome::Ran, true));
        self.at(self.now + 1, Ev::Close { w, inc, e, token, outcome: Outcome::Ran });
    }

    fn close(&mut self, w: usize, inc: u32, e: Exec, token: i64, outcome: Outcome) {
        match self.call(&machine::close(e, w, token, outcome)) {
            Answer::Done(_) => {
                self.workers[w].tasks.remove(&e);
            }
            Answer::Refused => {
                // The loss handling closed it first: the run is recorded lost.
                self.workers[w].tasks.remove(&e);
                self.workers[w].journal.push((e, Outcome::Lost, true));
            }
            Answer::Unknown => match self.read(&claim_key(e)) {
                Some(Some((Value::Closed(o), _, _))) if o == outcome => {
                    self.workers[w].tasks.remove(&e);
                }
                Some(Some((Value::Closed(_), _, _))) => {
                    self.workers[w].tasks.remove(&e);
                    self.workers[w].journal.push((e, Outcome::Lost, true));
                }
                _ => self.at(self.now + 300, Ev::Close { w, inc, e, token, outcome }),
            },
        }
    }

    /// A departed worker's executions, one step at a time: read the claim (still as its winner
    /// wrote it?), journal the lost record, close it lost with the rerun's request.
    fn lose(&mut self, w: usize, inc: u32, mut items: Vec<(Exec, i64)>, phase: u8, of: LeaseId) {
        let Some(&(e, token)) = items.first() else {
            // All settled: the done marker, then the departure is no longer owed.
            // Unanswered: the others owing it handle it again and find everything closed.
            let _ = self.call(&machine::departure_done(of));
            self.workers[w].owed.remove(&of);
            return;
        };
        let next =
            |s: &mut Self, items: Vec<(Exec, i64)>, phase| s.at(s.now + 5, Ev::Lose { w, inc, items, phase, of });
        let journal_first = !self.p.holes.lost_journaled_after_close;
        match phase {
            0 => match self.read(&claim_key(e)) {
                None => next(self, items, 0),
                Some(Some((Value::Taken { .. }, _, mod_rev))) if mod_rev == token => {
                    next(self, items, if journal_first { 1 } else { 2 });
                }
                Some(_) => {
                    items.remove(0);
                    next(self, items, 0);
                }
            },
            // The lost record, journaled (IfAbsent).
            1 => {
                self.workers[w].journal.push((e, Outcome::Lost, false));
                next(self, items, 2);
            }
            _ => {
                let rerun = e.2 < MAX_ATTEMPTS;
                match self.call(&machine::lose(e, token, rerun)) {
                    Answer::Done(_) => {
                        self.note(format!("w{w} closed {e:?} lost"));
                        if !journal_first {
                            self.at(self.now + 1, Ev::Journal { w, inc, e, outcome: Outcome::Lost, replace: false });
                        }
                        items.remove(0);
                        next(self, items, 0);
                    }
                    Answer::Refused => {
                        items.remove(0);
                        next(self, items, 0);
                    }
                    Answer::Unknown => next(self, items, 0),
                }
            }
        }
    }

    /// A tick nobody claimed (or an orphaned claim of this worker's): 0 look, 1 provisional
    /// record, 2 close, 3 settle the provisional record against the claim.
    fn not_run(&mut self, w: usize, inc: u32, e: Exec, phase: u8, orphan: Option<i64>) {
        let again = |s: &mut Self, phase| s.at(s.now + 200, Ev::NotRun { w, inc, e, phase, orphan });
        let durable_first = !self.p.holes.not_run_journaled_after_close;
        match phase {
            0 => {
                if orphan.is_none() {
                    match self.read(&claim_key(e)) {
                        Some(None) => {}
                        Some(Some(_)) => return,
                        None => return again(self, 0),
                    }
                }
                if durable_first {
                    self.workers[w].provisional.insert(e, orphan);
                }
                self.at(self.now + 1, Ev::NotRun { w, inc, e, phase: 2, orphan });
            }
            2 => {
                let txn = match orphan {
                    Some(token) => machine::close(e, w, token, Outcome::Missed),
                    None => machine::not_run(e),
                };
                match self.call(&txn) {
                    Answer::Done(_) => {
                        if durable_first {
                            self.at(self.now + 1, Ev::NotRun { w, inc, e, phase: 4, orphan });
                        } else {
                            self.at(self.now + 1, Ev::Journal { w, inc, e, outcome: Outcome::Missed, replace: false });
                        }
                    }
                    Answer::Refused => {
                        self.workers[w].provisional.remove(&e);
                    }
                    Answer::Unknown if durable_first => again(self, 3),
                    Answer::Unknown => {}
                }
            }
            3 => match self.read(&claim_key(e)) {
                None => again(self, 3),
                Some(Some((Value::Closed(Outcome::Missed), _, _))) => {
                    self.at(self.now + 1, Ev::NotRun { w, inc, e, phase: 4, orphan });
                }
                // Not closed by this record: nothing of it is kept; an unclaimed tick is looked at again.
                Some(state) => {
                    self.workers[w].provisional.remove(&e);
                    if state.is_none() {
                        again(self, 0);
                    }
                }
            },
            // Journaled, then the provisional record goes.
            _ => {
                if self.workers[w].provisional.remove(&e).is_some() || !durable_first {
                    self.workers[w].journal.push((e, Outcome::Missed, false));
                }
            }
        }
    }

    fn flush(&mut self, w: usize, inc: u32) {
        for (e, outcome, replace) in std::mem::take(&mut self.workers[w].journal) {
            if replace {
                self.out.records.insert(e, outcome);
            } else {
                self.out.records.entry(e).or_insert(outcome);
            }
        }
        let next = self.now + self.rng.between(100, 300);
        self.at(next, Ev::Flush { w, inc });
    }
}

enum Answer {
    Done(i64),
    Refused,
    Unknown,
}

fn hash(a: u64, b: u64) -> u64 {
    let mut r = Rng::new(a.wrapping_mul(0x1000_0000_01B3) ^ b);
    r.next_u64()
}

fn parse_exec(s: &str) -> Option<Exec> {
    let (job, rest) = s.split_once('@')?;
    let (tick, attempt) = rest.split_once('#')?;
    Some((job.parse().ok()?, tick.parse().ok()?, attempt.parse().ok()?))
}
