//! The keyed hash for interning keys the caller supplies (group, trajectory and anchor keys),
//! shared by the batch builder and GiGPO.
//!
//! Keys come from the caller's environment (trajectory ids, observation texts), so an unkeyed
//! hash lets crafted keys collide: with the rustc "Fx" multiply-rotate hash used before,
//! 80,000 crafted `u64` keys all landed on one table slot and building took seconds instead of
//! milliseconds (open addressing is quadratic in the keys of one probe run). [`KeyHasher`] is
//! foldhash (a kept crate, as fast as Fx on `u64` keys and ~100-byte texts) keyed per hasher:
//! its seed mixes std's `RandomState` (keys drawn from the operating system once per thread)
//! into foldhash's per-process seed, so colliding keys cannot be chosen without the seed.
//!
//! No output depends on the seed: the tables hand out ids in order of first appearance, and
//! nothing iterates over their slots.
//!
//! Measured with `cargo bench --bench batch_builder` and `cargo bench --bench gigpo`
//! (2026-11-27, 2-core x86_64 VM, heavily loaded: criterion medians, each case run in turn
//! with the Fx build 5–9 times). 80,000 distinct `u64` keys built into one batch: crafted
//! keys took 23.3 s [20.7, 25.7] and 26.4 s [23.6, 29.2] with Fx, 57–121 ms with foldhash
//! (random keys: 33–97 ms in the same runs; crafted/random median 0.86). The median of the
//! paired foldhash/Fx ratios over 9 pairs: 1.19 on random 80,000 keys (quartiles 0.87–1.35,
//! within the noise), 0.85–1.09 on the four 3,840-row rebuilds, 0.77–1.08 on GiGPO's
//! anchors (`gigpo_16x8x30/exact`, `gigpo_scaling/{u64,str}/10000`).

use std::fmt;
use std::hash::{BuildHasher, Hash};

use foldhash::fast::SeedableRandomState;
use foldhash::SharedSeed;

/// A randomly keyed hash function for caller keys; each hasher built has its own key.
#[derive(Clone)]
pub(crate) struct KeyHasher(SeedableRandomState);

impl Default for KeyHasher {
    fn default() -> Self {
        // std's RandomState: SipHash keys from the operating system's generator, drawn once
        // per thread and stepped for each new state, so every hasher differs.
        let seed = std::collections::hash_map::RandomState::new().hash_one(0x6b_65_79_u32);
        Self(SeedableRandomState::with_seed(seed, SharedSeed::global_random()))
    }
}

impl KeyHasher {
    /// The 64-bit hash of `key`; every bit is mixed (a table may index by the high or low
    /// bits).
    #[inline]
    pub(crate) fn hash<K: Hash + ?Sized>(&self, key: &K) -> u64 {
        self.0.hash_one(key)
    }
}

impl fmt::Debug for KeyHasher {
    /// Without the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyHasher(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashers_are_keyed_each_their_own_way() {
        // Two hashers disagree on almost every key (a shared unkeyed hash agrees on all).
        let (a, b) = (KeyHasher::default(), KeyHasher::default());
        let same = (0..64u64).filter(|k| a.hash(k) == b.hash(k)).count();
        assert!(same <= 1, "{same} of 64 keys hash alike under two hashers");
        // A hasher is a function: a key always hashes the same, clones included.
        let c = a.clone();
        assert!((0..64u64).all(|k| a.hash(&k) == a.hash(&k) && c.hash(&k) == a.hash(&k)));
        assert_eq!(a.hash("anchor"), a.hash(&"anchor".to_string()));
    }
}
