//! Fuzz target `frame`: arbitrary bytes through the frame header and message decoders (see
//! `surge_fuzz::frame`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| surge_fuzz::frame::run(data));
