//! What the jobs of each team may use on the workers, from the master's config (`[teams.NAME]`):
//! the users their shell tasks may run as (`task.user`) and, per worker label, the values
//! their `selector` must pick one of. Checked on every save of a job of a team, whoever saves
//! it; a job without a team (global admins only) is not limited. A team without an entry has
//! the empty policy: its tasks run as each worker's own user, and any selector.

use std::collections::BTreeMap;

use etcron_model::spec::JobSpec;
use serde::Deserialize;

use crate::error::ApiError;

/// Most teams with a policy, users per team, label keys per team and values per key.
pub const MAX_POLICY_ENTRIES: usize = 256;

/// `[teams.NAME]` of the master config.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamPolicy {
    /// The users the team's shell tasks may name as `task.user` (workers must list them in
    /// their own `run_as_users` too). Empty: none, the tasks run as each worker's user.
    #[serde(default)]
    pub run_as_users: Vec<String>,
    /// For each worker label key, the values a job of the team must select (`selector` must
    /// hold the key with one of them): `{ pool = ["alpha", "shared"] }` keeps the team's jobs
    /// on the workers labelled `pool=alpha` or `pool=shared`.
    #[serde(default)]
    pub selector: BTreeMap<String, Vec<String>>,
}

/// Every team's policy.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TeamPolicies(BTreeMap<String, TeamPolicy>);

impl TeamPolicies {
    /// The policies of the config, checked: team names, account names, label keys, limits.
    pub fn new(teams: BTreeMap<String, TeamPolicy>) -> Result<Self, String> {
        if teams.len() > MAX_POLICY_ENTRIES {
            return Err(format!("teams: at most {MAX_POLICY_ENTRIES} teams"));
        }
        for (team, policy) in &teams {
            etcron_model::spec::validate_team(team).map_err(|m| format!("teams: {m}"))?;
            let at = format!("teams.{team}");
            if policy.run_as_users.len() > MAX_POLICY_ENTRIES || policy.selector.len() > MAX_POLICY_ENTRIES {
                return Err(format!("{at}: at most {MAX_POLICY_ENTRIES} users and {MAX_POLICY_ENTRIES} label keys"));
            }
            for user in &policy.run_as_users {
                etcron_model::spec::check_account_name(user).map_err(|m| format!("{at}.run_as_users: {m}"))?;
            }
            for (key, values) in &policy.selector {
                if values.is_empty() || values.len() > MAX_POLICY_ENTRIES {
                    return Err(format!("{at}.selector.{key}: between 1 and {MAX_POLICY_ENTRIES} values"));
                }
            }
        }
        Ok(Self(teams))
    }

    /// The policy of `team` (the empty one when the config has none).
    #[must_use]
    pub fn of(&self, team: &str) -> TeamPolicy {
        self.0.get(team).cloned().unwrap_or_default()
    }

    /// Whether `spec` keeps within its team's policy: 403 naming `task.user` or `selector`
    /// when not. A job without a team is not limited.
    pub fn check(&self, spec: &JobSpec) -> Result<(), ApiError> {
        let Some(team) = spec.team.as_deref() else { return Ok(()) };
        let empty = TeamPolicy::default();
        let policy = self.0.get(team).unwrap_or(&empty);
        if let Some(user) = spec.run_as_user() {
            if !policy.run_as_users.iter().any(|u| u == user) {
                let allowed = if policy.run_as_users.is_empty() {
                    "none: they run as each worker's own user".to_owned()
                } else {
                    policy.run_as_users.join(", ")
                };
                return Err(refused(
                    "task.user",
                    format!(
                        "the jobs of team {team:?} may not run as {user:?} (allowed: {allowed}; run_as_users of \
                         [teams.{team}] in the master config)"
                    ),
                ));
            }
        }
        for (key, values) in &policy.selector {
            let chosen = spec.selector.get(key);
            if !chosen.is_some_and(|v| values.contains(v)) {
                let got = chosen.map_or_else(|| "none".to_owned(), |v| format!("{v:?}"));
                return Err(refused(
                    "selector",
                    format!(
                        "the jobs of team {team:?} must select {key} = one of {} (got {got}; selector of \
                         [teams.{team}] in the master config)",
                        values.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }
}

fn refused(field: &str, message: String) -> ApiError {
    tracing::info!(field, %message, "save refused: outside the team's policy");
    crate::metrics::METRICS.team_refusals.with_label_values(&[field]).inc();
    ApiError { field: Some(field.to_owned()), ..ApiError::forbidden(message) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> JobSpec {
        JobSpec::from_value(json).unwrap()
    }

    #[test]
    fn a_team_uses_only_its_users_and_selectors() {
        let alpha = TeamPolicy {
            run_as_users: vec!["alpha-svc".into()],
            selector: [("pool".to_owned(), vec!["alpha".to_owned(), "shared".to_owned()])].into_iter().collect(),
        };
        let policies = TeamPolicies::new([("alpha".to_owned(), alpha)].into_iter().collect()).unwrap();
        let job = |team: &str, user: Option<&str>, pool: Option<&str>| {
            let mut task = serde_json::json!({"kind": "shell", "command": "true"});
            if let Some(u) = user {
                task["user"] = u.into();
            }
            let selector: BTreeMap<&str, &str> = pool.map(|p| ("pool", p)).into_iter().collect();
            spec(serde_json::json!({"schedule": "@daily", "team": team, "task": task, "selector": selector}))
        };
        assert!(policies.check(&job("alpha", Some("alpha-svc"), Some("shared"))).is_ok());
        let e = policies.check(&job("alpha", Some("root"), Some("alpha"))).unwrap_err();
        assert_eq!((e.status.as_u16(), e.field.as_deref()), (403, Some("task.user")), "{}", e.message);
        for pool in [None, Some("beta")] {
            let e = policies.check(&job("alpha", None, pool)).unwrap_err();
            assert_eq!((e.status.as_u16(), e.field.as_deref()), (403, Some("selector")), "{}", e.message);
        }
        // A team without an entry: no task.user, any selector.
        assert!(policies.check(&job("beta", None, Some("anything"))).is_ok());
        assert_eq!(
            policies.check(&job("beta", Some("alpha-svc"), None)).unwrap_err().field.as_deref(),
            Some("task.user")
        );
        let no_team =
            spec(serde_json::json!({"schedule": "@daily", "task": {"kind": "shell", "command": "x", "user": "root"}}));
        assert!(policies.check(&no_team).is_ok(), "a job without a team is for global admins");
    }

    #[test]
    fn bad_policies_are_refused_naming_the_setting() {
        let with =
            |team: &str, policy: TeamPolicy| TeamPolicies::new([(team.to_owned(), policy)].into_iter().collect());
        assert!(with("Alpha", TeamPolicy::default()).unwrap_err().starts_with("teams:"));
        let bad_user = TeamPolicy { run_as_users: vec!["0".into()], ..TeamPolicy::default() };
        assert!(with("alpha", bad_user).unwrap_err().starts_with("teams.alpha.run_as_users"));
        let no_values =
            TeamPolicy { selector: [("pool".to_owned(), vec![])].into_iter().collect(), ..TeamPolicy::default() };
        assert!(with("alpha", no_values).unwrap_err().starts_with("teams.alpha.selector.pool"));
    }
}
