//! `calendars ls|get|put|delete`: the skip calendars jobs name in `skip_calendars`.

use anyhow::Context as _;
use reqwest::Method;
use serde_json::{json, Value};

use crate::client::{segment, Client};
use crate::table::{text, Table};
use crate::{out, print_doc};

fn path(name: &str) -> String {
    format!("/api/calendars/{}", segment(name))
}

/// What `calendars put` saves.
pub struct CalendarArgs {
    pub timezone: Option<String>,
    pub dates: Vec<String>,
    /// `FROM..TO`, both days included.
    pub ranges: Vec<String>,
    pub description: Option<String>,
}

/// `FROM..TO` as `{"from", "to"}`; the master checks the dates.
pub fn parse_range(text: &str) -> Result<Value, String> {
    match text.split_once("..") {
        Some((from, to)) if !from.is_empty() && !to.is_empty() => Ok(json!({"from": from, "to": to})),
        _ => Err(format!("expected FROM..TO (days, e.g. 2026-12-24..2026-12-26), got {text:?}")),
    }
}

pub async fn list(client: &Client, json: bool) -> anyhow::Result<()> {
    let v = client.get("/api/calendars").await.context("listing calendars")?;
    if json {
        return print_doc(&v);
    }
    let mut table = Table::new(&["NAME", "TZ", "DATES", "RANGES", "DESCRIPTION"]);
    for c in v["calendars"].as_array().into_iter().flatten() {
        let cal = &c["calendar"];
        let count = |field: &str| cal[field].as_array().map_or(0, Vec::len).to_string();
        table.row(vec![
            text(&c["name"]),
            text(&cal["timezone"]),
            count("dates"),
            count("ranges"),
            text(&cal["description"]),
        ]);
    }
    out(&table.render())
}

pub async fn get(client: &Client, name: &str, json: bool) -> anyhow::Result<()> {
    let v = client.get(&path(name)).await.with_context(|| format!("calendar {name}"))?;
    if json {
        return print_doc(&v);
    }
    let cal = &v["calendar"];
    let mut s = format!(
        "name:        {}\ntimezone:    {}\nrevision:    {}\n",
        text(&v["name"]),
        text(&cal["timezone"]),
        text(&v["revision"])
    );
    if let Some(d) = cal["description"].as_str() {
        s.push_str(&format!("description: {d}\n"));
    }
    for d in cal["dates"].as_array().into_iter().flatten() {
        s.push_str(&format!("date:        {}\n", text(d)));
    }
    for r in cal["ranges"].as_array().into_iter().flatten() {
        s.push_str(&format!("range:       {} .. {}\n", text(&r["from"]), text(&r["to"])));
    }
    out(&s)
}

pub async fn put(client: &Client, name: &str, args: CalendarArgs, json: bool) -> anyhow::Result<()> {
    let ranges =
        args.ranges.iter().map(|r| parse_range(r)).collect::<Result<Vec<_>, _>>().map_err(crate::exit::Usage)?;
    let mut body = json!({"dates": args.dates, "ranges": ranges});
    if let Some(tz) = args.timezone {
        body["timezone"] = json!(tz);
    }
    if let Some(d) = args.description {
        body["description"] = json!(d);
    }
    let v = client
        .send(Method::PUT, &path(name), Some(&body), &[])
        .await
        .with_context(|| format!("saving calendar {name}"))?
        .body;
    if json {
        return print_doc(&v);
    }
    out(&format!("calendar {name} saved (revision {})\n", text(&v["revision"])))
}

pub async fn delete(client: &Client, name: &str) -> anyhow::Result<()> {
    client.send(Method::DELETE, &path(name), None, &[]).await.with_context(|| format!("deleting calendar {name}"))?;
    out(&format!("calendar {name} deleted\n"))
}
