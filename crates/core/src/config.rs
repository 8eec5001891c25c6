//! Target configuration: what `--config FILE` (TOML) describes and what the
//! command-line flags build. One struct, so flags and file are one code path.

use farflash_auth::{DhGroup, HashId, Secret};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub use crate::size::Size;

/// The NQN used when none is given.
pub const DEFAULT_NQN: &str = "nqn.2026-11.io.farflash:default";
/// The listener used when none is given (port 4420, TCP §3.1.2 "Transport Service Identifier").
pub const DEFAULT_LISTEN: &str = "127.0.0.1:4420";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Addresses to listen on, `[tcp:|rdma:]ADDR:PORT` (IPv6 as
    /// `[::1]:4420`), or tables `{ address, transport }` (`crate::listen`).
    #[serde(
        default = "default_listeners",
        deserialize_with = "crate::listen::deserialize_listen"
    )]
    pub listen: Vec<String>,
    #[serde(default)]
    pub transport: TransportConfig,
    #[serde(default, rename = "subsystem")]
    pub subsystems: Vec<SubsystemConfig>,
    /// Volume pools the target opens at start (`[[pool]]`, docs/volumes.md);
    /// `backend = "volume"` namespaces name a volume of one of them.
    #[serde(default, rename = "pool", skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolConfig>,
}

/// A volume pool (`[[pool]]`): a local pool over files or block devices,
/// or an RBD pool (docs/volumes.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    pub name: String,
    /// "local" (over `devices`) or "rbd" (over the `rbd` table's pool).
    #[serde(default = "default_pool_backend")]
    pub backend: String,
    /// A local pool's devices, in any order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<PathBuf>,
    /// The cluster size a local pool was created with (informative when
    /// opening: the pool's superblock holds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_size: Option<u64>,
    /// An RBD pool's Ceph pool and credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rbd: Option<RbdPoolConfig>,
}

fn default_pool_backend() -> String {
    "local".to_owned()
}

/// Where an RBD volume pool lives: `rbd = { pool = "rbd" }` plus,
/// optionally, ceph.conf, the client id and its keyring.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RbdPoolConfig {
    pub pool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conf: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyring: Option<PathBuf>,
}

impl PoolConfig {
    /// Checks what the types cannot; the error names the pool and field.
    pub fn validate(&self) -> Result<(), String> {
        let n = &self.name;
        if n.is_empty() || n.len() > 64 || n.contains(['/', '@']) || n.chars().any(char::is_control)
        {
            return Err(format!(
                "pool name {n:?}: 1 to 64 characters, no '/', '@' or control characters"
            ));
        }
        match self.backend.as_str() {
            "local" if self.devices.is_empty() => {
                Err(format!("pool {n}: a local pool needs devices"))
            }
            "local" if self.rbd.is_some() => {
                Err(format!("pool {n}: rbd = {{...}} needs backend = \"rbd\""))
            }
            "local" => Ok(()),
            "rbd" if self.rbd.is_none() => Err(format!(
                "pool {n}: an rbd pool needs rbd = {{ pool = ... }}"
            )),
            "rbd" if !self.devices.is_empty() || self.cluster_size.is_some() => Err(format!(
                "pool {n}: an rbd pool takes no devices or cluster_size"
            )),
            "rbd" => Ok(()),
            b => Err(format!(
                "pool {n}: backend {b:?} is not \"local\" or \"rbd\""
            )),
        }
    }
}

/// `POOL/NAME`: the volume a `backend = "volume"` namespace exports.
pub fn split_volume(s: &str) -> Result<(&str, &str), String> {
    match s.split_once('/') {
        Some((p, v)) if !p.is_empty() && !v.is_empty() && !v.contains('/') => Ok((p, v)),
        _ => Err(format!("volume {s:?} is not POOL/NAME")),
    }
}

fn default_listeners() -> Vec<String> {
    vec![DEFAULT_LISTEN.to_owned()]
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransportConfig {
    /// How much data one capsule and one data PDU carry (keys of
    /// `[transport]` itself: the group is flattened).
    #[serde(flatten)]
    pub data: DataSizes,
    /// Largest I/O submission queue (entries), reported in CAP.MQES + 1.
    pub max_queue_depth: u32,
    /// Most I/O queues per controller (Set Features Number of Queues).
    pub max_io_queues: u32,
    /// Maximum data transfer size in bytes (a power of two ≥ 4 KiB), MDTS.
    pub max_io_size: u32,
    /// Keep Alive Support granularity in milliseconds (KAS * 100).
    pub keep_alive_granularity_ms: u32,
    /// Event-loop threads (0 = one per allowed CPU).
    pub threads: u32,
    /// Connections (queue pairs) served at once; more are closed at accept.
    pub max_connections: u32,
    /// Data-buffer bytes one queue may hold for commands in flight (R2T
    /// write buffers, read data not yet sent); beyond it commands wait.
    pub max_queue_buffer: u32,
    /// CPUs the event loops are pinned to, e.g. "0-3,6" (empty = not pinned).
    pub cpus_allowed: String,
    /// How event loops wait for work.
    pub poll: PollMode,
    /// Adaptive and hybrid modes: the shortest time the loop stays awake after
    /// the last work (hybrid may nap on a timer within it), then it sleeps.
    pub poll_idle_us: u32,
    /// Fair sharing between the connections of an event loop: KiB read
    /// from one connection per round and unit of its host's QoS weight
    /// before the others get their turn; 0 turns it off.
    pub fair_share_kib: u32,
    /// How many subsystems and namespaces the target takes
    /// (`[transport.limits]`).
    pub limits: Limits,
    /// The secure channel's timeouts (keys of `[transport]` itself).
    #[serde(flatten)]
    pub tls: TlsTimeouts,
    /// The management API over the network (`[transport.management]`):
    /// TLS 1.3 with client certificates; off unless `listen` is set.
    #[serde(skip_serializing_if = "ManagementEndpoint::is_off")]
    pub management: ManagementEndpoint,
}

/// How much data one capsule and one data PDU carry (`[transport]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DataSizes {
    /// In-capsule data the I/O queues accept, in bytes (IOCCSZ*16-64).
    /// The admin queue always accepts 8 KiB, as the Linux host sends it.
    pub in_capsule_data_size: u32,
    /// MAXH2CDATA advertised in ICResp: largest H2CData PDU payload.
    pub max_h2c_data: u32,
    /// Largest C2HData PDU payload the target sends.
    pub max_c2h_data: u32,
}

impl Default for DataSizes {
    fn default() -> Self {
        DataSizes {
            in_capsule_data_size: 8192,
            max_h2c_data: 64 * 1024,
            max_c2h_data: 128 * 1024,
        }
    }
}

/// The secure channel's timeouts (TLS listeners; `[transport]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TlsTimeouts {
    /// A connection whose TLS handshake (or, on a `tls-optional` listener,
    /// whose first byte) has not come within this many milliseconds is
    /// closed (default 10000, as Linux nvme-tcp's `tls_handshake_timeout`
    /// of 10 s).
    pub tls_handshake_timeout_ms: u32,
    /// A TLS record begun and not completed within this many milliseconds
    /// closes the connection (a peer stalled mid-record).
    pub tls_record_timeout_ms: u32,
}

impl Default for TlsTimeouts {
    fn default() -> Self {
        TlsTimeouts {
            tls_handshake_timeout_ms: 10_000,
            tls_record_timeout_ms: 10_000,
        }
    }
}

/// `[transport.management]`: where the management API listens on the
/// network and the PEM files of its TLS (docs/management.md). Read at
/// start, like the rest of `[transport]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ManagementEndpoint {
    /// ADDR:PORT to listen on (none: no network endpoint).
    pub listen: Option<String>,
    /// The endpoint's certificate chain (PEM, leaf first).
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub key: Option<PathBuf>,
    /// The CA certificates (PEM) a client's certificate must chain to.
    pub client_ca: Option<PathBuf>,
}

impl ManagementEndpoint {
    pub fn is_off(&self) -> bool {
        *self == ManagementEndpoint::default()
    }

    /// Checks that the endpoint is off or fully given; an error names the
    /// missing field.
    pub fn validate(&self) -> Result<(), String> {
        if self.is_off() {
            return Ok(());
        }
        let missing = [
            ("listen", self.listen.is_none()),
            ("cert", self.cert.is_none()),
            ("key", self.key.is_none()),
            ("client_ca", self.client_ca.is_none()),
        ];
        match missing.iter().find(|(_, m)| *m) {
            Some((field, _)) => Err(format!(
                "transport.management.{field} is missing: the network management endpoint needs listen, cert, key and client_ca (it is never unauthenticated)"
            )),
            None => Ok(()),
        }
    }
}

/// The target's limits on subsystems and namespaces, checked at start, at
/// every reload and at every management call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Subsystems the target serves at most (the discovery log lists each
    /// on every listener).
    pub max_subsystems: u32,
    /// Namespaces one subsystem holds at most.
    pub max_namespaces_per_subsystem: u32,
    /// Namespaces of all subsystems together.
    pub max_namespaces: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_subsystems: DEFAULT_MAX_SUBSYSTEMS,
            max_namespaces_per_subsystem: DEFAULT_MAX_NAMESPACES_PER_SUBSYSTEM,
            max_namespaces: DEFAULT_MAX_NAMESPACES,
        }
    }
}

/// Default of [`Limits::max_subsystems`].
pub const DEFAULT_MAX_SUBSYSTEMS: u32 = 4096;
/// Default of [`Limits::max_namespaces_per_subsystem`].
pub const DEFAULT_MAX_NAMESPACES_PER_SUBSYSTEM: u32 = 4096;
/// Default of [`Limits::max_namespaces`].
pub const DEFAULT_MAX_NAMESPACES: u32 = 65536;

/// How an event loop waits for sockets and backend completions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PollMode {
    /// Spin while work arrives, sleep in epoll after `poll_idle_us` of quiet.
    Adaptive,
    /// Never sleep: lowest latency, one busy core per event loop.
    Always,
    /// Always sleep in epoll: least CPU.
    Never,
    /// The default. As adaptive, but in a gap the loop expects to last
    /// (learnt from the recent gaps between a host's commands) it sleeps on
    /// a precise timer for the part it can sleep and wakes early enough to
    /// poll for the rest (the kernel's hybrid polling, for a network
    /// queue); only where the gap is long against the measured wake-up
    /// cost, and backing off after a sleep an arrival cut short, so full
    /// load is polled (`farflash-nap`; docs/performance.md).
    #[default]
    Hybrid,
}

impl std::str::FromStr for PollMode {
    type Err = String;
    fn from_str(s: &str) -> Result<PollMode, String> {
        match s {
            "adaptive" => Ok(PollMode::Adaptive),
            "always" => Ok(PollMode::Always),
            "never" => Ok(PollMode::Never),
            "hybrid" => Ok(PollMode::Hybrid),
            _ => Err(format!(
                "poll mode {s:?} is not always, adaptive, hybrid or never"
            )),
        }
    }
}

/// Parses a CPU list like "0-3,6" (as taskset and fio's --cpus_allowed take).
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let a: usize = a
            .trim()
            .parse()
            .map_err(|_| format!("bad CPU list {s:?}"))?;
        let b: usize = b
            .trim()
            .parse()
            .map_err(|_| format!("bad CPU list {s:?}"))?;
        if a > b || b >= 1024 {
            return Err(format!("bad CPU range {part:?}"));
        }
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            data: DataSizes::default(),
            max_queue_depth: 128,
            max_io_queues: 16,
            max_io_size: 256 * 1024,
            keep_alive_granularity_ms: 1000,
            threads: 0,
            max_connections: 4096,
            max_queue_buffer: 8 << 20,
            cpus_allowed: String::new(),
            poll: PollMode::Hybrid,
            poll_idle_us: 100,
            fair_share_kib: 256,
            limits: Limits::default(),
            tls: TlsTimeouts::default(),
            management: ManagementEndpoint::default(),
        }
    }
}

impl Limits {
    /// Checks `subsystems` against the limits on subsystems and namespaces
    /// (the error names the setting to raise).
    pub fn check_counts(&self, subsystems: &[SubsystemConfig]) -> Result<(), ConfigError> {
        let over = |m: String| Err(ConfigError::Limit(m));
        if subsystems.len() > self.max_subsystems as usize {
            return over(format!(
                "{} subsystems: more than transport.limits.max_subsystems ({})",
                subsystems.len(),
                self.max_subsystems
            ));
        }
        let mut total = 0usize;
        for s in subsystems {
            self.check_subsystem_namespaces(&s.nqn, s.namespaces.len())?;
            total += s.namespaces.len();
        }
        self.check_namespaces(total)
    }

    /// One subsystem of `count` namespaces.
    pub fn check_subsystem_namespaces(&self, nqn: &str, count: usize) -> Result<(), ConfigError> {
        if count > self.max_namespaces_per_subsystem as usize {
            return Err(ConfigError::Limit(format!(
                "{nqn}: {count} namespaces: more than transport.limits.max_namespaces_per_subsystem ({})",
                self.max_namespaces_per_subsystem
            )));
        }
        Ok(())
    }

    /// `total` namespaces in all subsystems together.
    pub fn check_namespaces(&self, total: usize) -> Result<(), ConfigError> {
        if total > self.max_namespaces as usize {
            return Err(ConfigError::Limit(format!(
                "{total} namespaces in all subsystems: more than transport.limits.max_namespaces ({})",
                self.max_namespaces
            )));
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubsystemConfig {
    pub nqn: String,
    /// Serial number (SN); generated from the NQN when absent.
    #[serde(default)]
    pub serial: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    /// First and last CNTLID this subsystem hands out (default 1 and FFEFh);
    /// two targets exporting the subsystem for multipath use disjoint ranges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cntlid_min: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cntlid_max: Option<u16>,
    /// Host NQNs allowed to connect; empty means any host.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Allowed hosts granted read-only access: every controller such a
    /// host creates sees every namespace write protected (Identify
    /// Namespace NSATTR bit 0; commands that would modify a namespace get
    /// Namespace is Write Protected). Each must be in `allowed_hosts`
    /// (docs/management.md, "Read-only hosts").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only_hosts: Vec<String>,
    /// In-band authentication secrets per host (`[[subsystem.host]]`).
    #[serde(default, rename = "host", skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostAuthConfig>,
    /// Refuse hosts that have no `dhchap_key` here (Connect Invalid Host).
    /// A host with only a `tls_key` is not authenticated in band.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_auth: bool,
    #[serde(default, rename = "namespace")]
    pub namespaces: Vec<NamespaceConfig>,
    /// Limits per namespace or host, fair-sharing weights
    /// (`[[subsystem.qos]]`, `crate::qos`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub qos: Vec<crate::qos::QosConfig>,
    /// ANA states per listener and group (`[[subsystem.ana]]`,
    /// `crate::ana`); groups and listeners not listed are optimized.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ana: Vec<crate::ana::AnaConfig>,
}

/// DH-HMAC-CHAP settings of one host (Base 2.0 §8.13.5), named as Linux's
/// nvmet configfs names them (`hosts/<NQN>/dhchap_key` etc.), and its TLS
/// pre-shared key (NVMe/TCP 1.0 §3.6.1, `crate::tls_key`). At least one of
/// `dhchap_key` and `tls_key`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostAuthConfig {
    /// The host NQN.
    pub nqn: String,
    /// The host's secret, `DHHC-1:0X:<base64>:` (`nvme gen-dhchap-key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_key: Option<DhchapKey>,
    /// The controller's secret for bidirectional authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_ctrl_key: Option<DhchapKey>,
    /// Hashes the controller may select, preferred first: "sha256",
    /// "sha384", "sha512" (also "hmac(sha256)" as configfs spells them).
    /// Empty: all, SHA-256 first (as Linux's default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dhchap_hash: Vec<String>,
    /// DH groups, preferred first: "null", "ffdhe2048" … "ffdhe8192".
    /// Empty: all, null first (Linux nvmet's default group).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dhchap_dhgroup: Vec<String>,
    /// The host's configured TLS PSK: `NVMeTLSkey-1:0x:<base64>:` (`nvme
    /// gen-tls-key`, `farflash gen-tls-key`) or the path of a file (mode
    /// 0600) holding it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<crate::tls_key::TlsKey>,
    /// Derivation layouts accepted for `tls_key`, tried in order
    /// (`farflash_psk::Derivation` names; empty: "libnvme-1.10",
    /// "rfc8446"). A version 1 identity picks the one its digest matches,
    /// a version 0 identity the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls_derivation: Vec<String>,
}

impl HostAuthConfig {
    /// A host with neither key, to fill in.
    pub fn new(nqn: impl Into<String>) -> HostAuthConfig {
        HostAuthConfig {
            nqn: nqn.into(),
            dhchap_key: None,
            dhchap_ctrl_key: None,
            dhchap_hash: Vec::new(),
            dhchap_dhgroup: Vec::new(),
            tls_key: None,
            tls_derivation: Vec::new(),
        }
    }

    /// The derivations accepted for `tls_key`, in order.
    pub fn derivations(&self) -> Result<Vec<farflash_psk::Derivation>, String> {
        crate::tls_key::derivations(&self.tls_derivation)
    }

    /// The hashes, preferred first.
    pub fn hashes(&self) -> Result<Vec<HashId>, String> {
        if self.dhchap_hash.is_empty() {
            return Ok(HashId::ALL.to_vec());
        }
        (self.dhchap_hash.iter())
            .map(|h| {
                let name = h.trim().trim_start_matches("hmac(").trim_end_matches(')');
                HashId::ALL
                    .into_iter()
                    .find(|x| x.name().eq_ignore_ascii_case(name))
                    .ok_or_else(|| format!("unknown dhchap_hash {h:?} (sha256, sha384, sha512)"))
            })
            .collect()
    }

    /// The DH groups, preferred first.
    pub fn groups(&self) -> Result<Vec<DhGroup>, String> {
        if self.dhchap_dhgroup.is_empty() {
            return Ok(DhGroup::ALL.to_vec());
        }
        (self.dhchap_dhgroup.iter())
            .map(|g| {
                DhGroup::ALL
                    .into_iter()
                    .find(|x| x.name().eq_ignore_ascii_case(g.trim()))
                    .ok_or_else(|| {
                        format!("unknown dhchap_dhgroup {g:?} (null, ffdhe2048 … ffdhe8192)")
                    })
            })
            .collect()
    }
}

/// A DH-HMAC-CHAP secret in the configuration: parsed when read, printed
/// only redacted (`Debug` shows `Secret(DHHC-1:0X, N bytes)`), compared in
/// constant time. Serializing writes the secret back (the file holds it).
#[derive(Clone, Debug, PartialEq)]
pub struct DhchapKey(pub Secret);

impl std::str::FromStr for DhchapKey {
    type Err = String;
    fn from_str(s: &str) -> Result<DhchapKey, String> {
        // The error names what is wrong, never the text.
        Secret::parse(s.trim())
            .map(DhchapKey)
            .map_err(|e| e.to_string())
    }
}

impl Serialize for DhchapKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.to_dhhc())
    }
}

impl<'de> Deserialize<'de> for DhchapKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<DhchapKey, D::Error> {
        let s = zeroize::Zeroizing::new(String::deserialize(d)?);
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl SubsystemConfig {
    /// A subsystem open to any host, with its serial number and model left
    /// to their defaults.
    pub fn new(nqn: impl Into<String>, namespaces: Vec<NamespaceConfig>) -> SubsystemConfig {
        SubsystemConfig {
            nqn: nqn.into(),
            serial: None,
            model: None,
            cntlid_min: None,
            cntlid_max: None,
            allowed_hosts: vec![],
            read_only_hosts: vec![],
            hosts: vec![],
            require_auth: false,
            qos: Vec::new(),
            ana: Vec::new(),
            namespaces,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Ram,
    File,
    Null,
    /// A Ceph RBD image (the namespace's `rbd` table; docs/rbd.md).
    Rbd,
    /// A volume of a pool (`volume = "POOL/NAME"`; docs/volumes.md).
    Volume,
}

/// Where an RBD namespace's image is: `rbd = { pool = "rbd", image = "vol1" }`
/// plus, optionally, the cluster's ceph.conf, the client id and its keyring.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RbdConfig {
    pub pool: String,
    pub image: String,
    /// ceph.conf; Ceph's default search (`$CEPH_CONF`, /etc/ceph/ceph.conf) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conf: Option<PathBuf>,
    /// Client id without `client.` (default "admin").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Keyring; the ceph.conf's `keyring` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyring: Option<PathBuf>,
}

impl std::str::FromStr for RbdConfig {
    type Err = String;
    /// `POOL/IMAGE` (the `--rbd` flag).
    fn from_str(s: &str) -> Result<RbdConfig, String> {
        match s.split_once('/') {
            Some((pool, image))
                if !pool.is_empty() && !image.is_empty() && !image.contains('/') =>
            {
                Ok(RbdConfig {
                    pool: pool.to_owned(),
                    image: image.to_owned(),
                    conf: None,
                    id: None,
                    keyring: None,
                })
            }
            _ => Err(format!("{s:?} is not POOL/IMAGE")),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceConfig {
    /// NSID; the next free one when absent.
    #[serde(default)]
    pub nsid: Option<u32>,
    pub backend: BackendKind,
    /// File or block device, for `backend = "file"`.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Size for RAM/null namespaces, or to create/extend a file: "1G", "512M", 4096.
    #[serde(default)]
    pub size: Option<Size>,
    /// Logical block size: 512 or 4096.
    #[serde(default)]
    pub block_size: Option<u32>,
    /// Namespace UUID; derived from the subsystem NQN and NSID when absent.
    #[serde(default)]
    pub uuid: Option<String>,
    /// Namespace NGUID as 32 hex digits; derived like the UUID when absent.
    #[serde(default)]
    pub nguid: Option<String>,
    /// ANA group (Base §8.20), 1..=128; 1 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anagrpid: Option<u32>,
    /// File that keeps the namespace's reservations when a host sets
    /// Persist Through Power Loss (docs/ha.md); without it PTPL is not
    /// supported on this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ptpl_file: Option<PathBuf>,
    /// The image of a `backend = "rbd"` namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rbd: Option<RbdConfig>,
    /// The volume of a `backend = "volume"` namespace, `POOL/NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    /// RAM namespaces: commit (fault in) the whole memory at start instead
    /// of as written, so that first writes find their pages present (as
    /// SPDK's malloc bdev, zeroed at creation); benchmarks ask for it
    /// (`serve --ram-commit`). Skipped, with a warning, when the namespace
    /// exceeds half of MemAvailable.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub commit: bool,
}

impl NamespaceConfig {
    /// The fields its backend needs and no field of another backend; the
    /// error names the field.
    pub fn validate_backend(&self) -> Result<(), String> {
        let err = |m: &str| Err(m.to_owned());
        match self.backend {
            BackendKind::File if self.path.is_none() => err("file namespace needs a path"),
            BackendKind::Ram | BackendKind::Null if self.size.is_none() => {
                err("ram/null namespace needs a size")
            }
            BackendKind::Rbd if self.rbd.is_none() => {
                err("rbd namespace needs rbd = { pool = ..., image = ... }")
            }
            BackendKind::Rbd if self.size.is_some() || self.path.is_some() => {
                err("an rbd namespace takes its size from the image (no size or path)")
            }
            BackendKind::Volume => match &self.volume {
                None => err("a volume namespace needs volume = \"POOL/NAME\""),
                Some(_) if self.size.is_some() || self.path.is_some() => {
                    err("a volume namespace takes its size from the volume (no size or path)")
                }
                Some(v) => split_volume(v).map(|_| ()),
            },
            _ if self.volume.is_some() => err("volume = \"...\" needs backend = \"volume\""),
            _ if self.rbd.is_some() && self.backend != BackendKind::Rbd => {
                err("rbd = {...} needs backend = \"rbd\"")
            }
            _ => Ok(()),
        }
    }

    /// A namespace of `size` bytes on a `backend` that needs no path (RAM,
    /// null), with NSID, block size, UUID and NGUID left to their defaults.
    pub fn sized(backend: BackendKind, size: u64) -> NamespaceConfig {
        NamespaceConfig {
            nsid: None,
            backend,
            path: None,
            size: Some(Size(size)),
            block_size: None,
            uuid: None,
            nguid: None,
            anagrpid: None,
            ptpl_file: None,
            rbd: None,
            volume: None,
            commit: false,
        }
    }
}

impl Default for Config {
    /// The embedded default: one subsystem with one 1 GiB RAM namespace on 127.0.0.1:4420.
    fn default() -> Self {
        Config {
            listen: default_listeners(),
            transport: TransportConfig::default(),
            subsystems: vec![SubsystemConfig::new(
                DEFAULT_NQN,
                vec![NamespaceConfig::sized(BackendKind::Ram, 1 << 30)],
            )],
            pools: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config: {0}")]
    Invalid(String),
    /// Over a limit of `[transport]` (the message names it).
    #[error("config: {0}")]
    Limit(String),
    /// The message and position only: TOML's own text quotes the line,
    /// which may hold a secret.
    #[error("config file {path}: line {line}: {message}")]
    Parse {
        path: String,
        line: usize,
        message: String,
    },
    #[error("config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
}

impl Config {
    pub fn from_toml(text: &str, path: &str) -> Result<Config, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            line: e
                .span()
                .and_then(|s| text.get(..s.start))
                .map(|t| t.matches('\n').count() + 1)
                .unwrap_or(0),
            message: e.message().to_owned(),
        })?;
        c.validate()?;
        Ok(c)
    }

    /// Checks what the types cannot: limits, duplicates, required fields.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        let t = &self.transport;
        if self.listen.is_empty() {
            return bad("at least one listener is needed".into());
        }
        for l in &self.listen {
            crate::listen::split_listen(l).map_err(ConfigError::Invalid)?;
        }
        t.management.validate().map_err(ConfigError::Invalid)?;
        if t.data.in_capsule_data_size > 1 << 20 || !t.data.in_capsule_data_size.is_multiple_of(16)
        {
            return bad("in_capsule_data_size must be a multiple of 16, at most 1 MiB".into());
        }
        if !(2..=1024).contains(&t.max_queue_depth) {
            return bad("max_queue_depth must be within 2..=1024".into());
        }
        if !(1..=1024).contains(&t.max_io_queues) {
            return bad("max_io_queues must be within 1..=1024".into());
        }
        if !t.max_io_size.is_power_of_two() || !(4096..=(8 << 20)).contains(&t.max_io_size) {
            return bad("max_io_size must be a power of two within 4K..=8M".into());
        }
        if t.data.max_h2c_data < 4096
            || !t.data.max_h2c_data.is_multiple_of(4)
            || t.data.max_c2h_data < 4096
        {
            return bad(
                "max_h2c_data must be a multiple of 4 and ≥ 4096; max_c2h_data ≥ 4096".into(),
            );
        }
        parse_cpu_list(&t.cpus_allowed).map_err(ConfigError::Invalid)?;
        if t.max_queue_buffer < t.max_io_size {
            return bad("max_queue_buffer must be at least max_io_size".into());
        }
        if t.max_connections == 0 {
            return bad("max_connections must be at least 1".into());
        }
        if t.fair_share_kib > 1 << 20 {
            return bad(
                "fair_share_kib must be at most 1048576 (1 GiB; 0 turns fair sharing off)".into(),
            );
        }
        if t.poll_idle_us > 1_000_000 {
            return bad("poll_idle_us must be at most 1000000".into());
        }
        for (name, v) in [
            ("tls_handshake_timeout_ms", t.tls.tls_handshake_timeout_ms),
            ("tls_record_timeout_ms", t.tls.tls_record_timeout_ms),
        ] {
            if !(100..=600_000).contains(&v) {
                return bad(format!("{name} must be within 100..=600000"));
            }
        }
        if t.keep_alive_granularity_ms < 100 || t.keep_alive_granularity_ms > 6_553_500 {
            return bad("keep_alive_granularity_ms must be within 100..=6553500".into());
        }
        if !(1..=1 << 20).contains(&t.limits.max_subsystems)
            || !(1..=1 << 20).contains(&t.limits.max_namespaces_per_subsystem)
            || !(1..=1 << 24).contains(&t.limits.max_namespaces)
        {
            return bad("limits.max_subsystems and limits.max_namespaces_per_subsystem must be within 1..=1048576, max_namespaces within 1..=16777216".into());
        }
        // No subsystem is a target serving only discovery, to be filled
        // through the management API (a CSI controller's start), as nvmet's
        // configfs and SPDK's nvmf_tgt start; and what save_config writes
        // once the last subsystem is deleted.
        let mut nqns = std::collections::HashSet::new();
        for s in &self.subsystems {
            if !nqns.insert(&s.nqn) {
                return bad(format!("subsystem {} is listed twice", s.nqn));
            }
            s.validate()?;
        }
        t.limits.check_counts(&self.subsystems)?;
        self.validate_volumes()
    }

    /// Pools are named once and valid; each volume namespace names a
    /// listed pool and no volume is exported twice.
    fn validate_volumes(&self) -> Result<(), ConfigError> {
        let mut pools = std::collections::HashSet::new();
        for p in &self.pools {
            p.validate().map_err(ConfigError::Invalid)?;
            if !pools.insert(p.name.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "pool {} is listed twice",
                    p.name
                )));
            }
        }
        let mut exported = std::collections::HashSet::new();
        for s in &self.subsystems {
            for v in s.namespaces.iter().filter_map(|n| n.volume.as_deref()) {
                let (pool, _) = split_volume(v).map_err(ConfigError::Invalid)?;
                if !pools.contains(pool) {
                    return Err(ConfigError::Invalid(format!(
                        "{}: volume {v}: no pool {pool:?} (add a [[pool]] entry)",
                        s.nqn
                    )));
                }
                if !exported.insert(v) {
                    return Err(ConfigError::Invalid(format!(
                        "{}: volume {v} is exported twice",
                        s.nqn
                    )));
                }
            }
        }
        Ok(())
    }
}

impl SubsystemConfig {
    /// `read_only_hosts`: each listed once and allowed by name (a read-only
    /// grant is a property of an allowed host; on a subsystem open to any
    /// host there is no grant to qualify).
    fn validate_read_only_hosts(&self) -> Result<(), ConfigError> {
        let mut seen = std::collections::HashSet::new();
        for h in &self.read_only_hosts {
            if !seen.insert(h) {
                return Err(ConfigError::Invalid(format!(
                    "{}: read_only_hosts: {h} is listed twice",
                    self.nqn
                )));
            }
            if !self.allowed_hosts.contains(h) {
                return Err(ConfigError::Invalid(format!(
                    "{}: read_only_hosts: {h} is not in allowed_hosts",
                    self.nqn
                )));
            }
        }
        Ok(())
    }

    /// Checks what the types cannot, within one subsystem: its NQN,
    /// CNTLID range, hosts, QoS and ANA entries, NSIDs and namespaces.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.nqn.is_empty() || self.nqn.len() > 223 || !self.nqn.starts_with("nqn.") {
            return bad(format!(
                "subsystem NQN {:?} must start with \"nqn.\" and be at most 223 bytes",
                self.nqn
            ));
        }
        if self.nqn == farflash_wire::DISCOVERY_NQN {
            return bad("the discovery NQN is served automatically".into());
        }
        crate::cntlid::CntlidRange::from_config(self.cntlid_min, self.cntlid_max)
            .map_err(|m| ConfigError::Invalid(format!("{}: {m}", self.nqn)))?;
        self.validate_read_only_hosts()?;
        let mut hosts = std::collections::HashSet::new();
        for h in &self.hosts {
            if !hosts.insert(&h.nqn) {
                return bad(format!("{}: host {} is listed twice", self.nqn, h.nqn));
            }
            if !self.allowed_hosts.is_empty() && !self.allowed_hosts.contains(&h.nqn) {
                return bad(format!(
                    "{}: host {} has a key but is not in allowed_hosts",
                    self.nqn, h.nqn
                ));
            }
            if h.dhchap_key.is_none() && h.tls_key.is_none() {
                return bad(format!(
                    "{}: host {} needs a dhchap_key or a tls_key",
                    self.nqn, h.nqn
                ));
            }
            if h.dhchap_key.is_none()
                && (h.dhchap_ctrl_key.is_some()
                    || !h.dhchap_hash.is_empty()
                    || !h.dhchap_dhgroup.is_empty())
            {
                return bad(format!(
                    "{}: host {}: dhchap_ctrl_key, dhchap_hash and dhchap_dhgroup need a dhchap_key",
                    self.nqn, h.nqn
                ));
            }
            if h.tls_key.is_none() && !h.tls_derivation.is_empty() {
                return bad(format!(
                    "{}: host {}: tls_derivation needs a tls_key",
                    self.nqn, h.nqn
                ));
            }
            h.derivations()
                .map_err(|e| ConfigError::Invalid(format!("{}: host {}: {e}", self.nqn, h.nqn)))?;
            let hashes = h.hashes().map_err(ConfigError::Invalid)?;
            let groups = h.groups().map_err(ConfigError::Invalid)?;
            if hashes.is_empty() || groups.is_empty() {
                return bad(format!("{}: host {}: no hash or DH group", self.nqn, h.nqn));
            }
        }
        let mut limited = std::collections::HashSet::new();
        for q in &self.qos {
            q.validate()
                .map_err(|e| ConfigError::Invalid(format!("{}: qos: {e}", self.nqn)))?;
            if !limited.insert(q.kind()) {
                return bad(format!("{}: qos: {:?} is listed twice", self.nqn, q.kind()));
            }
        }
        crate::ana::validate(&self.ana)
            .map_err(|e| ConfigError::Invalid(format!("{}: {e}", self.nqn)))?;
        let mut ids = std::collections::HashSet::new();
        let mut next = 1u32;
        for n in &self.namespaces {
            let id = n.nsid.unwrap_or(next);
            if id == 0 || id == u32::MAX {
                return bad(format!("{}: NSID {id} is not valid", self.nqn));
            }
            if !ids.insert(id) {
                return bad(format!("{}: NSID {id} is used twice", self.nqn));
            }
            next = next.max(id + 1);
            n.validate_backend()
                .map_err(|e| ConfigError::Invalid(format!("{}: {e}", self.nqn)))?;
            if let Some(g) = n.anagrpid {
                crate::ana::check_anagrpid(g).map_err(|e| {
                    ConfigError::Invalid(format!("{}: namespace {id}: {e}", self.nqn))
                })?;
            }
            if let Some(bs) = n.block_size {
                if bs != 512 && bs != 4096 {
                    return bad(format!("{}: block_size must be 512 or 4096", self.nqn));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_management_endpoint_is_off_or_whole() {
        // A subsystem, so that only the endpoint is what is checked.
        const SUB: &str = "[[subsystem]]\nnqn = 'nqn.t:a'\n";
        let full = "[[subsystem]]\nnqn = 'nqn.t:a'\n[transport.management]\nlisten = '127.0.0.1:4430'\ncert = '/etc/farflash/mgmt.crt'\nkey = '/etc/farflash/mgmt.key'\nclient_ca = '/etc/farflash/ca.crt'\n";
        let c = super::Config::from_toml(full, "t").unwrap();
        let m = &c.transport.management;
        assert_eq!(m.listen.as_deref(), Some("127.0.0.1:4430"));
        assert_eq!(
            m.client_ca.as_deref(),
            Some(std::path::Path::new("/etc/farflash/ca.crt"))
        );
        // It survives a round trip; an endpoint that is off is not written.
        let text = toml::to_string(&c).unwrap();
        assert_eq!(super::Config::from_toml(&text, "t").unwrap(), c);
        let off = toml::to_string(&super::Config::default()).unwrap();
        assert!(!off.contains("management"), "{off}");
        // Never unauthenticated: a missing file is an error naming it.
        let e = super::Config::from_toml(
            &full.replace("client_ca = '/etc/farflash/ca.crt'\n", ""),
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("transport.management.client_ca"), "{e}");
        let e =
            super::Config::from_toml(&format!("{SUB}[transport.management]\ncert = 'c'\n"), "t")
                .unwrap_err()
                .to_string();
        assert!(e.contains("transport.management.listen"), "{e}");
        let e = super::Config::from_toml(&format!("{SUB}[transport.management]\nport = 1\n"), "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("port"), "{e}");
    }

    use super::*;

    #[test]
    fn a_target_with_no_subsystem_is_discovery_only_and_round_trips() {
        // What a CSI deployment starts from, and what save_config writes
        // after the last subsystem is deleted.
        let text =
            "listen = ['127.0.0.1:4420']\n[[pool]]\nname = 'tank'\ndevices = ['/srv/tank.img']\n";
        let c = Config::from_toml(text, "t").unwrap();
        assert!(c.subsystems.is_empty());
        let saved = toml::to_string(&c).unwrap();
        assert_eq!(Config::from_toml(&saved, "t").unwrap(), c, "{saved}");
        // A volume namespace still has to name a pool that exists.
        let e = Config::from_toml(
            &format!("{text}[[subsystem]]\nnqn = 'nqn.t:a'\n[[subsystem.namespace]]\nbackend = 'volume'\nvolume = 'other/v'\n"),
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("other"), "{e}");
    }

    #[test]
    fn sizes() {
        assert_eq!("512M".parse::<Size>(), Ok(Size(512 << 20)));
        assert_eq!("1G".parse::<Size>(), Ok(Size(1 << 30)));
        assert_eq!("1GiB".parse::<Size>(), Ok(Size(1 << 30)));
        assert_eq!("4096".parse::<Size>(), Ok(Size(4096)));
        assert_eq!("4k".parse::<Size>(), Ok(Size(4096)));
        assert!("12X".parse::<Size>().is_err());
        assert!("".parse::<Size>().is_err());
        assert!("99999999999T".parse::<Size>().is_err());
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6"), Ok(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_cpu_list("1"), Ok(vec![1]));
        assert_eq!(parse_cpu_list(""), Ok(vec![]));
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
        assert_eq!("always".parse::<PollMode>(), Ok(PollMode::Always));
        assert_eq!("hybrid".parse::<PollMode>(), Ok(PollMode::Hybrid));
    }

    #[test]
    fn tls_listeners_and_host_keys() {
        use crate::listen::{listen_secure, SecureChannel};
        const KEY: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
        let sub = |host: &str| {
            format!("\n[[subsystem]]\nnqn = 'nqn.t:a'\n[[subsystem.host]]\nnqn = 'nqn.h'\n{host}\n[[subsystem.namespace]]\nbackend = 'null'\nsize = '1M'\n")
        };
        let from = |l: &str, host: &str| Config::from_toml(&format!("{l}{}", sub(host)), "t");
        let c = from(
            "listen = ['tls:127.0.0.1:1', { address = '127.0.0.1:2', secure_channel = 'optional' }, \
             { address = '127.0.0.1:3', secure_channel = 'none' }, 'tls-optional:[::1]:4']",
            &format!("tls_key = '{KEY}'"),
        )
        .unwrap();
        let sc: Vec<SecureChannel> = c.listen.iter().map(|l| listen_secure(l)).collect();
        assert_eq!(
            sc,
            [
                SecureChannel::Required,
                SecureChannel::Optional,
                SecureChannel::None,
                SecureChannel::Optional
            ]
        );
        let h = &c.subsystems[0].hosts[0];
        assert!(h.dhchap_key.is_none() && h.tls_key.is_some());
        assert_eq!(
            h.derivations().unwrap(),
            crate::tls_key::DEFAULT_DERIVATIONS.to_vec()
        );
        // The key survives a round trip; Debug shows none of it.
        let text = toml::to_string(&c).unwrap();
        assert!(text.contains(KEY), "{text}");
        assert!(!format!("{c:?}").contains("VRLbtn"));
        assert_eq!(Config::from_toml(&text, "t").unwrap(), c);
        let err = |l: &str, host: &str| from(l, host).unwrap_err().to_string();
        let e = err(
            "listen = [{ address = '127.0.0.1:1', transport = 'rdma', secure_channel = 'required' }]",
            &format!("tls_key = '{KEY}'"),
        );
        assert!(e.contains("secure_channel"), "{e}");
        let e = err(
            "listen = [{ address = '127.0.0.1:1', secure_channel = 'maybe' }]",
            &format!("tls_key = '{KEY}'"),
        );
        assert!(e.contains("\"maybe\""), "{e}");
        let e = err("listen = ['127.0.0.1:1']", "");
        assert!(e.contains("needs a dhchap_key or a tls_key"), "{e}");
        let e = err(
            "listen = ['127.0.0.1:1']",
            &format!("tls_key = '{KEY}'\ntls_derivation = ['rfc9999']"),
        );
        assert!(e.contains("rfc9999") && e.contains("nqn.h"), "{e}");
        let dh = farflash_auth::Secret::new(&[5u8; 32], None)
            .unwrap()
            .to_dhhc();
        let e = err(
            "listen = ['127.0.0.1:1']",
            &format!(
                "tls_derivation = ['rfc8446']\ndhchap_key = '{}'",
                dh.as_str()
            ),
        );
        assert!(e.contains("tls_derivation needs a tls_key"), "{e}");
        // A bad key: the field named, the key not repeated.
        let bad = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrY:";
        let e = err("listen = ['127.0.0.1:1']", &format!("tls_key = '{bad}'"));
        assert!(e.contains("tls_key") && !e.contains("VRLbtn"), "{e}");
    }

    #[test]
    fn listeners_carry_a_transport() {
        const SUB: &str = "\n[[subsystem]]\nnqn = 'nqn.t:a'\n";
        let from = |t: &str| Config::from_toml(&format!("{t}{SUB}"), "t");
        let c = from(
            "listen = ['10.0.2.15:4420', 'rdma:10.0.2.15:4420', \
             { address = '10.0.2.15:4421', transport = 'rdma' }, { address = '[::1]:4420' }]",
        )
        .unwrap();
        assert_eq!(
            c.listen,
            [
                "10.0.2.15:4420",
                "rdma:10.0.2.15:4420",
                "rdma:10.0.2.15:4421",
                "[::1]:4420"
            ]
        );
        // An unknown transport names the field and the value, in either form.
        let e = from("listen = [{ address = '10.0.2.15:4420', transport = 'roce' }]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("transport \"roce\""), "{e}");
        assert!(e.contains("listen"), "{e}");
        let e = from("listen = ['iwarp:10.0.2.15:4420']")
            .unwrap_err()
            .to_string();
        assert!(e.contains("transport \"iwarp\""), "{e}");
        let e = from("listen = [{ transport = 'rdma' }]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("address"), "{e}");
        let e = from("listen = [{ address = 'a:1', port = 3 }]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field \"port\""), "{e}");
    }

    #[test]
    fn default_is_valid() {
        Config::default().validate().unwrap();
    }

    #[test]
    fn example_file_parses() {
        let text = include_str!("../../../docs/farflash.example.toml");
        let c = Config::from_toml(text, "example").unwrap();
        assert_eq!(c.subsystems.len(), 2);
        assert_eq!(c.subsystems[0].namespaces[0].size, Some(Size(1 << 30)));
    }

    #[test]
    fn host_keys_parse_and_never_print() {
        let key = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:";
        let text = format!(
            "[[subsystem]]\nnqn='nqn.a'\nrequire_auth=true\n[[subsystem.host]]\nnqn='nqn.h'\ndhchap_key='{key}'\ndhchap_hash=['hmac(sha512)']\ndhchap_dhgroup=['ffdhe8192','null']\n[[subsystem.namespace]]\nbackend='ram'\nsize='1M'\n"
        );
        let c = Config::from_toml(&text, "t").unwrap();
        let h = &c.subsystems[0].hosts[0];
        assert_eq!(h.hashes().unwrap(), vec![HashId::Sha512]);
        assert_eq!(h.groups().unwrap(), vec![DhGroup::Ffdhe8192, DhGroup::Null]);
        assert!(c.subsystems[0].require_auth);
        assert!(
            !format!("{c:?}").contains("ia6zGod"),
            "Debug shows no secret"
        );
        // A bad key's error does not repeat it; unknown names are refused.
        let bad = text.replace("ia6zGodOr4", "ia6zGodOr5");
        let e = Config::from_toml(&bad, "t").unwrap_err().to_string();
        assert!(e.contains("CRC") && !e.contains("zGodOr"), "{e}");
        assert!(e.contains("line 6"), "{e}");
        assert!(Config::from_toml(&text.replace("ffdhe8192", "ffdhe1"), "t").is_err());
        // A keyed host outside allowed_hosts could never connect.
        let outside = text.replace("require_auth=true", "allowed_hosts=['nqn.other']");
        assert!(Config::from_toml(&outside, "t").is_err());
    }

    #[test]
    fn read_only_hosts_are_allowed_hosts_listed_once_and_round_trip() {
        let text = "[[subsystem]]\nnqn='nqn.a'\nallowed_hosts=['nqn.h1','nqn.h2']\nread_only_hosts=['nqn.h2']\n[[subsystem.namespace]]\nbackend='ram'\nsize='1M'\n";
        let c = Config::from_toml(text, "t").unwrap();
        assert_eq!(c.subsystems[0].read_only_hosts, ["nqn.h2"]);
        let back = Config::from_toml(&toml::to_string(&c).unwrap(), "t").unwrap();
        assert_eq!(back.subsystems[0].read_only_hosts, ["nqn.h2"]);
        // None: the field is not written.
        let plain = text.replace("read_only_hosts=['nqn.h2']\n", "");
        let c = Config::from_toml(&plain, "t").unwrap();
        assert!(!toml::to_string(&c).unwrap().contains("read_only_hosts"));
        // A host not allowed, or listed twice, is refused with the field named.
        for bad in [
            text.replace("read_only_hosts=['nqn.h2']", "read_only_hosts=['nqn.h3']"),
            text.replace("allowed_hosts=['nqn.h1','nqn.h2']\n", ""),
            text.replace(
                "read_only_hosts=['nqn.h2']",
                "read_only_hosts=['nqn.h2','nqn.h2']",
            ),
        ] {
            let e = Config::from_toml(&bad, "t").unwrap_err().to_string();
            assert!(e.contains("read_only_hosts"), "{e}");
        }
        assert!(Config::from_toml(&text.replace("['nqn.h2']", "'nqn.h2'"), "t").is_err());
    }

    #[test]
    fn rejects_duplicates_and_unknown_fields() {
        let dup = "[[subsystem]]\nnqn='nqn.a'\n[[subsystem.namespace]]\nnsid=1\nbackend='ram'\nsize='1M'\n[[subsystem.namespace]]\nnsid=1\nbackend='null'\nsize=4096\n";
        assert!(Config::from_toml(dup, "t").is_err());
        assert!(Config::from_toml("bogus = 1", "t").is_err());
        let nofile = "[[subsystem]]\nnqn='nqn.a'\n[[subsystem.namespace]]\nbackend='file'\n";
        assert!(Config::from_toml(nofile, "t").is_err());
    }

    #[test]
    fn pools_and_volume_namespaces_are_checked_naming_the_field() {
        let sub = "[[subsystem]]\nnqn = 'nqn.t:a'\n[[subsystem.namespace]]\nbackend = 'ram'\nsize = '1M'\n";
        let pool = "[[pool]]\nname = 'tank'\ndevices = ['/d/0', '/d/1']\n";
        let vol = |v: &str| format!("[[subsystem.namespace]]\nbackend = 'volume'\n{v}\n");
        let c =
            Config::from_toml(&format!("{sub}{}{pool}", vol("volume = 'tank/db'")), "t").unwrap();
        assert_eq!(c.pools[0].backend, "local");
        assert_eq!(c.pools[0].devices.len(), 2);
        let text = toml::to_string(&c).unwrap();
        assert_eq!(Config::from_toml(&text, "t").unwrap(), c, "{text}");
        for (bad, named) in [
            (format!("{sub}{}{pool}", vol("")), "volume = \"POOL/NAME\""),
            (format!("{sub}{}{pool}", vol("volume = 'tank'")), "\"tank\""),
            (format!("{sub}{}{pool}", vol("volume = 'tank/a/b'")), "tank/a/b"),
            (format!("{sub}{}{pool}", vol("volume = 'tank/db'\nsize = '1G'")), "size"),
            (format!("{sub}{}", vol("volume = 'tank/db'")), "no pool \"tank\""),
            (format!("{sub}{}{}{pool}", vol("volume = 'tank/db'"), vol("volume = 'tank/db'")), "exported twice"),
            (format!("{sub}{pool}{pool}"), "pool tank is listed twice"),
            (format!("{sub}[[pool]]\nname = 'a/b'\ndevices = ['/d']\n"), "a/b"),
            (format!("{sub}[[pool]]\nname = 'p'\n"), "needs devices"),
            (format!("{sub}[[pool]]\nname = 'p'\nbackend = 'rbd'\n"), "rbd = { pool"),
            (format!("{sub}[[pool]]\nname = 'p'\nbackend = 'zfs'\ndevices = ['/d']\n"), "zfs"),
            (format!("{sub}[[subsystem.namespace]]\nbackend = 'ram'\nsize = '1M'\nvolume = 'tank/db'\n{pool}"), "needs backend = \"volume\""),
        ] {
            let e = Config::from_toml(&bad, "t").unwrap_err().to_string();
            assert!(e.contains(named), "{bad}\n=> {e}");
        }
    }

    #[test]
    fn rbd_namespaces_need_their_table_and_no_size() {
        let ns = "[[subsystem]]\nnqn='nqn.t:r'\n[[subsystem.namespace]]\n";
        let ok = format!("{ns}backend='rbd'\nrbd={{pool='p',image='i',id='gw'}}\n");
        let c = Config::from_toml(&ok, "t").unwrap();
        let r = c.subsystems[0].namespaces[0].rbd.clone().unwrap();
        assert_eq!((r.pool.as_str(), r.image.as_str()), ("p", "i"));
        assert_eq!(r.id.as_deref(), Some("gw"));
        for (bad, needle) in [
            (format!("{ns}backend='rbd'\n"), "needs rbd"),
            (
                format!("{ns}backend='rbd'\nsize='1G'\nrbd={{pool='p',image='i'}}\n"),
                "takes its size from the image",
            ),
            (
                format!("{ns}backend='ram'\nsize='1G'\nrbd={{pool='p',image='i'}}\n"),
                "needs backend",
            ),
            (
                format!("{ns}backend='rbd'\nrbd={{pool='p',image='i',secret='x'}}\n"),
                "secret",
            ),
        ] {
            let e = Config::from_toml(&bad, "t").unwrap_err().to_string();
            assert!(e.contains(needle), "{bad}: {e}");
        }
        assert_eq!(
            "rbd/vol".parse::<RbdConfig>().map(|r| r.image),
            Ok("vol".to_owned())
        );
        assert!("rbd".parse::<RbdConfig>().is_err());
    }

    #[test]
    fn flattened_transport_groups_keep_the_keys_flat_and_unknown_keys_refused() {
        // Issue #41: `[transport]` is split into small structs; the file
        // format is unchanged.
        let t: TransportConfig = toml::from_str(
            "in_capsule_data_size = 4096\nmax_c2h_data = 8192\ntls_record_timeout_ms = 5\nthreads = 3\n",
        )
        .expect("flat keys");
        assert_eq!(t.data.in_capsule_data_size, 4096);
        assert_eq!(t.data.max_c2h_data, 8192);
        assert_eq!(t.data.max_h2c_data, DataSizes::default().max_h2c_data);
        assert_eq!(t.tls.tls_record_timeout_ms, 5);
        assert_eq!(t.tls.tls_handshake_timeout_ms, 10_000);
        assert_eq!(t.threads, 3);
        let e =
            toml::from_str::<TransportConfig>("max_c2h_dta = 8192\n").expect_err("a misspelt key");
        assert!(e.to_string().contains("max_c2h_dta"), "{e}");
        let back = toml::to_string(&t).expect("serialize");
        assert!(back.contains("max_c2h_data = 8192"), "{back}");
        assert_eq!(
            toml::from_str::<TransportConfig>(&back).expect("round trip"),
            t
        );
    }
}
