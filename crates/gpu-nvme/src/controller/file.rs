//! `FileController`: a real NVMe controller whose namespace is a file or a block device.
//!
//! Worker threads poll the SQs assigned to them (SQ `y` belongs to worker `y % workers`),
//! fetch every new entry at each doorbell, execute the batch against the backing store, wait
//! for the batch's copies into GPU memory, and post the completions. The store is reached with
//! io_uring (one ring a worker, the whole batch in one submission), with pread/pwrite
//! (optionally O_DIRECT), or through a shared mapping (fastest for RAM-backed files).
//! A worker that finds no command spins, then yields, then sleeps on its bell in the registers
//! ([`common::bell`]), which the host queues it serves ring after each doorbell write. GPU
//! threads cannot ring it, so when a GPU may write the doorbells the worker sleeps 20 us at a
//! time instead. (Those slices cost an idle controller its share of timer wake-ups: an idle
//! `peakfs-server` used 18 % of a core on the 2-core box and 9.6 % on a 16-core host, 1.2 %
//! on both with the bells, `bench/results/2026-11-26-peakfs-doorbell-bell`.)

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crossbeam_utils::{Backoff, CachePadded};

use crate::cuda::Gpu;
use crate::memory::DmaMap;
use crate::queue::ControllerQueue;
use crate::spec::{IdentifyController, LbaFormat, NamespaceGeometry, Status, SubmissionEntry};

use super::admin::{AdminConfig, run_admin_queue};
use super::data::{DataPath, GpuCopier};
use super::io::{Prepared, dsm_ranges, prepare};
use super::threads::{IdleBackoff, Mailbox, ThreadSet};
use super::{
    BELL_SLEEP_LIMIT, Controller, ControllerError, ControllerStats, Registers, StatsCounters,
};

/// How workers reach the backing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileBackend {
    /// pread/pwrite system calls, one per segment.
    Psync,
    /// io_uring: each fetched batch goes down in one submission.
    #[default]
    Uring,
    /// A shared mapping of the file: reads and writes are memory copies.
    Mmap,
}

impl std::str::FromStr for FileBackend {
    type Err = ControllerError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "psync" => Ok(Self::Psync),
            "uring" | "io_uring" => Ok(Self::Uring),
            "mmap" => Ok(Self::Mmap),
            _ => Err(ControllerError::Config(format!(
                "unknown file backend {s:?} (psync, uring, mmap)"
            ))),
        }
    }
}

/// Settings of a [`FileController`].
#[derive(Debug, Clone)]
pub struct FileControllerConfig {
    /// The namespace: a regular file or a block device.
    pub path: PathBuf,
    /// LBA size, 512 or 4096.
    pub lba_size: u32,
    /// Namespace size in blocks; `None` uses the whole file.
    pub capacity_blocks: Option<u64>,
    /// Worker threads polling SQs.
    pub workers: usize,
    /// I/O queues the controller supports.
    pub max_io_queues: u16,
    /// How the file is reached.
    pub backend: FileBackend,
    /// Open with O_DIRECT (psync and uring backends).
    pub direct: bool,
    /// Control path only: commands are validated and completed, no data moves.
    pub null_data: bool,
    /// Most SQEs fetched at one doorbell.
    pub max_batch: usize,
    /// GPU whose threads ring the doorbells and whose memory PRPs may name.
    pub gpu: Option<Gpu>,
    /// How a worker with no command to serve backs off. Once its spins and yields are spent it
    /// sleeps until a host queue it serves rings its bell after a doorbell write; with `gpu`
    /// set (GPU threads write doorbells and cannot ring) it sleeps 20 us at a time instead.
    pub idle: IdleBackoff,
    /// I/O SQs served inline ([`Controller::serve_inline`]): the host thread that waits for a
    /// command runs it, as an emulator without a thread of its own per queue runs a doorbell
    /// write's commands on the vCPU that wrote it. For a host thread that would only spin
    /// until a controller thread, on another core, has done the copy. Needs the psync or mmap
    /// backend (an io_uring ring is a worker's own).
    pub inline_queues: Vec<u16>,
}

impl FileControllerConfig {
    /// Defaults for `path`: 4 KiB LBAs, whole file, 2 workers, 64 queues, io_uring.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            lba_size: 4096,
            capacity_blocks: None,
            workers: 2,
            max_io_queues: 64,
            backend: FileBackend::default(),
            direct: false,
            null_data: false,
            max_batch: 1024,
            gpu: None,
            idle: IdleBackoff::default(),
            inline_queues: Vec::new(),
        }
    }
}

/// A worker's mailbox: queues to take over and queues to drop.
#[derive(Debug, Default)]
struct WorkerSlot {
    /// This worker's counters, on lines of their own (shared counters would bounce between
    /// cores on every command).
    stats: CachePadded<StatsCounters>,
    /// Queues to take over and to drop.
    inbox: Mailbox<ControllerQueue>,
}

/// An I/O queue served inline (see [`FileControllerConfig::inline_queues`]).
#[derive(Debug)]
struct InlineQueue {
    sqid: u16,
    /// Taken with `try_lock` only: a thread finding it held waits for its completion instead.
    state: Mutex<InlineState>,
    stats: CachePadded<StatsCounters>,
}

/// The queue pair (once attached) and the batch buffers of an inline queue.
#[derive(Debug, Default)]
struct InlineState {
    queue: Option<ControllerQueue>,
    batch: Vec<SubmissionEntry>,
    results: Vec<(u16, Status)>,
}

/// A controller over a file or block device. See the module docs.
#[derive(Debug)]
pub struct FileController {
    config: FileControllerConfig,
    store: Arc<Store>,
    geometry: NamespaceGeometry,
    registers: Registers,
    dma: DmaMap,
    workers: Vec<WorkerSlot>,
    inline: Vec<InlineQueue>,
    threads: ThreadSet,
}

impl FileController {
    /// Opens the namespace and allocates the registers. Threads start with [`Controller::start`].
    pub fn new(config: FileControllerConfig) -> Result<Arc<Self>, ControllerError> {
        if config.workers == 0 || config.workers > 1024 {
            return Err(ControllerError::Config(format!(
                "workers must be 1..=1024, got {}",
                config.workers
            )));
        }
        if config.max_batch == 0 {
            return Err(ControllerError::Config(
                "max_batch must be at least 1".into(),
            ));
        }
        if !config.inline_queues.is_empty() && config.backend == FileBackend::Uring {
            return Err(ControllerError::Config(
                "inline queues need the psync or mmap backend".into(),
            ));
        }
        if let Some(q) = config
            .inline_queues
            .iter()
            .find(|&&q| q == 0 || q > config.max_io_queues)
        {
            return Err(ControllerError::Config(format!(
                "inline queue {q} is not an I/O queue (1..={})",
                config.max_io_queues
            )));
        }
        let ns_err = |reason: String| ControllerError::Namespace {
            path: config.path.display().to_string(),
            reason,
        };
        let store = Store::open(&config).map_err(|e| ns_err(e.to_string()))?;
        let file_blocks = store.len / u64::from(config.lba_size);
        let blocks = config.capacity_blocks.unwrap_or(file_blocks);
        if blocks == 0 || blocks > file_blocks {
            return Err(ns_err(format!(
                "{} bytes hold {file_blocks} blocks of {} bytes; {blocks} requested",
                store.len, config.lba_size
            )));
        }
        let geometry = LbaFormat::from_block_size(config.lba_size)
            .and_then(|f| NamespaceGeometry::new(f, blocks))
            .map_err(|e| ns_err(e.to_string()))?;
        // Worker `y mod workers` serves SQ `y` (`worker_of`); each sleeps on its own bell.
        let registers = Registers::new(config.max_io_queues, config.gpu.as_ref())?
            .with_io_bells(config.workers);
        let workers = (0..config.workers).map(|_| WorkerSlot::default()).collect();
        let inline = config
            .inline_queues
            .iter()
            .map(|&sqid| InlineQueue {
                sqid,
                state: Mutex::default(),
                stats: CachePadded::default(),
            })
            .collect();
        Ok(Arc::new(Self {
            store: Arc::new(store),
            geometry,
            registers,
            dma: DmaMap::new(),
            workers,
            inline,
            threads: ThreadSet::default(),
            config,
        }))
    }

    fn inline_queue(&self, sqid: u16) -> Option<&InlineQueue> {
        self.inline.iter().find(|q| q.sqid == sqid)
    }

    fn worker_of(&self, sqid: u16) -> &WorkerSlot {
        &self.workers[usize::from(sqid) % self.workers.len()]
    }

    /// Starts the admin thread and the workers.
    fn spawn(this: &Arc<Self>, admin: AdminConfig) -> Result<(), ControllerError> {
        this.threads.begin()?;
        let ctrl = Arc::clone(this);
        this.threads.spawn("nvme-admin".into(), move || {
            if let Err(e) = run_admin_queue(ctrl.as_ref(), admin, ctrl.threads.stop_flag()) {
                tracing::error!("admin queue stopped: {e}");
            }
        })?;
        for index in 0..this.workers.len() {
            let ctrl = Arc::clone(this);
            this.threads
                .spawn(format!("nvme-worker-{index}"), move || {
                    ctrl.run_worker(index)
                })?;
        }
        Ok(())
    }

    fn run_worker(&self, index: usize) {
        let slot = &self.workers[index];
        let copier = match &self.config.gpu {
            Some(gpu) => match GpuCopier::new(gpu) {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::error!("worker {index}: no GPU copier: {e}");
                    None
                }
            },
            None => None,
        };
        let mut path = DataPath::new(&self.dma, copier);
        let mut exec = Executor::new(&self.store, &self.config, self.geometry);
        let mut queues: Vec<ControllerQueue> = Vec::new();
        let mut batch: Vec<SubmissionEntry> = Vec::with_capacity(self.config.max_batch);
        let mut results: Vec<(u16, Status)> = Vec::with_capacity(self.config.max_batch);
        let mut idle = 0u32;
        while !self.threads.stopping() {
            slot.inbox.apply(&mut queues, ControllerQueue::sqid);
            let mut did = 0;
            for q in &mut queues {
                let mut work = Batch {
                    queue: q,
                    batch: &mut batch,
                    results: &mut results,
                    stats: &slot.stats,
                };
                match self.serve_batch(&mut work, &mut path, &mut exec) {
                    Some(n) => did += n,
                    None => return,
                }
            }
            idle = if did > 0 {
                0
            } else if self.config.gpu.is_none() && self.config.idle.is_spent(idle) {
                self.registers.io_bell(index).sleep(
                    || {
                        !self.threads.stopping()
                            && !slot.inbox.has_mail()
                            && queues.iter().all(|q| q.pending() == 0)
                    },
                    BELL_SLEEP_LIMIT,
                );
                idle
            } else {
                self.config.idle.step(idle)
            };
        }
    }
}

/// One queue's turn: the queue and the buffers and counters of whoever serves it.
struct Batch<'q> {
    queue: &'q mut ControllerQueue,
    batch: &'q mut Vec<SubmissionEntry>,
    results: &'q mut Vec<(u16, Status)>,
    stats: &'q StatsCounters,
}

impl FileController {
    /// Fetches what `work.queue` holds, runs it and posts the completions; returns how many
    /// commands ran, or `None` if the controller stopped while a completion waited for room.
    fn serve_batch(
        &self,
        work: &mut Batch<'_>,
        path: &mut DataPath<'_>,
        exec: &mut Executor<'_>,
    ) -> Option<usize> {
        work.batch.clear();
        let n = work.queue.fetch(work.batch, self.config.max_batch);
        if n == 0 {
            return Some(0);
        }
        let began = std::time::Instant::now();
        work.results.clear();
        path.refresh(); // one load: picks up buffers registered since the last batch
        exec.run_batch(work.batch, path, work.results, work.stats);
        let flushed = path.finish();
        for &(cid, status) in work.results.iter() {
            let status = match (&flushed, status.is_success()) {
                (Err(e), true) => *e,
                _ => status,
            };
            let backoff = Backoff::new();
            while !work.queue.post(cid, status, 0) {
                if self.threads.stopping() {
                    return None;
                }
                backoff.snooze();
            }
        }
        work.stats.batches.fetch_add(1, Ordering::Relaxed);
        work.stats
            .busy_ns
            .fetch_add(began.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Some(n)
    }
}

impl Controller for FileController {
    fn registers(&self) -> &Registers {
        &self.registers
    }

    fn dma(&self) -> &DmaMap {
        &self.dma
    }

    fn namespace(&self, nsid: u32) -> Option<NamespaceGeometry> {
        (nsid == 1).then_some(self.geometry)
    }

    fn identify(&self) -> IdentifyController {
        super::software_identify("gpu-nvme file controller", "GNFILE0001")
    }

    fn start(self: Arc<Self>, admin: AdminConfig) -> Result<(), ControllerError> {
        Self::spawn(&self, admin)
    }

    fn stop(&self) {
        self.threads.request_stop();
        self.registers.ring_all();
        self.threads.stop_and_join();
    }

    fn attach_queue(&self, queue: ControllerQueue) -> Result<(), ControllerError> {
        if !self.threads.is_running() {
            return Err(ControllerError::State("not running"));
        }
        let sqid = queue.sqid();
        if let Some(slot) = self.inline_queue(sqid) {
            slot.state
                .lock()
                .map_err(|_| ControllerError::State("inline queue poisoned"))?
                .queue = Some(queue);
            return Ok(());
        }
        let inbox = &self.worker_of(sqid).inbox;
        let ticket = inbox.post(Some(queue), None);
        self.registers.bell(sqid).ring();
        inbox.wait(ticket, self.threads.stop_flag());
        Ok(())
    }

    fn detach_queue(&self, sqid: u16) -> Result<(), ControllerError> {
        if let Some(slot) = self.inline_queue(sqid) {
            // Waits for a thread serving it to finish.
            slot.state
                .lock()
                .map_err(|_| ControllerError::State("inline queue poisoned"))?
                .queue = None;
            return Ok(());
        }
        let inbox = &self.worker_of(sqid).inbox;
        let ticket = inbox.post(None, Some(sqid));
        self.registers.bell(sqid).ring();
        inbox.wait(ticket, self.threads.stop_flag());
        Ok(())
    }

    fn stats(&self) -> ControllerStats {
        let mut total = ControllerStats::default();
        for w in &self.workers {
            total += w.stats.snapshot();
        }
        for q in &self.inline {
            total += q.stats.snapshot();
        }
        total
    }

    fn serves_inline(&self, sqid: u16) -> bool {
        self.inline_queue(sqid).is_some()
    }

    fn serve_inline(&self, sqid: u16) -> usize {
        let Some(slot) = self.inline_queue(sqid) else {
            return 0;
        };
        // Held: another thread is running this queue's commands, perhaps the caller's too.
        let Ok(mut guard) = slot.state.try_lock() else {
            return 0;
        };
        let state = &mut *guard;
        // Nothing to run (a poll before the command was submitted, or after another thread
        // ran it): no data path and executor to set up.
        let Some(queue) = state.queue.as_mut().filter(|q| q.pending() > 0) else {
            return 0;
        };
        let mut path = DataPath::new(&self.dma, None);
        let mut exec = Executor::new(&self.store, &self.config, self.geometry);
        let mut work = Batch {
            queue,
            batch: &mut state.batch,
            results: &mut state.results,
            stats: &slot.stats,
        };
        self.serve_batch(&mut work, &mut path, &mut exec)
            .unwrap_or(0)
    }
}

impl Drop for FileController {
    fn drop(&mut self) {
        self.threads.request_stop();
        self.registers.ring_all();
    }
}

/// The backing file, opened as configured.
#[derive(Debug)]
struct Store {
    file: File,
    len: u64,
    map: Option<Mapping>,
}

#[derive(Debug)]
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is shared file memory; concurrent access to distinct LBAs is the normal
// case, and overlapping writes race exactly as they would on a real SSD.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from a successful mmap and nothing uses them any more.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

impl Store {
    fn open(config: &FileControllerConfig) -> io::Result<Self> {
        if config.lba_size != 512 && config.lba_size != 4096 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "LBA size must be 512 or 4096",
            ));
        }
        let mut opts = OpenOptions::new();
        opts.read(true).write(true);
        if config.direct && config.backend != FileBackend::Mmap {
            opts.custom_flags(libc::O_DIRECT);
        }
        let file = opts.open(&config.path)?;
        let len = {
            use std::io::Seek;
            (&file).seek(io::SeekFrom::End(0))?
        };
        let map = if config.backend == FileBackend::Mmap && len > 0 {
            let size =
                usize::try_from(len).map_err(|_| io::Error::other("file too large to map"))?;
            // SAFETY: a fresh shared mapping of an open file; checked for MAP_FAILED below.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_POPULATE,
                    std::os::fd::AsRawFd::as_raw_fd(&file),
                    0,
                )
            };
            if ptr == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            Some(Mapping {
                ptr: ptr.cast(),
                len: size,
            })
        } else {
            None
        };
        Ok(Self { file, len, map })
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        match &self.map {
            Some(m) => {
                let off = self.check(off, buf.len(), m)?;
                // SAFETY: off + len <= mapping length (checked); the mapping lives as long as
                // the store, and concurrent writers race as they would on a real SSD.
                let src = unsafe { std::slice::from_raw_parts(m.ptr.add(off), buf.len()) };
                buf.copy_from_slice(src);
                Ok(())
            }
            None => self.file.read_exact_at(buf, off),
        }
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        match &self.map {
            Some(m) => {
                let off = self.check(off, buf.len(), m)?;
                // SAFETY: off + len <= mapping length (checked), and `buf` is not in the
                // mapping (host memory the command names, or a bounce buffer).
                unsafe { copy_streaming(buf.as_ptr(), m.ptr.add(off), buf.len()) };
                Ok(())
            }
            None => self.file.write_all_at(buf, off),
        }
    }

    fn check(&self, off: u64, len: usize, m: &Mapping) -> io::Result<usize> {
        let off = usize::try_from(off).map_err(|_| io::Error::other("offset"))?;
        match off.checked_add(len) {
            Some(end) if end <= m.len => Ok(off),
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "beyond the mapping",
            )),
        }
    }

    fn flush(&self) -> io::Result<()> {
        if let Some(m) = &self.map {
            // SAFETY: the whole live mapping.
            if unsafe { libc::msync(m.ptr.cast(), m.len, libc::MS_SYNC) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        self.file.sync_data()
    }

    /// Makes the range read as zeros: punches a hole, or writes zeros where holes are refused.
    fn zero_range(&self, off: u64, len: u64) -> io::Result<()> {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.file);
        let (Ok(o), Ok(l)) = (libc::off_t::try_from(off), libc::off_t::try_from(len)) else {
            return Err(io::Error::other("range"));
        };
        // SAFETY: plain system call on our descriptor.
        let rc = unsafe {
            libc::fallocate(
                fd,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                o,
                l,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let zeros = vec![0u8; 1 << 20];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(zeros.len() as u64) as usize;
            self.write_at(&zeros[..n], off + done)?;
            done += n as u64;
        }
        Ok(())
    }
}

/// Executes I/O commands of one worker against the store.
struct Executor<'a> {
    store: &'a Store,
    geometry: NamespaceGeometry,
    null_data: bool,
    direct: bool,
    aligned: Vec<u8>,
    uring: Option<uring::Batch>,
}

impl<'a> Executor<'a> {
    fn new(store: &'a Store, config: &FileControllerConfig, geometry: NamespaceGeometry) -> Self {
        let uring = (config.backend == FileBackend::Uring && !config.null_data)
            .then(|| uring::Batch::new(config.max_batch))
            .and_then(|r| match r {
                Ok(b) => Some(b),
                Err(e) => {
                    tracing::warn!("io_uring unavailable ({e}); falling back to pread/pwrite");
                    None
                }
            });
        Self {
            store,
            geometry,
            null_data: config.null_data,
            direct: config.direct,
            aligned: Vec::new(),
            uring,
        }
    }

    fn run_batch(
        &mut self,
        batch: &[SubmissionEntry],
        path: &mut DataPath<'_>,
        results: &mut Vec<(u16, Status)>,
        stats: &StatsCounters,
    ) {
        let base = results.len();
        for (index, sqe) in batch.iter().enumerate() {
            if let Some(ring) = self.uring.as_mut()
                && let Ok(Prepared::Rw { write, off, len }) = prepare(sqe, self.geometry)
            {
                let direct = self.direct;
                match path.segments(sqe, len) {
                    Ok(segs) if uring::reachable(&segs, direct) => {
                        ring.push(base + index, write, off, len, &segs);
                        results.push((sqe.cid(), Status::SUCCESS));
                        continue;
                    }
                    _ => {}
                }
            }
            let status = self.execute(sqe, path, stats);
            results.push((sqe.cid(), status));
        }
        if let Some(ring) = self.uring.as_mut() {
            ring.complete(&self.store.file, results, stats);
        }
        stats
            .commands
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let errors = results.iter().filter(|(_, s)| !s.is_success()).count();
        if errors > 0 {
            stats.errors.fetch_add(errors as u64, Ordering::Relaxed);
        }
    }

    fn execute(
        &mut self,
        sqe: &SubmissionEntry,
        path: &mut DataPath<'_>,
        stats: &StatsCounters,
    ) -> Status {
        match prepare(sqe, self.geometry) {
            Err(status) => status,
            Ok(Prepared::Flush) => {
                if self.null_data {
                    return Status::SUCCESS;
                }
                self.store
                    .flush()
                    .map_or_else(|_| Status::write_fault(), |()| Status::SUCCESS)
            }
            Ok(Prepared::Zero { off, len }) => {
                if self.null_data {
                    return Status::SUCCESS;
                }
                self.store
                    .zero_range(off, len)
                    .map_or_else(|_| Status::write_fault(), |()| Status::SUCCESS)
            }
            Ok(Prepared::Deallocate { ranges }) => self.deallocate(sqe, ranges, path),
            Ok(Prepared::Rw { write, off, len }) => {
                if self.null_data {
                    return Status::SUCCESS; // control path only: the data pointer is not used
                }
                let segs = match path.segments(sqe, len) {
                    Ok(s) => s,
                    Err(status) => return status,
                };
                let (store, direct, aligned) = (self.store, self.direct, &mut self.aligned);
                let result = if write {
                    path.write_from(&segs, |pos, data| {
                        write_aligned(direct, aligned, store, data, off + pos)
                    })
                } else {
                    path.read_into(&segs, |pos, buf| {
                        read_aligned(direct, aligned, store, buf, off + pos)
                    })
                };
                match result {
                    Ok(()) => {
                        let (ops, bytes) = if write {
                            (&stats.writes, &stats.bytes_written)
                        } else {
                            (&stats.reads, &stats.bytes_read)
                        };
                        ops.fetch_add(1, Ordering::Relaxed);
                        bytes.fetch_add(len, Ordering::Relaxed);
                        Status::SUCCESS
                    }
                    Err(status) if status == Status::data_transfer_error() => {
                        if write {
                            Status::write_fault()
                        } else {
                            Status::unrecovered_read_error()
                        }
                    }
                    Err(status) => status,
                }
            }
        }
    }

    fn deallocate(
        &mut self,
        sqe: &SubmissionEntry,
        ranges: u32,
        path: &mut DataPath<'_>,
    ) -> Status {
        let todo = match dsm_ranges(sqe, ranges, self.geometry, path) {
            Ok(todo) => todo,
            Err(status) => return status,
        };
        if self.null_data {
            return Status::SUCCESS;
        }
        for (off, len) in todo {
            if self.store.zero_range(off, len).is_err() {
                return Status::write_fault();
            }
        }
        Status::SUCCESS
    }
}

/// Copies `len` bytes from `src` to `dst` (ranges that do not overlap) with non-temporal
/// stores on x86-64: the destination's cache lines are neither read first nor kept, as a
/// drive's DMA writes its flash without passing through the host's caches. A store fence at
/// the end orders the bytes before any later store (the completion that the host polls, after
/// which another command may read them).
///
/// # Safety
/// As [`std::ptr::copy_nonoverlapping`].
#[cfg(target_arch = "x86_64")]
unsafe fn copy_streaming(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    // Streaming stores need 16-byte aligned destinations: the bytes before the first such
    // line, and after the last whole 64 bytes, go the usual way.
    let head = dst.align_offset(16).min(len);
    let end = head + (len - head) / 64 * 64;
    // SAFETY: the caller's contract covers all `len` bytes; `head..end` are whole 16-byte
    // units at 16-byte aligned destinations (SSE2 is part of x86-64), loads may be unaligned.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        let mut i = head;
        while i < end {
            let s = src.add(i).cast::<__m128i>();
            let d = dst.add(i).cast::<__m128i>();
            let v = [
                _mm_loadu_si128(s),
                _mm_loadu_si128(s.add(1)),
                _mm_loadu_si128(s.add(2)),
                _mm_loadu_si128(s.add(3)),
            ];
            for (k, v) in v.into_iter().enumerate() {
                _mm_stream_si128(d.add(k), v);
            }
            i += 64;
        }
        std::ptr::copy_nonoverlapping(src.add(end), dst.add(end), len - end);
        _mm_sfence();
    }
}

/// Copies `len` bytes from `src` to `dst`: the plain copy where there are no streaming
/// stores.
///
/// # Safety
/// As [`std::ptr::copy_nonoverlapping`].
#[cfg(not(target_arch = "x86_64"))]
unsafe fn copy_streaming(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
}

/// Writes `data`, through a block-aligned copy when O_DIRECT needs one.
fn write_aligned(
    direct: bool,
    aligned: &mut Vec<u8>,
    store: &Store,
    data: &[u8],
    off: u64,
) -> io::Result<()> {
    if !direct || is_aligned(data.as_ptr(), data.len()) {
        return store.write_at(data, off);
    }
    let scratch = aligned_scratch(aligned, data.len());
    scratch.copy_from_slice(data);
    store.write_at(scratch, off)
}

/// Reads into `buf`, through a block-aligned copy when O_DIRECT needs one.
fn read_aligned(
    direct: bool,
    aligned: &mut Vec<u8>,
    store: &Store,
    buf: &mut [u8],
    off: u64,
) -> io::Result<()> {
    if !direct || is_aligned(buf.as_ptr(), buf.len()) {
        return store.read_at(buf, off);
    }
    let len = buf.len();
    let scratch = aligned_scratch(aligned, len);
    store.read_at(scratch, off)?;
    buf.copy_from_slice(scratch);
    Ok(())
}

fn is_aligned(ptr: *const u8, len: usize) -> bool {
    (ptr as usize).is_multiple_of(4096) && len.is_multiple_of(512)
}

/// A 4096-aligned scratch slice of `len` bytes inside `buf`.
fn aligned_scratch(buf: &mut Vec<u8>, len: usize) -> &mut [u8] {
    if buf.len() < len + 4096 {
        buf.resize(len + 4096, 0);
    }
    let skew = buf.as_ptr().align_offset(4096);
    &mut buf[skew..skew + len]
}

mod uring;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The streaming copy writes exactly the source's bytes wherever source and
        /// destination start and however long the copy is, and nothing around them.
        #[test]
        fn a_streaming_copy_writes_exactly_its_bytes(
            src_at in 0usize..64,
            dst_at in 0usize..64,
            len in 0usize..1000,
            seed in any::<u8>(),
        ) {
            let src: Vec<u8> = (0..src_at + len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
            let mut dst = vec![0xA5u8; dst_at + len + 64];
            // SAFETY: both ranges lie inside their own vectors.
            unsafe { copy_streaming(src.as_ptr().add(src_at), dst.as_mut_ptr().add(dst_at), len) };
            prop_assert!(dst[..dst_at].iter().all(|&b| b == 0xA5));
            prop_assert_eq!(&dst[dst_at..dst_at + len], &src[src_at..]);
            prop_assert!(dst[dst_at + len..].iter().all(|&b| b == 0xA5));
        }
    }
}
