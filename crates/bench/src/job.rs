//! One job: a thread driving one engine (its own I/O queue) at `iodepth`,
//! timing every command's submission and completion (fio's slat/clat).

use crate::cpu::{cpu_use, thread_rusage};
use crate::engine::{Done, Engine};
use crate::spec::{JobSpec, PollMode};
use crate::stats::JobStats;
use crate::verify;
use crate::workload::{verify_plan, Region, Workload};
use farflash_nap::{Decision, Nap, Woke};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Counters a job publishes for the progress line (plain stores by the
/// owning thread, one cache line per job; only when progress is on).
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct Progress {
    pub read_ios: AtomicU64,
    pub write_ios: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
}

/// Margin a hybrid job wakes before a paced I/O's time, beyond the
/// measured wake-up cost.
const PACE_GUARD: Duration = Duration::from_micros(2);

/// How a job thread waits (`--poll`): for completions, and for a paced
/// I/O's time while nothing is in flight.
struct Waiter {
    mode: PollMode,
    /// Hybrid: when a gap between completions is worth a sleep
    /// (`farflash-nap`, the target's rule).
    nap: Nap,
}

impl Waiter {
    fn new(mode: PollMode, now: Instant) -> Waiter {
        if mode == PollMode::Hybrid {
            // SAFETY: PR_SET_TIMERSLACK takes an integer argument only; 1 ns
            // of slack (the default 50 µs would blur the naps).
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
        }
        Waiter {
            mode,
            nap: Nap::new(now),
        }
    }

    /// Whether the thread spins between completions (reads the clock
    /// only every few empty polls).
    fn spins(&self) -> bool {
        self.mode == PollMode::Spin
    }

    /// Nothing in flight at `now`: waits (or not) for `next`, the paced
    /// I/O's time. Blocking sleeps to it; hybrid sleeps to the measured
    /// wake-up cost before it, then spins; spinning spins.
    fn until(&mut self, next: Instant, now: Instant) {
        let left = next.saturating_duration_since(now);
        match self.mode {
            PollMode::Block => std::thread::sleep(left),
            PollMode::Hybrid => {
                let margin = self.nap.wake_cost() + PACE_GUARD;
                if left > 2 * margin {
                    std::thread::sleep(left - margin);
                }
            }
            PollMode::Spin => {}
        }
    }

    /// Waits for completions as the mode says; appends them to `done`.
    fn wait(&mut self, e: &mut dyn Engine, done: &mut Vec<Done>) -> anyhow::Result<usize> {
        match self.mode {
            PollMode::Block => e.wait(done),
            PollMode::Spin => e.poll(done),
            PollMode::Hybrid => self.hybrid(e, done),
        }
    }

    /// Polls; idle, naps when the gaps say so and reports how it ended.
    fn hybrid(&mut self, e: &mut dyn Engine, done: &mut Vec<Done>) -> anyhow::Result<usize> {
        let n = e.poll(done)?;
        let now = Instant::now();
        if n > 0 {
            self.nap.work(now);
            return Ok(n);
        }
        let Decision::Sleep(until) = self.nap.decide(now, None) else {
            return Ok(0);
        };
        let (n, woken) = e.nap(done, until.saturating_duration_since(now))?;
        let t = Instant::now();
        let how = match woken {
            None => {
                // The engine cannot nap: spin from now on.
                self.mode = PollMode::Spin;
                Woke::Aborted
            }
            Some(false) if n == 0 => Woke::Timer,
            Some(_) => Woke::Arrival,
        };
        self.nap.woke(t, how);
        if n > 0 {
            self.nap.work(t);
        }
        Ok(n)
    }
}

/// Spaces a job's I/Os `1 / rate` apart (fio's `rate_iops` with
/// `rate_process=linear`): the k-th I/O goes no earlier than the start
/// plus k intervals. A job that fell behind (the target stalled) issues
/// what is due at once, as fio does, up to its iodepth.
#[derive(Clone, Copy, Debug)]
struct Pacer {
    interval: Duration,
    next: Instant,
}

impl Pacer {
    fn new(rate_iops: u32, start: Instant) -> Pacer {
        Pacer {
            interval: Duration::from_secs(1) / rate_iops.max(1),
            next: start,
        }
    }

    /// Measuring starts at `now`: I/Os that fell behind during the ramp are
    /// forgotten, so the measured interval offers the rate and no more.
    fn restart(&mut self, now: Instant) {
        self.next = self.next.max(now);
    }

    /// Whether an I/O may go at `now`; if so, the next is due an interval later.
    fn take(&mut self, now: Instant) -> bool {
        if now < self.next {
            return false;
        }
        self.next += self.interval;
        true
    }
}

/// Empty busy polls between clock reads.
const IDLE_POLLS_PER_CLOCK: u32 = 16;

/// Most verify mismatches printed per job (all are counted).
const MAX_PRINTED_MISMATCHES: u64 = 1000;

#[derive(Clone, Copy, Debug, Default)]
struct SlotMeta {
    /// When the command was prepared (fio's `start_time`).
    start: Option<Instant>,
    /// When the engine's commit that carried it returned (fio's `issue_time`).
    issued: Option<Instant>,
    offset: u64,
    len: u32,
    write: bool,
}

/// Where the next I/Os come from.
enum Source<'a> {
    Workload {
        w: Workload,
        end: Option<Instant>,
        bytes_left: u64,
    },
    Plan {
        extents: &'a [(u64, u32)],
        next: usize,
        write: bool,
    },
}

impl Source<'_> {
    fn has_more(&self, now: Instant) -> bool {
        match self {
            Source::Workload {
                end, bytes_left, ..
            } => match end {
                Some(e) => now < *e,
                None => *bytes_left > 0,
            },
            Source::Plan { extents, next, .. } => *next < extents.len(),
        }
    }
    fn next(&mut self) -> (bool, u64, u32) {
        match self {
            Source::Workload { w, bytes_left, .. } => {
                let (wr, off, len) = w.next_io();
                *bytes_left = bytes_left.saturating_sub(len as u64);
                (wr, off, len)
            }
            Source::Plan {
                extents,
                next,
                write,
            } => {
                let (o, l) = extents[*next];
                *next += 1;
                (*write, o, l)
            }
        }
    }
}

pub struct JobRun<'a> {
    pub index: usize,
    pub spec: &'a JobSpec,
    pub region: Region,
    pub seed: u64,
    pub progress: Option<&'a Progress>,
}

struct State {
    stats: JobStats,
    meta: Vec<SlotMeta>,
    /// Slots submitted since the last commit (their issue time is pending).
    fresh: Vec<u16>,
    done: Vec<Done>,
    scratch: Vec<u8>,
    ramp_end: Instant,
    measuring: bool,
    measure_start: Instant,
    last: Instant,
    cpu0: crate::cpu::Rusage,
    printed: u64,
}

impl JobRun<'_> {
    /// Runs the job to its end on `e`; `start` is the common start time.
    pub fn run(&self, e: &mut dyn Engine, start: Instant) -> anyhow::Result<JobStats> {
        let spec = self.spec;
        let depth = spec.iodepth as usize;
        let mut st = State {
            stats: JobStats::default(),
            meta: vec![SlotMeta::default(); depth.max(1)],
            fresh: Vec::with_capacity(depth),
            done: Vec::with_capacity(depth),
            scratch: if spec.verify {
                vec![0; spec.bs.max() as usize]
            } else {
                Vec::new()
            },
            ramp_end: start + spec.ramp_time,
            measuring: spec.ramp_time.is_zero(),
            measure_start: start,
            last: start,
            cpu0: thread_rusage(),
            printed: 0,
        };
        if spec.verify {
            let plan = verify_plan(
                self.region,
                &spec.bs,
                e.block_size(),
                spec.rw.random(),
                self.seed,
            );
            for write in [true, false] {
                let mut src = Source::Plan {
                    extents: &plan,
                    next: 0,
                    write,
                };
                self.drive(e, &mut src, &mut st)?;
            }
        } else {
            // Write data: random bytes, filled once per slot (no per-I/O cost).
            let mut rng = crate::rng::Rng::new(self.seed);
            let mut slots = vec![];
            while let Some(s) = e.alloc_slot() {
                rng.fill(e.buf_mut(s));
                slots.push(s);
            }
            for s in slots {
                e.release(s);
            }
            let w = Workload::new(
                spec.rw,
                spec.rwmixread,
                spec.bs.clone(),
                self.region,
                self.seed,
            );
            let mut src = Source::Workload {
                w,
                end: spec.runtime.map(|r| start + spec.ramp_time + r),
                bytes_left: self.region.len,
            };
            self.drive(e, &mut src, &mut st)?;
        }
        let secs = st.last.saturating_duration_since(st.measure_start);
        st.stats.runtime_ns = secs.as_nanos() as u64;
        let cpu1 = thread_rusage();
        st.stats.cpu = cpu_use(st.cpu0, cpu1, secs.as_secs_f64());
        Ok(st.stats)
    }

    fn drive(&self, e: &mut dyn Engine, src: &mut Source, st: &mut State) -> anyhow::Result<()> {
        let spec = self.spec;
        let depth = spec.iodepth as usize;
        let lba = e.block_size() as usize;
        let mut inflight = 0usize;
        let mut idle = 0u32;
        let mut now = Instant::now();
        let mut pacer = spec.rate_iops.map(|r| Pacer::new(r, now));
        let mut waiter = Waiter::new(spec.poll, now);
        loop {
            inflight += self.refill(e, src, st, pacer.as_mut(), now, depth - inflight)?;
            if inflight == 0 && !src.has_more(now) {
                return Ok(());
            }
            if let Some(p) = pacer.filter(|_| inflight == 0) {
                // Nothing in flight: wait for the next I/O's time.
                waiter.until(p.next, now);
                now = Instant::now();
                continue;
            }
            let n = waiter.wait(e, &mut st.done)?;
            if n == 0 {
                // Busy-polling: read the clock (for the end of the run)
                // only every few empty polls.
                idle += 1;
                if waiter.spins() && pacer.is_none() && !idle.is_multiple_of(IDLE_POLLS_PER_CLOCK) {
                    continue;
                }
            } else {
                idle = 0;
            }
            now = Instant::now();
            if !st.measuring && now >= st.ramp_end {
                st.measuring = true;
                st.measure_start = now;
                st.cpu0 = thread_rusage();
                if let Some(p) = pacer.as_mut() {
                    p.restart(now);
                }
            }
            if n == 0 {
                continue;
            }
            inflight -= st.done.len();
            self.reap(e, st, now, lba)?;
        }
    }

    /// Submits up to `room` new I/Os (as the source and the pacer allow)
    /// and commits them as one batch; how many.
    fn refill(
        &self,
        e: &mut dyn Engine,
        src: &mut Source,
        st: &mut State,
        mut pacer: Option<&mut Pacer>,
        now: Instant,
        room: usize,
    ) -> anyhow::Result<usize> {
        let spec = self.spec;
        let mut added = 0;
        // One clock read stamps the whole refill: the commands of a
        // batch are prepared within nanoseconds of each other.
        let mut prepared = None;
        while added < room && src.has_more(now) {
            if pacer.as_mut().is_some_and(|p| !p.take(now)) {
                break;
            }
            let Some(slot) = e.alloc_slot() else { break };
            let (write, offset, len) = src.next();
            if write && spec.verify {
                verify::fill(&mut e.buf_mut(slot)[..len as usize], offset, self.seed);
            }
            let m = &mut st.meta[slot as usize];
            *m = SlotMeta {
                start: Some(*prepared.get_or_insert_with(Instant::now)),
                issued: None,
                offset,
                len,
                write,
            };
            if let Err(err) = e.submit(slot, write, offset, len) {
                e.release(slot);
                return Err(err);
            }
            st.fresh.push(slot);
            added += 1;
        }
        if !st.fresh.is_empty() {
            // Hand the batch to the kernel, then stamp it: what came
            // before is submission latency, what follows completion
            // latency (fio's slat/clat split).
            e.commit()?;
            let t = Instant::now();
            for &s in &st.fresh {
                st.meta[s as usize].issued = Some(t);
            }
            st.fresh.clear();
        }
        Ok(added)
    }

    /// Accounts for the I/Os completed (`st.done`): errors, verification,
    /// latencies (or the ramp's counts), progress.
    fn reap(
        &self,
        e: &mut dyn Engine,
        st: &mut State,
        now: Instant,
        lba: usize,
    ) -> anyhow::Result<()> {
        let spec = self.spec;
        for i in 0..st.done.len() {
            let d = st.done[i];
            let m = st.meta[d.slot as usize];
            if let Some(err) = d.error {
                e.release(d.slot);
                anyhow::bail!(
                    "job {}: {} of {} bytes at offset {} failed: {err}",
                    self.index,
                    if m.write { "write" } else { "read" },
                    m.len,
                    m.offset
                );
            }
            if spec.verify && !m.write {
                self.check(e.buf(d.slot), m, lba, st);
            }
            e.release(d.slot);
            let (slat, clat) = match (m.start, m.issued) {
                (Some(s), Some(i)) => (
                    i.saturating_duration_since(s).as_nanos() as u64,
                    now.saturating_duration_since(i).as_nanos() as u64,
                ),
                _ => (0, 0),
            };
            if st.measuring {
                let dir = if m.write {
                    &mut st.stats.write
                } else {
                    &mut st.stats.read
                };
                dir.record(m.len, slat, clat);
            } else {
                st.stats.ramp_ios += 1;
                st.stats.ramp_bytes += m.len as u64;
            }
        }
        st.done.clear();
        st.last = now;
        if let Some(p) = self.progress {
            p.read_ios.store(st.stats.read.ios, Ordering::Relaxed);
            p.write_ios.store(st.stats.write.ios, Ordering::Relaxed);
            p.read_bytes.store(st.stats.read.bytes, Ordering::Relaxed);
            p.write_bytes.store(st.stats.write.bytes, Ordering::Relaxed);
        }
        Ok(())
    }

    fn check(&self, got: &[u8], m: SlotMeta, lba: usize, st: &mut State) {
        let len = m.len as usize;
        if got.len() < len {
            st.stats.verify_errors += 1;
            eprintln!(
                "verify: job {}: short buffer at offset {}",
                self.index, m.offset
            );
            return;
        }
        if let Err(bad) = verify::check(&got[..len], m.offset, self.seed, lba, &mut st.scratch) {
            for rel in bad {
                st.stats.verify_errors += 1;
                if st.printed < MAX_PRINTED_MISMATCHES {
                    st.printed += 1;
                    let byte = m.offset + rel as u64;
                    eprintln!(
                        "verify: job {}: mismatch at LBA {} (byte offset {byte}) in the {}-byte extent at offset {}",
                        self.index,
                        byte / lba as u64,
                        m.len,
                        m.offset
                    );
                }
            }
        }
    }
}

/// How long to sleep between progress lines.
pub const PROGRESS_PERIOD: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacer_spaces_ios_evenly_and_catches_up_after_a_stall() {
        let t0 = Instant::now();
        let us = Duration::from_micros(1);
        let mut p = Pacer::new(10_000, t0); // one per 100 µs
        assert!(p.take(t0), "the first goes at once");
        assert!(!p.take(t0 + 99 * us), "the second not before 100 µs");
        assert!(p.take(t0 + 100 * us));
        // Late by 1 ms (a stall): what was due goes at once, then the pace resumes.
        let late = t0 + 1200 * us;
        let mut burst = 0;
        while p.take(late) {
            burst += 1;
        }
        assert_eq!(burst, 11, "I/Os due at 200..=1200 µs");
        assert!(!p.take(late + 99 * us));
        assert!(p.take(late + 100 * us));
        // The ramp's backlog is not carried into the measured interval.
        let mut r = Pacer::new(1000, t0);
        assert!(r.take(t0));
        let start = t0 + Duration::from_millis(50);
        r.restart(start);
        assert!(
            r.take(start) && !r.take(start),
            "one I/O, not the 50 missed"
        );
        // A rate over a million a second still advances.
        let mut fast = Pacer::new(u32::MAX, t0);
        assert!(fast.take(t0) && fast.take(t0 + us));
    }
}
