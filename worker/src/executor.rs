//! The executor protocol (`--executor-listen`): remote executors, in any language, run handler
//! tasks without etcd or MongoDB credentials. Each connected executor gets a node of its own in
//! this process — `node::run` with the executor's id, capacity and handlers, its own session
//! lease and etcd connections, its runs handed to the executor over HTTP ([`remote`]) — so
//! claims, fencing, records, kills, timeouts, retries and failover are a worker's. An executor
//! that stops polling for longer than the session TTL is lost as a worker is lost: its node's
//! connections are severed and its tasks dropped (a crash of that node), its session expires,
//! and the survivors record its runs `lost` and rerun them from their checkpoints.
//!
//! Long polling, not a stream: each exchange is one short request any HTTP library makes, and
//! a poll doubles as the executor's heartbeat. The protocol is `docs/sdk.md`'s "Executors in
//! other languages"; `sdk/python/etcron_executor.py` is its reference client.

mod remote;
mod routes;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use etcron_common::store::MongoStore;

use crate::config::{Config, ExecutorGateway};

pub use remote::MAX_POLL_WAIT;

/// Most executors one worker serves at once.
pub const MAX_EXECUTORS: usize = 64;
/// Most handlers one executor registers.
pub const MAX_HANDLERS: usize = 64;

/// The executors this worker serves, by session.
#[derive(Clone)]
pub(crate) struct Gateway {
    host: Arc<Config>,
    gateway: ExecutorGateway,
    store: Option<MongoStore>,
    sessions: Arc<Mutex<HashMap<String, Arc<remote::Session>>>>,
}

/// Binds the configured address (`None` when the protocol is off).
///
/// # Errors
/// When the address cannot be bound, naming `executor_listen`.
pub async fn bind(host: &Config) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    let Some(gateway) = &host.executor else { return Ok(None) };
    let listener = tokio::net::TcpListener::bind(gateway.listen)
        .await
        .map_err(|e| anyhow::anyhow!("executor_listen: binding {}: {e}", gateway.listen))?;
    Ok(Some(listener))
}

/// Serves the executor protocol on `listener` until the process ends.
///
/// # Errors
/// When serving fails.
pub async fn serve(listener: tokio::net::TcpListener, host: Config, store: Option<MongoStore>) -> anyhow::Result<()> {
    let Some(gateway) = host.executor.clone() else { return Ok(()) };
    tracing::info!(addr = %listener.local_addr()?, "serving the executor protocol");
    let state = Gateway { host: Arc::new(host), gateway, store, sessions: Arc::default() };
    etcron_common::task::spawn(watchdog(state.clone()));
    axum::serve(listener, routes::router(state)).await?;
    Ok(())
}

impl Gateway {
    fn session(&self, id: &str) -> Option<Arc<remote::Session>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner).get(id).cloned()
    }

    fn remove(&self, id: &str) -> Option<Arc<remote::Session>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner).remove(id)
    }

    /// How long an executor may go without a request before it is lost: the session TTL.
    fn poll_within(&self) -> Duration {
        self.host.session_ttl
    }
}

/// Ends the sessions of executors that stopped asking: each is lost, as a crashed worker is.
async fn watchdog(state: Gateway) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        let silent: Vec<String> = {
            let sessions = state.sessions.lock().unwrap_or_else(PoisonError::into_inner);
            sessions.iter().filter(|(_, s)| s.silent_for() > state.poll_within()).map(|(id, _)| id.clone()).collect()
        };
        for id in silent {
            if let Some(session) = state.remove(&id) {
                crate::metrics::METRICS.executors_lost.inc();
                tracing::warn!(executor = %session.executor, silent_ms = session.silent_for().as_millis() as u64, "remote executor lost: no request within the session TTL; its node ends as a crashed worker does");
                session.crash();
            }
        }
    }
}
