//! One connection of a pair: the host's queue pair (farflash-host's
//! sans-I/O NVMe/TCP state machine) and the target's (farflash-tcp's),
//! a pipe each way, and what the event loop would keep of it (its next
//! tick, whether it moved since the last).

use crate::pipe::Pipe;
use crate::storage::Storage;
use farflash_core::{OffloadDone, Target};
use farflash_host::{Completion, DataDir, HostError, QueueConfig, TransportError};
use farflash_wire::Sqe;
use std::io::IoSlice;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The host's Keep Alive timer on an admin queue (what `keepalive.rs`'s
/// thread does every KATO/2, here on the simulated clock).
#[derive(Clone, Copy, Debug)]
struct KeepAlive {
    period: Duration,
    next: Instant,
}

pub(crate) struct Conn {
    host: farflash_host::QueuePair,
    /// The target's queue pair; dropped (as the worker drops a finished
    /// connection: an admin queue's drop ends the association) once closed.
    target: Option<farflash_tcp::QueuePair>,
    /// Host to target.
    up: Pipe,
    /// Target to host.
    down: Pipe,
    /// Completions the host received, not yet taken.
    done: Vec<Completion>,
    /// When the target dropped the connection (closed and drained).
    closed: Option<Instant>,
    /// The network between them failed: nothing more travels either way.
    severed: bool,
    /// The target queue received or completed something since its last tick.
    moved: bool,
    next_tick: Instant,
    keep_alive: Option<KeepAlive>,
    /// CIDs of Keep Alives in flight, and how many succeeded.
    ka_cids: Vec<u16>,
    ka_ok: u32,
}

impl Conn {
    pub(crate) fn new(t: &Arc<Target>, cfg: QueueConfig, peer_port: u16, now: Instant) -> Conn {
        let local = "127.0.0.1:4420".parse().expect("address");
        let peer = std::net::SocketAddr::from(([127, 0, 0, 1], peer_port));
        Conn {
            host: farflash_host::QueuePair::new(cfg),
            target: Some(farflash_tcp::QueuePair::new(t.clone(), local, peer)),
            up: Pipe::default(),
            down: Pipe::default(),
            done: Vec::new(),
            closed: None,
            severed: false,
            moved: false,
            next_tick: now + crate::TICK,
            keep_alive: None,
            ka_cids: Vec::new(),
            ka_ok: 0,
        }
    }

    pub(crate) fn host(&self) -> &farflash_host::QueuePair {
        &self.host
    }
    /// The target's queue pair, until the target dropped the connection.
    pub(crate) fn target(&self) -> Option<&farflash_tcp::QueuePair> {
        self.target.as_ref()
    }
    pub(crate) fn pipes(&mut self) -> (&mut Pipe, &mut Pipe) {
        (&mut self.up, &mut self.down)
    }
    pub(crate) fn closed_at(&self) -> Option<Instant> {
        self.closed
    }
    /// The host's end is closed: the target dropped the connection and
    /// everything it sent before has arrived (the host's read sees EOF).
    pub(crate) fn host_sees_close(&self) -> bool {
        self.severed || (self.closed.is_some() && self.down.is_empty())
    }
    /// The fatal transport error the host's queue pair met, if any.
    pub(crate) fn host_error(&self) -> Option<&TransportError> {
        self.host.dead()
    }
    pub(crate) fn keep_alives_ok(&self) -> u32 {
        self.ka_ok
    }

    /// Takes the completion of `cid`, if it arrived.
    pub(crate) fn take(&mut self, cid: u16) -> Option<Completion> {
        let i = self.done.iter().position(|c| c.cid == cid)?;
        Some(self.done.remove(i))
    }

    /// Queues `sqe` on the host's queue pair with `data` (a write's) or
    /// room for `len` bytes (a read's).
    pub(crate) fn submit(
        &mut self,
        sqe: Sqe,
        dir: DataDir,
        data: &[u8],
        len: u32,
    ) -> Result<u16, HostError> {
        let cid = self
            .host
            .alloc_cid()
            .ok_or_else(|| HostError::Invalid("no free CID".into()))?;
        let need = if dir == DataDir::ToCtrl {
            data.len()
        } else {
            len as usize
        };
        let len = need as u32;
        let r = self.host.ensure_buf(cid, need).and_then(|()| {
            if dir == DataDir::ToCtrl {
                if let Some(b) = self.host.buf_mut(cid) {
                    b[..data.len()].copy_from_slice(data);
                }
            }
            self.host.submit(cid, sqe, dir, len)
        });
        if let Err(e) = r {
            self.host.release_cid(cid);
            return Err(e);
        }
        Ok(cid)
    }

    pub(crate) fn set_keep_alive(&mut self, period: Option<Duration>, now: Instant) {
        self.keep_alive = period.map(|period| KeepAlive {
            period,
            next: now + period,
        });
    }

    /// The next time this connection's timers want the clock.
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        if self.closed.is_some() {
            return None;
        }
        let ka = self.keep_alive.map(|k| k.next);
        Some(ka.map_or(self.next_tick, |k| k.min(self.next_tick)))
    }

    pub(crate) fn next_arrival(&self) -> Option<Instant> {
        match (self.up.next_arrival(), self.down.next_arrival()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Fires the timers due at `now`: the target queue's tick (a TICK
    /// later if it moved since the last, else IDLE_TICK, as `sched.rs`
    /// schedules them) and the host's Keep Alive.
    pub(crate) fn fire_timers(&mut self, now: Instant) {
        if self.closed.is_some() {
            return;
        }
        if self.next_tick <= now {
            self.tick(now);
        }
        if let Some(k) = self.keep_alive.as_mut().filter(|k| k.next <= now) {
            k.next = now + k.period;
            if self.host.is_ready() && self.host.dead().is_none() {
                if let Ok(cid) =
                    self.submit(farflash_host::cmd::keep_alive(), DataDir::None, &[], 0)
                {
                    self.ka_cids.push(cid);
                }
            }
        }
    }

    /// The target queue's tick (scheduled, or the worker's scan after a change).
    pub(crate) fn tick(&mut self, now: Instant) {
        let Some(target) = self.target.as_mut() else {
            return;
        };
        target.tick(now);
        let period = if self.moved {
            crate::TICK
        } else {
            crate::IDLE_TICK
        };
        self.next_tick = now + period;
        self.moved = false;
    }

    /// A storage request of this connection finished.
    pub(crate) fn on_storage(&mut self, c: farflash_backend::IoCompletion) {
        // A connection is dropped only with nothing out at storage.
        if let Some(t) = self.target.as_mut() {
            t.on_storage_completion(c);
            self.moved = true;
        }
    }

    /// One pass at `now`: every byte and request that can move, moves.
    /// Returns whether anything did.
    pub(crate) fn step(&mut self, now: Instant, storage: &mut Storage, idx: usize) -> bool {
        let mut any = self.host_send(now);
        if let Some(t) = self.target.as_mut() {
            t.set_now(now);
            any |= receive(t, &mut self.up, now, &mut self.moved);
            any |= emit(t, now, storage, idx);
            if t.output_len() > 0 {
                let out = t.take_output();
                if !self.severed {
                    self.down.write(now, out);
                }
                any = true;
            }
        }
        any |= self.host_receive(now);
        any |= self.close_check(now);
        any
    }

    fn host_send(&mut self, now: Instant) -> bool {
        if self.host.tx_pending() == 0 {
            return false;
        }
        let mut bytes = Vec::with_capacity(self.host.tx_pending());
        loop {
            let mut iov = [IoSlice::new(&[]); 64];
            let n = self.host.tx_iovecs(&mut iov);
            if n == 0 {
                break;
            }
            let before = bytes.len();
            for s in &iov[..n] {
                bytes.extend_from_slice(s);
            }
            let sent = bytes.len() - before;
            self.host.tx_advance(sent);
        }
        if self.closed.is_none() && !self.severed {
            self.up.write(now, bytes);
        }
        self.host.take_completions(&mut self.done);
        true
    }

    fn host_receive(&mut self, now: Instant) -> bool {
        let mut any = false;
        while let Some(bytes) = self.down.pop_due(now) {
            any = true;
            // A fatal error leaves the queue pair dead (`dead()` keeps it);
            // what arrives later is dropped as a closed socket would.
            let _ = self.host.rx_feed(&bytes);
        }
        self.host.take_completions(&mut self.done);
        let ka = &mut self.ka_cids;
        let ok = &mut self.ka_ok;
        self.done
            .retain(|c| match ka.iter().position(|&k| k == c.cid) {
                Some(i) => {
                    ka.swap_remove(i);
                    *ok += u32::from(c.cqe.status.is_success());
                    false
                }
                None => true,
            });
        any
    }

    /// The target drops a connection that is closing, has nothing out
    /// and nothing left to send (the worker's zombie ends then too).
    fn close_check(&mut self, now: Instant) -> bool {
        let done = self
            .target
            .as_ref()
            .is_some_and(|t| t.finished() && t.output_len() == 0);
        if !done {
            return false;
        }
        self.target = None;
        self.closed = Some(now);
        self.up.clear();
        true
    }

    /// The network fails: what is in flight is lost, both ends see the
    /// connection closed (the target as an EOF), nothing more travels.
    pub(crate) fn sever(&mut self) {
        self.severed = true;
        self.down.clear();
        self.host_close();
    }

    /// The host closes its end: the target reads EOF.
    pub(crate) fn host_close(&mut self) {
        self.up.clear();
        if let Some(t) = self.target.as_mut() {
            t.close();
        }
    }
}

/// Hands the target what arrived on `up` by `now`, as far as it reads.
fn receive(t: &mut farflash_tcp::QueuePair, up: &mut Pipe, now: Instant, moved: &mut bool) -> bool {
    let mut any = false;
    while let Some(bytes) = up.pop_due(now) {
        any = true;
        if t.wants_close() {
            // The event loop reads no more from a closing connection.
            continue;
        }
        let mut rest = &bytes[..];
        while !rest.is_empty() && t.wants_read() {
            let space = t.rx_space();
            let n = space.len().min(rest.len());
            if n == 0 {
                break;
            }
            space[..n].copy_from_slice(&rest[..n]);
            t.on_received(n);
            rest = &rest[n..];
        }
        *moved = true;
        if !rest.is_empty() && !t.wants_close() {
            up.unread(now, rest.to_vec());
            break;
        }
    }
    any
}

/// Takes the target's storage requests (to `storage`) and runs its
/// offloads (authentication's DH, PTPL writes) here and now.
fn emit(t: &mut farflash_tcp::QueuePair, now: Instant, storage: &mut Storage, idx: usize) -> bool {
    let mut any = false;
    if t.has_storage_requests() {
        t.take_storage(|be, req| storage.emit(now, idx, be, req));
        any = true;
    }
    if t.has_offloads() {
        let mut done: Vec<OffloadDone> = Vec::new();
        t.take_offloads(|o| done.push(o.run()));
        for d in done {
            t.on_offload_completion(d);
        }
        any = true;
    }
    any
}
