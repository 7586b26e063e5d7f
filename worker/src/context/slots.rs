//! Capacity: a worker's slots for concurrent runs. A run takes a slot when it starts — its claim
//! won and its scheduled instant come — and frees it when it ends; racing for a claim takes
//! none, so claims a worker loses, and claims won ahead of their time, cost no capacity. A
//! worker races only while it has more free slots than won runs already waiting for one, so it
//! wins little more than it can run; a won run that finds no slot free waits for one until its
//! start deadline (a scheduled tick) or [`SLOT_WAIT_MAX`] (any other trigger), and is then
//! recorded `missed`, naming capacity.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Longest a won run of a run request (manual, retry, dependency, failover, catch-up) waits for
/// a slot: well within its claim's retention (10 minutes), so its claim outlives the wait.
pub const SLOT_WAIT_MAX: Duration = Duration::from_secs(300);

#[derive(Debug)]
pub struct Slots {
    permits: Arc<Semaphore>,
    /// Won runs waiting for a slot now.
    waiting: AtomicUsize,
}

impl Slots {
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self { permits: Arc::new(Semaphore::new(capacity)), waiting: AtomicUsize::new(0) }
    }

    /// Whether this worker has room to race: more free slots than won runs waiting for one.
    #[must_use]
    pub fn free(&self) -> bool {
        self.permits.available_permits() > self.waiting.load(Ordering::SeqCst)
    }

    /// A slot, waiting for one until `until`; `None` when none came free by then.
    pub async fn take(&self, until: tokio::time::Instant) -> Option<OwnedSemaphorePermit> {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return Some(permit);
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        crate::metrics::METRICS.waiting_for_slot.inc();
        let permit = tokio::time::timeout_at(until, self.permits.clone().acquire_owned()).await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        crate::metrics::METRICS.waiting_for_slot.dec();
        permit.ok().and_then(Result::ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn runs_take_slots_and_waiting_runs_keep_the_worker_from_racing() {
        let slots = Arc::new(Slots::new(2));
        let soon = || tokio::time::Instant::now() + Duration::from_secs(10);
        let (a, b) = (slots.take(soon()).await.unwrap(), slots.take(soon()).await.unwrap());
        assert!(!slots.free(), "both slots run");
        drop(a);
        assert!(slots.free(), "one came free");
        let c = slots.take(soon()).await.unwrap();
        // A third won run waits; freeing one slot gives it to the waiting run, not to a race.
        let waiter = etcron_common::task::spawn({
            let slots = slots.clone();
            async move { slots.take(tokio::time::Instant::now() + Duration::from_secs(10)).await }
        });
        tokio::task::yield_now().await;
        drop(b);
        assert!(!slots.free(), "the freed slot is the waiting run's");
        let d = waiter.await.unwrap().expect("it got the slot");
        // Nothing frees a slot: the wait ends at its deadline.
        assert!(slots.take(soon()).await.is_none());
        drop((c, d));
    }
}
