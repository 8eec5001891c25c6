//! A private tgt (Linux SCSI target framework) daemon for the iSCSI
//! baseline: `tgtd` in the foreground on 127.0.0.1 and a free port, with
//! its own control socket (`-C`, derived from that port, so several can
//! run at once), one iSCSI target per backing file (LUN 1, LUN 0 being tgt's
//! controller), open to any initiator. Killed when dropped.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The Debian package that has `tgtd` and `tgtadm`.
pub const TGT_PACKAGE: &str = "tgt";

/// Finds a tgt program in PATH or the sbin folders (not in a user's PATH).
fn find(prog: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain(["/usr/sbin", "/sbin"].map(PathBuf::from));
    for d in dirs {
        let p = d.join(prog);
        if p.is_file() {
            return Ok(p);
        }
    }
    bail!("{prog} not found: the iSCSI baseline needs tgt's user-space target (apt-get install {TGT_PACKAGE})")
}

/// Fails, naming the package to install, unless tgtd and tgtadm are there.
pub fn check_installed() -> Result<()> {
    find("tgtd")?;
    find("tgtadm")?;
    Ok(())
}

/// The target name of target `tid`.
pub fn target_iqn(tid: u32) -> String {
    format!("iqn.2026-11.io.farflash:baseline{tid}")
}

pub struct Tgtd {
    child: Child,
    tgtadm: PathBuf,
    /// `127.0.0.1:PORT`.
    pub portal: String,
    control_port: u16,
    /// The command line, for the report.
    pub command: String,
    log: PathBuf,
}

impl Tgtd {
    /// Starts tgtd on a free port and waits (up to 10 s) until tgtadm reaches it;
    /// its output goes to `log_dir/tgtd-PORT.log`.
    pub fn start(log_dir: &Path) -> Result<Tgtd> {
        let tgtd = find("tgtd")?;
        let tgtadm = find("tgtadm")?;
        let port = crate::target::free_port()?;
        let portal = format!("127.0.0.1:{port}");
        std::fs::create_dir_all(log_dir)
            .with_context(|| format!("creating {}", log_dir.display()))?;
        // tgtd takes control ports up to 32767; a live one's socket makes
        // tgtd exit (reported below), not share.
        let control_port = 1024 + port % 30000;
        let log = log_dir.join(format!("tgtd-{port}.log"));
        let out =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let args = [
            "-f".to_string(),
            "--iscsi".into(),
            format!("portal={portal}"),
            "-C".into(),
            control_port.to_string(),
        ];
        let command = format!("{} {}", tgtd.display(), args.join(" "));
        let child = Command::new(&tgtd)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {command}"))?;
        let mut t = Tgtd {
            child,
            tgtadm,
            portal,
            control_port,
            command,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(st) = t.child.try_wait()? {
                // SAFETY: geteuid has no preconditions and cannot fail.
                let hint = if unsafe { libc::geteuid() } != 0 {
                    " (tgtd needs root: its control socket and lock are under /var/run/tgtd)"
                } else {
                    ""
                };
                bail!("{} exited ({st}){hint}: {}", t.command, t.log_tail());
            }
            let ready = t.adm(&["--mode", "system", "--op", "show"]).is_ok()
                && std::net::TcpStream::connect(&t.portal).is_ok();
            if ready {
                return Ok(t);
            }
            if Instant::now() > deadline {
                bail!("{} did not come up in 10 s: {}", t.command, t.log_tail());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" / ")
    }

    /// Runs `tgtadm -C PORT ARGS...`.
    fn adm(&self, args: &[&str]) -> Result<()> {
        let out = Command::new(&self.tgtadm)
            .arg("-C")
            .arg(self.control_port.to_string())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("running tgtadm")?;
        if !out.status.success() {
            bail!(
                "tgtadm {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Creates target `tid` (1-based) exporting `file` as LUN 1 and opens it
    /// to every initiator; returns its URL for `perf --iscsi`.
    pub fn add_target(&self, tid: u32, file: &Path) -> Result<String> {
        let tid_s = tid.to_string();
        let iqn = target_iqn(tid);
        let file_s = file
            .to_str()
            .with_context(|| format!("{}: not UTF-8", file.display()))?;
        let base = ["--lld", "iscsi", "--tid", tid_s.as_str()];
        let step = |extra: &[&str]| -> Result<()> {
            let mut a: Vec<&str> = base.to_vec();
            a.extend_from_slice(extra);
            self.adm(&a)
        };
        step(&["--mode", "target", "--op", "new", "--targetname", &iqn])?;
        step(&[
            "--mode",
            "logicalunit",
            "--op",
            "new",
            "--lun",
            "1",
            "--backing-store",
            file_s,
        ])?;
        step(&[
            "--mode",
            "target",
            "--op",
            "bind",
            "--initiator-address",
            "ALL",
        ])?;
        Ok(format!("iscsi://{}/{iqn}/1", self.portal))
    }

    /// Stops tgtd (SIGKILL: nothing of it needs saving; the LUNs are files
    /// written with pwrite, so what it acknowledged is in the page cache).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
        // A killed tgtd leaves its control socket and lock file behind.
        let sock = format!("/var/run/tgtd/socket.{}", self.control_port);
        let _ = std::fs::remove_file(format!("{sock}.lock"));
        let _ = std::fs::remove_file(sock);
    }
}

impl Drop for Tgtd {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(target_iqn(2), "iqn.2026-11.io.farflash:baseline2");
    }

    #[test]
    fn missing_program_names_the_package() {
        let e = find("farflash-no-such-tgt-program")
            .unwrap_err()
            .to_string();
        assert!(e.contains("apt-get install tgt"), "{e}");
    }
}
