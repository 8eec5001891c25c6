//! Records the git commit the binary is built from, for `farflash --version`
//! (`FARFLASH_GIT_COMMIT`): `git rev-parse` when building in a checkout, the
//! environment variable of that name when set (a package built from a
//! tarball), "unknown commit" otherwise (a copy of the tree without .git).

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=FARFLASH_GIT_COMMIT");
    let from_env = std::env::var("FARFLASH_GIT_COMMIT")
        .ok()
        .filter(|s| !s.trim().is_empty());
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    // Only a checkout whose top level is this package counts: a copy of the
    // tree placed inside some other repository is "unknown commit".
    let top = git(&["-C", &manifest, "rev-parse", "--show-toplevel"]);
    let in_checkout = top.is_some_and(|t| {
        let (a, b) = (PathBuf::from(t), PathBuf::from(&manifest));
        a.canonicalize().ok() == b.canonicalize().ok()
    });
    let commit = match from_env {
        Some(c) => format!("commit {}", c.trim()),
        None if in_checkout => {
            // Rebuild when HEAD moves: HEAD itself and the branch it names.
            for p in ["HEAD", "packed-refs"] {
                if let Some(path) = git(&["-C", &manifest, "rev-parse", "--git-path", p]) {
                    println!("cargo:rerun-if-changed={}", abs(&manifest, &path));
                }
            }
            if let Some(r) = git(&["-C", &manifest, "symbolic-ref", "-q", "HEAD"]) {
                if let Some(path) = git(&["-C", &manifest, "rev-parse", "--git-path", &r]) {
                    println!("cargo:rerun-if-changed={}", abs(&manifest, &path));
                }
            }
            match git(&["-C", &manifest, "rev-parse", "--short=12", "HEAD"]) {
                Some(c) => format!("commit {c}"),
                None => "unknown commit".to_owned(),
            }
        }
        None => "unknown commit".to_owned(),
    };
    println!("cargo:rustc-env=FARFLASH_GIT_COMMIT={commit}");
}

fn abs(base: &str, p: &str) -> String {
    let path = PathBuf::from(p);
    if path.is_absolute() {
        p.to_owned()
    } else {
        PathBuf::from(base).join(path).display().to_string()
    }
}
