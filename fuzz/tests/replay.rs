//! Replays every committed input (seed corpus and regressions) through the
//! harnesses, without libFuzzer: `cargo test --manifest-path fuzz/Cargo.toml`.
//! A file under `regressions/<target>/` is an input that once crashed; it
//! must pass once the bug is fixed. Inputs of bugs not fixed yet are listed
//! in `regressions/KNOWN` and are skipped (the test says so).

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn known_open() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("regressions/KNOWN")).unwrap_or_default();
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn replay(kind: &str) -> usize {
    let skip = known_open();
    let mut n = 0;
    for (name, run) in farflash_fuzz::TARGETS {
        for f in files(&root().join(kind).join(name)) {
            let rel = format!("{kind}/{name}/{}", f.file_name().unwrap().to_string_lossy());
            if skip.contains(&rel) {
                eprintln!("skipping {rel}: listed in regressions/KNOWN (bug not fixed yet)");
                continue;
            }
            let data = std::fs::read(&f).unwrap();
            let r = std::panic::catch_unwind(|| run(&data));
            assert!(
                r.is_ok(),
                "{rel} fails: reproduce with fuzz/run.sh --repro {name} {rel}"
            );
            n += 1;
        }
    }
    n
}

#[test]
fn seed_corpus_passes() {
    let n = replay("corpus");
    assert!(n > 0, "no seed corpus found");
}

#[test]
fn regressions_pass() {
    replay("regressions");
}

/// The TLS targets pass every input unread without libssl.so.3: a replay
/// that cannot fail. Missing OpenSSL 3 fails here, unless
/// FARFLASH_SKIP_TLS=1 asks for a printed skip (tests/run.sh refuses it).
#[test]
fn openssl_is_there_for_the_tls_targets() {
    if farflash_fuzz::tls_record::available() {
        return;
    }
    if std::env::var_os("FARFLASH_SKIP_TLS").is_some_and(|v| v == "1") {
        eprintln!(
            "SKIPPED (FARFLASH_SKIP_TLS=1): OpenSSL 3 missing, the TLS fuzz targets replay nothing"
        );
        return;
    }
    panic!("OpenSSL 3 (libssl.so.3, Debian: libssl3) is needed to replay the TLS fuzz targets; FARFLASH_SKIP_TLS=1 skips visibly");
}
