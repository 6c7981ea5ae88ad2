//! `peakfs mount` through the kernel: a FUSE mount of a real cluster (master + 2 servers),
//! exercised with std::fs, and commit consistency between the mount and a second client.
//! Skipped with a printed reason when /dev/fuse is missing or not root; FUSE_TESTS=1 makes
//! a skip a failure.

mod client_support;

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use client_support::Cluster;

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

#[test]
fn a_fuse_mount_behaves_like_a_posix_file_system_and_commits_on_close() {
    if !fuse_available() {
        return;
    }
    let cl = Cluster::start(2);
    let mnt = tempfile::tempdir().unwrap();
    let session = peakfs::fuse::spawn_mount(cl.client(), mnt.path(), 2).unwrap();
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
    if !fuse_available() {
        return;
    }
    let cl = Cluster::start(2);
    let mnt = tempfile::tempdir().unwrap();
    let session = peakfs::fuse::spawn_mount(cl.client(), mnt.path(), 2).unwrap();
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
