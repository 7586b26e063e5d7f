//! `workflows get|resume`: a workflow run's steps (state, attempt, execution, when it ended,
//! the results of those that succeeded) and edges; the rerun of its failed steps.

use anyhow::Context as _;
use serde_json::Value;

use crate::client::{segment, Client};
use crate::table::{clip, text, Table};
use crate::{out, print_doc};

/// Widest result shown in the table; `-o json` shows it whole.
const RESULT_WIDTH: usize = 100;

fn path(run: &str) -> String {
    format!("/api/workflows/{}", segment(run))
}

/// The items of a list field, none when absent.
fn items<'a>(v: &'a Value, field: &str) -> &'a [Value] {
    v[field].as_array().map_or(&[], Vec::as_slice)
}

/// `GET /api/workflows/{run}` as text: the run, its steps, the results, the edges.
fn detail(v: &Value) -> String {
    let mut s = format!("run:    {}\nroot:   {}\nstate:  {}\n\n", text(&v["run"]), text(&v["root"]), text(&v["state"]));
    let mut steps = Table::new(&["JOB", "STATE", "ATTEMPT", "EXECUTION", "AT"]);
    for step in items(v, "steps") {
        steps.row(vec![
            text(&step["job"]),
            text(&step["state"]),
            text(&step["attempt"]),
            text(&step["execution_id"]),
            text(&step["at"]),
        ]);
    }
    s.push_str(&steps.render());
    let succeeded: Vec<&Value> = items(v, "steps").iter().filter(|st| !st["result"].is_null()).collect();
    if !succeeded.is_empty() {
        let mut results = Table::new(&["JOB", "RESULT"]);
        for step in succeeded {
            results.row(vec![text(&step["job"]), clip(&step["result"].to_string(), RESULT_WIDTH)]);
        }
        s.push_str(&format!("\nresults:\n{}", results.render()));
    }
    let edges = items(v, "edges");
    if edges.is_empty() {
        s.push_str("\nno edges\n");
    } else {
        let mut t = Table::new(&["FROM", "TO", "KIND"]);
        for e in edges {
            t.row(vec![text(&e["from"]), text(&e["to"]), text(&e["kind"])]);
        }
        s.push_str(&format!("\nedges:\n{}", t.render()));
    }
    s
}

pub async fn get(client: &Client, run: &str, json: bool) -> anyhow::Result<()> {
    let v = client.get(&path(run)).await.with_context(|| format!("workflow run {run}"))?;
    if json {
        return print_doc(&v);
    }
    out(&detail(&v))
}

/// `POST /api/workflows/{run}/resume`: prints each step it reran with its new execution.
pub async fn resume(client: &Client, run: &str, json: bool) -> anyhow::Result<()> {
    let v =
        client.post(&format!("{}/resume", path(run))).await.with_context(|| format!("resuming workflow run {run}"))?;
    if json {
        return print_doc(&v);
    }
    let rerun = items(&v, "rerun");
    let mut t = Table::new(&["JOB", "EXECUTION"]);
    for r in rerun {
        t.row(vec![text(&r["job"]), text(&r["execution_id"])]);
    }
    out(&format!("workflow run {run} resumed: {} failed step(s) rerun\n{}", rerun.len(), t.render()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_run_shows_its_steps_results_and_edges() {
        let v = json!({"run": "r1", "root": "extract@1000#1", "root_job": "extract", "state": "failed",
            "steps": [
                {"job": "extract", "state": "succeeded", "execution_id": "extract@1000#1", "attempt": 1,
                 "status": "succeeded", "at": "1970-01-01T00:00:02.000Z", "result": {"rows": 12}},
                {"job": "tb", "state": "failed", "execution_id": "tb@dep-wf-r1#2", "attempt": 2,
                 "status": "failed", "at": "1970-01-01T00:00:03.000Z", "result": null},
                {"job": "load", "state": "not_reached", "execution_id": null, "attempt": null,
                 "status": null, "at": null, "result": null}],
            "edges": [{"from": "extract", "to": "tb", "kind": "after"}, {"from": "tb", "to": "load", "kind": "after"}]});
        let s = detail(&v);
        assert!(s.starts_with("run:    r1\nroot:   extract@1000#1\nstate:  failed\n"), "{s}");
        let row = |job: &str| {
            s.lines().find(|l| l.starts_with(&format!("{job} "))).unwrap().split_whitespace().collect::<Vec<_>>()
        };
        assert_eq!(row("tb"), ["tb", "failed", "2", "tb@dep-wf-r1#2", "1970-01-01T00:00:03.000Z"], "{s}");
        assert_eq!(row("load"), ["load", "not_reached", "-", "-", "-"], "{s}");
        assert!(s.contains("results:\nJOB      RESULT\nextract  {\"rows\":12}\n"), "{s}");
        assert!(s.contains("edges:\nFROM     TO    KIND\nextract  tb    after\ntb       load  after\n"), "{s}");
        let long = json!({"steps": [{"job": "a", "result": "x".repeat(500)}], "edges": []});
        let s = detail(&long);
        assert!(s.contains('…') && s.contains("no edges"), "{s}");
    }
}
