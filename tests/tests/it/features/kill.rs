//! Kill commands: a kill stops the task's whole process group, reaches executions by id or
//! all of a job's, and never touches executions claimed after it.

use std::time::Duration;

use etcron_tests::{alive, read_pid, urlencode, wait_for, Cluster};
use reqwest::Method;
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn kill_stops_the_whole_process_group() -> anyhow::Result<()> {
    let c = Cluster::start("kill-group", 2).await?;
    let dir = c.work.path().display().to_string();
    // The shell starts a background sleep (same group), records both pids, then waits.
    let cmd = format!(
        "sleep 300 & echo $! > {dir}/child.pid; echo $$ > {dir}/sh.pid; echo $ETCRON_EXECUTION_ID > {dir}/id; wait"
    );
    c.put_job("long", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": cmd}})).await?;
    let (status, run) = c.call(Method::POST, "/api/jobs/long/run", None).await?;
    assert_eq!(status, 202);
    let (sh, child) = wait_for(Duration::from_secs(15), "the task to start", || async {
        Some((read_pid(&c.path("sh.pid"))?, read_pid(&c.path("child.pid"))?))
    })
    .await?;
    assert!(alive(sh) && alive(child));
    let id = std::fs::read_to_string(c.path("id"))?.trim().to_owned();
    assert_eq!(id, run["execution_id"].as_str().unwrap());

    // It is visible as running, with the fencing token, on the worker that runs it.
    let running = wait_for(Duration::from_secs(10), "the execution in /api/workers", || async {
        let workers = c.get("/api/workers").await.ok()?;
        workers["workers"]
            .as_array()?
            .iter()
            .flat_map(|w| w["running_executions"].as_array().cloned().unwrap_or_default())
            .find(|r| r["id"] == id.as_str())
    })
    .await?;
    assert!(running["fencing_token"].as_i64().unwrap() > 0);

    let (status, _) = c.call(Method::POST, &format!("/api/jobs/long/kill?execution={}", urlencode(&id)), None).await?;
    assert_eq!(status, 202);
    wait_for(Duration::from_secs(15), "both processes of the group to be gone", || async {
        (!alive(sh) && !alive(child)).then_some(())
    })
    .await?;
    wait_for(Duration::from_secs(10), "the worker to log the killed execution", || async {
        c.workers
            .iter()
            .any(|w| {
                w.proc
                    .log_text()
                    .lines()
                    .any(|l| l.contains("execution finished") && l.contains(&id) && l.contains("killed"))
            })
            .then_some(())
    })
    .await?;
    wait_for(Duration::from_secs(10), "no running executions", || async {
        let workers = c.get("/api/workers").await.ok()?;
        workers["workers"]
            .as_array()?
            .iter()
            .all(|w| w["running_executions"].as_array().is_some_and(Vec::is_empty))
            .then_some(())
    })
    .await?;

    // A kill of "all" does not affect a run that starts after it.
    for f in ["sh.pid", "child.pid", "id"] {
        let _ = std::fs::remove_file(c.path(f));
    }
    let (status, _) = c.call(Method::POST, "/api/jobs/long/kill", None).await?;
    assert_eq!(status, 202);
    c.call(Method::POST, "/api/jobs/long/run", None).await?;
    let sh =
        wait_for(Duration::from_secs(15), "the second run to start", || async { read_pid(&c.path("sh.pid")) }).await?;
    // The earlier kill command is still live (60 s lease); the new run must survive it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(alive(sh), "a kill issued before the run started killed it");
    let (status, _) = c.call(Method::POST, "/api/jobs/long/kill", None).await?;
    assert_eq!(status, 202);
    wait_for(Duration::from_secs(15), "kill all to stop the second run", || async { (!alive(sh)).then_some(()) })
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn timeout_kills_the_group_and_records_timed_out() -> anyhow::Result<()> {
    let c = Cluster::start("kill-timeout", 1).await?;
    let dir = c.work.path().display().to_string();
    let cmd = format!("sleep 300 & echo $! > {dir}/child.pid; wait");
    c.put_job("slow", json!({"schedule": "@yearly", "timeout": "1s", "task": {"kind": "shell", "command": cmd}}))
        .await?;
    c.call(Method::POST, "/api/jobs/slow/run", None).await?;
    let child =
        wait_for(Duration::from_secs(15), "the task to start", || async { read_pid(&c.path("child.pid")) }).await?;
    wait_for(Duration::from_secs(15), "the timeout to kill the group", || async { (!alive(child)).then_some(()) })
        .await?;
    wait_for(Duration::from_secs(10), "a timed_out record", || async {
        c.workers[0]
            .proc
            .log_text()
            .lines()
            .any(|l| l.contains("execution finished") && l.contains("timed_out"))
            .then_some(())
    })
    .await?;
    Ok(())
}
