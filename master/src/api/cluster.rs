//! Probes and the cluster's state: `/healthz`, `/readyz`, `GET /api/cluster/storage`,
//! `GET /api/cluster/etcd`, `GET /api/cluster/specs`, and who the caller is (`whoami`, the
//! token list).

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use etcd_client::GetOptions;
use serde_json::{json, Value};

use crate::backend::AppState;
use crate::error::ApiError;
use crate::error::ApiResult;
use crate::layers::auth::Caller;

pub(super) async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

pub(super) async fn readyz(State(st): State<AppState>) -> (StatusCode, Json<Value>) {
    let mut kv = st.client.kv_client();
    let probe = kv.get(st.keys.jobs_prefix(), Some(GetOptions::new().with_prefix().with_count_only()));
    let etcd = match tokio::time::timeout(Duration::from_secs(2), probe).await {
        Ok(Ok(_)) => json!({ "ok": true }),
        Ok(Err(e)) => json!({ "ok": false, "error": e.to_string() }),
        Err(_) => json!({ "ok": false, "error": "timed out" }),
    };
    let mongodb = match tokio::time::timeout(Duration::from_secs(4), st.store.ping()).await {
        Ok(Ok(())) => json!({ "ok": true }),
        Ok(Err(e)) => json!({ "ok": false, "error": e.to_string() }),
        Err(_) => json!({ "ok": false, "error": "timed out" }),
    };
    let ready = etcd["ok"] == true && mongodb["ok"] == true;
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    // Neither a storage warning nor an unhealthy member makes the master unready while its
    // requests are answered: the members that have a leader serve them. `/readyz` is open to
    // anyone: it counts the members, and names none (`GET /api/cluster/etcd` does, to a global
    // role).
    let storage = st.storage.current();
    let health = etcron_common::etcd::member_health();
    let healthy = health.iter().filter(|m| m.healthy).count();
    let members = json!({ "healthy": healthy, "total": health.len() });
    // Refused stored specs: their count and a warning, never their names.
    let specs = st.specs.current().map(|c| json!({ "refused": c.refused.len(), "warning": c.warning() }));
    (
        status,
        Json(json!({
            "ready": ready, "etcd": etcd, "mongodb": mongodb, "etcd_storage": storage,
            "etcd_members": members, "job_specs": specs,
        })),
    )
}

/// `GET /api/cluster/specs`: the stored job specs this master's version refuses (they do not
/// run), as last checked (`spec_check`): those of the jobs the caller sees.
pub(super) async fn cluster_specs(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
) -> ApiResult<Json<crate::duties::spec_check::Checked>> {
    let mut checked = st.specs.current().ok_or_else(|| {
        ApiError::etcd_unavailable(&"the stored job specs have not been checked yet (at start, then every 5 min)")
    })?;
    checked.refused.retain(|r| caller.access.sees(r.team.as_deref()));
    checked.checked =
        checked.per_team.iter().filter(|(team, _)| caller.access.sees(team.as_deref())).map(|(_, n)| n).sum();
    Ok(Json(checked))
}

/// `GET /api/cluster/storage`: etcd's database size, quota, alarms and the warning, as the
/// master last polled them (`etcd_storage`).
pub(super) async fn cluster_storage(
    State(st): State<AppState>,
) -> ApiResult<Json<crate::duties::etcd_storage::Storage>> {
    st.storage
        .current()
        .map(Json)
        .ok_or_else(|| ApiError::etcd_unavailable(&"etcd's status has not been read yet (it is polled every 10 s)"))
}

/// `GET /api/cluster/etcd`: each etcd endpoint the master was given, as its probes and requests
/// see it (global viewer: it names the cluster's addresses).
pub(super) async fn cluster_etcd() -> Json<Value> {
    Json(json!({ "members": etcron_common::etcd::member_health() }))
}

/// Who the token is: `{"name", "role", "teams"}` — its global role (`null` when it has team
/// roles only) and its role per team (`anonymous`, a global admin, without auth).
pub(super) async fn whoami(axum::Extension(caller): axum::Extension<Caller>) -> Json<Value> {
    Json(caller.shown())
}

/// The namespaces this master serves, the default one (no `X-Etcron-Namespace` header) first.
pub(super) async fn namespaces(State(st): State<AppState>) -> Json<Value> {
    let list: Vec<Value> =
        st.namespaces.iter().enumerate().map(|(i, ns)| json!({ "namespace": ns, "default": i == 0 })).collect();
    Json(json!({ "namespaces": list }))
}

/// The configured tokens: names and roles, never hashes (admin only).
pub(super) async fn list_tokens(State(st): State<AppState>) -> Json<Value> {
    Json(json!({ "tokens": st.auth.list(), "enabled": st.auth.enabled() }))
}
