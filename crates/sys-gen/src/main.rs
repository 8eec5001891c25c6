//! `cargo run -p farflash-sys-gen` (scripts/regen-bindings.sh): writes
//! `crates/{rbd,iscsi,rdma,ssl}-sys/src/bindings.rs` from the installed headers.

use std::process::ExitCode;

fn main() -> ExitCode {
    let only: Vec<String> = std::env::args().skip(1).collect();
    let mut failed = false;
    for (name, spec) in farflash_sys_gen::specs::ALL {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        let path = spec.bindings_path();
        if let Some(why) = spec.missing_prerequisite() {
            eprintln!("{name}: cannot generate: {why}");
            failed = true;
            continue;
        }
        match farflash_sys_gen::generate(spec) {
            Ok(text) => match std::fs::write(&path, &text) {
                Ok(()) => println!(
                    "{name}: wrote {} ({} lines)",
                    path.display(),
                    text.lines().count()
                ),
                Err(e) => {
                    eprintln!("{name}: write {}: {e}", path.display());
                    failed = true;
                }
            },
            Err(e) => {
                eprintln!("{name}: {e}");
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
