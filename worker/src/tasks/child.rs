//! How a shell task's process is set up between fork and exec: its limits and its account,
//! applied by the worker's own spawn or by the task's keeper (one rule for both).

use nix::sys::resource::{setrlimit, Resource};

use crate::tasks::run_as::{self, Account};

/// What the keeper sets up for the shell, as the worker decided it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChildSetup {
    /// `(resource, soft, hard)`.
    pub rlimits: Vec<(Resource, u64, u64)>,
    pub account: Option<Account>,
}

/// Sets `rlimits` and takes on `account`, in a forked child before it execs the shell (the
/// worker's own, or a keeper's). Limits come first: the hard ones may be raised only while the
/// child is still root. Only setrlimit(2), setgroups(2), setgid(2) and setuid(2): safe between
/// fork and exec (a failure is the raw errno; nothing allocates).
pub fn set_up(rlimits: &[(Resource, u64, u64)], account: Option<&Account>) -> std::io::Result<()> {
    for &(resource, soft, hard) in rlimits {
        setrlimit(resource, soft, hard)?;
    }
    if let Some(account) = account {
        run_as::become_account(account)?;
    }
    Ok(())
}
