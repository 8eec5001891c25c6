//! The vocabulary between the command layer and a transport binding: what
//! data a command moves, typed commands (parsed once, `Cmd`), what
//! executing a command did, and the completions the binding sends.

use crate::nvm_state::NvmCmd;
use farflash_backend::IoBuf;
use farflash_wire::Status;

/// Where a command's data goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Xfer {
    None,
    /// Host to controller, this many bytes.
    H2C(u32),
    /// Controller to host, at most this many bytes.
    C2H(u32),
}

impl Xfer {
    /// Bytes moved (0 for `None`).
    pub fn len(self) -> u32 {
        match self {
            Xfer::None => 0,
            Xfer::H2C(n) | Xfer::C2H(n) => n,
        }
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

/// What the binding does with a command that just arrived
/// ([`crate::NvmeQueue::begin`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Begin {
    /// No free slot: the host sent more commands than the queue has entries
    /// (a transport-level protocol error).
    Overrun,
    /// The queue was deleted (its controller is gone or was reset): close.
    Deleted,
    /// Already answered: its completion is queued.
    Answered,
    /// Parsed and checked; runs in `slot` once its data (`xfer`) is in place
    /// ([`crate::NvmeQueue::execute`]).
    Ready { slot: u16, xfer: Xfer },
}

/// What running a command did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Complete now: status and the command-specific result, CQE DW0 in the
    /// low and DW1 in the high half (Base §4.2.1; Linux nvmet's
    /// `union nvme_result`). Reply data, if any, is in the slot.
    Done(Status, u64),
    /// Storage requests are in flight; they complete the command.
    Pending,
    /// Held until an event (AER).
    Parked,
    /// Waits, with nothing out, for another command or a range
    /// (`crate::nvm`: a fused half, a write over a fused pair's range).
    Held,
}

/// A finished command, for the binding to send, with the transport's state
/// of it (`C`) taken out of its slot: the slot may take a new command before
/// this one is sent.
#[derive(Debug)]
pub struct Completion<C = ()> {
    pub cid: u16,
    pub status: Status,
    /// CQE DW0 (low half) and DW1 (high half).
    pub result: u64,
    /// The slot it ran in (`None`: refused before it had one, e.g. a CID
    /// already in flight). The slot is free again.
    pub slot: Option<u16>,
    /// Data for the host, sent before the completion (a successful read,
    /// Identify, a log page): the buffer and how many bytes of it.
    pub data: Option<(IoBuf, u32)>,
    /// The transport's state of the command (default when it never had a slot).
    pub cmd: C,
}

/// Sent to the binding once a Connect succeeded, before its completion:
/// what the queue became (Fabrics §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connected {
    pub qid: u16,
    /// 0's based queue size.
    pub sqsize: u16,
    /// The host disabled SQ flow control (Connect CATTR bit 2).
    pub disable_sq_flow: bool,
}

/// A command parsed once, at arrival (`exec.rs` `classify`, as Linux nvmet
/// sets `req->execute` at parse time): its command set and which command
/// it is, kept in its slot; the dispatcher matches it once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Cmd {
    /// Not classified (a free slot, or a command answered before it was).
    #[default]
    Unparsed,
    Fabrics(FabricsCmd),
    Admin(AdminCmd),
    Io(IoCmd),
}

impl Cmd {
    /// The I/O command, if it is one.
    #[inline]
    pub(crate) fn io(self) -> Option<IoCmd> {
        match self {
            Cmd::Io(c) => Some(c),
            _ => None,
        }
    }
}

/// A Fabrics command (Fabrics §6), by FCTYPE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FabricsCmd {
    Connect,
    PropertyGet,
    PropertySet,
    Disconnect,
    AuthSend,
    AuthReceive,
}

/// An admin command (Base §5), by opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AdminCmd {
    Identify,
    GetLogPage,
    GetFeatures,
    SetFeatures,
    KeepAlive,
    AsyncEventRequest,
    Abort,
}

/// An I/O command parsed once, at arrival: namespace key and byte range
/// checked, carried into execution unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IoCmd {
    Read {
        ns: usize,
        offset: u64,
        len: u32,
    },
    Write {
        ns: usize,
        offset: u64,
        len: u32,
        fua: bool,
    },
    /// `ns: None`: every namespace (NSID FFFFFFFFh).
    Flush {
        ns: Option<usize>,
    },
    WriteZeroes {
        ns: usize,
        offset: u64,
        len: u64,
        fua: bool,
    },
    /// `nr` ranges of 16 bytes in the data; `deallocate`: attribute AD.
    Dsm {
        ns: usize,
        nr: u32,
        deallocate: bool,
    },
    /// Reservation Register, Report, Acquire or Release (`crate::resv`).
    Resv {
        ns: usize,
        opcode: u8,
    },
    /// Compare, Verify, Copy, a fused half (`crate::nvm`).
    Nvm(NvmCmd),
}

impl IoCmd {
    /// For the SMART log: `Some((is_write, bytes))` for a Read or Write.
    pub(crate) fn counted(&self) -> Option<(bool, u32)> {
        match *self {
            IoCmd::Read { len, .. } => Some((false, len)),
            IoCmd::Write { len, .. } => Some((true, len)),
            // Base §5.16.1.3: Host Read Commands count Compares; the Write
            // half of a fused pair is a write (their parsers decide it).
            IoCmd::Nvm(c) => c.counted(),
            _ => None,
        }
    }

    /// Whether the command modifies the medium (an EIO is then a write fault).
    pub(crate) fn writes(&self) -> bool {
        match self {
            IoCmd::Write { .. } | IoCmd::WriteZeroes { .. } => true,
            IoCmd::Nvm(c) => c.writes(),
            _ => false,
        }
    }

    /// Whether the command would modify its namespace's content, and is
    /// refused where the namespace is write protected (Base 2.0, "Namespace
    /// Write Protection"):
    /// Write, Write Zeroes, Dataset Management with Deallocate, Copy and
    /// the Write half of a fused Compare and Write. Reads, Compare, Verify,
    /// Flush, DSM without Deallocate (hints only) and the Reservation
    /// commands (they change no logical block) do not.
    pub(crate) fn modifies(&self) -> bool {
        match self {
            IoCmd::Dsm { deallocate, .. } => *deallocate,
            c => c.writes(),
        }
    }

    /// What the command spends under QoS (`queue/qos.rs`): reads and writes
    /// their I/O and bytes, Write Zeroes one write I/O (no data moves), the
    /// rest nothing.
    pub(crate) fn qos_cost(&self) -> (crate::qos::Class, u64) {
        use crate::qos::Class;
        match *self {
            IoCmd::Read { len, .. } => (Class::Read, len as u64),
            IoCmd::Write { len, .. } => (Class::Write, len as u64),
            IoCmd::WriteZeroes { .. } => (Class::Write, 0),
            IoCmd::Flush { .. } | IoCmd::Dsm { .. } | IoCmd::Resv { .. } => (Class::Other, 0),
            IoCmd::Nvm(c) => match c.cost() {
                (true, n) => (Class::Write, n),
                (false, n) => (Class::Read, n),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Cmd, IoCmd};
    use crate::nvm_state::NvmCmd;

    /// A slot's typed command is copied at every dispatch: `crate::nvm`'s
    /// commands, in one struct of common fields, take no more room than
    /// Write Zeroes already does (40 bytes with the discriminant, as when
    /// each had its own variant).
    #[test]
    fn the_typed_command_stays_small() {
        assert!(std::mem::size_of::<NvmCmd>() <= 32);
        assert!(std::mem::size_of::<IoCmd>() <= 40);
        assert!(std::mem::size_of::<Cmd>() <= 40);
    }
}
