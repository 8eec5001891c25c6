#![no_main]
// See fuzz/src/tls_key_file.rs for the input format and the invariants checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| farflash_fuzz::tls_key_file::run(data));
