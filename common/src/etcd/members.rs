//! The health of each etcd endpoint a process was given, as its own probes and its own traffic
//! show it: the one place that decides which members requests go to ([`super::route`]).
//!
//! Every [`PROBE_EVERY`] each endpoint gets a linearizable read of the key `health` (what
//! `etcdctl endpoint health` reads) with etcd's require-leader metadata, on a connection of its
//! own. A member is unhealthy when it refuses (no leader, connection refused, any error but
//! "permission denied", which only an answering member sends) or when it is still silent
//! [`SLOW`] into the round and `SLOW / 2` after another member answered. A round in which no member answers
//! judges nobody: a stalled cluster is not a stalled member. An answer makes a member healthy
//! again. A request that meets "no leader" or a connection error starts a round at once.
//!
//! A member turning unhealthy ends what is in flight on it (`cut`): streams (watches,
//! keep-alives) fail and their owners reopen them on a healthy member, and requests waiting for
//! an answer fail as unknown (their callers read back, as after a timeout). A new leader (a
//! probe answering in a higher raft term) ends every request still waiting for its answer the
//! same way: a follower forwards writes to the leader, and those forwarded to the old one are
//! lost with it, so they would otherwise wait out their whole deadline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// How often each member is probed.
pub const PROBE_EVERY: Duration = Duration::from_millis(500);
/// A member still silent this long into a round in which another member answered is unhealthy.
pub const SLOW: Duration = Duration::from_millis(500);
/// A probe's own deadline.
const PROBE_LIMIT: Duration = Duration::from_secs(2);

/// What a process knows of one member.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MemberHealth {
    /// `host:port`.
    pub endpoint: String,
    pub healthy: bool,
    /// Why it is unhealthy (absent while healthy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Milliseconds since the state last changed.
    pub for_ms: u64,
}

pub(super) struct Member {
    /// `host:port`, as requests and probes address it.
    pub(super) authority: String,
    url: String,
    state: Mutex<(bool, Option<String>, Instant)>,
    /// Bumped each time the member turns unhealthy: what is in flight on it ends.
    cut: watch::Sender<u64>,
    /// Unary requests in flight on it.
    pub(super) in_flight: AtomicUsize,
}

impl Member {
    pub(super) fn healthy(&self) -> bool {
        self.state.lock().map(|s| s.0).unwrap_or(true)
    }

    pub(super) fn cuts(&self) -> watch::Receiver<u64> {
        self.cut.subscribe()
    }
}

/// The members of one endpoint list and their prober.
pub(super) struct Members {
    pub(super) list: Vec<Arc<Member>>,
    wake: Notify,
    next: AtomicUsize,
    /// The highest raft term a probe's answer carried; bumped (and what waits for an answer
    /// failed) when a new leader is seen.
    term: watch::Sender<u64>,
}

/// One `Members` per endpoint list in the process: the session's client and the rest share it.
static REGISTRY: LazyLock<Mutex<HashMap<Vec<String>, Arc<Members>>>> = LazyLock::new(Mutex::default);

/// The members of `urls` (`scheme://host:port`), probed from the first call on.
pub(super) fn of(urls: &[String], options: &ConnectOptions) -> Arc<Members> {
    let mut registry = REGISTRY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(m) = registry.get(urls) {
        return m.clone();
    }
    let now = Instant::now();
    let list = urls
        .iter()
        .map(|url| {
            let authority = url.split_once("://").map_or(url.as_str(), |(_, a)| a).trim_end_matches('/').to_owned();
            crate::metrics::ETCD.member_healthy.with_label_values(&[&authority]).set(1);
            Arc::new(Member {
                authority,
                url: url.clone(),
                state: Mutex::new((true, None, now)),
                cut: watch::channel(0).0,
                in_flight: AtomicUsize::new(0),
            })
        })
        .collect();
    let members = Arc::new(Members { list, wake: Notify::new(), next: AtomicUsize::new(0), term: watch::channel(0).0 });
    if urls.len() > 1 {
        crate::task::spawn(probe(members.clone(), options.clone()));
    }
    registry.insert(urls.to_vec(), members.clone());
    members
}

/// Every member of every endpoint list this process connected to.
#[must_use]
pub fn health() -> Vec<MemberHealth> {
    let registry = REGISTRY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut out: Vec<MemberHealth> = Vec::new();
    for m in registry.values().flat_map(|ms| ms.list.iter()) {
        if out.iter().any(|h| h.endpoint == m.authority) {
            continue;
        }
        let (healthy, reason, since) = m.state.lock().map(|s| s.clone()).unwrap_or((true, None, Instant::now()));
        let for_ms = u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX);
        out.push(MemberHealth { endpoint: m.authority.clone(), healthy, reason, for_ms });
    }
    out.sort_by(|a, b| a.endpoint.cmp(&b.endpoint));
    out
}

impl Members {
    /// The member a request goes to: a healthy one with the fewest requests in flight (turns
    /// taken among equals), or any one in turn when none is healthy.
    pub(super) fn pick(&self) -> Arc<Member> {
        let n = self.list.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let healthy = (0..n).map(|k| &self.list[(start + k) % n]).filter(|m| m.healthy());
        healthy.min_by_key(|m| m.in_flight.load(Ordering::Relaxed)).unwrap_or_else(|| &self.list[start % n]).clone()
    }

    /// Changes of leader: a request waiting for its answer when a new leader is seen most likely
    /// went to the old one, through whichever member, and is lost with it.
    pub(super) fn terms(&self) -> watch::Receiver<u64> {
        self.term.subscribe()
    }

    /// A probe answered in `term`: a higher term than any seen before is a new leader.
    /// The first term seen is the leader the process found, not a change.
    fn saw_term(&self, term: u64) {
        let changed = self.term.send_if_modified(|known| {
            if term <= *known {
                return false;
            }
            let first = *known == 0;
            *known = term;
            !first
        });
        if changed {
            tracing::info!(term, "etcd has a new leader: requests that were waiting on the old one end as unknown");
        }
    }

    /// What a request saw of `member`: "no leader" or a connection error marks it unhealthy
    /// at once and starts a probe round.
    pub(super) fn refused(&self, member: &Member, reason: &str) {
        if self.list.len() > 1 {
            self.mark(member, Err(reason.to_owned()));
            self.wake.notify_one();
        }
    }

    fn mark(&self, member: &Member, verdict: Result<(), String>) {
        let healthy = verdict.is_ok();
        // The last healthy member is never taken away: with none left, nobody is judged.
        if !healthy && self.list.iter().filter(|m| m.healthy() && m.authority != member.authority).count() == 0 {
            return;
        }
        let Ok(mut state) = member.state.lock() else { return };
        if state.0 == healthy {
            return;
        }
        *state = (healthy, verdict.err(), Instant::now());
        let metrics = &*crate::metrics::ETCD;
        metrics.member_healthy.with_label_values(&[&member.authority]).set(i64::from(healthy));
        if healthy {
            tracing::info!(endpoint = %member.authority, "etcd member healthy again: requests go to it");
        } else {
            let reason = state.1.clone().unwrap_or_default();
            tracing::warn!(endpoint = %member.authority, %reason, "etcd member unhealthy: requests and streams move to the others");
            metrics.member_failovers.with_label_values(&[&member.authority]).inc();
            member.cut.send_modify(|c| *c += 1);
        }
    }
}

/// Probes every member until the process ends.
async fn probe(members: Arc<Members>, options: ConnectOptions) {
    let options = options.with_require_leader(true).with_timeout(PROBE_LIMIT);
    let mut clients: Vec<Option<Client>> = vec![None; members.list.len()];
    loop {
        let began = Instant::now();
        round(&members, &options, &mut clients).await;
        tokio::select! {
            () = tokio::time::sleep_until(began + PROBE_EVERY) => {}
            () = members.wake.notified() => {}
        }
    }
}

/// One round: every member probed at once, judged as the module says.
async fn round(members: &Members, options: &ConnectOptions, clients: &mut [Option<Client>]) {
    for (slot, m) in clients.iter_mut().zip(&members.list) {
        if slot.is_none() {
            // Lazy without etcd's auth; with it, this authenticates, and a failure is a verdict.
            match Client::connect([m.url.as_str()], Some(options.clone())).await {
                Ok(c) => *slot = Some(c),
                Err(e) => members.mark(m, Err(format!("connecting: {e}"))),
            }
        }
    }
    let mut probes: FuturesUnordered<_> = clients
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Some((i, c.clone()?)))
        .map(|(i, mut c)| async move {
            let result = tokio::time::timeout(PROBE_LIMIT, c.get("health", None)).await;
            (i, result)
        })
        .collect();
    let began = Instant::now();
    let mut answered = vec![false; members.list.len()];
    // Set by the first healthy answer: when the silent are judged.
    let mut judge_at: Option<Instant> = None;
    let mut judged = false;
    loop {
        let judging = judge_at.unwrap_or(began);
        tokio::select! {
            next = probes.next() => {
                let Some((i, result)) = next else { break };
                answered[i] = true;
                let member = &members.list[i];
                if let Ok(Ok(answer)) = &result {
                    members.saw_term(answer.header().map_or(0, etcd_client::ResponseHeader::raft_term));
                }
                match result.map(|r| r.map_err(|e| verdict(&e))) {
                    Ok(Ok(_) | Err(Verdict::Answered)) => members.mark(member, Ok(())),
                    Ok(Err(Verdict::Refused(why))) => members.mark(member, Err(why)),
                    Ok(Err(Verdict::Transient)) => {}
                    Err(_) if judge_at.is_some() => members.mark(member, Err(format!("no answer within {PROBE_LIMIT:?}"))),
                    Err(_) => {}
                }
                if judge_at.is_none() && member.healthy() {
                    judge_at = Some((began + SLOW).max(Instant::now() + SLOW / 2));
                }
            }
            () = tokio::time::sleep_until(judging), if judge_at.is_some() && !judged => {
                judged = true;
                for (i, member) in members.list.iter().enumerate() {
                    if !answered[i] {
                        members.mark(member, Err(format!("no answer {SLOW:?} into a probe that another member answered")));
                    }
                }
            }
        }
    }
}

/// What a probe's error says about its member.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// It answered ("permission denied" on the probe key, or another refusal of the request
    /// itself): it has a leader and serves.
    Answered,
    /// It cannot serve: no leader, or no connection.
    Refused(String),
    /// A leader change, a proposal timeout, an overload: the whole cluster's, no verdict.
    Transient,
}

fn verdict(e: &etcd_client::Error) -> Verdict {
    let text = e.to_string();
    if text.contains("no leader") {
        return Verdict::Refused(text);
    }
    let etcd_client::Error::GRpcStatus(status) = e else { return Verdict::Refused(text) };
    let message = status.message();
    let transient = ["leader changed", "request timed out", "too many requests", "Timeout expired"];
    if transient.iter().any(|t| message.contains(t)) || status.code() == tonic::Code::DeadlineExceeded {
        Verdict::Transient
    } else if status.code() == tonic::Code::Unavailable {
        // A transport error: the connection could not be made or was lost.
        Verdict::Refused(text)
    } else {
        Verdict::Answered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> Members {
        let now = Instant::now();
        Members {
            list: (0..n)
                .map(|i| {
                    Arc::new(Member {
                        authority: format!("m{i}:2379"),
                        url: format!("http://m{i}:2379"),
                        state: Mutex::new((true, None, now)),
                        cut: watch::channel(0).0,
                        in_flight: AtomicUsize::new(0),
                    })
                })
                .collect(),
            wake: Notify::new(),
            next: AtomicUsize::new(0),
            term: watch::channel(0).0,
        }
    }

    #[test]
    fn requests_avoid_an_unhealthy_member_and_its_streams_are_cut() {
        let ms = members(3);
        let cuts = ms.list[1].cuts();
        ms.refused(&ms.list[1], "etcdserver: no leader");
        assert!(!ms.list[1].healthy());
        assert_eq!(*cuts.borrow(), 1, "what was in flight on it ends");
        for _ in 0..20 {
            assert_ne!(ms.pick().authority, "m1:2379");
        }
        ms.mark(&ms.list[1], Ok(()));
        assert!((0..20).any(|_| ms.pick().authority == "m1:2379"), "healthy again, it takes requests");
    }

    #[test]
    fn a_probe_error_judges_its_member_only_when_it_says_the_member_cannot_serve() {
        let status = |code, message: &str| etcd_client::Error::GRpcStatus(tonic::Status::new(code, message));
        assert!(matches!(verdict(&status(tonic::Code::Unavailable, "etcdserver: no leader")), Verdict::Refused(_)));
        assert!(matches!(verdict(&status(tonic::Code::Unavailable, "tcp connect error")), Verdict::Refused(_)));
        assert_eq!(verdict(&status(tonic::Code::Unavailable, "etcdserver: leader changed")), Verdict::Transient);
        assert_eq!(verdict(&status(tonic::Code::Unavailable, "etcdserver: request timed out")), Verdict::Transient);
        assert_eq!(verdict(&status(tonic::Code::PermissionDenied, "etcdserver: permission denied")), Verdict::Answered);
    }

    #[test]
    fn a_higher_term_is_a_new_leader_and_wakes_what_waits() {
        let ms = members(3);
        let mut terms = ms.terms();
        ms.saw_term(3);
        assert!(!terms.has_changed().unwrap(), "the first term seen is no change");
        ms.saw_term(4);
        assert!(terms.has_changed().unwrap());
        terms.borrow_and_update();
        ms.saw_term(4);
        ms.saw_term(3);
        assert!(!terms.has_changed().unwrap(), "the same or an older term is no change of leader");
        ms.saw_term(5);
        assert_eq!(*terms.borrow_and_update(), 5);
    }

    #[test]
    fn the_last_healthy_member_is_never_judged_and_the_least_busy_goes_first() {
        let ms = members(2);
        ms.refused(&ms.list[0], "no leader");
        ms.refused(&ms.list[1], "no leader");
        assert!(ms.list[1].healthy(), "with nobody else healthy, a member keeps its requests");
        ms.mark(&ms.list[0], Ok(()));
        ms.list[0].in_flight.store(5, Ordering::Relaxed);
        assert!((0..10).all(|_| ms.pick().authority == "m1:2379"));
    }
}
