//! The set of chunks holding unflushed writes, so flush and power cut visit only those.
//!
//! Two bitmap levels: a leaf bit per chunk and a summary bit per leaf word. A writer sets its
//! chunk's bits once per flush interval (when the chunk gets an undo record), so the shared words
//! are written per chunk and interval, never per I/O; flush finds dirty chunks by scanning the
//! summary (one bit per 4096 chunks).

use std::io;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

use super::mapping::ZeroedArray;

/// Chunks with unflushed writes.
pub(super) struct DirtySet {
    leaves: ZeroedArray<AtomicU64>,
    summary: ZeroedArray<AtomicU64>,
}

impl DirtySet {
    /// An empty set for chunks `0..chunks`.
    pub(super) fn new(chunks: usize) -> io::Result<Self> {
        let leaf_words = chunks.div_ceil(64);
        Ok(Self {
            leaves: ZeroedArray::new(leaf_words)?,
            summary: ZeroedArray::new(leaf_words.div_ceil(64))?,
        })
    }

    /// Adds `chunk`. Call while holding the chunk, when it gets its undo record: a write that
    /// later finds the record therefore also finds the chunk in the set (or being drained).
    pub(super) fn insert(&self, chunk: usize) {
        let leaf = chunk / 64;
        self.leaves.as_slice()[leaf].fetch_or(1 << (chunk % 64), SeqCst);
        // The summary word covers 4096 chunks: read it first so that it is written only when
        // its bit is really clear. SeqCst orders this read after the leaf update, so a drain
        // that already took the summary bit will still see the leaf bit, or a later drain will.
        let summary = &self.summary.as_slice()[leaf / 64];
        let bit = 1 << (leaf % 64);
        if summary.load(SeqCst) & bit == 0 {
            summary.fetch_or(bit, SeqCst);
        }
    }

    /// Removes every chunk from the set, calling `visit` on each. Chunks inserted concurrently
    /// are either visited now or stay in the set for the next drain.
    pub(super) fn drain(&self, mut visit: impl FnMut(usize)) {
        for (index, summary) in self.summary.as_slice().iter().enumerate() {
            // Cheap skip of clean regions; an insertion racing this read stays for next time.
            if summary.load(Relaxed) == 0 {
                continue;
            }
            let mut leaves = summary.swap(0, SeqCst);
            while leaves != 0 {
                let leaf = index * 64 + leaves.trailing_zeros() as usize;
                leaves &= leaves - 1;
                let mut chunks = self.leaves.as_slice()[leaf].swap(0, SeqCst);
                while chunks != 0 {
                    visit(leaf * 64 + chunks.trailing_zeros() as usize);
                    chunks &= chunks - 1;
                }
            }
        }
    }
}

impl std::fmt::Debug for DirtySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirtySet")
            .field("leaf_words", &self.leaves.as_slice().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drain_visits_each_inserted_chunk_once_and_empties_the_set() {
        let set = DirtySet::new(300_000).expect("set");
        let inserted = [0, 1, 63, 64, 4095, 4096, 4097, 299_999];
        for &chunk in &inserted {
            set.insert(chunk);
            set.insert(chunk);
        }
        let mut visited = Vec::new();
        set.drain(|chunk| visited.push(chunk));
        assert_eq!(visited, inserted);
        set.drain(|chunk| panic!("chunk {chunk} visited after the set was drained"));
    }
}
