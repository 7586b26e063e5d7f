//! Hash maps and sets whose iteration order a simulation can fix. Keyed SipHash, with keys drawn
//! once per process (so, as with std's `RandomState`, nobody outside can craft keys that all
//! land in one bucket), or fixed keys after [`fix_keys`]: the simulation of the fire path runs
//! workers in one process and replays a seed exactly only if every map iterates in the same
//! order each time.

use std::hash::BuildHasher;
use std::sync::OnceLock;

/// A hash map keyed as this module says.
pub type HashMap<K, V> = std::collections::HashMap<K, V, Keyed>;
/// A hash set keyed as this module says.
pub type HashSet<T> = std::collections::HashSet<T, Keyed>;

static KEYS: OnceLock<(u64, u64)> = OnceLock::new();

/// Fixes the keys for the rest of the process (the simulation only); `false` when a map was
/// made before, with random keys.
pub fn fix_keys() -> bool {
    KEYS.set((0x5eed_f00d, 0xe7c0_5eed)).is_ok()
}

/// The keys of every map of this process.
#[derive(Debug, Clone, Copy)]
pub struct Keyed {
    k0: u64,
    k1: u64,
}

impl Default for Keyed {
    fn default() -> Self {
        let (k0, k1) = *KEYS.get_or_init(|| (rand::random(), rand::random()));
        Self { k0, k1 }
    }
}

// SipHash-2-4, keyed: the std hasher whose keys one can set (deprecated only in favour of
// `DefaultHasher`, which cannot take keys).
#[allow(deprecated)]
impl BuildHasher for Keyed {
    type Hasher = std::hash::SipHasher;

    fn build_hasher(&self) -> Self::Hasher {
        std::hash::SipHasher::new_with_keys(self.k0, self.k1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_of_one_process_hash_alike_and_iterate_alike() {
        let fill = || (0..100).map(|n| (n.to_string(), n)).collect::<HashMap<String, i32>>();
        let (a, b) = (fill(), fill());
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        assert_eq!(a.len(), 100);
    }
}
