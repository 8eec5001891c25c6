//! Just enough of an NVMe/RDMA host for the probe's I/O queue rows: Fabrics
//! Connect (admin and I/O queues of one controller), Property Set CC.EN,
//! Identify Namespace, Read and Write by keyed SGL into the client's
//! registered memory, each response a SEND into a posted receive buffer.
//!
//! Memory of a [`Client`] used as a host: command capsules from 0, receive
//! buffers (one CQE each) from [`RECV_AT`], the Connect data at
//! [`CONNECT_AT`], data from [`DATA_AT`].

use crate::{req, Client, TIMEOUT};
use farflash_rdma::sgl::KeyedSgl;
use farflash_rdma_sys as sys;
use farflash_wire::cqe::CQE_SIZE;
use farflash_wire::fabrics::{ConnectCmd, ConnectData, PropertyCmd, CNTLID_DYNAMIC};
use farflash_wire::opcode::{admin, cns, fctype, io};
use farflash_wire::{props, Cqe, Sqe, Status};
use std::net::SocketAddr;
use std::ptr::null_mut;
use std::time::Instant;

/// Commands (and receive buffers) in flight per queue at most.
pub const DEPTH: u32 = 32;
pub const RECV_AT: usize = 4096;
pub const CONNECT_AT: usize = 8192;
pub const DATA_AT: usize = 65536;
/// wr_id of receive work requests: this plus the buffer's index.
const RECV_WR: u64 = 1 << 32;
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100";

/// One queue of a controller, as the host sees it.
pub struct Queue {
    pub c: Client,
    next_cid: u16,
}

impl Queue {
    /// Connects queue `qid` of controller `cntlid` (CNTLID_DYNAMIC: a new
    /// admin queue) of subsystem `nqn` with `mem` bytes of memory.
    pub fn connect(
        addr: SocketAddr,
        nqn: &str,
        qid: u16,
        cntlid: u16,
        mem: usize,
    ) -> Result<(Queue, u16), String> {
        let c = Client::with(addr, mem.max(DATA_AT), DEPTH)?;
        let mut q = Queue { c, next_cid: 0 };
        q.post_recvs(0..DEPTH)?;
        q.c.connect(&req(qid, DEPTH as u16, DEPTH as u16 - 1))?;
        q.c.expect(sys::RDMA_CM_EVENT_ESTABLISHED)?;
        ConnectData {
            hostid: [7; 16],
            cntlid,
            subnqn: nqn.into(),
            hostnqn: HOSTNQN.into(),
        }
        .encode(&mut q.c.buf[CONNECT_AT..CONNECT_AT + 1024]);
        let sqe = ConnectCmd {
            recfmt: 0,
            qid,
            sqsize: DEPTH as u16 - 1,
            cattr: 0,
            kato: 0,
        }
        .to_sqe(0);
        let key = q.c.rkey();
        let cqe = q.call(sqe, CONNECT_AT, 1024, key)?;
        if cqe.status != Status::SUCCESS {
            return Err(format!("Connect qid {qid}: {:?}", cqe.status));
        }
        Ok((q, cqe.dw0 as u16))
    }

    /// A new controller's admin queue, enabled (CC.EN); its CNTLID.
    pub fn admin(addr: SocketAddr, nqn: &str) -> Result<(Queue, u16), String> {
        let (mut q, cntlid) = Queue::connect(addr, nqn, 0, CNTLID_DYNAMIC, DATA_AT + 4096)?;
        let en = PropertyCmd {
            size8: false,
            offset: props::CC,
            value: props::cc::ENABLE_DEFAULT as u64,
        }
        .to_sqe(0, fctype::PROPERTY_SET);
        let cqe = q.call(en, 0, 0, 0)?;
        if cqe.status != Status::SUCCESS {
            return Err(format!("Property Set CC.EN: {:?}", cqe.status));
        }
        Ok((q, cntlid))
    }

    /// Namespace 1's block size (Identify Namespace: FLBAS, LBAF).
    pub fn block_size(&mut self) -> Result<usize, String> {
        let id = Sqe {
            opcode: admin::IDENTIFY,
            nsid: 1,
            cdw10: cns::NAMESPACE as u32,
            ..Sqe::default()
        };
        let key = self.c.rkey();
        let cqe = self.call(id, DATA_AT, 4096, key)?;
        if cqe.status != Status::SUCCESS {
            return Err(format!("Identify Namespace: {:?}", cqe.status));
        }
        let d = &self.c.buf[DATA_AT..DATA_AT + 4096];
        let f = (d[26] & 0x0F) as usize;
        let lbads = d[128 + 4 * f + 2];
        if !(9..=16).contains(&lbads) {
            return Err(format!("LBADS {lbads}"));
        }
        Ok(1 << lbads)
    }

    /// Sends Read or Write of `len` bytes at byte `pos` of namespace 1
    /// (block size `bs`), its data at `off` of our memory under `key`;
    /// returns its CID without waiting.
    pub fn rw(
        &mut self,
        write: bool,
        pos: u64,
        len: usize,
        bs: usize,
        off: usize,
        key: u32,
    ) -> Result<u16, String> {
        let slba = pos / bs as u64;
        let sqe = Sqe {
            opcode: if write { io::WRITE } else { io::READ },
            nsid: 1,
            cdw10: slba as u32,
            cdw11: (slba >> 32) as u32,
            cdw12: (len / bs) as u32 - 1,
            ..Sqe::default()
        };
        self.submit(sqe, off, len, key)
    }

    /// Sends `sqe` with a keyed SGL for `len` bytes at `off` (none when
    /// `len` is 0); returns its CID.
    fn submit(&mut self, mut sqe: Sqe, off: usize, len: usize, key: u32) -> Result<u16, String> {
        self.next_cid = self.next_cid.wrapping_add(1);
        sqe.cid = self.next_cid;
        let slot = (sqe.cid as usize % DEPTH as usize) * 64;
        let mut raw = [0u8; 64];
        sqe.encode(&mut raw);
        raw[1] = 0x40; // PSDT 01b: SGL
        if len > 0 {
            let d = KeyedSgl {
                addr: self.c.buf.as_ptr() as u64 + off as u64,
                length: len as u32,
                key,
                invalidate: false,
            }
            .encode();
            raw[24..40].copy_from_slice(&d);
        }
        self.c.buf[slot..slot + 64].copy_from_slice(&raw);
        self.c.send_at(slot, 64)?;
        Ok(sqe.cid)
    }

    /// One command, waited for.
    fn call(&mut self, sqe: Sqe, off: usize, len: usize, key: u32) -> Result<Cqe, String> {
        let cid = self.submit(sqe, off, len, key)?;
        let cqe = self.next_cqe()?;
        if cqe.cid != cid {
            return Err(format!("CQE for CID {}, want {cid}", cqe.cid));
        }
        Ok(cqe)
    }

    /// The next response (send completions are skipped; a failed one is
    /// an error); its receive buffer is posted again.
    pub fn next_cqe(&mut self) -> Result<Cqe, String> {
        let start = Instant::now();
        loop {
            // SAFETY: ibv_wc is plain data; the CQ is live.
            let mut wc: sys::ibv_wc = unsafe { std::mem::zeroed() };
            // SAFETY: the CQ is live; room for one completion.
            let n = unsafe { sys::ibv_poll_cq(self.c.cq, 1, &mut wc) };
            if n == 0 {
                if start.elapsed() > TIMEOUT {
                    return Err(format!("no response within {TIMEOUT:?}"));
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
                continue;
            }
            if n < 0 || wc.status != sys::IBV_WC_SUCCESS {
                return Err(format!("work completion status {}", wc.status));
            }
            if wc.wr_id < RECV_WR {
                continue;
            }
            let i = (wc.wr_id - RECV_WR) as u32;
            let at = RECV_AT + i as usize * CQE_SIZE;
            let mut raw = [0u8; CQE_SIZE];
            raw.copy_from_slice(&self.c.buf[at..at + CQE_SIZE]);
            self.post_recvs(i..i + 1)?;
            return Ok(Cqe::decode(&raw));
        }
    }

    fn post_recvs(&self, range: std::ops::Range<u32>) -> Result<(), String> {
        for i in range {
            let mut sge = sys::ibv_sge {
                addr: self.c.buf.as_ptr() as u64 + (RECV_AT + i as usize * CQE_SIZE) as u64,
                length: CQE_SIZE as u32,
                // SAFETY: the MR is live.
                lkey: unsafe { (*self.c.mr).lkey },
            };
            // SAFETY: ibv_recv_wr is plain data; zero is valid.
            let mut wr: sys::ibv_recv_wr = unsafe { std::mem::zeroed() };
            wr.wr_id = RECV_WR + i as u64;
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            let mut bad = null_mut();
            // SAFETY: the QP is live; the WR and its SGE outlive the call,
            // which copies them.
            if unsafe { sys::ibv_post_recv((*self.c.id).qp, &mut wr, &mut bad) } != 0 {
                return Err("ibv_post_recv failed".into());
            }
        }
        Ok(())
    }
}
