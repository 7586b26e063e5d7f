//! Workers dying and restarting: the survivors keep every tick, nothing runs twice.

use std::time::Duration;

use etcron_tests::{
    alive, check_every_second, key_history, now_ms, read_fired, read_pid, wait_for, wait_tick, Cluster,
};
use nix::sys::signal::Signal;
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn a_sigkilled_worker_leaves_the_others_firing_every_tick() -> anyhow::Result<()> {
    let mut c = Cluster::start("failover-sigkill", 3).await?;
    let out = c.path("fired.log");
    let jobs = c.every_second_jobs("job", 5, &out).await?;
    let start = now_ms() + 1_500;
    wait_tick(&out, &jobs, start + 2_000).await?;
    let killed_at = now_ms();
    c.workers[0].proc.kill9();
    // Its registration disappears when its session lease (3 s) expires.
    c.wait_workers(2).await?;
    let end = now_ms() + 5_000;
    wait_tick(&out, &jobs, end).await?;
    c.settle_claims(end).await?;
    let fired = read_fired(&out);
    let report = check_every_second(&fired, &jobs, start, end);
    if !report.duplicates.is_empty() || !report.missing.is_empty() {
        c.dump_logs();
    }
    assert!(report.duplicates.is_empty(), "duplicates: {:?}", report.duplicates);
    // A tick the dead worker had claimed in the instant before SIGKILL may not have run (rerun
    // on worker loss is a job policy); every other tick must have.
    let unexplained: Vec<_> = report.missing.iter().filter(|(_, t)| (*t - killed_at).abs() > 1_000).collect();
    assert!(unexplained.is_empty(), "missing ticks away from the kill: {unexplained:?}");
    assert!(fired.iter().filter(|f| f.scheduled_ms > killed_at + 1_000).all(|f| f.worker != "w1"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_restarting_midway_loses_and_doubles_nothing() -> anyhow::Result<()> {
    let mut c = Cluster::start("failover-restart", 3).await?;
    let out = c.path("fired.log");
    let jobs = c.every_second_jobs("job", 5, &out).await?;
    let start = now_ms() + 1_500;
    wait_tick(&out, &jobs, start + 2_000).await?;
    // Graceful stop (SIGTERM): the worker drains, revokes its lease and exits 0.
    c.workers[1].proc.signal(Signal::SIGTERM)?;
    assert_eq!(c.workers[1].proc.wait_exit(Duration::from_secs(20))?, Some(0));
    c.wait_workers(2).await?;
    wait_tick(&out, &jobs, now_ms() + 2_000).await?;
    c.workers[1].restart()?;
    c.wait_workers(3).await?;
    let restarted_at = now_ms();
    // SIGKILL another one and bring it straight back.
    c.workers[2].restart()?;
    let end = now_ms() + 6_000;
    wait_tick(&out, &jobs, end).await?;
    c.settle_claims(end).await?;
    let fired = read_fired(&out);
    let report = check_every_second(&fired, &jobs, start, end);
    if !report.duplicates.is_empty() || !report.missing.is_empty() {
        c.dump_logs();
    }
    assert!(report.duplicates.is_empty(), "duplicates: {:?}", report.duplicates);
    let unexplained: Vec<_> = report.missing.iter().filter(|(_, t)| (*t - restarted_at).abs() > 1_000).collect();
    assert!(unexplained.is_empty(), "missing: {unexplained:?}");
    // The gracefully restarted worker is back in the rotation.
    assert!(fired.iter().any(|f| f.worker == "w2" && f.scheduled_ms > restarted_at));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_lost_its_lease_kills_its_tasks_and_registers_again() -> anyhow::Result<()> {
    let c = Cluster::start("failover-lease-lost", 1).await?;
    let dir = c.work.path().display().to_string();
    let cmd = format!("sleep 300 & echo $! > {dir}/child.pid; wait");
    c.put_job("long", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": cmd}})).await?;
    c.call(reqwest::Method::POST, "/api/jobs/long/run", None).await?;
    let child =
        wait_for(Duration::from_secs(15), "the task to start", || async { read_pid(&c.path("child.pid")) }).await?;
    let lease_before = c.workers[0].proc.log_text().matches("session lease granted").count();
    // Freeze the worker past its 3 s TTL: etcd expires its lease and registration.
    c.workers[0].proc.signal(Signal::SIGSTOP)?;
    c.wait_workers(0).await?;
    c.workers[0].proc.signal(Signal::SIGCONT)?;
    wait_for(Duration::from_secs(20), "the task that ran under the lost lease to be killed", || async {
        (!alive(child)).then_some(())
    })
    .await?;
    c.wait_workers(1).await?;
    let log = c.workers[0].proc.log_text();
    assert!(log.contains("session lease lost"), "no lease-loss log line");
    assert!(log.matches("session lease granted").count() > lease_before, "no new lease");
    // The killed execution is not reported as done for its tick: its claim went with the lease.
    assert!(log.lines().any(|l| l.contains("execution finished") && l.contains("lost its session lease")));
    // Alone in the cluster, the worker accounts for its own lost session: attempt 1 is recorded
    // lost and, under `on_worker_loss: rerun`, attempt 2 runs.
    let attempts = c
        .wait_executions("job=long", "attempt 1 lost and attempt 2 started", |l| {
            l.iter().any(|r| r["attempt"] == 1 && r["status"] == "lost")
                && l.iter().any(|r| r["attempt"] == 2 && r["trigger"] == "failover")
        })
        .await?;
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_running_tasks_finish_before_exiting() -> anyhow::Result<()> {
    let mut c = Cluster::start("failover-drain", 1).await?;
    let dir = c.work.path().display().to_string();
    let cmd = format!("touch {dir}/started; sleep 2; echo finished > {dir}/finished");
    c.put_job("drain", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": cmd}})).await?;
    c.call(reqwest::Method::POST, "/api/jobs/drain/run", None).await?;
    wait_for(Duration::from_secs(15), "the task to start", || async { c.path("started").exists().then_some(()) })
        .await?;
    c.workers[0].proc.signal(Signal::SIGTERM)?;
    assert_eq!(c.workers[0].proc.wait_exit(Duration::from_secs(30))?, Some(0));
    assert_eq!(std::fs::read_to_string(c.path("finished"))?.trim(), "finished");
    // It revoked its lease on the way out: the registration is gone at once.
    c.wait_workers(0).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_written_while_a_worker_was_disconnected_reaches_it_on_reconnect() -> anyhow::Result<()> {
    use etcron_tests::proxy::Proxy;
    use etcron_tests::{Etcd, Master, Worker, WorkerOpts};
    let logs = etcron_tests::log_dir("failover-kill-reconnect");
    let etcd = Etcd::start(&logs).await?;
    let ns = "/t-kill-reconnect";
    let master = Master::start(&etcd.endpoint, ns, &logs, &[]).await?;
    let proxy = Proxy::start(etcd.endpoint.clone()).await?;
    let mut opts = WorkerOpts::new("flaky");
    opts.session_ttl = "30s".to_owned();
    let worker = Worker::start(&proxy.endpoint, ns, &logs, opts)?;
    let work = tempfile::tempdir()?;
    let dir = work.path().display().to_string();
    let http = reqwest::Client::new();
    let cmd = format!("sleep 300 & echo $! > {dir}/child.pid; wait");
    let spec = json!({"schedule": "@yearly", "task": {"kind": "shell", "command": cmd}});
    let status = http.put(format!("{}/api/jobs/long", master.url)).json(&spec).send().await?.status();
    assert!(status.is_success());
    wait_for(Duration::from_secs(20), "the worker to register", || async {
        worker.proc.log_text().contains("registered").then_some(())
    })
    .await?;
    http.post(format!("{}/api/jobs/long/run", master.url)).send().await?;
    let child =
        wait_for(Duration::from_secs(15), "the task to start", || async { read_pid(&work.path().join("child.pid")) })
            .await?;

    proxy.cut();
    wait_for(Duration::from_secs(20), "the worker to notice the broken watch", || async {
        let log = worker.proc.log_text();
        (log.contains("watch failed; resuming") || log.contains("watch stream closed; resuming")).then_some(())
    })
    .await?;
    let status = http.post(format!("{}/api/jobs/long/kill", master.url)).send().await?.status();
    assert_eq!(status, 202);
    // Still running: the worker cannot have heard of the kill.
    assert!(alive(child));
    proxy.resume();
    wait_for(Duration::from_secs(20), "the kill to reach the reconnected worker", || async {
        (!alive(child)).then_some(())
    })
    .await?;
    assert!(worker.proc.log_text().contains("kill command: stopping execution"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zombie_worker_kills_its_task_and_holds_a_lower_fencing_token_than_the_rerun() -> anyhow::Result<()> {
    let c = Cluster::start("failover-zombie", 2).await?;
    let runs = c.path("runs.log");
    // Attempt 1 runs long (it will be orphaned); the failover rerun, attempt 2, ends quickly.
    let cmd = format!(
        "echo \"start $ETCRON_ATTEMPT $ETCRON_WORKER_ID $ETCRON_FENCING_TOKEN $$\" >> {f}; \
         if [ \"$ETCRON_ATTEMPT\" = 1 ]; then sleep 60; fi; \
         echo \"done $ETCRON_ATTEMPT $ETCRON_WORKER_ID $ETCRON_FENCING_TOKEN\" >> {f}",
        f = runs.display()
    );
    c.put_job(
        "guarded",
        json!({"schedule": "@yearly", "on_worker_loss": "rerun", "task": {"kind": "shell", "command": cmd}}),
    )
    .await?;
    let (_, run) = c.call(reqwest::Method::POST, "/api/jobs/guarded/run", None).await?;
    let first_id = run["execution_id"].as_str().unwrap().to_owned();
    let line = |prefix: &'static str| {
        let runs = runs.clone();
        move || {
            let text = std::fs::read_to_string(&runs).unwrap_or_default();
            let found = text
                .lines()
                .find(|l| l.starts_with(prefix))
                .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>());
            async move { found }
        }
    };
    let first = wait_for(Duration::from_secs(15), "attempt 1 to start", line("start 1 ")).await?;
    let (zombie, token1, pid1) = (first[2].clone(), first[3].parse::<i64>()?, first[4].parse::<i32>()?);
    let z = c.workers.iter().position(|w| w.opts.id == zombie).unwrap();

    // Freeze the worker past its session TTL: the survivor records attempt 1 lost and reruns it.
    c.workers[z].proc.signal(Signal::SIGSTOP)?;
    let second = wait_for(Duration::from_secs(30), "the failover rerun to start", line("start 2 ")).await?;
    let (rerun_worker, token2) = (second[2].clone(), second[3].parse::<i64>()?);
    assert_ne!(rerun_worker, zombie, "the rerun runs on the survivor");
    assert!(token2 > token1, "the rerun's fencing token {token2} is above the zombie's {token1}");
    wait_for(Duration::from_secs(15), "the rerun to finish", line("done 2 ")).await?;

    // The zombie wakes up: it finds its lease gone and kills the task it was running.
    c.workers[z].proc.signal(Signal::SIGCONT)?;
    wait_for(Duration::from_secs(20), "the orphaned task to be killed", || async { (!alive(pid1)).then_some(()) })
        .await?;
    wait_for(Duration::from_secs(20), "the zombie to report what happened to its run", || async {
        c.workers[z]
            .proc
            .log_text()
            .lines()
            .any(|l| l.contains("execution finished") && l.contains("lost its session lease"))
            .then_some(())
    })
    .await?;
    let text = std::fs::read_to_string(&runs)?;
    assert!(!text.lines().any(|l| l.starts_with("done 1 ")), "attempt 1 never completed:\n{text}");
    // Its record says it was lost, never that it succeeded; the rerun's record has the higher token.
    let enc = |id: &str| id.replace('@', "%40").replace('#', "%23");
    let path1 = format!("/api/executions/{}", enc(&first_id));
    let record1 = wait_for(Duration::from_secs(20), "attempt 1's final record", || async {
        let r = c.get(&path1).await.ok()?;
        (r["status"] != "running").then_some(r)
    })
    .await?;
    assert!(matches!(record1["status"].as_str(), Some("lost" | "killed")), "{record1}");
    assert_eq!(record1["fencing_token"], token1);
    let second_id = first_id.replace("#1", "#2");
    let path2 = format!("/api/executions/{}", enc(&second_id));
    let record2 = wait_for(Duration::from_secs(20), "the rerun's final record", || async {
        let r = c.get(&path2).await.ok()?;
        (r["status"] != "running").then_some(r)
    })
    .await?;
    assert_eq!((record2["status"].as_str(), record2["fencing_token"].as_i64()), (Some("succeeded"), Some(token2)));
    assert_eq!(record2["trigger"], "failover");
    // Attempt 1's claim outlived the zombie's session: written when won, rewritten `lost`, never
    // deleted, so no worker could have won attempt 1 again in between.
    let keys = etcron_model::keys::Keys::new(&c.namespace)?;
    let claim_key = keys.claim(&first_id.parse().map_err(|e| anyhow::anyhow!("{e:?}"))?);
    let history = key_history(&mut c.etcd.client().await?, &claim_key).await?;
    assert!(history.len() >= 2 && history.iter().all(|(deleted, _)| !deleted), "{claim_key}: {history:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lone_worker_killed_and_restarted_within_its_ttl_accounts_for_everything() -> anyhow::Result<()> {
    let mut c = Cluster::start("failover-quick-restart", 1).await?;
    let file = c.path("fired.log");
    let jobs = c.every_second_jobs("quick", 3, &file).await?;
    let started = c.path("long.pid");
    let cmd = format!("echo $ETCRON_ATTEMPT >> {}; sleep 300", started.display());
    c.put_job("long", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": cmd}})).await?;
    let (_, run) = c.call(reqwest::Method::POST, "/api/jobs/long/run", None).await?;
    let long_id = run["execution_id"].as_str().unwrap().to_owned();
    wait_for(Duration::from_secs(15), "the long run to start", || async {
        std::fs::read_to_string(&started).ok().filter(|t| t.contains('1')).map(|_| ())
    })
    .await?;
    wait_tick(&file, &jobs, now_ms() + 1000).await?;
    let from = now_ms();
    // SIGKILL and restart at once: the new process finds its predecessor's registration alive.
    c.workers[0].proc.kill9();
    c.workers[0].restart()?;
    wait_tick(&file, &jobs, now_ms() + 2000).await?;
    let to = now_ms();
    let log = c.workers[0].proc.log_text();
    assert!(log.contains("an earlier instance of this worker is still registered"), "the takeover ran");

    // The run it was in the middle of is recorded lost and rerun (attempt 2) by the new process.
    let enc = |id: &str| id.replace('@', "%40").replace('#', "%23");
    let lost = wait_for(Duration::from_secs(30), "the killed run's lost record", || async {
        let r = c.get(&format!("/api/executions/{}", enc(&long_id))).await.ok()?;
        (r["status"] == "lost").then_some(r)
    })
    .await?;
    assert_eq!(lost["attempt"], 1);
    wait_for(Duration::from_secs(30), "the failover rerun to start", || async {
        std::fs::read_to_string(&started).ok().filter(|t| t.lines().any(|l| l == "2")).map(|_| ())
    })
    .await?;

    // Every tick around the kill ran once or is recorded missed; every run has its record.
    let window: Vec<i64> = ((from / 1000 + 1) * 1000..=to - 1000).step_by(1000).collect();
    wait_for(Duration::from_secs(30), "every tick and run to be accounted for", || async {
        let fired = read_fired(&file);
        for job in &jobs {
            let records = c.get(&format!("/api/executions?job={job}&limit=500")).await.ok()?;
            let ids: std::collections::BTreeSet<String> = records["executions"]
                .as_array()?
                .iter()
                .filter_map(|r| Some((r["id"].as_str()?.to_owned(), r["status"].as_str()?.to_owned())))
                .map(|(id, status)| format!("{id} {status}"))
                .collect();
            for t in &window {
                let ran = fired.iter().any(|f| &f.job == job && f.scheduled_ms == *t);
                let missed = ids.contains(&format!("{job}@{t}#1 missed"));
                if !ran && !missed {
                    return None;
                }
            }
            for f in fired.iter().filter(|f| &f.job == job && f.scheduled_ms >= from && f.scheduled_ms <= to) {
                let id = format!("{}@{}#{}", f.job, f.scheduled_ms, f.attempt);
                if !ids.iter().any(|r| r.starts_with(&format!("{id} "))) {
                    return None;
                }
            }
        }
        Some(())
    })
    .await?;
    let report = check_every_second(&read_fired(&file), &jobs, from, to);
    assert!(report.duplicates.is_empty(), "duplicates: {:?}", report.duplicates);
    Ok(())
}

/// A task that finished while its worker could not reach etcd, for longer than the session TTL:
/// its close lands once etcd answers again, the run is recorded as it ended, and the loss
/// handling does not rerun it. The worker is alone, so it handles its own departure, which waits
/// for its pending closes (a survivor would wait a grace period instead).
#[tokio::test(flavor = "multi_thread")]
async fn a_task_that_finished_while_etcd_was_out_of_reach_is_closed_late_and_not_rerun() -> anyhow::Result<()> {
    use etcron_tests::proxy::Proxy;
    use etcron_tests::{Worker, WorkerOpts};
    let mut c = Cluster::start("failover-close-late", 0).await?;
    let proxy = Proxy::start(c.etcd.endpoint.clone()).await?;
    let mut cut_off = WorkerOpts::new("cut-off");
    cut_off.mongodb = Some((c.mongo.uri.clone(), c.db.clone()));
    c.workers.push(Worker::start(&proxy.endpoint, &c.namespace, &c.logs, cut_off)?);
    c.wait_workers(1).await?;
    let runs = c.path("runs.log");
    let cmd = format!(
        "echo \"start $ETCRON_ATTEMPT\" >> {f}; while [ ! -e {f}.go ]; do sleep 0.1; done; echo \"done $ETCRON_ATTEMPT\" >> {f}",
        f = runs.display()
    );
    c.put_job(
        "finishes-cut-off",
        json!({"schedule": "@yearly", "on_worker_loss": "rerun", "task": {"kind": "shell", "command": cmd}}),
    )
    .await?;
    let (_, run) = c.call(reqwest::Method::POST, "/api/jobs/finishes-cut-off/run", None).await?;
    let id = run["execution_id"].as_str().unwrap().to_owned();
    let lines = || std::fs::read_to_string(&runs).unwrap_or_default();
    wait_for(Duration::from_secs(20), "the task to start", || async { lines().contains("start 1").then_some(()) })
        .await?;
    // etcd out of reach (connections kept, nothing forwarded); the task finishes meanwhile, so
    // its close cannot land before the session expires.
    proxy.pause();
    std::fs::write(format!("{}.go", runs.display()), "")?;
    wait_for(Duration::from_secs(20), "the task to finish", || async { lines().contains("done 1").then_some(()) })
        .await?;
    c.wait_workers(0).await?;
    proxy.resume();
    let path = format!("/api/executions/{}", id.replace('@', "%40").replace('#', "%23"));
    let record = wait_for(Duration::from_secs(30), "the run's final record", || async {
        let r = c.get(&path).await.ok()?;
        (r["status"] != "running").then_some(r)
    })
    .await?;
    assert_eq!(record["status"], "succeeded", "{record}");
    // The loss handling ran for the expired session and found the claim closed by its worker.
    wait_for(Duration::from_secs(60), "the loss handling to find the run closed", || async {
        c.workers.iter().any(|w| w.proc.log_text().contains("closed already (by that worker")).then_some(())
    })
    .await?;
    let rerun = format!("/api/executions/{}", id.replace("#1", "#2").replace('@', "%40").replace('#', "%23"));
    let (status, _) = c.call(reqwest::Method::GET, &rerun, None).await?;
    assert_eq!(status, 404, "no failover rerun of a run that finished");
    assert_eq!(lines().matches("start").count(), 1, "{}", lines());
    Ok(())
}

/// The value and create revision of each claim of `job` in etcd, by execution id.
async fn claims_of(c: &Cluster, job: &str) -> anyhow::Result<Vec<(String, serde_json::Value)>> {
    let keys = etcron_model::keys::Keys::new(&c.namespace)?;
    let opts = etcd_client::GetOptions::new().with_prefix();
    let resp = c.etcd.client().await?.get(keys.job_claims_prefix(job), Some(opts)).await?;
    Ok(resp
        .kvs()
        .iter()
        .filter_map(|kv| match keys.parse(kv.key()) {
            Some(etcron_model::keys::Key::Claim(id)) => {
                Some((id.to_string(), serde_json::from_slice(kv.value()).unwrap_or_default()))
            }
            _ => None,
        })
        .collect())
}

/// `GET /api/executions/{id}` once it exists.
async fn record_of(c: &Cluster, id: &str) -> Option<serde_json::Value> {
    c.get(&format!("/api/executions/{}", etcron_tests::urlencode(id))).await.ok()
}

/// A worker killed right after its claim transaction closed a tick `skipped`, before the record
/// went to its journal: the record was made durable before the claim closed, so it reaches
/// MongoDB once the worker is back (same data dir).
#[tokio::test(flavor = "multi_thread")]
async fn a_not_run_record_survives_its_worker_dying_right_after_the_close() -> anyhow::Result<()> {
    use etcron_tests::WorkerOpts;
    let mut c = Cluster::start("failover-not-run-crash", 0).await?;
    let mut opts = WorkerOpts::new("w1");
    opts.env.push(("ETCRON_FAILPOINT".to_owned(), "not_run_after_close".to_owned()));
    c.add_worker(opts)?;
    c.wait_workers(1).await?;
    // Declared disabled and firing every second: each tick is recorded `skipped` by the one worker.
    let spec = json!({"schedule": "* * * * * *", "enabled": false, "task": {"kind": "shell", "command": "true"}});
    c.put_job("off", spec).await?;
    c.workers[0].proc.wait_exit(Duration::from_secs(20))?;
    assert!(c.workers[0].proc.log_text().contains("failpoint reached"), "the worker died at the failpoint");
    let closed = claims_of(&c, "off").await?;
    assert!(!closed.is_empty() && closed.iter().all(|(_, v)| v["status"] == "skipped"), "{closed:?}");
    c.workers[0].opts.env.clear();
    c.workers[0].restart()?;
    for (id, _) in &closed {
        let record = wait_for(Duration::from_secs(30), &format!("the record of {id}"), || record_of(&c, id)).await;
        if record.is_err() {
            c.dump_logs();
        }
        let record = record?;
        assert_eq!(record["status"], "skipped", "{record}");
        assert_eq!(record["reason"], "job disabled (its spec says enabled: false)", "{record}");
    }
    Ok(())
}

/// A worker killed right after its claim transaction found the job's lock held (`concurrency:
/// forbid`) and closed the tick `skipped`, before the record went to its journal: the record
/// was made durable before the claim transaction, so it reaches MongoDB once the worker is back.
#[tokio::test(flavor = "multi_thread")]
async fn a_skipped_record_survives_its_worker_dying_right_after_the_blocked_claim() -> anyhow::Result<()> {
    use etcron_tests::WorkerOpts;
    let mut c = Cluster::start("failover-skipped-crash", 0).await?;
    let mut opts = WorkerOpts::new("w1");
    opts.env.push(("ETCRON_FAILPOINT".to_owned(), "skipped_after_claim".to_owned()));
    c.add_worker(opts)?;
    c.wait_workers(1).await?;
    // Every second, each run 300 s: the second tick finds the first one holding the lock.
    let spec =
        json!({"schedule": "* * * * * *", "concurrency": "forbid", "task": {"kind": "shell", "command": "sleep 300"}});
    c.put_job("busy", spec).await?;
    c.workers[0].proc.wait_exit(Duration::from_secs(20))?;
    assert!(c.workers[0].proc.log_text().contains("failpoint reached"), "the worker died at the failpoint");
    let skipped: Vec<String> =
        claims_of(&c, "busy").await?.into_iter().filter(|(_, v)| v["status"] == "skipped").map(|(id, _)| id).collect();
    assert_eq!(skipped.len(), 1, "one tick was closed skipped by the blocked claim");
    c.workers[0].opts.env.clear();
    c.workers[0].restart()?;
    let record = wait_for(Duration::from_secs(30), "the skipped record", || record_of(&c, &skipped[0])).await;
    if record.is_err() {
        c.dump_logs();
    }
    let record = record?;
    assert_eq!(record["status"], "skipped", "{record}");
    assert_eq!(record["reason"], "concurrency forbid: another execution was still running", "{record}");
    Ok(())
}

/// The survivor handling a departure dies after closing the first of the departed worker's two
/// executions: the next-ranked survivor, a resume delay later, closes the other. Every survivor
/// carries the failpoint (which one ranks first is not known before the departure), so the
/// second handler dies too after its one close; the third finds nothing left. Both executions
/// end `lost` with their records (from the handlers' data dirs once they are back), and both
/// failover reruns run.
#[tokio::test(flavor = "multi_thread")]
async fn a_survivor_dying_midway_through_a_departure_leaves_the_rest_to_the_next() -> anyhow::Result<()> {
    let mut c = Cluster::start("failover-resume-loss", 0).await?;
    let (runs, first) = two_long_runs_on_a_doomed_worker(&mut c).await?;
    kill_doomed_beside(&mut c, &["s1", "s2", "s3"], "lost_after_first_close").await?;
    wait_both_claims_lost(&c, &first, Duration::from_secs(60)).await?;
    // The two handlers that closed one each died at the failpoint; bring them back.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let dead: Vec<usize> = loop {
        let dead: Vec<usize> = (1..c.workers.len()).filter(|&i| !c.workers[i].proc.running()).collect();
        if dead.len() == 2 || std::time::Instant::now() > deadline {
            break dead;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(dead.len(), 2, "two handlers died at the failpoint, the third found nothing left");
    let resumed =
        c.workers.iter().filter(|w| w.proc.log_text().contains("resuming the handling of a departure")).count();
    if resumed != 1 {
        c.dump_logs();
    }
    assert_eq!(resumed, 1, "the second handler logged that it found work left");
    for i in dead {
        c.workers[i].opts.env.clear();
        c.workers[i].restart()?;
    }
    both_lost_and_rerun_once(&c, &first, &runs).await
}

/// The three survivors ranked first for a departure all die after reading what the departed
/// worker held, before closing anything: the survivor ranked fourth owed the departure too, moves
/// up as their sessions end, and finishes it — both executions end `lost` with their records and
/// their failover reruns run. Every survivor carries the failpoint (which three rank first is
/// not known before the departure); one that moved up in rank does not reach it.
#[tokio::test(flavor = "multi_thread")]
async fn a_departure_whose_first_three_handlers_die_is_finished_by_the_next() -> anyhow::Result<()> {
    let mut c = Cluster::start("failover-owed-departure", 0).await?;
    let (runs, first) = two_long_runs_on_a_doomed_worker(&mut c).await?;
    kill_doomed_beside(&mut c, &["s1", "s2", "s3", "s4"], "lost_after_reading_held").await?;
    wait_both_claims_lost(&c, &first, Duration::from_secs(90)).await?;
    let died = (1..c.workers.len()).filter(|&i| c.workers[i].proc.log_text().contains("failpoint reached")).count();
    assert_eq!(died, 3, "the three first-ranked handlers died at the failpoint");
    let survivor = (1..c.workers.len()).find(|&i| c.workers[i].proc.running()).expect("one survivor is left");
    assert!(
        c.workers[survivor].proc.log_text().contains("died before it was seen handled: handling it"),
        "the fourth-ranked survivor moved up and handled the departure"
    );
    both_lost_and_rerun_once(&c, &first, &runs).await
}

/// Worker `doomed` (label `pool=p`) running the first attempts of `long-a` and `long-b`, each
/// 300 s (a rerun ends at once); every start appends `start JOB ATTEMPT WORKER` to the file
/// returned, with the two execution ids.
async fn two_long_runs_on_a_doomed_worker(c: &mut Cluster) -> anyhow::Result<(std::path::PathBuf, Vec<String>)> {
    c.add_worker(pooled("doomed"))?;
    c.wait_workers(1).await?;
    let runs = c.path("runs.log");
    let cmd = format!(
        "echo \"start $ETCRON_JOB $ETCRON_ATTEMPT $ETCRON_WORKER_ID\" >> {f}; if [ \"$ETCRON_ATTEMPT\" = 1 ]; then sleep 300; fi",
        f = runs.display()
    );
    let mut first = Vec::new();
    for job in ["long-a", "long-b"] {
        let spec = json!({"schedule": "@yearly", "selector": {"pool": "p"}, "task": {"kind": "shell", "command": cmd}});
        c.put_job(job, spec).await?;
        let (_, run) = c.call(reqwest::Method::POST, &format!("/api/jobs/{job}/run"), None).await?;
        first.push(run["execution_id"].as_str().unwrap().to_owned());
    }
    let started = || {
        let text = std::fs::read_to_string(&runs).unwrap_or_default();
        async move { (text.lines().filter(|l| l.ends_with(" 1 doomed")).count() == 2).then_some(()) }
    };
    wait_for(Duration::from_secs(20), "both runs to start on the doomed worker", started).await?;
    Ok((runs, first))
}

/// A worker with label `pool=p`.
fn pooled(id: &str) -> etcron_tests::WorkerOpts {
    let mut opts = etcron_tests::WorkerOpts::new(id);
    opts.labels.insert("pool".to_owned(), "p".to_owned());
    opts
}

/// Both `first` executions end `lost` (recorded as the departed `doomed`'s), and each failover
/// rerun (attempt 2) succeeds once.
async fn both_lost_and_rerun_once(c: &Cluster, first: &[String], runs: &std::path::Path) -> anyhow::Result<()> {
    for id in first {
        let lost = wait_for(Duration::from_secs(30), &format!("the lost record of {id}"), || async {
            record_of(c, id).await.filter(|r| r["status"] == "lost")
        })
        .await?;
        assert_eq!(lost["worker_id"], "doomed", "{lost}");
        assert!(lost["reason"].as_str().unwrap_or("").contains("worker doomed lost its session"), "{lost}");
        let rerun = id.replace("#1", "#2");
        let done = wait_for(Duration::from_secs(30), &format!("the failover rerun {rerun}"), || async {
            record_of(c, &rerun).await.filter(|r| r["status"] == "succeeded")
        })
        .await?;
        assert_eq!(done["trigger"], "failover", "{done}");
    }
    let text = std::fs::read_to_string(runs)?;
    assert_eq!(text.lines().filter(|l| l.contains(" 2 s")).count(), 2, "one rerun each:\n{text}");
    Ok(())
}

/// Adds survivors `ids` (label `pool=p`), each armed with `failpoint`, then SIGKILLs `doomed`.
async fn kill_doomed_beside(c: &mut Cluster, ids: &[&str], failpoint: &str) -> anyhow::Result<()> {
    for id in ids {
        let mut opts = pooled(id);
        opts.env.push(("ETCRON_FAILPOINT".to_owned(), failpoint.to_owned()));
        c.add_worker(opts)?;
    }
    c.wait_workers(ids.len() + 1).await?;
    c.workers[0].proc.kill9();
    Ok(())
}

/// Waits until both `first` claims are closed `lost` (the logs are dumped if they are not).
async fn wait_both_claims_lost(c: &Cluster, first: &[String], within: Duration) -> anyhow::Result<()> {
    let both_lost = wait_for(within, "both claims of the dead worker closed lost", || async {
        let mut lost = 0;
        for job in ["long-a", "long-b"] {
            let claims = claims_of(c, job).await.ok()?;
            lost += claims.iter().filter(|(id, v)| first.contains(id) && v["status"] == "lost").count();
        }
        (lost == 2).then_some(())
    })
    .await;
    if both_lost.is_err() {
        c.dump_logs();
    }
    both_lost
}
