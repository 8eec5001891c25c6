#![no_main]
// See fuzz/src/pdu_framing.rs for the input format and the invariants checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| farflash_fuzz::pdu_framing::run(data));
