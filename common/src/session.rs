//! An etcd session: one lease kept alive in the background, and a signal when it is gone.
//!
//! Like etcd's `concurrency.Session`, the session is separate from what uses it: the worker
//! registers, claims and marks running executions under `lease_id()`, and stops all of that
//! when `done()` resolves. The session counts itself lost as soon as a full TTL has passed since
//! the last keep-alive request that the server acknowledged was *sent*; the server cannot expire
//! the lease earlier than that, so a paused or partitioned worker learns it lost the lease no
//! later than the rest of the cluster does.
//!
//! Give the session a client of its own (`etcd::connect` again: its own gRPC connection), not
//! the one the rest of the process uses: its grant, keep-alives and revoke never take an
//! admission slot (`common::admission`), and on their own connection they do not queue behind
//! a storm of claims either, so no amount of other traffic delays them.

use std::time::Duration;

use etcd_client::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::etcd::EtcdError;

/// Shortest accepted TTL.
pub const MIN_TTL: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session TTL must be at least {}s", MIN_TTL.as_secs())]
    TtlTooShort,
    #[error("granting the session lease failed")]
    Grant(#[source] etcd_client::Error),
    #[error("granting the session lease timed out")]
    GrantTimeout,
}

pub struct Session {
    lease_id: i64,
    ttl: Duration,
    alive: watch::Receiver<bool>,
    /// Until when the lease certainly lives (the send time of the last acknowledged keep-alive
    /// plus the TTL), on this process's monotonic clock.
    deadline: watch::Receiver<Instant>,
    stop: watch::Sender<bool>,
    client: Client,
    keeper: JoinHandle<()>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("lease_id", &self.lease_id).field("ttl", &self.ttl).finish()
    }
}

impl Session {
    /// Grants a lease of `ttl` (whole seconds) and starts keeping it alive. `client` should be
    /// the session's own (see the module's documentation).
    pub async fn grant(client: &Client, ttl: Duration) -> Result<Self, SessionError> {
        if ttl < MIN_TTL {
            return Err(SessionError::TtlTooShort);
        }
        let ttl_secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        let requested = Instant::now();
        let mut leases = client.lease_client();
        let grant =
            crate::etcd::request_exempt("lease_grant", crate::etcd::REQUEST_TIMEOUT, leases.grant(ttl_secs, None))
                .await
                .map_err(|e| match e {
                    EtcdError::Timeout => SessionError::GrantTimeout,
                    EtcdError::Failed(e) => SessionError::Grant(e),
                })?;
        let lease_id = grant.id();
        let (alive_tx, alive) = watch::channel(true);
        let (deadline_tx, deadline) = watch::channel(requested + ttl);
        let (stop, stop_rx) = watch::channel(false);
        let signals = Signals { alive: alive_tx, deadline: deadline_tx };
        let keeper = crate::task::spawn(keep_alive(client.clone(), lease_id, ttl, requested, signals, stop_rx));
        Ok(Self { lease_id, ttl, alive, deadline, stop, client: client.clone(), keeper })
    }

    #[must_use]
    pub fn lease_id(&self) -> i64 {
        self.lease_id
    }

    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    #[must_use]
    pub fn is_alive(&self) -> bool {
        *self.alive.borrow()
    }

    /// Until when the lease certainly lives, updated with each acknowledged keep-alive.
    #[must_use]
    pub fn deadlines(&self) -> watch::Receiver<Instant> {
        self.deadline.clone()
    }

    /// Resolves once the lease is lost (expired, revoked, or not renewable within its TTL).
    pub async fn done(&self) {
        let mut alive = self.alive.clone();
        // An error means the keeper is gone, which only happens once the lease is lost or closed.
        let _ = alive.wait_for(|a| !*a).await;
    }

    /// Stops the keep-alive and revokes the lease, deleting every key attached to it.
    pub async fn close(self) {
        let _ = self.stop.send(true);
        let _ = self.keeper.await;
        let mut leases = self.client.lease_client();
        if let Err(e) =
            crate::etcd::request_exempt("lease_revoke", crate::etcd::REQUEST_TIMEOUT, leases.revoke(self.lease_id))
                .await
                .map_err(|e| match e {
                    EtcdError::Timeout => etcd_client::Error::LeaseKeepAliveError("revoke timed out".to_owned()),
                    EtcdError::Failed(e) => e,
                })
        {
            tracing::warn!(lease_id = self.lease_id, error = %e, "revoking session lease failed; it will expire by itself");
        }
    }
}

/// What the keep-alive tells the session's holder.
struct Signals {
    alive: watch::Sender<bool>,
    deadline: watch::Sender<Instant>,
}

async fn keep_alive(
    client: Client,
    lease_id: i64,
    ttl: Duration,
    granted_at: Instant,
    signals: Signals,
    mut stop: watch::Receiver<bool>,
) {
    let interval = ttl / 3;
    // After a call that failed at once: short, since a stream ended by a change of etcd leader is
    // opened again on the new one while the lease's last renewal still counts.
    let pause = interval / 10;
    // The lease certainly lives until `acked_sent_at + ttl`.
    let mut acked_sent_at = granted_at;
    let mut stream = None;
    let mut next = Instant::now() + interval;
    loop {
        let deadline = acked_sent_at + ttl;
        if Instant::now() >= deadline {
            tracing::error!(lease_id, "session lease lost: not renewed within its TTL");
            break;
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep_until(next.min(deadline)) => {}
        }
        if Instant::now() >= deadline {
            continue;
        }
        let per_call = interval.min(deadline.saturating_duration_since(Instant::now())).max(Duration::from_millis(100));
        if stream.is_none() {
            let mut leases = client.lease_client();
            let opened_at = Instant::now();
            match crate::etcd::request_exempt("keep_alive_stream", per_call, leases.keep_alive(lease_id)).await {
                Ok(pair) => stream = Some(pair),
                Err(EtcdError::Failed(e)) => {
                    tracing::warn!(lease_id, error = %e, "session keep-alive stream failed; retrying");
                    next = retry_at(opened_at, pause);
                    continue;
                }
                Err(EtcdError::Timeout) => {
                    tracing::warn!(lease_id, "session keep-alive stream timed out; retrying");
                    next = Instant::now();
                    continue;
                }
            }
        }
        let Some((keeper, responses)) = stream.as_mut() else {
            continue;
        };
        let sent_at = Instant::now();
        let result = crate::etcd::request_exempt("keep_alive", per_call, async {
            keeper.keep_alive().await?;
            responses.message().await
        })
        .await;
        match result {
            Ok(Some(resp)) if resp.ttl() > 0 => {
                acked_sent_at = sent_at;
                let _ = signals.deadline.send(sent_at + ttl);
                next = sent_at + interval;
            }
            Ok(Some(_)) => {
                tracing::error!(lease_id, "session lease lost: etcd says it expired");
                break;
            }
            Ok(None) | Err(EtcdError::Failed(_) | EtcdError::Timeout) => {
                tracing::warn!(lease_id, "session keep-alive failed; retrying on a new stream");
                stream = None;
                next = retry_at(sent_at, pause);
            }
        }
    }
    let _ = signals.alive.send(false);
}

/// When to try again after a keep-alive call that failed. A call that failed at once (etcd
/// refusing, no route) waits `pause`, so a persistent error does not spin. A call that hung
/// first and then failed most likely outlived a stall of etcd (the connection's HTTP/2
/// keep-alive gives up on a connection silent for 8 s, often just as etcd comes back): the
/// next try goes at once, since the moments after a stall may be all the lease gets before the
/// next one (seen in CI: a renewal lost this way, then a second stall, and the lease expired).
fn retry_at(started: Instant, pause: Duration) -> Instant {
    let now = Instant::now();
    if now.duration_since(started) >= Duration::from_secs(1) {
        now
    } else {
        now + pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keep_alive_that_hung_is_retried_at_once_one_that_failed_at_once_after_a_pause() {
        let pause = Duration::from_millis(500);
        let hung = Instant::now().checked_sub(Duration::from_secs(3)).unwrap_or_else(Instant::now);
        assert!(retry_at(hung, pause) <= Instant::now());
        let quick = Instant::now();
        assert!(retry_at(quick, pause) >= quick + Duration::from_millis(400));
    }
}
