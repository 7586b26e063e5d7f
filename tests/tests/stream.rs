#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on the unexpected
//! Live output: `GET /api/executions/{id}/stream` relays a running execution's output from the
//! worker as Server-Sent Events while the task still runs, and ends with the final record; a
//! finished execution streams its recorded output and status at once; the worker's output
//! server refuses requests without the token that only etcd holds.

use std::time::Duration;

use etcron_common::keys::Keys;
use etcron_common::model::WorkerInfo;
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
