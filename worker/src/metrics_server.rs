//! `/metrics`, `/healthz` and `/readyz` on `metrics_listen`: the metrics of `metrics.rs`, with the
//! gauges kept elsewhere (running executions, queues, pending closes) read at scrape time. One
//! server per process: with several namespaces, the figures of every namespace's node summed.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use etcron_common::metrics::sync_counter;

use crate::context::Context;
use crate::metrics::METRICS;

/// The nodes of this process whose figures `/metrics` sums and whose sessions `/readyz` asks
/// about: each namespace's (`Config::metrics_node`), never a remote executor's.
static NODES: Mutex<Vec<Weak<Context>>> = Mutex::new(Vec::new());

/// Counts `ctx` in this process's `/metrics` and `/readyz` while it lives.
pub fn count(ctx: &Arc<Context>) {
    let mut nodes = NODES.lock().unwrap_or_else(PoisonError::into_inner);
    nodes.retain(|n| n.strong_count() > 0);
    nodes.push(Arc::downgrade(ctx));
}

/// The counted nodes alive now.
fn nodes() -> Vec<Arc<Context>> {
    NODES.lock().unwrap_or_else(PoisonError::into_inner).iter().filter_map(Weak::upgrade).collect()
}

/// Brings the gauges and counters kept elsewhere up to date (summed over `nodes`), then renders
/// everything.
#[must_use]
pub fn render(nodes: &[Arc<Context>]) -> String {
    let m = &*METRICS;
    let sum = |f: &dyn Fn(&Context) -> u64| i64::try_from(nodes.iter().map(|c| f(c)).sum::<u64>()).unwrap_or(i64::MAX);
    let size = |n: usize| n as u64;
    m.running.set(sum(&|c| size(c.registry.running())));
    m.closes_pending.set(sum(&|c| size(c.closing.count())));
    m.sink_queue.set(sum(&|c| size(c.sink.queued())));
    m.spool_bytes.set(sum(&|c| c.sink.spool_size()));
    m.capacity.set(sum(&|c| u64::from(c.config.capacity)));
    let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    let stat = |f: &dyn Fn(&crate::context::log_sink::SinkStats) -> &std::sync::atomic::AtomicU64| {
        nodes.iter().map(|c| get(f(&c.sink.stats))).sum::<u64>()
    };
    sync_counter(&m.records_written, stat(&|s| &s.written));
    sync_counter(&m.records_spooled, stat(&|s| &s.spooled));
    sync_counter(&m.records_replayed, stat(&|s| &s.replayed));
    sync_counter(&m.records_dropped, stat(&|s| &s.dropped));
    sync_counter(&m.record_write_errors, stat(&|s| &s.write_errors));
    crate::notify::notifier::refresh_metrics(nodes.iter().map(|c| &c.notifier));
    etcron_common::metrics::render()
}

/// `/readyz`: ready while every counted node is registered under a live session lease (able
/// to claim ticks); else the namespaces that are not.
fn readiness() -> (axum::http::StatusCode, String) {
    let waiting: Vec<String> =
        nodes().iter().filter(|c| c.lease.borrow().is_none()).map(|c| c.config.namespace.clone()).collect();
    if waiting.is_empty() {
        (axum::http::StatusCode::OK, "ready\n".to_owned())
    } else {
        let which = waiting.join(", ");
        (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: no session lease in {which} (etcd unreachable?)\n"),
        )
    }
}

/// The address the process's metrics server took, once one node started it.
static SERVED: Mutex<Option<SocketAddr>> = Mutex::new(None);

/// Serves `GET /metrics`, `/healthz` and `/readyz` on `addr` until the process ends: once per
/// process (the nodes of its other namespaces find it served).
///
/// # Errors
/// When `addr` cannot be bound.
pub fn serve(addr: SocketAddr) -> std::io::Result<()> {
    use axum::http::header::CONTENT_TYPE;
    let mut served = SERVED.lock().unwrap_or_else(PoisonError::into_inner);
    if served.is_some() {
        return Ok(());
    }
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    *served = Some(addr);
    drop(served);
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(|| async { ([(CONTENT_TYPE, etcron_common::metrics::CONTENT_TYPE)], render(&nodes())) }),
        )
        // Alive while the process answers.
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route("/readyz", axum::routing::get(|| async { readiness() }));
    etcron_common::task::spawn(async move {
        let limits = etcron_common::serve::Limits::default();
        if let Err(e) = etcron_common::serve::serve(listener, app, limits, std::future::pending()).await {
            tracing::error!(error = %e, "metrics server failed");
        }
    });
    Ok(())
}
