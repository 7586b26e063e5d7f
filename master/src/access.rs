//! Who may see and touch which jobs: a caller's roles (a global role, roles per team), the one
//! rule for the role a caller holds on a job's team, and the [`Scope`] of a request — the
//! caller and the role its route needs — with which every job read and write is checked.
//!
//! The rule: a caller's role on a job of team T is the higher of its global role and its role
//! on T; a job without a team is for global roles only. A job the caller holds no role on does
//! not exist for it (the same 404 as a missing job, so other teams' job names do not leak); a
//! role too low on a job it sees is a 403 naming the role needed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// What a token may do; each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Read jobs, workers, executions, the overview and the audit log.
    Viewer,
    /// Also run, kill, pause and resume jobs.
    Operator,
    /// Also create, replace and delete jobs, and list tokens.
    Admin,
}

impl Role {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
}

/// A caller's roles: one on every job (`role`, global) and one per team.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Access {
    /// The role on every job, teams or not; `null` when the caller has team roles only.
    pub role: Option<Role>,
    /// The role on the jobs of each team.
    pub teams: BTreeMap<String, Role>,
}

impl Access {
    /// A global role and no team roles (`ETCRON_API_TOKEN`, the open API).
    #[must_use]
    pub fn global(role: Role) -> Self {
        Self { role: Some(role), teams: BTreeMap::new() }
    }

    /// The role held on a job of `team` (`None`: a job without a team): the higher of the
    /// global role and the team's; `None` when the caller holds neither, and may not see it.
    #[must_use]
    pub fn on(&self, team: Option<&str>) -> Option<Role> {
        let of_team = team.and_then(|t| self.teams.get(t)).copied();
        self.role.max(of_team)
    }

    /// The highest role held anywhere (what the auth layer compares a route's role with).
    #[must_use]
    pub fn highest(&self) -> Option<Role> {
        self.teams.values().copied().max().max(self.role)
    }

    /// The teams whose records a search may return: `None` (every record) for a caller with a
    /// global role, else its teams; `wanted` (a `?team=` filter) narrows either.
    #[must_use]
    pub fn visible_teams(&self, wanted: Option<&str>) -> Option<Vec<String>> {
        match (self.role, wanted) {
            (Some(_), None) => None,
            (Some(_), Some(team)) => Some(vec![team.to_owned()]),
            (None, None) => Some(self.teams.keys().cloned().collect()),
            (None, Some(team)) => Some(self.teams.contains_key(team).then(|| team.to_owned()).into_iter().collect()),
        }
    }

    /// Whether the caller sees a record or job of `team`.
    #[must_use]
    pub fn sees(&self, team: Option<&str>) -> bool {
        self.on(team).is_some()
    }
}

/// The caller of a request, as the auth layer established it (a request extension).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub access: Access,
}

impl Caller {
    /// The caller of an API without tokens: anyone, as a global admin.
    #[must_use]
    pub fn anonymous() -> Self {
        Self { name: "anonymous".to_owned(), access: Access::global(Role::Admin) }
    }

    /// What `whoami` and the token list show: `{"name", "role", "teams"}`.
    #[must_use]
    pub fn shown(&self) -> serde_json::Value {
        serde_json::json!({ "name": self.name, "role": self.access.role, "teams": self.access.teams })
    }

    /// The roles in words for messages and the audit log: `admin`, `viewer, payments:operator`,
    /// `search:viewer`.
    #[must_use]
    pub fn roles(&self) -> String {
        let mut parts: Vec<String> = self.access.role.map(|r| r.as_str().to_owned()).into_iter().collect();
        parts.extend(self.access.teams.iter().map(|(t, r)| format!("{t}:{}", r.as_str())));
        parts.join(", ")
    }
}

/// A request's caller and the role its route needs (`auth::required_role`), handed to the
/// handlers by the auth layer; the job store takes it for every read and write of a job.
#[derive(Debug, Clone)]
pub struct Scope {
    pub caller: Caller,
    pub needed: Role,
    /// `METHOD path`, for messages.
    pub action: String,
}

impl Scope {
    /// A scope with every role (tests of the job store, tools).
    #[must_use]
    pub fn admin() -> Self {
        Self { caller: Caller::anonymous(), needed: Role::Admin, action: String::new() }
    }

    /// The answer for a job the caller does not see: exactly the answer for a missing job.
    #[must_use]
    pub fn no_job(name: &str) -> ApiError {
        ApiError::not_found(format!("job {name:?} does not exist"))
    }

    /// May the caller do what the route does to job `name` of `team`: 404 as for a missing
    /// job when it does not see the job, 403 naming the role needed when its role is too low.
    pub fn check_job(&self, name: &str, team: Option<&str>) -> Result<(), ApiError> {
        self.check(team, || Self::no_job(name))
    }

    /// As [`Scope::check_job`], with `hidden` as the answer when the caller does not see it.
    pub fn check(&self, team: Option<&str>, hidden: impl FnOnce() -> ApiError) -> Result<(), ApiError> {
        match self.caller.access.on(team) {
            None => Err(hidden()),
            Some(held) if held < self.needed => Err(self.too_low(held, team)),
            Some(_) => Ok(()),
        }
    }

    /// A save that puts a job into `team` (a new job, or a replace naming another team) needs
    /// the route's role (admin) on that team too: a 403 naming `team` otherwise. The caller's
    /// own roles are all it tells, so this leaks nothing.
    pub fn check_team(&self, team: Option<&str>) -> Result<(), ApiError> {
        let held = self.caller.access.on(team);
        if held.is_some_and(|h| h >= self.needed) {
            return Ok(());
        }
        let needed = self.needed.as_str();
        let message = match team {
            Some(t) => format!(
                "{} holds {} on team {t:?}; a job of team {t:?} needs {needed} on it",
                self.caller.name,
                held.map_or("no role", Role::as_str),
            ),
            None => format!(
                "{} holds no global {needed} role; a job without a team needs it (give the job a team you hold {needed} on)",
                self.caller.name
            ),
        };
        Err(ApiError { field: Some("team".to_owned()), ..ApiError::forbidden(message) })
    }

    fn too_low(&self, held: Role, team: Option<&str>) -> ApiError {
        let on = team.map_or_else(String::new, |t| format!(" on team {t:?}"));
        ApiError::forbidden(format!(
            "{} holds the {} role{on}; {} needs {}",
            self.caller.name,
            held.as_str(),
            self.action,
            self.needed.as_str()
        ))
    }

    /// The teams a search of records is limited to ([`Access::visible_teams`]).
    #[must_use]
    pub fn teams(&self, wanted: Option<&str>) -> Option<Vec<String>> {
        self.caller.access.visible_teams(wanted)
    }
}

/// The `team` of a stored job value, read on its own without validating the rest, so a value
/// written around the API still belongs to its team; `None` when it names none (or is no JSON).
#[must_use]
pub fn team_of(value: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Team {
        team: Option<String>,
    }
    serde_json::from_slice::<Team>(value).ok().and_then(|t| t.team)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(role: Option<Role>, teams: &[(&str, Role)]) -> Access {
        Access { role, teams: teams.iter().map(|(t, r)| ((*t).to_owned(), *r)).collect() }
    }

    fn scope(access: Access, needed: Role) -> Scope {
        Scope { caller: Caller { name: "t".into(), access }, needed, action: "POST /api/jobs/j/run".into() }
    }

    #[test]
    fn the_role_on_a_team_is_the_higher_of_the_global_and_the_teams() {
        use Role::{Admin, Operator, Viewer};
        let global_viewer = access(Some(Viewer), &[("pay", Admin)]);
        assert_eq!(global_viewer.on(Some("pay")), Some(Admin));
        assert_eq!(global_viewer.on(Some("search")), Some(Viewer));
        assert_eq!(global_viewer.on(None), Some(Viewer), "a job without a team: the global role");
        let team_only = access(None, &[("pay", Operator), ("search", Viewer)]);
        assert_eq!(team_only.on(Some("pay")), Some(Operator));
        assert_eq!(team_only.on(Some("search")), Some(Viewer));
        assert_eq!(team_only.on(Some("other")), None);
        assert_eq!(team_only.on(None), None, "a job without a team is for global roles only");
        assert_eq!(team_only.highest(), Some(Operator));
        let admin_with_less = access(Some(Admin), &[("pay", Viewer)]);
        assert_eq!(admin_with_less.on(Some("pay")), Some(Admin), "a team role never lowers the global one");
        assert_eq!(Access::default().highest(), None);
    }

    #[test]
    fn searches_see_every_record_with_a_global_role_and_their_teams_without() {
        let team_only = access(None, &[("pay", Role::Operator), ("search", Role::Viewer)]);
        assert_eq!(team_only.visible_teams(None), Some(vec!["pay".to_owned(), "search".to_owned()]));
        assert_eq!(team_only.visible_teams(Some("pay")), Some(vec!["pay".to_owned()]));
        assert_eq!(team_only.visible_teams(Some("other")), Some(vec![]), "a team not held: nothing");
        let global = access(Some(Role::Viewer), &[]);
        assert_eq!(global.visible_teams(None), None);
        assert_eq!(global.visible_teams(Some("x")), Some(vec!["x".to_owned()]));
    }

    #[test]
    fn a_hidden_job_is_404_like_a_missing_one_and_a_low_role_403() {
        let team_viewer = scope(access(None, &[("pay", Role::Viewer)]), Role::Operator);
        let hidden = team_viewer.check_job("j", Some("search")).unwrap_err();
        let missing = Scope::no_job("j");
        assert_eq!((hidden.status, hidden.code, &hidden.message), (missing.status, missing.code, &missing.message));
        assert_eq!(team_viewer.check_job("j", None).unwrap_err().status, 404);
        let low = team_viewer.check_job("j", Some("pay")).unwrap_err();
        assert_eq!(low.status, 403);
        assert!(low.message.contains("needs operator") && low.message.contains("\"pay\""), "{}", low.message);
        let team_operator = scope(access(None, &[("pay", Role::Operator)]), Role::Operator);
        assert!(team_operator.check_job("j", Some("pay")).is_ok());
        assert!(Scope::admin().check_job("j", None).is_ok() && Scope::admin().check_team(None).is_ok());
    }

    #[test]
    fn saving_into_a_team_needs_the_role_on_it_named_at_the_field() {
        let team_admin = scope(access(Some(Role::Viewer), &[("pay", Role::Admin)]), Role::Admin);
        assert!(team_admin.check_team(Some("pay")).is_ok());
        for team in [Some("search"), None] {
            let e = team_admin.check_team(team).unwrap_err();
            assert_eq!((e.status.as_u16(), e.field.as_deref()), (403, Some("team")), "{team:?}: {}", e.message);
        }
    }

    #[test]
    fn the_team_of_a_stored_value_is_read_without_validating_it() {
        assert_eq!(team_of(br#"{"team":"pay","schedule":"nonsense"}"#).as_deref(), Some("pay"));
        assert_eq!(team_of(br#"{"schedule":"@daily"}"#), None);
        assert_eq!(team_of(b"not json"), None);
    }
}
