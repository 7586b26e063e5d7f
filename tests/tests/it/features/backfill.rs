//! Backfills (`POST /api/jobs/{job}/backfill`) on real workers racing for the same runs: each
//! picked tick runs once as one more attempt, also when two backfills pick it at once, when the
//! live schedule holds it, and when the worker running an item is killed; a cancelled backfill
//! requests nothing more; bad requests name their field.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use etcron_tests::{now_ms, read_fired, record_command, wait_for, Cluster, WorkerOpts};
use reqwest::Method;
use serde_json::{json, Value};

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// How many times each (tick, attempt) ran, from the task's own log.
fn runs(file: &Path) -> BTreeMap<(i64, u32), usize> {
    let mut seen = BTreeMap::new();
    for f in read_fired(file) {
        *seen.entry((f.scheduled_ms, f.attempt)).or_default() += 1;
    }
    seen
}

async fn backfill(c: &Cluster, job: &str, body: Value) -> (u16, Value) {
    c.call(Method::POST, &format!("/api/jobs/{job}/backfill"), Some(body)).await.unwrap()
}

/// Waits until the backfill is `done` and answers it with its items.
async fn wait_done(c: &Cluster, job: &str, id: &str, limit: Duration) -> Value {
    let path = format!("/api/jobs/{job}/backfills/{id}");
    let done = wait_for(limit, &format!("backfill {id} done"), || async {
        let v = c.get(&path).await.ok()?;
        (v["state"] == "done").then_some(v)
    })
    .await;
    match done {
        Ok(v) => v,
        Err(e) => {
            c.dump_logs();
            panic!("{e}: {}", c.get(&path).await.unwrap_or_default());
        }
    }
}

/// The run requests of `job` still in etcd (a backfill's chain leaves none once done).
async fn requests_left(c: &Cluster, job: &str) -> Vec<String> {
    let mut etcd = c.etcd.client().await.unwrap();
    let prefix = format!("{}/trigger/{job}/", c.namespace);
    let left = etcd.get(prefix.as_str(), Some(etcd_client::GetOptions::new().with_prefix())).await.unwrap();
    left.kvs().iter().map(|kv| String::from_utf8_lossy(kv.key()).into_owned()).collect()
}

/// Every final record of the job, by execution id.
async fn records(c: &Cluster, job: &str) -> BTreeMap<String, Value> {
    let v = c.get(&format!("/api/executions?job={job}&limit=500")).await.unwrap();
    v["executions"].as_array().unwrap().iter().map(|r| (r["id"].as_str().unwrap().to_owned(), r.clone())).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_backfills_of_the_same_failed_ticks_run_each_once_as_the_next_attempt() -> anyhow::Result<()> {
    let mut c = Cluster::start("backfill-which", 0).await?;
    // A long session TTL: w1 is stopped below for longer than the default TTL, and must stay a
    // member (ranked first for about half the requests) all the while.
    for id in ["w1", "w2"] {
        c.add_worker(WorkerOpts { session_ttl: "20s".to_owned(), ..WorkerOpts::new(id) })?;
    }
    c.wait_workers(2).await?;
    let out = c.path("fired.log");
    // The first attempt of every tick on a second divisible by 3 fails; later attempts succeed.
    let command = format!(
        "{}; [ \"$ETCRON_ATTEMPT\" -gt 1 ] || [ $((ETCRON_SCHEDULED_AT_MS / 1000 % 3)) -ne 0 ]",
        record_command(&out)
    );
    c.put_job("nightly", json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": command}})).await?;
    let from = (now_ms() / 1000 + 2) * 1000;
    let to = from + 8_000;
    c.wait_executions("job=nightly&limit=100", "the range's ticks recorded", |l| {
        (from..=to).step_by(1000).all(|t| l.iter().any(|r| r["scheduled_ms"] == t && r["status"] != "running"))
    })
    .await?;
    let (status, body) =
        c.call(Method::POST, "/api/jobs/nightly/pause", Some(json!({"reason": "backfill test"}))).await?;
    assert_eq!(status, 200, "{body}");
    let failed: Vec<i64> = (from..=to).step_by(1000).filter(|t| (t / 1000) % 3 == 0).collect();
    let range = json!({"from": rfc3339(from), "to": rfc3339(to)});
    let with = |extra: Value| {
        let mut body = range.clone();
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };

    // The dry runs pick exactly the failed ticks, as their second attempt.
    for which in ["failed", "missing"] {
        let (status, dry) = backfill(&c, "nightly", with(json!({"which": which, "dry_run": true}))).await;
        assert_eq!(status, 200, "{dry}");
        let ticks: Vec<&str> =
            dry["ticks"].as_array().unwrap().iter().map(|t| t["execution_id"].as_str().unwrap()).collect();
        let want: Vec<String> = failed.iter().map(|t| format!("nightly@{t}#2")).collect();
        assert_eq!(ticks, want, "{which}: {dry}");
        assert_eq!(dry["count"], failed.len());
        assert_eq!(dry["excluded_count"], 9 - failed.len(), "{dry}");
    }
    let (_, all) = backfill(&c, "nightly", with(json!({"which": "all", "dry_run": true}))).await;
    assert_eq!(all["count"], 9, "{all}");

    // Two backfills of the same ticks at once: one serial, one parallel. They pick the same
    // attempts, so each tick runs once, whichever claims it. w1 is stopped meanwhile (within its
    // session TTL, so still ranked first for about half the requests): w2 takes its requests
    // after its head start, and consumes those whose execution the other backfill took, so
    // both chains end with w1 still stopped and no request left behind.
    c.workers[0].proc.signal(nix::sys::signal::Signal::SIGSTOP)?;
    let stopped = std::time::Instant::now();
    let (a, b) = tokio::join!(
        backfill(&c, "nightly", with(json!({"which": "failed", "reason": "first"}))),
        backfill(&c, "nightly", with(json!({"which": "missing", "overlap": "parallel", "max_parallel": 2}))),
    );
    assert_eq!((a.0, b.0), (201, 201), "{a:?} {b:?}");
    assert_eq!(a.1["state"], "running");
    assert_eq!(a.1["counts"]["total"], failed.len());
    let ids = [a.1["id"].as_str().unwrap().to_owned(), b.1["id"].as_str().unwrap().to_owned()];
    for id in &ids {
        wait_done(&c, "nightly", id, Duration::from_secs(12)).await;
    }
    let left = requests_left(&c, "nightly").await;
    assert!(left.is_empty(), "run requests left behind: {left:?}");
    assert!(stopped.elapsed() < Duration::from_secs(18), "w1 was stopped past its session TTL");
    c.workers[0].proc.signal(nix::sys::signal::Signal::SIGCONT)?;
    for id in &ids {
        let done = wait_done(&c, "nightly", id, Duration::from_secs(60)).await;
        let statuses: Vec<&str> =
            done["items"].as_array().unwrap().iter().map(|i| i["status"].as_str().unwrap()).collect();
        assert!(statuses.iter().all(|s| *s == "succeeded"), "{done}");
        assert_eq!(done["counts"]["succeeded"], failed.len(), "{done}");
    }
    c.settle_claims(now_ms()).await?;
    let ran = runs(&out);
    let recs = records(&c, "nightly").await;
    for t in &failed {
        assert_eq!(ran.get(&(*t, 2)), Some(&1), "tick {t} attempt 2 ran {:?} times", ran.get(&(*t, 2)));
        assert_eq!(ran.get(&(*t, 3)), None, "tick {t} ran a third attempt");
        let r = &recs[&format!("nightly@{t}#2")];
        assert_eq!((r["trigger"].as_str(), r["status"].as_str()), (Some("backfill"), Some("succeeded")), "{r}");
        assert!(ids.iter().any(|id| r["params"]["backfill"]["id"] == *id.as_str()), "{r}");
    }
    assert!(ran.iter().all(|((t, attempt), _)| *attempt == 1 || failed.contains(t)), "{ran:?}");

    // Nothing failed is left: a third backfill has nothing to do.
    let (status, e) = backfill(&c, "nightly", with(json!({"which": "failed"}))).await;
    assert_eq!((status, e["error"]["field"].as_str()), (400, Some("which")), "{e}");
    let list = c.get("/api/jobs/nightly/backfills").await?;
    assert_eq!(list["backfills"].as_array().unwrap().len(), 2, "{list}");
    let (status, e) = c.call(Method::POST, &format!("/api/jobs/nightly/backfills/{}/cancel", ids[0]), None).await?;
    assert_eq!(status, 409, "a done backfill cannot be cancelled: {e}");

    // Bad requests name their field.
    for (body, code, field) in [
        (json!({"from": rfc3339(from), "to": rfc3339(now_ms() + 60_000)}), 400, Some("to")),
        (json!({"from": rfc3339(to), "to": rfc3339(from)}), 400, Some("from")),
        (json!({"from": "yesterday", "to": rfc3339(to)}), 400, Some("from")),
        (with(json!({"which": "all", "max_runs": 3})), 400, Some("max_runs")),
        (with(json!({"max_parallel": 2})), 400, Some("max_parallel")),
        (with(json!({"colour": "red"})), 400, Some("colour")),
    ] {
        let (status, e) = backfill(&c, "nightly", body.clone()).await;
        assert_eq!((status, e["error"]["field"].as_str()), (code, field), "{body}: {e}");
    }
    let (status, _) = backfill(&c, "absent", range.clone()).await;
    assert_eq!(status, 404);
    let broadcast = json!({"schedule": "@daily", "mode": "broadcast", "task": {"kind": "shell", "command": "true"}});
    c.put_job("everywhere", broadcast).await?;
    let (status, e) = backfill(&c, "everywhere", range.clone()).await;
    assert_eq!((status, e["error"]["field"].as_str()), (400, Some("job")), "{e}");
    let (status, _) = c.call(Method::GET, "/api/jobs/nightly/backfills/nope", None).await?;
    assert_eq!(status, 404);
    let (status, e) = c.call(Method::GET, "/api/jobs/nightly/backfills/-bad", None).await?;
    assert_eq!((status, e["error"]["field"].as_str()), (400, Some("id")), "{e}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backfilled_tick_the_live_schedule_holds_runs_once() -> anyhow::Result<()> {
    let c = Cluster::start("backfill-live", 2).await?;
    c.wait_workers(2).await?;
    let out = c.path("fired.log");
    // Runs last 3 s, so at any time the newest ticks are running and the newest of all has no
    // record yet (a run's `running` record is written after a second): a backfill picks that
    // one as attempt 1, the very execution the live schedule claimed.
    let command = format!("{}; sleep 3", record_command(&out));
    c.put_job("live", json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": command}})).await?;
    c.wait_executions("job=live&limit=100", "a finished run", |l| l.iter().any(|r| r["status"] == "succeeded")).await?;
    let mut collided = 0;
    let mut ids = Vec::new();
    // A few tries: the moment must fall after a tick's claim and before its running record.
    for _ in 0..5 {
        let now = now_ms();
        let (status, body) =
            backfill(&c, "live", json!({"from": rfc3339(now - 6_000), "to": rfc3339(now), "which": "all"})).await;
        assert_eq!(status, 201, "{body}");
        let items = body["items"].as_array().unwrap().clone();
        collided += items.iter().filter(|i| i["execution_id"].as_str().unwrap().ends_with("#1")).count();
        ids.push(body["id"].as_str().unwrap().to_owned());
        if collided > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    assert!(collided > 0, "no backfill picked a tick the live schedule was running");
    for id in &ids {
        let done = wait_done(&c, "live", id, Duration::from_secs(90)).await;
        assert!(done["items"].as_array().unwrap().iter().all(|i| i["status"] == "succeeded"), "{done}");
    }
    c.settle_claims(now_ms()).await?;
    let dup: Vec<_> = runs(&out).into_iter().filter(|(_, n)| *n > 1).collect();
    assert!(dup.is_empty(), "runs of one execution more than once: {dup:?}");
    let left: Vec<String> = requests_left(&c, "live").await.into_iter().filter(|k| k.contains("/bf-")).collect();
    assert!(left.is_empty(), "backfill requests left behind: {left:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backfill_goes_on_after_the_worker_running_an_item_is_killed_and_stops_when_cancelled() -> anyhow::Result<()>
{
    let c = Cluster::start("backfill-kill", 2).await?;
    c.wait_workers(2).await?;
    let out = c.path("fired.log");
    let command = format!("{}; sleep 2", record_command(&out));
    // Paused from its first tick: every tick is recorded `skipped`, which `missing` picks.
    c.put_job("slow", json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": command}})).await?;
    let (status, _) = c.call(Method::POST, "/api/jobs/slow/pause", Some(json!({}))).await?;
    assert_eq!(status, 200);
    // From the tick after the first one recorded skipped (the pause has reached the workers).
    let first = c.wait_executions("job=slow&status=skipped", "a skipped tick", |l| !l.is_empty()).await?;
    let from = first.iter().filter_map(|r| r["scheduled_ms"].as_i64()).max().unwrap() + 1_000;
    let to = from + 5_000;
    c.wait_executions("job=slow&status=skipped&limit=100", "the range's ticks skipped", |l| {
        (from..=to).step_by(1000).all(|t| l.iter().any(|r| r["scheduled_ms"] == t))
    })
    .await?;
    let (status, body) = backfill(&c, "slow", json!({"from": rfc3339(from), "to": rfc3339(to)})).await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    assert_eq!(body["counts"]["total"], 6, "{body}");

    // Kill the worker running the second item.
    let running = c
        .wait_executions("job=slow&status=running&trigger=backfill", "a backfilled run going", |l| {
            l.iter().any(|r| r["params"]["backfill"]["index"] == 1)
        })
        .await?;
    let victim = running.iter().find(|r| r["params"]["backfill"]["index"] == 1).unwrap()["worker_id"].clone();
    let killed = c.workers.iter().position(|w| victim == w.opts.id.as_str()).unwrap();
    let mut c = c;
    c.workers[killed].proc.kill9();
    let done = wait_done(&c, "slow", &id, Duration::from_secs(90)).await;
    let items = done["items"].as_array().unwrap();
    assert_eq!(items[1]["status"], "lost", "{done}");
    for (i, item) in items.iter().enumerate().filter(|(i, _)| *i != 1) {
        assert_eq!(item["status"], "succeeded", "item {i}: {done}");
    }
    // Each item ran once, oldest first, and the lost one once more as its failover rerun
    // (`on_worker_loss: rerun`, the default), which does not advance the chain again.
    let t1 = from + 1_000;
    c.wait_executions("job=slow&trigger=failover", "the lost item's rerun", |l| {
        l.iter().any(|r| r["id"] == format!("slow@{t1}#3") && r["status"] == "succeeded")
    })
    .await?;
    c.settle_claims(now_ms()).await?;
    let mut want: BTreeMap<(i64, u32), usize> = (from..=to).step_by(1000).map(|t| ((t, 2), 1)).collect();
    want.insert((t1, 3), 1);
    let in_range: BTreeMap<(i64, u32), usize> = runs(&out).into_iter().filter(|((t, _), _)| *t >= from).collect();
    assert_eq!(in_range, want, "runs of the range's ticks (a run before the pause reached the workers aside)");
    let order: Vec<i64> = read_fired(&out).iter().filter(|f| f.attempt == 2).map(|f| f.scheduled_ms).collect();
    assert_eq!(order, (from..=to).step_by(1000).collect::<Vec<_>>(), "one item at a time, oldest first");
    assert_eq!(requests_left(&c, "slow").await, Vec::<String>::new());

    // A cancel stops the chain: the item running finishes, no later one starts.
    c.workers[killed].restart()?;
    c.wait_workers(2).await?;
    let before = read_fired(&out).len();
    let (status, body) = backfill(&c, "slow", json!({"from": rfc3339(from), "to": rfc3339(to), "which": "all"})).await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    wait_for(Duration::from_secs(20), "the first item to start", || async {
        (read_fired(&out).len() > before).then_some(())
    })
    .await?;
    let (status, cancelled) = c.call(Method::POST, &format!("/api/jobs/slow/backfills/{id}/cancel"), None).await?;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["state"], "cancelled");
    tokio::time::sleep(Duration::from_secs(5)).await; // two items' worth: none may start
    let view = c.get(&format!("/api/jobs/slow/backfills/{id}")).await?;
    let statuses: Vec<&str> = view["items"].as_array().unwrap().iter().map(|i| i["status"].as_str().unwrap()).collect();
    assert_eq!(statuses[0], "succeeded", "{view}");
    assert!(statuses[1..].iter().all(|s| *s == "cancelled"), "{view}");
    assert_eq!(view["counts"]["cancelled"], statuses.len() - 1, "{view}");
    assert_eq!(read_fired(&out).len(), before + 1, "only the item running when cancelled ran");
    let (status, _) = c.call(Method::POST, &format!("/api/jobs/slow/backfills/{id}/cancel"), None).await?;
    assert_eq!(status, 409);
    Ok(())
}
