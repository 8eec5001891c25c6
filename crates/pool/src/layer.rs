//! A layer: one volume's or snapshot's cluster map, read without locks.
//!
//! The map is a three-level radix tree: a fixed top array of nodes of
//! [`LEAF`] leaves of [`LEAF`] entries, nodes and leaves allocated on the
//! first mapping in their range, so a thin volume's map costs memory in
//! proportion to what it holds (a 1 PiB volume of 64 KiB clusters starts
//! at 1 MiB of top array). Readers load an entry with
//! one atomic (`Acquire`) load; writers change entries only under the
//! pool's state lock (`Release` stores). A layer's parent is fixed: a
//! change of parent (decouple, the merge of a deleted snapshot into its
//! only child) or of size (resize) builds a new layer and the volume's
//! handle switches to it (`Handle`, epoch).

use crate::format::{UNMAPPED, ZERO};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Entries per leaf (4 KiB of entries).
pub(crate) const LEAF: u64 = 512;

/// Shards of the in-flight counters: queues spread over them, so the
/// queues of one volume on different cores rarely share a cache line.
pub(crate) const SHARDS: usize = 16;

#[derive(Default)]
#[repr(align(64))]
struct Shard {
    issued: AtomicU64,
    completed: AtomicU64,
}

type Leaf = Box<[AtomicU64]>;
type Node = Box<[OnceLock<Leaf>]>;

fn node() -> Node {
    (0..LEAF).map(|_| OnceLock::new()).collect()
}

fn leaf() -> Leaf {
    (0..LEAF).map(|_| AtomicU64::new(UNMAPPED)).collect()
}

/// What a logical cluster reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// Zeroes (never written anywhere up the chain, or deallocated).
    Zero,
    /// Physical cluster of this layer.
    Own(u64),
    /// Physical cluster of an ancestor.
    Inherited(u64),
}

pub(crate) struct Layer {
    pub(crate) id: u32,
    clusters: u64,
    top: Box<[OnceLock<Node>]>,
    pub(crate) parent: Option<Arc<Layer>>,
    /// I/O in flight against this layer, counted per queue shard.
    ops: Box<[Shard]>,
    /// Set (under the state lock) when a newer layer replaced this one:
    /// allocation must not add entries here any more.
    retired: AtomicBool,
    /// Entries holding a physical cluster.
    own: AtomicU64,
}

impl Layer {
    pub(crate) fn new(id: u32, clusters: u64, parent: Option<Arc<Layer>>) -> Layer {
        let n = clusters.div_ceil(LEAF * LEAF) as usize;
        Layer {
            id,
            clusters,
            top: (0..n).map(|_| OnceLock::new()).collect(),
            parent,
            ops: (0..SHARDS).map(|_| Shard::default()).collect(),
            retired: AtomicBool::new(false),
            own: AtomicU64::new(0),
        }
    }

    /// A copy of this layer's entries (those below `clusters`) under a new
    /// size or parent.
    pub(crate) fn rebuilt(&self, clusters: u64, parent: Option<Arc<Layer>>) -> Layer {
        let l = Layer::new(self.id, clusters, parent);
        for (i, v) in self.entries() {
            if i < clusters {
                l.set(i, v);
            }
        }
        l
    }

    pub(crate) fn clusters(&self) -> u64 {
        self.clusters
    }

    /// The leaf holding entry `i`, if allocated.
    #[inline]
    fn leaf(&self, i: u64) -> Option<&Leaf> {
        let node = self.top.get((i / (LEAF * LEAF)) as usize)?.get()?;
        node[((i / LEAF) % LEAF) as usize].get()
    }

    /// Entry `i` ([`UNMAPPED`] beyond the map).
    #[inline]
    pub(crate) fn get(&self, i: u64) -> u64 {
        self.leaf(i)
            .map_or(UNMAPPED, |l| l[(i % LEAF) as usize].load(Ordering::Acquire))
    }

    /// Sets entry `i` (caller holds the state lock). Returns the old value.
    pub(crate) fn set(&self, i: u64, v: u64) -> u64 {
        if i >= self.clusters || (v == UNMAPPED && self.leaf(i).is_none()) {
            return UNMAPPED;
        }
        let Some(slot) = self.top.get((i / (LEAF * LEAF)) as usize) else {
            return UNMAPPED;
        };
        let node = slot.get_or_init(node);
        let leaf = node[((i / LEAF) % LEAF) as usize].get_or_init(leaf);
        let old = leaf[(i % LEAF) as usize].swap(v, Ordering::AcqRel);
        let phys = |x: u64| x != UNMAPPED && x != ZERO;
        match (phys(old), phys(v)) {
            (false, true) => self.own.fetch_add(1, Ordering::Relaxed),
            (true, false) => self.own.fetch_sub(1, Ordering::Relaxed),
            _ => 0,
        };
        old
    }

    /// Where logical cluster `i` reads from.
    #[inline]
    pub(crate) fn resolve(&self, i: u64) -> Source {
        match self.get(i) {
            ZERO => Source::Zero,
            UNMAPPED => {
                let mut up = self.parent.as_deref();
                while let Some(l) = up {
                    match l.get(i) {
                        ZERO => return Source::Zero,
                        UNMAPPED => up = l.parent.as_deref(),
                        v => return Source::Inherited(v - 1),
                    }
                }
                Source::Zero
            }
            v => Source::Own(v - 1),
        }
    }

    /// Non-unmapped entries, in index order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let nodes = self.top.iter().enumerate();
        nodes.flat_map(|(ti, slot)| {
            let leaves = slot.get().into_iter().flat_map(|n| n.iter().enumerate());
            leaves.flat_map(move |(ni, slot)| {
                let base = (ti as u64 * LEAF + ni as u64) * LEAF;
                slot.get().into_iter().flat_map(move |leaf| {
                    leaf.iter().enumerate().filter_map(move |(k, e)| {
                        let v = e.load(Ordering::Acquire);
                        (v != UNMAPPED).then_some((base + k as u64, v))
                    })
                })
            })
        })
    }

    /// Entries holding a physical cluster.
    pub(crate) fn own(&self) -> u64 {
        self.own.load(Ordering::Relaxed)
    }

    /// Counts an I/O starting on `shard` (a queue's own; see [`SHARDS`]).
    pub(crate) fn begin(&self, shard: usize) {
        self.ops[shard % SHARDS]
            .issued
            .fetch_add(1, Ordering::SeqCst);
    }

    /// Counts an I/O of `shard` done.
    pub(crate) fn end(&self, shard: usize) {
        self.ops[shard % SHARDS]
            .completed
            .fetch_add(1, Ordering::SeqCst);
    }

    /// Every I/O that began on this layer before the call has ended.
    /// Per shard, `completed` is read before `issued`: equal values mean
    /// nothing that began before the reads is still running.
    pub(crate) fn quiet(&self) -> bool {
        self.ops.iter().all(|s| {
            let done = s.completed.load(Ordering::SeqCst);
            done == s.issued.load(Ordering::SeqCst)
        })
    }

    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_sets_resolves_and_counts() {
        let base = Arc::new(Layer::new(1, 2000, None));
        assert_eq!(base.set(5, 11), UNMAPPED);
        base.set(1999, 12);
        assert_eq!(base.set(3000, 1), UNMAPPED, "beyond the map: ignored");
        assert_eq!(base.get(3000), UNMAPPED);
        let far = Layer::new(9, 1 << 34, None);
        far.set((1 << 34) - 1, 3);
        far.set(LEAF * LEAF + 7, 4);
        let e: Vec<_> = far.entries().collect();
        assert_eq!(e, vec![(LEAF * LEAF + 7, 4), ((1 << 34) - 1, 3)]);
        assert_eq!(base.own(), 2);
        let child = Layer::new(2, 2500, Some(base.clone()));
        assert_eq!(child.resolve(5), Source::Inherited(10));
        assert_eq!(child.resolve(6), Source::Zero);
        assert_eq!(child.resolve(2400), Source::Zero);
        child.set(5, ZERO);
        assert_eq!(child.resolve(5), Source::Zero);
        child.set(5, 40);
        assert_eq!(child.resolve(5), Source::Own(39));
        assert_eq!(child.own(), 1);
        child.set(5, UNMAPPED);
        assert_eq!((child.own(), child.resolve(5)), (0, Source::Inherited(10)));
        let e: Vec<_> = base.entries().collect();
        assert_eq!(e, vec![(5, 11), (1999, 12)]);
        let small = base.rebuilt(1000, None);
        assert_eq!(small.entries().collect::<Vec<_>>(), vec![(5, 11)]);
        assert_eq!(small.own(), 1);
    }
}
