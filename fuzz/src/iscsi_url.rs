//! `iscsi_url`: bytes as a `farflash perf --iscsi` value (and so a
//! `sweep --baseline iscsi` target URL) through `IscsiTarget::parse`.
//! Invariants: nothing panics; an accepted URL has a non-empty portal with
//! a port, a non-empty target name without whitespace and a LUN below
//! 16384, and printed back it parses to the same target. Nothing connects.

use farflash_bench::engine::iscsi::IscsiTarget;

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(t) = IscsiTarget::parse(text) else {
        return;
    };
    assert!(!t.portal.is_empty() && t.portal.contains(':'), "{text:?}");
    assert!(!t.iqn.is_empty(), "{text:?}");
    assert!(!t.iqn.chars().any(|c| c.is_whitespace() || c == '\0'));
    assert!(t.lun < 16384);
    let back = t.to_string();
    let again = IscsiTarget::parse(&back)
        .unwrap_or_else(|e| panic!("{text:?} printed as {back:?} does not parse: {e}"));
    assert_eq!(again, t, "{text:?} -> {back:?}");
}

#[cfg(test)]
mod tests {
    #[test]
    fn seeds_hold() {
        for s in [
            "iscsi://127.0.0.1:3261/iqn.2026-11.io.farflash:baseline1/1",
            "iscsi://[::1]/iqn.x:y/0",
            "iscsi://h/iqn/1/2",
            "iscsi://h/iqn/99999",
        ] {
            super::run(s.as_bytes());
        }
    }
}
