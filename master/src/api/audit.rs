//! `GET /api/audit`: who changed, ran, killed or paused what.

use axum::extract::State;
use axum::Json;
use etcron_common::store::DEFAULT_LIMIT;
use serde_json::{json, Value};

use crate::backend::AppState;
use crate::error::{records, ApiResult};

use crate::query::{self, Params};

/// Parameters `GET /api/audit` accepts.
pub(super) const AUDIT_PARAMS: [&str; 7] = ["job", "actor", "action", "since", "until", "limit", "cursor"];

/// Parses the query of `GET /api/audit`; every bad value is a 400 naming the parameter.
pub fn parse_audit_search(query: &str) -> ApiResult<crate::layers::audit::AuditSearch> {
    let mut s = crate::layers::audit::AuditSearch { limit: DEFAULT_LIMIT, ..Default::default() };
    for (key, value) in Params::parse(Some(query), &AUDIT_PARAMS)?.iter() {
        match key {
            "job" => s.job = Some(query::job(key, value)?),
            "actor" => s.actor = Some(query::text(key, value, 128)?),
            "action" => s.action = Some(query::text(key, value, 128)?),
            "since" => s.since_ms = Some(query::time(key, value)?),
            "until" => s.until_ms = Some(query::time(key, value)?),
            "limit" => s.limit = query::limit(key, value, crate::layers::audit::MAX_LIMIT)?,
            // `cursor`, the only other parameter `Params` lets through.
            _ => s.cursor = Some(query::cursor(value)?),
        }
    }
    Ok(s)
}

/// `GET /api/audit`: a caller with team roles only sees the entries of its teams.
pub(super) async fn search_audit(
    State(st): State<AppState>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    axum::Extension(scope): axum::Extension<crate::access::Scope>,
) -> ApiResult<Json<Value>> {
    let mut search = parse_audit_search(query.as_deref().unwrap_or(""))?;
    search.teams = scope.teams(None);
    let (entries, next) = records(crate::layers::audit::search(&st.store, &search)).await?;
    Ok(Json(json!({ "entries": entries, "next_cursor": next })))
}
