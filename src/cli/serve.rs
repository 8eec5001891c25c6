//! `farflash serve` (being written).

#[derive(clap::Args, Debug, Default)]
pub struct ServeArgs {}

pub fn run(_args: ServeArgs) -> anyhow::Result<()> {
    anyhow::bail!("farflash serve is not implemented yet")
}
