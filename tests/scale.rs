//! Issue 33 against a real `farflash serve`: a discovery log of 1,024
//! subsystems read whole by the host and by `farflash discover`, and in
//! libnvme's pieces with GENCTR checked; the limits on subsystems and
//! namespaces refused by name over the management API and at start, with a
//! verifying host undisturbed; file namespaces against the open-file limit
//! (raised at start, a named error where it cannot be).

mod common;

use common::{eventually, free_port, rpc_exchange, Serve, TempDir, VerifiedIo};
use farflash_host::{ConnectOptions, Controller};
use farflash_wire::discovery::{decode_header, DiscEntry, DISC_ENTRY_LEN, DISC_HEADER_LEN};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const PREFIX: &str = "nqn.2026-11.io.farflash.scale-test:s";

fn rpc(sock: &Path, method: &str, params: Value) -> Value {
    let req = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    rpc_exchange(sock, req.to_string().as_bytes()).0
}

fn ok(sock: &Path, method: &str, params: Value) -> Value {
    let a = rpc(sock, method, params);
    assert!(a.get("error").is_none(), "{method}: {a}");
    a["result"].clone()
}

/// The error of an answer: (code, message).
fn error(a: &Value) -> (i64, String) {
    let e = &a["error"];
    let code = e["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {a}"));
    (code, e["message"].as_str().unwrap_or("").to_owned())
}

/// JSON-RPC code of a limit (`farflash_mgmt::jsonrpc::LIMIT_EXCEEDED`).
const LIMIT: i64 = farflash_mgmt::jsonrpc::LIMIT_EXCEEDED;

/// `listen` on `port`, a `[transport]` table, then `subs` subsystems of
/// `per` null namespaces each (`PREFIX` + index).
fn null_config(port: u16, transport: &str, subs: usize, per: usize) -> String {
    let mut t = format!("listen = [\"127.0.0.1:{port}\"]\n[transport]\nthreads = 1\n{transport}\n");
    for s in 0..subs {
        let _ = writeln!(t, "[[subsystem]]\nnqn = \"{PREFIX}{s:05}\"");
        for _ in 0..per {
            t.push_str("  [[subsystem.namespace]]\n  backend = \"null\"\n  size = \"1M\"\n");
        }
    }
    t
}

fn discover_cli(port: u16) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .args([
            "discover",
            "-a",
            "127.0.0.1",
            "-s",
            &port.to_string(),
            "-k",
            "0",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_discovery_log_of_1024_subsystems_is_read_whole_and_in_pieces() {
    let dir = TempDir::new("scale-disc");
    let port = free_port();
    let cfg = dir.0.join("disc.toml");
    std::fs::write(&cfg, null_config(port, "", 1024, 1)).unwrap();
    let sock = dir.0.join("rpc.sock");
    let serve = Serve::start_config(&cfg, &sock, port);

    // The host's reader: header, the log (1 MiB + 1 KiB, more than one
    // transfer of MDTS), GENCTR compared.
    let opts = ConnectOptions::new(serve.addr.clone(), farflash_wire::DISCOVERY_NQN);
    let c = Controller::connect(&opts).unwrap();
    let (genctr, entries) = c.discovery_log().unwrap();
    assert_eq!(entries.len(), 1025);
    for (i, e) in entries.iter().take(1024).enumerate() {
        assert_eq!(e.subnqn, format!("{PREFIX}{i:05}"));
    }

    // libnvme's reader (nvme discover): 20 bytes of header, the entries
    // 4 KiB at a time from offset 1024, the header again.
    let pieces = |between: &mut dyn FnMut(usize)| -> (u64, u64, u64, Vec<DiscEntry>) {
        let (g, n) = decode_header(&c.get_log_page(0x70, 0, 20, 0).unwrap());
        let total = n as usize * DISC_ENTRY_LEN;
        let mut raw = Vec::new();
        let mut i = 0;
        while raw.len() < total {
            let len = (total - raw.len()).min(4096);
            let off = (DISC_HEADER_LEN + raw.len()) as u64;
            raw.extend(c.get_log_page(0x70, 0, len as u32, off).unwrap());
            i += 1;
            between(i);
        }
        let (g2, _) = decode_header(&c.get_log_page(0x70, 0, 20, 0).unwrap());
        let list = raw
            .chunks_exact(DISC_ENTRY_LEN)
            .map(DiscEntry::decode)
            .collect();
        (g, g2, n, list)
    };
    let (g1, g2, n, list) = pieces(&mut |_| {});
    assert_eq!((g1, g2, n), (genctr, genctr, 1025));
    assert_eq!(list, entries, "the pieces are the whole log");

    // A subsystem created while the host reads: the header read last has
    // moved, and the next read lists it.
    let (g1, g2, _, _) = pieces(&mut |i| {
        if i == 100 {
            ok(
                &sock,
                "subsystem_create",
                json!({"nqn": format!("{PREFIX}new")}),
            );
        }
    });
    assert!(g2 > g1, "GENCTR {g1} -> {g2}");
    let (g3, g4, n, list) = pieces(&mut |_| {});
    assert_eq!((g3, g4, n), (g2, g2, 1026));
    assert!(list.iter().any(|e| e.subnqn == format!("{PREFIX}new")));
    drop(c);

    // `farflash discover` lists every one.
    let out = discover_cli(port);
    assert!(
        out.contains("Number of Records 1026"),
        "{}",
        &out[..200.min(out.len())]
    );
    let listed = out.matches(&format!("subnqn:  {PREFIX}")).count();
    assert_eq!(listed, 1025);
}

#[test]
fn limits_are_refused_by_name_and_nothing_else_moves() {
    let dir = TempDir::new("scale-limits");
    let port = free_port();
    let limits = "[transport.limits]\nmax_subsystems = 3\nmax_namespaces_per_subsystem = 4\nmax_namespaces = 7";
    let mut text = null_config(port, limits, 2, 2);
    // The verifying host's subsystem, one RAM namespace.
    let _ = write!(
        text,
        "[[subsystem]]\nnqn = \"{}\"\n  [[subsystem.namespace]]\n  backend = \"ram\"\n  size = \"8M\"\n",
        common::NQN
    );
    let cfg = dir.0.join("limits.toml");
    std::fs::write(&cfg, &text).unwrap();
    let sock = dir.0.join("rpc.sock");
    let serve = Serve::start_config(&cfg, &sock, port);
    let mut opts = ConnectOptions::new(serve.addr.clone(), common::NQN);
    opts.command_timeout = Duration::from_secs(10);
    let io = VerifiedIo::start(opts, 0, 4096);
    let before = ok(&sock, "subsystem_list", json!({}));

    let s0 = format!("{PREFIX}00000");
    let s1 = format!("{PREFIX}00001");
    let add = |nqn: &str| {
        rpc(
            &sock,
            "namespace_add",
            json!({"nqn": nqn, "backend": "null", "size": "1M"}),
        )
    };
    ok(
        &sock,
        "namespace_add",
        json!({"nqn": s0, "backend": "null", "size": "1M"}),
    );
    ok(
        &sock,
        "namespace_add",
        json!({"nqn": s0, "backend": "null", "size": "1M"}),
    );
    let (code, m) = error(&add(&s0));
    assert_eq!(code, LIMIT, "{m}");
    assert!(
        m.contains("transport.limits.max_namespaces_per_subsystem (4)"),
        "{m}"
    );
    // 4 + 2 + 1 = 7 namespaces in all.
    let (code, m) = error(&add(&s1));
    assert_eq!(code, LIMIT, "{m}");
    assert!(m.contains("transport.limits.max_namespaces (7)"), "{m}");
    let (code, m) = error(&rpc(
        &sock,
        "subsystem_create",
        json!({"nqn": format!("{PREFIX}x")}),
    ));
    assert_eq!(code, LIMIT, "{m}");
    assert!(m.contains("transport.limits.max_subsystems (3)"), "{m}");
    // A configuration over a limit, loaded at run time.
    let over = dir.0.join("over.toml");
    std::fs::write(&over, null_config(port, limits, 1, 5)).unwrap();
    let (code, m) = error(&rpc(&sock, "load_config", json!({"path": over})));
    assert_eq!(code, LIMIT, "{m}");
    assert!(m.contains("max_namespaces_per_subsystem (4)"), "{m}");
    let (code, m) = error(&rpc(
        &sock,
        "load_config",
        json!({"toml": null_config(port, "", 4, 1)}),
    ));
    assert_eq!(code, LIMIT, "{m}");
    assert!(m.contains("transport.limits.max_subsystems (3)"), "{m}");

    // Only the two namespaces that fitted were added.
    let after = ok(&sock, "subsystem_list", json!({}));
    let count = |v: &Value, nqn: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|s| s["nqn"] == nqn)
            .unwrap()["namespaces"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(count(&before, &s0) + 2, count(&after, &s0));
    assert_eq!(count(&before, &s1), count(&after, &s1));
    assert_eq!(after.as_array().unwrap().len(), 3);
    let st = io.finish().expect("the verifying host saw an error");
    assert!(st.ops > 0);

    // At start: the same configuration is refused, naming the setting.
    let out = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .args(["serve", "--rpc-socket", "none", "--config"])
        .arg(&over)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_namespaces_per_subsystem (4)"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// `farflash serve --config CFG` under `ulimit` LIMITS (a shell runs it).
fn serve_limited(limits: &str, cfg: &Path, sock: &Path, log: &Path) -> Child {
    let script = format!(
        "ulimit {limits} && exec \"$0\" serve --log-level info --threads 1 --config \"$1\" --rpc-socket \"$2\""
    );
    Command::new("bash")
        .args(["-c", &script, env!("CARGO_BIN_EXE_farflash")])
        .arg(cfg)
        .arg(sock)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

/// `files` file namespaces on sparse 1 MiB files, one subsystem.
fn file_config(dir: &Path, port: u16, files: usize) -> PathBuf {
    let mut t =
        format!("listen = [\"127.0.0.1:{port}\"]\n[[subsystem]]\nnqn = \"{PREFIX}files\"\n");
    for i in 0..files {
        let p = dir.join(format!("ns{i}.img"));
        std::fs::File::create(&p).unwrap().set_len(1 << 20).unwrap();
        let _ = writeln!(
            t,
            "  [[subsystem.namespace]]\n  backend = \"file\"\n  path = \"{}\"",
            p.display()
        );
    }
    let cfg = dir.join("files.toml");
    std::fs::write(&cfg, t).unwrap();
    cfg
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The soft limit of "Max open files" in /proc/PID/limits.
fn soft_nofile(pid: u32) -> u64 {
    let l = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = l.lines().find(|l| l.starts_with("Max open files")).unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

#[test]
fn file_namespaces_live_within_the_open_file_limit_or_are_refused_by_name() {
    let dir = TempDir::new("scale-nofile");
    let log = dir.0.join("serve.log");
    let sock = dir.0.join("rpc.sock");

    // The soft limit is raised to the hard one: 300 files start under a
    // soft limit of 256.
    let port = free_port();
    let cfg = file_config(&dir.0, port, 300);
    let mut child = Killed(serve_limited(
        "-Sn 256 && ulimit -Hn 2048",
        &cfg,
        &sock,
        &log,
    ));
    let up = eventually(Duration::from_secs(30), || {
        assert!(
            matches!(child.0.try_wait(), Ok(None)),
            "{}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up, "{}", std::fs::read_to_string(&log).unwrap_or_default());
    let pid = child.0.id();
    assert_eq!(soft_nofile(pid), 2048);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("RLIMIT_NOFILE) raised from 256 to 2048"),
        "{text}"
    );
    assert!(common::fd_count(pid) > 300);
    drop(child);

    // A hard limit too low: refused at start, the limit and the remedy named.
    let port = free_port();
    let cfg = file_config(&dir.0, port, 300);
    let mut child = Killed(serve_limited("-n 512", &cfg, &sock, &log));
    let st = eventually(Duration::from_secs(30), || {
        matches!(child.0.try_wait(), Ok(Some(_)))
    });
    assert!(st, "the target kept running under a limit its files exceed");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("RLIMIT_NOFILE") && text.contains("512 (hard limit 512)"),
        "{text}"
    );
    assert!(
        text.contains("ulimit -n") && !text.contains("panicked"),
        "{text}"
    );
    drop(child);

    // Within the limit, then file namespaces added until it is reached: a
    // named JSON-RPC error, and the target goes on serving.
    let port = free_port();
    let cfg = file_config(&dir.0, port, 150);
    let sock3 = dir.0.join("rpc3.sock");
    let mut child = Killed(serve_limited("-n 512", &cfg, &sock3, &log));
    let up = eventually(Duration::from_secs(30), || {
        assert!(
            matches!(child.0.try_wait(), Ok(None)),
            "{}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() && sock3.exists()
    });
    assert!(up, "{}", std::fs::read_to_string(&log).unwrap_or_default());
    let nqn = format!("{PREFIX}files");
    let mut refused = None;
    for i in 0..400 {
        let p = dir.0.join(format!("more{i}.img"));
        std::fs::File::create(&p).unwrap().set_len(1 << 20).unwrap();
        let a = rpc(
            &sock3,
            "namespace_add",
            json!({"nqn": nqn, "backend": "file", "path": p}),
        );
        if a.get("error").is_some() {
            refused = Some((i, error(&a)));
            break;
        }
    }
    let (added, (code, m)) = refused.expect("no limit was reached");
    assert_eq!(code, LIMIT, "{m}");
    assert!(
        m.contains("RLIMIT_NOFILE") && m.contains("ulimit -n"),
        "{m}"
    );
    assert!(added > 0, "a namespace within the limit was refused: {m}");
    let list = ok(&sock3, "subsystem_list", json!({"nqn": nqn}));
    assert_eq!(list[0]["namespaces"].as_array().unwrap().len(), 150 + added);

    // I/O on every namespace: each takes a storage queue (2 descriptors)
    // on the event loop; those past the limit fail their commands, nothing
    // crashes, and management and discovery keep working.
    let total = (150 + added) as u32;
    let mut opts = ConnectOptions::new(format!("127.0.0.1:{port}"), nqn.clone());
    opts.command_timeout = Duration::from_secs(10);
    let c = Controller::connect_with_queues(&opts, 1).unwrap();
    let mut q = c
        .io_queue(
            1,
            farflash_host::IoQueueOptions {
                depth: 8,
                max_io: 4096,
            },
        )
        .unwrap();
    let mut buf = vec![0u8; 512];
    let failed: Vec<u32> = (1..=total)
        .filter(|&nsid| q.read_at(nsid, 0, 1, &mut buf).is_err())
        .collect();
    assert!(
        !failed.is_empty(),
        "{total} storage queues fitted in 512 descriptors?"
    );
    // About (512 - 256 open - 64 kept) / 2 queues fit.
    assert!(
        failed[0] > 50,
        "only {} namespaces had a queue",
        failed[0] - 1
    );
    q.read_at(1, 0, 1, &mut buf)
        .expect("a namespace with a queue still reads");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("cannot open a storage queue") && text.contains("RLIMIT_NOFILE"),
        "{text}"
    );
    // Removing namespaces frees their queues' descriptors (at the event
    // loop's next tick): the failed ones then read.
    for nsid in 2..=120 {
        ok(
            &sock3,
            "namespace_remove",
            json!({"nqn": nqn, "nsid": nsid}),
        );
    }
    let last = *failed.last().unwrap();
    let reads = eventually(Duration::from_secs(10), || {
        q.read_at(last, 0, 1, &mut buf).is_ok()
    });
    assert!(
        reads,
        "namespace {last} still fails after others were removed"
    );
    let out = discover_cli(port);
    assert!(out.contains(&nqn), "{out}");
    assert!(common::fd_count(child.0.id()) < 512);
    drop(q);
    drop(c);
}
