//! Server-Sent Events as tests read them (`GET /api/executions/{id}/stream`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)] // a test helper fails the test on the unexpected

use std::time::Duration;

use serde_json::Value;

use crate::{urlencode, Cluster};

/// One Server-Sent Event.
#[derive(Debug)]
pub struct Sse {
    pub event: String,
    pub data: Value,
}

/// Reads events from a `text/event-stream` response as they come.
pub struct SseReader {
    resp: reqwest::Response,
    /// Bytes, not text: a read may end inside a character.
    buf: Vec<u8>,
}

impl SseReader {
    /// Opens the stream of execution `id`; fails unless it answers 200 as an event stream.
    pub async fn open(c: &Cluster, id: &str) -> Self {
        Self::open_query(c, id, "").await
    }

    /// As [`SseReader::open`], with a query string (`"?after=3"`).
    pub async fn open_query(c: &Cluster, id: &str, query: &str) -> Self {
        let url = format!("{}/api/executions/{}/stream{query}", c.master.url, urlencode(id));
        let resp = c.http.get(url).send().await.unwrap();
        assert_eq!(
            resp.status(),
            200,
            "{}",
            if resp.status() == 200 { String::new() } else { resp.text().await.unwrap() }
        );
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        Self { resp, buf: Vec::new() }
    }

    /// The next event, or `None` when the stream ended; fails after 60 s of nothing.
    pub async fn next(&mut self) -> Option<Sse> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let block = String::from_utf8(self.buf.drain(..end + 2).collect()).unwrap();
                let mut event = "message".to_owned();
                let mut data = Vec::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.strip_prefix(' ').unwrap_or(v).to_owned());
                    }
                }
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                return Some(Sse { event, data: serde_json::from_str(&data.join("\n")).unwrap() });
            }
            let chunk = tokio::time::timeout(Duration::from_secs(60), self.resp.chunk()).await.expect("stream stalled");
            match chunk.unwrap() {
                Some(bytes) => self.buf.extend_from_slice(&bytes),
                None => return None,
            }
        }
    }

    /// Output text up to (and the record of) the `status` event that ends the stream.
    pub async fn rest(&mut self) -> (String, Value) {
        let mut text = String::new();
        loop {
            let ev = self.next().await.expect("the stream ends with a status event");
            match ev.event.as_str() {
                "output" => text.push_str(ev.data["text"].as_str().unwrap()),
                "status" => {
                    assert!(self.next().await.is_none(), "status is the last event");
                    return (text, ev.data);
                }
                // What the task reported comes between its output.
                "progress" => {}
                other => panic!("unexpected event {other}: {}", ev.data),
            }
        }
    }
}
