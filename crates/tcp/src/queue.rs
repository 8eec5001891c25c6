//! One NVMe/TCP connection = one queue pair, as a sans-I/O state machine.
//!
//! The transport reads socket bytes into [`QueuePair::rx_space`] and calls
//! [`QueuePair::on_received`]; the connection cuts them into PDUs (TCP §3.6),
//! hands commands and their data to its [`NvmeQueue`], and turns the
//! completions into PDUs in its output queue. Storage requests pass through
//! untouched (the shared `Binding`). Nothing here touches a socket, so every path can
//! be driven from a unit test.

use crate::cmd::TcpCmd;
use crate::link::{RxEvent, RxState, TxState};
use crate::out::OutQueue;
use farflash_core::{Binding, NvmeQueue, Target};
use farflash_wire::pdu::Negotiated;
use farflash_wire::Status;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

/// In-capsule data the admin queue accepts: the Linux host sends up to 8 KiB
/// there whatever IOCCSZ says (host/tcp.c NVME_TCP_ADMIN_CCSZ).
pub const ADMIN_ICD: usize = 8192;
/// Output beyond this stops reading new PDUs until the peer drains it.
pub(crate) const OUTPUT_HIGH_WATER: usize = 4 << 20;
/// Transient Transport Error (Base §4.6.1.2.1, 22h): a data digest mismatch.
pub const TRANSIENT_TRANSPORT_ERROR: Status = Status::new(0, 0x22);

/// The command layer's queue with NVMe/TCP's state of each command in its slots.
pub(crate) type Queue = NvmeQueue<TcpCmd>;

/// The NVMe/TCP side of one connection: framing state, the receive
/// buffer and the output queue. Each command's transfer state is in its
/// slot of the command layer's queue ([`TcpCmd`]), beside it in the [`Binding`].
pub struct Tcp {
    pub(crate) target: Arc<Target>,
    pub(crate) peer: SocketAddr,
    pub(crate) neg: Negotiated,
    /// Alignment of C2HData PDO required by the host (HPDA), 0 = none.
    pub(crate) hpda_align: usize,
    pub(crate) icd_size: usize,
    pub(crate) maxh2cdata: u32,
    pub(crate) rx: Vec<u8>,
    pub(crate) rx_start: usize,
    pub(crate) rx_end: usize,
    /// What the socket's next bytes are (`link.rs`): PDUs, an H2CData
    /// payload received in place ([`crate::link::DirectRx`]), or nothing (closed).
    pub(crate) rx_state: RxState,
    pub(crate) out: OutQueue,
    /// Data-buffer bytes charged to commands in flight (reads' data waiting
    /// in the output queue is counted there).
    pub(crate) charged: usize,
    /// Commands waiting for data-buffer budget, oldest first.
    pub(crate) waiting: VecDeque<u16>,
    /// Whether anything may still be sent (`link.rs`).
    pub(crate) tx_state: TxState,
}

/// One NVMe/TCP connection: the shared [`Binding`] over [`Tcp`]. The
/// binding's methods (storage hand-off, completions, ticks) are the same
/// for every transport; those here move bytes.
#[derive(derive_more::Deref, derive_more::DerefMut)]
pub struct QueuePair {
    pub(crate) b: Binding<Tcp>,
}

impl QueuePair {
    pub fn new(target: Arc<Target>, local: SocketAddr, peer: SocketAddr) -> QueuePair {
        let maxh2cdata = target.transport.data.max_h2c_data;
        let core = NvmeQueue::new(
            target.clone(),
            local,
            peer,
            farflash_wire::discovery::TRTYPE_TCP,
        );
        let mut t = Tcp {
            target,
            peer,
            neg: Negotiated::default(),
            hpda_align: 0,
            icd_size: ADMIN_ICD,
            maxh2cdata,
            rx: vec![0; 16 * 1024],
            rx_start: 0,
            rx_end: 0,
            rx_state: RxState::Pdus,
            out: OutQueue::default(),
            charged: 0,
            waiting: VecDeque::new(),
            tx_state: TxState::Open,
        };
        t.neg.max_data = (ADMIN_ICD as u32).max(maxh2cdata);
        QueuePair {
            b: Binding::new(core, t),
        }
    }
}

impl QueuePair {
    /// Stops reading; what is queued is still sent.
    pub fn close(&mut self) {
        self.b.with(|t, _| t.close());
    }
}

impl Tcp {
    /// Moves the receive side on by `ev` (`link.rs`); an event its state
    /// does not allow is a bug of the binding: logged and refused (false).
    pub(crate) fn rx_step(&mut self, ev: RxEvent) -> bool {
        match self.rx_state.next(ev) {
            Some(s) => {
                self.rx_state = s;
                true
            }
            None => {
                tracing::error!(peer = %self.peer, state = ?self.rx_state, event = ?ev, "NVMe/TCP receive state machine: event not allowed");
                debug_assert!(false, "{:?} cannot {ev:?}", self.rx_state);
                false
            }
        }
    }

    /// Stops reading and running commands; what is queued is still sent.
    pub(crate) fn close(&mut self) {
        self.rx_step(RxEvent::Close);
    }

    /// The transport wants the connection closed (a fatal error, the
    /// host's H2CTermReq, a deleted queue).
    pub(crate) fn closed(&self) -> bool {
        self.rx_state == RxState::Closed
    }

    /// A C2HTermReq went out: nothing more may be sent.
    pub(crate) fn terminated(&self) -> bool {
        self.tx_state == TxState::Terminated
    }

    /// An H2CData payload is being received in place (tests look).
    #[cfg(test)]
    pub(crate) fn receiving_in_place(&self) -> bool {
        matches!(self.rx_state, RxState::Data(_))
    }
}
