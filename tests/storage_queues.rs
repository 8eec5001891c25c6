//! Storage queues belong to the event-loop threads, not to connections
//! (issue #11): with 2 workers, 4 file namespaces and 64 connected I/O
//! queues that all did I/O on every namespace, the target holds at most
//! 2 x 4 = 8 io_urings (counted in /proc/PID/fd).

mod common;

use common::{Serve, NQN};
use farflash_host::{ConnectOptions, Controller, IoQueueOptions};
use std::time::Duration;

const CONTROLLERS: u16 = 16;
const QUEUES_PER_CONTROLLER: u16 = 4;
const NAMESPACES: u32 = 4;

/// How many of the process's descriptors are io_uring instances.
fn io_uring_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter(|l| l.to_string_lossy().contains("io_uring"))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn storage_queues_do_not_grow_with_connections() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let files: Vec<_> = (0..NAMESPACES)
        .map(|n| {
            let p = dir.join(format!("storage-queues-{}-{n}.img", std::process::id()));
            std::fs::File::create(&p)
                .and_then(|f| f.set_len(4 << 20))
                .expect("namespace file");
            p
        })
        .collect();
    let mut args = vec!["--threads", "2", "--block-size", "512"];
    for f in &files {
        args.push("--file");
        args.push(f.to_str().expect("utf-8 path"));
    }
    let serve = Serve::start(&args);
    let mut opts = ConnectOptions::new(serve.addr.clone(), NQN);
    opts.command_timeout = Duration::from_secs(10);

    let mut ctrls = Vec::new();
    let mut queues = Vec::new();
    for _ in 0..CONTROLLERS {
        let c = Controller::connect_with_queues(&opts, QUEUES_PER_CONTROLLER).expect("connect");
        for qid in 1..=QUEUES_PER_CONTROLLER {
            let q = c
                .io_queue(
                    qid,
                    IoQueueOptions {
                        depth: 4,
                        max_io: 16 * 1024,
                    },
                )
                .expect("I/O queue");
            queues.push(q);
        }
        ctrls.push(c);
    }
    assert_eq!(queues.len(), 64);
    let data = vec![0x5Au8; 4096];
    let mut back = vec![0u8; 4096];
    for (i, q) in queues.iter_mut().enumerate() {
        for nsid in 1..=NAMESPACES {
            let lba = i as u64 * 8;
            q.write_at(nsid, lba, 8, &data).expect("write");
            q.read_at(nsid, lba, 8, &mut back).expect("read");
            assert_eq!(back, data);
        }
    }
    let rings = io_uring_count(serve.pid());
    eprintln!(
        "{} I/O queues, {NAMESPACES} file namespaces, 2 workers: {rings} io_urings",
        queues.len()
    );
    assert!(rings >= 1, "the file namespaces should use io_uring");
    assert!(rings <= 8, "{rings} io_urings for 2 workers x 4 namespaces");
    drop(queues);
    for c in ctrls {
        c.shutdown().expect("shutdown");
    }
    drop(serve);
    for f in files {
        let _ = std::fs::remove_file(f);
    }
}
