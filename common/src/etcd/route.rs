//! The gRPC channel every etcd client of the process talks through: each request goes to a
//! member [`super::members`] deems healthy (the least busy), with etcd's require-leader
//! metadata set by the client, so a member without a leader refuses at once.
//!
//! - A request a member refused before doing anything ("no leader", connection refused) marks
//!   it unhealthy and goes again to another member, within its deadline; refused by all, it
//!   tries again every 100 ms for up to `LEADER_WAIT` (an election). A read (`READS`, or a
//!   transaction of ranges only) cut short by the two cases below, by a broken connection, or
//!   answered "leader changed", is sent again too. Nothing else is sent twice: an answer lost
//!   on the way may mean the request was applied.
//! - A member turning unhealthy fails what waits on it: a request still waiting for its answer
//!   (its caller treats that as unknown, as after a timeout), and the response stream of a
//!   watch or a lease keep-alive (its owner opens it again, on a healthy member).
//! - A new leader fails every request still waiting for its answer, on any member, the same
//!   way (writes forwarded to the old leader are lost with it), streams still being opened, and
//!   lease keep-alive streams (their renewals went to the old leader too).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt as _;
use tokio::sync::{mpsc, watch};
use tonic::transport::channel::Change;
use tonic::transport::{Channel, Endpoint};
use tower::{BoxError, Service, ServiceExt as _};

use super::members::{Member, Members};

type Request = http::Request<tonic::body::Body>;
type Response = http::Response<tonic::body::Body>;

/// How long a request refused by every member (no leader anywhere, no connection anywhere)
/// keeps trying, within its own deadline: an election with etcd's default 1 s election timeout
/// takes 1–2.5 s.
const LEADER_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Calls that only read: one that a member turning unhealthy or a change of leader cut short is
/// sent again to another member.
const READS: [&str; 5] = [
    "/etcdserverpb.KV/Range",
    "/etcdserverpb.Lease/LeaseTimeToLive",
    "/etcdserverpb.Lease/LeaseLeases",
    "/etcdserverpb.Maintenance/Status",
    "/etcdserverpb.Cluster/MemberList",
];

/// Calls whose request is a stream: never buffered, never sent twice.
const STREAMS: [&str; 2] = ["/etcdserverpb.Watch/Watch", "/etcdserverpb.Lease/LeaseKeepAlive"];

/// Builds the routed channel for `etcd_client::Client::connect_with_balanced_channel`; once
/// `.1` is set every request fails before it is sent ([`super::Severance`]).
pub(super) struct Routed(pub(super) Arc<Members>, pub(super) Arc<std::sync::atomic::AtomicBool>);

impl etcd_client::BalancedChannelBuilder for Routed {
    type Error = etcd_client::Error;

    fn balanced_channel(
        self,
        buffer: usize,
    ) -> Result<(etcd_client::Channel, mpsc::Sender<Change<http::Uri, Endpoint>>), Self::Error> {
        let (tx, rx) = mpsc::channel(buffer);
        let router = Router {
            members: self.0,
            channels: Arc::new(Mutex::new(Channels { rx, by_authority: HashMap::new() })),
            severed: self.1,
        };
        Ok((etcd_client::Channel::Custom(tower::util::BoxCloneSyncService::new(router)), tx))
    }
}

/// A connection per member, made from the endpoints the client sends in.
struct Channels {
    rx: mpsc::Receiver<Change<http::Uri, Endpoint>>,
    by_authority: HashMap<String, Channel>,
}

#[derive(Clone)]
struct Router {
    members: Arc<Members>,
    channels: Arc<Mutex<Channels>>,
    severed: Arc<std::sync::atomic::AtomicBool>,
}

impl Service<Request> for Router {
    type Response = Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        if self.severed.load(std::sync::atomic::Ordering::Acquire) {
            return Box::pin(async { Err::<Response, BoxError>("this etcd client was severed".into()) });
        }
        let router = self.clone();
        if STREAMS.contains(&request.uri().path()) {
            Box::pin(async move { router.stream(request).await })
        } else {
            Box::pin(async move { router.unary(request).await })
        }
    }
}

/// How one attempt on one member ended.
enum Sent {
    Answered(Response),
    /// Refused before anything was done: another member may take it.
    Refused(String),
    /// Cut short (its member turned unhealthy, a new leader, a broken connection) or answered
    /// "leader changed": sent again if it only reads, else `.0` is its outcome.
    Interrupted(Result<Response, BoxError>),
    Failed(BoxError),
}

impl Router {
    fn channel(&self, member: &Member) -> Result<Channel, BoxError> {
        let mut c = self.channels.lock().map_err(|_| "etcd channels poisoned")?;
        while let Ok(change) = c.rx.try_recv() {
            match change {
                Change::Insert(uri, endpoint) => {
                    let authority = uri.authority().map(ToString::to_string).unwrap_or_default();
                    c.by_authority.insert(authority, endpoint.connect_lazy());
                }
                Change::Remove(uri) => {
                    c.by_authority.remove(&uri.authority().map(ToString::to_string).unwrap_or_default());
                }
            }
        }
        let channel = c.by_authority.get(&member.authority).cloned();
        channel.ok_or_else(|| format!("no connection to etcd member {}", member.authority).into())
    }

    async fn unary(self, request: Request) -> Result<Response, BoxError> {
        let (parts, body) = request.into_parts();
        let body: Bytes = body.collect().await?.to_bytes();
        let began = tokio::time::Instant::now();
        // Decided only once a request is interrupted: claims are transactions too, and the hot
        // path does not decode them.
        let mut read: Option<bool> = None;
        loop {
            let mut refused = Vec::new();
            for _ in 0..self.members.list.len() {
                let member = self.members.pick();
                let mut request = http::Request::new(tonic::body::Body::new(http_body_util::Full::new(body.clone())));
                *request.method_mut() = parts.method.clone();
                *request.uri_mut() = parts.uri.clone();
                *request.version_mut() = parts.version;
                *request.headers_mut() = parts.headers.clone();
                match self.send(&member, request).await {
                    Sent::Answered(response) => return Ok(response),
                    Sent::Failed(e) => return Err(e),
                    Sent::Interrupted(outcome) => {
                        if !*read.get_or_insert_with(|| only_reads(parts.uri.path(), &body)) {
                            return outcome;
                        }
                    }
                    Sent::Refused(reason) => {
                        self.members.refused(&member, &reason);
                        refused.push(format!("{}: {reason}", member.authority));
                    }
                }
            }
            // Every member refused: most likely an election under way. Its length is waited out.
            if began.elapsed() >= LEADER_WAIT {
                let refused = refused.join("; ");
                return Err(tonic::Status::unavailable(format!("every etcd member refused: {refused}")).into());
            }
            tokio::time::sleep(LEADER_WAIT / 30).await;
        }
    }

    async fn send(&self, member: &Member, request: Request) -> Sent {
        let channel = match self.channel(member) {
            Ok(c) => c,
            Err(e) => return Sent::Failed(e),
        };
        member.in_flight.fetch_add(1, Ordering::Relaxed);
        let _busy = InFlight(member);
        let leader_changed = leader_change(self.members.terms());
        let answer = tokio::select! {
            answer = until_cut(member, channel.oneshot(request)) => answer,
            status = leader_changed => Err(status),
        };
        match answer {
            Ok(Ok(response)) => match no_leader(&response) {
                Some(reason) => Sent::Refused(reason),
                // A linearizable read that met an election: asked again, it reads the new leader.
                None if leader_changed_answer(&response) => Sent::Interrupted(Ok(response)),
                None => Sent::Answered(response),
            },
            Ok(Err(e)) => match connect_error(&e) {
                Some(reason) => Sent::Refused(reason),
                // A read whose connection broke (its member killed) is asked again.
                None => Sent::Interrupted(Err(e.into())),
            },
            Err(cut) => Sent::Interrupted(Err(cut.into())),
        }
    }

    async fn stream(self, request: Request) -> Result<Response, BoxError> {
        let member = self.members.pick();
        let channel = self.channel(&member)?;
        // A lease keep-alive goes to the leader: its stream ends with the leader, as a request does.
        let keep_alive = request.uri().path() == STREAMS[1];
        let opened = tokio::select! {
            opened = until_cut(&member, channel.oneshot(request)) => opened,
            status = leader_change(self.members.terms()) => Err(status),
        };
        let response = match opened? {
            Ok(response) => response,
            Err(e) => {
                if let Some(reason) = connect_error(&e) {
                    self.members.refused(&member, &reason);
                }
                return Err(e.into());
            }
        };
        if let Some(reason) = no_leader(&response) {
            self.members.refused(&member, &reason);
        }
        let (parts, body) = response.into_parts();
        let (cuts, terms, authority) = (member.cuts(), self.members.terms(), member.authority.clone());
        let cut: Pin<Box<dyn Future<Output = tonic::Status> + Send>> = if keep_alive {
            Box::pin(async move {
                tokio::select! {
                    status = cut_of(cuts, authority) => status,
                    status = leader_change(terms) => status,
                }
            })
        } else {
            Box::pin(cut_of(cuts, authority))
        };
        let cut = CutBody { body, cut, done: false };
        Ok(Response::from_parts(parts, tonic::body::Body::new(cut)))
    }
}

/// Decrements a member's in-flight count when the request ends, however it ends.
struct InFlight<'a>(&'a Member);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `fut`, or the status saying `member` turned unhealthy first.
async fn until_cut<T>(member: &Member, fut: impl Future<Output = T>) -> Result<T, tonic::Status> {
    let cut = cut_of(member.cuts(), member.authority.clone());
    tokio::select! {
        out = fut => Ok(out),
        status = cut => Err(status),
    }
}

/// Resolves with an `Unavailable` status once the member is next cut.
async fn cut_of(mut cuts: watch::Receiver<u64>, authority: String) -> tonic::Status {
    cuts.borrow_and_update();
    if cuts.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
    tonic::Status::unavailable(format!("etcd member {authority} turned unhealthy before it answered"))
}

/// Resolves with an `Unavailable` status once a new leader is seen.
async fn leader_change(mut terms: watch::Receiver<u64>) -> tonic::Status {
    terms.borrow_and_update();
    if terms.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
    tonic::Status::unavailable("etcd elected a new leader before this request was answered")
}

/// "no leader" in a trailers-only answer: the member refused before doing anything.
fn no_leader(response: &Response) -> Option<String> {
    unavailable(response).filter(|m| m.contains("no leader")).map(str::to_owned)
}

/// The message of an `Unavailable` answer (a trailers-only response: its status in the headers).
fn unavailable(response: &Response) -> Option<&str> {
    let headers = response.headers();
    let status = headers.get("grpc-status").filter(|s| s.as_bytes() == b"14");
    status.map(|_| headers.get("grpc-message").and_then(|m| m.to_str().ok()).unwrap_or_default())
}

/// Whether etcd answered "leader changed" (`Unavailable`): the request met an election.
fn leader_changed_answer(response: &Response) -> bool {
    unavailable(response).is_some_and(|m| m.contains("leader changed"))
}

/// Whether a request only reads: a call in `READS`, or a transaction whose every operation, in
/// both branches and nested, is a range (a save found unchanged, a claim's read-back). `body`
/// is the request as framed by gRPC: a compression flag, a 4-byte length, the message.
fn only_reads(path: &str, body: &[u8]) -> bool {
    if READS.contains(&path) {
        return true;
    }
    let (Some(0), Some(message)) = (body.first(), body.get(5..)) else { return false };
    path == "/etcdserverpb.KV/Txn"
        && <etcd_client::proto::PbTxnRequest as prost::Message>::decode(message).is_ok_and(|t| txn_reads(&t))
}

fn txn_reads(txn: &etcd_client::proto::PbTxnRequest) -> bool {
    use etcd_client::proto::PbTxnOpRequest as Op;
    txn.success.iter().chain(&txn.failure).all(|op| match &op.request {
        Some(Op::RequestRange(_)) => true,
        Some(Op::RequestTxn(inner)) => txn_reads(inner),
        _ => false,
    })
}

/// A connection that could not be made: nothing reached the member.
fn connect_error(e: &tonic::transport::Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as K;
            if matches!(io.kind(), K::ConnectionRefused | K::HostUnreachable | K::NetworkUnreachable) {
                return Some(format!("connecting: {io}"));
            }
        }
        source = err.source();
    }
    None
}

/// A response stream that fails with `Unavailable` once its member turns unhealthy.
struct CutBody {
    body: tonic::body::Body,
    cut: Pin<Box<dyn Future<Output = tonic::Status> + Send>>,
    done: bool,
}

impl http_body::Body for CutBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, tonic::Status>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Poll::Ready(status) = self.cut.as_mut().poll(cx) {
            self.done = true;
            return Poll::Ready(Some(Err(status)));
        }
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.body.is_end_stream()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use etcd_client::proto::{PbTxnOpRequest as Op, PbTxnRequest, PbTxnRequestOp};

    /// A transaction as gRPC frames it on the wire.
    fn framed(success: Vec<Op>, failure: Vec<Op>) -> Vec<u8> {
        let ops = |ops: Vec<Op>| ops.into_iter().map(|op| PbTxnRequestOp { request: Some(op) }).collect();
        let txn = PbTxnRequest { compare: Vec::new(), success: ops(success), failure: ops(failure) };
        let message = prost::Message::encode_to_vec(&txn);
        let mut body = vec![0];
        body.extend(u32::try_from(message.len()).unwrap().to_be_bytes());
        body.extend(message);
        body
    }

    #[test]
    fn only_ranges_read_whatever_the_nesting() {
        const TXN: &str = "/etcdserverpb.KV/Txn";
        let range = || Op::RequestRange(Default::default());
        let nested = |ops: Vec<Op>| {
            Op::RequestTxn(PbTxnRequest {
                compare: Vec::new(),
                success: ops.into_iter().map(|op| PbTxnRequestOp { request: Some(op) }).collect(),
                failure: Vec::new(),
            })
        };
        assert!(only_reads(TXN, &framed(vec![range(), range()], vec![range()])));
        assert!(only_reads(TXN, &framed(vec![nested(vec![range()])], Vec::new())));
        assert!(!only_reads(TXN, &framed(vec![range()], vec![Op::RequestPut(Default::default())])));
        assert!(!only_reads(TXN, &framed(vec![nested(vec![Op::RequestDeleteRange(Default::default())])], Vec::new())));
        // A put is no read whatever it carries; a range call always is.
        assert!(!only_reads("/etcdserverpb.KV/Put", &framed(vec![range()], Vec::new())));
        assert!(only_reads("/etcdserverpb.KV/Range", b""));
        // Compressed or cut short: not known to read.
        let mut compressed = framed(vec![range()], Vec::new());
        compressed[0] = 1;
        assert!(!only_reads(TXN, &compressed));
        assert!(!only_reads(TXN, &[0, 0]));
    }
}
