//! The record path into MongoDB: `sink` (records/s through the worker's log sink) and `search`
//! (query latency per filter combination at N records, and storage per record).

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use etcron_common::store::{Cursor, MongoStore, RecordWrite, Search};
use etcron_model::record::{Status, TriggerKind};
use etcron_tests::records::{record, BASE_MS, JOBS};
use etcron_tests::{proc_usage, quantile, wait_for, Mongo, MongoOpts, Proc};
use mongodb::bson::{doc, Document};

/// Options of the `sink` and `search` scenarios.
#[derive(Debug, Clone)]
pub struct Opts {
    pub records: usize,
    /// WiredTiger cache of the benchmark's mongod (GiB); MongoDB's default when None.
    pub cache_gb: Option<f64>,
    /// A data dir to keep the loaded records in and reuse (`search`).
    pub data: Option<std::path::PathBuf>,
    /// WiredTiger block compressor of the collection (`search`; MongoDB's default is snappy).
    pub compressor: Option<String>,
}

async fn start_mongo(name: &str, opts: &Opts) -> Result<Mongo> {
    let logs = etcron_tests::log_dir(name);
    let mongo_opts = MongoOpts { cache_gb: Some(opts.cache_gb.unwrap_or(0.0)), dir: opts.data.clone() };
    let mongo = Mongo::start_own_with(&logs, mongo_opts).await?;
    let cache = opts.cache_gb.map_or_else(|| "MongoDB's default".to_owned(), |g| format!("{g} GiB"));
    println!("mongod 6.0.5, one-node replica set, WiredTiger cache {cache}; logs in {}", logs.display());
    Ok(mongo)
}

/// CPU seconds of a process so far.
fn cpu(pid: Option<u32>) -> f64 {
    pid.and_then(proc_usage).map_or(0.0, |u| u.0)
}

/// `sink --records N`: N records through the worker's own log sink (journal, bounded queue,
/// batches, inserts) into a fresh mongod with every index; prints records/s and where the CPU
/// went (the mongod and this process, which plays the worker).
pub async fn sink(opts: &Opts) -> Result<()> {
    let mongo = start_mongo("bench-sink", opts).await?;
    let store = mongo.store(&etcron_tests::db_name("bench_sink")).await?;
    // Retention longer than the data's age: the TTL monitor deletes nothing during the run.
    store.ensure_indexes(Duration::from_secs(86_400 * 3650)).await?;
    let spool_dir = tempfile::tempdir()?;
    let spool = etcron_worker::context::log_sink::Spool::open(spool_dir.path())?;
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let (sink, _task) = etcron_worker::context::log_sink::LogSink::start(Some(store), spool, stop)?;
    // Made before the clock starts: the benchmark times the sink, not the making of records.
    let records: Vec<RecordWrite> = (0..u64::try_from(opts.records)?).map(record).collect();
    let mongod = mongo.proc.as_ref().and_then(Proc::pid);
    let (mongod0, self0) = (cpu(mongod), cpu(Some(std::process::id())));
    let start = Instant::now();
    for (i, r) in records.into_iter().enumerate() {
        sink.submit(r);
        if i % 5_000 == 4_999 {
            // A worker's producers are paced by ticks; don't let the queue overflow to the spool.
            while sink.queued() > 5_000 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }
    let total = u64::try_from(opts.records)?;
    wait_for(Duration::from_secs(1200), "every record written", || async {
        (sink.stats.written.load(std::sync::atomic::Ordering::Relaxed) >= total).then_some(())
    })
    .await?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "sink: {} records in {secs:.2} s = {:.0} records/s; spooled {}; CPU: mongod {:.1} s, worker side {:.1} s",
        opts.records,
        opts.records as f64 / secs,
        sink.stats.spooled.load(std::sync::atomic::Ordering::Relaxed),
        cpu(mongod) - mongod0,
        cpu(Some(std::process::id())) - self0,
    );
    Ok(())
}

/// Loads records `[from, to)` with two writers at once, as two workers' sinks would.
async fn load(store: &MongoStore, from: u64, to: u64) -> Result<()> {
    const CHUNK: u64 = 1_000;
    let next = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(from));
    let mut writers = Vec::new();
    for _ in 0..2 {
        let (store, next) = (store.clone(), next.clone());
        writers.push(tokio::spawn(async move {
            loop {
                let at = next.fetch_add(CHUNK, std::sync::atomic::Ordering::Relaxed);
                if at >= to {
                    return Ok::<_, anyhow::Error>(());
                }
                let batch: Vec<RecordWrite> = (at..(at + CHUNK).min(to)).map(record).collect();
                store.write(&batch).await?;
            }
        }));
    }
    for w in writers {
        w.await??;
    }
    Ok(())
}

/// One search shape: a name and the search for run `k` (values vary with `k`).
type Shape = (&'static str, fn(i64, i64) -> Search);

fn job(k: i64) -> Option<String> {
    Some(format!("job-{:03}", (k * 7) % JOBS))
}

fn worker(k: i64) -> Option<String> {
    Some(format!("w{}", k % 10))
}

/// An hour somewhere in the data (`span_ms` long from `BASE_MS`).
fn hour(k: i64, span_ms: i64) -> (Option<i64>, Option<i64>) {
    let start = BASE_MS + (k * 7_919_000) % (span_ms - 3_600_000).max(1);
    (Some(start), Some(start + 3_600_000))
}

fn q() -> Option<String> {
    Some("disk_full".into())
}

/// Every filter of `GET /api/executions` alone and in the combinations the console offers.
const SHAPES: &[Shape] = &[
    ("newest, no filter", |_, _| Search::default()),
    ("job", |k, _| Search { job: job(k), ..Search::default() }),
    ("status=failed", |_, _| Search { statuses: vec![Status::Failed], ..Search::default() }),
    ("status=failed,timed_out,lost", |_, _| Search {
        statuses: vec![Status::Failed, Status::TimedOut, Status::Lost],
        ..Search::default()
    }),
    ("status=lost (0.2 %)", |_, _| Search { statuses: vec![Status::Lost], ..Search::default() }),
    ("trigger=manual", |_, _| Search { trigger: Some(TriggerKind::Manual), ..Search::default() }),
    ("worker", |k, _| Search { worker: worker(k), ..Search::default() }),
    ("1 h range", |k, span| {
        let (since_ms, until_ms) = hour(k, span);
        Search { since_ms, until_ms, ..Search::default() }
    }),
    ("q=disk_full", |_, _| Search { q: q(), ..Search::default() }),
    ("q=disk_full var (2 words)", |_, _| Search { q: Some("disk_full var".into()), ..Search::default() }),
    ("job + status=failed", |k, _| Search { job: job(k), statuses: vec![Status::Failed], ..Search::default() }),
    ("job + trigger=retry", |k, _| Search { job: job(k), trigger: Some(TriggerKind::Retry), ..Search::default() }),
    ("job + worker", |k, _| Search { job: job(k), worker: worker(k), ..Search::default() }),
    ("job + 1 h range", |k, span| {
        let (since_ms, until_ms) = hour(k, span);
        Search { job: job(k), since_ms, until_ms, ..Search::default() }
    }),
    ("status=failed + trigger=retry", |_, _| Search {
        statuses: vec![Status::Failed],
        trigger: Some(TriggerKind::Retry),
        ..Search::default()
    }),
    ("status=failed + worker", |k, _| Search {
        statuses: vec![Status::Failed],
        worker: worker(k),
        ..Search::default()
    }),
    ("worker + trigger=manual", |k, _| Search {
        worker: worker(k),
        trigger: Some(TriggerKind::Manual),
        ..Search::default()
    }),
    ("worker + 1 h range", |k, span| {
        let (since_ms, until_ms) = hour(k, span);
        Search { worker: worker(k), since_ms, until_ms, ..Search::default() }
    }),
    ("q + job", |k, _| Search { q: q(), job: job(k), ..Search::default() }),
    ("q + status=failed", |_, _| Search { q: q(), statuses: vec![Status::Failed], ..Search::default() }),
    ("q + worker", |k, _| Search { q: q(), worker: worker(k), ..Search::default() }),
    ("q + 1 h range", |k, span| {
        let (since_ms, until_ms) = hour(k, span);
        Search { q: q(), since_ms, until_ms, ..Search::default() }
    }),
    ("job + status + trigger + worker + 1 h", |k, span| {
        let (since_ms, until_ms) = hour(k, span);
        Search {
            job: job(k),
            statuses: vec![Status::Succeeded],
            trigger: Some(TriggerKind::Schedule),
            worker: worker(k),
            since_ms,
            until_ms,
            ..Search::default()
        }
    }),
];

/// Runs per shape, and pages followed by cursor in each run.
const RUNS: i64 = 40;
const PAGES: usize = 3;

/// `search --records N`: loads N records (unless the data dir holds them already), prints the
/// storage per record, then times every search shape: `RUNS` runs of `PAGES` pages each
/// (limit 50, newest first, the later pages by cursor) through `MongoStore::search`, the code
/// behind `GET /api/executions`, with what MongoDB examined for the first page of one run.
pub async fn search(opts: &Opts) -> Result<()> {
    let mongo = start_mongo("bench-search", opts).await?;
    let store = mongo.store("bench_search").await?;
    if let Some(compressor) = &opts.compressor {
        let exists = !store.database().list_collection_names().filter(doc! {"name": "executions"}).await?.is_empty();
        if !exists {
            let config = format!("block_compressor={compressor}");
            store
                .database()
                .run_command(doc! {"create": "executions", "clusteredIndex": {"key": {"_id": 1}, "unique": true},
                "storageEngine": {"wiredTiger": {"configString": config}}})
                .await?;
        }
    }
    store.ensure_indexes(Duration::from_secs(86_400 * 3650)).await?;
    let executions = store.database().collection::<Document>("executions");
    let have = executions.estimated_document_count().await?;
    let want = u64::try_from(opts.records)?;
    if have < want {
        let started = Instant::now();
        load(&store, have, want).await?;
        let secs = started.elapsed().as_secs_f64();
        println!("loaded records {have}..{want} in {secs:.1} s ({:.0} records/s)", (want - have) as f64 / secs);
    } else {
        println!("reusing {have} records in the data dir");
    }
    storage(&store).await?;
    let span_ms = i64::try_from(want)? / JOBS * 1000;
    // One untimed pass over every shape first: the figures are for a server whose cache holds
    // what the searches read, as a running server's does (a restarted one reads from disk).
    let warm = Instant::now();
    for (_, make) in SHAPES {
        for k in 0..RUNS {
            let mut s = make(k, span_ms);
            s.limit = 50;
            store.search(&s).await?;
        }
    }
    println!("warm-up pass (untimed per query): {:.1} s", warm.elapsed().as_secs_f64());
    println!(
        "{:<38} {:>9} {:>9} {:>9} {:>7} {:>7} {:>8}",
        "search (limit 50, 3 pages)", "p50 ms", "p99 ms", "max ms", "keys", "docs", "partial"
    );
    for (name, make) in SHAPES {
        let (mut lat, mut partial_pages) = (Vec::new(), 0usize);
        for k in 0..RUNS {
            let mut s = make(k, span_ms);
            s.limit = 50;
            for _ in 0..PAGES {
                let t = Instant::now();
                let page = store.search(&s).await?;
                lat.push(i64::try_from(t.elapsed().as_micros())?);
                partial_pages += usize::from(page.partial);
                match page.next_cursor {
                    Some(c) => s.cursor = Some(Cursor::decode(&c)?),
                    None => break,
                }
            }
        }
        let partial = partial_pages * 100 / lat.len().max(1);
        lat.sort_unstable();
        let mut s = make(1, span_ms);
        s.limit = 50;
        let explain = store.explain_search(&s).await?;
        let stats = explain.get_document("executionStats").context("explain without executionStats")?;
        let n = |k: &str| stats.get_i32(k).map(i64::from).or_else(|_| stats.get_i64(k)).unwrap_or(0);
        let (keys, docs) = (n("totalKeysExamined"), n("totalDocsExamined"));
        println!(
            "{name:<38} {:>9.2} {:>9.2} {:>9.2} {:>7} {:>7} {:>7}%",
            quantile(&lat, 0.5) as f64 / 1000.0,
            quantile(&lat, 0.99) as f64 / 1000.0,
            *lat.last().unwrap_or(&0) as f64 / 1000.0,
            keys,
            docs,
            partial,
        );
    }
    Ok(())
}

/// Prints bytes per record: documents (compressed on disk, and as BSON) and each index.
async fn storage(store: &MongoStore) -> Result<()> {
    let stats = store.database().run_command(doc! {"collStats": "executions"}).await?;
    let num = |d: &Document, k: &str| -> f64 {
        match d.get(k) {
            Some(mongodb::bson::Bson::Int32(v)) => f64::from(*v),
            Some(mongodb::bson::Bson::Int64(v)) => *v as f64,
            Some(mongodb::bson::Bson::Double(v)) => *v,
            _ => 0.0,
        }
    };
    let count = num(&stats, "count");
    ensure!(count > 0.0, "no records");
    let disk = num(&stats, "storageSize") + num(&stats, "totalIndexSize");
    println!(
        "storage at {count:.0} records: {:.0} bytes/record on disk (documents {:.0}, BSON {:.0}; indexes {:.0}); {:.2} GiB in all",
        disk / count,
        num(&stats, "storageSize") / count,
        num(&stats, "size") / count,
        num(&stats, "totalIndexSize") / count,
        disk / f64::from(1u32 << 30),
    );
    if let Ok(sizes) = stats.get_document("indexSizes") {
        let per: Vec<String> = sizes.keys().map(|k| format!("{k} {:.0}", num(sizes, k) / count)).collect();
        println!("  index bytes/record: {}", per.join(", "));
    }
    Ok(())
}
