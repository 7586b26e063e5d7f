//! Several etcd clusters: one worker process and one master, each configured with two
//! namespaces (`[[namespaces]]`) on two single-member etcd clusters. A job in each namespace,
//! put through the master (the `X-Etcron-Namespace` header), runs; its keys are in its own
//! cluster only, its records in its own database; the worker is registered in both. Then
//! cluster B is killed: A's job keeps every tick, B's node says so in the log and `/readyz`,
//! the process stays up, and B's running task is ended by its keeper at B's session deadline
//! although A's session lives on (each namespace has its own slot in the keepers' page). B
//! back, its job runs again, and one SIGTERM drains both namespaces.

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context as _, Result};
use etcron_tests::{
    alive, check_every_second, db_name, free_port, log_dir, now_ms, read_fired, read_pid, record_command, wait_for,
    Etcd, Master, Mongo, Worker, WorkerOpts,
};
use nix::sys::signal::Signal;
use reqwest::Method;
use serde_json::{json, Value};

const NS_A: &str = "/t-ns-a";
const NS_B: &str = "/t-ns-b";

/// The master's API with or without the namespace header.
struct Api {
    http: reqwest::Client,
    url: String,
}

impl Api {
    async fn call(&self, ns: Option<&str>, method: Method, path: &str, body: Option<Value>) -> Result<(u16, Value)> {
        let mut req = self.http.request(method, format!("{}{path}", self.url));
        if let Some(ns) = ns {
            req = req.header("X-Etcron-Namespace", ns);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        Ok((status, resp.json().await.unwrap_or(Value::Null)))
    }

    async fn get(&self, ns: Option<&str>, path: &str) -> Result<Value> {
        let (status, body) = self.call(ns, Method::GET, path, None).await?;
        ensure!(status == 200, "GET {path} ({ns:?}): {status} {body}");
        Ok(body)
    }

    async fn put_job(&self, ns: Option<&str>, name: &str, spec: Value) -> Result<()> {
        let (status, body) = self.call(ns, Method::PUT, &format!("/api/jobs/{name}"), Some(spec)).await?;
        ensure!(status == 201 || status == 200, "PUT {name} ({ns:?}): {status} {body}");
        Ok(())
    }

    /// The ids of the workers registered in `ns`.
    async fn workers(&self, ns: Option<&str>) -> Vec<String> {
        let Ok(v) = self.get(ns, "/api/workers").await else { return Vec::new() };
        v["workers"].as_array().into_iter().flatten().filter_map(|w| w["id"].as_str().map(str::to_owned)).collect()
    }

    /// The statuses of `job`'s records found through the master in `ns`.
    async fn records(&self, ns: Option<&str>, job: &str) -> Vec<String> {
        let Ok(v) = self.get(ns, &format!("/api/executions?job={job}")).await else { return Vec::new() };
        let list = v["executions"].as_array().into_iter().flatten();
        list.filter_map(|r| r["status"].as_str().map(str::to_owned)).collect()
    }
}

/// The `[[namespaces]]` section both processes get: B on its own cluster and database.
fn sections(dir: &Path, etcd_b: &str, db_b: &str, capacity: Option<u32>) -> Result<std::path::PathBuf> {
    let path = dir.join(if capacity.is_some() { "worker.toml" } else { "master.toml" });
    let mut text =
        format!("[[namespaces]]\nnamespace = {NS_B:?}\netcd_endpoints = [{etcd_b:?}]\nmongodb_db = {db_b:?}\n");
    if let Some(c) = capacity {
        text.push_str(&format!("capacity = {c}\n"));
    }
    std::fs::write(&path, text)?;
    Ok(path)
}

/// Every key under `prefix` in the etcd at `etcd`.
async fn keys(etcd: &Etcd, prefix: &str) -> Result<Vec<String>> {
    let mut c = etcd.client().await?;
    let resp = c.get(prefix, Some(etcd_client::GetOptions::new().with_prefix().with_keys_only())).await?;
    Ok(resp.kvs().iter().map(|kv| String::from_utf8_lossy(kv.key()).into_owned()).collect())
}

#[tokio::test]
async fn one_worker_and_one_master_serve_two_namespaces_on_two_etcd_clusters() -> Result<()> {
    let logs = log_dir("namespaces");
    let (logs_a, logs_b) = (logs.join("etcd-a"), logs.join("etcd-b"));
    std::fs::create_dir_all(&logs_a)?;
    std::fs::create_dir_all(&logs_b)?;
    let etcd_a = Etcd::start(&logs_a).await?;
    let mut etcd_b = Etcd::start(&logs_b).await?;
    let mongo = Mongo::start(&logs).await?;
    let (db_a, db_b) = (db_name("namespaces_a"), db_name("namespaces_b"));
    let work = tempfile::tempdir()?;
    let master_toml = sections(work.path(), &etcd_b.endpoint, &db_b, None)?;
    let master_args = ["--config", master_toml.to_str().unwrap(), "--mongodb-uri", &mongo.uri, "--mongodb-db", &db_a];
    let master = Master::start(&etcd_a.endpoint, NS_A, &logs, &master_args).await?;
    let api = Api { http: reqwest::Client::new(), url: master.url.clone() };
    let worker_toml = sections(work.path(), &etcd_b.endpoint, &db_b, Some(2))?;
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut opts = WorkerOpts::new("w1");
    opts.mongodb = Some((mongo.uri.clone(), db_a.clone()));
    opts.extra = ["--config", worker_toml.to_str().unwrap(), "--capacity", "4", "--metrics-listen", &metrics]
        .map(str::to_owned)
        .to_vec();
    let mut worker = Worker::start(&etcd_a.endpoint, NS_A, &logs, opts)?;

    // The namespaces served, and the worker registered in both (the default needs no header).
    let listed = api.get(None, "/api/namespaces").await?;
    let expected = json!([{"namespace": NS_A, "default": true}, {"namespace": NS_B, "default": false}]);
    assert_eq!(listed["namespaces"], expected);
    wait_for(Duration::from_secs(30), "w1 registered in both namespaces", || async {
        (api.workers(None).await == ["w1"] && api.workers(Some(NS_B)).await == ["w1"]).then_some(())
    })
    .await?;
    let (status, body) = api.call(Some("/t-ns-c"), Method::GET, "/api/jobs", None).await?;
    assert_eq!((status, body["error"]["field"].as_str()), (404, Some("X-Etcron-Namespace")), "{body}");

    // A job in each namespace, through the one master.
    let (fired_a, fired_b) = (work.path().join("fired-a"), work.path().join("fired-b"));
    let every_second =
        |file: &Path| json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": record_command(file)}});
    api.put_job(Some(NS_A), "tick-a", every_second(&fired_a)).await?;
    api.put_job(Some(NS_B), "tick-b", every_second(&fired_b)).await?;
    let pid_file = work.path().join("long-b.pid");
    let long = json!({"schedule": "@every 1h", "on_worker_loss": "mark_lost",
        "task": {"kind": "shell", "command": format!("echo $$ > {}; exec sleep 600", pid_file.display())}});
    api.put_job(Some(NS_B), "long-b", long).await?;
    wait_for(Duration::from_secs(30), "both jobs running", || async {
        (!read_fired(&fired_a).is_empty() && !read_fired(&fired_b).is_empty()).then_some(())
    })
    .await?;
    // Each job's records in its own namespace's database, found through the master.
    wait_for(Duration::from_secs(30), "each job's records in its own database", || async {
        let (a, b) = (api.records(None, "tick-a").await, api.records(Some(NS_B), "tick-b").await);
        (a.iter().any(|s| s == "succeeded") && b.iter().any(|s| s == "succeeded")).then_some(())
    })
    .await?;
    assert!(api.records(Some(NS_B), "tick-a").await.is_empty(), "A's records are not in B's database");
    assert!(api.records(None, "tick-b").await.is_empty(), "B's records are not in A's database");
    let (status, _) = api.call(None, Method::GET, "/api/jobs/tick-b", None).await?;
    assert_eq!(status, 404, "B's job is not A's");
    // Each job's keys in its own cluster only.
    assert!(keys(&etcd_a, &format!("{NS_A}/jobs/")).await?.contains(&format!("{NS_A}/jobs/tick-a")));
    assert!(keys(&etcd_b, &format!("{NS_B}/jobs/")).await?.contains(&format!("{NS_B}/jobs/tick-b")));
    assert!(keys(&etcd_a, NS_B).await?.is_empty(), "no key of B in A's cluster");
    assert!(keys(&etcd_b, NS_A).await?.is_empty(), "no key of A in B's cluster");
    // etcronctl sends the header: `-n`, or ETCRONCTL_NAMESPACE.
    let ctl = |args: &[&str], env: Option<&str>| {
        let mut cmd = std::process::Command::new(etcron_tests::bin("etcronctl").unwrap());
        cmd.args(["--server", &master.url, "-o", "json"]).args(args).env_remove("ETCRONCTL_NAMESPACE");
        if let Some(ns) = env {
            cmd.env("ETCRONCTL_NAMESPACE", ns);
        }
        let out = cmd.output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (code, out) = ctl(&["-n", NS_B, "jobs", "ls"], None);
    assert!(code == Some(0) && out.contains("tick-b") && !out.contains("tick-a"), "{code:?} {out}");
    let (code, out) = ctl(&["jobs", "ls"], Some(NS_B));
    assert!(code == Some(0) && out.contains("long-b") && !out.contains("tick-a"), "{code:?} {out}");
    let (code, out) = ctl(&["jobs", "ls"], None);
    assert!(code == Some(0) && out.contains("tick-a") && !out.contains("tick-b"), "{code:?} {out}");
    assert_eq!(ctl(&["-n", "/t-ns-c", "jobs", "ls"], None).0, Some(3), "an unknown namespace: not found");
    let scraped = etcron_tests::scrape(&format!("http://{metrics}/metrics"), None).await?;
    assert_eq!(scraped.value("etcron_worker_capacity", &[]), 6.0, "the capacity summed: 4 in A, 2 in B");

    // B's long task runs; then B's cluster dies.
    let (status, body) = api.call(Some(NS_B), Method::POST, "/api/jobs/long-b/run", None).await?;
    ensure!(status == 202, "run long-b: {status} {body}");
    let pid = wait_for(Duration::from_secs(30), "long-b's task started", || async { read_pid(&pid_file) }).await?;
    etcd_b.proc.kill9();
    let cut_ms = now_ms();
    // Its keeper ends it at B's session deadline (TTL 3 s), though A's session is renewed all along.
    wait_for(Duration::from_secs(15), "long-b's task ended by its keeper", || async { (!alive(pid)).then_some(()) })
        .await?;
    let ended_ms = now_ms();
    assert!(ended_ms - cut_ms >= 1_500, "not before B's session could lapse ({} ms)", ended_ms - cut_ms);
    wait_for(Duration::from_secs(30), "B's node logging its lost session", || async {
        let log = worker.proc.log_text();
        log.lines().any(|l| l.contains("session lease lost") && l.contains(NS_B)).then_some(())
    })
    .await?;
    let ready = reqwest::get(format!("http://{metrics}/readyz")).await?;
    let (status, text) = (ready.status().as_u16(), ready.text().await?);
    assert!(status == 503 && text.contains(NS_B) && !text.contains(NS_A), "/readyz: {status} {text}");
    // A keeps every tick while B is down.
    let window_end = now_ms() + 6_000;
    wait_for(Duration::from_secs(20), "A's ticks past the window", || async {
        read_fired(&fired_a).iter().any(|f| f.scheduled_ms >= window_end).then_some(())
    })
    .await?;
    let report = check_every_second(&read_fired(&fired_a), &["tick-a".to_owned()], cut_ms, window_end);
    assert!(report.missing.is_empty() && report.duplicates.is_empty(), "A while B was down: {report:?}");
    assert!(worker.proc.running(), "the worker process stays up");
    let b_before = read_fired(&fired_b).len();

    // B back: its job runs again; one SIGTERM drains both namespaces.
    etcd_b.restart().await?;
    wait_for(Duration::from_secs(40), "B's job running again", || async {
        (read_fired(&fired_b).len() > b_before).then_some(())
    })
    .await?;
    worker.proc.signal(Signal::SIGTERM)?;
    let code = worker.proc.wait_exit(Duration::from_secs(45))?.context("the worker did not exit after SIGTERM")?;
    assert_eq!(code, 0, "a clean exit");
    let log = worker.proc.log_text();
    for ns in [NS_A, NS_B] {
        assert!(log.lines().any(|l| l.contains("etcron-worker stopped") && l.contains(ns)), "{ns} drained");
    }
    drop(master);
    Ok(())
}
