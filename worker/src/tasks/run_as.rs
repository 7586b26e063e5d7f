//! Shell tasks that run as another user (`task.user`, `task.group`): who may, and the account
//! a task's process takes on between fork and exec.
//!
//! Only a worker running as root can switch users, and only to the users its `run_as_users`
//! lists; the group must be one of the user's own (primary or supplementary) — a job can never
//! get more than the user it names already has.

use nix::unistd::{Gid, Group, Uid, User};

/// What a task asks to run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub user: String,
    pub group: Option<String>,
}

/// The resolved account: ids for the child, names and home for its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub uid: Uid,
    pub gid: Gid,
    /// Supplementary groups (the user's, from the group database).
    pub groups: Vec<Gid>,
    pub name: String,
    pub home: String,
}

impl Account {
    /// `HOME`, `USER` and `LOGNAME` of the account, as cron sets them.
    #[must_use]
    pub fn env(&self) -> [(&'static str, String); 3] {
        [("HOME", self.home.clone()), ("USER", self.name.clone()), ("LOGNAME", self.name.clone())]
    }
}

/// Looks the account up on this machine (reads the user and group databases: call it off the
/// async threads). The error names the field, the account and the worker.
pub fn resolve(run_as: &RunAs, worker_id: &str) -> Result<Account, String> {
    let user = match User::from_name(&run_as.user) {
        Ok(Some(u)) => u,
        Ok(None) => return Err(format!("task.user {:?} does not exist on worker {worker_id}", run_as.user)),
        Err(e) => return Err(format!("task.user {:?}: looking it up on worker {worker_id} failed: {e}", run_as.user)),
    };
    let c_name = std::ffi::CString::new(user.name.as_bytes()).map_err(|e| e.to_string())?;
    let groups = nix::unistd::getgrouplist(&c_name, user.gid)
        .map_err(|e| format!("task.user {:?}: listing its groups on worker {worker_id} failed: {e}", run_as.user))?;
    let gid = match &run_as.group {
        None => user.gid,
        Some(name) => {
            let group = match Group::from_name(name) {
                Ok(Some(g)) => g,
                Ok(None) => return Err(format!("task.group {name:?} does not exist on worker {worker_id}")),
                Err(e) => return Err(format!("task.group {name:?}: looking it up on worker {worker_id} failed: {e}")),
            };
            if !groups.contains(&group.gid) {
                return Err(format!(
                    "task.group {name:?} is not a group of user {:?} on worker {worker_id}",
                    run_as.user
                ));
            }
            group.gid
        }
    };
    Ok(Account { uid: user.uid, gid, groups, name: user.name, home: user.dir.to_string_lossy().into_owned() })
}

/// Why this worker will not run a task as `user`, or `None` when it may.
#[must_use]
pub fn refusal(allowed: &[String], user: &str, worker_id: &str) -> Option<String> {
    if etcron_model::stored::may_run_as(allowed, Some(user)) {
        return None;
    }
    Some(format!("task.user {user:?} is not in the run_as_users of worker {worker_id}"))
}

/// Checks the configured `run_as_users`: account names, at most [`MAX_RUN_AS_USERS`], and a
/// worker that can switch users (runs as root) when any is listed.
pub fn check_config(users: &[String], is_root: bool) -> Result<(), String> {
    if users.len() > MAX_RUN_AS_USERS {
        return Err(format!("run_as_users: at most {MAX_RUN_AS_USERS} users"));
    }
    for user in users {
        etcron_model::spec::check_account_name(user).map_err(|m| format!("run_as_users: {m}"))?;
    }
    if !users.is_empty() && !is_root {
        return Err(format!(
            "run_as_users: the worker runs as uid {} and cannot switch users; run it as root or drop run_as_users",
            nix::unistd::geteuid()
        ));
    }
    Ok(())
}

/// Most users in `run_as_users`.
pub const MAX_RUN_AS_USERS: usize = 64;

/// Takes on `account` in the forked child: supplementary groups, then group, then user (after
/// the user is set, the others can no longer be changed). Only async-signal-safe system calls
/// on values resolved before the fork.
pub fn become_account(account: &Account) -> std::io::Result<()> {
    nix::unistd::setgroups(&account.groups)?;
    nix::unistd::setgid(account.gid)?;
    nix::unistd::setuid(account.uid)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_users_are_allowed() {
        let allowed = vec!["backup".to_owned()];
        assert_eq!(refusal(&allowed, "backup", "w1"), None);
        assert_eq!(
            refusal(&allowed, "postgres", "w1").as_deref(),
            Some("task.user \"postgres\" is not in the run_as_users of worker w1")
        );
        assert!(refusal(&[], "backup", "w1").is_some());
    }

    #[test]
    fn the_config_needs_names_and_root() {
        assert_eq!(check_config(&[], false), Ok(()));
        assert_eq!(check_config(&["nobody".into()], true), Ok(()));
        assert!(check_config(&["nobody".into()], false).unwrap_err().contains("cannot switch users"));
        assert!(check_config(&["0".into()], true).unwrap_err().starts_with("run_as_users: must be an account name"));
        let many: Vec<String> = (0..=MAX_RUN_AS_USERS).map(|i| format!("u{i}")).collect();
        assert!(check_config(&many, true).unwrap_err().contains("at most"));
    }

    #[test]
    fn accounts_resolve_from_the_user_database() {
        // root exists everywhere, with group root among its groups.
        let root = resolve(&RunAs { user: "root".into(), group: Some("root".into()) }, "w1").unwrap();
        assert_eq!((root.uid, root.gid, root.name.as_str()), (Uid::from_raw(0), Gid::from_raw(0), "root"));
        assert!(root.env().contains(&("HOME", root.home.clone())));
        let missing = resolve(&RunAs { user: "no-such-user-etcron".into(), group: None }, "w1").unwrap_err();
        assert_eq!(missing, "task.user \"no-such-user-etcron\" does not exist on worker w1");
        let bad_group = resolve(&RunAs { user: "root".into(), group: Some("no-such-group-etcron".into()) }, "w1");
        assert_eq!(bad_group.unwrap_err(), "task.group \"no-such-group-etcron\" does not exist on worker w1");
    }
}
