//! `jobs describe NAME`: one job with everything an operator asks about it, in sections: the
//! spec in short, its next runs, its health (state, last finished run, runs that did not
//! succeed in a row, the last 24 hours), what runs now and the last runs. The job comes from
//! `GET /api/jobs/{name}`, what runs now from the running markers in etcd (`GET /api/workers`,
//! which holds a run from its claim on, before its record is written), the finished runs from
//! the execution search (`GET /api/executions`); when the records cannot be read the job is
//! described all the same, with a note.

use std::collections::HashMap;
use std::fmt::Write as _;

use anyhow::Context as _;
use serde_json::{json, Value};

use crate::client::{query, segment, Client};
use crate::executions::{row, COLUMNS};
use crate::table::{clip, pairs, text, Table};
use crate::{out, print_doc};

/// How many of the last runs are shown.
pub const LAST_RUNS: u32 = 5;
/// How many finished runs are read to count the failures in a row (a longer streak is shown
/// as "at least").
const HEALTH_WINDOW: u32 = 100;
/// Statuses of a run that finished (skipped and missed ticks did not run).
const FINISHED: &str = "succeeded,failed,timed_out,killed,lost";

/// What `describe` computes about a job's runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    /// The newest finished run (its record), if any.
    pub last_finished: Option<Value>,
    /// Runs (ticks, each counted by its last attempt) that did not succeed, newest first, up
    /// to the first that did.
    pub failures_in_a_row: usize,
    /// The window read held no success: there may be more.
    pub at_least: bool,
}

/// The health of a job from its finished records, newest first. Attempts of one tick (`job@tick`
/// with `#1`, `#2`, ...) are one run, which ended as its highest attempt did.
#[must_use]
pub fn health(finished: &[Value], more: bool) -> Health {
    let mut order: Vec<String> = Vec::new();
    let mut last: HashMap<String, (u64, &Value)> = HashMap::new();
    for record in finished {
        let id = text(&record["id"]);
        let (tick, attempt) = match id.rsplit_once('#') {
            Some((tick, n)) => (tick.to_owned(), n.parse::<u64>().unwrap_or(0)),
            None => (id.clone(), 0),
        };
        match last.get(&tick) {
            Some((seen, _)) if *seen >= attempt => {}
            Some(_) => {
                last.insert(tick, (attempt, record));
            }
            None => {
                order.push(tick.clone());
                last.insert(tick, (attempt, record));
            }
        }
    }
    let runs: Vec<&Value> = order.iter().filter_map(|t| last.get(t).map(|(_, r)| *r)).collect();
    let failures_in_a_row = runs.iter().take_while(|r| r["status"] != "succeeded").count();
    Health {
        last_finished: finished.first().cloned(),
        failures_in_a_row,
        at_least: failures_in_a_row == runs.len() && more && !runs.is_empty(),
    }
}

/// The job's state in words: `enabled`, `paused by … at … until …: reason`, `disabled (the spec says
/// enabled: false)` or `invalid: why`.
#[must_use]
pub fn state_line(job: &Value) -> String {
    if let Some(why) = job["invalid"].as_str() {
        return format!("invalid: {why}");
    }
    let pause = &job["paused"];
    if pause.is_object() {
        let mut s = "paused".to_owned();
        if let Some(by) = pause["by"].as_str() {
            let _ = write!(s, " by {by}");
        }
        if let Some(at) = pause["at"].as_str() {
            let _ = write!(s, " at {at}");
        }
        if let Some(until) = pause["until"].as_str() {
            let _ = write!(s, " until {until}");
        }
        if let Some(reason) = pause["reason"].as_str() {
            let _ = write!(s, ": {reason}");
        }
        return s;
    }
    if job["spec"]["enabled"] == Value::Bool(false) {
        return "disabled (the spec says enabled: false)".to_owned();
    }
    "enabled".to_owned()
}

/// ` (async: 202, then its status URL polled every …)` for an asynchronous HTTP task.
fn polled(task: &Value) -> String {
    match task.get("async") {
        Some(poll) if poll.is_object() => {
            format!(" (async: 202, then its status URL polled every {})", poll["interval"].as_str().unwrap_or("5s"))
        }
        _ => String::new(),
    }
}

/// ` (as user:group)` for a shell task run as a user, else nothing.
fn run_as(task: &Value) -> String {
    match (task["user"].as_str(), task["group"].as_str()) {
        (Some(user), Some(group)) => format!(" (as {user}:{group})"),
        (Some(user), None) => format!(" (as {user})"),
        _ => String::new(),
    }
}

/// ` (2 live executor(s) have it)`, or ` (no live executor has it)`, for a handler task: the
/// executors that registered the handler and may run the job (`eligible_workers`).
fn executors(eligible: &Value) -> String {
    match eligible.as_u64() {
        Some(0) => " (no live executor has it)".to_owned(),
        Some(n) => format!(" ({n} live executor(s) have it)"),
        None => String::new(),
    }
}

/// The spec in a few `label: value` lines (defaults included: they are what runs).
fn spec_lines(job: &Value) -> Vec<(&'static str, String)> {
    let spec = &job["spec"];
    let task = &spec["task"];
    let mut lines = vec![(
        "schedule",
        format!("{} ({}): {}", text(&spec["schedule"]), text(&spec["timezone"]), text(&job["schedule_description"])),
    )];
    let task_line = match task["kind"].as_str() {
        Some("shell") => format!("shell: {}{}", clip(&text(&task["command"]), 100), run_as(task)),
        Some("http") => format!("http: {} {}{}", text(&task["method"]), clip(&text(&task["url"]), 100), polled(task)),
        Some("grpc") => format!("grpc: {} at {}", text(&task["method"]), clip(&text(&task["endpoint"]), 100)),
        Some("handler") => format!("handler: {}{}", text(&task["name"]), executors(&job["eligible_workers"])),
        _ => text(&task["kind"]),
    };
    lines.push(("task", task_line));
    lines.push(("team", spec["team"].as_str().unwrap_or("none (global roles only)").to_owned()));
    if let Some(d) = spec["description"].as_str().filter(|d| !d.is_empty()) {
        lines.push(("description", clip(d, 200)));
    }
    lines.push(("labels", pairs(&spec["labels"])));
    lines.push(("timeout", spec["timeout"].as_str().unwrap_or("none").to_owned()));
    let retries = &spec["retries"];
    lines.push((
        "retries",
        match retries["max"].as_u64() {
            Some(0) | None => "none".to_owned(),
            Some(n) => {
                format!("{n} (backoff {}, at most {})", text(&retries["backoff"]), text(&retries["max_backoff"]))
            }
        },
    ));
    let mode = match &spec["mode"] {
        Value::String(m) => m.clone(),
        Value::Object(m) => m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", "),
        other => text(other),
    };
    let concurrency = match (text(&spec["concurrency"]).as_str(), spec["max_queue"].as_u64()) {
        ("queue", n) => format!("queue (max {})", n.unwrap_or(5)),
        (other, _) => other.to_owned(),
    };
    lines.push(("concurrency", format!("{concurrency}, misfire {}, mode {mode}", text(&spec["misfire"]))));
    if spec["selector"].as_object().is_some_and(|s| !s.is_empty()) {
        lines.push((
            "selector",
            format!("{} ({} live worker(s) match)", pairs(&spec["selector"]), text(&job["eligible_workers"])),
        ));
    }
    for (label, key) in [("on success", "on_success"), ("on failure", "on_failure")] {
        if let Some(list) = spec[key].as_array().filter(|l| !l.is_empty()) {
            let names: Vec<String> = list.iter().map(text).collect();
            lines.push((label, format!("run {}", names.join(", "))));
        }
    }
    if let Some(n) = spec["pause_after_failures"].as_u64() {
        lines.push(("pause after", format!("{n} final failures in a row")));
    }
    if let Some(alerts) = alerts_line(&spec["alerts"], &spec["notify"]) {
        lines.push(("alerts", alerts));
    }
    if let Some(notify) = notify_line(&spec["notify"]) {
        lines.push(("notify", notify));
    }
    lines
}

/// A notify target as people name it: its `name`, else its URL (a secret URL is not shown).
fn target_label(target: &Value) -> String {
    match (target["name"].as_str(), target["url"].as_str()) {
        (Some(name), _) => name.to_owned(),
        (None, Some(url)) => clip(url, 60),
        (None, None) => "a secret URL".to_owned(),
    }
}

/// The SLA alerts a spec sets (`alerts`), in words, each with who hears it: `late after 1m →
/// oncall, running over 10m → nobody (no target listens for long_running)`; a job without
/// `notify` sends them to the workers' default targets. `None` when it sets none.
fn alerts_line(alerts: &Value, notify: &Value) -> Option<String> {
    let mut parts = Vec::new();
    let set = [
        ("late_start", "late after", "late"),
        ("max_duration", "running over", "long_running"),
        ("no_success_within", "stale after", "stale"),
        ("on_output_match", "output matches", "output_match"),
    ];
    for (key, words, event) in set {
        let Some(value) = alerts[key].as_str() else { continue };
        let what = if key == "on_output_match" { format!("/{}/", clip(value, 100)) } else { value.to_owned() };
        let heard_by = match notify.as_array() {
            None => "the workers' default targets".to_owned(),
            Some(targets) => {
                let names: Vec<String> = targets
                    .iter()
                    .filter(|t| t["on"].as_array().is_some_and(|on| on.iter().any(|e| e == event)))
                    .map(target_label)
                    .collect();
                if names.is_empty() {
                    format!("nobody (no target listens for {event})")
                } else {
                    names.join(", ")
                }
            }
        };
        parts.push(format!("{words} {what} → {heard_by}"));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Each notify target of the job with the events it listens for: `oncall: failure, recovery;
/// https://hooks.example/x: success`; `None` without `notify`.
fn notify_line(notify: &Value) -> Option<String> {
    let targets = notify.as_array().filter(|t| !t.is_empty())?;
    let parts: Vec<String> = targets
        .iter()
        .map(|t| {
            let on: Vec<String> = t["on"].as_array().into_iter().flatten().map(text).collect();
            format!("{}: {}", target_label(t), if on.is_empty() { "nothing".to_owned() } else { on.join(", ") })
        })
        .collect();
    Some(parts.join("; "))
}

/// One page of the job's records (`status`: a comma-separated filter): the records and whether
/// there are more.
async fn records(client: &Client, job: &str, status: Option<&str>, limit: u32) -> anyhow::Result<(Vec<Value>, bool)> {
    let path = format!(
        "/api/executions{}",
        query(&[
            ("job", Some(job.to_owned())),
            ("status", status.map(str::to_owned)),
            ("limit", Some(limit.to_string()))
        ])
    );
    let page = client.get(&path).await?;
    let list = page["executions"].as_array().cloned().unwrap_or_default();
    Ok((list, page["next_cursor"].is_string()))
}

/// The recorded runs of a job `describe` shows.
struct Runs {
    last: Vec<Value>,
    health: Health,
}

async fn runs(client: &Client, name: &str) -> anyhow::Result<Runs> {
    let (last, finished) = tokio::try_join!(
        records(client, name, None, LAST_RUNS),
        records(client, name, Some(FINISHED), HEALTH_WINDOW),
    )?;
    Ok(Runs { last: last.0, health: health(&finished.0, finished.1) })
}

/// The job's executions running now, from every worker's running markers, oldest first.
async fn running(client: &Client, name: &str) -> anyhow::Result<Vec<Value>> {
    let workers = client.get("/api/workers").await?;
    let mut running: Vec<Value> = workers["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|w| w["running_executions"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["job"] == name)
        .collect();
    running.sort_by_key(|e| (text(&e["started_at"]), text(&e["id"])));
    Ok(running)
}

pub async fn describe(client: &Client, name: &str, json: bool) -> anyhow::Result<()> {
    let path = format!("/api/jobs/{}", segment(name));
    let job = client.get(&path).await.with_context(|| format!("job {name:?}"))?;
    let (runs, running, delivered) = tokio::join!(runs(client, name), running(client, name), deliveries(client, name));
    let runs = runs.map_err(|e| format!("{:#}", e.context("searching the job's executions")));
    let running = running.map_err(|e| format!("{:#}", e.context("listing the running executions")));
    if json {
        let (last, health) = match &runs {
            Ok(r) => (
                json!(r.last),
                json!({
                    "last_finished": r.health.last_finished,
                    "failures_in_a_row": r.health.failures_in_a_row,
                    "failures_in_a_row_at_least": r.health.at_least,
                }),
            ),
            Err(_) => (Value::Null, Value::Null),
        };
        let errors: Vec<&String> = [runs.as_ref().err(), running.as_ref().err()].into_iter().flatten().collect();
        return print_doc(&json!({
            "job": job,
            "state": state_line(&job),
            "health": health,
            "running": running.as_ref().ok(),
            "last_runs": last,
            "notifications": delivered.as_ref().ok(),
            "errors": errors,
        }));
    }
    if let Err(e) = &runs {
        eprintln!("etcronctl: note: {e}; the recorded runs are left out");
    }
    if let Err(e) = &running {
        eprintln!("etcronctl: note: {e}; the running executions are left out");
    }
    out(&render(&job, runs.as_ref().ok(), running.as_deref().ok()))?;
    match delivered {
        Ok(list) if !list.is_empty() => out(&format!("\nLast notifications:\n{}", crate::notifications::render(&list))),
        Ok(_) => Ok(()),
        Err(e) => {
            eprintln!("etcronctl: note: {e:#}; the notifications are left out");
            Ok(())
        }
    }
}

/// How many of the job's last deliveries `describe` shows (an alert recorded `no_target`
/// among them).
const LAST_NOTIFICATIONS: u32 = 5;

/// The job's newest deliveries.
async fn deliveries(client: &Client, name: &str) -> anyhow::Result<Vec<Value>> {
    let path = format!(
        "/api/notifications{}",
        query(&[("job", Some(name.to_owned())), ("limit", Some(LAST_NOTIFICATIONS.to_string()))])
    );
    let v = client.get(&path).await.context("listing the job's notifications")?;
    Ok(v["notifications"].as_array().cloned().unwrap_or_default())
}

/// The sections of `describe` as text.
fn render(job: &Value, runs: Option<&Runs>, running: Option<&[Value]>) -> String {
    let mut s = String::new();
    let field = |s: &mut String, label: &str, value: &str| {
        let _ = writeln!(s, "{:<14}{value}", format!("{label}:"));
    };
    field(&mut s, "name", &text(&job["name"]));
    field(&mut s, "revision", &text(&job["revision"]));
    field(&mut s, "state", &state_line(job));
    for (label, value) in spec_lines(job) {
        field(&mut s, label, &value);
    }
    let next: Vec<&str> =
        job["next_runs"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let _ = writeln!(s, "\nNext runs:");
    if let Some(after) = job["paused"]["next_run_after"].as_str() {
        let _ = writeln!(s, "  {after} (the first after the pause)");
    } else if next.is_empty() {
        let _ = writeln!(s, "  none (the job does not fire: paused, disabled, invalid, or its schedule is over)");
    }
    for t in next {
        let _ = writeln!(s, "  {t}");
    }
    let _ = writeln!(s, "\nHealth:");
    let summary = &job["summary"];
    if let Some(r) = runs {
        let h = &r.health;
        let last = match &h.last_finished {
            Some(e) => format!("{} {} (scheduled {})", text(&e["status"]), text(&e["id"]), text(&e["scheduled_at"])),
            None => "none yet".to_owned(),
        };
        let _ = writeln!(s, "  {:<20}{last}", "last finished:");
        let streak =
            if h.at_least { format!("at least {}", h.failures_in_a_row) } else { h.failures_in_a_row.to_string() };
        let _ = writeln!(s, "  {:<20}{streak}", "failures in a row:");
    }
    if summary.is_object() {
        let _ = writeln!(
            s,
            "  {:<20}{} succeeded, {} failed, {} in all",
            "last 24 h:",
            text(&summary["succeeded_24h"]),
            text(&summary["failed_24h"]),
            text(&summary["total_24h"])
        );
    }
    if let Some(running) = running {
        let _ = writeln!(s, "\nRunning now:");
        if running.is_empty() {
            let _ = writeln!(s, "  none");
        } else {
            let mut t = Table::new(&["ID", "WORKER", "STARTED", "PID"]);
            for e in running {
                t.row(vec![text(&e["id"]), text(&e["worker_id"]), text(&e["started_at"]), text(&e["pid"])]);
            }
            indent(&mut s, &t.render());
        }
    }
    if let Some(queue) = job["queue"].as_array().filter(|q| !q.is_empty()) {
        let _ = writeln!(s, "\nQueued (oldest first):");
        let mut t = Table::new(&["ID", "DUE", "QUEUED", "BEHIND"]);
        for q in queue {
            t.row(vec![text(&q["execution_id"]), text(&q["scheduled_at"]), text(&q["queued_at"]), text(&q["behind"])]);
        }
        indent(&mut s, &t.render());
    }
    let Some(r) = runs else { return s };
    let _ = writeln!(s, "\nLast runs:");
    if r.last.is_empty() {
        let _ = writeln!(s, "  none");
    } else {
        let mut t = Table::new(&COLUMNS);
        for e in &r.last {
            t.row(row(e));
        }
        indent(&mut s, &t.render());
    }
    s
}

fn indent(s: &mut String, text: &str) {
    for line in text.lines() {
        let _ = writeln!(s, "  {line}");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn rec(id: &str, status: &str) -> Value {
        json!({"id": id, "status": status, "scheduled_at": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn failures_in_a_row_count_runs_by_their_last_attempt() {
        // Newest first: tick 3 failed twice (two attempts, one run), tick 2 timed out, tick 1
        // succeeded on its retry.
        let finished = [
            rec("j@3#2", "failed"),
            rec("j@3#1", "failed"),
            rec("j@2#1", "timed_out"),
            rec("j@1#2", "succeeded"),
            rec("j@1#1", "failed"),
            rec("j@0#1", "failed"),
        ];
        let h = health(&finished, false);
        assert_eq!(h.failures_in_a_row, 2);
        assert!(!h.at_least);
        assert_eq!(h.last_finished.unwrap()["id"], "j@3#2");
        // A success last: none in a row.
        assert_eq!(health(&[rec("j@4#1", "succeeded"), rec("j@3#1", "failed")], false).failures_in_a_row, 0);
        // Every run read failed and there are more: at least that many.
        let h = health(&[rec("j@2#1", "failed"), rec("j@1#1", "killed")], true);
        assert_eq!((h.failures_in_a_row, h.at_least), (2, true));
        let none = health(&[], false);
        assert_eq!((none.failures_in_a_row, none.at_least, none.last_finished), (0, false, None));
    }

    #[test]
    fn the_state_says_who_paused_and_why() {
        let paused = json!({"spec": {"enabled": true}, "paused": {"by": "ops", "at": "2026-01-01T00:00:00Z", "reason": "db move"}});
        assert_eq!(state_line(&paused), "paused by ops at 2026-01-01T00:00:00Z: db move");
        let until =
            json!({"spec": {}, "paused": {"by": "ops", "at": "t0", "until": "2026-11-28T08:00:00Z", "reason": "db"}});
        assert_eq!(state_line(&until), "paused by ops at t0 until 2026-11-28T08:00:00Z: db");
        assert_eq!(
            state_line(&json!({"spec": {"enabled": true}, "paused": {"by": null, "at": null, "reason": null}})),
            "paused"
        );
        assert_eq!(
            state_line(&json!({"spec": {"enabled": false}, "paused": null})),
            "disabled (the spec says enabled: false)"
        );
        assert_eq!(state_line(&json!({"spec": {"enabled": true}, "paused": null})), "enabled");
        assert_eq!(state_line(&json!({"spec": {}, "invalid": "schedule: bad"})), "invalid: schedule: bad");
    }

    #[test]
    fn a_queue_job_shows_its_limit_and_what_waits() {
        let job = json!({"name": "q", "schedule_description": "Every second", "eligible_workers": 1,
            "spec": {"schedule": "* * * * * *", "timezone": "UTC", "task": {"kind": "shell", "command": "true"},
                     "retries": {"max": 0}, "concurrency": "queue", "max_queue": 3, "misfire": "skip", "mode": "single"},
            "queue": [{"execution_id": "q@2000#1", "scheduled_at": "t2", "queued_at": "t3", "behind": "q@1000#1"}]});
        let lines: Vec<String> = spec_lines(&job).into_iter().map(|(l, v)| format!("{l}: {v}")).collect();
        assert!(lines.contains(&"concurrency: queue (max 3), misfire skip, mode single".to_owned()), "{lines:?}");
        let text = render(&job, None, None);
        assert!(text.contains("Queued (oldest first):"), "{text}");
        assert!(text.contains("q@2000#1") && text.contains("q@1000#1"), "{text}");
    }

    #[test]
    fn a_grpc_task_shows_its_method_and_endpoint() {
        let job = json!({"name": "g", "schedule_description": "Hourly", "eligible_workers": 1, "spec": {
            "schedule": "@hourly", "timezone": "UTC", "retries": {"max": 0}, "misfire": "skip", "mode": "single",
            "task": {"kind": "grpc", "endpoint": "https://api.example:8443", "method": "billing.Invoices/Close",
                     "request": {}, "secret_metadata": {"authorization": null}}}});
        let lines: Vec<String> = spec_lines(&job).into_iter().map(|(l, v)| format!("{l}: {v}")).collect();
        assert!(
            lines.contains(&"task: grpc: billing.Invoices/Close at https://api.example:8443".to_owned()),
            "{lines:?}"
        );
    }

    #[test]
    fn a_handler_task_shows_its_name_and_the_executors_that_have_it() {
        let job = |eligible: u64| {
            json!({"name": "h", "schedule_description": "Hourly", "eligible_workers": eligible, "spec": {
                "schedule": "@hourly", "timezone": "UTC", "retries": {"max": 0}, "misfire": "skip", "mode": "single",
                "task": {"kind": "handler", "name": "hot-list", "env": {"REGION": "eu"}}}})
        };
        let task = |eligible| spec_lines(&job(eligible)).into_iter().find(|(l, _)| *l == "task").unwrap().1;
        assert_eq!(task(2), "handler: hot-list (2 live executor(s) have it)");
        assert_eq!(task(0), "handler: hot-list (no live executor has it)");
    }

    #[test]
    fn the_spec_in_a_few_lines() {
        let job = json!({"name": "a", "schedule_description": "At 03:00", "eligible_workers": 2, "spec": {
            "schedule": "0 3 * * *", "timezone": "UTC", "task": {"kind": "http", "method": "POST", "url": "http://h/x",
            "async": {"interval": "10s"}}, "retries": {"max": 2, "backoff": "10s", "max_backoff": "5m"}, "concurrency": "forbid", "misfire": "skip",
            "mode": {"sharded": 3}, "selector": {"zone": "a"}, "on_failure": ["alert"], "labels": {}, "team": "payments",
            "pause_after_failures": 5, "alerts": {"late_start": "1m", "max_duration": "10m",
            "no_success_within": "2h", "on_output_match": "ERROR|panic"}}});
        let lines: Vec<String> = spec_lines(&job).into_iter().map(|(l, v)| format!("{l}: {v}")).collect();
        assert_eq!(
            lines,
            [
                "schedule: 0 3 * * * (UTC): At 03:00",
                "task: http: POST http://h/x (async: 202, then its status URL polled every 10s)",
                "team: payments",
                "labels: -",
                "timeout: none",
                "retries: 2 (backoff 10s, at most 5m)",
                "concurrency: forbid, misfire skip, mode sharded 3",
                "selector: zone=a (2 live worker(s) match)",
                "on failure: run alert",
                "pause after: 5 final failures in a row",
                "alerts: late after 1m → the workers' default targets; running over 10m → the workers' default targets; \
                 stale after 2h → the workers' default targets; output matches /ERROR|panic/ → the workers' default targets",
            ]
        );
        assert!(render(&job, None, None).contains("alerts:       late after 1m → the workers' default targets; "));
    }

    #[test]
    fn alerts_show_only_what_is_set_and_who_hears_each() {
        let oncall = json!([{"name": "oncall", "url": "http://h/x", "on": ["failure", "long_running"]},
                            {"url": "http://h/y", "on": ["late"]}, {"secret_url": null, "on": ["long_running"]}]);
        assert_eq!(
            alerts_line(&json!({"max_duration": "1h 30m"}), &oncall).as_deref(),
            Some("running over 1h 30m → oncall, a secret URL")
        );
        // The usual choice, a target for failures only: the alert reaches nobody, and says so.
        let failures = json!([{"name": "oncall", "url": "http://h/x", "on": ["failure"]}]);
        assert_eq!(
            alerts_line(&json!({"max_duration": "3s", "late_start": "1m"}), &failures).as_deref(),
            Some("late after 1m → nobody (no target listens for late); running over 3s → nobody (no target listens for long_running)")
        );
        assert_eq!(
            alerts_line(&json!({"no_success_within": "1day", "on_output_match": "x".repeat(300)}), &Value::Null)
                .unwrap(),
            format!(
                "stale after 1day → the workers' default targets; output matches /{}…/ → the workers' default targets",
                "x".repeat(99)
            )
        );
        assert_eq!(alerts_line(&json!({}), &oncall), None);
        assert_eq!(alerts_line(&Value::Null, &oncall), None);
        assert_eq!(
            notify_line(&oncall).as_deref(),
            Some("oncall: failure, long_running; http://h/y: late; a secret URL: long_running")
        );
        assert_eq!(notify_line(&Value::Null), None);
        // A job without alerts has no alerts line.
        let job = json!({"name": "a", "spec": {"schedule": "@hourly", "task": {"kind": "shell", "command": "true"}}});
        assert!(spec_lines(&job).iter().all(|(label, _)| *label != "alerts"));
        assert!(!render(&job, None, None).contains("alerts"));
    }
}
