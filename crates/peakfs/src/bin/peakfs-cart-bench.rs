//! cART against `HashMap<(u64, String), u64>` (PeakFS §IV-F, "cART Test"): memory and put / get
//! / remove throughput on structured file names, both built in the same run.
//!
//! Names follow §IV-F: a fixed 12-byte prefix and two sequentially growing serial numbers,
//! separated by dots (`mdtest_files.<i / per>.<i % per>`). Memory is measured by a counting
//! global allocator (live heap bytes before and after building each structure), not estimated.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use common::bench::{BenchRecord, Engine, render_table};
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
    timings: Vec<(&'static str, Duration)>,
}

fn timed(f: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<Duration> {
    let t = Instant::now();
    f()?;
    Ok(t.elapsed())
}

fn run_cart(keys: &[(u64, String)], order: &[u32]) -> anyhow::Result<Run> {
    let before = live();
    let mut c = Cart::new();
    let put = timed(|| {
        for (i, (p, n)) in keys.iter().enumerate() {
            c.insert(*p, n.as_bytes(), i as u64)?;
        }
        Ok(())
    })?;
    let memory = (live() - before) as usize;
    if memory != c.memory_bytes() {
        tracing::warn!(
            measured = memory,
            reported = c.memory_bytes(),
            "cART memory_bytes differs from the allocator"
        );
    }
    let get_seq = timed(|| {
        for (i, (p, n)) in keys.iter().enumerate() {
            if c.get(*p, n.as_bytes()) != Some(i as u64) {
                bail!("cART lost {n}");
            }
        }
        Ok(())
    })?;
    let get_rand = timed(|| {
        for &i in order {
            let (p, n) = &keys[i as usize];
            black_box(c.get(*p, n.as_bytes()));
        }
        Ok(())
    })?;
    let remove = timed(|| {
        for (p, n) in keys {
            black_box(c.remove(*p, n.as_bytes()));
        }
        Ok(())
    })?;
    if !c.is_empty() {
        bail!("cART kept {} dentries after removing all", c.len());
    }
    Ok(Run {
        structure: "cart",
        memory,
        timings: vec![
            ("put", put),
            ("get-seq", get_seq),
            ("get-rand", get_rand),
            ("remove", remove),
        ],
    })
}

fn run_hashmap(keys: &[(u64, String)], order: &[u32]) -> anyhow::Result<Run> {
    let before = live();
    let mut m: HashMap<(u64, String), u64> = HashMap::new();
    let put = timed(|| {
        for (i, k) in keys.iter().enumerate() {
            m.insert(k.clone(), i as u64);
        }
        Ok(())
    })?;
    let memory = (live() - before) as usize;
    let get_seq = timed(|| {
        for (i, k) in keys.iter().enumerate() {
            if m.get(k) != Some(&(i as u64)) {
                bail!("HashMap lost {}", k.1);
            }
        }
        Ok(())
    })?;
    let get_rand = timed(|| {
        for &i in order {
            black_box(m.get(&keys[i as usize]));
        }
        Ok(())
    })?;
    let remove = timed(|| {
        for k in keys {
            black_box(m.remove(k));
        }
        Ok(())
    })?;
    Ok(Run {
        structure: "hashmap",
        memory,
        timings: vec![
            ("put", put),
            ("get-seq", get_seq),
            ("get-rand", get_rand),
            ("remove", remove),
        ],
    })
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
    let runs = [
        run_cart(&keys, &order).context("cART")?,
        run_hashmap(&keys, &order).context("HashMap")?,
    ];
    let mut records = Vec::new();
    for run in &runs {
        for &(op, d) in &run.timings {
            records.push(
                BenchRecord::new(
                    "peakfs-cart",
                    format!("{}-{op}", run.structure),
                    Engine::Cpu,
                )
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
    if args.json {
        for r in &records {
            println!("{}", r.to_json_line());
        }
    } else {
        println!("{}", render_table(&records));
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
