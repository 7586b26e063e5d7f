//! Benchmarks that print figures (they assert nothing about speed); BENCHMARKS.md has the
//! commands and results. Scenarios: `e2e` (N jobs every second across W workers: duplicates,
//! misses, lateness from the execution records or an HTTP receiver, etcd writes per fire from
//! etcd's own metrics, CPU and RSS, one JSON line per execution
//! `{"job","scheduled_ms","started_ms","worker_id"}`), `burst` (N one-shot jobs due at one
//! instant; `--capacity N` per worker, by default the burst split across the workers with 20 %
//! headroom), `soak` (N HTTP jobs every second for a long window with the production etcd storage
//! flags: etcd's database size, alarms and every process's memory over time), `spawn` (the
//! process-creation floor),
//! `failover`, `partition` (an etcd member cut off, killed or frozen: sessions lost, ticks missed,
//! lateness, master answers), `placement` (the share of new runs on an idle worker beside a
//! busy one), `scale`, `apply` (`etcronctl jobs apply` of N jobs: created,
//! `--changed` edited, unchanged), `stream` (live-output latency), `wheel`, `claims`, `sink`, `search`.
//! Run it from a release build: `cargo build --release --workspace --bins`.

mod apply;
mod burst;
mod etcd_writes;
mod failover;
mod partition;
mod placement;
mod receiver;
mod records;
mod scale;
mod soak;
mod spawn;
mod stream;
mod wheel;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use etcron_tests::{check_every_second, now_ms, proc_usage, quantile, read_fired, wait_for, Cluster, Proc, WorkerOpts};
use serde_json::json;

struct E2eOpts {
    task: BenchTask,
    worker_args: Vec<String>,
    /// Every job in one pool of this many slots (`--pool N`): what a pool costs a fire.
    pool: Option<u32>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut jobs = 50usize;
    let mut workers = 3usize;
    let mut seconds = 60i64;
    let mut out: Option<String> = None;
    let mut entries = 1_000_000usize;
    let mut rounds = 5usize;
    let mut session_ttl = "3s".to_owned();
    let mut faults = String::new();
    let mut capacity: Option<usize> = None;
    let mut changed = 1_000usize;
    let mut sample_every = 300i64;
    let mut records_opts = records::Opts { records: 0, cache_gb: None, data: None, compressor: None };
    let mut e2e_opts = E2eOpts { task: BenchTask::Append, worker_args: Vec::new(), pool: None };
    let mut it = args.iter();
    let scenario = it.next().map(String::as_str).unwrap_or("e2e");
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--jobs" => jobs = value.parse()?,
            "--workers" => workers = value.parse()?,
            "--capacity" => capacity = Some(value.parse()?),
            "--changed" => changed = value.parse()?,
            "--seconds" => seconds = value.parse()?,
            "--jsonl" => out = Some(value.clone()),
            "--entries" => entries = value.parse()?,
            "--rounds" => rounds = value.parse()?,
            "--session-ttl" => session_ttl.clone_from(value),
            "--faults" => faults.clone_from(value),
            "--sample-every" => sample_every = value.parse()?,
            "--records" => records_opts.records = value.parse()?,
            "--cache-gb" => records_opts.cache_gb = Some(value.parse()?),
            "--data" => records_opts.data = Some(value.into()),
            "--compressor" => records_opts.compressor = Some(value.clone()),
            "--task" => {
                e2e_opts.task = match value.as_str() {
                    "append" => BenchTask::Append,
                    "true" => BenchTask::True,
                    "http" => BenchTask::Http,
                    other => bail!("--task: append, true or http, not {other}"),
                }
            }
            // Passed to every worker, e.g. `--worker-arg --claim-ahead=0s`.
            "--worker-arg" => e2e_opts.worker_args.push(value.clone()),
            "--pool" => e2e_opts.pool = Some(value.parse()?),
            other => bail!("unknown flag {other}"),
        }
    }
    match scenario {
        "e2e" => e2e(jobs, workers, seconds, out, &e2e_opts).await,
        "burst" => burst::run(jobs, workers, capacity, &e2e_opts.worker_args).await,
        "soak" => soak::run(jobs, workers, seconds, sample_every, &e2e_opts.worker_args).await,
        "claims" => claims(jobs).await,
        "sink" => {
            records_opts.records = if records_opts.records == 0 { 200_000 } else { records_opts.records };
            records::sink(&records_opts).await
        }
        "search" => {
            records_opts.records = if records_opts.records == 0 { 1_000_000 } else { records_opts.records };
            records::search(&records_opts).await
        }
        "wheel" => wheel::run(entries),
        "failover" => failover::run(rounds, &session_ttl).await,
        "partition" => partition::run(jobs, u64::try_from(seconds)?, &session_ttl, &faults).await,
        "placement" => placement::run(seconds).await,
        "scale" => scale::run(jobs).await,
        "apply" => apply::run(jobs, changed).await,
        "stream" => stream::run(jobs, seconds).await,
        "spawn" => {
            let dir = tempfile::tempdir()?;
            spawn::run(jobs, rounds, &dir.path().join("spawned.log")).await
        }
        other => {
            bail!("unknown scenario {other}; known: e2e, burst, soak, claims, sink, search, wheel, failover, partition, placement, scale, apply, spawn, stream")
        }
    }
}

/// How the e2e benchmark's tasks report themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BenchTask {
    /// `echo "$ETCRON_JOB ..." >> file`: shell builtins only, so one process per fire like
    /// `true`, and every run is visible to the duplicate check.
    Append,
    /// `true`: runs are counted from the execution records alone.
    True,
    /// An HTTP GET to a receiver in this process: no process per fire, so lateness is the
    /// scheduler's own (request received minus scheduled time).
    Http,
}

async fn e2e(n_jobs: usize, n_workers: usize, seconds: i64, jsonl: Option<String>, opts: &E2eOpts) -> Result<()> {
    let E2eSetup { c, file, receiver, jobs } = e2e_start(n_jobs, n_workers, opts).await?;
    let store = c.mongo.store(&c.db).await?;
    warm_up(&store, &jobs).await?;
    let pids = process_ids(&c);
    let before = EtcdCounts::read(&c.etcd).await?;
    let cpu0: Vec<f64> = pids.iter().map(|(_, p)| proc_usage(*p).map_or(0.0, |u| u.0)).collect();
    let writes = etcd_writes::Writes::start(c.etcd.client().await?, &c.namespace).await?;
    let from = now_ms();
    tokio::time::sleep(Duration::from_millis(u64::try_from(seconds * 1000)?)).await;
    let to = now_ms();
    let etcd = EtcdCounts::read(&c.etcd).await?.since(&before);
    let usage: Vec<(f64, u64)> = pids
        .iter()
        .zip(&cpu0)
        .map(|((_, p), c0)| proc_usage(*p).map_or((0.0, 0), |(c1, rss)| (c1 - c0, rss)))
        .collect();
    // Every tick of the window has a final record (or the check below reports it missing).
    let first = (from / 1000 + 1) * 1000;
    let last = to / 1000 * 1000;
    let expected = jobs.len() * usize::try_from((last - first) / 1000 + 1)?;
    let runs = final_records(&store, first, last, expected).await?;
    let w = E2eWindow::new(&runs, &receiver, first, last, expected);
    let not_succeeded = w.runs.iter().filter(|r| r.status != etcron_model::record::Status::Succeeded).count();
    let mut lateness: Vec<i64> = if opts.task == BenchTask::Http {
        w.hits.iter().map(|h| h.received_ms - h.scheduled_ms).collect()
    } else {
        w.runs.iter().filter_map(|r| Some(started_ms(r)? - r.scheduled_ms)).collect()
    };
    lateness.sort_unstable();
    let fires = w.runs.len() as f64;
    println!("e2e: {n_jobs} jobs every second, {n_workers} workers, {seconds} s window ({} fires)", w.runs.len());
    println!("  worker flags          {:?}", opts.worker_args);
    println!(
        "  pool                  {}",
        opts.pool.map_or("none".to_owned(), |n| format!("every job in one pool of {n} slots"))
    );
    w.print_task(opts.task, &file, &jobs);
    println!("  not succeeded         {not_succeeded}");
    println!(
        "  lateness ms           p50 {}  p90 {}  p99 {}  max {}   ({})",
        quantile(&lateness, 0.5),
        quantile(&lateness, 0.9),
        quantile(&lateness, 0.99),
        lateness.last().copied().unwrap_or(0),
        if opts.task == BenchTask::Http { "request received" } else { "process spawned" }
    );
    etcd.print(fires);
    writes.finish(fires).await?;
    print_processes(&pids, &usage, &w.runs, seconds);
    if let Some(path) = jsonl {
        w.write_jsonl(&path, opts.task)?;
        println!("  per-execution lines   {path}");
    }
    Ok(())
}

/// The e2e benchmark's cluster, its every-second jobs and where their runs report.
struct E2eSetup {
    c: Cluster,
    /// The file the `append` tasks write to.
    file: PathBuf,
    /// The receiver the HTTP tasks call.
    receiver: receiver::Receiver,
    jobs: Vec<String>,
}

/// Starts the cluster and its workers, then creates the jobs that fire every second.
async fn e2e_start(n_jobs: usize, n_workers: usize, opts: &E2eOpts) -> Result<E2eSetup> {
    // `/t-bench`: a namespace as long as the default `/etcron`, so key sizes are production sizes.
    let mut c = Cluster::start("bench", 0).await?;
    for i in 1..=n_workers {
        let mut w = WorkerOpts::new(&format!("w{i}"));
        // The production default, not the tests' short TTL: a saturated machine can delay a
        // keep-alive past 3 s.
        "10s".clone_into(&mut w.session_ttl);
        w.extra.clone_from(&opts.worker_args);
        c.add_worker(w)?;
    }
    c.wait_workers(n_workers).await?;
    let file = c.path("fired.log");
    let command = match opts.task {
        BenchTask::Append => format!(
            "echo \"$ETCRON_JOB $ETCRON_SCHEDULED_AT_MS $ETCRON_ATTEMPT $ETCRON_WORKER_ID $ETCRON_FENCING_TOKEN\" >> {}",
            file.display()
        ),
        BenchTask::True | BenchTask::Http => "true".to_owned(),
    };
    let receiver = receiver::Receiver::start().await?;
    let jobs: Vec<String> = (0..n_jobs).map(|i| format!("bench-{i}")).collect();
    let mut spec = if opts.task == BenchTask::Http {
        json!({"schedule": "* * * * * *", "task": {"kind": "http", "url": receiver.url}})
    } else {
        json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": command}})
    };
    if let Some(slots) = opts.pool {
        let (status, body) = c.call(reqwest::Method::PUT, "/api/pools/bench", Some(json!({"slots": slots}))).await?;
        if !(200..300).contains(&status) {
            bail!("creating the pool: {status} {body}");
        }
        spec["pool"] = json!("bench");
    }
    for job in &jobs {
        c.put_job(job, spec.clone()).await?;
    }
    Ok(E2eSetup { c, file, receiver, jobs })
}

/// Warm up: waits until every job has run once.
async fn warm_up(store: &etcron_common::store::MongoStore, jobs: &[String]) -> Result<()> {
    let warm = now_ms();
    wait_for(Duration::from_secs(120), "every job to run once", || async {
        let runs = records_between(store, warm, now_ms()).await.ok()?;
        let seen: std::collections::BTreeSet<&str> = runs.iter().map(|r| r.job.as_str()).collect();
        (seen.len() == jobs.len()).then_some(())
    })
    .await?;
    Ok(())
}

/// The processes whose CPU and memory the e2e benchmark reports: each worker, etcd and `mongod`.
fn process_ids(c: &Cluster) -> Vec<(String, u32)> {
    c.workers
        .iter()
        .filter_map(|w| Some((w.opts.id.clone(), w.proc.pid()?)))
        .chain(c.etcd.proc.pid().map(|p| ("etcd".to_owned(), p)))
        .chain(c.mongo.proc.as_ref().and_then(Proc::pid).map(|p| ("mongodb".to_owned(), p)))
        .collect()
}

/// etcd's own counters: raft proposals committed, and Txn, Put and Range requests handled.
struct EtcdCounts {
    proposals: f64,
    txns: f64,
    puts: f64,
    ranges: f64,
}

impl EtcdCounts {
    /// Reads the counters from etcd's metrics.
    async fn read(etcd: &etcron_tests::Etcd) -> Result<Self> {
        Ok(Self {
            proposals: etcd.metric("etcd_server_proposals_committed_total").await?,
            txns: etcd.metric_with("grpc_server_handled_total", "grpc_method=\"Txn\"").await?,
            puts: etcd.metric_with("grpc_server_handled_total", "grpc_method=\"Put\"").await?,
            ranges: etcd.metric_with("grpc_server_handled_total", "grpc_method=\"Range\"").await?,
        })
    }

    /// How much each counter went up since `before`.
    fn since(self, before: &Self) -> Self {
        Self {
            proposals: self.proposals - before.proposals,
            txns: self.txns - before.txns,
            puts: self.puts - before.puts,
            ranges: self.ranges - before.ranges,
        }
    }

    /// Prints proposals and requests per fire.
    fn print(&self, fires: f64) {
        println!(
            "  etcd proposals/fire   {:.2}  (raft proposals committed: every write request)",
            self.proposals / fires
        );
        println!(
            "  etcd Txn/fire {:.2}  Put/fire {:.3}  Range/fire {:.2}",
            self.txns / fires,
            self.puts / fires,
            self.ranges / fires
        );
    }
}

/// The final records scheduled in `[first, last]`: waits up to 30 s for `expected` of them.
async fn final_records(
    store: &etcron_common::store::MongoStore,
    first: i64,
    last: i64,
    expected: usize,
) -> Result<Vec<etcron_model::record::ExecutionRecord>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut runs = Vec::new();
    while tokio::time::Instant::now() < deadline {
        runs = records_between(store, first, last).await?;
        runs.retain(|r| r.status != etcron_model::record::Status::Running);
        if runs.len() >= expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(runs)
}

/// The window's scheduled runs, as the records and the receiver saw them.
struct E2eWindow<'a> {
    /// The final records of the window's scheduled ticks.
    runs: Vec<&'a etcron_model::record::ExecutionRecord>,
    /// The requests the receiver got for the window's ticks.
    hits: Vec<receiver::Hit>,
    first: i64,
    last: i64,
    /// Ticks due in the window, over every job.
    expected: usize,
    /// Ticks due without a record.
    missing: usize,
}

impl<'a> E2eWindow<'a> {
    /// Keeps the scheduled runs and the receiver's requests of the ticks in `[first, last]`.
    fn new(
        runs: &'a [etcron_model::record::ExecutionRecord],
        receiver: &receiver::Receiver,
        first: i64,
        last: i64,
        expected: usize,
    ) -> Self {
        let runs: Vec<_> = runs.iter().filter(|r| r.trigger == etcron_model::record::TriggerKind::Schedule).collect();
        let recorded: std::collections::BTreeSet<(&str, i64)> =
            runs.iter().map(|r| (r.job.as_str(), r.scheduled_ms)).collect();
        let missing = expected - recorded.len().min(expected);
        let hits: Vec<receiver::Hit> =
            receiver.hits().into_iter().filter(|h| h.scheduled_ms >= first && h.scheduled_ms <= last).collect();
        Self { runs, hits, first, last, expected, missing }
    }

    /// Prints what the task was, and the duplicates and missing ticks it shows.
    fn print_task(&self, task: BenchTask, file: &std::path::Path, jobs: &[String]) {
        let missing = self.missing;
        match task {
            BenchTask::Append => {
                let fired = read_fired(file);
                let report = check_every_second(&fired, jobs, self.first - 1, self.last);
                println!("  task                  echo ... >> file (builtins: one process per fire)");
                println!(
                    "  duplicates            {} (runs the tasks wrote twice for one tick and attempt)",
                    report.duplicates.len()
                );
                println!(
                    "  missing ticks         {} (in the tasks' file)  {missing} (no record)",
                    report.missing.len()
                );
            }
            BenchTask::True => {
                println!("  task                  true (runs counted from the records)");
                println!("  missing ticks         {missing} (no record)");
            }
            BenchTask::Http => {
                let mut seen: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
                for h in &self.hits {
                    *seen.entry(h.execution_id.as_str()).or_default() += 1;
                }
                let received: std::collections::BTreeSet<(&str, i64)> =
                    self.hits.iter().map(|h| (h.job.as_str(), h.scheduled_ms)).collect();
                println!(
                    "  task                  HTTP GET to a receiver in the benchmark process (no process per fire)"
                );
                println!(
                    "  duplicates            {} (execution ids received twice)",
                    seen.values().filter(|n| **n > 1).count()
                );
                println!(
                    "  missing ticks         {} (never received)  {missing} (no record)",
                    self.expected - received.len().min(self.expected)
                );
            }
        }
    }

    /// Writes one JSON line per execution of the window to `path`.
    fn write_jsonl(&self, path: &str, task: BenchTask) -> Result<()> {
        let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
        if task == BenchTask::Http {
            for h in &self.hits {
                let line = json!({"job": h.job, "scheduled_ms": h.scheduled_ms, "started_ms": h.received_ms, "worker_id": h.worker_id});
                writeln!(w, "{line}")?;
            }
        } else {
            for r in &self.runs {
                let line = json!({"job": r.job, "scheduled_ms": r.scheduled_ms, "started_ms": started_ms(r), "worker_id": r.worker_id});
                writeln!(w, "{line}")?;
            }
        }
        Ok(())
    }
}

/// Prints each process's CPU and memory over the window, and each worker's fires.
fn print_processes(
    pids: &[(String, u32)],
    usage: &[(f64, u64)],
    runs: &[&etcron_model::record::ExecutionRecord],
    seconds: i64,
) {
    let mut per_worker: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for r in runs {
        *per_worker.entry(r.worker_id.as_str()).or_default() += 1;
    }
    for ((name, _), (cpu, rss)) in pids.iter().zip(usage) {
        println!(
            "  {name:<8} cpu {:>5.1}% of one core   rss {:>6.1} MiB   fires {}",
            cpu / seconds as f64 * 100.0,
            *rss as f64 / 1048576.0,
            per_worker.get(name.as_str()).copied().unwrap_or(0)
        );
    }
}

fn started_ms(r: &etcron_model::record::ExecutionRecord) -> Option<i64> {
    let at = r.started_at.as_deref()?;
    Some(chrono::DateTime::parse_from_rfc3339(at).ok()?.timestamp_millis())
}

/// Every record scheduled in `[from_ms, to_ms]`, all pages.
async fn records_between(
    store: &etcron_common::store::MongoStore,
    from_ms: i64,
    to_ms: i64,
) -> Result<Vec<etcron_model::record::ExecutionRecord>> {
    use etcron_common::store::{Cursor, Search};
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let s = Search { since_ms: Some(from_ms), until_ms: Some(to_ms), limit: 500, cursor, ..Search::default() };
        let page = store.search(&s).await?;
        out.extend(page.executions);
        match page.next_cursor {
            Some(next) => cursor = Some(Cursor::decode(&next)?),
            None => return Ok(out),
        }
    }
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
        concurrent_claims(&client, lease, n, round).await?;
    }
    // The same claims in batches of `MAX_BATCH` (nested transactions, one proposal each), as
    // the worker's group commit sends them, one batch after another and 4 at once.
    for in_flight in [1usize, 4] {
        batched_claims(&client, lease, n, in_flight).await?;
    }
    let fsyncs = etcd.metric("etcd_disk_wal_fsync_duration_seconds_count").await?;
    println!("wal fsyncs: {fsyncs}");
    Ok(())
}

/// One round of `n` claims sent at once, one transaction each; prints their latency spread.
async fn concurrent_claims(client: &etcd_client::Client, lease: i64, n: usize, round: usize) -> Result<()> {
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
                    session_lease: lease,
                    retention_lease: lease,
                    lock: None,
                    extra: Vec::new(),
                    dequeued: None,
                    pool: None,
                },
                &etcron_common::claim::InflightPut {
                    key: format!("/bench/inflight/w/{i}-{round}"),
                    value: format!("[\"j{i}@{round}#1\"]").into_bytes(),
                    session_lease: lease,
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
    Ok(())
}

/// `n` claims in batches of `MAX_BATCH`, `in_flight` batches at a time; prints claims per second.
async fn batched_claims(client: &etcd_client::Client, lease: i64, n: usize, in_flight: usize) -> Result<()> {
    let start = std::time::Instant::now();
    let batches: Vec<Vec<etcron_common::claim::RunClaim>> = (0..n)
        .map(|i| etcron_common::claim::RunClaim {
            claim_key: format!("/bench/batched{in_flight}/claims/j{i}/0"),
            claim_value: b"{}".to_vec(),
            running_key: format!("/bench/batched{in_flight}/running/j{i}/0"),
            session_lease: lease,
            retention_lease: lease,
            lock: None,
            extra: Vec::new(),
            dequeued: None,
            pool: None,
        })
        .collect::<Vec<_>>()
        .chunks(etcron_common::claim::MAX_BATCH)
        .map(<[etcron_common::claim::RunClaim]>::to_vec)
        .collect();
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(in_flight));
    let mut tasks = Vec::new();
    for (b, batch) in batches.into_iter().enumerate() {
        let (client, sem) = (client.clone(), sem.clone());
        let inflight = etcron_common::claim::InflightPut {
            key: format!("/bench/batched{in_flight}/inflight/w/{b}"),
            value: b"[]".to_vec(),
            session_lease: lease,
        };
        tasks.push(tokio::spawn(async move {
            let _slot = sem.acquire_owned().await;
            etcron_common::claim::claim_batch(&client, &batch, &inflight).await
        }));
    }
    let mut won = 0;
    for t in tasks {
        won += t.await??.iter().filter(|o| matches!(o, etcron_common::claim::ClaimOutcome::Won { .. })).count();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "batched, {in_flight} in flight: {won} of {n} claims won in {:.0} ms: {:.0} claims/s",
        secs * 1000.0,
        won as f64 / secs
    );
    Ok(())
}
