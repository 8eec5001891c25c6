//! What start and shutdown do beside the threads: the open-file limit,
//! flushing every namespace, the totals served, and waiting for the RBD
//! images being closed.

use anyhow::{bail, Result};
use farflash_core::config::{BackendKind, Config};
use farflash_core::Target;
use std::time::Duration;

/// How long shutdown waits for RBD images still closing (a close takes
/// round trips to the cluster, each bounded by the monitor and OSD
/// operation timeouts: 10 s and 20 s unless the ceph.conf sets them).
const CLOSE_WAIT: Duration = Duration::from_secs(30);

/// What a server served, summed over its subsystems at shutdown.
pub type Totals = farflash_core::stats::Totals;

/// Flushes every namespace (acknowledged writes must survive), logs the
/// totals served, and returns them; an error when a flush failed.
pub(crate) fn flush_and_count(target: &Target) -> Result<Totals> {
    let mut failed = false;
    for sub in target.subsystems().iter() {
        for ns in sub.namespaces().iter() {
            if let Err(e) = ns.backend.sync_all() {
                tracing::error!(subnqn = %sub.nqn, nsid = ns.nsid, "flush at shutdown failed: {e}");
                failed = true;
            }
        }
    }
    let t = (target.subsystems().iter()).fold(Totals::default(), |mut a, s| {
        a += s.stats.totals();
        a
    });
    tracing::info!(
        reads = t.read_cmds,
        writes = t.write_cmds,
        read_bytes = t.read_bytes,
        written_bytes = t.write_bytes,
        "stopped"
    );
    if failed {
        bail!("some namespaces could not be flushed at shutdown");
    }
    Ok(t)
}

/// Waits for the RBD images being closed on threads of their own
/// ([`farflash_backend::wait_closed`]), so that their exclusive locks are
/// released before the process exits, not left for another gateway to
/// break.
pub(crate) fn wait_images_closed() {
    let left = farflash_backend::wait_closed(CLOSE_WAIT);
    if left > 0 {
        tracing::warn!(
            "{left} RBD images still closing after {CLOSE_WAIT:?}; exiting without them"
        );
    }
}

/// Raises the open-file limit's soft value to the hard one (file
/// namespaces hold a descriptor each, connections one each, each event
/// loop a storage queue of 2 per file namespace it serves) and logs what it
/// became; warns when the file namespaces could outgrow it once every event
/// loop serves them. `build_subsystems` refuses files beyond the limit.
pub(crate) fn raise_fd_limit(cfg: &Config) {
    use farflash_backend::limits;
    match limits::raise_nofile() {
        Ok((before, after)) if before != after => tracing::info!(
            "open-file limit (RLIMIT_NOFILE) raised from {} to {}",
            before.soft,
            after.soft
        ),
        Ok((_, after)) => tracing::info!("open-file limit (RLIMIT_NOFILE): {after}"),
        Err(e) => tracing::warn!("cannot raise the open-file limit (RLIMIT_NOFILE): {e}"),
    }
    let files = (cfg.subsystems.iter())
        .flat_map(|s| &s.namespaces)
        .filter(|n| n.backend == BackendKind::File)
        .count() as u64;
    let threads = match cfg.transport.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()) as u64,
        n => n as u64,
    };
    let busy = files * (1 + 2 * threads) + limits::FD_RESERVE;
    if let Ok(l) = limits::nofile() {
        if files > 0 && l.soft != libc::RLIM_INFINITY && busy > l.soft {
            tracing::warn!(
                files,
                threads,
                "{files} file namespaces with I/O on all {threads} event loops would need \
                 {busy} descriptors, more than the open-file limit (RLIMIT_NOFILE) {l}: \
                 storage queues opened past it fail their requests; raise it (ulimit -n, \
                 systemd LimitNOFILE=)"
            );
        }
    }
}
