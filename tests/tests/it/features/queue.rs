//! `concurrency: queue` on real workers racing for the same ticks: a tick that finds a run going
//! waits in the job's queue in etcd and runs when it ends, one at a time, oldest first; beyond
//! `max_queue` it is recorded `skipped` naming the queue; the queue is listed by the API and
//! survives the worker holding the lock being killed; bad specs name their field.

use std::collections::BTreeMap;
use std::time::Duration;

use etcron_tests::{now_ms, read_fired, record_command, wait_for, Cluster, Fired};
use reqwest::Method;
use serde_json::{json, Value};

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// When each run started (the task's own clock, ms), by tick, in the order they started.
fn starts(fired: &[Fired]) -> Vec<(i64, i64)> {
    let mut runs: Vec<(i64, i64)> =
        fired.iter().map(|f| (f.extra.first().and_then(|s| s.parse().ok()).unwrap_or(0), f.scheduled_ms)).collect();
    runs.sort_unstable();
    runs
}

/// Every record of `job`, by tick.
async fn by_tick(c: &Cluster, job: &str) -> BTreeMap<i64, Vec<Value>> {
    let v = c.get(&format!("/api/executions?job={job}&limit=500")).await.unwrap();
    let mut out: BTreeMap<i64, Vec<Value>> = BTreeMap::new();
    for r in v["executions"].as_array().unwrap() {
        out.entry(r["scheduled_ms"].as_i64().unwrap()).or_default().push(r.clone());
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn queued_ticks_run_one_after_another_oldest_first_and_a_full_queue_skips() -> anyhow::Result<()> {
    let c = Cluster::start("queue-order", 2).await?;
    c.wait_workers(2).await?;
    let out = c.path("fired.log");
    // Nine ticks a second apart, each run lasting 2.5 s: the queue fills, the rest are skipped.
    let from = (now_ms() / 1000 + 3) * 1000;
    let until = from + 8_000;
    let spec = json!({
        "schedule": "* * * * * *", "active_from": rfc3339(from), "active_until": rfc3339(until),
        "concurrency": "queue", "max_queue": 2,
        "task": {"kind": "shell", "command": format!("{}; sleep 2.5", record_command(&out))},
    });
    c.put_job("serial", spec).await?;
    // The queue is listed while ticks wait in it, oldest first.
    let waited = wait_for(Duration::from_secs(20), "ticks waiting in the queue", || async {
        let job = c.get("/api/jobs/serial").await.ok()?;
        let queue = job["queue"].as_array()?.clone();
        (queue.len() >= 2).then_some(queue)
    })
    .await?;
    assert_eq!(waited.len(), 2, "never more than max_queue: {waited:?}");
    assert!(waited[0]["scheduled_at"].as_str() < waited[1]["scheduled_at"].as_str(), "oldest first: {waited:?}");
    assert!(waited.iter().all(|q| q["trigger"] == "schedule" && q["execution_id"].as_str().unwrap().ends_with("#1")));

    let ticks: Vec<i64> = (from..=until).step_by(1000).collect();
    let records = wait_for(Duration::from_secs(60), "a final record of every tick, the queue empty", || async {
        let records = by_tick(&c, "serial").await;
        let done = ticks.iter().all(|t| records.get(t).is_some_and(|l| l.iter().all(|r| r["status"] != "running")));
        let job = c.get("/api/jobs/serial").await.ok()?;
        (done && job["queue"].as_array()?.is_empty()).then_some(records)
    })
    .await;
    let records = match records {
        Ok(r) => r,
        Err(e) => {
            c.dump_logs();
            panic!("{e}: {:?}", by_tick(&c, "serial").await);
        }
    };
    c.settle_claims(now_ms()).await?;
    let fired = read_fired(&out);
    let (mut ran, mut skipped) = (0, 0);
    for t in &ticks {
        let list = &records[t];
        assert_eq!(list.len(), 1, "tick {t}: {list:?}");
        let runs = fired.iter().filter(|f| f.scheduled_ms == *t).count();
        match list[0]["status"].as_str().unwrap() {
            "succeeded" => {
                assert_eq!(runs, 1, "tick {t} ran {runs} times");
                ran += 1;
            }
            "skipped" => {
                assert_eq!(runs, 0, "tick {t} skipped and ran");
                assert!(list[0]["reason"].as_str().unwrap().contains("the queue is full"), "{}", list[0]);
                skipped += 1;
            }
            other => panic!("tick {t}: {other}: {}", list[0]),
        }
    }
    assert!(ran >= 3 && skipped >= 1, "{ran} ran, {skipped} skipped");
    // One at a time (each run lasts 2.5 s from its start), oldest first.
    let order = starts(&fired);
    for pair in order.windows(2) {
        assert!(pair[1].0 - pair[0].0 >= 2_500, "runs overlapped: {order:?}");
        assert!(pair[1].1 > pair[0].1, "a newer tick ran before an older one: {order:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_queue_goes_on_when_the_worker_holding_the_lock_is_killed() -> anyhow::Result<()> {
    let mut c = Cluster::start("queue-kill", 2).await?;
    c.wait_workers(2).await?;
    let out = c.path("fired.log");
    let from = (now_ms() / 1000 + 3) * 1000;
    let until = from + 4_000;
    let spec = json!({
        "schedule": "* * * * * *", "active_from": rfc3339(from), "active_until": rfc3339(until),
        "concurrency": "queue", "max_queue": 10, "on_worker_loss": "mark_lost",
        "task": {"kind": "shell", "command": format!("{}; sleep 6", record_command(&out))},
    });
    c.put_job("held", spec).await?;
    // The first tick runs; the next ones wait behind it.
    wait_for(Duration::from_secs(20), "the first run and two ticks queued", || async {
        let job = c.get("/api/jobs/held").await.ok()?;
        (!read_fired(&out).is_empty() && job["queue"].as_array()?.len() >= 2).then_some(())
    })
    .await?;
    let first = read_fired(&out)[0].clone();
    assert_eq!(first.scheduled_ms, from);
    let holder = c.workers.iter().position(|w| w.opts.id == first.worker).unwrap();
    c.workers[holder].proc.kill9();

    // The survivor records the run lost, and the lock goes to the oldest waiting tick.
    let ticks: Vec<i64> = (from..=until).step_by(1000).collect();
    let records = wait_for(Duration::from_secs(90), "every tick's final record", || async {
        let records = by_tick(&c, "held").await;
        ticks
            .iter()
            .all(|t| records.get(t).is_some_and(|l| l.iter().any(|r| r["status"] != "running")))
            .then_some(records)
    })
    .await;
    let records = match records {
        Ok(r) => r,
        Err(e) => {
            c.dump_logs();
            panic!("{e}: {:?}", by_tick(&c, "held").await);
        }
    };
    assert_eq!(records[&from][0]["status"], "lost", "{:?}", records[&from]);
    for t in &ticks[1..] {
        assert_eq!(records[t].len(), 1, "{:?}", records[t]);
        assert_eq!(records[t][0]["status"], "succeeded", "tick {t}: {:?}", records[t]);
    }
    c.settle_claims(now_ms()).await?;
    let fired = read_fired(&out);
    let order = starts(&fired);
    assert_eq!(order.iter().map(|(_, t)| *t).collect::<Vec<_>>(), ticks, "each tick once, oldest first");
    // After the kill, one at a time again.
    for pair in order[1..].windows(2) {
        assert!(pair[1].0 - pair[0].0 >= 6_000, "runs overlapped: {order:?}");
    }
    let job = c.get("/api/jobs/held").await?;
    assert_eq!(job["queue"], json!([]));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn queue_settings_are_checked() -> anyhow::Result<()> {
    let c = Cluster::start("queue-api", 0).await?;
    let task = json!({"kind": "shell", "command": "true"});
    for (spec, field) in [
        (json!({"schedule": "@hourly", "max_queue": 3, "task": task}), "max_queue"),
        (json!({"schedule": "@hourly", "concurrency": "forbid", "max_queue": 3, "task": task}), "max_queue"),
        (json!({"schedule": "@hourly", "concurrency": "queue", "max_queue": 0, "task": task}), "max_queue"),
        (json!({"schedule": "@hourly", "concurrency": "queue", "max_queue": 101, "task": task}), "max_queue"),
        (json!({"schedule": "@hourly", "concurrency": "queue", "mode": "broadcast", "task": task}), "concurrency"),
    ] {
        let (status, e) = c.call(Method::PUT, "/api/jobs/q", Some(spec.clone())).await?;
        assert_eq!((status, e["error"]["field"].as_str()), (400, Some(field)), "{spec}: {e}");
    }
    let saved = c.put_job("q", json!({"schedule": "@hourly", "concurrency": "queue", "task": task})).await?;
    assert_eq!(saved["spec"]["concurrency"], "queue", "{saved}");
    assert_eq!(c.get("/api/jobs/q").await?["queue"], json!([]));
    Ok(())
}
