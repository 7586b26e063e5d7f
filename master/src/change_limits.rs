//! What job changes may store in etcd: a budget of bytes per token and per team (token
//! buckets in bytes, kept by each master process), a quota of jobs per team (counted from
//! etcd at save time by the job store), and the bytes of saved versions kept per job.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Default bytes a token (and a team) may write per second on average.
pub const DEFAULT_CHANGE_BYTES_RATE: u64 = 256 * 1024;
/// Default bytes a token (and a team) may write at once before the rate applies.
pub const DEFAULT_CHANGE_BYTES_BURST: u64 = 64 * 1024 * 1024;
/// Default most bytes of saved versions kept per job.
pub const DEFAULT_MAX_HISTORY_BYTES_PER_JOB: u64 = 512 * 1024;
/// Bytes a saved change writes besides its spec and its saved version: keys, the version's
/// record, a new job's catch-up state.
pub const CHANGE_OVERHEAD_BYTES: u64 = 512;

/// The limits, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeLimitSettings {
    pub bytes_rate: u64,
    pub bytes_burst: u64,
    /// `None`: no quota.
    pub max_jobs_per_team: Option<u64>,
    pub max_history_bytes_per_job: u64,
}

impl Default for ChangeLimitSettings {
    fn default() -> Self {
        Self {
            bytes_rate: DEFAULT_CHANGE_BYTES_RATE,
            bytes_burst: DEFAULT_CHANGE_BYTES_BURST,
            // Off unless set: each save into a team then reads every job to count them.
            max_jobs_per_team: None,
            max_history_bytes_per_job: DEFAULT_MAX_HISTORY_BYTES_PER_JOB,
        }
    }
}

impl ChangeLimitSettings {
    /// The settings, checked: each error names its setting.
    ///
    /// # Errors
    /// A rate or burst under 1 KiB, a job quota of 0, or a history cap under one spec's limit.
    pub fn checked(self) -> Result<Self, String> {
        if self.bytes_rate < 1024 {
            return Err(format!("change_bytes_rate: must be at least 1024 bytes per second, got {}", self.bytes_rate));
        }
        if self.bytes_burst < 1024 {
            return Err(format!("change_bytes_burst: must be at least 1024 bytes, got {}", self.bytes_burst));
        }
        if self.max_jobs_per_team == Some(0) {
            return Err(
                "max_jobs_per_team: must be at least 1 (leave it out, or 0 in the file, for no quota)".to_owned()
            );
        }
        let one_spec = etcron_model::spec::MAX_SPEC_BYTES as u64;
        if self.max_history_bytes_per_job < one_spec {
            return Err(format!(
                "max_history_bytes_per_job: must be at least {one_spec} (one spec's limit), got {}",
                self.max_history_bytes_per_job
            ));
        }
        Ok(self)
    }
}

/// The limits and the byte budgets of this master process.
#[derive(Debug)]
pub struct ChangeLimits {
    pub settings: ChangeLimitSettings,
    budget: ByteBudget,
}

impl Default for ChangeLimits {
    fn default() -> Self {
        Self::new(ChangeLimitSettings::default())
    }
}

impl ChangeLimits {
    #[must_use]
    pub fn new(settings: ChangeLimitSettings) -> Self {
        #[allow(clippy::cast_precision_loss)] // rates are far below 2^52
        let budget = ByteBudget::new(settings.bytes_rate as f64, settings.bytes_burst as f64);
        Self { settings, budget }
    }

    /// Takes `bytes` from the budget of the token `caller` and of each team in `teams`, all or
    /// nothing; refused (429), with the budget that is short, when one has not enough.
    ///
    /// # Errors
    /// [`Throttled`] naming the token's or the team's budget and when to retry.
    pub fn charge(&self, caller: &str, teams: &[String], bytes: u64) -> Result<(), Throttled> {
        if bytes == 0 {
            return Ok(());
        }
        let mut buckets = vec![format!("token {caller:?}")];
        buckets.extend(teams.iter().map(|t| format!("team {t:?}")));
        #[allow(clippy::cast_precision_loss)]
        let cost = bytes as f64;
        self.budget.take(&buckets, cost, Instant::now()).map_err(|(bucket, wait)| {
            crate::metrics::METRICS.change_refusals.with_label_values(&["byte_budget"]).inc();
            tracing::warn!(%bucket, bytes, "change refused: byte budget spent");
            Throttled {
                message: format!(
                    "the change byte budget of {bucket} is spent ({} bytes a second, {} at once: the master's \
                     change_bytes_rate and change_bytes_burst); this change writes {bytes} bytes",
                    self.settings.bytes_rate, self.settings.bytes_burst
                ),
                wait,
            }
        })
    }
}

/// A change refused by a byte budget: `429 change_budget` with `Retry-After`.
#[derive(Debug, Clone)]
pub struct Throttled {
    pub message: String,
    pub wait: Duration,
}

impl Throttled {
    /// The seconds to wait, as `Retry-After` and the message say them (at least 1).
    fn secs(&self) -> f64 {
        self.wait.as_secs_f64().ceil().max(1.0)
    }

    /// The answer without its `Retry-After` header.
    #[must_use]
    pub(crate) fn error(&self) -> ApiError {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: "change_budget",
            message: format!("{}; retry in {} s", self.message, self.secs()),
            field: None,
        }
    }
}

impl IntoResponse for Throttled {
    fn into_response(self) -> Response {
        let secs = self.secs();
        let mut resp = self.error().into_response();
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        resp
    }
}

/// Token buckets in bytes, by name. A cost larger than the burst passes only from a full
/// bucket (and empties it), so no single request is refused for ever. Idle buckets are
/// dropped once the map grows past its bound.
#[derive(Debug)]
struct ByteBudget {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

/// Buckets kept at once before full ones are dropped.
const MAX_BUCKETS: usize = 10_000;

impl ByteBudget {
    fn new(per_second: f64, burst: f64) -> Self {
        Self { per_second: per_second.max(1.0), burst: burst.max(1.0), buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes `cost` from every bucket in `names` when each holds enough, or names the first
    /// that does not and how long until it will.
    fn take(&self, names: &[String], cost: f64, now: Instant) -> Result<(), (String, Duration)> {
        let cost = cost.min(self.burst);
        let mut buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= MAX_BUCKETS {
            let (burst, rate) = (self.burst, self.per_second);
            buckets.retain(|_, (bytes, at)| *bytes + now.saturating_duration_since(*at).as_secs_f64() * rate < burst);
        }
        let mut levels = Vec::with_capacity(names.len());
        for name in names {
            let level = buckets.get(name).map_or(self.burst, |(bytes, at)| {
                (bytes + now.saturating_duration_since(*at).as_secs_f64() * self.per_second).min(self.burst)
            });
            if level < cost {
                return Err((name.clone(), Duration::from_secs_f64((cost - level) / self.per_second)));
            }
            levels.push(level);
        }
        for (name, level) in names.iter().zip(levels) {
            buckets.insert(name.clone(), (level - cost, now));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_budget_allows_its_burst_then_its_rate_on_every_bucket_it_names() {
        let budget = ByteBudget::new(1000.0, 10_000.0);
        let t0 = Instant::now();
        budget.take(&names(&["token a", "team x"]), 6000.0, t0).unwrap();
        // The token has 4000 left; the team too, so a second token of the team is refused.
        let (short, wait) = budget.take(&names(&["token b", "team x"]), 5000.0, t0).unwrap_err();
        assert_eq!(short, "team x");
        assert_eq!(wait, Duration::from_secs(1), "1000 bytes missing at 1000 a second");
        // Nothing was taken from token b by the refusal: it still has its whole burst.
        budget.take(&names(&["token b", "team y"]), 10_000.0, t0).unwrap();
        // After a second, team x has 5000.
        budget.take(&names(&["token c", "team x"]), 5000.0, t0 + Duration::from_secs(1)).unwrap();
        assert!(budget.take(&names(&["team x"]), 1.0, t0 + Duration::from_secs(1)).is_err());
        // Refills stop at the burst.
        let later = t0 + Duration::from_secs(3600);
        budget.take(&names(&["team x"]), 10_000.0, later).unwrap();
        assert!(budget.take(&names(&["team x"]), 1.0, later).is_err());
    }

    #[test]
    fn a_cost_over_the_burst_passes_only_from_a_full_bucket() {
        let budget = ByteBudget::new(100.0, 1000.0);
        let t0 = Instant::now();
        budget.take(&names(&["a"]), 5000.0, t0).unwrap();
        let (_, wait) = budget.take(&names(&["a"]), 5000.0, t0).unwrap_err();
        assert_eq!(wait, Duration::from_secs(10), "the whole burst at 100 bytes a second");
    }

    #[test]
    fn settings_are_checked_by_name() {
        assert!(ChangeLimitSettings::default().checked().is_ok());
        let low = ChangeLimitSettings { bytes_rate: 10, ..Default::default() }.checked().unwrap_err();
        assert!(low.contains("change_bytes_rate"), "{low}");
        let zero = ChangeLimitSettings { max_jobs_per_team: Some(0), ..Default::default() }.checked().unwrap_err();
        assert!(zero.contains("max_jobs_per_team"), "{zero}");
        let small = ChangeLimitSettings { max_history_bytes_per_job: 10, ..Default::default() }.checked().unwrap_err();
        assert!(small.contains("max_history_bytes_per_job"), "{small}");
    }

    #[test]
    fn a_refusal_is_a_429_with_retry_after() {
        let limits =
            ChangeLimits::new(ChangeLimitSettings { bytes_rate: 1024, bytes_burst: 4096, ..Default::default() });
        limits.charge("pay-admin", &names(&["payments"]), 4096).unwrap();
        let refused = limits.charge("other", &names(&["payments"]), 2048).unwrap_err();
        assert!(refused.message.contains("team \"payments\"") && refused.message.contains("change_bytes_rate"));
        let resp = refused.into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "2");
        limits.charge("other", &names(&["search"]), 2048).unwrap();
    }
}
