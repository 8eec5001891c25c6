#![no_main]
// See fuzz/src/command_layer.rs for the input format and the invariants checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| farflash_fuzz::command_layer::run(data));
