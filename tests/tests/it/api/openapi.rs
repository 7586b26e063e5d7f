//! The master against its own OpenAPI document: schemathesis (PyPI, pinned, installed into
//! `.venv-schemathesis/` by deploy/local/test.sh) reads `/api/openapi.json` from a real master
//! and sends generated requests to every operation. The run passes only when no response is a
//! server error and every response has a documented status, content type, headers and body.
//!
//! The cluster has no worker, so no job the generator creates ever runs; what the responses
//! show (jobs of every kind, a job stored around the API, a registered worker with a running
//! execution, execution records of every shape, backfills) is seeded before the run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use etcron_common::store::{RecordWrite, WriteMode};
use etcron_model::backfill;
use etcron_model::keys::{ExecutionId, Keys, Part, Tick};
use etcron_model::notify::{delivery_id, Attempt, Delivery, DeliveryState};
use etcron_model::record::RunParams;
use etcron_model::record::{ExecutionRecord, Status, TriggerKind};
use etcron_model::spec::notify::{NotifyEvent, NotifyFormat};
use etcron_model::stored::{RunningExecution, WorkerInfo};
use etcron_tests::{now_ms, Cluster, Proc};
use serde_json::json;

const TOKEN: &str = "openapi-test-token-0123456789";
/// Examples per operation and phase; with the seed, each run sends the same requests.
const MAX_EXAMPLES: &str = "25";
const SEED: &str = "20261122";
/// Upper bound on the whole schemathesis run.
const RUN_LIMIT: Duration = Duration::from_secs(600);
/// What schemathesis checks: no 5xx; status, content type, headers and body as documented; and
/// that operations declaring the bearer token refuse requests without it or with a wrong one.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
                      response_headers_conformance,response_schema_conformance,ignored_auth";

fn schemathesis() -> anyhow::Result<PathBuf> {
    let st = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv-schemathesis/bin/st");
    anyhow::ensure!(
        st.exists(),
        "schemathesis is not installed ({} is missing): run deploy/local/test.sh, which creates the \
         virtualenv .venv-schemathesis/ with the pinned schemathesis",
        st.display()
    );
    Ok(st)
}

/// A record as a worker would write it; `f` fills in what differs.
fn record(id: ExecutionId, status: Status, f: impl FnOnce(&mut ExecutionRecord)) -> RecordWrite {
    let ms = id.tick.scheduled_ms().unwrap_or_else(now_ms);
    let mut r = ExecutionRecord {
        job: id.job.clone(),
        team: Some("payments".to_owned()),
        scheduled_at: etcron_model::rfc3339_ms(ms),
        scheduled_ms: ms,
        claimed_at: Some(etcron_model::rfc3339_ms(ms + 3)),
        started_at: Some(etcron_model::rfc3339_ms(ms + 4)),
        finished_at: Some(etcron_model::rfc3339_ms(ms + 1004)),
        duration_ms: Some(1000),
        worker_id: "w-seeded".to_owned(),
        hostname: "host-1".to_owned(),
        attempt: id.attempt,
        trigger: TriggerKind::Schedule,
        status,
        exit_code: Some(0),
        signal: None,
        output: "report written\n".to_owned(),
        output_truncated: false,
        error: None,
        reason: None,
        fencing_token: Some(41),
        parent: None,
        http_status: None,
        shard: None,
        params: RunParams::default(),
        jitter_ms: Some(1_234),
        workflow: Some("1764547200000-0a1b2c3d4e5f".to_owned()),
        priority: Some(90),
        pool: Some("reporting-db".to_owned()),
        trace_id: None,
        // What a task reports, so the documented shape of these fields is checked too.
        reports: etcron_model::record::TaskReports {
            progress: Some(etcron_model::progress::Progress {
                percent: Some(42.5),
                message: Some("copying table b".to_owned()),
                at: "2026-01-01T00:00:01.000Z".to_owned(),
            }),
            checkpoint: Some(serde_json::json!({"offset": 100_000})),
            resumed_from: Some(etcron_model::progress::Resumed {
                execution_id: format!("{}@1700000000000#1", id.job),
                at: "2026-01-01T00:00:00.500Z".to_owned(),
                checkpoint: serde_json::json!({"offset": 50_000}),
            }),
            result: Some(serde_json::json!({"rows": 3})),
        },
        id,
    };
    f(&mut r);
    RecordWrite { mode: WriteMode::Replace, record: r }
}

/// A skip calendar, jobs of each kind, one stored value that is no valid spec, paused jobs, a registered worker
/// running an execution, and records of each shape (the document's examples name some of them).
async fn seed(c: &Cluster) -> anyhow::Result<()> {
    let calendar = json!({"timezone": "Europe/Berlin", "dates": ["2026-12-25"], "ranges": [{"from": "2026-12-31", "to": "2027-01-01"}]});
    let (status, body) = c.call(reqwest::Method::PUT, "/api/calendars/holidays-de", Some(calendar)).await?;
    anyhow::ensure!(status == 201, "calendar: {status} {body}");
    c.put_job(
        "shaped",
        json!({"schedules": ["0 9 * * 1-5", "0 12 * * 6,0"], "active_from": "2026-01-01T00:00:00Z",
               "active_until": "2099-01-01T00:00:00Z", "jitter": "5m", "skip_calendars": ["holidays-de"],
               "task": {"kind": "shell", "command": "true"}}),
    )
    .await?;
    c.put_job(
        "nightly-report",
        json!({"schedule": "0 30 2 * * *", "timezone": "Europe/Berlin", "description": "the nightly report",
               "team": "payments",
               "task": {"kind": "shell", "command": "echo report", "env": {"OUT": "/tmp/r"}, "cwd": "/"},
               "timeout": "10m", "retries": {"max": 3, "backoff": "10s", "max_backoff": "5m"},
               "concurrency": "forbid", "misfire": "run_once", "on_worker_loss": "mark_lost",
               "selector": {"region": "eu"}, "on_failure": ["alert"], "labels": {"team": "data"},
               "max_output": 4096}),
    )
    .await?;
    c.put_job(
        "webhook",
        json!({"schedule": "@every 10m", "enabled": false, "mode": {"sharded": 2},
               "task": {"kind": "http", "method": "POST", "url": "https://hooks.example.com/x",
                        "headers": {"X-Token": "t"}, "body": "{}", "expect_status": 204}}),
    )
    .await?;
    c.put_job(
        "grpc-call",
        json!({"schedule": "@daily", "timeout": "30s",
               "task": {"kind": "grpc", "endpoint": "https://billing.example.com:8443",
                        "method": "billing.v1.Invoices/CloseMonth", "request": {"month": "2026-11", "dryRun": true},
                        "metadata": {"x-team": "billing"}, "secret_metadata": {"authorization": "Bearer t"}}}),
    )
    .await?;
    c.put_job(
        "grpc-echo",
        json!({"schedule": "@daily", "enabled": false,
               "task": {"kind": "grpc", "endpoint": "http://127.0.0.1:50051", "method": "etcron.test.Echo/Echo",
                        "request": {"text": "hi"}, "metadata": {"x-team": "billing"},
                        "secret_metadata": {"authorization": "Bearer t"},
                        "descriptor_set": etcron_tests::grpc_server::descriptor_set_base64()}}),
    )
    .await?;
    c.put_job(
        "everywhere",
        json!({"schedule": "@hourly", "mode": "broadcast", "task": {"kind": "shell", "command": "true"}}),
    )
    .await?;
    c.put_job(
        "notifying",
        json!({"schedule": "@daily", "task": {"kind": "shell", "command": "true"},
               "notify": [{"url": "https://alerts.example.com/etcron", "on": ["failure", "missed"],
                           "headers": {"X-Team": "data"}, "secret_headers": {"Authorization": "Bearer t"}},
                          {"name": "ops", "secret_url": "https://hooks.slack.com/services/T/B/X", "format": "slack"}]}),
    )
    .await?;
    let keys = Keys::new(&c.namespace)?;
    let mut etcd = c.etcd.client().await?;
    etcd.put(keys.job("broken"), r#"{"schedule":"every tuesday","task":{"kind":"shell"}}"#, None).await?;
    // Pauses: through the API, by hand (`{}`: nobody known), and a value that is no pause.
    let (status, body) = c
        .call(reqwest::Method::POST, "/api/jobs/nightly-report/pause", Some(json!({"reason": "db migration"})))
        .await?;
    anyhow::ensure!(status == 200, "pause: {status} {body}");
    etcd.put(keys.paused("everywhere"), "{}", None).await?;
    etcd.put(keys.paused("broken"), "paused!", None).await?;
    let worker = WorkerInfo {
        id: "w-seeded".to_owned(),
        hostname: "host-1".to_owned(),
        pid: 4242,
        labels: BTreeMap::from([("region".to_owned(), "eu".to_owned())]),
        capacity: 8,
        running: 1,
        version: etcron_model::VERSION.to_owned(),
        started_at: etcron_model::rfc3339_ms(now_ms() - 60_000),
        output_url: None,
        output_token: None,
        run_as_users: vec!["backup".to_owned()],
        task_network_allow: vec!["127.0.0.0/8".to_owned(), "etcd-1:2379".to_owned()],
        teams: vec!["payments".to_owned()],
        task_user: Some("uid per team 70000-70999".to_owned()),
        unsettled_from_ms: Some(now_ms() - 90_000),
        handlers: Vec::new(),
        default_notify: vec![etcron_model::spec::notify::NotifyEvent::Failure],
        os_user: Some("root (uid 0)".to_owned()),
    };
    etcd.put(keys.worker(&worker.id), serde_json::to_vec(&worker)?, None).await?;
    let running = ExecutionId::new("nightly-report", Tick::Manual("00000000000000aa".to_owned()));
    let marker = RunningExecution {
        worker_id: worker.id.clone(),
        execution_id: running.clone(),
        pid: Some(4343),
        started_at: etcron_model::rfc3339_ms(now_ms() - 5_000),
        task_started_ms: Some(now_ms() - 4_990),
        fencing_token: None,
        trigger: Some(TriggerKind::Manual),
        scheduled_ms: Some(1_700_000_000_000),
        params: RunParams {
            env: BTreeMap::from([("REPORT_DAY".to_owned(), "2023-11-14".to_owned())]),
            as_of_ms: Some(1_700_000_000_000),
            backfill: None,
            workflow: None,
        },
    };
    etcd.put(keys.running(&running), serde_json::to_vec(&marker)?, None).await?;
    // An execution waiting in a queue (`concurrency: queue`), as a worker writes it.
    let waiting = ExecutionId::new("nightly-report", Tick::Scheduled(1_700_000_180_000));
    let entry = etcron_model::stored::QueuedRun {
        execution_id: waiting.clone(),
        scheduled_ms: 1_700_000_180_000,
        trigger: TriggerKind::Schedule,
        params: RunParams::default(),
        parent: None,
        queued_at_ms: 1_700_000_180_010,
        behind: Some(running.clone()),
    };
    etcd.put(keys.queue_entry(&waiting, 1_700_000_180_000), serde_json::to_vec(&entry)?, None).await?;
    // Backfills: one going (its items a succeeded, a failed and a pending run), one cancelled.
    let items = [(1_700_000_000_000, 1), (1_700_000_060_000, 2), (1_700_000_120_000, 1)]
        .map(|(at_ms, attempt)| backfill::Item { at_ms, attempt });
    let mut seeded = backfill::Backfill {
        from_ms: 1_700_000_000_000,
        to_ms: 1_700_000_120_000,
        which: backfill::Which::Missing,
        overlap: backfill::Overlap::Serial,
        parallel: 1,
        items: items.to_vec(),
        by: "admin".to_owned(),
        at_ms: now_ms() - 30_000,
        reason: "reports of the outage".to_owned(),
        cancelled: None,
    };
    etcd.put(keys.backfill("nightly-report", "seeded1"), serde_json::to_vec(&seeded)?, None).await?;
    seeded.cancelled = Some(backfill::Cancelled { by: "admin".to_owned(), at_ms: now_ms() - 10_000 });
    etcd.put(keys.backfill("nightly-report", "seeded2"), serde_json::to_vec(&seeded)?, None).await?;

    let now = now_ms();
    let scheduled = |job: &str, ms: i64| ExecutionId::new(job, Tick::Scheduled(ms));
    let first = scheduled("nightly-report", 1_700_000_000_000);
    let second_id = ExecutionId { attempt: 2, ..scheduled("nightly-report", 1_700_000_060_000) };
    let records = vec![
        record(first.clone(), Status::Succeeded, |_| {}),
        record(second_id.clone(), Status::Failed, |r| {
            r.trigger = TriggerKind::Retry;
            r.exit_code = Some(3);
            r.error = Some("exit code 3".to_owned());
            r.output = "disk full\n".to_owned();
            r.parent = Some(first.clone());
        }),
        record(running, Status::Running, |r| {
            r.trigger = TriggerKind::Manual;
            r.finished_at = None;
            r.duration_ms = None;
            r.exit_code = None;
            r.output = String::new();
        }),
        record(scheduled("nightly-report", now - 60_000), Status::Missed, |r| {
            r.claimed_at = None;
            r.started_at = None;
            r.duration_ms = None;
            r.exit_code = None;
            r.worker_id = String::new();
            r.hostname = String::new();
            r.output = String::new();
            r.reason = Some("not claimed within 5s: no live worker matches selector {region=eu}".to_owned());
            r.fencing_token = None;
        }),
        record(scheduled("nightly-report", now - 120_000), Status::TimedOut, |r| {
            r.exit_code = None;
            r.signal = Some(15);
            r.error = Some("timed out after 10m".to_owned());
            r.output_truncated = true;
        }),
        record(ExecutionId { part: Part::Shard(1), ..scheduled("webhook", now - 180_000) }, Status::Succeeded, |r| {
            r.exit_code = None;
            r.http_status = Some(204);
            r.shard = Some((1, 2));
            r.output = "HTTP 204 No Content\n".to_owned();
        }),
        record(
            ExecutionId { part: Part::Worker("w-seeded".to_owned()), ..scheduled("everywhere", now - 240_000) },
            Status::Killed,
            |r| {
                r.exit_code = None;
                r.signal = Some(9);
            },
        ),
        record(ExecutionId::new("alert", Tick::Dependency("41".to_owned())), Status::Succeeded, |r| {
            r.trigger = TriggerKind::Dependency;
            r.parent = Some(second_id.clone());
        }),
    ];
    let store = c.mongo.store(&c.db).await?;
    store.write(&records).await?;
    let delivery = |event: NotifyEvent, state: DeliveryState, attempts: Vec<Attempt>| Delivery {
        id: delivery_id(&second_id.to_string(), event, "0"),
        job: "nightly-report".to_owned(),
        team: Some("payments".to_owned()),
        execution_id: second_id.to_string(),
        event,
        target: "https://hooks.slack.com/…".to_owned(),
        target_name: Some("ops".to_owned()),
        default_target: false,
        format: NotifyFormat::Slack,
        worker_id: "w-seeded".to_owned(),
        finished_at: (state != DeliveryState::Pending).then(|| etcron_model::rfc3339_ms(now + 2_000)),
        state,
        attempts,
        created_at: etcron_model::rfc3339_ms(now),
    };
    let attempt = |status: Option<u16>, error: Option<&str>| Attempt {
        at: etcron_model::rfc3339_ms(now + 1_000),
        duration_ms: 12,
        http_status: status,
        error: error.map(str::to_owned),
    };
    store
        .write_notifications(&[
            delivery(
                NotifyEvent::Failure,
                DeliveryState::Delivered,
                vec![attempt(Some(500), Some("HTTP 500: busy")), attempt(Some(200), None)],
            ),
            delivery(NotifyEvent::Missed, DeliveryState::Failed, vec![attempt(None, Some("no answer within 10s"))]),
            delivery(NotifyEvent::Recovery, DeliveryState::Pending, Vec::new()),
        ])
        .await?;
    Ok(())
}

/// The lines of schemathesis's closing summary.
fn summary(output: &str) -> String {
    let start = output.rfind("SUMMARY").and_then(|i| output[..i].rfind('\n')).unwrap_or(0);
    output[start..].trim().to_owned()
}

/// The operation that streams: for a running execution it answers until the execution ends,
/// which for the seeded one is never. Schemathesis feeds ids it saw in responses into later
/// requests, so in the main run it would hold such streams open until its request timeout
/// (about 30 s each, minutes in all). It is tested in a run of its own, where it only meets
/// documented examples and generated ids (finished executions stream their record and end, the
/// rest are 400/404); `tests/stream.rs` and `tests/masters.rs` follow live streams.
const STREAMING: &str = "streamExecution";

#[tokio::test(flavor = "multi_thread")]
async fn the_master_answers_as_its_openapi_document_says() -> anyhow::Result<()> {
    let st = schemathesis()?;
    let c = Cluster::start_with("openapi", 0, false, &["--api-token", TOKEN, "--retention", "3660d"]).await?;
    seed(&c).await?;
    run_schemathesis(&st, &c, "schemathesis", &["--exclude-operation-id", STREAMING])?;
    run_schemathesis(
        &st,
        &c,
        "schemathesis-stream",
        &["--include-operation-id", STREAMING, "--phases", "examples,coverage,fuzzing"],
    )?;
    Ok(())
}

/// Runs schemathesis against the cluster's master with `args` added; fails on any finding.
fn run_schemathesis(st: &std::path::Path, c: &Cluster, name: &str, args: &[&str]) -> anyhow::Result<()> {
    let mut cmd = Command::new(st);
    cmd.arg("run").arg(format!("{}/api/openapi.json", c.master.url));
    cmd.args(["--header", &format!("Authorization: Bearer {TOKEN}")]);
    cmd.args(["--checks", CHECKS, "--max-examples", MAX_EXAMPLES, "--seed", SEED]);
    // One worker: hypothesis parses lambda sources with `ast`, which is not thread-safe on some
    // Python 3.11 releases ("AST constructor recursion depth mismatch").
    cmd.args(["--workers", "1", "--generation-database", "none", "--no-color", "--request-timeout", "30"]);
    cmd.args(args);
    // ETCRON_SCHEMATHESIS_ARGS: more flags, e.g. `--report junit` (per-operation timings).
    if let Ok(extra) = std::env::var("ETCRON_SCHEMATHESIS_ARGS") {
        cmd.args(extra.split_whitespace());
    }
    // Reports and caches go to the test's log directory, not the work tree.
    cmd.current_dir(&c.logs).env("NO_COLOR", "1").env("COLUMNS", "120");
    let started = Instant::now();
    let mut run = Proc::spawn(name, cmd, c.logs.join(format!("{name}.log")))?;
    let code = run.wait_exit(RUN_LIMIT);
    let output = run.log_text();
    eprintln!("{name} ({:.0?}), full output in {}:\n{}", started.elapsed(), run.log.display(), summary(&output));
    let code = code?;
    if code != Some(0) {
        c.dump_logs();
        anyhow::bail!("{name} found failures (exit {code:?}):\n{output}");
    }
    Ok(())
}
