//! The corpus of host behaviours. Each behaviour opens its own
//! connection(s), does something a host may do, and writes down what the
//! target answered (see client.rs for the normalization). Behaviours that
//! write data use their own 128-block LBA range (`Ctx::base`), so that one
//! behaviour's writes never show up in another's reads.

use super::client::{get32, get64, Data, Framing, Ic, ANSWER};
use super::ctx::*;
use std::time::{Duration, Instant};

pub type Run = Box<dyn Fn(&mut Ctx)>;

pub struct Behaviour {
    pub name: String,
    pub cat: &'static str,
    pub run: Run,
}

/// Categories, in corpus order (docs/interop.md's table follows them).
pub const CATEGORIES: &[&str] = &[
    "icreq", "pdu", "connect", "property", "identify", "log", "features", "admin", "aer-kato",
    "io", "ordering", "seed",
];

struct B(Vec<Behaviour>);

impl B {
    fn add(&mut self, cat: &'static str, name: impl Into<String>, f: impl Fn(&mut Ctx) + 'static) {
        self.0.push(Behaviour {
            name: format!("{cat}/{}", name.into()),
            cat,
            run: Box::new(f),
        });
    }
}

/// Summaries of controller data: only the fields both targets must agree
/// on (the rest is the implementation's: SN, MN, FR, IEEE, CNTLID, VER,
/// MDTS, OACS, limits, NN, SUBNQN, ...).
fn id_ctrl_summary(d: &[u8]) -> String {
    if d.len() < 4096 {
        return format!("short {}", d.len());
    }
    format!(
        "cntrltype={} sqes={:#x} cqes={:#x} sgls.supported={} iorcsz={} icdoff={} fcatt={} msdbd={}",
        d[111],
        d[512],
        d[513],
        get32(d, 536) & 3 != 0,
        get32(d, 1796),
        u16::from_le_bytes([d[1800], d[1801]]),
        d[1802],
        d[1803]
    )
}

fn id_ns_summary(d: &[u8]) -> String {
    if d.len() < 4096 {
        return format!("short {}", d.len());
    }
    let fmt = (d[26] & 0xF) as usize;
    format!(
        "nsze={} ncap={} flbas.fmt={} lbads={}",
        get64(d, 0),
        get64(d, 8),
        fmt,
        d[128 + 4 * fmt + 2]
    )
}

/// Namespace Identification Descriptor list: whether a unique ID is there
/// and the CSI descriptor's value (the ID values are each target's own).
fn ns_desc_summary(d: &[u8]) -> String {
    let mut o = 0;
    let (mut uid, mut csi) = (false, None);
    while o + 4 <= d.len() && d[o] != 0 {
        let (t, l) = (d[o], d[o + 1] as usize);
        match t {
            1..=3 => uid = true,
            4 if o + 4 < d.len() => csi = Some(d[o + 4]),
            _ => {}
        }
        o += 4 + l;
    }
    format!("unique_id={uid} csi={csi:?}")
}

fn ns_list_summary(d: &[u8]) -> String {
    let ids: Vec<u32> = d
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
        .take_while(|&v| v != 0)
        .collect();
    format!("nsids={ids:?}")
}

fn ic(hpda: u8, dgst: u8) -> Ic {
    Ic {
        hpda,
        dgst,
        ..Ic::default()
    }
}

pub fn corpus() -> Vec<Behaviour> {
    let mut b = B(Vec::new());
    icreq(&mut b);
    pdu(&mut b);
    connect(&mut b);
    property(&mut b);
    identify_cns(&mut b);
    log_pages(&mut b);
    features(&mut b);
    admin(&mut b);
    aer_kato(&mut b);
    io(&mut b);
    ordering(&mut b);
    b.0
}

// ---------------------------------------------------------------- icreq

fn icreq(b: &mut B) {
    // HPDA 0..31 (TCP 1.0 §3.6.2.2: 0's based dwords, 0 to 31): then a
    // 4 KiB Identify whose C2HData PDO must honour it.
    for hpda in 0..32u8 {
        b.add("icreq", format!("hpda-{hpda}"), move |x| {
            let mut c = x.admin_ic(ic(hpda, 0));
            x.exec(&mut c, "identify ctrl", identify(1, 0), Data::None);
        });
    }
    for dgst in 0..4u8 {
        b.add("icreq", format!("digests-{dgst}"), move |x| {
            let mut a = x.admin_ic(ic(0, dgst));
            let mut q = x.io_ic(&a, ic(0, dgst));
            x.write(&mut q, "write 4k incapsule", x.base, 8, 1);
            x.write(&mut q, "write 32k r2t", x.base + 8, 64, 2);
            x.read(&mut q, "read 36k", x.base, 72);
            x.exec(&mut a, "identify ns", identify(0, 1), Data::None);
        });
    }
    for maxr2t in [0u32, 1, 3, 0xFFFF_FFFF] {
        b.add("icreq", format!("maxr2t-{maxr2t:x}"), move |x| {
            let a = x.admin();
            let mut q = x.io_ic(
                &a,
                Ic {
                    maxr2t,
                    ..Ic::default()
                },
            );
            x.write(&mut q, "write 64k r2t", x.base, 128, 3);
            x.read(&mut q, "read 64k", x.base, 128);
        });
    }
    b.add("icreq", "pfv-1", |x| {
        let mut c = x.open(Ic {
            pfv: 1,
            ..Ic::default()
        });
        x.expect_close(&mut c, "after icresp", ANSWER);
    });
    b.add("icreq", "reserved-bytes-set", |x| {
        let mut c = x.admin_ic(Ic {
            reserved: true,
            ..Ic::default()
        });
        x.exec(&mut c, "identify ctrl", identify(1, 0), Data::None);
    });
    b.add("icreq", "ch-flags-reserved-set", |x| {
        let mut c = x.admin_ic(Ic {
            ch_flags: 0xF0,
            ..Ic::default()
        });
        x.exec(&mut c, "identify ctrl", identify(1, 0), Data::None);
    });
    b.add("icreq", "second-icreq", |x| {
        let mut c = x.open(Ic::default());
        let mut ir = [0u8; 128];
        ir[0] = 0;
        ir[2] = 128;
        ir[4] = 128;
        c.raw(&ir);
        x.expect_close(&mut c, "after second icreq", ANSWER);
    });
    b.add("icreq", "capsule-before-icreq", |x| {
        let mut c = super::client::Conn::open_raw(&x.addr, &x.t);
        let caps = c.capsule(&identify(1, 0).cid(1).0, &[], Framing::default());
        c.raw(&caps);
        x.expect_close(&mut c, "capsule first", ANSWER);
    });
    b.add("icreq", "h2ctermreq-from-host", |x| {
        let mut c = x.admin();
        let mut t = [0u8; 24];
        t[0] = 0x02;
        t[2] = 24;
        t[4] = 24;
        t[8] = 1; // FES: invalid header field
        c.raw(&t);
        x.expect_close(&mut c, "after h2ctermreq", ANSWER);
    });
}

// ---------------------------------------------------------------- pdu

fn pdu(b: &mut B) {
    // Issue 29, case 1: a no-data capsule with PDO = HLEN.
    b.add("pdu", "no-data-capsule-pdo-72", |x| {
        let mut c = x.admin();
        let cid = c.cid();
        let f = Framing {
            pdo: Some(72),
            ..Framing::default()
        };
        c.send(&prop_get(P_CSTS, false).cid(cid).0, &Data::None, f);
        if let Some(r) = c.wait(cid) {
            x.log_cpl("property get csts", &r, u32::MAX);
        }
        x.still_serving(&mut c, "afterwards");
    });
    b.add("pdu", "no-data-capsule-pdo-72-identify", |x| {
        let mut c = x.admin();
        let cid = c.cid();
        let f = Framing {
            pdo: Some(72),
            ..Framing::default()
        };
        c.send(&identify(1, 0).cid(cid).0, &Data::None, f);
        if let Some(r) = c.wait(cid) {
            x.log_cpl("identify", &r, u32::MAX);
        }
    });
    b.add("pdu", "capsule-flags-reserved-bits", |x| {
        let mut c = x.admin();
        let cid = c.cid();
        let f = Framing {
            flags: 0xF0,
            ..Framing::default()
        };
        c.send(&prop_get(P_VS, false).cid(cid).0, &Data::None, f);
        if let Some(r) = c.wait(cid) {
            x.log_cpl("property get vs", &r, 0);
        }
    });
    b.add("pdu", "capsule-hdgstf-not-negotiated", |x| {
        let mut c = x.admin();
        let cid = c.cid();
        let mut caps = c.capsule(&prop_get(P_VS, false).cid(cid).0, &[], Framing::default());
        caps[1] |= 0x01;
        c.raw(&caps);
        if let Some(r) = c.wait(cid) {
            x.log_cpl("property get vs", &r, 0);
        }
    });
    b.add("pdu", "capsule-ddgstf-no-data", |x| {
        let mut c = x.admin();
        let cid = c.cid();
        let f = Framing {
            flags: 0x02,
            ..Framing::default()
        };
        c.send(&prop_get(P_VS, false).cid(cid).0, &Data::None, f);
        if let Some(r) = c.wait(cid) {
            x.log_cpl("property get vs", &r, 0);
        }
    });
    b.add("pdu", "incapsule-data-padded-pdo", |x| {
        let (_a, mut q) = x.pair();
        let cid = q.cid();
        let d = pattern(512, 9);
        let s = rw(0x01, 1, x.base, 0, 512).sgl_incap(0, 512).cid(cid);
        let f = Framing {
            pad: 56,
            ..Framing::default()
        };
        q.send(&s.0, &Data::InCapsule(d), f);
        if let Some(r) = q.wait(cid) {
            x.log_cpl("write", &r, u32::MAX);
        }
        x.read(&mut q, "read back", x.base, 1);
    });
    b.add("pdu", "unknown-pdu-type-0x0b", |x| {
        let mut c = x.admin();
        let mut p = [0u8; 24];
        p[0] = 0x0B;
        p[2] = 24;
        p[4] = 24;
        c.raw(&p);
        x.expect_close(&mut c, "after type 0x0b", ANSWER);
    });
    b.add("pdu", "host-sends-capsuleresp", |x| {
        let mut c = x.admin();
        let mut p = [0u8; 24];
        p[0] = 0x05;
        p[2] = 24;
        p[4] = 24;
        c.raw(&p);
        x.expect_close(&mut c, "after capsuleresp", ANSWER);
    });
    b.add("pdu", "h2cdata-unknown-ttag", |x| {
        let (_a, mut q) = x.pair();
        q.h2c(0x55, 0x1234, 0, &[0u8; 512], true);
        x.expect_close(&mut q, "after stray h2cdata", ANSWER);
    });
    // H2CData in pieces smaller than the R2T, in order.
    b.add("pdu", "h2cdata-small-pieces", |x| {
        let (_a, mut q) = x.pair();
        let cid = q.cid();
        let d = pattern(32768, 11);
        q.maxh2c = 2048;
        q.send(
            &rw(0x01, 1, x.base, 63, 32768).cid(cid).0,
            &Data::R2t(d),
            Framing::default(),
        );
        if let Some(r) = q.wait(cid) {
            x.log_cpl("write 32k in 2k h2cdata", &r, u32::MAX);
        }
        x.read(&mut q, "read back", x.base, 64);
    });
    // The second piece first (DATAO out of order).
    b.add("pdu", "h2cdata-out-of-order", |x| {
        let (_a, mut q) = x.pair();
        let cid = q.cid();
        q.send(
            &rw(0x01, 1, x.base, 63, 32768).cid(cid).0,
            &Data::None,
            Framing::default(),
        );
        match q.next_r2t(ANSWER) {
            Some((ttag, off, len)) => {
                x.log(format!("r2t off={off} len={len}"));
                let d = pattern(32768, 12);
                q.h2c(cid, ttag, 16384, &d[16384..], true);
                q.h2c(cid, ttag, 0, &d[..16384], false);
                if let Some(r) = q.wait(cid) {
                    x.log_cpl("write", &r, u32::MAX);
                }
            }
            None => x.log("no r2t"),
        }
    });
    b.add("pdu", "h2cdata-beyond-r2t", |x| {
        let (_a, mut q) = x.pair();
        let cid = q.cid();
        q.send(
            &rw(0x01, 1, x.base, 63, 32768).cid(cid).0,
            &Data::None,
            Framing::default(),
        );
        match q.next_r2t(ANSWER) {
            Some((ttag, _, _)) => {
                q.h2c(cid, ttag, 0, &[7u8; 33280], true);
                if let Some(r) = q.wait(cid) {
                    x.log_cpl("write", &r, u32::MAX);
                }
            }
            None => x.log("no r2t"),
        }
    });
    b.add("pdu", "h2cdata-without-last", |x| {
        let (_a, mut q) = x.pair();
        let cid = q.cid();
        q.send(
            &rw(0x01, 1, x.base, 63, 32768).cid(cid).0,
            &Data::None,
            Framing::default(),
        );
        match q.next_r2t(ANSWER) {
            Some((ttag, _, _)) => {
                q.h2c(cid, ttag, 0, &[7u8; 32768], false);
                if let Some(r) = q.wait(cid) {
                    x.log_cpl("write", &r, u32::MAX);
                }
            }
            None => x.log("no r2t"),
        }
    });
    b.add("pdu", "incapsule-larger-than-sgl", |x| {
        let (_a, mut q) = x.pair();
        let s = rw(0x01, 1, x.base, 0, 512).sgl_incap(0, 512);
        x.exec(
            &mut q,
            "write 512 with 1024 in capsule",
            s,
            Data::InCapsule(vec![3u8; 1024]),
        );
    });
    b.add("pdu", "incapsule-shorter-than-sgl", |x| {
        let (_a, mut q) = x.pair();
        let s = rw(0x01, 1, x.base, 1, 1024).sgl_incap(0, 1024);
        x.exec(
            &mut q,
            "write 1024 with 512 in capsule",
            s,
            Data::InCapsule(vec![3u8; 512]),
        );
    });
}

// ---------------------------------------------------------------- connect

fn connect(b: &mut B) {
    type Tweak = fn(&mut ConnectArgs);
    let admin_cases: &[(&str, Tweak)] = &[
        ("admin-default", |_| {}),
        ("admin-kato-0", |a| a.kato = 0),
        ("admin-kato-1", |a| a.kato = 1),
        ("admin-kato-max", |a| a.kato = u32::MAX),
        ("admin-sqsize-0", |a| a.sqsize = 0),
        ("admin-sqsize-1", |a| a.sqsize = 1),
        ("admin-sqsize-127", |a| a.sqsize = 127),
        ("admin-sqsize-ffff", |a| a.sqsize = 0xFFFF),
        ("admin-cattr-sqfc-off", |a| a.cattr = 0x04),
        ("admin-cattr-priority-bits", |a| a.cattr = 0x03),
        ("admin-cattr-reserved", |a| a.cattr = 0xF8),
        ("admin-recfmt-1", |a| a.sqe = a.sqe.byte(40, 1)),
        ("admin-sqe-reserved-dwords", |a| {
            a.sqe = a
                .sqe
                .dw(13, 0xA5A5_A5A5)
                .dw(14, 0x5A5A_5A5A)
                .dw(15, 1)
                .byte(5, 0xEE)
        }),
        ("admin-sqe-cdw11-reserved-byte", |a| {
            a.sqe = a.sqe.byte(47, 0x80)
        }),
        ("admin-data-reserved", |a| {
            a.data[18..256].fill(0xA5);
            a.data[768..1024].fill(0x5A);
        }),
        ("admin-cntlid-0", |a| a.cntlid = 0),
        ("admin-cntlid-fffe", |a| a.cntlid = 0xFFFE),
        ("admin-unknown-subnqn", |a| {
            a.subnqn = "nqn.2014-08.io.example:nobody".into()
        }),
        ("admin-empty-hostnqn", |a| a.hostnqn.clear()),
        ("admin-hostid-zero", |a| a.hostid = [0; 16]),
        ("admin-data-via-r2t", |a| a.via_r2t = true),
        ("admin-fused-bits", |a| a.sqe = a.sqe.flags(0x41)),
        ("admin-psdt-00", |a| a.sqe = a.sqe.flags(0x00)),
    ];
    for &(name, tweak) in admin_cases {
        b.add("connect", name, move |x| {
            let mut c = x.open(Ic::default());
            let mut a = x.connect_args(0, 0xFFFF);
            tweak(&mut a);
            let ok = x
                .connect_with(&mut c, "connect", &a)
                .is_some_and(|r| r.ok());
            if ok {
                x.enable(&mut c, CC_ENABLE);
                x.exec(&mut c, "identify ctrl", identify(1, 0), Data::None);
            }
        });
    }
    b.add("connect", "admin-discovery-nqn", |x| {
        let mut c = x.open(Ic::default());
        let mut a = x.connect_args(0, 0xFFFF);
        a.subnqn = "nqn.2014-08.org.nvmexpress.discovery".into();
        if x.connect_with(&mut c, "connect", &a)
            .is_some_and(|r| r.ok())
        {
            x.enable(&mut c, CC_ENABLE);
            if let Some(r) = x.exec(
                &mut c,
                "discovery log 1k",
                get_log(0x70, 0, 1024),
                Data::None,
            ) {
                if r.data.len() >= 1024 {
                    let numrec = get64(&r.data, 8);
                    x.log(format!("numrec>0 {}", numrec > 0));
                }
            }
            x.exec(&mut c, "identify ctrl", identify(1, 0), Data::None);
        }
    });
    type IoTweak = fn(&mut ConnectArgs);
    let io_cases: &[(&str, IoTweak)] = &[
        ("io-default", |_| {}),
        ("io-qid-2", |a| a.qid = 2),
        ("io-qid-ffff", |a| a.qid = 0xFFFF),
        ("io-sqsize-0", |a| a.sqsize = 0),
        ("io-sqsize-ffff", |a| a.sqsize = 0xFFFF),
        ("io-kato-set", |a| a.kato = 5000),
        ("io-cattr-sqfc-off", |a| a.cattr = 0x04),
        ("io-wrong-cntlid", |a| a.cntlid ^= 0x40),
        ("io-cntlid-ffff", |a| a.cntlid = 0xFFFF),
        // Issue 29, case 3.
        ("io-other-hostid", |a| a.hostid[15] ^= 0xFF),
        ("io-other-hostnqn", |a| {
            a.hostnqn =
                "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000ff".into()
        }),
        ("io-unknown-subnqn", |a| {
            a.subnqn = "nqn.2014-08.io.example:nobody".into()
        }),
        ("io-data-reserved", |a| {
            a.data[18..256].fill(0xA5);
            a.data[768..1024].fill(0x5A);
        }),
    ];
    for &(name, tweak) in io_cases {
        b.add("connect", name, move |x| {
            let a0 = x.admin();
            let mut c = x.open(Ic::default());
            let mut a = x.connect_args(1, a0.cntlid);
            tweak(&mut a);
            let ok = x
                .connect_with(&mut c, "io connect", &a)
                .is_some_and(|r| r.ok());
            if ok {
                x.read(&mut c, "read", 0, 1);
            }
        });
    }
    b.add("connect", "io-before-enable", |x| {
        let mut a0 = x.open(Ic::default());
        x.connect(&mut a0, 0, 0xFFFF);
        let mut c = x.open(Ic::default());
        x.connect(&mut c, 1, a0.cntlid);
    });
    b.add("connect", "io-same-qid-twice", |x| {
        let a0 = x.admin();
        let _q = x.io(&a0);
        let mut c = x.open(Ic::default());
        x.connect(&mut c, 1, a0.cntlid);
    });
    b.add("connect", "connect-twice-same-queue", |x| {
        let mut c = x.admin();
        x.connect(&mut c, 0, 0xFFFF);
        x.still_serving(&mut c, "afterwards");
    });
    b.add("connect", "command-before-connect", |x| {
        let mut c = x.open(Ic::default());
        x.exec(
            &mut c,
            "identify before connect",
            identify(1, 0),
            Data::None,
        );
    });
    b.add("connect", "property-get-before-connect", |x| {
        let mut c = x.open(Ic::default());
        x.exec(
            &mut c,
            "property get before connect",
            prop_get(P_CAP, true),
            Data::None,
        );
    });
    b.add("connect", "admin-connect-on-io-after-io", |x| {
        let a0 = x.admin();
        let mut q = x.io(&a0);
        x.connect(&mut q, 0, 0xFFFF);
    });
    b.add("connect", "disconnect-io-queue", |x| {
        let (_a, mut q) = x.pair();
        x.exec(
            &mut q,
            "disconnect",
            S::new(FABRICS).byte(4, 0x08).dw(10, 0),
            Data::None,
        );
        x.expect_close(&mut q, "after disconnect", Duration::from_secs(4));
    });
    b.add("connect", "disconnect-admin-queue", |x| {
        let mut c = x.admin();
        x.exec(
            &mut c,
            "disconnect",
            S::new(FABRICS).byte(4, 0x08),
            Data::None,
        );
    });
    b.add("connect", "auth-send-unrequired", |x| {
        let mut c = x.admin();
        x.exec(
            &mut c,
            "auth send",
            S::new(FABRICS)
                .byte(4, 0x05)
                .dw(10, 0x0101_0000)
                .dw(11, 0)
                .sgl_incap(0, 0),
            Data::None,
        );
    });
    b.add("connect", "auth-receive-unrequired", |x| {
        let mut c = x.admin();
        x.exec(
            &mut c,
            "auth receive",
            S::new(FABRICS)
                .byte(4, 0x06)
                .dw(10, 0x0101_0000)
                .dw(11, 64)
                .sgl_transport(64),
            Data::None,
        );
    });
    b.add("connect", "unknown-fctype", |x| {
        let mut c = x.admin();
        x.exec(
            &mut c,
            "fctype 0x7e",
            S::new(FABRICS).byte(4, 0x7E),
            Data::None,
        );
    });
    b.add("connect", "fabrics-on-io-queue-property-get", |x| {
        let (_a, mut q) = x.pair();
        x.exec(
            &mut q,
            "property get on io",
            prop_get(P_CAP, true),
            Data::None,
        );
    });
}

// ---------------------------------------------------------------- property

fn property(b: &mut B) {
    // (name, offset, 8 bytes, mask of the value that must agree)
    let gets: &[(&str, u32, bool, u64)] = &[
        // CAP: only CSS.NCSS (bit 37) and DSTRD are fixed by the spec for a
        // Fabrics NVM controller; MQES, TO, MPS ranges etc. are its own.
        ("cap-8", P_CAP, true, 1 << 37 | 0xF << 32),
        ("cap-4", P_CAP, false, 0),
        ("cap-hi-4", P_CAP + 4, false, 0),
        ("vs-4", P_VS, false, 0),
        ("vs-8", P_VS, true, 0),
        ("cc-4", P_CC, false, u64::MAX),
        ("cc-8", P_CC, true, 0),
        ("csts-4", P_CSTS, false, u64::MAX),
        ("csts-8", P_CSTS, true, 0),
        ("nssr-4", P_NSSR, false, 0),
        ("intms-0c", 0x0C, false, 0),
        ("aqa-24", 0x24, false, 0),
        ("asq-28", 0x28, true, 0),
        ("cmbloc-38", 0x38, false, 0),
        ("reserved-40", 0x40, false, 0),
        ("doorbell-1000", 0x1000, false, 0),
        ("offset-ffffffff", 0xFFFF_FFFF, false, 0),
        ("unaligned-0x15", 0x15, false, 0),
        ("nssr-8", P_NSSR, true, 0),
        ("intmc-10", 0x10, false, 0),
        ("acq-30", 0x30, true, 0),
        ("cmbsz-3c", 0x3C, false, 0),
        // CRTO (68h): Controller Ready Timeouts, new in Base 2.0; its value is the
        // controller's own.
        ("crto-68", 0x68, false, 0),
        ("crto-68-8", 0x68, true, 0),
        ("pmrcap-e00", 0xE00, false, 0),
    ];
    for &(name, ofst, size8, mask) in gets {
        b.add("property", format!("get-{name}"), move |x| {
            let mut c = x.admin();
            if let Some(r) = x.exec_m(&mut c, "get", prop_get(ofst, size8), Data::None, 0) {
                if r.ok() {
                    let v = (r.dw1 as u64) << 32 | r.dw0 as u64;
                    x.log(format!("value&mask={:#x}", v & mask));
                }
            }
        });
    }
    b.add("property", "get-attrib-reserved-bits", |x| {
        let mut c = x.admin();
        let s = prop_get(P_CSTS, false).dw(10, 0xFE);
        x.exec_m(&mut c, "get csts attrib=fe", s, Data::None, 0);
    });
    b.add("property", "get-before-enable", |x| {
        let mut c = x.open(Ic::default());
        x.connect(&mut c, 0, 0xFFFF);
        x.exec_m(
            &mut c,
            "get cc",
            prop_get(P_CC, false),
            Data::None,
            u32::MAX,
        );
        x.exec_m(
            &mut c,
            "get csts",
            prop_get(P_CSTS, false),
            Data::None,
            u32::MAX,
        );
    });
    // CC writes: (name, value). Enable-type values are polled for RDY/CFS.
    let ccs: &[(&str, u32)] = &[
        ("cc-en-css-000", CC_ENABLE),
        ("cc-en-css-110", CC_ENABLE | 0b110 << 4), // issue 29, case 2
        ("cc-en-css-111", CC_ENABLE | 0b111 << 4),
        ("cc-en-css-001", CC_ENABLE | 0b001 << 4),
        ("cc-en-iosqes-0", 0x0040_0001),
        ("cc-en-iocqes-0", 0x0006_0001),
        ("cc-en-mps-15", CC_ENABLE | 0xF << 7),
        ("cc-en-ams-wrr", CC_ENABLE | 0b001 << 11),
        ("cc-en-ams-vendor", CC_ENABLE | 0b111 << 11),
        ("cc-en-reserved-bits", CC_ENABLE | 0xFF00_0000),
        ("cc-en-crime", CC_ENABLE | 1 << 24),
        ("cc-no-en-queue-sizes", 0x0046_0000),
    ];
    for &(name, cc) in ccs {
        b.add("property", format!("set-{name}"), move |x| {
            let mut c = x.open(Ic::default());
            x.connect(&mut c, 0, 0xFFFF);
            let csts = x.enable(&mut c, cc);
            x.log(format!("csts.rdy={} cfs={}", csts & 1, csts >> 1 & 1));
            x.exec_m(
                &mut c,
                "get cc",
                prop_get(P_CC, false),
                Data::None,
                0x00FF_FFF1,
            );
            x.exec(&mut c, "identify ctrl", identify(1, 0), Data::None);
        });
    }
    let sets: &[(&str, u32, bool, u64)] = &[
        ("cap-readonly", P_CAP, true, 0),
        ("vs-readonly", P_VS, false, 0x0002_0000),
        ("csts-readonly", P_CSTS, false, 0x10),
        ("nssr-not-magic", P_NSSR, false, 0x1234),
        ("cc-8-bytes", P_CC, true, CC_ENABLE as u64),
        ("unknown-offset-100", 0x100, false, 1),
        ("aqa-24", 0x24, false, 0x001F_001F),
    ];
    for &(name, ofst, size8, v) in sets {
        b.add("property", format!("set-{name}"), move |x| {
            let mut c = x.admin();
            x.exec_m(&mut c, "set", prop_set(ofst, size8, v), Data::None, 0);
            x.exec_m(
                &mut c,
                "get csts",
                prop_get(P_CSTS, false),
                Data::None,
                u32::MAX,
            );
        });
    }
    b.add("property", "disable-after-enable", |x| {
        let mut c = x.admin();
        x.exec(
            &mut c,
            "set cc.en=0",
            prop_set(P_CC, false, 0x0046_0000),
            Data::None,
        );
        let v = x.poll_csts(&mut c, |v| v & 1 == 0);
        x.log(format!("csts.rdy={}", v & 1));
        x.exec(
            &mut c,
            "identify while disabled",
            identify(1, 0),
            Data::None,
        );
        let v = x.enable(&mut c, CC_ENABLE);
        x.log(format!("re-enabled rdy={}", v & 1));
        x.exec(&mut c, "identify re-enabled", identify(1, 0), Data::None);
    });
    for (name, shn) in [("normal", 1u32), ("abrupt", 2)] {
        b.add("property", format!("shutdown-{name}"), move |x| {
            let mut c = x.admin();
            x.exec(
                &mut c,
                "set cc.shn",
                prop_set(P_CC, false, (CC_ENABLE | shn << 14) as u64),
                Data::None,
            );
            let v = x.poll_csts(&mut c, |v| (v >> 2) & 3 == 2);
            x.log(format!("csts.shst={}", (v >> 2) & 3));
            x.exec(
                &mut c,
                "identify after shutdown",
                identify(1, 0),
                Data::None,
            );
        });
    }
    b.add("property", "get-reused-cid", |x| {
        let mut c = x.admin();
        for i in 0..3 {
            let s = prop_get(P_CSTS, false).cid(7);
            x.exec_cid(
                &mut c,
                &format!("get csts cid 7 #{i}"),
                s,
                Data::None,
                u32::MAX,
            );
        }
    });
    b.add("property", "get-cid-ffff", |x| {
        let mut c = x.admin();
        x.exec_cid(
            &mut c,
            "get csts cid ffff",
            prop_get(P_CSTS, false).cid(0xFFFF),
            Data::None,
            u32::MAX,
        );
    });
}

// ---------------------------------------------------------------- identify

fn identify_cns(b: &mut B) {
    type Sum = fn(&[u8]) -> String;
    let cases: &[(&str, u8, u32, u32, Sum)] = &[
        ("cns00-nsid1", 0x00, 1, 0, id_ns_summary),
        ("cns00-nsid0", 0x00, 0, 0, id_ns_summary),
        ("cns00-nsid2-inactive", 0x00, 2, 0, id_ns_summary),
        ("cns00-nsid-ffffffff", 0x00, 0xFFFF_FFFF, 0, id_ns_summary),
        ("cns00-nsid-fffffffe", 0x00, 0xFFFF_FFFE, 0, id_ns_summary),
        ("cns01-nsid0", 0x01, 0, 0, id_ctrl_summary),
        ("cns01-nsid1", 0x01, 1, 0, id_ctrl_summary),
        ("cns01-nsid-ffffffff", 0x01, 0xFFFF_FFFF, 0, id_ctrl_summary),
        ("cns01-cntid-set", 0x01, 0, 0x0005_0000, id_ctrl_summary),
        ("cns02-nsid0", 0x02, 0, 0, ns_list_summary),
        ("cns02-nsid1", 0x02, 1, 0, ns_list_summary),
        ("cns02-nsid-fffffffe", 0x02, 0xFFFF_FFFE, 0, ns_list_summary),
        ("cns02-nsid-ffffffff", 0x02, 0xFFFF_FFFF, 0, ns_list_summary),
        ("cns03-nsid1", 0x03, 1, 0, ns_desc_summary),
        ("cns03-nsid0", 0x03, 0, 0, ns_desc_summary),
        ("cns03-nsid2", 0x03, 2, 0, ns_desc_summary),
        ("cns05-csi0-nsid1", 0x05, 1, 0, |d| {
            format!("len={}", d.len())
        }),
        ("cns06-csi0", 0x06, 0, 0, |d| format!("len={}", d.len())),
        ("cns06-csi2", 0x06, 0, 2 << 24, |d| {
            format!("len={}", d.len())
        }),
        ("cns07-csi0", 0x07, 0, 0, ns_list_summary),
        ("cns08-nsid1", 0x08, 1, 0, |d| format!("len={}", d.len())),
        ("cns10-allocated-list", 0x10, 0, 0, ns_list_summary),
        ("cns11-allocated-ns", 0x11, 1, 0, |d| {
            format!("len={}", d.len())
        }),
        ("cns12-ctrl-list-ns", 0x12, 1, 0, |d| {
            format!("len={}", d.len())
        }),
        ("cns13-ctrl-list", 0x13, 0, 0, |d| {
            format!("len={}", d.len())
        }),
        ("cns1c-cmdset-list", 0x1C, 0, 0, |d| {
            format!("len={}", d.len())
        }),
        ("cns-ff-reserved", 0xFF, 0, 0, |d| {
            format!("len={}", d.len())
        }),
    ];
    for &(name, cns, nsid, extra, sum) in cases {
        b.add("identify", name, move |x| {
            let mut c = x.admin();
            // `extra`: CNTID (CDW10 31:16) and CSI (CDW11 31:24).
            let s = identify(cns, nsid)
                .dw(10, cns as u32 | (extra & 0x00FF_0000))
                .dw(11, extra & 0xFF00_0000);
            if let Some(r) = x.exec(&mut c, "identify", s, Data::None) {
                if r.ok() {
                    x.log(sum(&r.data));
                }
            }
        });
    }
    b.add("identify", "cns01-short-sgl-512", |x| {
        let mut c = x.admin();
        if let Some(r) = x.exec(
            &mut c,
            "identify 512",
            identify(1, 0).sgl_transport(512),
            Data::None,
        ) {
            x.log(format!("got {}", r.data.len()));
        }
    });
    b.add("identify", "cns01-long-sgl-8192", |x| {
        let mut c = x.admin();
        if let Some(r) = x.exec(
            &mut c,
            "identify 8192",
            identify(1, 0).sgl_transport(8192),
            Data::None,
        ) {
            x.log(format!("got {}", r.data.len()));
        }
    });
    b.add("identify", "cns01-reserved-cdw", |x| {
        let mut c = x.admin();
        let s = identify(1, 0)
            .dw(12, 0xFFFF_FFFF)
            .dw(13, 0xA5A5_A5A5)
            .dw(15, 1)
            .dw(2, 7)
            .dw(3, 9);
        x.exec(&mut c, "identify", s, Data::None);
    });
    b.add("identify", "cns01-before-enable", |x| {
        let mut c = x.open(Ic::default());
        x.connect(&mut c, 0, 0xFFFF);
        x.exec(&mut c, "identify before cc.en", identify(1, 0), Data::None);
    });
    b.add("identify", "cns01-psdt-prp", |x| {
        let mut c = x.admin();
        x.exec(
            &mut c,
            "identify psdt=00",
            identify(1, 0).flags(0x00),
            Data::None,
        );
    });
    b.add("identify", "cns01-psdt-10", |x| {
        let mut c = x.admin();
        x.exec(
            &mut c,
            "identify psdt=10",
            identify(1, 0).flags(0x80),
            Data::None,
        );
    });
    b.add("identify", "cns01-keyed-sgl", |x| {
        let mut c = x.admin();
        let mut d = [0u8; 16];
        d[8] = 0x00;
        d[9] = 0x10; // length 4096 (24-bit)
        d[15] = 0x40;
        x.exec(
            &mut c,
            "identify keyed sgl",
            identify(1, 0).sgl_raw(d),
            Data::None,
        );
    });
    b.add("identify", "cns01-incapsule-sgl", |x| {
        let mut c = x.admin();
        x.exec(
            &mut c,
            "identify in-capsule sgl",
            identify(1, 0).sgl_incap(0, 4096),
            Data::None,
        );
    });
    b.add("identify", "cns01-sgl-last-segment", |x| {
        let mut c = x.admin();
        let mut d = [0u8; 16];
        d[8..12].copy_from_slice(&4096u32.to_le_bytes());
        d[15] = 0x30;
        x.exec(
            &mut c,
            "identify last-segment sgl",
            identify(1, 0).sgl_raw(d),
            Data::None,
        );
    });
}

// ---------------------------------------------------------------- log pages

fn log_pages(b: &mut B) {
    type Sum = fn(&[u8]) -> String;
    fn len(d: &[u8]) -> String {
        format!("len={}", d.len())
    }
    fn zeroes(d: &[u8]) -> String {
        format!("len={} zero={}", d.len(), d.iter().all(|&v| v == 0))
    }
    fn smart(d: &[u8]) -> String {
        format!(
            "len={} critical_warning={}",
            d.len(),
            d.first().copied().unwrap_or(0xFF)
        )
    }
    // (name, lid, nsid, bytes, cdw10 extra bits, cdw12 LPOL, summary)
    let cases: &[(&str, u8, u32, u32, u32, u32, Sum)] = &[
        ("lid01-error-64", 0x01, 0, 64, 0, 0, len),
        ("lid01-error-4096", 0x01, 0, 4096, 0, 0, len),
        ("lid02-smart-nsid0", 0x02, 0, 512, 0, 0, smart),
        (
            "lid02-smart-nsid-ffffffff",
            0x02,
            0xFFFF_FFFF,
            512,
            0,
            0,
            smart,
        ),
        ("lid02-smart-nsid1", 0x02, 1, 512, 0, 0, smart),
        ("lid02-smart-rae", 0x02, 0xFFFF_FFFF, 512, 1 << 15, 0, smart),
        (
            "lid02-smart-lsp-set",
            0x02,
            0xFFFF_FFFF,
            512,
            0x5 << 8,
            0,
            smart,
        ),
        (
            "lid02-smart-offset-256",
            0x02,
            0xFFFF_FFFF,
            256,
            0,
            256,
            len,
        ),
        (
            "lid02-smart-offset-unaligned",
            0x02,
            0xFFFF_FFFF,
            64,
            0,
            2,
            len,
        ),
        (
            "lid02-smart-offset-beyond",
            0x02,
            0xFFFF_FFFF,
            64,
            0,
            4096,
            len,
        ),
        ("lid03-fw-slot", 0x03, 0, 512, 0, 0, len),
        ("lid04-changed-ns", 0x04, 0, 4096, 0, 0, zeroes),
        ("lid04-changed-ns-rae", 0x04, 0, 4096, 1 << 15, 0, zeroes),
        ("lid05-effects", 0x05, 0, 4096, 0, 0, len),
        ("lid06-self-test", 0x06, 0, 564, 0, 0, len),
        ("lid0c-ana-4096", 0x0C, 0, 4096, 0, 0, len),
        ("lid0c-ana-rgo", 0x0C, 0, 4096, 1 << 8, 0, len),
        ("lid0d-persistent-event", 0x0D, 0, 512, 0, 0, len),
        ("lid70-discovery-on-io-ctrl", 0x70, 0, 1024, 0, 0, len),
        ("lid80-resv-notification", 0x80, 0, 64, 0, 0, zeroes),
        ("lid81-sanitize", 0x81, 0, 512, 0, 0, len),
        ("lidc0-vendor", 0xC0, 0, 512, 0, 0, len),
        ("lid00-reserved", 0x00, 0, 512, 0, 0, len),
    ];
    for &(name, lid, nsid, bytes, extra, lpol, sum) in cases {
        b.add("log", name, move |x| {
            let mut c = x.admin();
            let mut s = get_log(lid, nsid, bytes);
            let dw10 = get32(&s.0, 40) | extra;
            s = s.dw(10, dw10).dw(12, lpol);
            if let Some(r) = x.exec(&mut c, "get log page", s, Data::None) {
                if r.ok() {
                    x.log(sum(&r.data));
                }
            }
        });
    }
    b.add("log", "lid04-clears-after-read", |x| {
        let mut c = x.admin();
        for i in 0..2 {
            if let Some(r) = x.exec(
                &mut c,
                &format!("changed ns #{i}"),
                get_log(0x04, 0, 4096),
                Data::None,
            ) {
                x.log(zeroes(&r.data));
            }
        }
    });
    b.add("log", "numd-larger-than-sgl", |x| {
        let mut c = x.admin();
        let s = get_log(0x02, 0xFFFF_FFFF, 512).sgl_transport(256);
        x.exec(&mut c, "smart numd 512 sgl 256", s, Data::None);
    });
}

// ---------------------------------------------------------------- features

fn features(b: &mut B) {
    // FIDs with the DW0 bits both targets must report alike on Get
    // (current value after connect). Most values are the implementation's.
    let fids: &[(u8, &str, u32)] = &[
        (0x01, "arbitration", 0),
        (0x02, "power-mgmt", 0),
        (0x04, "temp-threshold", 0),
        (0x05, "error-recovery", 0),
        (0x06, "vwc", 0),
        (0x07, "num-queues", 0),
        (0x08, "irq-coalescing", 0),
        (0x09, "irq-config", 0),
        (0x0A, "write-atomicity", 0),
        (0x0B, "async-event-config", 0),
        (0x0C, "apst", 0),
        (0x0F, "kato", u32::MAX),
        (0x10, "host-thermal", 0),
        (0x16, "host-behavior", 0),
        (0x80, "sw-progress", 0),
        (0x81, "host-id", 0),
        (0x82, "resv-mask", 0),
        (0x83, "resv-persistence", 0),
        (0xC0, "vendor-c0", 0),
        (0x00, "reserved-00", 0),
    ];
    for &(fid, name, mask) in fids {
        let nsid = if matches!(fid, 0x82 | 0x83) { 1 } else { 0 };
        b.add("features", format!("get-{fid:02x}-{name}"), move |x| {
            let mut c = x.admin();
            let mut s = S::new(0x0A).nsid(nsid).dw(10, fid as u32);
            if fid == 0x81 {
                s = s.sgl_transport(8);
            }
            x.exec_m(&mut c, "get features", s, Data::None, mask);
        });
    }
    // SEL = 1 (default), 2 (saved), 3 (supported capabilities).
    for sel in 1..4u32 {
        for &(fid, name) in &[
            (0x07u8, "num-queues"),
            (0x0F, "kato"),
            (0x0B, "async-event-config"),
        ] {
            b.add(
                "features",
                format!("get-{fid:02x}-{name}-sel{sel}"),
                move |x| {
                    let mut c = x.admin();
                    let s = S::new(0x0A).dw(10, fid as u32 | sel << 8);
                    x.exec_m(&mut c, "get features", s, Data::None, 0);
                },
            );
        }
    }
    // Set Features: (name, fid, cdw11, sv, dw0 mask)
    let sets: &[(&str, u8, u32, bool, u32)] = &[
        ("num-queues-1-1", 0x07, 0x0000_0000, false, 0),
        ("num-queues-7-7", 0x07, 0x0006_0006, false, 0),
        ("num-queues-ffff", 0x07, 0xFFFF_FFFF, false, 0),
        ("num-queues-ffff-sq", 0x07, 0x0000_FFFF, false, 0),
        ("kato-10s", 0x0F, 10_000, false, 0),
        ("kato-0", 0x0F, 0, false, 0),
        ("async-event-config-all", 0x0B, 0xFFFF_FFFF, false, 0),
        ("async-event-config-ns-attr", 0x0B, 1 << 8, false, 0),
        ("arbitration", 0x01, 0x0303_0307, false, 0),
        ("power-mgmt-ps0", 0x02, 0, false, 0),
        ("temp-threshold", 0x04, 0x0157, false, 0),
        ("error-recovery", 0x05, 0, false, 0),
        ("vwc-on", 0x06, 1, false, 0),
        ("vwc-off", 0x06, 0, false, 0),
        ("irq-coalescing", 0x08, 0x0A0A, false, 0),
        ("kato-sv", 0x0F, 10_000, true, 0),
        ("async-event-config-sv", 0x0B, 1 << 8, true, 0),
        ("vendor-c0", 0xC0, 0, false, 0),
        ("reserved-00", 0x00, 0, false, 0),
        ("sw-progress", 0x80, 1, false, 0),
    ];
    for &(name, fid, cdw11, sv, mask) in sets {
        b.add("features", format!("set-{name}"), move |x| {
            let mut c = x.admin();
            let s = S::new(0x09)
                .dw(10, fid as u32 | (sv as u32) << 31)
                .dw(11, cdw11);
            x.exec_m(&mut c, "set features", s, Data::None, mask);
        });
    }
    b.add("features", "set-kato-then-get", |x| {
        let mut c = x.admin();
        x.exec_m(
            &mut c,
            "set kato 15000",
            S::new(0x09).dw(10, 0x0F).dw(11, 15_000),
            Data::None,
            0,
        );
        x.exec(&mut c, "get kato", S::new(0x0A).dw(10, 0x0F), Data::None);
    });
    b.add("features", "set-host-id", |x| {
        let mut c = x.admin();
        let d = vec![0x11u8; 16];
        let s = S::new(0x09).dw(10, 0x81).dw(11, 1).sgl_incap(0, 16);
        x.exec_m(&mut c, "set host id", s, Data::InCapsule(d), 0);
    });
    b.add("features", "set-num-queues-after-io-queue", |x| {
        let (mut a, _q) = x.pair();
        x.exec_m(
            &mut a,
            "set num queues",
            S::new(0x09).dw(10, 0x07).dw(11, 0x0001_0001),
            Data::None,
            0,
        );
    });
}

// ---------------------------------------------------------------- admin

fn admin(b: &mut B) {
    let unknown: &[(u8, &str)] = &[
        (0x00, "delete-io-sq"),
        (0x01, "create-io-sq"),
        (0x03, "reserved-03"),
        (0x04, "delete-io-cq"),
        (0x05, "create-io-cq"),
        (0x0D, "ns-management"),
        (0x10, "fw-commit"),
        (0x11, "fw-download"),
        (0x14, "device-self-test"),
        (0x15, "ns-attachment"),
        (0x19, "directive-send"),
        (0x1A, "directive-receive"),
        (0x1C, "virt-mgmt"),
        (0x7C, "doorbell-buffer-config"),
        (0x80, "format-nvm"),
        (0x81, "security-send"),
        (0x82, "security-receive"),
        (0x84, "sanitize"),
        (0xC0, "vendor-c0"),
        (0xFF, "vendor-ff"),
    ];
    for &(opc, name) in unknown {
        b.add("admin", format!("opcode-{opc:02x}-{name}"), move |x| {
            let mut c = x.admin();
            x.exec(&mut c, "admin opcode", S::new(opc).dw(10, 0), Data::None);
            x.still_serving(&mut c, "afterwards");
        });
    }
    b.add("admin", "keep-alive", |x| {
        let mut c = x.admin();
        x.exec(&mut c, "keep alive", S::new(0x18), Data::None);
    });
    b.add("admin", "keep-alive-reserved-fields", |x| {
        let mut c = x.admin();
        x.exec(
            &mut c,
            "keep alive",
            S::new(0x18).nsid(0xFFFF_FFFF).dw(10, 1).dw(15, 2),
            Data::None,
        );
    });
    b.add("admin", "abort-unknown-cid", |x| {
        let mut c = x.admin();
        // DW0 bit 0 = 1: not aborted. Which commands a controller can
        // abort is its own business; the status must agree.
        x.exec_m(
            &mut c,
            "abort",
            S::new(0x08).dw(10, 0x1234 << 16),
            Data::None,
            0,
        );
    });
    b.add("admin", "abort-outstanding-aer", |x| {
        let mut c = x.admin();
        let aer = c.cid();
        c.send(&S::new(0x0C).cid(aer).0, &Data::None, Framing::default());
        x.exec_m(
            &mut c,
            "abort aer",
            S::new(0x08).dw(10, (aer as u32) << 16),
            Data::None,
            0,
        );
    });
    b.add("admin", "abort-io-sqid-1", |x| {
        let (mut a, _q) = x.pair();
        x.exec_m(
            &mut a,
            "abort",
            S::new(0x08).dw(10, 0x0042_0001),
            Data::None,
            0,
        );
    });
    b.add("admin", "fused-first-identify", |x| {
        let mut c = x.admin();
        x.exec(
            &mut c,
            "identify fuse=01",
            identify(1, 0).flags(0x41),
            Data::None,
        );
    });
    b.add("admin", "identify-nsid-bogus-reserved", |x| {
        let mut c = x.admin();
        x.exec(
            &mut c,
            "identify ctrl mptr set",
            identify(1, 0).dw(4, 0xDEAD_BEEF).dw(5, 1),
            Data::None,
        );
    });
    b.add("admin", "io-opcode-on-admin-read", |x| {
        let mut c = x.admin();
        x.exec(
            &mut c,
            "read on admin queue",
            rw(0x02, 1, 0, 0, 512),
            Data::None,
        );
    });
}

// ---------------------------------------------------------------- aer/kato

fn aer_kato(b: &mut B) {
    b.add("aer-kato", "aer-limit", |x| {
        // One more AER than AERL + 1 allows: the extra one completes with
        // Asynchronous Event Request Limit Exceeded. How many are allowed is
        // the target's (AERL); the trace records only the first completion.
        let mut c = x.admin();
        let mut cids = vec![];
        for _ in 0..32 {
            let cid = c.cid();
            c.send(&S::new(0x0C).cid(cid).0, &Data::None, Framing::default());
            cids.push(cid);
        }
        match c.next(ANSWER) {
            Some(r) => x.log_cpl("first aer completion", &r, 0),
            None => x.log("no aer completion"),
        }
    });
    b.add("aer-kato", "aer-outstanding-at-shutdown", |x| {
        let mut c = x.admin();
        for _ in 0..2 {
            let cid = c.cid();
            c.send(&S::new(0x0C).cid(cid).0, &Data::None, Framing::default());
        }
        x.exec(
            &mut c,
            "set cc.shn=01",
            prop_set(P_CC, false, (CC_ENABLE | 1 << 14) as u64),
            Data::None,
        );
        let v = x.poll_csts(&mut c, |v| (v >> 2) & 3 == 2);
        x.log(format!("shst={}", (v >> 2) & 3));
        x.still_serving(&mut c, "after shutdown");
    });
    b.add("aer-kato", "aer-outstanding-at-disable", |x| {
        let mut c = x.admin();
        let cid = c.cid();
        c.send(&S::new(0x0C).cid(cid).0, &Data::None, Framing::default());
        x.exec(
            &mut c,
            "set cc.en=0",
            prop_set(P_CC, false, 0x0046_0000),
            Data::None,
        );
        let v = x.poll_csts(&mut c, |v| v & 1 == 0);
        x.log(format!("rdy={}", v & 1));
    });
    b.add("aer-kato", "aer-outstanding-at-disconnect", |x| {
        let mut c = x.admin();
        let cid = c.cid();
        c.send(&S::new(0x0C).cid(cid).0, &Data::None, Framing::default());
        c.close();
        // The target must go on serving others.
        let mut d = x.admin();
        x.exec(
            &mut d,
            "identify on a new connection",
            identify(1, 0),
            Data::None,
        );
    });
    b.add("aer-kato", "aer-outstanding-at-host-half-close", |x| {
        let mut c = x.admin();
        let cid = c.cid();
        c.send(&S::new(0x0C).cid(cid).0, &Data::None, Framing::default());
        c.shutdown_write();
        x.expect_close(&mut c, "target closes", ANSWER);
    });
    // Keep Alive with margin: KATO 4 s, a Keep Alive every 500 ms for 3 s
    // (8x margin even under a slow VM), the admin queue stays; then silence,
    // and the target must end the association (Base 2.0 §3.9.4: within
    // KATO plus its own granularity; nvmet rounds KATO up to seconds, so
    // the bound here is generous).
    b.add("aer-kato", "kato-edge", |x| {
        let mut c = x.open(Ic::default());
        let mut a = x.connect_args(0, 0xFFFF);
        a.kato = 4000;
        if !x
            .connect_with(&mut c, "connect kato 4000", &a)
            .is_some_and(|r| r.ok())
        {
            return;
        }
        x.enable(&mut c, CC_ENABLE);
        let until = Instant::now() + Duration::from_secs(3);
        let mut n = 0;
        let mut ok = true;
        while Instant::now() < until {
            let cid = c.cid();
            c.send(&S::new(0x18).cid(cid).0, &Data::None, Framing::default());
            ok &= c.wait(cid).is_some_and(|r| r.ok());
            n += 1;
            std::thread::sleep(Duration::from_millis(500));
        }
        x.log(format!("keep alives answered: {ok} (>=3: {})", n >= 3));
        x.expect_close(&mut c, "silent past kato", Duration::from_secs(30));
    });
    b.add("aer-kato", "kato-0-no-expiry", |x| {
        let mut c = x.open(Ic::default());
        let mut a = x.connect_args(0, 0xFFFF);
        a.kato = 0;
        x.connect_with(&mut c, "connect kato 0", &a);
        x.enable(&mut c, CC_ENABLE);
        x.exec(&mut c, "keep alive with kato 0", S::new(0x18), Data::None);
    });
    b.add("aer-kato", "traffic-on-io-queue-only", |x| {
        let mut c = x.open(Ic::default());
        let mut a = x.connect_args(0, 0xFFFF);
        a.kato = 3000;
        x.connect_with(&mut c, "connect kato 3000", &a);
        x.enable(&mut c, CC_ENABLE);
        let mut q = x.io(&c);
        let cid = q.cid();
        q.send(
            &S::new(0x00).nsid(1).cid(cid).0,
            &Data::None,
            Framing::default(),
        );
        let ok = q.wait(cid).is_some_and(|r| r.ok());
        x.log(format!("flush ok {ok}"));
        x.expect_close(&mut c, "no keep alive past kato", Duration::from_secs(30));
    });
}

// ---------------------------------------------------------------- io

fn io(b: &mut B) {
    b.add("io", "write-read-4k-incapsule", |x| {
        let (_a, mut q) = x.pair();
        x.write(&mut q, "write", x.base, 8, 21);
        x.read(&mut q, "read", x.base, 8);
    });
    b.add("io", "write-read-128k-r2t", |x| {
        let (_a, mut q) = x.pair();
        x.write(&mut q, "write", x.base, 128, 22);
        x.read(&mut q, "read", x.base, 128);
    });
    b.add("io", "write-8k-incapsule-limit", |x| {
        let (_a, mut q) = x.pair();
        x.write(&mut q, "write 8k in capsule", x.base, 16, 23);
        x.read(&mut q, "read", x.base, 16);
    });
    b.add("io", "write-16k-incapsule-beyond-ioccsz", |x| {
        let (_a, mut q) = x.pair();
        let d = pattern(16384, 24);
        let s = rw(0x01, 1, x.base, 31, 16384).sgl_incap(0, 16384);
        x.exec(&mut q, "write 16k in capsule", s, Data::InCapsule(d));
    });
    b.add("io", "write-1-block-via-r2t", |x| {
        let (_a, mut q) = x.pair();
        x.exec(
            &mut q,
            "write",
            rw(0x01, 1, x.base, 0, 512),
            Data::R2t(pattern(512, 25)),
        );
        x.read(&mut q, "read", x.base, 1);
    });
    for (name, bits) in [
        ("fua", 1u32 << 30),
        ("lr", 1 << 31),
        ("fua-lr", 3 << 30),
        ("prinfo", 0xF << 26),
        ("dtype", 0x7 << 20),
    ] {
        b.add("io", format!("write-{name}"), move |x| {
            let (_a, mut q) = x.pair();
            let s = rw(0x01, 1, x.base, 0, 512).sgl_incap(0, 512);
            let dw12 = get32(&s.0, 48) | bits;
            x.exec(
                &mut q,
                "write",
                s.dw(12, dw12),
                Data::InCapsule(pattern(512, 26)),
            );
            let r = rw(0x02, 1, x.base, 0, 512);
            let dw12 = get32(&r.0, 48) | bits;
            x.exec(&mut q, "read", r.dw(12, dw12), Data::None);
        });
    }
    b.add("io", "read-last-lba", |x| {
        let (_a, mut q) = x.pair();
        x.read(&mut q, "read last lba", NSZE - 1, 1);
    });
    b.add("io", "read-one-past-last", |x| {
        let (_a, mut q) = x.pair();
        x.read(&mut q, "read lba nsze", NSZE, 1);
    });
    b.add("io", "read-crossing-end", |x| {
        let (_a, mut q) = x.pair();
        x.read(&mut q, "read 2 at nsze-1", NSZE - 1, 2);
    });
    b.add("io", "read-slba-huge", |x| {
        let (_a, mut q) = x.pair();
        x.read(&mut q, "read lba 2^63", 1 << 63, 1);
    });
    b.add("io", "write-last-lba", |x| {
        let (_a, mut q) = x.pair();
        x.write(&mut q, "write last lba", NSZE - 1, 1, 27);
        x.read(&mut q, "read back", NSZE - 1, 1);
    });
    b.add("io", "write-one-past-last", |x| {
        let (_a, mut q) = x.pair();
        x.write(&mut q, "write lba nsze", NSZE, 1, 28);
    });
    b.add("io", "read-sgl-shorter-than-nlb", |x| {
        let (_a, mut q) = x.pair();
        x.exec(
            &mut q,
            "read 2 blocks sgl 512",
            rw(0x02, 1, x.base, 1, 512),
            Data::None,
        );
    });
    b.add("io", "read-sgl-longer-than-nlb", |x| {
        let (_a, mut q) = x.pair();
        x.exec(
            &mut q,
            "read 1 block sgl 1024",
            rw(0x02, 1, x.base, 0, 1024),
            Data::None,
        );
    });
    b.add("io", "read-incapsule-sgl", |x| {
        let (_a, mut q) = x.pair();
        x.exec(
            &mut q,
            "read with in-capsule sgl",
            rw(0x02, 1, x.base, 0, 512).sgl_incap(0, 512),
            Data::None,
        );
    });
    b.add("io", "write-incapsule-sgl-offset-nonzero", |x| {
        let (_a, mut q) = x.pair();
        let s = rw(0x01, 1, x.base, 0, 512).sgl_incap(512, 512);
        x.exec(
            &mut q,
            "write sgl offset 512",
            s,
            Data::InCapsule(pattern(1024, 29)),
        );
    });
    b.add("io", "write-keyed-sgl", |x| {
        let (_a, mut q) = x.pair();
        let mut d = [0u8; 16];
        d[8] = 0x00;
        d[9] = 0x02;
        d[15] = 0x40;
        x.exec(
            &mut q,
            "write keyed sgl",
            rw(0x01, 1, x.base, 0, 512).sgl_raw(d),
            Data::None,
        );
    });
    b.add("io", "read-sgl-bit-bucket", |x| {
        let (_a, mut q) = x.pair();
        let mut d = [0u8; 16];
        d[8..12].copy_from_slice(&512u32.to_le_bytes());
        d[15] = 0x10;
        x.exec(
            &mut q,
            "read bit bucket sgl",
            rw(0x02, 1, x.base, 0, 512).sgl_raw(d),
            Data::None,
        );
    });
    b.add("io", "read-zero-length-sgl", |x| {
        let (_a, mut q) = x.pair();
        x.exec(
            &mut q,
            "read sgl len 0",
            rw(0x02, 1, x.base, 0, 0),
            Data::None,
        );
    });
    for (name, flags) in [
        ("psdt-00", 0x00u8),
        ("psdt-10", 0x80),
        ("psdt-11", 0xC0),
        ("fuse-first", 0x41),
        ("fuse-second", 0x42),
        ("fuse-11", 0x43),
    ] {
        b.add("io", format!("read-{name}"), move |x| {
            let (_a, mut q) = x.pair();
            x.exec(
                &mut q,
                "read",
                rw(0x02, 1, x.base, 0, 512).flags(flags),
                Data::None,
            );
        });
    }
    for (name, nsid) in [
        ("nsid-0", 0u32),
        ("nsid-2", 2),
        ("nsid-ffffffff", 0xFFFF_FFFF),
        ("nsid-fffffffe", 0xFFFF_FFFE),
    ] {
        b.add("io", format!("read-{name}"), move |x| {
            let (_a, mut q) = x.pair();
            x.exec(&mut q, "read", rw(0x02, nsid, x.base, 0, 512), Data::None);
        });
        b.add("io", format!("flush-{name}"), move |x| {
            let (_a, mut q) = x.pair();
            x.exec(&mut q, "flush", S::new(0x00).nsid(nsid), Data::None);
        });
    }
    b.add("io", "flush-nsid-1", |x| {
        let (_a, mut q) = x.pair();
        x.exec(&mut q, "flush", S::new(0x00).nsid(1), Data::None);
    });
    b.add("io", "flush-reserved-cdws", |x| {
        let (_a, mut q) = x.pair();
        x.exec(
            &mut q,
            "flush",
            S::new(0x00).nsid(1).dw(10, 1).dw(12, 0xFFFF).dw(15, 3),
            Data::None,
        );
    });
    b.add("io", "write-zeroes", |x| {
        let (_a, mut q) = x.pair();
        x.write(&mut q, "write", x.base, 8, 30);
        x.exec(
            &mut q,
            "write zeroes 4",
            rw(0x08, 1, x.base + 2, 3, 0),
            Data::None,
        );
        x.read(&mut q, "read", x.base, 8);
    });
    b.add("io", "write-zeroes-deac", |x| {
        let (_a, mut q) = x.pair();
        x.write(&mut q, "write", x.base, 8, 31);
        let s = rw(0x08, 1, x.base, 7, 0);
        let dw12 = get32(&s.0, 48) | 1 << 25;
        x.exec(&mut q, "write zeroes deac", s.dw(12, dw12), Data::None);
        x.read(&mut q, "read", x.base, 8);
    });
    b.add("io", "write-zeroes-past-end", |x| {
        let (_a, mut q) = x.pair();
        x.exec(
            &mut q,
            "write zeroes at nsze-1 x2",
            rw(0x08, 1, NSZE - 1, 1, 0),
            Data::None,
        );
    });
    b.add("io", "write-zeroes-max-nlb", |x| {
        let (_a, mut q) = x.pair();
        x.exec(
            &mut q,
            "write zeroes 65536 at 0",
            rw(0x08, 1, 0, 0xFFFF, 0),
            Data::None,
        );
        x.read(&mut q, "read 1", 65535, 1);
    });
    let dsm = |ranges: &[(u32, u64)]| -> Vec<u8> {
        let mut d = vec![0u8; 16 * ranges.len()];
        for (i, &(n, lba)) in ranges.iter().enumerate() {
            d[i * 16 + 4..i * 16 + 8].copy_from_slice(&n.to_le_bytes());
            d[i * 16 + 8..i * 16 + 16].copy_from_slice(&lba.to_le_bytes());
        }
        d
    };
    b.add("io", "dsm-deallocate", move |x| {
        let (_a, mut q) = x.pair();
        x.write(&mut q, "write", x.base, 8, 32);
        let d = dsm(&[(8, x.base)]);
        let s = S::new(0x09)
            .nsid(1)
            .dw(10, 0)
            .dw(11, 1 << 2)
            .sgl_incap(0, 16);
        x.exec(&mut q, "dsm ad", s, Data::InCapsule(d));
    });
    b.add("io", "dsm-no-attributes", move |x| {
        let (_a, mut q) = x.pair();
        let d = dsm(&[(8, x.base)]);
        let s = S::new(0x09).nsid(1).dw(10, 0).dw(11, 0).sgl_incap(0, 16);
        x.exec(&mut q, "dsm no attr", s, Data::InCapsule(d));
    });
    b.add("io", "dsm-range-past-end", move |x| {
        let (_a, mut q) = x.pair();
        let d = dsm(&[(8, NSZE - 4)]);
        let s = S::new(0x09)
            .nsid(1)
            .dw(10, 0)
            .dw(11, 1 << 2)
            .sgl_incap(0, 16);
        x.exec(&mut q, "dsm past end", s, Data::InCapsule(d));
    });
    b.add("io", "dsm-256-ranges-r2t", move |x| {
        let (_a, mut q) = x.pair();
        let r: Vec<(u32, u64)> = (0..256).map(|i| (0, x.base + i % 128)).collect();
        let d = dsm(&r);
        let s = S::new(0x09)
            .nsid(1)
            .dw(10, 255)
            .dw(11, 1 << 2)
            .sgl_transport(4096);
        x.exec(&mut q, "dsm 256 ranges", s, Data::R2t(d));
    });
    b.add("io", "compare-match", |x| {
        let (_a, mut q) = x.pair();
        x.write(&mut q, "write", x.base, 1, 33);
        let s = rw(0x05, 1, x.base, 0, 512).sgl_incap(0, 512);
        x.exec(
            &mut q,
            "compare equal",
            s,
            Data::InCapsule(pattern(512, 33)),
        );
    });
    b.add("io", "compare-mismatch", |x| {
        let (_a, mut q) = x.pair();
        x.write(&mut q, "write", x.base, 1, 34);
        let s = rw(0x05, 1, x.base, 0, 512).sgl_incap(0, 512);
        x.exec(
            &mut q,
            "compare different",
            s,
            Data::InCapsule(pattern(512, 35)),
        );
    });
    b.add("io", "write-uncorrectable", |x| {
        let (_a, mut q) = x.pair();
        x.exec(
            &mut q,
            "write uncorrectable",
            rw(0x04, 1, x.base, 0, 0),
            Data::None,
        );
    });
    b.add("io", "verify", |x| {
        let (_a, mut q) = x.pair();
        x.exec(&mut q, "verify", rw(0x0C, 1, x.base, 0, 0), Data::None);
    });
    b.add("io", "copy", |x| {
        let (_a, mut q) = x.pair();
        let mut d = vec![0u8; 32];
        d[8..16].copy_from_slice(&x.base.to_le_bytes());
        let s = S::new(0x19)
            .nsid(1)
            .dw(10, (x.base + 64) as u32)
            .sgl_incap(0, 32);
        x.exec(&mut q, "copy", s, Data::InCapsule(d));
    });
    b.add("io", "reservation-report", |x| {
        let (_a, mut q) = x.pair();
        let s = S::new(0x0E)
            .nsid(1)
            .dw(10, 1024 / 4 - 1)
            .sgl_transport(1024);
        if let Some(r) = x.exec(&mut q, "reservation report", s, Data::None) {
            if r.ok() && r.data.len() >= 24 {
                x.log(format!(
                    "gen={} rtype={} regctl={}",
                    get32(&r.data, 0),
                    r.data[4],
                    u16::from_le_bytes([r.data[5], r.data[6]])
                ));
            }
        }
    });
    b.add("io", "reservation-report-eds", |x| {
        let (_a, mut q) = x.pair();
        let s = S::new(0x0E)
            .nsid(1)
            .dw(10, 1024 / 4 - 1)
            .dw(11, 1)
            .sgl_transport(1024);
        if let Some(r) = x.exec(&mut q, "reservation report eds", s, Data::None) {
            if r.ok() && r.data.len() >= 24 {
                x.log(format!(
                    "gen={} rtype={} regctl={}",
                    get32(&r.data, 0),
                    r.data[4],
                    u16::from_le_bytes([r.data[5], r.data[6]])
                ));
            }
        }
    });
    b.add("io", "write-8k-via-r2t", |x| {
        let (_a, mut q) = x.pair();
        x.exec(
            &mut q,
            "write 8k by r2t",
            rw(0x01, 1, x.base, 15, 8192),
            Data::R2t(pattern(8192, 43)),
        );
        x.read(&mut q, "read", x.base, 16);
    });
    for opc in [0x03u8, 0x07, 0x0B, 0x7F, 0x80, 0xFF] {
        b.add("io", format!("opcode-{opc:02x}"), move |x| {
            let (_a, mut q) = x.pair();
            x.exec(&mut q, "io opcode", S::new(opc).nsid(1), Data::None);
            x.exec(&mut q, "flush after", S::new(0x00).nsid(1), Data::None);
        });
    }
    b.add("io", "admin-opcode-on-io-identify", |x| {
        let (_a, mut q) = x.pair();
        x.exec(&mut q, "identify on io queue", identify(1, 0), Data::None);
    });
}

// ---------------------------------------------------------------- ordering

fn ordering(b: &mut B) {
    b.add("ordering", "cid-reuse-while-in-flight", |x| {
        let (_a, mut q) = x.pair();
        // A write waiting for its data (R2T outstanding), then a flush with
        // the same CID.
        q.send(
            &rw(0x01, 1, x.base, 63, 32768).cid(9).0,
            &Data::None,
            Framing::default(),
        );
        match q.next_r2t(ANSWER) {
            Some((ttag, off, len)) => {
                x.log(format!("r2t off={off} len={len}"));
                q.send(
                    &S::new(0x00).nsid(1).cid(9).0,
                    &Data::None,
                    Framing::default(),
                );
                q.h2c(9, ttag, 0, &pattern(32768, 40), true);
                for i in 0..2 {
                    match q.next(ANSWER) {
                        Some(r) => {
                            x.log_cpl(&format!("completion #{i} cid {:#x}", r.cid), &r, u32::MAX)
                        }
                        None => break,
                    }
                }
            }
            None => x.log("no r2t"),
        }
    });
    b.add("ordering", "cid-reuse-after-completion-io", |x| {
        let (_a, mut q) = x.pair();
        for i in 0..3 {
            x.exec_cid(
                &mut q,
                &format!("flush cid 3 #{i}"),
                S::new(0x00).nsid(1).cid(3),
                Data::None,
                u32::MAX,
            );
        }
    });
    b.add("ordering", "pipelined-reads", |x| {
        let (_a, mut q) = x.pair();
        x.write(&mut q, "write", x.base, 16, 41);
        x.write(&mut q, "write", x.base + 16, 16, 42);
        for i in 0..8u16 {
            q.send(
                &rw(0x02, 1, x.base + 4 * i as u64, 3, 2048).cid(0x100 + i).0,
                &Data::None,
                Framing::default(),
            );
        }
        let mut got = vec![];
        for _ in 0..8 {
            match q.next(ANSWER) {
                Some(r) => got.push((r.cid, r.ok(), fnv(&r.data))),
                None => break,
            }
        }
        got.sort();
        x.log(format!("{got:?}"));
    });
    b.add("ordering", "pipelined-writes-r2t", |x| {
        let (_a, mut q) = x.pair();
        for i in 0..2u16 {
            let lba = x.base + 64 * i as u64;
            q.send(
                &rw(0x01, 1, lba, 63, 32768).cid(0x200 + i).0,
                &Data::R2t(pattern(32768, 50 + i as u64)),
                Framing::default(),
            );
        }
        let mut got = vec![];
        for _ in 0..2 {
            match q.next(ANSWER) {
                Some(r) => got.push((r.cid, r.ok(), r.r2t)),
                None => break,
            }
        }
        got.sort();
        x.log(format!("{got:?}"));
        x.read(&mut q, "read back", x.base, 128);
    });
    b.add("ordering", "admin-before-enable", |x| {
        let mut c = x.open(Ic::default());
        x.connect(&mut c, 0, 0xFFFF);
        x.exec(
            &mut c,
            "get features before cc.en",
            S::new(0x0A).dw(10, 0x07),
            Data::None,
        );
        x.exec(&mut c, "keep alive before cc.en", S::new(0x18), Data::None);
    });
    b.add("ordering", "io-after-shutdown", |x| {
        let (mut a, mut q) = x.pair();
        x.exec(
            &mut a,
            "set cc.shn=01",
            prop_set(P_CC, false, (CC_ENABLE | 1 << 14) as u64),
            Data::None,
        );
        x.poll_csts(&mut a, |v| (v >> 2) & 3 == 2);
        x.exec(
            &mut q,
            "flush after shutdown",
            S::new(0x00).nsid(1),
            Data::None,
        );
    });
    b.add("ordering", "io-after-disable", |x| {
        let (mut a, mut q) = x.pair();
        x.exec(
            &mut a,
            "set cc.en=0",
            prop_set(P_CC, false, 0x0046_0000),
            Data::None,
        );
        x.poll_csts(&mut a, |v| v & 1 == 0);
        x.exec(
            &mut q,
            "flush after disable",
            S::new(0x00).nsid(1),
            Data::None,
        );
    });
    b.add("ordering", "io-queue-after-admin-closed", |x| {
        let (mut a, mut q) = x.pair();
        a.close();
        // The association goes; the I/O queue is closed sooner or later.
        x.expect_close(&mut q, "io queue", Duration::from_secs(20));
    });
    b.add("ordering", "property-get-interleaved-with-aer", |x| {
        let mut c = x.admin();
        let aer = c.cid();
        c.send(&S::new(0x0C).cid(aer).0, &Data::None, Framing::default());
        for i in 0..3 {
            x.exec(
                &mut c,
                &format!("get csts #{i}"),
                prop_get(P_CSTS, false),
                Data::None,
            );
        }
    });
    b.add("ordering", "many-outstanding-admin", |x| {
        let mut c = x.admin();
        for i in 0..16u16 {
            c.send(
                &identify(1, 0).cid(0x300 + i).0,
                &Data::None,
                Framing::default(),
            );
        }
        let mut n = 0;
        while c.next(ANSWER).is_some_and(|r| r.ok()) {
            n += 1;
            if n == 16 {
                break;
            }
        }
        x.log(format!("completed {n}"));
    });
}
