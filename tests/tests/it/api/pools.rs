//! Resource pools' operator surface against a real etcd and master (`PUT/GET/DELETE
//! /api/pools/{name}`): saves, errors naming the field, a job (and a batch change) naming a pool
//! that does not exist refused naming `pool`, a pool in use not deleted (409 naming the first
//! jobs), the jobs naming it (the first 100 and their total, as of every write before the read),
//! the slots held and ticks waiting as workers write them (`{ns}/poolslots/`, `{ns}/poolwait/`,
//! put straight into etcd here) in the view, in queue order; a run's own priority; mutations for
//! global admins only, and each caller seeing only its teams' jobs in a pool.

use etcron_master::layers::auth::hash_token;
use etcron_model::keys::{ExecutionId, Keys, Tick};
use etcron_model::pool::{HeldSlot, Waiting};
use etcron_tests::{now_ms, Cluster};
use reqwest::Method;
use serde_json::{json, Value};

const ADMIN: &str = "pools-admin-token-0123456789";
const GLOBAL_VIEWER: &str = "pools-global-viewer-token-0123456789";
const A_ADMIN: &str = "pools-team-a-admin-token-0123456789";

fn shell(pool: Option<&str>) -> Value {
    let mut spec = json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "true"}});
    if let Some(p) = pool {
        spec["pool"] = json!(p);
    }
    spec
}

/// A slot of `pool` held by `id` on `worker`, as a worker writes it.
async fn hold(c: &Cluster, pool: &str, slot: u32, id: &ExecutionId, worker: &str, priority: u8) -> anyhow::Result<()> {
    let keys = Keys::new(&c.namespace)?;
    let held =
        HeldSlot { execution_id: id.clone(), worker_id: worker.to_owned(), since_ms: now_ms() - 5_000, priority };
    c.etcd.client().await?.put(keys.pool_slot(pool, slot), serde_json::to_vec(&held)?, None).await?;
    Ok(())
}

/// A tick of `job` at `scheduled_ms` waiting in `pool`'s queue, as a worker writes it.
async fn wait_in(c: &Cluster, pool: &str, job: &str, scheduled_ms: i64, priority: u8) -> anyhow::Result<ExecutionId> {
    let keys = Keys::new(&c.namespace)?;
    let id = ExecutionId::new(job, Tick::Scheduled(scheduled_ms));
    let waiting = Waiting { execution_id: id.clone(), scheduled_ms, priority, since_ms: now_ms() - 1_000 };
    let key = keys.pool_wait(pool, etcron_model::pool::place(priority), scheduled_ms, &id);
    c.etcd.client().await?.put(key, serde_json::to_vec(&waiting)?, None).await?;
    Ok(id)
}

#[tokio::test(flavor = "multi_thread")]
async fn pools_are_saved_checked_shown_with_holders_and_queue_and_deleted_only_when_unused() -> anyhow::Result<()> {
    let c = Cluster::start("pools-api", 0).await?;
    // Saves: 201, then 200; the answer is the view.
    let (status, v) =
        c.call(Method::PUT, "/api/pools/db", Some(json!({"slots": 2, "description": "reporting db"}))).await?;
    assert_eq!(status, 201, "{v}");
    assert_eq!((v["name"].as_str(), v["slots"].as_u64(), v["in_use"].as_u64()), (Some("db"), Some(2), Some(0)));
    assert_eq!((v["description"].as_str(), &v["holders"], &v["jobs"]), (Some("reporting db"), &json!([]), &json!([])));
    let (status, v) = c.call(Method::PUT, "/api/pools/db", Some(json!({"slots": 3}))).await?;
    assert_eq!((status, v["slots"].as_u64(), v["description"].as_str()), (200, Some(3), Some("")), "{v}");

    // Errors name the field.
    for (path, body, field) in [
        ("/api/pools/Bad_Name", json!({"slots": 1}), Some("name")),
        ("/api/pools/x", json!({"slots": 0}), Some("slots")),
        ("/api/pools/x", json!({"slots": 10_001}), Some("slots")),
        ("/api/pools/x", json!({"description": "no slots"}), Some("slots")),
        ("/api/pools/x", json!({"slots": 1, "description": "d".repeat(1025)}), Some("description")),
        ("/api/pools/x", json!({"slots": 1, "max": 2}), Some("max")),
        ("/api/pools/x", json!([1]), None),
    ] {
        let (status, e) = c.call(Method::PUT, path, Some(body.clone())).await?;
        assert_eq!((status, e["error"]["field"].as_str()), (400, field), "{body}: {e}");
    }
    for method in [Method::GET, Method::DELETE] {
        let (status, e) = c.call(method.clone(), "/api/pools/nope", None).await?;
        assert_eq!(status, 404, "{method}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("no pool \"nope\""), "{e}");
    }

    // A job may name only a pool that exists: alone, in a batch, in a dry run.
    let (status, e) = c.call(Method::PUT, "/api/jobs/report", Some(shell(Some("other")))).await?;
    assert_eq!((status, e["error"]["field"].as_str()), (400, Some("pool")), "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(message.contains("no pool \"other\"") && message.contains("PUT /api/pools/other"), "{message}");
    for dry_run in [false, true] {
        let batch = json!({"dry_run": dry_run, "changes": [
            {"job": "report", "op": "put", "spec": shell(Some("other"))},
            {"job": "plain", "op": "put", "spec": shell(None)}]});
        let (status, v) = c.call(Method::POST, "/api/batch", Some(batch)).await?;
        assert_eq!(status, 200, "{v}");
        let results = v["results"].as_array().unwrap();
        assert_eq!(
            (results[0]["status"].as_u64(), results[0]["error"]["field"].as_str()),
            (Some(400), Some("spec.pool"))
        );
        assert!(results[1]["status"].as_u64().unwrap() < 300, "the other change goes through: {v}");
    }
    c.put_job("report", shell(Some("db"))).await?;
    c.put_job("export", shell(Some("db"))).await?;

    // What workers write, shown: the slots held (by index) and the queue (priority, then time).
    let report = ExecutionId::new("report", Tick::Scheduled(1_000));
    hold(&c, "db", 0, &report, "w1", 50).await?;
    hold(&c, "db", 1, &report, "w1", 50).await?;
    let late_urgent = wait_in(&c, "db", "export", 9_000, 90).await?;
    let early = wait_in(&c, "db", "report", 2_000, 50).await?;
    let late = wait_in(&c, "db", "report", 3_000, 50).await?;
    let v = c.get("/api/pools/db").await?;
    assert_eq!(v["in_use"], 2, "{v}");
    assert_eq!(v["jobs"], json!(["export", "report"]), "{v}");
    let holder = &v["holders"][1];
    assert_eq!((holder["slot"].as_u64(), holder["job"].as_str()), (Some(1), Some("report")), "{v}");
    assert_eq!((holder["execution_id"].as_str(), holder["worker_id"].as_str()), (Some("report@1000#1"), Some("w1")));
    assert!(holder["since"].as_str().unwrap().ends_with('Z') && holder["priority"] == 50, "{holder}");
    let order: Vec<&str> =
        v["waiting"].as_array().unwrap().iter().map(|w| w["execution_id"].as_str().unwrap()).collect();
    assert_eq!(order, [late_urgent.to_string(), early.to_string(), late.to_string()], "{v}");
    assert_eq!(v["waiting"][0]["scheduled_at"], "1970-01-01T00:00:09.000Z", "{v}");
    let listed = c.get("/api/pools").await?;
    assert_eq!(listed["pools"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["pools"][0], v, "the list shows each pool as GET does");

    // Many jobs naming it: the view names the first 100 by name and counts them all; the
    // refused delete names 10.
    let many: Vec<Value> =
        (0..101).map(|i| json!({"job": format!("z-{i:03}"), "op": "put", "spec": shell(Some("db"))})).collect();
    assert_eq!(c.call(Method::POST, "/api/batch", Some(json!({"changes": many}))).await?.0, 200);
    let v = c.get("/api/pools/db").await?;
    let jobs: Vec<&str> = v["jobs"].as_array().unwrap().iter().map(|j| j.as_str().unwrap()).collect();
    assert_eq!(
        (jobs.len(), &jobs[..3], jobs[99], v["jobs_total"].as_u64()),
        (100, &["export", "report", "z-000"][..], "z-097", Some(103))
    );
    let (status, e) = c.call(Method::DELETE, "/api/pools/db", None).await?;
    assert_eq!(status, 409, "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(message.contains("pool \"db\" is used by jobs: export, report, z-000, "), "{message}");
    assert!(message.contains(", z-007 and 93 more;"), "{message}");
    let gone: Vec<Value> = (0..101).map(|i| json!({"job": format!("z-{i:03}"), "op": "delete"})).collect();
    assert_eq!(c.call(Method::POST, "/api/batch", Some(json!({"changes": gone}))).await?.0, 200);

    // In use: no delete, naming the jobs; once no job names it, gone.
    let (status, e) = c.call(Method::DELETE, "/api/pools/db", None).await?;
    assert_eq!(status, 409, "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(message.contains("pool \"db\" is used by jobs: export, report;"), "{message}");
    c.put_job("report", shell(None)).await?;
    assert_eq!(c.call(Method::DELETE, "/api/jobs/export", None).await?.0, 204);
    let (status, e) = c.call(Method::DELETE, "/api/pools/db", None).await?;
    assert_eq!(status, 204, "{e}");
    assert_eq!(c.call(Method::GET, "/api/pools/db", None).await?.0, 404);
    assert_eq!(c.get("/api/pools").await?, json!({"pools": []}));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_carries_its_own_priority_to_the_workers() -> anyhow::Result<()> {
    let c = Cluster::start("pools-run-priority", 0).await?;
    c.put_job("urgent", shell(None)).await?;
    let (status, v) = c.call(Method::POST, "/api/jobs/urgent/run", Some(json!({"priority": 90}))).await?;
    assert_eq!((status, v["priority"].as_u64()), (202, Some(90)), "{v}");
    // No worker runs here: the run request waits in etcd, as workers will read it.
    let keys = Keys::new(&c.namespace)?;
    let opts = etcd_client::GetOptions::new().with_prefix();
    let resp = c.etcd.client().await?.get(keys.job_trigger_prefix("urgent"), Some(opts)).await?;
    let request: etcron_model::stored::TriggerRequest = serde_json::from_slice(resp.kvs()[0].value())?;
    assert_eq!(request.priority, Some(90));
    for bad in [json!(101), json!(-1), json!("high"), json!(1.5)] {
        let (status, e) = c.call(Method::POST, "/api/jobs/urgent/run", Some(json!({"priority": bad}))).await?;
        assert_eq!((status, e["error"]["field"].as_str()), (400, Some("priority")), "{bad}: {e}");
    }
    let (status, v) = c.call(Method::POST, "/api/jobs/urgent/run", None).await?;
    assert!(status == 202 && v.get("priority").is_none(), "{v}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn only_global_admins_change_pools_and_each_caller_sees_its_teams_jobs_in_them() -> anyhow::Result<()> {
    let entry = |name: &str, token: &str, roles: &str| {
        format!("[[auth.tokens]]\nname = {name:?}\n{roles}\nsha256 = {:?}\n", hash_token(token))
    };
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("master.toml");
    let tokens = entry("global-viewer", GLOBAL_VIEWER, "role = \"viewer\"")
        + &entry("a-admin", A_ADMIN, "teams = { a = \"admin\" }");
    std::fs::write(&config, tokens)?;
    let config = config.display().to_string();
    let c = Cluster::start_with("pools-teams", 0, false, &["--config", &config, "--api-token", ADMIN]).await?;
    let (status, _) = c.call(Method::PUT, "/api/pools/db", Some(json!({"slots": 2}))).await?;
    assert_eq!(status, 201);
    for token in [GLOBAL_VIEWER, A_ADMIN] {
        let (status, e) = c.call_as(token, Method::PUT, "/api/pools/db", Some(json!({"slots": 5}))).await?;
        assert_eq!(status, 403, "{e}");
        assert_eq!(c.call_as(token, Method::PUT, "/api/pools/new", Some(json!({"slots": 5}))).await?.0, 403);
        assert_eq!(c.call_as(token, Method::DELETE, "/api/pools/db", None).await?.0, 403);
    }
    assert_eq!(c.get("/api/pools/db").await?["slots"], 2, "unchanged");

    // A team admin may name the pool in its team's job; another team's job in it is not shown
    // to it, nor is what that job holds.
    let mut a_job = shell(Some("db"));
    a_job["team"] = json!("a");
    let (status, e) = c.call_as(A_ADMIN, Method::PUT, "/api/jobs/a-job", Some(a_job)).await?;
    assert_eq!(status, 201, "{e}");
    let mut b_job = shell(Some("db"));
    b_job["team"] = json!("b");
    c.put_job("b-job", b_job).await?;
    hold(&c, "db", 0, &ExecutionId::new("a-job", Tick::Scheduled(1_000)), "w1", 50).await?;
    hold(&c, "db", 1, &ExecutionId::new("b-job", Tick::Scheduled(1_000)), "w2", 50).await?;
    wait_in(&c, "db", "b-job", 2_000, 50).await?;
    for token in [ADMIN, GLOBAL_VIEWER] {
        let (status, v) = c.call_as(token, Method::GET, "/api/pools/db", None).await?;
        assert_eq!((status, &v["jobs"]), (200, &json!(["a-job", "b-job"])), "{v}");
        assert_eq!(v["holders"][1]["job"], "b-job", "{v}");
    }
    let (status, v) = c.call_as(A_ADMIN, Method::GET, "/api/pools", None).await?;
    assert_eq!(status, 200, "{v}");
    let pool = &v["pools"][0];
    assert_eq!((&pool["jobs"], pool["in_use"].as_u64()), (&json!(["a-job"]), Some(2)), "{pool}");
    assert_eq!(pool["holders"][0]["execution_id"], "a-job@1000#1", "{pool}");
    let hidden = &pool["holders"][1];
    assert!(hidden["execution_id"].is_null() && hidden["job"].is_null() && hidden["worker_id"] == "w2", "{pool}");
    assert!(pool["waiting"][0]["execution_id"].is_null(), "{pool}");

    // Deleting it names every job, whoever's.
    let (status, e) = c.call(Method::DELETE, "/api/pools/db", None).await?;
    assert_eq!(status, 409);
    assert!(e["error"]["message"].as_str().unwrap().contains("a-job, b-job"), "{e}");
    Ok(())
}
