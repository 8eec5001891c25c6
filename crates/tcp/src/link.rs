//! The connection's receive and send states (as nvmet-tcp's `recv_state`
//! and `send_state`): what the next bytes from the socket are, and whether
//! anything may still go out. Each is one enum changed only through its
//! table here ([`RxState::next`], [`TxState::next`]).
//!
//! ```text
//!   receive:   Pdus --in place--> Data(DirectRx) --payload in--> Pdus
//!                |                     |
//!                `------ close --------+-----> Closed
//!
//!   send:      Open --C2HTermReq--> Terminated
//! ```

/// An H2CData PDU whose header was checked and whose data is still arriving:
/// the socket's bytes go straight into the command's data buffer
/// ([`QueuePair::rx_space`]) instead of the receive buffer, so a large write
/// is copied once from the socket and never staged or compacted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DirectRx {
    pub slot: u16,
    /// Next byte of the command's buffer to fill.
    pub at: u32,
    /// End of this PDU's data in the command's buffer.
    pub end: u32,
}

/// What the socket's next bytes are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum RxState {
    /// PDUs, cut out of the receive buffer (TCP §3.6).
    #[default]
    Pdus,
    /// The rest of an H2CData payload, received straight into its
    /// command's buffer.
    Data(DirectRx),
    /// Nothing more is read or run: a fatal error, the host's H2CTermReq,
    /// a deleted queue, the event loop's close.
    Closed,
}

/// What happens to the receive side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RxEvent {
    /// An H2CData header was checked; its payload is received in place.
    InPlace(DirectRx),
    /// `n` more payload bytes arrived in place.
    Received(u32),
    /// The connection stops reading.
    Close,
}

impl RxState {
    /// The state `ev` leads to, or `None` when `ev` cannot happen here.
    pub(crate) fn next(self, ev: RxEvent) -> Option<RxState> {
        use RxEvent::*;
        use RxState::*;
        Some(match (self, ev) {
            (Pdus, InPlace(d)) if d.at < d.end => Data(d),
            (Data(d), Received(n)) => {
                let at = d.at.saturating_add(n).min(d.end);
                if at == d.end {
                    Pdus
                } else {
                    Data(DirectRx { at, ..d })
                }
            }
            (_, Close) => Closed,
            _ => return None,
        })
    }
}

/// Whether anything may still be sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum TxState {
    /// Responses, R2Ts and data go out.
    #[default]
    Open,
    /// A C2HTermReq went out: nothing may follow it (TCP §3.6.2.5);
    /// commands still finish internally so their buffers and storage I/O
    /// drain, and their output is dropped.
    Terminated,
}

impl TxState {
    /// The state after a C2HTermReq, or `None` when one already went out.
    pub(crate) fn next(self) -> Option<TxState> {
        match self {
            TxState::Open => Some(TxState::Terminated),
            TxState::Terminated => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RxEvent::*;
    use super::RxState::*;
    use super::{DirectRx, TxState};

    const D: DirectRx = DirectRx {
        slot: 3,
        at: 100,
        end: 4196,
    };

    #[test]
    fn an_in_place_payload_ends_back_at_pdus() {
        let s = Pdus.next(InPlace(D)).unwrap();
        assert_eq!(s, Data(D));
        let s = s.next(Received(4000)).unwrap();
        assert!(matches!(s, Data(d) if d.at == 4100 && d.end == 4196 && d.slot == 3));
        assert_eq!(s.next(Received(96)), Some(Pdus));
        // More than the payload cannot be written into its space; counted to its end.
        assert_eq!(Data(D).next(Received(u32::MAX)), Some(Pdus));
    }

    #[test]
    fn only_the_drawn_transitions_exist() {
        let empty = DirectRx { at: 5, ..D };
        let empty = DirectRx { end: 5, ..empty };
        assert_eq!(
            Pdus.next(InPlace(empty)),
            None,
            "nothing to receive in place"
        );
        assert_eq!(Pdus.next(Received(1)), None);
        assert_eq!(Data(D).next(InPlace(D)), None);
        assert_eq!(Closed.next(InPlace(D)), None);
        assert_eq!(Closed.next(Received(1)), None);
        for s in [Pdus, Data(D), Closed] {
            assert_eq!(s.next(Close), Some(Closed));
        }
        assert_eq!(TxState::Open.next(), Some(TxState::Terminated));
        assert_eq!(TxState::Terminated.next(), None);
    }
}
