#![no_main]
// See fuzz/src/auth_exchange.rs for the input format and the invariants checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| farflash_fuzz::auth_exchange::run(data));
