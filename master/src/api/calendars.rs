//! Skip calendars (`{ns}/calendars/{name}`): list, read, save, delete. Jobs name them in
//! `skip_calendars`; workers skip the ticks on their dates.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use etcd_client::{GetOptions, PutOptions};
use etcron_model::calendar::Calendar;
use etcron_model::keys::Key;
use serde::Serialize;
use serde_json::{json, Value};

use super::http::body_bytes;
use crate::backend::AppState;
use crate::error::{etcd, ApiError, ApiResult};

/// A calendar as the API shows it.
#[derive(Debug, Serialize)]
pub(super) struct CalendarView {
    name: String,
    /// The revision it was last saved at.
    revision: i64,
    calendar: Calendar,
}

fn calendar_name(name: &str) -> ApiResult<()> {
    etcron_model::keys::validate_job_name(name)
        .map_err(|e| ApiError::bad_request(Some("name".to_owned()), e.replace("job name", "calendar name")))
}

/// `GET /api/calendars`: every calendar, by name.
pub(super) async fn list(State(st): State<AppState>) -> ApiResult<Json<Value>> {
    let prefix = st.keys.calendars_prefix();
    let resp = etcd("calendar_list", st.client.kv_client().get(prefix.as_str(), Some(GetOptions::new().with_prefix())))
        .await?;
    let calendars: Vec<CalendarView> = resp
        .kvs()
        .iter()
        .filter_map(|kv| {
            let Some(Key::Calendar(name)) = st.keys.parse(kv.key()) else { return None };
            let calendar = serde_json::from_slice(kv.value()).ok()?;
            Some(CalendarView { name, revision: kv.mod_revision(), calendar })
        })
        .collect();
    Ok(Json(json!({ "calendars": calendars })))
}

/// `GET /api/calendars/{name}`.
pub(super) async fn get(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult<Json<CalendarView>> {
    calendar_name(&name)?;
    let resp = etcd("calendar_get", st.client.kv_client().get(st.keys.calendar(&name), None)).await?;
    let kv = resp.kvs().first().ok_or_else(|| ApiError::not_found(format!("no calendar {name:?}")))?;
    let calendar = serde_json::from_slice(kv.value())
        .map_err(|e| ApiError::internal(&format!("calendar {name:?} in etcd is malformed: {e}")))?;
    Ok(Json(CalendarView { name, revision: kv.mod_revision(), calendar }))
}

/// `PUT /api/calendars/{name}`: creates (201) or replaces (200) a calendar.
pub(super) async fn put(
    State(st): State<AppState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    calendar_name(&name)?;
    let calendar = Calendar::from_json(&body_bytes(body)?)?;
    let value = serde_json::to_vec(&calendar).map_err(|e| ApiError::internal(&e))?;
    let opts = PutOptions::new().with_prev_key();
    let resp = etcd("calendar_put", st.client.kv_client().put(st.keys.calendar(&name), value, Some(opts))).await?;
    let revision = resp.header().map_or(0, |h| h.revision());
    let status = if resp.prev_key().is_some() { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(CalendarView { name, revision, calendar })).into_response())
}

/// `DELETE /api/calendars/{name}`: 404 when absent, 409 while jobs name it.
pub(super) async fn delete(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    calendar_name(&name)?;
    let users = jobs_naming(&st, &name).await?;
    if !users.is_empty() {
        return Err(ApiError::conflict(format!(
            "calendar {name:?} is in use by job(s) {}: take it out of their skip_calendars first",
            users.join(", ")
        )));
    }
    let resp = etcd("calendar_delete", st.client.kv_client().delete(st.keys.calendar(&name), None)).await?;
    if resp.deleted() == 0 {
        return Err(ApiError::not_found(format!("no calendar {name:?}")));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The jobs whose `skip_calendars` name `calendar`.
async fn jobs_naming(st: &AppState, calendar: &str) -> ApiResult<Vec<String>> {
    let prefix = st.keys.jobs_prefix();
    let resp =
        etcd("calendar_users", st.client.kv_client().get(prefix.as_str(), Some(GetOptions::new().with_prefix())))
            .await?;
    Ok(resp
        .kvs()
        .iter()
        .filter(|kv| {
            serde_json::from_slice::<Value>(kv.value()).ok().is_some_and(|spec| {
                spec["skip_calendars"].as_array().is_some_and(|names| names.iter().any(|n| n == calendar))
            })
        })
        .filter_map(|kv| match st.keys.parse(kv.key()) {
            Some(Key::Job(name)) => Some(name),
            _ => None,
        })
        .collect())
}
