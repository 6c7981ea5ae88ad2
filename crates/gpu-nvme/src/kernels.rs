//! The CUDA sources embedded in the binaries, so that a binary carried to a GPU machine needs
//! no source tree: gpu-nvme's device library and kernels, and `common`'s device headers.

use crate::cuda::{Header, KernelSource};

/// gpu-nvme's device headers, by the name `#include` uses.
pub const NVME_HEADERS: &[Header<'static>] = &[
    ("nvme_spec.cuh", include_str!("../cuda/nvme_spec.cuh")),
    ("nvme.cuh", include_str!("../cuda/nvme.cuh")),
];

/// `common`'s device headers (range lock, bitmap allocators), by the name `#include` uses.
pub const COMMON_HEADERS: &[Header<'static>] = &[
    (
        "range_lock.cuh",
        include_str!("../../common/cuda/range_lock.cuh"),
    ),
    (
        "sharded_bitmap.cuh",
        include_str!("../../common/cuda/sharded_bitmap.cuh"),
    ),
    (
        "size_class_pool.cuh",
        include_str!("../../common/cuda/size_class_pool.cuh"),
    ),
];

/// The GPU initiator of `nvme-bench`.
pub const NVME_BENCH: KernelSource = KernelSource {
    name: "nvme_bench.cu",
    source: include_str!("../cuda/nvme_bench.cu"),
};

/// Device tests of the block API (`nvme_read`, `nvme_write`, `nvme_read_direct`).
pub const NVME_TEST: KernelSource = KernelSource {
    name: "nvme_test.cu",
    source: include_str!("../cuda/nvme_test.cu"),
};

/// `common`'s device tests: (source, kernel names).
pub const COMMON_DEVICE_TESTS: &[KernelSource] = &[
    KernelSource {
        name: "range_lock_test.cu",
        source: include_str!("../../common/cuda/range_lock_test.cu"),
    },
    KernelSource {
        name: "sharded_bitmap_test.cu",
        source: include_str!("../../common/cuda/sharded_bitmap_test.cu"),
    },
    KernelSource {
        name: "size_class_pool_test.cu",
        source: include_str!("../../common/cuda/size_class_pool_test.cu"),
    },
];
