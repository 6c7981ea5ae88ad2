//! Loom model check of the bell (`common::bell`) as a software NVMe controller uses it: a host
//! thread writes a doorbell and rings, a worker looks at the doorbell and sleeps on the bell
//! while it is unchanged. A doorbell write that the worker neither sees nor is woken for leaves
//! it asleep for good, which loom reports as a deadlock. Every interleaving up to a preemption
//! bound, with loom's model of loads returning older stores.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release --test bell_loom`.
#![cfg(loom)]

use std::time::Duration;

use common::bell::Bell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicU32, Ordering, fence};
use loom::thread;

/// The worker: sleeps until it has seen `writes` doorbell writes.
fn worker(bell: &Bell, doorbell: &AtomicU32, writes: u32) {
    let mut seen = 0;
    while seen < writes {
        bell.sleep(
            || doorbell.load(Ordering::Acquire) == seen,
            Duration::from_secs(1),
        );
        seen = doorbell.load(Ordering::Acquire);
    }
}

#[test]
fn a_doorbell_write_then_ring_always_reaches_the_worker() {
    loom::model(|| {
        let bell = Arc::new(Bell::default());
        let doorbell = Arc::new(AtomicU32::new(0));
        let host = {
            let (bell, doorbell) = (bell.clone(), doorbell.clone());
            thread::spawn(move || {
                doorbell.store(1, Ordering::Release);
                bell.ring();
            })
        };
        worker(&bell, &doorbell, 1);
        host.join().unwrap();
    });
}

/// As the host queue rings: its own SeqCst fence after the doorbell write (and the release of
/// its tail lock), then `ring_after_fence`; two writes, so the worker sleeps between them too.
#[test]
fn a_queue_that_fences_itself_and_rings_after_the_fence_reaches_the_worker() {
    loom::model(|| {
        let bell = Arc::new(Bell::default());
        let doorbell = Arc::new(AtomicU32::new(0));
        let tail_lock = Arc::new(AtomicU32::new(0));
        let host = {
            let (bell, doorbell, tail_lock) = (bell.clone(), doorbell.clone(), tail_lock.clone());
            thread::spawn(move || {
                for tail in 1..=2 {
                    tail_lock.store(1, Ordering::Relaxed);
                    doorbell.store(tail, Ordering::Release);
                    tail_lock.store(0, Ordering::Release);
                    fence(Ordering::SeqCst);
                    bell.ring_after_fence();
                }
            })
        };
        worker(&bell, &doorbell, 2);
        host.join().unwrap();
    });
}
