//! Resource pools as this worker sees them: one mirror of `{ns}/pool` covers the pools
//! (`{ns}/pools/`), their held slots (`{ns}/poolslots/`) and their queues (`{ns}/poolwait/`).
//! The claim transaction decides who takes a slot; this mirror only says which slots look
//! free (so a claim names those), whether a waiting tick's turn may have come, and wakes the
//! waiting ticks when anything of a pool changes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{PoisonError, RwLock};

use etcron_common::hash::HashMap;
use etcron_model::keys::{Key, Keys};
use etcron_model::pool::{HeldSlot, Pool, Waiting};
use tokio::sync::watch;

use crate::cluster::watcher::{Kv, Mirror, Update};

/// Most entries ahead of a waiting tick [`PoolTable::turn`] answers.
const AHEAD_SHOWN: usize = 8;

/// One pool: its size, the slots held and the ticks waiting (by queue key, in queue order).
#[derive(Debug, Default, Clone)]
pub struct PoolState {
    /// `None` while the pool is not defined (deleted, or not yet seen).
    pub slots: Option<u32>,
    pub held: BTreeMap<u32, HeldSlot>,
    /// Queue key → (the key's mod revision, the waiting tick).
    pub waiting: BTreeMap<String, (i64, Waiting)>,
}

/// Every pool by name, and a counter that moves on each change (what waiting ticks watch).
#[derive(Debug)]
pub struct PoolTable {
    inner: RwLock<HashMap<String, PoolState>>,
    changed: watch::Sender<u64>,
    /// Slots this worker's claims in flight name, per pool: not offered to another claim of
    /// this worker until that claim's answer is in.
    pending: RwLock<HashMap<String, BTreeSet<u32>>>,
    /// The executions this worker waits with in a pool's queue now.
    waiting_here: RwLock<etcron_common::hash::HashSet<String>>,
}

impl Default for PoolTable {
    fn default() -> Self {
        Self {
            inner: RwLock::default(),
            changed: watch::channel(0).0,
            pending: RwLock::default(),
            waiting_here: RwLock::default(),
        }
    }
}

/// What a claim of `n` slots of a pool would name.
#[derive(Debug, PartialEq, Eq)]
pub enum Pick {
    /// The pool is not defined.
    Missing,
    /// Slots that look free (`full`: fewer than `n` look free, so the claim names held ones
    /// and will wait).
    Slots { slots: Vec<u32>, full: bool },
}

impl PoolTable {
    /// Applies a change of `{ns}/pool…`.
    pub fn apply(&self, keys: &Keys, update: Update) {
        {
            let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
            update.apply(&mut Pools { keys, inner: &mut inner });
        }
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that sees every later change of any pool.
    #[must_use]
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// A copy of one pool's state.
    #[must_use]
    pub fn state(&self, pool: &str) -> PoolState {
        self.inner.read().unwrap_or_else(PoisonError::into_inner).get(pool).cloned().unwrap_or_default()
    }

    /// Every pool's state (for metrics).
    #[must_use]
    pub fn all(&self) -> Vec<(String, PoolState)> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        inner.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Picks `n` slots for a claim (free ones in random order, then held ones when too few are
    /// free) and marks them pending until [`PoolTable::done`].
    pub fn pick(&self, pool: &str, n: u32) -> Pick {
        let state = self.state(pool);
        let Some(size) = state.slots else { return Pick::Missing };
        let mut pending = self.pending.write().unwrap_or_else(PoisonError::into_inner);
        let mine = pending.entry(pool.to_owned()).or_default();
        let slots = pick_slots(size, n, |i| state.held.contains_key(&i) || mine.contains(&i), rand::random());
        let full = slots.len() < n as usize;
        let slots = if full { (0..n.min(size)).collect() } else { slots };
        if !full {
            mine.extend(&slots);
        }
        Pick::Slots { slots, full }
    }

    /// The answer to a claim naming `slots` is in: they are no longer pending.
    pub fn done(&self, pool: &str, slots: &[u32]) {
        let mut pending = self.pending.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(mine) = pending.get_mut(pool) {
            for s in slots {
                mine.remove(s);
            }
        }
    }

    /// This worker waits (`true`) or stopped waiting with execution `id` (its string form).
    pub fn set_waiting_here(&self, id: &str, waiting: bool) {
        let mut here = self.waiting_here.write().unwrap_or_else(PoisonError::into_inner);
        if waiting {
            here.insert(id.to_owned());
        } else {
            here.remove(id);
        }
    }

    /// Whether this worker waits with execution `id` in a pool's queue now.
    #[must_use]
    pub fn waits_here(&self, id: &str) -> bool {
        self.waiting_here.read().unwrap_or_else(PoisonError::into_inner).contains(id)
    }

    /// Whether the queue entry at `wait_key` of `pool` is in the mirror.
    #[must_use]
    pub fn queued(&self, pool: &str, wait_key: &str) -> bool {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        inner.get(pool).is_some_and(|s| s.waiting.contains_key(wait_key))
    }

    /// Whether a tick waiting at `wait_key` for `n` slots may take them now, as this mirror
    /// sees it: enough slots free and nothing waiting ahead of it. Also the waiting keys ahead
    /// of it (with their mod revisions), for the caller to check for stale ones.
    #[must_use]
    pub fn turn(&self, pool: &str, n: u32, wait_key: &str) -> (bool, Vec<(String, i64, Waiting)>) {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        let Some(state) = inner.get(pool) else { return (false, Vec::new()) };
        let free = state.slots.unwrap_or(0).saturating_sub(u32::try_from(state.held.len()).unwrap_or(u32::MAX));
        // The first few ahead only: enough to find a stale head, cheap with thousands waiting.
        let ahead: Vec<_> = state
            .waiting
            .range(..wait_key.to_owned())
            .take(AHEAD_SHOWN)
            .map(|(k, (rev, w))| (k.clone(), *rev, w.clone()))
            .collect();
        (free >= n && ahead.is_empty(), ahead)
    }
}

/// Up to `n` slots below `size` that `taken` does not exclude, starting at a random one (so
/// workers claiming at once rarely name the same slot).
fn pick_slots(size: u32, n: u32, taken: impl Fn(u32) -> bool, seed: u32) -> Vec<u32> {
    if size == 0 {
        return Vec::new();
    }
    let start = seed % size;
    (0..size).map(|i| (start + i) % size).filter(|&i| !taken(i)).take(n as usize).collect()
}

/// The table, write-locked, as the mirror of `{ns}/pool…`.
struct Pools<'a> {
    keys: &'a Keys,
    inner: &'a mut HashMap<String, PoolState>,
}

impl Pools<'_> {
    fn put_kv(&mut self, kv: &Kv) {
        let keys = self.keys;
        if let Some(Key::Pool(name)) = keys.parse(&kv.key) {
            match Pool::from_json(&kv.value) {
                Ok(pool) => self.inner.entry(name).or_default().slots = Some(pool.slots),
                Err(e) => {
                    tracing::error!(pool = %name, error = %e.message, "stored pool does not parse: taken as absent")
                }
            }
        } else if let Some((pool, i)) = keys.parse_pool_slot(&kv.key) {
            match serde_json::from_slice::<HeldSlot>(&kv.value) {
                Ok(held) => {
                    self.inner.entry(pool).or_default().held.insert(i, held);
                }
                Err(e) => tracing::error!(pool = %pool, slot = i, error = %e, "held slot does not parse"),
            }
        } else if let Some(pool) = keys.parse_pool_wait(&kv.key) {
            if let Ok(waiting) = serde_json::from_slice::<Waiting>(&kv.value) {
                let key = String::from_utf8_lossy(&kv.key).into_owned();
                self.inner.entry(pool).or_default().waiting.insert(key, (kv.mod_revision, waiting));
            }
        }
    }
}

impl Mirror for Pools<'_> {
    fn listed(&mut self, kvs: Vec<Kv>, revision: i64) {
        self.inner.clear();
        for kv in &kvs {
            self.put_kv(kv);
        }
        tracing::info!(pools = self.inner.len(), revision, "pools listed");
    }

    fn put(&mut self, kv: Kv) {
        self.put_kv(&kv);
    }

    fn deleted(&mut self, key: Vec<u8>, _mod_revision: i64) {
        let keys = self.keys;
        if let Some(Key::Pool(name)) = keys.parse(&key) {
            if let Some(state) = self.inner.get_mut(&name) {
                state.slots = None;
            }
        } else if let Some((pool, i)) = keys.parse_pool_slot(&key) {
            if let Some(state) = self.inner.get_mut(&pool) {
                state.held.remove(&i);
            }
        } else if let Some(pool) = keys.parse_pool_wait(&key) {
            if let Some(state) = self.inner.get_mut(&pool) {
                state.waiting.remove(String::from_utf8_lossy(&key).as_ref());
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use etcron_model::keys::{ExecutionId, Tick};
    use etcron_model::pool::place;

    fn kv(key: String, value: &[u8]) -> Kv {
        Kv { key: key.into_bytes(), value: value.to_vec(), create_revision: 1, mod_revision: 1 }
    }

    #[test]
    fn slots_are_picked_free_first_and_kept_pending_until_answered() {
        let keys = Keys::new("/etcron").unwrap();
        let table = PoolTable::default();
        assert_eq!(table.pick("db", 1), Pick::Missing);
        table.apply(&keys, Update::Put(kv(keys.pool("db"), br#"{"slots":3}"#)));
        let held = HeldSlot {
            execution_id: ExecutionId::new("a", Tick::Scheduled(1)),
            worker_id: "w".into(),
            since_ms: 1,
            priority: 50,
        };
        table.apply(&keys, Update::Put(kv(keys.pool_slot("db", 1), &serde_json::to_vec(&held).unwrap())));
        let Pick::Slots { slots: first, full: false } = table.pick("db", 1) else { panic!() };
        let Pick::Slots { slots: second, full: false } = table.pick("db", 1) else { panic!() };
        let mut both = [first[0], second[0]];
        both.sort_unstable();
        assert_eq!(both, [0, 2], "the free slots, each offered once");
        let Pick::Slots { full: true, .. } = table.pick("db", 1) else { panic!("nothing free now") };
        table.done("db", &first);
        let Pick::Slots { slots, full: false } = table.pick("db", 1) else { panic!() };
        assert_eq!(slots, first, "free again once its claim is answered");
    }

    #[test]
    fn a_turn_needs_free_slots_and_nobody_ahead() {
        let keys = Keys::new("/etcron").unwrap();
        let table = PoolTable::default();
        table.apply(&keys, Update::Put(kv(keys.pool("db"), br#"{"slots":1}"#)));
        let (low, high) = (ExecutionId::new("low", Tick::Scheduled(1)), ExecutionId::new("high", Tick::Scheduled(2)));
        let (low_key, high_key) = (keys.pool_wait("db", place(10), 1, &low), keys.pool_wait("db", place(90), 2, &high));
        let waiting = Waiting { execution_id: high.clone(), scheduled_ms: 2, priority: 90, since_ms: 2 };
        table.apply(&keys, Update::Put(kv(high_key.clone(), &serde_json::to_vec(&waiting).unwrap())));
        assert!(table.turn("db", 1, &high_key).0, "first in the queue, a slot free");
        let (turn, ahead) = table.turn("db", 1, &low_key);
        assert!(!turn && ahead.len() == 1 && ahead[0].0 == high_key, "the higher priority waits ahead");
        assert!(!table.turn("db", 2, &high_key).0, "one slot is not two");
        table.apply(&keys, Update::Delete { key: keys.pool("db").into_bytes(), mod_revision: 3 });
        assert!(!table.turn("db", 1, &high_key).0, "a deleted pool has no slots");
    }

    #[test]
    fn slots_are_picked_from_a_random_start_around_the_ring() {
        assert_eq!(pick_slots(5, 2, |i| i == 3, 3), [4, 0]);
        assert_eq!(pick_slots(5, 9, |_| false, 0).len(), 5);
        assert!(pick_slots(0, 1, |_| false, 7).is_empty());
    }
}
