//! Controller bring-up and admin operations (Base §3.5.1 "Controller
//! Initialization"; the association, Base 2.3 §3.1.2 "Message-Based Controller
//! Architecture (Fabrics)"): ICReq, admin Connect with
//! CNTLID FFFFh, Property Get CAP/VS, CC.EN=1, CSTS.RDY within CAP.TO,
//! Identify Controller, Set Features Number of Queues; then log pages,
//! Keep Alive, I/O queues and a clean shutdown (CC.SHN).

use crate::admin::{AdminQueue, ADMIN_MAX_DATA};
use crate::cmd;
use crate::discovery;
use crate::error::{HostError, Result};
use crate::info::ControllerInfo;
use crate::io_queue::{IoQueue, IoQueueOptions};
use crate::keepalive::KeepAlive;
use crate::logs::{SmartLog, SMART_LEN};
use crate::options::ConnectOptions;
use farflash_wire::discovery::DiscEntry;
use farflash_wire::identify::{decode_ns_descriptors, IdCtrl, IdNs, IDENTIFY_LEN};
use farflash_wire::opcode::{cns, feature, log_id};
use farflash_wire::props::{self, cc, csts};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A connected, enabled controller. The admin queue sits behind a mutex
/// shared with the keep-alive thread; I/O queues are separate connections.
pub struct Controller {
    admin: Arc<Mutex<AdminQueue>>,
    info: ControllerInfo,
    opts: ConnectOptions,
    ka: Option<KeepAlive>,
    shut_down: bool,
}

/// How many I/O queues to ask for when the caller does not say.
pub const DEFAULT_IO_QUEUES: u16 = 64;

impl Controller {
    /// Connects and enables a controller, asking for `DEFAULT_IO_QUEUES` I/O queues.
    pub fn connect(opts: &ConnectOptions) -> Result<Controller> {
        Self::connect_with_queues(opts, DEFAULT_IO_QUEUES)
    }

    /// Connects and enables a controller, asking for `nr_io_queues` I/O queues.
    pub fn connect_with_queues(opts: &ConnectOptions, nr_io_queues: u16) -> Result<Controller> {
        let mut aq = AdminQueue::open(opts)?;
        match bring_up(&mut aq, opts, nr_io_queues) {
            Ok(info) => Ok(Controller {
                admin: Arc::new(Mutex::new(aq)),
                info,
                opts: opts.clone(),
                ka: None,
                shut_down: false,
            }),
            Err(e) => {
                aq.close();
                Err(e)
            }
        }
    }

    pub fn info(&self) -> &ControllerInfo {
        &self.info
    }
    pub fn options(&self) -> &ConnectOptions {
        &self.opts
    }

    fn admin(&self) -> Result<MutexGuard<'_, AdminQueue>> {
        self.admin
            .lock()
            .map_err(|_| HostError::Controller("admin queue lock poisoned".into()))
    }

    /// Starts the keep-alive thread (every KATO/2); a no-op when KATO is 0.
    pub fn start_keep_alive(&mut self) -> Result<()> {
        if self.opts.kato_ms == 0 || self.ka.is_some() {
            return Ok(());
        }
        let period = Duration::from_millis((self.opts.kato_ms / 2).max(100) as u64);
        self.ka = Some(KeepAlive::spawn(self.admin.clone(), period)?);
        Ok(())
    }

    /// The keep-alive thread's failure, if it stopped on an error.
    pub fn keep_alive_failure(&self) -> Option<String> {
        self.ka.as_ref().and_then(KeepAlive::failure)
    }

    /// Sends one Keep Alive now (for callers that drive their own timer
    /// every [`Controller::keep_alive_period`]).
    pub fn keep_alive(&self) -> Result<()> {
        self.admin()?
            .run(cmd::keep_alive(), "Keep Alive")
            .map(|_| ())
    }

    /// KATO/2, or `None` when KATO is 0.
    pub fn keep_alive_period(&self) -> Option<Duration> {
        (self.opts.kato_ms > 0).then(|| Duration::from_millis(self.opts.kato_ms as u64 / 2))
    }

    /// Identify with `cns` for `nsid` (4096 bytes).
    pub fn identify(&self, cns_value: u8, nsid: u32) -> Result<Vec<u8>> {
        let d = self.admin()?.read(
            cmd::identify(cns_value, nsid),
            IDENTIFY_LEN as u32,
            "Identify",
        )?;
        if d.len() < IDENTIFY_LEN {
            return Err(HostError::Controller("short Identify data".into()));
        }
        Ok(d)
    }

    pub fn identify_ns(&self, nsid: u32) -> Result<IdNs> {
        Ok(IdNs::decode(&self.identify(cns::NAMESPACE, nsid)?))
    }

    /// Namespace Identification Descriptors (CNS 03h) as (NIDT, value).
    pub fn ns_descriptors(&self, nsid: u32) -> Result<Vec<(u8, Vec<u8>)>> {
        Ok(decode_ns_descriptors(
            &self.identify(cns::NS_ID_DESCRIPTORS, nsid)?,
        ))
    }

    /// Active namespace IDs (CNS 02h), the first 1024.
    pub fn active_namespaces(&self) -> Result<Vec<u32>> {
        let d = self.identify(cns::ACTIVE_NS_LIST, 0)?;
        Ok(d.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .take_while(|&n| n != 0)
            .collect())
    }

    /// Get Log Page `lid` for `nsid`: `len` bytes from byte `offset`, in
    /// pieces no larger than MDTS.
    pub fn get_log_page(&self, lid: u8, nsid: u32, len: u32, offset: u64) -> Result<Vec<u8>> {
        let chunk = self.info.max_transfer().min(ADMIN_MAX_DATA) & !3;
        let mut out = Vec::with_capacity(len as usize);
        let mut a = self.admin()?;
        while (out.len() as u32) < len {
            let n = (len - out.len() as u32).min(chunk);
            let d = a.read(
                cmd::get_log_page(lid, nsid, n, offset + out.len() as u64),
                n,
                "Get Log Page",
            )?;
            out.extend_from_slice(&d);
        }
        Ok(out)
    }

    /// SMART / Health Information (log 02h), controller-wide (NSID FFFFFFFFh).
    pub fn smart_log(&self) -> Result<SmartLog> {
        let d = self.get_log_page(log_id::SMART, 0xFFFF_FFFF, SMART_LEN as u32, 0)?;
        SmartLog::decode(&d).ok_or_else(|| HostError::Controller("short SMART log".into()))
    }

    /// The discovery log (log 70h): header, whole log, re-read if GENCTR changed.
    pub fn discovery_log(&self) -> Result<(u64, Vec<DiscEntry>)> {
        discovery::read_log(|len, off| self.get_log_page(log_id::DISCOVERY, 0, len, off))
    }

    /// Set Features; returns DW0 of the completion.
    pub fn set_features(&self, fid: u8, cdw11: u32) -> Result<u32> {
        self.admin()?
            .run(cmd::set_features(fid, cdw11), "Set Features")
    }

    /// Get Features (current value); returns DW0.
    pub fn get_features(&self, fid: u8) -> Result<u32> {
        self.admin()?.run(cmd::get_features(fid), "Get Features")
    }

    /// Runs a new DH-HMAC-CHAP transaction on the admin queue (Base
    /// §8.13: a host may re-authenticate a queue at any time).
    pub fn reauthenticate(&self) -> Result<()> {
        self.admin()?.authenticate(&self.opts)
    }

    /// Opens I/O queue `qid` (1..=io_queues) on a new connection.
    pub fn io_queue(&self, qid: u16, opts: IoQueueOptions) -> Result<IoQueue> {
        IoQueue::connect(&self.opts, &self.info, qid, opts)
    }

    /// Normal shutdown (Base §3.6.1): CC.SHN=01b, wait for CSTS.SHST=10b
    /// within CAP.TO, then close the admin connection. I/O queues should be
    /// dropped first.
    pub fn shutdown(mut self) -> Result<()> {
        self.shutdown_inner()
    }

    fn shutdown_inner(&mut self) -> Result<()> {
        if self.shut_down {
            return Ok(());
        }
        self.shut_down = true;
        self.ka = None; // stops and joins the keep-alive thread
        let timeout = self.info.ready_timeout().max(Duration::from_secs(1));
        let mut a = self.admin()?;
        let r = (|| {
            a.property_set(props::CC, cc::ENABLE_DEFAULT | cc::SHN_NORMAL)?;
            let deadline = Instant::now() + timeout;
            loop {
                let s = a.property_get(props::CSTS, false)? as u32;
                if s & csts::SHST_MASK == csts::SHST_COMPLETE {
                    return Ok(());
                }
                if Instant::now() >= deadline {
                    return Err(HostError::Timeout("CSTS.SHST shutdown complete"));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })();
        a.close();
        r
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.shutdown_inner();
    }
}

fn bring_up(
    aq: &mut AdminQueue,
    opts: &ConnectOptions,
    nr_io_queues: u16,
) -> Result<ControllerInfo> {
    let maxh2cdata = aq.transport().maxh2cdata();
    let cntlid = aq.connect(opts)?;
    let cap = aq.property_get(props::CAP, true)?;
    let vs = aq.property_get(props::VS, false)? as u32;
    let mut info = ControllerInfo {
        cntlid,
        cap,
        vs,
        id: IdCtrl::default(),
        io_queues: 0,
        maxh2cdata,
    };
    // Base §3.5.1 steps: CC with IOSQES=6 (64 B), IOCQES=4 (16 B), CSS NVM, MPS 4 KiB, EN=1.
    aq.property_set(props::CC, cc::ENABLE_DEFAULT)?;
    let deadline = Instant::now() + info.ready_timeout();
    loop {
        let s = aq.property_get(props::CSTS, false)? as u32;
        if s & csts::CFS != 0 {
            return Err(HostError::Controller(
                "controller fatal status (CSTS.CFS)".into(),
            ));
        }
        if s & csts::RDY != 0 {
            break;
        }
        if Instant::now() >= deadline {
            return Err(HostError::Timeout("CSTS.RDY within CAP.TO"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let d = aq.read(
        cmd::identify(cns::CONTROLLER, 0),
        IDENTIFY_LEN as u32,
        "Identify Controller",
    )?;
    if d.len() < IDENTIFY_LEN {
        return Err(HostError::Controller(
            "short Identify Controller data".into(),
        ));
    }
    info.id = IdCtrl::decode(&d);
    // The Linux host rejects a CNTLID that differs from Connect's (core.c).
    if info.id.cntlid != cntlid {
        return Err(HostError::Controller(format!(
            "Identify CNTLID {:#x} differs from Connect's {cntlid:#x}",
            info.id.cntlid
        )));
    }
    if info.id.icdoff != 0 {
        return Err(HostError::Controller("ICDOFF != 0 is not supported".into()));
    }
    if !opts.is_discovery() && !info.is_discovery() && nr_io_queues > 0 {
        // Set Features Number of Queues (Base §5.27.1.5): NSQR/NCQR 0's based;
        // DW0 returns NSQA (15:0) / NCQA (31:16), 0's based.
        let n = (nr_io_queues - 1) as u32;
        let dw0 = aq.run(
            cmd::set_features(feature::NUMBER_OF_QUEUES, n | n << 16),
            "Set Features Number of Queues",
        )?;
        let granted = (dw0 & 0xFFFF).min(dw0 >> 16) + 1;
        info.io_queues = granted.min(nr_io_queues as u32) as u16;
    }
    Ok(info)
}
