//! Executors in other languages: a worker serving the executor protocol (`--executor-listen`)
//! and the Python reference client (`sdk/python/etcron_executor.py`), given only the worker's
//! address and the executor token — no etcd or MongoDB address. A handler job runs end to end
//! (output, progress, result), a kill cancels it, and a SIGKILLed executor is a lost worker:
//! its run is recorded `lost` and rerun on the other executor from its checkpoint.

use std::path::PathBuf;
use std::time::Duration;

use etcron_tests::{free_port, wait_for, Cluster, Proc, WorkerOpts};
use reqwest::Method;
use serde_json::json;

const TOKEN: &str = "executor-token-0123456789";

fn client_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sdk/python/etcron_executor.py")
}

/// One Python executor, with nothing of etcd or MongoDB in its environment.
fn python_executor(c: &Cluster, url: &str, id: &str) -> anyhow::Result<Proc> {
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(client_script()).args([url, TOKEN, id, "steps"]);
    cmd.env_clear().env("PATH", std::env::var("PATH").unwrap_or_default()).env("ETCRON_STEP_SECONDS", "0.7");
    Proc::spawn(&format!("python executor {id}"), cmd, c.logs.join(format!("{id}.log")))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_executor_runs_a_handler_job_is_killed_and_fails_over_from_its_checkpoint() -> anyhow::Result<()> {
    let mut c = Cluster::start("executors", 0).await?;
    let token_file = c.path("executor-token");
    std::fs::write(&token_file, TOKEN)?;
    let port = free_port();
    let mut host = WorkerOpts::new("host");
    host.extra = vec![
        "--executor-listen".into(),
        format!("127.0.0.1:{port}"),
        "--executor-token-file".into(),
        token_file.display().to_string(),
    ];
    c.add_worker(host)?;
    let url = format!("http://127.0.0.1:{port}");

    // A wrong token is refused before anything starts.
    let refused = reqwest::Client::new()
        .post(format!("{url}/executor/v1/sessions"))
        .bearer_auth("not-the-token-at-all")
        .json(&json!({"id": "x", "handlers": ["steps"]}))
        .send()
        .await?;
    assert_eq!(refused.status(), 401);
    let bad = reqwest::Client::new()
        .post(format!("{url}/executor/v1/sessions"))
        .bearer_auth(TOKEN)
        .json(&json!({"id": "x", "handlers": ["-no"]}))
        .send()
        .await?;
    assert_eq!(bad.status(), 400);
    assert_eq!(bad.json::<serde_json::Value>().await?["error"]["field"], "handlers[0]");
    // The reference client stays short enough to port from the docs.
    let lines = std::fs::read_to_string(client_script())?.lines().count();
    assert!(lines <= 300, "the Python client has {lines} lines");

    let mut executors = vec![python_executor(&c, &url, "py-1")?];
    c.wait_workers(2).await?;
    let workers = c.get("/api/workers").await?;
    let py1 = workers["workers"].as_array().unwrap().iter().find(|w| w["id"] == "py-1").cloned().unwrap_or_default();
    assert_eq!(py1["handlers"], json!(["steps"]), "{workers}");
    c.put_job(
        "steps",
        json!({"schedule": "@every 1h", "on_worker_loss": "rerun", "task": {"kind": "handler", "name": "steps", "env": {"STEPS": "6"}}}),
    )
    .await?;

    // End to end: output, progress and result in the record.
    let id = c.run_now("steps").await?;
    let record = c.record_when(&id, "succeeded").await?;
    assert_eq!(record["worker_id"], "py-1", "{record}");
    assert_eq!(record["result"], json!({"steps": 6, "resumed_at": 0}), "{record}");
    assert_eq!(record["progress"]["percent"], 100.0, "{record}");
    assert!(record["output"].as_str().unwrap_or_default().contains(&format!("{id} step 5 ")), "{record}");
    // The run's trace context reaches the handler (`ctx.traceparent`).
    let trace = record["trace_id"].as_str().unwrap_or_default();
    assert!(record["output"].as_str().unwrap_or_default().contains(&format!("traceparent 00-{trace}-")), "{record}");

    // A kill sets the handler's `cancelled`; the run is recorded killed.
    let id = c.run_now("steps").await?;
    c.wait_running_marker(&id).await?;
    let (status, body) =
        c.call(Method::POST, &format!("/api/jobs/steps/kill?execution={}", urlencode(&id)), None).await?;
    assert_eq!(status, 202, "{body}");
    let killed = c.record_when(&id, "killed").await?;
    assert!(killed["output"].as_str().unwrap_or_default().contains(" step 0 "), "{killed}");

    // A second executor; the one running the next run is SIGKILLed mid-way.
    executors.push(python_executor(&c, &url, "py-2")?);
    c.wait_workers(3).await?;
    let id = c.run_now("steps").await?;
    c.wait_running_marker(&id).await?;
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    let running = c.get(&format!("/api/executions/{}", urlencode(&id))).await?;
    let victim = running["worker_id"].as_str().unwrap_or_default().to_owned();
    let index = if victim == "py-1" { 0 } else { 1 };
    executors[index].kill9();
    let rerun = id.replace("#1", "#2");
    let resumed = c.record_when(&rerun, "succeeded").await?;
    assert_ne!(resumed["worker_id"], victim, "{resumed}");
    let resumed_at = resumed["result"]["resumed_at"].as_u64().unwrap_or(0);
    assert!(resumed_at >= 1, "resumed from a checkpoint: {resumed}");
    assert!(
        resumed["output"].as_str().unwrap_or_default().contains(&format!("resuming at step {resumed_at}")),
        "{resumed}"
    );
    let lost = c.final_record(&id).await?;
    assert_eq!(lost["status"], "lost", "{lost}");
    // A handler no live executor has: its ticks are recorded missed, naming it.
    c.put_job(
        "orphan",
        json!({"schedule": "* * * * * *", "start_deadline": "2s", "task": {"kind": "handler", "name": "nobody"}}),
    )
    .await?;
    let missed = c.wait_executions("job=orphan&status=missed", "a missed tick", |l| !l.is_empty()).await?;
    let reason = missed[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains(r#"no live executor has handler "nobody""#), "{}", missed[0]);
    // The lost executor is said so in the host's log and metric.
    wait_for(Duration::from_secs(10), "the loss in the host's log", || async {
        c.workers[0].proc.log_text().contains("remote executor lost").then_some(())
    })
    .await?;
    Ok(())
}

fn urlencode(s: &str) -> String {
    s.replace('@', "%40").replace('#', "%23")
}
