//! Live output: `GET /api/executions/{id}/stream` relays a running execution's output from the
//! worker as Server-Sent Events while the task still runs, and ends with the final record; a
//! finished execution streams its recorded output and status at once; the worker's output
//! server refuses requests without the token that only etcd holds; streams are bounded per
//! token and per execution, share one connection to the worker per execution, and a full output
//! server does not stop a task's reports; a quiet stream is closed and resumes where it was.

use std::time::Duration;

use etcron_model::keys::Keys;
use etcron_model::stored::WorkerInfo;
use etcron_tests::sse::SseReader;
use etcron_tests::{urlencode, Cluster};
use reqwest::Method;
use serde_json::json;

/// The id of the one running execution of `job`.
async fn running_id(c: &Cluster, job: &str) -> String {
    let list =
        c.wait_executions(&format!("job={job}&status=running"), "a running execution", |l| l.len() == 1).await.unwrap();
    list[0]["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_execution_streams_its_output_as_printed_and_ends_with_its_record() -> anyhow::Result<()> {
    let c = Cluster::start("stream-live", 1).await?;
    let gate = c.path("go");
    // Prints, then waits for the test to create the gate file: while the first line is read
    // from the stream, the task provably has not finished.
    let command = format!(
        "echo first-line; printf 'gr\\303\\266\\303\\237e '; while [ ! -e {gate} ]; do sleep 0.05; done; echo second-line; exit 3",
        gate = gate.display()
    );
    c.put_job("live", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": command}})).await?;
    let (status, _) = c.call(Method::POST, "/api/jobs/live/run", None).await?;
    assert_eq!(status, 202);
    let id = running_id(&c, "live").await;

    let mut stream = SseReader::open(&c, &id).await;
    let mut seen = String::new();
    while !seen.contains("größe ") {
        let ev = stream.next().await.expect("output before the end");
        assert_eq!(ev.event, "output", "{ev:?}");
        seen.push_str(ev.data["text"].as_str().unwrap());
    }
    assert_eq!(seen, "first-line\ngröße ");
    // Still running: the gate is closed.
    let record = c.get(&format!("/api/executions/{}", urlencode(&id))).await?;
    assert_eq!(record["status"], "running");

    std::fs::write(&gate, b"")?;
    let (rest, record) = stream.rest().await;
    assert_eq!(rest, "second-line\n");
    assert_eq!(record["id"], id);
    assert_eq!(record["status"], "failed");
    assert_eq!(record["exit_code"], 3);
    assert_eq!(record["output"], "first-line\ngröße second-line\n");

    // Finished: the stream is the recorded output, then the record.
    let mut again = SseReader::open(&c, &id).await;
    let (text, record) = again.rest().await;
    assert_eq!(text, "first-line\ngröße second-line\n");
    assert_eq!(record["status"], "failed");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_execution_ends_its_stream_with_the_killed_record_and_unknown_ids_are_refused() -> anyhow::Result<()> {
    let c = Cluster::start("stream-kill", 1).await?;
    c.put_job("sleeper", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "echo going; sleep 300"}}))
        .await?;
    c.call(Method::POST, "/api/jobs/sleeper/run", None).await?;
    let id = running_id(&c, "sleeper").await;
    let mut stream = SseReader::open(&c, &id).await;
    let first = stream.next().await.unwrap();
    assert_eq!((first.event.as_str(), first.data["text"].as_str()), ("output", Some("going\n")));
    let (status, _) = c.call(Method::POST, "/api/jobs/sleeper/kill", None).await?;
    assert_eq!(status, 202);
    let (rest, record) = stream.rest().await;
    assert_eq!(rest, "");
    assert_eq!(record["status"], "killed");

    // An id nobody ran, and one that is not an execution id.
    let (status, body) = c.call(Method::GET, "/api/executions/sleeper%401700000000000%231/stream", None).await?;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "not_found");
    let (status, body) = c.call(Method::GET, "/api/executions/not-an-id/stream", None).await?;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "id");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_workers_output_server_needs_the_token_only_etcd_holds() -> anyhow::Result<()> {
    let c = Cluster::start("stream-token", 1).await?;
    c.put_job("quiet", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": "echo hi; sleep 300"}}))
        .await?;
    c.call(Method::POST, "/api/jobs/quiet/run", None).await?;
    let id = running_id(&c, "quiet").await;

    // The registration in etcd advertises the server and its token ...
    let keys = Keys::new(&c.namespace)?;
    let mut etcd = c.etcd.client().await?;
    let worker_id = &c.workers[0].opts.id;
    let resp = etcd.get(keys.worker(worker_id), None).await?;
    let info: WorkerInfo = serde_json::from_slice(resp.kvs()[0].value())?;
    let (url, token) = (info.output_url.unwrap(), info.output_token.unwrap());
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert_eq!(token.len(), 32);
    // ... which the API does not show.
    let workers = c.get("/api/workers").await?;
    let shown = &workers["workers"][0];
    assert_eq!(shown["output_url"], url.as_str());
    assert!(shown.get("output_token").is_none(), "{shown}");

    let target = format!("{url}/executions/{}/output", urlencode(&id));
    for bearer in [None, Some("0".repeat(32))] {
        let mut req = c.http.get(&target);
        if let Some(b) = bearer {
            req = req.bearer_auth(b);
        }
        assert_eq!(req.send().await?.status(), 401);
    }
    // With the token: the output so far, as lines of JSON.
    let mut resp = c.http.get(&target).bearer_auth(&token).send().await?;
    assert_eq!(resp.status(), 200);
    let first = resp.chunk().await?.unwrap();
    assert_eq!(&first[..], b"{\"output\":\"hi\\n\"}\n");
    let unknown = c.http.get(format!("{url}/executions/quiet%401%231/output")).bearer_auth(&token).send().await?;
    assert_eq!(unknown.status(), 404);

    c.call(Method::POST, "/api/jobs/quiet/kill", None).await?;
    // The kill ends the task; the worker's stream then ends with its end line.
    let mut tail = Vec::new();
    while let Some(b) = tokio::time::timeout(Duration::from_secs(30), resp.chunk()).await?? {
        tail.extend_from_slice(&b);
    }
    assert!(tail.ends_with(b"{\"end\":true}\n"), "{}", String::from_utf8_lossy(&tail));
    Ok(())
}

const ADMIN: &str = "stream-admin-token-0123456789abcdef";
const VIEWERS: [&str; 3] =
    ["stream-viewer-1-token-0123456789ab", "stream-viewer-2-token-0123456789ab", "stream-viewer-3-token-0123456789ab"];

/// A client whose connections come from `from` (a loopback address).
fn client_from(from: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(from.parse::<std::net::IpAddr>().unwrap())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// A connection from `from` to `addr` that asks `request` and reads the answer's first bytes,
/// then stays open (kept alive, holding one of the server's connections); `None` when the server
/// closed it at once (it was full).
async fn held(from: &str, addr: std::net::SocketAddr, request: &str) -> Option<tokio::net::TcpStream> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::new(from.parse().unwrap(), 0)).unwrap();
    let mut conn = socket.connect(addr).await.ok()?;
    conn.write_all(request.as_bytes()).await.ok()?;
    let mut answer = [0u8; 12];
    let read = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut answer)).await.ok()?.ok()?;
    (read > 0).then_some(conn)
}

/// Finding: a viewer holding ~260 streams of one execution filled the worker's output server,
/// which also took the tasks' progress POSTs: checkpoints were lost. Now a token holds at most
/// 16 streams (429), an execution has at most 32 on a master (503), and the tasks report on a
/// listener of their own: with the output server full, the checkpoint is still stored.
#[tokio::test(flavor = "multi_thread")]
async fn streams_are_bounded_and_a_full_output_server_does_not_stop_the_tasks_reports() -> anyhow::Result<()> {
    use etcron_master::layers::auth::hash_token;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("master.toml");
    let entries: Vec<String> = VIEWERS
        .iter()
        .enumerate()
        .map(|(i, t)| {
            format!("[[auth.tokens]]\nname = \"viewer-{i}\"\nrole = \"viewer\"\nsha256 = {:?}\n", hash_token(t))
        })
        .collect();
    std::fs::write(&config, entries.join("\n"))?;
    let config = config.display().to_string();
    let mut c = Cluster::start_with("stream-bounds", 0, false, &["--config", &config, "--api-token", ADMIN]).await?;
    let listen = format!("127.0.0.1:{}", etcron_tests::free_port());
    let worker_metrics = format!("http://{listen}/metrics");
    let mut opts = etcron_tests::WorkerOpts::new("w1");
    opts.extra = vec!["--metrics-listen".to_owned(), listen];
    c.add_worker(opts)?;
    c.wait_workers(1).await?;
    let gate = c.path("go");
    // Reports by POST once the gate opens; fails (exit 3) when the report is refused.
    let command = format!(
        "while [ ! -e {gate} ]; do sleep 0.05; done; \
         curl -sSf -m 20 -X POST -H \"Authorization: Bearer $ETCRON_PROGRESS_TOKEN\" -d '{{\"checkpoint\":{{\"offset\":7}}}}' \"$ETCRON_PROGRESS_URL\" || exit 3",
        gate = gate.display()
    );
    c.call_as(
        ADMIN,
        Method::PUT,
        "/api/jobs/reporting",
        Some(json!({"schedule": "@yearly", "task": {"kind": "shell", "command": command}})),
    )
    .await?;
    let (status, body) = c.call_as(ADMIN, Method::POST, "/api/jobs/reporting/run", None).await?;
    assert_eq!(status, 202, "{body}");
    let id = body["execution_id"].as_str().unwrap().to_owned();
    let stream_url = format!("{}/api/executions/{}/stream", c.master.url, urlencode(&id));
    let open = |from: &'static str, token: &'static str| {
        let url = stream_url.clone();
        async move { client_from(from).get(url).bearer_auth(token).send().await.unwrap() }
    };

    // Viewer 1 (from 127.0.0.2) holds 16 streams; the 17th is refused, naming the limit.
    let mut streams = Vec::new();
    for _ in 0..16 {
        let resp = open("127.0.0.2", VIEWERS[0]).await;
        assert_eq!(resp.status(), 200);
        streams.push(resp);
    }
    let refused = open("127.0.0.3", VIEWERS[0]).await;
    assert_eq!(refused.status(), 429, "per token, whatever the address");
    let body: serde_json::Value = refused.json().await?;
    assert_eq!(body["error"]["code"], "too_many_streams");
    assert!(body["error"]["message"].as_str().unwrap().contains("MAX_STREAMS_PER_TOKEN"), "{body}");
    // Viewer 2 takes the execution's other 16; viewer 3 gets 503.
    for _ in 0..16 {
        let resp = open("127.0.0.3", VIEWERS[1]).await;
        assert_eq!(resp.status(), 200);
        streams.push(resp);
    }
    let refused = open("127.0.0.4", VIEWERS[2]).await;
    assert_eq!(refused.status(), 503);
    let body: serde_json::Value = refused.json().await?;
    assert!(body["error"]["message"].as_str().unwrap().contains("MAX_STREAMS_PER_EXECUTION"), "{body}");
    let metrics = etcron_tests::scrape(&format!("{}/metrics", c.master.url), Some(ADMIN)).await?;
    assert_eq!(metrics.value("etcron_master_streams_refused_total", &[("limit", "per_token")]), 1.0);
    assert_eq!(metrics.value("etcron_master_streams_refused_total", &[("limit", "per_execution")]), 1.0);
    // The 32 streams share one connection to the worker: it has one follower of the run.
    etcron_tests::wait_for(Duration::from_secs(20), "the master's feed of the run", || async {
        let m = etcron_tests::scrape(&format!("{}/metrics", c.master.url), Some(ADMIN)).await.ok()?;
        (m.value("etcron_master_stream_feeds", &[]) == 1.0).then_some(())
    })
    .await?;
    let worker = etcron_tests::scrape(&worker_metrics, None).await?;
    assert_eq!(worker.value("etcron_worker_output_followers", &[]), 1.0, "one connection for 32 streams");

    // Fill the rest of the worker's output server (256 connections) from three more addresses,
    // each connection kept alive after one answered request.
    let keys = Keys::new(&c.namespace)?;
    let resp = c.etcd.client().await?.get(keys.worker(&c.workers[0].opts.id), None).await?;
    let info: WorkerInfo = serde_json::from_slice(resp.kvs()[0].value())?;
    let (url, token) = (info.output_url.unwrap(), info.output_token.unwrap());
    let addr: std::net::SocketAddr = url.trim_start_matches("http://").parse()?;
    let request = format!(
        "GET /executions/{}/progress HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n",
        urlencode(&id)
    );
    let mut filled = Vec::new();
    for from in ["127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.9"] {
        for _ in 0..80 {
            filled.extend(held(from, addr, &request).await);
        }
    }
    assert!(filled.len() >= 256 - 8, "the output server took {} more", filled.len());
    assert!(held("127.0.0.8", addr, &request).await.is_none(), "the output server is full");

    // The task reports now: the checkpoint is stored, and the record shows it.
    std::fs::write(&gate, b"")?;
    let path = format!("/api/executions/{}", urlencode(&id));
    let record = etcron_tests::wait_for(Duration::from_secs(40), "the run's final record", || async {
        let (_, v) = c.call_as(ADMIN, Method::GET, &path, None).await.ok()?;
        (v["status"].as_str().is_some_and(|s| s != "running")).then_some(v)
    })
    .await?;
    assert_eq!(record["status"], "succeeded", "the report was taken: {record}");
    assert_eq!(record["checkpoint"], json!({"offset": 7}), "{record}");
    drop((filled, streams));
    Ok(())
}

/// Finding: a stream never idled out (heartbeats went to clients that read nothing). Now a stream
/// with nothing but keepalives for `stream_quiet_limit` ends with an `idle` event telling where
/// it was; `?after=N` resumes there; etcronctl follows on through such closes and prints every
/// byte once.
#[tokio::test(flavor = "multi_thread")]
async fn a_quiet_stream_is_closed_and_resumes_where_it_was() -> anyhow::Result<()> {
    let c = Cluster::start_with("stream-quiet", 1, false, &["--stream-quiet-limit", "2s"]).await?;
    let gate = c.path("go");
    let command = format!(
        "printf 'first\\n'; while [ ! -e {gate} ]; do sleep 0.05; done; printf 'second\\n'",
        gate = gate.display()
    );
    c.put_job("quiet", json!({"schedule": "@yearly", "task": {"kind": "shell", "command": command}})).await?;
    let (status, body) = c.call(Method::POST, "/api/jobs/quiet/run", None).await?;
    assert_eq!(status, 202, "{body}");
    let id = running_id(&c, "quiet").await;

    let mut stream = SseReader::open(&c, &id).await;
    let first = stream.next().await.expect("the output so far");
    assert_eq!((first.event.as_str(), &first.data["text"]), ("output", &json!("first\n")));
    let idle = stream.next().await.expect("an idle event");
    assert_eq!(idle.event, "idle", "{idle:?}");
    assert_eq!(idle.data["after"], 6, "{idle:?}");
    assert!(idle.data["message"].as_str().unwrap().contains("?after=6"), "{idle:?}");
    assert!(stream.next().await.is_none(), "the master closed the stream");
    // Resuming inside what was printed gets the rest of it only.
    let mut resumed = SseReader::open_query(&c, &id, "?after=3").await;
    let rest = resumed.next().await.expect("the rest of the output");
    assert_eq!((rest.event.as_str(), &rest.data["text"]), ("output", &json!("st\n")));
    drop(resumed);
    let (status, body) =
        c.call(Method::GET, &format!("/api/executions/{}/stream?after=x", urlencode(&id)), None).await?;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("after")), "{body}");

    // etcronctl follows through the closes of a quiet stream, printing each byte once.
    let follow = tokio::process::Command::new(etcron_tests::bin("etcronctl")?)
        .args(["--server", &c.master.url, "executions", "get", &id, "--follow"])
        .env_remove("ETCRON_TOKEN")
        .kill_on_drop(true)
        .output();
    let follow = tokio::spawn(follow);
    etcron_tests::wait_for(Duration::from_secs(30), "etcronctl's stream closed as quiet twice", || async {
        let m = etcron_tests::scrape(&format!("{}/metrics", c.master.url), None).await.ok()?;
        (m.value("etcron_master_streams_closed_total", &[("reason", "quiet")]) >= 3.0).then_some(())
    })
    .await?;
    std::fs::write(&gate, b"")?;
    let out = tokio::time::timeout(Duration::from_secs(60), follow).await???;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "first\nsecond\n", "{out:?}");
    assert!(out.status.success(), "{out:?}");

    // Finding (CI): a client that resumed after the run had ended got the status without the
    // output it had not read. Resuming after the end gets the rest from the record.
    let mut ended = SseReader::open_query(&c, &id, "?after=6").await;
    let rest = ended.next().await.expect("the output past the offset");
    assert_eq!((rest.event.as_str(), &rest.data["text"]), ("output", &json!("second\n")));
    let status = ended.next().await.expect("the final record");
    assert_eq!((status.event.as_str(), &status.data["status"]), ("status", &json!("succeeded")));
    Ok(())
}
