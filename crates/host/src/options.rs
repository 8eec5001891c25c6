//! What a host needs to reach a subsystem.

use crate::error::Result;
use crate::queue::QueueConfig;
use crate::transport::HostTransport;
use std::time::Duration;

/// Connection parameters, with nvme-cli's defaults.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// `host:port` (IPv4 or `[v6]:port`).
    pub addr: String,
    /// Subsystem NQN (the discovery NQN for a discovery controller).
    pub subnqn: String,
    pub hostnqn: String,
    /// 128-bit Host Identifier (Connect data HOSTID).
    pub hostid: [u8; 16],
    /// Header / data digests (ICReq DGST).
    pub hdr_digest: bool,
    pub data_digest: bool,
    /// Keep Alive Timeout sent in the admin Connect, in ms (0 = none).
    pub kato_ms: u32,
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// Bound on every wait for a command's completion.
    pub command_timeout: Duration,
    /// Admin queue entries (Connect SQSIZE + 1); Linux uses 32.
    pub admin_depth: u16,
    /// Ask for SQ flow control to be disabled on I/O queues (Connect CATTR
    /// bit 2, nvme-cli's `--disable-sqflow`). This host never reads SQHD, so
    /// it loses nothing, and the target may then end a successful read with
    /// a SUCCESS C2HData instead of a CapsuleResp (TCP §3.6.2.9).
    pub disable_sqflow: bool,
    /// DH-HMAC-CHAP secret (`nvme connect --dhchap-secret`): used when a
    /// Connect response asks for authentication (Base §8.13).
    pub dhchap_secret: Option<farflash_auth::Secret>,
    /// The controller's secret (`--dhchap-ctrl-secret`): the controller
    /// must prove it too (bidirectional), else the connect fails.
    pub dhchap_ctrl_secret: Option<farflash_auth::Secret>,
    /// The transport binding that opens the queues: `None` is NVMe/TCP
    /// (built in); RDMA is `farflash_rdma_verbs::RdmaConnector`.
    pub connector: Option<std::sync::Arc<dyn Connector>>,
    /// NVMe/TCP over TLS 1.3 with a PSK (`--tls`, TCP §3.6.1): each queue's
    /// handshake runs before its ICReq.
    pub tls: Option<std::sync::Arc<crate::tls::TlsOptions>>,
}

/// Linux's default KATO for I/O controllers (`NVME_DEFAULT_KATO`, 5 s).
pub const DEFAULT_KATO_MS: u32 = 5000;

impl ConnectOptions {
    pub fn new(addr: impl Into<String>, subnqn: impl Into<String>) -> ConnectOptions {
        let hostid = host_id();
        ConnectOptions {
            addr: addr.into(),
            subnqn: subnqn.into(),
            hostnqn: default_hostnqn(&hostid),
            hostid,
            hdr_digest: false,
            data_digest: false,
            kato_ms: DEFAULT_KATO_MS,
            connect_timeout: Duration::from_secs(5),
            command_timeout: Duration::from_secs(30),
            admin_depth: 32,
            disable_sqflow: true,
            dhchap_secret: None,
            dhchap_ctrl_secret: None,
            connector: None,
            tls: None,
        }
    }

    /// The transport's name as nvme-cli spells it (`tcp`, `rdma`).
    pub fn transport_name(&self) -> &'static str {
        self.connector.as_ref().map_or("tcp", |c| c.name())
    }

    /// What a connection goes to, for messages: `NQN at ADDR (tcp)`, or
    /// `the discovery controller at ADDR (tcp)`.
    pub fn describe(&self) -> String {
        let (addr, t) = (&self.addr, self.transport_name());
        if self.is_discovery() {
            format!("the discovery controller at {addr} ({t})")
        } else {
            format!("{} at {addr} ({t})", self.subnqn)
        }
    }

    /// Whether this targets the well-known discovery subsystem.
    pub fn is_discovery(&self) -> bool {
        self.subnqn == farflash_wire::DISCOVERY_NQN
    }
}

fn read_trimmed(path: &str) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty() && s.len() < 224).then(|| s.to_owned())
}

/// The host NQN nvme-cli would use (/etc/nvme/hostnqn), else a UUID NQN
/// derived from the host identifier (Base §4.5 "NVMe Qualified Names").
pub fn default_hostnqn(hostid: &[u8; 16]) -> String {
    read_trimmed("/etc/nvme/hostnqn")
        .unwrap_or_else(|| format!("nqn.2014-08.org.nvmexpress:uuid:{}", uuid_string(hostid)))
}

/// /etc/nvme/hostid when present, else 16 random bytes (a v4 UUID).
pub fn host_id() -> [u8; 16] {
    if let Some(b) = read_trimmed("/etc/nvme/hostid").and_then(|s| parse_uuid(&s)) {
        return b;
    }
    let mut b = [0u8; 16];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_ok();
    if !ok {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        b = (t ^ (std::process::id() as u128) << 64).to_le_bytes();
    }
    b[6] = (b[6] & 0x0F) | 0x40;
    b[8] = (b[8] & 0x3F) | 0x80;
    b
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn uuid_string(b: &[u8; 16]) -> String {
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

pub fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut b = [0u8; 16];
    for (i, x) in b.iter_mut().enumerate() {
        *x = u8::from_str_radix(hex.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(b)
}

/// Opens queue pairs of one transport binding (e.g. RDMA). Unwind safe,
/// like the rest of [`ConnectOptions`], so options can cross
/// `catch_unwind`.
pub trait Connector: Send + Sync + std::panic::RefUnwindSafe + std::fmt::Debug {
    /// The transport's name as nvme-cli spells it (`-t rdma`).
    fn name(&self) -> &'static str;
    /// Connects queue `qid` to `opts.addr` with the slots of `cfg`; the
    /// Fabrics Connect command is sent afterwards by the caller.
    fn open(
        &self,
        opts: &ConnectOptions,
        qid: u16,
        cfg: QueueConfig,
    ) -> Result<Box<dyn HostTransport>>;
}

impl ConnectOptions {
    /// Opens queue `qid` with the transport these options name (NVMe/TCP
    /// by default).
    pub fn open_queue(&self, qid: u16, cfg: QueueConfig) -> Result<Box<dyn HostTransport>> {
        match &self.connector {
            Some(c) => c.open(self, qid, cfg),
            None => {
                let tls = match &self.tls {
                    Some(t) => Some(t.session(&self.hostnqn, &self.subnqn)?),
                    None => None,
                };
                Ok(Box::new(crate::socket::Conn::open(
                    &self.addr,
                    cfg,
                    self.connect_timeout,
                    self.command_timeout,
                    tls,
                )?))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_round_trip() {
        let id = host_id();
        let s = uuid_string(&id);
        assert_eq!(s.len(), 36);
        assert_eq!(parse_uuid(&s), Some(id));
        assert_eq!(parse_uuid("zz"), None);
        assert!(default_hostnqn(&id).starts_with("nqn."));
    }

    #[test]
    fn tcp_is_the_default_transport() {
        let o = ConnectOptions::new("127.0.0.1:1", "nqn.x");
        assert_eq!(o.transport_name(), "tcp");
        assert_eq!(o.describe(), "nqn.x at 127.0.0.1:1 (tcp)");
        let d = ConnectOptions::new("127.0.0.1:1", farflash_wire::DISCOVERY_NQN);
        assert_eq!(
            d.describe(),
            "the discovery controller at 127.0.0.1:1 (tcp)"
        );
    }
}
