//! `pools ls|get|put|delete`: the resource pools jobs name in `pool`, with the runs holding
//! their slots and the ticks waiting for them.

use anyhow::Context as _;
use reqwest::Method;
use serde_json::{json, Value};

use crate::client::{segment, Client};
use crate::table::{duration_ms, text, Table};
use crate::{out, print_doc};

fn path(name: &str) -> String {
    format!("/api/pools/{}", segment(name))
}

/// The items of a list field, none when absent.
fn items<'a>(v: &'a Value, field: &str) -> &'a [Value] {
    v[field].as_array().map_or(&[], Vec::as_slice)
}

/// `a,b` of a list of strings, `-` when empty.
fn joined(list: &[Value]) -> String {
    if list.is_empty() {
        return "-".to_owned();
    }
    list.iter().map(text).collect::<Vec<_>>().join(",")
}

/// A pool's jobs as [`joined`], with `+N more` when the answer lists only the first of
/// `jobs_total`.
fn pool_jobs(pool: &Value) -> String {
    let jobs = items(pool, "jobs");
    let more = pool["jobs_total"].as_u64().map_or(0, |n| n.saturating_sub(jobs.len() as u64));
    if more > 0 {
        format!("{} +{more} more", joined(jobs))
    } else {
        joined(jobs)
    }
}

/// How long ago an RFC 3339 instant was, from `now_ms` (`-` when it does not read).
fn age(at: &Value, now_ms: i64) -> String {
    at.as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map_or_else(|| "-".to_owned(), |t| duration_ms(u64::try_from(now_ms - t.timestamp_millis()).unwrap_or(0)))
}

/// A holder's or waiting tick's job and execution: `(a job you cannot see)` when hidden.
fn execution(item: &Value) -> (String, String) {
    if item["execution_id"].is_null() {
        return ("(hidden)".to_owned(), "(a job you cannot see)".to_owned());
    }
    (text(&item["job"]), text(&item["execution_id"]))
}

/// `GET /api/pools` as a table.
fn table(v: &Value) -> String {
    let mut table = Table::new(&["NAME", "SLOTS", "IN-USE", "WAITING", "JOBS"]);
    for p in items(v, "pools") {
        table.row(vec![
            text(&p["name"]),
            text(&p["slots"]),
            text(&p["in_use"]),
            items(p, "waiting").len().to_string(),
            pool_jobs(p),
        ]);
    }
    table.render()
}

/// One pool: its fields, then the runs holding its slots and the ticks waiting, with their ages.
fn detail(v: &Value, now_ms: i64) -> String {
    let mut s = format!(
        "name:        {}\nslots:       {} ({} in use)\nrevision:    {}\n",
        text(&v["name"]),
        text(&v["slots"]),
        text(&v["in_use"]),
        text(&v["revision"])
    );
    if let Some(d) = v["description"].as_str().filter(|d| !d.is_empty()) {
        s.push_str(&format!("description: {d}\n"));
    }
    s.push_str(&format!("jobs:        {}\n", pool_jobs(v)));
    let holders = items(v, "holders");
    if holders.is_empty() {
        s.push_str("\nno slot held\n");
    } else {
        let mut t = Table::new(&["SLOT", "JOB", "EXECUTION", "WORKER", "PRIORITY", "HELD FOR"]);
        for h in holders {
            let (job, id) = execution(h);
            t.row(vec![
                text(&h["slot"]),
                job,
                id,
                text(&h["worker_id"]),
                text(&h["priority"]),
                age(&h["since"], now_ms),
            ]);
        }
        s.push_str(&format!("\nholders:\n{}", t.render()));
    }
    let waiting = items(v, "waiting");
    if waiting.is_empty() {
        s.push_str("\nnothing waiting\n");
    } else {
        let mut t = Table::new(&["#", "JOB", "EXECUTION", "PRIORITY", "SCHEDULED AT", "WAITING FOR"]);
        for (n, w) in waiting.iter().enumerate() {
            let (job, id) = execution(w);
            let row = vec![(n + 1).to_string(), job, id, text(&w["priority"]), text(&w["scheduled_at"])];
            t.row([row, vec![age(&w["since"], now_ms)]].concat());
        }
        s.push_str(&format!("\nwaiting (in queue order):\n{}", t.render()));
    }
    s
}

pub async fn list(client: &Client, json: bool) -> anyhow::Result<()> {
    let v = client.get("/api/pools").await.context("listing pools")?;
    if json {
        return print_doc(&v);
    }
    out(&table(&v))
}

pub async fn get(client: &Client, name: &str, json: bool) -> anyhow::Result<()> {
    let v = client.get(&path(name)).await.with_context(|| format!("pool {name}"))?;
    if json {
        return print_doc(&v);
    }
    out(&detail(&v, chrono::Utc::now().timestamp_millis()))
}

pub async fn put(
    client: &Client,
    name: &str,
    slots: u32,
    description: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let mut body = json!({ "slots": slots });
    if let Some(d) = description {
        body["description"] = json!(d);
    }
    let v = client
        .send(Method::PUT, &path(name), Some(&body), &[])
        .await
        .with_context(|| format!("saving pool {name}"))?
        .body;
    if json {
        return print_doc(&v);
    }
    out(&format!("pool {name} saved: {} slots, {} in use\n", text(&v["slots"]), text(&v["in_use"])))
}

pub async fn delete(client: &Client, name: &str) -> anyhow::Result<()> {
    client.send(Method::DELETE, &path(name), None, &[]).await.with_context(|| format!("deleting pool {name}"))?;
    out(&format!("pool {name} deleted\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> Value {
        json!({"name": "db", "revision": 7, "slots": 3, "description": "reporting db", "in_use": 2,
            "holders": [
                {"slot": 0, "execution_id": "a@1000#1", "job": "a", "worker_id": "w1",
                 "since": "1970-01-01T00:00:01.000Z", "priority": 50},
                {"slot": 1, "execution_id": null, "job": null, "worker_id": "w2",
                 "since": "1970-01-01T00:01:00.000Z", "priority": 90}],
            "waiting": [{"execution_id": "b@2000#1", "job": "b", "priority": 80,
                 "scheduled_at": "1970-01-01T00:00:02.000Z", "since": "1970-01-01T00:00:02.500Z"}],
            "jobs": ["a", "b"]})
    }

    #[test]
    fn a_pools_jobs_past_the_listed_ones_are_counted() {
        assert_eq!(pool_jobs(&pool()), "a,b");
        let mut many = pool();
        many["jobs_total"] = json!(103);
        assert_eq!(pool_jobs(&many), "a,b +101 more");
        many["jobs_total"] = json!(2);
        assert_eq!(pool_jobs(&many), "a,b");
    }

    #[test]
    fn the_list_counts_slots_in_use_and_waiting() {
        let empty = json!({"name": "idle", "slots": 1, "in_use": 0, "holders": [], "waiting": [], "jobs": []});
        let rendered = table(&json!({"pools": [pool(), empty]}));
        let lines: Vec<Vec<&str>> = rendered.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(lines[0], ["NAME", "SLOTS", "IN-USE", "WAITING", "JOBS"], "{rendered}");
        assert_eq!(lines[1], ["db", "3", "2", "1", "a,b"], "{rendered}");
        assert_eq!(lines[2], ["idle", "1", "0", "0", "-"], "{rendered}");
    }

    #[test]
    fn one_pool_shows_its_holders_and_queue_with_ages() {
        let s = detail(&pool(), 62_000);
        assert!(s.contains("slots:       3 (2 in use)") && s.contains("description: reporting db"), "{s}");
        assert!(s.contains("jobs:        a,b"), "{s}");
        let holder = s.lines().find(|l| l.starts_with("0 ")).unwrap();
        assert_eq!(holder.split_whitespace().collect::<Vec<_>>(), ["0", "a", "a@1000#1", "w1", "50", "1m01s"], "{s}");
        assert!(s.contains("(a job you cannot see)"), "{s}");
        let waiting = s.lines().find(|l| l.contains("b@2000#1")).unwrap();
        assert!(waiting.contains("b@2000#1") && waiting.contains(" 80 ") && waiting.ends_with("59.5s"), "{s}");
        let idle = detail(&json!({"name": "idle", "slots": 1, "in_use": 0}), 0);
        assert!(idle.contains("no slot held") && idle.contains("nothing waiting") && idle.contains("jobs:        -"));
    }
}
