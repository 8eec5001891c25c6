//! The node's system: commands run with a deadline, the kernel's NVMe
//! subsystems in sysfs, the mount table. Nothing here is given a secret
//! to log: a command's arguments are never logged, its error output is.

use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// The kernel's NVMe over Fabrics control device.
const NVME_FABRICS: &str = "/dev/nvme-fabrics";

/// Creates a controller: writes `options` (the `nvmf_parse_options`
/// string, secrets in it) to /dev/nvme-fabrics and reads the kernel's
/// answer (`instance=N,cntlid=M`), as `nvme connect` does. The write
/// blocks until the kernel has connected or given up; an answer not there
/// within `limit` is an error (the kernel finishes or abandons that
/// connect on its own; a controller it still makes is found by the next
/// NodeStageVolume and removed by NodeUnstageVolume). Errors carry the
/// errno, never the options.
pub fn fabrics_connect(options: Zeroizing<String>, limit: Duration) -> Result<String, String> {
    if !Path::new(NVME_FABRICS).exists() {
        // As nvme-cli: the modules first (nvme-tcp pulls nvme-fabrics in).
        run("modprobe", &["nvme-tcp".to_owned()], limit)
            .map_err(|e| format!("{NVME_FABRICS} is missing and {e}"))?;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = (|| -> std::io::Result<String> {
            let mut f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(NVME_FABRICS)?;
            let n = f.write(options.as_bytes())?;
            if n != options.len() {
                return Err(std::io::Error::other("short write"));
            }
            let mut answer = [0u8; 256];
            let n = f.read(&mut answer)?;
            Ok(String::from_utf8_lossy(&answer[..n]).trim().to_owned())
        })();
        let _ = tx.send(r);
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(a)) => Ok(a),
        Ok(Err(e)) => Err(format!("{NVME_FABRICS}: {e}")),
        Err(_) => Err(format!(
            "{NVME_FABRICS}: no answer within {} s",
            limit.as_secs()
        )),
    }
}

/// The kernel log from a moment on (/dev/kmsg, syslog(2)'s records): what
/// the NVMe host said about a connect that failed ("authentication
/// failed", "not allowed" ...). The kernel logs no key.
pub struct KernelLog(Option<std::fs::File>);

impl KernelLog {
    /// Starts at the log's end (nothing if /dev/kmsg cannot be read).
    pub fn now() -> KernelLog {
        use std::os::unix::fs::OpenOptionsExt as _;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open("/dev/kmsg")
            .and_then(|mut f| f.seek(std::io::SeekFrom::End(0)).map(|_| f));
        KernelLog(f.ok())
    }

    /// The NVMe messages logged since (at most the last 8).
    pub fn nvme_lines(&mut self) -> Vec<String> {
        let Some(f) = &mut self.0 else {
            return vec![];
        };
        let mut lines = Vec::new();
        let mut rec = [0u8; 8192];
        loop {
            match f.read(&mut rec) {
                Ok(0) => break,
                Ok(n) => {
                    if let Some(m) = kmsg_message(&String::from_utf8_lossy(&rec[..n])) {
                        lines.push(m);
                    }
                }
                // EPIPE: records were overwritten meanwhile; read on.
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::PIPE.raw_os_error()) => {}
                Err(_) => break,
            }
        }
        let skip = lines.len().saturating_sub(8);
        lines.split_off(skip)
    }
}

/// The message of one /dev/kmsg record (`PRI,SEQ,TS,FLAGS;MESSAGE\n`,
/// Documentation/ABI/testing/dev-kmsg) if it is the NVMe host's.
fn kmsg_message(rec: &str) -> Option<String> {
    let (_, msg) = rec.split_once(';')?;
    let msg = msg.lines().next()?.trim();
    (msg.starts_with("nvme") || msg.contains("nvme_")).then(|| msg.to_owned())
}

/// One key of /proc/keys (keyrings(7)): serial (hex), type, description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLine {
    pub serial: String,
    pub kind: String,
    pub description: String,
}

/// Parses /proc/keys: `SERIAL FLAGS USAGE EXPIRY PERM UID GID TYPE
/// DESCRIPTION: SUMMARY` (the description may hold spaces, as a PSK
/// identity does).
pub fn parse_proc_keys(text: &str) -> Vec<KeyLine> {
    text.lines()
        .filter_map(|l| {
            let mut rest = l.trim_start();
            let mut f = Vec::with_capacity(8);
            for _ in 0..8 {
                let (w, r) = rest.split_once(char::is_whitespace)?;
                f.push(w);
                rest = r.trim_start();
            }
            let description = rest.rsplit_once(": ").map_or(rest, |(d, _)| d);
            Some(KeyLine {
                serial: f[0].to_owned(),
                kind: f[7].to_owned(),
                description: description.trim_end_matches(':').to_owned(),
            })
        })
        .collect()
}

fn proc_keys() -> Vec<KeyLine> {
    std::fs::read_to_string("/proc/keys")
        .map(|t| parse_proc_keys(&t))
        .unwrap_or_default()
}

/// The kernel's `.nvme` keyring (nvme-keyring, Linux 6.7+): `0xSERIAL`.
pub fn nvme_keyring() -> Option<String> {
    proc_keys()
        .into_iter()
        .find(|k| k.kind == "keyring" && k.description == ".nvme")
        .map(|k| format!("0x{}", k.serial))
}

/// The TLS PSKs in the keyrings for `hostnqn` and `subnqn` (identity
/// `NVMe<v><R|G><hh> <hostnqn> <subnqn>[ <digest>]`): `0xSERIAL`s.
pub fn psk_keys(hostnqn: &str, subnqn: &str) -> Vec<String> {
    proc_keys()
        .into_iter()
        .filter(|k| {
            let mut w = k.description.split(' ');
            k.kind == "psk"
                && w.next().is_some_and(|v| v.starts_with("NVMe"))
                && w.next() == Some(hostnqn)
                && w.next() == Some(subnqn)
        })
        .map(|k| format!("0x{}", k.serial))
        .collect()
}

/// Runs `prog ARGS` with a deadline; an error carries what it printed on
/// standard error (never its arguments, which may hold a key).
pub fn run(prog: &str, args: &[String], limit: Duration) -> Result<String, String> {
    run_input(prog, args, None, limit)
}

/// [`run`], with `input` (a key, say: never an argument, which every user
/// of the node can read in /proc/PID/cmdline) on its standard input.
pub fn run_input(
    prog: &str,
    args: &[String],
    input: Option<&[u8]>,
    limit: Duration,
) -> Result<String, String> {
    let mut child = Command::new(prog)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{prog}: {e}"))?;
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        // Small (a key): the pipe takes it whole; closing it ends the input.
        stdin
            .write_all(bytes)
            .map_err(|e| format!("{prog}: standard input: {e}"))?;
    }
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{prog}: no answer within {} s", limit.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("{prog}: {e}")),
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{prog}: {e}"))?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_owned();
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(format!(
            "{prog} failed ({}): {}",
            out.status,
            text(&out.stderr)
        ))
    }
}

const NVME_SUBSYS: &str = "/sys/class/nvme-subsystem";

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned())
}

fn is_ns_name(n: &str) -> bool {
    // nvmeXnY (a multipath head, or a path's namespace with multipath off);
    // not nvmeXcYnZ (a hidden path under a head).
    n.strip_prefix("nvme")
        .and_then(|r| r.split_once('n'))
        .is_some_and(|(a, b)| {
            !a.is_empty()
                && a.bytes().all(|c| c.is_ascii_digit())
                && !b.is_empty()
                && b.bytes().all(|c| c.is_ascii_digit())
        })
}

/// The kernel's subsystem directory for `nqn`, if connected.
pub fn subsystem_dir(nqn: &str) -> Option<PathBuf> {
    let dirs = std::fs::read_dir(NVME_SUBSYS).ok()?;
    dirs.flatten()
        .map(|e| e.path())
        .find(|p| read(&p.join("subsysnqn")).as_deref() == Some(nqn))
}

/// The controllers of `nqn` and their addresses (`traddr=…,trsvcid=…`).
pub fn controllers(nqn: &str) -> Vec<(String, String)> {
    let Some(dir) = subsystem_dir(nqn) else {
        return vec![];
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return vec![];
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            // (A controller deleted while its namespace is still held, by
            // a mount say, can linger in the subsystem: not one of them.)
            let ctrl = name
                .strip_prefix("nvme")
                .is_some_and(|r| !r.is_empty() && r.bytes().all(|c| c.is_ascii_digit()))
                && Path::new("/sys/class/nvme").join(&name).exists();
            ctrl.then(|| (name, read(&e.path().join("address")).unwrap_or_default()))
        })
        .collect()
}

/// Whether one of `nqn`'s controllers goes to `addr`:`port`.
pub fn has_path(nqn: &str, addr: &str, port: &str) -> bool {
    controllers(nqn).iter().any(|(_, a)| {
        a.split(',').any(|kv| kv == format!("traddr={addr}"))
            && a.split(',').any(|kv| kv == format!("trsvcid={port}"))
    })
}

/// The block device of `nqn`'s namespace: the multipath head when native
/// multipath is on, else the first path's namespace.
pub fn device(nqn: &str) -> Option<PathBuf> {
    let dir = subsystem_dir(nqn)?;
    let names = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .map(|es| {
                es.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| is_ns_name(n))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    if let Some(head) = names(&dir).into_iter().next() {
        return Some(PathBuf::from("/dev").join(head));
    }
    let mut ctrls = controllers(nqn);
    ctrls.sort();
    ctrls
        .iter()
        .find_map(|(c, _)| names(&dir.join(c)).into_iter().next())
        .map(|n| PathBuf::from("/dev").join(n))
}

/// The device number (`MAJOR:MINOR`, as mountinfo shows it) of block
/// device `dev` (/dev/NAME), from sysfs; None when no such disk is live.
pub fn dev_number(dev: &str) -> Option<String> {
    let name = dev.strip_prefix("/dev/")?;
    read(&Path::new("/sys/class/block").join(name).join("dev"))
}

/// Whether a mount's device (`MAJOR:MINOR`) is a live block device; false
/// for one whose disk is gone (its controller deleted under the mount, as
/// after a node lost its NVMe connections), or for no block device at all.
pub fn disk_live(dev: &str) -> bool {
    Path::new("/sys/dev/block").join(dev).exists()
}

/// The state (`live`, `connecting`, `resetting`, `deleting` ...) of
/// controller `ctrl` (nvmeN).
pub fn controller_state(ctrl: &str) -> String {
    read(&Path::new("/sys/class/nvme").join(ctrl).join("state")).unwrap_or_default()
}

/// Deletes controller `ctrl` (nvmeN) as `nvme disconnect` does.
pub fn delete_controller(ctrl: &str) -> Result<(), String> {
    let p = Path::new("/sys/class/nvme")
        .join(ctrl)
        .join("delete_controller");
    match std::fs::write(&p, "1") {
        // Gone meanwhile: what was wanted.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r.map_err(|e| format!("{}: {e}", p.display())),
    }
}

/// Waits until `f` gives something, at most `limit`.
pub fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A mount: its source device, where, and its file system type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The mounted device's number, `MAJOR:MINOR`.
    pub dev: String,
    pub source: String,
    pub target: String,
    pub fstype: String,
}

/// Unescapes the octal escapes (`\040` for a space) of a mountinfo field.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses /proc/self/mountinfo (proc(5)).
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let mut pre = pre.split(' ');
            let dev = pre.nth(2)?;
            let target = pre.nth(1)?;
            let mut post = post.split(' ');
            let fstype = post.next()?;
            let source = post.next()?;
            Some(Mount {
                dev: dev.to_owned(),
                source: unescape(source),
                target: unescape(target),
                fstype: fstype.to_owned(),
            })
        })
        .collect()
}

/// The mount at `dir`, if any (the last one mounted there).
pub fn mounted_at(dir: &Path) -> Option<Mount> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = dir.to_string_lossy();
    parse_mountinfo(&text)
        .into_iter()
        .rev()
        .find(|m| m.target == want)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_is_read() {
        let text = "36 35 98:0 /mnt1 /mnt/parent\\040dir rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n\
                    40 36 259:1 / /var/lib/kubelet/staging rw,relatime shared:2 - xfs /dev/nvme0n1 rw,attr2\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].target, "/mnt/parent dir");
        assert_eq!(
            m[1],
            Mount {
                dev: "259:1".into(),
                source: "/dev/nvme0n1".into(),
                target: "/var/lib/kubelet/staging".into(),
                fstype: "xfs".into()
            }
        );
    }

    #[test]
    fn proc_keys_and_kmsg_are_read() {
        let text = "0e0ab8f4 I--Q---     1 perm 3f030000     0     0 keyring   .nvme: 1\n\
                    1f3a2b01 I--Q---     1 perm 3f010000     0     0 psk       NVMe1R01 nqn.h nqn.s dGVzdA==: 32\n\
                    1f3a2b02 I--Q---     1 perm 3f010000     0     0 psk       NVMe0R01 nqn.h nqn.other: 32\n\
                    2a000001 I--Q---     1 perm 1f3f0000     0 65534 keyring   _uid.0: empty\n";
        let k = parse_proc_keys(text);
        assert_eq!(k.len(), 4);
        assert_eq!(
            k[1],
            KeyLine {
                serial: "1f3a2b01".into(),
                kind: "psk".into(),
                description: "NVMe1R01 nqn.h nqn.s dGVzdA==".into()
            }
        );
        assert_eq!(k[0].description, ".nvme");
        assert_eq!(k[2].description, "NVMe0R01 nqn.h nqn.other");
        assert_eq!(
            kmsg_message(
                "3,1234,5678,-;nvme nvme0: qid 0: authentication failed\n SUBSYSTEM=nvme\n"
            )
            .as_deref(),
            Some("nvme nvme0: qid 0: authentication failed")
        );
        assert_eq!(kmsg_message("6,1,2,-;EXT4-fs (vda): mounted\n"), None);
    }

    #[test]
    fn namespace_device_names() {
        assert!(is_ns_name("nvme0n1") && is_ns_name("nvme12n3"));
        assert!(
            !is_ns_name("nvme0")
                && !is_ns_name("nvme0c1n1")
                && !is_ns_name("nvme-subsys0")
                && !is_ns_name("nvmen1")
        );
    }

    #[test]
    fn commands_time_out_and_report_their_error_output() {
        assert_eq!(
            run(
                "sh",
                &["-c".into(), "echo hi".into()],
                Duration::from_secs(30)
            )
            .unwrap(),
            "hi"
        );
        let e = run(
            "sh",
            &["-c".into(), "echo oops >&2; exit 3".into()],
            Duration::from_secs(30),
        )
        .unwrap_err();
        assert!(e.contains("oops") && e.contains("3"), "{e}");
        let t0 = Instant::now();
        let e = run("sleep", &["30".into()], Duration::from_millis(300)).unwrap_err();
        assert!(
            e.contains("no answer") && t0.elapsed() < Duration::from_secs(20),
            "{e}"
        );
        assert!(run("/nonexistent/prog", &[], Duration::from_secs(1)).is_err());
    }
}
