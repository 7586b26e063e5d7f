//! Prometheus metrics and tracing spans, on real processes: a worker with `--metrics-listen`
//! and a master with a token. Every family the operator guide names is listed, and each counter
//! moves when the thing it counts happens: ticks, claims, lateness, executions by job and
//! status, running executions, etcd requests, the record spool across a MongoDB outage, and a
//! session lease lost to SIGSTOP. Execution log lines carry the job, execution id and worker id
//! of their span.

use std::time::Duration;

use etcron_tests::{free_port, scrape, wait_for, Cluster, Scrape, WorkerOpts};
use nix::sys::signal::Signal;
use reqwest::Method;
use serde_json::json;

const TOKEN: &str = "metrics-admin-token-0123456789";

const WORKER_FAMILIES: &[&str] = &[
    "etcron_worker_ticks_due_total",
    "etcron_worker_claims_total",
    "etcron_worker_claim_duration_seconds",
    "etcron_worker_fire_lateness_seconds",
    "etcron_worker_executions_total",
    "etcron_worker_running_executions",
    "etcron_worker_capacity",
    "etcron_worker_jobs",
    "etcron_worker_wheel_entries",
    "etcron_worker_jobs_revision",
    "etcron_worker_session_lease_losses_total",
    "etcron_worker_log_sink_queue_length",
    "etcron_worker_spool_bytes",
    "etcron_worker_records_written_total",
    "etcron_worker_records_spooled_total",
    "etcron_worker_records_replayed_total",
    "etcron_worker_records_lost_total",
    "etcron_worker_record_write_errors_total",
    "etcron_worker_closes_pending",
    "etcron_worker_close_retries_total",
    "etcron_worker_jobs_paused_total",
    "etcron_worker_health_errors_total",
    "etcron_etcd_request_duration_seconds",
    "etcron_etcd_admission_limit",
    "etcron_etcd_requests_in_flight",
    "etcron_etcd_admission_waits_total",
    "etcron_etcd_admission_decreases_total",
    "etcron_build_info",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
];

const MASTER_FAMILIES: &[&str] = &[
    "etcron_master_http_requests_total",
    "etcron_master_http_request_duration_seconds",
    "etcron_master_audit_entries_dropped_total",
    "etcron_etcd_request_duration_seconds",
    "etcron_etcd_admission_limit",
    "etcron_etcd_admission_decreases_total",
    "etcron_build_info",
    "process_resident_memory_bytes",
];

/// Polls the endpoint until `check` accepts a scrape.
async fn until(url: &str, what: &str, check: impl Fn(&Scrape) -> bool) -> anyhow::Result<Scrape> {
    wait_for(Duration::from_secs(30), what, || async {
        let s = scrape(url, None).await.ok()?;
        check(&s).then_some(s)
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn worker_and_master_metrics_are_listed_and_move() -> anyhow::Result<()> {
    let mut c = Cluster::start_with("metrics", 0, true, &["--api-token", TOKEN]).await?;
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let mut opts = WorkerOpts::new("w1");
    opts.extra = ["--metrics-listen", &format!("127.0.0.1:{port}"), "--log-format", "json"].map(String::from).to_vec();
    c.add_worker(opts)?;
    c.wait_workers(1).await?;

    let sh = |cmd: &str| json!({"schedule": "* * * * * *", "task": {"kind": "shell", "command": cmd}});
    c.put_job("ok", sh("true")).await?;
    c.put_job("bad", sh("exit 3")).await?;
    let ran = |s: &Scrape, job: &str, status: &str| {
        s.value("etcron_worker_executions_total", &[("job", job), ("status", status)])
    };
    let first =
        until(&url, "both jobs to run twice", |s| ran(s, "ok", "succeeded") >= 2.0 && ran(s, "bad", "failed") >= 2.0)
            .await?;
    let before = ran(&first, "ok", "succeeded");
    let s = until(&url, "the execution counter to move", |s| ran(s, "ok", "succeeded") >= before + 2.0).await?;

    for name in WORKER_FAMILIES {
        assert!(s.declares(name), "{name} is not listed:\n{}", s.text);
    }
    assert_eq!(s.value("etcron_worker_jobs", &[]), 2.0);
    assert!(s.value("etcron_worker_wheel_entries", &[]) >= 2.0);
    assert_eq!(s.value("etcron_worker_capacity", &[]), 64.0);
    assert_eq!(s.value("etcron_build_info", &[("component", "worker")]), 1.0);
    assert!(s.value("process_resident_memory_bytes", &[]) > 0.0);
    let due = s.value("etcron_worker_ticks_due_total", &[("trigger", "schedule")]);
    let won = s.value("etcron_worker_claims_total", &[("outcome", "won")]);
    let finished = ran(&s, "ok", "succeeded") + ran(&s, "bad", "failed");
    // Alone, the worker wins every tick it races for; a tick may be due and not yet finished.
    assert!(won >= finished && due >= won, "due {due}, won {won}, finished {finished}");
    assert!(s.value("etcron_worker_fire_lateness_seconds_count", &[]) >= finished);
    assert!(s.value("etcron_worker_claim_duration_seconds_count", &[]) >= won);
    // A claim (close) goes to etcd alone (`claim`) or in a batch (`claim_batch`, its claims
    // counted by `etcron_worker_batch_size`).
    let sent = |op: &str, kind: &str| {
        s.value("etcron_etcd_request_duration_seconds_count", &[("op", op)])
            + s.value("etcron_worker_batch_size_sum", &[("kind", kind)])
    };
    assert!(sent("claim", "claim") >= won, "claims sent {} < won {won}", sent("claim", "claim"));
    assert!(sent("close", "close") >= finished, "closes sent {} < finished {finished}", sent("close", "close"));
    assert!(s.value("etcron_etcd_request_duration_seconds_count", &[("op", "keep_alive")]) >= 1.0);
    until(&url, "records to reach MongoDB", |s| s.value("etcron_worker_records_written_total", &[]) >= 4.0).await?;

    // A long manual run shows in the running gauge, and its kill in the counters.
    let put =
        c.put_job("long", json!({"schedule": "0 0 0 1 1 *", "task": {"kind": "shell", "command": "sleep 60"}})).await?;
    // The worker's job table catches up with the revision the master answered.
    let revision = put["revision"].as_i64().expect("a PUT answers the revision");
    until(&url, "the worker to apply the new job", |s| {
        s.value("etcron_worker_jobs_revision", &[]) >= revision as f64 && s.value("etcron_worker_jobs", &[]) == 3.0
    })
    .await?;
    assert_eq!(c.call(Method::POST, "/api/jobs/long/run", None).await?.0, 202);
    until(&url, "the running gauge to show the long run", |s| s.value("etcron_worker_running_executions", &[]) >= 1.0)
        .await?;
    assert_eq!(c.call(Method::POST, "/api/jobs/long/kill", None).await?.0, 202);
    until(&url, "the killed run to be counted", |s| ran(s, "long", "killed") == 1.0).await?;

    // MongoDB outage: records go to the spool, then are replayed.
    c.mongo.stop()?;
    let s = until(&url, "records to be spooled during the outage", |s| {
        s.value("etcron_worker_records_spooled_total", &[]) >= 1.0 && s.value("etcron_worker_spool_bytes", &[]) > 0.0
    })
    .await?;
    assert!(s.value("etcron_worker_record_write_errors_total", &[]) >= 1.0);
    c.mongo.restart().await?;
    until(&url, "the spool to be replayed", |s| {
        s.value("etcron_worker_records_replayed_total", &[]) >= 1.0 && s.value("etcron_worker_spool_bytes", &[]) == 0.0
    })
    .await?;
    assert_eq!(s.value("etcron_worker_records_lost_total", &[]), 0.0);

    // A worker paused past its 3 s session TTL loses its lease.
    assert_eq!(s.value("etcron_worker_session_lease_losses_total", &[]), 0.0);
    c.workers[0].proc.signal(Signal::SIGSTOP)?;
    c.wait_workers(0).await?;
    c.workers[0].proc.signal(Signal::SIGCONT)?;
    until(&url, "the lease loss to be counted", |s| s.value("etcron_worker_session_lease_losses_total", &[]) == 1.0)
        .await?;

    // The master: the API's token guards /metrics; requests are counted by route template.
    let master_url = format!("{}/metrics", c.master.url);
    let refused = scrape(&master_url, None).await.unwrap_err().to_string();
    assert!(refused.contains("401"), "{refused}");
    let m1 = scrape(&master_url, Some(TOKEN)).await?;
    for name in MASTER_FAMILIES {
        assert!(m1.declares(name), "{name} is not listed by the master:\n{}", m1.text);
    }
    let lists = |s: &Scrape| {
        s.value("etcron_master_http_requests_total", &[("method", "GET"), ("route", "/api/jobs"), ("status", "200")])
    };
    c.get("/api/jobs").await?;
    c.get("/api/jobs").await?;
    let m2 = scrape(&master_url, Some(TOKEN)).await?;
    assert_eq!(lists(&m2), lists(&m1) + 2.0);
    let puts = m2.value("etcron_master_http_requests_total", &[("method", "PUT"), ("route", "/api/jobs/{job}")]);
    assert!(puts >= 3.0, "3 jobs were put, counted {puts}");
    assert!(m2.value("etcron_etcd_request_duration_seconds_count", &[("op", "list_jobs")]) >= 2.0);
    // A path no route matches is counted under `unmatched`, not under its own name.
    let probe = c.http.get(format!("{}/no/such/path", c.master.url)).send().await?;
    assert_eq!(probe.status().as_u16(), 404);
    let m3 = scrape(&master_url, Some(TOKEN)).await?;
    assert!(m3.value("etcron_master_http_requests_total", &[("route", "unmatched"), ("status", "404")]) >= 1.0);
    assert!(!m3.text.contains("/no/such/path"), "{}", m3.text);
    assert_eq!(m2.value("etcron_build_info", &[("component", "master")]), 1.0);

    // Spans: each execution's log lines name its job, execution id and worker.
    let log = c.workers[0].proc.log_text();
    let finished_lines: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["fields"]["message"] == "execution finished" && v["span"]["job"] == "ok")
        .collect();
    assert!(!finished_lines.is_empty(), "no execution line of job ok in the worker's JSON log");
    for line in &finished_lines {
        let span = &line["span"];
        assert_eq!(span["name"], "execution", "{line}");
        assert_eq!(span["worker_id"], "w1", "{line}");
        assert_eq!(span["execution_id"], line["fields"]["execution_id"], "{line}");
        assert!(span["execution_id"].as_str().is_some_and(|id| id.starts_with("ok@")), "{line}");
    }
    Ok(())
}
