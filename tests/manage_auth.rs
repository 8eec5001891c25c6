//! Host keys through the management API (issues #12 and #13): `host_allow`
//! with DH-HMAC-CHAP secrets on a running `farflash serve`, then the
//! target asks that host to authenticate; new keys replace old ones for the
//! next authentication without touching a live controller; `save_config`
//! keeps them (in a 0600 file) and no answer ever repeats a secret.

mod common;

use common::{Serve, TempDir, NQN};
use farflash_auth::{HashId, Secret};
use farflash_host::{ConnectOptions, Controller, IoQueueOptions};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:7d3c1b2a-0000-4000-8000-0000000a17e5";

fn secret(seed: u8, hmac: Option<HashId>) -> String {
    let key: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(29) ^ seed).collect();
    Secret::new(&key, hmac).unwrap().to_dhhc().to_string()
}

fn rpc(sock: &Path, method: &str, params: Value) -> (Value, String) {
    let req = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    common::rpc_exchange(sock, req.to_string().as_bytes())
}

fn opts(addr: &str, host_key: Option<&str>, ctrl_key: Option<&str>) -> ConnectOptions {
    let mut o = ConnectOptions::new(addr.to_owned(), NQN);
    o.hostnqn = HOST.into();
    o.command_timeout = Duration::from_secs(20);
    o.dhchap_secret = host_key.map(|k| Secret::parse(k).unwrap());
    o.dhchap_ctrl_secret = ctrl_key.map(|k| Secret::parse(k).unwrap());
    o
}

/// Connects, writes a block and reads it back through one I/O queue.
fn round_trip(o: &ConnectOptions, lba: u64) -> Result<(), String> {
    let ctrl = Controller::connect_with_queues(o, 1).map_err(|e| e.to_string())?;
    let mut q = ctrl
        .io_queue(
            1,
            IoQueueOptions {
                depth: 4,
                max_io: 8192,
            },
        )
        .map_err(|e| e.to_string())?;
    let data = vec![lba as u8 ^ 0x3c; 4096];
    q.write_at(1, lba, 8, &data).map_err(|e| e.to_string())?;
    let mut back = vec![0; 4096];
    q.read_at(1, lba, 8, &mut back).map_err(|e| e.to_string())?;
    assert_eq!(back, data);
    drop(q);
    ctrl.shutdown().map_err(|e| e.to_string())
}

#[test]
fn host_keys_set_at_run_time_are_required_replaced_and_saved() {
    let dir = TempDir::new("manage-auth");
    let sock = dir.0.join("rpc.sock");
    let serve = Serve::start(&["--ram", "16M", "--rpc-socket", sock.to_str().unwrap()]);
    let (hk, ck) = (secret(1, Some(HashId::Sha256)), secret(2, None));

    // Before: any host, no authentication.
    round_trip(&opts(&serve.addr, None, None), 0).expect("open subsystem");

    let (a, text) = rpc(
        &sock,
        "host_allow",
        json!({"nqn": NQN, "host": HOST, "dhchap_key": hk, "dhchap_ctrl_key": ck,
               "dhchap_hash": ["sha512", "sha256"], "dhchap_dhgroup": ["ffdhe2048", "null"]}),
    );
    assert!(a.get("error").is_none(), "host_allow: {a}");
    assert!(
        !text.contains(&hk[10..30]) && !text.contains(&ck[10..30]),
        "{text}"
    );

    // The host must now authenticate: bidirectionally with both keys...
    round_trip(&opts(&serve.addr, Some(&hk), Some(&ck)), 8).expect("authenticated host");
    // ...and a host without its secret, or with another, is refused.
    let e = round_trip(&opts(&serve.addr, None, None), 16).expect_err("no secret");
    assert!(!e.contains(&hk[10..30]), "{e}");
    round_trip(&opts(&serve.addr, Some(&secret(9, None)), None), 16).expect_err("wrong secret");

    // A live controller survives a key change; the next authentication
    // needs the new key.
    let live = Controller::connect_with_queues(&opts(&serve.addr, Some(&hk), Some(&ck)), 1)
        .expect("connect before the key change");
    let hk2 = secret(3, Some(HashId::Sha512));
    let (a, text) = rpc(
        &sock,
        "host_allow",
        json!({"nqn": NQN, "host": HOST, "dhchap_key": hk2}),
    );
    assert!(a.get("error").is_none(), "host_allow (new key): {a}");
    assert!(!text.contains(&hk2[10..30]), "{text}");
    live.active_namespaces()
        .expect("a live controller keeps working after the key change");
    round_trip(&opts(&serve.addr, Some(&hk), None), 24).expect_err("old key");
    round_trip(&opts(&serve.addr, Some(&hk2), None), 24).expect("new key");
    drop(live);

    // Ill-formed keys are refused without being repeated.
    let bad = "DHHC-1:00:c2VjcmV0LWJ1dC1ub3QtYmFzZTY0LWNyYw==:";
    let (a, text) = rpc(
        &sock,
        "host_allow",
        json!({"nqn": NQN, "host": HOST, "dhchap_key": bad}),
    );
    assert!(a.get("error").is_some(), "{a}");
    assert!(!text.contains("c2VjcmV0"), "{text}");
    let (a, _) = rpc(
        &sock,
        "host_allow",
        json!({"nqn": NQN, "host": HOST, "dhchap_ctrl_key": ck}),
    );
    assert!(
        a.get("error").is_some(),
        "a controller key without a host key: {a}"
    );

    // save_config writes the key (the target needs it after a restart)
    // into a file only its owner can read.
    let saved = dir.0.join("saved.toml");
    let (a, text) = rpc(&sock, "save_config", json!({"path": saved}));
    assert!(a.get("error").is_none(), "save_config: {a}");
    assert!(!text.contains(&hk2[10..30]), "{text}");
    let body = std::fs::read_to_string(&saved).unwrap();
    assert!(
        body.contains(&hk2),
        "saved configuration lacks the host key"
    );
    let mode = std::fs::metadata(&saved).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "saved configuration readable by others");
}
