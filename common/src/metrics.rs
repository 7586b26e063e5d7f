//! Prometheus metrics: helpers that create and register metrics in the process's default
//! registry, the metrics both binaries share (etcd requests, build info, the process's CPU and
//! memory), and the text exposition served at `/metrics`.
//!
//! Metric names are static; a name the registry refuses is a programming error caught by the
//! unit tests of each binary's metrics module, which create every metric.

use std::sync::LazyLock;

use prometheus::core::Collector;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    TextEncoder,
};

/// Latency buckets in seconds, 0.5 ms to 10 s: etcd requests on loopback take about a
/// millisecond, a quorum loss takes the full request timeout.
pub const LATENCY_BUCKETS: &[f64] =
    &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Registers a collector in the default registry; a second registration of the same name (two
/// instances of a component in one test process) keeps the first and is only logged.
fn register<C: Collector + Clone + 'static>(name: &str, collector: C) -> C {
    if let Err(e) = prometheus::register(Box::new(collector.clone())) {
        tracing::debug!(metric = name, error = %e, "metric not registered");
    }
    collector
}

fn invalid(name: &str, e: &prometheus::Error) -> ! {
    panic!("metric {name} cannot be created: {e}")
}

/// A counter.
#[must_use]
pub fn counter(name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).unwrap_or_else(|e| invalid(name, &e));
    register(name, c)
}

/// A counter with labels.
#[must_use]
pub fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| invalid(name, &e));
    register(name, c)
}

/// A gauge.
#[must_use]
pub fn gauge(name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).unwrap_or_else(|e| invalid(name, &e));
    register(name, g)
}

/// A gauge with labels.
#[must_use]
pub fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| invalid(name, &e));
    register(name, g)
}

/// A histogram with the given buckets.
#[must_use]
pub fn histogram(name: &str, help: &str, buckets: &[f64]) -> Histogram {
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))
        .unwrap_or_else(|e| invalid(name, &e));
    register(name, h)
}

/// A histogram with labels and the given buckets.
#[must_use]
pub fn histogram_vec(name: &str, help: &str, labels: &[&str], buckets: &[f64]) -> HistogramVec {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets.to_vec()), labels)
        .unwrap_or_else(|e| invalid(name, &e));
    register(name, h)
}

/// Brings a counter up to a total kept elsewhere (an atomic the code already maintains).
pub fn sync_counter(counter: &IntCounter, total: u64) {
    let seen = counter.get();
    if total > seen {
        counter.inc_by(total - seen);
    }
}

/// etcd requests by operation: latency, and failures by kind (`error`: etcd answered with an
/// error or the connection failed; `timeout`: no answer within the deadline).
pub struct EtcdMetrics {
    pub seconds: HistogramVec,
    pub errors: IntCounterVec,
    pub member_healthy: IntGaugeVec,
    pub member_failovers: IntCounterVec,
}

pub static ETCD: LazyLock<EtcdMetrics> = LazyLock::new(|| EtcdMetrics {
    seconds: histogram_vec(
        "etcron_etcd_request_duration_seconds",
        "Time of etcd requests by operation, answered or not.",
        &["op"],
        LATENCY_BUCKETS,
    ),
    errors: counter_vec(
        "etcron_etcd_request_errors_total",
        "etcd requests that failed, by operation and kind (error, timeout).",
        &["op", "kind"],
    ),
    member_healthy: gauge_vec(
        "etcron_etcd_member_healthy",
        "1 while the etcd member at this endpoint answers probes with a leader, 0 while requests avoid it.",
        &["endpoint"],
    ),
    member_failovers: counter_vec(
        "etcron_etcd_member_failovers_total",
        "Times the etcd member at this endpoint was judged unhealthy and requests and streams moved off it.",
        &["endpoint"],
    ),
});

/// Connections an HTTP server closed as soon as it accepted them (`common::serve`), by reason:
/// `full` (the server's cap), `per_peer` (one address's cap).
pub static HTTP_REFUSED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "etcron_http_connections_refused_total",
        "Connections closed at once on accept, by reason (full, per_peer).",
        &["reason"],
    )
});

/// Requests whose body was not complete by the request deadline (`common::serve`): answered
/// 408 and their connection closed.
pub static HTTP_BODY_DEADLINE: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcron_http_request_deadline_total",
        "Requests whose body was not complete by the request deadline (answered 408, connection closed).",
    )
});

/// Registers the process collector (CPU seconds, resident memory, open files, start time) and
/// `etcron_build_info{component,version}`, and creates the shared metrics so they are listed
/// from the first scrape. Call once at start.
pub fn init(component: &str) {
    #[cfg(target_os = "linux")]
    {
        let pc = prometheus::process_collector::ProcessCollector::for_self();
        if let Err(e) = prometheus::register(Box::new(pc)) {
            tracing::debug!(error = %e, "process metrics not registered");
        }
    }
    let info =
        gauge_vec("etcron_build_info", "Component and version of this process (always 1).", &["component", "version"]);
    info.with_label_values(&[component, etcron_model::VERSION]).set(1);
    LazyLock::force(&ETCD);
    LazyLock::force(&HTTP_REFUSED);
    LazyLock::force(&HTTP_BODY_DEADLINE);
}

/// The default registry in Prometheus' text format (version 0.0.4).
#[must_use]
pub fn render() -> String {
    let mut out = Vec::new();
    if let Err(e) = TextEncoder::new().encode(&prometheus::gather(), &mut out) {
        tracing::error!(error = %e, "encoding metrics failed");
    }
    String::from_utf8(out).unwrap_or_default()
}

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_metrics_are_created_and_rendered() {
        init("test");
        ETCD.seconds.with_label_values(&["txn"]).observe(0.002);
        ETCD.errors.with_label_values(&["txn", "timeout"]).inc();
        let text = render();
        assert!(text.contains("etcron_etcd_request_duration_seconds_bucket{op=\"txn\",le=\"0.0025\"} 1"), "{text}");
        assert!(text.contains("etcron_etcd_request_errors_total{kind=\"timeout\",op=\"txn\"} 1"), "{text}");
        assert!(
            text.contains(&format!("etcron_build_info{{component=\"test\",version=\"{}\"}} 1", etcron_model::VERSION))
        );
        assert!(text.contains("process_resident_memory_bytes"), "{text}");
    }

    #[test]
    fn sync_counter_only_moves_forward() {
        let c = IntCounter::new("t_total", "t").unwrap();
        sync_counter(&c, 5);
        sync_counter(&c, 3);
        assert_eq!(c.get(), 5);
        sync_counter(&c, 9);
        assert_eq!(c.get(), 9);
    }
}
