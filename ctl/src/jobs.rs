//! The `jobs` commands (ls, get, rm, run, kill, pause, resume), `export`, and the `workers` and
//! `schedule` reads: each is one or a few API calls, printed as a table or as the API's JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Context as _;
use reqwest::Method;
use serde_json::{json, Value};

use crate::client::{query, segment, Client};
use crate::exit::{ApiError, Usage};
use crate::jobfile::{self, Format};
use crate::table::{clip, text, Table};
use crate::{out, print_doc};

/// What `jobs ls --status` may filter on: the job's state, or the status of its last execution.
pub const LIST_STATUSES: [&str; 12] = [
    "enabled",
    "paused",
    "invalid",
    "never",
    "running",
    "succeeded",
    "failed",
    "timed_out",
    "killed",
    "lost",
    "skipped",
    "missed",
];

fn job_path(name: &str) -> String {
    format!("/api/jobs/{}", segment(name))
}

/// `enabled`, `paused` or `invalid`: paused by an operator (`paused` is set) or by the spec
/// (`enabled: false`).
fn state(job: &Value) -> &'static str {
    if job["invalid"].is_string() {
        "invalid"
    } else if job["paused"].is_object() || job["spec"]["enabled"] == Value::Bool(false) {
        "paused"
    } else {
        "enabled"
    }
}

/// The job's state for the STATE column: `enabled`, `paused`, `paused until 11-28 08:00Z` (a
/// pause that ends by itself, in UTC), `disabled` (the spec's `enabled: false`) or `invalid`.
#[must_use]
pub fn state_text(job: &Value) -> String {
    if job["invalid"].is_string() {
        return "invalid".to_owned();
    }
    if job["paused"].is_object() {
        let until = job["paused"]["until"]
            .as_str()
            .and_then(|u| chrono::DateTime::parse_from_rfc3339(u).ok())
            .map(|u| u.with_timezone(&chrono::Utc).format("%m-%d %H:%MZ").to_string());
        return until.map_or_else(|| "paused".to_owned(), |u| format!("paused until {u}"));
    }
    if job["spec"]["enabled"] == Value::Bool(false) {
        return "disabled".to_owned();
    }
    "enabled".to_owned()
}

/// The status of the job's last execution, `never` when it has none (or records are away).
fn last_status(job: &Value) -> &str {
    job["summary"]["last_execution"]["status"].as_str().unwrap_or("never")
}

/// Whether `job` passes `jobs ls` filters: every label, and any of the statuses.
fn matches(job: &Value, labels: &[(String, String)], statuses: &[String]) -> bool {
    let labels_ok = labels.iter().all(|(k, v)| job["spec"]["labels"][k].as_str() == Some(v.as_str()));
    let status_ok = statuses.is_empty() || statuses.iter().any(|s| s == state(job) || s == last_status(job));
    labels_ok && status_ok
}

/// `jobs ls`: the jobs the token sees (the master filters by its teams), of `team` only when
/// given (filtered by the master too).
/// Jobs per page when listing every job (the API's most).
const LIST_PAGE: usize = 1_000;

/// Every job the token sees (of `team` when given), read a page at a time
/// (`GET /api/jobs?limit=…&cursor=…`): `{"jobs": […], "records": …}` as one answer, `records`
/// saying unavailable when any page's summaries were.
pub async fn list_all(client: &Client, team: Option<&str>) -> anyhow::Result<Value> {
    let (mut jobs, mut records, mut cursor) = (Vec::new(), json!({"available": true}), None::<String>);
    loop {
        let params = [("team", team.map(str::to_owned)), ("limit", Some(LIST_PAGE.to_string())), ("cursor", cursor)];
        let mut page = client.get(&format!("/api/jobs{}", query(&params))).await.context("listing jobs")?;
        if let Some(more) = page["jobs"].as_array_mut() {
            jobs.append(more);
        }
        if page["records"]["available"] == false {
            records = page["records"].take();
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(json!({ "jobs": jobs, "records": records })),
        }
    }
}

pub async fn ls(
    client: &Client,
    (team, labels, statuses): (Option<&str>, &[(String, String)], &[String]),
    json: bool,
) -> anyhow::Result<()> {
    let mut list = list_all(client, team).await?;
    let jobs: Vec<Value> = list["jobs"]
        .as_array()
        .map(|all| all.iter().filter(|j| matches(j, labels, statuses)).cloned().collect())
        .unwrap_or_default();
    if json {
        list["jobs"] = Value::Array(jobs);
        return print_doc(&list);
    }
    if list["records"]["available"] == Value::Bool(false) {
        eprintln!(
            "etcronctl: note: execution records are unavailable ({}); LAST STATUS is empty",
            text(&list["records"]["error"])
        );
    }
    let wide = crate::output() == crate::Output::Wide;
    let mut columns = vec!["NAME", "TEAM", "SCHEDULE", "TZ", "STATE", "NEXT RUN", "LAST STATUS", "LAST RUN"];
    if wide {
        columns.extend(["LABELS", "DESCRIPTION"]);
    }
    let mut table = Table::new(&columns);
    for j in &jobs {
        let enabled = state_text(j);
        let last = &j["summary"]["last_execution"];
        let mut row = vec![
            text(&j["name"]),
            text(&j["spec"]["team"]),
            clip(&expressions(&j["spec"]), 32),
            text(&j["spec"]["timezone"]),
            enabled,
            text(&j["next_runs"][0]),
            text(&last["status"]),
            text(&last["scheduled_at"]),
        ];
        if wide {
            let description = j["spec"]["description"].as_str().unwrap_or_default().replace('\n', " ");
            row.extend([crate::table::pairs(&j["spec"]["labels"]), clip(&description, 60)]);
        }
        table.row(row);
    }
    out(&table.render())
}

/// One job as a job file: `{"jobs": {name: spec}}`, the spec as the API shows it (secret values
/// `null`, which apply reads as "keep the stored value").
#[must_use]
pub fn job_file(name: &str, spec: &Value) -> Value {
    json!({ "jobs": { name: spec } })
}

/// `jobs get NAME`: a summary and the spec; with `-o json|yaml`, the job as a job file that
/// `jobs apply -f` takes as it is (the API's whole view is `jobs describe -o json`).
pub async fn get(client: &Client, name: &str, json: bool) -> anyhow::Result<()> {
    let job = client.get(&job_path(name)).await.with_context(|| format!("job {name:?}"))?;
    if json {
        if let Some(why) = job["invalid"].as_str() {
            eprintln!(
                "etcronctl: warning: the stored value of job {name:?} is not a valid spec ({why}); apply refuses \
                 this file until it is fixed"
            );
        }
        return print_doc(&job_file(name, &job["spec"]));
    }
    let mut s = String::new();
    let _ = writeln!(s, "name:             {}", text(&job["name"]));
    let _ = writeln!(s, "revision:         {}", text(&job["revision"]));
    let _ = writeln!(s, "state:            {}", crate::describe::state_line(&job));
    let _ = writeln!(s, "team:             {}", job["spec"]["team"].as_str().unwrap_or("-"));
    if let Some(why) = job["invalid"].as_str() {
        let _ = writeln!(s, "invalid:          {why}");
    }
    let _ = writeln!(
        s,
        "schedule:         {} ({}): {}",
        expressions(&job["spec"]),
        text(&job["spec"]["timezone"]),
        text(&job["schedule_description"])
    );
    if let Some(calendars) = job["spec"]["skip_calendars"].as_array() {
        let names: Vec<String> = calendars.iter().map(text).collect();
        let _ = writeln!(s, "skip calendars:   {}", names.join(", "));
    }
    let next: Vec<&str> =
        job["next_runs"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let next = match (next.is_empty(), job["paused"]["next_run_after"].as_str()) {
        (true, Some(after)) => format!("{after} (the first after the pause)"),
        (true, None) => "-".to_owned(),
        (false, _) => next.join(", "),
    };
    let _ = writeln!(s, "next runs:        {next}");
    if !job["eligible_workers"].is_null() {
        let _ = writeln!(s, "eligible workers: {}", text(&job["eligible_workers"]));
    }
    let summary = &job["summary"];
    if summary.is_object() {
        let last = &summary["last_execution"];
        if last.is_object() {
            let _ = writeln!(
                s,
                "last execution:   {} {} ({})",
                text(&last["status"]),
                text(&last["id"]),
                text(&last["scheduled_at"])
            );
        }
        let _ = writeln!(
            s,
            "last 24 h:        {} succeeded, {} failed, {} in all",
            text(&summary["succeeded_24h"]),
            text(&summary["failed_24h"]),
            text(&summary["total_24h"])
        );
    }
    let _ = writeln!(s, "spec:");
    let yaml = serde_norway::to_string(&job["spec"]).context("showing the spec as YAML")?;
    for line in yaml.lines() {
        let _ = writeln!(s, "  {line}");
    }
    out(&s)
}

pub async fn rm(client: &Client, names: &[String], json: bool) -> anyhow::Result<()> {
    let mut deleted = Vec::new();
    let mut failures = Vec::new();
    for name in names {
        match client.send(Method::DELETE, &job_path(name), None, &[]).await {
            Ok(_) => {
                if !json {
                    out(&format!("deleted {name}\n"))?;
                }
                deleted.push(name.clone());
            }
            Err(e) => {
                let e = e.context(format!("deleting job {name:?}"));
                if names.len() > 1 {
                    eprintln!("etcronctl: {e:#}");
                }
                failures.push(e);
            }
        }
    }
    if json {
        print_doc(&json!({ "deleted": deleted }))?;
    }
    let total = names.len();
    let failed = failures.len();
    match failures.into_iter().next() {
        None => Ok(()),
        Some(e) if total == 1 => Err(e),
        // Each failure was printed; the first one's decides the exit code.
        Some(e) => {
            let what = format!("{failed} of {total} job(s) could not be deleted");
            Err(match e.chain().find_map(|c| c.downcast_ref::<ApiError>()).cloned() {
                Some(api) => anyhow::Error::new(api).context(what),
                None => e.context(what),
            })
        }
    }
}

/// The body of a run with parameters (`--env NAME=value`, `--as-of TIME`) or a priority
/// (`--priority N`), `None` without any. The master checks names and values; a `--env` without `=` is refused here.
pub fn run_params(env: &[String], as_of: Option<&str>, priority: Option<u8>) -> anyhow::Result<Option<Value>> {
    let mut vars = serde_json::Map::new();
    for pair in env {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(crate::exit::Usage(format!("--env {pair:?}: expected NAME=value")).into());
        };
        if vars.insert(k.to_owned(), v.into()).is_some() {
            return Err(crate::exit::Usage(format!("--env {k}: given twice")).into());
        }
    }
    let mut body = serde_json::Map::new();
    if !vars.is_empty() {
        body.insert("env".to_owned(), Value::Object(vars));
    }
    if let Some(t) = as_of {
        body.insert("scheduled_at".to_owned(), t.into());
    }
    if let Some(p) = priority {
        body.insert("priority".to_owned(), p.into());
    }
    Ok((!body.is_empty()).then_some(Value::Object(body)))
}

/// Requests a run of `name`; with `follow`, follows it (and its retries) to the final attempt.
pub async fn run(client: &Client, name: &str, params: Option<&Value>, follow: bool, json: bool) -> anyhow::Result<()> {
    let path = format!("{}/run", job_path(name));
    let reply = client.send(reqwest::Method::POST, &path, params, &[]).await;
    let v = reply.with_context(|| format!("running job {name:?}"))?.body;
    if follow {
        let id = v["execution_id"].as_str().context("the run request's answer has no execution_id")?;
        if !json {
            eprintln!("etcronctl: following execution {id}");
        }
        return crate::executions::stream(client, id, json).await;
    }
    if json {
        return print_doc(&v);
    }
    out(&format!("request_id:   {}\nexecution_id: {}\n", text(&v["request_id"]), text(&v["execution_id"])))
}

pub async fn kill(client: &Client, name: &str, execution: Option<String>, json: bool) -> anyhow::Result<()> {
    let path = format!("{}/kill{}", job_path(name), query(&[("execution", execution)]));
    let v = client.post(&path).await.with_context(|| format!("killing job {name:?}"))?;
    if json {
        return print_doc(&v);
    }
    let target = match v["target"].as_str() {
        Some("all") | None => "every running execution".to_owned(),
        Some(id) => format!("execution {id}"),
    };
    if v["running"].as_u64() == Some(0) {
        let what = match v["target"].as_str() {
            Some("all") | None => format!("job {name} has no running execution"),
            Some(id) => format!("execution {id} is not running"),
        };
        return out(&format!("nothing to kill: {what}\n"));
    }
    out(&format!("kill requested for {target} of job {} (revision {})\n", text(&v["job"]), text(&v["revision"])))
}

/// `jobs pause NAME [--reason WHY] [--until T]`: the pause is kept outside the spec, so no
/// apply undoes it; with `--until` it ends by itself.
pub async fn pause(
    client: &Client,
    name: &str,
    reason: Option<&str>,
    until: Option<&str>,
    json: bool,
) -> anyhow::Result<()> {
    let mut body = serde_json::Map::new();
    if let Some(r) = reason {
        body.insert("reason".to_owned(), r.into());
    }
    if let Some(u) = until {
        body.insert("until".to_owned(), u.into());
    }
    let body = (!body.is_empty()).then_some(Value::Object(body));
    let path = format!("{}/pause", job_path(name));
    let reply = client.send(reqwest::Method::POST, &path, body.as_ref(), &[]).await;
    let v = reply.with_context(|| format!("pausing job {name:?}"))?.body;
    if json {
        return print_doc(&v);
    }
    let until = v["paused"]["until"].as_str().map(|u| format!(" until {u}")).unwrap_or_default();
    let why = reason.map(|r| format!(": {r}")).unwrap_or_default();
    out(&format!("job {name} paused{until}{why} (revision {})\n", text(&v["revision"])))
}

/// `jobs resume NAME`.
pub async fn resume(client: &Client, name: &str, json: bool) -> anyhow::Result<()> {
    let v =
        client.post(&format!("{}/resume", job_path(name))).await.with_context(|| format!("resuming job {name:?}"))?;
    if json {
        return print_doc(&v);
    }
    out(&format!("job {name} enabled (revision {})\n", text(&v["revision"])))
}

/// `whoami`: the token's name, its global role (`-`: team roles only) and its role per team.
pub async fn whoami(client: &Client, json: bool) -> anyhow::Result<()> {
    let me = client.get("/api/auth/whoami").await.context("asking whose token this is")?;
    if json {
        return print_doc(&me);
    }
    out(&whoami_text(&me))
}

fn whoami_text(me: &Value) -> String {
    let teams = me["teams"].as_object().filter(|t| !t.is_empty()).map_or_else(
        || "-".to_owned(),
        |t| t.iter().map(|(team, role)| format!("{team}={}", text(role))).collect::<Vec<_>>().join(", "),
    );
    format!("name:   {}\nrole:   {}\nteams:  {teams}\n", text(&me["name"]), text(&me["role"]))
}

/// A spec's schedule expressions in one line: `schedule`, or `schedules` joined with `; `.
fn expressions(spec: &Value) -> String {
    match spec["schedules"].as_array() {
        Some(list) if !list.is_empty() => list.iter().map(text).collect::<Vec<_>>().join("; "),
        _ => text(&spec["schedule"]),
    }
}

/// What `schedule preview` asks for besides the schedule.
pub struct PreviewOptions {
    pub timezone: Option<String>,
    pub count: Option<u32>,
    /// An RFC 3339 instant; the master checks it and names `after` when it is not one.
    pub after: Option<String>,
    /// The window of a job's `active_from` / `active_until` (RFC 3339 instants).
    pub active_from: Option<String>,
    pub active_until: Option<String>,
    /// A job's `jitter` and the job's name, which the delays depend on.
    pub jitter: Option<String>,
    pub job: Option<String>,
    /// A job's `skip_calendars`: the fire times they skip are marked.
    pub skip_calendars: Vec<String>,
}

pub async fn preview(client: &Client, schedules: &[String], options: PreviewOptions, json: bool) -> anyhow::Result<()> {
    let PreviewOptions { timezone, count, after, active_from, active_until, jitter, job, skip_calendars } = options;
    let mut pairs: Vec<(&str, Option<String>)> = schedules.iter().map(|s| ("schedule", Some(s.clone()))).collect();
    pairs.extend([
        ("timezone", timezone),
        ("count", count.map(|c| c.to_string())),
        ("after", after),
        ("active_from", active_from),
        ("active_until", active_until),
        ("job", job),
        ("jitter", jitter),
    ]);
    pairs.extend(skip_calendars.into_iter().map(|c| ("skip_calendar", Some(c))));
    let path = format!("/api/schedule/preview{}", query(&pairs));
    let named: Vec<String> = schedules.iter().map(|s| format!("{s:?}")).collect();
    let v = client.get(&path).await.with_context(|| format!("schedule {}", named.join(" + ")))?;
    if json {
        return print_doc(&v);
    }
    let mut s = format!("{} ({})\n", text(&v["description"]), text(&v["timezone"]));
    let skipped = v["skipped"].as_array().cloned().unwrap_or_default();
    for t in v["next"].as_array().into_iter().flatten() {
        match skipped.iter().find(|k| k["at"] == *t) {
            Some(k) => {
                let _ = writeln!(s, "{}  skipped (calendar {})", text(t), text(&k["calendar"]));
            }
            None => {
                let _ = writeln!(s, "{}", text(t));
            }
        }
    }
    out(&s)
}

/// Where `export` writes.
#[derive(Debug)]
pub enum ExportTo {
    Stdout,
    File(std::path::PathBuf),
    /// One file per job, `NAME.EXT`.
    Dir(std::path::PathBuf),
}

impl ExportTo {
    /// `--dir`, else `-f`, else standard output (clap refuses both).
    #[must_use]
    pub fn of(file: Option<std::path::PathBuf>, dir: Option<std::path::PathBuf>) -> Self {
        match (file, dir) {
            (_, Some(dir)) => ExportTo::Dir(dir),
            (Some(file), None) => ExportTo::File(file),
            (None, None) => ExportTo::Stdout,
        }
    }
}

/// `export`: every job (or those `names`d) as one job file (to a file, or stdout: TOML, or JSON
/// with `-o json`), or as one file per job in a directory; with `omit_defaults`, each spec
/// without the fields that hold their default. The API withholds secret values: the file keeps
/// their names with `null` (`{ keep = true }` in TOML), which an import applies as "keep the
/// stored value" and refuses for a job the server does not have.
pub async fn export(
    client: &Client,
    names: &[String],
    to: &ExportTo,
    (format, omit_defaults): (Option<Format>, bool),
    json: bool,
) -> anyhow::Result<()> {
    let format = export_format(to, format, json)?;
    let mut jobs = exported_jobs(client, names).await?;
    if omit_defaults {
        jobs.values_mut().for_each(|spec| *spec = jobfile::omit_defaults(spec));
    }
    match to {
        ExportTo::Stdout => out(&jobfile::render(&jobs, format).context("writing the job file")?),
        ExportTo::File(path) => {
            let rendered = jobfile::render(&jobs, format).context("writing the job file")?;
            std::fs::write(path, rendered).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("etcronctl: exported {} job(s) to {}", jobs.len(), path.display());
            Ok(())
        }
        ExportTo::Dir(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for (name, spec) in &jobs {
                // A file name from what the server sent: only a valid job name (no `/`, no `..`).
                if let Err(e) = etcron_model::keys::validate_job_name(name) {
                    return Err(anyhow::anyhow!("the master listed a job named {name:?}, which is no file name: {e}"));
                }
                let one = BTreeMap::from([(name.clone(), spec.clone())]);
                let path = dir.join(format!("{name}.{format}"));
                let rendered = jobfile::render(&one, format).context("writing the job file")?;
                std::fs::write(&path, rendered).with_context(|| format!("writing {}", path.display()))?;
            }
            eprintln!("etcronctl: exported {} job(s) to {} (one file each)", jobs.len(), dir.display());
            Ok(())
        }
    }
}

/// The format of an export: `--format`, else the file's extension, else TOML (JSON or YAML
/// on stdout with `-o json|yaml`); a `--format` the file's extension contradicts is refused.
fn export_format(to: &ExportTo, format: Option<Format>, json: bool) -> anyhow::Result<Format> {
    let by_extension = match to {
        ExportTo::File(f) => Some((f, Format::of_path(f))),
        _ => None,
    };
    Ok(match (format, by_extension) {
        (Some(given), Some((f, Some(ext)))) if given != ext => {
            return Err(Usage(format!(
                "--format {given} does not match the extension of {}, which import reads as {ext}",
                f.display()
            ))
            .into());
        }
        (Some(given), _) => given,
        (None, Some((_, Some(ext)))) => ext,
        (None, Some((f, None))) => {
            return Err(Usage(format!(
                "{}: name the file .toml, .yaml, .yml or .json (import reads the format from it)",
                f.display()
            ))
            .into());
        }
        (None, None) if json && matches!(to, ExportTo::Stdout) && crate::output() == crate::Output::Yaml => {
            Format::Yaml
        }
        (None, None) if json && matches!(to, ExportTo::Stdout) => Format::Json,
        (None, None) => Format::Toml,
    })
}

/// The specs of the jobs to export by name (all when `names` is empty; a name that does not
/// exist is a 404), warning about invalid stored specs (left out) and withheld secrets.
async fn exported_jobs(client: &Client, names: &[String]) -> anyhow::Result<BTreeMap<String, Value>> {
    let list = list_all(client, None).await?;
    let mut jobs = BTreeMap::new();
    let mut withheld = Vec::new();
    let listed: Vec<&Value> = list["jobs"].as_array().into_iter().flatten().collect();
    if let Some(missing) = names.iter().find(|n| !listed.iter().any(|j| j["name"] == n.as_str())) {
        let message = format!("job {missing:?} does not exist");
        return Err(ApiError { status: 404, code: "not_found".to_owned(), message, field: None }.into());
    }
    for j in listed.into_iter().filter(|j| names.is_empty() || names.iter().any(|n| j["name"] == n.as_str())) {
        let name = text(&j["name"]);
        if let Some(why) = j["invalid"].as_str() {
            eprintln!("etcronctl: warning: job {name:?} is not exported: its stored value is not a valid spec ({why})");
            continue;
        }
        for field in etcron_model::spec::TASK_SECRET_FIELDS {
            for (key, value) in j["spec"]["task"][field].as_object().into_iter().flatten() {
                if value.is_null() {
                    withheld.push(format!("{name}: task.{field}.{key}"));
                }
            }
        }
        jobs.insert(name, j["spec"].clone());
    }
    if !withheld.is_empty() {
        eprintln!(
            "etcronctl: warning: the API never shows secret values, so the export has their names only ({}). \
             Importing keeps the values stored for jobs that still exist; for jobs that do not, import refuses \
             until the values are written into the file.",
            withheld.join(", ")
        );
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_column_says_how_long_a_pause_lasts() {
        let job = |extra: Value| {
            let mut j = json!({"name": "a", "spec": {"enabled": true}, "paused": null});
            j.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            j
        };
        assert_eq!(state_text(&job(json!({}))), "enabled");
        assert_eq!(state_text(&job(json!({"paused": {"by": "ops", "until": null}}))), "paused");
        assert_eq!(
            state_text(&job(json!({"paused": {"until": "2026-11-28T09:00:00+01:00"}}))),
            "paused until 11-28 08:00Z"
        );
        assert_eq!(state_text(&job(json!({"spec": {"enabled": false}}))), "disabled");
        assert_eq!(state_text(&job(json!({"invalid": "schedule: bad"}))), "invalid");
    }

    #[test]
    fn whoami_shows_the_global_role_and_the_team_roles() {
        let me = json!({"name": "pay-oncall", "role": null, "teams": {"payments": "operator", "search": "viewer"}});
        assert_eq!(whoami_text(&me), "name:   pay-oncall\nrole:   -\nteams:  payments=operator, search=viewer\n");
        let admin = json!({"name": "anonymous", "role": "admin", "teams": {}});
        assert_eq!(whoami_text(&admin), "name:   anonymous\nrole:   admin\nteams:  -\n");
    }

    #[test]
    fn ls_filters_by_label_state_and_last_status() {
        let job = json!({"name": "a", "spec": {"enabled": false, "labels": {"team": "data"}},
                         "summary": {"last_execution": {"status": "failed"}}});
        let label = |k: &str, v: &str| vec![(k.to_owned(), v.to_owned())];
        assert!(matches(&job, &[], &[]));
        assert!(matches(&job, &label("team", "data"), &[]));
        assert!(!matches(&job, &label("team", "web"), &[]));
        assert!(matches(&job, &[], &["paused".to_owned()]));
        assert!(matches(&job, &[], &["enabled".to_owned(), "failed".to_owned()]));
        assert!(!matches(&job, &[], &["enabled".to_owned()]));
        let fresh = json!({"name": "b", "spec": {"enabled": true}, "summary": {"last_execution": null}});
        assert!(matches(&fresh, &[], &["never".to_owned()]));
        let broken = json!({"name": "c", "spec": {}, "invalid": "schedule: bad"});
        assert_eq!(state(&broken), "invalid");
    }
}
