//! Browser tests of the operator console: `web/tests/*.mjs` (playwright-core driving Debian's
//! Chromium) against a real cluster this harness starts. Screenshots land in the test's log
//! directory under `target/debug/test-logs/`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on the unexpected

use std::path::PathBuf;
use std::process::Command;

use etcron_tests::Cluster;
use reqwest::Method;
use serde_json::json;

fn web_tests() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../web/tests")
}

/// Runs one browser script against `url`; fails with its output unless it exits 0.
fn browser(script: &str, url: &str, shots: &std::path::Path) -> anyhow::Result<()> {
    let dir = web_tests();
    anyhow::ensure!(
        dir.join("node_modules/playwright-core").exists(),
        "playwright-core is not installed: run `npm ci --prefix web/tests` (deploy/local/test.sh does)"
    );
    let out = Command::new("node").arg(script).arg(url).arg(shots).current_dir(&dir).output()?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{script}: {text}");
    anyhow::ensure!(out.status.success(), "{script} failed:\n{text}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_jobs_list_shows_state_schedule_results_and_unmatched_selectors() -> anyhow::Result<()> {
    let c = Cluster::start("ui-jobs", 1).await?;
    c.put_job(
        "nightly-report",
        json!({"schedule": "0 30 2 * * *", "timezone": "Europe/Berlin", "description": "the nightly report",
               "labels": {"team": "data"}, "task": {"kind": "shell", "command": "echo report"}}),
    )
    .await?;
    c.put_job(
        "paused-job",
        json!({"schedule": "@hourly", "enabled": false, "task": {"kind": "shell", "command": "true"}}),
    )
    .await?;
    c.put_job(
        "mars-only",
        json!({"schedule": "@daily", "selector": {"region": "mars"}, "task": {"kind": "shell", "command": "true"}}),
    )
    .await?;
    let (status, _) = c.call(Method::POST, "/api/jobs/nightly-report/run", None).await?;
    assert_eq!(status, 202);
    c.wait_executions("job=nightly-report&status=succeeded", "the manual run", |l| l.len() == 1).await?;
    browser("jobs.mjs", &c.master.url, &c.logs)?;
    for shot in ["jobs-1280.png", "jobs-375-dark.png", "workers-1280.png"] {
        assert!(std::fs::metadata(c.logs.join(shot))?.len() > 1000, "{shot} written");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn executions_can_be_searched_opened_and_jobs_run_killed_paused_and_deleted_from_the_ui() -> anyhow::Result<()> {
    let c = Cluster::start("ui-executions", 1).await?;
    c.put_job("echo-job", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "echo needle-7"}}))
        .await?;
    c.put_job("long-job", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "sleep 300"}})).await?;
    let (status, _) = c.call(Method::POST, "/api/jobs/echo-job/run", None).await?;
    assert_eq!(status, 202);
    c.wait_executions("job=echo-job&status=succeeded", "the echo run", |l| l.len() == 1).await?;
    browser("executions.mjs", &c.master.url, &c.logs)?;
    // What the browser did, seen through the API.
    let (status, _) = c.call(Method::GET, "/api/jobs/echo-job", None).await?;
    assert_eq!(status, 404, "deleted from the UI");
    let killed = c.get("/api/executions?job=long-job&status=killed").await?;
    assert_eq!(killed["executions"].as_array().unwrap().len(), 1);
    assert_eq!(c.get("/api/jobs/long-job").await?["spec"]["enabled"], true, "paused and resumed");
    Ok(())
}
