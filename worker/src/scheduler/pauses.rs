//! The scheduler's mirror of `{ns}/paused/`, kept in the `Context` for every phase to read. The
//! key's existence is the pause: a value that does not parse is logged and counts as a pause by
//! someone unknown (fail safe).

use etcron_common::hash::HashMap;
use etcron_model::keys::Key;
use etcron_model::stored::Pause;

use crate::cluster::watcher::{Kv, Mirror};
use crate::context::Context;

/// The `Context`'s pauses seen as the mirror of `{ns}/paused/`.
pub(super) struct Pauses<'a>(pub(super) &'a Context);

impl Mirror for Pauses<'_> {
    fn listed(&mut self, kvs: Vec<Kv>, revision: i64) {
        let mut all = HashMap::default();
        for kv in kvs {
            if let Some((job, pause)) = self.parse(&kv) {
                all.insert(job, pause);
            }
        }
        tracing::info!(paused = all.len(), revision, "paused jobs listed");
        self.0.paused.replace(all);
    }

    fn put(&mut self, kv: Kv) {
        if let Some((job, pause)) = self.parse(&kv) {
            tracing::info!(job = %job, by = pause.by.as_deref().unwrap_or("unknown"), reason = pause.reason.as_deref().unwrap_or(""), mod_revision = kv.mod_revision, "job paused");
            self.0.paused.set(&job, Some(pause));
        }
    }

    fn deleted(&mut self, key: Vec<u8>, mod_revision: i64) {
        if let Some(Key::Paused(job)) = self.0.keys.parse(&key) {
            if self.0.paused.set(&job, None) {
                tracing::info!(job = %job, mod_revision, "job resumed");
            }
        }
    }
}

impl Pauses<'_> {
    /// A key under `{ns}/paused/` as (job, pause); `None` (logged) when the key names no job.
    fn parse(&self, kv: &Kv) -> Option<(String, Pause)> {
        let Some(Key::Paused(job)) = self.0.keys.parse(&kv.key) else {
            tracing::error!(
                key = %String::from_utf8_lossy(&kv.key),
                "key under the paused prefix is not a job's pause (names match ^[a-z0-9][a-z0-9._-]{{0,127}}$); ignored"
            );
            return None;
        };
        let pause = Pause::from_bytes(&kv.value).unwrap_or_else(|e| {
            tracing::error!(
                job = %job,
                key = %String::from_utf8_lossy(&kv.key),
                error = %e,
                "pause in etcd is malformed; the job counts as paused (by someone unknown) all the same"
            );
            Pause::default()
        });
        Some((job, pause))
    }
}
