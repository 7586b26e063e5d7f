//! Serving HTTP with explicit limits, for every server etcron runs (the master's API and
//! console, the worker's live output and metrics), whoever can reach it, token or not:
//! HTTP/1.1 only; at most `max_connections` connections at once, below the process's
//! descriptor limit, and at most `per_peer` from one address (more are closed as soon as they
//! are accepted, so `accept` never runs out of descriptors and one client cannot take every
//! slot); a request's head within `header_read` and the whole request, head and body, within
//! `request` (a body still arriving then fails to read with [`BodyDeadline`], and the handler
//! answers 408); a connection with nothing read or written for `idle` closed (kept-alive connections between requests, followers that stopped reading:
//! streams send heartbeats more often); and a bounded drain on shutdown. A pile of half-sent
//! requests therefore holds a bounded number of descriptors for a bounded time.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// The limits of one server.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Connections served at once from one IP address.
    pub per_peer: usize,
    /// Time a client has to send a request's head.
    pub header_read: Duration,
    /// Time a client has to send a whole request, head and body (at least `header_read`): the
    /// body must be in by `request - header_read` after the head arrived.
    pub request: Duration,
    /// A connection with nothing read or written for this long is closed.
    pub idle: Duration,
    /// Longest a shutdown waits for connections still open (a followed output stream).
    pub drain: Duration,
}

/// Most connections served at once, whatever the descriptor limit allows.
pub const MAX_CONNECTIONS: usize = 1024;
/// Most connections served at once from one address.
pub const PER_PEER: usize = 128;
/// Default time for a request's head, and for a whole request.
pub const HEADER_READ: Duration = Duration::from_secs(10);
pub const REQUEST: Duration = Duration::from_secs(40);

impl Default for Limits {
    /// `MAX_CONNECTIONS`, or half the descriptor limit when that is lower (the rest is for etcd,
    /// MongoDB, files and processes); `PER_PEER`; 10 s for a head, 40 s for a whole request;
    /// 60 s idle; 10 s of drain.
    fn default() -> Self {
        let descriptors = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(u64::MAX, |(soft, _)| soft);
        let half = usize::try_from(descriptors / 2).unwrap_or(usize::MAX);
        Self {
            max_connections: MAX_CONNECTIONS.min(half).max(16),
            per_peer: PER_PEER,
            header_read: HEADER_READ,
            request: REQUEST,
            idle: Duration::from_secs(60),
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

/// Counts every connection closed at once, and says so in the log at most once a minute (a
/// flood must not flood the log too).
struct Refusals(tokio::time::Instant);

impl Refusals {
    /// Counts the refusal (`etcron_http_connections_refused_total{reason}`) and logs it.
    fn note(&mut self, peer: SocketAddr, reason: &str, why: &str) {
        crate::metrics::HTTP_REFUSED.with_label_values(&[reason]).inc();
        if self.0.elapsed() >= Duration::from_secs(60) {
            self.0 = tokio::time::Instant::now();
            tracing::warn!(%peer, why, "connection closed at once (said at most once a minute)");
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
    let mut refusals = Refusals(tokio::time::Instant::now() - Duration::from_secs(60));
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read).keep_alive(true);
    tokio::pin!(shutdown);
    loop {
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refusals.note(peer, "full", "the server holds the most connections it may");
            continue;
        };
        if !peers.enter(peer.ip(), limits.per_peer) {
            refusals.note(peer, "per_peer", "this address holds the most connections one address may");
            continue;
        }
        let body_time = limits.request.saturating_sub(limits.header_read);
        let service =
            TowerToHyperService::new(app.clone().map_request(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                // The head took at most `header_read`: the body has the rest of `request`.
                req.map(|body| axum::body::Body::new(Deadline::new(body, body_time)))
            }));
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Watched { inner: stream, activity: activity.clone() });
        let conn = graceful.watch(builder.serve_connection(io, service));
        let (peers, idle) = (peers.clone(), limits.idle);
        crate::task::spawn(async move {
            tokio::select! {
                result = conn => if let Err(e) = result {
                    tracing::debug!(error = %e, %peer, "connection ended with an error");
                },
                () = activity.idle_for(idle) => tracing::debug!(%peer, "connection idle; closed"),
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

/// The error of a request body not complete by its deadline (see [`Limits::request`]).
#[derive(Debug, Clone, Copy)]
pub struct BodyDeadline(pub Duration);

impl std::fmt::Display for BodyDeadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the request body was not complete within {} s of its head", self.0.as_secs())
    }
}

impl std::error::Error for BodyDeadline {}

impl BodyDeadline {
    /// The deadline in `error` or in one of its sources, if the body failed by its deadline.
    #[must_use]
    pub fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a Self> {
        let mut at = Some(error);
        while let Some(e) = at {
            if let Some(d) = e.downcast_ref::<Self>() {
                return Some(d);
            }
            at = e.source();
        }
        None
    }
}

/// A request body that fails with [`BodyDeadline`] once its time is up.
struct Deadline {
    inner: hyper::body::Incoming,
    time: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl Deadline {
    fn new(inner: hyper::body::Incoming, time: Duration) -> Self {
        Self { inner, time, sleep: Box::pin(tokio::time::sleep(time)) }
    }
}

impl hyper::body::Body for Deadline {
    type Data = hyper::body::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if self.sleep.as_mut().poll(cx).is_ready() {
            crate::metrics::HTTP_BODY_DEADLINE.inc();
            return Poll::Ready(Some(Err(Box::new(BodyDeadline(self.time)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// When a connection last read or wrote a byte.
struct Activity {
    start: tokio::time::Instant,
    /// Milliseconds after `start`.
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self { start: tokio::time::Instant::now(), last_ms: AtomicU64::new(0) }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Returns once nothing happened for `limit`.
    async fn idle_for(&self, limit: Duration) {
        loop {
            let deadline = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed)) + limit;
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A stream that notes each read or written byte in its [`Activity`].
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
