//! NVMe/RDMA as the event loops see it: an RDMA CM listener ([`Listener`]),
//! an accepted queue pair ([`Incoming`]) and its connection ([`Link`]:
//! `farflash_rdma_verbs::RdmaConn`, with its verbs resources). Its
//! "socket" is its completion queue: the completion channel's fd wakes the
//! scheduler as a socket's readiness does, and a pass polls the CQ empty
//! and re-arms it.

use crate::link::{deliver, hand_out, After, Cx, Done, Incoming, Link, Listener, Sinks, Ticked};
use crate::sched::Pass;
use farflash_core::listen::ListenTransport;
use farflash_core::Target;
use farflash_rdma::cm::Limits;
use farflash_rdma_verbs::{Accepted, RdmaConn, RdmaListener, Staging};
use mio::event::Event;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// Connection requests an RDMA listener queues (`rdma_listen` backlog).
pub const RDMA_BACKLOG: i32 = 128;

/// An RDMA listener and its scratch for the queue pairs one wake-up accepts.
pub(crate) struct Rdma {
    l: RdmaListener,
    accepted: Vec<Accepted>,
}

impl Rdma {
    pub(crate) fn new(l: RdmaListener) -> Rdma {
        Rdma {
            l,
            accepted: Vec::new(),
        }
    }
}

impl Listener for Rdma {
    fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        registry.register(&mut SourceFd(&self.l.fd()), token, Interest::READABLE)
    }

    fn deregister(&mut self, registry: &Registry) {
        let _ = registry.deregister(&mut SourceFd(&self.l.fd()));
    }

    fn accept(&mut self, target: &Arc<Target>, out: &mut Vec<Box<dyn Incoming>>) {
        let t = &target.transport;
        // What a connection request may ask for, and the verbs layer's
        // staging slots.
        let limits = Limits {
            max_qid: t.max_io_queues.min(u16::MAX as u32) as u16,
            max_io_entries: t.max_queue_depth,
            max_admin_entries: 32,
            icd_bytes: t.data.in_capsule_data_size,
        };
        let staging = Staging {
            io_slots: (t.max_queue_depth as usize).min(16),
            admin_slots: 2,
            slot_bytes: t.max_io_size as usize,
        };
        self.l.accept(&limits, &staging, &mut self.accepted);
        for a in self.accepted.drain(..) {
            out.push(Box::new(a));
        }
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        Some(self.l.local_addr())
    }

    fn transport(&self) -> Option<ListenTransport> {
        Some(ListenTransport::Rdma)
    }
}

impl Incoming for Accepted {
    fn peer(&self) -> Option<SocketAddr> {
        Some(self.peer)
    }

    fn open(self: Box<Self>, target: &Arc<Target>, _now: Instant) -> Box<dyn Link> {
        let c = RdmaConn::new(*self, target.clone());
        tracing::debug!(peer = %c.peer(), local = %c.local(), "RDMA queue pair accepted");
        Box::new(c)
    }
}

impl Link for RdmaConn {
    /// Its CM and completion channels, both under `token`.
    fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        let fds = self.fds();
        for (k, fd) in fds.iter().enumerate() {
            if let Err(e) = registry.register(&mut SourceFd(fd), token, Interest::READABLE) {
                tracing::warn!(peer = %self.peer(), "cannot watch an RDMA queue: {e}");
                for fd in &fds[..k] {
                    let _ = registry.deregister(&mut SourceFd(fd));
                }
                return Err(e);
            }
        }
        Ok(())
    }

    fn deregister(&mut self, registry: &Registry) {
        for fd in self.fds() {
            let _ = registry.deregister(&mut SourceFd(&fd));
        }
    }

    fn on_event(&mut self, _ev: &Event) -> bool {
        // Its CM channel or its completion channel: CM events taken, the
        // CQ to poll (and re-arm).
        self.on_events();
        true
    }

    fn tick(&mut self, now: Instant) -> Ticked {
        // What the tick answered (an AEN) is posted at once.
        self.with_queue(|q| q.tick(now));
        Ticked {
            wake: self.wants_close(),
            throttle: self.queue().throttle_wake(),
            close: false,
        }
    }

    /// Polls its CQ until it is empty and armed (feeding the queue, posting
    /// what it produced), runs the commands whose QoS tokens came, hands its
    /// storage requests out and routes what completed; closes it once
    /// finished (an RDMA queue never lingers: it is closed only once none
    /// of its requests is out).
    fn drive(&mut self, cx: &mut Cx<'_>) -> After {
        let now = cx.now();
        let mut p = Pass::starting(cx.state());
        p.control = self.queue().nvme().qid() == 0;
        p.worked |= self.with_queue(|q| {
            q.set_now(now);
            q.resume_throttled()
        });
        p.worked |= RdmaConn::drive(self, now);
        p.worked |= cx.pump(self);
        // The CQ was polled empty and re-armed: the next completion signals.
        p.unread = false;
        let finished = self.finished();
        cx.driven(p);
        if finished {
            return After::Close;
        }
        cx.set_throttle(self.queue().throttle_wake());
        After::Open
    }

    fn in_flight(&self) -> usize {
        RdmaConn::in_flight(self)
    }

    fn hand_out(&mut self, owner: usize, to: Sinks<'_>) -> bool {
        self.with_queue(|b| hand_out(b, owner, to))
    }

    fn deliver(&mut self, now: Instant, done: Done) {
        self.with_queue(|b| deliver(b, now, done));
    }
}
