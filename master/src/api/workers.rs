//! `GET /api/workers`: the live workers, what each runs, and the jobs no worker matches. Every
//! caller sees the workers; of the executions they run and the unmatched jobs, only those of
//! the jobs it sees.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use etcd_client::GetOptions;
use etcron_model::keys::Key;
use etcron_model::spec::JobSpec;
use etcron_model::stored::RunningExecution;
use serde::Serialize;
use serde_json::{json, Value};

use crate::access::{team_of, Scope};
use crate::backend::AppState;
use crate::error::ApiError;
use crate::error::{etcd, ApiResult};

use super::jobs::{all_jobs, eligible, live_workers};

#[derive(Debug, Serialize)]
pub(super) struct RunningView {
    id: String,
    job: String,
    worker_id: String,
    started_at: String,
    pid: Option<u32>,
    fencing_token: i64,
}

pub(super) async fn list_workers(
    State(st): State<AppState>,
    axum::Extension(scope): axum::Extension<Scope>,
) -> ApiResult<Json<Value>> {
    let running = async {
        let mut kv = st.client.kv_client();
        etcd("list_running", kv.get(st.keys.running_prefix(), Some(GetOptions::new().with_prefix()))).await
    };
    let (workers, running, jobs) = tokio::try_join!(live_workers(&st), running, all_jobs(&st))?;
    // The jobs the caller sees (a running execution of a job deleted meanwhile has no team to
    // tell: it is for global roles).
    let visible: std::collections::HashSet<String> = jobs
        .kvs()
        .iter()
        .filter_map(|item| match st.keys.parse(item.key()) {
            Some(Key::Job(name)) if scope.caller.access.sees(team_of(item.value()).as_deref()) => Some(name),
            _ => None,
        })
        .collect();
    let sees = |job: &str| scope.caller.access.role.is_some() || visible.contains(job);
    let mut by_worker: BTreeMap<String, Vec<RunningView>> = BTreeMap::new();
    for item in running.kvs() {
        let Some(Key::Running(id)) = st.keys.parse(item.key()) else { continue };
        if !sees(&id.job) {
            continue;
        }
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
    // Jobs (valid ones: the others are not scheduled at all) that no live worker may run.
    let mut unmatched = Vec::new();
    for item in jobs.kvs() {
        let (Some(Key::Job(name)), Ok(spec)) = (st.keys.parse(item.key()), JobSpec::from_json(item.value())) else {
            continue;
        };
        if !sees(&name) {
            continue;
        }
        if eligible(&workers, &spec) == 0 {
            let mut job = json!({ "job": name, "selector": spec.selector });
            if let Some(user) = spec.run_as_user() {
                job["user"] = json!(user);
            }
            if let Some(team) = &spec.team {
                job["team"] = json!(team);
            }
            unmatched.push(job);
        }
    }
    let mut out = Vec::new();
    for (id, info) in workers {
        let mut value = serde_json::to_value(&info).map_err(|e| ApiError::internal(&e))?;
        // The live output token is for masters only.
        if let Some(fields) = value.as_object_mut() {
            fields.remove("output_token");
        }
        value["running_executions"] =
            serde_json::to_value(by_worker.remove(&id).unwrap_or_default()).unwrap_or(Value::Null);
        out.push(value);
    }
    Ok(Json(json!({ "workers": out, "unmatched_jobs": unmatched })))
}
