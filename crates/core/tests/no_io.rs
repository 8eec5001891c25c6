//! The command layer does no I/O (docs/architecture.md, issue #41): no
//! file, socket, clock, thread, process or environment of its own, and no
//! storage opened. It emits storage requests to the `farflash-backend`
//! interface (`BackendQueue`: the event loop submits and reaps them) and
//! takes time as an argument (ticks, `set_now`); the control plane
//! (`farflash-control`) opens backends and reads and writes files.
//!
//! This test reads `crates/core`'s sources (test code left out: the files
//! and items under `#[cfg(test)]`, and `testing.rs`, which only tests and
//! the `testing` feature build) and its dependency list, and fails naming
//! every use that breaks the rule.

use std::path::{Path, PathBuf};

/// Code that does I/O, reads the clock or starts threads.
const FORBIDDEN: &[(&str, &str)] = &[
    ("std::fs", "files are the control plane's"),
    ("File::", "files are the control plane's"),
    ("OpenOptions", "files are the control plane's"),
    ("std::os::", "OS handles are the event loop's"),
    ("std::thread", "threads are the event loop's (offloads)"),
    ("std::process", "no process control"),
    ("std::env", "no environment"),
    ("std::io::stdin", "no terminal I/O"),
    ("std::io::stdout", "no terminal I/O"),
    ("std::io::stderr", "no terminal I/O"),
    ("println!", "no terminal I/O (tracing)"),
    ("print!(", "no terminal I/O (tracing)"),
    ("Instant::now", "time comes in as an argument"),
    ("SystemTime", "time comes in as an argument"),
    ("UNIX_EPOCH", "time comes in as an argument"),
    ("TcpStream", "sockets are the event loop's"),
    ("TcpListener", "sockets are the event loop's"),
    ("UdpSocket", "sockets are the event loop's"),
    ("UnixStream", "sockets are the event loop's"),
    ("UnixListener", "sockets are the event loop's"),
    ("ToSocketAddrs", "name resolution is the control plane's"),
    (
        "getrandom",
        "randomness comes from farflash-auth's offloaded jobs",
    ),
    (
        "open_file",
        "opening storage is the control plane's (Provision)",
    ),
    (
        "open_ram",
        "opening storage is the control plane's (Provision)",
    ),
    (
        "open_null",
        "opening storage is the control plane's (Provision)",
    ),
    (
        "open_rbd",
        "opening storage is the control plane's (Provision)",
    ),
    (
        "open_scripted",
        "opening storage is the control plane's (Provision)",
    ),
];

/// `std::net` items that are addresses, not sockets.
const NET_VALUES: &[&str] = &[
    "SocketAddr",
    "SocketAddrV4",
    "SocketAddrV6",
    "IpAddr",
    "Ipv4Addr",
    "Ipv6Addr",
];

/// Dependencies of `crates/core`, and why each is no I/O for it.
const ALLOWED_DEPS: &[(&str, &str)] = &[
    ("farflash-wire", "wire formats: pure functions of bytes"),
    (
        "farflash-auth",
        "DH-HMAC-CHAP state machines; the DH work runs as an offload",
    ),
    (
        "farflash-psk",
        "TLS key material: pure functions, no OpenSSL",
    ),
    (
        "farflash-backend",
        "the storage interface: BackendQueue requests, buffers, the Backend trait; \
         opening storage is checked above",
    ),
    ("zeroize", "wiping secrets"),
    ("serde", "configuration types"),
    ("toml", "configuration text"),
    ("thiserror", "error types"),
    (
        "tracing",
        "log events; the subscriber (the binary) writes them",
    ),
    ("libc", "errno constants only (checked above)"),
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Whether `file` is test-only, and declared so by its parent module.
fn test_only(file: &Path) -> bool {
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let gate = match stem {
        "testing" => "#[cfg(any(test, feature = \"testing\"))]",
        s if s == "tests" || s.starts_with("tests_") => "#[cfg(test)]",
        _ => return false,
    };
    let dir = file.parent().expect("parent");
    let parent = ["lib.rs", "mod.rs"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{}: no parent module beside it", file.display()));
    let text = std::fs::read_to_string(&parent).expect("read parent");
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let declared = lines.windows(2).any(|w| {
        w[0] == gate && (w[1] == format!("mod {stem};") || w[1] == format!("pub mod {stem};"))
    });
    assert!(
        declared,
        "{} looks test-only but {} does not declare it under {gate}",
        file.display(),
        parent.display()
    );
    true
}

/// `text` without `//` comments.
fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `code` without the items under `#[cfg(test)]` (a `mod tests { .. }`, a
/// test helper function, a `mod x;` line).
fn strip_test_items(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        let item = &rest[i + "#[cfg(test)]".len()..];
        let semi = item.find(';');
        let open = item.find('{');
        let end = match (semi, open) {
            (Some(s), Some(o)) if s < o => s + 1,
            (Some(s), None) => s + 1,
            (_, Some(o)) => close_of(item, o),
            (None, None) => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The index after the brace that closes the one at `open`.
fn close_of(s: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (i, c) in s[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + i + 1;
                }
            }
            _ => {}
        }
    }
    s.len()
}

/// Every break of the rule in `code`, as messages naming `name`.
fn violations(name: &str, code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let at = format!("{name}:{}", n + 1);
        for (pat, why) in FORBIDDEN {
            if line.contains(pat) {
                out.push(format!("{at}: {pat}: {why}: {}", line.trim()));
            }
        }
        for (i, _) in line.match_indices("libc::") {
            let id: String = line[i + 6..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let errno = id.starts_with('E')
                && id
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
            if !errno {
                out.push(format!(
                    "{at}: libc::{id}: only errno constants: {}",
                    line.trim()
                ));
            }
        }
        for (i, _) in line.match_indices("std::net::") {
            let after = &line[i + 10..];
            let names: Vec<String> = match after.strip_prefix('{') {
                Some(group) => group
                    .split('}')
                    .next()
                    .unwrap_or("")
                    .split(',')
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect(),
                None => vec![after
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect()],
            };
            for id in names {
                if !NET_VALUES.contains(&id.as_str()) {
                    out.push(format!("{at}: std::net::{id}: only addresses, no sockets"));
                }
            }
        }
    }
    out
}

#[test]
fn the_command_layer_does_no_io() {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    assert!(files.len() > 20, "found only {} source files", files.len());
    let mut bad = Vec::new();
    let mut checked = 0;
    for f in &files {
        if test_only(f) {
            continue;
        }
        let text = std::fs::read_to_string(f).expect("read source");
        let code = strip_test_items(&strip_comments(&text));
        let name = f.strip_prefix(src_dir()).unwrap_or(f).display().to_string();
        bad.extend(violations(&name, &code));
        checked += 1;
    }
    assert!(checked > 20, "checked only {checked} files");
    assert!(
        bad.is_empty(),
        "I/O in the command layer:\n{}",
        bad.join("\n")
    );
}

/// The sections of a Cargo.toml that list what a build links in.
fn dependency_names(manifest: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.trim_matches(['[', ']']).to_owned();
            continue;
        }
        let linked = section == "dependencies"
            || section.ends_with(".dependencies") && !section.ends_with("dev-dependencies")
            || section == "build-dependencies";
        if !linked || line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((name, spec)) = line.split_once('=') {
            let name = name.trim().split('.').next().unwrap_or("").to_owned();
            out.push((name, spec.trim().to_owned()));
        }
    }
    out
}

#[test]
fn the_command_layer_depends_only_on_what_does_no_io_for_it() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .expect("read Cargo.toml");
    let deps = dependency_names(&manifest);
    assert!(
        deps.iter().any(|(n, _)| n == "farflash-wire"),
        "parsed {deps:?}"
    );
    let bad: Vec<&str> = deps
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| !ALLOWED_DEPS.iter().any(|(a, _)| a == n))
        .collect();
    assert!(
        bad.is_empty(),
        "crates/core depends on {bad:?}: not on the no-I/O allow-list (a control-plane \
         dependency belongs in crates/control)"
    );
}

/// The `testing` feature (memory backends, test helpers) is for tests:
/// no crate links it into a build.
#[test]
fn no_crate_builds_the_testing_feature() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let root = crates.join("..").join("Cargo.toml");
    let mut manifests = vec![root];
    for e in std::fs::read_dir(&crates).expect("read crates") {
        let m = e.expect("dir entry").path().join("Cargo.toml");
        if m.exists() {
            manifests.push(m);
        }
    }
    for m in manifests {
        let text = std::fs::read_to_string(&m).expect("read manifest");
        for (name, spec) in dependency_names(&text) {
            assert!(
                !(name == "farflash-core" && spec.contains("testing")),
                "{}: farflash-core's testing feature in a build dependency",
                m.display()
            );
        }
    }
}
