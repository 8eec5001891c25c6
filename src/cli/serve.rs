//! `farflash serve`: export namespaces over NVMe/TCP.
//!
//! The flags build a [`Config`], the same structure `--config FILE` reads,
//! so there is one code path from either to a running target; the running
//! target (listeners, event loops, management, reloads, the size watch,
//! shutdown) is a [`farflash_server::Server`]. This file parses flags,
//! prints the banner and waits for a stop signal.

use anyhow::{bail, Context, Result};
use clap::{ArgMatches, Args, FromArgMatches};
use farflash_core::config::{
    BackendKind, Config, DhchapKey, HostAuthConfig, ManagementEndpoint, NamespaceConfig, PollMode,
    RbdConfig, Size, SubsystemConfig, DEFAULT_NQN,
};
use farflash_core::listen::ListenTransport;
use farflash_core::subsystem::human;
use farflash_core::tls_key::TlsKey;
use farflash_core::Target;
use farflash_server::{Options, RpcSocket, Server};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

#[derive(Args, Debug, Default, Clone)]
pub struct ServeFlags {
    /// Listen on ADDR:PORT for NVMe/TCP, rdma:ADDR:PORT for NVMe/RDMA,
    /// tls:ADDR:PORT for NVMe/TCP over TLS (required) or
    /// tls-optional:ADDR:PORT (TLS or plaintext) (repeatable; default
    /// 127.0.0.1:4420). IPv6: [::1]:4420.
    #[arg(long = "listen", value_name = "[rdma:|tls:|tls-optional:]ADDR:PORT")]
    pub listen: Vec<String>,
    /// Subsystem NQN for the namespaces given by flags.
    #[arg(long, value_name = "NQN")]
    pub nqn: Option<String>,
    /// Add a RAM namespace of SIZE (e.g. 512M, 1G, 4096); memory is committed as written.
    #[arg(long = "ram", value_name = "SIZE")]
    pub ram: Vec<Size>,
    /// Commit the --ram namespaces' whole memory at start (benchmarks: no
    /// page faults on first writes) instead of as written.
    #[arg(long = "ram-commit")]
    pub ram_commit: bool,
    /// Add a namespace backed by a regular file (its size) or a block device.
    #[arg(long = "file", value_name = "PATH")]
    pub file: Vec<PathBuf>,
    /// Add a null namespace of SIZE: reads return zeroes, writes are discarded.
    #[arg(long = "null", value_name = "SIZE")]
    pub null: Vec<Size>,
    /// Add a namespace backed by the Ceph RBD image POOL/IMAGE (docs/rbd.md).
    #[arg(long = "rbd", value_name = "POOL/IMAGE")]
    pub rbd: Vec<RbdConfig>,
    /// Add a namespace exporting volume NAME of pool POOL, a `[[pool]]` of
    /// the --config file (docs/volumes.md).
    #[arg(long = "volume", value_name = "POOL/NAME")]
    pub volume: Vec<String>,
    /// The ceph.conf of the --rbd images (default: Ceph's search, $CEPH_CONF,
    /// /etc/ceph/ceph.conf).
    #[arg(long = "ceph-conf", value_name = "PATH")]
    pub ceph_conf: Option<PathBuf>,
    /// Ceph client id of the --rbd images, without "client." (default admin).
    #[arg(long = "ceph-id", value_name = "ID")]
    pub ceph_id: Option<String>,
    /// Keyring of that client (default: the ceph.conf's keyring).
    #[arg(long = "ceph-keyring", value_name = "PATH")]
    pub ceph_keyring: Option<PathBuf>,
    /// Logical block size of the namespaces given by flags.
    #[arg(long = "block-size", value_name = "512|4096", value_parser = ["512", "4096"])]
    pub block_size: Option<String>,
    /// Only these host NQNs may connect (repeatable; default: any host).
    #[arg(long = "allow-host", value_name = "HOSTNQN")]
    pub allow_host: Vec<String>,
    /// DH-HMAC-CHAP: HOSTNQN must authenticate with SECRET
    /// (`DHHC-1:0X:...:`, from gen-dhchap-key) (repeatable).
    #[arg(long = "dhchap-key", value_name = "HOSTNQN=SECRET")]
    pub dhchap_key: Vec<String>,
    /// DH-HMAC-CHAP: the controller's SECRET for HOSTNQN, which then may ask
    /// for bidirectional authentication (repeatable).
    #[arg(long = "dhchap-ctrl-key", value_name = "HOSTNQN=SECRET")]
    pub dhchap_ctrl_key: Vec<String>,
    /// DH-HMAC-CHAP hashes for the --dhchap-key hosts, preferred first
    /// (default sha256,sha384,sha512).
    #[arg(long = "dhchap-hash", value_name = "LIST", value_delimiter = ',')]
    pub dhchap_hash: Vec<String>,
    /// DH-HMAC-CHAP groups for the --dhchap-key hosts, preferred first
    /// (null, ffdhe2048 ... ffdhe8192; default null first, then all).
    #[arg(long = "dhchap-dhgroup", value_name = "LIST", value_delimiter = ',')]
    pub dhchap_dhgroup: Vec<String>,
    /// TLS: HOSTNQN's configured PSK (`NVMeTLSkey-1:0x:...:`, from
    /// gen-tls-key, or a 0600 file holding it) for NVMe/TCP listeners with a
    /// secure channel (`--listen tls:ADDR:PORT` required,
    /// `tls-optional:ADDR:PORT` not required) (repeatable).
    #[arg(long = "tls-key", value_name = "HOSTNQN=KEY|FILE")]
    pub tls_key: Vec<String>,
    /// TLS PSK derivations accepted for the --tls-key hosts, in order
    /// (default libnvme-1.10,rfc8446; docs/tls.md).
    #[arg(long = "tls-derivation", value_name = "LIST", value_delimiter = ',')]
    pub tls_derivation: Vec<String>,
    /// Refuse hosts without a --dhchap-key (Connect Invalid Host).
    #[arg(long = "require-auth")]
    pub require_auth: bool,
    /// A QoS limit or weight, as a `[[subsystem.qos]]` entry written
    /// `nsid=1,rw_ios_per_sec=10000` or `host=NQN,weight=2,w_bytes_per_sec=100M`
    /// (repeatable; keys: nsid, host, weight, {rw,r,w}_ios_per_sec,
    /// {rw,r,w}_bytes_per_sec, burst_ms).
    #[arg(long = "qos", value_name = "KEY=VALUE,...")]
    pub qos: Vec<String>,
    /// TOML configuration file (see docs/farflash.example.toml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Write every change made through the management API back to the
    /// --config file (atomically, mode 0600, as save_config does), so a
    /// restart keeps subsystems, hosts and namespaces added at run time.
    #[arg(long)]
    pub autosave: bool,
    /// Log level: error, warn, info, debug, trace (or a tracing filter).
    #[arg(long = "log-level", value_name = "LEVEL", default_value = "info")]
    pub log_level: String,
    /// Event-loop threads (default: one per allowed CPU).
    #[arg(long, alias = "cores", value_name = "N")]
    pub threads: Option<u32>,
    /// Pin event loops to these CPUs, e.g. 0-3,6.
    #[arg(long = "cpus-allowed", value_name = "LIST")]
    pub cpus_allowed: Option<String>,
    /// How event loops wait: hybrid (the default: spin while busy, sleeping on a precise timer through the part of a gap it expects to be long, then in epoll: CPU in proportion to the load), adaptive (spin while busy, then sleep), always (busy-poll) or never.
    #[arg(long, value_name = "MODE")]
    pub poll: Option<PollMode>,
    /// Adaptive and hybrid polling: microseconds of quiet before an event loop sleeps.
    #[arg(long = "poll-idle-us", value_name = "US")]
    pub poll_idle_us: Option<u32>,
    /// Management socket (JSON-RPC 2.0, mode 0600; `farflash ctl`). Default:
    /// $XDG_RUNTIME_DIR/farflash.sock, /run/farflash.sock for root,
    /// /tmp/farflash-UID.sock otherwise; "none" turns it off.
    #[arg(long = "rpc-socket", value_name = "PATH")]
    pub rpc_socket: Option<PathBuf>,
    /// The management API over the network too, on ADDR:PORT: TLS 1.3 with
    /// client certificates, required (needs --rpc-cert, --rpc-key and
    /// --rpc-client-ca; `[transport.management]` in the file). Off by default.
    #[arg(long = "rpc-listen", value_name = "ADDR:PORT")]
    pub rpc_listen: Option<String>,
    /// The management endpoint's certificate chain (PEM, leaf first).
    #[arg(long = "rpc-cert", value_name = "FILE")]
    pub rpc_cert: Option<PathBuf>,
    /// The management endpoint's private key (PEM).
    #[arg(long = "rpc-key", value_name = "FILE")]
    pub rpc_key: Option<PathBuf>,
    /// The CA certificates (PEM) a management client's certificate must chain to.
    #[arg(long = "rpc-client-ca", value_name = "FILE")]
    pub rpc_client_ca: Option<PathBuf>,
    /// Serve Prometheus metrics over HTTP on ADDR:PORT (a bare PORT means
    /// 127.0.0.1:PORT). Off by default.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<String>,
}

/// Serve arguments plus the order in which namespace flags were given
/// (NSIDs follow it across --ram, --file, --null and --rbd).
#[derive(Debug, Default, Clone)]
pub struct ServeArgs {
    pub flags: ServeFlags,
    pub ns_order: Vec<NsFlag>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NsFlag {
    Ram(Size),
    File(PathBuf),
    Null(Size),
    Rbd(RbdConfig),
    Volume(String),
}

impl FromArgMatches for ServeArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let flags = ServeFlags::from_arg_matches(m)?;
        let mut order: Vec<(usize, NsFlag)> = Vec::new();
        let idx = |id: &str| {
            m.indices_of(id)
                .map(|i| i.collect::<Vec<_>>())
                .unwrap_or_default()
        };
        order.extend(
            idx("ram")
                .into_iter()
                .zip(flags.ram.iter().map(|s| NsFlag::Ram(*s))),
        );
        order.extend(
            idx("file")
                .into_iter()
                .zip(flags.file.iter().map(|p| NsFlag::File(p.clone()))),
        );
        order.extend(
            idx("null")
                .into_iter()
                .zip(flags.null.iter().map(|s| NsFlag::Null(*s))),
        );
        order.extend(idx("rbd").into_iter().zip(flags.rbd.iter().map(|r| {
            NsFlag::Rbd(RbdConfig {
                conf: flags.ceph_conf.clone(),
                id: flags.ceph_id.clone(),
                keyring: flags.ceph_keyring.clone(),
                ..r.clone()
            })
        })));
        order.extend(
            idx("volume")
                .into_iter()
                .zip(flags.volume.iter().map(|v| NsFlag::Volume(v.clone()))),
        );
        order.sort_by_key(|(i, _)| *i);
        Ok(ServeArgs {
            flags,
            ns_order: order.into_iter().map(|(_, f)| f).collect(),
        })
    }
    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = ServeArgs::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for ServeArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        ServeFlags::augment_args(cmd)
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        ServeFlags::augment_args_for_update(cmd)
    }
}

impl ServeArgs {
    /// Builds the configuration: the file (if any) or the embedded default,
    /// with the flags applied on top.
    pub fn to_config(&self) -> Result<Config> {
        let f = &self.flags;
        let mut cfg = match &f.config {
            Some(p) => farflash_control::config::load(p)?,
            None => Config::default(),
        };
        if !f.listen.is_empty() {
            cfg.listen = f.listen.clone();
        }
        if let Some(t) = f.threads {
            cfg.transport.threads = t;
        }
        if let Some(c) = &f.cpus_allowed {
            cfg.transport.cpus_allowed = c.clone();
        }
        if let Some(p) = f.poll {
            cfg.transport.poll = p;
        }
        if let Some(us) = f.poll_idle_us {
            cfg.transport.poll_idle_us = us;
        }
        management_flags(f, &mut cfg.transport.management)?;
        let bs = f.block_size.as_deref().map(str::parse::<u32>).transpose()?;
        let flag_ns: Vec<NamespaceConfig> = self
            .ns_order
            .iter()
            .map(|n| {
                let (backend, path, size, rbd) = match n {
                    NsFlag::Ram(s) => (BackendKind::Ram, None, Some(*s), None),
                    NsFlag::Null(s) => (BackendKind::Null, None, Some(*s), None),
                    NsFlag::File(p) => (BackendKind::File, Some(p.clone()), None, None),
                    NsFlag::Rbd(r) => (BackendKind::Rbd, None, None, Some(r.clone())),
                    NsFlag::Volume(_) => (BackendKind::Volume, None, None, None),
                };
                let volume = match n {
                    NsFlag::Volume(v) => Some(v.clone()),
                    _ => None,
                };
                NamespaceConfig {
                    nsid: None,
                    backend,
                    path,
                    size,
                    block_size: bs,
                    uuid: None,
                    nguid: None,
                    anagrpid: None,
                    ptpl_file: None,
                    rbd,
                    volume,
                    commit: backend == BackendKind::Ram && f.ram_commit,
                }
            })
            .collect();
        let hosts = host_keys(f)?;
        let qos = (f.qos.iter())
            .map(|s| s.parse().map_err(|e| anyhow::anyhow!("--qos {s:?}: {e}")))
            .collect::<Result<Vec<farflash_core::qos::QosConfig>>>()?;
        let touches_subsystem = !flag_ns.is_empty()
            || !qos.is_empty()
            || f.nqn.is_some()
            || !f.allow_host.is_empty()
            || bs.is_some()
            || !hosts.is_empty()
            || f.require_auth;
        if f.config.is_some() {
            if touches_subsystem {
                // Flags describe one more subsystem beside the file's.
                if flag_ns.is_empty() {
                    bail!("with --config, --nqn/--allow-host/--block-size/--dhchap-*/--tls-key/--qos need namespaces (--ram/--file/--null/--rbd/--volume)");
                }
                let mut sub = SubsystemConfig::new(
                    f.nqn.clone().unwrap_or_else(|| DEFAULT_NQN.to_owned()),
                    flag_ns,
                );
                sub.allowed_hosts = f.allow_host.clone();
                sub.hosts = hosts;
                sub.require_auth = f.require_auth;
                sub.qos = qos;
                cfg.subsystems.push(sub);
            }
        } else {
            let sub = &mut cfg.subsystems[0];
            if let Some(n) = &f.nqn {
                sub.nqn = n.clone();
            }
            sub.allowed_hosts = f.allow_host.clone();
            sub.hosts = hosts;
            sub.require_auth = f.require_auth;
            sub.qos = qos;
            if !flag_ns.is_empty() {
                sub.namespaces = flag_ns;
            } else if let Some(b) = bs {
                sub.namespaces[0].block_size = Some(b);
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

/// The `--dhchap-key` / `--dhchap-ctrl-key` hosts. Errors name the host,
/// never the secret.
fn host_keys(f: &ServeFlags) -> Result<Vec<HostAuthConfig>> {
    let split = |flag: &str, v: &str| -> Result<(String, DhchapKey)> {
        let Some((nqn, secret)) = v.split_once('=') else {
            bail!("{flag} takes HOSTNQN=SECRET");
        };
        let key = secret
            .parse::<DhchapKey>()
            .map_err(|e| anyhow::anyhow!("{flag} for {nqn}: {e}"))?;
        Ok((nqn.to_owned(), key))
    };
    let mut hosts: Vec<HostAuthConfig> = Vec::new();
    for v in &f.dhchap_key {
        let (nqn, key) = split("--dhchap-key", v)?;
        if hosts.iter().any(|h| h.nqn == nqn) {
            bail!("--dhchap-key for {nqn} is given twice");
        }
        hosts.push(HostAuthConfig {
            dhchap_key: Some(key),
            dhchap_hash: f.dhchap_hash.clone(),
            dhchap_dhgroup: f.dhchap_dhgroup.clone(),
            ..HostAuthConfig::new(nqn)
        });
    }
    for v in &f.tls_key {
        let Some((nqn, text)) = v.split_once('=') else {
            bail!("--tls-key takes HOSTNQN=KEY or HOSTNQN=FILE");
        };
        // The error names the host and what is wrong, never the key.
        let mut key =
            TlsKey::parse(text).map_err(|e| anyhow::anyhow!("--tls-key for {nqn}: {e}"))?;
        farflash_control::key_files::read(&mut key)
            .map_err(|e| anyhow::anyhow!("--tls-key for {nqn}: {e}"))?;
        let h = match hosts.iter_mut().find(|h| h.nqn == nqn) {
            Some(h) if h.tls_key.is_some() => bail!("--tls-key for {nqn} is given twice"),
            Some(h) => h,
            None => {
                hosts.push(HostAuthConfig::new(nqn));
                let n = hosts.len() - 1;
                &mut hosts[n]
            }
        };
        h.tls_key = Some(key);
        h.tls_derivation = f.tls_derivation.clone();
    }
    if f.tls_key.is_empty() && !f.tls_derivation.is_empty() {
        bail!("--tls-derivation needs a --tls-key");
    }
    for v in &f.dhchap_ctrl_key {
        let (nqn, key) = split("--dhchap-ctrl-key", v)?;
        let Some(h) = hosts.iter_mut().find(|h| h.nqn == nqn) else {
            bail!("--dhchap-ctrl-key for {nqn} needs a --dhchap-key for that host");
        };
        h.dhchap_ctrl_key = Some(key);
    }
    if hosts.is_empty() && (!f.dhchap_hash.is_empty() || !f.dhchap_dhgroup.is_empty()) {
        bail!("--dhchap-hash/--dhchap-dhgroup need a --dhchap-key");
    }
    Ok(hosts)
}

fn init_logging(level: &str) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .with_context(|| format!("bad --log-level {level:?}"))?;
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
    Ok(())
}

pub fn run(args: ServeArgs) -> Result<()> {
    init_logging(&args.flags.log_level)?;
    let f = &args.flags;
    let metrics = f.metrics.as_deref().map(metrics_addr).transpose()?;
    let rpc_socket = match &f.rpc_socket {
        Some(p) if p.as_os_str() == "none" => RpcSocket::Off,
        Some(p) => RpcSocket::Path(p.clone()),
        None => RpcSocket::Default,
    };
    // The configuration at start and at every SIGHUP: the file and the flags.
    let source = {
        let args = args.clone();
        Box::new(move || args.to_config())
    };
    let autosave = match (f.autosave, &f.config) {
        (false, _) => None,
        (true, None) => bail!("--autosave needs --config FILE: the file it writes changes to"),
        (true, Some(_)) if !args.ns_order.is_empty() => bail!(
            "--autosave with namespace flags: the saved file would hold their subsystem and the flags would add it again at the next start; put it in the --config file"
        ),
        (true, Some(p)) => Some(p.clone()),
    };
    let opts = Options::new(source)
        .rpc_socket(rpc_socket)
        .metrics(metrics)
        .reload_on_sighup(true)
        .autosave(autosave);
    let server = Server::start(opts)?;
    server.stop_on(&[signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])?;
    print_banner(server.target(), server.addrs(), server.loop_options());
    print_endpoints(&server);
    farflash_server::notify::notify("READY=1");
    server.wait()?;
    Ok(())
}

/// The management and metrics endpoints, after the banner.
fn print_endpoints(server: &Server) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Some(p) = server.rpc_socket() {
        let _ = writeln!(out, "management socket {}", p.display());
    }
    if let Some(a) = server.rpc_net_addr() {
        let _ = writeln!(
            out,
            "management endpoint {a} (TLS, client certificates required)"
        );
    }
    if let Some(a) = server.metrics_addr() {
        let _ = writeln!(out, "metrics on http://{a}/metrics");
    }
    let _ = out.flush();
}

/// `--metrics`: ADDR:PORT, or a bare PORT on the loopback address.
fn metrics_addr(a: &str) -> Result<SocketAddr> {
    if let Ok(port) = a.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    a.to_socket_addrs()
        .with_context(|| format!("bad --metrics address {a:?} (want ADDR:PORT or PORT)"))?
        .next()
        .with_context(|| format!("--metrics address {a:?} resolves to nothing"))
}

/// `--rpc-listen`, `--rpc-cert`, `--rpc-key`, `--rpc-client-ca` over
/// `[transport.management]`: the endpoint is off or whole.
fn management_flags(f: &ServeFlags, m: &mut ManagementEndpoint) -> Result<()> {
    if let Some(l) = &f.rpc_listen {
        m.listen = Some(l.clone());
    }
    if let Some(p) = &f.rpc_cert {
        m.cert = Some(p.clone());
    }
    if let Some(p) = &f.rpc_key {
        m.key = Some(p.clone());
    }
    if let Some(p) = &f.rpc_client_ca {
        m.client_ca = Some(p.clone());
    }
    m.validate().map_err(|e| {
        anyhow::anyhow!("{e}; as flags: --rpc-listen, --rpc-cert, --rpc-key, --rpc-client-ca")
    })
}

/// Namespaces the start-up banner lists per subsystem.
const BANNER_NAMESPACES: usize = 32;

fn print_banner(target: &Target, addrs: &[SocketAddr], lo: &farflash_transport::LoopOptions) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "farflash {} ({}) NVMe/TCP target ({} I/O threads, poll {}{})",
        env!("CARGO_PKG_VERSION"),
        env!("FARFLASH_GIT_COMMIT"),
        lo.threads,
        format!("{:?}", lo.poll).to_lowercase(),
        if lo.cpus.is_empty() {
            String::new()
        } else {
            format!(", CPUs {:?}", lo.cpus)
        }
    );
    for sub in target.subsystems().iter() {
        let access = sub.access();
        let hosts = if access.allowed_hosts.is_empty() {
            "any host".to_owned()
        } else {
            access.allowed_hosts.join(", ")
        };
        let dhchap = access
            .hosts
            .iter()
            .filter(|h| h.dhchap_key.is_some())
            .count();
        let psk = access.hosts.iter().filter(|h| h.tls_key.is_some()).count();
        let mut auth = match (dhchap, access.require_auth) {
            (0, false) => String::new(),
            (n, req) => format!(
                "; DH-HMAC-CHAP keys for {n} host(s){}",
                if req { ", required" } else { "" }
            ),
        };
        if psk > 0 {
            auth.push_str(&format!("; TLS PSKs for {psk} host(s)"));
        }
        let _ = writeln!(out, "subsystem {} (allowed: {hosts}{auth})", sub.nqn);
        let list = sub.namespaces();
        for ns in list.iter().take(BANNER_NAMESPACES) {
            let _ = writeln!(
                out,
                "  nsid {}: {}, {} blocks of {} bytes ({})",
                ns.nsid,
                ns.describe,
                ns.blocks,
                ns.block_size,
                human(ns.blocks * ns.block_size as u64)
            );
        }
        if list.len() > BANNER_NAMESPACES {
            let _ = writeln!(
                out,
                "  ... and {} more namespaces (farflash ctl subsystem list)",
                list.len() - BANNER_NAMESPACES
            );
        }
    }
    let _ = writeln!(
        out,
        "discovery subsystem {} on every listener",
        farflash_wire::DISCOVERY_NQN
    );
    for (a, l) in addrs.iter().zip(target.listeners().iter()) {
        let shown = if l.transport == ListenTransport::Tcp {
            let sc = farflash_core::listen::listen_secure(&l.config);
            farflash_core::listen::join_listen_secure(sc, &a.to_string())
        } else {
            farflash_core::listen::join_listen(l.transport, &a.to_string())
        };
        let _ = writeln!(out, "listening on {shown}");
    }
    if let (Some(a), Some(l), Some(sub)) = (
        addrs.first(),
        target.listeners().first(),
        target.subsystems().first().cloned(),
    ) {
        // nvme-cli 2.x: `--tls` asks for a secure channel (the host's PSK
        // comes from its keyring, `nvme gen-tls-key --insert`).
        let tls = match farflash_core::listen::listen_secure(&l.config) {
            farflash_core::listen::SecureChannel::Required => " --tls",
            _ => "",
        };
        let _ = writeln!(
            out,
            "connect with: nvme connect -t {} -a {} -s {} -n {}{tls}",
            l.transport.name(),
            a.ip(),
            a.port(),
            sub.nqn
        );
    }
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: ServeArgs,
    }

    fn parse(args: &[&str]) -> ServeArgs {
        T::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
            .unwrap()
            .a
    }

    #[test]
    fn dhchap_flags_build_host_keys_and_errors_hide_secrets() {
        let k = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:";
        let hk = format!("nqn.h={k}");
        let c = parse(&[
            "--dhchap-key",
            &hk,
            "--dhchap-ctrl-key",
            &hk,
            "--dhchap-dhgroup",
            "ffdhe2048,null",
            "--require-auth",
        ])
        .to_config()
        .unwrap();
        let s = &c.subsystems[0];
        assert!(s.require_auth);
        assert_eq!(s.hosts[0].nqn, "nqn.h");
        assert!(s.hosts[0].dhchap_ctrl_key.is_some());
        assert_eq!(s.hosts[0].dhchap_dhgroup, vec!["ffdhe2048", "null"]);
        let bad = format!("nqn.h={}", k.replace("ia6z", "ib6z"));
        for args in [
            vec!["--dhchap-key", bad.as_str()],
            vec!["--dhchap-ctrl-key", hk.as_str()],
            vec!["--dhchap-key", hk.as_str(), "--dhchap-hash", "md5"],
        ] {
            let e = parse(&args).to_config().unwrap_err().to_string();
            assert!(!e.contains("6zGod"), "{e}");
        }
    }

    #[test]
    fn tls_flags_build_host_keys_beside_dhchap_and_errors_hide_secrets() {
        let tk = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
        let dk = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:";
        let (t1, t2, d1) = (
            format!("nqn.a={tk}"),
            format!("nqn.b={tk}"),
            format!("nqn.a={dk}"),
        );
        let c = parse(&[
            "--listen",
            "tls:127.0.0.1:4420",
            "--dhchap-key",
            &d1,
            "--tls-key",
            &t1,
            "--tls-key",
            &t2,
            "--tls-derivation",
            "rfc8446",
        ])
        .to_config()
        .unwrap();
        assert_eq!(c.listen, ["tls:127.0.0.1:4420"]);
        let hosts = &c.subsystems[0].hosts;
        assert_eq!(hosts.len(), 2);
        assert!(
            hosts[0].nqn == "nqn.a" && hosts[0].dhchap_key.is_some() && hosts[0].tls_key.is_some()
        );
        assert!(hosts[1].nqn == "nqn.b" && hosts[1].dhchap_key.is_none());
        assert_eq!(hosts[1].tls_derivation, ["rfc8446"]);
        let bad = format!("nqn.a={}", tk.replace("VRLb", "VRLc"));
        for args in [
            vec!["--tls-key", bad.as_str()],
            vec!["--tls-key", t1.as_str(), "--tls-key", t1.as_str()],
            vec!["--tls-derivation", "rfc8446"],
            vec!["--tls-key", t1.as_str(), "--tls-derivation", "nope"],
            vec!["--tls-key", tk],
        ] {
            let e = parse(&args).to_config().unwrap_err().to_string();
            assert!(!e.contains("btnN9AQb"), "{e}");
        }
    }

    #[test]
    fn no_flags_is_the_embedded_default() {
        let c = parse(&[]).to_config().unwrap();
        assert_eq!(c, Config::default());
        // A first run on a small machine: RAM committed as written.
        assert!(!c.subsystems[0].namespaces[0].commit);
    }

    #[test]
    fn ram_commit_applies_to_the_ram_flags_only() {
        let c = parse(&["--ram", "64M", "--null", "1G", "--ram-commit"])
            .to_config()
            .unwrap();
        let commit: Vec<_> = c.subsystems[0]
            .namespaces
            .iter()
            .map(|n| (n.backend, n.commit))
            .collect();
        assert_eq!(
            commit,
            vec![(BackendKind::Ram, true), (BackendKind::Null, false)]
        );
        let c = parse(&["--ram", "64M"]).to_config().unwrap();
        assert!(!c.subsystems[0].namespaces[0].commit);
        // The TOML form, and that it round-trips only when set.
        let ns: NamespaceConfig =
            toml::from_str("backend = 'ram'\nsize = '1M'\ncommit = true\n").unwrap();
        assert!(ns.commit);
        let plain = toml::to_string(&c.subsystems[0].namespaces[0]).unwrap();
        assert!(!plain.contains("commit"), "{plain}");
    }

    #[test]
    fn namespace_flags_keep_their_order() {
        let c = parse(&[
            "--null",
            "1G",
            "--file",
            "/tmp/x",
            "--ram",
            "512M",
            "--block-size",
            "4096",
            "--nqn",
            "nqn.t:a",
        ])
        .to_config()
        .unwrap();
        let s = &c.subsystems[0];
        assert_eq!(s.nqn, "nqn.t:a");
        let kinds: Vec<_> = s.namespaces.iter().map(|n| n.backend).collect();
        assert_eq!(
            kinds,
            vec![BackendKind::Null, BackendKind::File, BackendKind::Ram]
        );
        assert!(s.namespaces.iter().all(|n| n.block_size == Some(4096)));
    }

    #[test]
    fn flags_and_file_build_the_same_config() {
        let dir = std::env::temp_dir().join(format!("ff-serve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.toml");
        std::fs::write(
            &p,
            "listen=['127.0.0.1:4420']\n[[subsystem]]\nnqn='nqn.t:a'\nallowed_hosts=['nqn.h']\n[[subsystem.namespace]]\nbackend='ram'\nsize='64M'\n",
        )
        .unwrap();
        let from_file = parse(&["--config", p.to_str().unwrap()])
            .to_config()
            .unwrap();
        let from_flags = parse(&["--nqn", "nqn.t:a", "--ram", "64M", "--allow-host", "nqn.h"])
            .to_config()
            .unwrap();
        assert_eq!(from_file, from_flags);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rbd_flags_and_file_build_the_same_config() {
        let dir = std::env::temp_dir().join(format!("ff-serve-rbd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.toml");
        std::fs::write(
            &p,
            "[[subsystem]]\nnqn='nqn.t:r'\n[[subsystem.namespace]]\nbackend='ram'\nsize='1M'\n\
             [[subsystem.namespace]]\nbackend='rbd'\n\
             rbd={pool='rbd',image='vol1',conf='/c/ceph.conf',id='gw',keyring='/c/k'}\n",
        )
        .unwrap();
        let from_file = parse(&["--config", p.to_str().unwrap()])
            .to_config()
            .unwrap();
        let from_flags = parse(&[
            "--nqn",
            "nqn.t:r",
            "--ram",
            "1M",
            "--rbd",
            "rbd/vol1",
            "--ceph-conf",
            "/c/ceph.conf",
            "--ceph-id",
            "gw",
            "--ceph-keyring",
            "/c/k",
        ])
        .to_config()
        .unwrap();
        assert_eq!(from_file.subsystems, from_flags.subsystems);
        let ns = &from_flags.subsystems[0].namespaces[1];
        assert_eq!(ns.backend, BackendKind::Rbd);
        assert_eq!(ns.rbd.as_ref().map(|r| r.image.as_str()), Some("vol1"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn volume_flags_and_file_build_the_same_config() {
        let dir = std::env::temp_dir().join(format!("ff-serve-vol-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pools = "[[pool]]\nname='tank'\ndevices=['/dev/null']\n";
        let base = format!("[[subsystem]]\nnqn='nqn.t:a'\n[[subsystem.namespace]]\nbackend='ram'\nsize='1M'\n{pools}");
        let (p, q) = (dir.join("v.toml"), dir.join("base.toml"));
        let vol = "[[subsystem]]\nnqn='nqn.t:v'\n[[subsystem.namespace]]\nbackend='volume'\nvolume='tank/db'\n";
        std::fs::write(&p, format!("{base}{vol}")).unwrap();
        std::fs::write(&q, &base).unwrap();
        let from_file = parse(&["--config", p.to_str().unwrap()])
            .to_config()
            .unwrap();
        let from_flags = parse(&[
            "--config",
            q.to_str().unwrap(),
            "--nqn",
            "nqn.t:v",
            "--volume",
            "tank/db",
        ])
        .to_config()
        .unwrap();
        assert_eq!(from_file, from_flags);
        let ns = &from_flags.subsystems[1].namespaces[0];
        assert_eq!(
            (ns.backend, ns.volume.as_deref()),
            (BackendKind::Volume, Some("tank/db"))
        );
        // A volume of a pool the configuration does not have is named.
        let e = parse(&["--config", q.to_str().unwrap(), "--volume", "other/db"])
            .to_config()
            .unwrap_err()
            .to_string();
        assert!(e.contains("other"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rbd_flag_needs_pool_and_image() {
        for bad in ["vol1", "/vol1", "rbd/", "a/b/c"] {
            let r = T::try_parse_from(["serve", "--rbd", bad]);
            let e = r.map(|_| ()).unwrap_err().to_string();
            assert!(e.contains("POOL/IMAGE"), "{bad}: {e}");
        }
    }
}
