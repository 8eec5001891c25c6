//! NVMe over RDMA in the QEMU guest (tests/linux-host, Debian 6.1 kernel),
//! over Soft-RoCE (`rdma_rxe` on the guest's NIC). See docs/rdma.md.
//!
//! - `harness_selftest_rdma_kernel_loop`: the harness's RDMA path with the
//!   guest kernel on both sides (nvmet-rdma target, nvme-rdma host): rxe0
//!   comes up, discovery over RDMA lists the subsystem with TRTYPE rdma, a
//!   connect with 2 I/O queues gives a block device, fio verify passes.
//! - `farflash_rdma_target_in_guest`: `farflash serve --listen rdma:…
//!   --listen tcp:…` inside the guest (the host machine cannot load
//!   rdma_rxe), the guest kernel's nvme-rdma as its host: discovery over
//!   RDMA lists both transports, 2 I/O queues, fio verify on a RAM and a
//!   file namespace (in-capsule data, RDMA READ, RDMA WRITE), disconnect,
//!   and a clean exit on SIGTERM; before the kernel host, a hostile CM
//!   client (`rdma_cm_probe`) gets the reject STS of bad private data and
//!   has its misbehaving queues disconnected, and the target keeps serving.
//! - `farflash_rdma_host_in_guest`: farflash's host (`-t rdma`) in the
//!   guest against the guest kernel's nvmet-rdma (discover, identify, perf
//!   --verify of 4 KiB and 128 KiB writes, two I/O queues) and against
//!   `farflash serve --listen rdma:…` (perf --verify, discover, and fused
//!   Compare and Write by `examples/rdma_fused.rs` of farflash-rdma-verbs:
//!   in-capsule and RDMA READ halves, a miscompare, a second half missing
//!   and the other refusals, two hosts hammering test-and-set); refused
//!   connects (wrong NQN, no listener, a QID the target refuses) end with
//!   a clear error.
//! - `farflash_sweep_tcp_and_rdma_in_guest`: `farflash sweep --transport
//!   tcp,rdma` inside the guest (a tiny plan: 4 KiB random reads, QD 1 and
//!   4); the results folder comes back through the 9p share and is checked
//!   here: every point local, over TCP and over RDMA with I/Os, CPU per I/O
//!   on host and target, SMART counters equal to perf's I/Os, the plots.
//! - `farflash_rdma_auth_and_run_time_listeners_612` (the 6.12 guest, whose
//!   nvme-rdma host has DH-HMAC-CHAP): `farflash serve --config` with a
//!   subsystem that requires the guest's host NQN to authenticate; a wrong
//!   secret is refused, the right one connects (ffdhe2048, fio verify);
//!   an RDMA listener added through `farflash ctl` takes a second
//!   controller; removing the first listener closes its queues only.

mod common;

use common::dhchap_secret;
use std::path::{Path, PathBuf};
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

/// Runs `script` in the RDMA image with `extra` harness options; returns
/// its stdout after checking the exit status and a PASS line per name.
fn run_guest(script: &str, extra: &[String], names: &[&str]) -> String {
    let script = repo_root().join("tests/linux-host/guest").join(script);
    let out = Command::new(repo_root().join("tests/linux-host/run-linux-host"))
        .args(["-t", &VM_TIMEOUT_SECS.to_string()])
        .args(rdma_image_args())
        .arg("-f")
        .arg(repo_root().join("tests/linux-host/guest/rdma-lib.sh"))
        .args(extra)
        .arg(&script)
        .output()
        .expect("run tests/linux-host/run-linux-host");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(
        out.status.success(),
        "guest script failed: {:?}",
        out.status
    );
    for name in names {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("PASS: {name}"))),
            "no PASS for {name}"
        );
    }
    assert!(!stdout.contains("FAIL:"));
    stdout
}

#[test]
#[ignore = "boots a QEMU VM; run by tests/run.sh"]
fn harness_selftest_rdma_kernel_loop() {
    run_guest(
        "rdma-kernel-loop.sh",
        &[],
        &[
            "rxe-and-nvmet-rdma",
            "discover-rdma",
            "connect-rdma",
            "fio-verify-rdma",
            "disconnect-rdma",
        ],
    );
}

/// The rxe verbs provider libibverbs dlopens (ldd does not list it), and
/// the file that names it.
const RXE_PROVIDER: &str = "/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so";
const RXE_DRIVER: &str = "/etc/libibverbs.d/rxe.driver";
/// The libraries farflash's RDMA code opens at run time (dlopen: ldd of the
/// binaries does not list them, so the image gets them by name, with what
/// they link).
const RDMA_LIBRARIES: [&str; 2] = [
    "/usr/lib/x86_64-linux-gnu/libibverbs.so.1",
    "/usr/lib/x86_64-linux-gnu/librdmacm.so.1",
];

/// A stripped copy of `src` (the debug build's symbols would make the
/// guest's initramfs several times larger).
fn guest_binary(src: &Path, name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rdma-guest");
    std::fs::create_dir_all(&dir).expect("create the guest binary's directory");
    let dst = dir.join(name);
    let stripped = Command::new("strip")
        .args(["--strip-debug", "-o"])
        .arg(&dst)
        .arg(src)
        .status()
        .is_ok_and(|s| s.success());
    if !stripped {
        std::fs::copy(src, &dst).expect("copy the binary");
    }
    dst
}

/// Builds `example` of farflash-rdma-verbs with the profile this test was
/// built with; returns its path.
fn rdma_example(example: &str) -> PathBuf {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_farflash"))
        .parent()
        .expect("the binary's directory");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(repo_root())
        .args(["build", "-p", "farflash-rdma-verbs", "--example", example]);
    if bin_dir.ends_with("release") {
        cmd.arg("--release");
    }
    let st = cmd.status().expect("run cargo build");
    assert!(st.success(), "building {example} failed: {st:?}");
    bin_dir.join("examples").join(example)
}

/// Harness options for a script that runs farflash in the guest: the
/// binary (stripped, named by `$FARFLASH`), libibverbs and librdmacm, and
/// the rxe verbs provider the image needs (checked to be installed), then
/// `more`.
fn farflash_guest_args(more: &[&str]) -> Vec<String> {
    for f in [RXE_PROVIDER, RXE_DRIVER] {
        assert!(
            Path::new(f).exists(),
            "{f} is missing: install ibverbs-providers (tests/run.sh does)"
        );
    }
    for f in RDMA_LIBRARIES {
        assert!(
            Path::new(f).exists(),
            "{f} is missing: install libibverbs1 and librdmacm1 (tests/run.sh does)"
        );
    }
    let bin = guest_binary(Path::new(env!("CARGO_BIN_EXE_farflash")), "farflash");
    let bin = bin.to_str().expect("UTF-8 path");
    let farflash_env = format!("FARFLASH={bin}");
    let base = [
        "--bin",
        bin,
        "--image-file",
        RXE_PROVIDER,
        "--image-file",
        RXE_DRIVER,
        "--image-file",
        RDMA_LIBRARIES[0],
        "--image-file",
        RDMA_LIBRARIES[1],
        "--env",
        &farflash_env,
    ];
    base.iter().chain(more).map(|s| s.to_string()).collect()
}

#[test]
#[ignore = "boots a QEMU VM; run by tests/run.sh"]
fn farflash_rdma_target_in_guest() {
    let probe = guest_binary(&rdma_example("rdma_cm_probe"), "rdma_cm_probe");
    let probe = probe.to_str().expect("UTF-8 path");
    let extra = farflash_guest_args(&["--bin", probe, "--env", &format!("PROBE={probe}")]);
    let out = run_guest(
        "rdma-farflash-target.sh",
        &extra,
        &[
            "rxe",
            "serve-rdma",
            "probe-bad-recfmt",
            "probe-wrong-qid",
            "probe-bad-hsqsize",
            "probe-bad-hrqsize",
            "probe-oversized-capsule",
            "probe-bad-key",
            "probe-destroy-mid-transfer",
            "probe-disconnect-at-once",
            "probe-io-destroy-with-reads-in-flight",
            "probe-io-bad-key-beside-traffic",
            "hostile-cm-peer",
            "discover-rdma-both-transports",
            "connect-rdma",
            "deep-fio-verify-rdma",
            "idle-sleeps",
            "disconnect-rdma",
            "zero-copy-io-queues",
            "target-exit-clean",
        ],
    );
    let verified = out
        .lines()
        .filter(|l| l.starts_with("PASS: fio-verify-rdma"))
        .count();
    assert_eq!(verified, 2, "fio verify on both namespaces (RAM, file)");
}

#[test]
#[ignore = "boots a QEMU VM; run by tests/run.sh"]
fn farflash_rdma_host_in_guest() {
    let reject = guest_binary(&rdma_example("rdma_host_reject"), "rdma_host_reject");
    let reject = reject.to_str().expect("UTF-8 path");
    let fused = guest_binary(&rdma_example("rdma_fused"), "rdma_fused");
    let fused = fused.to_str().expect("UTF-8 path");
    let extra = farflash_guest_args(&[
        "--bin",
        reject,
        "--env",
        &format!("REJECT={reject}"),
        "--bin",
        fused,
        "--env",
        &format!("FUSED={fused}"),
    ]);
    run_guest(
        "rdma-farflash-host.sh",
        &extra,
        &[
            "rxe-and-nvmet-rdma",
            "discover-rdma-kernel",
            "identify-rdma-kernel",
            "perf-verify-rdma-kernel",
            "perf-rdma-kernel-2-queues",
            "reject-wrong-nqn",
            "reject-no-listener",
            "perf-verify-rdma-farflash",
            "discover-rdma-farflash",
            "fused-rdma-farflash",
            "reject-qid-sts",
            "farflash-target-exit-clean",
        ],
    );
}

#[test]
#[ignore = "boots a QEMU VM; run by tests/run.sh"]
fn farflash_sweep_tcp_and_rdma_in_guest() {
    use farflash_sweep::results::{Mode, Results};
    use farflash_sweep::{Kind, Transport};
    let share = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rdma-sweep");
    let _ = std::fs::remove_dir_all(&share);
    std::fs::create_dir_all(&share).expect("create the share");
    let extra = farflash_guest_args(&["-s", share.to_str().expect("UTF-8 path")]);
    run_guest(
        "rdma-farflash-sweep.sh",
        &extra,
        &[
            "rxe",
            "sweep-tcp-rdma",
            "sweep-data-removed",
            "results-copied",
        ],
    );
    let dir = share.join("transport");
    let text = std::fs::read_to_string(dir.join("results.json")).expect("results.json came back");
    farflash_sweep::schema::validate_results(&text).expect("results.json fits its schema");
    let r: Results = serde_json::from_str(&text).expect("results.json");
    assert_eq!(r.settings.transports, vec![Transport::Tcp, Transport::Rdma]);
    let rdma_addr = r
        .settings
        .target_rdma_addr
        .as_deref()
        .expect("RDMA listener");
    assert!(rdma_addr.starts_with("10.0.2.15:"), "{rdma_addr}");
    let target = r
        .settings
        .target_command
        .as_deref()
        .expect("started target");
    assert!(
        target.contains(&format!("--listen rdma:{rdma_addr}")),
        "{target}"
    );
    assert_eq!(r.plan.values, vec![1, 4]);
    assert_eq!(r.points.len(), 2 * 3, "local, tcp and rdma per point");
    for i in 0..r.plan.values.len() {
        assert!(r.point_of(Kind::Local, i).is_some(), "local point {i}");
        for t in [Transport::Tcp, Transport::Rdma] {
            let p = r
                .point_of(Kind::remote(t), i)
                .unwrap_or_else(|| panic!("no {} point {i}", t.name()));
            let f = &p.figures;
            let at = format!("{} iodepth={}", t.name(), p.label);
            assert!(
                p.command
                    .contains(&format!(" -t {} -a 10.0.2.15 ", t.name())),
                "{at}: {}",
                p.command
            );
            assert!(f.total_ios > 0, "{at}: no I/O");
            let c = p.cpu_us_per_io.expect("CPU per I/O recorded");
            assert!(c.host > 0.0, "{at}: host CPU per I/O {}", c.host);
            let tc = c.target.expect("target CPU per I/O");
            assert!(tc > 0.0, "{at}: target CPU per I/O {tc}");
            // The arithmetic: busy % of all CPUs / 100 x CPUs x runtime / I/Os.
            let n = r.environment.nproc as f64;
            let secs = f.runtime_ms as f64 / 1e3;
            let want = p.cpu.host.busy / 100.0 * n * secs / f.total_ios as f64 * 1e6;
            assert!(
                (c.host - want).abs() <= 1e-6 * want,
                "{at}: {} vs {want}",
                c.host
            );
            // The target counted exactly perf's reads (ramp included), per transport.
            let smart = p.target_counters.expect("SMART counters");
            assert_eq!(
                smart.host_read_commands,
                f.total_ios + f.ramp_ios,
                "{at}: SMART read commands vs perf's I/Os"
            );
            assert_eq!(p.mode, Mode::Remote);
        }
    }
    for stem in farflash_sweep::plot::plots(&r) {
        assert!(stem != "transport" || r.has_rdma());
        for ext in ["png", "svg"] {
            let f = dir.join(format!("{stem}.{ext}"));
            let len = std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0);
            assert!(len > 1000, "{} is {len} bytes", f.display());
        }
    }
    assert!(dir.join("transport.png").exists());
    let report = std::fs::read_to_string(dir.join("report.md")).expect("report.md");
    for v in ["1", "4"] {
        assert!(
            report.contains(&format!("RDMA / TCP at iodepth = {v} ")),
            "no RDMA/TCP ratio for iodepth {v}"
        );
    }
    assert!(report.contains("Soft-RoCE") && report.contains("TCG"));
}

#[test]
#[ignore = "boots a QEMU VM with the 6.12 kernel; run by tests/run.sh"]
fn farflash_rdma_auth_and_run_time_listeners_612() {
    let uuid = std::fs::read_to_string("/proc/sys/kernel/random/uuid").expect("a uuid");
    let hostnqn = format!("nqn.2014-08.org.nvmexpress:uuid:{}", uuid.trim());
    let nqn = "nqn.2026-11.io.farflash:rdma-auth";
    let (key, wrong) = (dhchap_secret(32, None), dhchap_secret(32, None));
    let conf = format!(
        "listen = [{{ address = '10.0.2.15:4420', transport = 'rdma' }}]\n\
         [transport]\nmax_io_queues = 2\n\
         [[subsystem]]\nnqn = '{nqn}'\nrequire_auth = true\n\
         [[subsystem.host]]\nnqn = '{hostnqn}'\ndhchap_key = '{key}'\n\
         dhchap_dhgroup = ['ffdhe2048']\n\
         [[subsystem.namespace]]\nbackend = 'ram'\nsize = '32M'\n"
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rdma-auth");
    std::fs::create_dir_all(&dir).expect("create the config's directory");
    let conf_path = dir.join("rdma-auth.toml");
    std::fs::write(&conf_path, conf).expect("write the config");
    let extra = farflash_guest_args(&[
        "--kernel",
        "6.12",
        // The crypto self-tests take minutes under TCG.
        "--append",
        "cryptomgr.notests",
        "--hostnqn",
        &hostnqn,
        "-f",
        conf_path.to_str().expect("UTF-8 path"),
        "--env",
        &format!("NQN={nqn}"),
        "--env",
        &format!("KEY={key}"),
        "--env",
        &format!("WRONG={wrong}"),
    ]);
    run_guest(
        "rdma-farflash-auth.sh",
        &extra,
        &[
            "rxe",
            "serve-rdma-auth",
            "rdma-auth-wrong-key",
            "rdma-auth-right-key",
            "rdma-reauth-during-io",
            "rdma-listener-added",
            "rdma-connect-added-listener",
            "rdma-listener-removed-closes-its-queues-only",
            "no-secret-in-log",
            "target-exit-clean",
        ],
    );
}
