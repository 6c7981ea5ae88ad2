//! NVMe queue pairs shared by CPU threads, GPU threads and a controller (BaM's protocol).
//!
//! Memory layout, identical in Rust and in `cuda/nvme.cuh`:
//! - the **rings**: `depth` 64-byte SQEs and `depth` 16-byte CQEs, page aligned, in host memory
//!   (page-locked and mapped into the GPU when GPU threads use the queue), plus the controller's
//!   doorbell words. This is all a controller sees, exactly as on real hardware.
//! - the **protocol state** of the submitters and pollers ([`QueueState`] and three `u32`
//!   arrays of `depth` entries: `turns`, `sq_marks`, `cq_marks`). It lives in host memory for a
//!   queue used by CPU threads and in GPU memory for one used by GPU threads (the GPU's atomics
//!   then stay on the device).
//!
//! Submission (multi-producer, by tickets): `t = sq_ticket.fetch_add(1)`, slot `t & (depth-1)`,
//! round `t >> log2(depth)`. The submitter waits until `turns[slot] == round` (the previous user
//! of the slot has consumed its completion, so the command id, which is the slot index, is free)
//! and until `t < cq_head + depth - 1` (so the SQ never looks empty when full and the CQ can
//! never overflow), writes the SQE, and sets `sq_marks[slot]`. Whoever wins the tail lock walks
//! consecutive marked slots and rings the SQ doorbell once for all of them.
//!
//! Completion: a poller scans the CQ from `cq_head` for its command id with the expected phase
//! (`1` on even passes, `0` on odd ones), marks the entry consumed, hands the slot to the next
//! round, and whoever wins the head lock advances `cq_head` over consecutive consumed entries
//! and rings the CQ doorbell once.
//!
//! Both locks are try-locks: a loser leaves its mark for the winner, and the winner looks at the
//! next mark once more after unlocking (with sequentially consistent fences on both sides), so
//! no mark is ever left behind.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

use common::bell::Bell;
use crossbeam_utils::Backoff;

use crate::memory::{HostRegion, MemoryError};
use crate::spec::{CompletionEntry, SubmissionEntry};

/// Polls a waiter spins through before it starts yielding the CPU: a few microseconds, about
/// one command of a RAM-backed controller, so a waiter for a fast command never pays a
/// scheduler round trip (a yield costs as much as such a command).
pub const SPIN_POLLS: u32 = 1 << 10;

/// Size of one submission queue entry.
pub const SQE_BYTES: usize = 64;
/// Size of one completion queue entry.
pub const CQE_BYTES: usize = 16;
/// Smallest queue depth accepted (a GPU warp submits 32 commands at once).
pub const MIN_DEPTH: u32 = 2;
/// Largest queue depth (NVMe's limit is 65,536 entries; command ids are slot indices).
pub const MAX_DEPTH: u32 = 65_536;

/// Errors of queue construction and use.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// the depth is not a power of two within limits
    #[error("queue depth {0} must be a power of two in {MIN_DEPTH}..={MAX_DEPTH}")]
    BadDepth(u32),
    /// memory for the queue could not be allocated
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// a wait for a completion ran out of time
    #[error("timed out waiting for command {cid} on queue {qid}")]
    Timeout {
        /// queue id
        qid: u16,
        /// command id
        cid: u16,
    },
}

/// Protocol counters of one queue pair; each group on its own cache line.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct QueueState {
    /// Next submission ticket (unbounded).
    pub sq_ticket: AtomicU64,
    _pad0: [u64; 7],
    /// Published SQ tail (unbounded); written under `sq_tail_lock`.
    pub sq_tail: AtomicU64,
    /// Try-lock of the tail walker.
    pub sq_tail_lock: AtomicU32,
    _pad1: [u32; 13],
    /// Consumed CQ head (unbounded); written under `cq_head_lock`.
    pub cq_head: AtomicU64,
    /// Try-lock of the head walker.
    pub cq_head_lock: AtomicU32,
    _pad2: [u32; 13],
}

const _: () = {
    assert!(size_of::<QueueState>() == 192);
    assert!(std::mem::offset_of!(QueueState, sq_ticket) == 0);
    assert!(std::mem::offset_of!(QueueState, sq_tail) == 64);
    assert!(std::mem::offset_of!(QueueState, sq_tail_lock) == 72);
    assert!(std::mem::offset_of!(QueueState, cq_head) == 128);
    assert!(std::mem::offset_of!(QueueState, cq_head_lock) == 136);
};

/// Everything GPU code needs to use a queue pair, as addresses in the GPU's address space.
/// Passed to kernels by value or in an array; mirrored by `struct nvme_queue` in `nvme.cuh`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDescriptor {
    /// SQ ring (`depth` × 64 bytes).
    pub sq: u64,
    /// CQ ring (`depth` × 16 bytes).
    pub cq: u64,
    /// SQ tail doorbell (`u32`).
    pub sq_doorbell: u64,
    /// CQ head doorbell (`u32`).
    pub cq_doorbell: u64,
    /// [`QueueState`].
    pub state: u64,
    /// `u32[depth]`: the round allowed to use each slot.
    pub turns: u64,
    /// `u32[depth]`: written SQEs awaiting the doorbell.
    pub sq_marks: u64,
    /// `u32[depth]`: consumed CQEs awaiting the head.
    pub cq_marks: u64,
    /// Bounce slots for data (`depth` × `staging_slot_bytes`) as the GPU addresses them, or 0.
    pub staging: u64,
    /// The same bounce slots as the controller addresses them (their bus address).
    pub staging_iova: u64,
    /// Entries per ring (a power of two).
    pub depth: u32,
    /// log2 of `depth`.
    pub depth_log2: u32,
    /// Queue id (1-based for I/O queues).
    pub qid: u32,
    /// Namespace the block API addresses.
    pub nsid: u32,
    /// Bytes in one bounce slot.
    pub staging_slot_bytes: u32,
    /// log2 of the namespace's LBA size.
    pub lba_shift: u32,
}

const _: () = {
    assert!(size_of::<QueueDescriptor>() == 104);
    assert!(std::mem::offset_of!(QueueDescriptor, staging) == 64);
    assert!(std::mem::offset_of!(QueueDescriptor, staging_iova) == 72);
    assert!(std::mem::offset_of!(QueueDescriptor, depth) == 80);
    assert!(std::mem::offset_of!(QueueDescriptor, qid) == 88);
    assert!(std::mem::offset_of!(QueueDescriptor, staging_slot_bytes) == 96);
    assert!(std::mem::offset_of!(QueueDescriptor, lba_shift) == 100);
};

/// Checks a queue depth.
pub fn validate_depth(depth: u32) -> Result<u32, QueueError> {
    if !(MIN_DEPTH..=MAX_DEPTH).contains(&depth) || !depth.is_power_of_two() {
        return Err(QueueError::BadDepth(depth));
    }
    Ok(depth.trailing_zeros())
}

/// Expected phase tag of the CQ entry with unbounded index `index`.
pub fn expected_phase(index: u64, depth_log2: u32) -> bool {
    (index >> depth_log2) & 1 == 0
}

/// The memory of one queue pair's rings (what the controller sees).
#[derive(Debug)]
pub struct QueueRings {
    region: HostRegion,
    depth: u32,
}

impl QueueRings {
    /// Allocates page-aligned SQ and CQ rings of `depth` entries (mapped into `gpu` if given).
    pub fn new(depth: u32, gpu: Option<&crate::cuda::Gpu>) -> Result<Self, QueueError> {
        validate_depth(depth)?;
        let region = HostRegion::new(Self::cq_offset(depth) + depth as usize * CQE_BYTES, gpu)?;
        Ok(Self { region, depth })
    }

    fn cq_offset(depth: u32) -> usize {
        (depth as usize * SQE_BYTES).next_multiple_of(4096)
    }

    /// Entries per ring.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Bus address of the SQ ring (the PRP of Create I/O SQ).
    pub fn sq_iova(&self) -> u64 {
        self.region.iova()
    }

    /// Bus address of the CQ ring (the PRP of Create I/O CQ).
    pub fn cq_iova(&self) -> u64 {
        self.region.iova() + Self::cq_offset(self.depth) as u64
    }

    /// The region, to register with a controller's DMA map.
    pub fn region(&self) -> &HostRegion {
        &self.region
    }

    /// GPU addresses of the two rings, when mapped.
    pub fn gpu_addrs(&self) -> Option<(u64, u64)> {
        let base = self.region.gpu_ptr()?;
        Some((base, base + Self::cq_offset(self.depth) as u64))
    }

    fn sqe_ptr(&self, slot: u32) -> *mut SubmissionEntry {
        // SAFETY: slot < depth, so the pointer stays inside the SQ ring of the region.
        unsafe { self.region.host_ptr().add(slot as usize * SQE_BYTES).cast() }
    }

    fn cqe_words(&self, slot: u32) -> &[AtomicU32; 4] {
        let off = Self::cq_offset(self.depth) + slot as usize * CQE_BYTES;
        // SAFETY: the CQE lies inside the region, is 16-byte aligned, lives as long as `self`,
        // and is only ever accessed atomically by host code.
        unsafe { &*self.region.host_ptr().add(off).cast::<[AtomicU32; 4]>() }
    }
}

/// Reads the CQE at `slot` of a CQ ring through atomics: dword 3 (cid, phase, status) first
/// with acquire, so the other dwords, written before it, are visible.
pub(crate) fn read_cqe(words: &[AtomicU32; 4]) -> CompletionEntry {
    let dw3 = words[3].load(Ordering::Acquire);
    let mut bytes = [0u8; CQE_BYTES];
    for (i, w) in words[..3].iter().enumerate() {
        bytes[i * 4..i * 4 + 4].copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    bytes[12..].copy_from_slice(&dw3.to_le_bytes());
    CompletionEntry::from_bytes(&bytes)
}

/// Posts a CQE into a CQ ring: dwords 0-2 first, then dword 3 (holding cid and phase) with
/// release, so a poller that sees the new phase sees the whole entry.
pub(crate) fn write_cqe(words: &[AtomicU32; 4], cqe: &CompletionEntry) {
    let bytes = cqe.to_bytes();
    for (i, w) in words[..3].iter().enumerate() {
        w.store(
            u32::from_le_bytes([
                bytes[i * 4],
                bytes[i * 4 + 1],
                bytes[i * 4 + 2],
                bytes[i * 4 + 3],
            ]),
            Ordering::Relaxed,
        );
    }
    words[3].store(
        u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]),
        Ordering::Release,
    );
}

/// A claimed submission: the slot, the round, and the command id (= the slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    /// Unbounded ticket number.
    pub ticket: u64,
    /// Command id written into the SQE.
    pub cid: u16,
}

/// A queue pair used by host threads: any number of threads submit and poll concurrently.
#[derive(Debug)]
pub struct HostQueuePair {
    rings: QueueRings,
    protocol: HostRegion,
    sq_doorbell: *const AtomicU32,
    cq_doorbell: *const AtomicU32,
    /// Rung after each SQ doorbell write (a software controller may sleep on it).
    bell: Option<Arc<Bell>>,
    qid: u16,
    depth_log2: u32,
}

// SAFETY: all shared state is reached through atomics; the doorbell pointers point into the
// controller's register region, which outlives the queue (the driver holds it).
unsafe impl Send for HostQueuePair {}
// SAFETY: as above.
unsafe impl Sync for HostQueuePair {}

impl HostQueuePair {
    /// Builds a queue pair over `rings`, ringing the given doorbells.
    ///
    /// # Safety
    /// `sq_doorbell` and `cq_doorbell` must point to live, aligned `u32` doorbells that outlive
    /// the queue pair.
    pub unsafe fn new(
        qid: u16,
        rings: QueueRings,
        sq_doorbell: *const AtomicU32,
        cq_doorbell: *const AtomicU32,
    ) -> Result<Self, QueueError> {
        let depth = rings.depth();
        let depth_log2 = validate_depth(depth)?;
        let protocol = HostRegion::new(size_of::<QueueState>() + 3 * 4 * depth as usize, None)?;
        Ok(Self {
            rings,
            protocol,
            sq_doorbell,
            cq_doorbell,
            bell: None,
            qid,
            depth_log2,
        })
    }

    /// Rings `bell` after every SQ doorbell write, so that a controller thread asleep on it
    /// sees the new commands.
    pub fn with_bell(mut self, bell: Arc<Bell>) -> Self {
        self.bell = Some(bell);
        self
    }

    /// Queue id.
    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// Entries per ring.
    pub fn depth(&self) -> u32 {
        self.rings.depth()
    }

    /// The rings (for registration with a controller).
    pub fn rings(&self) -> &QueueRings {
        &self.rings
    }

    fn state(&self) -> &QueueState {
        // SAFETY: the protocol region starts with a zero-initialised, 4096-aligned QueueState
        // (all-zero is a valid state) and lives as long as `self`.
        unsafe { &*self.protocol.host_ptr().cast::<QueueState>() }
    }

    fn word(&self, array: usize, slot: u32) -> &AtomicU32 {
        let off = size_of::<QueueState>() + (array * self.depth() as usize + slot as usize) * 4;
        // SAFETY: array < 3 and slot < depth keep the word inside the protocol region, which is
        // zeroed, 4-byte aligned at these offsets and lives as long as `self`.
        unsafe { &*self.protocol.host_ptr().add(off).cast::<AtomicU32>() }
    }

    fn turn(&self, slot: u32) -> &AtomicU32 {
        self.word(0, slot)
    }
    fn sq_mark(&self, slot: u32) -> &AtomicU32 {
        self.word(1, slot)
    }
    fn cq_mark(&self, slot: u32) -> &AtomicU32 {
        self.word(2, slot)
    }

    fn sq_doorbell(&self) -> &AtomicU32 {
        // SAFETY: guaranteed live and aligned by the caller of `new`.
        unsafe { &*self.sq_doorbell }
    }

    fn cq_doorbell(&self) -> &AtomicU32 {
        // SAFETY: guaranteed live and aligned by the caller of `new`.
        unsafe { &*self.cq_doorbell }
    }

    fn mask(&self) -> u64 {
        u64::from(self.depth()) - 1
    }

    /// Submits `sqe` (its command id is overwritten with the slot) and returns the ticket to
    /// wait on. Blocks with backoff while the queue is full.
    pub fn submit(&self, sqe: SubmissionEntry) -> Ticket {
        self.submit_with(|_| sqe)
    }

    /// Claims a slot, then submits the entry that `build(slot)` returns (the slot names the
    /// command id and any per-slot bounce buffer, so writes can fill it first).
    pub fn submit_with(&self, build: impl FnOnce(u16) -> SubmissionEntry) -> Ticket {
        let st = self.state();
        let t = st.sq_ticket.fetch_add(1, Ordering::AcqRel);
        let slot = (t & self.mask()) as u32;
        let round = (t >> self.depth_log2) as u32;
        let backoff = Backoff::new();
        while self.turn(slot).load(Ordering::Acquire) != round
            || t >= st.cq_head.load(Ordering::Acquire) + self.mask()
        {
            backoff.snooze();
        }
        let cid = slot as u16;
        let mut sqe = build(cid);
        sqe.set_cid(cid);
        // SAFETY: the slot is ours this round (turn), the controller has fetched its previous
        // entry (that command completed), and the pointer is inside the SQ ring.
        unsafe { std::ptr::write_volatile(self.rings.sqe_ptr(slot), sqe) };
        self.sq_mark(slot).store(1, Ordering::SeqCst);
        self.publish_tail();
        Ticket { ticket: t, cid }
    }

    /// Walks consecutive marked SQ slots and rings the doorbell once for all of them.
    fn publish_tail(&self) {
        let st = self.state();
        let mask = self.mask();
        loop {
            if st
                .sq_tail_lock
                .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                return; // the holder re-checks our mark after it unlocks
            }
            let start = st.sq_tail.load(Ordering::Relaxed);
            let mut tail = start;
            while self.sq_mark((tail & mask) as u32).load(Ordering::Acquire) == 1 {
                self.sq_mark((tail & mask) as u32)
                    .store(0, Ordering::Relaxed);
                tail += 1;
            }
            if tail != start {
                st.sq_tail.store(tail, Ordering::Release);
                self.sq_doorbell()
                    .store((tail & mask) as u32, Ordering::Release);
            }
            st.sq_tail_lock.store(0, Ordering::Release);
            // Also orders the doorbell write before the bell's check for sleepers.
            fence(Ordering::SeqCst);
            if let (Some(bell), true) = (&self.bell, tail != start) {
                bell.ring_after_fence();
            }
            if self.sq_mark((tail & mask) as u32).load(Ordering::SeqCst) != 1 {
                return;
            }
        }
    }

    /// Returns the completion of `ticket` if it has been posted, and consumes it. The slot (its
    /// command id and bounce buffer) stays reserved until [`release`](Self::release).
    pub fn poll(&self, ticket: Ticket) -> Option<CompletionEntry> {
        let st = self.state();
        let mask = self.mask();
        let head = st.cq_head.load(Ordering::Acquire);
        for j in head..head + u64::from(self.depth()) {
            let slot = (j & mask) as u32;
            let cqe = read_cqe(self.rings.cqe_words(slot));
            if cqe.phase() != expected_phase(j, self.depth_log2) {
                return None; // no entry posted here yet
            }
            if cqe.cid != ticket.cid || self.cq_mark(slot).load(Ordering::Acquire) != 0 {
                continue;
            }
            // An unmarked entry below the current head was consumed by the previous user of
            // this command id and already passed; ours cannot be passed before we mark it.
            if j < st.cq_head.load(Ordering::Acquire) {
                return None;
            }
            self.cq_mark(slot).store(1, Ordering::SeqCst);
            self.advance_head();
            return Some(cqe);
        }
        None
    }

    /// Hands the slot of a completed `ticket` to the next round.
    pub fn release(&self, ticket: Ticket) {
        let round = (ticket.ticket >> self.depth_log2) as u32;
        self.turn((ticket.ticket & self.mask()) as u32)
            .store(round.wrapping_add(1), Ordering::Release);
    }

    /// Waits for the completion of `ticket` (see [`poll`](Self::poll)): spinning for
    /// [`SPIN_POLLS`] polls, then backing off to yielding the CPU.
    pub fn wait(
        &self,
        ticket: Ticket,
        timeout: std::time::Duration,
    ) -> Result<CompletionEntry, QueueError> {
        for _ in 0..SPIN_POLLS {
            if let Some(c) = self.poll(ticket) {
                return Ok(c);
            }
            std::hint::spin_loop();
        }
        let start = std::time::Instant::now();
        let backoff = Backoff::new();
        loop {
            if let Some(c) = self.poll(ticket) {
                return Ok(c);
            }
            if backoff.is_completed() && start.elapsed() > timeout {
                return Err(QueueError::Timeout {
                    qid: self.qid,
                    cid: ticket.cid,
                });
            }
            backoff.snooze();
        }
    }

    /// Advances the CQ head over consecutive consumed entries and rings the CQ doorbell once.
    fn advance_head(&self) {
        let st = self.state();
        let mask = self.mask();
        loop {
            if st
                .cq_head_lock
                .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                return;
            }
            let start = st.cq_head.load(Ordering::Relaxed);
            let mut head = start;
            while self.cq_mark((head & mask) as u32).load(Ordering::Acquire) == 1
                && head - start <= mask
            {
                head += 1;
            }
            if head != start {
                // Head first, then the marks: a poller that sees a cleared mark sees the head.
                st.cq_head.store(head, Ordering::Release);
                for j in start..head {
                    self.cq_mark((j & mask) as u32).store(0, Ordering::Release);
                }
                self.cq_doorbell()
                    .store((head & mask) as u32, Ordering::Release);
            }
            st.cq_head_lock.store(0, Ordering::Release);
            fence(Ordering::SeqCst);
            if self.cq_mark((head & mask) as u32).load(Ordering::SeqCst) != 1 {
                return;
            }
        }
    }
}

/// The controller's side of one queue pair: fetches SQEs and posts CQEs.
///
/// Built from the addresses given in Create I/O SQ/CQ. One thread may own it whole, or
/// [`split`](Self::split) it so that one thread fetches and another completes.
#[derive(Debug)]
pub struct ControllerQueue {
    /// The submission half.
    pub sq: SqFetcher,
    /// The completion half.
    pub cq: CqPoster,
}

/// Fetches SQEs of one SQ.
#[derive(Debug)]
pub struct SqFetcher {
    /// SQ id.
    pub sqid: u16,
    sq: *const SubmissionEntry,
    doorbell: *const AtomicU32,
    depth: u32,
    head: u32,
}

/// Posts CQEs to one CQ.
#[derive(Debug)]
pub struct CqPoster {
    /// SQ whose commands this CQ completes (reported in every CQE).
    pub sqid: u16,
    /// CQ id.
    pub cqid: u16,
    cq: *const [AtomicU32; 4],
    doorbell: *const AtomicU32,
    depth: u32,
    tail: u32,
    phase: bool,
    /// The CQ head last read from the doorbell. The head only moves forward, so a stale value
    /// only under-reports room; the doorbell (a line the host or GPU keeps writing) is read
    /// again only when the cached head says the CQ is full.
    seen_head: u32,
}

// SAFETY: the rings and doorbells are registered memory that outlives the controller's use of
// the queue (the queue is deleted before its memory is freed); one thread owns each half.
unsafe impl Send for SqFetcher {}
// SAFETY: as above.
unsafe impl Send for CqPoster {}

/// Where a controller finds one queue pair: host addresses of the rings and doorbells.
#[derive(Debug, Clone, Copy)]
pub struct RingAddrs {
    /// First SQE.
    pub sq: *const SubmissionEntry,
    /// Entries in the SQ.
    pub sq_depth: u32,
    /// First CQE.
    pub cq: *const u8,
    /// Entries in the CQ.
    pub cq_depth: u32,
    /// The SQ tail doorbell.
    pub sq_doorbell: *const AtomicU32,
    /// The CQ head doorbell.
    pub cq_doorbell: *const AtomicU32,
}

impl ControllerQueue {
    /// Creates the controller's view of a queue pair.
    ///
    /// # Safety
    /// All pointers in `at` must stay valid, aligned and large enough (`sq_depth` SQEs,
    /// `cq_depth` CQEs) until the queue is deleted.
    pub unsafe fn new(sqid: u16, cqid: u16, at: RingAddrs) -> Self {
        Self {
            sq: SqFetcher {
                sqid,
                sq: at.sq,
                doorbell: at.sq_doorbell,
                depth: at.sq_depth,
                head: 0,
            },
            cq: CqPoster {
                sqid,
                cqid,
                cq: at.cq.cast(),
                doorbell: at.cq_doorbell,
                depth: at.cq_depth,
                tail: 0,
                phase: true,
                seen_head: 0,
            },
        }
    }

    /// SQ id.
    pub fn sqid(&self) -> u16 {
        self.sq.sqid
    }

    /// SQEs published by the doorbell and not yet fetched.
    pub fn pending(&self) -> u32 {
        self.sq.pending()
    }

    /// Fetches up to `max` new SQEs into `out` (see [`SqFetcher::fetch`]).
    pub fn fetch(&mut self, out: &mut Vec<SubmissionEntry>, max: usize) -> usize {
        self.sq.fetch(out, max)
    }

    /// Posts a completion reporting the current SQ head (see [`CqPoster::post`]).
    pub fn post(&mut self, cid: u16, status: crate::spec::Status, dw0: u32) -> bool {
        self.cq.post(cid, status, dw0, self.sq.head())
    }

    /// The two halves, for a fetching thread and a completing thread.
    pub fn split(self) -> (SqFetcher, CqPoster) {
        (self.sq, self.cq)
    }
}

impl SqFetcher {
    /// Current SQ head (reported in CQEs).
    pub fn head(&self) -> u16 {
        self.head as u16
    }

    /// Number of SQEs published by the doorbell and not yet fetched.
    pub fn pending(&self) -> u32 {
        // SAFETY: the doorbell is live (constructor contract).
        let tail = unsafe { &*self.doorbell }.load(Ordering::Acquire) % self.depth;
        (tail + self.depth - self.head) % self.depth
    }

    /// Fetches up to `max` new SQEs into `out` (coalesced: one doorbell read for all of them).
    pub fn fetch(&mut self, out: &mut Vec<SubmissionEntry>, max: usize) -> usize {
        let n = (self.pending() as usize).min(max);
        out.reserve(n);
        let mut head = self.head;
        for _ in 0..n {
            // SAFETY: head < depth, inside the SQ ring; the doorbell read (acquire) ordered the
            // submitter's writes of these entries before this read.
            out.push(unsafe { std::ptr::read_volatile(self.sq.add(head as usize)) });
            // A compare, not `% depth`: a division per entry costs more than the copy.
            head += 1;
            if head == self.depth {
                head = 0;
            }
        }
        self.head = head;
        n
    }
}

impl CqPoster {
    /// Whether the CQ has room for one more entry (NVMe: full when tail + 1 == head).
    pub fn has_room(&mut self) -> bool {
        let next = (self.tail + 1) % self.depth;
        if next != self.seen_head {
            return true;
        }
        // SAFETY: the doorbell is live (constructor contract).
        self.seen_head = unsafe { &*self.doorbell }.load(Ordering::Acquire) % self.depth;
        next != self.seen_head
    }

    /// Posts a completion with the current phase; `false` (nothing written) if the CQ is full.
    pub fn post(&mut self, cid: u16, status: crate::spec::Status, dw0: u32, sq_head: u16) -> bool {
        if !self.has_room() {
            return false;
        }
        let cqe = CompletionEntry::new(cid, self.sqid, sq_head, status, self.phase, dw0);
        // SAFETY: tail < depth, inside the CQ ring (constructor contract).
        write_cqe(unsafe { &*self.cq.add(self.tail as usize) }, &cqe);
        self.tail += 1;
        if self.tail == self.depth {
            self.tail = 0;
            self.phase = !self.phase;
        }
        true
    }
}
