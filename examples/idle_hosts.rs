//! Connects idle hosts to a target and keeps them alive: `CONTROLLERS`
//! associations, each with `QUEUES` I/O queues, Keep Alive running, no I/O.
//! Used by benches/pair.sh to measure a target's idle CPU and its memory
//! per connected queue pair.
//!
//! cargo run --release --example idle_hosts -- ADDR:PORT NQN CONTROLLERS QUEUES SECONDS

use farflash_host::{ConnectOptions, Controller, IoQueueOptions};
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 6 {
        return Err("usage: idle_hosts ADDR:PORT NQN CONTROLLERS QUEUES SECONDS".into());
    }
    let (addr, nqn) = (&a[1], &a[2]);
    let (ctrls, queues, secs): (usize, u16, u64) = (a[3].parse()?, a[4].parse()?, a[5].parse()?);
    let mut held = Vec::new();
    for i in 0..ctrls {
        let mut opts = ConnectOptions::new(addr.clone(), nqn.clone());
        opts.hostnqn = format!("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-{i:012}");
        let mut c = Controller::connect_with_queues(&opts, queues)?;
        c.start_keep_alive()?;
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
        held.push((c, qs));
    }
    println!("connected {} queue pairs", ctrls * (1 + queues as usize));
    std::thread::sleep(Duration::from_secs(secs));
    for (c, qs) in held {
        if let Some(e) = c.keep_alive_failure() {
            return Err(format!("keep-alive failed: {e}").into());
        }
        drop(qs);
        c.shutdown()?;
    }
    Ok(())
}
