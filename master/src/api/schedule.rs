//! `GET /api/schedule/preview`: the next fire times of a schedule, as workers compute them.

use axum::Json;
use etcron_model::duration::HumanDuration;
use etcron_model::schedule::{format_in, Schedule, ScheduleError, MAX_AT_MS};
use etcron_model::spec::{check_jitter, schedule_of, Window, MAX_JITTER};
use etcron_model::{now_ms, rfc3339_ms, UnixMs};
use serde_json::{json, Value};

use crate::backend::AppState;
use crate::error::etcd;
use crate::error::ApiError;
use crate::error::ApiResult;
use crate::query::{self, Params};
use axum::extract::State;
use etcron_model::calendar::Calendar;
use etcron_model::schedule::Tz;

/// Most fire times a preview returns.
pub const MAX_PREVIEW: usize = 100;

/// The parameters of a preview; `schedule` may be repeated (a job's `schedules`). `jitter`
/// needs `job`: a tick's delay is a function of the job's name.
/// `skip_calendar` (repeatable) marks the fire times a job's `skip_calendars` would skip.
const PREVIEW_PARAMS: [&str; 9] =
    ["schedule", "timezone", "count", "after", "active_from", "active_until", "job", "jitter", "skip_calendar"];

pub(super) async fn preview(
    State(st): State<AppState>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> ApiResult<Json<Value>> {
    let params = Params::parse(query.as_deref(), &PREVIEW_PARAMS)?;
    let mut expressions = Vec::new();
    let (mut timezone, mut count, mut after) = ("UTC", 10, now_ms());
    let mut window = Window::default();
    let (mut job, mut jitter_ms, mut calendars) = (None, 0, Vec::new());
    for (key, value) in params.iter() {
        match key {
            "schedule" => expressions.push(("schedule".to_owned(), value)),
            "timezone" => timezone = value,
            "count" => count = preview_count(value)?,
            "after" => after = preview_after(value)?,
            "active_from" => window.from = Some(value),
            "active_until" => window.until = Some(value),
            "job" => job = Some(query::job(key, value)?),
            "skip_calendar" => calendars.push(query::job(key, value)?),
            // `jitter`, the only other parameter `Params` lets through.
            _ => jitter_ms = preview_jitter(value)?,
        }
    }
    if expressions.is_empty() {
        return Err(ApiError::bad_request(Some("schedule".to_owned()), "schedule is required"));
    }
    let mut parsed = schedule_of(&expressions, timezone, window, &mut Schedule::parse)?;
    if jitter_ms > 0 {
        let job = job.ok_or_else(|| query::invalid("job", "a preview with jitter needs the job's name"))?;
        check_jitter(&parsed, jitter_ms, after)?;
        parsed = parsed.jittered(&job, jitter_ms);
    }
    parsed.fires_after(after).map_err(|e| {
        let field = if matches!(e, ScheduleError::Window(_)) { "active_until" } else { "schedule" };
        ApiError::bad_request(Some(field.to_owned()), e.to_string())
    })?;
    let next_ms = parsed.upcoming(after, count);
    let next: Vec<String> = next_ms.iter().map(|t| format_in(parsed.timezone(), *t)).collect();
    let skipped = skipped_by(&st, &calendars, &next_ms, parsed.timezone()).await?;
    let schedules: Vec<&str> = expressions.iter().map(|(_, e)| *e).collect();
    let mut body = json!({ "schedule": schedules[0], "timezone": timezone, "description": parsed.describe(), "next": next, "next_ms": next_ms });
    if schedules.len() > 1 {
        body["schedules"] = json!(schedules);
    }
    if !calendars.is_empty() {
        body["skipped"] = json!(skipped);
    }
    Ok(Json(body))
}

/// The fire times among `next_ms` that a date of one of `calendars` skips, each with the
/// calendar: `[{"at", "calendar"}]`. A calendar that does not exist is a 400.
async fn skipped_by(st: &AppState, calendars: &[String], next_ms: &[UnixMs], tz: Tz) -> ApiResult<Vec<Value>> {
    let mut loaded = Vec::with_capacity(calendars.len());
    for name in calendars {
        let resp = etcd("calendar_get", st.client.kv_client().get(st.keys.calendar(name), None)).await?;
        let calendar: Calendar = resp
            .kvs()
            .first()
            .and_then(|kv| serde_json::from_slice(kv.value()).ok())
            .ok_or_else(|| query::invalid("skip_calendar", format!("no calendar {name:?}")))?;
        loaded.push((name, calendar));
    }
    Ok(next_ms
        .iter()
        .filter_map(|t| {
            let (name, _) = loaded.iter().find(|(_, c)| c.covers(*t).is_some())?;
            Some(json!({ "at": format_in(tz, *t), "calendar": name }))
        })
        .collect())
}

fn preview_jitter(text: &str) -> ApiResult<i64> {
    let why = format!("jitter must be a duration more than 0 and at most {}, e.g. 30s", HumanDuration(MAX_JITTER));
    let jitter = etcron_model::duration::parse(text).map_err(|e| query::invalid("jitter", format!("{why} ({e})")))?;
    if jitter.is_zero() || jitter > MAX_JITTER {
        return Err(query::invalid("jitter", why));
    }
    Ok(i64::try_from(jitter.as_millis()).unwrap_or(i64::MAX))
}

fn preview_count(text: &str) -> ApiResult<usize> {
    text.parse::<usize>().ok().filter(|n| (1..=MAX_PREVIEW).contains(n)).ok_or_else(|| {
        ApiError::bad_request(Some("count".to_owned()), format!("count must be an integer between 1 and {MAX_PREVIEW}"))
    })
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
