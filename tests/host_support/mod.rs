//! Helpers shared by the host integration tests (`tests/host_*.rs`):
//! starting `farflash serve` on a free loopback port, running the CLI.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub fn farflash() -> &'static str {
    env!("CARGO_BIN_EXE_farflash")
}

/// A TCP port nobody listens on right now (127.0.0.1).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// `farflash serve` on 127.0.0.1:port, killed on drop.
pub struct Serve {
    pub child: Child,
    pub port: u16,
    pub nqn: String,
}

impl Serve {
    /// Starts a target with one RAM namespace of `ram` (e.g. "64M") and waits
    /// for "listening on".
    pub fn start(ram: &str, extra: &[&str]) -> Serve {
        let port = free_port();
        let nqn = format!("nqn.2026-11.io.farflash.test:host{port}");
        let mut child = Command::new(farflash())
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--ram", ram, "--nqn", &nqn, "--log-level", "warn"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn farflash serve");
        let (tx, rx) = mpsc::channel();
        for out in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        let mut seen = vec![];
        loop {
            match rx.recv_timeout(Duration::from_secs(20)) {
                Ok(l) => {
                    if l.contains("listening on") {
                        break;
                    }
                    seen.push(l);
                }
                Err(_) => {
                    let _ = child.kill();
                    panic!("farflash serve did not print 'listening on': {seen:?}");
                }
            }
        }
        // Keep draining output so the target never blocks on a full pipe.
        std::thread::spawn(move || while rx.recv().is_ok() {});
        Serve { child, port, nqn }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `farflash ARGS`, returning its output (never panics on failure).
pub fn cli(args: &[&str]) -> Output {
    Command::new(farflash())
        .args(args)
        .output()
        .expect("run farflash")
}

/// Runs `farflash ARGS`, asserting success; returns stdout.
pub fn cli_ok(args: &[&str]) -> String {
    let o = cli(args);
    assert!(
        o.status.success(),
        "farflash {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Parses JSON printed by a CLI command.
pub fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("bad JSON ({e}):\n{s}"))
}
