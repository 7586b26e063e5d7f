//! One remote executor's session: the node that races for its handlers' ticks, the runs it won
//! waiting to be polled, and the runs handed out, until the executor says each is done.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::{oneshot, watch, Notify};

use crate::tasks::handler::{Call, Handlers, Outcome, Reports, Run};

/// Longest a poll waits for work.
pub const MAX_POLL_WAIT: Duration = Duration::from_secs(30);

/// A run handed to the executor, as a poll answers it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Offer {
    /// This session's name for the run (in the run's URLs).
    pub run: String,
    pub handler: String,
    pub execution_id: String,
    pub job: String,
    pub scheduled_ms: Option<i64>,
    pub attempt: u32,
    pub fencing_token: i64,
    pub env: BTreeMap<String, String>,
    pub checkpoint: Option<Value>,
    /// The run's W3C trace context.
    pub traceparent: String,
}

/// A run the executor holds: how it reports, and where its outcome goes.
struct Held {
    reports: Reports,
    done: Option<oneshot::Sender<Outcome>>,
}

#[derive(Default)]
struct Queues {
    offers: VecDeque<Offer>,
    cancels: Vec<String>,
    held: HashMap<String, Held>,
}

/// One connected executor.
pub(crate) struct Session {
    pub executor: String,
    handlers: Vec<String>,
    queues: Mutex<Queues>,
    wake: Notify,
    next_run: AtomicU64,
    last_seen: Mutex<Instant>,
    /// Ends the node as SIGTERM ends a worker (the executor left).
    stop: watch::Sender<bool>,
    /// Ends it as a crash does (the executor was lost).
    severances: Vec<etcron_common::etcd::Severance>,
    group: etcron_common::task::Group,
}

impl Session {
    pub(crate) fn new(
        executor: String,
        handlers: Vec<String>,
        severances: Vec<etcron_common::etcd::Severance>,
        group: etcron_common::task::Group,
    ) -> (Arc<Self>, watch::Receiver<bool>) {
        let (stop, stopped) = watch::channel(false);
        let session = Self {
            executor,
            handlers,
            queues: Mutex::default(),
            wake: Notify::new(),
            next_run: AtomicU64::new(1),
            last_seen: Mutex::new(Instant::now()),
            stop,
            severances,
            group,
        };
        (Arc::new(session), stopped)
    }

    fn queues(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes a request of the executor: it is alive.
    pub(crate) fn seen(&self) {
        *self.last_seen.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    pub(crate) fn silent_for(&self) -> Duration {
        self.last_seen.lock().unwrap_or_else(PoisonError::into_inner).elapsed()
    }

    /// The runs won and the runs cancelled since the last poll, waiting up to `wait` for one.
    pub(crate) async fn poll(&self, wait: Duration) -> (Vec<Offer>, Vec<String>) {
        let deadline = tokio::time::Instant::now() + wait.min(MAX_POLL_WAIT);
        loop {
            let woken = self.wake.notified();
            {
                let mut q = self.queues();
                if !q.offers.is_empty() || !q.cancels.is_empty() {
                    return (q.offers.drain(..).collect(), std::mem::take(&mut q.cancels));
                }
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return (Vec::new(), Vec::new());
            }
        }
    }

    /// The reports of held run `run`.
    pub(crate) fn reports(&self, run: &str) -> Option<Reports> {
        self.queues().held.get(run).map(|h| h.reports.clone())
    }

    /// The executor's outcome of `run`; `false` when it holds no such run (ended or never given).
    pub(crate) fn finish(&self, run: &str, outcome: Outcome) -> bool {
        let done = self.queues().held.get_mut(run).and_then(|h| h.done.take());
        done.is_some_and(|tx| tx.send(outcome).is_ok())
    }

    /// The executor leaves: its node drains as a worker does on SIGTERM.
    pub(crate) fn leave(&self) {
        let _ = self.stop.send(true);
    }

    /// The executor is lost: its node is cut off etcd, then its tasks are dropped where they
    /// were — a crash. Its session expires; the survivors handle its runs.
    pub(crate) fn crash(&self) {
        for s in &self.severances {
            s.sever();
        }
        self.group.abort_all();
        let mut q = self.queues();
        q.offers.clear();
        q.held.clear();
    }
}

/// The handlers of a remote executor, as its node runs them: each run is offered to the
/// executor's next poll and ends when the executor reports its outcome.
pub(crate) struct Remote(pub Arc<Session>);

impl Handlers for Remote {
    fn names(&self) -> Vec<String> {
        self.0.handlers.clone()
    }

    fn run(&self, call: Call) -> Run {
        let session = self.0.clone();
        let run = format!("r{}", session.next_run.fetch_add(1, Ordering::Relaxed));
        let (done, outcome) = oneshot::channel();
        let Call {
            name,
            execution_id,
            job,
            scheduled_ms,
            attempt,
            fencing_token,
            env,
            checkpoint,
            traceparent,
            reports,
            cancelled,
        } = call;
        let offer = Offer {
            run: run.clone(),
            handler: name,
            execution_id,
            job,
            scheduled_ms,
            attempt,
            fencing_token,
            env,
            checkpoint,
            traceparent,
        };
        {
            let mut q = session.queues();
            q.held.insert(run.clone(), Held { reports, done: Some(done) });
            q.offers.push_back(offer);
        }
        session.wake.notify_waiters();
        // A kill, the timeout or the lost session: the executor learns it at its next poll.
        let (watched, watcher_run) = (session.clone(), run.clone());
        let mut cancelled = cancelled;
        let watcher = etcron_common::task::spawn(async move {
            if cancelled.wait_for(|c| *c).await.is_ok() {
                watched.queues().cancels.push(watcher_run);
                watched.wake.notify_waiters();
            }
        });
        Box::pin(async move {
            let _forget = Forget { session: session.clone(), run: run.clone(), watcher };
            outcome
                .await
                .unwrap_or_else(|_| Err("the executor went away before reporting the run's outcome".to_owned()))
        })
    }
}

/// Forgets a run once the node is done with it (returned, or dropped after its grace).
struct Forget {
    session: Arc<Session>,
    run: String,
    watcher: tokio::task::JoinHandle<()>,
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.watcher.abort();
        let mut q = self.session.queues();
        q.held.remove(&self.run);
        q.offers.retain(|o| o.run != self.run);
    }
}
