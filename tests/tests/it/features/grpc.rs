//! gRPC tasks end to end: real etcd, `mongod`, a master and workers as processes, calling a real
//! gRPC server this test starts (`etcron_tests::grpc_server`): a call built from JSON through
//! the server's reflection service, its response as output and the `x-etcron-*` metadata seen
//! by the server; secret metadata sent but never shown; a failing status, an unknown method or
//! service, a bad request field and a streaming method each fail the run saying why; timeout
//! and kill cancel the call at the server; a `descriptor_set` calls a server without
//! reflection; a v1alpha-only reflection service; a server wanting a token for reflection too;
//! TLS with the worker's CA roots; a checkpoint POSTed by the server handed to the rerun; etcronctl
//! applying, running and describing one; the cluster's own etcd refused as an endpoint; the
//! 400s of bad specs; and hostile servers (reflection answers of a gigabyte, descriptors that
//! bloat once decoded, a packed response that bloats once decoded) refused by the worker's
//! budgets while its memory stays bounded.

use std::time::Duration;

use anyhow::Result;
use etcron_tests::grpc_server::{descriptor_set_base64, GrpcServer, Hostile, Options, Reflection};
use etcron_tests::{free_port, make_certs, scrape, urlencode, Cluster, WorkerOpts};
use reqwest::Method;
use serde_json::{json, Value};

/// Saves `job` with `task` (a gRPC task at `endpoint`), runs it once and answers its record.
async fn run_task(c: &Cluster, job: &str, task: Value) -> Result<Value> {
    c.put_job(job, json!({"schedule": "@yearly", "task": task})).await?;
    let id = c.run_now(job).await?;
    c.final_record(&id).await
}

fn grpc(endpoint: &str, method: &str, request: Value) -> Value {
    json!({"kind": "grpc", "endpoint": endpoint, "method": method, "request": request})
}

/// Runs etcronctl against the cluster's master (`GRPC_TOKEN` set): exit code, stdout, stderr.
async fn etcronctl(c: &Cluster, args: &[&str]) -> Result<(i32, String, String)> {
    let mut cmd = tokio::process::Command::new(etcron_tests::bin("etcronctl")?);
    cmd.args(args).env("ETCRON_SERVER", &c.master.url).env_remove("ETCRON_TOKEN").env("GRPC_TOKEN", "Bearer from-env");
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output()).await??;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Ok((out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr)))
}

/// The JSON after the output's status line.
fn response(record: &Value) -> Value {
    let output = record["output"].as_str().unwrap();
    let (_, json) = output.split_once('\n').unwrap();
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {output}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_through_reflection_succeed_fail_and_are_cancelled_as_the_server_sees_them() -> Result<()> {
    let server = GrpcServer::start(Reflection::V1).await?;
    let c = Cluster::start("grpc-reflection", 1).await?;
    let at = server.endpoint.as_str();

    // A call: the request from JSON, the response as output, the identity and the job's
    // metadata seen by the server, the secret sent but never shown.
    let mut task = grpc(at, "etcron.test.Echo/Echo", json!({"text": "hi", "count": 3, "tags": ["a", "b"]}));
    task["metadata"] = json!({"x-team": "data"});
    task["secret_metadata"] = json!({"authorization": "Bearer s3cret"});
    let ok = run_task(&c, "echo", task).await?;
    assert_eq!(ok["status"], "succeeded", "{ok}");
    assert!(ok["output"].as_str().unwrap().starts_with("gRPC OK\n"), "{ok}");
    let reply = response(&ok);
    assert_eq!((&reply["text"], &reply["count"], &reply["tags"]), (&json!("hi"), &json!(3), &json!(["a", "b"])));
    let seen: std::collections::BTreeMap<String, String> = reply["metadata"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().to_owned(), p["value"].as_str().unwrap().to_owned()))
        .collect();
    let id = ok["id"].as_str().unwrap();
    assert_eq!(seen["x-etcron-job"], "echo");
    assert_eq!(seen["x-etcron-execution-id"], id);
    assert_eq!(seen["x-etcron-attempt"], "1");
    assert_eq!(seen["x-etcron-worker-id"], "w1");
    assert_eq!(seen["x-etcron-fencing-token"], ok["fencing_token"].as_i64().unwrap().to_string());
    assert_eq!(seen["x-etcron-scheduled-at"], ok["scheduled_at"].as_str().unwrap());
    let scheduled_ms = chrono::DateTime::parse_from_rfc3339(ok["scheduled_at"].as_str().unwrap())?.timestamp_millis();
    assert_eq!(seen["x-etcron-scheduled-at-ms"], scheduled_ms.to_string());
    assert_eq!(seen["x-etcron-trigger"], "manual");
    assert_eq!(seen["x-team"], "data");
    let call =
        server.calls().into_iter().find(|c| c.metadata.get("x-etcron-execution-id").map(String::as_str) == Some(id));
    let call = call.expect("the server got the call");
    assert_eq!(call.metadata["authorization"], "Bearer s3cret", "the secret reached the server");
    assert!(call.metadata["user-agent"].starts_with("etcron-worker/"), "{:?}", call.metadata);
    let shown = c.get("/api/jobs/echo").await?;
    assert_eq!(shown["spec"]["task"]["secret_metadata"], json!({"authorization": null}));
    assert!(!shown.to_string().contains("s3cret") && !ok.to_string().contains("s3cret"), "{shown}");
    // An edit that keeps the secret (null) still sends it.
    let mut spec = shown["spec"].clone();
    spec["description"] = json!("edited");
    c.put_job("echo", spec).await?;
    let again = c.final_record(&c.run_now("echo").await?).await?;
    assert_eq!(again["status"], "succeeded", "{again}");
    let kept = server.calls().into_iter().rev().find(|c| c.method == "Echo").unwrap();
    assert_eq!(kept.metadata["authorization"], "Bearer s3cret");

    // etcronctl: a job file whose secret comes from the environment is applied, run and followed
    // (the output as it ends), and described; a bad file is refused before anything is sent.
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("jobs.yaml");
    std::fs::write(
        &file,
        format!(
            "jobs:\n  ctl-echo:\n    schedule: '@yearly'\n    task:\n      kind: grpc\n      endpoint: {at}\n      \
             method: etcron.test.Echo/Echo\n      request: {{text: from a file, tags: [x]}}\n      \
             secret_metadata: {{authorization: {{env: GRPC_TOKEN}}}}\n"
        ),
    )?;
    let (code, out, err) = etcronctl(&c, &["jobs", "apply", "-f", file.to_str().unwrap()]).await?;
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = etcronctl(&c, &["jobs", "run", "ctl-echo", "--follow"]).await?;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("gRPC OK") && out.contains("\"text\": \"from a file\""), "{out}{err}");
    let sent = server.calls().into_iter().rev().find(|c| c.request["text"] == "from a file").unwrap();
    assert_eq!(sent.metadata["authorization"], "Bearer from-env");
    let (code, out, err) = etcronctl(&c, &["jobs", "describe", "ctl-echo"]).await?;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("grpc: etcron.test.Echo/Echo at {at}")), "{out}");
    std::fs::write(&file, std::fs::read_to_string(&file)?.replace("Echo/Echo", "Echo.Echo"))?;
    let (code, out, err) = etcronctl(&c, &["jobs", "apply", "-f", file.to_str().unwrap()]).await?;
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("task.method"), "{err}");

    // A status other than OK fails the run, naming it; a well-known type (Empty) as the output.
    let failed =
        run_task(&c, "fail", grpc(at, "etcron.test.Echo/Fail", json!({"code": 5, "message": "no such invoice"})))
            .await?;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"], "gRPC status NOT_FOUND: no such invoice");
    assert_eq!(failed["output"], "gRPC NOT_FOUND no such invoice\n");
    let empty = run_task(&c, "empty", grpc(at, "etcron.test.Echo/Fail", json!({"code": 0}))).await?;
    assert_eq!((&empty["status"], &empty["output"]), (&json!("succeeded"), &json!("gRPC OK\n{}")), "{empty}");

    // What cannot be called fails before any call, saying why.
    let calls_before = server.calls().len();
    for (job, method, request, says) in [
        (
            "no-method",
            "etcron.test.Echo/Nope",
            json!({}),
            "has no method Nope (its methods: Echo, Fail, Sleep, Watch, Numbers)",
        ),
        (
            "no-service",
            "etcron.test.Missing/Echo",
            json!({}),
            "no service etcron.test.Missing (its services: etcron.test.Echo)",
        ),
        (
            "bad-field",
            "etcron.test.Echo/Echo",
            json!({"txet": "x"}),
            "task.request.txet: unrecognized field name 'txet'",
        ),
        ("bad-type", "etcron.test.Echo/Echo", json!({"count": "many"}), "task.request.count"),
        ("streaming", "etcron.test.Echo/Watch", json!({}), "is server streaming: gRPC tasks call unary methods only"),
    ] {
        let r = run_task(&c, job, grpc(at, method, request)).await?;
        assert_eq!(r["status"], "failed", "{r}");
        let error = r["error"].as_str().unwrap();
        assert!(error.contains(says), "{job}: {error}");
    }
    assert_eq!(server.calls().len(), calls_before, "none of them reached the service");

    // A timeout and a kill cancel the call; the server sees both cancelled.
    let mut slow = grpc(at, "etcron.test.Echo/Sleep", json!({"millis": 60_000}));
    c.put_job("slow", json!({"schedule": "@yearly", "timeout": "1s", "task": slow.clone()})).await?;
    let timed_out = c.final_record(&c.run_now("slow").await?).await?;
    assert_eq!(timed_out["status"], "timed_out", "{timed_out}");
    server.wait(Duration::from_secs(10), "the timed-out sleep cancelled", |_, cancelled| cancelled.len() == 1).await?;
    slow["metadata"] = json!({"x-run": "killed"});
    c.put_job("slow", json!({"schedule": "@yearly", "task": slow})).await?;
    let id = c.run_now("slow").await?;
    server
        .wait(Duration::from_secs(30), "the second sleep to start", |calls, _| {
            calls.iter().any(|c| c.metadata.get("x-run").map(String::as_str) == Some("killed"))
        })
        .await?;
    assert!(server.cancelled().len() == 1, "still sleeping");
    let (status, body) =
        c.call(Method::POST, &format!("/api/jobs/slow/kill?execution={}", urlencode(&id)), None).await?;
    assert_eq!(status, 202, "{body}");
    let killed = c.final_record(&id).await?;
    assert_eq!(killed["status"], "killed", "{killed}");
    server.wait(Duration::from_secs(10), "the killed sleep cancelled", |_, cancelled| cancelled.len() == 2).await?;

    // The cluster's own etcd speaks gRPC: a task may not call it (the worker allows loopback,
    // not its control plane), and is refused before it connects.
    let etcd = format!("127.0.0.1:{}", c.etcd.client_port);
    let mut to_etcd = grpc(&format!("http://{etcd}"), "etcron.test.Echo/Echo", json!({}));
    to_etcd["descriptor_set"] = json!(descriptor_set_base64());
    let refused = run_task(&c, "to-etcd", to_etcd).await?;
    assert_eq!(refused["status"], "failed", "{refused}");
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!("http://{etcd} was not called: refused to connect to {etcd}: it is etcd endpoint"))
            && error.contains("task_network_allow"),
        "{error}"
    );
    assert!(refused["output"].as_str().unwrap().contains("task_network_allow"), "{refused}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_specs_are_refused_naming_the_field() -> Result<()> {
    let c = Cluster::start("grpc-specs", 0).await?;
    let at = "http://127.0.0.1:50051";
    let set = descriptor_set_base64();
    let with = |extra: Value| {
        let mut task = grpc(at, "etcron.test.Echo/Echo", json!({}));
        task.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        json!({"schedule": "@yearly", "task": task})
    };
    for (spec, field) in [
        (with(json!({"method": "etcron.test.Echo.Echo"})), "task.method"),
        (with(json!({"method": "/etcron.test.Echo/Echo"})), "task.method"),
        (with(json!({"endpoint": "127.0.0.1:50051"})), "task.endpoint"),
        (with(json!({"endpoint": "http://127.0.0.1:50051/etcron.test.Echo"})), "task.endpoint"),
        (with(json!({"metadata": {"X-Team": "data"}})), "task.metadata.X-Team"),
        (with(json!({"metadata": {"x-etcron-job": "other"}})), "task.metadata.x-etcron-job"),
        (with(json!({"secret_metadata": {"token-bin": "AAAA"}})), "task.secret_metadata.token-bin"),
        (with(json!({"request": [1, 2]})), "task.request"),
        (with(json!({"request": "{}"})), "task.request"),
        (with(json!({"descriptor_set": "not base64!"})), "task.descriptor_set"),
        (with(json!({"descriptor_set": "AAAA"})), "task.descriptor_set"),
        (with(json!({"descriptor_set": set, "method": "etcron.test.Echo/Watch"})), "task.method"),
        (with(json!({"descriptor_set": set, "method": "etcron.test.Other/Echo"})), "task.method"),
        (with(json!({"descriptor_set": set, "request": {"txet": "x"}})), "task.request.txet"),
        (with(json!({"url": "http://h/"})), "task.url"),
    ] {
        let (status, body) = c.call(Method::PUT, "/api/jobs/bad", Some(spec.clone())).await?;
        assert_eq!((status, body["error"]["field"].as_str()), (400, Some(field)), "{spec}: {body}");
        assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    }
    // A secret kept (null) must be given again when the endpoint moves elsewhere.
    let mut task = grpc(at, "etcron.test.Echo/Echo", json!({}));
    task["secret_metadata"] = json!({"authorization": "Bearer t"});
    c.put_job("moves", json!({"schedule": "@yearly", "task": task})).await?;
    let mut spec = c.get("/api/jobs/moves").await?["spec"].clone();
    spec["task"]["endpoint"] = json!("http://elsewhere.example:50051");
    let (status, body) = c.call(Method::PUT, "/api/jobs/moves", Some(spec)).await?;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("task.secret_metadata.authorization")), "{body}");
    // Environment overrides are for shell tasks.
    let (status, body) = c.call(Method::POST, "/api/jobs/moves/run", Some(json!({"env": {"A": "1"}}))).await?;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("env")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("gRPC task"), "{body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn descriptor_sets_v1alpha_reflection_credentials_and_tls() -> Result<()> {
    let certs = tempfile::tempdir()?;
    make_certs(certs.path())?;
    let read = |f: &str| std::fs::read(certs.path().join(f));
    let plain = GrpcServer::start(Reflection::None).await?;
    let alpha = GrpcServer::start(Reflection::V1Alpha).await?;
    let tls = GrpcServer::start_with(Options {
        tls: Some((read("server.pem")?, read("server.key")?)),
        ..Options::new(Reflection::V1)
    })
    .await?;
    let guarded =
        GrpcServer::start_with(Options { token: Some("Bearer t0k".to_owned()), ..Options::new(Reflection::V1) })
            .await?;
    let mut c = Cluster::start("grpc-tls", 0).await?;
    // w1 trusts the test CA (rustls reads SSL_CERT_FILE as the system roots); w2 does not.
    let mut trusting = WorkerOpts::new("w1");
    trusting.labels.insert("ca".to_owned(), "test".to_owned());
    trusting.env.push(("SSL_CERT_FILE".to_owned(), certs.path().join("ca.pem").display().to_string()));
    c.add_worker(trusting)?;
    let mut other = WorkerOpts::new("w2");
    other.labels.insert("ca".to_owned(), "system".to_owned());
    c.add_worker(other)?;
    c.wait_workers(2).await?;

    // No reflection: a descriptor set calls it; without one, the run says what to do.
    let mut task = grpc(&plain.endpoint, "etcron.test.Echo/Echo", json!({"text": "from a set"}));
    task["descriptor_set"] = json!(descriptor_set_base64());
    let ok = run_task(&c, "with-set", task).await?;
    assert_eq!(ok["status"], "succeeded", "{ok}");
    assert_eq!(response(&ok)["text"], "from a set");
    let without = run_task(&c, "without-set", grpc(&plain.endpoint, "etcron.test.Echo/Echo", json!({}))).await?;
    assert_eq!(without["status"], "failed", "{without}");
    let error = without["error"].as_str().unwrap();
    assert!(error.contains("UNIMPLEMENTED") && error.contains("give task.descriptor_set"), "{error}");

    // A server with only the v1alpha reflection service.
    let old = run_task(&c, "alpha", grpc(&alpha.endpoint, "etcron.test.Echo/Echo", json!({"text": "alpha"}))).await?;
    assert_eq!((&old["status"], &response(&old)["text"]), (&json!("succeeded"), &json!("alpha")), "{old}");

    // A server that wants a token for everything, reflection included: without it the
    // reflection requests are refused; with it (the job's metadata goes with them too) the call
    // is made.
    let denied = run_task(&c, "unguarded", grpc(&guarded.endpoint, "etcron.test.Echo/Echo", json!({}))).await?;
    assert_eq!(denied["status"], "failed", "{denied}");
    let error = denied["error"].as_str().unwrap();
    assert!(
        error.starts_with("asking the server's reflection service") && error.contains("UNAUTHENTICATED"),
        "{error}"
    );
    let mut task = grpc(&guarded.endpoint, "etcron.test.Echo/Echo", json!({"text": "with a token"}));
    task["secret_metadata"] = json!({"authorization": "Bearer t0k"});
    let allowed = run_task(&c, "guarded", task).await?;
    assert_eq!(
        (&allowed["status"], &response(&allowed)["text"]),
        (&json!("succeeded"), &json!("with a token")),
        "{allowed}"
    );

    // TLS: verified against the worker's roots.
    let on = |ca: &str| {
        let mut spec = json!({"schedule": "@yearly", "selector": {"ca": ca}});
        spec["task"] = grpc(&tls.endpoint, "etcron.test.Echo/Echo", json!({"text": "over tls"}));
        spec
    };
    c.put_job("tls-trusted", on("test")).await?;
    let trusted = c.final_record(&c.run_now("tls-trusted").await?).await?;
    assert_eq!((&trusted["status"], &trusted["worker_id"]), (&json!("succeeded"), &json!("w1")), "{trusted}");
    assert_eq!(response(&trusted)["text"], "over tls");
    c.put_job("tls-unknown-ca", on("system")).await?;
    let refused = c.final_record(&c.run_now("tls-unknown-ca").await?).await?;
    assert_eq!((&refused["status"], &refused["worker_id"]), (&json!("failed"), &json!("w2")), "{refused}");
    let error = refused["error"].as_str().unwrap();
    assert!(error.starts_with(&format!("connecting to {} failed: ", tls.endpoint)), "{error}");
    assert!(error.contains("certificate"), "{error}");
    assert!(tls
        .calls()
        .iter()
        .all(|call| call.request["text"] != "over tls" || call.metadata["x-etcron-worker-id"] == "w1"));
    Ok(())
}

/// A gRPC call reports a checkpoint the way a remote service would (a POST to the
/// `x-etcron-progress-url` it was given, with its token); its worker is SIGKILLed; the
/// survivor's failover rerun calls again with `x-etcron-checkpoint` and `x-etcron-resumed-from`.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_whose_worker_dies_is_rerun_with_its_last_checkpoint() -> Result<()> {
    let mut c = Cluster::start("grpc-handoff", 0).await?;
    for i in 1..=2 {
        c.add_worker(WorkerOpts::new(&format!("w{i}")))?;
    }
    c.wait_workers(2).await?;
    let server = GrpcServer::start(Reflection::V1).await?;
    let task = grpc(&server.endpoint, "etcron.test.Echo/Sleep", json!({"millis": 4000}));
    c.put_job("long-call", json!({"schedule": "@yearly", "task": task})).await?;
    let first = c.run_now("long-call").await?;
    server.wait(Duration::from_secs(30), "the first call", |calls, _| !calls.is_empty()).await?;
    let call = server.calls()[0].clone();
    let (url, token) = (&call.metadata["x-etcron-progress-url"], &call.metadata["x-etcron-progress-token"]);
    assert!(!call.metadata.contains_key("x-etcron-checkpoint"), "a first attempt resumes from nothing");
    let report = c.http.post(url).bearer_auth(token).json(&json!({"percent": 40, "checkpoint": {"row": 4000}}));
    assert_eq!(report.send().await?.status().as_u16(), 204, "the checkpoint is stored");
    let shown = c.get(&format!("/api/executions/{}", urlencode(&first))).await?;
    assert_eq!((&shown["progress"]["percent"], &shown["checkpoint"]), (&json!(40.0), &json!({"row": 4000})));
    let runner = call.metadata["x-etcron-worker-id"].clone();
    let idx = c.workers.iter().position(|w| w.opts.id == runner).unwrap();
    c.workers[idx].proc.kill9();
    let done = c
        .wait_executions("job=long-call&status=succeeded", "the rerun to succeed", |l| l.len() == 1)
        .await
        .inspect_err(|_| c.dump_logs())?;
    let rerun = c.get(&format!("/api/executions/{}", urlencode(done[0]["id"].as_str().unwrap()))).await?;
    let calls = server.calls();
    assert_eq!(calls.len(), 2, "one call per attempt: {calls:?}");
    let again = &calls[1].metadata;
    assert_eq!(serde_json::from_str::<Value>(&again["x-etcron-checkpoint"])?, json!({"row": 4000}));
    assert_eq!(again.get("x-etcron-resumed-from"), Some(&first));
    assert_eq!(again.get("x-etcron-trigger").map(String::as_str), Some("failover"));
    assert_ne!(again["x-etcron-worker-id"], runner);
    assert_eq!(rerun["resumed_from"]["execution_id"], first.as_str(), "{rerun}");
    assert_eq!(rerun["resumed_from"]["checkpoint"], json!({"row": 4000}));
    Ok(())
}

/// A `/proc/<pid>/status` field in MiB (`VmRSS`, `VmHWM`: the peak).
fn memory_mib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() / 1024
}

/// Hostile servers answer within the per-message limit (4 MiB) yet try to make the worker hold
/// gigabytes: 256 files of 4 MiB through reflection, a file of empty message descriptors that
/// bloats once decoded, a 4 MiB packed response (a value per byte once decoded). Each run fails
/// naming the budget it passed, a second run does not pay it again, the worker's memory (its
/// peak included) stays far below what it used to reach, and a normal server is still called.
#[tokio::test(flavor = "multi_thread")]
async fn hostile_servers_are_refused_by_budgets_and_the_worker_stays_small() -> Result<()> {
    let hostile = |kind| GrpcServer::start_with(Options { hostile: Some(kind), ..Options::new(Reflection::V1) });
    let large = hostile(Hostile::LargeFiles).await?;
    let bloated = hostile(Hostile::BloatedFiles).await?;
    let normal = GrpcServer::start(Reflection::V1).await?;
    let mut c = Cluster::start("grpc-hostile", 0).await?;
    let port = free_port();
    let mut opts = WorkerOpts::new("w1");
    opts.extra = vec!["--metrics-listen".to_owned(), format!("127.0.0.1:{port}")];
    c.add_worker(opts)?;
    c.wait_workers(1).await?;
    let pid = c.workers[0].proc.pid().unwrap();
    let echo = |at: &str| grpc(at, "etcron.test.Echo/Echo", json!({"text": "hi"}));

    let refused = run_task(&c, "large", echo(&large.endpoint)).await?;
    assert_eq!(refused["status"], "failed", "{refused}");
    let error = refused["error"].as_str().unwrap();
    assert!(error.contains("reflection budget (reflection_bytes): more than 8 MiB of answers in one run"), "{error}");
    let streams = |s: &GrpcServer| s.calls().iter().filter(|c| c.method == "ServerReflectionInfo").count();
    let asked = streams(&large);
    // The next run is refused at once: the server is not asked again within the minute.
    let again = c.final_record(&c.run_now("large").await?).await?;
    assert_eq!(again["status"], "failed", "{again}");
    assert!(again["error"].as_str().unwrap().contains("reflection_bytes"), "{again}");
    assert!(again["error"].as_str().unwrap().contains("refused within the last 60 s"), "{again}");
    assert_eq!(streams(&large), asked, "no new reflection request");

    let bloat = run_task(&c, "bloated", echo(&bloated.endpoint)).await?;
    assert_eq!(bloat["status"], "failed", "{bloat}");
    let error = bloat["error"].as_str().unwrap();
    assert!(error.contains("(reflection_memory): file descriptors that would take more than 64 MiB"), "{error}");

    // About 4 MB of packed ones: refused before decoding; a small answer of the same method works.
    let numbers = |count: i32| grpc(&normal.endpoint, "etcron.test.Echo/Numbers", json!({"count": count}));
    let packed = run_task(&c, "packed", numbers(4_000_000)).await?;
    assert_eq!(packed["status"], "failed", "{packed}");
    let error = packed["error"].as_str().unwrap();
    assert!(error.contains("response_memory limit of 64 MiB"), "{error}");
    assert!(packed["output"].as_str().unwrap().contains("response_memory"), "{packed}");
    let few = run_task(&c, "few", numbers(1000)).await?;
    assert_eq!(few["status"], "succeeded", "{few}");
    assert_eq!(response(&few)["values"].as_array().unwrap().len(), 1000);
    let ok = run_task(&c, "normal", echo(&normal.endpoint)).await?;
    assert_eq!((&ok["status"], &response(&ok)["text"]), (&json!("succeeded"), &json!("hi")), "{ok}");

    // It used to reach gigabytes (2.7 GB after one run of the first server).
    let (rss, peak) = (memory_mib(pid, "VmRSS:"), memory_mib(pid, "VmHWM:"));
    assert!(rss < 400 && peak < 400, "worker memory: {rss} MiB now, {peak} MiB at most");
    let metrics = scrape(&format!("http://127.0.0.1:{port}/metrics"), None).await?;
    for (limit, n) in [("reflection_bytes", 1.0), ("reflection_memory", 1.0), ("response_memory", 1.0)] {
        assert_eq!(metrics.value("etcron_worker_grpc_limits_total", &[("limit", limit)]), n, "{limit}");
    }
    Ok(())
}
