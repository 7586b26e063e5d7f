//! `workers ls|cordon|drain|uncordon`: the live workers, and taking one out of the race for new
//! runs (a global admin's).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::Value;

use crate::client::{segment, Client};
use crate::exit::{Exit, Unsuccessful};
use crate::table::{pairs, text, Table};
use crate::{out, print_doc};

/// How often `drain --wait` asks whether the worker is empty (it publishes its count every 2 s).
const POLL: Duration = Duration::from_secs(1);

pub async fn list(client: &Client, json: bool) -> anyhow::Result<()> {
    let v = client.get("/api/workers").await.context("listing workers")?;
    if json {
        return print_doc(&v);
    }
    out(&table(&v))?;
    let unmatched: Vec<String> = v["unmatched_jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|u| format!("{} (selector {})", text(&u["job"]), pairs(&u["selector"])))
        .collect();
    if !unmatched.is_empty() {
        let more = v["unmatched_total"].as_u64().map_or(0, |n| n.saturating_sub(unmatched.len() as u64));
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        eprintln!(
            "etcronctl: note: no live worker that is not cordoned matches these jobs: {}{more}",
            unmatched.join(", ")
        );
    }
    Ok(())
}

/// The workers of `GET /api/workers` as a table; a `HANDLERS` column (after `TEAMS`) when an
/// executor (an application embedding `etcron-sdk`) is live, `-` for the plain workers.
fn table(v: &Value) -> String {
    let workers: Vec<&Value> = v["workers"].as_array().into_iter().flatten().collect();
    let handlers_of = |w: &Value| -> Option<String> {
        w["handlers"].as_array().filter(|h| !h.is_empty()).map(|h| h.iter().map(text).collect::<Vec<_>>().join(","))
    };
    let executors = workers.iter().any(|w| handlers_of(w).is_some());
    let mut columns = vec!["ID", "STATE", "HOST", "LABELS", "TEAMS"];
    if executors {
        columns.push("HANDLERS");
    }
    columns.extend(["TASKS RUN AS", "WORKER RUNS AS", "CAPACITY", "RUNNING", "VERSION", "UP SINCE"]);
    let mut table = Table::new(&columns);
    for w in workers {
        // A worker bound to no team is shared: it runs every team's jobs.
        let teams = w["teams"]
            .as_array()
            .filter(|t| !t.is_empty())
            .map_or_else(|| "(shared)".to_owned(), |t| t.iter().map(text).collect::<Vec<_>>().join(","));
        let mut row = vec![text(&w["id"]), state(&w["cordon"]), text(&w["hostname"]), pairs(&w["labels"]), teams];
        let handlers = handlers_of(w);
        // An executor runs no shell task: who they would run as does not apply.
        let runs_as = if handlers.is_some() { "-".to_owned() } else { text(&w["task_user"]) };
        if executors {
            row.push(handlers.unwrap_or_else(|| "-".to_owned()));
        }
        row.extend([
            runs_as,
            text(&w["os_user"]),
            text(&w["capacity"]),
            text(&w["running"]),
            text(&w["version"]),
            text(&w["started_at"]),
        ]);
        table.row(row);
    }
    table.render()
}

/// A worker's state in one word: `ready`, `cordoned`, `draining` or `drained` (draining and
/// empty).
fn state(cordon: &Value) -> String {
    match cordon["state"].as_str() {
        None => "ready".to_owned(),
        Some("draining") if cordon["empty"] == Value::Bool(true) => "drained".to_owned(),
        Some(state) => state.to_owned(),
    }
}

/// `workers cordon ID` and `workers drain ID [--wait D]`: with `wait`, polls until nothing runs
/// on the worker (exit 0), or fails with exit 5 when `wait` passes first.
pub async fn cordon(client: &Client, id: &str, drain: bool, wait: Option<Duration>, json: bool) -> anyhow::Result<()> {
    let action = if drain { "drain" } else { "cordon" };
    let v = client
        .post(&format!("/api/workers/{}/{action}", segment(id)))
        .await
        .with_context(|| format!("{action} {id}"))?;
    if json {
        print_doc(&v)?;
    } else {
        out(&format!("worker {id} {}: {} running\n", state(&v["cordon"]), text(&v["cordon"]["running"])))?;
    }
    let Some(wait) = wait else { return Ok(()) };
    let deadline = Instant::now() + wait;
    let mut empty = v["cordon"]["empty"] == Value::Bool(true);
    while !empty {
        if Instant::now() >= deadline {
            let what = format!("worker {id} still runs tasks after {wait:?}");
            eprintln!("etcronctl: {what}");
            return Err(Unsuccessful { exit: Exit::Unsuccessful, what }.into());
        }
        tokio::time::sleep(POLL).await;
        let list = client.get("/api/workers").await.context("listing workers")?;
        let worker = list["workers"].as_array().into_iter().flatten().find(|w| w["id"].as_str() == Some(id));
        // Gone (stopped, or its session lost): nothing runs there any more.
        empty = worker.is_none_or(|w| w["cordon"]["empty"] == Value::Bool(true));
    }
    if !json {
        out(&format!("worker {id} drained: nothing runs on it\n"))?;
    }
    Ok(())
}

/// `workers uncordon ID`.
pub async fn uncordon(client: &Client, id: &str, json: bool) -> anyhow::Result<()> {
    let v = client
        .post(&format!("/api/workers/{}/uncordon", segment(id)))
        .await
        .with_context(|| format!("uncordon {id}"))?;
    if json {
        return print_doc(&v);
    }
    let was = if v["was_cordoned"] == Value::Bool(true) { "" } else { " (it was not cordoned)" };
    out(&format!("worker {id} ready: it races for new runs{was}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_state_column_says_ready_cordoned_draining_or_drained() {
        assert_eq!(state(&Value::Null), "ready");
        assert_eq!(state(&json!({"state": "cordoned", "empty": true})), "cordoned");
        assert_eq!(state(&json!({"state": "draining", "empty": false})), "draining");
        assert_eq!(state(&json!({"state": "draining", "empty": true})), "drained");
    }

    #[test]
    fn a_handlers_column_appears_with_an_executor() {
        let worker = json!({"id": "w1", "hostname": "h", "capacity": 64, "running": 0, "version": "v",
            "started_at": "t", "task_user": "root", "os_user": "root(uid-0)"});
        let plain = table(&json!({"workers": [worker]}));
        assert!(!plain.contains("HANDLERS"), "{plain}");
        let executor = json!({"id": "app-1", "hostname": "h", "capacity": 64, "running": 1, "version": "v",
            "started_at": "t", "task_user": "nobody", "handlers": ["hot-list", "report"]});
        let both = table(&json!({"workers": [worker, executor]}));
        let lines: Vec<Vec<&str>> = both.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(lines[0][..6], ["ID", "STATE", "HOST", "LABELS", "TEAMS", "HANDLERS"], "{both}");
        assert_eq!(lines[1][..6], ["w1", "ready", "h", "-", "(shared)", "-"], "{both}");
        assert_eq!(lines[1][6..8], ["root", "root(uid-0)"], "{both}");
        assert!(lines[0].join(" ").contains("TASKS RUN AS WORKER RUNS AS"), "{both}");
        assert_eq!(lines[2][..7], ["app-1", "ready", "h", "-", "(shared)", "hot-list,report", "-"], "{both}");
    }
}
