//! The reservation commands on a queue (NVM Command Set §3.2.4-3.2.7):
//! parse, run the state machine under the namespace's lock, tell the
//! queues (namespace generation) and the hosts (Reservation Notification
//! log, `Target::reservation_notices`), write the PTPL file off the event
//! loop; and the per-I/O access check against the queue's cache.

use crate::command::{Outcome, Xfer};
use crate::queue::{Job, NvmeQueue};
use farflash_wire::opcode::io as op;
use farflash_wire::resv::{self as wr, ResvCdw10};
use farflash_wire::{Sqe, Status};

/// Largest Reservation Report we build (64-byte entries: 16383 registrants).
const MAX_REPORT: u64 = 1 << 20;

/// What data a reservation command moves.
pub(crate) fn classify(sqe: &Sqe) -> Result<Xfer, Status> {
    Ok(match sqe.opcode {
        op::RESERVATION_REGISTER | op::RESERVATION_ACQUIRE => Xfer::H2C(wr::KEYS_LEN),
        op::RESERVATION_RELEASE => Xfer::H2C(wr::KEY_LEN),
        _ => {
            let len = wr::report_len(sqe);
            if len > MAX_REPORT {
                return Err(Status::INVALID_FIELD.dnr());
            }
            Xfer::C2H(len as u32)
        }
    })
}

/// Base §8.19: a read or write the reservation does not allow this host
/// gets Reservation Conflict.
#[cold]
pub(crate) fn check_access<C: Default>(
    q: &NvmeQueue<C>,
    key: usize,
    write: bool,
) -> Result<(), Status> {
    match q.blocks.resv_block.iter().find(|(k, _)| *k == key) {
        Some((_, a)) if (write && !a.write) || (!write && !a.read) => {
            Err(Status::RESERVATION_CONFLICT)
        }
        _ => Ok(()),
    }
}

pub(crate) fn execute<C: Default>(
    q: &mut NvmeQueue<C>,
    idx: usize,
    key: usize,
    opcode: u8,
) -> Outcome {
    let sqe = q.slots[idx].sqe;
    let (Some(ns), Some(ctrl)) = (q.ns.get(key).cloned(), q.ctrl.clone()) else {
        return Outcome::Done(Status::INVALID_NAMESPACE.dnr(), 0);
    };
    let Some(sub) = ctrl.subsystem().cloned() else {
        return Outcome::Done(Status::INVALID_OPCODE.dnr(), 0);
    };
    let c = ResvCdw10::from_sqe(&sqe);
    if opcode == op::RESERVATION_REPORT {
        // Fabrics host identifiers are 128-bit: only the extended data
        // structure can carry them (Base §7.5, EDS; else Host Identifier
        // Inconsistent Format).
        if !wr::report_eds(&sqe) {
            return Outcome::Done(Status::HOST_ID_INCONSISTENT.dnr(), 0);
        }
        let st = ns.resv.snapshot().report();
        let out = q.reply_buf(idx, st.len(true));
        st.encode(out, true);
        return Outcome::Done(Status::SUCCESS, 0);
    }
    let (k1, k2) = match q.slots[idx].buf.take() {
        Some(b) => {
            let k = wr::keys(b.as_slice());
            q.pool.put(b);
            k
        }
        None => (0, 0),
    };
    let h = ctrl.hostid;
    let (result, write) = {
        let mut cell = ns.resv.lock();
        let was = cell.r.ptpl;
        let r = match opcode {
            op::RESERVATION_REGISTER => {
                // NVM §3.2.6 (CDW10 CPTPL). 01b is reserved and no receiver
                // check is asked for: like Linux nvmet and SPDK, it changes
                // nothing (was: Invalid Field). Clearing PTPL where it
                // cannot be set (no PTPL file) changes nothing either, as
                // in SPDK (was: Invalid Field); setting it there is refused,
                // as SPDK does (RESCAP.PTPL is clear).
                let cptpl = match c.cptpl {
                    wr::CPTPL_SET if ns.resv.file.is_none() => {
                        return Outcome::Done(Status::INVALID_FIELD.dnr(), 0);
                    }
                    wr::CPTPL_SET => Some(true),
                    wr::CPTPL_CLEAR if ns.resv.file.is_some() => Some(false),
                    _ => None,
                };
                let r = cell.r.register(h, ctrl.cntlid, c.action, c.iekey, k1, k2);
                if let (Ok(_), Some(p)) = (&r, cptpl) {
                    cell.r.ptpl = p;
                }
                r
            }
            op::RESERVATION_ACQUIRE => cell.r.acquire(h, c.action, c.iekey, c.rtype, k1, k2),
            _ => cell.r.release(h, c.action, c.iekey, c.rtype, k1),
        };
        let write = if r.is_ok() {
            cell.persist(&ns.resv, was)
        } else {
            None
        };
        (r, write)
    };
    let notices = match result {
        Ok(n) => n,
        Err(st) => return Outcome::Done(st, 0),
    };
    sub.reservations_changed();
    q.refresh_namespaces();
    q.target.reservation_notices(&sub, ns.nsid, &notices);
    match write {
        Some(w) => {
            q.offload(idx, Job::Ptpl(w));
            Outcome::Pending
        }
        None => Outcome::Done(Status::SUCCESS, 0),
    }
}

/// The PTPL file of a reservation change was written (or not).
pub(crate) fn persisted(r: std::io::Result<()>) -> Outcome {
    let st = match r {
        Ok(()) => Status::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "cannot write the PTPL file; the reservation change is not persistent");
            Status::INTERNAL_ERROR
        }
    };
    Outcome::Done(st, 0)
}
