//! Loom model check of the size-class pool protocol (GNStor §4.2): every interleaving, up to a
//! preemption bound, of two or three threads on the tiniest pool, one 16 KiB top-level unit
//! split into four 4 KiB units, so that allocations split it and frees merge it back. The pool
//! never grows (its capacity is its maximum), and every model leaves room for all its requests
//! at every instant, so an allocation that fails is a spurious exhaustion.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release --test size_class_loom`.
#![cfg(loom)]

use common::bitmap::size_class::{PoolAlloc, PoolConfig, PoolError, SizeClassPool};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

const KIB: u64 = 1 << 10;
/// The small level's unit; also the granularity of [`Units`].
const SMALL: u64 = 4 * KIB;
/// The top level's unit and the whole (fixed) capacity: the pool can never grow.
const TOP: u64 = 16 * KIB;

/// Cells standing for the pool's 4 KiB units; each holds the id of its holder (zero if none).
type Units = Arc<[UnsafeCell<u64>; (TOP / SMALL) as usize]>;

/// Explores `model` with at most `preemption_bound` preemptions per execution (`None`: all).
fn check(preemption_bound: Option<usize>, model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = preemption_bound;
    builder.check(model);
}

fn pool() -> Arc<SizeClassPool> {
    Arc::new(
        SizeClassPool::new(PoolConfig {
            levels: vec![SMALL, TOP],
            initial_capacity: TOP,
            max_capacity: TOP,
            growth_factor: 2,
        })
        .unwrap(),
    )
}

fn units() -> Units {
    Arc::new(std::array::from_fn(|_| UnsafeCell::new(0)))
}

/// Marks `alloc`'s units as held by `holder`. Loom reports an access not ordered after the
/// previous holder's (two holders of one unit at once, or a unit reused without the free
/// happening before); the assert reports a unit that is still marked.
fn mark(alloc: PoolAlloc, units: &Units, holder: u64) {
    for unit in alloc.offset / SMALL..(alloc.offset + alloc.len) / SMALL {
        units[unit as usize].with_mut(|cell| {
            // SAFETY: only the holder of an allocation covering this unit touches the cell;
            // loom checks that consecutive holders' accesses are ordered.
            let cell = unsafe { &mut *cell };
            assert_eq!(
                *cell, 0,
                "{alloc:?} handed to {holder} while held by {cell}"
            );
            *cell = holder;
        });
    }
}

/// Unmarks `alloc`'s units, checking that nobody else marked them meanwhile.
fn unmark(alloc: PoolAlloc, units: &Units, holder: u64) {
    for unit in alloc.offset / SMALL..(alloc.offset + alloc.len) / SMALL {
        units[unit as usize].with_mut(|cell| {
            // SAFETY: as in `mark`.
            let cell = unsafe { &mut *cell };
            assert_eq!(*cell, holder, "{alloc:?} of {holder} taken by {cell}");
            *cell = 0;
        });
    }
}

/// Allocates `len` bytes (which must succeed: the pool has room for all the models' requests
/// at once, so a failure is spurious exhaustion), marks them, unmarks them and frees them.
fn alloc_use_free(pool: &SizeClassPool, units: &Units, len: u64, holder: u64) {
    let alloc = pool.alloc(len).unwrap();
    assert_eq!(alloc.offset % SMALL, 0);
    assert!(alloc.offset + alloc.len <= TOP, "{alloc:?}");
    mark(alloc, units, holder);
    unmark(alloc, units, holder);
    pool.free(alloc).unwrap();
}

/// Fully merged: the top-level unit free, nothing free below it.
fn assert_whole(pool: &SizeClassPool) {
    let stats = pool.stats();
    assert_eq!(stats.free_units, vec![0, 1], "{stats:?}");
    assert_eq!(stats.free_bytes, TOP);
}

#[test]
fn concurrent_splits_never_overlap_and_merge_back_whole() {
    // 4 KiB and 8 KiB (a two-unit run) from the one top-level unit: the first allocation splits
    // it, the second takes the published siblings, or waits for them (never failing). Each
    // then frees, merging the group back (racing the other's allocation or free). Unbounded,
    // the retry loop of a waiting allocation makes this model too large.
    check(Some(5), || {
        let (pool, units) = (pool(), units());
        let other = {
            let (pool, units) = (pool.clone(), units.clone());
            thread::spawn(move || alloc_use_free(&pool, &units, SMALL, 1))
        };
        alloc_use_free(&pool, &units, 2 * SMALL, 2);
        other.join().unwrap();
        assert_whole(&pool);
        let stats = pool.stats();
        assert!(stats.splits >= 1 && stats.merges >= 1, "{stats:?}");
    });
}

#[test]
fn free_with_merge_racing_an_allocation_keeps_every_unit_once() {
    // Freeing the only allocation completes the group and merges it, while another thread
    // claims a 4 KiB unit of the same group (the merge's claim and the allocation's collide).
    // Small enough to explore without a preemption bound.
    check(None, || {
        let (pool, units) = (pool(), units());
        let first = pool.alloc(SMALL).unwrap();
        mark(first, &units, 1);
        let freer = {
            let (pool, units) = (pool.clone(), units.clone());
            thread::spawn(move || {
                unmark(first, &units, 1);
                pool.free(first).unwrap();
            })
        };
        let second = pool.alloc(SMALL).unwrap();
        mark(second, &units, 2);
        freer.join().unwrap();
        // Exactly the live unit is missing: none lost (hidden, or merged over) nor duplicated
        // (free at two levels, or free and held).
        assert_eq!(pool.free_bytes(), TOP - SMALL, "{:?}", pool.stats());
        unmark(second, &units, 2);
        pool.free(second).unwrap();
        assert_whole(&pool);
    });
}

#[test]
fn double_free_racing_frees_is_detected_exactly_once() {
    // Two threads free the same 4 KiB allocation while a third frees its sibling: the merge
    // that completes the group runs in whichever free comes last.
    check(Some(5), || {
        let pool = pool();
        let twice = pool.alloc(SMALL).unwrap();
        let once = pool.alloc(SMALL).unwrap();
        let spawn = |alloc| {
            let pool = pool.clone();
            thread::spawn(move || pool.free(alloc))
        };
        let (first, second) = (spawn(twice), spawn(twice));
        pool.free(once).unwrap();
        let mut results = [first.join().unwrap(), second.join().unwrap()];
        results.sort_by_key(Result::is_err);
        let not_allocated = PoolError::NotAllocated {
            offset: twice.offset,
            len: twice.len,
        };
        assert_eq!(results, [Ok(()), Err(not_allocated)]);
        assert_whole(&pool);
    });
}
