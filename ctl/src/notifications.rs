//! `notifications`: the webhook deliveries workers recorded (`GET /api/notifications`), newest
//! first, filtered by job, execution and event: what was sent to which target, how it ended
//! (`pending`, `delivered`, `failed`, `silenced`, `no_target`: an alert no target listens for)
//! and after how many tries.

use anyhow::Context as _;
use etcron_model::spec::notify::NotifyEvent;
use serde_json::Value;

use crate::client::{query, Client};
use crate::table::{clip, text, Table};
use crate::{out, print_doc};

/// How many deliveries the API answers when `--limit` is not given.
const API_DEFAULT_LIMIT: u32 = 50;

/// The events `--event` takes: the model's, as the API names them.
pub fn events() -> impl Iterator<Item = &'static str> {
    NotifyEvent::ALL.into_iter().map(NotifyEvent::as_str)
}

/// Filters of `GET /api/notifications`; the master checks them (a bad one is a 400 naming it).
#[derive(Debug, Clone, Default)]
pub struct Filters {
    pub job: Option<String>,
    pub execution: Option<String>,
    pub event: Option<String>,
    pub limit: Option<u32>,
}

impl Filters {
    fn query(&self) -> String {
        query(&[
            ("job", self.job.clone()),
            ("execution", self.execution.clone()),
            ("event", self.event.clone()),
            ("limit", self.limit.map(|l| l.to_string())),
        ])
    }
}

pub const COLUMNS: [&str; 8] = ["CREATED", "JOB", "EVENT", "STATE", "TARGET", "TRIES", "EXECUTION", "RESULT"];

/// How the last try ended: its error, else the answer's status; `-` before any try (a pending
/// or silenced delivery).
fn result(d: &Value) -> String {
    if d["state"] == "no_target" {
        return format!("not sent: no target listens for {}", text(&d["event"]));
    }
    let Some(last) = d["attempts"].as_array().and_then(|a| a.last()) else { return "-".to_owned() };
    let words = if let Some(err) = last["error"].as_str().filter(|e| !e.is_empty()) {
        err.to_owned()
    } else if let Some(status) = last["http_status"].as_u64() {
        format!("HTTP {status}")
    } else {
        "-".to_owned()
    };
    clip(&words, 80)
}

fn row(d: &Value) -> Vec<String> {
    let target = match (d["target_name"].as_str().filter(|n| !n.is_empty()), d["target"].as_str()) {
        (Some(name), _) => name.to_owned(),
        (None, Some("")) => "(none)".to_owned(),
        (None, _) => text(&d["target"]),
    };
    vec![
        text(&d["created_at"]),
        text(&d["job"]),
        text(&d["event"]),
        text(&d["state"]),
        target,
        d["attempts"].as_array().map_or(0, Vec::len).to_string(),
        text(&d["execution_id"]),
        result(d),
    ]
}

/// The deliveries as a table, newest first as the API lists them.
pub fn render(deliveries: &[Value]) -> String {
    let mut table = Table::new(&COLUMNS);
    for d in deliveries {
        table.row(row(d));
    }
    table.render()
}

/// `notifications [--job J] [--execution ID] [--event E] [--limit N]`.
pub async fn list(client: &Client, filters: &Filters, json: bool) -> anyhow::Result<()> {
    let v = client.get(&format!("/api/notifications{}", filters.query())).await.context("listing notifications")?;
    if json {
        return print_doc(&v);
    }
    let deliveries = v["notifications"].as_array().cloned().unwrap_or_default();
    out(&render(&deliveries))?;
    let limit = filters.limit.unwrap_or(API_DEFAULT_LIMIT);
    if !deliveries.is_empty() && deliveries.len() >= usize::try_from(limit).unwrap_or(usize::MAX) {
        eprintln!("etcronctl: the newest {limit} deliveries are shown; older ones may match (--limit, at most 500)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn filters_become_an_encoded_query() {
        assert_eq!(Filters::default().query(), "");
        let f = Filters {
            job: Some("nightly".into()),
            execution: Some("nightly@1767225600000#2".into()),
            event: Some("long_running".into()),
            limit: Some(5),
        };
        assert_eq!(f.query(), "?job=nightly&execution=nightly%401767225600000%232&event=long_running&limit=5");
        assert_eq!(Filters { event: Some("stale".into()), ..Filters::default() }.query(), "?event=stale");
    }

    #[test]
    fn an_alert_no_target_hears_shows_as_not_sent() {
        let d = json!({"id": "a@1#1/long_running/none", "job": "a", "execution_id": "a@1#1", "event": "long_running",
            "target": "", "target_name": null, "default_target": false, "format": "json", "worker_id": "w1",
            "state": "no_target", "attempts": [], "created_at": "2026-01-01T00:00:00.000Z"});
        let r = row(&d);
        assert_eq!((r[3].as_str(), r[4].as_str(), r[5].as_str()), ("no_target", "(none)", "0"));
        assert_eq!(r[7], "not sent: no target listens for long_running");
    }

    #[test]
    fn every_event_of_the_model_is_offered() {
        let names: Vec<&str> = events().collect();
        for e in ["failure", "success", "missed", "recovery", "paused", "late", "long_running", "stale", "output_match"]
        {
            assert!(names.contains(&e), "{e}");
        }
    }

    #[test]
    fn deliveries_as_a_table() {
        let failed = json!({"id": "a@1#1/failure/0", "job": "a", "execution_id": "a@1#1", "event": "failure",
            "target": "https://hooks.example/x", "target_name": "pager", "default_target": false, "format": "json",
            "worker_id": "w1", "state": "failed", "created_at": "2026-01-01T00:00:01.000Z",
            "finished_at": "2026-01-01T00:00:09.000Z", "attempts": [
                {"at": "2026-01-01T00:00:01.000Z", "duration_ms": 12, "http_status": 503, "error": null},
                {"at": "2026-01-01T00:00:05.000Z", "duration_ms": 3000, "http_status": null, "error": "timed out"}]});
        let silenced = json!({"id": "a@stale-1000/stale/default-0", "job": "a", "execution_id": "a@stale-1000",
            "event": "stale", "target": "https://ops.example/hook", "target_name": null, "default_target": true,
            "format": "slack", "worker_id": "w2", "state": "silenced", "created_at": "2026-01-01T00:00:00.000Z",
            "finished_at": "2026-01-01T00:00:00.000Z", "attempts": []});
        let delivered = json!({"job": "b", "execution_id": "b@2#1", "event": "late", "target": "https://h/y",
            "target_name": "", "state": "delivered", "created_at": "t",
            "attempts": [{"at": "t", "duration_ms": 5, "http_status": 204, "error": null}]});
        assert_eq!(
            render(&[failed, silenced, delivered]),
            "\
CREATED                   JOB  EVENT    STATE      TARGET                    TRIES  EXECUTION     RESULT
2026-01-01T00:00:01.000Z  a    failure  failed     pager                     2      a@1#1         timed out
2026-01-01T00:00:00.000Z  a    stale    silenced   https://ops.example/hook  0      a@stale-1000  -
t                         b    late     delivered  https://h/y               1      b@2#1         HTTP 204
"
        );
        assert_eq!(render(&[]), "CREATED  JOB  EVENT  STATE  TARGET  TRIES  EXECUTION  RESULT\n");
    }

    #[test]
    fn a_long_error_is_clipped() {
        let d = json!({"attempts": [{"http_status": 500, "error": "x".repeat(200)}]});
        assert_eq!(result(&d).chars().count(), 80);
        assert_eq!(result(&json!({"attempts": [{"http_status": null, "error": null}]})), "-");
    }
}
