//! The execution records: search, one record with its output, and the overview's counts.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::Json;
use etcron_common::store::{Search, DEFAULT_LIMIT, MAX_LIMIT};
use etcron_model::keys::ExecutionId;
use etcron_model::record::ExecutionRecord;
use etcron_model::record::{Status, TriggerKind};
use etcron_model::spec::validate_name;
use etcron_model::{now_ms, rfc3339_ms};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::access::Scope;
use crate::backend::AppState;
use crate::error::ApiError;
use crate::error::{records, store_error, ApiResult};

use crate::query::{self, Params};

/// Parameters `GET /api/executions` accepts.
pub(super) const SEARCH_PARAMS: [&str; 10] =
    ["job", "team", "status", "worker", "trigger", "since", "until", "q", "limit", "cursor"];

/// Parses the query of `GET /api/executions`; every bad value is a 400 naming the parameter.
/// A `team` is the one team in `teams` (which the caller's teams narrow further).
pub fn parse_search(query: &str) -> ApiResult<Search> {
    let mut s = Search { limit: DEFAULT_LIMIT, ..Search::default() };
    for (key, value) in Params::parse(Some(query), &SEARCH_PARAMS)?.iter() {
        match key {
            "job" => s.job = Some(query::job(key, value)?),
            "team" => s.teams = Some(vec![query::team(key, value)?]),
            "status" => {
                for part in value.split(',').filter(|p| !p.is_empty()) {
                    let status: Status = serde_json::from_value(Value::String(part.to_owned())).map_err(|_| {
                        query::invalid(key, format!("unknown status {part:?}; one of running, succeeded, failed, timed_out, killed, lost, skipped, missed"))
                    })?;
                    s.statuses.push(status);
                }
            }
            "worker" => {
                etcron_model::keys::validate_id(value).map_err(|e| query::invalid(key, e))?;
                s.worker = Some(value.to_owned());
            }
            "trigger" => {
                let trigger: TriggerKind = serde_json::from_value(Value::String(value.to_owned())).map_err(|_| {
                    query::invalid(
                        key,
                        format!(
                            "unknown trigger {value:?}; one of schedule, manual, retry, dependency, catchup, failover, backfill"
                        ),
                    )
                })?;
                s.trigger = Some(trigger);
            }
            "since" => s.since_ms = Some(query::time(key, value)?),
            "until" => s.until_ms = Some(query::time(key, value)?),
            "q" => {
                if value.len() > 256 {
                    return Err(query::invalid(key, "q is longer than 256 characters"));
                }
                if etcron_common::store::words(value).is_empty() && !value.trim().is_empty() {
                    return Err(query::invalid(key, "q needs at least one word of 2 or more letters or digits"));
                }
                s.q = Some(value.to_owned());
            }
            "limit" => s.limit = query::limit(key, value, MAX_LIMIT)?,
            // `cursor`, the only other parameter `Params` lets through.
            _ => s.cursor = Some(query::cursor(value)?),
        }
    }
    query::ordered(s.since_ms, s.until_ms)?;
    Ok(s)
}

/// `GET /api/executions`: a caller with team roles only finds the records of its teams
/// (records without a team, written before teams or of jobs without one, are for global roles).
pub(super) async fn search_executions(
    State(st): State<AppState>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Json<Value>> {
    let mut search = parse_search(query.as_deref().unwrap_or(""))?;
    let wanted = search.teams.take().and_then(|t| t.into_iter().next());
    search.teams = scope.teams(wanted.as_deref());
    let page = records(st.store.search(&search)).await?;
    let mut executions = listed(&page.executions);
    // A search by words: the output line that matched, under each record that has one.
    for (value, record) in executions.iter_mut().zip(&page.executions) {
        if let Some(line) = page.matches.get(&record.id.to_string()) {
            value["output_match"] = json!(line);
        }
    }
    Ok(Json(json!({ "executions": executions, "next_cursor": page.next_cursor, "partial": page.partial })))
}

/// Records as lists show them: without the output and checkpoints (they can be large; `GET
/// /api/executions/{id}` has them).
pub(super) fn listed(records: &[etcron_model::record::ExecutionRecord]) -> Vec<Value> {
    records
        .iter()
        .map(|r| {
            let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
            if let Some(obj) = v.as_object_mut() {
                obj.remove("output");
                obj.remove("checkpoint");
                if let Some(resumed) = obj.get_mut("resumed_from").and_then(Value::as_object_mut) {
                    resumed.remove("checkpoint");
                }
            }
            v
        })
        .collect()
}

/// `GET /api/executions/{id}`: the record, when the caller sees its team (the record's, or
/// for a run without a record yet its job's); one it does not see has no record for it.
pub(super) async fn get_execution(
    State(st): State<AppState>,
    Path(id): Path<String>,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Json<Value>> {
    let parsed: ExecutionId = id.parse().map_err(|e: String| ApiError::bad_request(Some("id".to_owned()), e))?;
    let hidden = || ApiError::not_found(format!("execution {id:?} has no record"));
    let mut record = match records(st.store.get(&parsed.to_string())).await? {
        Some(record) => {
            scope.check(record.team.as_deref(), hidden)?;
            record
        }
        // A run's own `running` record is written once it has lasted a second; before that,
        // its running marker in etcd says what it is.
        None => match crate::api::stream::running_marker(&st, &parsed).await? {
            Some(marker) => {
                let team = st.jobs().team(&parsed.job).await?;
                scope.check(team.as_deref(), hidden)?;
                ExecutionRecord { team, ..ExecutionRecord::from_marker(&marker) }
            }
            None => return Err(hidden()),
        },
    };
    if record.status == Status::Running {
        // Its latest progress is the worker's to tell (the record has it once the run ends).
        if let Some(reports) = crate::api::stream::reports_of(&st, &record.worker_id, &parsed).await {
            record.reports.progress = reports.get("progress").and_then(|p| serde_json::from_value(p.clone()).ok());
            record.reports.checkpoint = reports.get("checkpoint").cloned();
        }
    }
    Ok(Json(serde_json::to_value(record).map_err(|e| ApiError::internal(&e))?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OverviewQuery {
    window: Option<String>,
    job: Option<String>,
}

/// Records shown in each list of the overview.
pub(super) const OVERVIEW_LIST: i64 = 10;

/// Activity for the console's overview and job pages: executions by status in time buckets over
/// the last hour (1-minute buckets) or day (15-minute buckets), every bucket present (zeros
/// included), with the latest failures and missed ticks.
pub(super) async fn overview(
    State(st): State<AppState>,
    query: Result<Query<OverviewQuery>, axum::extract::rejection::QueryRejection>,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Json<Value>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(None, e.body_text()))?;
    let window = q.window.unwrap_or_else(|| "1h".to_owned());
    let (span_ms, bucket_ms): (i64, i64) = match window.as_str() {
        "1h" => (3_600_000, 60_000),
        "24h" => (86_400_000, 900_000),
        other => {
            return Err(ApiError::bad_request(
                Some("window".to_owned()),
                format!("window must be 1h or 24h, not {other:?}"),
            ))
        }
    };
    if let Some(job) = &q.job {
        validate_name(job).map_err(|e| ApiError::bad_request(Some("job".to_owned()), e.message))?;
    }
    // Whole buckets: the current (partial) one is the last.
    let until_ms = (now_ms() / bucket_ms + 1) * bucket_ms;
    let since_ms = until_ms - span_ms;
    let job = q.job.as_deref();
    // A caller with team roles only counts the records of its teams.
    let teams = scope.teams(None);
    let failures = Search {
        job: q.job.clone(),
        teams: teams.clone(),
        statuses: vec![Status::Failed, Status::TimedOut, Status::Lost],
        since_ms: Some(since_ms),
        limit: OVERVIEW_LIST,
        ..Search::default()
    };
    let missed = Search { statuses: vec![Status::Missed], ..failures.clone() };
    let (activity, failures, missed) = tokio::try_join!(
        st.store.activity(since_ms, until_ms, bucket_ms, (job, teams.as_deref())),
        st.store.search(&failures),
        st.store.search(&missed)
    )
    .map_err(store_error)?;
    let mut totals: BTreeMap<Status, u64> = BTreeMap::new();
    let mut by_start: BTreeMap<i64, &BTreeMap<Status, u64>> = BTreeMap::new();
    for b in &activity {
        for (status, n) in &b.counts {
            *totals.entry(*status).or_default() += n;
        }
        by_start.insert(b.start_ms, &b.counts);
    }
    let empty = BTreeMap::new();
    let buckets: Vec<Value> = (0..span_ms / bucket_ms)
        .map(|i| {
            let start = since_ms + i * bucket_ms;
            json!({ "start": rfc3339_ms(start), "start_ms": start, "counts": by_start.get(&start).copied().unwrap_or(&empty) })
        })
        .collect();
    Ok(Json(json!({
        "window": window,
        "job": q.job,
        "since": rfc3339_ms(since_ms),
        "until": rfc3339_ms(until_ms),
        "bucket_ms": bucket_ms,
        "buckets": buckets,
        "totals": totals,
        "recent_failures": listed(&failures.executions),
        "recent_missed": listed(&missed.executions),
    })))
}
