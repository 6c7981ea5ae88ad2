//! PMeta's and PData's hashtables (PeakFS §III-C): ino → inode offset, and (ino, file block) →
//! data pages. Every mutation is logged in the WAL by [`super::PStore`] before it is applied.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use common::hash::mix64;

/// A hasher for integer keys: each written word goes through SplitMix64's mixer.
#[derive(Debug, Default, Clone, Copy)]
pub struct U64Hasher(u64);

impl Hasher for U64Hasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(w));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = mix64(self.0 ^ x);
    }
}

/// A hash map keyed by `u64` with [`U64Hasher`].
pub type U64Map<V> = HashMap<u64, V, BuildHasherDefault<U64Hasher>>;

/// A hash set of `u64` with [`U64Hasher`].
pub type U64Set = HashSet<u64, BuildHasherDefault<U64Hasher>>;

/// A run of consecutive data pages holding one file block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PageRun {
    /// First page, an index into the data zone.
    pub start: u64,
    /// Number of pages (0: no pages, a hole).
    pub pages: u32,
    /// The page of the file block that the run's first page holds: the block's pages before
    /// it are a hole (a block written from its middle, as an N-1 file's unaligned transfers
    /// leave them, takes no pages for its head).
    pub first: u16,
}

impl PageRun {
    /// No pages.
    pub const NONE: PageRun = PageRun {
        start: 0,
        pages: 0,
        first: 0,
    };

    /// A run of `pages` pages at zone page `start` holding a block from its first page.
    pub fn new(start: u64, pages: u32) -> Self {
        Self {
            start,
            pages,
            first: 0,
        }
    }

    /// Whether the run holds no page.
    pub fn is_none(&self) -> bool {
        self.pages == 0
    }

    /// One past the last page of the block that the run holds.
    pub fn end(&self) -> u32 {
        u32::from(self.first) + self.pages
    }

    /// Pages and first block page in one word, pages in the low 16 bits (a block has at
    /// most 1,024 pages): the stored form in WAL records, checkpoints and inodes, in which
    /// runs stored before `first` existed read back with `first` 0.
    pub fn packed_pages(&self) -> u32 {
        self.pages | (u32::from(self.first) << 16)
    }

    /// The run stored as `start` and [`PageRun::packed_pages`].
    pub fn unpack(start: u64, packed: u32) -> Self {
        Self {
            start,
            pages: packed & 0xFFFF,
            first: (packed >> 16) as u16,
        }
    }
}

/// Most entries the inode hashtable is sized for when a store opens (4 Mi: 8 Mi buckets,
/// about 136 MiB; a zone in the usual format has that many inode slots at 64 GiB).
const INODE_TABLE_PRESIZE_MAX: u64 = 1 << 22;

/// PMeta's inode hashtable (ino → inode offset, the slot in the metadata zone), and beside it
/// each slot's ino.
///
/// The slots' inos let a checkpoint written in steps walk the inodes in slot order, which
/// stays a valid walk while requests change the table between its steps: a hashtable's own
/// order does not, since an insert may rehash it.
#[derive(Debug)]
pub struct InodeIndex {
    by_ino: U64Map<u64>,
    /// The ino in each slot; 0 (never an ino) for none. Allocated zeroed, so the system maps
    /// its pages as slots are first used.
    by_slot: Vec<u64>,
}

impl InodeIndex {
    /// An empty index of `slots` slots. The hashtable has room for every slot (up to
    /// [`INODE_TABLE_PRESIZE_MAX`]): it never grows while serving. Growing rehashed every
    /// entry in one insert, which held a server's worker 0.13, 0.36, 0.59, 1.2, 2.2, 3.9 and
    /// 7.3 ms at 3.5, 7, 14, 29, 57, 115 and 229 K inodes
    /// (bench/results/2026-11-27-peakfs-icache-late-copy, `peakfs-slice-bench`).
    pub fn new(slots: u64) -> Self {
        let room = slots.min(INODE_TABLE_PRESIZE_MAX) as usize;
        Self {
            by_ino: U64Map::with_capacity_and_hasher(room, Default::default()),
            by_slot: vec![0; usize::try_from(slots).expect("inode slots fit in memory")],
        }
    }

    /// The slot of `ino`.
    pub fn get(&self, ino: u64) -> Option<u64> {
        self.by_ino.get(&ino).copied()
    }

    /// Whether `ino` has a slot.
    pub fn contains(&self, ino: u64) -> bool {
        self.by_ino.contains_key(&ino)
    }

    /// Maps `ino` (not 0) to `slot` (below [`Self::slots`]), replacing any slot it had.
    pub fn insert(&mut self, ino: u64, slot: u64) {
        debug_assert!(ino != 0, "ino 0 marks a free slot");
        if let Some(old) = self.by_ino.insert(ino, slot) {
            self.clear_slot(old, ino);
        }
        self.by_slot[slot as usize] = ino;
    }

    /// Unmaps `ino`; returns its slot.
    pub fn remove(&mut self, ino: u64) -> Option<u64> {
        let slot = self.by_ino.remove(&ino)?;
        self.clear_slot(slot, ino);
        Some(slot)
    }

    fn clear_slot(&mut self, slot: u64, ino: u64) {
        let s = &mut self.by_slot[slot as usize];
        if *s == ino {
            *s = 0;
        }
    }

    /// The ino mapped to `slot`, if any.
    pub fn ino_at(&self, slot: u64) -> Option<u64> {
        self.by_slot.get(slot as usize).copied().filter(|&i| i != 0)
    }

    /// Slots of the zone.
    pub fn slots(&self) -> u64 {
        self.by_slot.len() as u64
    }

    /// Mapped inos.
    pub fn len(&self) -> usize {
        self.by_ino.len()
    }

    /// Whether no ino is mapped.
    pub fn is_empty(&self) -> bool {
        self.by_ino.is_empty()
    }

    /// Entries the hashtable holds without growing.
    pub fn capacity(&self) -> usize {
        self.by_ino.capacity()
    }

    /// Every mapped ino, in no particular order.
    pub fn inos(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_ino.keys().copied()
    }
}

/// The block hashtable: (ino, file block) → its pages, in two levels (ino, then block), so
/// that a file's blocks are found without looking at any other file's: removing or truncating
/// a file costs its own blocks, however many blocks the zone maps.
#[derive(Debug, Clone, Default)]
pub struct BlockTable {
    files: U64Map<U64Map<PageRun>>,
    len: usize,
}

impl BlockTable {
    /// The run of `(ino, block)`, if mapped.
    pub fn get(&self, ino: u64, block: u64) -> Option<PageRun> {
        self.files.get(&ino)?.get(&block).copied()
    }

    /// Maps `(ino, block)` to `run`; returns the run it replaces.
    pub fn insert(&mut self, ino: u64, block: u64, run: PageRun) -> Option<PageRun> {
        let old = self.files.entry(ino).or_default().insert(block, run);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Unmaps `(ino, block)`; returns its run.
    pub fn remove(&mut self, ino: u64, block: u64) -> Option<PageRun> {
        let blocks = self.files.get_mut(&ino)?;
        let old = blocks.remove(&block)?;
        if blocks.is_empty() {
            self.files.remove(&ino);
        }
        self.len -= 1;
        Some(old)
    }

    /// The mapped blocks of `ino`, in order.
    pub fn blocks_of(&self, ino: u64) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .files
            .get(&ino)
            .map(|b| b.keys().copied().collect())
            .unwrap_or_default();
        v.sort_unstable();
        v
    }

    /// Mapped blocks, of all files.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no block is mapped.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The inos of the files with mapped blocks, in no particular order.
    pub fn files(&self) -> Vec<u64> {
        self.files.keys().copied().collect()
    }

    /// The mapped blocks of `ino` with their runs, in no particular order.
    pub fn file_blocks(&self, ino: u64) -> impl Iterator<Item = (u64, PageRun)> + '_ {
        self.files
            .get(&ino)
            .into_iter()
            .flat_map(|b| b.iter().map(|(&b, &r)| (b, r)))
    }

    /// Every mapping `(ino, block, run)`, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64, PageRun)> + '_ {
        self.files
            .iter()
            .flat_map(|(&ino, blocks)| blocks.iter().map(move |(&b, &r)| (ino, b, r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hasher_separates_the_two_words_of_a_block_key() {
        use std::hash::BuildHasher;
        let b = BuildHasherDefault::<U64Hasher>::default();
        assert_ne!(b.hash_one((1u64, 2u64)), b.hash_one((2u64, 1u64)));
        let mut t = BlockTable::default();
        t.insert(1, 2, PageRun::new(5, 1));
        assert_eq!(t.get(1, 2).map(|r| r.start), Some(5));
        assert_eq!(t.get(2, 1), None);
    }

    proptest::proptest! {
        /// The two-level table answers as one flat map of (ino, block) keys would.
        #[test]
        fn the_block_table_agrees_with_a_flat_map(
            ops in proptest::collection::vec((0u64..4, 0u64..16, 0u32..3, proptest::bool::ANY), 0..200)
        ) {
            let mut t = BlockTable::default();
            let mut model: std::collections::BTreeMap<(u64, u64), PageRun> = Default::default();
            for (ino, block, pages, insert) in ops {
                let run = PageRun::new(block * 8, pages + 1);
                if insert {
                    proptest::prop_assert_eq!(t.insert(ino, block, run), model.insert((ino, block), run));
                } else {
                    proptest::prop_assert_eq!(t.remove(ino, block), model.remove(&(ino, block)));
                }
                proptest::prop_assert_eq!(t.len(), model.len());
                proptest::prop_assert_eq!(t.is_empty(), model.is_empty());
            }
            for ino in 0..4 {
                let want: Vec<u64> = model.range((ino, 0)..(ino + 1, 0)).map(|(k, _)| k.1).collect();
                proptest::prop_assert_eq!(t.blocks_of(ino), want);
                for block in 0..16 {
                    proptest::prop_assert_eq!(t.get(ino, block), model.get(&(ino, block)).copied());
                }
            }
            let mut all: Vec<_> = t.iter().map(|(i, b, r)| ((i, b), r)).collect();
            all.sort_unstable_by_key(|e| e.0);
            proptest::prop_assert_eq!(all, model.into_iter().collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_run_keeps_its_first_block_page_in_the_stored_page_count() {
        let r = PageRun {
            start: 7,
            pages: 1024,
            first: 1023,
        };
        assert_eq!(PageRun::unpack(r.start, r.packed_pages()), r);
        assert_eq!(r.end(), 2047);
        // A count stored before runs had a first page reads back as a run from page 0.
        assert_eq!(PageRun::unpack(9, 16), PageRun::new(9, 16));
    }
}
