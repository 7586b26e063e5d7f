//! SLA alerts (`alerts` of a job, `etcron_model::spec::alerts`) as workers raise them, each
//! occurrence once in the cluster:
//!
//! - `late`: the worker that starts a schedule tick's first attempt past `late_start` raises
//!   it; so does the worker that queued a tick (`concurrency: queue`) still waiting then.
//! - `long_running`: the worker running an execution, `max_duration` after its start.
//! - `stale`: every worker looks at every job with `no_success_within` when its window ends
//!   (`{ns}/alerts/{job}/stale`, rewritten by each success after its close).
//!
//! A raise is a transaction: `late` and `long_running` create `{ns}/alerts/{job}/{execution}/{event}`
//! only if absent (a queued tick's also only while its claim still says `queued`), `stale`
//! rewrites the window's key at the revision read. Only the worker whose transaction took it
//! notifies, so workers racing to raise the same occurrence raise it once. None of this is on
//! the claim path: raises run in their own tasks.

use etcron_common::hash::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use etcron_common::etcd::EtcdError;
use etcron_model::duration::HumanDuration;
use etcron_model::record::TriggerKind;
use etcron_model::spec::alerts::{Raised, StaleState};
use etcron_model::spec::notify::NotifyEvent;
use etcron_model::spec::JobSpec;
use etcron_model::stored::Claim;
use etcron_model::{now_ms, rfc3339_ms, UnixMs};
use tokio::sync::oneshot;

use crate::context::Context;
use crate::metrics::METRICS;
use crate::notify::notifier::Alert;
use crate::timing::fire::{to_json, Fire};

/// Tries of an alert's transaction that etcd failed before the alert is given up, loudly.
const RAISE_TRIES: u32 = 5;
/// How often the `stale` check looks at the jobs (a job's key is read only when its window
/// ends, and once when the worker starts).
const STALE_EVERY: Duration = Duration::from_secs(1);
/// Wait before reading a job's `stale` window again after etcd failed.
const STALE_RETRY_MS: UnixMs = 5_000;

/// Ends a run's `max_duration` watch when dropped (the run ended).
pub(crate) struct RunWatch {
    _ended: Option<oneshot::Sender<()>>,
}

/// At the start of a run this worker won: `late` when it started past `late_start`, and the
/// `max_duration` watch, which raises `long_running` unless the run ends first.
pub(crate) fn run_started(ctx: &Arc<Context>, fire: &Fire, started_ms: UnixMs) -> RunWatch {
    let Some(alerts) = fire.spec.alerts.as_ref() else { return RunWatch { _ended: None } };
    if let Some(limit) = alerts.late_start {
        if let Some(late) = late_by(fire.trigger, fire.id.attempt, fire.scheduled_ms, started_ms, limit.0) {
            let message = format!("started {} after its scheduled time", span(late));
            let alert = execution_alert(fire, NotifyEvent::Late, message, limit);
            let key = ctx.keys.alert(&fire.id, NotifyEvent::Late.as_str());
            spawn_raise(ctx, fire.spec.clone(), key, Vec::new(), alert);
        }
    }
    let Some(limit) = alerts.max_duration else { return RunWatch { _ended: None } };
    let (ended_tx, ended) = oneshot::channel::<()>();
    let (ctx, fire) = (ctx.clone(), fire.clone());
    etcron_common::task::spawn(async move {
        tokio::select! {
            () = tokio::time::sleep(limit.0) => {}
            _ = ended => return,
        }
        let message = format!("has been running for {limit} (max_duration)");
        let alert = execution_alert(&fire, NotifyEvent::LongRunning, message, limit);
        let key = ctx.keys.alert(&fire.id, NotifyEvent::LongRunning.as_str());
        raise(&ctx, &fire.spec, key, Vec::new(), alert).await;
    });
    RunWatch { _ended: Some(ended_tx) }
}

/// A tick this worker queued behind a running execution: `late` if its claim still says
/// `queued` when `late_start` has passed.
pub(crate) fn queued(ctx: &Arc<Context>, fire: &Fire) {
    let Some(limit) = fire.spec.alerts.as_ref().and_then(|a| a.late_start) else { return };
    if !can_be_late(fire.trigger, fire.id.attempt) {
        return;
    }
    let (ctx, fire) = (ctx.clone(), fire.clone());
    etcron_common::task::spawn(async move {
        let due = fire.scheduled_ms.saturating_add(ms(limit.0)).saturating_add(1);
        let wait = u64::try_from(due - now_ms()).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let claim_key = ctx.keys.claim(&fire.id);
        let mut kv = ctx.client.kv_client();
        let Ok(resp) = etcron_common::etcd::request("claim_read", kv.get(claim_key.as_str(), None)).await else {
            tracing::warn!(execution_id = %fire.id, "reading a queued execution's claim failed: its late start is alerted when it starts");
            return;
        };
        let Some(found) = resp.kvs().first() else { return };
        if !serde_json::from_slice::<Claim>(found.value()).is_ok_and(|c| c.queued) {
            return;
        }
        let message = format!(
            "is still waiting in the job's queue {} after its scheduled time",
            span(now_ms() - fire.scheduled_ms)
        );
        let alert = execution_alert(&fire, NotifyEvent::Late, message, limit);
        let key = ctx.keys.alert(&fire.id, NotifyEvent::Late.as_str());
        let still_queued = Compare::mod_revision(claim_key.as_str(), CompareOp::Equal, found.mod_revision());
        raise(&ctx, &fire.spec, key, vec![still_queued], alert).await;
    });
}

/// After a success of a job with `no_success_within` was closed: its window starts again at
/// the success's end (one put, in its own task).
pub(crate) fn succeeded(ctx: &Arc<Context>, spec: &JobSpec, job: &str, finished_ms: UnixMs) {
    if spec.alerts.as_ref().and_then(|a| a.no_success_within).is_none() {
        return;
    }
    let (ctx, key) = (ctx.clone(), ctx.keys.stale(job));
    let value = to_json(&StaleState { base_ms: finished_ms, success: true, raised: None });
    let job = job.to_owned();
    etcron_common::task::spawn(async move {
        let mut kv = ctx.client.kv_client();
        for attempt in 1..=RAISE_TRIES {
            if etcron_common::etcd::request("stale_reset", kv.put(key.as_str(), value.clone(), None)).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
        }
        METRICS.alert_errors.inc();
        tracing::error!(job = %job, "etcd did not take a success's end for no_success_within: the job may be alerted stale although it succeeded");
    });
}

/// How many ms past `late_start` a run started at `started_ms` is, when it is late: only the
/// first attempt of a schedule tick (or of a catch-up of one) has a time to be late for.
#[must_use]
pub fn late_by(
    trigger: TriggerKind,
    attempt: u32,
    scheduled_ms: UnixMs,
    started_ms: UnixMs,
    late_start: Duration,
) -> Option<i64> {
    let late = started_ms - scheduled_ms;
    (can_be_late(trigger, attempt) && late > ms(late_start)).then_some(late)
}

/// Whether an execution has a scheduled time to be late for.
#[must_use]
pub fn can_be_late(trigger: TriggerKind, attempt: u32) -> bool {
    attempt == 1 && matches!(trigger, TriggerKind::Schedule | TriggerKind::Catchup)
}

fn execution_alert(fire: &Fire, event: NotifyEvent, message: String, threshold: HumanDuration) -> Alert {
    Alert {
        event,
        job: fire.id.job.clone(),
        execution_id: Some(fire.id.to_string()),
        occurrence: fire.id.to_string(),
        message: format!("{}: execution {} {message}", threshold_name(event), fire.id),
        threshold: threshold.to_string(),
        scheduled_at: Some(rfc3339_ms(fire.scheduled_ms)),
    }
}

fn threshold_name(event: NotifyEvent) -> &'static str {
    match event {
        NotifyEvent::Late => "late_start",
        NotifyEvent::LongRunning => "max_duration",
        _ => "no_success_within",
    }
}

fn spawn_raise(ctx: &Arc<Context>, spec: Arc<JobSpec>, key: String, guard: Vec<Compare>, alert: Alert) {
    let ctx = ctx.clone();
    etcron_common::task::spawn(async move { raise(&ctx, &spec, key, guard, alert).await });
}

/// Raises `alert` if this worker's transaction creates `key` (with `guard` holding): then it is
/// counted, logged and handed to the notifier.
async fn raise(ctx: &Context, spec: &JobSpec, key: String, guard: Vec<Compare>, alert: Alert) {
    match create(ctx, &key, guard).await {
        Ok(true) => announce(ctx, spec, alert),
        Ok(false) => tracing::debug!(key = %key, "alert raised by another worker, or no longer due"),
        Err(e) => {
            METRICS.alert_errors.inc();
            tracing::error!(job = %alert.job, event = alert.event.as_str(), error = %e, "ALERT NOT RAISED: etcd failed every try to decide it");
        }
    }
}

fn announce(ctx: &Context, spec: &JobSpec, alert: Alert) {
    METRICS.alerts.with_label_values(&[alert.event.as_str()]).inc();
    tracing::warn!(job = %alert.job, event = alert.event.as_str(), "ALERT: {}", alert.message);
    ctx.notifier.alert(spec, alert);
}

/// Creates `key` (on the alert lease) if it is absent and `guard` holds; `Ok(true)` when this
/// worker's transaction did. An answer etcd lost is resolved by reading the key back.
async fn create(ctx: &Context, key: &str, guard: Vec<Compare>) -> Result<bool, String> {
    let lease = ctx.long_leases.get().await.map_err(|e| e.to_string())?;
    let mine = Raised { worker_id: ctx.config.worker_id.clone(), at_ms: now_ms() };
    let txn = Txn::new()
        .when([Compare::version(key, CompareOp::Equal, 0)].into_iter().chain(guard).collect::<Vec<_>>())
        .and_then([TxnOp::put(key, to_json(&mine), Some(PutOptions::new().with_lease(lease)))]);
    commit(ctx, "alert_raise", key, txn, &mine).await
}

/// Commits `txn`, which writes `mine` (as itself or inside a value) to `key`; `Ok(true)` when
/// it was this transaction. Tries again while etcd fails, reading the key back first.
async fn commit(ctx: &Context, op: &'static str, key: &str, txn: Txn, mine: &Raised) -> Result<bool, String> {
    let mut kv = ctx.client.kv_client();
    let mut error = String::new();
    for attempt in 1..=RAISE_TRIES {
        match etcron_common::etcd::request(op, kv.txn(txn.clone())).await {
            Ok(resp) => return Ok(resp.succeeded()),
            Err(EtcdError::Failed(e)) => error = e.to_string(),
            Err(EtcdError::Timeout) => error = "no answer from etcd".to_owned(),
        }
        if let Ok(resp) = etcron_common::etcd::request("alert_read", kv.get(key, None)).await {
            if let Some(found) = resp.kvs().first() {
                return Ok(raised_by(found.value()).as_ref() == Some(mine));
            }
        }
        tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
    }
    Err(error)
}

/// Who raised an alert, from its key's value (a `Raised`, or a `StaleState` with one).
fn raised_by(value: &[u8]) -> Option<Raised> {
    serde_json::from_slice::<Raised>(value)
        .ok()
        .or_else(|| serde_json::from_slice::<StaleState>(value).ok().and_then(|s| s.raised))
}

/// What the `stale` check remembers of a job.
#[derive(Debug, Default)]
struct Watched {
    /// When to read the job's window next.
    next_read_ms: UnixMs,
    /// Scheduled (enabled and not paused) when last looked at.
    active: bool,
    /// When this worker last saw the job become scheduled again.
    resumed_ms: Option<UnixMs>,
}

/// Raises `stale` for every job with `no_success_within` whose window ends without a success;
/// runs on every worker (see the module docs).
pub async fn stale_loop(ctx: Arc<Context>) {
    let mut watched: HashMap<String, Watched> = HashMap::default();
    let mut every = tokio::time::interval(STALE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        check_stale(&ctx, &mut watched).await;
    }
}

async fn check_stale(ctx: &Arc<Context>, watched: &mut HashMap<String, Watched>) {
    // Only the jobs with `no_success_within` (the table keeps them apart): a cluster of many
    // jobs without it pays nothing here.
    let jobs: Vec<_> = ctx
        .jobs
        .stale_windows()
        .into_iter()
        .filter_map(|(name, window)| Some((name.clone(), ctx.jobs.get(&name)?.spec, window)))
        .collect();
    let names: HashSet<&str> = jobs.iter().map(|(name, _, _)| name.as_str()).collect();
    watched.retain(|job, _| names.contains(job.as_str()));
    for (job, spec, window) in &jobs {
        let now = now_ms();
        let active = spec.enabled && ctx.paused.get(job).is_none();
        let w = watched.entry(job.clone()).or_insert_with(|| Watched { active, ..Watched::default() });
        if active && !w.active {
            w.resumed_ms = Some(now);
        }
        w.active = active;
        if !active || now < w.next_read_ms {
            continue;
        }
        w.next_read_ms = check_window(ctx, spec, job, *window, w.resumed_ms).await;
    }
}

/// Reads one job's window and raises `stale` when it has ended unraised; answers when to read
/// it next.
async fn check_window(
    ctx: &Arc<Context>,
    spec: &JobSpec,
    job: &str,
    window: HumanDuration,
    resumed_ms: Option<UnixMs>,
) -> UnixMs {
    let key = ctx.keys.stale(job);
    let mut kv = ctx.client.kv_client();
    let now = now_ms();
    let found = match etcron_common::etcd::request("stale_read", kv.get(key.as_str(), None)).await {
        Ok(resp) => resp.kvs().first().map(|kv| (kv.mod_revision(), kv.value().to_vec())),
        _ => return now + STALE_RETRY_MS,
    };
    let Some((revision, value)) = found else {
        // Never looked at (or never succeeded since the job was saved): the window starts now.
        let first = StaleState { base_ms: now, success: false, raised: None };
        let txn = Txn::new().when([Compare::version(key.as_str(), CompareOp::Equal, 0)]).and_then([TxnOp::put(
            key.as_str(),
            to_json(&first),
            None,
        )]);
        return match etcron_common::etcd::request("stale_start", kv.txn(txn)).await {
            Ok(_) => now,
            _ => now + STALE_RETRY_MS,
        };
    };
    let state = serde_json::from_slice::<StaleState>(&value).unwrap_or(StaleState {
        base_ms: now,
        success: false,
        raised: None,
    });
    // Raised: the next window starts with a success, which is at least a window away.
    let next_look = now.saturating_add(ms(window.0));
    if state.raised.is_some() {
        return next_look;
    }
    let due = state.due_ms(window.0, resumed_ms);
    if now < due {
        return due;
    }
    let mine = Raised { worker_id: ctx.config.worker_id.clone(), at_ms: now };
    let raised = StaleState { raised: Some(mine.clone()), ..state.clone() };
    let txn = Txn::new()
        .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, revision)])
        .and_then([TxnOp::put(key.as_str(), to_json(&raised), None)]);
    match commit(ctx, "stale_raise", &key, txn, &mine).await {
        Ok(true) => announce(ctx, spec, stale_alert(job, &state, window)),
        Ok(false) => return now,
        Err(e) => {
            METRICS.alert_errors.inc();
            tracing::error!(job = %job, error = %e, "ALERT NOT RAISED: etcd failed every try to decide stale");
            return now + STALE_RETRY_MS;
        }
    }
    next_look
}

fn stale_alert(job: &str, state: &StaleState, window: HumanDuration) -> Alert {
    let since = rfc3339_ms(state.base_ms);
    let what = if state.success {
        format!("has not succeeded since {since}")
    } else {
        format!("has not succeeded since {since}, when its no_success_within was first checked")
    };
    Alert {
        event: NotifyEvent::Stale,
        job: job.to_owned(),
        execution_id: None,
        occurrence: state.occurrence(job),
        message: format!("no_success_within: {what} ({window})"),
        threshold: window.to_string(),
        scheduled_at: None,
    }
}

/// `ms` as a duration people read: `75s`, `2m 5s`.
fn span(ms_late: i64) -> String {
    HumanDuration(Duration::from_millis(u64::try_from(ms_late.max(0)).unwrap_or(0) / 1000 * 1000)).to_string()
}

fn ms(d: Duration) -> UnixMs {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_raiser_is_read_from_either_kind_of_value() {
        let mine = Raised { worker_id: "w1".into(), at_ms: 5 };
        assert_eq!(raised_by(&to_json(&mine)), Some(mine.clone()));
        let stale = StaleState { base_ms: 1, success: true, raised: Some(mine.clone()) };
        assert_eq!(raised_by(&to_json(&stale)), Some(mine));
        assert_eq!(raised_by(&to_json(&StaleState { raised: None, ..stale })), None);
        assert_eq!(raised_by(b"junk"), None);
    }

    #[test]
    fn only_first_attempts_of_ticks_are_late_and_only_past_the_limit() {
        let m = Duration::from_secs(60);
        assert_eq!(late_by(TriggerKind::Schedule, 1, 0, 60_000, m), None, "exactly at the limit");
        assert_eq!(late_by(TriggerKind::Schedule, 1, 0, 60_001, m), Some(60_001));
        assert_eq!(late_by(TriggerKind::Catchup, 1, 0, 90_000, m), Some(90_000));
        for trigger in [TriggerKind::Manual, TriggerKind::Retry, TriggerKind::Backfill, TriggerKind::Failover] {
            assert_eq!(late_by(trigger, 1, 0, 90_000, m), None, "{trigger:?}");
        }
        assert_eq!(late_by(TriggerKind::Schedule, 2, 0, 90_000, m), None, "a retry of a tick");
    }

    #[test]
    fn lateness_reads_in_whole_seconds() {
        assert_eq!(span(75_400), "1m 15s");
        assert_eq!(span(-3), "0s");
    }

    #[test]
    fn alerts_name_their_threshold_and_occurrence() {
        let state = StaleState { base_ms: 0, success: false, raised: None };
        let a = stale_alert("nightly", &state, HumanDuration::from_secs(7200));
        assert_eq!(a.occurrence, "nightly@stale-0");
        assert_eq!(a.threshold, "2h");
        assert!(
            a.message.starts_with("no_success_within: has not succeeded since 1970-01-01T00:00:00.000Z, when"),
            "{}",
            a.message
        );
    }
}
