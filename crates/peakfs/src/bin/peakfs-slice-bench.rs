//! Server CPU per metadata request on one slice, without the network: `files` creates, lookups
//! (a stat by name) and unlinks in one directory, each request followed by what a RingSched
//! worker runs after sending its reply (the deferred settle: WAL append and inode images; and
//! the Icache write-behind pump). The store is the server's own: a file-backed controller over
//! `--data`, zone settings as `peakfs-server` makes them.
//!
//! `write-3901` writes 3,901 bytes into each file `create` made (mdtest's small files, whose
//! first block the inode maps; the second request of the bench's 3,901-byte creates).
//!
//! Each request is timed as well: the latency percentiles show the stalls a worker's request
//! meets (a checkpoint when the log is full, an Icache write-back, a log sync), which a mean
//! hides.
//!
//! `--other-mib M` first writes a file of M MiB in the same slice, so that the block
//! hashtable maps many blocks of another file: an unlink must cost the same with or without
//! them (it looks at its own file's blocks only).
//!
//! Then the data requests of the IOR phases as one slice receives them, into fresh blocks of a
//! file whose inode is elsewhere (as the data of file-based and I/O-based files mostly is):
//! `write-262144`, `--writes` WRITEs of 256 KiB one after another (N-N), and `write-47008`,
//! WRITEs of 47,008 bytes at every 8th such transfer of the file (N-1: the transfers one of 8
//! slices gets, each an extent of its own as the client sends an I/O-based file's), each timed
//! with its settle and pump as above; the file's blocks are dropped after each round, untimed.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use common::bench::{BenchRecord, Engine, LatencyRecorder, print_records};
use gpu_nvme::controller::file::FileBackend;
use peakfs::config::ServerConfig;
use peakfs::local_cluster::scratch_dir;
use peakfs::placement::{DataDist, Hint, Layout, ROOT_INO};
use peakfs::protocol::{Request, UnlinkFlags, op};
use peakfs::server::slice::{Slice, hint_to_store};
use peakfs::server::storage::Storage;

#[derive(Parser, Debug)]
#[command(about = "PeakFS: server CPU per metadata request on one slice (no network)")]
struct Args {
    /// Files created, looked up and unlinked per round.
    #[arg(long, default_value_t = 20_000)]
    files: u64,
    /// Rounds; each operation's time is the median over them.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// MiB of another file written first (blocks the hashtable maps besides these files).
    #[arg(long, default_value_t = 0)]
    other_mib: u64,
    /// MiB of the data file.
    #[arg(long, default_value_t = 2048)]
    data_mib: u64,
    /// Zone bytes per inode slot (the server's `--bytes-per-inode`): more files need more
    /// slots or a bigger data file.
    #[arg(long, default_value_t = peakfs::config::DEFAULT_BYTES_PER_INODE)]
    bytes_per_inode: u64,
    /// Folder of the data file (default: /dev/shm when it exists, else the temporary folder).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// How the file controller reaches the data file: uring (the servers' default), psync or
    /// mmap.
    #[arg(long, default_value = "uring")]
    backend: FileBackend,
    /// Let the file controller's threads serve the worker's own queue too (the server's
    /// `--no-inline-data-queues`), instead of the worker running its commands itself.
    #[arg(long)]
    no_inline_data_queues: bool,
    /// WRITE requests per data workload per round.
    #[arg(long, default_value_t = 2_000)]
    writes: u64,
    /// One JSON record per line.
    #[arg(long)]
    json: bool,
}

const OPS: [&str; 6] = [
    "create",
    "write-3901",
    "lookup",
    "unlink",
    "write-262144",
    "write-47008",
];
/// Bytes of the small file `write-3901` writes into each file `create` made (mdtest's
/// 3,901-byte files: their first block is mapped in the inode).
const SMALL_FILE: usize = 3901;
/// Where data workload `k` of `OPS` writes, as (transfer bytes, transfers between two of
/// them): N-N sequential, N-1 every 8th transfer.
fn data_shape(op: &str) -> Option<(u64, u64, bool)> {
    match op {
        "write-262144" => Some((256 << 10, 1, false)),
        "write-47008" => Some((47_008, 8, true)),
        _ => None,
    }
}
/// The ino the data workloads write: a file whose inode lives on another slice.
const FOREIGN_INO: u64 = (1 << 48) | 7;

fn request<'a>(op: &str, pino: u64, name: &'a [u8]) -> Request<'a> {
    match op {
        "create" => Request::Create {
            pino,
            mode: libc::S_IFREG | 0o644,
            uid: 0,
            gid: 0,
            rdev: 0,
            hint: Hint::default(),
            io_unit: 0,
            excl: true,
            name,
        },
        "lookup" => Request::Lookup { pino, name },
        _ => Request::Unlink {
            pino,
            flags: UnlinkFlags::default(),
            name,
        },
    }
}

/// Runs `req` as a worker does: execute, then (after the reply) settle and pump; returns how
/// long the reply took to be ready (the execute).
fn serve(slice: &mut Slice, req: Request<'_>, out: &mut Vec<u8>) -> anyhow::Result<Duration> {
    out.clear();
    let t = Instant::now();
    slice.execute(req, out).map_err(|(errno, msg)| {
        // The opcode, not the request: a WRITE's Debug would print every byte it carries.
        let name = op::name(req.opcode());
        anyhow::anyhow!("{name}: errno {}: {msg}", errno.0)
    })?;
    let replied = t.elapsed();
    slice.store().settle()?;
    slice.store().pump()?;
    Ok(replied)
}

/// The median of the rounds' times.
fn median_of(rounds: &mut [Duration]) -> Duration {
    rounds.sort_unstable();
    rounds[rounds.len() / 2]
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let args = Args::parse();
    if args.files == 0 || args.rounds == 0 {
        bail!("--files and --rounds must be at least 1");
    }
    let dir = scratch_dir(args.dir.as_deref(), "peakfs-slice-bench-")?;
    let cfg = ServerConfig {
        data: dir.path().join("data"),
        data_size: args.data_mib << 20,
        workers: 1,
        backend: args.backend,
        bytes_per_inode: args.bytes_per_inode,
        inline_data_queues: !args.no_inline_data_queues,
        ..ServerConfig::default()
    };
    cfg.validate()?;
    let mut storage = Storage::open(&cfg)?;
    let layout = Layout::new(1, 1, 64 << 10)?;
    let zone = storage
        .zones(0, &layout, hint_to_store(Hint::default()))?
        .pop()
        .context("no zone")?;
    let mut slice = Slice::new(zone);
    slice.store().defer_settle(true)?;
    let store = slice.store();
    let d = store.create(
        ROOT_INO,
        b"d",
        libc::S_IFDIR | 0o755,
        0,
        0,
        Default::default(),
    )?;
    if args.other_mib > 0 {
        let other = store.create(
            ROOT_INO,
            b"other",
            libc::S_IFREG | 0o644,
            0,
            0,
            Default::default(),
        )?;
        let chunk = vec![0x5au8; 1 << 20];
        for m in 0..args.other_mib {
            store.write(other.ino, m << 20, &chunk)?;
        }
        store.settle()?;
    }
    let blocks = slice.store().stats().blocks;
    let names: Vec<String> = (0..args.files).map(|i| format!("file.0.{i}")).collect();
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); OPS.len()];
    // Per round, the time of the requests' executes: what a client waits for (the settle and
    // pump run after the reply).
    let mut before_reply: Vec<Vec<Duration>> = vec![Vec::new(); OPS.len()];
    let mut latency: Vec<LatencyRecorder> = vec![LatencyRecorder::new(); OPS.len()];
    // Checkpoints (a full log writes every table of the zone) and Icache blocks written back.
    let mut checkpoints = [0u64; OPS.len()];
    let mut write_backs = [0u64; OPS.len()];
    let mut out = Vec::new();
    for _ in 0..args.rounds {
        for (k, op) in OPS.iter().enumerate() {
            let before = slice.store().stats();
            let shape = data_shape(op);
            let data = shape.map(|(xfer, _, _)| vec![0xc3u8; xfer as usize]);
            // The files `create` made, for `write-3901`.
            let small: Vec<u64> = match *op {
                "write-3901" => names
                    .iter()
                    .map(|n| slice.store().lookup(d.ino, n.as_bytes()))
                    .collect::<Option<_>>()
                    .context("a created file is missing")?,
                _ => Vec::new(),
            };
            let small_data = [0x3cu8; SMALL_FILE];
            let t = Instant::now();
            let mut last = t;
            let mut replied = Duration::ZERO;
            let mut timed = |req: Request<'_>| -> anyhow::Result<()> {
                replied += serve(&mut slice, req, &mut out)?;
                let now = Instant::now();
                latency[k].record(now - last);
                last = now;
                Ok(())
            };
            match (shape, &data) {
                (Some((xfer, stride, extent)), Some(data)) => {
                    for i in 0..args.writes {
                        let offset = i * stride * xfer;
                        timed(Request::Write {
                            ino: FOREIGN_INO,
                            offset,
                            // Each transfer an I/O unit of its own, as an N-1 file's.
                            extent: extent.then_some(offset),
                            dist: if extent { DataDist::Io } else { DataDist::File },
                            drop_set_id: false,
                            data,
                        })?;
                    }
                }
                _ if *op == "write-3901" => {
                    for &ino in &small {
                        timed(Request::Write {
                            ino,
                            offset: 0,
                            extent: None,
                            dist: DataDist::Block,
                            drop_set_id: false,
                            data: &small_data,
                        })?;
                    }
                }
                _ => {
                    for name in &names {
                        timed(request(op, d.ino, name.as_bytes()))?;
                    }
                }
            }
            times[k].push(t.elapsed());
            before_reply[k].push(replied);
            if shape.is_some() {
                let drop = Request::Truncate {
                    ino: FOREIGN_INO,
                    size: 0,
                };
                serve(&mut slice, drop, &mut out)?;
            }
            let after = slice.store().stats();
            checkpoints[k] += after.checkpoints - before.checkpoints;
            write_backs[k] += after.icache.write_backs - before.icache.write_backs;
        }
    }
    let mut records = Vec::new();
    for (k, op) in OPS.iter().enumerate() {
        let median = median_of(&mut times[k]);
        let replied = median_of(&mut before_reply[k]);
        let (ops, bytes) = match data_shape(op) {
            Some((xfer, _, _)) => (args.writes, args.writes * xfer),
            None if *op == "write-3901" => (args.files, args.files * SMALL_FILE as u64),
            None => (args.files, 0),
        };
        records.push(
            BenchRecord::new("peakfs-slice", *op, Engine::Cpu)
                .param("files", args.files)
                .param("rounds", args.rounds as u64)
                .param("other_blocks", blocks)
                .ops(ops)
                .bytes(bytes)
                .duration(median)
                .latency(&latency[k])
                .extra("ns_per_op", median.as_nanos() as f64 / ops as f64)
                .extra(
                    "ns_before_reply_per_op",
                    replied.as_nanos() as f64 / ops as f64,
                )
                .extra("checkpoints", checkpoints[k])
                .extra("icache_write_backs", write_backs[k])
                .finish()?,
        );
    }
    // The longest checkpoint stops of the whole run, by kind (the longest requests are
    // usually one of them).
    let stops = slice.store().stats().checkpoint_stops;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let stops_line = format!(
        "checkpoint stops: longest take {:.0} us, piece {:.0} us, last piece {:.0} us; {:.1} ms in all; \
         most written by one: {} staged pages, {} KiB of log",
        us(stops.take),
        us(stops.piece),
        us(stops.last),
        us(stops.total) / 1e3,
        stops.staged_pages_written,
        stops.log_bytes_written >> 10
    );
    if print_records(&records, args.json) {
        for r in &records {
            let max = r.latency_us.as_ref().map_or(0.0, |l| l.max);
            println!(
                "{}: {:.0} ns per request, {:.0} before its reply ({blocks} other blocks \
                 mapped), longest {max:.0} us; checkpoints {}, Icache blocks written back {}",
                r.workload,
                r.duration_s * 1e9 / r.ops as f64,
                r.extra["ns_before_reply_per_op"]
                    .as_f64()
                    .unwrap_or_default(),
                r.extra["checkpoints"],
                r.extra["icache_write_backs"]
            );
        }
        println!("{stops_line}");
    } else {
        eprintln!("{stops_line}");
    }
    Ok(())
}
