//! The GPU runtime of the gpu engine (ARCHITECTURE.md "Two engines, one design" and "Data
//! movement into GPU memory"): device contexts and streams, NVRTC compilation of the embedded
//! CUDA C sources with an on-disk cache, page-locked host memory mapped into the GPU, device
//! buffers, batched asynchronous copies and kernel launches.
//!
//! Everything goes through `cudarc` with dynamic loading, so the crate builds and its CPU tests
//! run on machines without CUDA. `cudarc` panics inside its lazy loader when `libcuda.so` or
//! `libnvrtc.so` is missing; this module never lets that happen: it first probes for the
//! library with `cudarc`'s own `is_culib_present` (same candidate names as the loader) and
//! returns [`CudaError::NoDriver`] or [`CudaError::NoNvrtc`]. Driver entry points newer than
//! CUDA 12.0 (batched copies, kernel parameter info) are looked up by name before their first
//! use, because a missing symbol would also panic in the loader.
//!
//! GPU tests call [`gpu_or_skip`]: without a GPU they print `skipped <name>: <reason>` and
//! return, unless `GPU_TESTS=1` is set, which turns a missing GPU into a test failure.
//! NVRTC tests do the same through [`nvrtc_or_skip`] and `NVRTC_TESTS=1`.

mod context;
mod launch;
mod memory;
mod nvrtc;

pub use context::{GPU_TESTS_ENV, Gpu, Stream, gpu_available, gpu_or_skip};
pub use launch::{Function, KernelArg, LaunchDims, Module};
pub use memory::{CopyRange, DeviceBuffer, PinnedBuffer, batch_copy_supported};
pub use nvrtc::{
    CacheOutcome, CompileOptions, Header, KernelSource, ModuleImage, NVRTC_TESTS_ENV,
    PTX_CACHE_ENV, PtxCache, compile, compile_to_ptx, nvrtc_available, nvrtc_or_skip,
    nvrtc_supported_archs, nvrtc_version, target_for_device,
};

use std::io;
use std::path::PathBuf;

use cudarc::driver::result::DriverError;
use cudarc::driver::sys::CUresult;
use cudarc::nvrtc::sys::nvrtcResult;

/// Errors of the GPU runtime.
///
/// Codes are kept as enum values and printed by name, so formatting an error never calls into
/// a CUDA library (which may be absent).
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// libcuda.so not found: no NVIDIA driver on this machine
    #[error("libcuda.so not found: no NVIDIA driver on this machine ({0})")]
    NoDriver(String),
    /// The NVIDIA driver is installed but reports no CUDA device.
    #[error("the NVIDIA driver reports no CUDA device")]
    NoDevice,
    /// libnvrtc.so not found: CUDA sources cannot be compiled on this machine.
    #[error("libnvrtc.so not found: CUDA sources cannot be compiled on this machine ({0})")]
    NoNvrtc(String),
    /// A CUDA driver call failed.
    #[error("CUDA driver call {call} failed: {code:?}")]
    Driver {
        /// The driver function that failed.
        call: &'static str,
        /// The driver's result code.
        code: CUresult,
    },
    /// NVRTC failed; `log` holds the compiler's log (the error messages for a compile error).
    #[error("NVRTC failed on {name} ({code:?}):\n{log}")]
    Nvrtc {
        /// The name of the source being compiled.
        name: String,
        /// NVRTC's result code.
        code: nvrtcResult,
        /// The program log.
        log: String,
    },
    /// The compiled-module cache directory could not be created or used.
    #[error("PTX cache directory {path}: {source}")]
    Cache {
        /// The directory or file involved.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// A caller-supplied value was rejected before reaching CUDA.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl CudaError {
    /// Adapter for `map_err` that names the failing driver call.
    pub(crate) fn driver(call: &'static str) -> impl FnOnce(DriverError) -> CudaError {
        move |error| CudaError::Driver {
            call,
            code: error.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_error_message_names_the_call_and_the_code_without_loading_cuda() {
        let error =
            CudaError::driver("cuMemAlloc_v2")(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY));
        let message = error.to_string();
        assert!(message.contains("cuMemAlloc_v2"), "{message}");
        assert!(message.contains("CUDA_ERROR_OUT_OF_MEMORY"), "{message}");
    }

    #[test]
    fn no_driver_message_says_no_nvidia_driver() {
        let message = CudaError::NoDriver("searched libcuda.so".into()).to_string();
        assert!(message.starts_with("libcuda.so not found: no NVIDIA driver on this machine"));
    }
}
