//! Asynchronous HTTP tasks end to end (real etcd, `mongod`, a master, real workers, and a real
//! HTTP service started here that answers `202 Accepted` and a status URL): the worker polls
//! until the status document says done or failed, its progress and checkpoints reach the API
//! and the record, a kill and a timeout send the cancel request, bad specs are refused naming
//! the field, and a worker SIGKILLed while polling is handed off: the rerun's request carries
//! the last checkpoint (`X-Etcron-Checkpoint`), so the remote side continues from it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use etcron_tests::{urlencode, wait_for, Cluster, WorkerOpts};
use reqwest::Method;
use serde_json::{json, Value};

/// One piece of remote work.
#[derive(Debug, Clone, Default)]
struct Work {
    /// Polls until it ends; each poll is one step.
    steps: u32,
    step: u32,
    fail: bool,
    cancelled: bool,
    /// Headers of the request that started it, and of each poll and cancel (names lowercase).
    started_with: HashMap<String, String>,
    polled_with: Vec<HashMap<String, String>>,
    cancelled_with: Option<HashMap<String, String>>,
}

#[derive(Clone, Default)]
struct Remote(Arc<Mutex<Vec<Work>>>);

impl Remote {
    fn works(&self) -> Vec<Work> {
        self.0.lock().unwrap().clone()
    }
}

fn headers_of(h: &HeaderMap) -> HashMap<String, String> {
    h.iter().map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())).collect()
}

/// `POST /work?steps=N[&fail=1]`: 202, `Location: /status/{k}`. A request carrying
/// `X-Etcron-Checkpoint: {"step": s}` continues from step s.
async fn start(State(r): State<Remote>, Query(q): Query<HashMap<String, String>>, h: HeaderMap) -> impl IntoResponse {
    let from = h
        .get("x-etcron-checkpoint")
        .and_then(|v| serde_json::from_slice::<Value>(v.as_bytes()).ok())
        .and_then(|v| v["step"].as_u64())
        .map_or(0, |s| u32::try_from(s).unwrap());
    let mut works = r.0.lock().unwrap();
    works.push(Work {
        steps: q["steps"].parse().unwrap(),
        step: from,
        fail: q.contains_key("fail"),
        started_with: headers_of(&h),
        ..Work::default()
    });
    let k = works.len() - 1;
    // `status_at`: the status URL is there instead (another origin, or where it may not point).
    let location = q.get("status_at").map_or_else(|| format!("/status/{k}"), |at| format!("{at}/status/{k}"));
    (StatusCode::ACCEPTED, [("location", location)], Json(json!({"id": k})))
}

/// `GET|POST /hop?to=URL`: 307 to it.
async fn hop(Query(q): Query<HashMap<String, String>>) -> impl IntoResponse {
    (StatusCode::TEMPORARY_REDIRECT, [("location", q["to"].clone())])
}

/// `GET /status/{k}`: one more step; the state, percent, message and checkpoint of the work.
async fn status(State(r): State<Remote>, Path(k): Path<usize>, h: HeaderMap) -> Json<Value> {
    let mut works = r.0.lock().unwrap();
    let w = &mut works[k];
    w.polled_with.push(headers_of(&h));
    if w.cancelled {
        return Json(json!({"state": "cancelled"}));
    }
    w.step += 1;
    if w.step > w.steps {
        let state = if w.fail { "failed" } else { "succeeded" };
        return Json(json!({"state": state, "output": format!("work {k} ended after step {}", w.steps)}));
    }
    let percent = f64::from(w.step) * 100.0 / f64::from(w.steps);
    Json(json!({"state": "running", "percent": percent, "message": format!("step {}", w.step),
        "checkpoint": {"step": w.step}}))
}

/// `DELETE /status/{k}`: cancels it.
async fn cancel(State(r): State<Remote>, Path(k): Path<usize>, h: HeaderMap) -> StatusCode {
    let mut works = r.0.lock().unwrap();
    works[k].cancelled = true;
    works[k].cancelled_with = Some(headers_of(&h));
    StatusCode::NO_CONTENT
}

/// Starts the remote service on a free port; its base URL.
async fn remote() -> Result<(String, Remote)> {
    let state = Remote::default();
    Ok((remote_at("127.0.0.1", state.clone()).await?, state))
}

/// The remote service on a free port of `ip`, with `state` (several origins may share one);
/// its base URL.
async fn remote_at(ip: &str, state: Remote) -> Result<String> {
    let app = Router::new()
        .route("/work", post(start))
        .route("/hop", get(hop).post(hop))
        .route("/status/{k}", get(status).delete(cancel))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind((ip, 0)).await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

/// A status server on loopback whose `GET` answers 200 and then a byte of its body every
/// 300 ms (never finishing in time), and whose `DELETE` answers 204 at once; its base URL.
async fn trickling_status() -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = [0_u8; 4096];
                let n = socket.read(&mut head).await.unwrap_or(0);
                if head[..n].starts_with(b"DELETE") {
                    let _ = socket.write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n").await;
                    return;
                }
                let _ = socket
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n")
                    .await;
                for _ in 0..1000 {
                    if socket.write_all(b" ").await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            });
        }
    });
    Ok(url)
}

fn job(url: &str, steps: u32, extra: &str, poll: Value) -> Value {
    json!({"schedule": "@yearly", "task": {"kind": "http", "method": "POST",
        "url": format!("{url}/work?steps={steps}{extra}"), "secret_headers": {"X-Api-Key": "k3y"}, "async": poll}})
}

async fn record(c: &Cluster, id: &str, status: &str) -> Result<Value> {
    let path = format!("/api/executions/{}", urlencode(id));
    wait_for(Duration::from_secs(60), &format!("{id} {status}"), || async {
        let v = c.get(&path).await.ok()?;
        (v["status"] == status && v.get("finished_at").is_some_and(|f| !f.is_null())).then_some(v)
    })
    .await
    .inspect_err(|_| c.dump_logs())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_accepted_request_is_polled_to_its_end_with_progress_and_checkpoints() -> Result<()> {
    let c = Cluster::start("async-http", 1).await?;
    let (url, remote) = remote().await?;
    c.put_job("ok", job(&url, 6, "", json!({"interval": "300ms"}))).await?;
    let id = c.run_now("ok").await?;
    // While it runs, the API shows the status document's progress.
    let path = format!("/api/executions/{}", urlencode(&id));
    let shown = wait_for(Duration::from_secs(30), "progress in the API", || async {
        let v = c.get(&path).await.ok()?;
        (v["status"] == "running" && v["progress"]["percent"].as_f64()? >= 50.0).then_some(v)
    })
    .await?;
    assert!(shown["progress"]["message"].as_str().unwrap().starts_with("step "), "{shown}");
    let done = record(&c, &id, "succeeded").await?;
    let output = done["output"].as_str().unwrap();
    assert!(output.starts_with("HTTP 202 Accepted\n{\"id\":0}\npolling http://"), "{output}");
    assert!(
        output.contains("running 50% step 3\n") && output.contains("succeeded\nwork 0 ended after step 6\n"),
        "{output}"
    );
    assert_eq!(done["checkpoint"], json!({"step": 6}), "the last checkpoint is kept: {done}");
    assert_eq!(done["http_status"], 202);
    let work = &remote.works()[0];
    assert_eq!(work.polled_with.len(), 7, "one poll per step, then the end");
    for h in work.polled_with.iter().chain([&work.started_with]) {
        assert_eq!(h.get("x-etcron-execution-id"), Some(&id), "{h:?}");
        assert_eq!(h.get("x-api-key").map(String::as_str), Some("k3y"), "same origin: secrets go along");
    }
    assert!(
        work.started_with.contains_key("x-etcron-progress-url")
            && work.started_with.contains_key("x-etcron-progress-token")
    );
    assert!(!work.started_with.contains_key("x-etcron-checkpoint"), "a first attempt resumes from nothing");

    // A failed state fails the run, naming it.
    c.put_job("bad", job(&url, 1, "&fail=1", json!({"interval": "200ms"}))).await?;
    let failed = record(&c, &c.run_now("bad").await?, "failed").await?;
    assert!(
        failed["error"].as_str().unwrap().starts_with("the remote work failed: state \"failed\" at http://"),
        "{failed}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_and_timeout_send_the_cancel_request_and_bad_specs_are_refused() -> Result<()> {
    let c = Cluster::start("async-http-cancel", 1).await?;
    let (url, remote) = remote().await?;
    c.put_job("forever", job(&url, 1_000_000, "", json!({"interval": "200ms"}))).await?;
    let id = c.run_now("forever").await?;
    wait_for(Duration::from_secs(30), "a few polls", || async {
        remote.works().first().is_some_and(|w| w.polled_with.len() >= 3).then_some(())
    })
    .await?;
    let (status, body) = c.call(Method::POST, "/api/jobs/forever/kill", None).await?;
    assert_eq!(status, 202, "{body}");
    let killed = record(&c, &id, "killed").await?;
    let cancelled = remote.works()[0].cancelled_with.clone().expect("the kill sent the cancel request");
    assert_eq!(cancelled.get("x-etcron-execution-id"), Some(&id));
    let output = killed["output"].as_str().unwrap();
    assert!(
        output.trim_end().ends_with(&format!("cancel: DELETE {url}/status/0 answered HTTP 204 No Content")),
        "{output}"
    );

    // A polling timeout (the job's own timeout is longer) times the run out and cancels.
    let mut slow = job(&url, 1_000_000, "", json!({"interval": "200ms", "timeout": "2s"}));
    slow["timeout"] = json!("1m");
    c.put_job("slow", slow).await?;
    let timed = record(&c, &c.run_now("slow").await?, "timed_out").await?;
    assert!(remote.works()[1].cancelled, "the timeout sent the cancel request");
    assert!(timed["output"].as_str().unwrap().contains("polling timed out after 2s"), "{timed}");

    // A status answer that trickles in (a byte every 300 ms) does not outlive the polling
    // timeout either.
    let trickle = trickling_status().await?;
    let mut slow =
        job(&url, 1_000_000, &format!("&status_at={trickle}"), json!({"interval": "200ms", "timeout": "2s"}));
    slow["timeout"] = json!("1m");
    c.put_job("trickled", slow).await?;
    let started = std::time::Instant::now();
    let timed = record(&c, &c.run_now("trickled").await?, "timed_out").await?;
    assert!(started.elapsed() < Duration::from_secs(20), "timed out after {:?}", started.elapsed());
    assert!(timed["output"].as_str().unwrap().contains("a status answer was still arriving"), "{timed}");

    for (poll, extra, field) in [
        (json!({"interval": "10ms"}), json!({}), "task.async.interval"),
        (json!({"fields": {"state": "state"}}), json!({}), "task.async.fields.state"),
        (json!({"done": ["x"], "failed": ["x"]}), json!({}), "task.async.failed"),
        (json!({"cancel": {"method": "GET"}}), json!({}), "task.async.cancel.method"),
        (json!({"every": "1s"}), json!({}), "task.async.every"),
        (json!({}), json!({"expect_status": 200}), "task.expect_status"),
    ] {
        let mut spec = job(&url, 1, "", poll);
        for (k, v) in extra.as_object().unwrap() {
            spec["task"][k] = v.clone();
        }
        let (status, body) = c.call(Method::PUT, "/api/jobs/refused", Some(spec)).await?;
        assert_eq!((status, body["error"]["field"].as_str()), (400, Some(field)), "{body}");
    }
    Ok(())
}

/// The worker polling a remote work is SIGKILLed; the survivor's failover rerun sends a new
/// request carrying the last checkpoint the status documents gave, and the remote side
/// continues from that step.
#[tokio::test(flavor = "multi_thread")]
async fn a_polled_task_whose_worker_dies_is_resumed_from_its_checkpoint() -> Result<()> {
    let mut c = Cluster::start("async-http-handoff", 0).await?;
    for i in 1..=2 {
        c.add_worker(WorkerOpts::new(&format!("w{i}")))?;
    }
    c.wait_workers(2).await?;
    let (url, remote) = remote().await?;
    c.put_job("long", job(&url, 30, "", json!({"interval": "300ms"}))).await?;
    let first = c.run_now("long").await?;
    let runner = wait_for(Duration::from_secs(30), "step 10", || async {
        let w = remote.works().first().cloned()?;
        (w.step >= 10).then(|| w.started_with["x-etcron-worker-id"].clone())
    })
    .await?;
    let idx = c.workers.iter().position(|w| w.opts.id == runner).unwrap();
    c.workers[idx].proc.kill9();
    let killed_at = remote.works()[0].step;
    let done = c
        .wait_executions("job=long&status=succeeded", "the rerun to succeed", |l| l.len() == 1)
        .await
        .inspect_err(|_| c.dump_logs())?;
    let rerun = c.get(&format!("/api/executions/{}", urlencode(done[0]["id"].as_str().unwrap()))).await?;
    let works = remote.works();
    assert_eq!(works.len(), 2, "one request per attempt");
    let second = &works[1].started_with;
    let from: Value = serde_json::from_str(&second["x-etcron-checkpoint"])?;
    let from_step = from["step"].as_u64().unwrap();
    assert!((9..=u64::from(killed_at)).contains(&from_step), "resumed at {from_step}, killed at {killed_at}");
    assert_eq!(second.get("x-etcron-resumed-from"), Some(&first));
    assert_ne!(second["x-etcron-worker-id"], runner);
    assert_eq!(rerun["resumed_from"]["execution_id"], first.as_str(), "{rerun}");
    assert_eq!(rerun["resumed_from"]["checkpoint"], from);
    assert_eq!(rerun["trigger"], "failover");
    assert_eq!(works[1].polled_with.len(), usize::try_from(31 - from_step)?, "the rest of the steps only");
    assert_eq!(c.get(&format!("/api/executions/{}", urlencode(&first))).await?["status"], "lost");
    println!(
        "async handoff: {first} on {runner} killed at remote step {killed_at}; the rerun's request carried \
         checkpoint {from}, the remote work continued from step {from_step} to 30"
    );
    Ok(())
}

/// Where the status and cancel requests go is checked as the task's URL is, and the progress
/// token and URL (credentials, like secret headers) stay with the task's origin: a `202` whose
/// `Location` names the cluster's etcd fails the run at once (nothing polled there); a task whose
/// request is redirected to another origin (127.0.0.2), polled and cancelled there, sends that
/// origin neither secret headers nor `X-Etcron-Progress-Token`/`-Url`.
#[tokio::test(flavor = "multi_thread")]
async fn status_urls_are_checked_and_the_progress_token_stays_with_the_origin() -> Result<()> {
    let certs = tempfile::tempdir()?;
    etcron_tests::make_certs(certs.path())?;
    let mut c = Cluster::start("async-http-net", 0).await?;
    let mut trusting = WorkerOpts::new("w1");
    trusting.env.push(("SSL_CERT_FILE".to_owned(), certs.path().join("ca.pem").display().to_string()));
    c.add_worker(trusting)?;
    c.wait_workers(1).await?;
    let (url, remote) = remote().await?;
    let etcd = format!("http://127.0.0.1:{}", c.etcd.client_port);
    let spec = job(
        &url,
        3,
        &format!("&status_at={}", urlencode(&format!("{etcd}/v3/kv/range"))),
        json!({"interval": "200ms"}),
    );
    c.put_job("to-etcd", spec).await?;
    let r = record(&c, &c.run_now("to-etcd").await?, "failed").await?;
    let error = r["error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!("polling {etcd}/v3/kv/range/status/0: {etcd}/v3/kv/range/status/0 was not requested: refused to connect to 127.0.0.1:"))
            && error.contains("etcd endpoint") && error.contains("task_network_allow"),
        "{error}"
    );
    assert!(r["output"].as_str().unwrap().contains("task_network_allow"), "{r}");

    // Another origin, sharing the remote's works: the task's URL sends it there by a redirect.
    let other = remote_at("127.0.0.2", remote.clone()).await?;
    let mut spec = job(&other, 1_000_000, "", json!({"interval": "200ms"}));
    spec["task"]["url"] = json!(format!("{url}/hop?to={}", urlencode(&format!("{other}/work?steps=1000000"))));
    c.put_job("elsewhere", spec).await?;
    let id = c.run_now("elsewhere").await?;
    wait_for(Duration::from_secs(30), "two polls at the other origin", || async {
        remote.works().get(1).is_some_and(|w| w.polled_with.len() >= 2).then_some(())
    })
    .await?;
    let (status, body) = c.call(Method::POST, "/api/jobs/elsewhere/kill", None).await?;
    assert_eq!(status, 202, "{body}");
    record(&c, &id, "killed").await?;
    let work = remote.works()[1].clone();
    let cancelled = work.cancelled_with.clone().expect("the cancel went to the other origin");
    for h in [&work.started_with, &cancelled].into_iter().chain(&work.polled_with) {
        assert_eq!(h.get("x-etcron-execution-id"), Some(&id), "{h:?}");
        for credential in ["x-api-key", "x-etcron-progress-token", "x-etcron-progress-url"] {
            assert!(!h.contains_key(credential), "{credential} went to another origin: {h:?}");
        }
    }

    // An https status URL redirected to plain http fails the run at its first poll.
    let (tls, requests) = https_redirecting(certs.path(), format!("{url}/status/0"))?;
    let mut spec = job(&tls, 1, "", json!({"interval": "200ms"}));
    spec["task"]["url"] = json!(format!("{tls}/work"));
    c.put_job("downgraded", spec).await?;
    let r = record(&c, &c.run_now("downgraded").await?, "failed").await?;
    let error = r["error"].as_str().unwrap();
    assert!(error.contains("(plain http) is not followed"), "{error}");
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 2, "the request and one poll, not retried: {r}");
    Ok(())
}

/// An https server (the test CA's certificate for 127.0.0.1) answering a `POST` with a `202`
/// whose status URL is its own `/status/0`, and every other request with a redirect to `to`;
/// its URL and the count of requests it answered.
fn https_redirecting(certs: &std::path::Path, to: String) -> Result<(String, Arc<std::sync::atomic::AtomicUsize>)> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use std::io::{Read as _, Write as _};
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let chain = CertificateDer::pem_file_iter(certs.join("server.pem"))?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(certs.join("server.key"))?;
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?,
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let url = format!("https://{}", listener.local_addr()?);
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let Ok(conn) = rustls::ServerConnection::new(config.clone()) else { continue };
            let mut tls = rustls::StreamOwned::new(conn, stream);
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && matches!(tls.read(&mut byte), Ok(1)) {
                head.push(byte[0]);
            }
            if !head.ends_with(b"\r\n\r\n") {
                continue;
            }
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let answer = if head.starts_with(b"POST") {
                "HTTP/1.1 202 Accepted\r\nLocation: /status/0\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
                    .to_owned()
            } else {
                format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            };
            let _ = tls.write_all(answer.as_bytes());
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    });
    Ok((url, count))
}
