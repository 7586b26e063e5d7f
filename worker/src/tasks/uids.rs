//! Who a shell task runs as when its job names no `task.user`: the worker's `task_user` /
//! `task_uids` settings, and the uid a worker running as root gives each team.
//!
//! A worker running as root gives each team (and the jobs without a team, together) a uid of
//! its own from `task_uids`, allocated the first time the team runs on the machine and kept in
//! the machine's uid table (`task_uid_table`, `/var/lib/etcron/task-uids.json`), so one team's
//! task cannot read another's `/proc/<pid>/` (environment, memory) or signal it, and none can
//! read root's files. Every worker of the machine shares the table (allocations hold its lock
//! file and re-read it), so a team has one uid on the machine and no two teams ever share one,
//! whatever ranges the workers are given. Running tasks as root
//! (or any one account) is `task_user`, the admin's explicit choice, shown in the worker's
//! registration. A worker not running as root cannot switch users: its tasks run as its own
//! uid, whatever their team.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::unistd::{Gid, Uid, User};

use crate::tasks::run_as::{Account, RunAs};

/// The range `task_uids` takes by default on a worker running as root: above the accounts
/// distributions create (below 60000) and systemd's reserved ranges (60001–60513, 61184–65519),
/// below the usual subordinate ranges of containers (100000 and up).
pub const DEFAULT_TASK_UIDS: (u32, u32) = (70_000, 70_999);
/// Most uids in `task_uids`.
pub const MAX_TASK_UIDS: u32 = 65_536;
/// The machine's uid table by default: which uid each team got, for every worker of the machine.
pub const DEFAULT_TABLE: &str = "/var/lib/etcron/task-uids.json";

/// Who tasks without `task.user` run as on this worker.
#[derive(Debug, Clone)]
pub enum TaskIdentity {
    /// The worker's own account: a worker not running as root cannot switch users, and one
    /// whose `task_user` is its own account (`root` on a worker running as root) need not.
    /// `named`: that `task_user`, shown instead of the uid.
    Own { uid: u32, named: Option<String> },
    /// The account `task_user` names (on a worker running as root; `root` included).
    User(String),
    /// A uid per team from `task_uids` (a worker running as root, by default).
    TeamUids(std::sync::Arc<TaskUids>),
}

impl TaskIdentity {
    /// Resolves the settings: `task_user` (an account name) and `task_uids` (`FIRST-LAST`)
    /// exclude each other; a worker not running as root takes neither (but its own name).
    pub fn resolve(
        task_user: Option<String>,
        task_uids: Option<String>,
        table: &Path,
        euid: Uid,
    ) -> Result<Self, String> {
        let own_name = || User::from_uid(euid).ok().flatten().map(|u| u.name);
        if let Some(user) = &task_user {
            etcron_model::spec::check_account_name(user).map_err(|m| format!("task_user: {m}"))?;
            if task_uids.is_some() {
                return Err("task_uids: not with task_user (all tasks run as task_user then)".to_owned());
            }
        }
        if !euid.is_root() {
            if task_uids.is_some() {
                return Err(format!(
                    "task_uids: the worker runs as uid {euid} and cannot switch users; run it as root or drop task_uids"
                ));
            }
            if let Some(user) = task_user.as_ref().filter(|u| own_name().as_deref() != Some(u.as_str())) {
                return Err(format!(
                    "task_user: the worker runs as uid {euid} and cannot switch to {user:?}; run it as root or drop task_user"
                ));
            }
            return Ok(Self::Own { uid: euid.as_raw(), named: task_user });
        }
        if let Some(user) = task_user {
            if own_name().as_deref() == Some(user.as_str()) {
                // Nothing to switch: the task is spawned as the worker is.
                return Ok(Self::Own { uid: euid.as_raw(), named: Some(user) });
            }
            return Ok(Self::User(user));
        }
        let (first, last) = match task_uids {
            Some(range) => parse_range(&range)?,
            None => DEFAULT_TASK_UIDS,
        };
        Ok(Self::TeamUids(std::sync::Arc::new(TaskUids::open(first, last, table)?)))
    }

    /// What the registration shows: the account (`root`), `uid per team FIRST-LAST`, or
    /// `worker's own uid N`.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Self::Own { named: Some(user), .. } | Self::User(user) => user.clone(),
            Self::Own { uid, named: None } => format!("worker's own uid {uid}"),
            Self::TeamUids(uids) => format!("uid per team {}-{}", uids.first, uids.last),
        }
    }
}

/// The account this process runs as, as registrations show it: `root (uid 0)`.
#[must_use]
pub fn process_account() -> String {
    let euid = nix::unistd::geteuid();
    match User::from_uid(euid).ok().flatten() {
        Some(user) => format!("{} (uid {euid})", user.name),
        None => format!("uid {euid}"),
    }
}

/// `FIRST-LAST`, both above 0 (never root's), at most [`MAX_TASK_UIDS`] of them.
fn parse_range(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("task_uids: expected FIRST-LAST (e.g. \"70000-70999\"), got {text:?}");
    let (a, b) = text.split_once('-').ok_or_else(bad)?;
    let (first, last): (u32, u32) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
    if first == 0 || first > last || last >= 2_147_483_647 {
        return Err(format!("task_uids: {text:?} must be FIRST-LAST with 0 < FIRST <= LAST < 2147483647"));
    }
    if last - first >= MAX_TASK_UIDS {
        return Err(format!("task_uids: at most {MAX_TASK_UIDS} uids"));
    }
    Ok((first, last))
}

/// Who a shell task runs as, when not as the worker itself: the user its job names, or the
/// uid of its team ([`TaskUids`]).
#[derive(Debug, Clone)]
pub enum TaskAccount {
    Named(RunAs),
    /// The team's uid (`None`: the jobs without a team).
    Team(std::sync::Arc<TaskUids>, Option<String>),
}

impl TaskAccount {
    /// The account on this machine (blocking: the user database, the uid table).
    pub fn resolve(&self, worker_id: &str) -> Result<Account, String> {
        match self {
            Self::Named(run_as) => crate::tasks::run_as::resolve(run_as, worker_id),
            Self::Team(uids, team) => uids.account(team.as_deref()).map_err(|e| format!("{e} on worker {worker_id}")),
        }
    }

    /// Who tasks of a job naming `user` (`task.user`, `task.group`) and of `team` run as on a
    /// worker whose tasks otherwise run as `identity`; `None`: as the worker itself.
    #[must_use]
    pub fn of(user: Option<&str>, group: Option<&str>, team: Option<&str>, identity: &TaskIdentity) -> Option<Self> {
        if let Some(user) = user {
            return Some(Self::Named(RunAs { user: user.to_owned(), group: group.map(str::to_owned) }));
        }
        match identity {
            TaskIdentity::Own { .. } => None,
            TaskIdentity::User(user) => Some(Self::Named(RunAs { user: user.clone(), group: None })),
            TaskIdentity::TeamUids(uids) => Some(Self::Team(uids.clone(), team.map(str::to_owned))),
        }
    }
}

/// The uids of `task_uids` and which team holds which.
#[derive(Debug)]
pub struct TaskUids {
    pub first: u32,
    pub last: u32,
    path: PathBuf,
    /// Team (`""` for jobs without one) → uid.
    table: Mutex<BTreeMap<String, u32>>,
}

impl TaskUids {
    /// Reads the machine's table at `path` (none yet is an empty table).
    pub fn open(first: u32, last: u32, path: &Path) -> Result<Self, String> {
        let table = read_table(path)?;
        Ok(Self { first, last, path: path.to_owned(), table: Mutex::new(table) })
    }

    /// The account of `team`'s tasks: its uid on this machine (allocated and stored the first
    /// time: the lowest of this worker's range that no team holds and no account of the machine
    /// has), the group of the same number, no supplementary groups, `HOME=/`. A team keeps its
    /// uid even outside this worker's range (another worker, or an older range, gave it); a uid
    /// an account of the machine took since is refused, never run as. Blocking (files and the
    /// user database).
    pub fn account(&self, team: Option<&str>) -> Result<Account, String> {
        let key = team.unwrap_or_default();
        let mut table = self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let uid = match table.get(key) {
            Some(&uid) => uid,
            None => {
                let (uid, now) = self.allocate(key)?;
                *table = now;
                uid
            }
        };
        if let Some(user) = User::from_uid(Uid::from_raw(uid)).ok().flatten() {
            return Err(refused(
                "account_taken",
                format!(
                    "uid {uid} of team {key:?} in {} is now the account {:?} of this machine; its tasks do not run as it: remove the team's entry (a new uid is then allocated)",
                    self.path.display(),
                    user.name
                ),
            ));
        }
        Ok(Account {
            uid: Uid::from_raw(uid),
            gid: Gid::from_raw(uid),
            groups: Vec::new(),
            name: uid.to_string(),
            home: "/".to_owned(),
        })
    }

    /// Gives `key` a uid under the table's lock file, after reading the table again (another
    /// worker of the machine may have given it one, or taken uids): the uid, and the table now.
    fn allocate(&self, key: &str) -> Result<(u32, BTreeMap<String, u32>), String> {
        let _lock = self.lock()?;
        let mut table = read_table(&self.path)?;
        if let Some(&uid) = table.get(key) {
            return Ok((uid, table));
        }
        let taken: std::collections::BTreeSet<u32> = table.values().copied().collect();
        let uid = (self.first..=self.last)
            .find(|&u| !taken.contains(&u) && User::from_uid(Uid::from_raw(u)).ok().flatten().is_none())
            .ok_or_else(|| {
                let why = format!(
                    "no uid of task_uids {}-{} is left for team {key:?} ({} teams hold one on this machine)",
                    self.first,
                    self.last,
                    table.len()
                );
                refused("range_full", why)
            })?;
        table.insert(key.to_owned(), uid);
        self.store(&table)?;
        tracing::info!(team = key, uid, table = %self.path.display(), "task uid allocated to the team");
        Ok((uid, table))
    }

    /// The table's lock file (`…json.lock`, beside it), held exclusively until dropped.
    fn lock(&self) -> Result<nix::fcntl::Flock<std::fs::File>, String> {
        let fail = |e: &dyn std::fmt::Display| format!("task_uids: cannot lock {}: {e}", self.path.display());
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| fail(&e))?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.path.with_extension("json.lock"))
            .map_err(|e| fail(&e))?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| fail(&e))
    }

    /// Writes the table durably (a new file synced to disk, renamed over the old one, the
    /// directory synced): a table lost to a power cut could give a team's uid, and the files
    /// its tasks own, to another team.
    fn store(&self, table: &BTreeMap<String, u32>) -> Result<(), String> {
        use std::io::Write as _;
        let fail = |e: std::io::Error| format!("task_uids: cannot store {}: {e}", self.path.display());
        let dir = self.path.parent().unwrap_or_else(|| Path::new("."));
        std::fs::create_dir_all(dir).map_err(fail)?;
        let tmp = self.path.with_extension("json.tmp");
        let text = serde_json::to_vec_pretty(table).map_err(|e| format!("task_uids: cannot encode the table: {e}"))?;
        let mut file = std::fs::File::create(&tmp).map_err(fail)?;
        file.write_all(&text).and_then(|()| file.sync_all()).map_err(fail)?;
        std::fs::rename(&tmp, &self.path).map_err(fail)?;
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(fail)
    }
}

/// Counts and logs a run refused for want of a team uid; `why` back.
fn refused(reason: &str, why: String) -> String {
    crate::metrics::METRICS.task_uid_refusals.with_label_values(&[reason]).inc();
    tracing::error!(reason, "{why}: the team's shell tasks fail here until this is fixed");
    why
}

/// The table at `path`; none yet is an empty one.
fn read_table(path: &Path) -> Result<BTreeMap<String, u32>, String> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| format!("task_uids: {} is not a table of uids: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(format!("task_uids: cannot read {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table path in a fresh directory.
    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("etcron-task-uids-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d.join("task-uids.json")
    }

    #[test]
    fn ranges_are_checked_naming_the_setting() {
        assert_eq!(parse_range("70000-70999"), Ok((70_000, 70_999)));
        for bad in ["70000", "0-10", "10-5", "a-b", "1-2147483647", "1000-100000"] {
            assert!(parse_range(bad).unwrap_err().starts_with("task_uids:"), "{bad}");
        }
    }

    #[test]
    fn each_team_keeps_its_own_uid_across_restarts() {
        let d = dir("keep");
        let uids = TaskUids::open(70_000, 70_002, &d).unwrap();
        let alpha = uids.account(Some("alpha")).unwrap().uid;
        let beta = uids.account(Some("beta")).unwrap().uid;
        let none = uids.account(None).unwrap().uid;
        assert_ne!(alpha, beta);
        assert_ne!(alpha, none);
        assert_eq!(uids.account(Some("alpha")).unwrap().uid, alpha);
        let err = uids.account(Some("gamma")).unwrap_err();
        assert!(err.contains("no uid of task_uids 70000-70002 is left for team \"gamma\""), "{err}");
        let again = TaskUids::open(70_000, 70_002, &d).unwrap();
        assert_eq!(again.account(Some("beta")).unwrap().uid, beta);
        // A team keeps its uid outside a narrower range; a new team gets one of the range.
        let narrow = TaskUids::open(70_002, 70_003, &d).unwrap();
        assert_eq!(narrow.account(Some("alpha")).unwrap().uid, alpha);
        assert_eq!(narrow.account(Some("gamma")).unwrap().uid.as_raw(), 70_003);
    }

    #[test]
    fn workers_of_one_machine_share_the_table_whatever_their_ranges() {
        let d = dir("shared");
        // Two workers with overlapping ranges, each with its own view of the table.
        let (one, two) = (TaskUids::open(70_000, 70_009, &d).unwrap(), TaskUids::open(70_000, 70_019, &d).unwrap());
        let alpha = one.account(Some("alpha")).unwrap().uid;
        let beta = two.account(Some("beta")).unwrap().uid;
        assert_ne!(alpha, beta, "the second worker read the table again before allocating");
        assert_eq!(two.account(Some("alpha")).unwrap().uid, alpha, "a team has one uid on the machine");
        assert_eq!(one.account(Some("beta")).unwrap().uid, beta);
        // Many at once from both: every team one uid, no uid two teams.
        let teams: Vec<String> = (0..8).map(|i| format!("t{i}")).collect();
        let got: Vec<(String, u32)> = std::thread::scope(|s| {
            let handles: Vec<_> = teams
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let uids = if i % 2 == 0 { &one } else { &two };
                    s.spawn(move || (t.clone(), uids.account(Some(t)).unwrap().uid.as_raw()))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let distinct: std::collections::BTreeSet<u32> = got.iter().map(|(_, u)| *u).collect();
        assert_eq!(distinct.len(), teams.len(), "{got:?}");
        for (team, uid) in &got {
            assert_eq!(one.account(Some(team)).unwrap().uid.as_raw(), *uid);
            assert_eq!(two.account(Some(team)).unwrap().uid.as_raw(), *uid);
        }
    }

    #[test]
    fn a_uid_an_account_took_since_is_refused_and_counted() {
        let d = dir("taken");
        std::fs::create_dir_all(d.parent().unwrap()).unwrap();
        // 65534 is nobody on Debian: a table that gave it to a team before the account existed.
        std::fs::write(&d, br#"{"alpha": 65534}"#).unwrap();
        let uids = TaskUids::open(70_000, 70_001, &d).unwrap();
        let before = crate::metrics::METRICS.task_uid_refusals.with_label_values(&["account_taken"]).get();
        let err = uids.account(Some("alpha")).unwrap_err();
        assert!(err.contains("uid 65534 of team \"alpha\"") && err.contains("nobody"), "{err}");
        assert!(crate::metrics::METRICS.task_uid_refusals.with_label_values(&["account_taken"]).get() > before);
    }

    #[test]
    fn uids_of_existing_accounts_are_skipped() {
        // 65534 is nobody on Debian.
        let uids = TaskUids::open(65_534, 65_535, &dir("skip")).unwrap();
        assert_eq!(uids.account(Some("alpha")).unwrap().uid.as_raw(), 65_535);
    }

    #[test]
    fn settings_resolve_to_one_identity() {
        let d = dir("resolve");
        let root = Uid::from_raw(0);
        let not_root = Uid::from_raw(65_534);
        assert!(matches!(TaskIdentity::resolve(None, None, &d, root), Ok(TaskIdentity::TeamUids(_))));
        let explicit = TaskIdentity::resolve(Some("root".into()), None, &d, root).unwrap();
        assert_eq!(explicit.describe(), "root");
        assert!(matches!(explicit, TaskIdentity::Own { uid: 0, .. }), "root need not switch to root");
        let daemon = TaskIdentity::resolve(Some("daemon".into()), None, &d, root).unwrap();
        assert!(matches!(&daemon, TaskIdentity::User(u) if u == "daemon"), "{daemon:?}");
        let both = TaskIdentity::resolve(Some("root".into()), Some("1-2".into()), &d, root).unwrap_err();
        assert!(both.starts_with("task_uids:"), "{both}");
        assert_eq!(TaskIdentity::resolve(None, None, &d, not_root).unwrap().describe(), "worker's own uid 65534");
        assert!(TaskIdentity::resolve(None, Some("1-2".into()), &d, not_root).unwrap_err().contains("cannot switch"));
        assert!(TaskIdentity::resolve(Some("root".into()), None, &d, not_root).unwrap_err().contains("cannot switch"));
        assert!(TaskIdentity::resolve(Some("nobody".into()), None, &d, not_root).is_ok(), "its own name");
        let team = TaskIdentity::resolve(None, Some("70000-70009".into()), &d, root).unwrap();
        assert_eq!(team.describe(), "uid per team 70000-70009");
    }
}
