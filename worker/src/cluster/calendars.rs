//! Skip calendars as this worker knows them (a mirror of `{ns}/calendars/`), and the rule a
//! tick follows: on a date one of its job's `skip_calendars` lists, it is recorded `skipped`
//! naming the calendar instead of run.

use etcron_common::hash::HashMap;
use std::sync::{Arc, PoisonError, RwLock, RwLockWriteGuard};

use etcron_model::calendar::{skip_reason, Calendar};
use etcron_model::keys::{Key, Keys};
use etcron_model::spec::JobSpec;
use etcron_model::UnixMs;

use crate::cluster::watcher::{Kv, Mirror, Update};
use crate::metrics::METRICS;

/// The calendars by name.
#[derive(Debug, Default)]
pub struct CalendarTable {
    inner: RwLock<HashMap<String, Arc<Calendar>>>,
}

/// The table, write-locked, as the mirror of `{ns}/calendars/`.
struct Calendars<'a> {
    keys: &'a Keys,
    inner: RwLockWriteGuard<'a, HashMap<String, Arc<Calendar>>>,
}

impl Mirror for Calendars<'_> {
    fn listed(&mut self, kvs: Vec<Kv>, revision: i64) {
        *self.inner = kvs.iter().filter_map(|kv| parse(self.keys, kv)).collect();
        tracing::info!(calendars = self.inner.len(), revision, "skip calendars listed");
    }

    fn put(&mut self, kv: Kv) {
        if let Some((name, calendar)) = parse(self.keys, &kv) {
            tracing::info!(calendar = %name, mod_revision = kv.mod_revision, "skip calendar saved");
            self.inner.insert(name, calendar);
        }
    }

    fn deleted(&mut self, key: Vec<u8>, mod_revision: i64) {
        if let Some(Key::Calendar(name)) = self.keys.parse(&key) {
            tracing::info!(calendar = %name, mod_revision, "skip calendar deleted");
            self.inner.remove(&name);
        }
    }
}

impl CalendarTable {
    /// Applies a change of `{ns}/calendars/`. A value that does not parse is logged and leaves
    /// the calendar out (its job's ticks then run, with a warning each).
    pub fn apply(&self, keys: &Keys, update: Update) {
        let inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        update.apply(&mut Calendars { keys, inner });
    }

    /// Why the tick of `job` (`spec`) at `tick_ms` is skipped, when a calendar it names lists
    /// the tick's date. A calendar this worker does not know is said loudly and skips nothing.
    pub fn skip_reason(&self, job: &str, spec: &JobSpec, tick_ms: UnixMs) -> Option<String> {
        if spec.skip_calendars.is_empty() {
            return None;
        }
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        for name in &spec.skip_calendars {
            match inner.get(name) {
                Some(calendar) => {
                    if let Some(day) = calendar.covers(tick_ms) {
                        return Some(skip_reason(name, day));
                    }
                }
                None => {
                    METRICS.calendar_missing.inc();
                    tracing::warn!(job, calendar = %name, tick_ms, "job names a skip calendar that does not exist; the tick is not skipped for it");
                }
            }
        }
        None
    }
}

fn parse(keys: &Keys, kv: &Kv) -> Option<(String, Arc<Calendar>)> {
    let Some(Key::Calendar(name)) = keys.parse(&kv.key) else { return None };
    match serde_json::from_slice::<Calendar>(&kv.value) {
        Ok(calendar) => Some((name, Arc::new(calendar))),
        Err(e) => {
            tracing::error!(calendar = %name, error = %e, "skip calendar in etcd is malformed; ignored until it is saved again");
            None
        }
    }
}
