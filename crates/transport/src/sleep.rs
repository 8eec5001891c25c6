//! Hybrid polling's precise timer: a timerfd in the worker's epoll set, so
//! a sleep ends at the first of an event and the timer (epoll's own timeout
//! has millisecond granularity, and `nanosleep` would not see events).

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// A one-shot CLOCK_MONOTONIC timer registered for readability.
pub(crate) struct SleepTimer {
    fd: OwnedFd,
}

impl SleepTimer {
    /// Creates the timer and registers it under `token`; also sets the
    /// calling thread's timer slack to 1 ns (the default 50 µs would blur
    /// the sleeps hybrid polling is made of).
    pub(crate) fn new(registry: &Registry, token: Token) -> io::Result<SleepTimer> {
        // SAFETY: timerfd_create takes no pointers; a non-negative result is
        // a new descriptor we own.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a valid descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        registry.register(&mut SourceFd(&fd.as_raw_fd()), token, Interest::READABLE)?;
        // SAFETY: PR_SET_TIMERSLACK takes an integer argument only.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
        Ok(SleepTimer { fd })
    }

    /// Fires once, `after` from now (re-arming also clears an expiry not
    /// yet read, so edge-triggered epoll reports the next one).
    pub(crate) fn arm(&self, after: Duration) -> io::Result<()> {
        let after = after.max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs() as libc::time_t,
                tv_nsec: after.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: `spec` is a valid itimerspec for the call's duration; the
        // old value is not asked for (null).
        let rc =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mio::{Events, Poll};
    use std::time::Instant;

    #[test]
    fn the_timer_ends_an_epoll_wait_and_can_be_rearmed() {
        let mut poll = Poll::new().unwrap();
        let t = SleepTimer::new(poll.registry(), Token(7)).unwrap();
        let mut events = Events::with_capacity(4);
        for _ in 0..3 {
            let t0 = Instant::now();
            t.arm(Duration::from_micros(200)).unwrap();
            // Without the timer this would wait the full 10 s.
            poll.poll(&mut events, Some(Duration::from_secs(10)))
                .unwrap();
            assert!(events.iter().any(|e| e.token() == Token(7)));
            let took = t0.elapsed();
            assert!(took >= Duration::from_micros(200), "{took:?}");
            assert!(took < Duration::from_secs(5), "{took:?}");
        }
    }
}
