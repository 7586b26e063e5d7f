//! Claims this worker has seen written, learned from a watch on `{ns}/claims/` (from the current
//! revision: no list). A worker ranked after the first for a tick looks here before it races:
//! a claim seen taken costs etcd nothing, where a read per tick cost a Range. What the watch
//! has not delivered yet (it lags, or it was broken and restarted) is read from etcd as before,
//! so a missing entry is never taken as "free" — it only costs the read the watch saves.

use etcron_common::hash::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use etcd_client::{Client, EventType, WatchFilterType, WatchOptions};
use etcron_common::backoff::Backoff;
use tokio::sync::watch;

/// How long a seen claim is remembered: far longer than any rank's stagger before it looks.
const REMEMBER: Duration = Duration::from_secs(120);

/// Most claims remembered; past it the oldest half is forgotten (they are then read from etcd).
const MAX_REMEMBERED: usize = 1_000_000;

/// Claim keys seen written, with when.
#[derive(Debug, Default)]
pub struct Taken {
    seen: Mutex<HashMap<Vec<u8>, Instant>>,
}

impl Taken {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Instant>> {
        self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the claim `key` was seen written.
    #[must_use]
    pub fn contains(&self, key: &str) -> bool {
        self.lock().contains_key(key.as_bytes())
    }

    fn insert(&self, keys: impl Iterator<Item = Vec<u8>>) {
        let now = Instant::now();
        let mut seen = self.lock();
        for key in keys {
            seen.entry(key).or_insert(now);
        }
        if seen.len() > MAX_REMEMBERED {
            forget_older_half(&mut seen);
        }
    }

    /// Forgets claims seen more than `age` ago.
    fn prune(&self, age: Duration) {
        self.lock().retain(|_, at| at.elapsed() < age);
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn forget_older_half(seen: &mut HashMap<Vec<u8>, Instant>) {
    let mut times: Vec<Instant> = seen.values().copied().collect();
    let mid = times.len() / 2;
    let (_, &mut cut, _) = times.select_nth_unstable(mid);
    seen.retain(|_, at| *at > cut);
}

/// Follows claim creations under `prefix` into `taken` until `stop` flips. On any watch error it
/// starts again from the current revision (what it missed is read from etcd when needed).
pub async fn follow(client: Client, prefix: String, taken: std::sync::Arc<Taken>, mut stop: watch::Receiver<bool>) {
    let mut prune = tokio::time::interval(Duration::from_secs(10));
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        let mut watcher = client.watch_client();
        let opts = WatchOptions::new().with_prefix().with_filters([WatchFilterType::NoDelete]);
        let started = etcron_common::etcd::request("watch", watcher.watch(prefix.clone(), Some(opts))).await;
        let mut stream = match started {
            Ok(s) => s,
            _ => {
                tracing::debug!("watching claims could not start; retrying");
                if !backoff.sleep(&mut stop).await {
                    return;
                }
                continue;
            }
        };
        backoff.reset();
        loop {
            let msg = tokio::select! {
                _ = stop.changed() => return,
                _ = prune.tick() => { taken.prune(REMEMBER); continue; }
                m = stream.message() => m,
            };
            match msg {
                Ok(Some(resp)) if !resp.canceled() => {
                    let created = resp
                        .events()
                        .iter()
                        .filter(|e| e.event_type() == EventType::Put)
                        .filter_map(|e| e.kv())
                        .filter(|kv| kv.version() == 1)
                        .map(|kv| kv.key().to_vec());
                    taken.insert(created);
                }
                _ => break,
            }
        }
        if !backoff.sleep(&mut stop).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_what_it_saw_until_pruned() {
        let taken = Taken::default();
        taken.insert([b"/ns/claims/a/1".to_vec(), b"/ns/claims/b/1".to_vec()].into_iter());
        assert!(taken.contains("/ns/claims/a/1"));
        assert!(!taken.contains("/ns/claims/a/2"));
        taken.prune(Duration::from_secs(3600));
        assert_eq!(taken.len(), 2);
        taken.prune(Duration::ZERO);
        assert!(taken.is_empty());
    }

    #[test]
    fn past_the_bound_the_older_half_is_forgotten() {
        let mut seen = HashMap::default();
        let start = Instant::now();
        for i in 0..10u64 {
            seen.insert(i.to_be_bytes().to_vec(), start + Duration::from_millis(i));
        }
        forget_older_half(&mut seen);
        assert_eq!(seen.len(), 4);
        assert!(seen.contains_key(9u64.to_be_bytes().as_slice()));
        assert!(!seen.contains_key(0u64.to_be_bytes().as_slice()));
    }
}
