//! Loom model check of the sequence lock (`common::seqlock`) as GoFS's pointer cache uses it: a
//! chunk's version tag and an address guarded by one counter, a writer refilling the chunk at
//! another version and then at the first one again (the ABA case), and a reader asking for the
//! first version. Every interleaving up to a preemption bound, with loom's model of relaxed
//! loads returning older stores.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release --test seqlock_loom`.
#![cfg(loom)]

use common::seqlock::SeqCount;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;

/// An address that names the version it was stored at.
fn address(version: u64) -> u64 {
    version * 1000 + 7
}

struct Chunk {
    seq: SeqCount,
    version: AtomicU64,
    address: AtomicU64,
}

impl Chunk {
    fn refill(&self, version: u64) {
        self.seq.write(|| {
            self.version.store(version, Ordering::Relaxed);
            self.address.store(address(version), Ordering::Relaxed);
        });
    }

    fn get(&self, version: u64) -> Option<u64> {
        self.seq.read(|| {
            (self.version.load(Ordering::Relaxed) == version)
                .then(|| self.address.load(Ordering::Relaxed))
        })
    }
}

#[test]
fn a_reader_never_gets_the_address_of_another_version() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let chunk = Arc::new(Chunk {
            seq: SeqCount::default(),
            version: AtomicU64::new(5),
            address: AtomicU64::new(address(5)),
        });
        let writer = {
            let chunk = Arc::clone(&chunk);
            thread::spawn(move || {
                chunk.refill(1);
                chunk.refill(5);
            })
        };
        for _ in 0..2 {
            if let Some(a) = chunk.get(5) {
                assert_eq!(a, address(5));
            }
        }
        writer.join().unwrap();
        assert_eq!(chunk.get(5), Some(address(5)), "quiet: the answer is there");
    });
}
