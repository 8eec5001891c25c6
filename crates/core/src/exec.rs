//! Running commands: parse and check a command once at arrival (`begin`),
//! dispatch it to its executor once its data is in place (`execute`), as
//! Linux nvmet chooses `req->execute` at parse time. The only module that
//! knows every command set, and the top of the command layer: it names the
//! executors (`fabrics`, `admin`, `io`, `nvm`, ...), they run on the queue
//! (`queue/`, whose struct this module's methods extend), and nothing below
//! names this module (`tests/module_cycles.rs`).

use crate::command::{Begin, Cmd, Outcome, Xfer};
use crate::queue::{CmdState, Done, Event, NvmeQueue, OffloadDone};
use crate::{admin, auth, fabrics, io, resv_cmd};
use farflash_backend::{IoCompletion, IoRequest, SharedBackend};
use farflash_wire::opcode::admin as aop;
use farflash_wire::{Sqe, Status};

/// CDW0 FUSE (bits 9:8 of CDW0, bits 1:0 of the flags byte): 00b normal.
const FUSE_MASK: u8 = 0x03;

/// Why a command enters its executor ([`NvmeQueue::dispatch`]).
pub(crate) enum Step {
    /// Its data is in place (`execute`).
    Start,
    /// Its QoS tokens came (`queue/qos.rs`).
    Admitted,
    /// The last of its storage requests came back (`queue/storage.rs`).
    Stored,
    /// Its offloaded work came back (`queue/offload.rs`).
    Offloaded(Done),
}

impl<C: Default> NvmeQueue<C> {
    /// A command arrived: claims a slot, parses and checks it before any data
    /// moves (so that a command that will fail never asks for its data).
    pub fn begin(&mut self, sqe: Sqe) -> Begin {
        self.advance_sqhd();
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
        let parsed = self
            .slots
            .get(idx)
            .is_some_and(|s| s.state() == CmdState::Parsed);
        if parsed && self.slots[idx].step(Event::Execute) {
            self.dispatch(idx, Step::Start);
        }
    }

    /// Fails the command in `slot` without running it (the binding found
    /// its data descriptor or its data bad).
    pub fn fail(&mut self, slot: u16, status: Status) {
        if self
            .slots
            .get(slot as usize)
            .is_some_and(|s| s.state() == CmdState::Parsed)
        {
            crate::nvm::fused_failed(self, slot as usize);
            self.complete(slot as usize, status, 0);
        }
    }

    /// Hands every emitted storage request to `run` with the backend it
    /// targets. Each must come back, once, through
    /// [`NvmeQueue::on_storage_completion`] (failed or not); a request
    /// whose namespace went away completes here.
    pub fn take_storage(&mut self, run: impl FnMut(&SharedBackend, IoRequest)) {
        if !self.has_storage_requests() {
            return;
        }
        let mut lost = self.scratch();
        self.hand_out_storage(run, &mut lost);
        for c in lost.drain(..) {
            self.on_storage_completion(c);
        }
        self.put_scratch(lost);
    }

    /// A storage request finished: the one entry point for completions.
    pub fn on_storage_completion(&mut self, c: IoCompletion) {
        if let Some(idx) = self.storage_done(c) {
            self.dispatch(idx, Step::Stored);
        }
    }

    /// Offloaded work finished: the command that waited for it goes on.
    pub fn on_offload_completion(&mut self, d: OffloadDone) {
        if let Some((idx, done)) = self.offload_done(d) {
            self.dispatch(idx, Step::Offloaded(done));
        }
    }

    /// Runs the throttled commands whose tokens have come, oldest first;
    /// returns whether any ran.
    pub fn resume_throttled(&mut self) -> bool {
        let mut any = self.nvm.has_held()
            && crate::nvm::resume(self, |q, idx| q.dispatch(idx, Step::Admitted));
        while let Some(idx) = self.admit_throttled() {
            any = true;
            self.dispatch(idx, Step::Admitted);
        }
        any
    }

    /// The one dispatcher: runs the executor of the command in `idx`
    /// (`Running`) for `step`, and acts on what it did.
    pub(crate) fn dispatch(&mut self, idx: usize, step: Step) {
        let cmd = self.slots[idx].cmd;
        let outcome = match (step, cmd) {
            (Step::Start, Cmd::Fabrics(c)) => fabrics::execute(self, idx, c),
            (Step::Start, Cmd::Admin(c)) => admin::execute(self, idx, c),
            (Step::Start, Cmd::Io(c)) if !self.qos_admit(idx, c) => return, // Throttled
            (Step::Start | Step::Admitted, Cmd::Io(c)) => io::execute(self, idx, c),
            // Only a classified I/O command starts or is admitted (a bug).
            (Step::Start | Step::Admitted, _) => Outcome::Done(Status::INTERNAL_ERROR, 0),
            (Step::Stored, _) => self.stored(idx),
            (Step::Offloaded(Done::Dh(done)), _) => auth::computed(self, done),
            (Step::Offloaded(Done::Ptpl(r)), _) => resv_cmd::persisted(r),
        };
        match outcome {
            Outcome::Done(st, result) => self.complete(idx, st, result),
            Outcome::Parked => self.park_aer(idx),
            Outcome::Held => {}
            Outcome::Pending => {
                if self.slots[idx].state().pending() == 0 {
                    // Nothing of it is out, so nothing would ever answer it.
                    tracing::error!(cid = self.slots[idx].sqe.cid, "a command waits for nothing");
                    debug_assert!(false, "Outcome::Pending with nothing out");
                    self.complete(idx, Status::INTERNAL_ERROR, 0);
                }
            }
        }
    }

    /// The last storage request of the command in `idx` came back: a
    /// controller shutdown's Flushes end it; an NVM command of `crate::nvm`
    /// goes on there; any other command is answered.
    fn stored(&mut self, idx: usize) -> Outcome {
        let s = &self.slots[idx];
        if s.sqe.opcode == aop::FABRICS {
            // The Flushes of a controller shutdown (Property Set CC.SHN): a
            // failure was logged above; the shutdown still completes.
            if let Some(ctrl) = &self.ctrl {
                ctrl.shutdown_complete();
            }
            return Outcome::Done(Status::SUCCESS, 0);
        }
        if let Some(o) = crate::nvm::stored(self, idx) {
            if matches!(o, Outcome::Done(st, _) if st.is_success()) {
                self.account(idx);
            }
            return o;
        }
        let st = self.slots[idx].status;
        self.account(idx);
        Outcome::Done(st, 0)
    }

    /// What data the command in `idx` moves, after checking it can run
    /// here; its typed command goes into its slot for the dispatcher.
    fn classify(&mut self, idx: usize) -> Result<Xfer, Status> {
        let mut r = self.parse(idx);
        let sqe = self.slots[idx].sqe;
        if self.qid != 0 && (sqe.flags & FUSE_MASK != 0 || self.nvm.expects_second()) {
            // The halves of a fused Compare and Write (`nvm/fused.rs`).
            r = crate::nvm::fused_arrive(self, idx, &sqe, r);
        }
        let (xfer, cmd) = r?;
        self.slots[idx].cmd = cmd;
        Ok(xfer)
    }

    /// Checks the command in `idx` can run here and parses it once.
    fn parse(&self, idx: usize) -> Result<(Xfer, Cmd), Status> {
        let sqe = self.slots[idx].sqe;
        if sqe.flags & FUSE_MASK != 0 && (self.qid == 0 || sqe.opcode == aop::FABRICS) {
            // Base §3.4.2: the one fused operation (Compare and Write,
            // FUSES bit 0) is an NVM I/O command pair; admin and Fabrics
            // commands are not fused: Invalid Field, as Linux nvmet and
            // SPDK answer.
            return Err(Status::INVALID_FIELD.dnr());
        }
        let psdt = sqe.flags & 0xC0;
        if (psdt == 0 || psdt == 0xC0) && sqe.opcode != aop::FABRICS {
            // Base §4.2 (CDW0 PSDT): over a fabric commands use SGLs (01b or
            // 10b); 11b is reserved. Both refused with Invalid Field, as
            // Linux nvmet does. Was: 11b taken as an SGL.
            return Err(Status::INVALID_FIELD.dnr());
        }
        if sqe.opcode == aop::FABRICS {
            let (x, c) = fabrics::classify(self, &sqe)?;
            return Ok((x, Cmd::Fabrics(c)));
        }
        let Some(ctrl) = self.ctrl.as_ref() else {
            // Nothing but Connect before the queue is connected (Fabrics §6.3).
            return Err(Status::COMMAND_SEQUENCE_ERROR.dnr());
        };
        if self.needs_auth() {
            // Base §8.13 (Linux `nvmet_check_auth_status`): only Fabrics
            // commands until the queue has authenticated.
            return Err(Status::AUTH_REQUIRED.dnr());
        }
        if !ctrl.is_ready() {
            // Base §3.5.1: only Fabrics commands until CC.EN = 1 and
            // CSTS.RDY = 1, and none after a shutdown until a reset: Command
            // Sequence Error, as Linux nvmet (`nvmet_check_ctrl_status`,
            // after the authentication check) and SPDK answer. Was: run.
            return Err(Status::COMMAND_SEQUENCE_ERROR.dnr());
        }
        if self.qid == 0 {
            let (x, c) = admin::classify(self, &sqe)?;
            Ok((x, Cmd::Admin(c)))
        } else {
            let (x, c) = io::classify(self, &sqe)?;
            Ok((x, Cmd::Io(c)))
        }
    }
}
