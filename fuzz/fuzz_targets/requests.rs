//! Fuzz target `requests`: sequences of valid-looking requests against a real in-process
//! server, with the namespace checked after each (see `surge_fuzz::requests`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| surge_fuzz::requests::run(data));
