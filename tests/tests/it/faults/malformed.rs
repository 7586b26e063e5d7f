//! Malformed values written straight into etcd (as an operator with `etcdctl` might) never crash
//! a worker or the master: each is logged at error level naming its key and ignored, a good job
//! keeps firing every second meanwhile, and the API shows invalid jobs as `invalid`, never a 500.

use std::process::Command;
use std::time::Duration;

use etcron_tests::{check_every_second, now_ms, read_fired, wait_for, wait_tick, Cluster, WorkerOpts};
use serde_json::{json, Value};

/// Jobs whose catch-up state is overwritten with something that is not a state. Several, so
/// that the worker started late ranks first (and so scans) for at least one of them.
const STATE_JOBS: [&str; 6] = ["state-a", "state-b", "state-c", "state-d", "state-e", "state-f"];

#[tokio::test(flavor = "multi_thread")]
async fn malformed_values_in_etcd_are_logged_and_ignored() -> anyhow::Result<()> {
    let mut cluster = Cluster::start("malformed", 2).await?;
    let result = run(&mut cluster).await;
    if result.is_err() {
        cluster.dump_logs();
    }
    result
}

async fn run(cluster: &mut Cluster) -> anyhow::Result<()> {
    let ns = cluster.namespace.clone();
    let fired_file = cluster.path("fired.log");
    let jobs = cluster.every_second_jobs("good", 1, &fired_file).await?;
    let from_ms = now_ms();
    wait_tick(&fired_file, &jobs, from_ms + 1_000).await?;
    let pids: Vec<Option<u32>> = cluster.workers.iter().map(|w| w.proc.pid()).collect();
    for job in STATE_JOBS {
        cluster.put_job(job, json!({"schedule": "@every 1h", "task": {"kind": "shell", "command": "true"}})).await?;
    }

    let valid = json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": "true"}});
    let mut unknown_fields = valid.clone();
    unknown_fields["bogus"] = json!(1);
    unknown_fields["task"]["also"] = json!("x");
    let huge = format!(r#"{{"schedule":"* * * * * *","description":"{}"}}"#, "x".repeat(1024 * 1024));
    let trigger_wrong_shape = json!({"requested_at": 5, "requested_at_ms": "soon", "kind": "sometimes"});
    let worker_wrong_shape = json!({"id": "w9", "pid": -1});
    let values: Vec<(String, Vec<u8>)> = vec![
        (format!("{ns}/jobs/unknown-fields"), unknown_fields.to_string().into_bytes()),
        (format!("{ns}/jobs/wrong-shape"), br#"[{"schedule": 5}, "task"]"#.to_vec()),
        (format!("{ns}/jobs/wrong-types"), br#"{"schedule": 5, "task": "echo"}"#.to_vec()),
        (format!("{ns}/jobs/huge"), huge.into_bytes()),
        (format!("{ns}/jobs/not-utf8"), vec![0xff, 0xfe, b'{', 0]),
        (format!("{ns}/jobs/Bad Name"), valid.to_string().into_bytes()),
        (format!("{ns}/jobs/nested/job"), valid.to_string().into_bytes()),
        // The good job's own kill key: a value that is no kill command must not kill it.
        (format!("{ns}/kill/good-0/all"), b"kill it".to_vec()),
        (format!("{ns}/kill/good-0/not-an-execution"), b"{}".to_vec()),
        (format!("{ns}/kill/Bad/all"), b"{}".to_vec()),
        (format!("{ns}/trigger/good-0/garbage"), b"\x00\x01run".to_vec()),
        (format!("{ns}/trigger/good-0/wrong-shape"), trigger_wrong_shape.to_string().into_bytes()),
        (format!("{ns}/trigger/Bad/r1"), b"{}".to_vec()),
        (format!("{ns}/workers/bogus"), b"not a worker".to_vec()),
        (format!("{ns}/workers/wrong-shape"), worker_wrong_shape.to_string().into_bytes()),
        (format!("{ns}/workers/-bad"), b"{}".to_vec()),
        (format!("{ns}/running/good-0/good-0@5#1"), b"][".to_vec()),
        (format!("{ns}/running/oops"), b"{}".to_vec()),
        (format!("{ns}/state/{}", STATE_JOBS[0]), b"garbage".to_vec()),
        (format!("{ns}/state/{}", STATE_JOBS[1]), br#"{"last_tick_ms":1}"#.to_vec()),
        (format!("{ns}/state/{}", STATE_JOBS[2]), br#"{"last_tick_ms": "yesterday"}"#.to_vec()),
        (format!("{ns}/state/{}", STATE_JOBS[3]), b"~".to_vec()),
        (format!("{ns}/state/{}", STATE_JOBS[4]), b"".to_vec()),
        (format!("{ns}/state/{}", STATE_JOBS[5]), br#"{"last_tick_ms":99999999999999}"#.to_vec()),
        (format!("{ns}/state/Bad"), b"{}".to_vec()),
        // Pauses: a key naming no job is ignored; a value that is no pause still pauses (of a
        // job that does not exist here, so the good job keeps firing).
        (format!("{ns}/paused/Bad Name"), b"{}".to_vec()),
        (format!("{ns}/paused/nested/job"), b"{}".to_vec()),
        (format!("{ns}/paused/no-such-job"), vec![0xff, b'{']),
    ];
    // Garbage JSON the way an operator would write it.
    let garbage_key = format!("{ns}/jobs/garbage");
    let out = Command::new("etcdctl")
        .args(["--endpoints", &cluster.etcd.endpoint, "put", &garbage_key, "{\"schedule\": \"* * * *"])
        .output()?;
    assert!(out.status.success(), "etcdctl put: {}", String::from_utf8_lossy(&out.stderr));
    let mut client = cluster.etcd.client().await?;
    for (key, value) in &values {
        client.put(key.as_str(), value.clone(), None).await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A worker that starts now reads them all in its first listing, and scans the catch-up
    // states of the jobs it has not seen.
    cluster.add_worker(WorkerOpts::new("w3"))?;
    cluster.wait_workers(3).await?;

    // Every worker logs each bad value at error level, naming its key.
    let watched: Vec<&String> = std::iter::once(&garbage_key)
        .chain(values.iter().map(|(k, _)| k))
        .filter(|k| {
            ["/jobs/", "/kill/", "/trigger/", "/workers/", "/paused/"].iter().any(|p| k.contains(&format!("{ns}{p}")))
        })
        .collect();
    for worker in &cluster.workers {
        let name = worker.opts.id.clone();
        wait_for(Duration::from_secs(20), &format!("{name} to log every malformed value"), || async {
            let log = worker.proc.log_text();
            let missing: Vec<&&String> = watched
                .iter()
                .filter(|k| !log.lines().any(|l| l.contains("ERROR") && l.contains(k.as_str())))
                .collect();
            missing.is_empty().then_some(())
        })
        .await
        .map_err(|e| {
            let log = worker.proc.log_text();
            let missing: Vec<_> = watched
                .iter()
                .filter(|k| !log.lines().any(|l| l.contains("ERROR") && l.contains(k.as_str())))
                .collect();
            anyhow::anyhow!("{e}; {name} did not log {missing:?}")
        })?;
    }
    // The malformed catch-up states are found by the worker that scans them and reset, so
    // they order bytewise again.
    let w3 = &cluster.workers[2];
    wait_for(Duration::from_secs(30), "a malformed job state to be logged and reset", || async {
        let log = w3.proc.log_text();
        let reset: Vec<&str> = STATE_JOBS
            .iter()
            .copied()
            .filter(|j| log.lines().any(|l| l.contains("ERROR") && l.contains(&format!("{ns}/state/{j}"))))
            .collect();
        (!reset.is_empty()).then_some(reset)
    })
    .await?;
    let reset_state = wait_for(Duration::from_secs(10), "the state to be rewritten", || {
        let mut client = client.clone();
        let ns = ns.clone();
        async move {
            for job in STATE_JOBS {
                let resp = client.get(format!("{ns}/state/{job}"), None).await.ok()?;
                let value = resp.kvs().first()?.value().to_vec();
                if value.starts_with(br#"{"last_tick_ms":1"#) && value.len() == r#"{"last_tick_ms":}"#.len() + 13 {
                    return Some(job);
                }
            }
            None
        }
    })
    .await?;
    eprintln!("state of {reset_state} was reset");

    // A few more ticks with everything in place.
    let to_ms = now_ms() + 2_000;
    wait_tick(&fired_file, &jobs, to_ms).await?;

    // Nobody crashed: the first workers are the same processes, the new one runs too.
    for (worker, pid) in cluster.workers.iter_mut().zip(&pids) {
        assert!(worker.proc.running(), "worker {} exited", worker.opts.id);
        assert_eq!(worker.proc.pid(), *pid, "worker {} was restarted", worker.opts.id);
    }
    assert!(cluster.workers[2].proc.running(), "the late worker exited");
    for worker in &cluster.workers {
        assert!(!worker.proc.log_text().contains("panicked"), "{} panicked", worker.opts.id);
    }

    // The good job missed no tick and ran none twice, and the garbage kill killed nothing.
    let report = check_every_second(&read_fired(&fired_file), &jobs, from_ms, to_ms);
    assert!(report.missing.is_empty(), "missed ticks: {:?}", report.missing);
    assert!(report.duplicates.is_empty(), "ticks run twice: {:?}", report.duplicates);
    let killed = cluster.get("/api/executions?job=good-0&status=killed").await?;
    assert_eq!(killed["executions"].as_array().map(Vec::len), Some(0), "{killed}");

    // The API answers: invalid jobs are listed as such, the rest of the routes work.
    let list = cluster.get("/api/jobs").await?;
    let by_name = |name: &str| list["jobs"].as_array().and_then(|a| a.iter().find(|j| j["name"] == name)).cloned();
    for name in ["garbage", "unknown-fields", "wrong-shape", "wrong-types", "huge", "not-utf8"] {
        let job = by_name(name).unwrap_or_else(|| panic!("{name} not listed: {list}"));
        let why = job["invalid"].as_str().unwrap_or_default();
        assert!(!why.is_empty(), "{name} not marked invalid: {job}");
    }
    assert!(by_name("huge").unwrap()["spec"].is_null(), "a value over the limit is echoed");
    assert!(by_name("good-0").unwrap().get("invalid").is_none());
    for name in ["garbage", "unknown-fields", "huge"] {
        let (status, body) = cluster.call(reqwest::Method::GET, &format!("/api/jobs/{name}"), None).await?;
        assert_eq!(status, 200, "{name}: {body}");
        assert!(body["invalid"].is_string(), "{body}");
    }
    for path in ["/api/workers", "/api/executions?limit=5", "/api/overview", "/readyz"] {
        let (status, body) = cluster.call(reqwest::Method::GET, path, None).await?;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let (status, body) = cluster.call(reqwest::Method::POST, "/api/jobs/garbage/pause", None).await?;
    assert!((400..500).contains(&status), "pausing an invalid job: {status} {body}");
    // Replacing an invalid job through the API repairs it.
    let (status, body) = cluster
        .call(
            reqwest::Method::PUT,
            "/api/jobs/garbage",
            Some(json!({"schedule": "@daily", "task": {"kind": "shell", "command": "true"}})),
        )
        .await?;
    assert_eq!(status, 200, "{body}");
    let repaired: Value = cluster.get("/api/jobs/garbage").await?;
    assert!(repaired.get("invalid").is_none(), "{repaired}");
    Ok(())
}
