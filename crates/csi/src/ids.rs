//! Volume and snapshot identifiers: what Kubernetes keeps in a
//! PersistentVolume (`volume_id`) and a VolumeSnapshotContent
//! (`snapshot_id`), from which every later call finds the volume again.
//!
//! `TARGETS/POOL/NAME`: the targets a volume lives on (comma-separated,
//! the first creates it and is ANA optimized), its pool, and its name in
//! the pool. A snapshot's NAME is `VOLUME@SNAP` (RBD's own notation, which
//! an rbd pool requires and a local pool accepts), so its id tells its
//! source volume. Target names are `[A-Za-z0-9._-]` (checked in the controller's
//! configuration), pool and volume names `[A-Za-z0-9._:@+-]`, 1-64 bytes
//! (the pool engine's rule): neither `/` nor `,` can occur in a part.
//!
//! Names in a pool come from the CSI request's name (`pvc-<uuid>`,
//! `snapshot-<uuid>`), the idempotency key of CreateVolume and
//! CreateSnapshot: kept as they are when they fit, else a hash of them.

use sha2::{Digest, Sha256};
use std::fmt;

/// Longest pool or volume name a pool takes.
pub const MAX_NAME: usize = 64;
/// Longest volume name kept as given (room for a snapshot's `@s-HASH`).
const MAX_KEPT: usize = MAX_NAME - 19;

/// Whether `s` is a pool or volume name the pool engine takes.
pub fn valid_pool_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._:@+-".contains(&c))
}

/// Whether `s` is a target name (the controller configuration's).
pub fn valid_target_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c))
}

fn hash16(s: &str) -> String {
    let d = Sha256::digest(s.as_bytes());
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The volume's name in its pool for CreateVolume's `name`.
pub fn volume_name(csi_name: &str) -> String {
    let kept = csi_name.len() <= MAX_KEPT
        && valid_pool_name(csi_name)
        && !csi_name.contains('@')
        && !csi_name.starts_with("h-");
    if kept {
        csi_name.to_owned()
    } else {
        format!("h-{}", hash16(csi_name))
    }
}

/// The snapshot's name in its pool for CreateSnapshot's `name` taken of
/// the volume named `volume` in the pool: `VOLUME@s-HASH`.
pub fn snapshot_name(csi_name: &str, volume: &str) -> String {
    format!("{volume}@s-{}", hash16(csi_name))
}

/// A volume's (or snapshot's) place: targets, pool, name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeId {
    targets: Vec<String>,
    pool: String,
    name: String,
}

/// Why an id was refused (the CSI answer is NotFound: an id that cannot be
/// ours names no volume of ours).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a farflash volume or snapshot id (want TARGETS/POOL/NAME)")]
pub struct BadId(pub String);

impl VolumeId {
    pub fn new(targets: Vec<String>, pool: &str, name: &str) -> VolumeId {
        VolumeId {
            targets,
            pool: pool.to_owned(),
            name: name.to_owned(),
        }
    }

    pub fn parse(id: &str) -> Result<VolumeId, BadId> {
        let bad = || BadId(id.to_owned());
        let mut parts = id.split('/');
        let (Some(t), Some(pool), Some(name), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let targets: Vec<String> = t.split(',').map(str::to_owned).collect();
        if !targets.iter().all(|t| valid_target_name(t))
            || !valid_pool_name(pool)
            || !valid_pool_name(name)
        {
            return Err(bad());
        }
        Ok(VolumeId::new(targets, pool, name))
    }

    pub fn targets(&self) -> &[String] {
        &self.targets
    }
    /// The target that creates the volume (ANA optimized).
    pub fn primary(&self) -> &str {
        &self.targets[0]
    }
    pub fn pool(&self) -> &str {
        &self.pool
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    /// `POOL/NAME`, as `namespace_add` names a volume.
    pub fn pool_path(&self) -> String {
        format!("{}/{}", self.pool, self.name)
    }
    /// For a snapshot's id: its source volume's id.
    pub fn snapshot_source(&self) -> Option<VolumeId> {
        let (vol, _) = self.name.split_once('@')?;
        Some(VolumeId::new(self.targets.clone(), &self.pool, vol))
    }
    /// The same targets and pool, another name.
    pub fn sibling(&self, name: &str) -> VolumeId {
        VolumeId::new(self.targets.clone(), &self.pool, name)
    }

    /// The volume's subsystem: one per volume, the same NQN on every target.
    pub fn nqn(&self) -> String {
        format!("nqn.2026-11.io.farflash.csi:{}:{}", self.pool, self.name)
    }
}

impl fmt::Display for VolumeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.targets.join(","), self.pool, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_name_their_parts() {
        let id = VolumeId::new(vec!["target-a".into(), "target-b".into()], "fast", "pvc-1");
        assert_eq!(id.to_string(), "target-a,target-b/fast/pvc-1");
        let back = VolumeId::parse(&id.to_string()).unwrap();
        assert_eq!(back, id);
        assert_eq!(back.primary(), "target-a");
        assert_eq!(back.pool_path(), "fast/pvc-1");
        assert_eq!(back.nqn(), "nqn.2026-11.io.farflash.csi:fast:pvc-1");
        assert_eq!(back.snapshot_source(), None);
    }

    #[test]
    fn hostile_ids_are_refused() {
        for bad in [
            "",
            "a/b",
            "a/b/c/d",
            "/pool/name",
            "a,,b/pool/name",
            "a/po ol/name",
            "a/pool/",
            "a b/pool/name",
            &format!("a/pool/{}", "x".repeat(65)),
            "a/pool/na\u{e9}me",
        ] {
            assert!(VolumeId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn csi_names_are_kept_when_they_fit_and_hashed_otherwise() {
        let pvc = "pvc-5e2c7a4e-1b0d-4f7a-9b7e-2f1a3c4d5e6f";
        assert_eq!(volume_name(pvc), pvc);
        // Too long, or characters a pool refuses, or '@' (a snapshot's
        // separator), or the hash prefix itself: hashed, deterministically.
        for odd in [
            "x".repeat(46),
            "a/b".into(),
            "vol@1".into(),
            "h-0123".into(),
        ] {
            let n = volume_name(&odd);
            assert!(
                n.starts_with("h-") && n.len() == 18 && valid_pool_name(&n),
                "{n}"
            );
            assert_eq!(volume_name(&odd), n);
        }
        assert_ne!(volume_name("a/b"), volume_name("a/c"));
        // The longest kept volume name still leaves room for its snapshots.
        let longest = "v".repeat(MAX_KEPT);
        let s = snapshot_name(
            "snapshot-5e2c7a4e-1b0d-4f7a-9b7e-2f1a3c4d5e6f",
            &volume_name(&longest),
        );
        assert!(valid_pool_name(&s), "{s}");
        let sid = VolumeId::new(vec!["t".into()], "p", &s);
        let sid = VolumeId::parse(&sid.to_string()).unwrap();
        assert_eq!(sid.snapshot_source().unwrap().name(), longest);
    }
}
