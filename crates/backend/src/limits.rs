//! The open-file limit (RLIMIT_NOFILE) storage lives within.
//!
//! A file namespace holds one descriptor for its life; each event loop that
//! serves I/O to it opens a storage queue of its own on first use (for
//! io_uring: the ring and its eventfd, 2 descriptors), kept while the
//! namespace exists. Connections take one each. [`raise_nofile`] lifts the
//! soft limit to the hard one at start; [`check_headroom`] refuses to open
//! more files than the limit leaves room for, with an error that names the
//! limit and how to raise it, instead of failing on `EMFILE` half-way.

use std::io;

/// Descriptors kept free beyond the files of namespaces: connections,
/// storage queues, listeners, the management socket, logs.
pub const FD_RESERVE: u64 = 256;

/// Storage queues stop opening when fewer descriptors than this would be
/// left: the management socket, new connections and logs keep working.
pub const QUEUE_RESERVE: u64 = 64;

/// Soft and hard RLIMIT_NOFILE (`u64::MAX`: unlimited).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NofileLimit {
    pub soft: u64,
    pub hard: u64,
}

impl std::fmt::Display for NofileLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |v: u64| {
            if v == libc::RLIM_INFINITY {
                "unlimited".to_owned()
            } else {
                v.to_string()
            }
        };
        write!(f, "{} (hard limit {})", n(self.soft), n(self.hard))
    }
}

/// The process's RLIMIT_NOFILE.
pub fn nofile() -> io::Result<NofileLimit> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid, writable rlimit for the duration of the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(NofileLimit {
        soft: r.rlim_cur,
        hard: r.rlim_max,
    })
}

/// Raises the soft RLIMIT_NOFILE to the hard limit (to `fs.nr_open` when
/// the hard limit is unlimited): farflash waits with epoll, never
/// `select`, so descriptors above 1024 are safe. Returns the limit before
/// and after.
pub fn raise_nofile() -> io::Result<(NofileLimit, NofileLimit)> {
    let before = nofile()?;
    let mut want = before.hard;
    if want == libc::RLIM_INFINITY {
        // The kernel refuses a soft limit above fs.nr_open.
        want = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1 << 20);
    }
    if want <= before.soft {
        return Ok((before, before));
    }
    let r = libc::rlimit {
        rlim_cur: want,
        rlim_max: before.hard,
    };
    // SAFETY: `r` is a valid rlimit; setrlimit only reads it.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((before, nofile()?))
}

/// Descriptors the process has open (`/proc/self/fd`).
pub fn open_fds() -> io::Result<u64> {
    // The directory's own descriptor is listed too: one less.
    let n = std::fs::read_dir("/proc/self/fd")?.count() as u64;
    Ok(n.saturating_sub(1))
}

/// Not enough of RLIMIT_NOFILE is left for the files asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{files} file namespace(s) to open need {files} file descriptor(s), but the open-file limit \
     (RLIMIT_NOFILE) is {limit} with {open} in use and {reserve} kept for connections and storage \
     queues: raise it (ulimit -n; systemd LimitNOFILE=) or serve fewer file namespaces"
)]
pub struct FdShortage {
    pub files: u64,
    pub limit: NofileLimit,
    pub open: u64,
    pub reserve: u64,
}

/// Whether `files` more descriptors can be opened, leaving [`FD_RESERVE`]
/// free under the soft RLIMIT_NOFILE. Unknown limits or counts pass.
pub fn check_headroom(files: u64) -> Result<(), FdShortage> {
    if files == 0 {
        return Ok(());
    }
    let (Ok(limit), Ok(open)) = (nofile(), open_fds()) else {
        return Ok(());
    };
    headroom(files, limit, open)
}

fn headroom(files: u64, limit: NofileLimit, open: u64) -> Result<(), FdShortage> {
    let need = open.saturating_add(files).saturating_add(FD_RESERVE);
    if limit.soft == libc::RLIM_INFINITY || need <= limit.soft {
        return Ok(());
    }
    Err(FdShortage {
        files,
        limit,
        open,
        reserve: FD_RESERVE,
    })
}

/// Whether descriptor `fd`, just opened, is within [`QUEUE_RESERVE`] of the
/// soft limit. The kernel hands out the lowest free descriptor, so a new
/// one that high means about that many are open: a cheap check (no count
/// of /proc/self/fd) for the one-off opening of a storage queue.
pub fn near_limit(fd: std::os::fd::RawFd) -> bool {
    match nofile() {
        Ok(l) if l.soft != libc::RLIM_INFINITY => fd as u64 + QUEUE_RESERVE >= l.soft,
        _ => false,
    }
}

/// Whether `e` says the process or the system ran out of descriptors.
pub fn is_exhausted(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headroom_leaves_the_reserve_and_names_the_limit() {
        let limit = NofileLimit {
            soft: 1024,
            hard: 4096,
        };
        assert!(headroom(700, limit, 20).is_ok());
        let e = headroom(4096, limit, 20).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("RLIMIT_NOFILE") && m.contains("1024 (hard limit 4096)"),
            "{m}"
        );
        assert!(m.contains("ulimit -n") && m.contains("LimitNOFILE"), "{m}");
        assert!(headroom(1024 - 20 - FD_RESERVE, limit, 20).is_ok());
        assert!(headroom(1024 - 20 - FD_RESERVE + 1, limit, 20).is_err());
        let unlimited = NofileLimit {
            soft: libc::RLIM_INFINITY,
            hard: libc::RLIM_INFINITY,
        };
        assert!(headroom(1 << 40, unlimited, 20).is_ok());
        assert!(check_headroom(0).is_ok());
    }

    #[test]
    fn limits_read_and_raise() {
        let l = nofile().unwrap();
        assert!(l.soft <= l.hard);
        let (before, after) = raise_nofile().unwrap();
        assert_eq!(before.hard, after.hard);
        assert!(after.soft >= before.soft);
        assert!(open_fds().unwrap() >= 3);
        assert!(is_exhausted(&io::Error::from_raw_os_error(libc::EMFILE)));
        assert!(!is_exhausted(&io::Error::from_raw_os_error(libc::EINVAL)));
        assert!(!near_limit(3));
        assert!(
            near_limit(after.soft.min(i32::MAX as u64) as i32 - 1)
                || after.soft == libc::RLIM_INFINITY
        );
    }
}
