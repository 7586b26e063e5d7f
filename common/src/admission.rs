//! Admission control for etcd requests: at most `limit` requests of this process are in flight
//! at once, and the limit adapts by AIMD (additive increase, multiplicative decrease) to what
//! etcd answers.
//!
//! Every request made through `etcd::request` takes a slot before it is sent and gives it back
//! when it is answered, fails or times out; the wait for a slot counts against the request's
//! deadline, so a saturated process answers "timeout" instead of piling requests up. A request
//! that etcd refused as overload (`ResourceExhausted`, "etcdserver: too many requests") or that
//! timed out halves the limit; `limit` answered requests while the limit is in use raise it by
//! one. One burst of failures halves it once: a failure only cuts when its request was sent after
//! the previous cut and [`COOL_DOWN`] has passed since, since requests sent before a cut were
//! sent under the old limit and say nothing about the new one.
//!
//! The session's lease grant and keep-alives never take a slot (`etcd::request_exempt`, on the
//! session's own connection): no amount of claim traffic can delay them.
//!
//! [`Aimd`] is the rule alone (pure: instants are passed in); [`Limiter`] applies it to a
//! semaphore.

use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::error::Elapsed;
use tokio::time::Instant;

use prometheus::{IntCounterVec, IntGauge};

use crate::metrics::{counter_vec, gauge};

/// Admission control of etcd requests (`common::admission`): the current limit, the requests
/// holding a slot, the requests that found every slot taken (by whether they got one before
/// their deadline) and the cuts of the limit by cause.
pub struct AdmissionMetrics {
    pub limit: IntGauge,
    pub in_flight: IntGauge,
    pub waits: IntCounterVec,
    pub decreases: IntCounterVec,
}

pub static ADMISSION: LazyLock<AdmissionMetrics> = LazyLock::new(|| {
    let m = AdmissionMetrics {
        limit: gauge(
            "etcron_etcd_admission_limit",
            "Most etcd requests this process sends at once; adapted to etcd's answers (AIMD).",
        ),
        in_flight: gauge(
            "etcron_etcd_requests_in_flight",
            "etcd requests sent and not yet answered (session keep-alives excluded).",
        ),
        waits: counter_vec(
            "etcron_etcd_admission_waits_total",
            "etcd requests that found every slot taken and waited, by outcome (admitted, timed_out).",
            &["outcome"],
        ),
        decreases: counter_vec(
            "etcron_etcd_admission_decreases_total",
            "Times the etcd request limit was halved, by cause (too_many_requests, timeout).",
            &["cause"],
        ),
    };
    m.limit.set(i64::try_from(INITIAL_LIMIT).unwrap_or(i64::MAX));
    for outcome in ["admitted", "timed_out"] {
        m.waits.with_label_values(&[outcome]);
    }
    for cause in ["too_many_requests", "timeout"] {
        m.decreases.with_label_values(&[cause]);
    }
    m
});

/// Creates the admission metrics and the process's limiter, so they are listed (the limit at
/// its initial value) from the first scrape. Call once at start, after `metrics::init`.
pub fn init_metrics() {
    LazyLock::force(&ADMISSION);
    LazyLock::force(&LIMITER);
}

/// The limit a process starts with: well above what one worker needs for its ordinary traffic
/// (a claim and a close per run, watches, registration), well below what a burst of thousands
/// of due ticks would send at once.
pub const INITIAL_LIMIT: usize = 32;
/// The limit is never cut below this: two requests at once still make progress, and one slow
/// request cannot hold every slot.
pub const MIN_LIMIT: usize = 2;
/// Nor raised above this: far beyond what one etcd serves usefully from one client (its gRPC
/// server handles requests from one connection concurrently, but applies writes one at a time).
pub const MAX_LIMIT: usize = 512;
/// Least time between two cuts. A burst of failures (everything in flight timing out together)
/// halves the limit once.
pub const COOL_DOWN: Duration = Duration::from_secs(1);
/// At most one warning line per this period about cuts of the limit.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// Why the limit was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overload {
    /// etcd refused the request (`ResourceExhausted`, "etcdserver: too many requests").
    TooManyRequests,
    /// No answer within the request's deadline.
    Timeout,
}

impl Overload {
    /// The label value of `etcron_etcd_admission_decreases_total{cause}`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Overload::TooManyRequests => "too_many_requests",
            Overload::Timeout => "timeout",
        }
    }
}

/// How a request that held a slot ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// etcd answered (an answer that says "compare failed" is still an answer).
    Answered,
    /// etcd refused it as overload, or it timed out.
    Overloaded(Overload),
    /// Anything else (connection refused, a leader change, ...): says nothing about load.
    Failed,
}

/// The AIMD rule. Pure: the caller passes the instants.
#[derive(Debug, Clone)]
pub struct Aimd {
    limit: usize,
    /// Answered requests counted toward the next increase.
    answered: usize,
    last_cut: Option<Instant>,
}

impl Aimd {
    /// Starts at `limit`, kept within [`MIN_LIMIT`]..=[`MAX_LIMIT`].
    #[must_use]
    pub fn new(limit: usize) -> Self {
        Self { limit: limit.clamp(MIN_LIMIT, MAX_LIMIT), answered: 0, last_cut: None }
    }

    #[must_use]
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A request answered; `in_flight` is how many were in flight when it was sent (itself
    /// included). It counts toward an increase only when the limit was in use (at least half
    /// of it taken): a process that never needs more than a few slots must not grow its limit
    /// without bound and then send a whole burst at once. After `limit` such answers the limit
    /// grows by one. Returns the new limit when it grew.
    pub fn answered(&mut self, in_flight: usize) -> Option<usize> {
        if in_flight.saturating_mul(2) < self.limit || self.limit >= MAX_LIMIT {
            return None;
        }
        self.answered += 1;
        if self.answered < self.limit {
            return None;
        }
        self.answered = 0;
        self.limit += 1;
        Some(self.limit)
    }

    /// A request sent at `sent_at` was refused as overload or timed out, seen at `now`. The
    /// limit is halved (not below [`MIN_LIMIT`]) unless the request was sent before the last
    /// cut or the last cut is less than [`COOL_DOWN`] old. Returns the new limit when it was
    /// cut.
    pub fn overloaded(&mut self, sent_at: Instant, now: Instant) -> Option<usize> {
        if let Some(cut) = self.last_cut {
            if sent_at <= cut || now.saturating_duration_since(cut) < COOL_DOWN {
                return None;
            }
        }
        self.answered = 0;
        if self.limit <= MIN_LIMIT {
            return None;
        }
        self.last_cut = Some(now);
        self.limit = (self.limit / 2).max(MIN_LIMIT);
        Some(self.limit)
    }
}

/// The limiter every etcd request of this process goes through (`etcd::request`).
pub static LIMITER: LazyLock<Limiter> = LazyLock::new(|| Limiter::new(INITIAL_LIMIT, Some(&*ADMISSION)));

/// The caller's limiter: the process's, or, inside a simulated worker's task group
/// (`task::Group`), that worker's own — several workers share the simulation's process, and
/// one cut off from etcd must not hold the others' slots.
pub fn limiter() -> &'static Limiter {
    match crate::task::current_group() {
        None => &LIMITER,
        Some(group) => {
            let mut limiters = GROUP_LIMITERS.lock().unwrap_or_else(PoisonError::into_inner);
            limiters.entry(group).or_insert_with(|| Box::leak(Box::new(Limiter::new(INITIAL_LIMIT, None))))
        }
    }
}

/// The simulated workers' limiters, by task group (a few per seed, kept for the process).
static GROUP_LIMITERS: Mutex<std::collections::BTreeMap<u64, &'static Limiter>> =
    Mutex::new(std::collections::BTreeMap::new());

/// Forgets the simulated workers' limiters: the next seed's workers start theirs anew.
pub fn forget_group_limiters() {
    GROUP_LIMITERS.lock().unwrap_or_else(PoisonError::into_inner).clear();
}

/// A semaphore whose size follows [`Aimd`].
pub struct Limiter {
    slots: Semaphore,
    state: Mutex<State>,
    metrics: Option<&'static AdmissionMetrics>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Limiter").field("limit", &state.aimd.limit()).field("in_flight", &state.in_flight).finish()
    }
}

struct State {
    aimd: Aimd,
    in_flight: usize,
    /// Slots to take back as they are returned: a cut below what is in flight.
    owed: usize,
    last_warn: Option<Instant>,
    /// Cuts since the last warning line.
    unreported: u32,
}

impl Limiter {
    /// A limiter starting at `limit`; `metrics` are kept in step when given.
    #[must_use]
    pub fn new(limit: usize, metrics: Option<&'static AdmissionMetrics>) -> Self {
        let aimd = Aimd::new(limit);
        if let Some(m) = metrics {
            m.limit.set(i64::try_from(aimd.limit()).unwrap_or(i64::MAX));
        }
        Self {
            slots: Semaphore::new(aimd.limit()),
            state: Mutex::new(State { aimd, in_flight: 0, owed: 0, last_warn: None, unreported: 0 }),
            metrics,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current limit.
    #[must_use]
    pub fn limit(&self) -> usize {
        self.lock().aimd.limit()
    }

    /// Requests holding a slot now.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }

    /// Waits for a slot until `deadline`, first come first served.
    ///
    /// # Errors
    /// `Elapsed` when no slot was free by `deadline`.
    pub async fn admit_by(&self, deadline: Instant) -> Result<Permit<'_>, Elapsed> {
        let slot = match self.slots.try_acquire() {
            Ok(slot) => Some(slot),
            Err(_) => {
                let waited = tokio::time::timeout_at(deadline, self.slots.acquire()).await;
                if let Some(m) = self.metrics {
                    let outcome = if waited.is_ok() { "admitted" } else { "timed_out" };
                    m.waits.with_label_values(&[outcome]).inc();
                }
                // The semaphore is never closed; were it, the request would go unlimited.
                waited?.ok()
            }
        };
        let in_flight = {
            let mut state = self.lock();
            state.in_flight += 1;
            self.report_in_flight(&state);
            state.in_flight
        };
        Ok(Permit { limiter: self, slot, sent_at: Instant::now(), in_flight })
    }

    fn report_in_flight(&self, state: &State) {
        if let Some(m) = self.metrics {
            m.in_flight.set(i64::try_from(state.in_flight).unwrap_or(i64::MAX));
        }
    }

    fn finish(&self, sent_at: Instant, in_flight: usize, outcome: Outcome) {
        let mut state = self.lock();
        let before = state.aimd.limit();
        let changed = match outcome {
            Outcome::Answered => state.aimd.answered(in_flight),
            Outcome::Overloaded(cause) => {
                let now = Instant::now();
                let cut = state.aimd.overloaded(sent_at, now);
                if let Some(limit) = cut {
                    if let Some(m) = self.metrics {
                        m.decreases.with_label_values(&[cause.as_str()]).inc();
                    }
                    state.unreported += 1;
                    if state.last_warn.is_none_or(|at| now.saturating_duration_since(at) >= WARN_EVERY) {
                        tracing::warn!(
                            limit,
                            from = before,
                            cause = cause.as_str(),
                            cuts = state.unreported,
                            "etcd is overloaded: this process now sends at most {limit} requests at once (cuts since the last such line: {})",
                            state.unreported
                        );
                        state.last_warn = Some(now);
                        state.unreported = 0;
                    }
                }
                cut
            }
            Outcome::Failed => None,
        };
        let Some(limit) = changed else { return };
        if limit > before {
            let more = limit - before;
            let repaid = more.min(state.owed);
            state.owed -= repaid;
            self.slots.add_permits(more - repaid);
        } else {
            let fewer = before - limit;
            // Free slots go at once; the rest as the requests holding them end.
            let taken = self.slots.forget_permits(fewer);
            state.owed += fewer - taken;
        }
        if let Some(m) = self.metrics {
            m.limit.set(i64::try_from(limit).unwrap_or(i64::MAX));
        }
    }

    fn release(&self, slot: Option<SemaphorePermit<'_>>) {
        let mut state = self.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        self.report_in_flight(&state);
        if let Some(slot) = slot {
            if state.owed > 0 {
                state.owed -= 1;
                slot.forget();
            } else {
                drop(state);
                drop(slot);
            }
        }
    }
}

/// A slot held by one request; given back when dropped.
#[derive(Debug)]
pub struct Permit<'a> {
    limiter: &'a Limiter,
    slot: Option<SemaphorePermit<'a>>,
    sent_at: Instant,
    in_flight: usize,
}

impl Permit<'_> {
    /// Tells the limiter how the request ended, and gives the slot back. A permit dropped
    /// without this (the caller gave up on the request) changes nothing but the count.
    pub fn finish(self, outcome: Outcome) {
        self.limiter.finish(self.sent_at, self.in_flight, outcome);
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.limiter.release(self.slot.take());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_admission_metrics_are_listed_from_the_first_scrape() {
        init_metrics();
        let text = crate::metrics::render();
        assert!(text.contains(&format!("etcron_etcd_admission_limit {INITIAL_LIMIT}")), "{text}");
        assert!(text.contains("etcron_etcd_requests_in_flight 0"), "{text}");
        assert!(text.contains("etcron_etcd_admission_waits_total{outcome=\"timed_out\"} 0"), "{text}");
        assert!(text.contains("etcron_etcd_admission_decreases_total{cause=\"too_many_requests\"} 0"), "{text}");
    }

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn the_limit_starts_within_its_bounds() {
        assert_eq!(Aimd::new(0).limit(), MIN_LIMIT);
        assert_eq!(Aimd::new(INITIAL_LIMIT).limit(), INITIAL_LIMIT);
        assert_eq!(Aimd::new(usize::MAX).limit(), MAX_LIMIT);
    }

    #[test]
    fn the_limit_grows_by_one_after_limit_answers_while_in_use() {
        let mut a = Aimd::new(4);
        assert_eq!(a.answered(4), None);
        assert_eq!(a.answered(3), None);
        assert_eq!(a.answered(2), None);
        assert_eq!(a.answered(4), Some(5));
        for _ in 0..4 {
            assert_eq!(a.answered(5), None);
        }
        assert_eq!(a.answered(5), Some(6));
    }

    #[test]
    fn answers_while_the_limit_is_mostly_unused_do_not_grow_it() {
        let mut a = Aimd::new(32);
        for _ in 0..10_000 {
            assert_eq!(a.answered(15), None);
        }
        assert_eq!(a.limit(), 32);
        for _ in 0..31 {
            assert_eq!(a.answered(16), None);
        }
        assert_eq!(a.answered(16), Some(33));
    }

    #[test]
    fn the_limit_never_grows_past_the_maximum() {
        let mut a = Aimd::new(MAX_LIMIT - 1);
        for _ in 0..MAX_LIMIT - 1 {
            a.answered(MAX_LIMIT);
        }
        assert_eq!(a.limit(), MAX_LIMIT);
        for _ in 0..10 * MAX_LIMIT {
            assert_eq!(a.answered(MAX_LIMIT), None);
        }
        assert_eq!(a.limit(), MAX_LIMIT);
    }

    #[test]
    fn a_burst_of_failures_halves_the_limit_once() {
        let t = Instant::now();
        let mut a = Aimd::new(32);
        // 32 requests sent before the first failure all fail within a few ms, and again for
        // seconds after (timeouts of requests sent before the cut).
        assert_eq!(a.overloaded(at(t, 0), at(t, 10)), Some(16));
        for i in 0..32 {
            assert_eq!(a.overloaded(at(t, 0), at(t, 10 + i)), None, "same burst, within the cool-down");
            assert_eq!(a.overloaded(at(t, 5), at(t, 5_000 + i)), None, "sent before the cut, seen later");
        }
        // Sent after the cut, but the cool-down is not over.
        assert_eq!(a.overloaded(at(t, 11), at(t, 500)), None);
        assert_eq!(a.limit(), 16);
        // Sent after the cut and seen after the cool-down: a new signal.
        assert_eq!(a.overloaded(at(t, 11), at(t, 10) + COOL_DOWN), Some(8));
    }

    #[test]
    fn the_limit_is_never_cut_below_the_minimum() {
        let t = Instant::now();
        let mut a = Aimd::new(5);
        assert_eq!(a.overloaded(at(t, 0), at(t, 0)), Some(2));
        assert_eq!(a.overloaded(at(t, 5_000), at(t, 10_000)), None);
        assert_eq!(a.limit(), MIN_LIMIT);
        let mut a = Aimd::new(3);
        assert_eq!(a.overloaded(at(t, 0), at(t, 0)), Some(MIN_LIMIT));
    }

    #[test]
    fn a_cut_restarts_the_count_toward_an_increase() {
        let t = Instant::now();
        let mut a = Aimd::new(8);
        for _ in 0..7 {
            a.answered(8);
        }
        assert_eq!(a.overloaded(at(t, 0), at(t, 0)), Some(4));
        for _ in 0..3 {
            assert_eq!(a.answered(4), None);
        }
        assert_eq!(a.answered(4), Some(5));
    }

    /// Runs `n` requests of `hold` each through `limiter`; the most seen in flight at once.
    async fn most_at_once(limiter: &Arc<Limiter>, n: usize, hold: Duration) -> usize {
        let now = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..n {
            let (limiter, now, most) = (limiter.clone(), now.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                let deadline = Instant::now() + Duration::from_secs(30);
                let permit = limiter.admit_by(deadline).await.expect("a slot within 30 s");
                let at_once = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(at_once, Ordering::SeqCst);
                tokio::time::sleep(hold).await;
                now.fetch_sub(1, Ordering::SeqCst);
                permit.finish(Outcome::Answered);
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        most.load(Ordering::SeqCst)
    }

    #[tokio::test]
    async fn no_more_requests_than_the_limit_are_in_flight() {
        let limiter = Arc::new(Limiter::new(4, None));
        let most = most_at_once(&limiter, 40, Duration::from_millis(5)).await;
        assert!(most <= limiter.limit(), "{most} in flight at once, limit {}", limiter.limit());
        assert_eq!(limiter.in_flight(), 0);
    }

    #[tokio::test]
    async fn waiting_for_a_slot_counts_against_the_deadline() {
        let limiter = Limiter::new(MIN_LIMIT, None);
        let far = Instant::now() + Duration::from_secs(30);
        let a = limiter.admit_by(far).await.expect("free slot");
        let b = limiter.admit_by(far).await.expect("free slot");
        let soon = Instant::now() + Duration::from_millis(50);
        assert!(limiter.admit_by(soon).await.is_err(), "every slot is taken");
        assert_eq!(limiter.in_flight(), 2);
        drop(a);
        let c = limiter.admit_by(Instant::now() + Duration::from_millis(50)).await.expect("a slot came free");
        drop((b, c));
        assert_eq!(limiter.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_cut_below_what_is_in_flight_takes_slots_back_as_they_return() {
        let limiter = Limiter::new(8, None);
        let far = Instant::now() + Duration::from_secs(30);
        let mut held = Vec::new();
        for _ in 0..8 {
            held.push(limiter.admit_by(far).await.expect("free slot"));
        }
        // One times out: the limit halves to 4 while 8 are in flight.
        held.pop().expect("held").finish(Outcome::Overloaded(Overload::Timeout));
        assert_eq!(limiter.limit(), 4);
        // The other 7 time out too: the same burst, no further cut.
        for p in held.drain(..3) {
            p.finish(Outcome::Overloaded(Overload::Timeout));
        }
        assert_eq!(limiter.limit(), 4);
        // 4 still in flight: nothing more is admitted until one returns.
        assert!(limiter.admit_by(Instant::now() + Duration::from_millis(20)).await.is_err());
        held.pop().expect("held").finish(Outcome::Failed);
        let again = limiter.admit_by(Instant::now() + Duration::from_millis(20)).await.expect("one slot came back");
        assert!(limiter.admit_by(Instant::now() + Duration::from_millis(20)).await.is_err());
        drop((held, again));
        assert_eq!(limiter.in_flight(), 0);
        // Exactly the limit's worth of slots is left.
        let mut all = Vec::new();
        for _ in 0..4 {
            all.push(limiter.admit_by(far).await.expect("free slot"));
        }
        assert!(limiter.admit_by(Instant::now() + Duration::from_millis(20)).await.is_err());
    }

    #[tokio::test]
    async fn the_limit_grows_back_under_load() {
        let limiter = Arc::new(Limiter::new(MIN_LIMIT, None));
        // 2 + 3 + 4 answers at full use raise the limit from 2 to 5.
        most_at_once(&limiter, 2 + 3 + 4 + 1, Duration::from_millis(2)).await;
        assert!(limiter.limit() > MIN_LIMIT, "limit {}", limiter.limit());
        let most = most_at_once(&limiter, 64, Duration::from_millis(2)).await;
        assert!(most <= limiter.limit());
    }
}
