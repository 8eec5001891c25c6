//! A server started in-process: a RAM namespace served on 127.0.0.1,
//! farflash's own host connecting; reload from the configuration source
//! and over the management socket; shutdown; a start that fails.

use anyhow::Result;
use farflash_core::config::Config;
use farflash_host::{ConnectOptions, Controller, IoQueueOptions};
use farflash_server::{Options, RpcSocket, Server};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.farflash:server-test";

/// Generous: the machine running the suite may be loaded.
const PATIENCE: Duration = Duration::from_secs(30);

fn toml(listen: &str, namespaces: &[&str]) -> String {
    let mut t =
        format!("listen = ['{listen}']\n[transport]\nthreads = 1\n[[subsystem]]\nnqn = '{NQN}'\n");
    for ns in namespaces {
        t.push_str(&format!("[[subsystem.namespace]]\n{ns}\n"));
    }
    t
}

/// A configuration source the test can change: the TOML it holds.
fn source(text: &Arc<Mutex<String>>) -> farflash_server::ConfigSource {
    let text = text.clone();
    Box::new(move || {
        let t = text
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .clone();
        Ok::<Config, anyhow::Error>(farflash_control::config::from_toml(&t, "test")?)
    })
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ff-server-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Waits until `done` holds, failing after [`PATIENCE`].
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < PATIENCE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn rpc(sock: &Path, method: &str, params: Value) -> Value {
    let answer = farflash_mgmt::server::call(sock, method, params).expect("management call");
    assert!(answer.get("error").is_none(), "{method}: {answer}");
    answer["result"].clone()
}

#[test]
fn a_server_serves_reloads_and_shuts_down() -> Result<()> {
    let dir = scratch("serve");
    let sock = dir.join("rpc.sock");
    let text = Arc::new(Mutex::new(toml(
        "127.0.0.1:0",
        &["backend = 'ram'\nsize = '1M'"],
    )));
    let opts = Options::new(source(&text)).rpc_socket(RpcSocket::Path(sock.clone()));
    let server = Server::start(opts)?;
    let addr = server.addrs()[0];
    assert_eq!(server.rpc_socket(), Some(sock.as_path()));

    let mut copts = ConnectOptions::new(addr.to_string(), NQN);
    copts.command_timeout = PATIENCE;
    let ctrl = Controller::connect(&copts)?;
    let mut q = ctrl.io_queue(
        1,
        IoQueueOptions {
            depth: 4,
            max_io: 16 * 1024,
        },
    )?;
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    q.write_at(1, 8, 8, &data)?;
    let mut back = vec![0u8; 4096];
    q.read_at(1, 8, 8, &mut back)?;
    assert_eq!(back, data);
    assert_eq!(ctrl.active_namespaces()?, [1]);

    // A reload applies what the source now says; the host sees it.
    *text.lock().expect("lock") = toml(
        &addr.to_string(),
        &[
            "backend = 'ram'\nsize = '1M'",
            "backend = 'null'\nsize = '2M'",
        ],
    );
    let report = server.reload()?;
    assert_eq!(report.changed, [(NQN.to_owned(), vec![2])]);
    wait_for("the host to see namespace 2", || {
        ctrl.active_namespaces().is_ok_and(|l| l == [1, 2])
    });

    // A bad configuration changes nothing.
    *text.lock().expect("lock") = toml(&addr.to_string(), &["backend = 'ram'\nsize = 'lots'"]);
    let e = server.reload().expect_err("a bad size");
    assert!(format!("{e:#}").contains("size"), "{e:#}");
    assert_eq!(server.target().subsystems()[0].namespaces().len(), 2);

    // The management socket reaches the same target, and load_config the
    // same path: the second namespace removed.
    let subs = rpc(&sock, "subsystem_list", json!({}));
    assert_eq!(subs[0]["namespaces"].as_array().map(Vec::len), Some(2));
    let one = toml(&addr.to_string(), &["backend = 'ram'\nsize = '1M'"]);
    let r = rpc(&sock, "load_config", json!({"toml": one}));
    assert_eq!(r["namespaces_changed"], json!([{"nqn": NQN, "nsids": [2]}]));
    wait_for("the host to see namespace 2 go", || {
        ctrl.active_namespaces().is_ok_and(|l| l == [1])
    });
    q.read_at(1, 8, 8, &mut back)?;
    assert_eq!(back, data, "the RAM namespace kept its data across reloads");

    drop(q);
    ctrl.shutdown()?;
    let totals = server.shutdown()?;
    assert!(
        totals.write_cmds >= 1 && totals.read_cmds >= 2,
        "{totals:?}"
    );
    // Everything stopped: the listener and the socket are gone.
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "{addr} still accepts"
    );
    assert!(!sock.exists(), "the socket file was left");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[test]
fn a_start_that_fails_leaves_nothing_running() -> Result<()> {
    let dir = scratch("fail");
    let text = Arc::new(Mutex::new(toml(
        "127.0.0.1:0",
        &["backend = 'ram'\nsize = '1M'"],
    )));
    // The listener binds; the management socket cannot be had.
    let sock = dir.join("missing").join("rpc.sock");
    let opts = Options::new(source(&text)).rpc_socket(RpcSocket::Path(sock.clone()));
    let e = Server::start(opts)
        .err()
        .expect("no directory for the socket");
    assert!(format!("{e:#}").contains("management socket"), "{e:#}");

    // A listener taken is an error naming it; once the address is free,
    // a start there serves.
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = taken.local_addr()?.to_string();
    *text.lock().expect("lock") = toml(&addr, &["backend = 'ram'\nsize = '1M'"]);
    let e = Server::start(Options::new(source(&text)))
        .err()
        .expect("address in use");
    assert!(format!("{e:#}").contains(&addr), "{e:#}");
    drop(taken);
    let server = Server::start(Options::new(source(&text)))?;
    assert_eq!(server.addrs()[0].to_string(), addr);
    server.shutdown()?;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// One HTTP GET of `path` on `addr`: the body.
fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the metrics listener");
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("response");
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

#[test]
fn a_server_with_metrics_exports_what_a_host_did() -> Result<()> {
    let text = Arc::new(Mutex::new(toml(
        "127.0.0.1:0",
        &["backend = 'ram'\nsize = '1M'"],
    )));
    let metrics = "127.0.0.1:0".parse().ok();
    let server = Server::start(Options::new(source(&text)).metrics(metrics))?;
    let scrape = server.metrics_addr().expect("a metrics listener");
    let mut copts = ConnectOptions::new(server.addrs()[0].to_string(), NQN);
    copts.command_timeout = PATIENCE;
    copts.hostnqn = "nqn.2026-11.io.farflash:metrics-host".into();
    let ctrl = Controller::connect(&copts)?;
    let mut q = ctrl.io_queue(
        1,
        IoQueueOptions {
            depth: 4,
            max_io: 16 * 1024,
        },
    )?;
    let data = vec![0x5au8; 4096];
    for lba in 0..3 {
        q.write_at(1, lba * 8, 8, &data)?;
    }
    let mut back = vec![0u8; 4096];
    q.read_at(1, 0, 8, &mut back)?;
    let body = http_get(scrape, "/metrics");
    let series = |name: &str, op: &str| {
        body.lines()
            .find(|l| l.starts_with(name) && l.contains(&format!("op=\"{op}\"")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    assert_eq!(
        series("farflash_commands_total", "write"),
        Some(3.0),
        "{body}"
    );
    assert_eq!(
        series("farflash_commands_total", "read"),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        series("farflash_data_bytes_total", "write"),
        Some(12288.0),
        "{body}"
    );
    // Every family, in the order the collector writes them (the classic
    // text format: counters end in _total).
    let families: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let want = [
        "farflash_commands_total",
        "farflash_data_bytes_total",
        "farflash_command_errors_total",
        "farflash_media_errors_total",
        "farflash_throttled_seconds_total",
        "farflash_outstanding_commands",
        "farflash_latency_seconds",
        "farflash_connections",
        "farflash_controllers",
        "farflash_namespace_size_bytes",
        "farflash_keep_alive_expiries_total",
        "farflash_authentication_failures_total",
        "farflash_tolerated_total",
        "farflash_listeners",
        "farflash_worker_sleeps_total",
        "farflash_worker_missed_sleeps_total",
        "farflash_worker_slept_seconds_total",
    ];
    let ours: Vec<&str> = families
        .iter()
        .copied()
        .filter(|f| f.starts_with("farflash_"))
        .collect();
    assert_eq!(ours, want, "{body}");
    drop(q);
    ctrl.shutdown()?;
    server.shutdown()?;
    Ok(())
}

/// The value of the series `name{labels...}` whose line has every one of
/// `labels` (`key="value"`).
fn metric(body: &str, name: &str, labels: &[&str]) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|w| l.contains(w)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A server with one worker in `poll` mode, its management socket and
/// metrics; a host connected with an I/O queue.
fn worker_server(
    name: &str,
    poll: &str,
) -> Result<(Server, PathBuf, std::net::SocketAddr, Controller)> {
    let dir = scratch(name);
    let sock = dir.join("rpc.sock");
    let t = toml("127.0.0.1:0", &["backend = 'ram'\nsize = '1M'"])
        .replace("threads = 1\n", &format!("threads = 1\npoll = '{poll}'\n"));
    let text = Arc::new(Mutex::new(t));
    let opts = Options::new(source(&text))
        .rpc_socket(RpcSocket::Path(sock.clone()))
        .metrics("127.0.0.1:0".parse().ok());
    let server = Server::start(opts)?;
    let scrape = server.metrics_addr().expect("a metrics listener");
    let mut copts = ConnectOptions::new(server.addrs()[0].to_string(), NQN);
    copts.command_timeout = PATIENCE;
    let ctrl = Controller::connect(&copts)?;
    Ok((server, sock, scrape, ctrl))
}

#[test]
fn the_workers_sleeps_are_counted_in_stats_and_metrics() -> Result<()> {
    // The default polling (hybrid): a host paced at 300 µs teaches the
    // loop its gaps; it then sleeps on its timer through most of each,
    // and idle between the bursts.
    let (server, sock, scrape, ctrl) = worker_server("sleeps", "hybrid")?;
    let mut q = ctrl.io_queue(
        1,
        IoQueueOptions {
            depth: 4,
            max_io: 16 * 1024,
        },
    )?;
    let mut back = vec![0u8; 4096];
    let worker = |sock: &Path| rpc(sock, "stats", json!({}))["workers"][0].clone();
    wait_for("timed sleeps of the default polling", || {
        for _ in 0..100 {
            q.read_at(1, 0, 8, &mut back).expect("read");
            std::thread::sleep(Duration::from_micros(300));
        }
        worker(&sock)["timed_sleeps"].as_u64() > Some(0)
    });
    let w = worker(&sock);
    assert_eq!(w["worker"], 0, "{w}");
    let idle = w["idle_sleeps"].as_u64().expect("idle_sleeps");
    assert!(idle > 0, "{w}");
    assert!(w["slept_ns"].as_u64() > Some(0), "{w}");
    assert!(
        w["missed_sleeps"].as_u64() <= w["timed_sleeps"].as_u64(),
        "{w}"
    );
    // The same counters on /metrics (read after: at least as high).
    let body = http_get(scrape, "/metrics");
    let timed = metric(
        &body,
        "farflash_worker_sleeps_total",
        &["worker=\"0\"", "kind=\"timed\""],
    );
    assert!(timed >= w["timed_sleeps"].as_f64(), "{body}");
    let idle_m = metric(&body, "farflash_worker_sleeps_total", &["kind=\"idle\""]);
    assert!(idle_m >= Some(idle as f64), "{body}");
    let slept = metric(
        &body,
        "farflash_worker_slept_seconds_total",
        &["worker=\"0\""],
    );
    assert!(slept > Some(0.0), "{body}");
    assert!(metric(
        &body,
        "farflash_worker_missed_sleeps_total",
        &["worker=\"0\""]
    )
    .is_some());
    drop(q);
    ctrl.shutdown()?;
    server.shutdown()?;

    // Busy polling never sleeps: the counters stay at zero.
    let (server, sock, scrape, ctrl) = worker_server("no-sleeps", "always")?;
    let mut q = ctrl.io_queue(
        1,
        IoQueueOptions {
            depth: 4,
            max_io: 16 * 1024,
        },
    )?;
    for _ in 0..100 {
        q.read_at(1, 0, 8, &mut back)?;
        std::thread::sleep(Duration::from_micros(300));
    }
    let w = worker(&sock);
    assert_eq!(
        (
            w["timed_sleeps"].as_u64(),
            w["idle_sleeps"].as_u64(),
            w["slept_ns"].as_u64()
        ),
        (Some(0), Some(0), Some(0)),
        "{w}"
    );
    let body = http_get(scrape, "/metrics");
    assert_eq!(
        metric(&body, "farflash_worker_sleeps_total", &["kind=\"idle\""]),
        Some(0.0),
        "{body}"
    );
    drop(q);
    ctrl.shutdown()?;
    server.shutdown()?;
    Ok(())
}
