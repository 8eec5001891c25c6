//! For the VM test (tests/interop_rdma.rs, run in the guest by
//! tests/linux-host/guest/rdma-farflash-host.sh): `rdma_host_reject
//! ADDR:PORT QID DEPTH` opens one host queue pair with farflash's RDMA
//! host ([`RdmaHostQueue`]) asking for queue `QID` of `DEPTH` entries, and
//! prints the error the target's reject becomes (RDMA Transport Spec 1.0
//! §3.2: STS in the Reject's private data). Exits 0 when the connect failed
//! with an error, 1 when the target accepted the queue.

use farflash_host::{ConnectOptions, QueueConfig};
use farflash_rdma_verbs::RdmaHostQueue;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let parsed = (a.len() == 4)
        .then(|| Some((a[2].parse::<u16>().ok()?, a[3].parse::<u16>().ok()?)))
        .flatten();
    let Some((qid, depth)) = parsed else {
        eprintln!("usage: rdma_host_reject ADDR:PORT QID DEPTH");
        std::process::exit(2);
    };
    let opts = ConnectOptions::new(a[1].clone(), "nqn.2026-11.io.farflash:reject-probe");
    let cfg = QueueConfig {
        depth,
        slot_buf: 4096,
        max_data: 4096,
        icd_max: 0,
        hdgst: false,
        ddgst: false,
    };
    match RdmaHostQueue::connect(&opts, qid, cfg) {
        Ok(_) => {
            println!("queue {qid} of {depth} entries was accepted");
            std::process::exit(1);
        }
        Err(e) => println!("connect failed: {e}"),
    }
}
