//! A small-quota etcd driven into its NOSPACE alarm under a running cluster: etcron says so
//! clearly (a job write answers 507 `etcd_nospace`, the workers count `nospace` errors), runs no
//! tick twice, and once an operator compacts, defragments and disarms etcd (the procedure of
//! docs/operations.md) it runs again and every tick of the alarm is run or recorded `missed`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _};
use etcd_client::{AlarmAction, AlarmType};
use etcron_tests::{browser_with, now_ms, read_fired, scrape, wait_for, wait_tick, Cluster, WorkerOpts};
use serde_json::{json, Value};

/// The quota: small enough to fill in a second, big enough for the cluster's own keys.
const QUOTA: &str = "--quota-backend-bytes=16777216";

/// Scheduled ms of `job`'s records with `status` (all pages).
async fn recorded(c: &Cluster, job: &str, status: &str) -> anyhow::Result<BTreeSet<i64>> {
    let mut out = BTreeSet::new();
    let mut cursor = String::new();
    loop {
        let page = c.get(&format!("/api/executions?job={job}&status={status}&limit=500{cursor}")).await?;
        for r in page["executions"].as_array().context("executions")? {
            out.insert(r["scheduled_ms"].as_i64().context("scheduled_ms")?);
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return Ok(out),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_etcd_is_reported_runs_nothing_twice_and_every_tick_is_accounted_for_after_recovery(
) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let trace = |what: &str| eprintln!("[{:>6.1} s] {what}", t0.elapsed().as_secs_f64());
    // etcd 3.4 does not report its quota: the master is told it.
    let mut c = Cluster::start_with_etcd("etcd-alarm", 0, false, &["--etcd-quota-bytes", "16777216"], &[QUOTA]).await?;
    for i in 1..=2 {
        let mut w = WorkerOpts::new(&format!("w{i}"));
        w.extra.push(format!("--metrics-listen=127.0.0.1:{}", etcron_tests::free_port()));
        c.add_worker(w)?;
    }
    c.wait_workers(2).await?;
    let file = c.path("fired.log");
    let jobs = c.every_second_jobs("full", 3, &file).await?;
    wait_tick(&file, &jobs, now_ms() + 1000).await?;
    let from = now_ms();
    trace("3 jobs firing every second on 2 workers; etcd quota 16 MiB");

    // Fill etcd from outside the namespace, as an unrelated client would, until it refuses.
    let mut client = c.etcd.client().await?;
    let filler = vec![b'x'; 512 * 1024];
    let mut puts = 0;
    let refusal = loop {
        match client.put("/filler", filler.clone(), None).await {
            Ok(_) => puts += 1,
            Err(e) if e.to_string().contains("database space exceeded") => break e.to_string(),
            Err(e) => bail!("filling etcd: {e}"),
        }
        ensure!(puts < 1000, "etcd never refused a write");
    };
    let status = client.status().await?;
    trace(&format!(
        "etcd refused put #{}: {refusal:?}; dbSize {:.1} MiB",
        puts + 1,
        status.db_size() as f64 / 1048576.0
    ));
    let alarms = client.alarm(AlarmAction::Get, AlarmType::None, None).await?;
    let nospace: Vec<u64> =
        alarms.alarms().iter().filter(|a| a.alarm() == AlarmType::Nospace).map(|a| a.member_id()).collect();
    ensure!(!nospace.is_empty(), "etcd raised the NOSPACE alarm");

    // The API names the cause, with a status a client will not retry blindly.
    let spec = json!({"schedule": "@every 1h", "task": {"kind": "shell", "command": "true"}});
    let resp = c.http.put(format!("{}/api/jobs/while-full", c.master.url)).json(&spec).send().await?;
    let code = resp.status().as_u16();
    let body: Value = resp.json().await?;
    trace(&format!("PUT /api/jobs/while-full -> {code} {body}"));
    assert_eq!(code, 507, "{body}");
    assert_eq!(body["error"]["code"], "etcd_nospace", "{body}");
    // A batch too: etcd weighs only top-level puts against its quota, and the changes of a
    // batch are nested; the master's probe put makes etcd refuse them all the same.
    let changes = json!({"changes": [{"job": "batch-a", "op": "put", "spec": spec}, {"job": "batch-b", "op": "put", "spec": spec}]});
    let resp = c.http.post(format!("{}/api/batch", c.master.url)).json(&changes).send().await?;
    let body: Value = resp.json().await?;
    trace(&format!("POST /api/batch (2 puts) -> {body}"));
    let statuses: Vec<u64> =
        body["results"].as_array().into_iter().flatten().filter_map(|r| r["status"].as_u64()).collect();
    assert_eq!(statuses, [507, 507], "{body}");

    // No tick runs while etcd refuses claims; the workers count why.
    wait_for(Duration::from_secs(30), "ticks to stop running", || async {
        let newest = read_fired(&file).iter().map(|f| f.scheduled_ms).max().unwrap_or(0);
        (now_ms() - newest > 4_000).then_some(())
    })
    .await?;
    // The masters see it within a poll: in /readyz (still ready: a warning), in the API, on
    // every page of the console.
    let storage = wait_for(Duration::from_secs(30), "the master to see the alarm", || async {
        let s = c.get("/api/cluster/storage").await.ok()?;
        s["alarms"].as_array()?.iter().any(|a| a == "NOSPACE").then_some(s)
    })
    .await?;
    trace(&format!("GET /api/cluster/storage -> {storage}"));
    assert!(storage["warning"].as_str().is_some_and(|w| w.contains("NOSPACE")), "{storage}");
    let ready = c.http.get(format!("{}/readyz", c.master.url)).send().await?;
    assert_eq!(ready.status(), 200, "a storage warning does not make the master unready");
    let ready: Value = ready.json().await?;
    assert!(ready["etcd_storage"]["warning"].as_str().is_some_and(|w| w.contains("NOSPACE")), "{ready}");
    let metrics = scrape(&format!("{}/metrics", c.master.url), None).await?;
    assert_eq!(metrics.value("etcron_etcd_alarm_active", &[]), 1.0);
    assert!(metrics.value("etcron_etcd_db_size_bytes", &[]) > 8.0 * 1048576.0);
    assert_eq!(metrics.value("etcron_etcd_db_quota_bytes", &[]), 16_777_216.0);
    browser_with("storage.mjs", &c.master.url, &c.logs, &[], &[])?;
    trace("the console shows the NOSPACE warning on every page");
    let mut refused = 0.0;
    for w in &c.workers {
        let port = w.opts.extra.iter().find_map(|a| a.rsplit_once(':').map(|(_, p)| p.to_owned())).unwrap();
        let m = scrape(&format!("http://127.0.0.1:{port}/metrics"), None).await?;
        refused += m.value("etcron_etcd_request_errors_total", &[("kind", "nospace")]);
    }
    trace(&format!("ticks stopped; workers counted {refused} etcd requests refused for space"));
    assert!(refused > 0.0, "the workers count the refused requests as nospace");

    // The documented recovery, run as printed in docs/operations.md: compact, defragment, disarm.
    let ops = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operations.md"))?;
    let section = ops.split("## Recovering from NOSPACE").nth(1).context("the recovery section")?;
    let script = section.split("```sh\n").nth(1).and_then(|s| s.split("```").next()).context("its sh block")?;
    let out = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .env("ETCDCTL_ENDPOINTS", &c.etcd.endpoint)
        .output()?;
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    ensure!(out.status.success(), "the documented recovery failed:\n{printed}");
    let status = client.status().await?;
    let outage_end = now_ms();
    trace(&format!(
        "ran the recovery of docs/operations.md ({} alarm(s) were raised):\n{printed}dbSize now {:.1} MiB",
        nospace.len(),
        status.db_size() as f64 / 1048576.0
    ));
    ensure!(client.alarm(AlarmAction::Get, AlarmType::None, None).await?.alarms().is_empty(), "alarm cleared");
    wait_for(Duration::from_secs(30), "the master to see the alarm cleared", || async {
        let s = c.get("/api/cluster/storage").await.ok()?;
        s["warning"].is_null().then_some(())
    })
    .await?;

    // Writes work again and ticks run again.
    let resp = c.http.put(format!("{}/api/jobs/after-recovery", c.master.url)).json(&spec).send().await?;
    assert!(resp.status().is_success(), "PUT after recovery: {}", resp.status());
    wait_tick(&file, &jobs, now_ms() + 1000).await?;
    let to = now_ms();
    trace("ticks run again");

    // Every tick from before the alarm to after it ran once or is recorded missed.
    let window: Vec<i64> = ((from / 1000 + 1) * 1000..=to - 1000).step_by(1000).collect();
    let (fired, missed) = wait_for(Duration::from_secs(90), "every tick run or recorded", || async {
        let fired = read_fired(&file);
        let mut missed_total = 0;
        for job in &jobs {
            let missed = recorded(&c, job, "missed").await.ok()?;
            for t in &window {
                let ran = fired.iter().any(|f| &f.job == job && f.scheduled_ms == *t);
                if !ran && !missed.contains(t) {
                    return None;
                }
                missed_total += usize::from(missed.contains(t));
            }
        }
        Some((fired, missed_total))
    })
    .await?;
    let mut seen = BTreeSet::new();
    let twice: Vec<_> = fired.iter().filter(|f| !seen.insert((f.job.clone(), f.scheduled_ms, f.attempt))).collect();
    assert!(twice.is_empty(), "ran twice: {twice:?}");
    trace(&format!(
        "{} ticks × {} jobs from before the alarm to after it: {} ran, {missed} recorded missed (alarm {:.1} s), none twice",
        window.len(),
        jobs.len(),
        window.len() * jobs.len() - missed,
        (outage_end - from) as f64 / 1000.0
    ));
    assert!(missed > 0, "the alarm's ticks are recorded missed");
    Ok(())
}
