//! Workflows: jobs joined by `after` edges. A run of a job that other jobs name in `after` (a
//! root) starts a workflow run, whose id every step of it shares; a job with `after: [a, b]`
//! runs once per workflow run, once `a` and `b` have both succeeded in it, and reads their
//! results. Each step's outcome in a run is kept in etcd (`{ns}/workflows/{run}/…`, under the
//! workflow lease) and in its record (`workflow`), and a failed run can be resumed: its failed
//! steps run again (the next attempt of each), reusing the results of the steps that succeeded.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::keys::{ExecutionId, Tick};
use crate::record::Status;
use crate::spec::SpecError;
use crate::UnixMs;

/// Most bytes of a run's result (JSON).
pub const MAX_RESULT_BYTES: usize = 64 * 1024;
/// Most entries of a job's `params_from`.
pub const MAX_PARAMS_FROM: usize = 32;
/// Longest path in `params_from`.
pub const MAX_PATH_LEN: usize = 256;
/// How long a workflow run's steps stay in etcd after the last one ended (then only the
/// records in MongoDB tell it, and it can no longer be resumed).
pub const WORKFLOW_RETENTION: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// The id of the workflow run a root's execution starts: `{tick}-{12 hex digits of the root
/// job's name}` (a long tick hashed too), valid as a request id. Every attempt of the root's
/// tick belongs to the same run.
#[must_use]
pub fn run_id(root: &ExecutionId) -> String {
    let tick = root.tick.to_string();
    let part = root.part.to_string().replace(':', "s");
    let tick = if tick.len() + part.len() > 80 { format!("h{:012x}", fnv(&tick)) } else { format!("{tick}{part}") };
    format!("{tick}-{:012x}", fnv(&root.job))
}

/// The execution of step `job` in workflow run `run`, first attempt.
#[must_use]
pub fn step_execution(job: &str, run: &str) -> ExecutionId {
    ExecutionId::new(job, Tick::Dependency(format!("wf-{run}")))
}

fn fnv(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h & 0xffff_ffff_ffff
}

/// `{ns}/workflows/{run}/steps/{job}`: one step's latest outcome in a workflow run, written by
/// the transaction that closed its execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub execution_id: ExecutionId,
    pub status: Status,
    pub at_ms: UnixMs,
    /// The root's execution (the same in every step of the run).
    pub root: ExecutionId,
    /// The result the step reported, when it succeeded with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

/// Checks `params_from`: names the task declares (`declared`), paths [`parse_path`] accepts,
/// naming only jobs of `after` when a path names one.
pub fn validate_params_from(
    params_from: &BTreeMap<String, String>,
    declared: &dyn Fn(&str) -> bool,
    after: &[String],
) -> Result<(), SpecError> {
    if params_from.len() > MAX_PARAMS_FROM {
        return Err(SpecError::at("params_from", format!("at most {MAX_PARAMS_FROM} entries")));
    }
    for (name, path) in params_from {
        let field = format!("params_from.{name}");
        if !declared(name) {
            return Err(SpecError::at(&field, "the task declares no such parameter (task.params)"));
        }
        let (job, _) = parse_path(path).map_err(|e| SpecError::at(&field, e))?;
        if let Some(job) = job {
            if !after.iter().any(|a| a == job) {
                return Err(SpecError::at(&field, format!("{job:?} is not one of after")));
            }
        }
    }
    Ok(())
}

/// A `params_from` path: `$` (the one parent's result), `$job` (that parent's), followed by
/// `.name` and `[n]` steps: the parent it names (if any) and the JSON pointer it means.
pub fn parse_path(path: &str) -> Result<(Option<&str>, String), String> {
    if path.len() > MAX_PATH_LEN {
        return Err(format!("a path is at most {MAX_PATH_LEN} bytes"));
    }
    let rest = path.strip_prefix('$').ok_or("a path starts with $ (e.g. $.date or $extract.date)")?;
    let end = rest.find(['.', '[']).unwrap_or(rest.len());
    let (job, mut rest) = rest.split_at(end);
    let job = if job.is_empty() {
        None
    } else {
        crate::keys::validate_job_name(job)?;
        Some(job)
    };
    let mut pointer = String::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return Err(format!("an empty name in {path:?}"));
            }
            pointer.push('/');
            pointer.push_str(&r[..end].replace('~', "~0").replace('/', "~1"));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').ok_or_else(|| format!("an unclosed [ in {path:?}"))?;
            let index: usize = r[..end].parse().map_err(|_| format!("[{}] is not an index in {path:?}", &r[..end]))?;
            pointer.push_str(&format!("/{index}"));
            rest = &r[end + 1..];
        } else {
            return Err(format!("{path:?}: expected .name or [index] at {rest:?}"));
        }
    }
    Ok((job, pointer))
}

/// The run parameters `params_from` takes from the parents' results (`parents`: job → result).
/// A string is taken as it is, any other JSON value as its JSON text; a path that finds
/// nothing (or names no parent, or several parents without naming one) is an error naming it.
pub fn params_from_results(
    params_from: &BTreeMap<String, String>,
    parents: &BTreeMap<String, Value>,
) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (name, path) in params_from {
        let (job, pointer) = parse_path(path)?;
        let result = match job {
            Some(job) => parents.get(job),
            None if parents.len() == 1 => parents.values().next(),
            None => return Err(format!("params_from.{name}: {path:?} names no parent and the run has {}", parents.len())),
        };
        let found = result.and_then(|r| r.pointer(&pointer));
        let value = match found {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => return Err(format!("params_from.{name}: {path:?} found nothing in the parents' results")),
            Some(other) => other.to_string(),
        };
        out.insert(name.clone(), value);
    }
    Ok(out)
}

/// Checks a result a task reported: JSON of at most [`MAX_RESULT_BYTES`].
pub fn check_result(value: &Value) -> Result<(), String> {
    let len = serde_json::to_vec(value).map_or(usize::MAX, |v| v.len());
    if len > MAX_RESULT_BYTES {
        return Err(format!("a result is at most {MAX_RESULT_BYTES} bytes of JSON; this one is {len}"));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn run_ids_are_valid_request_ids_shared_by_the_attempts_of_a_tick() {
        let root = ExecutionId::new("extract", Tick::Scheduled(1_764_547_200_000));
        let id = run_id(&root);
        crate::keys::validate_id(&id).unwrap();
        assert_eq!(run_id(&root.next_attempt()), id);
        assert_ne!(run_id(&ExecutionId::new("extract2", Tick::Scheduled(1_764_547_200_000))), id);
        let long = ExecutionId::new("x", Tick::Manual("m".repeat(120)));
        crate::keys::validate_id(&run_id(&long)).unwrap();
        let step = step_execution("load", &id);
        assert_eq!(step.to_string().parse::<ExecutionId>().unwrap(), step);
    }

    #[test]
    fn paths_name_a_parent_and_a_pointer() {
        assert_eq!(parse_path("$.date").unwrap(), (None, "/date".to_owned()));
        assert_eq!(parse_path("$extract.rows[2].id").unwrap(), (Some("extract"), "/rows/2/id".to_owned()));
        assert_eq!(parse_path("$").unwrap(), (None, String::new()));
        for bad in ["date", "$.", "$.a[x]", "$.a[1", "$a b", "$.a..b"] {
            assert!(parse_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn params_come_from_the_parents_results() {
        let from = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let one = BTreeMap::from([("extract".to_owned(), json!({"date": "2026-11-28", "rows": 12}))]);
        let got = params_from_results(&from(&[("DATE", "$.date"), ("ROWS", "$.rows")]), &one).unwrap();
        assert_eq!(got["DATE"], "2026-11-28");
        assert_eq!(got["ROWS"], "12");
        let two = BTreeMap::from([("a".to_owned(), json!({"n": 1})), ("b".to_owned(), json!({"n": 2}))]);
        assert_eq!(params_from_results(&from(&[("N", "$b.n")]), &two).unwrap()["N"], "2");
        let e = params_from_results(&from(&[("N", "$.n")]), &two).unwrap_err();
        assert!(e.contains("params_from.N") && e.contains("names no parent"), "{e}");
        let e = params_from_results(&from(&[("N", "$.missing")]), &one).unwrap_err();
        assert!(e.contains("found nothing"), "{e}");
    }

    #[test]
    fn params_from_is_checked_at_save() {
        let declared = |n: &str| n == "DATE";
        let after = ["extract".to_owned()];
        let map = |k: &str, v: &str| BTreeMap::from([(k.to_owned(), v.to_owned())]);
        validate_params_from(&map("DATE", "$extract.date"), &declared, &after).unwrap();
        let e = validate_params_from(&map("OTHER", "$.date"), &declared, &after).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("params_from.OTHER"));
        let e = validate_params_from(&map("DATE", "$load.date"), &declared, &after).unwrap_err();
        assert!(e.message.contains("not one of after"), "{e:?}");
        let e = validate_params_from(&map("DATE", "date"), &declared, &after).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("params_from.DATE"));
    }

    #[test]
    fn results_are_bounded() {
        check_result(&json!({"ok": true})).unwrap();
        assert!(check_result(&json!("x".repeat(MAX_RESULT_BYTES))).is_err());
    }
}
