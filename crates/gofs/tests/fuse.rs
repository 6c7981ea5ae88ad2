//! `gofs mount` through the kernel's FUSE: shell-level operations with std::fs on the mount,
//! unmount by SIGTERM to the `gofs mount` process, then fsck.f2fs and a remount check the
//! image. Skips (with the reason printed) without /dev/fuse or root; `FUSE_TESTS=1` turns a
//! skip into a failure.

mod posix_support;

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gofs::posix::OpenFlags;
use posix_support::{fsck_clean, image, mount, posix, unmount};

/// Why FUSE cannot be used here, if it cannot.
fn fuse_unavailable() -> Option<&'static str> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing");
    }
    // SAFETY: geteuid has no preconditions and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root");
    }
    None
}

fn skip_or_fail() -> bool {
    match fuse_unavailable() {
        None => false,
        Some(why) if std::env::var("FUSE_TESTS").as_deref() == Ok("1") => {
            panic!("FUSE_TESTS=1 but FUSE is unavailable: {why}")
        }
        Some(why) => {
            eprintln!("skipping the FUSE test: {why}");
            true
        }
    }
}

fn is_mounted(mnt: &Path) -> bool {
    let target = mnt.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(target.as_str()))
}

/// A running `gofs mount`; unmounts lazily and kills the process if a test fails midway.
struct Mounted {
    child: Option<Child>,
    mnt: PathBuf,
}

impl Mounted {
    fn start(image: &Path, mnt: &Path) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_gofs"))
            .arg("mount")
            .arg(image)
            .arg(mnt)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn gofs mount");
        let m = Self {
            child: Some(child),
            mnt: mnt.to_owned(),
        };
        let t = Instant::now();
        while !is_mounted(mnt) {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "mount did not appear"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    /// SIGTERM to `gofs mount`; it must unmount and exit 0.
    fn stop(mut self) {
        let mut child = self.child.take().expect("running");
        let pid = i32::try_from(child.id()).expect("pid");
        // SAFETY: kill has no memory preconditions; the pid is our own child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let t = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break s;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "gofs mount did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "gofs mount exited with {status}");
        assert!(!is_mounted(&self.mnt), "still mounted after SIGTERM");
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn tree(root: &Path) {
    std::fs::create_dir_all(root.join("data/nested")).unwrap();
    std::fs::write(root.join("data/hello.txt"), b"hello from sload\n").unwrap();
    std::fs::write(root.join("data/nested/n.bin"), vec![7u8; 50_000]).unwrap();
}

#[test]
fn shell_operations_on_a_fuse_mount_survive_sigterm_unmount() {
    if skip_or_fail() {
        return;
    }
    let img = image(128, tree);
    let mnt = img.dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let m = Mounted::start(&img.path, &mnt);

    // Read what sload put there.
    assert_eq!(
        std::fs::read(mnt.join("data/hello.txt")).unwrap(),
        b"hello from sload\n"
    );
    assert_eq!(
        std::fs::metadata(mnt.join("data/nested/n.bin"))
            .unwrap()
            .len(),
        50_000
    );
    let mut names: Vec<String> = std::fs::read_dir(mnt.join("data"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["hello.txt", "nested"]);

    // Create, write, append, overwrite in the middle, truncate.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(mnt.join("big"), &big).unwrap();
    assert_eq!(std::fs::read(mnt.join("big")).unwrap(), big);
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(mnt.join("big"))
        .unwrap();
    f.seek(SeekFrom::Start(1_000_000)).unwrap();
    f.write_all(b"MIDDLE").unwrap();
    f.set_len(2_000_000).unwrap();
    drop(f);
    let got = std::fs::read(mnt.join("big")).unwrap();
    assert_eq!(got.len(), 2_000_000);
    assert_eq!(&got[1_000_000..1_000_006], b"MIDDLE");
    assert_eq!(got[..1_000_000], big[..1_000_000]);
    let mut a = std::fs::OpenOptions::new()
        .append(true)
        .open(mnt.join("data/hello.txt"))
        .unwrap();
    a.write_all(b"more\n").unwrap();
    drop(a);

    // Directories, renames, links, permissions, a fifo.
    std::fs::create_dir_all(mnt.join("x/y/z")).unwrap();
    std::fs::rename(mnt.join("big"), mnt.join("x/y/big2")).unwrap();
    std::os::unix::fs::symlink("y/big2", mnt.join("x/ln")).unwrap();
    assert_eq!(
        std::fs::metadata(mnt.join("x/ln")).unwrap().len(),
        2_000_000
    );
    std::fs::hard_link(mnt.join("x/y/big2"), mnt.join("x/hard")).unwrap();
    assert_eq!(std::fs::metadata(mnt.join("x/hard")).unwrap().nlink(), 2);
    std::fs::set_permissions(mnt.join("x/hard"), std::fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(
        std::fs::metadata(mnt.join("x/y/big2")).unwrap().mode() & 0o7777,
        0o640
    );
    assert_eq!(
        std::fs::remove_dir(mnt.join("x/y"))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENOTEMPTY)
    );
    let fifo =
        std::ffi::CString::new(mnt.join("x/fifo").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: the path is a valid NUL-terminated string that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    assert!(
        std::fs::symlink_metadata(mnt.join("x/fifo"))
            .unwrap()
            .file_type()
            .is_fifo()
    );

    // An unlinked open file stays readable until closed.
    let mut open = std::fs::File::open(mnt.join("data/nested/n.bin")).unwrap();
    std::fs::remove_file(mnt.join("data/nested/n.bin")).unwrap();
    let mut back = Vec::new();
    open.read_to_end(&mut back).unwrap();
    assert_eq!(back, vec![7u8; 50_000]);
    drop(open);
    std::fs::remove_dir(mnt.join("data/nested")).unwrap();
    std::fs::remove_dir(mnt.join("x/y/z")).unwrap();

    m.stop();

    // Everything is on the image after the unmount, and fsck.f2fs accepts it.
    let fs = mount(&img.path);
    let p = posix(&fs);
    assert_eq!(p.stat("/x/hard").unwrap().nlink, 2);
    assert_eq!(p.stat("/x/y/big2").unwrap().size, 2_000_000);
    let fd = p.open("/data/hello.txt", OpenFlags::READ, 0).unwrap();
    let mut buf = [0u8; 64];
    let n = p.read(fd, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello from sload\nmore\n");
    p.close(fd).unwrap();
    assert!(p.stat("/data/nested").is_err());
    drop(p);
    unmount(fs);
    fsck_clean(&img.path);
}
