//! Names of an RBD pool's volumes and snapshots.
//!
//! A volume is an RBD image and keeps its name. A snapshot is named to the
//! API as `VOLUME@SNAP`, RBD's own notation (`rbd snap ls`, `rbd clone
//! pool/vol@snap`), so a snapshot's name is unique in the pool and says
//! which image holds it. New names follow the local pools' rule (1-64
//! bytes of `[A-Za-z0-9._:+-]`) without `@`, which separates the two.

use crate::PoolError;

/// A parsed API name: an image, or one of its snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Name<'a> {
    Volume(&'a str),
    Snapshot { volume: &'a str, snap: &'a str },
}

/// Whether `s` may name a new volume or snapshot part.
fn valid(s: &str) -> bool {
    !s.is_empty() && !s.contains('@') && crate::format::valid_name(s)
}

/// Checks a name for a new volume or snapshot (`field` names the argument).
pub(super) fn check_new(field: &'static str, s: &str) -> Result<(), PoolError> {
    if valid(s) {
        return Ok(());
    }
    Err(PoolError::invalid(
        field,
        format!("{s:?} is not 1-64 bytes of [A-Za-z0-9._:+-]"),
    ))
}

/// Parses a name given to look something up: `VOLUME` or `VOLUME@SNAP`.
/// Images made outside farflash may have other names, so lookups accept
/// anything RBD could hold: no NUL, no `/`, at most one `@`, parts not empty.
pub(super) fn parse<'a>(field: &'static str, s: &'a str) -> Result<Name<'a>, PoolError> {
    let bad = |why: &str| PoolError::invalid(field, format!("{s:?}: {why}"));
    if s.contains('\0') || s.contains('/') {
        return Err(bad("contains a NUL byte or '/'"));
    }
    match s.split_once('@') {
        None if s.is_empty() => Err(bad("empty")),
        None => Ok(Name::Volume(s)),
        Some((v, sn)) if v.is_empty() || sn.is_empty() || sn.contains('@') => {
            Err(bad("a snapshot is named VOLUME@SNAP"))
        }
        Some((volume, snap)) => Ok(Name::Snapshot { volume, snap }),
    }
}

/// A volume's name, refusing a snapshot (`what` says what the call needs).
pub(super) fn volume<'a>(field: &'static str, s: &'a str) -> Result<&'a str, PoolError> {
    match parse(field, s)? {
        Name::Volume(v) => Ok(v),
        Name::Snapshot { .. } => Err(PoolError::ReadOnly(s.to_owned())),
    }
}

/// A snapshot's parts, refusing a plain volume.
pub(super) fn snapshot<'a>(
    field: &'static str,
    s: &'a str,
) -> Result<(&'a str, &'a str), PoolError> {
    match parse(field, s)? {
        Name::Snapshot { volume, snap } => Ok((volume, snap)),
        Name::Volume(_) => Err(PoolError::NotSnapshot(s.to_owned())),
    }
}

/// `VOLUME@SNAP`.
pub(super) fn join(volume: &str, snap: &str) -> String {
    format!("{volume}@{snap}")
}

/// The metadata key of the image that holds the stable UUID of its
/// snapshot `id` (snapshot ids survive renames; images have no metadata
/// per snapshot).
pub(super) fn snap_uuid_key(id: u64) -> String {
    format!("{}.snap.{id}", super::UUID_KEY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_names_follow_the_local_rule_without_at() {
        assert!(check_new("name", "vol-1_a.b:c+d").is_ok());
        for bad in ["", "a@b", "a/b", "a b", "é", &"x".repeat(65)] {
            let e = check_new("name", bad).unwrap_err();
            assert!(
                matches!(e, PoolError::Invalid { field: "name", .. }),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn lookups_split_volume_and_snapshot() {
        assert_eq!(parse("name", "v").unwrap(), Name::Volume("v"));
        assert_eq!(
            parse("name", "v@s").unwrap(),
            Name::Snapshot {
                volume: "v",
                snap: "s"
            }
        );
        // Outside names with characters farflash would not create.
        assert_eq!(parse("name", "my vol").unwrap(), Name::Volume("my vol"));
        for bad in ["", "@s", "v@", "v@s@t", "p/v", "v\0"] {
            let e = parse("snapshot", bad).unwrap_err();
            assert!(
                e.to_string().starts_with("invalid snapshot:"),
                "{bad:?}: {e}"
            );
        }
        assert!(matches!(volume("name", "v@s"), Err(PoolError::ReadOnly(n)) if n == "v@s"));
        assert!(matches!(snapshot("snapshot", "v"), Err(PoolError::NotSnapshot(n)) if n == "v"));
        assert_eq!(snapshot("snapshot", "v@s").unwrap(), ("v", "s"));
        assert_eq!(join("v", "s"), "v@s");
        assert_eq!(snap_uuid_key(7), "farflash.uuid.snap.7");
    }
}
