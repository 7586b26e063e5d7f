//! What follows an execution, as pure rules: a retry, a failover rerun or the `on_failure` jobs
//! after a loss, the dependents' runs, the next catch-up tick, the disabling of a one-shot job —
//! all as transaction operations for the transaction that closes the claim (or records the
//! loss), so each happens exactly once. The notifier asks the same rules whether a failure is
//! final.

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use etcron_model::keys::{ExecutionId, Keys, Part, Tick};
use etcron_model::record::RunParams;
use etcron_model::record::{Status, TriggerKind};
use etcron_model::spec::{JobSpec, OnWorkerLoss};
use etcron_model::stored::{SpecVersion, TriggerRequest};
use etcron_model::{rfc3339_ms, UnixMs};

use crate::metrics::METRICS;
use crate::timing::fire::{to_json, Fire};

/// The team of a job as this worker knows it (`Some(None)`: a job without a team; `None`: a
/// job it does not know), for the team rule of dependencies.
pub(crate) type TeamOf<'a> = &'a dyn Fn(&str) -> Option<Option<String>>;

/// Most failover reruns of one tick on top of its retries (a task that crashes every worker it
/// runs on must not circle forever).
pub const MAX_FAILOVERS: u32 = 3;

/// What follows a finished execution, written in the transaction that closes its claim so it
/// happens exactly once: a retry, the dependent jobs' runs, the next catch-up tick, and the
/// disabling of a one-shot job. Also returns notes for the record.
pub(crate) fn follow_ups(
    keys: &Keys,
    fire: &Fire,
    (status, team_of): (Status, TeamOf<'_>),
    fencing_token: i64,
    now: UnixMs,
) -> (Vec<TxnOp>, Vec<String>) {
    let (spec, id) = (&fire.spec, &fire.id);
    let mut ops = Vec::new();
    let mut notes = Vec::new();
    let retry = retried(spec, id, status);
    if retry {
        let (op, note) = retry_request(keys, fire, status, fencing_token, now);
        ops.push(op);
        notes.push(note);
    }
    if status == Status::Lost {
        let (loss_ops, note) =
            after_loss(keys, id, (spec, team_of), (fire.scheduled_ms, &fire.params), fencing_token, now);
        ops.extend(loss_ops);
        notes.extend(note);
    }
    let dependents = match status {
        Status::Succeeded => &spec.on_success,
        Status::Failed | Status::TimedOut if !retry => &spec.on_failure,
        _ => &[][..],
    };
    let dependents = allowed_dependents(id, spec, dependents, team_of, &mut notes);
    let workflow = fire.params.workflow.as_deref();
    ops.extend(dependency_requests(keys, (id, workflow), &dependents, fencing_token, now, &mut notes));
    ops.extend(next_catchup(keys, fire, now));
    if spec.parsed_schedule(&fire.id.job).is_ok_and(|s| s.is_one_shot())
        && matches!(fire.trigger, TriggerKind::Schedule | TriggerKind::Catchup)
    {
        ops.push(disable_one_shot(keys, fire));
        notes.push("one-shot job disabled after its run".to_owned());
    }
    (ops, notes)
}

/// The run request of the next attempt after a failure, with the note for the record.
fn retry_request(keys: &Keys, fire: &Fire, status: Status, fencing_token: i64, now: UnixMs) -> (TxnOp, String) {
    let (spec, id) = (&fire.spec, &fire.id);
    let delay = spec.retries.delay(id.attempt, rand::random::<f64>());
    let not_before = now + i64::try_from(delay.as_millis()).unwrap_or(i64::MAX / 2);
    let next = id.next_attempt();
    let note = format!("retry {next} at {}", rfc3339_ms(not_before));
    let request = TriggerRequest {
        kind: TriggerKind::Retry,
        execution_id: Some(next),
        scheduled_ms: Some(fire.scheduled_ms),
        not_before_ms: Some(not_before),
        parent: Some(id.clone()),
        params: fire.params.clone(),
        // The next attempt continues the trace of this one (the API request's, if any).
        traceparent: fire.traceparent.clone(),
        ..TriggerRequest::manual(now, &format!("retry after {} of {id}", status.as_str()))
    };
    (put_request(keys, &id.job, &format!("retry-{fencing_token}"), &request), note)
}

/// `@at` jobs run once: the job is disabled after its run, unless it was edited since the run
/// began.
fn disable_one_shot(keys: &Keys, fire: &Fire) -> TxnOp {
    let disabled = JobSpec { enabled: false, ..(*fire.spec).clone() };
    let key = keys.job(&fire.id.job);
    // Kept in the job's history like every saved version (by etcron, after which run).
    let version = SpecVersion {
        spec: serde_json::to_value(disabled.redacted()).unwrap_or_default(),
        by: "etcron".to_owned(),
        at_ms: etcron_model::now_ms(),
        via: format!("disabled after the one-shot run {}", fire.id),
        request_id: None,
        restored: None,
        client: None,
        source: None,
    };
    let history = keys.history(&fire.id.job, &format!("{:016x}", rand::random::<u64>()));
    TxnOp::txn(
        Txn::new().when([Compare::mod_revision(key.as_str(), CompareOp::Equal, fire.job_revision)]).and_then([
            TxnOp::put(key.as_str(), to_json(&disabled), None),
            TxnOp::put(history, to_json(&version), None),
        ]),
    )
}

/// Whether a run that ended `status` gets another attempt (`retries.max` not used up). Such a
/// failure is not final: neither `on_failure` nor a failure notification follows it.
pub(crate) fn retried(spec: &JobSpec, id: &ExecutionId, status: Status) -> bool {
    matches!(status, Status::Failed | Status::TimedOut) && id.attempt <= spec.retries.max
}

/// Whether a run lost with its worker is rerun (`on_worker_loss: rerun`, not a broadcast part,
/// at most `MAX_FAILOVERS` reruns on top of the retries); otherwise the loss is final.
pub(crate) fn rerun_after_loss(spec: &JobSpec, id: &ExecutionId) -> bool {
    spec.on_worker_loss == OnWorkerLoss::Rerun
        && !matches!(id.part, Part::Worker(_))
        && id.attempt <= spec.retries.max + MAX_FAILOVERS
}

/// The run request that continues a run its task asked to move (`rebalance`): the next attempt,
/// `trigger: failover` (so it resumes from the checkpoint), raced last by this worker; with the
/// note for the record. `None` (and why) for a broadcast part, which belongs to this worker, or
/// past the failover limit.
pub(crate) fn rebalance_request(
    keys: &Keys,
    fire: &Fire,
    fencing_token: i64,
    now: UnixMs,
    worker_id: &str,
) -> (Option<TxnOp>, String) {
    let id = &fire.id;
    if matches!(id.part, Part::Worker(_)) || id.attempt > fire.spec.retries.max + MAX_FAILOVERS {
        return (None, "not moved: a broadcast run stays on its worker, and a tick is rerun at most as often as the failover limit allows".to_owned());
    }
    let next = id.next_attempt();
    let request = TriggerRequest {
        kind: TriggerKind::Failover,
        execution_id: Some(next.clone()),
        scheduled_ms: Some(fire.scheduled_ms),
        parent: Some(id.clone()),
        params: fire.params.clone(),
        avoid: Some(worker_id.to_owned()),
        traceparent: fire.traceparent.clone(),
        ..TriggerRequest::manual(now, &format!("rebalance of {id}"))
    };
    let op = put_request(keys, &id.job, &format!("rebalance-{fencing_token}"), &request);
    (Some(op), format!("moved at the task's request: {next} continues it on another worker"))
}

/// What follows a run lost with its worker's session, per `on_worker_loss`: a failover rerun
/// (next attempt, same scheduled time; not for broadcast parts, and at most `MAX_FAILOVERS` on
/// top of the retries) with the run's `params`, or the `on_failure` jobs. Also a note for the
/// record's reason.
pub(crate) fn after_loss(
    keys: &Keys,
    id: &ExecutionId,
    (spec, team_of): (&JobSpec, TeamOf<'_>),
    (scheduled_ms, params): (UnixMs, &RunParams),
    fencing_token: i64,
    now: UnixMs,
) -> (Vec<TxnOp>, Option<String>) {
    if rerun_after_loss(spec, id) {
        let next = id.next_attempt();
        let note = format!("on_worker_loss rerun: {next} requested");
        let request = TriggerRequest {
            kind: TriggerKind::Failover,
            execution_id: Some(next),
            scheduled_ms: Some(scheduled_ms),
            parent: Some(id.clone()),
            params: params.clone(),
            ..TriggerRequest::manual(now, &format!("failover of {id}"))
        };
        return (vec![put_request(keys, &id.job, &format!("failover-{fencing_token}"), &request)], Some(note));
    }
    let mut notes = Vec::new();
    if spec.on_worker_loss == OnWorkerLoss::Rerun {
        notes.push("not rerun (broadcast run or failover limit reached)".to_owned());
    }
    let dependents = allowed_dependents(id, spec, &spec.on_failure, team_of, &mut notes);
    let ops = dependency_requests(keys, (id, params.workflow.as_deref()), &dependents, fencing_token, now, &mut notes);
    (ops, (!notes.is_empty()).then(|| notes.join("; ")))
}

/// The dependents the team rule lets `parent` (an execution of `spec`) trigger
/// ([`etcron_model::dependency::may_trigger`]); each one it does not is logged, counted
/// (`etcron_worker_dependencies_refused_total`) and noted in the record with why.
fn allowed_dependents(
    parent: &ExecutionId,
    spec: &JobSpec,
    dependents: &[String],
    team_of: TeamOf<'_>,
    notes: &mut Vec<String>,
) -> Vec<String> {
    let mut allowed = Vec::new();
    for child in dependents {
        let team = team_of(child);
        let team = team.as_ref().map(Option::as_deref);
        match etcron_model::dependency::may_trigger(spec.team.as_deref(), child, team, &spec.dependency_teams) {
            Ok(()) => allowed.push(child.clone()),
            Err(why) => {
                tracing::warn!(parent = %parent, dependent = %child, %why, "dependency not triggered: it crosses teams");
                METRICS.dependencies_refused.inc();
                notes.push(format!("not triggered: {why}"));
            }
        }
    }
    allowed
}

/// The run requests of `parent`'s dependents, each a step of `parent`'s workflow run.
pub(crate) fn dependency_requests(
    keys: &Keys,
    (parent, workflow): (&ExecutionId, Option<&str>),
    dependents: &[String],
    fencing_token: i64,
    now: UnixMs,
    notes: &mut Vec<String>,
) -> Vec<TxnOp> {
    let mut ops = Vec::new();
    for child in dependents {
        let tick = Tick::dependency(fencing_token, &parent.job);
        let request_id = tick.to_string();
        let execution = ExecutionId::new(child, tick);
        notes.push(format!("triggered {execution}"));
        let request = TriggerRequest {
            kind: TriggerKind::Dependency,
            execution_id: Some(execution),
            parent: Some(parent.clone()),
            params: RunParams { workflow: workflow.map(str::to_owned), ..RunParams::default() },
            workflow: workflow.map(str::to_owned),
            ..TriggerRequest::manual(now, &format!("dependency of {parent}"))
        };
        ops.push(put_request(keys, child, &request_id, &request));
    }
    ops
}

/// The next run of a `misfire: run_all` catch-up chain.
pub(crate) fn next_catchup(keys: &Keys, fire: &Fire, now: UnixMs) -> Option<TxnOp> {
    let (&next, rest) = fire.then.split_first()?;
    Some(catchup_request(keys, &fire.id.job, next, rest.to_vec(), now))
}

/// A catch-up run request for one tick (and the ticks to run after it).
pub fn catchup_request(keys: &Keys, job: &str, tick_ms: UnixMs, then: Vec<UnixMs>, now: UnixMs) -> TxnOp {
    let request = TriggerRequest {
        kind: TriggerKind::Catchup,
        execution_id: Some(ExecutionId::new(job, Tick::Scheduled(tick_ms))),
        scheduled_ms: Some(tick_ms),
        then,
        ..TriggerRequest::manual(now, &format!("catch-up of the tick at {}", rfc3339_ms(tick_ms)))
    };
    put_request(keys, job, &format!("catchup-{tick_ms}"), &request)
}

/// The request id of the one catch-up run late ticks of a `run_once` job share.
pub(crate) const LATE_CATCHUP: &str = "catchup-late";

/// The catch-up run request late ticks of a `run_once` job share (`catchup-late`): written only
/// while none is pending, so a backlog of late ticks asks for one run, not one each.
pub(crate) fn late_catchup_request(keys: &Keys, job: &str, tick_ms: UnixMs, now: UnixMs) -> TxnOp {
    let request = TriggerRequest {
        kind: TriggerKind::Catchup,
        execution_id: Some(ExecutionId::new(job, Tick::Scheduled(tick_ms))),
        scheduled_ms: Some(tick_ms),
        then: Vec::new(),
        ..TriggerRequest::manual(now, &format!("catch-up of the late tick at {}", rfc3339_ms(tick_ms)))
    };
    put_request(keys, job, LATE_CATCHUP, &request)
}

/// A run request, written only while its job exists: a request for a deleted (or never
/// created) job would outlive it, since requests have no lease.
pub(crate) fn put_request(keys: &Keys, job: &str, request_id: &str, request: &TriggerRequest) -> TxnOp {
    TxnOp::txn(Txn::new().when([Compare::version(keys.job(job), CompareOp::Greater, 0)]).and_then([TxnOp::put(
        keys.trigger(job, request_id),
        to_json(request),
        None,
    )]))
}
