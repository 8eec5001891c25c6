//! Host-to-controller PDU builders for the target harness, with the
//! digests a real host would compute (and an optional corrupted one).

use farflash_wire::fabrics::{ConnectCmd, ConnectData, PropertyCmd, CNTLID_DYNAMIC};
use farflash_wire::opcode::fctype;
use farflash_wire::pdu::{
    flags, seal_header, write_header, DataHeader, IcReq, PduType, DGST_DDGST, DGST_HDGST,
    DIGEST_LEN, IC_HLEN,
};
use farflash_wire::sqe::SQE_SIZE;
use farflash_wire::{digest, props, Sqe};

/// The NQNs the fuzz target exports and the host it claims to be.
pub const SUBNQN: &str = "nqn.2026-11.io.farflash:default";
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000f0220";
pub const HOSTID: [u8; 16] = *b"farflash-fuzzing";

/// Digest settings of one connection.
#[derive(Clone, Copy, Debug, Default)]
pub struct Digests {
    pub hd: bool,
    pub dd: bool,
}

pub fn icreq(hpda: u8, d: Digests) -> Vec<u8> {
    let mut b = [0u8; IC_HLEN];
    IcReq {
        pfv: 0,
        hpda,
        dgst: if d.hd { DGST_HDGST } else { 0 } | if d.dd { DGST_DDGST } else { 0 },
        maxr2t: 0,
    }
    .encode(&mut b);
    b.to_vec()
}

/// A CapsuleCmd carrying `icd` in-capsule; `bad_ddgst` flips the data digest.
pub fn capsule(sqe: &Sqe, icd: &[u8], d: Digests, bad_ddgst: bool) -> Vec<u8> {
    let mut b = vec![0u8; 72 + DIGEST_LEN + icd.len() + DIGEST_LEN];
    let (pdo, plen) = write_header(&mut b, PduType::CapsuleCmd, 0, d.hd, d.dd, icd.len());
    let mut raw = [0u8; SQE_SIZE];
    sqe.encode(&mut raw);
    b[8..72].copy_from_slice(&raw);
    seal_header(&mut b, PduType::CapsuleCmd, d.hd);
    if !icd.is_empty() {
        b[pdo..pdo + icd.len()].copy_from_slice(icd);
        if d.dd {
            add_ddgst(&mut b[pdo..], icd.len(), bad_ddgst);
        }
    }
    b.truncate(plen);
    b
}

/// One H2CData PDU (TCP §3.6.2.8) for an R2T.
pub fn h2c_data(h: &DataHeader, data: &[u8], last: bool, d: Digests, bad: bool) -> Vec<u8> {
    let mut b = vec![0u8; 24 + DIGEST_LEN + data.len() + DIGEST_LEN];
    let fl = if last { flags::DATA_LAST } else { 0 };
    let (pdo, plen) = h.encode(&mut b, PduType::H2CData, fl, d.hd, d.dd, data.len());
    b[pdo..pdo + data.len()].copy_from_slice(data);
    if d.dd && !data.is_empty() {
        add_ddgst(&mut b[pdo..], data.len(), bad);
    }
    b.truncate(plen);
    b
}

fn add_ddgst(b: &mut [u8], n: usize, bad: bool) {
    let mut crc = digest::crc32c(&b[..n]);
    if bad {
        crc ^= 1;
    }
    b[n..n + DIGEST_LEN].copy_from_slice(&crc.to_le_bytes());
}

/// A Connect capsule for `qid` joining `cntlid` (FFFFh: a new controller),
/// with connection attributes `cattr` (bit 2: SQ flow control disabled).
pub fn connect(qid: u16, cntlid: u16, sqsize: u16, cid: u16, d: Digests, cattr: u8) -> Vec<u8> {
    let c = ConnectCmd {
        recfmt: 0,
        qid,
        sqsize,
        cattr,
        kato: if qid == 0 { 30_000 } else { 0 },
    };
    let data = ConnectData {
        hostid: HOSTID,
        cntlid,
        subnqn: SUBNQN.into(),
        hostnqn: HOSTNQN.into(),
    };
    let mut raw = [0u8; 1024];
    data.encode(&mut raw);
    capsule(&c.to_sqe(cid), &raw, d, false)
}

pub fn admin_connect(cid: u16, d: Digests, cattr: u8) -> Vec<u8> {
    connect(0, CNTLID_DYNAMIC, 31, cid, d, cattr)
}

/// Property Set CC = `cc` (CC.EN with the default entry sizes to enable).
pub fn set_cc(cc: u32, cid: u16, d: Digests) -> Vec<u8> {
    let p = PropertyCmd {
        size8: false,
        offset: props::CC,
        value: cc as u64,
    };
    capsule(&p.to_sqe(cid, fctype::PROPERTY_SET), &[], d, false)
}
