//! Workers dying and restarting: the survivors keep every tick, nothing runs twice.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on the unexpected

use std::time::Duration;

use etcron_tests::{check_every_second, now_ms, read_fired, record_command, wait_for, Cluster};
use nix::sys::signal::Signal;
use serde_json::json;

async fn every_second_jobs(
    c: &Cluster,
    n: usize,
    file: &std::path::Path,
) -> anyhow::Result<Vec<String>> {
    let jobs: Vec<String> = (0..n).map(|i| format!("job-{i}")).collect();
    for job in &jobs {
        c.put_job(job, json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": record_command(file)}})).await?;
    }
    Ok(jobs)
}

async fn wait_tick(out: &std::path::Path, jobs: &[String], tick_ms: i64) -> anyhow::Result<()> {
    let tick = (tick_ms / 1000) * 1000;
    wait_for(
        Duration::from_secs(30),
        "every job to reach the last tick",
        || async {
            let fired = read_fired(out);
            jobs.iter()
                .all(|j| fired.iter().any(|f| &f.job == j && f.scheduled_ms >= tick))
                .then_some(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigkilled_worker_leaves_the_others_firing_every_tick() -> anyhow::Result<()> {
    let mut c = Cluster::start("failover-sigkill", 3).await?;
    let out = c.path("fired.log");
    let jobs = every_second_jobs(&c, 5, &out).await?;
    let start = now_ms() + 1_500;
    wait_tick(&out, &jobs, start + 2_000).await?;
    let killed_at = now_ms();
    c.workers[0].proc.kill9();
    // Its registration disappears when its session lease (3 s) expires.
    c.wait_workers(2).await?;
    let end = now_ms() + 5_000;
    wait_tick(&out, &jobs, end).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fired = read_fired(&out);
    let report = check_every_second(&fired, &jobs, start, end);
    if !report.duplicates.is_empty() || !report.missing.is_empty() {
        c.dump_logs();
    }
    assert!(
        report.duplicates.is_empty(),
        "duplicates: {:?}",
        report.duplicates
    );
    // A tick the dead worker had claimed in the instant before SIGKILL may not have run (rerun
    // on worker loss is a job policy); every other tick must have.
    let unexplained: Vec<_> = report
        .missing
        .iter()
        .filter(|(_, t)| (*t - killed_at).abs() > 1_000)
        .collect();
    assert!(
        unexplained.is_empty(),
        "missing ticks away from the kill: {unexplained:?}"
    );
    assert!(fired
        .iter()
        .filter(|f| f.scheduled_ms > killed_at + 1_000)
        .all(|f| f.worker != "w1"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_restarting_midway_loses_and_doubles_nothing() -> anyhow::Result<()> {
    let mut c = Cluster::start("failover-restart", 3).await?;
    let out = c.path("fired.log");
    let jobs = every_second_jobs(&c, 5, &out).await?;
    let start = now_ms() + 1_500;
    wait_tick(&out, &jobs, start + 2_000).await?;
    // Graceful stop (SIGTERM): the worker drains, revokes its lease and exits 0.
    c.workers[1].proc.signal(Signal::SIGTERM)?;
    assert_eq!(
        c.workers[1].proc.wait_exit(Duration::from_secs(20))?,
        Some(0)
    );
    c.wait_workers(2).await?;
    wait_tick(&out, &jobs, now_ms() + 2_000).await?;
    c.workers[1].restart()?;
    c.wait_workers(3).await?;
    let restarted_at = now_ms();
    // SIGKILL another one and bring it straight back.
    c.workers[2].restart()?;
    let end = now_ms() + 6_000;
    wait_tick(&out, &jobs, end).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fired = read_fired(&out);
    let report = check_every_second(&fired, &jobs, start, end);
    if !report.duplicates.is_empty() || !report.missing.is_empty() {
        c.dump_logs();
    }
    assert!(
        report.duplicates.is_empty(),
        "duplicates: {:?}",
        report.duplicates
    );
    let unexplained: Vec<_> = report
        .missing
        .iter()
        .filter(|(_, t)| (*t - restarted_at).abs() > 1_000)
        .collect();
    assert!(unexplained.is_empty(), "missing: {unexplained:?}");
    // The gracefully restarted worker is back in the rotation.
    assert!(fired
        .iter()
        .any(|f| f.worker == "w2" && f.scheduled_ms > restarted_at));
    Ok(())
}
