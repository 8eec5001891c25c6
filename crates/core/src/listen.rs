//! A listener's transport and address as configured: `ADDR:PORT` or
//! `tcp:ADDR:PORT` (NVMe/TCP), `rdma:ADDR:PORT` (NVMe/RDMA); in TOML also
//! the table `{ address = "ADDR:PORT", transport = "rdma" }`, which is
//! stored as the prefixed string so that every other place (reload,
//! management, `save_config`) keeps handling one string per listener.
//! Other transports name themselves the same way (`NAME:ADDR:PORT`,
//! `transport = "NAME"`) once they [`register`] (the event loops' side of
//! a transport registers there too: `farflash_transport::register`).
//!
//! NVMe/TCP's secure channel (TCP Transport Specification 1.0 §3.6.1, TP
//! 8011) is a property of the listener, as Linux nvmet's `addr_treq` is of
//! its port: `tls:ADDR:PORT` requires TLS, `tls-optional:ADDR:PORT` takes
//! TLS and plaintext on one port (the first byte decides), and in TOML
//! `{ address = "ADDR:PORT", secure_channel = "required" | "optional" |
//! "none" }`.

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::fmt;
use std::sync::RwLock;

/// The transport a listener serves: its name in listen addresses
/// (`NAME:ADDR:PORT`, `transport = "NAME"`) and its TRTYPE (Fabrics
/// "TRTYPE", the discovery log's). NVMe/TCP ([`ListenTransport::Tcp`], the
/// default: a plain `ADDR:PORT`) and NVMe/RDMA ([`ListenTransport::Rdma`])
/// are built in; any other transport is known once [`register`]ed, and
/// from then on its name parses everywhere a listen address does (config
/// files, `--listen`, the management API, `save_config`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenTransport {
    name: &'static str,
    trtype: u8,
}

/// The transports every target knows.
const BUILT_IN: [ListenTransport; 2] = [ListenTransport::Tcp, ListenTransport::Rdma];

/// The prefixes that are NVMe/TCP with a secure channel, not transports.
const SECURE_PREFIXES: [&str; 2] = ["tls", "tls-optional"];

/// Transports [`register`]ed at run time, in the order they were.
static REGISTERED: RwLock<Vec<ListenTransport>> = RwLock::new(Vec::new());

#[allow(non_upper_case_globals)] // named as the enum variants they were
impl ListenTransport {
    /// NVMe/TCP (TRTYPE 3).
    pub const Tcp: ListenTransport = ListenTransport {
        name: "tcp",
        trtype: farflash_wire::discovery::TRTYPE_TCP,
    };
    /// NVMe/RDMA (TRTYPE 1).
    pub const Rdma: ListenTransport = ListenTransport {
        name: "rdma",
        trtype: farflash_wire::discovery::TRTYPE_RDMA,
    };

    /// A transport named `name` (lower case letters and `-`) with TRTYPE
    /// `trtype`; it parses once [`register`]ed.
    pub const fn new(name: &'static str, trtype: u8) -> ListenTransport {
        ListenTransport { name, trtype }
    }

    /// TRTYPE of the Discovery Log Page Entry (Fabrics "TRTYPE": 1 RDMA, 3 TCP).
    pub fn trtype(self) -> u8 {
        self.trtype
    }

    pub fn name(self) -> &'static str {
        self.name
    }

    /// The transport of a queue's TRTYPE: the first known one with it, else TCP.
    pub fn from_trtype(t: u8) -> ListenTransport {
        known()
            .into_iter()
            .find(|k| k.trtype == t)
            .unwrap_or(ListenTransport::Tcp)
    }

    /// The known transport named `s` (as written: lower case).
    pub fn from_name(s: &str) -> Option<ListenTransport> {
        known().into_iter().find(|k| k.name == s)
    }
}

impl Default for ListenTransport {
    fn default() -> ListenTransport {
        ListenTransport::Tcp
    }
}

impl fmt::Debug for ListenTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl fmt::Display for ListenTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// Makes transport `t` known to every listen-address parser of this
/// process (call it before the configuration is read). Registering a known
/// transport again is a no-op; the error names what clashes: a name not of
/// lower case letters and `-`, a secure-channel prefix (`tls`,
/// `tls-optional`), or a known name with another TRTYPE.
pub fn register(t: ListenTransport) -> Result<(), String> {
    let name = t.name;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-') {
        return Err(format!(
            "transport name {name:?} is not lower case letters and '-'"
        ));
    }
    if SECURE_PREFIXES.contains(&name) {
        return Err(format!(
            "transport name {name:?} is NVMe/TCP's secure-channel prefix"
        ));
    }
    let mut reg = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    match BUILT_IN.iter().chain(reg.iter()).find(|k| k.name == name) {
        Some(k) if *k == t => Ok(()),
        Some(k) => Err(format!(
            "transport {name:?} is already known, with TRTYPE {}",
            k.trtype
        )),
        None => {
            reg.push(t);
            Ok(())
        }
    }
}

/// Every known transport: the built-in ones, then the registered.
pub fn known() -> Vec<ListenTransport> {
    let reg = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
    BUILT_IN.iter().chain(reg.iter()).copied().collect()
}

/// `a, b or c`: the known transports' names (then `extra`), for errors.
pub(crate) fn one_of(extra: &[&str]) -> String {
    let known = known();
    let names: Vec<&str> = known
        .iter()
        .map(|k| k.name)
        .chain(extra.iter().copied())
        .collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.concat(),
    }
}

/// Whether a TCP listener runs NVMe/TCP over TLS (TCP §3.6.1; the
/// discovery log's TREQ secure channel field, Fabrics "TREQ" bits 1:0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SecureChannel {
    /// Plaintext only (TREQ 00b "not specified", SECTYPE none); a TLS
    /// ClientHello is refused with a close.
    #[default]
    None,
    /// TLS or plaintext, told apart by the first byte (TREQ 10b "not
    /// required", SECTYPE TLS 1.3), as Linux nvmet-tcp does for a port
    /// whose `addr_treq` is "not required".
    Optional,
    /// TLS only (TREQ 01b "required", SECTYPE TLS 1.3); a plaintext ICReq
    /// is refused with a close.
    Required,
}

impl SecureChannel {
    /// The listener-string prefix (`tls:`, `tls-optional:`), none for plaintext.
    pub fn prefix(self) -> &'static str {
        match self {
            SecureChannel::None => "",
            SecureChannel::Optional => "tls-optional:",
            SecureChannel::Required => "tls:",
        }
    }

    /// The TOML / management name.
    pub fn name(self) -> &'static str {
        match self {
            SecureChannel::None => "none",
            SecureChannel::Optional => "optional",
            SecureChannel::Required => "required",
        }
    }

    /// By [`SecureChannel::name`]; also nvmet's `addr_treq` spellings.
    pub fn from_name(s: &str) -> Option<SecureChannel> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" | "not specified" | "not-specified" => Some(SecureChannel::None),
            "optional" | "not required" | "not-required" => Some(SecureChannel::Optional),
            "required" => Some(SecureChannel::Required),
            _ => None,
        }
    }
}

/// Splits a configured listener into its transport and `ADDR:PORT`. A
/// leading `NAME:` of letters (and `-`) before an address that has a port
/// is a transport name (an IPv6 address is bracketed, a host name alone
/// has no second colon); an unknown one is an error naming it. `tls` and
/// `tls-optional` are NVMe/TCP with a secure channel ([`listen_secure`]).
pub fn split_listen(s: &str) -> Result<(ListenTransport, &str), String> {
    listen_parts(s).map(|(t, _, a)| (t, a))
}

/// The secure channel of a configured listener (`tls:`, `tls-optional:`
/// prefixes); plaintext for anything else, RDMA included.
pub fn listen_secure(s: &str) -> SecureChannel {
    listen_parts(s).map_or(SecureChannel::None, |(_, sc, _)| sc)
}

fn listen_parts(s: &str) -> Result<(ListenTransport, SecureChannel, &str), String> {
    if let Some((name, rest)) = s.split_once(':') {
        if !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-')
            && rest.contains(':')
        {
            let lower = name.to_ascii_lowercase();
            return match lower.as_str() {
                "tls" => Ok((ListenTransport::Tcp, SecureChannel::Required, rest)),
                "tls-optional" => Ok((ListenTransport::Tcp, SecureChannel::Optional, rest)),
                _ => match ListenTransport::from_name(&lower) {
                    Some(t) => Ok((t, SecureChannel::None, rest)),
                    None => Err(format!(
                        "listen {s:?}: transport {name:?} is not {}",
                        one_of(&SECURE_PREFIXES)
                    )),
                },
            };
        }
    }
    Ok((ListenTransport::Tcp, SecureChannel::None, s))
}

/// The string form of a listener: plain `ADDR:PORT` for TCP, else
/// `NAME:ADDR:PORT`.
pub fn join_listen(t: ListenTransport, addr: &str) -> String {
    if t == ListenTransport::Tcp {
        addr.to_owned()
    } else {
        format!("{}:{addr}", t.name)
    }
}

/// The string form of a TCP listener with its secure channel.
pub fn join_listen_secure(sc: SecureChannel, addr: &str) -> String {
    format!("{}{addr}", sc.prefix())
}

/// `listen = [...]`: strings, or tables with `address` and `transport`.
pub(crate) fn deserialize_listen<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct Entries;
    impl<'de> Visitor<'de> for Entries {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of listeners (\"[rdma:]ADDR:PORT\" or { address, transport })")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            let mut v = Vec::new();
            while let Some(Entry(s)) = seq.next_element()? {
                v.push(s);
            }
            Ok(v)
        }
    }
    d.deserialize_seq(Entries)
}

struct Entry(String);

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Entry, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entry;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"[rdma:]ADDR:PORT\" or { address = \"ADDR:PORT\", transport = \"tcp\" | \"rdma\" }")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Entry, E> {
                Ok(Entry(s.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Entry, A::Error> {
                let (mut address, mut transport) = (None::<String>, None::<String>);
                let mut secure = None::<String>;
                while let Some(k) = m.next_key::<String>()? {
                    match k.as_str() {
                        "address" => address = Some(m.next_value()?),
                        "transport" => transport = Some(m.next_value()?),
                        "secure_channel" => secure = Some(m.next_value()?),
                        other => {
                            return Err(de::Error::custom(format!(
                            "listen: unknown field {other:?} (address, transport, secure_channel)"
                        )))
                        }
                    }
                }
                let address = address
                    .ok_or_else(|| de::Error::custom("listen: missing field \"address\""))?;
                let t = match transport.as_deref() {
                    None => ListenTransport::Tcp,
                    Some(n) => ListenTransport::from_name(n).ok_or_else(|| {
                        de::Error::custom(format!("listen: transport {n:?} is not {}", one_of(&[])))
                    })?,
                };
                let sc = match secure.as_deref() {
                    None => SecureChannel::None,
                    Some(n) => SecureChannel::from_name(n).ok_or_else(|| {
                        de::Error::custom(format!(
                            "listen: secure_channel {n:?} is not none, optional or required"
                        ))
                    })?,
                };
                if sc != SecureChannel::None {
                    if t != ListenTransport::Tcp {
                        return Err(de::Error::custom(format!(
                            "listen: a secure_channel is NVMe/TCP's (TLS); not for {t}"
                        )));
                    }
                    return Ok(Entry(join_listen_secure(sc, &address)));
                }
                Ok(Entry(join_listen(t, &address)))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_plain_addresses() {
        assert_eq!(
            split_listen("10.0.2.15:4420"),
            Ok((ListenTransport::Tcp, "10.0.2.15:4420"))
        );
        assert_eq!(
            split_listen("rdma:10.0.2.15:4420"),
            Ok((ListenTransport::Rdma, "10.0.2.15:4420"))
        );
        assert_eq!(
            split_listen("tcp:[::1]:4420"),
            Ok((ListenTransport::Tcp, "[::1]:4420"))
        );
        assert_eq!(
            split_listen("[::1]:4420"),
            Ok((ListenTransport::Tcp, "[::1]:4420"))
        );
        // A host name with a port is an address, not a transport.
        assert_eq!(
            split_listen("localhost:4420"),
            Ok((ListenTransport::Tcp, "localhost:4420"))
        );
        let e = split_listen("roce:10.0.2.15:4420").unwrap_err();
        assert!(e.contains("transport \"roce\""), "{e}");
        assert_eq!(
            join_listen(ListenTransport::Rdma, "1.2.3.4:1"),
            "rdma:1.2.3.4:1"
        );
        assert_eq!(
            split_listen("tls:10.0.2.15:4420"),
            Ok((ListenTransport::Tcp, "10.0.2.15:4420"))
        );
        assert_eq!(listen_secure("tls:[::1]:4420"), SecureChannel::Required);
        assert_eq!(
            listen_secure("TLS-optional:1.2.3.4:1"),
            SecureChannel::Optional
        );
        assert_eq!(listen_secure("rdma:1.2.3.4:1"), SecureChannel::None);
        assert_eq!(listen_secure("1.2.3.4:1"), SecureChannel::None);
        let e = split_listen("tls-maybe:10.0.2.15:4420").unwrap_err();
        assert!(e.contains("tls-maybe"), "{e}");
        assert_eq!(
            join_listen_secure(SecureChannel::Optional, "1.2.3.4:1"),
            "tls-optional:1.2.3.4:1"
        );
        assert_eq!(ListenTransport::Rdma.trtype(), 1);
        assert_eq!(ListenTransport::Tcp.trtype(), 3);
    }

    #[test]
    fn a_registered_transport_parses_and_clashes_are_refused() {
        // Fibre Channel's TRTYPE (Fabrics "TRTYPE" 2); no other test names it.
        const FC: ListenTransport = ListenTransport::new("fc", 2);
        let e = split_listen("fc:10.0.2.15:4420").unwrap_err();
        assert!(e.contains("is not tcp, rdma"), "{e}");
        register(FC).expect("register");
        register(FC).expect("again: a no-op");
        assert_eq!(
            split_listen("FC:10.0.2.15:4420"),
            Ok((FC, "10.0.2.15:4420"))
        );
        assert_eq!(join_listen(FC, "10.0.2.15:4420"), "fc:10.0.2.15:4420");
        assert_eq!(listen_secure("fc:10.0.2.15:4420"), SecureChannel::None);
        assert_eq!(ListenTransport::from_name("fc"), Some(FC));
        assert_eq!(ListenTransport::from_trtype(2), FC);
        assert_eq!(ListenTransport::from_trtype(3), ListenTransport::Tcp);
        assert_eq!(format!("{FC} {FC:?}"), "fc fc");
        let e = split_listen("roce:10.0.2.15:4420").unwrap_err();
        assert!(
            e.contains(", fc,") && e.ends_with("tls or tls-optional"),
            "{e}"
        );
        // Built-in ones again are no-ops; clashes name what clashes.
        register(ListenTransport::Rdma).expect("built in");
        let e = register(ListenTransport::new("rdma", 3)).unwrap_err();
        assert!(e.contains("\"rdma\"") && e.contains("TRTYPE 1"), "{e}");
        let e = register(ListenTransport::new("fc", 9)).unwrap_err();
        assert!(e.contains("TRTYPE 2"), "{e}");
        let e = register(ListenTransport::new("tls-optional", 3)).unwrap_err();
        assert!(e.contains("secure-channel"), "{e}");
        for bad in ["", "Fc", "f c", "fc2"] {
            let e = register(ListenTransport::new(bad, 2)).unwrap_err();
            assert!(e.contains("lower case"), "{bad:?}: {e}");
        }
    }
}
