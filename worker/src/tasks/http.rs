//! Runs HTTP tasks: one request per execution through a pooled client, the status judged
//! against `expect_status`, the body captured bounded (head + tail) while it streams in, and
//! timeout, kill and lease loss aborting the request.
//!
//! Decisions an operator may want to know:
//! - **One client per process.** A single `reqwest::Client` is built on first use and shared by
//!   every HTTP execution, so executions of a job reuse kept-alive connections to its host.
//! - **Timeouts.** The job's `timeout` bounds the whole exchange: connecting, sending, waiting
//!   for the response and reading its body. A job without `timeout` has no total limit (as a
//!   shell task has none), but connecting is limited to [`CONNECT_TIMEOUT`] so an unreachable
//!   host fails instead of hanging.
//! - **Redirects** are followed by `http_client` (not by reqwest) up to [`MAX_REDIRECTS`] hops;
//!   more is a failed request. The status judged is the final response's. As in browsers,
//!   301/302/303 continue with a GET without body, 307/308 repeat the method and body. A hop to
//!   another origin (scheme, host or port) drops every `secret_headers` entry and
//!   `Authorization`, `Cookie`, `Proxy-Authorization`, `X-Etcron-Progress-Token` and
//!   `X-Etcron-Progress-Url`; a hop from `https` to `http` (or to any other scheme) is never
//!   followed: the run fails naming both URLs ([`crate::tasks::http_client::next_hop`]).
//! - **Where it connects**: the URL's and every hop's host is resolved and each address checked
//!   by [`crate::tasks::network`] (loopback, link-local and the control plane refused unless the
//!   worker's `task_network_allow` allows them) before anything is sent; a refusal fails the
//!   run, its reason the output's line too.
//! - **Success** is `expect_status` when the job sets it, any 2xx otherwise.
//! - **Output** is `HTTP {code} {reason}` on a line, then the response body as received (no
//!   decompression; the worker does not ask for compressed bodies), bounded to `max_output`
//!   bytes as the first and last halves, non-UTF-8 bytes replaced.
//! - **TLS** is rustls (reqwest's aws-lc-rs provider); server certificates are checked against
//!   the system's CA roots (`/etc/ssl/certs` and the like), so an internal CA added there is
//!   trusted. A worker without system roots still runs `http://` tasks; its `https://` tasks
//!   fail saying why.
//! - **Headers**: the job's own, the execution's identity headers (`X-Etcron-*`, added by the
//!   caller with [`with_default_headers`]), and `User-Agent: etcron-worker/{version}`, each
//!   overridable by the job. The `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY` environment variables of
//!   the worker apply. A body is sent as given, with no `Content-Type` unless the job sets one.
//!   A failover rerun also gets `X-Etcron-Checkpoint` (the checkpoint as JSON, non-ASCII
//!   escaped) and `X-Etcron-Resumed-From`; with the worker's live-output server configured,
//!   `X-Etcron-Progress-Url` and `X-Etcron-Progress-Token` say where to report progress.
//! - **Asynchronous tasks** (`task.async`): a `202 Accepted` answer starts polling its status
//!   URL ([`crate::tasks::http_poll`]); any other answer is judged as above.
//! - **Result** (`task.result_pointer`): a successful answer's body (its first
//!   [`MAX_RESULT_BODY_BYTES`]) is read as JSON and the value at the pointer is the run's result
//!   (an asynchronous task's: the value in its final status document). A body that is not JSON,
//!   a pointer that finds nothing (or `null`) or a value over the result's 64 KiB leave the run
//!   succeeded without a result, and the output's last line says why (`etcron: no result: …`).
//! - **Parents' results** go as `X-Etcron-Parent-Result` / `X-Etcron-Parents` (added by the
//!   caller, the JSON escaped to ASCII); one longer than
//!   [`crate::tasks::progress::MAX_PARENT_HEADER_BYTES`] is left out, and the output's last
//!   lines say so.

use std::collections::BTreeMap;
use std::sync::Arc;

use reqwest::{Method, StatusCode, Url};
use tokio::sync::watch;

pub use crate::tasks::http_client::HttpJob;
use crate::tasks::http_client::{self, header_map, redacted, status_line, Outgoing, SendError};
use crate::tasks::http_poll::{self, Polled};
use crate::tasks::live_output::LiveOutput;
use crate::tasks::shell::{run_request, Ending, Finished, StopReason};

pub use crate::tasks::http_client::{CONNECT_TIMEOUT, MAX_REDIRECTS};

/// Most of a response body read for `result_pointer`: a longer body gives no result.
pub const MAX_RESULT_BODY_BYTES: usize = 1024 * 1024;

/// Runs `job` until the response body has been read (and, for an asynchronous task, the
/// remote work ended), the request failed, the timeout passed, or `stop` carries a reason; the
/// latter two abort the request and send an asynchronous task's cancel request.
pub async fn run_http(
    job: HttpJob,
    output: Arc<LiveOutput>,
    mut stop: watch::Receiver<Option<StopReason>>,
) -> Finished {
    let mut status = None;
    let mut polled = Polled::default();
    let deadline = job.timeout.map(|t| tokio::time::Instant::now() + t);
    let ending = run_request(&mut stop, deadline, exchange(&job, &output, &mut status, &mut polled)).await;
    // An asynchronous task's remote work is cancelled too (a stop before the 202 knows no status URL).
    if matches!(ending, Ending::Stopped(_) | Ending::TimedOut) {
        http_poll::cancel(&job, &polled, &output).await;
    }
    let result = match polled.result.take() {
        Some(Ok(value)) => Some(value),
        Some(Err(why)) => {
            output.note(&format!("etcron: no result: {why}"));
            None
        }
        None => None,
    };
    for note in &job.notes {
        output.note(note);
    }
    let mut done = Finished::of_request(ending, status, output.render());
    done.result = result;
    done
}

/// The job's headers, plus each of `defaults` the job has no header of (names compared
/// case-insensitively, as HTTP does): the job's own values win.
#[must_use]
pub fn with_default_headers(
    own: &BTreeMap<String, String>,
    defaults: impl IntoIterator<Item = (String, String)>,
) -> BTreeMap<String, String> {
    let mut headers = own.clone();
    for (name, value) in defaults {
        if !own.keys().any(|k| k.eq_ignore_ascii_case(&name)) {
            headers.insert(name, value);
        }
    }
    headers
}

/// Sends the request and reads the response into `output`; `status` is set once known,
/// `polled` once an asynchronous task's status URL is, and with the result (or why there is
/// none) when the task has a `result_pointer` and succeeded.
async fn exchange(job: &HttpJob, output: &LiveOutput, status: &mut Option<u16>, polled: &mut Polled) -> Ending {
    let url = match Url::parse(&job.url) {
        Ok(u) => u,
        Err(e) => return Ending::RequestFailed(format!("invalid URL {}: {e}", job.url)),
    };
    let shown = redacted(&url);
    let Ok(method) = Method::from_bytes(job.method.as_bytes()) else {
        return Ending::RequestFailed(format!("invalid HTTP method {:?}", job.method));
    };
    let headers = match header_map(&job.headers) {
        Ok(h) => h,
        Err(e) => return Ending::RequestFailed(e),
    };
    let out = Outgoing {
        method,
        url,
        headers,
        body: job.body.clone(),
        secret_headers: &job.secret_headers,
        network: &job.network,
        what: "an HTTP task's request",
    };
    let response = match http_client::send(out).await {
        Ok(r) => r,
        Err(e) => return refused_or_failed(e, output),
    };
    let code = response.status();
    *status = Some(code.as_u16());
    output.push(status_line(code).as_bytes());
    let accepted = code == StatusCode::ACCEPTED && job.asynchronous.is_some();
    let location = response.headers().get(reqwest::header::LOCATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let answered_from = response.url().clone();
    let keep = match (accepted, &job.result_pointer) {
        (true, _) => etcron_model::spec::http_async::MAX_STATUS_BYTES,
        (false, Some(_)) => MAX_RESULT_BODY_BYTES + 1,
        (false, None) => 0,
    };
    let body = match read_body(response, output, keep).await {
        Ok(b) => b,
        Err(e) => return Ending::RequestFailed(format!("reading the response body from {shown} failed: {e}")),
    };
    if let (true, Some((poll, limit))) = (accepted, &job.asynchronous) {
        return http_poll::follow(job, poll, *limit, (&answered_from, location.as_deref(), &body), output, polled)
            .await;
    }
    let ok = match job.expect_status {
        Some(expected) => code.as_u16() == expected,
        None => code.is_success(),
    };
    if let (true, Some(pointer)) = (ok, &job.result_pointer) {
        polled.result = Some(body_result(pointer, &body));
    }
    Ending::Http { status: code.as_u16(), ok, expected: job.expect_status }
}

/// The run's result from a response `body` (its first bytes) at `pointer`, or why there is none.
fn body_result(pointer: &str, body: &[u8]) -> Result<serde_json::Value, String> {
    if body.len() > MAX_RESULT_BODY_BYTES {
        return Err(format!(
            "the response body is over {MAX_RESULT_BODY_BYTES} bytes, more than result_pointer {pointer:?} reads"
        ));
    }
    let doc: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| format!("the response body is not JSON ({e}), so result_pointer {pointer:?} finds nothing"))?;
    http_client::pointed_result(pointer, &doc, "the response body")
}

/// The run's end when a request got no response: a refusal is also the output's line.
pub(crate) fn refused_or_failed(e: SendError, output: &LiveOutput) -> Ending {
    if let SendError::Refused(why) = &e {
        output.push(format!("{why}\n").as_bytes());
    }
    Ending::RequestFailed(e.message())
}

/// Reads a response body chunk by chunk into `output` (which keeps only its bounded head and
/// tail); returns its first `keep` bytes.
pub(crate) async fn read_body(
    mut response: reqwest::Response,
    output: &LiveOutput,
    keep: usize,
) -> Result<Vec<u8>, String> {
    let mut kept = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                output.push(&chunk);
                let room = keep.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..room.min(chunk.len())]);
            }
            Ok(None) => return Ok(kept),
            Err(e) => return Err(http_client::error_chain(&e)),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::tasks::http_client::next_hop;
    use crate::tasks::network::TaskNetwork;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::oneshot;

    /// What the test server received.
    #[derive(Debug)]
    struct Seen {
        head: String,
        body: Vec<u8>,
    }

    impl Seen {
        fn header(&self, name: &str) -> Option<&str> {
            self.head.lines().skip(1).find_map(|line| {
                let (n, v) = line.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim())
            })
        }
    }

    /// Reads one request (head and a Content-Length body) from `stream`.
    async fn read_request(stream: &mut TcpStream) -> Seen {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "connection closed before the request head ended");
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
        let mut seen = Seen { head, body: buf[head_end..].to_vec() };
        let length: usize = seen.header("content-length").map_or(0, |v| v.parse().unwrap());
        while seen.body.len() < length {
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "connection closed before the request body ended");
            seen.body.extend_from_slice(&chunk[..n]);
        }
        seen
    }

    /// A server answering one request with `status_line`, `extra` headers and `body`; the
    /// handle yields what it received.
    async fn serve_once(status_line: &str, extra: &str, body: Vec<u8>) -> (String, tokio::task::JoinHandle<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook?x=1", listener.local_addr().unwrap());
        let head =
            format!("HTTP/1.1 {status_line}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n", body.len());
        let task = etcron_common::task::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let seen = read_request(&mut stream).await;
            stream.write_all(head.as_bytes()).await.unwrap();
            stream.write_all(&body).await.unwrap();
            stream.shutdown().await.unwrap();
            seen
        });
        (url, task)
    }

    /// A server that reads the request, says so on the channel, and never answers; it keeps
    /// the connection until the client closes it.
    async fn serve_silently() -> (String, oneshot::Receiver<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/slow", listener.local_addr().unwrap());
        let (tx, rx) = oneshot::channel();
        etcron_common::task::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            read_request(&mut stream).await;
            let _ = tx.send(());
            let mut sink = [0u8; 1024];
            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
        });
        (url, rx)
    }

    fn job(url: &str) -> HttpJob {
        HttpJob {
            method: "GET".to_owned(),
            url: url.to_owned(),
            headers: BTreeMap::new(),
            secret_headers: Vec::new(),
            body: None,
            expect_status: None,
            timeout: Some(Duration::from_secs(30)),
            asynchronous: None,
            tracker: None,
            network: Arc::new(TaskNetwork::new(crate::tasks::network::loopback(), Vec::new())),
            result_pointer: None,
            notes: Vec::new(),
        }
    }

    async fn run_limited(job: HttpJob, limit: usize, stop: watch::Receiver<Option<StopReason>>) -> Finished {
        run_http(job, Arc::new(LiveOutput::new(limit)), stop).await
    }

    fn no_stop() -> watch::Receiver<Option<StopReason>> {
        // The sender is dropped: nobody can stop the request.
        watch::channel(None).1
    }

    #[tokio::test]
    async fn ok_response_is_recorded_with_its_body() {
        let (url, server) = serve_once("200 OK", "", b"all good".to_vec()).await;
        let done = run_limited(job(&url), 64 * 1024, no_stop()).await;
        assert_eq!(done.ending, Ending::Http { status: 200, ok: true, expected: None });
        assert_eq!(done.http_status, Some(200));
        assert_eq!(done.output, "HTTP 200 OK\nall good");
        assert!(!done.output_truncated);
        assert_eq!((done.exit_code, done.signal), (None, None));
        let seen = server.await.unwrap();
        assert!(seen.head.starts_with("GET /hook?x=1 HTTP/1.1\r\n"), "{}", seen.head);
        assert_eq!(seen.header("user-agent"), Some(concat!("etcron-worker/", env!("CARGO_PKG_VERSION"))));
    }

    fn pointing(url: &str, pointer: &str) -> HttpJob {
        HttpJob { result_pointer: Some(pointer.to_owned()), ..job(url) }
    }

    #[tokio::test]
    async fn the_value_at_the_result_pointer_is_the_result() {
        let body = br#"{"data": {"rows": 12, "ids": [4, 5]}, "none": null}"#.to_vec();
        for (pointer, result) in [
            ("/data", serde_json::json!({"rows": 12, "ids": [4, 5]})),
            ("/data/ids/1", 5.into()),
            ("", serde_json::from_slice(&body).unwrap()),
        ] {
            let (url, _server) = serve_once("200 OK", "", body.clone()).await;
            let done = run_limited(pointing(&url, pointer), 64 * 1024, no_stop()).await;
            assert_eq!(done.ending, Ending::Http { status: 200, ok: true, expected: None });
            assert_eq!(done.result, Some(result), "{pointer:?}");
            assert!(!done.output.contains("etcron:"), "{}", done.output);
        }
        let (url, _server) = serve_once("200 OK", "", body.clone()).await;
        let done = run_limited(job(&url), 64 * 1024, no_stop()).await;
        assert_eq!(done.result, None, "no pointer, no result");
    }

    #[tokio::test]
    async fn no_result_leaves_the_run_succeeded_and_the_output_says_why() {
        let json = br#"{"data": {"rows": 12}, "none": null}"#.to_vec();
        let big = format!(r#"{{"big": "{}"}}"#, "x".repeat(64 * 1024)).into_bytes();
        for (body, pointer, why) in [
            (json.clone(), "/missing", r#"etcron: no result: result_pointer "/missing" finds nothing in the response body"#),
            (json.clone(), "/none", r#"etcron: no result: result_pointer "/none" finds null in the response body"#),
            (b"rows: 12".to_vec(), "", "etcron: no result: the response body is not JSON ("),
            (big, "/big", "etcron: no result: the value at result_pointer \"/big\" in the response body is 65538 bytes as JSON; a result is at most 65536"),
        ] {
            let (url, _server) = serve_once("200 OK", "", body).await;
            let done = run_limited(pointing(&url, pointer), 256 * 1024, no_stop()).await;
            assert_eq!(done.ending, Ending::Http { status: 200, ok: true, expected: None }, "{pointer:?}");
            assert_eq!(done.result, None);
            let last = done.output.lines().last().unwrap();
            assert!(last.starts_with(why), "{pointer:?}: {last}");
            assert!(done.output.ends_with('\n'));
        }
        // A failed request has no result, and nothing is said of one.
        let (url, _server) = serve_once("500 Internal Server Error", "", json.clone()).await;
        let done = run_limited(pointing(&url, "/data"), 64 * 1024, no_stop()).await;
        assert_eq!((done.result, done.output.contains("etcron:")), (None, false));
        // A body longer than what is read for the pointer.
        let mut long = br#"{"a": ""#.to_vec();
        long.extend(std::iter::repeat_n(b'x', MAX_RESULT_BODY_BYTES));
        long.extend_from_slice(br#""}"#);
        let (url, _server) = serve_once("200 OK", "", long).await;
        let done = run_limited(pointing(&url, "/a"), 1024, no_stop()).await;
        assert_eq!(done.result, None);
        assert!(
            done.output.ends_with("more than result_pointer \"/a\" reads\n"),
            "{}",
            &done.output[done.output.len() - 200..]
        );
    }

    #[tokio::test]
    async fn notes_end_the_output() {
        let (url, _server) = serve_once("200 OK", "", b"ok".to_vec()).await;
        let notes = vec!["etcron: X-Etcron-Parents left out".to_owned()];
        let done = run_limited(HttpJob { notes, ..job(&url) }, 1024, no_stop()).await;
        assert_eq!(done.output, "HTTP 200 OK\nok\netcron: X-Etcron-Parents left out\n");
    }

    #[tokio::test]
    async fn server_error_fails_without_expected_status() {
        let (url, _server) = serve_once("503 Service Unavailable", "", b"try later".to_vec()).await;
        let done = run_limited(job(&url), 64 * 1024, no_stop()).await;
        assert_eq!(done.ending, Ending::Http { status: 503, ok: false, expected: None });
        assert_eq!(done.http_status, Some(503));
        assert_eq!(done.output, "HTTP 503 Service Unavailable\ntry later");
    }

    #[tokio::test]
    async fn expected_status_decides_success() {
        let (url, _server) = serve_once("204 No Content", "", Vec::new()).await;
        let done = run_limited(HttpJob { expect_status: Some(204), ..job(&url) }, 64 * 1024, no_stop()).await;
        assert_eq!(done.ending, Ending::Http { status: 204, ok: true, expected: Some(204) });
        assert_eq!(done.output, "HTTP 204 No Content\n");

        // A 2xx other than the expected one is a failure.
        let (url, _server) = serve_once("200 OK", "", Vec::new()).await;
        let done = run_limited(HttpJob { expect_status: Some(204), ..job(&url) }, 64 * 1024, no_stop()).await;
        assert_eq!(done.ending, Ending::Http { status: 200, ok: false, expected: Some(204) });
    }

    #[tokio::test]
    async fn method_headers_and_body_reach_the_server() {
        let (url, server) = serve_once("201 Created", "", b"made".to_vec()).await;
        let headers = BTreeMap::from([
            ("Content-Type".to_owned(), "application/json".to_owned()),
            ("X-Token".to_owned(), "s3cret".to_owned()),
            ("User-Agent".to_owned(), "custom/1".to_owned()),
        ]);
        let request = HttpJob { method: "POST".to_owned(), headers, body: Some(r#"{"a":1}"#.to_owned()), ..job(&url) };
        let done = run_limited(request, 64 * 1024, no_stop()).await;
        assert_eq!(done.ending, Ending::Http { status: 201, ok: true, expected: None });
        let seen = server.await.unwrap();
        assert!(seen.head.starts_with("POST /hook?x=1 HTTP/1.1\r\n"), "{}", seen.head);
        assert_eq!(seen.header("content-type"), Some("application/json"));
        assert_eq!(seen.header("x-token"), Some("s3cret"));
        assert_eq!(seen.header("user-agent"), Some("custom/1"));
        assert_eq!(seen.body, br#"{"a":1}"#);
    }

    #[tokio::test]
    async fn large_body_keeps_head_and_tail() {
        let mut body = b"BEGIN-".to_vec();
        body.extend(std::iter::repeat_n(b'x', 4 * 1024 * 1024));
        body.extend_from_slice(b"-END");
        let (url, _server) = serve_once("200 OK", "", body).await;
        let done = run_limited(job(&url), 1024, no_stop()).await;
        assert_eq!(done.ending, Ending::Http { status: 200, ok: true, expected: None });
        assert!(done.output_truncated);
        assert!(done.output.starts_with("HTTP 200 OK\nBEGIN-xxx"), "{}", &done.output[..40]);
        assert!(done.output.ends_with("xxx-END"));
        assert!(done.output.contains("bytes omitted"));
        assert!(done.output.len() < 1024 + 100, "{} bytes kept", done.output.len());
    }

    #[tokio::test]
    async fn non_utf8_body_is_converted_lossily() {
        let (url, _server) = serve_once("200 OK", "", vec![b'a', 0xff, b'b']).await;
        let done = run_limited(job(&url), 64 * 1024, no_stop()).await;
        assert_eq!(done.output, "HTTP 200 OK\na\u{fffd}b");
    }

    #[tokio::test]
    async fn refused_connection_names_the_url() {
        // A port that was just free: nobody listens there.
        let port = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}/");
        let done = run_limited(job(&url), 64 * 1024, no_stop()).await;
        let Ending::RequestFailed(message) = &done.ending else { panic!("{:?}", done.ending) };
        assert_eq!(message, &format!("connecting to {url} failed: connection refused"));
        assert_eq!(done.http_status, None);
        assert_eq!(done.output, "");
    }

    #[tokio::test]
    async fn tls_failure_says_so() {
        // A plain-HTTP server that answers at once, spoken to over https.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}/", listener.local_addr().unwrap());
        etcron_common::task::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n").await.unwrap();
            let mut sink = [0u8; 1024];
            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
        });
        let done = run_limited(job(&url), 64 * 1024, no_stop()).await;
        let Ending::RequestFailed(message) = &done.ending else { panic!("{:?}", done.ending) };
        assert!(message.starts_with(&format!("connecting to {url} failed: TLS: ")), "{message}");
    }

    #[tokio::test]
    async fn password_in_url_is_not_repeated() {
        let port = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
        let done = run_limited(job(&format!("http://user:hunter2@127.0.0.1:{port}/")), 64 * 1024, no_stop()).await;
        let Ending::RequestFailed(message) = &done.ending else { panic!("{:?}", done.ending) };
        assert!(!message.contains("hunter2"), "{message}");
        assert!(message.contains(&format!("http://user:redacted@127.0.0.1:{port}/")), "{message}");
    }

    #[tokio::test]
    async fn redirect_loop_fails_after_the_limit() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/loop", listener.local_addr().unwrap());
        let location = url.clone();
        let server = etcron_common::task::spawn(async move {
            let mut requests = 0;
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                read_request(&mut stream).await;
                requests += 1;
                let answer = format!(
                    "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                stream.write_all(answer.as_bytes()).await.unwrap();
                stream.shutdown().await.unwrap();
                if requests == MAX_REDIRECTS + 1 {
                    return requests;
                }
            }
        });
        let done = run_limited(job(&url), 64 * 1024, no_stop()).await;
        let Ending::RequestFailed(message) = &done.ending else { panic!("{:?}", done.ending) };
        assert!(message.starts_with(&format!("following redirects from {url} failed: ")), "{message}");
        assert_eq!(server.await.unwrap(), MAX_REDIRECTS + 1);
    }

    /// A server answering each of `answers` (status line and extra headers) to one request in
    /// turn; the handle yields what it received.
    async fn serve_each(answers: Vec<String>) -> (String, tokio::task::JoinHandle<Vec<Seen>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = etcron_common::task::spawn(async move {
            let mut seen = Vec::new();
            for answer in answers {
                let (mut stream, _) = listener.accept().await.unwrap();
                seen.push(read_request(&mut stream).await);
                let head = format!("HTTP/1.1 {answer}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                stream.write_all(head.as_bytes()).await.unwrap();
                stream.shutdown().await.unwrap();
            }
            seen
        });
        (url, task)
    }

    fn with_secret(url: &str) -> HttpJob {
        let headers = BTreeMap::from([
            ("X-Plain".to_owned(), "p".to_owned()),
            ("X-Api-Key".to_owned(), "key-123".to_owned()),
            ("Authorization".to_owned(), "Bearer t".to_owned()),
            ("X-Etcron-Progress-Token".to_owned(), "progress-token".to_owned()),
            ("X-Etcron-Progress-Url".to_owned(), "http://127.0.0.1:1/executions/e/progress".to_owned()),
        ]);
        HttpJob { headers, secret_headers: vec!["X-Api-Key".to_owned()], ..job(url) }
    }

    #[tokio::test]
    async fn secret_headers_follow_a_redirect_on_the_same_origin_only() {
        // B only ever answers 200; A sends the client to its own /next, then to B.
        let (b, b_server) = serve_each(vec!["200 OK".to_owned()]).await;
        let (a, a_server) = serve_each(vec![
            "302 Found\r\nLocation: /next".to_owned(),
            format!("307 Temporary Redirect\r\nLocation: {b}/b"),
        ])
        .await;
        let done = run_limited(with_secret(&format!("{a}/start")), 64 * 1024, no_stop()).await;
        assert_eq!(done.ending, Ending::Http { status: 200, ok: true, expected: None });
        let at_a = a_server.await.unwrap();
        assert!(at_a[1].head.starts_with("GET /next "), "{}", at_a[1].head);
        assert_eq!(at_a[1].header("x-api-key"), Some("key-123"), "same origin: the secret goes along");
        assert_eq!(at_a[1].header("authorization"), Some("Bearer t"));
        assert_eq!(at_a[1].header("x-etcron-progress-token"), Some("progress-token"));
        assert!(at_a[1].header("x-etcron-progress-url").is_some());
        let at_b = b_server.await.unwrap();
        assert!(at_b[0].head.starts_with("GET /b "), "{}", at_b[0].head);
        assert_eq!(at_b[0].header("x-plain"), Some("p"));
        assert_eq!(at_b[0].header("x-api-key"), None, "another port is another origin: {}", at_b[0].head);
        assert_eq!(at_b[0].header("authorization"), None);
        assert_eq!(at_b[0].header("x-etcron-progress-token"), None, "the progress token stays with the origin");
        assert_eq!(at_b[0].header("x-etcron-progress-url"), None);
    }

    /// True when a connection reached `listener` (the handshake completes before the client's
    /// connect returns, so it is in the backlog by now).
    fn reached(listener: TcpListener) -> bool {
        let listener = listener.into_std().unwrap();
        listener.set_nonblocking(true).unwrap();
        listener.accept().is_ok()
    }

    #[tokio::test]
    async fn a_host_name_is_connected_to_at_its_checked_addresses() {
        // `localhost` goes through the pinned resolver (an address would not).
        let (url, server) = serve_once("200 OK", "", b"by name".to_vec()).await;
        let by_name = url.replace("127.0.0.1", "localhost");
        let done = run_limited(job(&by_name), 64 * 1024, no_stop()).await;
        assert_eq!(done.ending, Ending::Http { status: 200, ok: true, expected: None });
        assert!(server.await.unwrap().head.starts_with("GET /hook?x=1 "));
        let strict = Arc::new(TaskNetwork::new(Vec::new(), Vec::new()));
        let done = run_limited(HttpJob { network: strict, ..job(&by_name) }, 64 * 1024, no_stop()).await;
        let Ending::RequestFailed(message) = &done.ending else { panic!("{:?}", done.ending) };
        assert!(message.contains("refused to connect to localhost:"), "{message}");
    }

    #[tokio::test]
    async fn refused_targets_are_never_connected_to() {
        let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/x", target.local_addr().unwrap());
        let strict = Arc::new(TaskNetwork::new(Vec::new(), Vec::new()));
        let done = run_limited(HttpJob { network: strict, ..job(&url) }, 64 * 1024, no_stop()).await;
        let Ending::RequestFailed(message) = &done.ending else { panic!("{:?}", done.ending) };
        assert!(message.starts_with(&format!("{url} was not requested: refused to connect to ")), "{message}");
        assert!(message.contains("loopback") && message.contains("task_network_allow"), "{message}");
        assert_eq!(done.output, format!("{message}\n"), "the reason is the output too");
        assert!(!reached(target), "nothing was sent");

        // Loopback allowed, the control plane not: a redirect there is refused too.
        let etcd = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let etcd_addr = etcd.local_addr().unwrap();
        let (a, _a_server) =
            serve_each(vec![format!("307 Temporary Redirect\r\nLocation: http://{etcd_addr}/v3/kv/range")]).await;
        let control = crate::tasks::network::control_plane(&[etcd_addr.to_string()], "mongodb://127.0.0.1:1", &[]);
        let network = Arc::new(TaskNetwork::new(crate::tasks::network::loopback(), control));
        let done = run_limited(HttpJob { network, ..job(&format!("{a}/start")) }, 64 * 1024, no_stop()).await;
        let Ending::RequestFailed(message) = &done.ending else { panic!("{:?}", done.ending) };
        assert!(message.contains(&format!("it is etcd endpoint {etcd_addr}")), "{message}");
        assert!(!reached(etcd), "nothing was sent to the control plane");
    }

    #[test]
    fn https_to_http_and_other_schemes_are_not_followed() {
        let from = Url::parse("https://a.example/x").unwrap();
        let get = Method::GET;
        let err = next_hop(&from, StatusCode::FOUND, "http://a.example/y", &get).unwrap_err();
        assert!(err.contains("https to http://a.example/y"), "{err}");
        assert!(next_hop(&from, StatusCode::FOUND, "ftp://a.example/y", &get).is_err());
        assert!(next_hop(&from, StatusCode::FOUND, "file:///etc/passwd", &get).is_err());
        let same = next_hop(&from, StatusCode::FOUND, "/y", &get).unwrap();
        assert!(same.same_origin && same.url.as_str() == "https://a.example/y");
        for other in ["https://b.example/y", "https://a.example:8443/y"] {
            assert!(!next_hop(&from, StatusCode::FOUND, other, &get).unwrap().same_origin, "{other}");
        }
        let plain = Url::parse("http://a.example/x").unwrap();
        assert!(!next_hop(&plain, StatusCode::FOUND, "https://a.example/x", &get).unwrap().same_origin);
        let post = Method::POST;
        let hop = next_hop(&plain, StatusCode::SEE_OTHER, "/y", &post).unwrap();
        assert_eq!((hop.method, hop.drop_body), (Method::GET, true));
        let hop = next_hop(&plain, StatusCode::PERMANENT_REDIRECT, "/y", &post).unwrap();
        assert_eq!((hop.method, hop.drop_body), (Method::POST, false));
    }

    #[tokio::test]
    async fn a_redirect_from_https_to_http_fails_the_run() {
        // The https server is never reached: rustls fails first. So the rule is exercised at
        // `next_hop` above; here a plain run checks that a refused hop is a failed request.
        let (a, _a_server) = serve_each(vec!["302 Found\r\nLocation: ftp://127.0.0.1/x".to_owned()]).await;
        let done = run_limited(with_secret(&format!("{a}/start")), 64 * 1024, no_stop()).await;
        let Ending::RequestFailed(message) = &done.ending else { panic!("{:?}", done.ending) };
        assert!(message.contains("is not followed"), "{message}");
    }

    #[tokio::test]
    async fn silent_server_times_out() {
        let (url, _received) = serve_silently().await;
        let done =
            run_limited(HttpJob { timeout: Some(Duration::from_millis(200)), ..job(&url) }, 64 * 1024, no_stop()).await;
        assert_eq!(done.ending, Ending::TimedOut);
        assert_eq!(done.http_status, None);
    }

    #[tokio::test]
    async fn stop_aborts_a_hanging_request() {
        let (url, received) = serve_silently().await;
        let (stop_tx, stop_rx) = watch::channel(None);
        let run = etcron_common::task::spawn(run_limited(HttpJob { timeout: None, ..job(&url) }, 64 * 1024, stop_rx));
        received.await.unwrap();
        stop_tx.send(Some(StopReason::Killed("kill command at revision 7".to_owned()))).unwrap();
        let done = run.await.unwrap();
        assert_eq!(done.ending, Ending::Stopped(StopReason::Killed("kill command at revision 7".to_owned())));
    }

    #[tokio::test]
    async fn stop_before_start_sends_nothing() {
        let (stop_tx, stop_rx) = watch::channel(Some(StopReason::LeaseLost));
        // Nothing listens here; a request would fail instead of ending Stopped.
        let done = run_limited(job("http://127.0.0.1:9/"), 64 * 1024, stop_rx).await;
        drop(stop_tx);
        assert_eq!(done.ending, Ending::Stopped(StopReason::LeaseLost));
    }

    #[test]
    fn job_headers_win_over_defaults() {
        let own = BTreeMap::from([("x-etcron-job".to_owned(), "mine".to_owned()), ("A".to_owned(), "1".to_owned())]);
        let merged = with_default_headers(
            &own,
            [("X-Etcron-Job".to_owned(), "j".to_owned()), ("X-Etcron-Attempt".to_owned(), "2".to_owned())],
        );
        assert_eq!(
            merged,
            BTreeMap::from([
                ("A".to_owned(), "1".to_owned()),
                ("X-Etcron-Attempt".to_owned(), "2".to_owned()),
                ("x-etcron-job".to_owned(), "mine".to_owned()),
            ])
        );
    }
}
