//! A job's saved versions (`{ns}/history/{job}/…`, written with each save: see `job_store`):
//! the list, the difference between two, and a rollback that saves an old one again.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use etcd_client::{GetOptions, Txn, TxnOp, TxnOpResponse};
use etcron_model::diff::diff;
use etcron_model::rfc3339_ms;
use etcron_model::spec::JobSpec;
use etcron_model::stored::SpecVersion;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::http::*;
use super::jobs::{view_spec, with_etag};
use crate::access::{team_of, Scope};
use crate::backend::AppState;
use crate::error::{etcd, ApiError, ApiResult};
use crate::job_store::{Change, Precondition, Write, Written};
use crate::layers::audit::RequestId;
use crate::layers::auth::Caller;

/// One saved version as the API shows it.
#[derive(Debug, Serialize)]
pub(super) struct VersionView {
    /// The job's own count of saves: 1 for its first, one more for each save since (the job
    /// key's etcd version then; a job deleted and created again starts at 1).
    version: i64,
    /// The revision the spec was saved at (the job's `revision` then).
    revision: i64,
    /// RFC 3339.
    at: String,
    by: String,
    via: String,
    /// The tool, as the client said (`etcronctl apply`, `console`).
    #[serde(skip_serializing_if = "Option::is_none")]
    client: Option<String>,
    /// The file, as the client said (`jobs/backup.toml`).
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<String>,
    request_id: Option<String>,
    /// A rollback: the revision it saved again.
    restored: Option<i64>,
    /// The version the job holds now.
    current: bool,
    spec: Value,
}

/// The saved versions of `name`, newest first, and the job's revision and team now; 404 when
/// the job does not exist or the caller does not see it (the versions are the job's: whoever
/// sees the job now sees its history, which may show teams it had before). The job and its
/// versions are read at one revision, so the version numbers count from the job's own.
async fn versions(st: &AppState, name: &str, scope: &Scope) -> ApiResult<(Vec<VersionView>, i64, Option<String>)> {
    job_name(name)?;
    st.jobs().read(name, scope).await?;
    let mut kv = st.client.kv_client();
    let txn = Txn::new().and_then([
        TxnOp::get(st.keys.job(name), None),
        TxnOp::get(st.keys.history_of(name), Some(GetOptions::new().with_prefix())),
    ]);
    let resp = etcd("history_list", kv.txn(txn)).await?;
    let mut gets = resp.op_responses().into_iter().filter_map(|op| match op {
        TxnOpResponse::Get(g) => Some(g),
        _ => None,
    });
    let (now, history) = (gets.next(), gets.next());
    // The job as read with its versions (a save between the two reads is in both).
    let Some(now) = now.as_ref().and_then(|g| g.kvs().first()) else {
        return Err(crate::access::Scope::no_job(name));
    };
    let mut items: Vec<_> = history.as_ref().map(|g| g.kvs().iter().collect()).unwrap_or_default();
    items.sort_unstable_by_key(|item| std::cmp::Reverse(item.create_revision()));
    // Every save of the job key writes one version in its transaction, and pruning drops the
    // oldest: the newest version is the key's version, each older one one less.
    let out = items
        .into_iter()
        .zip((1..=now.version()).rev())
        .filter_map(|(item, version)| {
            let v: SpecVersion = serde_json::from_slice(item.value()).ok()?;
            Some(VersionView {
                version,
                revision: item.create_revision(),
                at: rfc3339_ms(v.at_ms),
                by: v.by,
                via: v.via,
                client: v.client,
                source: v.source,
                request_id: v.request_id,
                restored: v.restored,
                current: item.create_revision() == now.mod_revision(),
                spec: v.spec,
            })
        })
        .collect();
    Ok((out, now.mod_revision(), team_of(now.value())))
}

/// `GET /api/jobs/{job}/history`.
pub(super) async fn history(
    State(st): State<AppState>,
    Path(name): Path<String>,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Response> {
    let (versions, revision, _) = versions(&st, &name, &scope).await?;
    Ok(Json(json!({ "job": name, "revision": revision, "versions": versions })).into_response())
}

#[derive(Debug, Deserialize)]
pub(super) struct DiffQuery {
    from: Option<String>,
    to: Option<String>,
}

/// A revision in a query: digits naming a saved version.
fn revision_param(field: &str, value: Option<&str>) -> ApiResult<Option<i64>> {
    value
        .map(|v| {
            v.parse::<i64>().ok().filter(|r| *r > 0).ok_or_else(|| {
                ApiError::bad_request(
                    Some(field.to_owned()),
                    format!("{field} must be a revision (a positive integer)"),
                )
            })
        })
        .transpose()
}

/// The saved version at `revision`, or a 404 naming `field`.
fn version_at<'a>(versions: &'a [VersionView], revision: i64, field: &str) -> ApiResult<&'a VersionView> {
    versions.iter().find(|v| v.revision == revision).ok_or_else(|| ApiError {
        field: Some(field.to_owned()),
        ..ApiError::not_found(format!("no saved version at revision {revision}"))
    })
}

/// `GET /api/jobs/{job}/history/diff?from=R1&to=R2`: what changed from one saved version to
/// another (`to` defaults to the current one), field by field; secrets show as `null`.
pub(super) async fn history_diff(
    State(st): State<AppState>,
    Path(name): Path<String>,
    query: Result<Query<DiffQuery>, axum::extract::rejection::QueryRejection>,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Response> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(None, e.body_text()))?;
    let from = revision_param("from", query.from.as_deref())?
        .ok_or_else(|| ApiError::bad_request(Some("from".to_owned()), "from is required: a revision"))?;
    let to = revision_param("to", query.to.as_deref())?;
    let (versions, current, _) = versions(&st, &name, &scope).await?;
    let to = to.unwrap_or(current);
    let (old, new) = (version_at(&versions, from, "from")?, version_at(&versions, to, "to")?);
    Ok(Json(json!({ "job": name, "from": from, "to": to, "changes": diff(&old.spec, &new.spec) })).into_response())
}

/// `POST /api/jobs/{job}/rollback` with `{"revision": R}` (and `If-Match`): saves the spec of
/// version R again as the job's newest version. Its secrets were withheld in the history, so
/// the stored ones are kept (only for the same destination, as for any save).
pub(super) async fn rollback(
    State(st): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    (caller, request): (Option<axum::Extension<Caller>>, Option<axum::Extension<RequestId>>),
    axum::Extension(scope): axum::Extension<Scope>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let body = body_bytes(body)?;
    let shape = "{\"revision\": 41}";
    let fields = object_body(&body, &["revision"], shape)?
        .ok_or_else(|| ApiError::bad_request(Some("revision".to_owned()), "revision is required"))?;
    let target = fields.get("revision").and_then(Value::as_i64).filter(|r| *r > 0).ok_or_else(|| {
        ApiError::bad_request(Some("revision".to_owned()), "revision must be the revision of a saved version")
    })?;
    let (versions, _, _) = versions(&st, &name, &scope).await?;
    let version = version_at(&versions, target, "revision")?;
    let spec = JobSpec::from_value(version.spec.clone())?;
    let precondition = Precondition { expected: if_match(&headers)?, create_only: false };
    let write = Write { job: name.clone(), change: Change::Put(Box::new(spec)), precondition, source: None };
    let mut origin = origin(caller.as_ref(), request.as_ref(), format!("POST /api/jobs/{name}/rollback"));
    origin.restored = Some(target);
    origin.client = client_notes(&headers)?.0;
    let jobs = st.jobs();
    if let Err(throttled) = jobs.charge(std::slice::from_ref(&write), &scope) {
        return Ok(throttled.into_response());
    }
    let outcome = jobs.apply(vec![write], &origin, &scope).await.outcomes.pop();
    let Some(Written::Saved { revision, created_revision, spec, before, pause, .. }) = outcome.transpose()? else {
        return Err(ApiError::internal(&"a rollback answered otherwise"));
    };
    tracing::info!(job = %name, revision, restored = target, "job rolled back");
    let job = view_spec(name, &spec, revision, created_revision, None, pause.as_ref());
    let detail = crate::layers::audit::AuditDetail {
        teams: crate::layers::audit::teams([before.as_deref().and_then(team_of), spec.team.clone()]),
        before: before.as_deref().and_then(crate::layers::audit::audited),
        after: Some(job.spec.clone()),
        detail: Some(json!({ "restored": target })),
    };
    Ok(with_audit(with_etag(StatusCode::OK, &job), detail))
}
