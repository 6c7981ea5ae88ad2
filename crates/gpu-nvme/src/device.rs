//! The host driver: brings a controller up through its admin queue, creates I/O queue pairs
//! for CPU or GPU threads, and offers the block API (`read_blocks`/`write_blocks`) that the
//! systems call instead of touching queues.
//!
//! Host I/O goes through per-slot bounce buffers in registered memory, so callers pass plain
//! slices; every command of a request is in flight at once (up to half the queue depth).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::controller::{AdminConfig, Controller, ControllerError};
use crate::cuda::{CudaError, DeviceBuffer, Gpu};
use crate::memory::{DmaRegion, HostRegion, MemoryError, RegionKind};
use crate::queue::{
    HostQueuePair, QueueDescriptor, QueueError, QueueRings, QueueState, Ticket, validate_depth,
};
use crate::spec::{
    Cns, CommandError, CompletionEntry, DEFAULT_MAX_TRANSFER, DsmRange, IdentifyController,
    IdentifyNamespace, NamespaceGeometry, PrpConfig, PrpPlan, Status, SubmissionEntry,
};

/// How long a single command may take before the driver gives up on it.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
const PAGE: usize = 4096;

/// Errors of the host driver.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// the controller refused to start or to attach a queue
    #[error(transparent)]
    Controller(#[from] ControllerError),
    /// queue set-up or a command timeout
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// DMA memory could not be allocated or registered
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// the GPU runtime failed
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// a command could not be built from the arguments
    #[error("bad command: {0}")]
    Command(#[from] CommandError),
    /// the controller completed a command with an error status
    #[error("{op} failed with NVMe status {status}")]
    Status {
        /// what was attempted
        op: &'static str,
        /// the completion's status
        status: Status,
    },
    /// an argument is out of range
    #[error("invalid argument: {0}")]
    Invalid(String),
}

/// Settings of an [`NvmeDevice`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceConfig {
    /// I/O queue pairs for host threads.
    pub io_queues: u16,
    /// Entries in each host I/O queue.
    pub queue_depth: u32,
    /// Entries in the admin queue.
    pub admin_depth: u32,
    /// Bytes in one host bounce slot (a multiple of 4 KiB): the largest single command.
    pub slot_bytes: u32,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            io_queues: 2,
            queue_depth: 64,
            admin_depth: 32,
            slot_bytes: 64 << 10,
        }
    }
}

/// A host I/O queue pair with a bounce slot (data + one PRP list page) per entry.
#[derive(Debug)]
struct HostIoQueue {
    qp: HostQueuePair,
    staging: HostRegion,
    /// The controller serves this queue on the threads that wait on it
    /// ([`Controller::serve_inline`]).
    inline: bool,
}

/// A controller brought up by the host, with its host I/O queues.
#[derive(Debug)]
pub struct NvmeDevice {
    ctrl: Arc<dyn Controller>,
    admin: HostIoQueue,
    identify: IdentifyController,
    geometry: NamespaceGeometry,
    queues: Vec<HostIoQueue>,
    next_queue: AtomicUsize,
    next_qid: AtomicUsize,
    config: DeviceConfig,
    prp: PrpConfig,
}

impl NvmeDevice {
    /// Registers an admin queue, starts the controller, identifies it and namespace 1, and
    /// creates `config.io_queues` host I/O queues.
    pub fn open(ctrl: Arc<dyn Controller>, config: DeviceConfig) -> Result<Self, DeviceError> {
        if config.io_queues == 0
            || config.slot_bytes == 0
            || !config.slot_bytes.is_multiple_of(PAGE as u32)
        {
            return Err(DeviceError::Invalid(format!(
                "{config:?}: need queues >= 1, slot a multiple of 4 KiB"
            )));
        }
        if config.io_queues >= ctrl.registers().max_io_queues() {
            return Err(DeviceError::Invalid(format!(
                "{} host queues requested; the controller supports {} in all",
                config.io_queues,
                ctrl.registers().max_io_queues()
            )));
        }
        let prp = PrpConfig::new(PAGE as u32, config.slot_bytes)
            .map_err(|e| DeviceError::Invalid(e.to_string()))?;
        let admin = host_queue(ctrl.as_ref(), 0, config.admin_depth, PAGE)?;
        let rings = admin.qp.rings();
        Arc::clone(&ctrl).start(AdminConfig {
            asq: rings.sq_iova(),
            acq: rings.cq_iova(),
            depth: config.admin_depth,
        })?;
        let mut dev = Self {
            identify: IdentifyController::default(),
            geometry: crate::spec::LbaFormat::from_block_size(512)
                .and_then(|f| NamespaceGeometry::new(f, 1))
                .map_err(|e| DeviceError::Invalid(e.to_string()))?,
            ctrl,
            admin,
            queues: Vec::new(),
            next_queue: AtomicUsize::new(0),
            next_qid: AtomicUsize::new(1),
            config,
            prp,
        };
        let page = dev.identify_page(Cns::Controller, 0)?;
        dev.identify = IdentifyController::parse(&page[..])
            .map_err(|e| DeviceError::Invalid(e.to_string()))?;
        let page = dev.identify_page(Cns::Namespace, 1)?;
        dev.geometry = IdentifyNamespace::parse(&page[..])
            .and_then(|ns| ns.geometry())
            .map_err(|e| DeviceError::Invalid(e.to_string()))?;
        for _ in 0..config.io_queues {
            let qid = dev.allocate_qid()?;
            let slot = config.slot_bytes as usize + PAGE;
            let q = host_queue(dev.ctrl.as_ref(), qid, config.queue_depth, slot)?;
            dev.create_io_queue(qid, q.qp.rings())?;
            dev.queues.push(q);
        }
        Ok(dev)
    }

    /// The controller.
    pub fn controller(&self) -> &Arc<dyn Controller> {
        &self.ctrl
    }

    /// Identify Controller data.
    pub fn identify(&self) -> &IdentifyController {
        &self.identify
    }

    /// Geometry of namespace 1.
    pub fn geometry(&self) -> NamespaceGeometry {
        self.geometry
    }

    fn allocate_qid(&self) -> Result<u16, DeviceError> {
        let qid = self.next_qid.fetch_add(1, Ordering::AcqRel);
        u16::try_from(qid)
            .ok()
            .filter(|&q| q <= self.ctrl.registers().max_io_queues())
            .ok_or_else(|| DeviceError::Invalid("the controller has no free I/O queue".into()))
    }

    fn admin_command(
        &self,
        op: &'static str,
        build: impl FnOnce(u16, u64) -> Result<SubmissionEntry, CommandError>,
    ) -> Result<CompletionEntry, DeviceError> {
        let q = &self.admin;
        let mut built = Ok(SubmissionEntry::default());
        let t = q.qp.submit_with(|cid| {
            let buf = q.staging.iova() + u64::from(cid) * PAGE as u64;
            built = build(cid, buf);
            built.unwrap_or_default()
        });
        let cqe = q.qp.wait(t, COMMAND_TIMEOUT);
        let result = cqe.map_err(DeviceError::from).and_then(|c| {
            built?;
            if c.status().is_success() {
                Ok(c)
            } else {
                Err(DeviceError::Status {
                    op,
                    status: c.status(),
                })
            }
        });
        if result.is_ok() || !matches!(result, Err(DeviceError::Queue(_))) {
            q.qp.release(t);
        }
        result
    }

    fn identify_page(&self, cns: Cns, nsid: u32) -> Result<Vec<u8>, DeviceError> {
        let mut slot = 0u16;
        self.admin_command("identify", |cid, buf| {
            slot = cid;
            SubmissionEntry::identify(cid, cns, nsid, buf)
        })?;
        // The slot is ours again only after release; the page was copied out by then in order.
        let mut page = vec![0u8; PAGE];
        // SAFETY: the admin staging region holds one page per slot; the command completed.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.admin.staging.host_ptr().add(usize::from(slot) * PAGE),
                page.as_mut_ptr(),
                PAGE,
            )
        };
        Ok(page)
    }

    /// Creates I/O CQ and SQ `qid` over `rings` (which must be registered with the controller).
    fn create_io_queue(&self, qid: u16, rings: &QueueRings) -> Result<(), DeviceError> {
        let depth = rings.depth();
        self.admin_command("create I/O CQ", |cid, _| {
            SubmissionEntry::create_io_cq(cid, qid, depth, rings.cq_iova())
        })?;
        self.admin_command("create I/O SQ", |cid, _| {
            SubmissionEntry::create_io_sq(
                cid,
                qid,
                depth,
                qid,
                rings.sq_iova(),
                crate::spec::QueuePriority::Medium,
            )
        })?;
        Ok(())
    }

    fn delete_io_queue(&self, qid: u16) -> Result<(), DeviceError> {
        self.admin_command("delete I/O SQ", |cid, _| {
            SubmissionEntry::delete_io_sq(cid, qid)
        })?;
        self.admin_command("delete I/O CQ", |cid, _| {
            SubmissionEntry::delete_io_cq(cid, qid)
        })?;
        Ok(())
    }

    fn pick_queue(&self) -> &HostIoQueue {
        let i = self.next_queue.fetch_add(1, Ordering::Relaxed) % self.queues.len();
        &self.queues[i]
    }

    fn slot_iova(&self, q: &HostIoQueue, cid: u16) -> (u64, *mut u8) {
        let stride = self.config.slot_bytes as usize + PAGE;
        let off = usize::from(cid) * stride;
        // SAFETY: cid < depth and the staging region holds depth slots of `stride` bytes.
        (q.staging.iova() + off as u64, unsafe {
            q.staging.host_ptr().add(off)
        })
    }

    /// Fills the PRPs of `sqe` for `len` bytes in the bounce slot of `cid` (lists included).
    fn slot_prps(
        &self,
        q: &HostIoQueue,
        cid: u16,
        len: u32,
        sqe: &mut SubmissionEntry,
    ) -> Result<(), DeviceError> {
        let (iova, host) = self.slot_iova(q, cid);
        let list_page = iova + u64::from(self.config.slot_bytes);
        let plan = PrpPlan::new(iova, u64::from(len), &self.prp, &[list_page])
            .map_err(|e| DeviceError::Invalid(e.to_string()))?;
        for list in &plan.lists {
            let dst = (list.addr - iova) as usize;
            for (i, e) in list.entries.iter().enumerate() {
                // SAFETY: the list page lies at the end of this slot, inside the region.
                unsafe { std::ptr::write_unaligned(host.add(dst).cast::<u64>().add(i), *e) };
            }
        }
        sqe.prp1 = plan.prp1;
        sqe.prp2 = plan.prp2;
        Ok(())
    }

    fn check_len(&self, len: usize) -> Result<(), DeviceError> {
        let lba = self.geometry.block_size() as usize;
        if len == 0 || !len.is_multiple_of(lba) {
            return Err(DeviceError::Invalid(format!(
                "length {len} is not a positive multiple of {lba}"
            )));
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes (a multiple of the LBA size) starting at block `lba`.
    pub fn read_blocks(&self, lba: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.check_len(buf.len())?;
        let block = self.geometry.block_size() as usize;
        let chunk = self.config.slot_bytes as usize;
        let q = self.pick_queue();
        let window = (q.qp.depth() as usize / 2).max(1);
        let pieces: Vec<(u64, &mut [u8])> = buf
            .chunks_mut(chunk)
            .enumerate()
            .map(|(i, c)| (lba + (i * chunk / block) as u64, c))
            .collect();
        let mut inflight: std::collections::VecDeque<(Ticket, &mut [u8])> =
            std::collections::VecDeque::new();
        let mut result = Ok(());
        for (slba, piece) in pieces {
            if inflight.len() == window {
                let (t, dst) = inflight.pop_front().unwrap_or_else(|| unreachable!());
                result = result.and(self.finish_read(q, t, dst));
            }
            let mut err = None;
            let t = q.qp.submit_with(|cid| {
                let built = SubmissionEntry::read(cid, 1, slba, (piece.len() / block) as u32, 0, 0)
                    .map_err(DeviceError::from)
                    .and_then(|mut sqe| {
                        self.slot_prps(q, cid, piece.len() as u32, &mut sqe)
                            .map(|()| sqe)
                    });
                built.unwrap_or_else(|e| {
                    err = Some(e);
                    SubmissionEntry::default()
                })
            });
            if let Some(e) = err {
                result = result.and(Err(e));
            }
            inflight.push_back((t, piece));
        }
        for (t, dst) in inflight {
            result = result.and(self.finish_read(q, t, dst));
        }
        result
    }

    fn finish_read(&self, q: &HostIoQueue, t: Ticket, dst: &mut [u8]) -> Result<(), DeviceError> {
        let cqe = self.wait_on(q, t, COMMAND_TIMEOUT)?;
        let status = cqe.status();
        if status.is_success() {
            let (_, host) = self.slot_iova(q, t.cid);
            // SAFETY: the slot holds the command's data, and it stays ours until release.
            unsafe { std::ptr::copy_nonoverlapping(host, dst.as_mut_ptr(), dst.len()) };
        }
        q.qp.release(t);
        if status.is_success() {
            Ok(())
        } else {
            Err(DeviceError::Status { op: "read", status })
        }
    }

    /// Writes `data` (a multiple of the LBA size) starting at block `lba`.
    pub fn write_blocks(&self, lba: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.check_len(data.len())?;
        let block = self.geometry.block_size() as usize;
        let chunk = self.config.slot_bytes as usize;
        let q = self.pick_queue();
        let window = (q.qp.depth() as usize / 2).max(1);
        let mut inflight = std::collections::VecDeque::new();
        let mut result = Ok(());
        for (i, piece) in data.chunks(chunk).enumerate() {
            if inflight.len() == window {
                let t = inflight.pop_front().unwrap_or_else(|| unreachable!());
                result = result.and(self.finish(q, t, "write"));
            }
            let slba = lba + (i * chunk / block) as u64;
            let mut err = None;
            let t = q.qp.submit_with(|cid| {
                let (_, host) = self.slot_iova(q, cid);
                // SAFETY: the slot is ours from submission until release.
                unsafe { std::ptr::copy_nonoverlapping(piece.as_ptr(), host, piece.len()) };
                let built =
                    SubmissionEntry::write(cid, 1, slba, (piece.len() / block) as u32, 0, 0)
                        .map_err(DeviceError::from)
                        .and_then(|mut sqe| {
                            self.slot_prps(q, cid, piece.len() as u32, &mut sqe)
                                .map(|()| sqe)
                        });
                built.unwrap_or_else(|e| {
                    err = Some(e);
                    SubmissionEntry::default()
                })
            });
            if let Some(e) = err {
                result = result.and(Err(e));
            }
            inflight.push_back(t);
        }
        for t in inflight {
            result = result.and(self.finish(q, t, "write"));
        }
        result
    }

    /// Waits for `t` on `q` (see [`HostQueuePair::wait`]); on a queue served inline this
    /// thread runs the queue's commands meanwhile, as long as no other thread is running them.
    fn wait_on(
        &self,
        q: &HostIoQueue,
        t: Ticket,
        timeout: Duration,
    ) -> Result<CompletionEntry, QueueError> {
        if !q.inline {
            return q.qp.wait(t, timeout);
        }
        let start = Instant::now();
        loop {
            if let Some(c) = q.qp.poll(t) {
                return Ok(c);
            }
            if self.ctrl.serve_inline(q.qp.qid()) > 0 {
                continue;
            }
            if start.elapsed() > timeout {
                return Err(QueueError::Timeout {
                    qid: q.qp.qid(),
                    cid: t.cid,
                });
            }
            // Another thread is running the queue's commands (ours among them, perhaps).
            std::thread::yield_now();
        }
    }

    fn finish(&self, q: &HostIoQueue, t: Ticket, op: &'static str) -> Result<(), DeviceError> {
        let cqe = self.wait_on(q, t, COMMAND_TIMEOUT)?;
        q.qp.release(t);
        let status = cqe.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(DeviceError::Status { op, status })
        }
    }

    /// Lets commands name any memory of this process in their PRPs (the controller's DMA map
    /// in host pass-through, see [`DmaMap`](crate::memory::DmaMap)), so that
    /// [`HostQueueHandle::read_direct`] can read into its caller's buffer. Only for a
    /// controller that runs in this process.
    pub fn enable_direct_host_dma(&self) {
        self.ctrl.dma().set_host_pass_through(true);
    }

    /// Whether [`enable_direct_host_dma`](Self::enable_direct_host_dma) was called: direct
    /// reads are possible.
    pub fn direct_host_dma(&self) -> bool {
        self.ctrl.dma().host_pass_through()
    }

    /// Bytes of one host bounce slot: the most one command through a slot moves.
    pub fn slot_bytes(&self) -> u32 {
        self.config.slot_bytes
    }

    /// Host I/O queue `index` (for benchmarks that keep many commands in flight).
    pub fn host_queue(&self, index: usize) -> Option<HostQueueHandle<'_>> {
        self.queues
            .get(index)
            .map(|q| HostQueueHandle { dev: self, q })
    }

    /// The host queue of the calling thread: a thread keeps to one queue (threads take
    /// consecutive queues in the order they first ask), as blk-mq maps a CPU to one hardware
    /// queue, so that one thread's back-to-back commands find the same controller worker busy
    /// polling for them.
    pub fn thread_queue(&self) -> HostQueueHandle<'_> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        thread_local! {
            static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
        }
        let i = INDEX.with(|i| *i) % self.queues.len();
        HostQueueHandle {
            dev: self,
            q: &self.queues[i],
        }
    }

    /// [`HostQueueHandle::read_direct_many`] dealt over every host queue (request `i` to queue
    /// `i mod queues`), all queues in flight together: a controller whose workers own
    /// different queues serves them in parallel, where one queue keeps one worker busy.
    pub fn read_direct_spread(&self, reqs: &mut [(u64, &mut [u8])]) -> Result<(), DeviceError> {
        let queues: Vec<HostQueueHandle<'_>> = self
            .queues
            .iter()
            .map(|q| HostQueueHandle { dev: self, q })
            .collect();
        direct_over(&queues, Direction::Read, &read_targets(reqs))
    }

    /// Number of host I/O queues.
    pub fn host_queues(&self) -> usize {
        self.queues.len()
    }

    /// Submits a caller-built I/O command as it is (PRPs included) and returns its completion.
    /// The command id is assigned by the queue. For tests and tools that need exact commands.
    pub fn submit_raw(&self, sqe: SubmissionEntry) -> Result<CompletionEntry, DeviceError> {
        let q = self.pick_queue();
        let t = q.qp.submit(sqe);
        let cqe = self.wait_on(q, t, COMMAND_TIMEOUT)?;
        q.qp.release(t);
        Ok(cqe)
    }

    /// Makes everything written so far durable.
    pub fn flush(&self) -> Result<(), DeviceError> {
        let q = self.pick_queue();
        let t = q.qp.submit(SubmissionEntry::flush(0, 1)?);
        self.finish(q, t, "flush")
    }

    /// Zeroes `blocks` blocks at `lba` without transferring data.
    pub fn write_zeroes(&self, lba: u64, blocks: u32) -> Result<(), DeviceError> {
        let q = self.pick_queue();
        let t =
            q.qp.submit(SubmissionEntry::write_zeroes(0, 1, lba, blocks)?);
        self.finish(q, t, "write zeroes")
    }

    /// Deallocates (trims) the given `(lba, blocks)` ranges: they read back as zeros.
    pub fn deallocate(&self, ranges: &[(u64, u32)]) -> Result<(), DeviceError> {
        if ranges.is_empty() || ranges.len() > 256 {
            return Err(DeviceError::Invalid(format!(
                "{} ranges: 1..=256 allowed",
                ranges.len()
            )));
        }
        let q = self.pick_queue();
        let mut err = None;
        let t = q.qp.submit_with(|cid| {
            let (iova, host) = self.slot_iova(q, cid);
            for (i, &(slba, blocks)) in ranges.iter().enumerate() {
                match DsmRange::new(slba, blocks) {
                    // SAFETY: 256 ranges of 16 bytes fit the slot, which is ours until release.
                    Ok(r) => unsafe {
                        std::ptr::copy_nonoverlapping(r.to_bytes().as_ptr(), host.add(i * 16), 16)
                    },
                    Err(e) => err = Some(DeviceError::from(e)),
                }
            }
            SubmissionEntry::dataset_management_deallocate(cid, 1, ranges.len() as u32, iova)
                .unwrap_or_default()
        });
        let result = self.finish(q, t, "deallocate");
        match err {
            Some(e) => Err(e),
            None => result,
        }
    }

    /// Creates `count` I/O queue pairs for GPU threads (see [`GpuQueues`]).
    pub fn create_gpu_queues(
        &self,
        gpu: &Gpu,
        count: u16,
        depth: u32,
        slot_bytes: u32,
    ) -> Result<GpuQueues, DeviceError> {
        let log2 = validate_depth(depth)?;
        if depth < 64 {
            return Err(DeviceError::Invalid(
                "GPU queues need a depth of at least 64 (a warp submits 32)".into(),
            ));
        }
        if slot_bytes == 0 || !slot_bytes.is_multiple_of(512) {
            return Err(DeviceError::Invalid(
                "bounce slots must be a positive multiple of 512 bytes".into(),
            ));
        }
        let regs = self.ctrl.registers();
        let protocol_bytes = size_of::<QueueState>() + 3 * 4 * depth as usize;
        let mut queues = Vec::with_capacity(usize::from(count));
        let mut descriptors = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let qid = self.allocate_qid()?;
            let rings = QueueRings::new(depth, Some(gpu))?;
            self.ctrl.dma().register_host(rings.region())?;
            let staging = HostRegion::new(depth as usize * slot_bytes as usize, Some(gpu))?;
            self.ctrl.dma().register_host(&staging)?;
            let protocol = DeviceBuffer::new(gpu, protocol_bytes)?;
            self.create_io_queue(qid, &rings)?;
            let (sq, cq) = rings
                .gpu_addrs()
                .ok_or_else(|| DeviceError::Invalid("rings are not mapped".into()))?;
            let (sq_db, cq_db) = regs.gpu_doorbells(qid).ok_or_else(|| {
                DeviceError::Invalid("doorbells are not mapped into the GPU".into())
            })?;
            let p = protocol.device_ptr();
            descriptors.push(QueueDescriptor {
                sq,
                cq,
                sq_doorbell: sq_db,
                cq_doorbell: cq_db,
                state: p,
                turns: p + size_of::<QueueState>() as u64,
                sq_marks: p + size_of::<QueueState>() as u64 + 4 * u64::from(depth),
                cq_marks: p + size_of::<QueueState>() as u64 + 8 * u64::from(depth),
                staging: staging.gpu_ptr().unwrap_or_default(),
                staging_iova: staging.iova(),
                depth,
                depth_log2: log2,
                qid: u32::from(qid),
                nsid: 1,
                staging_slot_bytes: slot_bytes,
                lba_shift: self.geometry.block_size().trailing_zeros(),
            });
            queues.push(GpuQueue {
                qid,
                rings,
                staging,
                _protocol: protocol,
            });
        }
        let bytes: Vec<u8> = descriptors.iter().flat_map(descriptor_bytes).collect();
        let mut table = DeviceBuffer::new(gpu, bytes.len())?;
        table.copy_from_host(0, &bytes)?;
        Ok(GpuQueues {
            queues,
            descriptors,
            table,
        })
    }

    /// Deletes GPU queues (after the kernels that used them have finished).
    pub fn delete_gpu_queues(&self, queues: GpuQueues) -> Result<(), DeviceError> {
        for q in &queues.queues {
            self.delete_io_queue(q.qid)?;
            self.ctrl.dma().unregister(q.rings.region().iova());
            self.ctrl.dma().unregister(q.staging.iova());
        }
        Ok(())
    }

    /// Allocates host memory registered with the controller (for commands built by hand).
    pub fn alloc_dma(&self, len: usize) -> Result<DmaBuffer, DeviceError> {
        DmaBuffer::new(Arc::clone(&self.ctrl), len)
    }

    /// Makes GPU memory reachable by PRPs (for transfers straight into GPU memory).
    pub fn register_gpu_memory(&self, buffer: &DeviceBuffer) -> Result<(), DeviceError> {
        self.ctrl.dma().register(DmaRegion {
            base: buffer.device_ptr(),
            len: buffer.len() as u64,
            kind: RegionKind::Device,
        })?;
        Ok(())
    }
}

impl Drop for NvmeDevice {
    fn drop(&mut self) {
        for q in &self.queues {
            if let Err(e) = self.delete_io_queue(q.qp.qid()) {
                tracing::warn!("deleting queue {}: {e}", q.qp.qid());
            }
        }
        self.ctrl.stop();
    }
}

/// The way data moves in a direct command.
#[derive(Clone, Copy)]
enum Direction {
    Read,
    Write,
}

impl Direction {
    fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

/// The `(lba, buffer, bytes)` of direct reads into `reqs`' buffers.
fn read_targets(reqs: &mut [(u64, &mut [u8])]) -> Vec<(u64, *mut u8, usize)> {
    reqs.iter_mut()
        .map(|(lba, b)| (*lba, b.as_mut_ptr(), b.len()))
        .collect()
}

/// Direct commands for `reqs` (`(lba, buffer, bytes)`, buffers that the caller keeps
/// borrowed, mutably for reads, for the whole call), request `i` on queue `i mod queues`, up
/// to half of each queue's depth in flight; returns once every command has completed. Every
/// request is checked before the first is sent; the first failure is returned after all of
/// them have completed.
fn direct_over(
    queues: &[HostQueueHandle<'_>],
    dir: Direction,
    reqs: &[(u64, *mut u8, usize)],
) -> Result<(), DeviceError> {
    let Some(first) = queues.first() else {
        return Err(DeviceError::Invalid("no host queue".into()));
    };
    for &(_, addr, len) in reqs {
        first.check_direct(addr, len)?;
    }
    let mut inflight: Vec<std::collections::VecDeque<(Ticket, u64)>> = queues
        .iter()
        .map(|_| std::collections::VecDeque::new())
        .collect();
    let mut result = Ok(());
    for (i, &(lba, addr, len)) in reqs.iter().enumerate() {
        let k = i % queues.len();
        let (q, pending) = (&queues[k], &mut inflight[k]);
        let window = (q.q.qp.depth() as usize / 2).max(1);
        if pending.len() == window
            && let Some((t, lba)) = pending.pop_front()
        {
            result = result.and(q.finish_direct(t, dir, lba));
        }
        let (t, built) = q.submit_direct(dir, lba, addr, len);
        result = result.and(built);
        pending.push_back((t, lba));
    }
    for (q, pending) in queues.iter().zip(inflight) {
        for (t, lba) in pending {
            result = result.and(q.finish_direct(t, dir, lba));
        }
    }
    result
}

/// Allocates rings and bounce slots for a host queue, registers them, and builds the pair.
fn host_queue(
    ctrl: &dyn Controller,
    qid: u16,
    depth: u32,
    slot: usize,
) -> Result<HostIoQueue, DeviceError> {
    let rings = QueueRings::new(depth, None)?;
    ctrl.dma().register_host(rings.region())?;
    let staging = HostRegion::new(depth as usize * slot, None)?;
    ctrl.dma().register_host(&staging)?;
    let regs = ctrl.registers();
    // SAFETY: the doorbells belong to the controller's register file, which lives as long as
    // the controller, and the device holds the controller for as long as it holds the queue.
    let qp = unsafe { HostQueuePair::new(qid, rings, regs.sq_tail(qid)?, regs.cq_head(qid)?)? };
    // A queue served inline has no controller thread to wake.
    let inline = ctrl.serves_inline(qid);
    let qp = if inline {
        qp
    } else {
        qp.with_bell(Arc::clone(regs.bell(qid)))
    };
    Ok(HostIoQueue {
        qp,
        staging,
        inline,
    })
}

fn descriptor_bytes(d: &QueueDescriptor) -> Vec<u8> {
    let words = [
        d.sq,
        d.cq,
        d.sq_doorbell,
        d.cq_doorbell,
        d.state,
        d.turns,
        d.sq_marks,
        d.cq_marks,
        d.staging,
        d.staging_iova,
    ];
    let mut out: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    for w in [
        d.depth,
        d.depth_log2,
        d.qid,
        d.nsid,
        d.staging_slot_bytes,
        d.lba_shift,
    ] {
        out.extend_from_slice(&w.to_le_bytes());
    }
    debug_assert_eq!(out.len(), size_of::<QueueDescriptor>());
    out
}

/// One GPU queue pair's memory.
#[derive(Debug)]
struct GpuQueue {
    qid: u16,
    rings: QueueRings,
    staging: HostRegion,
    _protocol: DeviceBuffer,
}

/// I/O queue pairs for GPU threads, and the table of their descriptors in GPU memory that
/// kernels receive (`const nvme_queue*`).
#[derive(Debug)]
pub struct GpuQueues {
    queues: Vec<GpuQueue>,
    descriptors: Vec<QueueDescriptor>,
    table: DeviceBuffer,
}

impl GpuQueues {
    /// GPU address of the `nvme_queue` array.
    pub fn table_ptr(&self) -> u64 {
        self.table.device_ptr()
    }

    /// Number of queues.
    pub fn len(&self) -> usize {
        self.queues.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// The descriptors (as passed to the GPU).
    pub fn descriptors(&self) -> &[QueueDescriptor] {
        &self.descriptors
    }
}

/// A registered DMA buffer (for commands built by hand).
#[derive(Debug)]
pub struct DmaBuffer {
    region: HostRegion,
    ctrl: Arc<dyn Controller>,
}

impl DmaBuffer {
    pub(crate) fn new(ctrl: Arc<dyn Controller>, len: usize) -> Result<Self, DeviceError> {
        let region = HostRegion::new(len, None)?;
        ctrl.dma().register_host(&region)?;
        Ok(Self { region, ctrl })
    }

    /// Bus address of the first byte.
    pub fn iova(&self) -> u64 {
        self.region.iova()
    }

    /// Host address of the first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.region.host_ptr()
    }
}

impl Drop for DmaBuffer {
    fn drop(&mut self) {
        self.ctrl.dma().unregister(self.region.iova());
    }
}

/// One host I/O queue with its bounce slots, for callers that keep many commands in flight.
#[derive(Debug, Clone, Copy)]
pub struct HostQueueHandle<'a> {
    dev: &'a NvmeDevice,
    q: &'a HostIoQueue,
}

impl HostQueueHandle<'_> {
    /// Submits a read or write of `blocks` blocks at `lba` through the command's bounce slot;
    /// `fill` writes a write's data into the slot first. With `no_data` the PRPs stay zero
    /// (for a controller that moves no data).
    pub fn submit(
        &self,
        write: bool,
        lba: u64,
        blocks: u32,
        no_data: bool,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Ticket, DeviceError> {
        let len = blocks as usize * self.dev.geometry.block_size() as usize;
        if len == 0 || len > self.dev.config.slot_bytes as usize {
            return Err(DeviceError::Invalid(format!(
                "{len} bytes do not fit a {}-byte slot",
                self.dev.config.slot_bytes
            )));
        }
        let mut err = None;
        let t = self.q.qp.submit_with(|cid| {
            let built = if write {
                SubmissionEntry::write(cid, 1, lba, blocks, 0, 0)
            } else {
                SubmissionEntry::read(cid, 1, lba, blocks, 0, 0)
            };
            let mut sqe = built.unwrap_or_else(|e| {
                err = Some(DeviceError::from(e));
                SubmissionEntry::default()
            });
            if !no_data {
                if write {
                    let (_, host) = self.dev.slot_iova(self.q, cid);
                    // SAFETY: the slot is ours from submission until release.
                    fill(unsafe { std::slice::from_raw_parts_mut(host, len) });
                }
                if let Err(e) = self.dev.slot_prps(self.q, cid, len as u32, &mut sqe) {
                    err = Some(e);
                }
            }
            sqe
        });
        match err {
            Some(e) => {
                // Nothing valid was built: wait the placeholder out so the slot comes back.
                let _ = self.dev.wait_on(self.q, t, COMMAND_TIMEOUT);
                self.q.qp.release(t);
                Err(e)
            }
            None => Ok(t),
        }
    }

    /// Reads `buf.len()` bytes (a multiple of the block size, at most the largest transfer)
    /// from block `lba` straight into `buf`: the command's PRPs name `buf` itself, so no bounce
    /// slot and no copy (needs [`NvmeDevice::enable_direct_host_dma`] and a 4-byte aligned
    /// `buf`). A PRP list, when `buf` spans more than two pages, goes into the command's slot.
    ///
    /// Waits for the completion however long it takes: the controller may write into `buf`
    /// until then, so returning earlier would hand memory it still writes to the caller (a
    /// warning is logged at every [`COMMAND_TIMEOUT`]).
    pub fn read_direct(&self, lba: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.check_direct(buf.as_ptr(), buf.len())?;
        let (t, built) = self.submit_direct(Direction::Read, lba, buf.as_mut_ptr(), buf.len());
        let done = self.finish_direct(t, Direction::Read, lba);
        built.and(done)
    }

    /// [`read_direct`](Self::read_direct) of every `(first block, buffer)` of `reqs`, up to
    /// half the queue depth in flight at once. Every request is checked before the first is
    /// sent; the first failure is returned after all of them have completed.
    pub fn read_direct_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Result<(), DeviceError> {
        direct_over(
            std::slice::from_ref(self),
            Direction::Read,
            &read_targets(reqs),
        )
    }

    /// Writes every `(first block, data)` of `reqs` with the commands' PRPs naming the data
    /// itself: no bounce slot and no copy (the conditions of
    /// [`read_direct`](Self::read_direct) apply), up to half the queue depth in flight. Waits
    /// for every command, however long it takes, since the controller reads the data until
    /// then; the first failure is returned after all of them have completed.
    pub fn write_direct_many(&self, reqs: &[(u64, &[u8])]) -> Result<(), DeviceError> {
        let raw: Vec<(u64, *mut u8, usize)> = reqs
            .iter()
            // The controller only reads through a write's PRPs.
            .map(|(lba, b)| (*lba, b.as_ptr().cast_mut(), b.len()))
            .collect();
        direct_over(std::slice::from_ref(self), Direction::Write, &raw)
    }

    /// Refuses a direct read into `buf` that [`read_direct`](Self::read_direct) cannot send.
    fn check_direct(&self, addr: *const u8, len: usize) -> Result<(), DeviceError> {
        if !self.dev.ctrl.dma().host_pass_through() {
            return Err(DeviceError::Invalid(
                "direct reads and writes need enable_direct_host_dma".into(),
            ));
        }
        self.dev.check_len(len)?;
        let addr = addr as u64;
        if !addr.is_multiple_of(4) || len > DEFAULT_MAX_TRANSFER as usize {
            return Err(DeviceError::Invalid(format!(
                "direct transfer of {len} bytes at {addr:#x}: not dword aligned or over \
                 {DEFAULT_MAX_TRANSFER} bytes"
            )));
        }
        Ok(())
    }

    /// Submits a read or write of the `len` bytes at `addr` (a buffer checked by
    /// [`check_direct`](Self::check_direct) that stays borrowed until the command completes)
    /// at `lba`, whose PRPs name the buffer; a command that could not be built goes out as a
    /// placeholder, and its error comes back with the ticket.
    fn submit_direct(
        &self,
        dir: Direction,
        lba: u64,
        addr: *mut u8,
        len: usize,
    ) -> (Ticket, Result<(), DeviceError>) {
        let addr = addr as u64;
        let blocks = (len / self.dev.geometry.block_size() as usize) as u32;
        let mut built = Ok(());
        let t = self.q.qp.submit_with(|cid| {
            let (slot_iova, slot_host) = self.dev.slot_iova(self.q, cid);
            let list_page = slot_iova + u64::from(self.dev.config.slot_bytes);
            let sqe = match dir {
                Direction::Read => SubmissionEntry::read(cid, 1, lba, blocks, 0, 0),
                Direction::Write => SubmissionEntry::write(cid, 1, lba, blocks, 0, 0),
            }
            .map_err(DeviceError::from)
            .and_then(|sqe| {
                PrpPlan::new(addr, len as u64, &PrpConfig::default(), &[list_page])
                    .map(|plan| (sqe, plan))
                    .map_err(|e| DeviceError::Invalid(e.to_string()))
            });
            match sqe {
                Ok((mut sqe, plan)) => {
                    for list in &plan.lists {
                        let at = (list.addr - slot_iova) as usize;
                        for (i, e) in list.entries.iter().enumerate() {
                            // SAFETY: the list page lies at the end of this slot, inside the
                            // registered region, and the slot is ours until release.
                            unsafe {
                                std::ptr::write_unaligned(
                                    slot_host.add(at).cast::<u64>().add(i),
                                    *e,
                                );
                            }
                        }
                    }
                    sqe.prp1 = plan.prp1;
                    sqe.prp2 = plan.prp2;
                    sqe
                }
                Err(e) => {
                    built = Err(e);
                    SubmissionEntry::default()
                }
            }
        });
        (t, built)
    }

    /// Waits for a direct command for as long as it takes (see
    /// [`read_direct`](Self::read_direct)), frees its slot and returns its status.
    fn finish_direct(&self, t: Ticket, dir: Direction, lba: u64) -> Result<(), DeviceError> {
        let op = dir.name();
        let cqe = loop {
            match self.dev.wait_on(self.q, t, COMMAND_TIMEOUT) {
                Ok(c) => break c,
                Err(e) => tracing::warn!("direct {op} of block {lba} still in flight: {e}"),
            }
        };
        self.q.qp.release(t);
        let status = cqe.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(DeviceError::Status { op, status })
        }
    }

    /// Submits a Flush through this queue: once it completes, every write that completed
    /// before it was submitted is durable (NVMe 1.4 §6.8, whichever queue carried the write).
    pub fn submit_flush(&self) -> Result<Ticket, DeviceError> {
        Ok(self.q.qp.submit(SubmissionEntry::flush(0, 1)?))
    }

    /// Flushes through this queue and waits for it (see [`submit_flush`](Self::submit_flush)).
    pub fn flush(&self) -> Result<(), DeviceError> {
        let t = self.submit_flush()?;
        self.dev.finish(self.q, t, "flush")
    }

    /// The completion of `t`, if posted (consumes it; the slot stays reserved).
    pub fn poll(&self, t: Ticket) -> Option<CompletionEntry> {
        if let Some(c) = self.q.qp.poll(t) {
            return Some(c);
        }
        // On a queue served inline nothing runs the command unless a poll does.
        if self.q.inline && self.dev.ctrl.serve_inline(self.q.qp.qid()) > 0 {
            return self.q.qp.poll(t);
        }
        None
    }

    /// Waits for the completion of `t` (spinning first, then yielding), at most `timeout`;
    /// the slot stays reserved either way.
    pub fn wait(&self, t: Ticket, timeout: Duration) -> Result<CompletionEntry, QueueError> {
        self.dev.wait_on(self.q, t, timeout)
    }

    /// The first `len` bytes of `t`'s bounce slot (a completed read's data).
    pub fn slot_data(&self, t: Ticket, len: usize) -> &[u8] {
        let (_, host) = self.dev.slot_iova(self.q, t.cid);
        let len = len.min(self.dev.config.slot_bytes as usize);
        // SAFETY: the slot holds `slot_bytes` bytes and stays reserved until `release`.
        unsafe { std::slice::from_raw_parts(host, len) }
    }

    /// Hands `t`'s slot to the next command.
    pub fn release(&self, t: Ticket) {
        self.q.qp.release(t);
    }

    /// Entries in the queue.
    pub fn depth(&self) -> u32 {
        self.q.qp.depth()
    }
}
