//! The job routes: list, get, save (PUT), delete, run, kill, pause and resume. Writes go
//! through the `JobStore`; these handlers translate HTTP to its calls and its answers back.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use etcd_client::GetOptions;
use etcron_common::store::{Search, StoreError};
use etcron_model::keys::{ExecutionId, Key, KillTarget};
use etcron_model::record::RunParams;
use etcron_model::schedule::{format_in, MAX_AT_MS};
use etcron_model::spec::alerts::{unrouted, Warning};
use etcron_model::spec::notify::NotifyEvent;
use etcron_model::spec::JobSpec;
use etcron_model::stored::WorkerInfo;
use etcron_model::stored::{fires, Pause, MAX_PAUSE_REASON, MAX_PAUSE_UNTIL_MS};
use etcron_model::{now_ms, rfc3339_ms, UnixMs};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::access::{team_of, Scope};
use crate::backend::AppState;
use crate::error::ApiError;
use crate::error::{etcd, ApiResult};
use crate::job_store::commands::{stored_pause, Paused, Resumed, StoredJob};
use crate::job_store::{Change, Origin, Precondition, Write, Written};
use crate::layers::audit::RequestId;
use crate::layers::auth::Caller;

use super::http::*;
use crate::query::{self, Params};

/// Parameters `GET /api/jobs` accepts.
pub(super) const LIST_PARAMS: [&str; 7] = ["team", "limit", "cursor", "prefix", "label", "state", "health"];

/// Upcoming fire times shown with each job.
pub(super) const NEXT_RUNS: usize = 5;

/// Deadline for the best-effort record summaries shown with jobs.
pub(super) const SUMMARY_TIMEOUT: Duration = Duration::from_secs(2);

/// A job as the API shows it.
#[derive(Debug, Serialize)]
pub struct JobView {
    pub name: String,
    pub spec: Value,
    /// The key's mod revision: pass it back in `If-Match`.
    pub revision: i64,
    pub created_revision: i64,
    pub schedule_description: String,
    /// Next fire times (RFC 3339 in the job's timezone); empty when the job does not fire
    /// (paused, disabled) or its schedule is over.
    pub next_runs: Vec<String>,
    /// An operator's pause (`{ns}/paused/{job}`), or `null`. A job fires iff its spec says
    /// `enabled` and it is not paused (`model::fires`).
    pub paused: Option<PauseView>,
    /// Set when the stored value is not a valid spec (written around the API).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
    /// Live workers that may run the job: their labels match its selector and, for a task run
    /// as a user, they list that user in `run_as_users` (shown by the GET routes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eligible_workers: Option<usize>,
    /// What the save allowed but an operator should hear of (a save's answer only): alerts no
    /// target would send.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
}

/// The alerts of each spec no target would send (`alerts::unrouted`): the job's own `notify`,
/// or, for a job without one, the default targets of the live workers (read only when a spec
/// needs them; unread, nothing is warned of for such jobs).
pub(super) async fn alert_warnings<'a>(
    st: &AppState,
    specs: impl Iterator<Item = Option<&'a JobSpec>> + Clone,
) -> Vec<Vec<Warning>> {
    let needs_defaults = specs.clone().flatten().any(|s| s.alerts.is_some() && s.notify.is_none());
    let defaults: Option<Vec<NotifyEvent>> = if needs_defaults {
        match super::workers::open_workers(st).await {
            Ok(workers) => Some(workers.into_iter().flat_map(|(_, w)| w.default_notify).collect()),
            Err(e) => {
                tracing::warn!(error = %e.message, "the live workers' default notify targets cannot be read: a save's alerts of jobs without notify are not checked");
                None
            }
        }
    } else {
        Some(Vec::new())
    };
    specs
        .map(|spec| match (spec, &defaults) {
            (Some(spec), Some(defaults)) => unrouted(spec, defaults),
            (Some(spec), None) if spec.notify.is_some() => unrouted(spec, &[]),
            _ => Vec::new(),
        })
        .collect()
}

/// A pause as the API shows it; every field is `null` when the stored value does not say
/// (a `{}` written with `etcdctl`, or a value that does not parse).
#[derive(Debug, Serialize)]
pub struct PauseView {
    pub by: Option<String>,
    /// RFC 3339.
    pub at: Option<String>,
    pub reason: Option<String>,
    /// RFC 3339: when the pause ends by itself; `null` until resumed.
    pub until: Option<String>,
    /// The final failure that paused the job (`pause_after_failures`).
    pub execution_id: Option<String>,
    /// A pause with `until`: the job's first fire time after it ends (RFC 3339 in the job's
    /// timezone); `null` otherwise, or when the job would not fire then.
    pub next_run_after: Option<String>,
}

impl From<&Pause> for PauseView {
    fn from(p: &Pause) -> Self {
        let instant = |ms: Option<UnixMs>| ms.filter(|ms| (0..=MAX_AT_MS).contains(ms)).map(rfc3339_ms);
        Self {
            by: p.by.clone(),
            at: instant(p.at_ms),
            reason: p.reason.clone(),
            until: instant(p.until_ms),
            execution_id: p.execution_id.clone(),
            next_run_after: None,
        }
    }
}

/// Live workers that may run `spec`: labels matching its selector, its task's user allowed,
/// serving its team.
pub(super) fn eligible(workers: &[(String, WorkerInfo)], spec: &JobSpec) -> usize {
    workers.iter().filter(|(_, w)| w.may_run(spec)).count()
}

/// A stored job as the API shows it; `workers` (the live ones) fills in `eligible_workers`,
/// `pause` is the job's `{ns}/paused/{job}` if it exists.
pub(super) fn view(
    name: String,
    value: &[u8],
    revision: i64,
    created_revision: i64,
    workers: Option<&[(String, WorkerInfo)]>,
    pause: Option<&Pause>,
) -> JobView {
    match JobSpec::from_json(value) {
        Ok(spec) => view_spec(name, &spec, revision, created_revision, workers, pause),
        Err(e) => JobView {
            name,
            // A value over the size limit is not echoed into every listing.
            spec: if e.too_large {
                Value::Null
            } else {
                etcron_model::spec::redacted_json(serde_json::from_slice(value).unwrap_or(Value::Null))
            },
            revision,
            created_revision,
            schedule_description: String::new(),
            next_runs: Vec::new(),
            paused: pause.map(PauseView::from),
            invalid: Some(e.to_string()),
            eligible_workers: None,
            warnings: Vec::new(),
        },
    }
}

/// A valid spec as the API shows it (secrets withheld).
pub(super) fn view_spec(
    name: String,
    spec: &JobSpec,
    revision: i64,
    created_revision: i64,
    workers: Option<&[(String, WorkerInfo)]>,
    pause: Option<&Pause>,
) -> JobView {
    let mut paused = pause.map(PauseView::from);
    let (description, next_runs) = match spec.parsed_schedule(&name) {
        Ok(s) => {
            let next = if fires(spec, pause) {
                s.upcoming(now_ms(), NEXT_RUNS).into_iter().map(|t| format_in(s.timezone(), t)).collect()
            } else {
                Vec::new()
            };
            // A pause that ends by itself: when the job runs again.
            if let (Some(view), Some(until), true) = (&mut paused, pause.and_then(|p| p.until_ms), spec.enabled) {
                view.next_run_after = s.upcoming(until.max(now_ms()), 1).first().map(|t| format_in(s.timezone(), *t));
            }
            (s.describe(), next)
        }
        Err(e) => (e.to_string(), Vec::new()),
    };
    JobView {
        name,
        spec: serde_json::to_value(spec.redacted()).unwrap_or(Value::Null),
        revision,
        created_revision,
        schedule_description: description,
        next_runs,
        paused,
        invalid: None,
        eligible_workers: workers.map(|w| eligible(w, spec)),
        warnings: Vec::new(),
    }
}

pub(super) fn with_etag(status: StatusCode, body: &JobView) -> Response {
    respond_with_etag(status, body, body.revision)
}

/// The registrations under the workers prefix (each lives as long as its worker's session),
/// with the worker id from the key; values that do not parse are left out.
pub(super) async fn live_workers(st: &AppState) -> ApiResult<Vec<(String, WorkerInfo)>> {
    let mut kv = st.client.kv_client();
    let resp = etcd("list_workers", kv.get(st.keys.workers_prefix(), Some(GetOptions::new().with_prefix()))).await?;
    Ok(resp
        .kvs()
        .iter()
        .filter_map(|item| match st.keys.parse(item.key()) {
            Some(Key::Worker(id)) => serde_json::from_slice::<WorkerInfo>(item.value()).ok().map(|info| (id, info)),
            _ => None,
        })
        .collect())
}

/// Every pause (`{ns}/paused/`), by job.
pub(super) async fn all_pauses(st: &AppState) -> ApiResult<BTreeMap<String, Pause>> {
    let mut kv = st.client.kv_client();
    let resp = etcd("list_paused", kv.get(st.keys.paused_prefix(), Some(GetOptions::new().with_prefix()))).await?;
    Ok(pauses_of(st, &resp))
}

/// The pauses a range read of `{ns}/paused/` found, by job.
pub(super) fn pauses_of(st: &AppState, resp: &etcd_client::GetResponse) -> BTreeMap<String, Pause> {
    resp.kvs()
        .iter()
        .filter_map(|item| match st.keys.parse(item.key()) {
            Some(Key::Paused(job)) => Some((job.clone(), stored_pause(&job, item.value()))),
            _ => None,
        })
        .collect()
}

/// `GET /api/jobs[?team=T]`: the jobs the caller sees (every job with a global role, else
/// those of its teams), of team T only when given; a page of them with a paging parameter
/// (`job_pages`), and refused over `WHOLE_LIST_MAX` stored jobs without one.
pub(super) async fn list_jobs(
    State(st): State<AppState>,
    axum::Extension(scope): axum::Extension<Scope>,
    axum::extract::RawQuery(raw): axum::extract::RawQuery,
) -> ApiResult<Json<Value>> {
    let params = Params::parse(raw.as_deref(), &LIST_PARAMS)?;
    if let Some(page) = super::job_pages::PageQuery::read(&params)? {
        return Ok(Json(super::job_pages::page(&st, &scope, &page).await?));
    }
    let mut wanted = None;
    for (key, value) in params.iter() {
        wanted = Some(query::team(key, value)?);
    }
    let teams = scope.teams(wanted.as_deref());
    // Over WHOLE_LIST_MAX jobs the whole list is refused before any record is read.
    let (resp, workers, pauses) =
        tokio::try_join!(super::job_pages::whole_list(&st), super::workers::open_workers(&st), all_pauses(&st))?;
    let since = now_ms() - 86_400_000;
    let summaries = tokio::time::timeout(SUMMARY_TIMEOUT, st.store.summaries(since, None, teams.as_deref())).await;
    let (summaries, records) = match summaries {
        Ok(Ok(s)) => (Some(s), json!({"available": true})),
        Ok(Err(e)) => (None, json!({"available": false, "error": e.to_string()})),
        Err(_) => (None, json!({"available": false, "error": "MongoDB did not answer in time"})),
    };
    let mut jobs = Vec::new();
    for item in resp.kvs() {
        if let Some(Key::Job(name)) = st.keys.parse(item.key()) {
            let team = team_of(item.value());
            let listed = scope.caller.access.sees(team.as_deref())
                && wanted.as_ref().is_none_or(|w| team.as_deref() == Some(w.as_str()));
            if !listed {
                continue;
            }
            let summary = summaries.as_ref().map(|s| s.get(&name).cloned().unwrap_or_default());
            let pause = pauses.get(&name);
            let job = view(name, item.value(), item.mod_revision(), item.create_revision(), Some(&workers), pause);
            let mut v = serde_json::to_value(job).map_err(|e| ApiError::internal(&e))?;
            v["summary"] = serde_json::to_value(summary).unwrap_or(Value::Null);
            jobs.push(v);
        }
    }
    Ok(Json(json!({ "jobs": jobs, "records": records })))
}

/// The job and its pause, read at one revision, when the request's `scope` allows it on the
/// job's team; 404 when the job does not exist or the caller does not see it.
pub(super) async fn read_job(st: &AppState, name: &str, scope: &Scope) -> ApiResult<(StoredJob, Option<Pause>)> {
    st.jobs().read(name, scope).await.map_err(ApiError::from)
}

pub(super) async fn get_job(
    State(st): State<AppState>,
    Path(name): Path<String>,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Response> {
    job_name(&name)?;
    // The job, the workers and the queue (etcd) and its summary (MongoDB) are read at the same
    // time: under load (a burst) the answer waits for the slowest read, not for each in turn.
    // The summary and the queue are only shown once the job's read allowed it.
    let job = async {
        let (workers, job) = tokio::join!(super::workers::open_workers(&st), read_job(&st, &name, &scope));
        let (workers, (item, pause)) = (workers?, job?);
        Ok::<_, ApiError>(view(
            name.clone(),
            &item.value,
            item.mod_revision,
            item.create_revision,
            Some(&workers),
            pause.as_ref(),
        ))
    };
    let teams = scope.teams(None);
    let summary = async {
        let since = now_ms() - 86_400_000;
        let mut summary = st
            .store
            .summaries(since, Some(std::slice::from_ref(&name)), teams.as_deref())
            .await?
            .remove(&name)
            .unwrap_or_default();
        let latest = Search { job: Some(name.clone()), teams: teams.clone(), limit: 1, ..Search::default() };
        let latest = st.store.search(&latest).await?;
        summary.last_execution = latest.executions.first().map(|r| etcron_common::store::LastExecution {
            id: r.id.to_string(),
            status: r.status,
            scheduled_at: r.scheduled_at.clone(),
        });
        Ok::<_, StoreError>(summary)
    };
    let (job, summary, queue) = tokio::join!(job, tokio::time::timeout(SUMMARY_TIMEOUT, summary), queued(&st, &name));
    let job = job?;
    let summary = match summary {
        Ok(Ok(s)) => serde_json::to_value(s).unwrap_or(Value::Null),
        _ => Value::Null,
    };
    let mut body = serde_json::to_value(&job).map_err(|e| ApiError::internal(&e))?;
    body["summary"] = summary;
    body["queue"] = Value::Array(queue?);
    Ok(respond_with_etag(StatusCode::OK, body, job.revision))
}

/// The executions waiting in the job's queue (`concurrency: queue`), oldest first:
/// `[{execution_id, scheduled_at, queued_at, trigger, behind}]`.
async fn queued(st: &AppState, name: &str) -> ApiResult<Vec<Value>> {
    let opts = etcd_client::GetOptions::new().with_prefix();
    let resp =
        crate::error::etcd("queue_list", st.client.kv_client().get(st.keys.job_queue_prefix(name), Some(opts))).await?;
    Ok(resp
        .kvs()
        .iter()
        .filter_map(|kv| serde_json::from_slice::<etcron_model::stored::QueuedRun>(kv.value()).ok())
        .map(|q| {
            json!({
                "execution_id": q.execution_id.to_string(),
                "scheduled_at": etcron_model::rfc3339_ms(q.scheduled_ms),
                "queued_at": etcron_model::rfc3339_ms(q.queued_at_ms),
                "trigger": q.trigger,
                "behind": q.behind.map(|b| b.to_string()),
            })
        })
        .collect())
}

pub(super) async fn put_job(
    State(st): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    (caller, request): (Option<axum::Extension<Caller>>, Option<axum::Extension<RequestId>>),
    axum::Extension(scope): axum::Extension<Scope>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    job_name(&name)?;
    let precondition = Precondition { expected: if_match(&headers)?, create_only: if_none_match(&headers)? };
    let spec = JobSpec::from_json(&body_bytes(body)?)?;
    let (client, source) = client_notes(&headers)?;
    let write = Write { job: name.clone(), change: Change::Put(Box::new(spec)), precondition, source };
    let mut origin = origin(caller.as_ref(), request.as_ref(), format!("PUT /api/jobs/{name}"));
    origin.client = client;
    let jobs = st.jobs();
    if let Err(throttled) = jobs.charge(std::slice::from_ref(&write), &scope) {
        return Ok(throttled.into_response());
    }
    let outcome = jobs.apply(vec![write], &origin, &scope).await.outcomes.pop();
    let Some(Written::Saved { created, revision, created_revision, spec, before, pause, unchanged, .. }) =
        outcome.transpose()?
    else {
        return Err(ApiError::internal(&"a save answered otherwise"));
    };
    if unchanged {
        tracing::info!(job = %name, revision, "job saved as it was stored: nothing written");
    } else {
        tracing::info!(job = %name, revision, created, "job saved");
    }
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    // The spec was parsed once, from the body: the answer and the audit entry show it as
    // stored, with the pause the save's transaction read.
    let mut job = view_spec(name, &spec, revision, created_revision, None, pause.as_ref());
    job.warnings = alert_warnings(&st, std::iter::once(Some(&*spec))).await.pop().unwrap_or_default();
    let teams = crate::layers::audit::teams([before.as_deref().and_then(team_of), spec.team.clone()]);
    let detail = if unchanged {
        crate::layers::audit::AuditDetail { teams, detail: Some(json!({ "unchanged": true })), ..Default::default() }
    } else {
        crate::layers::audit::AuditDetail {
            teams,
            before: before.as_deref().and_then(crate::layers::audit::audited),
            after: Some(job.spec.clone()),
            detail: None,
        }
    };
    // `unchanged`: the stored value already was this one, so nothing was written (the revision
    // stays, no version is added to the history).
    let mut body = serde_json::to_value(&job).map_err(|e| ApiError::internal(&e))?;
    body["unchanged"] = json!(unchanged);
    Ok(with_audit(respond_with_etag(status, body, job.revision), detail))
}

pub(super) async fn delete_job(
    State(st): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Response> {
    job_name(&name)?;
    let precondition = Precondition { expected: if_match(&headers)?, create_only: false };
    let write = Write { job: name.clone(), change: Change::Delete, precondition, source: None };
    let outcome = st.jobs().apply(vec![write], &Origin::default(), &scope).await.outcomes.pop();
    let Some(Written::Deleted { before }) = outcome.transpose()? else {
        return Err(ApiError::internal(&"a delete answered otherwise"));
    };
    tracing::info!(job = %name, "job deleted");
    let detail = crate::layers::audit::AuditDetail {
        teams: crate::layers::audit::teams([before.as_deref().and_then(team_of)]),
        before: before.as_deref().and_then(crate::layers::audit::audited),
        ..Default::default()
    };
    Ok(with_audit(StatusCode::NO_CONTENT.into_response(), detail))
}

/// `POST /api/jobs/{job}/run`, in its trace (`run_trace`).
pub(super) async fn run_job(
    State(st): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    axum::Extension(scope): axum::Extension<Scope>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let mut trace = super::run_trace::RunTrace::start(&st.tracer, &headers, &name);
    let answer = request_run(&st, &name, &scope, body, &mut trace).await;
    trace.end(&answer);
    answer
}

/// Writes the run request of `POST /api/jobs/{job}/run`, carrying `trace`'s context.
async fn request_run(
    st: &AppState,
    name: &str,
    scope: &Scope,
    body: Result<Bytes, BytesRejection>,
    trace: &mut super::run_trace::RunTrace,
) -> ApiResult<Response> {
    let (params, priority) = run_body(&body_bytes(body)?)?;
    let reason = format!("manual run via API by {}", scope.caller.name);
    let run = (params.clone(), priority, trace.traceparent());
    let (id, execution_id, team) = st.jobs().request_run_at(name, &reason, run, scope).await?;
    trace.requested(&execution_id.to_string());
    let mut body = json!({ "request_id": id, "execution_id": execution_id.to_string() });
    if !params.is_empty() {
        body["params"] = json!(params);
    }
    if let Some(p) = priority {
        body["priority"] = json!(p);
    }
    let detail = crate::layers::audit::AuditDetail {
        teams: crate::layers::audit::teams([team]),
        detail: Some(body.clone()),
        ..Default::default()
    };
    Ok(with_audit((StatusCode::ACCEPTED, Json(body)).into_response(), detail))
}

#[derive(Debug, Deserialize)]
pub(super) struct KillQuery {
    execution: Option<String>,
}

pub(super) async fn kill_job(
    State(st): State<AppState>,
    Path(name): Path<String>,
    query: Result<Query<KillQuery>, axum::extract::rejection::QueryRejection>,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Response> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(None, e.body_text()))?;
    read_job(&st, &name, &scope).await?;
    let target = match query.execution.as_deref() {
        None | Some("all") => KillTarget::All,
        Some(text) => {
            let id: ExecutionId =
                text.parse().map_err(|e: String| ApiError::bad_request(Some("execution".to_owned()), e))?;
            if id.job != name {
                return Err(ApiError::bad_request(
                    Some("execution".to_owned()),
                    format!("execution {text:?} does not belong to job {name:?}"),
                ));
            }
            KillTarget::Execution(id)
        }
    };
    let running = match &target {
        KillTarget::All => crate::api::stream::running_of_job(&st, &name).await?.len(),
        KillTarget::Execution(id) => usize::from(crate::api::stream::running_marker(&st, id).await?.is_some()),
    };
    let reason = format!("kill via API by {}", scope.caller.name);
    let (revision, team) = st.jobs().kill(&name, &target, &reason, &scope).await?;
    let body = json!({ "job": name, "target": target.to_string(), "revision": revision, "running": running });
    let detail = crate::layers::audit::AuditDetail {
        teams: crate::layers::audit::teams([team]),
        detail: Some(body.clone()),
        ..Default::default()
    };
    Ok(with_audit((StatusCode::ACCEPTED, Json(body)).into_response(), detail))
}

/// The body of `POST /api/jobs/{job}/run`: nothing, or `{"env": {"NAME": "value"},
/// "scheduled_at": "RFC 3339", "priority": 80}` — environment overrides checked as the spec's
/// `env` is, the time the run is "as of" (any instant a schedule may name), and the run's
/// priority (0 to 100) instead of the job's.
pub(super) fn run_body(body: &[u8]) -> ApiResult<(RunParams, Option<u8>)> {
    let shape = "{\"env\": {\"NAME\": \"value\"}, \"scheduled_at\": \"RFC 3339\", \"priority\": 0..100}";
    let Some(fields) = object_body(body, &["env", "scheduled_at", "priority"], shape)? else {
        return Ok((RunParams::default(), None));
    };
    let priority = run_priority(fields.get("priority"))?;
    let env: BTreeMap<String, String> = match fields.get("env") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(ApiError::bad_request(Some(format!("env.{k}")), "env values are strings")),
            })
            .collect::<ApiResult<_>>()?,
        Some(_) => {
            return Err(ApiError::bad_request(Some("env".to_owned()), "env is an object of NAME: value strings"))
        }
    };
    etcron_model::spec::validate_env_overrides("env", &env)?;
    let as_of_ms = instant("scheduled_at", fields.get("scheduled_at"))?;
    if as_of_ms.is_some_and(|ms| !(0..=etcron_model::schedule::MAX_AT_MS).contains(&ms)) {
        return Err(ApiError::bad_request(
            Some("scheduled_at".to_owned()),
            format!("scheduled_at must be between 1970-01-01 and {}", rfc3339_ms(etcron_model::schedule::MAX_AT_MS)),
        ));
    }
    Ok((RunParams { env, as_of_ms, backfill: None, workflow: None }, priority))
}

/// A run's `priority`: an integer from 0 to 100; `None` when absent or null (the job's).
fn run_priority(value: Option<&Value>) -> ApiResult<Option<u8>> {
    let max = etcron_model::spec::MAX_PRIORITY;
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().and_then(|p| u8::try_from(p).ok()).filter(|p| *p <= max).map(Some).ok_or_else(|| {
            ApiError::bad_request(Some("priority".to_owned()), format!("priority must be an integer from 0 to {max}"))
        }),
    }
}

/// The body of `POST /api/jobs/{job}/pause`: nothing, or `{"reason": "...", "until": "RFC 3339"}`.
pub(super) fn pause_body(body: &[u8], now: UnixMs) -> ApiResult<(Option<String>, Option<UnixMs>)> {
    let shape = "{\"reason\": \"...\", \"until\": \"RFC 3339\"}";
    let Some(fields) = object_body(body, &["reason", "until"], shape)? else { return Ok((None, None)) };
    Ok((pause_reason(fields.get("reason"))?, pause_until(fields.get("until"), now)?))
}

fn pause_reason(value: Option<&Value>) -> ApiResult<Option<String>> {
    let reason = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(r)) => r.trim(),
        Some(_) => return Err(ApiError::bad_request(Some("reason".to_owned()), "reason must be a string")),
    };
    let chars = reason.chars().count();
    if chars > MAX_PAUSE_REASON {
        return Err(ApiError::bad_request(
            Some("reason".to_owned()),
            format!("reason is {chars} characters long; at most {MAX_PAUSE_REASON}"),
        ));
    }
    if reason.chars().any(char::is_control) {
        return Err(ApiError::bad_request(Some("reason".to_owned()), "reason may not contain control characters"));
    }
    Ok((!reason.is_empty()).then(|| reason.to_owned()))
}

/// When the pause ends by itself: an RFC 3339 instant after now, at most a year ahead.
fn pause_until(value: Option<&Value>, now: UnixMs) -> ApiResult<Option<UnixMs>> {
    let Some(until) = instant("until", value)? else { return Ok(None) };
    let invalid = |message: String| ApiError::bad_request(Some("until".to_owned()), message);
    let text = rfc3339_ms(until);
    if until <= now {
        return Err(invalid(format!("until ({text}) is not in the future")));
    }
    if until - now > MAX_PAUSE_UNTIL_MS {
        return Err(invalid(format!("until ({text}) is more than {} days ahead", MAX_PAUSE_UNTIL_MS / 86_400_000)));
    }
    Ok(Some(until))
}

/// `POST /api/jobs/{job}/pause`: the pause is kept outside the spec (see `JobStore::pause`).
pub(super) async fn pause_job(
    State(st): State<AppState>,
    Path(name): Path<String>,
    axum::Extension(scope): axum::Extension<Scope>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    job_name(&name)?;
    let (reason, until) = pause_body(&body_bytes(body)?, now_ms())?;
    let Paused { job, pause, previous } = st.jobs().pause(&name, (reason, until), &scope).await?;
    let team = team_of(&job.value);
    let job = view(name, &job.value, job.mod_revision, job.create_revision, None, Some(&pause));
    let detail = crate::layers::audit::AuditDetail {
        teams: crate::layers::audit::teams([team]),
        detail: Some(json!({ "paused": job.paused, "previous": previous.as_ref().map(PauseView::from) })),
        ..Default::default()
    };
    Ok(with_audit(with_etag(StatusCode::OK, &job), detail))
}

/// `POST /api/jobs/{job}/resume` (see `JobStore::resume`).
pub(super) async fn resume_job(
    State(st): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    (caller, request): (Option<axum::Extension<Caller>>, Option<axum::Extension<RequestId>>),
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Response> {
    job_name(&name)?;
    let mut origin = origin(caller.as_ref(), request.as_ref(), format!("POST /api/jobs/{name}/resume"));
    origin.client = client_notes(&headers)?.0;
    let Resumed { job, was_paused, spec_before, unchanged } = st.jobs().resume(&name, &origin, &scope).await?;
    let teams = crate::layers::audit::teams([team_of(&job.value)]);
    let shown = view(name, &job.value, job.mod_revision, job.create_revision, None, None);
    let detail = if unchanged {
        crate::layers::audit::AuditDetail { teams, detail: Some(json!({ "unchanged": true })), ..Default::default() }
    } else {
        crate::layers::audit::AuditDetail {
            teams,
            before: spec_before.as_deref().and_then(crate::layers::audit::audited),
            after: spec_before.as_ref().and_then(|_| crate::layers::audit::audited(&job.value)),
            detail: Some(json!({
                "was_paused": was_paused.as_ref().map(PauseView::from),
                "spec_enabled": spec_before.is_some(),
            })),
        }
    };
    Ok(with_audit(with_etag(StatusCode::OK, &shown), detail))
}
