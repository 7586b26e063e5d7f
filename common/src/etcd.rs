//! Connecting to etcd: endpoints, timeouts and the error classification used everywhere.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

/// Per-request deadline for etcd calls.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How to reach etcd.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// `host:port` or `http://host:port`.
    pub endpoints: Vec<String>,
    pub user: Option<(String, String)>,
}

/// Builds a client for all endpoints; the client balances over them and retries a failed
/// endpoint on the next call. Connection is lazy: this succeeds while etcd is down.
pub async fn connect(config: &EtcdConfig) -> Result<Client, etcd_client::Error> {
    let endpoints: Vec<String> =
        config.endpoints.iter().map(|e| if e.contains("://") { e.clone() } else { format!("http://{e}") }).collect();
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        .with_timeout(REQUEST_TIMEOUT)
        .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3))
        .with_keep_alive_while_idle(true);
    if let Some((user, password)) = &config.user {
        options = options.with_user(user.clone(), password.clone());
    }
    Client::connect(endpoints, Some(options)).await
}

/// Parses `a:2379,b:2379` into endpoints.
#[must_use]
pub fn parse_endpoints(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}
