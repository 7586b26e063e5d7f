//! Runs with parameters (`POST /api/jobs/{job}/run` with `env` and `scheduled_at`, `etcronctl
//! jobs run --env --as-of`): the task sees the overrides over the spec's env and the as-of
//! time as `ETCRON_SCHEDULED_AT`; the record keeps them; a retry and a failover rerun (its
//! worker killed mid-run) run with the same parameters; two workers race each run and it runs
//! once; bad parameters are refused naming the field.

use std::path::Path;
use std::time::Duration;

use etcron_tests::{bin, wait_for, Cluster};
use reqwest::Method;
use serde_json::{json, Value};

/// One line per run: `execution-id attempt worker DAY=… MODE=… AT=…`.
fn command(file: &Path, then: &str) -> String {
    format!(
        "echo \"$ETCRON_EXECUTION_ID $ETCRON_ATTEMPT $ETCRON_WORKER_ID DAY=$REPORT_DAY MODE=$MODE AT=$ETCRON_SCHEDULED_AT\" >> {}; {then}",
        file.display()
    )
}

fn lines(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file).unwrap_or_default().lines().map(str::to_owned).collect()
}

/// The lines of `execution` (any attempt: ids differ only after the `#`).
fn lines_of(file: &Path, execution: &str) -> Vec<String> {
    let base = execution.split('#').next().unwrap();
    lines(file).into_iter().filter(|l| l.starts_with(&format!("{base}#"))).collect()
}

async fn run(c: &Cluster, job: &str, body: Value) -> (u16, Value) {
    c.call(Method::POST, &format!("/api/jobs/{job}/run"), Some(body)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_with_parameters_keeps_them_through_retries_and_failover_and_runs_once() -> anyhow::Result<()> {
    let mut c = Cluster::start("run-params", 2).await?;
    let file = c.path("runs");
    let env = json!({"MODE": "spec"});
    let params = json!({"REPORT_DAY": {"default": "spec-day"}, "FAIL": {"pattern": "[01]"}});
    c.put_job(
        "report",
        json!({"schedule": "@yearly", "retries": {"max": 1, "backoff": "1s"},
               "task": {"kind": "shell", "command": command(&file, "exit ${FAIL:-0}"), "env": env, "params": params}}),
    )
    .await?;

    // Overrides over the spec's env, and the time it runs as of.
    let (status, answer) =
        run(&c, "report", json!({"env": {"REPORT_DAY": "2026-11-01"}, "scheduled_at": "2026-11-02T01:00:00+01:00"}))
            .await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["params"], json!({"env": {"REPORT_DAY": "2026-11-01"}, "as_of_ms": 1_793_577_600_000_i64}));
    let id = answer["execution_id"].as_str().unwrap();
    let done = c.record_when(id, "succeeded").await?;
    assert_eq!(done["scheduled_at"], "2026-11-02T00:00:00.000Z");
    assert_eq!(done["params"], answer["params"]);
    let ran = lines_of(&file, id);
    assert_eq!(ran.len(), 1, "two workers raced the run: {ran:?}");
    assert!(ran[0].ends_with("DAY=2026-11-01 MODE=spec AT=2026-11-02T00:00:00.000Z"), "{ran:?}");

    // A failed attempt's retry runs with the same parameters.
    let (_, answer) = run(&c, "report", json!({"env": {"FAIL": "1", "REPORT_DAY": "retried"}})).await;
    let id = answer["execution_id"].as_str().unwrap().to_owned();
    let retry = id.replace("#1", "#2");
    let last = c.record_when(&retry, "failed").await?;
    assert_eq!(last["params"]["env"], json!({"FAIL": "1", "REPORT_DAY": "retried"}));
    assert_eq!(last["trigger"], "retry");
    let ran = lines_of(&file, &id);
    assert_eq!(ran.len(), 2, "the attempt and its retry, once each: {ran:?}");
    assert!(ran.iter().all(|l| l.contains(" DAY=retried MODE=spec ")), "{ran:?}");

    // A run whose worker dies is rerun elsewhere with its parameters and as-of time.
    c.put_job(
        "slow",
        json!({"schedule": "@yearly", "on_worker_loss": "rerun",
               "task": {"kind": "shell", "command": command(&file, "[ \"$ETCRON_ATTEMPT\" = 1 ] && sleep 60; exit 0"),
                        "params": ["REPORT_DAY"]}}),
    )
    .await?;
    let (_, answer) =
        run(&c, "slow", json!({"env": {"REPORT_DAY": "failover"}, "scheduled_at": "2026-01-01T00:00:00Z"})).await;
    let id = answer["execution_id"].as_str().unwrap().to_owned();
    let first = wait_for(Duration::from_secs(30), "the first attempt to start", || async {
        lines_of(&file, &id).first().cloned()
    })
    .await?;
    let worker = first.split(' ').nth(2).unwrap().to_owned();
    // Its running marker (with the parameters) is written.
    c.wait_running_marker(&id).await?;
    c.workers.iter_mut().find(|w| w.opts.id == worker).unwrap().proc.kill9();
    let rerun = c.record_when(&id.replace("#1", "#2"), "succeeded").await?;
    assert_eq!(rerun["trigger"], "failover");
    assert_eq!(rerun["params"], json!({"env": {"REPORT_DAY": "failover"}, "as_of_ms": 1_767_225_600_000_i64}));
    assert_eq!(rerun["scheduled_at"], "2026-01-01T00:00:00.000Z");
    let lost = c.record_when(&id, "lost").await?;
    assert_eq!(lost["params"], rerun["params"]);
    let ran = lines_of(&file, &id);
    assert_eq!(ran.len(), 2, "the lost attempt and one rerun: {ran:?}");
    assert!(ran[1].ends_with("DAY=failover MODE= AT=2026-01-01T00:00:00.000Z") && !ran[1].contains(&worker), "{ran:?}");

    // etcronctl: --env and --as-of; a malformed --env is a usage error.
    let ctl = |args: &[&str]| {
        let mut cmd = std::process::Command::new(bin("etcronctl").unwrap());
        cmd.args(args).env("ETCRON_SERVER", &c.master.url).env_remove("ETCRON_TOKEN");
        cmd.output().unwrap()
    };
    let out = ctl(&[
        "jobs",
        "run",
        "report",
        "--env",
        "REPORT_DAY=from-ctl",
        "--as-of",
        "2026-11-03T00:00:00Z",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let answer: Value = serde_json::from_slice(&out.stdout)?;
    let id = answer["execution_id"].as_str().unwrap();
    c.record_when(id, "succeeded").await?;
    assert!(lines_of(&file, id)[0].ends_with("DAY=from-ctl MODE=spec AT=2026-11-03T00:00:00.000Z"));
    let out = ctl(&["jobs", "run", "report", "--env", "NOEQUALS"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--env \"NOEQUALS\": expected NAME=value"), "{out:?}");
    let out = ctl(&["jobs", "run", "report", "--env", "ETCRON_JOB=x"]);
    assert_eq!(out.status.code(), Some(2), "the master's 400: {out:?}");
    Ok(())
}

/// A run sets data, never control: only the names its spec declares in `task.params`, never a
/// name of `env` or `secret_env`, never a loader or interpreter variable, each value as its
/// pattern says; and the worker checks again against the spec it runs.
#[tokio::test(flavor = "multi_thread")]
async fn bad_parameters_are_refused_naming_the_field() -> anyhow::Result<()> {
    let mut c = Cluster::start("run-params-bad", 0).await?;
    c.put_job("sh", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "true"}})).await?;
    c.put_job(
        "py",
        json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "python3 -c 'print(1)'",
               "env": {"API_URL": "https://api.internal/v1"}, "secret_env": {"API_TOKEN": "t0ken"},
               "params": {"DAY": {"pattern": "[0-9]{4}-[0-9]{2}-[0-9]{2}"}}}}),
    )
    .await?;
    // What an operator ran code with before: loader, shell and interpreter variables, the
    // spec's own destination and secret, a value that smuggles a command after a valid one.
    for (name, value) in [
        ("BASH_ENV", "$(id>/tmp/pwned)"),
        ("SHELLOPTS", "xtrace"),
        ("PS4", "$(id)"),
        ("LD_PRELOAD", "/tmp/x.so"),
        ("PATH", "/tmp"),
        ("PYTHONWARNINGS", "ignore::antigravity.x"),
        ("BROWSER", "sh -c id"),
        ("API_URL", "http://127.0.0.1:9/steal"),
        ("API_TOKEN", "mine"),
        ("DAY", "2026-11-01; id"),
    ] {
        let (status, answer) = run(&c, "py", json!({"env": {name: value}})).await;
        let field = format!("env.{name}");
        assert_eq!((status, answer["error"]["field"].as_str()), (400, Some(field.as_str())), "{name}: {answer}");
    }
    let (_, answer) = run(&c, "py", json!({"env": {"BASH_ENV": "x"}})).await;
    assert!(answer["error"]["message"].as_str().unwrap().contains("it declares DAY"), "{answer}");
    let (status, answer) = run(&c, "sh", json!({"env": {"A": "1"}})).await;
    assert_eq!((status, answer["error"]["field"].as_str()), (400, Some("env.A")), "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("declares none"), "{answer}");
    // Declaring a loader variable, or a name the spec sets itself, is refused at save.
    for (params, field) in [
        (json!(["LD_PRELOAD"]), "task.params.LD_PRELOAD"),
        (json!({"bash_env": {}}), "task.params.bash_env"),
        (json!(["https_proxy"]), "task.params.https_proxy"),
        (json!(["API_URL"]), "task.params.API_URL"),
        (json!(["API_TOKEN"]), "task.params.API_TOKEN"),
        (json!({"DAY": {"pattern": "[0-9]+", "default": "today"}}), "task.params.DAY.default"),
        (json!({"DAY": {"pattern": "(("}}), "task.params.DAY.pattern"),
    ] {
        let spec = json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "true",
                          "env": {"API_URL": "https://api.internal/v1"}, "secret_env": {"API_TOKEN": "t"},
                          "params": params}});
        let (status, answer) = c.call(Method::PUT, "/api/jobs/decl", Some(spec)).await?;
        assert_eq!((status, answer["error"]["field"].as_str()), (400, Some(field)), "{answer}");
    }

    // The worker checks again, against the spec it runs: a run request that names a parameter
    // the spec does not declare (asked for before the spec dropped it, or written by an older
    // master) is refused and recorded with the reason; nothing runs.
    c.add_worker(etcron_tests::WorkerOpts::new("w1"))?;
    c.wait_workers(1).await?;
    let file = c.path("ran");
    c.put_job(
        "later",
        json!({"schedule": "@yearly", "task": {"kind": "shell", "command": format!("echo \"DAY=$DAY\" >> {}", file.display())}}),
    )
    .await?;
    let mut request =
        etcron_model::stored::TriggerRequest::manual(etcron_tests::now_ms(), "asked before DAY was dropped");
    request.params.env.insert("DAY".to_owned(), "2026-11-01".to_owned());
    let key = etcron_model::keys::Keys::new(&c.namespace)?.trigger("later", "00000000000000aa");
    c.etcd.client().await?.put(key, serde_json::to_vec(&request)?, None).await?;
    let refused = c.record_when("later@manual-00000000000000aa#1", "failed").await?;
    let reason = refused["error"].as_str().unwrap_or_default();
    assert!(reason.contains("run parameter refused: env.DAY"), "{refused}");
    assert!(!file.exists(), "the task ran: {:?}", std::fs::read_to_string(&file));
    c.put_job("web", json!({"schedule": "@yearly", "task": {"kind": "http", "url": "http://127.0.0.1:9/x"}})).await?;
    for (job, body, field) in [
        ("sh", json!({"env": {"ETCRON_JOB": "x"}}), Some("env.ETCRON_JOB")),
        ("sh", json!({"env": {"A": 5}}), Some("env.A")),
        ("sh", json!({"env": {"1A": "x"}}), Some("env.1A")),
        ("sh", json!({"env": ["A=1"]}), Some("env")),
        ("sh", json!({"scheduled_at": "soon"}), Some("scheduled_at")),
        ("sh", json!({"scheduled_at": "10000-01-01T00:00:00Z"}), Some("scheduled_at")),
        ("sh", json!({"params": {}}), Some("params")),
        ("sh", json!([]), None),
        ("web", json!({"env": {"A": "1"}}), Some("env")),
    ] {
        let (status, answer) = run(&c, job, body.clone()).await;
        assert_eq!((status, answer["error"]["field"].as_str()), (400, field), "{body}: {answer}");
    }
    // An HTTP task may still be run as of a time; nothing was requested by the refusals.
    let (status, answer) = run(&c, "web", json!({"scheduled_at": "2026-01-01T00:00:00Z"})).await;
    assert_eq!(status, 202, "{answer}");
    let (status, answer) = run(&c, "missing", json!({})).await;
    assert_eq!(status, 404, "{answer}");
    Ok(())
}
