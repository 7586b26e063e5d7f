//! Misfire handling: ticks that fell while no worker was running are settled by the job's
//! `misfire` policy once a worker is back, each exactly once; schedules in job timezones across
//! a DST change, run by a worker whose clock is set there.

use std::collections::BTreeMap;
use std::time::Duration;

use etcron_tests::{faketime_env, ms, now_ms, read_fired, record_command, wait_for, wait_tick, Cluster, WorkerOpts};
use nix::sys::signal::Signal;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread")]
async fn ticks_missed_while_every_worker_was_down_follow_the_misfire_policy() -> anyhow::Result<()> {
    let mut c = Cluster::start("misfire-down", 2).await?;
    let file = c.path("fired");
    let jobs = ["m-skip", "m-once", "m-all"];
    for (job, policy) in jobs.iter().zip(["skip", "run_once", "run_all"]) {
        c.put_job(
            job,
            json!({"schedule": "* * * * * *", "misfire": policy, "max_catchup": 3,
                   "task": {"kind": "shell", "command": record_command(&file)}}),
        )
        .await?;
    }
    let jobs: Vec<String> = jobs.iter().map(|j| (*j).to_owned()).collect();
    wait_tick(&file, &jobs, now_ms() + 1000).await?;
    // Every worker stops (drained, leases revoked): nothing claims ticks now.
    for w in &mut c.workers {
        w.proc.signal(Signal::SIGTERM)?;
    }
    for w in &mut c.workers {
        w.proc.wait_exit(Duration::from_secs(20))?;
    }
    let stopped = now_ms();
    // The outage itself: ticks fall while nothing runs.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let restarted = now_ms();
    for w in &mut c.workers {
        w.restart()?;
    }
    c.wait_workers(2).await?;

    // run_all: the newest 3 missed ticks run as catch-up runs, one after another.
    let all = c
        .wait_executions("job=m-all&trigger=catchup", "three catch-up runs", |l| {
            l.len() == 3 && l.iter().all(|r| r["status"] == "succeeded")
        })
        .await?;
    let mut all: Vec<&Value> = all.iter().collect();
    all.sort_by_key(|r| ms(&r["scheduled_at"]));
    for w in all.windows(2) {
        assert_eq!(ms(&w[1]["scheduled_at"]) - ms(&w[0]["scheduled_at"]), 1000);
        assert!(ms(&w[1]["started_at"]) >= ms(&w[0]["finished_at"]), "catch-up runs go one at a time");
    }
    let newest_all = ms(&all[2]["scheduled_at"]);
    assert!(newest_all > stopped && newest_all <= restarted + 2000, "{newest_all} {stopped} {restarted}");
    // The older ticks beyond max_catchup are recorded missed, saying why.
    let beyond =
        c.wait_executions("job=m-all&status=missed", "the ticks beyond max_catchup", |l| !l.is_empty()).await?;
    for r in &beyond {
        assert!(r["reason"].as_str().unwrap().contains("max_catchup"), "{r}");
        assert!(ms(&r["scheduled_at"]) < ms(&all[0]["scheduled_at"]));
    }
    // run_once: one catch-up run, the newest missed tick; the others recorded missed.
    let once = c
        .wait_executions("job=m-once&trigger=catchup", "one catch-up run", |l| {
            l.len() == 1 && l[0]["status"] == "succeeded"
        })
        .await?;
    let once_missed = c.wait_executions("job=m-once&status=missed", "missed ticks", |l| !l.is_empty()).await?;
    assert!(once_missed.iter().all(|r| ms(&r["scheduled_at"]) < ms(&once[0]["scheduled_at"])));
    assert!(once_missed[0]["reason"].as_str().unwrap().contains("run_once"));
    // skip: every tick of the outage is accounted for, run or missed, none twice.
    let skip_missed = c.wait_executions("job=m-skip&status=missed&limit=100", "missed ticks", |l| l.len() >= 5).await?;
    for r in &skip_missed {
        assert_eq!(r["trigger"], "schedule");
        assert!(r["reason"].as_str().unwrap().contains("misfire: skip"), "{r}");
    }
    let after = now_ms() + 1000;
    wait_tick(&file, &jobs, after).await?;
    let fired = read_fired(&file);
    let mut count: BTreeMap<(String, i64, u32), usize> = BTreeMap::new();
    for f in &fired {
        *count.entry((f.job.clone(), f.scheduled_ms, f.attempt)).or_default() += 1;
    }
    assert!(count.values().all(|n| *n == 1), "a tick ran twice");
    let missed: std::collections::BTreeSet<i64> = skip_missed.iter().map(|r| ms(&r["scheduled_at"])).collect();
    let first = fired.iter().filter(|f| f.job == "m-skip").map(|f| f.scheduled_ms).min().unwrap();
    let mut t = first;
    while t < after - 1000 {
        let ran = count.contains_key(&("m-skip".to_owned(), t, 1));
        assert!(ran ^ missed.contains(&t), "tick {t} of m-skip: ran {ran}, missed {}", missed.contains(&t));
        t += 1000;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_worker_applies_the_misfire_policy_when_capacity_frees() -> anyhow::Result<()> {
    let mut c = Cluster::start("misfire-capacity", 0).await?;
    let mut w = WorkerOpts::new("small");
    w.extra = vec!["--capacity".into(), "1".into()];
    c.add_worker(w)?;
    c.wait_workers(1).await?;
    let file = c.path("fired");
    let gate = c.path("gate");
    // The hog holds the only slot until the gate file appears.
    c.put_job("hog", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": format!("while [ ! -e {} ]; do sleep 0.1; done", gate.display())}}))
        .await?;
    c.call(reqwest::Method::POST, "/api/jobs/hog/run", None).await?;
    c.wait_executions("job=hog&status=running", "the hog running", |l| l.len() == 1).await?;
    c.put_job("late", json!({"schedule": "* * * * * *", "misfire": "run_once", "task": {"kind": "shell", "command": record_command(&file)}}))
        .await?;
    // Ticks of `late` find the worker full; after 5 s each gets a catch-up request, which waits.
    wait_for(Duration::from_secs(30), "pending catch-up requests", || async {
        let mut etcd = c.etcd.client().await.ok()?;
        let prefix = format!("{}/trigger/late/catchup-", c.namespace);
        let r = etcd.get(prefix, Some(etcd_client::GetOptions::new().with_prefix())).await.ok()?;
        (r.kvs().len() >= 2).then_some(())
    })
    .await?;
    std::fs::write(&gate, b"")?;
    let caught = c
        .wait_executions("job=late&trigger=catchup", "catch-up runs once the slot frees", |l| {
            l.len() >= 2 && l.iter().all(|r| r["status"] == "succeeded")
        })
        .await?;
    assert!(caught.iter().all(|r| r["worker_id"] == "small"));
    let missed = c.get("/api/executions?job=late&status=missed").await?;
    assert_eq!(missed["executions"].as_array().unwrap().len(), 0, "run_once never records capacity misses: {missed}");
    let fired = read_fired(&file);
    let mut seen = std::collections::BTreeSet::new();
    assert!(fired.iter().all(|f| seen.insert((f.scheduled_ms, f.attempt))), "no tick ran twice");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_timezone_across_the_spring_forward_gap_fires_at_the_first_valid_instant() -> anyhow::Result<()> {
    let mut c = Cluster::start("misfire-dst", 0).await?;
    // 02:30 does not exist in New York on 2027-03-14: clocks jump from 02:00 EST to 03:00 EDT.
    c.put_job(
        "ny-0230",
        json!({"schedule": "0 30 2 * * *", "timezone": "America/New_York", "task": {"kind": "shell", "command": "echo $ETCRON_SCHEDULED_AT"}}),
    )
    .await?;
    let job = c.get("/api/jobs/ny-0230").await?;
    assert!(job["next_runs"][0].as_str().unwrap().contains("T02:30:00"), "{job}");
    // No catch-up from today to 2027 for this test: start the job's state at the worker's time.
    let mut etcd = c.etcd.client().await?;
    etcd.put(format!("{}/state/ny-0230", c.namespace), r#"{"last_tick_ms":1805007580000}"#, None).await?;
    let mut w = WorkerOpts::new("ny-clock");
    // The worker's wall clock starts ten seconds before 02:00 EST (07:00 UTC) and runs on.
    w.env = faketime_env("@2027-03-14 06:59:50")?;
    c.add_worker(w)?;
    c.wait_workers(1).await?;
    let runs = c
        .wait_executions("job=ny-0230", "the 03:00 EDT run", |l| l.len() == 1 && l[0]["status"] == "succeeded")
        .await?;
    assert_eq!(runs[0]["scheduled_at"], "2027-03-14T07:00:00.000Z");
    Ok(())
}
