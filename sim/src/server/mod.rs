//! A model of etcd v3 served in-process over etcd's own gRPC API, so code written against the
//! `etcd-client` crate runs unchanged against it in the deterministic simulation: no sockets,
//! no real time (tokio's clock, so `start_paused` tests are exact), no randomness of its own
//! (faults come from the caller's hook). It models the KV (ranges at past revisions,
//! put/delete, txns with nested txns and compares, compaction), Lease (grant, revoke,
//! keep-alive stream, time-to-live, list, expiry on tokio time) and Watch services, with
//! etcd 3.4's semantics and error statuses, checked against a real etcd by
//! `sim/tests/conformance.rs`. Faults: delays, requests failed before applying, answers lost
//! after applying (the unknown outcome), stalls, lagging watches, broken watch streams.
//!
//! Left out: auth (etcd-client asks for nothing without a user), the Maintenance, Cluster,
//! Election and Lock services, more than one member (no leader changes, no linearizability
//! gaps between members), request size limits, the quota, fragmented watch responses, and
//! `RangeStream` beyond one chunk.

mod kv;
mod lease;
pub mod store;
#[cfg(test)]
mod tests;
mod watch;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use etcd_client::proto::{PbKvServer, PbLeaseServer, PbWatchServer};
use tokio::time::{Duration, Instant};
use tonic::Status;
use tower::util::BoxCloneSyncService;
use tower::ServiceExt;

use store::Store;

/// What the fault hook makes of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer normally.
    None,
    /// Wait this long (tokio time), then apply and answer.
    Delay(std::time::Duration),
    /// Answer UNAVAILABLE without applying.
    FailBefore,
    /// Apply, then answer UNAVAILABLE: the caller cannot know whether it applied.
    LoseAnswer,
    /// Answer UNAVAILABLE now and apply this long after (tokio time): a write queued behind a
    /// stall that its caller gave up on, applied after the caller has read back and moved on.
    /// Reads, keep-alives and watch creates it fails before applying.
    ApplyLate(std::time::Duration),
}

/// What [`ModelEtcd::admit_write`] lets a request do.
enum Admitted {
    /// Apply now; `lose`: then answer UNAVAILABLE.
    Apply { lose: bool },
    /// Answer UNAVAILABLE now, apply this long after.
    Late(std::time::Duration),
}

/// What a request is, for the fault hook.
#[derive(Clone, Debug)]
pub enum Call {
    Range,
    Put,
    DeleteRange,
    /// `writes`: the txn has a put or delete in some branch; `puts`: the keys it puts in any.
    Txn {
        writes: bool,
        puts: Vec<Vec<u8>>,
    },
    Compact,
    LeaseGrant,
    LeaseRevoke,
    /// One keep-alive message on a keep-alive stream.
    LeaseKeepAlive,
    LeaseTimeToLive,
    LeaseLeases,
    /// One create request on a watch stream.
    WatchCreate,
}

/// A key's current state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyState {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    pub lease: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Put,
    Delete,
}

/// One applied change. A put carries what the key became; a delete only its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub kind: ChangeKind,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub revision: i64,
    pub create_revision: i64,
    pub version: i64,
    pub lease: i64,
}

type Hook = Box<dyn FnMut(&Call, u32) -> Fault + Send>;

pub(crate) struct State {
    pub store: Store,
    /// Requests wait until this instant, and nothing is applied before it (no lease expiry,
    /// no watch delivery).
    pub stall_until: Option<Instant>,
    /// When a new leader takes over (`ModelEtcd::lose_leader`): every lease renewed then.
    pub promote_at: Option<Instant>,
    pub watch_lag: Duration,
    /// Bumped by `break_watches`: a watch stream opened before ends.
    pub watch_epoch: u64,
    /// Clients cut off from the model until an instant (`ModelEtcd::partition`).
    pub partitions: std::collections::BTreeMap<u32, Instant>,
    /// The lease expiry timer, on the runtime of the first `client()` (again on a later one's
    /// if that runtime ended).
    timer: Option<tokio::task::JoinHandle<()>>,
}

impl State {
    /// Until when client `who` is cut off, if it is at `now`.
    pub fn cut_off(&self, who: u32, now: Instant) -> Option<Instant> {
        self.partitions.get(&who).copied().filter(|until| now < *until)
    }

    /// Whether the model is stalled at `now`.
    pub fn stalled(&self, now: Instant) -> bool {
        self.stall_until.is_some_and(|u| now < u)
    }

    /// etcd's lessor, run lazily: expires the leases whose TTL has passed (not while stalled).
    fn expire(&mut self, now: Instant) -> bool {
        if self.stalled(now) {
            return false;
        }
        if let Some(at) = self.promote_at.take_if(|at| now >= *at) {
            self.store.renew_all(at);
        }
        self.store.expire_due(now)
    }
}

pub(crate) struct Shared {
    state: Mutex<State>,
    /// Kept apart from `state`, so the hook is called without the state's lock held.
    hook: Mutex<Option<Hook>>,
    /// Bumped after every change anything waits on: a write, a lease change, a lag, a break.
    tick: tokio::sync::watch::Sender<u64>,
}

/// The model etcd. Cheap to clone: clones share the same state.
#[derive(Clone)]
pub struct ModelEtcd {
    shared: Arc<Shared>,
    /// The client this handle serves (`client_as`), for partitions.
    who: u32,
}

impl std::fmt::Debug for ModelEtcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelEtcd").field("revision", &self.revision()).finish_non_exhaustive()
    }
}

impl Default for ModelEtcd {
    fn default() -> Self {
        Self::new()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn unavailable_before() -> Status {
    Status::unavailable("etcdserver: leader changed")
}

pub(crate) fn unavailable_after() -> Status {
    Status::unavailable("etcdserver: request timed out")
}

impl ModelEtcd {
    pub fn new() -> Self {
        let state = State {
            store: Store::new(),
            stall_until: None,
            promote_at: None,
            watch_lag: Duration::ZERO,
            watch_epoch: 0,
            partitions: std::collections::BTreeMap::new(),
            timer: None,
        };
        let (tick, _) = tokio::sync::watch::channel(0);
        Self { shared: Arc::new(Shared { state: Mutex::new(state), hook: Mutex::new(None), tick }), who: 0 }
    }

    /// Sets the fault hook, asked once per unary request (and per keep-alive message, and per
    /// watch create) with the request and who sent it (`client_as`; 0 for `client`): `Delay`
    /// waits (tokio time) before applying; `FailBefore` answers UNAVAILABLE without applying;
    /// `LoseAnswer` applies, then answers UNAVAILABLE (the unknown outcome); `ApplyLate`
    /// answers UNAVAILABLE and applies a write later. On a stream, a failure ends the stream. The hook must not call this
    /// `ModelEtcd`'s `set_faults`.
    pub fn set_faults(&self, hook: impl FnMut(&Call, u32) -> Fault + Send + 'static) {
        *lock(&self.shared.hook) = Some(Box::new(hook));
    }

    /// A client over the model's gRPC services, in-process. Starts the lease expiry timer on
    /// the caller's runtime (once). Call it as often as needed: every client shares the state.
    pub async fn client(&self) -> etcd_client::Client {
        self.client_as(0).await
    }

    /// A client known to the model as `who`: [`Self::partition`] cuts it off.
    pub async fn client_as(&self, who: u32) -> etcd_client::Client {
        self.start_timer();
        let model = Self { shared: self.shared.clone(), who };
        let routes = tonic::service::Routes::new(PbKvServer::new(kv::KvService(model.clone())))
            .add_service(PbLeaseServer::new(lease::LeaseService(model.clone())))
            .add_service(PbWatchServer::new(watch::WatchService(model)));
        let service = ServiceExt::<http::Request<tonic::body::Body>>::map_err(
            routes,
            |never: std::convert::Infallible| -> tower::BoxError { match never {} },
        );
        let channel = etcd_client::Channel::Custom(BoxCloneSyncService::new(service));
        match etcd_client::Client::from_channel(channel, None).await {
            Ok(client) => client,
            // Without a user, connecting sends nothing and cannot fail.
            Err(e) => panic!("etcd-client refused the model's channel: {e}"),
        }
    }

    pub fn revision(&self) -> i64 {
        self.read(|st, _| st.store.revision())
    }

    /// Current value of every key under `prefix`, in key order.
    pub fn dump(&self, prefix: &[u8]) -> Vec<KeyState> {
        self.read(|st, _| st.store.dump(prefix))
    }

    /// Every applied change in revision order, since the start (kept even past compaction).
    pub fn history(&self) -> Vec<Change> {
        self.read(|st, _| st.store.changes().to_vec())
    }

    /// Expires lease `id` now (as etcd would after its TTL): deletes its keys in one revision.
    pub fn expire(&self, id: i64) {
        self.with(|st, now| st.store.revoke(id, now));
    }

    /// Compacts the history at `revision` (as `etcdctl compact`); nothing if it is at or below
    /// the compacted revision or above the current one.
    pub fn compact(&self, revision: i64) {
        let request = etcd_client::proto::PbCompactionRequest { revision, physical: false };
        self.with(|st, _| st.store.compact(&request).ok());
    }

    /// Cuts client `who` off until `until`: its requests hang until then and fail (UNAVAILABLE,
    /// not applied), its keep-alives too (its leases expire on their TTL), and its watch
    /// streams end. Other clients go on.
    pub fn partition(&self, who: u32, until: tokio::time::Instant) {
        self.with(|st, _| st.partitions.insert(who, until));
    }

    /// Ends every open watch stream with UNAVAILABLE (as a restarted member would).
    pub fn break_watches(&self) {
        self.with(|st, _| st.watch_epoch += 1);
    }

    /// Delivers watch events this much later (tokio time) than their revision was applied,
    /// from now on.
    pub fn set_watch_lag(&self, lag: std::time::Duration) {
        self.with(|st, _| st.watch_lag = lag);
    }

    /// Stalls every request (they wait, then apply) until `until`. Nothing is applied
    /// meanwhile: leases do not expire and watches deliver nothing; at `until` the leases whose
    /// TTL passed expire before any waiting request applies (a keep-alive then is too late).
    pub fn stall_until(&self, until: tokio::time::Instant) {
        self.with(|st, _| st.stall_until = Some(until));
    }

    /// The leader lost until `until`: requests stall as in [`Self::stall_until`], then a new
    /// leader renews every lease for a full TTL before any waiting request applies (etcd's
    /// lessor on promotion), so a session whose holder heard nothing for longer than its TTL
    /// lives on.
    pub fn lose_leader(&self, until: tokio::time::Instant) {
        self.with(|st, _| {
            st.stall_until = Some(until);
            st.promote_at = Some(until);
        });
    }

    /// Runs `f` on the state at tokio's now, after expiring the leases due, and wakes the
    /// waiters (watch streams, the expiry timer).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut State, Instant) -> R) -> R {
        self.apply(true, f)
    }

    /// As [`Self::with`] for `f` that changes nothing: wakes the waiters only if a lease expired.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&mut State, Instant) -> R) -> R {
        self.apply(false, f)
    }

    fn apply<R>(&self, wake: bool, f: impl FnOnce(&mut State, Instant) -> R) -> R {
        let now = Instant::now();
        let (out, expired) = {
            let mut st = lock(&self.shared.state);
            let expired = st.expire(now);
            (f(&mut st, now), expired)
        };
        if wake || expired {
            self.shared.tick.send_modify(|t| *t += 1);
        }
        out
    }

    pub(crate) fn ticks(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shared.tick.subscribe()
    }

    /// Asks the fault hook about `call`, waits its delay and any stall; `Ok(true)` if the
    /// answer is to be lost after applying.
    pub(crate) async fn admit(&self, call: Call) -> Result<bool, Status> {
        match self.admit_write(call).await? {
            Admitted::Apply { lose } => Ok(lose),
            Admitted::Late(_) => Err(unavailable_before()),
        }
    }

    /// [`ModelEtcd::admit`] for a write, which a fault may apply late.
    async fn admit_write(&self, call: Call) -> Result<Admitted, Status> {
        let fault = lock(&self.shared.hook).as_mut().map_or(Fault::None, |hook| hook(&call, self.who));
        if let Fault::Delay(d) = fault {
            tokio::time::sleep(d).await;
        }
        self.wait_stall().await;
        let cut_off = lock(&self.shared.state).cut_off(self.who, Instant::now());
        if let Some(until) = cut_off {
            tokio::time::sleep_until(until).await;
            return Err(unavailable_before());
        }
        match fault {
            Fault::FailBefore => Err(unavailable_before()),
            Fault::LoseAnswer => Ok(Admitted::Apply { lose: true }),
            Fault::ApplyLate(d) => Ok(Admitted::Late(d)),
            Fault::None | Fault::Delay(_) => Ok(Admitted::Apply { lose: false }),
        }
    }

    /// Waits until no stall holds (a stall may be extended while waiting).
    pub(crate) async fn wait_stall(&self) {
        loop {
            let until = lock(&self.shared.state).stall_until;
            match until {
                Some(u) if Instant::now() < u => tokio::time::sleep_until(u).await,
                _ => return,
            }
        }
    }

    /// A unary request: the fault hook, then `f` applied on the state, its answer lost if the
    /// hook said so.
    pub(crate) async fn unary<R: Send + 'static>(
        &self,
        call: Call,
        f: impl FnOnce(&mut State, Instant) -> Result<R, Status> + Send + 'static,
    ) -> Result<tonic::Response<R>, Status> {
        let lose = match self.admit_write(call).await? {
            Admitted::Apply { lose } => lose,
            Admitted::Late(d) => {
                let model = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    model.wait_stall().await;
                    let _ = model.with(f);
                });
                return Err(unavailable_after());
            }
        };
        let out = self.with(f)?;
        if lose {
            return Err(unavailable_after());
        }
        Ok(tonic::Response::new(out))
    }

    fn start_timer(&self) {
        let mut st = lock(&self.shared.state);
        if st.timer.as_ref().is_none_or(tokio::task::JoinHandle::is_finished) {
            st.timer = Some(tokio::spawn(lease::expiry_timer(Arc::downgrade(&self.shared), self.ticks())));
        }
    }
}
