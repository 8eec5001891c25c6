//! The management API over the network (issue #45): a real `farflash serve
//! --rpc-listen`, certificates made by the openssl CLI as
//! docs/management.md says (`scripts/mgmt-certs.sh`), managed by `farflash
//! ctl --rpc-connect`; a client from another CA is refused; an endpoint
//! without its certificate files is refused at start; the endpoint is
//! saved with the configuration.

mod common;

use common::{free_port, Serve, TempDir, NQN};
use std::path::Path;
use std::process::{Command, Output};

fn certs(dir: &Path, args: &[&str]) {
    let out = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/mgmt-certs.sh"
        ))
        .args(args)
        .output()
        .expect("bash and openssl are needed (apt-get install openssl)");
    assert!(
        out.status.success(),
        "mgmt-certs.sh {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

struct Pki {
    dir: TempDir,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = TempDir::new(name);
        let d = dir.0.to_str().unwrap().to_owned();
        certs(&dir.0, &["ca", &d]);
        certs(
            &dir.0,
            &["server", &d, "target-a", "IP:127.0.0.1,DNS:target-a"],
        );
        certs(&dir.0, &["client", &d, "csi-controller"]);
        Pki { dir }
    }
    fn path(&self, f: &str) -> String {
        self.dir.0.join(f).to_str().unwrap().to_owned()
    }
}

fn ctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_farflash"))
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn ctl_manages_a_target_over_mutual_tls_and_strangers_are_refused() {
    let pki = Pki::new("mgmt-tls");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let sock = pki.path("rpc.sock");
    let _serve = Serve::start(&[
        "--ram",
        "16M",
        "--rpc-socket",
        &sock,
        "--rpc-listen",
        &listen,
        "--rpc-cert",
        &pki.path("target-a.crt"),
        "--rpc-key",
        &pki.path("target-a.key"),
        "--rpc-client-ca",
        &pki.path("ca.crt"),
    ]);
    let (cert, key, ca) = (
        pki.path("csi-controller.crt"),
        pki.path("csi-controller.key"),
        pki.path("ca.crt"),
    );
    let net = |verb: &[&str]| {
        let mut a = vec![
            "ctl",
            "--rpc-connect",
            &listen,
            "--rpc-cert",
            &cert,
            "--rpc-key",
            &key,
            "--rpc-ca",
            &ca,
        ];
        a.extend_from_slice(verb);
        ctl(&a)
    };
    let o = net(&["subsystem", "list"]);
    assert!(o.status.success() && text(&o).contains(NQN), "{}", text(&o));
    // A change made over the network is the target's: the Unix socket sees it.
    let host = "nqn.2014-08.org.nvmexpress:uuid:mgmt-tls-host";
    let o = net(&["host", "allow", NQN, host]);
    assert!(o.status.success(), "{}", text(&o));
    let o = ctl(&["ctl", "--rpc-socket", &sock, "--json", "subsystem", "list"]);
    assert!(text(&o).contains(host), "{}", text(&o));
    // By the certificate's DNS name.
    let o = net(&["--rpc-server-name", "target-a", "controller", "list"]);
    assert!(o.status.success(), "{}", text(&o));
    // `farflash rpc` takes the same endpoint.
    let o = ctl(&[
        "rpc",
        "--rpc-connect",
        &listen,
        "--rpc-cert",
        &cert,
        "--rpc-key",
        &key,
        "--rpc-ca",
        &ca,
        "rpc_methods",
    ]);
    assert!(
        o.status.success() && text(&o).contains("host_allow"),
        "{}",
        text(&o)
    );

    // A client whose certificate another CA signed: refused by the target.
    // That CA even bears the same name as the target's (the script names
    // every CA alike): the signature check, not the name, refuses it.
    let rogue = TempDir::new("mgmt-tls-rogue");
    let r = rogue.0.to_str().unwrap();
    certs(&rogue.0, &["ca", r]);
    certs(&rogue.0, &["client", r, "intruder"]);
    let rc = format!("{r}/intruder.crt");
    let rk = format!("{r}/intruder.key");
    let o = ctl(&[
        "ctl",
        "--rpc-connect",
        &listen,
        "--rpc-cert",
        &rc,
        "--rpc-key",
        &rk,
        "--rpc-ca",
        &ca,
        "host",
        "disallow",
        NQN,
        host,
    ]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("DecryptError"), "{}", text(&o));
    // ... and nothing changed.
    let o = net(&["--json", "subsystem", "list"]);
    assert!(text(&o).contains(host), "{}", text(&o));
    // A client that trusts another CA refuses the target.
    let o = ctl(&[
        "ctl",
        "--rpc-connect",
        &listen,
        "--rpc-cert",
        &cert,
        "--rpc-key",
        &key,
        "--rpc-ca",
        &format!("{r}/ca.crt"),
        "subsystem",
        "list",
    ]);
    assert!(
        !o.status.success() && text(&o).contains("invalid peer certificate"),
        "{}",
        text(&o)
    );
    // Without a client certificate ctl does not even try.
    let o = ctl(&["ctl", "--rpc-connect", &listen, "subsystem", "list"]);
    assert!(
        !o.status.success() && text(&o).contains("--rpc-cert"),
        "{}",
        text(&o)
    );

    // The endpoint is part of the saved configuration.
    let o = net(&["save-config"]);
    let saved = text(&o);
    assert!(
        o.status.success() && saved.contains("[transport.management]") && saved.contains(&listen),
        "{saved}"
    );
}

#[test]
fn an_endpoint_without_its_files_does_not_start() {
    let o = ctl(&[
        "serve",
        "--ram",
        "16M",
        "--rpc-socket",
        "none",
        "--listen",
        "127.0.0.1:0",
        "--rpc-listen",
        "127.0.0.1:0",
    ]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains("transport.management.cert") && t.contains("--rpc-cert"),
        "{t}"
    );
    // A file that is not PEM: the error names it.
    let pki = Pki::new("mgmt-tls-bad");
    let o = ctl(&[
        "serve",
        "--ram",
        "16M",
        "--rpc-socket",
        "none",
        "--listen",
        "127.0.0.1:0",
        "--rpc-listen",
        "127.0.0.1:0",
        "--rpc-cert",
        &pki.path("target-a.crt"),
        "--rpc-key",
        &pki.path("target-a.key"),
        "--rpc-client-ca",
        &pki.path("target-a.key"),
    ]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("client CA") && t.contains("target-a.key"), "{t}");
}
