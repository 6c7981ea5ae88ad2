//! A worker's zone: a byte range of one NVMe namespace, reached through `gpu-nvme`'s host
//! queues (the user-space, per-thread queue path that SPDK gives the paper, PeakFS §III-B and
//! §III-C: "each worker thread holds a data zone on the SSD").
//!
//! The zone is addressed in pages of [`PAGE`] bytes; the namespace's LBA size must divide it.
//! A worker either owns one host queue of the device (its commands never meet another
//! worker's on a queue, and up to half the queue depth of commands are in flight), or
//! shares the device's queues through its synchronous block API.
//!
//! A worker may also own a second queue for writes it does not wait for ([`WriteBehind`]): an
//! Icache write-back (PeakFS §III-C2's *write* state) or a write-out of staged data pages goes
//! out there while the worker goes on serving, and nothing else submits to that queue, so its
//! unpolled completions never hold up the worker's other commands.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gpu_nvme::device::{DeviceError, HostQueueHandle, NvmeDevice};
use gpu_nvme::queue::Ticket;

/// How long one command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Bytes of a page: the unit of the inode zone, the WAL, checkpoints and data.
pub const PAGE: usize = 4096;

/// Bytes of one direct command (half the largest transfer, whose PRP list fits one page
/// wherever the buffer starts).
const DIRECT_CHUNK: usize = 1 << 20;

/// Errors of zone I/O.
#[derive(Debug, thiserror::Error)]
pub enum ZoneError {
    /// the device failed
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// the zone does not fit the namespace, or its LBA size does not divide a page
    #[error(
        "zone of {lbas} LBAs at {first_lba} does not fit a namespace of {capacity} LBAs of {lba_size} bytes"
    )]
    Geometry {
        /// first LBA
        first_lba: u64,
        /// LBAs
        lbas: u64,
        /// namespace LBAs
        capacity: u64,
        /// LBA size
        lba_size: u32,
    },
    /// the host queue does not exist
    #[error("host queue {queue} does not exist; the device has {queues}")]
    NoQueue {
        /// the queue asked for
        queue: usize,
        /// host queues of the device
        queues: usize,
    },
    /// a write-behind batch on a zone without a write-back queue
    #[error("the zone has no write-back queue")]
    NoWriteBackQueue,
    /// a command did not complete in time
    #[error("a command at LBA {0} did not complete in time")]
    Timeout(u64),
    /// an access past the end of the zone
    #[error("pages {page}+{count} are outside the zone of {pages} pages")]
    Range {
        /// first page
        page: u64,
        /// pages
        count: u64,
        /// pages in the zone
        pages: u64,
    },
}

/// The buffers of a pipelined transfer: runs of pages read or written, each at its own first
/// LBA.
enum Io<'a, 'b> {
    Read(&'a mut [(u64, &'b mut [u8])]),
    Write(&'a [(u64, &'b [u8])]),
}

/// One command of a [`WriteBehind`].
#[derive(Debug)]
enum Staged {
    /// Pages at an LBA, their bytes a range of the caller's buffer that every
    /// [`Zone::pump`] is given (see [`Zone::stage_shared`]), then zeros up to `pages` bytes.
    Shared {
        lba: u64,
        bytes: Range<usize>,
        pages: usize,
    },
    /// Consecutive pages at an LBA, page `k` of them the page of key `keys.start + k` that
    /// every [`Zone::pump`] is given (see [`Zone::stage_keyed`]).
    Keyed { lba: u64, keys: Range<u64> },
    /// A barrier: submitted once everything before it completed, and nothing after it
    /// before it completed.
    Flush,
}

/// Pages that the writes a batch staged by key ([`Zone::stage_keyed`]) take when they go out.
pub trait KeyedPages {
    /// The page of `key` ([`PAGE`] bytes), if there is one.
    fn page(&self, key: u64) -> Option<&[u8]>;
}

/// No keyed pages at all.
impl KeyedPages for () {
    fn page(&self, _key: u64) -> Option<&[u8]> {
        None
    }
}

/// Where the writes that a batch staged without their bytes take them when they are sent:
/// the buffer of its [`Zone::stage_shared`] writes and the pages of its [`Zone::stage_keyed`]
/// writes.
#[derive(Clone, Copy)]
pub struct LateBytes<'a> {
    /// The buffer of the shared writes.
    pub shared: &'a [u8],
    /// The pages of the keyed writes.
    pub pages: &'a dyn KeyedPages,
}

impl std::fmt::Debug for LateBytes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LateBytes")
            .field("shared_bytes", &self.shared.len())
            .finish_non_exhaustive()
    }
}

impl LateBytes<'static> {
    /// For a batch that sends no more writes (one being abandoned: only what is in flight is
    /// waited for).
    pub const NONE: Self = Self {
        shared: &[],
        pages: &(),
    };
}

/// A batch of writes and flushes on the zone's write-back queue, staged without their bytes
/// (a range of a buffer that stays put, [`Zone::stage_shared`], or pages by key,
/// [`Zone::stage_keyed`]), each command copying its bytes into its bounce slot when it is
/// sent, and completed by polling ([`Zone::pump`]): the caller goes on with other work
/// meanwhile.
/// Commands go out in order up to a window; a flush is a barrier.
///
/// A batch goes on the zone's write-back queue, or on a queue of its own
/// ([`WriteBehind::on_queue`]). Two batches on one queue can deadlock whoever waits for one
/// of them: a queue hands out its slots in ticket order, so once one batch has cycled through
/// the queue's depth past a completion of the other that nobody polled, its next submission
/// waits for that poll. A server's worker hung there in IOR runs, waiting in a data
/// write-out behind an Icache write-back's command.
#[derive(Debug)]
pub struct WriteBehind {
    queued: VecDeque<Staged>,
    /// Commands sent: their tickets and LBAs ([`FLUSH_LBA`] for a flush, which goes alone).
    inflight: VecDeque<(Ticket, u64)>,
    error: Option<ZoneError>,
    /// At most the queue's depth divided by this in flight.
    depth_divisor: usize,
    /// The host queue of this batch, instead of the zone's write-back queue.
    queue: Option<usize>,
}

/// Commands one [`Zone::pump`] submits at most. Each copies up to a bounce slot (64 KiB)
/// while the caller waits: a server's worker pumps between rounds, and a whole window at once
/// (32 commands, 2 MB) held it about 0.4 ms on 16 cores, during which a bigdir's clients all
/// come to wait for it (bench/results/2026-11-27-peakfs-write-back-start).
const SUBMITS_PER_PUMP: usize = 4;

impl Default for WriteBehind {
    fn default() -> Self {
        Self::with_depth_divisor(2)
    }
}

/// The LBA a flush in flight is listed with.
const FLUSH_LBA: u64 = u64::MAX;

impl WriteBehind {
    /// A batch that keeps to the queue's depth divided by `depth_divisor` (at least one
    /// command): batches sharing a queue must together stay below its depth, since a full
    /// queue makes a submission wait for completions that only their polling frees.
    pub fn with_depth_divisor(depth_divisor: usize) -> Self {
        Self {
            queued: VecDeque::new(),
            inflight: VecDeque::new(),
            error: None,
            depth_divisor,
            queue: None,
        }
    }

    /// The batch on host queue `queue` (which no other batch and no other command may use)
    /// rather than on its zone's write-back queue; `None`: the zone's. Only while idle.
    pub fn on_queue(&mut self, queue: Option<usize>) {
        debug_assert!(!self.is_busy(), "a batch in flight changes queue");
        self.queue = queue;
    }

    /// A batch that keeps to a quarter of the queue's depth (see the type's doc).
    pub fn small() -> Self {
        Self::with_depth_divisor(4)
    }

    /// Whether commands are staged or in flight.
    pub fn is_busy(&self) -> bool {
        !self.queued.is_empty() || !self.inflight.is_empty()
    }
}

/// Bytes [`Zone::read_runs`] and [`Zone::write_runs`] moved (a zone and its clones), by
/// path: the controller straight to or from the caller's buffer, or a copy through bounce
/// slots or the device's shared queues. A data path that should be direct and is not (a
/// buffer off dword alignment, as a WRITE whose fields left its data at an odd offset) shows
/// here and nowhere else: the bytes land alike.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZoneTransfers {
    /// Bytes the controller moved straight to or from the caller's buffers.
    pub direct: u64,
    /// Bytes copied through bounce slots or the shared queues.
    pub copied: u64,
}

/// A page-addressed range of a namespace.
#[derive(Debug, Clone)]
pub struct Zone {
    dev: Arc<NvmeDevice>,
    queue: Option<usize>,
    /// [`ZoneTransfers`]: direct, copied.
    moved: Arc<[AtomicU64; 2]>,
    /// The queue of [`WriteBehind`] batches.
    behind: Option<usize>,
    first_lba: u64,
    lbas_per_page: u64,
    pages: u64,
}

impl Zone {
    /// The zone of `lbas` LBAs starting at `first_lba` (whole pages only), reached through
    /// host queue `queue` of the device, or through its shared queues for `None`.
    pub fn new(
        dev: Arc<NvmeDevice>,
        queue: Option<usize>,
        first_lba: u64,
        lbas: u64,
    ) -> Result<Self, ZoneError> {
        if let Some(q) = queue
            && q >= dev.host_queues()
        {
            return Err(ZoneError::NoQueue {
                queue: q,
                queues: dev.host_queues(),
            });
        }
        let g = dev.geometry();
        let lba = g.block_size();
        let bad = || ZoneError::Geometry {
            first_lba,
            lbas,
            capacity: g.capacity_blocks(),
            lba_size: lba,
        };
        if lba == 0 || !PAGE.is_multiple_of(lba as usize) {
            return Err(bad());
        }
        if first_lba
            .checked_add(lbas)
            .is_none_or(|e| e > g.capacity_blocks())
        {
            return Err(bad());
        }
        let lbas_per_page = (PAGE / lba as usize) as u64;
        Ok(Self {
            dev,
            queue,
            moved: Arc::default(),
            behind: None,
            first_lba,
            lbas_per_page,
            pages: lbas / lbas_per_page,
        })
    }

    /// The zone with host queue `queue` for [`WriteBehind`] batches (no other command may
    /// use it).
    pub fn with_write_back_queue(mut self, queue: usize) -> Result<Self, ZoneError> {
        if queue >= self.dev.host_queues() {
            return Err(ZoneError::NoQueue {
                queue,
                queues: self.dev.host_queues(),
            });
        }
        self.behind = Some(queue);
        Ok(self)
    }

    /// Whether the zone has a write-back queue ([`Zone::stage_keyed`] and the rest work).
    pub fn writes_behind(&self) -> bool {
        self.behind.is_some()
    }

    /// Pages in the zone.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    fn lba(&self, page: u64, len: usize) -> Result<u64, ZoneError> {
        let count = len.div_ceil(PAGE) as u64;
        if !len.is_multiple_of(PAGE) || page.checked_add(count).is_none_or(|e| e > self.pages) {
            return Err(ZoneError::Range {
                page,
                count,
                pages: self.pages,
            });
        }
        Ok(self.first_lba + page * self.lbas_per_page)
    }

    /// What [`Self::read_runs`] and [`Self::write_runs`] moved, by path.
    pub fn transfers(&self) -> ZoneTransfers {
        ZoneTransfers {
            direct: self.moved[0].load(Ordering::Relaxed),
            copied: self.moved[1].load(Ordering::Relaxed),
        }
    }

    /// The worker's own queue, if it has one, and whether `bufs` go over it directly: the
    /// device allows direct transfers and every buffer is dword aligned (PRPs name dwords).
    /// Counts their bytes on that path ([`Self::transfers`]).
    fn path<'b>(
        &self,
        bufs: impl Iterator<Item = &'b [u8]> + Clone,
    ) -> (Option<HostQueueHandle<'_>>, bool) {
        let host = self.queue.and_then(|q| self.dev.host_queue(q));
        let direct = host.is_some()
            && self.dev.direct_host_dma()
            && bufs
                .clone()
                .all(|b| (b.as_ptr() as usize).is_multiple_of(4));
        let bytes: usize = bufs.map(<[u8]>::len).sum();
        self.moved[usize::from(!direct)].fetch_add(bytes as u64, Ordering::Relaxed);
        (host, direct)
    }

    /// Reads whole pages from `page`. Through the worker's own queue the controller writes
    /// straight into `buf` when the device allows direct transfers and `buf` is dword aligned
    /// (one command per [`DIRECT_CHUNK`], no bounce slot, no copy); otherwise through bounce
    /// slots.
    pub fn read(&self, page: u64, buf: &mut [u8]) -> Result<(), ZoneError> {
        self.read_runs(&mut [(page, buf)])
    }

    /// Reads runs of whole pages, each `(first page, buffer)`, with the commands of all of
    /// them in flight together (the blocks of one READ request), as [`Zone::write_runs`].
    pub fn read_runs(&self, runs: &mut [(u64, &mut [u8])]) -> Result<(), ZoneError> {
        let mut by_lba: Vec<(u64, &mut [u8])> = Vec::with_capacity(runs.len());
        for (page, buf) in runs.iter_mut().filter(|(_, b)| !b.is_empty()) {
            by_lba.push((self.lba(*page, buf.len())?, &mut **buf));
        }
        if by_lba.is_empty() {
            return Ok(());
        }
        let (host, direct) = self.path(by_lba.iter().map(|(_, b)| &b[..]));
        match host {
            Some(h) if direct => {
                let mut reqs: Vec<(u64, &mut [u8])> = by_lba
                    .iter_mut()
                    .flat_map(|(lba, buf)| {
                        let lba = *lba;
                        buf.chunks_mut(DIRECT_CHUNK)
                            .enumerate()
                            .map(move |(i, c)| (self.lba_at(lba, i * DIRECT_CHUNK), c))
                    })
                    .collect();
                Ok(h.read_direct_many(&mut reqs)?)
            }
            Some(h) => self.pipelined(h, Io::Read(&mut by_lba)),
            None => {
                for (lba, buf) in by_lba {
                    self.dev.read_blocks(lba, buf)?;
                }
                Ok(())
            }
        }
    }

    /// Writes whole pages at `page`.
    pub fn write(&self, page: u64, buf: &[u8]) -> Result<(), ZoneError> {
        self.write_runs(&[(page, buf)])
    }

    /// Writes runs of whole pages, each `(first page, bytes)`, with the commands of all of them
    /// in flight together: one wait for the device where one run after another would wait
    /// once per run (an Icache write-back of scattered blocks). Through the worker's own queue
    /// the controller takes the data straight from the runs when it can, as [`Zone::read`].
    pub fn write_runs(&self, runs: &[(u64, &[u8])]) -> Result<(), ZoneError> {
        let mut by_lba = Vec::with_capacity(runs.len());
        for &(page, buf) in runs.iter().filter(|(_, b)| !b.is_empty()) {
            by_lba.push((self.lba(page, buf.len())?, buf));
        }
        if by_lba.is_empty() {
            return Ok(());
        }
        let (host, direct) = self.path(by_lba.iter().map(|(_, b)| &b[..]));
        match host {
            Some(h) if direct => {
                let reqs: Vec<(u64, &[u8])> = by_lba
                    .iter()
                    .flat_map(|&(lba, buf)| {
                        buf.chunks(DIRECT_CHUNK)
                            .enumerate()
                            .map(move |(i, c)| (self.lba_at(lba, i * DIRECT_CHUNK), c))
                    })
                    .collect();
                Ok(h.write_direct_many(&reqs)?)
            }
            Some(h) => self.pipelined(h, Io::Write(&by_lba)),
            None => {
                for (lba, buf) in by_lba {
                    self.dev.write_blocks(lba, buf)?;
                }
                Ok(())
            }
        }
    }

    /// Bytes of the largest command through a bounce slot: whole pages.
    fn slot_chunk(&self) -> usize {
        (self.dev.slot_bytes() as usize / PAGE).max(1) * PAGE
    }

    /// The LBA `bytes` (whole pages) into a transfer starting at `lba`.
    fn lba_at(&self, lba: u64, bytes: usize) -> u64 {
        lba + (bytes / PAGE) as u64 * self.lbas_per_page
    }

    /// Moves whole pages through the worker's own queue and its bounce slots, one command per
    /// slot's worth of consecutive pages, keeping up to half the queue depth in flight.
    fn pipelined(&self, h: HostQueueHandle<'_>, mut io: Io<'_, '_>) -> Result<(), ZoneError> {
        let chunk = self.slot_chunk();
        // Every command: its first LBA, its run, and its bytes within the run.
        let split = |r: usize, lba: u64, len: usize| {
            (0..len)
                .step_by(chunk)
                .map(move |s| (self.lba_at(lba, s), r, s..len.min(s + chunk)))
        };
        let shape: Vec<(u64, usize)> = match &io {
            Io::Read(runs) => runs.iter().map(|(lba, b)| (*lba, b.len())).collect(),
            Io::Write(runs) => runs.iter().map(|(lba, b)| (*lba, b.len())).collect(),
        };
        let cmds: Vec<(u64, usize, Range<usize>)> = shape
            .iter()
            .enumerate()
            .flat_map(|(r, &(lba, len))| split(r, lba, len))
            .collect();
        let window = (h.depth() as usize / 2).max(1);
        let mut inflight: VecDeque<(Ticket, usize)> = VecDeque::new();
        let mut next = 0;
        let mut result = Ok(());
        while (next < cmds.len() && result.is_ok()) || !inflight.is_empty() {
            if next < cmds.len() && result.is_ok() && inflight.len() < window {
                let (at, r, bytes) = &cmds[next];
                let blocks = ((bytes.len() / PAGE) as u64 * self.lbas_per_page) as u32;
                let submitted = match &io {
                    Io::Read(..) => h.submit(false, *at, blocks, false, |_| {}),
                    Io::Write(runs) => h.submit(true, *at, blocks, false, |slot| {
                        slot.copy_from_slice(&runs[*r].1[bytes.clone()]);
                    }),
                };
                match submitted {
                    Ok(t) => inflight.push_back((t, next)),
                    Err(e) => result = Err(e.into()),
                }
                next += 1;
                continue;
            }
            let Some((t, k)) = inflight.pop_front() else {
                break;
            };
            let deadline = Instant::now() + COMMAND_TIMEOUT;
            let cqe = loop {
                if let Some(c) = h.poll(t) {
                    break Some(c);
                }
                if Instant::now() > deadline {
                    break None;
                }
                // The controller's threads share the cores with this worker.
                std::thread::yield_now();
            };
            let Some(cqe) = cqe else {
                // The slot stays reserved: the command may still land in it.
                return Err(ZoneError::Timeout(cmds[k].0));
            };
            let status = cqe.status();
            if !status.is_success() {
                let op = if matches!(io, Io::Read(..)) {
                    "read"
                } else {
                    "write"
                };
                result = result.and(Err(DeviceError::Status { op, status }.into()));
            } else if let Io::Read(runs) = &mut io {
                let (_, r, bytes) = &cmds[k];
                let n = bytes.len();
                runs[*r].1[bytes.clone()].copy_from_slice(h.slot_data(t, n));
            }
            h.release(t);
        }
        result
    }

    /// Makes all writes so far durable (NVMe Flush), through the worker's own queue if it
    /// has one.
    pub fn flush(&self) -> Result<(), ZoneError> {
        match self.queue.and_then(|q| self.dev.host_queue(q)) {
            Some(h) => Ok(h.flush()?),
            None => Ok(self.dev.flush()?),
        }
    }

    /// Adds a write of `pages` bytes (whole pages) at `page` to `batch` without copying
    /// anything now: its first bytes are `bytes` of the buffer that every later
    /// [`Zone::pump`] and [`Zone::finish`] of the batch is given (the rest zeros), copied
    /// into the command's bounce slot when it is submitted. That range of the buffer must not
    /// change until the batch completed (a log's frames, which only grow at its end); a
    /// staged copy of megabytes held a worker 0.4-0.8 ms.
    pub fn stage_shared(
        &self,
        batch: &mut WriteBehind,
        page: u64,
        bytes: Range<usize>,
        pages: usize,
    ) -> Result<(), ZoneError> {
        debug_assert!(pages.is_multiple_of(PAGE) && bytes.len() <= pages);
        let lba = self.lba(page, pages)?;
        let slot = self.slot_chunk();
        for offset in (0..pages).step_by(slot) {
            let from = (bytes.start + offset).min(bytes.end);
            let to = (from + slot).min(bytes.end);
            batch.queued.push_back(Staged::Shared {
                lba: self.lba_at(lba, offset),
                bytes: from..to,
                pages: slot.min(pages - offset),
            });
        }
        Ok(())
    }

    /// Adds a write of consecutive pages at `page` to `batch` without copying anything now:
    /// page `k` of it is the page of key `keys.start + k` that every later [`Zone::pump`] and
    /// [`Zone::finish`] of the batch is given ([`LateBytes::pages`]), copied into the
    /// command's bounce slot when it is submitted. The owner of those pages keeps each as it
    /// was when staged until the batch completed (an Icache keeps a copy of a block that
    /// changes meanwhile, and only of such a block: copying them all at staging held a worker
    /// 0.16-0.22 ms per write-back on 16 cores).
    pub fn stage_keyed(
        &self,
        batch: &mut WriteBehind,
        page: u64,
        keys: Range<u64>,
    ) -> Result<(), ZoneError> {
        let count = (keys.end - keys.start) as usize;
        let lba = self.lba(page, count * PAGE)?;
        let per_command = (self.slot_chunk() / PAGE) as u64;
        let mut first = keys.start;
        while first < keys.end {
            let end = (first + per_command).min(keys.end);
            batch.queued.push_back(Staged::Keyed {
                lba: self.lba_at(lba, (first - keys.start) as usize * PAGE),
                keys: first..end,
            });
            first = end;
        }
        Ok(())
    }

    /// [`Zone::stage_keyed`] for keys `keys` (ascending), key `k` going to page `base + k`:
    /// each run of consecutive keys is one write (a command per bounce slot of it).
    pub fn stage_keys(
        &self,
        batch: &mut WriteBehind,
        base: u64,
        keys: impl IntoIterator<Item = u64>,
    ) -> Result<(), ZoneError> {
        let mut run: Option<Range<u64>> = None;
        for k in keys {
            match &mut run {
                Some(r) if r.end == k => r.end += 1,
                _ => {
                    if let Some(r) = run.replace(k..k + 1) {
                        self.stage_keyed(batch, base + r.start, r)?;
                    }
                }
            }
        }
        match run {
            Some(r) => self.stage_keyed(batch, base + r.start, r),
            None => Ok(()),
        }
    }

    /// Adds a flush to `batch`: the writes staged before it are durable before any staged
    /// after it starts.
    pub fn stage_flush(&self, batch: &mut WriteBehind) {
        batch.queued.push_back(Staged::Flush);
    }

    /// Moves `batch` on without waiting: takes the completions that came, submits what may
    /// go (at most [`SUBMITS_PER_PUMP`] commands). Returns the batch's result once everything
    /// completed (after a failure, nothing more is submitted). A zone without a write-back
    /// queue fails the batch. `late` holds the bytes of the writes staged without them, and
    /// a write whose bytes it lacks fails the batch.
    pub fn pump(
        &self,
        batch: &mut WriteBehind,
        late: &LateBytes<'_>,
    ) -> Option<Result<(), ZoneError>> {
        let Some(h) = batch
            .queue
            .or(self.behind)
            .and_then(|q| self.dev.host_queue(q))
        else {
            batch.queued.clear();
            return Some(Err(ZoneError::NoWriteBackQueue));
        };
        let mut i = 0;
        while i < batch.inflight.len() {
            let (t, lba) = batch.inflight[i];
            let Some(cqe) = h.poll(t) else {
                i += 1;
                continue;
            };
            h.release(t);
            batch.inflight.remove(i);
            let status = cqe.status();
            if !status.is_success() && batch.error.is_none() {
                let op = if lba == FLUSH_LBA { "flush" } else { "write" };
                batch.error = Some(DeviceError::Status { op, status }.into());
            }
        }
        if batch.error.is_some() {
            batch.queued.clear();
        }
        let window = (h.depth() as usize / batch.depth_divisor).max(1);
        // A flush goes alone: nothing follows it until it completed.
        let flushing = |b: &WriteBehind| b.inflight.front().is_some_and(|&(_, l)| l == FLUSH_LBA);
        let mut submits = 0;
        while !flushing(batch) && batch.inflight.len() < window && submits < SUBMITS_PER_PUMP {
            submits += 1;
            let submitted = match batch.queued.front() {
                None => break,
                Some(Staged::Flush) if !batch.inflight.is_empty() => break,
                Some(Staged::Flush) => h.submit_flush().map(|t| (t, FLUSH_LBA)),
                Some(Staged::Shared { lba, bytes, pages }) => {
                    match late.shared.get(bytes.clone()) {
                        Some(data) => {
                            let blocks = ((pages / PAGE) as u64 * self.lbas_per_page) as u32;
                            h.submit(true, *lba, blocks, false, |slot| {
                                let (head, tail) = slot.split_at_mut(data.len());
                                head.copy_from_slice(data);
                                tail.fill(0);
                            })
                            .map(|t| (t, *lba))
                        }
                        None => Err(DeviceError::Invalid(format!(
                            "a staged write names bytes {bytes:?} of a {}-byte buffer",
                            late.shared.len()
                        ))),
                    }
                }
                Some(Staged::Keyed { lba, keys }) => {
                    let pages: Option<Vec<&[u8]>> = keys
                        .clone()
                        .map(|k| late.pages.page(k).filter(|p| p.len() == PAGE))
                        .collect();
                    match pages {
                        Some(pages) => {
                            let blocks = (pages.len() as u64 * self.lbas_per_page) as u32;
                            h.submit(true, *lba, blocks, false, |slot| {
                                for (to, from) in slot.chunks_exact_mut(PAGE).zip(&pages) {
                                    to.copy_from_slice(from);
                                }
                            })
                            .map(|t| (t, *lba))
                        }
                        None => Err(DeviceError::Invalid(format!(
                            "a staged write names keys {keys:?}, not all of them pages"
                        ))),
                    }
                }
            };
            batch.queued.pop_front();
            match submitted {
                Ok(t) => batch.inflight.push_back(t),
                Err(e) => {
                    batch.error = Some(e.into());
                    batch.queued.clear();
                }
            }
        }
        if batch.is_busy() {
            return None;
        }
        Some(batch.error.take().map_or(Ok(()), Err))
    }

    /// Drops the commands of `batch` not yet submitted and waits for those in flight (at most
    /// [`COMMAND_TIMEOUT`] without progress): the device then holds a prefix of the batch, as
    /// after a crash right there.
    pub fn abandon(&self, batch: &mut WriteBehind) -> Result<(), ZoneError> {
        batch.queued.clear();
        self.finish(batch, &LateBytes::NONE)
    }

    /// Waits for `batch` to complete (see [`Zone::pump`], and there for `late`), at most
    /// [`COMMAND_TIMEOUT`] without progress.
    pub fn finish(&self, batch: &mut WriteBehind, late: &LateBytes<'_>) -> Result<(), ZoneError> {
        let mut deadline = Instant::now() + COMMAND_TIMEOUT;
        let mut left = batch.queued.len() + batch.inflight.len();
        loop {
            if let Some(r) = self.pump(batch, late) {
                return r;
            }
            let now = batch.queued.len() + batch.inflight.len();
            if now < left {
                left = now;
                deadline = Instant::now() + COMMAND_TIMEOUT;
            } else if Instant::now() > deadline {
                // The slots stay reserved: the commands may still land in them.
                let lba = batch.inflight.front().map_or(0, |&(_, lba)| lba);
                return Err(ZoneError::Timeout(lba));
            }
            // The controller's threads share the cores with this worker.
            std::thread::yield_now();
        }
    }
}
