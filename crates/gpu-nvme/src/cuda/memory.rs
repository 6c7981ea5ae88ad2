//! Page-locked host memory mapped into the GPU, device buffers, and the asynchronous copies
//! that software NVMe controllers use to move data into and out of GPU memory
//! (ARCHITECTURE.md "Data movement into GPU memory": batched async copies on the copy engines,
//! or the GPU pulling from a page-locked staging slot).

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

use cudarc::driver::CudaContext;
use cudarc::driver::sys::{
    self, CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_WRITECOMBINED,
    CUmemLocation, CUmemLocationType, CUmemcpyAttributes, CUmemcpySrcAccessOrder, CUresult,
};

use super::context::driver_has_symbol;
use super::{CudaError, Gpu, Stream};

/// Checks that `offset..offset + len` lies inside a buffer of `size` bytes.
fn check_range(what: &str, offset: usize, len: usize, size: usize) -> Result<(), CudaError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(CudaError::InvalidArgument(format!(
            "{what}: range {offset}+{len} exceeds the buffer's {size} bytes"
        ))),
    }
}

fn check_nonzero(what: &str, len: usize) -> Result<(), CudaError> {
    if len == 0 {
        Err(CudaError::InvalidArgument(format!(
            "{what}: length must be non-zero"
        )))
    } else {
        Ok(())
    }
}

/// Page-locked host memory that the GPU reads and writes directly through
/// [`PinnedBuffer::device_ptr`] (allocated with `cuMemHostAlloc(DEVICEMAP | PORTABLE)`),
/// zeroed at allocation and freed on drop.
///
/// The GPU may read and write these bytes at any time, outside Rust's knowledge. The safe
/// methods are plain (non-volatile) copies: ordering them against GPU accesses is the caller's
/// protocol (a stream synchronization, or a flag the GPU writes with a system-scope release and
/// the host reads with an acquire load through [`PinnedBuffer::as_ptr`]). Bytes the GPU writes
/// during a [`PinnedBuffer::copy_to`] may be read torn. Host threads that share one buffer and
/// write disjoint parts of it concurrently use the raw pointers.
#[derive(Debug)]
pub struct PinnedBuffer {
    host: NonNull<u8>,
    len: usize,
    device_ptr: u64,
    ctx: Arc<CudaContext>,
}

// SAFETY: the allocation is plain page-locked memory owned by this value; it is not tied to the
// allocating thread, and freeing it binds the context first.
unsafe impl Send for PinnedBuffer {}
// SAFETY: shared references only allow reads (`copy_to`) and raw pointers; writes through safe
// code need `&mut self`.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    /// Allocates `len` zeroed bytes of page-locked memory mapped into `gpu`.
    pub fn new(gpu: &Gpu, len: usize) -> Result<PinnedBuffer, CudaError> {
        Self::allocate(
            gpu,
            len,
            CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE,
        )
    }

    /// Like [`PinnedBuffer::new`] but write-combined: faster for the GPU to read across PCIe
    /// and for the host to write sequentially, but host reads are uncached and very slow. For
    /// staging buffers the host only writes.
    pub fn new_write_combined(gpu: &Gpu, len: usize) -> Result<PinnedBuffer, CudaError> {
        let flags =
            CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_WRITECOMBINED;
        Self::allocate(gpu, len, flags)
    }

    fn allocate(gpu: &Gpu, len: usize, flags: u32) -> Result<PinnedBuffer, CudaError> {
        check_nonzero("pinned buffer", len)?;
        gpu.stream().bind()?;
        let mut host: *mut c_void = std::ptr::null_mut();
        // SAFETY: the context is current and the out-pointer is valid for writes.
        let code = unsafe { sys::cuMemHostAlloc(&mut host, len, flags) };
        code.result().map_err(CudaError::driver("cuMemHostAlloc"))?;
        let host = NonNull::new(host.cast::<u8>()).ok_or(CudaError::Driver {
            call: "cuMemHostAlloc",
            code: CUresult::CUDA_ERROR_OUT_OF_MEMORY,
        })?;
        // From here on `buffer`'s drop frees the allocation on every error path.
        let mut buffer = PinnedBuffer {
            host,
            len,
            device_ptr: 0,
            ctx: gpu.context().clone(),
        };
        // SAFETY: `host` points to `len` writable bytes that nothing else references yet.
        unsafe { host.as_ptr().write_bytes(0, len) };
        let mut device_ptr: sys::CUdeviceptr = 0;
        // SAFETY: `host` was allocated with DEVICEMAP in the current context; flags must be 0.
        let code =
            unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device_ptr, host.as_ptr().cast(), 0) };
        code.result()
            .map_err(CudaError::driver("cuMemHostGetDevicePointer_v2"))?;
        buffer.device_ptr = device_ptr;
        Ok(buffer)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: zero-length buffers are refused at allocation.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address GPU code uses for byte 0 of this buffer.
    pub fn device_ptr(&self) -> u64 {
        self.device_ptr
    }

    /// The host address of byte 0.
    pub fn as_ptr(&self) -> *const u8 {
        self.host.as_ptr()
    }

    /// The host address of byte 0, for writing. Writing through it is the caller's
    /// responsibility: no other host thread may access the same bytes at the same time.
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.host.as_ptr()
    }

    /// Copies `dst.len()` bytes starting at `offset` out of the buffer.
    pub fn copy_to(&self, offset: usize, dst: &mut [u8]) -> Result<(), CudaError> {
        check_range("PinnedBuffer::copy_to", offset, dst.len(), self.len)?;
        // SAFETY: the range is inside the allocation (checked) and `dst` is a distinct Rust
        // slice; host writers need `&mut self` or their own exclusion (see `as_mut_ptr`).
        unsafe {
            self.as_ptr()
                .wrapping_add(offset)
                .copy_to_nonoverlapping(dst.as_mut_ptr(), dst.len())
        };
        Ok(())
    }

    /// Copies `src` into the buffer starting at `offset`.
    pub fn copy_from(&mut self, offset: usize, src: &[u8]) -> Result<(), CudaError> {
        check_range("PinnedBuffer::copy_from", offset, src.len(), self.len)?;
        // SAFETY: the range is inside the allocation (checked), `&mut self` excludes other safe
        // host access, and `src` cannot overlap memory this buffer owns exclusively.
        unsafe {
            self.as_mut_ptr()
                .wrapping_add(offset)
                .copy_from_nonoverlapping(src.as_ptr(), src.len())
        };
        Ok(())
    }

    /// Sets every byte to `byte`.
    pub fn fill(&mut self, byte: u8) {
        // SAFETY: the whole allocation is writable and `&mut self` excludes other safe access.
        unsafe { self.as_mut_ptr().write_bytes(byte, self.len) };
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if let Err(error) = self.ctx.bind_to_thread() {
            tracing::warn!(?error, "cannot bind context to free pinned memory");
            return;
        }
        // SAFETY: `host` came from cuMemHostAlloc in this context and is freed exactly once.
        let code = unsafe { sys::cuMemFreeHost(self.host.as_ptr().cast()) };
        if code != CUresult::CUDA_SUCCESS {
            tracing::warn!(?code, "cuMemFreeHost failed");
        }
    }
}

/// GPU memory (`cuMemAlloc`), zeroed at allocation and freed on drop. The copy methods are
/// ordered after work queued earlier on the GPU's default stream and return when done.
#[derive(Debug)]
pub struct DeviceBuffer {
    device_ptr: u64,
    len: usize,
    gpu: Gpu,
}

impl DeviceBuffer {
    /// Allocates `len` zeroed bytes on `gpu`.
    pub fn new(gpu: &Gpu, len: usize) -> Result<DeviceBuffer, CudaError> {
        check_nonzero("device buffer", len)?;
        gpu.stream().bind()?;
        let mut device_ptr: sys::CUdeviceptr = 0;
        // SAFETY: the context is current and the out-pointer is valid for writes.
        let code = unsafe { sys::cuMemAlloc_v2(&mut device_ptr, len) };
        code.result().map_err(CudaError::driver("cuMemAlloc_v2"))?;
        let mut buffer = DeviceBuffer {
            device_ptr,
            len,
            gpu: gpu.clone(),
        };
        buffer.zero()?;
        Ok(buffer)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: zero-length buffers are refused at allocation.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address of byte 0.
    pub fn device_ptr(&self) -> u64 {
        self.device_ptr
    }

    /// Copies `src` into the buffer at `offset`.
    pub fn copy_from_host(&mut self, offset: usize, src: &[u8]) -> Result<(), CudaError> {
        check_range("DeviceBuffer::copy_from_host", offset, src.len(), self.len)?;
        let stream = self.gpu.stream();
        // SAFETY: the destination range is inside this allocation (checked); `src` stays
        // borrowed until the stream is synchronized below.
        unsafe {
            stream.copy_htod_async(self.device_ptr + offset as u64, src.as_ptr(), src.len())?
        };
        stream.synchronize()
    }

    /// Copies `dst.len()` bytes starting at `offset` out of the buffer.
    pub fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<(), CudaError> {
        check_range("DeviceBuffer::copy_to_host", offset, dst.len(), self.len)?;
        let stream = self.gpu.stream();
        // SAFETY: the source range is inside this allocation (checked); `dst` stays mutably
        // borrowed until the stream is synchronized below.
        unsafe {
            stream.copy_dtoh_async(dst.as_mut_ptr(), self.device_ptr + offset as u64, dst.len())?
        };
        stream.synchronize()
    }

    /// Sets every byte to `byte`.
    pub fn fill(&mut self, byte: u8) -> Result<(), CudaError> {
        let stream = self.gpu.stream();
        stream.bind()?;
        // SAFETY: the whole range belongs to this allocation; the stream is alive.
        let code = unsafe { sys::cuMemsetD8Async(self.device_ptr, byte, self.len, stream.raw()) };
        code.result()
            .map_err(CudaError::driver("cuMemsetD8Async"))?;
        stream.synchronize()
    }

    /// Sets every byte to zero.
    pub fn zero(&mut self) -> Result<(), CudaError> {
        self.fill(0)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if let Err(error) = self.gpu.stream().bind() {
            tracing::warn!(%error, "cannot bind context to free device memory");
            return;
        }
        // SAFETY: `device_ptr` came from cuMemAlloc in this context and is freed exactly once;
        // cuMemFree waits for work that may still use it.
        let code = unsafe { sys::cuMemFree_v2(self.device_ptr) };
        if code != CUresult::CUDA_SUCCESS {
            tracing::warn!(?code, "cuMemFree_v2 failed");
        }
    }
}

/// One copy of a batch: `len` bytes from `src` to `dst`, both unified virtual addresses (a
/// device pointer, a [`PinnedBuffer::device_ptr`], or a host pointer as `u64`); the driver
/// infers the direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyRange {
    /// Destination address.
    pub dst: u64,
    /// Source address.
    pub src: u64,
    /// Bytes to copy.
    pub len: usize,
}

impl CopyRange {
    /// A host-to-device copy.
    pub fn htod(dst_device: u64, src_host: *const u8, len: usize) -> CopyRange {
        CopyRange {
            dst: dst_device,
            src: src_host as u64,
            len,
        }
    }

    /// A device-to-host copy.
    pub fn dtoh(dst_host: *mut u8, src_device: u64, len: usize) -> CopyRange {
        CopyRange {
            dst: dst_host as u64,
            src: src_device,
            len,
        }
    }
}

/// The driver's batched copy entry point (CUDA 12.8+ ABI as revised in 13.0).
const BATCH_SYMBOL: &str = "cuMemcpyBatchAsync_v2";

/// Whether [`Stream::copy_batch_async`] can use one `cuMemcpyBatchAsync` call per batch (the
/// driver exports it); otherwise it issues one `cuMemcpyAsync` per range.
pub fn batch_copy_supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| driver_has_symbol(BATCH_SYMBOL))
}

impl Stream {
    /// Queues a copy of `len` bytes from host memory `src` to device address `dst`.
    ///
    /// # Safety
    /// `src..src+len` must stay valid and unmodified, and `dst..dst+len` must be device memory
    /// (or mapped host memory) of this stream's context, until the stream has passed this copy
    /// ([`Stream::synchronize`], [`Stream::is_idle`]).
    pub unsafe fn copy_htod_async(
        &self,
        dst: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), CudaError> {
        self.bind()?;
        // SAFETY: the caller guarantees both ranges per this function's contract.
        let code = unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, self.raw()) };
        code.result()
            .map_err(CudaError::driver("cuMemcpyHtoDAsync_v2"))
    }

    /// Queues a copy of `len` bytes from device address `src` to host memory `dst`.
    ///
    /// # Safety
    /// `dst..dst+len` must stay valid and otherwise unaccessed, and `src..src+len` must be
    /// device memory of this stream's context, until the stream has passed this copy.
    pub unsafe fn copy_dtoh_async(
        &self,
        dst: *mut u8,
        src: u64,
        len: usize,
    ) -> Result<(), CudaError> {
        self.bind()?;
        // SAFETY: the caller guarantees both ranges per this function's contract.
        let code = unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, len, self.raw()) };
        code.result()
            .map_err(CudaError::driver("cuMemcpyDtoHAsync_v2"))
    }

    /// Queues every copy of `copies` with one `cuMemcpyBatchAsync` call when the driver has it
    /// ([`batch_copy_supported`]), else as [`Stream::copy_each_async`]. Sources are read in
    /// stream order. Zero-length ranges are skipped.
    ///
    /// # Safety
    /// For every range: both `src..src+len` and `dst..dst+len` must be valid memory of this
    /// context (or host memory), sources unmodified and destinations otherwise unaccessed,
    /// until the stream has passed the batch.
    pub unsafe fn copy_batch_async(&self, copies: &[CopyRange]) -> Result<(), CudaError> {
        if !batch_copy_supported() {
            // SAFETY: same contract as this function.
            return unsafe { self.copy_each_async(copies) };
        }
        let copies: Vec<&CopyRange> = copies.iter().filter(|copy| copy.len > 0).collect();
        if copies.is_empty() {
            return Ok(());
        }
        let mut dsts: Vec<sys::CUdeviceptr> = copies.iter().map(|copy| copy.dst).collect();
        let mut srcs: Vec<sys::CUdeviceptr> = copies.iter().map(|copy| copy.src).collect();
        let mut sizes: Vec<usize> = copies.iter().map(|copy| copy.len).collect();
        let no_hint = CUmemLocation {
            type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_INVALID,
            id: 0,
        };
        let mut attributes = CUmemcpyAttributes {
            srcAccessOrder: CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
            srcLocHint: no_hint,
            dstLocHint: no_hint,
            flags: 0,
        };
        let mut attribute_index = 0usize;
        self.bind()?;
        // SAFETY: the three arrays hold `sizes.len()` entries, one attribute applies from copy
        // 0 on; the caller guarantees the memory ranges; the symbol exists (checked above).
        let code = unsafe {
            sys::cuMemcpyBatchAsync_v2(
                dsts.as_mut_ptr(),
                srcs.as_mut_ptr(),
                sizes.as_mut_ptr(),
                sizes.len(),
                &mut attributes,
                &mut attribute_index,
                1,
                self.raw(),
            )
        };
        code.result()
            .map_err(CudaError::driver("cuMemcpyBatchAsync_v2"))
    }

    /// Queues one `cuMemcpyAsync` per range (the fallback of [`Stream::copy_batch_async`],
    /// public so the two can be measured against each other). Zero-length ranges are skipped.
    ///
    /// # Safety
    /// Same contract as [`Stream::copy_batch_async`].
    pub unsafe fn copy_each_async(&self, copies: &[CopyRange]) -> Result<(), CudaError> {
        self.bind()?;
        for copy in copies.iter().filter(|copy| copy.len > 0) {
            // SAFETY: the caller guarantees the ranges; the context is current.
            let code = unsafe { sys::cuMemcpyAsync(copy.dst, copy.src, copy.len, self.raw()) };
            code.result().map_err(CudaError::driver("cuMemcpyAsync"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::gpu_or_skip;

    #[test]
    fn check_range_accepts_ranges_inside_and_rejects_overflow() {
        assert!(check_range("t", 0, 8, 8).is_ok());
        assert!(check_range("t", 8, 0, 8).is_ok());
        assert!(check_range("t", 1, 8, 8).is_err());
        assert!(check_range("t", usize::MAX, 2, 8).is_err());
    }

    #[test]
    fn copy_range_constructors_keep_direction() {
        let host = [0u8; 4];
        let htod = CopyRange::htod(0x1000, host.as_ptr(), 4);
        assert_eq!(
            (htod.dst, htod.src, htod.len),
            (0x1000, host.as_ptr() as u64, 4)
        );
        let mut out = [0u8; 4];
        let dtoh = CopyRange::dtoh(out.as_mut_ptr(), 0x2000, 4);
        assert_eq!((dtoh.dst, dtoh.src), (out.as_mut_ptr() as u64, 0x2000));
    }

    #[test]
    fn batch_copy_is_unsupported_without_a_driver() {
        if crate::cuda::context::require_driver().is_ok() {
            eprintln!("skipped batch_copy_is_unsupported_without_a_driver: libcuda present");
            return;
        }
        assert!(!batch_copy_supported());
    }

    #[test]
    fn pinned_buffer_is_zeroed_and_copies_at_offsets() {
        let Some(gpu) = gpu_or_skip("pinned_buffer_is_zeroed_and_copies_at_offsets") else {
            return;
        };
        assert!(matches!(
            PinnedBuffer::new(&gpu, 0),
            Err(CudaError::InvalidArgument(_))
        ));
        let mut buffer = PinnedBuffer::new(&gpu, 4096).unwrap();
        assert_ne!(buffer.device_ptr(), 0);
        let mut all = vec![0xffu8; 4096];
        buffer.copy_to(0, &mut all).unwrap();
        assert!(all.iter().all(|&b| b == 0));
        buffer.copy_from(4000, &[1, 2, 3]).unwrap();
        let mut three = [0u8; 3];
        buffer.copy_to(4000, &mut three).unwrap();
        assert_eq!(three, [1, 2, 3]);
        assert!(buffer.copy_from(4094, &[1, 2, 3]).is_err());
        buffer.fill(9);
        buffer.copy_to(4093, &mut three).unwrap();
        assert_eq!(three, [9, 9, 9]);
        let combined = PinnedBuffer::new_write_combined(&gpu, 64).unwrap();
        assert_eq!(combined.len(), 64);
    }

    #[test]
    fn device_buffer_round_trips_bytes_and_fills() {
        let Some(gpu) = gpu_or_skip("device_buffer_round_trips_bytes_and_fills") else {
            return;
        };
        assert!(matches!(
            DeviceBuffer::new(&gpu, 0),
            Err(CudaError::InvalidArgument(_))
        ));
        let mut buffer = DeviceBuffer::new(&gpu, 1 << 20).unwrap();
        let mut read = vec![0xaau8; 1 << 20];
        buffer.copy_to_host(0, &mut read).unwrap();
        assert!(read.iter().all(|&b| b == 0), "zeroed at allocation");
        let pattern: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
        buffer.copy_from_host(12345, &pattern).unwrap();
        let mut back = vec![0u8; pattern.len()];
        buffer.copy_to_host(12345, &mut back).unwrap();
        assert_eq!(back, pattern);
        assert!(buffer.copy_to_host(1 << 20, &mut [0u8; 1]).is_err());
        buffer.fill(0x5a).unwrap();
        buffer.copy_to_host(0, &mut read).unwrap();
        assert!(read.iter().all(|&b| b == 0x5a));
    }

    /// Copies `sources` into consecutive 4 KiB slots of `device` on a new stream with
    /// `issue`, then brings them back with one batch.
    fn round_trip(
        gpu: &Gpu,
        issue: unsafe fn(&Stream, &[CopyRange]) -> Result<(), CudaError>,
    ) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        const SLOT: usize = 4096;
        let sources: Vec<Vec<u8>> = (0..64u8)
            .map(|i| {
                (0..(512 + usize::from(i) * 50))
                    .map(|j| (j as u8) ^ i)
                    .collect()
            })
            .collect();
        let device = DeviceBuffer::new(gpu, SLOT * sources.len()).unwrap();
        let stream = gpu.new_stream().unwrap();
        let copies: Vec<CopyRange> = sources
            .iter()
            .enumerate()
            .map(|(i, src)| {
                CopyRange::htod(
                    device.device_ptr() + (i * SLOT) as u64,
                    src.as_ptr(),
                    src.len(),
                )
            })
            .collect();
        // SAFETY: sources and the device buffer outlive the synchronize below.
        unsafe { issue(&stream, &copies).unwrap() };
        stream.synchronize().unwrap();
        let mut results: Vec<Vec<u8>> = sources.iter().map(|src| vec![0; src.len()]).collect();
        let back: Vec<CopyRange> = results
            .iter_mut()
            .enumerate()
            .map(|(i, dst)| {
                CopyRange::dtoh(
                    dst.as_mut_ptr(),
                    device.device_ptr() + (i * SLOT) as u64,
                    dst.len(),
                )
            })
            .collect();
        // SAFETY: results and the device buffer outlive the synchronize below.
        unsafe { stream.copy_batch_async(&back).unwrap() };
        stream.synchronize().unwrap();
        assert!(stream.is_idle().unwrap());
        (sources, results)
    }

    #[test]
    fn batched_copies_move_every_range_both_ways() {
        let Some(gpu) = gpu_or_skip("batched_copies_move_every_range_both_ways") else {
            return;
        };
        eprintln!("cuMemcpyBatchAsync available: {}", batch_copy_supported());
        let (sources, results) = round_trip(&gpu, Stream::copy_batch_async);
        assert_eq!(sources, results);
    }

    #[test]
    fn per_range_copies_move_every_range() {
        let Some(gpu) = gpu_or_skip("per_range_copies_move_every_range") else {
            return;
        };
        let (sources, results) = round_trip(&gpu, Stream::copy_each_async);
        assert_eq!(sources, results);
    }

    #[test]
    fn worker_threads_copy_on_their_own_streams_from_pinned_memory() {
        let Some(gpu) = gpu_or_skip("worker_threads_copy_on_their_own_streams_from_pinned_memory")
        else {
            return;
        };
        const PER_WORKER: usize = 1 << 16;
        let workers = 4;
        let mut staging = PinnedBuffer::new(&gpu, PER_WORKER * workers).unwrap();
        for worker in 0..workers {
            staging
                .copy_from(worker * PER_WORKER, &vec![worker as u8 + 1; PER_WORKER])
                .unwrap();
        }
        let device = DeviceBuffer::new(&gpu, PER_WORKER * workers).unwrap();
        std::thread::scope(|scope| {
            for worker in 0..workers {
                let (gpu, staging, device) = (&gpu, &staging, &device);
                scope.spawn(move || {
                    let stream = gpu.new_stream().unwrap();
                    let offset = worker * PER_WORKER;
                    let src = staging.as_ptr().wrapping_add(offset);
                    let dst = device.device_ptr() + offset as u64;
                    // SAFETY: each worker copies its own disjoint range; both buffers outlive
                    // the synchronize below.
                    unsafe { stream.copy_htod_async(dst, src, PER_WORKER).unwrap() };
                    stream.synchronize().unwrap();
                });
            }
        });
        let mut back = vec![0u8; PER_WORKER * workers];
        device.copy_to_host(0, &mut back).unwrap();
        for (worker, chunk) in back.chunks(PER_WORKER).enumerate() {
            assert!(
                chunk.iter().all(|&b| b == worker as u8 + 1),
                "worker {worker}"
            );
        }
    }
}
