//! The Linux 6.12 host over NVMe/TCP with TLS 1.3 (issue 32) against
//! `farflash serve --listen tls:...` on 127.0.0.1: one VM
//! (tests/linux-host/run-linux-host --kernel 6.12 --tls), its handshakes
//! done by tlshd (ktls-utils 1.0) with keys nvme-cli 2.13 inserted, the
//! guest script tests/linux-host/guest/tls-host.sh. Checks a SHA-256 key
//! with identities of versions 0 and 1 (controller live on that key,
//! 1 MiB read back), the refusals (wrong key in both forms, plaintext to
//! the TLS listener), a SHA-384 key (refused: tlshd 1.0's GnuTLS binds
//! external PSKs to SHA-256, docs/interop.md), and a host's key rotated
//! through `farflash ctl host psk-set` while fio verify runs on a controller
//! of the old key: new connections take the new key only, the old
//! controller keeps its association and fio never fails.

mod common;

use common::{eventually, free_port, ProcessGroup, TempDir};
use farflash_tls::{ConfiguredPsk, PskHash};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn key(hash: PskHash) -> String {
    let mut b = vec![0u8; hash.len()];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("urandom");
    ConfiguredPsk::new(&b, Some(hash))
        .unwrap()
        .to_interchange()
        .to_string()
}

/// A 0600 file holding `key` (how the key reaches serve and the RPC).
fn key_file(dir: &Path, name: &str, key: &str) -> PathBuf {
    let p = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&p)
        .unwrap();
    std::io::Write::write_all(&mut f, format!("{key}\n").as_bytes()).unwrap();
    p
}

fn host(n: u8) -> String {
    format!("nqn.2014-08.org.nvmexpress:uuid:5e1f0000-0000-4000-8000-0000000071{n:02x}")
}

#[test]
#[ignore = "boots a QEMU VM with the 6.12 kernel and tlshd; run by tests/run.sh"]
fn linux_612_host_tls_to_farflash_serve() {
    let t0 = Instant::now();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = TempDir::new("interop-tls");
    let share = dir.0.join("share");
    std::fs::create_dir_all(&share).unwrap();
    let nqn = "nqn.2026-11.io.farflash:interop-tls";
    let (h256, h384, hrot) = (host(1), host(2), host(3));
    let (k256, k384, wrong) = (
        key(PskHash::Sha256),
        key(PskHash::Sha384),
        key(PskHash::Sha256),
    );
    let (old, new) = (key(PskHash::Sha256), key(PskHash::Sha256));
    let f256 = key_file(&dir.0, "h256.key", &k256);
    let f384 = key_file(&dir.0, "h384.key", &k384);
    let fold = key_file(&dir.0, "old.key", &old);
    let fnew = key_file(&dir.0, "new.key", &new);
    let sock = dir.0.join("rpc.sock");
    let log = dir.0.join("serve.log");
    let port = free_port();

    let bin = env!("CARGO_BIN_EXE_farflash");
    let mut serve = Command::new(bin)
        .arg("serve")
        .args(["--listen", &format!("tls:127.0.0.1:{port}")])
        .args(["--nqn", nqn, "--ram", "64M", "--log-level", "info"])
        .args(["--tls-key", &format!("{h256}={}", f256.display())])
        .args(["--tls-key", &format!("{h384}={}", f384.display())])
        .args(["--tls-key", &format!("{hrot}={}", fold.display())])
        .args(["--allow-host", &h256, "--allow-host", &h384])
        .args(["--allow-host", &hrot])
        .arg("--rpc-socket")
        .arg(&sock)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn farflash serve");
    let _serve_guard = scopeguard(&mut serve);
    let up = eventually(Duration::from_secs(30), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("listening on"))
            || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up, "farflash serve did not start: {}", tail(&log));

    // The host side of the rotation: the guest asks through the share.
    let (share2, sock2, fnew2) = (share.clone(), sock.clone(), fnew.clone());
    let (nqn2, hrot2) = (nqn.to_string(), hrot.clone());
    std::thread::spawn(move || {
        let req = share2.join("rotate");
        if !eventually(Duration::from_secs(900), || req.exists()) {
            return;
        }
        let o = Command::new(bin)
            .args(["ctl", "--rpc-socket"])
            .arg(&sock2)
            .args(["host", "psk-set", &nqn2, &hrot2, "--psk"])
            .arg(&fnew2)
            .output();
        let answer = match o {
            Ok(o) if o.status.success() => "ok".to_string(),
            Ok(o) => format!("failed: {}", String::from_utf8_lossy(&o.stderr).trim()),
            Err(e) => format!("cannot run farflash ctl: {e}"),
        };
        eprintln!("[host side] key of {hrot2} rotated: {answer}");
        let _ = std::fs::write(share2.join("rotate.done"), answer);
    });

    let cases = [
        format!("sha256-v0 {h256} {k256} 0 ok"),
        format!("sha256-v1 {h256} {k256} 1 ok"),
        format!("wrong-key-v0 {h256} {wrong} 0 refused"),
        format!("wrong-key-v1 {h256} {wrong} 1 refused"),
        format!("sha384-v0-tlshd {h384} {k384} 0 refused"),
        format!("sha384-v1-tlshd {h384} {k384} 1 refused"),
    ];
    let g = root.join("tests/linux-host/guest");
    let mut child = Command::new(root.join("tests/linux-host/run-linux-host"))
        .args(["-t", "900", "--kernel", "6.12", "--tls"])
        // One block device per controller (nvmeXn1 of controller X), so that
        // I/O goes through the controller under test.
        .args(["--append", "cryptomgr.notests nvme_core.multipath=N"])
        .args(["-p", &port.to_string()])
        .arg("-s")
        .arg(&share)
        .arg("-f")
        .arg(g.join("tls-lib.sh"))
        .arg("-f")
        .arg(g.join("lib.sh"))
        .args(["-e", &format!("NQN={nqn}")])
        .args(["-e", &format!("TLS_CASES={}", cases.join("\n"))])
        .args(["-e", &format!("ROTATE={hrot} {old} {new}")])
        .arg(g.join("tls-host.sh"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()
        .expect("start run-linux-host");
    let out = child.stdout.take().unwrap();
    let vm = ProcessGroup::new(child);
    let mut lines = Vec::new();
    for l in BufReader::new(out).lines().map_while(Result::ok) {
        eprintln!("[vm] {l}");
        lines.push(l);
    }
    drop(vm);
    let text = lines.join("\n");
    let mut missing = Vec::new();
    for name in cases
        .iter()
        .map(|c| c.split(' ').next().unwrap().to_string())
        .chain(["plaintext-refused".into(), "rotate-during-io".into()])
    {
        if !lines
            .iter()
            .any(|l| l.starts_with(&format!("PASS: {name} (")))
        {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty() && text.contains("TLS-HOST RESULT: PASS"),
        "not passed: {missing:?}\nthe target's log:\n{}",
        tail(&log)
    );
    let l = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!l.contains("NVMeTLSkey-1"), "a key in the target's log");
    assert!(!l.contains("panicked"), "{}", tail(&log));
    eprintln!(
        "[tls] linux_612_host_tls_to_farflash_serve: {:?}",
        t0.elapsed()
    );
}

fn tail(log: &Path) -> String {
    let s = std::fs::read_to_string(log).unwrap_or_default();
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(40)..].join("\n")
}

/// Kills the target when the test ends, however it ends.
fn scopeguard(c: &mut std::process::Child) -> impl Drop + '_ {
    struct G<'a>(&'a mut std::process::Child);
    impl Drop for G<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    G(c)
}
