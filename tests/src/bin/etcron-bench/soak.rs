//! `soak`: N HTTP jobs every second for a long window against etcd with the production storage
//! flags (`ETCD_STORAGE_FLAGS`: compaction keeping 5 minutes, 2 GiB quota) and the master's
//! compactor: etcd's database size, alarms and every process's memory every `--sample-every`,
//! then duplicates and missing ticks from what the HTTP receiver got.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use etcd_client::{AlarmAction, AlarmType};
use etcron_tests::{now_ms, proc_usage, wait_for, Cluster, Proc, WorkerOpts};
use serde_json::json;

use crate::etcd_writes::status;
use crate::receiver::Receiver;

pub async fn run(
    n_jobs: usize,
    n_workers: usize,
    seconds: i64,
    sample_every: i64,
    worker_args: &[String],
) -> Result<()> {
    let (c, receiver) = start(n_jobs, n_workers, worker_args).await?;
    let pids: Vec<(String, u32)> = c
        .workers
        .iter()
        .filter_map(|w| Some((w.opts.id.clone(), w.proc.pid()?)))
        .chain(c.master.proc.pid().map(|p| ("master".to_owned(), p)))
        .chain(c.etcd.proc.pid().map(|p| ("etcd".to_owned(), p)))
        .chain(c.mongo.proc.as_ref().and_then(Proc::pid).map(|p| ("mongodb".to_owned(), p)))
        .collect();
    let mut client = c.etcd.client().await?;
    println!(
        "soak: {n_jobs} HTTP jobs every second, {n_workers} workers, {seconds} s, etcd {:?}",
        etcron_tests::ETCD_STORAGE_FLAGS
    );
    let names: Vec<&str> = pids.iter().map(|(n, _)| n.as_str()).collect();
    println!(
        "  {:>6}  {:>9}  {:>9}  {:>9}  {:>6}  {:>9}  RSS MiB {}",
        "min",
        "dbSize",
        "inUse",
        "revision",
        "alarms",
        "etcd heap",
        names.join(" / ")
    );
    let http = reqwest::Client::new();
    let metrics_url = format!("http://{}/metrics", c.etcd.endpoint);
    let from = now_ms();
    let mut next = 0i64;
    loop {
        let elapsed = (now_ms() - from) / 1000;
        if elapsed >= next {
            print_sample(&mut client, &http, &metrics_url, &pids, elapsed).await?;
            next += sample_every;
        }
        if elapsed >= seconds {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let to = now_ms();
    tokio::time::sleep(Duration::from_secs(5)).await;
    print_ticks(&receiver, n_jobs, from, to)
}

/// Starts the cluster and the every-second HTTP jobs, and waits until each has fired once.
async fn start(n_jobs: usize, n_workers: usize, worker_args: &[String]) -> Result<(Cluster, Receiver)> {
    let mut c = Cluster::start("soak", 0).await?;
    for i in 1..=n_workers {
        let mut w = WorkerOpts::new(&format!("w{i}"));
        "10s".clone_into(&mut w.session_ttl);
        w.extra = worker_args.to_vec();
        c.add_worker(w)?;
    }
    c.wait_workers(n_workers).await?;
    let receiver = Receiver::start().await?;
    let spec = json!({"schedule": "* * * * * *", "task": {"kind": "http", "url": receiver.url}});
    for i in 0..n_jobs {
        c.put_job(&format!("soak-{i}"), spec.clone()).await?;
    }
    wait_for(Duration::from_secs(120), "every job to fire", || async {
        let jobs: std::collections::BTreeSet<String> = receiver.hits().into_iter().map(|h| h.job).collect();
        (jobs.len() == n_jobs).then_some(())
    })
    .await?;
    Ok((c, receiver))
}

/// Prints one row of samples: etcd's database size, revision, alarms and heap, and every process's memory.
async fn print_sample(
    client: &mut etcd_client::Client,
    http: &reqwest::Client,
    metrics_url: &str,
    pids: &[(String, u32)],
    elapsed: i64,
) -> Result<()> {
    let (db, in_use, rev) = status(client).await?;
    let alarms = client.alarm(AlarmAction::Get, AlarmType::None, None).await?.alarms().len();
    let rss: Vec<String> = pids
        .iter()
        .map(|(_, p)| proc_usage(*p).map_or("-".to_owned(), |u| format!("{:.0}", u.1 as f64 / 1048576.0)))
        .collect();
    let heap = etcd_heap_in_use(http, metrics_url).await;
    println!(
        "  {:>6.1}  {:>7.1}MB  {:>7.1}MB  {:>9}  {:>6}  {:>7}MB  {}",
        elapsed as f64 / 60.0,
        db as f64 / 1e6,
        in_use as f64 / 1e6,
        rev,
        alarms,
        heap.map_or("-".to_owned(), |h| format!("{:.1}", h / 1e6)),
        rss.join(" / ")
    );
    Ok(())
}

/// Prints the fires the receiver got for the ticks of `[from, to]`, duplicates and missing ticks.
fn print_ticks(receiver: &Receiver, n_jobs: usize, from: i64, to: i64) -> Result<()> {
    let first = (from / 1000 + 1) * 1000;
    let last = to / 1000 * 1000 - 1000;
    let hits: Vec<_> =
        receiver.hits().into_iter().filter(|h| h.scheduled_ms >= first && h.scheduled_ms <= last).collect();
    let mut per_id: BTreeMap<&str, usize> = BTreeMap::new();
    for h in &hits {
        *per_id.entry(h.execution_id.as_str()).or_default() += 1;
    }
    let expected = n_jobs * usize::try_from((last - first) / 1000 + 1)?;
    let received: std::collections::BTreeSet<(&str, i64)> =
        hits.iter().map(|h| (h.job.as_str(), h.scheduled_ms)).collect();
    println!(
        "  fires {}  duplicates {}  missing {}",
        hits.len(),
        per_id.values().filter(|n| **n > 1).count(),
        expected - received.len().min(expected)
    );
    Ok(())
}

/// etcd's Go heap in use (`go_memstats_heap_inuse_bytes`): its RSS also counts the pages of the
/// database file it has touched through mmap.
async fn etcd_heap_in_use(http: &reqwest::Client, url: &str) -> Option<f64> {
    let text = http.get(url).timeout(Duration::from_secs(5)).send().await.ok()?.text().await.ok()?;
    text.lines().find_map(|l| l.strip_prefix("go_memstats_heap_inuse_bytes ")).and_then(|v| v.trim().parse().ok())
}
