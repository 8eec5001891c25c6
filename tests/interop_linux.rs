//! Interop with the Linux kernel NVMe/TCP host: the kernel initiator
//! (nvme-tcp), nvme-cli and fio run in a QEMU VM started by
//! `tests/linux-host/run-linux-host`, against `farflash serve` on 127.0.0.1.
//!
//! Every test here boots at least one VM (TCG, tens of seconds), so they are
//! `#[ignore]`d and a plain `cargo test` stays fast. `bash tests/run.sh` runs
//! them with `cargo test --test interop_linux -- --ignored --test-threads=1
//! --nocapture`.
//!
//! * `harness_selftest_kernel_target_in_vm` and
//!   `harness_selftest_forward_to_kernel_target_vm` prove the harness and the
//!   guest scenario script against the guest kernel's own nvmet target
//!   (first inside the same VM, then through the same 127.0.0.1 forwarding
//!   path that farflash is tested through, plus a host-side ICReq/ICResp
//!   exchange with the VM's target over `--hostfwd`).
//! * `linux_host_vs_farflash_serve` runs every scenario against
//!   `farflash serve`.
//! * `linux_host_blkdiscard_gives_a_volumes_space_back` (issue 42): the
//!   guest's `blkdiscard` on an exported pool volume frees its clusters,
//!   seen through the management API (`guest/discard.sh`).
//!
//! Knobs (environment): `FARFLASH_INTEROP_SCENARIOS` (subset of the
//! scenarios, space separated), `FARFLASH_INTEROP_BLOCK_SIZE` (512 or 4096,
//! default 512).

mod common;

use common::dhchap_secret;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The scenarios of `tests/linux-host/guest/interop.sh`, in order.
const SCENARIOS: &[&str] = &[
    "discover",
    "connect",
    "identify",
    "fio-ram",
    "fio-file",
    "flush-zeroes-dsm",
    "copy-compare-verify",
    "reconnect",
    "digests",
    "sqflow",
    "io-queues",
    "refused-host",
    "disconnect",
];

/// Upper bound for one VM run (run-linux-host -t); the run itself takes
/// about a minute on 2 cores.
const VM_TIMEOUT_SECS: u64 = 900;

const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

fn send_signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        kill(pid, sig);
    }
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn harness() -> PathBuf {
    repo_root().join("tests/linux-host/run-linux-host")
}

fn guest_script(name: &str) -> PathBuf {
    repo_root().join("tests/linux-host/guest").join(name)
}

fn random_uuid() -> String {
    fs::read_to_string("/proc/sys/kernel/random/uuid")
        .expect("read /proc/sys/kernel/random/uuid")
        .trim()
        .to_string()
}

fn random_hostnqn() -> String {
    format!("nqn.2014-08.org.nvmexpress:uuid:{}", random_uuid())
}

/// `n` distinct free TCP ports on 127.0.0.1 (the listeners are held until
/// all are picked, so they differ).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local_addr").port())
        .collect()
}

fn scenarios() -> Vec<String> {
    match std::env::var("FARFLASH_INTEROP_SCENARIOS") {
        Ok(s) if !s.trim().is_empty() => s.split_whitespace().map(str::to_string).collect(),
        _ => SCENARIOS.iter().map(|s| s.to_string()).collect(),
    }
}

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir =
            std::env::temp_dir().join(format!("farflash-{tag}-{}-{nanos}", std::process::id()));
        fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A child process whose stdout and stderr are streamed (line by line, with a
/// prefix) to our stdout and kept for assertions. Dropping it stops the
/// process (SIGTERM, then SIGKILL) -- its whole process group if it has one
/// of its own, which is how a VM run (timeout + bash + QEMU) is stopped.
struct Proc {
    name: String,
    child: Child,
    own_group: bool,
    lines: Arc<Mutex<Vec<String>>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

impl Proc {
    fn spawn(name: &str, prefix: &str, cmd: &mut Command, own_group: bool) -> Proc {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if own_group {
            cmd.process_group(0);
        }
        println!("[interop] starting {name}: {cmd:?}");
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        let out: Box<dyn Read + Send> = Box::new(child.stdout.take().expect("stdout"));
        let err: Box<dyn Read + Send> = Box::new(child.stderr.take().expect("stderr"));
        for pipe in [out, err] {
            let lines = Arc::clone(&lines);
            let prefix = prefix.to_string();
            readers.push(thread::spawn(move || {
                let mut reader = BufReader::new(pipe);
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    match reader.read_until(b'\n', &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            let line = String::from_utf8_lossy(&buf).trim_end().to_string();
                            println!("{prefix}{line}");
                            lines.lock().unwrap().push(line);
                        }
                    }
                }
            }));
        }
        Proc {
            name: name.to_string(),
            child,
            own_group,
            lines,
            readers,
            status: None,
        }
    }

    fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    fn has_line(&self, needle: &str) -> bool {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains(needle))
    }

    fn running(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status.is_none()
    }

    /// Waits for an output line containing `needle`; fails if the process
    /// exits first or `timeout` passes.
    fn wait_for_line(&mut self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if self.has_line(needle) {
                return;
            }
            if !self.running() {
                thread::sleep(Duration::from_millis(300)); // let the readers drain
                assert!(
                    self.has_line(needle),
                    "{} exited ({:?}) before printing '{needle}'",
                    self.name,
                    self.status
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not print '{needle}' within {timeout:?}",
                self.name
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while self.running() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(200));
        }
        self.status
    }

    /// Waits for the exit and for the output to be read.
    fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let status = self.wait_timeout(timeout).unwrap_or_else(|| {
            self.stop();
            panic!("{} did not finish within {timeout:?}", self.name)
        });
        self.join_readers();
        status
    }

    /// Joins the output readers, giving up after a few seconds (a leftover
    /// grandchild could keep a pipe open).
    fn join_readers(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.readers.iter().any(|r| !r.is_finished()) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
        for r in self.readers.drain(..) {
            if r.is_finished() {
                let _ = r.join();
            }
        }
    }

    fn signal(&self, sig: i32) {
        let pid = self.child.id() as i32;
        send_signal(if self.own_group { -pid } else { pid }, sig);
    }

    /// SIGTERM; returns the exit status if it exits within `grace`.
    fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        if !self.running() {
            return self.status;
        }
        self.signal(SIGTERM);
        self.wait_timeout(grace)
    }

    fn stop(&mut self) {
        if self.terminate(Duration::from_secs(15)).is_none() {
            self.signal(SIGKILL);
            let _ = self.child.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
        self.join_readers();
    }
}

/// Runs `run-linux-host` with `args` to completion and checks that it exited
/// 0 and printed `PASS: <scenario>` for each scenario. If `target` (the
/// process serving the VM) exits meanwhile, the VM is stopped at once rather
/// than left waiting for the kernel's reconnect attempts to time out.
fn run_vm_scenarios(name: &str, args: &[String], scenarios: &[String], target: Option<&mut Proc>) {
    let mut cmd = Command::new(harness());
    cmd.args(args);
    let mut vm = Proc::spawn(name, "", &mut cmd, true);
    let deadline = Instant::now() + Duration::from_secs(VM_TIMEOUT_SECS + 60);
    if let Some(target) = target {
        while vm.running() {
            if !target.running() {
                vm.stop();
                panic!(
                    "{} exited ({:?}) while {name} was running",
                    target.name, target.status
                );
            }
            assert!(Instant::now() < deadline, "{name} did not finish in time");
            thread::sleep(Duration::from_millis(200));
        }
    }
    let status = vm.wait(deadline.saturating_duration_since(Instant::now()));
    let out = vm.output();
    let missing: Vec<&String> = scenarios
        .iter()
        .filter(|s| !out.lines().any(|l| l.starts_with(&format!("PASS: {s} "))))
        .collect();
    let failures: Vec<&str> = out.lines().filter(|l| l.starts_with("FAIL: ")).collect();
    assert!(
        status.success() && missing.is_empty() && failures.is_empty(),
        "{name}: run-linux-host exited with {status}; scenarios without PASS: {missing:?}; \
         failures:\n  {}",
        failures.join("\n  ")
    );
}

/// The guest-side arguments shared by the runs of interop.sh.
fn interop_env(
    nqn: &str,
    namespaces: &str,
    denied: &str,
    scenarios: &[String],
    extra: &[&str],
) -> Vec<String> {
    let mut args = vec![
        "-e".to_string(),
        format!("NQN={nqn}"),
        "-e".to_string(),
        format!("NAMESPACES={namespaces}"),
        "-e".to_string(),
        "FIO_RAM_NSID=1".to_string(),
        "-e".to_string(),
        "FIO_FILE_NSID=2".to_string(),
        "-e".to_string(),
        format!("DENIED_HOSTNQN={denied}"),
        "-e".to_string(),
        format!("SCENARIOS={}", scenarios.join(" ")),
    ];
    for e in extra {
        args.push("-e".to_string());
        args.push(e.to_string());
    }
    args
}

/// Sends an NVMe/TCP ICReq to `addr` and checks the ICResp.
fn check_icreq(addr: SocketAddr) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut icreq = [0u8; 128];
    icreq[0] = 0x00; // PDU type: ICReq
    icreq[2] = 128; // HLEN
    icreq[4..8].copy_from_slice(&128u32.to_le_bytes()); // PLEN
    s.write_all(&icreq).expect("send ICReq");
    let mut icresp = [0u8; 128];
    s.read_exact(&mut icresp).expect("read ICResp");
    let plen = u32::from_le_bytes(icresp[4..8].try_into().unwrap());
    let pfv = u16::from_le_bytes(icresp[8..10].try_into().unwrap());
    let maxh2cdata = u32::from_le_bytes(icresp[12..16].try_into().unwrap());
    println!(
        "[interop] ICResp from {addr}: type {:#x}, hlen {}, plen {plen}, pfv {pfv}, \
         cpda {}, dgst {:#x}, maxh2cdata {maxh2cdata}",
        icresp[0], icresp[2], icresp[10], icresp[11]
    );
    assert_eq!(icresp[0], 0x01, "PDU type is not ICResp");
    assert_eq!(icresp[2], 128, "ICResp HLEN");
    assert_eq!(plen, 128, "ICResp PLEN");
    assert_eq!(pfv, 0, "ICResp PFV");
    assert!(maxh2cdata >= 4096, "ICResp MAXH2CDATA {maxh2cdata} < 4096");
}

/// The harness and interop.sh against the guest kernel's nvmet target in
/// the same VM (127.0.0.1 inside the guest; no host-side target).
#[test]
#[ignore = "boots a QEMU VM; run by tests/run.sh"]
fn harness_selftest_kernel_target_in_vm() {
    let scenarios = scenarios();
    let mut args = vec![
        "-t".to_string(),
        VM_TIMEOUT_SECS.to_string(),
        "-f".to_string(),
        guest_script("kernel-target-serve.sh").display().to_string(),
        "-e".to_string(),
        "INTEROP_TARGET=kernel".to_string(),
        "-e".to_string(),
        format!("SCENARIOS={}", scenarios.join(" ")),
    ];
    args.push(guest_script("interop.sh").display().to_string());
    run_vm_scenarios("kernel-target-in-vm", &args, &scenarios, None);
}

/// The path farflash is tested through, with the kernel's nvmet as the
/// target: VM 1 serves nvmet-tcp on host 127.0.0.1:P1/P2 (--hostfwd);
/// the host talks NVMe/TCP to it (ICReq/ICResp); VM 2 runs interop.sh
/// against host 127.0.0.1:P1/P2 through guestfwd.
#[test]
#[ignore = "boots two QEMU VMs; run by tests/run.sh"]
fn harness_selftest_forward_to_kernel_target_vm() {
    let scenarios = scenarios();
    let ports = free_ports(2);
    let nqn = "nqn.2026-11.io.farflash:kernel-reference";
    let hostnqn = random_hostnqn();
    let denied = random_hostnqn();
    let mut cmd = Command::new(harness());
    cmd.args(["-q", "-t", &VM_TIMEOUT_SECS.to_string(), "--smp", "1"]);
    for p in &ports {
        cmd.args(["--hostfwd", &format!("{p}:{p}")]);
    }
    cmd.args([
        "-e",
        &format!("NQN={nqn}"),
        "-e",
        &format!("SERVE_PORTS={} {}", ports[0], ports[1]),
        "-e",
        "SERVE_NAMESPACES=ram:64M file:32M null:1G",
        "-e",
        &format!("SERVE_ALLOW_HOSTS={hostnqn}"),
    ]);
    cmd.arg(guest_script("kernel-target-serve.sh"));
    let mut target_vm = Proc::spawn("kernel target VM", "[target-vm] ", &mut cmd, true);
    target_vm.wait_for_line("TARGET-READY", Duration::from_secs(600));

    check_icreq(SocketAddr::from((Ipv4Addr::LOCALHOST, ports[0])));

    let mut args = vec!["-t".to_string(), VM_TIMEOUT_SECS.to_string()];
    for p in &ports {
        args.push("-p".to_string());
        args.push(format!("{p}:{p}"));
    }
    args.extend(["--hostnqn".to_string(), hostnqn.clone()]);
    args.extend(interop_env(
        nqn,
        "1:64M:512 2:32M:512 3:1G:512",
        &denied,
        &scenarios,
        &["ID_CTRL_MDTS=any", "NVM_CMDS=none"],
    ));
    args.push(guest_script("interop.sh").display().to_string());
    run_vm_scenarios(
        "initiator VM -> kernel target VM",
        &args,
        &scenarios,
        Some(&mut target_vm),
    );
    assert!(target_vm.running(), "the target VM stopped early");
}

/// Every interop scenario against `farflash serve` on 127.0.0.1.
#[test]
#[ignore = "boots a QEMU VM; run by tests/run.sh"]
fn linux_host_vs_farflash_serve() {
    let scenarios = scenarios();
    let block_size =
        std::env::var("FARFLASH_INTEROP_BLOCK_SIZE").unwrap_or_else(|_| "512".to_string());
    assert!(
        block_size == "512" || block_size == "4096",
        "FARFLASH_INTEROP_BLOCK_SIZE must be 512 or 4096"
    );
    let tmp = TempDir::new("interop");
    let file_ns = tmp.path().join("ns2.img");
    fs::File::create(&file_ns)
        .and_then(|f| f.set_len(32 << 20))
        .expect("create the file namespace");
    let ports = free_ports(2);
    let nqn = "nqn.2026-11.io.farflash:interop";
    let hostnqn = random_hostnqn();
    let denied = random_hostnqn();

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_farflash"));
    cmd.arg("serve");
    for p in &ports {
        cmd.args(["--listen", &format!("127.0.0.1:{p}")]);
    }
    cmd.args(["--nqn", nqn, "--ram", "64M", "--file"])
        .arg(&file_ns)
        .args([
            "--null",
            "1G",
            "--block-size",
            &block_size,
            "--allow-host",
            &hostnqn,
            "--log-level",
            "info",
        ]);
    let mut target = Proc::spawn("farflash serve", "[farflash] ", &mut cmd, false);
    target.wait_for_line("listening on", Duration::from_secs(60));
    for p in &ports {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, *p));
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
            assert!(
                Instant::now() < deadline,
                "farflash serve does not accept on {addr}"
            );
            assert!(target.running(), "farflash serve exited");
            thread::sleep(Duration::from_millis(100));
        }
    }

    let mut args = vec!["-t".to_string(), VM_TIMEOUT_SECS.to_string()];
    for p in &ports {
        args.push("-p".to_string());
        args.push(format!("{p}:{p}"));
    }
    args.extend(["--hostnqn".to_string(), hostnqn.clone()]);
    let namespaces = format!("1:64M:{block_size} 2:32M:{block_size} 3:1G:{block_size}");
    args.extend(interop_env(nqn, &namespaces, &denied, &scenarios, &[]));
    args.push(guest_script("interop.sh").display().to_string());
    run_vm_scenarios(
        "Linux host VM -> farflash serve",
        &args,
        &scenarios,
        Some(&mut target),
    );

    assert!(target.running(), "farflash serve exited during the run");
    if scenarios.iter().any(|s| s == "sqflow") {
        // The sqflow scenario's `nvme connect --disable-sqflow` really set
        // CATTR bit 2 (so its reads took the C2HData SUCCESS path).
        assert!(
            target.has_line("sq_flow_control=false"),
            "no controller connected with SQ flow control disabled"
        );
    }
    let status = target.terminate(Duration::from_secs(20));
    assert!(
        matches!(status, Some(s) if s.success()),
        "farflash serve did not exit 0 within 20 s of SIGTERM ({status:?})"
    );
}

/// Namespaces changed while the Linux host is connected and fio verify runs
/// on another one: NSID 4 added and NSID 2 (a file) grown through the
/// management API (`farflash ctl`), then NSID 4 removed by the configuration
/// file and SIGHUP. The host hears of each change through an asynchronous
/// event: the Changed Namespace List is read, the block device appears, the
/// new size shows, the device disappears; fio never sees an error.
#[test]
#[ignore = "boots a QEMU VM; run by tests/run.sh"]
fn linux_host_sees_namespaces_change_at_run_time() {
    let tmp = TempDir::new("aen");
    let share = tmp.path().join("share");
    fs::create_dir_all(&share).expect("share dir");
    let port = free_ports(1)[0];
    let nqn = "nqn.2026-11.io.farflash:aen";
    let config = tmp.path().join("aen.toml");
    let config_path = config.clone();
    let sock = tmp.path().join("rpc.sock");
    let img = tmp.path().join("ns2.img");
    fs::File::create(&img)
        .and_then(|f| f.set_len(16 << 20))
        .expect("create the file namespace");
    let img_s = img.display().to_string();
    // NSIDs 1-3; NSID 2 at `ns2_size` (the file only grows).
    let write_config = move |ns2_size: &str| {
        let ram = |nsid: u32| {
            format!("[[subsystem.namespace]]\nnsid = {nsid}\nbackend = \"ram\"\nsize = \"16M\"\n")
        };
        let t = format!(
            "listen = [\"127.0.0.1:{port}\"]\n[[subsystem]]\nnqn = \"{nqn}\"\n{}[[subsystem.namespace]]\nnsid = 2\nbackend = \"file\"\npath = \"{img_s}\"\nsize = \"{ns2_size}\"\n{}",
            ram(1),
            ram(3)
        );
        fs::write(&config, t).expect("write the config");
    };
    write_config("16M");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_farflash"));
    cmd.args(["serve", "--log-level", "info", "--config"])
        .arg(&config_path)
        .arg("--rpc-socket")
        .arg(&sock);
    let mut target = Proc::spawn("farflash serve", "[farflash] ", &mut cmd, false);
    target.wait_for_line("listening on", Duration::from_secs(60));
    let ctl = move |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_farflash"))
            .arg("ctl")
            .arg("--rpc-socket")
            .arg(&sock)
            .args(args)
            .output()
            .expect("run farflash ctl");
        assert!(
            out.status.success(),
            "farflash ctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };

    // The host side of the exchange: act on the guest's requests.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let target_pid = target.child.id() as i32;
    let watcher = {
        let (share, stop) = (share.clone(), stop.clone());
        thread::spawn(move || {
            let mut done = String::new();
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                let req = fs::read_to_string(share.join("request")).unwrap_or_default();
                let req = req.trim().to_string();
                if !req.is_empty() && req != done {
                    if req == "add" {
                        ctl(&["namespace", "add", nqn, "--nsid", "4", "--ram", "16M"]);
                        ctl(&["namespace", "resize", nqn, "2", "32M"]);
                    } else {
                        // The file as the target now is, without NSID 4.
                        write_config("32M");
                        send_signal(target_pid, 1); // SIGHUP: reload
                    }
                    done = req;
                }
                thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let args: Vec<String> = vec![
        "-t".into(),
        VM_TIMEOUT_SECS.to_string(),
        "-p".into(),
        format!("{port}:{port}"),
        "-s".into(),
        share.display().to_string(),
        "-e".into(),
        format!("NQN={nqn}"),
        "-f".into(),
        guest_script("lib.sh").display().to_string(),
        guest_script("aen.sh").display().to_string(),
    ];
    run_vm_scenarios(
        "Linux host VM -> farflash serve (namespace changes)",
        &args,
        &["aen".to_string()],
        Some(&mut target),
    );
    stop.store(true, std::sync::atomic::Ordering::Release);
    watcher.join().expect("watcher thread");
    assert!(
        target.has_line("reload: namespaces changed"),
        "the target did not log the reload"
    );
    let status = target.terminate(Duration::from_secs(20));
    assert!(
        matches!(status, Some(s) if s.success()),
        "farflash serve did not exit 0 ({status:?})"
    );
}

/// Issue 33 with the Linux host (`guest/scale.sh`): `nvme discover` against
/// a target with 1,024 subsystems lists them all (libnvme reads the 1 MiB
/// log in 4 KiB pieces and checks GENCTR), and a subsystem of 1,024 RAM
/// namespaces is attached: every block device appears, and data written to
/// the first and the last reads back.
#[test]
#[ignore = "boots a QEMU VM; run by tests/run.sh"]
fn linux_host_discovers_1024_subsystems_and_attaches_1024_namespaces() {
    const SUBSYSTEMS: usize = 1024;
    const NAMESPACES: usize = 1024;
    let tmp = TempDir::new("scale");
    let port = free_ports(1)[0];
    let prefix = "nqn.2026-11.io.farflash.scale:s";
    let nqn = "nqn.2026-11.io.farflash.scale:namespaces";
    let mut t = format!("listen = [\"127.0.0.1:{port}\"]\n");
    for i in 0..SUBSYSTEMS {
        t.push_str(&format!(
            "[[subsystem]]\nnqn = \"{prefix}{i:05}\"\n[[subsystem.namespace]]\nbackend = \"null\"\nsize = \"1M\"\n"
        ));
    }
    t.push_str(&format!("[[subsystem]]\nnqn = \"{nqn}\"\n"));
    for _ in 0..NAMESPACES {
        t.push_str("[[subsystem.namespace]]\nbackend = \"ram\"\nsize = \"1M\"\n");
    }
    let config = tmp.path().join("scale.toml");
    fs::write(&config, t).expect("write the config");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_farflash"));
    cmd.args([
        "serve",
        "--log-level",
        "warn",
        "--rpc-socket",
        "none",
        "--config",
    ])
    .arg(&config);
    let mut target = Proc::spawn("farflash serve", "[farflash] ", &mut cmd, false);
    target.wait_for_line("listening on", Duration::from_secs(60));
    let args: Vec<String> = vec![
        "-t".into(),
        VM_TIMEOUT_SECS.to_string(),
        "-p".into(),
        format!("{port}:{port}"),
        "-e".into(),
        format!("PREFIX={prefix}"),
        "-e".into(),
        format!("SUBSYSTEMS={SUBSYSTEMS}"),
        "-e".into(),
        format!("NQN={nqn}"),
        "-e".into(),
        format!("NAMESPACES={NAMESPACES}"),
        "-f".into(),
        guest_script("lib.sh").display().to_string(),
        guest_script("scale.sh").display().to_string(),
    ];
    run_vm_scenarios(
        "Linux host VM -> farflash serve (1,024 subsystems, 1,024 namespaces)",
        &args,
        &["scale-discover".to_string(), "scale-namespaces".to_string()],
        Some(&mut target),
    );
    let status = target.terminate(Duration::from_secs(20));
    assert!(
        matches!(status, Some(s) if s.success()),
        "farflash serve did not exit 0 ({status:?})"
    );
}

/// NVMe in-band authentication with the Linux 6.12 host (NVME_HOST_AUTH=y;
/// Debian 12's 6.1 kernel has none): one VM runs `guest/auth.sh` against
/// `farflash serve --config` with one subsystem per case: SHA-256/384/512
/// × null/ffdhe2048/ffdhe8192 × unidirectional/bidirectional (the kernel
/// must log the hash and group it used), fio verify on some, a wrong host
/// secret (refused while the target keeps serving the next cases), a wrong
/// controller secret (the host refuses), no secret for a subsystem that
/// requires one, and re-authentication through sysfs `dhchap_secret`
/// while fio runs. The target must log no secret.
#[test]
#[ignore = "boots a QEMU VM with the 6.12 kernel; run by tests/run.sh"]
fn linux_612_host_authenticates_to_farflash_serve() {
    use farflash_auth::HashId;
    let tmp = TempDir::new("auth");
    let ports = free_ports(2);
    let (port, sig_port) = (ports[0], ports[1]);
    let hostnqn = random_hostnqn();
    let prefix = "nqn.2026-11.io.farflash:auth";
    let mut toml = format!("listen = ['127.0.0.1:{port}']\n[transport]\nmax_io_queues = 2\n");
    let mut cases = String::new();
    let mut secrets = Vec::new();
    let mut add = |name: &str,
                   expect: &str,
                   hash: &str,
                   group: &str,
                   target_keys: (&str, Option<&str>),
                   host_keys: (&str, &str)| {
        let nqn = format!("{prefix}:{name}");
        toml += &format!(
            "[[subsystem]]\nnqn = '{nqn}'\nrequire_auth = true\n\
             [[subsystem.host]]\nnqn = '{hostnqn}'\ndhchap_key = '{}'\n{}\
             dhchap_hash = ['{hash}']\ndhchap_dhgroup = ['{group}']\n\
             [[subsystem.namespace]]\nbackend = 'ram'\nsize = '16M'\n",
            target_keys.0,
            target_keys
                .1
                .map(|k| format!("dhchap_ctrl_key = '{k}'\n"))
                .unwrap_or_default(),
        );
        cases += &format!(
            "{name} {nqn} {expect} {hash} {group} {} {}\n",
            host_keys.0, host_keys.1
        );
    };
    let hashes = [
        ("sha256", 32, Some(HashId::Sha256)),
        ("sha384", 48, Some(HashId::Sha384)),
        ("sha512", 64, Some(HashId::Sha512)),
    ];
    for (i, (hash, len, hmac)) in hashes.into_iter().enumerate() {
        for group in ["null", "ffdhe2048", "ffdhe8192"] {
            for bidi in [false, true] {
                // Transformed and plain keys alternate.
                let host = dhchap_secret(len, if bidi { None } else { hmac });
                let ctrl = dhchap_secret(len, hmac);
                let fio = (i == 0 && group == "null" && !bidi)
                    || (i == 2 && group == "ffdhe8192" && bidi);
                let name = format!("{hash}-{group}-{}", if bidi { "bi" } else { "uni" });
                let expect = if fio { "fio" } else { "ok" };
                add(
                    &name,
                    expect,
                    hash,
                    group,
                    (&host, Some(&ctrl)),
                    (&host, if bidi { &ctrl } else { "-" }),
                );
                secrets.push(host);
                secrets.push(ctrl);
            }
        }
        if i == 0 {
            // Failures between the successes: the target goes on serving.
            let (good, wrong) = (dhchap_secret(32, None), dhchap_secret(32, None));
            let ctrl = dhchap_secret(32, None);
            add(
                "wrong-host-secret",
                "refused",
                hash,
                "ffdhe2048",
                (&good, None),
                (&wrong, "-"),
            );
            add(
                "wrong-ctrl-secret",
                "refused",
                hash,
                "null",
                (&good, Some(&ctrl)),
                (&good, &wrong),
            );
            add(
                "no-secret",
                "refused",
                hash,
                "null",
                (&good, None),
                ("-", "-"),
            );
            secrets.extend([good, wrong, ctrl]);
        }
    }
    let re = dhchap_secret(48, Some(HashId::Sha384));
    add(
        "reauth-sysfs",
        "reauth",
        "sha384",
        "ffdhe2048",
        (&re, None),
        (&re, "-"),
    );
    secrets.push(re);
    // Key rotation: the target takes a new key through the management API
    // while the host's controller is live, then the host writes it to sysfs
    // and re-authenticates every queue with it.
    let (old_key, new_key) = (
        dhchap_secret(32, Some(HashId::Sha256)),
        dhchap_secret(32, None),
    );
    add(
        "rotate-sysfs",
        "rotate",
        "sha256",
        "ffdhe2048",
        (&old_key, None),
        (&old_key, "-"),
    );
    // The rotate line's extra fields: the new secret and the signal port.
    cases.truncate(cases.trim_end().len());
    cases += &format!(" {new_key} {sig_port}\n");
    secrets.extend([old_key, new_key.clone()]);
    let rpc_sock = tmp.path().join("rpc.sock");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let signal = rotate_key_on_signal(
        sig_port,
        rpc_sock.clone(),
        format!("{prefix}:rotate-sysfs"),
        hostnqn.clone(),
        new_key,
        stop.clone(),
    );
    let config = tmp.path().join("auth.toml");
    fs::write(&config, &toml).expect("write the config");
    let case_file = tmp.path().join("auth-cases");
    fs::write(&case_file, &cases).expect("write the cases");

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_farflash"));
    cmd.args(["serve", "--config"])
        .arg(&config)
        .arg("--rpc-socket")
        .arg(&rpc_sock)
        .args(["--log-level", "info"]);
    let mut target = Proc::spawn("farflash serve", "[farflash] ", &mut cmd, false);
    target.wait_for_line("listening on", Duration::from_secs(60));

    let names: Vec<String> = cases
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    let args: Vec<String> = [
        "-t",
        &VM_TIMEOUT_SECS.to_string(),
        "--kernel",
        "6.12",
        "--append",
        "cryptomgr.notests",
        "-p",
        &format!("{port}:{port}"),
        "-p",
        &format!("{sig_port}:{sig_port}"),
        "--hostnqn",
        &hostnqn,
        "-f",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        case_file.display().to_string(),
        guest_script("auth.sh").display().to_string(),
    ])
    .collect();
    run_vm_scenarios(
        "Linux 6.12 host VM -> farflash serve (DH-HMAC-CHAP)",
        &args,
        &names,
        Some(&mut target),
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rotated = signal.join().expect("signal thread");
    assert!(target.running(), "farflash serve exited during the run");
    rotated.expect("the key rotation through the management API");
    let log = target.output();
    // Every I/O queue 1 authenticated once per successful case, and once
    // more when the sysfs write re-authenticated it under fio.
    let ok_cases = cases.lines().filter(|l| !l.contains(" refused ")).count();
    let qid1 = (log.lines())
        .filter(|l| l.contains("host authenticated") && l.contains("qid=1"))
        .count();
    assert!(
        qid1 > ok_cases,
        "I/O queue 1 authenticated {qid1} times for {ok_cases} connects: no re-authentication"
    );
    assert!(target.has_line("authentication failed"));
    for s in &secrets {
        // The base64 part alone must not appear either.
        let b64 = s.trim_end_matches(':').rsplit(':').next().unwrap_or(s);
        assert!(!log.contains(b64), "a secret reached the target's log");
    }
    let status = target.terminate(Duration::from_secs(20));
    assert!(
        matches!(status, Some(s) if s.success()),
        "farflash serve did not exit 0 within 20 s of SIGTERM ({status:?})"
    );
}

/// Serves one connection on 127.0.0.1:`port` (the guest's signal): gives
/// `host` the key `key` on subsystem `nqn` through the management socket,
/// answers "ok" (or "error"); gives up once `stop` is set.
fn rotate_key_on_signal(
    port: u16,
    rpc_sock: PathBuf,
    nqn: String,
    host: String,
    key: String,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> JoinHandle<Result<(), String>> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("bind the signal port");
    listener
        .set_nonblocking(true)
        .expect("non-blocking listener");
    thread::spawn(move || {
        let mut conn = loop {
            match listener.accept() {
                Ok((c, _)) => break c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        return Err("the guest never asked for the new key".into());
                    }
                    thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(format!("signal port: {e}")),
            }
        };
        let answer = (|| -> Result<String, String> {
            let mut s = std::os::unix::net::UnixStream::connect(&rpc_sock)
                .map_err(|e| format!("management socket: {e}"))?;
            s.set_read_timeout(Some(Duration::from_secs(20)))
                .map_err(|e| e.to_string())?;
            let req = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "host_allow",
                "params": {"nqn": nqn, "host": host, "dhchap_key": key,
                           "dhchap_hash": ["sha256"], "dhchap_dhgroup": ["ffdhe2048"]}});
            writeln!(s, "{req}").map_err(|e| e.to_string())?;
            let mut line = String::new();
            BufReader::new(s)
                .read_line(&mut line)
                .map_err(|e| e.to_string())?;
            Ok(line)
        })();
        let good = matches!(&answer, Ok(l) if l.contains("\"result\"") && !l.contains("\"error\""));
        let _ = conn.set_nonblocking(false);
        let _ = writeln!(conn, "{}", if good { "ok" } else { "error" });
        match answer {
            Ok(_) if good => Ok(()),
            Ok(l) => Err(format!("host_allow answered {l}")),
            Err(e) => Err(e),
        }
    })
}

/// One JSON-RPC call on the Unix socket; its `result`, or the error text.
fn rpc_result(
    sock: &Path,
    method: &str,
    params: serde_json::Value,
) -> Result<serde_json::Value, String> {
    let req = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let (a, line) = common::rpc_exchange(sock, req.to_string().as_bytes());
    match a.get("result") {
        Some(r) if a.get("error").is_none() => Ok(r.clone()),
        _ => Err(format!("{method}: {line}")),
    }
}

/// The host side of `guest/discard.sh`: for each request "PHASE EXPECTED"
/// in `share`, waits (up to 60 s: the pool frees clusters at its next
/// commit) until both the volume's and the pool's `allocated` are EXPECTED
/// bytes, and answers "ok" or what it saw in `answer.PHASE`. Returns the
/// (phase, answer) pairs once `stop` is set.
fn answer_allocated(
    share: PathBuf,
    sock: PathBuf,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> JoinHandle<Vec<(String, String)>> {
    thread::spawn(move || {
        let mut answered: Vec<(String, String)> = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::Acquire) {
            let req = fs::read_to_string(share.join("request")).unwrap_or_default();
            let mut words = req.split_whitespace();
            let (Some(phase), Some(want)) = (words.next(), words.next()) else {
                thread::sleep(Duration::from_millis(50));
                continue;
            };
            if answered.iter().any(|(p, _)| p == phase) {
                thread::sleep(Duration::from_millis(50));
                continue;
            }
            let want: u64 = want.parse().expect("the guest's expected byte count");
            let deadline = Instant::now() + Duration::from_secs(60);
            let answer = loop {
                let vol = rpc_result(
                    &sock,
                    "volume_get",
                    serde_json::json!({"pool": "tank", "name": "disc"}),
                )
                .map(|v| v["allocated"].as_u64());
                let pool = rpc_result(&sock, "pool_list", serde_json::json!({"name": "tank"}))
                    .map(|p| p[0]["allocated"].as_u64());
                if vol == Ok(Some(want)) && pool == Ok(Some(want)) {
                    break "ok".to_string();
                }
                if Instant::now() > deadline {
                    break format!("after 60 s the volume has {vol:?} and the pool {pool:?} bytes allocated, want {want}");
                }
                thread::sleep(Duration::from_millis(100));
            };
            println!("[discard] {phase}: want {want} bytes allocated: {answer}");
            fs::write(share.join(format!(".answer.{phase}")), &answer).expect("write the answer");
            fs::rename(
                share.join(format!(".answer.{phase}")),
                share.join(format!("answer.{phase}")),
            )
            .expect("publish the answer");
            answered.push((phase.to_string(), answer));
        }
        answered
    })
}

/// Issue 42: `blkdiscard` on the Linux host gives a thin volume's space
/// back, visibly. `farflash serve` exports a 256 MiB volume of a local pool
/// (1 MiB clusters); the guest (`guest/discard.sh`) checks DLFEAT,
/// NPDG/NPDA and the block layer's discard_granularity (4 KiB: Linux 6.1
/// does not use NPDG/NPDA), writes 64 MiB,
/// discards 32 whole clusters plus two half clusters, then the whole
/// device; after each step the volume's and the pool's `allocated`
/// (JSON-RPC `volume_get`, `pool_list`) are 64, 32 and 0 MiB, and the
/// discarded bytes read as zeroes.
#[test]
#[ignore = "boots a QEMU VM; run by tests/run.sh"]
fn linux_host_blkdiscard_gives_a_volumes_space_back() {
    const CLUSTER: u64 = 1 << 20;
    let tmp = TempDir::new("discard");
    let share = tmp.path().join("share");
    fs::create_dir_all(&share).expect("share dir");
    let dev = tmp.path().join("tank.img");
    fs::File::create(&dev)
        .and_then(|f| f.set_len(1 << 30))
        .expect("create the pool's file");
    let out = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .args(["pool", "create", "tank"])
        .arg(&dev)
        .args(["--cluster-size", &CLUSTER.to_string()])
        .output()
        .expect("run farflash pool create");
    assert!(out.status.success(), "farflash pool create: {out:?}");
    let port = free_ports(1)[0];
    let nqn = "nqn.2026-11.io.farflash:discard";
    let config = tmp.path().join("discard.toml");
    fs::write(
        &config,
        format!(
            "listen = [\"127.0.0.1:{port}\"]\n[[subsystem]]\nnqn = \"{nqn}\"\n[[pool]]\nname = \"tank\"\ndevices = [\"{}\"]\n",
            dev.display()
        ),
    )
    .expect("write the config");
    let sock = tmp.path().join("rpc.sock");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_farflash"));
    cmd.args(["serve", "--log-level", "info", "--config"])
        .arg(&config)
        .arg("--rpc-socket")
        .arg(&sock);
    let mut target = Proc::spawn("farflash serve", "[farflash] ", &mut cmd, false);
    target.wait_for_line("listening on", Duration::from_secs(60));
    let vol = serde_json::json!({"pool": "tank", "name": "disc", "size": "256M"});
    rpc_result(&sock, "volume_create", vol).expect("volume_create");
    let ns = serde_json::json!({"nqn": nqn, "backend": "volume", "volume": "tank/disc", "nsid": 1});
    rpc_result(&sock, "namespace_add", ns).expect("namespace_add");

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = answer_allocated(share.clone(), sock.clone(), stop.clone());
    let args: Vec<String> = vec![
        "-t".into(),
        VM_TIMEOUT_SECS.to_string(),
        "-p".into(),
        format!("{port}:{port}"),
        "-s".into(),
        share.display().to_string(),
        "-e".into(),
        format!("NQN={nqn}"),
        "-e".into(),
        format!("CLUSTER={CLUSTER}"),
        // Linux 6.1's nvme_config_discard sets discard_granularity to the
        // logical block size (4 KiB here): it does not read NPDG/NPDA,
        // which the guest checks in Identify Namespace instead.
        "-e".into(),
        "GRANULARITY=4096".into(),
        "-e".into(),
        "WRITE_MIB=64".into(),
        "-f".into(),
        guest_script("lib.sh").display().to_string(),
        guest_script("discard.sh").display().to_string(),
    ];
    run_vm_scenarios(
        "Linux host VM -> farflash serve (blkdiscard on a volume)",
        &args,
        &["discard".to_string()],
        Some(&mut target),
    );
    stop.store(true, std::sync::atomic::Ordering::Release);
    let answered = watcher.join().expect("watcher thread");
    let want: Vec<(String, String)> = ["written", "range", "all"]
        .iter()
        .map(|p| (p.to_string(), "ok".to_string()))
        .collect();
    assert_eq!(answered, want, "the host side's checks of `allocated`");
    let status = target.terminate(Duration::from_secs(20));
    assert!(
        matches!(status, Some(s) if s.success()),
        "farflash serve did not exit 0 ({status:?})"
    );
}
