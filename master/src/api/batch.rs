//! `POST /api/batch`: many job saves and deletes in one request, each with its own
//! precondition, answered one by one (see `JobStore::apply` and `plan`).

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use etcron_model::spec::{validate_name, JobSpec};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::backend::AppState;
use crate::error::ApiError;
use crate::error::ApiResult;
use crate::job_store::{Change, Planned, Precondition, Write, Written};

use super::http::*;

/// Most changes one `POST /api/batch` may carry (the body is also limited to 1 MiB).
pub const MAX_BATCH_CHANGES: usize = 500;

/// One change of a `POST /api/batch`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BatchChange {
    job: String,
    op: BatchOp,
    #[serde(default)]
    spec: Option<Value>,
    #[serde(default)]
    if_match: Option<i64>,
    #[serde(default)]
    if_none_match: Option<String>,
    /// The file the spec came from (`jobs/backup.toml`), kept in its saved version.
    #[serde(default)]
    source: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum BatchOp {
    Put,
    Delete,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BatchBody {
    changes: Vec<Value>,
    /// Answer what each change would do, change nothing.
    #[serde(default)]
    dry_run: bool,
}

/// A change of a batch: its job, its op, and the write, or why the change alone is refused.
pub(super) type BatchItem = (String, BatchOp, ApiResult<Write>);

/// A batch change as a job write; its own errors (bad spec, bad precondition) name fields
/// relative to the change (`spec.task.command`, `if_match`).
pub(super) fn batch_write(change: BatchChange) -> BatchItem {
    let BatchChange { job, op, spec, if_match, if_none_match, source } = change;
    let write = (|| {
        validate_name(&job).map_err(|e| ApiError::bad_request(Some("job".to_owned()), e.message))?;
        let expected = match if_match {
            Some(rev) if rev <= 0 => {
                return Err(ApiError::bad_request(
                    Some("if_match".to_owned()),
                    "if_match must be a job revision (a positive integer)",
                ));
            }
            rev => rev,
        };
        let create_only = match if_none_match.as_deref() {
            None => false,
            Some("*") if op == BatchOp::Put && expected.is_none() => true,
            Some("*") if op == BatchOp::Put => {
                return Err(ApiError::bad_request(
                    Some("if_none_match".to_owned()),
                    "give if_match or if_none_match, not both",
                ));
            }
            Some(_) => {
                return Err(ApiError::bad_request(
                    Some("if_none_match".to_owned()),
                    "if_none_match must be \"*\" (create only), and only on a put",
                ));
            }
        };
        let change = match (op, spec) {
            (BatchOp::Put, Some(spec)) => {
                Change::Put(Box::new(JobSpec::from_value(spec).map_err(|e| in_spec(ApiError::from(e)))?))
            }
            (BatchOp::Put, None) => {
                return Err(ApiError::bad_request(Some("spec".to_owned()), "a put needs the job's spec"))
            }
            (BatchOp::Delete, None) => Change::Delete,
            (BatchOp::Delete, Some(_)) => {
                return Err(ApiError::bad_request(Some("spec".to_owned()), "a delete takes no spec"));
            }
        };
        if let Some(why) = source.as_deref().and_then(etcron_model::stored::client_note_error) {
            return Err(ApiError::bad_request(Some("source".to_owned()), format!("source {why}")));
        }
        Ok(Write { job: job.clone(), change, precondition: Precondition { expected, create_only }, source })
    })();
    (job, op, write)
}

/// An error about a spec as a batch answers it: its field named within the change.
pub(super) fn in_spec(mut e: ApiError) -> ApiError {
    e.field = Some(e.field.map_or_else(|| "spec".to_owned(), |f| format!("spec.{f}")));
    e
}

/// The changes of a batch body, each job at most once, and whether it is a dry run.
pub(super) fn batch_changes(body: &[u8]) -> ApiResult<(Vec<BatchItem>, bool)> {
    let body: BatchBody =
        serde_json::from_slice(body).map_err(|e| ApiError::bad_request(None, format!("invalid batch: {e}")))?;
    if body.changes.len() > MAX_BATCH_CHANGES {
        return Err(ApiError::bad_request(
            Some("changes".to_owned()),
            format!("{} changes; at most {MAX_BATCH_CHANGES} per request", body.changes.len()),
        ));
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, change) in body.changes.into_iter().enumerate() {
        let change: BatchChange = serde_json::from_value(change)
            .map_err(|e| ApiError::bad_request(Some(format!("changes[{i}]")), e.to_string()))?;
        if let Some(first) = seen.insert(change.job.clone(), i) {
            return Err(ApiError::bad_request(
                Some(format!("changes[{i}].job")),
                format!("job {:?} is already changed by changes[{first}]; one change per job", change.job),
            ));
        }
        out.push(batch_write(change));
    }
    Ok((out, body.dry_run))
}

/// `POST /api/batch`: many job saves and deletes in one request, each with its own
/// precondition, written in as few etcd transactions as they fit in and answered one by one.
/// The audit entry of a change a dry run planned (or refused), from its result.
fn planned_audit(r: &Value) -> crate::layers::audit::JobChange {
    let (job, op) = (r["job"].as_str().unwrap_or_default(), r["op"].as_str().unwrap_or_default());
    let status = r["status"].as_u64().and_then(|s| u16::try_from(s).ok()).unwrap_or(0);
    crate::layers::audit::JobChange::planned(job, op, status, &r["outcome"], &r["error"])
}

/// The audit entry of a change the batch refused, from its result.
fn refused_audit(r: &Value) -> crate::layers::audit::JobChange {
    let status = r["status"].as_u64().and_then(|s| u16::try_from(s).ok()).unwrap_or(0);
    crate::layers::audit::JobChange::refused(
        r["job"].as_str().unwrap_or_default(),
        r["op"] == "delete",
        status,
        &r["error"],
    )
}

pub(super) async fn batch(
    State(st): State<AppState>,
    caller: Option<axum::Extension<crate::layers::auth::Caller>>,
    request: Option<axum::Extension<crate::layers::audit::RequestId>>,
    axum::Extension(scope): axum::Extension<crate::access::Scope>,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let (changes, dry_run) = batch_changes(&body_bytes(body)?)?;
    let client = client_notes(&headers)?.0;
    let mut results: Vec<Value> = Vec::with_capacity(changes.len());
    let mut writes = Vec::new();
    let mut slots = Vec::new();
    for (job, op, write) in changes {
        match write {
            Ok(w) => {
                slots.push(results.len());
                writes.push(w);
                results.push(Value::Null);
            }
            Err(e) => results.push(batch_result(&job, op, Err(e))),
        }
    }
    let jobs: Vec<(String, BatchOp)> = writes
        .iter()
        .map(|w| (w.job.clone(), if matches!(w.change, Change::Put(_)) { BatchOp::Put } else { BatchOp::Delete }))
        .collect();
    let specs = writes.iter().map(|w| match &w.change {
        Change::Put(spec) => Some(&**spec),
        Change::Delete => None,
    });
    let warnings = super::jobs::alert_warnings(&st, specs).await;
    if dry_run {
        let planned = st.jobs().plan(&writes, &scope).await;
        for ((slot, (job, op)), plan) in slots.iter().copied().zip(jobs).zip(planned) {
            results[slot] = planned_result(&job, op, plan.map_err(|e| batch_error(op, e.into())));
        }
        with_warnings(&mut results, &slots, warnings);
        let audit = crate::layers::audit::BatchAudit(results.iter().map(planned_audit).collect());
        let mut resp = Json(json!({ "results": results, "transactions": 0, "dry_run": true })).into_response();
        resp.extensions_mut().insert(audit);
        return Ok(resp);
    }
    let mut origin = origin(caller.as_ref(), request.as_ref(), "POST /api/batch".to_owned());
    origin.client = client;
    // Each change is checked on its own against the caller's teams (the job store's rule), and
    // answered with the status its own request would have had.
    // The whole batch is charged to the byte budgets first: it passes or is refused whole.
    let store = st.jobs();
    if let Err(throttled) = store.charge(&writes, &scope) {
        return Ok(throttled.into_response());
    }
    let applied = store.apply(writes, &origin, &scope).await;
    let mut made = BTreeMap::new();
    for ((slot, (job, op)), outcome) in slots.iter().copied().zip(jobs).zip(applied.outcomes) {
        if let Ok(w) = &outcome {
            made.insert(slot, audited(&job, w));
        }
        results[slot] = batch_result(&job, op, outcome.map_err(|e| batch_error(op, e.into())));
    }
    with_warnings(&mut results, &slots, warnings);
    let unchanged = results.iter().filter(|r| r["outcome"] == "unchanged").count();
    let changed = made.len() - unchanged;
    // Every change is audited, in order: those made with their specs, refused ones with why.
    let audit: Vec<_> =
        results.iter().enumerate().map(|(i, r)| made.remove(&i).unwrap_or_else(|| refused_audit(r))).collect();
    tracing::info!(changes = results.len(), changed, unchanged, transactions = applied.transactions, "batch applied");
    let body = json!({ "results": results, "transactions": applied.transactions });
    let mut resp = (StatusCode::OK, Json(body)).into_response();
    resp.extensions_mut().insert(crate::layers::audit::BatchAudit(audit));
    Ok(resp)
}

/// Adds each save's warnings (`warnings[i]` for the change in `results[slots[i]]`) to its
/// answer, when it went (or would go) through.
fn with_warnings(results: &mut [Value], slots: &[usize], warnings: Vec<Vec<etcron_model::spec::alerts::Warning>>) {
    for (&slot, warnings) in slots.iter().zip(warnings) {
        let went = results[slot]["outcome"].as_str().is_some_and(|o| o != "failed" && o != "deleted" && o != "delete");
        if went && !warnings.is_empty() {
            results[slot]["warnings"] = serde_json::to_value(warnings).unwrap_or(Value::Null);
        }
    }
}

/// The audit entry of a change made: a save that found the job as it sends it wrote nothing,
/// and its entry says so (`detail.unchanged`) rather than show the same spec before and after.
fn audited(job: &str, written: &Written) -> crate::layers::audit::JobChange {
    let mut change = crate::layers::audit::JobChange::of(job, written);
    if matches!(written, Written::Saved { unchanged: true, .. }) {
        change.before = None;
        change.after = None;
        change.detail = Some(json!({ "unchanged": true }));
    }
    change
}

/// The store names a spec's fields as `PUT /api/jobs/{job}` does: in a batch they are in `spec`.
pub(super) fn batch_error(op: BatchOp, e: ApiError) -> ApiError {
    if op == BatchOp::Put && e.field.is_some() {
        in_spec(e)
    } else {
        e
    }
}

/// One change's answer in a dry run: what it would do (status 200), or why it would fail.
pub(super) fn planned_result(job: &str, op: BatchOp, plan: Result<Planned, ApiError>) -> Value {
    let outcome = match plan {
        Ok(Planned::Create) => "create",
        Ok(Planned::Update { secrets_changed }) => {
            return json!({ "job": job, "op": op, "status": 200, "outcome": "update", "secrets_changed": secrets_changed });
        }
        Ok(Planned::Unchanged) => "unchanged",
        Ok(Planned::Delete) => "delete",
        Err(e) => return batch_result(job, op, Err(e)),
    };
    json!({ "job": job, "op": op, "status": 200, "outcome": outcome })
}

/// One change's answer: the status its own request would have had, and its revision or error
/// (`unchanged`: the job already was as sent, nothing was written, `revision` is its revision).
pub(super) fn batch_result(job: &str, op: BatchOp, outcome: Result<Written, ApiError>) -> Value {
    match outcome {
        Ok(Written::Saved { created, revision, created_revision, unchanged, .. }) => json!({
            "job": job, "op": op, "status": if created { 201 } else { 200 },
            "outcome": match (created, unchanged) {
                (true, _) => "created",
                (false, true) => "unchanged",
                (false, false) => "updated",
            },
            "revision": revision, "created_revision": created_revision,
        }),
        Ok(Written::Deleted { .. }) => json!({ "job": job, "op": op, "status": 204, "outcome": "deleted" }),
        Err(e) => json!({
            "job": job, "op": op, "status": e.status.as_u16(), "outcome": "failed",
            "error": { "code": e.code, "message": e.message, "field": e.field },
        }),
    }
}
