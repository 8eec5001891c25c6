//! A queue pair's view of its subsystem's namespaces, with the backend queue
//! it opened on each.
//!
//! Keys are stable for the life of the connection: a command keeps the key it
//! was classified with even if the subsystem's namespaces change meanwhile.
//! A removed namespace stays as a tombstone until its in-flight requests
//! have completed, so nothing submitted is ever lost.

use crate::subsystem::Namespace;
use farflash_backend::{BackendQueue, IoCompletion};
use std::os::fd::RawFd;
use std::sync::Arc;

pub(crate) struct NsEntry {
    pub ns: Option<Arc<Namespace>>,
    bq: Option<Box<dyn BackendQueue>>,
    live: bool,
}

#[derive(Default)]
pub(crate) struct NsTable {
    entries: Vec<NsEntry>,
    /// Live namespaces: (NSID, key), sorted by NSID.
    index: Vec<(u32, usize)>,
    generation: u64,
}

impl NsTable {
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Adopts a new namespace list: entries whose namespace is unchanged keep
    /// their key and backend queue; others become tombstones.
    pub fn load(&mut self, list: &[Arc<Namespace>], generation: u64) {
        self.generation = generation;
        self.index.clear();
        for e in &mut self.entries {
            e.live = false;
        }
        for ns in list {
            let key = match self
                .entries
                .iter()
                .position(|e| e.ns.as_ref().is_some_and(|x| Arc::ptr_eq(x, ns)))
            {
                Some(k) => {
                    self.entries[k].live = true;
                    k
                }
                None => {
                    self.entries.push(NsEntry {
                        ns: Some(ns.clone()),
                        bq: None,
                        live: true,
                    });
                    self.entries.len() - 1
                }
            };
            self.index.push((ns.nsid, key));
        }
        self.index.sort_unstable();
        self.collect();
    }

    /// Drops tombstones that have nothing in flight.
    fn collect(&mut self) {
        for e in &mut self.entries {
            if !e.live && e.bq.as_ref().is_none_or(|b| b.in_flight() == 0) {
                e.bq = None;
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

    /// The backend queue of the live namespace `key`, opened on first use.
    pub fn queue(&mut self, key: usize, depth: u32) -> std::io::Result<&mut Box<dyn BackendQueue>> {
        let e = self
            .entries
            .get_mut(key)
            .filter(|e| e.live)
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENODEV))?;
        if e.bq.is_none() {
            let ns =
                e.ns.as_ref()
                    .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENODEV))?;
            e.bq = Some(ns.backend.open_queue(depth)?);
        }
        e.bq.as_mut()
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENODEV))
    }

    pub fn commit(&mut self) -> Vec<std::io::Error> {
        let mut errs = Vec::new();
        for b in self.entries.iter_mut().filter_map(|e| e.bq.as_mut()) {
            if let Err(e) = b.commit() {
                errs.push(e);
            }
        }
        errs
    }

    pub fn reap(&mut self, out: &mut Vec<IoCompletion>) {
        let mut dead = false;
        for e in &mut self.entries {
            if let Some(b) = e.bq.as_mut() {
                b.reap(out);
                dead |= !e.live;
            }
        }
        if dead {
            self.collect();
        }
    }

    pub fn notify_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.entries
            .iter()
            .filter_map(|e| e.bq.as_ref())
            .filter_map(|b| b.notify_fd())
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
        };
        Arc::new(crate::subsystem::build_namespace("nqn.t", &cfg, nsid).unwrap())
    }

    #[test]
    fn keys_survive_reloads_and_removed_namespaces_disappear() {
        let (a, b, c) = (ns(1), ns(2), ns(3));
        let mut t = NsTable::default();
        t.load(&[a.clone(), b.clone()], 1);
        let kb = t.key(2).unwrap();
        assert!(t.queue(kb, 4).is_ok());
        t.load(&[b.clone(), c.clone()], 2);
        assert_eq!(t.key(2), Some(kb), "unchanged namespace keeps its key");
        assert!(t.key(1).is_none());
        assert!(t.get(t.key(3).unwrap()).is_some());
        assert_eq!(t.nsids().collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(t.generation(), 2);
        // The removed namespace's Arc is released once nothing is in flight.
        assert_eq!(Arc::strong_count(&a), 1);
    }
}
