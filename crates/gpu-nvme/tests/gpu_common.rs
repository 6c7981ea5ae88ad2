//! `common`'s CUDA headers (range lock, sharded bitmap, size-class pool) on a real GPU: each
//! `*_test.cu` follows the launch contract at its top. Skips without a GPU (fails with
//! `GPU_TESTS=1`).

use gpu_nvme::cuda::{
    CompileOptions, DeviceBuffer, Gpu, KernelArg, KernelSource, LaunchDims, Module, Stream,
    gpu_or_skip,
};
use gpu_nvme::kernels::{COMMON_DEVICE_TESTS, COMMON_HEADERS};

fn module(gpu: &Gpu, name: &str) -> Module {
    let source: &KernelSource = COMMON_DEVICE_TESTS
        .iter()
        .find(|s| s.name == name)
        .expect("embedded test source");
    gpu.load_module(source, COMMON_HEADERS, &CompileOptions::default())
        .unwrap()
}

fn launch(stream: &Stream, m: &Module, name: &str, dims: LaunchDims, args: &[KernelArg]) {
    let f = m.function(name).unwrap();
    // SAFETY: the arguments follow the kernel's documented signature, and every buffer lives
    // until the caller synchronizes the stream.
    unsafe { stream.launch(&f, dims, args).unwrap() };
}

fn words(buf: &DeviceBuffer, n: usize) -> Vec<u64> {
    let mut bytes = vec![0u8; n * 8];
    buf.copy_to_host(0, &mut bytes).unwrap();
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn gpu_range_lock_keeps_overlapping_ranges_exclusive_and_in_ticket_order() {
    let Some(gpu) =
        gpu_or_skip("gpu_range_lock_keeps_overlapping_ranges_exclusive_and_in_ticket_order")
    else {
        return;
    };
    let m = module(&gpu, "range_lock_test.cu");
    let stream = gpu.new_stream().unwrap();
    let sms = gpu.sm_count();
    let (units, iterations) = (4096u32, 64u32);
    type Stress<'a> = (&'a str, u64);
    let runs: [Stress<'_>; 4] = [
        ("range_lock_test_semantics", 64),
        ("range_lock_test_block_stress", 256),
        ("range_lock_test_warp_stress", 1024),
        ("range_lock_test_try_stress", 64),
    ];
    for (kernel, capacity) in runs {
        let header = DeviceBuffer::new(&gpu, 128).unwrap();
        let slots = DeviceBuffer::new(&gpu, 32 * capacity as usize).unwrap();
        let counts = DeviceBuffer::new(&gpu, 16).unwrap();
        let owners = DeviceBuffer::new(&gpu, 4 * units as usize).unwrap();
        let last = DeviceBuffer::new(&gpu, 8 * units as usize).unwrap();
        launch(
            &stream,
            &m,
            "range_lock_test_init",
            LaunchDims::linear(4, 256),
            &[(&header).into(), (&slots).into(), KernelArg::U64(capacity)],
        );
        if kernel == "range_lock_test_semantics" {
            launch(
                &stream,
                &m,
                kernel,
                LaunchDims::linear(1, 64),
                &[(&header).into(), (&slots).into(), (&counts).into()],
            );
        } else {
            let args = [
                (&header).into(),
                (&slots).into(),
                (&owners).into(),
                (&last).into(),
                KernelArg::U32(units),
                KernelArg::U32(iterations),
                KernelArg::U64(0x5eed),
                (&counts).into(),
            ];
            launch(&stream, &m, kernel, LaunchDims::linear(4 * sms, 128), &args);
        }
        stream.synchronize().unwrap();
        let c = words(&counts, 2);
        println!("{kernel}: {} checks passed, {} failed", c[0], c[1]);
        assert_eq!(c[1], 0, "{kernel}: failed checks");
        assert!(c[0] > 0, "{kernel}: nothing was checked");
    }
}

#[test]
fn gpu_sharded_bitmap_never_hands_a_block_out_twice() {
    let Some(gpu) = gpu_or_skip("gpu_sharded_bitmap_never_hands_a_block_out_twice") else {
        return;
    };
    let m = module(&gpu, "sharded_bitmap_test.cu");
    let stream = gpu.new_stream().unwrap();
    let results = DeviceBuffer::new(&gpu, 6 * 4).unwrap();
    launch(
        &stream,
        &m,
        "sharded_test_init",
        LaunchDims::linear(1, 1024),
        &[(&results).into()],
    );
    launch(
        &stream,
        &m,
        "sharded_test_alloc",
        LaunchDims::linear(528, 256),
        &[(&results).into()],
    );
    launch(
        &stream,
        &m,
        "sharded_test_verify",
        LaunchDims::linear(4096, 256),
        &[(&results).into()],
    );
    stream.synchronize().unwrap();
    let mut bytes = [0u8; 24];
    results.copy_to_host(0, &mut bytes).unwrap();
    let r: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    println!(
        "sharded bitmap: {} checks passed, {} failed (duplicates {}, alloc {}, free {}, mismatches {})",
        r[1], r[0], r[2], r[3], r[4], r[5]
    );
    assert_eq!(r[0], 0, "failed checks");
    assert!(r[1] >= 528 * 4, "too few checks passed: {}", r[1]);
}

#[test]
fn gpu_size_class_pool_never_overlaps_and_merges_back_whole() {
    let Some(gpu) = gpu_or_skip("gpu_size_class_pool_never_overlaps_and_merges_back_whole") else {
        return;
    };
    let m = module(&gpu, "size_class_pool_test.cu");
    let stream = gpu.new_stream().unwrap();
    let pool = DeviceBuffer::new(&gpu, 328).unwrap();
    let words_buf = DeviceBuffer::new(&gpu, 207 * 8).unwrap();
    let owners = DeviceBuffer::new(&gpu, 4096 * 4).unwrap();
    let counters = DeviceBuffer::new(&gpu, 8 * 8).unwrap();
    let p = || -> [KernelArg; 2] { [(&pool).into(), (&words_buf).into()] };
    launch(
        &stream,
        &m,
        "size_class_pool_test_init",
        LaunchDims::linear(1, 1),
        &[
            (&pool).into(),
            (&words_buf).into(),
            KernelArg::U64(207),
            (&owners).into(),
            (&counters).into(),
        ],
    );
    let [a, b] = p();
    launch(
        &stream,
        &m,
        "size_class_pool_test_sequential",
        LaunchDims::linear(1, 1),
        &[a, b, (&counters).into()],
    );
    let [a, b] = p();
    launch(
        &stream,
        &m,
        "size_class_pool_test_stress",
        LaunchDims::linear(gpu.sm_count(), 256),
        &[
            a,
            b,
            (&owners).into(),
            (&counters).into(),
            KernelArg::U32(32),
        ],
    );
    let [a, b] = p();
    launch(
        &stream,
        &m,
        "size_class_pool_test_verify",
        LaunchDims::linear(1, 1),
        &[a, b, (&counters).into()],
    );
    stream.synchronize().unwrap();
    let c = words(&counters, 8);
    println!(
        "size-class pool: overlaps {}, misaligned {}, free errors {}, sequential {}, not whole {}, layout {}, exhausted {}, allocated {}",
        c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
    );
    assert!(c[..6].iter().all(|&x| x == 0), "failed checks: {c:?}");
    assert!(c[7] > 0, "nothing was allocated");
}
