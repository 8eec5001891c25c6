//! A hostile NVMe/RDMA host for the VM test (tests/interop_rdma.rs, run in
//! the guest by tests/linux-host/guest/rdma-farflash-target.sh):
//! `rdma_cm_probe ADDR:PORT` connects to an NVMe/RDMA target with bad CM
//! private data (RECFMT, QID, HSQSIZE, HRQSIZE) and checks the reject's STS (RDMA Transport Spec 1.0 §3.2),
//! then connects properly and misbehaves on the established queue (a
//! message larger than the target's receive buffers; a Connect whose keyed
//! SGL names a key the target may not use; a disconnect right after the
//! connect) and checks that the target disconnects that queue, and that it
//! still accepts a queue after a host destroyed its own mid-transfer. With
//! `rdma_cm_probe ADDR:PORT NQN`, also on I/O queues of a controller of
//! subsystem NQN (namespace 1 is written): a host that destroys its QP with
//! many RDMA READs of large writes in flight, and a bad key on one I/O queue
//! while another queue of the same controller carries verified traffic.
//! Prints `PASS: probe-…` / `FAIL: probe-…` lines; exits 1 if any failed.

mod nvme;

use farflash_rdma::cm::{CmRequest, CM_REQ_LEN};
use farflash_rdma::sgl::KeyedSgl;
use farflash_rdma_sys as sys;
use nvme::{Queue, DATA_AT};
use std::net::SocketAddr;
use std::ptr::null_mut;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(15);

struct Ev {
    kind: u32,
    status: i32,
    private: Vec<u8>,
}

/// One CM id on its own blocking event channel, with a QP once connected.
struct Client {
    ch: *mut sys::rdma_event_channel,
    id: *mut sys::rdma_cm_id,
    pd: *mut sys::ibv_pd,
    cq: *mut sys::ibv_cq,
    mr: *mut sys::ibv_mr,
    buf: Box<[u8]>,
}

impl Client {
    /// Resolves `addr` and creates a QP (send and receive queues of 4).
    fn new(addr: SocketAddr) -> Result<Client, String> {
        Client::with(addr, 4096, 4)
    }

    /// As [`Client::new`] with `mem` bytes of registered memory and queues
    /// of `depth` entries.
    fn with(addr: SocketAddr, mem: usize, depth: u32) -> Result<Client, String> {
        // SAFETY: plain librdmacm calls on objects created here; each
        // result is checked before use.
        unsafe {
            let ch = sys::rdma_create_event_channel();
            if ch.is_null() {
                return Err("rdma_create_event_channel failed".into());
            }
            let mut id = null_mut();
            if sys::rdma_create_id(ch, &mut id, null_mut(), sys::RDMA_PS_TCP) != 0 {
                return Err("rdma_create_id failed".into());
            }
            let mut c = Client {
                ch,
                id,
                pd: null_mut(),
                cq: null_mut(),
                mr: null_mut(),
                buf: vec![0u8; mem].into_boxed_slice(),
            };
            let mut ss = sockaddr(addr);
            if sys::rdma_resolve_addr(
                id,
                null_mut(),
                &mut ss as *mut _ as *mut sys::sockaddr,
                2000,
            ) != 0
            {
                return Err("rdma_resolve_addr failed".into());
            }
            c.expect(sys::RDMA_CM_EVENT_ADDR_RESOLVED)?;
            if sys::rdma_resolve_route(id, 2000) != 0 {
                return Err("rdma_resolve_route failed".into());
            }
            c.expect(sys::RDMA_CM_EVENT_ROUTE_RESOLVED)?;
            c.pd = sys::ibv_alloc_pd((*id).verbs);
            c.cq = sys::ibv_create_cq((*id).verbs, 2 * depth as i32 + 8, null_mut(), null_mut(), 0);
            if c.pd.is_null() || c.cq.is_null() {
                return Err("PD or CQ creation failed".into());
            }
            let mut attr = sys::ibv_qp_init_attr {
                send_cq: c.cq,
                recv_cq: c.cq,
                qp_type: sys::IBV_QPT_RC,
                cap: sys::ibv_qp_cap {
                    max_send_wr: depth,
                    max_recv_wr: depth,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                ..Default::default()
            };
            if sys::rdma_create_qp(id, c.pd, &mut attr) != 0 {
                return Err("rdma_create_qp failed".into());
            }
            let access = sys::IBV_ACCESS_LOCAL_WRITE
                | sys::IBV_ACCESS_REMOTE_READ
                | sys::IBV_ACCESS_REMOTE_WRITE;
            c.mr = sys::ibv_reg_mr(c.pd, c.buf.as_mut_ptr() as *mut _, mem, access as i32);
            if c.mr.is_null() {
                return Err("ibv_reg_mr failed".into());
            }
            Ok(c)
        }
    }

    /// The next CM event within TIMEOUT.
    fn event(&self) -> Option<Ev> {
        // SAFETY: poll on the channel's fd, then take and ack one event,
        // copying its private data first.
        unsafe {
            let mut p = libc::pollfd {
                fd: (*self.ch).fd,
                events: libc::POLLIN,
                revents: 0,
            };
            if libc::poll(&mut p, 1, TIMEOUT.as_millis() as i32) != 1 {
                return None;
            }
            let mut ev = null_mut();
            if sys::rdma_get_cm_event(self.ch, &mut ev) != 0 {
                return None;
            }
            let c = &(*ev).param.conn;
            let private = if c.private_data.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(c.private_data as *const u8, c.private_data_len as usize)
                    .to_vec()
            };
            let e = Ev {
                kind: (*ev).event,
                status: (*ev).status,
                private,
            };
            sys::rdma_ack_cm_event(ev);
            Some(e)
        }
    }

    fn expect(&self, kind: u32) -> Result<Ev, String> {
        match self.event() {
            Some(e) if e.kind == kind => Ok(e),
            Some(e) => Err(format!(
                "CM event {} (status {}), want {kind}",
                e.kind, e.status
            )),
            None => Err(format!("no CM event within {TIMEOUT:?}, want {kind}")),
        }
    }

    /// rdma_connect with `private` as the private data.
    fn connect(&self, private: &[u8]) -> Result<(), String> {
        // SAFETY: rdma_conn_param is plain data; the private data outlives
        // the call, which copies it.
        unsafe {
            let mut p: sys::rdma_conn_param = std::mem::zeroed();
            p.private_data = private.as_ptr() as *const _;
            p.private_data_len = private.len() as u8;
            p.responder_resources = 4;
            p.initiator_depth = 4;
            p.flow_control = 1;
            p.retry_count = 7;
            p.rnr_retry_count = 7;
            if sys::rdma_connect(self.id, &mut p) != 0 {
                return Err("rdma_connect failed".into());
            }
        }
        Ok(())
    }

    /// SENDs the first `len` bytes of the buffer.
    fn send(&mut self, len: usize) -> Result<(), String> {
        self.send_at(0, len)
    }

    /// SENDs `len` bytes of the buffer from offset `off`.
    fn send_at(&self, off: usize, len: usize) -> Result<(), String> {
        // SAFETY: one SGE into our registered buffer; the WR is copied by
        // the provider.
        unsafe {
            let mut sge = sys::ibv_sge {
                addr: self.buf.as_ptr() as u64 + off as u64,
                length: len as u32,
                lkey: (*self.mr).lkey,
            };
            let mut wr: sys::ibv_send_wr = std::mem::zeroed();
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            wr.opcode = sys::IBV_WR_SEND;
            wr.send_flags = sys::IBV_SEND_SIGNALED;
            let mut bad = null_mut();
            if sys::ibv_post_send((*self.id).qp, &mut wr, &mut bad) != 0 {
                return Err("ibv_post_send failed".into());
            }
        }
        Ok(())
    }

    fn rkey(&self) -> u32 {
        // SAFETY: the MR is live.
        unsafe { (*self.mr).rkey }
    }

    fn disconnect(&self) {
        // SAFETY: a live id.
        unsafe { sys::rdma_disconnect(self.id) };
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // SAFETY: each object created in `new` is destroyed once, in order.
        unsafe {
            if !(*self.id).qp.is_null() {
                sys::rdma_destroy_qp(self.id);
            }
            if !self.mr.is_null() {
                sys::ibv_dereg_mr(self.mr);
            }
            if !self.cq.is_null() {
                sys::ibv_destroy_cq(self.cq);
            }
            if !self.pd.is_null() {
                sys::ibv_dealloc_pd(self.pd);
            }
            sys::rdma_destroy_id(self.id);
            sys::rdma_destroy_event_channel(self.ch);
        }
    }
}

fn sockaddr(a: SocketAddr) -> libc::sockaddr_in {
    let SocketAddr::V4(a) = a else {
        panic!("IPv4 only");
    };
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// An admin queue Fabrics Connect whose 1024 bytes of data are at `addr`
/// under `key` (keyed SGL).
fn connect_sqe(addr: u64, key: u32) -> [u8; 64] {
    let mut sqe = [0u8; 64];
    sqe[0] = 0x7F; // Fabrics
    sqe[1] = 0x40; // PSDT 01b: SGL
    sqe[4] = 0x01; // fctype Connect
    let d = KeyedSgl {
        addr,
        length: 1024,
        key,
        invalidate: false,
    }
    .encode();
    sqe[24..40].copy_from_slice(&d);
    sqe[44..46].copy_from_slice(&31u16.to_le_bytes()); // SQSIZE (RECFMT 0)
    sqe
}

fn req(qid: u16, hrqsize: u16, hsqsize: u16) -> [u8; CM_REQ_LEN] {
    CmRequest {
        recfmt: 0,
        qid,
        hrqsize,
        hsqsize,
        cntlid: 0xFFFF,
    }
    .encode()
}

/// Connects with `private` and expects a reject carrying STS `sts`.
fn rejected(addr: SocketAddr, private: &[u8], sts: u16) -> Result<(), String> {
    let c = Client::new(addr)?;
    c.connect(private)?;
    let e = c.expect(sys::RDMA_CM_EVENT_REJECTED)?;
    if e.private.len() < 4 {
        return Err(format!("reject private data {:?}", e.private));
    }
    let got = u16::from_le_bytes([e.private[2], e.private[3]]);
    if got != sts {
        return Err(format!("STS {got:#x}, want {sts:#x}"));
    }
    Ok(())
}

/// An established admin queue on which `act` misbehaves; the target must
/// disconnect it.
fn closed_by_target(
    addr: SocketAddr,
    act: impl FnOnce(&mut Client) -> Result<(), String>,
) -> Result<(), String> {
    let mut c = Client::new(addr)?;
    c.connect(&req(0, 32, 31))?;
    c.expect(sys::RDMA_CM_EVENT_ESTABLISHED)?;
    act(&mut c)?;
    c.expect(sys::RDMA_CM_EVENT_DISCONNECTED)?;
    Ok(())
}

/// A 4 KiB write at byte `pos` of namespace 1, read back and compared.
fn verified_io(q: &mut Queue, bs: usize, pos: u64) -> Result<(), String> {
    for (k, b) in q.c.buf[DATA_AT..DATA_AT + 4096].iter_mut().enumerate() {
        *b = (k * 31 + pos as usize / 4096) as u8;
    }
    let key = q.c.rkey();
    for (write, off) in [(true, DATA_AT), (false, DATA_AT + 4096)] {
        q.rw(write, pos, 4096, bs, off, key)?;
        let c = q.next_cqe()?;
        if c.status != farflash_wire::Status::SUCCESS {
            return Err(format!(
                "{} on a fresh queue: {:?}",
                if write { "Write" } else { "Read" },
                c.status
            ));
        }
    }
    if q.c.buf[DATA_AT..DATA_AT + 4096] != q.c.buf[DATA_AT + 4096..DATA_AT + 8192] {
        return Err("read back other data than written".into());
    }
    Ok(())
}

/// 16 writes of 128 KiB (each one RDMA READ by the target) sent on an I/O
/// queue, then its QP, memory region and id destroyed at once: the
/// target's READs fail, that queue closes, and the controller takes a new
/// I/O queue that carries verified data.
fn io_destroy_with_reads_in_flight(addr: SocketAddr, nqn: &str) -> Result<(), String> {
    const N: usize = 16;
    const LEN: usize = 128 << 10;
    let (mut admin, cntlid) = Queue::admin(addr, nqn)?;
    let bs = admin.block_size()?;
    let (mut q, _) = Queue::connect(addr, nqn, 1, cntlid, DATA_AT + N * LEN)?;
    let key = q.c.rkey();
    for k in 0..N {
        q.rw(true, (k * LEN) as u64, LEN, bs, DATA_AT + k * LEN, key)?;
    }
    drop(q);
    let (mut again, _) = Queue::connect(addr, nqn, 2, cntlid, DATA_AT + 8192)?;
    verified_io(&mut again, bs, 4 << 20)
}

/// Two I/O queues of one controller: 8 writes of 64 KiB in flight on the
/// first while the second sends a write whose keyed SGL names a key that
/// is not its own. The second is disconnected; the first's writes
/// complete and read back as written.
fn io_bad_key_beside_traffic(addr: SocketAddr, nqn: &str) -> Result<(), String> {
    const N: usize = 8;
    const LEN: usize = 64 << 10;
    const POS: usize = 8 << 20;
    let (mut admin, cntlid) = Queue::admin(addr, nqn)?;
    let bs = admin.block_size()?;
    let (mut good, _) = Queue::connect(addr, nqn, 1, cntlid, DATA_AT + 2 * N * LEN)?;
    let (mut bad, _) = Queue::connect(addr, nqn, 2, cntlid, DATA_AT + LEN)?;
    for (k, b) in good.c.buf[DATA_AT..DATA_AT + N * LEN]
        .iter_mut()
        .enumerate()
    {
        *b = (k * 7 + k / 4096) as u8;
    }
    let key = good.c.rkey();
    for k in 0..N {
        good.rw(
            true,
            (POS + k * LEN) as u64,
            LEN,
            bs,
            DATA_AT + k * LEN,
            key,
        )?;
    }
    let wrong = bad.c.rkey() ^ 0x5A5A_0000;
    bad.rw(true, (POS + N * LEN) as u64, LEN, bs, DATA_AT, wrong)?;
    for _ in 0..N {
        let c = good.next_cqe()?;
        if c.status != farflash_wire::Status::SUCCESS {
            return Err(format!("Write beside the bad queue: {:?}", c.status));
        }
    }
    bad.c.expect(sys::RDMA_CM_EVENT_DISCONNECTED)?;
    for k in 0..N {
        let off = DATA_AT + (N + k) * LEN;
        good.rw(false, (POS + k * LEN) as u64, LEN, bs, off, key)?;
    }
    for _ in 0..N {
        let c = good.next_cqe()?;
        if c.status != farflash_wire::Status::SUCCESS {
            return Err(format!("Read after the bad queue closed: {:?}", c.status));
        }
    }
    let (written, read) = good.c.buf[DATA_AT..DATA_AT + 2 * N * LEN].split_at(N * LEN);
    if written != read {
        return Err("read back other data than written".into());
    }
    Ok(())
}

fn main() {
    let addr: SocketAddr = match std::env::args().nth(1).map(|a| a.parse()) {
        Some(Ok(a)) => a,
        _ => {
            eprintln!("usage: rdma_cm_probe ADDR:PORT [NQN]");
            std::process::exit(2);
        }
    };
    let nqn = std::env::args().nth(2);
    if let Err(e) = sys::load() {
        eprintln!("rdma_cm_probe: {e}");
        std::process::exit(1);
    }
    let mut failed = false;
    let mut check = |name: &str, r: Result<(), String>| match r {
        Ok(()) => println!("PASS: probe-{name}"),
        Err(e) => {
            failed = true;
            println!("FAIL: probe-{name}: {e}");
        }
    };
    // (A Request shorter than 32 bytes cannot be sent over RoCE or IB: the
    // CM pads REQ private data to 56 bytes. cm.rs's unit test covers STS 01h.)
    let mut recfmt = req(1, 32, 31);
    recfmt[0] = 1;
    check("bad-recfmt", rejected(addr, &recfmt, 0x02));
    check("wrong-qid", rejected(addr, &req(1000, 32, 31), 0x03));
    check("bad-hsqsize", rejected(addr, &req(1, 8192, 4095), 0x04));
    check("bad-hrqsize", rejected(addr, &req(1, 8, 31), 0x05));
    // The admin queue's receive buffers hold 64 bytes: 256 do not fit.
    check("oversized-capsule", closed_by_target(addr, |c| c.send(256)));
    // A Fabrics Connect whose data (keyed SGL) names a key that is not
    // ours: the target's RDMA READ fails and it closes the queue.
    check(
        "bad-key",
        closed_by_target(addr, |c| {
            let sqe = connect_sqe(c.buf.as_ptr() as u64 + 1024, c.rkey() ^ 0x5A5A_0000);
            c.buf[..64].copy_from_slice(&sqe);
            c.send(64)
        }),
    );
    // A Connect whose data the target must RDMA READ from us, and our QP
    // and id destroyed right after the send (mid-transfer): the target may
    // not wait for it, and a new queue is accepted afterwards.
    check("destroy-mid-transfer", {
        Client::new(addr).and_then(|mut c| {
            c.connect(&req(0, 32, 31))?;
            c.expect(sys::RDMA_CM_EVENT_ESTABLISHED)?;
            let sqe = connect_sqe(c.buf.as_ptr() as u64 + 1024, c.rkey());
            c.buf[..64].copy_from_slice(&sqe);
            c.send(64)?;
            drop(c);
            let again = Client::new(addr)?;
            again.connect(&req(0, 32, 31))?;
            again.expect(sys::RDMA_CM_EVENT_ESTABLISHED)?;
            again.disconnect();
            again.expect(sys::RDMA_CM_EVENT_DISCONNECTED).map(|_| ())
        })
    });
    // Established, then gone at once: the target must just drop it.
    check("disconnect-at-once", {
        Client::new(addr).and_then(|c| {
            c.connect(&req(0, 32, 31))?;
            c.expect(sys::RDMA_CM_EVENT_ESTABLISHED)?;
            c.disconnect();
            c.expect(sys::RDMA_CM_EVENT_DISCONNECTED).map(|_| ())
        })
    });
    if let Some(nqn) = &nqn {
        check(
            "io-destroy-with-reads-in-flight",
            io_destroy_with_reads_in_flight(addr, nqn),
        );
        check(
            "io-bad-key-beside-traffic",
            io_bad_key_beside_traffic(addr, nqn),
        );
    }
    std::process::exit(failed as i32);
}
