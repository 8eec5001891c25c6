//! `farflash discover` (being written).

#[derive(clap::Args, Debug, Default)]
pub struct DiscoverArgs {}

pub fn run(_args: DiscoverArgs) -> anyhow::Result<()> {
    anyhow::bail!("farflash discover is not implemented yet")
}
