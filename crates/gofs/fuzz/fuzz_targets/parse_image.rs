//! Fuzzes mounting and reading a damaged F2FS image (`gofs::format` parsers and the engine's
//! read path): the input is a list of byte patches `(offset: u32 LE, value: u8)` applied to a
//! valid image that GoFS made (root, files with direct and indirect nodes, a directory, a
//! symlink), or, when it starts with 0xFF, raw bytes laid over the first blocks. The patched
//! image is mounted read-only and every reachable file read. Nothing may panic.
#![no_main]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use gofs::error::{FsError, Result};
use gofs::format::{BLOCK_SIZE, BlockIo, MemBlocks};
use gofs::fs::{Caller, FileType, Fs, MountOptions, ROOT_INO};
use libfuzzer_sys::fuzz_target;

/// A shared base image with private patched blocks on top (no 64 MiB copy per input).
#[derive(Debug)]
struct Overlay {
    base: &'static [u8],
    patched: Mutex<HashMap<u64, Vec<u8>>>,
}

impl BlockIo for Overlay {
    fn block_count(&self) -> u64 {
        (self.base.len() / BLOCK_SIZE) as u64
    }
    fn read(&self, blk: u64, buf: &mut [u8]) -> Result<()> {
        let n = buf.len() / BLOCK_SIZE;
        if blk.saturating_add(n as u64) > self.block_count() || buf.len() % BLOCK_SIZE != 0 {
            return Err(FsError::Corrupt(format!(
                "read of block {blk} past the image"
            )));
        }
        let p = self.patched.lock().unwrap();
        for (k, chunk) in buf.chunks_mut(BLOCK_SIZE).enumerate() {
            let b = blk + k as u64;
            match p.get(&b) {
                Some(v) => chunk.copy_from_slice(v),
                None => {
                    let s = b as usize * BLOCK_SIZE;
                    chunk.copy_from_slice(&self.base[s..s + BLOCK_SIZE]);
                }
            }
        }
        Ok(())
    }
    fn write(&self, _blk: u64, _buf: &[u8]) -> Result<()> {
        Err(FsError::ReadOnly)
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
    fn trim(&self, _blk: u64, _count: u32) -> Result<()> {
        Ok(())
    }
}

fn base() -> &'static [u8] {
    static IMG: OnceLock<Vec<u8>> = OnceLock::new();
    IMG.get_or_init(|| {
        let me = Caller { uid: 0, gid: 0 };
        let mem = Arc::new(MemBlocks::new(vec![0u8; 64 << 20]));
        gofs::mkfs::mkfs_io(mem.clone(), &gofs::mkfs::MkfsOptions::default()).unwrap();
        let opts = MountOptions {
            read_only: false,
            checkpoint_interval: None,
        };
        let fs = Fs::mount_io(mem.clone(), opts).unwrap();
        let d = fs.mkdir(ROOT_INO, b"dir", 0o755, me).unwrap();
        for i in 0..40 {
            let f = fs
                .create(
                    d.ino,
                    format!("f{i}").as_bytes(),
                    FileType::Regular,
                    0o644,
                    0,
                    me,
                )
                .unwrap();
            fs.write(f.ino, 0, &vec![i as u8; 100 * i]).unwrap();
        }
        let big = fs
            .create(ROOT_INO, b"big", FileType::Regular, 0o644, 0, me)
            .unwrap();
        fs.write(big.ino, 0, &vec![1u8; 4 << 20]).unwrap();
        fs.symlink(ROOT_INO, b"link", b"dir/f1", me).unwrap();
        fs.unmount().unwrap();
        mem.to_vec()
    })
}

fuzz_target!(|data: &[u8]| {
    let base = base();
    let mut patched: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut patch = |off: usize, v: u8| {
        let off = off % base.len();
        let blk = (off / BLOCK_SIZE) as u64;
        let b = patched.entry(blk).or_insert_with(|| {
            base[blk as usize * BLOCK_SIZE..(blk as usize + 1) * BLOCK_SIZE].to_vec()
        });
        b[off % BLOCK_SIZE] = v;
    };
    if data.first() == Some(&0xFF) {
        for (i, &v) in data[1..].iter().enumerate() {
            patch(i, v);
        }
    } else {
        for c in data.chunks_exact(5) {
            let off = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize;
            patch(off, c[4]);
        }
    }
    let io = Arc::new(Overlay {
        base,
        patched: Mutex::new(patched),
    });
    let opts = MountOptions {
        read_only: true,
        checkpoint_interval: None,
    };
    if let Ok(fs) = Fs::mount_io(io, opts) {
        let _ = fs.walk(2000);
        let _ = fs.statfs();
    }
});
