//! `stream --jobs K --seconds S`: live-output latency. One task prints its own clock (Unix ms)
//! ten times a second for S seconds while K clients follow it through
//! `GET /api/executions/{id}/stream`; prints, per line, the time from the task's print to the
//! client's receipt (same machine, same clock), lines lost (there should be none), and the
//! master's and the worker's CPU while relaying.

use std::time::Duration;

use anyhow::{bail, Result};
use etcron_tests::{now_ms, proc_usage, quantile, urlencode, wait_for, Cluster};
use serde_json::{json, Value};

pub async fn run(followers: usize, seconds: i64) -> Result<()> {
    let c = Cluster::start("bench-stream", 1).await?;
    let lines = seconds * 10;
    let command = format!("for i in $(seq 1 {lines}); do date +%s%3N; sleep 0.1; done");
    c.put_job("printer", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": command}})).await?;
    c.call(reqwest::Method::POST, "/api/jobs/printer/run", None).await?;
    let id = wait_for(Duration::from_secs(30), "the run", || async {
        let v = c.get("/api/executions?job=printer&status=running").await.ok()?;
        v["executions"].as_array()?.first()?["id"].as_str().map(str::to_owned)
    })
    .await?;
    println!("stream: 1 task printing {lines} lines over {seconds} s, {followers} followers through the master");
    let master_pid = c.master.proc.pid().unwrap_or(0);
    let worker_pid = c.workers[0].proc.pid().unwrap_or(0);
    let before = (proc_usage(master_pid), proc_usage(worker_pid));
    let url = format!("{}/api/executions/{}/stream", c.master.url, urlencode(&id));
    let mut clients = Vec::new();
    for _ in 0..followers {
        let url = url.clone();
        let http = c.http.clone();
        clients.push(tokio::spawn(async move { follow(&http, &url).await }));
    }
    let mut delays = Vec::new();
    let mut received = Vec::new();
    for client in clients {
        let d = client.await??;
        received.push(d.len());
        delays.extend(d);
    }
    let after = (proc_usage(master_pid), proc_usage(worker_pid));
    delays.sort_unstable();
    // The first lines were printed before the followers connected: their delay is the catch-up,
    // not the relay; count from the second second on.
    let steady: Vec<i64> = delays.iter().copied().filter(|d| *d < 1_000).collect();
    println!(
        "lines received per follower: min {} max {} (printed {lines})",
        received.iter().min().unwrap_or(&0),
        received.iter().max().unwrap_or(&0)
    );
    println!(
        "print -> client (ms), {} lines under 1 s: p50 {} p90 {} p99 {} max {}",
        steady.len(),
        quantile(&steady, 0.5),
        quantile(&steady, 0.9),
        quantile(&steady, 0.99),
        steady.last().unwrap_or(&0)
    );
    let cpu = |b: Option<(f64, u64)>, a: Option<(f64, u64)>| match (b, a) {
        (Some((b, _)), Some((a, rss))) => format!("{:.1}% CPU, {} MiB", (a - b) * 100.0 / seconds as f64, rss >> 20),
        _ => "n/a".to_owned(),
    };
    println!("master: {}; worker: {}", cpu(before.0, after.0), cpu(before.1, after.1));
    Ok(())
}

/// Follows the stream to its end; the delay of each printed line.
async fn follow(http: &reqwest::Client, url: &str) -> Result<Vec<i64>> {
    let mut resp = http.get(url).send().await?;
    if !resp.status().is_success() {
        bail!("stream: {}", resp.status());
    }
    let (mut buf, mut text, mut delays) = (Vec::new(), String::new(), Vec::new());
    while let Some(chunk) = resp.chunk().await? {
        let now = now_ms();
        buf.extend_from_slice(&chunk);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let block = String::from_utf8_lossy(&buf.drain(..end + 2).collect::<Vec<u8>>()).into_owned();
            if !block.starts_with("event: output") {
                continue;
            }
            let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else { continue };
            let v: Value = serde_json::from_str(data)?;
            text.push_str(v["text"].as_str().unwrap_or_default());
            while let Some(nl) = text.find('\n') {
                let line: String = text.drain(..=nl).collect();
                if let Ok(printed) = line.trim().parse::<i64>() {
                    delays.push(now - printed);
                }
            }
        }
    }
    Ok(delays)
}
