//! Memory mappings behind the store: the namespace bytes and the zero-initialised metadata arrays.
//!
//! Everything the store shares between threads lives in `mmap`ed memory that stays mapped for the
//! store's whole life and is only ever touched through atomics, so an optimistic reader racing a
//! writer (or `madvise(MADV_DONTNEED)`) reads stale bytes at worst, never freed memory.

use std::fs::File;
use std::io;
use std::marker::PhantomData;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

/// One `mmap`ed region, unmapped on drop.
pub(super) struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; the store only accesses it through
// atomics (`words`, `ZeroedArray::as_slice`) or the kernel (`madvise`), so sharing it between
// threads is sound.
unsafe impl Send for Mapping {}
// SAFETY: see `Send`: all shared access goes through atomics.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Reserves `len` bytes of zero-filled private memory. Nothing is resident until written;
    /// `MAP_NORESERVE` keeps the reservation out of the commit charge. With `huge_pages`, the
    /// kernel is asked to back it with transparent huge pages (fewer TLB misses, but one write
    /// can make a whole 2 MiB resident); otherwise it is told not to (so residency follows writes
    /// at base-page granularity even where huge pages are enabled for everything).
    pub(super) fn anonymous(len: usize, huge_pages: bool) -> io::Result<Self> {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        let mapping = Self::map(len, prot, flags, -1)?;
        // Advice is best effort: kernels without transparent huge pages reject both.
        let advice = if huge_pages {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        mapping.advise(0, len, advice);
        Ok(mapping)
    }

    /// Maps the first `len` bytes of `file` shared and writable, so stores reach the file's page
    /// cache and `File::sync_data` makes them durable. `len` must not exceed the file's size.
    pub(super) fn shared_file(file: &File, len: usize) -> io::Result<Self> {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        Self::map(len, prot, libc::MAP_SHARED, file.as_raw_fd())
    }

    fn map(len: usize, prot: i32, flags: i32, fd: i32) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: a fresh mapping chosen by the kernel (null hint, no MAP_FIXED) cannot alias
        // any existing Rust object; the result is checked against MAP_FAILED below.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0) };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(base.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        Ok(Self { base, len })
    }

    /// The mapping viewed as 8-byte words (a trailing partial word is not part of the view).
    pub(super) fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is page aligned (so aligned for `AtomicU64`), `len / 8` words lie
        // inside it, it lives as long as `self`, every bit pattern is a valid `AtomicU64`, and
        // all other access to the bytes is atomic or done by the kernel.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().cast::<AtomicU64>(), self.len / 8) }
    }

    /// Gives the physical pages of `[offset, offset + len)` back to the kernel; for a private
    /// anonymous mapping the range then reads as zeros and stops counting as resident.
    /// `offset` must be page aligned. The caller must not rely on the previous contents.
    pub(super) fn discard(&self, offset: usize, len: usize) {
        self.advise(offset, len, libc::MADV_DONTNEED);
    }

    fn advise(&self, offset: usize, len: usize, advice: i32) {
        let len = len.min(self.len.saturating_sub(offset));
        if len == 0 {
            return;
        }
        let start = self.base.as_ptr().wrapping_add(offset);
        // SAFETY: the range lies inside our own mapping (clamped above); the advice values used
        // (`MADV_[NO]HUGEPAGE`, `MADV_DONTNEED` on private anonymous memory) never invalidate the
        // mapping, they only change residency, which all readers tolerate (see module docs).
        let rc = unsafe { libc::madvise(start.cast(), len, advice) };
        // Advice is best effort: failure only means memory is not released or huge pages stay.
        let _ = rc;
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` describe a mapping created by `map` and not yet unmapped; no
        // borrow of it can outlive `self`.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping").field("len", &self.len).finish()
    }
}

/// Types for which a region of zero bytes is a valid value and all mutation goes through atomics.
///
/// # Safety
/// Implementors must be valid when all their bytes are zero, must need no `Drop`, and must only
/// be mutated through shared references with atomic operations.
pub(super) unsafe trait ZeroIsValid: Sync {}

// SAFETY: zero is a valid `u64`, `AtomicU64` has no destructor and mutates atomically.
unsafe impl ZeroIsValid for AtomicU64 {}

/// A fixed-length array of `T` in a lazily zero-filled anonymous mapping: untouched pages of it
/// cost no memory, so arrays sized from the namespace capacity are free until used.
pub(super) struct ZeroedArray<T: ZeroIsValid> {
    mapping: Mapping,
    len: usize,
    _items: PhantomData<T>,
}

impl<T: ZeroIsValid> ZeroedArray<T> {
    /// An array of `len` all-zero items; fails if the size overflows or the kernel refuses.
    pub(super) fn new(len: usize) -> io::Result<Self> {
        let bytes = len
            .max(1)
            .checked_mul(size_of::<T>().max(1))
            .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "array size overflows"))?;
        Ok(Self {
            mapping: Mapping::anonymous(bytes, false)?,
            len,
            _items: PhantomData,
        })
    }

    /// The items.
    pub(super) fn as_slice(&self) -> &[T] {
        // SAFETY: the mapping holds at least `len * size_of::<T>()` bytes, is page aligned
        // (`T` needs far less), starts zeroed (valid for `T` by `ZeroIsValid`) and afterwards is
        // only changed through `T`'s atomics; it lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.mapping.base.as_ptr().cast::<T>(), self.len) }
    }
}

impl<T: ZeroIsValid> std::fmt::Debug for ZeroedArray<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZeroedArray")
            .field("len", &self.len)
            .finish()
    }
}
