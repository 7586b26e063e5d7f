//! `etcronctl jobs check`: the stored job specs that this version of etcron refuses. A job whose
//! spec a worker cannot read does not run (the worker logs it and goes on), so before an upgrade
//! the new `etcronctl` reads every job through the running master and checks each spec with its
//! own rules: what it lists would stop running under the new version. The master's own verdict
//! (`invalid`, by the version it runs) is listed too.

use serde_json::{json, Value};

use crate::client::Client;
use crate::exit::{Exit, Unsuccessful};
use crate::table::{text, Table};
use crate::{out, print_doc};

/// One refused spec: the job, its team, who refuses it, the field and why.
struct Refused {
    job: String,
    team: String,
    by: &'static str,
    field: String,
    error: String,
}

/// Checks every job the caller sees (of `team` only, when given); exit 8 when any is refused.
pub async fn check(client: &Client, team: Option<&str>, json: bool) -> anyhow::Result<()> {
    let list = crate::jobs::list_all(client, team).await?;
    let jobs = list["jobs"].as_array().cloned().unwrap_or_default();
    let refused: Vec<Refused> = jobs.iter().filter_map(refused).collect();
    if json {
        let items: Vec<Value> = refused
            .iter()
            .map(|r| json!({"job": r.job, "team": r.team, "by": r.by, "field": r.field, "error": r.error}))
            .collect();
        print_doc(&json!({"checked": jobs.len(), "refused": items, "version": env!("CARGO_PKG_VERSION")}))?;
    } else if refused.is_empty() {
        out(&format!(
            "{} stored jobs checked: etcronctl {} and the master accept every spec\n",
            jobs.len(),
            env!("CARGO_PKG_VERSION")
        ))?;
    } else {
        let mut table = Table::new(&["JOB", "TEAM", "REFUSED BY", "FIELD", "ERROR"]);
        for r in &refused {
            table.row(vec![r.job.clone(), r.team.clone(), r.by.to_owned(), r.field.clone(), r.error.clone()]);
        }
        out(&table.render())?;
    }
    if refused.is_empty() {
        return Ok(());
    }
    let what = format!(
        "{} of {} stored jobs are refused and would not run: fix each named field (jobs edit, or apply the corrected file) before upgrading",
        refused.len(),
        jobs.len()
    );
    // An `Unsuccessful` error is not printed again by `main`.
    eprintln!("etcronctl: {what}");
    Err(Unsuccessful { exit: Exit::Refused, what }.into())
}

/// Why `job` (as `GET /api/jobs` lists it) is refused: by the master (`invalid`), else by this
/// version's rules applied to its spec (secret values come withheld, which the rules accept).
fn refused(job: &Value) -> Option<Refused> {
    let (name, team) = (text(&job["name"]), text(&job["spec"]["team"]));
    if let Some(invalid) = job["invalid"].as_str() {
        // `field: message`, as `SpecError` shows itself; a message without a field has spaces
        // before its first colon.
        let (field, error) = invalid.split_once(": ").filter(|(f, _)| !f.contains(' ')).unwrap_or(("", invalid));
        return Some(Refused { job: name, team, by: "master", field: field.to_owned(), error: error.to_owned() });
    }
    let bytes = serde_json::to_vec(&job["spec"]).ok()?;
    let e = etcron_model::spec::JobSpec::from_json(&bytes).err()?;
    Some(Refused { job: name, team, by: "etcronctl", field: e.field.unwrap_or_default(), error: e.message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_this_version_refuses_is_named_with_its_field() {
        let ok =
            json!({"name": "a", "spec": {"schedule": "0 9 * * sat-sun", "task": {"kind": "shell", "command": "true"}}});
        assert!(refused(&ok).is_none());
        let old = json!({"name": "b", "spec": {"team": "ops", "schedule": "0 0 ?,1 * 5", "task": {"kind": "shell", "command": "true"}}});
        let r = refused(&old).expect("refused");
        assert_eq!((r.job.as_str(), r.team.as_str(), r.by, r.field.as_str()), ("b", "ops", "etcronctl", "schedule"));
        assert!(r.error.contains("? (any day) stands alone"), "{}", r.error);
        let invalid = json!({"name": "c", "spec": {}, "invalid": "schedule: minute: 61 is out of range 0-59"});
        let r = refused(&invalid).expect("refused by the master");
        assert_eq!(
            (r.by, r.field.as_str(), r.error.as_str()),
            ("master", "schedule", "minute: 61 is out of range 0-59")
        );
        let whole = json!({"name": "d", "spec": null, "invalid": "the stored value is not JSON: expected value"});
        let r = refused(&whole).expect("refused by the master");
        assert_eq!((r.field.as_str(), r.error.as_str()), ("", "the stored value is not JSON: expected value"));
    }
}
