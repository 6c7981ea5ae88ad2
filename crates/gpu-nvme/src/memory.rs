//! Memory that a controller reaches by bus address: queue rings, PRP lists, data buffers.
//!
//! A real SSD reaches host memory by DMA through bus addresses. Our controllers are host
//! software, so a bus address ("IOVA") is resolved through a [`DmaMap`] of registered regions:
//! host memory is registered at its host virtual address, GPU memory at its device pointer
//! (unified virtual addressing keeps the two ranges disjoint). A PRP that falls outside every
//! registered region is a data transfer error, exactly as an IOMMU fault would be.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::cuda::{Gpu, PinnedBuffer};

/// Most bytes [`prefetch`] asks for: larger transfers stream, and the hardware prefetcher
/// follows them on its own.
const PREFETCH_MAX_BYTES: usize = 4096;

/// Asks the CPU to start loading the cache lines of `[ptr, ptr + len)` (at most the first
/// 4 KiB). A hint only: it never faults, whatever the address, and changes no memory. Software
/// controllers call it a few requests ahead, so that random small transfers overlap their
/// cache misses instead of paying them one after another.
pub fn prefetch(ptr: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    prefetch_lines::<{ std::arch::x86_64::_MM_HINT_T0 }>(ptr, len);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (ptr, len);
}

/// [`prefetch`] for lines about to be written: they are fetched in exclusive state
/// (`prefetchw`), so the stores need no second round trip to take ownership, e.g. of a
/// buffer the GPU last read. CPUs without `prefetchw` treat it as a no-op.
pub fn prefetch_for_write(ptr: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    prefetch_lines::<{ std::arch::x86_64::_MM_HINT_ET0 }>(ptr, len);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (ptr, len);
}

#[cfg(target_arch = "x86_64")]
fn prefetch_lines<const HINT: i32>(ptr: *const u8, len: usize) {
    for offset in (0..len.min(PREFETCH_MAX_BYTES)).step_by(64) {
        // SAFETY: a prefetch is a hint that never faults, even for an address that is not
        // mapped; `wrapping_add` computes the address without dereferencing it.
        unsafe { std::arch::x86_64::_mm_prefetch::<HINT>(ptr.wrapping_add(offset).cast::<i8>()) };
    }
}

/// Errors of memory allocation and address translation.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// a region of zero bytes was requested
    #[error("a region of zero bytes was requested")]
    ZeroSize,
    /// the allocator refused the request
    #[error("could not allocate {0} bytes of host memory")]
    OutOfMemory(usize),
    /// page-locked allocation through the CUDA driver failed
    #[error("page-locked allocation failed: {0}")]
    Pinned(#[from] crate::cuda::CudaError),
    /// the new region overlaps one that is already registered
    #[error("region {base:#x}+{len:#x} overlaps a registered region")]
    Overlap {
        /// first bus address of the rejected region
        base: u64,
        /// length of the rejected region
        len: u64,
    },
}

/// Page-aligned host memory, either ordinary (CPU-only) or page-locked and mapped into a GPU.
#[derive(Debug)]
pub enum HostRegion {
    /// Heap memory aligned to 4 KiB; reachable by host threads only.
    Heap(AlignedBuf),
    /// Page-locked memory mapped into the GPU's address space (`CU_MEMHOSTALLOC_DEVICEMAP`),
    /// over-allocated by a page so that the region starts on a page boundary (NVMe rings and
    /// PRPs need page alignment; the driver only guarantees less).
    Pinned {
        /// The allocation.
        buffer: PinnedBuffer,
        /// Offset of the first page-aligned byte.
        offset: usize,
        /// Usable length from `offset`.
        len: usize,
    },
}

impl HostRegion {
    /// Allocates `len` zeroed bytes: mapped into `gpu` when given, plain heap memory otherwise.
    pub fn new(len: usize, gpu: Option<&Gpu>) -> Result<Self, MemoryError> {
        if len == 0 {
            return Err(MemoryError::ZeroSize);
        }
        match gpu {
            Some(gpu) => {
                let buffer = PinnedBuffer::new(gpu, len + 4096)?;
                let offset = buffer.as_ptr().align_offset(4096);
                Ok(Self::Pinned {
                    buffer,
                    offset,
                    len,
                })
            }
            None => Ok(Self::Heap(AlignedBuf::zeroed(len)?)),
        }
    }

    /// Host address of the first byte.
    pub fn host_ptr(&self) -> *mut u8 {
        match self {
            Self::Heap(b) => b.ptr.as_ptr(),
            // SAFETY: offset < 4096 and the buffer holds len + 4096 bytes.
            Self::Pinned { buffer, offset, .. } => unsafe { buffer.as_mut_ptr().add(*offset) },
        }
    }

    /// The GPU's address of the first byte, when the region is mapped into a GPU.
    pub fn gpu_ptr(&self) -> Option<u64> {
        match self {
            Self::Heap(_) => None,
            Self::Pinned { buffer, offset, .. } => Some(buffer.device_ptr() + *offset as u64),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Self::Heap(b) => b.layout.size(),
            Self::Pinned { len, .. } => *len,
        }
    }

    /// Always false: regions are never empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bus address a controller uses for the first byte (the host address).
    pub fn iova(&self) -> u64 {
        self.host_ptr() as u64
    }
}

/// Zeroed heap memory aligned to a 4 KiB page.
#[derive(Debug)]
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the buffer is plain bytes owned by this value; concurrent access goes through raw
// pointers whose users synchronise with atomics (queue protocol), as with any DMA buffer.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above; `&AlignedBuf` hands out only raw pointers.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zeroed bytes aligned to 4096.
    pub fn zeroed(len: usize) -> Result<Self, MemoryError> {
        let layout =
            Layout::from_size_align(len.max(1), 4096).map_err(|_| MemoryError::OutOfMemory(len))?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(MemoryError::OutOfMemory(len))?;
        Ok(Self { ptr, layout })
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with exactly this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Where a registered region lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionKind {
    /// Host memory: the bus address is the host virtual address.
    Host,
    /// GPU memory: the bus address is the device pointer; reached with copies or staging.
    Device,
}

/// One registered region of the bus address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaRegion {
    /// First bus address.
    pub base: u64,
    /// Length in bytes.
    pub len: u64,
    /// Host or device memory.
    pub kind: RegionKind,
}

/// A resolved piece of a transfer: where `len` bytes live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    /// The bus address (host pointer for host memory, device pointer for GPU memory).
    pub addr: u64,
    /// Host or device memory.
    pub kind: RegionKind,
}

/// The table of regions a controller may reach; the software stand-in for an IOMMU.
///
/// Workers keep a snapshot ([`DmaView`]) and refresh it only when the generation moves, so the
/// hot path reads no lock.
///
/// With host pass-through on ([`set_host_pass_through`](Self::set_host_pass_through)), an
/// address outside every region is taken as host memory of this process, as a device without
/// an IOMMU reaches all of memory: a host driver may then name its caller's buffers in PRPs
/// (O_DIRECT-style reads and writes with no bounce copy). Only for controllers that run in
/// this process; registered regions (GPU memory among them) keep their kind.
#[derive(Debug, Default)]
pub struct DmaMap {
    regions: RwLock<Arc<Vec<DmaRegion>>>,
    generation: AtomicU64,
    host_pass_through: AtomicBool,
}

impl DmaMap {
    /// An empty map: every address faults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a region; overlapping regions are refused.
    pub fn register(&self, region: DmaRegion) -> Result<(), MemoryError> {
        let end = region.base.checked_add(region.len);
        if region.len == 0 || end.is_none() {
            return Err(MemoryError::Overlap {
                base: region.base,
                len: region.len,
            });
        }
        let mut guard = self.regions.write().unwrap_or_else(|e| e.into_inner());
        let mut next: Vec<DmaRegion> = guard.as_ref().clone();
        if next
            .iter()
            .any(|r| region.base < r.base + r.len && r.base < region.base + region.len)
        {
            return Err(MemoryError::Overlap {
                base: region.base,
                len: region.len,
            });
        }
        next.push(region);
        next.sort_by_key(|r| r.base);
        *guard = Arc::new(next);
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Registers a host region at its host address.
    pub fn register_host(&self, region: &HostRegion) -> Result<(), MemoryError> {
        self.register(DmaRegion {
            base: region.iova(),
            len: region.len() as u64,
            kind: RegionKind::Host,
        })
    }

    /// Removes the region that starts at `base`; returns whether one was removed.
    pub fn unregister(&self, base: u64) -> bool {
        let mut guard = self.regions.write().unwrap_or_else(|e| e.into_inner());
        let mut next: Vec<DmaRegion> = guard.as_ref().clone();
        let before = next.len();
        next.retain(|r| r.base != base);
        let removed = next.len() != before;
        if removed {
            *guard = Arc::new(next);
            self.generation.fetch_add(1, Ordering::Release);
        }
        removed
    }

    /// Turns host pass-through on or off (see the type's docs).
    pub fn set_host_pass_through(&self, on: bool) {
        // Under the lock, so that a view sees the flag of its generation.
        let _guard = self.regions.write().unwrap_or_else(|e| e.into_inner());
        self.host_pass_through.store(on, Ordering::Release);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Whether host pass-through is on.
    pub fn host_pass_through(&self) -> bool {
        self.host_pass_through.load(Ordering::Acquire)
    }

    /// A snapshot for a worker thread.
    pub fn view(&self) -> DmaView<'_> {
        // Generation and flag change under the write lock: read here, they match the regions.
        let regions = self.regions.read().unwrap_or_else(|e| e.into_inner());
        DmaView {
            map: self,
            regions: Arc::clone(&regions),
            generation: self.generation.load(Ordering::Acquire),
            host_pass_through: self.host_pass_through(),
            last: std::cell::Cell::new(0),
        }
    }
}

/// A worker's lock-free snapshot of a [`DmaMap`].
#[derive(Debug)]
pub struct DmaView<'a> {
    map: &'a DmaMap,
    regions: Arc<Vec<DmaRegion>>,
    generation: u64,
    host_pass_through: bool,
    /// The region the last lookup found: the commands of one fetched batch come from one
    /// queue and name its bounce slots, so most lookups hit it and skip the binary search
    /// (hundreds of regions with many GPU queues; measured as a third of a SwarmIO worker's
    /// time on a 16-core Xeon).
    last: std::cell::Cell<usize>,
}

impl DmaView<'_> {
    /// Reloads the snapshot if regions were registered or removed since it was taken.
    pub fn refresh(&mut self) {
        if self.map.generation.load(Ordering::Acquire) != self.generation {
            *self = self.map.view();
        }
    }

    /// Resolves `len` bytes at bus address `addr`; `None` if they do not lie in one region
    /// (with host pass-through: if they overlap a region without lying inside it, or are null).
    pub fn resolve(&self, addr: u64, len: u64) -> Option<Resolved> {
        let end = addr.checked_add(len)?;
        if let Some(r) = self.regions.get(self.last.get())
            && r.base <= addr
            && end <= r.base + r.len
        {
            return Some(Resolved { addr, kind: r.kind });
        }
        let idx = self.regions.partition_point(|r| r.base <= addr);
        if let Some(i) = idx.checked_sub(1)
            && addr < self.regions[i].base + self.regions[i].len
        {
            let r = self.regions[i];
            self.last.set(i);
            return (end <= r.base + r.len).then_some(Resolved { addr, kind: r.kind });
        }
        // Outside every region: host memory under pass-through, unless the range runs into the
        // next region (a piece of GPU memory must never be taken for host memory).
        let next_base = self.regions.get(idx).map_or(u64::MAX, |r| r.base);
        (self.host_pass_through && addr != 0 && end <= next_base).then_some(Resolved {
            addr,
            kind: RegionKind::Host,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_region_is_page_aligned_and_zeroed() {
        let r = HostRegion::new(10_000, None).unwrap();
        assert_eq!(r.host_ptr() as usize % 4096, 0);
        // SAFETY: the region holds 10_000 initialised bytes and nobody else uses it.
        let bytes = unsafe { std::slice::from_raw_parts(r.host_ptr(), r.len()) };
        assert!(bytes.iter().all(|&b| b == 0));
        assert!(r.gpu_ptr().is_none());
        assert!(matches!(
            HostRegion::new(0, None),
            Err(MemoryError::ZeroSize)
        ));
    }

    #[test]
    fn resolve_accepts_only_ranges_inside_one_region() {
        let map = DmaMap::new();
        map.register(DmaRegion {
            base: 0x1000,
            len: 0x1000,
            kind: RegionKind::Host,
        })
        .unwrap();
        map.register(DmaRegion {
            base: 0x3000,
            len: 0x2000,
            kind: RegionKind::Device,
        })
        .unwrap();
        let v = map.view();
        assert_eq!(v.resolve(0x1000, 0x1000).unwrap().kind, RegionKind::Host);
        assert!(
            v.resolve(0x1800, 0x1000).is_none(),
            "crosses the end of a region"
        );
        assert!(
            v.resolve(0x2000, 1).is_none(),
            "in the hole between regions"
        );
        assert_eq!(v.resolve(0x4fff, 1).unwrap().kind, RegionKind::Device);
        assert!(v.resolve(0x5000, 1).is_none());
        assert!(
            v.resolve(u64::MAX, 2).is_none(),
            "overflow is a fault, not a panic"
        );
    }

    proptest::proptest! {
        /// Lookups (the remembered last region included) agree with a scan of the regions.
        #[test]
        fn resolve_agrees_with_a_scan_of_the_regions(
            starts in proptest::collection::btree_set(1u64..200, 1..12),
            lens in proptest::collection::vec(1u64..6, 12),
            device in proptest::collection::vec(proptest::bool::ANY, 12),
            pass_through in proptest::bool::ANY,
            queries in proptest::collection::vec((0u64..220, 1u64..8), 1..60),
        ) {
            let map = DmaMap::new();
            let mut regions = Vec::new();
            for (i, &s) in starts.iter().enumerate() {
                let r = DmaRegion {
                    base: s * 16,
                    len: lens[i] * 8,
                    kind: if device[i] { RegionKind::Device } else { RegionKind::Host },
                };
                if map.register(r).is_ok() {
                    regions.push(r);
                }
            }
            map.set_host_pass_through(pass_through);
            let v = map.view();
            for (q, len) in queries {
                let addr = q * 4;
                let end = addr + len;
                let inside = regions.iter().find(|r| r.base <= addr && end <= r.base + r.len);
                let touches = regions.iter().any(|r| addr < r.base + r.len && r.base < end);
                let want = match inside {
                    Some(r) => Some(r.kind),
                    None if pass_through && !touches && addr != 0 => Some(RegionKind::Host),
                    None => None,
                };
                proptest::prop_assert_eq!(v.resolve(addr, len).map(|r| r.kind), want, "{:#x}+{}", addr, len);
            }
        }
    }

    #[test]
    fn host_pass_through_takes_unregistered_addresses_as_host_memory_but_never_device_memory() {
        let map = DmaMap::new();
        map.register(DmaRegion {
            base: 0x3000,
            len: 0x2000,
            kind: RegionKind::Device,
        })
        .unwrap();
        let mut v = map.view();
        assert!(v.resolve(0x1000, 8).is_none(), "off by default");
        map.set_host_pass_through(true);
        v.refresh();
        assert_eq!(v.resolve(0x1000, 8).unwrap().kind, RegionKind::Host);
        assert_eq!(v.resolve(0x5000, 8).unwrap().kind, RegionKind::Host);
        assert_eq!(v.resolve(0x3000, 8).unwrap().kind, RegionKind::Device);
        assert!(v.resolve(0x2ff8, 16).is_none(), "runs into GPU memory");
        assert!(v.resolve(0x4ff8, 16).is_none(), "runs out of GPU memory");
        assert!(v.resolve(0, 8).is_none(), "null");
        assert!(v.resolve(u64::MAX - 4, 8).is_none(), "overflow");
        map.set_host_pass_through(false);
        v.refresh();
        assert!(v.resolve(0x1000, 8).is_none());
    }

    #[test]
    fn overlapping_registration_is_refused_and_views_refresh() {
        let map = DmaMap::new();
        map.register(DmaRegion {
            base: 0x1000,
            len: 0x1000,
            kind: RegionKind::Host,
        })
        .unwrap();
        let mut v = map.view();
        assert!(
            map.register(DmaRegion {
                base: 0x1fff,
                len: 2,
                kind: RegionKind::Host
            })
            .is_err()
        );
        assert!(
            map.register(DmaRegion {
                base: 0x9000,
                len: 0,
                kind: RegionKind::Host
            })
            .is_err()
        );
        map.register(DmaRegion {
            base: 0x8000,
            len: 0x1000,
            kind: RegionKind::Host,
        })
        .unwrap();
        assert!(v.resolve(0x8000, 8).is_none());
        v.refresh();
        assert!(v.resolve(0x8000, 8).is_some());
        assert!(map.unregister(0x8000));
        v.refresh();
        assert!(v.resolve(0x8000, 8).is_none());
    }
}
