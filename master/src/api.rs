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
use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use etcron_common::dependency::DependencyGraph;
use etcron_common::job::{validate_name, JobSpec};
use etcron_common::keys::{ExecutionId, Key, Keys, KillTarget};
use etcron_common::model::{ExecutionRecord, JobState, KillCommand, RunningExecution, TriggerRequest, WorkerInfo};
use etcron_common::model::{Status, TriggerKind};
use etcron_common::schedule::{format_in, Schedule, ScheduleError, MAX_AT_MS};
use etcron_common::store::{Cursor, MongoStore, Search, StoreError, DEFAULT_LIMIT, MAX_LIMIT};
use etcron_common::{now_ms, rfc3339_ms, UnixMs};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::error::ApiError;

/// Lease of kill commands and trigger requests: long enough for a reconnecting worker.
pub const COMMAND_LEASE: Duration = Duration::from_secs(60);
/// Largest request body the router reads at all; specs are further limited to 64 KiB.
pub use crate::limits::MAX_BODY_BYTES;
/// Upcoming fire times shown with each job.
const NEXT_RUNS: usize = 5;
/// Most fire times a preview returns.
pub const MAX_PREVIEW: usize = 100;
/// Retries of read-modify-write updates (pause/resume) under contention.
const RMW_ATTEMPTS: usize = 5;
/// Times a PUT with dependencies re-reads the jobs and re-checks for a cycle when other jobs
/// were saved between its read and its write.
const DEPENDENCY_CHECK_ATTEMPTS: u64 = 5;

#[derive(Clone)]
pub struct AppState {
    pub client: Client,
    pub keys: Keys,
    pub store: MongoStore,
    pub auth: crate::auth::Auth,
    pub audit: crate::audit::AuditLog,
    pub guard: crate::guard::Guard,
    /// etcd's database size as last polled.
    pub storage: crate::etcd_storage::StorageWatch,
}

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

pub(crate) type ApiResult<T> = Result<T, ApiError>;

pub(crate) async fn etcd<T, F>(op: &'static str, fut: F) -> ApiResult<T>
where
    F: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    match etcron_common::etcd::request(op, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) if etcron_common::etcd::is_nospace(&e) => Err(ApiError::etcd_nospace(&e)),
        Ok(Err(e)) => Err(ApiError::etcd_unavailable(&e)),
        Err(_) => Err(ApiError::etcd_unavailable(&"request timed out")),
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
    /// Next fire times (RFC 3339 in the job's timezone); empty when paused or finished.
    pub next_runs: Vec<String>,
    /// Set when the stored value is not a valid spec (written around the API).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
    /// Live workers whose labels match the job's selector (shown by the GET routes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eligible_workers: Option<usize>,
}

/// Live workers whose labels include every entry of `selector`.
fn eligible(workers: &[(String, WorkerInfo)], selector: &BTreeMap<String, String>) -> usize {
    workers.iter().filter(|(_, w)| w.matches(selector)).count()
}

/// A stored job as the API shows it; `workers` (the live ones) fills in `eligible_workers`.
fn view(
    name: String,
    value: &[u8],
    revision: i64,
    created_revision: i64,
    workers: Option<&[(String, WorkerInfo)]>,
) -> JobView {
    match JobSpec::from_json(value) {
        Ok(spec) => {
            let (description, next_runs) = match spec.parsed_schedule() {
                Ok(s) => {
                    let next = if spec.enabled {
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

async fn list_jobs(State(st): State<AppState>) -> ApiResult<Json<Value>> {
    let (resp, workers) = tokio::try_join!(all_jobs(&st), live_workers(&st))?;
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
            let job = view(name, item.value(), item.mod_revision(), item.create_revision(), Some(&workers));
            let mut v = serde_json::to_value(job).map_err(|e| ApiError::internal(&e))?;
            v["summary"] = serde_json::to_value(summary).unwrap_or(Value::Null);
            jobs.push(v);
        }
    }
    Ok(Json(json!({ "jobs": jobs, "records": records })))
}

async fn fetch_job(st: &AppState, name: &str, workers: Option<&[(String, WorkerInfo)]>) -> ApiResult<JobView> {
    job_name(name)?;
    let mut kv = st.client.kv_client();
    let resp = etcd("get_job", kv.get(st.keys.job(name), None)).await?;
    let item = resp.kvs().first().ok_or_else(|| ApiError::not_found(format!("job {name:?} does not exist")))?;
    Ok(view(name.to_owned(), item.value(), item.mod_revision(), item.create_revision(), workers))
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

/// An enabled job must have a fire time ahead: a past `@at` or a year field wholly in the past
/// is refused. (A disabled one may keep its spent schedule: workers disable an `@at` job after
/// its run, and such a job may be saved back as exported.)
fn fires_again(spec: &JobSpec) -> ApiResult<()> {
    if !spec.enabled {
        return Ok(());
    }
    spec.parsed_schedule()
        .and_then(|s| s.fires_after(now_ms()))
        .map(drop)
        .map_err(|e| ApiError::bad_request(Some("schedule".to_owned()), e.to_string()))
}

async fn put_job(
    State(st): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    job_name(&name)?;
    let expected = if_match(&headers)?;
    let create_only = if_none_match(&headers)?;
    let body = body_bytes(body)?;
    let mut spec = JobSpec::from_json(&body)?;
    fires_again(&spec)?;
    let mut expected = expected;
    if spec.withholds_secrets() {
        // `null` secrets keep the stored values: fill them from the job as read, and save only
        // over that revision.
        let mut kv = st.client.kv_client();
        let resp = etcd("get_job", kv.get(st.keys.job(&name), None)).await?;
        let stored = resp.kvs().first();
        let stored_spec = stored.and_then(|kv| JobSpec::from_json(kv.value()).ok());
        spec.keep_secrets(stored_spec.as_ref()).map_err(|e| ApiError::bad_request(Some(e.field), e.why))?;
        if let (None, Some(kv)) = (expected, stored) {
            expected = Some(kv.mod_revision());
        }
    }
    let value = serde_json::to_vec(&spec).map_err(|e| ApiError::internal(&e))?;
    // What is stored is checked, not only what was sent: defaults and kept secrets add bytes,
    // and a stored spec over the limit would be refused by every worker.
    if value.len() > etcron_common::job::MAX_SPEC_BYTES {
        return Err(ApiError::too_large(format!(
            "the job spec as stored (with defaults and kept secrets filled in) is {} bytes; the limit is {}",
            value.len(),
            etcron_common::job::MAX_SPEC_BYTES
        )));
    }
    let precondition = Precondition { expected, create_only };
    let resp = if spec.on_success.is_empty() && spec.on_failure.is_empty() {
        // A job that starts no other job cannot close a cycle: one txn, as for any edit.
        match save_job(&st, &name, &value, precondition, None).await? {
            Saved::Committed(resp) => resp,
            Saved::Refused(e) => return Err(e),
            Saved::JobsChanged => {
                return Err(ApiError::conflict(format!("job {name:?} changed concurrently; retry")));
            }
        }
    } else {
        save_job_checked(&st, &name, &spec, &value, precondition).await?
    };
    let revision = resp.header().map_or(0, |h| h.revision());
    let previous = resp.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Put(p) => p.prev_key().map(|kv| (kv.create_revision(), crate::audit::audited(kv.value()))),
        _ => None,
    });
    let (status, created_revision, before) = match previous {
        Some((created, before)) => (StatusCode::OK, created, before),
        None => (StatusCode::CREATED, revision, None),
    };
    tracing::info!(job = %name, revision, created = status == StatusCode::CREATED, "job saved");
    let detail = crate::audit::AuditDetail { before, after: crate::audit::audited(&value), detail: None };
    Ok(with_audit(with_etag(status, &view(name, &value, revision, created_revision, None)), detail))
}

/// The client's preconditions on a PUT: `If-Match: <revision>` or `If-None-Match: *`.
#[derive(Debug, Clone, Copy)]
struct Precondition {
    expected: Option<i64>,
    create_only: bool,
}

/// How a PUT's transaction ended.
enum Saved {
    Committed(TxnResponse),
    /// The client's precondition failed: the answer to give.
    Refused(ApiError),
    /// A job was saved or replaced after the revision the dependency check read.
    JobsChanged,
}

/// Writes a job in one txn. `checked_at`: the revision of the jobs the dependency check read;
/// the write then applies only if no job changed since.
async fn save_job(
    st: &AppState,
    name: &str,
    value: &[u8],
    precondition: Precondition,
    checked_at: Option<i64>,
) -> ApiResult<Saved> {
    let key = st.keys.job(name);
    let state_key = st.keys.state(name);
    let Precondition { expected, create_only } = precondition;
    let mut compares = match (expected, create_only) {
        // Optimistic concurrency: the edit applies only to the revision the client read.
        (Some(rev), _) => vec![Compare::mod_revision(key.clone(), CompareOp::Equal, rev)],
        (None, true) => vec![Compare::create_revision(key.clone(), CompareOp::Equal, 0)],
        (None, false) => Vec::new(),
    };
    if let Some(rev) = checked_at {
        // No key under the jobs prefix was written after the graph the check saw; otherwise two
        // saves checked at the same time could close a cycle together (a → b, b → a). Deletes
        // pass: they only remove edges.
        compares.push(Compare::mod_revision(st.keys.jobs_prefix(), CompareOp::Less, rev + 1).with_prefix());
    }
    // A new job's catch-up state starts now, so workers never catch up on ticks from before the
    // job existed. Only when the job does not exist yet and no state is stored: a replace, or a
    // state left by someone else, keeps its value. Placed before the put so that its compare
    // sees the job as it was before this txn.
    let init_state = Txn::new()
        .when([
            Compare::create_revision(key.clone(), CompareOp::Equal, 0),
            Compare::version(state_key.clone(), CompareOp::Equal, 0),
        ])
        .and_then([TxnOp::put(state_key, JobState { last_tick_ms: now_ms() }.to_bytes(), None)]);
    let txn = Txn::new()
        .when(compares)
        .and_then([TxnOp::txn(init_state), TxnOp::put(key.clone(), value, Some(PutOptions::new().with_prev_key()))])
        // The job as it is now tells a failed precondition from a changed jobs prefix.
        .or_else([TxnOp::get(key, None)]);
    let mut kv = st.client.kv_client();
    let resp = etcd("txn", kv.txn(txn)).await?;
    if resp.succeeded() {
        return Ok(Saved::Committed(resp));
    }
    let current = resp.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.mod_revision()),
        _ => None,
    });
    let refused = match (current, expected) {
        (Some(rev), Some(want)) if rev != want => Some(format!(
            "job {name:?} was changed by someone else: it is at revision {rev}, your edit was based on \
             revision {want}; reload and re-apply your change"
        )),
        (None, Some(_)) => Some(format!("job {name:?} was deleted by someone else; reload before saving")),
        (Some(_), None) if create_only => Some(format!("job {name:?} already exists (If-None-Match: *)")),
        _ => None,
    };
    Ok(match refused {
        Some(message) => Saved::Refused(ApiError::conflict(message)),
        None => Saved::JobsChanged,
    })
}

/// Saves a job that starts other jobs, refusing a dependency cycle through it. The check reads
/// every job at one revision and the write commits only if no job changed since; when one did,
/// it reads and checks again, a few times.
async fn save_job_checked(
    st: &AppState,
    name: &str,
    spec: &JobSpec,
    value: &[u8],
    precondition: Precondition,
) -> ApiResult<TxnResponse> {
    // A job naming itself needs no etcd read to be refused.
    refuse_cycle(name, spec, DependencyGraph::new())?;
    for attempt in 1..=DEPENDENCY_CHECK_ATTEMPTS {
        let jobs = all_jobs(st).await?;
        let read_at = jobs.header().map(|h| h.revision()).ok_or_else(|| ApiError::internal(&"range without header"))?;
        let mut graph = DependencyGraph::new();
        for item in jobs.kvs() {
            if let Some(Key::Job(job)) = st.keys.parse(item.key()) {
                let edges: StoredEdges = serde_json::from_slice(item.value()).unwrap_or_default();
                graph.set(&job, edges.on_success.into_iter().chain(edges.on_failure));
            }
        }
        refuse_cycle(name, spec, graph)?;
        match save_job(st, name, value, precondition, Some(read_at)).await? {
            Saved::Committed(resp) => return Ok(resp),
            Saved::Refused(e) => return Err(e),
            Saved::JobsChanged => {
                tracing::info!(
                    job = %name,
                    attempt,
                    read_revision = read_at,
                    "jobs changed during the dependency check; checking again"
                );
            }
        }
        if attempt < DEPENDENCY_CHECK_ATTEMPTS {
            // Jitter, so that saves which keep colliding stop doing so.
            tokio::time::sleep(Duration::from_millis(rand::random_range(5..=25) * attempt)).await;
        }
    }
    Err(ApiError::conflict(format!(
        "other jobs were saved while the dependencies of job {name:?} were being checked for cycles, \
         {DEPENDENCY_CHECK_ATTEMPTS} times in a row; nothing was saved, retry"
    )))
}

/// The dependency edges of a stored job. Read on their own, without validating the rest, so the
/// check is cheap and a stored value that is otherwise invalid still counts its edges.
#[derive(Debug, Default, Deserialize)]
struct StoredEdges {
    #[serde(default)]
    on_success: Vec<String>,
    #[serde(default)]
    on_failure: Vec<String>,
}

/// 400 `dependency_cycle` when `graph`, with `name`'s edges replaced by the spec's, has a cycle
/// through `name`; the field is the entry of the spec's list the cycle leaves by.
fn refuse_cycle(name: &str, spec: &JobSpec, mut graph: DependencyGraph) -> ApiResult<()> {
    graph.set(name, spec.on_success.iter().chain(&spec.on_failure).map(String::as_str));
    let Some(cycle) = graph.cycle_through(name) else {
        return Ok(());
    };
    let step = cycle.first_step().unwrap_or(name);
    let field = [("on_success", &spec.on_success), ("on_failure", &spec.on_failure)]
        .into_iter()
        .find_map(|(list, jobs)| jobs.iter().position(|j| j == step).map(|i| format!("{list}[{i}]")));
    Err(ApiError::dependency_cycle(field, format!("dependency cycle: {cycle}")))
}

async fn delete_job(State(st): State<AppState>, Path(name): Path<String>, headers: HeaderMap) -> ApiResult<Response> {
    job_name(&name)?;
    let expected = if_match(&headers)?;
    let key = st.keys.job(&name);
    let compare = match expected {
        Some(rev) => Compare::mod_revision(key.clone(), CompareOp::Equal, rev),
        None => Compare::create_revision(key.clone(), CompareOp::Greater, 0),
    };
    let txn = Txn::new()
        .when([compare])
        .and_then([
            // The spec as it was, for the audit log.
            TxnOp::get(key.clone(), None),
            TxnOp::delete(key.clone(), None),
            // The catch-up state belongs to the job and goes with it.
            TxnOp::delete(st.keys.state(&name), None),
            // So is the health that `recovery` notifications read.
            TxnOp::delete(st.keys.health(&name), None),
            // Pending run requests (manual runs, retries, dependency runs, catch-up) must not
            // start the job, or a job of the same name created later, after the delete.
            TxnOp::delete(st.keys.job_trigger_prefix(&name), Some(DeleteOptions::new().with_prefix())),
            // Claims, running markers and the lock stay: they belong to executions still running
            // under worker leases, and expire with them.
        ])
        .or_else([TxnOp::get(key.clone(), None)]);
    let mut kv = st.client.kv_client();
    let resp = etcd("txn", kv.txn(txn)).await?;
    if resp.succeeded() {
        tracing::info!(job = %name, "job deleted");
        let before = resp.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(g) => g.kvs().first().and_then(|kv| crate::audit::audited(kv.value())),
            _ => None,
        });
        let detail = crate::audit::AuditDetail { before, ..Default::default() };
        return Ok(with_audit(StatusCode::NO_CONTENT.into_response(), detail));
    }
    let exists = resp.op_responses().into_iter().any(|op| matches!(op, TxnOpResponse::Get(g) if !g.kvs().is_empty()));
    if exists {
        Err(ApiError::conflict(format!("job {name:?} was changed by someone else; reload before deleting")))
    } else {
        Err(ApiError::not_found(format!("job {name:?} does not exist")))
    }
}

fn request_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

async fn grant_command_lease(st: &AppState) -> ApiResult<i64> {
    let mut leases = st.client.lease_client();
    let ttl = i64::try_from(COMMAND_LEASE.as_secs()).unwrap_or(60);
    Ok(etcd("lease_grant", leases.grant(ttl, None)).await?.id())
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
    fetch_job(&st, &name, None).await?;
    let id = request_id();
    let now = now_ms();
    let request = TriggerRequest::manual(now, &format!("manual run via API by {}", actor(caller.as_ref())));
    let lease = grant_command_lease(&st).await?;
    let value = serde_json::to_vec(&request).map_err(|e| ApiError::internal(&e))?;
    let mut kv = st.client.kv_client();
    etcd("put_trigger", kv.put(st.keys.trigger(&name, &id), value, Some(PutOptions::new().with_lease(lease)))).await?;
    let execution_id = request.execution(&name, &id);
    tracing::info!(job = %name, request_id = %id, "manual run requested");
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
    fetch_job(&st, &name, None).await?;
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
    let lease = grant_command_lease(&st).await?;
    let command = KillCommand {
        requested_at: rfc3339_ms(now_ms()),
        reason: format!("kill via API by {}", actor(caller.as_ref())),
    };
    let value = serde_json::to_vec(&command).map_err(|e| ApiError::internal(&e))?;
    let mut kv = st.client.kv_client();
    let resp = etcd("put_kill", kv.put(st.keys.kill(&name, &target), value, Some(PutOptions::new().with_lease(lease))))
        .await?;
    let revision = resp.header().map_or(0, |h| h.revision());
    tracing::info!(job = %name, target = %target, revision, running, "kill requested");
    let body = json!({ "job": name, "target": target.to_string(), "revision": revision, "running": running });
    let detail = crate::audit::AuditDetail { detail: Some(body.clone()), ..Default::default() };
    Ok(with_audit((StatusCode::ACCEPTED, Json(body)).into_response(), detail))
}

async fn set_enabled(st: &AppState, name: &str, enabled: bool) -> ApiResult<Response> {
    job_name(name)?;
    let key = st.keys.job(name);
    for _ in 0..RMW_ATTEMPTS {
        let mut kv = st.client.kv_client();
        let resp = etcd("get", kv.get(key.clone(), None)).await?;
        let item = resp.kvs().first().ok_or_else(|| ApiError::not_found(format!("job {name:?} does not exist")))?;
        let (rev, created) = (item.mod_revision(), item.create_revision());
        let mut spec = JobSpec::from_json(item.value()).map_err(|e| {
            ApiError::conflict(format!("stored spec of job {name:?} is invalid ({e}); replace it with PUT"))
        })?;
        if spec.enabled == enabled {
            let detail = crate::audit::AuditDetail { detail: Some(json!({ "unchanged": true })), ..Default::default() };
            return Ok(with_audit(
                with_etag(StatusCode::OK, &view(name.to_owned(), item.value(), rev, created, None)),
                detail,
            ));
        }
        spec.enabled = enabled;
        let value = serde_json::to_vec(&spec).map_err(|e| ApiError::internal(&e))?;
        // Flip only the revision we read, so a concurrent edit is never overwritten.
        let txn = Txn::new().when([Compare::mod_revision(key.clone(), CompareOp::Equal, rev)]).and_then([TxnOp::put(
            key.clone(),
            value.clone(),
            None,
        )]);
        let resp = etcd("txn", kv.txn(txn)).await?;
        if resp.succeeded() {
            let revision = resp.header().map_or(0, |h| h.revision());
            tracing::info!(job = %name, enabled, revision, "job {}", if enabled { "resumed" } else { "paused" });
            let detail = crate::audit::AuditDetail {
                before: crate::audit::audited(item.value()),
                after: crate::audit::audited(&value),
                detail: None,
            };
            return Ok(with_audit(
                with_etag(StatusCode::OK, &view(name.to_owned(), &value, revision, created, None)),
                detail,
            ));
        }
    }
    Err(ApiError::conflict(format!("job {name:?} is being edited concurrently; retry")))
}

async fn pause_job(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult<Response> {
    set_enabled(&st, &name, false).await
}

async fn resume_job(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult<Response> {
    set_enabled(&st, &name, true).await
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

/// Most time a record route waits for MongoDB before answering 503: searches are bounded by
/// design (tens of ms), so a slower answer means MongoDB is away or stuck.
pub(crate) const RECORDS_TIMEOUT: Duration = Duration::from_secs(3);

/// A MongoDB request of a record route, answered `503 mongodb_unavailable` after
/// `RECORDS_TIMEOUT` instead of waiting out the driver's own timeouts.
pub(crate) async fn records<T>(fut: impl std::future::Future<Output = Result<T, StoreError>>) -> ApiResult<T> {
    match tokio::time::timeout(RECORDS_TIMEOUT, fut).await {
        Ok(result) => result.map_err(store_error),
        Err(_) => Err(ApiError::mongodb_unavailable(&format!("no answer within {} s", RECORDS_TIMEOUT.as_secs()))),
    }
}

pub(crate) fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::BadCursor => {
            ApiError::bad_request(Some("cursor".to_owned()), "cursor is not one this API returned")
        }
        StoreError::Unavailable(cause) => ApiError::mongodb_unavailable(&cause),
        StoreError::Failed(cause) => ApiError::internal(&cause),
    }
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
