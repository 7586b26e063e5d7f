//! The HTTP API: `app(state)` builds the router, so tests drive it with `oneshot` and `main`
//! serves it. Handlers validate everything a client sends and answer errors that name the field.
//! The master only writes specs, kill commands and trigger requests; it never runs a job.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use etcd_client::GetOptions;
use etcron_common::job::{validate_name, JobSpec};
use etcron_common::keys::{ExecutionId, Key, KillTarget};
use etcron_common::model::{fires, Pause, Status, TriggerKind, MAX_PAUSE_REASON};
use etcron_common::model::{ExecutionRecord, RunningExecution, WorkerInfo};
use etcron_common::schedule::{format_in, Schedule, ScheduleError, MAX_AT_MS};
use etcron_common::store::{Cursor, Search, StoreError, DEFAULT_LIMIT, MAX_LIMIT};
use etcron_common::{now_ms, rfc3339_ms, UnixMs};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::auth::Caller;
pub use crate::backend::AppState;
use crate::error::ApiError;
use crate::error::{etcd, records, store_error, ApiResult};
use crate::job_store::commands::{stored_pause, Paused, Resumed, StoredJob};
use crate::job_store::{Change, Planned, Precondition, Write, Written};

/// Largest request body the router reads at all; specs are further limited to 64 KiB.
pub use crate::limits::MAX_BODY_BYTES;
/// Upcoming fire times shown with each job.
const NEXT_RUNS: usize = 5;
/// Most fire times a preview returns.
pub const MAX_PREVIEW: usize = 100;
/// Most changes one `POST /api/batch` may carry (the body is also limited to 1 MiB).
pub const MAX_BATCH_CHANGES: usize = 500;

/// Deadline for the best-effort record summaries shown with jobs.
const SUMMARY_TIMEOUT: Duration = Duration::from_secs(2);

pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/api/jobs", get(list_jobs))
        .route("/api/jobs/{job}", get(get_job).put(put_job).delete(delete_job))
        .route("/api/jobs/{job}/run", post(run_job))
        .route("/api/jobs/{job}/kill", post(kill_job))
        .route("/api/jobs/{job}/pause", post(pause_job))
        .route("/api/jobs/{job}/resume", post(resume_job))
        .route("/api/batch", post(batch))
        .route("/api/workers", get(list_workers))
        .route("/api/cluster/storage", get(cluster_storage))
        .route("/api/schedule/preview", get(preview))
        .route("/api/executions", get(search_executions))
        .route("/api/executions/{id}", get(get_execution))
        .route("/api/executions/{id}/stream", get(crate::stream::stream_execution))
        .route("/api/overview", get(overview))
        .route("/api/audit", get(search_audit))
        .route("/api/notifications", get(crate::notification::search))
        .route("/api/auth/whoami", get(whoami))
        .route("/api/auth/tokens", get(list_tokens))
        .route("/api/openapi.json", get(crate::openapi::document))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(crate::metrics::serve))
        .merge(crate::web::routes())
        .route_layer(axum::middleware::from_fn(crate::guard::query_params))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // The auth layer names the caller; the audit layer around it records what was asked and
        // answered, refusals included; the guard checks Host and origin before either.
        .layer(axum::middleware::from_fn_with_state(state.auth.clone(), crate::auth::authorize))
        .layer(axum::middleware::from_fn_with_state(state.audit.clone(), crate::audit::record))
        .layer(axum::middleware::from_fn_with_state(state.guard, crate::guard::check))
        .layer(axum::middleware::from_fn(crate::metrics::track))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}

async fn method_not_allowed(method: axum::http::Method) -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        code: "method_not_allowed",
        message: format!("{method} is not allowed on this route"),
        field: None,
    }
}

fn job_name(name: &str) -> ApiResult<()> {
    validate_name(name).map_err(ApiError::from)
}

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
    /// Live workers whose labels match the job's selector (shown by the GET routes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eligible_workers: Option<usize>,
}

/// A pause as the API shows it; every field is `null` when the stored value does not say
/// (a `{}` written with `etcdctl`, or a value that does not parse).
#[derive(Debug, Serialize)]
pub struct PauseView {
    pub by: Option<String>,
    /// RFC 3339.
    pub at: Option<String>,
    pub reason: Option<String>,
}

impl From<&Pause> for PauseView {
    fn from(p: &Pause) -> Self {
        Self {
            by: p.by.clone(),
            at: p.at_ms.filter(|ms| (0..=MAX_AT_MS).contains(ms)).map(rfc3339_ms),
            reason: p.reason.clone(),
        }
    }
}

/// Live workers whose labels include every entry of `selector`.
fn eligible(workers: &[(String, WorkerInfo)], selector: &BTreeMap<String, String>) -> usize {
    workers.iter().filter(|(_, w)| w.matches(selector)).count()
}

/// A stored job as the API shows it; `workers` (the live ones) fills in `eligible_workers`,
/// `pause` is the job's `{ns}/paused/{job}` if it exists.
fn view(
    name: String,
    value: &[u8],
    revision: i64,
    created_revision: i64,
    workers: Option<&[(String, WorkerInfo)]>,
    pause: Option<&Pause>,
) -> JobView {
    let paused = pause.map(PauseView::from);
    match JobSpec::from_json(value) {
        Ok(spec) => {
            let (description, next_runs) = match spec.parsed_schedule() {
                Ok(s) => {
                    let next = if fires(&spec, pause) {
                        s.upcoming(now_ms(), NEXT_RUNS).into_iter().map(|t| format_in(s.timezone(), t)).collect()
                    } else {
                        Vec::new()
                    };
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
                eligible_workers: workers.map(|w| eligible(w, &spec.selector)),
            }
        }
        Err(e) => JobView {
            name,
            // A value over the size limit is not echoed into every listing.
            spec: if e.too_large {
                Value::Null
            } else {
                crate::audit::redact_raw(serde_json::from_slice(value).unwrap_or(Value::Null))
            },
            revision,
            created_revision,
            schedule_description: String::new(),
            next_runs: Vec::new(),
            paused,
            invalid: Some(e.to_string()),
            eligible_workers: None,
        },
    }
}

/// `resp` with what the audit log should keep about the request.
fn with_audit(mut resp: Response, detail: crate::audit::AuditDetail) -> Response {
    resp.extensions_mut().insert(detail);
    resp
}

fn with_etag(status: StatusCode, body: &JobView) -> Response {
    respond_with_etag(status, body, body.revision)
}

/// `body` as JSON with `ETag: "<revision>"`.
fn respond_with_etag(status: StatusCode, body: impl Serialize, revision: i64) -> Response {
    let mut resp = (status, Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("\"{revision}\"")) {
        resp.headers_mut().insert("etag", v);
    }
    resp
}

/// The registrations under the workers prefix (each lives as long as its worker's session),
/// with the worker id from the key; values that do not parse are left out.
async fn live_workers(st: &AppState) -> ApiResult<Vec<(String, WorkerInfo)>> {
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

/// Every stored job: one range read of the jobs prefix.
async fn all_jobs(st: &AppState) -> ApiResult<etcd_client::GetResponse> {
    let mut kv = st.client.kv_client();
    etcd("list_jobs", kv.get(st.keys.jobs_prefix(), Some(GetOptions::new().with_prefix()))).await
}

/// Every pause (`{ns}/paused/`), by job.
async fn all_pauses(st: &AppState) -> ApiResult<BTreeMap<String, Pause>> {
    let mut kv = st.client.kv_client();
    let resp = etcd("list_paused", kv.get(st.keys.paused_prefix(), Some(GetOptions::new().with_prefix()))).await?;
    Ok(resp
        .kvs()
        .iter()
        .filter_map(|item| match st.keys.parse(item.key()) {
            Some(Key::Paused(job)) => Some((job.clone(), stored_pause(&job, item.value()))),
            _ => None,
        })
        .collect())
}

async fn list_jobs(State(st): State<AppState>) -> ApiResult<Json<Value>> {
    let (resp, workers, pauses) = tokio::try_join!(all_jobs(&st), live_workers(&st), all_pauses(&st))?;
    let summaries = tokio::time::timeout(SUMMARY_TIMEOUT, st.store.summaries(now_ms() - 86_400_000, None)).await;
    let (summaries, records) = match summaries {
        Ok(Ok(s)) => (Some(s), json!({"available": true})),
        Ok(Err(e)) => (None, json!({"available": false, "error": e.to_string()})),
        Err(_) => (None, json!({"available": false, "error": "MongoDB did not answer in time"})),
    };
    let mut jobs = Vec::new();
    for item in resp.kvs() {
        if let Some(Key::Job(name)) = st.keys.parse(item.key()) {
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

async fn fetch_job(st: &AppState, name: &str, workers: Option<&[(String, WorkerInfo)]>) -> ApiResult<JobView> {
    let (item, pause) = read_job(st, name).await?;
    Ok(view(name.to_owned(), &item.value, item.mod_revision, item.create_revision, workers, pause.as_ref()))
}

/// The job and its pause, read at one revision; 404 when the job does not exist.
async fn read_job(st: &AppState, name: &str) -> ApiResult<(StoredJob, Option<Pause>)> {
    st.jobs().read(name).await
}

async fn get_job(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult<Response> {
    job_name(&name)?;
    // The job (etcd) and its summary (MongoDB) are read at the same time: under load the
    // answer waits for the slower of the two, not for both in turn.
    let job = async {
        let workers = live_workers(&st).await?;
        fetch_job(&st, &name, Some(&workers)).await
    };
    let summary = async {
        let mut summary =
            st.store.summaries(now_ms() - 86_400_000, Some(&name)).await?.remove(&name).unwrap_or_default();
        let latest = st.store.search(&Search { job: Some(name.clone()), limit: 1, ..Search::default() }).await?;
        summary.last_execution = latest.executions.first().map(|r| etcron_common::store::LastExecution {
            id: r.id.to_string(),
            status: r.status,
            scheduled_at: r.scheduled_at.clone(),
        });
        Ok::<_, StoreError>(summary)
    };
    let (job, summary) = tokio::join!(job, tokio::time::timeout(SUMMARY_TIMEOUT, summary));
    let job = job?;
    let summary = match summary {
        Ok(Ok(s)) => serde_json::to_value(s).unwrap_or(Value::Null),
        _ => Value::Null,
    };
    let mut body = serde_json::to_value(&job).map_err(|e| ApiError::internal(&e))?;
    body["summary"] = summary;
    Ok(respond_with_etag(StatusCode::OK, body, job.revision))
}

/// `If-Match: <revision>` (quotes allowed); `None` when absent.
fn if_match(headers: &HeaderMap) -> ApiResult<Option<i64>> {
    let Some(value) = headers.get("if-match") else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("").trim().trim_start_matches("W/").trim_matches('"');
    text.parse::<i64>().ok().filter(|r| *r > 0).map(Some).ok_or_else(|| {
        ApiError::bad_request(
            Some("If-Match".to_owned()),
            "If-Match must be a job revision (a positive integer) as returned in `revision`",
        )
    })
}

/// `If-None-Match: *` (create only). Any other value asks for a check this API does not make,
/// so it is refused rather than ignored.
fn if_none_match(headers: &HeaderMap) -> ApiResult<bool> {
    match headers.get("if-none-match").map(|v| v.to_str().map(str::trim)) {
        None => Ok(false),
        Some(Ok("*")) => Ok(true),
        Some(_) => Err(ApiError::bad_request(
            Some("If-None-Match".to_owned()),
            "If-None-Match must be * (create the job only if it does not exist); use If-Match: <revision> to edit",
        )),
    }
}

fn body_bytes(body: Result<Bytes, BytesRejection>) -> ApiResult<Bytes> {
    body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(format!("request body exceeds {MAX_BODY_BYTES} bytes"))
        } else {
            ApiError::bad_request(None, format!("could not read request body: {e}"))
        }
    })
}

async fn put_job(
    State(st): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    job_name(&name)?;
    let precondition = Precondition { expected: if_match(&headers)?, create_only: if_none_match(&headers)? };
    let spec = JobSpec::from_json(&body_bytes(body)?)?;
    let write = Write { job: name.clone(), change: Change::Put(Box::new(spec)), precondition };
    let outcome = st.jobs().apply(vec![write]).await.outcomes.pop();
    let Some(Written::Saved { created, revision, created_revision, value, before }) = outcome.transpose()? else {
        return Err(ApiError::internal(&"a save answered otherwise"));
    };
    tracing::info!(job = %name, revision, created, "job saved");
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    let detail = crate::audit::AuditDetail {
        before: before.as_deref().and_then(crate::audit::audited),
        after: crate::audit::audited(&value),
        detail: None,
    };
    // A save never changes whether the job is paused; the answer shows it as it is.
    let pause = current_pause(&st, &name).await;
    Ok(with_audit(with_etag(status, &view(name, &value, revision, created_revision, None, pause.as_ref())), detail))
}

async fn delete_job(State(st): State<AppState>, Path(name): Path<String>, headers: HeaderMap) -> ApiResult<Response> {
    job_name(&name)?;
    let precondition = Precondition { expected: if_match(&headers)?, create_only: false };
    let write = Write { job: name.clone(), change: Change::Delete, precondition };
    let outcome = st.jobs().apply(vec![write]).await.outcomes.pop();
    let Some(Written::Deleted { before }) = outcome.transpose()? else {
        return Err(ApiError::internal(&"a delete answered otherwise"));
    };
    tracing::info!(job = %name, "job deleted");
    let detail =
        crate::audit::AuditDetail { before: before.as_deref().and_then(crate::audit::audited), ..Default::default() };
    Ok(with_audit(StatusCode::NO_CONTENT.into_response(), detail))
}

/// One change of a `POST /api/batch`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchChange {
    job: String,
    op: BatchOp,
    #[serde(default)]
    spec: Option<Value>,
    #[serde(default)]
    if_match: Option<i64>,
    #[serde(default)]
    if_none_match: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
enum BatchOp {
    Put,
    Delete,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    changes: Vec<Value>,
    /// Answer what each change would do, change nothing.
    #[serde(default)]
    dry_run: bool,
}

/// A change of a batch: its job, its op, and the write, or why the change alone is refused.
type BatchItem = (String, BatchOp, ApiResult<Write>);

/// A batch change as a job write; its own errors (bad spec, bad precondition) name fields
/// relative to the change (`spec.task.command`, `if_match`).
fn batch_write(change: BatchChange) -> BatchItem {
    let BatchChange { job, op, spec, if_match, if_none_match } = change;
    let write = (|| {
        validate_name(&job).map_err(|e| ApiError::bad_request(Some("job".to_owned()), e.message))?;
        let expected = match if_match {
            Some(rev) if rev <= 0 => {
                return Err(ApiError::bad_request(
                    Some("if_match".to_owned()),
                    "if_match must be a job revision (a positive integer)",
                ));
            }
            rev => rev,
        };
        let create_only = match if_none_match.as_deref() {
            None => false,
            Some("*") if op == BatchOp::Put && expected.is_none() => true,
            Some("*") if op == BatchOp::Put => {
                return Err(ApiError::bad_request(
                    Some("if_none_match".to_owned()),
                    "give if_match or if_none_match, not both",
                ));
            }
            Some(_) => {
                return Err(ApiError::bad_request(
                    Some("if_none_match".to_owned()),
                    "if_none_match must be \"*\" (create only), and only on a put",
                ));
            }
        };
        let change = match (op, spec) {
            (BatchOp::Put, Some(spec)) => {
                Change::Put(Box::new(JobSpec::from_value(spec).map_err(|e| in_spec(ApiError::from(e)))?))
            }
            (BatchOp::Put, None) => {
                return Err(ApiError::bad_request(Some("spec".to_owned()), "a put needs the job's spec"))
            }
            (BatchOp::Delete, None) => Change::Delete,
            (BatchOp::Delete, Some(_)) => {
                return Err(ApiError::bad_request(Some("spec".to_owned()), "a delete takes no spec"));
            }
        };
        Ok(Write { job: job.clone(), change, precondition: Precondition { expected, create_only } })
    })();
    (job, op, write)
}

/// An error about a spec as a batch answers it: its field named within the change.
fn in_spec(mut e: ApiError) -> ApiError {
    e.field = Some(e.field.map_or_else(|| "spec".to_owned(), |f| format!("spec.{f}")));
    e
}

/// The changes of a batch body, each job at most once, and whether it is a dry run.
fn batch_changes(body: &[u8]) -> ApiResult<(Vec<BatchItem>, bool)> {
    let body: BatchBody =
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(None, format!("invalid batch: {e}")))?;
    if body.changes.len() > MAX_BATCH_CHANGES {
        return Err(ApiError::bad_request(
            Some("changes".to_owned()),
            format!("{} changes; at most {MAX_BATCH_CHANGES} per request", body.changes.len()),
        ));
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, change) in body.changes.into_iter().enumerate() {
        let change: BatchChange = serde_json::from_value(change)
            .map_err(|e| ApiError::bad_request(Some(format!("changes[{i}]")), e.to_string()))?;
        if let Some(first) = seen.insert(change.job.clone(), i) {
            return Err(ApiError::bad_request(
                Some(format!("changes[{i}].job")),
                format!("job {:?} is already changed by changes[{first}]; one change per job", change.job),
            ));
        }
        out.push(batch_write(change));
    }
    Ok((out, body.dry_run))
}

/// `POST /api/batch`: many job saves and deletes in one request, each with its own
/// precondition, written in as few etcd transactions as they fit in and answered one by one.
async fn batch(State(st): State<AppState>, body: Result<Bytes, BytesRejection>) -> ApiResult<Response> {
    let (changes, dry_run) = batch_changes(&body_bytes(body)?)?;
    let mut results: Vec<Value> = Vec::with_capacity(changes.len());
    let mut writes = Vec::new();
    let mut slots = Vec::new();
    for (job, op, write) in changes {
        match write {
            Ok(w) => {
                slots.push(results.len());
                writes.push(w);
                results.push(Value::Null);
            }
            Err(e) => results.push(batch_result(&job, op, Err(e))),
        }
    }
    let jobs: Vec<(String, BatchOp)> = writes
        .iter()
        .map(|w| (w.job.clone(), if matches!(w.change, Change::Put(_)) { BatchOp::Put } else { BatchOp::Delete }))
        .collect();
    if dry_run {
        let planned = st.jobs().plan(&writes).await;
        for ((slot, (job, op)), plan) in slots.into_iter().zip(jobs).zip(planned) {
            results[slot] = planned_result(&job, op, plan.map_err(|e| batch_error(op, e)));
        }
        return Ok(Json(json!({ "results": results, "transactions": 0, "dry_run": true })).into_response());
    }
    let applied = st.jobs().apply(writes).await;
    let mut audit = Vec::new();
    for ((slot, (job, op)), outcome) in slots.into_iter().zip(jobs).zip(applied.outcomes) {
        if let Ok(w) = &outcome {
            audit.push(crate::audit::JobChange::of(&job, w));
        }
        results[slot] = batch_result(&job, op, outcome.map_err(|e| batch_error(op, e)));
    }
    let changed = audit.len();
    tracing::info!(changes = results.len(), changed, transactions = applied.transactions, "batch applied");
    let body = json!({ "results": results, "transactions": applied.transactions });
    let mut resp = (StatusCode::OK, Json(body)).into_response();
    resp.extensions_mut().insert(crate::audit::BatchAudit(audit));
    Ok(resp)
}

/// The store names a spec's fields as `PUT /api/jobs/{job}` does: in a batch they are in `spec`.
fn batch_error(op: BatchOp, e: ApiError) -> ApiError {
    if op == BatchOp::Put && e.field.is_some() {
        in_spec(e)
    } else {
        e
    }
}

/// One change's answer in a dry run: what it would do (status 200), or why it would fail.
fn planned_result(job: &str, op: BatchOp, plan: Result<Planned, ApiError>) -> Value {
    let outcome = match plan {
        Ok(Planned::Create) => "create",
        Ok(Planned::Update { secrets_changed }) => {
            return json!({ "job": job, "op": op, "status": 200, "outcome": "update", "secrets_changed": secrets_changed });
        }
        Ok(Planned::Unchanged) => "unchanged",
        Ok(Planned::Delete) => "delete",
        Err(e) => return batch_result(job, op, Err(e)),
    };
    json!({ "job": job, "op": op, "status": 200, "outcome": outcome })
}

/// One change's answer: the status its own request would have had, and its revision or error.
fn batch_result(job: &str, op: BatchOp, outcome: Result<Written, ApiError>) -> Value {
    match outcome {
        Ok(Written::Saved { created, revision, created_revision, .. }) => json!({
            "job": job, "op": op, "status": if created { 201 } else { 200 },
            "outcome": if created { "created" } else { "updated" },
            "revision": revision, "created_revision": created_revision,
        }),
        Ok(Written::Deleted { .. }) => json!({ "job": job, "op": op, "status": 204, "outcome": "deleted" }),
        Err(e) => json!({
            "job": job, "op": op, "status": e.status.as_u16(), "outcome": "failed",
            "error": { "code": e.code, "message": e.message, "field": e.field },
        }),
    }
}

/// The caller's name for reasons and logs (`anonymous` without auth).
fn actor(caller: Option<&axum::Extension<Caller>>) -> String {
    caller.map_or_else(|| "anonymous".to_owned(), |c| c.name.clone())
}

async fn run_job(
    State(st): State<AppState>,
    Path(name): Path<String>,
    caller: Option<axum::Extension<Caller>>,
) -> ApiResult<Response> {
    let reason = format!("manual run via API by {}", actor(caller.as_ref()));
    let (id, execution_id) = st.jobs().request_run(&name, &reason).await?;
    let body = json!({ "request_id": id, "execution_id": execution_id.to_string() });
    let detail = crate::audit::AuditDetail { detail: Some(body.clone()), ..Default::default() };
    Ok(with_audit((StatusCode::ACCEPTED, Json(body)).into_response(), detail))
}

#[derive(Debug, Deserialize)]
struct KillQuery {
    execution: Option<String>,
}

async fn kill_job(
    State(st): State<AppState>,
    Path(name): Path<String>,
    query: Result<Query<KillQuery>, axum::extract::rejection::QueryRejection>,
    caller: Option<axum::Extension<Caller>>,
) -> ApiResult<Response> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(None, e.body_text()))?;
    read_job(&st, &name).await?;
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
        KillTarget::All => crate::stream::running_of_job(&st, &name).await?.len(),
        KillTarget::Execution(id) => usize::from(crate::stream::running_marker(&st, id).await?.is_some()),
    };
    let revision = st.jobs().kill(&name, &target, &format!("kill via API by {}", actor(caller.as_ref()))).await?;
    let body = json!({ "job": name, "target": target.to_string(), "revision": revision, "running": running });
    let detail = crate::audit::AuditDetail { detail: Some(body.clone()), ..Default::default() };
    Ok(with_audit((StatusCode::ACCEPTED, Json(body)).into_response(), detail))
}

/// The job's pause as it is now, for the answer to a save; `None` (logged) if etcd does not
/// answer, as the save itself is done.
async fn current_pause(st: &AppState, name: &str) -> Option<Pause> {
    st.jobs().pause_of(name).await.unwrap_or_else(|e| {
        tracing::warn!(job = %name, error = %e.message, "reading the pause for the answer to a save failed");
        None
    })
}

/// The body of `POST /api/jobs/{job}/pause`: nothing, or `{"reason": "..."}`.
fn pause_reason(body: &[u8]) -> ApiResult<Option<String>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let value = etcron_common::json::from_slice_unique(body).map_err(|e| match e {
        etcron_common::json::ParseError::Duplicate { path } => {
            ApiError::bad_request(Some(path.clone()), format!("{path} is given twice"))
        }
        etcron_common::json::ParseError::Syntax(e) => ApiError::bad_request(None, format!("body is not JSON: {e}")),
    })?;
    let Value::Object(fields) = value else {
        return Err(ApiError::bad_request(None, "the body is a JSON object: {\"reason\": \"...\"}, or empty"));
    };
    if let Some(other) = fields.keys().find(|k| *k != "reason") {
        return Err(ApiError::bad_request(
            Some(other.clone()),
            format!("unknown field {other:?}; a pause takes only reason"),
        ));
    }
    let reason = match fields.get("reason") {
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

/// `POST /api/jobs/{job}/pause`: the pause is kept outside the spec (see `JobStore::pause`).
async fn pause_job(
    State(st): State<AppState>,
    Path(name): Path<String>,
    caller: Option<axum::Extension<Caller>>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    job_name(&name)?;
    let reason = pause_reason(&body_bytes(body)?)?;
    let Paused { job, pause, previous } = st.jobs().pause(&name, &actor(caller.as_ref()), reason).await?;
    let job = view(name, &job.value, job.mod_revision, job.create_revision, None, Some(&pause));
    let detail = crate::audit::AuditDetail {
        detail: Some(json!({ "paused": job.paused, "previous": previous.as_ref().map(PauseView::from) })),
        ..Default::default()
    };
    Ok(with_audit(with_etag(StatusCode::OK, &job), detail))
}

/// `POST /api/jobs/{job}/resume` (see `JobStore::resume`).
async fn resume_job(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult<Response> {
    job_name(&name)?;
    let Resumed { job, was_paused, spec_before, unchanged } = st.jobs().resume(&name).await?;
    let shown = view(name, &job.value, job.mod_revision, job.create_revision, None, None);
    let detail = if unchanged {
        crate::audit::AuditDetail { detail: Some(json!({ "unchanged": true })), ..Default::default() }
    } else {
        crate::audit::AuditDetail {
            before: spec_before.as_deref().and_then(crate::audit::audited),
            after: spec_before.as_ref().and_then(|_| crate::audit::audited(&job.value)),
            detail: Some(json!({
                "was_paused": was_paused.as_ref().map(PauseView::from),
                "spec_enabled": spec_before.is_some(),
            })),
        }
    };
    Ok(with_audit(with_etag(StatusCode::OK, &shown), detail))
}

#[derive(Debug, Serialize)]
struct RunningView {
    id: String,
    job: String,
    worker_id: String,
    started_at: String,
    pid: Option<u32>,
    fencing_token: i64,
}

async fn list_workers(State(st): State<AppState>) -> ApiResult<Json<Value>> {
    let running = async {
        let mut kv = st.client.kv_client();
        etcd("list_running", kv.get(st.keys.running_prefix(), Some(GetOptions::new().with_prefix()))).await
    };
    let (workers, running, jobs) = tokio::try_join!(live_workers(&st), running, all_jobs(&st))?;
    let mut by_worker: BTreeMap<String, Vec<RunningView>> = BTreeMap::new();
    for item in running.kvs() {
        let Some(Key::Running(id)) = st.keys.parse(item.key()) else { continue };
        let Some(r) = RunningExecution::from_stored(id.clone(), item.value(), item.create_revision()) else {
            continue;
        };
        by_worker.entry(r.worker_id.clone()).or_default().push(RunningView {
            id: id.to_string(),
            job: id.job.clone(),
            worker_id: r.worker_id,
            started_at: r.started_at,
            pid: r.pid,
            // Written in the claim txn, so the marker's create revision is the fencing token.
            fencing_token: r.fencing_token.unwrap_or_else(|| item.create_revision()),
        });
    }
    // Jobs (valid ones: the others are not scheduled at all) that no live worker may run.
    let mut unmatched = Vec::new();
    for item in jobs.kvs() {
        let (Some(Key::Job(name)), Ok(spec)) = (st.keys.parse(item.key()), JobSpec::from_json(item.value())) else {
            continue;
        };
        if eligible(&workers, &spec.selector) == 0 {
            unmatched.push(json!({ "job": name, "selector": spec.selector }));
        }
    }
    let mut out = Vec::new();
    for (id, info) in workers {
        let mut value = serde_json::to_value(&info).map_err(|e| ApiError::internal(&e))?;
        // The live output token is for masters only.
        if let Some(fields) = value.as_object_mut() {
            fields.remove("output_token");
        }
        value["running_executions"] =
            serde_json::to_value(by_worker.remove(&id).unwrap_or_default()).unwrap_or(Value::Null);
        out.push(value);
    }
    Ok(Json(json!({ "workers": out, "unmatched_jobs": unmatched })))
}

#[derive(Debug, Deserialize)]
struct PreviewQuery {
    schedule: Option<String>,
    timezone: Option<String>,
    count: Option<String>,
    after: Option<String>,
}

async fn preview(
    query: Result<Query<PreviewQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Value>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(None, e.body_text()))?;
    let schedule =
        q.schedule.ok_or_else(|| ApiError::bad_request(Some("schedule".to_owned()), "schedule is required"))?;
    let timezone = q.timezone.unwrap_or_else(|| "UTC".to_owned());
    let count = match q.count {
        None => 10,
        Some(c) => c.parse::<usize>().ok().filter(|n| (1..=MAX_PREVIEW).contains(n)).ok_or_else(|| {
            ApiError::bad_request(
                Some("count".to_owned()),
                format!("count must be an integer between 1 and {MAX_PREVIEW}"),
            )
        })?,
    };
    let after = match q.after {
        None => now_ms(),
        Some(a) => preview_after(&a)?,
    };
    let parsed = Schedule::parse(&schedule, &timezone).map_err(|e| match e {
        ScheduleError::Timezone(_) => ApiError::bad_request(Some("timezone".to_owned()), e.to_string()),
        ScheduleError::Expression(_) => ApiError::bad_request(Some("schedule".to_owned()), e.to_string()),
    })?;
    parsed.fires_after(after).map_err(|e| ApiError::bad_request(Some("schedule".to_owned()), e.to_string()))?;
    let next_ms = parsed.upcoming(after, count);
    let next: Vec<String> = next_ms.iter().map(|t| format_in(parsed.timezone(), *t)).collect();
    Ok(Json(
        json!({ "schedule": schedule, "timezone": timezone, "description": parsed.describe(), "next": next, "next_ms": next_ms }),
    ))
}

/// The `after` of a preview: an RFC 3339 instant from the Unix epoch to the latest `@at`.
fn preview_after(text: &str) -> ApiResult<UnixMs> {
    let invalid = |why: String| {
        ApiError::bad_request(
            Some("after".to_owned()),
            format!(
                "after must be an RFC 3339 instant from 1970-01-01T00:00:00Z to {}, such as 2026-03-08T00:00:00Z ({why})",
                rfc3339_ms(MAX_AT_MS)
            ),
        )
    };
    let at = chrono::DateTime::parse_from_rfc3339(text.trim()).map_err(|e| invalid(e.to_string()))?;
    let ms = at.timestamp_millis();
    if !(0..=MAX_AT_MS).contains(&ms) {
        return Err(invalid(format!("{text} is out of range")));
    }
    Ok(ms)
}

async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

async fn readyz(State(st): State<AppState>) -> (StatusCode, Json<Value>) {
    let mut kv = st.client.kv_client();
    let probe = kv.get(st.keys.jobs_prefix(), Some(GetOptions::new().with_prefix().with_count_only()));
    let etcd = match tokio::time::timeout(Duration::from_secs(2), probe).await {
        Ok(Ok(_)) => json!({ "ok": true }),
        Ok(Err(e)) => json!({ "ok": false, "error": e.to_string() }),
        Err(_) => json!({ "ok": false, "error": "timed out" }),
    };
    let mongodb = match tokio::time::timeout(Duration::from_secs(4), st.store.ping()).await {
        Ok(Ok(())) => json!({ "ok": true }),
        Ok(Err(e)) => json!({ "ok": false, "error": e.to_string() }),
        Err(_) => json!({ "ok": false, "error": "timed out" }),
    };
    let ready = etcd["ok"] == true && mongodb["ok"] == true;
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    // A storage warning does not make the master unready: it is a warning.
    let storage = st.storage.current();
    (status, Json(json!({ "ready": ready, "etcd": etcd, "mongodb": mongodb, "etcd_storage": storage })))
}

/// `GET /api/cluster/storage`: etcd's database size, quota, alarms and the warning, as the
/// master last polled them (`etcd_storage`).
async fn cluster_storage(State(st): State<AppState>) -> ApiResult<Json<crate::etcd_storage::Storage>> {
    st.storage
        .current()
        .map(Json)
        .ok_or_else(|| ApiError::etcd_unavailable(&"etcd's status has not been read yet (it is polled every 10 s)"))
}

/// Parameters `GET /api/executions` accepts.
const SEARCH_PARAMS: [&str; 9] = ["job", "status", "worker", "trigger", "since", "until", "q", "limit", "cursor"];

fn parse_time(param: &str, value: &str) -> ApiResult<i64> {
    chrono::DateTime::parse_from_rfc3339(value).map(|t| t.timestamp_millis()).map_err(|e| {
        ApiError::bad_request(
            Some(param.to_owned()),
            format!("{param} must be an RFC 3339 time such as 2026-11-22T03:00:00Z ({e})"),
        )
    })
}

/// Parses the query of `GET /api/executions`; every bad value is a 400 naming the parameter.
pub fn parse_search(query: &str) -> ApiResult<Search> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query)
        .map_err(|e| ApiError::bad_request(None, format!("malformed query string: {e}")))?;
    let mut s = Search { limit: DEFAULT_LIMIT, ..Search::default() };
    for (key, value) in pairs {
        let field = Some(key.clone());
        match key.as_str() {
            "job" => {
                validate_name(&value).map_err(|e| ApiError::bad_request(field, e.message))?;
                s.job = Some(value);
            }
            "status" => {
                for part in value.split(',').filter(|p| !p.is_empty()) {
                    let status: Status = serde_json::from_value(Value::String(part.to_owned())).map_err(|_| {
                        ApiError::bad_request(field.clone(), format!("unknown status {part:?}; one of running, succeeded, failed, timed_out, killed, lost, skipped, missed"))
                    })?;
                    s.statuses.push(status);
                }
            }
            "worker" => {
                etcron_common::keys::validate_id(&value).map_err(|e| ApiError::bad_request(field, e))?;
                s.worker = Some(value);
            }
            "trigger" => {
                let trigger: TriggerKind = serde_json::from_value(Value::String(value.clone())).map_err(|_| {
                    ApiError::bad_request(
                        field,
                        format!(
                            "unknown trigger {value:?}; one of schedule, manual, retry, dependency, catchup, failover"
                        ),
                    )
                })?;
                s.trigger = Some(trigger);
            }
            "since" => s.since_ms = Some(parse_time("since", &value)?),
            "until" => s.until_ms = Some(parse_time("until", &value)?),
            "q" => {
                if value.len() > 256 {
                    return Err(ApiError::bad_request(field, "q is longer than 256 characters"));
                }
                if etcron_common::store::words(&value).is_empty() && !value.trim().is_empty() {
                    return Err(ApiError::bad_request(
                        field,
                        "q needs at least one word of 2 or more letters or digits",
                    ));
                }
                s.q = Some(value);
            }
            "limit" => {
                s.limit = value.parse::<i64>().ok().filter(|n| (1..=MAX_LIMIT).contains(n)).ok_or_else(|| {
                    ApiError::bad_request(field, format!("limit must be an integer between 1 and {MAX_LIMIT}"))
                })?;
            }
            "cursor" => s.cursor = Some(Cursor::decode(&value).map_err(store_error)?),
            other => {
                return Err(ApiError::bad_request(
                    Some(other.to_owned()),
                    format!("unknown parameter {other:?}; known: {}", SEARCH_PARAMS.join(", ")),
                ))
            }
        }
    }
    if let (Some(a), Some(b)) = (s.since_ms, s.until_ms) {
        if a > b {
            return Err(ApiError::bad_request(Some("since".to_owned()), "since is after until"));
        }
    }
    Ok(s)
}

async fn search_executions(
    State(st): State<AppState>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> ApiResult<Json<Value>> {
    let search = parse_search(query.as_deref().unwrap_or(""))?;
    let page = records(st.store.search(&search)).await?;
    Ok(Json(
        json!({ "executions": listed(&page.executions), "next_cursor": page.next_cursor, "partial": page.partial }),
    ))
}

/// Records as lists show them: without the output (it can be large; `GET /api/executions/{id}`
/// has it).
fn listed(records: &[etcron_common::model::ExecutionRecord]) -> Vec<Value> {
    records
        .iter()
        .map(|r| {
            let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
            if let Some(obj) = v.as_object_mut() {
                obj.remove("output");
            }
            v
        })
        .collect()
}

async fn get_execution(State(st): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let parsed: ExecutionId = id.parse().map_err(|e: String| ApiError::bad_request(Some("id".to_owned()), e))?;
    let record = match records(st.store.get(&parsed.to_string())).await? {
        Some(record) => record,
        // A run's own `running` record is written once it has lasted a second; before that,
        // its running marker in etcd says what it is.
        None => match crate::stream::running_marker(&st, &parsed).await? {
            Some(marker) => ExecutionRecord::from_marker(&marker),
            None => return Err(ApiError::not_found(format!("execution {id:?} has no record"))),
        },
    };
    Ok(Json(serde_json::to_value(record).map_err(|e| ApiError::internal(&e))?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OverviewQuery {
    window: Option<String>,
    job: Option<String>,
}

/// Records shown in each list of the overview.
const OVERVIEW_LIST: i64 = 10;

/// Activity for the console's overview and job pages: executions by status in time buckets over
/// the last hour (1-minute buckets) or day (15-minute buckets), every bucket present (zeros
/// included), with the latest failures and missed ticks.
async fn overview(
    State(st): State<AppState>,
    query: Result<Query<OverviewQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Value>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(None, e.body_text()))?;
    let window = q.window.unwrap_or_else(|| "1h".to_owned());
    let (span_ms, bucket_ms): (i64, i64) = match window.as_str() {
        "1h" => (3_600_000, 60_000),
        "24h" => (86_400_000, 900_000),
        other => {
            return Err(ApiError::bad_request(
                Some("window".to_owned()),
                format!("window must be 1h or 24h, not {other:?}"),
            ))
        }
    };
    if let Some(job) = &q.job {
        validate_name(job).map_err(|e| ApiError::bad_request(Some("job".to_owned()), e.message))?;
    }
    // Whole buckets: the current (partial) one is the last.
    let until_ms = (now_ms() / bucket_ms + 1) * bucket_ms;
    let since_ms = until_ms - span_ms;
    let job = q.job.as_deref();
    let failures = Search {
        job: q.job.clone(),
        statuses: vec![Status::Failed, Status::TimedOut, Status::Lost],
        since_ms: Some(since_ms),
        limit: OVERVIEW_LIST,
        ..Search::default()
    };
    let missed = Search { statuses: vec![Status::Missed], ..failures.clone() };
    let (activity, failures, missed) = tokio::try_join!(
        st.store.activity(since_ms, until_ms, bucket_ms, job),
        st.store.search(&failures),
        st.store.search(&missed)
    )
    .map_err(store_error)?;
    let mut totals: BTreeMap<Status, u64> = BTreeMap::new();
    let mut by_start: BTreeMap<i64, &BTreeMap<Status, u64>> = BTreeMap::new();
    for b in &activity {
        for (status, n) in &b.counts {
            *totals.entry(*status).or_default() += n;
        }
        by_start.insert(b.start_ms, &b.counts);
    }
    let empty = BTreeMap::new();
    let buckets: Vec<Value> = (0..span_ms / bucket_ms)
        .map(|i| {
            let start = since_ms + i * bucket_ms;
            json!({ "start": rfc3339_ms(start), "start_ms": start, "counts": by_start.get(&start).copied().unwrap_or(&empty) })
        })
        .collect();
    Ok(Json(json!({
        "window": window,
        "job": q.job,
        "since": rfc3339_ms(since_ms),
        "until": rfc3339_ms(until_ms),
        "bucket_ms": bucket_ms,
        "buckets": buckets,
        "totals": totals,
        "recent_failures": listed(&failures.executions),
        "recent_missed": listed(&missed.executions),
    })))
}

/// Parameters `GET /api/audit` accepts.
const AUDIT_PARAMS: [&str; 7] = ["job", "actor", "action", "since", "until", "limit", "cursor"];

/// Parses the query of `GET /api/audit`; every bad value is a 400 naming the parameter.
pub fn parse_audit_search(query: &str) -> ApiResult<crate::audit::AuditSearch> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query)
        .map_err(|e| ApiError::bad_request(None, format!("malformed query string: {e}")))?;
    let mut s = crate::audit::AuditSearch { limit: DEFAULT_LIMIT, ..Default::default() };
    for (key, value) in pairs {
        let field = Some(key.clone());
        match key.as_str() {
            "job" => {
                validate_name(&value).map_err(|e| ApiError::bad_request(field, e.message))?;
                s.job = Some(value);
            }
            "actor" | "action" => {
                if value.is_empty() || value.len() > 128 {
                    return Err(ApiError::bad_request(field, format!("{key} must be 1 to 128 characters")));
                }
                if key == "actor" {
                    s.actor = Some(value);
                } else {
                    s.action = Some(value);
                }
            }
            "since" => s.since_ms = Some(parse_time("since", &value)?),
            "until" => s.until_ms = Some(parse_time("until", &value)?),
            "limit" => {
                s.limit = value.parse::<i64>().ok().filter(|n| (1..=crate::audit::MAX_LIMIT).contains(n)).ok_or_else(
                    || {
                        ApiError::bad_request(
                            field,
                            format!("limit must be an integer between 1 and {}", crate::audit::MAX_LIMIT),
                        )
                    },
                )?;
            }
            "cursor" => s.cursor = Some(Cursor::decode(&value).map_err(store_error)?),
            other => {
                return Err(ApiError::bad_request(
                    Some(other.to_owned()),
                    format!("unknown parameter {other:?}; known: {}", AUDIT_PARAMS.join(", ")),
                ))
            }
        }
    }
    Ok(s)
}

async fn search_audit(
    State(st): State<AppState>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> ApiResult<Json<Value>> {
    let search = parse_audit_search(query.as_deref().unwrap_or(""))?;
    let (entries, next) = records(crate::audit::search(&st.store, &search)).await?;
    Ok(Json(json!({ "entries": entries, "next_cursor": next })))
}

/// Who the token is: its name and role (`anonymous`/admin without auth).
async fn whoami(caller: Option<axum::Extension<Caller>>) -> Json<Value> {
    match caller {
        Some(axum::Extension(c)) => Json(json!({ "name": c.name, "role": c.role })),
        None => Json(json!({ "name": "anonymous", "role": "admin" })),
    }
}

/// The configured tokens: names and roles, never hashes (admin only).
async fn list_tokens(State(st): State<AppState>) -> Json<Value> {
    Json(json!({ "tokens": st.auth.list(), "enabled": st.auth.enabled() }))
}
