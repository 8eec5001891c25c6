//! The blocking admin queue: one command at a time, each bounded by the
//! command timeout. Used for controller bring-up, Identify, log pages,
//! features, Keep Alive and shutdown, and by the CLI commands.

use crate::cmd;
use crate::error::{HostError, Result};
use crate::options::ConnectOptions;
use crate::queue::{QueueConfig, ADMIN_ICD};
use crate::slot::{Completion, DataDir};
use crate::transport::{self, HostTransport};
use farflash_wire::fabrics::{ConnectData, CNTLID_DYNAMIC, CONNECT_DATA_LEN};
use farflash_wire::Sqe;
use std::time::{Duration, Instant};

/// Largest admin data transfer accepted from the network (a discovery log
/// of 4095 entries fits; larger logs are read in pieces).
pub const ADMIN_MAX_DATA: u32 = 4 << 20;

pub struct AdminQueue {
    conn: Box<dyn HostTransport>,
    timeout: Duration,
    /// Completions that arrived for commands nobody waits for any more.
    stray: Vec<Completion>,
}

impl AdminQueue {
    /// Connects queue 0 with the transport `opts` names (TCP: connect +
    /// ICReq/ICResp; RDMA: RDMA CM connect with QID 0).
    pub fn open(opts: &ConnectOptions) -> Result<AdminQueue> {
        let cfg = QueueConfig {
            depth: opts.admin_depth.max(2),
            slot_buf: 0,
            max_data: ADMIN_MAX_DATA,
            icd_max: ADMIN_ICD,
            hdgst: opts.hdr_digest,
            ddgst: opts.data_digest,
        };
        let conn = opts.open_queue(0, cfg)?;
        Ok(AdminQueue {
            conn,
            timeout: opts.command_timeout,
            stray: Vec::new(),
        })
    }

    /// The queue pair underneath (its transport).
    pub fn transport(&self) -> &dyn HostTransport {
        &*self.conn
    }

    /// Runs one command and waits for it. `out` is the data sent
    /// (ToCtrl); for FromCtrl `len` bytes are read into the returned Vec.
    pub fn execute(
        &mut self,
        sqe: Sqe,
        dir: DataDir,
        out: &[u8],
        len: u32,
        what: &'static str,
    ) -> Result<(Completion, Vec<u8>)> {
        let qp = &mut *self.conn;
        let cid = qp
            .alloc_cid()
            .ok_or_else(|| HostError::Invalid("admin queue full".into()))?;
        let len = match dir {
            DataDir::ToCtrl => out.len() as u32,
            DataDir::FromCtrl => len,
            DataDir::None => 0,
        };
        let prep = qp.ensure_buf(cid, len as usize).and_then(|()| {
            if dir == DataDir::ToCtrl {
                if let Some(b) = qp.buf_mut(cid) {
                    b[..out.len()].copy_from_slice(out);
                }
            }
            qp.submit(cid, sqe, dir, len)
        });
        if let Err(e) = prep {
            qp.release_cid(cid);
            return Err(e);
        }
        let deadline = Instant::now() + self.timeout;
        let c = transport::wait_for(&mut *self.conn, cid, deadline, what, &mut self.stray)?;
        self.stray.clear();
        let data = if dir == DataDir::FromCtrl {
            let n = (c.transferred as usize).min(len as usize);
            self.conn.buf(cid)[..n].to_vec()
        } else {
            Vec::new()
        };
        Ok((c, data))
    }

    /// Runs a command without data; Ok(DW0) on success.
    pub fn run(&mut self, sqe: Sqe, what: &'static str) -> Result<u32> {
        self.execute(sqe, DataDir::None, &[], 0, what)?.0.check()
    }

    /// Runs a command reading `len` bytes; returns them on success.
    pub fn read(&mut self, sqe: Sqe, len: u32, what: &'static str) -> Result<Vec<u8>> {
        let (c, d) = self.execute(sqe, DataDir::FromCtrl, &[], len, what)?;
        c.check()?;
        Ok(d)
    }

    /// Fabrics Connect of the admin queue (Fabrics §6.3): CNTLID FFFFh
    /// (dynamic controller model); returns the CNTLID the controller gave.
    pub fn connect(&mut self, opts: &ConnectOptions) -> Result<u16> {
        let data = ConnectData {
            hostid: opts.hostid,
            cntlid: CNTLID_DYNAMIC,
            subnqn: opts.subnqn.clone(),
            hostnqn: opts.hostnqn.clone(),
        };
        let mut b = [0u8; CONNECT_DATA_LEN];
        data.encode(&mut b);
        let kato = opts.kato_ms;
        let sqe = cmd::connect(0, opts.admin_depth.max(2), kato);
        let (c, _) = self.execute(sqe, DataDir::ToCtrl, &b, 0, "admin Connect")?;
        let dw0 = c.check()?;
        // Connect response DW0: CNTLID (15:0), AUTHREQ (17:16) (Fabrics §6.3).
        if crate::auth::needs_auth(opts, 0, dw0)? {
            self.authenticate(opts)?;
        }
        Ok(dw0 as u16)
    }

    /// One DH-HMAC-CHAP transaction on the admin queue (after Connect, or
    /// to re-authenticate).
    pub fn authenticate(&mut self, opts: &ConnectOptions) -> Result<()> {
        let al = crate::auth::AUTH_RECEIVE_LEN;
        crate::auth::authenticate(opts, 0, al, |sqe, data| match data {
            Some(d) => {
                let (c, _) = self.execute(sqe, DataDir::ToCtrl, d, 0, "Authentication Send")?;
                c.check().map(|_| Vec::new())
            }
            None => self.read(sqe, al, "Authentication Receive"),
        })
    }

    /// Property Get (Fabrics §6.4).
    pub fn property_get(&mut self, offset: u32, size8: bool) -> Result<u64> {
        let (c, _) = self.execute(
            cmd::property_get(offset, size8),
            DataDir::None,
            &[],
            0,
            "Property Get",
        )?;
        c.check()?;
        Ok(if size8 {
            (c.cqe.dw1 as u64) << 32 | c.cqe.dw0 as u64
        } else {
            c.cqe.dw0 as u64
        })
    }

    /// Property Set (Fabrics §6.5) of a 4-byte property.
    pub fn property_set(&mut self, offset: u32, value: u32) -> Result<()> {
        self.run(cmd::property_set(offset, value), "Property Set")
            .map(|_| ())
    }

    /// Closes the connection (best effort flush of queued bytes first).
    pub fn close(&mut self) {
        self.conn.close(Duration::from_millis(200));
    }
}
