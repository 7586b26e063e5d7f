//! Cordon and drain (`POST /api/workers/{id}/cordon|drain|uncordon`, `{ns}/cordon/{id}`): a
//! cordoned worker races for nothing new while its runs go on; a drained one says when it is
//! empty; the cordon outlives a restart of the worker; unknown workers are refused.

use std::path::Path;
use std::time::Duration;

use etcron_tests::{now_ms, read_fired, record_command, wait_for, Cluster};
use reqwest::Method;
use serde_json::{json, Value};

/// How long after a cordon commits a tick may still start on the worker: ticks are raced
/// `claim_ahead` (200 ms) early, and the watch delivers the cordon on a loaded machine.
const SETTLE_MS: i64 = 2_000;

async fn post(c: &Cluster, worker: &str, action: &str) -> (u16, Value) {
    c.call(Method::POST, &format!("/api/workers/{worker}/{action}"), None).await.unwrap()
}

/// The worker `id` as `GET /api/workers` shows it.
async fn worker(c: &Cluster, id: &str) -> Value {
    let list = c.get("/api/workers").await.unwrap();
    list["workers"].as_array().unwrap().iter().find(|w| w["id"] == id).cloned().unwrap_or(Value::Null)
}

/// Workers that ran ticks of `job` scheduled after `after_ms`, with how many each.
fn ran_on(file: &Path, job: &str, after_ms: i64) -> std::collections::BTreeMap<String, usize> {
    let mut by = std::collections::BTreeMap::new();
    for f in read_fired(file).into_iter().filter(|f| f.job == job && f.scheduled_ms > after_ms) {
        *by.entry(f.worker).or_default() += 1;
    }
    by
}

/// Waits until ticks of `job` after `after_ms` ran `n` times in all.
async fn wait_ticks(file: &Path, job: &str, after_ms: i64, n: usize) {
    wait_for(Duration::from_secs(40), &format!("{n} ticks of {job}"), || async {
        (ran_on(file, job, after_ms).values().sum::<usize>() >= n).then_some(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drained_worker_gets_no_new_run_finishes_its_own_says_empty_and_stays_cordoned_across_a_restart(
) -> anyhow::Result<()> {
    let mut c = Cluster::start("cordon-drain", 2).await?;
    let (ticks, slow_file) = (c.path("ticks"), c.path("slow"));
    // Refused: a worker that is not live, an id that cannot be one.
    let (status, body) = post(&c, "w9", "cordon").await;
    assert_eq!(status, 404, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("w9"), "{body}");
    let (status, body) = post(&c, "w9", "uncordon").await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = post(&c, "-w1", "drain").await;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("id")), "{body}");

    // w2 cordoned: a run started now can only land on w1.
    let (status, body) = post(&c, "w2", "cordon").await;
    assert_eq!((status, body["cordon"]["state"].as_str()), (200, Some("cordoned")), "{body}");
    c.put_job("slow", json!({"schedule": "@every 1h", "task": {"kind": "shell", "command": format!("sleep 4; {}", record_command(&slow_file))}})).await?;
    tokio::time::sleep(Duration::from_millis(SETTLE_MS as u64)).await;
    let slow = c.run_now("slow").await?;
    c.wait_running_marker(&slow).await?;
    assert_eq!(worker(&c, "w2").await["cordon"]["state"], "cordoned");

    // w2 back, w1 drained while `slow` runs on it: not empty yet.
    assert_eq!(post(&c, "w2", "uncordon").await, (200, json!({"id": "w2", "was_cordoned": true})));
    let (status, body) = post(&c, "w1", "drain").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["cordon"]["state"].as_str(), body["cordon"]["empty"].as_bool()),
        (Some("draining"), Some(false)),
        "{body}"
    );
    let drained_at = now_ms();
    c.put_job(
        "ticker",
        json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": record_command(&ticks)}}),
    )
    .await?;

    // Its run finishes (not killed), then the API says it is empty; every tick meanwhile ran on w2.
    let record = c.record_when(&slow, "succeeded").await?;
    assert_eq!(record["worker_id"], "w1", "{record}");
    wait_for(Duration::from_secs(20), "w1 drained and empty", || async {
        (worker(&c, "w1").await["cordon"]["empty"] == true).then_some(())
    })
    .await?;
    wait_ticks(&ticks, "ticker", drained_at + SETTLE_MS, 5).await;
    let on = ran_on(&ticks, "ticker", drained_at + SETTLE_MS);
    assert_eq!(on.keys().collect::<Vec<_>>(), ["w2"], "ticks after the drain ran on {on:?}");

    // The cordon is in etcd, not in the worker: restarted, w1 still races for nothing.
    c.workers[0].restart()?;
    c.wait_workers(2).await?;
    wait_for(Duration::from_secs(30), "w1 registered again", || async {
        (worker(&c, "w1").await["pid"] != Value::Null).then_some(())
    })
    .await?;
    let restarted_at = now_ms();
    wait_ticks(&ticks, "ticker", restarted_at + SETTLE_MS, 5).await;
    let on = ran_on(&ticks, "ticker", restarted_at + SETTLE_MS);
    assert_eq!(on.keys().collect::<Vec<_>>(), ["w2"], "ticks after w1's restart ran on {on:?}");
    assert_eq!(worker(&c, "w1").await["cordon"]["state"], "draining");

    // Uncordoned, w1 takes ticks again (the two split them by rendezvous rank).
    assert_eq!(post(&c, "w1", "uncordon").await.0, 200);
    let uncordoned_at = now_ms();
    wait_for(Duration::from_secs(40), "a tick on w1 again", || async {
        ran_on(&ticks, "ticker", uncordoned_at + SETTLE_MS).contains_key("w1").then_some(())
    })
    .await?;
    assert_eq!(worker(&c, "w1").await["cordon"], Value::Null);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn ticks_with_every_worker_cordoned_are_recorded_missed_naming_the_cordon() -> anyhow::Result<()> {
    let c = Cluster::start("cordon-all", 1).await?;
    assert_eq!(post(&c, "w1", "cordon").await.0, 200);
    c.put_job(
        "nowhere",
        json!({"schedule": "* * * * * *", "start_deadline": "2s", "task": {"kind": "shell", "command": "true"}}),
    )
    .await?;
    let missed = c.wait_executions("job=nowhere&status=missed", "a missed tick", |list| !list.is_empty()).await?;
    let reason = missed[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("cordoned"), "{}", missed[0]);
    Ok(())
}
