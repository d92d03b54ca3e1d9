#![no_main]
//! Fuzz target `discover`: see `beacon_rl_fuzz::discover` for the oracles.

libfuzzer_sys::fuzz_target!(|data: &[u8]| beacon_rl_fuzz::discover::run(data));
