//! Workflows: jobs joined by `after` edges. A run of a job that other jobs name in `after` (a
//! root) starts a workflow run, whose id every step of it shares; a job with `after: [a, b]`
//! runs once per workflow run, once `a` and `b` have both succeeded in it, and reads their
//! results. Each step's outcome in a run is kept in etcd (`{ns}/workflows/{run}/…`, under the
//! workflow lease) and in its record (`workflow`), and a failed run can be resumed: its failed
//! steps run again (the next attempt of each), reusing the results of the steps that succeeded.
//! (A result's limit is `crate::progress::MAX_RESULT_BYTES`.)

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::keys::{ExecutionId, Tick};
use crate::record::Status;
use crate::UnixMs;

/// How long a workflow run's steps stay in etcd after each one's close, at least (the
/// workers' long leases): then only the records in MongoDB tell it, and it can no longer be
/// resumed.
pub const WORKFLOW_RETENTION: std::time::Duration = crate::spec::alerts::ALERT_MEMORY;

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
    /// The root's execution (the same in every step of the run); `None` in the root's own step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<ExecutionId>,
    /// The result the step reported, when it succeeded with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
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
        let (job, pointer) = crate::spec::params::parse_path(path)?;
        let result = match job {
            Some(job) => parents.get(job),
            None if parents.len() == 1 => parents.values().next(),
            None => {
                return Err(format!("params_from.{name}: {path:?} names no parent and the run has {}", parents.len()))
            }
        };
        let found = result.and_then(|r| r.pointer(&pointer));
        let value = match found {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => {
                return Err(format!("params_from.{name}: {path:?} found nothing in the parents' results"))
            }
            Some(other) => other.to_string(),
        };
        out.insert(name.clone(), value);
    }
    Ok(out)
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
}
