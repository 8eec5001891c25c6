//! The CNTLID range a subsystem hands out (`cntlid_min` / `cntlid_max`, as
//! nvmetcli's `attr_cntlid_min` / `attr_cntlid_max`). Two targets that
//! export one subsystem for multipath give it disjoint ranges, so a host
//! never sees two controllers of the subsystem with the same CNTLID
//! (Base §3.1.1: a CNTLID is unique within the NVM subsystem).

/// Highest CNTLID of the dynamic model (Base §3.1.1: FFF0h..FFFFh are reserved).
pub const MAX_CNTLID: u16 = 0xFFEF;

/// An inclusive CNTLID range, `1 <= min <= max <= MAX_CNTLID`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CntlidRange {
    pub min: u16,
    pub max: u16,
}

impl Default for CntlidRange {
    fn default() -> CntlidRange {
        CntlidRange {
            min: 1,
            max: MAX_CNTLID,
        }
    }
}

impl CntlidRange {
    /// The range of the optional `cntlid_min` / `cntlid_max` settings, or an
    /// error that names the field at fault.
    pub fn from_config(min: Option<u16>, max: Option<u16>) -> Result<CntlidRange, String> {
        let d = CntlidRange::default();
        let r = CntlidRange {
            min: min.unwrap_or(d.min),
            max: max.unwrap_or(d.max),
        };
        if r.min == 0 || r.min > MAX_CNTLID {
            return Err(format!(
                "cntlid_min {} must be within 1..={MAX_CNTLID}",
                r.min
            ));
        }
        if r.max == 0 || r.max > MAX_CNTLID {
            return Err(format!(
                "cntlid_max {} must be within 1..={MAX_CNTLID}",
                r.max
            ));
        }
        if r.min > r.max {
            return Err(format!(
                "cntlid_min {} must not exceed cntlid_max {}",
                r.min, r.max
            ));
        }
        Ok(r)
    }

    pub fn contains(&self, id: u16) -> bool {
        (self.min..=self.max).contains(&id)
    }

    /// Number of CNTLIDs in the range.
    pub fn len(&self) -> u32 {
        self.max as u32 - self.min as u32 + 1
    }

    /// Never true: a range holds at least one CNTLID.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The CNTLID after `id` within the range, wrapping to `min`.
    pub fn after(&self, id: u16) -> u16 {
        if id >= self.max || id < self.min {
            self.min
        } else {
            id + 1
        }
    }

    /// Where a search for a free CNTLID starts given the target-wide
    /// cursor `next`: the cursor if it is inside, otherwise `min`.
    pub fn start(&self, next: u16) -> u16 {
        if self.contains(next) {
            next
        } else {
            self.min
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_checked_and_name_the_field() {
        assert_eq!(
            CntlidRange::from_config(None, None),
            Ok(CntlidRange::default())
        );
        assert_eq!(
            CntlidRange::from_config(Some(100), Some(199)),
            Ok(CntlidRange { min: 100, max: 199 })
        );
        assert!(CntlidRange::from_config(Some(0), None)
            .unwrap_err()
            .contains("cntlid_min"));
        assert!(CntlidRange::from_config(None, Some(0xFFF0))
            .unwrap_err()
            .contains("cntlid_max"));
        assert!(CntlidRange::from_config(Some(10), Some(9))
            .unwrap_err()
            .contains("must not exceed"));
        assert_eq!(
            CntlidRange::from_config(Some(5), Some(5)).map(|r| r.len()),
            Ok(1)
        );
    }

    /// Connects through the command layer: the subsystem's controllers get
    /// CNTLIDs from its range only, and a Connect past its end is refused
    /// with Controller Busy (Fabrics §6.3) until one is freed.
    #[test]
    fn controllers_get_cntlids_from_the_subsystem_range() {
        use crate::config::{BackendKind, Config, NamespaceConfig, SubsystemConfig};
        use crate::{testing::build_subsystems, NvmeQueue, Target};
        use farflash_wire::fabrics::CNTLID_DYNAMIC;
        use farflash_wire::Status;
        const NQN: &str = "nqn.2026-11.io.farflash:cntlid";
        let cfg = Config {
            listen: vec!["127.0.0.1:4420".into()],
            transport: Default::default(),
            subsystems: vec![SubsystemConfig {
                cntlid_min: Some(100),
                cntlid_max: Some(101),
                ..SubsystemConfig::new(
                    NQN,
                    vec![NamespaceConfig::sized(BackendKind::Null, 1 << 20)],
                )
            }],
            pools: Vec::new(),
        };
        cfg.validate().unwrap();
        let subs = build_subsystems(&cfg).unwrap();
        assert_eq!(subs[0].to_config().cntlid_min, Some(100));
        let addr = "127.0.0.1:4420".parse().unwrap();
        let t = Target::new(subs, cfg.transport.clone(), vec![addr]);
        let queue = || {
            let p = "127.0.0.1:50000".parse().unwrap();
            NvmeQueue::new(t.clone(), addr, p, farflash_wire::discovery::TRTYPE_TCP)
        };
        let host = "nqn.2014-08.org.nvmexpress:uuid:cntlid";
        let mut qs: Vec<NvmeQueue> = (0..3).map(|_| queue()).collect();
        let mut got = Vec::new();
        for q in qs.iter_mut() {
            let c = crate::tests::connect_to(q, NQN, host, 0, CNTLID_DYNAMIC);
            got.push((c.status, c.result as u16));
        }
        assert_eq!(got[0], (Status::SUCCESS, 100));
        assert_eq!(got[1], (Status::SUCCESS, 101));
        assert_eq!(got[2].0, Status::CONNECT_CONTROLLER_BUSY);
        // A discovery controller is not bound to the subsystem's range.
        let mut d = queue();
        let c = crate::tests::connect_to(
            &mut d,
            farflash_wire::DISCOVERY_NQN,
            host,
            0,
            CNTLID_DYNAMIC,
        );
        assert_eq!(c.status, Status::SUCCESS);
        assert!(!CntlidRange { min: 100, max: 101 }.contains(c.result as u16));
    }

    #[test]
    fn the_cursor_wraps_inside_the_range() {
        let r = CntlidRange { min: 10, max: 12 };
        assert_eq!(r.start(1), 10);
        assert_eq!(r.start(11), 11);
        assert_eq!(r.after(10), 11);
        assert_eq!(r.after(12), 10);
        assert_eq!(r.after(500), 10);
    }
}
