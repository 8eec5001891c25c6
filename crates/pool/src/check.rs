//! Offline verification of a pool (`farflash pool check`).

use crate::error::PoolError;
use crate::open::{identify, load};
use farflash_backend::{DirectMode, FileOptions, SharedBackend};
use std::path::PathBuf;

/// What [`check`] found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// What is wrong, one sentence each (empty: the pool is sound).
    pub problems: Vec<String>,
    /// What a crash may leave and opening repairs (a torn superblock copy),
    /// and where the journal ends.
    pub notes: Vec<String>,
    pub volumes: usize,
    pub total_clusters: u64,
    pub used_clusters: u64,
}

impl Report {
    /// No problem found.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks the pool on `devices` (opened read-only).
pub fn check(devices: &[PathBuf]) -> Report {
    let opts = FileOptions {
        block_size: 4096,
        direct: DirectMode::Auto,
        create_size: None,
        read_only: true,
    };
    let _locks = match crate::lock::lock_devices(devices, false) {
        Ok(l) => l,
        Err(e) => return Report::from(e),
    };
    let mut opened = Vec::new();
    for p in devices {
        match farflash_backend::open_file(p, &opts) {
            Ok(b) => opened.push((p.display().to_string(), b)),
            Err(e) => {
                return Report {
                    problems: vec![format!("opening device {}: {e}", p.display())],
                    ..Report::default()
                }
            }
        }
    }
    check_backends(opened)
}

/// [`check`] over backends (label, backend).
pub fn check_backends(devices: Vec<(String, SharedBackend)>) -> Report {
    let mut r = Report::default();
    let found = match identify(devices) {
        Ok(f) => f,
        Err(e) => {
            r.problems.push(e.to_string());
            return r;
        }
    };
    r.notes.extend(found.damaged.iter().cloned());
    r.total_clusters = found.devs.total;
    let Some((st, end)) = load(&found, &mut r.problems) else {
        return r;
    };
    r.notes.push(format!(
        "journal: {} blocks replayed; stopped at {}",
        end.used, end.stop
    ));
    r.volumes = st.vols.len();
    r.used_clusters = st.used();
    let owned: u64 = st.vols.values().map(|v| v.layer.own()).sum();
    if owned != st.used() {
        r.problems.push(format!(
            "accounting: volumes hold {owned} clusters but {} are in use",
            st.used()
        ));
    }
    r
}

impl From<PoolError> for Report {
    fn from(e: PoolError) -> Report {
        Report {
            problems: vec![e.to_string()],
            ..Report::default()
        }
    }
}
