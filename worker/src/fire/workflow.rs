//! Workflows in the fire path. A run of a job with dependents (`on_success`, `on_failure`, or
//! jobs naming it in `after`) starts a workflow run (`workflow::run_id`); its steps carry the
//! run's id in their parameters. Each step's close writes its outcome and result
//! (`{ns}/workflows/{run}/steps/{job}`) and, when it succeeded, `…/ok/{job}`; in the same
//! transaction, for each job naming it in `after` whose other parents' `ok` keys are all there,
//! the child's one run request of this workflow run. etcd serializes the closes of two parents,
//! so exactly one of them sees the other's `ok` and triggers the child; such closes go alone,
//! never in a batch (whose nested compares would all read the state before the batch).

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use etcron_model::keys::ExecutionId;
use etcron_model::record::{RunParams, Status, TriggerKind};
use etcron_model::stored::TriggerRequest;
use etcron_model::workflow::{run_id, step_execution, Step};
use etcron_model::UnixMs;
use serde_json::Value;

use crate::context::Context;
use crate::fire::run::ParentResults;
use crate::metrics::METRICS;
use crate::timing::fire::{to_json, Fire};

/// A run's place in a workflow run: the run's id and its root execution (`None`: it is the root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepOf {
    pub run: String,
    pub root: Option<ExecutionId>,
}

/// The workflow run `fire` is a step of: the one its parameters carry, or the one it starts
/// (a job with dependents of any kind).
pub(crate) fn run_of(ctx: &Context, fire: &Fire) -> Option<String> {
    if let Some(run) = &fire.params.workflow {
        return Some(run.clone());
    }
    let starts = !fire.spec.on_success.is_empty()
        || !fire.spec.on_failure.is_empty()
        || !ctx.jobs.after_children(&fire.id.job).is_empty();
    starts.then(|| run_id(&fire.id))
}

/// A run that was not a step when it started but starts a workflow run by its close (this
/// worker learnt of a job naming it in `after` while it ran): the fire as a step of it.
pub(crate) fn late_root(ctx: &Context, fire: &Fire) -> Option<(Fire, StepOf)> {
    let run = run_of(ctx, fire)?;
    let params = RunParams { workflow: Some(run.clone()), ..fire.params.clone() };
    Some((Fire { params, ..fire.clone() }, StepOf { run, root: None }))
}

/// Whether `job`'s run is a parent of `fire`'s: named in its `after`, or a job whose
/// `on_success` / `on_failure` names it (as the job table says now).
fn is_parent(ctx: &Context, fire: &Fire, job: &str) -> bool {
    if job == fire.id.job {
        return false;
    }
    fire.spec.after.iter().any(|a| a == job)
        || ctx
            .jobs
            .get(job)
            .is_some_and(|j| j.spec.on_success.iter().chain(&j.spec.on_failure).any(|d| *d == fire.id.job))
}

/// A step's parents' results (from the run's step keys, one range read: `null` for a parent
/// without one) and the run's root. An etcd failure is the run's error.
async fn parents(ctx: &Context, fire: &Fire, run: &str) -> Result<(ParentResults, StepOf), String> {
    if fire.spec.after.is_empty() && fire.parent.is_none() {
        // A root: no parent to read, and nothing for an etcd outage to fail.
        return Ok((ParentResults::new(), StepOf { run: run.to_owned(), root: None }));
    }
    let mut results = ParentResults::new();
    for job in &fire.spec.after {
        results.insert(job.clone(), Value::Null);
    }
    let prefix = ctx.keys.workflow_steps_prefix(run);
    let resp =
        read_steps(ctx, &prefix).await.map_err(|e| format!("reading the steps of workflow run {run} failed: {e}"))?;
    let mut root = None;
    for kv in resp.kvs() {
        let Some(job) = kv.key().strip_prefix(prefix.as_bytes()).and_then(|j| std::str::from_utf8(j).ok()) else {
            continue;
        };
        let Ok(step) = serde_json::from_slice::<Step>(kv.value()) else { continue };
        if job != fire.id.job && root.is_none() {
            // Another step: it names the root, or it is the root.
            root = Some(step.root.clone().unwrap_or_else(|| step.execution_id.clone()));
        }
        if is_parent(ctx, fire, job) {
            results.insert(job.to_owned(), step.result.unwrap_or(Value::Null));
        }
    }
    if results.is_empty() {
        // No parent: the root itself.
        return Ok((results, StepOf { run: run.to_owned(), root: None }));
    }
    Ok((results, StepOf { run: run.to_owned(), root }))
}

/// Tries of reading a run's steps before the step fails (an etcd outage passes first).
const READ_TRIES: u32 = 10;

/// The steps under `prefix`, read again (every second) while etcd fails, up to `READ_TRIES`.
async fn read_steps(ctx: &Context, prefix: &str) -> Result<etcd_client::GetResponse, String> {
    let mut last = String::new();
    for _ in 0..READ_TRIES {
        let mut kv = ctx.client.kv_client();
        match etcron_common::etcd::request("workflow_read", kv.get(prefix, Some(GetOptions::new().with_prefix()))).await
        {
            Ok(resp) => return Ok(resp),
            Err(e) => last = format!("{e:?}"),
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    Err(format!("{last} ({READ_TRIES} tries)"))
}

/// What a step's task is given of its workflow run: its place in it, its parents' results,
/// and the fire with the parameters `params_from` took from them (when it took any).
pub(crate) struct Inputs {
    pub step: StepOf,
    pub parents: ParentResults,
    pub fire: Option<Fire>,
}

/// The workflow inputs of `fire`'s run (`None`: not a step of a workflow run); an error (etcd
/// failed, a `params_from` path found nothing) fails the run before its task starts.
pub(crate) async fn inputs(ctx: &Context, fire: &Fire) -> Result<Option<Inputs>, String> {
    let Some(run) = &fire.params.workflow else { return Ok(None) };
    let (parents, step) = parents(ctx, fire, run).await?;
    let params = with_params_from(fire, &parents)?;
    let fire = (params != fire.params).then(|| Fire { params, ..fire.clone() });
    Ok(Some(Inputs { step, parents, fire }))
}

/// The run parameters `params_from` takes from `parents` added to the run's own (a
/// parameter the run was given keeps its value).
fn with_params_from(fire: &Fire, parents: &ParentResults) -> Result<RunParams, String> {
    let mut params = fire.params.clone();
    if fire.spec.params_from.is_empty() {
        return Ok(params);
    }
    for (name, value) in etcron_model::workflow::params_from_results(&fire.spec.params_from, parents)? {
        params.env.entry(name).or_insert(value);
    }
    Ok(params)
}

/// What the close of a step writes for its workflow run: its step (and `ok` when it
/// succeeded, the children it completes); notes for the record. `lease`: the workflow keys'.
pub(crate) fn close_ops(
    ctx: &Context,
    fire: &Fire,
    (step, status, result): (&StepOf, Status, Option<&Value>),
    lease: i64,
    now: UnixMs,
) -> (Vec<TxnOp>, Vec<String>) {
    let on_lease = Some(PutOptions::new().with_lease(lease));
    let job = &fire.id.job;
    let value = Step {
        execution_id: fire.id.clone(),
        status,
        at_ms: now,
        root: step.root.clone(),
        result: result.cloned().filter(|_| status == Status::Succeeded),
    };
    let mut ops = vec![TxnOp::put(ctx.keys.workflow_step(&step.run, job), to_json(&value), on_lease.clone())];
    let ok = ctx.keys.workflow_ok(&step.run, job);
    if status != Status::Succeeded {
        ops.push(TxnOp::delete(ok, None));
        return (ops, Vec::new());
    }
    ops.push(TxnOp::put(ok, Vec::new(), on_lease));
    let mut notes = Vec::new();
    for (child, entry) in ctx.jobs.after_children(job) {
        if entry.spec.team != fire.spec.team {
            tracing::warn!(parent = %fire.id, dependent = %child, "workflow child not triggered: it is of another team");
            METRICS.dependencies_refused.inc();
            notes.push(format!("not triggered: {child} (after) is of another team"));
            continue;
        }
        ops.push(fan_in(ctx, fire, &step.run, (&child, &entry.spec.after), now));
    }
    (ops, notes)
}

/// The run request of `child` in workflow run `run`, written only while every other parent
/// of it succeeded in the run, the child has no step in it yet, and the child exists.
fn fan_in(ctx: &Context, fire: &Fire, run: &str, (child, after): (&str, &[String]), now: UnixMs) -> TxnOp {
    let mut when: Vec<Compare> = after
        .iter()
        .filter(|p| **p != fire.id.job)
        .map(|p| Compare::version(ctx.keys.workflow_ok(run, p), CompareOp::Greater, 0))
        .collect();
    when.push(Compare::version(ctx.keys.workflow_step(run, child), CompareOp::Equal, 0));
    when.push(Compare::version(ctx.keys.job(child), CompareOp::Greater, 0));
    let request = TriggerRequest {
        kind: TriggerKind::Dependency,
        execution_id: Some(step_execution(child, run)),
        parent: Some(fire.id.clone()),
        params: RunParams { workflow: Some(run.to_owned()), ..RunParams::default() },
        workflow: Some(run.to_owned()),
        ..TriggerRequest::manual(now, &format!("workflow run {run}: every parent of {child} succeeded"))
    };
    let key = ctx.keys.trigger(child, &format!("wf-{run}"));
    TxnOp::txn(Txn::new().when(when).and_then([TxnOp::put(key, to_json(&request), None)]))
}

/// Whether a step's close must go alone: it completes children by `after` (see the module docs).
pub(crate) fn close_alone(ctx: &Context, fire: &Fire) -> bool {
    !ctx.jobs.after_children(&fire.id.job).is_empty()
}
