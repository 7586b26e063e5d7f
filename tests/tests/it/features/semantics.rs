//! Job semantics end to end: retries, concurrency policies, worker loss, modes, selectors,
//! dependencies and one-shot schedules, each visible in the execution records.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use etcron_tests::{ms, now_ms, read_fired, record_command, urlencode, wait_for, Cluster, WorkerOpts};
use nix::sys::signal::Signal;
use reqwest::Method;
use serde_json::{json, Value};

async fn run(c: &Cluster, job: &str) -> String {
    c.run_now(job).await.unwrap()
}

async fn record(c: &Cluster, id: &str) -> Value {
    c.get(&format!("/api/executions/{}", urlencode(id))).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn retries_back_off_exponentially_and_each_attempt_is_its_own_claim_and_record() -> anyhow::Result<()> {
    let c = Cluster::start("sem-retries", 2).await?;
    let file = c.path("fired");
    // Fails twice, then succeeds.
    let cmd = format!("{}; [ \"$ETCRON_ATTEMPT\" -ge 3 ]", record_command(&file));
    c.put_job(
        "flaky",
        json!({"schedule": "@yearly", "retries": {"max": 5, "backoff": "1s", "max_backoff": "1500ms"},
               "task": {"kind": "shell", "command": cmd}}),
    )
    .await?;
    let first = run(&c, "flaky").await;
    let list = c
        .wait_executions("job=flaky", "three attempts, the last succeeded", |l| {
            l.len() == 3 && l.iter().any(|r| r["attempt"] == 3 && r["status"] == "succeeded")
        })
        .await?;
    let by_attempt: BTreeMap<i64, &Value> = list.iter().map(|r| (r["attempt"].as_i64().unwrap(), r)).collect();
    assert_eq!(by_attempt[&1]["id"], first.as_str());
    assert_eq!(by_attempt[&1]["status"], "failed");
    assert_eq!(by_attempt[&1]["trigger"], "manual");
    assert_eq!(by_attempt[&2]["status"], "failed");
    for a in [2, 3] {
        let r = by_attempt[&a];
        assert_eq!(r["trigger"], "retry");
        assert_eq!(r["id"].as_str().unwrap(), first.replace("#1", &format!("#{a}")));
        assert_eq!(r["scheduled_at"], by_attempt[&1]["scheduled_at"], "a retry belongs to the same fire");
        let parent = first.replace("#1", &format!("#{}", a - 1));
        assert_eq!(record(&c, r["id"].as_str().unwrap()).await["parent"], parent.as_str());
    }
    // Backoff: >= half of 1s after attempt 1, >= half of 1.5s (2s capped) after attempt 2.
    let gap1 = ms(&by_attempt[&2]["started_at"]) - ms(&by_attempt[&1]["finished_at"]);
    let gap2 = ms(&by_attempt[&3]["started_at"]) - ms(&by_attempt[&2]["finished_at"]);
    assert!(gap1 >= 500, "first backoff {gap1} ms");
    assert!(gap2 >= 750, "second backoff {gap2} ms");
    // Each attempt claimed once, with its own fencing token.
    let fired = read_fired(&file);
    assert_eq!(fired.iter().map(|f| f.attempt).collect::<BTreeSet<_>>(), BTreeSet::from([1, 2, 3]));
    assert_eq!(fired.len(), 3);
    assert_eq!(fired.iter().map(|f| f.fencing_token).collect::<BTreeSet<_>>().len(), 3);
    // The failed attempt's record says when the retry comes.
    assert!(by_attempt[&1]["reason"].as_str().unwrap_or_default().contains("retry"), "{}", by_attempt[&1]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_survives_the_worker_that_scheduled_it_and_stops_when_the_job_is_paused() -> anyhow::Result<()> {
    let mut c = Cluster::start("sem-retry-move", 2).await?;
    let file = c.path("fired");
    let cmd = format!("{}; exit 1", record_command(&file));
    c.put_job(
        "always-fails",
        json!({"schedule": "@yearly", "retries": {"max": 5, "backoff": "4s", "max_backoff": "4s"},
               "task": {"kind": "shell", "command": cmd}}),
    )
    .await?;
    run(&c, "always-fails").await;
    let first = c.wait_executions("job=always-fails&status=failed", "attempt 1 failed", |l| l.len() == 1).await?;
    let ran_on = first[0]["worker_id"].as_str().unwrap().to_owned();
    // Stop the worker that ran (and closed) attempt 1 before the retry is due.
    let idx = c.workers.iter().position(|w| w.opts.id == ran_on).unwrap();
    c.workers[idx].proc.signal(Signal::SIGTERM)?;
    c.workers[idx].proc.wait_exit(Duration::from_secs(20))?;
    let second = c
        .wait_executions("job=always-fails&status=failed", "attempt 2 on the other worker", |l| {
            l.iter().any(|r| r["attempt"] == 2)
        })
        .await?;
    let r2 = second.iter().find(|r| r["attempt"] == 2).unwrap();
    assert_ne!(r2["worker_id"], ran_on.as_str(), "the retry ran on the surviving worker");
    assert_eq!(r2["trigger"], "retry");
    // Pause: the pending attempt 3 is recorded skipped, and nothing runs after it.
    c.call(Method::POST, "/api/jobs/always-fails/pause", None).await?;
    let list = c
        .wait_executions("job=always-fails", "attempt 3 skipped", |l| {
            l.iter().any(|r| r["attempt"] == 3 && r["status"] == "skipped")
        })
        .await?;
    let r3 = list.iter().find(|r| r["attempt"] == 3).unwrap();
    assert!(r3["reason"].as_str().unwrap().contains("paused"), "{r3}");
    assert_eq!(read_fired(&file).len(), 2, "attempt 3 never ran");
    assert_eq!(list.len(), 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_a_job_withdraws_its_pending_retry() -> anyhow::Result<()> {
    let c = Cluster::start("sem-retry-delete", 1).await?;
    let file = c.path("fired");
    let cmd = format!("{}; exit 1", record_command(&file));
    c.put_job(
        "doomed",
        json!({"schedule": "@yearly", "retries": {"max": 3, "backoff": "3s", "max_backoff": "3s"},
               "task": {"kind": "shell", "command": cmd}}),
    )
    .await?;
    run(&c, "doomed").await;
    c.wait_executions("job=doomed&status=failed", "attempt 1 failed", |l| l.len() == 1).await?;
    let prefix = format!("{}/trigger/doomed/", c.namespace);
    let mut etcd = c.etcd.client().await?;
    let pending = etcd.get(prefix.as_str(), Some(etcd_client::GetOptions::new().with_prefix())).await?;
    assert_eq!(pending.kvs().len(), 1, "the retry is a pending run request in etcd");
    let (status, _) = c.call(Method::DELETE, "/api/jobs/doomed", None).await?;
    assert_eq!(status, 204);
    let pending = etcd.get(prefix.as_str(), Some(etcd_client::GetOptions::new().with_prefix())).await?;
    assert_eq!(pending.kvs().len(), 0, "deleting the job withdrew the retry");
    // Recreate the job under the same name: the withdrawn retry does not come back.
    c.put_job("doomed", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "true"}})).await?;
    let marker = c.path("after");
    c.put_job("witness", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": format!("sleep 4; touch {}", marker.display())}})).await?;
    run(&c, "witness").await;
    wait_for(Duration::from_secs(30), "the witness run", || async { marker.exists().then_some(()) }).await?;
    assert_eq!(read_fired(&file).len(), 1, "no attempt 2 after the delete");
    Ok(())
}

/// Intervals `[start, end)` written by a task: `start end` per line.
fn intervals(file: &std::path::Path) -> Vec<(i64, i64)> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut p = l.split_whitespace();
            Some((p.next()?.parse().ok()?, p.next()?.parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrency_forbid_skips_ticks_while_a_run_is_going_across_the_cluster() -> anyhow::Result<()> {
    let c = Cluster::start("sem-forbid", 3).await?;
    let file = c.path("spans");
    let cmd = format!("s=$(date +%s%3N); sleep 2.5; echo \"$s $(date +%s%3N)\" >> {}", file.display());
    c.put_job(
        "exclusive",
        json!({"schedule": "* * * * * *", "concurrency": "forbid", "task": {"kind": "shell", "command": cmd}}),
    )
    .await?;
    wait_for(Duration::from_secs(60), "three finished runs", || async { (intervals(&file).len() >= 3).then_some(()) })
        .await?;
    c.put_job("exclusive", json!({"schedule": "* * * * * *", "enabled": false, "concurrency": "forbid", "task": {"kind": "shell", "command": cmd}}))
        .await?;
    let mut spans = intervals(&file);
    spans.sort_unstable();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "runs overlapped: {spans:?}");
    }
    let skipped =
        c.wait_executions("job=exclusive&status=skipped&limit=100", "skipped ticks", |l| l.len() >= 2).await?;
    for r in &skipped {
        let reason = r["reason"].as_str().unwrap();
        assert!(reason.contains("concurrency forbid") || reason.starts_with("job disabled"), "{reason}");
    }
    assert!(skipped.iter().any(|r| r["reason"].as_str().unwrap().contains("concurrency forbid: exclusive@")));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrency_replace_kills_the_running_execution_and_starts_the_new_one() -> anyhow::Result<()> {
    let c = Cluster::start("sem-replace", 2).await?;
    c.put_job(
        "latest-wins",
        json!({"schedule": "@yearly", "concurrency": "replace", "task": {"kind": "shell", "command": "sleep 60"}}),
    )
    .await?;
    let first = run(&c, "latest-wins").await;
    c.wait_executions("job=latest-wins&status=running", "first run running", |l| l.len() == 1).await?;
    let second = run(&c, "latest-wins").await;
    let done = c.wait_executions("job=latest-wins&status=killed", "the first run killed", |l| l.len() == 1).await?;
    assert_eq!(done[0]["id"], first.as_str());
    let killed = record(&c, &first).await;
    assert!(killed["error"].as_str().unwrap().contains(&format!("replaced by {second}")), "{killed}");
    let running = c.wait_executions("job=latest-wins&status=running", "second run running", |l| l.len() == 1).await?;
    assert_eq!(running[0]["id"], second.as_str());
    // allow: two manual runs overlap.
    c.put_job("overlap", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "sleep 60"}})).await?;
    run(&c, "overlap").await;
    run(&c, "overlap").await;
    c.wait_executions("job=overlap&status=running", "two overlapping runs", |l| l.len() == 2).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn worker_loss_reruns_on_another_worker_or_marks_lost() -> anyhow::Result<()> {
    let mut c = Cluster::start("sem-failover", 1).await?;
    let file = c.path("fired");
    let cmd = format!("{}; sleep 120", record_command(&file));
    c.put_job("rerun-me", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": cmd}})).await?;
    c.put_job("lose-me", json!({"schedule": "@yearly", "on_worker_loss": "mark_lost", "on_failure": ["lost-alarm"], "task": {"kind": "shell", "command": cmd}}))
        .await?;
    c.put_job("lost-alarm", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "echo alarm"}})).await?;
    let a = run(&c, "rerun-me").await;
    let b = run(&c, "lose-me").await;
    wait_for(Duration::from_secs(30), "both running on w1", || async { (read_fired(&file).len() == 2).then_some(()) })
        .await?;
    c.add_worker(WorkerOpts::new("w2"))?;
    c.wait_workers(2).await?;
    let t0 = now_ms();
    c.workers[0].proc.kill9();
    let rerun_id = a.replace("#1", "#2");
    let rerun = c
        .wait_executions("job=rerun-me&status=running", "the failover rerun running", |l| {
            l.iter().any(|r| r["id"] == rerun_id.as_str())
        })
        .await?;
    let rerun = rerun.iter().find(|r| r["id"] == rerun_id.as_str()).unwrap();
    assert_eq!(rerun["worker_id"], "w2");
    assert_eq!(rerun["trigger"], "failover");
    assert_eq!(rerun["attempt"], 2);
    let lost_a = c.record_when(&a, "lost").await.unwrap();
    assert!(lost_a["reason"].as_str().unwrap().contains("rerun"), "{lost_a}");
    assert_eq!(record(&c, &rerun_id).await["parent"], a.as_str());
    let fired = read_fired(&file);
    let tokens: BTreeMap<u32, i64> =
        fired.iter().filter(|f| f.job == "rerun-me").map(|f| (f.attempt, f.fencing_token)).collect();
    assert!(tokens[&2] > tokens[&1], "the rerun's fencing token is higher: {tokens:?}");
    eprintln!("failover rerun started {} ms after the SIGKILL", ms(&rerun["started_at"]) - t0);
    // mark_lost: recorded lost, never rerun, and its on_failure dependency fires.
    c.record_when(&b, "lost").await.unwrap();
    let alarm = c.wait_executions("job=lost-alarm", "the on_failure run after the loss", |l| l.len() == 1).await?;
    assert_eq!(alarm[0]["trigger"], "dependency");
    let (status, _) =
        c.call(Method::GET, &format!("/api/executions/{}", urlencode(&b.replace("#1", "#2"))), None).await?;
    assert_eq!(status, 404, "mark_lost is not rerun");
    assert_eq!(read_fired(&file).iter().filter(|f| f.job == "lose-me").count(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn broadcast_runs_once_per_worker_and_sharded_runs_each_shard_once() -> anyhow::Result<()> {
    let c = Cluster::start("sem-modes", 3).await?;
    let file = c.path("fired");
    let cmd = format!("{} $ETCRON_SHARD_INDEX/$ETCRON_SHARD_COUNT", record_command(&file));
    c.put_job(
        "everywhere",
        json!({"schedule": "@yearly", "mode": "broadcast", "task": {"kind": "shell", "command": cmd}}),
    )
    .await?;
    let id = run(&c, "everywhere").await;
    let list = c
        .wait_executions("job=everywhere", "three broadcast runs", |l| {
            l.len() == 3 && l.iter().all(|r| r["status"] == "succeeded")
        })
        .await?;
    let workers: BTreeSet<&str> = list.iter().map(|r| r["worker_id"].as_str().unwrap()).collect();
    assert_eq!(workers, BTreeSet::from(["w1", "w2", "w3"]));
    for r in &list {
        let w = r["worker_id"].as_str().unwrap();
        assert_eq!(r["id"].as_str().unwrap(), id.replace("#1", &format!(":worker-{w}#1")));
    }
    // Sharded: 4 shards per tick, every second, each shard of each tick exactly once.
    c.put_job(
        "split",
        json!({"schedule": "* * * * * *", "mode": {"sharded": 4}, "task": {"kind": "shell", "command": cmd}}),
    )
    .await?;
    wait_for(Duration::from_secs(60), "five complete ticks", || async {
        let mut per_tick: BTreeMap<i64, usize> = BTreeMap::new();
        for f in read_fired(&file).iter().filter(|f| f.job == "split") {
            *per_tick.entry(f.scheduled_ms).or_default() += 1;
        }
        (per_tick.values().filter(|n| **n == 4).count() >= 5).then_some(())
    })
    .await?;
    c.call(Method::POST, "/api/jobs/split/pause", None).await?;
    let fired: Vec<_> = read_fired(&file).into_iter().filter(|f| f.job == "split").collect();
    let mut seen = BTreeMap::new();
    for f in &fired {
        let shard = f.extra.last().unwrap().clone();
        *seen.entry((f.scheduled_ms, shard)).or_insert(0) += 1;
    }
    assert!(seen.values().all(|n| *n == 1), "a shard ran twice: {seen:?}");
    let shards: BTreeSet<&str> = seen.keys().map(|(_, s)| s.as_str()).collect();
    assert_eq!(shards, BTreeSet::from(["0/4", "1/4", "2/4", "3/4"]));
    let spread: BTreeSet<&str> = fired.iter().map(|f| f.worker.as_str()).collect();
    assert!(spread.len() >= 2, "shards spread over workers: {spread:?}");
    let recs = c.wait_executions("job=split&status=succeeded&limit=5", "shard records", |l| l.len() == 5).await?;
    for r in &recs {
        assert!(r["id"].as_str().unwrap().contains(":shard-"), "{r}");
        assert_eq!(r["shard"][1], 4);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_selector_no_live_worker_matches_is_visible_and_its_ticks_are_missed() -> anyhow::Result<()> {
    let mut c = Cluster::start("sem-selector", 1).await?;
    let mut eu = WorkerOpts::new("w-eu");
    eu.labels.insert("region".into(), "eu".into());
    c.add_worker(eu)?;
    c.wait_workers(2).await?;
    let file = c.path("fired");
    c.put_job("eu-only", json!({"schedule": "@yearly", "selector": {"region": "eu"}, "task": {"kind": "shell", "command": record_command(&file)}}))
        .await?;
    c.put_job("mars", json!({"schedule": "* * * * * *", "selector": {"region": "mars"}, "task": {"kind": "shell", "command": "true"}}))
        .await?;
    for _ in 0..3 {
        run(&c, "eu-only").await;
    }
    wait_for(Duration::from_secs(30), "three eu runs", || async { (read_fired(&file).len() == 3).then_some(()) })
        .await?;
    assert!(read_fired(&file).iter().all(|f| f.worker == "w-eu"));
    let job = c.get("/api/jobs/mars").await?;
    assert_eq!(job["eligible_workers"], 0, "{job}");
    assert_eq!(c.get("/api/jobs/eu-only").await?["eligible_workers"], 1);
    let workers = c.get("/api/workers").await?;
    assert!(workers["unmatched_jobs"].as_array().unwrap().iter().any(|j| j["job"] == "mars"), "{workers}");
    let missed = c.wait_executions("job=mars&status=missed", "missed ticks", |l| l.len() >= 2).await?;
    for r in &missed {
        assert!(r["reason"].as_str().unwrap().contains("no live worker matches selector {region=mars}"), "{r}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn dependencies_run_once_per_finished_execution_with_the_parent_id() -> anyhow::Result<()> {
    let c = Cluster::start("sem-deps", 2).await?;
    let file = c.path("fired");
    let rec = record_command(&file);
    c.put_job("child-ok", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": format!("{rec}; echo parent=$ETCRON_PARENT_EXECUTION_ID")}}))
        .await?;
    c.put_job("child-fail", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": rec.clone()}})).await?;
    c.put_job("parent", json!({"schedule": "@yearly", "on_success": ["child-ok"], "on_failure": ["child-fail"], "task": {"kind": "shell", "command": "true"}}))
        .await?;
    let p1 = run(&c, "parent").await;
    let kids = c
        .wait_executions("job=child-ok", "the on_success run", |l| l.len() == 1 && l[0]["status"] == "succeeded")
        .await?;
    assert_eq!(kids[0]["trigger"], "dependency");
    let kid = record(&c, kids[0]["id"].as_str().unwrap()).await;
    assert_eq!(kid["parent"], p1.as_str());
    assert!(kid["output"].as_str().unwrap().contains(&format!("parent={p1}")), "{kid}");
    // A failing parent (with retries: the dependency waits for the last attempt).
    c.put_job("parent", json!({"schedule": "@yearly", "on_success": ["child-ok"], "on_failure": ["child-fail"], "retries": {"max": 1, "backoff": "200ms", "max_backoff": "200ms"}, "task": {"kind": "shell", "command": "exit 7"}}))
        .await?;
    let p2 = run(&c, "parent").await;
    let fails = c
        .wait_executions("job=child-fail", "the on_failure run", |l| l.len() == 1 && l[0]["status"] == "succeeded")
        .await?;
    assert_eq!(record(&c, fails[0]["id"].as_str().unwrap()).await["parent"], p2.replace("#1", "#2").as_str());
    // Exactly once: one child per finished parent execution, no more.
    let witness = c.path("witness");
    c.put_job("witness", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": format!("sleep 3; touch {}", witness.display())}})).await?;
    run(&c, "witness").await;
    wait_for(Duration::from_secs(30), "the witness", || async { witness.exists().then_some(()) }).await?;
    let fired = read_fired(&file);
    assert_eq!(fired.iter().filter(|f| f.job == "child-ok").count(), 1);
    assert_eq!(fired.iter().filter(|f| f.job == "child-fail").count(), 1);
    // Cycles are refused at save time.
    let (status, body) = c
        .call(
            Method::PUT,
            "/api/jobs/child-ok",
            Some(
                json!({"schedule": "@yearly", "on_success": ["parent"], "task": {"kind": "shell", "command": "true"}}),
            ),
        )
        .await?;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("child-ok → parent → child-ok"), "{body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_at_job_runs_once_and_is_disabled_after() -> anyhow::Result<()> {
    let c = Cluster::start("sem-at", 2).await?;
    let file = c.path("fired");
    let at = (now_ms() / 1000 + 3) * 1000;
    let when = chrono::DateTime::from_timestamp_millis(at).unwrap().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    c.put_job(
        "once",
        json!({"schedule": format!("@at {when}"), "task": {"kind": "shell", "command": record_command(&file)}}),
    )
    .await?;
    let list = c.wait_executions("job=once", "the one run", |l| l.len() == 1 && l[0]["status"] == "succeeded").await?;
    assert_eq!(ms(&list[0]["scheduled_at"]), at);
    let job = wait_for(Duration::from_secs(30), "the job disabled", || async {
        let j = c.get("/api/jobs/once").await.ok()?;
        (j["spec"]["enabled"] == false).then_some(j)
    })
    .await?;
    assert_eq!(job["spec"]["schedule"], format!("@at {when}"));
    assert!(job["next_runs"].as_array().unwrap().is_empty());
    assert_eq!(read_fired(&file).len(), 1);
    // `@every` ticks are aligned to the epoch, so every worker computes the same ones.
    c.put_job("every2", json!({"schedule": "@every 2s", "task": {"kind": "shell", "command": record_command(&file)}}))
        .await?;
    wait_for(Duration::from_secs(30), "three @every ticks", || async {
        (read_fired(&file).iter().filter(|f| f.job == "every2").count() >= 3).then_some(())
    })
    .await?;
    let ticks: Vec<i64> = read_fired(&file).iter().filter(|f| f.job == "every2").map(|f| f.scheduled_ms).collect();
    assert!(ticks.iter().all(|t| t % 2000 == 0), "{ticks:?}");
    assert!(ticks.windows(2).all(|w| w[1] - w[0] == 2000), "{ticks:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn http_tasks_record_status_body_and_connection_errors() -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let c = Cluster::start("sem-http", 1).await?;
    // A tiny server that answers 201 and hands the request it saw to the test.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::channel::<String>(4);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !String::from_utf8_lossy(&buf).contains("ping-body") {
                match sock.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let _ = seen_tx.send(String::from_utf8_lossy(&buf).into_owned()).await;
            let _ =
                sock.write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello").await;
        }
    });
    let master = c.master.url.clone();
    c.put_job("hook", json!({"schedule": "@yearly", "task": {"kind": "http", "method": "POST", "url": format!("http://127.0.0.1:{port}/hook"), "headers": {"X-Token": "t1"}, "body": "ping-body", "expect_status": 201}}))
        .await?;
    c.put_job("health", json!({"schedule": "@yearly", "task": {"kind": "http", "url": format!("{master}/healthz")}}))
        .await?;
    c.put_job(
        "not-found",
        json!({"schedule": "@yearly", "task": {"kind": "http", "url": format!("{master}/api/jobs/nope")}}),
    )
    .await?;
    c.put_job("want-404", json!({"schedule": "@yearly", "task": {"kind": "http", "url": format!("{master}/api/jobs/nope"), "expect_status": 404}}))
        .await?;
    c.put_job("refused", json!({"schedule": "@yearly", "task": {"kind": "http", "url": "http://127.0.0.1:1/x"}}))
        .await?;
    let hook = run(&c, "hook").await;
    let request = tokio::time::timeout(Duration::from_secs(30), seen_rx.recv()).await?.unwrap();
    assert!(request.starts_with("POST /hook HTTP/1.1"), "{request}");
    let lower = request.to_lowercase();
    assert!(lower.contains("x-token: t1"), "{request}");
    assert!(lower.contains(&format!("x-etcron-execution-id: {}", hook.to_lowercase())), "{request}");
    assert!(lower.contains("x-etcron-fencing-token: "), "{request}");
    assert!(lower.contains("x-etcron-scheduled-at-ms: "), "{request}");
    for job in ["health", "not-found", "want-404", "refused"] {
        run(&c, job).await;
    }
    let all = c
        .wait_executions("limit=10", "five finished http runs", |l| {
            l.len() == 5 && l.iter().all(|r| r["status"] != "running")
        })
        .await?;
    let by_job: BTreeMap<&str, &Value> = all.iter().map(|r| (r["job"].as_str().unwrap(), r)).collect();
    let hook_rec = record(&c, &hook).await;
    assert_eq!(hook_rec["status"], "succeeded");
    assert_eq!(hook_rec["http_status"], 201);
    assert!(hook_rec["output"].as_str().unwrap().ends_with("hello"), "{hook_rec}");
    assert_eq!(by_job["health"]["status"], "succeeded");
    assert_eq!(by_job["health"]["http_status"], 200);
    assert_eq!(by_job["not-found"]["status"], "failed");
    assert_eq!(by_job["not-found"]["http_status"], 404);
    assert!(by_job["not-found"]["error"].as_str().unwrap().contains("404"), "{}", by_job["not-found"]);
    assert_eq!(by_job["want-404"]["status"], "succeeded");
    assert_eq!(by_job["refused"]["status"], "failed");
    assert!(by_job["refused"]["http_status"].is_null());
    assert!(by_job["refused"]["error"].as_str().unwrap().contains("127.0.0.1:1"), "{}", by_job["refused"]);
    Ok(())
}

/// A worker that wakes up with ticks behind it (paused here; a starved machine or a backlog does
/// the same) does not race a tick past the job's `start_deadline`: it is recorded `missed` with
/// how late it was, and the ticks it passed over are swept and recorded too. A manual run has no
/// deadline.
#[tokio::test(flavor = "multi_thread")]
async fn a_tick_past_its_start_deadline_is_recorded_missed_not_raced() -> anyhow::Result<()> {
    let mut c = Cluster::start("sem-deadline", 0).await?;
    let mut opts = WorkerOpts::new("sleepy");
    // Longer than the pause: the session outlives it, so only lateness is at play.
    opts.session_ttl = "30s".to_owned();
    c.add_worker(opts)?;
    c.wait_workers(1).await?;
    let file = c.path("fired");
    c.put_job(
        "punctual",
        json!({"schedule": "* * * * * *", "start_deadline": "1s", "misfire": "skip",
               "task": {"kind": "shell", "command": record_command(&file)}}),
    )
    .await?;
    wait_for(Duration::from_secs(30), "the job to run", || async { (!read_fired(&file).is_empty()).then_some(()) })
        .await?;
    c.workers[0].proc.signal(Signal::SIGSTOP)?;
    let paused_at = now_ms();
    tokio::time::sleep(Duration::from_secs(4)).await;
    c.workers[0].proc.signal(Signal::SIGCONT)?;
    let resumed_at = now_ms();
    let late = c
        .wait_executions("job=punctual&status=missed", "the late tick recorded missed", |l| {
            l.iter().any(|r| r["reason"].as_str().is_some_and(|s| s.contains("past start_deadline 1s")))
        })
        .await?;
    let late = late.iter().find(|r| r["reason"].as_str().unwrap().contains("past start_deadline")).unwrap();
    assert!(late["reason"].as_str().unwrap().contains("misfire: skip"), "{late}");
    let tick = ms(&late["scheduled_at"]);
    assert!(tick > paused_at && tick < resumed_at, "the missed tick fell in the pause: {late}");
    // Every tick of the pause: none ran, each is recorded missed (the late one, and the ones
    // the worker passed over, through the sweep).
    let pause: Vec<i64> = ((paused_at / 1000 + 1) * 1000..resumed_at - 1000).step_by(1000).collect();
    let missed = c
        .wait_executions("job=punctual&status=missed&limit=500", "every tick of the pause recorded missed", |l| {
            pause.iter().all(|t| l.iter().any(|r| ms(&r["scheduled_at"]) == *t))
        })
        .await?;
    let fired = read_fired(&file);
    for t in &pause {
        assert!(!fired.iter().any(|f| f.scheduled_ms == *t), "tick {t} of the pause ran: {fired:?}");
    }
    assert!(missed.len() >= pause.len());
    // A manual run is raced however late: it has no deadline.
    let id = run(&c, "punctual").await;
    c.record_when(&id, "succeeded").await.unwrap();
    Ok(())
}

/// The final record of `id` (any status but running).
async fn finished(c: &Cluster, id: &str) -> Value {
    wait_for(Duration::from_secs(30), &format!("{id} finished"), || async {
        let r = c.get(&format!("/api/executions/{}", urlencode(id))).await.ok()?;
        (r["status"] != "running" && r["finished_at"].is_string()).then_some(r)
    })
    .await
    .inspect_err(|_| c.dump_logs())
    .unwrap()
}

/// HTTP tasks cannot reach the control plane, nor loopback without the worker's allowance:
/// the cluster's own (real) etcd is refused to a worker allowed all of loopback, directly and
/// through a redirect, and nothing of its keys reaches the record; a worker allowed only one
/// loopback server refuses another one and a redirect there, which never sees a connection.
#[tokio::test(flavor = "multi_thread")]
async fn http_tasks_cannot_reach_the_control_plane_or_loopback_unless_allowed() -> anyhow::Result<()> {
    use base64::Engine as _;
    let mut c = Cluster::start("sem-net", 0).await?;
    // B: a loopback server nobody may reach (never accepted: a connection would wait in its backlog).
    let b = std::net::TcpListener::bind("127.0.0.1:0")?;
    let b_url = format!("http://{}/b", b.local_addr()?);
    // A: redirects to where its query says.
    let app = axum::Router::new().route(
        "/hop",
        axum::routing::any(|q: axum::extract::Query<BTreeMap<String, String>>| async move {
            (axum::http::StatusCode::TEMPORARY_REDIRECT, [("location", q["to"].clone())])
        }),
    );
    let a = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let a_addr = a.local_addr()?;
    tokio::spawn(async move { axum::serve(a, app).await });
    let metrics = etcron_tests::free_port();
    let mut lo = WorkerOpts::new("w-lo");
    lo.labels.insert("net".into(), "lo".into());
    lo.extra = vec!["--metrics-listen".into(), format!("127.0.0.1:{metrics}")];
    c.add_worker(lo)?;
    let mut strict = WorkerOpts::new("w-strict");
    strict.labels.insert("net".into(), "strict".into());
    strict.task_network_allow = vec![a_addr.to_string()];
    c.add_worker(strict)?;
    c.wait_workers(2).await?;
    let workers = c.get("/api/workers").await?;
    let allowed: BTreeMap<&str, &Value> = workers["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["id"].as_str().unwrap(), &w["task_network_allow"]))
        .collect();
    assert_eq!(allowed["w-lo"], &json!(["127.0.0.0/8", "::1/128"]), "the registration shows it: {workers}");
    assert_eq!(allowed["w-strict"], &json!([a_addr.to_string()]));

    // A job whose spec holds a secret, in etcd.
    c.put_job("holder", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "true", "secret_env": {"DB_PASSWORD": "s3cret-in-etcd"}}}))
        .await?;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let etcd = format!("127.0.0.1:{}", c.etcd.client_port);
    let range = json!({"key": b64("/"), "range_end": b64("0")}).to_string();
    let http = |net: &str, url: &str| {
        json!({"schedule": "@yearly", "selector": {"net": net},
            "task": {"kind": "http", "method": "POST", "url": url, "body": range, "headers": {"Content-Type": "application/json"}}})
    };
    c.put_job("etcd-range", http("lo", &format!("http://{etcd}/v3/kv/range"))).await?;
    let hop = |to: &str| format!("http://{a_addr}/hop?to={}", urlencode(to));
    c.put_job("etcd-by-redirect", http("lo", &hop(&format!("http://{etcd}/v3/kv/range")))).await?;
    c.put_job("loopback", http("strict", &b_url)).await?;
    c.put_job("loopback-by-redirect", http("strict", &hop(&b_url))).await?;

    for job in ["etcd-range", "etcd-by-redirect"] {
        let r = finished(&c, &run(&c, job).await).await;
        assert_eq!(r["status"], "failed", "{r}");
        let error = r["error"].as_str().unwrap();
        assert!(
            error.contains(&format!("refused to connect to {etcd}: it is etcd endpoint {etcd}"))
                && error.contains("task_network_allow"),
            "{job}: {error}"
        );
        let output = r["output"].as_str().unwrap();
        assert!(output.contains("task_network_allow"), "the reason is in the output: {output}");
        assert!(!output.contains("kvs") && !output.contains("header"), "nothing came back from etcd: {output}");
        assert!(r["http_status"].is_null(), "{r}");
    }
    for job in ["loopback", "loopback-by-redirect"] {
        let r = finished(&c, &run(&c, job).await).await;
        assert_eq!((&r["status"], &r["worker_id"]), (&json!("failed"), &json!("w-strict")), "{r}");
        let error = r["error"].as_str().unwrap();
        let b_addr = b.local_addr()?;
        assert!(error.contains(&format!("refused to connect to {b_addr}: 127.0.0.1 is a loopback address")), "{error}");
    }
    b.set_nonblocking(true)?;
    assert!(b.accept().is_err(), "no connection reached the refused server");
    let scrape = etcron_tests::scrape(&format!("http://127.0.0.1:{metrics}/metrics"), None).await?;
    assert_eq!(scrape.value("etcron_worker_task_connections_refused_total", &[("class", "control_plane")]), 2.0);
    let log = c.workers[0].proc.log_text();
    assert!(log.contains("an HTTP task's request refused: refused to connect to"), "a log line says so");
    Ok(())
}
