//! `wheel --entries N`: the worker's timing wheel against a `BinaryHeap` schedule with lazy
//! cancellation (the usual alternative), same operations, same deadlines, one process.
//!
//! - insert: N entries with deadlines spread uniformly over the next hour;
//! - cancel: remove all N in random order (the heap marks them stale; its memory stays until
//!   they surface);
//! - advance: N entries due within 60 s, then time moves in 1 ms steps until all have fired;
//! - bytes per job: resident memory grown by holding N entries, divided by N.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use anyhow::Result;
use etcron_tests::Rng;
use etcron_worker::timing::wheel::Wheel;

/// A heap schedule with O(1) cancel by generation, as heap-based cron schedulers do it.
struct HeapSchedule {
    heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
    generations: Vec<u32>,
    values: Vec<u64>,
}

impl HeapSchedule {
    fn new() -> Self {
        Self { heap: BinaryHeap::new(), generations: Vec::new(), values: Vec::new() }
    }

    fn insert(&mut self, deadline: u64, value: u64) -> (u32, u32) {
        let index = u32::try_from(self.values.len()).unwrap_or(u32::MAX);
        self.values.push(value);
        self.generations.push(0);
        self.heap.push(Reverse((deadline, index, 0)));
        (index, 0)
    }

    fn cancel(&mut self, (index, generation): (u32, u32)) {
        if let Some(g) = self.generations.get_mut(index as usize) {
            if *g == generation {
                *g += 1;
            }
        }
    }

    fn poll(&mut self, now: u64, due: &mut Vec<(u64, u64)>) {
        while let Some(Reverse((deadline, index, generation))) = self.heap.peek().copied() {
            if deadline > now {
                break;
            }
            self.heap.pop();
            if self.generations[index as usize] == generation {
                due.push((deadline, self.values[index as usize]));
            }
        }
    }
}

fn rss_bytes() -> u64 {
    etcron_tests::proc_usage(std::process::id()).map_or(0, |(_, rss)| rss)
}

fn per_op(start: Instant, n: usize) -> f64 {
    start.elapsed().as_nanos() as f64 / n as f64
}

pub fn run(n: usize) -> Result<()> {
    const HOUR: u64 = 3_600_000;
    const WINDOW: u64 = 60_000;
    let now = 1_000_000u64;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let far: Vec<u64> = (0..n).map(|_| now + 1 + rng.below(HOUR)).collect();
    let near: Vec<u64> = (0..n).map(|_| now + 1 + rng.below(WINDOW)).collect();
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    println!("wheel vs BinaryHeap, {n} entries (deadlines over 1 h for insert/cancel, over 60 s for advance)");
    println!("{:<12} {:>12} {:>12} {:>14} {:>10}", "", "insert ns", "cancel ns", "advance ns/fire", "bytes/job");

    // The wheel.
    let rss0 = rss_bytes();
    let mut wheel: Wheel<u64> = Wheel::new(now);
    let t = Instant::now();
    let keys: Vec<_> = far.iter().enumerate().filter_map(|(i, d)| wheel.insert(*d, i as u64).ok()).collect();
    let insert = per_op(t, n);
    let bytes = rss_bytes().saturating_sub(rss0) as f64 / n as f64;
    let t = Instant::now();
    for &i in &order {
        wheel.remove(keys[i]);
    }
    let cancel = per_op(t, n);
    anyhow::ensure!(wheel.is_empty(), "wheel not empty after cancelling everything");
    drop(keys);
    let mut wheel: Wheel<u64> = Wheel::new(now);
    for (i, d) in near.iter().enumerate() {
        let _ = wheel.insert(*d, i as u64);
    }
    let mut due = Vec::with_capacity(4096);
    let mut fired = 0usize;
    let t = Instant::now();
    for ms in now + 1..=now + WINDOW {
        wheel.poll(ms, &mut due);
        fired += due.len();
        due.clear();
    }
    let advance = per_op(t, fired);
    anyhow::ensure!(fired == n, "the wheel fired {fired} of {n}");
    println!("{:<12} {:>12.1} {:>12.1} {:>14.1} {:>10.1}", "wheel", insert, cancel, advance, bytes);
    drop(wheel);

    // The heap.
    let rss0 = rss_bytes();
    let mut heap = HeapSchedule::new();
    let t = Instant::now();
    let keys: Vec<_> = far.iter().enumerate().map(|(i, d)| heap.insert(*d, i as u64)).collect();
    let insert = per_op(t, n);
    let bytes = rss_bytes().saturating_sub(rss0) as f64 / n as f64;
    let t = Instant::now();
    for &i in &order {
        heap.cancel(keys[i]);
    }
    let cancel = per_op(t, n);
    drop(keys);
    drop(heap);
    let mut heap = HeapSchedule::new();
    for (i, d) in near.iter().enumerate() {
        heap.insert(*d, i as u64);
    }
    let mut due = Vec::with_capacity(4096);
    let mut fired = 0usize;
    let t = Instant::now();
    for ms in now + 1..=now + WINDOW {
        heap.poll(ms, &mut due);
        fired += due.len();
        due.clear();
    }
    let advance = per_op(t, fired);
    anyhow::ensure!(fired == n, "the heap fired {fired} of {n}");
    println!("{:<12} {:>12.1} {:>12.1} {:>14.1} {:>10.1}", "BinaryHeap", insert, cancel, advance, bytes);
    Ok(())
}
