//! The executor protocol's routes (`/executor/v1/…`), each needing `Authorization: Bearer
//! <executor token>`. Errors are `{"error":{"code","message","field"}}` as the API's.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::remote::{Remote, Session};
use super::{Gateway, MAX_EXECUTORS, MAX_HANDLERS};
use crate::config::Config;

/// Largest request body: an output chunk, a progress report, an outcome with its result.
const MAX_BODY: usize = 1024 * 1024;

pub(super) fn router(state: Gateway) -> Router {
    Router::new()
        .route("/executor/v1/sessions", post(open))
        .route("/executor/v1/sessions/{session}", delete(leave))
        .route("/executor/v1/sessions/{session}/poll", post(poll))
        .route("/executor/v1/sessions/{session}/runs/{run}/output", post(output))
        .route("/executor/v1/sessions/{session}/runs/{run}/progress", post(progress))
        .route("/executor/v1/sessions/{session}/runs/{run}/done", post(done))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

fn error(status: StatusCode, code: &str, message: impl Into<String>, field: Option<&str>) -> Response {
    (status, Json(json!({"error": {"code": code, "message": message.into(), "field": field}}))).into_response()
}

fn bad(field: &str, message: impl Into<String>) -> Response {
    error(StatusCode::BAD_REQUEST, "invalid", message, Some(field))
}

/// The bearer token compared in constant time.
fn authorized(state: &Gateway, headers: &HeaderMap) -> Result<(), Response> {
    let given = headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    let want = state.gateway.token.as_bytes();
    let ok = given.is_some_and(|g| {
        let g = g.as_bytes();
        g.len() == want.len() && g.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    });
    if ok {
        Ok(())
    } else {
        Err(error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "an executor token is needed (Authorization: Bearer …)",
            None,
        ))
    }
}

fn json_body<T: for<'de> Deserialize<'de>>(body: &Bytes) -> Result<T, Response> {
    serde_json::from_slice(body).map_err(|e| bad("body", format!("not the expected JSON: {e}")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenRequest {
    id: String,
    handlers: Vec<String>,
    #[serde(default)]
    capacity: Option<u32>,
}

/// `POST /executor/v1/sessions` `{"id","handlers":[…],"capacity"}`: starts the executor's node.
async fn open(State(state): State<Gateway>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(r) = authorized(&state, &headers) {
        return r;
    }
    let req: OpenRequest = match json_body(&body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    if let Err(e) = etcron_model::keys::validate_id(&req.id) {
        return bad("id", e);
    }
    if req.handlers.is_empty() || req.handlers.len() > MAX_HANDLERS {
        return bad("handlers", format!("give 1 to {MAX_HANDLERS} handler names"));
    }
    if let Some((i, e)) =
        req.handlers.iter().enumerate().find_map(|(i, h)| etcron_model::keys::validate_id(h).err().map(|e| (i, e)))
    {
        return bad(&format!("handlers[{i}]"), e);
    }
    let capacity = req.capacity.unwrap_or(8);
    if capacity == 0 || capacity > crate::config::MAX_CAPACITY {
        return bad("capacity", format!("must be between 1 and {}", crate::config::MAX_CAPACITY));
    }
    {
        let sessions = state.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if sessions.len() >= MAX_EXECUTORS {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "full",
                format!("this worker serves {MAX_EXECUTORS} executors already"),
                None,
            );
        }
        if sessions.values().any(|s| s.executor == req.id) {
            return error(
                StatusCode::CONFLICT,
                "conflict",
                format!(
                    "executor {:?} is connected already (its session ends one session TTL after its last request)",
                    req.id
                ),
                Some("id"),
            );
        }
    }
    match start(&state, &req.id, req.handlers, capacity).await {
        Ok(session) => {
            let ttl_ms = u64::try_from(state.poll_within().as_millis()).unwrap_or(u64::MAX);
            (StatusCode::CREATED, Json(json!({"session": session, "poll_within_ms": ttl_ms}))).into_response()
        }
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", format!("{e:#}"), None),
    }
}

/// The executor's node: the host's configuration with the executor's id, capacity and a data
/// dir of its own, on etcd connections of its own that a loss severs.
async fn start(state: &Gateway, id: &str, handlers: Vec<String>, capacity: u32) -> anyhow::Result<String> {
    let mut config: Config = (*state.host).clone();
    config.worker_id = id.to_owned();
    config.data_dir = state.host.data_dir.join("executors").join(id);
    config.capacity = capacity;
    config.metrics_listen = None;
    config.executor = None;
    config.output_listen = std::net::SocketAddr::new(state.host.output_listen.ip(), 0);
    config.output_url = None;
    std::fs::create_dir_all(&config.data_dir)?;
    let lock = crate::cluster::identity::lock_data_dir(&config.data_dir).map_err(anyhow::Error::msg)?;
    let (client, cut_client) = etcron_common::etcd::connect_severable(&config.etcd).await?;
    let (session_client, cut_session) = etcron_common::etcd::connect_severable(&config.etcd).await?;
    let group = etcron_common::task::Group::new(0);
    let (session, mut stopped) = Session::new(id.to_owned(), handlers, vec![cut_client, cut_session], group.clone());
    let name = crate::tasks::progress::new_token();
    state.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name.clone(), session.clone());
    let parts = crate::node::Parts {
        client,
        session_client,
        store: state.store.clone(),
        simulated: None,
        handlers: Some(Arc::new(Remote(session.clone()))),
    };
    let (gateway, key, executor) = (state.clone(), name.clone(), id.to_owned());
    group.spawn(async move {
        let _lock = lock;
        let ran = crate::node::run(config, parts, async move {
            let _ = stopped.wait_for(|s| *s).await;
        })
        .await;
        if let Err(e) = ran {
            tracing::error!(executor, error = %e, "a remote executor's node failed");
        }
        gateway.remove(&key);
        tracing::info!(executor, "remote executor left");
    });
    tracing::info!(executor = id, "remote executor connected");
    Ok(name)
}

/// The session named in the path, noted alive; 404 when it ended (the executor was lost or
/// left: it opens a new one).
fn live(state: &Gateway, headers: &HeaderMap, name: &str) -> Result<Arc<Session>, Response> {
    authorized(state, headers)?;
    let session = state.session(name).ok_or_else(|| {
        error(StatusCode::NOT_FOUND, "not_found", "no such session: it ended (open a new one)", Some("session"))
    })?;
    session.seen();
    Ok(session)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PollRequest {
    #[serde(default)]
    wait_ms: Option<u64>,
}

/// `POST …/poll` `{"wait_ms"}`: the runs won for it and the runs to cancel, waiting up to
/// `wait_ms` (at most 30 s) for one. Each poll is also its heartbeat.
async fn poll(State(state): State<Gateway>, headers: HeaderMap, Path(name): Path<String>, body: Bytes) -> Response {
    let session = match live(&state, &headers, &name) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let req: PollRequest = if body.is_empty() {
        PollRequest::default()
    } else {
        match json_body(&body) {
            Ok(r) => r,
            Err(r) => return r,
        }
    };
    let wait = Duration::from_millis(req.wait_ms.unwrap_or(25_000)).min(super::MAX_POLL_WAIT);
    // Within the session TTL, so a long poll keeps the executor alive.
    let wait = wait.min(state.poll_within() / 2);
    let (runs, cancel) = session.poll(wait).await;
    session.seen();
    Json(json!({"runs": runs, "cancel": cancel})).into_response()
}

/// `POST …/runs/{run}/output`: text appended to the run's output.
async fn output(
    State(state): State<Gateway>,
    headers: HeaderMap,
    Path((name, run)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let session = match live(&state, &headers, &name) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let Some(reports) = session.reports(&run) else { return no_run(&run) };
    reports.output(&String::from_utf8_lossy(&body));
    StatusCode::NO_CONTENT.into_response()
}

fn no_run(run: &str) -> Response {
    error(StatusCode::NOT_FOUND, "not_found", format!("no run {run:?} held by this session (it ended)"), Some("run"))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProgressRequest {
    #[serde(default)]
    percent: Option<f64>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    checkpoint: Option<Value>,
}

/// `POST …/runs/{run}/progress` `{"percent","message","checkpoint"}`: 204 once a checkpoint is
/// in etcd; 409 when the run's claim is no longer its own (stop), 503 when etcd did not take it.
async fn progress(
    State(state): State<Gateway>,
    headers: HeaderMap,
    Path((name, run)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let session = match live(&state, &headers, &name) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let req: ProgressRequest = match json_body(&body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    if req.percent.is_some_and(|p| !(0.0..=100.0).contains(&p)) {
        return bad("percent", "must be between 0 and 100");
    }
    let Some(reports) = session.reports(&run) else { return no_run(&run) };
    if req.percent.is_some() || req.message.is_some() {
        reports.progress(req.percent, req.message).await;
    }
    if let Some(checkpoint) = req.checkpoint {
        if let Err(e) = reports.checkpoint(checkpoint).await {
            let status = if e.contains("Fenced") { StatusCode::CONFLICT } else { StatusCode::SERVICE_UNAVAILABLE };
            return error(status, "checkpoint", format!("the checkpoint was not stored: {e}"), Some("checkpoint"));
        }
    }
    StatusCode::NO_CONTENT.into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DoneRequest {
    ok: bool,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<String>,
}

/// `POST …/runs/{run}/done` `{"ok":true,"result"}` or `{"ok":false,"error"}`: the run's outcome.
async fn done(
    State(state): State<Gateway>,
    headers: HeaderMap,
    Path((name, run)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let session = match live(&state, &headers, &name) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let req: DoneRequest = match json_body(&body) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let outcome = if req.ok {
        Ok(req.result.filter(|r| !r.is_null()))
    } else {
        Err(req.error.unwrap_or_else(|| "the executor reported a failure".to_owned()))
    };
    if session.finish(&run, outcome) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        no_run(&run)
    }
}

/// `DELETE /executor/v1/sessions/{session}`: the executor leaves; its node drains (running
/// runs get the shutdown grace) and its session is revoked.
async fn leave(State(state): State<Gateway>, headers: HeaderMap, Path(name): Path<String>) -> Response {
    match live(&state, &headers, &name) {
        Ok(session) => {
            session.leave();
            StatusCode::NO_CONTENT.into_response()
        }
        Err(r) => r,
    }
}
