//! Hostile-peer rows for high availability (issue 15, docs/ha.md), against
//! a real `farflash serve` over TCP: reservation commands with wrong keys,
//! wrong types, a zero key, preempting oneself, bad RREGA values, reserved CPTPL and
//! a report without EDS get the spec's statuses; ANA requests with group IDs
//! out of range, unknown states or listeners are refused with an error
//! naming the field; ANA states flipping while a host does I/O give only
//! success or the ANA statuses, never a hang; a corrupt PTPL file stops the
//! start with an error naming it, a missing one starts clean.

mod common;

use common::Serve;
use farflash_host::{ConnectOptions, Controller, DataDir, IoQueue, IoQueueOptions};
use farflash_wire::opcode::io;
use farflash_wire::resv::{self as wr, ResvCdw10};
use farflash_wire::{Sqe, Status};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const NQN: &str = "nqn.2026-11.io.farflash:ha-hostile";

fn config(dir: &Path) -> String {
    let path = dir.join("hostile.toml");
    let t = format!(
        "[[subsystem]]\nnqn = \"{NQN}\"\n[[subsystem.namespace]]\nnsid = 1\nbackend = \"ram\"\nsize = \"4M\"\nptpl_file = \"{}\"\n",
        dir.join("ns1.ptpl").display()
    );
    std::fs::write(&path, t).expect("write the config");
    path.display().to_string()
}

fn host(s: &Serve, n: u8) -> (Controller, IoQueue) {
    let mut o = ConnectOptions::new(s.addr.clone(), NQN);
    o.hostnqn = format!("nqn.2014-08.org.nvmexpress:uuid:hostile-{n}");
    o.hostid = [n; 16];
    o.command_timeout = Duration::from_secs(20);
    let c = Controller::connect_with_queues(&o, 1).expect("connect");
    let q = c
        .io_queue(
            1,
            IoQueueOptions {
                depth: 8,
                max_io: 64 << 10,
            },
        )
        .expect("I/O queue");
    (c, q)
}

fn resv(q: &mut IoQueue, opcode: u8, c: ResvCdw10, k1: u64, k2: u64) -> Status {
    let len = if opcode == io::RESERVATION_RELEASE {
        8
    } else {
        16
    };
    let mut d = [0u8; 16];
    d[..8].copy_from_slice(&k1.to_le_bytes());
    d[8..].copy_from_slice(&k2.to_le_bytes());
    let sqe = Sqe {
        opcode,
        nsid: 1,
        cdw10: c.to_cdw10(),
        ..Sqe::default()
    };
    q.execute(sqe, DataDir::ToCtrl, &d[..len], len as u32)
        .expect("reservation command completes")
        .cqe
        .status
}

fn c10(action: u8, rtype: u8) -> ResvCdw10 {
    ResvCdw10 {
        action,
        iekey: false,
        rtype,
        cptpl: 0,
    }
}

fn ctl(sock: &Path, args: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .arg("ctl")
        .arg("--rpc-socket")
        .arg(sock)
        .args(args)
        .output()
        .expect("run farflash ctl");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout),
    )
}

#[test]
fn hostile_reservation_and_ana_requests_get_the_spec_statuses() {
    let dir = std::env::temp_dir().join(format!("farflash-ha-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let sock = dir.join("rpc.sock");
    let s = Serve::start(&[
        "--config",
        &config(&dir),
        "--rpc-socket",
        &sock.display().to_string(),
    ]);
    let (_ca, a) = host(&s, 0xA);
    let (_cb, b) = host(&s, 0xB);
    let inv = Status::INVALID_FIELD.dnr();
    let conflict = Status::RESERVATION_CONFLICT;
    let (reg, acq, rel) = (
        io::RESERVATION_REGISTER,
        io::RESERVATION_ACQUIRE,
        io::RESERVATION_RELEASE,
    );
    let with = |c: ResvCdw10, cptpl: u8, iekey: bool| ResvCdw10 { cptpl, iekey, ..c };
    // (host, opcode, CDW10, CRKEY/PRKEY, NRKEY/PRKEY, expected status, what the row checks)
    #[rustfmt::skip]
    let rows = [
        // Zero keys, unknown actions.
        (0, reg, c10(wr::RREGA_REGISTER, 0), 0, 0, inv, "register a zero key"),
        (0, reg, c10(7, 0), 0, 0xAA, inv, "unknown RREGA"),
        // Not registered: every key-checked command conflicts.
        (0, acq, c10(wr::RACQA_ACQUIRE, 1), 0xAA, 0, conflict, "acquire unregistered"),
        (0, rel, c10(wr::RRELA_CLEAR, 0), 0xAA, 0, conflict, "clear unregistered"),
        (0, reg, c10(wr::RREGA_REPLACE, 0), 0xAA, 0xAB, conflict, "replace unregistered"),
        (0, reg, with(c10(wr::RREGA_REGISTER, 0), wr::CPTPL_SET, false), 0, 0xAA, Status::SUCCESS, "A registers, PTPL on"),
        (1, reg, c10(wr::RREGA_REGISTER, 0), 0, 0xBB, Status::SUCCESS, "B registers"),
        // CPTPL 01b is reserved: it changes nothing, as in Linux nvmet and
        // SPDK (NVM §3.2.6; was Invalid Field); A registers again, same key.
        (0, reg, with(c10(wr::RREGA_REGISTER, 0), 1, false), 0, 0xAA, Status::SUCCESS, "CPTPL 01b"),
        // Registering again with another key; wrong current keys; IEKEY.
        (0, reg, c10(wr::RREGA_REGISTER, 0), 0, 0x11, conflict, "register again, another key"),
        (0, reg, c10(wr::RREGA_REPLACE, 0), 0x11, 0xA2, conflict, "replace, wrong CRKEY"),
        (0, reg, with(c10(wr::RREGA_REPLACE, 0), 0, true), 0x11, 0xAA, Status::SUCCESS, "replace, IEKEY"),
        // Wrong types, wrong keys.
        (0, acq, c10(wr::RACQA_ACQUIRE, 0), 0xAA, 0, inv, "acquire RTYPE 0"),
        (0, acq, c10(wr::RACQA_ACQUIRE, 7), 0xAA, 0, inv, "acquire RTYPE 7"),
        (0, acq, c10(wr::RACQA_ACQUIRE, 0xFF), 0xAA, 0, inv, "acquire RTYPE FFh"),
        (0, acq, c10(wr::RACQA_ACQUIRE, 1), 0xBB, 0, conflict, "acquire with B's key"),
        (0, acq, c10(wr::RACQA_ACQUIRE, 1), 0xAA, 0, Status::SUCCESS, "A acquires Write Exclusive"),
        (1, acq, c10(wr::RACQA_ACQUIRE, 1), 0xBB, 0, conflict, "B acquires over A"),
        // A zero PRKEY only preempts an all-registrants reservation.
        (1, acq, c10(wr::RACQA_PREEMPT, 1), 0xBB, 0, inv, "preempt with a zero PRKEY"),
        // Preempting oneself changes the type and keeps the registration.
        (0, acq, c10(wr::RACQA_PREEMPT, 2), 0xAA, 0xAA, Status::SUCCESS, "A preempts itself"),
        // Release with the wrong type.
        (0, rel, c10(wr::RRELA_RELEASE, 1), 0xAA, 0, inv, "release, wrong RTYPE"),
    ];
    let mut qs = [a, b];
    for (h, opcode, cdw10, k1, k2, want, what) in rows {
        assert_eq!(resv(&mut qs[h], opcode, cdw10, k1, k2), want, "{what}");
    }
    let [mut a, mut b] = qs;
    // B's write and read under Exclusive Access.
    let mut buf = vec![0u8; 512];
    assert!(
        b.read_at(1, 0, 1, &mut buf).is_err(),
        "B reads under A's Exclusive Access"
    );
    assert!(
        b.write_at(1, 0, 1, &buf).is_err(),
        "B writes under A's Exclusive Access"
    );
    a.write_at(1, 0, 1, &[5; 512]).expect("the holder writes");
    // A report without EDS; a report longer than the target builds.
    let rep = |q: &mut IoQueue, cdw10: u32, cdw11: u32| {
        let sqe = Sqe {
            opcode: io::RESERVATION_REPORT,
            nsid: 1,
            cdw10,
            cdw11,
            ..Sqe::default()
        };
        q.execute(sqe, DataDir::FromCtrl, &[], (cdw10 + 1).min(1024) * 4)
            .expect("report completes")
            .cqe
            .status
    };
    assert_eq!(rep(&mut b, 1023, 0), Status::HOST_ID_INCONSISTENT.dnr());
    assert_eq!(rep(&mut b, 1023, 1), Status::SUCCESS);
    // A command on an NSID that does not exist.
    let sqe = Sqe {
        opcode: io::RESERVATION_REGISTER,
        nsid: 9,
        ..Sqe::default()
    };
    let st = b
        .execute(sqe, DataDir::ToCtrl, &[0; 16], 16)
        .expect("completes")
        .cqe
        .status;
    assert_eq!(st, Status::INVALID_NAMESPACE.dnr());

    // ANA requests out of range: refused, the error names the field.
    let l = s.addr.as_str();
    for (args, want) in [
        (
            vec!["ana", "set", NQN, l, "0", "inaccessible"],
            "anagrpid 0",
        ),
        (
            vec!["ana", "set", NQN, l, "129", "inaccessible"],
            "anagrpid 129",
        ),
        (vec!["ana", "set", NQN, l, "1", "dead"], "state"),
        (
            vec!["ana", "set", NQN, "127.0.0.1:1", "1", "change"],
            "no listener",
        ),
        (
            vec!["ana", "set", "nqn.nope", l, "1", "change"],
            "no subsystem",
        ),
    ] {
        let (ok, out) = ctl(&sock, &args);
        assert!(!ok && out.contains(want), "{args:?}: {out}");
    }
    // ANA states flipping while a host does I/O: only success or
    // the ANA statuses, and every command completes.
    assert_eq!(
        resv(
            &mut a,
            io::RESERVATION_RELEASE,
            c10(wr::RRELA_CLEAR, 0),
            0xAA,
            0
        ),
        Status::SUCCESS
    );
    let sock2 = sock.clone();
    let addr = s.addr.clone();
    let flipper = std::thread::spawn(move || {
        for st in [
            "inaccessible",
            "change",
            "non-optimized",
            "persistent-loss",
            "optimized",
        ]
        .iter()
        .cycle()
        .take(25)
        {
            let (ok, out) = ctl(&sock2, &["ana", "set", NQN, &addr, "1", st]);
            assert!(ok, "{out}");
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut ok, mut ana) = (0, 0);
    while !flipper.is_finished() {
        assert!(Instant::now() < deadline, "ANA flips never finished");
        let sqe = Sqe {
            opcode: io::READ,
            nsid: 1,
            ..Sqe::default()
        };
        let st = a
            .execute(sqe, DataDir::FromCtrl, &[], 512)
            .expect("read completes")
            .cqe
            .status;
        match st.code() {
            Status::SUCCESS => ok += 1,
            Status::ANA_INACCESSIBLE | Status::ANA_TRANSITION | Status::ANA_PERSISTENT_LOSS => {
                assert!(!st.is_dnr(), "path errors let the host retry elsewhere");
                ana += 1
            }
            other => panic!("read during ANA flips: {other:?}"),
        }
    }
    flipper.join().expect("flipper");
    assert!(ok > 0, "no read succeeded ({ana} ANA errors)");
    a.read_at(1, 0, 1, &mut buf)
        .expect("optimized again at the end");
    drop((a, b));
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_corrupt_ptpl_file_stops_the_start_and_a_missing_one_starts_clean() {
    let dir = std::env::temp_dir().join(format!("farflash-ha-ptpl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let cfg = config(&dir);
    // Missing: starts, no reservation.
    let s = Serve::start(&["--config", &cfg]);
    drop(s);
    std::fs::write(
        dir.join("ns1.ptpl"),
        b"FFPTPL\x01\x00\x04\x00\x00\x00\x00\x00\x00\x00ab",
    )
    .unwrap();
    let port = common::free_port();
    let out = Command::new(env!("CARGO_BIN_EXE_farflash"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--config",
            &cfg,
        ])
        .output()
        .expect("run farflash serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started with a corrupt PTPL file");
    assert!(err.contains("ns1.ptpl") && err.contains("PTPL"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
