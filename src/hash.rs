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
//! It is foldhash's `quality` variant: the tables index by the hash's high bits, and the
//! `fast` variant's high bits do not avalanche. Under it, 4,000 keys that differ only in their
//! high 32 bits (`i << 32`) probed a median 4,191 slots over 300 seeds but up to 949,898 (the
//! 90th percentile 8,977); under `quality`, a median 5,330 and at most 5,533, the same as
//! keys crafted against Fx (2026-11-27, `batch::builder`'s probe-counting test).
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
//! anchors (`gigpo_16x8x30/exact`, `gigpo_scaling/{u64,str}/10000`). On the otherwise idle VM
//! (2026-11-27; 10 pairs, each a run of this build and of one whose `KeyHasher::hash` is the Fx
//! hash, `cargo bench --bench batch_builder -- --warm-up-time 1 --measurement-time 3`), the
//! median foldhash/Fx ratio was 1.05 on random 80,000 keys (quartiles 0.96–1.20), and 1.03,
//! 1.06, 1.19 and 1.19 on the four 3,840-row rebuilds (step-major row keys, round-robin group
//! keys, trajectory-major row keys, runs of group keys; quartiles from 0.72 to 1.76).

use std::fmt;
use std::hash::{BuildHasher, Hash};

use foldhash::quality::SeedableRandomState;
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
    /// A hasher with fixed seeds, for tests that must not depend on the draw (the shared seed
    /// is leaked: foldhash takes it by `&'static`).
    #[cfg(test)]
    fn with_seeds(seed: u64, shared: u64) -> Self {
        let shared: &'static SharedSeed = Box::leak(Box::new(SharedSeed::from_u64(shared)));
        Self(SeedableRandomState::with_seed(seed, shared))
    }

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

    /// Slots a linear-probing table of 2^bits slots, indexed by the hash's high bits (as the
    /// batch builder's and GiGPO's tables are), inspects to insert `keys`.
    fn probes(h: &KeyHasher, keys: &[u64], bits: u32) -> usize {
        let mut slots = vec![false; 1 << bits];
        let mut probes = 0;
        for k in keys {
            let mut slot = (h.hash(k) >> (64 - bits)) as usize;
            probes += 1;
            while slots[slot] {
                slot = (slot + 1) & (slots.len() - 1);
                probes += 1;
            }
            slots[slot] = true;
        }
        probes
    }

    #[test]
    fn keys_differing_in_high_bits_spread_under_every_seed() {
        // 4,000 keys `i << 32` in a 2^14-slot table (load 1/4): about 1.2 probes a key. The
        // high bits of a hash without a final avalanche cluster these keys under some seeds
        // (foldhash's `fast` variant: up to 950,000 probes), so fixed seeds are tried here.
        let keys: Vec<u64> = (0..4_000u64).map(|i| i << 32).collect();
        for shared in 0..64u64 {
            let h = KeyHasher::with_seeds(shared.wrapping_mul(0x9e37_79b9_7f4a_7c15), shared);
            let p = probes(&h, &keys, 14);
            assert!(
                p <= 2 * keys.len(),
                "shared seed {shared}: {p} probes for {} keys",
                keys.len()
            );
        }
    }
}
