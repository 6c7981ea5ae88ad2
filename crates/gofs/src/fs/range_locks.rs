//! Per-inode range locks (papers/gofs.md §3.3, "scalable accesses to inode"): every read and
//! write holds `common::range_lock::RangeLock` on its byte range of the file instead of an
//! inode-wide mutex, so requests on disjoint ranges of one file do not wait for each other
//! while overlapping ones are ordered first come, first served.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use common::range_lock::RangeLock;

use crate::error::{FsError, Result};

/// Ring slots of each inode's lock: requests in flight on one file at once.
const SLOTS: usize = 64;

/// The range locks of all inodes touched so far.
#[derive(Debug, Default)]
pub struct InodeRanges {
    locks: Mutex<HashMap<u32, Arc<RangeLock>>>,
}

impl InodeRanges {
    /// The lock of inode `ino` (made on first use).
    pub fn of(&self, ino: u32) -> Result<Arc<RangeLock>> {
        let mut m = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = m.get(&ino) {
            return Ok(Arc::clone(l));
        }
        let l = Arc::new(
            RangeLock::new(SLOTS)
                .map_err(|e| FsError::InvalidArgument(format!("range lock: {e}")))?,
        );
        m.insert(ino, Arc::clone(&l));
        Ok(l)
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
        let l = r.of(5).unwrap();
        let a = l.acquire(0, 4096).unwrap();
        let b = l.try_acquire(4096, 4096).unwrap();
        assert!(b.is_some(), "a disjoint range does not wait");
        assert!(
            l.try_acquire(100, 10).unwrap().is_none(),
            "an overlapping one does"
        );
        drop((a, b));
        assert!(Arc::ptr_eq(&l, &r.of(5).unwrap()));
        let (o, n) = clamp(u64::MAX, 0);
        assert!(o.checked_add(n).is_some() && n >= 1);
    }
}
