//! NVM command set I/O commands (NVM Command Set §3): Read, Write, Flush,
//! Write Zeroes, Dataset Management. `classify` checks a command before any
//! data moves (so no R2T goes out for a command that will fail); `execute`
//! turns it into backend requests.

use crate::command::{IoCmd, Outcome, Xfer};
use crate::exclusion::Range;
use crate::queue::NvmeQueue;
use farflash_backend::{IoOp, IoRequest};
use farflash_wire::identify as wid;
use farflash_wire::log as wlog;
use farflash_wire::opcode::io as op;
use farflash_wire::{Sqe, Status};

/// The NVM commands this file runs, with their Commands Supported and
/// Effects (Base §5.16.1.6; those that write change logical block content,
/// LBCC) and the Identify Controller ONCS bit that advertises an optional
/// one (Base §5.17.2.1; 0: mandatory). A new command adds its row here, or,
/// when it lives in `crate::nvm`, in that module's table.
const OWN: [(u8, u32, u16); 9] = [
    (op::FLUSH, wlog::CSUPP, 0),
    (op::WRITE, wlog::CSUPP | wlog::LBCC, 0),
    (op::READ, wlog::CSUPP, 0),
    (
        op::WRITE_ZEROES,
        wlog::CSUPP | wlog::LBCC,
        wid::ONCS_WRITE_ZEROES,
    ),
    (
        op::DATASET_MANAGEMENT,
        wlog::CSUPP | wlog::LBCC,
        wid::ONCS_DSM,
    ),
    (
        op::RESERVATION_REGISTER,
        wlog::CSUPP,
        wid::ONCS_RESERVATIONS,
    ),
    (op::RESERVATION_REPORT, wlog::CSUPP, wid::ONCS_RESERVATIONS),
    (op::RESERVATION_ACQUIRE, wlog::CSUPP, wid::ONCS_RESERVATIONS),
    (op::RESERVATION_RELEASE, wlog::CSUPP, wid::ONCS_RESERVATIONS),
];

/// Every I/O command: this file's and `crate::nvm`'s (Compare, Verify, Copy).
const COMMANDS: [(u8, u32, u16); OWN.len() + crate::nvm::COMMANDS.len()] = {
    let mut all = [(0, 0, 0); OWN.len() + crate::nvm::COMMANDS.len()];
    let mut i = 0;
    while i < OWN.len() {
        all[i] = OWN[i];
        i += 1;
    }
    let mut j = 0;
    while j < crate::nvm::COMMANDS.len() {
        all[i + j] = crate::nvm::COMMANDS[j];
        j += 1;
    }
    all
};

/// The I/O part of the Commands Supported and Effects log (`admin.rs`).
pub(crate) const EFFECTS: [(u8, u32); COMMANDS.len()] = {
    let mut e = [(0, 0); COMMANDS.len()];
    let mut i = 0;
    while i < COMMANDS.len() {
        e[i] = (COMMANDS[i].0, COMMANDS[i].1);
        i += 1;
    }
    e
};

/// Identify Controller ONCS: the optional NVM commands supported (`identify.rs`).
pub(crate) const ONCS: u16 = {
    let mut bits = 0;
    let mut i = 0;
    while i < COMMANDS.len() {
        bits |= COMMANDS[i].2;
        i += 1;
    }
    bits
};

/// NSID meaning "every namespace" (Base §3.2.1.2), valid for Flush.
pub const NSID_ALL: u32 = 0xFFFF_FFFF;
/// Dataset Management: at most 256 ranges of 16 bytes (NVM Command Set §3.2.3).
const DSM_RANGE_LEN: u32 = 16;
/// DSM attribute: Deallocate (CDW11 bit 2).
const DSM_AD: u32 = 1 << 2;

fn ns_index<C: Default>(q: &NvmeQueue<C>, nsid: u32) -> Result<usize, Status> {
    let key = q
        .namespace_index(nsid)
        .ok_or(Status::INVALID_NAMESPACE.dnr())?;
    if !q.blocks.ana_blocked.is_empty() {
        ana_check(q, key)?;
    }
    Ok(key)
}

/// Base §8.20.3: a command on a namespace whose ANA group is inaccessible,
/// lost or changing through this path gets the path-related status (no
/// DNR: the host retries on another path).
#[cold]
fn ana_check<C: Default>(q: &NvmeQueue<C>, key: usize) -> Result<(), Status> {
    let Some(ns) = q.ns.get(key) else {
        return Ok(());
    };
    match q.blocks.ana_blocked.iter().find(|(g, _)| *g == ns.anagrpid) {
        Some(&(_, state)) => crate::ana::status(state).map_or(Ok(()), Err),
        None => Ok(()),
    }
}

/// Parses and checks an I/O command before any data moves; one that would
/// modify a namespace the controller sees write protected (a read-only
/// host's, `Controller::read_only`) is refused here, the one place every
/// I/O command passes (the Write half of a fused Compare and Write too:
/// `nvm/fused.rs` takes its refusal and fails the Compare).
pub(crate) fn classify<C: Default>(q: &NvmeQueue<C>, sqe: &Sqe) -> Result<(Xfer, IoCmd), Status> {
    let (x, cmd) = parse(q, sqe)?;
    if cmd.modifies() && q.ctrl.as_ref().is_some_and(|c| c.read_only()) {
        // Base 2.0 §4.6.1.2.1 (Generic Command Status 20h, Namespace is
        // Write Protected) and "Namespace Write Protection" (commands
        // that modify the namespace are aborted with it; reads, Compare,
        // Verify and Flush run). DNR: the grant does not change for this
        // controller's life, so a retry here fails the same way (Linux
        // nvmet, whose write protection Set Features can lift, leaves DNR
        // clear).
        return Err(Status::NS_WRITE_PROTECTED.dnr());
    }
    Ok((x, cmd))
}

/// Parses and checks an I/O command (its namespace, range, reservation
/// access) into its typed form.
fn parse<C: Default>(q: &NvmeQueue<C>, sqe: &Sqe) -> Result<(Xfer, IoCmd), Status> {
    match sqe.opcode {
        op::READ | op::WRITE => {
            let ns = ns_index(q, sqe.nsid)?;
            if !q.blocks.resv_block.is_empty() {
                crate::resv_cmd::check_access(q, ns, sqe.opcode == op::WRITE)?;
            }
            let (offset, len) = q.ns.lba_range(ns, sqe.slba(), sqe.nlb() as u64 + 1)?;
            if len > q.target.transport.max_io_size as u64 {
                // Base §5.17 (Identify Controller MDTS): a longer transfer is
                // Invalid Field in Command.
                return Err(Status::INVALID_FIELD.dnr());
            }
            let len = len as u32;
            Ok(if sqe.opcode == op::READ {
                (Xfer::C2H(len), IoCmd::Read { ns, offset, len })
            } else {
                let fua = sqe.fua() || q.write_through();
                (
                    Xfer::H2C(len),
                    IoCmd::Write {
                        ns,
                        offset,
                        len,
                        fua,
                    },
                )
            })
        }
        op::FLUSH => {
            let ns = if sqe.nsid == NSID_ALL {
                None
            } else {
                Some(ns_index(q, sqe.nsid)?)
            };
            Ok((Xfer::None, IoCmd::Flush { ns }))
        }
        op::WRITE_ZEROES => {
            let ns = ns_index(q, sqe.nsid)?;
            if !q.blocks.resv_block.is_empty() {
                crate::resv_cmd::check_access(q, ns, true)?;
            }
            let (offset, len) = q.ns.lba_range(ns, sqe.slba(), sqe.nlb() as u64 + 1)?;
            let fua = sqe.fua() || q.write_through();
            Ok((
                Xfer::None,
                IoCmd::WriteZeroes {
                    ns,
                    offset,
                    len,
                    fua,
                },
            ))
        }
        op::DATASET_MANAGEMENT => {
            let ns = ns_index(q, sqe.nsid)?;
            if !q.blocks.resv_block.is_empty() {
                crate::resv_cmd::check_access(q, ns, true)?;
            }
            let nr = (sqe.cdw10 & 0xFF) + 1;
            let deallocate = sqe.cdw11 & DSM_AD != 0;
            Ok((
                Xfer::H2C(nr * DSM_RANGE_LEN),
                IoCmd::Dsm { ns, nr, deallocate },
            ))
        }
        op::RESERVATION_REGISTER
        | op::RESERVATION_REPORT
        | op::RESERVATION_ACQUIRE
        | op::RESERVATION_RELEASE => {
            let ns = ns_index(q, sqe.nsid)?;
            let x = crate::resv_cmd::classify(sqe)?;
            Ok((
                x,
                IoCmd::Resv {
                    ns,
                    opcode: sqe.opcode,
                },
            ))
        }
        o if crate::nvm::runs(o) => {
            let ns = ns_index(q, sqe.nsid)?;
            crate::nvm::classify(q, sqe, ns)
        }
        _ => Err(Status::INVALID_OPCODE.dnr()),
    }
}

/// Runs a parsed I/O command: storage requests out, tagged with the slot.
/// A write first enters its namespace's range exclusion (`crate::nvm`),
/// and waits while a fused Compare and Write holds its range.
pub(crate) fn execute<C: Default>(q: &mut NvmeQueue<C>, idx: usize, cmd: IoCmd) -> Outcome {
    let extent = match cmd {
        IoCmd::Nvm(c) => return crate::nvm::execute(q, idx, c),
        IoCmd::Write {
            ns, offset, len, ..
        } => Some((ns, Range::new(offset, len as u64))),
        IoCmd::WriteZeroes {
            ns, offset, len, ..
        } => Some((ns, Range::new(offset, len))),
        IoCmd::Dsm {
            ns,
            deallocate: true,
            ..
        } => Some((ns, Range::ALL)),
        _ => None,
    };
    let Some((ns, r)) = extent else {
        return run(q, idx, cmd);
    };
    if !crate::nvm::admit(q, idx, ns, r) {
        return Outcome::Held;
    }
    let o = run(q, idx, cmd);
    if o != Outcome::Pending {
        // Nothing went out: it is done with its range.
        crate::nvm::leave(q, idx);
    }
    o
}

fn run<C: Default>(q: &mut NvmeQueue<C>, idx: usize, cmd: IoCmd) -> Outcome {
    let tag = idx as u64;
    let result = match cmd {
        IoCmd::Read { ns, offset, len } => {
            let buf = q.pool.get(len as usize);
            q.slots[idx].reply = true;
            let op = IoOp::Read { offset, len };
            q.submit(idx, ns, IoRequest { tag, op, buf })
        }
        IoCmd::Write {
            ns,
            offset,
            len,
            fua,
        } => {
            let Some(buf) = q.slots[idx].buf.take() else {
                return Outcome::Done(Status::INTERNAL_ERROR, 0);
            };
            let op = IoOp::Write { offset, len, fua };
            q.submit(idx, ns, IoRequest { tag, op, buf })
        }
        IoCmd::Flush { ns } => {
            // One Flush per namespace for NSID FFFFFFFFh (Base §3.2.1.2), by
            // position in the live list: no allocation per command.
            let count = if ns.is_none() { q.ns.live_count() } else { 1 };
            let mut r = Ok(());
            for pos in 0..count {
                let Some(key) = ns.or_else(|| q.ns.live_key_at(pos)) else {
                    break;
                };
                let buf = q.pool.get(0);
                let op = IoOp::Flush;
                r = r.and(q.submit(idx, key, IoRequest { tag, op, buf }));
            }
            r
        }
        IoCmd::WriteZeroes {
            ns,
            offset,
            len,
            fua,
        } => {
            let buf = q.pool.get(0);
            let op = IoOp::WriteZeroes { offset, len, fua };
            q.submit(idx, ns, IoRequest { tag, op, buf })
        }
        IoCmd::Dsm { ns, nr, deallocate } => return dsm(q, idx, ns, nr, deallocate),
        IoCmd::Resv { ns, opcode } => return crate::resv_cmd::execute(q, idx, ns, opcode),
        IoCmd::Nvm(c) => return crate::nvm::execute(q, idx, c),
    };
    match result {
        Ok(()) if q.slots[idx].state().pending() > 0 => Outcome::Pending,
        Ok(()) => Outcome::Done(Status::SUCCESS, 0),
        Err(st) => {
            if q.slots[idx].state().pending() > 0 {
                // Some requests went out: let them finish, then fail the command.
                q.slots[idx].status = st;
                Outcome::Pending
            } else {
                Outcome::Done(st, 0)
            }
        }
    }
}

/// Dataset Management (NVM Command Set §3.2.3): only Deallocate acts;
/// the other attributes are hints a RAM or file backend cannot use.
fn dsm<C: Default>(
    q: &mut NvmeQueue<C>,
    idx: usize,
    ns_idx: usize,
    nr: u32,
    deallocate: bool,
) -> Outcome {
    if !deallocate {
        return Outcome::Done(Status::SUCCESS, 0);
    }
    let nr = nr as usize;
    let Some(data) = q.slots[idx].buf.take() else {
        return Outcome::Done(Status::INTERNAL_ERROR, 0);
    };
    let mut ranges = q.pool.get(nr * 16);
    let mut n = 0usize;
    let mut bad = None;
    for r in data.as_slice().chunks_exact(16).take(nr) {
        // Range: context attributes (0..4), length in LBAs (4..8), SLBA (8..16).
        let nlb = farflash_wire::le::u32_at(r, 4) as u64;
        let slba = farflash_wire::le::u64_at(r, 8);
        if nlb == 0 {
            continue;
        }
        match q.ns.lba_range(ns_idx, slba, nlb) {
            Ok((off, len)) => {
                let out = &mut ranges.as_mut_slice()[n * 16..n * 16 + 16];
                out[..8].copy_from_slice(&off.to_ne_bytes());
                out[8..].copy_from_slice(&len.to_ne_bytes());
                n += 1;
            }
            Err(st) => bad = Some(st),
        }
    }
    q.pool.put(data);
    if let Some(st) = bad {
        q.pool.put(ranges);
        return Outcome::Done(st, 0);
    }
    if n == 0 {
        q.pool.put(ranges);
        return Outcome::Done(Status::SUCCESS, 0);
    }
    ranges.set_len(n * 16);
    match q.submit(
        idx,
        ns_idx,
        IoRequest {
            tag: idx as u64,
            op: IoOp::Deallocate { ranges: n as u32 },
            buf: ranges,
        },
    ) {
        Ok(()) => Outcome::Pending,
        Err(st) => Outcome::Done(st, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::{COMMANDS, EFFECTS, ONCS};
    use farflash_wire::identify as wid;
    use farflash_wire::log as wlog;
    use farflash_wire::opcode::io as op;

    /// The effects log and ONCS follow the one table of commands.
    #[test]
    fn the_effects_log_and_oncs_come_from_the_command_table() {
        // This file's optional commands and those of `crate::nvm`'s rows,
        // nothing else (that Identify reports Compare's, Verify's and
        // Copy's is `nvm/tests_caps.rs`'s).
        let nvm = crate::nvm::COMMANDS.iter().fold(0, |a, c| a | c.2);
        assert_eq!(
            ONCS,
            wid::ONCS_DSM | wid::ONCS_WRITE_ZEROES | wid::ONCS_RESERVATIONS | nvm
        );
        assert_eq!(EFFECTS.len(), COMMANDS.len());
        for (e, c) in EFFECTS.iter().zip(COMMANDS) {
            assert_eq!(*e, (c.0, c.1));
        }
        assert!(EFFECTS.contains(&(op::WRITE, wlog::CSUPP | wlog::LBCC)));
        assert!(EFFECTS.contains(&(op::READ, wlog::CSUPP)));
        assert!(EFFECTS.contains(&(op::COPY, wlog::CSUPP | wlog::LBCC)));
    }
}
