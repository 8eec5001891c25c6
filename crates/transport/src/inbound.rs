//! The seam between a connection's reads and its queue pair: plaintext
//! (`conn.rs`) and the secure channel (`secure.rs`) both implement it. In a
//! module of its own since `conn` uses `secure`: no module cycle.

use farflash_tcp::QueuePair;
use std::time::Instant;

/// Where the bytes a read brings go.
pub(crate) trait Inbound {
    /// The buffer the next read fills.
    fn space<'a>(&'a mut self, qp: &'a mut QueuePair) -> &'a mut [u8];
    /// `n` bytes were read into that buffer.
    fn received(&mut self, qp: &mut QueuePair, n: usize, now: Instant);
    /// Reading is over (the channel decided to close).
    fn stopped(&self) -> bool;
}
