//! Handler tasks (`{"kind":"handler","name":…}`): a function the process that embeds this worker
//! registered (`etcron-sdk`), run in-process instead of a command or a request. The handler
//! gets the execution's identity, its values, its parents' results and the checkpoint it
//! resumes from, reports
//! progress, stores checkpoints (fenced by the claim, as a shell task's reports) and writes
//! output; a kill, the timeout or the lost session fire its `cancelled` signal, and it is
//! dropped `kill_grace` later if it has not returned by then.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use etcron_model::progress::Report;
use serde_json::Value;
use tokio::sync::watch;

use crate::tasks::live_output::LiveOutput;
pub use crate::tasks::progress::Refusal;
use crate::tasks::progress::Tracker;
use crate::tasks::shell::{wait_stop, Ending, Finished, StopReason};

/// Most bytes of the JSON value a handler returns (its record's `result`).
pub const MAX_RESULT_BYTES: usize = etcron_model::progress::MAX_RESULT_BYTES;

/// What a handler run ends with: its JSON result (or none), or why it failed.
pub type Outcome = Result<Option<Value>, String>;

/// A handler's run, as the worker awaits it.
pub type Run = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// The handlers of the process that embeds this worker, given through
/// [`crate::node::Parts::handlers`].
pub trait Handlers: Send + Sync {
    /// The names this process runs: advertised in its registration, so only it races for
    /// their jobs (and it races for nothing else).
    fn names(&self) -> Vec<String>;

    /// Starts handler `call.name` (one of [`Handlers::names`]).
    fn run(&self, call: Call) -> Run;
}

/// One execution of a handler: who it is, its values, and how it reports.
pub struct Call {
    pub name: String,
    pub execution_id: String,
    pub job: String,
    /// The tick (Unix ms); `None` for a manual run.
    pub scheduled_ms: Option<i64>,
    pub attempt: u32,
    pub fencing_token: i64,
    /// The task's `env` and `secret_env`, then the run's parameters.
    pub env: BTreeMap<String, String>,
    /// The checkpoint a failover rerun resumes from.
    pub checkpoint: Option<Value>,
    /// The run's W3C trace context (as `TRACEPARENT` for a shell task).
    pub traceparent: String,
    pub reports: Reports,
    /// Becomes `true` on a kill, the timeout or the session's loss: return soon.
    pub cancelled: watch::Receiver<bool>,
}

/// Progress, checkpoints and output of one handler run, and the results of its parents.
#[derive(Clone)]
pub struct Reports {
    tracker: Arc<Tracker>,
    output: Arc<LiveOutput>,
    /// The results of the run's parents (a dependency or workflow step), by job.
    parents: Option<Arc<BTreeMap<String, Value>>>,
}

impl Reports {
    /// The results of the run's parents by job (a parent without one maps to `null`); `None`
    /// when the run has no parents (not a dependency or workflow step).
    #[must_use]
    pub fn parent_results(&self) -> Option<&BTreeMap<String, Value>> {
        self.parents.as_deref()
    }

    /// Gives the run its parents' results.
    pub(crate) fn set_parent_results(&mut self, parents: Option<BTreeMap<String, Value>>) {
        self.parents = parents.map(Arc::new);
    }

    /// Reports progress (`percent` 0–100) and a message, as a shell task's `::etcron progress`.
    pub async fn progress(&self, percent: Option<f64>, message: Option<String>) {
        let _ = self.tracker.report(Report { percent, message, ..Report::default() }).await;
    }

    /// Stores `value` as the tick's checkpoint, fenced by the claim; `Ok` once etcd holds it.
    ///
    /// # Errors
    /// [`Refusal::Unavailable`] when etcd did not take it, [`Refusal::Fenced`] when the claim is
    /// no longer this run's.
    pub async fn checkpoint(&self, value: Value) -> Result<(), Refusal> {
        let report = Report { checkpoint: Some(value), ..Report::default() };
        self.tracker.report(report).await
    }

    /// Appends to the run's output (bounded like any task's, followable live).
    pub fn output(&self, text: &str) {
        self.output.push(text.as_bytes());
    }
}

/// What the worker runs a handler with.
pub(crate) struct HandlerJob {
    pub call: Call,
    pub cancel: watch::Sender<bool>,
    pub timeout: Option<Duration>,
    pub kill_grace: Duration,
}

/// A handler's [`Reports`] and the signal its `cancelled` follows.
pub(crate) fn reports(
    tracker: Arc<Tracker>,
    output: Arc<LiveOutput>,
) -> (Reports, watch::Sender<bool>, watch::Receiver<bool>) {
    let (cancel, cancelled) = watch::channel(false);
    (Reports { tracker, output, parents: None }, cancel, cancelled)
}

/// Runs `job` on `handlers` until it returns, its timeout passes or `stop` carries a reason; on
/// those two, `cancelled` fires and the handler has `kill_grace` to return before it is dropped.
pub(crate) async fn run_handler(
    handlers: &dyn Handlers,
    job: HandlerJob,
    output: &LiveOutput,
    mut stop: watch::Receiver<Option<StopReason>>,
) -> Finished {
    if let Some(reason) = stop.borrow().clone() {
        return Finished::not_started(Ending::Stopped(reason));
    }
    let HandlerJob { call, cancel, timeout, kill_grace } = job;
    let mut run = handlers.run(call);
    let deadline = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let ending = tokio::select! {
        biased;
        reason = wait_stop(&mut stop) => Ending::Stopped(reason),
        () = deadline => Ending::TimedOut,
        outcome = &mut run => return finished(outcome, output),
    };
    let _ = cancel.send(true);
    // Given its grace to return (its cleanup); its outcome no longer decides the status.
    if tokio::time::timeout(kill_grace, &mut run).await.is_err() {
        output
            .push(format!("the handler did not return within {kill_grace:?} of being cancelled; dropped\n").as_bytes());
    }
    Finished::of_request(ending, None, output.render())
}

/// A returned outcome as the run's end: a result too large is a failure naming its size.
fn finished(outcome: Outcome, output: &LiveOutput) -> Finished {
    let (ending, result) = match outcome {
        Ok(result) => match result.as_ref().map(|v| serde_json::to_vec(v).map_or(0, |b| b.len())) {
            Some(n) if n > MAX_RESULT_BYTES => (
                Ending::RemoteFailed(format!(
                    "the handler's result is {n} bytes, over the {MAX_RESULT_BYTES}-byte limit"
                )),
                None,
            ),
            _ => (Ending::Exited(0), result),
        },
        Err(why) => (Ending::RemoteFailed(format!("handler failed: {why}")), None),
    };
    let mut done = Finished::of_request(ending, None, output.render());
    done.result = result;
    done
}
