//! The command layer alone: farflash-core's `NvmeQueue` with no PDU and no
//! storage engine. Commands are begun from fuzzed SQEs, their data supplied
//! or refused by a stand-in binding, and every storage request the layer
//! emits is held, then completed in a fuzz-chosen order with a fuzz-chosen
//! result (success or an errno), the way an asynchronous backend could.
//!
//! Input: byte 0 picks the target's limits and byte 1 its namespaces
//! (`target_setup::build`); an admin queue is connected and enabled and one
//! I/O queue connected; then operations until the input ends, each on the
//! admin or the I/O queue (bit 7 of its first byte):
//!
//! - 0: begin a fuzzed SQE (64 bytes; fix-ups: SGL, with or without the
//!   FUSE bits, NSID, small NLB; the opcode steered onto every known one);
//! - 1: give the oldest runnable command its data (fuzzed bytes) and run it;
//! - 2: refuse the oldest runnable command with a fuzzed status;
//! - 3 / 4: complete the held storage request at a fuzzed position, with
//!   success / with EIO, ENOSPC, EINVAL or ENODEV;
//! - 5: a tick, time passing;
//! - 6: time passing and the commands waiting for QoS tokens resumed.
//!
//! Bit 3 of byte 1 puts tight QoS limits on NSID 1
//! (`target_setup::build_with`), so commands wait for tokens and resume.
//!
//! Checked: no panic; every command that got a slot completes exactly once,
//! naming that slot, and a refused one is answered at once; reply data only
//! on success and never beyond the command's transfer length; the storage
//! requests in flight are exactly those emitted and not completed; after
//! everything runs and every request completes, nothing but parked AERs is
//! left and nothing is in flight.

use crate::build::{HOSTID, HOSTNQN, SUBNQN};
use crate::input::Input;
use crate::opcodes;
use crate::target_setup;
use farflash_backend::{IoCompletion, IoOp, IoRequest};
use farflash_core::{Begin, Completion, NvmeQueue, Target, Xfer};
use farflash_wire::fabrics::{ConnectCmd, ConnectData, PropertyCmd, CNTLID_DYNAMIC};
use farflash_wire::opcode::{admin, fctype};
use farflash_wire::sqe::PSDT_SGL;
use farflash_wire::{props, Sqe, Status};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The stand-in binding's view of one queue.
struct Q {
    q: NvmeQueue,
    /// Commands with a slot, not completed: slot -> (CID, opcode, transfer).
    open: HashMap<u16, (u16, u8, Xfer)>,
    /// Runnable commands waiting for their data, oldest first.
    ready: VecDeque<u16>,
    /// Storage requests taken and not completed (tag, operation, buffer).
    held: Vec<IoRequest>,
    scratch: Vec<Completion>,
}

impl Q {
    fn new(t: &Arc<Target>) -> Q {
        let a = "127.0.0.1:4420".parse().expect("address");
        let p = "127.0.0.1:50000".parse().expect("address");
        Q {
            q: NvmeQueue::new(t.clone(), a, p, farflash_wire::discovery::TRTYPE_TCP),
            open: HashMap::new(),
            ready: VecDeque::new(),
            held: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Takes the emitted storage requests and checks every completion.
    fn settle(&mut self) {
        let held = &mut self.held;
        self.q.take_storage(|_, req| held.push(req));
        self.q.take_completions(&mut self.scratch);
        for c in self.scratch.drain(..) {
            let Some(slot) = c.slot else {
                assert!(c.data.is_none(), "data for a command without a slot");
                continue;
            };
            let Some((cid, _, xfer)) = self.open.remove(&slot) else {
                panic!("completion for slot {slot} that holds no command: {c:?}");
            };
            assert_eq!(c.cid, cid, "slot {slot} completed under another CID");
            if let Some((buf, len)) = &c.data {
                assert!(
                    c.status.is_success(),
                    "reply data with status {:?}",
                    c.status
                );
                assert!(*len <= xfer.len(), "{len} bytes of data for {xfer:?}");
                assert!(*len as usize <= buf.capacity());
            }
            self.ready.retain(|&s| s != slot);
        }
        assert_eq!(
            self.q.in_flight(),
            self.held.len(),
            "storage requests in flight are the ones emitted and not completed"
        );
    }

    fn begin(&mut self, sqe: Sqe) -> Begin {
        if self.q.qid() == 0 {
            // A parked AER whose CID comes again is retired without a
            // completion (the host gave it up).
            let ready = &self.ready;
            self.open.retain(|slot, &mut (cid, opcode, _)| {
                !(cid == sqe.cid && opcode == admin::ASYNC_EVENT_REQUEST && !ready.contains(slot))
            });
        }
        let b = self.q.begin(sqe);
        match b {
            Begin::Ready { slot, xfer } => {
                assert!(
                    self.open
                        .insert(slot, (sqe.cid, sqe.opcode, xfer))
                        .is_none(),
                    "slot {slot} given out twice"
                );
                self.ready.push_back(slot);
            }
            Begin::Answered => {
                let mut now = Vec::new();
                self.q.take_completions(&mut now);
                let open = &self.open;
                let mine = now.iter().position(|c| {
                    c.cid == sqe.cid && c.slot.is_none_or(|s| !open.contains_key(&s))
                });
                let Some(i) = mine else {
                    panic!("an answered command has no completion: {now:?}");
                };
                let c = now.remove(i);
                assert!(c.data.is_none(), "data for a command refused at arrival");
                assert!(!c.status.is_success(), "answered at arrival with success");
                self.scratch.append(&mut now);
            }
            Begin::Overrun | Begin::Deleted => {}
        }
        self.settle();
        b
    }

    /// Runs the oldest runnable command with `data` as its host data.
    fn run_next(&mut self, data: &[u8]) {
        let Some(slot) = self.ready.pop_front() else {
            return;
        };
        if let Some(&(_, _, Xfer::H2C(_))) = self.open.get(&slot) {
            let buf = self.q.data_buf(slot);
            let n = buf.len().min(data.len());
            buf[..n].copy_from_slice(&data[..n]);
        }
        self.q.execute(slot);
        self.settle();
    }

    fn complete(&mut self, pos: usize, errno: Option<i32>) {
        if self.held.is_empty() {
            return;
        }
        let IoRequest { tag, op, mut buf } = self.held.remove(pos % self.held.len());
        let result = match errno {
            Some(e) => Err(std::io::Error::from_raw_os_error(e)),
            None => {
                if let IoOp::Read { len, .. } = op {
                    buf.set_len(len as usize);
                }
                Ok(())
            }
        };
        self.q
            .on_storage_completion(IoCompletion { tag, buf, result });
        self.settle();
    }

    /// Runs everything runnable and completes every request.
    fn drain(&mut self) {
        while !self.ready.is_empty() {
            self.run_next(&[]);
        }
        while !self.held.is_empty() {
            self.complete(0, None);
        }
    }
}

fn connect(q: &mut Q, qid: u16, cntlid: u16, depth: u32) -> Option<u16> {
    let cmd = ConnectCmd {
        recfmt: 0,
        qid,
        sqsize: depth.clamp(2, 16) as u16 - 1,
        cattr: 0,
        kato: 0,
    };
    let d = ConnectData {
        hostid: HOSTID,
        cntlid,
        subnqn: SUBNQN.into(),
        hostnqn: HOSTNQN.into(),
    };
    let mut data = [0u8; 1024];
    d.encode(&mut data);
    let Begin::Ready { slot, .. } = q.begin(cmd.to_sqe(0xFFF0)) else {
        return None;
    };
    q.ready.retain(|&s| s != slot);
    q.q.data_buf(slot).copy_from_slice(&data);
    let mut out = Vec::new();
    q.q.execute(slot);
    q.q.take_completions(&mut out);
    q.open.remove(&slot);
    let c = out.pop()?;
    c.status.is_success().then_some(c.result as u16)
}

/// A fuzzed SQE made likely to run: SGL data pointer, a known opcode, a
/// namespace that exists, a transfer within the limits.
fn sqe(inp: &mut Input, io: bool, block_size: u32) -> Sqe {
    let mut raw: [u8; 64] = inp.array();
    let fix = inp.u8();
    if fix & 1 != 0 {
        let list: &[u8] = if io { &opcodes::IO } else { &opcodes::ADMIN };
        raw[0] = list[raw[0] as usize % list.len()];
    }
    let mut s = Sqe::decode(&raw);
    if fix & 2 != 0 {
        // Bit 5 keeps the FUSE bits (fused Compare and Write halves).
        s.flags = PSDT_SGL | if fix & 32 != 0 { raw[1] & 0x03 } else { 0 };
    }
    if fix & 4 != 0 {
        s.nsid = 1;
    }
    if fix & 8 != 0 {
        s.cdw12 &= 0x7;
        s.cdw10 &= 0xFF;
        s.cdw11 = 0;
    }
    if fix & 16 != 0 {
        let len = (s.cdw12 & 0xFFFF) + 1;
        s.dptr.length = len * block_size;
    }
    if s.opcode == admin::FABRICS && fix & 32 != 0 {
        s.cdw10 = s.cdw10 & !0xFF | fctype::PROPERTY_GET as u32;
    }
    s
}

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let (sel, ns) = (inp.u8(), inp.u8());
    let (t, shape) = target_setup::build_with(sel, ns, ns & 8 != 0);
    let mut a = Q::new(&t);
    let Some(cntlid) = connect(&mut a, 0, CNTLID_DYNAMIC, 16) else {
        panic!("admin Connect refused");
    };
    let en = PropertyCmd {
        size8: false,
        offset: props::CC,
        value: props::cc::ENABLE_DEFAULT as u64,
    }
    .to_sqe(0xFFF1, fctype::PROPERTY_SET);
    if let Begin::Ready { .. } = a.begin(en) {
        a.run_next(&[]);
    }
    let mut io = Q::new(&t);
    assert!(
        connect(&mut io, 1, cntlid, shape.max_queue_depth).is_some(),
        "I/O Connect refused"
    );
    let mut now = Instant::now();
    let mut steps = 0;
    while !inp.is_empty() && steps < 2000 {
        steps += 1;
        let op = inp.u8();
        let q = if op & 0x80 != 0 { &mut a } else { &mut io };
        match op & 0x7 {
            0 => {
                let s = sqe(&mut inp, q.q.qid() != 0, shape.block_size);
                q.begin(s);
            }
            1 => {
                let n = inp.u16() as usize % 9000;
                let d = inp.take(n);
                q.run_next(d);
            }
            2 => {
                if let Some(slot) = q.ready.pop_front() {
                    let st = Status::new(inp.u8() & 7, inp.u8());
                    q.q.fail(slot, st);
                    q.settle();
                }
            }
            3 => {
                let pos = inp.u8() as usize;
                q.complete(pos, None);
            }
            4 => {
                let pos = inp.u8() as usize;
                let e =
                    [libc::EIO, libc::ENOSPC, libc::EINVAL, libc::ENODEV][inp.u8() as usize % 4];
                q.complete(pos, Some(e));
            }
            5 => {
                now += Duration::from_millis(inp.u16() as u64);
                q.q.tick(now);
                q.settle();
            }
            6 => {
                now += Duration::from_millis(inp.u8() as u64);
                q.q.set_now(now);
                q.q.resume_throttled();
                q.settle();
            }
            _ => {}
        }
    }
    // A fused first half waits for its second (Base §3.4.2, as SPDK): the
    // next command on its queue answers it with Missing Fused Command (sent
    // once the queue has run what it could, so it finds a free slot).
    io.drain();
    let cid = (0..=u16::MAX)
        .rev()
        .find(|c| io.open.values().all(|&(o, _, _)| o != *c))
        .unwrap_or(0);
    io.begin(Sqe {
        opcode: farflash_wire::opcode::io::FLUSH,
        flags: PSDT_SGL,
        cid,
        nsid: 1,
        ..Sqe::default()
    });
    for q in [&mut io, &mut a] {
        q.drain();
        // Commands waiting for QoS tokens get them as time passes.
        let mut rounds = 0;
        while let Some(w) = q.q.throttle_wake() {
            rounds += 1;
            assert!(rounds < 100_000, "throttled commands never resume");
            now = now.max(w) + Duration::from_millis(1);
            q.q.set_now(now);
            q.q.resume_throttled();
            q.settle();
            q.drain();
        }
        assert_eq!(q.q.in_flight(), 0, "storage left in flight");
    }
    assert!(
        io.open.is_empty(),
        "I/O commands never completed: {:?}",
        io.open
    );
    // Only AERs wait (for an event), on the admin queue.
    assert!(
        a.open
            .values()
            .all(|&(_, opcode, _)| opcode == admin::ASYNC_EVENT_REQUEST),
        "admin commands never completed: {:?}",
        a.open
    );
}
