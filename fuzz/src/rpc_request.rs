//! `rpc_request`: bytes as the management socket would receive them, line
//! by line, through the JSON-RPC parser and the methods of a real target
//! (one subsystem, a null namespace). Invariants: every answer is a JSON-RPC
//! 2.0 response (`result` xor `error`, a known error code), nothing panics,
//! and the target's configuration stays valid after every line.
//!
//! Lines that name a `"path"` are skipped: they would make the target create
//! or write files wherever the fuzzer points; so are lines naming `rbd` (an
//! RBD namespace reads the ceph.conf given and connects to its cluster).

use farflash_control::build_subsystems;
use farflash_control::reload::current_config;
use farflash_core::config::{BackendKind, Config, NamespaceConfig, SubsystemConfig};
use farflash_core::Target;
use farflash_mgmt::jsonrpc::handle_line;
use farflash_mgmt::Api;
use serde_json::Value;
use std::sync::Arc;

const CODES: &[i64] = &[
    -32700, -32600, -32601, -32602, -32603, -32001, -32002, -32003, -32004,
];

fn check(v: &Value) {
    let one = |r: &Value| {
        assert_eq!(r["jsonrpc"], "2.0", "{r}");
        assert!(r.get("id").is_some(), "{r}");
        match (r.get("result"), r.get("error")) {
            (Some(_), None) => {}
            (None, Some(e)) => {
                let c = e["code"].as_i64().expect("an error code");
                assert!(CODES.contains(&c), "unknown code {c}: {r}");
                assert!(e["message"].is_string(), "{r}");
            }
            _ => panic!("neither result nor error: {r}"),
        }
    };
    match v {
        Value::Array(a) => a.iter().for_each(one),
        r => one(r),
    }
}

pub fn run(data: &[u8]) {
    let cfg = Config {
        subsystems: vec![SubsystemConfig::new(
            "nqn.2026-11.io.farflash:fuzz",
            vec![NamespaceConfig::sized(BackendKind::Null, 1 << 20)],
        )],
        ..Config::default()
    };
    let Ok(subs) = build_subsystems(&cfg) else {
        return;
    };
    // A listener address (not bound: listener changes are refused here).
    let target = Target::new(
        subs,
        cfg.transport.clone(),
        vec![([127, 0, 0, 1], 4420).into()],
    );
    let api = Api::new(Arc::clone(&target));
    for line in data.split(|&b| b == b'\n').take(64) {
        if line.windows(6).any(|w| w == b"\"path\"") || line.windows(4).any(|w| w == b"path") {
            continue;
        }
        // Sizes are capped so a RAM namespace cannot ask for the fuzzer's memory.
        if line.windows(3).any(|w| w == b"ram") {
            continue;
        }
        // An RBD namespace would read ceph.conf files and connect to whatever
        // cluster they name (tests/rbd.rs covers that path with a real one).
        if line.windows(3).any(|w| w == b"rbd") {
            continue;
        }
        if let Some(answer) = handle_line(line, |r| api.call(r)) {
            check(&answer);
        }
        current_config(&target)
            .validate()
            .expect("the running configuration stays valid");
    }
}
