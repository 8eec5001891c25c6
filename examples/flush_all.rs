//! Flushes every active namespace of a subsystem (issue 33: a flush of many
//! file namespaces as the slow work beside keep-alives). One controller,
//! one I/O queue of depth `QD`: a Flush for each namespace, `QD` at a time,
//! `PASSES` times over the namespace list.
//!
//!   flush_all ADDR:PORT NQN QD PASSES
//!
//! Prints `namespaces=N flushes=F seconds=S max_ms=..` (the slowest Flush,
//! submission to completion); exits 1 on any error status.

use farflash_host::cmd;
use farflash_host::{Completion, ConnectOptions, Controller, DataDir, IoQueueOptions};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 5 {
        return Err("usage: flush_all ADDR:PORT NQN QD PASSES".into());
    }
    let opts = ConnectOptions::new(a[1].clone(), a[2].clone());
    let qd: u16 = a[3].parse::<u16>()?.clamp(1, 128);
    let passes: usize = a[4].parse()?;
    let mut c = Controller::connect_with_queues(&opts, 1)?;
    c.start_keep_alive()?;
    let nsids = c.active_namespaces()?;
    let mut q = c.io_queue(
        1,
        IoQueueOptions {
            depth: qd,
            max_io: 4096,
        },
    )?;
    let work: Vec<u32> = (0..passes).flat_map(|_| nsids.iter().copied()).collect();
    let mut sent_at = vec![Instant::now(); 1 << 16];
    let (mut next, mut done, mut max) = (0usize, 0usize, Duration::ZERO);
    let mut out: Vec<Completion> = Vec::with_capacity(qd as usize);
    let t0 = Instant::now();
    while done < work.len() {
        while next < work.len() {
            let Some(cid) = q.alloc_cid() else { break };
            q.submit(cid, cmd::flush(work[next]), DataDir::None, 0)?;
            sent_at[cid as usize] = Instant::now();
            next += 1;
        }
        out.clear();
        q.wait(&mut out, Duration::from_millis(100))?;
        for comp in &out {
            max = max.max(sent_at[comp.cid as usize].elapsed());
            comp.check()?;
            q.release_cid(comp.cid);
            done += 1;
        }
    }
    println!(
        "namespaces={} flushes={} seconds={:.3} max_ms={:.2}",
        nsids.len(),
        work.len(),
        t0.elapsed().as_secs_f64(),
        max.as_secs_f64() * 1e3
    );
    drop(q);
    c.shutdown()?;
    Ok(())
}
