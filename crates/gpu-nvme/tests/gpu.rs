//! GPU tests: GPU threads drive gpu-nvme's queues against a file controller. They skip with a
//! printed reason on machines without a GPU, and fail there when `GPU_TESTS=1` is set.

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use gpu_nvme::controller::{Controller, FileBackend, FileController, FileControllerConfig};
use gpu_nvme::cuda::{CompileOptions, DeviceBuffer, KernelArg, LaunchDims, gpu_or_skip};
use gpu_nvme::device::{DeviceConfig, NvmeDevice};
use gpu_nvme::kernels::{NVME_HEADERS, NVME_TEST};

/// The pattern `nvme_test.cu` writes in `round` at byte offset `byte`.
fn test_word(round: u64, byte: u64) -> u64 {
    let x = (byte + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (round << 56)
        ^ round.wrapping_mul(0xD1B5_4A32_D192_ED03);
    x ^ (x >> 31)
}

#[test]
fn gpu_block_api_writes_and_reads_back_through_bounce_and_copy_engine() {
    let Some(gpu) =
        gpu_or_skip("gpu_block_api_writes_and_reads_back_through_bounce_and_copy_engine")
    else {
        return;
    };
    let (threads, blocks_per_thread, rounds, lba) = (1024u64, 2u32, 6u32, 4096u64);
    let bytes_per_thread = u64::from(blocks_per_thread) * lba;
    let file = tempfile::NamedTempFile::new().unwrap();
    file.as_file().set_len(threads * bytes_per_thread).unwrap();
    let mut config = FileControllerConfig::new(file.path());
    config.backend = FileBackend::Mmap;
    config.workers = 4;
    config.max_io_queues = 16;
    config.gpu = Some(gpu.clone());
    let ctrl: Arc<dyn Controller> = FileController::new(config).unwrap();
    let dev = NvmeDevice::open(
        ctrl,
        DeviceConfig {
            io_queues: 1,
            ..DeviceConfig::default()
        },
    )
    .unwrap();
    let queues = dev.create_gpu_queues(&gpu, 8, 128, 8192).unwrap();
    let module = gpu
        .load_module(&NVME_TEST, NVME_HEADERS, &CompileOptions::default())
        .unwrap();
    let kernel = module.function("nvme_test_rw").unwrap();
    let len = (threads * bytes_per_thread) as usize;
    let (src, dst, direct) = (
        DeviceBuffer::new(&gpu, len).unwrap(),
        DeviceBuffer::new(&gpu, len).unwrap(),
        DeviceBuffer::new(&gpu, len).unwrap(),
    );
    dev.register_gpu_memory(&direct).unwrap();
    let fails = DeviceBuffer::new(&gpu, 24).unwrap();
    let stream = gpu.new_stream().unwrap();
    let args = [
        KernelArg::U64(queues.table_ptr()),
        KernelArg::U32(queues.len() as u32),
        KernelArg::from(&src),
        KernelArg::from(&dst),
        KernelArg::from(&direct),
        KernelArg::U32(blocks_per_thread),
        KernelArg::U32(rounds),
        KernelArg::from(&fails),
    ];
    // SAFETY: arguments match nvme_test_rw's signature; all buffers outlive the synchronize.
    unsafe {
        stream
            .launch(
                &kernel,
                LaunchDims::linear((threads / 128) as u32, 128),
                &args,
            )
            .unwrap()
    };
    stream.synchronize().unwrap();
    let mut counts = [0u8; 24];
    fails.copy_to_host(0, &mut counts).unwrap();
    let count = |i: usize| u64::from_le_bytes(counts[i * 8..i * 8 + 8].try_into().unwrap());
    assert_eq!(count(2), 0, "commands completed with an error status");
    assert_eq!(
        count(0),
        0,
        "words read through bounce slots differ from what was written"
    );
    assert_eq!(
        count(1),
        0,
        "words read by the copy engine differ from what was written"
    );
    // The file holds the last round's pattern: the writes really reached the namespace.
    let mut on_disk = vec![0u8; len];
    file.as_file().read_exact_at(&mut on_disk, 0).unwrap();
    for (i, w) in on_disk.chunks_exact(8).enumerate() {
        let want = test_word(u64::from(rounds - 1), i as u64 * 8);
        assert_eq!(
            u64::from_le_bytes(w.try_into().unwrap()),
            want,
            "file word {i}"
        );
    }
    dev.delete_gpu_queues(queues).unwrap();
}
