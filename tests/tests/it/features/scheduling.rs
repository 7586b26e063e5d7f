//! Ticks across several real workers: exactly once per tick, edits/pauses/deletes taking
//! effect without restarts, manual runs claimed once.

use std::time::Duration;

use etcron_tests::{check_every_second, now_ms, read_fired, wait_for, wait_tick, Cluster};
use reqwest::Method;
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn ten_jobs_on_three_workers_fire_each_second_exactly_once() -> anyhow::Result<()> {
    let c = Cluster::start("sched-exactly-once", 3).await?;
    let out = c.path("fired.log");
    let jobs = c.every_second_jobs("every-second", 10, &out).await?;
    // Observe a 10 s window that starts after every worker has loaded the jobs.
    let from = now_ms() + 1_500;
    let to = from + 10_000;
    wait_tick(&out, &jobs, to).await?;
    // Every run of the window (and a duplicate, were there one) has ended before judging.
    c.settle_claims(to).await?;
    let fired = read_fired(&out);
    let report = check_every_second(&fired, &jobs, from, to);
    if !report.duplicates.is_empty() || !report.missing.is_empty() {
        c.dump_logs();
    }
    assert!(report.duplicates.is_empty(), "duplicates: {:?}", report.duplicates);
    assert!(report.missing.is_empty(), "missing: {:?}", report.missing);
    // The work is spread over the workers.
    let workers: std::collections::BTreeSet<&str> = fired.iter().map(|f| f.worker.as_str()).collect();
    assert_eq!(workers.len(), 3, "ran on {workers:?}");
    // Fencing tokens grow with the ticks of each job (claims of different jobs batched in one
    // transaction share its revision; a batch holds one claim per job).
    for job in &jobs {
        let mut runs: Vec<(i64, i64)> =
            fired.iter().filter(|f| &f.job == job).map(|f| (f.scheduled_ms, f.fencing_token)).collect();
        runs.sort_unstable();
        assert!(runs.windows(2).all(|w| w[0].1 < w[1].1), "{job}: tokens do not grow with its ticks: {runs:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn edits_pauses_and_deletes_take_effect_on_the_next_tick() -> anyhow::Result<()> {
    let c = Cluster::start("sched-edit", 2).await?;
    let out = c.path("edit.log");
    let command = |tag: &str| {
        format!("echo \"$ETCRON_JOB $ETCRON_SCHEDULED_AT_MS $ETCRON_ATTEMPT $ETCRON_WORKER_ID $ETCRON_FENCING_TOKEN {tag}\" >> {}", out.display())
    };
    c.put_job("edited", json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": command("v1")}}))
        .await?;
    wait_for(Duration::from_secs(15), "v1 runs", || async {
        read_fired(&out).iter().any(|f| f.extra.first().map(String::as_str) == Some("v1")).then_some(())
    })
    .await?;

    let edited_at = now_ms();
    c.put_job("edited", json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": command("v2")}}))
        .await?;
    wait_for(Duration::from_secs(10), "v2 runs", || async {
        read_fired(&out).iter().any(|f| f.extra.first().map(String::as_str) == Some("v2")).then_some(())
    })
    .await?;
    let late_v1 = read_fired(&out)
        .into_iter()
        .filter(|f| f.extra.first().map(String::as_str) == Some("v1") && f.scheduled_ms > edited_at + 1_000)
        .count();
    assert_eq!(late_v1, 0, "old spec ran after the edit took effect");

    // Schedule change: every 2 s on even seconds.
    let changed_at = now_ms();
    c.put_job("edited", json!({"schedule": "*/2 * * * * *", "task": {"kind": "shell", "command": command("v3")}}))
        .await?;
    wait_for(Duration::from_secs(10), "two v3 runs", || async {
        (read_fired(&out).iter().filter(|f| f.extra.first().map(String::as_str) == Some("v3")).count() >= 2)
            .then_some(())
    })
    .await?;
    for f in read_fired(&out).iter().filter(|f| f.scheduled_ms > changed_at + 1_000) {
        assert_eq!(f.scheduled_ms % 2_000, 0, "{f:?} is not on an even second");
    }

    // Pause: no tick after the pause is visible; resume brings them back.
    let (status, _) = c.call(Method::POST, "/api/jobs/edited/pause", None).await?;
    assert_eq!(status, 200);
    let paused_at = now_ms();
    // Observing an absence needs time to pass: two schedule periods.
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let during_pause = read_fired(&out).into_iter().filter(|f| f.scheduled_ms > paused_at + 1_000).count();
    assert_eq!(during_pause, 0, "ticks ran while paused");
    c.call(Method::POST, "/api/jobs/edited/resume", None).await?;
    let resumed_at = now_ms();
    wait_for(Duration::from_secs(10), "a run after resume", || async {
        read_fired(&out).iter().any(|f| f.scheduled_ms > resumed_at).then_some(())
    })
    .await?;

    // Delete: nothing runs afterwards.
    let (status, _) = c.call(Method::DELETE, "/api/jobs/edited", None).await?;
    assert_eq!(status, 204);
    let deleted_at = now_ms();
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let after_delete = read_fired(&out).into_iter().filter(|f| f.scheduled_ms > deleted_at + 1_000).count();
    assert_eq!(after_delete, 0, "ticks ran after delete");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn manual_runs_are_claimed_exactly_once() -> anyhow::Result<()> {
    let c = Cluster::start("sched-manual", 3).await?;
    let out = c.path("manual.log");
    let cmd = format!("echo \"$ETCRON_JOB $ETCRON_SCHEDULED_AT_MS $ETCRON_ATTEMPT $ETCRON_WORKER_ID $ETCRON_FENCING_TOKEN $ETCRON_EXECUTION_ID\" >> {}", out.display());
    c.put_job("on-demand", json!({"schedule": "@yearly", "enabled": false, "task": {"kind": "shell", "command": cmd}}))
        .await?;
    let mut ids = Vec::new();
    for _ in 0..5 {
        let (status, body) = c.call(Method::POST, "/api/jobs/on-demand/run", None).await?;
        assert_eq!(status, 202, "{body}");
        ids.push(body["execution_id"].as_str().unwrap().to_owned());
    }
    wait_for(Duration::from_secs(15), "5 manual runs", || async { (read_fired(&out).len() >= 5).then_some(()) })
        .await?;
    c.settle_claims(now_ms()).await?;
    let fired = read_fired(&out);
    let mut ran: Vec<String> = fired.iter().map(|f| f.extra[0].clone()).collect();
    ran.sort();
    ids.sort();
    assert_eq!(ran, ids, "each manual run exactly once (paused jobs can still be run by hand)");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_manual_run_requested_before_the_worker_saw_the_job_still_runs() -> anyhow::Result<()> {
    // Triggers and jobs arrive on separate watch streams; a trigger can overtake its job.
    // Written in that order on purpose: the trigger first, the job afterwards.
    let c = Cluster::start("sched-early-trigger", 1).await?;
    let out = c.path("early.log");
    let mut etcd = c.etcd.client().await?;
    let lease = etcd.lease_grant(60, None).await?.id();
    let now = now_ms();
    let request = json!({"requested_at": etcron_model::rfc3339_ms(now), "requested_at_ms": now, "reason": "test"});
    let key = format!("{}/trigger/early/r1", c.namespace);
    etcd.put(key, serde_json::to_vec(&request)?, Some(etcd_client::PutOptions::new().with_lease(lease))).await?;
    wait_for(Duration::from_secs(10), "the worker to hold the early trigger", || async {
        c.workers[0].proc.log_text().contains("holding it").then_some(())
    })
    .await?;
    let cmd = format!("echo \"$ETCRON_EXECUTION_ID\" >> {}", out.display());
    c.put_job("early", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": cmd}})).await?;
    let ran = wait_for(Duration::from_secs(15), "the held manual run", || async {
        std::fs::read_to_string(&out).ok().filter(|t| !t.is_empty())
    })
    .await?;
    assert_eq!(ran.trim(), "early@manual-r1#1");
    Ok(())
}
