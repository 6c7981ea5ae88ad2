//! Per-inode range locks (papers/gofs.md §3.3, "scalable accesses to inode"): every read and
//! write holds `common::range_lock::RangeLock` on its byte range of the file instead of an
//! inode-wide mutex, so requests on disjoint ranges of one file do not wait for each other
//! while overlapping ones are ordered first come, first served. The same per-inode entry
//! carries the inode's read-ahead window and data generation, so a read finds all three with
//! one lookup.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use common::range_lock::RangeLock;

use super::nat::NidHasher;
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

/// The per-inode state of all inodes touched so far.
#[derive(Debug, Default)]
pub struct InodeRanges {
    locks: Mutex<HashMap<u32, Arc<InodeShared>, BuildHasherDefault<NidHasher>>>,
}

impl InodeRanges {
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
}
