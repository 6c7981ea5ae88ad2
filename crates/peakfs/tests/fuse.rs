//! `peakfs mount` through the kernel: a FUSE mount of a real cluster (master + 2 servers),
//! exercised with std::fs, and commit consistency between the mount and a second client.
//! Skipped with a printed reason when /dev/fuse is missing or not root; FUSE_TESTS=1 makes
//! a skip a failure.

mod client_support;

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use client_support::Cluster;
use peakfs::placement::{DataDist, home_lambda};

fn fuse_available() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ok = root && Path::new("/dev/fuse").exists();
    if !ok {
        assert!(
            std::env::var("FUSE_TESTS").as_deref() != Ok("1"),
            "FUSE_TESTS=1 but /dev/fuse is missing or not root"
        );
        println!("skipped: FUSE needs root and /dev/fuse");
    }
    ok
}

/// A cluster of 2 servers and its FUSE mount; None (the test skips) without FUSE.
fn mounted() -> Option<(Cluster, tempfile::TempDir, fuser::BackgroundSession)> {
    if !fuse_available() {
        return None;
    }
    let cl = Cluster::start(2);
    let mnt = tempfile::tempdir().unwrap();
    // Users other than root (the set-ID test's writer) must reach the mount point.
    std::fs::set_permissions(mnt.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let session =
        peakfs::fuse::spawn_mount(vec![cl.client(), cl.client(), cl.client()], mnt.path()).unwrap();
    Some((cl, mnt, session))
}

#[test]
fn a_fuse_mount_behaves_like_a_posix_file_system_and_commits_on_close() {
    let Some((cl, mnt, session)) = mounted() else {
        return;
    };
    let m = mnt.path();
    std::fs::create_dir(m.join("d")).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 1000) as u8).collect();
    {
        let mut f = std::fs::File::create(m.join("d/f")).unwrap();
        f.write_all(&data).unwrap();
        f.seek(SeekFrom::Start(1000)).unwrap();
        f.write_all(b"patched").unwrap();
    }
    let mut want = data.clone();
    want[1000..1007].copy_from_slice(b"patched");
    // Another client sees the data once the mount's file is closed (commit consistency).
    let mut other = cl.client();
    assert_eq!(other.stat("/d/f").unwrap().size, want.len() as u64);
    let fd = other.open("/d/f", libc::O_RDONLY, 0).unwrap();
    assert!(other.pread(fd, want.len(), 0).unwrap() == want);
    other.close(fd).unwrap();
    let mut got = Vec::new();
    std::fs::File::open(m.join("d/f"))
        .unwrap()
        .read_to_end(&mut got)
        .unwrap();
    assert!(got == want, "read back through the mount differs");

    std::fs::set_permissions(m.join("d/f"), std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        std::fs::metadata(m.join("d/f")).unwrap().mode() & 0o7777,
        0o600
    );
    std::os::unix::fs::symlink("d/f", m.join("link")).unwrap();
    assert_eq!(
        std::fs::read_link(m.join("link")).unwrap(),
        Path::new("d/f")
    );
    assert_eq!(std::fs::read(m.join("link")).unwrap().len(), want.len());
    let c = std::ffi::CString::new(m.join("fifo").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    assert!(
        std::fs::symlink_metadata(m.join("fifo"))
            .unwrap()
            .file_type()
            .is_fifo()
    );

    std::fs::rename(m.join("d/f"), m.join("g")).unwrap();
    let mut names: Vec<_> = std::fs::read_dir(m)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["d", "fifo", "g", "link"]);
    std::fs::OpenOptions::new()
        .write(true)
        .open(m.join("g"))
        .unwrap()
        .set_len(10)
        .unwrap();
    assert_eq!(std::fs::read(m.join("g")).unwrap(), &want[..10]);
    for f in ["g", "link", "fifo"] {
        std::fs::remove_file(m.join(f)).unwrap();
    }
    std::fs::remove_dir(m.join("d")).unwrap();
    assert_eq!(std::fs::read_dir(m).unwrap().count(), 0);
    session.umount_and_join().unwrap();
}

#[test]
fn hard_links_device_numbers_and_open_unlinked_files_through_the_kernel() {
    let Some((cl, mnt, session)) = mounted() else {
        return;
    };
    let m = mnt.path();
    std::fs::create_dir(m.join("a")).unwrap();
    std::fs::create_dir(m.join("b")).unwrap();
    assert_eq!(std::fs::metadata(m).unwrap().nlink(), 4, "root: 2 + a + b");
    std::fs::write(m.join("a/f"), b"shared").unwrap();
    std::fs::hard_link(m.join("a/f"), m.join("b/g")).unwrap();
    let (f, g) = (
        std::fs::metadata(m.join("a/f")).unwrap(),
        std::fs::metadata(m.join("b/g")).unwrap(),
    );
    assert_eq!((f.ino(), f.nlink()), (g.ino(), 2));
    std::fs::write(m.join("b/g"), b"changed").unwrap();
    assert_eq!(std::fs::read(m.join("a/f")).unwrap(), b"changed");
    std::fs::remove_file(m.join("a/f")).unwrap();
    assert_eq!(std::fs::metadata(m.join("b/g")).unwrap().nlink(), 1);

    let dev = std::ffi::CString::new(m.join("tty").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let r = unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(4, 64)) };
    assert_eq!(r, 0);
    assert_eq!(
        std::fs::symlink_metadata(m.join("tty")).unwrap().rdev(),
        libc::makedev(4, 64)
    );

    std::fs::rename(m.join("b"), m.join("a/b")).unwrap();
    assert_eq!(std::fs::metadata(m).unwrap().nlink(), 3);
    assert_eq!(std::fs::metadata(m.join("a")).unwrap().nlink(), 3);

    let mut open = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.join("a/b/g"))
        .unwrap();
    std::fs::remove_file(m.join("a/b/g")).unwrap();
    assert_eq!(open.metadata().unwrap().nlink(), 0);
    open.seek(SeekFrom::End(0)).unwrap();
    open.write_all(b" and unlinked").unwrap();
    let mut back = String::new();
    open.seek(SeekFrom::Start(0)).unwrap();
    open.read_to_string(&mut back).unwrap();
    assert_eq!(back, "changed and unlinked");
    drop(open);
    std::fs::remove_file(m.join("tty")).unwrap();
    std::fs::remove_dir(m.join("a/b")).unwrap();
    std::fs::remove_dir(m.join("a")).unwrap();
    assert_eq!(std::fs::metadata(m).unwrap().nlink(), 2);
    session.umount_and_join().unwrap();
    assert_eq!(
        cl.client().statfs().unwrap().inodes_used,
        1,
        "only the root is left"
    );
}

fn c_path(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap()
}

fn os_result(r: isize) -> Result<usize, i32> {
    usize::try_from(r).map_err(|_| std::io::Error::last_os_error().raw_os_error().unwrap())
}

fn get_xattr(p: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let (p, name) = (c_path(p), std::ffi::CString::new(name).unwrap());
    // SAFETY: valid NUL-terminated strings; size 0 asks for the length only.
    let len =
        os_result(unsafe { libc::getxattr(p.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) })?;
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` has `len` writable bytes.
    let n = os_result(unsafe {
        libc::getxattr(p.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), len)
    })?;
    buf.truncate(n);
    Ok(buf)
}

fn set_xattr(p: &Path, name: &str, value: &[u8], flags: i32) -> Result<(), i32> {
    let (p, name) = (c_path(p), std::ffi::CString::new(name).unwrap());
    // SAFETY: valid NUL-terminated strings and a value of `value.len()` bytes.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    };
    os_result(r as isize).map(|_| ())
}

fn remove_xattr(p: &Path, name: &str) -> Result<(), i32> {
    let (p, name) = (c_path(p), std::ffi::CString::new(name).unwrap());
    // SAFETY: valid NUL-terminated strings.
    os_result(unsafe { libc::removexattr(p.as_ptr(), name.as_ptr()) } as isize).map(|_| ())
}

fn list_xattr(p: &Path) -> Vec<u8> {
    let p = c_path(p);
    let mut buf = vec![0u8; 256];
    // SAFETY: `buf` has 256 writable bytes.
    let n = os_result(unsafe { libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) });
    buf.truncate(n.unwrap());
    buf
}

#[test]
fn placement_hints_are_extended_attributes_through_the_kernel() {
    let Some((cl, mnt, session)) = mounted() else {
        return;
    };
    let m = mnt.path();
    let n1 = m.join("n1");
    std::fs::create_dir(&n1).unwrap();
    let words = String::from_utf8(get_xattr(&n1, "user.peakfs.dist").unwrap()).unwrap();
    let bigdir = words.ends_with(",bigdir");
    assert!(words.starts_with("block"), "{words}");
    set_xattr(&n1, "user.peakfs.dist", b"io", 0).unwrap();
    set_xattr(&n1, "user.peakfs.io_unit", b"47008", libc::XATTR_CREATE).unwrap();
    assert_eq!(list_xattr(&n1), b"user.peakfs.dist\0user.peakfs.io_unit\0");
    // The directory's bigdir flag is fixed at mkdir; other names do not exist here.
    let flip = if bigdir { "io,dir" } else { "io,bigdir" };
    assert_eq!(
        set_xattr(&n1, "user.peakfs.dist", flip.as_bytes(), 0),
        Err(libc::EPERM)
    );
    assert_eq!(
        set_xattr(&n1, "user.peakfs.dist", b"huge", 0),
        Err(libc::EINVAL)
    );
    assert_eq!(
        set_xattr(&n1, "user.peakfs.io_unit", b"100", 0),
        Err(libc::EINVAL)
    );
    assert_eq!(get_xattr(&n1, "user.comment"), Err(libc::ENODATA));
    assert_eq!(set_xattr(&n1, "user.comment", b"x", 0), Err(libc::ENOTSUP));

    // A file written through the kernel's pieces gets the directory's unit, not theirs.
    let data: Vec<u8> = (0..1_000_000u32)
        .map(|i| (i * 13 + i / 4093) as u8)
        .collect();
    std::fs::write(n1.join("f"), &data).unwrap();
    assert!(std::fs::read(n1.join("f")).unwrap() == data, "read back");
    let f = n1.join("f");
    assert_eq!(get_xattr(&f, "user.peakfs.dist").unwrap(), b"io");
    assert_eq!(get_xattr(&f, "user.peakfs.io_unit").unwrap(), b"47008");
    assert_eq!(cl.client().stat("/n1/f").unwrap().io_unit, 47_008);
    assert_eq!(
        set_xattr(&f, "user.peakfs.dist", b"block", 0),
        Err(libc::EBUSY)
    );
    assert_eq!(
        set_xattr(&f, "user.peakfs.io_unit", b"8192", 0),
        Err(libc::EBUSY)
    );
    // An empty file's distribution changes, and then its unit may be fixed before a write.
    std::fs::write(m.join("e"), b"").unwrap();
    let e = m.join("e");
    set_xattr(&e, "user.peakfs.dist", b"io", 0).unwrap();
    set_xattr(&e, "user.peakfs.io_unit", b"8192", 0).unwrap();
    std::fs::write(&e, &data[..100_000]).unwrap();
    assert!(std::fs::read(&e).unwrap() == data[..100_000], "read back");
    assert_eq!(cl.client().stat("/e").unwrap().io_unit, 8192);

    remove_xattr(&n1, "user.peakfs.io_unit").unwrap();
    assert_eq!(get_xattr(&n1, "user.peakfs.io_unit"), Err(libc::ENODATA));
    assert_eq!(remove_xattr(&n1, "user.peakfs.dist"), Err(libc::EPERM));
    session.umount_and_join().unwrap();
}

#[test]
fn writes_truncates_and_changes_of_owner_drop_set_id_bits_as_the_kernel_would() {
    use std::os::unix::process::CommandExt;
    let Some((_cluster, mnt, session)) = mounted() else {
        return;
    };
    let m = mnt.path();
    let mode = |name: &str| std::fs::metadata(m.join(name)).unwrap().mode() & 0o7777;
    let set = |name: &str, bits: u32| {
        std::fs::set_permissions(m.join(name), std::fs::Permissions::from_mode(bits)).unwrap()
    };
    // An unprivileged writer (no CAP_FSETID), as the kernel's FUSE_WRITE_KILL_SUIDGID marks.
    let as_nobody = |script: &str| {
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(m)
            .uid(65534)
            .gid(65534)
            .status()
            .unwrap();
        assert!(status.success(), "{script}");
    };
    for name in ["w", "t", "keep"] {
        std::fs::write(m.join(name), b"data").unwrap();
    }
    set("w", 0o6777);
    set("t", 0o6777);
    set("keep", 0o2666);
    as_nobody("printf more >> w; : > t; printf more >> keep");
    assert_eq!(
        mode("w"),
        0o777,
        "a write drops both bits of a group-executable file"
    );
    assert_eq!(mode("t"), 0o777, "so does a truncating open");
    assert_eq!(
        mode("keep"),
        0o2666,
        "set-group-ID without group execute stays"
    );
    assert_eq!(std::fs::read(m.join("w")).unwrap(), b"datamore");
    // Root (CAP_FSETID) keeps them on a write; a change of owner drops them for anyone.
    set("w", 0o4755);
    std::fs::OpenOptions::new()
        .append(true)
        .open(m.join("w"))
        .unwrap()
        .write_all(b"!")
        .unwrap();
    assert_eq!(mode("w"), 0o4755);
    std::os::unix::fs::chown(m.join("w"), Some(65534), None).unwrap();
    assert_eq!(mode("w"), 0o755);
    session.umount_and_join().unwrap();
}

/// A file under `/` of `cl` with 10 bytes, whose inode (and so its data) is on `server`.
fn file_on_server(cl: &Cluster, server: u32) -> String {
    let mut c = cl.client();
    for i in 0.. {
        let path = format!("/on{server}-{i}");
        let fd = c.create(&path, 0o644).unwrap();
        c.write(fd, b"0123456789").unwrap();
        c.close(fd).unwrap();
        let ino = c.stat(&path).unwrap().ino;
        if c.layout().route(home_lambda(ino)).server == server {
            return path;
        }
        c.unlink(&path).unwrap();
    }
    unreachable!()
}

#[test]
fn requests_about_different_files_proceed_side_by_side() {
    let Some((cl, mnt, session)) = mounted() else {
        return;
    };
    let m = mnt.path();
    let stalled = m.join(&file_on_server(&cl, 0)[1..]);
    let live = m.join(&file_on_server(&cl, 1)[1..]);
    let mut stalled_file = std::fs::File::open(&stalled).unwrap();
    let mut live_file = std::fs::File::open(&live).unwrap();
    // SIGSTOP: server 0 keeps its sockets open but answers nothing, so the read of its file
    // holds its lane until the client's timeout (5 s).
    let server0 = cl.servers[0].child.id() as i32;
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(server0, libc::SIGSTOP) }, 0);
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        stalled_file.read_to_end(&mut buf).map(|_| buf)
    });
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let mut got = Vec::new();
    live_file.read_to_end(&mut got).unwrap();
    let took = t.elapsed();
    let stalled_still_waits = !reader.is_finished();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(server0, libc::SIGCONT) }, 0);
    let _ = reader.join().unwrap();
    assert_eq!(got, b"0123456789");
    assert!(
        stalled_still_waits && took < Duration::from_secs(2),
        "the read of a live server's file took {took:?} while another waited for a stopped \
         server (still waiting: {stalled_still_waits})"
    );
    drop(live_file);
    session.umount_and_join().unwrap();
}

#[test]
fn descriptors_of_one_file_see_each_others_writes_before_the_close() {
    let Some((cl, mnt, session)) = mounted() else {
        return;
    };
    let m = mnt.path();
    let path = m.join("shared");
    // Created (FUSE create), then opened again (FUSE open): both descriptors must be on the
    // same client, whose uncommitted writes they then share.
    let mut writer = std::fs::File::create_new(&path).unwrap();
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .unwrap();
    // A block on a slice other than the inode's: its WRITE does not raise the size at home,
    // only the commit at close would.
    let c = cl.client();
    let layout = *c.layout();
    let ino = writer.metadata().unwrap().ino();
    let home = layout.route(home_lambda(ino));
    let block = u64::from(layout.block_size());
    let offset = (1..)
        .map(|b| b * block)
        .find(|&o| layout.route(layout.data_lambda(ino, DataDist::Block, o)) != home)
        .unwrap();
    writer.seek(SeekFrom::Start(offset)).unwrap();
    writer.write_all(b"not yet committed").unwrap();
    let end = offset + 17;
    assert_eq!(
        reader.metadata().unwrap().len(),
        end,
        "fstat of the other descriptor"
    );
    // O_DIRECT: the read reaches the file system, not the kernel's copy of the writer's pages.
    let mut buf = DirectBuf::new(4096);
    let n = std::os::unix::fs::FileExt::read_at(&reader, buf.as_mut(), offset).unwrap();
    let read = &buf.as_ref()[..n];
    assert_eq!(
        read, b"not yet committed",
        "read through the other descriptor"
    );
    drop((writer, reader));
    session.umount_and_join().unwrap();
}

/// A zeroed buffer aligned for O_DIRECT I/O.
struct DirectBuf {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

impl DirectBuf {
    fn new(len: usize) -> Self {
        let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: `len` is not zero (every caller asks for whole blocks).
        let ptr = std::ptr::NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).unwrap();
        Self { ptr, layout }
    }

    fn filled(len: usize, byte: u8) -> Self {
        let mut b = Self::new(len);
        b.as_mut().fill(byte);
        b
    }

    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` holds `layout.size()` initialized bytes for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for DirectBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

#[test]
fn threads_writing_one_file_with_o_direct_all_land() {
    use std::os::unix::fs::FileExt;
    let Some((_cl, mnt, session)) = mounted() else {
        return;
    };
    let path = mnt.path().join("one-file");
    const THREADS: u64 = 8;
    const ROUNDS: u64 = 16;
    const BLOCK: usize = 4096;
    let inside = THREADS * ROUNDS;
    // Within the size, O_DIRECT writes of one file run side by side in the kernel; each
    // thread's last block lies beyond it and extends the file.
    std::fs::File::create_new(&path)
        .unwrap()
        .set_len(inside * BLOCK as u64)
        .unwrap();
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(&path)
                    .unwrap();
                for i in 0..ROUNDS {
                    let b = DirectBuf::filled(BLOCK, (t * ROUNDS + i) as u8);
                    f.write_all_at(b.as_ref(), (i * THREADS + t) * BLOCK as u64)
                        .unwrap();
                }
                let b = DirectBuf::filled(BLOCK, 0xf0 | t as u8);
                f.write_all_at(b.as_ref(), (inside + t) * BLOCK as u64)
                    .unwrap();
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let got = std::fs::read(&path).unwrap();
    assert_eq!(got.len(), (inside + THREADS) as usize * BLOCK, "size");
    for (n, block) in got.chunks(BLOCK).enumerate() {
        let n = n as u64;
        let want = if n < inside {
            ((n % THREADS) * ROUNDS + n / THREADS) as u8
        } else {
            0xf0 | (n - inside) as u8
        };
        assert!(
            block.iter().all(|&b| b == want),
            "block {n}: want {want:#x}"
        );
    }
    session.umount_and_join().unwrap();
}

#[test]
fn an_o_direct_descriptor_maps_shared_and_its_writes_reach_cached_readers() {
    use std::os::unix::fs::FileExt;
    let Some((_cl, mnt, session)) = mounted() else {
        return;
    };
    let path = mnt.path().join("cached");
    std::fs::write(&path, vec![b'o'; 8192]).unwrap();
    // A buffered reader whose pages the kernel now holds.
    let reader = std::fs::File::open(&path).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), vec![b'o'; 8192]);
    let direct = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .unwrap();
    // SAFETY: a fresh shared read-only mapping of 8 KiB of an open file, unmapped below.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ,
            libc::MAP_SHARED,
            direct.as_raw_fd(),
            0,
        )
    };
    assert_ne!(
        map,
        libc::MAP_FAILED,
        "mmap MAP_SHARED of an O_DIRECT descriptor: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: the mapping covers 8192 readable bytes of the file's 8192.
    let mapped = unsafe { std::slice::from_raw_parts(map.cast::<u8>(), 8192) }.to_vec();
    // SAFETY: mapped above with this length.
    assert_eq!(unsafe { libc::munmap(map, 8192) }, 0);
    assert_eq!(mapped, vec![b'o'; 8192], "mapped bytes");
    direct
        .write_all_at(DirectBuf::filled(4096, b'n').as_ref(), 4096)
        .unwrap();
    let mut got = vec![0; 8192];
    reader.read_exact_at(&mut got, 0).unwrap();
    assert_eq!(&got[..4096], &[b'o'; 4096][..], "the block not written");
    assert_eq!(
        &got[4096..],
        &[b'n'; 4096][..],
        "the reader's cached pages of the written block"
    );
    drop((reader, direct));
    session.umount_and_join().unwrap();
}

#[test]
fn readers_of_one_file_proceed_side_by_side_and_see_a_writer_on_another_lane() {
    use std::os::unix::fs::FileExt;
    let Some((cl, mnt, session)) = mounted() else {
        return;
    };
    let path = mnt.path().join("read-by-many");
    let layout = *cl.client().layout();
    let block = u64::from(layout.block_size());
    let blocks = 8;
    std::fs::write(&path, vec![b'o'; (blocks * block) as usize]).unwrap();
    let ino = std::fs::metadata(&path).unwrap().ino();
    let server_of = |o: u64| {
        layout
            .route(layout.data_lambda(ino, DataDist::Block, o))
            .server
    };
    let on = |server: u32| {
        (0..blocks)
            .map(|b| b * block)
            .find(|&o| server_of(o) == server)
            .expect("a block on each server")
    };
    let home = layout.route(home_lambda(ino)).server;
    // Beyond the end, on another server than the inode's: its WRITE does not raise the size
    // at home; only a commit does.
    let far = (blocks..)
        .map(|b| b * block)
        .find(|&o| server_of(o) != home)
        .unwrap();
    let open_direct = |write: bool| {
        std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .unwrap()
    };
    // Two readers on two lanes, then a writer on the third.
    let a = open_direct(false);
    let b = open_direct(false);
    let w = open_direct(true);
    let read = |f: &std::fs::File, offset: u64| {
        let mut buf = DirectBuf::new(4096);
        let n = f.read_at(buf.as_mut(), offset).unwrap();
        buf.as_ref()[..n].to_vec()
    };
    // `a` reads at the start and so reads ahead; the writer then rewrites what it read ahead.
    assert_eq!(read(&a, 0), vec![b'o'; 4096]);
    w.write_all_at(DirectBuf::filled(4096, b'n').as_ref(), 4096)
        .unwrap();
    assert_eq!(read(&a, 4096), vec![b'n'; 4096], "a reader that read ahead");
    w.write_all_at(DirectBuf::filled(4096, b'x').as_ref(), far)
        .unwrap();
    assert_eq!(
        b.metadata().unwrap().len(),
        far + 4096,
        "fstat of another reader"
    );
    assert_eq!(
        read(&b, far),
        vec![b'x'; 4096],
        "another reader, past the old end"
    );
    // Server 0 stopped: a read of its block waits, one of server 1's does not.
    let (stalled_at, live_at) = (on(0), on(1));
    let server0 = cl.servers[0].child.id() as i32;
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(server0, libc::SIGSTOP) }, 0);
    let stalled = std::thread::spawn(move || {
        let mut buf = DirectBuf::new(4096);
        a.read_at(buf.as_mut(), stalled_at).map(|_| a)
    });
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let live = read(&b, live_at);
    let took = t.elapsed();
    let still_waits = !stalled.is_finished();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(server0, libc::SIGCONT) }, 0);
    let a = stalled.join().unwrap().unwrap();
    assert_eq!(live, vec![b'o'; 4096]);
    assert!(
        still_waits && took < Duration::from_secs(2),
        "a read of the file took {took:?} while another reader of it waited for a stopped \
         server (still waiting: {still_waits})"
    );
    // An open that truncates (the kernel sends it as a SETATTR of the size), and nothing
    // written after: `a` read ahead before it.
    assert_eq!(read(&a, 0), vec![b'o'; 4096]);
    let truncated = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    assert_eq!(
        read(&a, 0),
        b"",
        "a reader that read ahead before an O_TRUNC open"
    );
    drop((a, b, w, truncated));
    session.umount_and_join().unwrap();
}

/// A descriptor of the model test, and what it may do.
struct ModelFd {
    file: usize,
    read: bool,
    write: bool,
    f: std::fs::File,
    /// Where its last read ended.
    read_end: u64,
}

/// One of `fds` that `can`, chosen by `n`.
fn pick(fds: &[ModelFd], n: u64, can: fn(&ModelFd) -> bool) -> Option<usize> {
    let ok: Vec<usize> = (0..fds.len()).filter(|&i| can(&fds[i])).collect();
    (!ok.is_empty()).then(|| ok[n as usize % ok.len()])
}

#[test]
fn descriptors_spread_over_the_lanes_act_as_one_file_system_against_a_model() {
    use std::os::unix::fs::FileExt;
    let Some((_cl, mnt, session)) = mounted() else {
        return;
    };
    // Files of up to 4 blocks and a bit (4 slices), written, truncated and read through
    // O_DIRECT descriptors (every call reaches the mount) opened read-only, write-only or
    // both: read-only ones spread over the lanes while no writable one is open. One step at
    // a time, so every read and size must be what the steps before left.
    const FILES: usize = 3;
    const MAX_END: u64 = 4 * 65536 + 5000;
    let mut state = 0x005e_ed0f_1ae5_u64;
    let mut next = move |n: u64| {
        // splitmix64
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    };
    let paths: Vec<_> = (0..FILES)
        .map(|i| mnt.path().join(format!("model{i}")))
        .collect();
    for p in &paths {
        std::fs::File::create_new(p).unwrap();
    }
    let mut model = vec![Vec::<u8>::new(); FILES];
    let mut fds: Vec<ModelFd> = Vec::new();
    for step in 0..8000 {
        let r = next(1 << 20);
        match next(10) {
            0 | 1 if fds.len() < 9 => {
                let file = (r % FILES as u64) as usize;
                let (read, write) =
                    [(true, false), (false, true), (true, true)][(r / 7 % 3) as usize];
                let f = std::fs::OpenOptions::new()
                    .read(read)
                    .write(write)
                    .custom_flags(libc::O_DIRECT)
                    .open(&paths[file])
                    .unwrap();
                fds.push(ModelFd {
                    file,
                    read,
                    write,
                    f,
                    read_end: 0,
                });
            }
            2 if !fds.is_empty() => {
                fds.swap_remove(r as usize % fds.len());
            }
            3..=5 => {
                let Some(i) = pick(&fds, r, |d| d.write) else {
                    continue;
                };
                let off = next(MAX_END);
                let len = (1 + next(20_000)).min(MAX_END - off) as usize;
                let data: Vec<u8> = (0..len).map(|_| next(256) as u8).collect();
                fds[i].f.write_all_at(&data, off).unwrap();
                let m = &mut model[fds[i].file];
                let end = off as usize + len;
                if m.len() < end {
                    m.resize(end, 0);
                }
                m[off as usize..end].copy_from_slice(&data);
            }
            6..=7 => {
                let Some(i) = pick(&fds, r, |d| d.read) else {
                    continue;
                };
                // Half of them where the last ended: a sequential reader, which reads ahead.
                let off = if r % 2 == 0 {
                    fds[i].read_end
                } else {
                    next(MAX_END + 100)
                };
                let len = 1 + next(20_000) as usize;
                let mut got = vec![0; len];
                let mut n = 0;
                while n < len {
                    let k = fds[i].f.read_at(&mut got[n..], off + n as u64).unwrap();
                    if k == 0 {
                        break;
                    }
                    n += k;
                }
                fds[i].read_end = off + n as u64;
                let m = &model[fds[i].file];
                let want = m
                    .get(off as usize..m.len().min(off as usize + len))
                    .unwrap_or(&[]);
                assert!(
                    &got[..n] == want,
                    "step {step}: read of {len} at {off} of file {}: {n} bytes, want {}",
                    fds[i].file,
                    want.len()
                );
            }
            8 if !fds.is_empty() => {
                let i = r as usize % fds.len();
                let size = fds[i].f.metadata().unwrap().len();
                assert_eq!(
                    size,
                    model[fds[i].file].len() as u64,
                    "step {step}: fstat of file {}",
                    fds[i].file
                );
            }
            9 => {
                let Some(i) = pick(&fds, r, |d| d.write) else {
                    continue;
                };
                let size = next(MAX_END);
                fds[i].f.set_len(size).unwrap();
                model[fds[i].file].resize(size as usize, 0);
            }
            _ => {}
        }
    }
    drop(fds);
    for (p, m) in paths.iter().zip(&model) {
        assert!(
            std::fs::read(p).unwrap() == *m,
            "{} after the last close",
            p.display()
        );
    }
    session.umount_and_join().unwrap();
}
