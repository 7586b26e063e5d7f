//! Stored job specs this version refuses, seen before anyone wonders why a job stopped: a job
//! whose spec a worker cannot read does not run (an upgrade whose rules are stricter leaves such
//! jobs behind; so does a value written around the API). Every master reads every job spec at
//! start and every `spec_check_every` (5 min) after, keeps the refused ones for `GET /api/cluster/specs` (the
//! console's banner) and `/readyz` (their count), exports the count as
//! `etcron_master_unschedulable_jobs`, and logs when the set changes. `etcronctl jobs check`
//! does the same check with the rules of the etcronctl that runs it (before an upgrade).
//!
//! The specs are read a page at a time, every page at the first one's revision (one snapshot,
//! so the refused list is exact), each page sized to hold about [`PAGE_BYTES`] from the size of
//! the specs before it: few pages (etcd 3.4 counts every key after a page's start to answer it),
//! and never every spec in memory, nor in one answer, at once.

use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use etcd_client::Client;
use etcron_common::etcd::list::Pages;
use etcron_common::metrics::gauge;
use etcron_model::keys::{Key, Keys};
use etcron_model::spec::JobSpec;
use prometheus::IntGauge;
use serde::Serialize;

/// How often a master checks every stored spec, by default (`spec_check_every`).
pub const CHECK_EVERY: Duration = Duration::from_secs(300);
/// How long a check waits before etcd is tried again after it failed.
const RETRY_AFTER: Duration = Duration::from_secs(10);
static UNSCHEDULABLE: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "etcron_master_unschedulable_jobs",
        "Stored job specs this master's version refuses: such jobs do not run (GET /api/cluster/specs names them).",
    )
});

/// A stored spec this version refuses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refused {
    pub job: String,
    /// The team the stored value names, when it can be read.
    pub team: Option<String>,
    /// The field, when the error names one.
    pub field: Option<String>,
    pub error: String,
}

/// The last check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Checked {
    pub checked: usize,
    /// Jobs checked per team (`None`: without a team), so a caller is told only of its own.
    #[serde(skip)]
    pub per_team: std::collections::BTreeMap<Option<String>, usize>,
    pub refused: Vec<Refused>,
    /// RFC 3339.
    pub checked_at: String,
}

impl Checked {
    /// What `/readyz` says: the count and a warning, never the names (it is open to anyone).
    #[must_use]
    pub fn warning(&self) -> Option<String> {
        (!self.refused.is_empty()).then(|| {
            format!(
                "{} stored job specs are refused by this version and do not run (etcronctl jobs check names them)",
                self.refused.len()
            )
        })
    }
}

/// The last check, shared with the routes.
#[derive(Debug, Clone, Default)]
pub struct SpecWatch(Arc<Mutex<Option<Checked>>>);

impl SpecWatch {
    #[must_use]
    pub fn current(&self) -> Option<Checked> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn record(&self, checked: Checked) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(checked);
    }
}

/// Starts the check loop: now, then every `every`; `gauge`: it sets the process's gauge (the
/// default namespace's loop).
#[must_use]
pub fn start(client: Client, keys: Keys, every: Duration, gauge: bool) -> SpecWatch {
    let watch = SpecWatch::default();
    let shared = watch.clone();
    tokio::spawn(async move {
        let mut before: Option<Vec<String>> = None;
        loop {
            match check(&client, &keys).await {
                Ok(checked) => {
                    if gauge {
                        UNSCHEDULABLE.set(i64::try_from(checked.refused.len()).unwrap_or(i64::MAX));
                    }
                    let names: Vec<String> = checked.refused.iter().map(|r| r.job.clone()).collect();
                    if before.as_ref() != Some(&names) && !names.is_empty() {
                        tracing::warn!(count = names.len(), jobs = ?names, "stored job specs this version refuses: these jobs do not run (etcronctl jobs check names each field)");
                    }
                    before = Some(names);
                    shared.record(checked);
                    tokio::time::sleep(every).await;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "checking the stored job specs: etcd did not answer; trying again");
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
        }
    });
    watch
}

/// Reads every job spec, a page at a time at one revision ([`Pages`]), and keeps those
/// `JobSpec::from_json` refuses.
async fn check(client: &Client, keys: &Keys) -> Result<Checked, etcron_common::etcd::EtcdError> {
    let prefix = keys.jobs_prefix();
    let mut pages = Pages::new(client, "check_specs", prefix.as_bytes(), 0, etcron_common::etcd::REQUEST_TIMEOUT);
    let mut per_team = std::collections::BTreeMap::new();
    let mut refused = Vec::new();
    while let Some(page) = pages.next().await? {
        for item in page {
            let Some(Key::Job(job)) = keys.parse(item.key()) else { continue };
            *per_team.entry(team_of(item.value())).or_default() += 1;
            if let Some(r) = refusal(job, item.value()) {
                refused.push(r);
            }
        }
    }
    let checked = per_team.values().sum();
    Ok(Checked { checked, per_team, refused, checked_at: etcron_model::rfc3339_ms(etcron_model::now_ms()) })
}

/// The team a stored value names, when it can be read.
fn team_of(value: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Team {
        team: Option<String>,
    }
    serde_json::from_slice::<Team>(value).ok().and_then(|t| t.team)
}

/// Why the stored value of `job` is refused, if it is.
fn refusal(job: String, value: &[u8]) -> Option<Refused> {
    let e = JobSpec::from_json(value).err()?;
    Some(Refused { job, team: team_of(value), field: e.field, error: e.message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_spec_names_its_job_team_and_field() {
        let ok = br#"{"schedule":"0 9 * * sat-sun","task":{"kind":"shell","command":"true"}}"#;
        assert_eq!(refusal("a".into(), ok), None);
        let old = br#"{"team":"ops","schedule":"0 0 ?,1 * 5","task":{"kind":"shell","command":"true"}}"#;
        let r = refusal("b".into(), old).expect("refused");
        assert_eq!((r.team.as_deref(), r.field.as_deref()), (Some("ops"), Some("schedule")));
        assert!(r.error.contains("stands alone"), "{}", r.error);
        let garbage = refusal("c".into(), b"not json").expect("refused");
        assert_eq!((garbage.team, garbage.field.is_some()), (None, false));
        let checked = Checked { checked: 3, per_team: Default::default(), refused: vec![r], checked_at: String::new() };
        assert!(checked.warning().is_some_and(|w| w.starts_with("1 stored job specs")));
    }
}
