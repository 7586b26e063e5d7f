//! Two masters behind a load balancer (a round-robin TCP proxy in the test, one connection per
//! request): they share nothing but etcd and MongoDB, so an edit through either is seen
//! through both, a stale `If-Match` is refused whichever master takes it, and a run requested
//! through one is found, followed and killed through the other.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcron_tests::{urlencode, wait_for, Cluster, Master};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// Accepts on a free port and hands each connection to the next backend in turn.
struct RoundRobin {
    url: String,
    /// Connections handed to each backend.
    served: Arc<[AtomicUsize; 2]>,
}

impl RoundRobin {
    async fn start(backends: [String; 2]) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let served: Arc<[AtomicUsize; 2]> = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let counts = served.clone();
        let backends: Vec<String> = backends.iter().map(|b| b.trim_start_matches("http://").to_owned()).collect();
        tokio::spawn(async move {
            let mut next = 0;
            while let Ok((mut client, _)) = listener.accept().await {
                let backend = backends[next].clone();
                counts[next].fetch_add(1, Ordering::SeqCst);
                next = (next + 1) % 2;
                tokio::spawn(async move {
                    if let Ok(mut upstream) = tokio::net::TcpStream::connect(backend).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
            }
        });
        Self { url, served }
    }
}

/// A client that opens a connection per request, so the balancer alternates masters.
fn client() -> reqwest::Client {
    reqwest::Client::builder().pool_max_idle_per_host(0).timeout(Duration::from_secs(30)).build().unwrap()
}

async fn call(
    http: &reqwest::Client,
    base: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
    headers: &[(&str, String)],
) -> (StatusCode, Option<String>, Value) {
    let mut req = http.request(method, format!("{base}{path}"));
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let etag = resp.headers().get("etag").map(|v| v.to_str().unwrap().to_owned());
    let text = resp.text().await.unwrap();
    (status, etag, if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap() })
}

fn spec(command: &str) -> Value {
    json!({"schedule": "@yearly", "task": {"kind": "shell", "command": command}})
}

#[tokio::test(flavor = "multi_thread")]
async fn two_masters_behind_a_balancer_share_edits_catch_conflicts_and_serve_the_same_runs() -> anyhow::Result<()> {
    let c = Cluster::start("two-masters", 1).await?;
    let second = Master::start(
        &c.etcd.endpoint,
        &c.namespace,
        &c.logs,
        &["--mongodb-uri", c.mongo.uri.as_str(), "--mongodb-db", c.db.as_str()],
    )
    .await?;
    let (a, b) = (c.master.url.clone(), second.url.clone());
    let lb = RoundRobin::start([a.clone(), b.clone()]).await;
    let http = client();

    // Created through the balancer (the first master), read through the balancer (the second)
    // and through each master directly: the same spec and revision everywhere.
    let (status, etag, created) =
        call(&http, &lb.url, Method::PUT, "/api/jobs/shared", Some(spec("echo v1")), &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let revision = created["revision"].as_i64().unwrap();
    assert_eq!(etag.as_deref(), Some(format!("\"{revision}\"").as_str()));
    for base in [&lb.url, &a, &b] {
        let (status, _, job) = call(&http, base, Method::GET, "/api/jobs/shared", None, &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(job["revision"], revision, "{base}");
        assert_eq!(job["spec"]["task"]["command"], "echo v1", "{base}");
    }

    // Two operators read revision r, one through each master; both save with If-Match r. The
    // first save wins; the second, on the other master, is refused with 409 and changes nothing.
    let (status, _, first) = call(
        &http,
        &a,
        Method::PUT,
        "/api/jobs/shared",
        Some(spec("echo from-a")),
        &[("If-Match", revision.to_string())],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let (status, _, refused) = call(
        &http,
        &b,
        Method::PUT,
        "/api/jobs/shared",
        Some(spec("echo from-b")),
        &[("If-Match", revision.to_string())],
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["code"], "conflict");
    let (_, _, now) = call(&http, &b, Method::GET, "/api/jobs/shared", None, &[]).await;
    assert_eq!(now["spec"]["task"]["command"], "echo from-a");
    assert_eq!(now["revision"], first["revision"]);

    // The same race through the balancer, many times: per round exactly one of two saves with
    // the same If-Match wins, whichever masters the two requests reach.
    for round in 0..10 {
        let (_, _, job) = call(&http, &lb.url, Method::GET, "/api/jobs/shared", None, &[]).await;
        let precondition = [("If-Match", job["revision"].as_i64().unwrap().to_string())];
        let (x, y) = tokio::join!(
            call(&http, &lb.url, Method::PUT, "/api/jobs/shared", Some(spec(&format!("echo x{round}"))), &precondition),
            call(&http, &lb.url, Method::PUT, "/api/jobs/shared", Some(spec(&format!("echo y{round}"))), &precondition),
        );
        let mut statuses = [x.0, y.0];
        statuses.sort();
        assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT], "round {round}: {} {}", x.2, y.2);
    }
    // Create-only (If-None-Match: *) is refused on the other master too.
    let (status, _, body) =
        call(&http, &b, Method::PUT, "/api/jobs/shared", Some(spec("true")), &[("If-None-Match", "*".to_owned())])
            .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");

    // A run requested through one master: found, followed (the live stream) and killed
    // through the other.
    let (status, _, _) =
        call(&http, &a, Method::PUT, "/api/jobs/long", Some(spec("echo started; sleep 300")), &[]).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _, _) = call(&http, &a, Method::POST, "/api/jobs/long/run", None, &[]).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let id = wait_for(Duration::from_secs(30), "the run, seen through the second master", || async {
        let (_, _, v) = call(&http, &b, Method::GET, "/api/executions?job=long&status=running", None, &[]).await;
        v["executions"].as_array()?.first()?["id"].as_str().map(str::to_owned)
    })
    .await?;
    let path = format!("/api/executions/{}/stream", urlencode(&id));
    let mut stream = http.get(format!("{b}{path}")).send().await?;
    assert_eq!(stream.status(), StatusCode::OK);
    let mut seen = String::new();
    while !seen.contains("started") {
        let chunk = tokio::time::timeout(Duration::from_secs(30), stream.chunk()).await??.expect("stream open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let (status, _, _) = call(&http, &a, Method::POST, "/api/jobs/long/kill", None, &[]).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    while !seen.contains("event: status") {
        let chunk = tokio::time::timeout(Duration::from_secs(30), stream.chunk()).await??.expect("ends with status");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains("\"status\":\"killed\""), "{seen}");
    // Both masters find the same record.
    for base in [&a, &b] {
        let (_, _, record) = call(&http, base, Method::GET, path.trim_end_matches("/stream"), None, &[]).await;
        assert_eq!(record["status"], "killed", "{base}");
    }

    // Deleted through one, gone from both.
    let (status, _, _) = call(&http, &b, Method::DELETE, "/api/jobs/shared", None, &[]).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    for base in [&a, &b] {
        let (status, _, _) = call(&http, base, Method::GET, "/api/jobs/shared", None, &[]).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{base}");
    }
    let served = [lb.served[0].load(Ordering::SeqCst), lb.served[1].load(Ordering::SeqCst)];
    assert!(served[0] >= 10 && served[1] >= 10, "the balancer used both masters: {served:?}");
    Ok(())
}
