//! Asynchronous HTTP tasks (`task.async`, `etcron_model::spec::http_async`): after a `202
//! Accepted`, the status URL it names is polled every `interval` until the status document's
//! state is a done or failed one, its progress (percent, message, checkpoint) going to the
//! execution's tracker; a kill, a lost lease or a timeout then sends the cancel request.
//!
//! Decisions an operator may want to know:
//! - Polls are `GET`s with the task's headers (identity `X-Etcron-*` included, `Content-Type`
//!   not); a status URL (or cancel URL) on another origin than the task's URL gets no
//!   `secret_headers` and no credentials (the progress token and URL included), as redirects
//!   do. A status URL from `https` to plain `http` is refused.
//! - Every poll and the cancel connect only where [`crate::tasks::network`] allows, checked after
//!   resolution and on every redirect, as the task's request.
//! - A poll without an answer, or answered 408, 429 or 5xx, is retried at the next interval;
//!   [`MAX_POLL_ERRORS`] in a row fail the run. Any other non-2xx answer, a document that is
//!   not JSON or has no state, a connection refused by `task_network` or a redirect not followed
//!   (to plain http, too many), fails it at once (retrying won't help).
//! - With `result_pointer`, the run's result is the value at the pointer in the final status
//!   document (not in the 202's body).
//! - Polling lasts at most `async.timeout` (else the job's `timeout`, else 24h) from the 202;
//!   then the run is timed out, as when the job's own `timeout` passes.
//! - The cancel request is sent once, bounded by [`CANCEL_TIMEOUT`]; its outcome is the last
//!   line of the output, and a failed one is logged and counted
//!   (`etcron_worker_http_cancels_total{outcome="failed"}`). A stop before the 202 answered
//!   aborts the request itself (there is nothing to cancel yet).

use std::time::Duration;

use etcron_model::progress::Report;
use etcron_model::spec::http_async::{AsyncPoll, Status, MAX_POLL_ERRORS, MAX_STATUS_BYTES};
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode, Url};
use tokio::time::Instant;

use crate::metrics::METRICS;
use crate::tasks::http_client::{self, header_map, redacted, status_line, HttpJob, Outgoing, SendError};
use crate::tasks::live_output::LiveOutput;
use crate::tasks::shell::Ending;

/// Longest wait for the answer to a cancel request.
pub const CANCEL_TIMEOUT: Duration = Duration::from_secs(10);

/// What the exchange learnt: the status URL (the cancel needs it), and the run's result or why
/// there is none (a task with `result_pointer` that succeeded).
#[derive(Debug, Default)]
pub(crate) struct Polled {
    status_url: Option<Url>,
    pub result: Option<Result<serde_json::Value, String>>,
}

/// The 202 answer: the URL that gave it, its `Location` header, the head of its body.
pub(crate) type Accepted<'a> = (&'a Url, Option<&'a str>, &'a [u8]);

/// Polls the status URL the 202 named until the remote work ends or `limit` passes.
pub(crate) async fn follow(
    job: &HttpJob,
    poll: &AsyncPoll,
    limit: Duration,
    (from, location, body): Accepted<'_>,
    output: &LiveOutput,
    polled: &mut Polled,
) -> Ending {
    let url = match poll.status_url_of(location, body).and_then(|written: String| resolve(from, &written)) {
        Ok(url) => url,
        Err(e) => {
            return Ending::RequestFailed(format!("the 202 answer from {} names no status URL: {e}", redacted(from)))
        }
    };
    polled.status_url = Some(url.clone());
    let headers = match headers_for(job, &url) {
        Ok(h) => h,
        Err(e) => return Ending::RequestFailed(e),
    };
    output.push(format!("\npolling {} every {}\n", redacted(&url), poll.interval).as_bytes());
    let deadline = Instant::now() + limit;
    let mut errors = 0;
    let mut shown = String::new();
    loop {
        let next = Instant::now() + poll.interval.0;
        if next > deadline {
            tokio::time::sleep_until(deadline).await;
            output.push(format!("polling timed out after {}\n", humantime::format_duration(limit)).as_bytes());
            return Ending::TimedOut;
        }
        tokio::time::sleep_until(next).await;
        // The deadline holds while an answer is still arriving (a status body sent a byte at a
        // time would otherwise keep the run going for ever).
        let Ok(answer) = tokio::time::timeout_at(deadline, poll_once(job, &url, &headers)).await else {
            output.push(
                format!(
                    "polling timed out after {} (a status answer was still arriving)\n",
                    humantime::format_duration(limit)
                )
                .as_bytes(),
            );
            return Ending::TimedOut;
        };
        let doc = match answer {
            Ok(doc) => doc,
            Err(PollError::Retry(e)) => {
                errors += 1;
                output.push(format!("poll failed ({errors} of {MAX_POLL_ERRORS} in a row): {e}\n").as_bytes());
                if errors >= MAX_POLL_ERRORS {
                    return Ending::RequestFailed(format!(
                        "polling {} failed {errors} times in a row: {e}",
                        redacted(&url)
                    ));
                }
                continue;
            }
            Err(PollError::Fatal(e)) => return Ending::RequestFailed(e),
            Err(PollError::Refused(e)) => {
                output.push(format!("{e}\n").as_bytes());
                return Ending::RequestFailed(e);
            }
        };
        errors = 0;
        match poll.read_status(&doc) {
            Ok(Status::Going { state, report }) => going(job, &state, report, output, &mut shown).await,
            Ok(Status::Done { state, output: text }) => {
                output.push(format!("{state}\n{text}\n").as_bytes());
                if let Some(pointer) = &job.result_pointer {
                    polled.result = Some(http_client::pointed_result(pointer, &doc, "the final status document"));
                }
                return Ending::Http { status: StatusCode::ACCEPTED.as_u16(), ok: true, expected: None };
            }
            Ok(Status::Failed { state, output: text }) => {
                output.push(format!("{state}\n{text}\n").as_bytes());
                return Ending::RemoteFailed(format!("the remote work failed: state {state:?} at {}", redacted(&url)));
            }
            Err(e) => return Ending::RequestFailed(format!("polling {}: {e}", redacted(&url))),
        }
    }
}

/// A document of work still going: its progress to the tracker, a line when it changed.
async fn going(
    job: &HttpJob,
    state: &str,
    report: Result<Option<Report>, String>,
    output: &LiveOutput,
    shown: &mut String,
) {
    let line = match &report {
        Ok(Some(r)) => {
            let percent = r.percent.map(|p| format!(" {p}%")).unwrap_or_default();
            format!("{state}{percent} {}", r.message.as_deref().unwrap_or("")).trim_end().to_owned()
        }
        Ok(None) => state.to_owned(),
        Err(e) => format!("{state} (its progress is not understood: {e})"),
    };
    if line != *shown {
        output.push(format!("{line}\n").as_bytes());
        *shown = line;
    }
    if let (Ok(Some(report)), Some(tracker)) = (report, &job.tracker) {
        if let Err(e) = tracker.report(report).await {
            tracing::warn!(error = ?e, "the progress of a status document was not taken");
        }
    }
}

enum PollError {
    /// Try again at the next interval.
    Retry(String),
    /// The status URL or its answers are wrong: retrying won't help.
    Fatal(String),
    /// Refused before sending, or a redirect not followed: the next poll would be too.
    Refused(String),
}

/// One poll: the status document, or why there is none.
async fn poll_once(job: &HttpJob, url: &Url, headers: &HeaderMap) -> Result<serde_json::Value, PollError> {
    let shown = redacted(url);
    let out = Outgoing {
        method: Method::GET,
        url: url.clone(),
        headers: headers.clone(),
        body: None,
        secret_headers: &job.secret_headers,
        network: &job.network,
        what: "a status poll of an HTTP task",
    };
    let mut response = http_client::send(out).await.map_err(|e| match e {
        SendError::Refused(why) => PollError::Refused(format!("polling {shown}: {why}")),
        SendError::Failed(why) => PollError::Retry(why),
    })?;
    let code = response.status();
    if matches!(code.as_u16(), 408 | 429) || code.is_server_error() {
        return Err(PollError::Retry(format!("{shown} answered {}", status_line(code).trim_end())));
    }
    if !code.is_success() {
        return Err(PollError::Fatal(format!("polling {shown}: it answered {}", status_line(code).trim_end())));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| PollError::Retry(http_client::error_chain(&e)))? {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_STATUS_BYTES {
            return Err(PollError::Fatal(format!(
                "polling {shown}: the status document is larger than {MAX_STATUS_BYTES} bytes"
            )));
        }
    }
    serde_json::from_slice(&body)
        .map_err(|e| PollError::Fatal(format!("polling {shown}: the status document is not JSON: {e}")))
}

/// Sends the cancel request of an asynchronous task whose status URL is known; its outcome
/// is the output's last line.
pub(crate) async fn cancel(job: &HttpJob, polled: &Polled, output: &LiveOutput) {
    let (Some((poll, _)), Some(status_url)) = (&job.asynchronous, &polled.status_url) else { return };
    let (method, target) = match &poll.cancel {
        Some(c) => {
            (c.method.as_str(), c.url.as_deref().map_or_else(|| Ok(status_url.clone()), |u| resolve(status_url, u)))
        }
        None => ("DELETE", Ok(status_url.clone())),
    };
    let line = match target {
        Ok(url) => send_cancel(job, method, url).await,
        Err(e) => Err(format!("task.async.cancel.url: {e}")),
    };
    let line = match line {
        Ok(line) => {
            METRICS.http_cancels.with_label_values(&["sent"]).inc();
            line
        }
        Err(e) => {
            METRICS.http_cancels.with_label_values(&["failed"]).inc();
            tracing::warn!(error = %e, "the cancel request of an asynchronous HTTP task failed: the remote work may go on");
            format!("cancel failed: {e}")
        }
    };
    output.push(format!("{line}\n").as_bytes());
}

async fn send_cancel(job: &HttpJob, method: &str, url: Url) -> Result<String, String> {
    let shown = format!("{method} {}", redacted(&url));
    let headers = headers_for(job, &url)?;
    let method = Method::from_bytes(method.as_bytes()).map_err(|_| format!("invalid method {method:?}"))?;
    let out = Outgoing {
        method,
        url,
        headers,
        body: None,
        secret_headers: &job.secret_headers,
        network: &job.network,
        what: "the cancel request of an HTTP task",
    };
    match tokio::time::timeout(CANCEL_TIMEOUT, http_client::send(out)).await {
        Ok(Ok(response)) if response.status().is_success() => {
            Ok(format!("cancel: {shown} answered {}", status_line(response.status()).trim_end()))
        }
        Ok(Ok(response)) => Err(format!("{shown} answered {}", status_line(response.status()).trim_end())),
        Ok(Err(e)) => Err(e.message()),
        Err(_) => Err(format!("{shown}: no answer within {}", humantime::format_duration(CANCEL_TIMEOUT))),
    }
}

/// `written` (maybe relative) resolved against `base`; only http(s), never down to plain http.
fn resolve(base: &Url, written: &str) -> Result<Url, String> {
    let url = base.join(written).map_err(|e| format!("{written:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("{} is not an http or https URL", redacted(&url)));
    }
    if base.scheme() == "https" && url.scheme() == "http" {
        return Err(format!("{} is plain http, the task's URL https", redacted(&url)));
    }
    Ok(url)
}

/// The headers of polls and the cancel to `url`: the task's, without a body's `Content-Type`,
/// and without secrets and credentials when `url` is on another origin.
fn headers_for(job: &HttpJob, url: &Url) -> Result<HeaderMap, String> {
    let mut headers = header_map(&job.headers)?;
    headers.remove(reqwest::header::CONTENT_TYPE);
    let same_origin = Url::parse(&job.url).is_ok_and(|task| task.origin() == url.origin());
    if !same_origin {
        http_client::keep_to_origin(&mut headers, &job.secret_headers);
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn status_urls_resolve_against_the_answer() {
        let base = url("https://api.example/v1/jobs");
        assert_eq!(resolve(&base, "/v1/status/7").map(String::from), Ok("https://api.example/v1/status/7".to_owned()));
        assert_eq!(resolve(&base, "status/7").map(String::from), Ok("https://api.example/v1/status/7".to_owned()));
        assert!(resolve(&base, "http://api.example/s").is_err_and(|e| e.contains("plain http")));
        assert!(resolve(&base, "ftp://api.example/s").is_err_and(|e| e.contains("not an http")));
        assert!(resolve(&url("http://a/"), "https://b/s").is_ok());
    }

    #[test]
    fn secrets_stay_with_the_tasks_origin() {
        let job = HttpJob {
            method: "POST".into(),
            url: "http://api.example/v1/jobs".into(),
            headers: [
                ("Authorization", "Bearer t"),
                ("X-Key", "k"),
                ("Content-Type", "application/json"),
                ("X-Etcron-Job", "j"),
                ("X-Etcron-Progress-Token", "pt"),
                ("X-Etcron-Progress-Url", "http://127.0.0.1:9/executions/e/progress"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
            secret_headers: vec!["X-Key".into()],
            body: None,
            expect_status: None,
            timeout: None,
            asynchronous: None,
            tracker: None,
            network: std::sync::Arc::new(crate::tasks::network::TaskNetwork::new(Vec::new(), Vec::new())),
            result_pointer: None,
            notes: Vec::new(),
        };
        let same = headers_for(&job, &url("http://api.example/status/1")).unwrap_or_else(|e| panic!("{e}"));
        assert!(same.contains_key("authorization") && same.contains_key("x-key") && !same.contains_key("content-type"));
        let other = headers_for(&job, &url("http://status.example/1")).unwrap_or_else(|e| panic!("{e}"));
        assert!(!other.contains_key("authorization") && !other.contains_key("x-key"));
        assert!(same.contains_key("x-etcron-progress-token") && same.contains_key("x-etcron-progress-url"));
        assert!(!other.contains_key("x-etcron-progress-token") && !other.contains_key("x-etcron-progress-url"));
        assert_eq!(other.get("x-etcron-job").map(|v| v.as_bytes()), Some(&b"j"[..]));
    }
}
