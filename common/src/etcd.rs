//! Connecting to etcd: endpoints, timeouts and the error classification used everywhere.

use std::time::Duration;

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

/// Builds a client for all endpoints; the client balances over them and retries a failed
/// endpoint on the next call. Connection is lazy: this succeeds while etcd is down.
pub async fn connect(config: &EtcdConfig) -> Result<Client, etcd_client::Error> {
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
        .with_keep_alive_while_idle(true);
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
    Client::connect(endpoints, Some(options)).await
}

/// Parses `a:2379,b:2379` into endpoints.
#[must_use]
pub fn parse_endpoints(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

/// Runs one etcd request under the standard deadline ([`REQUEST_TIMEOUT`]) and records it in
/// the shared metrics under `op`: its latency, and whether it failed or timed out. The result is
/// `tokio::time::timeout`'s.
///
/// # Errors
/// `Elapsed` when etcd did not answer within the deadline.
pub async fn request<T>(
    op: &'static str,
    fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<Result<T, etcd_client::Error>, tokio::time::error::Elapsed> {
    request_within(op, REQUEST_TIMEOUT, fut).await
}

/// [`request`] with another deadline.
///
/// # Errors
/// `Elapsed` when etcd did not answer within `limit`.
pub async fn request_within<T>(
    op: &'static str,
    limit: Duration,
    fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<Result<T, etcd_client::Error>, tokio::time::error::Elapsed> {
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(limit, fut).await;
    let m = &*crate::metrics::ETCD;
    m.seconds.with_label_values(&[op]).observe(started.elapsed().as_secs_f64());
    match &result {
        Ok(Ok(_)) => {}
        Ok(Err(_)) => m.errors.with_label_values(&[op, "error"]).inc(),
        Err(_) => m.errors.with_label_values(&[op, "timeout"]).inc(),
    }
    result
}
