//! The controller conformance suite, run against `FileController` with each backend.

use std::sync::Arc;

use gpu_nvme::conformance;
use gpu_nvme::controller::{Controller, FileBackend, FileController, FileControllerConfig};

/// A fresh zeroed namespace file of `blocks` blocks; the file lives as long as the test run.
fn factory(backend: FileBackend) -> impl Fn(u32, u64) -> Arc<dyn Controller> {
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
        let ctrl = FileController::new(config).expect("controller");
        // The controller holds the file open; the name can go now.
        std::fs::remove_file(&path).expect("unlink");
        ctrl
    }
}

macro_rules! conformance_tests {
    ($($backend:ident => $module:ident),+) => {$(
        mod $module {
            use super::*;
            #[test]
            fn identify_reports_the_namespace() { conformance::identify_reports_the_namespace(&factory(FileBackend::$backend)) }
            #[test]
            fn fresh_namespace_reads_zeros() { conformance::fresh_namespace_reads_zeros(&factory(FileBackend::$backend)) }
            #[test]
            fn written_data_reads_back() { conformance::written_data_reads_back(&factory(FileBackend::$backend)) }
            #[test]
            fn out_of_range_lbas_are_refused() { conformance::out_of_range_lbas_are_refused(&factory(FileBackend::$backend)) }
            #[test]
            fn unknown_opcode_is_invalid_opcode() { conformance::unknown_opcode_is_invalid_opcode(&factory(FileBackend::$backend)) }
            #[test]
            fn wrong_namespace_is_invalid_namespace() { conformance::wrong_namespace_is_invalid_namespace(&factory(FileBackend::$backend)) }
            #[test]
            fn bad_prps_are_refused() { conformance::bad_prps_are_refused(&factory(FileBackend::$backend)) }
            #[test]
            fn unaligned_prp1_moves_the_right_bytes() { conformance::unaligned_prp1_moves_the_right_bytes(&factory(FileBackend::$backend)) }
            #[test]
            fn write_zeroes_and_deallocate_read_back_zeros() { conformance::write_zeroes_and_deallocate_read_back_zeros(&factory(FileBackend::$backend)) }
            #[test]
            fn concurrent_writers_keep_their_data() { conformance::concurrent_writers_keep_their_data(&factory(FileBackend::$backend)) }
        }
    )+};
}

conformance_tests!(Uring => uring, Psync => psync, Mmap => mmap);

#[test]
fn the_suite_lists_every_check() {
    // The macro above names each check; keep it in step with the suite's own list.
    assert_eq!(conformance::CHECKS.len(), 10);
}
