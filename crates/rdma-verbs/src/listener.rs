//! The RDMA CM listener (RDMA Transport Spec 1.0 §3.2): a CM id listening
//! on an event channel whose non-blocking fd the acceptor watches. Each
//! CONNECT_REQUEST's private data is decoded and checked (`farflash_rdma::cm`):
//! a bad one is rejected with its STS; a good one gets its queue pair's
//! resources, its receive buffers posted, and an accept with CRQSIZE. The
//! accepted queue then belongs to one worker.

use crate::cm::{socket_addr, to_sockaddr, EventChannel};
use crate::qp::{reject_and_destroy, Qp};
use farflash_rdma::cm::{encode_accept, encode_reject, CmRequest, Geometry, Limits, RejectStatus};
use farflash_rdma_sys as sys;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr::null_mut;

/// Most RDMA READs in flight as the initiator (bounded by the device and
/// by what the host's responder resources allow).
const MAX_RD_ATOMIC: u8 = 16;

/// A queue pair accepted by the CM, for a worker to drive.
pub struct Accepted {
    pub(crate) qp: Qp,
    pub geo: Geometry,
    pub local: SocketAddr,
    pub peer: SocketAddr,
}

/// Staging for data moved by RDMA READ/WRITE: slots per queue and bytes each.
#[derive(Clone, Copy, Debug)]
pub struct Staging {
    pub io_slots: usize,
    pub admin_slots: usize,
    /// The target's MDTS in bytes: no transfer is larger.
    pub slot_bytes: usize,
}

pub struct RdmaListener {
    id: *mut sys::rdma_cm_id,
    addr: SocketAddr,
    /// Last: the id is destroyed first.
    ch: EventChannel,
}

// SAFETY: the listener's id and channel are used by the acceptor thread
// only (built on the caller's thread, then moved there).
unsafe impl Send for RdmaListener {}

impl RdmaListener {
    /// Binds and listens on `addr` (an address of an RDMA device's netdev,
    /// or unspecified for all).
    pub fn bind(addr: SocketAddr, backlog: i32) -> io::Result<RdmaListener> {
        let ch = EventChannel::new()?;
        let mut id = null_mut();
        // SAFETY: a live channel; `id` receives the new id.
        if unsafe { sys::rdma_create_id(ch.raw(), &mut id, null_mut(), sys::RDMA_PS_TCP) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut l = RdmaListener { id, addr, ch };
        let mut ss = to_sockaddr(&addr);
        // SAFETY: a live id; `ss` holds a sockaddr of `addr`'s family.
        if unsafe { sys::rdma_bind_addr(l.id, &mut ss as *mut _ as *mut sys::sockaddr) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a bound id.
        if unsafe { sys::rdma_listen(l.id, backlog) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the bound id's source address (the port chosen for 0).
        l.addr = socket_addr(unsafe { sys::rdma_get_local_addr(l.id) }).unwrap_or(addr);
        Ok(l)
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn fd(&self) -> RawFd {
        self.ch.fd()
    }

    /// Handles every pending CM event: connection requests are rejected or
    /// accepted (into `out`); the others are acknowledged.
    pub fn accept(&mut self, lim: &Limits, st: &Staging, out: &mut Vec<Accepted>) {
        loop {
            let ev = match self.ch.next() {
                Ok(Some(ev)) => ev,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(addr = %self.addr, "rdma_get_cm_event: {e}");
                    return;
                }
            };
            if ev.kind() != sys::RDMA_CM_EVENT_CONNECT_REQUEST {
                tracing::debug!(kind = ev.kind(), status = ev.status(), "listener CM event");
                continue;
            }
            let id = ev.id();
            let mut pd = [0u8; 256];
            let (n, initiator_depth, responder_resources) = ev.conn_request(&mut pd);
            // The event must be acked before its id migrates.
            drop(ev);
            // SAFETY: the request's id is live until we destroy it.
            let local = socket_addr(unsafe { sys::rdma_get_local_addr(id) }).unwrap_or(self.addr);
            // SAFETY: as above.
            let peer = socket_addr(unsafe { sys::rdma_get_peer_addr(id) }).unwrap_or(self.addr);
            let geo = match CmRequest::decode(&pd[..n]).and_then(|r| lim.check(&r)) {
                Ok(g) => g,
                Err(sts) => {
                    tracing::info!(%peer, ?sts, "RDMA connection rejected");
                    reject_and_destroy(id, &encode_reject(sts));
                    continue;
                }
            };
            let slots = if geo.qid == 0 {
                st.admin_slots
            } else {
                st.io_slots
            };
            let no_res = encode_reject(RejectStatus::NoResources);
            let qp = match Qp::build(id, &geo, slots, st.slot_bytes, &no_res) {
                Ok(q) => q,
                Err(e) => {
                    tracing::warn!(%peer, "RDMA queue setup failed, rejected: {e}");
                    continue;
                }
            };
            // SAFETY: the QP's device context, queried for its read limits.
            let mut dev: sys::ibv_device_attr = unsafe { std::mem::zeroed() };
            // SAFETY: live context; `dev` receives the attributes.
            let _ = unsafe { sys::ibv_query_device((*id).verbs, &mut dev) };
            let cap = |v: i32| v.clamp(0, MAX_RD_ATOMIC as i32) as u8;
            let accept = encode_accept(&geo);
            // SAFETY: rdma_conn_param is plain data; zero is valid.
            let mut param: sys::rdma_conn_param = unsafe { std::mem::zeroed() };
            param.private_data = accept.as_ptr() as *const _;
            param.private_data_len = accept.len() as u8;
            // The CM reports the request's depths from our side already
            // (its initiator depth is the host's responder resources): we
            // read the host's data with RDMA READ up to that depth, bounded
            // by the device, as Linux's nvmet-rdma does.
            param.initiator_depth = initiator_depth.min(cap(dev.max_qp_init_rd_atom));
            param.responder_resources = responder_resources.min(cap(dev.max_qp_rd_atom));
            param.flow_control = 1;
            param.rnr_retry_count = 7;
            // SAFETY: live id with its QP; the private data outlives the call.
            if unsafe { sys::rdma_accept(id, &mut param) } != 0 {
                tracing::warn!(%peer, "rdma_accept: {}", io::Error::last_os_error());
                continue;
            }
            tracing::debug!(%peer, %local, qid = geo.qid, entries = geo.recv_entries, "RDMA queue accepted");
            out.push(Accepted {
                qp,
                geo,
                local,
                peer,
            });
        }
    }
}

impl Drop for RdmaListener {
    fn drop(&mut self) {
        // SAFETY: the listening id is destroyed once, before its channel.
        unsafe { sys::rdma_destroy_id(self.id) };
    }
}
