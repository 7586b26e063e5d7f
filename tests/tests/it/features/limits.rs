//! Per-task resource limits on a real worker: a CPU-burning task is stopped at its CPU limit,
//! a task opening too many files and one allocating too much memory fail, each record saying
//! which limit it hit; a small task under the same limits succeeds; HTTP tasks refuse them.

use std::time::Duration;

use etcron_tests::{urlencode, wait_for, Cluster};
use serde_json::{json, Value};

/// Runs `job` now and waits for its final record.
async fn run_to_end(cluster: &Cluster, job: &str) -> anyhow::Result<Value> {
    let (status, body) = cluster.call(reqwest::Method::POST, &format!("/api/jobs/{job}/run"), None).await?;
    anyhow::ensure!(status == 202, "run {job}: {status} {body}");
    let id = body["execution_id"].as_str().unwrap().to_owned();
    // The machine may be busy: a CPU second can take several seconds of wall time.
    wait_for(Duration::from_secs(120), &format!("{job} to finish"), || async {
        let record = cluster.get(&format!("/api/executions/{}", urlencode(&id))).await.ok()?;
        (record["status"] != "running" && record["status"].is_string()).then_some(record)
    })
    .await
}

fn shell(command: &str, limits: Value) -> Value {
    json!({"schedule": "@yearly", "timeout": "5m", "task": {"kind": "shell", "command": command}, "limits": limits})
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_that_exceed_their_limits_fail_saying_which() -> anyhow::Result<()> {
    let cluster = Cluster::start("limits", 1).await?;
    let result = run(&cluster).await;
    if result.is_err() {
        cluster.dump_logs();
    }
    result
}

async fn run(cluster: &Cluster) -> anyhow::Result<()> {
    cluster.put_job("cpu-hog", shell("while :; do :; done", json!({"cpu": "1s"}))).await?;
    let files = "ulimit -n; bash -c 'for i in $(seq 1 40); do exec {fd}</dev/null || exit 7; done'";
    cluster.put_job("many-files", shell(files, json!({"open_files": 32}))).await?;
    cluster.put_job("memory-hog", shell("head -c 512M /dev/zero | tail", json!({"memory": "64MiB"}))).await?;
    let small = "head -c 1M /dev/zero | tail > /dev/null && ulimit -v && ulimit -t && ulimit -n";
    cluster.put_job("small", shell(small, json!({"memory": "64MiB", "cpu": "30s", "open_files": 64}))).await?;

    let job = cluster.get("/api/jobs/memory-hog").await?;
    assert_eq!(job["spec"]["limits"], json!({"memory": "64MiB"}), "{job}");

    let (cpu, files, memory, small) = tokio::try_join!(
        run_to_end(cluster, "cpu-hog"),
        run_to_end(cluster, "many-files"),
        run_to_end(cluster, "memory-hog"),
        run_to_end(cluster, "small"),
    )?;

    assert_eq!(cpu["status"], "failed", "{cpu}");
    assert_eq!(cpu["signal"], 24, "{cpu}");
    let error = cpu["error"].as_str().unwrap_or_default();
    assert!(error.contains("CPU limit of 1s reached (SIGXCPU)"), "{cpu}");

    assert_eq!(files["status"], "failed", "{files}");
    assert_eq!(files["exit_code"], 7, "{files}");
    assert!(files["output"].as_str().unwrap_or_default().starts_with("32\n"), "{files}");
    assert!(files["error"].as_str().unwrap_or_default().contains("open files limit of 32 reached"), "{files}");

    assert_eq!(memory["status"], "failed", "{memory}");
    assert!(memory["error"].as_str().unwrap_or_default().contains("memory limit of 64MiB reached"), "{memory}");

    // Within its limits a task runs as usual, and sees them: `ulimit -v` is in KiB.
    assert_eq!(small["status"], "succeeded", "{small}");
    assert_eq!(small["output"], "65536\n30\n64\n", "{small}");

    // An HTTP task runs inside the worker: process limits are refused, naming the field.
    let http =
        json!({"schedule": "@yearly", "task": {"kind": "http", "url": "http://127.0.0.1:9/"}, "limits": {"cpu": "5s"}});
    let (status, body) = cluster.call(reqwest::Method::PUT, "/api/jobs/hook", Some(http)).await?;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "limits.cpu", "{body}");
    Ok(())
}
