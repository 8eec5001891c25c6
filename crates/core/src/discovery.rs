//! The discovery service (Fabrics §5): the log page a discovery controller
//! returns, listing every subsystem the connecting host may reach on every
//! listener, plus the discovery subsystem itself on each listener.

use crate::controller::Controller;
use crate::queue::NvmeQueue;
use farflash_wire::discovery::{self as d, DiscEntry};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

fn entry(addr: &SocketAddr, portid: u16, subtype: u8, nqn: &str, asqsz: u16) -> DiscEntry {
    DiscEntry {
        trtype: d::TRTYPE_TCP,
        adrfam: if addr.is_ipv4() {
            d::ADRFAM_IPV4
        } else {
            d::ADRFAM_IPV6
        },
        subtype,
        treq: d::TREQ_NOT_SPECIFIED | d::TREQ_DISABLE_SQFLOW,
        portid,
        cntlid: 0xFFFF,
        asqsz,
        eflags: 0,
        trsvcid: addr.port().to_string(),
        subnqn: nqn.to_owned(),
        traddr: addr.ip().to_string(),
        sectype: 0,
    }
}

pub(crate) fn log_page(q: &NvmeQueue, ctrl: &Controller) -> Vec<u8> {
    let t = &q.target;
    let asqsz = 32;
    let mut entries = Vec::new();
    let subsystems = t.subsystems();
    for (i, l) in t.listeners().iter().enumerate() {
        let addr = &l.addr;
        let portid = i as u16 + 1;
        for sub in subsystems.iter() {
            if sub.host_allowed(&ctrl.hostnqn) {
                entries.push(entry(addr, portid, d::SUBTYPE_NVM, &sub.nqn, asqsz));
            }
        }
        entries.push(entry(
            addr,
            portid,
            d::SUBTYPE_CURRENT_DISCOVERY,
            farflash_wire::DISCOVERY_NQN,
            asqsz,
        ));
    }
    d::encode_log(t.genctr.load(Ordering::Acquire), &entries)
}
