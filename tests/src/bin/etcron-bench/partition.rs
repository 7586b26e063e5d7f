//! `partition --jobs 100 --seconds 15 --session-ttl 3s [--faults cut-leader,…]`: the production shape under the loss of
//! one etcd member. Three etcd members, each in a network namespace of its own (a client link to
//! this host, a peer link to a bridge: `etcron_tests::netns`), a `mongod`, two masters and three
//! workers given all three endpoints; `--jobs` jobs fire every second. One after another, each
//! for `--seconds`: the leader cut from its peers (clients still reach it), a follower cut from
//! its peers, the leader SIGKILLed (then restarted), the leader frozen (SIGSTOP, then SIGCONT),
//! each followed by 8 s of recovery. Meanwhile each master is asked `/readyz` and one job update
//! every 250 ms. Prints, per fault and in total: ticks due, ticks that never ran, duplicates,
//! lateness (start minus scheduled time) p50/p99/max of the ticks due during the fault, sessions
//! lost (worker log lines), and the master requests that failed or took over 1 s.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use etcron_tests::etcd_cluster::EtcdCluster;
use etcron_tests::netns::Cut;
use etcron_tests::{
    check_every_second, db_name, log_dir, now_ms, quantile, read_fired, record_command, wait_tick, Master, Mongo,
    Worker, WorkerOpts,
};
use serde_json::json;

#[derive(Debug, Clone, Copy)]
enum Fault {
    CutLeader,
    CutFollower,
    KillLeader,
    FreezeLeader,
}

impl Fault {
    const ALL: [Self; 4] = [Self::CutLeader, Self::CutFollower, Self::KillLeader, Self::FreezeLeader];

    fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "cut-leader" => Self::CutLeader,
            "cut-follower" => Self::CutFollower,
            "kill-leader" => Self::KillLeader,
            "freeze-leader" => Self::FreezeLeader,
            other => anyhow::bail!("--faults: cut-leader, cut-follower, kill-leader or freeze-leader, not {other}"),
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::CutLeader => "leader cut from its peers",
            Self::CutFollower => "follower cut from its peers",
            Self::KillLeader => "leader killed",
            Self::FreezeLeader => "leader frozen",
        }
    }
}

/// What the masters answered during one window.
#[derive(Debug, Default, Clone)]
struct MasterTally {
    asked: usize,
    failed: usize,
    slow: usize,
}

/// `faults`: a comma-separated list of `cut-leader`, `cut-follower`, `kill-leader` and
/// `freeze-leader` (all four, in that order, when empty).
pub async fn run(jobs: usize, seconds: u64, session_ttl: &str, faults: &str) -> Result<()> {
    let faults: Vec<Fault> = if faults.is_empty() {
        Fault::ALL.to_vec()
    } else {
        faults.split(',').map(Fault::parse).collect::<Result<_>>()?
    };
    let logs = log_dir("bench-partition");
    let mut etcd = EtcdCluster::start_partitionable(&logs, 3).await?;
    let mongo = Mongo::start(&logs).await?;
    let db = db_name("bench-partition");
    let namespace = "/t-partition".to_owned();
    let endpoints = etcd.endpoints();
    let margs = ["--mongodb-uri", mongo.uri.as_str(), "--mongodb-db", db.as_str()];
    let masters = vec![
        Master::start(&endpoints, &namespace, &logs, &margs).await?,
        Master::start(&endpoints, &namespace, &logs, &margs).await?,
    ];
    let mut workers = Vec::new();
    for i in 1..=3 {
        let mut w = WorkerOpts::new(&format!("w{i}"));
        session_ttl.clone_into(&mut w.session_ttl);
        w.mongodb = Some((mongo.uri.clone(), db.clone()));
        workers.push(Worker::start(&endpoints, &namespace, &logs, w)?);
    }
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
    let master_url = masters[0].url.clone();
    etcron_tests::wait_for(Duration::from_secs(30), "3 registered workers", || async {
        let v: serde_json::Value =
            http.get(format!("{master_url}/api/workers")).send().await.ok()?.json().await.ok()?;
        (v["workers"].as_array()?.len() == 3).then_some(())
    })
    .await?;
    let work = tempfile::tempdir()?;
    let file = work.path().join("fired.log");
    let names: Vec<String> = (0..jobs).map(|i| format!("tick-{i}")).collect();
    let spec = json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": record_command(&file)}});
    for name in &names {
        let r = http.put(format!("{master_url}/api/jobs/{name}")).json(&spec).send().await?;
        anyhow::ensure!(r.status().is_success(), "PUT {name}: {}", r.status());
    }
    wait_tick(&file, &names, now_ms() + 2000).await?;
    let from = now_ms();
    let tallies = Arc::new(std::sync::Mutex::new(BTreeMap::<usize, Vec<MasterTally>>::new()));
    let window = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let prober =
        tokio::spawn(probe_masters(masters.iter().map(|m| m.url.clone()).collect(), window.clone(), tallies.clone()));
    let mut windows = Vec::new();
    for (k, fault) in faults.iter().enumerate() {
        windows.push(inject(&mut etcd, k, *fault, seconds, &window).await?);
    }
    let to = now_ms();
    prober.abort();
    // Late ticks still run: give them the longest start deadline of a default job.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let fired = read_fired(&file);
    report(&fired, &names, from, to, &windows, &tallies.lock().map(|t| t.clone()).unwrap_or_default());
    sessions_lost(&logs, &workers);
    drop(workers);
    drop(masters);
    Ok(())
}

/// Injects one fault into etcd for `seconds`, undoes it, then leaves 8 s to recover; answers its window.
async fn inject(
    etcd: &mut EtcdCluster,
    k: usize,
    fault: Fault,
    seconds: u64,
    window: &std::sync::atomic::AtomicUsize,
) -> Result<(Fault, i64, i64)> {
    let leader = etcd.leader().await?;
    let victim = match fault {
        Fault::CutFollower => (leader + 1) % etcd.len(),
        _ => leader,
    };
    window.store(k + 1, std::sync::atomic::Ordering::SeqCst);
    let t0 = now_ms();
    match fault {
        Fault::CutLeader | Fault::CutFollower => etcd.cut(victim, Cut::Peers)?,
        Fault::KillLeader => etcd.kill(victim),
        Fault::FreezeLeader => etcd.freeze(victim)?,
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    match fault {
        Fault::CutLeader | Fault::CutFollower => etcd.heal(victim)?,
        Fault::KillLeader => etcd.restart(victim)?,
        Fault::FreezeLeader => etcd.thaw(victim)?,
    }
    let t1 = now_ms();
    window.store(0, std::sync::atomic::Ordering::SeqCst);
    println!("{}: member m{victim}, {} ms", fault.name(), t1 - t0);
    tokio::time::sleep(Duration::from_secs(8)).await;
    Ok((fault, t0, t1))
}

/// Prints ticks due, never run and run twice, in all and per fault, with lateness and master answers.
fn report(
    fired: &[etcron_tests::Fired],
    names: &[String],
    from: i64,
    to: i64,
    windows: &[(Fault, i64, i64)],
    tallies: &BTreeMap<usize, Vec<MasterTally>>,
) {
    let total = check_every_second(fired, names, from, to);
    let due = names.len() * usize::try_from((to / 1000 - from / 1000).max(0)).unwrap_or(0);
    println!(
        "all: {due} ticks due, {} never ran, {} (job, tick, attempt) twice",
        total.missing.len(),
        total.duplicates.len()
    );
    for (k, (fault, t0, t1)) in windows.iter().enumerate() {
        let report = check_every_second(fired, names, *t0, *t1);
        let mut late: Vec<i64> = fired
            .iter()
            .filter(|f| f.attempt == 1 && f.scheduled_ms > *t0 && f.scheduled_ms <= *t1)
            .filter_map(|f| Some(f.extra.first()?.parse::<i64>().ok()? - f.scheduled_ms))
            .collect();
        late.sort_unstable();
        let masters = tallies.get(&(k + 1)).cloned().unwrap_or_default();
        let masters: Vec<String> = masters
            .iter()
            .enumerate()
            .map(|(i, t)| format!("master {i}: {} asked, {} failed, {} over 1 s", t.asked, t.failed, t.slow))
            .collect();
        println!(
            "{}: {} ticks due, {} never ran, lateness p50 {} ms p99 {} ms max {} ms; {}",
            fault.name(),
            late.len() + report.missing.len(),
            report.missing.len(),
            quantile(&late, 0.5),
            quantile(&late, 0.99),
            late.last().copied().unwrap_or(0),
            masters.join("; ")
        );
    }
}

/// Counts the sessions each worker lost (the session's own log line, one per loss).
fn sessions_lost(logs: &Path, workers: &[Worker]) {
    let lost: Vec<String> = workers
        .iter()
        .map(|w| {
            let text = std::fs::read_to_string(logs.join(format!("worker-{}.log", w.opts.id))).unwrap_or_default();
            let n = text.lines().filter(|l| l.contains("etcron_common::session: session lease lost")).count();
            format!("{} {n}", w.opts.id)
        })
        .collect();
    println!("sessions lost: {}", lost.join(", "));
}

/// `None` for a 2xx answer; otherwise what came back (status and body, or the error).
async fn answer(resp: reqwest::Result<reqwest::Response>) -> Option<String> {
    match resp {
        Ok(r) if r.status().is_success() => None,
        Ok(r) => Some(format!("{} {}", r.status(), r.text().await.unwrap_or_default())),
        Err(e) => Some(e.to_string()),
    }
}

/// Asks each master `/readyz` and for one job update every 250 ms, tallied by fault window.
async fn probe_masters(
    urls: Vec<String>,
    window: Arc<std::sync::atomic::AtomicUsize>,
    tallies: Arc<std::sync::Mutex<BTreeMap<usize, Vec<MasterTally>>>>,
) -> Result<()> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().context("http client")?;
    let spec = json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "true"}});
    loop {
        let k = window.load(std::sync::atomic::Ordering::SeqCst);
        for (i, url) in urls.iter().enumerate() {
            let started = std::time::Instant::now();
            let ready = answer(http.get(format!("{url}/readyz")).send().await).await;
            let put = answer(http.put(format!("{url}/api/jobs/probe-{i}")).json(&spec).send().await).await;
            let ok = ready.is_none() && put.is_none();
            if k == 0 {
                continue;
            }
            // What failed, with the master's answer: the figures count it, this says why.
            for (what, failed) in [("/readyz", ready), ("PUT /api/jobs", put)] {
                if let Some(failed) = failed {
                    eprintln!("master {i} (fault window {k}): {what} failed after {:?}: {failed}", started.elapsed());
                }
            }
            let mut t = tallies.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            let row = t.entry(k).or_insert_with(|| vec![MasterTally::default(); urls.len()]);
            row[i].asked += 1;
            row[i].failed += usize::from(!ok);
            row[i].slow += usize::from(started.elapsed() > Duration::from_secs(1));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
