#![no_main]
// See fuzz/src/target_connection.rs for the input format and the invariants checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| farflash_fuzz::target_connection::run(data));
