//! Shared helpers for the integration tests: a `farflash serve` child
//! process on a free 127.0.0.1 port, killed when dropped.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const NQN: &str = "nqn.2026-11.io.farflash:default";

pub struct Serve {
    pub child: Child,
    pub port: u16,
    pub addr: String,
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl Serve {
    /// Starts `farflash serve --listen 127.0.0.1:<free port> ARGS...` and
    /// waits until it prints `listening on`.
    pub fn start(args: &[&str]) -> Serve {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let mut child = Command::new(env!("CARGO_BIN_EXE_farflash"))
            .arg("serve")
            .args(["--listen", &addr, "--log-level", "warn"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn farflash serve");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("listening on") {
                    let _ = tx.send(());
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while rx.recv_timeout(Duration::from_millis(100)).is_err() {
            if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
                let _ = child.kill();
                panic!("farflash serve did not start");
            }
        }
        Serve { child, port, addr }
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends a signal and waits (bounded) for the exit status.
    pub fn signal(&mut self, sig: i32) -> Option<std::process::ExitStatus> {
        // SAFETY: kill(2) on our own child's PID has no memory effects.
        unsafe { libc::kill(self.child.id() as i32, sig) };
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
