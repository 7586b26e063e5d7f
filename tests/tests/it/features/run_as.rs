//! Shell tasks that run as another user (`task.user`, `task.group`): only workers running as
//! root that list the user in `run_as_users` race for such a job's ticks — two of them racing
//! run each tick once, as the user with the user's home; a tick no live worker may run is
//! recorded `missed` naming the user; a group that is not the user's fails the run naming it.
//! A worker not running as root refuses `run_as_users` at start.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use etcron_tests::{bin, log_dir, now_ms, read_fired, wait_for, Cluster, Proc, WorkerOpts};
use reqwest::Method;
use serde_json::{json, Value};

/// Appends the identity of the run and the account it ran as to `file`.
fn whoami_command(file: &Path) -> String {
    format!(
        "echo \"$ETCRON_JOB $ETCRON_SCHEDULED_AT_MS $ETCRON_ATTEMPT $ETCRON_WORKER_ID $ETCRON_FENCING_TOKEN $(id -un) $(id -gn) $HOME $USER\" >> {}",
        file.display()
    )
}

fn as_user(file: &Path, user: &str, group: Option<&str>) -> Value {
    let mut task = json!({"kind": "shell", "command": whoami_command(file), "user": user});
    if let Some(group) = group {
        task["group"] = json!(group);
    }
    json!({"schedule": "* * * * * *", "task": task})
}

fn worker(id: &str, users: &str) -> WorkerOpts {
    let mut opts = WorkerOpts::new(id);
    opts.extra = vec!["--run-as-users".to_owned(), users.to_owned()];
    opts
}

/// A directory and file every user may write to (the test's own work dir is root's alone).
fn shared_file(c: &Cluster) -> std::path::PathBuf {
    std::fs::set_permissions(c.work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = c.path("shared");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let file = dir.join("fired");
    std::fs::write(&file, "").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    file
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_run_as_a_user_only_on_workers_that_allow_it_and_each_tick_once() -> anyhow::Result<()> {
    assert!(nix::unistd::geteuid().is_root(), "switching users needs the tests to run as root, as CI does");
    let mut c = Cluster::start_with("run-as", 0, false, &[]).await?;
    c.add_worker(worker("w1", "nobody"))?;
    c.add_worker(worker("w2", "nobody,daemon"))?;
    c.wait_workers(2).await?;
    let workers = c.get("/api/workers").await?;
    let w2 = workers["workers"].as_array().unwrap().iter().find(|w| w["id"] == "w2").unwrap();
    assert_eq!(w2["run_as_users"], json!(["nobody", "daemon"]));

    // Bad names are refused naming the field.
    let (status, body) = c.call(Method::PUT, "/api/jobs/bad-user", Some(as_user(Path::new("/x"), "0", None))).await?;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("task.user")), "{body}");
    let mut no_user = as_user(Path::new("/x"), "nobody", Some("nogroup"));
    no_user["task"].as_object_mut().unwrap().remove("user");
    let (status, body) = c.call(Method::PUT, "/api/jobs/bad-group", Some(no_user)).await?;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("task.group")), "{body}");

    let file = shared_file(&c);
    let start = now_ms();
    c.put_job("as-nobody", as_user(&file, "nobody", None)).await?;
    c.put_job("as-daemon", as_user(&file, "daemon", Some("daemon"))).await?;
    c.put_job("as-bin", as_user(&file, "bin", None)).await?;
    c.put_job("wrong-group", as_user(&file, "nobody", Some("root"))).await?;

    let missed = c
        .wait_executions("job=as-bin&status=missed", "a missed tick of the job no worker may run", |l| !l.is_empty())
        .await?;
    let reason = missed[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("no live worker may run tasks as user \"bin\""), "{reason}");
    let failed = c
        .wait_executions("job=wrong-group&status=failed", "a failed run of the job with a foreign group", |l| {
            !l.is_empty()
        })
        .await?;
    let error = failed[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("task.group \"root\" is not a group of user \"nobody\""), "{error}");

    wait_for(Duration::from_secs(30), "six runs of each allowed job", || async {
        let fired = read_fired(&file);
        let count = |job: &str| fired.iter().filter(|f| f.job == job).count();
        (count("as-nobody") >= 6 && count("as-daemon") >= 6).then_some(())
    })
    .await?;
    for job in ["as-nobody", "as-daemon", "as-bin", "wrong-group"] {
        c.call(Method::DELETE, &format!("/api/jobs/{job}"), None).await?;
    }
    // Runs already started finish their line.
    c.settle_claims(now_ms()).await?;

    let fired = read_fired(&file);
    assert!(fired.iter().all(|f| f.scheduled_ms > start - 1000), "only this test's ticks");
    let mut ticks = std::collections::BTreeMap::<(String, i64), usize>::new();
    for f in &fired {
        *ticks.entry((f.job.clone(), f.scheduled_ms)).or_default() += 1;
        let (user, group, home) = (f.extra[0].as_str(), f.extra[1].as_str(), f.extra[2].as_str());
        match f.job.as_str() {
            "as-nobody" => assert_eq!((user, group, home), ("nobody", "nogroup", "/nonexistent"), "{f:?}"),
            "as-daemon" => {
                assert_eq!((user, group, f.worker.as_str()), ("daemon", "daemon", "w2"), "only w2 allows daemon")
            }
            other => panic!("{other} must never run: {f:?}"),
        }
        assert_eq!(f.extra[3], user, "USER is the account's");
    }
    let twice: Vec<_> = ticks.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ticks run more than once: {twice:?}");
    let by_worker = |w: &str| fired.iter().filter(|f| f.job == "as-nobody" && f.worker == w).count();
    assert!(by_worker("w1") + by_worker("w2") >= 6, "both workers raced the nobody job");
    Ok(())
}

/// Without root a worker cannot switch users: it says so at start instead of failing every run.
/// (Started as `nobody` through `setpriv`.)
#[test]
fn a_worker_not_running_as_root_refuses_run_as_users() -> anyhow::Result<()> {
    let logs = log_dir("run-as-not-root");
    // A copy nobody can reach (the checkout may sit in root's home).
    let dir = tempfile::tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
    let worker = dir.path().join("etcron-worker");
    std::fs::copy(bin("etcron-worker")?, &worker)?;
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"]).arg(&worker);
    cmd.args(["--etcd-endpoints", "http://127.0.0.1:1", "--run-as-users", "nobody", "--worker-id", "w1"]);
    cmd.arg("--data-dir").arg("/nonexistent/etcron");
    let mut proc = Proc::spawn("worker", cmd, logs.join("worker.log"))?;
    let code = proc.wait_exit(Duration::from_secs(20))?;
    assert!(code.is_some_and(|c| c != 0), "the worker must exit with an error, got {code:?}");
    let log = proc.log_text();
    assert!(log.contains("run_as_users: the worker runs as uid 65534 and cannot switch users"), "{log}");
    Ok(())
}
