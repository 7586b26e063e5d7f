//! Browser tests of the operator console: `web/tests/*.mjs` (playwright-core driving Debian's
//! Chromium) against a real cluster this harness starts. Screenshots land in the test's log
//! directory under `target/debug/test-logs/`.

use std::time::Duration;

use etcron_tests::{browser_with, wait_for, Cluster, Proc};
use reqwest::Method;
use serde_json::json;

/// Runs one browser script against `url`; fails with its output unless it exits 0.
fn browser(script: &str, url: &str, shots: &std::path::Path) -> anyhow::Result<()> {
    browser_with(script, url, shots, &[], &[])
}

fn screenshots(dir: &std::path::Path, names: &[&str]) {
    for shot in names {
        let len = std::fs::metadata(dir.join(shot)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 1000, "{shot} written ({len} bytes)");
    }
}

/// An executor of the handler `hot-list` registered as `app-1`: `sdk/examples/hot_list.rs`, which
/// declares its job `hot-list` (`ensure_jobs`) at start; a run is two short steps.
fn hot_list_executor(c: &Cluster) -> anyhow::Result<Proc> {
    let log = c.path("hot-list.log").display().to_string();
    let env = [
        ("HOT_LIST_SCHEDULE", "@yearly"),
        ("HOT_LIST_STEPS", "2"),
        ("HOT_LIST_STEP_MS", "50"),
        ("HOT_LIST_LOG", log.as_str()),
    ];
    etcron_tests::hot_list_replica(c, "app-1", &env)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_jobs_list_shows_state_schedule_results_and_unmatched_selectors() -> anyhow::Result<()> {
    let c = Cluster::start("ui-jobs", 1).await?;
    c.put_job(
        "nightly-report",
        json!({"schedule": "0 30 2 * * *", "timezone": "Europe/Berlin", "description": "the nightly report",
               "labels": {"team": "data"}, "task": {"kind": "shell", "command": "echo report",
               "params": {"REPORT_DAY": {"pattern": "[0-9]{4}-[0-9]{2}-[0-9]{2}"}}}}),
    )
    .await?;
    c.put_job(
        "paused-job",
        json!({"schedule": "@hourly", "enabled": false, "task": {"kind": "shell", "command": "true"}}),
    )
    .await?;
    c.put_job(
        "mars-only",
        json!({"schedule": "@daily", "selector": {"region": "mars"}, "task": {"kind": "shell", "command": "true"}}),
    )
    .await?;
    c.put_job(
        "as-backup",
        json!({"schedule": "@daily", "task": {"kind": "shell", "command": "true", "user": "backup", "group": "backup"}}),
    )
    .await?;
    // A job its failures paused (`pause_after_failures`), as the worker writes the pause.
    c.put_job(
        "auto-paused",
        json!({"schedule": "@daily", "pause_after_failures": 3, "task": {"kind": "shell", "command": "false"}}),
    )
    .await?;
    let pause = json!({"by": "etcron", "at_ms": 1_764_037_206_000_i64, "execution_id": "auto-paused@1764037206000#1",
        "reason": "pause_after_failures: 3 final failures in a row, the last auto-paused@1764037206000#1"});
    let keys = etcron_model::keys::Keys::new(&c.namespace)?;
    c.etcd.client().await?.put(keys.paused("auto-paused"), pause.to_string(), None).await?;
    let (status, _) = c.call(Method::POST, "/api/jobs/nightly-report/run", None).await?;
    assert_eq!(status, 202);
    c.wait_executions("job=nightly-report&status=succeeded", "the manual run", |l| l.len() == 1).await?;
    // An executor (an application embedding etcron-sdk) and a run of its handler job.
    let _executor = hot_list_executor(&c)?;
    c.wait_workers(2).await?;
    let run = c.run_now("hot-list").await?;
    c.record_when(&run, "succeeded").await?;
    browser_with("jobs.mjs", &c.master.url, &c.logs, &[&run], &[])?;
    screenshots(&c.logs, &["jobs-1280.png", "jobs-375-dark.png", "workers-1280.png"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn executions_can_be_searched_opened_and_jobs_run_killed_paused_and_deleted_from_the_ui() -> anyhow::Result<()> {
    let c = Cluster::start("ui-executions", 1).await?;
    c.put_job("echo-job", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "echo needle-7"}}))
        .await?;
    c.put_job(
        "long-job",
        json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "echo live-start; sleep 300"}}),
    )
    .await?;
    let (status, _) = c.call(Method::POST, "/api/jobs/echo-job/run", None).await?;
    assert_eq!(status, 202);
    c.wait_executions("job=echo-job&status=succeeded", "the echo run", |l| l.len() == 1).await?;
    browser("executions.mjs", &c.master.url, &c.logs)?;
    screenshots(
        &c.logs,
        &[
            "executions-search.png",
            "executions-filters.png",
            "execution-stamps.png",
            "execution-detail.png",
            "execution-live.png",
            "jobs-actions.png",
            "pause-dialog.png",
        ],
    );
    // What the browser did, seen through the API.
    let (status, _) = c.call(Method::GET, "/api/jobs/echo-job", None).await?;
    assert_eq!(status, 404, "deleted from the UI");
    let killed = c.get("/api/executions?job=long-job&status=killed").await?;
    assert_eq!(killed["executions"].as_array().unwrap().len(), 1);
    let long = c.get("/api/jobs/long-job").await?;
    assert!(long["paused"].is_null() && long["spec"]["enabled"] == true, "paused and resumed: {long}");
    // The reason typed into the prompt reached the pause (audit entries are written behind).
    etcron_tests::wait_for(std::time::Duration::from_secs(10), "the pause's audit entry", || async {
        let audit = c.get("/api/audit?job=long-job&action=job.pause").await.ok()?;
        (audit["entries"][0]["detail"]["paused"]["reason"] == "waiting for the backup").then_some(())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn jobs_are_created_edited_as_form_or_json_and_deleted_in_the_editor() -> anyhow::Result<()> {
    let c = Cluster::start("ui-editor", 1).await?;
    let grpc = etcron_tests::grpc_server::GrpcServer::start(etcron_tests::grpc_server::Reflection::V1).await?;
    browser_with("editor.mjs", &c.master.url, &c.logs, &[], &[("GRPC_ENDPOINT", &grpc.endpoint)])?;
    screenshots(
        &c.logs,
        &[
            "editor-invalid-schedule.png",
            "editor-preview.png",
            "job-detail.png",
            "editor-conflict.png",
            "editor-json.png",
            "editor-schedules.png",
            "editor-grpc.png",
            "calendars.png",
        ],
    );
    // The gRPC job made in the form ran, its secret (typed once, then kept) sent to the server.
    let call =
        grpc.calls().into_iter().find(|c| c.metadata.get("x-etcron-job").map(String::as_str) == Some("grpc-in-ui"));
    let call = call.expect("the gRPC job's call reached the server");
    assert_eq!(call.metadata["authorization"], "Bearer from-the-form");
    assert_eq!(call.metadata["x-team"], "ui");
    assert_eq!(call.request["count"], 2);
    // What the browser did, seen through the API: the job ran from its form-made spec, then went.
    let runs = c.get("/api/executions?job=made-in-ui&status=succeeded").await?;
    assert!(runs["executions"].as_array().unwrap().len() >= 2, "{runs}");
    // The newest run came after the form saves that kept the secret without seeing it.
    let newest = runs["executions"][0]["id"].as_str().unwrap().replace('@', "%40").replace('#', "%23");
    let newest = c.get(&format!("/api/executions/{newest}")).await?;
    assert!(newest["output"].as_str().unwrap().contains("secret-reached-the-task"), "{newest}");
    let (status, _) = c.call(Method::GET, "/api/jobs/made-in-ui", None).await?;
    assert_eq!(status, 404, "deleted from the job page");
    let merged = c.get("/api/jobs/two-schedules").await?;
    assert_eq!(merged["spec"]["schedules"], serde_json::json!(["0 9 * * 1-5", "0 12 * * 6,0"]), "{merged}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_overview_asks_for_the_token_and_banners_say_which_store_is_down() -> anyhow::Result<()> {
    let token = "ui-test-token-0123456789";
    let mut c = Cluster::start_with("ui-overview", 1, true, &["--api-token", token]).await?;
    let (status, _) = c
        .http
        .get(format!("{}/api/jobs", c.master.url))
        .bearer_auth("wrong-token-0123456789")
        .send()
        .await
        .map(|r| (r.status(), ()))?;
    assert_eq!(status, 401);
    c.put_job("ok-job", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "echo fine"}})).await?;
    c.put_job("fail-job", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "echo broken; exit 3"}}))
        .await?;
    c.put_job(
        "mars-job",
        json!({"schedule": "* * * * * *", "selector": {"region": "mars"}, "task": {"kind": "shell", "command": "true"}}),
    )
    .await?;
    for job in ["ok-job", "ok-job", "fail-job"] {
        let (status, _) = c.call(Method::POST, &format!("/api/jobs/{job}/run"), None).await?;
        assert_eq!(status, 202);
    }
    c.wait_executions("job=ok-job&status=succeeded", "two ok runs", |l| l.len() == 2).await?;
    c.wait_executions("job=fail-job&status=failed", "the failed run", |l| l.len() == 1).await?;
    c.wait_executions("job=mars-job&status=missed", "a missed tick", |l| !l.is_empty()).await?;
    // The aggregate the overview draws, checked against the records themselves.
    let overview = c.get("/api/overview?window=1h").await?;
    assert_eq!(overview["buckets"].as_array().unwrap().len(), 60);
    assert_eq!(overview["totals"]["succeeded"], 2, "{overview}");
    assert_eq!(overview["totals"]["failed"], 1, "{overview}");
    let counted: u64 =
        overview["buckets"].as_array().unwrap().iter().map(|b| b["counts"]["succeeded"].as_u64().unwrap_or(0)).sum();
    assert_eq!(counted, 2);
    assert_eq!(overview["recent_failures"][0]["job"], "fail-job");
    assert_eq!(overview["recent_missed"][0]["job"], "mars-job");
    assert_eq!(c.get("/api/overview?window=24h").await?["buckets"].as_array().unwrap().len(), 96);
    let env = [("ETCRON_TEST_TOKEN", token)];
    browser_with("overview.mjs", &c.master.url, &c.logs, &[], &env)?;
    screenshots(
        &c.logs,
        &["token-prompt.png", "overview-1280.png", "overview-375-dark.png", "executions-375-dark.png"],
    );
    c.mongo.stop()?;
    browser_with("banners.mjs", &c.master.url, &c.logs, &["mongodb"], &env)?;
    c.etcd.proc.kill9();
    browser_with("banners.mjs", &c.master.url, &c.logs, &["etcd"], &env)?;
    screenshots(&c.logs, &["banner-mongodb-jobs.png", "banner-mongodb-executions.png", "banner-etcd.png"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_page_on_another_origin_cannot_change_a_job() -> anyhow::Result<()> {
    let c = Cluster::start("ui-cross-origin", 0).await?;
    c.put_job("target", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "true"}})).await?;
    browser("crossorigin.mjs", &c.master.url, &c.logs)?;
    let job = c.get("/api/jobs/target").await?;
    assert!(job["paused"].is_null(), "not paused: {job}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn past_ticks_are_backfilled_and_a_backfill_cancelled_from_the_job_page() -> anyhow::Result<()> {
    let c = Cluster::start("ui-backfill", 1).await?;
    c.put_job("every-2s", json!({"schedule": "*/2 * * * * *", "task": {"kind": "shell", "command": "true"}})).await?;
    c.put_job("slow-hourly", json!({"schedule": "@hourly", "task": {"kind": "shell", "command": "sleep 300"}})).await?;
    c.wait_executions("job=every-2s&trigger=schedule&status=succeeded", "three scheduled runs", |l| l.len() >= 3)
        .await?;
    // Backfills run on paused jobs; paused, the schedule only records skipped ticks meanwhile.
    for job in ["every-2s", "slow-hourly"] {
        let (status, body) =
            c.call(Method::POST, &format!("/api/jobs/{job}/pause"), Some(json!({"reason": "backfill test"}))).await?;
        assert_eq!(status, 200, "{body}");
    }
    browser("backfill.mjs", &c.master.url, &c.logs)?;
    screenshots(
        &c.logs,
        &["backfill-error.png", "backfill-preview.png", "backfill-done.png", "backfill-cancelled.png"],
    );
    // What the browser did, seen through the API: one backfill, done, every item a succeeded
    // backfill run; the slow job's backfill cancelled.
    let list = c.get("/api/jobs/every-2s/backfills").await?;
    let backfills = list["backfills"].as_array().unwrap();
    assert_eq!(backfills.len(), 1, "{list}");
    let id = backfills[0]["id"].as_str().unwrap();
    let done = c.get(&format!("/api/jobs/every-2s/backfills/{id}")).await?;
    assert_eq!(done["state"], "done", "{done}");
    let items = done["items"].as_array().unwrap();
    assert!(items.len() >= 3, "{done}");
    assert!(items.iter().all(|i| i["status"] == "succeeded"), "{done}");
    let runs = c.get("/api/executions?job=every-2s&trigger=backfill&limit=500").await?;
    let runs = runs["executions"].as_array().unwrap();
    for item in items {
        let run = runs.iter().find(|r| r["id"] == item["execution_id"]);
        assert_eq!(run.map(|r| &r["status"]), Some(&json!("succeeded")), "{item} recorded: {runs:?}");
    }
    let slow = c.get("/api/jobs/slow-hourly/backfills").await?;
    assert_eq!(slow["backfills"][0]["state"], "cancelled", "{slow}");
    assert_eq!(slow["backfills"][0]["counts"]["failed"], 1, "the started run was killed: {slow}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_queue_jobs_waiting_ticks_are_listed_on_its_page_and_its_limit_is_in_the_editor() -> anyhow::Result<()> {
    let c = Cluster::start("ui-queue", 1).await?;
    let spec = json!({"schedule": "* * * * * *", "concurrency": "queue", "max_queue": 3,
                      "task": {"kind": "shell", "command": "sleep 60"}});
    c.put_job("queued", spec).await?;
    // The first run holds the lock; the next ticks wait behind it.
    wait_for(Duration::from_secs(20), "ticks waiting in the queue", || async {
        let job = c.get("/api/jobs/queued").await.ok()?;
        (job["queue"].as_array()?.len() >= 2).then_some(())
    })
    .await?;
    browser("queue.mjs", &c.master.url, &c.logs)?;
    screenshots(&c.logs, &["queue.png"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_tasks_progress_and_checkpoint_show_on_its_execution_page() -> anyhow::Result<()> {
    // A quiet stream is closed after 4 s here: the page then offers to follow again.
    let c = Cluster::start_with("ui-progress", 1, false, &["--stream-quiet-limit", "4s"]).await?;
    browser("progress.mjs", &c.master.url, &c.logs)?;
    screenshots(&c.logs, &["progress-running.png", "progress-done.png"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn sla_alerts_are_set_in_the_editor_and_a_jobs_notifications_listed_on_its_page() -> anyhow::Result<()> {
    let mut c = Cluster::start("ui-alerts", 1).await?;
    browser("alerts.mjs", &c.master.url, &c.logs)?;
    screenshots(
        &c.logs,
        &[
            "alerts-editor-error.png",
            "editor-error-summary.png",
            "alerts-notifications.png",
            "alerts-stale.png",
            "alerts-unheard.png",
        ],
    );
    // What the browser did, seen through the API: the form's alerts were cleared again; the
    // every-second job's matches went once to its target, then silenced for the hour.
    let form = c.get("/api/jobs/sla-form").await?;
    assert!(form["spec"].get("alerts").is_none(), "{form}");
    let sent = c.get("/api/notifications?job=boom-every-second&event=output_match&limit=500").await?;
    let sent = sent["notifications"].as_array().unwrap();
    assert_eq!(sent.iter().filter(|n| n["state"] != "silenced").count(), 1, "{sent:?}");
    assert!(sent.iter().any(|n| n["state"] == "silenced"), "{sent:?}");
    let stale = c.get("/api/notifications?job=never-succeeds&event=stale").await?;
    let occurrence = stale["notifications"][0]["execution_id"].as_str().unwrap_or_default();
    assert!(occurrence.starts_with("never-succeeds@stale-"), "{stale}");
    // MongoDB down: the job page still shows, its Notifications section saying why it is empty.
    c.mongo.stop()?;
    browser_with("alerts.mjs", &c.master.url, &c.logs, &["mongodb"], &[])?;
    screenshots(&c.logs, &["alerts-mongodb-down.png"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_team_token_sees_its_teams_jobs_only_in_the_console() -> anyhow::Result<()> {
    let (admin, a_admin, b_op) =
        ("ui-teams-admin-token-0123456789", "ui-team-a-admin-token-0123456789", "ui-team-b-op-token-0123456789");
    let entry = |name: &str, token: &str, teams: &str| {
        format!(
            "[[auth.tokens]]\nname = {name:?}\nteams = {{ {teams} }}\nsha256 = {:?}\n",
            etcron_master::layers::auth::hash_token(token)
        )
    };
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("master.toml");
    std::fs::write(&config, entry("a-admin", a_admin, "a = \"admin\"") + &entry("b-op", b_op, "b = \"operator\""))?;
    let config = config.display().to_string();
    let c = Cluster::start_with("ui-teams", 1, false, &["--config", &config, "--api-token", admin]).await?;
    for (job, team) in [("a-job", Some("a")), ("b-job", Some("b")), ("plain", None)] {
        let mut spec = json!({"schedule": "@yearly", "task": {"kind": "shell", "command": format!("echo from-{job}")}});
        if let Some(t) = team {
            spec["team"] = json!(t);
        }
        c.put_job(job, spec).await?;
        let (status, _) = c.call(Method::POST, &format!("/api/jobs/{job}/run"), None).await?;
        assert_eq!(status, 202);
    }
    for job in ["a-job", "b-job", "plain"] {
        c.wait_executions(&format!("job={job}&status=succeeded"), job, |l| l.len() == 1).await?;
    }
    let env = [("ETCRON_TEAM_A_TOKEN", a_admin), ("ETCRON_TEAM_B_TOKEN", b_op)];
    browser_with("teams.mjs", &c.master.url, &c.logs, &[], &env)?;
    screenshots(&c.logs, &["teams-jobs-b.png", "teams-not-found.png", "teams-editor.png"]);
    // What the browser made, seen through the API: a job of team a.
    assert_eq!(c.get("/api/jobs/made-by-team-a").await?["spec"]["team"], "a");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn workers_are_drained_cordoned_and_uncordoned_from_the_workers_page() -> anyhow::Result<()> {
    let mut c = Cluster::start("ui-workers", 2).await?;
    browser("workers.mjs", &c.master.url, &c.logs)?;
    screenshots(&c.logs, &["workers-drained.png"]);
    let list = c.get("/api/workers").await?;
    assert!(list["workers"].as_array().unwrap().iter().all(|w| w["cordon"].is_null()), "{list}");
    // Both workers run a job (each tick on every worker), then w2 stops: the records of the
    // last day name it and it is not live, so it has departed; w1 is live, so it has not.
    c.put_job(
        "everywhere",
        json!({"schedule": "* * * * * *", "mode": "broadcast", "task": {"kind": "shell", "command": "echo here"}}),
    )
    .await?;
    for w in ["w1", "w2"] {
        c.wait_executions(&format!("job=everywhere&worker={w}&status=succeeded"), w, |l| !l.is_empty()).await?;
    }
    assert_eq!(c.call(Method::DELETE, "/api/jobs/everywhere", None).await?.0, 204);
    c.workers[1].proc.signal(nix::sys::signal::Signal::SIGTERM)?;
    c.workers[1].proc.wait_exit(Duration::from_secs(30))?;
    c.wait_workers(1).await?;
    let departed = c.get("/api/workers/departed").await?;
    let gone = departed["workers"].as_array().unwrap();
    assert_eq!(gone.len(), 1, "{departed}");
    assert_eq!((gone[0]["id"].as_str(), gone[0]["last_job"].as_str()), (Some("w2"), Some("everywhere")), "{departed}");
    assert!(gone[0]["executions"].as_u64().unwrap() >= 1, "{departed}");
    let (status, body) = c.call(Method::GET, "/api/workers/departed?since=2000-01-01T00:00:00Z", None).await?;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("since")), "{body}");
    browser_with("workers.mjs", &c.master.url, &c.logs, &["departed"], &[])?;
    screenshots(&c.logs, &["workers-departed.png"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn pools_are_listed_shown_added_changed_and_deleted_from_the_pools_page() -> anyhow::Result<()> {
    let c = Cluster::start("ui-pools", 0).await?;
    let (status, body) =
        c.call(Method::PUT, "/api/pools/db", Some(json!({"slots": 2, "description": "reporting db"}))).await?;
    assert_eq!(status, 201, "{body}");
    c.put_job("report", json!({"schedule": "@yearly", "pool": "db", "task": {"kind": "shell", "command": "true"}}))
        .await?;
    c.put_job(
        "export",
        json!({"schedule": "@yearly", "pool": "db", "pool_slots": 2, "priority": 80,
               "task": {"kind": "shell", "command": "true"}}),
    )
    .await?;
    // What workers write while `report` holds both slots and a tick of `export` waits.
    let keys = etcron_model::keys::Keys::new(&c.namespace)?;
    let mut etcd = c.etcd.client().await?;
    let running = etcron_model::keys::ExecutionId::new("report", etcron_model::keys::Tick::Scheduled(1_000));
    for slot in 0..2 {
        let held = etcron_model::pool::HeldSlot {
            execution_id: running.clone(),
            worker_id: "w1".to_owned(),
            since_ms: etcron_tests::now_ms() - 90_000,
            priority: 50,
        };
        etcd.put(keys.pool_slot("db", slot), serde_json::to_vec(&held)?, None).await?;
    }
    let next = etcron_model::keys::ExecutionId::new("export", etcron_model::keys::Tick::Scheduled(5_000));
    let waiting = etcron_model::pool::Waiting {
        execution_id: next.clone(),
        scheduled_ms: 5_000,
        priority: 80,
        since_ms: etcron_tests::now_ms() - 30_000,
    };
    etcd.put(keys.pool_wait("db", etcron_model::pool::place(80), 5_000, &next), serde_json::to_vec(&waiting)?, None)
        .await?;
    browser("pools.mjs", &c.master.url, &c.logs)?;
    screenshots(&c.logs, &["pools.png", "pool-detail.png"]);
    // What the browser did, seen through the API: the pool it added is gone, the one in use stays.
    assert_eq!(c.call(Method::GET, "/api/pools/cache", None).await?.0, 404);
    assert_eq!(c.get("/api/pools/db").await?["in_use"], 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_run_is_drawn_as_a_graph_linked_from_its_steps_and_resumed_from_its_page() -> anyhow::Result<()> {
    use etcron_model::keys::{ExecutionId, Keys, Tick};
    use etcron_model::record::{ExecutionRecord, Status, TriggerKind};
    use etcron_model::workflow::{run_id, step_execution, Step};
    let c = Cluster::start("ui-workflows", 0).await?;
    for (job, after) in
        [("extract", json!([])), ("ta", json!(["extract"])), ("tb", json!(["extract"])), ("load", json!(["ta", "tb"]))]
    {
        c.put_job(job, json!({"schedule": "@yearly", "after": after, "task": {"kind": "shell", "command": "true"}}))
            .await?;
    }
    // The steps as the workers' closes write them: extract and ta succeeded, tb failed.
    let keys = Keys::new(&c.namespace)?;
    let root = ExecutionId::new("extract", Tick::Scheduled(1_764_547_200_000));
    let run = run_id(&root);
    let mut etcd = c.etcd.client().await?;
    let now = etcron_tests::now_ms();
    for (job, status) in [("extract", Status::Succeeded), ("ta", Status::Succeeded), ("tb", Status::Failed)] {
        let (execution_id, root) =
            if job == "extract" { (root.clone(), None) } else { (step_execution(job, &run), Some(root.clone())) };
        let result = (status == Status::Succeeded).then(|| json!({"rows": 12}));
        let step = Step { execution_id, status, at_ms: now, root, result };
        etcd.put(keys.workflow_step(&run, job), serde_json::to_vec(&step)?, None).await?;
    }
    // tb's record, naming its workflow run.
    let tb = step_execution("tb", &run);
    let mut record = ExecutionRecord::blank(&tb, now - 5_000, TriggerKind::Dependency, Status::Failed, None);
    record.workflow = Some(run.clone());
    let write = etcron_common::store::RecordWrite { mode: etcron_common::store::WriteMode::Replace, record };
    c.mongo.store(&c.db).await?.write(&[write]).await?;
    browser_with("workflows.mjs", &c.master.url, &c.logs, &[&run, &tb.to_string()], &[])?;
    screenshots(&c.logs, &["workflow.png", "workflow-375-dark.png"]);
    // What the browser did, seen in etcd: the run request of tb's next attempt in the run.
    let request = etcd.get(keys.trigger("tb", &format!("resume-2-{run}")), None).await?;
    let request: etcron_model::stored::TriggerRequest = serde_json::from_slice(request.kvs()[0].value())?;
    assert_eq!(request.execution_id, Some(tb.next_attempt()));
    Ok(())
}

/// The jobs list's twelve jobs of `jobs_list_scans`: varied schedules (long ones in words),
/// descriptions and labels, one paused in its spec.
fn twelve_jobs() -> Vec<(&'static str, serde_json::Value)> {
    let shell = |cmd: &str| json!({"kind": "shell", "command": cmd});
    vec![
        (
            "billing-nightly-export",
            json!({"schedule": "0 30 2 * * *", "timezone": "Europe/Berlin",
            "description": "Exports the day's invoices to the data warehouse and tells finance when the totals differ from the ledger",
            "labels": {"team": "billing", "tier": "critical"}, "task": shell("true")}),
        ),
        (
            "cache-warmup",
            json!({"schedule": "0 0 5 * * *", "description": "Warms the product cache",
            "labels": {"team": "web"}, "task": shell("true")}),
        ),
        (
            "weekday-business-hours-sync",
            json!({"schedule": "0 0,15,30,45 8-18 * * 1-5",
            "description": "Syncs the CRM during business hours", "labels": {"team": "sales", "source": "crm", "env": "prod"},
            "task": shell("true")}),
        ),
        (
            "month-start-close",
            json!({"schedule": "0 0 6 1 * *", "description": "Closes the books of the month",
            "labels": {"team": "finance"}, "task": shell("true")}),
        ),
        (
            "quarterly-report",
            json!({"schedules": ["0 0 7 1 1,4,7,10 *", "0 0 7 15 3,6,9,12 *"],
            "description": "The quarter's report, and its mid-quarter preview", "task": shell("true")}),
        ),
        ("log-rotate", json!({"schedule": "@daily", "task": shell("true")})),
        (
            "paused-reindex",
            json!({"schedule": "@hourly", "enabled": false, "description": "Rebuilds the search index",
            "task": shell("true")}),
        ),
        (
            "flaky-import",
            json!({"schedule": "@yearly", "timeout": "30s", "concurrency": "forbid",
            "labels": {"team": "data"}, "description": "Imports the partners' files",
            "notify": [{"name": "oncall", "url": "http://127.0.0.1:9/hook", "on": ["failure"]}],
            "task": shell("echo importing; echo 'row 17: bad date' >&2; exit 3")}),
        ),
        (
            "search-index-rebuild-for-every-tenant-of-the-eu-region",
            json!({"schedule": "0 0 3 * * 0",
            "description": "Rebuilds every tenant's search index from the primary database, one tenant at a time, slowly",
            "labels": {"region": "eu", "tier": "batch"}, "task": shell("true")}),
        ),
        (
            "healthcheck-ping",
            json!({"schedule": "0 * * * * *", "description": "Pings the status page",
            "task": shell("true")}),
        ),
        (
            "report-mailer",
            json!({"schedule": "0 0 9 * * 1", "timezone": "America/New_York",
            "description": "Mails the weekly report to the board", "task": shell("true")}),
        ),
        (
            "backup-verify",
            json!({"schedule": "0 45 4 * * *", "timezone": "Asia/Tokyo",
            "labels": {"team": "ops", "tier": "critical"}, "task": shell("true")}),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn twelve_jobs_fit_a_laptop_screen_sort_filter_as_you_type_and_act_from_one_menu() -> anyhow::Result<()> {
    let c = Cluster::start("ui-jobs-list", 1).await?;
    for (name, spec) in twelve_jobs() {
        c.put_job(name, spec).await?;
    }
    for _ in 0..3 {
        let run = c.run_now("flaky-import").await?;
        c.record_when(&run, "failed").await?;
    }
    let run = c.run_now("cache-warmup").await?;
    c.record_when(&run, "succeeded").await?;
    browser("jobslist.mjs", &c.master.url, &c.logs)?;
    screenshots(
        &c.logs,
        &[
            "jobs-12-fit.png",
            "jobs-menu.png",
            "job-summary.png",
            "jobs-390-menu.png",
            "jobs-390-menu-last.png",
            "job-390-menu.png",
        ],
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hundred_thirty_jobs_are_paged_filtered_on_the_server_and_suggested_by_name() -> anyhow::Result<()> {
    let c = Cluster::start("ui-job-pages", 1).await?;
    let changes: Vec<_> = (0..230)
        .map(|i| {
            let command = if i == 42 { "exit 3" } else { "true" };
            json!({"job": format!("page-{i:03}"), "op": "put",
                "spec": {"schedule": "@yearly", "task": {"kind": "shell", "command": command}}})
        })
        .collect();
    let (status, saved) = c.call(Method::POST, "/api/batch", Some(json!({ "changes": changes }))).await?;
    assert_eq!(status, 200, "{saved}");
    let failed = c.run_now("page-042").await?;
    c.record_when(&failed, "failed").await?;
    let ok = c.run_now("page-100").await?;
    c.record_when(&ok, "succeeded").await?;
    browser("jobpages.mjs", &c.master.url, &c.logs)?;
    screenshots(&c.logs, &["jobs-pages-3.png", "jobs-health-failing.png", "executions-job-suggest.png"]);
    Ok(())
}
