//! `burst --jobs 10000 --workers 3`: N one-shot jobs (`@at T`, HTTP tasks to a receiver in this
//! process) all due at the same instant. The jobs (and their states, as the master writes them)
//! go straight into etcd; T is far enough ahead for every worker to load them. Prints: jobs run
//! once, jobs run more than once, attempts beyond the first (failover reruns), jobs never run,
//! records by status, start lateness (request received minus T) and the last start, sessions
//! lost, etcd proposals per fire (etcd's own counter, from 1 s before T until every record is
//! written), and the latency of `GET /api/jobs/{job}` probes sent every 100 ms during the burst.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use etcd_client::{Txn, TxnOp};
use etcron_model::keys::Keys;
use etcron_model::stored::JobState;
use etcron_tests::{free_port, now_ms, quantile, scrape, Cluster, WorkerOpts};
use serde_json::json;

use crate::receiver::Receiver;

/// Jobs written per etcd transaction (a job and its state each: 128 operations at most).
const PER_TXN: usize = 60;

/// Each worker's capacity when `--capacity` is not given: the burst split across the workers
/// with 20 % headroom (at least the product's default, 64), as an operator sizing for it would.
fn default_capacity(n: usize, n_workers: usize) -> usize {
    (n * 6).div_ceil(n_workers.max(1) * 5).max(64)
}

pub async fn run(n: usize, n_workers: usize, capacity: Option<usize>, worker_args: &[String]) -> Result<()> {
    let capacity = capacity.unwrap_or_else(|| default_capacity(n, n_workers));
    println!("burst: {n} jobs on {n_workers} workers, capacity {capacity} each ({} slots)", capacity * n_workers);
    let mut c = Cluster::start("bench-burst", 0).await?;
    let receiver = Receiver::start().await?;
    let mut urls = Vec::new();
    for i in 1..=n_workers {
        let port = free_port();
        let mut w = WorkerOpts::new(&format!("w{i}"));
        "10s".clone_into(&mut w.session_ttl);
        // A run holds a slot from its start to its end; racing holds none.
        w.extra = vec!["--metrics-listen".to_owned(), format!("127.0.0.1:{port}"), format!("--capacity={capacity}")];
        w.extra.extend(worker_args.iter().cloned());
        c.add_worker(w)?;
        urls.push(format!("http://127.0.0.1:{port}/metrics"));
    }
    c.wait_workers(n_workers).await?;
    // Writing and loading 100 000 jobs take about 5 s (release): the lead leaves six times that.
    let lead_ms = 20_000 + i64::try_from(n)? * 3 / 10;
    let at_ms = (now_ms() + lead_ms) / 1000 * 1000;
    write_jobs(&c, n, at_ms, &receiver.url).await?;
    for url in &urls {
        wait_metric(url, "etcron_worker_jobs", n as f64, at_ms).await?;
    }
    if now_ms() > at_ms - 1_000 {
        bail!("the jobs were not loaded 1 s before they were due; the lead ({lead_ms} ms) is too short");
    }
    println!(
        "burst: {n} one-shot HTTP jobs due at one instant, {n_workers} workers; loaded {} ms before",
        at_ms - now_ms()
    );
    tokio::time::sleep(Duration::from_millis(u64::try_from(at_ms - 1_000 - now_ms()).unwrap_or(0))).await;
    let proposals0 = c.etcd.metric("etcd_server_proposals_committed_total").await?;
    let disk0 = etcd_disk(&c).await?;
    let probes = tokio::spawn(probe_api(c.master.url.clone(), c.http.clone(), at_ms + 15_000));
    let store = c.mongo.store(&c.db).await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut finals = Vec::new();
    // Records are read once every job has started (or the start deadline and `missed` recording
    // have passed): paging through thousands of records during the burst would load `mongod` and
    // this process while the starts are measured.
    while receiver.count() < n && now_ms() < at_ms + 15_000 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    while Instant::now() < deadline {
        finals = crate::records_between(&store, at_ms, at_ms).await?;
        finals.retain(|r| r.status != etcron_model::record::Status::Running);
        if finals.len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let proposals = c.etcd.metric("etcd_server_proposals_committed_total").await? - proposals0;
    let disk = etcd_disk(&c).await?.iter().zip(disk0).map(|(after, before)| after - before).collect::<Vec<_>>();
    println!(
        "  etcd disk             {} WAL fsyncs, mean {:.1} ms; {} backend commits, mean {:.1} ms",
        disk[1],
        disk[0] / disk[1].max(1.0) * 1000.0,
        disk[3],
        disk[2] / disk[3].max(1.0) * 1000.0
    );
    let api = probes.await?;
    report(n, at_ms, &receiver, &finals, proposals, &api, &urls).await
}

/// N jobs `burst-{i}` due at `at_ms`, with their states, straight into etcd.
async fn write_jobs(c: &Cluster, n: usize, at_ms: i64, url: &str) -> Result<()> {
    let keys = Keys::new(&c.namespace)?;
    let client = c.etcd.client().await?;
    let state = JobState { last_tick_ms: now_ms() }.to_bytes();
    let spec = serde_json::to_vec(&json!({
        "schedule": format!("@at {}", etcron_model::rfc3339_ms(at_ms)),
        "task": {"kind": "http", "url": url},
    }))?;
    let mut pending = Vec::new();
    for start in (0..n).step_by(PER_TXN) {
        let mut ops = Vec::with_capacity(PER_TXN * 2);
        for i in start..(start + PER_TXN).min(n) {
            let name = format!("burst-{i:06}");
            ops.push(TxnOp::put(keys.job(&name), spec.clone(), None));
            ops.push(TxnOp::put(keys.state(&name), state.clone(), None));
        }
        let mut kv = client.kv_client();
        pending.push(tokio::spawn(async move { kv.txn(Txn::new().and_then(ops)).await }));
        if pending.len() >= 8 {
            for p in pending.drain(..) {
                p.await??;
            }
        }
    }
    for p in pending {
        p.await??;
    }
    Ok(())
}

/// etcd's WAL fsync and backend commit time and counts: sum, count, sum, count.
async fn etcd_disk(c: &Cluster) -> Result<[f64; 4]> {
    Ok([
        c.etcd.metric("etcd_disk_wal_fsync_duration_seconds_sum").await?,
        c.etcd.metric("etcd_disk_wal_fsync_duration_seconds_count").await?,
        c.etcd.metric("etcd_disk_backend_commit_duration_seconds_sum").await?,
        c.etcd.metric("etcd_disk_backend_commit_duration_seconds_count").await?,
    ])
}

async fn wait_metric(url: &str, name: &str, at_least: f64, until_ms: i64) -> Result<()> {
    while now_ms() < until_ms {
        if let Ok(s) = scrape(url, None).await {
            if s.value(name, &[]) >= at_least {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("{url}: {name} did not reach {at_least} before the burst")
}

/// `GET /api/jobs/burst-…` every 100 ms until `until_ms`: each request's latency in ms (a
/// failed or non-200 request counts as its time, and is reported).
async fn probe_api(base: String, http: reqwest::Client, until_ms: i64) -> Vec<(i64, bool)> {
    let mut out = Vec::new();
    let mut i = 0usize;
    while now_ms() < until_ms {
        let t = Instant::now();
        let ok = http
            .get(format!("{base}/api/jobs/burst-{:06}", i % 100))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200);
        out.push((i64::try_from(t.elapsed().as_millis()).unwrap_or(i64::MAX), ok));
        i += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    out
}

/// Prints what the burst came to: runs per job, lateness, records, worker counters, API latency.
async fn report(
    n: usize,
    at_ms: i64,
    receiver: &Receiver,
    finals: &[etcron_model::record::ExecutionRecord],
    proposals: f64,
    api: &[(i64, bool)],
    urls: &[String],
) -> Result<()> {
    let hits = receiver.hits();
    let mut per_job: BTreeMap<&str, usize> = BTreeMap::new();
    for h in &hits {
        *per_job.entry(h.job.as_str()).or_default() += 1;
    }
    let reruns = hits.iter().filter(|h| !h.execution_id.ends_with("#1")).count();
    let mut lateness: Vec<i64> = hits.iter().map(|h| h.received_ms - at_ms).collect();
    lateness.sort_unstable();
    let ms_after = |t: &Option<String>| {
        t.as_deref().and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()).map(|t| t.timestamp_millis() - at_ms)
    };
    let mut claimed: Vec<i64> = finals.iter().filter_map(|r| ms_after(&r.claimed_at)).collect();
    claimed.sort_unstable();
    let mut handed: Vec<i64> = finals.iter().filter_map(|r| ms_after(&r.started_at)).collect();
    handed.sort_unstable();
    let mut statuses: BTreeMap<&str, usize> = BTreeMap::new();
    for r in finals {
        *statuses.entry(r.status.as_str()).or_default() += 1;
    }
    let workers = WorkerFigures::scrape(urls).await?;
    println!("  jobs run once         {}", per_job.values().filter(|c| **c == 1).count());
    println!("  jobs run twice+       {}", per_job.values().filter(|c| **c > 1).count());
    println!("  failover reruns       {reruns} (requests of attempt 2 or later)");
    println!("  jobs never run        {}", n - per_job.len().min(n));
    println!("  records               {statuses:?} ({} final of {n})", finals.len());
    print_spread(finals);
    println!(
        "  start lateness ms     p50 {}  p90 {}  p99 {}  last {}",
        quantile(&lateness, 0.5),
        quantile(&lateness, 0.9),
        quantile(&lateness, 0.99),
        lateness.last().copied().unwrap_or(0)
    );
    println!(
        "  claimed ms after      p50 {}  p90 {}  last {}  (the claims' `claimed_at`; negative: before the instant)",
        quantile(&claimed, 0.5),
        quantile(&claimed, 0.9),
        claimed.last().copied().unwrap_or(0)
    );
    println!(
        "  handed ms after       p50 {}  p90 {}  last {}  (the records' `started_at`: task handed to its executor)",
        quantile(&handed, 0.5),
        quantile(&handed, 0.9),
        handed.last().copied().unwrap_or(0)
    );
    workers.print(n, proposals);
    print_api(api);
    Ok(())
}

/// The workers' own counters during the burst, summed over the workers.
#[derive(Default)]
struct WorkerFigures {
    lost_sessions: f64,
    /// Claim batches and close batches sent.
    batches: (f64, f64),
    /// Per etcd request kind: seconds spent and requests.
    ops: BTreeMap<&'static str, (f64, f64)>,
    /// Claims by outcome.
    claims: BTreeMap<&'static str, f64>,
}

impl WorkerFigures {
    /// Reads every worker's metrics page and adds up sessions lost, batches, claims and etcd requests.
    async fn scrape(urls: &[String]) -> Result<Self> {
        let mut f = Self::default();
        for url in urls {
            let s = scrape(url, None).await?;
            for outcome in ["won", "lost", "taken_seen", "taken"] {
                *f.claims.entry(outcome).or_default() += s.value("etcron_worker_claims_total", &[("outcome", outcome)]);
            }
            f.lost_sessions += s.value("etcron_worker_session_lease_losses_total", &[]);
            f.batches.0 += s.value("etcron_worker_batch_size_count", &[("kind", "claim")]);
            f.batches.1 += s.value("etcron_worker_batch_size_count", &[("kind", "close")]);
            for op in ["claim", "claim_batch", "close", "close_batch"] {
                let e = f.ops.entry(op).or_default();
                e.0 += s.value("etcron_etcd_request_duration_seconds_sum", &[("op", op)]);
                e.1 += s.value("etcron_etcd_request_duration_seconds_count", &[("op", op)]);
            }
        }
        Ok(f)
    }

    /// Prints sessions lost, etcd proposals per fire, batches, claims and etcd request times.
    fn print(&self, n: usize, proposals: f64) {
        println!("  sessions lost         {}", self.lost_sessions);
        println!("  etcd proposals/fire   {:.3}  ({proposals} proposals)", proposals / n as f64);
        println!(
            "  batches               {} claim, {} close (transactions of two or more)",
            self.batches.0, self.batches.1
        );
        let claims = &self.claims;
        println!(
            "  claims                {} won, {} lost in etcd, {} seen taken by the watch, {} read taken",
            claims["won"], claims["lost"], claims["taken_seen"], claims["taken"]
        );
        for (op, (sum, count)) in &self.ops {
            println!(
                "  etcd {op:<12}     {count} requests, mean {:.0} ms (admission wait included)",
                sum / count.max(1.0) * 1000.0
            );
        }
    }
}

/// Prints the latency of the API probes sent during the burst, and how many failed.
fn print_api(api: &[(i64, bool)]) {
    let mut api_ms: Vec<i64> = api.iter().map(|(ms, _)| *ms).collect();
    api_ms.sort_unstable();
    println!(
        "  API GET during burst  p50 {}  p99 {}  max {} ms  ({} probes, {} failed)",
        quantile(&api_ms, 0.5),
        quantile(&api_ms, 0.99),
        api_ms.last().copied().unwrap_or(0),
        api.len(),
        api.iter().filter(|(_, ok)| !ok).count()
    );
}

/// Runs per worker, and the largest distance of one from the mean.
fn print_spread(finals: &[etcron_model::record::ExecutionRecord]) {
    let mut per_worker: BTreeMap<&str, usize> = BTreeMap::new();
    for r in finals.iter().filter(|r| r.status == etcron_model::record::Status::Succeeded) {
        *per_worker.entry(r.worker_id.as_str()).or_default() += 1;
    }
    #[allow(clippy::cast_precision_loss)] // counts of thousands
    let mean = per_worker.values().sum::<usize>() as f64 / per_worker.len().max(1) as f64;
    #[allow(clippy::cast_precision_loss)]
    let worst = per_worker.values().map(|&n| (n as f64 - mean).abs() / mean.max(1.0)).fold(0.0, f64::max);
    println!("  runs per worker       {per_worker:?} (at most {:.1} % from the mean)", worst * 100.0);
}
