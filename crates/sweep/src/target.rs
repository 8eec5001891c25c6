//! The remote side: a `farflash serve` child the sweep starts on a free
//! port of 127.0.0.1 or `--address` (an NVMe/TCP listener, and an
//! NVMe/RDMA one on another port when RDMA is swept), or an existing target
//! given by address, and its SMART counters read through the host library
//! (over the TCP listener).

use anyhow::{bail, Context, Result};
use farflash_host::{ConnectOptions, Controller};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The subsystem NQN of a target the sweep starts.
pub const SWEEP_NQN: &str = "nqn.2026-11.io.farflash:sweep";

/// Where the remote runs go.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemoteAddr {
    /// `ip:port`.
    pub addr: String,
    pub nqn: String,
    pub nsid: u32,
}

/// How the sweep starts its own target.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServeConfig {
    /// `serve --threads`.
    pub threads: Option<u32>,
    /// `serve --cpus-allowed`.
    pub cpus: Option<String>,
    /// `serve --poll`.
    pub poll: Option<String>,
    /// The listen address (an IP; default 127.0.0.1).
    pub address: Option<String>,
    /// Also listen for NVMe/RDMA (`--listen rdma:ADDR:PORT`).
    pub rdma: bool,
}

/// A running `farflash serve` child, stopped with SIGTERM when dropped.
pub struct Serve {
    child: Child,
    /// Its address and namespace.
    pub remote: RemoteAddr,
    /// Its NVMe/RDMA listener (`ip:port`), when started with one.
    pub rdma_addr: Option<String>,
    /// The command line, for the report.
    pub command: String,
}

/// A port nothing listens on right now.
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A TCP port nothing listens on right now on `ip`.
pub fn free_port_on(ip: IpAddr) -> Result<u16> {
    Ok(TcpListener::bind((ip, 0))
        .with_context(|| format!("no free TCP port on {ip}"))?
        .local_addr()?
        .port())
}

/// `ip:port`, or `[ip]:port` for IPv6.
pub fn join_addr(ip: IpAddr, port: u16) -> String {
    SocketAddr::new(ip, port).to_string()
}

impl Serve {
    /// Starts `farflash serve --file <backing>` on a free port (and, with
    /// `cfg.rdma`, an RDMA listener on another) and waits (up to 30 s) for
    /// `listening on`.
    pub fn start(farflash: &Path, backing: &Path, cfg: &ServeConfig) -> Result<Serve> {
        let ns = ["--file".to_string(), backing.display().to_string()];
        Serve::start_with(farflash, &ns, cfg)
    }

    /// [`Serve::start`] with other namespace options than `--file PATH`
    /// (e.g. `--null 1G`).
    pub fn start_with(farflash: &Path, namespace: &[String], cfg: &ServeConfig) -> Result<Serve> {
        let ip: IpAddr = cfg
            .address
            .as_deref()
            .unwrap_or("127.0.0.1")
            .parse()
            .with_context(|| {
                format!(
                    "--address {:?}: expected an IP address",
                    cfg.address.as_deref().unwrap_or_default()
                )
            })?;
        let port = free_port_on(ip)?;
        let addr = join_addr(ip, port);
        let mut args: Vec<String> = vec!["serve".into(), "--listen".into(), addr.clone()];
        // The RDMA CM's port space is not TCP's: a port free for TCP is
        // taken for the RDMA listener too, but never the TCP listener's.
        let rdma_addr = if cfg.rdma {
            let mut p = free_port_on(ip)?;
            while p == port {
                p = free_port_on(ip)?;
            }
            let a = join_addr(ip, p);
            args.extend(["--listen".into(), format!("rdma:{a}")]);
            Some(a)
        } else {
            None
        };
        args.extend(["--nqn".into(), SWEEP_NQN.into()]);
        args.extend_from_slice(namespace);
        args.extend(["--log-level".into(), "warn".into()]);
        if let Some(t) = cfg.threads {
            args.extend(["--threads".into(), t.to_string()]);
        }
        if let Some(c) = &cfg.cpus {
            args.extend(["--cpus-allowed".into(), c.clone()]);
        }
        if let Some(p) = &cfg.poll {
            args.extend(["--poll".into(), p.clone()]);
        }
        let remote = RemoteAddr {
            addr,
            nqn: SWEEP_NQN.into(),
            nsid: 1,
        };
        let mut s = Serve::spawn(farflash, args, remote)?;
        s.rdma_addr = rdma_addr;
        Ok(s)
    }

    /// Starts `farflash serve --config <file>` (the file names the listen
    /// address `remote.addr`) and waits for `listening on`; `poll` is
    /// `serve --poll`.
    pub fn start_config(
        farflash: &Path,
        config: &Path,
        remote: RemoteAddr,
        poll: Option<&str>,
    ) -> Result<Serve> {
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--config".into(),
            config.display().to_string(),
            "--log-level".into(),
            "warn".into(),
        ];
        if let Some(p) = poll {
            args.extend(["--poll".into(), p.into()]);
        }
        Serve::spawn(farflash, args, remote)
    }

    fn spawn(farflash: &Path, args: Vec<String>, remote: RemoteAddr) -> Result<Serve> {
        let mut child = Command::new(farflash)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {} serve", farflash.display()))?;
        let stdout = child.stdout.take().context("serve stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("listening on") {
                    let _ = tx.send(());
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        while rx.recv_timeout(Duration::from_millis(50)).is_err() {
            if let Ok(Some(st)) = child.try_wait() {
                bail!("farflash serve exited before listening ({st})");
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("farflash serve did not listen within 30 s");
            }
        }
        let command = format!("farflash {}", args.join(" "));
        Ok(Serve {
            child,
            remote,
            rdma_addr: None,
            command,
        })
    }

    /// The target's process ID (for its CPU time).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then wait up to 15 s (SIGKILL after that).
    pub fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SAFETY: kill(2) on our own child's PID has no memory effects.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Target-side counters from the SMART / Health log (Get Log Page 02h).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmartCounters {
    pub host_read_commands: u64,
    pub host_write_commands: u64,
    /// Thousands of 512-byte units, rounded up (NVMe Base 5.16.1.3).
    pub data_units_read: u64,
    pub data_units_written: u64,
}

impl SmartCounters {
    /// Reads the counters over a short-lived admin connection.
    pub fn read(remote: &RemoteAddr) -> Result<SmartCounters> {
        let mut opts = ConnectOptions::new(remote.addr.clone(), remote.nqn.clone());
        opts.kato_ms = 0;
        let ctrl = Controller::connect_with_queues(&opts, 1)
            .with_context(|| format!("connecting to {} for the SMART log", remote.addr))?;
        let s = ctrl.smart_log().context("reading the SMART log")?;
        let _ = ctrl.shutdown();
        Ok(SmartCounters {
            host_read_commands: s.host_read_commands,
            host_write_commands: s.host_write_commands,
            data_units_read: s.data_units_read,
            data_units_written: s.data_units_written,
        })
    }

    /// `later - self`, field by field.
    pub fn delta(&self, later: &SmartCounters) -> SmartCounters {
        SmartCounters {
            host_read_commands: later
                .host_read_commands
                .saturating_sub(self.host_read_commands),
            host_write_commands: later
                .host_write_commands
                .saturating_sub(self.host_write_commands),
            data_units_read: later.data_units_read.saturating_sub(self.data_units_read),
            data_units_written: later
                .data_units_written
                .saturating_sub(self.data_units_written),
        }
    }
}

/// The backing file: created by the sweep (removed at the end) or given.
pub struct Backing {
    pub path: PathBuf,
    pub size: u64,
    /// Whether the sweep created it (and so removes it).
    pub owned: bool,
}

impl Backing {
    /// Creates `dir/farflash-sweep-<pid>.img` of `size` bytes filled with
    /// pseudo-random data (not sparse: reads must touch real blocks).
    pub fn create(dir: &Path, size: u64) -> Result<Backing> {
        use std::io::Write;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("farflash-sweep-{}.img", std::process::id()));
        let f = std::fs::File::create(&path)
            .with_context(|| format!("creating backing file {}", path.display()))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut buf = vec![0u8; 1 << 20];
        let mut left = size;
        while left > 0 {
            for c in buf.chunks_exact_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                c.copy_from_slice(&x.to_le_bytes());
            }
            let n = left.min(buf.len() as u64) as usize;
            w.write_all(&buf[..n])?;
            left -= n as u64;
        }
        let f = w.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        Ok(Backing {
            path,
            size,
            owned: true,
        })
    }

    /// An existing file or block device (its size from metadata or a seek).
    pub fn existing(path: &Path) -> Result<Backing> {
        use std::io::{Seek, SeekFrom};
        let mut f = std::fs::File::open(path)
            .with_context(|| format!("opening --filename {}", path.display()))?;
        let size = f.seek(SeekFrom::End(0))?;
        if size == 0 {
            bail!("--filename {} is empty", path.display());
        }
        Ok(Backing {
            path: path.to_owned(),
            size,
            owned: false,
        })
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        if self.owned {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
