//! The pool's state in memory: volumes, their layers, the allocator, and
//! the changes not yet committed.
//!
//! Free space is derived, never stored: a physical cluster is in use when
//! some layer maps it, so recovery rebuilds the allocation bitmap from the
//! maps, and no cluster can leak across a crash. A cluster a layer stops
//! using goes to `pending_free`, and becomes allocatable only once the
//! change is committed (else a crash could map it twice) and every
//! request that was in flight when it was freed has ended ([`Grace`]).

use crate::format::{
    Record, VolRecord, MAP_RECORD, MAX_RECORD, NO_PARENT, PAYLOAD, UNMAPPED, ZERO,
};
use crate::grace::Grace;
use crate::layer::Layer;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What open handles of a volume share: the current layer and its epoch.
pub(crate) struct Handle {
    epoch: AtomicU64,
    current: Mutex<Arc<Layer>>,
    pub(crate) exported: AtomicU32,
    pub(crate) size: AtomicU64,
    pub(crate) read_only: AtomicBool,
}

impl Handle {
    pub(crate) fn new(layer: Arc<Layer>, size: u64, read_only: bool) -> Arc<Handle> {
        Arc::new(Handle {
            epoch: AtomicU64::new(0),
            current: Mutex::new(layer),
            exported: AtomicU32::new(0),
            size: AtomicU64::new(size),
            read_only: AtomicBool::new(read_only),
        })
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// The current layer and its epoch.
    pub(crate) fn current(&self) -> (Arc<Layer>, u64) {
        let l = self.current.lock().unwrap_or_else(|p| p.into_inner());
        (l.clone(), self.epoch())
    }

    /// Switches to `layer` (caller holds the state lock) and retires the
    /// old one; returns it.
    pub(crate) fn switch(&self, layer: Arc<Layer>) -> Arc<Layer> {
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let old = std::mem::replace(&mut *cur, layer);
        old.retire();
        self.epoch.fetch_add(1, Ordering::SeqCst);
        old
    }

    pub(crate) fn is_exported(&self) -> bool {
        self.exported.load(Ordering::SeqCst) > 0
    }
}

/// A volume or snapshot.
pub(crate) struct Vol {
    pub(crate) rec: VolRecord,
    pub(crate) layer: Arc<Layer>,
    pub(crate) handle: Arc<Handle>,
}

impl Vol {
    pub(crate) fn parent(&self) -> Option<u32> {
        (self.rec.parent != NO_PARENT).then_some(self.rec.parent)
    }
}

/// A cluster waiting to become free.
struct PendingFree {
    phys: u64,
    /// Committed once the durable sequence reaches this.
    seq: u64,
    /// The grace epoch when it was freed.
    epoch: u64,
}

pub(crate) struct State {
    pub(crate) vols: BTreeMap<u32, Vol>,
    pub(crate) names: HashMap<String, u32>,
    next_id: u32,
    used: Vec<u64>,
    used_count: u64,
    total: u64,
    cursor: u64,
    /// Map entries (physical or ZERO) of every layer, for the checkpoint
    /// bound.
    entries: u64,
    max_volumes: u32,
    ckpt_bytes: u64,
    pending: Vec<Record>,
    pub(crate) change_seq: u64,
    pending_free: Vec<PendingFree>,
    grace: Arc<Grace>,
}

impl State {
    pub(crate) fn new(total: u64, max_volumes: u32, slot_blocks: u64) -> State {
        State {
            vols: BTreeMap::new(),
            names: HashMap::new(),
            next_id: 1,
            used: vec![0; total.div_ceil(64) as usize],
            used_count: 0,
            total,
            cursor: 0,
            entries: 0,
            max_volumes,
            ckpt_bytes: slot_blocks * (PAYLOAD - MAX_RECORD) as u64,
            pending: Vec::new(),
            change_seq: 0,
            pending_free: Vec::new(),
            grace: Arc::new(Grace::default()),
        }
    }

    /// The grace periods requests count themselves in.
    pub(crate) fn grace(&self) -> Arc<Grace> {
        self.grace.clone()
    }

    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    pub(crate) fn used(&self) -> u64 {
        self.used_count
    }

    fn set_used(&mut self, p: u64, on: bool) {
        let Some(w) = self.used.get_mut((p / 64) as usize) else {
            return;
        };
        let bit = 1u64 << (p % 64);
        if (*w & bit != 0) != on {
            *w ^= bit;
            if on {
                self.used_count += 1;
            } else {
                self.used_count -= 1;
            }
        }
    }

    /// A free cluster, marked used; `None` when the pool is full.
    pub(crate) fn alloc(&mut self, durable: u64) -> Option<u64> {
        if self.used_count >= self.total {
            self.release_frees(durable);
        }
        if self.used_count >= self.total {
            return None;
        }
        // Word by word from the cursor's word, wrapping once.
        let words = self.used.len();
        let first = (self.cursor / 64) as usize % words.max(1);
        for k in 0..=words {
            let w = (first + k) % words;
            let free = !self.used[w];
            if free == 0 {
                continue;
            }
            let p = w as u64 * 64 + u64::from(free.trailing_zeros());
            if p < self.total {
                self.set_used(p, true);
                self.cursor = p + 1;
                return Some(p);
            }
        }
        None
    }

    /// Gives back a cluster `alloc` returned that was never mapped.
    pub(crate) fn unalloc(&mut self, p: u64) {
        self.set_used(p, false);
    }

    /// Inserts a volume whose entries are already counted (a snapshot's
    /// or volume's new identity).
    pub(crate) fn put(&mut self, v: Vol) {
        self.names.insert(v.rec.name.clone(), v.rec.id);
        self.vols.insert(v.rec.id, v);
    }

    /// Records that a map no longer uses cluster `phys` as of the last
    /// change (the map change is made): allocatable once committed and
    /// once the requests in flight now have ended. Moves the grace epoch
    /// on when it can, so that requests starting later do not hold it.
    pub(crate) fn defer_free(&mut self, phys: u64) {
        self.pending_free.push(PendingFree {
            phys,
            seq: self.change_seq,
            epoch: self.grace.epoch(),
        });
        self.grace.advance();
    }

    /// Frees what waited for commit `durable` and has no write in flight.
    pub(crate) fn release_frees(&mut self, durable: u64) {
        for p in self.take_releasable(durable) {
            self.set_used(p, false);
        }
    }

    /// Takes the clusters that may be freed (committed by `durable`, and
    /// no request in flight since they were freed); they stay marked used
    /// until [`State::release`].
    pub(crate) fn take_releasable(&mut self, durable: u64) -> Vec<u64> {
        let mut out = Vec::new();
        if self.pending_free.is_empty() {
            return out;
        }
        self.grace.advance();
        let mut i = 0;
        while i < self.pending_free.len() {
            let f = &self.pending_free[i];
            if f.seq <= durable && self.grace.passed(f.epoch) {
                out.push(f.phys);
                self.pending_free.swap_remove(i);
            } else {
                i += 1;
            }
        }
        out
    }

    /// Makes clusters from [`State::take_releasable`] allocatable.
    pub(crate) fn release(&mut self, clusters: &[u64]) {
        for &p in clusters {
            self.set_used(p, false);
        }
    }

    /// Clusters waiting to be freed.
    pub(crate) fn freeing(&self) -> u64 {
        self.pending_free.len() as u64
    }

    /// Queues a change; returns its sequence number.
    pub(crate) fn push(&mut self, r: Record) -> u64 {
        self.pending.push(r);
        self.change_seq += 1;
        self.change_seq
    }

    /// Sets map entry `i` of volume `vol`'s layer, logging the change and
    /// keeping the entry count.
    pub(crate) fn set_entry(&mut self, layer: &Arc<Layer>, i: u64, v: u64) -> u64 {
        let old = layer.set(i, v);
        self.entries = self.entries + u64::from(v != UNMAPPED) - u64::from(old != UNMAPPED);
        self.push(Record::Map {
            id: layer.id,
            index: i,
            value: v,
        });
        old
    }

    /// Whether the checkpoint can hold `vols` more volumes and `entries`
    /// more map entries.
    pub(crate) fn fits(&self, vols: u64, entries: u64) -> bool {
        let v = self.vols.len() as u64 + vols;
        let need = v * MAX_RECORD as u64 + (self.entries + entries) * MAP_RECORD as u64;
        v <= u64::from(self.max_volumes) && need <= self.ckpt_bytes
    }

    pub(crate) fn new_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        id
    }

    /// Takes the changes queued so far and the sequence they reach.
    pub(crate) fn take_pending(&mut self) -> (Vec<Record>, u64) {
        (std::mem::take(&mut self.pending), self.change_seq)
    }

    /// Puts back changes a failed commit took.
    pub(crate) fn restore_pending(&mut self, mut recs: Vec<Record>) {
        recs.append(&mut self.pending);
        self.pending = recs;
    }

    /// The whole state as records (a checkpoint).
    pub(crate) fn checkpoint(&self) -> Vec<Record> {
        let mut out = Vec::with_capacity(self.vols.len() + self.entries as usize);
        for v in self.vols.values() {
            out.push(Record::VolPut(v.rec.clone()));
            out.extend(v.layer.entries().map(|(index, value)| Record::Map {
                id: v.rec.id,
                index,
                value,
            }));
        }
        out
    }

    /// Inserts a volume (replay or creation) and marks its clusters used.
    pub(crate) fn insert(&mut self, v: Vol) {
        for (_, val) in v.layer.entries() {
            self.entries += 1;
            if val != ZERO {
                self.set_used(val - 1, true);
            }
        }
        self.next_id = self.next_id.max(v.rec.id.wrapping_add(1)).max(1);
        self.names.insert(v.rec.name.clone(), v.rec.id);
        self.vols.insert(v.rec.id, v);
    }

    /// Removes volume `id`: its clusters wait to be freed; logs VolDel.
    pub(crate) fn remove(&mut self, id: u32) {
        let Some(v) = self.vols.remove(&id) else {
            return;
        };
        self.names.remove(&v.rec.name);
        self.push(Record::VolDel { id });
        for (_, val) in v.layer.entries() {
            self.entries -= 1;
            if val != ZERO {
                self.defer_free(val - 1);
            }
        }
        v.layer.retire();
    }

    /// Deletes snapshot `id` into `child`, its only child, as one change:
    /// the child takes the snapshot's entries it does not override (same
    /// data, so readers of either map read the same) and the snapshot's
    /// parent, in a new layer its handle switches to (retiring the old one,
    /// so an allocation racing the merge retries on the new layer); the
    /// snapshot's other clusters wait to be freed after the records that
    /// drop them. The child's descendants get layers over its new one too,
    /// so that every layer's parent stays its parent's current layer
    /// (what later changes to the child's layer, such as a decouple, are
    /// made to). Returns the replaced layers.
    pub(crate) fn merge(&mut self, id: u32, child: u32) -> Option<Vec<Arc<Layer>>> {
        let snap = self.vols.get(&id)?;
        let (snap_layer, grand) = (snap.layer.clone(), snap.rec.parent);
        let c = self.vols.get(&child)?;
        let new = Arc::new(
            c.layer
                .rebuilt(c.layer.clusters(), snap_layer.parent.clone()),
        );
        let mut free = Vec::new();
        for (i, v) in snap_layer.entries() {
            if i < new.clusters() && new.get(i) == UNMAPPED {
                self.set_entry(&new, i, v);
            } else if v != ZERO {
                free.push(v - 1);
            }
        }
        let c = self.vols.get_mut(&child)?;
        c.rec.parent = grand;
        c.layer = new.clone();
        let mut old = vec![c.handle.switch(new.clone())];
        let rec = c.rec.clone();
        self.push(Record::VolPut(rec));
        self.reparent_below(child, &new, &mut old);
        let snap = self.vols.remove(&id)?;
        self.names.remove(&snap.rec.name);
        self.push(Record::VolDel { id });
        self.entries -= snap.layer.entries().count() as u64;
        snap.layer.retire();
        for p in free {
            self.defer_free(p);
        }
        Some(old)
    }

    /// Rebuilds the layers of the descendants of volume `id` over `layer`,
    /// its new one (entries unchanged), collecting the replaced layers.
    fn reparent_below(&mut self, id: u32, layer: &Arc<Layer>, old: &mut Vec<Arc<Layer>>) {
        let kids: Vec<u32> = self
            .vols
            .values()
            .filter(|v| v.rec.parent == id)
            .map(|v| v.rec.id)
            .collect();
        for k in kids {
            let Some(v) = self.vols.get_mut(&k) else {
                continue;
            };
            let new = Arc::new(v.layer.rebuilt(v.layer.clusters(), Some(layer.clone())));
            v.layer = new.clone();
            old.push(v.handle.switch(new.clone()));
            self.reparent_below(k, &new, old);
        }
    }

    /// Children (snapshots' clones and volumes) of volume `id`, by name.
    pub(crate) fn children(&self, id: u32) -> Vec<String> {
        self.vols
            .values()
            .filter(|v| v.rec.parent == id)
            .map(|v| v.rec.name.clone())
            .collect()
    }

    pub(crate) fn by_name(&self, name: &str) -> Option<&Vol> {
        self.names.get(name).and_then(|id| self.vols.get(id))
    }
}

/// Volumes and maps as replayed from a checkpoint and a journal, before
/// they are checked and turned into a [`State`].
#[derive(Default)]
pub(crate) struct Replay {
    pub(crate) vols: BTreeMap<u32, VolRecord>,
    pub(crate) maps: HashMap<u32, BTreeMap<u64, u64>>,
}

impl Replay {
    /// Applies one record; an impossible one is described in the error.
    pub(crate) fn apply(&mut self, r: Record) -> Result<(), String> {
        match r {
            Record::VolPut(v) => {
                self.maps.entry(v.id).or_default();
                self.vols.insert(v.id, v);
            }
            Record::VolDel { id } => {
                if self.vols.remove(&id).is_none() {
                    return Err(format!("deletion of unknown volume id {id}"));
                }
                self.maps.remove(&id);
            }
            Record::Map { id, index, value } => {
                let Some(m) = self.maps.get_mut(&id) else {
                    return Err(format!("map record for unknown volume id {id}"));
                };
                if value == UNMAPPED {
                    m.remove(&index);
                } else {
                    m.insert(index, value);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_hands_out_every_cluster_once() {
        let mut st = State::new(130, 8, 4);
        let mut got: Vec<u64> = (0..130)
            .map(|_| st.alloc(0).expect("free cluster"))
            .collect();
        assert_eq!(st.alloc(0), None, "full");
        got.sort();
        assert_eq!(got, (0..130).collect::<Vec<_>>());
        st.unalloc(77);
        assert_eq!((st.used(), st.alloc(0)), (129, Some(77)));
        let grace = st.grace();
        let old = grace.enter(0);
        let seq = st.push(Record::VolDel { id: 1 });
        st.defer_free(5);
        assert_eq!(st.alloc(0), None, "a free waits for its commit");
        let new = grace.enter(1);
        st.release_frees(seq);
        assert_eq!(st.alloc(seq), None, "and for the requests in flight then");
        grace.leave(0, old);
        assert_eq!(st.alloc(0), None, "not committed yet");
        assert_eq!(
            st.alloc(seq),
            Some(5),
            "committed; a later request does not hold it"
        );
        grace.leave(1, new);
    }
}
