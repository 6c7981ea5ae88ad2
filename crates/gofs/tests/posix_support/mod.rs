//! Shared by the POSIX, batch, CLI and FUSE tests: F2FS images made by f2fs-tools (mkfs.f2fs,
//! filled by sload.f2fs from a host directory) and checked by fsck.f2fs.

#![allow(dead_code)] // each test crate uses a different part

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gofs::bench::open_image;
use gofs::fs::{Caller, Fs, MountOptions};
use gofs::posix::Posix;
use gpu_nvme::controller::FileBackend;

/// An image in a temporary directory, with the host tree it was loaded from.
pub struct Image {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
    pub tree: PathBuf,
}

/// Makes a `mib` MiB F2FS image and loads the tree `fill` builds (in a host directory) into it
/// (an empty tree leaves the image as mkfs.f2fs made it).
pub fn image(mib: u64, fill: impl FnOnce(&Path)) -> Image {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gofs.img");
    let tree = dir.path().join("tree");
    std::fs::create_dir(&tree).expect("tree dir");
    fill(&tree);
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(mib << 20))
        .expect("image file");
    gofs::f2fs_tools::mkfs(&path).expect("mkfs.f2fs");
    let empty = std::fs::read_dir(&tree).map_or(true, |mut d| d.next().is_none());
    if !empty {
        gofs::f2fs_tools::sload(&tree, &path).expect("sload.f2fs");
    }
    Image { dir, path, tree }
}

/// Mounts `image` with the host engine (no FUSE).
pub fn mount(image: &Path) -> Arc<Fs> {
    let dev = open_image(image, FileBackend::Psync).expect("open image");
    Arc::new(
        Fs::mount(
            dev,
            MountOptions {
                read_only: false,
                checkpoint_interval: None,
            },
        )
        .expect("mount"),
    )
}

/// A POSIX view of `fs` acting as root.
pub fn posix(fs: &Arc<Fs>) -> Posix {
    Posix::new(Arc::clone(fs), Caller { uid: 0, gid: 0 })
}

/// Unmounts `fs` (the last reference) with a final checkpoint.
pub fn unmount(fs: Arc<Fs>) {
    Arc::try_unwrap(fs)
        .expect("no other reference to the engine")
        .unmount()
        .expect("unmount");
}

/// Runs a full `fsck.f2fs --dry-run -f` on `image` and panics with its report when it finds a
/// problem.
pub fn fsck_clean(image: &Path) {
    let out = gofs::f2fs_tools::fsck_full(image).expect("fsck.f2fs runs");
    let problems = gofs::f2fs_tools::fsck_problems(&out);
    assert!(
        problems.is_empty(),
        "fsck.f2fs found problems {problems:?}:\n{}",
        out.text
    );
}
