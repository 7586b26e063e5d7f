//! Serving HTTP with explicit limits, for every server etcron runs (the master's API and
//! console, the worker's live output and metrics): HTTP/1.1 only; at most `max_connections`
//! connections at once, below the process's descriptor limit (further clients wait in the
//! listen backlog; `accept` never runs out of descriptors); at most `per_peer` of them from one
//! address (more are closed at once), so one client cannot take every slot; a request's
//! headers within `header_read` (an idle keep-alive connection waiting for its next request
//! included), so half-sent requests and idle sockets cannot hold slots; and a bounded drain on
//! shutdown.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// The limits of one server.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Connections served at once from one IP address.
    pub per_peer: usize,
    /// Time a client has to send a request's headers, from connect or from its previous
    /// answer; the connection is closed after it.
    pub header_read: Duration,
    /// Longest a shutdown waits for connections still open (a followed output stream).
    pub drain: Duration,
}

/// Most connections served at once, whatever the descriptor limit allows.
pub const MAX_CONNECTIONS: usize = 1024;
/// Most connections served at once from one address.
pub const PER_PEER: usize = 128;

impl Default for Limits {
    /// `MAX_CONNECTIONS`, or half the descriptor limit when that is lower (the rest is for etcd,
    /// MongoDB, files and processes); `PER_PEER`; 10 s for headers; 10 s of drain.
    fn default() -> Self {
        let descriptors = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(u64::MAX, |(soft, _)| soft);
        let half = usize::try_from(descriptors / 2).unwrap_or(usize::MAX);
        Self {
            max_connections: MAX_CONNECTIONS.min(half).max(16),
            per_peer: PER_PEER,
            header_read: Duration::from_secs(10),
            drain: Duration::from_secs(10),
        }
    }
}

/// Open connections per peer address.
#[derive(Default)]
struct Peers(Mutex<HashMap<IpAddr, usize>>);

impl Peers {
    /// Counts a connection from `ip` in, unless it already has `cap`.
    fn enter(&self, ip: IpAddr, cap: usize) -> bool {
        let mut peers = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = peers.entry(ip).or_insert(0);
        if *n >= cap {
            return false;
        }
        *n += 1;
        true
    }

    fn leave(&self, ip: IpAddr) {
        let mut peers = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = peers.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                peers.remove(&ip);
            }
        }
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then drains (up to `limits.drain`).
/// Handlers can read the peer with `ConnectInfo<SocketAddr>`.
///
/// # Errors
/// Never for a single failed connection (logged); only if the listener itself breaks.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let peers = Arc::new(Peers::default());
    let mut refused_logged = tokio::time::Instant::now() - Duration::from_secs(60);
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read).keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => slot.map_err(std::io::Error::other)?,
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: say so, wait a little, go on.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        if !peers.enter(peer.ip(), limits.per_peer) {
            // Closed at once; said at most once a minute (a flood must not flood the log too).
            if refused_logged.elapsed() >= Duration::from_secs(60) {
                refused_logged = tokio::time::Instant::now();
                tracing::warn!(peer = %peer.ip(), per_peer = limits.per_peer, "connection closed: this address already holds the most connections one address may");
            }
            continue;
        }
        let service =
            TowerToHyperService::new(app.clone().map_request(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                req.map(axum::body::Body::new)
            }));
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        let peers = peers.clone();
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
            peers.leave(peer.ip());
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain, graceful.shutdown()).await.is_err() {
        tracing::warn!(drain_secs = limits.drain.as_secs(), "connections still open at shutdown were dropped");
    }
    Ok(())
}
