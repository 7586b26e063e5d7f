//! `GET /api/schedule/preview`: the next fire times of a schedule, as workers compute them.

use axum::extract::Query;
use axum::Json;
use etcron_common::schedule::{format_in, Schedule, ScheduleError, MAX_AT_MS};
use etcron_common::{now_ms, rfc3339_ms, UnixMs};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::error::ApiResult;

/// Most fire times a preview returns.
pub const MAX_PREVIEW: usize = 100;

#[derive(Debug, Deserialize)]
pub(super) struct PreviewQuery {
    schedule: Option<String>,
    timezone: Option<String>,
    count: Option<String>,
    after: Option<String>,
}

pub(super) async fn preview(
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
pub(super) fn preview_after(text: &str) -> ApiResult<UnixMs> {
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
