//! The per-queue data-buffer budget.

use super::*;

#[test]
fn data_buffer_budget_defers_r2ts_and_reads() {
    let tc = TransportConfig {
        max_io_size: 256 * 1024,
        max_queue_buffer: 256 * 1024,
        ..TransportConfig::default()
    };
    let t = target_with(vec![], tc);
    let mut a = Host::new(&t);
    let cntlid = a.bring_up();
    let mut q = io_queue(&t, cntlid);
    let len = 256 * 1024u32;
    // Three writes of 256 KiB without data: only the first gets an R2T.
    let mut cids = Vec::new();
    for i in 0..3u64 {
        let mut sqe = rw(io::WRITE, i * 512, 512, len, false);
        sqe.cid = q.next_cid();
        cids.push(sqe.cid);
        let b = q.capsule(&sqe, &[]);
        q.feed(&b);
    }
    let rx = q.recv_all();
    let r2ts: Vec<DataHeader> = rx
        .iter()
        .filter_map(|r| if let Rx::R2T(h) = r { Some(*h) } else { None })
        .collect();
    assert_eq!(r2ts.len(), 1, "one R2T within the budget: {rx:?}");
    assert_eq!(r2ts[0].cccid, cids[0]);
    // Each completed write lets the next one have its R2T.
    let mut r2t = r2ts[0];
    for k in 0..3 {
        q.send_h2c(&r2t, &vec![k as u8; len as usize]);
        let rx = q.recv_all();
        assert!(
            matches!(rx[0], Rx::Resp(c) if c.cid == cids[k] && c.status == Status::SUCCESS),
            "{rx:?}"
        );
        if k < 2 {
            let Some(Rx::R2T(next)) = rx.get(1) else {
                panic!("no R2T for the next write: {rx:?}")
            };
            assert_eq!(next.cccid, cids[k + 1]);
            r2t = *next;
        } else {
            assert_eq!(rx.len(), 1);
        }
    }
    // Two 256 KiB reads: the second runs only once the first's data was sent.
    let mut r1 = rw(io::READ, 0, 512, len, false);
    r1.cid = q.next_cid();
    let mut r2 = rw(io::READ, 512, 512, len, false);
    r2.cid = q.next_cid();
    let mut b = q.capsule(&r1, &[]);
    b.extend(q.capsule(&r2, &[]));
    q.feed(&b);
    assert!(
        q.q.output_len() >= len as usize && q.q.output_len() < 2 * len as usize,
        "only the first read's data is queued"
    );
    let first = q.recv_all();
    q.feed(&[]);
    let second = q.recv_all();
    let (d1, d2) = (data_of(&first), data_of(&second));
    assert!(
        d1.len() == len as usize && d1.iter().all(|&b| b == 0),
        "first read: {} bytes",
        d1.len()
    );
    assert!(
        d2.len() == len as usize && d2.iter().all(|&b| b == 1),
        "second read: {} bytes",
        d2.len()
    );
}
