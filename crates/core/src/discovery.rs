//! The discovery service (Fabrics §5): the log page a discovery controller
//! returns, listing every subsystem the connecting host may reach on every
//! listener, plus the discovery subsystem itself on each listener.

use crate::controller::Controller;
use crate::listen::{ListenTransport, SecureChannel};
use crate::queue::NvmeQueue;
use crate::subsystem::Subsystem;
use crate::target::{Listener, Target};
use farflash_wire::discovery::{self as d, DiscEntry};
use std::sync::atomic::Ordering;
use std::sync::Arc;

fn entry(l: &Listener, portid: u16, subtype: u8, nqn: &str, asqsz: u16) -> DiscEntry {
    let addr = &l.addr;
    let rdma = l.transport == ListenTransport::Rdma;
    // The secure channel of a TCP listener (TCP §3.6.1.1): SECTYPE
    // TLS 1.3 and TREQ "required" or "not required", as Linux nvmet fills
    // them from a port's addr_tsas and addr_treq (its configfs refuses
    // treq "not specified" with tsas tls1.3).
    let (sectype, secure) = match crate::listen::listen_secure(&l.config) {
        SecureChannel::None => (d::TCP_SECTYPE_NONE, d::TREQ_NOT_SPECIFIED),
        SecureChannel::Optional => (d::TCP_SECTYPE_TLS13, d::TREQ_SECURE_CHANNEL_NOT_REQUIRED),
        SecureChannel::Required => (d::TCP_SECTYPE_TLS13, d::TREQ_SECURE_CHANNEL_REQUIRED),
    };
    DiscEntry {
        trtype: l.transport.trtype(),
        adrfam: if addr.is_ipv4() {
            d::ADRFAM_IPV4
        } else {
            d::ADRFAM_IPV6
        },
        subtype,
        treq: secure | d::TREQ_DISABLE_SQFLOW,
        portid,
        cntlid: 0xFFFF,
        asqsz,
        eflags: 0,
        trsvcid: addr.port().to_string(),
        subnqn: nqn.to_owned(),
        traddr: addr.ip().to_string(),
        // TSAS: TCP SECTYPE as above; RDMA (Fabrics "RDMA Transport Specific
        // Address Subtype") reliable connected, provider not specified, rdma_cm.
        sectype: if rdma {
            d::RDMA_QPTYPE_CONNECTED
        } else {
            sectype
        },
        rdma_prtype: if rdma {
            d::RDMA_PRTYPE_NOT_SPECIFIED
        } else {
            0
        },
        rdma_cms: if rdma { d::RDMA_CMS_RDMA_CM } else { 0 },
    }
}

/// The log page for `ctrl`'s host, from the cache when this generation
/// has been built for that host.
///
/// GENCTR is read before the lists the page is built from: a change
/// replaces the lists first and moves GENCTR after
/// (`Target::discovery_changed`), so a page is never older than the GENCTR
/// it carries, and a host that reads the header, the entries (in as many
/// pieces as it likes) and the header again (libnvme, the kernel) sees
/// GENCTR move whenever what it read may have.
pub(crate) fn log_page<C: Default>(q: &NvmeQueue<C>, ctrl: &Controller) -> Arc<Vec<u8>> {
    let t = &q.target;
    let genctr = t.genctr.load(Ordering::Acquire);
    if let Some(page) = t.discovery_cache.get(genctr, &ctrl.hostnqn) {
        return page;
    }
    let page = Arc::new(build(t, &ctrl.hostnqn, genctr));
    t.discovery_cache.put(genctr, &ctrl.hostnqn, page.clone());
    page
}

/// Every subsystem `hostnqn` may reach on every listener, and the
/// discovery subsystem on each.
fn build(t: &Target, hostnqn: &str, genctr: u64) -> Vec<u8> {
    let asqsz = 32;
    let mut entries = Vec::new();
    let subsystems = t.subsystems();
    let allowed: Vec<&Subsystem> = subsystems
        .iter()
        .filter(|s| s.host_allowed(hostnqn))
        .map(|s| &**s)
        .collect();
    for (i, l) in t.listeners().iter().enumerate() {
        let portid = i as u16 + 1;
        for sub in &allowed {
            entries.push(entry(l, portid, d::SUBTYPE_NVM, &sub.nqn, asqsz));
        }
        entries.push(entry(
            l,
            portid,
            d::SUBTYPE_CURRENT_DISCOVERY,
            farflash_wire::DISCOVERY_NQN,
            asqsz,
        ));
    }
    d::encode_log(genctr, &entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(s: &str) -> Listener {
        let (transport, a) = crate::listen::split_listen(s).unwrap();
        Listener {
            config: s.into(),
            addr: a.parse().unwrap(),
            transport,
        }
    }

    #[test]
    fn rdma_and_tcp_entries_on_one_port() {
        let r = entry(
            &listener("rdma:10.0.2.15:4420"),
            1,
            d::SUBTYPE_NVM,
            "nqn.x",
            32,
        );
        assert_eq!(r.trtype, d::TRTYPE_RDMA);
        assert_eq!((r.sectype, r.rdma_prtype, r.rdma_cms), (1, 1, 1));
        assert_eq!(
            (r.traddr.as_str(), r.trsvcid.as_str()),
            ("10.0.2.15", "4420")
        );
        let t = entry(&listener("10.0.2.15:4420"), 2, d::SUBTYPE_NVM, "nqn.x", 32);
        assert_eq!(t.trtype, d::TRTYPE_TCP);
        assert_eq!((t.sectype, t.rdma_prtype, t.rdma_cms), (0, 0, 0));
        // On the wire: TRTYPE byte 0, TSAS from byte 768.
        let mut b = [0u8; d::DISC_ENTRY_LEN];
        r.encode(&mut b);
        assert_eq!((b[0], b[768], b[769], b[770]), (1, 1, 1, 1));
        assert_eq!(d::DiscEntry::decode(&b), r);
    }

    #[test]
    fn tls_listeners_carry_sectype_and_treq() {
        for (l, sectype, treq) in [
            ("10.0.2.15:4420", 0, 0b100),
            ("tls:10.0.2.15:4420", 2, 0b101),
            ("tls-optional:10.0.2.15:4420", 2, 0b110),
        ] {
            let e = entry(&listener(l), 1, d::SUBTYPE_NVM, "nqn.x", 32);
            assert_eq!((e.sectype, e.treq), (sectype, treq), "{l}");
            let mut b = [0u8; d::DISC_ENTRY_LEN];
            e.encode(&mut b);
            // TREQ byte 3, TSAS SECTYPE byte 768.
            assert_eq!((b[3], b[768]), (treq, sectype), "{l}");
        }
    }
}
