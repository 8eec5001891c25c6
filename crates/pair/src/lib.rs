//! `Pair`: farflash's host and the target's queues wired in memory, on a
//! simulated clock (issue #41; quinn-proto's `tests/util.rs` `Pair` is the
//! model). Nothing here opens a socket or starts a thread; the clock is
//! read once, for the simulated clock's origin.
//!
//! A pair owns a [`Target`] (subsystems of RAM and null namespaces, built
//! by the control plane as `farflash serve` builds them), and connections: each is the host's
//! sans-I/O NVMe/TCP queue pair ([`farflash_host::QueuePair`]: commands in,
//! PDU bytes out; bytes in, completions out) facing the target's
//! ([`farflash_tcp::QueuePair`]), with a byte pipe each way (a latency, a
//! hold). The target's storage requests go to a storage engine that
//! completes them on RAM when a delay rule says (so later requests may
//! complete first). The test owns the clock: [`Pair::drive`] moves
//! everything that can move at the current time until nothing does;
//! [`Pair::advance`] steps the clock from event to event (arrivals,
//! storage completions, ticks, Keep Alives) and drives at each.
//!
//! The target queues are ticked as the worker's scheduler (`sched.rs`)
//! ticks connections: `TICK` after the last tick when the queue moved
//! anything since, else `IDLE_TICK`; and every queue at once at the next
//! `TICK` scan after `farflash_core::controller::changes` moved. Not
//! modelled: the 50 ms grid ticks are rounded to (the scheduler's own
//! tests cover it), and that counter is process-wide: another test's
//! change in the same process adds scans here (extra ticks, which only
//! bring an expiry nearer its lower bound).

use farflash_core::config::{
    BackendKind, Config, NamespaceConfig, SubsystemConfig, TransportConfig,
};
use farflash_core::Target;
use farflash_host::{Completion, DataDir, HostError, QueueConfig, TransportError};
use farflash_wire::fabrics::{ConnectData, CNTLID_DYNAMIC};
use farflash_wire::{props, Cqe, Sqe};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod conn;
mod pipe;
mod storage;

use conn::Conn;
use storage::Storage;
pub use storage::{DelayRule, Done as StorageDone};

/// A working connection's next tick (the worker's `sched.rs` TICK).
pub const TICK: Duration = Duration::from_millis(100);
/// An idle connection's next tick (`sched.rs` IDLE_TICK).
pub const IDLE_TICK: Duration = Duration::from_secs(1);
/// The subsystem every pair's target serves.
pub const NQN: &str = "nqn.2026-11.io.farflash:pair";
/// The host's NQN.
pub const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:pair-host";
/// Largest data of one admin command the host's admin queue takes.
const ADMIN_MAX_DATA: u32 = 1 << 20;
/// `drive` gives up (a livelock) after this many passes at one time.
const MAX_PASSES: usize = 100_000;

/// A connection of a pair (its index, [`ConnId::index`], is what
/// [`StorageDone::conn`] names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnId(usize);

impl ConnId {
    pub fn index(self) -> usize {
        self.0
    }
}

/// A RAM namespace of 512-byte blocks, `size` bytes, NSID `nsid`.
pub fn ram_namespace(nsid: u32, size: u64) -> NamespaceConfig {
    NamespaceConfig {
        nsid: Some(nsid),
        block_size: Some(512),
        ..NamespaceConfig::sized(BackendKind::Ram, size)
    }
}

/// The configuration of a target serving [`NQN`] with `namespaces`.
pub fn config(namespaces: Vec<NamespaceConfig>) -> Config {
    Config {
        listen: vec!["127.0.0.1:4420".into()],
        transport: TransportConfig::default(),
        subsystems: vec![SubsystemConfig::new(NQN, namespaces)],
        pools: Vec::new(),
    }
}

/// A target of `cfg`, its namespaces in memory.
pub fn target(cfg: &Config) -> Result<Arc<Target>, String> {
    let subs = farflash_control::build_subsystems(cfg).map_err(|e| e.to_string())?;
    let addr = "127.0.0.1:4420".parse().map_err(|e| format!("{e}"))?;
    Ok(Target::new(subs, cfg.transport.clone(), vec![addr]))
}

pub struct Pair {
    target: Arc<Target>,
    now: Instant,
    conns: Vec<Conn>,
    storage: Storage,
    /// The worker's scan: when next, and the change counter it saw last.
    next_scan: Instant,
    changes_seen: u64,
}

impl Pair {
    pub fn new(target: Arc<Target>) -> Pair {
        let now = Instant::now();
        target.set_started(now);
        Pair {
            target,
            now,
            conns: Vec::new(),
            storage: Storage::new(),
            next_scan: now + TICK,
            changes_seen: farflash_core::controller::changes(),
        }
    }

    /// A pair whose target serves one 8 MiB RAM namespace (NSID 1).
    pub fn with_ram_namespace() -> Result<Pair, String> {
        Ok(Pair::new(target(&config(vec![ram_namespace(1, 8 << 20)]))?))
    }

    pub fn target(&self) -> &Arc<Target> {
        &self.target
    }
    /// The simulated time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Sets the storage engine's delay rule (default: every request
    /// completes at once).
    pub fn set_storage_delay(
        &mut self,
        rule: impl FnMut(u64, &farflash_backend::IoOp) -> Duration + 'static,
    ) {
        self.storage.set_delay(Box::new(rule));
    }
    /// Storage requests completed so far, in completion order.
    pub fn storage_log(&self) -> &[StorageDone] {
        self.storage.log()
    }

    /// Opens a connection (the host's ICReq goes out) and drives until the
    /// ICResp is in; the host queue pair is ready then unless refused.
    pub fn open(&mut self, cfg: QueueConfig) -> ConnId {
        let port = 50_000 + self.conns.len() as u16;
        self.conns
            .push(Conn::new(&self.target, cfg, port, self.now));
        self.drive();
        ConnId(self.conns.len() - 1)
    }

    fn conn(&self, c: ConnId) -> &Conn {
        &self.conns[c.0]
    }
    fn conn_mut(&mut self, c: ConnId) -> &mut Conn {
        &mut self.conns[c.0]
    }

    /// The host's queue pair of `c` (its slot buffers, its state).
    pub fn host(&self, c: ConnId) -> &farflash_host::QueuePair {
        self.conn(c).host()
    }
    /// The target's queue pair of `c`, until the target dropped it.
    pub fn target_queue(&self, c: ConnId) -> Option<&farflash_tcp::QueuePair> {
        self.conn(c).target()
    }
    /// The slot buffer of `cid` on `c` (a read's data once it completed).
    pub fn buf(&self, c: ConnId, cid: u16) -> &[u8] {
        self.conn(c).host().buf(cid)
    }
    /// The fatal error the host's queue pair of `c` met, if any.
    pub fn host_error(&self, c: ConnId) -> Option<&TransportError> {
        self.conn(c).host_error()
    }
    /// When the target dropped `c`.
    pub fn closed_at(&self, c: ConnId) -> Option<Instant> {
        self.conn(c).closed_at()
    }
    /// Whether the host's end of `c` sees the connection closed (EOF).
    pub fn host_sees_close(&self, c: ConnId) -> bool {
        self.conn(c).host_sees_close()
    }
    /// Keep Alives the host's timer sent on `c` that succeeded.
    pub fn keep_alives_ok(&self, c: ConnId) -> u32 {
        self.conn(c).keep_alives_ok()
    }

    /// The host sends a Keep Alive on `c` every `period` (None: stops).
    pub fn keep_alive_every(&mut self, c: ConnId, period: Option<Duration>) {
        let now = self.now;
        self.conn_mut(c).set_keep_alive(period, now);
    }
    /// Delivery on `c` takes `d` each way.
    pub fn set_latency(&mut self, c: ConnId, d: Duration) {
        let (up, down) = self.conn_mut(c).pipes();
        up.set_latency(d);
        down.set_latency(d);
    }
    /// Holds (or releases) what travels on `c`: `to_target` the host's
    /// bytes, else the target's.
    pub fn hold(&mut self, c: ConnId, to_target: bool, on: bool) {
        let (up, down) = self.conn_mut(c).pipes();
        if to_target { up } else { down }.hold(on);
    }
    /// The connection `c` breaks: bytes in flight are lost and both ends
    /// see it closed (TCP loses nothing short of the connection).
    pub fn sever(&mut self, c: ConnId) {
        self.conn_mut(c).sever();
        self.drive();
    }
    /// The host closes `c` (the target reads EOF).
    pub fn host_close(&mut self, c: ConnId) {
        self.conn_mut(c).host_close();
        self.drive();
    }

    /// Queues `sqe` on `c`: `data` is a write's data (`dir` ToCtrl), or
    /// `len` the bytes a read brings back. Nothing moves before `drive`.
    pub fn submit(
        &mut self,
        c: ConnId,
        sqe: Sqe,
        dir: DataDir,
        data: &[u8],
        len: u32,
    ) -> Result<u16, HostError> {
        self.conn_mut(c).submit(sqe, dir, data, len)
    }
    /// Takes the completion of `cid` on `c`, if it arrived.
    pub fn take(&mut self, c: ConnId, cid: u16) -> Option<Completion> {
        self.conn_mut(c).take(cid)
    }

    /// Runs one command: submits it and waits (simulated time, at most
    /// `IDLE_TICK` × 10) for its completion.
    pub fn run(
        &mut self,
        c: ConnId,
        sqe: Sqe,
        dir: DataDir,
        data: &[u8],
        len: u32,
    ) -> Result<Completion, HostError> {
        let cid = self.submit(c, sqe, dir, data, len)?;
        self.drive();
        let deadline = self.now + IDLE_TICK * 10;
        loop {
            if let Some(done) = self.take(c, cid) {
                return Ok(done);
            }
            if let Some(e) = self.host_error(c) {
                return Err(HostError::Transport(e.clone()));
            }
            if self.host_sees_close(c) {
                return Err(HostError::Transport(TransportError::Closed));
            }
            if self.now >= deadline {
                return Err(HostError::Timeout("a command of the pair"));
            }
            let Some(next) = self.next_event() else {
                return Err(HostError::Timeout(
                    "a command of the pair: nothing left to happen",
                ));
            };
            self.step_to(next.min(deadline));
        }
    }

    /// Opens an admin queue, connects to [`NQN`] as [`HOST`] with `kato_ms`
    /// and enables the controller (CC.EN); returns the queue and the CNTLID.
    pub fn connect_admin(&mut self, kato_ms: u32) -> Result<(ConnId, u16), Cqe> {
        self.connect_admin_to(kato_ms, CNTLID_DYNAMIC)
    }

    fn connect_admin_to(&mut self, kato_ms: u32, cntlid: u16) -> Result<(ConnId, u16), Cqe> {
        let a = self.open(QueueConfig {
            depth: 32,
            slot_buf: 0,
            max_data: ADMIN_MAX_DATA,
            icd_max: farflash_host::queue::ADMIN_ICD,
            hdgst: false,
            ddgst: false,
        });
        let c = self.connect(a, 0, 32, kato_ms, cntlid)?;
        let cntlid = c.dw0 as u16;
        let en = farflash_host::cmd::property_set(props::CC, props::cc::ENABLE_DEFAULT);
        let done = self
            .run(a, en, DataDir::None, &[], 0)
            .map_err(|_| Cqe::default())?;
        if !done.cqe.status.is_success() {
            return Err(done.cqe);
        }
        Ok((a, cntlid))
    }

    /// Opens I/O queue `qid` of controller `cntlid`: `depth` commands of
    /// at most `max_io` bytes, writes of up to `icd_max` bytes in-capsule.
    pub fn connect_io(
        &mut self,
        cntlid: u16,
        qid: u16,
        depth: u16,
        max_io: u32,
        icd_max: u32,
    ) -> Result<ConnId, Cqe> {
        let q = self.open(QueueConfig {
            depth,
            slot_buf: max_io as usize,
            max_data: max_io,
            icd_max,
            hdgst: false,
            ddgst: false,
        });
        self.connect(q, qid, depth, 0, cntlid)?;
        Ok(q)
    }

    /// The Connect command (Fabrics §6.3) on `q`; the CQE when it succeeded.
    pub fn connect(
        &mut self,
        q: ConnId,
        qid: u16,
        depth: u16,
        kato_ms: u32,
        cntlid: u16,
    ) -> Result<Cqe, Cqe> {
        let data = ConnectData {
            hostid: [0x41; 16],
            cntlid,
            subnqn: NQN.into(),
            hostnqn: HOST.into(),
        };
        let mut b = [0u8; farflash_wire::fabrics::CONNECT_DATA_LEN];
        data.encode(&mut b);
        let sqe = farflash_host::cmd::connect(qid, depth, kato_ms);
        match self.run(q, sqe, DataDir::ToCtrl, &b, 0) {
            Ok(c) if c.cqe.status.is_success() => Ok(c.cqe),
            Ok(c) => Err(c.cqe),
            Err(_) => Err(Cqe::default()),
        }
    }

    /// Moves everything that can move at the current time until nothing
    /// does: bytes each way, storage requests out and due completions back.
    pub fn drive(&mut self) {
        for _ in 0..MAX_PASSES {
            let mut any = false;
            for (i, c) in self.conns.iter_mut().enumerate() {
                any |= c.step(self.now, &mut self.storage, i);
            }
            for (i, done) in self.storage.complete_due(self.now) {
                self.conns[i].on_storage(done);
                any = true;
            }
            if !any {
                return;
            }
        }
        panic!("the pair does not settle at one time: a livelock");
    }

    /// Advances the clock by `d`, from event to event, driving at each.
    pub fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        self.drive();
        while let Some(next) = self.next_event().filter(|&t| t <= end) {
            self.step_to(next);
        }
        self.step_to(end);
    }

    /// Advances (as `advance`) until `done` holds or `limit` passed;
    /// returns whether it held.
    pub fn advance_until(&mut self, limit: Duration, mut done: impl FnMut(&Pair) -> bool) -> bool {
        let end = self.now + limit;
        self.drive();
        while !done(self) {
            match self.next_event().filter(|&t| t <= end) {
                Some(next) => self.step_to(next),
                None => return false,
            }
        }
        true
    }

    /// Moves the clock to `t` (not before now), fires the timers due and drives.
    fn step_to(&mut self, t: Instant) {
        self.now = self.now.max(t);
        self.fire_timers();
        self.drive();
    }

    fn fire_timers(&mut self) {
        let now = self.now;
        if self.next_scan <= now {
            self.next_scan = now + TICK;
            let moved = farflash_core::controller::changes();
            if moved != self.changes_seen {
                self.changes_seen = moved;
                self.conns.iter_mut().for_each(|c| c.tick(now));
            }
        }
        self.conns.iter_mut().for_each(|c| c.fire_timers(now));
    }

    /// The next time anything happens: an arrival, a storage completion,
    /// a timer, the scan. Only later than now.
    fn next_event(&self) -> Option<Instant> {
        let conns = self
            .conns
            .iter()
            .flat_map(|c| [c.next_timer(), c.next_arrival()]);
        conns
            .chain([self.storage.next_due(), Some(self.next_scan)])
            .flatten()
            .filter(|&t| t > self.now)
            .min()
    }

    /// Storage requests out and not completed, over all connections.
    pub fn storage_pending(&self) -> usize {
        self.storage.pending()
    }
}
