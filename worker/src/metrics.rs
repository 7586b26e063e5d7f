//! The worker's Prometheus metrics, served at `/metrics` on `--metrics-listen` (off by default).
//! The etcd request metrics and the process metrics come from `etcron_common::metrics`.
//!
//! Labels stay bounded: `job` appears only on `etcron_worker_executions_total` (one series per
//! job and status that actually occurred on this worker); every other label has a fixed set of
//! values.

use std::sync::LazyLock;

use etcron_common::metrics::{counter, counter_vec, gauge, gauge_vec, histogram, histogram_vec, LATENCY_BUCKETS};
use prometheus::{Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec};

/// Fire lateness buckets in seconds (task start minus scheduled time): 1 ms to 1 min.
const LATENESS_BUCKETS: &[f64] =
    &[0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

pub struct WorkerMetrics {
    /// Fires that came due on this worker, by trigger (every worker sees every schedule tick
    /// of the jobs it may run; run requests come due on every worker too).
    pub ticks_due: IntCounterVec,
    /// Fires this worker did not race for, by reason (selector, capacity, no_lease, late).
    pub not_raced: IntCounterVec,
    /// Claim attempts by outcome: won, lost (another worker's txn won), taken_seen (a
    /// ranked-later worker saw the claim in its watch), taken (it read the claim from etcd
    /// before writing), blocked (concurrency forbid), unknown (etcd did not answer),
    /// unknown_won (an unknown outcome later read back as ours), unknown_orphaned (read back as
    /// ours, but its session had ended: closed `missed`), unknown_unresolved (an orphan etcd
    /// would not let this worker read again or close: its tick stays claimed and unrecorded).
    pub claims: IntCounterVec,
    /// Task start minus scheduled time of schedule-triggered executions.
    pub lateness: Histogram,
    /// Execution records by job and status (running records are not counted; the final one is).
    pub executions: IntCounterVec,
    pub running: IntGauge,
    pub capacity: IntGauge,
    pub jobs: IntGauge,
    pub wheel_entries: IntGauge,
    /// The etcd revision of the newest job change this worker has applied (how far its view of
    /// the jobs has caught up: compare with the revision a `PUT /api/jobs/..` answered).
    pub jobs_revision: IntGauge,
    /// Re-lists of a watched prefix after the first list (compaction, cancel).
    pub watch_resyncs: IntCounterVec,
    /// Watches opened again from their last revision (a member cut off, a stream lost).
    pub watch_resumes: IntCounterVec,
    pub lease_losses: IntCounter,
    pub executors_lost: IntCounter,
    /// Departures whose handling a survivor ranked after the first found unfinished (an
    /// execution of the departed worker still unclosed): the first handler died or was slow.
    pub departures_resumed: IntCounter,
    pub departures_owed: IntGauge,
    pub departures_abandoned: IntCounter,
    /// Provisional records (written before a claim this worker closes) waiting for the provisional
    /// loop: left by a crash, or by a close etcd did not answer.
    pub provisional_waiting: IntGauge,
    /// Provisional records that could not be written (the claim was closed without one).
    pub provisional_errors: IntCounter,
    pub sink_queue: IntGauge,
    pub spool_bytes: IntGauge,
    pub records_written: IntCounter,
    pub records_spooled: IntCounter,
    pub records_replayed: IntCounter,
    pub records_dropped: IntCounter,
    pub record_write_errors: IntCounter,
    /// How long the claim transaction took (the race itself, from this worker).
    pub claim_seconds: Histogram,
    /// Closes of finished executions etcd has not taken yet (retried until it does).
    pub closes_pending: IntGauge,
    /// Tries of a close that etcd failed (error or no answer) and that were tried again.
    pub close_retries: IntCounter,
    /// Jobs this worker paused because `pause_after_failures` was reached.
    pub jobs_paused: IntCounter,
    /// Ticks whose job names a skip calendar this worker does not know (run all the same).
    pub calendar_missing: IntCounter,
    /// Dependents (`on_success` / `on_failure`) not triggered because they cross teams.
    pub dependencies_refused: IntCounter,
    pub queued: IntCounter,
    pub queue_stalls: IntCounter,
    pub backfill_chain_broken: IntCounter,
    /// SLA alerts this worker raised (won the occurrence's transaction), by event.
    pub alerts: IntCounterVec,
    /// Checkpoints a task reported that were not stored (fenced, or etcd failed).
    pub checkpoint_errors: IntCounter,
    /// Notifications sent because etcd could not tell whether a silence window was open.
    pub silence_unknown: IntCounter,
    /// Cancel requests of asynchronous HTTP tasks, by outcome (`sent`, `failed`).
    pub http_cancels: IntCounterVec,
    /// Runs this worker refused to start because of what they asked for, by reason
    /// (`run_params`: a run parameter its spec does not declare, or a value off its pattern).
    pub runs_refused: IntCounterVec,
    /// Connections of HTTP and gRPC tasks refused before anything was sent, by class of the
    /// address (`crate::tasks::network::Class`).
    pub task_connections_refused: IntCounterVec,
    /// gRPC runs refused by a memory bound, by limit.
    pub grpc_limits: IntCounterVec,
    /// Progress reports refused before they were read, by reason (`token`: a wrong token or an
    /// execution not running here; `limited`: past the wrong tokens one address may send).
    pub progress_refused: IntCounterVec,
    /// Followers of a running execution's live output refused, by reason (`per_execution`).
    pub followers_refused: IntCounterVec,
    /// Connections following running executions' live output now (masters share one per
    /// execution followed).
    pub followers: IntGauge,
    /// Won runs waiting for a free capacity slot now.
    pub waiting_for_slot: IntGauge,
    /// Ticks this worker waits with in a pool's queue now, by pool.
    pub pool_waiting: IntGaugeVec,
    /// Ticks that found their pool full and began to wait, by pool.
    pub pool_waits: IntCounterVec,
    /// Ticks recorded `missed` by this worker because their pool stayed full (or does not
    /// exist), by pool.
    pub pool_missed: IntCounterVec,
    /// Queue entries etcd did not take (the tick waits all the same, out of the queue's order
    /// until an entry is written), by pool.
    pub pool_enqueue_errors: IntCounterVec,
    /// Slots held (cluster-wide, as this worker's mirror sees them) and slots, by pool.
    pub pool_slots_held: IntGaugeVec,
    pub pool_slots: IntGaugeVec,
    /// Won runs recorded `missed` because no capacity slot came free in time.
    pub runs_without_slot: IntCounter,
    /// Shell runs refused for want of a team uid, by reason (`range_full`: no uid of
    /// `task_uids` left; `account_taken`: the team's uid is now an account of the machine).
    pub task_uid_refusals: IntCounterVec,
    /// SLA alerts that could not be decided (etcd failed every try): possibly not raised.
    pub alert_errors: IntCounter,
    /// Final outcomes of `pause_after_failures` jobs that could not be counted (etcd errors or
    /// contention on the health key past its tries).
    pub health_errors: IntCounter,
    /// Unclaimed ticks the catch-up scan could not tell from ticks that ran (their claims may
    /// have expired during a long outage): recorded `missed` where no record exists, never run.
    pub unsure_ticks: IntCounter,
    /// Kept job specs that did not decode again (`SpecBytes::decode`): a defect, never expected.
    pub spec_decode_errors: IntCounter,
    /// Claims or closes per batch transaction (batches of more than one), by kind.
    pub batch_size: HistogramVec,
    /// Close batches that waited for this worker's claim backlog to clear (starts first).
    pub closes_deferred: IntCounter,
    /// Ranked-later fires that waited for this worker's claim backlog to clear before looking.
    pub claims_held: IntCounter,
}

pub static METRICS: LazyLock<WorkerMetrics> = LazyLock::new(|| {
    WorkerMetrics {
    ticks_due: counter_vec(
        "etcron_worker_ticks_due_total",
        "Fires that came due in this worker's timing wheel, by trigger.",
        &["trigger"],
    ),
    not_raced: counter_vec(
        "etcron_worker_fires_not_raced_total",
        "Fires this worker did not race for, by reason (cordoned, selector, run_as, team, capacity, no_lease, late).",
        &["reason"],
    ),
    claims: counter_vec(
        "etcron_worker_claims_total",
        "Claim attempts by outcome (won, lost, taken_seen, taken, blocked, unknown, unknown_won, unknown_orphaned, won_orphaned, unknown_unresolved).",
        &["outcome"],
    ),
    lateness: histogram(
        "etcron_worker_fire_lateness_seconds",
        "Task start minus scheduled time, schedule-triggered executions.",
        LATENESS_BUCKETS,
    ),
    executions: counter_vec(
        "etcron_worker_executions_total",
        "Execution records this worker wrote, by job and final status.",
        &["job", "status"],
    ),
    running: gauge("etcron_worker_running_executions", "Executions running on this worker."),
    capacity: gauge("etcron_worker_capacity", "Most executions this worker runs at once."),
    jobs: gauge("etcron_worker_jobs", "Jobs in this worker's job table."),
    wheel_entries: gauge(
        "etcron_worker_wheel_entries",
        "Entries in the timing wheel (next ticks and pending run requests).",
    ),
    jobs_revision: gauge(
        "etcron_worker_jobs_revision",
        "etcd revision of the newest job change applied to this worker's job table.",
    ),
    watch_resyncs: counter_vec(
        "etcron_worker_watch_resyncs_total",
        "Re-lists of a watched etcd prefix after its first list (a compaction or a cancel), by watch.",
        &["watch"],
    ),
    watch_resumes: counter_vec(
        "etcron_worker_watch_resumes_total",
        "Watches of an etcd prefix opened again from the revision after their last event (the stream failed), by watch.",
        &["watch"],
    ),
    lease_losses: counter(
        "etcron_worker_session_lease_losses_total",
        "Session leases this worker lost (its running executions were stopped).",
    ),
    executors_lost: counter(
        "etcron_worker_executors_lost_total",
        "Remote executors this worker served that stopped asking for longer than the session TTL (their nodes ended as crashed workers do).",
    ),
    departures_resumed: counter(
        "etcron_worker_departures_resumed_total",
        "Departures whose handling a survivor ranked after the first found unfinished (the first handler died or was slow).",
    ),
    departures_owed: gauge(
        "etcron_worker_departures_owed",
        "Departures of other workers this worker has seen and not yet seen handled (kept in its data dir).",
    ),
    departures_abandoned: counter(
        "etcron_worker_departures_abandoned_total",
        "Departures nobody was seen handling within an hour, given up by this worker (their executions may stay unclosed).",
    ),
    provisional_waiting: gauge(
        "etcron_worker_provisional_records",
        "Provisional records of closed claims waiting to be settled (left by a crash, or etcd did not answer).",
    ),
    provisional_errors: counter(
        "etcron_worker_provisional_record_errors_total",
        "Provisional records that could not be written to the data dir (their claims were closed without one).",
    ),
    sink_queue: gauge("etcron_worker_log_sink_queue_length", "Execution records queued for MongoDB in memory."),
    spool_bytes: gauge("etcron_worker_spool_bytes", "Bytes of execution records waiting in the on-disk spool."),
    records_written: counter("etcron_worker_records_written_total", "Execution record writes MongoDB acknowledged."),
    records_spooled: counter(
        "etcron_worker_records_spooled_total",
        "Execution record writes put into the spool (MongoDB unavailable or the queue full).",
    ),
    records_replayed: counter("etcron_worker_records_replayed_total", "Spooled record writes replayed into MongoDB."),
    records_dropped: counter(
        "etcron_worker_records_lost_total",
        "Execution record writes lost: MongoDB unavailable and the spool not writable.",
    ),
    record_write_errors: counter(
        "etcron_worker_record_write_errors_total",
        "Failed batch writes of execution records to MongoDB.",
    ),
    claim_seconds: histogram(
        "etcron_worker_claim_duration_seconds",
        "Duration of claim transactions.",
        LATENCY_BUCKETS,
    ),
    closes_pending: gauge(
        "etcron_worker_closes_pending",
        "Finished executions whose claim close etcd has not taken yet (retried until it does).",
    ),
    close_retries: counter(
        "etcron_worker_close_retries_total",
        "Claim closes that etcd failed and that were tried again.",
    ),
    jobs_paused: counter(
        "etcron_worker_jobs_paused_total",
        "Jobs paused by this worker because pause_after_failures final failures came in a row.",
    ),
    calendar_missing: counter(
        "etcron_worker_skip_calendar_missing_total",
        "Ticks whose job names a skip calendar that does not exist: run all the same, with a warning.",
    ),
    dependencies_refused: counter(
        "etcron_worker_dependencies_refused_total",
        "Dependents (on_success / on_failure) not triggered because they are of another team than their job and its save did not check an operator role on that team.",
    ),
    queued: counter(
        "etcron_worker_queued_total",
        "Executions of concurrency: queue jobs that found the lock held and waited in the queue.",
    ),
    queue_stalls: counter(
        "etcron_worker_queue_stalls_total",
        "Ends of a queue job's run after which the lock could not be handed on (etcd failing): the next run's end, or the next tick, hands it on.",
    ),
    backfill_chain_broken: counter(
        "etcron_worker_backfill_chain_broken_total",
        "Backfill items after which the next item could not be requested (the backfill unreadable, or etcd failing): the backfill stops there.",
    ),
    alerts: counter_vec(
        "etcron_worker_alerts_raised_total",
        "SLA alerts this worker raised (each occurrence is raised by one worker), by event (late, long_running, stale).",
        &["event"],
    ),
    checkpoint_errors: counter(
        "etcron_worker_checkpoint_errors_total",
        "Checkpoints a running task reported that were not stored: its claim was no longer its own, or etcd failed the write (a rerun resumes from an older one).",
    ),
    silence_unknown: counter(
        "etcron_worker_silence_unknown_total",
        "Notifications sent without knowing whether the target's silence window was open (etcd did not answer, or the window kept changing): possibly sent while silenced.",
    ),
    http_cancels: counter_vec(
        "etcron_worker_http_cancels_total",
        "Cancel requests of asynchronous HTTP tasks (after a kill, a lost lease or a timeout), by outcome: sent (answered 2xx) or failed (the remote work may go on).",
        &["outcome"],
    ),
    runs_refused: counter_vec(
        "etcron_worker_runs_refused_total",
        "Runs this worker refused to start (recorded failed with the reason), by reason: run_params (a run parameter the spec does not declare, or a value off its pattern).",
        &["reason"],
    ),
    task_connections_refused: counter_vec(
        "etcron_worker_task_connections_refused_total",
        "Connections of HTTP and gRPC tasks (requests, redirects, status polls, cancels, gRPC channels) refused before anything was sent, by class of the address: control_plane, loopback, link_local, unspecified (task_network_allow allows them).",
        &["class"],
    ),
    grpc_limits: counter_vec(
        "etcron_worker_grpc_limits_total",
        "gRPC runs failed by a bound on what the server sends, by limit: reflection_bytes, reflection_files, reflection_answers, reflection_memory (one run's reflection budget), response_memory (a response's decoded size).",
        &["limit"],
    ),
    progress_refused: counter_vec(
        "etcron_worker_progress_refused_total",
        "Progress reports refused before they were read, by reason: token (a wrong token or an execution not running here, one answer for both), limited (past the wrong tokens one address may send a minute).",
        &["reason"],
    ),
    followers_refused: counter_vec(
        "etcron_worker_followers_refused_total",
        "Followers of a running execution's live output refused, by reason: per_execution (it has the most followers one execution may have).",
        &["reason"],
    ),
    task_uid_refusals: counter_vec(
        "etcron_worker_task_uid_refusals_total",
        "Shell runs refused for want of a team uid, by reason: range_full (no uid of task_uids left), account_taken (the team's uid is now an account of the machine).",
        &["reason"],
    ),
    waiting_for_slot: gauge(
        "etcron_worker_runs_waiting_for_slot",
        "Runs this worker won that wait for a free capacity slot now (capacity counts runs, not races).",
    ),
    pool_waiting: gauge_vec(
        "etcron_worker_pool_waiting",
        "Ticks this worker waits with in a pool's queue now (every worker that raced for a tick waits with it).",
        &["pool"],
    ),
    pool_waits: counter_vec(
        "etcron_worker_pool_waits_total",
        "Ticks that found their pool full (too few slots free, or higher-priority ticks waiting) and began to wait.",
        &["pool"],
    ),
    pool_missed: counter_vec(
        "etcron_worker_pool_missed_total",
        "Ticks this worker recorded missed because their pool stayed full until the start deadline, or does not exist.",
        &["pool"],
    ),
    pool_enqueue_errors: counter_vec(
        "etcron_worker_pool_enqueue_errors_total",
        "Queue entries of ticks waiting for a full pool that etcd did not take (each also a warning): the tick waits all the same, and writes its entry on its next turn.",
        &["pool"],
    ),
    pool_slots_held: gauge_vec(
        "etcron_worker_pool_slots_held",
        "Slots of a pool held by runs across the cluster, as this worker's mirror of etcd sees them.",
        &["pool"],
    ),
    pool_slots: gauge_vec("etcron_worker_pool_slots", "Slots a pool has.", &["pool"]),
    runs_without_slot: counter(
        "etcron_worker_runs_without_slot_total",
        "Runs this worker won but recorded missed because no capacity slot came free within the tick's start deadline (or 5 minutes for run requests).",
    ),
    followers: gauge(
        "etcron_worker_output_followers",
        "Connections following running executions' live output now: one per master and execution followed.",
    ),
    alert_errors: counter(
        "etcron_worker_alert_errors_total",
        "SLA alerts that could not be decided because etcd failed every try: possibly not raised.",
    ),
    health_errors: counter(
        "etcron_worker_health_errors_total",
        "Final outcomes of pause_after_failures jobs that could not be counted (etcd failed or the health key kept changing).",
    ),
    unsure_ticks: counter(
        "etcron_worker_catchup_unsure_ticks_total",
        "Unclaimed ticks the catch-up scan could not tell from ticks that ran (claims expired during a long outage): recorded missed where no record exists, never run.",
    ),
    spec_decode_errors: counter(
        "etcron_worker_spec_decode_errors_total",
        "Job specs this worker accepted and kept as bytes that did not decode again (a defect): such a job is treated as unknown.",
    ),
    batch_size: histogram_vec(
        "etcron_worker_batch_size",
        "Claims or closes written in one etcd transaction (batches of two or more), by kind (claim, close).",
        &["kind"],
        &[2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 100.0],
    ),
    closes_deferred: counter(
        "etcron_worker_closes_deferred_total",
        "Close batches that waited (at most 2s from the backlog's start) for this worker's backlog of claims to clear: starts go before bookkeeping.",
    ),
    claims_held: counter(
        "etcron_worker_claims_held_total",
        "Fires this worker ranks after another that waited (at most 2s from the backlog's start) for its backlog of claims to clear before looking whether the claim is taken.",
    ),
}
});

/// Creates every metric (so all are listed from the first scrape) and the shared ones.
pub fn init(capacity: u32) {
    etcron_common::metrics::init("worker");
    etcron_common::admission::init_metrics();
    etcron_common::trace::init_metrics();
    METRICS.capacity.set(i64::from(capacity));
    for event in ["late", "long_running", "stale"] {
        METRICS.alerts.with_label_values(&[event]);
    }
    for outcome in ["sent", "failed"] {
        METRICS.http_cancels.with_label_values(&[outcome]);
    }
    METRICS.runs_refused.with_label_values(&["run_params"]);
    for limit in ["reflection_bytes", "reflection_files", "reflection_answers", "reflection_memory", "response_memory"]
    {
        METRICS.grpc_limits.with_label_values(&[limit]);
    }
    for reason in ["token", "limited"] {
        METRICS.progress_refused.with_label_values(&[reason]);
    }
    METRICS.followers_refused.with_label_values(&["per_execution"]);
    for reason in ["range_full", "account_taken"] {
        METRICS.task_uid_refusals.with_label_values(&[reason]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_worker_metric_is_registered_and_listed() {
        init(4);
        METRICS.ticks_due.with_label_values(&["schedule"]).inc();
        METRICS.executions.with_label_values(&["j", "succeeded"]).inc();
        let text = etcron_common::metrics::render();
        for name in [
            "etcron_worker_ticks_due_total",
            "etcron_worker_fire_lateness_seconds_bucket",
            "etcron_worker_executions_total",
            "etcron_worker_running_executions",
            "etcron_worker_capacity 4",
            "etcron_worker_session_lease_losses_total",
            "etcron_worker_executors_lost_total",
            "etcron_worker_departures_resumed_total",
            "etcron_worker_departures_owed",
            "etcron_worker_departures_abandoned_total",
            "etcron_worker_provisional_records",
            "etcron_worker_provisional_record_errors_total",
            "etcron_worker_log_sink_queue_length",
            "etcron_worker_spool_bytes",
            "etcron_worker_records_written_total",
            "etcron_worker_claim_duration_seconds_bucket",
            "etcron_worker_closes_pending",
            "etcron_worker_close_retries_total",
            "etcron_build_info",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }
}
