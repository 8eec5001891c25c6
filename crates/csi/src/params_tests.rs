use super::*;

fn config() -> ControllerConfig {
    ControllerConfig::from_toml(
        "[tls]\ncert='c'\nkey='k'\nca='a'\n[[target]]\nname='a'\nmanagement='h:1'\nnvme=['127.0.0.1:4420']\n[[target]]\nname='b'\nmanagement='h:2'\nnvme=['127.0.0.1:4421']\n",
        "t",
    )
    .unwrap()
}

fn map(kv: &[(&str, &str)]) -> HashMap<String, String> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_storage_class_is_read() {
    let p = parse(
        &map(&[
            ("targets", "a, b"),
            ("pool", "fast"),
            ("transport", "tls"),
            ("dhchap", "true"),
            ("ctrlLossTmo", "-1"),
            ("reconnectDelay", "2"),
            ("qos.rw_ios_per_sec", "10000"),
            ("qos.w_bytes_per_sec", "100M"),
            ("csi.storage.k8s.io/fstype", "xfs"),
        ]),
        &config(),
    )
    .unwrap();
    assert_eq!(p.targets(), ["a", "b"]);
    assert_eq!(p.pool(), "fast");
    assert_eq!(p.transport(), Transport::Tls);
    assert!(p.dhchap());
    assert_eq!(p.qos()["rw_ios_per_sec"], 10000);
    assert_eq!(p.qos()["w_bytes_per_sec"], 100 << 20);
    let ctx = p.volume_context();
    assert_eq!(ctx["ctrlLossTmo"], "-1");
    assert_eq!(ctx["reconnectDelay"], "2");
    assert_eq!(ctx["transport"], "tls");
    // Defaults: TCP, no DH-HMAC-CHAP, no limits.
    let p = parse(&map(&[("targets", "a"), ("pool", "p")]), &config()).unwrap();
    assert_eq!(
        (p.transport(), p.dhchap(), p.qos().len()),
        (Transport::Tcp, false, 0)
    );
}

#[test]
fn bad_parameters_are_named() {
    let base = [("targets", "a"), ("pool", "p")];
    let err = |extra: &[(&str, &str)], drop: &str| {
        let mut m = map(&base);
        m.remove(drop);
        m.extend(map(extra));
        parse(&m, &config()).unwrap_err()
    };
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
    let cases: &[Case] = &[
        (&[], "targets", "parameter targets: missing"),
        (&[], "pool", "parameter pool: missing"),
        (
            &[("targets", "a,c")],
            "",
            "parameter targets: \"c\" is not in the controller's configuration (known: a, b)",
        ),
        (
            &[("targets", "a,a")],
            "",
            "parameter targets: \"a\" named twice",
        ),
        (&[("pool", "p/q")], "", "parameter pool: \"p/q\""),
        (
            &[("transport", "rdma")],
            "",
            "parameter transport: \"rdma\": want tcp or tls",
        ),
        (
            &[("dhchap", "yes")],
            "",
            "parameter dhchap: \"yes\": want true or false",
        ),
        (&[("ctrlLossTmo", "-2")], "", "parameter ctrlLossTmo"),
        (&[("reconnectDelay", "0")], "", "parameter reconnectDelay"),
        (
            &[("qos.rw_ios_per_sec", "many")],
            "",
            "parameter qos.rw_ios_per_sec: \"many\"",
        ),
        (
            &[("qos.rw_bytes_per_sec", "0")],
            "",
            "parameter qos.rw_bytes_per_sec: must be above 0",
        ),
        (
            &[("qos.iops", "1")],
            "",
            "parameter qos.iops: unknown QoS limit",
        ),
        (
            &[("clusterSize", "1M")],
            "",
            "parameter clusterSize: unknown parameter",
        ),
    ];
    for (extra, drop, want) in cases {
        let e = err(extra, drop);
        assert!(e.contains(want), "{extra:?} -{drop}: {e}");
    }
}

#[test]
fn only_qos_can_be_modified() {
    let q = parse_mutable(&map(&[
        ("qos.r_ios_per_sec", "500"),
        ("qos.burst_ms", "200"),
    ]))
    .unwrap();
    assert_eq!(q["r_ios_per_sec"], 500);
    assert_eq!(q["burst_ms"], 200);
    assert!(parse_mutable(&HashMap::new()).unwrap().is_empty());
    let e = parse_mutable(&map(&[("pool", "other")])).unwrap_err();
    assert!(
        e.contains("parameter pool") && e.contains("only qos.*"),
        "{e}"
    );
}

#[test]
fn host_keys_come_from_the_secret_and_are_never_echoed() {
    let key = "DHHC-1:00:c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0MDAwMDAwMDA=:";
    let psk = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
    let s = map(&[(SECRET_DHCHAP_KEY, key), (SECRET_TLS_PSK, psk)]);
    let m = host_keys(true, Transport::Tls, &s).unwrap();
    assert_eq!(m["dhchap_key"], key);
    assert_eq!(m["psk"], psk);
    assert!(host_keys(false, Transport::Tcp, &s).unwrap().is_empty());
    let e = host_keys(true, Transport::Tcp, &HashMap::new()).unwrap_err();
    assert!(e.contains("secret key dhchapKey: missing"), "{e}");
    let e = host_keys(false, Transport::Tls, &map(&[(SECRET_TLS_PSK, "hunter2")])).unwrap_err();
    assert!(e.contains("tlsPsk") && !e.contains("hunter2"), "{e}");
    let e = host_keys(
        true,
        Transport::Tcp,
        &map(&[(SECRET_DHCHAP_KEY, "hunter2")]),
    )
    .unwrap_err();
    assert!(!e.contains("hunter2"), "{e}");
}
