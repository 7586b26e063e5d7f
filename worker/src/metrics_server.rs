//! `/metrics`, `/healthz` and `/readyz` on `metrics_listen`: the metrics of `metrics.rs`, with the
//! gauges kept elsewhere (running executions, queues, pending closes) read at scrape time.

use std::net::SocketAddr;
use std::sync::Arc;

use etcron_common::metrics::sync_counter;

use crate::context::Context;
use crate::metrics::METRICS;

/// Brings the gauges and counters kept elsewhere up to date, then renders everything.
#[must_use]
pub fn render(ctx: &Context) -> String {
    let m = &*METRICS;
    m.running.set(i64::try_from(ctx.registry.running()).unwrap_or(i64::MAX));
    m.closes_pending.set(i64::try_from(ctx.closing.count()).unwrap_or(i64::MAX));
    m.sink_queue.set(i64::try_from(ctx.sink.queued()).unwrap_or(i64::MAX));
    m.spool_bytes.set(i64::try_from(ctx.sink.spool_size()).unwrap_or(i64::MAX));
    let stats = &ctx.sink.stats;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    sync_counter(&m.records_written, get(&stats.written));
    sync_counter(&m.records_spooled, get(&stats.spooled));
    sync_counter(&m.records_replayed, get(&stats.replayed));
    sync_counter(&m.records_dropped, get(&stats.dropped));
    sync_counter(&m.record_write_errors, get(&stats.write_errors));
    crate::notify::notifier::refresh_metrics(&ctx.notifier);
    etcron_common::metrics::render()
}

/// Serves `GET /metrics` on `addr` until the process ends.
///
/// # Errors
/// When `addr` cannot be bound.
pub async fn serve(addr: SocketAddr, ctx: Arc<Context>) -> std::io::Result<tokio::task::JoinHandle<()>> {
    use axum::http::header::CONTENT_TYPE;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    let ready_ctx = ctx.clone();
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let ctx = ctx.clone();
                async move { ([(CONTENT_TYPE, etcron_common::metrics::CONTENT_TYPE)], render(&ctx)) }
            }),
        )
        // Alive while the process answers.
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        // Ready while registered under a live session lease: able to claim ticks.
        .route(
            "/readyz",
            axum::routing::get(move || {
                let registered = ready_ctx.lease.borrow().is_some();
                async move {
                    if registered {
                        (axum::http::StatusCode::OK, "ready\n")
                    } else {
                        (
                            axum::http::StatusCode::SERVICE_UNAVAILABLE,
                            "not ready: no session lease (etcd unreachable?)\n",
                        )
                    }
                }
            }),
        );
    Ok(etcron_common::task::spawn(async move {
        let limits = etcron_common::serve::Limits::default();
        if let Err(e) = etcron_common::serve::serve(listener, app, limits, std::future::pending()).await {
            tracing::error!(error = %e, "metrics server failed");
        }
    }))
}
