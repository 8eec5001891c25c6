//! The node's system: commands run with a deadline, the kernel's NVMe
//! subsystems in sysfs, the mount table. Nothing here is given a secret
//! to log: a command's arguments are never logged, its error output is.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `prog ARGS` with a deadline; an error carries what it printed on
/// standard error (never its arguments, which may hold a key).
pub fn run(prog: &str, args: &[String], limit: Duration) -> Result<String, String> {
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{prog}: {e}"))?;
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
            let ctrl = name
                .strip_prefix("nvme")
                .is_some_and(|r| !r.is_empty() && r.bytes().all(|c| c.is_ascii_digit()));
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
            let target = pre.split(' ').nth(4)?;
            let mut post = post.split(' ');
            let fstype = post.next()?;
            let source = post.next()?;
            Some(Mount {
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
                source: "/dev/nvme0n1".into(),
                target: "/var/lib/kubelet/staging".into(),
                fstype: "xfs".into()
            }
        );
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
