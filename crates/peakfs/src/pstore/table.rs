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
}

impl PageRun {
    /// No pages.
    pub const NONE: PageRun = PageRun { start: 0, pages: 0 };

    /// Whether the run holds no page.
    pub fn is_none(&self) -> bool {
        self.pages == 0
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
        t.insert((1, 2), PageRun { start: 5, pages: 1 });
        assert_eq!(t.get(&(1, 2)).map(|r| r.start), Some(5));
        assert!(!t.contains_key(&(2, 1)));
    }
}
