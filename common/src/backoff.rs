//! Exponential backoff for retry loops: the one rule every loop that retries etcd, MongoDB or a
//! lease uses. The delay doubles from `first` up to `max`, and goes back to `first` once the
//! thing retried worked.

use std::time::Duration;

use tokio::sync::watch;

/// The delays of one retry loop.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    #[must_use]
    pub const fn new(first: Duration, max: Duration) -> Self {
        Self { first, max, next: first }
    }

    /// The delay to wait now; the next one is twice as long, up to `max`.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        delay
    }

    /// The retried thing worked: the next delay is `first` again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }

    /// Sleeps the next delay; `false` when `stop` changed (or its sender went) first.
    pub async fn sleep(&mut self, stop: &mut watch::Receiver<bool>) -> bool {
        let delay = self.next_delay();
        tokio::select! {
            _ = stop.changed() => false,
            () = tokio::time::sleep(delay) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_and_start_over_after_a_success() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(500));
        let delays: Vec<Duration> = (0..5).map(|_| b.next_delay()).collect();
        assert_eq!(delays, [ms(100), ms(200), ms(400), ms(500), ms(500)]);
        b.reset();
        assert_eq!(b.next_delay(), ms(100));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_ends_the_sleep() {
        let (tx, mut rx) = watch::channel(false);
        let mut b = Backoff::new(Duration::from_secs(60), Duration::from_secs(60));
        let sleeping = tokio::spawn(async move { b.sleep(&mut rx).await });
        tokio::task::yield_now().await;
        tx.send(true).unwrap();
        assert!(!sleeping.await.unwrap(), "stopped, not slept out");
    }
}
