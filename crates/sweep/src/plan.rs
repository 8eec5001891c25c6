//! Plans: which `perf` parameter a study varies, over which values, with
//! which fixed parameters. Four plans are built in (the studies the project
//! grew from); others come from a small TOML file (see `docs/sweep.md`).

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The `perf` parameter a plan varies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Axis {
    /// Request size (`--bs`), bytes.
    Bs,
    /// I/Os in flight per job (`--iodepth`).
    Iodepth,
    /// Jobs, each its own thread and queue (`--numjobs`).
    Numjobs,
}

impl Axis {
    /// Axis title for plots, with its unit.
    pub fn title(self) -> &'static str {
        match self {
            Axis::Bs => "request size (bytes, K = KiB)",
            Axis::Iodepth => "queue depth (I/Os in flight per job)",
            Axis::Numjobs => "jobs (threads, one queue each)",
        }
    }
    /// Short name used in labels and the CSV.
    pub fn name(self) -> &'static str {
        match self {
            Axis::Bs => "bs",
            Axis::Iodepth => "iodepth",
            Axis::Numjobs => "numjobs",
        }
    }
}

/// A study: one `perf` run per value of `axis`, each run local and remote.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Short name, also the results folder's name.
    pub name: String,
    /// One line for the report.
    #[serde(default)]
    pub description: String,
    /// `perf --rw`: read, write, randread, randwrite.
    pub rw: String,
    /// The varied parameter.
    pub vary: Axis,
    /// The values of `vary`, in order (bytes for `bs`).
    pub values: Vec<u64>,
    /// Fixed request size in bytes (ignored when `vary = "bs"`).
    #[serde(default = "default_bs")]
    pub bs: u64,
    /// Fixed queue depth (ignored when `vary = "iodepth"`).
    #[serde(default = "one")]
    pub iodepth: u64,
    /// Fixed job count (ignored when `vary = "numjobs"`).
    #[serde(default = "one")]
    pub numjobs: u64,
    /// Event-loop threads of the target the sweep starts (`serve --threads`).
    #[serde(default)]
    pub target_threads: Option<u32>,
    /// CPUs of the target the sweep starts (`serve --cpus-allowed`).
    #[serde(default)]
    pub target_cpus: Option<String>,
}

fn default_bs() -> u64 {
    4096
}
fn one() -> u64 {
    1
}

/// The parameters of one point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointParams {
    /// Request size, bytes.
    pub bs: u64,
    /// I/Os in flight per job.
    pub iodepth: u64,
    /// Jobs.
    pub numjobs: u64,
}

const K: u64 = 1024;

/// The names of the built-in plans, in the order `--plan all` runs them.
pub const BUILTIN: [&str; 4] = ["request-size", "parallelism", "cpu-cost", "queue-depth"];

impl Plan {
    /// A built-in plan by name.
    pub fn builtin(name: &str) -> Option<Plan> {
        let sizes = vec![4 * K, 8 * K, 16 * K, 32 * K, 64 * K, 128 * K];
        let p = |desc: &str, rw: &str, vary, values: Vec<u64>, bs, iodepth, numjobs| Plan {
            name: name.to_owned(),
            description: desc.to_owned(),
            rw: rw.to_owned(),
            vary,
            values,
            bs,
            iodepth,
            numjobs,
            target_threads: None,
            target_cpus: None,
        };
        Some(match name {
            "request-size" => p(
                "sequential read, request size 4K..128K, 8 jobs, QD 1",
                "read",
                Axis::Bs,
                sizes,
                4 * K,
                1,
                8,
            ),
            "parallelism" => p(
                "sequential read, 1..16 jobs, 4K requests, QD 128",
                "read",
                Axis::Numjobs,
                vec![1, 2, 4, 8, 16],
                4 * K,
                128,
                1,
            ),
            "cpu-cost" => p(
                "random write, request size 4K..128K, 8 jobs, QD 128",
                "randwrite",
                Axis::Bs,
                sizes,
                4 * K,
                128,
                8,
            ),
            "queue-depth" => Plan {
                target_threads: Some(1),
                target_cpus: Some("0".into()),
                ..p(
                    "sequential read, QD 1..128, 8 jobs, 4K requests, target on one core",
                    "read",
                    Axis::Iodepth,
                    vec![1, 2, 4, 8, 16, 32, 64, 128],
                    4 * K,
                    1,
                    8,
                )
            },
            _ => return None,
        })
    }

    /// Reads a plan from a TOML file (fields as in [`Plan`]).
    pub fn from_file(path: &Path) -> Result<Plan> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading plan {}", path.display()))?;
        let plan: Plan =
            toml::from_str(&text).with_context(|| format!("parsing plan {}", path.display()))?;
        plan.validate()
            .with_context(|| format!("plan {}", path.display()))?;
        Ok(plan)
    }

    /// A built-in name or a path to a TOML plan.
    pub fn resolve(name_or_path: &str) -> Result<Plan> {
        if let Some(p) = Plan::builtin(name_or_path) {
            return Ok(p);
        }
        let path = Path::new(name_or_path);
        if path.exists() {
            return Plan::from_file(path);
        }
        bail!(
            "unknown plan {name_or_path:?}: built-in plans are {} (or `all`), or give a TOML plan file",
            BUILTIN.join(", ")
        )
    }

    /// Checks names, directions and value ranges.
    pub fn validate(&self) -> Result<()> {
        let name_ok = !self.name.is_empty()
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name_ok {
            bail!(
                "plan name {:?}: use letters, digits, '-' and '_'",
                self.name
            );
        }
        if !["read", "write", "randread", "randwrite"].contains(&self.rw.as_str()) {
            bail!(
                "rw {:?}: expected read, write, randread or randwrite",
                self.rw
            );
        }
        if self.values.is_empty() {
            bail!("values: give at least one");
        }
        for p in self.points() {
            if p.bs == 0 || !p.bs.is_multiple_of(512) || p.bs > 32 << 20 {
                bail!("bs {}: a multiple of 512 bytes up to 32 MiB", p.bs);
            }
            if p.iodepth == 0 || p.iodepth > 4096 || p.numjobs == 0 || p.numjobs > 256 {
                bail!("iodepth 1..=4096 and numjobs 1..=256");
            }
        }
        Ok(())
    }

    /// Whether the plan writes (and so changes the backing data).
    pub fn writes(&self) -> bool {
        self.rw.contains("write")
    }

    /// The points, in order.
    pub fn points(&self) -> Vec<PointParams> {
        self.values
            .iter()
            .map(|&v| {
                let mut p = PointParams {
                    bs: self.bs,
                    iodepth: self.iodepth,
                    numjobs: self.numjobs,
                };
                match self.vary {
                    Axis::Bs => p.bs = v,
                    Axis::Iodepth => p.iodepth = v,
                    Axis::Numjobs => p.numjobs = v,
                }
                p
            })
            .collect()
    }

    /// The axis label of a value: `4K`, `128K`, `1M` for sizes, the number otherwise.
    pub fn label(&self, value: u64) -> String {
        match self.vary {
            Axis::Bs => size_label(value),
            _ => value.to_string(),
        }
    }
}

/// `4096` -> `4K`, `1048576` -> `1M`, `1 << 30` -> `1G`, `1536` -> `1536`.
pub fn size_label(b: u64) -> String {
    if b >= K * K * K && b.is_multiple_of(K * K * K) {
        format!("{}G", b / (K * K * K))
    } else if b >= K * K && b.is_multiple_of(K * K) {
        format!("{}M", b / (K * K))
    } else if b >= K && b.is_multiple_of(K) {
        format!("{}K", b / K)
    } else {
        b.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_match_the_issue() {
        for n in BUILTIN {
            let p = Plan::builtin(n).unwrap();
            p.validate().unwrap();
        }
        let q = Plan::builtin("queue-depth").unwrap();
        assert_eq!(q.values, vec![1, 2, 4, 8, 16, 32, 64, 128]);
        assert_eq!(q.target_threads, Some(1));
        let r = Plan::builtin("request-size").unwrap();
        assert_eq!(r.points()[5].bs, 128 * K);
        assert_eq!(r.points()[0].numjobs, 8);
        assert_eq!(r.label(128 * K), "128K");
        assert_eq!(size_label(1 << 30), "1G");
        assert_eq!(size_label(1536), "1536");
        assert!(Plan::builtin("cpu-cost").unwrap().writes());
        assert!(Plan::builtin("nope").is_none());
    }

    #[test]
    fn toml_plans_parse_and_validate() {
        let p: Plan = toml::from_str(
            "name='mini'\nrw='randread'\nvary='iodepth'\nvalues=[1,4]\nbs=8192\nnumjobs=2\n",
        )
        .unwrap();
        p.validate().unwrap();
        assert_eq!(p.points()[1].iodepth, 4);
        assert_eq!(p.points()[1].bs, 8192);
        let bad: Plan = toml::from_str("name='x y'\nrw='read'\nvary='bs'\nvalues=[4096]").unwrap();
        assert!(bad.validate().is_err());
        assert!(
            toml::from_str::<Plan>("name='x'\nrw='read'\nvary='bs'\nvalues=[1]\nzzz=1").is_err()
        );
    }
}
