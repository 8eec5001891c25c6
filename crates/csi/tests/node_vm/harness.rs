//! The parts `node_vm.rs` runs: processes whose output is streamed and
//! kept, the host side (a `farflash serve` with a local pool and its
//! mutual-TLS management endpoint, the CSI controller, a TCP bridge to its
//! socket) and the Linux guest (tests/linux-host/run-linux-host with
//! guest/csi-node.sh: farflash-csi's node service, a TCP bridge to its
//! socket, and a shell for the test's commands).

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// csi-sanity's version, as tests/csi-sanity.sh pins and builds it.
pub const CSI_SANITY_VERSION: &str = "v5.6.0";
/// The guest's name for the host's 127.0.0.1 (run-linux-host's guestfwd).
pub const HOST_ALIAS: &str = "10.0.2.100";
/// The pool the StorageClass parameters name.
pub const POOL: &str = "csi";
const NODE_GUEST_PORT: u16 = 7000;
const CMD_GUEST_PORT: u16 = 7001;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A binary of the workspace's `farflash` package, next to this test's
/// target directory (tests/run.sh builds it first).
fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/debug/deps/node_vm-HASH -> target/debug/NAME
    let p = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join(name);
    assert!(
        p.is_file(),
        "{} is missing: build it first (cargo build -p farflash --bin {name})",
        p.display()
    );
    p
}

pub fn csi_sanity() -> PathBuf {
    let cache = std::env::var_os("FARFLASH_TOOLS_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|x| PathBuf::from(x).join("farflash")))
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/farflash")
        });
    let p = cache.join(format!("csi-sanity-{CSI_SANITY_VERSION}/csi-sanity"));
    assert!(
        p.is_file(),
        "{} is missing: build it with `bash tests/csi-sanity.sh --build-only`",
        p.display()
    );
    p
}

pub fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0"))
        .collect();
    ls.iter()
        .map(|l| l.local_addr().expect("local_addr").port())
        .collect()
}

pub fn random_hostnqn() -> String {
    let u = std::fs::read_to_string("/proc/sys/kernel/random/uuid").expect("random uuid");
    format!("nqn.2014-08.org.nvmexpress:uuid:{}", u.trim())
}

/// Waits until `f` holds, at most `limit`; false when it never did.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// A child process in a process group of its own, its output streamed with
/// a prefix and kept; stopped (the whole group) when dropped.
pub struct Proc {
    name: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

impl Proc {
    pub fn spawn(name: &str, cmd: &mut Command) -> Proc {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        println!("[node_vm] starting {name}: {cmd:?}");
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out: Box<dyn Read + Send> = Box::new(child.stdout.take().expect("stdout"));
        let err: Box<dyn Read + Send> = Box::new(child.stderr.take().expect("stderr"));
        let readers = [out, err]
            .into_iter()
            .map(|pipe| {
                let lines = Arc::clone(&lines);
                let prefix = format!("[{name}] ");
                thread::spawn(move || {
                    let mut r = BufReader::new(pipe);
                    let mut buf = Vec::new();
                    while matches!(r.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
                        let line = String::from_utf8_lossy(&buf).trim_end().to_string();
                        println!("{prefix}{line}");
                        lines.lock().unwrap().push(line);
                        buf.clear();
                    }
                })
            })
            .collect();
        Proc {
            name: name.to_string(),
            child,
            lines,
            readers,
            status: None,
        }
    }

    pub fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    pub fn running(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status.is_none()
    }

    /// Waits for a line containing `what`; fails naming the process if it
    /// exits first or `limit` passes.
    pub fn wait_line(&mut self, what: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(l) = self.lines.lock().unwrap().iter().find(|l| l.contains(what)) {
                return l.clone();
            }
            assert!(
                self.running(),
                "{} exited ({:?}) before printing {what:?}",
                self.name,
                self.status
            );
            assert!(
                Instant::now() < deadline,
                "{} printed no {what:?} within {} s",
                self.name,
                limit.as_secs()
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn signal(&self, sig: &str, group: bool) {
        let target = if group {
            format!("-{}", self.child.id())
        } else {
            self.child.id().to_string()
        };
        let _ = Command::new("kill")
            .args([sig, "--", &target])
            .stderr(Stdio::null())
            .status();
    }

    /// Waits for the exit, at most `limit`; its status.
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let done = wait_until(limit, || !self.running());
        assert!(
            done,
            "{} did not exit within {} s",
            self.name,
            limit.as_secs()
        );
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        self.status.expect("status")
    }

    /// SIGTERM; the exit status within `limit`.
    pub fn terminate(&mut self, limit: Duration) -> ExitStatus {
        self.signal("-TERM", false);
        self.wait(limit)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.running() {
            self.signal("-TERM", true);
            if !wait_until(Duration::from_secs(10), || !self.running()) {
                self.signal("-KILL", true);
                let _ = self.child.wait();
            }
        }
    }
}

/// The host side: target, controller, bridge.
pub struct Host {
    dir: PathBuf,
    farflash: PathBuf,
    pub nvme_port: u16,
    pub bridge_port: u16,
    serve: Option<Proc>,
    csi: Option<Proc>,
    bridge: Option<Proc>,
}

impl Host {
    /// Certificates (scripts/mgmt-certs.sh), `farflash serve` with a
    /// 4 GiB local pool, the CSI controller on a Unix socket and a
    /// TCP bridge to it on 127.0.0.1 (for the guest and for the test's
    /// gRPC client).
    pub fn start(tag: &str) -> Host {
        Host::start_listen(tag, "")
    }

    /// [`Host::start`] with a `tls-optional:` NVMe/TCP listener: plain
    /// and TLS connections on one port (docs/tls.md).
    pub fn start_tls_optional(tag: &str) -> Host {
        Host::start_listen(tag, "tls-optional:")
    }

    fn start_listen(tag: &str, scheme: &str) -> Host {
        let dir = std::env::temp_dir().join(format!("ff-node-vm-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let p = free_ports(3);
        let mut h = Host {
            farflash: workspace_bin("farflash"),
            dir,
            nvme_port: p[0],
            bridge_port: p[2],
            serve: None,
            csi: None,
            bridge: None,
        };
        h.certs();
        let pki = h.dir.join("pki");
        let mgmt = format!("127.0.0.1:{}", p[1]);
        let mut serve = Command::new(&h.farflash);
        serve
            .args(["serve", "--ram", "16M", "--threads", "1", "--listen"])
            .arg(format!("{scheme}127.0.0.1:{}", h.nvme_port))
            .args(["--rpc-listen", &mgmt])
            .arg("--rpc-cert")
            .arg(pki.join("target-a.crt"))
            .arg("--rpc-key")
            .arg(pki.join("target-a.key"))
            .arg("--rpc-client-ca")
            .arg(pki.join("ca.crt"));
        h.start_target(serve);
        let img = h.dir.join("pool.img");
        std::fs::File::create(&img)
            .and_then(|f| f.set_len(4 << 30))
            .expect("pool file");
        h.rpc(
            "pool_create",
            json!({"name": POOL, "backend": "local", "devices": [img]}),
        );
        let config = h.dir.join("controller.toml");
        std::fs::write(
            &config,
            format!(
                "[tls]\ncert = \"{0}/csi-controller.crt\"\nkey = \"{0}/csi-controller.key\"\n\
                 ca = \"{0}/ca.crt\"\n\n[[target]]\nname = \"target-a\"\nmanagement = \"{mgmt}\"\n\
                 server_name = \"target-a\"\nnvme = [\"{HOST_ALIAS}:{1}\"]\n",
                pki.display(),
                h.nvme_port
            ),
        )
        .expect("controller.toml");
        let sock = h.dir.join("csi.sock");
        let mut csi = Proc::spawn(
            "csi-controller",
            Command::new(env!("CARGO_BIN_EXE_farflash-csi"))
                .arg("--endpoint")
                .arg(format!("unix://{}", sock.display()))
                .arg("--controller-config")
                .arg(&config),
        );
        csi.wait_line("serving", Duration::from_secs(60));
        h.csi = Some(csi);
        h.bridge = Some(Proc::spawn(
            "bridge",
            Command::new("socat")
                .arg(format!(
                    "TCP-LISTEN:{},bind=127.0.0.1,fork,reuseaddr",
                    h.bridge_port
                ))
                .arg(format!("UNIX-CONNECT:{}", sock.display())),
        ));
        let port = h.bridge_port;
        assert!(
            wait_until(Duration::from_secs(30), || TcpStream::connect((
                Ipv4Addr::LOCALHOST,
                port
            ))
            .is_ok()),
            "the socat bridge to the controller's socket does not listen on {port}"
        );
        h
    }

    fn certs(&self) {
        let script = repo_root().join("scripts/mgmt-certs.sh");
        let pki = self.dir.join("pki");
        for args in [
            vec!["ca"],
            vec!["server", "target-a", "IP:127.0.0.1,DNS:target-a"],
            vec!["client", "csi-controller"],
        ] {
            let out = Command::new("bash")
                .arg(&script)
                .arg(args[0])
                .arg(&pki)
                .args(&args[1..])
                .output()
                .expect("bash scripts/mgmt-certs.sh (needs openssl)");
            assert!(
                out.status.success(),
                "mgmt-certs.sh {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    fn rpc_socket(&self) -> PathBuf {
        self.dir.join("rpc.sock")
    }

    fn start_target(&mut self, mut cmd: Command) {
        let _ = std::fs::remove_file(self.rpc_socket());
        cmd.arg("--rpc-socket").arg(self.rpc_socket());
        let mut serve = Proc::spawn("serve", &mut cmd);
        serve.wait_line("listening on", Duration::from_secs(60));
        let sock = self.rpc_socket();
        assert!(
            wait_until(Duration::from_secs(30), || sock.exists()),
            "farflash serve made no management socket"
        );
        self.serve = Some(serve);
    }

    /// A management call through the Unix socket (`farflash rpc`); its
    /// result. A JSON-RPC error fails the test, naming the call.
    pub fn rpc(&self, method: &str, params: Value) -> Value {
        let out = Command::new(&self.farflash)
            .args(["rpc", "-s"])
            .arg(self.rpc_socket())
            .arg(method)
            .arg(params.to_string())
            .output()
            .expect("farflash rpc");
        let text = String::from_utf8_lossy(&out.stdout);
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!(
                "{method}: not JSON ({e}): {text} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert!(v.get("error").is_none(), "{method} {params}: {v}");
        v["result"].clone()
    }

    /// Saves the running configuration (the subsystems the controller
    /// made), stops the target with SIGTERM (exit 0 expected).
    pub fn stop_target(&mut self) {
        let saved = self.dir.join("saved.toml");
        self.rpc("save_config", json!({ "path": saved }));
        let mut serve = self.serve.take().expect("a target runs");
        let st = serve.terminate(Duration::from_secs(30));
        assert!(st.success(), "farflash serve exited with {st} on SIGTERM");
    }

    /// Starts the target again from the saved configuration (its pool
    /// reopened, its subsystems back).
    pub fn restart_target(&mut self) {
        let mut cmd = Command::new(&self.farflash);
        cmd.arg("serve")
            .arg("--config")
            .arg(self.dir.join("saved.toml"));
        self.start_target(cmd);
    }

    /// The controller's log so far.
    pub fn controller_log(&self) -> String {
        self.csi.as_ref().map(Proc::output).unwrap_or_default()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.bridge.take();
        self.csi.take();
        self.serve.take();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The Linux guest running the node service.
pub struct Vm {
    proc: Proc,
    pub node_port: u16,
    cmd_port: u16,
    pub hostnqn: String,
}

impl Vm {
    /// Boots the 6.1 guest (`multipath`: nvme_core.multipath, set on the
    /// kernel command line) with farflash-csi's node service; returns when
    /// it serves.
    pub fn boot(host: &Host, multipath: bool, files: &[PathBuf]) -> Vm {
        Vm::boot_kernel(host, multipath, false, files)
    }

    /// [`Vm::boot`]; with `tls`, the 6.12 guest (`--kernel 6.12 --tls`:
    /// Debian 13's kernel, tlshd and keyctl) with tlshd serving the
    /// `.nvme` keyring (guest/tls-lib.sh) before the node service starts.
    pub fn boot_kernel(host: &Host, multipath: bool, tls: bool, files: &[PathBuf]) -> Vm {
        let p = free_ports(2);
        let hostnqn = random_hostnqn();
        let guest = repo_root().join("tests/linux-host/guest");
        let mp = if multipath { "Y" } else { "N" };
        let mut cmd = Command::new(repo_root().join("tests/linux-host/run-linux-host"));
        cmd.args(["-t", "1500", "--hostnqn", &hostnqn]);
        if tls {
            cmd.args(["--kernel", "6.12", "--tls", "-e", "TLS=1"])
                .arg("-f")
                .arg(guest.join("tls-lib.sh"));
        }
        cmd.arg("-p")
            .arg(host.nvme_port.to_string())
            .arg("-p")
            .arg(host.bridge_port.to_string())
            .arg("--hostfwd")
            .arg(format!("{}:{NODE_GUEST_PORT}", p[0]))
            .arg("--hostfwd")
            .arg(format!("{}:{CMD_GUEST_PORT}", p[1]))
            .arg("--append")
            .arg(format!("nvme_core.multipath={mp}"))
            .arg("--bin")
            .arg(env!("CARGO_BIN_EXE_farflash-csi"))
            .arg("--bin")
            .arg(csi_sanity());
        for b in ["socat", "mke2fs", "resize2fs", "blkid", "mount", "umount"] {
            cmd.args(["--bin", b]);
        }
        cmd.args(["--module", "ext4", "--image-file", "/etc/mke2fs.conf"])
            .arg("-f")
            .arg(guest.join("csi-cmd.sh"));
        for f in files {
            cmd.arg("-f").arg(f);
        }
        cmd.arg("-e")
            .arg(format!(
                "FARFLASH_CSI={}",
                env!("CARGO_BIN_EXE_farflash-csi")
            ))
            .arg("-e")
            .arg(format!("CSI_SANITY={}", csi_sanity().display()))
            .args(["-e", &format!("NODE_PORT={NODE_GUEST_PORT}")])
            .args(["-e", &format!("CMD_PORT={CMD_GUEST_PORT}")])
            .args(["-e", &format!("MULTIPATH={mp}")])
            .arg(guest.join("csi-node.sh"));
        let mut proc = Proc::spawn("guest", &mut cmd);
        // The image build (once per farflash-csi binary) and the boot.
        proc.wait_line(
            &format!("CSI-NODE-READY multipath={mp}"),
            Duration::from_secs(600),
        );
        Vm {
            proc,
            node_port: p[0],
            cmd_port: p[1],
            hostnqn,
        }
    }

    /// Runs `script` in the guest (bash); its status and output.
    pub fn sh(&self, script: &str) -> (i32, String) {
        let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, self.cmd_port))
            .unwrap_or_else(|e| panic!("guest shell on {}: {e}", self.cmd_port));
        s.set_read_timeout(Some(Duration::from_secs(900)))
            .expect("timeout");
        write!(s, "{script}\n__END__\n").expect("send the script");
        let mut out = String::new();
        s.read_to_string(&mut out)
            .unwrap_or_else(|e| panic!("guest shell: {e} (after {out:?})"));
        let (body, rc) = out
            .trim_end()
            .rsplit_once("__RC__ ")
            .unwrap_or_else(|| panic!("guest shell: no status line in {out:?}"));
        (rc.trim().parse().expect("status"), body.to_string())
    }

    /// Runs `script`; fails naming `what` (and showing the output) unless
    /// it exits 0. Its output.
    pub fn ok(&self, what: &str, script: &str) -> String {
        let (rc, out) = self.sh(script);
        assert_eq!(rc, 0, "guest: {what}: exit {rc}:\n{out}");
        out.trim().to_string()
    }

    /// Stops the node service (SIGTERM, exit 0) and the VM.
    pub fn finish(mut self) {
        // The guest script stops farflash-csi and exits; the VM powers off.
        let _ = self.sh("touch /tmp/csi-node-done");
        self.proc
            .wait_line("CSI-NODE-STOPPED", Duration::from_secs(60));
        let st = self.proc.wait(Duration::from_secs(120));
        assert!(st.success(), "the guest run ended with {st}");
    }
}
