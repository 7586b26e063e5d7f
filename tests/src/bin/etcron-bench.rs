//! Benchmarks that print figures (they assert nothing about speed).
//!
//! `etcron-bench e2e --jobs 50 --workers 3 --seconds 60`: N jobs firing every second across W
//! workers on one etcd. Prints duplicates, misses, fire lateness (task start minus scheduled
//! time, measured by the task itself), etcd write requests per fire (from etcd's own metrics),
//! CPU and RSS of every worker and of etcd, and writes one JSON line per execution
//! (`{"job","scheduled_ms","started_ms","worker_id"}`) for comparisons with other schedulers.
//! Run it from a release build: `cargo run --release -p etcron-tests --bin etcron-bench -- e2e`.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use etcron_tests::{check_every_second, now_ms, proc_usage, quantile, read_fired, wait_for, Cluster};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut jobs = 50usize;
    let mut workers = 3usize;
    let mut seconds = 60i64;
    let mut out: Option<String> = None;
    let mut it = args.iter();
    let scenario = it.next().map(String::as_str).unwrap_or("e2e");
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--jobs" => jobs = value.parse()?,
            "--workers" => workers = value.parse()?,
            "--seconds" => seconds = value.parse()?,
            "--jsonl" => out = Some(value.clone()),
            other => bail!("unknown flag {other}"),
        }
    }
    match scenario {
        "e2e" => e2e(jobs, workers, seconds, out).await,
        "claims" => claims(jobs).await,
        "sink" => sink(jobs).await,
        "search" => search(jobs).await,
        other => bail!("unknown scenario {other}; known: e2e, claims, sink, search"),
    }
}

async fn e2e(n_jobs: usize, n_workers: usize, seconds: i64, jsonl: Option<String>) -> Result<()> {
    let c = Cluster::start("bench-e2e", n_workers).await?;
    let file = c.path("fired.log");
    let jobs = c.every_second_jobs("bench", n_jobs, &file).await?;
    // Warm up: every job has fired once.
    wait_for(Duration::from_secs(60), "every job to fire once", || async {
        let fired = read_fired(&file);
        let seen: std::collections::BTreeSet<&str> = fired.iter().map(|f| f.job.as_str()).collect();
        (seen.len() == jobs.len()).then_some(())
    })
    .await?;
    let pids: Vec<(String, u32)> = c
        .workers
        .iter()
        .filter_map(|w| Some((w.opts.id.clone(), w.proc.pid()?)))
        .chain(c.etcd.proc.pid().map(|p| ("etcd".to_owned(), p)))
        .collect();
    let proposals0 = c.etcd.metric("etcd_server_proposals_committed_total").await?;
    let txn0 = c.etcd.metric_with("grpc_server_handled_total", "grpc_method=\"Txn\"").await?;
    let put0 = c.etcd.metric_with("grpc_server_handled_total", "grpc_method=\"Put\"").await?;
    let range0 = c.etcd.metric_with("grpc_server_handled_total", "grpc_method=\"Range\"").await?;
    let cpu0: Vec<f64> = pids.iter().map(|(_, p)| proc_usage(*p).map_or(0.0, |u| u.0)).collect();
    let from = now_ms();
    tokio::time::sleep(Duration::from_millis(u64::try_from(seconds * 1000)?)).await;
    let to = now_ms();
    let proposals = c.etcd.metric("etcd_server_proposals_committed_total").await? - proposals0;
    let txns = c.etcd.metric_with("grpc_server_handled_total", "grpc_method=\"Txn\"").await? - txn0;
    let puts = c.etcd.metric_with("grpc_server_handled_total", "grpc_method=\"Put\"").await? - put0;
    let ranges = c.etcd.metric_with("grpc_server_handled_total", "grpc_method=\"Range\"").await? - range0;
    let usage: Vec<(f64, u64)> = pids
        .iter()
        .zip(&cpu0)
        .map(|((_, p), c0)| proc_usage(*p).map_or((0.0, 0), |(c1, rss)| (c1 - c0, rss)))
        .collect();
    // Let the last ticks of the window finish writing.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let fired = read_fired(&file);
    let window: Vec<_> = fired.iter().filter(|f| f.scheduled_ms > from && f.scheduled_ms <= to).collect();
    let report = check_every_second(&fired, &jobs, from, to);
    let mut lateness: Vec<i64> =
        window.iter().filter_map(|f| f.extra.first()?.parse::<i64>().ok().map(|s| s - f.scheduled_ms)).collect();
    lateness.sort_unstable();
    let fires = window.len() as f64;
    println!("e2e: {n_jobs} jobs every second, {n_workers} workers, {seconds} s window ({} fires)", window.len());
    println!("  duplicates            {}", report.duplicates.len());
    println!("  missing ticks         {}", report.missing.len());
    println!(
        "  lateness ms           p50 {}  p99 {}  max {}",
        quantile(&lateness, 0.5),
        quantile(&lateness, 0.99),
        lateness.last().copied().unwrap_or(0)
    );
    println!("  etcd proposals/fire   {:.2}  (raft proposals committed: every write request)", proposals / fires);
    println!("  etcd Txn/fire {:.2}  Put/fire {:.3}  Range/fire {:.2}", txns / fires, puts / fires, ranges / fires);
    let mut per_worker: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for f in &window {
        *per_worker.entry(f.worker.as_str()).or_default() += 1;
    }
    for ((name, _), (cpu, rss)) in pids.iter().zip(&usage) {
        println!(
            "  {name:<8} cpu {:>5.1}% of one core   rss {:>6.1} MiB   fires {}",
            cpu / seconds as f64 * 100.0,
            *rss as f64 / 1048576.0,
            per_worker.get(name.as_str()).copied().unwrap_or(0)
        );
    }
    if let Some(path) = jsonl {
        let mut w = std::io::BufWriter::new(std::fs::File::create(&path)?);
        for f in &window {
            let started: i64 = f.extra.first().and_then(|s| s.parse().ok()).unwrap_or(0);
            writeln!(
                w,
                "{}",
                json!({"job": f.job, "scheduled_ms": f.scheduled_ms, "started_ms": started, "worker_id": f.worker})
            )?;
        }
        println!("  per-execution lines   {path}");
    }
    Ok(())
}

/// `claims --jobs N`: N claim transactions started at the same instant on one client, as a
/// worker does when N jobs share a tick; prints the latency spread.
async fn claims(n: usize) -> Result<()> {
    let logs = etcron_tests::log_dir("bench-claims");
    let etcd = etcron_tests::Etcd::start(&logs).await?;
    let client = etcron_common::etcd::connect(&etcron_common::etcd::EtcdConfig {
        endpoints: vec![etcd.endpoint.clone()],
        ..etcron_common::etcd::EtcdConfig::default()
    })
    .await?;
    let lease = client.lease_client().grant(30, None).await?.id();
    for round in 0..5 {
        let start = std::time::Instant::now();
        let mut tasks = Vec::new();
        for i in 0..n {
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                let key = format!("/bench/claims/j{i}/{round}");
                let out = etcron_common::claim::try_claim(
                    &client,
                    etcron_common::claim::RunClaim {
                        claim_key: key,
                        claim_value: b"{}".to_vec(),
                        running_key: format!("/bench/running/j{i}/{round}"),
                        running_value: b"{}".to_vec(),
                        session_lease: lease,
                        lock: None,
                        extra: Vec::new(),
                    },
                )
                .await;
                (start.elapsed().as_micros() as i64, matches!(out, etcron_common::claim::ClaimOutcome::Won { .. }))
            }));
        }
        let mut lat = Vec::new();
        for t in tasks {
            let (us, won) = t.await?;
            anyhow::ensure!(won, "claim not won");
            lat.push(us);
        }
        lat.sort_unstable();
        println!(
            "round {round}: {n} concurrent claims  p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
            quantile(&lat, 0.5) as f64 / 1000.0,
            quantile(&lat, 0.99) as f64 / 1000.0,
            *lat.last().unwrap_or(&0) as f64 / 1000.0
        );
    }
    let fsyncs = etcd.metric("etcd_disk_wal_fsync_duration_seconds_count").await?;
    println!("wal fsyncs: {fsyncs}");
    Ok(())
}

fn synthetic(job: &str, ms: i64, n: u32, text: &str) -> etcron_common::store::RecordWrite {
    use etcron_common::keys::{ExecutionId, Tick};
    use etcron_common::model::{ExecutionRecord, Status, TriggerKind};
    etcron_common::store::RecordWrite {
        mode: etcron_common::store::WriteMode::Replace,
        record: ExecutionRecord {
            id: ExecutionId { attempt: n, ..ExecutionId::new(job, Tick::Scheduled(ms)) },
            job: job.to_owned(),
            scheduled_at: etcron_common::rfc3339_ms(ms),
            scheduled_ms: ms,
            claimed_at: Some(etcron_common::rfc3339_ms(ms + 2)),
            started_at: Some(etcron_common::rfc3339_ms(ms + 3)),
            finished_at: Some(etcron_common::rfc3339_ms(ms + 50)),
            duration_ms: Some(47),
            worker_id: format!("w{}", ms % 3),
            hostname: "bench".into(),
            attempt: n,
            trigger: TriggerKind::Schedule,
            status: if ms % 10 == 0 { Status::Failed } else { Status::Succeeded },
            exit_code: Some(0),
            signal: None,
            output: text.to_owned(),
            output_truncated: false,
            error: None,
            reason: None,
            fencing_token: Some(ms),
            parent: None,
            http_status: None,
            shard: None,
        },
    }
}

/// `sink --jobs N`: N records through the worker's log sink (batches as in production) into a
/// fresh MongoDB-compatible server; prints records/s.
async fn sink(n: usize) -> Result<()> {
    let logs = etcron_tests::log_dir("bench-sink");
    let mongo = etcron_tests::Mongo::start(&logs).await?;
    let db = etcron_tests::db_name("bench_sink");
    let store = mongo.store(&db).await?;
    store.ensure_indexes(Duration::from_secs(86_400)).await?;
    let spool_dir = tempfile::tempdir()?;
    let spool = etcron_worker::log_sink::Spool::open(spool_dir.path())?;
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let (sink, _task) = etcron_worker::log_sink::LogSink::start(store, spool, stop)?;
    let output = "started backup of db\nwrote 1234 rows\ndone in 47 ms\n";
    let start = std::time::Instant::now();
    let base = 1_790_000_000_000i64;
    for i in 0..n {
        let i = i64::try_from(i)?;
        sink.submit(synthetic(&format!("job-{}", i % 500), base + i * 1000, 1, output));
        if i % 5_000 == 4_999 {
            // Producers in a worker are paced by ticks; don't let the queue overflow to the spool.
            while sink.queued() > 5_000 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    let total = u64::try_from(n)?;
    wait_for(Duration::from_secs(600), "every record written", || async {
        (sink.stats.written.load(std::sync::atomic::Ordering::Relaxed) >= total).then_some(())
    })
    .await?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "sink: {n} records in {secs:.2} s = {:.0} records/s (batches of {}), spooled {}",
        n as f64 / secs,
        etcron_worker::log_sink::BATCH,
        sink.stats.spooled.load(std::sync::atomic::Ordering::Relaxed)
    );
    Ok(())
}

/// `search --jobs N`: loads N records (500 jobs, one record per job per second, 1 in 200 with the
/// word `disk_full`), then times a job + time-range query and a text query.
async fn search(n: usize) -> Result<()> {
    use etcron_common::store::Search;
    let logs = etcron_tests::log_dir("bench-search");
    let mongo = etcron_tests::Mongo::start(&logs).await?;
    let db = etcron_tests::db_name("bench_search");
    let store = mongo.store(&db).await?;
    store.ensure_indexes(Duration::from_secs(86_400 * 3650)).await?;
    let base = 1_790_000_000_000i64;
    let load = std::time::Instant::now();
    let mut batch = Vec::with_capacity(500);
    for i in 0..n {
        let i = i64::try_from(i)?;
        let text = if i % 200 == 0 { "error: disk_full on /var/backups" } else { "ok wrote rows" };
        batch.push(synthetic(&format!("job-{:03}", i % 500), base + (i / 500) * 1000, 1, text));
        if batch.len() == 500 {
            store.write(&batch).await?;
            batch.clear();
        }
    }
    store.write(&batch).await?;
    println!("search: loaded {n} records in {:.1} s", load.elapsed().as_secs_f64());
    let span_ms = i64::try_from(n / 500)? * 1000;
    let mut timings: Vec<(&str, Vec<i64>)> = Vec::new();
    for (name, make) in
        [("job + 1 h range, limit 50", 0), ("text q=disk_full, limit 50", 1), ("status=failed, limit 50", 2)]
    {
        let mut lat = Vec::new();
        for k in 0..50i64 {
            let s = match make {
                0 => Search {
                    job: Some(format!("job-{:03}", k * 7 % 500)),
                    since_ms: Some(base + (k * 9_973_000) % span_ms.max(1)),
                    until_ms: Some(base + (k * 9_973_000) % span_ms.max(1) + 3_600_000),
                    limit: 50,
                    ..Search::default()
                },
                1 => Search { q: Some("disk_full".into()), limit: 50, ..Search::default() },
                _ => Search { statuses: vec![etcron_common::model::Status::Failed], limit: 50, ..Search::default() },
            };
            let t = std::time::Instant::now();
            let page = store.search(&s).await?;
            lat.push(i64::try_from(t.elapsed().as_micros())?);
            anyhow::ensure!(make == 0 || !page.executions.is_empty(), "{name}: no results");
        }
        lat.sort_unstable();
        timings.push((name, lat));
    }
    for (name, lat) in timings {
        println!(
            "  {name:<30} p50 {:>7.2} ms   p99 {:>7.2} ms",
            quantile(&lat, 0.5) as f64 / 1000.0,
            quantile(&lat, 0.99) as f64 / 1000.0
        );
    }
    Ok(())
}
