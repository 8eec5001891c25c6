//! The Linux kernel host (the 6.1 VM of tests/linux-host) against an RBD
//! namespace: `farflash serve --rbd rbd/test` on a single-node Ceph cluster
//! (tests/ceph/cluster.sh), and, in one VM boot (guest/rbd.sh), interop.sh's
//! `connect`, `fio-ram` (fio randwrite with crc32c verify, 8 MiB) and
//! `flush-zeroes-dsm` (nvme flush, write-zeroes, dsm deallocate, each
//! checked by reading back) on it, then `rbd-resize`: the image grown with
//! `rbd resize` (asked for by the guest through the 9p share) becomes a
//! bigger disk in the guest, and fio verifies the new blocks.
//!
//! `cargo test --test interop_rbd -- --ignored --nocapture` (tests/run.sh).

mod common;

use common::Serve;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.farflash:rbd";
const SCENARIOS: &str = "connect fio-ram flush-zeroes-dsm";
/// Scenarios of guest/rbd.sh itself, after interop.sh's.
const RBD_SCENARIOS: &str = "rbd-resize";
const VM_TIMEOUT_SECS: &str = "600";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

struct Cluster(PathBuf);

impl Cluster {
    fn cmd(&self, verb: &str) -> Command {
        let mut c = Command::new("bash");
        c.arg(root().join("tests/ceph/cluster.sh"))
            .arg(verb)
            .arg(&self.0);
        c
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.cmd("stop").status();
    }
}

#[test]
#[ignore = "boots a QEMU VM and starts a Ceph cluster; run by tests/run.sh"]
fn linux_host_fio_verify_and_resize_on_an_rbd_namespace() {
    let c = Cluster(std::env::temp_dir().join(format!("ff-ceph-vm-{}", std::process::id())));
    let _ = c.cmd("stop").status();
    let st = c.cmd("start").stdout(Stdio::null()).status().unwrap();
    assert!(st.success(), "the Ceph cluster did not start");
    let conf = c.0.join("ceph.conf");
    let hostnqn = "nqn.2014-08.org.nvmexpress:uuid:8a3c1f0e-3b1d-4c55-9a39-6d1e0b2f7c41";
    let serve = Serve::start(&[
        "--rpc-socket",
        "none",
        "--nqn",
        NQN,
        "--allow-host",
        hostnqn,
        "--rbd",
        "rbd/test",
        "--ceph-conf",
        conf.to_str().unwrap(),
    ]);
    let port = serve.port.to_string();
    // The host side of the guest's "resize" request.
    let share = c.0.join("share");
    std::fs::create_dir_all(&share).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (share, stop, conf) = (share.clone(), stop.clone(), conf.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let req = std::fs::read_to_string(share.join("request")).unwrap_or_default();
                if req.trim() == "resize" {
                    let st = Command::new("rbd")
                        .arg("-c")
                        .arg(&conf)
                        .args(["resize", "--size", "384M", "rbd/test"])
                        .status();
                    println!("[interop_rbd] rbd resize --size 384M rbd/test: {st:?}");
                    let _ = std::fs::remove_file(share.join("request"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let t = Instant::now();
    let out = Command::new(root().join("tests/linux-host/run-linux-host"))
        .args(["-t", VM_TIMEOUT_SECS, "-p", &format!("{port}:{port}")])
        .args(["--hostnqn", hostnqn])
        .arg("-s")
        .arg(&share)
        .args(["-e", &format!("NQN={NQN}")])
        .args(["-e", "NAMESPACES=1:256M:512"])
        .args(["-e", "FIO_RAM_NSID=1", "-e", "DATA_NSIDS=1"])
        .args(["-e", "FIO_SIZE=8m"])
        .args(["-e", &format!("SCENARIOS={SCENARIOS}")])
        .args(["-e", "RBD_SIZE_MIB=256", "-e", "RBD_GROWN_MIB=384"])
        .args(["-f", "tests/linux-host/guest/interop.sh"])
        .args(["-f", "tests/linux-host/guest/lib.sh"])
        .arg(Path::new("tests/linux-host/guest/rbd.sh"))
        .current_dir(root())
        .stdin(Stdio::null())
        .process_group(0)
        .output()
        .expect("run tests/linux-host/run-linux-host");
    stop.store(true, Ordering::Release);
    let _ = watcher.join();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    println!("VM run: {:.1?}", t.elapsed());
    let missing: Vec<&str> = SCENARIOS
        .split(' ')
        .chain(RBD_SCENARIOS.split(' '))
        .filter(|s| !text.lines().any(|l| l.starts_with(&format!("PASS: {s} "))))
        .collect();
    assert!(
        out.status.success() && missing.is_empty(),
        "run-linux-host exited with {}; scenarios without PASS: {missing:?}",
        out.status
    );
    drop(serve);
}

const HA_NQN: &str = "nqn.2026-11.io.farflash:rbd-ha";

/// A gateway's configuration: rbd/test as NSID 1 of `HA_NQN` (ANA group 1,
/// the same NGUID and serial on both gateways, CNTLIDs from `cntlid_min`),
/// listening on 127.0.0.1:`port` with group 1 in `state` there.
fn gateway_config(
    dir: &Path,
    conf: &Path,
    name: &str,
    port: u16,
    cntlid_min: u16,
    state: &str,
) -> PathBuf {
    let addr = format!("127.0.0.1:{port}");
    let ana = if state == "optimized" {
        String::new()
    } else {
        format!("[[subsystem.ana]]\nlisten = \"{addr}\"\nanagrpid = 1\nstate = \"{state}\"\n")
    };
    let path = dir.join(format!("{name}.toml"));
    let text = format!(
        "listen = [\"{addr}\"]\n[[subsystem]]\nnqn = \"{HA_NQN}\"\nserial = \"FFRBDHA2\"\n\
         cntlid_min = {cntlid_min}\ncntlid_max = {}\n{ana}\
         [[subsystem.namespace]]\nnsid = 1\nbackend = \"rbd\"\n\
         nguid = \"7c3a9e21d4b84f0a9d6e5f4a3b2c1d0e\"\n\
         rbd = {{ pool = \"rbd\", image = \"test\", conf = \"{}\" }}\n",
        cntlid_min + 998,
        conf.display()
    );
    std::fs::write(&path, text).expect("write a gateway's config");
    path
}

/// `farflash ctl ana set` through `sock`: group 1 in `state` via 127.0.0.1:`port`.
fn ana_set(sock: &Path, port: u16, state: &str) -> Result<(), String> {
    let out = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .arg("ctl")
        .arg("--rpc-socket")
        .arg(sock)
        .args([
            "ana",
            "set",
            HA_NQN,
            &format!("127.0.0.1:{port}"),
            "1",
            state,
        ])
        .output()
        .map_err(|e| format!("cannot run farflash ctl: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ctl ana set {port} {state}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Clients in the cluster's OSD blocklist.
fn blocklisted(conf: &Path) -> usize {
    let out = Command::new("timeout")
        .args(["60", "ceph", "-c"])
        .arg(conf)
        .args(["osd", "blocklist", "ls"])
        .output()
        .expect("run ceph osd blocklist ls");
    assert!(out.status.success(), "ceph osd blocklist ls failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count()
}

/// Two gateways on one image, ANA failover and failback with the Linux
/// host's native multipath (guest/rbd-failover.sh): A optimized (owns the
/// exclusive lock), B inaccessible; with fio verify looping on the head,
/// A is SIGKILLed and B made optimized (it breaks the dead A's lock); A
/// comes back non-optimized and the ANA states fail back in order (B
/// releases, A acquires). One VM boot.
#[test]
#[ignore = "boots a QEMU VM and starts a Ceph cluster; run by tests/run.sh"]
fn linux_host_fails_over_between_two_rbd_gateways_with_ana() {
    let c = Cluster(std::env::temp_dir().join(format!("ff-ceph-ha-{}", std::process::id())));
    let _ = c.cmd("stop").status();
    let st = c.cmd("start").stdout(Stdio::null()).status().unwrap();
    assert!(st.success(), "the Ceph cluster did not start");
    let conf = c.0.join("ceph.conf");
    let (pa, pb) = (common::free_port(), common::free_port());
    let (sock_a, sock_b) = (c.0.join("a.sock"), c.0.join("b.sock"));
    let cfg_a = gateway_config(&c.0, &conf, "a", pa, 1, "optimized");
    let cfg_a_back = gateway_config(&c.0, &conf, "a-back", pa, 1, "non-optimized");
    let cfg_b = gateway_config(&c.0, &conf, "b", pb, 1000, "inaccessible");
    let a = Serve::start_config(&cfg_a, &sock_a, pa);
    let b = Serve::start_config(&cfg_b, &sock_b, pb);
    let share = c.0.join("share");
    std::fs::create_dir_all(&share).unwrap();
    // The host side: the operator of the guest's requests (req.N).
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (share, stop) = (share.clone(), stop.clone());
        let (sock_a, sock_b) = (sock_a.clone(), sock_b.clone());
        std::thread::spawn(move || {
            let mut a = Some(a);
            let mut next = 1;
            while !stop.load(Ordering::Acquire) {
                let req = share.join(format!("req.{next}"));
                let Ok(word) = std::fs::read_to_string(&req) else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                let t = Instant::now();
                let answer = match word.trim() {
                    "kill-a" => {
                        if let Some(mut g) = a.take() {
                            let _ = g.child.kill();
                            let _ = g.child.wait();
                        }
                        ana_set(&sock_b, pb, "optimized")
                    }
                    "restart-a" => {
                        a = Some(Serve::start_config(&cfg_a_back, &sock_a, pa));
                        Ok(())
                    }
                    "failback" => ana_set(&sock_b, pb, "inaccessible")
                        .and_then(|()| ana_set(&sock_a, pa, "optimized")),
                    w => Err(format!("unknown request {w:?}")),
                };
                let answer = match answer {
                    Ok(()) => format!("ok in {:.0?}", t.elapsed()),
                    Err(e) => e,
                };
                println!("[interop_rbd] host side: {}: {answer}", word.trim());
                std::fs::write(share.join(format!("req.{next}.done")), answer)
                    .expect("answer the guest");
                next += 1;
            }
            a
        })
    };
    let t = Instant::now();
    let out = Command::new(root().join("tests/linux-host/run-linux-host"))
        .args(["-t", VM_TIMEOUT_SECS])
        .args(["-p", &format!("{pa}:{pa}"), "-p", &format!("{pb}:{pb}")])
        .arg("-s")
        .arg(&share)
        .args(["-e", &format!("NQN={HA_NQN}")])
        .args(["-f", "tests/linux-host/guest/lib.sh"])
        .arg(Path::new("tests/linux-host/guest/rbd-failover.sh"))
        .current_dir(root())
        .stdin(Stdio::null())
        .process_group(0)
        .output()
        .expect("run tests/linux-host/run-linux-host");
    stop.store(true, Ordering::Release);
    let a = watcher.join().expect("host side");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    println!("VM run: {:.1?}", t.elapsed());
    assert!(
        out.status.success() && text.lines().any(|l| l.starts_with("PASS: rbd-failover ")),
        "rbd-failover.sh did not pass ({})",
        out.status
    );
    for phase in [
        "ok: failover: fio verify went on through B",
        "reads back the same through B",
        "ok: failback: A optimized",
        "ok: writes go down path A only",
    ] {
        assert!(text.contains(phase), "no phase {phase:?}");
    }
    // Only the dead A was fenced: the failback was orderly.
    assert_eq!(blocklisted(&conf), 1, "blocklisted clients");
    drop((a, b));
}
