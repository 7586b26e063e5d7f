//! The `executions` commands: search (one page, every page, or `--watch` polling like
//! `tail -f`), and get (the record with its output, or `--follow` streaming the live output of
//! a running execution from `GET /api/executions/{id}/stream`).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::{json, Value};

use crate::client::{query, segment, Client};
use crate::exit::{ApiError, Exit, Unsuccessful, Usage};
use crate::sse;
use crate::table::{clip, duration_ms, line, text, Table};
use crate::{out, print_doc, stream_doc};

/// How often `executions search --watch` asks again.
const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);

/// Filters of `GET /api/executions`.
#[derive(Debug, Clone, Default)]
pub struct Filters {
    pub job: Option<String>,
    pub team: Option<String>,
    pub statuses: Vec<String>,
    pub worker: Option<String>,
    pub trigger: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub q: Option<String>,
    pub limit: Option<u32>,
}

impl Filters {
    /// The query string, with `cursor` when given.
    fn query(&self, cursor: Option<String>) -> String {
        let statuses = (!self.statuses.is_empty()).then(|| self.statuses.join(","));
        query(&[
            ("job", self.job.clone()),
            ("team", self.team.clone()),
            ("status", statuses),
            ("worker", self.worker.clone()),
            ("trigger", self.trigger.clone()),
            ("since", self.since.clone()),
            ("until", self.until.clone()),
            ("q", self.q.clone()),
            ("limit", self.limit.map(|l| l.to_string())),
            ("cursor", cursor),
        ])
    }
}

pub const COLUMNS: [&str; 7] = ["ID", "STATUS", "TRIGGER", "WORKER", "SCHEDULED", "DURATION", "RESULT"];
/// Column widths of `--watch`, which cannot measure rows it has not seen yet.
const FOLLOW_WIDTHS: [usize; 7] = [36, 9, 10, 12, 24, 8, 0];

/// What an execution came to, in a few words: the error, the reason, or the exit code.
fn result(e: &Value) -> String {
    let words = if let Some(err) = e["error"].as_str() {
        err.to_owned()
    } else if let Some(reason) = e["reason"].as_str() {
        reason.to_owned()
    } else if let Some(code) = e["exit_code"].as_i64() {
        format!("exit {code}")
    } else if let Some(sig) = e["signal"].as_i64() {
        format!("signal {sig}")
    } else if let Some(status) = e["http_status"].as_i64() {
        format!("HTTP {status}")
    } else {
        "-".to_owned()
    };
    clip(&words, 80)
}

pub fn row(e: &Value) -> Vec<String> {
    vec![
        text(&e["id"]),
        text(&e["status"]),
        text(&e["trigger"]),
        text(&e["worker_id"]),
        text(&e["scheduled_at"]),
        e["duration_ms"].as_u64().map_or_else(|| "-".to_owned(), duration_ms),
        result(e),
    ]
}

pub async fn search(
    client: &Client,
    filters: &Filters,
    cursor: Option<String>,
    all: bool,
    json: bool,
) -> anyhow::Result<()> {
    let mut cursor = cursor;
    let mut executions = Vec::new();
    let mut partial;
    let next = loop {
        let page = client
            .get(&format!("/api/executions{}", filters.query(cursor.take())))
            .await
            .context("searching executions")?;
        executions.extend(page["executions"].as_array().cloned().unwrap_or_default());
        let next = page["next_cursor"].as_str().map(str::to_owned);
        partial = page["partial"].as_bool().unwrap_or(false);
        match next {
            Some(c) if all => cursor = Some(c),
            next => break next,
        }
    };
    if json {
        return print_doc(&json!({ "executions": executions, "next_cursor": next, "partial": partial && !all }));
    }
    let mut table = Table::new(&COLUMNS);
    for e in &executions {
        table.row(row(e));
    }
    out(&table.render())?;
    if let Some(c) = next {
        if partial {
            eprintln!("etcronctl: searched part of the history (words are matched on the records read, 1 000 a page); older records may match");
        }
        eprintln!("etcronctl: more executions: --cursor {c} (or --all)");
    }
    Ok(())
}

/// The records of one poll that are new or changed since `seen`, oldest first; `seen` becomes
/// this poll's records (so it never holds more than one page).
fn news(seen: &mut HashMap<String, Value>, page: &[Value]) -> Vec<Value> {
    let mut fresh: Vec<Value> = page.iter().filter(|e| seen.get(&text(&e["id"])) != Some(*e)).cloned().collect();
    fresh.sort_by(|a, b| {
        let key = |e: &Value| (e["scheduled_ms"].as_i64().unwrap_or(0), text(&e["id"]));
        key(a).cmp(&key(b))
    });
    *seen = page.iter().map(|e| (text(&e["id"]), e.clone())).collect();
    fresh
}

/// `executions search --watch` (or `--follow`): polls every second and prints records that are new or changed
/// (a run that finished is printed again with its result), oldest first, until interrupted.
/// With `-o json`, one JSON record per line.
pub async fn follow(client: &Client, filters: &Filters, json: bool) -> anyhow::Result<()> {
    let path = format!("/api/executions{}", filters.query(None));
    let mut seen = HashMap::new();
    let mut failing = false;
    // The first answer must come from a master: a wrong --server fails at once (exit 6); only a
    // master that answered before is waited for.
    let first = client.get(&path).await.context("searching executions")?;
    if !json {
        out(&format!("{}\n", line(&COLUMNS.map(str::to_owned), &FOLLOW_WIDTHS)))?;
    }
    let mut answer: anyhow::Result<serde_json::Value> = Ok(first);
    loop {
        match answer {
            Ok(page) => {
                if failing {
                    eprintln!("etcronctl: the master answers again");
                    failing = false;
                }
                let list = page["executions"].as_array().cloned().unwrap_or_default();
                let mut text = String::new();
                for e in news(&mut seen, &list) {
                    if json {
                        text.push_str(&stream_doc(&e)?);
                    } else {
                        let _ = writeln!(text, "{}", line(&row(&e), &FOLLOW_WIDTHS));
                    }
                }
                out(&text)?;
            }
            Err(e) => {
                // A refusal (bad filter, token) will not heal; an outage might.
                let retry = e.downcast_ref::<ApiError>().is_none_or(|a| a.status >= 500 || a.status == 429);
                if !retry {
                    return Err(e.context("searching executions"));
                }
                if !failing {
                    eprintln!("etcronctl: searching executions: {e:#}; retrying every second");
                    failing = true;
                }
            }
        }
        tokio::time::sleep(FOLLOW_INTERVAL).await;
        answer = client.get(&path).await;
    }
}

fn execution_path(id: &str) -> String {
    format!("/api/executions/{}", segment(id))
}

pub async fn get(client: &Client, id: &str, json: bool) -> anyhow::Result<()> {
    let e = client.get(&execution_path(id)).await.with_context(|| format!("execution {id:?}"))?;
    if json {
        return print_doc(&e);
    }
    let mut s = String::new();
    let field = |s: &mut String, label: &str, v: &Value| {
        if !v.is_null() {
            let _ = writeln!(s, "{:<15}{}", format!("{label}:"), text(v));
        }
    };
    for (label, key) in [
        ("id", "id"),
        ("job", "job"),
        ("status", "status"),
        ("trigger", "trigger"),
        ("attempt", "attempt"),
        ("worker", "worker_id"),
        ("host", "hostname"),
        ("scheduled", "scheduled_at"),
        ("claimed", "claimed_at"),
        ("started", "started_at"),
        ("finished", "finished_at"),
    ] {
        field(&mut s, label, &e[key]);
    }
    if let Some(ms) = e["duration_ms"].as_u64() {
        let _ = writeln!(s, "{:<15}{}", "duration:", duration_ms(ms));
    }
    for (label, key) in [
        ("exit code", "exit_code"),
        ("signal", "signal"),
        ("http status", "http_status"),
        ("error", "error"),
        ("reason", "reason"),
        ("parent", "parent"),
        ("fencing token", "fencing_token"),
    ] {
        field(&mut s, label, &e[key]);
    }
    // What the task reported or returned, as its JSON (a string keeps its quotes).
    if !e["result"].is_null() {
        let _ = writeln!(s, "{:<15}{}", "result:", e["result"]);
    }
    let output = e["output"].as_str().unwrap_or_default();
    let truncated = if e["output_truncated"] == Value::Bool(true) { " (truncated: head and tail kept)" } else { "" };
    let _ = writeln!(s, "output{truncated}:");
    s.push_str(output);
    if !output.is_empty() && !output.ends_with('\n') {
        s.push('\n');
    }
    out(&s)
}

/// Statuses of an execution that ran (skipped and missed ticks have no output).
const RAN: &str = "running,succeeded,failed,timed_out,killed,lost";

/// What `logs` names: an execution id has an `@` (`job@tick#attempt`), a job name never does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogsTarget {
    Execution(String),
    Job(String),
}

impl LogsTarget {
    /// Reads `logs`'s argument; a text that is neither an execution id nor a job name is a usage
    /// error naming the argument.
    pub fn parse(text: &str) -> Result<Self, Usage> {
        if text.contains('@') {
            return text
                .parse::<etcron_model::keys::ExecutionId>()
                .map(|_| LogsTarget::Execution(text.to_owned()))
                .map_err(|e| Usage(format!("EXECUTION {text:?} is not an execution id (job@tick#attempt): {e}")));
        }
        etcron_model::keys::validate_job_name(text)
            .map(|()| LogsTarget::Job(text.to_owned()))
            .map_err(|e| Usage(format!("JOB {text:?} is not a job name ({e}), nor an execution id (it has no @)")))
    }
}

/// The execution of `job` to show: the newest of its runs in progress (from the workers'
/// running markers, written once a run has lasted a second), else its newest execution that ran;
/// not found (exit 3) when the job does not exist or has not run.
async fn latest_run(client: &Client, job: &str) -> anyhow::Result<(String, String)> {
    let workers = client.get("/api/workers").await.context("listing the running executions")?;
    let running = workers["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|w| w["running_executions"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["job"] == job)
        .max_by_key(|e| (text(&e["started_at"]), text(&e["id"])));
    if let Some(e) = running {
        return Ok((text(&e["id"]), "running".to_owned()));
    }
    let path = format!(
        "/api/executions{}",
        query(&[("job", Some(job.to_owned())), ("status", Some(RAN.to_owned())), ("limit", Some("1".to_owned()))])
    );
    let page = client.get(&path).await.with_context(|| format!("searching the executions of job {job:?}"))?;
    if let Some(e) = page["executions"].as_array().and_then(|a| a.first()) {
        return Ok((text(&e["id"]), text(&e["status"])));
    }
    // Records outlive their job: only now does it matter whether the job exists.
    client.get(&format!("/api/jobs/{}", segment(job))).await.with_context(|| format!("job {job:?}"))?;
    let message = format!("job {job:?} has no execution that ran yet (run it: etcronctl jobs run {job} --follow)");
    Err(ApiError { status: 404, code: "not_found".to_owned(), message, field: None }.into())
}

/// `logs EXECUTION|JOB [--follow]`: the output of an execution, or of the newest execution of a
/// job that ran, on stdout as the task printed it. `--follow` streams it live as `executions get
/// --follow` does (exit 5 unless the final attempt succeeded); without it the exit code is 0
/// whatever the status. With `-o json|yaml`: the execution record (with `output`), or the
/// stream's events.
pub async fn logs(client: &Client, target: &LogsTarget, follow: bool, json: bool) -> anyhow::Result<()> {
    let id = match target {
        LogsTarget::Execution(id) => id.clone(),
        LogsTarget::Job(job) => {
            let (id, status) = latest_run(client, job).await?;
            if !json {
                eprintln!("etcronctl: the latest execution of job {job} that ran: {id} ({status})");
            }
            id
        }
    };
    if follow {
        return stream(client, &id, json).await;
    }
    let e = client.get(&execution_path(&id)).await.with_context(|| format!("execution {id:?}"))?;
    if json {
        return print_doc(&e);
    }
    let output = e["output"].as_str().unwrap_or_default();
    let mut text = output.to_owned();
    if !output.is_empty() && !output.ends_with('\n') {
        text.push('\n');
    }
    out(&text)?;
    if e["output_truncated"] == Value::Bool(true) {
        eprintln!("etcronctl: the output was truncated: its head and tail were kept");
    }
    if e["status"] == "running" {
        eprintln!("etcronctl: execution {id} is still running; its output so far comes with --follow");
    }
    Ok(())
}

/// What a `progress` event says, in a line: `progress 42.5%: copying table b (checkpoint
/// stored)`; `None` when it says nothing (an event without progress or checkpoint).
fn progress_line(data: &Value) -> Option<String> {
    let p = &data["progress"];
    let mut s = match (p["percent"].as_f64(), p["message"].as_str()) {
        (Some(pct), Some(m)) => format!("progress {pct}%: {m}"),
        (Some(pct), None) => format!("progress {pct}%"),
        (None, Some(m)) => format!("progress: {m}"),
        (None, None) => String::new(),
    };
    if !data["checkpoint"].is_null() {
        s.push_str(if s.is_empty() { "checkpoint stored" } else { " (checkpoint stored)" });
    }
    (!s.is_empty()).then_some(s)
}

/// One line about how an execution ended: `execution X: failed (exit 3) after 1.2s on w1`.
fn status_line(e: &Value) -> String {
    let mut s = format!("execution {}: {}", text(&e["id"]), text(&e["status"]));
    let why = result(e);
    if why != "-" {
        let _ = write!(s, " ({why})");
    }
    if let Some(ms) = e["duration_ms"].as_u64() {
        let _ = write!(s, " after {}", duration_ms(ms));
    }
    if let Some(w) = e["worker_id"].as_str().filter(|w| !w.is_empty()) {
        let _ = write!(s, " on {w}");
    }
    s
}

/// `executions get ID --follow`: prints the output as it comes (stdout) and the final status
/// (stderr); fails with [`Exit::Unsuccessful`] unless the execution succeeded, and with exit 1
/// when the stream ends without a final status (an `error` event says why). With `-o json`,
/// each event is one JSON line: `{"event":"output","text":…}`, `{"event":"gap","skipped_bytes":…}`,
/// `{"event":"progress","progress":{…},"checkpoint":…}`, `{"event":"status","execution":{…}}`.
/// Progress goes to stderr as `etcronctl: progress 42.5%: copying table b`.
/// Follows execution `id` and then its retries to the final attempt: the output of each as it
/// is produced and how each ended; exit 5 unless the last attempt succeeded.
pub async fn stream(client: &Client, id: &str, json: bool) -> anyhow::Result<()> {
    let path = |id: &str| format!("{}/stream", execution_path(id));
    let mut resp = client.open_stream(&path(id)).await.with_context(|| format!("following execution {id:?}"))?;
    let mut id = id.to_owned();
    loop {
        let (record, line) = follow_attempt(client, &mut resp, &id, json).await?;
        if record["status"] == "succeeded" {
            return Ok(());
        }
        // A retry is written with the close of the failed attempt, before its record: if the
        // master does not know the next attempt now, there is none.
        let next = id.parse::<etcron_model::keys::ExecutionId>().map(|e| e.next_attempt().to_string());
        let next_stream = match &next {
            Ok(next) => client.open_stream(&path(next)).await,
            Err(_) => return Err(Unsuccessful { exit: Exit::Unsuccessful, what: line }.into()),
        };
        match next_stream {
            Ok(r) => {
                resp = r;
                id = next.unwrap_or_default();
                if !json {
                    eprintln!("etcronctl: following the retry, execution {id}");
                }
            }
            Err(e) if e.downcast_ref::<ApiError>().is_some_and(|a| a.status == 404) => {
                return Err(Unsuccessful { exit: Exit::Unsuccessful, what: line }.into());
            }
            Err(e) => return Err(e.context(format!("following the retry of execution {id:?}"))),
        }
    }
}

/// Relays one attempt's stream; its final record and the line printed about it.
async fn follow_attempt(
    client: &Client,
    resp: &mut reqwest::Response,
    id: &str,
    json: bool,
) -> anyhow::Result<(Value, String)> {
    let mut parser = sse::Parser::new();
    let mut out = Follower { json, at_line_start: true, at: 0 };
    let mut last = None;
    let mut failure = None;
    'read: loop {
        let Some(chunk) = client.chunk(resp).await.with_context(|| format!("following execution {id:?}"))? else {
            break;
        };
        for event in parser.push(&chunk) {
            let data: Value = serde_json::from_str(&event.data)
                .with_context(|| format!("the stream sent a {} event that is not JSON", event.event))?;
            match event.event.as_str() {
                "output" => out.output(&data)?,
                "gap" => out.gap(&data)?,
                "progress" => out.progress(&data)?,
                "status" => {
                    last = Some(data);
                    break 'read;
                }
                // The master gave up waiting for the final record (it ends the stream).
                "error" => failure = data["message"].as_str().map(str::to_owned),
                // A quiet stream the master closed: follow on from where this one was.
                "idle" => {
                    let path = format!("{}/stream?after={}", execution_path(id), out.at);
                    *resp =
                        client.open_stream(&path).await.with_context(|| format!("following execution {id:?} again"))?;
                    parser = sse::Parser::new();
                    continue 'read;
                }
                _ => {}
            }
        }
    }
    parser.finish();
    let Some(record) = last else {
        let why = failure.unwrap_or_else(|| "the master may have restarted".to_owned());
        anyhow::bail!(
            "the stream of execution {id:?} ended before its final status ({why}); see `etcronctl executions get {id}`"
        );
    };
    let line = status_line(&record);
    if json {
        let mut stdout = std::io::stdout();
        stdout.write_all(stream_doc(&json!({"event": "status", "execution": record}))?.as_bytes())?;
    } else {
        eprintln!("{}{line}", out.newline());
    }
    Ok((record, line))
}

/// What a follow prints as the stream's events come: output on stdout, notes on stderr, or
/// each event as a JSON document.
struct Follower {
    json: bool,
    /// Whether stdout's last byte ended a line (a note goes on a line of its own).
    at_line_start: bool,
    /// Output offset read so far: where a stream the master closed as quiet is resumed.
    at: u64,
}

impl Follower {
    /// A newline to end the output's open line before a note, if it has one.
    fn newline(&self) -> &'static str {
        if self.at_line_start {
            ""
        } else {
            "\n"
        }
    }

    fn output(&mut self, data: &Value) -> anyhow::Result<()> {
        let mut stdout = std::io::stdout();
        let text = data["text"].as_str().unwrap_or_default();
        self.at += text.len() as u64;
        if self.json {
            stdout.write_all(stream_doc(&json!({"event": "output", "text": text}))?.as_bytes())?;
        } else if !text.is_empty() {
            stdout.write_all(text.as_bytes())?;
            self.at_line_start = text.ends_with('\n');
        }
        stdout.flush()?;
        Ok(())
    }

    fn gap(&mut self, data: &Value) -> anyhow::Result<()> {
        let mut stdout = std::io::stdout();
        self.at += data["skipped_bytes"].as_u64().unwrap_or(0);
        if self.json {
            let gap = json!({"event": "gap", "skipped_bytes": data["skipped_bytes"]});
            stdout.write_all(stream_doc(&gap)?.as_bytes())?;
        } else {
            stdout.flush()?;
            eprintln!(
                "{}etcronctl: [{} bytes of output skipped: this reader fell behind what the worker keeps]",
                self.newline(),
                text(&data["skipped_bytes"])
            );
            self.at_line_start = true;
        }
        Ok(())
    }

    fn progress(&mut self, data: &Value) -> anyhow::Result<()> {
        let mut stdout = std::io::stdout();
        if self.json {
            let report = json!({"event": "progress", "progress": data["progress"], "checkpoint": data["checkpoint"]});
            stdout.write_all(stream_doc(&report)?.as_bytes())?;
        } else if let Some(line) = progress_line(data) {
            stdout.flush()?;
            eprintln!("{}etcronctl: {line}", self.newline());
            self.at_line_start = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_progress_event_reads_as_a_line() {
        let both =
            json!({"progress": {"percent": 42.5, "message": "copying table b", "at": "t"}, "checkpoint": {"o": 1}});
        assert_eq!(progress_line(&both).as_deref(), Some("progress 42.5%: copying table b (checkpoint stored)"));
        assert_eq!(progress_line(&json!({"progress": {"percent": 7.0, "at": "t"}})).as_deref(), Some("progress 7%"));
        assert_eq!(progress_line(&json!({"progress": {"message": "m", "at": "t"}})).as_deref(), Some("progress: m"));
        assert_eq!(progress_line(&json!({"checkpoint": [1]})).as_deref(), Some("checkpoint stored"));
        assert_eq!(progress_line(&json!({})), None);
    }

    #[test]
    fn follow_prints_new_and_changed_records_oldest_first() {
        let rec = |id: &str, ms: i64, status: &str| json!({"id": id, "scheduled_ms": ms, "status": status});
        let mut seen = HashMap::new();
        let first = news(&mut seen, &[rec("b", 2, "running"), rec("a", 1, "succeeded")]);
        assert_eq!(first, vec![rec("a", 1, "succeeded"), rec("b", 2, "running")]);
        assert!(news(&mut seen, &[rec("b", 2, "running"), rec("a", 1, "succeeded")]).is_empty());
        let next = news(&mut seen, &[rec("c", 3, "running"), rec("b", 2, "failed"), rec("a", 1, "succeeded")]);
        assert_eq!(next, vec![rec("b", 2, "failed"), rec("c", 3, "running")]);
        // Only the last page is remembered.
        news(&mut seen, &[rec("c", 3, "running")]);
        assert_eq!(seen.len(), 1);
    }

    #[test]
    fn results_and_status_lines_say_how_it_ended() {
        let failed = json!({"id": "j@1#1", "status": "failed", "exit_code": 3, "duration_ms": 1200, "worker_id": "w1",
                            "error": "exit code 3"});
        assert_eq!(result(&failed), "exit code 3");
        assert_eq!(status_line(&failed), "execution j@1#1: failed (exit code 3) after 1.2s on w1");
        let ok = json!({"id": "j@1#1", "status": "succeeded", "exit_code": 0});
        assert_eq!(result(&ok), "exit 0");
        assert_eq!(result(&json!({"reason": "job paused"})), "job paused");
        assert_eq!(result(&json!({})), "-");
    }

    #[test]
    fn logs_takes_an_execution_id_or_a_job_name() {
        assert_eq!(LogsTarget::parse("nightly").unwrap(), LogsTarget::Job("nightly".into()));
        assert_eq!(
            LogsTarget::parse("nightly@1767225600000#2").unwrap(),
            LogsTarget::Execution("nightly@1767225600000#2".into())
        );
        assert_eq!(
            LogsTarget::parse("nightly@manual-1f2e#1").unwrap(),
            LogsTarget::Execution("nightly@manual-1f2e#1".into())
        );
        let e = LogsTarget::parse("Nightly Report").unwrap_err().to_string();
        assert!(e.starts_with("JOB \"Nightly Report\" is not a job name"), "{e}");
        let e = LogsTarget::parse("nightly@").unwrap_err().to_string();
        assert!(e.starts_with("EXECUTION \"nightly@\" is not an execution id"), "{e}");
    }

    #[test]
    fn filters_become_the_query() {
        let q = Filters { job: Some("a".into()), statuses: vec!["failed".into(), "lost".into()], ..Filters::default() }
            .query(Some("c1".into()));
        assert_eq!(q, "?job=a&status=failed%2Clost&cursor=c1");
    }
}
