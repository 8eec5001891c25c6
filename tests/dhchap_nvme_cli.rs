//! `farflash gen-dhchap-key` / `check-dhchap-key` against nvme-cli's
//! commands of the same names: each tool accepts the other's keys, and with
//! a fixed --secret and --nqn both print the same key and the same check
//! line. Needs `nvme` (nvme-cli; tests/run.sh installs it) and fails, not
//! skips, without it.

use std::process::{Command, Output};

const NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:2b1c0e5c-4f4e-4a38-9d3a-0123456789ab";

fn nvme() -> Command {
    let found = Command::new("nvme").arg("version").output();
    assert!(
        matches!(&found, Ok(o) if o.status.success()),
        "nvme-cli ('nvme') is not installed or not on PATH: install it \
         (apt-get install nvme-cli; tests/run.sh does) to run this test"
    );
    Command::new("nvme")
}

fn farflash() -> Command {
    Command::new(env!("CARGO_BIN_EXE_farflash"))
}

fn ok(mut c: Command) -> String {
    let o: Output = c.output().expect("spawn");
    assert!(
        o.status.success(),
        "{c:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

fn fails(mut c: Command) {
    let o = c.output().expect("spawn");
    assert!(!o.status.success(), "{c:?} accepted: {o:?}");
}

fn gen(mut c: Command, secret: Option<&str>, len: u32, hmac: u32) -> Command {
    c.args(["gen-dhchap-key", "-n", NQN, "-m", &hmac.to_string()]);
    c.args(["-l", &len.to_string()]);
    if let Some(s) = secret {
        c.args(["-s", s]);
    }
    c
}

fn check(mut c: Command, key: &str) -> Command {
    c.args(["check-dhchap-key", "-k", key]);
    c
}

fn hex(len: usize, seed: u8) -> String {
    (0..len)
        .map(|i| format!("{:02x}", (i as u8).wrapping_mul(31) ^ seed))
        .collect()
}

/// (key length, hmac) pairs nvme-cli 2.3 accepts.
const KINDS: [(u32, u32); 6] = [(32, 0), (48, 0), (64, 0), (32, 1), (48, 2), (64, 3)];

#[test]
fn each_tool_accepts_the_others_keys() {
    for (len, hmac) in KINDS {
        let ours = ok(gen(farflash(), None, len, hmac));
        let line = ok(check(nvme(), &ours));
        assert!(line.starts_with("Key is valid"), "{line}");
        assert_eq!(ok(check(farflash(), &ours)), line, "same check line");
        let theirs = ok(gen(nvme(), None, len, hmac));
        assert_eq!(ok(check(farflash(), &theirs)), ok(check(nvme(), &theirs)));
    }
}

#[test]
fn fixed_secret_and_nqn_give_the_same_key() {
    for (i, (len, hmac)) in KINDS.into_iter().enumerate() {
        let s = hex(len as usize, i as u8);
        let ours = ok(gen(farflash(), Some(&s), len, hmac));
        let theirs = ok(gen(nvme(), Some(&s), len, hmac));
        assert_eq!(ours, theirs, "length {len} hmac {hmac}");
        assert!(ours.starts_with(&format!("DHHC-1:0{hmac}:")), "{ours}");
    }
}

#[test]
fn both_refuse_the_same_inputs() {
    let good = ok(gen(nvme(), Some(&hex(32, 0)), 32, 0));
    let mut bad_crc = good.clone().into_bytes();
    let at = bad_crc.len() - 3;
    bad_crc[at] = if bad_crc[at] == b'A' { b'B' } else { b'A' };
    let bad_crc = String::from_utf8(bad_crc).unwrap();
    let wrong_len = good.replacen("DHHC-1:00:", "DHHC-1:03:", 1);
    let bad_hmac = good.replacen("DHHC-1:00:", "DHHC-1:04:", 1);
    for key in [
        bad_crc.as_str(),
        &wrong_len,
        &bad_hmac,
        "junk",
        "DHHC-1:00:AAEC:",
    ] {
        fails(check(nvme(), key));
        fails(check(farflash(), key));
    }
    for (secret, len, hmac) in [
        (None, 40, 0),
        (None, 64, 1),
        (None, 0, 4),
        (Some(hex(32, 1)), 48, 0),
    ] {
        fails(gen(nvme(), secret.as_deref(), len, hmac));
        fails(gen(farflash(), secret.as_deref(), len, hmac));
    }
}
