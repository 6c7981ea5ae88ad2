//! Every CUDA source the binaries embed compiles with NVRTC against the embedded headers
//! alone (what a binary carried to a GPU machine does). Needs libnvrtc, not a GPU: skips
//! without it, and fails without it when `NVRTC_TESTS=1`.

use gpu_nvme::cuda::{CompileOptions, Header, KernelSource, compile_to_ptx, nvrtc_or_skip};
use gpu_nvme::kernels::{COMMON_DEVICE_TESTS, COMMON_HEADERS, NVME_BENCH, NVME_HEADERS, NVME_TEST};

fn all_headers() -> Vec<Header<'static>> {
    NVME_HEADERS.iter().chain(COMMON_HEADERS).copied().collect()
}

fn check(source: &KernelSource) {
    let ptx = compile_to_ptx(
        source,
        &all_headers(),
        "compute_90",
        &CompileOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", source.name));
    assert!(
        ptx.contains(".entry"),
        "{}: no kernel in the PTX",
        source.name
    );
}

#[test]
fn embedded_kernels_compile_with_embedded_headers() {
    if !nvrtc_or_skip("embedded_kernels_compile_with_embedded_headers") {
        return;
    }
    for source in [&NVME_BENCH, &NVME_TEST]
        .into_iter()
        .chain(COMMON_DEVICE_TESTS)
    {
        check(source);
    }
}
