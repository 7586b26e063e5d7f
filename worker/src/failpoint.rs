//! Crash points for tests: `ETCRON_FAILPOINT=<name>[,<name>…]`, read once at start, makes the
//! worker kill itself (SIGKILL, as an OOM kill or a crash would) the moment it reaches a named
//! point, so a test can stop it exactly between two steps of the fire path. Unset (as in any
//! deployment), nothing happens at a point but one check of an empty list.

use std::sync::OnceLock;

/// The environment variable naming the armed points (comma-separated).
pub const ENV: &str = "ETCRON_FAILPOINT";

/// A not-run record's claim was closed (`skipped`/`missed`: the claim transaction said won),
/// its record not submitted yet (`not_run::record_not_run`).
pub const NOT_RUN_AFTER_CLOSE: &str = "not_run_after_close";

/// The loss handling closed its first execution of a departure `lost`, its record not
/// submitted yet (`loss::settle_lost`); one hit per handling of a departure.
pub const LOST_AFTER_FIRST_CLOSE: &str = "lost_after_first_close";

/// A survivor ranked among the first `loss::LOSS_HANDLERS` for a departure when it saw it has
/// read what the departed worker held (something), before its first close (`loss::handle`);
/// not hit by one that moved up in rank because those before it died.
pub const LOST_AFTER_READING_HELD: &str = "lost_after_reading_held";

/// A claim the job's lock blocked closed its tick `skipped` (`forbid`), its record not
/// submitted yet (`race::claim`).
pub const SKIPPED_AFTER_CLAIM: &str = "skipped_after_claim";

/// Every point the worker has: a name not listed here is refused at start (a typo would arm
/// nothing and let a test pass for the wrong reason).
pub const POINTS: [&str; 4] =
    [NOT_RUN_AFTER_CLOSE, LOST_AFTER_FIRST_CLOSE, LOST_AFTER_READING_HELD, SKIPPED_AFTER_CLAIM];

static ARMED: OnceLock<Vec<String>> = OnceLock::new();

/// Reads `ETCRON_FAILPOINT` once (before the worker scrubs its environment). An unknown name
/// is an error naming it.
///
/// # Errors
/// When the variable names a point the worker does not have.
pub fn init() -> Result<(), String> {
    let names = parse(&std::env::var(ENV).unwrap_or_default())?;
    let _ = ARMED.set(names);
    Ok(())
}

/// The armed points of `value`, each one of [`POINTS`].
fn parse(value: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = value.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_owned).collect();
    if let Some(bad) = names.iter().find(|n| !POINTS.contains(&n.as_str())) {
        return Err(format!("{ENV}: no failpoint named {bad:?} (the worker has: {})", POINTS.join(", ")));
    }
    Ok(names)
}

/// The points armed in this process (empty unless `ETCRON_FAILPOINT` was set).
#[must_use]
pub fn armed() -> &'static [String] {
    ARMED.get().map_or(&[], Vec::as_slice)
}

/// Kills this process now if `point` is armed.
pub fn hit(point: &str) {
    if armed().iter().any(|n| n == point) {
        tracing::error!(failpoint = point, "failpoint reached: the worker kills itself ({ENV}, a test-only switch)");
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        std::process::abort();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_known_points_can_be_armed() {
        assert_eq!(parse("").unwrap_or_default(), Vec::<String>::new());
        assert_eq!(
            parse(" not_run_after_close , lost_after_first_close").unwrap_or_default(),
            vec![NOT_RUN_AFTER_CLOSE.to_owned(), LOST_AFTER_FIRST_CLOSE.to_owned()]
        );
        let err = parse("not_run_after_clos").unwrap_err();
        assert!(err.contains("\"not_run_after_clos\"") && err.contains(NOT_RUN_AFTER_CLOSE), "{err}");
    }
}
