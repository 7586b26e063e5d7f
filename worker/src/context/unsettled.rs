//! The ledger of ticks nobody may have settled, waiting for a sweep (`catchup::sweep_loop`):
//! per job, the schedule ticks this worker tried to claim or to account for while etcd failed
//! it, and windows of every job's ticks a departed worker may have left. Pure bookkeeping: no
//! etcd, no clock but the quiet time of each range.

use etcron_common::hash::HashMap;
use std::time::Duration;

use etcron_model::record::TriggerKind;
use etcron_model::UnixMs;

use crate::timing::fire::Fire;

/// Why the ticks of a scan went unclaimed: the cluster had no live worker, etcd failed the
/// workers that were up, or a worker that would have claimed or recorded them departed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gap {
    NoWorker,
    EtcdUnreachable,
    WorkerDeparted,
}

/// Ticks whose fate nobody may have settled, waiting for a sweep: per job, the schedule ticks
/// this worker tried to claim or to account for while etcd failed it (no answer, no quorum, no
/// session), and, for every job, the window a departed worker may have left unsettled (it was
/// the first-ranked worker of some ticks, and the one to record them `missed`). The settle loop
/// sweeps each range once etcd answers: every tick in it without a claim is recorded `missed`
/// or caught up per `misfire`. Sweeps go through the claim keys, so several workers sweeping the
/// same range settle each tick once; the job's first-ranked worker sweeps first, the others
/// later, when they mostly find the ticks settled already.
#[derive(Debug, Default)]
pub struct Unsettled {
    inner: std::sync::Mutex<Ledger>,
}

#[derive(Debug, Default)]
struct Ledger {
    jobs: HashMap<String, Range>,
    /// A window of every job's ticks, and why nobody may have settled them.
    all: Option<(Range, Gap)>,
}

/// Scheduled ms `first..=last`, and when the range last grew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub first: UnixMs,
    pub last: UnixMs,
    noted: tokio::time::Instant,
}

impl Range {
    fn new(first: UnixMs, last: UnixMs) -> Self {
        Self { first, last, noted: tokio::time::Instant::now() }
    }

    fn widen(&mut self, first: UnixMs, last: UnixMs) {
        self.first = self.first.min(first);
        self.last = self.last.max(last);
        self.noted = tokio::time::Instant::now();
    }
}

/// A range that is due for a sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sweep {
    Job { job: String, first: UnixMs, last: UnixMs },
    All { first: UnixMs, last: UnixMs, gap: Gap },
}

impl Unsettled {
    fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes a schedule tick (other fires are run requests, which stay in etcd until claimed).
    pub fn note(&self, fire: &Fire) {
        if fire.trigger != TriggerKind::Schedule {
            return;
        }
        let Some(tick) = fire.id.tick.scheduled_ms() else { return };
        self.note_job(&fire.id.job, tick, tick);
    }

    pub(crate) fn note_job(&self, job: &str, first: UnixMs, last: UnixMs) {
        let mut ledger = self.lock();
        match ledger.jobs.get_mut(job) {
            Some(range) => range.widen(first, last),
            None => {
                ledger.jobs.insert(job.to_owned(), Range::new(first, last));
            }
        }
    }

    /// The oldest tick noted and not swept yet.
    #[must_use]
    pub fn oldest(&self) -> Option<UnixMs> {
        let ledger = self.lock();
        ledger.jobs.values().map(|r| r.first).chain(ledger.all.as_ref().map(|(r, _)| r.first)).min()
    }

    /// Notes every job's ticks in `first..=last`.
    pub fn note_all(&self, first: UnixMs, last: UnixMs, gap: Gap) {
        let mut ledger = self.lock();
        match &mut ledger.all {
            Some((range, _)) => range.widen(first, last),
            None => ledger.all = Some((Range::new(first, last), gap)),
        }
    }

    /// The ranges noted at least `quiet` ago (at least `quiet_for(job)` for a job's own range),
    /// removed from the ledger.
    pub(crate) fn take_ripe(&self, quiet: Duration, quiet_for: impl Fn(&str) -> Duration) -> Vec<Sweep> {
        let mut ledger = self.lock();
        let ripe: Vec<String> = ledger
            .jobs
            .iter()
            .filter(|(job, range)| range.noted.elapsed() >= quiet_for(job))
            .map(|(job, _)| job.clone())
            .collect();
        let mut due: Vec<Sweep> = ripe
            .into_iter()
            .filter_map(|job| ledger.jobs.remove(&job).map(|r| Sweep::Job { job, first: r.first, last: r.last }))
            .collect();
        if ledger.all.is_some_and(|(range, _)| range.noted.elapsed() >= quiet) {
            if let Some((range, gap)) = ledger.all.take() {
                due.push(Sweep::All { first: range.first, last: range.last, gap });
            }
        }
        due
    }

    /// Puts a range back (etcd failed again while sweeping it).
    pub(crate) fn restore(&self, sweep: Sweep) {
        match sweep {
            Sweep::Job { job, first, last } => self.note_job(&job, first, last),
            Sweep::All { first, last, gap } => self.note_all(first, last, gap),
        }
    }

    #[must_use]
    pub fn len(&self) -> usize {
        let ledger = self.lock();
        ledger.jobs.len() + usize::from(ledger.all.is_some())
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_ledger_keeps_one_range_per_job_until_it_is_quiet() {
        let ledger = Unsettled::default();
        let spec = Arc::new(
            etcron_model::spec::JobSpec::from_json(
                br#"{"schedule":"@daily","task":{"kind":"shell","command":"true"}}"#,
            )
            .unwrap(),
        );
        let fire = |job: &str, tick: UnixMs, trigger: TriggerKind| Fire {
            trigger,
            ..Fire::schedule_tick(job, (spec.clone(), 1), tick, None)
        };
        let hour = Duration::from_secs(3600);
        ledger.note(&fire("a", 5000, TriggerKind::Schedule));
        ledger.note(&fire("a", 3000, TriggerKind::Schedule));
        ledger.note(&fire("a", 4000, TriggerKind::Schedule));
        ledger.note(&fire("b", 1000, TriggerKind::Retry));
        assert_eq!(ledger.len(), 1, "run requests stay in etcd and are not noted");
        assert!(ledger.take_ripe(hour, |_| hour).is_empty(), "noted just now");
        let a = Sweep::Job { job: "a".to_owned(), first: 3000, last: 5000 };
        assert_eq!(ledger.take_ripe(Duration::ZERO, |_| Duration::ZERO), vec![a.clone()]);
        assert!(ledger.is_empty());
        ledger.restore(a);
        ledger.note(&fire("a", 7000, TriggerKind::Schedule));
        let a = Sweep::Job { job: "a".to_owned(), first: 3000, last: 7000 };
        assert_eq!(ledger.take_ripe(Duration::ZERO, |_| Duration::ZERO), vec![a]);
    }

    #[test]
    fn a_job_waits_longer_where_this_worker_is_not_first_and_windows_cover_every_job() {
        let ledger = Unsettled::default();
        ledger.note_job("mine", 1, 2);
        ledger.note_job("theirs", 1, 2);
        ledger.note_all(10, 20, Gap::WorkerDeparted);
        ledger.note_all(5, 15, Gap::WorkerDeparted);
        let hour = Duration::from_secs(3600);
        let due = ledger.take_ripe(Duration::ZERO, |job| if job == "mine" { Duration::ZERO } else { hour });
        assert_eq!(
            due,
            vec![
                Sweep::Job { job: "mine".to_owned(), first: 1, last: 2 },
                Sweep::All { first: 5, last: 20, gap: Gap::WorkerDeparted }
            ]
        );
        assert_eq!(ledger.len(), 1, "the other worker's job waits");
    }
}
