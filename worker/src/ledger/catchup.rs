//! Misfire handling after downtime: when a worker loads jobs it had not seen (at start, or after
//! a re-list), ticks before that moment are not in its wheel. If the whole cluster was down,
//! nobody claimed them. The scan finds, per job, the ticks between `{ns}/state/{job}` (the newest
//! tick claimed) and the load time that have no claim, and applies the job's `misfire` policy:
//! `skip` records them `missed`, `run_once` runs the newest as a catch-up run, `run_all` runs up
//! to `max_catchup` of the newest, one after another; every tick not run is recorded `missed`
//! (up to `MAX_MISSED_RECORDS` one by one, older ones counted in one reason). Every tick is settled through its claim
//! key, so scans by several workers never run or record a tick twice.

use std::collections::VecDeque;

use etcron_common::hash::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use etcron_common::claim;
use etcron_common::etcd::list::Pages;
use etcron_common::etcd::{request, EtcdError, REQUEST_TIMEOUT};
use etcron_model::keys::{Key, Tick};
use etcron_model::record::Status;
use etcron_model::schedule::ScheduleCache;
use etcron_model::spec::Misfire;
use etcron_model::stored::{halt, JobState};
use etcron_model::{now_ms, rfc3339_ms, UnixMs};

use crate::context::unsettled::{Gap, Sweep};
use crate::context::Context;
use crate::fire::not_run::record_not_run;
use crate::metrics::METRICS;
use crate::rules::catchup_request;
use crate::timing::fire::{Fire, MISSED_AFTER, STATE_EVERY};

/// Most ticks of one job a scan looks at; older missed ticks are counted in one log line and
/// in the reason of the oldest recorded one.
pub const MAX_SCAN_TICKS: usize = 100_000;
/// A gap up to this long is walked on the async worker: its ticks are few (60 of an
/// every-second job), cheaper than handing the walk to the blocking pool, which a scan of a
/// million jobs at a worker's start would otherwise do a million times.
const INLINE_WALK_MS: UnixMs = 60_000;
/// Jobs a pass over every job handles between two yields to the runtime: a pass over a million
/// jobs must not hold a runtime thread for seconds (the scheduler and the claims share them).
const YIELD_EVERY: usize = 256;

/// What a scan decided for one job's unclaimed ticks (pure, so it can be tested alone).
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    /// Ticks to run as catch-up runs, oldest first.
    pub run: Vec<UnixMs>,
    /// Ticks to record as `missed` (or `skipped` for a paused or disabled job), each with its
    /// reason.
    pub record: Vec<(UnixMs, String)>,
}

/// Why an unsure tick (see [`split_unsure`]) is recorded `missed`.
const UNSURE_REASON: &str = "no claim of this tick is left, but it fell less than a minute after the job state's last \
     advance and is older than a claim's retention: it may have run before the outage (this record is written only if \
     no record of the execution exists); not run again";

/// Splits unclaimed ticks after the job state `state` into those the scan cannot tell from
/// ticks that ran, and the rest. The state trails the newest claimed tick by up to
/// `STATE_EVERY`, so a tick within that much after it may have been claimed; its claim lives at
/// least `MIN_RETENTION`, so only a tick older than that can have lost its claim.
#[must_use]
pub fn split_unsure(unclaimed: Vec<UnixMs>, state: UnixMs, now: UnixMs) -> (Vec<UnixMs>, Vec<UnixMs>) {
    let lag = i64::try_from(STATE_EVERY.as_millis()).unwrap_or(i64::MAX);
    let retention = i64::try_from(claim::MIN_RETENTION.as_millis()).unwrap_or(i64::MAX);
    unclaimed.into_iter().partition(|t| *t <= state.saturating_add(lag) && *t < now - retention)
}

/// Most missed ticks of one job recorded one by one per scan; older ones are counted in the
/// reason of the oldest recorded tick.
pub const MAX_MISSED_RECORDS: usize = 1000;

/// Decides what happens to `unclaimed` ticks (oldest first); `older` more were beyond the scan.
/// `halted`: why the job does not fire now (`model::halt`), when it does not: its ticks are
/// then only recorded, whatever the policy.
#[must_use]
pub fn plan(
    unclaimed: &[UnixMs],
    older: usize,
    misfire: Misfire,
    max_catchup: u32,
    halted: Option<&str>,
    gap: Gap,
) -> Plan {
    let down = match gap {
        Gap::NoWorker => "no worker claimed this tick (no live worker at the time)",
        Gap::EtcdUnreachable => {
            "no worker could claim this tick (etcd was unreachable or had no quorum, or the workers were paused or starved)"
        }
        Gap::WorkerDeparted => {
            "no worker claimed this tick (the worker ranked first for it lost its session before settling it)"
        }
    };
    let (run, rest, why): (&[UnixMs], &[UnixMs], String) = if let Some(halted) = halted {
        (&[], unclaimed, format!("{halted}; {down}"))
    } else {
        match misfire {
            Misfire::Skip => (&[], unclaimed, format!("{down}; misfire: skip")),
            Misfire::RunOnce => match unclaimed.split_last() {
                Some((newest, rest)) => (
                    std::slice::from_ref(newest),
                    rest,
                    format!("{down}; misfire: run_once caught up once, with the tick at {}", rfc3339_ms(*newest)),
                ),
                None => (&[], &[], String::new()),
            },
            Misfire::RunAll => {
                let keep = usize::try_from(max_catchup).unwrap_or(usize::MAX).max(1);
                let (rest, run) = unclaimed.split_at(unclaimed.len().saturating_sub(keep));
                (
                    run,
                    rest,
                    format!("{down}; misfire: run_all caught up only the newest {max_catchup} ticks (max_catchup)"),
                )
            }
        }
    };
    let (unrecorded, recorded) = rest.split_at(rest.len().saturating_sub(MAX_MISSED_RECORDS));
    let not_recorded = older + unrecorded.len();
    let record = recorded
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let reason = if i == 0 && not_recorded > 0 {
                format!("{why}; {not_recorded} older ticks were missed too and are not recorded one by one")
            } else {
                why.clone()
            };
            (t, reason)
        })
        .collect();
    Plan { run: run.to_vec(), record }
}

/// Scans `jobs` (just loaded at etcd `revision`, their wheel starting after `upto`) once the live
/// workers have had `MISSED_AFTER` to claim the newest ticks.
///
/// The job states are read as of `revision`: by the time the scan runs, this worker's own new
/// claims have moved them past `upto`.
pub async fn scan(ctx: Arc<Context>, jobs: Vec<String>, upto: UnixMs, revision: i64) {
    tokio::time::sleep(MISSED_AFTER).await;
    let last = match read_states(&ctx, revision).await {
        Ok(last) => last,
        Err(EtcdError::Failed(e)) => {
            tracing::error!(error = %e, jobs = jobs.len(), "catch-up scan: cannot read job states; ticks missed during downtime are not accounted for");
            return;
        }
        Err(EtcdError::Timeout) => {
            tracing::error!(
                jobs = jobs.len(),
                "catch-up scan: reading job states timed out; ticks missed during downtime are not accounted for"
            );
            return;
        }
    };
    let mut scanned = 0usize;
    let mut schedules = ScheduleCache::default();
    for (i, job) in jobs.iter().enumerate() {
        if i % YIELD_EVERY == YIELD_EVERY - 1 {
            tokio::task::yield_now().await;
        }
        if ctx.members.rank(&ctx.config.worker_id, &format!("catchup/{job}")) != 0 {
            continue;
        }
        scanned += 1;
        let stored = last.get(job).copied().unwrap_or(Stored::Missing);
        scan_job(&ctx, job, stored, upto, Gap::NoWorker, &mut schedules).await;
    }
    tracing::info!(jobs = jobs.len(), scanned, states = last.len(), until = %rfc3339_ms(upto), "catch-up scan done");
}

/// Every job's `{ns}/state/{job}` as of `revision`, read in pages; the current ones when that
/// revision is compacted already (a gap's newest ticks may then go unexamined; said in a log line).
async fn read_states(ctx: &Context, revision: i64) -> Result<HashMap<String, Stored>, EtcdError> {
    let prefix = ctx.keys.state_prefix();
    let mut pages = Pages::new(&ctx.client, "scan_states", prefix.as_bytes(), revision, REQUEST_TIMEOUT);
    let mut last: HashMap<String, Stored> = HashMap::default();
    loop {
        let page = match pages.next().await {
            Ok(Some(page)) => page,
            Ok(None) => return Ok(last),
            Err(EtcdError::Failed(e)) if last.is_empty() && pages.revision() == revision => {
                tracing::warn!(error = %e, revision, "catch-up scan: job states at load time unavailable; using current ones");
                pages = Pages::new(&ctx.client, "scan_states", prefix.as_bytes(), 0, REQUEST_TIMEOUT);
                continue;
            }
            Err(e) => return Err(e),
        };
        for item in page {
            if let Some(Key::State(job)) = ctx.keys.parse(item.key()) {
                let stored = match JobState::from_bytes(item.value()) {
                    Some(state) => Stored::State(state.last_tick_ms),
                    None => Stored::Malformed { mod_revision: item.mod_revision(), bytes: item.value().len() },
                };
                last.insert(job, stored);
            }
        }
    }
}

/// A job's `{ns}/state/{job}` as the scan read it, or where a sweep starts.
#[derive(Debug, Clone, Copy)]
enum Stored {
    /// The job state: it trails the newest claimed tick by up to `STATE_EVERY`.
    State(UnixMs),
    Missing,
    /// Not what `JobState::to_bytes` writes (written around the API).
    Malformed {
        mod_revision: i64,
        bytes: usize,
    },
    At(UnixMs),
}

/// Settles one job's unclaimed ticks in `(last, upto]`; `false` when etcd failed the scan (the
/// ticks are then still unaccounted for).
///
/// `schedules` keeps the schedules parsed during one pass over many jobs.
async fn scan_job(
    ctx: &Context,
    job: &str,
    stored: Stored,
    upto: UnixMs,
    gap: Gap,
    schedules: &mut ScheduleCache,
) -> bool {
    let Some(entry) = ctx.jobs.get(job) else { return true };
    let (last, from_state) = match stored {
        Stored::State(last) => (last, true),
        Stored::At(last) => (last, false),
        Stored::Missing | Stored::Malformed { .. } => return restart_state(ctx, job, &stored, upto).await,
    };
    let Ok(schedule) = entry.spec.parsed_schedule_cached(job, schedules) else { return true };
    let Some((ticks, older)) = walk(schedule, last, upto).await else { return true };
    let Some(&first) = ticks.front() else { return true };
    let Some(claimed) = claimed_ticks(ctx, job, first, upto).await else { return false };
    let mut unclaimed: Vec<UnixMs> = ticks.into_iter().filter(|t| !claimed.contains(t)).collect();
    if let (Some(pool), false) = (&entry.spec.pool, unclaimed.is_empty()) {
        // A tick waiting in its pool's queue is looked after by the workers waiting with it.
        let Some(waiting) = waiting_ticks(ctx, pool, job).await else { return false };
        let here = |t: &UnixMs| {
            ctx.pools.waits_here(&etcron_model::keys::ExecutionId::new(job, Tick::Scheduled(*t)).to_string())
        };
        // Until its start deadline; past it, its waiters have recorded it (or etcd did not
        // answer them, and an entry they could not remove stays): the sweep settles it.
        let deadline = i64::try_from(entry.spec.start_deadline().as_millis()).unwrap_or(i64::MAX / 4);
        let now = now_ms();
        unclaimed.retain(|t| !((waiting.contains(t) || here(t)) && t + deadline > now));
    }
    let (unsure, unclaimed) =
        if from_state { split_unsure(unclaimed, last, now_ms()) } else { (Vec::new(), unclaimed) };
    if !unsure.is_empty() {
        tracing::warn!(
            job,
            ticks = unsure.len(),
            "ticks with no claim left, within STATE_EVERY after the job state and older than a claim's retention: they may have run before the outage; recorded missed where no record exists, never run again"
        );
        METRICS.unsure_ticks.inc_by(unsure.len() as u64);
    }
    if unclaimed.is_empty() && unsure.is_empty() && older == 0 {
        // Every tick was claimed, and each claim moved the state forward already.
        return true;
    }
    let mut ops = vec![claim::advance_state(&ctx.keys.state(job), upto)];
    let spec = &entry.spec;
    let pause = ctx.paused.get(job);
    let halted = halt(spec, pause.as_ref()).map(|h| h.reason());
    let mut decided = plan(&unclaimed, older, spec.misfire, spec.max_catchup, halted.as_deref(), gap);
    decided.record.splice(0..0, unsure.into_iter().map(|t| (t, UNSURE_REASON.to_owned())));
    tracing::warn!(
        job,
        since = %rfc3339_ms(last),
        until = %rfc3339_ms(upto),
        unclaimed = unclaimed.len(),
        older,
        run = decided.run.len(),
        record = decided.record.len(),
        misfire = ?spec.misfire,
        ?gap,
        "ticks nobody claimed: applying the misfire policy"
    );
    if let Some((&first, rest)) = decided.run.split_first() {
        ops.push(catchup_request(&ctx.keys, job, first, rest.to_vec(), now_ms()));
    }
    if !commit(ctx, job, Txn::new().and_then(ops), "writing the state and the catch-up request").await {
        return false;
    }
    let status = if halted.is_none() { Status::Missed } else { Status::Skipped };
    for (tick, reason) in decided.record {
        let fire = Fire::schedule_tick(job, (entry.spec.clone(), entry.mod_revision), tick, None);
        record_not_run(ctx, &fire, status, reason).await;
    }
    true
}

/// The schedule ticks of `job` waiting in `pool`'s queue now; `None` when etcd failed.
async fn waiting_ticks(ctx: &Context, pool: &str, job: &str) -> Option<HashSet<UnixMs>> {
    let mut kv = ctx.client.kv_client();
    let resp = request("pool_queue", kv.get(ctx.keys.pool_wait_prefix(pool), Some(GetOptions::new().with_prefix())))
        .await
        .ok()?;
    let waiting =
        resp.kvs().iter().filter_map(|kv| serde_json::from_slice::<etcron_model::pool::Waiting>(kv.value()).ok());
    Some(waiting.filter(|w| w.execution_id.job == job).filter_map(|w| w.execution_id.tick.scheduled_ms()).collect())
}

/// A job state that tells nothing (missing: a job from before states existed, or written
/// straight into etcd; malformed: written around the API) starts again at `upto`, unless it
/// changed meanwhile; the ticks before are not caught up.
async fn restart_state(ctx: &Context, job: &str, stored: &Stored, upto: UnixMs) -> bool {
    let state_key = ctx.keys.state(job);
    let put = TxnOp::put(state_key.as_str(), JobState { last_tick_ms: upto }.to_bytes(), None);
    match *stored {
        Stored::Malformed { mod_revision, bytes } => {
            tracing::error!(
                job,
                key = %state_key,
                bytes,
                "job state in etcd is malformed (expected {{\"last_tick_ms\":<13 digits>}}); resetting it to now, ticks missed before now are not caught up"
            );
            let txn = Txn::new()
                .when([Compare::mod_revision(state_key.as_str(), CompareOp::Equal, mod_revision)])
                .and_then([put]);
            commit(ctx, job, txn, "resetting the malformed job state").await
        }
        _ => {
            let txn = Txn::new().when([Compare::version(state_key.as_str(), CompareOp::Equal, 0)]).and_then([put]);
            commit(ctx, job, txn, "starting the job state").await
        }
    }
}

/// Which ticks of `job` in `[first, upto]` were claimed (run, skipped, missed or lost), in one
/// range read; `None` when etcd failed it.
async fn claimed_ticks(ctx: &Context, job: &str, first: UnixMs, upto: UnixMs) -> Option<HashSet<UnixMs>> {
    let prefix = ctx.keys.job_claims_prefix(job);
    let from = format!("{prefix}{first}");
    let to = format!("{prefix}{}", upto + 1);
    let opts = GetOptions::new().with_range(to).with_keys_only();
    match request("scan_claims", ctx.client.kv_client().get(from, Some(opts))).await {
        Ok(r) => Some(
            r.kvs()
                .iter()
                .filter_map(|kv| match ctx.keys.parse(kv.key()) {
                    Some(Key::Claim(id)) => id.tick.scheduled_ms(),
                    _ => None,
                })
                .collect(),
        ),
        Err(EtcdError::Failed(e)) => {
            tracing::error!(job, error = %e, "catch-up scan: cannot read claims; missed ticks are not accounted for");
            None
        }
        Err(EtcdError::Timeout) => {
            tracing::error!(job, "catch-up scan: reading claims timed out; missed ticks are not accounted for");
            None
        }
    }
}

/// Sweeps the ranges noted in `ctx.unsettled`, once etcd answers, every second. A job's range
/// is swept by its first-ranked worker after `MISSED_AFTER` of quiet, by the others after twice
/// that (then usually finding every tick claimed: one read, no write).
pub async fn sweep_loop(ctx: Arc<Context>) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if ctx.unsettled.is_empty() {
            continue;
        }
        // etcd answers a linearizable read only with a quorum: the outage is over.
        let mut kv = ctx.client.kv_client();
        let probe = kv.get(ctx.keys.state_prefix(), Some(GetOptions::new().with_prefix().with_count_only()));
        if request("probe", probe).await.is_err() {
            continue;
        }
        let first_ranked = |job: &str| ctx.members.rank(&ctx.config.worker_id, &format!("catchup/{job}")) == 0;
        let due =
            ctx.unsettled.take_ripe(
                MISSED_AFTER,
                |job| {
                    if first_ranked(job) {
                        MISSED_AFTER
                    } else {
                        MISSED_AFTER * 2
                    }
                },
            );
        for sweep in due {
            if !sweep_range(&ctx, &sweep).await {
                ctx.unsettled.restore(sweep);
            }
        }
    }
}

/// Settles the unclaimed ticks of one noted range; `false` when etcd failed part of it.
async fn sweep_range(ctx: &Context, sweep: &Sweep) -> bool {
    match sweep {
        Sweep::Job { job, first, last } => {
            tracing::warn!(job, from = %rfc3339_ms(*first), to = %rfc3339_ms(*last), "settling ticks etcd kept this worker from accounting for");
            scan_job(ctx, job, Stored::At(first - 1), *last, Gap::EtcdUnreachable, &mut ScheduleCache::default()).await
        }
        Sweep::All { first, last, gap } => {
            let jobs = ctx.jobs.names();
            tracing::warn!(jobs = jobs.len(), from = %rfc3339_ms(*first), to = %rfc3339_ms(*last), "sweeping every job's ticks a departed worker may have left unsettled");
            let mut complete = true;
            let mut schedules = ScheduleCache::default();
            for (i, job) in jobs.into_iter().enumerate() {
                if i % YIELD_EVERY == YIELD_EVERY - 1 {
                    tokio::task::yield_now().await;
                }
                // Most jobs have no tick in a short range: passed over without asking etcd.
                if !has_tick(ctx, &job, *first, *last, &mut schedules) {
                    continue;
                }
                // No tick of the job's current schedule was due before this worker had it, nor
                // before the job was made.
                let since = match ctx.jobs.timing_since(&job) {
                    Some(crate::context::TIMING_UNKNOWN) => created_ms(ctx, &job).await.unwrap_or(*first).max(*first),
                    since => since.map_or(*first, |s| s.max(*first)),
                };
                if since <= *last && !scan_job(ctx, &job, Stored::At(since - 1), *last, *gap, &mut schedules).await {
                    complete = false;
                }
            }
            complete
        }
    }
}

/// [`ticks_between`]; walking a long gap of a frequent schedule takes a while: off the async
/// workers (inline for a short gap, whose walk costs less than the hand-over; and under the
/// simulation, whose runs must not depend on when another thread finishes).
async fn walk(
    schedule: etcron_model::schedule::Schedule,
    last: UnixMs,
    upto: UnixMs,
) -> Option<(VecDeque<UnixMs>, usize)> {
    if etcron_model::clock_is_simulated() || upto.saturating_sub(last) <= INLINE_WALK_MS {
        Some(ticks_between(&schedule, last, upto))
    } else {
        tokio::task::spawn_blocking(move || ticks_between(&schedule, last, upto)).await.ok()
    }
}

/// Whether `job`'s schedule has a tick in `[first, last]` (a job this worker cannot read has
/// none to settle).
fn has_tick(ctx: &Context, job: &str, first: UnixMs, last: UnixMs, schedules: &mut ScheduleCache) -> bool {
    let Some(entry) = ctx.jobs.get(job) else { return false };
    let Ok(schedule) = entry.spec.parsed_schedule_cached(job, schedules) else { return false };
    schedule.next_after(first - 1).is_some_and(|t| t <= last)
}

/// When `job` was made, as the first value of its catch-up state says (the master writes it
/// with the job); `None` when etcd cannot tell (no state, compacted, unreachable).
async fn created_ms(ctx: &Context, job: &str) -> Option<UnixMs> {
    let key = ctx.keys.state(job);
    let mut kv = ctx.client.kv_client();
    let now = request("scan_state", kv.get(key.as_str(), None)).await.ok()?;
    let created = now.kvs().first()?.create_revision();
    let opts = etcd_client::GetOptions::new().with_revision(created);
    let first = request("scan_state", kv.get(key.as_str(), Some(opts))).await.ok()?;
    Some(JobState::from_bytes(first.kvs().first()?.value())?.last_tick_ms)
}

/// The newest `MAX_SCAN_TICKS` ticks after `last` up to `upto`, and how many older ones there
/// were.
fn ticks_between(schedule: &etcron_model::schedule::Schedule, last: UnixMs, upto: UnixMs) -> (VecDeque<UnixMs>, usize) {
    let mut ticks = VecDeque::new();
    let mut older = 0usize;
    let mut t = last;
    while let Some(next) = schedule.next_after(t) {
        if next > upto {
            break;
        }
        if ticks.len() == MAX_SCAN_TICKS {
            ticks.pop_front();
            older += 1;
        }
        ticks.push_back(next);
        t = next;
    }
    (ticks, older)
}

/// Runs one scan transaction; a failure is logged, naming what the scan could not write.
async fn commit(ctx: &Context, job: &str, txn: Txn, what: &str) -> bool {
    match request("scan_commit", ctx.client.kv_client().txn(txn)).await {
        Ok(_) => true,
        Err(EtcdError::Failed(e)) => {
            tracing::error!(job, error = %e, "catch-up scan: {what} failed");
            false
        }
        Err(EtcdError::Timeout) => {
            tracing::error!(job, "catch-up scan: {what} timed out");
            false
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_old_ticks_just_after_the_state_are_unsure() {
        let state = 1_000_000_000_000;
        let (lag, retention) = (60_000, 600_000);
        let ticks = vec![state + 1_000, state + lag, state + lag + 1_000, state + 700_000];
        // Right after the outage: every claim is still there, nothing is unsure.
        assert_eq!(split_unsure(ticks.clone(), state, state + lag + 2_000), (vec![], ticks.clone()));
        // A long outage: the ticks within the lag after the state may have lost their claims.
        let now = state + 2 * retention;
        assert_eq!(
            split_unsure(ticks, state, now),
            (vec![state + 1_000, state + lag], vec![state + lag + 1_000, state + 700_000])
        );
    }

    fn ticks(p: &Plan) -> Vec<UnixMs> {
        p.record.iter().map(|r| r.0).collect()
    }

    #[test]
    fn skip_records_every_tick() {
        let p = plan(&[1, 2, 3], 0, Misfire::Skip, 1, None, Gap::NoWorker);
        assert!(p.run.is_empty());
        assert_eq!(ticks(&p), vec![1, 2, 3]);
        assert!(p.record.iter().all(|r| r.1.contains("misfire: skip")));
    }

    #[test]
    fn run_once_runs_the_newest_and_records_the_rest() {
        let p = plan(&[1, 2, 3], 0, Misfire::RunOnce, 100, None, Gap::NoWorker);
        assert_eq!(p.run, vec![3]);
        assert_eq!(ticks(&p), vec![1, 2]);
        assert!(p.record[0].1.contains("run_once"));
    }

    #[test]
    fn run_all_is_bounded_by_max_catchup_keeping_the_newest_and_records_the_rest() {
        let p = plan(&[1, 2, 3, 4, 5], 0, Misfire::RunAll, 3, None, Gap::NoWorker);
        assert_eq!(p.run, vec![3, 4, 5]);
        assert_eq!(ticks(&p), vec![1, 2]);
        assert!(p.record[0].1.contains("max_catchup"), "{}", p.record[0].1);
        let p = plan(&[1, 2], 0, Misfire::RunAll, 3, None, Gap::NoWorker);
        assert_eq!((p.run, p.record.len()), (vec![1, 2], 0));
    }

    #[test]
    fn records_beyond_the_cap_are_summarised_not_dropped_silently() {
        let many: Vec<UnixMs> = (1..=1005).collect();
        let p = plan(&many, 10, Misfire::Skip, 100, None, Gap::NoWorker);
        assert_eq!(p.record.len(), MAX_MISSED_RECORDS);
        assert_eq!(p.record[0].0, 6);
        assert!(p.record[0].1.contains("15 older ticks"), "{}", p.record[0].1);
        assert!(!p.record[1].1.contains("older ticks"));
    }

    #[test]
    fn paused_jobs_record_skips_whatever_the_policy() {
        let p = plan(&[1, 2], 0, Misfire::RunAll, 100, Some("job paused by alice: db migration"), Gap::NoWorker);
        assert!(p.run.is_empty());
        assert_eq!(p.record.len(), 2);
        assert!(p.record[0].1.starts_with("job paused by alice: db migration; no worker claimed"), "{:?}", p.record);
        let p =
            plan(&[1], 0, Misfire::RunOnce, 100, Some("job disabled (its spec says enabled: false)"), Gap::NoWorker);
        assert!(p.run.is_empty() && p.record[0].1.starts_with("job disabled"), "{p:?}");
    }

    #[test]
    fn nothing_unclaimed_means_nothing_to_do() {
        assert_eq!(plan(&[], 0, Misfire::RunOnce, 100, None, Gap::NoWorker), Plan { run: vec![], record: vec![] });
    }

    #[test]
    fn outage_gaps_say_etcd_was_unreachable() {
        let p = plan(&[1, 2], 0, Misfire::Skip, 100, None, Gap::EtcdUnreachable);
        assert!(p.record.iter().all(|r| r.1.contains("etcd was unreachable")), "{:?}", p.record);
    }
}
