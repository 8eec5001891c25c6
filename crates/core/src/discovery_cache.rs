//! The discovery log pages a target built, kept per generation and host
//! (a leaf module: `target.rs` owns the cache, `discovery.rs` fills it).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Hosts whose discovery log page is kept (the most recent).
const CACHED_HOSTS: usize = 16;

/// Discovery log pages of one generation (GENCTR) by host NQN: a host
/// reading a large log in pieces (libnvme asks 4 KiB at a time: 257
/// commands for 1,024 subsystems) gets every piece from one build, and
/// the target builds the page once per change and host, not per piece.
#[derive(Default)]
pub(crate) struct DiscoveryCache {
    pages: Mutex<VecDeque<Cached>>,
}

/// A page: its GENCTR, the host NQN it was built for, the bytes.
type Cached = (u64, String, Arc<Vec<u8>>);

impl DiscoveryCache {
    pub(crate) fn get(&self, genctr: u64, hostnqn: &str) -> Option<Arc<Vec<u8>>> {
        let pages = self.pages.lock().unwrap_or_else(|p| p.into_inner());
        (pages.iter())
            .find(|(g, h, _)| *g == genctr && h == hostnqn)
            .map(|(_, _, p)| p.clone())
    }

    pub(crate) fn put(&self, genctr: u64, hostnqn: &str, page: Arc<Vec<u8>>) {
        let mut pages = self.pages.lock().unwrap_or_else(|p| p.into_inner());
        pages.retain(|(g, h, _)| *g == genctr && h != hostnqn);
        if pages.len() >= CACHED_HOSTS {
            pages.pop_front();
        }
        pages.push_back((genctr, hostnqn.to_owned(), page));
    }
}
