//! The cpu-vs-load study's plan: which targets, which queue depths, which
//! fractions of each one's saturation rate are offered.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// The plan's name (and results folder).
pub const NAME: &str = "cpu-vs-load";

/// The offered loads of the built-in plan, % of the measured saturation.
pub const LOADS: [u32; 7] = [5, 10, 25, 50, 75, 90, 100];

/// The queue depths of the built-in plan.
pub const IODEPTHS: [u64; 3] = [1, 4, 32];

/// A target the study measures: `farflash serve` with one `--poll` mode,
/// or SPDK's `nvmf_tgt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    Adaptive,
    Always,
    Never,
    Hybrid,
    Spdk,
}

impl TargetKind {
    /// Every kind, in the order the study runs, tables list and plots draw them.
    pub const ALL: [TargetKind; 5] = [
        TargetKind::Adaptive,
        TargetKind::Always,
        TargetKind::Never,
        TargetKind::Hybrid,
        TargetKind::Spdk,
    ];

    /// `adaptive`, ..., `spdk` (`--targets`, CSV, JSON).
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Adaptive => "adaptive",
            TargetKind::Always => "always",
            TargetKind::Never => "never",
            TargetKind::Hybrid => "hybrid",
            TargetKind::Spdk => "spdk",
        }
    }

    /// How tables and legends name it.
    pub fn label(self) -> &'static str {
        match self {
            TargetKind::Adaptive => "farflash --poll adaptive",
            TargetKind::Always => "farflash --poll always",
            TargetKind::Never => "farflash --poll never",
            TargetKind::Hybrid => "farflash --poll hybrid",
            TargetKind::Spdk => "SPDK nvmf_tgt",
        }
    }

    /// `serve --poll` of a farflash kind; None for SPDK.
    pub fn poll(self) -> Option<&'static str> {
        match self {
            TargetKind::Spdk => None,
            k => Some(k.name()),
        }
    }

    /// Parses a `--targets` entry.
    pub fn parse(s: &str) -> Result<TargetKind> {
        match TargetKind::ALL.into_iter().find(|k| k.name() == s.trim()) {
            Some(k) => Ok(k),
            None => bail!("target {s:?}: expected adaptive, always, never, hybrid or spdk"),
        }
    }
}

/// The study.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuLoadPlan {
    /// Always [`NAME`].
    pub name: String,
    pub description: String,
    /// The targets, each started alone, in this order.
    pub targets: Vec<TargetKind>,
    /// Queue depths (one perf job each).
    pub iodepths: Vec<u64>,
    /// Offered loads, % of the saturation rate measured at the same
    /// target and queue depth just before, ascending.
    pub loads_pct: Vec<u32>,
    /// `perf --rw`.
    pub rw: String,
    /// Request size, bytes.
    pub bs: u64,
    /// Size of the target's null namespace, bytes.
    pub namespace_size: u64,
}

/// One perf run of the study: a saturation run (`load_pct` None, no rate)
/// or a run at `load_pct` % of that saturation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub target: TargetKind,
    pub iodepth: u64,
    pub load_pct: Option<u32>,
}

impl CpuLoadPlan {
    /// The built-in study: 4 KiB random reads from a null namespace, QD 1, 4
    /// and 32, loads 5..100 %, farflash with each polling mode, and SPDK's
    /// target when `spdk`.
    pub fn builtin(spdk: bool) -> CpuLoadPlan {
        let mut targets = TargetKind::ALL.to_vec();
        if !spdk {
            targets.retain(|&k| k != TargetKind::Spdk);
        }
        CpuLoadPlan {
            name: NAME.into(),
            description: "4 KiB random reads from a null namespace, target on one core: \
                          offered load 5..100 % of saturation at QD 1, 4 and 32"
                .into(),
            targets,
            iodepths: IODEPTHS.to_vec(),
            loads_pct: LOADS.to_vec(),
            rw: "randread".into(),
            bs: 4096,
            namespace_size: 1 << 30,
        }
    }

    /// Checks the lists.
    pub fn validate(&self) -> Result<()> {
        if self.targets.is_empty() || self.iodepths.is_empty() || self.loads_pct.is_empty() {
            bail!("cpu-vs-load: give at least one target, queue depth and load");
        }
        for (i, k) in self.targets.iter().enumerate() {
            if self.targets[..i].contains(k) {
                bail!("cpu-vs-load: target {} given twice", k.name());
            }
        }
        if let Some(q) = self.iodepths.iter().find(|&&q| q == 0 || q > 4096) {
            bail!("cpu-vs-load: queue depth {q} out of 1..=4096");
        }
        if let Some(l) = self.loads_pct.iter().find(|&&l| l == 0 || l > 100) {
            bail!("cpu-vs-load: load {l} % out of 1..=100");
        }
        if self.loads_pct.windows(2).any(|w| w[0] >= w[1]) {
            bail!("cpu-vs-load: loads must ascend, each once");
        }
        if self.bs == 0 || !self.bs.is_multiple_of(512) || self.namespace_size < self.bs {
            bail!(
                "cpu-vs-load: bs {} must be a multiple of 512 within the namespace",
                self.bs
            );
        }
        Ok(())
    }

    /// Every run in order: per target, per queue depth, the saturation run,
    /// then each load.
    pub fn steps(&self) -> Vec<Step> {
        let mut v = Vec::new();
        for &target in &self.targets {
            for &iodepth in &self.iodepths {
                let loads = std::iter::once(None).chain(self.loads_pct.iter().map(|&l| Some(l)));
                v.extend(loads.map(|load_pct| Step {
                    target,
                    iodepth,
                    load_pct,
                }));
            }
        }
        v
    }
}

/// `perf --rate_iops` for `pct` % of a saturation of `sat_iops` (at least 1).
pub fn offered_rate(sat_iops: f64, pct: u32) -> u64 {
    ((sat_iops * f64::from(pct) / 100.0).round() as u64).max(1)
}

/// `1,4,32` -> [1, 4, 32] (`flag` names the option in errors).
pub fn parse_list<T: std::str::FromStr>(flag: &str, s: &str) -> Result<Vec<T>> {
    s.split(',')
        .map(|p| match p.trim().parse() {
            Ok(v) => Ok(v),
            Err(_) => bail!("{flag} {s:?}: {p:?} is not a number (expected a list like 1,4,32)"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_steps_follow_the_issue() {
        let p = CpuLoadPlan::builtin(true);
        p.validate().unwrap();
        assert_eq!(p.targets.len(), 5);
        assert_eq!(CpuLoadPlan::builtin(false).targets.len(), 4);
        let s = p.steps();
        // 5 targets x 3 QDs x (saturation + 7 loads).
        assert_eq!(s.len(), 5 * 3 * 8);
        assert_eq!(
            s[0],
            Step {
                target: TargetKind::Adaptive,
                iodepth: 1,
                load_pct: None
            }
        );
        assert_eq!(s[1].load_pct, Some(5));
        assert_eq!(s[7].load_pct, Some(100));
        assert_eq!((s[8].iodepth, s[8].load_pct), (4, None));
        assert_eq!(s.last().map(|x| x.target), Some(TargetKind::Spdk));
        assert_eq!(offered_rate(80_000.0, 5), 4_000);
        assert_eq!(offered_rate(12_345.0, 10), 1_235);
        assert_eq!(offered_rate(3.0, 5), 1);
    }

    #[test]
    fn bad_lists_are_refused() {
        let mut p = CpuLoadPlan::builtin(false);
        p.loads_pct = vec![50, 10];
        assert!(p.validate().is_err());
        p.loads_pct = vec![0, 10];
        assert!(p.validate().is_err());
        p.loads_pct = vec![10, 101];
        assert!(p.validate().is_err());
        p.loads_pct = vec![10];
        p.iodepths = vec![0];
        assert!(p.validate().is_err());
        p.iodepths = vec![1];
        p.targets = vec![TargetKind::Never, TargetKind::Never];
        assert!(p.validate().is_err());
        p.targets = vec![];
        assert!(p.validate().is_err());
        assert_eq!(
            parse_list::<u64>("--iodepths", "1, 4,32").unwrap(),
            vec![1, 4, 32]
        );
        let e = parse_list::<u32>("--loads", "5,x").unwrap_err().to_string();
        assert!(e.contains("--loads"), "{e}");
        assert_eq!(TargetKind::parse("hybrid").unwrap(), TargetKind::Hybrid);
        assert!(TargetKind::parse("sometimes").is_err());
        assert_eq!(TargetKind::Spdk.poll(), None);
        assert_eq!(TargetKind::Never.poll(), Some("never"));
    }
}
