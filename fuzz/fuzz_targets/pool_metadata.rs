#![no_main]
// See fuzz/src/pool_metadata.rs for the input format and the invariants checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| farflash_fuzz::pool_metadata::run(data));
