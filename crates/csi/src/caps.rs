//! Which volume capabilities the driver takes: a block volume or a mount
//! (ext4 or xfs), on one node read-write, or read-only on many. Errors
//! name the field.

use crate::proto::volume_capability::access_mode::Mode;
use crate::proto::volume_capability::AccessType;
use crate::proto::VolumeCapability;

/// File systems the node service makes and mounts.
pub const FS_TYPES: [&str; 2] = ["ext4", "xfs"];

/// Whether `m` lets only one node use the volume.
pub fn single_node(m: Mode) -> bool {
    matches!(
        m,
        Mode::SingleNodeWriter
            | Mode::SingleNodeReaderOnly
            | Mode::SingleNodeSingleWriter
            | Mode::SingleNodeMultiWriter
    )
}

/// Whether `m` lets nodes only read the volume (its publish is then a
/// read-only grant whatever the request's `readonly` says).
pub fn reader_only(m: Mode) -> bool {
    matches!(m, Mode::SingleNodeReaderOnly | Mode::MultiNodeReaderOnly)
}

fn mode_of(c: &VolumeCapability) -> Option<Mode> {
    c.access_mode
        .as_ref()
        .and_then(|a| Mode::try_from(a.mode).ok())
}

/// The access mode of a checked capability.
pub fn mode(c: &VolumeCapability) -> Mode {
    mode_of(c).unwrap_or(Mode::Unknown)
}

/// Checks one capability; `field` names it in the error.
pub fn check(c: &VolumeCapability, field: &str) -> Result<(), String> {
    match &c.access_type {
        None => return Err(format!("{field}.access_type: missing (block or mount)")),
        Some(AccessType::Mount(m)) => {
            if !m.fs_type.is_empty() && !FS_TYPES.contains(&m.fs_type.as_str()) {
                return Err(format!(
                    "{field}.mount.fs_type {:?}: not supported (ext4 or xfs)",
                    m.fs_type
                ));
            }
        }
        Some(AccessType::Block(_)) => {}
    }
    match mode_of(c) {
        None | Some(Mode::Unknown) => Err(format!("{field}.access_mode: missing or unknown")),
        Some(Mode::MultiNodeSingleWriter | Mode::MultiNodeMultiWriter) => Err(format!(
            "{field}.access_mode {:?}: not supported (a volume is written from one node; read-only from many)",
            mode(c).as_str_name()
        )),
        Some(_) => Ok(()),
    }
}

/// Checks a request's list of capabilities (at least one).
pub fn check_all(caps: &[VolumeCapability]) -> Result<(), String> {
    if caps.is_empty() {
        return Err("volume_capabilities: missing".into());
    }
    for (i, c) in caps.iter().enumerate() {
        check(c, &format!("volume_capabilities[{i}]"))?;
    }
    Ok(())
}

/// Whether a capability asks for a file system (the node grows it after
/// the namespace grew).
pub fn is_mount(c: &VolumeCapability) -> bool {
    matches!(c.access_type, Some(AccessType::Mount(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::volume_capability::{AccessMode, BlockVolume, MountVolume};

    fn cap(mode: Mode, fs: Option<&str>) -> VolumeCapability {
        VolumeCapability {
            access_mode: Some(AccessMode { mode: mode as i32 }),
            access_type: Some(match fs {
                Some(f) => AccessType::Mount(MountVolume {
                    fs_type: f.into(),
                    ..Default::default()
                }),
                None => AccessType::Block(BlockVolume {}),
            }),
        }
    }

    #[test]
    fn supported_and_refused_capabilities() {
        check_all(&[
            cap(Mode::SingleNodeWriter, Some("ext4")),
            cap(Mode::MultiNodeReaderOnly, None),
        ])
        .unwrap();
        check_all(&[cap(Mode::SingleNodeSingleWriter, Some(""))]).unwrap();
        assert_eq!(check_all(&[]).unwrap_err(), "volume_capabilities: missing");
        let e = check_all(&[
            cap(Mode::SingleNodeWriter, None),
            cap(Mode::MultiNodeMultiWriter, None),
        ])
        .unwrap_err();
        assert!(
            e.starts_with("volume_capabilities[1].access_mode \"MULTI_NODE_MULTI_WRITER\""),
            "{e}"
        );
        let e = check_all(&[cap(Mode::SingleNodeWriter, Some("btrfs"))]).unwrap_err();
        assert!(
            e.contains("volume_capabilities[0].mount.fs_type \"btrfs\""),
            "{e}"
        );
        let mut none = cap(Mode::SingleNodeWriter, None);
        none.access_type = None;
        assert!(check(&none, "volume_capability")
            .unwrap_err()
            .contains("volume_capability.access_type"));
        let mut unknown = cap(Mode::SingleNodeWriter, None);
        unknown.access_mode = Some(AccessMode { mode: 99 });
        assert!(check(&unknown, "c").unwrap_err().contains("c.access_mode"));
        assert!(single_node(Mode::SingleNodeReaderOnly) && !single_node(Mode::MultiNodeReaderOnly));
    }
}
