//! The conformance suite every [`Controller`] must pass, whatever is behind it.
//!
//! Each check takes a factory that builds a fresh controller whose namespace 1 has the asked
//! LBA size and capacity and reads as zeros, brings it up through [`NvmeDevice`], and panics
//! with a message on the first deviation. Integration tests call every check for every
//! controller (`tests/conformance.rs` here; swarmio's own tests for the emulator).

use std::sync::Arc;

use crate::controller::Controller;
use crate::device::{DeviceConfig, DeviceError, NvmeDevice};
use crate::spec::{Status, SubmissionEntry};

/// Builds a fresh controller: `(lba_size, capacity_blocks)` → controller.
pub type Factory<'a> = &'a dyn Fn(u32, u64) -> Arc<dyn Controller>;

/// One named check.
pub type Check = (&'static str, fn(Factory<'_>));

/// Every check, by name, for callers that run them in a loop.
pub const CHECKS: &[Check] = &[
    (
        "identify_reports_the_namespace",
        identify_reports_the_namespace,
    ),
    ("fresh_namespace_reads_zeros", fresh_namespace_reads_zeros),
    ("written_data_reads_back", written_data_reads_back),
    (
        "out_of_range_lbas_are_refused",
        out_of_range_lbas_are_refused,
    ),
    (
        "unknown_opcode_is_invalid_opcode",
        unknown_opcode_is_invalid_opcode,
    ),
    (
        "wrong_namespace_is_invalid_namespace",
        wrong_namespace_is_invalid_namespace,
    ),
    ("bad_prps_are_refused", bad_prps_are_refused),
    (
        "unaligned_prp1_moves_the_right_bytes",
        unaligned_prp1_moves_the_right_bytes,
    ),
    (
        "write_zeroes_and_deallocate_read_back_zeros",
        write_zeroes_and_deallocate_read_back_zeros,
    ),
    (
        "concurrent_writers_keep_their_data",
        concurrent_writers_keep_their_data,
    ),
];

const BLOCKS: u64 = 4096;

fn open(make: Factory<'_>, lba: u32) -> NvmeDevice {
    let config = DeviceConfig {
        io_queues: 2,
        queue_depth: 32,
        admin_depth: 16,
        slot_bytes: 64 << 10,
    };
    NvmeDevice::open(make(lba, BLOCKS), config)
        .unwrap_or_else(|e| panic!("bringing the controller up: {e}"))
}

/// Deterministic, position-dependent content for a test write.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn status_of(result: Result<(), DeviceError>) -> Status {
    match result {
        Ok(()) => Status::SUCCESS,
        Err(DeviceError::Status { status, .. }) => status,
        Err(e) => panic!("expected an NVMe status, got {e}"),
    }
}

/// Identify Controller parses, and Identify Namespace reports the configured geometry.
pub fn identify_reports_the_namespace(make: Factory<'_>) {
    for lba in [512, 4096] {
        let dev = open(make, lba);
        assert_eq!(dev.geometry().block_size(), lba, "LBA size");
        assert_eq!(dev.geometry().capacity_blocks(), BLOCKS, "capacity");
        let mdts = dev.identify().mdts;
        assert!(
            mdts == 0 || 4096u64 << mdts >= 64 << 10,
            "MDTS too small: {mdts}"
        );
    }
}

/// A namespace nobody wrote reads as zeros.
pub fn fresh_namespace_reads_zeros(make: Factory<'_>) {
    let dev = open(make, 4096);
    let mut buf = vec![0xAAu8; 256 << 10];
    dev.read_blocks(BLOCKS - 64, &mut buf).expect("read");
    assert!(
        buf.iter().all(|&b| b == 0),
        "unwritten blocks must read as zeros"
    );
}

/// Writes of every size (one block, two pages, PRP lists) read back byte for byte.
pub fn written_data_reads_back(make: Factory<'_>) {
    for lba in [512u32, 4096] {
        let dev = open(make, lba);
        let mut at = 0u64;
        for (i, blocks) in [1u64, 2, 3, 8, 17, 64, 200].into_iter().enumerate() {
            let len = (blocks * u64::from(lba)) as usize;
            let data = pattern(i as u64 + 7, len);
            dev.write_blocks(at, &data).expect("write");
            let mut back = vec![0u8; len];
            dev.read_blocks(at, &mut back).expect("read");
            assert!(
                back == data,
                "{blocks} blocks of {lba} bytes at {at} did not read back"
            );
            at += blocks + 3;
        }
        dev.flush().expect("flush");
    }
}

/// Reads and writes past the end get LBA Out of Range.
pub fn out_of_range_lbas_are_refused(make: Factory<'_>) {
    let dev = open(make, 4096);
    let mut buf = vec![0u8; 8192];
    let lba_oor = Status::lba_out_of_range();
    assert_eq!(
        status_of(dev.read_blocks(BLOCKS, &mut buf[..4096])),
        lba_oor,
        "read at capacity"
    );
    assert_eq!(
        status_of(dev.read_blocks(BLOCKS - 1, &mut buf)),
        lba_oor,
        "read across the end"
    );
    let scratch = dev.alloc_dma(8192).expect("dma");
    let mut near_end =
        SubmissionEntry::write(0, 1, 0, 2, scratch.iova(), scratch.iova() + 4096).expect("write");
    near_end.cdw10 = u32::MAX - 1;
    near_end.cdw11 = u32::MAX;
    assert_eq!(
        dev.submit_raw(near_end).expect("submit").status(),
        lba_oor,
        "write whose end overflows 2^64"
    );
    assert_eq!(
        status_of(dev.write_zeroes(BLOCKS, 1)),
        lba_oor,
        "write zeroes at capacity"
    );
}

/// An opcode the NVM command set does not define gets Invalid Opcode.
pub fn unknown_opcode_is_invalid_opcode(make: Factory<'_>) {
    let dev = open(make, 4096);
    let mut sqe = SubmissionEntry::flush(0, 1).expect("flush");
    sqe.cdw0 = (sqe.cdw0 & !0xff) | 0x7f;
    let cqe = dev.submit_raw(sqe).expect("submit");
    assert_eq!(cqe.status(), Status::invalid_opcode());
}

/// A namespace id that does not exist gets Invalid Namespace.
pub fn wrong_namespace_is_invalid_namespace(make: Factory<'_>) {
    let dev = open(make, 4096);
    let buf = dev.alloc_dma(4096).expect("dma");
    let sqe = SubmissionEntry::read(0, 2, 0, 1, buf.iova(), 0).expect("read");
    assert_eq!(
        dev.submit_raw(sqe).expect("submit").status(),
        Status::invalid_namespace()
    );
}

/// Misaligned PRPs and PRPs that do not cover the transfer get Invalid Field; memory the
/// controller may not reach gets Data Transfer Error.
pub fn bad_prps_are_refused(make: Factory<'_>) {
    let dev = open(make, 4096);
    let buf = dev.alloc_dma(4 * 4096).expect("dma");
    let base = buf.iova();
    // Built valid, then corrupted: the controller must catch what a careless host sends.
    let read = |prp1: u64, prp2: u64, blocks: u32| {
        let mut sqe = SubmissionEntry::read(0, 1, 0, blocks, base, base + 4096).expect("read");
        sqe.prp1 = prp1;
        sqe.prp2 = prp2;
        dev.submit_raw(sqe).expect("submit").status()
    };
    assert_eq!(
        read(base + 2, 0, 1),
        Status::invalid_field(),
        "PRP1 not dword aligned"
    );
    assert_eq!(
        read(base, 0, 2),
        Status::invalid_field(),
        "two pages but no PRP2"
    );
    assert_eq!(
        read(base, base + 4096 + 8, 2),
        Status::invalid_field(),
        "PRP2 with an offset"
    );
    assert_eq!(
        read(0x1000, 0, 1),
        Status::data_transfer_error(),
        "unregistered memory"
    );
    assert_eq!(
        read(base, base + 4096, 2),
        Status::SUCCESS,
        "a good pair still works"
    );
}

/// A PRP1 that is only dword aligned (an offset inside its page, not a block multiple) moves
/// exactly the bytes of the transfer, for writes and for reads.
pub fn unaligned_prp1_moves_the_right_bytes(make: Factory<'_>) {
    let dev = open(make, 512);
    let buf = dev.alloc_dma(3 * 4096).expect("dma");
    let data = pattern(5, 2048);
    let at = 4096 - 1000; // 1,000 bytes in the first page, 1,048 in the second
    // SAFETY: the buffer holds 3 pages, and no command uses it while we write it.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf.as_ptr().add(at), data.len()) };
    let iova = buf.iova() + at as u64;
    let second = buf.iova() + 4096;
    let write = SubmissionEntry::write(0, 1, 20, 4, iova, second).expect("write");
    assert_eq!(
        dev.submit_raw(write).expect("submit").status(),
        Status::SUCCESS
    );
    let mut back = vec![0u8; 2048];
    dev.read_blocks(20, &mut back).expect("read");
    assert!(back == data, "an unaligned write stored the wrong bytes");
    // SAFETY: as above.
    unsafe { std::ptr::write_bytes(buf.as_ptr(), 0, 3 * 4096) };
    let read = SubmissionEntry::read(0, 1, 20, 4, iova, second).expect("read");
    assert_eq!(
        dev.submit_raw(read).expect("submit").status(),
        Status::SUCCESS
    );
    let mut got = vec![0u8; 2048];
    // SAFETY: the read completed into these bytes of the buffer.
    unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr().add(at), got.as_mut_ptr(), got.len()) };
    assert!(got == data, "an unaligned read returned the wrong bytes");
}

/// Write Zeroes and Deallocate make blocks read as zeros and leave neighbours alone.
pub fn write_zeroes_and_deallocate_read_back_zeros(make: Factory<'_>) {
    let dev = open(make, 4096);
    let data = pattern(99, 32 * 4096);
    dev.write_blocks(100, &data).expect("write");
    dev.write_zeroes(104, 4).expect("write zeroes");
    dev.deallocate(&[(120, 8), (110, 1)]).expect("deallocate");
    let mut back = vec![0u8; 32 * 4096];
    dev.read_blocks(100, &mut back).expect("read");
    for block in 0..32usize {
        let got = &back[block * 4096..(block + 1) * 4096];
        let zeroed = (4..8).contains(&block) || (20..28).contains(&block) || block == 10;
        if zeroed {
            assert!(
                got.iter().all(|&b| b == 0),
                "block {} must read as zeros",
                100 + block
            );
        } else {
            assert!(
                got == &data[block * 4096..(block + 1) * 4096],
                "block {} changed",
                100 + block
            );
        }
    }
}

/// Eight threads writing and reading their own regions at once all get their own data back.
pub fn concurrent_writers_keep_their_data(make: Factory<'_>) {
    let dev = open(make, 512);
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let dev = &dev;
            s.spawn(move || {
                for round in 0..20u64 {
                    let lba = t * 400 + (round % 5) * 64;
                    let data = pattern(t * 1000 + round, 64 * 512);
                    dev.write_blocks(lba, &data).expect("write");
                    let mut back = vec![0u8; data.len()];
                    dev.read_blocks(lba, &mut back).expect("read");
                    assert!(back == data, "thread {t} round {round}: data mixed up");
                }
            });
        }
    });
}
