#![no_main]
// See fuzz/src/iscsi_url.rs for the input format and the invariants checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| farflash_fuzz::iscsi_url::run(data));
