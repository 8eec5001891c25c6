//! What every handle on a local pool shares ([`PoolInner`]): its state
//! under the state lock, commits, and cluster allocation and preparation.
//! The committer drives it through [`Commits`]; creating and opening it
//! is `open.rs`.

use crate::committer::{Commits, Committer};
use crate::dev::Devices;
use crate::error::no_space;
use crate::format::pack;
use crate::grace::Grace;
use crate::layer::{Layer, Source};
use crate::lock::lock;
use crate::meta::Meta;
use crate::prep::Preparer;
use crate::state::State;
use farflash_backend::{IoBuf, IoOp};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What every handle on a pool shares.
pub(crate) struct PoolInner {
    pub(crate) name: String,
    pub(crate) devs: Devices,
    pub(crate) state: Mutex<State>,
    meta: Mutex<Meta>,
    /// Changes made (mirror of `State::change_seq`) and committed.
    pub(crate) changed: AtomicU64,
    pub(crate) durable: AtomicU64,
    /// Serializes management calls.
    pub(crate) mgmt: Mutex<()>,
    pub(crate) committer: Arc<Committer>,
    /// The preparation thread (allocations, Write Zeroes, Deallocate).
    pub(crate) prep: Arc<Preparer>,
    /// Requests in flight, for freed clusters (the state's own).
    pub(crate) grace: Arc<Grace>,
    /// Device locks held while the pool lives (pools opened from paths).
    locks: Mutex<Vec<std::fs::File>>,
    /// A cluster-sized buffer of zeroes, reused by preparations: the image
    /// a new cluster is written from (see [`PoolInner::first_write`]).
    image: Mutex<Option<IoBuf>>,
}

/// What a newly allocated cluster is filled with before it is mapped.
pub(crate) enum Fill<'a> {
    /// What the logical cluster read so far: zeroes, or the parent's data.
    Prepare,
    /// The cluster's first write, `len` bytes at byte `within` of it: its
    /// data (taken and given back).
    Data {
        buf: &'a mut Option<IoBuf>,
        within: u64,
        len: u64,
        fua: bool,
    },
}

/// Why an allocation did not happen.
pub(crate) enum Alloc {
    /// The layer was replaced: look the volume's layer up again.
    Retry,
    Failed(io::Error),
}

impl PoolInner {
    /// A pool over `devs` holding `state`, its metadata at `m`; its
    /// stages are not started (`open.rs` starts them).
    pub(crate) fn new(name: String, devs: Devices, state: State, m: Meta) -> PoolInner {
        let grace = state.grace();
        PoolInner {
            name,
            devs,
            state: Mutex::new(state),
            meta: Mutex::new(m),
            changed: AtomicU64::new(0),
            durable: AtomicU64::new(0),
            mgmt: Mutex::new(()),
            committer: Arc::new(Committer::default()),
            prep: Arc::new(Preparer::default()),
            grace,
            locks: Mutex::new(Vec::new()),
            image: Mutex::new(None),
        }
    }

    pub(crate) fn cluster_size(&self) -> u64 {
        self.devs.cluster_size
    }

    /// Keeps `locks` for the pool's life.
    pub(crate) fn hold(&self, locks: Vec<std::fs::File>) {
        lock(&self.locks).extend(locks);
    }

    /// Commits every change up to `target` (durable when it returns).
    pub(crate) fn commit_to(&self, target: u64) -> io::Result<()> {
        let mut m = lock(&self.meta);
        if self.durable.load(Ordering::SeqCst) >= target {
            return Ok(());
        }
        let (recs, upto, full) = {
            let mut st = lock(&self.state);
            let (recs, upto) = st.take_pending();
            let need = pack(&recs).len() as u64;
            let full = (m.used + need > m.sb.journal_blocks).then(|| st.checkpoint());
            (recs, upto, full)
        };
        let res = self.devs.flush_all().and_then(|()| match &full {
            Some(all) => m.checkpoint(&self.devs, all),
            None if recs.is_empty() => Ok(()),
            None => m.append(&self.devs, &recs).and_then(|ok| match ok {
                true => Ok(()),
                false => Err(io::Error::other("journal full after the check")),
            }),
        });
        match res {
            Ok(()) => {
                self.durable.fetch_max(upto, Ordering::SeqCst);
                self.reclaim(upto);
                Ok(())
            }
            Err(e) => {
                lock(&self.state).restore_pending(recs);
                tracing::error!(pool = %self.name, error = %e, "metadata commit failed");
                Err(e)
            }
        }
    }

    /// Frees the clusters whose release `upto` committed: punched out of
    /// their device first (thin reclaim on the file or device; they are
    /// not allocatable meanwhile), then handed to the allocator.
    fn reclaim(&self, upto: u64) {
        let mut freed = lock(&self.state).take_releasable(upto);
        freed.sort_unstable();
        let cs = self.cluster_size();
        let mut runs: Vec<(usize, Vec<(u64, u64)>)> = Vec::new();
        for &p in &freed {
            let Some((d, off)) = self.devs.locate(p) else {
                continue;
            };
            match runs.iter_mut().find(|(x, _)| *x == d) {
                Some((_, r)) => match r.last_mut() {
                    Some(last) if last.0 + last.1 == off => last.1 += cs,
                    _ => r.push((off, cs)),
                },
                None => runs.push((d, vec![(off, cs)])),
            }
        }
        for (d, ranges) in runs {
            for chunk in ranges.chunks(256) {
                let buf = farflash_backend::dealloc_buf(chunk);
                let op = IoOp::Deallocate {
                    ranges: chunk.len() as u32,
                };
                if let Err(e) = self.devs.run(d, op, buf) {
                    tracing::debug!(pool = %self.name, device = d, error = %e, "punching freed clusters failed");
                }
            }
        }
        lock(&self.state).release(&freed);
    }

    /// Commits everything changed so far.
    pub(crate) fn commit(&self) -> io::Result<()> {
        self.commit_to(self.changed.load(Ordering::SeqCst))
    }

    /// Whether freed clusters wait.
    pub(crate) fn freeing(&self) -> bool {
        lock(&self.state).freeing() > 0
    }

    /// Frees the committed clusters whose grace period has passed (the
    /// committer calls it while frees wait, commits or not).
    pub(crate) fn reclaim_now(&self) {
        let _m = lock(&self.meta);
        self.reclaim(self.durable.load(Ordering::SeqCst));
    }

    /// Makes every completed write and mapping durable: a commit when
    /// mappings changed, else a flush of every device.
    pub(crate) fn make_durable(&self) -> io::Result<()> {
        match self.dirty() {
            true => self.commit(),
            false => self.devs.flush_all(),
        }
    }

    /// Whether changes wait for a commit.
    pub(crate) fn dirty(&self) -> bool {
        self.changed.load(Ordering::SeqCst) > self.durable.load(Ordering::SeqCst)
    }

    /// Notes the state's change sequence (caller holds the state lock).
    pub(crate) fn note(&self, st: &State) {
        self.changed.fetch_max(st.change_seq, Ordering::SeqCst);
    }

    /// Gives logical cluster `i` of `layer` a cluster of its own, prepared
    /// (zeroed, or the parent's data copied in) before it is mapped.
    /// Returns it and the change sequence of its mapping.
    pub(crate) fn own_cluster(&self, layer: &Arc<Layer>, i: u64) -> Result<(u64, u64), Alloc> {
        self.own_cluster_with(layer, i, Fill::Prepare)
            .map(|(p, seq, _)| (p, seq))
    }

    /// [`PoolInner::own_cluster`] in a snapshot's layer (retired since the
    /// snapshot was taken, but with no writer that could race): decouple.
    pub(crate) fn own_snapshot_cluster(
        &self,
        layer: &Arc<Layer>,
        i: u64,
    ) -> Result<(u64, u64), Alloc> {
        self.own_cluster_in(layer, i, Fill::Prepare, true)
            .map(|(p, seq, _)| (p, seq))
    }

    /// [`PoolInner::own_cluster`], filled as `fill` says; also returns
    /// whether `fill`'s data was written (false when the cluster turned
    /// out to be owned already).
    pub(crate) fn own_cluster_with(
        &self,
        layer: &Arc<Layer>,
        i: u64,
        fill: Fill<'_>,
    ) -> Result<(u64, u64, bool), Alloc> {
        self.own_cluster_in(layer, i, fill, false)
    }

    fn own_cluster_in(
        &self,
        layer: &Arc<Layer>,
        i: u64,
        fill: Fill<'_>,
        retired_ok: bool,
    ) -> Result<(u64, u64, bool), Alloc> {
        let mut st = lock(&self.state);
        if layer.is_retired() && !retired_ok {
            return Err(Alloc::Retry);
        }
        let src = layer.resolve(i);
        if let Source::Own(p) = src {
            return Ok((p, 0, false));
        }
        let p = match st.fits(0, 1) {
            true => st.alloc(self.durable.load(Ordering::SeqCst)),
            false => None,
        };
        let Some(p) = p else {
            return Err(Alloc::Failed(no_space()));
        };
        let (filled, wrote) = match fill {
            Fill::Prepare => (self.prepare(p, src), false),
            Fill::Data {
                buf,
                within,
                len,
                fua,
            } => self.first_write(p, src, buf, (within, len), fua),
        };
        if let Err(e) = filled {
            st.unalloc(p);
            return Err(Alloc::Failed(e));
        }
        st.set_entry(layer, i, p + 1);
        self.note(&st);
        Ok((p, st.change_seq, wrote))
    }

    /// Fills new cluster `p` (reading `src` so far) with a write's data at
    /// `within..within + len` of it, in one write of the whole cluster
    /// where it can: the data merged into the cluster's image (zeroes, or
    /// the parent's data) in the pool's image buffer. On a file that
    /// leaves the cluster's blocks written: zeroing it with `fallocate`
    /// would leave unwritten extents, and every later small write into
    /// them would pay for their conversion. A block device whose
    /// Write Zeroes zeroes in place keeps it: the cluster is zeroed and the
    /// write goes its ordinary way after (returns false: not written).
    fn first_write(
        &self,
        p: u64,
        src: Source,
        slot: &mut Option<IoBuf>,
        (within, len): (u64, u64),
        fua: bool,
    ) -> (io::Result<()>, bool) {
        let cs = self.cluster_size();
        if len == cs {
            return (self.write_whole(p, slot, fua), true);
        }
        let Some((dev, off)) = self.devs.locate(p) else {
            return (Err(io::Error::other("cluster outside the devices")), true);
        };
        if src == Source::Zero && self.devs.zeroes_in_place(dev) {
            return (self.devs.zero(dev, off, cs), false);
        }
        let (at, end) = (within as usize, (within + len) as usize);
        let Some(part) = slot.as_ref().and_then(|d| d.get(..end - at)) else {
            return (Err(io::Error::other("no data buffer")), true);
        };
        let mut image = self.take_image();
        let mut dirty = at..end;
        if let Source::Inherited(q) = src {
            image = match self.read_cluster(q, image) {
                Ok(b) => b,
                Err(e) => return (Err(e), true),
            };
            dirty = 0..cs as usize;
        }
        image[at..end].copy_from_slice(part);
        let op = IoOp::Write {
            offset: off,
            len: cs as u32,
            fua,
        };
        match self.devs.run(dev, op, image) {
            Ok(image) => {
                self.put_image(image, dirty);
                (Ok(()), true)
            }
            Err(e) => (Err(e), true),
        }
    }

    /// Writes a whole cluster's data (the buffer goes out and comes back
    /// in `slot`; a failed write loses it).
    fn write_whole(&self, p: u64, slot: &mut Option<IoBuf>, fua: bool) -> io::Result<()> {
        let cs = self.cluster_size();
        let (dev, off) = self
            .devs
            .locate(p)
            .ok_or_else(|| io::Error::other("cluster outside the devices"))?;
        let buf = slot
            .take()
            .ok_or_else(|| io::Error::other("no data buffer"))?;
        let op = IoOp::Write {
            offset: off,
            len: cs as u32,
            fua,
        };
        *slot = Some(self.devs.run(dev, op, buf)?);
        Ok(())
    }

    /// The pool's image buffer (cluster-sized, all zeroes), or a new one
    /// when another preparation holds it (or a failed write lost it).
    fn take_image(&self) -> IoBuf {
        let cs = self.cluster_size() as usize;
        let mut b = lock(&self.image)
            .take()
            .unwrap_or_else(|| IoBuf::with_capacity(cs));
        b.set_len(cs);
        b
    }

    /// Gives the image buffer back, zeroing `dirty` (what was put in it)
    /// first.
    fn put_image(&self, mut b: IoBuf, dirty: std::ops::Range<usize>) {
        b.set_len(self.cluster_size() as usize);
        if let Some(d) = b.get_mut(dirty) {
            d.fill(0);
        }
        *lock(&self.image) = Some(b);
    }

    /// Reads physical cluster `q` into `into` (cluster-sized).
    fn read_cluster(&self, q: u64, into: IoBuf) -> io::Result<IoBuf> {
        let (qd, qoff) = self
            .devs
            .locate(q)
            .ok_or_else(|| io::Error::other("cluster outside the devices"))?;
        let len = self.cluster_size() as u32;
        self.devs.run(qd, IoOp::Read { offset: qoff, len }, into)
    }

    /// Makes cluster `p` hold what `src` reads: zeroes (Write Zeroes on a
    /// block device that zeroes in place, else a write of zeroes, so a
    /// file's blocks end up written; see [`PoolInner::first_write`]), or
    /// the parent's data.
    fn prepare(&self, p: u64, src: Source) -> io::Result<()> {
        let cs = self.cluster_size();
        let (dev, off) = self
            .devs
            .locate(p)
            .ok_or_else(|| io::Error::other("cluster outside the devices"))?;
        let image = match src {
            Source::Own(_) => return Ok(()),
            Source::Zero if self.devs.zeroes_in_place(dev) => {
                return self.devs.zero(dev, off, cs);
            }
            Source::Zero => self.take_image(),
            Source::Inherited(q) => self.read_cluster(q, self.take_image())?,
        };
        let image = self.devs.write(dev, off, image)?;
        let dirty = match src {
            Source::Inherited(_) => 0..cs as usize,
            _ => 0..0,
        };
        self.put_image(image, dirty);
        Ok(())
    }

    /// Device and byte offset of byte `within` of physical cluster `p`.
    pub(crate) fn locate(&self, p: u64, within: u64) -> Option<(usize, u64)> {
        self.devs.locate(p).map(|(d, off)| (d, off + within))
    }
}

impl Commits for PoolInner {
    fn dirty(&self) -> bool {
        PoolInner::dirty(self)
    }
    fn commit(&self) -> io::Result<()> {
        PoolInner::commit(self)
    }
    fn freeing(&self) -> bool {
        PoolInner::freeing(self)
    }
    fn reclaim_now(&self) {
        PoolInner::reclaim_now(self)
    }
}

impl Drop for PoolInner {
    /// Commits what is left and stops the committer.
    fn drop(&mut self) {
        if self.dirty() {
            if let Err(e) = self.commit() {
                tracing::error!(pool = %self.name, error = %e, "final commit failed");
            }
        }
        self.committer.stop();
        self.prep.stop();
    }
}
