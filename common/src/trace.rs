//! Traces: the W3C trace context etcron carries from an API request through the run request in
//! etcd to the worker and into the task (`traceparent`), and the spans it exports over OTLP/HTTP
//! when an endpoint is configured ([`otlp`]). With none, [`Tracer::span`] builds nothing and no
//! exporter runs; the context (two random or derived ids) is still passed on, so a task's own
//! service can continue the trace.

pub mod otlp;

use std::sync::Arc;
use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{IntCounter, IntCounterVec};
use sha2::Digest;

pub use otlp::{resolve, ExportConfig, TracingFile};

/// The trace and span a span or a task continues: one `traceparent` header
/// (`00-{32 hex trace id}-{16 hex span id}-{flags}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// The `sampled` flag: spans under a context the caller did not sample are not exported.
    pub sampled: bool,
}

impl TraceContext {
    /// A `traceparent` value as W3C Trace Context (level 1) reads it: version `00` with exactly
    /// four fields, or a later version (not `ff`) with at least four; lowercase hex; neither id
    /// all zeros. `None` for anything else (the header is then ignored, as the standard says).
    #[must_use]
    pub fn parse(header: &str) -> Option<Self> {
        let header = header.trim();
        let mut fields = header.split('-');
        let (version, trace, span, flags) = (fields.next()?, fields.next()?, fields.next()?, fields.next()?);
        let more = fields.next().is_some();
        let lower_hex =
            |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !lower_hex(version, 2) || version == "ff" || (version == "00" && more) || !lower_hex(flags, 2) {
            return None;
        }
        if !lower_hex(trace, 32) || !lower_hex(span, 16) {
            return None;
        }
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        decode_hex(trace, &mut trace_id)?;
        decode_hex(span, &mut span_id)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        let flags = u8::from_str_radix(flags, 16).ok()?;
        Some(Self { trace_id, span_id, sampled: flags & 1 == 1 })
    }

    /// The `traceparent` value (version `00`).
    #[must_use]
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-{:02x}", self.trace_hex(), hex(&self.span_id), u8::from(self.sampled))
    }

    /// The trace id as 32 lowercase hex digits.
    #[must_use]
    pub fn trace_hex(&self) -> String {
        hex(&self.trace_id)
    }

    /// A new trace, sampled.
    #[must_use]
    pub fn root() -> Self {
        Self { trace_id: nonzero(rand::random()), span_id: nonzero(rand::random()), sampled: true }
    }

    /// A span of the same trace (a new span id): the context of a child of this span.
    #[must_use]
    pub fn child(&self) -> Self {
        Self { span_id: nonzero(rand::random()), ..*self }
    }

    /// A context whose trace id is derived from `key` alone (the first 16 bytes of
    /// SHA-256(`etcron trace ` + key)): every process that derives it from the same key lands
    /// in the same trace. Its span id is new.
    #[must_use]
    pub fn derived(key: &str) -> Self {
        let digest = sha2::Sha256::digest(format!("etcron trace {key}").as_bytes());
        let mut trace_id = [0u8; 16];
        trace_id.copy_from_slice(&digest[..16]);
        Self { trace_id: nonzero(trace_id), span_id: nonzero(rand::random()), sampled: true }
    }
}

/// An id that is not all zeros (W3C: an all-zero id is invalid).
fn nonzero<const N: usize>(mut id: [u8; N]) -> [u8; N] {
    if id == [0; N] {
        id[N - 1] = 1;
    }
    id
}

fn decode_hex(text: &str, out: &mut [u8]) -> Option<()> {
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(())
}

/// Bytes as lowercase hex.
#[must_use]
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// OTLP's span kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Internal = 1,
    Server = 2,
    Client = 3,
    Producer = 4,
    Consumer = 5,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    Bool(bool),
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s)
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Value::Int(n)
    }
}

impl From<u32> for Value {
    fn from(n: u32) -> Self {
        Value::Int(i64::from(n))
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

/// Longest string attribute or status message kept, in bytes (cut at a character boundary).
pub const MAX_VALUE_BYTES: usize = 1024;
/// Most attributes one span keeps (further ones are not kept).
pub const MAX_ATTRIBUTES: usize = 32;

/// A finished span as it is exported.
#[derive(Debug, Clone)]
pub struct SpanData {
    pub name: &'static str,
    pub kind: Kind,
    pub context: TraceContext,
    pub parent: Option<[u8; 8]>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attributes: Vec<(&'static str, Value)>,
    /// An error's message: the span's status is then `ERROR`.
    pub error: Option<String>,
}

/// The spans of one process: off (nothing built, nothing running), or an exporter's queue.
/// Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Tracer(Option<Arc<otlp::Queue>>);

impl Tracer {
    /// No spans: [`span`](Self::span) answers `None`, no exporter runs.
    #[must_use]
    pub fn off() -> Self {
        Self(None)
    }

    /// Starts the exporter of `config` (a task on the current runtime) for the process named
    /// by `resource` (`service.name`, …); off without a config.
    #[must_use]
    pub fn start(config: Option<&ExportConfig>, resource: &[(&'static str, String)]) -> Self {
        Self(config.map(|c| otlp::start(c, resource)))
    }

    /// Whether spans are built and exported.
    #[must_use]
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// A span named `name` with the ids of `context`, child of `parent` (in the same trace),
    /// started now; `None` when tracing is off or the caller did not sample the trace.
    #[must_use]
    pub fn span(
        &self,
        name: &'static str,
        kind: Kind,
        context: TraceContext,
        parent: Option<&TraceContext>,
    ) -> Option<Span> {
        let queue = self.0.as_ref()?;
        if !context.sampled {
            return None;
        }
        METRICS.started.inc();
        let data = SpanData {
            name,
            kind,
            context,
            parent: parent.map(|p| p.span_id),
            start_ns: now_ns(),
            end_ns: 0,
            attributes: Vec::new(),
            error: None,
        };
        Some(Span { queue: queue.clone(), data: Some(data) })
    }

    /// Exports what is queued, waiting at most `limit` (at shutdown).
    pub async fn flush(&self, limit: Duration) {
        if let Some(queue) = &self.0 {
            queue.flush(limit).await;
        }
    }
}

/// A span being recorded; it ends (and is queued for export) when dropped or [`end`](Self::end)ed.
#[derive(Debug)]
pub struct Span {
    queue: Arc<otlp::Queue>,
    data: Option<SpanData>,
}

impl Span {
    /// Sets an attribute (at most [`MAX_ATTRIBUTES`]; strings cut to [`MAX_VALUE_BYTES`]).
    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        let Some(data) = self.data.as_mut() else { return };
        let value = match value.into() {
            Value::Str(s) => Value::Str(cut(s)),
            other => other,
        };
        if let Some(slot) = data.attributes.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = value;
        } else if data.attributes.len() < MAX_ATTRIBUTES {
            data.attributes.push((key, value));
        }
    }

    /// Marks the span failed with `message` (its status `ERROR`).
    pub fn fail(&mut self, message: &str) {
        if let Some(data) = self.data.as_mut() {
            data.error = Some(cut(message.to_owned()));
        }
    }

    /// The attributes set so far.
    #[must_use]
    pub fn attributes(&self) -> &[(&'static str, Value)] {
        self.data.as_ref().map_or(&[], |d| &d.attributes)
    }

    /// The span's ids.
    #[must_use]
    pub fn context(&self) -> Option<TraceContext> {
        self.data.as_ref().map(|d| d.context)
    }

    /// Ends the span now.
    pub fn end(self) {
        drop(self);
    }

    /// Drops the span without exporting it (it turned out to be of no interest).
    pub fn discard(mut self) {
        self.data = None;
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if let Some(mut data) = self.data.take() {
            data.end_ns = now_ns().max(data.start_ns);
            self.queue.push(data);
        }
    }
}

fn cut(mut s: String) -> String {
    if s.len() > MAX_VALUE_BYTES {
        let mut at = MAX_VALUE_BYTES;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
    }
    s
}

/// Nanoseconds since the Unix epoch.
fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Creates the trace metrics, so that they are listed (at 0) from the first scrape, tracing on
/// or off. Each binary's metrics `init` calls it.
pub fn init_metrics() {
    for reason in ["queue_full", "export_failed"] {
        METRICS.dropped.with_label_values(&[reason]);
    }
}

/// The exporter's metrics (both binaries).
pub struct TraceMetrics {
    pub started: IntCounter,
    pub exported: IntCounter,
    pub dropped: IntCounterVec,
}

pub static METRICS: LazyLock<TraceMetrics> = LazyLock::new(|| {
    TraceMetrics {
    started: crate::metrics::counter(
        "etcron_trace_spans_started_total",
        "Spans this process built (0 while no OTLP endpoint is configured: none are).",
    ),
    exported: crate::metrics::counter(
        "etcron_trace_spans_exported_total",
        "Spans the OTLP endpoint accepted (a 2xx answer).",
    ),
    dropped: crate::metrics::counter_vec(
        "etcron_trace_spans_dropped_total",
        "Spans not exported, by reason: queue_full (the export queue was full), export_failed (every try of their batch failed).",
        &["reason"],
    ),
}
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips_and_bad_values_are_ignored() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let c = TraceContext::parse(header).unwrap();
        assert_eq!(c.traceparent(), header);
        assert!(c.sampled);
        assert!(!TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap().sampled);
        // A later version may carry more fields; its first four are read.
        assert!(TraceContext::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x").is_some());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn derived_traces_depend_on_the_key_alone_and_children_keep_the_trace() {
        let a = TraceContext::derived("job@1764547200000#1");
        let b = TraceContext::derived("job@1764547200000#1");
        assert_eq!(a.trace_id, b.trace_id);
        assert_ne!(a.span_id, b.span_id);
        assert_ne!(TraceContext::derived("job@1764547201000#1").trace_id, a.trace_id);
        let child = a.child();
        assert_eq!(child.trace_id, a.trace_id);
        assert_ne!(child.span_id, a.span_id);
        assert_eq!(TraceContext::parse(&child.traceparent()), Some(child));
    }

    #[test]
    fn an_off_tracer_builds_no_span() {
        let tracer = Tracer::off();
        assert!(!tracer.is_on());
        assert!(tracer.span("x", Kind::Internal, TraceContext::root(), None).is_none());
    }
}
