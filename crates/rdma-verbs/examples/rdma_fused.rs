//! For the VM test (tests/interop_rdma.rs, run in the guest by
//! tests/linux-host/guest/rdma-farflash-host.sh): `rdma_fused ADDR:PORT
//! NQN` drives fused Compare and Write (Base §3.4.2) over NVMe/RDMA with
//! farflash's host against a target whose namespace 1 has 512-byte blocks
//! and at least 16 MiB:
//!
//! - a pair whose data are in the capsules, and one whose data the target
//!   fetches by RDMA READ (128 KiB): a miscompare writes nothing, a match
//!   writes the new data;
//! - the refusals: a second half alone (Command Aborted due to Missing
//!   Fused Command), a first half followed by a plain Read (the Compare
//!   aborted with Missing Fused Command, the Read runs; also with the
//!   half's data still coming by RDMA READ when the Read arrives), halves over
//!   different ranges (Invalid Field for the Compare, Failed Fused Command
//!   for the Write), FUSE 11b (Invalid Field), and halves on two I/O
//!   queues (Missing Fused Command for both); none of them writes;
//! - two hosts (two controllers) hammering test-and-set on one LBA with
//!   4 KiB writes beside it at QD 16: no torn block, no lost or doubled
//!   increment.
//!
//! Prints one `ok: …` line per check; exits 1 naming the first that
//! failed.

use farflash_bench::ats::{self, AtsSpec};
use farflash_host::cmd::{self, FUSE_FIRST, FUSE_SECOND};
use farflash_host::{Completion, ConnectOptions, Controller, DataDir, IoQueue, IoQueueOptions};
use farflash_rdma_verbs::RdmaConnector;
use farflash_wire::{Sqe, Status};
use std::sync::Arc;
use std::time::Duration;

type Check = Result<(), String>;

const NSID: u32 = 1;
const BLOCK: usize = 512;

fn connect(addr: &str, nqn: &str, host: u8) -> Result<(Controller, IoQueue), String> {
    let mut o = ConnectOptions::new(addr.to_string(), nqn);
    o.hostnqn =
        format!("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000{host:02x}");
    o.connector = Some(Arc::new(RdmaConnector));
    o.command_timeout = Duration::from_secs(30);
    let mut ctrl = Controller::connect_with_queues(&o, 2).map_err(|e| format!("connect: {e}"))?;
    // Keep Alive every KATO/2 (the run outlasts KATO under TCG).
    ctrl.start_keep_alive()
        .map_err(|e| format!("keep-alive thread: {e}"))?;
    let q = ctrl
        .io_queue(
            1,
            IoQueueOptions {
                depth: 16,
                max_io: 128 << 10,
            },
        )
        .map_err(|e| format!("I/O queue: {e}"))?;
    Ok((ctrl, q))
}

/// Submits `cmds` back to back (adjacent in the SQ, one chain of SENDs)
/// and returns their completions in submission order. A command moves
/// `data.len()` bytes: `data` itself to the controller, or that many back.
fn batch(q: &mut IoQueue, cmds: &[(Sqe, DataDir, &[u8])]) -> Result<Vec<Completion>, String> {
    let mut cids = Vec::with_capacity(cmds.len());
    for (sqe, dir, data) in cmds {
        let cid = q.alloc_cid().ok_or("no free command slot")?;
        let buf = q.buf_mut(cid).ok_or("slot busy")?;
        let to = buf.get_mut(..data.len()).ok_or("data larger than a slot")?;
        if *dir == DataDir::ToCtrl {
            to.copy_from_slice(data);
        }
        let len = if *dir == DataDir::None {
            0
        } else {
            data.len() as u32
        };
        q.submit(cid, *sqe, *dir, len)
            .map_err(|e| format!("submit: {e}"))?;
        cids.push(cid);
    }
    wait_all(q, &cids)
}

/// The completions of `cids` (in that order), waiting for each.
fn wait_all(q: &mut IoQueue, cids: &[u16]) -> Result<Vec<Completion>, String> {
    let mut got: Vec<Completion> = Vec::new();
    while !cids.iter().all(|c| got.iter().any(|x| x.cid == *c)) {
        let n = q
            .wait(&mut got, Duration::from_secs(30))
            .map_err(|e| format!("completions: {e}"))?;
        if n == 0 {
            return Err("no completion within 30 s".into());
        }
    }
    cids.iter()
        .map(|c| {
            let i = got.iter().position(|x| x.cid == *c);
            i.map(|i| got.swap_remove(i))
                .ok_or_else(|| format!("no completion for cid {c}"))
        })
        .collect()
}

fn read(q: &mut IoQueue, slba: u64, len: usize) -> Result<Vec<u8>, String> {
    let mut b = vec![0u8; len];
    q.read_at(NSID, slba, (len / BLOCK) as u32, &mut b)
        .map_err(|e| format!("read at {slba}: {e}"))?;
    Ok(b)
}

fn write(q: &mut IoQueue, slba: u64, data: &[u8]) -> Check {
    q.write_at(NSID, slba, (data.len() / BLOCK) as u32, data)
        .map_err(|e| format!("write at {slba}: {e}"))
}

/// A pair of `len` bytes at `slba`: a miscompare writes nothing, a match
/// writes.
fn pair(q: &mut IoQueue, slba: u64, len: usize) -> Check {
    let nlb = (len / BLOCK) as u32;
    let (old, new, wrong) = (vec![0x11u8; len], vec![0x22u8; len], vec![0x33u8; len]);
    write(q, slba, &old)?;
    let won = q
        .compare_and_write(NSID, slba, nlb, &wrong, &new)
        .map_err(|e| format!("pair ({len} B, miscompare): {e}"))?;
    if won || read(q, slba, len)? != old {
        return Err(format!("a miscompared pair of {len} B wrote"));
    }
    let won = q
        .compare_and_write(NSID, slba, nlb, &old, &new)
        .map_err(|e| format!("pair ({len} B): {e}"))?;
    if !won || read(q, slba, len)? != new {
        return Err(format!("a matching pair of {len} B did not write"));
    }
    println!("ok: {len}-byte pair: miscompare writes nothing, match writes");
    Ok(())
}

fn expect(c: &Completion, want: Status, what: &str) -> Check {
    if c.cqe.status.code() == want.code() {
        Ok(())
    } else {
        Err(format!("{what}: status {:?}, want {want:?}", c.cqe.status))
    }
}

/// The refusals of Base §3.4.2; none of them writes.
fn refusals(q: &mut IoQueue) -> Check {
    let slba = 2048;
    let (old, new) = (vec![0x44u8; 4096], vec![0x55u8; 4096]);
    write(q, slba, &old)?;
    let (mut cmp, mut wr) = cmd::compare_and_write(NSID, slba, 8);
    let to = DataDir::ToCtrl;

    let r = batch(q, &[(wr, to, &new)])?;
    expect(&r[0], Status::FUSED_MISSING, "a second half alone")?;
    println!("ok: second half alone: Missing Fused Command");

    let rd = cmd::rw(false, NSID, slba, 8);
    let r = batch(q, &[(cmp, to, &old), (rd, DataDir::FromCtrl, &new)])?;
    expect(
        &r[0],
        Status::FUSED_MISSING,
        "a first half without its second",
    )?;
    expect(&r[1], Status::SUCCESS, "the Read after a lone first half")?;
    println!("ok: first half then a Read: the Compare Missing Fused Command, the Read runs");

    // The same with a first half whose data the target fetches by RDMA
    // READ: the Read arrives while the half's data is still on its way.
    let (big, big_lba) = (vec![0x66u8; 128 << 10], 4096);
    write(q, big_lba, &big)?;
    let (bcmp, _) = cmd::compare_and_write(NSID, big_lba, 256);
    let brd = cmd::rw(false, NSID, big_lba, 256);
    let r = batch(q, &[(bcmp, to, &big), (brd, DataDir::FromCtrl, &big)])?;
    expect(
        &r[0],
        Status::FUSED_MISSING,
        "a 128 KiB first half without its second",
    )?;
    expect(
        &r[1],
        Status::SUCCESS,
        "the Read after a lone 128 KiB first half",
    )?;
    if q.buf(r[1].cid)[..big.len()] != big[..] {
        return Err("the Read after a lone first half read wrong data".into());
    }
    println!(
        "ok: 128 KiB first half (RDMA READ) then a Read: Missing Fused Command, the Read runs"
    );

    let mut other = wr;
    other.cdw10 = (slba + 8) as u32;
    let r = batch(q, &[(cmp, to, &old), (other, to, &new)])?;
    expect(
        &r[0],
        Status::INVALID_FIELD,
        "a first half over another range",
    )?;
    expect(
        &r[1],
        Status::FUSED_FAILED,
        "a second half over another range",
    )?;
    if read(q, slba + 8, 4096)? == new {
        return Err("a pair over different ranges wrote".into());
    }
    println!("ok: halves over different ranges: Invalid Field, Failed Fused Command");

    cmp.flags |= FUSE_FIRST | FUSE_SECOND;
    wr.flags |= FUSE_FIRST | FUSE_SECOND;
    let r = batch(q, &[(cmp, to, &old), (wr, to, &new)])?;
    expect(&r[0], Status::INVALID_FIELD, "FUSE 11b")?;
    expect(&r[1], Status::INVALID_FIELD, "FUSE 11b")?;
    println!("ok: FUSE 11b: Invalid Field");

    if read(q, slba, 4096)? != old {
        return Err("a refused half wrote".into());
    }
    // The queue still pairs after the refusals.
    if !q
        .compare_and_write(NSID, slba, 8, &old, &new)
        .map_err(|e| format!("pair after the refusals: {e}"))?
    {
        return Err("the pair after the refusals miscompared".into());
    }
    println!("ok: nothing refused wrote; the queue pairs afterwards");
    Ok(())
}

/// Two hosts on two controllers hammering one ATS block.
fn contention(addr: &str, nqn: &str) -> Check {
    let spec = AtsSpec {
        nsid: NSID,
        lba: 8192,
        block: BLOCK as u32,
        pairs: 300,
        qd: 16,
        neighbours: 64,
        seed: 0,
    };
    let (_c0, mut q0) = connect(addr, nqn, 0xb0)?;
    ats::init(&mut q0, &spec, 1000).map_err(|e| format!("ATS init: {e}"))?;
    let runs: Vec<_> = (1..=2u8)
        .map(|h| {
            let (addr, nqn) = (addr.to_string(), nqn.to_string());
            std::thread::spawn(move || {
                let (_c, mut q) = connect(&addr, &nqn, 0xb0 + h)?;
                let spec = AtsSpec {
                    seed: h as u64,
                    ..spec
                };
                ats::run(&mut q, &spec).map_err(|e| format!("ATS host {h}: {e}"))
            })
        })
        .collect();
    let mut won = 0;
    for t in runs {
        let r = t.join().map_err(|_| "an ATS host panicked")??;
        if r.won + r.lost != spec.pairs || r.writes == 0 {
            return Err(format!("ATS host result {r:?}"));
        }
        won += r.won;
    }
    let v = ats::read_value(&mut q0, &spec).map_err(|e| format!("ATS final value: {e}"))?;
    if v != 1000 + won {
        return Err(format!("ATS counter {v}, want {} ({won} won)", 1000 + won));
    }
    println!(
        "ok: two hosts x {} pairs at QD 16 with neighbour writes: counter {v}, {won} won, none torn",
        spec.pairs
    );
    Ok(())
}

/// The halves on two I/O queues of one controller (Base §3.4.2: adjacent
/// in one SQ): the Write on queue 2 has no first half before it, and the
/// Compare on queue 1 is aborted when the next command there is not its
/// second. Nothing is written.
fn different_queues(ctrl: &Controller, q1: &mut IoQueue) -> Check {
    let mut q2 = ctrl
        .io_queue(
            2,
            IoQueueOptions {
                depth: 16,
                max_io: 128 << 10,
            },
        )
        .map_err(|e| format!("I/O queue 2: {e}"))?;
    let slba = 6144;
    let (old, new) = (vec![0x77u8; 4096], vec![0x88u8; 4096]);
    write(q1, slba, &old)?;
    let (cmp, wr) = cmd::compare_and_write(NSID, slba, 8);
    let to = DataDir::ToCtrl;
    let c = q1.alloc_cid().ok_or("no free command slot")?;
    q1.buf_mut(c).ok_or("slot busy")?[..4096].copy_from_slice(&old);
    q1.submit(c, cmp, to, 4096)
        .map_err(|e| format!("submit: {e}"))?;
    q1.send_queued().map_err(|e| format!("send: {e}"))?;
    let r = batch(&mut q2, &[(wr, to, &new)])?;
    expect(
        &r[0],
        Status::FUSED_MISSING,
        "a second half on another queue",
    )?;
    // The next command on queue 1 ends the wait of its first half.
    let rd = cmd::rw(false, NSID, slba, 8);
    let r = q1.alloc_cid().ok_or("no free command slot")?;
    q1.submit(r, rd, DataDir::FromCtrl, 4096)
        .map_err(|e| format!("submit: {e}"))?;
    let done = wait_all(q1, &[c, r])?;
    expect(
        &done[0],
        Status::FUSED_MISSING,
        "a first half whose second went to another queue",
    )?;
    expect(
        &done[1],
        Status::SUCCESS,
        "the Read after the lone first half",
    )?;
    if read(q1, slba, 4096)? != old {
        return Err("halves on two queues wrote".into());
    }
    println!("ok: halves on two queues: both Missing Fused Command, nothing written");
    Ok(())
}

fn run(addr: &str, nqn: &str) -> Check {
    let (c, mut q) = connect(addr, nqn, 0xa1)?;
    pair(&mut q, 64, BLOCK)?;
    pair(&mut q, 256, 128 << 10)?;
    refusals(&mut q)?;
    different_queues(&c, &mut q)?;
    drop(q);
    contention(addr, nqn)
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 3 {
        eprintln!("usage: rdma_fused ADDR:PORT NQN");
        std::process::exit(2);
    }
    if let Err(e) = run(&a[1], &a[2]) {
        println!("failed: {e}");
        std::process::exit(1);
    }
}
