//! `farflash gen-package-files --out DIR` (hidden; run by
//! scripts/package-deb.sh): the man pages and shell completions, generated
//! from this binary's own clap definition so that they never drift from it.
//!
//! Writes `DIR/man/farflash.1`, `DIR/man/farflash-serve.1` ... (one page per
//! subcommand, nested ones as `farflash-ctl-subsystem.1`) and
//! `DIR/completions/{farflash.bash,_farflash,farflash.fish}`.

use anyhow::{Context, Result};
use clap::Args;
use clap_complete::Shell;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct GenArgs {
    /// Directory to write man/ and completions/ into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

pub fn run(a: GenArgs, cmd: clap::Command) -> Result<()> {
    let man = a.out.join("man");
    let completions = a.out.join("completions");
    for dir in [&man, &completions] {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    clap_mangen::generate_to(cmd.clone(), &man)
        .with_context(|| format!("write man pages into {}", man.display()))?;
    let mut cmd = cmd;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let path = clap_complete::generate_to(shell, &mut cmd, "farflash", &completions)
            .with_context(|| format!("write {shell} completions into {}", completions.display()))?;
        println!("{}", path.display());
    }
    let mut pages: Vec<_> = std::fs::read_dir(&man)
        .with_context(|| format!("read {}", man.display()))?
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    pages.sort();
    println!("{} man pages in {}", pages.len(), man.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_page_per_subcommand_and_three_completions() {
        let dir = std::env::temp_dir().join(format!("farflash-pkg-{}", std::process::id()));
        let cmd = clap::Command::new("farflash")
            .version("1.2.3 (commit abc)")
            .subcommand(
                clap::Command::new("serve")
                    .about("Export namespaces")
                    .arg(clap::Arg::new("ram").long("ram").help("A RAM namespace")),
            )
            .subcommand(clap::Command::new("secret").hide(true));
        run(GenArgs { out: dir.clone() }, cmd).unwrap();
        let serve = std::fs::read_to_string(dir.join("man/farflash-serve.1")).unwrap();
        assert!(serve.contains(".TH farflash-serve 1"), "{serve}");
        assert!(serve.contains("ram"), "{serve}");
        assert!(dir.join("man/farflash.1").exists());
        assert!(
            !dir.join("man/farflash-secret.1").exists(),
            "hidden commands have no page"
        );
        for f in ["farflash.bash", "_farflash", "farflash.fish"] {
            let text = std::fs::read_to_string(dir.join("completions").join(f)).unwrap();
            assert!(text.contains("serve"), "{f}: {text}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
