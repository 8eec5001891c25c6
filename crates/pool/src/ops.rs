//! Management calls: the [`VolumeStore`] implementation of local pools.
//!
//! Calls are serialized by the pool's management lock; each one changes
//! the state under the state lock, then commits before returning, so a
//! call that returned is durable.

use crate::error::PoolError;
use crate::format::{valid_name, Record, VolRecord, MAX_SIZE, NO_PARENT, UNMAPPED, ZERO};
use crate::layer::{Layer, Source};
use crate::lock::lock;
use crate::pool::{Alloc, PoolInner};
use crate::recover::MAX_DEPTH;
use crate::state::{Handle, State, Vol};
use crate::volume::VolumeBackend;
use crate::{PoolStats, VolumeInfo};
use farflash_backend::SharedBackend;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Volume sizes are multiples of this (the volume block size).
const SIZE_UNIT: u64 = 4096;

fn check_name(field: &'static str, name: &str) -> Result<(), PoolError> {
    match valid_name(name) {
        true => Ok(()),
        false => Err(PoolError::invalid(
            field,
            format!("{name:?} is not 1-64 bytes of [A-Za-z0-9._:@+-]"),
        )),
    }
}

fn check_size(size: u64) -> Result<(), PoolError> {
    match size > 0 && size.is_multiple_of(SIZE_UNIT) && size <= MAX_SIZE {
        true => Ok(()),
        false => Err(PoolError::invalid(
            "size",
            format!("{size} is not a positive multiple of 4096 up to 1 PiB"),
        )),
    }
}

fn vol_id(st: &State, name: &str) -> Result<u32, PoolError> {
    st.names
        .get(name)
        .copied()
        .ok_or_else(|| PoolError::NotFound(name.to_owned()))
}

fn depth(st: &State, mut id: u32) -> usize {
    let mut d = 0;
    while let Some(p) = st.vols.get(&id).and_then(Vol::parent) {
        d += 1;
        id = p;
        if d > MAX_DEPTH {
            break;
        }
    }
    d
}

/// Whether a new child of `id` (a snapshot or a clone, named `name` in the
/// error, as `field`) fits: one more volume's metadata and the depth bound.
fn room_for_child(
    st: &State,
    pool: &str,
    id: u32,
    field: &'static str,
    name: &str,
) -> Result<(), PoolError> {
    if !st.fits(1, 0) {
        return Err(PoolError::NoSpace(pool.to_owned()));
    }
    if depth(st, id) + 1 > MAX_DEPTH {
        return Err(PoolError::invalid(
            field,
            format!("{name:?} already has {MAX_DEPTH} ancestors"),
        ));
    }
    Ok(())
}

/// Waits (bounded) until no request is in flight on a replaced layer.
fn quiesce(old: &Layer) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut pause = Duration::from_micros(50);
    while !old.quiet() {
        if Instant::now() > deadline {
            tracing::warn!(
                layer = old.id,
                "writes still in flight after 30 s; going on"
            );
            return;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(5));
    }
}

impl PoolInner {
    /// The current layer of `name` (tests).
    #[cfg(test)]
    pub(crate) fn handle_layer(&self, name: &str) -> Arc<Layer> {
        let st = lock(&self.state);
        st.by_name(name)
            .map(|v| v.handle.current().0)
            .expect("volume")
    }

    fn commit_mgmt(&self) -> Result<(), PoolError> {
        self.commit().map_err(PoolError::io(format!(
            "pool {:?}: committing metadata",
            self.name
        )))
    }

    pub(crate) fn info(&self, st: &State, v: &Vol) -> VolumeInfo {
        let cs = self.cluster_size();
        let mut shared = 0u64;
        let mut seen = BTreeSet::new();
        let mut up = v.layer.parent.as_deref();
        while let Some(a) = up {
            for (i, _) in a.entries() {
                if i < v.layer.clusters()
                    && seen.insert(i)
                    && matches!(v.layer.resolve(i), Source::Inherited(_))
                {
                    shared += 1;
                }
            }
            up = a.parent.as_deref();
        }
        let parent = v
            .parent()
            .and_then(|p| st.vols.get(&p))
            .map(|p| p.rec.name.clone());
        VolumeInfo {
            name: v.rec.name.clone(),
            uuid: uuid::Uuid::from_bytes(v.rec.uuid),
            size: v.rec.size,
            allocated: v.layer.own() * cs,
            shared: shared * cs,
            parent,
            is_snapshot: v.rec.snapshot,
            clones: st.children(v.rec.id),
            exported: v.handle.is_exported(),
        }
    }

    pub(crate) fn stats(&self) -> PoolStats {
        let st = lock(&self.state);
        let cs = self.cluster_size();
        PoolStats {
            size: st.total() * cs,
            allocated: st.used() * cs,
            free: (st.total() - st.used()) * cs,
            freeing: st.freeing() * cs,
            cluster_size: cs,
            volumes: st.vols.len(),
        }
    }

    pub(crate) fn create_volume(&self, name: &str, size: u64) -> Result<VolumeInfo, PoolError> {
        check_name("volume name", name)?;
        check_size(size)?;
        let _g = lock(&self.mgmt);
        let info = {
            let mut st = lock(&self.state);
            if st.names.contains_key(name) {
                return Err(PoolError::Exists(name.to_owned()));
            }
            if !st.fits(1, 0) {
                return Err(PoolError::NoSpace(self.name.clone()));
            }
            let id = st.new_id();
            let rec = VolRecord {
                id,
                uuid: uuid::Uuid::new_v4().into_bytes(),
                size,
                parent: NO_PARENT,
                snapshot: false,
                name: name.to_owned(),
            };
            let layer = Arc::new(Layer::new(id, size.div_ceil(self.cluster_size()), None));
            let handle = Handle::new(layer.clone(), size, false);
            st.push(Record::VolPut(rec.clone()));
            st.put(Vol { rec, layer, handle });
            self.note(&st);
            let v = st
                .vols
                .get(&id)
                .ok_or_else(|| PoolError::NotFound(name.to_owned()))?;
            self.info(&st, v)
        };
        self.commit_mgmt()?;
        Ok(info)
    }

    pub(crate) fn list(&self) -> Vec<VolumeInfo> {
        let st = lock(&self.state);
        st.vols.values().map(|v| self.info(&st, v)).collect()
    }

    pub(crate) fn get(&self, name: &str) -> Result<VolumeInfo, PoolError> {
        let st = lock(&self.state);
        let v = st
            .by_name(name)
            .ok_or_else(|| PoolError::NotFound(name.to_owned()))?;
        Ok(self.info(&st, v))
    }

    pub(crate) fn rename(&self, name: &str, new_name: &str) -> Result<(), PoolError> {
        check_name("new volume name", new_name)?;
        let _g = lock(&self.mgmt);
        {
            let mut st = lock(&self.state);
            let id = vol_id(&st, name)?;
            if st.names.contains_key(new_name) {
                return Err(PoolError::Exists(new_name.to_owned()));
            }
            st.names.remove(name);
            st.names.insert(new_name.to_owned(), id);
            let Some(v) = st.vols.get_mut(&id) else {
                return Err(PoolError::NotFound(name.to_owned()));
            };
            v.rec.name = new_name.to_owned();
            let rec = v.rec.clone();
            st.push(Record::VolPut(rec));
            self.note(&st);
        }
        self.commit_mgmt()
    }

    pub(crate) fn delete(&self, name: &str) -> Result<(), PoolError> {
        let _g = lock(&self.mgmt);
        let old = {
            let mut st = lock(&self.state);
            let id = vol_id(&st, name)?;
            let children: Vec<u32> = st
                .vols
                .values()
                .filter(|v| v.rec.parent == id)
                .map(|v| v.rec.id)
                .collect();
            if children.len() > 1 {
                return Err(PoolError::HasClones {
                    name: name.to_owned(),
                    children: st.children(id).join(", "),
                });
            }
            if st.vols.get(&id).is_some_and(|v| v.handle.is_exported()) {
                return Err(PoolError::Exported(name.to_owned()));
            }
            match children.first() {
                // One child (a clone, or the volume the snapshot was taken
                // of): merged into it, as SPDK's blobstore does.
                Some(&child) => {
                    let Some(old) = st.merge(id, child) else {
                        return Err(PoolError::NotFound(name.to_owned()));
                    };
                    self.note(&st);
                    Some(old)
                }
                None => {
                    st.remove(id);
                    self.note(&st);
                    None
                }
            }
        };
        // Writes that looked the child's old map up (to clusters it keeps)
        // finish before the call returns.
        for l in old.iter().flatten() {
            quiesce(l);
        }
        self.commit_mgmt()
    }

    pub(crate) fn snapshot(&self, volume: &str, snapshot: &str) -> Result<VolumeInfo, PoolError> {
        check_name("snapshot name", snapshot)?;
        let _g = lock(&self.mgmt);
        let old = {
            let mut st = lock(&self.state);
            let a = vol_id(&st, volume)?;
            if st.names.contains_key(snapshot) {
                return Err(PoolError::Exists(snapshot.to_owned()));
            }
            if st.vols.get(&a).is_some_and(|v| v.rec.snapshot) {
                return Err(PoolError::ReadOnly(volume.to_owned()));
            }
            room_for_child(&st, &self.name, a, "volume", volume)?;
            let b = st.new_id();
            let Some(mut vol) = st.vols.remove(&a) else {
                return Err(PoolError::NotFound(volume.to_owned()));
            };
            st.names.remove(volume);
            // The snapshot keeps the id and the map; the volume moves to a
            // new id with an empty map over it (no cluster is copied).
            let snap_rec = VolRecord {
                id: a,
                uuid: uuid::Uuid::new_v4().into_bytes(),
                name: snapshot.to_owned(),
                snapshot: true,
                ..vol.rec.clone()
            };
            let old = vol.layer.clone();
            let new = Arc::new(Layer::new(b, old.clusters(), Some(old.clone())));
            vol.rec.id = b;
            vol.rec.parent = a;
            vol.layer = new.clone();
            vol.handle.switch(new);
            let snap = Vol {
                handle: Handle::new(old.clone(), snap_rec.size, true),
                layer: old.clone(),
                rec: snap_rec.clone(),
            };
            st.push(Record::VolPut(snap_rec));
            st.push(Record::VolPut(vol.rec.clone()));
            st.put(snap);
            st.put(vol);
            self.note(&st);
            old
        };
        // Writes that looked the old map up finish before the commit and
        // the return: the snapshot holds every write completed before the
        // call and none started after it.
        quiesce(&old);
        self.commit_mgmt()?;
        self.get(snapshot)
    }

    pub(crate) fn clone_volume(&self, snapshot: &str, name: &str) -> Result<VolumeInfo, PoolError> {
        check_name("clone name", name)?;
        let _g = lock(&self.mgmt);
        {
            let mut st = lock(&self.state);
            let s = vol_id(&st, snapshot)?;
            if st.names.contains_key(name) {
                return Err(PoolError::Exists(name.to_owned()));
            }
            let Some(sv) = st.vols.get(&s) else {
                return Err(PoolError::NotFound(snapshot.to_owned()));
            };
            if !sv.rec.snapshot {
                return Err(PoolError::NotSnapshot(snapshot.to_owned()));
            }
            let (size, parent_layer) = (sv.rec.size, sv.layer.clone());
            room_for_child(&st, &self.name, s, "snapshot", snapshot)?;
            let id = st.new_id();
            let rec = VolRecord {
                id,
                uuid: uuid::Uuid::new_v4().into_bytes(),
                size,
                parent: s,
                snapshot: false,
                name: name.to_owned(),
            };
            let layer = Arc::new(Layer::new(
                id,
                size.div_ceil(self.cluster_size()),
                Some(parent_layer),
            ));
            let handle = Handle::new(layer.clone(), size, false);
            st.push(Record::VolPut(rec.clone()));
            st.put(Vol { rec, layer, handle });
            self.note(&st);
        }
        self.commit_mgmt()?;
        self.get(name)
    }

    pub(crate) fn open_volume(self: &Arc<Self>, name: &str) -> Result<SharedBackend, PoolError> {
        let st = lock(&self.state);
        let v = st
            .by_name(name)
            .ok_or_else(|| PoolError::NotFound(name.to_owned()))?;
        let be = VolumeBackend::new(self.clone(), v.handle.clone(), v.rec.uuid);
        Ok(Arc::new(be))
    }

    /// Copies every cluster `name` reads from its ancestors into its own,
    /// then cuts it from its parent.
    pub(crate) fn decouple(&self, name: &str) -> Result<(), PoolError> {
        let _g = lock(&self.mgmt);
        let (layer, snapshot) = {
            let st = lock(&self.state);
            let v = st
                .by_name(name)
                .ok_or_else(|| PoolError::NotFound(name.to_owned()))?;
            if v.parent().is_none() {
                return Err(PoolError::NoParent(name.to_owned()));
            }
            (v.layer.clone(), v.rec.snapshot)
        };
        let mut wanted = BTreeSet::new();
        let mut up = layer.parent.as_deref();
        while let Some(a) = up {
            wanted.extend(
                a.entries()
                    .map(|(i, _)| i)
                    .filter(|&i| i < layer.clusters()),
            );
            up = a.parent.as_deref();
        }
        for i in wanted {
            if !matches!(layer.resolve(i), Source::Inherited(_)) {
                continue;
            }
            // A snapshot's content does not change: its children read the
            // same data, now from it rather than from its ancestors.
            let owned = match snapshot {
                true => self.own_snapshot_cluster(&layer, i),
                false => self.own_cluster(&layer, i),
            };
            match owned {
                Ok(_) => {}
                Err(Alloc::Retry) => {
                    return Err(PoolError::invalid(
                        "volume",
                        format!("{name:?} changed during decouple"),
                    ))
                }
                Err(Alloc::Failed(e)) if crate::is_no_space(&e) => {
                    return Err(PoolError::NoSpace(self.name.clone()))
                }
                Err(Alloc::Failed(e)) => {
                    return Err(PoolError::io(format!("decoupling {name:?}"))(e))
                }
            }
        }
        let old = {
            let mut st = lock(&self.state);
            let id = vol_id(&st, name)?;
            let Some(v) = st.vols.get_mut(&id) else {
                return Err(PoolError::NotFound(name.to_owned()));
            };
            let new = Arc::new(v.layer.rebuilt(v.layer.clusters(), None));
            v.layer = new.clone();
            let old = v.handle.switch(new);
            v.rec.parent = NO_PARENT;
            let rec = v.rec.clone();
            st.push(Record::VolPut(rec));
            self.note(&st);
            old
        };
        quiesce(&old);
        self.commit_mgmt()
    }

    pub(crate) fn resize(&self, name: &str, size: u64, force: bool) -> Result<(), PoolError> {
        check_size(size)?;
        let _g = lock(&self.mgmt);
        let old = {
            let mut st = lock(&self.state);
            let id = vol_id(&st, name)?;
            let Some(v) = st.vols.get(&id) else {
                return Err(PoolError::NotFound(name.to_owned()));
            };
            if v.rec.snapshot {
                return Err(PoolError::ReadOnly(name.to_owned()));
            }
            let (cur, layer) = (v.rec.size, v.layer.clone());
            if size < cur {
                self.shrink(&mut st, id, &layer, name, size, force)?;
            } else if size > cur {
                self.grow_prepare(&mut st, &layer, name, cur, size)?;
            }
            let cs = self.cluster_size();
            let Some(v) = st.vols.get_mut(&id) else {
                return Err(PoolError::NotFound(name.to_owned()));
            };
            let new = Arc::new(v.layer.rebuilt(size.div_ceil(cs), v.layer.parent.clone()));
            v.layer = new.clone();
            v.rec.size = size;
            let old = v.handle.switch(new);
            v.handle
                .size
                .store(size, std::sync::atomic::Ordering::SeqCst);
            let rec = v.rec.clone();
            st.push(Record::VolPut(rec));
            self.note(&st);
            old
        };
        quiesce(&old);
        self.commit_mgmt()
    }

    /// Drops the clusters beyond `size` (refused below the highest written
    /// cluster unless forced, and while exported) and zeroes the tail of
    /// the new last cluster.
    fn shrink(
        &self,
        st: &mut State,
        id: u32,
        layer: &Arc<Layer>,
        name: &str,
        size: u64,
        force: bool,
    ) -> Result<(), PoolError> {
        let cs = self.cluster_size();
        if st.vols.get(&id).is_some_and(|v| v.handle.is_exported()) {
            return Err(PoolError::Exported(name.to_owned()));
        }
        let keep = size.div_ceil(cs);
        let highest = layer
            .entries()
            .filter(|&(_, v)| v != ZERO)
            .map(|(i, _)| i)
            .max();
        if let Some(h) = highest.filter(|&h| h >= keep && !force) {
            return Err(PoolError::BelowUsed {
                name: name.to_owned(),
                size,
                highest_written: (h + 1) * cs,
            });
        }
        let beyond: Vec<(u64, u64)> = layer.entries().filter(|&(i, _)| i >= keep).collect();
        for (i, v) in beyond {
            st.set_entry(layer, i, UNMAPPED);
            if v != ZERO {
                st.defer_free(v - 1);
            }
        }
        self.zero_tail(layer, size)
    }

    /// Zeroes bytes `size..` of the cluster holding byte `size - 1` when
    /// the layer owns it.
    fn zero_tail(&self, layer: &Layer, size: u64) -> Result<(), PoolError> {
        let cs = self.cluster_size();
        let within = size % cs;
        if within == 0 {
            return Ok(());
        }
        if let Source::Own(p) = layer.resolve(size / cs) {
            let (d, off) = self.locate(p, within).ok_or_else(|| PoolError::Corrupt {
                what: format!("cluster {p} outside the devices"),
            })?;
            self.devs
                .zero(d, off, cs - within)
                .map_err(PoolError::io("zeroing a shrunk cluster's tail"))?;
        }
        Ok(())
    }

    /// Before growing from `cur` to `size`: what an ancestor holds beyond
    /// `cur` must not show through (ZERO entries), and the old last
    /// cluster's tail must read zeroes.
    fn grow_prepare(
        &self,
        st: &mut State,
        layer: &Arc<Layer>,
        name: &str,
        cur: u64,
        size: u64,
    ) -> Result<(), PoolError> {
        let cs = self.cluster_size();
        let (from, to) = (cur.div_ceil(cs), size.div_ceil(cs));
        let mut hide = BTreeSet::new();
        let mut up = layer.parent.as_deref();
        while let Some(a) = up {
            hide.extend(a.entries().map(|(i, _)| i).filter(|&i| i >= from && i < to));
            up = a.parent.as_deref();
        }
        if !st.fits(0, hide.len() as u64 + 1) {
            return Err(PoolError::NoSpace(self.name.clone()));
        }
        for i in hide {
            st.set_entry(layer, i, ZERO);
        }
        if !cur.is_multiple_of(cs) && matches!(layer.resolve(cur / cs), Source::Inherited(_)) {
            let p = st
                .alloc(self.durable.load(std::sync::atomic::Ordering::SeqCst))
                .ok_or_else(|| PoolError::NoSpace(self.name.clone()))?;
            let Source::Inherited(q) = layer.resolve(cur / cs) else {
                return Ok(());
            };
            let copy = (|| {
                let (qd, qoff) = self
                    .devs
                    .locate(q)
                    .ok_or_else(|| std::io::Error::other("cluster outside the devices"))?;
                let (d, off) = self
                    .devs
                    .locate(p)
                    .ok_or_else(|| std::io::Error::other("cluster outside the devices"))?;
                let buf = self.devs.read(qd, qoff, cs as usize)?;
                self.devs.write(d, off, buf).map(drop)
            })();
            if let Err(e) = copy {
                st.unalloc(p);
                return Err(PoolError::io(format!("growing {name:?}"))(e));
            }
            st.set_entry(layer, cur / cs, p + 1);
        }
        self.zero_tail(layer, cur)
    }
}
