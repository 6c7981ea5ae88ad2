//! The controller conformance suite, run against `FileController` with each backend, and with
//! every I/O queue served inline (by the threads that wait on it) where a backend allows it.

use std::sync::Arc;

use gpu_nvme::conformance;
use gpu_nvme::controller::{Controller, FileBackend, FileController, FileControllerConfig};

/// A fresh zeroed namespace file of `blocks` blocks; the file lives as long as the test run.
/// With `inline`, no controller thread serves an I/O queue: each is served inline.
fn factory(backend: FileBackend, inline: bool) -> impl Fn(u32, u64) -> Arc<dyn Controller> {
    move |lba, blocks| {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        file.as_file()
            .set_len(u64::from(lba) * blocks)
            .expect("size");
        let (_, path) = file.keep().expect("keep");
        let mut config = FileControllerConfig::new(&path);
        config.lba_size = lba;
        config.backend = backend;
        config.max_io_queues = 8;
        if inline {
            config.inline_queues = (1..=8).collect();
        }
        let ctrl = FileController::new(config).expect("controller");
        // The controller holds the file open; the name can go now.
        std::fs::remove_file(&path).expect("unlink");
        ctrl
    }
}

macro_rules! conformance_tests {
    ($($backend:ident, $inline:literal => $module:ident),+) => {$(
        mod $module {
            use super::*;
            #[test]
            fn identify_reports_the_namespace() { conformance::identify_reports_the_namespace(&factory(FileBackend::$backend, $inline)) }
            #[test]
            fn fresh_namespace_reads_zeros() { conformance::fresh_namespace_reads_zeros(&factory(FileBackend::$backend, $inline)) }
            #[test]
            fn written_data_reads_back() { conformance::written_data_reads_back(&factory(FileBackend::$backend, $inline)) }
            #[test]
            fn out_of_range_lbas_are_refused() { conformance::out_of_range_lbas_are_refused(&factory(FileBackend::$backend, $inline)) }
            #[test]
            fn unknown_opcode_is_invalid_opcode() { conformance::unknown_opcode_is_invalid_opcode(&factory(FileBackend::$backend, $inline)) }
            #[test]
            fn wrong_namespace_is_invalid_namespace() { conformance::wrong_namespace_is_invalid_namespace(&factory(FileBackend::$backend, $inline)) }
            #[test]
            fn bad_prps_are_refused() { conformance::bad_prps_are_refused(&factory(FileBackend::$backend, $inline)) }
            #[test]
            fn unaligned_prp1_moves_the_right_bytes() { conformance::unaligned_prp1_moves_the_right_bytes(&factory(FileBackend::$backend, $inline)) }
            #[test]
            fn write_zeroes_and_deallocate_read_back_zeros() { conformance::write_zeroes_and_deallocate_read_back_zeros(&factory(FileBackend::$backend, $inline)) }
            #[test]
            fn concurrent_writers_keep_their_data() { conformance::concurrent_writers_keep_their_data(&factory(FileBackend::$backend, $inline)) }
        }
    )+};
}

conformance_tests!(
    Uring, false => uring,
    Psync, false => psync,
    Mmap, false => mmap,
    Psync, true => psync_inline,
    Mmap, true => mmap_inline
);

#[test]
fn the_suite_lists_every_check() {
    // The macro above names each check; keep it in step with the suite's own list.
    assert_eq!(conformance::CHECKS.len(), 10);
}
