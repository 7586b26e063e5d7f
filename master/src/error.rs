//! The API's one error type: a status, a stable code, a message and the offending field,
//! rendered as `{"error":{"code","message","field"}}`. Server-side causes are logged here and
//! answered with an opaque message.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use std::time::Duration;

use etcron_common::etcd::EtcdError;
use etcron_common::store::StoreError;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
}

impl ApiError {
    pub fn bad_request(field: impl Into<Option<String>>, message: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, code: "invalid", message: message.into(), field: field.into() }
    }

    /// The saved job would start itself through `on_success` / `on_failure` edges.
    pub fn dependency_cycle(field: impl Into<Option<String>>, message: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, code: "dependency_cycle", message: message.into(), field: field.into() }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self { status: StatusCode::NOT_FOUND, code: "not_found", message: message.into(), field: None }
    }

    /// The caller's role does not allow the request.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self { status: StatusCode::FORBIDDEN, code: "forbidden", message: message.into(), field: None }
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self { status: StatusCode::CONFLICT, code: "conflict", message: message.into(), field: None }
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self { status: StatusCode::PAYLOAD_TOO_LARGE, code: "too_large", message: message.into(), field: None }
    }

    /// etcd did not answer: the request may be retried.
    /// etcd refused the write: its database is full (`NOSPACE`). 507, so that clients do not
    /// take it for a passing outage.
    pub fn etcd_nospace(cause: &dyn std::fmt::Display) -> Self {
        EtcdFailure::NoSpace.logged(cause).into()
    }

    pub fn etcd_unavailable(cause: &dyn std::fmt::Display) -> Self {
        EtcdFailure::Unavailable.logged(cause).into()
    }

    /// MongoDB did not answer: record routes are unavailable, job routes keep working.
    pub fn mongodb_unavailable(cause: &dyn std::fmt::Display) -> Self {
        tracing::warn!(error = %cause, "MongoDB request failed");
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "mongodb_unavailable",
            message: "execution records are unavailable: MongoDB is unreachable; job routes still work".to_owned(),
            field: None,
        }
    }

    /// The master has not listed the jobs into its job index yet (it does at start).
    pub fn job_index_loading() -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "job_index_loading",
            message: "the master is still loading the job index; try again in a few seconds".to_owned(),
            field: None,
        }
    }

    /// A server-side fault; the cause goes to the log, not to the client.
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        log_internal(cause);
        Self::internal_logged()
    }

    /// The answer of [`internal`](Self::internal) to a fault whose cause is logged already.
    pub(crate) fn internal_logged() -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal",
            message: "internal error; see the master's log".to_owned(),
            field: None,
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.code, self.status.as_u16())?;
        if let Some(field) = &self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message, "field": self.field}});
        (self.status, Json(body)).into_response()
    }
}

impl From<etcron_model::spec::SpecError> for ApiError {
    fn from(e: etcron_model::spec::SpecError) -> Self {
        if e.too_large {
            Self { field: e.field, ..Self::too_large(e.message) }
        } else {
            Self::bad_request(e.field, e.message)
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// Logs the cause of a server-side fault, which the client is not told.
pub(crate) fn log_internal(cause: &dyn std::fmt::Display) {
    tracing::error!(error = %cause, "internal error");
}

/// How an etcd request failed, its cause logged where it failed: `507 etcd_nospace` (etcd's
/// database is full) or `503 etcd_unavailable` (no answer: the request may be retried).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtcdFailure {
    NoSpace,
    Unavailable,
}

impl EtcdFailure {
    /// Logs `cause` as a failure of this kind.
    fn logged(self, cause: &dyn std::fmt::Display) -> Self {
        match self {
            Self::NoSpace => {
                tracing::error!(error = %cause, "etcd refused a write: its database reached its quota (NOSPACE alarm)");
            }
            Self::Unavailable => tracing::warn!(error = %cause, "etcd request failed"),
        }
        self
    }
}

impl From<EtcdFailure> for ApiError {
    fn from(failure: EtcdFailure) -> Self {
        match failure {
            EtcdFailure::NoSpace => Self {
                status: StatusCode::INSUFFICIENT_STORAGE,
                code: "etcd_nospace",
                message: "etcd's database reached its quota (NOSPACE alarm) and refuses every write: compact, \
                          defragment and disarm it (docs/operations.md, \"etcd storage\")"
                    .to_owned(),
                field: None,
            },
            EtcdFailure::Unavailable => Self {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: "etcd_unavailable",
                message: "etcd is unreachable or did not answer in time; try again".to_owned(),
                field: None,
            },
        }
    }
}

/// As its API answer (`etcd_unavailable (503): …`).
impl std::fmt::Display for EtcdFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        ApiError::from(*self).fmt(f)
    }
}

impl std::error::Error for EtcdFailure {}

/// An etcd request, its failure logged and classified.
pub(crate) async fn etcd_request<T, F>(op: &'static str, fut: F) -> Result<T, EtcdFailure>
where
    F: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    etcron_common::etcd::request(op, fut).await.map_err(etcd_failure)
}

/// An etcd request's failure, logged and classified.
pub(crate) fn etcd_failure(e: EtcdError) -> EtcdFailure {
    match e {
        EtcdError::Failed(e) if etcron_common::etcd::is_nospace(&e) => EtcdFailure::NoSpace.logged(&e),
        EtcdError::Failed(e) => EtcdFailure::Unavailable.logged(&e),
        EtcdError::Timeout => EtcdFailure::Unavailable.logged(&"request timed out"),
    }
}

pub(crate) async fn etcd<T, F>(op: &'static str, fut: F) -> ApiResult<T>
where
    F: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    etcd_request(op, fut).await.map_err(ApiError::from)
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
