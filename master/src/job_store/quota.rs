//! The per-team job quota at save time: with every job read at one revision (and the writes
//! guarded on it, as for the dependency check), the jobs of each team are counted, the batch's
//! deletes and moves applied, and a save that would take a team past `max_jobs_per_team` is
//! refused. Jobs without a team (only a global role may save them) have no quota.

use std::collections::BTreeMap;

use super::{Change, Outcome, Prepared, Snapshot, Write};
use crate::access::team_of;
use crate::error::ApiError;

/// The writes of `accepted` that keep every team within `max` jobs; the others are refused
/// (`409 quota_exceeded`). Deletes count first, then saves in order.
pub(super) fn check(
    writes: &[Write],
    accepted: Vec<Prepared>,
    snapshot: &Snapshot,
    outcomes: &mut [Option<Outcome>],
    max: u64,
) -> Vec<Prepared> {
    let stored: BTreeMap<&str, Option<String>> =
        snapshot.jobs.iter().map(|(name, (value, _))| (name.as_str(), team_of(value))).collect();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for team in stored.values().flatten() {
        *counts.entry(team.clone()).or_default() += 1;
    }
    let leave = |counts: &mut BTreeMap<String, u64>, job: &str| {
        if let Some(Some(team)) = stored.get(job) {
            counts.entry(team.clone()).and_modify(|n| *n = n.saturating_sub(1));
        }
    };
    for p in &accepted {
        if matches!(writes[p.index].change, Change::Delete) {
            leave(&mut counts, &writes[p.index].job);
        }
    }
    let mut kept = Vec::with_capacity(accepted.len());
    for p in accepted {
        let w = &writes[p.index];
        let Change::Put(spec) = &w.change else {
            kept.push(p);
            continue;
        };
        let Some(team) = spec.team.as_deref() else {
            leave(&mut counts, &w.job);
            kept.push(p);
            continue;
        };
        if stored.get(w.job.as_str()).is_some_and(|t| t.as_deref() == Some(team)) {
            kept.push(p);
            continue;
        }
        let held = counts.get(team).copied().unwrap_or(0);
        if held >= max {
            crate::metrics::METRICS.change_refusals.with_label_values(&["job_quota"]).inc();
            tracing::warn!(job = %w.job, team, held, max, "job save refused: the team's job quota is reached");
            outcomes[p.index] = Some(Err(refusal(&w.job, team, held, max)));
            continue;
        }
        leave(&mut counts, &w.job);
        *counts.entry(team.to_owned()).or_default() += 1;
        kept.push(p);
    }
    kept
}

/// `409 quota_exceeded`: the team holds `held` jobs, its quota is `max`.
fn refusal(job: &str, team: &str, held: u64, max: u64) -> ApiError {
    ApiError {
        status: axum::http::StatusCode::CONFLICT,
        code: "quota_exceeded",
        message: format!(
            "job {job:?} would take team {team:?} past its quota of jobs: it holds {held}, the quota \
             (max_jobs_per_team) is {max}; delete one of its jobs first, or ask an operator to raise max_jobs_per_team"
        ),
        field: Some("team".to_owned()),
    }
}
