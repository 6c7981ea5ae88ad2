//! Loading compiled modules and launching their kernels (ARCHITECTURE.md "Two engines, one
//! design": device code "launched through `cudarc`").
//!
//! Kernels take device addresses as `u64` and scalars by value ([`KernelArg`]). When the driver
//! can describe a kernel's parameters (`cuFuncGetParamInfo`, CUDA 12.4+), a launch whose
//! argument count or sizes do not match is refused instead of reaching the GPU.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::result as drv;
use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;

use super::context::driver_has_symbol;
use super::{
    CompileOptions, CudaError, DeviceBuffer, Gpu, Header, KernelSource, ModuleImage, PinnedBuffer,
    PtxCache, Stream, compile, nvrtc_supported_archs, target_for_device,
};

/// Most threads a block may have on every CUDA GPU.
const MAX_THREADS_PER_BLOCK: u64 = 1024;

impl Gpu {
    /// Compiles `source` (with in-memory `headers`) for this GPU through the on-disk cache
    /// ([`PtxCache::from_env`]) and loads it. Targets `sm_XY` of this device when NVRTC
    /// supports it (see [`target_for_device`]). Without a usable cache directory it compiles
    /// every time, with a warning.
    pub fn load_module(
        &self,
        source: &KernelSource,
        headers: &[Header<'_>],
        opts: &CompileOptions,
    ) -> Result<Module, CudaError> {
        let (major, minor) = self.arch();
        let arch = target_for_device(major, minor, &nvrtc_supported_archs()?)?;
        let image = match PtxCache::from_env() {
            Ok(cache) => cache.get_or_compile(source, headers, &arch, opts)?.0,
            Err(error) => {
                tracing::warn!(%error, "compiling without the PTX cache");
                compile(source, headers, &arch, opts)?
            }
        };
        self.load_image(source.name, &image)
    }

    /// Loads an already compiled image; `name` labels it in errors.
    pub fn load_image(&self, name: &str, image: &ModuleImage) -> Result<Module, CudaError> {
        let ptx = match image {
            ModuleImage::Ptx(text) if text.contains('\0') => {
                return Err(CudaError::InvalidArgument(format!(
                    "PTX of {name} contains NUL"
                )));
            }
            ModuleImage::Ptx(text) => Ptx::from_src(text.clone()),
            ModuleImage::Cubin(bytes) => Ptx::from_binary(bytes.clone()),
        };
        let inner = self
            .context()
            .load_module(ptx)
            .map_err(CudaError::driver("cuModuleLoadData"))?;
        Ok(Module {
            inner,
            ctx: self.context().clone(),
            name: name.to_owned(),
        })
    }
}

/// A module loaded into a GPU context; unloaded when it and all its [`Function`]s are dropped.
#[derive(Clone, Debug)]
pub struct Module {
    inner: Arc<CudaModule>,
    ctx: Arc<CudaContext>,
    name: String,
}

impl Module {
    /// The kernel `name` (declare kernels `extern "C"` so their names are not mangled).
    pub fn function(&self, name: &str) -> Result<Function, CudaError> {
        if name.contains('\0') {
            return Err(CudaError::InvalidArgument(format!(
                "kernel name {name:?} contains NUL"
            )));
        }
        let inner = match self.inner.load_function(name) {
            Ok(function) => function,
            Err(error) if error.0 == CUresult::CUDA_ERROR_NOT_FOUND => {
                return Err(CudaError::InvalidArgument(format!(
                    "module {} has no kernel named {name} (is it declared extern \"C\"?)",
                    self.name
                )));
            }
            Err(error) => return Err(CudaError::driver("cuModuleGetFunction")(error)),
        };
        let param_sizes = param_sizes(&inner);
        Ok(Function {
            inner,
            ctx: self.ctx.clone(),
            name: name.to_owned(),
            param_sizes,
        })
    }
}

/// A kernel of a loaded [`Module`]. Cheap to clone; keeps its module loaded.
#[derive(Clone, Debug)]
pub struct Function {
    inner: CudaFunction,
    ctx: Arc<CudaContext>,
    name: String,
    param_sizes: Option<Vec<usize>>,
}

impl Function {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The byte size of each kernel parameter, when the driver can tell (CUDA 12.4+).
    pub fn param_sizes(&self) -> Option<&[usize]> {
        self.param_sizes.as_deref()
    }

    fn check_args(&self, args: &[KernelArg]) -> Result<(), CudaError> {
        let Some(sizes) = &self.param_sizes else {
            return Ok(());
        };
        let given: Vec<usize> = args.iter().map(KernelArg::size).collect();
        if given == *sizes {
            Ok(())
        } else {
            Err(CudaError::InvalidArgument(format!(
                "kernel {} takes parameters of {sizes:?} bytes, got arguments of {given:?} bytes",
                self.name
            )))
        }
    }
}

/// The parameter sizes of `function`, or `None` when the driver cannot report them.
fn param_sizes(function: &CudaFunction) -> Option<Vec<usize>> {
    if !driver_has_symbol("cuFuncGetParamInfo") {
        return None;
    }
    let mut sizes = Vec::new();
    // A kernel's parameters fit in 32 KiB, so this bound is never reached by a real kernel.
    for index in 0..32_768usize {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: the function handle is alive (held by `function`) and both out-pointers are
        // valid; an index past the last parameter returns CUDA_ERROR_INVALID_VALUE.
        let code = unsafe {
            sys::cuFuncGetParamInfo(function.cu_function(), index, &mut offset, &mut size)
        };
        match code {
            CUresult::CUDA_SUCCESS => sizes.push(size),
            CUresult::CUDA_ERROR_INVALID_VALUE => return Some(sizes),
            _ => return None,
        }
    }
    None
}

/// One kernel argument, passed by value: device addresses as [`KernelArg::U64`] (what
/// `From<&DeviceBuffer>` and `From<&PinnedBuffer>` produce), scalars as their own type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    /// `unsigned int`.
    U32(u32),
    /// `int`.
    I32(i32),
    /// `unsigned long long`, or any pointer.
    U64(u64),
    /// `long long`.
    I64(i64),
    /// `float`.
    F32(f32),
    /// `double`.
    F64(f64),
}

impl KernelArg {
    /// Size of the argument in bytes, as the kernel's parameter must be.
    pub fn size(&self) -> usize {
        match self {
            KernelArg::U32(_) | KernelArg::I32(_) | KernelArg::F32(_) => 4,
            KernelArg::U64(_) | KernelArg::I64(_) | KernelArg::F64(_) => 8,
        }
    }

    /// Pointer to the value, as `cuLaunchKernel` wants it; valid while `self` is.
    fn param_ptr(&self) -> *mut c_void {
        let ptr: *const c_void = match self {
            KernelArg::U32(value) => (value as *const u32).cast(),
            KernelArg::I32(value) => (value as *const i32).cast(),
            KernelArg::U64(value) => (value as *const u64).cast(),
            KernelArg::I64(value) => (value as *const i64).cast(),
            KernelArg::F32(value) => (value as *const f32).cast(),
            KernelArg::F64(value) => (value as *const f64).cast(),
        };
        ptr.cast_mut()
    }
}

impl From<u32> for KernelArg {
    fn from(value: u32) -> Self {
        KernelArg::U32(value)
    }
}

impl From<i32> for KernelArg {
    fn from(value: i32) -> Self {
        KernelArg::I32(value)
    }
}

impl From<u64> for KernelArg {
    fn from(value: u64) -> Self {
        KernelArg::U64(value)
    }
}

impl From<i64> for KernelArg {
    fn from(value: i64) -> Self {
        KernelArg::I64(value)
    }
}

impl From<f32> for KernelArg {
    fn from(value: f32) -> Self {
        KernelArg::F32(value)
    }
}

impl From<f64> for KernelArg {
    fn from(value: f64) -> Self {
        KernelArg::F64(value)
    }
}

impl From<&DeviceBuffer> for KernelArg {
    fn from(buffer: &DeviceBuffer) -> Self {
        KernelArg::U64(buffer.device_ptr())
    }
}

impl From<&PinnedBuffer> for KernelArg {
    fn from(buffer: &PinnedBuffer) -> Self {
        KernelArg::U64(buffer.device_ptr())
    }
}

/// Grid and block shape of a launch, plus dynamic shared memory per block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchDims {
    /// Blocks in x, y, z.
    pub grid: (u32, u32, u32),
    /// Threads per block in x, y, z.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block in bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchDims {
    /// A one-dimensional launch of `blocks` blocks of `threads_per_block` threads.
    pub fn linear(blocks: u32, threads_per_block: u32) -> LaunchDims {
        LaunchDims {
            grid: (blocks, 1, 1),
            block: (threads_per_block, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// The one-dimensional launch with enough blocks of `threads_per_block` threads to give
    /// each of `elements` elements a thread.
    pub fn covering(elements: u64, threads_per_block: u32) -> Result<LaunchDims, CudaError> {
        if elements == 0 || threads_per_block == 0 {
            return Err(CudaError::InvalidArgument(format!(
                "cannot cover {elements} elements with blocks of {threads_per_block} threads"
            )));
        }
        let blocks =
            u32::try_from(elements.div_ceil(u64::from(threads_per_block))).map_err(|_| {
                CudaError::InvalidArgument(format!("{elements} elements need too many blocks"))
            })?;
        Ok(LaunchDims::linear(blocks, threads_per_block))
    }

    /// The same shape with `bytes` of dynamic shared memory per block.
    pub fn with_shared_mem(self, bytes: u32) -> LaunchDims {
        LaunchDims {
            shared_mem_bytes: bytes,
            ..self
        }
    }

    fn validate(&self) -> Result<(), CudaError> {
        let (gx, gy, gz) = self.grid;
        let (bx, by, bz) = self.block;
        let threads = u64::from(bx) * u64::from(by) * u64::from(bz);
        if [gx, gy, gz, bx, by, bz].contains(&0) || threads > MAX_THREADS_PER_BLOCK {
            return Err(CudaError::InvalidArgument(format!(
                "launch shape grid {:?} block {:?}: every dimension must be at least 1 and a \
                 block at most {MAX_THREADS_PER_BLOCK} threads",
                self.grid, self.block
            )));
        }
        Ok(())
    }
}

impl Stream {
    /// Queues `function` on this stream with `args`. Returns once queued; errors the kernel
    /// hits surface at the next synchronization.
    ///
    /// # Safety
    /// The kernel runs with the given arguments unchecked beyond their count and sizes (and
    /// those only when the driver reports parameter info): every address argument must point
    /// to memory that is valid, of the type and size the kernel accesses, and not accessed
    /// elsewhere in conflicting ways, until the stream has passed the kernel.
    pub unsafe fn launch(
        &self,
        function: &Function,
        dims: LaunchDims,
        args: &[KernelArg],
    ) -> Result<(), CudaError> {
        dims.validate()?;
        function.check_args(args)?;
        if **self.cudarc().context() != *function.ctx {
            return Err(CudaError::InvalidArgument(format!(
                "kernel {} belongs to another GPU context than the stream",
                function.name
            )));
        }
        let mut params: Vec<*mut c_void> = args.iter().map(KernelArg::param_ptr).collect();
        self.bind()?;
        // SAFETY: `params` points to `args`, alive for the call (the driver copies the values
        // at launch); the function and stream handles are alive; the caller guarantees that the
        // arguments suit the kernel.
        let launched = unsafe {
            drv::launch_kernel(
                function.inner.cu_function(),
                dims.grid,
                dims.block,
                dims.shared_mem_bytes,
                self.raw(),
                &mut params,
            )
        };
        launched.map_err(CudaError::driver("cuLaunchKernel"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::gpu_or_skip;
    use std::time::Duration;

    const STEP_HEADER: Header<'static> = (
        "test/step.cuh",
        "#pragma once\n\
         __device__ __forceinline__ unsigned char step(unsigned char v) { return v + 1; }\n",
    );

    const KERNELS: KernelSource = KernelSource {
        name: "launch_test.cu",
        source: r#"#include "test/step.cuh"
extern "C" __global__ void increment_bytes(unsigned char *bytes, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) bytes[i] = step(bytes[i]);
}
extern "C" __global__ void spin(unsigned long long cycles, unsigned long long *out) {
    unsigned long long start = clock64();
    while (clock64() - start < cycles) {}
    if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = cycles;
}
"#,
    };

    #[test]
    fn kernel_args_have_the_sizes_of_their_c_types() {
        assert_eq!(KernelArg::from(1u32).size(), 4);
        assert_eq!(KernelArg::from(-1i32).size(), 4);
        assert_eq!(KernelArg::from(1.0f32).size(), 4);
        assert_eq!(KernelArg::from(1u64).size(), 8);
        assert_eq!(KernelArg::from(-1i64).size(), 8);
        assert_eq!(KernelArg::from(1.0f64).size(), 8);
    }

    #[test]
    fn kernel_arg_pointer_reads_back_the_value() {
        let arg = KernelArg::U64(0xdead_beef_0123);
        // SAFETY: `param_ptr` points to the u64 inside `arg`, alive for this read.
        let value = unsafe { arg.param_ptr().cast::<u64>().read_unaligned() };
        assert_eq!(value, 0xdead_beef_0123);
    }

    #[test]
    fn launch_dims_reject_empty_or_oversized_blocks() {
        assert!(LaunchDims::linear(1, 1024).validate().is_ok());
        assert!(LaunchDims::linear(0, 32).validate().is_err());
        assert!(LaunchDims::linear(1, 1025).validate().is_err());
        let cube = LaunchDims {
            grid: (1, 1, 1),
            block: (16, 16, 8),
            shared_mem_bytes: 0,
        };
        assert!(cube.validate().is_err(), "2048 threads");
    }

    #[test]
    fn covering_gives_every_element_a_thread() {
        assert_eq!(
            LaunchDims::covering(1, 256).unwrap(),
            LaunchDims::linear(1, 256)
        );
        assert_eq!(
            LaunchDims::covering(257, 256).unwrap(),
            LaunchDims::linear(2, 256)
        );
        assert_eq!(
            LaunchDims::covering(512, 256)
                .unwrap()
                .with_shared_mem(64)
                .shared_mem_bytes,
            64
        );
        assert!(LaunchDims::covering(0, 256).is_err());
        assert!(LaunchDims::covering(u64::MAX, 1).is_err());
    }

    #[test]
    fn kernel_increments_pinned_bytes_through_the_device_pointer() {
        let Some(gpu) = gpu_or_skip("kernel_increments_pinned_bytes_through_the_device_pointer")
        else {
            return;
        };
        let module = gpu
            .load_module(&KERNELS, &[STEP_HEADER], &CompileOptions::default())
            .unwrap();
        let increment = module.function("increment_bytes").unwrap();
        assert_eq!(increment.param_sizes(), Some(&[8usize, 8][..]));
        let len = 100_003usize;
        let mut pinned = PinnedBuffer::new(&gpu, len).unwrap();
        let pattern: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        pinned.copy_from(0, &pattern).unwrap();
        let dims = LaunchDims::covering(len as u64, 256).unwrap();
        let args = [KernelArg::from(&pinned), KernelArg::U64(len as u64)];
        // SAFETY: the kernel writes `len` bytes of the pinned buffer, which outlives the sync.
        unsafe { gpu.stream().launch(&increment, dims, &args).unwrap() };
        gpu.stream().synchronize().unwrap();
        let mut after = vec![0u8; len];
        pinned.copy_to(0, &mut after).unwrap();
        for (i, (&before, &now)) in pattern.iter().zip(&after).enumerate() {
            assert_eq!(now, before.wrapping_add(1), "byte {i}");
        }
    }

    #[test]
    fn kernel_increments_device_bytes_and_timing_covers_it() {
        let Some(gpu) = gpu_or_skip("kernel_increments_device_bytes_and_timing_covers_it") else {
            return;
        };
        let module = gpu
            .load_module(&KERNELS, &[STEP_HEADER], &CompileOptions::default())
            .unwrap();
        let increment = module.function("increment_bytes").unwrap();
        let spin = module.function("spin").unwrap();
        let mut device = DeviceBuffer::new(&gpu, 4096).unwrap();
        device.fill(41).unwrap();
        let args = [KernelArg::from(&device), KernelArg::U64(4096)];
        // SAFETY: the kernel writes the 4096 bytes of `device`, which outlives the sync.
        unsafe {
            gpu.stream()
                .launch(&increment, LaunchDims::linear(16, 256), &args)
                .unwrap()
        };
        let mut back = vec![0u8; 4096];
        device.copy_to_host(0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 42));

        let out = DeviceBuffer::new(&gpu, 8).unwrap();
        let elapsed = gpu
            .time(|stream| {
                let args = [KernelArg::U64(20_000_000), KernelArg::from(&out)];
                // SAFETY: the kernel writes 8 bytes of `out`, which outlives the timing.
                unsafe { stream.launch(&spin, LaunchDims::linear(1, 32), &args) }
            })
            .unwrap();
        assert!(
            elapsed > Duration::from_micros(100),
            "{elapsed:?} for 20M cycles"
        );
        assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    }

    #[test]
    fn launch_refuses_arguments_that_do_not_match_the_kernel() {
        let Some(gpu) = gpu_or_skip("launch_refuses_arguments_that_do_not_match_the_kernel") else {
            return;
        };
        let module = gpu
            .load_module(&KERNELS, &[STEP_HEADER], &CompileOptions::default())
            .unwrap();
        let increment = module.function("increment_bytes").unwrap();
        if increment.param_sizes().is_none() {
            eprintln!("skipped argument check: driver lacks cuFuncGetParamInfo");
            return;
        }
        let dims = LaunchDims::linear(1, 32);
        for args in [
            &[KernelArg::U64(0)][..],
            &[KernelArg::U64(0), KernelArg::U32(1)],
        ] {
            // SAFETY: refused before launch, so the null pointer is never used.
            let refused = unsafe { gpu.stream().launch(&increment, dims, args) };
            assert!(
                matches!(refused, Err(CudaError::InvalidArgument(_))),
                "{refused:?}"
            );
        }
        assert!(matches!(
            module.function("no_such_kernel"),
            Err(CudaError::InvalidArgument(_))
        ));
    }
}
