//! Schedules as code: [`ensure_jobs`] makes a master hold exactly the jobs an application
//! declares, through its batch API (`POST /api/batch`), as `etcronctl jobs apply` does.

use std::collections::BTreeMap;

use anyhow::Context as _;
use serde_json::{json, Value};

/// The label `ensure_jobs` puts on the jobs it manages, naming their owner.
pub const MANAGED_BY: &str = "managed-by";

/// What [`ensure_jobs`] did, by job name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Ensured {
    pub created: Vec<String>,
    pub updated: Vec<String>,
    pub unchanged: Vec<String>,
    pub deleted: Vec<String>,
}

/// Makes the master at `master` (e.g. `http://127.0.0.1:8070`) hold `jobs` (name → spec, as
/// `PUT /api/jobs/{name}` takes it), labelled `managed-by=<owner>`, and deletes the jobs with
/// that label no longer declared. Idempotent: replicas starting together each send the same
/// changes, and a job saved the same way is `unchanged` (a delete already done is not an error),
/// so they converge without retrying each other's writes. `token`: an admin token, when the
/// master has tokens.
///
/// # Errors
/// The master unreachable, or a change refused (naming the job and the master's message).
pub async fn ensure_jobs(
    master: &str,
    token: Option<&str>,
    owner: &str,
    jobs: BTreeMap<String, Value>,
) -> anyhow::Result<Ensured> {
    etcron_model::keys::validate_id(owner).map_err(|e| anyhow::anyhow!("owner: {e}"))?;
    let http = reqwest::Client::new();
    let auth = |req: reqwest::RequestBuilder| match token {
        Some(t) => req.bearer_auth(t),
        None => req,
    };
    // The jobs of `owner`, a page at a time, filtered on the master by their label.
    let (mut owned, mut cursor) = (Vec::<String>::new(), None::<String>);
    loop {
        let mut url = reqwest::Url::parse(&format!("{master}/api/jobs")).context("the master's URL")?;
        url.query_pairs_mut().append_pair("limit", "1000").append_pair("label", &format!("{MANAGED_BY}={owner}"));
        if let Some(c) = cursor.take() {
            url.query_pairs_mut().append_pair("cursor", &c);
        }
        let page: Value = auth(http.get(url))
            .send()
            .await
            .context("listing jobs")?
            .error_for_status()
            .context("listing jobs")?
            .json()
            .await
            .context("listing jobs")?;
        owned.extend(
            page["jobs"].as_array().into_iter().flatten().filter_map(|j| j["name"].as_str().map(str::to_owned)),
        );
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let mut changes = Vec::new();
    for (name, mut spec) in jobs.clone() {
        spec["labels"][MANAGED_BY] = json!(owner);
        changes.push(json!({"job": name, "op": "put", "spec": spec}));
    }
    for name in owned.iter().filter(|n| !jobs.contains_key(*n)) {
        changes.push(json!({"job": name, "op": "delete"}));
    }
    let answer: Value = auth(http.post(format!("{master}/api/batch")))
        .json(&json!({ "changes": changes }))
        .send()
        .await
        .context("saving jobs")?
        .json()
        .await
        .context("saving jobs")?;
    outcomes(&changes, &answer)
}

/// Each change's outcome, or the first refusal (a delete of a job already gone is done).
fn outcomes(changes: &[Value], answer: &Value) -> anyhow::Result<Ensured> {
    let results = answer["results"].as_array().with_context(|| format!("the master answered {answer}"))?;
    let mut ensured = Ensured::default();
    for (change, result) in changes.iter().zip(results) {
        let name = change["job"].as_str().unwrap_or_default().to_owned();
        match (result["outcome"].as_str(), result["status"].as_u64()) {
            (Some("created"), _) => ensured.created.push(name),
            (Some("updated"), _) => ensured.updated.push(name),
            (Some("unchanged"), _) => ensured.unchanged.push(name),
            (Some("deleted"), _) | (_, Some(404)) if change["op"] == "delete" => ensured.deleted.push(name),
            _ => anyhow::bail!("job {name}: {}", result["error"]),
        }
    }
    Ok(ensured)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_name_each_job_and_a_refusal_fails() {
        let changes = [
            json!({"job": "a", "op": "put"}),
            json!({"job": "b", "op": "put"}),
            json!({"job": "c", "op": "delete"}),
            json!({"job": "d", "op": "delete"}),
        ];
        let answer = json!({"results": [
            {"status": 201, "outcome": "created"},
            {"status": 200, "outcome": "unchanged"},
            {"status": 204, "outcome": "deleted"},
            {"status": 404, "outcome": "failed", "error": {"code": "not_found"}},
        ]});
        let ensured = outcomes(&changes, &answer).unwrap();
        assert_eq!(ensured.created, ["a"]);
        assert_eq!(ensured.unchanged, ["b"]);
        assert_eq!(ensured.deleted, ["c", "d"], "a delete already done is done");
        let refused = json!({"results": [{"status": 400, "outcome": "failed", "error": {"field": "spec.schedule"}}]});
        let e = outcomes(&changes[..1], &refused).unwrap_err().to_string();
        assert!(e.contains("job a") && e.contains("spec.schedule"), "{e}");
    }
}
