//! The API's one error type: a status, a stable code, a message and the offending field,
//! rendered as `{"error":{"code","message","field"}}`. Server-side causes are logged here and
//! answered with an opaque message.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

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
        tracing::error!(error = %cause, "etcd refused a write: its database reached its quota (NOSPACE alarm)");
        Self {
            status: StatusCode::INSUFFICIENT_STORAGE,
            code: "etcd_nospace",
            message:
                "etcd's database reached its quota (NOSPACE alarm) and refuses every write: compact, defragment and \
                      disarm it (docs/operations.md, \"etcd storage\")"
                    .to_owned(),
            field: None,
        }
    }

    pub fn etcd_unavailable(cause: &dyn std::fmt::Display) -> Self {
        tracing::warn!(error = %cause, "etcd request failed");
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "etcd_unavailable",
            message: "etcd is unreachable or did not answer in time; try again".to_owned(),
            field: None,
        }
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

    /// A server-side fault; the cause goes to the log, not to the client.
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal",
            message: "internal error; see the master's log".to_owned(),
            field: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message, "field": self.field}});
        (self.status, Json(body)).into_response()
    }
}

impl From<etcron_common::job::SpecError> for ApiError {
    fn from(e: etcron_common::job::SpecError) -> Self {
        if e.too_large {
            Self { field: e.field, ..Self::too_large(e.message) }
        } else {
            Self::bad_request(e.field, e.message)
        }
    }
}
