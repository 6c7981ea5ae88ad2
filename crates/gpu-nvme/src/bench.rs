//! The block I/O benchmark behind `nvme-bench` (and every controller's own bench command):
//! CPU threads or GPU threads drive gpu-nvme's queues against any [`Controller`], in the spirit
//! of BaM's nvm-block-bench, and the run becomes one common bench record.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::controller::{
    Controller, ControllerError, FileBackend, FileController, FileControllerConfig,
};
use crate::cuda::{CompileOptions, DeviceBuffer, Gpu, KernelArg, LaunchDims, PinnedBuffer};
use crate::device::{DeviceConfig, NvmeDevice};
use crate::kernels::{NVME_BENCH, NVME_HEADERS};
use clap::ValueEnum;
use common::bench::{BenchRecord, Engine, LatencyRecorder, Machine};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Initiator {
    Cpu,
    Gpu,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Pattern {
    Rand,
    Seq,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Op {
    Read,
    Write,
    Mixed,
}

/// How GPU-initiated transfers reach GPU memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GpuData {
    /// Bounce below `DIRECT_MIN_BYTES`, direct from there on (whichever measured faster).
    Auto,
    /// The controller fills a bounce slot in host memory and the GPU pulls it.
    Bounce,
    /// The PRPs name GPU memory and the controller uses the copy engines.
    Direct,
}

/// Errors of a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// an argument is out of range
    #[error("{0}")]
    Invalid(String),
    /// the controller could not be built or started
    #[error(transparent)]
    Controller(#[from] ControllerError),
    /// the host driver failed
    #[error(transparent)]
    Device(#[from] crate::device::DeviceError),
    /// the GPU runtime failed
    #[error(transparent)]
    Cuda(#[from] crate::cuda::CudaError),
    /// the namespace file could not be prepared
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// the record could not be built
    #[error(transparent)]
    Record(#[from] common::bench::BenchError),
}

macro_rules! check {
    ($cond:expr, $($msg:tt)+) => {
        if !($cond) {
            return Err(BenchError::Invalid(format!($($msg)+)));
        }
    };
}

/// Builds the controller under test: `(args, GPU if the initiator is the GPU, I/O queues the
/// run needs)`.
pub type ControllerFactory<'a> =
    &'a dyn Fn(&BenchArgs, Option<&Gpu>, u16) -> Result<Arc<dyn Controller>, BenchError>;

/// Block I/O benchmark over gpu-nvme queue pairs.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Who submits the commands.
    #[arg(long, value_enum, default_value = "cpu")]
    pub initiator: Initiator,
    /// Submitting threads: host threads (cpu) or GPU threads, a multiple of 32 (gpu).
    #[arg(long, default_value_t = 4)]
    pub threads: u64,
    /// Bytes per command (a multiple of the LBA size).
    #[arg(long, default_value_t = 4096)]
    pub block_size: u32,
    /// LBA size of the namespace (512 or 4096).
    #[arg(long, default_value_t = 512)]
    pub lba_size: u32,
    /// I/O queue pairs.
    #[arg(long, default_value_t = 4)]
    pub queues: u16,
    /// Entries per I/O queue.
    #[arg(long, default_value_t = 256)]
    pub queue_depth: u32,
    /// Commands each host thread keeps in flight (cpu).
    #[arg(long, default_value_t = 16)]
    pub inflight: u32,
    /// Access pattern.
    #[arg(long, value_enum, default_value = "rand")]
    pub pattern: Pattern,
    /// Operation.
    #[arg(long, value_enum, default_value = "read")]
    pub op: Op,
    /// Control path only: the controller completes commands without moving data.
    #[arg(long)]
    pub null: bool,
    /// Check every byte read against the pattern (and write the pattern).
    #[arg(long)]
    pub verify: bool,
    /// Accesses stay within the first this many MiB of the namespace (0: all of it): a
    /// footprint like that of the file or data set a file system under test reads.
    #[arg(long, default_value_t = 0)]
    pub span_mib: u64,
    /// Seconds to run.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Controller worker threads (polling SQs).
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// GPU-initiated data path.
    #[arg(long, value_enum, default_value = "auto")]
    pub gpu_data: GpuData,
    /// Bytes of each GPU queue entry's bounce slot (a multiple of 512); 0 picks the smallest
    /// that holds a transfer: slots packed into pages for transfers of up to 4 KiB that divide
    /// a page, so that more of them share a TLB entry and the host touches fewer pages.
    #[arg(long, default_value_t = 0)]
    pub slot_bytes: u32,
    /// GPU load used to pull bounce slots: 0 ld.cv, 1 ld.cg, 2 plain, 3 ld.global.nc.
    #[arg(long, default_value_t = 0)]
    pub load_kind: u32,
    /// GPU threads per block.
    #[arg(long, default_value_t = 128)]
    pub block_threads: u32,
    /// Preprocessor definitions for the CUDA sources (NAME=VALUE), e.g. NVME_FULL_FENCES=1.
    #[arg(long = "define")]
    pub defines: Vec<String>,
    /// Emit the common JSON record instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// The LBAs a run addresses: the namespace's `capacity`, or its first `--span-mib` MiB; at
/// least one command's `blocks_per_io`.
fn span_lbas(args: &BenchArgs, capacity: u64, blocks_per_io: u32) -> Result<u64, BenchError> {
    let lbas = match args.span_mib {
        0 => capacity,
        mib => capacity.min((mib << 20) / u64::from(args.lba_size.max(1))),
    };
    check!(
        lbas >= u64::from(blocks_per_io),
        "the namespace (or --span-mib) is smaller than one block"
    );
    Ok(lbas)
}

/// The file-backed controller over `path` that a run of `args` needs (`queues` I/O queues,
/// `args.workers` threads, the null data path with `--null`, GPU copies with `gpu`): what
/// `nvme-bench --controller file:PATH` measures.
pub fn file_controller(
    path: &std::path::Path,
    backend: FileBackend,
    args: &BenchArgs,
    gpu: Option<&Gpu>,
    queues: u16,
) -> Result<Arc<dyn Controller>, BenchError> {
    let mut config = FileControllerConfig::new(path);
    config.lba_size = args.lba_size;
    config.workers = args.workers;
    config.backend = backend;
    config.null_data = args.null;
    config.max_io_queues = queues;
    config.gpu = gpu.cloned();
    Ok(FileController::new(config)?)
}

/// Transfer size from which the copy engines beat the GPU pulling bounce slots (see
/// bench/results/: at 4 KiB the pull path is several times faster, at 64 KiB the copy engines).
const DIRECT_MIN_BYTES: u32 = 32 << 10;

/// How long a host thread waits for one completion before the run fails.
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(30);

impl GpuData {
    /// The data path a transfer of `bytes` takes.
    fn resolve(self, bytes: u32) -> GpuData {
        match self {
            GpuData::Auto if bytes >= DIRECT_MIN_BYTES => GpuData::Direct,
            GpuData::Auto => GpuData::Bounce,
            other => other,
        }
    }
}

/// The bounce slot size of GPU queues for `block_size`-byte transfers: `requested` when not 0,
/// else the block size itself where it divides a 4 KiB page (a transfer then never crosses a
/// page), else whole pages, plus a page for the PRP list of a transfer over two pages.
fn gpu_slot_bytes(block_size: u32, requested: u32) -> u32 {
    if requested != 0 {
        requested
    } else if block_size <= 4096 && 4096 % block_size == 0 {
        block_size
    } else {
        block_size.next_multiple_of(4096) + if block_size > 8192 { 4096 } else { 0 }
    }
}

/// The pattern every benchmark file holds (same function as `bench_pattern` in nvme_bench.cu).
fn pattern_word(offset: u64) -> u64 {
    let x = offset.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^ (x >> 29) ^ 0x5_DEEC_E66D
}

/// Fills `buf` with the check pattern of the namespace bytes starting at `offset`.
pub fn fill_pattern(buf: &mut [u8], offset: u64) {
    for (i, w) in buf.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&pattern_word(offset + i as u64 * 8).to_le_bytes());
    }
}

fn matches_pattern(buf: &[u8], offset: u64) -> bool {
    buf.chunks_exact(8)
        .enumerate()
        .all(|(i, w)| w == pattern_word(offset + i as u64 * 8).to_le_bytes())
}

/// Creates or grows a namespace file to `mib` MiB of the check pattern, in parallel.
pub fn create_namespace(path: &std::path::Path, mib: u64) -> Result<(), BenchError> {
    use std::os::unix::fs::FileExt;
    let len = mib << 20;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)?;
    if file.metadata()?.len() >= len {
        return Ok(());
    }
    file.set_len(len)?;
    let chunk = 4u64 << 20;
    let next = AtomicU64::new(0);
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(16);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| -> Result<(), BenchError> {
                let mut buf = vec![0u8; chunk as usize];
                loop {
                    let off = next.fetch_add(chunk, Ordering::Relaxed);
                    if off >= len {
                        return Ok(());
                    }
                    fill_pattern(&mut buf, off);
                    file.write_all_at(&buf, off)?;
                }
            });
        }
    });
    Ok(())
}

struct Outcome {
    ops: u64,
    bytes: u64,
    errors: u64,
    verify_failures: u64,
    elapsed: Duration,
    latency: LatencyRecorder,
    notes: Vec<String>,
    gpu_name: Option<String>,
}

fn run_cpu(args: &BenchArgs, factory: ControllerFactory<'_>) -> Result<Outcome, BenchError> {
    check!(
        args.threads > 0 && args.queues > 0,
        "--threads and --queues must be positive"
    );
    let ctrl = factory(args, None, args.queues + 1)?;
    let config = DeviceConfig {
        io_queues: args.queues,
        queue_depth: args.queue_depth,
        admin_depth: 32,
        slot_bytes: args.block_size.next_multiple_of(4096),
    };
    let dev = NvmeDevice::open(ctrl, config)?;
    let blocks_per_io = args.block_size / args.lba_size;
    let units = span_lbas(args, dev.geometry().capacity_blocks(), blocks_per_io)?
        / u64::from(blocks_per_io);
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let results: Vec<Result<(u64, u64, u64, LatencyRecorder), BenchError>> =
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..args.threads)
                .map(|t| {
                    let (dev, stop) = (&dev, &stop);
                    s.spawn(move || cpu_thread(args, dev, t, units, blocks_per_io, stop))
                })
                .collect();
            std::thread::sleep(Duration::from_secs_f64(args.duration));
            stop.store(true, Ordering::Release);
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(BenchError::Invalid("a benchmark thread panicked".into()))
                    })
                })
                .collect()
        });
    let elapsed = start.elapsed();
    let mut out = Outcome {
        ops: 0,
        bytes: 0,
        errors: 0,
        verify_failures: 0,
        elapsed,
        latency: LatencyRecorder::new(),
        notes: Vec::new(),
        gpu_name: None,
    };
    for r in results {
        let (ops, errors, bad, lat) = r?;
        out.ops += ops;
        out.errors += errors;
        out.verify_failures += bad;
        out.latency.merge(&lat)?;
    }
    out.bytes = if args.null {
        0
    } else {
        out.ops * u64::from(args.block_size)
    };
    let per_poller = out.ops as f64 / elapsed.as_secs_f64() / args.workers as f64;
    out.notes.push(format!(
        "{:.2} M commands/s per controller polling thread",
        per_poller / 1e6
    ));
    Ok(out)
}

fn cpu_thread(
    args: &BenchArgs,
    dev: &NvmeDevice,
    thread: u64,
    units: u64,
    blocks_per_io: u32,
    stop: &AtomicBool,
) -> Result<(u64, u64, u64, LatencyRecorder), BenchError> {
    let q = dev
        .host_queue(thread as usize % dev.host_queues())
        .ok_or_else(|| BenchError::Invalid("no host queue".into()))?;
    let lba_size = u64::from(args.lba_size);
    let bytes = args.block_size as usize;
    let mut rng = 0x2545_F491_4F6C_DD1Du64 ^ (thread + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let next = |rng: &mut u64| {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        *rng
    };
    let mut seq = thread * units / args.threads.max(1);
    let mut inflight = std::collections::VecDeque::new();
    let mut lat = LatencyRecorder::new();
    let (mut ops, mut errors, mut bad) = (0u64, 0u64, 0u64);
    let window = args.inflight.min(q.depth() / 2).max(1) as usize;
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        while !stopping && inflight.len() < window {
            let unit = match args.pattern {
                Pattern::Rand => next(&mut rng) % units,
                Pattern::Seq => {
                    seq = (seq + 1) % units;
                    seq
                }
            };
            let lba = unit * u64::from(blocks_per_io);
            let write = match args.op {
                Op::Read => false,
                Op::Write => true,
                Op::Mixed => next(&mut rng) & 1 == 1,
            };
            let t = q.submit(write, lba, blocks_per_io, args.null, |slot| {
                if args.verify {
                    fill_pattern(slot, lba * lba_size);
                }
            })?;
            inflight.push_back((t, lba, write, Instant::now()));
        }
        let Some(&(t, lba, write, t0)) = inflight.front() else {
            break;
        };
        // The host driver's own wait, so that a file system over the driver and this raw
        // benchmark wait for a command alike.
        let cqe = q
            .wait(t, COMPLETION_TIMEOUT)
            .map_err(crate::device::DeviceError::from)?;
        inflight.pop_front();
        lat.record(t0.elapsed());
        if cqe.status().is_success() {
            ops += 1;
            if args.verify
                && !write
                && !args.null
                && !matches_pattern(q.slot_data(t, bytes), lba * lba_size)
            {
                bad += 1;
            }
        } else {
            errors += 1;
        }
        q.release(t);
    }
    Ok((ops, errors, bad, lat))
}

/// Kernel parameters; mirrors `struct bench_params` in `cuda/nvme_bench.cu`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct BenchParams {
    queues: u64,
    data: u64,
    counters: u64,
    latency_hist: u64,
    stop_flag: u64,
    lba_count: u64,
    seed: u64,
    max_ops_per_thread: u64,
    num_queues: u32,
    blocks_per_io: u32,
    op: u32,
    pattern: u32,
    data_mode: u32,
    verify: u32,
    load_kind: u32,
    _pad: u32,
}

const _: () = assert!(size_of::<BenchParams>() == 96);
const LAT_BUCKETS: usize = 8192;

impl BenchParams {
    fn to_bytes(self) -> Vec<u8> {
        let mut v = Vec::with_capacity(96);
        for w in [
            self.queues,
            self.data,
            self.counters,
            self.latency_hist,
            self.stop_flag,
            self.lba_count,
            self.seed,
            self.max_ops_per_thread,
        ] {
            v.extend_from_slice(&w.to_le_bytes());
        }
        for w in [
            self.num_queues,
            self.blocks_per_io,
            self.op,
            self.pattern,
            self.data_mode,
            self.verify,
            self.load_kind,
            self._pad,
        ] {
            v.extend_from_slice(&w.to_le_bytes());
        }
        v
    }
}

fn run_gpu(args: &BenchArgs, factory: ControllerFactory<'_>) -> Result<Outcome, BenchError> {
    check!(
        args.threads > 0 && args.threads.is_multiple_of(32),
        "--threads must be a positive multiple of 32 for the GPU"
    );
    check!(
        args.block_threads.is_multiple_of(32) && args.block_threads > 0,
        "--block-threads must be a multiple of 32"
    );
    let gpu = Gpu::open(0)?;
    let ctrl = factory(args, Some(&gpu), args.queues + 2)?;
    let dev = NvmeDevice::open(
        ctrl,
        DeviceConfig {
            io_queues: 1,
            queue_depth: 64,
            admin_depth: 32,
            slot_bytes: 64 << 10,
        },
    )?;
    let blocks_per_io = args.block_size / args.lba_size;
    let slot_bytes = gpu_slot_bytes(args.block_size, args.slot_bytes);
    check!(
        slot_bytes >= args.block_size + if args.block_size > 8192 { 4096 } else { 0 },
        "--slot-bytes {slot_bytes} cannot hold a {}-byte transfer (and its PRP list past 8 KiB)",
        args.block_size
    );
    let lbas = span_lbas(args, dev.geometry().capacity_blocks(), blocks_per_io)?;
    let queues = dev.create_gpu_queues(&gpu, args.queues, args.queue_depth, slot_bytes)?;
    let options = CompileOptions {
        extra: args.defines.iter().map(|d| format!("-D{d}")).collect(),
        ..CompileOptions::default()
    };
    let module = gpu.load_module(&NVME_BENCH, NVME_HEADERS, &options)?;
    let kernel = module.function("nvme_bench")?;
    let data_bytes = (args.threads * u64::from(args.block_size)) as usize;
    let data = DeviceBuffer::new(&gpu, data_bytes)?;
    let gpu_data = args.gpu_data.resolve(args.block_size);
    if gpu_data == GpuData::Direct {
        dev.register_gpu_memory(&data)?;
    }
    let mut counters = DeviceBuffer::new(&gpu, 48)?;
    counters.zero()?;
    let mut hist = DeviceBuffer::new(&gpu, LAT_BUCKETS * 8)?;
    hist.zero()?;
    let stop = PinnedBuffer::new(&gpu, 4096)?;
    let params = BenchParams {
        queues: queues.table_ptr(),
        data: data.device_ptr(),
        counters: counters.device_ptr(),
        latency_hist: hist.device_ptr(),
        stop_flag: stop.device_ptr(),
        lba_count: lbas,
        seed: 0x1234_5678,
        max_ops_per_thread: 0,
        num_queues: u32::from(args.queues),
        blocks_per_io,
        op: match args.op {
            Op::Read => 0,
            Op::Write => 1,
            Op::Mixed => 2,
        },
        pattern: u32::from(args.pattern == Pattern::Seq),
        data_mode: if args.null {
            0
        } else {
            match gpu_data {
                GpuData::Direct => 2,
                GpuData::Bounce | GpuData::Auto => 1,
            }
        },
        verify: u32::from(args.verify),
        load_kind: args.load_kind,
        _pad: 0,
    };
    let dims = LaunchDims::linear(
        (args.threads / u64::from(args.block_threads)).max(1) as u32,
        args.block_threads.min(args.threads as u32),
    );
    let mut param_block = DeviceBuffer::new(&gpu, size_of::<BenchParams>())?;
    param_block.copy_from_host(0, &params.to_bytes())?;
    let stream = gpu.new_stream()?;
    let start = Instant::now();
    // SAFETY: the parameter block matches `bench_params` (size asserted on both sides), and
    // every buffer it names stays alive until the kernel has finished (synchronize below).
    unsafe { stream.launch(&kernel, dims, &[KernelArg::U64(param_block.device_ptr())])? };
    std::thread::sleep(Duration::from_secs_f64(args.duration));
    // SAFETY: the flag is a live, aligned u32 in mapped memory; the kernel only reads it.
    unsafe { std::ptr::write_volatile(stop.as_mut_ptr().cast::<u32>(), 1) };
    stream.synchronize()?;
    let elapsed = start.elapsed();
    let mut c = [0u8; 48];
    counters.copy_to_host(0, &mut c)?;
    let word = |i: usize| u64::from_le_bytes(c[i * 8..i * 8 + 8].try_into().unwrap_or_default());
    let mut h = vec![0u8; LAT_BUCKETS * 8];
    hist.copy_to_host(0, &mut h)?;
    let mut latency = LatencyRecorder::new();
    for (us, n) in h.chunks_exact(8).enumerate() {
        let n = u64::from_le_bytes(n.try_into().unwrap_or_default());
        if n > 0 {
            latency.record_ns_n(us as u64 * 1000 + 500, n);
        }
    }
    let mut notes = vec!["latency is per warp of 32 commands, 1 us buckets".to_string()];
    let phases = word(4) + word(5);
    if phases > 0 {
        notes.push(format!(
            "warps spent {:.0}% of their time submitting, {:.0}% waiting",
            word(4) as f64 * 100.0 / phases as f64,
            word(5) as f64 * 100.0 / phases as f64
        ));
    }
    let stats = dev.controller().stats();
    if stats.batches > 0 && stats.busy_ns > 0 {
        let threads = |ns: u64| ns as f64 / 1e9 / elapsed.as_secs_f64();
        notes.push(format!(
            "controller: {:.1} commands per fetched batch, {:.1} worker threads busy on average \
             ({:.1} of them waiting for copies into GPU memory, {:.1} posting completions)",
            stats.commands as f64 / stats.batches as f64,
            threads(stats.busy_ns),
            threads(stats.copy_wait_ns),
            threads(stats.post_ns)
        ));
        if stats.dispatch_ns > 0 || stats.cq_full > 0 {
            notes.push(format!(
                "dispatchers: {:.2} threads busy on average; completions that found a full CQ: {}",
                threads(stats.dispatch_ns),
                stats.cq_full
            ));
        }
    }
    if !args.null {
        let bw = h2d_bandwidth(&gpu)?;
        let achieved = (word(3) as f64) / elapsed.as_secs_f64() / 1e9;
        notes.push(format!(
            "pinned host-to-device copy bandwidth in this run: {bw:.1} GB/s; achieved {:.0}% of it",
            achieved / bw * 100.0
        ));
    }
    dev.delete_gpu_queues(queues)?;
    Ok(Outcome {
        ops: word(0),
        bytes: if args.null { 0 } else { word(3) },
        errors: word(1),
        verify_failures: word(2),
        elapsed,
        latency,
        notes,
        gpu_name: Some(gpu.name().to_string()),
    })
}

/// Pinned host-to-device copy bandwidth with large copies (the ceiling for data into GPU memory).
fn h2d_bandwidth(gpu: &Gpu) -> Result<f64, BenchError> {
    let len = 256 << 20;
    let src = PinnedBuffer::new(gpu, len)?;
    let dst = DeviceBuffer::new(gpu, len)?;
    let stream = gpu.stream();
    let mut best = 0f64;
    for _ in 0..5 {
        let t = Instant::now();
        // SAFETY: both buffers hold `len` bytes and live until the synchronize below.
        unsafe { stream.copy_htod_async(dst.device_ptr(), src.as_ptr(), len)? };
        stream.synchronize()?;
        best = best.max(len as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    Ok(best)
}

/// Logs to stderr, filtered by `RUST_LOG` (every benchmark binary starts with this).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
}

/// Runs the benchmark against the controller `factory` builds and returns its record.
/// Commands that failed or reads that did not match the pattern make the run an error after
/// the record is built, so callers can still print it.
pub fn run(
    args: &BenchArgs,
    system: &str,
    factory: ControllerFactory<'_>,
) -> Result<(BenchRecord, Vec<String>), BenchError> {
    check!(
        args.block_size > 0 && args.block_size.is_multiple_of(args.lba_size),
        "--block-size must be a multiple of --lba-size"
    );
    check!(
        args.duration.is_finite() && args.duration > 0.0,
        "--duration must be positive"
    );
    let outcome = match args.initiator {
        Initiator::Cpu => run_cpu(args, factory)?,
        Initiator::Gpu => run_gpu(args, factory)?,
    };
    let mut machine = Machine::detect();
    if let Some(name) = &outcome.gpu_name {
        machine = machine.with_gpu(name.clone());
    }
    let workload = format!(
        "{}{}-{}",
        match args.pattern {
            Pattern::Rand => "rand",
            Pattern::Seq => "seq",
        },
        match args.op {
            Op::Read => "read",
            Op::Write => "write",
            Op::Mixed => "rw",
        },
        if args.null {
            "null".to_string()
        } else {
            format!("{}b", args.block_size)
        }
    );
    let engine = if args.initiator == Initiator::Gpu {
        Engine::Gpu
    } else {
        Engine::Cpu
    };
    let mut builder = BenchRecord::new(system, workload, engine)
        .param("initiator", format!("{:?}", args.initiator).to_lowercase())
        .param("threads", args.threads)
        .param("block_size", args.block_size)
        .param("lba_size", args.lba_size)
        .param("queues", args.queues)
        .param("queue_depth", args.queue_depth)
        .param("workers", args.workers as u64)
        .param("null", args.null)
        .param("verify", args.verify)
        .param("span_mib", args.span_mib)
        .param(
            "gpu_data",
            format!("{:?}", args.gpu_data.resolve(args.block_size)).to_lowercase(),
        )
        .param("defines", args.defines.join(" "))
        .ops(outcome.ops)
        .bytes(outcome.bytes)
        .duration(outcome.elapsed)
        .machine(machine)
        .extra("errors", outcome.errors)
        .extra("verify_failures", outcome.verify_failures);
    if outcome.latency.samples() > 0 {
        builder = builder.latency(&outcome.latency);
    }
    if !outcome.notes.is_empty() {
        builder = builder.notes(outcome.notes.join("; "));
    }
    let record = builder.finish()?;
    Ok((record, outcome.notes))
}

/// Whether a finished run saw errors: `(failed commands, reads that did not match)`.
pub fn failures(record: &BenchRecord) -> (u64, u64) {
    let get = |k: &str| {
        record
            .extra
            .get(k)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    (get("errors"), get("verify_failures"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_slots_pack_small_transfers_into_pages_and_honour_a_request() {
        assert_eq!(gpu_slot_bytes(512, 0), 512);
        assert_eq!(gpu_slot_bytes(4096, 0), 4096);
        assert_eq!(gpu_slot_bytes(1536, 0), 4096, "would cross a page");
        assert_eq!(gpu_slot_bytes(8192, 0), 8192);
        assert_eq!(gpu_slot_bytes(16384, 0), 16384 + 4096, "PRP list page");
        assert_eq!(gpu_slot_bytes(512, 4096), 4096);
        for b in [512u32, 1024, 2048, 4096] {
            let s = gpu_slot_bytes(b, 0);
            // Slots of a page-aligned staging region never straddle a page.
            assert!((0..64).all(|i| (i * s) / 4096 == (i * s + b - 1) / 4096));
        }
    }
}
