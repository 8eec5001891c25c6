//! Asymmetric Namespace Access (Base 2.0 §8.20): each namespace belongs to
//! an ANA group (`anagrpid`, default 1); each group has a state per
//! listener (`[[subsystem.ana]]`, default optimized). A queue reads the
//! states of its own listener at Connect and whenever the subsystem's
//! namespace generation moves (a state change bumps it), so the I/O path
//! checks a per-queue list that is empty in the common case.

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
    /// 0.0.0.0 or [::], covers every address on that port).
    pub listen: String,
    /// The ANA group, 1..=128 (ANAGRPMAX).
    pub anagrpid: u32,
    /// "optimized", "non-optimized", "inaccessible", "persistent-loss" or "change".
    pub state: String,
}

impl AnaConfig {
    /// The checked entry: listener address and state; the error names the field.
    pub fn parse(&self) -> Result<(SocketAddr, AnaState), String> {
        let addr: SocketAddr = self.listen.parse().map_err(|_| {
            format!(
                "ana: listen {:?} is not ADDR:PORT (IPv6 as [::1]:4420)",
                self.listen
            )
        })?;
        check_anagrpid(self.anagrpid).map_err(|e| format!("ana: {e}"))?;
        let state = AnaState::from_name(&self.state).ok_or_else(|| {
            format!(
                "ana: state {:?} is not one of optimized, non-optimized, inaccessible, persistent-loss, change",
                self.state
            )
        })?;
        Ok((addr, state))
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
        let (addr, _) = a.parse()?;
        if !seen.insert((addr, a.anagrpid)) {
            return Err(format!(
                "ana: listener {} group {} is listed twice",
                a.listen, a.anagrpid
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
    entries: Vec<(SocketAddr, u32, AnaState)>,
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
            .filter_map(|a| a.parse().ok().map(|(addr, s)| (addr, a.anagrpid, s)))
            .collect();
        AnaTable {
            config: config.to_vec(),
            entries,
        }
    }

    /// Whether group `grp` is optimized through at least one of
    /// `listeners`: then this target owns storage it shares with others
    /// (`Backend::set_ana_optimized`, docs/rbd.md).
    pub fn optimized_on_any(&self, listeners: &[SocketAddr], grp: u32) -> bool {
        listeners
            .iter()
            .any(|l| self.state(l, grp) == AnaState::Optimized)
    }

    /// The state of group `grp` through the listener a connection reached
    /// at `local` (an exact address wins over an unspecified one).
    pub fn state(&self, local: &SocketAddr, grp: u32) -> AnaState {
        let mut found = None;
        for (l, g, s) in &self.entries {
            if *g == grp && covers(l, local) {
                if l.ip() == local.ip() {
                    return *s;
                }
                found = Some(*s);
            }
        }
        found.unwrap_or_default()
    }

    /// The groups whose data cannot be reached through `local`, for a
    /// queue's I/O check (empty when every group is accessible there).
    pub fn blocked(&self, local: &SocketAddr) -> Vec<(u32, AnaState)> {
        let mut out: Vec<(u32, AnaState)> = Vec::new();
        for &(_, g, _) in &self.entries {
            let s = self.state(local, g);
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
/// `local`: each group that holds namespaces, ascending, with its NSIDs.
pub fn log_groups(
    table: &AnaTable,
    namespaces: impl Iterator<Item = (u32, u32)>,
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
                state: table.state(local, grp),
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
            anagrpid: grp,
            state: state.into(),
        }
    }

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
        assert_eq!(t.state(&a, 1), AnaState::Inaccessible);
        assert_eq!(t.state(&a, 2), AnaState::Optimized);
        assert_eq!(t.state(&b, 2), AnaState::NonOptimized);
        assert_eq!(t.state(&b, 1), AnaState::Change);
        assert_eq!(
            t.state(&b2, 1),
            AnaState::PersistentLoss,
            "exact address wins"
        );
        assert_eq!(t.blocked(&a), vec![(1, AnaState::Inaccessible)]);
        assert_eq!(t.blocked(&b), vec![(1, AnaState::Change)]);
        assert!(t.blocked(&"127.0.0.1:9".parse().unwrap()).is_empty());
        assert_eq!(
            status(AnaState::Inaccessible),
            Some(Status::ANA_INACCESSIBLE)
        );
        assert_eq!(status(AnaState::Change), Some(Status::ANA_TRANSITION));
        assert_eq!(status(AnaState::NonOptimized), None);

        let g = log_groups(&t, [(3, 2), (1, 1), (2, 1)].into_iter(), &b, 9);
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
    }
}
