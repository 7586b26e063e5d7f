//! What every route module shares: the job name check, preconditions, the body, answers with
//! an ETag or an audit detail, and the caller's name.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use etcron_model::spec::validate_name;
use serde::Serialize;

use crate::error::ApiError;
use crate::error::ApiResult;
use crate::layers::auth::Caller;

use crate::layers::limits::MAX_BODY_BYTES;

/// `f` of the job index once it reflects etcd at `revision` (the revision the rest of the
/// page was read at); 503 before the index is first listed.
pub(super) async fn indexed<R>(
    st: &crate::backend::AppState,
    revision: i64,
    f: impl FnOnce(&crate::job_index::Index) -> R,
) -> ApiResult<R> {
    st.job_index.read(revision, f).await.map_err(|crate::job_index::Loading| ApiError::job_index_loading())
}

pub(super) fn job_name(name: &str) -> ApiResult<()> {
    validate_name(name).map_err(ApiError::from)
}

/// `resp` with what the audit log should keep about the request.
pub(super) fn with_audit(mut resp: Response, detail: crate::layers::audit::AuditDetail) -> Response {
    resp.extensions_mut().insert(detail);
    resp
}

/// `body` as JSON with `ETag: "<revision>"`.
pub(super) fn respond_with_etag(status: StatusCode, body: impl Serialize, revision: i64) -> Response {
    let mut resp = (status, Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("\"{revision}\"")) {
        resp.headers_mut().insert("etag", v);
    }
    resp
}

/// `If-Match: <revision>` (quotes allowed); `None` when absent.
pub(super) fn if_match(headers: &HeaderMap) -> ApiResult<Option<i64>> {
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
pub(super) fn if_none_match(headers: &HeaderMap) -> ApiResult<bool> {
    match headers.get("if-none-match").map(|v| v.to_str().map(str::trim)) {
        None => Ok(false),
        Some(Ok("*")) => Ok(true),
        Some(_) => Err(ApiError::bad_request(
            Some("If-None-Match".to_owned()),
            "If-None-Match must be * (create the job only if it does not exist); use If-Match: <revision> to edit",
        )),
    }
}

pub(super) fn body_bytes(body: Result<Bytes, BytesRejection>) -> ApiResult<Bytes> {
    body.map_err(|e| {
        if let Some(deadline) = etcron_common::serve::BodyDeadline::find(&e) {
            tracing::warn!(%deadline, "request refused: its body was not in by the request deadline");
            ApiError {
                status: StatusCode::REQUEST_TIMEOUT,
                code: "request_timeout",
                message: deadline.to_string(),
                field: None,
            }
        } else if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(format!("request body exceeds {MAX_BODY_BYTES} bytes"))
        } else {
            ApiError::bad_request(None, format!("could not read request body: {e}"))
        }
    })
}

/// An optional JSON object body with only `fields`: `None` when empty, else its fields. A key
/// given twice, JSON that is no object (`shape` says what is expected) or an unknown field is a
/// `400` naming it.
pub(super) fn object_body(
    body: &[u8],
    fields: &[&str],
    shape: &str,
) -> ApiResult<Option<serde_json::Map<String, serde_json::Value>>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let value = etcron_model::json::from_slice_unique(body).map_err(|e| match e {
        etcron_model::json::ParseError::Duplicate { path } => {
            ApiError::bad_request(Some(path.clone()), format!("{path} is given twice"))
        }
        etcron_model::json::ParseError::Syntax(e) => ApiError::bad_request(None, format!("body is not JSON: {e}")),
    })?;
    let serde_json::Value::Object(map) = value else {
        return Err(ApiError::bad_request(None, format!("the body is a JSON object: {shape}, or empty")));
    };
    if let Some(other) = map.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(ApiError::bad_request(
            Some(other.clone()),
            format!("unknown field {other:?}; this takes {}", fields.join(" and ")),
        ));
    }
    Ok(Some(map))
}

/// An RFC 3339 instant in a body's `field`, `None` when absent or null.
pub(super) fn instant(field: &str, value: Option<&serde_json::Value>) -> ApiResult<Option<etcron_model::UnixMs>> {
    let invalid = |message: String| ApiError::bad_request(Some(field.to_owned()), message);
    let text = match value {
        None | Some(serde_json::Value::Null) => return Ok(None),
        Some(serde_json::Value::String(t)) => t,
        Some(_) => return Err(invalid(format!("{field} must be an RFC 3339 time such as 2026-11-22T03:00:00Z"))),
    };
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| Some(t.timestamp_millis()))
        .map_err(|e| invalid(format!("{field} must be an RFC 3339 time such as 2026-11-22T03:00:00Z ({e})")))
}

/// Who writes through which request, for the saved versions of specs.
pub(super) fn origin(
    caller: Option<&axum::Extension<Caller>>,
    request: Option<&axum::Extension<crate::layers::audit::RequestId>>,
    via: String,
) -> crate::job_store::Origin {
    crate::job_store::Origin {
        by: actor(caller),
        via,
        request_id: request.map(|r| r.0 .0.clone()),
        restored: None,
        client: None,
    }
}

/// The tool that sends a save (`X-Etcron-Client`) and its file (`X-Etcron-Source`), kept in
/// the saved version as notes for people; a 400 naming the header when one is not a short
/// line of text.
pub(super) fn client_notes(headers: &HeaderMap) -> ApiResult<(Option<String>, Option<String>)> {
    let note = |name: &str| -> ApiResult<Option<String>> {
        let Some(value) = headers.get(name) else { return Ok(None) };
        let text = value.to_str().map_err(|_| {
            ApiError::bad_request(Some(name.to_owned()), format!("{name} must be text (visible ASCII)"))
        })?;
        match etcron_model::stored::client_note_error(text) {
            Some(why) => Err(ApiError::bad_request(Some(name.to_owned()), format!("{name} {why}"))),
            None => Ok(Some(text.to_owned())),
        }
    };
    Ok((note("X-Etcron-Client")?, note("X-Etcron-Source")?))
}

/// The caller's name for reasons and logs (`anonymous` without auth).
pub(super) fn actor(caller: Option<&axum::Extension<Caller>>) -> String {
    caller.map_or_else(|| "anonymous".to_owned(), |c| c.name.clone())
}
