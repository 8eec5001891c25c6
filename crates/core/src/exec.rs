//! Running commands: parse and check a command once at arrival (`begin`),
//! dispatch it to its executor once its data is in place (`execute`), as
//! Linux nvmet chooses `req->execute` at parse time. The only module that
//! knows every command set; the executors know only the queue.

use crate::command::{Begin, Outcome, Xfer};
use crate::queue::NvmeQueue;
use crate::{admin, fabrics, io};
use farflash_wire::opcode::admin as aop;
use farflash_wire::{Sqe, Status};

/// CDW0 FUSE (bits 9:8 of CDW0, bits 1:0 of the flags byte): 00b normal.
const FUSE_MASK: u8 = 0x03;

impl NvmeQueue {
    /// A command arrived: claims a slot, parses and checks it before any data
    /// moves (so that a command that will fail never asks for its data).
    pub fn begin(&mut self, sqe: Sqe) -> Begin {
        if self.deleted() {
            // A deleted I/O queue runs nothing more (Base §3.7.2).
            self.close();
            return Begin::Deleted;
        }
        if self.qid == 0 {
            self.retire_parked_aer(sqe.cid);
        }
        if self.cid_test_and_set(sqe.cid) {
            // Base §4.6.1.2.1: a CID already in flight on this queue.
            self.answer(sqe.cid, Status::CID_CONFLICT.dnr());
            return Begin::Answered;
        }
        let Some(idx) = self.take_slot(sqe) else {
            self.cid_clear(sqe.cid);
            return Begin::Overrun;
        };
        if self.target.is_shutting_down() && sqe.opcode != aop::FABRICS {
            self.complete(idx, Status::ABORT_REQUESTED, 0);
            return Begin::Answered;
        }
        self.refresh_namespaces();
        match self.classify(idx) {
            Ok(xfer) => {
                self.slots[idx].len = xfer.len();
                Begin::Ready {
                    slot: idx as u16,
                    xfer,
                }
            }
            Err(st) => {
                self.complete(idx, st, 0);
                Begin::Answered
            }
        }
    }

    /// Runs the command in `slot` (its host data, if any, in place).
    pub fn execute(&mut self, slot: u16) {
        let idx = slot as usize;
        let Some(s) = self.slots.get(idx).filter(|s| s.busy) else {
            return;
        };
        let (opcode, io) = (s.sqe.opcode, s.io);
        let outcome = if opcode == aop::FABRICS {
            fabrics::execute(self, idx)
        } else if let Some(cmd) = io {
            if !self.qos_admit(idx, cmd) {
                return; // waits for QoS tokens (`queue/qos.rs`)
            }
            io::execute(self, idx, cmd)
        } else if self.qid == 0 {
            admin::execute(self, idx)
        } else {
            Outcome::Done(Status::INVALID_OPCODE.dnr(), 0)
        };
        if let Outcome::Done(st, result) = outcome {
            self.complete(idx, st, result);
        }
    }

    /// Fails the command in `slot` without running it (the binding found
    /// its data descriptor or its data bad).
    pub fn fail(&mut self, slot: u16, status: Status) {
        if self.slots.get(slot as usize).is_some_and(|s| s.busy) {
            self.complete(slot as usize, status, 0);
        }
    }

    /// What data the command in `idx` moves, after checking it can run here.
    fn classify(&mut self, idx: usize) -> Result<Xfer, Status> {
        let sqe = self.slots[idx].sqe;
        if sqe.flags & FUSE_MASK != 0 {
            // Base §3.4.2: no fused operation is supported (Identify
            // Controller FUSES is 0). Running the second half of a Compare
            // and Write alone would write without the compare: refuse both
            // halves, as Linux nvmet (and SPDK for all but Compare and
            // Write) does. Was: FUSE ignored.
            return Err(Status::INVALID_FIELD.dnr());
        }
        if sqe.flags & 0xC0 == 0 && sqe.opcode != aop::FABRICS {
            // Fabrics §2.? : commands must use SGLs (PSDT 01b or 10b).
            return Err(Status::INVALID_FIELD.dnr());
        }
        if sqe.opcode == aop::FABRICS {
            return fabrics::classify(self, &sqe);
        }
        if self.ctrl.is_none() {
            // Nothing but Connect before the queue is connected (Fabrics §3.?).
            return Err(Status::COMMAND_SEQUENCE_ERROR.dnr());
        }
        if self.needs_auth() {
            // Base §8.13 (Linux `nvmet_check_auth_status`): only Fabrics
            // commands until the queue has authenticated.
            return Err(Status::AUTH_REQUIRED.dnr());
        }
        if self.qid == 0 {
            admin::classify(self, &sqe)
        } else {
            let (x, cmd) = io::classify(self, &sqe)?;
            self.slots[idx].io = Some(cmd);
            Ok(x)
        }
    }
}
