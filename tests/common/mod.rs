//! Shared helpers for the integration tests: a `farflash serve` child
//! process on a free 127.0.0.1 port, killed when dropped.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const NQN: &str = "nqn.2026-11.io.farflash:default";

pub struct Serve {
    pub child: Child,
    pub port: u16,
    pub addr: String,
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl Serve {
    /// Starts `farflash serve --listen 127.0.0.1:<free port> ARGS...` and
    /// waits until it prints `listening on`.
    pub fn start(args: &[&str]) -> Serve {
        Serve::launch(args, "warn", Stdio::inherit(), String::new)
    }

    /// Spawns the target with its log going to `stderr`; `describe` adds
    /// context to the panic if it does not start.
    fn launch(args: &[&str], level: &str, stderr: Stdio, describe: impl Fn() -> String) -> Serve {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let mut child = Command::new(env!("CARGO_BIN_EXE_farflash"))
            .arg("serve")
            .args(["--listen", &addr, "--log-level", level])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn farflash serve");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("listening on") {
                    let _ = tx.send(());
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while rx.recv_timeout(Duration::from_millis(100)).is_err() {
            if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
                let _ = child.kill();
                panic!("farflash serve did not start{}", describe());
            }
        }
        Serve { child, port, addr }
    }

    /// Starts `farflash serve --config CFG --rpc-socket SOCK` (one event
    /// loop), whose config listens on 127.0.0.1:`port`, and waits until that
    /// address accepts connections.
    pub fn start_config(cfg: &std::path::Path, sock: &std::path::Path, port: u16) -> Serve {
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(env!("CARGO_BIN_EXE_farflash"))
            .args(["serve", "--log-level", "warn", "--threads", "1", "--config"])
            .arg(cfg)
            .arg("--rpc-socket")
            .arg(sock)
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn farflash serve");
        let up = eventually(Duration::from_secs(30), || {
            std::net::TcpStream::connect(&addr).is_ok()
        });
        assert!(up, "farflash serve on {addr} does not accept connections");
        Serve { child, port, addr }
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends a signal and waits (bounded) for the exit status.
    pub fn signal(&mut self, sig: i32) -> Option<std::process::ExitStatus> {
        // SAFETY: kill(2) on our own child's PID has no memory effects.
        unsafe { libc::kill(self.child.id() as i32, sig) };
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// Reliability helpers (tests/reliability_*.rs): process accounting, a quiet
// `Serve`, a verifying background host and a raw NVMe/TCP peer.

/// Resident set size of process `pid` in KiB (VmRSS of /proc/PID/status).
pub fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Open file descriptors of process `pid` (entries of /proc/PID/fd).
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Threads of process `pid` (entries of /proc/PID/task).
pub fn thread_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// Polls `f` every 20 ms until it returns true or `within` passes; returns
/// its last answer.
pub fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Serve {
    /// Like [`Serve::start`], but the target logs at `level` into the file
    /// `log` instead of the test's stderr (see [`Serve::log_tail`]).
    pub fn start_logged(args: &[&str], level: &str, log: &std::path::Path) -> Serve {
        let err = std::fs::File::create(log).expect("create the target's log file");
        Serve::launch(args, level, Stdio::from(err), || {
            format!("; its log:\n{}", Serve::log_tail(log, 40))
        })
    }

    /// The target's process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last `n` lines of a log written by [`Serve::start_logged`].
    pub fn log_tail(log: &std::path::Path, n: usize) -> String {
        let s = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// A SplitMix64 generator: seeded, reproducible randomness without a crate.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// A seed from the environment variable `var` (decimal or 0x-hex), else
/// from the clock; printed so that a failure can be replayed.
pub fn seed_from_env(var: &str) -> u64 {
    let from_env = std::env::var(var).ok().and_then(|v| {
        let v = v.trim();
        match v.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => v.parse().ok(),
        }
    });
    let seed = from_env.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            ^ (std::process::id() as u64) << 32
    });
    eprintln!("{var}={seed:#x}");
    seed
}

/// What a [`VerifiedIo`] host did.
#[derive(Clone, Copy, Debug, Default)]
pub struct IoStats {
    /// Commands completed (writes and reads, each verified).
    pub ops: u64,
    /// The slowest single command.
    pub max_op: Duration,
}

/// A well-behaved host (the farflash host library, keep-alive on) writing
/// and reading back patterns on its own LBA range until stopped; any error
/// or mismatch ends it with a message.
pub struct VerifiedIo {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<Result<IoStats, String>>,
}

impl VerifiedIo {
    /// Runs on namespace 1 (512-byte blocks) in `lba_base..lba_base + span`
    /// with 16-block commands.
    pub fn start(opts: farflash_host::ConnectOptions, lba_base: u64, span: u64) -> VerifiedIo {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let handle = std::thread::spawn(move || -> Result<IoStats, String> {
            use farflash_host::{Controller, IoQueueOptions};
            const NLB: u64 = 16;
            let mut ctrl = Controller::connect(&opts).map_err(|e| format!("connect: {e}"))?;
            ctrl.start_keep_alive()
                .map_err(|e| format!("keep-alive: {e}"))?;
            let mut q = ctrl
                .io_queue(
                    1,
                    IoQueueOptions {
                        depth: 8,
                        max_io: 64 * 1024,
                    },
                )
                .map_err(|e| format!("I/O queue: {e}"))?;
            let mut stats = IoStats::default();
            let mut back = vec![0u8; (NLB * 512) as usize];
            let mut n = 0u64;
            let timed = |stats: &mut IoStats, t: Instant| {
                stats.ops += 1;
                stats.max_op = stats.max_op.max(t.elapsed());
            };
            // At least one write and read-back, however soon `finish` comes
            // (a caller asserts the host did I/O beside what it tested).
            loop {
                let lba = lba_base + (n * NLB) % (span - NLB + 1);
                let data: Vec<u8> = (0..back.len() as u64)
                    .map(|i| (i.wrapping_mul(7) ^ n ^ (i >> 8)) as u8)
                    .collect();
                let t = Instant::now();
                q.write_at(1, lba, NLB as u32, &data)
                    .map_err(|e| format!("write #{n} at LBA {lba}: {e}"))?;
                timed(&mut stats, t);
                let t = Instant::now();
                q.read_at(1, lba, NLB as u32, &mut back)
                    .map_err(|e| format!("read #{n} at LBA {lba}: {e}"))?;
                timed(&mut stats, t);
                if back != data {
                    return Err(format!("data mismatch at LBA {lba} (op {n})"));
                }
                n += 1;
                if st.load(Ordering::Acquire) {
                    break;
                }
            }
            if let Some(f) = ctrl.keep_alive_failure() {
                return Err(format!("keep-alive failed: {f}"));
            }
            drop(q);
            ctrl.shutdown().map_err(|e| format!("shutdown: {e}"))?;
            Ok(stats)
        });
        VerifiedIo { stop, handle }
    }

    /// Stops the host and returns what it did, or its first error.
    pub fn finish(self) -> Result<IoStats, String> {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        self.handle
            .join()
            .unwrap_or_else(|_| Err("the verifying host panicked".into()))
    }
}

/// A directory of its own for one test, `ff-<name>-<pid>` under the
/// system's temporary directory: emptied when made, removed when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("ff-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A raw NVMe/TCP peer over `std::net`, for crafting exactly the PDUs a
/// test wants (built with farflash-wire) and parsing what comes back.
pub mod raw {
    use super::NQN;
    use farflash_wire::fabrics::{ConnectCmd, ConnectData, CNTLID_DYNAMIC, CONNECT_DATA_LEN};
    use farflash_wire::opcode::{admin, feature};
    use farflash_wire::pdu::{self, DataHeader, IcReq, IcResp, PduType, TermReq, DIGEST_LEN};
    use farflash_wire::sqe::{SglDescriptor, PSDT_SGL, SQE_SIZE};
    use farflash_wire::{digest, props, Cqe, Sqe, Status};
    use std::io::{ErrorKind, Read, Write};
    use std::net::{Shutdown, TcpStream};
    use std::time::{Duration, Instant};

    /// The host NQN and Host Identifier raw peers connect with.
    pub const HOSTNQN: &str =
        "nqn.2014-08.org.nvmexpress:uuid:5eed0000-0000-4000-8000-00000000a11c";
    pub const HOSTID: [u8; 16] = [
        0x5e, 0xed, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0xa1, 0x1c,
    ];
    /// How long a raw peer waits for any one PDU.
    pub const WAIT: Duration = Duration::from_secs(5);

    /// A PDU received from the controller.
    #[derive(Debug)]
    pub enum Pdu {
        IcResp(IcResp),
        Resp(Cqe),
        R2T(DataHeader),
        Data {
            hdr: DataHeader,
            flags: u8,
            data: Vec<u8>,
        },
        Term {
            term: TermReq,
            /// The offending PDU header bytes the TermReq quotes.
            quoted: Vec<u8>,
        },
    }

    /// The result of waiting for one PDU.
    #[derive(Debug)]
    pub enum Got {
        Pdu(Pdu),
        /// End of stream (or a reset) at a PDU boundary.
        Closed,
        Timeout,
        /// Anything else: a bad digest, a close mid-PDU, an unknown type.
        Error(String),
    }

    pub struct Peer {
        pub s: TcpStream,
        /// Header / data digests as negotiated by [`Peer::icreq`].
        pub hd: bool,
        pub dd: bool,
        /// The bytes of the last [`Peer::send`] (what a TermReq should quote).
        pub last_sent: Vec<u8>,
        next_cid: u16,
    }

    /// Reads exactly `buf.len()` bytes: Ok(false) on EOF before the first byte.
    fn read_full(s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<bool> {
        let mut have = 0;
        while have < buf.len() {
            match s.read(&mut buf[have..]) {
                Ok(0) if have == 0 => return Ok(false),
                Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
                Ok(n) => have += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    fn is_timeout(e: &std::io::Error) -> bool {
        matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
    }

    fn is_reset(e: &std::io::Error) -> bool {
        matches!(
            e.kind(),
            ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe
        )
    }

    impl Peer {
        /// A TCP connection to `addr`, nothing sent yet.
        pub fn connect(addr: &str) -> Peer {
            let s = TcpStream::connect(addr).expect("TCP connect to the target");
            s.set_read_timeout(Some(WAIT)).unwrap();
            s.set_write_timeout(Some(WAIT)).unwrap();
            s.set_nodelay(true).unwrap();
            Peer {
                s,
                hd: false,
                dd: false,
                last_sent: Vec::new(),
                next_cid: 0,
            }
        }

        /// Sends `b` as is (write errors are ignored: the target may have
        /// closed already, which the reading side then reports).
        pub fn send(&mut self, b: &[u8]) {
            self.last_sent = b.to_vec();
            let _ = self.s.write_all(b);
        }

        /// Half-closes the sending side (a FIN to the target).
        pub fn finish_sending(&mut self) {
            let _ = self.s.shutdown(Shutdown::Write);
        }

        pub fn next_cid(&mut self) -> u16 {
            self.next_cid = self.next_cid.wrapping_add(1);
            self.next_cid
        }

        /// A 128-byte ICReq.
        pub fn icreq_bytes(r: IcReq) -> Vec<u8> {
            let mut b = [0u8; pdu::IC_HLEN];
            r.encode(&mut b);
            b.to_vec()
        }

        /// ICReq/ICResp asking for the given digests; panics unless a valid
        /// ICResp echoing them comes back.
        pub fn icreq(&mut self, hd: bool, dd: bool) -> IcResp {
            let dgst = hd as u8 | (dd as u8) << 1;
            self.send(&Self::icreq_bytes(IcReq {
                pfv: 0,
                hpda: 0,
                dgst,
                maxr2t: 0,
            }));
            match self.recv() {
                Got::Pdu(Pdu::IcResp(r)) => {
                    assert_eq!(
                        (r.pfv, r.cpda, r.dgst),
                        (0, 0, dgst),
                        "ICResp fields: {r:?}"
                    );
                    self.hd = hd;
                    self.dd = dd;
                    r
                }
                other => panic!("expected an ICResp, got {other:?}"),
            }
        }

        /// A connection that finished ICReq/ICResp.
        pub fn ic(addr: &str, hd: bool, dd: bool) -> Peer {
            let mut p = Peer::connect(addr);
            p.icreq(hd, dd);
            p
        }

        /// A CapsuleCmd PDU for `sqe` with in-capsule data `icd`, digests as negotiated.
        pub fn capsule(&self, sqe: &Sqe, icd: &[u8]) -> Vec<u8> {
            let mut b = vec![0u8; pdu::CAPSULE_CMD_HLEN + icd.len() + 2 * DIGEST_LEN];
            let (pdo, plen) =
                pdu::write_header(&mut b, PduType::CapsuleCmd, 0, self.hd, self.dd, icd.len());
            let mut raw = [0u8; SQE_SIZE];
            sqe.encode(&mut raw);
            b[pdu::CH_LEN..pdu::CAPSULE_CMD_HLEN].copy_from_slice(&raw);
            pdu::seal_header(&mut b, PduType::CapsuleCmd, self.hd);
            if !icd.is_empty() {
                b[pdo..pdo + icd.len()].copy_from_slice(icd);
                if self.dd {
                    let d = digest::crc32c(icd).to_le_bytes();
                    b[pdo + icd.len()..pdo + icd.len() + DIGEST_LEN].copy_from_slice(&d);
                }
            }
            b.truncate(plen);
            b
        }

        /// An H2CData PDU, digests as negotiated.
        pub fn h2c(&self, cccid: u16, ttag: u16, offset: u32, data: &[u8], last: bool) -> Vec<u8> {
            let mut b = vec![0u8; pdu::DATA_HLEN + data.len() + 2 * DIGEST_LEN];
            let fl = if last { pdu::flags::DATA_LAST } else { 0 };
            let (pdo, plen) = DataHeader {
                cccid,
                ttag,
                offset,
                length: data.len() as u32,
            }
            .encode(&mut b, PduType::H2CData, fl, self.hd, self.dd, data.len());
            b[pdo..pdo + data.len()].copy_from_slice(data);
            if self.dd && !data.is_empty() {
                let d = digest::crc32c(data).to_le_bytes();
                b[pdo + data.len()..pdo + data.len() + DIGEST_LEN].copy_from_slice(&d);
            }
            b.truncate(plen);
            b
        }

        /// Sends `sqe` with a fresh CID and PSDT=SGL; with `icd` non-empty and
        /// no DPTR given, the DPTR describes it as in-capsule data. Returns the CID.
        pub fn submit(&mut self, mut sqe: Sqe, icd: &[u8]) -> u16 {
            sqe.cid = self.next_cid();
            sqe.flags |= PSDT_SGL;
            if !icd.is_empty() && sqe.dptr == SglDescriptor::default() {
                sqe.dptr = SglDescriptor::in_capsule(icd.len() as u32);
            }
            let b = self.capsule(&sqe, icd);
            self.send(&b);
            sqe.cid
        }

        /// Receives one PDU (at most [`WAIT`]), checking its digests.
        pub fn recv(&mut self) -> Got {
            let mut ch = [0u8; pdu::CH_LEN];
            match read_full(&mut self.s, &mut ch) {
                Ok(true) => {}
                Ok(false) => return Got::Closed,
                Err(e) if is_timeout(&e) => return Got::Timeout,
                Err(e) if is_reset(&e) => return Got::Closed,
                Err(e) => return Got::Error(format!("receive: {e}")),
            }
            let plen = u32::from_le_bytes([ch[4], ch[5], ch[6], ch[7]]) as usize;
            if !(pdu::CH_LEN..=16 << 20).contains(&plen) {
                return Got::Error(format!("PDU with PLEN {plen}: {ch:?}"));
            }
            let mut b = vec![0u8; plen];
            b[..pdu::CH_LEN].copy_from_slice(&ch);
            match read_full(&mut self.s, &mut b[pdu::CH_LEN..]) {
                Ok(true) => {}
                Ok(false) if plen == pdu::CH_LEN => {}
                Ok(false) => return Got::Error("closed mid-PDU".into()),
                Err(e) => return Got::Error(format!("receive PDU body: {e}")),
            }
            let Some(t) = PduType::from_u8(b[0]) else {
                return Got::Error(format!("unknown PDU type {:#x}", b[0]));
            };
            let hlen = t.hlen();
            if b.len() < hlen {
                return Got::Error(format!("{t:?} shorter than its header: {} bytes", b.len()));
            }
            let hd = self.hd && t.takes_hdgst();
            if hd
                && (b.len() < hlen + DIGEST_LEN
                    || b[hlen..hlen + DIGEST_LEN] != pdu::hdgst(&b[..hlen]))
            {
                return Got::Error(format!("{t:?} with a bad header digest"));
            }
            Got::Pdu(match t {
                PduType::IcResp => Pdu::IcResp(IcResp::decode(&b)),
                PduType::C2HTermReq => Pdu::Term {
                    term: TermReq::decode(&b),
                    quoted: b[pdu::TERM_HLEN..].to_vec(),
                },
                PduType::CapsuleResp => {
                    let mut c = [0u8; 16];
                    c.copy_from_slice(&b[8..24]);
                    Pdu::Resp(Cqe::decode(&c))
                }
                PduType::R2T => Pdu::R2T(DataHeader::decode(&b)),
                PduType::C2HData => {
                    let pdo = b[3] as usize;
                    let end = plen - if self.dd { DIGEST_LEN } else { 0 };
                    if pdo < hlen || pdo > end {
                        return Got::Error(format!("C2HData with PDO {pdo}, PLEN {plen}"));
                    }
                    let data = b[pdo..end].to_vec();
                    if self.dd && b[end..] != digest::crc32c(&data).to_le_bytes() {
                        return Got::Error("C2HData with a bad data digest".into());
                    }
                    Pdu::Data {
                        hdr: DataHeader::decode(&b),
                        flags: b[1],
                        data,
                    }
                }
                t => return Got::Error(format!("unexpected {t:?} from the controller")),
            })
        }

        /// The CapsuleResp of `cid`, with the C2HData before it (panics on anything else).
        pub fn expect_resp(&mut self, cid: u16) -> (Cqe, Vec<u8>) {
            let mut data = Vec::new();
            loop {
                match self.recv() {
                    Got::Pdu(Pdu::Resp(c)) if c.cid == cid => return (c, data),
                    Got::Pdu(Pdu::Data { hdr, data: d, .. }) if hdr.cccid == cid => {
                        assert_eq!(hdr.offset as usize, data.len(), "C2HData offset");
                        data.extend_from_slice(&d);
                    }
                    other => panic!("waiting for the completion of CID {cid}: got {other:?}"),
                }
            }
        }

        /// Submits and waits for the completion.
        pub fn call(&mut self, sqe: Sqe, icd: &[u8]) -> (Cqe, Vec<u8>) {
            let cid = self.submit(sqe, icd);
            self.expect_resp(cid)
        }

        /// Submits a write of `data` with a Transport SGL and returns its CID
        /// and the R2T that answers it.
        pub fn write_for_r2t(&mut self, mut sqe: Sqe, len: u32) -> (u16, DataHeader) {
            sqe.dptr = SglDescriptor::transport(len);
            let cid = self.submit(sqe, &[]);
            match self.recv() {
                Got::Pdu(Pdu::R2T(r)) => {
                    assert_eq!((r.cccid, r.offset, r.length), (cid, 0, len), "R2T {r:?}");
                    (cid, r)
                }
                other => panic!("expected an R2T for CID {cid}, got {other:?}"),
            }
        }

        /// The target closes the connection within `within` without sending
        /// anything more; Err describes what happened instead.
        pub fn expect_closed(&mut self, within: Duration) -> Result<Duration, String> {
            let t0 = Instant::now();
            self.s.set_read_timeout(Some(within)).unwrap();
            let mut buf = [0u8; 512];
            let r = loop {
                match self.s.read(&mut buf) {
                    Ok(0) => break Ok(t0.elapsed()),
                    Ok(n) => {
                        break Err(format!(
                            "{n} more bytes instead of a close: {:?}",
                            &buf[..n.min(32)]
                        ))
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if is_reset(&e) => break Ok(t0.elapsed()),
                    Err(e) if is_timeout(&e) => break Err(format!("still open after {within:?}")),
                    Err(e) => break Err(format!("read error {e}")),
                }
            };
            self.s.set_read_timeout(Some(WAIT)).unwrap();
            r
        }

        /// Connect data for `cntlid` (FFFFh for an admin queue).
        pub fn connect_data(cntlid: u16, subnqn: &str, hostnqn: &str, hostid: [u8; 16]) -> Vec<u8> {
            let mut b = vec![0u8; CONNECT_DATA_LEN];
            ConnectData {
                hostid,
                cntlid,
                subnqn: subnqn.into(),
                hostnqn: hostnqn.into(),
            }
            .encode(&mut b);
            b
        }

        /// A Connect SQE (its CID is set by [`Peer::submit`]).
        pub fn connect_sqe(qid: u16, sqsize: u16, kato: u32) -> Sqe {
            ConnectCmd {
                recfmt: 0,
                qid,
                sqsize,
                cattr: 0,
                kato,
            }
            .to_sqe(0)
        }

        /// Admin Connect (KATO `kato` ms, 32 entries) as [`HOSTNQN`]; returns the completion.
        pub fn admin_connect(&mut self, kato: u32) -> Cqe {
            let d = Self::connect_data(CNTLID_DYNAMIC, NQN, HOSTNQN, HOSTID);
            self.call(Self::connect_sqe(0, 31, kato), &d).0
        }

        /// A connection with an enabled controller (CC.EN=1, CSTS.RDY=1) and
        /// `io_queues` I/O queues granted; returns it and the CNTLID.
        pub fn admin(addr: &str, kato: u32, io_queues: u16) -> (Peer, u16) {
            let mut p = Peer::ic(addr, false, false);
            let c = p.admin_connect(kato);
            assert!(c.status.is_success(), "admin Connect: {:?}", c.status);
            let cntlid = c.dw0 as u16;
            let set = farflash_wire::fabrics::PropertyCmd {
                size8: false,
                offset: props::CC,
                value: props::cc::ENABLE_DEFAULT as u64,
            }
            .to_sqe(0, farflash_wire::opcode::fctype::PROPERTY_SET);
            let (c, _) = p.call(set, &[]);
            assert_eq!(c.status, Status::SUCCESS, "Property Set CC.EN");
            let n = io_queues.max(1) as u32 - 1;
            let (c, _) = p.call(
                Sqe {
                    opcode: admin::SET_FEATURES,
                    cdw10: feature::NUMBER_OF_QUEUES as u32,
                    cdw11: n | n << 16,
                    ..Sqe::default()
                },
                &[],
            );
            assert_eq!(c.status, Status::SUCCESS, "Set Features Number of Queues");
            (p, cntlid)
        }

        /// I/O queue `qid` (SQSIZE `sqsize`) of controller `cntlid` on this
        /// connection; returns the completion.
        pub fn io_connect(&mut self, cntlid: u16, qid: u16, sqsize: u16) -> Cqe {
            let d = Self::connect_data(cntlid, NQN, HOSTNQN, HOSTID);
            self.call(Self::connect_sqe(qid, sqsize, 0), &d).0
        }

        /// A new connection with I/O queue `qid` of `cntlid` connected.
        pub fn io(addr: &str, cntlid: u16, qid: u16, sqsize: u16, hd: bool, dd: bool) -> Peer {
            let mut p = Peer::ic(addr, hd, dd);
            let c = p.io_connect(cntlid, qid, sqsize);
            assert_eq!(c.status, Status::SUCCESS, "I/O queue {qid} Connect");
            p
        }
    }
}

/// The target's fd and thread counts at rest: after one ICReq round trip
/// (so that its event loops are running) and once both stopped changing.
pub fn resting_counts(serve: &Serve) -> (usize, usize) {
    drop(raw::Peer::ic(&serve.addr, false, false));
    let pid = serve.pid();
    let mut last = (0, 0);
    let mut stable = 0;
    for _ in 0..250 {
        let now = (fd_count(pid), thread_count(pid));
        stable = if now == last { stable + 1 } else { 0 };
        if stable == 5 {
            break;
        }
        last = now;
        std::thread::sleep(Duration::from_millis(20));
    }
    last
}

/// One JSON-RPC exchange on the management socket `sock`: sends `line`,
/// returns the parsed answer and its text (to check what it repeats).
pub fn rpc_exchange(sock: &std::path::Path, line: &[u8]) -> (serde_json::Value, String) {
    use std::io::Write;
    let mut s = std::os::unix::net::UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(line).unwrap();
    s.write_all(b"\n").unwrap();
    let mut l = String::new();
    BufReader::new(s).read_line(&mut l).unwrap();
    let v = serde_json::from_str(&l).unwrap_or_else(|e| panic!("answer {l:?}: {e}"));
    (v, l)
}

/// A random DH-HMAC-CHAP secret of `len` bytes with transformation `hmac`
/// (`DHHC-1:0X:...:`), as `nvme gen-dhchap-key` makes them.
pub fn dhchap_secret(len: usize, hmac: Option<farflash_auth::HashId>) -> String {
    use std::io::Read;
    let mut key = vec![0u8; len];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .expect("read /dev/urandom");
    let s = farflash_auth::Secret::new(&key, hmac).expect("secret");
    s.to_dhhc().to_string()
}

/// A child started in a process group of its own (`process_group(0)`, e.g. a
/// QEMU VM and its helpers): the whole group is stopped on drop, even when a
/// test panics (SIGTERM, up to 5 s for it to exit, then SIGKILL).
pub struct ProcessGroup {
    child: Child,
}

impl ProcessGroup {
    pub fn new(child: Child) -> ProcessGroup {
        ProcessGroup { child }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let pgid = self.child.id() as i32;
        // SAFETY: plain syscalls on the process group the child leads.
        unsafe { libc::kill(-pgid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: as above; SIGKILL for whatever is left.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}
