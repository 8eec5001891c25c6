//! Which connection a storage request or an offload belongs to ([`Owner`],
//! the high half of its tag), and the one path by which a connection's work
//! goes out and its completions come back, the same for NVMe/TCP and
//! NVMe/RDMA ([`Routed`]).

use crate::offload::OffloadPort;
use farflash_backend::{IoCompletion, QueueSet};
use farflash_core::{Binding, OffloadDone, Transport, TAG_SLOT_BITS};
use farflash_rdma::queue::Rdma;
use farflash_rdma_verbs::RdmaConn;
use farflash_tcp::{QueuePair, Tcp};
use std::time::Instant;

/// The worker's connection a tag names. The command layer keeps the
/// command's slot in the tag's low [`TAG_SLOT_BITS`]; the rest is this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    /// A TCP connection, by index.
    Tcp(usize),
    /// An RDMA queue pair, by index.
    Rdma(usize),
}

impl Owner {
    /// Marks an RDMA queue's index in the owner half of a tag.
    const RDMA: u64 = 1 << 31;

    /// The tag bits to OR into a request's tag.
    pub(crate) fn tag_bits(self) -> u64 {
        let hi = match self {
            Owner::Tcp(i) => i as u64,
            Owner::Rdma(i) => i as u64 | Owner::RDMA,
        };
        hi << TAG_SLOT_BITS
    }

    /// Whose request `tag` is.
    pub(crate) fn of(tag: u64) -> Owner {
        let hi = tag >> TAG_SLOT_BITS;
        if hi & Owner::RDMA != 0 {
            Owner::Rdma((hi & !Owner::RDMA) as usize)
        } else {
            Owner::Tcp(hi as usize)
        }
    }
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

/// Hands `c`'s offloads and storage requests out, tagged for `owner`;
/// returns whether it had any.
pub(crate) fn hand_out<C: Routed>(c: &mut C, owner: Owner, to: Sinks<'_>) -> bool {
    let hi = owner.tag_bits();
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
pub(crate) fn deliver<C: Routed>(c: &mut C, now: Instant, done: Done) {
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
    use super::Owner;
    use farflash_core::TAG_SLOT_BITS;

    #[test]
    fn owners_survive_the_tag_and_leave_the_slot_alone() {
        for owner in [
            Owner::Tcp(0),
            Owner::Tcp(7),
            Owner::Rdma(0),
            Owner::Rdma(3),
            Owner::Tcp((1 << 31) - 1),
            Owner::Rdma((1 << 31) - 1),
        ] {
            let slot = 0xABCD_u64;
            let tag = owner.tag_bits() | slot;
            assert_eq!(Owner::of(tag), owner);
            assert_eq!(tag & ((1 << TAG_SLOT_BITS) - 1), slot);
        }
        assert_ne!(Owner::Tcp(1).tag_bits(), Owner::Rdma(1).tag_bits());
    }
}
