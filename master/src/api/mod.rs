//! The HTTP API: `app(state)` builds the router, so tests drive it with `oneshot` and `main`
//! serves it. Handlers validate everything a client sends and answer errors that name the field.
//! The master only writes specs, kill commands and trigger requests; it never runs a job.

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;

pub use crate::backend::AppState;
use crate::error::ApiError;

/// Largest request body the router reads at all; specs are further limited to 64 KiB.
pub use crate::layers::limits::MAX_BODY_BYTES;

mod audit;
mod backfills;
mod batch;
mod calendars;
mod cluster;
mod executions;
mod history;
mod http;
mod job_pages;
mod jobs;
mod notifications;
mod pools;
mod run_trace;
mod schedule;
pub mod stream;
mod workers;
mod workflows;

pub use self::audit::parse_audit_search;
pub use self::batch::MAX_BATCH_CHANGES;
pub use self::executions::parse_search;
pub use self::jobs::{JobView, PauseView};
pub use self::schedule::MAX_PREVIEW;
#[allow(clippy::wildcard_imports)]
use self::{audit::*, batch::*, cluster::*, executions::*, jobs::*, schedule::*, workers::*};

pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/api/jobs", get(list_jobs))
        .route("/api/jobs/{job}", get(get_job).put(put_job).delete(delete_job))
        .route("/api/jobs/{job}/run", post(run_job))
        .route("/api/jobs/{job}/kill", post(kill_job))
        .route("/api/jobs/{job}/pause", post(pause_job))
        .route("/api/jobs/{job}/resume", post(resume_job))
        .route("/api/jobs/{job}/history", get(history::history))
        .route("/api/jobs/{job}/history/diff", get(history::history_diff))
        .route("/api/jobs/{job}/rollback", post(history::rollback))
        .route("/api/jobs/{job}/backfill", post(backfills::create))
        .route("/api/jobs/{job}/backfills", get(backfills::list))
        .route("/api/jobs/{job}/backfills/{id}", get(backfills::get))
        .route("/api/jobs/{job}/backfills/{id}/cancel", post(backfills::cancel))
        .route("/api/batch", post(batch))
        .route("/api/workers", get(list_workers))
        .route("/api/workers/departed", get(departed))
        .route("/api/workers/{id}/cordon", post(cordon))
        .route("/api/workers/{id}/drain", post(drain))
        .route("/api/workers/{id}/uncordon", post(uncordon))
        .route("/api/cluster/storage", get(cluster_storage))
        .route("/api/cluster/etcd", get(cluster_etcd))
        .route("/api/cluster/specs", get(cluster_specs))
        .route("/api/schedule/preview", get(preview))
        .route("/api/calendars", get(calendars::list))
        .route("/api/calendars/{name}", get(calendars::get).put(calendars::put).delete(calendars::delete))
        .route("/api/pools", get(pools::list))
        .route("/api/pools/{name}", get(pools::get).put(pools::put).delete(pools::delete))
        .route("/api/workflows/{run}", get(workflows::get))
        .route("/api/workflows/{run}/resume", post(workflows::resume))
        .route("/api/executions", get(search_executions))
        .route("/api/executions/{id}", get(get_execution))
        .route("/api/executions/{id}/stream", get(crate::api::stream::stream_execution))
        .route("/api/overview", get(overview))
        .route("/api/audit", get(search_audit))
        .route("/api/notifications", get(notifications::search))
        .route("/api/auth/whoami", get(whoami))
        .route("/api/auth/tokens", get(list_tokens))
        .route("/api/namespaces", get(namespaces))
        .route("/api/openapi.json", get(crate::openapi::document))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(crate::metrics::serve))
        .merge(crate::web::routes())
        .route_layer(axum::middleware::from_fn(crate::layers::guard::query_params))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // The auth layer names the caller; the audit layer around it records what was asked and
        // answered, refusals included; the guard checks Host and origin before either. A request
        // for a namespace not served is refused once its token passed.
        .layer(axum::middleware::from_fn(crate::layers::namespace::refuse_unknown))
        .layer(axum::middleware::from_fn_with_state(state.auth.clone(), crate::layers::auth::authorize))
        .layer(axum::middleware::from_fn_with_state(state.audit.clone(), crate::layers::audit::record))
        .layer(axum::middleware::from_fn_with_state(state.guard, crate::layers::guard::check))
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
