//! Per-inode range locks (papers/gofs.md §3.3, "scalable accesses to inode"): every read and
//! write holds `common::range_lock::RangeLock` on its byte range of the file instead of an
//! inode-wide mutex, so requests on disjoint ranges of one file do not wait for each other
//! while overlapping ones are ordered first come, first served. The same per-inode entry
//! carries the inode's read-ahead window, data generation and cached data pointers, so a read
//! finds them all with one lookup.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use common::range_lock::RangeLock;

use super::nat::NidHasher;
use super::pointer_cache::PointerCache;
use super::readahead::ReadAhead;
use crate::error::{FsError, Result};

/// Ring slots of each inode's lock: requests in flight on one file at once.
const SLOTS: usize = 64;

/// What the engine keeps per inode outside its lock.
#[derive(Debug)]
pub struct InodeShared {
    /// the byte-range lock
    pub range: RangeLock,
    /// bumped by every change of the inode's data or size, while the change still holds its
    /// range lock (read-ahead windows name the generation they reflect)
    data_gen: AtomicU64,
    /// the read-ahead window
    ra: Mutex<ReadAhead>,
    /// data pointers resolved by earlier reads
    pub pointers: PointerCache,
}

impl InodeShared {
    /// The current data generation.
    pub fn data_gen(&self) -> u64 {
        self.data_gen.load(Ordering::Acquire)
    }

    /// Marks the data changed (call while holding the range lock of the change).
    pub fn bump(&self) {
        self.data_gen.fetch_add(1, Ordering::AcqRel);
    }

    /// The read-ahead state.
    pub fn ra(&self) -> MutexGuard<'_, ReadAhead> {
        self.ra.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The per-inode state of all inodes touched so far. Entries are never removed, so an entry
/// once found stays the inode's for the life of the map.
#[derive(Debug)]
pub struct InodeRanges {
    /// Tells maps apart in the threads' caches (unique per process).
    id: u64,
    locks: Mutex<HashMap<u32, Arc<InodeShared>, BuildHasherDefault<NidHasher>>>,
}

impl Default for InodeRanges {
    fn default() -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            locks: Mutex::default(),
        }
    }
}

thread_local! {
    /// The entry this thread used last, with its map's id and its ino: a loop of reads on one
    /// file finds it without the map's mutex and without touching the `Arc`'s count. That is
    /// four locked instructions less per read; on the GPU machine's Xeons 15 of them cost a
    /// 4 KiB direct read about 130 ns (bench/results/2026-11-25-h100-session3).
    static LAST_USED: Cell<Option<(u64, u32, Arc<InodeShared>)>> = const { Cell::new(None) };
}

impl InodeRanges {
    /// Runs `f` on the state of inode `ino` (made on first use), through this thread's cache
    /// of the entry it used last.
    pub fn with<T>(&self, ino: u32, f: impl FnOnce(&InodeShared) -> T) -> Result<T> {
        let cached = LAST_USED
            .take()
            .filter(|(id, cached_ino, _)| *id == self.id && *cached_ino == ino);
        let node = match cached {
            Some((_, _, node)) => node,
            None => self.of(ino)?,
        };
        let out = f(&node);
        LAST_USED.set(Some((self.id, ino, node)));
        Ok(out)
    }

    /// The state of inode `ino` (made on first use).
    pub fn of(&self, ino: u32) -> Result<Arc<InodeShared>> {
        let mut m = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = m.get(&ino) {
            return Ok(Arc::clone(l));
        }
        let l = Arc::new(InodeShared {
            range: RangeLock::new(SLOTS)
                .map_err(|e| FsError::InvalidArgument(format!("range lock: {e}")))?,
            data_gen: AtomicU64::new(0),
            ra: Mutex::default(),
            pointers: PointerCache::default(),
        });
        m.insert(ino, Arc::clone(&l));
        Ok(l)
    }

    /// The state of `ino` if it has one.
    pub fn get(&self, ino: u32) -> Option<Arc<InodeShared>> {
        let m = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&ino).cloned()
    }
}

/// The range `offset..offset + len` clamped to what a range lock accepts (non-empty, no
/// overflow).
pub fn clamp(offset: u64, len: u64) -> (u64, u64) {
    let len = len.clamp(1, u64::MAX - offset.min(u64::MAX - 1));
    (offset.min(u64::MAX - 1), len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disjoint_ranges_of_one_inode_are_held_together() {
        let r = InodeRanges::default();
        let s = r.of(5).unwrap();
        let l = &s.range;
        let a = l.acquire(0, 4096).unwrap();
        let b = l.try_acquire(4096, 4096).unwrap();
        assert!(b.is_some(), "a disjoint range does not wait");
        assert!(
            l.try_acquire(100, 10).unwrap().is_none(),
            "an overlapping one does"
        );
        drop((a, b));
        assert!(Arc::ptr_eq(&s, &r.of(5).unwrap()));
        let (o, n) = clamp(u64::MAX, 0);
        assert!(o.checked_add(n).is_some() && n >= 1);
    }

    #[test]
    fn the_thread_cache_hands_out_each_maps_own_entry() {
        let (r1, r2) = (InodeRanges::default(), InodeRanges::default());
        let ptr = |s: &InodeShared| s as *const InodeShared;
        let first = r1.with(5, ptr).unwrap();
        assert_eq!(first, Arc::as_ptr(&r1.of(5).unwrap()));
        assert_eq!(r1.with(5, ptr).unwrap(), first, "a hit is the same entry");
        assert_eq!(r2.with(5, ptr).unwrap(), Arc::as_ptr(&r2.of(5).unwrap()));
        assert_ne!(
            r2.with(5, ptr).unwrap(),
            first,
            "another map's ino 5 is another inode"
        );
        assert_eq!(r1.with(6, ptr).unwrap(), Arc::as_ptr(&r1.of(6).unwrap()));
        assert_eq!(
            r1.with(5, ptr).unwrap(),
            first,
            "an entry outlives its cache slot"
        );
        let other_thread =
            std::thread::scope(|s| s.spawn(|| r1.with(5, ptr).unwrap() as usize).join());
        assert_eq!(other_thread.unwrap(), first as usize);
    }
}
