//! Thin safe wrappers over the librbd/librados calls RBD pools make
//! (`farflash-rbd-sys`): an open image ([`Img`]), the pool-level calls on
//! an I/O context, and the C lists librbd hands back, copied into Rust
//! values and freed at once. Every failure is an [`Errno`] naming the call;
//! `super::volumes` turns it into a [`crate::PoolError`] naming the volume.

use farflash_rbd_sys as sys;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io;
use std::ptr;

/// A librbd/librados call that failed: which, and the errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Errno {
    pub(super) call: &'static str,
    pub(super) code: i32,
}

impl Errno {
    pub(super) fn io(self) -> io::Error {
        let os = io::Error::from_raw_os_error(self.code);
        io::Error::new(os.kind(), format!("{}: {os}", self.call))
    }
}

pub(super) type Res<T> = Result<T, Errno>;

/// `rc` as a result: negative values are `-errno`.
fn check(call: &'static str, rc: impl Into<i64>) -> Res<i64> {
    let rc = rc.into();
    if rc < 0 {
        let code = i32::try_from(-rc).unwrap_or(libc::EIO);
        return Err(Errno { call, code });
    }
    Ok(rc)
}

/// A name as a C string; names with a NUL byte are refused before any
/// call (`super::names`), so this only guards against a bug.
pub(super) fn c(s: &str) -> Res<CString> {
    CString::new(s).map_err(|_| Errno {
        call: "name with a NUL byte",
        code: libc::EINVAL,
    })
}

/// A C string librbd returned, copied (NULL as empty).
///
/// # Safety
/// `p` is NULL or a valid NUL-terminated string.
unsafe fn owned(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated (the caller's contract).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A clone of an RBD image: what librbd's child and parent specs say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Linked {
    pub(super) pool: String,
    pub(super) image: String,
    /// In the RBD trash (removed, waiting for its snapshots' children).
    pub(super) trash: bool,
}

/// A snapshot as `rbd_snap_list` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Snap {
    pub(super) id: u64,
    pub(super) name: String,
    pub(super) size: u64,
}

/// Space of the whole cluster and of the pool, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Space {
    pub(super) cluster_size: u64,
    pub(super) cluster_avail: u64,
    pub(super) pool_used: u64,
}

/// Image names in the pool (`rbd_list2`).
pub(super) fn list_images(io: sys::rados_ioctx_t) -> Res<Vec<String>> {
    let mut max: usize = 64;
    loop {
        // SAFETY: `rbd_image_spec_t` is plain C data; zeroed is a valid
        // empty spec for librbd to fill.
        let mut specs: Vec<sys::rbd_image_spec_t> = vec![unsafe { std::mem::zeroed() }; max];
        let mut n = max;
        // SAFETY: `specs` holds `n` entries; librbd fills up to `n` and
        // writes the count (or the size it needs, with -ERANGE).
        let rc = unsafe { sys::rbd_list2(io, specs.as_mut_ptr(), &mut n) };
        if rc == -libc::ERANGE && n > max {
            max = n;
            continue;
        }
        check("rbd_list2", rc)?;
        let names = specs[..n]
            .iter()
            // SAFETY: librbd filled the first `n` specs with valid strings.
            .map(|s| unsafe { owned(s.name) })
            .collect();
        // SAFETY: the first `n` specs were filled by rbd_list2 and are
        // freed once here.
        unsafe { sys::rbd_image_spec_list_cleanup(specs.as_mut_ptr(), n) };
        return Ok(names);
    }
}

/// Creates image `name` of `size` bytes with `features` (default object size).
pub(super) fn create(io: sys::rados_ioctx_t, name: &str, size: u64, features: u64) -> Res<()> {
    let n = c(name)?;
    let mut order: c_int = 0;
    // SAFETY: the ioctx is live, `n` a valid C string; order 0 = default.
    let rc = unsafe { sys::rbd_create2(io, n.as_ptr(), size, features, &mut order) };
    check("rbd_create2", rc).map(drop)
}

/// Clones `parent@snap` (a protected snapshot) into `name`, in the same pool.
pub(super) fn clone(
    io: sys::rados_ioctx_t,
    parent: &str,
    snap: &str,
    name: &str,
    features: u64,
) -> Res<()> {
    let (p, s, n) = (c(parent)?, c(snap)?, c(name)?);
    let mut order: c_int = 0;
    // SAFETY: both contexts are the same live ioctx; the strings are valid;
    // order 0 and stripe 0/0 take the parent's layout.
    let rc = unsafe {
        sys::rbd_clone2(
            io,
            p.as_ptr(),
            s.as_ptr(),
            io,
            n.as_ptr(),
            features,
            &mut order,
            0,
            0,
        )
    };
    check("rbd_clone2", rc).map(drop)
}

pub(super) fn remove(io: sys::rados_ioctx_t, name: &str) -> Res<()> {
    let n = c(name)?;
    // SAFETY: the ioctx is live, `n` a valid C string.
    check("rbd_remove", unsafe { sys::rbd_remove(io, n.as_ptr()) }).map(drop)
}

pub(super) fn rename(io: sys::rados_ioctx_t, from: &str, to: &str) -> Res<()> {
    let (f, t) = (c(from)?, c(to)?);
    // SAFETY: the ioctx is live; both are valid C strings.
    check("rbd_rename", unsafe {
        sys::rbd_rename(io, f.as_ptr(), t.as_ptr())
    })
    .map(drop)
}

/// The cluster's raw space and the pool's use.
pub(super) fn space(cluster: sys::rados_t, io: sys::rados_ioctx_t) -> Res<Space> {
    // SAFETY: plain C data, filled by librados.
    let mut cs: sys::rados_cluster_stat_t = unsafe { std::mem::zeroed() };
    // SAFETY: the cluster is connected; librados writes one struct.
    check("rados_cluster_stat", unsafe {
        sys::rados_cluster_stat(cluster, &mut cs)
    })?;
    // SAFETY: plain C data, filled by librados.
    let mut ps: sys::rados_pool_stat_t = unsafe { std::mem::zeroed() };
    // SAFETY: the ioctx is live; librados writes one struct.
    check("rados_ioctx_pool_stat", unsafe {
        sys::rados_ioctx_pool_stat(io, &mut ps)
    })?;
    Ok(Space {
        cluster_size: cs.kb.saturating_mul(1024),
        cluster_avail: cs.kb_avail.saturating_mul(1024),
        pool_used: ps.num_bytes,
    })
}

/// librbd's progress callback for calls that require one: reports nothing.
unsafe extern "C" fn no_progress(_offset: u64, _total: u64, _arg: *mut c_void) -> c_int {
    0
}

/// What `rbd_diff_iterate2` reports, summed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Extents {
    /// Bytes in extents that hold data.
    pub(super) bytes: u64,
    /// The end of the last extent that holds data (0 if none).
    pub(super) end: u64,
}

unsafe extern "C" fn add_extent(off: u64, len: usize, exists: c_int, arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `&mut Extents` `Img::extents` passed, alive for
    // the synchronous rbd_diff_iterate2 call that runs this callback.
    let e = unsafe { &mut *arg.cast::<Extents>() };
    if exists != 0 {
        let len = len as u64;
        e.bytes = e.bytes.saturating_add(len);
        e.end = e.end.max(off.saturating_add(len));
    }
    0
}

/// An open image (head or a snapshot, read-write or read-only), closed on drop.
pub(super) struct Img {
    h: sys::rbd_image_t,
}

impl Img {
    /// Opens `name` read-write (registers librbd's header watch).
    pub(super) fn open(io: sys::rados_ioctx_t, name: &str) -> Res<Img> {
        let n = c(name)?;
        let mut h = ptr::null_mut();
        // SAFETY: the ioctx is live; NULL snap = the head.
        check("rbd_open", unsafe {
            sys::rbd_open(io, n.as_ptr(), &mut h, ptr::null())
        })?;
        Ok(Img { h })
    }

    /// Opens `name` (at `snap`, or the head) read-only: no watch, no lock.
    pub(super) fn open_ro(io: sys::rados_ioctx_t, name: &str, snap: Option<&str>) -> Res<Img> {
        let n = c(name)?;
        let s = snap.map(c).transpose()?;
        let sp = s.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        let mut h = ptr::null_mut();
        // SAFETY: the ioctx is live; `sp` is NULL or a valid C string.
        check("rbd_open_read_only", unsafe {
            sys::rbd_open_read_only(io, n.as_ptr(), &mut h, sp)
        })?;
        Ok(Img { h })
    }

    pub(super) fn size(&self) -> Res<u64> {
        let mut size = 0;
        // SAFETY: the image is open; librbd writes one u64.
        check("rbd_get_size", unsafe {
            sys::rbd_get_size(self.h, &mut size)
        })?;
        Ok(size)
    }

    /// The prefix of the image's data objects (`rbd_data.ID`): unique in
    /// the pool and kept across renames, unlike the name.
    pub(super) fn block_prefix(&self) -> Res<String> {
        // SAFETY: plain C data, filled by librbd.
        let mut info: sys::rbd_image_info_t = unsafe { std::mem::zeroed() };
        let len = std::mem::size_of::<sys::rbd_image_info_t>();
        // SAFETY: the image is open; `info` is `len` bytes.
        check("rbd_stat", unsafe { sys::rbd_stat(self.h, &mut info, len) })?;
        let p = &info.block_name_prefix;
        let end = p.iter().position(|c| *c == 0).unwrap_or(p.len());
        let bytes: Vec<u8> = p[..end].iter().map(|c| *c as u8).collect();
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Resizes; a shrink only with `allow_shrink` (librbd refuses otherwise).
    pub(super) fn resize(&self, size: u64, allow_shrink: bool) -> Res<()> {
        // SAFETY: the image is open; the callback ignores its arguments.
        check("rbd_resize2", unsafe {
            sys::rbd_resize2(
                self.h,
                size,
                allow_shrink,
                Some(no_progress),
                ptr::null_mut(),
            )
        })
        .map(drop)
    }

    /// Sums the extents holding data in `[off, off + len)` (`from`: only
    /// those changed since that snapshot; `parent`: the parent's data a
    /// clone reads through counts; `whole_object`: object granularity,
    /// from the object map when fast-diff is valid).
    pub(super) fn extents(
        &self,
        from: Option<&str>,
        off: u64,
        len: u64,
        parent: bool,
        whole_object: bool,
    ) -> Res<Extents> {
        let f = from.map(c).transpose()?;
        let fp = f.as_ref().map_or(ptr::null(), |f| f.as_ptr());
        let mut e = Extents::default();
        // SAFETY: the image is open; `fp` is NULL or a valid C string; the
        // call is synchronous, so `e` outlives every callback.
        check("rbd_diff_iterate2", unsafe {
            sys::rbd_diff_iterate2(
                self.h,
                fp,
                off,
                len,
                u8::from(parent),
                u8::from(whole_object),
                Some(add_extent),
                (&mut e as *mut Extents).cast(),
            )
        })?;
        Ok(e)
    }

    /// User snapshots, oldest first.
    pub(super) fn snaps(&self) -> Res<Vec<Snap>> {
        let mut max: c_int = 16;
        loop {
            let cap = usize::try_from(max).unwrap_or(16).max(1);
            // SAFETY: plain C data for librbd to fill.
            let mut v: Vec<sys::rbd_snap_info_t> = vec![unsafe { std::mem::zeroed() }; cap + 1];
            let mut n = max;
            // SAFETY: `v` has room for `max` entries plus the terminator.
            let rc = unsafe { sys::rbd_snap_list(self.h, v.as_mut_ptr(), &mut n) };
            if rc == -libc::ERANGE && n > max {
                max = n;
                continue;
            }
            let count = usize::try_from(check("rbd_snap_list", rc)?).unwrap_or(0);
            let snaps = v[..count]
                .iter()
                .map(|s| Snap {
                    id: s.id,
                    // SAFETY: librbd filled `count` entries with valid names.
                    name: unsafe { owned(s.name) },
                    size: s.size,
                })
                .collect();
            // SAFETY: the list was filled by rbd_snap_list; freed once.
            unsafe { sys::rbd_snap_list_end(v.as_mut_ptr()) };
            let mut snaps: Vec<Snap> = snaps;
            snaps.sort_by_key(|s| s.id);
            return Ok(snaps);
        }
    }

    pub(super) fn snap_id(&self, snap: &str) -> Res<u64> {
        let s = c(snap)?;
        let mut id = 0;
        // SAFETY: the image is open; librbd writes one u64.
        check("rbd_snap_get_id", unsafe {
            sys::rbd_snap_get_id(self.h, s.as_ptr(), &mut id)
        })?;
        Ok(id)
    }

    pub(super) fn snap_create(&self, snap: &str) -> Res<()> {
        self.snap_call("rbd_snap_create", snap, sys::rbd_snap_create)
    }

    pub(super) fn snap_remove(&self, snap: &str) -> Res<()> {
        self.snap_call("rbd_snap_remove", snap, sys::rbd_snap_remove)
    }

    pub(super) fn snap_protect(&self, snap: &str) -> Res<()> {
        self.snap_call("rbd_snap_protect", snap, sys::rbd_snap_protect)
    }

    pub(super) fn snap_unprotect(&self, snap: &str) -> Res<()> {
        self.snap_call("rbd_snap_unprotect", snap, sys::rbd_snap_unprotect)
    }

    fn snap_call(
        &self,
        call: &'static str,
        snap: &str,
        f: unsafe fn(sys::rbd_image_t, *const c_char) -> c_int,
    ) -> Res<()> {
        let s = c(snap)?;
        // SAFETY: the image is open (read-write for the changing calls:
        // librbd answers EROFS otherwise); `s` is a valid C string.
        check(call, unsafe { f(self.h, s.as_ptr()) }).map(drop)
    }

    pub(super) fn snap_rename(&self, from: &str, to: &str) -> Res<()> {
        let (f, t) = (c(from)?, c(to)?);
        // SAFETY: the image is open read-write; both valid C strings.
        check("rbd_snap_rename", unsafe {
            sys::rbd_snap_rename(self.h, f.as_ptr(), t.as_ptr())
        })
        .map(drop)
    }

    pub(super) fn snap_is_protected(&self, snap: &str) -> Res<bool> {
        let s = c(snap)?;
        let mut p: c_int = 0;
        // SAFETY: the image is open; librbd writes one int.
        check("rbd_snap_is_protected", unsafe {
            sys::rbd_snap_is_protected(self.h, s.as_ptr(), &mut p)
        })?;
        Ok(p != 0)
    }

    /// The clones of the snapshot this handle was opened at.
    pub(super) fn children(&self) -> Res<Vec<Linked>> {
        let mut max: usize = 16;
        loop {
            // SAFETY: plain C data for librbd to fill.
            let mut v: Vec<sys::rbd_linked_image_spec_t> = vec![unsafe { std::mem::zeroed() }; max];
            let mut n = max;
            // SAFETY: `v` holds `n` entries; librbd fills up to `n`.
            let rc = unsafe { sys::rbd_list_children3(self.h, v.as_mut_ptr(), &mut n) };
            if rc == -libc::ERANGE && n > max {
                max = n;
                continue;
            }
            check("rbd_list_children3", rc)?;
            // SAFETY: librbd filled the first `n` entries.
            let out = v[..n].iter().map(|s| unsafe { linked(s) }).collect();
            // SAFETY: filled by rbd_list_children3, freed once.
            unsafe { sys::rbd_linked_image_spec_list_cleanup(v.as_mut_ptr(), n) };
            return Ok(out);
        }
    }

    /// The parent snapshot of a clone (`None` for an image without one).
    pub(super) fn parent(&self) -> Res<Option<(Linked, String)>> {
        // SAFETY: plain C data for librbd to fill.
        let mut img: sys::rbd_linked_image_spec_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut snap: sys::rbd_snap_spec_t = unsafe { std::mem::zeroed() };
        // SAFETY: the image is open; librbd fills both structs on success.
        let rc = unsafe { sys::rbd_get_parent(self.h, &mut img, &mut snap) };
        if rc == -libc::ENOENT {
            return Ok(None);
        }
        check("rbd_get_parent", rc)?;
        // SAFETY: both were filled by rbd_get_parent; each freed once.
        let out = unsafe {
            let out = (linked(&img), owned(snap.name));
            sys::rbd_linked_image_spec_cleanup(&mut img);
            sys::rbd_snap_spec_cleanup(&mut snap);
            out
        };
        Ok(Some(out))
    }

    /// The clients watching the image (each has it open read-write: a
    /// gateway exporting it, a VM, `rbd map`), by address.
    pub(super) fn watchers(&self) -> Res<Vec<String>> {
        let mut max: usize = 8;
        loop {
            // SAFETY: plain C data for librbd to fill.
            let mut v: Vec<sys::rbd_image_watcher_t> = vec![unsafe { std::mem::zeroed() }; max];
            let mut n = max;
            // SAFETY: `v` holds `n` entries; librbd fills up to `n`.
            let rc = unsafe { sys::rbd_watchers_list(self.h, v.as_mut_ptr(), &mut n) };
            if rc == -libc::ERANGE && n > max {
                max = n;
                continue;
            }
            check("rbd_watchers_list", rc)?;
            // SAFETY: librbd filled the first `n` entries.
            let out = v[..n].iter().map(|w| unsafe { owned(w.addr) }).collect();
            // SAFETY: filled by rbd_watchers_list, freed once.
            unsafe { sys::rbd_watchers_list_cleanup(v.as_mut_ptr(), n) };
            return Ok(out);
        }
    }

    /// Copies the parent's data in and detaches the clone (synchronous).
    pub(super) fn flatten(&self) -> Res<()> {
        // SAFETY: the image is open read-write.
        check("rbd_flatten", unsafe { sys::rbd_flatten(self.h) }).map(drop)
    }

    /// Image metadata `key` (`None` when unset).
    pub(super) fn meta_get(&self, key: &str) -> Res<Option<String>> {
        let k = c(key)?;
        let mut buf = vec![0u8; 64];
        loop {
            let mut len = buf.len();
            // SAFETY: the image is open; librbd writes at most `len` bytes
            // and sets `len` to the size (NUL included) it needs.
            let rc = unsafe {
                sys::rbd_metadata_get(self.h, k.as_ptr(), buf.as_mut_ptr().cast(), &mut len)
            };
            if rc == -libc::ENOENT {
                return Ok(None);
            }
            if rc == -libc::ERANGE && len > buf.len() && len <= 1 << 20 {
                buf.resize(len, 0);
                continue;
            }
            check("rbd_metadata_get", rc)?;
            let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
            return Ok(Some(String::from_utf8_lossy(&buf[..end]).into_owned()));
        }
    }

    pub(super) fn meta_set(&self, key: &str, value: &str) -> Res<()> {
        let (k, v) = (c(key)?, c(value)?);
        // SAFETY: the image is open read-write; both valid C strings.
        check("rbd_metadata_set", unsafe {
            sys::rbd_metadata_set(self.h, k.as_ptr(), v.as_ptr())
        })
        .map(drop)
    }

    pub(super) fn meta_remove(&self, key: &str) -> Res<()> {
        let k = c(key)?;
        // SAFETY: the image is open read-write; `k` a valid C string.
        let rc = unsafe { sys::rbd_metadata_remove(self.h, k.as_ptr()) };
        if rc == -libc::ENOENT {
            return Ok(());
        }
        check("rbd_metadata_remove", rc).map(drop)
    }
}

/// Copies a linked image spec.
///
/// # Safety
/// `s` was filled by librbd (its strings NULL or valid).
unsafe fn linked(s: &sys::rbd_linked_image_spec_t) -> Linked {
    Linked {
        // SAFETY: the caller's contract.
        pool: unsafe { owned(s.pool_name) },
        // SAFETY: as above.
        image: unsafe { owned(s.image_name) },
        trash: s.trash,
    }
}

impl Drop for Img {
    fn drop(&mut self) {
        // SAFETY: the handle is open and closed once, here.
        unsafe { sys::rbd_close(self.h) };
    }
}
