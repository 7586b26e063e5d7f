//! `apply --jobs 100000 [--changed 1000]`: `etcronctl jobs apply -f FILE` of one JSON file of N
//! jobs (a schedule, labels and a shell command each) against a master, as an operator runs it:
//! the first apply (every job created), the same file with `--changed` jobs edited (the diff
//! path, with the overwrite check of each changed job), and the same file again (all
//! unchanged). For each: etcronctl's wall time, its summary line, and the master's requests by
//! route (count and the master's own seconds, from `etcron_master_http_requests_total` and
//! `etcron_master_http_request_duration_seconds`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use anyhow::{ensure, Result};
use etcron_tests::{bin, scrape, Cluster, Scrape};
use serde_json::json;

/// The master's byte budget for job changes in this run: 100 000 saves of ~300 bytes cost
/// ~110 MB (each spec twice plus 512 bytes), over the default burst of 64 MiB, which protects
/// etcd from a runaway client; an operator importing this many jobs raises it the same way.
const BYTES_BURST: u64 = 1 << 30;

pub async fn run(n: usize, changed: usize) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("master.toml");
    std::fs::write(&config, format!("change_bytes_burst = {BYTES_BURST}\n"))?;
    let c = Cluster::start_with("bench-apply", 0, false, &["--config", &config.display().to_string()]).await?;
    let file = dir.path().join("jobs.json");
    println!("apply: {n} jobs in one JSON file, master change_bytes_burst = {BYTES_BURST}");
    write_file(&file, n, 0, 0)?;
    println!("  file: {:.1} MiB", std::fs::metadata(&file)?.len() as f64 / 1_048_576.0);
    let expect = format!("{n} created, 0 updated, 0 unchanged, 0 deleted");
    timed(&c, "first apply (all created)", &file, &expect).await?;
    let changed = changed.min(n);
    write_file(&file, n, changed, 1)?;
    let expect = format!("0 created, {changed} updated, {} unchanged, 0 deleted", n - changed);
    timed(&c, &format!("second apply ({changed} changed)"), &file, &expect).await?;
    let expect = format!("0 created, 0 updated, {n} unchanged, 0 deleted");
    timed(&c, "third apply (nothing changed)", &file, &expect).await
}

/// The file of `n` jobs; every (n / changed)-th job's command carries `edit`.
fn write_file(path: &Path, n: usize, changed: usize, edit: usize) -> Result<()> {
    let every = n.checked_div(changed).unwrap_or(usize::MAX).max(1);
    let mut jobs = serde_json::Map::new();
    for i in 0..n {
        let mut command = format!("/usr/local/bin/report --part {i} --out /var/lib/reports/{i}.csv");
        if i % every == 0 && i / every < changed {
            command.push_str(&format!(" --edit {edit}"));
        }
        let spec = json!({
            "schedule": format!("{} {} * * *", i % 60, (i / 60) % 24),
            "description": format!("nightly report, part {i}"),
            "labels": {"team": format!("t{}", i % 50), "tier": "batch"},
            "timeout": "30m",
            "task": {"kind": "shell", "command": command},
        });
        jobs.insert(format!("apply-{i:06}"), spec);
    }
    std::fs::write(path, serde_json::to_vec(&json!({ "jobs": jobs }))?)?;
    Ok(())
}

/// Runs `etcronctl jobs apply -f file`, checks its summary line and prints its time and the
/// master's requests.
async fn timed(c: &Cluster, what: &str, file: &Path, expect: &str) -> Result<()> {
    let before = scrape(&format!("{}/metrics", c.master.url), None).await?;
    let t = Instant::now();
    let out = tokio::process::Command::new(bin("etcronctl")?)
        .args(["jobs", "apply", "-f", &file.display().to_string()])
        .env("ETCRON_SERVER", &c.master.url)
        .env_remove("ETCRON_TOKEN")
        .output()
        .await?;
    let took = t.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout.lines().last().unwrap_or_default();
    ensure!(
        out.status.success() && summary == expect,
        "{what}: etcronctl {}: {summary:?} (expected {expect:?}); stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).lines().take(5).collect::<Vec<_>>().join(" | ")
    );
    let after = scrape(&format!("{}/metrics", c.master.url), None).await?;
    println!("  {what}: {took:.2} s  ({summary})");
    for ((method, route), (count, seconds)) in requests(&after, &before) {
        println!("      {method} {route}: {count} requests, {seconds:.2} s in the master");
    }
    Ok(())
}

/// Requests by (method, route) between two scrapes: their count and the master's seconds.
fn requests(after: &Scrape, before: &Scrape) -> BTreeMap<(String, String), (f64, f64)> {
    let mut out: BTreeMap<(String, String), (f64, f64)> = BTreeMap::new();
    let of = |s: &Scrape, name: &str, labels: &BTreeMap<String, String>| {
        let l: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        s.value(name, &l)
    };
    for (name, labels, value) in &after.samples {
        let key = (labels.get("method").cloned().unwrap_or_default(), labels.get("route").cloned().unwrap_or_default());
        if key.1.starts_with("/metrics") {
            continue;
        }
        let delta = value - of(before, name, labels);
        if name == "etcron_master_http_requests_total" && delta > 0.0 {
            out.entry(key).or_default().0 += delta;
        } else if name == "etcron_master_http_request_duration_seconds_sum" && delta > 0.0 {
            out.entry(key).or_default().1 += delta;
        }
    }
    out
}
