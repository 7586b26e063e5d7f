//! `GET /api/notifications`: the webhook deliveries workers recorded in MongoDB (collection
//! `notifications`), newest first, each with every attempt. The master never sends one.

use axum::extract::{RawQuery, State};
use axum::Json;
use etcron_common::store::{NotificationSearch, DEFAULT_LIMIT, MAX_LIMIT};
use etcron_model::keys::ExecutionId;
use etcron_model::spec::alerts::parse_stale_occurrence;
use etcron_model::spec::notify::NotifyEvent;
use serde_json::{json, Value};

use crate::backend::AppState;
use crate::error::ApiResult;
use crate::query::{self, Params};

/// Parameters `GET /api/notifications` accepts.
pub const PARAMS: [&str; 4] = ["job", "execution", "event", "limit"];

/// Parses the query of `GET /api/notifications`; every bad value is a 400 naming the parameter.
pub fn parse_search(query: &str) -> ApiResult<NotificationSearch> {
    let mut s = NotificationSearch { limit: DEFAULT_LIMIT, ..NotificationSearch::default() };
    for (key, value) in Params::parse(Some(query), &PARAMS)?.iter() {
        match key {
            "job" => s.job = Some(query::job(key, value)?),
            // An execution, or a `stale` alert's occurrence (`{job}@stale-{ms}`).
            "execution" => {
                s.execution_id = Some(match value.parse::<ExecutionId>() {
                    Ok(id) => id.to_string(),
                    Err(e) => match parse_stale_occurrence(value) {
                        Some((job, ms)) => format!("{job}@stale-{ms}"),
                        None => return Err(query::invalid(key, e)),
                    },
                });
            }
            "event" => s.event = Some(value.parse::<NotifyEvent>().map_err(|e| query::invalid(key, e))?),
            // `limit`, the only other parameter `Params` lets through.
            _ => s.limit = query::limit(key, value, MAX_LIMIT)?,
        }
    }
    Ok(s)
}

/// `{"notifications": [...]}`, newest first; a caller with team roles only sees the deliveries
/// of its teams.
pub async fn search(
    State(st): State<AppState>,
    RawQuery(query): RawQuery,
    axum::Extension(scope): axum::Extension<crate::access::Scope>,
) -> ApiResult<Json<Value>> {
    let mut search = parse_search(query.as_deref().unwrap_or(""))?;
    search.teams = scope.teams(None);
    let found = crate::error::records(st.store.notifications(&search)).await?;
    Ok(Json(json!({ "notifications": found })))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_parameter_is_checked_and_named_when_wrong() {
        let s = parse_search("job=a&execution=a%401700000000000%232&event=recovery&limit=5").unwrap();
        assert_eq!(s.job.as_deref(), Some("a"));
        assert_eq!(s.execution_id.as_deref(), Some("a@1700000000000#2"));
        assert_eq!(s.event, Some(NotifyEvent::Recovery));
        assert_eq!(s.limit, 5);
        assert_eq!(parse_search("").unwrap().limit, DEFAULT_LIMIT);
        let stale = parse_search("execution=a%40stale-1700000000000").unwrap();
        assert_eq!(stale.execution_id.as_deref(), Some("a@stale-1700000000000"));
        for (query, field) in [
            ("job=Bad", "job"),
            ("execution=nope", "execution"),
            ("event=killed", "event"),
            ("limit=0", "limit"),
            ("limit=501", "limit"),
            ("status=failed", "status"),
        ] {
            assert_eq!(parse_search(query).unwrap_err().field.as_deref(), Some(field), "{query}");
        }
    }
}
