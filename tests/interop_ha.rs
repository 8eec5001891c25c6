//! Linux native NVMe multipath against two farflash targets (issue 15,
//! docs/ha.md): both export one subsystem over one file with the same
//! NQN, serial and NGUID and disjoint CNTLID ranges; the guest kernel (QEMU
//! VM, tests/linux-host) must see one subsystem with two controllers and one
//! namespace head, and fio verify on it must pass
//! (tests/linux-host/guest/multipath.sh). Then, with fio verify looping on
//! the head: ANA states flipped through the management API (the kernel
//! follows them in `ana_state` and sends I/O down the optimized path only),
//! target B's listener removed and added again, and target A SIGKILLed and
//! restarted on the same port: fio sees no error and both paths come back
//! live. `#[ignore]`d like the other VM tests:
//! `cargo test --test interop_ha -- --ignored --nocapture`.

mod common;

use common::Serve;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.farflash:ha-multipath";

/// SIGKILLs `old`, starts `farflash serve --listen` on its address again with
/// `args`, waits until it accepts, and tells the guest (`restarted` in the
/// share).
fn kill_and_restart(mut old: Serve, args: &[&str], share: &Path) -> Serve {
    old.child.kill().expect("SIGKILL the target");
    let _ = old.child.wait();
    std::thread::sleep(Duration::from_secs(2));
    let child = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .args(["serve", "--log-level", "warn", "--listen", &old.addr])
        .args(args)
        .stdout(Stdio::null())
        .spawn()
        .expect("restart the target");
    let up = common::eventually(Duration::from_secs(20), || {
        std::net::TcpStream::connect(&old.addr).is_ok()
    });
    assert!(up, "the restarted target does not accept connections");
    std::fs::write(share.join("restarted"), "1").expect("tell the guest");
    Serve {
        child,
        port: old.port,
        addr: old.addr.clone(),
    }
}

fn config(dir: &Path, img: &Path, min: u16, max: u16) -> String {
    let path = dir.join(format!("ha-{min}.toml"));
    let t = format!(
        "[[subsystem]]\nnqn = \"{NQN}\"\nserial = \"FFHA0002\"\ncntlid_min = {min}\ncntlid_max = {max}\n\
         [[subsystem.namespace]]\nnsid = 1\nbackend = \"file\"\npath = \"{}\"\nnguid = \"0f1e2d3c4b5a69788796a5b4c3d2e1f0\"\n",
        img.display()
    );
    std::fs::write(&path, t).expect("write the config");
    path.display().to_string()
}

/// Runs `farflash ctl --rpc-socket SOCK ARGS`: "ok" or what went wrong.
fn ctl(sock: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .arg("ctl")
        .arg("--rpc-socket")
        .arg(sock)
        .args(args)
        .output();
    match out {
        Ok(o) if o.status.success() => "ok".to_owned(),
        Ok(o) => format!("failed: {}", String::from_utf8_lossy(&o.stderr).trim()),
        Err(e) => format!("cannot run farflash ctl: {e}"),
    }
}

#[test]
#[ignore = "boots a QEMU VM; run by tests/run.sh"]
fn linux_multipath_joins_two_farflash_targets() {
    let dir = std::env::temp_dir().join(format!("farflash-interop-ha-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let img = dir.join("ha.img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(16 << 20))
        .expect("create the shared file");
    let sock_a = dir.join("a.sock");
    let sock_b = dir.join("b.sock");
    let cfg_a = config(&dir, &img, 1, 999);
    let a = Serve::start(&[
        "--config",
        &cfg_a,
        "--rpc-socket",
        &sock_a.display().to_string(),
    ]);
    // B has a second listener the guest does not use, so that the one it
    // uses can be removed (the last listener cannot be).
    let spare = format!("127.0.0.1:{}", common::free_port());
    let b = Serve::start(&[
        "--config",
        &config(&dir, &img, 1000, 1999),
        "--listen",
        &spare,
        "--rpc-socket",
        &sock_b.display().to_string(),
    ]);
    let share = dir.join("share");
    std::fs::create_dir_all(&share).expect("share dir");
    // The host side acts on the guest's requests: `ctl.N` files ("a" or "b"
    // and the arguments of `farflash ctl` for that target), answered in
    // `ctl.N.done`; and "kill" in `request`: SIGKILL target A and start it
    // again on the same port from the same configuration.
    let (port_a, share2, sock_b2) = (a.port, share.clone(), sock_b.clone());
    let watcher = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(600);
        let mut next = 1;
        while Instant::now() < deadline {
            let req = share2.join(format!("ctl.{next}"));
            if let Ok(line) = std::fs::read_to_string(&req) {
                let words: Vec<&str> = line.split_whitespace().collect();
                let sock: &PathBuf = if words.first() == Some(&"a") {
                    &sock_a
                } else {
                    &sock_b2
                };
                let answer = ctl(sock, words.get(1..).unwrap_or_default());
                println!("host side: farflash ctl {line:?} -> {answer}");
                std::fs::write(share2.join(format!("ctl.{next}.done")), answer)
                    .expect("answer the guest");
                next += 1;
                continue;
            }
            if std::fs::read_to_string(share2.join("request")).is_ok_and(|r| r.trim() == "kill") {
                let sock = sock_a.display().to_string();
                let args = ["--config", cfg_a.as_str(), "--rpc-socket", sock.as_str()];
                return Some(kill_and_restart(a, &args, &share2));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    });
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("tests/linux-host/run-linux-host"))
        .args(["-t", "600"])
        .args(["-s", &share.display().to_string()])
        .args(["-p", &format!("{port_a}:{port_a}")])
        .args(["-p", &format!("{}:{}", b.port, b.port)])
        .args(["-e", &format!("NQN={NQN}")])
        .arg("-f")
        .arg(root.join("tests/linux-host/guest/lib.sh"))
        .arg(root.join("tests/linux-host/guest/multipath.sh"))
        .output()
        .expect("run run-linux-host");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && text.lines().any(|l| l.starts_with("PASS: multipath ")),
        "multipath.sh did not pass ({})",
        out.status
    );
    let restarted = watcher.join().expect("watcher thread");
    for phase in [
        "ok: ANA: path A inaccessible",
        "ok: ANA: I/O follows the optimized path",
        "ok: listener of B removed",
        "ok: fio verify across the kill",
    ] {
        assert!(text.contains(phase), "no phase {phase:?}");
    }
    drop((restarted, b));
    let _ = std::fs::remove_dir_all(&dir);
}

/// NVMe reservations with nvme-cli from two host NQNs connected in the VM
/// (tests/linux-host/guest/reservations.sh): the host without the
/// reservation gets Reservation Conflict on writes, the report lists both
/// registrants, and a SIGKILL and restart of the target keeps the
/// reservation because the host set PTPL (`ptpl_file`).
#[test]
#[ignore = "boots a QEMU VM; run by tests/run.sh"]
fn linux_nvme_cli_reservations_from_two_hosts() {
    let nqn = "nqn.2026-11.io.farflash:ha-resv";
    let dir = std::env::temp_dir().join(format!("farflash-interop-resv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let cfg = dir.join("resv.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[subsystem]]\nnqn = \"{nqn}\"\n[[subsystem.namespace]]\nnsid = 1\nbackend = \"ram\"\nsize = \"16M\"\nptpl_file = \"{}\"\n",
            dir.join("ns1.ptpl").display()
        ),
    )
    .expect("write the config");
    let cfg = cfg.display().to_string();
    // Host A connects to the first port, host B to the second.
    let second = format!("127.0.0.1:{}", common::free_port());
    let t = Serve::start(&["--config", &cfg, "--listen", &second]);
    let share = dir.join("share");
    std::fs::create_dir_all(&share).expect("share dir");
    let (port, share2, cfg2, second2) = (t.port, share.clone(), cfg.clone(), second.clone());
    let watcher = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(600);
        while Instant::now() < deadline {
            if std::fs::read_to_string(share2.join("request")).is_ok_and(|r| r.trim() == "restart")
            {
                let args = ["--listen", second2.as_str(), "--config", cfg2.as_str()];
                return Some(kill_and_restart(t, &args, &share2));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    });
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("tests/linux-host/run-linux-host"))
        .args(["-t", "600"])
        .args(["-s", &share.display().to_string()])
        .args(["-p", &format!("{port}:{port}")])
        .args([
            "-p",
            &format!(
                "{p2}:{p2}",
                p2 = second.rsplit(':').next().unwrap_or_default()
            ),
        ])
        .args(["-e", &format!("NQN={nqn}")])
        .arg(root.join("tests/linux-host/guest/reservations.sh"))
        .output()
        .expect("run run-linux-host");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && text.lines().any(|l| l.starts_with("PASS: reservations ")),
        "reservations.sh did not pass ({})",
        out.status
    );
    let restarted = watcher.join().expect("watcher thread");
    assert!(restarted.is_some(), "the target was not restarted");
    assert!(text.contains("the reservation is still there (PTPL)"));
    drop(restarted);
    let _ = std::fs::remove_dir_all(&dir);
}
