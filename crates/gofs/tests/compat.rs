//! Compatibility with the real f2fs-tools: images built by `mkfs.f2fs` + `sload.f2fs` read
//! back byte for byte through the engine over the file-backed NVMe controller, and images the
//! engine changed pass `fsck.f2fs` and give identical files to `dump.f2fs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gofs::f2fs_tools;
use gofs::fs::{Caller, FileType, Fs, Ino, MountOptions, ROOT_INO};
use gpu_nvme::controller::file::{FileBackend, FileController, FileControllerConfig};
use gpu_nvme::device::{DeviceConfig, NvmeDevice};

const ME: Caller = Caller { uid: 0, gid: 0 };

/// One test at a time: each runs a controller with polling workers, and several at once on
/// a loaded 2-core machine starved them into command timeouts.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn image(dir: &Path, mib: u64) -> PathBuf {
    let p = dir.join("f2fs.img");
    let f = std::fs::File::create(&p).unwrap();
    f.set_len(mib << 20).unwrap();
    f2fs_tools::mkfs(&p).unwrap();
    p
}

fn device(img: &Path) -> Arc<NvmeDevice> {
    let mut config = FileControllerConfig::new(img);
    // The io_uring backend timed out commands (30 s) when four of these tests ran at once
    // on a loaded 2-core machine; psync has not.
    config.backend = FileBackend::Psync;
    config.workers = 1;
    let ctrl = FileController::new(config).unwrap();
    Arc::new(NvmeDevice::open(ctrl, DeviceConfig::default()).unwrap())
}

fn mount(img: &Path) -> Fs {
    let opts = MountOptions {
        read_only: false,
        checkpoint_interval: None,
    };
    Fs::mount(device(img), opts).unwrap()
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Entries of a host tree: path → Some(content) for files, None for directories, and
/// symlink targets prefixed with "->".
fn host_tree(root: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut m = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let rel = e
                .path()
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let t = e.file_type().unwrap();
            if t.is_symlink() {
                let target = std::fs::read_link(e.path()).unwrap();
                let mut v = b"->".to_vec();
                v.extend_from_slice(target.as_os_str().as_encoded_bytes());
                m.insert(rel, Some(v));
            } else if t.is_dir() {
                m.insert(rel, None);
                stack.push(e.path());
            } else {
                m.insert(rel, Some(std::fs::read(e.path()).unwrap()));
            }
        }
    }
    m
}

fn fs_tree(fs: &Fs) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut m = BTreeMap::new();
    let mut stack: Vec<(Ino, String)> = vec![(ROOT_INO, String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        for e in fs.readdir(dir).unwrap() {
            let name = String::from_utf8(e.name.clone()).unwrap();
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let st = fs.lookup(dir, &e.name).unwrap();
            assert_eq!(st.ino, e.ino, "{rel}: lookup and readdir agree");
            assert_eq!(st.kind, e.kind, "{rel}: dentry type matches the inode");
            match e.kind {
                FileType::Directory => {
                    m.insert(rel.clone(), None);
                    stack.push((e.ino, rel));
                }
                FileType::Symlink => {
                    let mut v = b"->".to_vec();
                    v.extend(fs.readlink(e.ino).unwrap());
                    m.insert(rel, Some(v));
                }
                _ => {
                    let mut buf = vec![0u8; st.size as usize + 10];
                    let n = fs.read(e.ino, 0, &mut buf).unwrap();
                    assert_eq!(n as u64, st.size, "{rel}: short read");
                    buf.truncate(n);
                    m.insert(rel, Some(buf));
                }
            }
        }
    }
    m
}

fn build_source(src: &Path) {
    let mut deep = src.to_path_buf();
    for i in 0..12 {
        deep.push(format!("level{i}"));
    }
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("bottom.txt"), b"deep").unwrap();
    let big = src.join("bigdir");
    std::fs::create_dir(&big).unwrap();
    for i in 0..3000 {
        std::fs::write(
            big.join(format!("entry-{i:05}-with-a-longer-name")),
            i.to_string(),
        )
        .unwrap();
    }
    for (name, len) in [
        ("empty", 0),
        ("one", 1),
        ("inline", 3400),
        ("block", 4096),
        ("mib", 1 << 20),
        // Past the inode's 923 addresses: needs direct node blocks (i_nid[0..2]).
        ("indirect", (4 << 20) + 12345),
        // Past 923 + 2 x 1018 blocks (~11.6 MiB): needs an indirect node block (i_nid[2]).
        ("double-level", (13 << 20) + 777),
    ] {
        std::fs::write(src.join(name), pattern(len, len as u64)).unwrap();
    }
    std::os::unix::fs::symlink("block", src.join("link-to-block")).unwrap();
    std::os::unix::fs::symlink("level0/level1/../../one", src.join("link-long")).unwrap();
}

#[test]
fn sload_image_reads_back_identically_through_the_engine() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    build_source(&src);
    let img = image(dir.path(), 128);
    f2fs_tools::sload(&src, &img).unwrap();
    let fs = mount(&img);
    let want = host_tree(&src);
    let got = fs_tree(&fs);
    assert_eq!(got.len(), want.len());
    for (k, v) in &want {
        assert_eq!(got.get(k), Some(v), "{k} differs");
    }
    assert!(matches!(
        fs.lookup(ROOT_INO, b"missing"),
        Err(gofs::error::FsError::NotFound)
    ));
    // Change what sload wrote (its inodes carry extent caches and inline data/dentries).
    let big = fs.lookup(ROOT_INO, b"indirect").unwrap().ino;
    fs.write(big, 100_000, &pattern(50_000, 5)).unwrap();
    let deeper = fs.lookup(ROOT_INO, b"double-level").unwrap().ino;
    fs.write(deeper, 12 << 20, &pattern(70_000, 7)).unwrap();
    let inline = fs.lookup(ROOT_INO, b"inline").unwrap().ino;
    fs.write(inline, 3000, &pattern(2000, 6)).unwrap();
    let bigdir = fs.lookup(ROOT_INO, b"bigdir").unwrap().ino;
    fs.unlink(bigdir, b"entry-00007-with-a-longer-name")
        .unwrap();
    let deep = fs.lookup_path(b"/level0/level1/level2").unwrap().ino;
    fs.create(deep, b"new", FileType::Regular, 0o600, 0, ME)
        .unwrap();
    fs.unmount().unwrap();
    let out = f2fs_tools::fsck_full(&img).unwrap();
    assert!(f2fs_tools::fsck_problems(&out).is_empty(), "{}", out.text);
}

#[test]
fn fresh_mkfs_image_mounts_with_an_empty_root() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), 64);
    let fs = mount(&img);
    let names: Vec<_> = fs
        .readdir(ROOT_INO)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(
        names.is_empty() || names == [b"lost+found".to_vec()],
        "{names:?}"
    );
    let st = fs.getattr(ROOT_INO).unwrap();
    assert_eq!(st.kind, FileType::Directory);
    fs.unmount().unwrap();
}

#[test]
fn engine_changes_pass_fsck_and_dump_extracts_identical_files() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path(), 128);
    let fs = mount(&img);
    let d = fs.mkdir(ROOT_INO, b"dir", 0o755, ME).unwrap();
    let mut files = Vec::new();
    for (i, len) in [0usize, 1, 3000, 4096, 70_000, 5 << 20]
        .into_iter()
        .enumerate()
    {
        let f = fs
            .create(
                d.ino,
                format!("f{i}").as_bytes(),
                FileType::Regular,
                0o644,
                0,
                ME,
            )
            .unwrap();
        let data = pattern(len, i as u64 + 7);
        fs.write(f.ino, 0, &data).unwrap();
        files.push((f.ino, data));
    }
    // Overwrite the middle of the big file, truncate one, unlink one.
    let (big, ref mut bdata) = files[5];
    let patch = pattern(10_000, 99);
    fs.write(big, 12_345, &patch).unwrap();
    bdata[12_345..22_345].copy_from_slice(&patch);
    fs.setattr(
        files[4].0,
        &gofs::fs::SetAttr {
            size: Some(5000),
            ..Default::default()
        },
    )
    .unwrap();
    files[4].1.truncate(5000);
    fs.unlink(d.ino, b"f2").unwrap();
    files.remove(2);
    fs.symlink(ROOT_INO, b"sym", b"dir/f1", ME).unwrap();
    fs.unmount().unwrap();

    let out = f2fs_tools::fsck_full(&img).unwrap();
    assert!(f2fs_tools::fsck_problems(&out).is_empty(), "{}", out.text);
    let outdir = dir.path().join("dump");
    std::fs::create_dir(&outdir).unwrap();
    for (ino, data) in &files {
        f2fs_tools::dump(&img, *ino, &outdir).unwrap();
        let found = outdir.join("lost_found");
        let name = std::fs::read_dir(&found)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        assert_eq!(&std::fs::read(&name).unwrap(), data, "inode {ino}");
        std::fs::remove_file(name).unwrap();
    }
    let fs = mount(&img);
    for (ino, data) in &files {
        let mut buf = vec![0u8; data.len() + 1];
        assert_eq!(fs.read(*ino, 0, &mut buf).unwrap(), data.len());
        assert_eq!(&buf[..data.len()], &data[..]);
    }
    fs.unmount().unwrap();
}

#[test]
fn gofs_mkfs_image_passes_fsck_and_takes_files() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("gofs.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(96 << 20)
        .unwrap();
    gofs::mkfs::mkfs(&device(&img), &gofs::mkfs::MkfsOptions::default()).unwrap();
    let out = f2fs_tools::fsck_full(&img).unwrap();
    assert!(f2fs_tools::fsck_problems(&out).is_empty(), "{}", out.text);
    assert!(
        out.text
            .contains("[FSCK] valid_inode_count matched with CP              [Ok..] [0x1]"),
        "{}",
        out.text
    );
    let fs = mount(&img);
    assert!(fs.readdir(ROOT_INO).unwrap().is_empty());
    let f = fs
        .create(ROOT_INO, b"hello", FileType::Regular, 0o644, 0, ME)
        .unwrap();
    fs.write(f.ino, 0, b"hello, f2fs").unwrap();
    fs.unmount().unwrap();
    let out = f2fs_tools::fsck_full(&img).unwrap();
    assert!(f2fs_tools::fsck_problems(&out).is_empty(), "{}", out.text);
}
