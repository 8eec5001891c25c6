//! Which volumes of an RBD pool are exported: [`super::RbdPool::open`]
//! wraps the namespace backend so that the volume counts as exported
//! until the last reference to it drops (the namespace removed and its
//! queues gone), whichever thread that is.

use farflash_backend::{Backend, BackendQueue, SharedBackend};
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

/// Volume name -> how many backends opened on it are alive.
#[derive(Debug, Default, Clone)]
pub(super) struct Exports(Arc<Mutex<HashMap<String, usize>>>);

impl Exports {
    fn map(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn is_exported(&self, name: &str) -> bool {
        self.map().contains_key(name)
    }

    /// Wraps `inner`, opened on `name`: exported until it drops.
    pub(super) fn wrap(&self, name: &str, inner: SharedBackend, uuid: [u8; 16]) -> SharedBackend {
        *self.map().entry(name.to_owned()).or_insert(0) += 1;
        Arc::new(Exported {
            inner,
            name: name.to_owned(),
            exports: self.clone(),
            uuid,
        })
    }

    fn release(&self, name: &str) {
        let mut m = self.map();
        if let Some(n) = m.get_mut(name) {
            *n -= 1;
            if *n == 0 {
                m.remove(name);
            }
        }
    }
}

/// A namespace backend on an exported volume; every call goes to `inner`.
struct Exported {
    inner: SharedBackend,
    name: String,
    exports: Exports,
    /// The volume's persistent UUID (the namespace's NGUID and UUID).
    uuid: [u8; 16],
}

impl Drop for Exported {
    fn drop(&mut self) {
        self.exports.release(&self.name);
    }
}

impl Backend for Exported {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn volatile_write_cache(&self) -> bool {
        self.inner.volatile_write_cache()
    }
    fn open_queue(&self, depth: u32) -> io::Result<Box<dyn BackendQueue>> {
        self.inner.open_queue(depth)
    }
    fn sync_all(&self) -> io::Result<()> {
        self.inner.sync_all()
    }
    fn refresh_capacity(&self) -> io::Result<bool> {
        self.inner.refresh_capacity()
    }
    fn set_ana_optimized(&self, optimized: bool) -> io::Result<()> {
        self.inner.set_ana_optimized(optimized)
    }
    fn stable_id(&self) -> Option<[u8; 16]> {
        Some(self.uuid)
    }
    fn compare_and_write_unit(&self) -> Option<u32> {
        self.inner.compare_and_write_unit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exported_until_the_last_backend_drops_and_calls_pass_through() {
        let ex = Exports::default();
        let ram = || farflash_backend::open_ram(1 << 20, 4096).expect("ram backend");
        assert!(!ex.is_exported("v"));
        let a = ex.wrap("v", ram(), [7; 16]);
        let b = ex.wrap("v", ram(), [7; 16]);
        assert!(ex.is_exported("v") && !ex.is_exported("w"));
        assert_eq!(
            (a.kind(), a.capacity(), a.block_size()),
            ("ram", 1 << 20, 4096)
        );
        assert!(!a.refresh_capacity().expect("refresh"));
        assert_eq!(a.stable_id(), Some([7; 16]), "the volume's UUID");
        a.set_ana_optimized(true).expect("ana");
        a.sync_all().expect("sync");
        let q = a.open_queue(4).expect("queue");
        drop(a);
        assert!(ex.is_exported("v"), "b still holds it");
        drop(b);
        assert!(
            !ex.is_exported("v"),
            "both dropped (a queue does not hold the volume)"
        );
        drop(q);
        let c = ex.wrap("v", ram(), [7; 16]);
        let c2 = c.clone();
        drop(c);
        assert!(ex.is_exported("v"), "a clone of the Arc keeps it exported");
        drop(c2);
        assert!(!ex.is_exported("v"));
    }
}
