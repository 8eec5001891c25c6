//! Asymmetric Namespace Access (Base 2.0 §8.20): each namespace belongs to
//! an ANA group (`anagrpid`, default 1); each group has a state per
//! listener (`[[subsystem.ana]]`, default optimized), for both transports
//! on that address or for one (`transport`, or `listen = "rdma:…"`). The
//! most specific entry wins: an exact address over an unspecified one, then
//! one transport over both. A queue reads the
//! states of its own listener at Connect and whenever the subsystem's
//! namespace generation moves (a state change bumps it), so the I/O path
//! checks a per-queue list that is empty in the common case.

use crate::listen::{split_listen, ListenTransport};
use farflash_wire::ana::{AnaGroup, AnaState, ANAGRPMAX};
use farflash_wire::Status;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// The group of a namespace that names none.
pub const DEFAULT_ANAGRPID: u32 = 1;
/// ANA Transition Time reported in Identify Controller (seconds): a path in
/// the change state leaves it within this time (Base §8.20.5).
pub const ANATT_SECS: u8 = 10;
/// Asynchronous event for an ANA change: type Notice (2), information 03h
/// (ANA Change), log page 0Ch (Base §5.2, Figure "Notice").
pub const AEN_ANA_CHANGE: u32 = 0x000C_0302;

/// One non-default state: group `anagrpid` seen through listener `listen`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnaConfig {
    /// The listener, `ADDR:PORT` as in `listen` (an unspecified address,
    /// 0.0.0.0 or [::], covers every address on that port); `tcp:ADDR:PORT`
    /// or `rdma:ADDR:PORT` names one transport.
    pub listen: String,
    /// "tcp" or "rdma": the state holds for that transport's listener on
    /// the address only. Absent (and no prefix in `listen`): both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// The ANA group, 1..=128 (ANAGRPMAX).
    pub anagrpid: u32,
    /// "optimized", "non-optimized", "inaccessible", "persistent-loss" or "change".
    pub state: String,
}

/// A checked [`AnaConfig`]: the listener's address, its transport (None:
/// both) and the state.
pub type AnaPath = (SocketAddr, Option<ListenTransport>, AnaState);

impl AnaConfig {
    /// The checked entry; the error names the field.
    pub fn parse(&self) -> Result<AnaPath, String> {
        let (t, rest) = split_listen(&self.listen).map_err(|e| format!("ana: {e}"))?;
        // split_listen takes a plain address as TCP: only a prefix names one.
        let prefixed = (rest.len() != self.listen.len()).then_some(t);
        let addr: SocketAddr = rest.parse().map_err(|_| {
            format!(
                "ana: listen {:?} is not [tcp:|rdma:]ADDR:PORT (IPv6 as [::1]:4420)",
                self.listen
            )
        })?;
        let field = match &self.transport {
            None => None,
            Some(n) => Some(ListenTransport::from_name(n).ok_or_else(|| {
                format!("ana: transport {n:?} is not {}", crate::listen::one_of(&[]))
            })?),
        };
        let transport = match (prefixed, field) {
            (Some(a), Some(b)) if a != b => {
                return Err(format!(
                    "ana: listen {:?} names {} but transport is {:?}",
                    self.listen,
                    a.name(),
                    b.name()
                ))
            }
            (a, b) => a.or(b),
        };
        check_anagrpid(self.anagrpid).map_err(|e| format!("ana: {e}"))?;
        let state = AnaState::from_name(&self.state).ok_or_else(|| {
            format!(
                "ana: state {:?} is not one of optimized, non-optimized, inaccessible, persistent-loss, change",
                self.state
            )
        })?;
        Ok((addr, transport, state))
    }
}

/// ANA group IDs run from 1 to ANAGRPMAX (Base §8.20.2: 0 is not a group).
pub fn check_anagrpid(id: u32) -> Result<(), String> {
    if (1..=ANAGRPMAX).contains(&id) {
        Ok(())
    } else {
        Err(format!("anagrpid {id} is outside 1..={ANAGRPMAX}"))
    }
}

/// Checks a subsystem's `ana` list: each entry valid, no (listener, group) twice.
pub fn validate(list: &[AnaConfig]) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for a in list {
        let (addr, t, _) = a.parse()?;
        if !seen.insert((addr, t, a.anagrpid)) {
            return Err(format!(
                "ana: listener {}{} group {} is listed twice",
                t.map(|t| format!("{}:", t.name())).unwrap_or_default(),
                addr,
                a.anagrpid
            ));
        }
    }
    Ok(())
}

/// A subsystem's ANA states, resolved.
#[derive(Debug, Default)]
pub struct AnaTable {
    /// As configured (for `save_config` and the management API).
    pub config: Vec<AnaConfig>,
    entries: Vec<(SocketAddr, Option<ListenTransport>, u32, AnaState)>,
}

/// Whether listener address `l` is the one a connection reached at `local`.
fn covers(l: &SocketAddr, local: &SocketAddr) -> bool {
    l.port() == local.port() && (l.ip() == local.ip() || l.ip().is_unspecified())
}

impl AnaTable {
    /// Builds the table from a validated list (invalid entries are skipped).
    pub fn build(config: &[AnaConfig]) -> AnaTable {
        let entries = config
            .iter()
            .filter_map(|a| a.parse().ok().map(|(addr, t, s)| (addr, t, a.anagrpid, s)))
            .collect();
        AnaTable {
            config: config.to_vec(),
            entries,
        }
    }

    /// Whether group `grp` is optimized through at least one of
    /// `listeners`: then this target owns storage it shares with others
    /// (`Backend::set_ana_optimized`, docs/rbd.md).
    pub fn optimized_on_any(&self, listeners: &[(SocketAddr, ListenTransport)], grp: u32) -> bool {
        listeners
            .iter()
            .any(|(l, t)| self.state(*t, l, grp) == AnaState::Optimized)
    }

    /// The state of group `grp` through the listener of transport `t` a
    /// connection reached at `local`: of the entries that cover it, an
    /// exact address wins over an unspecified one, then an entry for `t`
    /// over one for both transports.
    pub fn state(&self, t: ListenTransport, local: &SocketAddr, grp: u32) -> AnaState {
        let mut best: Option<(u8, AnaState)> = None;
        for (l, tr, g, s) in &self.entries {
            if *g != grp || !covers(l, local) || tr.is_some_and(|x| x != t) {
                continue;
            }
            let rank = 2 * u8::from(l.ip() == local.ip()) + u8::from(tr.is_some());
            if best.is_none_or(|(r, _)| rank > r) {
                best = Some((rank, *s));
            }
        }
        best.map(|(_, s)| s).unwrap_or_default()
    }

    /// The groups whose data cannot be reached through `local` (transport
    /// `t`), for a queue's I/O check (empty when every group is accessible
    /// there).
    pub fn blocked(&self, t: ListenTransport, local: &SocketAddr) -> Vec<(u32, AnaState)> {
        let mut out: Vec<(u32, AnaState)> = Vec::new();
        for &(_, _, g, _) in &self.entries {
            let s = self.state(t, local, g);
            if !s.accessible() && !out.iter().any(|(x, _)| *x == g) {
                out.push((g, s));
            }
        }
        out
    }
}

/// The path-related status for a command on a namespace in `state`
/// (Base §8.20.3.3-5), None when it runs.
pub fn status(state: AnaState) -> Option<Status> {
    match state {
        AnaState::Optimized | AnaState::NonOptimized => None,
        AnaState::Inaccessible => Some(Status::ANA_INACCESSIBLE),
        AnaState::PersistentLoss => Some(Status::ANA_PERSISTENT_LOSS),
        AnaState::Change => Some(Status::ANA_TRANSITION),
    }
}

/// The ANA log page's groups for a controller whose admin queue reached
/// `local` over transport `t`: each group that holds namespaces, ascending, with its NSIDs.
pub fn log_groups(
    table: &AnaTable,
    namespaces: impl Iterator<Item = (u32, u32)>,
    t: ListenTransport,
    local: &SocketAddr,
    chgcnt: u64,
) -> Vec<AnaGroup> {
    let mut groups: Vec<AnaGroup> = Vec::new();
    for (nsid, grp) in namespaces {
        match groups.iter_mut().find(|g| g.anagrpid == grp) {
            Some(g) => g.nsids.push(nsid),
            None => groups.push(AnaGroup {
                anagrpid: grp,
                chgcnt,
                state: table.state(t, local, grp),
                nsids: vec![nsid],
            }),
        }
    }
    groups.sort_by_key(|g| g.anagrpid);
    for g in &mut groups {
        g.nsids.sort_unstable();
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(listen: &str, grp: u32, state: &str) -> AnaConfig {
        AnaConfig {
            listen: listen.into(),
            transport: None,
            anagrpid: grp,
            state: state.into(),
        }
    }

    const TCP: ListenTransport = ListenTransport::Tcp;
    const RDMA: ListenTransport = ListenTransport::Rdma;

    #[test]
    fn states_per_listener_and_group() {
        let t = AnaTable::build(&[
            entry("127.0.0.1:4420", 1, "inaccessible"),
            entry("0.0.0.0:4421", 2, "non-optimized"),
            entry("0.0.0.0:4421", 1, "change"),
            entry("127.0.0.2:4421", 1, "persistent-loss"),
        ]);
        let a: SocketAddr = "127.0.0.1:4420".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:4421".parse().unwrap();
        let b2: SocketAddr = "127.0.0.2:4421".parse().unwrap();
        assert_eq!(t.state(TCP, &a, 1), AnaState::Inaccessible);
        assert_eq!(t.state(TCP, &a, 2), AnaState::Optimized);
        assert_eq!(t.state(TCP, &b, 2), AnaState::NonOptimized);
        assert_eq!(t.state(TCP, &b, 1), AnaState::Change);
        assert_eq!(
            t.state(TCP, &b2, 1),
            AnaState::PersistentLoss,
            "exact address wins"
        );
        assert_eq!(t.blocked(TCP, &a), vec![(1, AnaState::Inaccessible)]);
        assert_eq!(t.blocked(TCP, &b), vec![(1, AnaState::Change)]);
        assert!(t.blocked(TCP, &"127.0.0.1:9".parse().unwrap()).is_empty());
        assert_eq!(
            status(AnaState::Inaccessible),
            Some(Status::ANA_INACCESSIBLE)
        );
        assert_eq!(status(AnaState::Change), Some(Status::ANA_TRANSITION));
        assert_eq!(status(AnaState::NonOptimized), None);

        let g = log_groups(&t, [(3, 2), (1, 1), (2, 1)].into_iter(), TCP, &b, 9);
        assert_eq!(g.len(), 2);
        assert_eq!(
            (g[0].anagrpid, g[0].state, &g[0].nsids[..]),
            (1, AnaState::Change, &[1, 2][..])
        );
        assert_eq!(
            (g[1].anagrpid, g[1].state, g[1].chgcnt),
            (2, AnaState::NonOptimized, 9)
        );
    }

    #[test]
    fn bad_entries_name_the_field() {
        let e = validate(&[entry("localhost", 1, "optimized")]).unwrap_err();
        assert!(e.contains("listen"), "{e}");
        let e = validate(&[entry("127.0.0.1:1", 0, "optimized")]).unwrap_err();
        assert!(e.contains("anagrpid 0"), "{e}");
        let e = validate(&[entry("127.0.0.1:1", 129, "optimized")]).unwrap_err();
        assert!(e.contains("anagrpid 129"), "{e}");
        let e = validate(&[entry("127.0.0.1:1", 1, "dead")]).unwrap_err();
        assert!(e.contains("state"), "{e}");
        let e = validate(&[
            entry("127.0.0.1:1", 1, "change"),
            entry("127.0.0.1:1", 1, "optimized"),
        ])
        .unwrap_err();
        assert!(e.contains("twice"), "{e}");
        assert!(validate(&[entry("[::1]:4420", 128, "persistent-loss")]).is_ok());
        let e = validate(&[entry("roce:127.0.0.1:1", 1, "change")]).unwrap_err();
        assert!(e.contains("roce"), "{e}");
        let e = validate(&[AnaConfig {
            transport: Some("iwarp".into()),
            ..entry("127.0.0.1:1", 1, "change")
        }])
        .unwrap_err();
        assert!(e.contains("transport \"iwarp\" is not tcp"), "{e}");
        let e = validate(&[AnaConfig {
            transport: Some("tcp".into()),
            ..entry("rdma:127.0.0.1:1", 1, "change")
        }])
        .unwrap_err();
        assert!(e.contains("transport is \"tcp\""), "{e}");
        // One per transport and one for both on an address are distinct...
        assert!(validate(&[
            entry("127.0.0.1:1", 1, "change"),
            entry("rdma:127.0.0.1:1", 1, "optimized"),
            entry("tcp:127.0.0.1:1", 1, "inaccessible"),
        ])
        .is_ok());
        // ...but the prefix and the field name the same one.
        let e = validate(&[
            entry("rdma:127.0.0.1:1", 1, "change"),
            AnaConfig {
                transport: Some("rdma".into()),
                ..entry("127.0.0.1:1", 1, "optimized")
            },
        ])
        .unwrap_err();
        assert!(
            e.contains("rdma:127.0.0.1:1 group 1 is listed twice"),
            "{e}"
        );
    }

    #[test]
    fn states_per_transport_on_one_address() {
        let a: SocketAddr = "10.0.2.15:4420".parse().unwrap();
        // Both transports by default.
        let t = AnaTable::build(&[entry("10.0.2.15:4420", 1, "inaccessible")]);
        assert_eq!(t.state(TCP, &a, 1), AnaState::Inaccessible);
        assert_eq!(t.state(RDMA, &a, 1), AnaState::Inaccessible);
        // One transport, by prefix or by field: the other keeps its own.
        for rdma_only in [
            entry("rdma:10.0.2.15:4420", 1, "non-optimized"),
            AnaConfig {
                transport: Some("rdma".into()),
                ..entry("10.0.2.15:4420", 1, "non-optimized")
            },
        ] {
            let t = AnaTable::build(&[rdma_only]);
            assert_eq!(t.state(RDMA, &a, 1), AnaState::NonOptimized);
            assert_eq!(t.state(TCP, &a, 1), AnaState::Optimized);
            assert!(t.blocked(RDMA, &a).is_empty());
        }
        // A transport's entry wins over one for both; an exact address
        // wins over an unspecified one, whatever the transport.
        let t = AnaTable::build(&[
            entry("10.0.2.15:4420", 1, "inaccessible"),
            entry("rdma:10.0.2.15:4420", 1, "optimized"),
            entry("tcp:0.0.0.0:4420", 2, "change"),
            entry("10.0.2.15:4420", 2, "non-optimized"),
        ]);
        assert_eq!(t.state(RDMA, &a, 1), AnaState::Optimized);
        assert_eq!(t.state(TCP, &a, 1), AnaState::Inaccessible);
        assert_eq!(t.state(TCP, &a, 2), AnaState::NonOptimized);
        let other: SocketAddr = "10.0.2.16:4420".parse().unwrap();
        assert_eq!(t.state(TCP, &other, 2), AnaState::Change);
        assert_eq!(t.state(RDMA, &other, 2), AnaState::Optimized);
        assert_eq!(t.blocked(TCP, &a), vec![(1, AnaState::Inaccessible)]);
        assert!(t.blocked(RDMA, &a).is_empty());
        assert!(t.optimized_on_any(&[(a, RDMA)], 1));
        assert!(!t.optimized_on_any(&[(a, TCP)], 1));
        let g = log_groups(&t, [(1, 1)].into_iter(), RDMA, &a, 3);
        assert_eq!(g[0].state, AnaState::Optimized);
        let g = log_groups(&t, [(1, 1)].into_iter(), TCP, &a, 3);
        assert_eq!(g[0].state, AnaState::Inaccessible);
    }

    #[test]
    fn transport_entries_in_toml() {
        #[derive(Deserialize)]
        struct Sub {
            ana: Vec<AnaConfig>,
        }
        let s: Sub = toml::from_str(
            "[[ana]]\nlisten = '10.0.2.15:4420'\ntransport = 'rdma'\nanagrpid = 1\nstate = 'change'\n\
             [[ana]]\nlisten = 'tcp:10.0.2.15:4420'\nanagrpid = 1\nstate = 'inaccessible'\n",
        )
        .unwrap();
        assert_eq!(
            s.ana[0].parse(),
            Ok((
                "10.0.2.15:4420".parse().unwrap(),
                Some(RDMA),
                AnaState::Change
            ))
        );
        assert_eq!(s.ana[1].parse().unwrap().1, Some(TCP));
        // Entries for both transports are written as before (no field).
        let out = toml::to_string(&entry("10.0.2.15:4420", 1, "change")).unwrap();
        assert!(!out.contains("transport"), "{out}");
    }
}
