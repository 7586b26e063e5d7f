//! `jobs backfill` (run a range of a job's past ticks again, or with `--dry-run` list the ticks
//! it would run), `jobs backfills` (a job's backfills, or one with each tick's status) and
//! `jobs backfill-cancel`. The master picks the ticks and checks every field; etcronctl sends
//! the flags as given and prints the answers.

use std::fmt::Write as _;

use anyhow::Context as _;
use reqwest::Method;
use serde_json::{json, Value};

use crate::client::{segment, Client};
use crate::table::{text, Table};
use crate::{out, print_doc};

/// What `jobs backfill --which` takes (the API's `which`).
pub const WHICH: [&str; 3] = ["missing", "failed", "all"];
/// What `jobs backfill --overlap` takes (the API's `overlap`).
pub const OVERLAP: [&str; 2] = ["serial", "parallel"];
/// Ticks a dry run lists as left out, with why (`-o json` has the API's first 100).
const EXCLUDED_SHOWN: usize = 5;

fn path(name: &str) -> String {
    format!("/api/jobs/{}", segment(name))
}

/// What `jobs backfill` asks for: the range and the flags as given (the master checks them
/// and names the field it refuses).
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// RFC 3339, both ends included.
    pub from: String,
    pub to: String,
    pub which: Option<String>,
    pub overlap: Option<String>,
    pub max_parallel: Option<u32>,
    pub max_runs: Option<u32>,
    pub reason: Option<String>,
    pub dry_run: bool,
}

impl Request {
    /// The body of `POST /api/jobs/{job}/backfill`: the flags given, the API's defaults for the
    /// others.
    #[must_use]
    pub fn body(&self) -> Value {
        let mut body = json!({ "from": self.from, "to": self.to });
        if let Some(w) = &self.which {
            body["which"] = json!(w);
        }
        if let Some(o) = &self.overlap {
            body["overlap"] = json!(o);
        }
        if let Some(n) = self.max_parallel {
            body["max_parallel"] = json!(n);
        }
        if let Some(n) = self.max_runs {
            body["max_runs"] = json!(n);
        }
        if let Some(r) = &self.reason {
            body["reason"] = json!(r);
        }
        if self.dry_run {
            body["dry_run"] = json!(true);
        }
        body
    }
}

/// `jobs backfill NAME --from T --to T [...]`: creates the backfill and prints its id, state
/// and counts; with `--dry-run`, the ticks it would run and those it leaves out.
pub async fn backfill(client: &Client, name: &str, request: &Request, json: bool) -> anyhow::Result<()> {
    let body = request.body();
    let reply = client.send(Method::POST, &format!("{}/backfill", path(name)), Some(&body), &[]).await;
    let v = reply.with_context(|| format!("backfilling job {name:?}"))?.body;
    if json {
        return print_doc(&v);
    }
    if request.dry_run {
        return out(&dry_run(&v));
    }
    out(&header(&v))?;
    eprintln!("etcronctl: follow it with `etcronctl jobs backfills {name} {}`", text(&v["id"]));
    Ok(())
}

/// A dry run's answer: the ticks as a table, then how many, and the first ticks left out.
fn dry_run(v: &Value) -> String {
    let mut table = Table::new(&["AT", "EXECUTION"]);
    for t in v["ticks"].as_array().into_iter().flatten() {
        table.row(vec![text(&t["at"]), text(&t["execution_id"])]);
    }
    let mut s = table.render();
    let excluded = v["excluded"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(
        s,
        "{} ticks; {} left out (dry run: nothing was created)",
        text(&v["count"]),
        text(&v["excluded_count"])
    );
    for e in excluded.iter().take(EXCLUDED_SHOWN) {
        let _ = writeln!(s, "  {}  {}", text(&e["at"]), text(&e["why"]));
    }
    let total = v["excluded_count"].as_u64().and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
    let more = total.saturating_sub(excluded.len().min(EXCLUDED_SHOWN));
    if more > 0 {
        let _ = writeln!(s, "  … and {more} more (-o json lists the first 100)");
    }
    s
}

/// Of a backfill's counts: the items with a final record and all of them, `done/total`.
fn done(counts: &Value) -> String {
    let n = |field: &str| counts[field].as_u64().unwrap_or(0);
    format!("{}/{}", n("succeeded") + n("failed") + n("not_run"), n("total"))
}

/// A backfill's counts in one line: `3/12 done: 2 succeeded, 1 failed, 0 not run; 1 running,
/// 8 pending`.
/// (`, 8 cancelled` instead of pending once cancelled).
fn counts(counts: &Value) -> String {
    let mut line = format!(
        "{} done: {} succeeded, {} failed, {} not run; {} running, {} pending",
        done(counts),
        text(&counts["succeeded"]),
        text(&counts["failed"]),
        text(&counts["not_run"]),
        text(&counts["running"]),
        text(&counts["pending"])
    );
    if counts["cancelled"].as_u64().is_some_and(|n| n > 0) {
        line.push_str(&format!(", {} cancelled", text(&counts["cancelled"])));
    }
    line
}

/// A backfill's header lines: id, job, state, range, who made it and its counts.
fn header(b: &Value) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "id:         {}", text(&b["id"]));
    let _ = writeln!(s, "job:        {}", text(&b["job"]));
    let _ = writeln!(s, "state:      {}", text(&b["state"]));
    let overlap = match b["overlap"].as_str() {
        Some("parallel") => format!("parallel, {} at once", text(&b["max_parallel"])),
        _ => text(&b["overlap"]),
    };
    let _ =
        writeln!(s, "range:      {} .. {} (which {}, {overlap})", text(&b["from"]), text(&b["to"]), text(&b["which"]));
    let _ = writeln!(s, "created:    {} by {}", text(&b["created_at"]), text(&b["created_by"]));
    if let Some(r) = b["reason"].as_str().filter(|r| !r.is_empty()) {
        let _ = writeln!(s, "reason:     {r}");
    }
    if b["cancelled_at"].is_string() {
        let _ = writeln!(s, "cancelled:  {} by {}", text(&b["cancelled_at"]), text(&b["cancelled_by"]));
    }
    let _ = writeln!(s, "counts:     {}", counts(&b["counts"]));
    s
}

/// `jobs backfills NAME [ID]`: the job's backfills, newest first; or one with each tick.
pub async fn list(client: &Client, name: &str, id: Option<&str>, json: bool) -> anyhow::Result<()> {
    if let Some(id) = id {
        return get(client, name, id, json).await;
    }
    let v = client
        .get(&format!("{}/backfills", path(name)))
        .await
        .with_context(|| format!("listing the backfills of job {name:?}"))?;
    if json {
        return print_doc(&v);
    }
    let mut table =
        Table::new(&["ID", "STATE", "FROM", "TO", "WHICH", "DONE", "SUCCEEDED", "FAILED", "NOT RUN", "CREATED BY"]);
    for b in v["backfills"].as_array().into_iter().flatten() {
        let c = &b["counts"];
        table.row(vec![
            text(&b["id"]),
            text(&b["state"]),
            text(&b["from"]),
            text(&b["to"]),
            text(&b["which"]),
            done(c),
            text(&c["succeeded"]),
            text(&c["failed"]),
            text(&c["not_run"]),
            text(&b["created_by"]),
        ]);
    }
    out(&table.render())
}

/// One backfill: its header lines, then each tick with its execution and status.
async fn get(client: &Client, name: &str, id: &str, json: bool) -> anyhow::Result<()> {
    let v = client
        .get(&format!("{}/backfills/{}", path(name), segment(id)))
        .await
        .with_context(|| format!("backfill {id} of job {name:?}"))?;
    if json {
        return print_doc(&v);
    }
    out(&format!("{}{}", header(&v), items(&v)))
}

/// A backfill's items as a table.
fn items(b: &Value) -> String {
    let mut table = Table::new(&["AT", "EXECUTION", "STATUS"]);
    for i in b["items"].as_array().into_iter().flatten() {
        table.row(vec![text(&i["at"]), text(&i["execution_id"]), text(&i["status"])]);
    }
    table.render()
}

/// `jobs backfill-cancel NAME ID`: no further tick is requested (a run already started
/// finishes); 409 when the backfill is done or cancelled already.
pub async fn cancel(client: &Client, name: &str, id: &str, json: bool) -> anyhow::Result<()> {
    let v = client
        .post(&format!("{}/backfills/{}/cancel", path(name), segment(id)))
        .await
        .with_context(|| format!("cancelling backfill {id} of job {name:?}"))?;
    if json {
        return print_doc(&v);
    }
    out(&header(&v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_holds_the_flags_given_and_leaves_the_rest_to_the_apis_defaults() {
        let range =
            Request { from: "2026-03-01T00:00:00Z".into(), to: "2026-03-02T00:00:00Z".into(), ..Request::default() };
        assert_eq!(range.body(), json!({"from": "2026-03-01T00:00:00Z", "to": "2026-03-02T00:00:00Z"}));
        let all = Request {
            which: Some("failed".into()),
            overlap: Some("parallel".into()),
            max_parallel: Some(3),
            max_runs: Some(500),
            reason: Some("db outage".into()),
            dry_run: true,
            ..range
        };
        assert_eq!(
            all.body(),
            json!({"from": "2026-03-01T00:00:00Z", "to": "2026-03-02T00:00:00Z", "which": "failed",
                   "overlap": "parallel", "max_parallel": 3, "max_runs": 500, "reason": "db outage", "dry_run": true})
        );
    }

    #[test]
    fn a_dry_run_lists_the_ticks_then_the_first_left_out() {
        let excluded: Vec<Value> = (0..7)
            .map(|i| json!({"at": format!("2026-03-01T00:0{i}:00.000Z"), "why": "it has a successful run"}))
            .collect();
        let v = json!({"dry_run": true, "count": 2, "excluded_count": 7, "excluded": excluded, "ticks": [
            {"at": "2026-03-01T01:00:00.000Z", "execution_id": "a@1772326800000#2"},
            {"at": "2026-03-01T02:00:00.000Z", "execution_id": "a@1772330400000#1"}]});
        let text = dry_run(&v);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "AT                        EXECUTION");
        assert_eq!(lines[1], "2026-03-01T01:00:00.000Z  a@1772326800000#2");
        assert_eq!(lines[3], "2 ticks; 7 left out (dry run: nothing was created)");
        assert_eq!(lines[4], "  2026-03-01T00:00:00.000Z  it has a successful run");
        assert_eq!(lines.len(), 4 + EXCLUDED_SHOWN + 1, "{text}");
        assert_eq!(lines[lines.len() - 1], "  … and 2 more (-o json lists the first 100)");
        let none = dry_run(&json!({"count": 0, "excluded_count": 0, "excluded": [], "ticks": []}));
        assert_eq!(none, "AT  EXECUTION\n0 ticks; 0 left out (dry run: nothing was created)\n");
    }

    #[test]
    fn counts_read_as_done_of_total_and_each_kind() {
        let c = json!({"total": 12, "pending": 8, "running": 1, "succeeded": 2, "failed": 1, "not_run": 0});
        assert_eq!(done(&c), "3/12");
        assert_eq!(counts(&c), "3/12 done: 2 succeeded, 1 failed, 0 not run; 1 running, 8 pending");
        assert_eq!(done(&json!({"total": 4, "succeeded": 2, "not_run": 2})), "4/4");
        let c =
            json!({"total": 3, "pending": 0, "running": 0, "succeeded": 1, "failed": 0, "not_run": 0, "cancelled": 2});
        assert_eq!(counts(&c), "1/3 done: 1 succeeded, 0 failed, 0 not run; 0 running, 0 pending, 2 cancelled");
    }

    #[test]
    fn the_header_names_the_backfill_and_a_table_its_ticks() {
        let b = json!({"id": "18f2c3a4b5c6d7e8", "job": "report", "state": "cancelled", "from": "2026-03-01T00:00:00.000Z",
            "to": "2026-03-02T00:00:00.000Z", "which": "missing", "overlap": "parallel", "max_parallel": 5,
            "created_by": "alice", "created_at": "2026-03-03T09:00:00.000Z", "reason": "db outage",
            "cancelled_by": "bob", "cancelled_at": "2026-03-03T09:05:00.000Z",
            "counts": {"total": 2, "pending": 1, "running": 0, "succeeded": 1, "failed": 0, "not_run": 0},
            "items": [{"at": "2026-03-01T00:00:00.000Z", "execution_id": "report@1772323200000#2", "status": "succeeded"},
                      {"at": "2026-03-01T01:00:00.000Z", "execution_id": "report@1772326800000#1", "status": "cancelled"}]});
        assert_eq!(
            header(&b),
            "id:         18f2c3a4b5c6d7e8\njob:        report\nstate:      cancelled\n\
             range:      2026-03-01T00:00:00.000Z .. 2026-03-02T00:00:00.000Z (which missing, parallel, 5 at once)\n\
             created:    2026-03-03T09:00:00.000Z by alice\nreason:     db outage\n\
             cancelled:  2026-03-03T09:05:00.000Z by bob\n\
             counts:     1/2 done: 1 succeeded, 0 failed, 0 not run; 0 running, 1 pending\n"
        );
        let serial = json!({"overlap": "serial", "max_parallel": 1, "counts": {}});
        assert!(header(&serial).contains("(which -, serial)\n") && !header(&serial).contains("reason:"));
        assert_eq!(
            items(&b),
            "AT                        EXECUTION               STATUS\n\
             2026-03-01T00:00:00.000Z  report@1772323200000#2  succeeded\n\
             2026-03-01T01:00:00.000Z  report@1772326800000#1  cancelled\n"
        );
    }
}
