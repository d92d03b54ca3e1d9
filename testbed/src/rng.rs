//! The trainer's random draws: rand_xoshiro's [`SplitMix64`] (bit for bit Vigna's
//! `splitmix64.c`), split into independent streams, and its uniform draw in [0, 1).
//!
//! The same two rules as the library's ablations (stream k of a seed is seeded with the k-th
//! output of SplitMix64(seed); a uniform draw is the top 53 bits scaled by 2⁻⁵³), so a
//! training run's numbers do not depend on where the testbed's code lives.

use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

/// SplitMix64's increment γ (the golden ratio in 64 bits).
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// The generator of stream `stream` under `seed`: seeded with the `stream`-th output (0-based)
/// of SplitMix64(seed). Distinct streams get distinct seeds (the output mixer is a bijection).
pub(crate) fn stream(seed: u64, stream: u64) -> SplitMix64 {
    // The parent's state after `stream` steps is seed + stream·γ: one draw from there.
    let mut parent = SplitMix64::seed_from_u64(seed.wrapping_add(stream.wrapping_mul(GAMMA)));
    SplitMix64::seed_from_u64(parent.next_u64())
}

/// A uniform draw from [0, 1): the top 53 bits of one output scaled by 2⁻⁵³.
pub(crate) fn uniform(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_k_is_seeded_by_the_kth_output() {
        // Published reference output of splitmix64.c (rand_xoshiro's test vector).
        let mut reference = SplitMix64::seed_from_u64(1_477_776_061_723_855_037);
        assert_eq!(reference.next_u64(), 1_985_237_415_132_408_290);
        let mut parent = SplitMix64::seed_from_u64(42);
        let first = parent.next_u64();
        let second = parent.next_u64();
        assert_eq!(stream(42, 0), SplitMix64::seed_from_u64(first));
        assert_eq!(stream(42, 1), SplitMix64::seed_from_u64(second));
    }

    #[test]
    fn uniform_is_the_top_53_bits() {
        let mut a = SplitMix64::seed_from_u64(9);
        let mut b = a.clone();
        let u = uniform(&mut a);
        assert!((0.0..1.0).contains(&u));
        assert_eq!(u, (b.next_u64() >> 11) as f64 / 9_007_199_254_740_992.0);
    }
}
