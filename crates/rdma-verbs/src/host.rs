//! The host side of NVMe/RDMA (RDMA Transport Spec 1.0): one queue pair
//! as `farflash-host` drives it ([`HostTransport`]), opened by
//! [`RdmaConnector`] (`farflash discover|identify|perf -t rdma`).
//!
//! Connect (§3.2): `rdma_resolve_addr`, `rdma_resolve_route`, PD, a
//! completion channel and one CQ, the RC QP, two regions registered once
//! (capsules + response slots; the slots' data buffers), every receive
//! posted, then `rdma_connect` with the Request private data (RECFMT 0,
//! QID, HRQSIZE = entries, HSQSIZE = entries - 1, where the queue has
//! `entries = max(depth, 2)`: as the Connect's SQSIZE). A Reject's STS becomes an
//! error naming it; the Accept's CRQSIZE must cover the queue.
//!
//! Data (§3.3): a write of at most the in-capsule limit (IOCCSZ on I/O
//! queues, none on the admin queue) goes in the SEND itself (a second SGE
//! pointing at the slot's buffer, no copy); anything else is named by a
//! Keyed SGL (subtype 0h: the key stays valid) on the slot's buffer in
//! the queue's data region, which the target moves with RDMA READ / WRITE.
//! Responses land in posted 16-byte receive buffers. A command's slot is
//! free again once both its SEND completed and its response arrived.
//!
//! Nothing is allocated or registered per I/O: work requests, SGEs and
//! work completions are arrays sized at connect; `submit` fills the
//! command's own work request, the next `send_queued`/`progress` posts all
//! queued ones as one chain, and consumed receive buffers are re-posted as
//! one chain per poll.

use crate::cm::{to_sockaddr, Event, EventChannel};
use farflash_host::error::{HostError, Result, TransportError};
use farflash_host::rdma::{HostBuf, HostQueue};
use farflash_host::{Completion, ConnectOptions, Connector, DataDir, HostTransport, QueueConfig};
use farflash_rdma::cm::{decode_accept, decode_reject, CmRequest, RejectStatus, RECFMT_1_0};
use farflash_rdma_sys as sys;
use farflash_wire::cqe::CQE_SIZE;
use farflash_wire::sqe::SQE_SIZE;
use farflash_wire::Sqe;
use std::io;
use std::net::SocketAddr;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

/// Opens NVMe/RDMA queue pairs (`-t rdma`).
#[derive(Clone, Copy, Debug, Default)]
pub struct RdmaConnector;

impl Connector for RdmaConnector {
    fn name(&self) -> &'static str {
        "rdma"
    }
    fn open(
        &self,
        opts: &ConnectOptions,
        qid: u16,
        cfg: QueueConfig,
    ) -> Result<Box<dyn HostTransport>> {
        Ok(Box::new(RdmaHostQueue::connect(opts, qid, cfg)?))
    }
}

/// Data bytes of one admin slot before any growth (Identify's 4 KiB).
const ADMIN_SLOT: usize = 4096;
/// The admin queue's data region never grows past this (a discovery log
/// of ~60 000 entries fits; larger ones are read in pieces anyway).
const ADMIN_REGION_MAX: usize = 64 << 20;
/// Work completions taken per `ibv_poll_cq`.
const WC_BATCH: usize = 32;
/// RDMA READs the target may have in flight against this host (our
/// responder resources), at most; bounded by the device's limit.
const RESPONDER_RESOURCES: i32 = 16;
/// Receive buffers' `wr_id` have this bit set; sends carry the CID.
const RECV_BIT: u64 = 1 << 32;

fn rdma_err(what: impl Into<String>) -> HostError {
    HostError::Transport(TransportError::Rdma(what.into()))
}

fn os_err(what: &str) -> HostError {
    rdma_err(format!("{what}: {}", io::Error::last_os_error()))
}

/// A buffer registered with the queue's protection domain.
struct Region {
    buf: Box<[u8]>,
    mr: *mut sys::ibv_mr,
}

impl Region {
    fn empty() -> Region {
        Region {
            buf: Box::new([]),
            mr: null_mut(),
        }
    }

    fn new(pd: *mut sys::ibv_pd, len: usize, access: u32) -> Result<Region> {
        let mut buf = vec![0u8; len.max(1)].into_boxed_slice();
        // SAFETY: `buf` lives as long as the region; the MR is deregistered
        // (Region::drop) before the buffer is freed.
        let mr =
            unsafe { sys::ibv_reg_mr(pd, buf.as_mut_ptr() as *mut _, buf.len(), access as i32) };
        if mr.is_null() {
            return Err(os_err("ibv_reg_mr"));
        }
        Ok(Region { buf, mr })
    }

    fn lkey(&self) -> u32 {
        // SAFETY: a region with a buffer has a live MR until drop.
        unsafe { (*self.mr).lkey }
    }

    fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr).rkey }
    }

    fn addr(&self, off: usize) -> u64 {
        self.buf.as_ptr() as u64 + off as u64
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if !self.mr.is_null() {
            // SAFETY: registered once in `new`, deregistered once here,
            // before the PD (RdmaHostQueue::drop drops regions first).
            unsafe { sys::ibv_dereg_mr(self.mr) };
        }
    }
}

/// One NVMe/RDMA queue pair of the host.
pub struct RdmaHostQueue {
    /// The command slots and what is received (sans-I/O, `farflash-rdma`).
    q: HostQueue,
    id: *mut sys::rdma_cm_id,
    pd: *mut sys::ibv_pd,
    comp: *mut sys::ibv_comp_channel,
    cq: *mut sys::ibv_cq,
    qp_created: bool,
    /// Capsules (`depth` × 64) then response buffers (`entries` × 16).
    ctrl: Region,
    /// The slots' data buffers (`depth` × `slot_bytes`), remotely readable
    /// and writable under one rkey.
    data: Region,
    slot_bytes: usize,
    max_data: u32,
    admin: bool,
    /// One send work request and two SGEs per CID; `pending` lists the
    /// CIDs whose SEND waits for the next post.
    wrs: Box<[sys::ibv_send_wr]>,
    sges: Box<[[sys::ibv_sge; 2]]>,
    pending: Vec<u16>,
    rwrs: Box<[sys::ibv_recv_wr]>,
    rsges: Box<[sys::ibv_sge]>,
    /// Receive buffers consumed, to re-post.
    reposts: Vec<u32>,
    wcs: Box<[sys::ibv_wc]>,
    /// Last: destroyed after the id.
    ch: EventChannel,
}

// SAFETY: the verbs objects are owned by this value alone and used by one
// thread at a time (an I/O queue moves to its job thread; the admin queue
// sits behind a mutex); libibverbs and librdmacm objects may be used from
// any thread. The raw pointers in the work request arrays point into this
// value's own boxed arrays and regions.
unsafe impl Send for RdmaHostQueue {}

impl RdmaHostQueue {
    /// Connects queue `qid` to `opts.addr` (RDMA CM) with `cfg.depth`
    /// slots of `cfg.slot_buf` bytes (grown on demand when 0: admin).
    pub fn connect(opts: &ConnectOptions, qid: u16, cfg: QueueConfig) -> Result<RdmaHostQueue> {
        let addr = *farflash_host::socket::resolve(&opts.addr)?
            .first()
            .ok_or_else(|| HostError::Invalid(format!("address {:?}", opts.addr)))?;
        // CIDs (slots): at most `depth` commands in flight. The queue's
        // entries (CM HSQSIZE + 1, Connect SQSIZE + 1) are at least 2
        // (Base §4.1.3), with one posted receive each.
        let depth = cfg.depth.max(1);
        let entries = depth.max(2);
        let admin = cfg.slot_buf == 0;
        let slot_bytes = if admin {
            ADMIN_SLOT
        } else {
            cfg.slot_buf.next_multiple_of(64)
        };
        // The admin queue's receive buffers hold an SQE only (§3.2 and
        // Linux's nvmet-rdma): no in-capsule data there.
        let icd_max = if qid == 0 { 0 } else { cfg.icd_max };
        // libibverbs/librdmacm missing: say which packages, not "no RDMA CM".
        sys::load().map_err(|e| rdma_err(e.to_string()))?;
        let ch = EventChannel::new().map_err(|e| {
            rdma_err(format!(
                "no RDMA CM (rdma_create_event_channel: {e}): is an RDMA device up \
                 (e.g. modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0)?"
            ))
        })?;
        let mut id = null_mut();
        // SAFETY: a live channel; `id` receives the new id.
        if unsafe { sys::rdma_create_id(ch.raw(), &mut id, null_mut(), sys::RDMA_PS_TCP) } != 0 {
            return Err(os_err("rdma_create_id"));
        }
        let d = depth as usize;
        let e = entries as usize;
        let mut q = RdmaHostQueue {
            q: HostQueue::new(qid, depth, icd_max),
            id,
            pd: null_mut(),
            comp: null_mut(),
            cq: null_mut(),
            qp_created: false,
            ctrl: Region::empty(),
            data: Region::empty(),
            slot_bytes,
            max_data: cfg.max_data,
            admin,
            // SAFETY: plain C structs; all zero is a valid value.
            wrs: (0..d).map(|_| unsafe { std::mem::zeroed() }).collect(),
            sges: vec![[sys::ibv_sge::default(); 2]; d].into_boxed_slice(),
            pending: Vec::with_capacity(d),
            // SAFETY: as above.
            rwrs: (0..e).map(|_| unsafe { std::mem::zeroed() }).collect(),
            rsges: vec![sys::ibv_sge::default(); e].into_boxed_slice(),
            reposts: Vec::with_capacity(e),
            // SAFETY: as above.
            wcs: (0..WC_BATCH)
                .map(|_| unsafe { std::mem::zeroed() })
                .collect(),
            ch,
        };
        let deadline = Instant::now() + opts.connect_timeout;
        q.establish(addr, entries, deadline)?;
        Ok(q)
    }

    fn establish(&mut self, addr: SocketAddr, entries: u16, deadline: Instant) -> Result<()> {
        let ms = opts_ms(deadline);
        let mut ss = to_sockaddr(&addr);
        // SAFETY: a live id; the address is copied by the call.
        let rc =
            unsafe { sys::rdma_resolve_addr(self.id, null_mut(), &mut ss as *mut _ as *mut _, ms) };
        if rc != 0 {
            return Err(os_err(&format!("rdma_resolve_addr {addr}")));
        }
        self.expect(sys::RDMA_CM_EVENT_ADDR_RESOLVED, addr, deadline)?;
        // SAFETY: a live id with a resolved address.
        if unsafe { sys::rdma_resolve_route(self.id, opts_ms(deadline)) } != 0 {
            return Err(os_err(&format!("rdma_resolve_route {addr}")));
        }
        self.expect(sys::RDMA_CM_EVENT_ROUTE_RESOLVED, addr, deadline)?;
        let rd_atom = self.setup(entries)?;
        let req = CmRequest {
            recfmt: RECFMT_1_0,
            qid: self.q.qid(),
            // One posted receive per command: HRQSIZE = the queue's entries.
            hrqsize: entries,
            hsqsize: entries - 1,
            cntlid: 0xFFFF,
        }
        .encode();
        // SAFETY: rdma_conn_param is plain data; the private data outlives
        // the call, which copies it.
        let rc = unsafe {
            let mut p: sys::rdma_conn_param = std::mem::zeroed();
            p.private_data = req.as_ptr() as *const _;
            p.private_data_len = req.len() as u8;
            p.responder_resources = rd_atom;
            p.initiator_depth = 0;
            p.flow_control = 1;
            p.retry_count = 7;
            p.rnr_retry_count = 7;
            sys::rdma_connect(self.id, &mut p)
        };
        if rc != 0 {
            return Err(os_err(&format!("rdma_connect {addr}")));
        }
        let ev = self.event(deadline, "RDMA CM connect")?;
        let mut pd = [0u8; 256];
        let (n, _, _) = ev.conn_request(&mut pd);
        match ev.kind() {
            sys::RDMA_CM_EVENT_ESTABLISHED => {}
            sys::RDMA_CM_EVENT_REJECTED => {
                let status = ev.status();
                let sts = decode_reject(&pd[..n]);
                return Err(rdma_err(
                    match sts.and_then(RejectStatus::from_code) {
                        Some(r) => format!(
                            "the target at {addr} rejected queue {} (RDMA CM reject STS {:#04x}: {})",
                            self.q.qid(),
                            r as u16,
                            r.describe()
                        ),
                        // A reject by the CM itself (no listener on that
                        // port) carries no NVMe status (zeroes at most).
                        None => format!(
                            "the connection to {addr} was rejected (CM reject reason {status}, \
                             no NVMe/RDMA reject status{}): is an NVMe/RDMA target listening there?",
                            sts.filter(|&s| s != 0)
                                .map_or(String::new(), |s| format!("; STS {s:#04x}"))
                        ),
                    },
                ));
            }
            k => {
                return Err(rdma_err(format!(
                    "connecting queue {} to {addr}: {} (status {})",
                    self.q.qid(),
                    event_name(k),
                    ev.status()
                )))
            }
        }
        // §3.2: the Accept carries CRQSIZE, the controller's receive queue.
        let crqsize = decode_accept(&pd[..n]).map_err(|e| {
            rdma_err(format!(
                "queue {}: bad Accept private data ({})",
                self.q.qid(),
                e.describe()
            ))
        })?;
        if crqsize < entries {
            return Err(rdma_err(format!(
                "queue {}: the target's CRQSIZE {crqsize} is smaller than the queue's {entries} entries",
                self.q.qid()
            )));
        }
        Ok(())
    }

    /// PD, completion channel, CQ, QP, both regions, all receives posted.
    /// Returns the responder resources to offer.
    fn setup(&mut self, entries: u16) -> Result<u8> {
        let d = self.q.depth() as usize;
        let e = entries as usize;
        // SAFETY: the id has a resolved route, hence a device context.
        let ctx = unsafe { (*self.id).verbs };
        if ctx.is_null() {
            return Err(rdma_err("the resolved address has no RDMA device"));
        }
        // SAFETY: plain data, zero is valid; a live context.
        let mut attr: sys::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `attr` is written by the call.
        let rd_atom = if unsafe { sys::ibv_query_device(ctx, &mut attr) } == 0 {
            attr.max_qp_rd_atom.clamp(0, RESPONDER_RESOURCES) as u8
        } else {
            1
        };
        // SAFETY: a live context.
        self.pd = unsafe { sys::ibv_alloc_pd(ctx) };
        if self.pd.is_null() {
            return Err(os_err("ibv_alloc_pd"));
        }
        // SAFETY: a live context.
        self.comp = unsafe { sys::ibv_create_comp_channel(ctx) };
        if self.comp.is_null() {
            return Err(os_err("ibv_create_comp_channel"));
        }
        // SAFETY: the completion channel is live.
        crate::cm::set_nonblocking(unsafe { (*self.comp).fd })
            .map_err(|e| rdma_err(format!("completion channel: {e}")))?;
        // SAFETY: live context and channel; no CQ context pointer.
        self.cq = unsafe { sys::ibv_create_cq(ctx, (d + e) as i32 + 1, null_mut(), self.comp, 0) };
        if self.cq.is_null() {
            return Err(os_err("ibv_create_cq"));
        }
        let mut qattr = sys::ibv_qp_init_attr {
            send_cq: self.cq,
            recv_cq: self.cq,
            qp_type: sys::IBV_QPT_RC,
            cap: sys::ibv_qp_cap {
                // One SEND per CID at most: a slot is reused only after its
                // SEND completed.
                max_send_wr: d as u32,
                max_recv_wr: e as u32,
                max_send_sge: 2,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            ..Default::default()
        };
        // SAFETY: live id, PD and CQ; `qattr` is read and its caps updated.
        if unsafe { sys::rdma_create_qp(self.id, self.pd, &mut qattr) } != 0 {
            return Err(os_err("rdma_create_qp"));
        }
        self.qp_created = true;
        let cap = SQE_SIZE;
        self.ctrl = Region::new(self.pd, d * cap + e * CQE_SIZE, sys::IBV_ACCESS_LOCAL_WRITE)?;
        self.data = Region::new(self.pd, d * self.slot_bytes, data_access())?;
        for i in 0..e {
            self.reposts.push(i as u32);
        }
        self.post_recvs()?;
        Ok(rd_atom)
    }

    /// The next CM event on this id's channel, waiting until `deadline`.
    fn event(&self, deadline: Instant, what: &'static str) -> Result<Event> {
        loop {
            if let Some(ev) = self
                .ch
                .next()
                .map_err(|e| rdma_err(format!("{what}: {e}")))?
            {
                return Ok(ev);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(HostError::Timeout(what));
            }
            poll_fds(&[self.ch.fd()], opts_ms(deadline))?;
        }
    }

    fn expect(&self, kind: u32, addr: SocketAddr, deadline: Instant) -> Result<()> {
        let ev = self.event(deadline, "RDMA CM address/route resolution")?;
        if ev.kind() == kind {
            return Ok(());
        }
        Err(rdma_err(format!(
            "resolving {addr}: {} (status {}); is there an RDMA device on a route to it?",
            event_name(ev.kind()),
            ev.status()
        )))
    }

    fn cap_off(&self, cid: u16) -> usize {
        cid as usize * SQE_SIZE
    }

    fn resp_off(&self, i: usize) -> usize {
        self.q.depth() as usize * SQE_SIZE + i * CQE_SIZE
    }

    fn fail(&mut self, why: String) -> HostError {
        self.q.fail(why)
    }

    /// Posts the consumed receive buffers again, as one chain.
    fn post_recvs(&mut self) -> Result<()> {
        let n = self.reposts.len();
        if n == 0 {
            return Ok(());
        }
        let lkey = self.ctrl.lkey();
        for k in 0..n {
            let i = self.reposts[k] as usize;
            self.rsges[k] = sys::ibv_sge {
                addr: self.ctrl.addr(self.resp_off(i)),
                length: CQE_SIZE as u32,
                lkey,
            };
            let next = if k + 1 < n {
                &mut self.rwrs[k + 1] as *mut _
            } else {
                null_mut()
            };
            let sge = &mut self.rsges[k] as *mut _;
            let wr = &mut self.rwrs[k];
            wr.wr_id = RECV_BIT | i as u64;
            wr.sg_list = sge;
            wr.num_sge = 1;
            wr.next = next;
        }
        self.reposts.clear();
        let mut bad = null_mut();
        // SAFETY: a live QP; the chain and its SGEs live in this value and
        // name the registered control region.
        let rc = unsafe { sys::ibv_post_recv((*self.id).qp, self.rwrs.as_mut_ptr(), &mut bad) };
        if rc != 0 {
            return Err(self.fail(format!(
                "ibv_post_recv: {}",
                io::Error::from_raw_os_error(rc)
            )));
        }
        Ok(())
    }

    /// Takes every work completion waiting (no system call with rxe and
    /// most providers) and finishes commands.
    fn reap(&mut self) -> Result<()> {
        loop {
            // SAFETY: a live CQ; `wcs` has room for the count asked.
            let n =
                unsafe { sys::ibv_poll_cq(self.cq, self.wcs.len() as i32, self.wcs.as_mut_ptr()) };
            if n < 0 {
                return Err(self.fail("ibv_poll_cq failed".into()));
            }
            for k in 0..n as usize {
                let wc = self.wcs[k];
                self.on_wc(&wc);
            }
            if (n as usize) < self.wcs.len() {
                break;
            }
        }
        if self.q.dead().is_none() {
            self.post_recvs()?;
        }
        self.q.check_alive()
    }

    fn on_wc(&mut self, wc: &sys::ibv_wc) {
        if self.q.dead().is_some() {
            return; // flushed work after a failure
        }
        if wc.status != sys::IBV_WC_SUCCESS {
            let what = if wc.wr_id & RECV_BIT != 0 {
                "a receive"
            } else {
                "a SEND"
            };
            self.fail(format!(
                "queue {}: {what} completed with work completion status {} (the target \
                 disconnected, or refused this host's memory key)",
                self.q.qid(),
                wc.status
            ));
            return;
        }
        if wc.wr_id & RECV_BIT == 0 {
            self.q.on_send_done(wc.wr_id as u16);
            return;
        }
        let i = (wc.wr_id & 0xFFFF_FFFF) as usize;
        let invalidated = if wc.wc_flags & sys::IBV_WC_WITH_INV != 0 {
            // SAFETY: with IBV_WC_WITH_INV the union holds the invalidated rkey.
            Some(unsafe { wc.__bindgen_anon_1.invalidated_rkey })
        } else {
            None
        };
        let off = self.resp_off(i);
        let len = (wc.byte_len as usize).min(CQE_SIZE);
        self.q.on_recv(&self.ctrl.buf[off..off + len], invalidated);
        self.reposts.push(i as u32);
    }
}

fn data_access() -> u32 {
    sys::IBV_ACCESS_LOCAL_WRITE | sys::IBV_ACCESS_REMOTE_READ | sys::IBV_ACCESS_REMOTE_WRITE
}

fn opts_ms(deadline: Instant) -> i32 {
    deadline
        .saturating_duration_since(Instant::now())
        .as_millis()
        .clamp(1, i32::MAX as u128) as i32
}

/// `poll(2)` for input on `fds`, up to `ms`.
fn poll_fds(fds: &[i32], ms: i32) -> Result<()> {
    let mut p = [libc::pollfd {
        fd: -1,
        events: libc::POLLIN,
        revents: 0,
    }; 2];
    let n = fds.len().min(2);
    for (k, &fd) in fds.iter().take(n).enumerate() {
        p[k].fd = fd;
    }
    // SAFETY: `p` holds `n` initialized pollfds and outlives the call.
    let r = unsafe { libc::poll(p.as_mut_ptr(), n as libc::nfds_t, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e.into());
        }
    }
    Ok(())
}

fn event_name(k: u32) -> &'static str {
    match k {
        sys::RDMA_CM_EVENT_ADDR_ERROR => "address resolution error",
        sys::RDMA_CM_EVENT_ROUTE_ERROR => "route resolution error",
        sys::RDMA_CM_EVENT_CONNECT_ERROR => "connect error",
        sys::RDMA_CM_EVENT_UNREACHABLE => "unreachable",
        sys::RDMA_CM_EVENT_REJECTED => "rejected",
        sys::RDMA_CM_EVENT_DISCONNECTED => "disconnected",
        sys::RDMA_CM_EVENT_DEVICE_REMOVAL => "device removed",
        sys::RDMA_CM_EVENT_ADDR_CHANGE => "address changed",
        _ => "unexpected RDMA CM event",
    }
}

impl HostTransport for RdmaHostQueue {
    fn depth(&self) -> u16 {
        self.q.depth()
    }
    fn outstanding(&self) -> usize {
        self.q.outstanding()
    }
    fn alloc_cid(&mut self) -> Option<u16> {
        self.q.alloc_cid()
    }
    fn release_cid(&mut self, cid: u16) {
        self.q.release_cid(cid)
    }
    fn buf(&self, cid: u16) -> &[u8] {
        let at = cid as usize * self.slot_bytes;
        self.data.buf.get(at..at + self.slot_bytes).unwrap_or(&[])
    }
    fn buf_mut(&mut self, cid: u16) -> Option<&mut [u8]> {
        if cid >= self.q.depth() || self.q.is_busy(cid) {
            return None;
        }
        let at = cid as usize * self.slot_bytes;
        self.data.buf.get_mut(at..at + self.slot_bytes)
    }
    /// Admin queue only: the data region is re-registered larger (never
    /// on an I/O queue, whose slots were sized at connect).
    fn ensure_buf(&mut self, cid: u16, len: usize) -> Result<()> {
        if cid >= self.q.depth() {
            return Err(HostError::Invalid(format!("cid {cid} out of range")));
        }
        if self.q.is_busy(cid) {
            return Err(HostError::Invalid(format!("cid {cid} busy")));
        }
        if len <= self.slot_bytes {
            return Ok(());
        }
        let bytes = len.next_multiple_of(4096);
        let total = bytes.saturating_mul(self.q.depth() as usize);
        if !self.admin || total > ADMIN_REGION_MAX {
            return Err(HostError::Invalid(format!(
                "a {len}-byte transfer does not fit this RDMA queue's registered buffers ({} bytes per slot)",
                self.slot_bytes
            )));
        }
        if self.q.any_busy() {
            return Err(HostError::Invalid(
                "cannot grow the admin queue's buffers with a command in flight".into(),
            ));
        }
        let grown = Region::new(self.pd, total, data_access())?;
        self.data = grown;
        self.slot_bytes = bytes;
        Ok(())
    }

    fn submit(&mut self, cid: u16, sqe: Sqe, dir: DataDir, len: u32) -> Result<()> {
        let slot_bytes = self.slot_bytes;
        let len = if dir == DataDir::None { 0 } else { len };
        if len > self.max_data.max(slot_bytes as u32) || len as usize > slot_bytes {
            return Err(HostError::Invalid(format!(
                "data length {len} exceeds the slot buffer ({slot_bytes} bytes)"
            )));
        }
        let data_at = cid as usize * slot_bytes;
        let buf = HostBuf {
            addr: self.data.addr(data_at),
            key: self.data.rkey(),
        };
        let cap = self.q.submit(cid, sqe, dir, len, buf)?;
        let off = self.cap_off(cid);
        self.ctrl.buf[off..off + SQE_SIZE].copy_from_slice(&cap.sqe);
        let c = cid as usize;
        self.sges[c][0] = sys::ibv_sge {
            addr: self.ctrl.addr(off),
            length: SQE_SIZE as u32,
            lkey: self.ctrl.lkey(),
        };
        // In-capsule data: a second SGE straight from the slot's buffer.
        self.sges[c][1] = sys::ibv_sge {
            addr: buf.addr,
            length: cap.in_capsule,
            lkey: self.data.lkey(),
        };
        let sg = self.sges[c].as_mut_ptr();
        let wr = &mut self.wrs[c];
        wr.wr_id = cid as u64;
        wr.sg_list = sg;
        wr.num_sge = if cap.in_capsule > 0 { 2 } else { 1 };
        wr.opcode = sys::IBV_WR_SEND;
        wr.send_flags = sys::IBV_SEND_SIGNALED;
        wr.next = null_mut();
        self.pending.push(cid);
        Ok(())
    }

    fn send_queued(&mut self) -> Result<bool> {
        self.q.check_alive()?;
        let n = self.pending.len();
        if n == 0 {
            return Ok(true);
        }
        for k in 0..n {
            let next = if k + 1 < n {
                &mut self.wrs[self.pending[k + 1] as usize] as *mut _
            } else {
                null_mut()
            };
            self.wrs[self.pending[k] as usize].next = next;
        }
        let first = &mut self.wrs[self.pending[0] as usize] as *mut _;
        self.pending.clear();
        let mut bad = null_mut();
        // SAFETY: a live QP; the chain and its SGEs live in this value and
        // name its registered regions.
        let rc = unsafe { sys::ibv_post_send((*self.id).qp, first, &mut bad) };
        if rc != 0 {
            return Err(self.fail(format!(
                "ibv_post_send: {}",
                io::Error::from_raw_os_error(rc)
            )));
        }
        Ok(true)
    }

    fn progress(&mut self, out: &mut Vec<Completion>) -> Result<()> {
        self.send_queued()?;
        self.reap()?;
        self.q.take_completions(out);
        Ok(())
    }

    /// Arms the CQ, looks once more (a completion may have slipped in
    /// before the arming), then sleeps on the completion channel and the
    /// CM channel (a disconnect).
    fn wait_ready(&mut self, ms: i32) -> Result<()> {
        self.send_queued()?;
        if self.q.has_completions() {
            return Ok(());
        }
        // SAFETY: a live CQ.
        if unsafe { sys::ibv_req_notify_cq(self.cq, 0) } != 0 {
            return Err(self.fail("ibv_req_notify_cq failed".into()));
        }
        self.reap()?;
        if self.q.has_completions() {
            return Ok(());
        }
        // SAFETY: the channel is live while self is.
        let comp_fd = unsafe { (*self.comp).fd };
        poll_fds(&[comp_fd, self.ch.fd()], ms)?;
        crate::qp::take_cq_events(self.comp, self.cq);
        if let Ok(Some(ev)) = self.ch.next() {
            let k = ev.kind();
            drop(ev);
            if k != sys::RDMA_CM_EVENT_ESTABLISHED {
                return Err(self.fail(format!(
                    "queue {}: RDMA CM event: {}",
                    self.q.qid(),
                    event_name(k)
                )));
            }
        }
        Ok(())
    }

    fn close(&mut self, timeout: Duration) {
        if self.q.dead().is_none() {
            // SAFETY: a live, connected id.
            unsafe { sys::rdma_disconnect(self.id) };
            let deadline = Instant::now() + timeout;
            while let Ok(ev) = self.event(deadline, "disconnect") {
                if ev.kind() == sys::RDMA_CM_EVENT_DISCONNECTED {
                    break;
                }
            }
            self.q.fail("queue closed by this host".into());
        }
    }
}

impl Drop for RdmaHostQueue {
    fn drop(&mut self) {
        // SAFETY: each object is destroyed once, dependents first: the QP,
        // the MRs (regions), the CQ, the channel, the PD, then the id (its
        // event channel drops after this, as a field).
        unsafe {
            if self.qp_created {
                sys::rdma_destroy_qp(self.id);
            }
            self.ctrl = Region::empty();
            self.data = Region::empty();
            if !self.cq.is_null() {
                sys::ibv_destroy_cq(self.cq);
            }
            if !self.comp.is_null() {
                sys::ibv_destroy_comp_channel(self.comp);
            }
            if !self.pd.is_null() {
                sys::ibv_dealloc_pd(self.pd);
            }
            sys::rdma_destroy_id(self.id);
        }
    }
}
