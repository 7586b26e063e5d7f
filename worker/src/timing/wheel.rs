//! A hierarchical timing wheel: integer millisecond ticks in, due entries out. Pure: it never
//! reads a clock. `poll(now_ms)` advances it and returns what is due; `next_expiration()` says
//! when to call `poll` again; inserting an entry that is already due hands it back ("fire now").
//!
//! Six levels of 64 slots: level `l` slots are `64^l` ms wide, so the wheel spans `64^6` ms
//! (about 795 days) with O(1) insert and cancel. Entries further out sit in the top level and
//! are re-placed whenever their slot comes round. Entries live in a slab and are linked into
//! their slot with index links, so cancel needs no search and a job costs one slab entry.
//!
//! Invariants, checked by `debug_assert!` where they are relied on: every index linked into a
//! slot holds an entry, and that entry records the level and slot it is linked in; a slot's bit
//! in `occupied` is set exactly when its list is not empty; an entry is linked only while its
//! deadline is after `elapsed_ms` (a due one is handed back, never stored); `len` counts the
//! stored entries.

const LEVEL_BITS: u32 = 6;
const SLOTS: usize = 1 << LEVEL_BITS;
const NUM_LEVELS: usize = 6;
/// Entries due further than this from `elapsed` are parked in the top level.
const MAX_SPAN_MS: u64 = 1 << (LEVEL_BITS * NUM_LEVELS as u32);
const NIL: u32 = u32::MAX;

/// Handle to a wheel entry; stale handles (entry fired or removed) are detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EntryKey {
    index: u32,
    generation: u32,
}

struct Entry<T> {
    deadline_ms: u64,
    value: T,
    prev: u32,
    next: u32,
    level: u8,
    slot: u8,
}

enum SlabSlot<T> {
    Occupied { generation: u32, entry: Entry<T> },
    Vacant { generation: u32, next_free: u32 },
}

#[derive(Clone, Copy)]
struct Level {
    heads: [u32; SLOTS],
    /// Bit `s` set when slot `s` holds entries.
    occupied: u64,
}

/// The wheel. `T` is what comes back when an entry is due.
pub struct Wheel<T> {
    elapsed_ms: u64,
    levels: [Level; NUM_LEVELS],
    slab: Vec<SlabSlot<T>>,
    free_head: u32,
    len: usize,
}

impl<T> std::fmt::Debug for Wheel<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wheel").field("elapsed_ms", &self.elapsed_ms).field("len", &self.len).finish()
    }
}

struct Expiration {
    level: usize,
    slot: usize,
    deadline_ms: u64,
}

impl<T> Wheel<T> {
    /// A wheel whose current time is `now_ms`.
    #[must_use]
    pub fn new(now_ms: u64) -> Self {
        Self {
            elapsed_ms: now_ms,
            levels: [Level { heads: [NIL; SLOTS], occupied: 0 }; NUM_LEVELS],
            slab: Vec::new(),
            free_head: NIL,
            len: 0,
        }
    }

    /// The wheel's current time: the last `now_ms` given to `poll` (or `new`).
    #[must_use]
    pub fn elapsed_ms(&self) -> u64 {
        self.elapsed_ms
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Schedules `value` at `deadline_ms`. An entry that is already due (`deadline_ms <=
    /// elapsed_ms()`) is not stored: it is handed back as `Err(value)` to fire now.
    pub fn insert(&mut self, deadline_ms: u64, value: T) -> Result<EntryKey, T> {
        if deadline_ms <= self.elapsed_ms {
            return Err(value);
        }
        let entry = Entry { deadline_ms, value, prev: NIL, next: NIL, level: 0, slot: 0 };
        let (index, generation) = self.slab_insert(entry);
        self.link(index);
        self.len += 1;
        Ok(EntryKey { index, generation })
    }

    /// Cancels an entry; `None` if it already fired or was removed.
    pub fn remove(&mut self, key: EntryKey) -> Option<T> {
        self.entry(key)?;
        self.unlink(key.index);
        self.len -= 1;
        Some(self.slab_remove(key.index))
    }

    /// The deadline of a pending entry.
    #[must_use]
    pub fn deadline_ms(&self, key: EntryKey) -> Option<u64> {
        self.entry(key).map(|e| e.deadline_ms)
    }

    /// When `poll` next has work to do (a slot to fire or to cascade); `None` when empty.
    #[must_use]
    pub fn next_expiration(&self) -> Option<u64> {
        self.next_expiration_detail().map(|e| e.deadline_ms)
    }

    /// Advances the wheel to `now_ms` and appends every entry due by then to `due` as
    /// `(deadline_ms, value)`, in deadline order. A `now_ms` in the past is a no-op.
    pub fn poll(&mut self, now_ms: u64, due: &mut Vec<(u64, T)>) {
        while let Some(exp) = self.next_expiration_detail() {
            if exp.deadline_ms > now_ms {
                break;
            }
            self.process(exp, due);
        }
        self.elapsed_ms = self.elapsed_ms.max(now_ms);
    }

    fn process(&mut self, exp: Expiration, due: &mut Vec<(u64, T)>) {
        self.elapsed_ms = self.elapsed_ms.max(exp.deadline_ms);
        let level = &mut self.levels[exp.level];
        let mut cursor = level.heads[exp.slot];
        level.heads[exp.slot] = NIL;
        level.occupied &= !(1u64 << exp.slot);
        let mut fire: Vec<u32> = Vec::new();
        while cursor != NIL {
            let next = match &self.slab[cursor as usize] {
                SlabSlot::Occupied { entry, .. } => entry.next,
                SlabSlot::Vacant { .. } => NIL,
            };
            debug_assert!(
                self.entry_at(cursor).is_some_and(|e| (e.level as usize, e.slot as usize) == (exp.level, exp.slot)),
                "entry {cursor} is linked into a slot it does not record"
            );
            let deadline = self.deadline_at(cursor);
            if deadline <= self.elapsed_ms {
                fire.push(cursor);
            } else {
                // Cascade to a finer level (or round again in the top level).
                self.link(cursor);
            }
            cursor = next;
        }
        fire.sort_by_key(|&i| self.deadline_at(i));
        debug_assert!(self.len >= fire.len(), "more entries due than stored");
        for index in fire {
            self.len -= 1;
            let deadline = self.deadline_at(index);
            due.push((deadline, self.slab_remove(index)));
        }
    }

    fn next_expiration_detail(&self) -> Option<Expiration> {
        // A lower level's slots always come before any higher level's.
        (0..NUM_LEVELS).find_map(|level| self.level_expiration(level))
    }

    fn level_expiration(&self, level: usize) -> Option<Expiration> {
        let occupied = self.levels[level].occupied;
        if occupied == 0 {
            return None;
        }
        let slot_range = slot_range(level);
        let level_range = slot_range * SLOTS as u64;
        let now_slot = ((self.elapsed_ms / slot_range) % SLOTS as u64) as u32;
        // Search from the slot after the current one: only the top level can hold entries in
        // the current slot, and those are a whole rotation ahead, so they come last.
        let start = (now_slot + 1) % SLOTS as u32;
        let slot = (occupied.rotate_right(start).trailing_zeros() + start) as usize % SLOTS;
        debug_assert_ne!(self.levels[level].heads[slot], NIL, "slot {slot} of level {level} is marked but empty");
        let level_start = self.elapsed_ms & !(level_range - 1);
        let mut deadline_ms = level_start + slot as u64 * slot_range;
        if deadline_ms <= self.elapsed_ms {
            debug_assert_eq!(level, NUM_LEVELS - 1, "a lower level's slot is behind the wheel's time");
            // Only the top level gets here: entries beyond the span are parked in its slots,
            // which act as a ring, so a slot at or before the current one is a rotation ahead.
            deadline_ms += level_range;
        }
        Some(Expiration { level, slot, deadline_ms })
    }

    /// Places a stored entry into the slot for its deadline relative to `elapsed_ms`.
    fn link(&mut self, index: u32) {
        let deadline = self.deadline_at(index);
        debug_assert!(deadline > self.elapsed_ms, "linking entry {index}, due at {deadline}, at {}", self.elapsed_ms);
        let level = level_for(self.elapsed_ms, deadline);
        let slot = ((deadline >> (level as u32 * LEVEL_BITS)) % SLOTS as u64) as usize;
        let head = self.levels[level].heads[slot];
        if let Some(e) = self.entry_at_mut(index) {
            e.level = level as u8;
            e.slot = slot as u8;
            e.prev = NIL;
            e.next = head;
        }
        if let Some(h) = self.entry_at_mut(head) {
            h.prev = index;
        }
        self.levels[level].heads[slot] = index;
        self.levels[level].occupied |= 1u64 << slot;
    }

    fn unlink(&mut self, index: u32) {
        let Some(e) = self.entry_at(index) else {
            debug_assert!(false, "unlinking entry {index}, which holds nothing");
            return;
        };
        let (prev, next, level, slot) = (e.prev, e.next, e.level as usize, e.slot as usize);
        if prev == NIL {
            self.levels[level].heads[slot] = next;
            if next == NIL {
                self.levels[level].occupied &= !(1u64 << slot);
            }
        } else if let Some(p) = self.entry_at_mut(prev) {
            p.next = next;
        }
        if let Some(n) = self.entry_at_mut(next) {
            n.prev = prev;
        }
    }

    fn entry(&self, key: EntryKey) -> Option<&Entry<T>> {
        match self.slab.get(key.index as usize)? {
            SlabSlot::Occupied { generation, entry } if *generation == key.generation => Some(entry),
            _ => None,
        }
    }

    /// The deadline of the entry at `index`, which the caller found linked into a slot (so it
    /// holds an entry; a release build reads a broken link as due at once rather than panic).
    fn deadline_at(&self, index: u32) -> u64 {
        let entry = self.entry_at(index);
        debug_assert!(entry.is_some(), "slot link {index} holds no entry");
        entry.map_or(0, |e| e.deadline_ms)
    }

    fn entry_at(&self, index: u32) -> Option<&Entry<T>> {
        match self.slab.get(index as usize)? {
            SlabSlot::Occupied { entry, .. } => Some(entry),
            SlabSlot::Vacant { .. } => None,
        }
    }

    fn entry_at_mut(&mut self, index: u32) -> Option<&mut Entry<T>> {
        match self.slab.get_mut(index as usize)? {
            SlabSlot::Occupied { entry, .. } => Some(entry),
            SlabSlot::Vacant { .. } => None,
        }
    }

    fn slab_insert(&mut self, entry: Entry<T>) -> (u32, u32) {
        if self.free_head != NIL {
            let index = self.free_head;
            let slot = &mut self.slab[index as usize];
            let (generation, next_free) = match slot {
                SlabSlot::Vacant { generation, next_free } => (*generation, *next_free),
                SlabSlot::Occupied { .. } => unreachable!("free list points at an occupied slot"),
            };
            self.free_head = next_free;
            *slot = SlabSlot::Occupied { generation, entry };
            (index, generation)
        } else {
            debug_assert!(self.slab.len() < NIL as usize, "the slab outgrew its u32 indices");
            let index = u32::try_from(self.slab.len()).unwrap_or(NIL - 1);
            self.slab.push(SlabSlot::Occupied { generation: 0, entry });
            (index, 0)
        }
    }

    fn slab_remove(&mut self, index: u32) -> T {
        let slot = &mut self.slab[index as usize];
        let generation = match slot {
            SlabSlot::Occupied { generation, .. } => generation.wrapping_add(1),
            SlabSlot::Vacant { .. } => unreachable!("removing a vacant slab slot"),
        };
        let old = std::mem::replace(slot, SlabSlot::Vacant { generation, next_free: self.free_head });
        self.free_head = index;
        match old {
            SlabSlot::Occupied { entry, .. } => entry.value,
            SlabSlot::Vacant { .. } => unreachable!("checked above"),
        }
    }
}

const fn slot_range(level: usize) -> u64 {
    1u64 << (level as u32 * LEVEL_BITS)
}

/// The level whose slot width matches how far `deadline` is from `elapsed`: the highest bit
/// in which they differ.
fn level_for(elapsed: u64, deadline: u64) -> usize {
    let mut masked = (elapsed ^ deadline) | (SLOTS as u64 - 1);
    if masked >= MAX_SPAN_MS {
        masked = MAX_SPAN_MS - 1;
    }
    let significant = 63 - masked.leading_zeros();
    (significant / LEVEL_BITS) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn drain(w: &mut Wheel<u32>, now: u64) -> Vec<(u64, u32)> {
        let mut due = Vec::new();
        w.poll(now, &mut due);
        due
    }

    #[test]
    fn fires_at_the_deadline_not_before() {
        let mut w = Wheel::new(1_000);
        w.insert(1_005, 1).unwrap();
        assert_eq!(w.next_expiration(), Some(1_005));
        assert!(drain(&mut w, 1_004).is_empty());
        assert_eq!(drain(&mut w, 1_005), vec![(1_005, 1)]);
        assert!(w.is_empty());
        assert_eq!(w.next_expiration(), None);
    }

    #[test]
    fn already_due_is_handed_back() {
        let mut w = Wheel::new(1_000);
        assert_eq!(w.insert(1_000, 7), Err(7));
        assert_eq!(w.insert(10, 8), Err(8));
        assert!(w.is_empty());
    }

    #[test]
    fn far_entries_cascade_and_fire_exactly() {
        let now = 1_764_547_200_123u64; // a realistic unix-ms origin
        let mut w = Wheel::new(now);
        let deadlines =
            [now + 1, now + 63, now + 64, now + 4_095, now + 4_096, now + 86_400_000, now + 30 * 86_400_000];
        for (i, d) in deadlines.iter().enumerate() {
            w.insert(*d, i as u32).unwrap();
        }
        let mut fired = Vec::new();
        // Drive it like the scheduler does: poll at each reported expiration.
        while let Some(next) = w.next_expiration() {
            assert!(next > w.elapsed_ms() || next == w.elapsed_ms(), "expiration in the past");
            fired.extend(drain(&mut w, next));
        }
        let expected: Vec<(u64, u32)> = deadlines.iter().enumerate().map(|(i, d)| (*d, i as u32)).collect();
        assert_eq!(fired, expected);
    }

    #[test]
    fn beyond_the_span_still_fires_on_time() {
        let now = 5_000u64;
        let mut w = Wheel::new(now);
        let far = now + MAX_SPAN_MS * 2 + 12_345;
        w.insert(far, 1).unwrap();
        let mut polls = 0;
        while let Some(next) = w.next_expiration() {
            assert!(next <= far);
            let due = drain(&mut w, next);
            polls += 1;
            if !due.is_empty() {
                assert_eq!(due, vec![(far, 1)]);
            }
            assert!(polls < 1_000, "too many polls");
        }
        assert!(w.is_empty());
    }

    #[test]
    fn a_late_poll_fires_everything_due_in_order() {
        let mut w = Wheel::new(0);
        for d in [500u64, 100, 70_000, 3, 99_999] {
            w.insert(d, d as u32).unwrap();
        }
        let due = drain(&mut w, 80_000);
        assert_eq!(due.iter().map(|d| d.0).collect::<Vec<_>>(), vec![3, 100, 500, 70_000]);
        assert_eq!(w.len(), 1);
        assert_eq!(drain(&mut w, 100_000), vec![(99_999, 99_999)]);
    }

    #[test]
    fn remove_cancels_and_stale_keys_are_ignored() {
        let mut w = Wheel::new(0);
        let a = w.insert(10, 1).unwrap();
        let b = w.insert(10, 2).unwrap();
        let c = w.insert(10, 3).unwrap();
        assert_eq!(w.remove(b), Some(2));
        assert_eq!(w.remove(b), None);
        assert_eq!(w.deadline_ms(a), Some(10));
        assert_eq!(drain(&mut w, 10).into_iter().map(|d| d.1).collect::<Vec<_>>(), vec![3, 1]);
        assert_eq!(w.remove(a), None, "fired entries cannot be removed");
        // A reused slab slot does not answer to the old key.
        let d = w.insert(20, 4).unwrap();
        assert_eq!(w.remove(c), None);
        assert_eq!(w.remove(d), Some(4));
    }

    #[test]
    fn poll_in_the_past_is_a_noop() {
        let mut w = Wheel::new(1_000);
        w.insert(2_000, 1).unwrap();
        assert!(drain(&mut w, 500).is_empty());
        assert_eq!(w.elapsed_ms(), 1_000);
    }

    /// xorshift64*, deterministic.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    #[test]
    fn matches_a_reference_model_under_random_operations() {
        for seed in 1..=20u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let start = rng.next() % (1 << 40);
            let mut w = Wheel::new(start);
            let mut model: BTreeMap<(u64, u32), EntryKey> = BTreeMap::new();
            let mut now = start;
            for id in 0..3_000u32 {
                match rng.next() % 10 {
                    0..=5 => {
                        let span = [64u64, 4_096, 300_000, 86_400_000, MAX_SPAN_MS * 3][(rng.next() % 5) as usize];
                        let deadline = now + 1 + rng.next() % span;
                        let key = w.insert(deadline, id).unwrap();
                        model.insert((deadline, id), key);
                    }
                    6 | 7 if !model.is_empty() => {
                        let nth = (rng.next() % model.len() as u64) as usize;
                        let (&(d, v), &key) = model.iter().nth(nth).unwrap();
                        assert_eq!(w.remove(key), Some(v));
                        model.remove(&(d, v));
                    }
                    _ => {
                        let step = [1u64, 50, 5_000, 10_000_000][(rng.next() % 4) as usize];
                        now += rng.next() % step;
                        let mut due = drain(&mut w, now);
                        due.sort_unstable();
                        let expected: Vec<(u64, u32)> = model.keys().copied().take_while(|(d, _)| *d <= now).collect();
                        for k in &expected {
                            model.remove(k);
                        }
                        assert_eq!(due, expected, "seed {seed} at {now}");
                    }
                }
                assert_eq!(w.len(), model.len());
                if let (Some(next), Some(((first, _), _))) = (w.next_expiration(), model.iter().next()) {
                    assert!(next <= *first, "seed {seed}: next_expiration {next} after earliest deadline {first}");
                }
            }
        }
    }
}
