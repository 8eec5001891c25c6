//! Harnesses behind the farflash fuzz targets (`fuzz_targets/*.rs` are
//! one-line wrappers). They live in a library so that `cargo test` can
//! replay the corpus and the regression inputs on a stable toolchain,
//! without libFuzzer or sanitizers (see `tests/replay.rs`).

pub mod auth_exchange;
pub mod build;
pub mod command_decode;
pub mod command_layer;
pub mod config_toml;
pub mod host_connection;
pub mod input;
pub mod iscsi_url;
pub mod opcodes;
pub mod pdu_framing;
pub mod pool_metadata;
pub mod rdma_capsule;
pub mod rdma_host;
pub mod rpc_request;
pub mod stream;
pub mod target_cmds;
pub mod target_conn;
pub mod target_connection;
pub mod target_setup;
pub mod tls_key_file;
pub mod tls_key_format;
pub mod tls_record;
pub mod tls_record_scan;

/// Whether the known bug `name` is to be tolerated in this run:
/// `FUZZ_TOLERATE=name,name` lets a long run look past bugs already
/// recorded under `regressions/` (see docs/fuzzing.md). Unset by default,
/// so `run.sh` and the replay test report every known bug.
pub fn tolerate(name: &str) -> bool {
    static LIST: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    LIST.get_or_init(|| {
        std::env::var("FUZZ_TOLERATE")
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_owned())
            .collect()
    })
    .iter()
    .any(|s| s == name)
}

/// Every target by name, for the replay test and tools.
/// A harness: runs one input, panics on a finding.
pub type Harness = fn(&[u8]);

pub const TARGETS: [(&str, Harness); 16] = [
    ("pdu_framing", pdu_framing::run),
    ("command_decode", command_decode::run),
    ("command_layer", command_layer::run),
    ("target_connection", target_connection::run),
    ("host_connection", host_connection::run),
    ("auth_exchange", auth_exchange::run),
    ("rpc_request", rpc_request::run),
    ("config_toml", config_toml::run),
    ("rdma_capsule", rdma_capsule::run),
    ("iscsi_url", iscsi_url::run),
    ("rdma_host", rdma_host::run),
    ("tls_key_format", tls_key_format::run),
    ("tls_record", tls_record::run),
    ("tls_key_file", tls_key_file::run),
    ("tls_record_scan", tls_record_scan::run),
    ("pool_metadata", pool_metadata::run),
];
