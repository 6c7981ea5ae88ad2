// Core-to-core ping-pong round trip between pinned threads (throwaway probe).
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
extern "C" { fn sched_setaffinity(pid: i32, size: usize, mask: *const u64) -> i32; }
fn pin(cpu: usize) { let mut m = [0u64; 16]; m[cpu / 64] |= 1 << (cpu % 64); unsafe { sched_setaffinity(0, 128, m.as_ptr()); } }
#[repr(align(128))] struct Line(AtomicU64);
fn rt(a: usize, b: usize, n: u64) -> f64 {
    let flag = Arc::new(Line(AtomicU64::new(0)));
    let f2 = flag.clone();
    let t = std::thread::spawn(move || { pin(b); for i in 0..n { while f2.0.load(Ordering::Acquire) != 2 * i + 1 {} f2.0.store(2 * i + 2, Ordering::Release); } });
    pin(a);
    // warm-up then time
    let st = Instant::now();
    for i in 0..n { flag.0.store(2 * i + 1, Ordering::Release); while flag.0.load(Ordering::Acquire) != 2 * i + 2 {} }
    let ns = st.elapsed().as_nanos() as f64 / n as f64;
    t.join().unwrap();
    ns
}
fn main() {
    let cpus = std::thread::available_parallelism().unwrap().get();
    for a in 0..cpus { let mut row = format!("{a:2}:"); for b in 0..cpus { if a == b { row += "    -"; } else { row += &format!(" {:4.0}", rt(a, b, 200_000)); } } println!("{row}"); }
}
