#![no_main]
// See fuzz/src/rpc_request.rs for the input format and the invariants checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| farflash_fuzz::rpc_request::run(data));
