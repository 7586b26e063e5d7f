//! The per-team job quota at save time: with every job read at one revision (and the writes
//! guarded on it, as for the dependency check), the jobs of each team are counted, the batch's
//! deletes and moves applied, and a save that would take a team past `max_jobs_per_team` is
//! refused. Jobs without a team (only a global role may save them) have no quota.

use std::collections::BTreeMap;

use super::{Change, JobStoreError, Outcome, Prepared, Snapshot, Write};
use crate::access::team_of;

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
            let (job, team) = (w.job.clone(), team.to_owned());
            outcomes[p.index] = Some(Err(JobStoreError::QuotaExceeded { job, team, held, max }));
            continue;
        }
        leave(&mut counts, &w.job);
        *counts.entry(team.to_owned()).or_default() += 1;
        kept.push(p);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_store::tests::{answer, prepared, write};
    use crate::job_store::Precondition;
    use etcron_model::spec::JobSpec;

    fn in_team(team: Option<&str>) -> Change {
        let json = serde_json::json!({
            "schedule": "0 * * * * *", "task": {"kind": "shell", "command": "true"}, "team": team
        });
        Change::Put(Box::new(JobSpec::from_value(json).unwrap_or_else(|e| panic!("{e}"))))
    }

    #[test]
    fn the_job_quota_counts_each_team_after_the_batchs_deletes_and_moves() {
        let stored = |team: &str| (serde_json::to_vec(&serde_json::json!({ "team": team })).unwrap_or_default(), 5);
        // Team a holds a1 and a2, team b holds b1; the quota is 2.
        let snapshot = Snapshot {
            revision: 5,
            jobs: [("a1", "a"), ("a2", "a"), ("b1", "b")].iter().map(|(j, t)| ((*j).to_owned(), stored(t))).collect(),
            complete: true,
        };
        let any = Precondition::default();
        let writes = vec![
            write("a3", in_team(Some("a")), any), // refused: a is full
            write("a1", in_team(Some("a")), any), // an update within a: allowed
            write("b2", in_team(Some("b")), any), // b reaches 2
            write("a2", in_team(Some("c")), any), // a move to c frees a place in a...
            write("a4", in_team(Some("a")), any), // ...taken here
            write("b1", Change::Delete, any),     // a delete counts first: b3 fits
            write("b3", in_team(Some("b")), any),
            write("free", in_team(None), any), // no team, no quota
        ];
        let ready = (0..writes.len()).map(|i| prepared(i, Some(10))).collect();
        let mut outcomes: Vec<Option<Outcome>> = writes.iter().map(|_| None).collect();
        let kept = check(&writes, ready, &snapshot, &mut outcomes, 2);
        assert_eq!(kept.iter().map(|p| p.index).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5, 6, 7]);
        let Some(Err(e)) = &outcomes[0] else { panic!("a3 must be refused") };
        let e = answer(e);
        assert_eq!((e.status.as_u16(), e.code), (409, "quota_exceeded"));
        assert!(e.message.contains("team \"a\"") && e.message.contains("(max_jobs_per_team) is 2"), "{}", e.message);
    }
}
