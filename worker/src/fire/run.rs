//! The run phase: wait for the scheduled time (a claim is won ahead of it), then the task —
//! a shell command in its own process group, an HTTP request or a gRPC call — with the job's
//! environment and identity, until it ends or is stopped.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use etcron_common::etcd::EtcdError;
use etcron_common::store::{RecordWrite, WriteMode};
use etcron_common::trace::TraceContext;
use etcron_model::keys::Part;
use etcron_model::progress::Resumed;
use etcron_model::record::{Status, TriggerKind};
use etcron_model::spec::{GrpcTask, HttpTask, Mode, ShellTask, Task};
use etcron_model::{now_ms, rfc3339_ms};
use tokio::sync::{oneshot, watch};

use crate::context::Context;
use crate::fire::race::WonClaim;
use crate::fire::record::base_record;
use crate::metrics::METRICS;
use crate::tasks::grpc::{self, GrpcJob};
use crate::tasks::http::{self, HttpJob};
use crate::tasks::live_output::Lines;
use crate::tasks::progress::{Fence, Tracker};
use crate::tasks::run_as;
use crate::tasks::shell::{self, Ending, Finished, ShellJob, StopReason};
use crate::tasks::uids::TaskAccount;
use crate::timing::fire::Fire;

/// How long a task must run before its `running` record is written and its running marker is
/// updated with pid and fencing token.
pub(crate) const RUNNING_DETAIL_AFTER: Duration = Duration::from_secs(1);

/// What a task is given besides its spec: where and how it reports progress, and the
/// checkpoint a failover rerun resumes from.
pub(crate) struct Reporting<'a> {
    pub tracker: Arc<Tracker>,
    pub resumed: Option<&'a Resumed>,
    /// The results of the run's parents (a dependency or workflow step): job → result. Shell
    /// tasks get them as `ETCRON_PARENT_RESULT` (one parent) and `ETCRON_PARENTS` (all), HTTP
    /// tasks as `X-Etcron-Parent-Result` / `X-Etcron-Parents`, gRPC calls as the same metadata,
    /// handlers through their context.
    pub parents: Option<&'a ParentResults>,
    /// The W3C `traceparent` of the run's span: shell tasks get it as `TRACEPARENT`, HTTP
    /// requests and gRPC calls as a `traceparent` header or metadata entry (unless the job sets
    /// its own).
    pub traceparent: String,
}

/// The results of a run's parents, by job (a parent without a result maps to `null`).
pub(crate) type ParentResults = std::collections::BTreeMap<String, serde_json::Value>;

/// The run's parameters as the shell's environment. The master checked them against the spec
/// it read; the spec this worker runs may be newer (a parameter removed since): checked again
/// here, a refusal (why) being the run's end.
fn shell_params(fire: &Fire, shell: &ShellTask) -> Result<std::collections::BTreeMap<String, String>, String> {
    etcron_model::spec::params::run_env(&shell.params, &fire.params.env).map_err(|e| {
        let field = e.field.unwrap_or_default();
        tracing::warn!(execution = %fire.id, %field, reason = %e.message, "run refused: run parameter");
        crate::metrics::METRICS.runs_refused.with_label_values(&["run_params"]).inc();
        format!("run parameter refused: {field}: {}", e.message)
    })
}

/// Runs the task: a shell command, an HTTP request or a gRPC call, until it ends or `stop` says.
pub(crate) async fn execute(
    ctx: &Context,
    fire: &Fire,
    fencing_token: i64,
    reporting: Reporting<'_>,
    stop: watch::Receiver<Option<StopReason>>,
    pid_tx: oneshot::Sender<(u32, i64)>,
) -> Finished {
    // Stopped before it started (killed while claimed ahead, lease lost): nothing is started.
    if let Some(reason) = stop.borrow().clone() {
        return Finished::not_started(Ending::Stopped(reason));
    }
    if let Some(tasks) = &ctx.simulated {
        drop(pid_tx);
        return tasks.run(&ctx.config.worker_id, fire, stop).await;
    }
    let max_output = max_output(ctx, fire);
    match &fire.spec.task {
        Task::Shell(shell) => {
            if let Some(refused) =
                shell.user.as_ref().and_then(|u| run_as::refusal(&ctx.config.run_as_users, u, &ctx.config.worker_id))
            {
                return Finished::not_started(Ending::SpawnFailed(refused));
            }
            let params = match shell_params(fire, shell) {
                Ok(params) => params,
                Err(refused) => return Finished::not_started(Ending::SpawnFailed(refused)),
            };
            let run_as = TaskAccount::of(
                shell.user.as_deref(),
                shell.group.as_deref(),
                fire.spec.team.as_deref(),
                &ctx.config.task_identity,
            );
            // Followable from now until the run ends (the guard's drop ends the followers).
            let env = shell_env(ctx, fire, shell, params, fencing_token, &reporting);
            let live = ctx.live.open(&fire.id.to_string(), max_output, Some(reporting.tracker), Lines::Reports);
            let job = ShellJob {
                command: shell.command.clone(),
                env,
                cwd: shell.cwd.clone(),
                run_as,
                worker_id: ctx.config.worker_id.clone(),
                timeout: fire.spec.timeout.map(|t| t.0),
                kill_grace: ctx.config.kill_grace,
                output: live.output(),
                limits: fire.spec.limits.unwrap_or_default(),
                network: ctx.config.shell_task_network,
                // A simulated node has no slot, and runs no real task.
                keeper_slot: ctx.keeper_slot.as_ref().map_or(0, crate::tasks::keeper::Slot::index),
            };
            shell::run_shell(job, stop, pid_tx).await
        }
        Task::Http(http) => {
            drop(pid_tx); // no process: nobody waits for a pid
            let job = http_job(ctx, fire, http, fencing_token, &reporting);
            let live = ctx.live.open(&fire.id.to_string(), max_output, Some(reporting.tracker), Lines::Ignored);
            http::run_http(job, live.output(), stop).await
        }
        Task::Handler(handler) => {
            drop(pid_tx);
            handler_task(ctx, fire, handler, (fencing_token, &reporting), max_output, stop).await
        }
        Task::Grpc(grpc) => {
            drop(pid_tx);
            let job = grpc_job(ctx, fire, grpc, fencing_token, &reporting, max_output);
            // Open for its reports (POSTed to x-etcron-progress-url); its output is the record's.
            let _live = ctx.live.open(&fire.id.to_string(), max_output, Some(reporting.tracker), Lines::Ignored);
            grpc::run_grpc(job, stop).await
        }
    }
}

/// The output a run keeps: the job's `limits.output`, within the worker's `max_output`.
fn max_output(ctx: &Context, fire: &Fire) -> usize {
    let worker = ctx.config.max_output;
    fire.spec.output_limit().map_or(worker, |m| usize::try_from(m).unwrap_or(usize::MAX).min(worker))
}

/// Runs a handler task on this process's handlers (an executor's), its run parameters checked
/// again against the spec this worker runs.
async fn handler_task(
    ctx: &Context,
    fire: &Fire,
    handler: &etcron_model::spec::HandlerTask,
    (fencing_token, reporting): (i64, &Reporting<'_>),
    max_output: usize,
    stop: watch::Receiver<Option<StopReason>>,
) -> Finished {
    let Some(handlers) = ctx.handlers.clone() else {
        return Finished::not_started(Ending::SpawnFailed(format!(
            "this worker runs no handlers (handler {:?} is for executors that registered it)",
            handler.name
        )));
    };
    let params = match etcron_model::spec::params::run_env(&handler.params, &fire.params.env) {
        Ok(params) => params,
        Err(e) => {
            crate::metrics::METRICS.runs_refused.with_label_values(&["run_params"]).inc();
            let field = e.field.unwrap_or_default();
            return Finished::not_started(Ending::SpawnFailed(format!(
                "run parameter refused: {field}: {}",
                e.message
            )));
        }
    };
    let live = ctx.live.open(&fire.id.to_string(), max_output, Some(reporting.tracker.clone()), Lines::Ignored);
    let mut job = handler_job(ctx, fire, handler, params, fencing_token, reporting, live.output());
    job.call.reports.set_parent_results(reporting.parents.cloned());
    crate::tasks::handler::run_handler(handlers.as_ref(), job, &live.output(), stop).await
}

/// A handler's call: the execution, its values (the task's `env` and `secret_env`, then the run's
/// parameters), the checkpoint it resumes from, and its reports.
fn handler_job(
    ctx: &Context,
    fire: &Fire,
    handler: &etcron_model::spec::HandlerTask,
    params: std::collections::BTreeMap<String, String>,
    fencing_token: i64,
    reporting: &Reporting<'_>,
    output: Arc<crate::tasks::live_output::LiveOutput>,
) -> crate::tasks::handler::HandlerJob {
    let mut env = handler.env.clone();
    env.extend(handler.secret_env.iter().filter_map(|(k, v)| Some((k.clone(), v.clone()?))));
    env.extend(params);
    let (reports, cancel, cancelled) = crate::tasks::handler::reports(reporting.tracker.clone(), output);
    let call = crate::tasks::handler::Call {
        name: handler.name.clone(),
        execution_id: fire.id.to_string(),
        job: fire.id.job.clone(),
        scheduled_ms: fire.id.tick.scheduled_ms(),
        attempt: fire.id.attempt,
        fencing_token,
        env,
        checkpoint: reporting.resumed.map(|r| r.checkpoint.clone()),
        traceparent: reporting.traceparent.clone(),
        reports,
        cancelled,
    };
    crate::tasks::handler::HandlerJob {
        call,
        cancel,
        timeout: fire.spec.timeout.map(|t| t.0),
        kill_grace: ctx.config.kill_grace,
    }
}

/// A shell task's environment: only the configured names of the worker's, then the job's own,
/// then its declared parameters (defaults and the run's values: never a name of `env` or
/// `secret_env`), then the `ETCRON_*` task variables. A task in a network namespace of its own
/// cannot reach the worker's progress listener: it gets no `ETCRON_PROGRESS_URL` nor token
/// (its `::etcron` output lines still report).
fn shell_env(
    ctx: &Context,
    fire: &Fire,
    shell: &ShellTask,
    params: std::collections::BTreeMap<String, String>,
    fencing_token: i64,
    reporting: &Reporting<'_>,
) -> std::collections::BTreeMap<String, String> {
    let mut env = ctx.task_env.clone();
    // Before the job's own variables: a job that sets `TRACEPARENT` keeps its value.
    env.insert("TRACEPARENT".to_owned(), reporting.traceparent.clone());
    env.extend(shell.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.extend(shell.secret_env.iter().filter_map(|(k, v)| Some((k.clone(), v.clone()?))));
    env.extend(params);
    let identity = task_identity(ctx, fire, fencing_token, reporting);
    let reaches_worker = !ctx.config.shell_task_network.isolated();
    let identity = identity.into_iter().filter(|(name, _)| reaches_worker || !PROGRESS_ENDPOINT.contains(name));
    env.extend(identity.map(|(name, value)| (format!("ETCRON_{name}"), value)));
    // The parents' results: `ETCRON_PARENT_RESULT` (one parent) and `ETCRON_PARENTS`.
    if let Some(parents) = reporting.parents {
        use crate::tasks::progress::{parent_values, MAX_PARENT_ENV_BYTES};
        let (values, left_out) = parent_values(parents, MAX_PARENT_ENV_BYTES, false);
        for (name, bytes) in left_out {
            tracing::warn!(execution = %fire.id, variable = %format!("ETCRON_{name}"), bytes, limit = MAX_PARENT_ENV_BYTES, "the parents' results are too long for an environment variable: left out");
        }
        env.extend(values.into_iter().map(|(name, value)| (format!("ETCRON_{name}"), value)));
    }
    env
}

/// The task variables that say where and how to POST progress reports to the worker.
const PROGRESS_ENDPOINT: [&str; 2] = ["PROGRESS_URL", "PROGRESS_TOKEN"];

/// A task's identity, where it reports progress, and the checkpoint a failover rerun resumes
/// (its JSON, non-ASCII escaped so that a header can carry it) with who wrote it: named as the
/// `ETCRON_*` variables without their prefix. One list for a shell task's environment and an
/// HTTP request's or gRPC call's `X-Etcron-*` headers ([`header_name`]).
fn task_identity(
    ctx: &Context,
    fire: &Fire,
    fencing_token: i64,
    reporting: &Reporting<'_>,
) -> Vec<(&'static str, String)> {
    let id = &fire.id;
    let mut identity = vec![
        ("JOB", id.job.clone()),
        ("EXECUTION_ID", id.to_string()),
        ("SCHEDULED_AT", rfc3339_ms(fire.scheduled_ms)),
        ("SCHEDULED_AT_MS", fire.scheduled_ms.to_string()),
        ("ATTEMPT", id.attempt.to_string()),
        ("TRIGGER", fire.trigger.as_str().to_owned()),
        ("WORKER_ID", ctx.config.worker_id.clone()),
        ("FENCING_TOKEN", fencing_token.to_string()),
    ];
    if let (Part::Shard(i), Mode::Sharded(n)) = (&id.part, fire.spec.mode) {
        identity.push(("SHARD_INDEX", i.to_string()));
        identity.push(("SHARD_COUNT", n.to_string()));
    }
    if let Some(parent) = &fire.parent {
        identity.push(("PARENT_EXECUTION_ID", parent.to_string()));
    }
    if let Some(base) = &ctx.local_output_url {
        identity.push(("PROGRESS_URL", progress_url(base, id)));
        identity.push(("PROGRESS_TOKEN", reporting.tracker.token().to_owned()));
    }
    if let Some(resumed) = reporting.resumed {
        identity.push(("CHECKPOINT", etcron_model::json::ascii(&resumed.checkpoint)));
        identity.push(("RESUMED_FROM", resumed.execution_id.clone()));
    }
    identity
}

/// The header of a task variable: `SCHEDULED_AT_MS` is `X-Etcron-Scheduled-At-Ms`.
fn header_name(name: &str) -> String {
    name.split('_').fold("X-Etcron".to_owned(), |mut header, word| {
        header.push('-');
        header.push_str(&word[..1]);
        header.push_str(&word[1..].to_ascii_lowercase());
        header
    })
}

/// An HTTP task's request: the job's headers (secrets included), the `X-Etcron-*` identity,
/// where to report progress, the checkpoint it resumes from, and its parents' results (a header
/// too long left out, and the output told).
fn http_job(ctx: &Context, fire: &Fire, http: &HttpTask, fencing_token: i64, reporting: &Reporting<'_>) -> HttpJob {
    use crate::tasks::progress::{parent_values, MAX_PARENT_HEADER_BYTES};
    let headers = http
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .chain(http.secret_headers.iter().filter_map(|(k, v)| Some((k.clone(), v.clone()?))))
        .collect();
    let (parents, left_out) =
        reporting.parents.map(|p| parent_values(p, MAX_PARENT_HEADER_BYTES, true)).unwrap_or_default();
    let notes = left_out.into_iter().map(|(name, bytes)| {
        format!(
            "etcron: {} left out: {bytes} bytes, over the {MAX_PARENT_HEADER_BYTES}-byte limit of a header",
            header_name(name)
        )
    });
    let parents = parents.into_iter().map(|(name, value)| (header_name(name), value));
    HttpJob {
        method: http.method.clone(),
        url: http.url.clone(),
        headers: http::with_default_headers(&headers, identity(ctx, fire, fencing_token, reporting).chain(parents)),
        secret_headers: http.secret_headers.keys().cloned().collect(),
        body: http.body.clone(),
        expect_status: http.expect_status,
        timeout: fire.spec.timeout.map(|t| t.0),
        asynchronous: http.asynchronous.as_deref().map(|poll| (poll.clone(), poll.poll_timeout(fire.spec.timeout).0)),
        tracker: Some(reporting.tracker.clone()),
        network: ctx.task_network.clone(),
        result_pointer: http.result_pointer.clone(),
        notes: notes.collect(),
    }
}

/// What an HTTP request or a gRPC call carries besides the job's own headers: the task
/// variables as `X-Etcron-*` headers, and the run's `traceparent`.
fn identity(
    ctx: &Context,
    fire: &Fire,
    fencing_token: i64,
    reporting: &Reporting<'_>,
) -> impl Iterator<Item = (String, String)> {
    let identity = task_identity(ctx, fire, fencing_token, reporting);
    let trace = ("traceparent".to_owned(), reporting.traceparent.clone());
    identity.into_iter().map(|(name, value)| (header_name(name), value)).chain(std::iter::once(trace))
}

/// Where a running task POSTs its reports (`ETCRON_PROGRESS_URL`, `X-Etcron-Progress-Url`).
fn progress_url(base: &str, id: &etcron_model::keys::ExecutionId) -> String {
    format!("{base}/executions/{}/progress", etcron_model::percent_encode(&id.to_string()))
}

/// A gRPC task's call: the job's metadata (secrets included), the `x-etcron-*` identity, where
/// to report progress, for a failover rerun that resumes one, the checkpoint (compact ASCII
/// JSON) and who wrote it, and the parents' results (an entry too long left out, the output
/// told).
fn grpc_job(
    ctx: &Context,
    fire: &Fire,
    grpc: &GrpcTask,
    fencing_token: i64,
    reporting: &Reporting<'_>,
    max_output: usize,
) -> GrpcJob {
    use crate::tasks::progress::{parent_values, MAX_PARENT_HEADER_BYTES};
    let own = grpc
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .chain(grpc.secret_metadata.iter().filter_map(|(k, v)| Some((k.clone(), v.clone()?))))
        .collect();
    let (parents, left_out) =
        reporting.parents.map(|p| parent_values(p, MAX_PARENT_HEADER_BYTES, true)).unwrap_or_default();
    let notes = left_out.into_iter().map(|(name, bytes)| {
        let entry = header_name(name).to_ascii_lowercase();
        format!("etcron: {entry} left out: {bytes} bytes, over the {MAX_PARENT_HEADER_BYTES}-byte limit of an entry")
    });
    let parents = parents.into_iter().map(|(name, value)| (header_name(name), value));
    GrpcJob {
        endpoint: grpc.endpoint.clone(),
        method: grpc.method.clone(),
        request: grpc.request.clone(),
        // Metadata names are lowercase (HTTP/2 sends header names so).
        metadata: http::with_default_headers(
            &own,
            identity(ctx, fire, fencing_token, reporting)
                .chain(parents)
                .map(|(name, value)| (name.to_ascii_lowercase(), value)),
        ),
        descriptor_set: grpc.descriptor_set.clone(),
        timeout: fire.spec.timeout.map(|t| t.0),
        max_output,
        network: ctx.task_network.clone(),
        notes: notes.collect(),
    }
}

/// What the run phase hands to the close phase.
pub struct Ran {
    pub finished: Finished,
    /// When the task was handed to the executor.
    pub handed_ms: i64,
    /// The `running` record as submitted (the close phase completes it).
    pub record: etcron_model::record::ExecutionRecord,
    /// Its place in its workflow run, when it is a step of one.
    pub step: Option<crate::fire::workflow::StepOf>,
}

/// Runs the task of a won claim: registered (so kills and lease loss reach it) from now until
/// it ends; started at its scheduled time, not before; `trace` is the run's span (its record
/// names the trace, its task gets the `traceparent`).
pub async fn run(ctx: &Arc<Context>, fire: &Fire, won: &mut WonClaim, trace: TraceContext) -> Ran {
    let id = &fire.id;
    let mut stop = ctx.registry.register(id, won.fencing_token);
    until_scheduled(fire, &mut stop).await;
    // A capacity slot from its start to its end (`slots`): none free, the run is not started.
    // Past the session deadline its keeper would end the task at once, after a start that may
    // already have done part of its work: not started, it is lost with the session (rerun per
    // `on_worker_loss`), as a run the keeper ended would be.
    let slot = take_slot(ctx, fire, &mut stop).await.and_then(|permit| {
        if ctx.session_deadline.passed() {
            Err(Ending::Stopped(shell::StopReason::LeaseLost))
        } else {
            Ok(permit)
        }
    });
    // Handed to the executor now; a shell task's start is when its process was spawned.
    let handed_ms = now_ms();
    let mut record = base_record(ctx, fire, Status::Running, Some(won.fencing_token));
    record.claimed_at = Some(rfc3339_ms(won.claimed_ms));
    record.started_at = Some(rfc3339_ms(handed_ms));
    record.trace_id = Some(trace.trace_hex());
    let _slot = match slot {
        Ok(permit) => permit,
        Err(ending) => {
            ctx.registry.deregister(id);
            record.started_at = None;
            return Ran { finished: Finished::not_started(ending), handed_ms, record, step: None };
        }
    };
    // `late` and the `max_duration` watch (ended with this run, when `_alerts` drops).
    let _alerts = crate::fire::alerts::run_started(ctx, fire, handed_ms);
    let (tracker, resumed) = reports_of_run(ctx, fire, won).await;
    record.reports.resumed_from.clone_from(&resumed);
    let (inputs, ended) = workflow_inputs(ctx, fire, &mut record).await;
    let task_fire = inputs.as_ref().and_then(|i| i.fire.as_ref()).unwrap_or(fire);
    let parents = inputs.as_ref().map(|i| &i.parents);
    let traceparent = trace.traceparent();
    let reporting = Reporting { tracker: tracker.clone(), resumed: resumed.as_ref(), parents, traceparent };
    let (pid_tx, pid_rx) = oneshot::channel();
    let lapses = ctx.session_deadline.mark();
    let step = inputs.as_ref().map(|i| i.step.clone());
    let fencing_token = won.fencing_token;
    let run = async move {
        match ended {
            Some(finished) => finished,
            None => execute(ctx, task_fire, fencing_token, reporting, stop, pid_tx).await,
        }
    };
    tokio::pin!(run);
    let mut finished = tokio::select! {
        f = &mut run => f,
        () = tokio::time::sleep(RUNNING_DETAIL_AFTER) => {
            // Still running: now its `running` record and marker. A run that ends sooner writes
            // only its final record (one MongoDB write instead of two); until then the master
            // answers for it from its claim.
            let ((), finished) = tokio::join!(running_detail(ctx, won, &record, pid_rx, handed_ms), &mut run);
            finished
        }
    };
    ctx.registry.deregister(id);
    // Killed by its keeper because this worker's session deadline passed while it ran (the
    // worker was frozen or cut off, even if a late keep-alive renewed the session since): the
    // run ended with the session, as if the worker had stopped it.
    let sigkill = nix::sys::signal::Signal::SIGKILL as i32;
    if finished.ending == Ending::Signaled(sigkill) && (lapsed(ctx, lapses) || *ctx.lease.borrow() != Some(won.lease)) {
        finished.ending = Ending::Stopped(shell::StopReason::LeaseLost);
    }
    ended_with(fire, &tracker, &mut finished, &mut record, handed_ms);
    Ran { finished, handed_ms, record, step }
}

/// A tick claimed ahead (`claim_ahead`) starts at its scheduled time, not before; a kill or a
/// lost lease meanwhile still applies (the task is then never started).
async fn until_scheduled(fire: &Fire, stop: &mut tokio::sync::watch::Receiver<Option<shell::StopReason>>) {
    let wait_ms = fire.scheduled_ms - now_ms();
    if fire.trigger == TriggerKind::Schedule && wait_ms > 0 {
        let wait = tokio::time::sleep(Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0)));
        tokio::select! {
            () = wait => {}
            _ = shell::wait_stop(stop) => {}
        }
    }
}

/// A workflow step's inputs (its record then shows the parameters `params_from` took), or
/// the run's end when they cannot be had.
async fn workflow_inputs(
    ctx: &Context,
    fire: &Fire,
    record: &mut etcron_model::record::ExecutionRecord,
) -> (Option<crate::fire::workflow::Inputs>, Option<Finished>) {
    match crate::fire::workflow::inputs(ctx, fire).await {
        Ok(inputs) => {
            if let Some(adjusted) = inputs.as_ref().and_then(|i| i.fire.as_ref()) {
                record.params.env.clone_from(&adjusted.params.env);
            }
            (inputs, None)
        }
        Err(why) => (None, Some(Finished::not_started(Ending::SpawnFailed(why)))),
    }
}

/// What the run's end adds to its record (its last reports, its result) and its lateness.
fn ended_with(
    fire: &Fire,
    tracker: &Tracker,
    finished: &mut Finished,
    record: &mut etcron_model::record::ExecutionRecord,
    handed_ms: i64,
) {
    let snapshot = tracker.snapshot();
    record.reports.progress = snapshot.progress;
    record.reports.checkpoint = snapshot.checkpoint;
    record.reports.result = finished.result.take().or(snapshot.result);
    if fire.trigger == TriggerKind::Schedule {
        let started_ms = finished.spawned_ms.unwrap_or(handed_ms);
        #[allow(clippy::cast_precision_loss)] // milliseconds of lateness fit an f64 exactly
        METRICS.lateness.observe((started_ms - fire.scheduled_ms).max(0) as f64 / 1000.0);
    }
}

/// Whether the session deadline passed while the run lasted.
fn lapsed(ctx: &Context, since: crate::tasks::keeper::LapseMark) -> bool {
    use crate::context::simulated::holes;
    if holes::open(holes::KEEPER_KILL_FAILED) {
        return ctx.session_deadline.lapsed_since(ctx.session_deadline.mark());
    }
    ctx.session_deadline.lapsed_since(since)
}

/// A free capacity slot for the run that starts now, waiting for one up to the tick's start
/// deadline (a scheduled tick) or `SLOT_WAIT_MAX`; otherwise how the run ends unstarted: stopped
/// (a kill, a lost lease) or missed for want of capacity.
async fn take_slot(
    ctx: &Arc<Context>,
    fire: &Fire,
    stop: &mut tokio::sync::watch::Receiver<Option<shell::StopReason>>,
) -> Result<crate::context::slots::Slot, Ending> {
    let wait = if fire.trigger == TriggerKind::Schedule {
        let deadline = fire.spec.start_deadline();
        let left = fire.scheduled_ms + i64::try_from(deadline.as_millis()).unwrap_or(i64::MAX) - now_ms();
        Duration::from_millis(u64::try_from(left).unwrap_or(0)).min(crate::context::slots::SLOT_WAIT_MAX)
    } else {
        crate::context::slots::SLOT_WAIT_MAX
    };
    let until = tokio::time::Instant::now() + wait;
    tokio::select! {
        slot = ctx.slots.take((fire.priority(), fire.scheduled_ms), until) => slot.ok_or_else(|| {
            let why = format!(
                "no capacity slot came free on worker {} within {} (capacity {}, every slot running)",
                ctx.config.worker_id,
                humantime::format_duration(Duration::from_secs(wait.as_secs())),
                ctx.config.capacity
            );
            tracing::warn!(why, "a won run was not started");
            METRICS.runs_without_slot.inc();
            Ending::NoCapacity(why)
        }),
        reason = shell::wait_stop(stop) => Err(Ending::Stopped(reason)),
    }
}

/// The task's tracker of reports (its checkpoints fenced by the claim won), and, for a
/// failover rerun, the lost run's last checkpoint it continues from.
async fn reports_of_run(ctx: &Arc<Context>, fire: &Fire, won: &WonClaim) -> (Arc<Tracker>, Option<Resumed>) {
    let checkpoint_key = ctx.keys.checkpoint(&fire.id);
    let resumed = if fire.trigger == TriggerKind::Failover {
        crate::tasks::progress::resume_point(&ctx.client, &checkpoint_key, &fire.id).await
    } else {
        None
    };
    // The task asked to be moved: stopped here, continued elsewhere (see `close`).
    let (owner, id) = (Arc::downgrade(ctx), fire.id.clone());
    let rebalance = Box::new(move || {
        if let Some(owner) = owner.upgrade() {
            owner.registry.stop(&id, StopReason::Rebalance);
        }
    });
    let fence = Fence {
        client: ctx.client.clone(),
        leases: ctx.long_leases.clone(),
        claim_key: won.claim_key.clone(),
        fencing_token: won.fencing_token,
        checkpoint_key,
        rebalance,
    };
    (Tracker::new(&fire.id, crate::tasks::progress::new_token(), fence), resumed)
}

/// A run still going after `RUNNING_DETAIL_AFTER`: its `running` record and its marker, both
/// saying when its task started (a shell task: when its process was spawned, sent with its pid;
/// the run is polled meanwhile, so a spawn slower than the detail delay, in a burst of spawns,
/// writes both only once it happened).
async fn running_detail(
    ctx: &Context,
    won: &mut WonClaim,
    record: &etcron_model::record::ExecutionRecord,
    pid_rx: oneshot::Receiver<(u32, i64)>,
    handed_ms: i64,
) {
    let spawned = pid_rx.await.ok();
    let started_ms = spawned.map_or(handed_ms, |(_, ms)| ms);
    let mut running = record.clone();
    running.started_at = Some(rfc3339_ms(started_ms));
    ctx.sink.submit(RecordWrite { mode: WriteMode::IfAbsent, record: running });
    fill_in_marker(ctx, won, spawned.map(|(pid, _)| pid), started_ms).await;
}

/// A run that lasts: writes its running marker (worker, claim and task start, pid, fencing
/// token) on the session lease, while the claim is still as won. It shows the run to the API
/// and to operators reading etcd, and keeps the execution from being claimed again should the
/// run outlast its claim's retention. Shorter runs never write one: the claim transaction's
/// inflight key is what tells the loss handling about them.
async fn fill_in_marker(ctx: &Context, won: &mut WonClaim, pid: Option<u32>, task_started_ms: i64) {
    won.running.pid = pid;
    won.running.task_started_ms = Some(task_started_ms);
    won.running.fencing_token = Some(won.fencing_token);
    let opts = Some(PutOptions::new().with_lease(won.lease));
    let txn = Txn::new()
        .when([Compare::mod_revision(won.claim_key.as_str(), CompareOp::Equal, won.fencing_token)])
        .and_then([TxnOp::put(won.running_key.as_str(), won.running.to_bytes(), opts)]);
    let mut kv = ctx.client.kv_client();
    match etcron_common::etcd::request("put_running", kv.txn(txn)).await {
        Ok(resp) if resp.succeeded() => {
            won.marker_revision = resp.header().map(etcd_client::ResponseHeader::revision);
        }
        Ok(_) => tracing::warn!("not writing the running marker: the claim was closed by the loss handling"),
        Err(EtcdError::Failed(e)) => tracing::warn!(error = %e, "writing the running marker failed"),
        Err(EtcdError::Timeout) => tracing::warn!("writing the running marker timed out"),
    }
}

#[cfg(test)]
mod tests {
    use super::header_name;

    #[test]
    fn task_variables_are_headers_in_title_case() {
        assert_eq!(header_name("JOB"), "X-Etcron-Job");
        assert_eq!(header_name("SCHEDULED_AT_MS"), "X-Etcron-Scheduled-At-Ms");
        assert_eq!(header_name("PARENT_EXECUTION_ID"), "X-Etcron-Parent-Execution-Id");
        assert_eq!(header_name("PROGRESS_URL"), "X-Etcron-Progress-Url");
    }
}
