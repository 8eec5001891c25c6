//! A queue pair's view of its subsystem's namespaces.
//!
//! Keys are stable for the life of the connection: a command keeps the key it
//! was classified with even if the subsystem's namespaces change meanwhile.
//! A removed namespace stays as a tombstone until the storage requests
//! already emitted for it have been handed to the event loop's queues
//! ([`NsTable::collect`]), so nothing emitted is ever lost. The queues
//! themselves belong to the event loop (one per namespace per thread).

use crate::resv::{Access, HostId};
use crate::subsystem::Namespace;
use farflash_backend::SharedBackend;
use farflash_wire::Status;
use std::sync::Arc;

pub(crate) struct NsEntry {
    pub ns: Option<Arc<Namespace>>,
    live: bool,
}

#[derive(Default)]
pub(crate) struct NsTable {
    entries: Vec<NsEntry>,
    /// Live namespaces: (NSID, key), sorted by NSID.
    index: Vec<(u32, usize)>,
    generation: u64,
    /// Some entry is a tombstone still holding its namespace: `collect`
    /// (after every hand-off of storage requests) has work only then.
    tombstones: bool,
}

impl NsTable {
    /// The namespaces (keys) whose reservation limits host `h`.
    pub fn resv_blocked(&self, h: &HostId) -> Vec<(usize, Access)> {
        let mut out = Vec::new();
        for pos in 0..self.live_count() {
            let Some(key) = self.live_key_at(pos) else {
                continue;
            };
            let Some(n) = self.get(key) else {
                continue;
            };
            let cell = n.resv.lock();
            if cell.r.active() {
                let a = cell.r.access(h);
                if !(a.read && a.write) {
                    out.push((key, a));
                }
            }
        }
        out
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Adopts a new namespace list: entries whose namespace is unchanged keep
    /// their key; others become tombstones until [`NsTable::collect`].
    pub fn load(&mut self, list: &[Arc<Namespace>], generation: u64) {
        self.generation = generation;
        // An unchanged namespace is the same `Arc` under the same NSID in
        // the previous list: found by NSID (the index is sorted), not by a
        // search of every entry (thousands of namespaces, every queue).
        let old = std::mem::take(&mut self.index);
        for e in &mut self.entries {
            e.live = false;
        }
        for ns in list {
            let kept = old
                .binary_search_by_key(&ns.nsid, |&(n, _)| n)
                .ok()
                .map(|i| old[i].1)
                .filter(|&k| (self.entries[k].ns.as_ref()).is_some_and(|x| Arc::ptr_eq(x, ns)));
            let key = match kept {
                Some(k) => {
                    self.entries[k].live = true;
                    k
                }
                None => {
                    self.entries.push(NsEntry {
                        ns: Some(ns.clone()),
                        live: true,
                    });
                    self.entries.len() - 1
                }
            };
            self.index.push((ns.nsid, key));
        }
        self.index.sort_unstable();
        self.tombstones = self.entries.iter().any(|e| !e.live && e.ns.is_some());
    }

    /// Makes tombstones of the namespaces that left their subsystem
    /// ([`Namespace::has_left`]) without reloading the list: a flag read per
    /// entry, no search, no allocation (an idle queue's tick, thousands of
    /// queues). The generation stays: the next command still loads the
    /// list. Returns whether any left.
    pub fn release_left(&mut self) -> bool {
        let mut any = false;
        for e in &mut self.entries {
            if e.live && e.ns.as_ref().is_some_and(|n| n.has_left()) {
                e.live = false;
                any = true;
            }
        }
        if any {
            let entries = &self.entries;
            self.index.retain(|&(_, k)| entries[k].live);
            self.tombstones = true;
        }
        any
    }

    /// Releases tombstones (call when no emitted request names them).
    pub fn collect(&mut self) {
        if !std::mem::take(&mut self.tombstones) {
            return;
        }
        for e in &mut self.entries {
            if !e.live {
                e.ns = None;
            }
        }
    }

    pub fn key(&self, nsid: u32) -> Option<usize> {
        self.index
            .binary_search_by_key(&nsid, |&(n, _)| n)
            .ok()
            .map(|i| self.index[i].1)
    }

    /// The live namespace under `key`.
    pub fn get(&self, key: usize) -> Option<&Arc<Namespace>> {
        self.entries
            .get(key)
            .filter(|e| e.live)
            .and_then(|e| e.ns.as_ref())
    }

    /// Byte offset and length of the LBA range `slba..slba + nlb` of the
    /// live namespace under `key`, checked against its size (NVM Command Set
    /// §3.1 Figure "Status Code – Generic Command Status Values": 80h "LBA
    /// Out of Range").
    #[inline]
    pub fn lba_range(&self, key: usize, slba: u64, nlb: u64) -> Result<(u64, u64), Status> {
        let Some(ns) = self.get(key) else {
            return Err(Status::INVALID_NAMESPACE.dnr());
        };
        match slba.checked_add(nlb) {
            Some(end) if end <= ns.blocks => Ok((slba << ns.lba_shift, nlb << ns.lba_shift)),
            _ => Err(Status::LBA_OUT_OF_RANGE.dnr()),
        }
    }

    /// The backend under `key`, live or tombstone.
    pub fn backend(&self, key: usize) -> Option<&SharedBackend> {
        self.entries
            .get(key)
            .and_then(|e| e.ns.as_ref())
            .map(|ns| &ns.backend)
    }

    /// How many namespaces are live.
    pub fn live_count(&self) -> usize {
        self.index.len()
    }

    /// The key of the `pos`-th live namespace (in NSID order).
    pub fn live_key_at(&self, pos: usize) -> Option<usize> {
        self.index.get(pos).map(|&(_, k)| k)
    }

    pub fn nsids(&self) -> impl Iterator<Item = u32> + '_ {
        self.index.iter().map(|&(n, _)| n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BackendKind, NamespaceConfig, Size};

    fn ns(nsid: u32) -> Arc<Namespace> {
        let cfg = NamespaceConfig {
            nsid: Some(nsid),
            backend: BackendKind::Null,
            path: None,
            size: Some(Size(1 << 20)),
            block_size: None,
            uuid: None,
            nguid: None,
            anagrpid: None,
            ptpl_file: None,
            rbd: None,
            volume: None,
            commit: false,
        };
        Arc::new(
            crate::subsystem::build_namespace("nqn.t", &cfg, nsid, &crate::testing::Memory)
                .unwrap(),
        )
    }

    #[test]
    fn keys_survive_reloads_and_removed_namespaces_disappear() {
        let (a, b, c) = (ns(1), ns(2), ns(3));
        let mut t = NsTable::default();
        t.load(&[a.clone(), b.clone()], 1);
        let kb = t.key(2).unwrap();
        let ka = t.key(1).unwrap();
        t.load(&[b.clone(), c.clone()], 2);
        assert!(
            t.backend(ka).is_some(),
            "a tombstone keeps its backend until collected"
        );
        assert!(t.get(ka).is_none());
        t.collect();
        assert_eq!(t.key(2), Some(kb), "unchanged namespace keeps its key");
        assert!(t.key(1).is_none());
        assert!(t.get(t.key(3).unwrap()).is_some());
        assert_eq!(t.nsids().collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(t.generation(), 2);
        // The removed namespace's Arc is released once collected.
        assert_eq!(Arc::strong_count(&a), 1);
    }
}
