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

use etcd_client::{Client, GetOptions, GetResponse, KvClient};
use etcron_common::metrics::gauge;
use etcron_model::keys::{Key, Keys};
use etcron_model::spec::JobSpec;
use prometheus::IntGauge;
use serde::Serialize;

/// How often a master checks every stored spec, by default (`spec_check_every`).
pub const CHECK_EVERY: Duration = Duration::from_secs(300);
/// How long a check waits before etcd is tried again after it failed.
const RETRY_AFTER: Duration = Duration::from_secs(10);
/// Bytes of stored specs a page of the check aims at.
pub const PAGE_BYTES: usize = 4 * 1024 * 1024;
/// Keys the first page reads, before the size of the stored specs is known.
pub const FIRST_PAGE_KEYS: i64 = 1_000;
/// Fewest keys a page reads: this many of the largest specs (64 KiB) fit in [`PAGE_BYTES`].
const MIN_PAGE_KEYS: i64 = 64;
/// Most keys a page reads.
const MAX_PAGE_KEYS: i64 = 50_000;
/// Largest answer the check decodes (gRPC's default is 4 MiB): a page sized from smaller specs
/// before it may hold more than [`PAGE_BYTES`]; one over this is read again in smaller pages.
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

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

/// Starts the check loop: now, then every `every`.
#[must_use]
pub fn start(client: Client, keys: Keys, every: Duration) -> SpecWatch {
    let watch = SpecWatch::default();
    let shared = watch.clone();
    tokio::spawn(async move {
        let mut before: Option<Vec<String>> = None;
        loop {
            match check(&client, &keys).await {
                Ok(checked) => {
                    UNSCHEDULABLE.set(i64::try_from(checked.refused.len()).unwrap_or(i64::MAX));
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

/// Reads every job spec, a page at a time at one revision, and keeps those
/// `JobSpec::from_json` refuses.
async fn check(client: &Client, keys: &Keys) -> Result<Checked, etcron_common::etcd::EtcdError> {
    let mut kv = client.kv_client().max_decoding_message_size(MAX_ANSWER_BYTES);
    let prefix = keys.jobs_prefix();
    let end = etcron_model::keys::prefix_end(prefix.as_bytes());
    let mut per_team = std::collections::BTreeMap::new();
    let mut refused = Vec::new();
    let (mut from, mut limit, mut revision) = (prefix.into_bytes(), FIRST_PAGE_KEYS, 0);
    loop {
        let (resp, read) = page(&mut kv, &from, &end, limit, revision).await?;
        if revision == 0 {
            revision = resp.header().map_or(0, |h| h.revision());
        }
        let mut bytes = 0;
        for item in resp.kvs() {
            bytes += item.key().len() + item.value().len();
            let Some(Key::Job(job)) = keys.parse(item.key()) else { continue };
            *per_team.entry(team_of(item.value())).or_default() += 1;
            if let Some(r) = refusal(job, item.value()) {
                refused.push(r);
            }
        }
        match resp.kvs().last() {
            Some(last) if resp.more() => {
                from = last.key().to_vec();
                from.push(0);
                limit = next_limit(read.min(resp.kvs().len()), bytes);
            }
            _ => break,
        }
    }
    let checked = per_team.values().sum();
    Ok(Checked { checked, per_team, refused, checked_at: etcron_model::rfc3339_ms(etcron_model::now_ms()) })
}

/// The keys from `from` (before `end`), at most `limit` of them at `revision` (0: now), and how
/// many were asked for: an answer larger than the client decodes is asked for again in a
/// quarter of the keys.
async fn page(
    kv: &mut KvClient,
    from: &[u8],
    end: &[u8],
    mut limit: i64,
    revision: i64,
) -> Result<(GetResponse, usize), etcron_common::etcd::EtcdError> {
    loop {
        let opts = GetOptions::new().with_range(end.to_vec()).with_limit(limit).with_revision(revision);
        match etcron_common::etcd::request("check_specs", kv.get(from.to_vec(), Some(opts))).await {
            Err(etcron_common::etcd::EtcdError::Failed(e))
                if etcron_common::etcd::too_large(&e) && limit > MIN_PAGE_KEYS =>
            {
                tracing::info!(keys = limit, error = %e, "a page of job specs was too large to read; reading fewer keys");
                limit = (limit / 4).max(MIN_PAGE_KEYS);
            }
            other => return other.map(|resp| (resp, usize::try_from(limit).unwrap_or(usize::MAX))),
        }
    }
}

/// Keys the page after one of `keys` keys and `bytes` bytes reads: about [`PAGE_BYTES`] of
/// specs of that average size.
fn next_limit(keys: usize, bytes: usize) -> i64 {
    let per_key = (bytes / keys.max(1)).max(1);
    i64::try_from(PAGE_BYTES / per_key).unwrap_or(MAX_PAGE_KEYS).clamp(MIN_PAGE_KEYS, MAX_PAGE_KEYS)
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

    #[test]
    fn pages_hold_about_four_mib_of_specs_of_the_size_seen() {
        // Specs of 200 bytes: 20 971 a page; of 4 KiB: 1 024; of the largest (64 KiB), 64.
        assert_eq!(next_limit(1_000, 200_000), 20_971);
        assert_eq!(next_limit(100, 100 * 4096), 1_024);
        assert_eq!(next_limit(10, 10 * 65_536), MIN_PAGE_KEYS);
        assert_eq!(next_limit(10, 10 * 2 * 65_536), MIN_PAGE_KEYS, "never fewer than the smallest page");
        assert_eq!(next_limit(1_000, 10_000), MAX_PAGE_KEYS, "tiny values: the most keys a page reads");
        assert_eq!(next_limit(0, 0), MAX_PAGE_KEYS);
        // The smallest page of the largest specs (keys included) decodes within the limit.
        let largest = usize::try_from(MIN_PAGE_KEYS).unwrap() * (etcron_model::spec::MAX_SPEC_BYTES + 1024);
        assert!(largest < MAX_ANSWER_BYTES);
    }
}
