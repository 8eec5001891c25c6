#![no_main]
// See fuzz/src/config_toml.rs for the invariants checked.
libfuzzer_sys::fuzz_target!(|data: &[u8]| farflash_fuzz::config_toml::run(data));
