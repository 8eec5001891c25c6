//! What a precise timer sleep costs on this machine: the mechanism of
//! `--poll hybrid` (a one-shot timerfd in an epoll set, timer slack 1 ns)
//! asked to sleep 1 to 16 µs, N times each, on the calling thread. For each
//! request it prints how long the sleep really took (p50, p99) and how much
//! CPU the thread was charged per sleep (CLOCK_THREAD_CPUTIME_ID): a sleep
//! saves CPU only where the second is well below the first. Sets the floor
//! under any hybrid polling scheme here (benches/cpu-poll.sh, issue 34).
//!
//! cargo run --release --example timer_cost -- [N]
//!
//! Output, one line per request: `req_us=R p50_us=.. p99_us=.. cpu_us=..`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn main() -> Res<()> {
    let n: usize = match std::env::args().nth(1) {
        Some(a) => a.parse().map_err(|e| format!("N: {e}"))?,
        None => 20_000,
    };
    if n < 100 {
        return Err("N: at least 100 sleeps per request".into());
    }
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument only.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    // SAFETY: epoll_create1 and timerfd_create take no pointers; their
    // results are new descriptors owned here.
    let ep = unsafe { OwnedFd::from_raw_fd(check(libc::epoll_create1(libc::EPOLL_CLOEXEC))?) };
    // SAFETY: as above.
    let tfd = unsafe {
        OwnedFd::from_raw_fd(check(libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
        ))?)
    };
    let mut ev = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLET) as u32,
        u64: 1,
    };
    // SAFETY: both descriptors are open; `ev` outlives the call.
    check(unsafe {
        libc::epoll_ctl(
            ep.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            tfd.as_raw_fd(),
            &mut ev,
        )
    })?;
    let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
    for req_us in [1u64, 2, 4, 8, 16] {
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: 0,
                tv_nsec: (req_us * 1000) as libc::c_long,
            },
        };
        let mut took = Vec::with_capacity(n);
        let cpu0 = thread_cpu();
        for _ in 0..n {
            let t0 = Instant::now();
            // SAFETY: `spec` is a valid itimerspec; no old value is asked for.
            check(unsafe {
                libc::timerfd_settime(tfd.as_raw_fd(), 0, &spec, std::ptr::null_mut())
            })?;
            loop {
                // SAFETY: `out` has room for the 4 events asked for.
                let rc = unsafe { libc::epoll_wait(ep.as_raw_fd(), out.as_mut_ptr(), 4, -1) };
                if rc > 0 {
                    break;
                }
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e.into());
                }
            }
            took.push(t0.elapsed());
        }
        let cpu = (thread_cpu() - cpu0) / n as u32;
        took.sort_unstable();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "req_us={req_us} p50_us={:.2} p99_us={:.2} cpu_us={:.2}",
            us(took[n / 2]),
            us(took[n * 99 / 100]),
            us(cpu)
        );
    }
    Ok(())
}
