//! Per-tenant quality of service: limits on a namespace (all hosts
//! together) or on a host (all its queues and namespaces), in I/Os and bytes
//! per second for reads, writes, or both, each with a burst allowance, as
//! SPDK's bdev QoS (`rw_ios_per_sec`, `rw_mbytes_per_sec`, …) and
//! ceph-nvmeof's namespace QoS offer; and a fair-sharing weight per host.
//!
//! - `config`: `[[subsystem.qos]]` entries and their checks.
//! - `bucket`: one token bucket per limited quantity, shared by the queues
//!   it governs; queues take tokens in chunks ([`CHUNK`] of the rate), so a
//!   bucket's lock is taken about once per chunk, not per I/O.
//! - `gate`: a queue's side: its reserves, and its FIFO of commands waiting
//!   for tokens (a command over its limit waits in the target, never fails,
//!   and never overtakes an earlier one of its queue).
//!
//! Nothing here reads a clock: the queue brings `now` (`set_now`, `tick`).

mod bucket;
mod config;
mod gate;
#[cfg(test)]
mod tests;

pub use bucket::Limiter;
pub use config::{QosConfig, QosKind, QosLimits};
pub(crate) use gate::{Class, Gate};

use std::sync::Arc;

/// Fraction of a second's worth of a rate a queue takes at a time.
const CHUNK: f64 = 0.005;

/// A subsystem's limits as the queues see them.
#[derive(Default)]
pub struct QosTable {
    /// (NSID, limiter).
    pub ns: Vec<(u32, Arc<Limiter>)>,
    /// (host NQN, limiter).
    pub hosts: Vec<(String, Arc<Limiter>)>,
    /// What built it, for `save_config` and reloads.
    pub config: Vec<QosConfig>,
}

impl QosTable {
    /// The table `cfg` asks for; limiters of `old` that govern the same
    /// namespace or host are kept (with their new rates), so that a change
    /// neither resets a bucket nor loses a queue's reference to it.
    pub fn build(cfg: &[QosConfig], old: Option<&QosTable>) -> QosTable {
        let mut t = QosTable {
            config: cfg.to_vec(),
            ..QosTable::default()
        };
        for c in cfg {
            match c.kind() {
                QosKind::Namespace(nsid) => {
                    let kept = old.and_then(|o| o.ns.iter().find(|(n, _)| *n == nsid));
                    t.ns.push((nsid, keep_or_new(kept.map(|(_, l)| l), &c.limits())));
                }
                QosKind::Host(h) => {
                    let kept = old.and_then(|o| o.hosts.iter().find(|(n, _)| n == h));
                    t.hosts
                        .push((h.to_owned(), keep_or_new(kept.map(|(_, l)| l), &c.limits())));
                }
            }
        }
        t
    }

    pub fn is_empty(&self) -> bool {
        self.ns.is_empty() && self.hosts.is_empty()
    }

    pub fn for_namespace(&self, nsid: u32) -> Option<&Arc<Limiter>> {
        self.ns.iter().find(|(n, _)| *n == nsid).map(|(_, l)| l)
    }

    pub fn for_host(&self, host: &str) -> Option<&Arc<Limiter>> {
        self.hosts.iter().find(|(n, _)| n == host).map(|(_, l)| l)
    }

    /// The fair-sharing weight of `host` (1 unless configured).
    pub fn weight(&self, host: &str) -> u32 {
        (self.config.iter())
            .find(|c| c.host.as_deref() == Some(host))
            .and_then(|c| c.weight)
            .unwrap_or(1)
    }
}

fn keep_or_new(old: Option<&Arc<Limiter>>, limits: &QosLimits) -> Arc<Limiter> {
    match old {
        Some(l) => {
            l.set(limits);
            l.clone()
        }
        None => Arc::new(Limiter::new(limits)),
    }
}
