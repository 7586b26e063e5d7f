//! Live output of running executions: what each shell task printed so far, kept bounded like
//! the record's output, and served to masters (`GET /executions/{id}/output`, newline-delimited
//! JSON) so operators can follow a run while it happens. Masters find the server and its token
//! in the worker's `{ns}/workers/{id}` entry; nothing else hands the token out. Masters also ask
//! it for a task's latest progress (`GET /executions/{id}/progress`).
//!
//! Tasks report progress on a listener of their own ([`serve_progress`]: `POST
//! /executions/{id}/progress` with the execution's own token, `crate::tasks::progress`), so however many
//! followers hold the output server's connections, reports and checkpoints are still taken.
//! Report lines of the output go to the same tracker.
//!
//! Both servers may face anyone who can reach them, token or not, so they run with
//! `common::serve`'s limits: a request's head must arrive within [`HEADER_READ_TIMEOUT`]; the
//! output server closes a connection after [`IDLE_TIMEOUT`] without a byte read or written (a
//! follower gets a heartbeat every [`HEARTBEAT`], so a live stream never idles; one that stopped
//! reading stops taking bytes once its buffers are full) and holds at most [`MAX_CONNECTIONS`],
//! at most [`MAX_FOLLOWERS`] of them following one execution (a master opens one per execution
//! it relays, however many clients follow it there); the progress server holds at most
//! [`PROGRESS_CONNECTIONS`], idle for at most [`PROGRESS_IDLE`], and answers a wrong token and an
//! execution that does not run here alike, at most [`WRONG_TOKENS_PER_MINUTE`] times a minute
//! per address (then 429 until the minute is over; a right token always passes).

use etcron_common::hash::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use etcron_model::output::{BoundedOutput, Piece, Utf8Chunks};
use etcron_model::progress::{LineScanner, Report};
use serde_json::json;
use tokio::sync::watch;

use crate::tasks::progress::{Refusal, Snapshot, Tracker};

/// A follower with nothing new to read is sent an empty line this often, so a master can tell
/// a quiet task from a vanished worker.
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// Longest a client may take to send a request's head (slowloris).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection with nothing read or written for this long is closed (kept-alive connections
/// between requests, followers that stopped reading). More than [`HEARTBEAT`].
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Most connections served at once (masters open one per client following a run).
pub const MAX_CONNECTIONS: usize = 256;
/// Most followers of one execution at once: more are refused with 503, so one execution's
/// followers cannot take every connection of [`MAX_CONNECTIONS`].
pub const MAX_FOLLOWERS: usize = 32;
/// Most connections the progress server holds at once (tasks of this worker, and whatever a
/// remote HTTP task's server sends).
pub const PROGRESS_CONNECTIONS: usize = 256;
/// A progress connection with nothing read or written for this long is closed (reports are
/// short requests; nothing is streamed there).
pub const PROGRESS_IDLE: Duration = Duration::from_secs(10);
/// Wrong tokens (or executions not running here) one address may send the progress server in a
/// minute; more get 429 until the minute is over.
pub const WRONG_TOKENS_PER_MINUTE: u32 = 10;

/// One execution's output as it is produced.
#[derive(Debug)]
pub struct LiveOutput {
    buf: Mutex<BoundedOutput>,
    /// (bytes produced so far, finished): followers wake on every change.
    progress: watch::Sender<(u64, bool)>,
    /// The task's reports, when it can make them (a shell task's).
    tracker: Option<Arc<Tracker>>,
    /// Report lines of the output, found as it comes (a shell task's; an HTTP response's
    /// body is not read for them).
    scanner: Option<Mutex<LineScanner>>,
    /// Followers now reading it (at most [`MAX_FOLLOWERS`]).
    followers: AtomicUsize,
    /// The output so far ends a line (or is empty): a [`LiveOutput::note`] needs no newline first.
    at_line_start: AtomicBool,
}

impl LiveOutput {
    /// Output bounded to `limit` bytes (head + tail), as the record keeps it.
    #[must_use]
    pub fn new(limit: usize) -> Self {
        Self::with_tracker(limit, None, Lines::Ignored)
    }

    /// As [`LiveOutput::new`], with the task's reports going to `tracker` (and its report
    /// lines, when `lines` says they are reports).
    #[must_use]
    pub fn with_tracker(limit: usize, tracker: Option<Arc<Tracker>>, lines: Lines) -> Self {
        Self {
            buf: Mutex::new(BoundedOutput::new(limit)),
            progress: watch::channel((0, false)).0,
            tracker,
            scanner: (lines == Lines::Reports).then(|| Mutex::new(LineScanner::default())),
            followers: AtomicUsize::new(0),
            at_line_start: AtomicBool::new(true),
        }
    }

    /// Counts a follower in, unless it has [`MAX_FOLLOWERS`] already; the follower counts
    /// itself out when dropped.
    fn follower(self: &Arc<Self>) -> Option<Follower> {
        let taken =
            self.followers.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < MAX_FOLLOWERS).then_some(n + 1));
        taken.ok()?;
        crate::metrics::METRICS.followers.inc();
        Some(Follower {
            rx: self.progress.subscribe(),
            reports: self.tracker().map(|t| t.subscribe()),
            reported: 0,
            live: self.clone(),
            at: 0,
            text: Utf8Chunks::default(),
            ended: false,
        })
    }

    /// The task's reports, when it can make them.
    #[must_use]
    pub fn tracker(&self) -> Option<&Arc<Tracker>> {
        self.tracker.as_ref()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BoundedOutput> {
        self.buf.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends what the task wrote; its report lines go to the tracker, and a line saying why a
    /// result was refused follows the line that reported it.
    pub fn push(&self, bytes: &[u8]) {
        let mut notes = Vec::new();
        if let (Some(tracker), Some(scanner)) = (&self.tracker, &self.scanner) {
            let lines = scanner.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(bytes);
            notes = lines.into_iter().filter_map(|(end, line)| Some((end, tracker.line(&line)?))).collect();
        }
        let total = {
            let mut buf = self.lock();
            let mut from = 0;
            for (end, note) in notes {
                buf.push(&bytes[from..end]);
                buf.push(format!("{note}\n").as_bytes());
                from = end;
            }
            buf.push(&bytes[from..]);
            if let Some(last) = bytes.last() {
                self.at_line_start.store(*last == b'\n', Ordering::Relaxed);
            }
            buf.total()
        };
        self.progress.send_modify(|p| p.0 = total);
    }

    /// Appends a line of etcron's own (why a run has no result), on a line of its own.
    pub fn note(&self, line: &str) {
        let start = if self.at_line_start.load(Ordering::Relaxed) { "" } else { "\n" };
        self.push(format!("{start}{line}\n").as_bytes());
    }

    /// No more output will come; followers read the rest and end.
    pub fn finish(&self) {
        self.progress.send_modify(|p| p.1 = true);
    }

    /// The record's output: head, an omission marker, tail; and whether anything was cut.
    #[must_use]
    pub fn render(&self) -> (String, bool) {
        let buf = self.lock();
        (buf.render(), buf.truncated())
    }

    fn read_from(&self, from: u64) -> (Vec<Piece>, u64) {
        self.lock().read_from(from)
    }
}

/// Whether `::etcron …` lines of an output are the task's reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// A shell task's output: they are.
    Reports,
    /// An HTTP response: it is only output.
    Ignored,
}

/// The live outputs of this worker's running executions, by execution id.
#[derive(Debug, Default)]
pub struct LiveOutputs {
    map: Mutex<HashMap<String, Arc<LiveOutput>>>,
}

impl LiveOutputs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<LiveOutput>>> {
        self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes `id`'s output (and its reports, to `tracker`) followable until the guard is
    /// dropped (which also ends the followers).
    pub fn open(&self, id: &str, limit: usize, tracker: Option<Arc<Tracker>>, lines: Lines) -> LiveGuard<'_> {
        let live = Arc::new(LiveOutput::with_tracker(limit, tracker, lines));
        self.lock().insert(id.to_owned(), live.clone());
        LiveGuard { outputs: self, id: id.to_owned(), live }
    }

    #[must_use]
    pub fn get(&self, id: &str) -> Option<Arc<LiveOutput>> {
        self.lock().get(id).cloned()
    }
}

/// Keeps one execution's output in [`LiveOutputs`]; removes it and ends its followers on drop.
#[derive(Debug)]
pub struct LiveGuard<'a> {
    outputs: &'a LiveOutputs,
    id: String,
    live: Arc<LiveOutput>,
}

impl LiveGuard<'_> {
    #[must_use]
    pub fn output(&self) -> Arc<LiveOutput> {
        self.live.clone()
    }
}

impl Drop for LiveGuard<'_> {
    fn drop(&mut self) {
        self.live.finish();
        let mut map = self.outputs.lock();
        if map.get(&self.id).is_some_and(|l| Arc::ptr_eq(l, &self.live)) {
            map.remove(&self.id);
        }
    }
}

#[derive(Clone)]
struct ServerState {
    outputs: Arc<LiveOutputs>,
    token: Arc<str>,
}

/// Serves live output and progress to masters on `addr`, for requests bearing `token`.
/// Returns the bound address (`addr` may ask for port 0).
pub async fn serve(addr: SocketAddr, outputs: Arc<LiveOutputs>, token: String) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tracing::info!(addr = %bound, "serving live output of running executions");
    let app = axum::Router::new()
        .route("/executions/{id}/output", axum::routing::get(follow))
        .route("/executions/{id}/progress", axum::routing::get(latest))
        .with_state(ServerState { outputs, token: token.into() });
    // Masters are its only clients: no per-address cap below the total.
    let limits = etcron_common::serve::Limits {
        max_connections: MAX_CONNECTIONS,
        per_peer: MAX_CONNECTIONS,
        header_read: HEADER_READ_TIMEOUT,
        idle: IDLE_TIMEOUT,
        ..etcron_common::serve::Limits::default()
    };
    spawn_server("live output", listener, app, limits);
    Ok(bound)
}

/// Serves tasks' progress reports on `addr` (`POST /executions/{id}/progress`, each with its
/// execution's token), apart from the output server. Returns the bound address.
pub async fn serve_progress(addr: SocketAddr, outputs: Arc<LiveOutputs>) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tracing::info!(addr = %bound, "taking progress reports of running tasks");
    let app = progress_app(outputs);
    // Tasks of this machine all come from one address: no per-address cap below the total.
    let limits = etcron_common::serve::Limits {
        max_connections: PROGRESS_CONNECTIONS,
        per_peer: PROGRESS_CONNECTIONS,
        header_read: HEADER_READ_TIMEOUT,
        idle: PROGRESS_IDLE,
        ..etcron_common::serve::Limits::default()
    };
    spawn_server("progress", listener, app, limits);
    Ok(bound)
}

/// The progress server's routes.
fn progress_app(outputs: Arc<LiveOutputs>) -> axum::Router {
    axum::Router::new()
        .route("/executions/{id}/progress", axum::routing::post(report))
        .layer(axum::extract::DefaultBodyLimit::max(etcron_model::progress::MAX_BODY_BYTES))
        .with_state(ProgressState { outputs, wrong: Arc::new(WrongTokens::default()) })
}

fn spawn_server(
    what: &'static str,
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: etcron_common::serve::Limits,
) {
    etcron_common::task::spawn(async move {
        if let Err(e) = etcron_common::serve::serve(listener, app, limits, std::future::pending()).await {
            tracing::error!(error = %e, server = what, "server failed");
        }
    });
}

/// Compares without stopping at the first difference, so timing does not tell how much of a
/// guessed token was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn bearer(headers: &HeaderMap) -> &str {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
}

/// The running shell execution `id`, to a master (its token); the status and why when not.
fn for_master(st: &ServerState, id: &str, headers: &HeaderMap) -> Result<Arc<LiveOutput>, (StatusCode, &'static str)> {
    if !same(bearer(headers).as_bytes(), st.token.as_bytes()) {
        return Err((StatusCode::UNAUTHORIZED, "a master's bearer token is required\n"));
    }
    st.outputs.get(id).ok_or((StatusCode::NOT_FOUND, "no running shell execution with this id here\n"))
}

async fn follow(State(st): State<ServerState>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let live = match for_master(&st, &id, &headers) {
        Ok(live) => live,
        Err(refused) => return refused.into_response(),
    };
    let Some(follower) = live.follower() else {
        crate::metrics::METRICS.followers_refused.with_label_values(&["per_execution"]).inc();
        tracing::warn!(execution_id = %id, limit = MAX_FOLLOWERS, "a follower of a running execution refused: it has the most followers one execution may have");
        let message = format!("execution {id} has {MAX_FOLLOWERS} followers, the most one execution may have (MAX_FOLLOWERS); try again later\n");
        return (StatusCode::SERVICE_UNAVAILABLE, message).into_response();
    };
    let body = Body::from_stream(futures::stream::unfold(follower, |mut f| async move {
        let chunk = f.next().await?;
        Some((Ok::<_, Infallible>(chunk), f))
    }));
    ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}

/// `GET /executions/{id}/progress` (a master): the task's latest progress and checkpoint.
async fn latest(State(st): State<ServerState>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let live = match for_master(&st, &id, &headers) {
        Ok(live) => live,
        Err(refused) => return refused.into_response(),
    };
    let snapshot = live.tracker().map(|t| t.snapshot()).unwrap_or_default();
    axum::Json(snapshot).into_response()
}

#[derive(Clone)]
struct ProgressState {
    outputs: Arc<LiveOutputs>,
    wrong: Arc<WrongTokens>,
}

/// Wrong tokens by source address, in windows of a minute.
#[derive(Default)]
struct WrongTokens {
    /// Address: (start of its window, wrong tokens in it).
    seen: Mutex<HashMap<IpAddr, (tokio::time::Instant, u32)>>,
    /// When a refusal was last logged (at most once a minute).
    logged: Mutex<Option<tokio::time::Instant>>,
}

/// Addresses [`WrongTokens`] keeps at most; past it, windows already over are forgotten.
const WRONG_TOKEN_ADDRESSES: usize = 4096;
const MINUTE: Duration = Duration::from_secs(60);

impl WrongTokens {
    /// Counts a wrong token from `ip`; true when it is past [`WRONG_TOKENS_PER_MINUTE`].
    fn over(&self, ip: IpAddr) -> bool {
        let now = tokio::time::Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.len() >= WRONG_TOKEN_ADDRESSES {
            seen.retain(|_, (start, _)| now.duration_since(*start) < MINUTE);
        }
        let (start, n) = seen.entry(ip).or_insert((now, 0));
        if now.duration_since(*start) >= MINUTE {
            (*start, *n) = (now, 0);
        }
        *n = n.saturating_add(1);
        *n > WRONG_TOKENS_PER_MINUTE
    }

    /// Counts and logs (at most once a minute) a refused report.
    fn note(&self, peer: SocketAddr, id: &str, limited: bool) {
        let reason = if limited { "limited" } else { "token" };
        crate::metrics::METRICS.progress_refused.with_label_values(&[reason]).inc();
        let mut logged = self.logged.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if logged.is_none_or(|at| at.elapsed() >= MINUTE) {
            *logged = Some(tokio::time::Instant::now());
            tracing::warn!(%peer, execution_id = %id, reason, "a progress report with a wrong token or for an execution not running here was refused (said at most once a minute; etcron_worker_progress_refused_total counts them)");
        }
    }
}

/// `POST /executions/{id}/progress` (the task, with its own token): `{"percent", "message",
/// "checkpoint", "result"}`. 204 once taken (a checkpoint once etcd has it); 400 naming the
/// field; 413 for a body over `MAX_REPORT_BYTES` besides its result; 401 for
/// a wrong token and for an execution that does not run here alike (the answer does not tell
/// what runs where); 429 past [`WRONG_TOKENS_PER_MINUTE`] wrong ones from the address; 409 when
/// its claim is no longer its own; 503 when etcd failed the checkpoint (report it again).
async fn report(
    State(st): State<ProgressState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let answer = |status: StatusCode, field: Option<&str>, message: &str| {
        (status, axum::Json(json!({ "error": { "field": field, "message": message } }))).into_response()
    };
    let tracker = st.outputs.get(&id).and_then(|live| live.tracker().cloned());
    // An execution not running here is compared like a wrong token, and answered alike.
    let expected = tracker.as_ref().map_or(UNKNOWN, |t| t.token());
    if tracker.is_none() | !same(bearer(&headers).as_bytes(), expected.as_bytes()) {
        let limited = st.wrong.over(peer.ip());
        st.wrong.note(peer, &id, limited);
        if limited {
            let message = format!(
                "more than {WRONG_TOKENS_PER_MINUTE} wrong tokens from this address in a minute (WRONG_TOKENS_PER_MINUTE); try again later"
            );
            return answer(StatusCode::TOO_MANY_REQUESTS, None, &message);
        }
        return answer(
            StatusCode::UNAUTHORIZED,
            None,
            "the execution's ETCRON_PROGRESS_TOKEN is required as a bearer token, for an execution running here",
        );
    }
    let Some(tracker) = tracker else { unreachable!("checked above") };
    let parsed = match Report::from_json(&body) {
        Ok(r) => r,
        Err(e) if e.too_large => return answer(StatusCode::PAYLOAD_TOO_LARGE, Some(&e.field), &e.message),
        Err(e) => return answer(StatusCode::BAD_REQUEST, Some(&e.field), &e.message),
    };
    match tracker.report(parsed).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(Refusal::Fenced) => answer(
            StatusCode::CONFLICT,
            None,
            "this execution's claim is no longer its own (recorded lost, rerun elsewhere): stop",
        ),
        Err(Refusal::Unavailable(e)) => {
            answer(StatusCode::SERVICE_UNAVAILABLE, Some("checkpoint"), &format!("not stored, report it again: {e}"))
        }
    }
}

/// What a token is compared with when the execution does not run here (never a real token:
/// those are 32 hex digits).
const UNKNOWN: &str = "-not-a-progress-token-of-any-run-";

/// Reads one execution's output from the start, as lines of JSON: `{"output": text}`,
/// `{"gap": bytes}` where the bound cut output the follower had not read, `{"progress":
/// {progress, checkpoint}}` when the task reported something, `{}` heartbeats, and
/// `{"end": true}` once the task is done and everything was read.
struct Follower {
    live: Arc<LiveOutput>,
    rx: watch::Receiver<(u64, bool)>,
    /// The task's reports, when it can make them.
    reports: Option<watch::Receiver<Snapshot>>,
    /// The last report sent (its `seq`).
    reported: u64,
    at: u64,
    text: Utf8Chunks,
    ended: bool,
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.live.followers.fetch_sub(1, Ordering::SeqCst);
        crate::metrics::METRICS.followers.dec();
    }
}

impl Follower {
    async fn next(&mut self) -> Option<Bytes> {
        if self.ended {
            return None;
        }
        loop {
            let (total, finished) = *self.rx.borrow_and_update();
            let mut lines = String::new();
            if let Some(reports) = &self.reports {
                let snapshot = reports.borrow().clone();
                if snapshot.seq != self.reported {
                    self.reported = snapshot.seq;
                    lines.push_str(&json!({ "progress": snapshot }).to_string());
                    lines.push('\n');
                }
            }
            if total > self.at || finished {
                let (pieces, next) = self.live.read_from(self.at);
                self.at = next;
                for piece in pieces {
                    match piece {
                        Piece::Bytes(bytes) => line(&mut lines, "output", &self.text.push(&bytes)),
                        Piece::Gap(n) => {
                            let cut = self.text.flush();
                            line(&mut lines, "output", &cut);
                            lines.push_str(&json!({ "gap": n }).to_string());
                            lines.push('\n');
                        }
                    }
                }
                if finished {
                    let rest = self.text.flush();
                    line(&mut lines, "output", &rest);
                    lines.push_str("{\"end\":true}\n");
                    self.ended = true;
                }
            }
            if !lines.is_empty() {
                return Some(Bytes::from(lines));
            }
            let (reports, rx) = (&mut self.reports, &mut self.rx);
            let reported = async {
                // A sender gone means the run ended: the output's end comes through `rx`.
                let changed = match reports {
                    Some(r) => r.changed().await.is_ok(),
                    None => false,
                };
                if !changed {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = reported => {}
                changed = rx.changed() => {
                    if changed.is_err() {
                        // The output is gone without being finished (cannot happen while the
                        // guard lives); end the stream the same way.
                        self.ended = true;
                        return Some(Bytes::from_static(b"{\"end\":true}\n"));
                    }
                }
                () = tokio::time::sleep(HEARTBEAT) => return Some(Bytes::from_static(b"{}\n")),
            }
        }
    }
}

fn line(lines: &mut String, key: &str, text: &str) {
    if !text.is_empty() {
        lines.push_str(&json!({ key: text }).to_string());
        lines.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn follower(live: &Arc<LiveOutput>) -> Follower {
        live.follower().unwrap()
    }

    #[test]
    fn one_execution_has_at_most_max_followers() {
        assert_eq!(MAX_FOLLOWERS, 32);
        let live = Arc::new(LiveOutput::new(16));
        let mut held: Vec<Follower> = (0..MAX_FOLLOWERS).map(|_| follower(&live)).collect();
        assert!(live.follower().is_none(), "one more is refused");
        held.pop();
        assert!(live.follower().is_some(), "a follower that left frees its place");
    }

    #[tokio::test(start_paused = true)]
    async fn wrong_tokens_are_limited_per_address_for_a_minute() {
        assert_eq!((WRONG_TOKENS_PER_MINUTE, PROGRESS_IDLE, PROGRESS_CONNECTIONS), (10, Duration::from_secs(10), 256));
        let wrong = WrongTokens::default();
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap());
        for _ in 0..WRONG_TOKENS_PER_MINUTE {
            assert!(!wrong.over(a));
        }
        assert!(wrong.over(a), "the 11th in a minute is over");
        assert!(!wrong.over(b), "per address");
        tokio::time::advance(MINUTE).await;
        assert!(!wrong.over(a), "a new minute");
    }

    async fn next(f: &mut Follower) -> String {
        String::from_utf8(f.next().await.unwrap().to_vec()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_gets_what_was_printed_then_each_new_chunk_then_the_end() {
        let live = Arc::new(LiveOutput::new(1024));
        live.push(b"one\n");
        let mut f = follower(&live);
        assert_eq!(next(&mut f).await, "{\"output\":\"one\\n\"}\n");
        live.push("tw\u{f6}".as_bytes().split_last().unwrap().1);
        // "tw" and the first byte of "ö": the half character waits for its end.
        assert_eq!(next(&mut f).await, "{\"output\":\"tw\"}\n");
        live.push(&"\u{f6}".as_bytes()[1..]);
        live.push(b"\n");
        assert_eq!(next(&mut f).await, "{\"output\":\"\u{f6}\\n\"}\n");
        // Nothing new: a heartbeat after HEARTBEAT (paused clock: no real waiting).
        assert_eq!(next(&mut f).await, "{}\n");
        live.finish();
        assert_eq!(next(&mut f).await, "{\"end\":true}\n");
        assert!(f.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_follower_is_told_what_the_bound_cut() {
        let live = Arc::new(LiveOutput::new(8));
        live.push(b"abcdefghijklmnop");
        live.finish();
        let mut f = follower(&live);
        assert_eq!(next(&mut f).await, "{\"output\":\"abcd\"}\n{\"gap\":8}\n{\"output\":\"mnop\"}\n{\"end\":true}\n");
    }

    #[test]
    fn a_note_is_a_line_of_its_own() {
        let live = LiveOutput::new(1024);
        live.note("etcron: first");
        live.push(b"HTTP 200 OK\n{\"a\":1}");
        live.note("etcron: no result");
        live.push(b"more\n");
        live.note("etcron: last");
        assert_eq!(live.render().0, "etcron: first\nHTTP 200 OK\n{\"a\":1}\netcron: no result\nmore\netcron: last\n");
    }

    #[test]
    fn the_guard_removes_the_output_and_finishes_it() {
        let outputs = LiveOutputs::default();
        let live = {
            let guard = outputs.open("j@1#1", 16, None, Lines::Reports);
            assert!(outputs.get("j@1#1").is_some());
            guard.output()
        };
        assert!(outputs.get("j@1#1").is_none());
        assert!(live.progress.borrow().1);
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
        assert!(!same(b"", b"a"));
    }
}
