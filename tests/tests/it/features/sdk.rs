//! The SDK form (`etcron-sdk`, `sdk/examples/hot_list.rs`): two replicas of an application
//! embedding an executor of the handler `hot-list` declare their job with `ensure_jobs` (a
//! stale job of theirs deleted), each run goes to exactly one of them, and SIGKILL of the one
//! running it mid-way makes the other resume from its checkpoint: no step twice, none skipped.

use std::path::Path;
use std::time::Duration;

use etcron_tests::{wait_for, Cluster, Proc};
use serde_json::json;

const STEPS: u64 = 6;

/// One replica of the example application, as its README starts it.
fn replica(c: &Cluster, id: &str, log: &Path) -> anyhow::Result<Proc> {
    let (steps, log) = (STEPS.to_string(), log.display().to_string());
    let env = [
        ("HOT_LIST_SCHEDULE", "@every 1h"),
        ("HOT_LIST_STEPS", steps.as_str()),
        ("HOT_LIST_STEP_MS", "700"),
        ("HOT_LIST_LOG", log.as_str()),
    ];
    etcron_tests::hot_list_replica(c, id, &env)
}

/// The step lines of `execution` (any attempt): (step, fencing token, pid).
fn steps_of(log: &Path, execution_prefix: &str) -> Vec<(u64, i64, u32)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with(execution_prefix))
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            Some((w.get(2)?.parse().ok()?, w.get(4)?.parse().ok()?, w.get(6)?.parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_runs_once_per_run_across_replicas_and_resumes_from_its_checkpoint_after_a_sigkill(
) -> anyhow::Result<()> {
    let c = Cluster::start("sdk-hot-list", 0).await?;
    let log = c.path("hot-list.log");
    // A job of the application's no longer declared: ensure_jobs deletes it.
    c.put_job("stale", json!({"schedule": "@yearly", "labels": {"managed-by": "hot-list-app"}, "task": {"kind": "handler", "name": "gone"}})).await?;
    let mut replicas = [replica(&c, "app-1", &log)?, replica(&c, "app-2", &log)?];
    c.wait_workers(2).await?;
    let job = c.get("/api/jobs/hot-list").await?;
    assert_eq!(job["spec"]["labels"]["managed-by"], "hot-list-app", "{job}");
    assert_eq!(job["eligible_workers"], 2, "both executors have the handler: {job}");
    wait_for(Duration::from_secs(20), "the stale job deleted", || async {
        c.get("/api/jobs/stale").await.is_err().then_some(())
    })
    .await?;
    let workers = c.get("/api/workers").await?;
    assert!(workers["workers"].as_array().unwrap().iter().all(|w| w["handlers"] == json!(["hot-list"])), "{workers}");

    // Two runs: each on one replica, every step once, the result in the record.
    for _ in 0..2 {
        let id = c.run_now("hot-list").await?;
        let record = c.record_when(&id, "succeeded").await?;
        assert_eq!(record["result"], json!({"steps": STEPS, "resumed_at": 0}), "{record}");
        assert_eq!(record["progress"]["percent"], 100.0, "{record}");
        let prefix = id.trim_end_matches("#1");
        let steps = steps_of(&log, prefix);
        assert_eq!(steps.iter().map(|s| s.0).collect::<Vec<_>>(), (0..STEPS).collect::<Vec<_>>(), "{steps:?}");
        assert!(steps.iter().all(|s| s.2 == steps[0].2), "one replica ran it: {steps:?}");
    }

    // The job's timeout cancels the handler (it returns at once) and the run is timed out.
    c.put_job(
        "hot-list-short",
        json!({"schedule": "@every 1h", "timeout": "1s", "task": {"kind": "handler", "name": "hot-list"}}),
    )
    .await?;
    let id = c.run_now("hot-list-short").await?;
    let timed_out = c.record_when(&id, "timed_out").await?;
    assert!(timed_out["result"].is_null(), "{timed_out}");
    assert!(steps_of(&log, id.trim_end_matches("#1")).len() <= 1, "stopped at the timeout: {timed_out}");

    // A third, killed mid-way (during a step, after two were checkpointed).
    let id = c.run_now("hot-list").await?;
    let prefix = id.trim_end_matches("#1").to_owned();
    let (victim, first_token) = wait_for(Duration::from_secs(20), "two steps done", || async {
        let steps = steps_of(&log, &prefix);
        (steps.len() >= 2).then(|| (steps[0].2, steps[0].1))
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(250)).await;
    let done_before = steps_of(&log, &prefix).len() as u64;
    let killed = replicas.iter_mut().find(|p| p.pid() == Some(victim)).expect("the replica running it");
    killed.kill9();
    let rerun = format!("{prefix}#2");
    let record = c.record_when(&rerun, "succeeded").await?;
    assert_eq!(record["result"]["resumed_at"], done_before, "{record}");
    assert!(
        record["output"].as_str().unwrap_or_default().contains(&format!("resuming at step {done_before}")),
        "{record}"
    );
    let lost = c.final_record(&id).await?;
    assert_eq!(lost["status"], "lost", "{lost}");
    let steps = steps_of(&log, &prefix);
    assert_eq!(
        steps.iter().map(|s| s.0).collect::<Vec<_>>(),
        (0..STEPS).collect::<Vec<_>>(),
        "no step twice, none skipped: {steps:?}"
    );
    let after: Vec<&(u64, i64, u32)> = steps.iter().filter(|s| s.0 >= done_before).collect();
    assert!(
        after.iter().all(|s| s.2 != victim && s.1 > first_token),
        "the rest on the other replica, with a higher token: {steps:?}"
    );
    Ok(())
}
