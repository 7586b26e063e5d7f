//! etcd's Watch gRPC service over the model: one task per stream (on the caller's runtime)
//! reads create/cancel/progress requests and delivers events, as etcd 3.4's watch server:
//! the `created` response first, a watch from a past revision caught up in one response
//! (at most 1000 revisions), then one response per revision, `prev_kv` and the NOPUT/NODELETE
//! filters, a watch that needs a compacted revision cancelled with `compact_revision`,
//! progress notifications every 10 minutes. Events of a revision are delivered the watch lag
//! after the revision applied, nothing during a stall; `break_watches` ends the stream with
//! UNAVAILABLE. Left out: fragmentation, watch permissions, etcd's 100 ms sync period (a watch
//! catches up at once).

use std::collections::BTreeMap;

use etcd_client::proto::{PbEvent, PbKeyValue, PbWatchRequest, PbWatchRequestUnion, PbWatchResponse, PbWatchService};
use futures::stream::BoxStream;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::{Duration, Instant};
use tonic::{Request, Response, Status, Streaming};

use super::store::{header, KeyRange};
use super::{Call, Change, ChangeKind, ModelEtcd, State};

/// etcd's default `--experimental-watch-progress-notify-interval`.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(600);
/// etcd's `watchBatchMaxRevs`: a catching-up watch gets at most this many revisions at once.
pub const BATCH_MAX_REVS: usize = 1000;
const FILTER_NOPUT: i32 = 0;
const FILTER_NODELETE: i32 = 1;
const EVENT_DELETE: i32 = 1;

pub(super) struct WatchService(pub(super) ModelEtcd);

type Responses = BoxStream<'static, Result<PbWatchResponse, Status>>;
type Tx = UnboundedSender<Result<PbWatchResponse, Status>>;

#[tonic::async_trait]
impl PbWatchService for WatchService {
    type WatchStream = Responses;

    async fn watch(&self, request: Request<Streaming<PbWatchRequest>>) -> Result<Response<Responses>, Status> {
        let input = request.into_inner();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let epoch = self.0.read(|st, _| st.watch_epoch);
        let stream = WatchStream {
            model: self.0.clone(),
            tx,
            epoch,
            watchers: BTreeMap::new(),
            next_id: 0,
            next_progress: Instant::now() + PROGRESS_INTERVAL,
        };
        tokio::spawn(stream.run(input));
        Ok(Response::new(Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))))
    }
}

struct Watcher {
    range: KeyRange,
    /// The next revision whose events this watcher has not had.
    next: i64,
    prev_kv: bool,
    no_put: bool,
    no_delete: bool,
    progress: bool,
    /// Created at a past revision and not caught up yet: the backlog goes in one response.
    catching_up: bool,
    /// Events sent since the last progress tick (etcd then skips the notification).
    sent: bool,
}

struct WatchStream {
    model: ModelEtcd,
    tx: Tx,
    epoch: u64,
    watchers: BTreeMap<i64, Watcher>,
    next_id: i64,
    next_progress: Instant,
}

/// The stream's client went away.
struct Closed;

impl WatchStream {
    async fn run(mut self, mut input: Streaming<PbWatchRequest>) {
        let mut ticks = self.model.ticks();
        let mut input_open = true;
        loop {
            let Ok(next_due) = self.deliver() else { return };
            // No timer unless something falls due: an idle paused clock jumps to the next one.
            let progress = self.watchers.values().any(|w| w.progress).then_some(self.next_progress);
            let wake = next_due.into_iter().chain(progress).min();
            let sleep = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = self.tx.closed() => return,
                msg = input.message(), if input_open => match msg {
                    Ok(Some(req)) => {
                        if self.handle(req).await.is_err() {
                            return;
                        }
                    }
                    // The client stopped sending: events still flow, as in etcd.
                    Ok(None) => input_open = false,
                    Err(_) => return,
                },
                changed = ticks.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = sleep => {
                    if Instant::now() >= self.next_progress && self.progress().is_err() {
                        return;
                    }
                }
            }
        }
    }

    fn send(&self, resp: Result<PbWatchResponse, Status>) -> Result<(), Closed> {
        self.tx.send(resp).map_err(|_| Closed)
    }

    async fn handle(&mut self, req: PbWatchRequest) -> Result<(), Closed> {
        match req.request_union {
            Some(PbWatchRequestUnion::CreateRequest(c)) => {
                match self.model.admit(Call::WatchCreate).await {
                    Ok(false) => {}
                    Ok(true) => {
                        self.send(Err(super::unavailable_after()))?;
                        return Err(Closed);
                    }
                    Err(e) => {
                        self.send(Err(e))?;
                        return Err(Closed);
                    }
                }
                let key = if c.key.is_empty() { vec![0] } else { c.key };
                let cur = self.model.read(|st, _| st.store.revision());
                let id = if c.watch_id == 0 {
                    while self.watchers.contains_key(&self.next_id) {
                        self.next_id += 1;
                    }
                    self.next_id += 1;
                    self.next_id - 1
                } else {
                    c.watch_id
                };
                if self.watchers.contains_key(&id) {
                    return self.send(Ok(PbWatchResponse {
                        header: header(cur),
                        watch_id: id,
                        created: true,
                        canceled: true,
                        cancel_reason: "mvcc: duplicate watch ID provided on the WatchStream".into(),
                        ..PbWatchResponse::default()
                    }));
                }
                let next = if c.start_revision == 0 { cur + 1 } else { c.start_revision };
                // etcd's progress ticker runs from the stream's start, every interval.
                while self.next_progress <= Instant::now() {
                    self.next_progress += PROGRESS_INTERVAL;
                }
                self.watchers.insert(
                    id,
                    Watcher {
                        range: KeyRange::new(&key, &c.range_end),
                        next,
                        prev_kv: c.prev_kv,
                        no_put: c.filters.contains(&FILTER_NOPUT),
                        no_delete: c.filters.contains(&FILTER_NODELETE),
                        progress: c.progress_notify,
                        catching_up: next <= cur,
                        sent: false,
                    },
                );
                self.send(Ok(PbWatchResponse {
                    header: header(cur),
                    watch_id: id,
                    created: true,
                    ..PbWatchResponse::default()
                }))
            }
            Some(PbWatchRequestUnion::CancelRequest(c)) => {
                if self.watchers.remove(&c.watch_id).is_none() {
                    return Ok(());
                }
                let cur = self.model.read(|st, _| st.store.revision());
                self.send(Ok(PbWatchResponse {
                    header: header(cur),
                    watch_id: c.watch_id,
                    canceled: true,
                    ..PbWatchResponse::default()
                }))
            }
            Some(PbWatchRequestUnion::ProgressRequest(_)) => {
                let cur = self.model.read(|st, _| st.store.revision());
                self.send(Ok(PbWatchResponse { header: header(cur), watch_id: -1, ..PbWatchResponse::default() }))
            }
            None => Ok(()),
        }
    }

    /// Sends every response due now; the instant the next revision falls due, if any.
    fn deliver(&mut self) -> Result<Option<Instant>, Closed> {
        let (epoch, who) = (self.epoch, self.model.who);
        let mut out = Vec::new();
        let mut broken = false;
        let next_due = self.model.read(|st, now| {
            if st.watch_epoch != epoch || st.cut_off(who, now).is_some() {
                broken = true;
                return None;
            }
            if st.stalled(now) {
                return st.stall_until;
            }
            let (upto, next_due) = st.store.due_upto(now, st.watch_lag);
            let compacted = st.store.compacted();
            self.watchers.retain(|id, w| {
                if w.next > upto {
                    return true;
                }
                if w.next < compacted {
                    out.push(PbWatchResponse {
                        header: header(0),
                        watch_id: *id,
                        compact_revision: compacted,
                        canceled: true,
                        ..PbWatchResponse::default()
                    });
                    return false;
                }
                out.extend(catch_up(st, *id, w, upto));
                true
            });
            next_due
        });
        if broken {
            self.send(Err(Status::unavailable("etcdserver: server stopped")))?;
            return Err(Closed);
        }
        for resp in out {
            self.send(Ok(resp))?;
        }
        Ok(next_due)
    }

    /// etcd's progress ticker: a notification to each synced watch that asked for them and
    /// had no events since the last tick.
    fn progress(&mut self) -> Result<(), Closed> {
        self.next_progress = Instant::now() + PROGRESS_INTERVAL;
        let cur = self.model.read(|st, _| st.store.revision());
        let mut out = Vec::new();
        for (id, w) in &mut self.watchers {
            if w.progress && !w.sent && w.next > cur {
                out.push(PbWatchResponse { header: header(cur), watch_id: *id, ..PbWatchResponse::default() });
            }
            w.sent = false;
        }
        out.into_iter().try_for_each(|resp| self.send(Ok(resp)))
    }
}

/// The responses that bring watcher `id` up to revision `upto`.
fn catch_up(st: &State, id: i64, w: &mut Watcher, upto: i64) -> Vec<PbWatchResponse> {
    let changes = st.store.changes();
    let start = changes.partition_point(|c| c.revision < w.next);
    let mut by_rev: Vec<(i64, Vec<PbEvent>)> = Vec::new();
    for c in changes[start..].iter().take_while(|c| c.revision <= upto) {
        if !w.range.contains(&c.key)
            || c.kind == ChangeKind::Put && w.no_put
            || c.kind == ChangeKind::Delete && w.no_delete
        {
            continue;
        }
        let event = event(st, c, w.prev_kv);
        match by_rev.last_mut() {
            Some((rev, evs)) if *rev == c.revision => evs.push(event),
            _ => by_rev.push((c.revision, vec![event])),
        }
    }
    let mut out = Vec::new();
    if w.catching_up {
        let more = by_rev.get(BATCH_MAX_REVS).map(|(rev, _)| *rev);
        let events = by_rev.into_iter().take(BATCH_MAX_REVS).flat_map(|(_, evs)| evs).collect::<Vec<_>>();
        if !events.is_empty() {
            out.push(PbWatchResponse { header: header(upto), watch_id: id, events, ..PbWatchResponse::default() });
        }
        match more {
            Some(rev) => w.next = rev,
            None => {
                w.next = upto + 1;
                w.catching_up = false;
            }
        }
    } else {
        out.extend(by_rev.into_iter().map(|(rev, events)| PbWatchResponse {
            header: header(rev),
            watch_id: id,
            events,
            ..PbWatchResponse::default()
        }));
        w.next = upto + 1;
    }
    w.sent |= !out.is_empty();
    out
}

fn event(st: &State, c: &Change, with_prev: bool) -> PbEvent {
    let (kind, kv) = match c.kind {
        ChangeKind::Put => (
            0,
            PbKeyValue {
                key: c.key.clone(),
                create_revision: c.create_revision,
                mod_revision: c.revision,
                version: c.version,
                value: c.value.clone(),
                lease: c.lease,
            },
        ),
        ChangeKind::Delete => {
            (EVENT_DELETE, PbKeyValue { key: c.key.clone(), mod_revision: c.revision, ..PbKeyValue::default() })
        }
    };
    // etcd reads the previous value at the revision before, for every event but a create.
    let create = c.kind == ChangeKind::Put && c.version == 1;
    let prev_kv = (with_prev && !create).then(|| st.store.get_at(&c.key, c.revision - 1)).flatten();
    PbEvent { r#type: kind, kv: Some(kv), prev_kv }
}
