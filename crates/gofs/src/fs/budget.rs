//! A byte budget shared by one kind of per-inode cache (read-ahead windows, cached data
//! pointers): a cache charges what it allocates and gives it back when it frees it, and
//! allocates nothing while the budget is spent.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes held by all caches of one kind, at most `LIMIT`.
#[derive(Debug, Default)]
pub struct Budget<const LIMIT: usize>(AtomicUsize);

impl<const LIMIT: usize> Budget<LIMIT> {
    /// Takes `bytes` of the budget; false (nothing taken) when it would overflow.
    pub fn take(&self, bytes: usize) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes).filter(|&h| h <= LIMIT)
            })
            .is_ok()
    }

    /// Gives `bytes` back.
    pub fn give(&self, bytes: usize) {
        self.0.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Bytes held now.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_up_to_the_limit_and_refuses_past_it() {
        let b = Budget::<100>::default();
        assert!(b.take(60));
        assert!(!b.take(41), "past the limit: nothing taken");
        assert_eq!(b.held(), 60);
        assert!(b.take(40));
        b.give(100);
        assert_eq!(b.held(), 0);
        assert!(!b.take(usize::MAX), "no overflow");
    }
}
