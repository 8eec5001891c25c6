//! The tenants study's figure: per tenant, alone (dark bars) against
//! together (light bars): runtime, throughput, p99, and the slowdown; with
//! the iSCSI baseline, its tenants' bars after NVMe/TCP's.

use super::results::{Comparison, TenantsResults, ISCSI};
use crate::plot::panels::{bars, frame, legend, nice_max, Axes, Key, Series};
use crate::plot::{save, Figure};
use crate::transport::Kind;
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// Writes the study's figure (`tenants.svg`, `tenants.png`).
pub fn write(r: &TenantsResults, dir: &Path) -> Result<()> {
    save(dir, "tenants", &TenantsFig(r))
}

/// Runtime, throughput, p99 and slowdown per tenant and tenant count.
pub struct TenantsFig<'a>(pub &'a TenantsResults);

const X: &str = "tenant count : tenant";
const X_BASELINE: &str = "N = NVMe/TCP, i = iSCSI (tgtd) · tenant count : tenant";

fn pair(cs: &[Comparison], f: impl Fn(&Comparison) -> (f64, f64)) -> Vec<Series> {
    vec![
        Series {
            kind: Kind::Local,
            values: cs.iter().map(|c| Some(f(c).0)).collect(),
        },
        Series {
            kind: Kind::Tcp,
            values: cs.iter().map(|c| Some(f(c).1)).collect(),
        },
    ]
}

fn top(s: &[Series]) -> f64 {
    nice_max(
        s.iter()
            .flat_map(|s| s.values.iter().flatten())
            .fold(0.0, |a: f64, &b| a.max(b)),
    )
}

impl Figure for TenantsFig<'_> {
    fn size(&self) -> (u32, u32) {
        (1300, 950)
    }
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let r = self.0;
        let e = &r.environment;
        let commit: String = e.commit.chars().take(10).collect();
        let footer = format!(
            "farflash sweep --plan tenants · {} per tenant · {} CPUs ({}) · {} · commit {}",
            crate::plan::size_label(r.plan.file_size),
            e.nproc,
            e.cpu_model,
            &e.date[..e.date.len().min(10)],
            commit
        );
        let title = if r.has_baseline() {
            "tenants: each tenant alone, then all together (NVMe/TCP, then the iSCSI baseline)"
        } else {
            "tenants: each tenant alone, then all together"
        };
        let (strip, body) = frame(root, title, &footer)?;
        legend(
            &strip,
            &[
                Key::Bar(Kind::Local, "alone".into()),
                Key::Bar(Kind::Tcp, "together".into()),
            ],
        )?;
        let cs = &r.comparisons;
        // With the iSCSI baseline its bars follow NVMe/TCP's: short labels
        // (N2:1 = NVMe/TCP, 2 tenants, tenant 1; i2:1 = iSCSI), or they overlap.
        let baseline = r.has_baseline();
        let labels: Vec<String> = cs
            .iter()
            .map(|c| match (baseline, c.transport.as_str()) {
                (false, _) => format!("{}:t{}", c.tenants, c.tenant),
                (true, ISCSI) => format!("i{}:{}", c.tenants, c.tenant),
                (true, _) => format!("N{}:{}", c.tenants, c.tenant),
            })
            .collect();
        let x = if baseline { X_BASELINE } else { X };
        let panels = body.split_evenly((2, 2));
        let rt = pair(cs, |c| {
            (
                c.alone_runtime_ms as f64 / 1e3,
                c.together_runtime_ms as f64 / 1e3,
            )
        });
        let tp = pair(cs, |c| (c.alone_mib_s, c.together_mib_s));
        let p99 = pair(cs, |c| (c.alone_p99_us, c.together_p99_us));
        let slow = vec![Series {
            kind: Kind::Tcp,
            values: cs.iter().map(|c| Some(c.slowdown)).collect(),
        }];
        let specs: [(&str, &str, &Vec<Series>); 4] = [
            ("job runtime", "runtime (s)", &rt),
            ("throughput", "MiB/s", &tp),
            ("p99 latency (worst phase)", "p99 (µs)", &p99),
            ("slowdown: together / alone", "runtime ratio", &slow),
        ];
        for (area, (title, y, s)) in panels.iter().zip(specs) {
            let a = Axes {
                title,
                x,
                y,
                labels: &labels,
            };
            let ymax = if title.starts_with("slowdown") {
                top(s).max(1.2)
            } else {
                top(s)
            };
            bars(area, &a, s, ymax, None)?;
        }
        Ok(())
    }
}
