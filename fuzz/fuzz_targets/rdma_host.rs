#![no_main]
// See fuzz/src/rdma_host.rs for the input format and the invariants checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| farflash_fuzz::rdma_host::run(data));
