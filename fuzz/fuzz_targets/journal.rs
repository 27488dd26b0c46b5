//! Fuzz target `journal`: a metadata directory as a crash or a bug may leave it, opened as a
//! restarting server opens it (see `surge_fuzz::journal`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| surge_fuzz::journal::run(data));
