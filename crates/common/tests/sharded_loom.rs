//! Loom model check of the sharded block allocator's protocol (GoFS §3.3): reservation on the
//! shard's free count, `fetch_or` claims, `fetch_and` frees, and the big-reader lock that lets a
//! redistribution run while other operations wait outside their shards. Every interleaving of
//! two threads (up to a preemption bound for the largest model) on an allocator of two shards
//! and two segments of four blocks.
//!
//! Loom treats SeqCst loads and stores as AcqRel; `sharded.rs` adds, under loom only, the SeqCst
//! fences that give its shard-entry handshake the total order the real build gets from its
//! SeqCst accesses (see `handshake_fence` there).
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release --test sharded_loom`.
#![cfg(loom)]

use common::bitmap::sharded::{FreeError, ShardedAllocator, ShardedConfig};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::Ordering;
use loom::thread;

const BLOCKS_PER_SEGMENT: u32 = 4;
const TOTAL_BLOCKS: u64 = 2 * BLOCKS_PER_SEGMENT as u64;

/// One cell per block, standing for the block's contents: each holds the number of the thread
/// that last wrote the block. Loom reports a write not ordered after the previous one, that is a
/// block handed out while another thread may still use it.
type Blocks = Arc<Vec<UnsafeCell<u32>>>;

/// Runs `model` in every interleaving, or in those with at most `preemption_bound` preemptions,
/// and prints how many executions that took.
fn check(preemption_bound: Option<usize>, model: impl Fn() + Sync + Send + 'static) {
    let executions = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = executions.clone();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = preemption_bound;
    builder.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        model();
    });
    println!(
        "{} executions",
        executions.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// Two shards of one segment of four blocks each, all free.
fn allocator(low_threshold: f64) -> Arc<ShardedAllocator> {
    let config =
        ShardedConfig::new(TOTAL_BLOCKS, BLOCKS_PER_SEGMENT, 2).with_low_threshold(low_threshold);
    Arc::new(ShardedAllocator::new(config, |_| false).unwrap())
}

fn blocks() -> Blocks {
    Arc::new((0..TOTAL_BLOCKS).map(|_| UnsafeCell::new(0)).collect())
}

/// Writes `owner` into each of `owned` blocks.
fn write(blocks: &Blocks, owned: &[u64], owner: u32) {
    for &block in owned {
        blocks[block as usize].with_mut(|contents| {
            // SAFETY: the block is allocated and held by this thread alone; loom checks that
            // the write is ordered after the previous holder's.
            unsafe { *contents = owner };
        });
    }
}

/// Allocates `n` blocks on shard `hint` and writes them as `owner`.
fn alloc(allocator: &ShardedAllocator, blocks: &Blocks, hint: u32, n: u64, owner: u32) -> Vec<u64> {
    let allocation = allocator.alloc(hint, n).unwrap();
    let owned: Vec<u64> = allocation.blocks().collect();
    assert_eq!(owned.len() as u64, n);
    write(blocks, &owned, owner);
    owned
}

/// With no operation in flight: exactly the blocks of `held` are in use, the bitmap, the
/// per-segment used counts and the per-shard free counts agree, and no block is held twice.
fn assert_consistent(allocator: &ShardedAllocator, held: &[u64]) {
    let mut sorted = held.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        held.len(),
        "a block was handed out twice: {held:?}"
    );
    for block in 0..TOTAL_BLOCKS {
        assert_eq!(
            allocator.is_allocated(block),
            Some(held.contains(&block)),
            "block {block}, held {held:?}"
        );
    }
    let parts = allocator.parts();
    let bps = u64::from(BLOCKS_PER_SEGMENT);
    let mut shard_free = [0; 2];
    for (segment, used) in parts.segment_used.iter().enumerate() {
        let used = u64::from(used.load(Ordering::Relaxed));
        let segment = segment as u64;
        let expected = held.iter().filter(|&&block| block / bps == segment).count() as u64;
        assert_eq!(used, expected, "segment {segment}, held {held:?}");
        let owner = parts.segment_owner[segment as usize].load(Ordering::Relaxed);
        shard_free[owner as usize] += bps - used;
    }
    for (shard, free) in shard_free.into_iter().enumerate() {
        assert_eq!(
            allocator.shard_free_blocks(shard as u32),
            Some(free),
            "shard {shard}"
        );
    }
    assert_eq!(allocator.free_blocks(), TOTAL_BLOCKS - held.len() as u64);
}

#[test]
fn concurrent_allocations_never_share_a_block() {
    // Both threads reserve on shard 0 and claim bits of the same bitmap word.
    check(None, || {
        let allocator = allocator(0.05);
        let blocks = blocks();
        let other = {
            let (allocator, blocks) = (allocator.clone(), blocks.clone());
            thread::spawn(move || alloc(&allocator, &blocks, 0, 2, 2))
        };
        let mut held = alloc(&allocator, &blocks, 0, 2, 1);
        held.extend(other.join().unwrap());
        assert_eq!(allocator.shard_free_blocks(0), Some(0));
        assert_consistent(&allocator, &held);
    });
}

#[test]
fn allocation_racing_frees_keeps_counts_exact_and_reports_the_double_free() {
    // Blocks 0, 1 and 2 are in use, so shard 0 holds one free block. One thread frees block 0
    // then block 2; the other allocates two blocks on shard 0, which either finds a freed block
    // or redistributes segments while the frees wait or run, then frees block 2 as well. Every
    // interleaving would take minutes; five preemptions take seconds.
    check(Some(5), || {
        let allocator = allocator(0.05);
        let blocks = blocks();
        assert_eq!(alloc(&allocator, &blocks, 0, 3, 3), [0, 1, 2]);
        let other = {
            let (allocator, blocks) = (allocator.clone(), blocks.clone());
            thread::spawn(move || {
                write(&blocks, &[0, 2], 2);
                allocator.free(0, 1).unwrap();
                allocator.free(2, 1)
            })
        };
        let mut held = alloc(&allocator, &blocks, 0, 2, 1);
        let mine = allocator.free(2, 1);
        let theirs = other.join().unwrap();
        if let Some(at) = held.iter().position(|&block| block == 2) {
            // Block 2 was granted again after the other thread freed it: both frees are
            // legitimate, and this thread freed its own block.
            assert_eq!((mine, theirs), (Ok(()), Ok(())));
            held.swap_remove(at);
        } else {
            // Two frees of one allocated block: exactly one is a double free.
            let double_free = Err(FreeError::DoubleFree { block: 2 });
            assert!(
                (mine.is_ok() && theirs == double_free) || (mine == double_free && theirs.is_ok()),
                "{mine:?} {theirs:?}"
            );
        }
        held.push(1);
        assert_consistent(&allocator, &held);
        assert_eq!(
            allocator.free(2, 1),
            Err(FreeError::DoubleFree { block: 2 })
        );
        assert_consistent(&allocator, &held);
    });
}

#[test]
fn rebalance_racing_an_allocation_and_a_free_keeps_counts_exact() {
    // Shard 0 holds blocks 0 and 1 and two free blocks; the redistribution may move segments
    // while one thread allocates and then frees.
    check(None, || {
        let allocator = allocator(0.05);
        let blocks = blocks();
        assert_eq!(alloc(&allocator, &blocks, 0, 2, 3), [0, 1]);
        let other = {
            let allocator = allocator.clone();
            thread::spawn(move || allocator.rebalance())
        };
        let mut held = alloc(&allocator, &blocks, 0, 1, 1);
        allocator.free(0, 1).unwrap();
        held.push(1);
        other.join().unwrap();
        assert_consistent(&allocator, &held);
    });
}

#[test]
fn redistribution_racing_an_allocation_keeps_blocks_and_counts_exact() {
    // A low threshold of one half puts the watermark at two blocks of shard 0's four: whichever
    // allocation reserves first leaves too little for the other, which redistributes and gathers
    // a segment from shard 1 while the first one claims. When the allocation of three reserves
    // first, it also crosses the watermark and redistributes after its claim.
    check(None, || {
        let allocator = allocator(0.5);
        let blocks = blocks();
        let other = {
            let (allocator, blocks) = (allocator.clone(), blocks.clone());
            thread::spawn(move || alloc(&allocator, &blocks, 0, 2, 2))
        };
        let mut held = alloc(&allocator, &blocks, 0, 3, 1);
        held.extend(other.join().unwrap());
        assert!(allocator.rebalance_count() > 0);
        assert_consistent(&allocator, &held);
        // Whatever the redistributions left, the rest of the device can still be allocated.
        held.extend(alloc(&allocator, &blocks, 1, 3, 3));
        assert_consistent(&allocator, &held);
    });
}
