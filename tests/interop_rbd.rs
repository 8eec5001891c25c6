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
