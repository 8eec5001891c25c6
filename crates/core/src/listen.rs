//! A listener's transport and address as configured: `ADDR:PORT` or
//! `tcp:ADDR:PORT` (NVMe/TCP), `rdma:ADDR:PORT` (NVMe/RDMA); in TOML also
//! the table `{ address = "ADDR:PORT", transport = "rdma" }`, which is
//! stored as the prefixed string so that every other place (reload,
//! management, `save_config`) keeps handling one string per listener.

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::fmt;

/// The transport a listener serves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ListenTransport {
    #[default]
    Tcp,
    Rdma,
}

impl ListenTransport {
    /// TRTYPE of the Discovery Log Page Entry (Fabrics "TRTYPE": 1 RDMA, 3 TCP).
    pub fn trtype(self) -> u8 {
        match self {
            ListenTransport::Tcp => farflash_wire::discovery::TRTYPE_TCP,
            ListenTransport::Rdma => farflash_wire::discovery::TRTYPE_RDMA,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ListenTransport::Tcp => "tcp",
            ListenTransport::Rdma => "rdma",
        }
    }

    /// The transport of a queue's TRTYPE (RDMA, else TCP).
    pub fn from_trtype(t: u8) -> ListenTransport {
        if t == farflash_wire::discovery::TRTYPE_RDMA {
            ListenTransport::Rdma
        } else {
            ListenTransport::Tcp
        }
    }

    pub(crate) fn from_name(s: &str) -> Option<ListenTransport> {
        match s {
            "tcp" => Some(ListenTransport::Tcp),
            "rdma" => Some(ListenTransport::Rdma),
            _ => None,
        }
    }
}

/// Splits a configured listener into its transport and `ADDR:PORT`. A
/// leading `NAME:` of letters before an address that has a port is a
/// transport name (an IPv6 address is bracketed, a host name alone has no
/// second colon); an unknown one is an error naming it.
pub fn split_listen(s: &str) -> Result<(ListenTransport, &str), String> {
    if let Some((name, rest)) = s.split_once(':') {
        if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphabetic()) && rest.contains(':') {
            return match ListenTransport::from_name(&name.to_ascii_lowercase()) {
                Some(t) => Ok((t, rest)),
                None => Err(format!(
                    "listen {s:?}: transport {name:?} is not tcp or rdma"
                )),
            };
        }
    }
    Ok((ListenTransport::Tcp, s))
}

/// The string form of a listener: plain `ADDR:PORT` for TCP.
pub fn join_listen(t: ListenTransport, addr: &str) -> String {
    match t {
        ListenTransport::Tcp => addr.to_owned(),
        ListenTransport::Rdma => format!("rdma:{addr}"),
    }
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
                while let Some(k) = m.next_key::<String>()? {
                    match k.as_str() {
                        "address" => address = Some(m.next_value()?),
                        "transport" => transport = Some(m.next_value()?),
                        other => {
                            return Err(de::Error::custom(format!(
                                "listen: unknown field {other:?} (address, transport)"
                            )))
                        }
                    }
                }
                let address = address
                    .ok_or_else(|| de::Error::custom("listen: missing field \"address\""))?;
                let t = match transport.as_deref() {
                    None => ListenTransport::Tcp,
                    Some(n) => ListenTransport::from_name(n).ok_or_else(|| {
                        de::Error::custom(format!("listen: transport {n:?} is not tcp or rdma"))
                    })?,
                };
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
        assert_eq!(ListenTransport::Rdma.trtype(), 1);
        assert_eq!(ListenTransport::Tcp.trtype(), 3);
    }
}
