//! Fuzz target `directives`: any text as a batch script through the `#DW` parser (see
//! `surge_fuzz::directives`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| surge_fuzz::directives::run(data));
