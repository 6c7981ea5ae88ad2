//! GNoR's GPU-friendly multi-level memory pool allocator (GNStor §4.2, "GPU-friendly memory
//! allocator": a few size levels, e.g. 4 KiB, 64 KiB and 1 MiB, each managed by a bitmap).
//!
//! The pool hands out byte offsets into a pre-registered region of `capacity` bytes; it owns no
//! memory itself. Every size level keeps three bitmaps over the whole reserved range, in units of
//! the level's size:
//!
//! - *free*: a set bit means "this unit is free at this level". A byte is free at no more than
//!   one level: a unit is either free at its own level, split into children one level down, or
//!   allocated. Initially every active unit of the top level is free.
//! - *head* / *tail*: set on the first / last unit of each live allocation, so that `free` can
//!   reject double frees and offsets or lengths that do not name an allocation.
//!
//! **Placement.** A request of `len` bytes goes to the lowest level `i` whose next level is at
//! least `len` (or the top level), as a contiguous run of `ceil(len / size[i])` units; when that
//! run is as large as one unit of level `i + 1`, it takes that unit instead. This is the level
//! with the smallest rounded size (least internal fragmentation), and a run never outgrows one
//! parent, so a split can always serve it.
//!
//! **Allocation** finds the first run of free bits (first fit, runs may cross words) and claims
//! it: with one CAS when the run lies in one 64-bit word, else word by word in ascending order,
//! putting the words back if a later one was taken meanwhile. With no run free, it splits: it
//! claims a free unit of the lowest larger level that has one, then walks down, each time
//! keeping the first child and publishing its siblings as free.
//!
//! **Free** publishes the units again and merges opportunistically: when all children of a parent
//! are free it claims them (ascending words, so of two concurrent mergers only one gets past the
//! first word) and publishes the parent one level up, cascading. Every publication into a group
//! (a free, or words put back by a failed claim) is followed by a merge check of that group, so
//! once all operations have finished the pool is fully merged: only top-level units are free.
//!
//! **No spurious exhaustion.** Splits, merges, multi-word claims and growth hide units for a
//! moment (claimed from one bitmap, not yet published in another); they run inside a *window*
//! counted by `transient`, and every publication bumps `epoch`. An allocation that finds nothing
//! first merges every complete group (a concurrent free may not have run its merge check yet),
//! and reports failure only if no window is open and `epoch` did not move since it started (no
//! unit came free meanwhile); otherwise it looks again. Only then does it grow the pool
//! (activating `growth_factor` times more top-level units, up to `max_capacity`, counted in
//! `growth_events`) or return [`PoolError::Exhausted`]. Allocation and free are lock-free; only
//! the failure path waits for open windows, each a few instructions long.
//!
//! All atomics use `SeqCst`: the no-spurious-exhaustion check relies on one total order of
//! publications, window updates and loads.
//!
//! **Shared layout.** [`PoolHeader`] (with one [`LevelHeader`] per level) and the word array are
//! `#[repr(C)]` / plain `u64`s, mirrored by `cuda/size_class_pool.cuh`, whose `pool_alloc` and
//! `pool_free` run the same protocol with `atomicCAS` on the same memory. The device never grows
//! the pool: it returns `POOL_EXHAUSTED` and the host calls [`SizeClassPool::grow`].
//!
//! **Model checking.** Under `--cfg loom` the atomics and the yield of the failure path are
//! loom's, so that `tests/size_class_loom.rs` can explore the interleavings of the protocol;
//! loom's atomics are not plain `u64`s, so the shared layout holds only without `loom`.

use std::fmt;

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering::SeqCst};
#[cfg(loom)]
use loom::thread::yield_now;
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
#[cfg(not(loom))]
use std::thread::yield_now;

/// Most size levels a pool can have (the length of [`PoolHeader`]'s level table).
pub const MAX_LEVELS: usize = 8;

/// Most units a level may have over the reserved range (bounds the bitmaps to 32 MiB each).
pub const MAX_UNITS_PER_LEVEL: u64 = 1 << 28;

/// Bits per bitmap word.
const WORD_BITS: u64 = u64::BITS as u64;

/// Bitmaps per level, in their order in the word array: free, head, tail.
const BITMAPS_PER_LEVEL: u64 = 3;

/// Configuration of a [`SizeClassPool`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Unit size of each level in bytes, ascending; powers of two, each a multiple of the last.
    pub levels: Vec<u64>,
    /// Bytes active at creation; a multiple of the top level size.
    pub initial_capacity: u64,
    /// Bytes the pool may grow to (the reserved range); a multiple of the top level size.
    pub max_capacity: u64,
    /// Factor by which the active capacity grows when exhausted; at least 2.
    pub growth_factor: u64,
}

impl Default for PoolConfig {
    /// The paper's levels (4 KiB, 64 KiB, 1 MiB) and per-channel pool size (8 MiB, §5.4),
    /// allowed to double three times.
    fn default() -> Self {
        Self {
            levels: vec![4 << 10, 64 << 10, 1 << 20],
            initial_capacity: 8 << 20,
            max_capacity: 64 << 20,
            growth_factor: 2,
        }
    }
}

/// Errors of pool construction, allocation and free.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// the pool needs at least one size level
    #[error("the pool needs at least one size level")]
    NoLevels,
    /// {count} size levels given, at most 8 are supported
    #[error("{count} size levels given, at most 8 are supported")]
    TooManyLevels {
        /// Levels given.
        count: usize,
    },
    /// level size {size} is not a power of two
    #[error("level size {size} is not a power of two")]
    LevelNotPowerOfTwo {
        /// The offending level size.
        size: u64,
    },
    /// level size {size} is not a larger multiple of the previous level size {previous}
    #[error("level size {size} is not a larger multiple of the previous level size {previous}")]
    LevelNotMultiple {
        /// The offending level size.
        size: u64,
        /// The level size before it.
        previous: u64,
    },
    /// pool capacity is zero
    #[error("pool capacity is zero")]
    ZeroCapacity,
    /// capacity {capacity} is not a multiple of the top level size {top}
    #[error("capacity {capacity} is not a multiple of the top level size {top}")]
    CapacityNotMultiple {
        /// The offending capacity.
        capacity: u64,
        /// The top level size.
        top: u64,
    },
    /// maximum capacity {max} is below the initial capacity {initial}
    #[error("maximum capacity {max} is below the initial capacity {initial}")]
    MaxBelowInitial {
        /// Initial capacity.
        initial: u64,
        /// Maximum capacity.
        max: u64,
    },
    /// growth factor {factor} is below 2
    #[error("growth factor {factor} is below 2")]
    GrowthFactorTooSmall {
        /// The offending factor.
        factor: u64,
    },
    /// level size {size} needs {units} units over the maximum capacity, more than 2^28
    #[error("level size {size} needs {units} units over the maximum capacity, more than 2^28")]
    TooManyUnits {
        /// The level size.
        size: u64,
        /// Units it would need.
        units: u64,
    },
    /// cannot allocate {words} bitmap words
    #[error("cannot allocate {words} bitmap words")]
    BitmapAllocation {
        /// Words requested.
        words: u64,
    },
    /// zero-length allocation
    #[error("zero-length allocation")]
    ZeroLength,
    /// length {len} exceeds the maximum pool capacity {max}
    #[error("length {len} exceeds the maximum pool capacity {max}")]
    LengthTooLarge {
        /// Requested length.
        len: u64,
        /// Maximum capacity.
        max: u64,
    },
    /// pool exhausted: no free run for {len} bytes at maximum capacity
    #[error("pool exhausted: no free run for {len} bytes at maximum capacity")]
    Exhausted {
        /// Requested length.
        len: u64,
    },
    /// pool is already at its maximum capacity {max}
    #[error("pool is already at its maximum capacity {max}")]
    MaxCapacityReached {
        /// Maximum capacity.
        max: u64,
    },
    /// offset {offset} is not aligned to the {unit}-byte unit of its size level
    #[error("offset {offset} is not aligned to the {unit}-byte unit of its size level")]
    Misaligned {
        /// The offset.
        offset: u64,
        /// Unit size of the level the length maps to.
        unit: u64,
    },
    /// range {offset}+{len} exceeds the pool capacity {capacity}
    #[error("range {offset}+{len} exceeds the pool capacity {capacity}")]
    OutOfRange {
        /// The offset.
        offset: u64,
        /// The rounded length.
        len: u64,
        /// Active capacity.
        capacity: u64,
    },
    /// no live allocation of {len} bytes at offset {offset} (double free or bad offset)
    #[error("no live allocation of {len} bytes at offset {offset} (double free or bad offset)")]
    NotAllocated {
        /// The offset.
        offset: u64,
        /// The rounded length.
        len: u64,
    },
}

/// One live allocation: `len` bytes (the request rounded up to its level) at `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PoolAlloc {
    /// Byte offset into the pool's region, aligned to the unit of its level.
    pub offset: u64,
    /// Rounded length in bytes.
    pub len: u64,
}

/// Where a request of some length goes: a run of `units` units of level `level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Index of the size level (0 is the smallest).
    pub level: usize,
    /// Contiguous units of that level.
    pub units: u64,
    /// Unit size of that level in bytes.
    pub unit_size: u64,
}

impl Placement {
    /// The rounded length: `units * unit_size`.
    pub fn rounded_len(&self) -> u64 {
        self.units * self.unit_size
    }
}

/// A snapshot of a pool's counters (not atomic as a whole while others allocate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStats {
    /// Active capacity in bytes.
    pub capacity: u64,
    /// Reserved (maximum) capacity in bytes.
    pub max_capacity: u64,
    /// Bytes free over all levels.
    pub free_bytes: u64,
    /// Free units per level, smallest level first.
    pub free_units: Vec<u64>,
    /// Times the pool grew.
    pub growth_events: u64,
    /// Units split into children.
    pub splits: u64,
    /// Groups of children merged into their parent.
    pub merges: u64,
}

/// One size level's geometry, shared with CUDA (`PoolLevel` in `size_class_pool.cuh`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct LevelHeader {
    /// Unit size in bytes.
    unit_size: u64,
    /// log2 of `unit_size`.
    unit_shift: u32,
    /// log2 of the units of this level that make one unit of the next level (0 at the top).
    group_shift: u32,
    /// Index in the word array of this level's free bitmap; head and tail bitmaps follow it.
    word_offset: u64,
    /// Words in each of this level's three bitmaps.
    bitmap_words: u64,
}

const _: () = assert!(core::mem::size_of::<LevelHeader>() == 32);
const _: () = assert!(core::mem::offset_of!(LevelHeader, unit_size) == 0);
const _: () = assert!(core::mem::offset_of!(LevelHeader, unit_shift) == 8);
const _: () = assert!(core::mem::offset_of!(LevelHeader, group_shift) == 12);
const _: () = assert!(core::mem::offset_of!(LevelHeader, word_offset) == 16);
const _: () = assert!(core::mem::offset_of!(LevelHeader, bitmap_words) == 24);

impl LevelHeader {
    const UNUSED: Self = Self {
        unit_size: 0,
        unit_shift: 0,
        group_shift: 0,
        word_offset: 0,
        bitmap_words: 0,
    };
}

/// The pool's shared state, shared with CUDA (`PoolHeader` in `size_class_pool.cuh`).
#[repr(C)]
#[derive(Debug)]
pub struct PoolHeader {
    /// Size levels in use (the first entries of `levels`).
    level_count: u64,
    /// Reserved capacity in bytes.
    max_capacity: u64,
    /// Growth factor of the active capacity.
    growth_factor: u64,
    /// Active capacity in bytes.
    capacity: AtomicU64,
    /// Bumped after every publication of free units.
    epoch: AtomicU64,
    /// Open windows in which units are hidden (claimed, not yet republished).
    transient: AtomicU64,
    /// Times the pool grew.
    growth_events: AtomicU64,
    /// Units split into children.
    splits: AtomicU64,
    /// Groups of children merged into their parent.
    merges: AtomicU64,
    /// Geometry of each level; entries past `level_count` are zero.
    levels: [LevelHeader; MAX_LEVELS],
}

// Loom's atomics are larger than `u64`: the shared layout (and CUDA) exists only without loom.
#[cfg(not(loom))]
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<AtomicU64>() == 8);
    assert!(size_of::<PoolHeader>() == 328);
    assert!(offset_of!(PoolHeader, level_count) == 0);
    assert!(offset_of!(PoolHeader, max_capacity) == 8);
    assert!(offset_of!(PoolHeader, growth_factor) == 16);
    assert!(offset_of!(PoolHeader, capacity) == 24);
    assert!(offset_of!(PoolHeader, epoch) == 32);
    assert!(offset_of!(PoolHeader, transient) == 40);
    assert!(offset_of!(PoolHeader, growth_events) == 48);
    assert!(offset_of!(PoolHeader, splits) == 56);
    assert!(offset_of!(PoolHeader, merges) == 64);
    assert!(offset_of!(PoolHeader, levels) == 72);
};

/// Which of a level's bitmaps a word belongs to.
#[derive(Debug, Clone, Copy)]
enum Bitmap {
    Free = 0,
    Head = 1,
    Tail = 2,
}

/// The words overlapping units `[start, start + count)`, each with the mask of those units.
fn word_segments(start: u64, count: u64) -> impl Iterator<Item = (u64, u64)> {
    let end = start + count;
    let words = if count == 0 {
        0..0
    } else {
        start / WORD_BITS..(end - 1) / WORD_BITS + 1
    };
    words.map(move |word| {
        let low = start.max(word * WORD_BITS) - word * WORD_BITS;
        let high = end.min((word + 1) * WORD_BITS) - word * WORD_BITS;
        let width = high - low;
        let mask = if width == WORD_BITS {
            u64::MAX
        } else {
            ((1u64 << width) - 1) << low
        };
        (word, mask)
    })
}

/// Bits `i` of `word` such that bits `i .. i + run` are all set (`1 <= run <= 64`).
fn run_starts(word: u64, run: u64) -> u64 {
    let mut starts = word;
    let mut covered = 1;
    while covered < run {
        // Each step extends the runs by up to their current length (doubling).
        let step = covered.min(run - covered);
        starts &= starts >> step;
        covered += step;
    }
    starts
}

/// GNoR's lock-free multi-level pool allocator over a range of offsets (see the module docs).
pub struct SizeClassPool {
    header: Box<PoolHeader>,
    words: Box<[AtomicU64]>,
}

impl fmt::Debug for SizeClassPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SizeClassPool")
            .field("header", &self.header)
            .field("words", &self.words.len())
            .finish()
    }
}

impl SizeClassPool {
    /// Validates `config` and creates a pool whose first `initial_capacity` bytes are free as
    /// top-level units.
    pub fn new(config: PoolConfig) -> Result<Self, PoolError> {
        let PoolConfig {
            levels,
            initial_capacity,
            max_capacity,
            growth_factor,
        } = config;
        let top = *levels.last().ok_or(PoolError::NoLevels)?;
        if levels.len() > MAX_LEVELS {
            return Err(PoolError::TooManyLevels {
                count: levels.len(),
            });
        }
        if let Some(&size) = levels.iter().find(|size| !size.is_power_of_two()) {
            return Err(PoolError::LevelNotPowerOfTwo { size });
        }
        if let Some(pair) = levels.windows(2).find(|pair| pair[1] <= pair[0]) {
            // Powers of two: a larger one is always a multiple of a smaller one.
            return Err(PoolError::LevelNotMultiple {
                size: pair[1],
                previous: pair[0],
            });
        }
        if initial_capacity == 0 || max_capacity == 0 {
            return Err(PoolError::ZeroCapacity);
        }
        for capacity in [initial_capacity, max_capacity] {
            if capacity % top != 0 {
                return Err(PoolError::CapacityNotMultiple { capacity, top });
            }
        }
        if max_capacity < initial_capacity {
            return Err(PoolError::MaxBelowInitial {
                initial: initial_capacity,
                max: max_capacity,
            });
        }
        if growth_factor < 2 {
            return Err(PoolError::GrowthFactorTooSmall {
                factor: growth_factor,
            });
        }

        let mut level_headers = [LevelHeader::UNUSED; MAX_LEVELS];
        let mut total_words = 0;
        for (index, &size) in levels.iter().enumerate() {
            let units = max_capacity / size;
            if units > MAX_UNITS_PER_LEVEL {
                return Err(PoolError::TooManyUnits { size, units });
            }
            let bitmap_words = units.div_ceil(WORD_BITS);
            let next = levels.get(index + 1).copied().unwrap_or(size);
            level_headers[index] = LevelHeader {
                unit_size: size,
                unit_shift: size.trailing_zeros(),
                group_shift: (next / size).trailing_zeros(),
                word_offset: total_words,
                bitmap_words,
            };
            total_words += BITMAPS_PER_LEVEL * bitmap_words;
        }
        let allocation_error = PoolError::BitmapAllocation { words: total_words };
        let word_count = usize::try_from(total_words).map_err(|_| allocation_error)?;
        let mut words = Vec::new();
        words
            .try_reserve_exact(word_count)
            .map_err(|_| allocation_error)?;
        words.resize_with(word_count, || AtomicU64::new(0));

        let pool = Self {
            header: Box::new(PoolHeader {
                level_count: levels.len() as u64,
                max_capacity,
                growth_factor,
                capacity: AtomicU64::new(initial_capacity),
                epoch: AtomicU64::new(0),
                transient: AtomicU64::new(0),
                growth_events: AtomicU64::new(0),
                splits: AtomicU64::new(0),
                merges: AtomicU64::new(0),
                levels: level_headers,
            }),
            words: words.into_boxed_slice(),
        };
        pool.set_free(pool.top(), 0, initial_capacity / top);
        Ok(pool)
    }

    /// Where a request of `len` bytes goes (see "Placement" in the module docs).
    pub fn placement(&self, len: u64) -> Result<Placement, PoolError> {
        if len == 0 {
            return Err(PoolError::ZeroLength);
        }
        let max = self.header.max_capacity;
        if len > max {
            return Err(PoolError::LengthTooLarge { len, max });
        }
        let top = self.top();
        let mut level = (0..top)
            .find(|&level| len <= self.unit_size(level + 1))
            .unwrap_or(top);
        let mut units = len.div_ceil(self.unit_size(level));
        if level < top && units * self.unit_size(level) == self.unit_size(level + 1) {
            // A run as large as one parent: take the parent itself (fewer bits, no split).
            level += 1;
            units = 1;
        }
        Ok(Placement {
            level,
            units,
            unit_size: self.unit_size(level),
        })
    }

    /// Allocates `len` bytes (rounded up to its level), growing the pool when it is exhausted.
    pub fn alloc(&self, len: u64) -> Result<PoolAlloc, PoolError> {
        let placement = self.placement(len)?;
        let level = placement.level;
        loop {
            let epoch = self.header.epoch.load(SeqCst);
            if let Some(start) = self.take(level, placement.units) {
                self.set_bit(level, Bitmap::Tail, start + placement.units - 1);
                self.set_bit(level, Bitmap::Head, start);
                let offset = start << self.level(level).unit_shift;
                return Ok(PoolAlloc {
                    offset,
                    len: placement.rounded_len(),
                });
            }
            self.coalesce();
            let capacity = self.capacity();
            if self.header.transient.load(SeqCst) != 0 || self.header.epoch.load(SeqCst) != epoch {
                // Units are hidden in an open window or came free meanwhile: look again.
                yield_now();
                continue;
            }
            // Growing fails only at the maximum capacity.
            if self.grow_from(capacity).is_err() {
                return Err(PoolError::Exhausted { len });
            }
        }
    }

    /// Frees an allocation made by [`alloc`](Self::alloc) and merges what it completes.
    ///
    /// Detects double frees and offsets or lengths that do not name a live allocation (as long
    /// as the units were not handed out again in between).
    pub fn free(&self, alloc: PoolAlloc) -> Result<(), PoolError> {
        let PoolAlloc { offset, len } = alloc;
        let placement = self.placement(len)?;
        let (level, units) = (placement.level, placement.units);
        let unit = placement.unit_size;
        if offset % unit != 0 {
            return Err(PoolError::Misaligned { offset, unit });
        }
        let rounded = placement.rounded_len();
        let capacity = self.capacity();
        if offset.checked_add(rounded).is_none_or(|end| end > capacity) {
            return Err(PoolError::OutOfRange {
                offset,
                len: rounded,
                capacity,
            });
        }
        let not_allocated = PoolError::NotAllocated {
            offset,
            len: rounded,
        };
        let start = offset >> self.level(level).unit_shift;
        let last = start + units - 1;
        if !self.only_bit_in_range(level, Bitmap::Head, start, units, start)
            || !self.only_bit_in_range(level, Bitmap::Tail, start, units, last)
        {
            return Err(not_allocated);
        }
        // The commit point: of two concurrent frees of one allocation, one clears the head.
        if !self.clear_bit(level, Bitmap::Head, start) {
            return Err(not_allocated);
        }
        self.clear_bit(level, Bitmap::Tail, last);
        self.release(level, start, units);
        Ok(())
    }

    /// Grows the active capacity by the growth factor (capped at the maximum) and returns it.
    pub fn grow(&self) -> Result<u64, PoolError> {
        loop {
            match self.grow_from(self.capacity()) {
                Ok(Some(capacity)) => return Ok(capacity),
                Ok(None) => continue,
                Err(error) => return Err(error),
            }
        }
    }

    /// Active capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.header.capacity.load(SeqCst)
    }

    /// Reserved (maximum) capacity in bytes.
    pub fn max_capacity(&self) -> u64 {
        self.header.max_capacity
    }

    /// Bytes free over all levels (a snapshot).
    pub fn free_bytes(&self) -> u64 {
        (0..self.level_count())
            .map(|level| self.free_units(level) * self.unit_size(level))
            .sum()
    }

    /// A snapshot of the pool's counters.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            capacity: self.capacity(),
            max_capacity: self.header.max_capacity,
            free_bytes: self.free_bytes(),
            free_units: (0..self.level_count())
                .map(|level| self.free_units(level))
                .collect(),
            growth_events: self.header.growth_events.load(SeqCst),
            splits: self.header.splits.load(SeqCst),
            merges: self.header.merges.load(SeqCst),
        }
    }

    /// The shared header, to copy next to [`words`](Self::words) into GPU memory.
    pub fn header(&self) -> &PoolHeader {
        &self.header
    }

    /// The bitmap words the header's levels index, to copy into GPU memory (plain `u64`s except
    /// under `cfg(loom)`).
    pub fn words(&self) -> &[AtomicU64] {
        &self.words
    }

    fn level_count(&self) -> usize {
        self.header.level_count as usize
    }

    fn top(&self) -> usize {
        self.level_count() - 1
    }

    fn level(&self, level: usize) -> &LevelHeader {
        &self.header.levels[level]
    }

    fn unit_size(&self, level: usize) -> u64 {
        self.level(level).unit_size
    }

    fn word(&self, level: usize, bitmap: Bitmap, word: u64) -> &AtomicU64 {
        let header = self.level(level);
        let index = header.word_offset + bitmap as u64 * header.bitmap_words + word;
        &self.words[index as usize]
    }

    /// Active words of `level`'s bitmaps (bits past the active capacity are never set).
    fn active_words(&self, level: usize) -> u64 {
        (self.capacity() >> self.level(level).unit_shift).div_ceil(WORD_BITS)
    }

    fn free_units(&self, level: usize) -> u64 {
        (0..self.active_words(level))
            .map(|word| {
                u64::from(
                    self.word(level, Bitmap::Free, word)
                        .load(SeqCst)
                        .count_ones(),
                )
            })
            .sum()
    }

    fn open_window(&self) {
        self.header.transient.fetch_add(1, SeqCst);
    }

    fn close_window(&self) {
        self.header.transient.fetch_sub(1, SeqCst);
    }

    fn set_bit(&self, level: usize, bitmap: Bitmap, unit: u64) {
        self.word(level, bitmap, unit / WORD_BITS)
            .fetch_or(1 << (unit % WORD_BITS), SeqCst);
    }

    /// Clears one bit and says whether it was set.
    fn clear_bit(&self, level: usize, bitmap: Bitmap, unit: u64) -> bool {
        let bit = 1 << (unit % WORD_BITS);
        self.word(level, bitmap, unit / WORD_BITS)
            .fetch_and(!bit, SeqCst)
            & bit
            != 0
    }

    /// Whether `unit` is the only set bit of `bitmap` within `[start, start + count)`.
    fn only_bit_in_range(
        &self,
        level: usize,
        bitmap: Bitmap,
        start: u64,
        count: u64,
        unit: u64,
    ) -> bool {
        word_segments(start, count).all(|(word, mask)| {
            let expected = if unit / WORD_BITS == word {
                1 << (unit % WORD_BITS)
            } else {
                0
            };
            self.word(level, bitmap, word).load(SeqCst) & mask == expected
        })
    }

    fn all_free(&self, level: usize, start: u64, count: u64) -> bool {
        word_segments(start, count)
            .all(|(word, mask)| self.word(level, Bitmap::Free, word).load(SeqCst) & mask == mask)
    }

    /// Marks units free and bumps the epoch, without merge checks.
    fn set_free(&self, level: usize, start: u64, count: u64) {
        for (word, mask) in word_segments(start, count) {
            self.word(level, Bitmap::Free, word).fetch_or(mask, SeqCst);
        }
        self.header.epoch.fetch_add(1, SeqCst);
    }

    /// Marks units free, then merges every group they complete.
    fn release(&self, level: usize, start: u64, count: u64) {
        self.set_free(level, start, count);
        self.merge_groups(level, start, count);
    }

    /// Clears `mask` in a free-bitmap word if all of it is set; says whether it did.
    fn clear_if_all_set(&self, word: &AtomicU64, mask: u64) -> bool {
        let mut current = word.load(SeqCst);
        loop {
            if current & mask != mask {
                return false;
            }
            match word.compare_exchange_weak(current, current & !mask, SeqCst, SeqCst) {
                Ok(_) => return true,
                Err(actual) => current = actual,
            }
        }
    }

    /// Claims units `[start, start + count)` if all are free, word by word in ascending order.
    /// On failure puts back the units already taken (without merge checks) and returns their
    /// count.
    fn claim_raw(&self, level: usize, start: u64, count: u64) -> Result<(), u64> {
        for (word, mask) in word_segments(start, count) {
            if !self.clear_if_all_set(self.word(level, Bitmap::Free, word), mask) {
                let taken = (word * WORD_BITS).max(start) - start;
                if taken > 0 {
                    self.set_free(level, start, taken);
                }
                return Err(taken);
            }
        }
        Ok(())
    }

    /// Claims a run for an allocation. A multi-word claim runs in a window (its words are hidden
    /// until it completes or puts them back). With `hidden` the window stays open on success:
    /// the caller (a split) republishes part of the run and closes it.
    fn claim(&self, level: usize, start: u64, count: u64, hidden: bool) -> bool {
        let multi_word = start / WORD_BITS != (start + count - 1) / WORD_BITS;
        let window = hidden || multi_word;
        if window {
            self.open_window();
        }
        match self.claim_raw(level, start, count) {
            Ok(()) => {
                if window && !hidden {
                    self.close_window();
                }
                true
            }
            Err(put_back) => {
                self.merge_groups(level, start, put_back);
                if window {
                    self.close_window();
                }
                false
            }
        }
    }

    /// First unit of the first run of `count` free units at `level` (first fit).
    fn find_run(&self, level: usize, count: u64) -> Option<u64> {
        // The run of set bits that ends at the top of the previous word.
        let mut carry_start = 0;
        let mut carry_len = 0;
        for word_index in 0..self.active_words(level) {
            let word = self.word(level, Bitmap::Free, word_index).load(SeqCst);
            let base = word_index * WORD_BITS;
            if carry_len > 0 && carry_len + u64::from(word.trailing_ones()) >= count {
                return Some(carry_start);
            }
            if count <= WORD_BITS {
                let starts = run_starts(word, count);
                if starts != 0 {
                    return Some(base + u64::from(starts.trailing_zeros()));
                }
            }
            if word == u64::MAX {
                if carry_len == 0 {
                    carry_start = base;
                }
                carry_len += WORD_BITS;
            } else {
                carry_len = u64::from(word.leading_ones());
                carry_start = base + WORD_BITS - carry_len;
            }
        }
        None
    }

    /// Claims the first free run of `count` units at `level`, if any (see [`Self::claim`] for
    /// `hidden`).
    fn take_free(&self, level: usize, count: u64, hidden: bool) -> Option<u64> {
        while let Some(start) = self.find_run(level, count) {
            if self.claim(level, start, count, hidden) {
                return Some(start);
            }
        }
        None
    }

    /// Claims `count` contiguous units at `level`; with no run free, splits a unit of the
    /// lowest larger level that has one, down to `level`, keeping the first child each time.
    fn take(&self, level: usize, count: u64) -> Option<u64> {
        if let Some(start) = self.take_free(level, count, false) {
            return Some(start);
        }
        // The window opened for the split unit stays open until its last children are public.
        let (mut parent_level, mut parent) = (level + 1..=self.top())
            .find_map(|larger| Some((larger, self.take_free(larger, 1, true)?)))?;
        while parent_level > level {
            parent_level -= 1;
            let group_shift = self.level(parent_level).group_shift;
            let first = parent << group_shift;
            // The run is smaller than one parent (see `placement`), so some children remain.
            let kept = if parent_level == level { count } else { 1 };
            self.header.splits.fetch_add(1, SeqCst);
            self.set_free(parent_level, first + kept, (1 << group_shift) - kept);
            parent = first;
        }
        self.close_window();
        Some(parent)
    }

    /// Merges every complete group of children among units `[start, start + count)`, cascading.
    fn merge_groups(&self, level: usize, start: u64, count: u64) {
        if level == self.top() || count == 0 {
            return;
        }
        let group_shift = self.level(level).group_shift;
        for group in start >> group_shift..=(start + count - 1) >> group_shift {
            self.merge_upwards(level, group);
        }
    }

    /// Merges `group` at `level`, then the group its parent belongs to, and so on upwards.
    fn merge_upwards(&self, mut level: usize, mut group: u64) {
        while level < self.top() && self.merge_group(level, group) {
            level += 1;
            group >>= self.level(level).group_shift;
        }
    }

    /// If all children of `group` (a unit of level `level + 1`) are free at `level`, claims them
    /// and publishes the parent; says whether it did.
    fn merge_group(&self, level: usize, group: u64) -> bool {
        let group_shift = self.level(level).group_shift;
        let first = group << group_shift;
        let children = 1 << group_shift;
        while self.all_free(level, first, children) {
            self.open_window();
            let merged = self.claim_raw(level, first, children).is_ok();
            if merged {
                self.header.merges.fetch_add(1, SeqCst);
                self.set_free(level + 1, group, 1);
            }
            self.close_window();
            if merged {
                return true;
            }
            // An allocation took a child meanwhile and may put it back: look again.
        }
        false
    }

    /// Merges every complete group in the active range, lowest level first.
    fn coalesce(&self) {
        let capacity = self.capacity();
        for level in 0..self.top() {
            // Lowest level first, so a merge's parent is looked at later in the sweep.
            for group in 0..capacity >> self.level(level + 1).unit_shift {
                self.merge_group(level, group);
            }
        }
    }

    /// Grows from `capacity` if that is still the active capacity: `Ok(None)` if another grower
    /// came first.
    fn grow_from(&self, capacity: u64) -> Result<Option<u64>, PoolError> {
        let max = self.header.max_capacity;
        if capacity >= max {
            return Err(PoolError::MaxCapacityReached { max });
        }
        let grown = capacity.saturating_mul(self.header.growth_factor).min(max);
        // The new units are hidden between the capacity update and their publication.
        self.open_window();
        let won = self
            .header
            .capacity
            .compare_exchange(capacity, grown, SeqCst, SeqCst)
            .is_ok();
        if won {
            let top = self.top();
            let shift = self.level(top).unit_shift;
            self.set_free(top, capacity >> shift, (grown - capacity) >> shift);
            self.header.growth_events.fetch_add(1, SeqCst);
        }
        self.close_window();
        Ok(won.then_some(grown))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::AtomicU32;

    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;

    fn config(levels: &[u64], initial: u64, max: u64, factor: u64) -> PoolConfig {
        PoolConfig {
            levels: levels.to_vec(),
            initial_capacity: initial,
            max_capacity: max,
            growth_factor: factor,
        }
    }

    fn pool(levels: &[u64], initial: u64, max: u64) -> SizeClassPool {
        SizeClassPool::new(config(levels, initial, max, 2)).unwrap()
    }

    fn gnstor_pool(initial: u64, max: u64) -> SizeClassPool {
        pool(&[4 * KIB, 64 * KIB, MIB], initial, max)
    }

    /// Fully merged: every active top-level unit free, nothing free below the top.
    fn assert_whole(pool: &SizeClassPool) {
        let stats = pool.stats();
        let top = stats.free_units.len() - 1;
        let top_size = pool.unit_size(top);
        assert_eq!(
            stats.free_units[top],
            stats.capacity / top_size,
            "{stats:?}"
        );
        assert!(
            stats.free_units[..top].iter().all(|&units| units == 0),
            "{stats:?}"
        );
        assert_eq!(stats.free_bytes, stats.capacity);
        assert_eq!(pool.header.transient.load(SeqCst), 0);
    }

    #[test]
    fn invalid_configs_are_rejected() {
        let cases = [
            (config(&[], MIB, MIB, 2), PoolError::NoLevels),
            (
                config(&[4 * KIB; 9], MIB, MIB, 2),
                PoolError::TooManyLevels { count: 9 },
            ),
            (
                config(&[3 * KIB, MIB], MIB, MIB, 2),
                PoolError::LevelNotPowerOfTwo { size: 3 * KIB },
            ),
            (
                config(&[0, MIB], MIB, MIB, 2),
                PoolError::LevelNotPowerOfTwo { size: 0 },
            ),
            (
                config(&[64 * KIB, 4 * KIB], MIB, MIB, 2),
                PoolError::LevelNotMultiple {
                    size: 4 * KIB,
                    previous: 64 * KIB,
                },
            ),
            (
                config(&[4 * KIB, 4 * KIB], MIB, MIB, 2),
                PoolError::LevelNotMultiple {
                    size: 4 * KIB,
                    previous: 4 * KIB,
                },
            ),
            (config(&[4 * KIB, MIB], 0, MIB, 2), PoolError::ZeroCapacity),
            (config(&[4 * KIB, MIB], MIB, 0, 2), PoolError::ZeroCapacity),
            (
                config(&[4 * KIB, MIB], MIB + 4 * KIB, 4 * MIB, 2),
                PoolError::CapacityNotMultiple {
                    capacity: MIB + 4 * KIB,
                    top: MIB,
                },
            ),
            (
                config(&[4 * KIB, MIB], MIB, 3 * MIB + 1, 2),
                PoolError::CapacityNotMultiple {
                    capacity: 3 * MIB + 1,
                    top: MIB,
                },
            ),
            (
                config(&[4 * KIB, MIB], 2 * MIB, MIB, 2),
                PoolError::MaxBelowInitial {
                    initial: 2 * MIB,
                    max: MIB,
                },
            ),
            (
                config(&[4 * KIB, MIB], MIB, MIB, 1),
                PoolError::GrowthFactorTooSmall { factor: 1 },
            ),
            (
                config(&[1, MIB], MIB, 1 << 30, 2),
                PoolError::TooManyUnits {
                    size: 1,
                    units: 1 << 30,
                },
            ),
        ];
        for (config, expected) in cases {
            assert_eq!(
                SizeClassPool::new(config.clone()).unwrap_err(),
                expected,
                "{config:?}"
            );
        }
        assert!(SizeClassPool::new(PoolConfig::default()).is_ok());
    }

    #[test]
    fn placement_picks_the_level_with_least_rounding() {
        let pool = gnstor_pool(8 * MIB, 8 * MIB);
        let cases = [
            (1, 0, 1),
            (4 * KIB, 0, 1),
            (5 * KIB, 0, 2),
            (60 * KIB, 0, 15),
            (61 * KIB, 1, 1),
            (64 * KIB, 1, 1),
            (65 * KIB, 1, 2),
            (960 * KIB, 1, 15),
            (961 * KIB, 2, 1),
            (MIB, 2, 1),
            (3 * MIB + 1, 2, 4),
            (8 * MIB, 2, 8),
        ];
        for (len, level, units) in cases {
            let placement = pool.placement(len).unwrap();
            assert_eq!(
                (placement.level, placement.units),
                (level, units),
                "len {len}"
            );
            assert_eq!(
                pool.placement(placement.rounded_len()).unwrap(),
                placement,
                "len {len}"
            );
        }
        assert_eq!(pool.placement(0), Err(PoolError::ZeroLength));
        assert_eq!(
            pool.placement(8 * MIB + 1),
            Err(PoolError::LengthTooLarge {
                len: 8 * MIB + 1,
                max: 8 * MIB
            })
        );
    }

    #[test]
    fn small_allocation_splits_down_and_free_merges_back() {
        let pool = gnstor_pool(2 * MIB, 2 * MIB);
        let small = pool.alloc(4 * KIB).unwrap();
        assert_eq!(
            small,
            PoolAlloc {
                offset: 0,
                len: 4 * KIB
            }
        );
        let stats = pool.stats();
        assert_eq!(stats.free_units, vec![15, 15, 1]);
        assert_eq!((stats.splits, stats.merges), (2, 0));
        assert_eq!(stats.free_bytes, 2 * MIB - 4 * KIB);

        pool.free(small).unwrap();
        let stats = pool.stats();
        assert_eq!(stats.free_units, vec![0, 0, 2]);
        assert_eq!(stats.merges, 2);
        assert_whole(&pool);
    }

    #[test]
    fn runs_are_contiguous_and_reuse_split_remainders() {
        let pool = gnstor_pool(MIB, MIB);
        let run = pool.alloc(60 * KIB).unwrap();
        assert_eq!(
            run,
            PoolAlloc {
                offset: 0,
                len: 60 * KIB
            }
        );
        let next = pool.alloc(4 * KIB).unwrap();
        assert_eq!(next.offset, 60 * KIB, "the split parent's last child");
        assert_eq!(pool.stats().splits, 2);
        let mid = pool.alloc(128 * KIB).unwrap();
        assert_eq!(
            mid,
            PoolAlloc {
                offset: 64 * KIB,
                len: 128 * KIB
            }
        );
        for alloc in [next, run, mid] {
            pool.free(alloc).unwrap();
        }
        assert_whole(&pool);
    }

    #[test]
    fn run_crossing_a_word_boundary_is_claimed_and_freed() {
        let pool = pool(&[MIB], 100 * MIB, 100 * MIB);
        let low = pool.alloc(60 * MIB).unwrap();
        let crossing = pool.alloc(10 * MIB).unwrap();
        assert_eq!(
            crossing,
            PoolAlloc {
                offset: 60 * MIB,
                len: 10 * MIB
            }
        );
        pool.free(low).unwrap();
        let big = pool.alloc(90 * MIB);
        assert_eq!(big, Err(PoolError::Exhausted { len: 90 * MIB }));
        pool.free(crossing).unwrap();
        assert_eq!(
            pool.alloc(90 * MIB).unwrap(),
            PoolAlloc {
                offset: 0,
                len: 90 * MIB
            }
        );
    }

    #[test]
    fn wide_groups_spanning_words_merge_back() {
        // 256 children per parent: a group spans four words.
        let pool = pool(&[4 * KIB, MIB], 2 * MIB, 2 * MIB);
        let allocs: Vec<_> = (0..300).map(|_| pool.alloc(4 * KIB).unwrap()).collect();
        assert_eq!(pool.stats().free_units, vec![512 - 300, 0]);
        assert_eq!(pool.alloc(MIB), Err(PoolError::Exhausted { len: MIB }));
        let wide = pool.alloc(200 * KIB).unwrap();
        assert_eq!(wide.offset, 300 * 4 * KIB, "a run across a word boundary");
        for alloc in allocs.into_iter().chain([wide]) {
            pool.free(alloc).unwrap();
        }
        assert_eq!(pool.stats().merges, 2);
        assert_whole(&pool);
    }

    #[test]
    fn exhaustion_grows_by_the_factor_up_to_the_maximum() {
        let pool = gnstor_pool(MIB, 4 * MIB);
        let first = pool.alloc(MIB).unwrap();
        let second = pool.alloc(MIB).unwrap();
        assert_eq!((pool.capacity(), pool.stats().growth_events), (2 * MIB, 1));
        assert_eq!(second.offset, MIB);
        let third = pool.alloc(2 * MIB).unwrap();
        assert_eq!(third.offset, 2 * MIB);
        assert_eq!((pool.capacity(), pool.stats().growth_events), (4 * MIB, 2));
        assert_eq!(
            pool.alloc(4 * KIB),
            Err(PoolError::Exhausted { len: 4 * KIB })
        );
        assert_eq!(
            pool.grow(),
            Err(PoolError::MaxCapacityReached { max: 4 * MIB })
        );
        for alloc in [first, second, third] {
            pool.free(alloc).unwrap();
        }
        assert_whole(&pool);
    }

    #[test]
    fn allocation_waits_for_units_hidden_in_an_open_window() {
        let pool = gnstor_pool(MIB, MIB);
        // Play a merge in flight: the only unit is claimed, its republication still pending.
        pool.open_window();
        assert_eq!(pool.claim_raw(2, 0, 1), Ok(()));
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| pool.alloc(MIB));
            std::thread::sleep(std::time::Duration::from_millis(50));
            pool.set_free(2, 0, 1);
            pool.close_window();
            assert_eq!(
                waiter.join().unwrap(),
                Ok(PoolAlloc {
                    offset: 0,
                    len: MIB
                })
            );
        });
    }

    #[test]
    fn allocation_completes_pending_merges_before_failing() {
        let pool = gnstor_pool(MIB, MIB);
        // Play a free whose merge check has not run yet: all children free, parent not.
        assert_eq!(pool.claim_raw(2, 0, 1), Ok(()));
        pool.set_free(1, 0, 16);
        assert_eq!(
            pool.alloc(MIB),
            Ok(PoolAlloc {
                offset: 0,
                len: MIB
            })
        );
        assert_eq!(pool.stats().merges, 1);
    }

    #[test]
    fn explicit_growth_is_capped_at_the_maximum() {
        let pool = SizeClassPool::new(config(&[4 * KIB, MIB], MIB, 4 * MIB, 3)).unwrap();
        assert_eq!(pool.grow(), Ok(3 * MIB));
        assert_eq!(pool.grow(), Ok(4 * MIB));
        assert_eq!(
            pool.grow(),
            Err(PoolError::MaxCapacityReached { max: 4 * MIB })
        );
        assert_eq!(pool.stats().growth_events, 2);
        assert_whole(&pool);
    }

    #[test]
    fn bad_frees_are_rejected_and_change_nothing() {
        let pool = gnstor_pool(2 * MIB, 2 * MIB);
        let run = pool.alloc(16 * KIB).unwrap();
        let block = pool.alloc(64 * KIB).unwrap();
        let before = pool.stats();
        let cases = [
            (
                PoolAlloc {
                    offset: run.offset + 4 * KIB,
                    len: 12 * KIB,
                },
                "inside a run",
            ),
            (
                PoolAlloc {
                    offset: run.offset,
                    len: 8 * KIB,
                },
                "shorter than the run",
            ),
            (
                PoolAlloc {
                    offset: run.offset,
                    len: 20 * KIB,
                },
                "longer than the run",
            ),
            (
                PoolAlloc {
                    offset: block.offset,
                    len: 4 * KIB,
                },
                "a piece of a larger unit",
            ),
            (
                PoolAlloc {
                    offset: MIB,
                    len: MIB,
                },
                "a free unit",
            ),
        ];
        for (alloc, why) in cases {
            assert!(
                matches!(pool.free(alloc), Err(PoolError::NotAllocated { .. })),
                "{why}: {alloc:?}"
            );
        }
        assert_eq!(
            pool.free(PoolAlloc {
                offset: 2 * KIB,
                len: 4 * KIB
            }),
            Err(PoolError::Misaligned {
                offset: 2 * KIB,
                unit: 4 * KIB
            })
        );
        assert_eq!(
            pool.free(PoolAlloc {
                offset: 2 * MIB,
                len: 4 * KIB
            }),
            Err(PoolError::OutOfRange {
                offset: 2 * MIB,
                len: 4 * KIB,
                capacity: 2 * MIB
            })
        );
        assert_eq!(
            pool.free(PoolAlloc { offset: 0, len: 0 }),
            Err(PoolError::ZeroLength)
        );
        assert_eq!(pool.stats(), before);

        pool.free(run).unwrap();
        assert_eq!(
            pool.free(run),
            Err(PoolError::NotAllocated {
                offset: run.offset,
                len: run.len
            })
        );
        pool.free(block).unwrap();
        assert_whole(&pool);
    }

    #[test]
    fn shared_layout_matches_the_device_test_fixture() {
        // size_class_pool_test.cu builds this pool's header on the device with these numbers.
        let pool = gnstor_pool(8 * MIB, 16 * MIB);
        let header = pool.header();
        let geometry: Vec<_> = header.levels[..3]
            .iter()
            .map(|level| {
                (
                    level.unit_shift,
                    level.group_shift,
                    level.word_offset,
                    level.bitmap_words,
                )
            })
            .collect();
        assert_eq!(
            geometry,
            vec![(12, 4, 0, 64), (16, 4, 192, 4), (20, 0, 204, 1)]
        );
        assert_eq!(pool.words().len(), 207);
        assert_eq!(header.levels[3].unit_size, 0);
        assert_eq!(
            pool.words()[204].load(SeqCst),
            0xff,
            "eight free top-level units"
        );
    }

    /// The least-rounding level, by brute force over all levels (ties to the larger unit).
    fn expected_placement(levels: &[u64], len: u64) -> (usize, u64) {
        let mut best = (levels.len() - 1, len.div_ceil(levels[levels.len() - 1]));
        for (level, &size) in levels.iter().enumerate().rev() {
            let units = len.div_ceil(size);
            let fits_one_parent = levels.get(level + 1).is_none_or(|&next| len <= next);
            if fits_one_parent && units * size < best.1 * levels[best.0] {
                best = (level, units);
            }
        }
        best
    }

    #[derive(Debug, Clone)]
    enum Op {
        Alloc(u64),
        Free(usize),
        DoubleFree,
        FreeShifted(usize),
    }

    fn pool_config() -> impl Strategy<Value = PoolConfig> {
        (
            4u32..=12,
            prop::collection::vec(1u32..=5, 0..=2),
            1u64..=3,
            2u64..=3,
            0u32..=2,
        )
            .prop_map(
                |(base_shift, ratio_shifts, initial_units, factor, growths)| {
                    let mut levels = vec![1u64 << base_shift];
                    for shift in ratio_shifts {
                        levels.push(levels.last().unwrap() << shift);
                    }
                    let top = *levels.last().unwrap();
                    let initial = initial_units * top;
                    config(&levels, initial, initial * factor.pow(growths), factor)
                },
            )
    }

    /// Lengths spread evenly over orders of magnitude, a few past `max_len`.
    fn ops(max_len: u64) -> impl Strategy<Value = Vec<Op>> {
        let magnitudes = 0..=u64::BITS - max_len.leading_zeros();
        let op = prop_oneof![
            6 => (magnitudes, any::<u64>()).prop_map(|(bits, r)| Op::Alloc(1 + r % (1 << bits))),
            5 => any::<usize>().prop_map(Op::Free),
            1 => Just(Op::DoubleFree),
            1 => any::<usize>().prop_map(Op::FreeShifted),
        ];
        prop::collection::vec(op, 1..80)
    }

    fn overlaps(live: &BTreeMap<u64, u64>, offset: u64, len: u64) -> bool {
        live.range(..offset + len)
            .next_back()
            .is_some_and(|(&start, &size)| start + size > offset)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn random_alloc_free_matches_a_model(
            (config, ops) in pool_config().prop_flat_map(|config| {
                let max = config.max_capacity;
                (Just(config), ops(max))
            })
        ) {
            let pool = SizeClassPool::new(config.clone()).unwrap();
            let levels = &config.levels;
            let top = levels.len() - 1;
            let mut live: BTreeMap<u64, u64> = BTreeMap::new();
            let mut freed: Option<PoolAlloc> = None;
            let mut capacity = config.initial_capacity;
            for op in ops {
                match op {
                    Op::Alloc(len) => {
                        if len > config.max_capacity {
                            let max = config.max_capacity;
                            prop_assert_eq!(
                                pool.alloc(len),
                                Err(PoolError::LengthTooLarge { len, max })
                            );
                            continue;
                        }
                        let (level, units) = expected_placement(levels, len);
                        let unit = levels[level];
                        let placement = pool.placement(len).unwrap();
                        prop_assert_eq!((placement.level, placement.units), (level, units));
                        match pool.alloc(len) {
                            Ok(alloc) => {
                                prop_assert_eq!(alloc.len, units * unit);
                                prop_assert_eq!(alloc.offset % unit, 0);
                                prop_assert!(alloc.offset + alloc.len <= pool.capacity());
                                prop_assert!(!overlaps(&live, alloc.offset, alloc.len));
                                live.insert(alloc.offset, alloc.len);
                            }
                            Err(error) => {
                                prop_assert_eq!(error, PoolError::Exhausted { len });
                                prop_assert_eq!(pool.capacity(), config.max_capacity);
                                // Nothing free above the level could have been split for it.
                                let free_units = pool.stats().free_units;
                                prop_assert!(free_units[level + 1..].iter().all(|&n| n == 0));
                                if units == 1 {
                                    prop_assert_eq!(free_units[level], 0);
                                }
                            }
                        }
                    }
                    Op::Free(pick) if !live.is_empty() => {
                        let (&offset, &len) = live.iter().nth(pick % live.len()).unwrap();
                        live.remove(&offset);
                        pool.free(PoolAlloc { offset, len }).unwrap();
                        freed = Some(PoolAlloc { offset, len });
                    }
                    Op::DoubleFree => {
                        if let Some(alloc) = freed.filter(|a| !overlaps(&live, a.offset, a.len)) {
                            let result = pool.free(alloc);
                            prop_assert!(
                                matches!(result, Err(PoolError::NotAllocated { .. })),
                                "{:?}", result
                            );
                        }
                    }
                    Op::FreeShifted(pick) if !live.is_empty() => {
                        let (&offset, &len) = live.iter().nth(pick % live.len()).unwrap();
                        let unit = levels[expected_placement(levels, len).0];
                        let shifted = PoolAlloc { offset: offset + unit, len };
                        if live.get(&shifted.offset) != Some(&len) {
                            prop_assert!(pool.free(shifted).is_err());
                        }
                    }
                    Op::Free(_) | Op::FreeShifted(_) => {}
                }
                // Growth only multiplies, and free bytes are exactly what is not live.
                let grown = pool.capacity();
                prop_assert!(grown >= capacity);
                capacity = grown;
                let events = pool.stats().growth_events as u32;
                let expected_capacity = (config.initial_capacity
                    * config.growth_factor.pow(events)).min(config.max_capacity);
                prop_assert_eq!(capacity, expected_capacity);
                prop_assert_eq!(pool.free_bytes(), capacity - live.values().sum::<u64>());
            }
            for (&offset, &len) in &live {
                pool.free(PoolAlloc { offset, len }).unwrap();
            }
            let stats = pool.stats();
            prop_assert_eq!(stats.free_units[top], capacity / levels[top]);
            prop_assert!(stats.free_units[..top].iter().all(|&n| n == 0), "{:?}", stats);
        }

        #[test]
        fn rounded_length_maps_to_the_same_placement(len in 1u64..=64 * MIB) {
            let pool = gnstor_pool(MIB, 64 * MIB);
            let placement = pool.placement(len).unwrap();
            prop_assert!(placement.rounded_len() >= len);
            prop_assert_eq!(pool.placement(placement.rounded_len()).unwrap(), placement);
        }
    }

    /// Eight threads allocate and free random sizes, holding up to `held_max` allocations each
    /// and marking each 4 KiB unit they own; a unit marked twice is an overlap. Afterwards the
    /// pool must be whole. Returns how many allocations found the pool exhausted.
    fn stress(pool: &SizeClassPool, sizes: &[u64], held_max: usize) -> u64 {
        use rand::{Rng, SeedableRng};
        const THREADS: u64 = 8;
        const ROUNDS: usize = 2000;
        let owners: Vec<AtomicU32> = (0..pool.max_capacity() / (4 * KIB))
            .map(|_| AtomicU32::new(0))
            .collect();
        let overlaps = AtomicU64::new(0);
        let exhausted = AtomicU64::new(0);
        let mark = |alloc: PoolAlloc, owned: bool| {
            for unit in alloc.offset / (4 * KIB)..(alloc.offset + alloc.len) / (4 * KIB) {
                let owner = &owners[unit as usize];
                let before = if owned {
                    owner.fetch_add(1, SeqCst)
                } else {
                    owner.fetch_sub(1, SeqCst)
                };
                if before != u32::from(!owned) {
                    overlaps.fetch_add(1, SeqCst);
                }
            }
        };
        std::thread::scope(|scope| {
            for seed in 0..THREADS {
                let (mark, exhausted) = (&mark, &exhausted);
                scope.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                    let mut held = Vec::new();
                    for _ in 0..ROUNDS {
                        if held.len() < held_max && rng.random_bool(0.6) {
                            let len = sizes[rng.random_range(0..sizes.len())];
                            match pool.alloc(len) {
                                Ok(alloc) => {
                                    let unit = pool.placement(len).unwrap().unit_size;
                                    assert_eq!(alloc.offset % unit, 0);
                                    mark(alloc, true);
                                    held.push(alloc);
                                }
                                Err(PoolError::Exhausted { .. }) => {
                                    exhausted.fetch_add(1, SeqCst);
                                }
                                Err(error) => panic!("{error}"),
                            }
                        } else if !held.is_empty() {
                            let alloc = held.swap_remove(rng.random_range(0..held.len()));
                            mark(alloc, false);
                            pool.free(alloc).unwrap();
                        }
                    }
                    for alloc in held {
                        mark(alloc, false);
                        pool.free(alloc).unwrap();
                    }
                });
            }
        });
        assert_eq!(overlaps.load(SeqCst), 0);
        assert_whole(pool);
        exhausted.load(SeqCst)
    }

    #[test]
    fn concurrent_allocations_never_fail_spuriously() {
        // Single-unit requests pin at most one top-level unit each: with 8 threads holding at
        // most 4, one of 33 top-level units is always untouched, so no request may fail.
        let pool = gnstor_pool(33 * MIB, 33 * MIB);
        assert_eq!(stress(&pool, &[4 * KIB, 64 * KIB, MIB], 4), 0);
        assert!(pool.stats().merges > 0);
    }

    #[test]
    fn concurrent_alloc_free_never_overlaps_and_merges_back() {
        let pool = gnstor_pool(2 * MIB, 64 * MIB);
        stress(
            &pool,
            &[
                4 * KIB,
                8 * KIB,
                60 * KIB,
                64 * KIB,
                200 * KIB,
                MIB,
                3 * MIB,
            ],
            6,
        );
        let stats = pool.stats();
        assert!(
            stats.splits > 0 && stats.merges > 0 && stats.growth_events > 0,
            "{stats:?}"
        );
    }

    #[test]
    fn concurrent_wide_groups_never_overlap_and_merge_back() {
        // 256 children per parent: claims and merges span several words.
        let pool = pool(&[4 * KIB, MIB], MIB, 32 * MIB);
        stress(&pool, &[4 * KIB, 12 * KIB, 300 * KIB, 900 * KIB, MIB], 6);
    }
}
