//! One of a worker's connections, whatever its transport ([`Link`]), and
//! the routing every transport shares: a connection's storage requests and
//! offloads go out tagged with its index in the worker's one connection
//! table ([`tag_bits`]), and their completions come back by that tag
//! ([`owner_of`], [`deliver`]).
//!
//! Adding a transport: a [`Link`] variant holding its connection, a
//! [`Routed`] impl (how to reach its `Binding`), and its pass in `worker.rs`
//! `drive`; the scheduler, the tags, the ticks and the routing are shared.

use crate::conn::Conn;
use crate::offload::OffloadPort;
use farflash_backend::{IoCompletion, QueueSet};
use farflash_core::{Binding, OffloadDone, Transport, TAG_SLOT_BITS};
use farflash_rdma::queue::Rdma;
use farflash_rdma_verbs::RdmaConn;
use farflash_tcp::{QueuePair, Tcp};
use std::time::Instant;

/// A worker's connection: an NVMe/TCP connection (with its socket and
/// secure channel) or an NVMe/RDMA queue pair (with its verbs resources).
#[expect(
    clippy::large_enum_variant,
    reason = "both are over a kilobyte and differ by a fifth; boxing either adds a pointer chase to each of its passes"
)]
pub(crate) enum Link {
    Tcp(Conn),
    Rdma(RdmaConn),
}

impl Link {
    /// Storage requests and offloads out and not yet completed.
    pub(crate) fn in_flight(&self) -> usize {
        match self {
            Link::Tcp(c) => c.qp.in_flight(),
            Link::Rdma(r) => r.in_flight(),
        }
    }

    /// Data-buffer bytes the connection holds (fair sharing: a quiet
    /// connection holds little). An RDMA queue moves its data by RDMA
    /// READ and WRITE and reads no socket: it counts as quiet.
    pub(crate) fn pending_bytes(&self) -> usize {
        match self {
            Link::Tcp(c) => c.qp.pending_bytes(),
            Link::Rdma(_) => 0,
        }
    }

    /// Hands `done` to the connection, stamped with the pass's clock.
    pub(crate) fn deliver(&mut self, now: Instant, done: Done) {
        match self {
            Link::Tcp(c) => deliver(&mut c.qp, now, done),
            Link::Rdma(r) => deliver(r, now, done),
        }
    }

    /// Hands the connection's offloads and storage requests out, tagged
    /// with its index `i`; returns whether it had any.
    pub(crate) fn hand_out(&mut self, i: usize, to: Sinks<'_>) -> bool {
        match self {
            Link::Tcp(c) => hand_out(&mut c.qp, i, to),
            Link::Rdma(r) => hand_out(r, i, to),
        }
    }
}

/// The tag bits to OR into a request of connection `i`: the command layer
/// keeps the command's slot in the tag's low [`TAG_SLOT_BITS`]; the
/// connection's index is the rest.
pub(crate) fn tag_bits(i: usize) -> u64 {
    (i as u64) << TAG_SLOT_BITS
}

/// Whose request `tag` is.
pub(crate) fn owner_of(tag: u64) -> usize {
    (tag >> TAG_SLOT_BITS) as usize
}

/// A connection whose binding the worker hands work out for and routes
/// completions back to.
pub(crate) trait Routed {
    type T: Transport;

    /// Runs `f` on the connection's binding, then moves what it produced
    /// (RDMA posts its work; TCP's output waits for the next send).
    fn with_binding<R>(&mut self, f: impl FnOnce(&mut Binding<Self::T>) -> R) -> R;
}

impl Routed for QueuePair {
    type T = Tcp;

    fn with_binding<R>(&mut self, f: impl FnOnce(&mut Binding<Tcp>) -> R) -> R {
        f(self)
    }
}

impl Routed for RdmaConn {
    type T = Rdma;

    fn with_binding<R>(&mut self, f: impl FnOnce(&mut Binding<Rdma>) -> R) -> R {
        self.with_queue(f)
    }
}

/// Where the worker sends a connection's work.
pub(crate) struct Sinks<'a> {
    pub offload: &'a OffloadPort,
    pub storage: &'a mut QueueSet,
    /// Requests a storage queue refused, completed with their error.
    pub failed: &'a mut Vec<IoCompletion>,
}

/// Hands `c`'s offloads and storage requests out, tagged for connection
/// `owner`; returns whether it had any.
fn hand_out<C: Routed>(c: &mut C, owner: usize, to: Sinks<'_>) -> bool {
    let hi = tag_bits(owner);
    c.with_binding(|b| {
        let any = b.has_offloads() || b.has_storage_requests();
        if b.has_offloads() {
            b.take_offloads(|mut o| {
                o.tag |= hi;
                to.offload.submit(o);
            });
        }
        if b.has_storage_requests() {
            b.take_storage(|backend, mut req| {
                req.tag |= hi;
                to.storage.submit(backend, req, to.failed);
            });
        }
        any
    })
}

/// What came back for one of a connection's commands.
pub(crate) enum Done {
    Storage(IoCompletion),
    Offload(OffloadDone),
}

/// Hands `done` to `c`, stamped with the pass's clock.
fn deliver<C: Routed>(c: &mut C, now: Instant, done: Done) {
    c.with_binding(|b| {
        b.set_now(now);
        match done {
            Done::Storage(s) => b.on_storage_completion(s),
            Done::Offload(o) => b.on_offload_completion(o),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::{owner_of, tag_bits};
    use farflash_core::TAG_SLOT_BITS;

    #[test]
    fn owners_survive_the_tag_and_leave_the_slot_alone() {
        for owner in [0, 3, 7, (1 << 31) - 1, u32::MAX as usize] {
            let slot = 0xABCD_u64;
            let tag = tag_bits(owner) | slot;
            assert_eq!(owner_of(tag), owner);
            assert_eq!(tag & ((1 << TAG_SLOT_BITS) - 1), slot);
        }
        assert_ne!(tag_bits(1), tag_bits(2));
    }
}
