//! `farflash perf` (being written).

#[derive(clap::Args, Debug, Default)]
pub struct PerfArgs {}

pub fn run(_args: PerfArgs) -> anyhow::Result<()> {
    anyhow::bail!("farflash perf is not implemented yet")
}
