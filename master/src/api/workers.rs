//! `GET /api/workers`: the live workers, what each runs, its cordon, and the jobs no worker
//! that is not cordoned matches (from the job index: the first [`UNMATCHED_SHOWN`] and their
//! total). Every caller sees the workers; of the executions they run and the unmatched jobs,
//! only those of the jobs it sees. `POST /api/workers/{id}/cordon|drain|uncordon`
//! (a global admin's): the `{ns}/cordon/{id}` key that takes a worker out of the race for new
//! runs, and what is still running on it. `GET /api/workers/departed`: workers the records of
//! the last day name that are not live now.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::Json;
use etcd_client::GetOptions;
use etcron_model::keys::{validate_id, ExecutionId, Key};
use etcron_model::stored::{Cordon, Placement, RunningExecution, WorkerInfo};
use serde::Serialize;
use serde_json::{json, Value};

use crate::access::Scope;
use crate::backend::AppState;
use crate::error::ApiError;
use crate::error::{etcd, ApiResult};

use super::http::indexed;
use super::jobs::live_workers;

/// Every cordon (`{ns}/cordon/`), by worker id: of live workers, and of workers gone since.
pub(super) async fn all_cordons(st: &AppState) -> ApiResult<BTreeMap<String, Cordon>> {
    let mut kv = st.client.kv_client();
    let resp = etcd("list_cordons", kv.get(st.keys.cordon_prefix(), Some(GetOptions::new().with_prefix()))).await?;
    Ok(resp
        .kvs()
        .iter()
        .filter_map(|item| match st.keys.parse(item.key()) {
            Some(Key::Cordon(id)) => Some((id, Cordon::from_stored(item.value()))),
            _ => None,
        })
        .collect())
}

/// The live workers that race for new runs: those not cordoned.
pub(super) async fn open_workers(st: &AppState) -> ApiResult<Vec<(String, WorkerInfo)>> {
    let (workers, cordons) = tokio::try_join!(live_workers(st), all_cordons(st))?;
    Ok(workers.into_iter().filter(|(id, _)| !cordons.contains_key(id)).collect())
}

#[derive(Debug, Serialize)]
pub(super) struct RunningView {
    id: String,
    job: String,
    worker_id: String,
    started_at: String,
    pid: Option<u32>,
    fencing_token: i64,
}

/// Unmatched jobs `GET /api/workers` names (the first in name order); `unmatched_total`
/// counts them all.
pub(super) const UNMATCHED_SHOWN: usize = 100;

pub(super) async fn list_workers(
    State(st): State<AppState>,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Json<Value>> {
    let running = async {
        let mut kv = st.client.kv_client();
        etcd("list_running", kv.get(st.keys.running_prefix(), Some(GetOptions::new().with_prefix()))).await
    };
    let (workers, running, cordons) = tokio::try_join!(live_workers(&st), running, all_cordons(&st))?;
    let open: Vec<(String, WorkerInfo)> = workers.iter().filter(|(id, _)| !cordons.contains_key(id)).cloned().collect();
    let access = &scope.caller.access;
    let markers: Vec<(ExecutionId, &etcd_client::KeyValue)> = running
        .kvs()
        .iter()
        .filter_map(|item| match st.keys.parse(item.key()) {
            Some(Key::Running(id)) => Some((id, item)),
            _ => None,
        })
        .collect();
    // From the job index, as etcd was when the running markers were read: which running jobs
    // the caller sees (a job deleted meanwhile has no team to tell: it is for global roles),
    // and the valid jobs (the others are not scheduled at all) no open worker may run.
    let revision = running.header().map_or(0, |h| h.revision());
    let (shown, (unmatched, unmatched_total)) = indexed(&st, revision, |ix| {
        let shown: Vec<bool> = markers
            .iter()
            .map(|(id, _)| access.role.is_some() || ix.team(&id.job).is_some_and(|team| access.sees(team)))
            .collect();
        let placed = |p: &Placement| open.iter().any(|(_, w)| w.may_place(p));
        (shown, ix.unmatched(placed, |team| access.sees(team), UNMATCHED_SHOWN))
    })
    .await?;
    let mut by_worker: BTreeMap<String, Vec<RunningView>> = BTreeMap::new();
    for ((id, item), _) in markers.iter().zip(shown).filter(|(_, shown)| *shown) {
        let Some(r) = RunningExecution::from_stored(id.clone(), item.value(), item.create_revision()) else {
            continue;
        };
        by_worker.entry(r.worker_id.clone()).or_default().push(RunningView {
            id: id.to_string(),
            job: id.job.clone(),
            worker_id: r.worker_id,
            started_at: r.started_at,
            pid: r.pid,
            // Written in the claim txn, so the marker's create revision is the fencing token.
            fencing_token: r.fencing_token.unwrap_or_else(|| item.create_revision()),
        });
    }
    let unmatched: Vec<Value> = unmatched.iter().map(|(job, p)| unmatched_view(job, p)).collect();
    let mut out = Vec::new();
    for (id, info) in workers {
        let mut value = serde_json::to_value(&info).map_err(|e| ApiError::internal(&e))?;
        // The live output token is for masters only.
        if let Some(fields) = value.as_object_mut() {
            fields.remove("output_token");
        }
        value["running_executions"] =
            serde_json::to_value(by_worker.remove(&id).unwrap_or_default()).unwrap_or(Value::Null);
        if let Some(cordon) = cordons.get(&id) {
            value["cordon"] = cordon_view(cordon, &info, &running_of(&running, &st, &id));
        }
        out.push(value);
    }
    Ok(Json(json!({ "workers": out, "unmatched_jobs": unmatched, "unmatched_total": unmatched_total })))
}

/// An unmatched job as the API shows it: its name and what it asks of a worker.
fn unmatched_view(job: &str, p: &Placement) -> Value {
    let mut view = json!({ "job": job, "selector": p.selector });
    if let Some(user) = &p.user {
        view["user"] = json!(user);
    }
    if let Some(team) = &p.team {
        view["team"] = json!(team);
    }
    if let Some(handler) = &p.handler {
        view["handler"] = json!(handler);
    }
    view
}

/// The running markers of worker `id` (runs past 1 s), whoever's jobs they are.
fn running_of(running: &etcd_client::GetResponse, st: &AppState, id: &str) -> Vec<String> {
    running
        .kvs()
        .iter()
        .filter_map(|item| {
            let Some(Key::Running(execution)) = st.keys.parse(item.key()) else { return None };
            let r = RunningExecution::from_stored(execution.clone(), item.value(), item.create_revision())?;
            (r.worker_id == id).then(|| execution.to_string())
        })
        .collect()
}

/// A cordon as the API shows it: the state, who and when, and for a drain whether the worker
/// is empty — its registration counts no running task and no running marker names it (the
/// count is at most 2 s old: the worker publishes it on change, every 2 s).
fn cordon_view(cordon: &Cordon, info: &WorkerInfo, markers: &[String]) -> Value {
    let mut view = json!({
        "state": if cordon.drain { "draining" } else { "cordoned" },
        "running": info.running,
        "empty": info.running == 0 && markers.is_empty(),
    });
    if let Some(by) = &cordon.by {
        view["by"] = json!(by);
    }
    if let Some(at_ms) = cordon.at_ms {
        view["at"] = json!(etcron_model::rfc3339_ms(at_ms));
    }
    view
}

/// What `POST /api/workers/{id}/…` acts on: the id checked, its registration (`None`: not live).
async fn target(st: &AppState, id: &str) -> ApiResult<Option<WorkerInfo>> {
    validate_id(id).map_err(|e| ApiError::bad_request("id".to_owned(), format!("worker {e}")))?;
    let mut kv = st.client.kv_client();
    let resp = etcd("get_worker", kv.get(st.keys.worker(id), None)).await?;
    Ok(resp.kvs().first().and_then(|item| serde_json::from_slice::<WorkerInfo>(item.value()).ok()))
}

/// `POST /api/workers/{id}/cordon`: the live worker races for nothing new; what runs on it goes
/// on. 404 for a worker that is not live.
pub(super) async fn cordon(
    st: State<AppState>,
    id: Path<String>,
    scope: axum::Extension<Scope>,
) -> ApiResult<Json<Value>> {
    set_cordon(st, id, scope, false).await
}

/// `POST /api/workers/{id}/drain`: a cordon that the operator waits out — the answer (and the
/// worker in `GET /api/workers`) says whether it is empty yet.
pub(super) async fn drain(
    st: State<AppState>,
    id: Path<String>,
    scope: axum::Extension<Scope>,
) -> ApiResult<Json<Value>> {
    set_cordon(st, id, scope, true).await
}

async fn set_cordon(
    State(st): State<AppState>,
    Path(id): Path<String>,
    axum::Extension(scope): axum::Extension<Scope>,
    drain: bool,
) -> ApiResult<Json<Value>> {
    let Some(info) = target(&st, &id).await? else {
        return Err(ApiError::not_found(format!("no live worker {id:?} (GET /api/workers lists them)")));
    };
    let cordon = Cordon { drain, by: Some(scope.caller.name.clone()), at_ms: Some(etcron_model::now_ms()) };
    let value = serde_json::to_vec(&cordon).map_err(|e| ApiError::internal(&e))?;
    let mut kv = st.client.kv_client();
    etcd("cordon_put", kv.put(st.keys.cordon(&id), value, None)).await?;
    let running = etcd("list_running", kv.get(st.keys.running_prefix(), Some(GetOptions::new().with_prefix()))).await?;
    Ok(Json(json!({ "id": id, "cordon": cordon_view(&cordon, &info, &running_of(&running, &st, &id)) })))
}

/// `POST /api/workers/{id}/uncordon`: the worker races again. Also clears the cordon of a
/// worker gone since; 404 when the worker is neither live nor cordoned.
pub(super) async fn uncordon(State(st): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let live = target(&st, &id).await?;
    let resp = etcd("cordon_delete", st.client.kv_client().delete(st.keys.cordon(&id), None)).await?;
    if live.is_none() && resp.deleted() == 0 {
        return Err(ApiError::not_found(format!("no live or cordoned worker {id:?} (GET /api/workers lists them)")));
    }
    Ok(Json(json!({ "id": id, "was_cordoned": resp.deleted() > 0 })))
}

/// How far back `GET /api/workers/departed` looks by default, and at most (`since`).
const DEPARTED_DEFAULT_MS: i64 = 86_400_000;
const DEPARTED_LOOKBACK_MAX_MS: i64 = 7 * 86_400_000;

/// `GET /api/workers/departed?since=`: the workers named by execution records scheduled in the
/// last 24 hours (or since `since`, at most 7 days back) that are not live now, the one seen
/// last first: when each was last seen, how many executions it recorded, and its last one. A
/// caller with team roles only finds them through its teams' records.
pub(super) async fn departed(
    State(st): State<AppState>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Json<Value>> {
    let now = etcron_model::now_ms();
    let mut since_ms = now - DEPARTED_DEFAULT_MS;
    for (key, value) in crate::query::Params::parse(query.as_deref(), &["since"])?.iter() {
        since_ms = crate::query::time(key, value)?;
    }
    if since_ms < now - DEPARTED_LOOKBACK_MAX_MS || since_ms > now {
        return Err(crate::query::invalid("since", "since must be within the last 7 days"));
    }
    let teams = scope.teams(None);
    let (live, seen) =
        tokio::try_join!(live_workers(&st), crate::error::records(st.store.workers_seen(since_ms, teams.as_deref())))?;
    let live: std::collections::HashSet<String> = live.into_iter().map(|(id, _)| id).collect();
    let gone: Vec<_> = seen.into_iter().filter(|w| !live.contains(&w.id)).collect();
    Ok(Json(json!({ "since": etcron_model::rfc3339_ms(since_ms), "workers": gone })))
}
