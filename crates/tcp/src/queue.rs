//! One NVMe/TCP connection = one queue pair, as a sans-I/O state machine.
//!
//! The transport reads socket bytes into [`QueuePair::rx_space`] and calls
//! [`QueuePair::on_received`]; the connection cuts them into PDUs (TCP §3.6),
//! hands commands and their data to its [`NvmeQueue`], and turns the
//! completions into PDUs in its output queue. Storage requests pass through
//! untouched (the shared `Binding`). Nothing here touches a socket, so every path can
//! be driven from a unit test.

use crate::cmd::TcpCmd;
use crate::tx::OutQueue;
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

/// An H2CData PDU whose header was checked and whose data is still arriving:
/// the socket's bytes go straight into the command's data buffer
/// ([`QueuePair::rx_space`]) instead of the receive buffer, so a large write
/// is copied once from the socket and never staged or compacted.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DirectRx {
    pub slot: u16,
    /// Next byte of the command's buffer to fill.
    pub at: u32,
    /// End of this PDU's data in the command's buffer.
    pub end: u32,
}

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
    /// Data of an H2CData PDU being received in place (see [`DirectRx`]).
    pub(crate) direct: Option<DirectRx>,
    pub(crate) out: OutQueue,
    /// The transport wants the connection closed (TermReq, peer's H2CTermReq).
    pub(crate) closing: bool,
    /// Data-buffer bytes charged to commands in flight (reads' data waiting
    /// in the output queue is counted there).
    pub(crate) charged: usize,
    /// Commands waiting for data-buffer budget, oldest first.
    pub(crate) waiting: VecDeque<u16>,
    /// A C2HTermReq went out: nothing may follow it (TCP §3.6.2.5); commands
    /// still finish internally so their buffers and storage I/O drain.
    pub(crate) term_sent: bool,
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
        let maxh2cdata = target.transport.max_h2c_data;
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
            direct: None,
            out: OutQueue::default(),
            closing: false,
            charged: 0,
            waiting: VecDeque::new(),
            term_sent: false,
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
        self.b.with(|t, _| t.closing = true);
    }
}
