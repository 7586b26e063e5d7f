//! etcd faults against a real 3-member cluster: with quorum lost nothing runs twice, and once it
//! returns every tick of the outage is either run or recorded `missed`; clients carry on over
//! the surviving endpoints and pick up job changes made after the outage.

use std::collections::BTreeSet;
use std::time::Duration;

use etcron_tests::etcd_cluster::EtcdCluster;
use etcron_tests::{
    db_name, log_dir, now_ms, read_fired, record_command, wait_for, wait_tick, Master, Mongo, Worker, WorkerOpts,
};
use serde_json::{json, Value};

struct Setup {
    etcd: EtcdCluster,
    _mongo: Mongo,
    master: Master,
    workers: Vec<Worker>,
    http: reqwest::Client,
    dir: tempfile::TempDir,
}

async fn setup(test: &str) -> Setup {
    let logs = log_dir(test);
    let etcd = EtcdCluster::start(&logs, 3).await.unwrap();
    let mongo = Mongo::start(&logs).await.unwrap();
    let db = db_name(test);
    let ns = format!("/t-{test}");
    let endpoints = etcd.endpoints();
    let master =
        Master::start(&endpoints, &ns, &logs, &["--mongodb-uri", &mongo.uri, "--mongodb-db", &db]).await.unwrap();
    let workers = (1..=3)
        .map(|i| {
            let mut opts = WorkerOpts::new(&format!("w{i}"));
            opts.mongodb = Some((mongo.uri.clone(), db.clone()));
            Worker::start(&endpoints, &ns, &logs, opts).unwrap()
        })
        .collect();
    Setup { etcd, _mongo: mongo, master, workers, http: reqwest::Client::new(), dir: tempfile::tempdir().unwrap() }
}

impl Setup {
    /// Waits until every tick of `window` of every job ran or is recorded `missed` (or `lost`);
    /// asserts no (job, tick, attempt) ran twice. Returns what ran and how many were missed.
    async fn account_for(
        &self,
        file: &std::path::Path,
        jobs: &[String],
        window: &[i64],
    ) -> anyhow::Result<(Vec<etcron_tests::Fired>, usize)> {
        let report = wait_for(Duration::from_secs(90), "every tick to be run or recorded", || async {
            let fired = read_fired(file);
            let mut unaccounted = Vec::new();
            let mut missed_total = 0;
            for job in jobs {
                let missed = self.recorded(job, "missed").await?;
                let lost = self.recorded(job, "lost").await?;
                missed_total += window.iter().filter(|t| missed.contains(t)).count();
                for t in window {
                    let ran = fired.iter().any(|f| &f.job == job && f.scheduled_ms == *t);
                    if !ran && !missed.contains(t) && !lost.contains(t) {
                        unaccounted.push((job.clone(), *t));
                    }
                }
            }
            if !unaccounted.is_empty() {
                eprintln!("unaccounted so far: {unaccounted:?}");
            }
            unaccounted.is_empty().then_some((fired, missed_total))
        })
        .await;
        let (fired, missed_total) = match report {
            Ok(r) => r,
            Err(e) => {
                for w in &self.workers {
                    eprintln!("===== {} =====\n{}", w.proc.name, w.proc.log_text());
                }
                return Err(e);
            }
        };
        let mut seen = BTreeSet::new();
        let duplicates: Vec<_> =
            fired.iter().filter(|f| !seen.insert((f.job.clone(), f.scheduled_ms, f.attempt))).collect();
        assert!(duplicates.is_empty(), "duplicates: {duplicates:?}");
        Ok((fired, missed_total))
    }

    async fn put_job(&self, name: &str, spec: Value) {
        let resp = self.http.put(format!("{}/api/jobs/{name}", self.master.url)).json(&spec).send().await.unwrap();
        assert!(resp.status().is_success(), "PUT {name}: {}", resp.text().await.unwrap());
    }

    /// Scheduled ms of the `status` records of `job` (all pages).
    async fn recorded(&self, job: &str, status: &str) -> Option<BTreeSet<i64>> {
        let mut out = BTreeSet::new();
        let mut cursor = String::new();
        loop {
            let url = format!("{}/api/executions?job={job}&status={status}&limit=500{cursor}", self.master.url);
            let page: Value = self.http.get(url).send().await.ok()?.json().await.ok()?;
            for r in page["executions"].as_array()? {
                out.insert(r["id"].as_str()?.split('@').nth(1)?.split('#').next()?.parse().ok()?);
            }
            match page["next_cursor"].as_str() {
                Some(c) => cursor = format!("&cursor={c}"),
                None => return Some(out),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn losing_quorum_runs_nothing_twice_and_accounts_for_every_tick_once_it_returns() -> anyhow::Result<()> {
    let mut s = setup("etcd-quorum").await;
    let file = s.dir.path().join("fired.log");
    let jobs: Vec<String> = (0..5).map(|i| format!("q-{i}")).collect();
    for job in &jobs {
        s.put_job(job, json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": record_command(&file)}}))
            .await;
    }
    wait_tick(&file, &jobs, now_ms() + 1000).await?;

    // Two of three members gone: no quorum, so no claim can commit.
    let from = now_ms();
    let leader = s.etcd.leader().await?;
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    s.etcd.kill(leader);
    s.etcd.kill(others[0]);
    // The outage lasts until ticks have visibly stopped running for a few seconds.
    wait_for(Duration::from_secs(30), "ticks to stop running", || async {
        let newest = read_fired(&file).iter().map(|f| f.scheduled_ms).max().unwrap_or(0);
        (now_ms() - newest > 6_000).then_some(())
    })
    .await?;
    let outage_end = now_ms();
    s.etcd.restart(leader)?;
    s.etcd.restart(others[0])?;
    s.etcd.wait_healthy().await?;
    wait_tick(&file, &jobs, now_ms() + 1000).await?;
    let to = now_ms();

    // Every tick from before the outage to after it ran once or is recorded missed.
    let window: Vec<i64> = ((from / 1000 + 1) * 1000..=to - 1000).step_by(1000).collect();
    let (fired, missed_total) = s.account_for(&file, &jobs, &window).await?;
    let outage_ticks = usize::try_from((outage_end - from) / 1000).unwrap_or(0) * jobs.len();
    eprintln!(
        "window {} ticks × {} jobs; outage ≈ {outage_ticks} ticks; recorded missed {missed_total}",
        window.len(),
        jobs.len()
    );
    assert!(missed_total > 0, "the outage's ticks are recorded missed");
    for t in &window {
        for job in &jobs {
            let missed = s.recorded(job, "missed").await.unwrap();
            let ran = fired.iter().any(|f| &f.job == job && f.scheduled_ms == *t);
            assert!(!(ran && missed.contains(t)), "{job}@{t} both ran and was recorded missed");
        }
    }

    // After the outage the workers still follow the job list (their watches resumed).
    let late = s.dir.path().join("late.log");
    s.put_job(
        "after-outage",
        json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": record_command(&late)}}),
    )
    .await;
    wait_tick(&late, &["after-outage".to_owned()], now_ms()).await?;
    // Losing one member (of three) is no outage at all: clients move to the others.
    let leader = s.etcd.leader().await?;
    s.etcd.kill(leader);
    let before = now_ms();
    wait_tick(&file, &jobs, before + 3000).await?;
    Ok(())
}

/// Every member frozen (SIGSTOP) for twice the session TTL, twice, with both cores busy: every
/// worker's session expires while its claims and closes are in flight. Nothing runs twice, and
/// every tick of the window runs or is recorded, without waiting for a re-list.
#[tokio::test(flavor = "multi_thread")]
async fn freezing_etcd_past_the_session_ttl_on_a_starved_machine_runs_nothing_twice_and_loses_no_tick(
) -> anyhow::Result<()> {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let s = setup("etcd-freeze").await;
    let file = s.dir.path().join("fired.log");
    let jobs: Vec<String> = (0..10).map(|i| format!("f-{i}")).collect();
    for job in &jobs {
        s.put_job(job, json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": record_command(&file)}}))
            .await;
    }
    wait_tick(&file, &jobs, now_ms() + 1000).await?;
    let from = now_ms();
    // Deliberate overload: one busy-looping process per core for the whole fault window.
    let mut hogs: Vec<std::process::Child> = (0..2)
        .map(|_| std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn())
        .collect::<Result<_, _>>()?;
    let signal_all = |sig: Signal| -> anyhow::Result<()> {
        for i in 0..s.etcd.len() {
            if let Some(pid) = s.etcd.pid(i) {
                kill(Pid::from_raw(i32::try_from(pid)?), sig)?;
            }
        }
        Ok(())
    };
    for _ in 0..2 {
        signal_all(Signal::SIGSTOP)?;
        // The harness's session TTL is 3 s.
        tokio::time::sleep(Duration::from_secs(6)).await;
        signal_all(Signal::SIGCONT)?;
        s.etcd.wait_healthy().await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    for hog in &mut hogs {
        hog.kill()?;
        hog.wait()?;
    }
    wait_tick(&file, &jobs, now_ms() + 1000).await?;
    let to = now_ms();
    let window: Vec<i64> = ((from / 1000 + 1) * 1000..=to - 1000).step_by(1000).collect();
    let (fired, missed) = s.account_for(&file, &jobs, &window).await?;
    let ran = fired.iter().filter(|f| window.contains(&f.scheduled_ms)).count();
    eprintln!("window {} ticks × {} jobs: {ran} ran, {missed} recorded missed", window.len(), jobs.len());
    Ok(())
}

/// The production shape: one member of three lost. Each member runs in a network namespace of
/// its own (`etcron_tests::netns`). The leader is cut from its peers (clients still reach it),
/// then a follower from everyone: no worker loses its session, nothing runs twice, every tick
/// runs or is recorded, the master keeps taking writes, and the cluster route and the console name the
/// member that is cut off. Neither costs a tick: the claims in flight to the old leader are
/// sent again once etcd, read back, holds none of them.
#[tokio::test(flavor = "multi_thread")]
async fn a_member_cut_off_costs_no_session() -> anyhow::Result<()> {
    use etcron_tests::netns::Cut;
    let logs = log_dir("etcd-cut");
    let etcd = EtcdCluster::start_partitionable(&logs, 3).await?;
    let mongo = Mongo::start(&logs).await?;
    let (db, ns, endpoints) = (db_name("etcd-cut"), "/t-etcd-cut", etcd.endpoints());
    let master = Master::start(&endpoints, ns, &logs, &["--mongodb-uri", &mongo.uri, "--mongodb-db", &db]).await?;
    let workers: Vec<Worker> = (1..=2)
        .map(|i| {
            let mut opts = WorkerOpts::new(&format!("w{i}"));
            opts.mongodb = Some((mongo.uri.clone(), db.clone()));
            // The production default: a TTL must outlast a renewal interval plus the leader's
            // election gap, when no member renews any lease (docs/operations.md).
            "10s".clone_into(&mut opts.session_ttl);
            Worker::start(&endpoints, ns, &logs, opts)
        })
        .collect::<anyhow::Result<_>>()?;
    let s = Setup { etcd, _mongo: mongo, master, workers, http: reqwest::Client::new(), dir: tempfile::tempdir()? };
    let file = s.dir.path().join("fired.log");
    let jobs: Vec<String> = (0..5).map(|i| format!("c-{i}")).collect();
    for job in &jobs {
        s.put_job(job, json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": record_command(&file)}}))
            .await;
    }
    wait_tick(&file, &jobs, now_ms() + 1000).await?;
    // `/readyz` (open to anyone) counts the healthy members and stays ready; the cluster route
    // (a global role) names the one cut off.
    let unhealthy = |endpoint: String| {
        let (http, url) = (s.http.clone(), s.master.url.clone());
        async move {
            wait_for(Duration::from_secs(15), "/api/cluster/etcd to name the cut member", || async {
                let ready: Value = http.get(format!("{url}/readyz")).send().await.ok()?.json().await.ok()?;
                let counted = ready["ready"] == true && ready["etcd_members"] == json!({"healthy": 2, "total": 3});
                let cluster: Value =
                    http.get(format!("{url}/api/cluster/etcd")).send().await.ok()?.json().await.ok()?;
                let members = cluster["members"].as_array()?;
                let m = members.iter().find(|m| m["endpoint"] == endpoint.as_str())?;
                (m["healthy"] == false && counted).then_some(cluster)
            })
            .await
        }
    };

    let leader_cut = now_ms();
    let leader = s.etcd.leader().await?;
    s.etcd.cut(leader, Cut::Peers)?;
    let ready = unhealthy(s.etcd.endpoint(leader).to_owned()).await?;
    eprintln!("leader m{leader} cut from its peers: {}", ready["members"]);
    s.put_job("written-during-the-cut", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "true"}}))
        .await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    s.etcd.heal(leader)?;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let follower_cut = now_ms();
    let leader = s.etcd.leader().await?;
    let follower = (leader + 1) % 3;
    s.etcd.cut(follower, Cut::Both)?;
    unhealthy(s.etcd.endpoint(follower).to_owned()).await?;
    etcron_tests::browser_with("members.mjs", &s.master.url, &logs, &[], &[])?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    s.etcd.heal(follower)?;
    wait_tick(&file, &jobs, now_ms() + 2000).await?;
    let to = now_ms();

    let ticks = |from: i64, to: i64| -> Vec<i64> { ((from / 1000 + 1) * 1000..=to).step_by(1000).collect() };
    let (_, missed) = s.account_for(&file, &jobs, &ticks(leader_cut, follower_cut - 1000)).await?;
    assert_eq!(missed, 0, "the leader cut off costs no tick: claims lost with it are sent again");
    let (_, missed) = s.account_for(&file, &jobs, &ticks(follower_cut, to - 2000)).await?;
    assert_eq!(missed, 0, "a follower cut off costs no tick");
    for w in &s.workers {
        let log = w.proc.log_text();
        assert!(!log.contains("session lease lost"), "{} kept its session:\n{log}", w.proc.name);
        assert!(log.contains("etcd member unhealthy"), "{} moved off the cut member", w.proc.name);
    }
    Ok(())
}
