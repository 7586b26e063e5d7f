//! `placement --seconds S`: two workers of the default capacity (64). One runs 50 long tasks
//! (a 50-shard job pinned to it by label), the other none. A job fires every second for `S`
//! seconds; the figure is the share of its runs on the idle worker. Workers rank each tick by
//! rendezvous hashing weighted by the load each publishes in its registration (every 2 s at
//! most), so the busy one should come first for about 5 % of ticks.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{ensure, Result};
use etcron_tests::{wait_for, Cluster, WorkerOpts};
use reqwest::Method;
use serde_json::json;

/// Long tasks the busy worker runs.
const BUSY_TASKS: u64 = 50;

pub async fn run(seconds: i64) -> Result<()> {
    let mut c = Cluster::start("bench-placement", 0).await?;
    for role in ["busy", "idle"] {
        let mut w = WorkerOpts::new(role);
        w.labels.insert("role".to_owned(), role.to_owned());
        c.add_worker(w)?;
    }
    c.wait_workers(2).await?;
    load_the_busy_worker(&c).await?;
    let file = c.path("fired.log");
    let append = format!("echo \"$ETCRON_WORKER_ID\" >> {}", file.display());
    c.put_job("every-second", json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": append}})).await?;
    tokio::time::sleep(Duration::from_secs(u64::try_from(seconds)?)).await;
    let (status, body) = c.call(Method::DELETE, "/api/jobs/every-second", None).await?;
    ensure!(status == 204 || status == 200, "deleting the job: {status} {body}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let fired = std::fs::read_to_string(&file).unwrap_or_default();
    let mut per_worker: BTreeMap<&str, usize> = BTreeMap::new();
    for line in fired.lines() {
        *per_worker.entry(line.trim()).or_default() += 1;
    }
    let total: usize = per_worker.values().sum();
    let idle = per_worker.get("idle").copied().unwrap_or(0);
    println!(
        "placement: 2 workers of capacity 64, one running {BUSY_TASKS} long tasks, a job every second for {seconds} s"
    );
    println!("  runs per worker       {per_worker:?}");
    #[allow(clippy::cast_precision_loss)] // counts of a few hundred
    let share = 100.0 * idle as f64 / total.max(1) as f64;
    println!("  on the idle worker    {idle} of {total} ({share:.1} %)");
    Ok(())
}

/// Starts the 50-shard job on the busy worker and waits until its registration says so.
async fn load_the_busy_worker(c: &Cluster) -> Result<()> {
    let long = json!({
        "schedule": "@yearly",
        "mode": {"sharded": BUSY_TASKS},
        "selector": {"role": "busy"},
        "task": {"kind": "shell", "command": "sleep 3600"},
    });
    c.put_job("long", long).await?;
    let (status, body) = c.call(Method::POST, "/api/jobs/long/run", None).await?;
    ensure!(status == 202, "run: {status} {body}");
    wait_for(Duration::from_secs(60), "the busy worker to publish its 50 running tasks", || async {
        let v = c.get("/api/workers").await.ok()?;
        let busy = v["workers"].as_array()?.iter().find(|w| w["id"] == "busy")?.clone();
        (busy["running"].as_u64()? >= BUSY_TASKS).then_some(())
    })
    .await
}
