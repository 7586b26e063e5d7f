//! Live output of running executions: what each shell task printed so far, kept bounded like
//! the record's output, and served to masters (`GET /executions/{id}/output`, newline-delimited
//! JSON) so operators can follow a run while it happens. Masters find the server and its token
//! in the worker's `{ns}/workers/{id}` entry; nothing else hands the token out.
//!
//! The same server takes a task's progress reports (`POST /executions/{id}/progress` with the
//! execution's own token, `crate::progress`) and answers its latest progress to masters
//! (`GET /executions/{id}/progress`); report lines of the output go to the same tracker.
//!
//! The server may face anyone who can reach `output_listen`, token or not, so it runs with
//! `common::serve`'s limits: its request head must arrive within [`HEADER_READ_TIMEOUT`], it is
//! closed after [`IDLE_TIMEOUT`] without a byte read or written (a follower gets a heartbeat
//! every [`HEARTBEAT`], so a live stream never idles), and at most [`MAX_CONNECTIONS`] are open
//! at once; more are closed as soon as they are accepted.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use etcron_common::output::{BoundedOutput, Piece, Utf8Chunks};
use etcron_common::progress::{LineScanner, Report};
use serde_json::json;
use tokio::sync::watch;

use crate::progress::{Refusal, Snapshot, Tracker};

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
        }
    }

    /// The task's reports, when it can make them.
    #[must_use]
    pub fn tracker(&self) -> Option<&Arc<Tracker>> {
        self.tracker.as_ref()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BoundedOutput> {
        self.buf.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn push(&self, bytes: &[u8]) {
        if let (Some(tracker), Some(scanner)) = (&self.tracker, &self.scanner) {
            let lines = scanner.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(bytes);
            for line in lines {
                tracker.line(&line);
            }
        }
        let total = {
            let mut buf = self.lock();
            buf.push(bytes);
            buf.total()
        };
        self.progress.send_modify(|p| p.0 = total);
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

/// Serves live output on `addr` for requests bearing `token`. Returns the bound address
/// (`addr` may ask for port 0).
pub async fn serve(addr: SocketAddr, outputs: Arc<LiveOutputs>, token: String) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tracing::info!(addr = %bound, "serving live output of running executions");
    let app = axum::Router::new()
        .route("/executions/{id}/output", axum::routing::get(follow))
        .route("/executions/{id}/progress", axum::routing::get(latest).post(report))
        .layer(axum::extract::DefaultBodyLimit::max(etcron_common::progress::MAX_REPORT_BYTES))
        .with_state(ServerState { outputs, token: token.into() });
    // Masters are its only clients: no per-address cap below the total.
    let limits = etcron_common::serve::Limits {
        max_connections: MAX_CONNECTIONS,
        per_peer: MAX_CONNECTIONS,
        header_read: HEADER_READ_TIMEOUT,
        idle: IDLE_TIMEOUT,
        ..etcron_common::serve::Limits::default()
    };
    tokio::spawn(async move {
        if let Err(e) = etcron_common::serve::serve(listener, app, limits, std::future::pending()).await {
            tracing::error!(error = %e, "live output server failed");
        }
    });
    Ok(bound)
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
    let reports = live.tracker().map(|t| t.subscribe());
    let follower = Follower {
        rx: live.progress.subscribe(),
        reports,
        reported: 0,
        live,
        at: 0,
        text: Utf8Chunks::default(),
        ended: false,
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

/// `POST /executions/{id}/progress` (the task, with its own token): `{"percent", "message",
/// "checkpoint"}`. 204 once taken (a checkpoint once etcd has it); 400 naming the field; 401;
/// 404 when the execution does not run here; 409 when its claim is no longer its own; 503 when
/// etcd failed the checkpoint (report it again).
async fn report(State(st): State<ServerState>, Path(id): Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    let answer = |status: StatusCode, field: Option<&str>, message: &str| {
        (status, axum::Json(json!({ "error": { "field": field, "message": message } }))).into_response()
    };
    let Some(tracker) = st.outputs.get(&id).and_then(|live| live.tracker().cloned()) else {
        return answer(StatusCode::NOT_FOUND, None, "no running shell execution with this id here");
    };
    if !same(bearer(&headers).as_bytes(), tracker.token().as_bytes()) {
        return answer(
            StatusCode::UNAUTHORIZED,
            None,
            "the execution's ETCRON_PROGRESS_TOKEN is required as a bearer token",
        );
    }
    let parsed = match Report::from_json(&body) {
        Ok(r) => r,
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
        Follower {
            rx: live.progress.subscribe(),
            reports: None,
            reported: 0,
            live: live.clone(),
            at: 0,
            text: Utf8Chunks::default(),
            ended: false,
        }
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
