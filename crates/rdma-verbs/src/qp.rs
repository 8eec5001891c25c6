//! One queue pair's verbs resources, created for an accepted CM request:
//! its own CM event channel (the id migrated to it), a protection domain, a
//! completion channel and CQ, the RC QP (send queue `2 x entries`, receive
//! queue `entries`), and three regions registered once: the receive
//! buffers, the CQE slots of the responses, and the staging slots RDMA READ
//! and WRITE move data through when a buffer is not registered; and the
//! chunks of the queue's buffer pool, each registered once (at accept, or
//! when the pool grows one), which RDMA READ and WRITE use directly.
//! Destroyed in the order verbs requires.

use crate::cm::{set_nonblocking, EventChannel};
use farflash_backend::Chunk;
use farflash_rdma::cm::Geometry;
use farflash_rdma_sys as sys;
use farflash_wire::cqe::CQE_SIZE;
use std::io;
use std::os::fd::RawFd;
use std::ptr::null_mut;

/// A buffer registered with the queue's protection domain.
pub(crate) struct Region {
    pub buf: Box<[u8]>,
    mr: *mut sys::ibv_mr,
}

impl Region {
    fn new(pd: *mut sys::ibv_pd, len: usize, access: u32) -> io::Result<Region> {
        let mut buf = vec![0u8; len.max(1)].into_boxed_slice();
        // SAFETY: `buf` lives as long as the region; the MR is deregistered
        // before the buffer is freed (Qp::drop).
        let mr =
            unsafe { sys::ibv_reg_mr(pd, buf.as_mut_ptr() as *mut _, buf.len(), access as i32) };
        if mr.is_null() {
            return Err(io::Error::last_os_error());
        }
        Ok(Region { buf, mr })
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is live while the region is.
        unsafe { (*self.mr).lkey }
    }

    pub fn addr(&self, off: usize) -> u64 {
        self.buf.as_ptr() as u64 + off as u64
    }
}

/// A chunk of the queue's buffer pool registered with its PD (`mr` null
/// when the registration failed: the chunk's buffers then go through
/// staging, and registration is not tried again).
struct ChunkMr {
    /// Keeps the chunk's memory allocated until the MR is deregistered.
    chunk: Chunk,
    mr: *mut sys::ibv_mr,
}

pub(crate) struct Qp {
    pub id: *mut sys::rdma_cm_id,
    pd: *mut sys::ibv_pd,
    comp: *mut sys::ibv_comp_channel,
    pub cq: *mut sys::ibv_cq,
    qp_created: bool,
    pub recv: Region,
    pub cqes: Region,
    pub stage: Region,
    /// The pool's chunks registered so far (a few entries).
    chunks: Vec<ChunkMr>,
    /// Bytes of one staging slot (the target's MDTS).
    pub stage_bytes: usize,
    /// SENDs of a CQE are inline (no DMA from `cqes`).
    pub inline: bool,
    pub sq_depth: usize,
    /// Last: destroyed after the id (fields drop after `Drop::drop`).
    pub ch: EventChannel,
}

// SAFETY: the verbs objects are owned by this value alone and used by one
// thread at a time (the acceptor builds it, one worker then drives it);
// libibverbs and librdmacm objects may be used from any thread.
unsafe impl Send for Qp {}

fn check(rc: i32) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Qp {
    /// Builds the resources for `id` (a CONNECT_REQUEST's id, its event
    /// already acked) and posts every receive buffer. On error the id is
    /// rejected with `rej` and everything, the id included, destroyed.
    pub fn build(
        id: *mut sys::rdma_cm_id,
        geo: &Geometry,
        stage_slots: usize,
        stage_bytes: usize,
        rej: &[u8],
    ) -> io::Result<Qp> {
        let migrated = EventChannel::new().and_then(|ch| {
            // SAFETY: `id` is a live child id whose events are all acked.
            check(unsafe { sys::rdma_migrate_id(id, ch.raw()) }).map(|()| ch)
        });
        let ch = match migrated {
            Ok(ch) => ch,
            Err(e) => {
                reject_and_destroy(id, rej);
                return Err(e);
            }
        };
        let mut q = Qp {
            id,
            pd: null_mut(),
            comp: null_mut(),
            cq: null_mut(),
            qp_created: false,
            recv: Region {
                buf: Box::new([]),
                mr: null_mut(),
            },
            cqes: Region {
                buf: Box::new([]),
                mr: null_mut(),
            },
            stage: Region {
                buf: Box::new([]),
                mr: null_mut(),
            },
            chunks: Vec::new(),
            stage_bytes,
            inline: false,
            sq_depth: 2 * geo.recv_entries as usize,
            ch,
        };
        // From here on, Qp's Drop destroys the id (before its channel).
        match q.setup(geo, stage_slots) {
            Ok(()) => Ok(q),
            Err(e) => {
                q.release(false);
                reject(q.id, rej);
                Err(e)
            }
        }
    }

    fn setup(&mut self, geo: &Geometry, stage_slots: usize) -> io::Result<()> {
        // SAFETY: `self.id` is live; `verbs` is its device context.
        let ctx = unsafe { (*self.id).verbs };
        if ctx.is_null() {
            return Err(io::Error::other("the CM id has no device"));
        }
        // SAFETY: a live device context.
        self.pd = unsafe { sys::ibv_alloc_pd(ctx) };
        if self.pd.is_null() {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        self.comp = unsafe { sys::ibv_create_comp_channel(ctx) };
        if self.comp.is_null() {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the completion channel is live.
        set_nonblocking(unsafe { (*self.comp).fd })?;
        let cqe = geo.recv_entries as usize + self.sq_depth;
        // SAFETY: live context and channel; no CQ context pointer.
        self.cq = unsafe { sys::ibv_create_cq(ctx, cqe as i32, null_mut(), self.comp, 0) };
        if self.cq.is_null() {
            return Err(io::Error::last_os_error());
        }
        let mut attr = sys::ibv_qp_init_attr {
            send_cq: self.cq,
            recv_cq: self.cq,
            qp_type: sys::IBV_QPT_RC,
            cap: sys::ibv_qp_cap {
                max_send_wr: self.sq_depth as u32,
                max_recv_wr: geo.recv_entries,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: CQE_SIZE as u32,
            },
            ..Default::default()
        };
        // SAFETY: live id, PD and CQ; `attr` is read and its caps updated.
        if unsafe { sys::rdma_create_qp(self.id, self.pd, &mut attr) } != 0 {
            // A device without inline sends: retry without.
            attr.cap.max_inline_data = 0;
            // SAFETY: as above.
            check(unsafe { sys::rdma_create_qp(self.id, self.pd, &mut attr) })?;
        }
        self.qp_created = true;
        self.inline = attr.cap.max_inline_data as usize >= CQE_SIZE;
        let local = sys::IBV_ACCESS_LOCAL_WRITE;
        let rb = geo.recv_bytes as usize;
        self.recv = Region::new(self.pd, rb * geo.recv_entries as usize, local)?;
        self.cqes = Region::new(self.pd, CQE_SIZE * self.sq_depth, local)?;
        self.stage = Region::new(self.pd, self.stage_bytes * stage_slots, local)?;
        let all: Vec<u32> = (0..geo.recv_entries).collect();
        self.post_recvs(&all, rb)?;
        // SAFETY: arms the CQ's first notification (the loop re-arms).
        check(unsafe { sys::ibv_req_notify_cq(self.cq, 0) })?;
        Ok(())
    }

    /// The lkey for `[addr, addr + len)` if a registered chunk holds it:
    /// `Some(None)` when that chunk's registration failed, `None` when no
    /// chunk seen so far holds it. A scan of a few entries, no allocation.
    pub fn chunk_lkey(&self, addr: usize, len: usize) -> Option<Option<u32>> {
        let c = self.chunks.iter().find(|c| c.chunk.contains(addr, len))?;
        // SAFETY: a non-null MR is live until `release`.
        Some((!c.mr.is_null()).then(|| unsafe { (*c.mr).lkey }))
    }

    /// Registers chunk `c` of the queue's pool with its PD for local
    /// access (RDMA READ lands in it, RDMA WRITE sends from it), once: the
    /// caller looked it up with [`Qp::chunk_lkey`] first. A failure is
    /// remembered (the chunk's buffers use staging).
    pub fn register_chunk(&mut self, c: Chunk) -> Option<u32> {
        let access = sys::IBV_ACCESS_LOCAL_WRITE as i32;
        // SAFETY: the PD is live; the chunk's memory stays allocated while
        // `ChunkMr::chunk` holds it, and the MR is deregistered in
        // `release` before that handle drops.
        let mr = unsafe { sys::ibv_reg_mr(self.pd, c.addr() as *mut _, c.len(), access) };
        if mr.is_null() {
            let e = io::Error::last_os_error();
            tracing::warn!(
                len = c.len(),
                "RDMA: registering a buffer chunk failed, its buffers use staging: {e}"
            );
        } else {
            tracing::debug!(chunk = ?c, "RDMA: buffer chunk registered");
        }
        self.chunks.push(ChunkMr { chunk: c, mr });
        // SAFETY: as in `chunk_lkey`.
        (!mr.is_null()).then(|| unsafe { (*mr).lkey })
    }

    /// Chunks registered (failed registrations not counted).
    pub fn chunks_registered(&self) -> usize {
        self.chunks.iter().filter(|c| !c.mr.is_null()).count()
    }

    pub fn comp_fd(&self) -> RawFd {
        // SAFETY: the channel is live while self is.
        unsafe { (*self.comp).fd }
    }

    /// Posts receive buffers `idx` (one chained post).
    pub fn post_recvs(&self, idx: &[u32], recv_bytes: usize) -> io::Result<()> {
        const CHUNK: usize = 32;
        for part in idx.chunks(CHUNK) {
            let mut sge = [sys::ibv_sge::default(); CHUNK];
            // SAFETY: ibv_recv_wr is plain data; zero is a valid value.
            let mut wr: [sys::ibv_recv_wr; CHUNK] = unsafe { std::mem::zeroed() };
            let n = part.len();
            for (k, &i) in part.iter().enumerate() {
                sge[k] = sys::ibv_sge {
                    addr: self.recv.addr(i as usize * recv_bytes),
                    length: recv_bytes as u32,
                    lkey: self.recv.lkey(),
                };
            }
            for k in 0..n {
                wr[k].wr_id = part[k] as u64;
                wr[k].sg_list = &mut sge[k];
                wr[k].num_sge = 1;
                wr[k].next = if k + 1 < n {
                    &mut wr[k + 1]
                } else {
                    null_mut()
                };
            }
            let mut bad = null_mut();
            // SAFETY: the QP is live; the chain and its SGEs are valid for
            // the call (the provider copies them); the buffers belong to the
            // registered receive region.
            check(unsafe { sys::ibv_post_recv((*self.id).qp, wr.as_mut_ptr(), &mut bad) })?;
        }
        Ok(())
    }

    /// Posts a chain of send work requests.
    pub fn post_send(&self, first: *mut sys::ibv_send_wr) -> io::Result<()> {
        let mut bad = null_mut();
        // SAFETY: the QP is live; the caller built a valid chain whose SGEs
        // name registered memory of this queue (or inline data).
        check(unsafe { sys::ibv_post_send((*self.id).qp, first, &mut bad) })
    }

    /// Polls up to `wc.len()` completions.
    pub fn poll(&self, wc: &mut [sys::ibv_wc]) -> usize {
        // SAFETY: the CQ is live; `wc` has room for the count asked.
        let n = unsafe { sys::ibv_poll_cq(self.cq, wc.len() as i32, wc.as_mut_ptr()) };
        n.max(0) as usize
    }

    /// Re-arms the CQ's notification.
    pub fn arm(&self) -> io::Result<()> {
        // SAFETY: live CQ.
        check(unsafe { sys::ibv_req_notify_cq(self.cq, 0) })
    }

    /// Takes every pending completion-channel event; returns how many.
    pub fn take_cq_events(&self) -> u32 {
        take_cq_events(self.comp, self.cq)
    }

    /// Asks the CM to disconnect (the QP goes to error and flushes).
    pub fn disconnect(&self) {
        // SAFETY: live id; a second call only fails with EINVAL.
        unsafe { sys::rdma_disconnect(self.id) };
    }

    fn release(&mut self, destroy_id: bool) {
        // SAFETY: each object is destroyed once, dependents first: QP, then
        // the MRs and CQ, the channel, the PD, and the id.
        unsafe {
            if self.qp_created {
                sys::rdma_destroy_qp(self.id);
                self.qp_created = false;
            }
            // Dereg before the PD goes; the buffers and the chunk handles
            // keep the memory until drop.
            let regions = [&mut self.recv, &mut self.cqes, &mut self.stage];
            let mrs = regions.into_iter().map(|r| &mut r.mr);
            for mr in mrs.chain(self.chunks.iter_mut().map(|c| &mut c.mr)) {
                if !mr.is_null() {
                    sys::ibv_dereg_mr(*mr);
                    *mr = null_mut();
                }
            }
            if !self.cq.is_null() {
                sys::ibv_destroy_cq(self.cq);
                self.cq = null_mut();
            }
            if !self.comp.is_null() {
                sys::ibv_destroy_comp_channel(self.comp);
                self.comp = null_mut();
            }
            if !self.pd.is_null() {
                sys::ibv_dealloc_pd(self.pd);
                self.pd = null_mut();
            }
            if destroy_id && !self.id.is_null() {
                sys::rdma_destroy_id(self.id);
                self.id = null_mut();
            }
        }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        self.release(true);
    }
}

/// Rejects a connection request with private data `pd`.
/// Takes every pending event of the non-blocking completion channel `comp`
/// (whose events name `cq`) and acknowledges them; returns how many.
pub(crate) fn take_cq_events(comp: *mut sys::ibv_comp_channel, cq: *mut sys::ibv_cq) -> u32 {
    let mut n = 0;
    loop {
        let mut ev_cq = null_mut();
        let mut ctx = null_mut();
        // SAFETY: the caller's channel is live and non-blocking; an event
        // names the caller's CQ.
        if unsafe { sys::ibv_get_cq_event(comp, &mut ev_cq, &mut ctx) } != 0 {
            break;
        }
        n += 1;
    }
    if n > 0 {
        // SAFETY: acknowledges the events just taken from `cq`.
        unsafe { sys::ibv_ack_cq_events(cq, n) };
    }
    n
}

pub(crate) fn reject(id: *mut sys::rdma_cm_id, pd: &[u8]) {
    // SAFETY: a live id of a connection request; the private data is
    // copied by the call.
    unsafe { sys::rdma_reject(id, pd.as_ptr() as *const _, pd.len() as u8) };
}

/// Rejects and destroys an id still on the listener's channel.
pub(crate) fn reject_and_destroy(id: *mut sys::rdma_cm_id, pd: &[u8]) {
    reject(id, pd);
    // SAFETY: the id's events are acked; it is not used again.
    unsafe { sys::rdma_destroy_id(id) };
}
