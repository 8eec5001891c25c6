//! What the preparation thread's tasks do to the pool: own (allocate and
//! prepare) the clusters of a write, write a cluster's first data (merged
//! into zeroes or the parent's data), and Write Zeroes and Deallocate,
//! under the pool's state lock. `prep.rs` runs them, through [`Worker`],
//! on its thread.

use crate::error::no_space;
use crate::format::{UNMAPPED, ZERO};
use crate::layer::{Layer, Source};
use crate::lock::lock;
use crate::pool::{Alloc, Fill, PoolInner};
use crate::prep::{Outcome, Task, Work, Worker};
use farflash_backend::{IoBuf, IoOp};
use std::io;
use std::sync::Arc;

impl Worker for PoolInner {
    fn run_work(&self, layer: &Arc<Layer>, work: Work, op: IoOp, buf: IoBuf) -> (IoBuf, Outcome) {
        match work {
            Work::Own { offset, len } => (buf, self.own_range(layer, offset, len)),
            Work::First { offset, len, fua } => {
                let mut slot = Some(buf);
                let fill = Fill::Data {
                    buf: &mut slot,
                    within: offset % self.cluster_size(),
                    len,
                    fua,
                };
                let r = self.own_cluster_with(layer, offset / self.cluster_size(), fill);
                let buf = slot.take().unwrap_or_else(|| IoBuf::with_capacity(0));
                let outcome = match r {
                    Ok((_, _, true)) => Outcome::Wrote,
                    Ok((_, _, false)) | Err(Alloc::Retry) => Outcome::Again,
                    Err(Alloc::Failed(e)) => Outcome::Finished(Err(e)),
                };
                (buf, outcome)
            }
            Work::Zero => {
                let outcome = match self.zero_request(layer, op, &buf) {
                    Ok(true) => Outcome::Finished(Ok(())),
                    Ok(false) => Outcome::Again,
                    Err(e) => Outcome::Finished(Err(e)),
                };
                (buf, outcome)
            }
        }
    }
}

impl PoolInner {
    /// Hands `task` to the preparation thread (or, without one, runs it
    /// now); its outcome arrives in its inbox.
    pub(crate) fn prepare_later<T: Send + 'static>(&self, task: Task<T>) {
        self.prep.submit(task, self);
    }

    /// Owns every cluster of `offset..offset + len` in `layer`.
    fn own_range(&self, layer: &Arc<Layer>, offset: u64, len: u64) -> Outcome {
        let cs = self.cluster_size();
        let (first, last) = (offset / cs, (offset + len).div_ceil(cs));
        for i in first..last {
            if matches!(layer.resolve(i), Source::Own(_)) {
                continue;
            }
            match self.own_cluster(layer, i) {
                Ok(_) | Err(Alloc::Retry) => {}
                Err(Alloc::Failed(e)) => return Outcome::Finished(Err(e)),
            }
        }
        Outcome::Again
    }

    /// Write Zeroes or Deallocate in `layer`; false when the layer was
    /// replaced meanwhile (submit again: zeroing twice is harmless).
    fn zero_request(&self, layer: &Arc<Layer>, op: IoOp, buf: &IoBuf) -> io::Result<bool> {
        match op {
            IoOp::WriteZeroes { offset, len, .. } => self.zero_range(layer, offset, len),
            IoOp::Deallocate { ranges } => {
                for i in 0..ranges {
                    let (o, l) = farflash_backend::dealloc_range(buf, i);
                    if !self.zero_range(layer, o, l)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        }
    }

    /// Whole clusters are unmapped (freed once committed), parts zeroed
    /// in place.
    fn zero_range(&self, layer: &Arc<Layer>, offset: u64, len: u64) -> io::Result<bool> {
        let cs = self.cluster_size();
        let mut at = offset;
        while at < offset + len {
            let (index, within) = (at / cs, at % cs);
            let n = (cs - within).min(offset + len - at);
            if !self.zero_piece(layer, index, within, n)? {
                return Ok(false);
            }
            at += n;
        }
        Ok(true)
    }

    fn zero_piece(&self, layer: &Arc<Layer>, index: u64, within: u64, n: u64) -> io::Result<bool> {
        let cs = self.cluster_size();
        if n == cs {
            let mut st = lock(&self.state);
            if layer.is_retired() {
                return Ok(false);
            }
            let below = layer
                .parent
                .as_ref()
                .is_some_and(|a| a.resolve(index) != Source::Zero);
            match layer.resolve(index) {
                Source::Own(q) => {
                    st.set_entry(layer, index, if below { ZERO } else { UNMAPPED });
                    st.defer_free(q);
                }
                Source::Inherited(_) => {
                    if !st.fits(0, 1) {
                        return Err(no_space());
                    }
                    st.set_entry(layer, index, ZERO);
                }
                Source::Zero => {}
            }
            self.note(&st);
            return Ok(true);
        }
        let q = match layer.resolve(index) {
            Source::Zero => return Ok(true),
            Source::Own(q) => q,
            Source::Inherited(_) => match self.own_cluster(layer, index) {
                Ok((q, _)) => q,
                Err(Alloc::Retry) => return Ok(false),
                Err(Alloc::Failed(e)) => return Err(e),
            },
        };
        let (d, off) = self
            .locate(q, within)
            .ok_or_else(|| io::Error::other("cluster outside the devices"))?;
        self.devs.zero(d, off, n)?;
        Ok(true)
    }
}
