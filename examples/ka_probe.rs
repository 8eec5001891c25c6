//! Keep Alive round trips of many idle controllers, measured on the host
//! (issue 33: keep-alives serviced on time while slow work runs). Connects
//! `CONTROLLERS` controllers (admin queue + `QUEUES` I/O queues, KATO 5 s,
//! no I/O) and sends every controller's Keep Alive itself, every KATO/2
//! (2.5 s), the controllers' phases spread evenly over the period, from
//! `THREADS` threads that each own every THREADS-th controller. Each Keep
//! Alive's round trip (send to completion) and lateness (completion minus the
//! moment it was due: a stalled Keep Alive also delays the ones its thread
//! sends after it) are recorded in the current window.
//!
//!   ka_probe ADDR:PORT NQN CONTROLLERS QUEUES THREADS < COMMANDS
//!
//! Prints `connected N queue pairs` once all are up, then reads lines on
//! standard input: `mark NAME` closes the current window and opens one
//! called NAME (the first is `connect`); `end` (or end of input) closes the
//! last. Each closed window prints one line:
//!
//!   window NAME: seconds=S kas=N p50_ms=.. p99_ms=.. max_ms=.. late_max_ms=.. failures=F[ first: MSG]
//!
//! A failed Keep Alive (an error status, a timeout of 10 s, a closed
//! connection) counts once and stops that controller's Keep Alives; the
//! process exits 1 if any failed.

use farflash_host::{ConnectOptions, Controller, IoQueue, IoQueueOptions};
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Keep Alive Timeout asked for in the admin Connect (Linux's default).
const KATO_MS: u32 = 5000;
/// A Keep Alive not answered within this fails.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Window {
    /// (round trip, lateness), in µs.
    samples: Vec<(u64, u64)>,
    failures: Vec<String>,
}

struct Shared {
    window: Mutex<Window>,
    stop: AtomicBool,
    any_failed: AtomicBool,
}

impl Shared {
    fn record(&self, rtt: Duration, late: Duration) {
        if let Ok(mut w) = self.window.lock() {
            w.samples
                .push((rtt.as_micros() as u64, late.as_micros() as u64));
        }
    }
    fn fail(&self, msg: String) {
        self.any_failed.store(true, Ordering::Relaxed);
        if let Ok(mut w) = self.window.lock() {
            w.failures.push(msg);
        }
    }
    /// Closes the current window and returns its line.
    fn close(&self, name: &str, secs: f64) -> String {
        let w = match self.window.lock() {
            Ok(mut w) => std::mem::take(&mut *w),
            Err(_) => Window::default(),
        };
        let mut rtt: Vec<u64> = w.samples.iter().map(|s| s.0).collect();
        rtt.sort_unstable();
        let late_max = w.samples.iter().map(|s| s.1).max().unwrap_or(0);
        let pct = |p: f64| -> f64 {
            if rtt.is_empty() {
                return 0.0;
            }
            let i = ((rtt.len() as f64 * p).ceil() as usize).clamp(1, rtt.len()) - 1;
            rtt[i] as f64 / 1e3
        };
        let mut line = format!(
            "window {name}: seconds={secs:.1} kas={} p50_ms={:.2} p99_ms={:.2} max_ms={:.2} late_max_ms={:.2} failures={}",
            rtt.len(),
            pct(0.5),
            pct(0.99),
            pct(1.0),
            late_max as f64 / 1e3,
            w.failures.len()
        );
        if let Some(f) = w.failures.first() {
            line.push_str(&format!(" first: {f}"));
        }
        line
    }
}

/// One thread's controllers: (controller, its phase in the period, its I/O
/// queues, kept open and idle).
type Owned = Vec<(usize, Controller, Duration, Vec<IoQueue>)>;

fn run_thread(mut owned: Owned, period: Duration, start: Instant, shared: Arc<Shared>) {
    owned.sort_by_key(|o| o.2);
    let mut alive = vec![true; owned.len()];
    let mut round: u32 = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        for (k, (i, c, phase, _)) in owned.iter().enumerate() {
            if !alive[k] {
                continue;
            }
            let due = start + period * round + *phase;
            // Sleeps in short steps so that `end` is not held up a period.
            loop {
                if shared.stop.load(Ordering::Relaxed) {
                    return;
                }
                let now = Instant::now();
                if now >= due {
                    break;
                }
                std::thread::sleep((due - now).min(Duration::from_millis(100)));
            }
            let sent = Instant::now();
            match c.keep_alive() {
                Ok(()) => {
                    let done = Instant::now();
                    shared.record(done - sent, done.saturating_duration_since(due));
                }
                Err(e) => {
                    alive[k] = false;
                    shared.fail(format!("controller {i}: {e}"));
                }
            }
        }
        round += 1;
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 6 {
        return Err("usage: ka_probe ADDR:PORT NQN CONTROLLERS QUEUES THREADS < COMMANDS".into());
    }
    let (addr, nqn) = (&a[1], &a[2]);
    let ctrls: usize = a[3].parse()?;
    let queues: u16 = a[4].parse()?;
    let threads: usize = a[5].parse::<usize>()?.clamp(1, ctrls.max(1));
    let period = Duration::from_millis(KATO_MS as u64 / 2);
    let shared = Arc::new(Shared {
        window: Mutex::new(Window::default()),
        stop: AtomicBool::new(false),
        any_failed: AtomicBool::new(false),
    });

    let mut per_thread: Vec<Owned> = (0..threads).map(|_| Vec::new()).collect();
    let mut swept = Instant::now();
    for i in 0..ctrls {
        let mut opts = ConnectOptions::new(addr.clone(), nqn.clone());
        opts.hostnqn = format!("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0001-{i:012}");
        opts.kato_ms = KATO_MS;
        opts.command_timeout = COMMAND_TIMEOUT;
        let c = Controller::connect_with_queues(&opts, queues)?;
        let qs: Vec<_> = (1..=queues)
            .map(|q| {
                c.io_queue(
                    q,
                    IoQueueOptions {
                        depth: 32,
                        max_io: 4096,
                    },
                )
            })
            .collect::<Result<_, _>>()?;
        let phase = period * i as u32 / ctrls as u32;
        per_thread[i % threads].push((i, c, phase, qs));
        // Until the threads start (their first Keep Alives are due within
        // a period), the controllers connected so far are kept alive here.
        if swept.elapsed() >= Duration::from_secs(1) {
            for (_, c, _, _) in per_thread.iter().flatten() {
                c.keep_alive()?;
            }
            swept = Instant::now();
        }
    }
    println!("connected {} queue pairs", ctrls * (1 + queues as usize));
    let start = Instant::now();
    let handles: Vec<_> = per_thread
        .into_iter()
        .map(|owned| {
            let s = shared.clone();
            std::thread::spawn(move || run_thread(owned, period, start, s))
        })
        .collect();

    let mut name = String::from("connect");
    let mut opened = Instant::now();
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let line = line.trim();
        if line == "end" {
            break;
        }
        if let Some(next) = line.strip_prefix("mark ") {
            println!("{}", shared.close(&name, opened.elapsed().as_secs_f64()));
            name = next.trim().to_string();
            opened = Instant::now();
        } else if !line.is_empty() {
            eprintln!("ka_probe: unknown command {line:?} (mark NAME, end)");
        }
    }
    shared.stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    println!("{}", shared.close(&name, opened.elapsed().as_secs_f64()));
    if shared.any_failed.load(Ordering::Relaxed) {
        std::process::exit(1);
    }
    Ok(())
}
