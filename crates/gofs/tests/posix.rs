//! The POSIX and batched APIs against the real host engine on images made by f2fs-tools.

mod posix_support;

use std::io::{IoSlice, IoSliceMut, SeekFrom};
use std::os::unix::fs::symlink;
use std::path::Path;

use gofs::batch::BatchRequest;
use gofs::fs::FileType;
use gofs::posix::{OpenFlags, PosixError};
use posix_support::{fsck_clean, image, mount, posix, unmount};

fn errno<T: std::fmt::Debug>(r: Result<T, PosixError>) -> i32 {
    r.expect_err("the call must fail").errno()
}

/// A host tree: text files, a nested directory, relative and absolute symlinks and a loop.
fn sample_tree(root: &Path) {
    std::fs::create_dir_all(root.join("dir/sub")).unwrap();
    std::fs::write(root.join("dir/a.txt"), b"hello gofs\n").unwrap();
    std::fs::write(root.join("dir/sub/deep.txt"), b"deep").unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(root.join("big.bin"), &big).unwrap();
    symlink("dir/a.txt", root.join("rel-link")).unwrap();
    symlink("/dir/sub", root.join("abs-dir-link")).unwrap();
    symlink("loop-b", root.join("loop-a")).unwrap();
    symlink("loop-a", root.join("loop-b")).unwrap();
}

#[test]
fn files_loaded_by_sload_read_back_byte_for_byte() {
    let img = image(64, sample_tree);
    let fs = mount(&img.path);
    let p = posix(&fs);
    let want = std::fs::read(img.tree.join("big.bin")).unwrap();
    let fd = p.open("/big.bin", OpenFlags::READ, 0).unwrap();
    assert_eq!(p.fstat(fd).unwrap().size, want.len() as u64);
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65_537];
    loop {
        let n = p.read(fd, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, want);
    let mut tail = [0u8; 10];
    assert_eq!(p.pread(fd, &mut tail, want.len() as u64 - 4).unwrap(), 4);
    assert_eq!(&tail[..4], &want[want.len() - 4..]);
    p.close(fd).unwrap();
    let mut names: Vec<Vec<u8>> = p
        .readdir("/dir")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    names.sort();
    assert_eq!(names, vec![b"a.txt".to_vec(), b"sub".to_vec()]);
    drop(p);
    unmount(fs);
}

#[test]
fn paths_resolve_dots_and_symlinks_and_stop_at_loops() {
    let img = image(64, sample_tree);
    let fs = mount(&img.path);
    let p = posix(&fs);
    let a = p.stat("/dir/a.txt").unwrap();
    assert_eq!(p.stat("//dir/./sub/../a.txt").unwrap().ino, a.ino);
    assert_eq!(p.stat("/../dir/a.txt").unwrap().ino, a.ino);
    assert_eq!(p.stat("/rel-link").unwrap().ino, a.ino);
    assert_eq!(p.lstat("/rel-link").unwrap().kind, FileType::Symlink);
    assert_eq!(p.readlink("/rel-link").unwrap(), b"dir/a.txt");
    // Through an absolute link to a directory, and ".." from inside it.
    let deep = p.stat("/abs-dir-link/deep.txt").unwrap();
    assert_eq!(deep.size, 4);
    assert_eq!(p.stat("/abs-dir-link/../a.txt").unwrap().ino, a.ino);
    assert_eq!(
        p.stat("/dir/sub/..").unwrap().ino,
        p.stat("/dir").unwrap().ino
    );
    assert_eq!(errno(p.stat("/loop-a")), libc::ELOOP);
    assert_eq!(errno(p.stat("/loop-a/x")), libc::ELOOP);
    assert_eq!(errno(p.stat("/dir/missing")), libc::ENOENT);
    assert_eq!(errno(p.stat("/dir/a.txt/x")), libc::ENOTDIR);
    assert_eq!(errno(p.stat("relative")), libc::ENOENT);
    drop(p);
    unmount(fs);
}

#[test]
fn descriptors_keep_offsets_and_reject_wrong_use() {
    let img = image(64, sample_tree);
    let fs = mount(&img.path);
    let p = posix(&fs);
    let fd = p.open("/dir/a.txt", OpenFlags::READ, 0).unwrap();
    let (mut x, mut y) = ([0u8; 5], [0u8; 3]);
    let mut iov = [IoSliceMut::new(&mut x), IoSliceMut::new(&mut y)];
    assert_eq!(p.readv(fd, &mut iov).unwrap(), 8);
    assert_eq!((&x, &y), (b"hello", b" go"));
    assert_eq!(p.lseek(fd, SeekFrom::Current(0)).unwrap(), 8);
    assert_eq!(p.lseek(fd, SeekFrom::End(-3)).unwrap(), 8);
    assert_eq!(errno(p.lseek(fd, SeekFrom::Current(-100))), libc::EINVAL);
    assert_eq!(errno(p.write(fd, b"x")), libc::EBADF);
    let fd2 = p.open("/dir/sub/deep.txt", OpenFlags::READ, 0).unwrap();
    assert_ne!(fd, fd2);
    p.close(fd).unwrap();
    assert_eq!(errno(p.read(fd, &mut x)), libc::EBADF);
    assert_eq!(errno(p.close(fd)), libc::EBADF);
    // The lowest free descriptor is reused.
    assert_eq!(p.open("/big.bin", OpenFlags::READ, 0).unwrap(), fd);
    assert_eq!(
        errno(p.open("/dir", OpenFlags::READ_WRITE, 0)),
        libc::EISDIR
    );
    let dir_only = OpenFlags {
        directory: true,
        ..OpenFlags::READ
    };
    assert_eq!(errno(p.open("/dir/a.txt", dir_only, 0)), libc::ENOTDIR);
    drop(p);
    unmount(fs);
}

/// Also guards the engine's handling of sload's inode extent hint (`i_ext`): it must be
/// dropped when an overwrite or truncate moves a block (fsck.f2fs "wrong ext").
#[test]
fn writes_renames_and_removals_persist_across_remount_and_pass_fsck() {
    let img = image(64, sample_tree);
    let fs = mount(&img.path);
    let p = posix(&fs);
    p.mkdir("/new", 0o755).unwrap();
    assert_eq!(errno(p.mkdir("/new", 0o755)), libc::EEXIST);
    let fd = p.open("/new/f", OpenFlags::CREATE_TRUNC, 0o600).unwrap();
    assert_eq!(p.write(fd, b"abc").unwrap(), 3);
    assert_eq!(
        p.writev(fd, &[IoSlice::new(b"de"), IoSlice::new(b"f")])
            .unwrap(),
        3
    );
    assert_eq!(p.pwrite(fd, b"Z", 10_000).unwrap(), 1);
    p.close(fd).unwrap();
    let excl = OpenFlags {
        excl: true,
        ..OpenFlags::CREATE_TRUNC
    };
    assert_eq!(errno(p.open("/new/f", excl, 0o600)), libc::EEXIST);
    let app = OpenFlags {
        append: true,
        ..OpenFlags::READ_WRITE
    };
    let fd = p.open("/new/f", app, 0).unwrap();
    p.write(fd, b"END").unwrap();
    assert_eq!(p.fstat(fd).unwrap().size, 10_004);
    p.ftruncate(fd, 6).unwrap();
    p.close(fd).unwrap();
    p.rename("/new/f", "/new/g").unwrap();
    assert_eq!(errno(p.stat("/new/f")), libc::ENOENT);
    p.truncate("/big.bin", 5000).unwrap();
    p.unlink("/dir/sub/deep.txt").unwrap();
    p.rmdir("/dir/sub").unwrap();
    assert_eq!(errno(p.rmdir("/dir")), libc::ENOTEMPTY);
    p.symlink("/new/g", "/new/ln").unwrap();
    p.link("/new/g", "/new/hard").unwrap();
    drop(p);
    unmount(fs);

    let fs = mount(&img.path);
    let p = posix(&fs);
    let g = p.stat("/new/g").unwrap();
    assert_eq!((g.size, g.mode & 0o7777, g.nlink), (6, 0o600, 2));
    let mut buf = [0u8; 16];
    let fd = p.open("/new/ln", OpenFlags::READ, 0).unwrap();
    assert_eq!(p.read(fd, &mut buf).unwrap(), 6);
    assert_eq!(&buf[..6], b"abcdef");
    p.close(fd).unwrap();
    assert_eq!(p.stat("/big.bin").unwrap().size, 5000);
    assert_eq!(errno(p.stat("/dir/sub")), libc::ENOENT);
    drop(p);
    unmount(fs);
    fsck_clean(&img.path);
}

#[test]
fn an_unlinked_open_file_keeps_its_data_until_closed() {
    let img = image(64, sample_tree);
    let fs = mount(&img.path);
    let p = posix(&fs);
    let fd = p.open("/big.bin", OpenFlags::READ, 0).unwrap();
    p.unlink("/big.bin").unwrap();
    assert_eq!(errno(p.stat("/big.bin")), libc::ENOENT);
    let mut buf = vec![0u8; 300_000];
    assert_eq!(p.pread(fd, &mut buf, 0).unwrap(), 300_000);
    assert_eq!(buf[299_999], (299_999u32 * 7 % 251) as u8);
    p.close(fd).unwrap();
    drop(p);
    unmount(fs);
    fsck_clean(&img.path);
}

#[test]
fn an_open_orphan_in_a_removed_directory_does_not_break_later_creates() {
    let img = image(64, |_| {});
    let fs = mount(&img.path);
    let p = posix(&fs);
    p.mkdir("/d", 0o755).unwrap();
    let rw = OpenFlags {
        read: true,
        ..OpenFlags::CREATE_TRUNC
    };
    let fd = p.open("/d/f", rw, 0o644).unwrap();
    p.write(fd, b"orphan").unwrap();
    p.unlink("/d/f").unwrap();
    p.rmdir("/d").unwrap();
    p.mkdir("/e", 0o755).unwrap();
    let g = p.open("/e/g", OpenFlags::CREATE_TRUNC, 0o644).unwrap();
    p.close(g).unwrap();
    let mut buf = [0u8; 6];
    assert_eq!(p.pread(fd, &mut buf, 0).unwrap(), 6);
    assert_eq!(&buf, b"orphan");
    p.close(fd).unwrap();
    drop(p);
    unmount(fs);
    fsck_clean(&img.path);
}

/// A device inode keeps its rdev in i_addr[0]; freeing the inode must not take it for a data
/// block (pjdfstest's mknod tests remove such inodes).
#[test]
fn device_and_fifo_nodes_can_be_removed_and_leave_fsck_clean() {
    let img = image(64, |_| {});
    let fs = mount(&img.path);
    let who = gofs::fs::Caller { uid: 0, gid: 0 };
    let root = gofs::fs::ROOT_INO;
    let rdev = libc::makedev(1, 2) as u32; // 258, inside no main area
    fs.create(root, b"c", FileType::CharDevice, 0o644, rdev, who)
        .unwrap();
    fs.create(root, b"b", FileType::BlockDevice, 0o644, rdev, who)
        .unwrap();
    fs.create(root, b"p", FileType::Fifo, 0o644, 0, who)
        .unwrap();
    assert_eq!(fs.lookup(root, b"c").unwrap().rdev, rdev);
    for name in [&b"c"[..], b"b", b"p"] {
        fs.unlink(root, name).unwrap();
    }
    unmount(fs);
    fsck_clean(&img.path);
}

fn small_files(root: &Path) {
    std::fs::create_dir(root.join("ds")).unwrap();
    for i in 0..200u32 {
        let data: Vec<u8> = (0..16_384u32).map(|j| (i ^ j) as u8).collect();
        std::fs::write(root.join(format!("ds/s{i:03}")), data).unwrap();
    }
    std::fs::create_dir(root.join("ds/subdir")).unwrap();
}

#[test]
fn batch_open_reads_every_file_of_a_directory() {
    let img = image(128, small_files);
    let fs = mount(&img.path);
    let p = posix(&fs);
    let bnode = p.batch_open("/ds").unwrap();
    assert_eq!(bnode.files.len(), 200, "the subdirectory is not opened");
    assert_eq!(bnode.total_size(), 200 * 16_384);
    let reqs = bnode.whole_files();
    let mut buf = vec![0u8; 200 * 16_384];
    let got = p.batch_read(&bnode, &reqs, &mut buf, 3).unwrap();
    assert!(got.iter().all(|&n| n == 16_384));
    for (k, f) in bnode.files.iter().enumerate() {
        let name = String::from_utf8(f.name.clone()).unwrap();
        let want = std::fs::read(img.tree.join("ds").join(&name)).unwrap();
        assert!(buf[k * 16_384..(k + 1) * 16_384] == want[..], "{name}");
        assert_eq!(bnode.find(&f.name), Some(k));
    }
    // One thread: the engine's batched read (`Fs::read_many`) gives the same bytes, also for
    // requests that start or end inside a block.
    let mut again = vec![0u8; buf.len()];
    assert_eq!(p.batch_read(&bnode, &reqs, &mut again, 1).unwrap(), got);
    assert!(again == buf, "batched read differs from the threaded one");
    let partial = [
        BatchRequest {
            file: 0,
            offset: 100,
            len: 5000,
        },
        BatchRequest {
            file: 1,
            offset: 4096,
            len: 8192,
        },
    ];
    let mut small = vec![0u8; 13_192];
    assert_eq!(
        p.batch_read(&bnode, &partial, &mut small, 1).unwrap(),
        vec![5000, 8192]
    );
    assert!(small[..5000] == buf[100..5100]);
    assert!(small[5000..] == buf[16_384 + 4096..16_384 + 12_288]);
    let bad = [BatchRequest {
        file: 200,
        offset: 0,
        len: 1,
    }];
    assert_eq!(errno(p.batch_read(&bnode, &bad, &mut buf, 1)), libc::EINVAL);
    p.batch_close(bnode).unwrap();
    assert_eq!(errno(p.batch_open("/ds/s000")), libc::ENOTDIR);
    drop(p);
    unmount(fs);
}

/// Also guards the engine's handling of sload's inode extent hint (`i_ext`): it must be
/// dropped when an overwrite or truncate moves a block (fsck.f2fs "wrong ext").
#[test]
fn batch_write_overwrites_and_extends_the_requested_ranges() {
    let img = image(128, small_files);
    let fs = mount(&img.path);
    let p = posix(&fs);
    let names: [&[u8]; 2] = [b"s007", b"s100"];
    let mut bnode = p.batch_open_names("/ds", Some(&names)).unwrap();
    let reqs = [
        BatchRequest {
            file: 0,
            offset: 4096,
            len: 3,
        },
        BatchRequest {
            file: 1,
            offset: 16_384,
            len: 5,
        },
    ];
    let done = p.batch_write(&mut bnode, &reqs, b"abcVWXYZ", 2).unwrap();
    assert_eq!(done, vec![3, 5]);
    assert_eq!(bnode.files[1].size, 16_389);
    p.batch_close(bnode).unwrap();
    let mut buf = [0u8; 8];
    let fd = p.open("/ds/s007", OpenFlags::READ, 0).unwrap();
    p.pread(fd, &mut buf[..3], 4096).unwrap();
    assert_eq!(&buf[..3], b"abc");
    p.close(fd).unwrap();
    assert_eq!(p.stat("/ds/s100").unwrap().size, 16_389);
    drop(p);
    unmount(fs);
    fsck_clean(&img.path);
}
