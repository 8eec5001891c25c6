//! NVMe over RDMA in the QEMU guest (tests/linux-host, Debian 6.1 kernel),
//! over Soft-RoCE (`rdma_rxe` on the guest's NIC). See docs/rdma.md.
//!
//! Today: the harness's RDMA path with the guest kernel on both sides
//! (nvmet-rdma target, nvme-rdma host): rxe0 comes up, discovery over
//! RDMA lists the subsystem with TRTYPE rdma, a connect with 2 I/O queues
//! gives a block device, fio verify passes, disconnect. farflash's own RDMA
//! target and host are not built yet; their tests will share this image.

use std::path::PathBuf;
use std::process::Command;

const VM_TIMEOUT_SECS: u32 = 300;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The harness options that put the RDMA modules and `rdma` in the image.
fn rdma_image_args() -> Vec<String> {
    let mut v = vec!["--bin".to_string(), "rdma".to_string()];
    for m in [
        "rdma_rxe",
        "rdma_ucm",
        "ib_uverbs",
        "nvme-rdma",
        "nvmet-rdma",
        "crc32_generic",
    ] {
        v.push("--module".into());
        v.push(m.into());
    }
    v
}

#[test]
#[ignore = "boots a QEMU VM; run by tests/run.sh"]
fn harness_selftest_rdma_kernel_loop() {
    let script = repo_root().join("tests/linux-host/guest/rdma-kernel-loop.sh");
    let out = Command::new(repo_root().join("tests/linux-host/run-linux-host"))
        .args(["-t", &VM_TIMEOUT_SECS.to_string()])
        .args(rdma_image_args())
        .arg(&script)
        .output()
        .expect("run tests/linux-host/run-linux-host");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(
        out.status.success(),
        "guest script failed: {:?}",
        out.status
    );
    for name in [
        "rxe-and-nvmet-rdma",
        "discover-rdma",
        "connect-rdma",
        "fio-verify-rdma",
        "disconnect-rdma",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("PASS: {name}"))),
            "no PASS for {name}"
        );
    }
    assert!(!stdout.contains("FAIL:"));
}
