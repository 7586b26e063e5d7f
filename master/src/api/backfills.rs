//! Backfills (`POST /api/jobs/{job}/backfill`): run a job's past ticks again, pick which from
//! the records (`missing`, `failed`, `all`), write the backfill with its first run requests in
//! one transaction, and show its progress from the records of its items. Workers chain the
//! rest (`worker/src/backfill.rs`).

use std::collections::{BTreeMap, HashMap};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, Txn, TxnOp};
use etcron_model::backfill::{
    select, Backfill, BackfillRequest, Cancelled, Excluded, Range, TickRecords, MAX_BACKFILLS_PER_JOB,
    MAX_BACKFILL_SCAN,
};
use etcron_model::calendar::Calendar;
use etcron_model::keys::{Key, Tick};
use etcron_model::record::Status;
use etcron_model::spec::{JobSpec, Mode};
use etcron_model::{now_ms, rfc3339_ms, UnixMs};
use serde::Serialize;
use serde_json::{json, Value};

use super::http::{actor, body_bytes, job_name, with_audit};
use super::jobs::read_job;
use crate::access::{team_of, Scope};
use crate::backend::AppState;
use crate::error::{etcd, records, ApiError, ApiResult};
use crate::layers::auth::Caller;

/// Most excluded ticks a dry run lists (`excluded_count` has them all).
const MAX_EXCLUDED_SHOWN: usize = 100;

/// One item as the API shows it.
#[derive(Debug, Serialize)]
struct ItemView {
    at: String,
    execution_id: String,
    /// The record's status; `pending` before it has one (`cancelled` once the backfill is).
    status: String,
}

/// How many items are where.
#[derive(Debug, Default, Serialize)]
struct Counts {
    total: usize,
    pending: usize,
    running: usize,
    succeeded: usize,
    failed: usize,
    not_run: usize,
    /// Items without a record when the backfill was cancelled (never requested, or not
    /// recorded yet: a run that was going shows its status once recorded).
    cancelled: usize,
}

/// A backfill as the API shows it.
#[derive(Debug, Serialize)]
struct BackfillView {
    id: String,
    job: String,
    from: String,
    to: String,
    which: etcron_model::backfill::Which,
    overlap: etcron_model::backfill::Overlap,
    max_parallel: u32,
    /// `running` until every item has a final record, then `done`; `cancelled` once cancelled.
    state: &'static str,
    created_by: String,
    created_at: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    cancelled_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cancelled_at: Option<String>,
    counts: Counts,
    #[serde(skip_serializing_if = "Option::is_none")]
    items: Option<Vec<ItemView>>,
}

fn view(job: &str, id: &str, b: &Backfill, statuses: &HashMap<String, Status>, with_items: bool) -> BackfillView {
    let mut counts = Counts { total: b.items.len(), ..Counts::default() };
    let mut items = Vec::with_capacity(if with_items { b.items.len() } else { 0 });
    for item in &b.items {
        let execution_id = item.execution(job).to_string();
        let status = statuses.get(&execution_id).copied();
        match status {
            None if b.cancelled.is_some() => counts.cancelled += 1,
            None => counts.pending += 1,
            Some(Status::Running) => counts.running += 1,
            Some(Status::Succeeded) => counts.succeeded += 1,
            Some(Status::Skipped | Status::Missed) => counts.not_run += 1,
            Some(_) => counts.failed += 1,
        }
        if with_items {
            let status = match status {
                Some(s) => s.as_str(),
                None if b.cancelled.is_some() => "cancelled",
                None => "pending",
            };
            items.push(ItemView { at: rfc3339_ms(item.at_ms), execution_id, status: status.to_owned() });
        }
    }
    let state = if b.cancelled.is_some() {
        "cancelled"
    } else if counts.pending + counts.running == 0 {
        "done"
    } else {
        "running"
    };
    BackfillView {
        id: id.to_owned(),
        job: job.to_owned(),
        from: rfc3339_ms(b.from_ms),
        to: rfc3339_ms(b.to_ms),
        which: b.which,
        overlap: b.overlap,
        max_parallel: b.parallel,
        state,
        created_by: b.by.clone(),
        created_at: rfc3339_ms(b.at_ms),
        reason: b.reason.clone(),
        cancelled_by: b.cancelled.as_ref().map(|c| c.by.clone()),
        cancelled_at: b.cancelled.as_ref().map(|c| rfc3339_ms(c.at_ms)),
        counts,
        items: with_items.then_some(items),
    }
}

/// The records' statuses of every item of `backfills`.
async fn statuses_of(st: &AppState, job: &str, backfills: &[&Backfill]) -> ApiResult<HashMap<String, Status>> {
    let ids: Vec<String> =
        backfills.iter().flat_map(|b| b.items.iter().map(|i| i.execution(job).to_string())).collect();
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    records(st.store.statuses(&ids)).await
}

/// A backfill's id from the path: 400 naming `id` when malformed.
fn backfill_id(id: &str) -> ApiResult<()> {
    etcron_model::keys::validate_id(id).map_err(|e| ApiError::bad_request(Some("id".to_owned()), e))
}

/// Every backfill of `job`, oldest first.
async fn stored(st: &AppState, job: &str) -> ApiResult<Vec<(String, Backfill)>> {
    let prefix = st.keys.job_backfills_prefix(job);
    let opts =
        GetOptions::new().with_prefix().with_sort(etcd_client::SortTarget::Create, etcd_client::SortOrder::Ascend);
    let resp = etcd("backfill_list", st.client.kv_client().get(prefix.as_str(), Some(opts))).await?;
    Ok(resp
        .kvs()
        .iter()
        .filter_map(|kv| {
            let Some(Key::Backfill { id, .. }) = st.keys.parse(kv.key()) else { return None };
            match serde_json::from_slice::<Backfill>(kv.value()) {
                Ok(b) => Some((id, b)),
                Err(e) => {
                    tracing::error!(job, id, error = %e, "backfill in etcd is malformed; not listed");
                    None
                }
            }
        })
        .collect())
}

/// One backfill, or 404.
async fn stored_one(st: &AppState, job: &str, id: &str) -> ApiResult<(Backfill, i64)> {
    let resp = etcd("backfill_get", st.client.kv_client().get(st.keys.backfill(job, id), None)).await?;
    let kv = resp.kvs().first().ok_or_else(|| ApiError::not_found(format!("job {job:?} has no backfill {id:?}")))?;
    let b = serde_json::from_slice(kv.value())
        .map_err(|e| ApiError::internal(&format!("backfill {id:?} of {job:?} in etcd is malformed: {e}")))?;
    Ok((b, kv.version()))
}

/// `GET /api/jobs/{job}/backfills`: every backfill of the job, newest first, with counts.
pub(super) async fn list(
    State(st): State<AppState>,
    Path(job): Path<String>,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Json<Value>> {
    job_name(&job)?;
    read_job(&st, &job, &scope).await?;
    let all = stored(&st, &job).await?;
    let statuses = statuses_of(&st, &job, &all.iter().map(|(_, b)| b).collect::<Vec<_>>()).await?;
    let views: Vec<BackfillView> = all.iter().rev().map(|(id, b)| view(&job, id, b, &statuses, false)).collect();
    Ok(Json(json!({ "job": job, "backfills": views })))
}

/// `GET /api/jobs/{job}/backfills/{id}`: one backfill with each item's status.
pub(super) async fn get(
    State(st): State<AppState>,
    Path((job, id)): Path<(String, String)>,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Response> {
    job_name(&job)?;
    backfill_id(&id)?;
    read_job(&st, &job, &scope).await?;
    let (b, _) = stored_one(&st, &job, &id).await?;
    let statuses = statuses_of(&st, &job, &[&b]).await?;
    Ok(Json(view(&job, &id, &b, &statuses, true)).into_response())
}

/// `POST /api/jobs/{job}/backfills/{id}/cancel`: no item is requested any more (a run already
/// started finishes; kill it to stop it). 409 when already cancelled or done.
pub(super) async fn cancel(
    State(st): State<AppState>,
    Path((job, id)): Path<(String, String)>,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Response> {
    job_name(&job)?;
    backfill_id(&id)?;
    let (stored_job, _) = read_job(&st, &job, &scope).await?;
    let (mut b, version) = stored_one(&st, &job, &id).await?;
    let statuses = statuses_of(&st, &job, &[&b]).await?;
    match view(&job, &id, &b, &statuses, false).state {
        "running" if version == 1 => {}
        "done" => return Err(ApiError::conflict(format!("backfill {id:?} of {job:?} is done"))),
        _ => return Err(ApiError::conflict(format!("backfill {id:?} of {job:?} is cancelled already"))),
    }
    b.cancelled = Some(Cancelled { by: scope.caller.name.clone(), at_ms: now_ms() });
    let key = st.keys.backfill(&job, &id);
    let requests = st.keys.trigger(&job, &Backfill::request_prefix(&id));
    let value = serde_json::to_vec(&b).map_err(|e| ApiError::internal(&e))?;
    // Only while the job is as read (its team checked) and the backfill not cancelled.
    let txn = Txn::new()
        .when([
            Compare::version(key.as_str(), CompareOp::Equal, 1),
            Compare::mod_revision(st.keys.job(&job), CompareOp::Equal, stored_job.mod_revision),
        ])
        .and_then([
            TxnOp::put(key.as_str(), value, None),
            TxnOp::delete(requests, Some(DeleteOptions::new().with_prefix())),
        ]);
    let resp = etcd("backfill_cancel", st.client.kv_client().txn(txn)).await?;
    if !resp.succeeded() {
        return Err(ApiError::conflict(format!(
            "backfill {id:?} of {job:?} was cancelled, or the job changed, meanwhile"
        )));
    }
    let body = view(&job, &id, &b, &statuses, true);
    let detail = crate::layers::audit::AuditDetail {
        teams: crate::layers::audit::teams([team_of(&stored_job.value)]),
        detail: Some(json!({ "backfill": id })),
        ..Default::default()
    };
    Ok(with_audit(Json(body).into_response(), detail))
}

/// `POST /api/jobs/{job}/backfill`: a dry run answers the ticks it would run (200); otherwise
/// the backfill is created with its first requests (201).
pub(super) async fn create(
    State(st): State<AppState>,
    Path(job): Path<String>,
    (caller, axum::Extension(scope)): (Option<axum::Extension<Caller>>, axum::Extension<Scope>),
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    job_name(&job)?;
    let request = BackfillRequest::from_json(&body_bytes(body)?)?;
    let now = now_ms();
    let range = request.check(now)?;
    let (stored_job, _) = read_job(&st, &job, &scope).await?;
    let spec = JobSpec::from_json(&stored_job.value)
        .map_err(|e| ApiError::conflict(format!("job {job:?} has an invalid spec ({e}); fix it before a backfill")))?;
    if spec.mode != Mode::Single {
        return Err(ApiError::bad_request(
            Some("job".to_owned()),
            format!("job {job:?} is broadcast or sharded; a backfill runs single-execution jobs only"),
        ));
    }
    let (ticks, mut excluded) = range_ticks(&st, &job, &spec, &range).await?;
    let tick_records = tick_records(&st, &job, &range).await?;
    let (items, more) = select(&ticks, &tick_records, request.which);
    excluded.extend(more);
    excluded.sort_by_key(|e| e.at_ms);
    if !request.dry_run && items.len() > usize::try_from(range.max_runs).unwrap_or(usize::MAX) {
        return Err(ApiError::bad_request(
            Some("max_runs".to_owned()),
            format!(
                "the range selects {} ticks, more than max_runs ({}): narrow the range or raise max_runs (at most {})",
                items.len(),
                range.max_runs,
                etcron_model::backfill::MAX_BACKFILL_RUNS
            ),
        ));
    }
    let backfill = Backfill {
        from_ms: range.from_ms,
        to_ms: range.to_ms,
        which: request.which,
        overlap: request.overlap,
        parallel: range.parallel,
        items,
        by: actor(caller.as_ref()),
        at_ms: now,
        reason: request.reason.clone(),
        cancelled: None,
    };
    if request.dry_run {
        return Ok(Json(dry_run_view(&job, &backfill, &excluded, range.max_runs)).into_response());
    }
    if backfill.items.is_empty() {
        return Err(ApiError::bad_request(
            Some("which".to_owned()),
            format!(
                "no tick from {} to {} qualifies (which: {}); see a dry run for why",
                rfc3339_ms(range.from_ms),
                rfc3339_ms(range.to_ms),
                serde_json::to_value(request.which).unwrap_or_default().as_str().unwrap_or_default()
            ),
        ));
    }
    let id = format!("{now:x}{:04x}", rand::random::<u16>());
    let retired = retire(&st, &job).await?;
    write(&st, (&job, &id), &backfill, (stored_job.mod_revision, &retired)).await?;
    let body = view(&job, &id, &backfill, &HashMap::new(), true);
    let detail = crate::layers::audit::AuditDetail {
        teams: crate::layers::audit::teams([team_of(&stored_job.value)]),
        detail: Some(json!({ "backfill": id, "ticks": backfill.items.len(), "which": request.which })),
        ..Default::default()
    };
    Ok(with_audit((StatusCode::CREATED, Json(body)).into_response(), detail))
}

/// A dry run's answer: every tick it would run (also beyond `max_runs`, which a real one refuses).
fn dry_run_view(job: &str, b: &Backfill, excluded: &[Excluded], max_runs: u32) -> Value {
    let ticks: Vec<Value> = b
        .items
        .iter()
        .map(|i| json!({ "at": rfc3339_ms(i.at_ms), "execution_id": i.execution(job).to_string() }))
        .collect();
    let shown: Vec<Value> =
        excluded.iter().take(MAX_EXCLUDED_SHOWN).map(|e| json!({ "at": rfc3339_ms(e.at_ms), "why": e.why })).collect();
    json!({
        "dry_run": true,
        "job": job,
        "from": rfc3339_ms(b.from_ms),
        "to": rfc3339_ms(b.to_ms),
        "which": b.which,
        "overlap": b.overlap,
        "max_parallel": b.parallel,
        "count": ticks.len(),
        "max_runs": max_runs,
        "ticks": ticks,
        "excluded_count": excluded.len(),
        "excluded": shown,
    })
}

/// The schedule's ticks in the range, and those a skip calendar of the job leaves out.
async fn range_ticks(
    st: &AppState,
    job: &str,
    spec: &JobSpec,
    range: &Range,
) -> ApiResult<(Vec<UnixMs>, Vec<Excluded>)> {
    let schedule = spec.parsed_schedule(job)?;
    let mut calendars = Vec::new();
    for name in &spec.skip_calendars {
        let resp = etcd("calendar_get", st.client.kv_client().get(st.keys.calendar(name), None)).await?;
        if let Some(c) = resp.kvs().first().and_then(|kv| serde_json::from_slice::<Calendar>(kv.value()).ok()) {
            calendars.push((name, c));
        }
    }
    let (mut ticks, mut excluded) = (Vec::new(), Vec::new());
    let mut at = schedule.next_after(range.from_ms - 1);
    while let Some(t) = at.filter(|t| *t <= range.to_ms) {
        if ticks.len() + excluded.len() >= MAX_BACKFILL_SCAN {
            return Err(ApiError::bad_request(
                Some("from".to_owned()),
                format!("the range holds more than {MAX_BACKFILL_SCAN} ticks of the schedule: narrow it"),
            ));
        }
        match calendars.iter().find_map(|(name, c)| c.covers(t).map(|day| (name, day))) {
            Some((name, day)) => {
                excluded.push(Excluded { at_ms: t, why: format!("skip calendar {name:?} lists {day}") })
            }
            None => ticks.push(t),
        }
        at = schedule.next_after(t);
    }
    Ok((ticks, excluded))
}

/// What the records say about each schedule tick of the range.
async fn tick_records(st: &AppState, job: &str, range: &Range) -> ApiResult<BTreeMap<UnixMs, TickRecords>> {
    let limit = MAX_BACKFILL_SCAN * 4;
    let Some(found) = records(st.store.tick_records(job, (range.from_ms, range.to_ms), limit)).await? else {
        return Err(ApiError::bad_request(
            Some("from".to_owned()),
            format!("the range holds more than {limit} execution records: narrow it"),
        ));
    };
    let mut by_tick: BTreeMap<UnixMs, TickRecords> = BTreeMap::new();
    for (id, status) in found {
        if let Tick::Scheduled(at) = id.tick {
            by_tick.entry(at).or_default().add(id.attempt, status);
        }
    }
    Ok(by_tick)
}

/// The backfills to delete so that one more fits: the oldest finished or cancelled ones beyond
/// `MAX_BACKFILLS_PER_JOB - 1`. 409 when every kept one is still going.
async fn retire(st: &AppState, job: &str) -> ApiResult<Vec<String>> {
    let all = stored(st, job).await?;
    let excess = (all.len() + 1).saturating_sub(MAX_BACKFILLS_PER_JOB);
    if excess == 0 {
        return Ok(Vec::new());
    }
    let statuses = statuses_of(st, job, &all.iter().map(|(_, b)| b).collect::<Vec<_>>()).await?;
    let retired: Vec<String> = all
        .iter()
        .filter(|(id, b)| view(job, id, b, &statuses, false).state != "running")
        .take(excess)
        .map(|(id, _)| id.clone())
        .collect();
    if retired.len() < excess {
        return Err(ApiError::conflict(format!(
            "job {job:?} has {} backfills still going (at most {MAX_BACKFILLS_PER_JOB} are kept): cancel one or wait",
            all.len()
        )));
    }
    Ok(retired)
}

/// Writes the backfill, its first `parallel` run requests and the retired backfills' deletes in
/// one transaction, while the job is as read (its ticks were computed from that spec).
async fn write(
    st: &AppState,
    (job, id): (&str, &str),
    backfill: &Backfill,
    (job_revision, retired): (i64, &[String]),
) -> ApiResult<()> {
    let key = st.keys.backfill(job, id);
    let mut ops =
        vec![TxnOp::put(key.as_str(), serde_json::to_vec(backfill).map_err(|e| ApiError::internal(&e))?, None)];
    for index in backfill.first_indexes() {
        let request = backfill.request((job, id), index, backfill.at_ms);
        let value = serde_json::to_vec(&request).map_err(|e| ApiError::internal(&e))?;
        ops.push(TxnOp::put(st.keys.trigger(job, &Backfill::request_id(id, index)), value, None));
    }
    ops.extend(retired.iter().map(|old| TxnOp::delete(st.keys.backfill(job, old), None)));
    let txn = Txn::new()
        .when([
            Compare::mod_revision(st.keys.job(job), CompareOp::Equal, job_revision),
            Compare::version(key.as_str(), CompareOp::Equal, 0),
        ])
        .and_then(ops);
    let resp = etcd("backfill_create", st.client.kv_client().txn(txn)).await?;
    if !resp.succeeded() {
        return Err(ApiError::conflict(format!("job {job:?} changed while the backfill was prepared: try again")));
    }
    Ok(())
}
