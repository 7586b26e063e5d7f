//! The OTLP/HTTP exporter: spans queued (bounded; a full queue drops, never waits), sent in
//! batches as OTLP's JSON encoding (`POST {endpoint}/v1/traces`, `application/json`), each batch
//! tried a bounded number of times; what is not accepted is dropped, counted and logged (at
//! most once a minute per cause). Nothing of this runs without a configured endpoint.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use super::{hex, SpanData, Value, METRICS};

/// Spans waiting for export; more are dropped (`reason="queue_full"`).
pub const QUEUE: usize = 2048;
/// Most spans in one export request.
pub const BATCH: usize = 512;
/// Longest a span waits for its batch to fill.
pub const FLUSH_EVERY: Duration = Duration::from_secs(2);
/// Longest one export request may take.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// Tries of one batch: a connection error, a timeout or a `429`/`502`/`503`/`504` is tried
/// again (after 0.5 s, then 1 s); any other answer, or the last try, drops the batch.
pub const EXPORT_TRIES: u32 = 3;
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(2);
/// Least time between two log lines of one cause of dropped spans.
const LOG_EVERY: Duration = Duration::from_secs(60);
/// Longest `otlp_endpoint`, in bytes.
pub const MAX_ENDPOINT: usize = 2048;

/// The `[tracing]` table of either binary's config file.
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracingFile {
    /// The OTLP/HTTP endpoint (`http://collector:4318`): spans go to `{endpoint}/v1/traces`.
    pub otlp_endpoint: Option<String>,
}

/// Where spans go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportConfig {
    /// As configured.
    pub endpoint: String,
    /// `{endpoint}/v1/traces`.
    pub url: String,
}

/// `otlp_endpoint` from its flag or variable (`ETCRON_OTLP_ENDPOINT`; empty turns off what the
/// file sets), else the file's `[tracing]`: an `http://` or `https://` URL without credentials,
/// query or fragment. `None`: tracing off (the default).
///
/// # Errors
/// A value that is not such a URL, naming the setting.
pub fn resolve(flag: Option<String>, file: Option<&TracingFile>) -> Result<Option<ExportConfig>, String> {
    let Some(endpoint) = flag.or_else(|| file.and_then(|f| f.otlp_endpoint.clone())) else { return Ok(None) };
    let endpoint = endpoint.trim().to_owned();
    if endpoint.is_empty() {
        return Ok(None);
    }
    if endpoint.len() > MAX_ENDPOINT {
        return Err(format!("otlp_endpoint: longer than {MAX_ENDPOINT} bytes"));
    }
    let url = reqwest::Url::parse(&endpoint).map_err(|e| format!("otlp_endpoint: {endpoint:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("otlp_endpoint: {endpoint:?} is not an http:// or https:// URL with a host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("otlp_endpoint: credentials in the URL are not supported".to_owned());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "otlp_endpoint: {endpoint:?} has a query or fragment; give the base URL (spans go to /v1/traces under it)"
        ));
    }
    let url = format!("{}/v1/traces", url.as_str().trim_end_matches('/'));
    Ok(Some(ExportConfig { endpoint, url }))
}

enum Msg {
    Span(SpanData),
    Flush(oneshot::Sender<()>),
}

/// The exporter's queue; the exporter task ends when the last holder drops it.
#[derive(Debug)]
pub struct Queue {
    tx: mpsc::Sender<Msg>,
    full: RateLimit,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Msg::Span(_) => "Span",
            Msg::Flush(_) => "Flush",
        })
    }
}

impl Queue {
    /// Queues a finished span; when the queue is full it is dropped, counted and logged.
    pub(super) fn push(&self, span: SpanData) {
        if self.tx.try_send(Msg::Span(span)).is_err() {
            METRICS.dropped.with_label_values(&["queue_full"]).inc();
            self.full.note(|n| {
                tracing::warn!(
                    dropped = n,
                    limit = QUEUE,
                    "trace spans dropped: the export queue is full (the OTLP endpoint is slow or away)"
                )
            });
        }
    }

    /// Exports everything queued now, waiting at most `limit`.
    pub(super) async fn flush(&self, limit: Duration) {
        let (ack, done) = oneshot::channel();
        let flushed = tokio::time::timeout(limit, async {
            if self.tx.send(Msg::Flush(ack)).await.is_ok() {
                let _ = done.await;
            }
        })
        .await;
        if flushed.is_err() {
            tracing::warn!(limit_secs = limit.as_secs(), "trace spans not all exported before shutdown");
        }
    }
}

/// Counts events and lets one log line through per [`LOG_EVERY`].
#[derive(Debug, Default)]
struct RateLimit {
    last: Mutex<Option<Instant>>,
    since: AtomicU64,
}

impl RateLimit {
    /// Calls `log` with the events since the last line, when a line is due.
    fn note(&self, log: impl FnOnce(u64)) {
        let mut last = self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = self.since.fetch_add(1, Ordering::Relaxed) + 1;
        if last.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
            *last = Some(Instant::now());
            self.since.store(0, Ordering::Relaxed);
            log(n);
        }
    }
}

/// Starts the exporter task for `config`; `resource` names the process.
pub(super) fn start(config: &ExportConfig, resource: &[(&'static str, String)]) -> Arc<Queue> {
    let (tx, rx) = mpsc::channel(QUEUE);
    let client = reqwest::Client::builder().timeout(EXPORT_TIMEOUT).redirect(reqwest::redirect::Policy::none()).build();
    match client {
        Ok(client) => {
            let resource: Vec<(&'static str, Value)> =
                resource.iter().map(|(k, v)| (*k, Value::Str(v.clone()))).collect();
            let exporter = Exporter {
                client,
                url: config.url.clone(),
                resource: attributes(&resource),
                failed: RateLimit::default(),
            };
            crate::task::spawn(exporter.run(rx));
            tracing::info!(endpoint = %config.endpoint, "exporting trace spans over OTLP/HTTP");
        }
        // No exporter: every span is then dropped as `export_failed` (`push` finds no receiver).
        Err(e) => {
            tracing::error!(error = %e, "otlp_endpoint: the HTTP client cannot be built; no trace spans are exported")
        }
    }
    Arc::new(Queue { tx, full: RateLimit::default() })
}

/// The task that sends batches.
struct Exporter {
    client: reqwest::Client,
    url: String,
    resource: serde_json::Value,
    failed: RateLimit,
}

impl Exporter {
    async fn run(self, mut rx: mpsc::Receiver<Msg>) {
        let mut batch: Vec<SpanData> = Vec::with_capacity(BATCH);
        while let Some(first) = rx.recv().await {
            let mut flush = None;
            match first {
                Msg::Span(span) => batch.push(span),
                Msg::Flush(ack) => flush = Some(ack),
            }
            let deadline = tokio::time::Instant::now() + FLUSH_EVERY;
            while flush.is_none() && batch.len() < BATCH {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(Msg::Span(span))) => batch.push(span),
                    Ok(Some(Msg::Flush(ack))) => flush = Some(ack),
                    Ok(None) | Err(_) => break,
                }
            }
            if flush.is_some() {
                // Everything queued before the flush goes now.
                while let Ok(msg) = rx.try_recv() {
                    match msg {
                        Msg::Span(span) => batch.push(span),
                        Msg::Flush(ack) => {
                            let _ = ack.send(());
                        }
                    }
                }
            }
            for chunk in std::mem::take(&mut batch).chunks(BATCH) {
                self.export(chunk).await;
            }
            if let Some(ack) = flush {
                let _ = ack.send(());
            }
        }
    }

    /// Sends one batch, tried up to [`EXPORT_TRIES`] times.
    async fn export(&self, spans: &[SpanData]) {
        let body = bytes::Bytes::from(serde_json::to_vec(&encode(&self.resource, spans)).unwrap_or_default());
        let n = spans.len() as u64;
        let mut delay = crate::backoff::Backoff::new(RETRY_FIRST, RETRY_MAX);
        let mut error = String::new();
        for attempt in 1..=EXPORT_TRIES {
            let sent =
                self.client.post(&self.url).header("content-type", "application/json").body(body.clone()).send().await;
            match sent {
                Ok(answer) if answer.status().is_success() => {
                    METRICS.exported.inc_by(n);
                    return;
                }
                Ok(answer) => {
                    error = format!("answered {}", answer.status());
                    if !matches!(answer.status().as_u16(), 429 | 502 | 503 | 504) {
                        break;
                    }
                }
                Err(e) => error = format!("{e:#}"),
            }
            if attempt < EXPORT_TRIES {
                tokio::time::sleep(delay.next_delay()).await;
            }
        }
        METRICS.dropped.with_label_values(&["export_failed"]).inc_by(n);
        self.failed.note(|batches| {
            tracing::warn!(url = %self.url, error = %error, spans = n, failed_batches = batches, "exporting trace spans failed; the batch is dropped");
        });
    }
}

/// One export request's body: OTLP's `ExportTraceServiceRequest` in its JSON encoding (ids as
/// hex, times as decimal strings of Unix nanoseconds, enums as numbers).
#[must_use]
pub fn encode(resource: &serde_json::Value, spans: &[SpanData]) -> serde_json::Value {
    let spans: Vec<serde_json::Value> = spans.iter().map(span_json).collect();
    json!({
        "resourceSpans": [{
            "resource": { "attributes": resource },
            "scopeSpans": [{ "scope": { "name": "etcron", "version": etcron_model::VERSION }, "spans": spans }],
        }],
    })
}

fn span_json(span: &SpanData) -> serde_json::Value {
    let mut out = json!({
        "traceId": hex(&span.context.trace_id),
        "spanId": hex(&span.context.span_id),
        "name": span.name,
        "kind": span.kind as i32,
        "startTimeUnixNano": span.start_ns.to_string(),
        "endTimeUnixNano": span.end_ns.to_string(),
        "attributes": attributes(&span.attributes),
    });
    if let Some(parent) = span.parent {
        out["parentSpanId"] = json!(hex(&parent));
    }
    if let Some(message) = &span.error {
        out["status"] = json!({ "code": 2, "message": message });
    }
    out
}

fn attributes(attributes: &[(&'static str, Value)]) -> serde_json::Value {
    let list: Vec<serde_json::Value> = attributes
        .iter()
        .map(|(key, value)| {
            let value = match value {
                Value::Str(s) => json!({ "stringValue": s }),
                Value::Int(n) => json!({ "intValue": n.to_string() }),
                Value::Bool(b) => json!({ "boolValue": b }),
            };
            json!({ "key": key, "value": value })
        })
        .collect();
    serde_json::Value::Array(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Kind, TraceContext, Tracer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn the_endpoint_is_a_base_url_and_bad_ones_are_refused_by_name() {
        assert_eq!(resolve(None, None), Ok(None));
        let file = TracingFile { otlp_endpoint: Some("http://127.0.0.1:4318/".to_owned()) };
        let c = resolve(None, Some(&file)).unwrap().unwrap();
        assert_eq!(c.url, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(resolve(Some(String::new()), Some(&file)), Ok(None), "an empty variable turns it off");
        let c = resolve(Some("https://otel.example:4318/base".to_owned()), Some(&file)).unwrap().unwrap();
        assert_eq!(c.url, "https://otel.example:4318/base/v1/traces");
        for bad in ["127.0.0.1:4318", "ftp://x", "http://u:p@x:4318", "http://x:4318/?a=1", "not a url"] {
            let e = resolve(Some(bad.to_owned()), None).unwrap_err();
            assert!(e.starts_with("otlp_endpoint: "), "{bad}: {e}");
        }
    }

    #[test]
    fn spans_are_encoded_as_otlp_json() {
        let context = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        let span = SpanData {
            name: "run",
            kind: Kind::Internal,
            context,
            parent: Some([1, 2, 3, 4, 5, 6, 7, 8]),
            start_ns: 1_764_547_200_000_000_000,
            end_ns: 1_764_547_201_000_000_000,
            attributes: vec![("etcron.job", Value::from("a")), ("etcron.attempt", Value::from(2u32))],
            error: Some("exit 1".to_owned()),
        };
        let body = encode(&attributes(&[("service.name", Value::from("etcron-worker"))]), &[span]);
        let rs = &body["resourceSpans"][0];
        assert_eq!(rs["resource"]["attributes"][0]["value"]["stringValue"], "etcron-worker");
        let s = &rs["scopeSpans"][0]["spans"][0];
        assert_eq!(s["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(s["spanId"], "00f067aa0ba902b7");
        assert_eq!(s["parentSpanId"], "0102030405060708");
        assert_eq!(s["kind"], 1);
        assert_eq!(s["startTimeUnixNano"], "1764547200000000000");
        assert_eq!(s["attributes"][1], json!({"key": "etcron.attempt", "value": {"intValue": "2"}}));
        assert_eq!(s["status"], json!({"code": 2, "message": "exit 1"}));
    }

    /// A loopback HTTP server answering every request with `status`; the bodies it got.
    async fn receiver(status: u16) -> (String, Arc<Mutex<Vec<serde_json::Value>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let got = Arc::new(Mutex::new(Vec::new()));
        let shared = got.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    let n = stream.read(&mut chunk).await.unwrap_or(0);
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length: usize = text
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse().unwrap())
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + length {
                            shared.lock().unwrap().push(serde_json::from_slice(&buf[end + 4..]).unwrap_or_default());
                            break;
                        }
                    }
                    if n == 0 {
                        break;
                    }
                }
                let answer = format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                let _ = stream.write_all(answer.as_bytes()).await;
            }
        });
        (url, got)
    }

    #[tokio::test]
    async fn spans_reach_the_endpoint_and_a_refusing_one_costs_a_bounded_number_of_tries() {
        let (url, got) = receiver(200).await;
        let config = resolve(Some(url), None).unwrap();
        let tracer = Tracer::start(config.as_ref(), &[("service.name", "t".to_owned())]);
        let root = TraceContext::root();
        let mut span = tracer.span("a", Kind::Server, root, None).unwrap();
        span.set("etcron.job", "j");
        span.end();
        tracer.span("b", Kind::Internal, root.child(), Some(&root)).unwrap().end();
        tracer.flush(Duration::from_secs(10)).await;
        let bodies = got.lock().unwrap().clone();
        let spans: Vec<&serde_json::Value> =
            bodies.iter().flat_map(|b| b["resourceSpans"][0]["scopeSpans"][0]["spans"].as_array().unwrap()).collect();
        assert_eq!(spans.len(), 2, "{bodies:?}");
        assert_eq!(spans[1]["parentSpanId"], json!(hex(&root.span_id)));

        let (url, got) = receiver(503).await;
        let tracer = Tracer::start(resolve(Some(url), None).unwrap().as_ref(), &[]);
        let before = METRICS.dropped.with_label_values(&["export_failed"]).get();
        tracer.span("c", Kind::Internal, TraceContext::root(), None).unwrap().end();
        tracer.flush(Duration::from_secs(10)).await;
        assert_eq!(got.lock().unwrap().len(), EXPORT_TRIES as usize);
        assert!(METRICS.dropped.with_label_values(&["export_failed"]).get() > before);
    }
}
