// Throwaway probe: the engine's CPU cost per 4 KiB random pread, on an in-memory image.
use gofs::format::{BlockIo, MemBlocks};
use gofs::fs::{Caller, Fs, MountOptions};
use gofs::posix::{OpenFlags, Posix};
use std::sync::Arc;
use std::time::Instant;

fn rng(s: &mut u64, n: u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s % n
}

fn main() {
    let n: u64 = std::env::args().nth(1).map_or(2_000_000, |s| s.parse().unwrap());
    let io: Arc<dyn BlockIo> = Arc::new(MemBlocks::new(vec![0u8; 512 << 20]));
    gofs::mkfs::mkfs_io(Arc::clone(&io), &Default::default()).unwrap();
    let fs = Arc::new(Fs::mount_io(Arc::clone(&io), MountOptions { read_only: false, checkpoint_interval: None }).unwrap());
    let posix = Posix::new(Arc::clone(&fs), Caller { uid: 0, gid: 0 });
    let fd = posix.open("/large", OpenFlags { read: true, ..OpenFlags::CREATE_TRUNC }, 0o644).unwrap();
    let blocks = 32768u64;
    let mut buf = vec![0u8; 4096];
    for b in 0..blocks {
        buf[..8].copy_from_slice(&b.to_le_bytes());
        posix.pwrite(fd, &buf, b * 4096).unwrap();
    }
    posix.fsync(fd).unwrap();
    for _ in 0..3 {
        let mut s = 0x9E3779B97F4A7C15u64;
        let t = Instant::now();
        for _ in 0..n {
            let b = rng(&mut s, blocks);
            posix.pread(fd, &mut buf, b * 4096).unwrap();
        }
        let gofs = t.elapsed().as_nanos() as f64 / n as f64;
        let t = Instant::now();
        for _ in 0..n {
            let b = rng(&mut s, 100_000);
            io.read(b, &mut buf).unwrap();
        }
        let raw = t.elapsed().as_nanos() as f64 / n as f64;
        println!("pread {gofs:.0} ns, raw mem read {raw:.0} ns, engine {:.0} ns", gofs - raw);
    }
}
