//! The emulated SSD: service units of one dispatcher and its workers (papers/swarmio.md §IV-A,
//! §IV-B), one global timing model (§IV-D), and a RAM or file namespace with a volatile write
//! cache.
//!
//! - SQ `y` belongs to service unit `(y - 1) % units`; inside the unit, its CQ belongs to worker
//!   `((y - 1) / units) % workers`. A queue pair is thus fetched by one dispatcher and completed
//!   by one worker, so neither side needs a lock.
//! - On each doorbell a dispatcher fetches every new SQE at once (up to `max_fetch`, 1,024 by
//!   default: coalesced fetching), asks the timing model for the batch's completion times (one
//!   atomic step per instance with aggregated updates, or per request), and hands the requests
//!   to the owning workers through SPSC rings, each batch published with one index update.
//! - A worker takes up to 256 requests off its ring at once, moves their data (host memory
//!   directly, GPU memory in one batch of copy-engine transfers), keeps requests ordered by
//!   target time, and then posts the CQEs whose time has come (`now >= target`) before it takes
//!   the next batch.
//! - Baseline mode (NVMeVirt-like, §III): one dispatcher, per-request updates, one SQE per
//!   doorbell check, and NVMeVirt's data path: each request's copy is issued and waited for on
//!   its own, where SwarmIO batches a worker batch's copies (its DSA offload, §IV-C)
//!   ([`SwarmConfig::baseline`]).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use common::ring::{SpscConsumer, SpscProducer, spsc};
use crossbeam_utils::{Backoff, CachePadded};
use gpu_nvme::controller::admin::run_admin_queue;
use gpu_nvme::controller::data::{DataPath, GpuCopier};
use gpu_nvme::controller::io::{Prepared, dsm_ranges, prepare};
use gpu_nvme::controller::threads::{IdleBackoff, Mailbox, ThreadSet};
use gpu_nvme::controller::{
    AdminConfig, Controller, ControllerError, ControllerStats, Registers, StatsCounters,
    software_identify,
};
use gpu_nvme::cuda::Gpu;
use gpu_nvme::memory::DmaMap;
use gpu_nvme::queue::{ControllerQueue, CqPoster, SqFetcher};
use gpu_nvme::spec::{
    IdentifyController, IoOpcode, LbaFormat, NamespaceGeometry, Status, SubmissionEntry,
};

use crate::faults::Faults;
use crate::store::{RamPages, Store};
use crate::timing_model::{IoDirection, TimingConfig, TimingModel, TimingRequest, UpdateMode};

/// Requests a dispatcher can hand one worker before it waits.
const RING_CAPACITY: usize = 8192;

/// Most requests a worker takes off its ring at once (one ring index update for all of them).
const STAGE_CAPACITY: usize = 256;

/// Where the namespace's blocks live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// RAM, sparse: never-written blocks read as zeros and cost no memory.
    Ram,
    /// RAM on transparent huge pages: faster random reads over a large working set, but a write
    /// into an untouched 2 MiB region may make all of it resident (for densely filled data).
    RamHugePages,
    /// A file or block device.
    File(PathBuf),
}

/// Settings of a [`SwarmIo`] emulator.
#[derive(Debug, Clone)]
pub struct SwarmConfig {
    /// Namespace size in bytes (a multiple of the LBA size).
    pub capacity_bytes: u64,
    /// LBA size, 512 or 4096.
    pub lba_size: u32,
    /// Where the blocks live.
    pub backing: Backing,
    /// The SSD's timing.
    pub timing: TimingConfig,
    /// Service units (dispatchers).
    pub service_units: usize,
    /// Workers of each service unit.
    pub workers_per_unit: usize,
    /// Most SQEs fetched at one doorbell; 1 turns coalesced fetching off.
    pub max_fetch: usize,
    /// How dispatchers update the timing model.
    pub update_mode: UpdateMode,
    /// Workers send a batch's copies into GPU memory as one batch and wait once
    /// (SwarmIO); off, each request's copy is sent and waited for alone (NVMeVirt).
    pub batched_copies: bool,
    /// Requests a worker pops ahead of the one it executes, with their data prefetched into
    /// the cache (0: none).
    pub prefetch_ahead: usize,
    /// Pin each dispatcher and worker thread to a core of its own (round robin over the
    /// process's allowed cores), so the scheduler never moves a polling thread.
    pub pin_threads: bool,
    /// I/O queues the controller supports.
    pub max_io_queues: u16,
    /// GPU whose threads ring the doorbells and whose memory PRPs may name.
    pub gpu: Option<Gpu>,
    /// Control path only: commands are timed and completed, no data moves.
    pub null_data: bool,
}

impl SwarmConfig {
    /// SwarmIO mode: 2 service units of 2 workers, coalesced fetching, aggregated updates.
    pub fn new(capacity_bytes: u64, lba_size: u32, timing: TimingConfig) -> Self {
        Self {
            capacity_bytes,
            lba_size,
            backing: Backing::Ram,
            timing,
            service_units: 2,
            workers_per_unit: 2,
            max_fetch: 1024,
            update_mode: UpdateMode::Aggregated,
            batched_copies: true,
            pin_threads: false,
            prefetch_ahead: 8,
            max_io_queues: 256,
            gpu: None,
            null_data: false,
        }
    }

    /// The NVMeVirt-like baseline: one dispatcher, per-request updates, no coalescing, one
    /// copy at a time.
    pub fn baseline(mut self) -> Self {
        self.service_units = 1;
        self.max_fetch = 1;
        self.update_mode = UpdateMode::PerRequest;
        self.batched_copies = false;
        self
    }

    fn validate(&self) -> Result<(), ControllerError> {
        let bad = |what: &str| Err(ControllerError::Config(what.to_string()));
        if self.service_units == 0 || self.service_units > 256 {
            return bad("service_units must be in 1..=256");
        }
        if self.workers_per_unit == 0 || self.workers_per_unit > 256 {
            return bad("workers_per_unit must be in 1..=256");
        }
        if self.max_fetch == 0 {
            return bad("max_fetch must be at least 1");
        }
        if self.max_io_queues == 0 {
            return bad("max_io_queues must be at least 1");
        }
        if self.timing.lba_bytes() != self.lba_size {
            return bad("the timing model's lba_bytes must equal lba_size");
        }
        Ok(())
    }
}

/// A request on its way from a dispatcher to a worker.
#[derive(Debug, Clone, Copy)]
struct Request {
    sqe: SubmissionEntry,
    target_ns: u64,
    sqid: u16,
    sq_head: u16,
}

/// A completion waiting for its time.
#[derive(Debug, Clone, Copy)]
struct Due {
    target_ns: u64,
    seq: u64,
    sqid: u16,
    cid: u16,
    sq_head: u16,
    status: u16,
}

/// Completions ordered by target time (ties in arrival order). Targets arrive almost sorted
/// (a batch's requests rotate over the timing model's instances), so an insertion from the
/// back costs a step or two, where a binary heap would pay log n on every push and pop.
#[derive(Debug, Default)]
struct DueQueue(VecDeque<Due>);

impl DueQueue {
    fn push(&mut self, d: Due) {
        let at = self.0.len()
            - self
                .0
                .iter()
                .rev()
                .take_while(|x| x.target_ns > d.target_ns)
                .count();
        self.0.insert(at, d);
    }
}

#[derive(Debug, Default)]
struct UnitSlots {
    dispatcher: Mailbox<SqFetcher>,
    workers: Vec<Mailbox<CqPoster>>,
    stats: Vec<CachePadded<StatsCounters>>,
    /// The dispatcher's own counters (on a line of their own, away from the workers').
    dispatcher_stats: CachePadded<StatsCounters>,
}

/// The SwarmIO emulator: an NVMe controller (see the module docs).
#[derive(Debug)]
pub struct SwarmIo {
    config: SwarmConfig,
    store: Store,
    geometry: NamespaceGeometry,
    registers: Registers,
    dma: DmaMap,
    model: TimingModel,
    faults: Faults,
    units: Vec<UnitSlots>,
    threads: ThreadSet,
}

impl SwarmIo {
    /// Builds the emulator; threads start with [`Controller::start`].
    pub fn new(config: SwarmConfig) -> Result<Arc<Self>, ControllerError> {
        config.validate()?;
        let store_err = |e: crate::store::StoreError| ControllerError::Config(e.to_string());
        let store = match &config.backing {
            Backing::Ram => Store::ram(config.capacity_bytes, config.lba_size),
            Backing::RamHugePages => {
                Store::ram_with_pages(config.capacity_bytes, config.lba_size, RamPages::Huge)
            }
            Backing::File(path) => Store::file(path, config.capacity_bytes, config.lba_size),
        }
        .map_err(store_err)?;
        let geometry = LbaFormat::from_block_size(config.lba_size)
            .and_then(|f| {
                NamespaceGeometry::new(f, config.capacity_bytes / u64::from(config.lba_size))
            })
            .map_err(|e| ControllerError::Config(e.to_string()))?;
        let registers = Registers::new(config.max_io_queues, config.gpu.as_ref())?;
        let units = (0..config.service_units)
            .map(|_| UnitSlots {
                dispatcher: Mailbox::default(),
                workers: (0..config.workers_per_unit)
                    .map(|_| Mailbox::default())
                    .collect(),
                stats: (0..config.workers_per_unit)
                    .map(|_| CachePadded::default())
                    .collect(),
                dispatcher_stats: CachePadded::default(),
            })
            .collect();
        Ok(Arc::new(Self {
            store,
            geometry,
            registers,
            dma: DmaMap::new(),
            model: TimingModel::new(config.timing),
            faults: Faults::new(),
            units,
            threads: ThreadSet::default(),
            config,
        }))
    }

    /// The injected faults.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The timing model.
    pub fn timing(&self) -> &TimingModel {
        &self.model
    }

    /// The namespace's storage (for resident-memory checks).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Power loss: every write not yet flushed is gone.
    pub fn power_cut(&self) -> Result<(), crate::store::StoreError> {
        self.store.power_cut()
    }

    /// Power loss after the write cache wrote the blocks `keep(lba)` names back on its own
    /// (see [`Store::power_cut_keeping`]).
    pub fn power_cut_keeping(
        &self,
        keep: impl FnMut(u64) -> bool,
    ) -> Result<(), crate::store::StoreError> {
        self.store.power_cut_keeping(keep)
    }

    /// Controller reset: stops all threads and forgets every queue, as CC.EN = 0 does; the
    /// host starts the controller again and re-creates its queues.
    pub fn reset(&self) {
        self.stop();
    }

    fn route(&self, sqid: u16) -> (usize, usize) {
        let i = usize::from(sqid.saturating_sub(1));
        let units = self.config.service_units;
        (i % units, (i / units) % self.config.workers_per_unit)
    }

    fn run_dispatcher(&self, unit: usize, mut rings: Vec<SpscProducer<Request>>) {
        let slots = &self.units[unit];
        let mut fetchers: Vec<SqFetcher> = Vec::new();
        let mut batch: Vec<SubmissionEntry> = Vec::with_capacity(self.config.max_fetch);
        let mut timing: Vec<TimingRequest> = Vec::with_capacity(self.config.max_fetch);
        let mut targets: Vec<u64> = Vec::with_capacity(self.config.max_fetch);
        let lba = u64::from(self.config.lba_size);
        let mut idle = 0u32;
        while !self.threads.stopping() {
            slots.dispatcher.apply(&mut fetchers, |f| f.sqid);
            let mut fetched = 0u64;
            let began = std::time::Instant::now();
            for f in &mut fetchers {
                batch.clear();
                if f.fetch(&mut batch, self.config.max_fetch) == 0 {
                    continue;
                }
                fetched += 1;
                timing.clear();
                timing.extend(batch.iter().map(|sqe| TimingRequest {
                    op: if sqe.opcode() == IoOpcode::Write.code() {
                        IoDirection::Write
                    } else {
                        IoDirection::Read
                    },
                    lba: sqe.slba(),
                    bytes: u32::try_from(u64::from(sqe.block_count()) * lba).unwrap_or(u32::MAX),
                }));
                targets.clear();
                targets.resize(batch.len(), 0);
                let now = self.model.now_ns();
                if self
                    .model
                    .schedule(self.config.update_mode, now, &timing, &mut targets)
                    .is_err()
                {
                    targets.fill(now);
                }
                self.faults.apply_spikes(&mut targets);
                let (_, worker) = self.route(f.sqid);
                let ring = &mut rings[worker];
                let (sqid, sq_head) = (f.sqid, f.head());
                let mut requests = batch.iter().zip(&targets).map(|(sqe, &target_ns)| Request {
                    sqe: *sqe,
                    target_ns,
                    sqid,
                    sq_head,
                });
                // The whole batch is published to the worker at once (one ring index update).
                let mut left = batch.len();
                let backoff = Backoff::new();
                while left > 0 {
                    let moved = ring.push_batch(&mut requests, left);
                    left -= moved;
                    if moved == 0 {
                        if self.threads.stopping() {
                            return;
                        }
                        backoff.snooze();
                    }
                }
            }
            if fetched > 0 {
                slots.dispatcher_stats.add(&ControllerStats {
                    batches: fetched,
                    dispatch_ns: began.elapsed().as_nanos() as u64,
                    ..ControllerStats::default()
                });
            }
            idle = if fetched > 0 {
                0
            } else {
                IdleBackoff::default().step(idle)
            };
        }
    }

    fn run_worker(&self, unit: usize, index: usize, mut ring: SpscConsumer<Request>) {
        let mailbox = &self.units[unit].workers[index];
        let stats = &self.units[unit].stats[index];
        let copier = self
            .config
            .gpu
            .as_ref()
            .and_then(|gpu| match GpuCopier::new(gpu) {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::error!("worker {unit}.{index}: no GPU copier: {e}");
                    None
                }
            });
        let mut path = DataPath::new(&self.dma, copier);
        let mut posters: Vec<CqPoster> = Vec::new();
        let mut last_poster = 0usize;
        let mut due = DueQueue::default();
        let ahead = self.config.prefetch_ahead;
        let mut staged: Vec<Request> = Vec::with_capacity(STAGE_CAPACITY);
        // Counted locally and added to the shared counters once per round (see
        // `StatsCounters::add`).
        let mut tally = ControllerStats::default();
        let mut seq = 0u64;
        let mut idle = 0u32;
        while !self.threads.stopping() {
            mailbox.apply(&mut posters, |p| p.sqid);
            let began = self.model.now_ns();
            // One staged batch per round, then the completions that are due: a worker that
            // drained a long backlog before posting would hold back completions past their
            // target times, and the submitters (a closed loop) would have fewer commands to
            // keep the timing model's instances busy.
            staged.clear();
            let arrived = ring.pop_batch(STAGE_CAPACITY, |req| staged.push(req));
            if arrived > 0 {
                path.refresh();
                // Requests `ahead` positions further have their memory already on its way into
                // the cache: random small transfers are bound by memory latency, not bandwidth.
                // Two steps: the chunk metadata `2 * ahead` positions further, then, `ahead`
                // further, the data it says is there and the host buffer.
                for req in staged.iter().take(2 * ahead) {
                    self.prefetch_meta(&req.sqe);
                }
                for req in staged.iter().take(ahead) {
                    self.prefetch(&req.sqe, &path);
                }
                for (i, req) in staged.iter().enumerate() {
                    if ahead > 0 {
                        if let Some(later) = staged.get(i + 2 * ahead) {
                            self.prefetch_meta(&later.sqe);
                        }
                        if let Some(later) = staged.get(i + ahead) {
                            self.prefetch(&later.sqe, &path);
                        }
                    }
                    let mut status = self.execute(&req.sqe, &mut path, &mut tally);
                    if !self.config.batched_copies
                        && path.copies_pending()
                        && let Err(failed) = timed(&mut tally.copy_wait_ns, || path.finish())
                        && status.is_success()
                    {
                        status = failed;
                    }
                    due.push(Due {
                        target_ns: req.target_ns,
                        seq,
                        sqid: req.sqid,
                        cid: req.sqe.cid(),
                        sq_head: req.sq_head,
                        status: status.to_field(),
                    });
                    seq += 1;
                }
            }
            if path.copies_pending()
                && let Err(status) = timed(&mut tally.copy_wait_ns, || path.finish())
            {
                // The batch's copies into GPU memory failed: so did its successful commands.
                let first = seq - arrived as u64;
                for d in due.0.iter_mut().filter(|d| d.seq >= first) {
                    if d.status == Status::SUCCESS.to_field() {
                        d.status = status.to_field();
                    }
                }
            }
            let now = self.model.now_ns();
            let mut posted = 0;
            while let Some(top) = due.0.front().copied() {
                if top.target_ns > now {
                    break;
                }
                // Completions due together mostly came in one fetched batch, of one queue.
                if posters.get(last_poster).is_none_or(|p| p.sqid != top.sqid) {
                    match posters.iter().position(|p| p.sqid == top.sqid) {
                        Some(i) => last_poster = i,
                        None => {
                            due.0.pop_front(); // its queue was deleted
                            continue;
                        }
                    }
                }
                let poster = &mut posters[last_poster];
                let status = Status::from_field(top.status).unwrap_or(Status::internal_error());
                if !poster.post(top.cid, status, 0, top.sq_head) {
                    tally.cq_full += 1;
                    break; // CQ full: the host has not consumed yet
                }
                due.0.pop_front();
                posted += 1;
            }
            if arrived > 0 || posted > 0 {
                let end = self.model.now_ns();
                tally.busy_ns += end.saturating_sub(began);
                if posted > 0 {
                    tally.post_ns += end.saturating_sub(now);
                }
            }
            if tally != ControllerStats::default() {
                stats.add(&tally);
                tally = ControllerStats::default();
            }
            if arrived == 0 && posted == 0 {
                idle = match due.0.front() {
                    None => IdleBackoff::default().step(idle),
                    // Far from the next completion: let the other threads of a small machine run.
                    Some(next) if next.target_ns > now + 20_000 => {
                        std::thread::yield_now();
                        0
                    }
                    Some(_) => {
                        std::hint::spin_loop();
                        0
                    }
                };
            } else {
                idle = 0;
            }
        }
    }

    /// The bytes `sqe` moves, for prefetching: `None` for commands that move no data.
    fn data_range(&self, sqe: &SubmissionEntry) -> Option<(u64, u64)> {
        let op = sqe.opcode();
        if self.config.null_data || (op != IoOpcode::Read.code() && op != IoOpcode::Write.code()) {
            return None;
        }
        let lba = u64::from(self.config.lba_size);
        Some((
            sqe.slba().saturating_mul(lba),
            u64::from(sqe.block_count()) * lba,
        ))
    }

    /// First prefetch step for `sqe`: the store's chunk metadata.
    fn prefetch_meta(&self, sqe: &SubmissionEntry) {
        if let Some((offset, len)) = self.data_range(sqe) {
            self.store.prefetch_meta(offset, len as usize);
        }
    }

    /// Second prefetch step for `sqe`: the store blocks that hold data, and the host buffer.
    fn prefetch(&self, sqe: &SubmissionEntry, path: &DataPath<'_>) {
        if let Some((offset, len)) = self.data_range(sqe) {
            self.store.prefetch_data(offset, len as usize);
            path.prefetch(sqe, len);
        }
    }

    /// Reads `buf` at byte `offset` of the namespace. A PRP segment need not be block
    /// aligned (PRP1 may point anywhere dword aligned): such pieces go through whole blocks.
    fn read_any(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        match self.covering_blocks(offset, buf.len())? {
            None => self.store.read(offset, buf).map_err(std::io::Error::other),
            Some((_, whole, at)) => {
                buf.copy_from_slice(&whole[at..at + buf.len()]);
                Ok(())
            }
        }
    }

    /// Writes `data` at byte `offset`; unaligned pieces read-modify-write their blocks.
    fn write_any(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        match self.covering_blocks(offset, data.len())? {
            None => self
                .store
                .write(offset, data)
                .map_err(std::io::Error::other),
            Some((start, mut whole, at)) => {
                whole[at..at + data.len()].copy_from_slice(data);
                self.store
                    .write(start, &whole)
                    .map_err(std::io::Error::other)
            }
        }
    }

    /// `None` when `len` bytes at `offset` are whole blocks; otherwise the current content of
    /// the blocks covering them: (first byte, bytes, where the piece starts in them).
    fn covering_blocks(
        &self,
        offset: u64,
        len: usize,
    ) -> std::io::Result<Option<(u64, Vec<u8>, usize)>> {
        let lba = u64::from(self.config.lba_size);
        if offset.is_multiple_of(lba) && (len as u64).is_multiple_of(lba) {
            return Ok(None);
        }
        let start = offset / lba * lba;
        let end = (offset + len as u64).div_ceil(lba) * lba;
        let mut whole = vec![0u8; (end - start) as usize];
        self.store
            .read(start, &mut whole)
            .map_err(std::io::Error::other)?;
        Ok(Some((start, whole, (offset - start) as usize)))
    }

    /// Executes one command's data movement and returns its status.
    fn execute(
        &self,
        sqe: &SubmissionEntry,
        path: &mut DataPath<'_>,
        tally: &mut ControllerStats,
    ) -> Status {
        tally.commands += 1;
        let status = self.execute_inner(sqe, path, tally);
        if !status.is_success() {
            tally.errors += 1;
        }
        status
    }

    fn execute_inner(
        &self,
        sqe: &SubmissionEntry,
        path: &mut DataPath<'_>,
        tally: &mut ControllerStats,
    ) -> Status {
        let prepared = match prepare(sqe, self.geometry) {
            Ok(p) => p,
            Err(status) => return status,
        };
        if self.config.null_data {
            return Status::SUCCESS;
        }
        match prepared {
            Prepared::Flush => self
                .store
                .flush()
                .map_or_else(|_| Status::write_fault(), |()| Status::SUCCESS),
            Prepared::Zero { off, len } => self
                .store
                .write_zeroes(off, len)
                .map_or_else(|_| Status::write_fault(), |()| Status::SUCCESS),
            Prepared::Deallocate { ranges } => match dsm_ranges(sqe, ranges, self.geometry, path) {
                Ok(todo) => {
                    for (off, len) in todo {
                        if self.store.deallocate(off, len).is_err() {
                            return Status::write_fault();
                        }
                    }
                    Status::SUCCESS
                }
                Err(status) => status,
            },
            Prepared::Rw { write, off, len } => {
                let (lba, blocks) = (sqe.slba(), u64::from(sqe.block_count()));
                if !write && self.faults.media_error(lba, blocks) {
                    return Status::unrecovered_read_error();
                }
                if write && self.faults.write_fault(lba, blocks) {
                    return Status::write_fault();
                }
                let segs = match path.segments(sqe, len) {
                    Ok(s) => s,
                    Err(status) => return status,
                };
                let result = if write {
                    path.write_from(&segs, |pos, data| self.write_any(off + pos, data))
                } else {
                    path.read_into(&segs, |pos, buf| self.read_any(off + pos, buf))
                };
                match result {
                    Ok(()) => {
                        let (count, bytes) = if write {
                            (&mut tally.writes, &mut tally.bytes_written)
                        } else {
                            (&mut tally.reads, &mut tally.bytes_read)
                        };
                        *count += 1;
                        *bytes += len;
                        Status::SUCCESS
                    }
                    Err(status) => status,
                }
            }
        }
    }

    fn spawn(this: &Arc<Self>, admin: AdminConfig) -> Result<(), ControllerError> {
        this.threads.begin()?;
        let ctrl = Arc::clone(this);
        this.threads.spawn("swarmio-admin".into(), move || {
            if let Err(e) = run_admin_queue(ctrl.as_ref(), admin, ctrl.threads.stop_flag()) {
                tracing::error!("admin queue stopped: {e}");
            }
        })?;
        let mut cores = CorePlan::new(this.config.pin_threads);
        for unit in 0..this.config.service_units {
            let mut producers = Vec::new();
            for index in 0..this.config.workers_per_unit {
                let (tx, rx) = spsc::<Request>(RING_CAPACITY)
                    .map_err(|e| ControllerError::Config(e.to_string()))?;
                producers.push(tx);
                let ctrl = Arc::clone(this);
                let core = cores.next();
                this.threads
                    .spawn(format!("swarmio-w{unit}.{index}"), move || {
                        pin_to(core);
                        ctrl.run_worker(unit, index, rx)
                    })?;
            }
            let ctrl = Arc::clone(this);
            let core = cores.next();
            this.threads.spawn(format!("swarmio-d{unit}"), move || {
                pin_to(core);
                ctrl.run_dispatcher(unit, producers)
            })?;
        }
        Ok(())
    }
}

/// Runs `f`, adding the nanoseconds it took to `counter`.
fn timed<T>(counter: &mut u64, f: impl FnOnce() -> T) -> T {
    let began = std::time::Instant::now();
    let out = f();
    *counter += began.elapsed().as_nanos() as u64;
    out
}

/// Hands out the process's allowed cores in turn, or nothing when pinning is off.
#[derive(Debug)]
struct CorePlan {
    cores: Vec<usize>,
    next: usize,
}

impl CorePlan {
    fn new(pin: bool) -> Self {
        let mut cores = Vec::new();
        if pin {
            // SAFETY: cpu_set_t is plain bits, so all-zero is a valid empty set;
            // sched_getaffinity writes at most size_of::<cpu_set_t>() bytes into it.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: as above; pid 0 is the calling thread.
            let ok = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
            if ok == 0 {
                // SAFETY: CPU_ISSET only reads the set, for indices below CPU_SETSIZE.
                cores.extend(
                    (0..libc::CPU_SETSIZE as usize)
                        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }),
                );
            } else {
                tracing::warn!("cannot read the allowed cores; threads stay unpinned");
            }
        }
        Self { cores, next: 0 }
    }

    fn next(&mut self) -> Option<usize> {
        let core = self.cores.get(self.next % self.cores.len().max(1)).copied();
        self.next += 1;
        core
    }
}

/// Pins the calling thread to `core` (a failure is logged: the thread then runs unpinned).
fn pin_to(core: Option<usize>) {
    let Some(core) = core else { return };
    // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET writes a bit below CPU_SETSIZE
    // (core came from sched_getaffinity); sched_setaffinity reads the set.
    let ok = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)
    };
    if ok != 0 {
        tracing::warn!(
            "cannot pin a thread to core {core}: {}",
            std::io::Error::last_os_error()
        );
    }
}

impl Controller for SwarmIo {
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
        software_identify("SwarmIO NVMe SSD emulator", "SWARMIO0001")
    }

    fn start(self: Arc<Self>, admin: AdminConfig) -> Result<(), ControllerError> {
        Self::spawn(&self, admin)
    }

    fn stop(&self) {
        self.threads.request_stop();
        // The admin thread may sleep on its bell.
        self.registers.ring_all();
        self.threads.stop_and_join();
    }

    fn attach_queue(&self, queue: ControllerQueue) -> Result<(), ControllerError> {
        if !self.threads.is_running() {
            return Err(ControllerError::State("not running"));
        }
        let (unit, worker) = self.route(queue.sqid());
        let (fetcher, poster) = queue.split();
        let slots = &self.units[unit];
        let w = slots.workers[worker].post(Some(poster), None);
        slots.workers[worker].wait(w, self.threads.stop_flag());
        let d = slots.dispatcher.post(Some(fetcher), None);
        slots.dispatcher.wait(d, self.threads.stop_flag());
        Ok(())
    }

    fn detach_queue(&self, sqid: u16) -> Result<(), ControllerError> {
        let (unit, worker) = self.route(sqid);
        let slots = &self.units[unit];
        let d = slots.dispatcher.post(None, Some(sqid));
        slots.dispatcher.wait(d, self.threads.stop_flag());
        let w = slots.workers[worker].post(None, Some(sqid));
        slots.workers[worker].wait(w, self.threads.stop_flag());
        Ok(())
    }

    fn stats(&self) -> ControllerStats {
        let mut total = ControllerStats::default();
        for unit in &self.units {
            for s in &unit.stats {
                total += s.snapshot();
            }
            total += unit.dispatcher_stats.snapshot();
        }
        total
    }
}

impl Drop for SwarmIo {
    fn drop(&mut self) {
        self.threads.request_stop();
        self.registers.ring_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The due queue pops by target time, ties in arrival order, whatever the arrival order.
        #[test]
        fn due_queue_pops_in_target_then_arrival_order(targets in proptest::collection::vec(0u64..50, 0..200)) {
            let mut q = DueQueue::default();
            for (seq, &target_ns) in targets.iter().enumerate() {
                q.push(Due { target_ns, seq: seq as u64, sqid: 1, cid: 0, sq_head: 0, status: 0 });
            }
            let popped: Vec<(u64, u64)> = q.0.iter().map(|d| (d.target_ns, d.seq)).collect();
            let mut want = popped.clone();
            want.sort();
            prop_assert_eq!(popped, want);
        }
    }
}
