//! `farflash discover`: print a discovery controller's log page, like
//! `nvme discover` (same option letters, same field names in JSON).
//! Also home of the transport options shared with `identify` and `perf`.

use anyhow::{bail, Context};
use farflash_host::{ConnectOptions, Controller};
use farflash_wire::discovery::DiscEntry;
use serde_json::json;

/// nvme-cli's default discovery port (NVME_DISC_IP_PORT).
pub const DISCOVERY_PORT: u16 = 8009;
/// The NVMe/TCP well-known I/O port.
pub const IO_PORT: u16 = 4420;

/// Transport options in nvme-cli's words.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct FabricsArgs {
    /// Transport type: `tcp` or `rdma` (RDMA CM over an RDMA device's
    /// address: RoCE, iWARP, InfiniBand, Soft-RoCE).
    #[arg(short = 't', long = "transport", default_value = "tcp")]
    pub transport: String,
    /// Transport address of the controller (IPv4 or IPv6 literal, or a host name).
    #[arg(short = 'a', long = "traddr")]
    pub traddr: Option<String>,
    /// Transport service id (TCP or RDMA CM port; discovery defaults to
    /// 8009 on TCP and 4420 on RDMA, as nvme-cli).
    #[arg(short = 's', long = "trsvcid")]
    pub trsvcid: Option<u16>,
    /// Host NQN (default: /etc/nvme/hostnqn, else a UUID NQN).
    #[arg(short = 'q', long = "hostnqn")]
    pub hostnqn: Option<String>,
    /// Host identifier (UUID; default /etc/nvme/hostid, else random).
    #[arg(short = 'I', long = "hostid")]
    pub hostid: Option<String>,
    /// Enable the NVMe/TCP header digest.
    #[arg(short = 'g', long = "hdr-digest")]
    pub hdr_digest: bool,
    /// Enable the NVMe/TCP data digest.
    #[arg(short = 'G', long = "data-digest")]
    pub data_digest: bool,
    /// Keep-alive timeout in seconds (0 disables keep-alive).
    #[arg(short = 'k', long = "keep-alive-tmo")]
    pub keep_alive_tmo: Option<u32>,
    /// Keep SQ flow control on the I/O queues. By default farflash asks to
    /// disable it (as `nvme connect --disable-sqflow`): it never reads SQHD,
    /// and the target may then complete reads without a CapsuleResp.
    #[arg(long = "sqflow")]
    pub sqflow: bool,
    /// DH-HMAC-CHAP secret (`DHHC-1:0X:...:`): authenticate when the
    /// controller asks (as `nvme connect --dhchap-secret`).
    #[arg(short = 'S', long = "dhchap-secret", value_name = "SECRET")]
    pub dhchap_secret: Option<SecretArg>,
    /// The controller's DH-HMAC-CHAP secret: the controller must prove it
    /// (bidirectional authentication), else the connect fails.
    #[arg(short = 'C', long = "dhchap-ctrl-secret", value_name = "SECRET")]
    pub dhchap_ctrl_secret: Option<SecretArg>,
    /// NVMe/TCP over TLS 1.3 with a pre-shared key (needs --tls-key).
    #[arg(long = "tls")]
    pub tls: bool,
    /// The PSK: a configured key `NVMeTLSkey-1:HH:...:`, or a file holding
    /// one, or nvme-cli --keyfile lines (`<identity> NVMeTLSkey-<v>:HH:...:`).
    #[arg(long = "tls-key", alias = "tls_key", value_name = "KEY|FILE")]
    pub tls_key: Option<SecretArg>,
    /// PSK identity version: 0 (`NVMe0R0h host subsys`, nvme-cli's default)
    /// or 1 (`NVMe1R0h host subsys digest`).
    #[arg(long = "tls-identity", value_name = "0|1", default_value_t = 0)]
    pub tls_identity: u8,
    /// Derivation of the retained and TLS PSKs from a configured key:
    /// libnvme-1.10 (nvme-cli 2.10-2.15, the default), rfc8446 (SPDK,
    /// nvme-cli >= 2.16), ... (docs/tls.md).
    #[arg(long = "tls-derivation", value_name = "NAME", value_parser = crate::cli::tls::derivation)]
    pub tls_derivation: Option<farflash_tls::Derivation>,
}

/// A secret as given on the command line: parsed only in
/// [`FabricsArgs::options`], so that no error (clap's included) and no
/// `Debug` output ever repeats it.
#[derive(Clone, Default)]
pub struct SecretArg(zeroize::Zeroizing<String>);

impl std::fmt::Debug for SecretArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretArg(..)")
    }
}

impl std::str::FromStr for SecretArg {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<SecretArg, Self::Err> {
        Ok(SecretArg(zeroize::Zeroizing::new(s.to_owned())))
    }
}

impl SecretArg {
    fn parse(&self, flag: &str) -> anyhow::Result<farflash_auth::Secret> {
        farflash_auth::Secret::parse(self.0.trim()).map_err(|e| anyhow::anyhow!("{flag}: {e}"))
    }
}

impl FabricsArgs {
    /// Builds connect options for `subnqn`, `default_port` when -s is absent.
    pub fn options(&self, subnqn: &str, default_port: u16) -> anyhow::Result<ConnectOptions> {
        let connector: Option<std::sync::Arc<dyn farflash_host::Connector>> =
            match self.transport.as_str() {
                "tcp" => None,
                "rdma" => Some(std::sync::Arc::new(farflash_rdma_verbs::RdmaConnector)),
                t => bail!("-t/--transport {t:?} is not supported (tcp or rdma)"),
            };
        // nvme-cli: RDMA has no separate discovery port (NVME_RDMA_IP_PORT).
        let default_port = if connector.is_some() {
            IO_PORT
        } else {
            default_port
        };
        if connector.is_some() && (self.hdr_digest || self.data_digest) {
            bail!("-g/-G (digests) are NVMe/TCP options; RDMA has none");
        }
        let addr = self
            .traddr
            .as_deref()
            .context("missing --traddr/-a (the controller's address)")?;
        let port = self.trsvcid.unwrap_or(default_port);
        let hostport = if addr.contains(':') && !addr.starts_with('[') {
            format!("[{addr}]:{port}")
        } else {
            format!("{addr}:{port}")
        };
        let mut o = ConnectOptions::new(hostport, subnqn);
        o.connector = connector;
        if let Some(id) = &self.hostid {
            o.hostid = farflash_host::options::parse_uuid(id)
                .with_context(|| format!("--hostid {id:?} is not a UUID"))?;
            if self.hostnqn.is_none() {
                o.hostnqn = farflash_host::options::default_hostnqn(&o.hostid);
            }
        }
        if let Some(n) = &self.hostnqn {
            o.hostnqn = n.clone();
        }
        o.hdr_digest = self.hdr_digest;
        o.data_digest = self.data_digest;
        o.disable_sqflow = !self.sqflow;
        if let Some(s) = &self.dhchap_secret {
            o.dhchap_secret = Some(s.parse("--dhchap-secret")?);
        }
        if let Some(s) = &self.dhchap_ctrl_secret {
            if o.dhchap_secret.is_none() {
                bail!("--dhchap-ctrl-secret needs --dhchap-secret");
            }
            o.dhchap_ctrl_secret = Some(s.parse("--dhchap-ctrl-secret")?);
        }
        if let Some(k) = self.keep_alive_tmo {
            o.kato_ms = k.saturating_mul(1000);
        }
        o.tls = self.tls_options(o.connector.is_some())?;
        Ok(o)
    }

    /// `--tls`, `--tls-key`, `--tls-identity`, `--tls-derivation`.
    fn tls_options(
        &self,
        rdma: bool,
    ) -> anyhow::Result<Option<std::sync::Arc<farflash_host::tls::TlsOptions>>> {
        use farflash_host::tls::{TlsOptions, DEFAULT_DERIVATION};
        if !self.tls {
            if self.tls_key.is_some() || self.tls_derivation.is_some() {
                bail!("--tls-key and --tls-derivation need --tls");
            }
            return Ok(None);
        }
        if rdma {
            bail!("--tls is an NVMe/TCP option; RDMA has no secure channel");
        }
        let Some(k) = &self.tls_key else {
            bail!("--tls needs --tls-key (a NVMeTLSkey-1:HH:...: key, or a file of keys)");
        };
        let version = farflash_tls::IdentityVersion::from_number(self.tls_identity)
            .with_context(|| format!("--tls-identity {} (0 or 1)", self.tls_identity))?;
        let key = read_tls_key(&k.0)?;
        let t = TlsOptions::new(
            key,
            version,
            self.tls_derivation.unwrap_or(DEFAULT_DERIVATION),
        )?;
        Ok(Some(std::sync::Arc::new(t)))
    }
}

/// The `--tls-key` value: a key string, or the file it names. No error
/// repeats the text.
fn read_tls_key(v: &str) -> anyhow::Result<farflash_tls::keyfile::HostKey> {
    use farflash_tls::keyfile::{HostKey, MAX_TEXT};
    use std::io::Read;
    let v = v.trim();
    if v.starts_with("NVMeTLSkey-") {
        return HostKey::parse(v).map_err(|e| anyhow::anyhow!("--tls-key: {e}"));
    }
    let f = std::fs::File::open(v).with_context(|| {
        "--tls-key: neither a key (NVMeTLSkey-1:HH:...:) nor a readable file".to_string()
    })?;
    let mut text = zeroize::Zeroizing::new(String::new());
    f.take(MAX_TEXT as u64 + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("--tls-key: reading {v}"))?;
    HostKey::parse(&text).map_err(|e| anyhow::anyhow!("--tls-key {v}: {e}"))
}

/// `normal` (text) or `json`, like nvme-cli's `-o`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OutputFormat {
    #[default]
    Normal,
    Json,
}

#[derive(clap::Args, Debug, Default)]
pub struct DiscoverArgs {
    #[command(flatten)]
    pub fabrics: FabricsArgs,
    /// Output format.
    #[arg(
        short = 'o',
        long = "output-format",
        value_enum,
        default_value = "normal"
    )]
    pub output_format: OutputFormat,
}

pub fn run(args: DiscoverArgs) -> anyhow::Result<()> {
    let mut opts = args
        .fabrics
        .options(farflash_wire::DISCOVERY_NQN, DISCOVERY_PORT)?;
    // A one-shot discovery controller needs no keep-alive (nvme-cli does the same).
    if args.fabrics.keep_alive_tmo.is_none() {
        opts.kato_ms = 0;
    }
    let ctrl =
        Controller::connect(&opts).with_context(|| format!("connecting to {}", opts.describe()))?;
    let (genctr, entries) = ctrl.discovery_log().context("reading the discovery log")?;
    ctrl.shutdown().context("disconnecting")?;
    match args.output_format {
        OutputFormat::Normal => print!("{}", normal(genctr, &entries)),
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&to_json(genctr, &entries))?
        ),
    }
    Ok(())
}

fn trtype(v: u8) -> &'static str {
    match v {
        1 => "rdma",
        2 => "fc",
        3 => "tcp",
        254 => "loop",
        _ => "unrecognized",
    }
}
fn adrfam(v: u8) -> &'static str {
    match v {
        1 => "ipv4",
        2 => "ipv6",
        3 => "infiniband",
        4 => "fibre-channel",
        254 => "loop",
        _ => "unrecognized",
    }
}
fn subtype(v: u8) -> &'static str {
    match v {
        1 => "discovery subsystem referral",
        2 => "nvme subsystem",
        3 => "current discovery subsystem",
        _ => "unrecognized",
    }
}
/// TREQ bits 1:0 secure channel, bit 2 SQ flow control disable supported.
fn treq(v: u8) -> String {
    let mut s = match v & 3 {
        0 => "not specified",
        1 => "required",
        2 => "not required",
        _ => "reserved",
    }
    .to_owned();
    if v & 4 != 0 {
        s.push_str(", sq flow control disable supported");
    }
    s
}
fn eflags(v: u16) -> String {
    let mut f = vec![];
    if v & 1 != 0 {
        f.push("duplicate discovery information");
    }
    if v & 2 != 0 {
        f.push("explicit discovery connections");
    }
    if v & 4 != 0 {
        f.push("no cdc connectivity");
    }
    if f.is_empty() {
        "none".into()
    } else {
        f.join(", ")
    }
}
fn sectype(v: u8) -> &'static str {
    match v {
        0 => "none",
        1 => "tls1.2",
        2 => "tls1.3",
        _ => "reserved",
    }
}

/// The text `nvme discover` prints.
pub fn normal(genctr: u64, entries: &[DiscEntry]) -> String {
    let mut s = format!(
        "\nDiscovery Log Number of Records {}, Generation counter {genctr}\n",
        entries.len()
    );
    for (i, e) in entries.iter().enumerate() {
        s += &format!("=====Discovery Log Entry {i}======\n");
        s += &format!("trtype:  {}\n", trtype(e.trtype));
        s += &format!("adrfam:  {}\n", adrfam(e.adrfam));
        s += &format!("subtype: {}\n", subtype(e.subtype));
        s += &format!("treq:    {}\n", treq(e.treq));
        s += &format!("portid:  {}\n", e.portid);
        s += &format!("trsvcid: {}\n", e.trsvcid);
        s += &format!("subnqn:  {}\n", e.subnqn);
        s += &format!("traddr:  {}\n", e.traddr);
        s += &format!("eflags:  {}\n", eflags(e.eflags));
        if e.trtype == 3 {
            s += &format!("sectype: {}\n", sectype(e.sectype));
        }
    }
    s
}

/// The JSON `nvme discover -o json` prints.
pub fn to_json(genctr: u64, entries: &[DiscEntry]) -> serde_json::Value {
    let records: Vec<_> = entries
        .iter()
        .map(|e| {
            json!({
                "trtype": trtype(e.trtype),
                "adrfam": adrfam(e.adrfam),
                "subtype": subtype(e.subtype),
                "treq": treq(e.treq),
                "portid": e.portid,
                "trsvcid": e.trsvcid,
                "subnqn": e.subnqn,
                "traddr": e.traddr,
                "eflags": eflags(e.eflags),
                "sectype": sectype(e.sectype),
                "cntlid": e.cntlid,
                "asqsz": e.asqsz,
            })
        })
        .collect();
    json!({ "genctr": genctr, "records": records })
}
