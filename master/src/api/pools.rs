//! Resource pools (`{ns}/pools/{name}`): list, read, save, delete. Jobs name one in `pool`;
//! workers hold its slots (`{ns}/poolslots/{name}/{i}`) from a run's claim to its close and
//! queue the ticks that find it full (`{ns}/poolwait/{name}/…`). A pool's view shows both as
//! etcd holds them at one revision, and the jobs naming it (the first [`JOBS_SHOWN`], and
//! their total) from the job index as of that revision.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use etcd_client::{GetOptions, GetResponse, PutOptions, Txn, TxnOp, TxnOpResponse};
use etcron_model::keys::{ExecutionId, Key};
use etcron_model::pool::{HeldSlot, Pool, Waiting};
use etcron_model::rfc3339_ms;
use serde::Serialize;
use serde_json::{json, Value};

use super::http::{body_bytes, indexed};
use crate::access::{Access, Scope};
use crate::backend::AppState;
use crate::error::{etcd, ApiError, ApiResult};
use crate::job_index::Index;

/// A pool as the API shows it: its slots, those held now and by what, the ticks waiting for
/// them in queue order, and the jobs naming it that the caller sees.
#[derive(Debug, Serialize)]
pub(super) struct PoolView {
    name: String,
    /// The revision it was last saved at.
    revision: i64,
    slots: u32,
    description: String,
    /// Slots held now (one key each), whoever holds them.
    in_use: usize,
    holders: Vec<Holder>,
    waiting: Vec<WaitingTick>,
    /// The first [`JOBS_SHOWN`] in name order.
    jobs: Vec<String>,
    jobs_total: usize,
}

/// Jobs a pool's view names (the first in name order; `jobs_total` counts them all), and jobs
/// a refused delete names.
pub(super) const JOBS_SHOWN: usize = 100;
const USERS_NAMED: usize = 10;

/// One slot held. `execution_id` and `job` are null for a job the caller does not see.
#[derive(Debug, Serialize)]
struct Holder {
    slot: u32,
    execution_id: Option<String>,
    job: Option<String>,
    worker_id: String,
    /// RFC 3339: since when the slot is held.
    since: String,
    priority: u8,
}

/// One tick waiting in a pool's queue. `execution_id` and `job` are null for a job the caller
/// does not see.
#[derive(Debug, Serialize)]
struct WaitingTick {
    execution_id: Option<String>,
    job: Option<String>,
    priority: u8,
    scheduled_at: String,
    /// RFC 3339: since when it waits.
    since: String,
}

/// What etcd holds about some pools, read at one revision.
#[derive(Default)]
struct Held {
    /// The revision read at.
    revision: i64,
    /// name → (mod revision, pool)
    pools: BTreeMap<String, (i64, Pool)>,
    /// pool → the slots held (by slot index), each with its holder when its value reads.
    slots: BTreeMap<String, BTreeMap<u32, Option<HeldSlot>>>,
    /// pool → the ticks waiting, in queue (key) order.
    waiting: BTreeMap<String, Vec<Waiting>>,
}

fn pool_name(name: &str) -> ApiResult<()> {
    etcron_model::keys::validate_job_name(name)
        .map_err(|e| ApiError::bad_request(Some("name".to_owned()), e.replace("job name", "pool name")))
}

/// The pools (all of them, or `one`), their held slots and waiting ticks: one transaction of
/// range reads.
async fn read_pools(st: &AppState, one: Option<&str>) -> ApiResult<Held> {
    let prefix = |p: String| TxnOp::get(p, Some(GetOptions::new().with_prefix()));
    let reads = match one {
        Some(name) => [
            TxnOp::get(st.keys.pool(name), None),
            prefix(st.keys.pool_slots_prefix(name)),
            prefix(st.keys.pool_wait_prefix(name)),
        ],
        None => [
            prefix(st.keys.pools_prefix()),
            prefix(st.keys.all_pool_slots_prefix()),
            prefix(st.keys.all_pool_wait_prefix()),
        ],
    };
    let resp = etcd("pool_read", st.client.kv_client().txn(Txn::new().and_then(reads))).await?;
    let gets: Vec<GetResponse> = resp
        .op_responses()
        .into_iter()
        .filter_map(|r| match r {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        })
        .collect();
    let [pools, slots, waiting] = gets.as_slice() else {
        return Err(ApiError::internal(&"the pools' read answered other than three ranges"));
    };
    let mut held = Held { revision: resp.header().map_or(0, |h| h.revision()), ..Held::default() };
    for kv in pools.kvs() {
        if let (Some(Key::Pool(name)), Ok(pool)) = (st.keys.parse(kv.key()), serde_json::from_slice(kv.value())) {
            held.pools.insert(name, (kv.mod_revision(), pool));
        }
    }
    for kv in slots.kvs() {
        if let Some((pool, i)) = st.keys.parse_pool_slot(kv.key()) {
            held.slots.entry(pool).or_default().insert(i, serde_json::from_slice(kv.value()).ok());
        }
    }
    for kv in waiting.kvs() {
        if let (Some(pool), Ok(w)) = (st.keys.parse_pool_wait(kv.key()), serde_json::from_slice(kv.value())) {
            held.waiting.entry(pool).or_default().push(w);
        }
    }
    Ok(held)
}

/// The view of pool `name` from what was read; the caller (`access`) sees the jobs of its teams
/// only, in the jobs list and in the holders and waiting ticks.
fn view(name: &str, (revision, pool): (i64, Pool), held: &mut Held, jobs: &Index, access: &Access) -> PoolView {
    let shown = |id: &ExecutionId| {
        let team = jobs.team(&id.job).flatten();
        if access.sees(team) {
            (Some(id.to_string()), Some(id.job.clone()))
        } else {
            (None, None)
        }
    };
    let slots = held.slots.remove(name).unwrap_or_default();
    let in_use = slots.len();
    let holders = slots
        .into_iter()
        .filter_map(|(slot, h)| h.map(|h| (slot, h)))
        .map(|(slot, h)| {
            let (execution_id, job) = shown(&h.execution_id);
            Holder {
                slot,
                execution_id,
                job,
                worker_id: h.worker_id,
                since: rfc3339_ms(h.since_ms),
                priority: h.priority,
            }
        })
        .collect();
    let waiting = held
        .waiting
        .remove(name)
        .unwrap_or_default()
        .into_iter()
        .map(|w| {
            let (execution_id, job) = shown(&w.execution_id);
            WaitingTick {
                execution_id,
                job,
                priority: w.priority,
                scheduled_at: rfc3339_ms(w.scheduled_ms),
                since: rfc3339_ms(w.since_ms),
            }
        })
        .collect();
    let (jobs, jobs_total) = jobs.pool_jobs(name, |team| access.sees(team), JOBS_SHOWN);
    PoolView {
        name: name.to_owned(),
        revision,
        slots: pool.slots,
        description: pool.description,
        in_use,
        holders,
        waiting,
        jobs: jobs.iter().map(|job| job.to_string()).collect(),
        jobs_total,
    }
}

/// `GET /api/pools`: every pool, by name, with what holds and waits for its slots.
pub(super) async fn list(
    State(st): State<AppState>,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Json<Value>> {
    let mut held = read_pools(&st, None).await?;
    let pools: Vec<(String, (i64, Pool))> = std::mem::take(&mut held.pools).into_iter().collect();
    let views: Vec<PoolView> = indexed(&st, held.revision, |jobs| {
        pools.into_iter().map(|(name, pool)| view(&name, pool, &mut held, jobs, &scope.caller.access)).collect()
    })
    .await?;
    Ok(Json(json!({ "pools": views })))
}

/// `GET /api/pools/{name}`.
pub(super) async fn get(
    State(st): State<AppState>,
    Path(name): Path<String>,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Json<PoolView>> {
    pool_name(&name)?;
    let mut held = read_pools(&st, Some(&name)).await?;
    let pool = held.pools.remove(&name).ok_or_else(|| ApiError::not_found(format!("no pool {name:?}")))?;
    Ok(Json(indexed(&st, held.revision, |jobs| view(&name, pool, &mut held, jobs, &scope.caller.access)).await?))
}

/// `PUT /api/pools/{name}`: creates (201) or replaces (200) a pool. Fewer slots than are held
/// now holds no run back: the pool is over until enough of them close.
pub(super) async fn put(
    State(st): State<AppState>,
    Path(name): Path<String>,
    axum::Extension(scope): axum::Extension<Scope>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    pool_name(&name)?;
    let pool = Pool::from_json(&body_bytes(body)?)?;
    let value = serde_json::to_vec(&pool).map_err(|e| ApiError::internal(&e))?;
    let opts = PutOptions::new().with_prev_key();
    let resp = etcd("pool_put", st.client.kv_client().put(st.keys.pool(&name), value, Some(opts))).await?;
    let revision = resp.header().map_or(0, |h| h.revision());
    let status = if resp.prev_key().is_some() { StatusCode::OK } else { StatusCode::CREATED };
    let mut held = read_pools(&st, Some(&name)).await?;
    // The pool is saved whatever the index says: an error says so.
    let pool_view =
        indexed(&st, held.revision, |jobs| view(&name, (revision, pool), &mut held, jobs, &scope.caller.access))
            .await
            .map_err(|e| ApiError { message: format!("pool {name:?} is saved, but {}", e.message), ..e })?;
    Ok((status, Json(pool_view)).into_response())
}

/// `DELETE /api/pools/{name}`: 404 when absent, 409 while jobs name it. A job saved naming it
/// between this check and the delete is what workers meet as a missing pool.
pub(super) async fn delete(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    pool_name(&name)?;
    // The revision to read the job index at: now.
    let now = etcd("pool_get", st.client.kv_client().get(st.keys.pool(&name), None)).await?;
    let revision = now.header().map_or(0, |h| h.revision());
    let (users, total) = indexed(&st, revision, |jobs| jobs.pool_jobs(&name, |_| true, USERS_NAMED)).await?;
    if total > 0 {
        let users: Vec<&str> = users.iter().map(|job| &**job).collect();
        let more = if total > users.len() { format!(" and {} more", total - users.len()) } else { String::new() };
        return Err(ApiError::conflict(format!(
            "pool {name:?} is used by jobs: {}{more}; give them another pool (or none) first",
            users.join(", ")
        )));
    }
    let resp = etcd("pool_delete", st.client.kv_client().delete(st.keys.pool(&name), None)).await?;
    if resp.deleted() == 0 {
        return Err(ApiError::not_found(format!("no pool {name:?}")));
    }
    Ok(StatusCode::NO_CONTENT)
}
