//! cART against `HashMap<(u64, String), u64>` (PeakFS §IV-F, "cART Test"): memory and put / get
//! / remove throughput on structured file names, both built in the same run.
//!
//! Names follow §IV-F: a fixed 12-byte prefix and two sequentially growing serial numbers,
//! separated by dots (`mdtest_files.<i / per>.<i % per>`). Memory is measured by a counting
//! global allocator (live heap bytes before and after building each structure), not estimated.
//! Random-order gets alternate between the two structures in turns, so that a shared machine's
//! interference lands on both alike.
//!
//! Wall-clock times on a shared machine are noisy; for a deterministic comparison of random
//! lookups, count instructions and cache misses of one turn function per structure, e.g.
//! `valgrind --tool=callgrind --cache-sim=yes --LL=8388608,16,64
//! --toggle-collect='*get_rand_cart*' peakfs-cart-bench --names 2000000 --only get-rand`
//! (and `*get_rand_hashmap*`). Both also depend on the page size: run with
//! `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` to see them on transparent huge pages, where a
//! HashMap's large tables gain the most.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use common::bench::{BenchRecord, Engine, print_records};
use common::hash::mix64;
use peakfs::pstore::cart::Cart;

/// Live heap bytes, counted by [`Counting`].
static LIVE: AtomicIsize = AtomicIsize::new(0);

/// The system allocator, counting live bytes.
struct Counting;

// SAFETY: every call forwards to `System` with the caller's arguments unchanged; the counter
// is only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours. (The default would zero the bytes itself, touching
        // every page, where the system allocator hands out fresh zero pages untouched.)
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// cART vs HashMap on structured file names.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Number of dentries.
    #[arg(long, default_value_t = 10_000_000)]
    names: u64,
    /// Files per value of the first serial number.
    #[arg(long, default_value_t = 1000)]
    per: u64,
    /// Parent directories the names are spread over (round robin).
    #[arg(long, default_value_t = 1)]
    dirs: u64,
    /// Print JSON lines (the common bench record) instead of the table.
    #[arg(long)]
    json: bool,
    /// Run only these phases after building both structures (the build is always timed as
    /// put); e.g. `--only get-rand` to look at random lookups under callgrind, where
    /// `get_rand_cart` and `get_rand_hashmap` hold one turn of each structure's lookups.
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Phase>,
}

/// A timed phase after the build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Phase {
    /// Gets in insertion order.
    GetSeq,
    /// Gets in a random order, both structures in alternating turns.
    GetRand,
    /// Removes of every name in insertion order.
    Remove,
}

fn shuffled(n: usize) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        let j = (mix64(i as u64) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

struct Run {
    structure: &'static str,
    memory: usize,
    longest_batch: Duration,
    timings: Vec<(&'static str, Duration)>,
}

fn timed(f: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<Duration> {
    let t = Instant::now();
    f()?;
    Ok(t.elapsed())
}

/// Random-order lookups per turn of [`get_rand_interleaved`].
const TURN: usize = 100_000;

/// One structure under test: the operations both benchmarks time.
trait Index {
    fn put(&mut self, pino: u64, name: &str, value: u64) -> anyhow::Result<()>;
    fn get(&self, key: &(u64, String)) -> Option<u64>;
    fn remove(&mut self, key: &(u64, String)) -> Option<u64>;
}

impl Index for Cart {
    fn put(&mut self, pino: u64, name: &str, value: u64) -> anyhow::Result<()> {
        self.insert(pino, name.as_bytes(), value)?;
        Ok(())
    }

    fn get(&self, (p, n): &(u64, String)) -> Option<u64> {
        Cart::get(self, *p, n.as_bytes())
    }

    fn remove(&mut self, (p, n): &(u64, String)) -> Option<u64> {
        Cart::remove(self, *p, n.as_bytes())
    }
}

impl Index for HashMap<(u64, String), u64> {
    fn put(&mut self, pino: u64, name: &str, value: u64) -> anyhow::Result<()> {
        self.insert((pino, name.to_owned()), value);
        Ok(())
    }

    fn get(&self, key: &(u64, String)) -> Option<u64> {
        HashMap::get(self, key).copied()
    }

    fn remove(&mut self, key: &(u64, String)) -> Option<u64> {
        HashMap::remove(self, key)
    }
}

/// Puts timed together when looking for the longest stall of a build: a clock read per
/// [`PUT_BATCH`] puts costs nothing measurable, and a stall (a table growing) stands out of a
/// batch's normal 10-30 us.
const PUT_BATCH: usize = 64;

/// The index built from `keys` (value = position), and the run of `structure` with what the
/// build cost: heap bytes held once built, the put phase and its longest batch.
fn build<I: Index>(
    structure: &'static str,
    mut index: I,
    keys: &[(u64, String)],
) -> anyhow::Result<(I, Run)> {
    let before = live();
    let mut longest_batch = Duration::ZERO;
    let put = timed(|| {
        for (b, batch) in keys.chunks(PUT_BATCH).enumerate() {
            let t = Instant::now();
            for (j, (p, n)) in batch.iter().enumerate() {
                index.put(*p, n, (b * PUT_BATCH + j) as u64)?;
            }
            longest_batch = longest_batch.max(t.elapsed());
        }
        Ok(())
    })?;
    let run = Run {
        structure,
        memory: (live() - before) as usize,
        longest_batch,
        timings: vec![("put", put)],
    };
    Ok((index, run))
}

fn get_seq(index: &impl Index, keys: &[(u64, String)], what: &str) -> anyhow::Result<Duration> {
    timed(|| {
        for (i, k) in keys.iter().enumerate() {
            if index.get(k) != Some(i as u64) {
                bail!("{what} lost {}", k.1);
            }
        }
        Ok(())
    })
}

/// Random-order gets on both structures, in alternating turns of [`TURN`] lookups (each
/// structure first every other turn): on a shared machine both see the same interference, so
/// their ratio holds within one run. Every lookup is checked.
fn get_rand_interleaved(
    c: &Cart,
    m: &HashMap<(u64, String), u64>,
    keys: &[(u64, String)],
    order: &[u32],
) -> anyhow::Result<(Duration, Duration)> {
    let (mut tc, mut tm) = (Duration::ZERO, Duration::ZERO);
    for (j, part) in order.chunks(TURN).enumerate() {
        let ((dc, fc), (dm, fm)) = if j % 2 == 0 {
            let x = get_rand_cart(c, keys, part);
            (x, get_rand_hashmap(m, keys, part))
        } else {
            let y = get_rand_hashmap(m, keys, part);
            (get_rand_cart(c, keys, part), y)
        };
        if fc != part.len() || fm != part.len() {
            bail!(
                "random gets found cART {fc} / HashMap {fm} of {}",
                part.len()
            );
        }
        tc += dc;
        tm += dm;
    }
    Ok((tc, tm))
}

/// One turn of random-order gets on one structure: its time and how many were found.
#[inline(always)]
fn get_rand_turn<I: Index>(index: &I, keys: &[(u64, String)], part: &[u32]) -> (Duration, usize) {
    let t = Instant::now();
    let mut found = 0;
    for &i in part {
        found += usize::from(black_box(index.get(&keys[i as usize])).is_some());
    }
    (t.elapsed(), found)
}

/// [`get_rand_turn`] on cART, not inlined so that a profiler can single it out
/// (`valgrind --tool=callgrind --toggle-collect='*get_rand_cart*'`).
#[inline(never)]
fn get_rand_cart(c: &Cart, keys: &[(u64, String)], part: &[u32]) -> (Duration, usize) {
    get_rand_turn(c, keys, part)
}

/// [`get_rand_turn`] on the HashMap, not inlined (`--toggle-collect='*get_rand_hashmap*'`).
#[inline(never)]
fn get_rand_hashmap(
    m: &HashMap<(u64, String), u64>,
    keys: &[(u64, String)],
    part: &[u32],
) -> (Duration, usize) {
    get_rand_turn(m, keys, part)
}

fn remove_all(index: &mut impl Index, keys: &[(u64, String)]) -> Duration {
    let t = Instant::now();
    for k in keys {
        black_box(index.remove(k));
    }
    t.elapsed()
}

fn run_both(keys: &[(u64, String)], order: &[u32], only: &[Phase]) -> anyhow::Result<[Run; 2]> {
    let runs = |p: Phase| only.is_empty() || only.contains(&p);
    let (mut c, mut cr) = build("cart", Cart::new(), keys).context("cART")?;
    if cr.memory != c.memory_bytes() {
        tracing::warn!(
            measured = cr.memory,
            reported = c.memory_bytes(),
            "cART memory_bytes differs from the allocator"
        );
    }
    let (mut m, mut mr) = build("hashmap", HashMap::new(), keys).context("HashMap")?;
    let (ct, mt) = (&mut cr.timings, &mut mr.timings);
    if runs(Phase::GetSeq) {
        ct.push(("get-seq", get_seq(&c, keys, "cART")?));
        mt.push(("get-seq", get_seq(&m, keys, "HashMap")?));
    }
    if runs(Phase::GetRand) {
        let (c_rand, m_rand) = get_rand_interleaved(&c, &m, keys, order)?;
        ct.push(("get-rand", c_rand));
        mt.push(("get-rand", m_rand));
    }
    if runs(Phase::Remove) {
        ct.push(("remove", remove_all(&mut c, keys)));
        if !c.is_empty() {
            bail!("cART kept {} dentries after removing all", c.len());
        }
        mt.push(("remove", remove_all(&mut m, keys)));
    }
    Ok([cr, mr])
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber_init();
    let args = Args::parse();
    if args.names == 0 || args.per == 0 || args.dirs == 0 || args.names > u64::from(u32::MAX) {
        bail!(
            "--names {} --per {} --dirs {}: need names in 1..=2^32-1, per and dirs >= 1",
            args.names,
            args.per,
            args.dirs
        );
    }
    let keys: Vec<(u64, String)> = (0..args.names)
        .map(|i| {
            (
                1 + i % args.dirs,
                format!("mdtest_files.{}.{}", i / args.per, i % args.per),
            )
        })
        .collect();
    let order = shuffled(keys.len());
    let runs = run_both(&keys, &order, &args.only)?;
    let mut records = Vec::new();
    for run in &runs {
        for &(op, d) in &run.timings {
            let mut record = BenchRecord::new(
                "peakfs-cart",
                format!("{}-{op}", run.structure),
                Engine::Cpu,
            );
            if op == "put" {
                record = record.extra("longest_64_puts_us", run.longest_batch.as_secs_f64() * 1e6);
            }
            records.push(
                record
                    .param("names", args.names)
                    .param("dirs", args.dirs)
                    .param(
                        "memory_MiB",
                        (run.memory as f64 / 1048576.0 * 10.0).round() / 10.0,
                    )
                    .ops(args.names)
                    .duration(d)
                    .extra("memory_bytes", run.memory as u64)
                    .extra("bytes_per_name", run.memory as f64 / args.names as f64)
                    .finish()?,
            );
        }
    }
    if print_records(&records, args.json) {
        let ratio = runs[0].memory as f64 / runs[1].memory as f64;
        println!(
            "memory: cART {} B ({:.1} B/name), HashMap {} B ({:.1} B/name), cART/HashMap = {:.3}",
            runs[0].memory,
            runs[0].memory as f64 / args.names as f64,
            runs[1].memory,
            runs[1].memory as f64 / args.names as f64,
            ratio
        );
        for (i, &(op, d)) in runs[0].timings.iter().enumerate() {
            let h = runs[1].timings[i].1;
            println!(
                "{op}: cART {:.2} Mops/s, HashMap {:.2} Mops/s, speed-up {:.2}x",
                args.names as f64 / d.as_secs_f64() / 1e6,
                args.names as f64 / h.as_secs_f64() / 1e6,
                h.as_secs_f64() / d.as_secs_f64()
            );
        }
        println!(
            "longest {PUT_BATCH} puts in a row: cART {:.0} us, HashMap {:.0} us",
            runs[0].longest_batch.as_secs_f64() * 1e6,
            runs[1].longest_batch.as_secs_f64() * 1e6
        );
    }
    Ok(())
}

fn tracing_subscriber_init() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
}
