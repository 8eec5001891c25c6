//! `auth_exchange`: DH-HMAC-CHAP between `farflash_auth::HostAuth` and
//! `CtrlAuth` with the fuzzer in the middle, plus the wire decoders and the
//! secret parser on raw bytes.
//!
//! Input: `[cfg][seed: 8]` then operations `[op][len][len bytes]`:
//! 0 host starts (negotiate, T_ID from op and len), 1 host's pending message
//! (if any) to the controller, 2 controller's next message fetched, 3 that message to
//! the host, 4 raw bytes to the controller, 5 raw bytes to the host,
//! 6 controller transaction timeout, 7 decoders and `Secret::parse` on the
//! bytes. For 1 and 3, the bytes mutate the message in flight: byte 0 is an
//! offset, the rest is XORed in from there; op bit 7 also cuts the message
//! at the offset. `cfg` picks hash, group (null or ffdhe2048, to keep runs
//! fast) and bidirectional. The controller takes messages through
//! `send_deferred`: a DH job it hands out runs at once unless the op has bit
//! 6 set; then it is held, and delivered (`computed`) before the next op
//! without bit 6, so that messages, fetches and timeouts land while the
//! controller computes, and results may come back stale.
//!
//! Checked: nothing panics; a decoded message re-encodes to one that decodes
//! equal; a parsed secret formats back to itself; a failed controller is
//! unauthenticated and an authenticated event leaves it authenticated.

use crate::input::Input;
use farflash_auth::{
    CtrlAuth, CtrlConfig, CtrlEvent, DhGroup, DhJob, HashId, HostAuth, HostConfig, HostStep,
    Random, Secret, Sent,
};
use farflash_wire::auth::Message;

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000aa";
const SUBSYS: &str = "nqn.2026-01.io.farflash:fuzz";

struct FuzzRng(u64);

impl Random for FuzzRng {
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *b = (self.0 >> 33) as u8;
        }
    }
}

fn mutate(msg: &[u8], op: u8, bytes: &[u8]) -> Vec<u8> {
    let mut m = msg.to_vec();
    if let Some((&off, xor)) = bytes.split_first() {
        let off = off as usize;
        for (i, x) in xor.iter().enumerate() {
            if let Some(b) = m.get_mut(off + i) {
                *b ^= x;
            }
        }
        if op & 0x80 != 0 {
            m.truncate(off);
        }
    }
    m
}

fn decoders(bytes: &[u8]) {
    if let Ok(m) = Message::decode(bytes) {
        let mut m = m;
        if let Message::Negotiate(n) = &mut m {
            n.napd = 1; // encode writes one descriptor
        }
        assert_eq!(Message::decode(&m.encode()).as_ref(), Ok(&m), "re-encode");
    }
    if let Ok(s) = std::str::from_utf8(bytes) {
        if let Ok(k) = Secret::parse(s) {
            assert_eq!(Secret::parse(&k.to_dhhc()), Ok(k), "secret round trip");
        }
    }
}

fn ctrl_event(c: &CtrlAuth, ev: CtrlEvent) {
    match ev {
        CtrlEvent::Failed(_) => assert!(!c.authenticated()),
        CtrlEvent::Authenticated => assert!(c.authenticated()),
        CtrlEvent::Continue => {}
    }
}

/// A message to the controller; a DH job runs now or waits in `held`.
fn ctrl_send(c: &mut CtrlAuth, m: &[u8], rng: &mut FuzzRng, hold: bool, held: &mut Vec<DhJob>) {
    match c.send_deferred(m, rng) {
        Sent::Event(ev) => ctrl_event(c, ev),
        Sent::Compute(job) => {
            assert!(c.computing());
            if hold {
                held.push(job);
            } else if let Some(ev) = c.computed(job.run()) {
                ctrl_event(c, ev);
            }
        }
    }
}

pub fn run(data: &[u8]) {
    exchange(data);
}

/// Runs one input; whether the controller ends authenticated.
fn exchange(data: &[u8]) -> bool {
    let mut inp = Input::new(data);
    let cfg = inp.u8();
    let mut rng = FuzzRng(u64::from_le_bytes(inp.array()));
    let key = |fill: u8, h| Secret::new(&[fill; 32], h).unwrap_or_else(|_| unreachable!());
    let hs = key(1, HashId::from_id(cfg & 3));
    let cs = key(2, HashId::from_id((cfg >> 2) & 3));
    let bidi = cfg & 0x10 != 0;
    let host_cfg = HostConfig::new(HOST, SUBSYS, hs.clone(), bidi.then(|| cs.clone()));
    let mut ctrl = CtrlAuth::new(CtrlConfig {
        subsys_nqn: SUBSYS.into(),
        host_nqn: HOST.into(),
        host_secret: hs,
        ctrl_secret: Some(cs),
        hashes: vec![HashId::ALL[(cfg as usize >> 5) % 3]],
        groups: vec![if cfg & 0x80 != 0 {
            DhGroup::Ffdhe2048
        } else {
            DhGroup::Null
        }],
    });
    let mut host = HostAuth::new(host_cfg.clone(), 1);
    let (mut to_ctrl, mut to_host): (Vec<u8>, Vec<u8>) = (Vec::new(), Vec::new());
    let mut held: Vec<DhJob> = Vec::new();
    for _ in 0..48 {
        if inp.is_empty() {
            break;
        }
        let op = inp.u8();
        let len = inp.u8() as usize;
        let bytes = inp.take(len);
        let hold = op & 0x40 != 0;
        if !hold {
            for job in held.drain(..) {
                // Stale results (expired, failed meanwhile) are dropped.
                if let Some(ev) = ctrl.computed(job.run()) {
                    ctrl_event(&ctrl, ev);
                }
            }
        }
        match op & 7 {
            0 => {
                host = HostAuth::new(host_cfg.clone(), u16::from_le_bytes([len as u8, op]));
                to_ctrl = host.negotiate().encode();
            }
            1 if to_ctrl.is_empty() => {}
            1 => {
                let m = mutate(&to_ctrl, op, bytes);
                ctrl_send(&mut ctrl, &m, &mut rng, hold, &mut held);
            }
            2 => to_host = ctrl.receive().map(|m| m.encode()).unwrap_or_default(),
            3 => {
                let m = mutate(&to_host, op, bytes);
                match host.receive(&m, &mut rng) {
                    HostStep::Send(m) | HostStep::Done(Some(m)) => to_ctrl = m.encode(),
                    HostStep::Failed { send: Some(m), .. } => to_ctrl = m.encode(),
                    _ => to_ctrl.clear(),
                }
            }
            4 => ctrl_send(&mut ctrl, bytes, &mut rng, hold, &mut held),
            5 => {
                let _ = host.receive(bytes, &mut rng);
            }
            6 => ctrl.expire(),
            _ => decoders(bytes),
        }
    }
    ctrl.authenticated()
}

#[cfg(test)]
mod tests {
    /// The honest seeds reach the end, so the fuzzer starts deep.
    #[test]
    fn honest_seeds_authenticate() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/auth_exchange");
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let data = std::fs::read(e.path()).unwrap();
            assert_eq!(super::exchange(&data), name.starts_with("honest"), "{name}");
            n += 1;
        }
        assert!(n >= 5);
    }
}
