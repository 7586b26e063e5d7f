//! `jobs history` (the saved versions of a job's spec, or what changed between two) and `jobs
//! rollback` (save an earlier version again).

use anyhow::Context as _;
use etcron_model::diff::Difference;
use reqwest::Method;
use serde_json::json;

use crate::client::{query, segment, Client};
use crate::exit::Usage;
use crate::table::{text, Table};
use crate::{out, print_doc};

fn path(name: &str) -> String {
    format!("/api/jobs/{}", segment(name))
}

/// What `--diff` alone stands for: the last save, the version before the current one against it.
pub const LAST: &str = "last";

/// `FROM` or `FROM..TO`: the revisions `--diff` compares (`TO` defaults to the current one);
/// [`LAST`] for the last save.
pub fn parse_range(text: &str) -> Result<(String, Option<String>), String> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if text == LAST {
        return Ok((LAST.to_owned(), None));
    }
    match text.split_once("..") {
        Some((from, to)) if digits(from) && digits(to) => Ok((from.to_owned(), Some(to.to_owned()))),
        None if digits(text) => Ok((text.to_owned(), None)),
        _ => Err(format!("expected REVISION or FROM..TO (revisions from `jobs history`), got {text:?}")),
    }
}

/// Lists the saved versions of `name`, newest first; with `diff`, what changed between two.
pub async fn history(
    client: &Client,
    name: &str,
    diff: Option<(String, Option<String>)>,
    json: bool,
) -> anyhow::Result<()> {
    if let Some((from, to)) = diff {
        let (from, to) = if from == LAST { last_save(client, name).await? } else { (from, to) };
        let url = format!("{}/history/diff{}", path(name), query(&[("from", Some(from)), ("to", to)]));
        let v = client.get(&url).await.with_context(|| format!("comparing versions of job {name:?}"))?;
        if json {
            return print_doc(&v);
        }
        return out(&changes_text(&v));
    }
    let v = client
        .get(&format!("{}/history", path(name)))
        .await
        .with_context(|| format!("reading the history of job {name:?}"))?;
    if json {
        return print_doc(&v);
    }
    let mut table = Table::new(&["VERSION", "REVISION", "SAVED", "BY", "VIA", ""]);
    for version in v["versions"].as_array().into_iter().flatten() {
        let note = match (version["current"].as_bool(), version["restored"].as_i64()) {
            (Some(true), Some(r)) => format!("current (restores {r})"),
            (Some(true), None) => "current".to_owned(),
            (_, Some(r)) => format!("restores {r}"),
            _ => String::new(),
        };
        table.row(vec![
            text(&version["version"]),
            text(&version["revision"]),
            text(&version["at"]),
            text(&version["by"]),
            saved_how(version),
            note,
        ]);
    }
    out(&table.render())
}

/// How a saved version was saved, for people: the tool and its file when the client named
/// them (`etcronctl apply jobs/x.toml`, `console`), else the API route (`PUT /api/jobs/x`).
pub fn saved_how(version: &serde_json::Value) -> String {
    match (version["client"].as_str(), version["source"].as_str()) {
        (Some(client), Some(file)) => format!("{client} {file}"),
        (Some(client), None) => client.to_owned(),
        (None, Some(file)) => format!("{} {file}", text(&version["via"])),
        (None, None) => text(&version["via"]),
    }
}

/// The revisions of the last save: the version before the current one, and the current one.
async fn last_save(client: &Client, name: &str) -> anyhow::Result<(String, Option<String>)> {
    let v = client
        .get(&format!("{}/history", path(name)))
        .await
        .with_context(|| format!("reading the history of job {name:?}"))?;
    let revisions: Vec<i64> =
        v["versions"].as_array().into_iter().flatten().filter_map(|v| v["revision"].as_i64()).collect();
    match revisions.as_slice() {
        [current, before, ..] => Ok((before.to_string(), Some(current.to_string()))),
        _ => Err(Usage(format!("job {name:?} has one saved version: there is no earlier one to compare with")).into()),
    }
}

/// Saves the version of `name` at `revision` again (only over `if_match`, when given).
pub async fn rollback(
    client: &Client,
    name: &str,
    revision: i64,
    if_match: Option<i64>,
    json: bool,
) -> anyhow::Result<()> {
    if revision <= 0 {
        return Err(Usage(format!("--to {revision}: a revision from `jobs history`")).into());
    }
    let headers: Vec<(&str, String)> = if_match.map(|r| ("If-Match", r.to_string())).into_iter().collect();
    // The revision it replaces, to show what the rollback changed (with --if-match: that one).
    let before = match if_match {
        Some(r) => Some(r),
        None => client.get(&path(name)).await.ok().and_then(|j| j["revision"].as_i64()),
    };
    let body = json!({ "revision": revision });
    let reply = client.send(Method::POST, &format!("{}/rollback", path(name)), Some(&body), &headers).await;
    let v = reply.with_context(|| format!("rolling job {name:?} back to revision {revision}"))?.body;
    if json {
        return print_doc(&v);
    }
    let mut text_out =
        format!("job {name} rolled back to the spec of revision {revision} (now revision {})\n", text(&v["revision"]));
    if let (Some(before), Some(now)) = (before, v["revision"].as_i64()) {
        let url = format!(
            "{}/history/diff{}",
            path(name),
            query(&[("from", Some(before.to_string())), ("to", Some(now.to_string()))])
        );
        match client.get(&url).await {
            Ok(d) => text_out.push_str(&changes_text(&d)),
            Err(e) => eprintln!("etcronctl: note: what the rollback changed cannot be shown: {e:#}"),
        }
    }
    out(&text_out)
}

/// `revision A → B: N change(s)` and each change, as `history --diff` and `rollback` print them.
fn changes_text(v: &serde_json::Value) -> String {
    let changes = v["changes"].as_array().cloned().unwrap_or_default();
    let mut lines = format!("revision {} → {}: {} change(s)\n", text(&v["from"]), text(&v["to"]), changes.len());
    for change in changes {
        match serde_json::from_value::<Difference>(change.clone()) {
            Ok(d) => lines.push_str(&format!("{}\n", d.render("  "))),
            Err(_) => lines.push_str(&format!("  {change}\n")),
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn how_a_version_was_saved() {
        let v = |v: serde_json::Value| saved_how(&v);
        let via = "POST /api/batch";
        assert_eq!(
            v(json!({"via": via, "client": "etcronctl apply", "source": "jobs/x.toml"})),
            "etcronctl apply jobs/x.toml"
        );
        assert_eq!(v(json!({"via": "PUT /api/jobs/x", "client": "console"})), "console");
        assert_eq!(v(json!({"via": via, "source": "jobs/x.toml"})), "POST /api/batch jobs/x.toml");
        assert_eq!(v(json!({"via": "PUT /api/jobs/x"})), "PUT /api/jobs/x");
    }

    #[test]
    fn diff_ranges() {
        assert_eq!(parse_range("41"), Ok(("41".into(), None)));
        assert_eq!(parse_range("41..57"), Ok(("41".into(), Some("57".into()))));
        assert_eq!(parse_range(LAST), Ok((LAST.into(), None)));
        for bad in ["", "x", "41..", "..57", "4-5", "-3"] {
            assert!(parse_range(bad).is_err(), "{bad}");
        }
    }
}
