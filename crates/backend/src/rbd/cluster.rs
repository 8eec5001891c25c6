//! The connection to a Ceph cluster and one open RBD image (librados,
//! librbd through `farflash-rbd-sys`), with errors that name what is wrong:
//! the ceph.conf, the keyring, the cluster, the pool or the image.

use super::close::{close_elsewhere, Handles};
use farflash_rbd_sys as sys;
use std::ffi::{c_char, CString};
use std::io;
use std::path::PathBuf;
use std::ptr;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// How to reach one RBD image.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RbdOptions {
    /// Pool holding the image.
    pub pool: String,
    /// Image name.
    pub image: String,
    /// ceph.conf path; Ceph's default search (`$CEPH_CONF`, /etc/ceph/ceph.conf,
    /// ...) when `None`.
    pub conf: Option<PathBuf>,
    /// Client id without the `client.` prefix (default "admin").
    pub id: Option<String>,
    /// Keyring path; otherwise the `keyring` of the ceph.conf.
    pub keyring: Option<PathBuf>,
    /// Logical block size of the namespace (512 or 4096).
    pub block_size: u32,
}

/// Time limits farflash sets when the ceph.conf leaves Ceph's defaults
/// (which never time out a monitor or OSD operation and wait 300 s to
/// connect), so that an unreachable cluster fails the start and a stopped
/// OSD fails commands instead of hanging them.
pub(crate) const TIMEOUTS: [(&str, f64, Duration); 3] = [
    // name, Ceph's default (seconds), farflash's
    ("client_mount_timeout", 300.0, Duration::from_secs(10)),
    ("rados_mon_op_timeout", 0.0, Duration::from_secs(10)),
    ("rados_osd_op_timeout", 0.0, Duration::from_secs(20)),
];

/// An `io::Error` for a negative errno `rc` of librados/librbd, prefixed
/// with what was being done.
pub(crate) fn ceph_err(rc: i64, what: impl std::fmt::Display) -> io::Error {
    let errno = i32::try_from(-rc).unwrap_or(libc::EIO);
    let os = io::Error::from_raw_os_error(errno);
    io::Error::new(os.kind(), format!("{what}: {os}"))
}

fn cstring(s: &str, what: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} contains a NUL byte"),
        )
    })
}

/// An open image with its cluster handle and pool context. librbd's image
/// handle is thread-safe: every queue of every worker submits through it.
pub(crate) struct Image {
    cluster: sys::rados_t,
    ioctx: sys::rados_ioctx_t,
    pub(crate) handle: sys::rbd_image_t,
    /// The OSD operation timeout in force (bounds every request).
    pub(crate) osd_op_timeout: Duration,
    /// Whether this gateway may write: it owns the exclusive lock (taken
    /// and released on ANA changes, `lock.rs`), or the image has no such
    /// lock. Queues read it per write; written only on ANA changes and when
    /// librbd reports this client blocklisted.
    pub(crate) lock_owned: AtomicBool,
    /// librbd's update watch on the image header (a resize wakes the
    /// target's size check, `crate::changes`), when registered.
    update_watch: Option<u64>,
    /// Set once the open succeeded: from then on the last reference may be
    /// dropped by an event loop, so the close goes to a thread of its own
    /// (`super::close`). A failed open closes on the opener's thread.
    opened: bool,
}

/// librbd's update-watch callback (its own thread): the image header
/// changed (a resize, among others).
unsafe extern "C" fn on_header_update(_arg: *mut std::ffi::c_void) {
    crate::changes::notify_changed();
}

// SAFETY: librados cluster/ioctx handles and librbd image handles may be used
// from any thread (librbd serializes internally; aio calls are thread-safe),
// and `Image` only closes them in `Drop`, when no other reference remains.
unsafe impl Send for Image {}
// SAFETY: as above; shared use goes through librbd's own locking.
unsafe impl Sync for Image {}

/// Connects `*cluster` as `opts.id` with `opts.conf` and `opts.keyring`
/// (farflash's time limits where the ceph.conf keeps Ceph's defaults,
/// `rbd_cache` off) and opens `*ioctx` on `opts.pool`; returns the OSD
/// operation timeout in force. On an error, the handles left non-null are
/// live and the caller closes them.
fn connect(
    opts: &RbdOptions,
    cluster: &mut sys::rados_t,
    ioctx: &mut sys::rados_ioctx_t,
) -> io::Result<Duration> {
    let id = opts.id.as_deref().unwrap_or("admin");
    let client = format!("client.{id}");
    let c_id = cstring(id, "ceph client id")?;
    // librados and librbd are opened here, on first use: a machine
    // without them serves every other backend, and this names the
    // package to install.
    sys::load().map_err(|e| io::Error::new(io::ErrorKind::NotFound, e))?;
    // SAFETY: `c_id` is a valid C string; `cluster` receives the handle.
    let rc = unsafe { sys::rados_create(cluster, c_id.as_ptr()) };
    if rc < 0 {
        *cluster = ptr::null_mut();
        return Err(ceph_err(rc.into(), format!("rados_create for {client}")));
    }
    let conf = match &opts.conf {
        Some(p) => {
            if !p.is_file() {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("ceph.conf {} does not exist", p.display()),
                ));
            }
            Some(cstring(&p.to_string_lossy(), "ceph.conf path")?)
        }
        None => None,
    };
    let conf_ptr = conf.as_ref().map_or(ptr::null(), |c| c.as_ptr());
    // SAFETY: the cluster handle is live; `conf_ptr` is NULL (default
    // search) or a valid C string.
    let rc = unsafe { sys::rados_conf_read_file(*cluster, conf_ptr) };
    if rc < 0 {
        let name = opts
            .conf
            .as_ref()
            .map_or("the default ceph.conf".into(), |p| p.display().to_string());
        return Err(ceph_err(rc.into(), format!("reading {name}")));
    }
    if let Some(k) = &opts.keyring {
        if !k.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("ceph keyring {} does not exist", k.display()),
            ));
        }
        conf_set(*cluster, "keyring", &k.to_string_lossy())?;
    }
    for (name, ceph_default, ours) in TIMEOUTS {
        if conf_secs(*cluster, name)? == ceph_default {
            conf_set(*cluster, name, &ours.as_secs().to_string())?;
        }
    }
    let osd_op_timeout = Duration::from_secs_f64(conf_secs(*cluster, "rados_osd_op_timeout")?);
    // No write-back cache in the gateway: a write is on the OSDs when it
    // completes, so another gateway exporting the same image (ANA
    // failover) reads it, and the namespace reports no volatile cache.
    conf_set(*cluster, "rbd_cache", "false")?;
    // SAFETY: the cluster handle is configured and not yet connected.
    let rc = unsafe { sys::rados_connect(*cluster) };
    if rc < 0 {
        let hint = match -rc {
            libc::ETIMEDOUT => " (is the cluster up and mon_host right?)",
            libc::EACCES | libc::EPERM => " (wrong key for this client id?)",
            libc::ENOENT => " (no keyring found for this client id?)",
            _ => "",
        };
        // Nothing of the failed connection may be used again.
        // SAFETY: the handle is live and is shut down exactly once here.
        unsafe { sys::rados_shutdown(*cluster) };
        *cluster = ptr::null_mut();
        return Err(ceph_err(
            rc.into(),
            format!("connecting to the Ceph cluster as {client}{hint}"),
        ));
    }
    let c_pool = cstring(&opts.pool, "pool name")?;
    // SAFETY: the cluster is connected; `c_pool` is a valid C string.
    let rc = unsafe { sys::rados_ioctx_create(*cluster, c_pool.as_ptr(), ioctx) };
    if rc < 0 {
        *ioctx = ptr::null_mut();
        return Err(ceph_err(rc.into(), format!("pool {:?}", opts.pool)));
    }
    Ok(osd_op_timeout)
}

fn conf_set(cluster: sys::rados_t, name: &str, value: &str) -> io::Result<()> {
    let (n, v) = (cstring(name, name)?, cstring(value, name)?);
    // SAFETY: the cluster handle is live; both are valid C strings.
    let rc = unsafe { sys::rados_conf_set(cluster, n.as_ptr(), v.as_ptr()) };
    if rc < 0 {
        return Err(ceph_err(rc.into(), format!("setting {name} = {value}")));
    }
    Ok(())
}

/// A duration option in seconds.
fn conf_secs(cluster: sys::rados_t, name: &str) -> io::Result<f64> {
    let n = cstring(name, name)?;
    let mut buf = [0 as c_char; 64];
    // SAFETY: the cluster handle is live; librados writes at most
    // `buf.len()` bytes, NUL included.
    let rc = unsafe { sys::rados_conf_get(cluster, n.as_ptr(), buf.as_mut_ptr(), buf.len()) };
    if rc < 0 {
        return Err(ceph_err(rc.into(), format!("reading option {name}")));
    }
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    let s = String::from_utf8_lossy(&bytes);
    s.trim().parse::<f64>().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("option {name} is {s:?}, not a number of seconds"),
        )
    })
}

impl Image {
    /// Connects to the cluster and opens `opts.pool`/`opts.image`.
    pub(crate) fn open(opts: &RbdOptions) -> io::Result<Image> {
        let mut img = Image {
            cluster: ptr::null_mut(),
            ioctx: ptr::null_mut(),
            handle: ptr::null_mut(),
            osd_op_timeout: Duration::ZERO,
            lock_owned: AtomicBool::new(false),
            update_watch: None,
            opened: false,
        };
        img.osd_op_timeout = connect(opts, &mut img.cluster, &mut img.ioctx)?;
        let c_image = cstring(&opts.image, "image name")?;
        // SAFETY: the ioctx is live; the name is a valid C string; NULL snap
        // opens the image head read-write.
        let rc =
            unsafe { sys::rbd_open(img.ioctx, c_image.as_ptr(), &mut img.handle, ptr::null()) };
        if rc < 0 {
            img.handle = ptr::null_mut();
            return Err(ceph_err(
                rc.into(),
                format!("image {}/{}", opts.pool, opts.image),
            ));
        }
        let mut watch = 0u64;
        // SAFETY: the image is open; the callback takes no argument and
        // only signals (`on_header_update`); it is unregistered in `Drop`
        // before the image closes.
        let rc = unsafe {
            sys::rbd_update_watch(
                img.handle,
                &mut watch,
                Some(on_header_update),
                ptr::null_mut(),
            )
        };
        if rc < 0 {
            return Err(ceph_err(
                rc.into(),
                format!("watching image {}/{} for resizes", opts.pool, opts.image),
            ));
        }
        img.update_watch = Some(watch);
        img.opened = true;
        Ok(img)
    }

    /// The image's size in bytes (asked of librbd, which follows resizes).
    pub(crate) fn size(&self) -> io::Result<u64> {
        let mut size = 0u64;
        // SAFETY: the image handle is open; librbd writes one u64.
        let rc = unsafe { sys::rbd_get_size(self.handle, &mut size) };
        if rc < 0 {
            return Err(ceph_err(rc.into(), "rbd_get_size"));
        }
        Ok(size)
    }

    /// Waits until every write completed so far is on the OSDs.
    pub(crate) fn flush(&self) -> io::Result<()> {
        // SAFETY: the image handle is open.
        let rc = unsafe { sys::rbd_flush(self.handle) };
        if rc < 0 {
            return Err(ceph_err(rc.into(), "rbd_flush"));
        }
        Ok(())
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let h = Handles {
            cluster: std::mem::replace(&mut self.cluster, ptr::null_mut()),
            ioctx: std::mem::replace(&mut self.ioctx, ptr::null_mut()),
            image: std::mem::replace(&mut self.handle, ptr::null_mut()),
            update_watch: self.update_watch.take(),
        };
        if self.opened {
            close_elsewhere(h);
        } else {
            drop(h);
        }
    }
}

/// A connection to a Ceph cluster with an I/O context on one pool, made
/// as an RBD namespace's is (same errors, time limits and settings): what
/// RBD pools (farflash-pool) manage images through. librados handles are
/// thread-safe; dropping closes the context, then the connection.
pub struct RadosPool {
    cluster: sys::rados_t,
    ioctx: sys::rados_ioctx_t,
}

// SAFETY: librados cluster and I/O context handles may be used from any
// thread; `RadosPool` closes them only in `Drop`, as their only owner.
unsafe impl Send for RadosPool {}
// SAFETY: as above; librados serializes shared use internally.
unsafe impl Sync for RadosPool {}

impl RadosPool {
    /// Connects with `opts.conf`, `opts.id` and `opts.keyring` and opens
    /// `opts.pool` (`opts.image` and `opts.block_size` are not used).
    /// Errors name the ceph.conf, keyring, cluster or pool that is wrong.
    pub fn connect(opts: &RbdOptions) -> io::Result<RadosPool> {
        let mut p = RadosPool {
            cluster: ptr::null_mut(),
            ioctx: ptr::null_mut(),
        };
        connect(opts, &mut p.cluster, &mut p.ioctx)?;
        Ok(p)
    }

    /// The connected cluster handle, live as long as `self`.
    pub fn cluster(&self) -> sys::rados_t {
        self.cluster
    }

    /// The pool's I/O context, live as long as `self`.
    pub fn ioctx(&self) -> sys::rados_ioctx_t {
        self.ioctx
    }
}

impl Drop for RadosPool {
    fn drop(&mut self) {
        // SAFETY: each handle is closed once (this is their only owner),
        // the context before the cluster; null ones were never opened.
        unsafe {
            if !self.ioctx.is_null() {
                sys::rados_ioctx_destroy(self.ioctx);
            }
            if !self.cluster.is_null() {
                sys::rados_shutdown(self.cluster);
            }
        }
    }
}
