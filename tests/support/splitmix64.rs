//! The random source of the tests and benches: `rand_xoshiro`'s SplitMix64 with the seed as its
//! state (Vigna's `splitmix64.c`), plus a uniform draw from [0, 1) from the top 53 bits.
#![allow(dead_code)]

use rand_xoshiro::rand_core::{RngCore, SeedableRng};

pub struct SplitMix64(rand_xoshiro::SplitMix64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(rand_xoshiro::SplitMix64::from_seed(seed.to_le_bytes()))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}
