//! A single-node Ceph cluster for tests (tests/ceph/cluster.sh: one
//! monitor, one manager, one OSD, pool `rbd` with image `test`, on
//! 127.0.0.1 under a temporary directory), stopped when dropped.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

pub struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ceph/cluster.sh")
}

impl Cluster {
    /// Starts a cluster under a directory named after `name` and this process.
    pub fn start(name: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!("ff-ceph-{name}-{}", std::process::id()));
        let _ = Command::new("bash")
            .arg(script())
            .args(["stop".as_ref(), dir.as_os_str()])
            .status();
        let t = Instant::now();
        let out = Command::new("bash")
            .arg(script())
            .args(["start".as_ref(), dir.as_os_str()])
            .stderr(Stdio::inherit())
            .output()
            .expect("run tests/ceph/cluster.sh");
        let c = Cluster {
            conf: dir.join("ceph.conf"),
            dir,
        };
        assert!(out.status.success(), "the Ceph cluster did not start");
        eprintln!("ceph cluster up in {:.1?}", t.elapsed());
        c
    }

    /// The cluster's ceph.conf (its `[client]` section names the admin keyring).
    pub fn conf(&self) -> &str {
        self.conf.to_str().expect("utf-8 path")
    }

    /// The cluster's directory (daemons' data, logs); tests may put files there.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stops the OSD only (fault injection); the monitor stays up.
    pub fn stop_osd(&self) {
        let st = Command::new("bash")
            .arg(script())
            .args(["stop-osd".as_ref(), self.dir.as_os_str()])
            .status()
            .expect("stop the OSD");
        assert!(st.success());
    }

    /// `rbd ARGS` on this cluster, which must succeed.
    pub fn rbd(&self, args: &[&str]) -> Output {
        let out = self.rbd_any(args);
        assert!(
            out.status.success(),
            "rbd {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// `rbd ARGS` on this cluster, whatever its outcome.
    pub fn rbd_any(&self, args: &[&str]) -> Output {
        Command::new("timeout")
            .args(["120", "rbd", "-c"])
            .arg(&self.conf)
            .args(args)
            .output()
            .expect("run rbd")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .args(["stop".as_ref(), self.dir.as_os_str()])
            .status();
    }
}
