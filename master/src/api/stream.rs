//! `GET /api/executions/{id}/stream`: an execution's output as Server-Sent Events while it runs,
//! relayed from the worker running it (found through the running marker and the worker's
//! registration in etcd), ending with the final record. The master keeps nothing: each stream
//! is one relay task that ends with the client, the execution, or the worker.
//!
//! Events: `output` `{"text": …}` (in order; the first carry what was printed so far), `gap`
//! `{"skipped_bytes": n}` (output the bound cut before it was read), `progress` `{"progress":
//! {"percent", "message", "at"}, "checkpoint": …}` (what the task reported, each time it reports;
//! the first carries its latest), `status` (the final
//! execution record, as `GET /api/executions/{id}` answers it; always the last event), and
//! `error` `{"message": …}` when no final record came in time.
//!
//! Streams are bounded on each master: one token holds at most [`MAX_STREAMS_PER_TOKEN`] at
//! once (more: 429), one execution has at most [`MAX_STREAMS_PER_EXECUTION`] (more: 503). All
//! streams of one execution share one connection to its worker ([`feed`]), so however many
//! clients follow a run, a master holds one of the worker's output connections for it. A stream
//! that carried nothing but keepalives for `stream_quiet_limit` ([`QUIET_LIMIT`] by default) ends with an `idle` event, and one
//! whose client takes no event for [`SEND_STALL`] is closed: a client that stopped reading or
//! vanished holds nothing for long. `?after=N` resumes at output offset `N` (the UTF-8 bytes of
//! the `output` texts plus the `gap`s received), so a client that reconnects misses and repeats
//! nothing.

mod feed;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use etcd_client::{Txn, TxnOp, TxnOpResponse};
use etcron_model::keys::ExecutionId;
use etcron_model::record::{ExecutionRecord, Status};
use etcron_model::stored::{Claim, ClaimState, RunningExecution, TriggerRequest, WorkerInfo};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use self::feed::{End, Item};
use crate::backend::AppState;
use crate::error::ApiError;
use crate::error::{etcd, ApiResult};

/// How often the record is read while waiting for the execution to end.
const POLL: Duration = Duration::from_millis(500);
/// After the running marker is gone, how long the final record may take to reach MongoDB (a
/// worker spools it through an outage) before the stream gives up with an `error` event.
const FINAL_RECORD_WAIT: Duration = Duration::from_secs(120);
/// A stream that sent nothing but keepalives for this long ends with an `idle` event (the
/// default of the master's `stream_quiet_limit`).
pub const QUIET_LIMIT: Duration = Duration::from_secs(600);

/// This master's `stream_quiet_limit`, set once at start ([`QUIET_LIMIT`] until then).
static QUIET: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();

/// Sets this master's `stream_quiet_limit` (the first call counts).
pub fn set_quiet_limit(limit: Duration) {
    let _ = QUIET.set(limit);
}

fn quiet_limit() -> Duration {
    QUIET.get().copied().unwrap_or(QUIET_LIMIT)
}
/// A client that took no event for this long (it stopped reading) loses its stream.
pub const SEND_STALL: Duration = Duration::from_secs(30);
/// Comment lines keep proxies from closing a quiet stream.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// Most streams one token holds open at once on a master.
pub const MAX_STREAMS_PER_TOKEN: usize = 16;
/// Most streams of one execution open at once on a master.
pub const MAX_STREAMS_PER_EXECUTION: usize = 32;

/// Streams open on this master, by token (its name) and by execution.
#[derive(Default)]
struct Open {
    by_token: HashMap<String, usize>,
    by_execution: HashMap<String, usize>,
}

static OPEN: LazyLock<Mutex<Open>> = LazyLock::new(Mutex::default);

/// One open stream, counted in [`OPEN`] until dropped (when the relay ends).
struct Slot {
    /// The token's name; `None` on a master without tokens.
    token: Option<String>,
    execution: String,
}

impl Slot {
    /// Counts a stream of `execution` by `token` in, unless one of the limits is reached.
    fn take(token: Option<&str>, execution: &str) -> Result<Self, ApiError> {
        let mut open = OPEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let held = token.and_then(|t| open.by_token.get(t).copied()).unwrap_or(0);
        let refused = if held >= MAX_STREAMS_PER_TOKEN {
            Some(("per_token", StatusCode::TOO_MANY_REQUESTS, format!("this token holds {MAX_STREAMS_PER_TOKEN} execution streams, the most one token may hold open at once (MAX_STREAMS_PER_TOKEN); close one first")))
        } else if open.by_execution.get(execution).copied().unwrap_or(0) >= MAX_STREAMS_PER_EXECUTION {
            Some(("per_execution", StatusCode::SERVICE_UNAVAILABLE, format!("execution {execution} has {MAX_STREAMS_PER_EXECUTION} streams open, the most one execution may have at once (MAX_STREAMS_PER_EXECUTION); try again later")))
        } else {
            None
        };
        if let Some((limit, status, message)) = refused {
            crate::metrics::METRICS.streams_refused.with_label_values(&[limit]).inc();
            tracing::info!(
                token = token.unwrap_or("-"),
                execution_id = execution,
                limit,
                "an execution stream was refused"
            );
            return Err(ApiError { status, code: "too_many_streams", message, field: None });
        }
        if let Some(t) = token {
            *open.by_token.entry(t.to_owned()).or_insert(0) += 1;
        }
        *open.by_execution.entry(execution.to_owned()).or_insert(0) += 1;
        Ok(Self { token: token.map(str::to_owned), execution: execution.to_owned() })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut guard = OPEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let open = &mut *guard;
        let counted = self.token.as_ref().map(|t| (&mut open.by_token, t));
        for (map, key) in counted.into_iter().chain([(&mut open.by_execution, &self.execution)]) {
            if let Some(n) = map.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    map.remove(key);
                }
            }
        }
    }
}

pub(crate) static HTTP: LazyLock<reqwest::Client> =
    LazyLock::new(|| reqwest::Client::builder().connect_timeout(Duration::from_secs(5)).build().unwrap_or_default());

/// The stream of an execution the caller sees: by its record's team, or for an execution
/// without a record yet (running, requested) by its job's; one it does not see is a 404 like an
/// execution that does not exist.
pub async fn stream_execution(
    State(st): State<AppState>,
    Path(id): Path<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    axum::Extension(scope): axum::Extension<crate::access::Scope>,
) -> ApiResult<Response> {
    let id: ExecutionId = id.parse().map_err(|e: String| ApiError::bad_request(Some("id".to_owned()), e))?;
    let after = after_offset(query.as_deref())?;
    let running = running_marker(&st, &id).await?;
    let record = if running.is_some() {
        // The worker's stream is the source while it runs; a MongoDB outage does not stop it.
        st.store.get(&id.to_string()).await.unwrap_or(None)
    } else {
        crate::error::records(st.store.get(&id.to_string())).await?
    };
    let hidden = || {
        ApiError::not_found(format!("execution {:?} is not running, not requested and has no record", id.to_string()))
    };
    let team = match &record {
        Some(r) => r.team.clone(),
        None => st.jobs().team(&id.job).await?,
    };
    scope.check(team.as_deref(), hidden)?;
    if running.is_none() && record.is_none() && !coming(&st, &id).await? {
        return Err(hidden());
    }
    // Without tokens there is no token to count by: only the per-execution bound applies.
    let token = st.auth.enabled().then_some(scope.caller.name.as_str());
    let slot = Slot::take(token, &id.to_string())?;
    let (tx, rx) = mpsc::channel::<Event>(16);
    tokio::spawn(async move {
        let mut client = Client { tx, at: after, quiet_since: tokio::time::Instant::now() };
        if let Err(closed) = relay(&st, &id, running, &mut client).await {
            closed.count(&id);
        }
        drop(slot);
    });
    let events =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx)) });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(KEEPALIVE)).into_response())
}

/// What etcd says of `id` while it runs: its running marker, or for a run younger than a
/// second (which has none yet) its claim as won — taken by a worker and not yet closed.
pub(crate) async fn running_marker(st: &AppState, id: &ExecutionId) -> ApiResult<Option<RunningExecution>> {
    let mut kv = st.client.kv_client();
    let reads = Txn::new().and_then([TxnOp::get(st.keys.running(id), None), TxnOp::get(st.keys.claim(id), None)]);
    let resp = etcd("get_running", kv.txn(reads)).await?;
    let mut found = resp.op_responses().into_iter().map(|r| match r {
        TxnOpResponse::Get(get) => get.kvs().first().cloned(),
        _ => None,
    });
    let (marker, claim) = (found.next().flatten(), found.next().flatten());
    if let Some(kv) = marker {
        return Ok(RunningExecution::from_stored(id.clone(), kv.value(), kv.create_revision()));
    }
    Ok(claim.and_then(|kv| {
        let claim: Claim = serde_json::from_slice(kv.value()).ok()?;
        (claim.state() == ClaimState::Running && kv.version() == 1)
            .then(|| RunningExecution::from_claim(id, &claim, kv.create_revision()))
    }))
}

/// The executions of `job` running now, as [`running_marker`] tells them: claims taken and not
/// closed, and running markers (a run past its claim's retention has only its marker).
pub(crate) async fn running_of_job(st: &AppState, job: &str) -> ApiResult<std::collections::BTreeSet<ExecutionId>> {
    let prefix = |p: String| TxnOp::get(p, Some(etcd_client::GetOptions::new().with_prefix()));
    let reads = Txn::new().and_then([prefix(st.keys.job_claims_prefix(job)), prefix(st.keys.job_running_prefix(job))]);
    let resp = etcd("get_running", st.client.kv_client().txn(reads)).await?;
    let mut running = std::collections::BTreeSet::new();
    for r in resp.op_responses() {
        let TxnOpResponse::Get(get) = r else { continue };
        for kv in get.kvs() {
            match st.keys.parse(kv.key()) {
                Some(etcron_model::keys::Key::Running(id)) => {
                    running.insert(id);
                }
                Some(etcron_model::keys::Key::Claim(id)) => {
                    let taken = serde_json::from_slice::<Claim>(kv.value())
                        .is_ok_and(|c| c.state() == ClaimState::Running && kv.version() == 1);
                    if taken {
                        running.insert(id);
                    }
                }
                _ => {}
            }
        }
    }
    Ok(running)
}

/// Whether `id` will have a record without running now: a run request for it is waiting (a
/// manual run not yet claimed, a retry in its backoff), or its claim is closed and its record is
/// on its way to MongoDB.
async fn coming(st: &AppState, id: &ExecutionId) -> ApiResult<bool> {
    let reads = Txn::new().and_then([
        TxnOp::get(st.keys.claim(id), Some(etcd_client::GetOptions::new().with_count_only())),
        TxnOp::get(st.keys.job_trigger_prefix(&id.job), Some(etcd_client::GetOptions::new().with_prefix())),
    ]);
    let resp = etcd("get_coming", st.client.kv_client().txn(reads)).await?;
    let mut gets = resp.op_responses().into_iter().filter_map(|r| match r {
        TxnOpResponse::Get(get) => Some(get),
        _ => None,
    });
    if gets.next().is_some_and(|claim| claim.count() > 0) {
        return Ok(true);
    }
    Ok(gets.next().is_some_and(|triggers| {
        triggers.kvs().iter().any(|kv| {
            let (Some(etcron_model::keys::Key::Trigger { job, request_id }), Ok(request)) =
                (st.keys.parse(kv.key()), serde_json::from_slice::<TriggerRequest>(kv.value()))
            else {
                return false;
            };
            request.execution(&job, &request_id) == *id
        })
    }))
}

/// `?after=N`: the output offset a reconnecting client resumes at (0 without it).
fn after_offset(query: Option<&str>) -> ApiResult<u64> {
    let params = crate::query::Params::parse(query, &["after"])?;
    let mut after = 0;
    for (_, value) in params.iter() {
        after = value.parse().map_err(|_| {
            crate::query::invalid("after", format!("{value:?} is not an output offset (a whole number of bytes)"))
        })?;
    }
    Ok(after)
}

/// One client's side of a stream.
struct Client {
    tx: mpsc::Sender<Event>,
    /// The output offset it has read up to.
    at: u64,
    /// Since when it was sent nothing but keepalives.
    quiet_since: tokio::time::Instant,
}

/// Why the master closed a stream before its end.
enum Closed {
    /// The client is gone (or stopped reading for [`SEND_STALL`]).
    Gone { stalled: bool },
    /// Nothing but keepalives for [`QUIET_LIMIT`]; the client was told.
    Quiet,
}

impl Closed {
    fn count(&self, id: &ExecutionId) {
        let reason = match self {
            Self::Gone { stalled: false } => return,
            Self::Gone { stalled: true } => "stalled",
            Self::Quiet => "quiet",
        };
        crate::metrics::METRICS.streams_closed.with_label_values(&[reason]).inc();
        tracing::info!(execution_id = %id, reason, "an execution stream was closed by the master");
    }
}

impl Client {
    /// Sends `event`; a client that does not take it within [`SEND_STALL`] is gone.
    async fn send(&mut self, event: Event) -> Result<(), Closed> {
        match self.tx.send_timeout(event, SEND_STALL).await {
            Ok(()) => {
                self.quiet_since = tokio::time::Instant::now();
                Ok(())
            }
            Err(mpsc::error::SendTimeoutError::Timeout(_)) => Err(Closed::Gone { stalled: true }),
            Err(mpsc::error::SendTimeoutError::Closed(_)) => Err(Closed::Gone { stalled: false }),
        }
    }

    /// Resolves when the stream has been quiet for [`QUIET_LIMIT`], after telling the client.
    async fn quiet(&self) -> Closed {
        let limit = quiet_limit();
        tokio::time::sleep_until(self.quiet_since + limit).await;
        let message = format!(
            "nothing new for {}s: this stream is closed; open it again with ?after={} to go on following",
            limit.as_secs(),
            self.at
        );
        let idle = Event::default().event("idle").data(json!({ "message": message, "after": self.at }).to_string());
        let _ = self.tx.try_send(idle);
        Closed::Quiet
    }
}

/// Relays the worker's live output while `id` runs (as soon as it runs, for one requested but
/// not started), then ends the stream with its final record.
async fn relay(
    st: &AppState,
    id: &ExecutionId,
    mut running: Option<RunningExecution>,
    client: &mut Client,
) -> Result<(), Closed> {
    let mut followed = false;
    let mut alive = tokio::time::Instant::now();
    loop {
        if let Some(r) = running.take().filter(|_| !followed) {
            followed = true;
            live(st, id, &r, client).await?;
        }
        if client.tx.is_closed() {
            return Err(Closed::Gone { stalled: false });
        }
        match st.store.get(&id.to_string()).await {
            Ok(Some(record)) if record.status != Status::Running => {
                return finish(client, record).await;
            }
            Ok(_) => {}
            // MongoDB away: the final record is spooled by the worker; keep waiting (bounded
            // by FINAL_RECORD_WAIT once the run is over).
            Err(e) => tracing::debug!(execution_id = %id, error = %e, "reading the record while following; retrying"),
        }
        match running_marker(st, id).await {
            Ok(Some(r)) => {
                alive = tokio::time::Instant::now();
                running = Some(r);
            }
            // Requested and not started yet (or etcd cannot tell): keep waiting.
            Ok(None) if followed || !coming(st, id).await.unwrap_or(true) => {}
            Ok(None) | Err(_) => alive = tokio::time::Instant::now(),
        }
        if alive.elapsed() > FINAL_RECORD_WAIT {
            let message = format!(
                "the execution is no longer running but its final record did not arrive within {}s (MongoDB unreachable?); GET /api/executions/{id} later",
                FINAL_RECORD_WAIT.as_secs()
            );
            return client.send(Event::default().event("error").data(json!({ "message": message }).to_string())).await;
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            closed = client.quiet() => return Err(closed),
        }
    }
}

/// The worker's live output of `running`, relayed from this master's feed of it until the run
/// ends or cannot be followed.
async fn live(st: &AppState, id: &ExecutionId, running: &RunningExecution, client: &mut Client) -> Result<(), Closed> {
    let Some((url, token)) = worker_endpoint(st, &running.worker_id).await else {
        tracing::debug!(execution_id = %id, worker_id = %running.worker_id, "worker advertises no live output");
        return Ok(());
    };
    let mut reader = feed::follow(&id.to_string(), &url, &token, client.at);
    loop {
        for item in reader.take() {
            let event = match item {
                Item::Output(text) => {
                    client.at += text.len() as u64;
                    Event::default().event("output").data(json!({ "text": text }).to_string())
                }
                Item::Gap(n) => {
                    client.at += n;
                    Event::default().event("gap").data(json!({ "skipped_bytes": n }).to_string())
                }
                Item::Progress(reports) => Event::default().event("progress").data(reports.to_string()),
                Item::End(End::Ended | End::Broken(_)) => return Ok(()),
            };
            client.send(event).await?;
        }
        tokio::select! {
            () = reader.changed() => {}
            () = client.tx.closed() => return Err(Closed::Gone { stalled: false }),
            closed = client.quiet() => return Err(closed),
        }
    }
}

/// The final events: the recorded output past what the client has read (all of it for a client
/// that read nothing; the rest for one that resumes with `?after=N` after the run ended), then
/// the record.
async fn finish(client: &mut Client, record: ExecutionRecord) -> Result<(), Closed> {
    for piece in etcron_model::output::rendered_from(&record.output, record.output_truncated, client.at) {
        let event = match piece {
            etcron_model::output::Piece::Bytes(text) => {
                client.at += text.len() as u64;
                let text = String::from_utf8_lossy(&text);
                Event::default().event("output").data(json!({ "text": text }).to_string())
            }
            etcron_model::output::Piece::Gap(n) => {
                client.at += n;
                Event::default().event("gap").data(json!({ "skipped_bytes": n }).to_string())
            }
        };
        client.send(event).await?;
    }
    let value = serde_json::to_value(&record).unwrap_or(Value::Null);
    client.send(Event::default().event("status").data(value.to_string())).await
}

/// The live output URL and token of a live worker, when the URL has the shape a worker
/// advertises (see [`advertised_shape`]).
pub(crate) async fn worker_endpoint(st: &AppState, worker_id: &str) -> Option<(String, String)> {
    let mut kv = st.client.kv_client();
    let resp = etcd("get_worker", kv.get(st.keys.worker(worker_id), None)).await.ok()?;
    let info: WorkerInfo = serde_json::from_slice(resp.kvs().first()?.value()).ok()?;
    let url = info.output_url?;
    if !advertised_shape(&url) {
        tracing::warn!(worker_id, url = %url, "ignoring the worker's output_url: not http(s)://host[:port] as workers advertise it");
        return None;
    }
    Some((url, info.output_token?))
}

/// Whether `url` is what a worker advertises: `http://` or `https://`, a host and a port, and
/// nothing else (no user, path, query or fragment). The master appends its own path and sends
/// the worker's token only there. Whoever can write etcd can write any job, so a registration is
/// trusted as much as etcd's access control; this keeps a malformed or planted entry from
/// pointing the master at arbitrary paths with credentials.
fn advertised_shape(url: &str) -> bool {
    let Ok(parsed) = reqwest::Url::parse(url) else { return false };
    matches!(parsed.scheme(), "http" | "https")
        && parsed.host_str().is_some_and(|h| !h.is_empty())
        && parsed.username().is_empty()
        && parsed.password().is_none()
        && matches!(parsed.path(), "" | "/")
        && parsed.query().is_none()
        && parsed.fragment().is_none()
        && !url.contains('@')
}

/// What the task of a running execution reported lately (`{"progress", "checkpoint"}`), asked
/// of the worker running it; `None` when it has nothing to say or cannot be reached within a
/// second (the API then shows the record without it).
pub(crate) async fn reports_of(st: &AppState, worker_id: &str, id: &ExecutionId) -> Option<Value> {
    let (url, token) = worker_endpoint(st, worker_id).await?;
    let target = format!("{url}/executions/{}/progress", etcron_model::percent_encode(&id.to_string()));
    let ask = HTTP.get(&target).bearer_auth(token).timeout(REPORTS_WAIT).send();
    let resp = ask.await.ok().filter(|r| r.status().is_success())?;
    resp.json::<Value>().await.ok().filter(Value::is_object)
}

/// Longest the API waits for a worker's answer about a running task's progress.
const REPORTS_WAIT: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_bounded_per_token_and_per_execution() {
        assert_eq!((MAX_STREAMS_PER_TOKEN, MAX_STREAMS_PER_EXECUTION), (16, 32));
        let mine: Vec<Slot> =
            (0..MAX_STREAMS_PER_TOKEN).map(|_| Slot::take(Some("unit-a"), "unit-j@1#1").unwrap()).collect();
        let refused = Slot::take(Some("unit-a"), "unit-j@2#1").err().unwrap();
        assert_eq!((refused.status, refused.code), (StatusCode::TOO_MANY_REQUESTS, "too_many_streams"));
        assert!(refused.message.contains("MAX_STREAMS_PER_TOKEN"), "{}", refused.message);
        let theirs: Vec<Slot> = (0..MAX_STREAMS_PER_EXECUTION - MAX_STREAMS_PER_TOKEN)
            .map(|_| Slot::take(Some("unit-b"), "unit-j@1#1").unwrap())
            .collect();
        let refused = Slot::take(None, "unit-j@1#1").err().unwrap();
        assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(refused.message.contains("MAX_STREAMS_PER_EXECUTION"), "{}", refused.message);
        drop((mine, theirs));
        assert!(Slot::take(Some("unit-c"), "unit-j@1#1").is_ok(), "closed streams free their places");
        let anonymous: Vec<Slot> =
            (0..MAX_STREAMS_PER_TOKEN + 1).map(|_| Slot::take(None, "unit-k@1#1").unwrap()).collect();
        assert_eq!(anonymous.len(), 17, "without tokens only the per-execution bound applies");
    }

    #[test]
    fn only_urls_shaped_as_workers_advertise_them_are_followed() {
        assert!(advertised_shape("http://10.0.0.5:8071"));
        assert!(advertised_shape("https://worker-1.internal:8071/"));
        for bad in [
            "http://169.254.169.254/latest/meta-data",
            "http://user:pw@10.0.0.5:8071",
            "http://10.0.0.5:8071?x=1",
            "http://10.0.0.5:8071#f",
            "file:///etc/passwd",
            "gopher://10.0.0.5:70",
            "10.0.0.5:8071",
        ] {
            assert!(!advertised_shape(bad), "{bad}");
        }
    }
}
