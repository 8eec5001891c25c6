//! Command slots: claiming one for an arriving command, completing it
//! (error log, reply data, the completion for the binding), CIDs in flight,
//! parked AERs.

use super::{Event, NvmeQueue};
use crate::command::Completion;
use crate::stats::QueueStats;
use farflash_wire::log::ErrorEntry;
use farflash_wire::{Sqe, Status};

impl NvmeQueue {
    /// Takes a free slot for a command, or `None` when all are busy.
    pub(crate) fn take_slot(&mut self, sqe: Sqe) -> Option<usize> {
        let idx = self.slots.free.pop()? as usize;
        let s = &mut self.slots[idx];
        s.sqe = sqe;
        if !s.step(Event::Claim) {
            self.slots.free.push(idx as u16);
            return None;
        }
        s.len = 0;
        s.io = None;
        s.status = Status::SUCCESS;
        s.reply = false;
        s.t0 = None;
        if self.qid != 0 {
            if let Some(st) = &self.stats {
                QueueStats::bump(&st.outstanding, 1);
                if self.life.timing {
                    // Latency samples, only while a metrics listener asks
                    // for them: the pass's clock, no clock read per command.
                    s.t0 = self.life.now;
                }
            }
        }
        Some(idx)
    }

    /// Completes the command in `idx`: frees its slot and queues its
    /// completion, with its reply data when it succeeded.
    pub(crate) fn complete(&mut self, idx: usize, status: Status, result: u64) {
        let s = &mut self.slots[idx];
        if !s.step(Event::Complete) {
            // Requests of it are still out (logged by `step`): their
            // completions answer it.
            return;
        }
        let cid = s.sqe.cid;
        let nsid = s.sqe.nsid;
        let data = if status.is_success() && s.reply && s.len > 0 {
            let len = s.len;
            s.buf.take().map(|b| (b, len))
        } else {
            None
        };
        if let Some(b) = s.buf.take() {
            self.pool.put(b);
        }
        s.io = None;
        if let Some(st) = &self.stats {
            if self.qid != 0 {
                QueueStats::drop_one(&st.outstanding);
            }
            if !status.is_success() {
                st.error((status.sct() as u16) << 8 | status.sc() as u16);
            }
        }
        if !status.is_success() {
            if let Some(c) = &self.ctrl {
                c.record_error(ErrorEntry {
                    sqid: self.qid,
                    cid,
                    status: status.to_cqe_field(false),
                    nsid,
                    trtype: self.via.trtype,
                    ..ErrorEntry::default()
                });
            }
        }
        self.cid_clear(cid);
        self.slots.free.push(idx as u16);
        self.out.done.push(Completion {
            cid,
            status,
            result,
            slot: Some(idx as u16),
            data,
        });
    }

    /// Answers a command that never got a slot.
    pub(crate) fn answer(&mut self, cid: u16, status: Status) {
        self.out.done.push(Completion {
            cid,
            status,
            result: 0,
            slot: None,
            data: None,
        });
    }

    /// Marks `cid` in flight; returns whether it already was.
    pub(crate) fn cid_test_and_set(&mut self, cid: u16) -> bool {
        let (w, b) = (cid as usize / 64, cid as usize % 64);
        let was = self.slots.cid_busy[w] & (1 << b) != 0;
        self.slots.cid_busy[w] |= 1 << b;
        was
    }

    pub(crate) fn cid_clear(&mut self, cid: u16) {
        self.slots.cid_busy[cid as usize / 64] &= !(1u64 << (cid % 64));
    }

    /// Holds the AER in `idx` until an event (Base §5.2), and delivers
    /// one that is waiting already.
    pub(crate) fn park_aer(&mut self, idx: usize) {
        if self.slots[idx].step(Event::Park) {
            self.slots.aers.push(idx as u16);
            self.deliver_events();
        }
    }

    /// Completes parked AERs with pending events (Base §5.2).
    pub(crate) fn deliver_events(&mut self) {
        let Some(ctrl) = self.ctrl.clone() else {
            return;
        };
        while !self.slots.aers.is_empty() {
            let ev = ctrl.lock().events.pop_front();
            let Some(dw0) = ev else { break };
            let idx = self.slots.aers.remove(0) as usize;
            self.complete(idx, Status::SUCCESS, dw0.into());
        }
    }

    /// A host may give up an outstanding Asynchronous Event Request locally
    /// and reuse its CID (SPDK's initiator does so at detach, for the
    /// Property Get of CC). The Linux target and SPDK's accept the new
    /// command; so does this one: the parked AER is retired without a
    /// completion, since the host no longer waits for it.
    pub(crate) fn retire_parked_aer(&mut self, cid: u16) {
        let Some(pos) = self
            .slots
            .aers
            .iter()
            .position(|&i| self.slots[i as usize].sqe.cid == cid)
        else {
            return;
        };
        let idx = self.slots.aers.remove(pos) as usize;
        let s = &mut self.slots[idx];
        if !s.step(Event::Retire) {
            return;
        }
        if let Some(b) = s.buf.take() {
            self.pool.put(b);
        }
        self.cid_clear(cid);
        self.slots.free.push(idx as u16);
    }
}
