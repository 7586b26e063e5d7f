//! `etcronctl` against real clusters, run as a process like an operator would: job files applied
//! (TOML, YAML, JSON; unchanged, updated, dry run, prune, invalid and duplicate files), every
//! job command in table and JSON output, runs and kills with a worker, execution search (with
//! `--follow` as a child process) and live output, export → delete → import, tokens, and the
//! exit codes of not found (3) and conflicts (4), the latter through an interposed proxy that
//! edits the job between etcronctl's read and its write, as a console user would; and every
//! command's exit code against no server, a server that is not a master, bad arguments, a dry
//! run and a kill with nothing running; resource pools (`pools ls|get|put|delete`) with slots held
//! and ticks waiting, and a run's own `--priority`.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcron_model::keys::Keys;
use etcron_tests::{bin, wait_for, Cluster};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// What one etcronctl run printed and its exit code.
#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl From<std::process::Output> for Out {
    fn from(out: std::process::Output) -> Self {
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Out {
    fn ok(self) -> Self {
        assert_eq!(self.code, 0, "etcronctl failed: {self:?}");
        self
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }
}

/// Runs etcronctl against `server` with `env` (ETCRON_TOKEN is never inherited).
async fn ctl_at(server: &str, env: &[(&str, &str)], args: &[&str]) -> Out {
    let mut cmd = tokio::process::Command::new(bin("etcronctl").unwrap());
    cmd.args(args).env("ETCRON_SERVER", server).env_remove("ETCRON_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    tokio::time::timeout(Duration::from_secs(60), cmd.output()).await.expect("etcronctl hung").unwrap().into()
}

async fn ctl(c: &Cluster, args: &[&str]) -> Out {
    ctl_at(&c.master.url, &[], args).await
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), text).unwrap();
}

/// Every job's spec as the API shows it, by name.
async fn specs(c: &Cluster) -> BTreeMap<String, Value> {
    let list = c.get("/api/jobs").await.unwrap();
    list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["name"].as_str().unwrap().to_owned(), j["spec"].clone()))
        .collect()
}

async fn job(c: &Cluster, name: &str) -> (u16, Value) {
    c.call(Method::GET, &format!("/api/jobs/{name}"), None).await.unwrap()
}

const ALPHA_TOML: &str = r#"
[jobs.alpha]
schedule = "@yearly"
description = "from toml"
labels = { team = "data" }
timeout = "10m"

[jobs.alpha.task]
kind = "shell"
command = "echo alpha"
"#;

const BETA_YAML: &str = "jobs:\n  beta:\n    schedule: '0 3 * * *'\n    timezone: Europe/Berlin\n    task: {kind: shell, command: echo beta}\n";

const GAMMA_JSON: &str = r#"{"jobs": {"gamma": {"schedule": "@daily", "retries": {"max": 2},
    "task": {"kind": "http", "method": "POST", "url": "http://127.0.0.1:9/hook"}}}}"#;

#[tokio::test(flavor = "multi_thread")]
async fn apply_files_and_job_commands() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-apply", 1).await?;
    let dir = c.path("jobs");
    write(&dir, "a.toml", ALPHA_TOML);
    write(&dir, "b.yaml", BETA_YAML);
    write(&dir, "c.json", GAMMA_JSON);
    write(&dir, "README.txt", "not a job file");
    let dir_arg = dir.display().to_string();

    // A directory of the three formats: every job created, as the files say.
    let out = ctl(&c, &["jobs", "apply", "-f", &dir_arg]).await.ok();
    assert!(out.stdout.contains("created    alpha"), "{}", out.stdout);
    assert!(out.stdout.contains("3 created, 0 updated, 0 unchanged, 0 deleted"), "{}", out.stdout);
    let (_, alpha) = job(&c, "alpha").await;
    assert_eq!(alpha["spec"]["description"], "from toml");
    assert_eq!(alpha["spec"]["labels"], json!({"team": "data"}));
    assert_eq!(job(&c, "beta").await.1["spec"]["timezone"], "Europe/Berlin");
    assert_eq!(job(&c, "gamma").await.1["spec"]["task"]["kind"], "http");

    // Applying again changes nothing.
    let out = ctl(&c, &["jobs", "apply", "-f", &dir_arg]).await.ok();
    assert!(out.stdout.contains("0 created, 0 updated, 3 unchanged, 0 deleted"), "{}", out.stdout);
    assert_eq!(job(&c, "alpha").await.1["revision"], alpha["revision"]);

    // A changed file: the dry run shows the field and changes nothing; then it is applied.
    write(&dir, "b.yaml", &BETA_YAML.replace("echo beta", "echo beta2"));
    let before = job(&c, "beta").await.1;
    let out = ctl(&c, &["jobs", "apply", "-f", &dir_arg, "--dry-run"]).await;
    assert_eq!(out.code, 7, "a dry run with changes pending: {out:?}");
    assert!(out.stdout.contains("update     beta"), "{}", out.stdout);
    assert!(out.stdout.contains("~ task.command: \"echo beta\" → \"echo beta2\""), "{}", out.stdout);
    assert!(out.stdout.contains("0 created, 1 updated, 2 unchanged, 0 deleted (dry run"), "{}", out.stdout);
    assert_eq!(job(&c, "beta").await.1, before, "a dry run changes nothing");
    let out = ctl(&c, &["jobs", "apply", "-f", &dir_arg, "-o", "json"]).await.ok();
    let report = out.json();
    assert_eq!(report["summary"], json!({"created": 0, "updated": 1, "unchanged": 2, "deleted": 0, "failed": 0}));
    let beta = job(&c, "beta").await.1;
    assert_eq!(beta["spec"]["task"]["command"], "echo beta2");
    let change = report["changes"].as_array().unwrap().iter().find(|ch| ch["job"] == "beta").unwrap().clone();
    assert_eq!(change["revision"], beta["revision"]);

    // A job removed from the files: only --prune deletes it, and --dry-run only lists it.
    std::fs::remove_file(dir.join("c.json"))?;
    let out = ctl(&c, &["jobs", "apply", "-f", &dir_arg]).await.ok();
    assert!(out.stdout.contains("0 created, 0 updated, 2 unchanged, 0 deleted"), "{}", out.stdout);
    // --prune never means the whole cluster by default: it needs a scope.
    let out = ctl(&c, &["jobs", "apply", "-f", &dir_arg, "--prune"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--prune needs a scope"), "{}", out.stderr);
    let out = ctl(&c, &["jobs", "apply", "-f", &dir_arg, "--prune", "-l", "team=ops", "--dry-run"]).await.ok();
    assert!(out.stdout.contains("0 deleted") && out.stderr.contains("pruning among jobs with team=ops"), "{out:?}");
    let out = ctl(&c, &["jobs", "apply", "-f", &dir_arg, "--prune-all", "--dry-run"]).await;
    assert_eq!(out.code, 7, "a dry run with a deletion pending: {out:?}");
    assert!(out.stdout.contains("delete     gamma"), "{}", out.stdout);
    assert_eq!(job(&c, "gamma").await.0, 200);
    let out = ctl(&c, &["jobs", "apply", "-f", &dir_arg, "--prune-all"]).await.ok();
    assert!(out.stdout.contains("0 created, 0 updated, 2 unchanged, 1 deleted"), "{}", out.stdout);
    assert_eq!(job(&c, "gamma").await.0, 404);

    // An invalid file: exit 2 naming the file, the job and the field, and nothing is applied.
    let bad = c.path("bad");
    write(&bad, "ok.yaml", "jobs:\n  fine: {schedule: '@daily', task: {kind: shell, command: 'true'}}\n");
    write(
        &bad,
        "typo.toml",
        "[jobs.typo]\nschedule = \"@daily\"\n[jobs.typo.task]\nkind = \"shell\"\ncomand = \"ls\"\n",
    );
    let out = ctl(&c, &["jobs", "apply", "-f", &bad.display().to_string()]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("typo.toml: job \"typo\": task.comand: unknown field `comand`"), "{}", out.stderr);
    assert_eq!(job(&c, "fine").await.0, 404, "nothing applied from an invalid set of files");

    // A job defined in two files: exit 2 naming both.
    let dup = c.path("dup");
    write(
        &dup,
        "one.toml",
        "[jobs.twice]\nschedule = \"@daily\"\n[jobs.twice.task]\nkind = \"shell\"\ncommand = \"a\"\n",
    );
    write(
        &dup,
        "two.json",
        r#"{"jobs": {"twice": {"schedule": "@daily", "task": {"kind": "shell", "command": "b"}}}}"#,
    );
    let out = ctl(&c, &["jobs", "apply", "-f", &dup.display().to_string()]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("two.json: job \"twice\": is defined twice: also in"), "{}", out.stderr);
    assert!(out.stderr.contains("one.toml"), "{}", out.stderr);

    // Reversing a dependency across one apply: b → a is refused while a → b is stored, so it is
    // retried after a's update.
    let swap = c.path("swap");
    let edge =
        |to: &[&str]| json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "true"}, "on_success": to});
    write(&swap, "s.json", &json!({"jobs": {"swap-a": edge(&["swap-b"]), "swap-b": edge(&[])}}).to_string());
    ctl(&c, &["jobs", "apply", "-f", &swap.display().to_string()]).await.ok();
    write(&swap, "s.json", &json!({"jobs": {"swap-b": edge(&["swap-a"]), "swap-a": edge(&[])}}).to_string());
    let out = ctl(&c, &["jobs", "apply", "-f", &swap.display().to_string()]).await.ok();
    assert!(out.stdout.contains("0 created, 2 updated"), "{}", out.stdout);
    assert_eq!(job(&c, "swap-b").await.1["spec"]["on_success"], json!(["swap-a"]));
    ctl(&c, &["jobs", "rm", "swap-a", "swap-b"]).await.ok();

    // ls: a table with a header, filters, and the API's JSON.
    let out = ctl(&c, &["jobs", "ls"]).await.ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("NEXT RUN") && lines[0].contains("LAST STATUS"),
        "{}",
        out.stdout
    );
    assert!(
        lines.iter().any(|l| l.starts_with("alpha ") && l.contains("@yearly") && l.contains(" enabled ")),
        "{}",
        out.stdout
    );
    assert!(lines.iter().any(|l| l.starts_with("beta ") && l.contains("Europe/Berlin")), "{}", out.stdout);
    let out = ctl(&c, &["jobs", "ls", "--label", "team=data"]).await.ok();
    assert!(out.stdout.contains("alpha") && !out.stdout.contains("beta"), "{}", out.stdout);
    // -o wide: the labels and the description too.
    let out = ctl(&c, &["jobs", "ls", "-o", "wide", "--label", "team=data"]).await.ok();
    let header = out.stdout.lines().next().unwrap_or_default();
    assert!(header.contains("LABELS") && header.ends_with("DESCRIPTION"), "{}", out.stdout);
    assert!(out.stdout.lines().any(|l| l.starts_with("alpha ") && l.contains("team=data")), "{}", out.stdout);
    let out = ctl(&c, &["jobs", "ls", "-o", "json"]).await.ok();
    let listed = out.json();
    let names: Vec<&str> = listed["jobs"].as_array().unwrap().iter().map(|j| j["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["alpha", "beta"]);

    // get: a summary with the spec as YAML, or the job as a job file.
    let out = ctl(&c, &["jobs", "get", "alpha"]).await.ok();
    assert!(out.stdout.contains("name:             alpha"), "{}", out.stdout);
    assert!(out.stdout.contains("spec:\n") && out.stdout.contains("  description: from toml"), "{}", out.stdout);
    let out = ctl(&c, &["jobs", "get", "alpha", "-o", "json"]).await.ok();
    assert_eq!(out.json(), json!({"jobs": {"alpha": job(&c, "alpha").await.1["spec"]}}));

    // A handler job (an executor's, `etcron-sdk`): applied from a file like any job; describe
    // names the handler and says that no live executor has it (w1 is a plain worker).
    let handler = c.path("handler");
    write(
        &handler,
        "h.yaml",
        "jobs:\n  hot-list:\n    schedule: '@daily'\n    task: {kind: handler, name: hot-list, env: {REGION: eu}}\n",
    );
    let out = ctl(&c, &["jobs", "apply", "-f", &handler.display().to_string()]).await.ok();
    assert!(out.stdout.contains("created    hot-list"), "{}", out.stdout);
    let out = ctl(&c, &["jobs", "describe", "hot-list"]).await.ok();
    let task = out.stdout.lines().find(|l| l.starts_with("task:")).unwrap_or_default();
    assert!(task.ends_with("handler: hot-list (no live executor has it)"), "{}", out.stdout);
    let out = ctl(&c, &["jobs", "get", "hot-list"]).await.ok();
    assert!(out.stdout.contains("eligible workers: 0") && out.stdout.contains("kind: handler"), "{}", out.stdout);
    let out = ctl(&c, &["workers", "ls"]).await.ok();
    assert!(!out.stdout.contains("HANDLERS"), "no executor is live: no HANDLERS column: {}", out.stdout);
    ctl(&c, &["jobs", "rm", "hot-list"]).await.ok();

    // pause / resume: the pause is the job's state, not its spec; ls filters on it.
    let out = ctl(&c, &["jobs", "pause", "alpha", "--reason", "db migration"]).await.ok();
    assert!(out.stdout.contains("job alpha paused: db migration"), "{}", out.stdout);
    assert_eq!(job(&c, "alpha").await.1["paused"]["reason"], "db migration");
    let out = ctl(&c, &["jobs", "pause", "alpha", "--until", "2h"]).await.ok();
    assert!(out.stdout.contains("job alpha paused until 20"), "{}", out.stdout);
    assert!(job(&c, "alpha").await.1["paused"]["until"].is_string());
    let out = ctl(&c, &["jobs", "pause", "alpha", "--until", "someday"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("\"someday\" is not a time"), "{out:?}");
    // A local time is read in the job's zone (Tokyo: +09:00 all year): the next 08:00 there.
    c.put_job(
        "in-tokyo",
        json!({"schedule": "@daily", "timezone": "Asia/Tokyo", "task": {"kind": "shell", "command": "true"}}),
    )
    .await?;
    ctl(&c, &["jobs", "pause", "in-tokyo", "--until", "08:00"]).await.ok();
    let until = job(&c, "in-tokyo").await.1["paused"]["until"].as_str().unwrap().to_owned();
    let until = chrono::DateTime::parse_from_rfc3339(&until)?;
    let tokyo = chrono::FixedOffset::east_opt(9 * 3600).unwrap();
    let ahead = until.signed_duration_since(chrono::Utc::now());
    assert_eq!(until.with_timezone(&tokyo).format("%H:%M").to_string(), "08:00", "{until}");
    assert!(ahead > chrono::Duration::zero() && ahead <= chrono::Duration::hours(24), "the next one: {until}");
    let day = (chrono::Utc::now() + chrono::Duration::days(2)).with_timezone(&tokyo).date_naive();
    ctl(&c, &["jobs", "pause", "in-tokyo", "--until", &format!("{day} 08:30")]).await.ok();
    let until = job(&c, "in-tokyo").await.1["paused"]["until"].as_str().unwrap().to_owned();
    let expected = format!("{day}T08:30:00+09:00");
    assert_eq!(chrono::DateTime::parse_from_rfc3339(&until)?, chrono::DateTime::parse_from_rfc3339(&expected)?);
    ctl(&c, &["jobs", "rm", "in-tokyo"]).await.ok();
    let long = "x".repeat(501);
    let out = ctl(&c, &["jobs", "pause", "alpha", "--reason", &long]).await;
    assert_eq!(out.code, 2, "a 400 naming the reason: {out:?}");
    assert!(out.stderr.contains("reason"), "{}", out.stderr);
    let out = ctl(&c, &["jobs", "ls", "--status", "paused"]).await.ok();
    assert!(out.stdout.contains("alpha") && !out.stdout.contains("beta"), "{}", out.stdout);
    // The STATE column, get and describe say how long the pause lasts.
    let until = job(&c, "alpha").await.1["paused"]["until"].as_str().unwrap().to_owned();
    let short = chrono::DateTime::parse_from_rfc3339(&until)?.with_timezone(&chrono::Utc).format("%m-%d %H:%MZ");
    assert!(out.stdout.contains(&format!("paused until {short}")), "{}", out.stdout);
    let out = ctl(&c, &["jobs", "get", "alpha"]).await.ok();
    assert!(out.stdout.contains(&format!(" until {until}")), "{}", out.stdout);
    // @yearly: the first run after the pause, the job's next 1 January.
    let after = job(&c, "alpha").await.1["paused"]["next_run_after"].as_str().unwrap().to_owned();
    assert!(after.contains("-01-01T00:00:00"), "{after}");
    assert!(out.stdout.contains(&format!("next runs:        {after} (the first after the pause)")), "{}", out.stdout);
    let out = ctl(&c, &["jobs", "describe", "alpha"]).await.ok();
    assert!(out.stdout.contains(&format!(" until {until}")), "{}", out.stdout);
    ctl(&c, &["jobs", "resume", "alpha"]).await.ok();
    assert!(job(&c, "alpha").await.1["paused"].is_null());

    // rm, and not found (3) for a job that is not there.
    let out = ctl(&c, &["jobs", "rm", "beta"]).await.ok();
    assert_eq!(out.stdout, "deleted beta\n");
    c.put_job("b2", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "true"}})).await?;
    let out = ctl(&c, &["jobs", "rm", "b2", "nope", "-o", "json"]).await;
    assert_eq!((out.code, out.json()), (3, json!({"deleted": ["b2"]})), "{out:?}");
    assert_eq!(job(&c, "beta").await.0, 404);
    let out = ctl(&c, &["jobs", "rm", "beta"]).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(
        out.stderr.starts_with("etcronctl: deleting job \"beta\": not_found (404): job \"beta\" does not exist"),
        "{}",
        out.stderr
    );
    for args in [["jobs", "get", "nope"], ["jobs", "run", "nope"], ["jobs", "pause", "nope"]] {
        let out = ctl(&c, &args).await;
        assert_eq!(out.code, 3, "{args:?}: {out:?}");
    }
    assert_eq!(ctl(&c, &["executions", "get", "nope@1#1"]).await.code, 3);

    // workers ls names the worker.
    let out = ctl(&c, &["workers", "ls"]).await.ok();
    assert!(out.stdout.starts_with("ID") && out.stdout.contains("CAPACITY"), "{}", out.stdout);
    assert!(out.stdout.contains("TASKS RUN AS") && out.stdout.contains(" root "), "{}", out.stdout);
    assert!(out.stdout.lines().any(|l| l.starts_with("w1 ")), "{}", out.stdout);
    let out = ctl(&c, &["workers", "ls", "-o", "json"]).await.ok();
    assert_eq!(out.json()["workers"][0]["id"], "w1");
    assert!(out.json()["workers"][0]["cordon"].is_null(), "{}", out.stdout);

    // workers cordon / drain --wait / uncordon; the STATE column says which.
    let state = |out: &Out| {
        out.stdout.lines().find(|l| l.starts_with("w1 ")).map(|l| l.split_whitespace().nth(1).unwrap_or("").to_owned())
    };
    assert_eq!(state(&ctl(&c, &["workers", "ls"]).await.ok()).as_deref(), Some("ready"));
    let out = ctl(&c, &["workers", "cordon", "w1"]).await.ok();
    assert!(out.stdout.starts_with("worker w1 cordoned"), "{out:?}");
    assert_eq!(state(&ctl(&c, &["workers", "ls"]).await.ok()).as_deref(), Some("cordoned"));
    let out = ctl(&c, &["workers", "drain", "w1", "--wait", "30s"]).await.ok();
    assert!(out.stdout.ends_with("worker w1 drained: nothing runs on it\n"), "{out:?}");
    assert_eq!(state(&ctl(&c, &["workers", "ls"]).await.ok()).as_deref(), Some("drained"));
    let out = ctl(&c, &["workers", "uncordon", "w1", "-o", "json"]).await.ok();
    assert_eq!(out.json(), json!({"id": "w1", "was_cordoned": true}));
    assert_eq!(state(&ctl(&c, &["workers", "ls"]).await.ok()).as_deref(), Some("ready"));
    assert_eq!(ctl(&c, &["workers", "drain", "w7"]).await.code, 3, "an unknown worker is not found");

    // schedule preview: good and bad.
    let out = ctl(&c, &["schedule", "preview", "0 9 * * 1-5", "--timezone", "Asia/Tokyo", "--count", "3"]).await.ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", out.stdout);
    assert!(lines[0].contains("Asia/Tokyo"), "{}", out.stdout);
    assert!(lines[1..].iter().all(|l| l.contains("T09:00:00")), "{}", out.stdout);
    let out = ctl(&c, &["schedule", "preview", "61 * * * *"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.starts_with("etcronctl: schedule \"61 * * * *\": invalid (400): schedule: "), "{}", out.stderr);
    // From a chosen instant: New York's spring-forward day, where 02:30 runs at 03:00.
    let args = ["--timezone", "America/New_York", "--count", "2", "--after", "2026-03-07T20:00:00-05:00"];
    let out = ctl(&c, &[&["schedule", "preview", "30 2,14 * * *"][..], &args].concat()).await.ok();
    assert_eq!(
        out.stdout,
        "At 02:30 and 14:30 every day (America/New_York)\n2026-03-08T03:00:00.000-04:00\n2026-03-08T14:30:00.000-04:00\n"
    );
    // The same instant as a local time in --timezone.
    let local = ["--timezone", "America/New_York", "--count", "2", "--after", "2026-03-07 20:00"];
    let same = ctl(&c, &[&["schedule", "preview", "30 2,14 * * *"][..], &local].concat()).await.ok();
    assert_eq!(same.stdout, out.stdout);
    let out = ctl(&c, &["schedule", "preview", "@daily", "--after", "soon"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("'--after <TIME>': \"soon\" is not a time"), "{}", out.stderr);

    // completions, a usage error, and an unreachable master.
    let out = ctl(&c, &["completions", "bash"]).await.ok();
    for word in ["jobs", "apply", "executions", "workers", "export", "import"] {
        assert!(out.stdout.contains(word), "{word}");
    }
    assert_eq!(ctl(&c, &["jobs", "frobnicate"]).await.code, 2);
    let out = ctl_at("http://127.0.0.1:1", &[], &["jobs", "ls"]).await;
    assert_eq!(out.code, 6, "{out:?}");
    assert!(out.stderr.contains("cannot reach the master at http://127.0.0.1:1"), "{}", out.stderr);
    assert!(out.stderr.contains("ETCRON_SERVER"), "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "one line: {}", out.stderr);
    Ok(())
}

/// Reads a child's stdout lines into a shared buffer (a thread, since the read blocks).
fn collect_lines(stdout: std::process::ChildStdout) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            sink.lock().unwrap().push(line);
        }
    });
    lines
}

/// The execution of `id` once `check` accepts it.
async fn execution(c: &Cluster, id: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let path = format!("/api/executions/{}", etcron_tests::urlencode(id));
    wait_for(Duration::from_secs(30), what, || async {
        let (status, v) = c.call(Method::GET, &path, None).await.ok()?;
        (status == 200 && check(&v)).then_some(v)
    })
    .await
    .unwrap()
}

/// `jobs run NAME`: the execution id it printed.
async fn run(c: &Cluster, name: &str) -> String {
    let out = ctl(c, &["jobs", "run", name]).await.ok();
    assert!(out.stdout.starts_with("request_id:"), "{}", out.stdout);
    out.stdout.lines().find_map(|l| l.strip_prefix("execution_id: ")).unwrap().trim().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_kills_and_executions() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-runs", 1).await?;
    let yearly = |command: &str| json!({"schedule": "@yearly", "task": {"kind": "shell", "command": command}});
    c.put_job("hello", yearly("echo hello-$ETCRON_TRIGGER")).await?;
    c.put_job("sleeper", yearly("sleep 60")).await?;

    // Watch the job's executions from before it runs, as a child process.
    let mut follow = std::process::Command::new(bin("etcronctl")?)
        .args(["executions", "search", "--job", "hello", "-w"])
        .env("ETCRON_SERVER", &c.master.url)
        .env_remove("ETCRON_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let followed = collect_lines(follow.stdout.take().unwrap());

    // run: an execution with trigger manual shows up and succeeds.
    let id = run(&c, "hello").await;
    assert!(id.starts_with("hello@manual-"), "{id}");
    let record = execution(&c, &id, "the manual run to succeed", |v| v["status"] == "succeeded").await;
    assert_eq!(record["trigger"], "manual");
    wait_for(Duration::from_secs(30), "--watch to print the finished run", || async {
        let lines = followed.lock().unwrap();
        lines.iter().any(|l| l.starts_with(&id) && l.contains("succeeded")).then_some(())
    })
    .await?;
    follow.kill()?;
    follow.wait()?;
    let lines = followed.lock().unwrap().clone();
    assert!(lines[0].starts_with("ID") && lines[0].contains("STATUS"), "{lines:?}");

    // search with filters, in both outputs.
    let out =
        ctl(&c, &["executions", "search", "--job", "hello", "--status", "succeeded,failed", "--trigger", "manual"])
            .await
            .ok();
    assert!(out.stdout.lines().next().unwrap().starts_with("ID"), "{}", out.stdout);
    assert!(out.stdout.contains(&id) && out.stdout.contains("exit 0"), "{}", out.stdout);
    let out = ctl(&c, &["executions", "search", "--job", "hello", "--status", "failed"]).await.ok();
    assert!(!out.stdout.contains(&id), "{}", out.stdout);
    let out =
        ctl(&c, &["executions", "search", "-q", "hello", "--worker", "w1", "--since", "1h", "-o", "json"]).await.ok();
    assert_eq!(out.json()["executions"][0]["id"], id.as_str());
    let out = ctl(&c, &["executions", "search", "--all", "--limit", "1", "-o", "json"]).await.ok();
    assert_eq!(out.json()["executions"].as_array().unwrap().len(), 1, "one record in all");
    assert_eq!(ctl(&c, &["executions", "search", "--status", "sleepy"]).await.code, 2, "the API refuses the filter");

    // get: the record with its output.
    let out = ctl(&c, &["executions", "get", &id]).await.ok();
    assert!(out.stdout.contains("status:        succeeded"), "{}", out.stdout);
    assert!(out.stdout.contains("trigger:       manual"), "{}", out.stdout);
    assert!(out.stdout.ends_with("output:\nhello-manual\n"), "{}", out.stdout);
    let out = ctl(&c, &["executions", "get", &id, "-o", "json"]).await.ok();
    assert_eq!(out.json()["output"], "hello-manual\n");

    // kill: every running execution of the job, then one by id.
    for by_id in [false, true] {
        let id = run(&c, "sleeper").await;
        execution(&c, &id, "sleep 60 to run", |v| v["status"] == "running").await;
        let out = if by_id {
            ctl(&c, &["jobs", "kill", "sleeper", "--execution", &id]).await.ok()
        } else {
            ctl(&c, &["jobs", "kill", "sleeper"]).await.ok()
        };
        let target = if by_id { format!("execution {id}") } else { "every running execution".to_owned() };
        assert!(out.stdout.starts_with(&format!("kill requested for {target} of job sleeper")), "{}", out.stdout);
        execution(&c, &id, "the killed record", |v| v["status"] == "killed").await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn executions_get_follow_streams_live_output() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-stream", 1).await?;
    let yearly = |command: &str| json!({"schedule": "@yearly", "task": {"kind": "shell", "command": command}});
    c.put_job("ticker", yearly("for i in 1 2 3 4 5 6; do echo line-$i; sleep 0.5; done")).await?;
    c.put_job("broken", yearly("echo before; sleep 1; echo after; exit 3")).await?;

    let id = run(&c, "ticker").await;
    execution(&c, &id, "the ticker to run", |v| v["status"] == "running").await;
    let out = ctl(&c, &["executions", "get", &id, "--follow"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines, ["line-1", "line-2", "line-3", "line-4", "line-5", "line-6"], "{out:?}");
    assert!(out.stderr.contains(&format!("execution {id}: succeeded")), "{}", out.stderr);

    // A run that fails: its output, then exit code 5; JSON events for scripts.
    let id = run(&c, "broken").await;
    execution(&c, &id, "the broken job to run", |v| v["status"] == "running").await;
    let out = ctl(&c, &["executions", "get", &id, "--follow"]).await;
    assert_eq!(out.code, 5, "{out:?}");
    assert!(out.stdout.ends_with("after\n"), "{out:?}");
    assert!(out.stderr.contains(&format!("execution {id}: failed")), "{}", out.stderr);
    let out = ctl(&c, &["executions", "get", &id, "--follow", "-o", "json"]).await;
    assert_eq!(out.code, 5, "{out:?}");
    let last: Value = serde_json::from_str(out.stdout.lines().last().unwrap())?;
    assert_eq!(last["event"], "status");
    assert_eq!(last["execution"]["status"], "failed");
    let out = ctl(&c, &["executions", "get", "ticker@1#1", "--follow"]).await;
    assert_eq!(out.code, 3, "unknown execution: {out:?}");

    // A task reporting progress: its reports on stderr, its output (lines included) on stdout.
    let gate = c.path("go");
    c.put_job(
        "reporter",
        yearly(&format!(
            "echo '::etcron progress 40 loading'; while [ ! -e {gate} ]; do sleep 0.05; done; \
             echo '::etcron progress 80 almost'; echo '::etcron checkpoint {{\"n\":1}}'; sleep 3",
            gate = gate.display()
        )),
    )
    .await?;
    let id = run(&c, "reporter").await;
    execution(&c, &id, "the reporter to report", |v| v["progress"]["percent"] == 40.0).await;
    std::fs::write(&gate, "")?;
    let out = ctl(&c, &["logs", &id, "--follow"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("progress 80%: almost (checkpoint stored)"), "{}", out.stderr);
    assert!(out.stdout.contains("::etcron progress 80 almost"), "{}", out.stdout);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn export_delete_import_round_trip() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-export", 0).await?;
    let dir = c.path("src");
    write(&dir, "a.toml", ALPHA_TOML);
    write(&dir, "b.yaml", BETA_YAML);
    write(
        &dir,
        "c.json",
        r#"{"jobs": {"gamma": {"schedule": "@every 30m", "enabled": false, "mode": {"sharded": 3}, "concurrency": "forbid",
            "on_success": ["alpha"], "limits": {"memory": "64MiB"},
            "task": {"kind": "shell", "command": "echo $ETCRON_SHARD_INDEX", "env": {"A": "1"}, "cwd": "/tmp"}},
            "hook": {"schedule": "@at 2030-01-01T00:00:00Z",
            "task": {"kind": "http", "url": "http://127.0.0.1:9/x", "headers": {"X-A": "b"}, "expect_status": 204}}}}"#,
    );
    ctl(&c, &["jobs", "apply", "-f", &dir.display().to_string()]).await.ok();
    let original = specs(&c).await;
    assert_eq!(original.len(), 4);

    for format in ["toml", "yaml", "json"] {
        let file = c.path(&format!("backup.{format}"));
        let file_arg = file.display().to_string();
        let out = ctl(&c, &["export", "-f", &file_arg]).await.ok();
        assert!(out.stderr.contains("exported 4 job(s)"), "{}", out.stderr);
        let names: Vec<String> = original.keys().cloned().collect();
        let mut rm = vec!["jobs", "rm"];
        rm.extend(names.iter().map(String::as_str));
        ctl(&c, &rm).await.ok();
        assert!(specs(&c).await.is_empty());
        let out = ctl(&c, &["import", &file_arg]).await.ok();
        assert!(out.stdout.contains("4 created, 0 updated, 0 unchanged, 0 deleted"), "{format}: {}", out.stdout);
        assert_eq!(specs(&c).await, original, "{format} round trip");
    }
    // To stdout, TOML unless told otherwise.
    let out = ctl(&c, &["export"]).await.ok();
    assert!(out.stdout.contains("[jobs.alpha]"), "{}", out.stdout);
    let out = ctl(&c, &["export", "--format", "json"]).await.ok();
    assert_eq!(out.json()["jobs"]["beta"], original["beta"]);
    let out = ctl(&c, &["export", "-o", "json"]).await.ok();
    assert_eq!(out.json()["jobs"]["gamma"], original["gamma"]);
    assert_eq!(ctl(&c, &["export", "-f", "x.yaml", "--format", "json"]).await.code, 2, "format and extension disagree");
    // One file per job, each saying only what differs from the defaults; imported back, the
    // same jobs.
    let per_job = c.path("per-job");
    let dir_arg = per_job.display().to_string();
    let out = ctl(&c, &["export", "--dir", &dir_arg, "--omit-defaults"]).await.ok();
    assert!(out.stderr.contains("exported 4 job(s)"), "{out:?}");
    let mut files: Vec<String> =
        std::fs::read_dir(&per_job)?.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    assert_eq!(files, ["alpha.toml", "beta.toml", "gamma.toml", "hook.toml"]);
    let gamma = std::fs::read_to_string(per_job.join("gamma.toml"))?;
    assert!(gamma.contains("concurrency = \"forbid\"") && !gamma.contains("timezone"), "only what it sets: {gamma}");
    let full = ctl(&c, &["export", "gamma"]).await.ok().stdout;
    assert!(full.contains("timezone = \"UTC\""), "without --omit-defaults every field is written: {full}");
    let mut rm = vec!["jobs", "rm"];
    rm.extend(original.keys().map(String::as_str));
    ctl(&c, &rm).await.ok();
    let out = ctl(&c, &["import", &dir_arg]).await.ok();
    assert!(out.stdout.contains("4 created, 0 updated, 0 unchanged, 0 deleted"), "{}", out.stdout);
    assert_eq!(specs(&c).await, original, "--dir --omit-defaults round trip");
    assert_eq!(ctl(&c, &["export", "--dir", &dir_arg, "-f", "x.toml"]).await.code, 2, "one or the other");

    // Secrets: the export names them and holds no value; an import keeps the stored values of
    // jobs that exist and refuses, before any change, jobs whose values nobody can give back.
    c.put_job(
        "secretive",
        json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "true", "secret_env": {"PW": "hunter2"}}}),
    )
    .await?;
    let file = c.path("with-secret.toml");
    let file_arg = file.display().to_string();
    let out = ctl(&c, &["export", "-f", &file_arg]).await.ok();
    assert!(out.stderr.contains("secretive: task.secret_env.PW"), "{}", out.stderr);
    let text = std::fs::read_to_string(&file)?;
    assert!(!text.contains("hunter2") && text.contains("keep = true"), "{text}");
    let out = ctl(&c, &["import", &file_arg]).await.ok();
    assert!(out.stdout.contains("0 created, 0 updated, 5 unchanged, 0 deleted"), "{}", out.stdout);
    ctl(&c, &["jobs", "rm", "secretive", "alpha"]).await.ok();
    let out = ctl(&c, &["import", &file_arg]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("job \"secretive\": task.secret_env.PW: no value given"), "{}", out.stderr);
    assert_eq!(job(&c, "alpha").await.0, 404, "nothing was imported");
    let out = ctl(&c, &["import", &file_arg, "--prune-all", "--dry-run"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    Ok(())
}

const TOKEN: &str = "ctl-test-token-0123456789abcdef";

#[tokio::test(flavor = "multi_thread")]
async fn tokens_come_from_the_flag_or_the_environment() -> anyhow::Result<()> {
    let c = Cluster::start_with("ctl-token", 0, false, &["--api-token", TOKEN]).await?;
    let out = ctl(&c, &["jobs", "ls"]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.starts_with("etcronctl: listing jobs: unauthorized (401): Authorization: "), "{}", out.stderr);
    let out = ctl_at(&c.master.url, &[("ETCRON_TOKEN", "wrong-token-0123456789")], &["jobs", "ls"]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("not valid"), "{}", out.stderr);
    let out = ctl_at(&c.master.url, &[("ETCRON_TOKEN", TOKEN)], &["jobs", "ls"]).await.ok();
    assert!(out.stdout.starts_with("NAME"), "{}", out.stdout);
    ctl(&c, &["--token", TOKEN, "workers", "ls"]).await.ok();
    Ok(())
}

/// A proxy in front of the master that, before forwarding the first write (PUT) of `job`, saves
/// `job` through the API itself: the console user who edits a job between etcronctl's read and
/// its write. It records the precondition headers etcronctl sent.
struct Interloper {
    url: String,
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

impl Interloper {
    async fn start(master: String, job: &'static str, edit: Value) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut edited = false;
            while let Ok((mut sock, _)) = listener.accept().await {
                let Some((method, path, headers, body)) = read_request(&mut sock).await else { continue };
                let put = method == "PUT" && path == format!("/api/jobs/{job}");
                // etcronctl apply sends its changes as one batch; the change to `job` carries the
                // precondition a PUT would send as a header.
                let batched = (method == "POST" && path == "/api/batch")
                    .then(|| serde_json::from_slice::<Value>(&body).unwrap_or_default())
                    .and_then(|b| b["changes"].as_array()?.iter().find(|c| c["job"] == job).cloned());
                if (put || batched.is_some()) && !edited {
                    edited = true;
                    for h in ["if-match", "if-none-match"] {
                        let sent = match &batched {
                            Some(change) => match &change[h.replace('-', "_")] {
                                Value::Null => None,
                                Value::String(v) => Some(v.clone()),
                                v => Some(v.to_string()),
                            },
                            None => headers.iter().find(|(k, _)| k == h).map(|(_, v)| v.clone()),
                        };
                        if let Some(v) = sent {
                            record.lock().unwrap().push((h.to_owned(), v));
                        }
                    }
                    let resp = http.put(format!("{master}/api/jobs/{job}")).json(&edit).send().await.unwrap();
                    assert!(resp.status().is_success(), "the interloper's edit");
                }
                let mut req = http.request(method.parse().unwrap(), format!("{master}{path}")).body(body);
                for (k, v) in &headers {
                    if !["host", "content-length", "connection"].contains(&k.as_str()) {
                        req = req.header(k, v);
                    }
                }
                let resp = req.send().await.unwrap();
                let status = resp.status();
                let body = resp.bytes().await.unwrap();
                let head = format!(
                    "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    status.as_u16(),
                    status.canonical_reason().unwrap_or(""),
                    body.len()
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(&body).await;
                let _ = sock.shutdown().await;
            }
        });
        Self { url, seen }
    }
}

/// One HTTP/1.1 request: method, path, lowercased headers, body (by content-length).
async fn read_request(sock: &mut tokio::net::TcpStream) -> Option<(String, String, Vec<(String, String)>, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_owned(), first.next()?.to_owned());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned())))
        .collect();
    let length: usize =
        headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = buf[end + 4..].to_vec();
    while body.len() < length {
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((method, path, headers, body))
}

#[tokio::test(flavor = "multi_thread")]
async fn conflicts_exit_4_and_nothing_is_overwritten() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-conflict", 0).await?;
    let spec = |command: &str| json!({"schedule": "@yearly", "task": {"kind": "shell", "command": command}});
    let files = c.path("files");
    write(&files, "racy.json", &json!({"jobs": {"racy": spec("from the file")}}).to_string());
    write(&files, "fresh.json", &json!({"jobs": {"fresh": spec("from the file")}}).to_string());

    // An update: etcronctl read revision R and sends If-Match: R; someone saved in between.
    c.put_job("racy", spec("original")).await?;
    let read = job(&c, "racy").await.1["revision"].as_i64().unwrap();
    let proxy = Interloper::start(c.master.url.clone(), "racy", spec("the console's edit")).await;
    let out = ctl_at(&proxy.url, &[], &["jobs", "apply", "-f", &files.join("racy.json").display().to_string()]).await;
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.contains("job \"racy\""), "{}", out.stderr);
    assert!(out.stderr.contains("conflict (409): job \"racy\" was changed by someone else"), "{}", out.stderr);
    assert_eq!(*proxy.seen.lock().unwrap(), [("if-match".to_owned(), read.to_string())]);
    assert_eq!(job(&c, "racy").await.1["spec"]["task"]["command"], "the console's edit", "not overwritten");

    // A create: If-None-Match: * and someone created it in between.
    let proxy = Interloper::start(c.master.url.clone(), "fresh", spec("the console's job")).await;
    let out = ctl_at(&proxy.url, &[], &["jobs", "apply", "-f", &files.join("fresh.json").display().to_string()]).await;
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.contains("already exists"), "{}", out.stderr);
    assert_eq!(*proxy.seen.lock().unwrap(), [("if-none-match".to_owned(), "*".to_owned())]);
    assert_eq!(job(&c, "fresh").await.1["spec"]["task"]["command"], "the console's job", "not overwritten");

    // pause of a job whose stored value is not a valid spec (written around the API) is a
    // conflict too; apply replaces that value and says why.
    let keys = Keys::new(&c.namespace).unwrap();
    let mut etcd = c.etcd.client().await?;
    etcd.put(keys.job("broken"), r#"{"schedule": 5}"#, None).await?;
    let out = ctl(&c, &["jobs", "pause", "broken"]).await;
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.starts_with("etcronctl: pausing job \"broken\": conflict (409): "), "{}", out.stderr);
    let out = ctl(&c, &["jobs", "ls", "--status", "invalid"]).await.ok();
    assert!(out.stdout.lines().any(|l| l.starts_with("broken ") && l.contains("invalid")), "{}", out.stdout);
    write(&files, "broken.json", &json!({"jobs": {"broken": spec("fixed")}}).to_string());
    let out = ctl(&c, &["jobs", "apply", "-f", &files.join("broken.json").display().to_string()]).await.ok();
    assert!(out.stdout.contains("updated    broken") && out.stdout.contains("not a valid spec"), "{}", out.stdout);
    ctl(&c, &["jobs", "pause", "broken"]).await.ok();
    Ok(())
}

/// Answers every request with a 404 page, as a web server at a mistyped `--server` would.
async fn not_a_master() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = read_request(&mut sock).await;
                let page = "<html><body>Not Found</body></html>";
                let head = format!(
                    "HTTP/1.1 404 Not Found\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    page.len()
                );
                let _ = sock.write_all(format!("{head}{page}").as_bytes()).await;
            });
        }
    });
    url
}

/// The exit code table (etcronctl's `exit.rs`, the README) holds for every command: no master
/// at `--server` is 6 whether nothing listens or another server answers, never "not found";
/// a bad argument is 2 whichever side notices it; `--dry-run` is 7 with changes pending and 0
/// without; a kill with nothing running says so and succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn every_command_exits_with_the_documented_codes() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-exit-codes", 0).await?;
    let dir = tempfile::tempdir()?;
    write(dir.path(), "a.toml", ALPHA_TOML);
    let file = dir.path().join("a.toml").display().to_string();
    write(dir.path(), "crontab", "CRON_TZ=UTC\n0 3 * * * true\n");
    let crontab = dir.path().join("crontab").display().to_string();
    let commands: Vec<Vec<&str>> = vec![
        vec!["jobs", "ls"],
        vec!["jobs", "get", "alpha"],
        vec!["jobs", "apply", "-f", &file],
        vec!["jobs", "rm", "alpha"],
        vec!["jobs", "run", "alpha"],
        vec!["jobs", "kill", "alpha"],
        vec!["jobs", "pause", "alpha"],
        vec!["jobs", "resume", "alpha"],
        vec!["executions", "search"],
        vec!["executions", "search", "--follow"],
        vec!["executions", "search", "--watch"],
        vec!["executions", "get", "alpha@1795309040000#1"],
        vec!["executions", "get", "alpha@1795309040000#1", "--follow"],
        vec!["jobs", "describe", "alpha"],
        vec!["jobs", "edit", "alpha"],
        vec!["logs", "alpha"],
        vec!["logs", "alpha@1795309040000#1", "--follow"],
        vec!["workers", "ls"],
        vec!["workers", "cordon", "w1"],
        vec!["workers", "drain", "w1", "--wait", "1m"],
        vec!["workers", "uncordon", "w1"],
        vec!["schedule", "preview", "0 9 * * *"],
        vec!["export"],
        vec!["import", &file],
        vec!["import", "--crontab", &crontab],
    ];
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        format!("http://{}", l.local_addr()?)
    };
    let page = not_a_master().await;
    for server in [&closed, &page] {
        for args in &commands {
            let out = ctl_at(server, &[], &[args.as_slice(), &["--timeout", "5s"]].concat()).await;
            assert_eq!(out.code, 6, "{args:?} at {server}: {out:?}");
            assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
            assert!(out.stderr.starts_with("etcronctl: ") && out.stderr.lines().count() == 1, "{args:?}: {out:?}");
        }
    }

    // The same mistake is 2 whether etcronctl or the master notices it.
    let bad_status = ctl(&c, &["jobs", "ls", "--status", "sleeping"]).await;
    assert_eq!(bad_status.code, 2, "{bad_status:?}");
    let bad_search = ctl(&c, &["executions", "search", "--since", "yesterday-ish"]).await;
    assert_eq!(bad_search.code, 2, "{bad_search:?}");
    assert!(bad_search.stderr.contains("since"), "{bad_search:?}");

    // A dry run: 7 while the file would change the server, 0 once it matches.
    let out = ctl(&c, &["jobs", "apply", "-f", &file, "--dry-run"]).await;
    assert_eq!(out.code, 7, "{out:?}");
    assert!(out.stdout.contains("1 created") && out.stdout.contains("dry run"), "{out:?}");
    assert_eq!(job(&c, "alpha").await.0, 404, "a dry run changes nothing");
    ctl(&c, &["jobs", "apply", "-f", &file]).await.ok();
    let out = ctl(&c, &["import", &file, "--dry-run"]).await.ok();
    assert!(out.stdout.contains("1 unchanged"), "{out:?}");

    // A kill with nothing running succeeds and says so; the JSON carries the count.
    let out = ctl(&c, &["jobs", "kill", "alpha"]).await.ok();
    assert_eq!(out.stdout, "nothing to kill: job alpha has no running execution\n");
    let out = ctl(&c, &["jobs", "kill", "alpha", "--execution", "alpha@1795309040000#1", "-o", "json"]).await.ok();
    assert_eq!(out.json()["running"], 0);
    let out = ctl(&c, &["jobs", "kill", "alpha", "--execution", "alpha@1795309040000#1"]).await.ok();
    assert_eq!(out.stdout, "nothing to kill: execution alpha@1795309040000#1 is not running\n");

    // Not found stays 3 from a real master.
    assert_eq!(ctl(&c, &["jobs", "get", "nope"]).await.code, 3);
    Ok(())
}

/// A repository of 300 jobs applied against a master with the default change limits (20/s,
/// burst 100) goes in one batch request; under a limit of one change request a second, apply
/// waits out each `429` as its `Retry-After` says, so nothing fails.
#[tokio::test(flavor = "multi_thread")]
async fn a_large_repository_applies_in_one_request_and_waits_out_the_rate_limit() -> anyhow::Result<()> {
    let defaults = ["--mutation-rate", "20", "--mutation-burst", "100"];
    let c = Cluster::start_with("ctl-apply-limited", 0, false, &defaults).await?;
    let dir = tempfile::tempdir()?;
    let repo = |n: usize, command: &str| -> String {
        (0..n)
            .map(|i| format!("[jobs.repo-{i:03}]\nschedule = \"@yearly\"\ntask = {{ kind = \"shell\", command = \"{command}\" }}\n\n"))
            .collect()
    };
    write(dir.path(), "repo.toml", &repo(300, "true"));
    let out = ctl(&c, &["jobs", "apply", "-f", &dir.path().display().to_string()]).await.ok();
    assert!(out.stdout.contains("300 created, 0 updated, 0 unchanged, 0 deleted"), "{out:?}");
    assert_eq!(specs(&c).await.len(), 300);
    assert_eq!(c.master.proc.log_text().matches("batch applied").count(), 1, "one request");

    // One change request a second, none in reserve: the updates and the prune are two
    // requests, each told to wait.
    let strict = ["--mutation-rate", "1", "--mutation-burst", "1"];
    let c = Cluster::start_with("ctl-apply-strict", 0, false, &strict).await?;
    write(dir.path(), "repo.toml", &repo(5, "true"));
    ctl(&c, &["jobs", "apply", "-f", &dir.path().display().to_string()]).await.ok();
    write(dir.path(), "repo.toml", &repo(3, "echo changed"));
    let out = ctl(&c, &["jobs", "apply", "--prune-all", "-f", &dir.path().display().to_string()]).await.ok();
    assert!(out.stdout.contains("0 created, 3 updated, 0 unchanged, 2 deleted"), "{out:?}");
    assert!(c.master.proc.log_text().contains("rate limit hit"), "the limit was met and waited out");
    assert_eq!(specs(&c).await.len(), 3);
    Ok(())
}

/// `jobs run --follow` right after the request, 20 times in a row on a task that ends at once:
/// the stream waits for a run that is requested but not yet claimed and for a record on its way,
/// so it never answers 404. A failing job with a retry is followed to its final attempt.
#[tokio::test(flavor = "multi_thread")]
async fn run_follow_never_races_the_record_and_follows_retries() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-run-follow", 1).await?;
    c.put_job(
        "fast",
        json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "echo fast-$ETCRON_ATTEMPT"}}),
    )
    .await?;
    for i in 0..20 {
        let out = ctl(&c, &["jobs", "run", "fast", "--follow"]).await;
        assert_eq!(out.code, 0, "run {i}: {out:?}");
        assert_eq!(out.stdout, "fast-1\n", "run {i}: {out:?}");
        assert!(out.stderr.contains(": succeeded"), "run {i}: {out:?}");
    }
    let flaky = json!({"schedule": "@yearly", "retries": {"max": 1, "backoff": "1s"},
                       "task": {"kind": "shell", "command": "echo try-$ETCRON_ATTEMPT; exit 3"}});
    c.put_job("flaky", flaky).await?;
    let out = ctl(&c, &["jobs", "run", "flaky", "--follow"]).await;
    assert_eq!(out.code, 5, "the final attempt failed: {out:?}");
    assert_eq!(out.stdout, "try-1\ntry-2\n", "{out:?}");
    assert!(out.stderr.contains("following the retry"), "{out:?}");
    assert_eq!(out.stderr.matches(": failed (exit code 3)").count(), 2, "{out:?}");
    Ok(())
}

/// Runs etcronctl against the cluster with `input` on its standard input.
async fn ctl_stdin(c: &Cluster, args: &[&str], input: &str) -> Out {
    let mut cmd = tokio::process::Command::new(bin("etcronctl").unwrap());
    cmd.args(args).env("ETCRON_SERVER", &c.master.url).env_remove("ETCRON_TOKEN");
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("etcronctl hung")
        .unwrap()
        .into()
}

/// One job exported to stdout goes back in through standard input (`-`), and a file without an
/// extension is read by its content: `export NAME | import -` copies a job as it is.
#[tokio::test(flavor = "multi_thread")]
async fn one_job_exports_to_a_pipe_and_imports_from_stdin_or_any_file() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-stdin", 0).await?;
    let dir = c.path("src");
    write(&dir, "a.toml", ALPHA_TOML);
    write(&dir, "b.yaml", BETA_YAML);
    ctl(&c, &["jobs", "apply", "-f", &dir.display().to_string()]).await.ok();
    let original = specs(&c).await;
    for format in ["toml", "yaml", "json"] {
        let exported = ctl(&c, &["export", "beta", "--format", format]).await.ok().stdout;
        assert!(exported.contains("beta") && !exported.contains("alpha"), "{format}: {exported}");
        ctl(&c, &["jobs", "rm", "beta"]).await.ok();
        let out = ctl_stdin(&c, &["import", "-f", "-"], &exported).await.ok();
        assert!(out.stdout.contains("1 created"), "{format}: {out:?}");
        assert_eq!(specs(&c).await, original, "{format} through a pipe");
        // A file named without a known extension (as `crontab`-style tools keep them).
        write(&dir, "beta-backup", &exported);
        let out = ctl(&c, &["jobs", "apply", "-f", &dir.join("beta-backup").display().to_string()]).await.ok();
        assert!(out.stdout.contains("1 unchanged"), "{format}: {out:?}");
    }
    assert_eq!(ctl(&c, &["export", "nope"]).await.code, 3, "a job that does not exist");
    Ok(())
}

/// `-o yaml` prints the document `-o json` prints, as YAML, for every kind of command: lists,
/// one object, a plan, a streamed search (a YAML document per record), and `export`'s default.
#[tokio::test(flavor = "multi_thread")]
async fn yaml_output_is_the_json_document() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-yaml", 1).await?;
    let dir = c.path("jobs");
    write(&dir, "a.toml", ALPHA_TOML);
    write(&dir, "b.yaml", BETA_YAML);
    let dir_arg = dir.display().to_string();
    ctl(&c, &["jobs", "apply", "-f", &dir_arg]).await.ok();
    c.wait_workers(1).await?;
    let id = run(&c, "alpha").await;
    execution(&c, &id, "the run to end", |v| v["status"] == "succeeded").await;
    let preview = ["schedule", "preview", "0 9 * * 1-5", "--after", "2026-03-07T00:00:00Z", "--count", "3"];
    let commands: Vec<Vec<&str>> = vec![
        vec!["jobs", "ls"],
        vec!["workers", "ls"],
        preview.to_vec(),
        vec!["executions", "search", "--job", "alpha"],
        vec!["executions", "get", &id],
        vec!["jobs", "apply", "-f", &dir_arg],
        vec!["jobs", "get", "alpha"],
    ];
    for args in &commands {
        let json = ctl(&c, &[args.as_slice(), &["-o", "json"]].concat()).await.ok();
        let yaml = ctl(&c, &[args.as_slice(), &["-o", "yaml"]].concat()).await.ok();
        assert!(!yaml.stdout.trim_start().starts_with('{'), "{args:?}: {}", yaml.stdout);
        let read: Value = serde_norway::from_str(&yaml.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {yaml:?}"));
        assert_eq!(read, json.json(), "{args:?}");
    }
    // A dry run with changes pending: the plan as YAML, and exit 7 all the same.
    write(&dir, "b.yaml", &BETA_YAML.replace("echo beta", "echo beta2"));
    let out = ctl(&c, &["jobs", "apply", "-f", &dir_arg, "--dry-run", "-o", "yaml"]).await;
    assert_eq!(out.code, 7, "{out:?}");
    let plan: Value = serde_norway::from_str(&out.stdout)?;
    assert_eq!(plan["summary"]["updated"], 1, "{}", out.stdout);
    // export's default format follows -o.
    let out = ctl(&c, &["export", "beta", "-o", "yaml"]).await.ok();
    let exported: Value = serde_norway::from_str(&out.stdout)?;
    assert_eq!(exported["jobs"]["beta"], job(&c, "beta").await.1["spec"]);
    // A stream: one YAML document per record, each opened by `---`.
    let out = ctl(&c, &["executions", "get", &id, "--follow", "-o", "yaml"]).await.ok();
    assert!(out.stdout.starts_with("---\n"), "{}", out.stdout);
    let events: Vec<Value> = out.stdout.split("---\n").skip(1).map(|d| serde_norway::from_str(d).unwrap()).collect();
    let last = events.last().unwrap();
    assert_eq!((&last["event"], &last["execution"]["id"]), (&json!("status"), &json!(id)), "{}", out.stdout);
    Ok(())
}

/// `jobs get NAME -o yaml` (and `-o json`) is a job file: piped into `jobs apply -f -` it
/// changes nothing, secrets included (the API withholds their values; `null` keeps them), and
/// an edit of it applies as an update of that one field.
#[tokio::test(flavor = "multi_thread")]
async fn get_prints_a_job_file_that_applies_unchanged() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-get-apply", 0).await?;
    let dir = c.path("jobs");
    write(&dir, "a.toml", ALPHA_TOML);
    write(&dir, "b.yaml", BETA_YAML);
    ctl(&c, &["jobs", "apply", "-f", &dir.display().to_string()]).await.ok();
    c.put_job(
        "secretive",
        json!({"schedule": "@yearly", "retries": {"max": 2}, "labels": {"team": "ops"},
               "task": {"kind": "shell", "command": "true", "env": {"A": "1"}, "secret_env": {"PW": "hunter2"}}}),
    )
    .await?;
    let before = specs(&c).await;
    let revisions = |list: Value| -> Vec<Value> {
        list["jobs"].as_array().unwrap().iter().map(|j| j["revision"].clone()).collect()
    };
    let revs = revisions(c.get("/api/jobs").await?);
    for name in ["alpha", "beta", "secretive"] {
        for format in ["yaml", "json"] {
            let file = ctl(&c, &["jobs", "get", name, "-o", format]).await.ok().stdout;
            assert!(!file.contains("hunter2"), "{file}");
            let out = ctl_stdin(&c, &["jobs", "apply", "-v", "-f", "-"], &file).await.ok();
            assert_eq!(
                out.stdout.lines().next().unwrap(),
                format!("unchanged  {name} (-)"),
                "{name} {format}: {out:?}"
            );
            assert!(out.stdout.contains("0 created, 0 updated, 1 unchanged"), "{name} {format}: {out:?}");
        }
    }
    assert_eq!(specs(&c).await, before);
    assert_eq!(revisions(c.get("/api/jobs").await?), revs, "nothing was written");

    // An edited copy applies as an update of that field; the stored secret is kept.
    let file = ctl(&c, &["jobs", "get", "secretive", "-o", "yaml"]).await.ok().stdout;
    assert!(file.starts_with("jobs:\n  secretive:\n"), "{file}");
    let out = ctl_stdin(&c, &["jobs", "apply", "-f", "-"], &file.replace("command: 'true'", "command: echo changed"))
        .await
        .ok();
    assert!(out.stdout.contains("~ task.command: \"true\" → \"echo changed\""), "{out:?}");
    let saved = job(&c, "secretive").await.1;
    assert_eq!(saved["spec"]["task"]["secret_env"], json!({"PW": null}));
    assert_eq!(ctl(&c, &["jobs", "get", "nope", "-o", "yaml"]).await.code, 3);
    Ok(())
}

/// Secrets from the environment and from files: sent as values on every apply, since they are
/// never shown; the master writes the job only when a value differs (a real save compares, and a
/// wrong value would overwrite the secret), so applying the same values again is `unchanged`: no
/// new revision, no saved version. A dry run never compares them (that would confirm guesses for
/// free): it plans an update naming the secrets sent, never their values.
#[tokio::test(flavor = "multi_thread")]
async fn secret_references_are_sent_on_every_apply_written_when_changed_and_never_shown() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-secret-refs", 0).await?;
    let dir = tempfile::tempdir()?;
    write(dir.path(), "db.token", "file-secret-1\n");
    let file = dir.path().join("jobs.toml");
    write(
        dir.path(),
        "jobs.toml",
        "[jobs.deploy]\nschedule = \"@yearly\"\n[jobs.deploy.task]\nkind = \"shell\"\ncommand = \"true\"\n\
         secret_env = { API_TOKEN = { env = \"DEPLOY_TOKEN\" }, DB = { file = \"db.token\" } }\n",
    );
    let f = file.display().to_string();
    let apply = |token: &'static str, extra: &'static [&'static str]| {
        let mut args = vec!["jobs", "apply", "-f", f.as_str()];
        args.extend_from_slice(extra);
        let server = c.master.url.clone();
        async move { ctl_at(&server, &[("DEPLOY_TOKEN", token)], &args).await }
    };
    assert!(apply("env-secret-1", &[]).await.ok().stdout.contains("1 created"));
    let stored = || async {
        let key = Keys::new(&c.namespace).unwrap().job("deploy");
        let kvs = c.etcd.client().await.unwrap().get(key, None).await.unwrap();
        serde_json::from_slice::<Value>(kvs.kvs()[0].value()).unwrap()["task"]["secret_env"].clone()
    };
    assert_eq!(stored().await, json!({"API_TOKEN": "env-secret-1", "DB": "file-secret-1"}));
    // The job's revision and how many versions its history keeps.
    let saved = || async {
        let revision = job(&c, "deploy").await.1["revision"].as_i64().unwrap();
        let history = c.get("/api/jobs/deploy/history").await.unwrap();
        (revision, history["versions"].as_array().unwrap().len())
    };
    let first = saved().await;

    // The same values: sent, found equal by the master, nothing written.
    let out = apply("env-secret-1", &["-v"]).await.ok();
    assert!(out.stdout.contains("unchanged  deploy") && out.stdout.contains("0 updated, 1 unchanged"), "{out:?}");
    assert_eq!(saved().await, first, "no new revision, no saved version");
    let out = apply("env-secret-1", &["-o", "json"]).await.ok().json();
    assert_eq!((&out["changes"][0]["action"], &out["changes"][0]["applied"]), (&json!("unchanged"), &json!(false)));
    assert_eq!(out["summary"]["unchanged"], 1, "{out}");
    assert_eq!(saved().await, first);

    // A dry run cannot tell, the same values or a new one: an update naming the secrets sent,
    // never their values.
    for token in ["env-secret-1", "env-secret-2"] {
        let out = apply(token, &["--dry-run"]).await;
        assert_eq!(out.code, 7, "{out:?}");
        assert!(
            out.stdout.contains(
                "secret values cannot be read back to compare (task.secret_env.API_TOKEN, task.secret_env.DB): \
                 sent; the master writes the job only if they differ from the stored ones"
            ),
            "{out:?}"
        );
        assert!(!out.stdout.contains("env-secret") && !out.stdout.contains("file-secret"), "{out:?}");
    }
    assert_eq!(saved().await, first, "a dry run changes nothing");

    // A new value is written: a new revision and a new saved version.
    assert!(apply("env-secret-2", &[]).await.ok().stdout.contains("1 updated"));
    assert_eq!(stored().await["API_TOKEN"], "env-secret-2");
    let second = saved().await;
    assert!(second.0 > first.0 && second.1 == first.1 + 1, "{first:?} → {second:?}");

    // An unset variable is an invalid file: exit 2, naming the secret, nothing sent.
    let out = ctl_at(&c.master.url, &[], &["jobs", "apply", "-f", &f]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("task.secret_env.API_TOKEN") && out.stderr.contains("DEPLOY_TOKEN is not set"),
        "{out:?}"
    );
    Ok(())
}

/// `jobs describe`: the spec in short, next runs, health counted from the records (two failed
/// runs in a row, then a success resets it), the run in progress and the last runs; `-o json`
/// is one document with the same parts.
#[tokio::test(flavor = "multi_thread")]
async fn describe_shows_health_running_and_last_runs() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-describe", 1).await?;
    let flag = c.path("succeed-now");
    let command = format!("if [ -e {0} ]; then echo fine; else echo broken; exit 3; fi", flag.display());
    c.put_job(
        "flaky",
        json!({"schedule": "0 3 * * *", "timezone": "Europe/Berlin", "description": "fails until told",
               "labels": {"team": "data"}, "task": {"kind": "shell", "command": command}}),
    )
    .await?;
    c.put_job("sleeper", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "sleep 60"}})).await?;
    let mut failed = Vec::new();
    for _ in 0..2 {
        let id = run(&c, "flaky").await;
        execution(&c, &id, "the failed run", |v| v["status"] == "failed").await;
        failed.push(id);
    }

    let out = ctl(&c, &["jobs", "describe", "flaky"]).await.ok();
    let text = &out.stdout;
    assert!(text.starts_with("name:         flaky\n"), "{text}");
    assert!(text.contains("state:        enabled\n"), "{text}");
    assert!(text.contains("schedule:     0 3 * * * (Europe/Berlin): "), "{text}");
    assert!(text.contains("description:  fails until told\n") && text.contains("labels:       team=data\n"), "{text}");
    let next = text.split("Next runs:\n").nth(1).unwrap();
    assert_eq!(next.lines().take_while(|l| l.starts_with("  20")).count(), 5, "{text}");
    assert!(text.contains(&format!("  last finished:      failed {} ", failed[1])), "{text}");
    assert!(text.contains("  failures in a row:  2\n"), "{text}");
    assert!(text.contains("Running now:\n  none\n"), "{text}");
    let last = text.split("Last runs:\n").nth(1).unwrap();
    assert!(last.lines().next().unwrap().trim_start().starts_with("ID"), "{text}");
    assert!(failed.iter().all(|id| last.contains(id.as_str())), "{text}");

    // A success resets the count; the JSON holds the same parts.
    std::fs::write(&flag, "")?;
    let ok = run(&c, "flaky").await;
    execution(&c, &ok, "the good run", |v| v["status"] == "succeeded").await;
    let doc = ctl(&c, &["jobs", "describe", "flaky", "-o", "json"]).await.ok().json();
    assert_eq!(doc["job"]["name"], "flaky");
    assert_eq!(doc["job"]["spec"], job(&c, "flaky").await.1["spec"]);
    assert_eq!(doc["job"]["next_runs"].as_array().unwrap().len(), 5);
    assert_eq!(doc["state"], "enabled");
    assert_eq!(doc["health"]["failures_in_a_row"], 0);
    assert_eq!(doc["health"]["last_finished"]["id"], ok.as_str());
    let last: Vec<&str> = doc["last_runs"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(last, [ok.as_str(), failed[1].as_str(), failed[0].as_str()]);
    assert_eq!(doc["running"], json!([]));
    assert_eq!(doc["errors"], json!([]));

    // Running now, and a paused job has no next runs.
    let id = run(&c, "sleeper").await;
    wait_for(Duration::from_secs(30), "the sleeper's running marker", || async {
        let workers = c.get("/api/workers").await.ok()?;
        (workers["workers"][0]["running_executions"][0]["id"] == id.as_str()).then_some(())
    })
    .await?;
    let out = ctl(&c, &["jobs", "describe", "sleeper"]).await.ok();
    let running = out.stdout.split("Running now:\n").nth(1).unwrap();
    assert!(running.lines().next().unwrap().trim_start().starts_with("ID"), "{}", out.stdout);
    assert!(running.lines().nth(1).unwrap().trim_start().starts_with(&id), "{}", out.stdout);
    let doc = ctl(&c, &["jobs", "describe", "sleeper", "-o", "yaml"]).await.ok();
    let doc: Value = serde_norway::from_str(&doc.stdout)?;
    assert_eq!(doc["running"][0]["id"], id.as_str());
    assert_eq!(doc["running"][0]["worker_id"], "w1");
    ctl(&c, &["jobs", "kill", "sleeper"]).await.ok();
    ctl(&c, &["jobs", "pause", "sleeper"]).await.ok();
    let out = ctl(&c, &["jobs", "describe", "sleeper"]).await.ok();
    assert!(out.stdout.contains("state:        paused by "), "{}", out.stdout);
    assert!(out.stdout.contains("Next runs:\n  none ("), "{}", out.stdout);

    let out = ctl(&c, &["jobs", "describe", "nope"]).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.starts_with("etcronctl: job \"nope\": not_found (404)"), "{out:?}");
    Ok(())
}

/// Two teams apply their own repositories to one cluster: each file's `managed_by` marks its
/// jobs, and `--prune` deletes only jobs of that owner (and of a `-l` selector) that its files no
/// longer define, never the other team's or jobs made in the console.
#[tokio::test(flavor = "multi_thread")]
async fn prune_deletes_only_the_jobs_its_files_own() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-prune-scope", 0).await?;
    let dir = tempfile::tempdir()?;
    let repo = |owner: &str, names: &[&str]| -> String {
        let jobs: String = names
            .iter()
            .map(|n| format!("[jobs.{n}]\nschedule = \"@yearly\"\ntask = {{ kind = \"shell\", command = \"true\" }}\n"))
            .collect();
        format!("managed_by = \"{owner}\"\n{jobs}")
    };
    let (data, ops) = (dir.path().join("data"), dir.path().join("ops"));
    write(&data, "jobs.toml", &repo("data-repo", &["d1", "d2", "d3"]));
    write(&ops, "jobs.toml", &repo("ops-repo", &["o1"]));
    let (data_arg, ops_arg) = (data.display().to_string(), ops.display().to_string());
    ctl(&c, &["jobs", "apply", "-f", &data_arg]).await.ok();
    ctl(&c, &["jobs", "apply", "-f", &ops_arg]).await.ok();
    c.put_job("console-made", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "true"}})).await?;
    assert_eq!(job(&c, "d1").await.1["spec"]["labels"]["managed-by"], "data-repo");
    assert_eq!(job(&c, "o1").await.1["spec"]["labels"]["managed-by"], "ops-repo");

    // The data team drops d3: its prune deletes d3 only.
    write(&data, "jobs.toml", &repo("data-repo", &["d1", "d2"]));
    let out = ctl(&c, &["jobs", "apply", "-f", &data_arg, "--prune"]).await.ok();
    assert!(out.stdout.contains("0 created, 0 updated, 2 unchanged, 1 deleted"), "{out:?}");
    assert!(out.stderr.contains("pruning among jobs with managed-by=data-repo"), "{out:?}");
    let names: Vec<String> = specs(&c).await.into_keys().collect();
    assert_eq!(names, ["console-made", "d1", "d2", "o1"]);

    // A paused job stays paused through an apply of its file, which says so.
    let (status, _) = c.call(Method::POST, "/api/jobs/d1/pause", Some(json!({"reason": "db migration"}))).await?;
    assert_eq!(status, 200);
    let out = ctl(&c, &["jobs", "apply", "-f", &data_arg]).await.ok();
    assert!(out.stdout.contains("unchanged  d1"), "{out:?}");
    assert!(out.stdout.contains(": db migration on the server; apply leaves it paused"), "{out:?}");
    assert_eq!(job(&c, "d1").await.1["paused"]["reason"], "db migration");

    // A job in the file that claims another owner through its labels is an invalid file.
    write(
        &data,
        "jobs.toml",
        "managed_by = \"data-repo\"\n[jobs.d1]\nschedule = \"@yearly\"\nlabels = { managed-by = \"ops-repo\" }\n\
         task = { kind = \"shell\", command = \"true\" }\n",
    );
    let out = ctl(&c, &["jobs", "apply", "-f", &data_arg]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("labels.managed-by"), "{out:?}");
    Ok(())
}

/// `logs`: an execution's output by id, or a job's newest execution that ran (skipped ticks,
/// which have no output, are passed over), live with `--follow` (exit 5 when it failed), the
/// record with `-o json`; exit 3 for what does not exist or has not run, 2 for an argument that
/// is neither an id nor a job name.
#[tokio::test(flavor = "multi_thread")]
async fn logs_print_an_execution_or_a_jobs_latest_run() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-logs", 1).await?;
    let yearly = |command: &str| json!({"schedule": "@yearly", "task": {"kind": "shell", "command": command}});
    c.put_job("talker", json!({"schedule": "@every 1s", "task": {"kind": "shell", "command": "echo said; echo more"}}))
        .await?;
    c.put_job("ticker", yearly("for i in 1 2 3 4; do echo line-$i; sleep 0.5; done")).await?;
    c.put_job("broken", yearly("echo before; sleep 1; echo after; exit 3")).await?;
    c.put_job("silent", yearly("true")).await?;

    // A job that ran, then was paused: its newest records are skipped ticks, passed over.
    let ran = c.wait_executions("job=talker&status=succeeded", "talker to run", |l| !l.is_empty()).await?;
    ctl(&c, &["jobs", "pause", "talker"]).await.ok();
    let newest_ms = |l: &[Value]| l.iter().filter_map(|e| e["scheduled_ms"].as_i64()).max().unwrap_or(0);
    let ran_ms = newest_ms(&ran);
    c.wait_executions("job=talker&status=skipped", "a skipped tick after the runs", |l| newest_ms(l) > ran_ms + 1000)
        .await?;
    let newest = c.get("/api/executions?job=talker&limit=1").await?;
    assert_eq!(newest["executions"][0]["status"], "skipped", "the newest record is a skipped tick");
    let out = ctl(&c, &["logs", "talker"]).await.ok();
    assert_eq!(out.stdout, "said\nmore\n", "{out:?}");
    let id = out.stderr.split("that ran: ").nth(1).unwrap().split(' ').next().unwrap().to_owned();
    assert_eq!(execution(&c, &id, "the run logs named", |_| true).await["status"], "succeeded", "{out:?}");
    // By id, and as the record.
    assert_eq!(ctl(&c, &["logs", &id]).await.ok().stdout, "said\nmore\n");
    let doc = ctl(&c, &["logs", &id, "-o", "json"]).await.ok().json();
    assert_eq!((&doc["id"], &doc["output"]), (&json!(id), &json!("said\nmore\n")));

    // --follow of a job's run in progress: the lines as they come, exit 0.
    let id = run(&c, "ticker").await;
    wait_for(Duration::from_secs(30), "the ticker's running marker", || async {
        let workers = c.get("/api/workers").await.ok()?;
        (workers["workers"][0]["running_executions"][0]["id"] == id.as_str()).then_some(())
    })
    .await?;
    let out = ctl(&c, &["logs", "ticker", "--follow"]).await;
    assert_eq!((out.code, out.stdout.as_str()), (0, "line-1\nline-2\nline-3\nline-4\n"), "{out:?}");
    assert!(out.stderr.contains(&format!("that ran: {id} (running)")), "{out:?}");
    assert!(out.stderr.contains(&format!("execution {id}: succeeded")), "{out:?}");
    // A failed run: its output and exit 5 with --follow, exit 0 without.
    let id = run(&c, "broken").await;
    let out = ctl(&c, &["logs", &id, "--follow"]).await;
    assert_eq!((out.code, out.stdout.as_str()), (5, "before\nafter\n"), "{out:?}");
    let out = ctl(&c, &["logs", "broken"]).await;
    assert_eq!((out.code, out.stdout.as_str()), (0, "before\nafter\n"), "{out:?}");
    assert!(out.stderr.contains(&format!("{id} (failed)")), "{out:?}");

    // Nothing to show: 3; not a name: 2.
    let out = ctl(&c, &["logs", "silent"]).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("job \"silent\" has no execution that ran yet"), "{out:?}");
    let out = ctl(&c, &["logs", "nope"]).await;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("job \"nope\" does not exist"), "{out:?}");
    assert_eq!(ctl(&c, &["logs", "nope@1#1"]).await.code, 3);
    assert_eq!(ctl(&c, &["logs", "nope@1#1", "--follow"]).await.code, 3);
    let out = ctl(&c, &["logs", "Not A Job"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.starts_with("etcronctl: JOB \"Not A Job\" is not a job name"), "{out:?}");
    Ok(())
}

/// `jobs edit` with `EDITOR` set to scripts: an edit is saved with `If-Match` and its diff
/// printed; an untouched file (or one whose comments only changed) cancels; invalid content,
/// a renamed job and a concurrent save (exit 2, 2, 4) keep the edited file and print its path;
/// nothing else is left in the temporary directory.
#[tokio::test(flavor = "multi_thread")]
async fn edit_saves_with_the_revision_read_and_keeps_what_cannot_be_saved() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-edit", 0).await?;
    let dir = c.path("jobs");
    write(&dir, "a.toml", ALPHA_TOML);
    ctl(&c, &["jobs", "apply", "-f", &dir.display().to_string()]).await.ok();
    let tmp = c.path("tmp");
    std::fs::create_dir_all(&tmp)?;
    let tmp_arg = tmp.display().to_string();
    let edit = |editor: String, extra: &'static [&'static str]| {
        let (server, tmp) = (c.master.url.clone(), tmp_arg.clone());
        async move {
            let env = [("EDITOR", editor.as_str()), ("VISUAL", ""), ("TMPDIR", tmp.as_str())];
            ctl_at(&server, &env, &[&["jobs", "edit", "alpha"], extra].concat()).await
        }
    };
    let left = || -> Vec<std::path::PathBuf> { std::fs::read_dir(&tmp).unwrap().map(|e| e.unwrap().path()).collect() };
    let revision = || async { job(&c, "alpha").await.1["revision"].clone() };

    // Nothing changed, or only a comment: cancelled, nothing written.
    let before = revision().await;
    for editor in ["true", "sed -i -e 's/^# Edit job/# I read it. Edit job/'"] {
        let out = edit(editor.to_owned(), &[]).await.ok();
        assert_eq!(out.stdout, "edit cancelled, no changes made\n", "{editor}");
        assert_eq!(revision().await, before, "{editor}");
        assert!(left().is_empty(), "{editor}: {:?}", left());
    }

    // An edit: saved, the diff printed, the file removed.
    let out = edit("sed -i -e 's/echo alpha/echo edited/'".to_owned(), &[]).await.ok();
    let saved = job(&c, "alpha").await.1;
    assert_eq!(saved["spec"]["task"]["command"], "echo edited");
    assert_eq!(
        out.stdout,
        format!(
            "job alpha edited (revision {})\n    ~ task.command: \"echo alpha\" → \"echo edited\"\n",
            saved["revision"]
        )
    );
    assert!(left().is_empty(), "{:?}", left());
    let out = edit("sed -i -e 's/timeout: 10m/timeout: 20m/'".to_owned(), &["-o", "json"]).await.ok();
    let doc = out.json();
    assert_eq!((&doc["edited"], &doc["diff"][0]["path"]), (&json!(true), &json!("timeout")), "{doc}");
    assert_eq!(doc["revision"], revision().await);

    // Invalid content, and a renamed job: exit 2, the file kept with the edit, the job as it was.
    let before = job(&c, "alpha").await.1;
    for (editor, error) in [
        ("sed -i -e 's/    command:/    comand:/'", "task.comand: unknown field"),
        ("sed -i -e 's/^  alpha:/  alpha2:/'", "must define job \"alpha\" and only it, but defines [\"alpha2\"]"),
    ] {
        let out = edit(editor.to_owned(), &[]).await;
        assert_eq!(out.code, 2, "{out:?}");
        assert!(out.stderr.contains(error), "{out:?}");
        let files = left();
        assert_eq!(files.len(), 1, "{files:?}");
        assert!(out.stderr.contains(&format!("your edit is kept in {}", files[0].display())), "{out:?}");
        assert!(std::fs::read_to_string(&files[0])?.contains(if error.contains("comand") {
            "comand:"
        } else {
            "alpha2:"
        }));
        std::fs::remove_file(&files[0])?;
        assert_eq!(job(&c, "alpha").await.1, before);
    }

    // Someone saves the job while the editor is open: 409, exit 4, their save stays, the edit
    // is kept, and applying the kept file puts the edit over theirs.
    write(
        &dir,
        "theirs.yaml",
        "jobs:\n  alpha:\n    schedule: '@yearly'\n    task: {kind: shell, command: echo theirs}\n",
    );
    let script = c.path("edit-while-someone-saves.sh");
    write(
        script.parent().unwrap(),
        "edit-while-someone-saves.sh",
        &format!(
            "#!/bin/sh\nset -e\n{} jobs apply -f {} >/dev/null\nsed -i -e 's/echo edited/echo mine/' \"$1\"\n",
            bin("etcronctl")?.display(),
            dir.join("theirs.yaml").display()
        ),
    );
    let out = edit(format!("sh {}", script.display()), &[]).await;
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.contains("saving job \"alpha\": conflict (409)"), "{out:?}");
    assert_eq!(job(&c, "alpha").await.1["spec"]["task"]["command"], "echo theirs", "not overwritten");
    let files = left();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(out.stderr.contains(&format!("your edit is kept in {}", files[0].display())), "{out:?}");
    let out = ctl(&c, &["jobs", "apply", "-f", &files[0].display().to_string()]).await.ok();
    assert!(out.stdout.contains("~ task.command: \"echo theirs\" → \"echo mine\""), "{out:?}");
    std::fs::remove_file(&files[0])?;

    // An editor that fails changes nothing; a job that does not exist is 3.
    let before = revision().await;
    let out = edit("false".to_owned(), &[]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("the editor \"false\" exited with"), "{out:?}");
    assert_eq!(revision().await, before);
    let env = [("EDITOR", "true"), ("TMPDIR", tmp_arg.as_str())];
    assert_eq!(ctl_at(&c.master.url, &env, &["jobs", "edit", "nope"]).await.code, 3);
    assert!(left().is_empty(), "{:?}", left());
    Ok(())
}

const CRONTAB: &str = r#"# Installed by the ops team
SHELL=/bin/sh
MAILTO=ops@example.com
PATH=/usr/bin:/bin
CRON_TZ=Europe/Berlin

# Nightly backup
30 2 * * * echo backup \%F
GREETING="hello there"
@daily echo "$GREETING"
@reboot /usr/local/bin/agent
"#;

/// `import --crontab`: each job line a job (schedule kept, env and CRON_TZ from the lines above
/// it, the comment above it as description, `\%` as `%`), `@reboot` and MAILTO left out with a
/// warning, who the commands will run as said, names stable so importing again is unchanged; the jobs run with that env; a changed
/// line is a new job that `--prune -l imported-from=crontab` swaps in; bad lines are exit 2
/// naming file and line, with nothing changed.
#[tokio::test(flavor = "multi_thread")]
async fn import_crontab_makes_a_job_of_each_line() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-crontab", 1).await?;
    let dir = c.path("cron");
    write(&dir, "crontab", CRONTAB);
    let file = dir.join("crontab").display().to_string();

    let out = ctl(&c, &["import", "--crontab", &file]).await.ok();
    assert!(out.stdout.contains("2 created, 0 updated, 0 unchanged, 0 deleted"), "{out:?}");
    assert!(out.stderr.contains(&format!("warning: {file}: line 3: MAILTO is dropped")), "{out:?}");
    assert!(out.stderr.contains(&format!("warning: {file}: line 11: @reboot is skipped")), "{out:?}");
    // Who the commands will run as, from the live worker's registration.
    // (The test's workers run tasks as root: said as loudly as it matters.)
    let worker = &c.get("/api/workers").await?["workers"][0];
    let task_user = match worker["task_user"].as_str().unwrap() {
        "root" => "root (every task without task.user runs as root)".to_owned(),
        other => other.to_owned(),
    };
    let runs_as = format!(
        "note: 2 imported job(s) name no user; their commands run as {task_user} on {} (the worker process runs as {})",
        worker["id"].as_str().unwrap(),
        worker["os_user"].as_str().unwrap()
    );
    assert!(out.stderr.contains(&runs_as), "{runs_as} in {out:?}");
    let imported = specs(&c).await;
    assert_eq!(imported.len(), 2, "{imported:?}");
    for name in imported.keys() {
        let (slug, hash) = name.rsplit_once('-').unwrap();
        assert!(slug == "echo" && hash.len() == 8 && hash.chars().all(|c| c.is_ascii_hexdigit()), "{name}");
    }
    let by_schedule = |s: &str| imported.iter().find(|(_, spec)| spec["schedule"] == s).unwrap();
    let (backup, spec) = by_schedule("30 2 * * *");
    assert_eq!(spec["timezone"], "Europe/Berlin");
    assert_eq!(spec["description"], "Nightly backup");
    // The crontab's path owns its jobs.
    assert_eq!(spec["labels"], json!({"imported-from": "crontab", "managed-by": file}));
    assert_eq!(spec["task"]["command"], "echo backup %F");
    assert_eq!(spec["task"]["env"], json!({"PATH": "/usr/bin:/bin"}));
    let (daily, spec) = by_schedule("@daily");
    assert_eq!(spec["task"]["env"], json!({"PATH": "/usr/bin:/bin", "GREETING": "hello there"}));
    assert!(spec.get("description").is_none(), "a blank line or a setting between: no description");
    let (backup, daily) = (backup.clone(), daily.clone());

    // Importing again, from a file or standard input: unchanged.
    let out = ctl(&c, &["import", "--crontab", &file]).await.ok();
    assert!(out.stdout.contains("0 created, 0 updated, 2 unchanged"), "{out:?}");
    let out = ctl_stdin(&c, &["import", "--crontab", "-", "--source", &file], CRONTAB).await.ok();
    assert!(out.stdout.contains("0 created, 0 updated, 2 unchanged"), "{out:?}");

    // The jobs run as cron would have run them.
    c.wait_workers(1).await?;
    assert_eq!(ctl(&c, &["jobs", "run", &daily, "--follow"]).await.ok().stdout, "hello there\n");
    assert_eq!(ctl(&c, &["jobs", "run", &backup, "--follow"]).await.ok().stdout, "backup %F\n");

    // A change made since by hand (the console, `jobs edit`: a PUT) is named when an import
    // overwrites it.
    let mut edited = specs(&c).await[&daily].clone();
    edited["timeout"] = json!("5m");
    c.put_job(&daily, edited).await?;
    let out = ctl(&c, &["import", "--crontab", &file]).await.ok();
    assert!(out.stdout.contains("0 created, 1 updated, 1 unchanged"), "{out:?}");
    let warned = format!("warning: job {daily:?}: overwriting what anonymous saved at ");
    assert!(
        out.stderr.contains(&warned) && out.stderr.contains(&format!("(PUT /api/jobs/{daily}): changes made since")),
        "{out:?}"
    );
    // The saved version names the tool and the crontab.
    let saved = &c.get(&format!("/api/jobs/{daily}/history")).await?["versions"][0];
    assert_eq!((&saved["client"], &saved["source"]), (&json!("etcronctl import"), &json!(file)), "{saved}");
    let out = ctl(&c, &["import", "--crontab", &file]).await.ok();
    assert!(!out.stderr.contains("overwriting"), "its own import is not warned about: {out:?}");

    // A changed command is another job, and the import replaces the old one: the source owns
    // its jobs, so the line it no longer has is deleted (the dry run says so, exit 7).
    write(&dir, "crontab", &CRONTAB.replace("echo backup", "echo backup-v2"));
    let out = ctl(&c, &["import", "--crontab", &file, "--dry-run"]).await;
    assert_eq!(out.code, 7, "{out:?}");
    assert!(out.stdout.contains("1 created, 0 updated, 1 unchanged, 1 deleted (dry run"), "{out:?}");
    assert!(out.stdout.contains(&format!("delete     {backup}")), "{out:?}");
    ctl(&c, &["import", "--crontab", &file]).await.ok();
    let now = specs(&c).await;
    assert!(!now.contains_key(&backup) && now.contains_key(&daily) && now.len() == 2, "{now:?}");

    // Bad lines: exit 2, each named by file and line, nothing changed.
    let bad = "# ok\n0 3 * * * echo fine\n61 * * * * echo late\n0 3 * * * echo 50%\nnot a job\n";
    write(&dir, "bad", bad);
    let bad_file = dir.join("bad").display().to_string();
    let out = ctl(&c, &["import", "--crontab", &bad_file]).await;
    assert_eq!(out.code, 2, "{out:?}");
    let errors: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(errors.len(), 3, "{out:?}");
    assert!(errors[0].starts_with(&format!("etcronctl: invalid crontab: {bad_file}: line 3: schedule: ")), "{out:?}");
    assert!(errors[1]
        .starts_with(&format!("etcronctl: invalid crontab: {bad_file}: line 4: the command has an unescaped %")));
    assert!(
        errors[2].starts_with(&format!("etcronctl: invalid crontab: {bad_file}: line 5: expected 5 schedule fields"))
    );
    assert_eq!(specs(&c).await, now, "nothing imported");

    // A system crontab's user column, --timezone for lines without CRON_TZ, and bad flags.
    write(&dir, "system", "0 4 * * * root echo from-root\n");
    let sys_file = dir.join("system").display().to_string();
    let out = ctl(&c, &["import", "--crontab", &sys_file, "--system", "--timezone", "Asia/Tokyo"]).await.ok();
    assert!(out.stdout.contains("1 created"), "{out:?}");
    assert!(!out.stderr.contains("read in UTC"), "{out:?}");
    let root = specs(&c).await.into_iter().find(|(_, s)| s["task"]["command"] == "echo from-root").unwrap().1;
    assert_eq!(root["labels"]["crontab-user"], "root");
    assert_eq!(root["task"]["user"], "root");
    assert!(out.stderr.contains("only workers running as root with these users in run_as_users"), "{out:?}");
    assert_eq!(root["timezone"], "Asia/Tokyo");
    let out = ctl(&c, &["import", "--crontab", &sys_file, "--timezone", "Mars/Olympus"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--timezone: unknown timezone \"Mars/Olympus\""), "{out:?}");
    assert_eq!(ctl(&c, &["import", &sys_file, "--system"]).await.code, 2, "--system without --crontab");

    // --team: every job the crontab makes is the team's (what a team-only token can import).
    write(&dir, "team", "CRON_TZ=UTC\n0 5 * * * echo for-payments\n");
    let team_file = dir.join("team").display().to_string();
    let out = ctl(&c, &["import", "--crontab", &team_file, "--team", "payments"]).await.ok();
    assert!(out.stdout.contains("1 created"), "{out:?}");
    let made = specs(&c).await.into_iter().find(|(_, s)| s["task"]["command"] == "echo for-payments").unwrap().1;
    assert_eq!(made["team"], "payments");
    let out = ctl(&c, &["import", "--crontab", &team_file, "--team", "Not A Team"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--team: "), "{out:?}");
    assert_eq!(ctl(&c, &["import", "--crontab", &dir.join("missing").display().to_string()]).await.code, 2);
    Ok(())
}

/// `jobs backfill` over a job's own ticks: the dry run lists exactly the ticks its records name
/// (each as the attempt after the recorded one); the backfill, on the paused job, runs them all
/// to `done`; `jobs backfills` lists it and shows each tick; cancelling it once done is exit 4
/// with the master's message; a range that ends before it starts is exit 2 naming `from`.
#[tokio::test(flavor = "multi_thread")]
async fn backfill_runs_the_recorded_ticks_again() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-backfill", 1).await?;
    // The schedule starts a few seconds ahead, on an even second, so that it has no tick before
    // the job existed (the range below starts 2 minutes back) and every tick of it has a record.
    let first_ms = (etcron_tests::now_ms() / 2000 + 3) * 2000;
    let spec = json!({"schedule": "*/2 * * * * *", "active_from": etcron_model::rfc3339_ms(first_ms),
        "task": {"kind": "shell", "command": "true"}});
    c.put_job("ticks", spec).await?;
    c.wait_executions("job=ticks&status=succeeded", "3 ticks to run", |l| l.len() >= 3).await?;
    // Paused, its ticks are recorded `skipped` and run nothing; backfills run all the same.
    let (status, body) = c.call(Method::POST, "/api/jobs/ticks/pause", None).await?;
    assert_eq!(status, 200, "{body}");
    let to_ms = etcron_tests::now_ms();
    let from_ms = to_ms - 120_000;
    let last_tick = to_ms / 2000 * 2000;
    let records = c
        .wait_executions("job=ticks&limit=500", "a record of every tick up to now, none running", |l| {
            l.iter().any(|e| e["scheduled_ms"] == last_tick) && l.iter().all(|e| e["status"] != "running")
        })
        .await?;
    let mut recorded: Vec<(i64, String)> = records
        .iter()
        .map(|e| (e["scheduled_ms"].as_i64().unwrap(), e["scheduled_at"].as_str().unwrap().to_owned()))
        .filter(|(t, _)| (from_ms..=to_ms).contains(t))
        .collect();
    recorded.sort();
    let ticks: Vec<i64> = recorded.iter().map(|(t, _)| *t).collect();
    assert_eq!(ticks, (first_ms..=last_tick).step_by(2000).collect::<Vec<_>>(), "one record per tick: {records:?}");
    assert!(ticks.len() >= 3, "{ticks:?}");
    assert!(records.iter().all(|e| e["attempt"] == 1), "{records:?}");
    let expected: Vec<(String, String)> = recorded.iter().map(|(t, at)| (at.clone(), format!("ticks@{t}#2"))).collect();

    // The dry run: the AT and EXECUTION of each tick the records name, nothing left out.
    let (from, to) = (etcron_model::rfc3339_ms(from_ms), etcron_model::rfc3339_ms(to_ms));
    let range = ["jobs", "backfill", "ticks", "--from", from.as_str(), "--to", to.as_str(), "--which", "all"];
    let out = ctl(&c, &[&range[..], &["--dry-run"]].concat()).await.ok();
    let mut lines = out.stdout.lines();
    assert_eq!(lines.next().unwrap().split_whitespace().collect::<Vec<_>>(), ["AT", "EXECUTION"], "{out:?}");
    let printed: Vec<(String, String)> = lines
        .by_ref()
        .take(expected.len())
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(cells.len(), 2, "{l:?} in {out:?}");
            (cells[0].to_owned(), cells[1].to_owned())
        })
        .collect();
    assert_eq!(printed, expected, "{out:?}");
    assert_eq!(
        lines.next(),
        Some(format!("{} ticks; 0 left out (dry run: nothing was created)", ticks.len()).as_str())
    );
    let (_, list) = c.call(Method::GET, "/api/jobs/ticks/backfills", None).await?;
    assert_eq!(list["backfills"], json!([]), "a dry run creates nothing");
    // The same ticks by a duration back, `--to` being now by default.
    let out =
        ctl(&c, &["jobs", "backfill", "ticks", "--from", "-3m", "--which", "all", "--max-runs", "500", "--dry-run"])
            .await
            .ok();
    assert!(expected.iter().all(|(at, id)| out.stdout.contains(&format!("{at}  {id}"))), "{out:?}");

    // The backfill: its id, then every tick runs again as its second attempt, on the paused job.
    let out = ctl(&c, &[&range[..], &["--max-runs", "500", "--reason", "ctl test"]].concat()).await.ok();
    let id = out.stdout.lines().find_map(|l| l.strip_prefix("id:")).map(str::trim).unwrap_or_default().to_owned();
    assert!(!id.is_empty(), "{out:?}");
    assert!(out.stdout.contains(&format!("counts:     0/{} done", ticks.len())), "{out:?}");
    let show = ["jobs", "backfills", "ticks", id.as_str()];
    let done = wait_for(Duration::from_secs(60), "the backfill to be done", || async {
        let out = ctl(&c, &[&show[..], &["-o", "json"]].concat()).await.ok();
        let v = out.json();
        (v["state"] == "done").then_some(v)
    })
    .await?;
    assert_eq!(done["id"], id.as_str());
    let items = done["items"].as_array().unwrap();
    assert!(items.iter().all(|i| i["status"] == "succeeded"), "{done}");
    let ran: Vec<(String, String)> = items
        .iter()
        .map(|i| (i["at"].as_str().unwrap().to_owned(), i["execution_id"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(ran, expected, "{done}");
    let n = ticks.len();
    assert_eq!(
        done["counts"],
        json!({"total": n, "pending": 0, "running": 0, "succeeded": n, "failed": 0, "not_run": 0, "cancelled": 0})
    );
    let record = execution(&c, &expected[0].1, "the first backfilled run", |v| v["status"] == "succeeded").await;
    assert_eq!((&record["trigger"], &record["attempt"]), (&json!("backfill"), &json!(2)), "{record}");
    let out = ctl(&c, &show).await.ok();
    assert!(out.stdout.contains("state:      done\n"), "{out:?}");
    assert!(out.stdout.contains(&format!("{}  {}  succeeded\n", expected[0].0, expected[0].1)), "{out:?}");

    // The list: the backfill, done, all of its ticks.
    let out = ctl(&c, &["jobs", "backfills", "ticks"]).await.ok();
    let row = out.stdout.lines().find(|l| l.starts_with(&id)).unwrap_or_else(|| panic!("{id} not listed: {out:?}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[1..=5], ["done", from.as_str(), to.as_str(), "all", format!("{n}/{n}").as_str()], "{out:?}");

    // Cancelling a backfill that is done: 409 with the master's message.
    let out = ctl(&c, &["jobs", "backfill-cancel", "ticks", &id]).await;
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.contains(&format!("backfill {id:?} of \"ticks\" is done")), "{out:?}");
    // A range that ends before it starts: 400 naming `from`; no such job: 404.
    let out = ctl(&c, &["jobs", "backfill", "ticks", "--from", &to, "--to", &from, "--dry-run"]).await;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("invalid (400): from: "), "{out:?}");
    assert_eq!(ctl(&c, &["jobs", "backfills", "nope"]).await.code, 3);
    Ok(())
}

/// A team token's etcronctl: whoami names its teams, `jobs ls` lists its team's jobs (with the
/// TEAM column, `--team` asking the master for one team), another team's job is not found
/// (exit 3), `describe` shows the team, and applying a job file into another team is refused
/// naming `team`.
#[tokio::test(flavor = "multi_thread")]
async fn a_team_token_lists_and_touches_its_teams_jobs_only() -> anyhow::Result<()> {
    let (admin, pay) = ("ctl-teams-admin-token-0123456789", "ctl-teams-payments-token-0123456789");
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("master.toml");
    std::fs::write(
        &config,
        format!(
            "[[auth.tokens]]\nname = \"pay-admin\"\nteams = {{ payments = \"admin\" }}\nsha256 = {:?}\n",
            etcron_master::layers::auth::hash_token(pay)
        ),
    )?;
    let config = config.display().to_string();
    let c = Cluster::start_with("ctl-teams", 1, false, &["--config", &config, "--api-token", admin]).await?;
    for (job, team) in [("pay-settle", Some("payments")), ("search-index", Some("search")), ("plain", None)] {
        let mut spec = json!({"schedule": "@daily", "task": {"kind": "shell", "command": "true"}});
        if let Some(t) = team {
            spec["team"] = json!(t);
        }
        c.put_job(job, spec).await?;
    }
    let as_pay = [("ETCRON_TOKEN", pay)];
    let as_admin = [("ETCRON_TOKEN", admin)];

    let me = ctl_at(&c.master.url, &as_pay, &["whoami"]).await.ok();
    assert_eq!(me.stdout, "name:   pay-admin\nrole:   -\nteams:  payments=admin\n");
    let me = ctl_at(&c.master.url, &as_pay, &["whoami", "-o", "json"]).await.ok().json();
    assert_eq!(me, json!({"name": "pay-admin", "role": null, "teams": {"payments": "admin"}}));

    let listed = ctl_at(&c.master.url, &as_pay, &["jobs", "ls"]).await.ok();
    let rows: Vec<&str> = listed.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 1, "{}", listed.stdout);
    assert!(listed.stdout.lines().next().unwrap().starts_with("NAME") && listed.stdout.contains("TEAM"));
    let cells: Vec<&str> = rows[0].split_whitespace().collect();
    assert_eq!(&cells[..2], ["pay-settle", "payments"], "{}", listed.stdout);
    let all = ctl_at(&c.master.url, &as_admin, &["jobs", "ls", "-o", "json"]).await.ok().json();
    assert_eq!(all["jobs"].as_array().unwrap().len(), 3);
    let search = ctl_at(&c.master.url, &as_admin, &["jobs", "ls", "--team", "search", "-o", "json"]).await.ok().json();
    let names: Vec<&str> = search["jobs"].as_array().unwrap().iter().map(|j| j["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["search-index"]);

    let hidden = ctl_at(&c.master.url, &as_pay, &["jobs", "get", "search-index"]).await;
    assert_eq!(hidden.code, 3, "{hidden:?}");
    assert!(hidden.stderr.contains("does not exist"), "{hidden:?}");
    let described = ctl_at(&c.master.url, &as_pay, &["jobs", "describe", "pay-settle"]).await.ok();
    assert!(
        described.stdout.lines().any(|l| l.starts_with("team:") && l.ends_with("payments")),
        "{}",
        described.stdout
    );

    // A job file moving pay-settle to another team: refused (403 naming team), nothing changes.
    let files = dir.path().join("jobs");
    write(
        &files,
        "pay.toml",
        "[jobs.pay-settle]\nschedule = \"@daily\"\nteam = \"search\"\n\n[jobs.pay-settle.task]\nkind = \"shell\"\ncommand = \"true\"\n",
    );
    let files = files.display().to_string();
    let moved = ctl_at(&c.master.url, &as_pay, &["jobs", "apply", "-f", &files]).await;
    assert_ne!(moved.code, 0, "{moved:?}");
    assert!(moved.stderr.contains("team"), "{moved:?}");
    assert_eq!(job(&c, "pay-settle").await.1["spec"]["team"], "payments");

    // executions search --team: one team's records; a team token sees only its own anyway.
    for job in ["pay-settle", "search-index"] {
        ctl_at(&c.master.url, &as_admin, &["jobs", "run", job]).await.ok();
    }
    c.wait_executions("status=succeeded", "both runs", |l| l.len() == 2).await?;
    let jobs_in = |out: Value| -> Vec<String> {
        out["executions"].as_array().unwrap().iter().map(|e| e["job"].as_str().unwrap().to_owned()).collect()
    };
    let search = &["executions", "search", "--team", "search", "-o", "json"];
    assert_eq!(jobs_in(ctl_at(&c.master.url, &as_admin, search).await.ok().json()), ["search-index"]);
    assert!(jobs_in(ctl_at(&c.master.url, &as_pay, search).await.ok().json()).is_empty());
    let own = ctl_at(&c.master.url, &as_pay, &["executions", "search", "-o", "json"]).await.ok().json();
    assert_eq!(jobs_in(own), ["pay-settle"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn pools_are_listed_shown_saved_and_deleted_and_a_run_carries_its_priority() -> anyhow::Result<()> {
    let c = Cluster::start("ctl-pools", 0).await?;
    let out = ctl(&c, &["pools", "put", "db", "--slots", "2", "--description", "reporting db"]).await.ok();
    assert_eq!(out.stdout, "pool db saved: 2 slots, 0 in use\n");
    c.put_job("report", json!({"schedule": "@yearly", "pool": "db", "task": {"kind": "shell", "command": "true"}}))
        .await?;
    // A slot held and a tick waiting, as workers write them.
    let keys = Keys::new(&c.namespace)?;
    let held = etcron_model::keys::ExecutionId::new("report", etcron_model::keys::Tick::Scheduled(1_000));
    let slot = etcron_model::pool::HeldSlot {
        execution_id: held.clone(),
        worker_id: "w1".to_owned(),
        since_ms: etcron_tests::now_ms() - 65_000,
        priority: 50,
    };
    let mut etcd = c.etcd.client().await?;
    etcd.put(keys.pool_slot("db", 0), serde_json::to_vec(&slot)?, None).await?;
    let next = etcron_model::keys::ExecutionId::new("report", etcron_model::keys::Tick::Scheduled(2_000));
    let waiting =
        etcron_model::pool::Waiting { execution_id: next.clone(), scheduled_ms: 2_000, priority: 70, since_ms: 1_500 };
    etcd.put(keys.pool_wait("db", etcron_model::pool::place(70), 2_000, &next), serde_json::to_vec(&waiting)?, None)
        .await?;

    let out = ctl(&c, &["pools", "ls"]).await.ok();
    let rows: Vec<Vec<&str>> = out.stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows, [vec!["NAME", "SLOTS", "IN-USE", "WAITING", "JOBS"], vec!["db", "2", "1", "1", "report"]]);
    let out = ctl(&c, &["pools", "get", "db"]).await.ok();
    assert!(out.stdout.contains("slots:       2 (1 in use)") && out.stdout.contains("description: reporting db"));
    let holder = out.stdout.lines().find(|l| l.contains("report@1000#1")).unwrap_or_default();
    assert!(holder.starts_with("0 ") && holder.contains(" w1 ") && holder.contains(" 1m0"), "{}", out.stdout);
    let queued = out.stdout.lines().find(|l| l.contains("report@2000#1")).unwrap_or_default();
    assert!(queued.starts_with("1 ") && queued.contains(" 70 ") && queued.contains("1970-01-01T00:00:02.000Z"));
    let doc = ctl(&c, &["pools", "get", "db", "-o", "json"]).await.ok().json();
    assert_eq!(doc, c.get("/api/pools/db").await?);

    // Refusals keep their exit codes: a bad value 2, in use 4 (naming the job), absent 3.
    let out = ctl(&c, &["pools", "put", "db", "--slots", "0"]).await;
    assert!(out.code == 2 && out.stderr.contains("slots"), "{out:?}");
    let out = ctl(&c, &["pools", "delete", "db"]).await;
    assert!(out.code == 4 && out.stderr.contains("report"), "{out:?}");
    assert_eq!(ctl(&c, &["pools", "get", "nope"]).await.code, 3);

    // `jobs run --priority`: the run request carries it (no worker here takes it).
    let out = ctl(&c, &["jobs", "run", "report", "--priority", "90", "-o", "json"]).await.ok();
    assert_eq!(out.json()["priority"], 90);
    let resp = etcd.get(keys.job_trigger_prefix("report"), Some(etcd_client::GetOptions::new().with_prefix())).await?;
    let request: etcron_model::stored::TriggerRequest = serde_json::from_slice(resp.kvs()[0].value())?;
    assert_eq!(request.priority, Some(90));
    assert_eq!(ctl(&c, &["jobs", "run", "report", "--priority", "101"]).await.code, 2);

    c.put_job("report", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "true"}})).await?;
    assert_eq!(ctl(&c, &["pools", "delete", "db"]).await.ok().stdout, "pool db deleted\n");
    assert_eq!(ctl(&c, &["pools", "ls"]).await.ok().stdout, "NAME  SLOTS  IN-USE  WAITING  JOBS\n");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn workflows_get_shows_a_runs_steps_results_and_edges_and_resume_reruns_the_failed_one() -> anyhow::Result<()> {
    use etcron_model::record::Status;
    let c = Cluster::start("ctl-workflows", 0).await?;
    super::workflows::save_diamond(&c, None).await?;
    let steps = [
        ("extract", Status::Succeeded, Some(json!({"date": "2026-11-28"}))),
        ("ta", Status::Succeeded, None),
        ("tb", Status::TimedOut, None),
    ];
    let run = super::workflows::seed_run(&c, 1_764_547_200_000, &steps).await?;
    let out = ctl(&c, &["workflows", "get", &run]).await.ok();
    let rows: Vec<Vec<&str>> = out.stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[2], ["state:", "failed"], "{}", out.stdout);
    assert_eq!(rows[4], ["JOB", "STATE", "ATTEMPT", "EXECUTION", "AT"], "{}", out.stdout);
    let row = |job: &str| rows.iter().find(|r| r.first() == Some(&job)).cloned().unwrap_or_default();
    assert_eq!(row("tb")[..4], ["tb", "timed_out", "1", &*format!("tb@dep-wf-{run}#1")], "{}", out.stdout);
    assert_eq!(row("load"), ["load", "not_reached", "-", "-", "-"], "{}", out.stdout);
    assert!(out.stdout.contains("results:\nJOB      RESULT\nextract  {\"date\":\"2026-11-28\"}\n"), "{}", out.stdout);
    assert!(out.stdout.contains("edges:\nFROM     TO    KIND\nextract  ta    after\n"), "{}", out.stdout);
    let doc = ctl(&c, &["workflows", "get", &run, "-o", "json"]).await.ok().json();
    assert_eq!(doc, c.get(&format!("/api/workflows/{run}")).await?);
    let out = ctl(&c, &["workflows", "resume", &run]).await.ok();
    assert!(out.stdout.starts_with(&format!("workflow run {run} resumed: 1 failed step(s) rerun\n")), "{}", out.stdout);
    assert!(out.stdout.contains(&format!("tb   tb@dep-wf-{run}#2")), "{}", out.stdout);
    assert_eq!(ctl(&c, &["workflows", "get", "1-000000000000"]).await.code, 3, "not found");
    Ok(())
}
