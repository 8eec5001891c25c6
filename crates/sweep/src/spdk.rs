//! SPDK's NVMe/TCP target as a peer of `farflash serve` in the
//! cpu-vs-load study: `nvmf_tgt` from an SPDK build (`SPDK_DIR`, as
//! benches/vs-spdk.sh), on one core, without huge pages, with one null
//! bdev (reads return zeroes, like `serve --null`) exported on 127.0.0.1
//! and a free port, started from a JSON config. Stopped (SIGTERM, then
//! SIGKILL) when dropped.

use crate::target::{free_port, RemoteAddr};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The subsystem NQN of the SPDK target the sweep starts.
pub const SPDK_NQN: &str = "nqn.2026-11.io.farflash:sweep-spdk";

/// `nvmf_tgt` and the libraries beside it in an SPDK build.
#[derive(Clone, Debug)]
pub struct SpdkBuild {
    pub dir: PathBuf,
    pub nvmf_tgt: PathBuf,
}

impl SpdkBuild {
    /// Checks that `dir/build/bin/nvmf_tgt` is there.
    pub fn find(dir: &Path) -> Result<SpdkBuild> {
        let nvmf_tgt = dir.join("build/bin/nvmf_tgt");
        if !nvmf_tgt.is_file() {
            bail!(
                "SPDK_DIR={}: no build/bin/nvmf_tgt (an SPDK build is needed for the SPDK target)",
                dir.display()
            );
        }
        Ok(SpdkBuild {
            dir: dir.to_owned(),
            nvmf_tgt,
        })
    }

    /// SPDK's version from `include/spdk/version.h` (`v25.09`), if readable.
    pub fn version(&self) -> Option<String> {
        let h = std::fs::read_to_string(self.dir.join("include/spdk/version.h")).ok()?;
        let num = |key: &str| -> Option<u32> {
            h.lines()
                .find(|l| l.starts_with("#define") && l.split_whitespace().nth(1) == Some(key))
                .and_then(|l| l.split_whitespace().nth(2))
                .and_then(|v| v.parse().ok())
        };
        Some(format!(
            "v{}.{:02}",
            num("SPDK_VERSION_MAJOR")?,
            num("SPDK_VERSION_MINOR")?
        ))
    }
}

/// The JSON config: a null bdev of `size` bytes (512-byte blocks), the TCP
/// transport with its defaults, one subsystem open to any host.
pub fn config(addr: &str, port: u16, size: u64) -> String {
    let blocks = size / 512;
    format!(
        r#"{{"subsystems": [
 {{"subsystem": "bdev", "config": [
  {{"method": "bdev_null_create", "params": {{"name": "Null0", "num_blocks": {blocks}, "block_size": 512}}}}]}},
 {{"subsystem": "nvmf", "config": [
  {{"method": "nvmf_create_transport", "params": {{"trtype": "TCP"}}}},
  {{"method": "nvmf_create_subsystem", "params": {{"nqn": "{SPDK_NQN}", "allow_any_host": true, "serial_number": "FFSWEEP0001"}}}},
  {{"method": "nvmf_subsystem_add_ns", "params": {{"nqn": "{SPDK_NQN}", "namespace": {{"bdev_name": "Null0"}}}}}},
  {{"method": "nvmf_subsystem_add_listener", "params": {{"nqn": "{SPDK_NQN}",
    "listen_address": {{"trtype": "TCP", "adrfam": "IPv4", "traddr": "{addr}", "trsvcid": "{port}"}}}}}}]}}]}}
"#
    )
}

/// `0` -> `0x1`, `1` -> `0x2`: nvmf_tgt's core mask of one CPU.
pub fn core_mask(cpu: u32) -> Result<String> {
    if cpu >= 64 {
        bail!("SPDK target CPU {cpu}: use a CPU below 64");
    }
    Ok(format!("{:#x}", 1u64 << cpu))
}

/// A running `nvmf_tgt`.
pub struct SpdkTgt {
    child: Child,
    pub remote: RemoteAddr,
    /// The command line, for the report.
    pub command: String,
    /// Its config, log and RPC socket.
    dir: PathBuf,
}

impl SpdkTgt {
    /// Starts nvmf_tgt on `cpu` with a null namespace of `size` bytes in
    /// `work` (a folder of its own, removed on stop) and waits (up to 30 s)
    /// until its listener accepts a connection.
    pub fn start(build: &SpdkBuild, cpu: u32, size: u64, work: &Path) -> Result<SpdkTgt> {
        let port = free_port()?;
        let dir = work.join(format!("spdk-{port}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let cfg = dir.join("nvmf.json");
        std::fs::write(&cfg, config("127.0.0.1", port, size))?;
        let log = std::fs::File::create(dir.join("nvmf_tgt.log"))?;
        // --disable-cpumask-locks: another SPDK process may hold the core's
        // lock file (/var/tmp/spdk_cpu_lock_*) on a shared machine; the
        // sweep measures on the core it is given all the same.
        let args = [
            "-m".to_string(),
            core_mask(cpu)?,
            "--no-huge".into(),
            "-s".into(),
            "1024".into(),
            "--disable-cpumask-locks".into(),
            "-r".into(),
            dir.join("rpc.sock").display().to_string(),
            "--json".into(),
            cfg.display().to_string(),
        ];
        let command = format!("{} {}", build.nvmf_tgt.display(), args.join(" "));
        let libs = ["build/lib", "isa-l/.libs", "isa-l-crypto/.libs"]
            .map(|d| build.dir.join(d).display().to_string())
            .join(":");
        let ld = match std::env::var("LD_LIBRARY_PATH") {
            Ok(v) if !v.is_empty() => format!("{libs}:{v}"),
            _ => libs,
        };
        let child = Command::new(&build.nvmf_tgt)
            .args(&args)
            .env("LD_LIBRARY_PATH", ld)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {command}"))?;
        let addr = format!("127.0.0.1:{port}");
        let mut t = SpdkTgt {
            child,
            remote: RemoteAddr {
                addr: addr.clone(),
                nqn: SPDK_NQN.into(),
                nsid: 1,
            },
            command,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&addr).is_err() {
            if let Some(st) = t.child.try_wait()? {
                bail!("{} exited ({st}): {}", t.command, t.log_tail());
            }
            if Instant::now() > deadline {
                bail!("{} did not listen within 30 s: {}", t.command, t.log_tail());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(t)
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("nvmf_tgt.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// The target's process ID (for its CPU time).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then SIGKILL after 10 s; removes its folder.
    pub fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on our own child's PID has no memory effects.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for SpdkTgt {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_masks_and_missing_builds() {
        let c: serde_json::Value =
            serde_json::from_str(&config("127.0.0.1", 4800, 1 << 30)).expect("the config is JSON");
        let bdev = &c["subsystems"][0]["config"][0];
        assert_eq!(bdev["method"], "bdev_null_create");
        assert_eq!(bdev["params"]["num_blocks"], 2_097_152);
        let l = &c["subsystems"][1]["config"][3]["params"];
        assert_eq!(l["nqn"], SPDK_NQN);
        assert_eq!(l["listen_address"]["trsvcid"], "4800");
        assert_eq!(core_mask(0).unwrap(), "0x1");
        assert_eq!(core_mask(5).unwrap(), "0x20");
        assert!(core_mask(64).is_err());
        let e = SpdkBuild::find(Path::new("/nonexistent-spdk"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("build/bin/nvmf_tgt"), "{e}");
    }
}
