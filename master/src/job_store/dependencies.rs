//! The team rule of dependencies at save time. A job's `on_success` / `on_failure` start other
//! jobs' runs, so each dependent must be a job the caller holds operator on (the role that
//! starts runs), on the dependent's own team; a job of a team may start a job without a team
//! only for a caller with a global operator role. A dependent the caller does not see is
//! refused exactly like a missing one, and never named: for a caller without a global role a
//! dependency must name an existing job (or one the same batch saves); a caller with a global
//! role sees every job, so for it a missing dependent leaks nothing and is allowed (it may be
//! created later). The teams checked are recorded in the saved spec (`dependency_teams`), which
//! is what workers hold a trigger to (`etcron_model::dependency::may_trigger`). Cycles are
//! reported without the names of jobs the caller does not see. A job's `after` (workflow parents,
//! whose results its runs read) names jobs of its own team only.

use std::collections::BTreeMap;

use etcron_model::spec::JobSpec;

use super::{Change, JobStoreError, Snapshot, Write};
use crate::access::{team_of, Role, Scope};

/// Every job's team as the batch leaves it: the stored jobs (every one, read at one revision)
/// with the batch's saves and deletes applied.
pub(super) struct JobTeams(BTreeMap<String, Option<String>>);

impl JobTeams {
    pub(super) fn after(snapshot: &Snapshot, writes: &[Write], pending: impl IntoIterator<Item = usize>) -> Self {
        let mut teams: BTreeMap<String, Option<String>> =
            snapshot.jobs.iter().map(|(name, (value, _))| (name.clone(), team_of(value))).collect();
        for i in pending {
            let w = &writes[i];
            match &w.change {
                Change::Put(spec) => teams.insert(w.job.clone(), spec.team.clone()),
                Change::Delete => teams.remove(&w.job),
            };
        }
        Self(teams)
    }

    /// The team of `job`: `None` when there is no such job, `Some(None)` for one without a team.
    fn get(&self, job: &str) -> Option<Option<&str>> {
        self.0.get(job).map(Option::as_deref)
    }

    /// Whether the caller of `scope` sees `job` (a job that does not exist has no edges, so it
    /// lies on no cycle: shown).
    pub(super) fn shown(&self, scope: &Scope, job: &str) -> bool {
        self.get(job).is_none_or(|team| scope.caller.access.sees(team))
    }
}

/// Checks every dependent of `spec` for the caller of `scope` and returns what the save records
/// as the spec's `dependency_teams`: the team of each dependent outside the job's own team.
pub(super) fn check(
    spec: &JobSpec,
    teams: &JobTeams,
    scope: &Scope,
) -> Result<BTreeMap<String, Option<String>>, JobStoreError> {
    let access = &scope.caller.access;
    let mut checked = BTreeMap::new();
    for (list, jobs) in [("on_success", &spec.on_success), ("on_failure", &spec.on_failure)] {
        for (i, dependent) in jobs.iter().enumerate() {
            let field = format!("{list}[{i}]");
            let Some(team) = teams.get(dependent) else {
                if access.role.is_some() {
                    continue;
                }
                return Err(not_seen(field));
            };
            match access.on(team) {
                None => return Err(not_seen(field)),
                Some(held) if held < Role::Operator => return Err(too_low(scope, field, held, team)),
                Some(_) => {}
            }
            if spec.team.is_some() && team != spec.team.as_deref() {
                checked.insert(dependent.clone(), team.map(str::to_owned));
            }
        }
    }
    check_after(spec, teams, scope)?;
    Ok(checked)
}

/// A job's `after` names jobs whose results its runs read: jobs of its own team only (workers
/// trigger no child of another team either), and ones the caller sees.
fn check_after(spec: &JobSpec, teams: &JobTeams, scope: &Scope) -> Result<(), JobStoreError> {
    for (i, parent) in spec.after.iter().enumerate() {
        let field = format!("after[{i}]");
        let Some(team) = teams.get(parent) else {
            if scope.caller.access.role.is_some() {
                continue;
            }
            return Err(not_seen(field));
        };
        if !scope.caller.access.sees(team) {
            return Err(not_seen(field));
        }
        if team != spec.team.as_deref() {
            tracing::info!(%field, "save refused: a workflow parent of another team");
            crate::metrics::METRICS.team_refusals.with_label_values(&["dependency"]).inc();
            let of = |t: Option<&str>| t.map_or_else(|| "no team".to_owned(), |t| format!("team {t:?}"));
            let message = format!(
                "{parent:?} is of {} and this job of {}: a job runs after jobs of its own team only (it reads their results)",
                of(team),
                of(spec.team.as_deref())
            );
            return Err(JobStoreError::Forbidden { field: Some(field), message });
        }
    }
    Ok(())
}

/// A dependent the caller does not see, or that does not exist: the same answer for both,
/// without the name.
fn not_seen(field: String) -> JobStoreError {
    tracing::info!(%field, "save refused: a dependent the caller does not see, or no such job");
    crate::metrics::METRICS.team_refusals.with_label_values(&["dependency"]).inc();
    let message = format!(
        "{field} names no job you hold a role on: a dependency must name an existing job (or one saved in the same \
         batch) of a team you hold operator on"
    );
    JobStoreError::NotFound { field: Some(field), message }
}

/// A dependent the caller sees but may not start runs of.
fn too_low(scope: &Scope, field: String, held: Role, team: Option<&str>) -> JobStoreError {
    tracing::info!(%field, "save refused: a dependent on whose team the caller is not operator");
    crate::metrics::METRICS.team_refusals.with_label_values(&["dependency"]).inc();
    let on = team.map_or_else(|| "on jobs without a team (a global role)".to_owned(), |t| format!("on team {t:?}"));
    let message = format!(
        "{} holds {} {on}; a dependency starts runs of the job it names, so it needs operator there",
        scope.caller.name,
        held.as_str()
    );
    JobStoreError::Forbidden { field: Some(field), message }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{Access, Caller};
    use crate::job_store::tests::answer;

    fn scope(role: Option<Role>, teams: &[(&str, Role)]) -> Scope {
        let access = Access { role, teams: teams.iter().map(|(t, r)| ((*t).to_owned(), *r)).collect() };
        Scope { caller: Caller { name: "t".into(), access }, needed: Role::Admin, action: String::new() }
    }

    fn job_teams(jobs: &[(&str, Option<&str>)]) -> JobTeams {
        JobTeams(jobs.iter().map(|(j, t)| ((*j).to_owned(), t.map(str::to_owned))).collect())
    }

    fn spec(team: &str, deps: &[&str]) -> JobSpec {
        let json = serde_json::json!({
            "schedule": "@daily", "team": team, "task": {"kind": "shell", "command": "true"}, "on_success": deps
        });
        JobSpec::from_value(json).unwrap()
    }

    #[test]
    fn a_workflow_parent_is_of_the_jobs_own_team_and_seen() {
        let teams = job_teams(&[("a2", Some("alpha")), ("g", Some("gamma")), ("b", Some("beta"))]);
        let alpha_gamma = scope(None, &[("alpha", Role::Admin), ("gamma", Role::Admin)]);
        let after = |team: &str, parents: &[&str]| {
            let json = serde_json::json!({"schedule": "@daily", "team": team, "after": parents,
                "task": {"kind": "shell", "command": "true"}});
            JobSpec::from_value(json).unwrap()
        };
        assert!(check(&after("alpha", &["a2"]), &teams, &alpha_gamma).is_ok());
        let other = answer(&check(&after("alpha", &["g"]), &teams, &alpha_gamma).unwrap_err());
        assert_eq!((other.status.as_u16(), other.field.as_deref()), (403, Some("after[0]")));
        assert!(other.message.contains("own team"), "{}", other.message);
        let hidden = answer(&check(&after("alpha", &["a2", "b"]), &teams, &alpha_gamma).unwrap_err());
        assert_eq!((hidden.status.as_u16(), hidden.field.as_deref()), (404, Some("after[1]")));
    }

    #[test]
    fn a_dependent_needs_operator_on_its_team_and_hidden_is_missing() {
        let teams = job_teams(&[("a2", Some("alpha")), ("b", Some("beta")), ("g", Some("gamma")), ("free", None)]);
        let alpha_admin = scope(None, &[("alpha", Role::Admin), ("gamma", Role::Viewer)]);
        assert_eq!(check(&spec("alpha", &["a2"]), &teams, &alpha_admin).unwrap(), BTreeMap::new());
        let refused = |spec: &JobSpec, scope: &Scope| answer(&check(spec, &teams, scope).unwrap_err());
        let hidden = refused(&spec("alpha", &["b"]), &alpha_admin);
        let missing = refused(&spec("alpha", &["nope"]), &alpha_admin);
        let no_team = refused(&spec("alpha", &["free"]), &alpha_admin);
        for e in [&hidden, &missing, &no_team] {
            assert_eq!((e.status.as_u16(), e.field.as_deref()), (404, Some("on_success[0]")));
            assert_eq!(e.message, hidden.message, "a hidden job answers like a missing one");
        }
        assert!(!hidden.message.contains("\"b\""), "{}", hidden.message);
        let low = refused(&spec("alpha", &["a2", "g"]), &alpha_admin);
        assert_eq!((low.status.as_u16(), low.field.as_deref()), (403, Some("on_success[1]")), "{}", low.message);
        let both = scope(None, &[("alpha", Role::Admin), ("beta", Role::Operator)]);
        let checked = check(&spec("alpha", &["a2", "b"]), &teams, &both).unwrap();
        assert_eq!(checked, [("b".to_owned(), Some("beta".to_owned()))].into_iter().collect());
        let global_operator = scope(Some(Role::Operator), &[("alpha", Role::Admin)]);
        let checked = check(&spec("alpha", &["free", "later"]), &teams, &global_operator).unwrap();
        assert_eq!(checked, [("free".to_owned(), None)].into_iter().collect(), "a missing job: nothing to record");
        let global_viewer = scope(Some(Role::Viewer), &[("alpha", Role::Admin)]);
        assert_eq!(refused(&spec("alpha", &["free"]), &global_viewer).status.as_u16(), 403);
    }
}
