//! `scale --jobs 100000`: N jobs in etcd (each once a day at its own minute, with its job state,
//! as the master writes them), then three workers started one after another. For each: the time
//! from its start until its job table and timing wheel hold every job (its own
//! `etcron_worker_jobs` / `etcron_worker_wheel_entries` gauges), and its resident memory once
//! loaded. Then edits through the master's API: the time from the PUT's answer until every
//! worker has applied that revision (`etcron_worker_jobs_revision`), and the PUT's own time;
//! pages of `GET /api/jobs` from a cursor, by prefix and by label.
//! Last, a restart: with a few every-second jobs running, worker w3 is killed and started
//! again; while it lists every job anew, the ticks the other workers run are checked for
//! lateness (start minus scheduled time) and exactly once.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use etcd_client::{Txn, TxnOp};
use etcron_model::keys::Keys;
use etcron_model::stored::JobState;
use etcron_tests::{free_port, now_ms, proc_usage, quantile, scrape, Cluster, WorkerOpts};
use serde_json::json;

/// Jobs written per etcd transaction (etcd allows 128 operations: a job and its state each).
const PER_TXN: usize = 64;
/// How many edits are timed.
const EDITS: usize = 100;
/// Every-second jobs that run while a worker restarts.
const TICKERS: usize = 10;

pub async fn run(n: usize) -> Result<()> {
    let mut c = Cluster::start("bench-scale", 0).await?;
    write_jobs(&c, n).await?;

    let mut urls = Vec::new();
    for i in 1..=3 {
        urls.push(start_worker(&mut c, i, n).await?);
    }

    time_edits(&c, &urls, n).await?;
    time_pages(&c, n).await?;
    restart_beside_ticks(&mut c, &urls[2], n).await
}

/// Pages read through `GET /api/jobs` timed: `PAGES` pages of 100 starting at spread cursors,
/// then as many with a name prefix and with a label filter.
async fn time_pages(c: &Cluster, n: usize) -> Result<()> {
    const PAGES: usize = 50;
    for (what, query) in [
        ("cursor", "limit=100&cursor="),
        ("prefix", "limit=100&prefix="),
        ("label", "limit=100&label=team%3Dt7&cursor="),
    ] {
        let mut ms = Vec::new();
        for k in 0..PAGES {
            let at = format!("scale-{:06}", k * (n / PAGES).max(1));
            let arg = if what == "prefix" { at[..at.len() - 2].to_owned() } else { at };
            let t = Instant::now();
            let page = c.get(&format!("/api/jobs?{query}{arg}")).await?;
            ms.push(i64::try_from(t.elapsed().as_micros())?);
            anyhow::ensure!(page["jobs"].as_array().is_some_and(|j| !j.is_empty()), "an empty page for {what} {arg}");
        }
        ms.sort_unstable();
        println!(
            "  GET /api/jobs by {what} (pages of 100, {PAGES} pages): p50 {:.1} ms  p99 {:.1} ms",
            quantile(&ms, 0.5) as f64 / 1000.0,
            quantile(&ms, 0.99) as f64 / 1000.0
        );
    }
    Ok(())
}

/// Writes `n` daily jobs and their states straight into etcd; prints how long that took.
async fn write_jobs(c: &Cluster, n: usize) -> Result<()> {
    let keys = Keys::new(&c.namespace)?;
    let client = c.etcd.client().await?;
    let t = Instant::now();
    let state = JobState { last_tick_ms: now_ms() }.to_bytes();
    let mut pending = Vec::new();
    for chunk_start in (0..n).step_by(PER_TXN) {
        let mut ops = Vec::with_capacity(PER_TXN * 2);
        for i in chunk_start..(chunk_start + PER_TXN).min(n) {
            let name = format!("scale-{i:06}");
            let spec = json!({
                "schedule": format!("{} {} * * *", i % 60, (i / 60) % 24),
                "labels": {"team": format!("t{}", i % 50)},
                "task": {"kind": "shell", "command": format!("/usr/local/bin/report --part {i}")},
            });
            ops.push(TxnOp::put(keys.job(&name), serde_json::to_vec(&spec)?, None));
            ops.push(TxnOp::put(keys.state(&name), state.clone(), None));
        }
        let mut kv = client.kv_client();
        pending.push(tokio::spawn(async move { kv.txn(Txn::new().and_then(ops)).await }));
        if pending.len() >= 16 {
            for p in pending.drain(..) {
                p.await??;
            }
        }
    }
    for p in pending.drain(..) {
        p.await??;
    }
    println!("scale: wrote {n} jobs (and their states) into etcd in {:.1} s", t.elapsed().as_secs_f64());
    let size = c.etcd.metric("etcd_mvcc_db_total_size_in_bytes").await?;
    let in_use = c.etcd.metric("etcd_mvcc_db_total_size_in_use_in_bytes").await?;
    println!(
        "  etcd database: {:.0} MiB ({:.0} MiB in use): {:.0} bytes per job with its state",
        size / 1_048_576.0,
        in_use / 1_048_576.0,
        in_use / n as f64
    );
    Ok(())
}

/// Starts worker `w{i}`, times its loading of all `n` jobs and prints its memory; answers its metrics URL.
async fn start_worker(c: &mut Cluster, i: usize, n: usize) -> Result<String> {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let mut w = WorkerOpts::new(&format!("w{i}"));
    w.extra = vec!["--metrics-listen".to_owned(), format!("127.0.0.1:{port}")];
    let t = Instant::now();
    c.add_worker(w)?;
    let deadline = t + Duration::from_secs(300);
    loop {
        anyhow::ensure!(Instant::now() < deadline, "worker w{i} did not load {n} jobs in 300 s");
        if let Ok(s) = scrape(&url, None).await {
            let n = n as f64;
            if s.value("etcron_worker_jobs", &[]) >= n && s.value("etcron_worker_wheel_entries", &[]) >= n {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let loaded = t.elapsed();
    // Let the load settle (catch-up scan, allocator) before reading memory.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pid = c.workers.last().and_then(|w| w.proc.pid()).context("worker pid")?;
    let rss = proc_usage(pid).map_or(0, |u| u.1);
    println!(
        "  w{i}: listed and scheduled {n} jobs {:.2} s after its start (process start included); rss {:.1} MiB ({:.0} bytes per job)",
        loaded.as_secs_f64(),
        rss as f64 / 1_048_576.0,
        rss as f64 / n as f64
    );
    Ok(url)
}

/// Times job edits through the master: the PUT, and until every worker has applied it.
async fn time_edits(c: &Cluster, urls: &[String], n: usize) -> Result<()> {
    let mut reach = Vec::new();
    let mut put_ms = Vec::new();
    for k in 0..EDITS {
        let name = format!("scale-{:06}", k * (n / EDITS).max(1));
        let spec = json!({"schedule": format!("{} 3 * * *", k % 60), "task": {"kind": "shell", "command": "true"}});
        let t = Instant::now();
        let body = c.put_job(&name, spec).await?;
        put_ms.push(i64::try_from(t.elapsed().as_millis())?);
        let revision = body["revision"].as_i64().context("revision")? as f64;
        let t = Instant::now();
        let deadline = t + Duration::from_secs(60);
        let mut waiting: Vec<&String> = urls.iter().collect();
        while !waiting.is_empty() {
            anyhow::ensure!(Instant::now() < deadline, "an edit did not reach every worker in 60 s");
            let mut still = Vec::new();
            for url in waiting {
                let applied = scrape(url, None).await.map_or(0.0, |s| s.value("etcron_worker_jobs_revision", &[]));
                if applied < revision {
                    still.push(url);
                }
            }
            waiting = still;
        }
        reach.push(i64::try_from(t.elapsed().as_micros())?);
    }
    reach.sort_unstable();
    put_ms.sort_unstable();
    println!(
        "  edit reaches all 3 workers (after the PUT answered): p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms  ({EDITS} edits, polled)",
        quantile(&reach, 0.5) as f64 / 1000.0,
        quantile(&reach, 0.99) as f64 / 1000.0,
        reach.last().copied().unwrap_or(0) as f64 / 1000.0
    );
    println!(
        "  PUT /api/jobs/{{job}} with {n} jobs stored: p50 {} ms  max {} ms",
        quantile(&put_ms, 0.5),
        put_ms.last().copied().unwrap_or(0)
    );
    Ok(())
}

/// Kills worker w3 and starts it again while `TICKERS` every-second jobs run; prints how long it
/// took to load every job again, and the lateness and exactly-once of the ticks meanwhile.
async fn restart_beside_ticks(c: &mut Cluster, url: &str, n: usize) -> Result<()> {
    let file = c.work.path().join("ticks.log");
    let jobs = c.every_second_jobs("tick", TICKERS, &file).await?;
    etcron_tests::wait_tick(&file, &jobs, now_ms() + 2_000).await?;
    let from = now_ms();
    let t = Instant::now();
    c.workers.last_mut().context("worker w3")?.restart()?;
    let deadline = t + Duration::from_secs(300);
    loop {
        anyhow::ensure!(Instant::now() < deadline, "restarted worker w3 did not load {n} jobs in 300 s");
        if let Ok(s) = scrape(url, None).await {
            if s.value("etcron_worker_jobs", &[]) >= (n + TICKERS) as f64 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let loaded = t.elapsed();
    // Ten more seconds of ticks after the load (its catch-up scan included).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let to = now_ms() - 2_000;
    etcron_tests::wait_tick(&file, &jobs, to + 1_000).await?;
    let fired: Vec<_> =
        etcron_tests::read_fired(&file).into_iter().filter(|f| f.scheduled_ms > from && f.scheduled_ms <= to).collect();
    let report = etcron_tests::check_every_second(&fired, &jobs, from, to);
    let mut late: Vec<i64> =
        fired.iter().filter_map(|f| Some(f.extra.first()?.parse::<i64>().ok()? - f.scheduled_ms)).collect();
    late.sort_unstable();
    println!(
        "  w3 restarted: listed and scheduled {n} jobs again in {:.2} s; meanwhile {} ticks of {TICKERS} every-second jobs: lateness p50 {} ms  p99 {} ms  max {} ms; {} duplicates, {} missing",
        loaded.as_secs_f64(),
        fired.len(),
        quantile(&late, 0.5),
        quantile(&late, 0.99),
        late.last().copied().unwrap_or(0),
        report.duplicates.len(),
        report.missing.len()
    );
    Ok(())
}
