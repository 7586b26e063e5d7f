//! Connecting to etcd: endpoints, timeouts and the error classification used everywhere.
//! Every client routes its requests to healthy members ([`route`], [`members`]).

pub mod list;
mod members;
mod route;

use std::time::Duration;

pub use members::{health as member_health, MemberHealth};

use etcd_client::{Client, ConnectOptions};

/// Per-request deadline for etcd calls.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How to reach etcd.
#[derive(Clone, Default)]
pub struct EtcdConfig {
    /// `host:port`, `http://host:port` or `https://host:port`.
    pub endpoints: Vec<String>,
    /// etcd user name and password (etcd's own auth).
    pub user: Option<(String, String)>,
    /// TLS to etcd; endpoints without a scheme then use https.
    pub tls: Option<EtcdTls>,
}

/// PEM contents (read at start-up) for TLS to etcd.
#[derive(Clone, Default)]
pub struct EtcdTls {
    /// CA that signed etcd's certificate; the system roots when absent.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate and key, for etcd's `--client-cert-auth`.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password never reaches a log line.
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls.as_ref().map(|t| (t.ca_pem.is_some(), t.identity.is_some())))
            .finish()
    }
}

/// Builds a client for all endpoints. Its requests carry etcd's require-leader metadata and go
/// to a member the process deems healthy (`members`), moving off one that has no leader or
/// does not answer; see `route` for what is sent again. Connection is lazy: this succeeds
/// while etcd is down.
pub async fn connect(config: &EtcdConfig) -> Result<Client, etcd_client::Error> {
    connect_severable(config).await.map(|(client, _)| client)
}

/// Cuts a client off etcd for good: every request it sends after [`Severance::sever`] fails
/// before leaving the process (streams already open end at their next message). What a crash
/// does to a process's connections, for one part of a process (a remote executor's node).
#[derive(Debug, Clone, Default)]
pub struct Severance(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Severance {
    pub fn sever(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// [`connect`], with the switch that severs the client.
///
/// # Errors
/// As [`connect`].
pub async fn connect_severable(config: &EtcdConfig) -> Result<(Client, Severance), etcd_client::Error> {
    let severance = Severance::default();
    let scheme = if config.tls.is_some() { "https" } else { "http" };
    let endpoints: Vec<String> = config
        .endpoints
        .iter()
        .map(|e| if e.contains("://") { e.clone() } else { format!("{scheme}://{e}") })
        .collect();
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        .with_timeout(REQUEST_TIMEOUT)
        .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3))
        .with_keep_alive_while_idle(true)
        .with_require_leader(true);
    if let Some((user, password)) = &config.user {
        options = options.with_user(user.clone(), password.clone());
    }
    if let Some(tls) = &config.tls {
        let mut t = etcd_client::TlsOptions::new();
        match &tls.ca_pem {
            Some(ca) => t = t.ca_certificate(etcd_client::Certificate::from_pem(ca)),
            None => t = t.with_enabled_roots(),
        }
        if let Some((cert, key)) = &tls.identity {
            t = t.identity(etcd_client::Identity::from_pem(cert, key));
        }
        options = options.with_tls(t);
    }
    let members = members::of(&endpoints, &options);
    let routed = route::Routed(members, severance.0.clone());
    Ok((Client::connect_with_balanced_channel(endpoints, Some(options), routed).await?, severance))
}

/// Parses `a:2379,b:2379` into endpoints.
#[must_use]
pub fn parse_endpoints(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

/// True when etcd refused a write because its database reached its quota (the `NOSPACE`
/// alarm): every write fails until an operator compacts, defragments and disarms it
/// (docs/operations.md, "etcd storage").
#[must_use]
pub fn is_nospace(e: &etcd_client::Error) -> bool {
    e.to_string().contains("database space exceeded")
}

/// Why an etcd request gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// etcd did not answer within the request's deadline, or no admission slot came free in time:
    /// the request's outcome is unknown.
    #[error("no answer from etcd within the deadline")]
    Timeout,
    /// etcd (or the connection to it) answered with an error.
    #[error(transparent)]
    Failed(#[from] etcd_client::Error),
}

/// Runs one etcd request under the standard deadline ([`REQUEST_TIMEOUT`]) and records it in
/// the shared metrics under `op`: its latency, and whether it failed or timed out. The request
/// first waits for a slot of the admission limit (`admission::limiter()`), within the
/// same deadline.
///
/// # Errors
/// [`EtcdError::Timeout`] when etcd did not answer within the deadline, or no slot came free in
/// time; [`EtcdError::Failed`] when etcd answered with an error.
pub async fn request<T>(
    op: &'static str,
    fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, EtcdError> {
    request_within(op, REQUEST_TIMEOUT, fut).await
}

/// [`request`] with another deadline.
///
/// # Errors
/// [`EtcdError::Timeout`] when etcd did not answer within `limit`, or no slot came free in
/// time; [`EtcdError::Failed`] when etcd answered with an error.
pub async fn request_within<T>(
    op: &'static str,
    limit: Duration,
    fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, EtcdError> {
    let started = tokio::time::Instant::now();
    let deadline = started + limit;
    // `fut` is not polled before it has a slot: etcd-client's calls send nothing until then.
    let result = match crate::admission::limiter().admit_by(deadline).await {
        Ok(permit) => {
            let result = flatten(tokio::time::timeout_at(deadline, fut).await);
            permit.finish(outcome(&result));
            result
        }
        Err(_elapsed) => Err(EtcdError::Timeout),
    };
    record(op, started, &result);
    result
}

/// [`request_within`] without an admission slot, for the session's lease grant, keep-alives
/// and revoke only (on the session's own connection): they must never wait behind other
/// traffic, or a burst of claims could expire the session that the claims depend on.
///
/// # Errors
/// [`EtcdError::Timeout`] when etcd did not answer within `limit`; [`EtcdError::Failed`] when
/// etcd answered with an error.
pub(crate) async fn request_exempt<T>(
    op: &'static str,
    limit: Duration,
    fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, EtcdError> {
    let started = tokio::time::Instant::now();
    let result = flatten(tokio::time::timeout(limit, fut).await);
    record(op, started, &result);
    result
}

/// `tokio::time::timeout`'s result as an [`EtcdError`].
fn flatten<T>(result: Result<Result<T, etcd_client::Error>, tokio::time::error::Elapsed>) -> Result<T, EtcdError> {
    match result {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(EtcdError::Failed(e)),
        Err(_elapsed) => Err(EtcdError::Timeout),
    }
}

fn record<T>(op: &'static str, started: tokio::time::Instant, result: &Result<T, EtcdError>) {
    let m = &*crate::metrics::ETCD;
    m.seconds.with_label_values(&[op]).observe(started.elapsed().as_secs_f64());
    match result {
        Ok(_) => {}
        Err(EtcdError::Failed(e)) if is_nospace(e) => m.errors.with_label_values(&[op, "nospace"]).inc(),
        Err(EtcdError::Failed(_)) => m.errors.with_label_values(&[op, "error"]).inc(),
        Err(EtcdError::Timeout) => m.errors.with_label_values(&[op, "timeout"]).inc(),
    }
}

/// What a request's end says about etcd's load, for the admission limit.
fn outcome<T>(result: &Result<T, EtcdError>) -> crate::admission::Outcome {
    use crate::admission::{Outcome, Overload};
    match result {
        Ok(_) => Outcome::Answered,
        Err(EtcdError::Failed(e)) => overload(e).map_or(Outcome::Failed, Outcome::Overloaded),
        Err(EtcdError::Timeout) => Outcome::Overloaded(Overload::Timeout),
    }
}

/// Whether an error says etcd is overloaded, and how.
///
/// `TooManyRequests`: "etcdserver: too many requests" (`ResourceExhausted`, sent when etcd's
/// applied index lags the committed one by more than 5 000 entries) or another
/// `ResourceExhausted` (a gRPC proxy shedding load), except the two that are not about load:
/// "database space exceeded" (a full backend: a quota to raise) and a message larger than the
/// server accepts.
///
/// `Timeout`: the same deadline seen by another layer: the client's own per-call timeout
/// (tonic's "Timeout expired", which fires in the same millisecond as the request's deadline
/// and usually first), `DeadlineExceeded` from etcd, "etcdserver: request timed out" (a
/// proposal not applied in time), or an HTTP/2 ping that etcd did not answer within the
/// connection's keep-alive timeout (every call on the connection then fails with it).
#[must_use]
pub fn overload(e: &etcd_client::Error) -> Option<crate::admission::Overload> {
    use crate::admission::Overload;
    use tonic::Code;
    let etcd_client::Error::GRpcStatus(status) = e else { return None };
    let message = status.message();
    if status.code() == Code::Unavailable && ping_timed_out(status) {
        return Some(Overload::Timeout);
    }
    match status.code() {
        _ if message.contains("too many requests") => Some(Overload::TooManyRequests),
        Code::ResourceExhausted if !message.contains("space exceeded") && !message.contains("larger than max") => {
            Some(Overload::TooManyRequests)
        }
        Code::DeadlineExceeded => Some(Overload::Timeout),
        Code::Cancelled if message == "Timeout expired" => Some(Overload::Timeout),
        _ if message.contains("etcdserver: request timed out") => Some(Overload::Timeout),
        _ => None,
    }
}

/// Whether an answer was larger than a side accepts: this client's decoding limit (a range of
/// many large values) or the server's "message larger than max". A smaller request may pass.
#[must_use]
pub fn too_large(e: &etcd_client::Error) -> bool {
    let etcd_client::Error::GRpcStatus(status) = e else { return false };
    let message = status.message();
    (status.code() == tonic::Code::OutOfRange && message.contains("message length too large"))
        || message.contains("larger than max")
}

/// Whether a status comes from hyper's HTTP/2 keep-alive giving up on the connection.
fn ping_timed_out(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        if e.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_timeout) {
            return true;
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::Overload;

    #[test]
    fn overload_is_told_from_etcd_errors() {
        let status = |code, message: &str| etcd_client::Error::GRpcStatus(tonic::Status::new(code, message));
        let too_many = Some(Overload::TooManyRequests);
        let timeout = Some(Overload::Timeout);
        assert_eq!(overload(&status(tonic::Code::ResourceExhausted, "etcdserver: too many requests")), too_many);
        assert_eq!(overload(&status(tonic::Code::ResourceExhausted, "rate limited")), too_many);
        assert_eq!(overload(&status(tonic::Code::Unavailable, "etcdserver: too many requests")), too_many);
        assert_eq!(overload(&status(tonic::Code::DeadlineExceeded, "context deadline exceeded")), timeout);
        assert_eq!(overload(&status(tonic::Code::Unavailable, "etcdserver: request timed out")), timeout);
        assert_eq!(overload(&status(tonic::Code::Cancelled, "Timeout expired")), timeout);
        assert_eq!(
            overload(&status(tonic::Code::ResourceExhausted, "etcdserver: mvcc: database space exceeded")),
            None
        );
        assert_eq!(
            overload(&status(tonic::Code::ResourceExhausted, "grpc: received message larger than max (9 vs. 4)")),
            None
        );
        assert_eq!(overload(&status(tonic::Code::Unavailable, "etcdserver: leader changed")), None);
        assert!(is_nospace(&status(tonic::Code::ResourceExhausted, "etcdserver: mvcc: database space exceeded")));
        assert!(!is_nospace(&status(tonic::Code::ResourceExhausted, "etcdserver: too many requests")));
        assert_eq!(overload(&status(tonic::Code::Cancelled, "operation was canceled")), None);
        assert_eq!(overload(&etcd_client::Error::WatchError("listing timed out".to_owned())), None);
        let decoding = "Error, decoded message length too large: found 5000000 bytes, the limit is: 4194304 bytes";
        assert!(too_large(&status(tonic::Code::OutOfRange, decoding)));
        assert!(too_large(&status(tonic::Code::ResourceExhausted, "grpc: received message larger than max (9 vs. 4)")));
        assert!(!too_large(&status(
            tonic::Code::OutOfRange,
            "etcdserver: mvcc: required revision is a future revision"
        )));
    }

    #[tokio::test]
    async fn a_timeout_is_told_from_an_answered_error() {
        let answered = request_exempt("test_answered", Duration::ZERO, async { Ok::<_, etcd_client::Error>(7) }).await;
        assert_eq!(answered.ok(), Some(7));
        let failed = request_exempt("test_failed", Duration::ZERO, async {
            Err::<(), _>(etcd_client::Error::WatchError("refused".to_owned()))
        })
        .await
        .unwrap_err();
        assert!(
            matches!(&failed, EtcdError::Failed(etcd_client::Error::WatchError(m)) if m == "refused"),
            "{failed:?}"
        );
        assert_eq!(failed.to_string(), etcd_client::Error::WatchError("refused".to_owned()).to_string());
        let timed_out = request_exempt("test_timed_out", Duration::ZERO, std::future::pending::<Result<(), _>>())
            .await
            .unwrap_err();
        assert!(matches!(timed_out, EtcdError::Timeout), "{timed_out:?}");
    }
}
