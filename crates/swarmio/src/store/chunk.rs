//! Per-chunk state: a seqlock, the mask of blocks that may hold non-zero data, and the undo
//! record that makes writes since the last flush discardable.
//!
//! A chunk is [`CHUNK_BLOCKS`] consecutive blocks, so one `u64` mask covers it. Readers never
//! write the chunk's cache line: they re-read when the sequence number moved (seqlock). Writers,
//! flush and power cut take the chunk exclusively by making the sequence number odd. What
//! readers need (16 bytes per chunk) is kept apart from the undo pointers (8 bytes per chunk),
//! so more of it stays in cache.

use std::io;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicPtr, AtomicU64, fence};

use crossbeam_utils::Backoff;

use super::mapping::{ZeroIsValid, ZeroedArray};
use super::{block_mask, copy};

/// Blocks per chunk: the granule of locking, of dirty tracking and of write atomicity.
pub const CHUNK_BLOCKS: u32 = 64;

/// Optimistic read attempts before a reader takes the chunk's lock to make progress.
const OPTIMISTIC_READS: u32 = 16;

/// The reader-visible state of one chunk (all zeros = unlocked and never written).
struct Seqlock {
    /// Odd while a writer holds the chunk; readers retry if it changed under them.
    seq: AtomicU64,
    /// RAM backing: bit `b` set = block `b` may hold non-zero bytes; clear = reads as zeros
    /// without looking at (or faulting in) its memory. Unused by the file backing.
    live: AtomicU64,
}

// SAFETY: all-zero bytes are `seq = 0` (unlocked) and `live = 0`; the type has no destructor
// and only mutates through atomics.
unsafe impl ZeroIsValid for Seqlock {}

// SAFETY: all-zero bytes are a null pointer; `AtomicPtr` has no destructor (the chunk table
// frees what the pointers own) and only mutates atomically.
unsafe impl<T> ZeroIsValid for AtomicPtr<T> {}

/// Metadata bytes per chunk (reader state plus undo pointer).
pub(super) const METADATA_BYTES: usize = size_of::<Seqlock>() + size_of::<AtomicPtr<Undo>>();

/// The state of every chunk of a namespace, in lazily zero-filled arrays.
pub(super) struct Chunks {
    seqlocks: ZeroedArray<Seqlock>,
    /// Per chunk, its undo record while it has writes that are not yet flushed, else null.
    /// Owned by the chunk (`Box::into_raw`) and only touched while holding the chunk.
    undos: ZeroedArray<AtomicPtr<Undo>>,
}

impl Chunks {
    /// `count` never-written chunks.
    pub(super) fn new(count: usize) -> io::Result<Self> {
        Ok(Self {
            seqlocks: ZeroedArray::new(count)?,
            undos: ZeroedArray::new(count)?,
        })
    }

    /// Runs `read(live)` for chunk `chunk` until it ran without a writer holding the chunk, and
    /// returns its result. `read` may observe torn data in a discarded attempt, so it must only
    /// copy bytes out.
    pub(super) fn read<R>(&self, chunk: usize, mut read: impl FnMut(u64) -> R) -> R {
        let seqlock = &self.seqlocks.as_slice()[chunk];
        let backoff = Backoff::new();
        for _ in 0..OPTIMISTIC_READS {
            let before = seqlock.seq.load(Acquire);
            if before & 1 == 0 {
                let result = read(seqlock.live.load(Relaxed));
                // Orders the data loads above before the re-check (seqlock reader fence).
                fence(Acquire);
                if seqlock.seq.load(Relaxed) == before {
                    return result;
                }
            }
            backoff.snooze();
        }
        // Writers keep this chunk busy: read under the lock, or the read might never finish.
        let guard = self.lock(chunk);
        read(guard.live())
    }

    /// Starts loading chunk `chunk`'s seqlock line into the cache (a hint; any index is fine).
    pub(super) fn prefetch(&self, chunk: usize) {
        if let Some(seqlock) = self.seqlocks.as_slice().get(chunk) {
            gpu_nvme::memory::prefetch(std::ptr::from_ref(seqlock).cast(), 1);
        }
    }

    /// The live-block mask of chunk `chunk` as it is now (a hint: no seqlock read).
    pub(super) fn live_hint(&self, chunk: usize) -> u64 {
        self.seqlocks
            .as_slice()
            .get(chunk)
            .map_or(0, |s| s.live.load(Relaxed))
    }

    /// Takes chunk `chunk` exclusively, spinning (then yielding) while another writer holds it.
    pub(super) fn lock(&self, chunk: usize) -> ChunkGuard<'_> {
        let seqlock = &self.seqlocks.as_slice()[chunk];
        let backoff = Backoff::new();
        loop {
            let seq = seqlock.seq.load(Relaxed);
            if seq & 1 == 0
                && seqlock
                    .seq
                    .compare_exchange_weak(seq, seq + 1, Acquire, Relaxed)
                    .is_ok()
            {
                // Orders the odd sequence number before our data stores (seqlock writer fence).
                fence(Release);
                let undo = &self.undos.as_slice()[chunk];
                return ChunkGuard {
                    seqlock,
                    undo,
                    seq: seq + 1,
                };
            }
            backoff.snooze();
        }
    }
}

/// Exclusive access to one chunk; releases it (bumping the sequence number) on drop.
pub(super) struct ChunkGuard<'a> {
    seqlock: &'a Seqlock,
    undo: &'a AtomicPtr<Undo>,
    seq: u64,
}

impl ChunkGuard<'_> {
    /// The chunk's live-block mask.
    pub(super) fn live(&self) -> u64 {
        self.seqlock.live.load(Relaxed)
    }

    /// Replaces the live-block mask (readers see it together with the data: both under seqlock).
    pub(super) fn set_live(&mut self, live: u64) {
        self.seqlock.live.store(live, Relaxed);
    }

    /// The undo record, if the chunk has unflushed writes.
    pub(super) fn undo(&mut self) -> Option<&mut Undo> {
        let undo = self.undo.load(Relaxed);
        // SAFETY: a non-null pointer came from `Box::into_raw` in `insert_undo` and is owned by
        // the chunk; it is only dereferenced or freed while holding the chunk, and the returned
        // borrow holds `self` mutably, so no other reference to the record exists meanwhile.
        unsafe { undo.as_mut() }
    }

    /// Installs `undo` as the chunk's undo record. The chunk must not have one.
    pub(super) fn insert_undo(&mut self, undo: Box<Undo>) {
        let previous = self.undo.swap(Box::into_raw(undo), Relaxed);
        debug_assert!(previous.is_null(), "undo record installed twice");
    }

    /// Removes and returns the undo record (the chunk then has no unflushed writes).
    pub(super) fn take_undo(&mut self) -> Option<Box<Undo>> {
        let undo = self.undo.swap(std::ptr::null_mut(), Relaxed);
        if undo.is_null() {
            return None;
        }
        // SAFETY: non-null pointers stored in `undo` come from `Box::into_raw` and are owned by
        // the chunk; swapping in null while holding the chunk transfers that ownership to us.
        Some(unsafe { Box::from_raw(undo) })
    }
}

impl Drop for ChunkGuard<'_> {
    fn drop(&mut self) {
        self.seqlock.seq.store(self.seq + 1, Release);
    }
}

/// What a chunk looked like at the last flush, for the blocks modified since.
///
/// Writes go straight to the namespace memory; before a block is first modified after a flush,
/// its durable content is copied here, so power cut can put it back and flush only has to drop
/// this record. Blocks whose durable content is all zeros (a clear bit in `durable_live`) are
/// not copied: restoring them means clearing their live bit.
pub(super) struct Undo {
    /// The chunk's live mask at the last flush (all ones for the file backing: always copy).
    durable_live: u64,
    /// Blocks written, zeroed or deallocated since the last flush.
    dirty: u64,
    /// Dirty blocks whose durable content is stored in `blocks`.
    saved: u64,
    /// `slots[b]`: index in `blocks` (in units of `block_bytes`) of block `b`'s durable content.
    slots: [u8; CHUNK_BLOCKS as usize],
    /// Saved durable contents, one block after another.
    blocks: Vec<u8>,
}

impl Undo {
    /// A record for a chunk whose durable live mask is `durable_live`.
    pub(super) fn new(durable_live: u64) -> Box<Self> {
        Box::new(Self {
            durable_live,
            dirty: 0,
            saved: 0,
            slots: [0; CHUNK_BLOCKS as usize],
            blocks: Vec::new(),
        })
    }

    /// The chunk's live mask at the last flush.
    pub(super) fn durable_live(&self) -> u64 {
        self.durable_live
    }

    /// Blocks modified since the last flush.
    pub(super) fn dirty(&self) -> u64 {
        self.dirty
    }

    /// Marks `mask` modified; returns the blocks among them that were not modified before.
    pub(super) fn mark_dirty(&mut self, mask: u64) -> u64 {
        let first_modified = mask & !self.dirty;
        self.dirty |= mask;
        first_modified
    }

    /// Copies block `block`'s durable content out of `words` (exactly one block).
    pub(super) fn save(&mut self, block: u32, words: &[AtomicU64]) {
        debug_assert_eq!(self.saved & block_mask(block, 1), 0, "block saved twice");
        let start = self.blocks.len();
        let block_bytes = words.len() * 8;
        // At most 64 blocks are saved, so the slot index fits a byte.
        self.slots[block as usize] = (start / block_bytes) as u8;
        self.blocks.resize(start + block_bytes, 0);
        copy::load(words, &mut self.blocks[start..]);
        self.saved |= block_mask(block, 1);
    }

    /// The saved blocks: `(block index in chunk, durable content)`.
    pub(super) fn saved_blocks(&self, block_bytes: usize) -> impl Iterator<Item = (u32, &[u8])> {
        (0..CHUNK_BLOCKS)
            .filter(|&b| self.saved & block_mask(b, 1) != 0)
            .map(move |b| {
                let start = usize::from(self.slots[b as usize]) * block_bytes;
                (b, &self.blocks[start..start + block_bytes])
            })
    }

    /// Bytes of saved block content held by this record.
    pub(super) fn saved_bytes(&self) -> usize {
        self.blocks.len()
    }
}
