//! Device handle, streams, timing, and the skip-or-fail decision of GPU tests
//! (ARCHITECTURE.md "Two engines, one design": the gpu engine's entry point).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use cudarc::driver::result as drv;
use cudarc::driver::sys::{self, CUdevice_attribute, CUevent_flags, CUresult};
use cudarc::driver::{CudaContext, CudaStream};

use super::CudaError;

/// Environment variable that turns a missing GPU into a test failure when set to `1`.
pub const GPU_TESTS_ENV: &str = "GPU_TESTS";

/// Whether `libcuda.so` can be loaded; probed once per process.
fn driver_library_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        // SAFETY: loading libcuda runs only its own initialisers, which are made to run under
        // dlopen; the probe tries the same names as cudarc's lazy loader, so `true` here means
        // the loader will not panic.
        unsafe { sys::is_culib_present() }
    })
}

/// Fails with [`CudaError::NoDriver`] unless the driver library can be loaded.
pub(crate) fn require_driver() -> Result<(), CudaError> {
    if driver_library_present() {
        Ok(())
    } else {
        Err(CudaError::NoDriver(
            "searched libcuda.so and libcuda.so.1 on LD_LIBRARY_PATH and the system library path"
                .into(),
        ))
    }
}

/// Whether the loaded driver exports `symbol` (entry points newer than CUDA 12.0 may be
/// missing from an older driver, and calling them through cudarc would panic).
pub(crate) fn driver_has_symbol(symbol: &str) -> bool {
    if !driver_library_present() {
        return false;
    }
    // SAFETY: the library is present (checked above), so `culib` loads it instead of
    // panicking; we only look the symbol up and never call it through this handle.
    let library = unsafe { sys::culib() };
    // SAFETY: the symbol is looked up as an opaque function pointer and dropped unused.
    unsafe { library.get::<unsafe extern "C" fn()>(symbol.as_bytes()) }.is_ok()
}

/// What a device reports about itself, read once at [`Gpu::open`].
#[derive(Debug)]
struct DeviceInfo {
    ordinal: usize,
    name: String,
    arch: (u32, u32),
    sm_count: u32,
    total_memory: usize,
}

/// An open GPU: its context, a default stream and its properties. Cheap to clone; clones
/// share the context, which lives until the last clone (and every buffer, stream and module
/// made from it) is dropped.
#[derive(Clone, Debug)]
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Stream,
    info: Arc<DeviceInfo>,
}

impl Gpu {
    /// Opens device `ordinal` (its primary context) and creates its default stream.
    ///
    /// Errors: [`CudaError::NoDriver`] without `libcuda.so`, [`CudaError::NoDevice`] when the
    /// driver sees no device, [`CudaError::InvalidArgument`] for an ordinal past the last
    /// device, [`CudaError::Driver`] for anything else the driver refuses.
    pub fn open(ordinal: usize) -> Result<Gpu, CudaError> {
        require_driver()?;
        match drv::init() {
            Err(error) if error.0 == CUresult::CUDA_ERROR_NO_DEVICE => {
                return Err(CudaError::NoDevice);
            }
            other => other.map_err(CudaError::driver("cuInit"))?,
        }
        let count = drv::device::get_count().map_err(CudaError::driver("cuDeviceGetCount"))?;
        let count = usize::try_from(count).unwrap_or(0);
        if count == 0 {
            return Err(CudaError::NoDevice);
        }
        if ordinal >= count {
            return Err(CudaError::InvalidArgument(format!(
                "GPU ordinal {ordinal} out of range: the driver reports {count} device(s)"
            )));
        }
        let ctx =
            CudaContext::new(ordinal).map_err(CudaError::driver("cuDevicePrimaryCtxRetain"))?;
        let name = ctx.name().map_err(CudaError::driver("cuDeviceGetName"))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(CudaError::driver("cuDeviceGetAttribute"))?;
        let sm_count = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(CudaError::driver("cuDeviceGetAttribute"))?;
        let total_memory = ctx
            .total_mem()
            .map_err(CudaError::driver("cuDeviceTotalMem"))?;
        let stream = Stream::new(&ctx)?;
        let info = DeviceInfo {
            ordinal,
            name,
            arch: (to_u32(major), to_u32(minor)),
            sm_count: to_u32(sm_count),
            total_memory,
        };
        tracing::debug!(?info, "opened GPU");
        Ok(Gpu {
            ctx,
            stream,
            info: Arc::new(info),
        })
    }

    /// The device ordinal this handle was opened with.
    pub fn ordinal(&self) -> usize {
        self.info.ordinal
    }

    /// The device's marketing name, e.g. "NVIDIA H100 80GB HBM3".
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// Compute capability as (major, minor), e.g. (9, 0) for Hopper.
    pub fn arch(&self) -> (u32, u32) {
        self.info.arch
    }

    /// Number of streaming multiprocessors.
    pub fn sm_count(&self) -> u32 {
        self.info.sm_count
    }

    /// Device memory in bytes.
    pub fn total_memory(&self) -> usize {
        self.info.total_memory
    }

    /// The default stream: what [`crate::cuda::DeviceBuffer`] copies and [`Gpu::time`] use.
    /// Kernels that run for the lifetime of a queue (persistent kernels) belong on a stream of
    /// their own from [`Gpu::new_stream`], or they would block those copies.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Creates a new non-blocking stream; each worker thread should use its own.
    pub fn new_stream(&self) -> Result<Stream, CudaError> {
        Stream::new(&self.ctx)
    }

    /// Waits for all work on every stream of this context. Never returns while a persistent
    /// kernel is running; wait on the relevant [`Stream`] instead.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.ctx
            .synchronize()
            .map_err(CudaError::driver("cuCtxSynchronize"))
    }

    /// Times `work` on the default stream with CUDA events (see [`Stream::time`]).
    pub fn time<F>(&self, work: F) -> Result<Duration, CudaError>
    where
        F: FnOnce(&Stream) -> Result<(), CudaError>,
    {
        self.stream.time(work)
    }

    /// The underlying cudarc context.
    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
}

/// Driver attributes are non-negative `int`s.
fn to_u32(value: i32) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

/// A CUDA stream (non-blocking with respect to the legacy default stream). Cheap to clone.
/// Work queued on one stream runs in order; different streams run concurrently.
#[derive(Clone, Debug)]
pub struct Stream {
    inner: Arc<CudaStream>,
}

impl Stream {
    fn new(ctx: &Arc<CudaContext>) -> Result<Stream, CudaError> {
        let inner = ctx
            .new_stream()
            .map_err(CudaError::driver("cuStreamCreate"))?;
        Ok(Stream { inner })
    }

    /// Blocks until all work queued on this stream has finished.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.inner
            .synchronize()
            .map_err(CudaError::driver("cuStreamSynchronize"))
    }

    /// Whether all work queued on this stream has finished, without blocking.
    pub fn is_idle(&self) -> Result<bool, CudaError> {
        self.bind()?;
        // SAFETY: the stream handle is alive (owned by `self.inner`) and its context is current.
        match unsafe { sys::cuStreamQuery(self.raw()) } {
            CUresult::CUDA_SUCCESS => Ok(true),
            CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            code => Err(CudaError::Driver {
                call: "cuStreamQuery",
                code,
            }),
        }
    }

    /// Runs `work`, which must queue its GPU work on the stream it is given, and returns the
    /// GPU time between two events recorded around it (resolution about 0.5 us).
    pub fn time<F>(&self, work: F) -> Result<Duration, CudaError>
    where
        F: FnOnce(&Stream) -> Result<(), CudaError>,
    {
        let ctx = self.inner.context();
        let timed = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let start = ctx
            .new_event(timed)
            .map_err(CudaError::driver("cuEventCreate"))?;
        let end = ctx
            .new_event(timed)
            .map_err(CudaError::driver("cuEventCreate"))?;
        start
            .record(&self.inner)
            .map_err(CudaError::driver("cuEventRecord"))?;
        work(self)?;
        end.record(&self.inner)
            .map_err(CudaError::driver("cuEventRecord"))?;
        end.synchronize()
            .map_err(CudaError::driver("cuEventSynchronize"))?;
        let millis = start
            .elapsed_ms(&end)
            .map_err(CudaError::driver("cuEventElapsedTime"))?;
        Ok(Duration::from_secs_f64(f64::from(millis.max(0.0)) / 1e3))
    }

    /// Makes the stream's context current on the calling thread (needed before raw calls).
    pub(crate) fn bind(&self) -> Result<(), CudaError> {
        self.inner
            .context()
            .bind_to_thread()
            .map_err(CudaError::driver("cuCtxSetCurrent"))
    }

    /// The cudarc stream.
    pub(crate) fn cudarc(&self) -> &Arc<CudaStream> {
        &self.inner
    }

    /// The raw stream handle, valid while `self` lives.
    pub(crate) fn raw(&self) -> sys::CUstream {
        self.inner.cu_stream()
    }
}

/// Whether GPU 0 can be opened; the error says why not (for tests deciding skip vs fail).
pub fn gpu_available() -> Result<(), CudaError> {
    Gpu::open(0).map(drop)
}

/// Opens GPU 0 for a GPU test, or returns `None` after printing `skipped <test_name>: <reason>`.
///
/// # Panics
/// When [`GPU_TESTS_ENV`] is `1` and no GPU can be opened: on the GPU machine a missing GPU
/// is a failure, not a skip.
pub fn gpu_or_skip(test_name: &str) -> Option<Gpu> {
    let required = std::env::var(GPU_TESTS_ENV).is_ok_and(|value| value == "1");
    skip_or_fail(test_name, Gpu::open(0), required, GPU_TESTS_ENV)
}

/// The skip-or-fail decision shared by GPU and NVRTC tests: `Some` on success, `None` (after
/// printing why) on failure, and a panic on failure when `required`.
pub(crate) fn skip_or_fail<T>(
    test_name: &str,
    opened: Result<T, CudaError>,
    required: bool,
    env_var: &str,
) -> Option<T> {
    match opened {
        Ok(value) => Some(value),
        Err(error) if required => panic!("{test_name}: {env_var}=1 but {error}"),
        Err(error) => {
            eprintln!("skipped {test_name}: {error}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_without_a_usable_gpu_returns_an_error_instead_of_panicking() {
        match Gpu::open(0) {
            Ok(gpu) => assert!(gpu.sm_count() > 0, "an opened GPU reports its SMs"),
            Err(CudaError::NoDriver(_) | CudaError::NoDevice | CudaError::Driver { .. }) => {}
            Err(other) => panic!("unexpected error kind: {other}"),
        }
    }

    #[test]
    fn open_agrees_with_gpu_available() {
        assert_eq!(Gpu::open(0).is_ok(), gpu_available().is_ok());
    }

    #[test]
    fn missing_driver_library_is_reported_as_no_driver() {
        if driver_library_present() {
            eprintln!("skipped missing_driver_library_is_reported_as_no_driver: libcuda present");
            return;
        }
        assert!(matches!(Gpu::open(0), Err(CudaError::NoDriver(_))));
        assert!(
            !driver_has_symbol("cuInit"),
            "no symbol lookup without the library"
        );
    }

    #[test]
    fn skip_or_fail_returns_none_when_not_required() {
        let opened: Result<u8, CudaError> = Err(CudaError::NoDevice);
        assert_eq!(skip_or_fail("t", opened, false, GPU_TESTS_ENV), None);
    }

    #[test]
    fn skip_or_fail_passes_an_opened_value_through_even_when_required() {
        assert_eq!(
            skip_or_fail("t", Ok::<u8, CudaError>(7), true, GPU_TESTS_ENV),
            Some(7)
        );
    }

    #[test]
    #[should_panic(expected = "GPU_TESTS=1 but the NVIDIA driver reports no CUDA device")]
    fn skip_or_fail_panics_when_required_and_unavailable() {
        let opened: Result<u8, CudaError> = Err(CudaError::NoDevice);
        skip_or_fail("t", opened, true, GPU_TESTS_ENV);
    }

    #[test]
    fn gpu_or_skip_follows_the_gpu_tests_variable() {
        let required = std::env::var(GPU_TESTS_ENV).is_ok_and(|value| value == "1");
        let available = gpu_available().is_ok();
        let outcome = std::panic::catch_unwind(|| gpu_or_skip("probe").is_some());
        match outcome {
            Ok(got_gpu) => assert_eq!(got_gpu, available),
            Err(_) => assert!(
                required && !available,
                "panics only when required and absent"
            ),
        }
    }

    #[test]
    fn opened_gpu_reports_its_properties_and_runs_streams() {
        let Some(gpu) = gpu_or_skip("opened_gpu_reports_its_properties_and_runs_streams") else {
            return;
        };
        assert!(!gpu.name().is_empty());
        assert!(gpu.arch().0 >= 5, "compute capability {:?}", gpu.arch());
        assert!(gpu.sm_count() > 0);
        assert!(gpu.total_memory() > 0);
        let stream = gpu.new_stream().unwrap();
        stream.synchronize().unwrap();
        assert!(stream.is_idle().unwrap());
        let elapsed = gpu.time(|_| Ok(())).unwrap();
        assert!(elapsed < Duration::from_secs(1));
        gpu.synchronize().unwrap();
        assert!(driver_has_symbol("cuInit"));
        assert!(!driver_has_symbol("cuNoSuchEntryPoint"));
    }
}
