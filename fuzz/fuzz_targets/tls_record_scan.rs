#![no_main]
// See fuzz/src/tls_record_scan.rs for the input format and the invariants checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| farflash_fuzz::tls_record_scan::run(data));
