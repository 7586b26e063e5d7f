//! etcd's database size, seen before it bites: every master polls etcd's status and alarms
//! every `POLL_EVERY`, exports the figures as metrics, keeps the last reading for `/readyz` and
//! `GET /api/cluster/storage` (the console's banner), and logs once when the database crosses
//! the warning ratio of its quota or an alarm is raised. It also remembers which revision etcd
//! had when, for the compactor (`crate::duties::compactor`).

use std::collections::VecDeque;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use etcd_client::{AlarmAction, AlarmType, Client};
use etcron_common::etcd::EtcdError;
use etcron_common::metrics::gauge;
use prometheus::IntGauge;
use serde::Serialize;

/// How often a master reads etcd's status.
pub const POLL_EVERY: Duration = Duration::from_secs(10);
/// Default share of the quota at which the database size is warned about.
pub const DEFAULT_WARN_RATIO: f64 = 0.7;
/// etcd's own default quota, assumed when etcd does not say (etcd 3.4 does not).
pub const DEFAULT_QUOTA_BYTES: i64 = 2 * 1024 * 1024 * 1024;
/// Revision samples kept for the compactor: an hour of polls.
const MAX_SAMPLES: usize = 360;

struct Gauges {
    db_size: IntGauge,
    in_use: IntGauge,
    quota: IntGauge,
    alarm: IntGauge,
}

static GAUGES: LazyLock<Gauges> = LazyLock::new(|| Gauges {
    db_size: gauge("etcron_etcd_db_size_bytes", "etcd's database file size (its status dbSize)."),
    in_use: gauge("etcron_etcd_db_size_in_use_bytes", "Bytes of etcd's database in use (dbSizeInUse)."),
    quota: gauge(
        "etcron_etcd_db_quota_bytes",
        "etcd's database quota (from its status, or the master's --etcd-quota-bytes when etcd does not say).",
    ),
    alarm: gauge("etcron_etcd_alarm_active", "1 while etcd has an alarm raised (NOSPACE: every write is refused)."),
});

/// What the master knows of etcd's storage, as `/readyz` and the API show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Storage {
    pub db_size_bytes: i64,
    pub in_use_bytes: i64,
    pub quota_bytes: i64,
    pub used_ratio: f64,
    pub revision: i64,
    /// Raised alarms, e.g. `NOSPACE`.
    pub alarms: Vec<String>,
    /// Set when the database is past the warning ratio of its quota or an alarm is raised.
    pub warning: Option<String>,
    /// RFC 3339.
    pub checked_at: String,
}

/// The size warning settings.
#[derive(Debug, Clone, Copy)]
pub struct StorageSettings {
    pub warn_ratio: f64,
    /// Assumed when etcd's status gives no quota.
    pub quota_bytes: i64,
}

/// The last reading and the revision samples, shared by the poller, the routes and the
/// compactor.
#[derive(Clone, Default)]
pub struct StorageWatch(Arc<Mutex<Readings>>);

#[derive(Default)]
struct Readings {
    last: Option<Storage>,
    samples: VecDeque<(Instant, i64)>,
}

impl StorageWatch {
    /// The last reading, if etcd answered one.
    #[must_use]
    pub fn current(&self) -> Option<Storage> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).last.clone()
    }

    /// The newest revision etcd had at least `age` ago, as polled.
    #[must_use]
    pub fn revision_before(&self, age: Duration) -> Option<i64> {
        let readings = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let ages: Vec<(Duration, i64)> = readings.samples.iter().map(|(at, rev)| (now - *at, *rev)).collect();
        revision_target(&ages, age)
    }

    fn record(&self, storage: Storage) {
        let mut readings = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        readings.samples.push_back((Instant::now(), storage.revision));
        while readings.samples.len() > MAX_SAMPLES {
            readings.samples.pop_front();
        }
        readings.last = Some(storage);
    }
}

/// The newest revision among `samples` (age, revision) at least `age` old.
#[must_use]
pub fn revision_target(samples: &[(Duration, i64)], age: Duration) -> Option<i64> {
    samples.iter().filter(|(a, _)| *a >= age).map(|(_, rev)| *rev).max()
}

/// The warning for a database of `db_size` bytes against `quota`, with `alarms` raised.
#[must_use]
pub fn warning(db_size: i64, quota: i64, alarms: &[String], warn_ratio: f64) -> Option<String> {
    if !alarms.is_empty() {
        return Some(format!(
            "etcd alarm raised ({}): etcd refuses every write until it is cleared; compact, defragment and disarm it \
             (docs/operations.md, \"Recovering from NOSPACE\")",
            alarms.join(", ")
        ));
    }
    #[allow(clippy::cast_precision_loss)] // sizes far below 2^52
    let ratio = db_size as f64 / quota.max(1) as f64;
    (ratio >= warn_ratio).then(|| {
        format!(
            "etcd database at {:.0}% of its quota ({} of {}): at 100% etcd refuses every write; compact and defragment \
             it, or raise --quota-backend-bytes (docs/operations.md, \"etcd storage\")",
            ratio * 100.0,
            human_bytes(db_size),
            human_bytes(quota)
        )
    })
}

fn human_bytes(bytes: i64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let b = bytes as f64;
    if b >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1} GiB", b / (1024.0 * 1024.0 * 1024.0))
    } else {
        format!("{:.1} MiB", b / (1024.0 * 1024.0))
    }
}

/// Starts the poller; `gauges`: it sets the process's gauges (the default namespace's poller).
#[must_use]
pub fn start(client: Client, settings: StorageSettings, gauges: bool) -> StorageWatch {
    LazyLock::force(&GAUGES);
    let watch = StorageWatch::default();
    tokio::spawn(poll_loop(client, settings, watch.clone(), gauges));
    watch
}

async fn poll_loop(client: Client, settings: StorageSettings, watch: StorageWatch, gauges: bool) {
    let mut warned = false;
    loop {
        match read(&client, settings).await {
            Ok(storage) => {
                if gauges {
                    let g = &*GAUGES;
                    g.db_size.set(storage.db_size_bytes);
                    g.in_use.set(storage.in_use_bytes);
                    g.quota.set(storage.quota_bytes);
                    g.alarm.set(i64::from(!storage.alarms.is_empty()));
                }
                match (&storage.warning, warned) {
                    (Some(w), false) => tracing::warn!(warning = %w, "etcd storage"),
                    (None, true) => tracing::info!(
                        db_size_bytes = storage.db_size_bytes,
                        quota_bytes = storage.quota_bytes,
                        "etcd storage back under the warning ratio"
                    ),
                    _ => {}
                }
                warned = storage.warning.is_some();
                watch.record(storage);
            }
            Err(e) => tracing::debug!(error = %e, "reading etcd's status failed"),
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// One reading: the status of the member the client talks to, and the cluster's alarms.
async fn read(client: &Client, settings: StorageSettings) -> Result<Storage, String> {
    let mut m = client.maintenance_client();
    let status = etcron_common::etcd::request("status", m.status()).await.map_err(|e| match e {
        EtcdError::Timeout => "timed out".to_owned(),
        EtcdError::Failed(e) => e.to_string(),
    })?;
    let alarms = etcron_common::etcd::request("alarms", m.alarm(AlarmAction::Get, AlarmType::None, None))
        .await
        .map_err(|e| match e {
            EtcdError::Timeout => "timed out".to_owned(),
            EtcdError::Failed(e) => e.to_string(),
        })?;
    let alarms: Vec<String> = alarms.alarms().iter().map(|a| a.alarm().as_str_name().to_owned()).collect();
    let quota = if status.db_size_quota() > 0 { status.db_size_quota() } else { settings.quota_bytes };
    #[allow(clippy::cast_precision_loss)]
    let used_ratio = status.db_size() as f64 / quota.max(1) as f64;
    Ok(Storage {
        db_size_bytes: status.db_size(),
        in_use_bytes: status.raft_used_db_size(),
        quota_bytes: quota,
        used_ratio: (used_ratio * 1000.0).round() / 1000.0,
        revision: status.header().map_or(0, etcd_client::ResponseHeader::revision),
        warning: warning(status.db_size(), quota, &alarms, settings.warn_ratio),
        alarms,
        checked_at: etcron_model::rfc3339_ms(etcron_model::now_ms()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compaction_target_is_the_newest_revision_old_enough() {
        let s = Duration::from_secs;
        let samples = [(s(900), 100), (s(610), 180), (s(590), 200), (s(10), 900)];
        assert_eq!(revision_target(&samples, s(600)), Some(180));
        assert_eq!(revision_target(&samples, s(1000)), None, "nothing that old yet");
        assert_eq!(revision_target(&[], s(600)), None);
    }

    #[test]
    fn the_warning_starts_at_the_ratio_or_with_an_alarm() {
        let gib = 1024 * 1024 * 1024;
        assert_eq!(warning(gib, 2 * gib, &[], 0.7), None);
        let w = warning(1_503_238_554, 2 * gib, &[], 0.7).unwrap();
        assert!(w.contains("70%") && w.contains("1.4 GiB of 2.0 GiB"), "{w}");
        let w = warning(10, 2 * gib, &["NOSPACE".to_owned()], 0.7).unwrap();
        assert!(w.contains("NOSPACE") && w.contains("refuses every write"), "{w}");
        assert!(warning(5, 0, &[], 0.7).is_some(), "no quota: never divides by zero");
    }
}
