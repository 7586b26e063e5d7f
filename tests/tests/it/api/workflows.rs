//! Workflow runs' operator surface against a real etcd and master (`GET /api/workflows/{run}`,
//! `POST /api/workflows/{run}/resume`), without workers: the jobs extract → (ta, tb) → load are
//! joined by `after`, and the run's step keys are put into etcd as the workers' closes write
//! them. The graph's nodes, states and edges; the resume of the failed step as a run request of
//! its next attempt in the run (one key however often it is asked for), audited; 409 with no
//! failed step, 404 for an unknown run; callers see only their teams' runs, and resume needs
//! operator.

use std::time::Duration;

use etcd_client::GetOptions;
use etcron_master::layers::auth::hash_token;
use etcron_model::keys::{ExecutionId, Keys, Tick};
use etcron_model::record::{Status, TriggerKind};
use etcron_model::stored::TriggerRequest;
use etcron_model::workflow::{run_id, step_execution, Step};
use etcron_tests::{now_ms, wait_for, Cluster};
use reqwest::Method;
use serde_json::{json, Value};

const ADMIN: &str = "workflows-admin-token-0123456789";
const A_VIEWER: &str = "workflows-a-viewer-token-0123456789";
const B_OPERATOR: &str = "workflows-b-operator-token-0123456789";

/// The run of `extract`'s tick at `tick_ms`, with a step for each `(job, status, result)` as
/// the close of its execution writes it (attempt 1; `extract`, the root, its own execution).
pub(super) async fn seed_run(
    c: &Cluster,
    tick_ms: i64,
    steps: &[(&str, Status, Option<Value>)],
) -> anyhow::Result<String> {
    let keys = Keys::new(&c.namespace)?;
    let root = ExecutionId::new("extract", Tick::Scheduled(tick_ms));
    let run = run_id(&root);
    let mut etcd = c.etcd.client().await?;
    for (job, status, result) in steps {
        let (execution_id, root) =
            if *job == "extract" { (root.clone(), None) } else { (step_execution(job, &run), Some(root.clone())) };
        let step = Step { execution_id, status: *status, at_ms: now_ms(), root, result: result.clone() };
        etcd.put(keys.workflow_step(&run, job), serde_json::to_vec(&step)?, None).await?;
        if *status == Status::Succeeded {
            etcd.put(keys.workflow_ok(&run, job), Vec::new(), None).await?;
        }
    }
    Ok(run)
}

/// extract → (ta, tb) → load by `after`, of `team` when given; schedules that do not fire here.
pub(super) async fn save_diamond(c: &Cluster, team: Option<&str>) -> anyhow::Result<()> {
    for (job, after) in
        [("extract", json!([])), ("ta", json!(["extract"])), ("tb", json!(["extract"])), ("load", json!(["ta", "tb"]))]
    {
        let mut spec = json!({"schedule": "@yearly", "after": after, "task": {"kind": "shell", "command": "true"}});
        if let Some(t) = team {
            spec["team"] = json!(t);
        }
        c.put_job(job, spec).await?;
    }
    Ok(())
}

fn entry(name: &str, token: &str, roles: &str) -> String {
    format!("[[auth.tokens]]\nname = {name:?}\n{roles}\nsha256 = {:?}\n", hash_token(token))
}

/// Each step's `(job, state, attempt)` in the order shown.
fn states(v: &Value) -> Vec<(String, String, Value)> {
    let steps = v["steps"].as_array().unwrap();
    steps
        .iter()
        .map(|s| (s["job"].as_str().unwrap().to_owned(), s["state"].as_str().unwrap().to_owned(), s["attempt"].clone()))
        .collect()
}

fn expected(list: &[(&str, &str, Value)]) -> Vec<(String, String, Value)> {
    list.iter().map(|(j, s, a)| ((*j).to_owned(), (*s).to_owned(), a.clone())).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn workflow_runs_are_shown_as_graphs_and_their_failed_steps_resumed() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("master.toml");
    let tokens = [
        entry("a-view", A_VIEWER, "teams = { a = \"viewer\" }"),
        entry("b-op", B_OPERATOR, "teams = { b = \"operator\" }"),
    ];
    std::fs::write(&config, tokens.join("\n"))?;
    let config = config.display().to_string();
    let c = Cluster::start_with("workflows-api", 0, false, &["--config", &config, "--api-token", ADMIN]).await?;
    save_diamond(&c, Some("a")).await?;
    let tick = 1_764_547_200_000;
    let run = seed_run(
        &c,
        tick,
        &[
            ("extract", Status::Succeeded, Some(json!({"date": "2026-11-28"}))),
            ("ta", Status::Succeeded, Some(json!({"rows": 3}))),
            ("tb", Status::Failed, None),
        ],
    )
    .await?;

    // The graph: four nodes in layers, the four `after` edges, the run failed.
    let v = c.get(&format!("/api/workflows/{run}")).await?;
    assert_eq!((v["run"].as_str(), v["state"].as_str()), (Some(run.as_str()), Some("failed")), "{v}");
    assert_eq!((v["root"].as_str(), v["root_job"].as_str()), (Some(&*format!("extract@{tick}#1")), Some("extract")));
    let want = [
        ("extract", "succeeded", json!(1)),
        ("ta", "succeeded", json!(1)),
        ("tb", "failed", json!(1)),
        ("load", "not_reached", json!(null)),
    ];
    assert_eq!(states(&v), expected(&want), "{v}");
    let edges: Vec<(&str, &str, &str)> = v["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["from"].as_str().unwrap(), e["to"].as_str().unwrap(), e["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        edges,
        [("extract", "ta", "after"), ("extract", "tb", "after"), ("ta", "load", "after"), ("tb", "load", "after")]
    );
    let (ta, tb, load) = (&v["steps"][1], &v["steps"][2], &v["steps"][3]);
    assert_eq!(ta["result"], json!({"rows": 3}), "{v}");
    assert_eq!(
        (ta["execution_id"].as_str(), ta["status"].as_str()),
        (Some(&*format!("ta@dep-wf-{run}#1")), Some("succeeded"))
    );
    assert!(ta["at"].as_str().unwrap().ends_with('Z') && tb["result"].is_null(), "{v}");
    assert_eq!((load["after"].clone(), load["execution_id"].clone()), (json!(["ta", "tb"]), Value::Null), "{v}");

    // Teams: team a's viewer sees it and may not resume it; team b's operator sees no such run.
    let (status, seen) = c.call_as(A_VIEWER, Method::GET, &format!("/api/workflows/{run}"), None).await?;
    assert_eq!((status, &seen), (200, &v));
    let resume = format!("/api/workflows/{run}/resume");
    let (status, e) = c.call_as(A_VIEWER, Method::POST, &resume, None).await?;
    assert_eq!(status, 403, "{e}");
    for (method, path) in [(Method::GET, format!("/api/workflows/{run}")), (Method::POST, resume.clone())] {
        let (status, e) = c.call_as(B_OPERATOR, method, &path, None).await?;
        assert_eq!(status, 404, "{path}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("unknown or expired"), "{e}");
    }
    check_resume(&c, &run).await?;
    check_other_runs(&c, tick).await
}

/// The resume of `run` (tb failed): tb's next attempt requested in the run, once.
async fn check_resume(c: &Cluster, run: &str) -> anyhow::Result<()> {
    let keys = Keys::new(&c.namespace)?;
    let resume = format!("/api/workflows/{run}/resume");
    let (status, v) = c.call(Method::POST, &resume, None).await?;
    assert_eq!(status, 202, "{v}");
    let next = format!("tb@dep-wf-{run}#2");
    let request_id = format!("resume-2-{run}");
    assert_eq!(v, json!({"run": run, "rerun": [{"job": "tb", "execution_id": next, "request_id": request_id}]}));
    let mut etcd = c.etcd.client().await?;
    let got = etcd.get(keys.job_trigger_prefix("tb"), Some(GetOptions::new().with_prefix())).await?;
    assert_eq!(got.kvs().len(), 1, "one run request");
    let kv = &got.kvs()[0];
    assert_eq!(kv.key_str()?, keys.trigger("tb", &request_id));
    assert!(kv.lease() != 0, "on a lease, as manual runs are");
    let request: TriggerRequest = serde_json::from_slice(kv.value())?;
    assert_eq!(request.execution("tb", &request_id).to_string(), next, "the next attempt of the step");
    assert_eq!(request.parent.as_ref().map(ToString::to_string), Some(format!("tb@dep-wf-{run}#1")));
    assert_eq!((request.workflow.as_deref(), request.kind), (Some(run), TriggerKind::Manual));
    assert_eq!(request.params.workflow.as_deref(), Some(run));
    assert_eq!(request.reason, format!("resume of workflow {run}"));
    // Again (a double click): the same answer, the same one key.
    let (status, again) = c.call(Method::POST, &resume, None).await?;
    assert_eq!((status, &again), (202, &v));
    let got = etcd.get(keys.job_trigger_prefix("tb"), Some(GetOptions::new().with_prefix())).await?;
    assert_eq!(got.kvs().len(), 1, "still one run request");
    // Audited, with what it reran.
    wait_for(Duration::from_secs(30), "the audit entry of the resume", || async {
        let page = c.get("/api/audit?actor=api-token&limit=100").await.ok()?;
        let entries = page["entries"].as_array()?.clone();
        entries.into_iter().find(|e| {
            e["action"].as_str().is_some_and(|a| a.ends_with("/resume")) && e["detail"]["rerun"][0]["job"] == "tb"
        })
    })
    .await?;
    Ok(())
}

/// A run where nothing failed (409, then succeeded once load did), an unknown run, a bad id.
async fn check_other_runs(c: &Cluster, tick: i64) -> anyhow::Result<()> {
    let ok = |j| (j, Status::Succeeded, None);
    let run = seed_run(c, tick + 86_400_000, &[ok("extract"), ok("ta"), ok("tb")]).await?;
    let v = c.get(&format!("/api/workflows/{run}")).await?;
    assert_eq!(states(&v).last().map(|(j, s, _)| (j.as_str(), s.as_str())), Some(("load", "pending")), "{v}");
    assert_eq!(v["state"], "running", "{v}");
    let (status, e) = c.call(Method::POST, &format!("/api/workflows/{run}/resume"), None).await?;
    assert_eq!(status, 409, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("nothing to resume: no step failed"), "{e}");
    seed_run(c, tick + 86_400_000, &[ok("load")]).await?;
    assert_eq!(c.get(&format!("/api/workflows/{run}")).await?["state"], "succeeded");
    for method in [Method::GET, Method::POST] {
        let path = if method == Method::GET {
            "/api/workflows/1-000000000000"
        } else {
            "/api/workflows/1-000000000000/resume"
        };
        let (status, e) = c.call(method, path, None).await?;
        assert_eq!(status, 404, "{path}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains("unknown or expired"), "{e}");
    }
    let (status, e) = c.call(Method::GET, "/api/workflows/-bad", None).await?;
    assert_eq!((status, e["error"]["field"].as_str()), (400, Some("run")), "{e}");
    Ok(())
}
