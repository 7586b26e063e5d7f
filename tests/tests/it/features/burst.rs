//! A burst: hundreds of one-shot jobs due at the same instant on three workers. Every job runs
//! exactly once (attempt 1, no failover: no worker died), every run is recorded, no session is
//! lost, and the claims and closes went to etcd in batches — fewer raft proposals than fires,
//! where one claim and one close per fire would be two.

use std::collections::BTreeMap;
use std::time::Duration;

use etcron_tests::{free_port, now_ms, read_fired, record_command, scrape, wait_for, Cluster, WorkerOpts};
use serde_json::json;

const JOBS: usize = 300;

#[tokio::test(flavor = "multi_thread")]
async fn jobs_due_at_one_instant_each_run_once_with_batched_claims_and_closes() -> anyhow::Result<()> {
    let mut c = Cluster::start_with("burst", 0, false, &[]).await?;
    let mut urls = Vec::new();
    for id in ["w1", "w2", "w3"] {
        let port = free_port();
        let mut opts = WorkerOpts::new(id);
        opts.session_ttl = "10s".to_owned();
        opts.extra = vec!["--metrics-listen".to_owned(), format!("127.0.0.1:{port}"), "--capacity=400".to_owned()];
        c.add_worker(opts)?;
        urls.push(format!("http://127.0.0.1:{port}/metrics"));
    }
    c.wait_workers(3).await?;
    let file = c.path("fired");
    // Far enough ahead for every job to reach every worker first.
    let at_ms = (now_ms() / 1000 + 20) * 1000;
    let at = etcron_model::rfc3339_ms(at_ms);
    let jobs: Vec<String> = (0..JOBS).map(|i| format!("burst-{i:03}")).collect();
    for job in &jobs {
        c.put_job(
            job,
            json!({"schedule": format!("@at {at}"), "task": {"kind": "shell", "command": record_command(&file)}}),
        )
        .await?;
    }
    assert!(now_ms() < at_ms - 2_000, "the jobs were created in time for the burst");
    let proposals_before = c.etcd.metric("etcd_server_proposals_committed_total").await?;
    let fired = wait_for(Duration::from_secs(120), "every burst job to run", || async {
        let fired = read_fired(&file);
        (fired.len() >= JOBS).then_some(fired)
    })
    .await?;
    let records = c
        .wait_executions(&format!("since={at}&limit=500"), "every run's final record", |l| {
            l.len() >= JOBS && l.iter().all(|r| r["status"] != "running")
        })
        .await?;
    let proposals = c.etcd.metric("etcd_server_proposals_committed_total").await? - proposals_before;

    let mut runs: BTreeMap<(&str, i64, u32), usize> = BTreeMap::new();
    for f in &fired {
        *runs.entry((f.job.as_str(), f.scheduled_ms, f.attempt)).or_default() += 1;
    }
    assert_eq!(runs.len(), JOBS, "one run per job: {runs:?}");
    assert!(runs.iter().all(|((_, t, a), n)| *t == at_ms && *a == 1 && *n == 1), "{runs:?}");
    assert_eq!(records.len(), JOBS);
    assert!(records.iter().all(|r| r["status"] == "succeeded" && r["trigger"] == "schedule"), "{records:?}");
    let mut batches = BTreeMap::new();
    for url in &urls {
        let s = scrape(url, None).await?;
        assert_eq!(s.value("etcron_worker_session_lease_losses_total", &[]), 0.0, "{url}: no session lost");
        for kind in ["claim", "close"] {
            *batches.entry(kind).or_insert(0.0) += s.value("etcron_worker_batch_size_count", &[("kind", kind)]);
        }
    }
    eprintln!("{JOBS} fires: {proposals} etcd proposals; batches {batches:?}");
    assert!(batches["claim"] > 0.0 && batches["close"] > 0.0, "claims and closes were batched: {batches:?}");
    // One claim and one close per fire would be 2 × JOBS proposals, plus the spec writes that
    // disable the one-shot jobs (in the closes).
    assert!(proposals < JOBS as f64, "{proposals} proposals for {JOBS} fires");
    Ok(())
}

/// Capacity counts runs, not races (issue 33): a worker of capacity 2 with three jobs due at one
/// instant wins all three claims (racing takes no slot), runs two, and records the third
/// `missed` naming the slot it waited for until its start deadline; a run request that finds
/// every slot taken waits for one and runs when a run ends.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_takes_a_slot_when_a_won_run_starts_and_a_run_without_one_is_missed_naming_capacity(
) -> anyhow::Result<()> {
    let mut c = Cluster::start_with("capacity-runs", 0, false, &[]).await?;
    let mut opts = WorkerOpts::new("w1");
    opts.extra = vec!["--capacity=2".to_owned()];
    c.add_worker(opts)?;
    c.wait_workers(1).await?;
    let at_ms = (now_ms() / 1000 + 8) * 1000;
    let at = etcron_model::rfc3339_ms(at_ms);
    for i in 0..3 {
        let spec = json!({"schedule": format!("@at {at}"), "start_deadline": "1s", "task": {"kind": "shell", "command": "sleep 3"}});
        c.put_job(&format!("slot-{i}"), spec).await?;
    }
    let records = c
        .wait_executions(&format!("since={at}&limit=10"), "three final records", |l| {
            l.len() == 3 && l.iter().all(|r| r["status"] != "running")
        })
        .await?;
    let status: Vec<&str> = records.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(status.iter().filter(|s| **s == "succeeded").count(), 2, "{records:?}");
    let missed: Vec<_> = records.iter().filter(|r| r["status"] == "missed").collect();
    assert_eq!(missed.len(), 1, "{records:?}");
    let reason = missed[0]["error"].as_str().or(missed[0]["reason"].as_str()).unwrap_or_default();
    assert!(reason.contains("no capacity slot came free on worker w1"), "{}", missed[0]);
    assert!(missed[0]["fencing_token"].is_u64(), "the worker won its claim: {}", missed[0]);

    // Three manual runs on two slots: the third waits for a slot and runs.
    c.put_job("waits", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "sleep 2"}})).await?;
    for _ in 0..3 {
        let (status, body) = c.call(reqwest::Method::POST, "/api/jobs/waits/run", None).await?;
        assert_eq!(status, 202, "{body}");
    }
    let runs = c
        .wait_executions("job=waits", "three runs to end", |l| {
            l.len() == 3 && l.iter().all(|r| r["status"] != "running")
        })
        .await?;
    assert!(runs.iter().all(|r| r["status"] == "succeeded"), "{runs:?}");
    Ok(())
}
