// Throwaway probe (not committed): GoFS pread vs direct read vs slot read, one process.
use gofs::fs::{Caller, Fs, MountOptions};
use gofs::posix::{OpenFlags, Posix};
use gpu_nvme::controller::FileBackend;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[repr(C, align(4096))]
struct PageBuf([u8; 4096]);

fn rng(s: &mut u64, n: u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s % n
}

fn report(name: &str, mut lat: Vec<u32>, el: Duration) {
    let n = lat.len();
    lat.sort_unstable();
    println!(
        "{name:10} {:>8.0} IOPS p50 {:>5} ns p99 {:>6} ns",
        n as f64 / el.as_secs_f64(),
        lat[n / 2],
        lat[n * 99 / 100]
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let workers: usize = args.get(1).map_or(1, |s| s.parse().unwrap());
    let secs: f64 = args.get(2).map_or(2.0, |s| s.parse().unwrap());
    let rounds: usize = args.get(3).map_or(2, |s| s.parse().unwrap());
    let img = std::path::Path::new("/dev/shm/probe.img");
    let f = std::fs::File::create(img).unwrap();
    f.set_len(1 << 30).unwrap();
    drop(f);
    let dev = gofs::bench::open_image_with(img, FileBackend::Mmap, workers).unwrap();
    gofs::mkfs::mkfs(&dev, &Default::default()).unwrap();
    drop(dev);
    let dev = gofs::bench::open_image_with(img, FileBackend::Mmap, workers).unwrap();
    let fs = Arc::new(
        Fs::mount(
            Arc::clone(&dev),
            MountOptions {
                read_only: false,
                checkpoint_interval: None,
            },
        )
        .unwrap(),
    );
    let posix = Posix::new(Arc::clone(&fs), Caller { uid: 0, gid: 0 });
    let fd = posix
        .open(
            "/large",
            OpenFlags {
                read: true,
                ..OpenFlags::CREATE_TRUNC
            },
            0o644,
        )
        .unwrap();
    let blocks = 32768u64;
    let mut buf = vec![0u8; 4096];
    for b in 0..blocks {
        buf[..8].copy_from_slice(&b.to_le_bytes());
        posix.pwrite(fd, &buf, b * 4096).unwrap();
    }
    posix.fsync(fd).unwrap();
    let mut page = Box::new(PageBuf([0; 4096]));
    let total_lbas = (1u64 << 30) / 4096;
    let d = Duration::from_secs_f64(secs);
    for _ in 0..rounds {
        // GoFS pread
        let mut s = 0x9E3779B97F4A7C15u64;
        let mut lat = Vec::with_capacity(4_000_000);
        let st = Instant::now();
        while st.elapsed() < d {
            for _ in 0..1024 {
                let b = rng(&mut s, blocks);
                let t = Instant::now();
                posix.pread(fd, &mut page.0, b * 4096).unwrap();
                lat.push(t.elapsed().as_nanos() as u32);
                if b % 16 == 0 {
                    assert_eq!(page.0[..8], b.to_le_bytes());
                }
            }
        }
        report("gofs", lat, st.elapsed());
        // direct read into page buffer, random LBA over image
        let q = dev.thread_queue();
        let mut lat = Vec::with_capacity(4_000_000);
        let st = Instant::now();
        while st.elapsed() < d {
            for _ in 0..1024 {
                let b = rng(&mut s, total_lbas);
                let t = Instant::now();
                q.read_direct(b, &mut page.0).unwrap();
                lat.push(t.elapsed().as_nanos() as u32);
            }
        }
        report("direct", lat, st.elapsed());
        // slot read
        let mut lat = Vec::with_capacity(4_000_000);
        let st = Instant::now();
        while st.elapsed() < d {
            for _ in 0..1024 {
                let b = rng(&mut s, total_lbas);
                let t = Instant::now();
                let tk = q.submit(false, b, 1, false, |_| {}).unwrap();
                q.wait(tk, Duration::from_secs(5)).unwrap();
                q.release(tk);
                lat.push(t.elapsed().as_nanos() as u32);
            }
        }
        report("slot", lat, st.elapsed());
    }
    posix.close(fd).unwrap();
    drop(posix);
    let fs = Arc::try_unwrap(fs).ok().unwrap();
    fs.unmount().unwrap();
    std::fs::remove_file(img).unwrap();
}
