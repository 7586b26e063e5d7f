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

/// The protocol's OpenAPI document (served without a token).
pub const DOCUMENT: &str = include_str!("../../../sdk/executor-openapi.json");

/// Every route, as the document lists them (a test holds the two together).
#[cfg(test)]
const ROUTES: [(&str, &str); 7] = [
    ("post", "/executor/v1/sessions"),
    ("delete", "/executor/v1/sessions/{session}"),
    ("post", "/executor/v1/sessions/{session}/poll"),
    ("post", "/executor/v1/sessions/{session}/runs/{run}/output"),
    ("post", "/executor/v1/sessions/{session}/runs/{run}/progress"),
    ("post", "/executor/v1/sessions/{session}/runs/{run}/done"),
    ("get", "/executor/v1/openapi.json"),
];

pub(super) fn router(state: Gateway) -> Router {
    Router::new()
        .route(
            "/executor/v1/openapi.json",
            axum::routing::get(|| async { ([("content-type", "application/json")], DOCUMENT) }),
        )
        .route("/executor/v1/sessions", post(open))
        .route("/executor/v1/sessions/{session}", delete(leave))
        .route("/executor/v1/sessions/{session}/poll", post(poll))
        .route("/executor/v1/sessions/{session}/runs/{run}/output", post(output))
        .route("/executor/v1/sessions/{session}/runs/{run}/progress", post(progress))
        .route("/executor/v1/sessions/{session}/runs/{run}/done", post(done))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// A refused request: its status and `{"error":{"code","message","field"}}`.
struct Refusal {
    status: StatusCode,
    code: &'static str,
    message: String,
    field: Option<String>,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message, "field": self.field}});
        (self.status, Json(body)).into_response()
    }
}

fn error(status: StatusCode, code: &'static str, message: impl Into<String>, field: Option<&str>) -> Refusal {
    Refusal { status, code, message: message.into(), field: field.map(str::to_owned) }
}

fn bad(field: &str, message: impl Into<String>) -> Refusal {
    error(StatusCode::BAD_REQUEST, "invalid", message, Some(field))
}

type Answer = Result<Response, Refusal>;

/// The bearer token compared in constant time.
fn authorized(state: &Gateway, headers: &HeaderMap) -> Result<(), Refusal> {
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

fn json_body<T: for<'de> Deserialize<'de>>(body: &Bytes) -> Result<T, Refusal> {
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
async fn open(State(state): State<Gateway>, headers: HeaderMap, body: Bytes) -> Answer {
    authorized(&state, &headers)?;
    let req: OpenRequest = json_body(&body)?;
    etcron_model::keys::validate_id(&req.id).map_err(|e| bad("id", e))?;
    if req.handlers.is_empty() || req.handlers.len() > MAX_HANDLERS {
        return Err(bad("handlers", format!("give 1 to {MAX_HANDLERS} handler names")));
    }
    for (i, h) in req.handlers.iter().enumerate() {
        etcron_model::keys::validate_id(h).map_err(|e| bad(&format!("handlers[{i}]"), e))?;
    }
    let capacity = req.capacity.unwrap_or(8);
    if capacity == 0 || capacity > crate::config::MAX_CAPACITY {
        return Err(bad("capacity", format!("must be between 1 and {}", crate::config::MAX_CAPACITY)));
    }
    {
        let sessions = state.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if sessions.len() >= MAX_EXECUTORS {
            return Err(error(
                StatusCode::SERVICE_UNAVAILABLE,
                "full",
                format!("this worker serves {MAX_EXECUTORS} executors already"),
                None,
            ));
        }
        if sessions.values().any(|s| s.executor == req.id) {
            return Err(error(
                StatusCode::CONFLICT,
                "conflict",
                format!(
                    "executor {:?} is connected already (its session ends one session TTL after its last request)",
                    req.id
                ),
                Some("id"),
            ));
        }
    }
    let session = start(&state, &req.id, req.handlers, capacity)
        .await
        .map_err(|e| error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", format!("{e:#}"), None))?;
    let ttl_ms = u64::try_from(state.poll_within().as_millis()).unwrap_or(u64::MAX);
    Ok((StatusCode::CREATED, Json(json!({"session": session, "poll_within_ms": ttl_ms}))).into_response())
}

/// The executor's node: the host's configuration with the executor's id, capacity and a data
/// dir of its own, on etcd connections of its own that a loss severs.
async fn start(state: &Gateway, id: &str, handlers: Vec<String>, capacity: u32) -> anyhow::Result<String> {
    let mut config: Config = (*state.host).clone();
    config.worker_id = id.to_owned();
    config.data_dir = state.host.data_dir.join("executors").join(id);
    config.capacity = capacity;
    config.metrics_listen = None;
    config.metrics_node = false;
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
fn live(state: &Gateway, headers: &HeaderMap, name: &str) -> Result<Arc<Session>, Refusal> {
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
async fn poll(State(state): State<Gateway>, headers: HeaderMap, Path(name): Path<String>, body: Bytes) -> Answer {
    let session = live(&state, &headers, &name)?;
    let req: PollRequest = if body.is_empty() { PollRequest::default() } else { json_body(&body)? };
    let wait = Duration::from_millis(req.wait_ms.unwrap_or(25_000)).min(super::MAX_POLL_WAIT);
    // Within the session TTL, so a long poll keeps the executor alive.
    let wait = wait.min(state.poll_within() / 2);
    let (runs, cancel) = session.poll(wait).await;
    session.seen();
    Ok(Json(json!({"runs": runs, "cancel": cancel})).into_response())
}

/// `POST …/runs/{run}/output`: text appended to the run's output.
async fn output(
    State(state): State<Gateway>,
    headers: HeaderMap,
    Path((name, run)): Path<(String, String)>,
    body: Bytes,
) -> Answer {
    let session = live(&state, &headers, &name)?;
    let reports = session.reports(&run).ok_or_else(|| no_run(&run))?;
    reports.output(&String::from_utf8_lossy(&body));
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn no_run(run: &str) -> Refusal {
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
) -> Answer {
    let session = live(&state, &headers, &name)?;
    let req: ProgressRequest = json_body(&body)?;
    if req.percent.is_some_and(|p| !(0.0..=100.0).contains(&p)) {
        return Err(bad("percent", "must be between 0 and 100"));
    }
    let reports = session.reports(&run).ok_or_else(|| no_run(&run))?;
    if req.percent.is_some() || req.message.is_some() {
        reports.progress(req.percent, req.message).await;
    }
    if let Some(checkpoint) = req.checkpoint {
        if let Err(e) = reports.checkpoint(checkpoint).await {
            let status = match e {
                crate::tasks::handler::Refusal::Fenced => StatusCode::CONFLICT,
                crate::tasks::handler::Refusal::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            };
            return Err(error(
                status,
                "checkpoint",
                format!("the checkpoint was not stored: {e:?}"),
                Some("checkpoint"),
            ));
        }
    }
    Ok(StatusCode::NO_CONTENT.into_response())
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
) -> Answer {
    let session = live(&state, &headers, &name)?;
    let req: DoneRequest = json_body(&body)?;
    let outcome = if req.ok {
        Ok(req.result.filter(|r| !r.is_null()))
    } else {
        Err(req.error.unwrap_or_else(|| "the executor reported a failure".to_owned()))
    };
    if session.finish(&run, outcome) {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(no_run(&run))
    }
}

/// `DELETE /executor/v1/sessions/{session}`: the executor leaves; its node drains (running
/// runs get the shutdown grace) and its session is revoked.
async fn leave(State(state): State<Gateway>, headers: HeaderMap, Path(name): Path<String>) -> Answer {
    live(&state, &headers, &name)?.leave();
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_lists_exactly_the_routes_served() {
        let doc: Value = serde_json::from_str(DOCUMENT).expect("the document is JSON");
        assert_eq!(doc["openapi"], "3.0.3");
        let mut listed: Vec<(String, String)> = Vec::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for method in ["get", "post", "put", "delete"] {
                if item.get(method).is_some() {
                    listed.push((method.to_owned(), path.clone()));
                }
            }
        }
        let mut served: Vec<(String, String)> =
            ROUTES.iter().map(|(m, p)| ((*m).to_owned(), (*p).to_owned())).collect();
        listed.sort();
        served.sort();
        assert_eq!(listed, served);
    }
}
