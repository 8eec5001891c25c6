//! A read-only grant on a real `farflash serve` (issue 45: the CSI
//! driver's readonly ControllerPublishVolume), with farflash's own host: a
//! host allowed with `read_only` sees the namespace write protected
//! (Identify Namespace NSATTR bit 0) and its Write, Write Zeroes,
//! Deallocate, Copy and fused Compare and Write get Namespace is Write
//! Protected (generic status 20h), while reads and Flush run and another
//! host of the same subsystem writes. The grant is listed, kept by
//! save_config, refused when asked again with another read_only (the
//! error names the field) and set by `farflash ctl host allow --read-only`.

mod common;

use common::{Serve, TempDir, NQN};
use farflash_host::{ConnectOptions, Controller, IoQueue, IoQueueOptions};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const READER: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000e1";
const WRITER: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000e2";
const CTL_READER: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000e3";
/// Namespace is Write Protected, as the host prints a status.
const WP: &str = "sct 0x0 sc 0x20";

fn rpc(sock: &Path, method: &str, params: Value) -> Value {
    let req = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    common::rpc_exchange(sock, req.to_string().as_bytes()).0
}

fn ok(sock: &Path, method: &str, params: Value) -> Value {
    let a = rpc(sock, method, params);
    assert!(a.get("error").is_none(), "{method}: {a}");
    a["result"].clone()
}

fn connect(addr: &str, host: &str) -> (Controller, IoQueue) {
    let mut o = ConnectOptions::new(addr.to_owned(), NQN);
    o.hostnqn = host.into();
    o.command_timeout = Duration::from_secs(20);
    let ctrl = Controller::connect_with_queues(&o, 1).expect("connect");
    let opts = IoQueueOptions {
        depth: 8,
        max_io: 64 << 10,
    };
    let q = ctrl.io_queue(1, opts).expect("I/O queue");
    (ctrl, q)
}

fn refused<T: std::fmt::Debug>(what: &str, r: farflash_host::Result<T>) {
    let e = r.expect_err(what).to_string();
    assert!(
        e.contains(WP) && e.contains("Write Protected"),
        "{what}: {e}"
    );
}

#[test]
fn a_read_only_host_cannot_write_and_another_host_of_the_subsystem_can() {
    let dir = TempDir::new("read-only-host");
    let sock = dir.0.join("rpc.sock");
    let serve = Serve::start(&[
        "--ram",
        "16M",
        "--allow-host",
        WRITER,
        "--rpc-socket",
        sock.to_str().unwrap(),
    ]);
    ok(
        &sock,
        "host_allow",
        json!({"nqn": NQN, "host": READER, "read_only": true}),
    );
    let (rc, mut r) = connect(&serve.addr, READER);
    let (wc, mut w) = connect(&serve.addr, WRITER);
    // NVM Command Set §4.1.5.1 NSATTR bit 0: per controller.
    assert_eq!(rc.identify_ns(1).expect("identify").nsattr & 1, 1);
    assert_eq!(wc.identify_ns(1).expect("identify").nsattr & 1, 0);

    let data = vec![0x3Cu8; 4096];
    w.write_at(1, 64, 8, &data).expect("the writer writes");
    refused("write", r.write_at(1, 64, 8, &vec![0xFFu8; 4096]));
    refused("write zeroes", r.write_zeroes(1, 64, 8));
    refused("deallocate", r.deallocate(1, &[(64, 8)]));
    refused("copy", r.copy(1, 1000, &[(64, 8)]));
    // The fused pair: its Write gets 20h, so its Compare (the status the
    // host reports for the pair) is Command Aborted due to Failed Fused
    // Command (Base §3.4.2); nothing is written.
    let e = r
        .compare_and_write(1, 64, 8, &vec![0u8; 4096], &data)
        .expect_err("compare and write")
        .to_string();
    assert!(e.contains("sct 0x0 sc 0x09"), "compare and write: {e}");
    // Reads and Flush run, and see the writer's data unchanged.
    let mut back = vec![0u8; 4096];
    r.read_at(1, 64, 8, &mut back).expect("the reader reads");
    assert_eq!(back, data);
    r.flush(1).expect("flush");
    // The writer is not affected by the reader's refusals.
    w.write_zeroes(1, 64, 8).expect("the writer zeroes");
    r.read_at(1, 64, 8, &mut back).expect("read");
    assert_eq!(back, vec![0u8; 4096]);

    // Listed; the controllers say which is read-only.
    let subs = ok(&sock, "subsystem_list", json!({"nqn": NQN}));
    assert_eq!(subs[0]["read_only_hosts"], json!([READER]), "{subs}");
    let ctrls = ok(&sock, "controller_list", json!({"nqn": NQN}));
    let ro: Vec<(&str, bool)> = (ctrls.as_array().unwrap().iter())
        .map(|c| {
            (
                c["host"].as_str().unwrap(),
                c["read_only"].as_bool().unwrap(),
            )
        })
        .collect();
    assert!(
        ro.contains(&(READER, true)) && ro.contains(&(WRITER, false)),
        "{ro:?}"
    );

    // Asked again with another read_only: refused, the field named
    // (-32008 Conflict); the same grant again: -32002 Exists.
    for (host, flag) in [(READER, false), (WRITER, true)] {
        let a = rpc(
            &sock,
            "host_allow",
            json!({"nqn": NQN, "host": host, "read_only": flag}),
        );
        assert_eq!(a["error"]["code"], -32008, "{a}");
        assert!(
            a["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("read_only: "),
            "{a}"
        );
    }
    let a = rpc(
        &sock,
        "host_allow",
        json!({"nqn": NQN, "host": READER, "read_only": true}),
    );
    assert_eq!(a["error"]["code"], -32002, "{a}");
    refused("write after the refused change", r.write_at(1, 0, 8, &data));

    // farflash ctl, and save_config keeps the grants.
    let out = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .args(["ctl", "--rpc-socket", sock.to_str().unwrap()])
        .args(["host", "allow", NQN, CTL_READER, "--read-only"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let saved = dir.0.join("saved.toml");
    ok(&sock, "save_config", json!({"path": saved}));
    let text = std::fs::read_to_string(&saved).unwrap();
    let cfg: toml::Value = toml::from_str(&text).unwrap();
    let ro = &cfg["subsystem"][0]["read_only_hosts"];
    assert_eq!(ro.as_array().map(Vec::len), Some(2), "{text}");
    assert!(text.contains(READER) && text.contains(CTL_READER), "{text}");
    let out = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .args(["ctl", "--rpc-socket", sock.to_str().unwrap()])
        .args(["subsystem", "list"])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing.contains(&format!("{READER} (read-only)")),
        "{listing}"
    );
    assert!(
        !listing.contains(&format!("{WRITER} (read-only)")),
        "{listing}"
    );
}
