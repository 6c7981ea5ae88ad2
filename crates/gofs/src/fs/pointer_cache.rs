//! Cached data pointers (papers/gofs.md §3.3 and §4: GoFS keeps each file's data pointers
//! cached next to its inode, so a read of a cached block needs no walk of the pointer tree).
//!
//! A read that finds the addresses of all its blocks here runs without the engine lock: it
//! holds its range lock and the read gate, looks the addresses up, and reads the blocks. The
//! engine fills the cache (under its lock) whenever a read resolves addresses the slow way.
//!
//! Validity. Every cached address is tagged with the file's *pointer version* at the time the
//! engine resolved it: the inode's data generation plus the file system's relocation count,
//! plus one. Both only grow, so any change of either gives a new version:
//! - a write or truncate changes addresses only inside its range lock and bumps the data
//!   generation before it releases that lock, so a reader holding an overlapping range lock
//!   sees the new generation;
//! - the cleaner moving data blocks and the removal of an inode change addresses without a
//!   range lock; they bump the relocation count under the engine lock, before the checkpoint
//!   that frees the old blocks. A reader reads the count after taking the read gate, so either
//!   that checkpoint finished before (the reader sees the bump: its version differs) or it
//!   waits for the reader's gate (the old blocks still hold the data the reader wants).
//!
//! Layout. Addresses sit in chunks of [`CHUNK`] consecutive file blocks, each chunk with the
//! version its addresses belong to; a chunk of another version reads as empty and is cleared
//! when next filled. A chunk's version and addresses change inside a sequence lock ([`SeqCount`],
//! whose only writer is the engine, under its lock): a reader checks the chunk's sequence
//! number before and after reading an address. Checking the version twice instead would need
//! versions that never come back (true of the engine's, which only grow, but not of the
//! cache's own tests): a chunk refilled at another version and then at the reader's again
//! between its two checks would pass them with an address of the other version. The chunk table grows by
//! replacement; replaced tables are kept until the cache is cleared, which happens only under
//! the file's whole-range lock, so no reader is left holding them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

use common::seqlock::SeqCount;

use crate::format::NULL_ADDR;

/// File blocks per chunk.
pub const CHUNK: usize = 64;
/// File blocks a cache covers at most (16 GiB of file): reads beyond go the slow way.
pub const MAX_BLOCKS: u64 = 1 << 22;
/// Bytes all caches together may hold; past it files are read the slow way.
pub const BUDGET: usize = 64 << 20;

/// A chunk's version meaning "no addresses" (versions start at 1).
const NO_VERSION: u64 = 0;
/// An entry without an address. Holes are not cached (they read the slow way), so no cached
/// data address is ever 0.
const EMPTY: u32 = NULL_ADDR;

/// The pointer version of a file whose data generation is `data_gen` while the file system's
/// relocation count is `relocations` (see the module doc).
pub fn version(data_gen: u64, relocations: u64) -> u64 {
    data_gen.wrapping_add(relocations).wrapping_add(1).max(1)
}

/// Bytes held by the caches of all files (against [`BUDGET`]).
pub type Budget = super::budget::Budget<BUDGET>;

#[derive(Debug)]
struct Chunk {
    seq: SeqCount,
    version: AtomicU64,
    addrs: [AtomicU32; CHUNK],
}

impl Chunk {
    fn empty() -> Self {
        Self {
            seq: SeqCount::default(),
            version: AtomicU64::new(NO_VERSION),
            addrs: std::array::from_fn(|_| AtomicU32::new(EMPTY)),
        }
    }
}

#[derive(Debug)]
struct Table {
    chunks: Box<[Chunk]>,
}

impl Table {
    fn bytes(chunks: usize) -> usize {
        chunks * std::mem::size_of::<Chunk>()
    }
}

/// The cached data pointers and size of one file.
#[derive(Debug, Default)]
pub struct PointerCache {
    /// the current chunk table (null: none)
    table: AtomicPtr<Table>,
    /// tables replaced by a larger one, kept until [`PointerCache::clear`] (boxed: readers may
    /// still hold references to the `Table` itself, which must not move)
    #[allow(clippy::vec_box)]
    retired: Mutex<Vec<Box<Table>>>,
    /// guards `size` and `size_version`
    size_seq: SeqCount,
    /// the file size, valid when `size_version` is the current version
    size: AtomicU64,
    size_version: AtomicU64,
}

impl PointerCache {
    fn current(&self) -> Option<&Table> {
        let t = self.table.load(Ordering::Acquire);
        // SAFETY: a non-null `table` came from `Box::into_raw` in `fill` and is freed only by
        // `clear` (which callers run holding the file's whole-range lock, so no reader holding
        // a range lock is inside this method) or by `Drop` (no other reference exists).
        // Replaced tables stay allocated in `retired` until then.
        unsafe { t.as_ref() }
    }

    /// The file size cached at `version`.
    pub fn size(&self, version: u64) -> Option<u64> {
        self.size_seq.read(|| {
            (self.size_version.load(Ordering::Relaxed) == version)
                .then(|| self.size.load(Ordering::Relaxed))
        })
    }

    /// The address of file block `idx` cached at `version`.
    pub fn get(&self, idx: u64, version: u64) -> Option<u32> {
        let chunk = self
            .current()?
            .chunks
            .get(usize::try_from(idx).ok()? / CHUNK)?;
        chunk.seq.read(|| {
            if chunk.version.load(Ordering::Relaxed) != version {
                return None;
            }
            let a = chunk.addrs[idx as usize % CHUNK].load(Ordering::Relaxed);
            (a != EMPTY).then_some(a)
        })
    }

    /// Caches the file's `size` and the addresses `addrs` of its blocks `first..` (all in one
    /// chunk; `EMPTY` entries are skipped) at `version`. Only the engine calls this, under its
    /// lock: there is one writer at a time. Returns false when the budget or [`MAX_BLOCKS`]
    /// left the addresses uncached.
    pub fn fill(
        &self,
        version: u64,
        size: u64,
        first: u64,
        addrs: &[u32],
        budget: &Budget,
    ) -> bool {
        self.size_seq.write(|| {
            self.size.store(size, Ordering::Relaxed);
            self.size_version.store(version, Ordering::Relaxed);
        });

        let Some(last) = first.checked_add(addrs.len() as u64) else {
            return false;
        };
        if addrs.is_empty() || last > MAX_BLOCKS {
            return false;
        }
        let chunk_no = first as usize / CHUNK;
        debug_assert_eq!((last as usize - 1) / CHUNK, chunk_no, "one chunk per fill");
        let Some(table) = self.table_for(chunk_no, size, budget) else {
            return false;
        };
        let chunk = &table.chunks[chunk_no];
        if chunk.version.load(Ordering::Relaxed) != version {
            chunk.seq.write(|| {
                chunk.version.store(version, Ordering::Relaxed);
                for a in &chunk.addrs {
                    a.store(EMPTY, Ordering::Relaxed);
                }
            });
        }
        // Entries added to a chunk of its current version need no write section: a reader
        // sees EMPTY or the address, both true answers.
        let base = first as usize % CHUNK;
        for (k, &a) in addrs.iter().enumerate() {
            if a != EMPTY {
                chunk.addrs[base + k].store(a, Ordering::Release);
            }
        }
        true
    }

    /// The table, grown to hold chunk `chunk_no` (sized for a file of `size` bytes with room
    /// to grow), or `None` when the budget does not allow it.
    fn table_for(&self, chunk_no: usize, size: u64, budget: &Budget) -> Option<&Table> {
        let have = self.current().map_or(0, |t| t.chunks.len());
        if chunk_no < have {
            return self.current();
        }
        let max_chunks = MAX_BLOCKS as usize / CHUNK;
        let file_chunks = usize::try_from(size.div_ceil(crate::format::BLOCK_SIZE as u64))
            .unwrap_or(usize::MAX)
            .div_ceil(CHUNK);
        let want = (chunk_no + 1)
            .max(file_chunks)
            .max(have * 2)
            .next_power_of_two()
            .min(max_chunks);
        if !budget.take(Table::bytes(want)) {
            return None;
        }
        let new: Box<[Chunk]> = (0..want).map(|_| Chunk::empty()).collect();
        if let Some(old) = self.current() {
            for (to, from) in new.iter().zip(old.chunks.iter()) {
                to.version
                    .store(from.version.load(Ordering::Relaxed), Ordering::Relaxed);
                for (t, f) in to.addrs.iter().zip(&from.addrs) {
                    t.store(f.load(Ordering::Relaxed), Ordering::Relaxed);
                }
            }
        }
        let old = self.table.swap(
            Box::into_raw(Box::new(Table { chunks: new })),
            Ordering::AcqRel,
        );
        if !old.is_null() {
            // SAFETY: `old` came from `Box::into_raw` and was just unpublished; readers that
            // still hold it are covered by keeping it in `retired` (see `current`).
            let old = unsafe { Box::from_raw(old) };
            self.retired
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(old);
        }
        self.current()
    }

    /// Frees every table and forgets the size. Callers hold the file's whole-range lock (no
    /// reader is inside the cache) and the engine lock (no writer is).
    pub fn clear(&self, budget: &Budget) {
        self.size_seq
            .write(|| self.size_version.store(NO_VERSION, Ordering::Relaxed));
        let t = self.table.swap(std::ptr::null_mut(), Ordering::AcqRel);
        let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        if !t.is_null() {
            // SAFETY: `t` came from `Box::into_raw` and is no longer published; the caller
            // guarantees no reader holds it.
            retired.push(unsafe { Box::from_raw(t) });
        }
        for t in retired.drain(..) {
            budget.give(Table::bytes(t.chunks.len()));
        }
    }
}

impl Drop for PointerCache {
    fn drop(&mut self) {
        let t = *self.table.get_mut();
        if !t.is_null() {
            // SAFETY: `t` came from `Box::into_raw`; `&mut self` means no reader is left.
            drop(unsafe { Box::from_raw(t) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    const MIB: u64 = 1 << 20;

    #[test]
    fn an_address_is_served_only_at_the_version_it_was_cached_at() {
        let budget = Budget::default();
        let c = PointerCache::default();
        assert_eq!(c.get(0, 1), None, "nothing cached yet");
        assert_eq!(c.size(1), None);
        assert!(c.fill(1, 3 * MIB, 8, &[100, 101, EMPTY, 103], &budget));
        assert_eq!(c.size(1), Some(3 * MIB));
        assert_eq!(c.get(8, 1), Some(100));
        assert_eq!(c.get(11, 1), Some(103));
        assert_eq!(c.get(10, 1), None, "a hole is not cached");
        assert_eq!(c.get(12, 1), None, "never filled");
        assert_eq!(c.get(8, 2), None, "another version");
        assert_eq!(c.size(2), None);
    }

    #[test]
    fn a_fill_at_a_new_version_empties_the_rest_of_its_chunk() {
        let budget = Budget::default();
        let c = PointerCache::default();
        let all: Vec<u32> = (1000..1000 + CHUNK as u32).collect();
        assert!(c.fill(1, MIB, 0, &all, &budget));
        assert!(c.fill(1, MIB, CHUNK as u64, &all, &budget));
        assert!(c.fill(2, MIB, 5, &[7], &budget));
        assert_eq!(c.get(5, 2), Some(7));
        assert_eq!(c.get(4, 2), None, "older entries of the chunk are gone");
        assert_eq!(c.get(6, 1), None, "the chunk is at version 2 now");
        assert_eq!(
            c.get(CHUNK as u64 + 3, 1),
            Some(1003),
            "other chunks keep theirs"
        );
    }

    #[test]
    fn the_table_grows_and_keeps_what_it_held_and_clear_gives_the_budget_back() {
        let budget = Budget::default();
        let c = PointerCache::default();
        assert!(c.fill(1, 4096, 0, &[55], &budget));
        let small = budget.held();
        assert_eq!(small, Table::bytes(1), "sized for the file");
        let far = 1000 * CHUNK as u64 + 9;
        assert!(c.fill(1, 4096, far, &[66], &budget));
        assert_eq!(c.get(0, 1), Some(55));
        assert_eq!(c.get(far, 1), Some(66));
        assert_eq!(
            budget.held(),
            small + Table::bytes(1024),
            "the replaced table stays charged until clear"
        );
        c.clear(&budget);
        assert_eq!(budget.held(), 0);
        assert_eq!((c.get(0, 1), c.size(1)), (None, None));
        assert!(c.fill(1, 4096, 0, &[77], &budget), "usable again");
        assert_eq!(c.get(0, 1), Some(77));
    }

    #[test]
    fn the_budget_and_the_largest_cached_block_are_respected() {
        let budget = Budget::default();
        let c = PointerCache::default();
        assert!(!c.fill(1, u64::MAX, MAX_BLOCKS, &[5], &budget));
        assert_eq!(c.get(MAX_BLOCKS, 1), None);
        assert!(c.fill(1, 4096, MAX_BLOCKS - 1, &[5], &budget));
        assert_eq!(c.get(MAX_BLOCKS - 1, 1), Some(5));
        assert!(budget.held() <= Table::bytes(MAX_BLOCKS as usize / CHUNK));
        let other = PointerCache::default();
        assert!(budget.take(BUDGET - budget.held()), "use up the rest");
        assert!(
            !other.fill(1, 4096, 0, &[5], &budget),
            "no room for a table"
        );
        assert_eq!(other.get(0, 1), None);
        assert_eq!(other.size(1), Some(4096), "the size needs no table");
    }

    /// What the cache may answer: per chunk, the version of its last fill and the entries
    /// filled at that version.
    #[derive(Default)]
    struct Model {
        chunks: HashMap<u64, (u64, HashMap<u64, u32>)>,
    }

    proptest! {
        #[test]
        fn the_cache_answers_what_a_model_of_versioned_chunks_answers(
            ops in proptest::collection::vec(
                (0u8..8, 1u64..4, 0u64..(8 * CHUNK as u64), 1usize..CHUNK, 1u32..1_000_000),
                1..200,
            )
        ) {
            let budget = Budget::default();
            let c = PointerCache::default();
            let mut m = Model::default();
            for (kind, version, idx, len, addr) in ops {
                if kind == 0 {
                    c.clear(&budget);
                    m = Model::default();
                    continue;
                }
                let chunk = idx / CHUNK as u64;
                let len = len.min(CHUNK - (idx % CHUNK as u64) as usize);
                let addrs: Vec<u32> = (0..len as u32).map(|k| addr + k).collect();
                prop_assert!(c.fill(version, MIB, idx, &addrs, &budget));
                let slot = m.chunks.entry(chunk).or_default();
                if slot.0 != version {
                    *slot = (version, HashMap::new());
                }
                for (k, &a) in addrs.iter().enumerate() {
                    slot.1.insert(idx + k as u64, a);
                }
                for probe in 0..(8 * CHUNK as u64) {
                    for v in 1..4 {
                        let want = m
                            .chunks
                            .get(&(probe / CHUNK as u64))
                            .filter(|(cv, _)| *cv == v)
                            .and_then(|(_, e)| e.get(&probe).copied());
                        prop_assert_eq!(c.get(probe, v), want, "block {} version {}", probe, v);
                    }
                }
            }
        }
    }

    #[test]
    fn readers_racing_a_filler_never_see_an_address_of_another_version() {
        // Addresses encode (version, block): a reader asking for version v must only ever get
        // an address the filler stored at v, however the refills interleave.
        let encode = |v: u64, idx: u64| (v as u32) << 16 | idx as u32 | 1;
        let budget = Arc::new(Budget::default());
        let c = Arc::new(PointerCache::default());
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let (c, stop) = (Arc::clone(&c), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut hits = 0u64;
                    let mut i = r as u64;
                    while !stop.load(Ordering::Relaxed) {
                        i = i
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let idx = (i >> 33) % (4 * CHUNK as u64);
                        let v = 1 + (i >> 20) % 8;
                        if let Some(a) = c.get(idx, v) {
                            assert_eq!(a, encode(v, idx), "block {idx} at version {v}");
                            hits += 1;
                        }
                    }
                    hits
                })
            })
            .collect();
        let start = std::time::Instant::now();
        for round in 0u64.. {
            if round > 20_000 && start.elapsed() > std::time::Duration::from_millis(300) {
                break;
            }
            let v = 1 + round % 8;
            let chunk = round % 4 * CHUNK as u64;
            let addrs: Vec<u32> = (chunk..chunk + CHUNK as u64)
                .map(|idx| encode(v, idx))
                .collect();
            assert!(c.fill(v, 4 * CHUNK as u64 * 4096, chunk, &addrs, &budget));
        }
        stop.store(true, Ordering::Relaxed);
        let hits: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
        assert!(hits > 0, "the readers found cached addresses");
    }
}
