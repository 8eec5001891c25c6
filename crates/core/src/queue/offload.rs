//! Work too slow for the event loop (the DH exponentiations of an
//! authentication transaction) leaves the queue as an [`Offload`], runs
//! wherever the event loop sends it ([`Offload::run`], a helper thread in
//! `farflash-transport`), and comes back through
//! [`NvmeQueue::on_offload_completion`]. Like a storage request it keeps its
//! command's slot pending and counts as in flight, so a queue closed
//! meanwhile waits for it. `commit` runs them inline for standalone use.

use super::{tag_slot, CmdState, Event, NvmeQueue};
use crate::resv::ptpl::PtplWrite;
use farflash_auth::{DhDone, DhJob};

/// What an offload does.
#[derive(Debug)]
pub(crate) enum Job {
    /// Authentication's DH exponentiations.
    Dh(DhJob),
    /// A reservation change written to its PTPL file.
    Ptpl(PtplWrite),
}

#[derive(Debug)]
pub(crate) enum Done {
    Dh(DhDone),
    Ptpl(std::io::Result<()>),
}

/// A piece of slow work a command waits for.
#[derive(Debug)]
pub struct Offload {
    pub tag: u64,
    job: Job,
}

/// A finished [`Offload`], to hand back to the queue its tag names.
#[derive(Debug)]
pub struct OffloadDone {
    pub tag: u64,
    done: Done,
}

impl Offload {
    /// Does the work (milliseconds, or a file write and fsync: not on an
    /// event loop).
    pub fn run(self) -> OffloadDone {
        let done = match self.job {
            Job::Dh(j) => Done::Dh(j.run()),
            Job::Ptpl(w) => Done::Ptpl(w.run()),
        };
        OffloadDone {
            tag: self.tag,
            done,
        }
    }
}

impl<C: Default> NvmeQueue<C> {
    /// Emits `job` for the command in slot `idx`.
    pub(crate) fn offload(&mut self, idx: usize, job: Job) {
        if !self.slots[idx].step(Event::Emit) {
            return;
        }
        self.out.offload_out.push(Offload {
            tag: idx as u64,
            job,
        });
        self.out.in_flight += 1;
        if let Some(c) = &self.ctrl {
            c.offload_count(true);
        }
    }

    /// Whether offloaded work waits to be taken.
    pub fn has_offloads(&self) -> bool {
        !self.out.offload_out.is_empty()
    }

    /// Hands every emitted [`Offload`] to `run`; each must come back, once,
    /// through [`NvmeQueue::on_offload_completion`].
    pub fn take_offloads(&mut self, run: impl FnMut(Offload)) {
        self.out.offload_out.drain(..).for_each(run);
    }

    /// Offloaded work finished: returns its command's slot and the result
    /// when nothing else of it is out (the dispatcher goes on with it,
    /// [`NvmeQueue::on_offload_completion`]).
    pub(crate) fn offload_done(&mut self, d: OffloadDone) -> Option<(usize, Done)> {
        self.out.in_flight = self.out.in_flight.saturating_sub(1);
        if let Some(c) = &self.ctrl {
            c.offload_count(false);
        }
        let idx = tag_slot(d.tag);
        let s = self
            .slots
            .get_mut(idx)
            .filter(|s| matches!(s.state(), CmdState::Waiting { .. }))?;
        let last = s.step(Event::Reap) && s.state() == CmdState::Running;
        last.then_some((idx, d.done))
    }

    /// Standalone use: the next emitted offload, to run here and now.
    pub(crate) fn pop_offload(&mut self) -> Option<Offload> {
        self.out.offload_out.pop()
    }
}
