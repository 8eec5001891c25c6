//! File backend tests: a temporary file on the root file system (`/tmp`,
//! usually `O_DIRECT`-capable) and on tmpfs (`/dev/shm`), through both the
//! io_uring engine and the blocking fallback.

use super::*;
use crate::check::dealloc_buf;
use crate::test_util::{pattern, run_all, run_one, wait_readable, TempPath};
use crate::{IoCompletion, IoOp, IoRequest};

const MIB: u64 = 1 << 20;

struct Fixture {
    _tmp: TempPath,
    inner: Arc<FileInner>,
    backend: FileBackend,
}

impl Fixture {
    fn new(dir: &str, size: u64, opts: FileOptions) -> Self {
        let tmp = TempPath::new(dir);
        let opts = FileOptions {
            create_size: Some(size),
            ..opts
        };
        let inner = open_inner(tmp.path(), &opts).expect("open backing file");
        eprintln!("{dir}: direct={} engine=io_uring?", inner.direct);
        let backend = FileBackend(Arc::clone(&inner));
        Fixture {
            _tmp: tmp,
            inner,
            backend,
        }
    }

    fn queues(&self, depth: u32) -> [Box<dyn BackendQueue>; 2] {
        let uring = self.backend.open_queue(depth).expect("open queue");
        [uring, self.backend.blocking_queue(depth)]
    }
}

fn write_req(tag: u64, offset: u64, data: &[u8], fua: bool) -> IoRequest {
    let op = IoOp::Write {
        offset,
        len: data.len() as u32,
        fua,
    };
    IoRequest {
        tag,
        op,
        buf: IoBuf::from_slice(data),
    }
}

fn read_req(tag: u64, offset: u64, len: usize) -> IoRequest {
    let op = IoOp::Read {
        offset,
        len: len as u32,
    };
    IoRequest {
        tag,
        op,
        buf: IoBuf::with_capacity(len),
    }
}

fn all_ok(done: &[IoCompletion]) {
    for c in done {
        if let Err(e) = &c.result {
            panic!("request {} failed: {e}", c.tag);
        }
    }
}

fn read_back(q: &mut dyn BackendQueue, offset: u64, len: usize) -> Vec<u8> {
    let op = IoOp::Read {
        offset,
        len: len as u32,
    };
    run_one(q, op, IoBuf::with_capacity(len))
        .expect("read")
        .to_vec()
}

/// Many writes of mixed sizes in one batch, then reads of all of them in one
/// batch, with at most `depth` in the ring at once.
fn round_trip_batch(q: &mut dyn BackendQueue, bs: u64, count: u64, seed: u8) {
    let layout: Vec<(u64, usize)> = (0..count)
        .map(|i| {
            (
                i * 64 * 1024 + (i % 4) * bs,
                (bs as usize) * (1 + (i as usize % 8)),
            )
        })
        .collect();
    let writes = layout
        .iter()
        .enumerate()
        .map(|(i, &(off, len))| write_req(i as u64, off, &pattern(len, seed ^ i as u8), i % 3 == 0))
        .collect();
    all_ok(&run_all(q, writes));
    let reads = layout
        .iter()
        .enumerate()
        .map(|(i, &(off, len))| read_req(i as u64, off, len))
        .collect();
    let done = run_all(q, reads);
    all_ok(&done);
    for (c, &(_, len)) in done.iter().zip(&layout) {
        assert_eq!(c.buf.len(), len);
        assert!(
            c.buf.as_slice() == pattern(len, seed ^ c.tag as u8),
            "request {}",
            c.tag
        );
    }
}

fn round_trips(dir: &str, bs: u32) {
    let fx = Fixture::new(
        dir,
        16 * MIB,
        FileOptions {
            block_size: bs,
            ..Default::default()
        },
    );
    assert_eq!(fx.backend.kind(), "file");
    assert_eq!(fx.backend.capacity(), 16 * MIB);
    assert!(fx.backend.volatile_write_cache());
    let [mut uring, mut blocking] = fx.queues(16);
    assert!(
        uring.notify_fd().is_some(),
        "io_uring unavailable here: only the fallback is tested"
    );
    round_trip_batch(&mut *uring, bs.into(), 64, 1);
    round_trip_batch(&mut *blocking, bs.into(), 64, 2);
    // Each engine sees the other's data: same file.
    let data = pattern(8192, 9);
    all_ok(&run_all(&mut *uring, vec![write_req(1, MIB, &data, false)]));
    assert_eq!(read_back(&mut *blocking, MIB, 8192), data);
    assert!(fx.backend.sync_all().is_ok());
}

#[test]
fn round_trips_on_tmp_512() {
    round_trips("/tmp", 512);
}

#[test]
fn round_trips_on_tmp_4096() {
    round_trips("/tmp", 4096);
}

#[test]
fn round_trips_on_tmpfs() {
    round_trips("/dev/shm", 4096);
}

#[test]
fn more_requests_than_ring_entries() {
    let fx = Fixture::new("/tmp", 4 * MIB, FileOptions::default());
    let mut q = fx.backend.open_queue(4).unwrap();
    let writes = (0..300)
        .map(|i| write_req(i, i * 4096, &pattern(4096, i as u8), false))
        .collect();
    let done = run_all(&mut *q, writes);
    assert_eq!(done.len(), 300);
    all_ok(&done);
    let reads = (0..300).map(|i| read_req(i, i * 4096, 4096)).collect();
    for c in run_all(&mut *q, reads) {
        assert!(
            c.buf.as_slice() == pattern(4096, c.tag as u8),
            "request {}",
            c.tag
        );
    }
}

/// A request pushed by `submit` reaches the kernel through the next reap
/// when nobody commits (the pool queues submit follow-ups from their own
/// reap): the reap that finds no completion still submits.
#[test]
fn a_reap_submits_what_was_pushed_without_commit() {
    let fx = Fixture::new("/tmp", MIB, FileOptions::default());
    let mut q = fx.backend.open_queue(4).unwrap();
    assert!(q.notify_fd().is_some(), "io_uring unavailable here");
    q.submit(read_req(3, 0, 4096));
    let mut done = Vec::new();
    assert_eq!(q.reap(&mut done), 0, "nothing completed before the submit");
    assert!(
        wait_readable(q.notify_fd(), 10_000),
        "the read never reached the kernel"
    );
    while done.is_empty() {
        q.reap(&mut done);
    }
    all_ok(&done);
    assert_eq!(done[0].tag, 3);
}

#[test]
fn fua_write_and_flush() {
    let fx = Fixture::new("/tmp", MIB, FileOptions::default());
    for mut q in fx.queues(8) {
        let data = pattern(4096, 5);
        all_ok(&run_all(&mut *q, vec![write_req(1, 4096, &data, true)]));
        run_one(&mut *q, IoOp::Flush, IoBuf::with_capacity(0)).expect("flush");
        assert_eq!(read_back(&mut *q, 4096, 4096), data);
    }
}

/// Fills `len` bytes at 0 with a pattern, zeroes `zero` through `op_for`,
/// checks what reads back.
fn check_zeroing(
    q: &mut dyn BackendQueue,
    len: usize,
    op: IoOp,
    buf: IoBuf,
    zeroed: &[(u64, u64)],
) {
    let data = pattern(len, 0x5a);
    all_ok(&run_all(q, vec![write_req(0, 0, &data, false)]));
    run_one(q, op, buf).expect("zeroing request");
    let back = read_back(q, 0, len);
    for (i, (&got, &want)) in back.iter().zip(&data).enumerate() {
        let i = i as u64;
        let zero = zeroed.iter().any(|&(off, n)| (off..off + n).contains(&i));
        assert_eq!(got, if zero { 0 } else { want }, "byte {i} after {op:?}");
    }
}

fn zeroing(dir: &str, force_writes: bool) {
    let fx = Fixture::new(dir, 8 * MIB, FileOptions::default());
    if force_writes {
        fx.inner.zero.disable_fallocate();
    }
    let len = 4 * MIB as usize;
    for mut q in fx.queues(8) {
        // Spans more than one ZERO_CHUNK, with non-page-aligned edges.
        let range = (512, 3 * MIB + 1024);
        let op = IoOp::WriteZeroes {
            offset: range.0,
            len: range.1,
            fua: true,
        };
        check_zeroing(&mut *q, len, op, IoBuf::with_capacity(0), &[range]);

        let ranges = [
            (0, 512),
            (8192, 4096),
            (MIB - 512, MIB + 1024),
            (2 * MIB, 0),
        ];
        let op = IoOp::Deallocate {
            ranges: ranges.len() as u32,
        };
        check_zeroing(&mut *q, len, op, dealloc_buf(&ranges), &ranges);
    }
}

#[test]
fn write_zeroes_and_deallocate_on_tmp() {
    zeroing("/tmp", false);
}

#[test]
fn write_zeroes_and_deallocate_on_tmpfs() {
    // tmpfs has no FALLOC_FL_ZERO_RANGE: exercises the punch-hole fallback.
    zeroing("/dev/shm", false);
}

#[test]
fn write_zeroes_and_deallocate_by_writing() {
    zeroing("/tmp", true);
}

#[test]
fn deallocate_frees_blocks() {
    use std::os::unix::fs::MetadataExt;
    let fx = Fixture::new("/tmp", 8 * MIB, FileOptions::default());
    let mut q = fx.backend.open_queue(8).unwrap();
    all_ok(&run_all(
        &mut *q,
        vec![write_req(0, 0, &pattern(4 * MIB as usize, 1), true)],
    ));
    let blocks = |fx: &Fixture| fx.inner.file.metadata().map(|m| m.blocks()).unwrap_or(0);
    let before = blocks(&fx);
    run_one(
        &mut *q,
        IoOp::Deallocate { ranges: 1 },
        dealloc_buf(&[(0, 4 * MIB)]),
    )
    .unwrap();
    let after = blocks(&fx);
    assert!(after < before, "{before} -> {after} blocks");
}

#[test]
fn refused_requests_complete_with_errors() {
    let fx = Fixture::new("/tmp", MIB, FileOptions::default());
    for mut q in fx.queues(4) {
        let reqs = vec![
            read_req(0, MIB, 512),        // past the end
            read_req(1, MIB - 512, 1024), // straddles the end
            read_req(2, 100, 512),        // misaligned
            IoRequest {
                buf: IoBuf::with_capacity(4096),
                ..read_req(3, 0, 8192)
            }, // buffer too small
            IoRequest {
                tag: 4,
                op: IoOp::WriteZeroes {
                    offset: 0,
                    len: 2 * MIB,
                    fua: false,
                },
                buf: IoBuf::with_capacity(0),
            },
            IoRequest {
                tag: 5,
                op: IoOp::Deallocate { ranges: 3 },
                buf: dealloc_buf(&[(0, 512)]),
            },
            read_req(6, 0, 512), // fine, completes among the failures
        ];
        let done = run_all(&mut *q, reqs);
        for c in &done[..6] {
            let errno = c.result.as_ref().err().and_then(io::Error::raw_os_error);
            assert_eq!(errno, Some(libc::EINVAL), "request {}", c.tag);
        }
        assert!(done[6].result.is_ok());
    }
}

#[test]
fn read_only_refuses_writes() {
    let fx = Fixture::new("/tmp", MIB, FileOptions::default());
    let opts = FileOptions {
        read_only: true,
        ..Default::default()
    };
    let ro = open_file(fx._tmp.path(), &opts).unwrap();
    let mut q = ro.open_queue(4).unwrap();
    let err = run_one(
        &mut *q,
        IoOp::Write {
            offset: 0,
            len: 512,
            fua: false,
        },
        IoBuf::from_slice(&[1; 512]),
    );
    assert_eq!(err.unwrap_err().raw_os_error(), Some(libc::EROFS));
    assert_eq!(read_back(&mut *q, 0, 512), vec![0; 512]);
}

#[test]
fn file_shrunk_behind_our_back_fails_reads_with_eio() {
    let fx = Fixture::new(
        "/tmp",
        MIB,
        FileOptions {
            direct: DirectMode::Never,
            ..Default::default()
        },
    );
    fx.inner.file.set_len(MIB / 2).unwrap();
    for mut q in fx.queues(4) {
        // Short read (4 KiB before EOF), resubmitted remainder hits EOF.
        let op = IoOp::Read {
            offset: MIB / 2 - 4096,
            len: 8192,
        };
        let err = run_one(&mut *q, op, IoBuf::with_capacity(8192)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
    }
}

#[test]
fn dropping_a_busy_queue_waits_for_the_kernel() {
    let fx = Fixture::new("/tmp", 4 * MIB, FileOptions::default());
    let mut q = fx.backend.open_queue(8).unwrap();
    for i in 0..32 {
        q.submit(write_req(i, i * 65536, &pattern(65536, 3), false));
    }
    q.commit().unwrap();
    assert!(q.in_flight() > 0);
    drop(q);
}

#[test]
fn open_options() {
    let tmp = TempPath::new("/tmp");
    let path = tmp.path();
    let missing = open_file(path, &FileOptions::default())
        .err()
        .map(|e| e.kind());
    assert_eq!(missing, Some(io::ErrorKind::NotFound));
    let bad_bs = FileOptions {
        block_size: 1024,
        create_size: Some(MIB),
        ..Default::default()
    };
    assert!(open_file(path, &bad_bs).is_err());

    // Created at create_size, capacity rounded down to the block size.
    let opts = FileOptions {
        block_size: 4096,
        create_size: Some(MIB + 100),
        ..Default::default()
    };
    assert_eq!(open_file(path, &opts).unwrap().capacity(), MIB);
    // Extended, never shrunk.
    let grow = FileOptions {
        create_size: Some(2 * MIB),
        ..opts.clone()
    };
    assert_eq!(open_file(path, &grow).unwrap().capacity(), 2 * MIB);
    assert_eq!(open_file(path, &opts).unwrap().capacity(), 2 * MIB);
    // Read-only cannot extend.
    let ro_grow = FileOptions {
        read_only: true,
        create_size: Some(4 * MIB),
        ..opts.clone()
    };
    assert!(open_file(path, &ro_grow).is_err());

    for direct in [DirectMode::Never, DirectMode::Auto] {
        let inner = open_inner(
            path,
            &FileOptions {
                direct,
                ..opts.clone()
            },
        )
        .unwrap();
        assert_eq!(
            inner.direct,
            direct == DirectMode::Auto && supports_direct(path)
        );
    }

    let dir = open_file(Path::new("/tmp"), &FileOptions::default())
        .err()
        .map(|e| e.kind());
    assert_eq!(dir, Some(io::ErrorKind::InvalidInput));
    std::fs::write(path, [0u8; 100]).unwrap();
    let tiny = open_file(path, &FileOptions::default())
        .err()
        .map(|e| e.kind());
    assert_eq!(tiny, Some(io::ErrorKind::InvalidInput));
}

/// Whether an O_DIRECT 512-byte read works on `path`'s file system.
fn supports_direct(path: &Path) -> bool {
    let Ok(file) = open_data(path, true, true) else {
        return false;
    };
    probe_direct(&file, 2 * MIB, 512).is_ok()
}

#[test]
fn always_direct_on_tmp() {
    let tmp = TempPath::new("/tmp");
    std::fs::write(tmp.path(), vec![0; MIB as usize]).unwrap();
    if !supports_direct(tmp.path()) {
        eprintln!("/tmp has no O_DIRECT; skipped");
        return;
    }
    let opts = FileOptions {
        direct: DirectMode::Always,
        ..Default::default()
    };
    let inner = open_inner(tmp.path(), &opts).unwrap();
    assert!(inner.direct);
    let backend = FileBackend(inner);
    let mut q = backend.open_queue(4).unwrap();
    round_trip_batch(&mut *q, 512, 8, 4);
}

#[test]
fn direct_mode_fallbacks() {
    let einval = || io::Error::from_raw_os_error(libc::EINVAL);
    let eio = || io::Error::from_raw_os_error(libc::EIO);
    // (mode, open(true) fails?, probe error) -> Ok(direct) or Err(errno)
    type Case = (
        DirectMode,
        Option<fn() -> io::Error>,
        Option<fn() -> io::Error>,
        Result<bool, i32>,
    );
    let cases: [Case; 7] = [
        (DirectMode::Auto, None, None, Ok(true)),
        (DirectMode::Auto, Some(einval), None, Ok(false)),
        (DirectMode::Auto, None, Some(einval), Ok(false)),
        (DirectMode::Auto, None, Some(eio), Err(libc::EIO)),
        (DirectMode::Always, Some(einval), None, Err(libc::EINVAL)),
        (DirectMode::Always, None, Some(einval), Err(libc::EINVAL)),
        (DirectMode::Never, Some(einval), Some(einval), Ok(false)),
    ];
    for (mode, open_err, probe_err, want) in cases {
        let open = |direct: bool| match (direct, open_err) {
            (true, Some(e)) => Err(e()),
            _ => Ok(direct),
        };
        let probe = |&direct: &bool| match (direct, probe_err) {
            (true, Some(e)) => Err(e()),
            _ => Ok(()),
        };
        let got = choose_direct(mode, open, probe).map(|(fd_direct, direct)| {
            assert_eq!(
                fd_direct, direct,
                "the descriptor matches the reported mode"
            );
            direct
        });
        assert_eq!(
            got.map_err(|e| e.raw_os_error().unwrap_or(0)),
            want,
            "{mode:?} {open_err:?} {probe_err:?}"
        );
    }
}

/// Runs against a real block device named by `FARFLASH_TEST_BLOCK_DEVICE`
/// (e.g. a loop device). DESTRUCTIVE: its first 16 MiB are overwritten.
#[test]
#[ignore = "needs FARFLASH_TEST_BLOCK_DEVICE (destructive)"]
fn block_device() {
    let Some(dev) = std::env::var_os("FARFLASH_TEST_BLOCK_DEVICE") else {
        eprintln!("FARFLASH_TEST_BLOCK_DEVICE not set; skipped");
        return;
    };
    let inner = open_inner(
        Path::new(&dev),
        &FileOptions {
            block_size: 4096,
            ..Default::default()
        },
    )
    .unwrap();
    eprintln!("{inner:?}");
    let backend = FileBackend(inner);
    assert_eq!(backend.kind(), "block");
    assert!(backend.capacity() >= 16 * MIB);
    for mut q in [backend.open_queue(16).unwrap(), backend.blocking_queue(16)] {
        round_trip_batch(&mut *q, 4096, 64, 8);
        let range = (4096, 3 * MIB);
        let op = IoOp::WriteZeroes {
            offset: range.0,
            len: range.1,
            fua: true,
        };
        check_zeroing(
            &mut *q,
            4 * MIB as usize,
            op,
            IoBuf::with_capacity(0),
            &[range],
        );
        let ranges = [(0, 4096), (MIB, MIB)];
        let op = IoOp::Deallocate { ranges: 2 };
        check_zeroing(&mut *q, 4 * MIB as usize, op, dealloc_buf(&ranges), &ranges);
    }
    backend.sync_all().unwrap();
}
