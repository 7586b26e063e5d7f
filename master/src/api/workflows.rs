//! Workflow runs (`etcron_model::workflow`): `GET /api/workflows/{run}`, the run as a graph of
//! its steps, and `POST /api/workflows/{run}/resume`, which reruns its failed steps.
//!
//! A run is what etcd keeps of it: the step keys (`{ns}/workflows/{run}/steps/{job}`, each
//! step's latest outcome, written by the close of its execution) read at one revision with the
//! stored job specs, whose edges (`on_success`, `on_failure`, `after`) draw the graph. Nodes are
//! the root's job and every job reachable from it along those edges as the specs say now (and
//! any job with a step in the run, should its spec have changed since). A job the caller does
//! not see is left out, with its edges and its step.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use etcron_model::dependency::Edges;
use etcron_model::keys::{validate_id, ExecutionId, MAX_ID_LEN};
use etcron_model::record::{RunParams, Status, TriggerKind};
use etcron_model::stored::TriggerRequest;
use etcron_model::workflow::{Step, WORKFLOW_RETENTION};
use etcron_model::{now_ms, rfc3339_ms};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::http::with_audit;
use crate::access::{team_of, Scope};
use crate::backend::AppState;
use crate::error::{etcd, ApiError, ApiResult};
use crate::job_store::commands::COMMAND_LEASE;

/// Most failed steps one resume reruns: one etcd transaction holds a compare and a put for each.
pub(super) const MAX_RESUMED: usize = 60;
/// Tries of a resume whose jobs changed between its read and its write.
const RESUME_ATTEMPTS: usize = 3;

/// How a step ended that fails its run, and that a resume reruns.
const FAILED: [Status; 5] = [Status::Failed, Status::TimedOut, Status::Killed, Status::Lost, Status::Missed];

/// What a stored job says about workflows: its edges (the rest of the spec is not read) and,
/// filled in from the value and the key, its team and revision.
#[derive(Debug, Default, Deserialize)]
struct JobEdges {
    #[serde(flatten)]
    edges: Edges,
    #[serde(skip)]
    team: Option<String>,
    #[serde(skip)]
    revision: i64,
}

/// Every stored job's edges, by name.
type Jobs = BTreeMap<String, JobEdges>;

/// What etcd holds about a run, read at one revision: its steps by job, and every job.
struct Stored {
    steps: BTreeMap<String, Step>,
    jobs: Jobs,
}

/// An edge of the graph, as a spec draws it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    After,
    OnSuccess,
    OnFailure,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
struct Edge {
    from: String,
    to: String,
    kind: Kind,
}

/// A node's state: its step's status, or for a job without a step in the run, `pending` (what
/// starts it has happened: it runs or is about to), `waiting` (a parent has not ended yet) or
/// `not_reached` (it will not run in this run unless it is resumed: a parent failed or was not
/// reached, or ended so that its edge does not fire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeState {
    Step(Status),
    Pending,
    Waiting,
    NotReached,
}

impl NodeState {
    fn as_str(self) -> &'static str {
        match self {
            NodeState::Step(s) => s.as_str(),
            NodeState::Pending => "pending",
            NodeState::Waiting => "waiting",
            NodeState::NotReached => "not_reached",
        }
    }
}

fn check_run(run: &str) -> ApiResult<()> {
    validate_id(run).map_err(|e| ApiError::bad_request(Some("run".to_owned()), e.replace("id ", "run id ")))
}

/// The answer for a run without a step key (or none the caller sees).
fn unknown_run(run: &str) -> ApiError {
    let hours = WORKFLOW_RETENTION.as_secs() / 3600;
    ApiError::not_found(format!(
        "unknown or expired workflow run {run:?}: a run is known once a step of it has ended, and its steps are \
         kept about {hours} h; the execution records keep the run's id (`workflow`)"
    ))
}

/// The run's steps and every stored job: one transaction of two range reads.
async fn read(st: &AppState, run: &str) -> ApiResult<Stored> {
    let prefix = |p: String| TxnOp::get(p, Some(GetOptions::new().with_prefix()));
    let txn = Txn::new().and_then([prefix(st.keys.workflow_steps_prefix(run)), prefix(st.keys.jobs_prefix())]);
    let resp = etcd("workflow_read", st.client.kv_client().txn(txn)).await?;
    let mut gets = resp.op_responses().into_iter().filter_map(|r| match r {
        TxnOpResponse::Get(get) => Some(get),
        _ => None,
    });
    let (Some(steps), Some(jobs)) = (gets.next(), gets.next()) else {
        return Err(ApiError::internal(&"a workflow read answered otherwise"));
    };
    let mut stored = Stored { steps: BTreeMap::new(), jobs: BTreeMap::new() };
    for kv in steps.kvs() {
        match serde_json::from_slice::<Step>(kv.value()) {
            Ok(step) => {
                stored.steps.insert(step.execution_id.job.clone(), step);
            }
            Err(e) => tracing::warn!(run = %run, key = %String::from_utf8_lossy(kv.key()), error = %e,
                "a workflow step in etcd does not read; left out"),
        }
    }
    for kv in jobs.kvs() {
        if let Some(etcron_model::keys::Key::Job(name)) = st.keys.parse(kv.key()) {
            let mut job: JobEdges = serde_json::from_slice(kv.value()).unwrap_or_default();
            job.team = team_of(kv.value());
            job.revision = kv.mod_revision();
            stored.jobs.insert(name, job);
        }
    }
    Ok(stored)
}

/// The nodes: `root`, every job reachable from it (a job's `on_success` and `on_failure`, the
/// jobs naming it in `after`), and every job with a step.
fn nodes<'a>(root: &str, jobs: &Jobs, stepped: impl Iterator<Item = &'a String>) -> BTreeSet<String> {
    let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, job) in jobs {
        for parent in &job.edges.after {
            children.entry(parent.as_str()).or_default().push(name.as_str());
        }
        for child in job.edges.on_success.iter().chain(&job.edges.on_failure) {
            children.entry(name.as_str()).or_default().push(child.as_str());
        }
    }
    let mut seen: BTreeSet<String> = BTreeSet::from([root.to_owned()]);
    let mut queue = vec![root.to_owned()];
    while let Some(at) = queue.pop() {
        for child in children.get(at.as_str()).into_iter().flatten() {
            if seen.insert((*child).to_owned()) {
                queue.push((*child).to_owned());
            }
        }
    }
    seen.extend(stepped.cloned());
    seen
}

/// The edges between `nodes`, sorted.
fn edges(nodes: &BTreeSet<String>, jobs: &Jobs) -> Vec<Edge> {
    let mut out = BTreeSet::new();
    for name in nodes {
        let Some(job) = jobs.get(name) else { continue };
        let mut add = |from: &str, to: &str, kind| {
            if nodes.contains(from) && nodes.contains(to) {
                out.insert(Edge { from: from.to_owned(), to: to.to_owned(), kind });
            }
        };
        job.edges.on_success.iter().for_each(|c| add(name, c, Kind::OnSuccess));
        job.edges.on_failure.iter().for_each(|c| add(name, c, Kind::OnFailure));
        job.edges.after.iter().for_each(|p| add(p, name, Kind::After));
    }
    out.into_iter().collect()
}

/// Whether an `on_failure` edge fires after a parent that ended `status` (the worker's rule).
fn fails_over(status: Status) -> bool {
    matches!(status, Status::Failed | Status::TimedOut | Status::Lost)
}

/// Every node's state (see [`NodeState`]): a step's status; for a job without a step, from its
/// parents' states. With `after` parents: pending once all succeeded, not reached once one
/// ended otherwise (or was not reached). With `on_success`/`on_failure` parents: pending once
/// one ended as its edge asks, not reached once every one ended otherwise. Both kinds: pending
/// if either says so, not reached if both do. The root without a step is pending; a node on a
/// cycle (written around the API) waits.
fn states(
    root: &str,
    nodes: &BTreeSet<String>,
    edges: &[Edge],
    steps: &BTreeMap<String, Step>,
) -> BTreeMap<String, NodeState> {
    let mut out = BTreeMap::new();
    let mut visiting = BTreeSet::new();
    for node in nodes {
        state_of(node, (root, edges, steps), &mut out, &mut visiting);
    }
    out
}

/// What the parents of one kind say of a node: whether they fired (as their edges ask) and
/// whether they settled so that it will not run.
#[derive(Debug, Clone, Copy)]
struct Parents {
    fired: bool,
    dead: bool,
}

impl Parents {
    /// A parent that ended (or will not run): its edge fired, or it never will.
    fn settled(fired: bool) -> Self {
        Self { fired, dead: !fired }
    }

    /// `after`: every parent must fire; one that never will is enough to stop the node.
    fn and(self, other: Self) -> Self {
        Self { fired: self.fired && other.fired, dead: self.dead || other.dead }
    }

    /// `on_success`/`on_failure`: one parent firing starts the node; all must have not fired to stop it.
    fn or(self, other: Self) -> Self {
        Self { fired: self.fired || other.fired, dead: self.dead && other.dead }
    }
}

fn state_of(
    node: &str,
    graph @ (root, edges, steps): (&str, &[Edge], &BTreeMap<String, Step>),
    memo: &mut BTreeMap<String, NodeState>,
    visiting: &mut BTreeSet<String>,
) -> NodeState {
    if let Some(s) = memo.get(node) {
        return *s;
    }
    let state = if let Some(step) = steps.get(node) {
        NodeState::Step(step.status)
    } else if node == root {
        NodeState::Pending
    } else if !visiting.insert(node.to_owned()) {
        return NodeState::Waiting;
    } else {
        let (mut after, mut trigger): (Option<Parents>, Option<Parents>) = (None, None);
        for edge in edges.iter().filter(|e| e.to == node) {
            let parent = state_of(&edge.from, graph, memo, visiting);
            let this = match (parent, edge.kind) {
                (NodeState::Step(s), Kind::After | Kind::OnSuccess) => Parents::settled(s == Status::Succeeded),
                (NodeState::Step(s), Kind::OnFailure) => Parents::settled(fails_over(s)),
                (NodeState::NotReached, _) => Parents::settled(false),
                _ => Parents { fired: false, dead: false },
            };
            if edge.kind == Kind::After {
                after = Some(after.map_or(this, |a| a.and(this)));
            } else {
                trigger = Some(trigger.map_or(this, |t| t.or(this)));
            }
        }
        visiting.remove(node);
        let pending = after.is_some_and(|a| a.fired) || trigger.is_some_and(|t| t.fired);
        let dead =
            (after.is_some() || trigger.is_some()) && after.is_none_or(|a| a.dead) && trigger.is_none_or(|t| t.dead);
        match (pending, dead) {
            (true, _) => NodeState::Pending,
            (false, true) => NodeState::NotReached,
            (false, false) => NodeState::Waiting,
        }
    };
    memo.insert(node.to_owned(), state);
    state
}

/// The run's state from the states shown: failed when a step failed, succeeded when every node
/// succeeded or will not run (the `on_failure` jobs of a run that did not fail), else running.
fn overall<'a>(shown: impl Iterator<Item = &'a NodeState> + Clone) -> &'static str {
    if shown.clone().any(|s| matches!(s, NodeState::Step(st) if FAILED.contains(st))) {
        "failed"
    } else if shown
        .clone()
        .all(|s| matches!(s, NodeState::Step(Status::Succeeded | Status::Skipped) | NodeState::NotReached))
    {
        "succeeded"
    } else {
        "running"
    }
}

/// The root's execution: what the steps of its dependents name, else the root's own step
/// (the one naming no root).
fn root_of(steps: &BTreeMap<String, Step>) -> Option<ExecutionId> {
    let named = steps.values().find_map(|s| s.root.clone());
    named.or_else(|| steps.values().find(|s| s.root.is_none()).map(|s| s.execution_id.clone()))
}

/// The names in `list` the caller sees.
fn shown_names(list: &[String], sees: &dyn Fn(&str) -> bool) -> Vec<String> {
    list.iter().filter(|n| sees(n)).cloned().collect()
}

/// `GET /api/workflows/{run}`: the run's graph as the caller may see it.
pub(super) async fn get(
    State(st): State<AppState>,
    Path(run): Path<String>,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Json<Value>> {
    check_run(&run)?;
    let stored = read(&st, &run).await?;
    let access = &scope.caller.access;
    // A job that no longer exists is seen only with a global role (its team is unknown).
    let sees = |job: &str| access.sees(stored.jobs.get(job).and_then(|j| j.team.as_deref()));
    if !stored.steps.keys().any(|job| sees(job)) {
        return Err(unknown_run(&run));
    }
    let Some(root) = root_of(&stored.steps) else { return Err(unknown_run(&run)) };
    let nodes = nodes(&root.job, &stored.jobs, stored.steps.keys());
    let edges = edges(&nodes, &stored.jobs);
    let states = states(&root.job, &nodes, &edges, &stored.steps);
    let order = layers(&root.job, &nodes, &edges);
    let mut steps = Vec::new();
    for job in order.iter().filter(|j| sees(j)) {
        let step = stored.steps.get(job);
        let spec = stored.jobs.get(job);
        let list = |f: fn(&JobEdges) -> &Vec<String>| spec.map_or_else(Vec::new, |s| shown_names(f(s), &sees));
        steps.push(json!({
            "job": job,
            "state": states.get(job).map_or("waiting", |s| s.as_str()),
            "execution_id": step.map(|s| s.execution_id.to_string()),
            "attempt": step.map(|s| s.execution_id.attempt),
            "status": step.map(|s| s.status),
            "at": step.map(|s| rfc3339_ms(s.at_ms)),
            "result": step.and_then(|s| s.result.clone()),
            "after": list(|s| &s.edges.after),
            "on_success": list(|s| &s.edges.on_success),
            "on_failure": list(|s| &s.edges.on_failure),
        }));
    }
    let shown_edges: Vec<&Edge> = edges.iter().filter(|e| sees(&e.from) && sees(&e.to)).collect();
    let state = overall(states.iter().filter(|(j, _)| sees(j)).map(|(_, s)| s));
    let root_shown = sees(&root.job);
    Ok(Json(json!({
        "run": run,
        "root": root_shown.then(|| root.to_string()),
        "root_job": root_shown.then_some(root.job),
        "state": state,
        "steps": steps,
        "edges": shown_edges,
    })))
}

/// The nodes in layers: each at the longest path from the root along the edges (a node the
/// root does not reach, after the others), then by name.
fn layers(root: &str, nodes: &BTreeSet<String>, edges: &[Edge]) -> Vec<String> {
    let mut depth: BTreeMap<&str, usize> = BTreeMap::from([(root, 0)]);
    // Longest paths in a DAG by relaxing every edge at most |nodes| times (cycles stop there).
    for _ in 0..nodes.len() {
        let mut changed = false;
        for e in edges {
            if let Some(d) = depth.get(e.from.as_str()).copied() {
                if depth.get(e.to.as_str()).is_none_or(|t| *t < d + 1) && e.to != root {
                    depth.insert(e.to.as_str(), d + 1);
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let mut order: Vec<&String> = nodes.iter().collect();
    order.sort_by_key(|n| (depth.get(n.as_str()).copied().unwrap_or(usize::MAX), n.as_str()));
    order.into_iter().cloned().collect()
}

/// The request id of a resume's rerun of attempt `attempt`: the same for every resume asking
/// for that attempt of the run (a double click writes one key), valid as a request id.
fn resume_request_id(run: &str, attempt: u32) -> String {
    let id = format!("resume-{attempt}-{run}");
    if id.len() <= MAX_ID_LEN {
        return id;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in run.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("resume-{attempt}-h{h:016x}")
}

/// One run request of a resume.
struct Rerun {
    job: String,
    request_id: String,
    execution: ExecutionId,
    /// The `TriggerRequest`, as JSON.
    value: Vec<u8>,
}

/// The run requests a resume writes: the next attempt of each failed step, as a manual run in
/// the workflow run (its id in the request and its parameters, as the workers' own requests of
/// steps carry it) whose parent is the failed execution.
fn reruns(run: &str, failed: &[&Step]) -> ApiResult<Vec<Rerun>> {
    let now = now_ms();
    failed
        .iter()
        .map(|step| {
            let next = step.execution_id.next_attempt();
            let request = TriggerRequest {
                kind: TriggerKind::Manual,
                execution_id: Some(next.clone()),
                parent: Some(step.execution_id.clone()),
                workflow: Some(run.to_owned()),
                params: RunParams { workflow: Some(run.to_owned()), ..RunParams::default() },
                ..TriggerRequest::manual(now, &format!("resume of workflow {run}"))
            };
            let value = serde_json::to_vec(&request).map_err(|e| ApiError::internal(&e))?;
            Ok(Rerun {
                job: next.job.clone(),
                request_id: resume_request_id(run, next.attempt),
                execution: next,
                value,
            })
        })
        .collect()
}

/// The failed steps the caller may rerun: 404 for a run it sees no step of, 409 when none
/// failed (or a failed step's job is gone), 403 when it holds no operator role on one.
fn failed_steps<'a>(run: &str, stored: &'a Stored, scope: &Scope) -> ApiResult<Vec<&'a Step>> {
    let team = |job: &str| stored.jobs.get(job).and_then(|j| j.team.as_deref());
    if !stored.steps.keys().any(|job| scope.caller.access.sees(team(job))) {
        return Err(unknown_run(run));
    }
    let failed: Vec<&Step> = stored.steps.values().filter(|s| FAILED.contains(&s.status)).collect();
    if failed.is_empty() {
        return Err(ApiError::conflict(format!("nothing to resume: no step failed in workflow run {run:?}")));
    }
    if failed.len() > MAX_RESUMED {
        return Err(ApiError::conflict(format!(
            "{} steps failed in workflow run {run:?}; a resume reruns at most {MAX_RESUMED}: run the jobs instead",
            failed.len()
        )));
    }
    for step in &failed {
        let job = &step.execution_id.job;
        scope.check(team(job), || {
            ApiError::forbidden(format!(
                "a failed step of workflow run {run:?} is of a job you cannot see: resuming it needs operator on its team"
            ))
        })?;
        if !stored.jobs.contains_key(job) {
            return Err(ApiError::conflict(format!(
                "job {job:?} of a failed step no longer exists: nothing was rerun"
            )));
        }
    }
    Ok(failed)
}

/// `POST /api/workflows/{run}/resume`: a run request for the next attempt of every failed step
/// (`failed`, `timed_out`, `killed`, `lost`, `missed`), written in one transaction while each
/// job is as read; the steps that succeeded keep their results, which the reruns' children read.
pub(super) async fn resume(
    State(st): State<AppState>,
    Path(run): Path<String>,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Response> {
    check_run(&run)?;
    for _ in 0..RESUME_ATTEMPTS {
        let stored = read(&st, &run).await?;
        let failed = failed_steps(&run, &stored, &scope)?;
        let reruns = reruns(&run, &failed)?;
        let lease =
            etcd("lease_grant", st.client.lease_client().grant(COMMAND_LEASE.as_secs().try_into().unwrap_or(60), None))
                .await?
                .id();
        let mut compares = Vec::new();
        let mut puts = Vec::new();
        for r in &reruns {
            let revision = stored.jobs.get(&r.job).map_or(0, |j| j.revision);
            compares.push(Compare::mod_revision(st.keys.job(&r.job), CompareOp::Equal, revision));
            let on_lease = Some(PutOptions::new().with_lease(lease));
            puts.push(TxnOp::put(st.keys.trigger(&r.job, &r.request_id), r.value.clone(), on_lease));
        }
        let resp = etcd("workflow_resume", st.client.kv_client().txn(Txn::new().when(compares).and_then(puts))).await?;
        if !resp.succeeded() {
            continue;
        }
        let rerun: Vec<Value> = reruns
            .iter()
            .map(|r| json!({"job": r.job, "execution_id": r.execution.to_string(), "request_id": r.request_id}))
            .collect();
        tracing::info!(run = %run, reruns = rerun.len(), "workflow run resumed");
        let body = json!({ "run": run, "rerun": rerun });
        let teams = reruns.iter().map(|r| stored.jobs.get(&r.job).and_then(|j| j.team.clone()));
        let detail = crate::layers::audit::AuditDetail {
            teams: crate::layers::audit::teams(teams),
            detail: Some(body.clone()),
            ..Default::default()
        };
        return Ok(with_audit((StatusCode::ACCEPTED, Json(body)).into_response(), detail));
    }
    Err(ApiError::conflict(format!("the jobs of workflow run {run:?} are being changed concurrently; retry")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use etcron_model::keys::Tick;

    fn job(after: &[&str], on_success: &[&str], on_failure: &[&str]) -> JobEdges {
        let v = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect();
        JobEdges {
            edges: Edges { after: v(after), on_success: v(on_success), on_failure: v(on_failure) },
            ..JobEdges::default()
        }
    }

    fn step(job: &str, status: Status) -> (String, Step) {
        let root = ExecutionId::new("extract", Tick::Scheduled(1_000));
        let (id, root) = if job == "extract" {
            (root, None)
        } else {
            (etcron_model::workflow::step_execution(job, "r"), Some(root))
        };
        (job.to_owned(), Step { execution_id: id, status, at_ms: 2_000, root, result: None })
    }

    /// extract → (ta, tb) → load by `after`; load's `on_failure` → alert; an unrelated job.
    fn diamond() -> Jobs {
        Jobs::from([
            ("extract".to_owned(), job(&[], &[], &[])),
            ("ta".to_owned(), job(&["extract"], &[], &[])),
            ("tb".to_owned(), job(&["extract"], &[], &[])),
            ("load".to_owned(), job(&["ta", "tb"], &[], &["alert"])),
            ("alert".to_owned(), job(&[], &[], &[])),
            ("other".to_owned(), job(&[], &["x"], &[])),
        ])
    }

    fn run_states(steps: &[(String, Step)]) -> (Vec<Edge>, BTreeMap<String, NodeState>) {
        let jobs = diamond();
        let steps: BTreeMap<String, Step> = steps.iter().cloned().collect();
        let nodes = nodes("extract", &jobs, steps.keys());
        let edges = edges(&nodes, &jobs);
        let states = states("extract", &nodes, &edges, &steps);
        (edges, states)
    }

    #[test]
    fn the_graph_is_what_the_root_reaches_along_every_kind_of_edge() {
        let (edges, states) = run_states(&[]);
        assert_eq!(states.keys().collect::<Vec<_>>(), ["alert", "extract", "load", "ta", "tb"]);
        let shown: Vec<(&str, &str, Kind)> = edges.iter().map(|e| (e.from.as_str(), e.to.as_str(), e.kind)).collect();
        assert_eq!(
            shown,
            [
                ("extract", "ta", Kind::After),
                ("extract", "tb", Kind::After),
                ("load", "alert", Kind::OnFailure),
                ("ta", "load", Kind::After),
                ("tb", "load", Kind::After)
            ]
        );
        assert_eq!(states["extract"], NodeState::Pending, "the root runs");
        assert_eq!(states["ta"], NodeState::Waiting);
        let order = layers("extract", &states.keys().cloned().collect(), &edges);
        assert_eq!(order, ["extract", "ta", "tb", "load", "alert"]);
    }

    #[test]
    fn states_follow_the_parents() {
        use Status::*;
        let (_, s) = run_states(&[step("extract", Succeeded), step("ta", Succeeded)]);
        assert_eq!((s["ta"], s["tb"], s["load"]), (NodeState::Step(Succeeded), NodeState::Pending, NodeState::Waiting));
        assert_eq!(overall(s.values()), "running");
        let (_, s) = run_states(&[step("extract", Succeeded), step("ta", Succeeded), step("tb", Failed)]);
        assert_eq!((s["load"], s["alert"]), (NodeState::NotReached, NodeState::NotReached));
        assert_eq!(overall(s.values()), "failed");
        let all = ["extract", "ta", "tb", "load"].map(|j| step(j, Succeeded));
        let (_, s) = run_states(&all);
        assert_eq!(s["alert"], NodeState::NotReached, "on_failure of a success");
        assert_eq!(overall(s.values()), "succeeded");
        let mut failed_load = all.to_vec();
        failed_load[3] = step("load", TimedOut);
        let (_, s) = run_states(&failed_load);
        assert_eq!(s["alert"], NodeState::Pending, "on_failure fires");
    }

    #[test]
    fn resume_request_ids_are_valid_and_deterministic() {
        let run = etcron_model::workflow::run_id(&ExecutionId::new("extract", Tick::Scheduled(1_764_547_200_000)));
        let id = resume_request_id(&run, 2);
        assert_eq!(id, format!("resume-2-{run}"));
        validate_id(&id).unwrap();
        let long = "r".repeat(MAX_ID_LEN);
        let id = resume_request_id(&long, 3);
        validate_id(&id).unwrap();
        assert_eq!(id, resume_request_id(&long, 3));
        assert_ne!(id, resume_request_id(&long, 4));
    }
}
