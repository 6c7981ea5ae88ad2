//! BaM's ticket protocol on host threads against an out-of-order consumer: every submission
//! is completed exactly once, to its own submitter, through ring wrap-around and phase flips.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use gpu_nvme::controller::Registers;
use gpu_nvme::queue::{ControllerQueue, HostQueuePair, QueueRings, RingAddrs};
use gpu_nvme::spec::{Status, SubmissionEntry};
use proptest::prelude::*;

/// Runs `threads` submitters of `per_thread` commands each over one queue pair of `depth`
/// entries; the consumer completes each fetched batch in reversed order.
fn run(depth: u32, threads: u64, per_thread: u64) {
    let regs = Arc::new(Registers::new(1, None).unwrap());
    let rings = QueueRings::new(depth, None).unwrap();
    let (sq, cq) = (rings.sq_iova(), rings.cq_iova());
    // SAFETY: the rings and registers outlive both the consumer thread and the queue pair
    // (the scope below joins the consumer before they drop).
    let qp = unsafe {
        HostQueuePair::new(1, rings, regs.sq_tail(1).unwrap(), regs.cq_head(1).unwrap()).unwrap()
    };
    // SAFETY: the same rings (owned by `qp`) and registers outlive the consumer thread.
    let mut consumer = unsafe {
        ControllerQueue::new(
            1,
            1,
            RingAddrs {
                sq: sq as *const _,
                sq_depth: depth,
                cq: cq as *const u8,
                cq_depth: depth,
                sq_doorbell: regs.sq_tail(1).unwrap(),
                cq_doorbell: regs.cq_head(1).unwrap(),
            },
        )
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let stop = &stop;
        s.spawn(move || {
            let mut batch = Vec::new();
            while !stop.load(Ordering::Acquire) {
                batch.clear();
                consumer.fetch(&mut batch, 1024);
                for sqe in batch.iter().rev() {
                    while !consumer.post(sqe.cid(), Status::SUCCESS, sqe.cdw10) {
                        std::hint::spin_loop();
                    }
                }
                std::thread::yield_now();
            }
        });
        let qp = &qp;
        let submitters: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    for i in 0..per_thread {
                        let tag = ((t << 20) | i) as u32;
                        let mut sqe = SubmissionEntry::flush(0, 1).unwrap();
                        sqe.cdw10 = tag;
                        let ticket = qp.submit(sqe);
                        let cqe = qp
                            .wait(ticket, std::time::Duration::from_secs(20))
                            .expect("completion");
                        qp.release(ticket);
                        assert_eq!(cqe.dw0, tag, "completion delivered to the wrong submitter");
                        assert_eq!(cqe.cid, ticket.cid);
                    }
                })
            })
            .collect();
        for h in submitters {
            h.join().unwrap();
        }
        stop.store(true, Ordering::Release);
    });
}

#[test]
fn smallest_queue_wraps_many_times_with_one_submitter() {
    run(2, 1, 500);
}

#[test]
fn eight_submitters_share_a_queue_of_eight() {
    run(8, 8, 300);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn every_submission_completes_once_to_its_submitter(depth_log2 in 1u32..8, threads in 1u64..6, per_thread in 1u64..150) {
        run(1 << depth_log2, threads, per_thread);
    }
}
