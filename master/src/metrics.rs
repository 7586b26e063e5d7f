//! The master's Prometheus metrics, served at `GET /metrics` under the same tokens as the API
//! (any role may read them). The etcd request metrics and the process metrics come from
//! `etcron_common::metrics`.

use std::sync::LazyLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use etcron_common::metrics::{counter, counter_vec, histogram_vec, LATENCY_BUCKETS};
use prometheus::{HistogramVec, IntCounter, IntCounterVec, IntGauge};

pub struct MasterMetrics {
    /// HTTP requests by method, route template (`/api/jobs/{job}`) and status code.
    pub requests: IntCounterVec,
    pub request_seconds: HistogramVec,
    /// Audit entries that could not be queued for MongoDB (they are only in the log).
    pub audit_dropped: IntCounter,
    /// Saves refused because the job would reach beyond its team: by rule (`task.user`,
    /// `selector`: the team's policy; `dependency`: a dependent the caller may not operate).
    pub team_refusals: IntCounterVec,
    /// Job changes refused to protect etcd's space: by limit (`byte_budget`: a token's or a
    /// team's change byte budget; `job_quota`: a team's job quota).
    pub change_refusals: IntCounterVec,
    /// Execution streams refused, by the limit they would pass (`per_token`, `per_execution`).
    pub streams_refused: IntCounterVec,
    /// Streams this master closed, by why (`quiet`: nothing but keepalives for the quiet
    /// limit; `stalled`: the client took no event within the send limit).
    pub streams_closed: IntCounterVec,
    /// Connections to workers for live output: one per execution followed on this master.
    pub stream_feeds: IntGauge,
}

pub static METRICS: LazyLock<MasterMetrics> = LazyLock::new(|| {
    MasterMetrics {
    requests: counter_vec(
        "etcron_master_http_requests_total",
        "HTTP requests by method, route and status code.",
        &["method", "route", "status"],
    ),
    request_seconds: histogram_vec(
        "etcron_master_http_request_duration_seconds",
        "Time to answer HTTP requests, by method and route.",
        &["method", "route"],
        LATENCY_BUCKETS,
    ),
    audit_dropped: counter(
        "etcron_master_audit_entries_dropped_total",
        "Audit entries dropped because MongoDB was unreachable for a full queue (they are only in the log).",
    ),
    team_refusals: counter_vec(
        "etcron_master_team_refusals_total",
        "Job saves refused because the job would reach beyond its team, by rule (task.user, selector, dependency).",
        &["rule"],
    ),
    change_refusals: counter_vec(
        "etcron_master_change_refusals_total",
        "Job changes refused to protect etcd's space, by limit (byte_budget, job_quota).",
        &["limit"],
    ),
    streams_refused: counter_vec(
        "etcron_master_streams_refused_total",
        "Execution streams (GET /api/executions/{id}/stream) refused, by the limit they would pass: per_token (429), per_execution (503).",
        &["limit"],
    ),
    streams_closed: counter_vec(
        "etcron_master_streams_closed_total",
        "Execution streams the master closed, by why: quiet (nothing but keepalives for 10 minutes), stalled (the client took no event for 30 s).",
        &["reason"],
    ),
    stream_feeds: etcron_common::metrics::gauge(
        "etcron_master_stream_feeds",
        "Connections to workers for live output: one per execution followed on this master, shared by its streams.",
    ),
}
});

/// Creates every metric so all are listed from the first scrape.
pub fn init() {
    etcron_common::metrics::init("master");
    etcron_common::admission::init_metrics();
    etcron_common::trace::init_metrics();
    for limit in ["per_token", "per_execution"] {
        METRICS.streams_refused.with_label_values(&[limit]);
    }
    for reason in ["quiet", "stalled"] {
        METRICS.streams_closed.with_label_values(&[reason]);
    }
    METRICS.stream_feeds.set(0);
}

/// Middleware: counts and times every request by its route template; requests no route
/// matched are counted under `unmatched`, so probing random paths adds no series.
pub async fn track(req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map_or("unmatched", MatchedPath::as_str).to_owned();
    let method = req.method().as_str().to_owned();
    let started = Instant::now();
    let response = next.run(req).await;
    let m = &*METRICS;
    m.request_seconds.with_label_values(&[method.as_str(), route.as_str()]).observe(started.elapsed().as_secs_f64());
    m.requests.with_label_values(&[method.as_str(), route.as_str(), response.status().as_str()]).inc();
    response
}

/// `GET /metrics`.
pub async fn serve() -> Response {
    ([(CONTENT_TYPE, etcron_common::metrics::CONTENT_TYPE)], etcron_common::metrics::render()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_master_metric_is_registered_and_listed() {
        init();
        METRICS.requests.with_label_values(&["GET", "/api/jobs", "200"]).inc();
        METRICS.request_seconds.with_label_values(&["GET", "/api/jobs"]).observe(0.01);
        let text = etcron_common::metrics::render();
        for name in [
            "etcron_master_http_requests_total{method=\"GET\",route=\"/api/jobs\",status=\"200\"} 1",
            "etcron_master_http_request_duration_seconds_bucket",
            // Other unit tests in this process may have counted drops: the series, whatever its value.
            "etcron_master_audit_entries_dropped_total ",
            "etcron_build_info{component=\"master\"",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }
}
