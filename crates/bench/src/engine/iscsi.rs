//! Engine over an iSCSI LUN: one libiscsi session (one TCP connection) per
//! job, driven through libiscsi's asynchronous API. READ(16) / WRITE(16)
//! tasks carry each slot's buffer as a `scsi_iovec`, so libiscsi receives
//! read data straight into it and sends write data from it (no copy);
//! `iscsi_service` runs when poll(2) says the socket is ready. Completion
//! callbacks only record (slot, status) in a preallocated list that
//! [`Engine::poll`] turns into [`Done`]s, so latency is taken exactly where
//! the NVMe/TCP engine takes it: issue after `commit`, completion in `poll`.

use super::{Done, Engine, ErrorKind};
use anyhow::{bail, Context};
use farflash_iscsi_sys as sys;
use std::ffi::{c_int, c_void, CStr, CString};
use std::ptr;

/// Where an iSCSI LUN is: `iscsi://HOST:PORT/TARGET-IQN/LUN` (libiscsi's
/// URL form, without CHAP credentials).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IscsiTarget {
    /// `HOST:PORT` (`[v6]:PORT` for IPv6); the port defaults to 3260.
    pub portal: String,
    pub iqn: String,
    pub lun: u32,
    /// The initiator name this engine logs in with.
    pub initiator: String,
}

/// The initiator IQN used unless one is given.
pub const DEFAULT_INITIATOR: &str = "iqn.2026-01.invalid.farflash:perf";

impl IscsiTarget {
    /// Parses `iscsi://HOST[:PORT]/IQN/LUN`.
    pub fn parse(url: &str) -> anyhow::Result<IscsiTarget> {
        let rest = url
            .strip_prefix("iscsi://")
            .with_context(|| format!("iSCSI URL {url:?}: expected iscsi://HOST:PORT/IQN/LUN"))?;
        let mut parts = rest.splitn(3, '/');
        let host = parts.next().unwrap_or_default();
        let iqn = parts.next().unwrap_or_default();
        let lun = parts.next().unwrap_or_default();
        if host.is_empty() || iqn.is_empty() || lun.is_empty() {
            bail!("iSCSI URL {url:?}: expected iscsi://HOST:PORT/IQN/LUN");
        }
        if host.contains('@') {
            bail!("iSCSI URL {url:?}: CHAP credentials in the URL are not supported");
        }
        if host.starts_with('[') != host.contains(']') {
            bail!("iSCSI URL {url:?}: unbalanced [ ] around an IPv6 address");
        }
        let has_port = match host.rfind(']') {
            Some(b) => host[b..].contains(':'),
            None => host.contains(':'),
        };
        if has_port {
            let (name, port) = host.rsplit_once(':').unwrap_or_default();
            if name.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
                bail!("iSCSI URL {url:?}: bad portal {host:?} (HOST:PORT, port 1..65535)");
            }
        }
        let portal = if has_port {
            host.to_string()
        } else {
            format!("{host}:3260")
        };
        // iSCSI names (RFC 3720 3.2.6.2): no whitespace, '/' or NUL.
        if iqn.chars().any(|c| c.is_whitespace() || c == '\0') {
            bail!("iSCSI URL {url:?}: bad target name {iqn:?}");
        }
        let lun: u32 = lun
            .parse()
            .ok()
            .filter(|l| *l < 16384)
            .with_context(|| format!("iSCSI URL {url:?}: LUN {lun:?} is not 0..16383"))?;
        Ok(IscsiTarget {
            portal,
            iqn: iqn.to_string(),
            lun,
            initiator: DEFAULT_INITIATOR.to_string(),
        })
    }
}

impl std::fmt::Display for IscsiTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "iscsi://{}/{}/{}", self.portal, self.iqn, self.lun)
    }
}

/// The words for a failed task's status (SAM-5 status codes, libiscsi's
/// transport statuses) and sense (SPC-4 4.5: sense key, ASC/ASCQ).
pub fn describe(status: u32, key: u8, ascq: u16) -> String {
    match status {
        sys::scsi_status_SCSI_STATUS_CANCELLED => "iSCSI task cancelled (session lost)".into(),
        sys::scsi_status_SCSI_STATUS_ERROR => "iSCSI transport error".into(),
        sys::scsi_status_SCSI_STATUS_CHECK_CONDITION => {
            format!("SCSI CHECK CONDITION, sense key {key:#x}, ASC/ASCQ {ascq:#06x}")
        }
        s => format!("SCSI status {s:#x}"),
    }
}

/// Byte offset and length to (LBA, blocks) for a `block`-byte LUN; both
/// must be whole blocks (the job runner only asks for those).
pub fn to_blocks(offset: u64, len: u32, block: u32) -> Option<(u64, u32)> {
    let b = block as u64;
    if block == 0 || !offset.is_multiple_of(b) || !(len as u64).is_multiple_of(b) {
        return None;
    }
    Some((offset / b, len / block))
}

/// What one completion callback needs: which slot it is and where to record.
struct CbData {
    slot: u16,
    sink: *mut Vec<(u16, u32)>,
}

unsafe extern "C" fn on_complete(
    _iscsi: *mut sys::iscsi_context,
    status: c_int,
    _command_data: *mut c_void,
    private_data: *mut c_void,
) {
    // SAFETY: private_data is the &CbData of a slot in the engine's boxed
    // slice, alive until the context is destroyed (callbacks run only
    // inside iscsi_service / iscsi_destroy_context on this thread).
    let cb = unsafe { &*(private_data as *const CbData) };
    // SAFETY: sink points into the engine's boxed Vec, which outlives the
    // context; capacity is the depth, so this push does not allocate.
    unsafe { (*cb.sink).push((cb.slot, status as u32)) };
}

/// A connected session on one LUN.
struct Session {
    ctx: *mut sys::iscsi_context,
}

impl Session {
    fn error(&self) -> String {
        // SAFETY: ctx is live; iscsi_get_error returns a NUL-terminated
        // string owned by the context (or NULL).
        let p = unsafe { sys::iscsi_get_error(self.ctx) };
        if p.is_null() {
            return "unknown error".into();
        }
        // SAFETY: non-NULL, NUL-terminated, valid until the next call.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// Logs in to `t` (blocking, bounded by a 10 s timeout).
    fn connect(t: &IscsiTarget) -> anyhow::Result<Session> {
        let initiator = CString::new(t.initiator.as_str()).context("initiator name")?;
        let iqn = CString::new(t.iqn.as_str()).context("target name")?;
        let portal = CString::new(t.portal.as_str()).context("portal")?;
        // libiscsi is opened here, on first use: a machine without it runs
        // everything else, and this names the package to install.
        sys::load()?;
        // SAFETY: a NUL-terminated name; libiscsi copies it.
        let ctx = unsafe { sys::iscsi_create_context(initiator.as_ptr()) };
        if ctx.is_null() {
            bail!("iscsi_create_context failed");
        }
        let s = Session { ctx };
        // SAFETY: (the five calls) ctx is live and not connected; the
        // strings are NUL-terminated and copied by libiscsi.
        unsafe {
            sys::iscsi_set_targetname(ctx, iqn.as_ptr());
            sys::iscsi_set_session_type(ctx, sys::iscsi_session_type_ISCSI_SESSION_NORMAL);
            sys::iscsi_set_header_digest(ctx, sys::iscsi_header_digest_ISCSI_HEADER_DIGEST_NONE);
            // A lost session is an error for the benchmark, not a retry loop.
            sys::iscsi_set_noautoreconnect(ctx, 1);
            sys::iscsi_set_timeout(ctx, 10);
        }
        // SAFETY: ctx is live; portal is NUL-terminated.
        let rc = unsafe { sys::iscsi_full_connect_sync(ctx, portal.as_ptr(), t.lun as c_int) };
        if rc != 0 {
            bail!("iSCSI login to {t}: {}", s.error());
        }
        // I/O is asynchronous from here: no per-task timeout.
        // SAFETY: ctx is live.
        unsafe { sys::iscsi_set_timeout(ctx, 0) };
        Ok(s)
    }

    /// READ CAPACITY (16) (SBC-3 5.16): (block size, bytes).
    fn capacity(&self, lun: u32) -> anyhow::Result<(u32, u64)> {
        // SAFETY: ctx is live and logged in.
        let task = unsafe { sys::iscsi_readcapacity16_sync(self.ctx, lun as c_int) };
        if task.is_null() {
            bail!("READ CAPACITY (16): {}", self.error());
        }
        // SAFETY: task is a finished task we own; freed below once.
        let status = unsafe { (*task).status } as u32;
        let rc = if status == sys::scsi_status_SCSI_STATUS_GOOD {
            // SAFETY: a READ CAPACITY (16) task with data-in; NULL if short.
            let rc16 =
                unsafe { sys::scsi_datain_unmarshall(task) } as *const sys::scsi_readcapacity16;
            if rc16.is_null() {
                None
            } else {
                // SAFETY: non-NULL, allocated in the task's memory.
                let r = unsafe { &*rc16 };
                Some((r.block_length, r.returned_lba))
            }
        } else {
            None
        };
        // SAFETY: the task is ours and finished.
        unsafe { sys::scsi_free_scsi_task(task) };
        let Some((block, last_lba)) = rc else {
            bail!("READ CAPACITY (16) failed (status {status:#x})");
        };
        if !(512..=65536).contains(&block) || !block.is_power_of_two() {
            bail!("LUN {lun}: unsupported logical block length {block}");
        }
        Ok((
            block,
            last_lba.saturating_add(1).saturating_mul(block as u64),
        ))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.ctx.is_null() {
            return;
        }
        // SAFETY: ctx is live; logout is bounded by a short timeout, then
        // the context (and any task callbacks still queued) is torn down once.
        unsafe {
            sys::iscsi_set_timeout(self.ctx, 2);
            sys::iscsi_logout_sync(self.ctx);
            sys::iscsi_destroy_context(self.ctx);
        }
    }
}

/// Logs in once to read the LUN's block size and capacity.
pub fn probe(t: &IscsiTarget) -> anyhow::Result<(u32, u64)> {
    Session::connect(t)?.capacity(t.lun)
}

pub struct Iscsi {
    // Field order matters: the session (and so any callback) goes before
    // the buffers, callback data and sink it points into.
    session: Session,
    lun: u32,
    block_size: u32,
    capacity: u64,
    bufs: Box<[Box<[u8]>]>,
    iovs: Box<[sys::scsi_iovec]>,
    cbs: Box<[CbData]>,
    tasks: Box<[*mut sys::scsi_task]>,
    in_flight: Box<[bool]>,
    /// Handed out by `alloc_slot` and not yet released.
    taken: Box<[bool]>,
    free: Vec<u16>,
    // Boxed: callbacks hold a pointer to the Vec itself, which must not
    // move when the engine does.
    #[allow(clippy::box_collection)]
    sink: Box<Vec<(u16, u32)>>,
}

impl Iscsi {
    pub fn new(t: &IscsiTarget, depth: u16, max_io: u32) -> anyhow::Result<Iscsi> {
        let session = Session::connect(t)?;
        let (block_size, capacity) = session.capacity(t.lun)?;
        let mut sink = Box::new(Vec::with_capacity(depth as usize));
        let sink_ptr: *mut Vec<(u16, u32)> = &mut *sink;
        let n = depth as usize;
        Ok(Iscsi {
            session,
            lun: t.lun,
            block_size,
            capacity,
            bufs: (0..n).map(|_| vec![0u8; max_io as usize].into()).collect(),
            iovs: (0..n)
                .map(|_| sys::scsi_iovec {
                    iov_base: ptr::null_mut(),
                    iov_len: 0,
                })
                .collect(),
            cbs: (0..depth)
                .map(|slot| CbData {
                    slot,
                    sink: sink_ptr,
                })
                .collect(),
            tasks: vec![ptr::null_mut(); n].into(),
            in_flight: vec![false; n].into(),
            taken: vec![false; n].into(),
            free: (0..depth).rev().collect(),
            sink,
        })
    }

    /// Runs libiscsi for the socket events `timeout_ms` brings (0: none wait).
    fn service(&mut self, timeout_ms: c_int) -> anyhow::Result<()> {
        let ctx = self.session.ctx;
        // SAFETY: ctx is live.
        let (fd, events) = unsafe { (sys::iscsi_get_fd(ctx), sys::iscsi_which_events(ctx)) };
        if fd < 0 {
            bail!("iSCSI session lost: {}", self.session.error());
        }
        let mut p = libc::pollfd {
            fd,
            events: events as libc::c_short,
            revents: 0,
        };
        // SAFETY: one valid pollfd, count 1, bounded timeout.
        let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Ok(());
            }
            return Err(e).context("poll on the iSCSI socket");
        }
        if n > 0 {
            // SAFETY: ctx is live; callbacks only touch the sink and slots.
            if unsafe { sys::iscsi_service(ctx, p.revents as c_int) } < 0 {
                bail!("iSCSI session: {}", self.session.error());
            }
        }
        Ok(())
    }

    /// Turns the recorded callbacks into completions and frees their tasks.
    fn reap(&mut self, out: &mut Vec<Done>) -> usize {
        let n = self.sink.len();
        for (slot, status) in self.sink.drain(..) {
            let i = slot as usize;
            let task = std::mem::replace(&mut self.tasks[i], ptr::null_mut());
            let mut error = None;
            if status != sys::scsi_status_SCSI_STATUS_GOOD {
                let (key, ascq) = if task.is_null() {
                    (0, 0)
                } else {
                    // SAFETY: task is the live task this slot submitted.
                    let s = unsafe { &(*task).sense };
                    (s.key as u8, s.ascq as u16)
                };
                error = Some(ErrorKind::Scsi { status, key, ascq });
            } else if !task.is_null() {
                // SAFETY: as above; a short read or write is an error.
                let (residual_status, residual) =
                    unsafe { ((*task).residual_status, (*task).residual) };
                if residual_status != sys::scsi_residual_SCSI_RESIDUAL_NO_RESIDUAL && residual > 0 {
                    error = Some(ErrorKind::ShortTransfer);
                }
            }
            if !task.is_null() {
                // SAFETY: the task completed (its callback ran); freed once.
                unsafe { sys::scsi_free_scsi_task(task) };
            }
            self.in_flight[i] = false;
            out.push(Done { slot, error });
        }
        n
    }
}

impl Drop for Iscsi {
    fn drop(&mut self) {
        // Tasks still in flight (or completed, not reaped): tear the session
        // down first (callbacks run with CANCELLED), then free them. With
        // none, the Session's Drop logs out cleanly.
        if self.in_flight.iter().any(|&b| b) {
            // SAFETY: ctx is live; destroying cancels every outstanding task.
            unsafe {
                sys::iscsi_destroy_context(self.session.ctx);
            }
            // The Session's own Drop must not touch the destroyed context.
            self.session.ctx = ptr::null_mut();
        }
        for t in self.tasks.iter_mut() {
            if !t.is_null() {
                // SAFETY: submitted by this engine, cancelled above, freed once.
                unsafe { sys::scsi_free_scsi_task(*t) };
                *t = ptr::null_mut();
            }
        }
    }
}

impl Engine for Iscsi {
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn capacity(&self) -> u64 {
        self.capacity
    }
    fn alloc_slot(&mut self) -> Option<u16> {
        let s = self.free.pop()?;
        self.taken[s as usize] = true;
        Some(s)
    }
    fn buf_mut(&mut self, slot: u16) -> &mut [u8] {
        match self.bufs.get_mut(slot as usize) {
            Some(b) => b,
            None => &mut [],
        }
    }
    fn buf(&self, slot: u16) -> &[u8] {
        match self.bufs.get(slot as usize) {
            Some(b) => b,
            None => &[],
        }
    }
    fn submit(&mut self, slot: u16, write: bool, offset: u64, len: u32) -> anyhow::Result<()> {
        let i = slot as usize;
        if i >= self.bufs.len() || self.in_flight[i] {
            bail!("slot {slot} is not free");
        }
        if len as usize > self.bufs[i].len() {
            bail!(
                "{len} bytes exceed the slot's {} byte buffer",
                self.bufs[i].len()
            );
        }
        let Some((lba, _)) = to_blocks(offset, len, self.block_size) else {
            bail!(
                "I/O at {offset}+{len} is not in whole {}-byte blocks",
                self.block_size
            );
        };
        self.iovs[i] = sys::scsi_iovec {
            iov_base: self.bufs[i].as_mut_ptr().cast(),
            iov_len: len as usize,
        };
        let iov: *mut sys::scsi_iovec = &mut self.iovs[i];
        let cb: *mut c_void = (&self.cbs[i] as *const CbData).cast_mut().cast();
        let ctx = self.session.ctx;
        let bs = self.block_size as c_int;
        let lun = self.lun as c_int;
        // SAFETY: ctx is live; iov points at this slot's buffer and iovec,
        // both stable (boxed slices) and untouched until the completion is
        // reaped; cb is the slot's CbData, alive as long as the context.
        let task = unsafe {
            if write {
                sys::iscsi_write16_iov_task(
                    ctx,
                    lun,
                    lba,
                    ptr::null_mut(),
                    len,
                    bs,
                    0,
                    0,
                    0,
                    0,
                    0,
                    Some(on_complete),
                    cb,
                    iov,
                    1,
                )
            } else {
                sys::iscsi_read16_iov_task(
                    ctx,
                    lun,
                    lba,
                    len,
                    bs,
                    0,
                    0,
                    0,
                    0,
                    0,
                    Some(on_complete),
                    cb,
                    iov,
                    1,
                )
            }
        };
        if task.is_null() {
            bail!("queueing an iSCSI task: {}", self.session.error());
        }
        self.tasks[i] = task;
        self.in_flight[i] = true;
        Ok(())
    }
    fn commit(&mut self) -> anyhow::Result<()> {
        // libiscsi only queues PDUs; write them now if the socket takes them.
        // SAFETY: ctx is live.
        if unsafe { sys::iscsi_out_queue_length(self.session.ctx) } > 0 {
            self.service(0)?;
        }
        Ok(())
    }
    fn poll(&mut self, out: &mut Vec<Done>) -> anyhow::Result<usize> {
        if self.sink.is_empty() {
            self.service(0)?;
        }
        Ok(self.reap(out))
    }
    fn wait(&mut self, out: &mut Vec<Done>) -> anyhow::Result<usize> {
        let n = self.poll(out)?;
        if n > 0 {
            return Ok(n);
        }
        if self.sink.is_empty() {
            self.service(100)?;
        }
        Ok(self.reap(out))
    }
    fn release(&mut self, slot: u16) {
        let i = slot as usize;
        if i < self.taken.len() && self.taken[i] && !self.in_flight[i] {
            self.taken[i] = false;
            self.free.push(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let t = IscsiTarget::parse("iscsi://127.0.0.1:3261/iqn.2026-01.invalid:t1/1").unwrap();
        assert_eq!(t.portal, "127.0.0.1:3261");
        assert_eq!(t.iqn, "iqn.2026-01.invalid:t1");
        assert_eq!(t.lun, 1);
        assert_eq!(
            t.to_string(),
            "iscsi://127.0.0.1:3261/iqn.2026-01.invalid:t1/1"
        );
        let t = IscsiTarget::parse("iscsi://[::1]/iqn.x:y/0").unwrap();
        assert_eq!(t.portal, "[::1]:3260");
        let t = IscsiTarget::parse("iscsi://[::1]:3300/iqn.x:y/0").unwrap();
        assert_eq!(t.portal, "[::1]:3300");
    }

    #[test]
    fn rejects_bad_urls() {
        for u in [
            "http://h/iqn/0",
            "iscsi://h/iqn",
            "iscsi:///iqn/0",
            "iscsi://h//0",
            "iscsi://h/iqn/x",
            "iscsi://h/iqn/16384",
            "iscsi://u%p@h/iqn/0",
            "iscsi://h/i qn/0",
            "iscsi://h:x/iqn/0",
            "iscsi://h:0/iqn/0",
            "iscsi://:3260/iqn/0",
            "iscsi://[::1/iqn/0",
            "iscsi://::1]:3260/iqn/0",
        ] {
            assert!(IscsiTarget::parse(u).is_err(), "{u}");
        }
    }

    #[test]
    fn block_conversion() {
        assert_eq!(to_blocks(8192, 4096, 512), Some((16, 8)));
        assert_eq!(to_blocks(0, 4096, 4096), Some((0, 1)));
        assert_eq!(to_blocks(512, 4096, 4096), None);
        assert_eq!(to_blocks(4096, 1000, 512), None);
        assert_eq!(to_blocks(0, 512, 0), None);
    }

    #[test]
    fn describes_statuses() {
        assert!(describe(sys::scsi_status_SCSI_STATUS_CANCELLED, 0, 0).contains("cancelled"));
        assert_eq!(
            describe(sys::scsi_status_SCSI_STATUS_CHECK_CONDITION, 5, 0x2100),
            "SCSI CHECK CONDITION, sense key 0x5, ASC/ASCQ 0x2100"
        );
        assert_eq!(describe(0x18, 0, 0), "SCSI status 0x18");
    }

    #[test]
    fn unreachable_portal_is_a_clear_error() {
        // A port nothing listens on (bound then closed): login fails, no hang.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let t = IscsiTarget::parse(&format!("iscsi://127.0.0.1:{port}/iqn.x:none/0")).unwrap();
        let e = probe(&t).unwrap_err().to_string();
        assert!(e.contains("iSCSI login"), "{e}");
    }
}
