//! `farflash identify` (being written).

#[derive(clap::Args, Debug, Default)]
pub struct IdentifyArgs {}

pub fn run(_args: IdentifyArgs) -> anyhow::Result<()> {
    anyhow::bail!("farflash identify is not implemented yet")
}
