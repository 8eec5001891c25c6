//! Standalone use of a queue, for tests, fuzzers and benchmarks: the event
//! loop hands storage requests to its shared per-thread queues and offloads
//! to its helper thread; here a queue runs its offloads inline and its
//! storage requests on a private queue set.

use crate::queue::NvmeQueue;

impl<C: Default> NvmeQueue<C> {
    /// Runs the emitted offloads here and now, and hands the storage
    /// requests to the kernel on the private queue set.
    pub fn commit(&mut self) {
        while let Some(o) = self.pop_offload() {
            self.on_offload_completion(o.run());
        }
        let mut set = self.own_storage();
        let mut failed = Vec::new();
        self.take_storage(|be, req| set.submit(be, req, &mut failed));
        set.commit();
        self.put_own_storage(set);
        for c in failed {
            self.on_storage_completion(c);
        }
    }

    /// Reaps the private queue set once and hands the completions in.
    /// Returns whether anything completed.
    pub fn poll_backends(&mut self) -> bool {
        if !self.has_own_storage() {
            return false;
        }
        let mut set = self.own_storage();
        let mut comps = self.scratch();
        set.reap(&mut comps);
        self.put_own_storage(set);
        let any = !comps.is_empty();
        for c in comps.drain(..) {
            self.on_storage_completion(c);
        }
        self.put_scratch(comps);
        any
    }
}
