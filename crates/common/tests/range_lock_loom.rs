//! Loom model check of the range lock protocol (GoFS §3.3): every interleaving, up to a
//! preemption bound, of two or three threads on a ring of two slots, slot reuse included.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release --test range_lock_loom`.
#![cfg(loom)]

use common::range_lock::{RangeGuard, RangeLock};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;

/// Cells standing for units of the locked space; each holds one plus the ticket of its last
/// holder (zero if none).
type Units = Arc<[UnsafeCell<u64>; 2]>;

fn check(preemption_bound: usize, model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(preemption_bound);
    builder.check(model);
}

fn units() -> Units {
    Arc::new([UnsafeCell::new(0), UnsafeCell::new(0)])
}

/// Records `guard`'s ticket in the cells of the units its range covers. Loom reports an access
/// that is not ordered after the previous holder's (two overlapping holders at once); the
/// assert reports a younger request granted before an older overlapping one.
fn record(guard: &RangeGuard<'_>, units: &Units, covered: &[usize]) {
    for &unit in covered {
        units[unit].with_mut(|last| {
            // SAFETY: every holder of a range covering this unit holds the lock; loom checks
            // that their accesses are ordered.
            let last = unsafe { &mut *last };
            assert!(
                *last <= guard.ticket(),
                "ticket {} granted after {}",
                guard.ticket(),
                *last
            );
            *last = guard.ticket() + 1;
        });
    }
}

fn hold(lock: &RangeLock, offset: u64, len: u64, units: &Units, covered: &[usize]) {
    let guard = lock.acquire(offset, len).unwrap();
    record(&guard, units, covered);
}

#[test]
fn overlapping_holders_never_coexist_and_tickets_are_all_released() {
    check(3, || {
        let lock = Arc::new(RangeLock::new(2).unwrap());
        let units = units();
        let other = {
            let (lock, units) = (lock.clone(), units.clone());
            thread::spawn(move || hold(&lock, 5, 10, &units, &[0]))
        };
        hold(&lock, 0, 10, &units, &[0]);
        other.join().unwrap();
        assert_eq!(lock.header().head(), lock.header().tail());
    });
}

#[test]
fn overlapping_requests_are_granted_in_ticket_order_across_ring_laps() {
    // Three requests on a ring of two: the third reuses the first one's slot. 0..5 and 8..13
    // are disjoint and may be held together; 4..9 overlaps both, at units 4 (cell 0) and 8
    // (cell 1).
    check(1, || {
        let lock = Arc::new(RangeLock::new(2).unwrap());
        let units = units();
        let spawn = |offset, covered: &'static [usize]| {
            let (lock, units) = (lock.clone(), units.clone());
            thread::spawn(move || hold(&lock, offset, 5, &units, covered))
        };
        let others = [spawn(0, &[0]), spawn(8, &[1])];
        hold(&lock, 4, 5, &units, &[0, 1]);
        for other in others {
            other.join().unwrap();
        }
        assert_eq!(lock.header().head(), 3);
        assert_eq!(lock.header().tail(), 3);
    });
}

#[test]
fn refused_try_never_lets_a_younger_overlap_in_nor_blocks_it() {
    check(3, || {
        let lock = Arc::new(RangeLock::new(2).unwrap());
        let units = units();
        let trier = {
            let (lock, units) = (lock.clone(), units.clone());
            thread::spawn(move || {
                if let Some(guard) = lock.try_acquire(5, 10).unwrap() {
                    record(&guard, &units, &[0]);
                }
            })
        };
        hold(&lock, 0, 10, &units, &[0]);
        trier.join().unwrap();
        assert_eq!(lock.header().head(), lock.header().tail());
    });
}

#[test]
fn disjoint_ranges_are_held_at_the_same_time() {
    check(3, || {
        let lock = Arc::new(RangeLock::new(2).unwrap());
        let holding = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let hold_until_both_hold = move |lock: &RangeLock, holding: &[AtomicBool; 2], me: usize| {
            let _guard = lock.acquire(me as u64 * 10, 10).unwrap();
            holding[me].store(true, Ordering::Release);
            // A lock that made a disjoint request wait would deadlock here, which loom reports.
            while !holding[1 - me].load(Ordering::Acquire) {
                thread::yield_now();
            }
        };
        let other = {
            let (lock, holding) = (lock.clone(), holding.clone());
            thread::spawn(move || hold_until_both_hold(&lock, &holding, 1))
        };
        hold_until_both_hold(&lock, &holding, 0);
        other.join().unwrap();
    });
}
