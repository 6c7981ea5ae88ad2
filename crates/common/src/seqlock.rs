//! A sequence lock's counter for data with one writer at a time and readers that must never
//! wait: GoFS's cached data pointers (papers/gofs.md §3.3), read without the engine lock while
//! the engine refills them.
//!
//! The guarded fields are atomics accessed with relaxed loads and stores inside
//! [`SeqCount::read`] and [`SeqCount::write`]; the counter is odd while a write is under way and
//! every write moves it on by two. A reader compares the counter before and after, so it notices
//! any number of overlapping writes, also writes that put back the very values it checked (the
//! ABA case that re-checking a guarded field, such as a version tag, cannot see).

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering, fence};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering, fence};

/// The counter of one sequence lock (see the module doc).
#[derive(Debug, Default)]
pub struct SeqCount(AtomicU64);

impl SeqCount {
    /// Runs `change` (relaxed stores of the guarded fields) as a write section. Callers ensure
    /// one writer at a time (the writers' own lock).
    pub fn write(&self, change: impl FnOnce()) {
        let s = self.0.load(Ordering::Relaxed);
        self.0.store(s.wrapping_add(1), Ordering::Relaxed);
        // A reader that sees any store of `change` sees the odd count after its own fence.
        fence(Ordering::Release);
        change();
        self.0.store(s.wrapping_add(2), Ordering::Release);
    }

    /// The answer of `read` (relaxed loads of the guarded fields), or `None` when a write
    /// overlapped it and the answer may mix states (or when `read` itself answers `None`).
    /// Never waits: a caller that needs an answer falls back to its slow path.
    pub fn read<T>(&self, read: impl FnOnce() -> Option<T>) -> Option<T> {
        let s = self.0.load(Ordering::Acquire);
        if s % 2 == 1 {
            return None;
        }
        let answer = read()?;
        // Orders the loads of `read` before the second look at the counter.
        fence(Ordering::Acquire);
        (self.0.load(Ordering::Relaxed) == s).then_some(answer)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_read_overlapping_writes_that_restore_what_it_read_is_refused() {
        let seq = SeqCount::default();
        let version = AtomicU64::new(5);
        let overlapped = seq.read(|| {
            let seen = version.load(Ordering::Relaxed);
            seq.write(|| version.store(1, Ordering::Relaxed));
            seq.write(|| version.store(5, Ordering::Relaxed));
            Some(seen)
        });
        assert_eq!(overlapped, None, "two writes that put the value back");
        assert_eq!(seq.read(|| Some(version.load(Ordering::Relaxed))), Some(5));
    }

    #[test]
    fn a_read_inside_a_write_is_refused() {
        let seq = SeqCount::default();
        seq.write(|| assert_eq!(seq.read(|| Some(1)), None));
        assert_eq!(seq.read(|| Some(1)), Some(1), "after the write");
    }
}
