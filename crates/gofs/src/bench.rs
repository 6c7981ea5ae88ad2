//! GoFS's microbenchmarks (papers/gofs.md §4.2 and Table 1) on the host engine: 4 KiB
//! sequential and random reads and writes on a large file, and multi-file reads and writes over
//! N small files, once per file (open/read/close) and once through the batched API (§3.7). The
//! same run measures the raw controller under the image with `gpu_nvme::bench` (same thread
//! count and one command in flight, as the engine issues them), so the file system's share of
//! the raw speed is printed next to it. The 4 KiB read workloads and the raw runs alternate in
//! rounds, so that both are measured over the same stretch of the host's time: a host whose
//! speed drifts by tens of percent within a minute (seen on the GPU machine's hosts) moves
//! both sides of each round's ratio alike.
//!
//! Also home of [`open_image`], which the CLI uses to reach an image file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::bench::{BenchRecord, Engine, LatencyRecorder, Machine};
use gpu_nvme::bench::Pattern;
use gpu_nvme::controller::{Controller, FileBackend, FileController, FileControllerConfig};
use gpu_nvme::device::{DeviceConfig, DeviceError, NvmeDevice};

use crate::batch::BatchRequest;
use crate::error::FsError;
use crate::fs::{Caller, Fs, MountOptions};
use crate::posix::{Fd, OpenFlags, Posix, PosixError};

/// F2FS block size: the unit of the 4 KiB workloads.
const BLOCK: usize = 4096;

/// Errors of the benchmark and of opening an image.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// an argument is out of range
    #[error("{0}")]
    Invalid(String),
    /// the controller over the image could not start
    #[error(transparent)]
    Controller(#[from] gpu_nvme::controller::ControllerError),
    /// the host driver failed
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// the engine failed
    #[error(transparent)]
    Fs(#[from] FsError),
    /// a POSIX call failed
    #[error(transparent)]
    Posix(#[from] PosixError),
    /// the raw controller benchmark failed
    #[error(transparent)]
    Raw(#[from] gpu_nvme::bench::BenchError),
    /// a record could not be built
    #[error(transparent)]
    Record(#[from] common::bench::BenchError),
    /// the image file could not be prepared
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    /// data read back differs from what was written
    #[error("{0} blocks read back did not hold what was written")]
    Verify(u64),
}

/// Opens `image` (a file or block device, 4 KiB LBAs) through the file-backed controller with
/// one worker thread and brings up the host driver on it.
pub fn open_image(image: &Path, backend: FileBackend) -> Result<Arc<NvmeDevice>, BenchError> {
    open_image_with(image, backend, 1)
}

/// [`open_image`] with `workers` controller threads (each owns every `workers`-th queue).
pub fn open_image_with(
    image: &Path,
    backend: FileBackend,
    workers: usize,
) -> Result<Arc<NvmeDevice>, BenchError> {
    let mut config = FileControllerConfig::new(image);
    config.lba_size = BLOCK as u32;
    config.workers = workers;
    config.backend = backend;
    let ctrl: Arc<dyn Controller> = FileController::new(config)?;
    Ok(Arc::new(NvmeDevice::open(ctrl, DeviceConfig::default())?))
}

/// Arguments of `gofs bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Image file to create and format (tmpfs keeps the device out of the measurement).
    #[arg(long, default_value = "/dev/shm/gofs-bench.img")]
    pub image: PathBuf,
    /// Image size in MiB.
    #[arg(long, default_value_t = 1024)]
    pub image_mib: u64,
    /// Size of the large file of the 4 KiB workloads, in MiB.
    #[arg(long, default_value_t = 128)]
    pub file_mib: u64,
    /// 4 KiB writes of the random write workload.
    #[arg(long, default_value_t = 20_000)]
    pub random_ops: u64,
    /// Small files of the multi-file workloads.
    #[arg(long, default_value_t = 10_000)]
    pub files: usize,
    /// Size of each small file in KiB.
    #[arg(long, default_value_t = 16)]
    pub file_kib: usize,
    /// Threads of the multi-file workloads (per-file and batched alike).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Controller worker threads, for the engine and the raw runs alike. With two, the
    /// engine's two host queues have a worker each: one command in flight keeps one worker
    /// busy, a batch dealt over both queues keeps both. Default: 2 on machines of 4 or more
    /// cores, else 1 (on 2 cores a second polling worker takes the core the engine needs).
    #[arg(long, default_value_t = default_controller_workers())]
    pub controller_workers: usize,
    /// How the controller reaches the image: mmap, psync or uring.
    #[arg(long, default_value = "mmap")]
    pub backend: String,
    /// Seconds of each 4 KiB read workload (sequential passes over the large file, random
    /// reads) and of each raw controller run, so that both are measured over the same time.
    #[arg(long, alias = "raw-seconds", default_value_t = 2.0)]
    pub seconds: f64,
    /// Rounds of each 4 KiB read workload, alternating with the raw controller's run of the
    /// same pattern (engine first in even rounds, raw first in odd ones); the ratio to raw is
    /// the median of the rounds' ratios.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Skip the raw controller runs.
    #[arg(long)]
    pub no_raw: bool,
    /// Keep the image file afterwards.
    #[arg(long)]
    pub keep_image: bool,
    /// Emit JSON records (one a line) instead of the table.
    #[arg(long)]
    pub json: bool,
}

fn default_controller_workers() -> usize {
    if std::thread::available_parallelism().map_or(1, usize::from) >= 4 {
        2
    } else {
        1
    }
}

/// One measured workload before it becomes a record.
struct Sample {
    workload: &'static str,
    ops: u64,
    bytes: u64,
    elapsed: Duration,
    latency: LatencyRecorder,
    /// (engine IOPS, raw IOPS) of each round run against the raw controller.
    rounds: Vec<(f64, f64)>,
    /// The same against raw runs confined to the file's footprint (random reads).
    span_rounds: Vec<(f64, f64)>,
}

impl Sample {
    fn iops(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    /// Adds `other`'s operations, time and latencies (another round of the same workload).
    fn absorb(&mut self, other: &Sample) -> Result<(), BenchError> {
        self.ops += other.ops;
        self.bytes += other.bytes;
        self.elapsed += other.elapsed;
        self.latency.merge(&other.latency)?;
        Ok(())
    }
}

fn timed(
    workload: &'static str,
    ops: u64,
    bytes: u64,
    mut body: impl FnMut(&mut LatencyRecorder) -> Result<(), BenchError>,
) -> Result<Sample, BenchError> {
    let mut latency = LatencyRecorder::new();
    let start = Instant::now();
    body(&mut latency)?;
    Ok(Sample {
        workload,
        ops,
        bytes,
        elapsed: start.elapsed().max(Duration::from_nanos(1)),
        latency,
        rounds: Vec::new(),
        span_rounds: Vec::new(),
    })
}

/// A page-aligned 4 KiB buffer, as fio allocates its I/O buffers: a direct read into it is
/// one PRP entry and the controller's copy stores whole cache lines (a heap vector's 4 KiB
/// straddle two pages).
#[repr(C, align(4096))]
struct PageBuf([u8; BLOCK]);

/// Marks a block with its position so reads can be checked cheaply.
fn tag(buf: &mut [u8], id: u64) {
    buf[..8].copy_from_slice(&id.to_le_bytes());
}

fn tagged(buf: &[u8], id: u64) -> bool {
    buf.len() >= 8 && buf[..8] == id.to_le_bytes()
}

/// A small xorshift generator: the benchmark needs speed and a fixed seed, not quality.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Runs every workload on a fresh image at `args.image` and returns the records (GoFS first,
/// then the raw controller's), with the GoFS/raw ratios in the GoFS records' `extra`.
pub fn run(
    args: &BenchArgs,
    format: &dyn Fn(&Path) -> Result<(), BenchError>,
) -> Result<Vec<BenchRecord>, BenchError> {
    if args.file_kib == 0
        || args.files == 0
        || args.file_mib == 0
        || args.threads == 0
        || args.controller_workers == 0
    {
        return Err(BenchError::Invalid(
            "--files, --file-kib, --file-mib, --threads and --controller-workers must be positive"
                .into(),
        ));
    }
    let backend: FileBackend = args.backend.parse()?;
    prepare_image(&args.image, args.image_mib)?;
    format(&args.image)?;
    let dev = open_image_with(&args.image, backend, args.controller_workers)?;
    let fs = Arc::new(Fs::mount(
        dev,
        MountOptions {
            read_only: false,
            checkpoint_interval: None,
        },
    )?);
    let posix = Posix::new(Arc::clone(&fs), Caller { uid: 0, gid: 0 });
    let mut raw = RawRuns {
        args,
        backend,
        records: Vec::new(),
    };
    let mut samples = large_file(&posix, args, &mut raw)?;
    samples.extend(small_files(&posix, args)?);
    drop(posix);
    let fs = Arc::try_unwrap(fs)
        .map_err(|_| BenchError::Invalid("the engine is still in use after the run".into()))?;
    fs.unmount()?;
    let mut records = Vec::new();
    for s in samples {
        let mut record = BenchRecord::new("gofs", s.workload, Engine::Cpu)
            .param("image", args.image.display().to_string())
            .param("backend", args.backend.clone())
            .param("threads", args.threads as u64)
            .param("controller_workers", args.controller_workers as u64)
            .param("files", args.files as u64)
            .param("file_kib", args.file_kib as u64)
            .param("file_mib", args.file_mib)
            .ops(s.ops)
            .bytes(s.bytes)
            .duration(s.elapsed)
            .latency(&s.latency)
            .machine(Machine::detect())
            .finish()?;
        if !s.rounds.is_empty() {
            add_raw_ratio(&mut record, &s.rounds, "");
        }
        if !s.span_rounds.is_empty() {
            add_raw_ratio(&mut record, &s.span_rounds, "_same_span");
        }
        records.push(record);
    }
    add_batch_speedup(&mut records);
    records.extend(raw.records);
    if !args.keep_image {
        std::fs::remove_file(&args.image)
            .map_err(|e| BenchError::Io(args.image.display().to_string(), e))?;
    }
    Ok(records)
}

/// Puts the raw controller's speed and the engine's share of it into `record`'s `extra`:
/// `raw_iops` (mean over the rounds), `ratio_rounds` (each round's engine/raw) and
/// `ratio_to_raw` (their median), each name followed by `suffix`.
fn add_raw_ratio(record: &mut BenchRecord, rounds: &[(f64, f64)], suffix: &str) {
    let mut ratios: Vec<f64> = rounds.iter().map(|(gofs, raw)| gofs / raw).collect();
    let raw_mean = rounds.iter().map(|r| r.1).sum::<f64>() / rounds.len() as f64;
    record
        .extra
        .insert(format!("raw_iops{suffix}"), raw_mean.into());
    record
        .extra
        .insert(format!("ratio_rounds{suffix}"), ratios.clone().into());
    ratios.sort_by(f64::total_cmp);
    let mid = ratios.len() / 2;
    let median = if ratios.len() % 2 == 1 {
        ratios[mid]
    } else {
        (ratios[mid - 1] + ratios[mid]) / 2.0
    };
    record
        .extra
        .insert(format!("ratio_to_raw{suffix}"), median.into());
}

/// Puts the batched multi-file read's and write's speed relative to their per-file loops
/// into the batched records' `extra` (`perfile_iops`, `speedup_vs_perfile`).
fn add_batch_speedup(records: &mut [BenchRecord]) {
    for (batch, perfile) in [
        ("multifile-read-batch", "multifile-read-perfile"),
        ("multifile-write-batch", "multifile-write-perfile"),
    ] {
        let Some(per) = records
            .iter()
            .find(|r| r.workload == perfile)
            .map(|r| r.iops)
        else {
            continue;
        };
        if let Some(rec) = records.iter_mut().find(|r| r.workload == batch) {
            rec.extra.insert("perfile_iops".into(), per.into());
            rec.extra
                .insert("speedup_vs_perfile".into(), (rec.iops / per).into());
        }
    }
}

/// Creates (or resizes) the image file to `mib` MiB of zeroes.
fn prepare_image(path: &Path, mib: u64) -> Result<(), BenchError> {
    let io = |e| BenchError::Io(path.display().to_string(), e);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(io)?;
    f.set_len(mib << 20).map_err(io)
}

/// Sequential 4 KiB writes and reads over one large file, then random 4 KiB reads and writes;
/// the reads in rounds against the raw controller's runs of the same pattern.
fn large_file(
    posix: &Posix,
    args: &BenchArgs,
    raw: &mut RawRuns<'_>,
) -> Result<Vec<Sample>, BenchError> {
    let blocks = (args.file_mib << 20) / BLOCK as u64;
    let bytes = blocks * BLOCK as u64;
    let fd = posix.open(
        "/large",
        OpenFlags {
            read: true,
            ..OpenFlags::CREATE_TRUNC
        },
        0o644,
    )?;
    let mut buf = vec![0u8; BLOCK];
    let mut out = Vec::new();
    out.push(timed("seqwrite-4k", blocks, bytes, |lat| {
        for b in 0..blocks {
            tag(&mut buf, b);
            let t = Instant::now();
            posix.pwrite(fd, &buf, b * BLOCK as u64)?;
            lat.record(t.elapsed());
        }
        Ok(())
    })?);
    posix.fsync(fd)?;
    let mut bad = 0u64;
    let seconds = Duration::from_secs_f64(args.seconds.max(0.0));
    let rounds = args.rounds.max(1);
    // Whole passes over the file until `seconds` have passed.
    out.push(against_raw(rounds, raw, Pattern::Seq, &mut || {
        reads_for(posix, fd, "seqread-4k", seconds, blocks, &mut bad, |k| {
            k % blocks
        })
    })?);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    out.push(against_raw(rounds, raw, Pattern::Rand, &mut || {
        reads_for(posix, fd, "randread-4k", seconds, 1024, &mut bad, |_| {
            rng.below(blocks)
        })
    })?);
    let n = args.random_ops;
    out.push(timed("randwrite-4k", n, n * BLOCK as u64, |lat| {
        for _ in 0..n {
            let b = rng.below(blocks);
            tag(&mut buf, b);
            let t = Instant::now();
            posix.pwrite(fd, &buf, b * BLOCK as u64)?;
            lat.record(t.elapsed());
        }
        Ok(())
    })?);
    posix.close(fd)?;
    if bad > 0 {
        return Err(BenchError::Verify(bad));
    }
    Ok(out)
}

/// `rounds` rounds of the engine's workload `engine`, each next to a raw controller run of
/// `pattern` (engine first in even rounds, raw first in odd ones), merged into one sample that
/// keeps each round's pair of speeds.
fn against_raw(
    rounds: usize,
    raw: &mut RawRuns<'_>,
    pattern: Pattern,
    engine: &mut dyn FnMut() -> Result<Sample, BenchError>,
) -> Result<Sample, BenchError> {
    let mut total: Option<Sample> = None;
    let (mut pairs, mut span_pairs) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let raw_first = round % 2 == 1;
        let mut raw_iops = if raw_first {
            raw.run(pattern, round)?
        } else {
            None
        };
        let sample = engine()?;
        if !raw_first {
            raw_iops = raw.run(pattern, round)?;
        }
        if let Some((whole, span)) = raw_iops {
            pairs.push((sample.iops(), whole));
            if let Some(span) = span {
                span_pairs.push((sample.iops(), span));
            }
        }
        match total.as_mut() {
            Some(t) => t.absorb(&sample)?,
            None => total = Some(sample),
        }
    }
    let mut total = total.ok_or_else(|| BenchError::Invalid("no round ran".into()))?;
    total.rounds = pairs;
    total.span_rounds = span_pairs;
    Ok(total)
}

/// One 4 KiB read in this many has its tag checked. Reading the tag pulls the cache line the
/// controller's thread has just written over to the reading core: about 100 ns on the GPU
/// machine's hosts, 7% of a direct 4 KiB read, which the raw controller run (it never looks at
/// the data) does not pay (bench/results/2026-11-25-h100-session3, call 9).
const CHECK_ONE_IN: u64 = 16;

/// Whether read number `op` is one of the checked ones (a pseudo-random one in
/// [`CHECK_ONE_IN`], so that passes over a file check different blocks).
fn checked(op: u64) -> bool {
    (op.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32).is_multiple_of(CHECK_ONE_IN)
}

/// 4 KiB reads of the blocks `block(0), block(1), ...` of `fd`, in rounds of `round` reads
/// until `seconds` have passed (one round at least); the [`checked`] ones whose block holds
/// the wrong tag are counted in `bad`.
fn reads_for(
    posix: &Posix,
    fd: Fd,
    workload: &'static str,
    seconds: Duration,
    round: u64,
    bad: &mut u64,
    mut block: impl FnMut(u64) -> u64,
) -> Result<Sample, BenchError> {
    let mut page = Box::new(PageBuf([0; BLOCK]));
    let buf = &mut page.0[..];
    let mut ops = 0u64;
    let mut sample = timed(workload, 0, 0, |lat| {
        let start = Instant::now();
        while ops == 0 || start.elapsed() < seconds {
            for _ in 0..round {
                let b = block(ops);
                let t = Instant::now();
                posix.pread(fd, buf, b * BLOCK as u64)?;
                lat.record(t.elapsed());
                if checked(ops) {
                    *bad += u64::from(!tagged(buf, b));
                }
                ops += 1;
            }
        }
        Ok(())
    })?;
    sample.ops = ops;
    sample.bytes = ops * BLOCK as u64;
    Ok(sample)
}

/// Splits `0..n` into `parts` contiguous ranges.
fn shares(n: usize, parts: usize) -> Vec<std::ops::Range<usize>> {
    let per = n.div_ceil(parts.max(1)).max(1);
    (0..n).step_by(per).map(|s| s..(s + per).min(n)).collect()
}

/// Runs `work` on each share of `0..n` on its own thread, merging the latency recorders.
fn parallel(
    n: usize,
    threads: usize,
    lat: &mut LatencyRecorder,
    work: impl Fn(std::ops::Range<usize>, &mut LatencyRecorder) -> Result<(), BenchError> + Sync,
) -> Result<(), BenchError> {
    let work = &work;
    let results: Vec<Result<LatencyRecorder, BenchError>> = std::thread::scope(|s| {
        let handles: Vec<_> = shares(n, threads)
            .into_iter()
            .map(|range| {
                s.spawn(move || {
                    let mut l = LatencyRecorder::new();
                    work(range, &mut l).map(|()| l)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::Invalid("a bench thread panicked".into())))
            })
            .collect()
    });
    for r in results {
        lat.merge(&r?)?;
    }
    Ok(())
}

fn small_path(i: usize) -> String {
    format!("/small/f{i:06}")
}

/// Multi-file writes and reads: per file (open/write or read/close) and batched.
fn small_files(posix: &Posix, args: &BenchArgs) -> Result<Vec<Sample>, BenchError> {
    let n = args.files;
    let size = args.file_kib * 1024;
    let bytes = (n * size) as u64;
    posix.mkdir("/small", 0o755)?;
    let fill = |buf: &mut [u8], i: usize| {
        for (b, chunk) in buf.chunks_mut(BLOCK).enumerate() {
            if chunk.len() >= 8 {
                tag(chunk, (i * size / BLOCK + b) as u64);
            }
        }
    };
    let check = |buf: &[u8], i: usize| {
        buf.chunks(BLOCK)
            .enumerate()
            .filter(|(b, c)| c.len() >= 8 && !tagged(c, (i * size / BLOCK + b) as u64))
            .count() as u64
    };
    let mut out = Vec::new();
    out.push(timed("multifile-write-perfile", n as u64, bytes, |lat| {
        parallel(n, args.threads, lat, |range, lat| {
            let mut buf = vec![0u8; size];
            for i in range {
                fill(&mut buf, i);
                let t = Instant::now();
                let fd = posix.open(&small_path(i), OpenFlags::CREATE_TRUNC, 0o644)?;
                posix.write(fd, &buf)?;
                posix.close(fd)?;
                lat.record(t.elapsed());
            }
            Ok(())
        })
    })?);
    let bad = std::sync::atomic::AtomicU64::new(0);
    out.push(timed("multifile-read-perfile", n as u64, bytes, |lat| {
        parallel(n, args.threads, lat, |range, lat| {
            let mut buf = vec![0u8; size];
            for i in range {
                let t = Instant::now();
                let fd: Fd = posix.open(&small_path(i), OpenFlags::READ, 0)?;
                let got = posix.read(fd, &mut buf)?;
                posix.close(fd)?;
                lat.record(t.elapsed());
                if got != size {
                    return Err(BenchError::Invalid(format!(
                        "short read of {}",
                        small_path(i)
                    )));
                }
                bad.fetch_add(check(&buf, i), std::sync::atomic::Ordering::Relaxed);
            }
            Ok(())
        })
    })?);
    // Touch every page of the destination first: the per-file loop reuses one warm 16 KiB
    // buffer, so the batch must not pay for faulting in a fresh one inside its timing.
    let mut data = vec![1u8; n * size];
    out.push(timed("multifile-read-batch", n as u64, bytes, |lat| {
        let t = Instant::now();
        let bnode = posix.batch_open("/small")?;
        let reqs = bnode.whole_files();
        let got = posix.batch_read(&bnode, &reqs, &mut data, args.threads)?;
        posix.batch_close(bnode)?;
        lat.record(t.elapsed());
        if got.iter().any(|&g| g != size) {
            return Err(BenchError::Invalid("a batched read came back short".into()));
        }
        Ok(())
    })?);
    // readdir order need not be name order: check each file's data by its name.
    let bnode = posix.batch_open("/small")?;
    for (k, f) in bnode.files.iter().enumerate() {
        let i: usize = std::str::from_utf8(&f.name[1..])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| BenchError::Invalid("unexpected file in /small".into()))?;
        bad.fetch_add(
            check(&data[k * size..(k + 1) * size], i),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    out.push(timed("multifile-write-batch", n as u64, bytes, |lat| {
        let t = Instant::now();
        let mut bnode = posix.batch_open("/small")?;
        let reqs: Vec<BatchRequest> = bnode.whole_files();
        posix.batch_write(&mut bnode, &reqs, &data, args.threads)?;
        posix.batch_close(bnode)?;
        lat.record(t.elapsed());
        Ok(())
    })?);
    posix.batch_close(bnode)?;
    let bad = bad.into_inner();
    if bad > 0 {
        return Err(BenchError::Verify(bad));
    }
    Ok(out)
}

/// The raw controller's runs made between the engine's read rounds, and their records.
struct RawRuns<'a> {
    args: &'a BenchArgs,
    backend: FileBackend,
    records: Vec<BenchRecord>,
}

impl RawRuns<'_> {
    /// Raw 4 KiB read runs of `pattern` (nothing with `--no-raw`): over the whole image, as
    /// `nvme-bench` reads, and for random reads also over the first `--file-mib` MiB, the
    /// footprint of the engine's file (a footprint that fits the CPU's cache is read faster:
    /// 2-17% on the GPU machine's hosts). Returns their IOPS and keeps their records, marked
    /// with `round`.
    fn run(
        &mut self,
        pattern: Pattern,
        round: usize,
    ) -> Result<Option<(f64, Option<f64>)>, BenchError> {
        if self.args.no_raw {
            return Ok(None);
        }
        let whole = self.one(pattern, round, 0)?;
        let span = match pattern {
            Pattern::Rand => Some(self.one(pattern, round, self.args.file_mib)?),
            Pattern::Seq => None,
        };
        Ok(Some((whole, span)))
    }

    fn one(&mut self, pattern: Pattern, round: usize, span_mib: u64) -> Result<f64, BenchError> {
        let mut record = raw_record(self.args, self.backend, pattern, span_mib)?;
        record
            .parameters
            .insert("round".into(), (round as u64).into());
        let iops = record.iops;
        self.records.push(record);
        Ok(iops)
    }
}

/// The raw controller's 4 KiB reads of `pattern` at the engine's parallelism (one thread, one
/// command in flight), through a controller of its own over the image (its first `span_mib` MiB;
/// 0: all of it).
fn raw_record(
    args: &BenchArgs,
    backend: FileBackend,
    pattern: Pattern,
    span_mib: u64,
) -> Result<BenchRecord, BenchError> {
    let raw = gpu_nvme::bench::BenchArgs {
        initiator: gpu_nvme::bench::Initiator::Cpu,
        threads: 1,
        block_size: BLOCK as u32,
        lba_size: BLOCK as u32,
        queues: 1,
        queue_depth: 64,
        inflight: 1,
        pattern,
        op: gpu_nvme::bench::Op::Read,
        null: false,
        verify: false,
        span_mib,
        duration: args.seconds,
        workers: args.controller_workers,
        gpu_data: gpu_nvme::bench::GpuData::Auto,
        load_kind: 0,
        slot_bytes: 0,
        block_threads: 128,
        defines: Vec::new(),
        json: args.json,
    };
    let factory =
        |b: &gpu_nvme::bench::BenchArgs, gpu: Option<&gpu_nvme::cuda::Gpu>, queues: u16| {
            gpu_nvme::bench::file_controller(&args.image, backend, b, gpu, queues)
        };
    let (mut record, _notes) = gpu_nvme::bench::run(&raw, "gpu-nvme", &factory)?;
    record
        .parameters
        .insert("image".into(), args.image.display().to_string().into());
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn about_one_read_in_sixteen_is_checked_and_every_block_gets_its_turn() {
        let n = 1 << 16;
        let hits = (0..n).filter(|&op| checked(op)).count() as u64;
        assert!(
            (n / CHECK_ONE_IN / 2..n / CHECK_ONE_IN * 2).contains(&hits),
            "{hits}"
        );
        // Sequential passes over 64 blocks: every block is checked in some pass.
        let mut seen = [false; 64];
        for op in (0..n).filter(|&op| checked(op)) {
            seen[(op % 64) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn shares_cover_the_range_without_overlap() {
        assert_eq!(shares(10, 3), vec![0..4, 4..8, 8..10]);
        assert_eq!(shares(2, 4), vec![0..1, 1..2]);
        assert_eq!(shares(0, 2), Vec::<std::ops::Range<usize>>::new());
    }

    #[test]
    fn tags_identify_their_block() {
        let mut b = vec![0u8; BLOCK];
        tag(&mut b, 42);
        assert!(tagged(&b, 42));
        assert!(!tagged(&b, 43));
    }
}
