//! Results of every task kind end to end (real etcd, `mongod`, a master, a worker, and real HTTP
//! and gRPC servers started here): a shell task's `::etcron result` lines (the last one wins)
//! and a result POSTed with `curl` to its progress URL become the record's `result`, shown by
//! `etcronctl executions get`; a result over 64 KiB is refused (a line in the output, a `400`,
//! a `413` past the body's limit) and never stored; an HTTP task's `result_pointer` picks its
//! result from the response body (and from an asynchronous task's final status document), and
//! a pointer that finds nothing leaves the run succeeded, the output saying why; a gRPC call's
//! response is its result, unless it is over 64 KiB.

use std::time::Duration;

use anyhow::Result;
use axum::routing::{get, post};
use axum::{Json, Router};
use etcron_tests::grpc_server::{GrpcServer, Reflection};
use etcron_tests::{Cluster, WorkerOpts};
use reqwest::Method;
use serde_json::{json, Value};

/// Saves `job` with `task`, runs it once and answers its final record.
async fn run_task(c: &Cluster, job: &str, task: Value) -> Result<Value> {
    c.put_job(job, json!({"schedule": "@yearly", "task": task})).await?;
    let id = c.run_now(job).await?;
    c.final_record(&id).await
}

fn shell(command: &str) -> Value {
    json!({"kind": "shell", "command": command})
}

/// A POST of the JSON in file `body` to the task's progress URL; prints `post: <status>`.
fn post_file(body: &str) -> String {
    format!(
        "echo \"post: $(curl -sS -o /dev/null -w '%{{http_code}}' -X POST -H \"Authorization: Bearer \
         $ETCRON_PROGRESS_TOKEN\" -H 'Content-Type: application/json' --data-binary @{body} \"$ETCRON_PROGRESS_URL\")\""
    )
}

/// Shell that writes `n` x's (no newline) to stdout.
fn xs(n: usize) -> String {
    format!("head -c {n} /dev/zero | tr '\\0' x")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shell_tasks_result_comes_from_its_lines_or_a_post_and_oversize_ones_are_refused() -> Result<()> {
    // Output enough to keep every line of the oversize results (64 KiB by default).
    let mut c = Cluster::start("results-shell", 0).await?;
    let mut opts = WorkerOpts::new("w1");
    opts.extra = vec!["--max-output".to_owned(), "1048576".to_owned()];
    c.add_worker(opts)?;
    c.wait_workers(1).await?;

    // Lines: the last one wins; the line stays in the output.
    let lines = "echo '::etcron result {\"rows\": 1}'; echo counting; echo '::etcron result {\"rows\": 12}'";
    let record = run_task(&c, "by-line", shell(lines)).await?;
    assert_eq!(record["status"], "succeeded", "{record}");
    assert_eq!(record["result"], json!({"rows": 12}), "{record}");
    assert!(record["output"].as_str().unwrap().contains("::etcron result {\"rows\": 12}\n"), "{record}");

    // A POST to the progress URL, with progress in the same body: taken at once (204).
    let dir = c.path("");
    let good = dir.join("good.json");
    std::fs::write(&good, r#"{"result": {"rows": 7, "file": "a.csv"}, "percent": 100}"#)?;
    let record = run_task(&c, "by-post", shell(&post_file(&good.display().to_string()))).await?;
    assert_eq!(record["status"], "succeeded", "{record}");
    assert_eq!(record["output"], "post: 204\n", "{record}");
    assert_eq!(record["result"], json!({"rows": 7, "file": "a.csv"}));
    assert_eq!(record["progress"]["percent"], 100.0);

    // Over 64 KiB: refused by line (a line of the output says why, even past the longest report
    // line) and by POST (400 naming the field, 413 past the body's limit); the last result taken
    // is the record's.
    let over = dir.join("over.json");
    std::fs::write(&over, format!(r#"{{"result": "{}"}}"#, "x".repeat(64 * 1024)))?;
    let huge = dir.join("huge.json");
    std::fs::write(&huge, format!(r#"{{"result": "{}"}}"#, "x".repeat(100 * 1024)))?;
    let command = format!(
        "echo '::etcron result \"kept\"'; printf '::etcron result \"%s\"\\n' \"$({x70})\"; \
         printf '::etcron result \"%s\"\\n' \"$({x100})\"; {over}; {huge}; echo done",
        x70 = xs(70_000),
        x100 = xs(100_000),
        over = post_file(&over.display().to_string()),
        huge = post_file(&huge.display().to_string()),
    );
    let record = run_task(&c, "oversize", shell(&command)).await?;
    assert_eq!(record["status"], "succeeded", "{record}");
    assert_eq!(record["result"], json!("kept"), "the last result taken");
    let output = record["output"].as_str().unwrap();
    let notes: Vec<&str> = output.lines().filter(|l| !l.starts_with("::etcron result \"x")).collect();
    assert_eq!(
        notes,
        [
            "::etcron result \"kept\"",
            "etcron: result refused, not kept: result: is 70002 bytes as JSON; at most 65536",
            "etcron: result refused, not kept: result: the line is 100018 bytes; a report line is at most 86016",
            "post: 400",
            "post: 413",
            "done",
        ],
        "{}",
        &output[..output.len().min(300)]
    );

    // etcronctl shows the result as JSON.
    let id = record["id"].as_str().unwrap();
    let out = tokio::process::Command::new(etcron_tests::bin("etcronctl")?)
        .args(["executions", "get", id])
        .env("ETCRON_SERVER", &c.master.url)
        .env_remove("ETCRON_TOKEN")
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out).await??;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l == "result:        \"kept\""), "{text}");
    Ok(())
}

/// A service answering JSON: `GET /report` a document, `GET /text` plain text, `POST /work`
/// a 202 naming `/status`, whose document says the work succeeded with its totals.
async fn json_service() -> Result<String> {
    let app = Router::new()
        .route("/report", get(|| async { Json(json!({"data": {"rows": 12, "ids": [4, 5]}, "none": null})) }))
        .route("/text", get(|| async { "rows: 12" }))
        .route(
            "/work",
            post(|| async { (axum::http::StatusCode::ACCEPTED, [("location", "/status")], Json(json!({"id": 1}))) }),
        )
        .route(
            "/status",
            get(|| async { Json(json!({"state": "succeeded", "output": "exported", "totals": {"rows": 5}})) }),
        );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_tasks_result_is_the_value_at_its_result_pointer() -> Result<()> {
    let service = json_service().await?;
    let c = Cluster::start("results-http", 1).await?;
    let http = |path: &str, pointer: &str| json!({"kind": "http", "url": format!("{service}{path}"), "result_pointer": pointer});

    let record = run_task(&c, "pointed", http("/report", "/data")).await?;
    assert_eq!(record["status"], "succeeded", "{record}");
    assert_eq!(record["result"], json!({"rows": 12, "ids": [4, 5]}));
    let record = run_task(&c, "whole", http("/report", "")).await?;
    assert_eq!(record["result"]["data"]["ids"], json!([4, 5]), "\"\" is the whole body");
    let record = run_task(&c, "one-id", http("/report", "/data/ids/1")).await?;
    assert_eq!(record["result"], 5);

    // Nothing found, or no JSON: the run succeeds without a result, the output's last line says why.
    for (job, path, pointer, why) in [
        (
            "missing",
            "/report",
            "/missing",
            "etcron: no result: result_pointer \"/missing\" finds nothing in the response body",
        ),
        ("null", "/report", "/none", "etcron: no result: result_pointer \"/none\" finds null in the response body"),
        ("text", "/text", "", "etcron: no result: the response body is not JSON ("),
    ] {
        let record = run_task(&c, job, http(path, pointer)).await?;
        assert_eq!(record["status"], "succeeded", "{record}");
        assert!(record["result"].is_null(), "{record}");
        let last = record["output"].as_str().unwrap().lines().last().unwrap().to_owned();
        assert!(last.starts_with(why), "{job}: {last}");
    }

    // An asynchronous task: the pointer reads the final status document.
    let mut task = http("/work", "/totals");
    task["method"] = json!("POST");
    task["async"] = json!({"interval": "100ms"});
    let record = run_task(&c, "exported", task).await?;
    assert_eq!(record["status"], "succeeded", "{record}");
    assert_eq!(record["result"], json!({"rows": 5}), "{record}");

    // A pointer that is not one is refused at save, naming the field.
    let spec = json!({"schedule": "@yearly", "task": http("/report", "data")});
    let (status, body) = c.call(Method::PUT, "/api/jobs/bad-pointer", Some(spec)).await?;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("task.result_pointer")), "{body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grpc_calls_response_is_its_result_unless_over_64_kib() -> Result<()> {
    let server = GrpcServer::start(Reflection::V1).await?;
    let c = Cluster::start("results-grpc", 1).await?;
    let grpc = |method: &str, request: Value| json!({"kind": "grpc", "endpoint": server.endpoint, "method": method, "request": request});

    let record = run_task(&c, "echo", grpc("etcron.test.Echo/Echo", json!({"text": "hi", "count": 3}))).await?;
    assert_eq!(record["status"], "succeeded", "{record}");
    let result = &record["result"];
    assert_eq!((&result["text"], &result["count"], &result["tags"]), (&json!("hi"), &json!(3), &json!([])), "{record}");
    assert!(result["metadata"].as_array().is_some_and(|m| !m.is_empty()), "every field, as the output shows it");

    // 40 000 ones are 80 000 bytes of JSON: the run succeeds, without a result.
    let record = run_task(&c, "numbers", grpc("etcron.test.Echo/Numbers", json!({"count": 40_000}))).await?;
    assert_eq!(record["status"], "succeeded", "{record}");
    assert!(record["result"].is_null(), "{record}");
    let last = record["output"].as_str().unwrap().lines().last().unwrap().to_owned();
    assert_eq!(last, "etcron: no result: the response is over 65536 bytes as JSON, more than a result may be");
    Ok(())
}
