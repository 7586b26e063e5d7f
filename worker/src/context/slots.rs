//! Capacity: a worker's slots for concurrent runs. A run takes a slot when it starts — its claim
//! won and its scheduled instant come — and frees it when it ends; racing for a claim takes
//! none, so claims a worker loses, and claims won ahead of their time, cost no capacity. A
//! worker races only while it has more free slots than won runs already waiting for one, so it
//! wins little more than it can run; a won run that finds no slot free waits for one until its
//! start deadline (a scheduled tick) or [`SLOT_WAIT_MAX`] (any other trigger), and is then
//! recorded `missed`, naming capacity.

use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

/// Longest a won run of a run request (manual, retry, dependency, failover, catch-up) waits for
/// a slot: well within its claim's retention (10 minutes), so its claim outlives the wait.
pub const SLOT_WAIT_MAX: Duration = Duration::from_secs(300);

/// A worker's capacity. A slot that comes free goes to the waiting run of the highest
/// priority (the earliest scheduled among equals, then the first to wait), not to a new race.
#[derive(Debug)]
pub struct Slots {
    inner: Arc<Mutex<State>>,
}

#[derive(Debug)]
struct State {
    free: usize,
    waiting: BinaryHeap<Waiter>,
    /// Arrival order of waiters (the last tie-break).
    next: u64,
}

#[derive(Debug)]
struct Waiter {
    /// Higher first; then the earlier scheduled time; then the earlier arrival.
    key: (u8, std::cmp::Reverse<i64>, std::cmp::Reverse<u64>),
    give: oneshot::Sender<Slot>,
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Waiter {}
impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiter {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key.cmp(&other.key)
    }
}

/// A run's capacity slot: freed (handed to the first waiting run) when dropped.
#[derive(Debug)]
pub struct Slot {
    inner: Option<Arc<Mutex<State>>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            release(&inner);
        }
    }
}

/// A freed slot: to the first waiter still waiting, else back to the free count.
fn release(inner: &Arc<Mutex<State>>) {
    let mut state = inner.lock().unwrap_or_else(PoisonError::into_inner);
    while let Some(waiter) = state.waiting.pop() {
        match waiter.give.send(Slot { inner: Some(inner.clone()) }) {
            Ok(()) => return,
            // Gave up meanwhile: the slot it was sent comes back here, not through its drop.
            Err(mut slot) => slot.inner = None,
        }
    }
    state.free += 1;
}

impl Slots {
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self { inner: Arc::new(Mutex::new(State { free: capacity, waiting: BinaryHeap::new(), next: 0 })) }
    }

    /// Whether this worker has room to race: more free slots than won runs waiting for one.
    #[must_use]
    pub fn free(&self) -> bool {
        let state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        state.free > state.waiting.len()
    }

    /// A slot for a run of `priority` scheduled at `scheduled_ms`, waiting for one until
    /// `until`; `None` when none came free by then.
    pub async fn take(&self, (priority, scheduled_ms): (u8, i64), until: tokio::time::Instant) -> Option<Slot> {
        let (rx, seq) = {
            let mut state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            if state.free > 0 {
                state.free -= 1;
                return Some(Slot { inner: Some(self.inner.clone()) });
            }
            let (give, rx) = oneshot::channel();
            state.next += 1;
            let key = (priority, std::cmp::Reverse(scheduled_ms), std::cmp::Reverse(state.next));
            state.waiting.push(Waiter { key, give });
            (rx, state.next)
        };
        crate::metrics::METRICS.waiting_for_slot.inc();
        let got = tokio::time::timeout_at(until, rx).await;
        crate::metrics::METRICS.waiting_for_slot.dec();
        match got {
            Ok(Ok(slot)) => Some(slot),
            _ => {
                // Given up: out of the queue. A slot sent to it meanwhile was dropped with the
                // channel, and its drop handed it on.
                let mut state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
                state.waiting.retain(|w| (w.key.2).0 != seq);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn runs_take_slots_and_waiting_runs_keep_the_worker_from_racing() {
        let slots = Arc::new(Slots::new(2));
        let soon = || tokio::time::Instant::now() + Duration::from_secs(10);
        let (a, b) = (slots.take((50, 0), soon()).await.unwrap(), slots.take((50, 0), soon()).await.unwrap());
        assert!(!slots.free(), "both slots run");
        drop(a);
        assert!(slots.free(), "one came free");
        let c = slots.take((50, 0), soon()).await.unwrap();
        // A third won run waits; freeing one slot gives it to the waiting run, not to a race.
        let waiter = etcron_common::task::spawn({
            let slots = slots.clone();
            async move { slots.take((50, 0), tokio::time::Instant::now() + Duration::from_secs(10)).await }
        });
        tokio::task::yield_now().await;
        drop(b);
        assert!(!slots.free(), "the freed slot is the waiting run's");
        let d = waiter.await.unwrap().expect("it got the slot");
        // Nothing frees a slot: the wait ends at its deadline.
        assert!(slots.take((50, 0), soon()).await.is_none());
        assert!(!slots.free(), "a run that gave up waiting no longer counts");
        drop((c, d));
        assert!(slots.free());
    }

    #[tokio::test(start_paused = true)]
    async fn a_freed_slot_goes_to_the_highest_priority_then_the_earliest_tick() {
        let slots = Arc::new(Slots::new(1));
        let later = || tokio::time::Instant::now() + Duration::from_secs(60);
        let only = slots.take((50, 0), later()).await.unwrap();
        let (tx, mut order) = tokio::sync::mpsc::unbounded_channel();
        for (name, priority, scheduled) in [("low", 10, 1), ("high-late", 90, 9), ("mid", 50, 5), ("high-early", 90, 2)]
        {
            let (slots, tx) = (slots.clone(), tx.clone());
            etcron_common::task::spawn(async move {
                let slot =
                    slots.take((priority, scheduled), tokio::time::Instant::now() + Duration::from_secs(60)).await;
                let _ = tx.send(name);
                tokio::time::sleep(Duration::from_millis(10)).await;
                drop(slot);
            });
            tokio::task::yield_now().await;
        }
        drop(only);
        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(order.recv().await.unwrap());
        }
        assert_eq!(got, ["high-early", "high-late", "mid", "low"]);
    }
}
