//! GoFS's sharded block allocator: per-SM block bitmaps with coalesced allocation (GoFS paper
//! §3.3, "Scalable block allocation with per-SM bitmaps").
//!
//! The device's blocks are grouped in segments (F2FS: 512 blocks of 4 KiB, one 2 MiB segment),
//! each with a validity bitmap (bit set = block in use). Segments are owned by shards, one per
//! SM on the GPU, so that SMs never contend on one bitmap; at construction the segments are dealt
//! so that every shard holds a similar number of free blocks.
//!
//! An allocation of `n` blocks takes them from one shard: a single compare-and-swap on the
//! shard's free count reserves `n` blocks, after which the shard's segments are guaranteed to
//! hold `n` unclaimed free bits, and `fetch_or` on bitmap words claims them (a whole word at a
//! time where it is empty, so contiguous runs become one extent). Nothing on this path takes a
//! lock. The scan resumes where the shard's previous allocation stopped, so consecutive
//! allocations continue one another.
//!
//! When a reservation takes a shard below its low watermark (5 % of its fair share by default),
//! the free segments are redistributed so that all shards again hold similar free counts. The
//! redistribution, and the rare allocation that its shard cannot satisfy, run under a
//! big-reader lock made of atomics: each shard counts the operations inside it on its own cache
//! line, and the redistributor raises a global flag and waits for every count to drain. Fast
//! paths therefore touch only their own shard's line.
//!
//! The layout ([`ControlBlock`], [`ShardHeader`], bitmap words, per-segment used counts,
//! segment-to-shard owner table and per-shard segment lists) is `#[repr(C)]` and is mirrored by
//! `cuda/sharded_bitmap.cuh`, whose device functions allocate and free with the same protocol.
//! The device never redistributes: it raises the shard's low flag and reports it, and the host
//! (the GoFS daemon) calls [`ShardedAllocator::rebalance`].

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::PoisonError;

#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(loom)]
use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::{Mutex, MutexGuard};

use crate::loom_compat::Backoff;

/// Blocks in one F2FS segment: 512 blocks of 4 KiB make a 2 MiB segment.
pub const F2FS_BLOCKS_PER_SEGMENT: u32 = 512;

/// Default fraction of a shard's fair share below which the shard is low (GoFS: 5 %).
pub const DEFAULT_LOW_THRESHOLD: f64 = 0.05;

const WORD_BITS: u64 = u64::BITS as u64;

/// Geometry and policy of a [`ShardedAllocator`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShardedConfig {
    /// Blocks on the device; a multiple of `blocks_per_segment`.
    pub total_blocks: u64,
    /// Blocks per segment; a power of two ([`F2FS_BLOCKS_PER_SEGMENT`] for F2FS).
    pub blocks_per_segment: u32,
    /// Number of shards (one per SM); at most the number of segments.
    pub shard_count: u32,
    /// Fraction of a shard's fair share of free blocks below which segments are redistributed;
    /// strictly between 0 and 1.
    pub low_threshold: f64,
}

impl ShardedConfig {
    /// A configuration with the default low threshold ([`DEFAULT_LOW_THRESHOLD`]).
    pub fn new(total_blocks: u64, blocks_per_segment: u32, shard_count: u32) -> Self {
        Self {
            total_blocks,
            blocks_per_segment,
            shard_count,
            low_threshold: DEFAULT_LOW_THRESHOLD,
        }
    }

    /// The same configuration with another low threshold.
    pub fn with_low_threshold(self, low_threshold: f64) -> Self {
        Self {
            low_threshold,
            ..self
        }
    }
}

/// Why a [`ShardedConfig`] or initial occupancy was rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// the device must have at least one block
    #[error("the device must have at least one block")]
    ZeroBlocks,
    /// there must be at least one shard
    #[error("there must be at least one shard")]
    ZeroShards,
    /// blocks per segment must be a power of two
    #[error("blocks per segment must be a power of two, not {blocks_per_segment}")]
    SegmentNotPowerOfTwo {
        /// The rejected segment size.
        blocks_per_segment: u32,
    },
    /// the segment size must divide the device size
    #[error("{blocks_per_segment} blocks per segment do not divide {total_blocks} blocks")]
    SegmentDoesNotDivide {
        /// The device size in blocks.
        total_blocks: u64,
        /// The rejected segment size.
        blocks_per_segment: u32,
    },
    /// segment numbers must fit in 32 bits
    #[error("{segment_count} segments do not fit in 32-bit segment numbers")]
    TooManySegments {
        /// Segments the configuration would need.
        segment_count: u64,
    },
    /// every shard needs at least one segment
    #[error("{shard_count} shards but only {segment_count} segments")]
    MoreShardsThanSegments {
        /// The requested shard count.
        shard_count: u32,
        /// Segments on the device.
        segment_count: u64,
    },
    /// the low threshold must lie strictly between 0 and 1
    #[error("low threshold {low_threshold} is not strictly between 0 and 1")]
    ThresholdOutOfRange {
        /// The rejected threshold.
        low_threshold: f64,
    },
    /// the occupancy bitmap must have one bit per block
    #[error("occupancy bitmap has {actual} words, the device needs {expected}")]
    OccupancyLength {
        /// Words needed: one bit per block, rounded up.
        expected: usize,
        /// Words supplied.
        actual: usize,
    },
}

/// Why an allocation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// an allocation must ask for at least one block
    #[error("an allocation must ask for at least one block")]
    ZeroLength,
    /// the device does not have enough free blocks
    #[error("{requested} blocks requested but only {free} are free")]
    NoSpace {
        /// Blocks requested.
        requested: u64,
        /// Blocks free on the whole device when the request was refused.
        free: u64,
    },
}

/// Why a free failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FreeError {
    /// a free must name at least one block
    #[error("a free must name at least one block")]
    ZeroLength,
    /// the range does not lie on the device
    #[error("blocks {start}..+{count} do not lie within {total_blocks} blocks")]
    OutOfRange {
        /// First block of the rejected range.
        start: u64,
        /// Length of the rejected range.
        count: u64,
        /// Blocks on the device.
        total_blocks: u64,
    },
    /// a block of the range is not allocated
    #[error("block {block} is not allocated")]
    DoubleFree {
        /// The first block found free.
        block: u64,
    },
}

/// A run of consecutive blocks; twin of `ShardedExtent` in `cuda/sharded_bitmap.cuh`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// First block of the run.
    pub start: u64,
    /// Blocks in the run.
    pub count: u64,
}

/// Blocks granted by one [`ShardedAllocator::alloc`], in the order they were claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    shard: u32,
    extents: Vec<Extent>,
}

impl Allocation {
    /// The shard the blocks came from.
    pub fn shard(&self) -> u32 {
        self.shard
    }

    /// The granted runs; adjacent runs are merged, so a contiguous grant is one extent.
    pub fn extents(&self) -> &[Extent] {
        &self.extents
    }

    /// Blocks granted in all.
    pub fn block_count(&self) -> u64 {
        self.extents.iter().map(|extent| extent.count).sum()
    }

    /// Every granted block, extent by extent.
    pub fn blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.extents
            .iter()
            .flat_map(|extent| extent.start..extent.start + extent.count)
    }
}

/// Geometry and global flags, shared with CUDA (`struct ShardedControl` in
/// `cuda/sharded_bitmap.cuh`).
#[repr(C, align(64))]
#[derive(Debug)]
pub struct ControlBlock {
    total_blocks: u64,
    segment_count: u32,
    blocks_per_segment: u32,
    words_per_segment: u32,
    shard_count: u32,
    /// Non-zero while segments are being redistributed; operations wait outside their shard.
    rebalancing: AtomicU32,
    rebalance_count: AtomicU32,
    _reserved: [u32; 8],
}

// Loom's atomics are larger than the real ones: the layout holds only for the real build.
#[cfg(not(loom))]
const _: () = {
    use core::mem::offset_of;
    assert!(size_of::<ControlBlock>() == 64);
    assert!(align_of::<ControlBlock>() == 64);
    assert!(offset_of!(ControlBlock, total_blocks) == 0);
    assert!(offset_of!(ControlBlock, segment_count) == 8);
    assert!(offset_of!(ControlBlock, blocks_per_segment) == 12);
    assert!(offset_of!(ControlBlock, words_per_segment) == 16);
    assert!(offset_of!(ControlBlock, shard_count) == 20);
    assert!(offset_of!(ControlBlock, rebalancing) == 24);
    assert!(offset_of!(ControlBlock, rebalance_count) == 28);
};

/// One shard's state on its own cache line, shared with CUDA (`struct ShardedShardHeader` in
/// `cuda/sharded_bitmap.cuh`).
///
/// The shard owns the segments `shard_segments[list_begin..list_begin + list_len]`;
/// `free_blocks` counts their free blocks not yet reserved by an allocation in flight.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct ShardHeader {
    free_blocks: AtomicU64,
    low_watermark: AtomicU64,
    /// Where the next scan starts: list position in the high half, word of that segment in the
    /// low half.
    scan_hint: AtomicU64,
    list_begin: AtomicU32,
    list_len: AtomicU32,
    /// Operations inside this shard; a redistribution waits for it to drain.
    active: AtomicU32,
    /// Set when a reservation crossed the low watermark; cleared by redistribution.
    low: AtomicU32,
    _reserved: [u32; 6],
}

#[cfg(not(loom))]
const _: () = {
    use core::mem::offset_of;
    assert!(size_of::<ShardHeader>() == 64);
    assert!(align_of::<ShardHeader>() == 64);
    assert!(offset_of!(ShardHeader, free_blocks) == 0);
    assert!(offset_of!(ShardHeader, low_watermark) == 8);
    assert!(offset_of!(ShardHeader, scan_hint) == 16);
    assert!(offset_of!(ShardHeader, list_begin) == 24);
    assert!(offset_of!(ShardHeader, list_len) == 28);
    assert!(offset_of!(ShardHeader, active) == 32);
    assert!(offset_of!(ShardHeader, low) == 36);
    // The arrays are copied to the device as plain words.
    assert!(size_of::<AtomicU64>() == 8 && align_of::<AtomicU64>() == 8);
    assert!(size_of::<AtomicU32>() == 4 && align_of::<AtomicU32>() == 4);
};
const _: () = assert!(size_of::<Extent>() == 16);
const _: () = assert!(core::mem::offset_of!(Extent, count) == 8);

impl ShardHeader {
    fn empty() -> Self {
        Self {
            free_blocks: AtomicU64::new(0),
            low_watermark: AtomicU64::new(0),
            scan_hint: AtomicU64::new(0),
            list_begin: AtomicU32::new(0),
            list_len: AtomicU32::new(0),
            active: AtomicU32::new(0),
            low: AtomicU32::new(0),
            _reserved: [0; 6],
        }
    }
}

/// Kernel argument naming the device copies of [`ShardedParts`]; twin of `struct ShardedBitmap`
/// in `cuda/sharded_bitmap.cuh`. Each field is a device address.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardedDeviceView {
    /// Address of the [`ControlBlock`].
    pub control: u64,
    /// Address of the [`ShardHeader`] array.
    pub shards: u64,
    /// Address of the bitmap words.
    pub bitmap: u64,
    /// Address of the per-segment used counts.
    pub segment_used: u64,
    /// Address of the segment-to-shard owner table.
    pub segment_owner: u64,
    /// Address of the concatenated per-shard segment lists.
    pub shard_segments: u64,
}

const _: () = assert!(size_of::<ShardedDeviceView>() == 48);
const _: () = assert!(core::mem::offset_of!(ShardedDeviceView, shard_segments) == 40);

/// The allocator's shared memory, for copying to the device.
#[derive(Debug, Clone, Copy)]
pub struct ShardedParts<'a> {
    /// Geometry and global flags.
    pub control: &'a ControlBlock,
    /// One header per shard.
    pub shards: &'a [ShardHeader],
    /// Validity bitmap: `words_per_segment` words per segment, bit set = block in use (bits past
    /// a segment smaller than a word are permanently set).
    pub bitmap: &'a [AtomicU64],
    /// Blocks in use per segment.
    pub segment_used: &'a [AtomicU32],
    /// Owning shard per segment.
    pub segment_owner: &'a [AtomicU32],
    /// Every shard's segments in ascending order, shard after shard.
    pub shard_segments: &'a [AtomicU32],
}

/// GoFS's block allocator: segments dealt to per-SM shards, lock-free coalesced allocation.
pub struct ShardedAllocator {
    control: ControlBlock,
    shards: Box<[ShardHeader]>,
    bitmap: Box<[AtomicU64]>,
    segment_used: Box<[AtomicU32]>,
    segment_owner: Box<[AtomicU32]>,
    shard_segments: Box<[AtomicU32]>,
    low_threshold: f64,
    /// Serialises redistributions; allocation fast paths never take it.
    rebalance_lock: Mutex<()>,
}

impl std::fmt::Debug for ShardedAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedAllocator")
            .field("total_blocks", &self.control.total_blocks)
            .field("blocks_per_segment", &self.control.blocks_per_segment)
            .field("shard_count", &self.control.shard_count)
            .field("free_blocks", &self.free_blocks())
            .field("rebalance_count", &self.rebalance_count())
            .finish_non_exhaustive()
    }
}

/// Between the store and the load of each side of the shard-entry handshake (`enter` and
/// `exclusive`). The real build needs nothing here: SeqCst accesses on both sides sit in one
/// total order, so either the operation sees the flag or the redistributor sees the count. Loom
/// treats SeqCst accesses as AcqRel (loom's README, tokio-rs/loom#180) and would explore the
/// store-buffering outcome that C11 rules out; it does model SeqCst fences, which give the
/// same guarantee.
#[inline(always)]
fn handshake_fence() {
    #[cfg(loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}

/// Membership in one shard, left on drop.
struct ShardPass<'a> {
    active: &'a AtomicU32,
}

impl Drop for ShardPass<'_> {
    fn drop(&mut self) {
        self.active.fetch_sub(1, Ordering::Release);
    }
}

/// Proof that no operation is inside any shard; lowers the flag on drop.
struct Exclusive<'a> {
    rebalancing: &'a AtomicU32,
    _serial: MutexGuard<'a, ()>,
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        self.rebalancing.store(0, Ordering::Release);
    }
}

impl ShardedAllocator {
    /// Builds the allocator; `initially_used(block)` tells which blocks are already in use
    /// (e.g. read from F2FS's segment information table).
    pub fn new(
        config: ShardedConfig,
        initially_used: impl Fn(u64) -> bool,
    ) -> Result<Self, ConfigError> {
        Ok(Self::empty(config)?.occupied_by(initially_used))
    }

    /// Builds the allocator from an occupancy bitmap: bit `b % 64` of word `b / 64` set means
    /// block `b` is in use.
    pub fn from_bitmap(config: ShardedConfig, initially_used: &[u64]) -> Result<Self, ConfigError> {
        let allocator = Self::empty(config)?;
        let expected = config.total_blocks.div_ceil(WORD_BITS) as usize;
        if initially_used.len() != expected {
            return Err(ConfigError::OccupancyLength {
                expected,
                actual: initially_used.len(),
            });
        }
        Ok(allocator.occupied_by(|block| {
            initially_used[(block / WORD_BITS) as usize] >> (block % WORD_BITS) & 1 == 1
        }))
    }

    /// Marks the blocks in use and deals the segments.
    fn occupied_by(self, initially_used: impl Fn(u64) -> bool) -> Self {
        let bps = u64::from(self.control.blocks_per_segment);
        for segment in 0..self.segment_count() {
            let mut used = 0;
            for offset in 0..bps {
                let block = segment as u64 * bps + offset;
                if initially_used(block) {
                    let (word, bit) = self.locate(block);
                    self.bitmap[word].fetch_or(1 << bit, Ordering::Relaxed);
                    used += 1;
                }
            }
            self.segment_used[segment].store(used, Ordering::Relaxed);
        }
        self.redistribute(&self.exclusive());
        self
    }

    /// Validates `config` and lays out an all-free allocator with no segment dealt yet.
    fn empty(config: ShardedConfig) -> Result<Self, ConfigError> {
        let ShardedConfig {
            total_blocks,
            blocks_per_segment,
            shard_count,
            low_threshold,
        } = config;
        if total_blocks == 0 {
            return Err(ConfigError::ZeroBlocks);
        }
        if shard_count == 0 {
            return Err(ConfigError::ZeroShards);
        }
        if !blocks_per_segment.is_power_of_two() {
            return Err(ConfigError::SegmentNotPowerOfTwo { blocks_per_segment });
        }
        let bps = u64::from(blocks_per_segment);
        if total_blocks % bps != 0 {
            return Err(ConfigError::SegmentDoesNotDivide {
                total_blocks,
                blocks_per_segment,
            });
        }
        let segment_count = total_blocks / bps;
        let Ok(segment_count_u32) = u32::try_from(segment_count) else {
            return Err(ConfigError::TooManySegments { segment_count });
        };
        if u64::from(shard_count) > segment_count {
            return Err(ConfigError::MoreShardsThanSegments {
                shard_count,
                segment_count,
            });
        }
        if !(low_threshold > 0.0 && low_threshold < 1.0) {
            return Err(ConfigError::ThresholdOutOfRange { low_threshold });
        }
        let words_per_segment = blocks_per_segment.div_ceil(u64::BITS);
        // Bits past a segment smaller than a word stay set so that no scan ever claims them.
        let padding = if bps < WORD_BITS { !low_mask(bps) } else { 0 };
        let segments = segment_count_u32 as usize;
        let words = segments * words_per_segment as usize;
        Ok(Self {
            control: ControlBlock {
                total_blocks,
                segment_count: segment_count_u32,
                blocks_per_segment,
                words_per_segment,
                shard_count,
                rebalancing: AtomicU32::new(0),
                rebalance_count: AtomicU32::new(0),
                _reserved: [0; 8],
            },
            shards: (0..shard_count).map(|_| ShardHeader::empty()).collect(),
            bitmap: (0..words).map(|_| AtomicU64::new(padding)).collect(),
            segment_used: (0..segments).map(|_| AtomicU32::new(0)).collect(),
            // Contiguous stripes, so that the first redistribution moves few segments.
            segment_owner: (0..segment_count)
                .map(|segment| {
                    AtomicU32::new((segment * u64::from(shard_count) / segment_count) as u32)
                })
                .collect(),
            shard_segments: (0..segments).map(|_| AtomicU32::new(0)).collect(),
            low_threshold,
            rebalance_lock: Mutex::new(()),
        })
    }

    /// Allocates `n` blocks from shard `shard_hint % shard_count` (the caller's SM). When that
    /// shard cannot hold `n`, segments are first redistributed, and for a request beyond a fair
    /// share moved to it from the shards holding the most free blocks.
    ///
    /// Fails with [`AllocError::NoSpace`] only when the whole device has fewer than `n` free
    /// blocks.
    pub fn alloc(&self, shard_hint: u32, n: u64) -> Result<Allocation, AllocError> {
        if n == 0 {
            return Err(AllocError::ZeroLength);
        }
        let shard = (shard_hint % self.control.shard_count) as usize;
        let fast = {
            let _pass = self.enter(shard);
            self.reserve(shard, n)
                .map(|crossed_low| (self.claim(shard, n), crossed_low))
        };
        match fast {
            Some((extents, crossed_low)) => {
                if crossed_low {
                    self.rebalance();
                }
                Ok(Allocation {
                    shard: shard as u32,
                    extents,
                })
            }
            None => self.alloc_exclusive(shard, n),
        }
    }

    /// Slow path: with every shard quiet, make one shard hold `n` free blocks and take them.
    fn alloc_exclusive(&self, shard: usize, n: u64) -> Result<Allocation, AllocError> {
        let exclusive = self.exclusive();
        let free = self.free_blocks();
        if free < n {
            return Err(AllocError::NoSpace { requested: n, free });
        }
        if self.shard_free(shard) < n {
            self.rebalance_exclusive(&exclusive);
        }
        if self.shard_free(shard) < n {
            self.gather(&exclusive, shard, n);
        }
        if self.reserve(shard, n).is_none() {
            return Err(AllocError::NoSpace { requested: n, free });
        }
        let extents = self.claim(shard, n);
        if self.shard_free(shard) < self.shards[shard].low_watermark.load(Ordering::Relaxed) {
            self.rebalance_exclusive(&exclusive);
        }
        Ok(Allocation {
            shard: shard as u32,
            extents,
        })
    }

    /// Frees `count` blocks from `start`. Fails without changing anything when the range leaves
    /// the device or holds a free block.
    pub fn free(&self, start: u64, count: u64) -> Result<(), FreeError> {
        let total_blocks = self.control.total_blocks;
        if count == 0 {
            return Err(FreeError::ZeroLength);
        }
        let end = match start.checked_add(count) {
            Some(end) if end <= total_blocks => end,
            _ => {
                return Err(FreeError::OutOfRange {
                    start,
                    count,
                    total_blocks,
                });
            }
        };
        let bps = u64::from(self.control.blocks_per_segment);
        let segments = start / bps..end.div_ceil(bps);
        let segment_range = |segment: u64| start.max(segment * bps)..end.min((segment + 1) * bps);
        for segment in segments.clone() {
            for (word, mask, base) in self.word_pieces(segment_range(segment)) {
                let missing = mask & !self.bitmap[word].load(Ordering::Acquire);
                if missing != 0 {
                    return Err(FreeError::DoubleFree {
                        block: base + first_set(missing),
                    });
                }
            }
        }
        // A racing free of the same blocks may clear some first: count only the bits this call
        // cleared, so the free counts stay exact, and report the rest.
        let mut first_missing = None;
        for segment in segments {
            let (shard, _pass) = self.enter_owner(segment as usize);
            let mut cleared = 0;
            for (word, mask, base) in self.word_pieces(segment_range(segment)) {
                let previous = self.bitmap[word].fetch_and(!mask, Ordering::AcqRel);
                cleared += u64::from((previous & mask).count_ones());
                let missing = mask & !previous;
                if missing != 0 && first_missing.is_none() {
                    first_missing = Some(base + first_set(missing));
                }
            }
            self.segment_used[segment as usize].fetch_sub(cleared as u32, Ordering::Relaxed);
            self.shards[shard]
                .free_blocks
                .fetch_add(cleared, Ordering::AcqRel);
        }
        match first_missing {
            Some(block) => Err(FreeError::DoubleFree { block }),
            None => Ok(()),
        }
    }

    /// Redistributes free segments so every shard holds a similar number of free blocks (within
    /// one segment's worth), and clears the shards' low flags. Waits for operations in flight.
    pub fn rebalance(&self) {
        let exclusive = self.exclusive();
        self.rebalance_exclusive(&exclusive);
    }

    /// Free blocks on the whole device (exact when no operation is in flight).
    pub fn free_blocks(&self) -> u64 {
        self.shards
            .iter()
            .map(|shard| shard.free_blocks.load(Ordering::Relaxed))
            .sum()
    }

    /// Free blocks owned by `shard`, or `None` when there is no such shard.
    pub fn shard_free_blocks(&self, shard: u32) -> Option<u64> {
        self.shards
            .get(shard as usize)
            .map(|header| header.free_blocks.load(Ordering::Relaxed))
    }

    /// Whether `block` is in use, or `None` when it is not on the device.
    pub fn is_allocated(&self, block: u64) -> Option<bool> {
        (block < self.control.total_blocks).then(|| {
            let (word, bit) = self.locate(block);
            self.bitmap[word].load(Ordering::Acquire) >> bit & 1 == 1
        })
    }

    /// Segments with no block in use.
    pub fn free_segment_count(&self) -> u64 {
        self.segment_used
            .iter()
            .filter(|used| used.load(Ordering::Relaxed) == 0)
            .count() as u64
    }

    /// Whether some shard crossed its low watermark since the last redistribution (the device
    /// raises these flags; the host answers with [`Self::rebalance`]).
    pub fn needs_rebalance(&self) -> bool {
        self.shards
            .iter()
            .any(|shard| shard.low.load(Ordering::Relaxed) != 0)
    }

    /// Redistributions since construction (wrapping).
    pub fn rebalance_count(&self) -> u32 {
        self.control.rebalance_count.load(Ordering::Relaxed)
    }

    /// Blocks on the device.
    pub fn total_blocks(&self) -> u64 {
        self.control.total_blocks
    }

    /// Blocks per segment.
    pub fn blocks_per_segment(&self) -> u32 {
        self.control.blocks_per_segment
    }

    /// Number of shards.
    pub fn shard_count(&self) -> u32 {
        self.control.shard_count
    }

    /// The shared memory, laid out as `cuda/sharded_bitmap.cuh` expects, for copying to the
    /// device.
    pub fn parts(&self) -> ShardedParts<'_> {
        ShardedParts {
            control: &self.control,
            shards: &self.shards,
            bitmap: &self.bitmap,
            segment_used: &self.segment_used,
            segment_owner: &self.segment_owner,
            shard_segments: &self.shard_segments,
        }
    }

    fn segment_count(&self) -> usize {
        self.control.segment_count as usize
    }

    fn shard_free(&self, shard: usize) -> u64 {
        self.shards[shard].free_blocks.load(Ordering::Relaxed)
    }

    /// Bitmap word and bit of `block`.
    fn locate(&self, block: u64) -> (usize, u64) {
        let bps = u64::from(self.control.blocks_per_segment);
        let (segment, offset) = (block / bps, block % bps);
        let word = segment * u64::from(self.control.words_per_segment) + offset / WORD_BITS;
        (word as usize, offset % WORD_BITS)
    }

    /// `(word, mask, block of bit 0)` for each bitmap word covering `blocks`, which lie in one
    /// segment.
    fn word_pieces(
        &self,
        blocks: std::ops::Range<u64>,
    ) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
        let bps = u64::from(self.control.blocks_per_segment);
        let mut next = blocks.start;
        std::iter::from_fn(move || {
            if next >= blocks.end {
                return None;
            }
            let (word, bit) = self.locate(next);
            let word_end = (next - bit + WORD_BITS.min(bps)).min(blocks.end);
            let mask = low_mask(word_end - next) << bit;
            let piece = (word, mask, next - bit);
            next = word_end;
            Some(piece)
        })
    }

    /// Joins `shard`, waiting while a redistribution runs.
    fn enter(&self, shard: usize) -> ShardPass<'_> {
        let active = &self.shards[shard].active;
        let backoff = Backoff::new();
        loop {
            // SeqCst on both sides (here and in `exclusive`): either this operation sees the
            // flag, or the redistributor sees the count.
            active.fetch_add(1, Ordering::SeqCst);
            handshake_fence();
            if self.control.rebalancing.load(Ordering::SeqCst) == 0 {
                return ShardPass { active };
            }
            active.fetch_sub(1, Ordering::Release);
            while self.control.rebalancing.load(Ordering::Acquire) != 0 {
                backoff.snooze();
            }
        }
    }

    /// Joins the shard owning `segment`; the owner cannot change while the pass is held.
    fn enter_owner(&self, segment: usize) -> (usize, ShardPass<'_>) {
        loop {
            let shard = self.segment_owner[segment].load(Ordering::Acquire) as usize;
            let pass = self.enter(shard);
            if self.segment_owner[segment].load(Ordering::Acquire) as usize == shard {
                return (shard, pass);
            }
        }
    }

    /// Stops every shard: raises the flag and waits until no operation is inside a shard.
    fn exclusive(&self) -> Exclusive<'_> {
        let serial = self
            .rebalance_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.control.rebalancing.store(1, Ordering::SeqCst);
        handshake_fence();
        let exclusive = Exclusive {
            rebalancing: &self.control.rebalancing,
            _serial: serial,
        };
        for shard in self.shards.iter() {
            let backoff = Backoff::new();
            while shard.active.load(Ordering::SeqCst) != 0 {
                backoff.snooze();
            }
        }
        exclusive
    }

    /// Takes `n` from the shard's free count in one step. `Some(true)` when this took the shard
    /// below its low watermark (the low flag is then raised).
    fn reserve(&self, shard: usize, n: u64) -> Option<bool> {
        let header = &self.shards[shard];
        let before = header
            .free_blocks
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |free| {
                free.checked_sub(n)
            })
            .ok()?;
        let watermark = header.low_watermark.load(Ordering::Relaxed);
        let crossed_low = before >= watermark && before - n < watermark;
        if crossed_low {
            header.low.store(1, Ordering::Relaxed);
        }
        Some(crossed_low)
    }

    /// Claims `n` free bits that a reservation set aside in `shard`'s segments.
    fn claim(&self, shard: usize, n: u64) -> Vec<Extent> {
        let header = &self.shards[shard];
        let begin = header.list_begin.load(Ordering::Relaxed) as usize;
        let len = header.list_len.load(Ordering::Relaxed) as usize;
        let hint = header.scan_hint.load(Ordering::Relaxed);
        let (mut position, mut first_word) = ((hint >> 32) as usize % len, hint as u32);
        let bps = self.control.blocks_per_segment;
        let mut extents = Vec::new();
        let mut remaining = n;
        // The reservation guarantees enough unclaimed bits; a pass can only miss them while
        // racing claimers and frees move them, so keep going round.
        loop {
            let segment = self.shard_segments[begin + position].load(Ordering::Relaxed) as usize;
            if self.segment_used[segment].load(Ordering::Relaxed) < bps {
                let (claimed, stop_word) =
                    self.claim_in_segment(segment, first_word, remaining, &mut extents);
                remaining -= claimed;
                if remaining == 0 {
                    let hint = (position as u64) << 32 | u64::from(stop_word);
                    header.scan_hint.store(hint, Ordering::Relaxed);
                    return extents;
                }
            }
            position = (position + 1) % len;
            first_word = 0;
        }
    }

    /// Claims up to `wanted` free bits of `segment` from word `first_word` on; returns how many
    /// it claimed and the word it stopped in.
    fn claim_in_segment(
        &self,
        segment: usize,
        first_word: u32,
        wanted: u64,
        extents: &mut Vec<Extent>,
    ) -> (u64, u32) {
        let words_per_segment = self.control.words_per_segment;
        let segment_base = segment as u64 * u64::from(self.control.blocks_per_segment);
        let mut claimed = 0;
        let mut word_in_segment = first_word;
        while word_in_segment < words_per_segment {
            let word =
                &self.bitmap[segment * words_per_segment as usize + word_in_segment as usize];
            let base = segment_base + u64::from(word_in_segment) * WORD_BITS;
            let mut current = word.load(Ordering::Relaxed);
            while claimed < wanted && current != u64::MAX {
                let mask = claim_mask(current, wanted - claimed);
                let previous = word.fetch_or(mask, Ordering::AcqRel);
                let gained = mask & !previous;
                claimed += u64::from(gained.count_ones());
                push_runs(extents, base, gained);
                current = previous | mask;
            }
            if claimed == wanted {
                break;
            }
            word_in_segment += 1;
        }
        self.segment_used[segment].fetch_add(claimed as u32, Ordering::Relaxed);
        (claimed, word_in_segment)
    }

    /// Free blocks of every segment; exact under exclusion.
    fn segment_free(&self, _: &Exclusive<'_>) -> Vec<u64> {
        let bps = self.control.blocks_per_segment;
        self.segment_used
            .iter()
            .map(|used| u64::from(bps - used.load(Ordering::Relaxed)))
            .collect()
    }

    fn owners(&self, _: &Exclusive<'_>) -> Vec<u32> {
        self.segment_owner
            .iter()
            .map(|owner| owner.load(Ordering::Relaxed))
            .collect()
    }

    /// Redistributes and counts it.
    fn rebalance_exclusive(&self, exclusive: &Exclusive<'_>) {
        self.redistribute(exclusive);
        self.control.rebalance_count.fetch_add(1, Ordering::Relaxed);
    }

    /// Balances the shards, resets their watermarks to the new fair share and clears low flags.
    fn redistribute(&self, exclusive: &Exclusive<'_>) {
        let segment_free = self.segment_free(exclusive);
        let mut owners = self.owners(exclusive);
        let bps = u64::from(self.control.blocks_per_segment);
        plan_balance(&mut owners, &segment_free, self.shards.len(), bps);
        self.install(exclusive, &owners, &segment_free);
        let fair_share = segment_free.iter().sum::<u64>() / self.shards.len() as u64;
        let watermark = (self.low_threshold * fair_share as f64) as u64;
        for shard in self.shards.iter() {
            shard.low_watermark.store(watermark, Ordering::Relaxed);
            shard.low.store(0, Ordering::Relaxed);
        }
    }

    /// Moves the segments with the most free blocks from other shards to `shard` until it
    /// holds `n` (for requests larger than a fair share; the caller checked the device has `n`).
    fn gather(&self, exclusive: &Exclusive<'_>, shard: usize, n: u64) {
        let segment_free = self.segment_free(exclusive);
        let mut owners = self.owners(exclusive);
        let mut donors: Vec<usize> = (0..owners.len())
            .filter(|&segment| owners[segment] as usize != shard && segment_free[segment] > 0)
            .collect();
        donors.sort_by_key(|&segment| (Reverse(segment_free[segment]), segment));
        let mut held = self.shard_free(shard);
        for segment in donors {
            if held >= n {
                break;
            }
            owners[segment] = shard as u32;
            held += segment_free[segment];
        }
        self.install(exclusive, &owners, &segment_free);
    }

    /// Writes a new owner table, the per-shard segment lists and the shards' free counts.
    fn install(&self, _: &Exclusive<'_>, owners: &[u32], segment_free: &[u64]) {
        let mut list_len = vec![0u32; self.shards.len()];
        let mut free = vec![0u64; self.shards.len()];
        for (segment, &owner) in owners.iter().enumerate() {
            list_len[owner as usize] += 1;
            free[owner as usize] += segment_free[segment];
        }
        let mut cursor = Vec::with_capacity(self.shards.len());
        let mut begin = 0;
        for (shard, header) in self.shards.iter().enumerate() {
            header.list_begin.store(begin, Ordering::Relaxed);
            header.list_len.store(list_len[shard], Ordering::Relaxed);
            header.free_blocks.store(free[shard], Ordering::Relaxed);
            header.scan_hint.store(0, Ordering::Relaxed);
            cursor.push(begin as usize);
            begin += list_len[shard];
        }
        for (segment, &owner) in owners.iter().enumerate() {
            self.segment_owner[segment].store(owner, Ordering::Relaxed);
            self.shard_segments[cursor[owner as usize]].store(segment as u32, Ordering::Relaxed);
            cursor[owner as usize] += 1;
        }
    }
}

/// Plans owners so that every shard's free blocks are within one segment of every other's.
///
/// Each shard keeps its own segments (partly used ones first, then free ones, in address order)
/// while they fit in the fair share; the rest go to a pool that is dealt largest first to the
/// shard holding least. Keeping every shard at most at the fair share before the deal bounds the
/// spread by one pooled segment; free segments are dealt as contiguous runs.
fn plan_balance(owners: &mut [u32], segment_free: &[u64], shard_count: usize, bps: u64) {
    let fair_share = segment_free.iter().sum::<u64>() / shard_count as u64;
    let mut load = vec![0u64; shard_count];
    let mut pooled_partial = Vec::new();
    let mut pooled_free = Vec::new();
    let partial_first = (0..owners.len())
        .filter(|&segment| segment_free[segment] < bps)
        .chain((0..owners.len()).filter(|&segment| segment_free[segment] == bps));
    for segment in partial_first {
        let owner = owners[segment] as usize;
        if load[owner] + segment_free[segment] <= fair_share {
            load[owner] += segment_free[segment];
        } else if segment_free[segment] == bps {
            pooled_free.push(segment);
        } else {
            pooled_partial.push(segment);
        }
    }
    let mut least_loaded: BinaryHeap<Reverse<(u64, usize)>> = load
        .iter()
        .enumerate()
        .map(|(shard, &load)| Reverse((load, shard)))
        .collect();
    let mut deal = |free: u64| {
        let Reverse((load, shard)) = least_loaded.pop().expect("one entry per shard");
        least_loaded.push(Reverse((load + free, shard)));
        shard
    };
    // Free segments are interchangeable: count each shard's share, then hand out runs.
    let mut free_share = vec![0usize; shard_count];
    for _ in &pooled_free {
        free_share[deal(bps)] += 1;
    }
    let mut pooled_free = pooled_free.into_iter();
    for (shard, &share) in free_share.iter().enumerate() {
        for segment in pooled_free.by_ref().take(share) {
            owners[segment] = shard as u32;
        }
    }
    pooled_partial.sort_by_key(|&segment| (Reverse(segment_free[segment]), segment));
    for segment in pooled_partial {
        owners[segment] = deal(segment_free[segment]) as u32;
    }
}

/// Bits to try to claim in `current` (not full): the whole word when it is empty and `wanted`
/// fills it, else the lowest free run, cut to `wanted`.
fn claim_mask(current: u64, wanted: u64) -> u64 {
    if current == 0 && wanted >= WORD_BITS {
        return u64::MAX;
    }
    let first_free = (!current).trailing_zeros();
    let run =
        u64::from((current >> first_free).trailing_zeros()).min(WORD_BITS - u64::from(first_free));
    low_mask(run.min(wanted)) << first_free
}

/// Appends the runs of set bits in `bits` (bit 0 = block `base`), merging with the last extent.
fn push_runs(extents: &mut Vec<Extent>, base: u64, mut bits: u64) {
    while bits != 0 {
        let start = bits.trailing_zeros();
        let len = u64::from((!(bits >> start)).trailing_zeros());
        bits &= !(low_mask(len) << start);
        let block = base + u64::from(start);
        match extents.last_mut() {
            Some(last) if last.start + last.count == block => last.count += len,
            _ => extents.push(Extent {
                start: block,
                count: len,
            }),
        }
    }
}

/// The `count` low bits set (`count` ≤ 64).
fn low_mask(count: u64) -> u64 {
    if count >= WORD_BITS {
        u64::MAX
    } else {
        (1 << count) - 1
    }
}

fn first_set(bits: u64) -> u64 {
    u64::from(bits.trailing_zeros())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::atomic::AtomicBool;

    fn allocator(total_blocks: u64, bps: u32, shards: u32) -> ShardedAllocator {
        ShardedAllocator::new(ShardedConfig::new(total_blocks, bps, shards), |_| false).unwrap()
    }

    fn shard_frees(allocator: &ShardedAllocator) -> Vec<u64> {
        (0..allocator.shard_count())
            .map(|shard| allocator.shard_free_blocks(shard).unwrap())
            .collect()
    }

    fn spread(frees: &[u64]) -> u64 {
        frees.iter().max().unwrap() - frees.iter().min().unwrap()
    }

    #[test]
    fn invalid_geometry_is_rejected() {
        let build = |config| ShardedAllocator::new(config, |_| false).map(|_| ());
        assert_eq!(
            build(ShardedConfig::new(0, 8, 1)),
            Err(ConfigError::ZeroBlocks)
        );
        assert_eq!(
            build(ShardedConfig::new(64, 8, 0)),
            Err(ConfigError::ZeroShards)
        );
        assert_eq!(
            build(ShardedConfig::new(60, 12, 1)),
            Err(ConfigError::SegmentNotPowerOfTwo {
                blocks_per_segment: 12
            })
        );
        assert_eq!(
            build(ShardedConfig::new(0, 8, 1).with_low_threshold(2.0)),
            Err(ConfigError::ZeroBlocks),
            "checks run in a fixed order"
        );
        assert_eq!(
            build(ShardedConfig::new(100, 8, 1)),
            Err(ConfigError::SegmentDoesNotDivide {
                total_blocks: 100,
                blocks_per_segment: 8
            })
        );
        assert_eq!(
            build(ShardedConfig::new(1 << 33, 1, 1)),
            Err(ConfigError::TooManySegments {
                segment_count: 1 << 33
            })
        );
        assert_eq!(
            build(ShardedConfig::new(64, 8, 9)),
            Err(ConfigError::MoreShardsThanSegments {
                shard_count: 9,
                segment_count: 8
            })
        );
        for low_threshold in [0.0, 1.0, -0.5, f64::NAN] {
            let result = build(ShardedConfig::new(64, 8, 2).with_low_threshold(low_threshold));
            assert!(
                matches!(result, Err(ConfigError::ThresholdOutOfRange { .. })),
                "{low_threshold}"
            );
        }
    }

    #[test]
    fn occupancy_bitmap_must_cover_every_block() {
        let result = ShardedAllocator::from_bitmap(ShardedConfig::new(128, 64, 1), &[0]);
        assert_eq!(
            result.map(|_| ()),
            Err(ConfigError::OccupancyLength {
                expected: 2,
                actual: 1
            })
        );
    }

    #[test]
    fn construction_deals_similar_free_counts_and_keeps_initial_blocks_in_use() {
        // Segment s has its first s % 64 blocks in use: very uneven partial segments.
        let used = |block: u64| block % 64 < (block / 64) % 64;
        let allocator = ShardedAllocator::new(ShardedConfig::new(64 * 256, 64, 7), used).unwrap();
        let expected_free = (0..64 * 256).filter(|&block| !used(block)).count() as u64;
        assert_eq!(allocator.free_blocks(), expected_free);
        assert!(
            spread(&shard_frees(&allocator)) <= 64,
            "{:?}",
            shard_frees(&allocator)
        );
        for block in 0..64 * 256 {
            assert_eq!(
                allocator.is_allocated(block),
                Some(used(block)),
                "block {block}"
            );
        }
        let allocation = allocator.alloc(3, expected_free).unwrap();
        assert!(allocation.blocks().all(|block| !used(block)));
        assert_eq!(allocator.free_blocks(), 0);
    }

    #[test]
    fn occupancy_bitmap_marks_its_blocks_in_use() {
        let allocator =
            ShardedAllocator::from_bitmap(ShardedConfig::new(128, 64, 2), &[0b1010, 1 << 63])
                .unwrap();
        let used: Vec<u64> = (0..128)
            .filter(|&block| allocator.is_allocated(block).unwrap())
            .collect();
        assert_eq!(used, [1, 3, 127]);
        assert_eq!(allocator.free_blocks(), 125);
    }

    #[test]
    fn allocation_from_a_fresh_shard_is_one_contiguous_extent() {
        let allocator = allocator(512 * 64, 512, 4);
        let first = allocator.alloc(1, 1000).unwrap();
        assert_eq!(first.extents().len(), 1, "{first:?}");
        assert_eq!(first.block_count(), 1000);
        assert_eq!(first.shard(), 1);
        let second = allocator.alloc(1, 30).unwrap();
        let end_of_first = first.extents()[0].start + 1000;
        assert_eq!(
            second.extents(),
            [Extent {
                start: end_of_first,
                count: 30
            }]
        );
    }

    #[test]
    fn allocation_skips_used_blocks_and_returns_several_extents() {
        // Every fourth block in use: a request of 10 needs four runs of three and one of one.
        let allocator =
            ShardedAllocator::new(ShardedConfig::new(256, 64, 1), |block| block % 4 == 0).unwrap();
        let allocation = allocator.alloc(0, 10).unwrap();
        let extents: Vec<(u64, u64)> = allocation
            .extents()
            .iter()
            .map(|extent| (extent.start, extent.count))
            .collect();
        assert_eq!(extents, [(1, 3), (5, 3), (9, 3), (13, 1)]);
    }

    #[test]
    fn zero_length_requests_are_errors() {
        let allocator = allocator(64, 8, 2);
        assert_eq!(allocator.alloc(0, 0), Err(AllocError::ZeroLength));
        assert_eq!(allocator.free(0, 0), Err(FreeError::ZeroLength));
    }

    #[test]
    fn request_beyond_free_space_is_no_space_and_changes_nothing() {
        let allocator = allocator(256, 16, 4);
        allocator.alloc(0, 200).unwrap();
        assert_eq!(
            allocator.alloc(2, 57),
            Err(AllocError::NoSpace {
                requested: 57,
                free: 56
            })
        );
        assert_eq!(allocator.free_blocks(), 56);
        assert_eq!(allocator.alloc(2, 56).unwrap().block_count(), 56);
        assert_eq!(
            allocator.alloc(0, 1),
            Err(AllocError::NoSpace {
                requested: 1,
                free: 0
            })
        );
    }

    #[test]
    fn request_larger_than_a_shard_share_is_served_by_one_shard() {
        let allocator = allocator(512 * 16, 512, 8);
        let allocation = allocator.alloc(5, 512 * 12).unwrap();
        assert_eq!(allocation.block_count(), 512 * 12);
        assert_eq!(allocation.shard(), 5);
        assert_eq!(allocator.free_blocks(), 512 * 4);
        let distinct: std::collections::HashSet<u64> = allocation.blocks().collect();
        assert_eq!(distinct.len(), 512 * 12);
    }

    #[test]
    fn double_free_is_an_error_and_changes_nothing() {
        let allocator = allocator(256, 64, 2);
        let allocation = allocator.alloc(0, 20).unwrap();
        let start = allocation.extents()[0].start;
        allocator.free(start + 10, 5).unwrap();
        let free_before = allocator.free_blocks();
        assert_eq!(
            allocator.free(start, 20),
            Err(FreeError::DoubleFree { block: start + 10 })
        );
        assert_eq!(allocator.free_blocks(), free_before);
        assert_eq!(
            allocator.is_allocated(start),
            Some(true),
            "the valid prefix stays in use"
        );
        assert_eq!(
            allocator.free(start + 10, 1),
            Err(FreeError::DoubleFree { block: start + 10 })
        );
    }

    #[test]
    fn out_of_range_requests_are_errors() {
        let allocator = allocator(256, 64, 2);
        let out = |start, count| FreeError::OutOfRange {
            start,
            count,
            total_blocks: 256,
        };
        assert_eq!(allocator.free(250, 7), Err(out(250, 7)));
        assert_eq!(allocator.free(u64::MAX, 2), Err(out(u64::MAX, 2)));
        assert_eq!(allocator.is_allocated(256), None);
        assert_eq!(allocator.shard_free_blocks(2), None);
    }

    #[test]
    fn segment_freed_completely_becomes_a_free_segment_again() {
        let allocator = allocator(64 * 8, 64, 2);
        assert_eq!(allocator.free_segment_count(), 8);
        let allocation = allocator.alloc(0, 100).unwrap();
        assert_eq!(allocator.free_segment_count(), 6);
        let extent = allocation.extents()[0];
        allocator.free(extent.start + 64, 36).unwrap();
        assert_eq!(allocator.free_segment_count(), 7);
        allocator.free(extent.start, 64).unwrap();
        assert_eq!(allocator.free_segment_count(), 8);
        assert_eq!(allocator.free_blocks(), 64 * 8);
    }

    #[test]
    fn drained_shard_triggers_redistribution_that_balances_shards() {
        let allocator = allocator(64 * 64, 64, 4);
        let share = allocator.shard_free_blocks(0).unwrap();
        assert_eq!(share, 1024);
        // 5 % of 1024 is 51: the tenth request of 100 takes shard 0 below it.
        for _ in 0..9 {
            allocator.alloc(0, 100).unwrap();
        }
        assert_eq!(allocator.rebalance_count(), 0);
        assert_eq!(shard_frees(&allocator), [124, 1024, 1024, 1024]);
        allocator.alloc(0, 100).unwrap();
        assert_eq!(allocator.rebalance_count(), 1);
        assert!(!allocator.needs_rebalance());
        let frees = shard_frees(&allocator);
        assert_eq!(frees.iter().sum::<u64>(), 64 * 64 - 1000);
        assert!(spread(&frees) <= 64, "{frees:?}");
        assert!(frees[0] >= 3072 / 4 - 64, "{frees:?}");
    }

    #[test]
    fn reservation_crossing_the_watermark_raises_the_low_flag() {
        let allocator = allocator(64 * 8, 64, 2);
        // 256 free blocks per shard: the watermark is 12.
        assert_eq!(allocator.reserve(0, 240), Some(false));
        assert!(!allocator.needs_rebalance());
        assert_eq!(allocator.reserve(0, 10), Some(true));
        assert!(allocator.needs_rebalance());
        allocator.claim(0, 250);
        allocator.rebalance();
        assert!(!allocator.needs_rebalance());
    }

    #[test]
    fn cuda_header_mirrors_layout() {
        use core::mem::offset_of;
        let header = include_str!("../../cuda/sharded_bitmap.cuh");
        let sizes = [
            (
                "ShardedControl",
                size_of::<ControlBlock>(),
                align_of::<ControlBlock>(),
            ),
            (
                "ShardedShardHeader",
                size_of::<ShardHeader>(),
                align_of::<ShardHeader>(),
            ),
            ("ShardedExtent", size_of::<Extent>(), align_of::<Extent>()),
            (
                "ShardedBitmap",
                size_of::<ShardedDeviceView>(),
                align_of::<ShardedDeviceView>(),
            ),
        ];
        let offsets = [
            (
                "ShardedControl",
                "segment_count",
                offset_of!(ControlBlock, segment_count),
            ),
            (
                "ShardedControl",
                "blocks_per_segment",
                offset_of!(ControlBlock, blocks_per_segment),
            ),
            (
                "ShardedControl",
                "words_per_segment",
                offset_of!(ControlBlock, words_per_segment),
            ),
            (
                "ShardedControl",
                "shard_count",
                offset_of!(ControlBlock, shard_count),
            ),
            (
                "ShardedControl",
                "rebalancing",
                offset_of!(ControlBlock, rebalancing),
            ),
            (
                "ShardedControl",
                "rebalance_count",
                offset_of!(ControlBlock, rebalance_count),
            ),
            (
                "ShardedShardHeader",
                "low_watermark",
                offset_of!(ShardHeader, low_watermark),
            ),
            (
                "ShardedShardHeader",
                "scan_hint",
                offset_of!(ShardHeader, scan_hint),
            ),
            (
                "ShardedShardHeader",
                "list_begin",
                offset_of!(ShardHeader, list_begin),
            ),
            (
                "ShardedShardHeader",
                "list_len",
                offset_of!(ShardHeader, list_len),
            ),
            (
                "ShardedShardHeader",
                "active",
                offset_of!(ShardHeader, active),
            ),
            ("ShardedShardHeader", "low", offset_of!(ShardHeader, low)),
            ("ShardedExtent", "count", offset_of!(Extent, count)),
            (
                "ShardedBitmap",
                "shards",
                offset_of!(ShardedDeviceView, shards),
            ),
            (
                "ShardedBitmap",
                "bitmap",
                offset_of!(ShardedDeviceView, bitmap),
            ),
            (
                "ShardedBitmap",
                "segment_used",
                offset_of!(ShardedDeviceView, segment_used),
            ),
            (
                "ShardedBitmap",
                "segment_owner",
                offset_of!(ShardedDeviceView, segment_owner),
            ),
            (
                "ShardedBitmap",
                "shard_segments",
                offset_of!(ShardedDeviceView, shard_segments),
            ),
        ];
        let mut expected = Vec::new();
        for (name, size, align) in sizes {
            expected.push(format!("sizeof({name}) == {size}"));
            // Arrays of the 64-byte structs must have the same stride on both sides.
            if align == 64 {
                expected.push(format!("alignof({name}) == {align}"));
            }
        }
        for (name, field, offset) in offsets {
            expected.push(format!("SHARDED_OFFSETOF({name}, {field}) == {offset}"));
        }
        for line in expected {
            assert!(
                header.contains(&line),
                "cuda/sharded_bitmap.cuh lacks `{line}`"
            );
        }
    }

    #[test]
    fn eight_threads_never_share_a_block_and_free_counts_add_up() {
        const TOTAL: u64 = 1 << 15;
        const THREADS: u32 = 8;
        const ITERATIONS: u32 = 20_000;
        let config = ShardedConfig::new(TOTAL, 512, THREADS).with_low_threshold(0.25);
        let allocator = ShardedAllocator::new(config, |_| false).unwrap();
        let owned: Vec<AtomicBool> = (0..TOTAL).map(|_| AtomicBool::new(false)).collect();
        let start = std::sync::Barrier::new(THREADS as usize);
        let held_at_end: u64 = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..THREADS)
                .map(|thread| {
                    let (allocator, owned, start) = (&allocator, &owned, &start);
                    scope.spawn(move || {
                        use rand::{Rng, SeedableRng};
                        let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(thread));
                        let mut held: Vec<Extent> = Vec::new();
                        let mut held_blocks = 0;
                        // Uneven appetites (at most 29,200 blocks in all) drain some shards.
                        let held_limit = 1_500 + u64::from(thread) * 500;
                        start.wait();
                        for _ in 0..ITERATIONS {
                            if held_blocks > held_limit
                                || (!held.is_empty() && rng.random_bool(0.4))
                            {
                                let extent = held.swap_remove(rng.random_range(0..held.len()));
                                for block in extent.start..extent.start + extent.count {
                                    assert!(owned[block as usize].swap(false, Ordering::Relaxed));
                                }
                                allocator.free(extent.start, extent.count).unwrap();
                                held_blocks -= extent.count;
                            } else {
                                // Mostly small requests on two hot shards, so that threads
                                // race for the same bitmap words.
                                let n = if rng.random_bool(0.8) {
                                    rng.random_range(1..=48)
                                } else {
                                    rng.random_range(1..=400)
                                };
                                let hint = if rng.random_bool(0.6) {
                                    thread % 2
                                } else {
                                    rng.random()
                                };
                                let allocation = allocator.alloc(hint, n).unwrap();
                                for block in allocation.blocks() {
                                    let taken = owned[block as usize].swap(true, Ordering::Relaxed);
                                    assert!(!taken, "block {block} handed out twice");
                                }
                                held_blocks += n;
                                held.extend_from_slice(allocation.extents());
                            }
                        }
                        held_blocks
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|worker| worker.join().unwrap())
                .sum()
        });
        assert!(
            allocator.rebalance_count() > 0,
            "draining shards forced redistributions"
        );
        assert_eq!(allocator.free_blocks(), TOTAL - held_at_end);
        let marked = owned
            .iter()
            .filter(|flag| flag.load(Ordering::Relaxed))
            .count() as u64;
        assert_eq!(marked, held_at_end);
        for (block, flag) in owned.iter().enumerate() {
            assert_eq!(
                allocator.is_allocated(block as u64),
                Some(flag.load(Ordering::Relaxed))
            );
        }
    }

    /// One step of the model test.
    #[derive(Debug, Clone)]
    enum Step {
        Alloc {
            hint: u32,
            n: u64,
        },
        /// Frees a prefix of one held extent.
        Free {
            pick: usize,
            fraction: u8,
        },
        /// Frees again a range freed earlier.
        FreeAgain {
            pick: usize,
        },
        Rebalance,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (any::<u32>(), 1..200u64).prop_map(|(hint, n)| Step::Alloc { hint, n }),
            3 => (any::<usize>(), 1..=4u8)
                .prop_map(|(pick, fraction)| Step::Free { pick, fraction }),
            1 => any::<usize>().prop_map(|pick| Step::FreeAgain { pick }),
            1 => Just(Step::Rebalance),
        ]
    }

    /// Geometry and initial occupancy: (blocks per segment, segments, shards, threshold, used).
    fn setup() -> impl Strategy<Value = (u32, u64, u32, f64, Vec<bool>)> {
        (prop_oneof![Just(8u32), Just(64), Just(128)], 2..24u64).prop_flat_map(|(bps, segments)| {
            let blocks = (u64::from(bps) * segments) as usize;
            (
                Just(bps),
                Just(segments),
                1..=segments.min(6) as u32,
                0.01..0.6f64,
                proptest::collection::vec(proptest::bool::weighted(0.2), blocks),
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        #[test]
        fn allocator_matches_a_set_of_allocated_blocks(
            (bps, segments, shards, threshold, used) in setup(),
            steps in proptest::collection::vec(step(), 1..50),
        ) {
            let total = u64::from(bps) * segments;
            let config = ShardedConfig::new(total, bps, shards).with_low_threshold(threshold);
            let allocator = ShardedAllocator::new(config, |block| used[block as usize]).unwrap();
            let mut model = used.clone();
            let mut held: Vec<Extent> = Vec::new();
            let mut freed: Vec<Extent> = Vec::new();
            for step in steps {
                let model_free = model.iter().filter(|&&used| !used).count() as u64;
                match step {
                    Step::Alloc { hint, n } => match allocator.alloc(hint, n) {
                        Ok(allocation) => {
                            prop_assert_eq!(allocation.block_count(), n);
                            for block in allocation.blocks() {
                                let block = block as usize;
                                prop_assert!(!model[block], "block {} handed out twice", block);
                                model[block] = true;
                            }
                            held.extend_from_slice(allocation.extents());
                        }
                        Err(error) => prop_assert_eq!(
                            error,
                            AllocError::NoSpace { requested: n, free: model_free }
                        ),
                    },
                    Step::Free { pick, fraction } if !held.is_empty() => {
                        let extent = held.swap_remove(pick % held.len());
                        let count = (extent.count * u64::from(fraction)).div_ceil(4);
                        prop_assert_eq!(allocator.free(extent.start, count), Ok(()));
                        if count < extent.count {
                            let rest = extent.count - count;
                            held.push(Extent { start: extent.start + count, count: rest });
                        }
                        model[extent.start as usize..(extent.start + count) as usize].fill(false);
                        freed.push(Extent { start: extent.start, count });
                    }
                    Step::FreeAgain { pick } if !freed.is_empty() => {
                        let extent = freed[pick % freed.len()];
                        let range = extent.start as usize..(extent.start + extent.count) as usize;
                        // Blocks may have been handed out again; a free block must be reported.
                        if let Some(offset) = model[range].iter().position(|&used| !used) {
                            prop_assert_eq!(
                                allocator.free(extent.start, extent.count),
                                Err(FreeError::DoubleFree { block: extent.start + offset as u64 })
                            );
                        }
                    }
                    Step::Rebalance => {
                        allocator.rebalance();
                        prop_assert!(spread(&shard_frees(&allocator)) <= u64::from(bps));
                    }
                    Step::Free { .. } | Step::FreeAgain { .. } => {}
                }
                let model_free = model.iter().filter(|&&used| !used).count() as u64;
                prop_assert_eq!(allocator.free_blocks(), model_free);
                for (block, &used) in model.iter().enumerate() {
                    prop_assert_eq!(allocator.is_allocated(block as u64), Some(used));
                }
                let used_count: u64 = allocator.segment_used.iter()
                    .map(|used| u64::from(used.load(Ordering::Relaxed))).sum();
                prop_assert_eq!(used_count, total - model_free);
            }
        }

        #[test]
        fn balance_plan_keeps_shards_within_one_segment(
            bps in prop_oneof![Just(8u64), Just(512)],
            (shards, owners_and_free) in (1..12usize).prop_flat_map(|shards| (
                Just(shards),
                proptest::collection::vec((0..shards as u32, 0..=4u8), shards..80),
            )),
        ) {
            let (mut owners, segment_free): (Vec<u32>, Vec<u64>) = owners_and_free
                .into_iter()
                // Quarters of a segment: full, partly used and free segments.
                .map(|(owner, fifths)| (owner, bps * u64::from(fifths) / 4))
                .unzip();
            plan_balance(&mut owners, &segment_free, shards, bps);
            let mut load = vec![0u64; shards];
            for (segment, &owner) in owners.iter().enumerate() {
                load[owner as usize] += segment_free[segment];
            }
            prop_assert!(spread(&load) <= bps, "{:?}", load);
        }
    }
}
