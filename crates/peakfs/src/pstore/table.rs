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

/// The inode hashtable: ino → inode offset (slot in the metadata zone).
pub type InodeTable = U64Map<u64>;

/// The block hashtable: (ino, file block) → its pages.
pub type BlockTable = HashMap<(u64, u64), PageRun, BuildHasherDefault<U64Hasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hasher_separates_the_two_words_of_a_block_key() {
        use std::hash::BuildHasher;
        let b = BuildHasherDefault::<U64Hasher>::default();
        assert_ne!(b.hash_one((1u64, 2u64)), b.hash_one((2u64, 1u64)));
        let mut t = BlockTable::default();
        t.insert((1, 2), PageRun::new(5, 1));
        assert_eq!(t.get(&(1, 2)).map(|r| r.start), Some(5));
        assert!(!t.contains_key(&(2, 1)));
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
