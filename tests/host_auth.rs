//! DH-HMAC-CHAP end to end between farflash's own host (library and CLI)
//! and `farflash serve --dhchap-key`: unidirectional and bidirectional,
//! every queue authenticated (perf with several jobs), re-authentication
//! of live queues, and the refusals: no secret, a wrong secret, a wrong
//! controller secret. No output or error ever holds a secret.

mod host_support;

use farflash_auth::{HashId, Secret};
use farflash_host::{ConnectOptions, Controller, IoQueueOptions};
use host_support::{cli, cli_ok, json, Serve};
use std::time::Duration;

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:7d3c1b2a-0000-4000-8000-00000000a0a0";

fn secret(seed: u8, len: usize, hmac: Option<HashId>) -> String {
    let key: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(37) ^ seed).collect();
    Secret::new(&key, hmac).unwrap().to_dhhc().to_string()
}

fn serve(host_key: &str, ctrl_key: &str, group: &str) -> Serve {
    Serve::start(
        "32M",
        &[
            "--dhchap-key",
            &format!("{HOST}={host_key}"),
            "--dhchap-ctrl-key",
            &format!("{HOST}={ctrl_key}"),
            "--dhchap-dhgroup",
            group,
            "--dhchap-hash",
            "sha512,sha256",
            "--require-auth",
        ],
    )
}

#[test]
fn cli_identify_and_perf_authenticate_every_queue() {
    let (hk, ck) = (secret(1, 32, Some(HashId::Sha256)), secret(2, 64, None));
    let s = serve(&hk, &ck, "ffdhe2048");
    let port = s.port.to_string();
    let base = ["-a", "127.0.0.1", "-s", &port, "-n", &s.nqn, "-q", HOST];
    // Unidirectional, then bidirectional.
    let mut args = vec!["identify"];
    args.extend(base);
    args.extend(["--dhchap-secret", &hk]);
    let out = cli_ok(&args);
    assert!(out.contains(&s.nqn), "{out}");
    args.extend(["--dhchap-ctrl-secret", &ck]);
    cli_ok(&args);
    let mut perf = vec!["perf"];
    perf.extend(base);
    perf.extend([
        "-S",
        &hk,
        "-C",
        &ck,
        "--rw",
        "randwrite",
        "--bs",
        "4k",
        "--iodepth",
        "8",
        "--numjobs",
        "2",
        "--size",
        "4M",
        "--verify=crc32c",
        "--output-format=json",
    ]);
    let v = json(&cli_ok(&perf));
    let ios = v["jobs"][0]["write"]["total_ios"].as_u64().unwrap_or(0);
    assert!(ios > 0, "{v}");
}

#[test]
fn refusals_never_repeat_a_secret() {
    let (hk, ck) = (secret(3, 48, Some(HashId::Sha384)), secret(4, 32, None));
    let s = serve(&hk, &ck, "null");
    let port = s.port.to_string();
    let wrong = secret(5, 48, None);
    let base = [
        "identify",
        "-a",
        "127.0.0.1",
        "-s",
        &port,
        "-n",
        &s.nqn,
        "-q",
        HOST,
    ];
    for (extra, want) in [
        (vec![], "--dhchap-secret"),
        (vec!["-S", &wrong], "reason code explanation 0x01"),
        (vec!["-S", &hk, "-C", &wrong], "controller response wrong"),
        (vec!["-S", "DHHC-1:00:bm90IGEga2V5:"], "--dhchap-secret"),
    ] {
        let mut args = base.to_vec();
        args.extend(extra.iter());
        let o = cli(&args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!o.status.success(), "{args:?} succeeded:\n{text}");
        assert!(text.contains(want), "{args:?}: no {want:?} in:\n{text}");
        for k in [&hk, &ck, &wrong] {
            let b64 = k.trim_end_matches(':').rsplit(':').next().unwrap();
            assert!(!text.contains(b64), "a secret in the output:\n{text}");
        }
    }
    // A host that is not in the target's key list is refused at Connect.
    let mut args = base.to_vec();
    args[8] = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000bad";
    let o = cli(&args);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("Connect Invalid Host"));
}

#[test]
fn library_reauthenticates_live_queues() {
    let (hk, ck) = (secret(6, 64, Some(HashId::Sha512)), secret(7, 64, None));
    let s = serve(&hk, &ck, "ffdhe3072");
    let mut o = ConnectOptions::new(s.addr(), &s.nqn);
    o.hostnqn = HOST.into();
    o.command_timeout = Duration::from_secs(20);
    o.dhchap_secret = Some(Secret::parse(&hk).unwrap());
    o.dhchap_ctrl_secret = Some(Secret::parse(&ck).unwrap());
    let ctrl = Controller::connect_with_queues(&o, 1).expect("connect");
    let mut q = ctrl
        .io_queue(
            1,
            IoQueueOptions {
                depth: 8,
                max_io: 64 << 10,
            },
        )
        .expect("I/O queue");
    let data = vec![0x5a; 4096];
    q.write_at(1, 8, 8, &data).unwrap();
    for _ in 0..3 {
        ctrl.reauthenticate()
            .expect("admin queue re-authentication");
        q.authenticate(ctrl.options())
            .expect("I/O queue re-authentication");
    }
    let mut back = vec![0; 4096];
    q.read_at(1, 8, 8, &mut back).unwrap();
    assert_eq!(back, data);
    drop(q);
    ctrl.shutdown().unwrap();
}
