//! The emulated SSD's namespace storage: one namespace's blocks plus a volatile write cache.
//!
//! SwarmIO's workers (paper §II-C, §IV-C) emulate a data transfer by copying between the I/O
//! buffer and "the emulated storage blocks, modeled in CPU memory". This module is that block
//! space. Up to ~16 workers hit it at tens of millions of 512 B–16 KiB operations per second, so
//! the hot paths take no global lock, do not allocate on reads and write no shared counter:
//!
//! - **Reads write no shared memory.** The namespace bytes live in one mapping that stays mapped
//!   for the store's life. Each chunk of [`CHUNK_BLOCKS`] blocks has a sequence number
//!   (seqlock): a read copies the bytes out (see `copy`: atomics, or plain vector loads where
//!   the CPU's memory order makes them equivalent) and retries if a writer held or changed the
//!   chunk meanwhile. Only a read that failed 16 times because the chunk is being rewritten
//!   nonstop takes the chunk's lock, so that it finishes.
//! - **Writes lock only their chunk** (a spin lock in the chunk's sequence number). Writers of
//!   different chunks share nothing but, once per chunk and flush interval, a bit in the dirty
//!   set; the residency counter is sharded per thread and moves only when a page changes state.
//!
//! # Backings
//! - [`Store::ram`]: an anonymous `MAP_NORESERVE` mapping of `capacity` bytes. Never-written
//!   blocks read as zeros without being touched, and memory grows with the pages written, not
//!   with capacity. Deallocated (or zeroed) pages are handed back with `MADV_DONTNEED`.
//!   [`Store::ram_with_pages`] can ask for transparent huge pages instead ([`RamPages`]).
//! - [`Store::file`]: a shared mapping of a file or block device; [`Store::flush`] ends with
//!   `fdatasync`. The file must not shrink or be written by others while the store is open (a
//!   truncated file, like a failing device, faults with `SIGBUS` on access).
//!
//! # Write cache
//! Like an SSD's volatile cache: [`Store::write`], [`Store::write_zeroes`] and
//! [`Store::deallocate`] are visible to reads at once, [`Store::flush`] makes them durable, and
//! [`Store::power_cut`] drops every one not yet flushed (reads then return the last flushed data,
//! or zeros). It is an undo log: writes update the namespace memory in place, and the first
//! modification of a block after a flush first copies its durable content into the chunk's undo
//! record (skipped when that content is all zeros). Flush drops the records, power cut copies
//! them back. Reads never look at the cache. (For a file, unflushed writes thus reach the page
//! cache before the flush, as an SSD's cache is written back eventually; only `power_cut`
//! drops them, rewriting the file to its durable content.)
//!
//! ## Concurrency with flush and power cut
//! Flush and power cut are serialised with each other and visit the dirty chunks one at a time.
//! An I/O racing them lands entirely before or entirely after within each chunk (an aligned
//! group of [`CHUNK_BLOCKS`] blocks); an I/O spanning several chunks may land before in one and
//! after in another, as NVMe allows for writes larger than the atomic write unit. Every I/O that
//! completed before `flush` was called is durable when it returns.
//!
//! # Memory cost
//! - Data (RAM, base pages): one 4 KiB page per page holding a live block. Sequential writes
//!   cost their size; a random 512 B write into an untouched page costs 4 KiB (8x) until its
//!   neighbours are written; reads of unwritten blocks cost nothing. (Huge pages: up to 2 MiB
//!   per touched 2 MiB region.)
//! - Metadata: 24 bytes per chunk (0.07% of capacity at 512 B blocks, 0.01% at 4 KiB), in lazily
//!   zero-filled arrays, so only touched 4 KiB pages of them count: sequential writes add 0.07%,
//!   sparse random writes up to two 4 KiB pages per ~8 MiB of namespace they touch. The
//!   kernel's page tables add up to 0.2% of the touched range (not counted in RSS).
//! - Write cache: per chunk written since the last flush, a ~100-byte undo record, plus a copy of
//!   every block whose flushed non-zero content was overwritten, until the next flush. Without
//!   flushes, overwriting flushed data can therefore double its footprint. Flush and power cut
//!   free that memory to the allocator, which (glibc) keeps it for the next records rather than
//!   returning it to the kernel: the process RSS keeps its high-water mark.

mod chunk;
mod copy;
mod dirty;
mod mapping;

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicI64, AtomicUsize};
use std::sync::{Mutex, PoisonError};

use crossbeam_utils::CachePadded;

pub use chunk::CHUNK_BLOCKS;
use chunk::{Chunks, Undo};
use dirty::DirtySet;
use mapping::Mapping;

/// Why a store could not be created or an operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// lba_size must be 512 or 4096
    #[error("lba_size must be 512 or 4096, got {lba_size}")]
    LbaSize {
        /// The rejected LBA size.
        lba_size: u32,
    },
    /// capacity_bytes must be a non-zero multiple of lba_size
    #[error(
        "capacity_bytes must be a non-zero multiple of lba_size ({lba_size}), got {capacity_bytes}"
    )]
    Capacity {
        /// The rejected capacity.
        capacity_bytes: u64,
        /// The LBA size it must be a multiple of.
        lba_size: u32,
    },
    /// the system page size does not divide a chunk, so pages cannot be released per chunk
    #[error("system page size {page_size} does not divide a chunk of 64 blocks of {lba_size} B")]
    PageSize {
        /// The system page size in bytes.
        page_size: usize,
        /// The requested LBA size.
        lba_size: u32,
    },
    /// reserving address space for the namespace or its metadata failed
    #[error("reserving {bytes} bytes of address space failed: {source}")]
    Reserve {
        /// Bytes requested.
        bytes: u64,
        /// The operating system's error.
        source: io::Error,
    },
    /// the namespace file could not be opened (read-write) or mapped
    #[error("cannot open or map namespace file {}: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// the namespace file is smaller than capacity_bytes
    #[error(
        "namespace file {} holds {file_bytes} bytes, less than capacity_bytes ({capacity_bytes})",
        path.display()
    )]
    FileTooSmall {
        /// The file.
        path: PathBuf,
        /// Its size.
        file_bytes: u64,
        /// The capacity asked for.
        capacity_bytes: u64,
    },
    /// the I/O's offset or length is not a multiple of the LBA size
    #[error("I/O at byte offset {offset} of {len} bytes is not aligned to the LBA size {lba_size}")]
    Misaligned {
        /// Byte offset of the I/O.
        offset: u64,
        /// Length of the I/O in bytes.
        len: u64,
        /// The namespace's LBA size.
        lba_size: u32,
    },
    /// the I/O ends beyond the namespace's capacity
    #[error("I/O at byte offset {offset} of {len} bytes ends beyond the capacity ({capacity} B)")]
    OutOfRange {
        /// Byte offset of the I/O.
        offset: u64,
        /// Length of the I/O in bytes.
        len: u64,
        /// The namespace's capacity in bytes.
        capacity: u64,
    },
    /// fdatasync of the namespace file failed; the flushed writes can no longer be discarded by
    /// a power cut, but may not be on stable storage
    #[error("syncing the namespace file failed: {source}")]
    Sync {
        /// The operating system's error.
        source: io::Error,
    },
}

/// The pages backing a RAM namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RamPages {
    /// Base (4 KiB) pages: memory follows the written data at 4 KiB granularity.
    #[default]
    Base,
    /// Transparent huge pages (2 MiB) where the kernel allows them (`MADV_HUGEPAGE`). Random
    /// reads over a large working set avoid most TLB misses (measured 1.7-2x the 512 B random
    /// read rate over 1 GiB), but a write into an untouched 2 MiB region may make all of it
    /// resident, which [`Store::resident_bytes`] (counting 4 KiB pages) does not show. Suits
    /// namespaces filled densely (benchmark datasets), not sparse random writes.
    Huge,
}

/// Where the namespace bytes live.
#[derive(Debug)]
enum Backing {
    /// Private anonymous memory; `page_blocks` blocks share one page.
    Ram { page_blocks: u32 },
    /// A shared mapping of this file.
    File { file: File },
}

/// One namespace's blocks with a volatile write cache; see the module docs.
///
/// All methods take `&self` and may be called from any number of threads at once.
pub struct Store {
    capacity: u64,
    lba_size: u32,
    /// log2 of `lba_size`.
    lba_shift: u32,
    /// log2 of the chunk size in bytes.
    chunk_shift: u32,
    /// The newest contents of every block (durable data plus unflushed writes).
    data: Mapping,
    chunks: Chunks,
    dirty: DirtySet,
    backing: Backing,
    /// RAM: bytes of resident data pages; both backings: bytes held by undo records.
    resident: ShardedCounter,
    /// Serialises flush and power cut with each other (never taken by reads or writes).
    maintenance: Mutex<()>,
}

/// A byte range of an I/O that falls in one chunk.
struct Segment {
    chunk: usize,
    /// First block of the range, counted from the chunk's start.
    first_block: u32,
    /// Blocks in the range.
    blocks: u32,
    /// Byte offset of the range in the namespace.
    start: usize,
    /// Length of the range in bytes.
    len: usize,
    /// Byte offset of the range in the caller's buffer.
    buf_start: usize,
}

impl Segment {
    fn mask(&self) -> u64 {
        block_mask(self.first_block, self.blocks)
    }
}

/// What a modification writes.
#[derive(Clone, Copy)]
enum Content<'a> {
    /// These bytes (as long as the I/O).
    Data(&'a [u8]),
    /// Zeros (write zeroes and deallocate).
    Zeroes,
}

impl Store {
    /// A RAM namespace of `capacity_bytes` bytes with `lba_size`-byte blocks (512 or 4096), all
    /// reading as zeros, on base pages ([`RamPages::Base`]). Reserves `capacity_bytes` of
    /// address space but uses memory only for the pages written.
    pub fn ram(capacity_bytes: u64, lba_size: u32) -> Result<Self, StoreError> {
        Self::ram_with_pages(capacity_bytes, lba_size, RamPages::Base)
    }

    /// [`Store::ram`] with a choice of page size; see [`RamPages`].
    pub fn ram_with_pages(
        capacity_bytes: u64,
        lba_size: u32,
        pages: RamPages,
    ) -> Result<Self, StoreError> {
        let capacity = validate_geometry(capacity_bytes, lba_size)?;
        let page_size = page_size();
        let chunk_bytes = CHUNK_BLOCKS as usize * lba_size as usize;
        if !page_size.is_power_of_two() || page_size < lba_size as usize || page_size > chunk_bytes
        {
            return Err(StoreError::PageSize {
                page_size,
                lba_size,
            });
        }
        let huge_pages = pages == RamPages::Huge;
        let data =
            Mapping::anonymous(capacity, huge_pages).map_err(|source| StoreError::Reserve {
                bytes: capacity_bytes,
                source,
            })?;
        let page_blocks = (page_size / lba_size as usize) as u32;
        Self::with_data(capacity_bytes, lba_size, data, Backing::Ram { page_blocks })
    }

    /// A namespace stored in the first `capacity_bytes` of the file or block device at `path`
    /// (which must exist, be writable, and hold at least `capacity_bytes`), with `lba_size`-byte
    /// blocks. Its current content is the namespace's durable content.
    pub fn file(
        path: impl AsRef<Path>,
        capacity_bytes: u64,
        lba_size: u32,
    ) -> Result<Self, StoreError> {
        let capacity = validate_geometry(capacity_bytes, lba_size)?;
        let path = path.as_ref();
        let open_error = |source| StoreError::Open {
            path: path.to_owned(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(open_error)?;
        // Seeking to the end also sizes block devices, whose metadata length is 0.
        let file_bytes = file.seek(SeekFrom::End(0)).map_err(open_error)?;
        if file_bytes < capacity_bytes {
            return Err(StoreError::FileTooSmall {
                path: path.to_owned(),
                file_bytes,
                capacity_bytes,
            });
        }
        let data = Mapping::shared_file(&file, capacity).map_err(open_error)?;
        Self::with_data(capacity_bytes, lba_size, data, Backing::File { file })
    }

    fn with_data(
        capacity: u64,
        lba_size: u32,
        data: Mapping,
        backing: Backing,
    ) -> Result<Self, StoreError> {
        let lba_shift = lba_size.trailing_zeros();
        let chunk_shift = lba_shift + CHUNK_BLOCKS.trailing_zeros();
        let chunk_count = capacity.div_ceil(1 << chunk_shift);
        let reserve_error = |source| StoreError::Reserve {
            bytes: chunk_count.saturating_mul(chunk::METADATA_BYTES as u64),
            source,
        };
        let chunk_count = usize::try_from(chunk_count)
            .map_err(|_| reserve_error(io::ErrorKind::OutOfMemory.into()))?;
        Ok(Self {
            capacity,
            lba_size,
            lba_shift,
            chunk_shift,
            data,
            chunks: Chunks::new(chunk_count).map_err(reserve_error)?,
            dirty: DirtySet::new(chunk_count).map_err(reserve_error)?,
            backing,
            resident: ShardedCounter::new(),
            maintenance: Mutex::new(()),
        })
    }

    /// The namespace's size in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The block (LBA) size in bytes: 512 or 4096.
    pub fn lba_size(&self) -> u32 {
        self.lba_size
    }

    /// Memory the store holds for data: for RAM, the resident pages of the namespace plus the
    /// write cache's saved blocks; for a file, the write cache's saved blocks only (file pages
    /// belong to the kernel's page cache). Excludes metadata (see the module docs).
    pub fn resident_bytes(&self) -> u64 {
        u64::try_from(self.resident.sum()).unwrap_or(0)
    }

    /// Copies `buf.len()` bytes starting at byte `offset` into `buf`: the newest data written,
    /// zeros where nothing was. `offset` and `buf.len()` must be multiples of the LBA size and
    /// the range must lie inside the capacity.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        self.check(offset, buf.len() as u64)?;
        let words = self.data.words();
        let block_bytes = self.lba_size as usize;
        let sparse = matches!(self.backing, Backing::Ram { .. });
        for segment in self.segments(offset, buf.len()) {
            let dst = &mut buf[segment.buf_start..segment.buf_start + segment.len];
            let src = &words[segment.start / 8..(segment.start + segment.len) / 8];
            let wanted = segment.mask();
            self.chunks.read(segment.chunk, |live| {
                if !sparse || live & wanted == wanted {
                    copy::load(src, dst);
                } else if live & wanted == 0 {
                    dst.fill(0);
                } else {
                    let block_words = block_bytes / 8;
                    let blocks = src
                        .chunks_exact(block_words)
                        .zip(dst.chunks_exact_mut(block_bytes));
                    for (block, (src, dst)) in (segment.first_block..).zip(blocks) {
                        if live & block_mask(block, 1) != 0 {
                            copy::load(src, dst);
                        } else {
                            dst.fill(0);
                        }
                    }
                }
            });
        }
        Ok(())
    }

    /// Starts loading the chunk metadata that a read or write of `len` bytes at `offset` will
    /// look at first (a hint: out-of-range requests are ignored). The first of two prefetch
    /// steps; [`prefetch_data`](Self::prefetch_data) follows once this has arrived.
    pub fn prefetch_meta(&self, offset: u64, len: usize) {
        if self.check(offset, len as u64).is_err() {
            return;
        }
        for segment in self.segments(offset, len) {
            self.chunks.prefetch(segment.chunk);
        }
    }

    /// Starts loading the data of `len` bytes at `offset` into the cache: only the blocks that
    /// hold data in a sparse namespace (never-written blocks read as zeros without touching
    /// memory, and a prefetch of their unmapped pages would cost a page walk for nothing). It
    /// reads the chunks' live masks, so call it after [`prefetch_meta`](Self::prefetch_meta).
    pub fn prefetch_data(&self, offset: u64, len: usize) {
        if self.check(offset, len as u64).is_err() {
            return;
        }
        let sparse = matches!(self.backing, Backing::Ram { .. });
        let words = self.data.words();
        for segment in self.segments(offset, len) {
            if sparse && self.chunks.live_hint(segment.chunk) & segment.mask() == 0 {
                continue;
            }
            if let Some(first) = words.get(segment.start / 8) {
                gpu_nvme::memory::prefetch(std::ptr::from_ref(first).cast(), segment.len);
            }
        }
    }

    /// Writes `data` at byte `offset` into the write cache: visible to reads at once, durable
    /// after the next [`flush`](Self::flush). Alignment and range rules as for
    /// [`read`](Self::read).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), StoreError> {
        self.modify(offset, data.len() as u64, Content::Data(data))
    }

    /// Sets `len` bytes from byte `offset` to zeros, cached like a write.
    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), StoreError> {
        self.modify(offset, len, Content::Zeroes)
    }

    /// Deallocates (trims) `len` bytes from byte `offset`: they read back as zeros, cached like a
    /// write. RAM: pages left without live blocks are given back to the kernel at once (pages a
    /// power cut could still need stay copied in the write cache until the next flush).
    pub fn deallocate(&self, offset: u64, len: u64) -> Result<(), StoreError> {
        self.modify(offset, len, Content::Zeroes)
    }

    /// Makes every write, write-zeroes and deallocate that completed before this call durable.
    /// I/O running concurrently lands before or after, per chunk (see the module docs).
    pub fn flush(&self) -> Result<(), StoreError> {
        let _serial = self
            .maintenance
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let chunks = &self.chunks;
        let mut released = 0;
        self.dirty.drain(|chunk| {
            // Dropping the undo record is what makes the chunk's cached writes durable.
            let undo = chunks.lock(chunk).take_undo();
            released += undo.map_or(0, |undo| undo.saved_bytes());
        });
        self.resident.add(-(released as i64));
        if let Backing::File { file } = &self.backing {
            file.sync_data()
                .map_err(|source| StoreError::Sync { source })?;
        }
        Ok(())
    }

    /// Emulates losing power: every write, write-zeroes and deallocate not covered by a
    /// completed [`flush`](Self::flush) is dropped, so reads return the last flushed data, or
    /// zeros where nothing was flushed. For a file, the file is rewritten to (and synced at) its
    /// durable content. I/O running concurrently lands before or after, per chunk.
    pub fn power_cut(&self) -> Result<(), StoreError> {
        self.power_cut_keeping(|_| false)
    }

    /// [`power_cut`](Self::power_cut) after the cache wrote some of its blocks back on its
    /// own, as a drive's volatile cache may in any order: a block modified since the last
    /// flush keeps its newest content where `keep(lba)` says so, and loses every change since
    /// the flush otherwise. Crash tests use it to check that software never relies on the
    /// order of unflushed writes.
    pub fn power_cut_keeping(&self, mut keep: impl FnMut(u64) -> bool) -> Result<(), StoreError> {
        let _serial = self
            .maintenance
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let chunks = &self.chunks;
        let words = self.data.words();
        let block_bytes = self.lba_size as usize;
        let mut released = 0;
        self.dirty.drain(|chunk| {
            let mut guard = chunks.lock(chunk);
            let Some(undo) = guard.take_undo() else {
                return;
            };
            let chunk_start = chunk << self.chunk_shift;
            let first_lba = (chunk_start >> self.lba_shift) as u64;
            let kept = (0..CHUNK_BLOCKS)
                .filter(|&b| undo.dirty() & block_mask(b, 1) != 0 && keep(first_lba + u64::from(b)))
                .fold(0u64, |m, b| m | block_mask(b, 1));
            for (block, content) in undo.saved_blocks(block_bytes) {
                if kept & block_mask(block, 1) == 0 {
                    let start = (chunk_start + block as usize * block_bytes) / 8;
                    copy::store(&words[start..start + block_bytes / 8], content);
                }
            }
            if matches!(self.backing, Backing::Ram { .. }) {
                let lost = undo.dirty() & !kept;
                let old = guard.live();
                let new = (old & !lost) | (undo.durable_live() & lost);
                guard.set_live(new);
                self.account_live_change(chunk, old, new);
            }
            drop(guard);
            released += undo.saved_bytes();
        });
        self.resident.add(-(released as i64));
        if let Backing::File { file } = &self.backing {
            file.sync_data()
                .map_err(|source| StoreError::Sync { source })?;
        }
        Ok(())
    }

    /// Applies `content` to `[offset, offset + len)`, one chunk at a time.
    fn modify(&self, offset: u64, len: u64, content: Content<'_>) -> Result<(), StoreError> {
        self.check(offset, len)?;
        let words = self.data.words();
        let block_bytes = self.lba_size as usize;
        let sparse = matches!(self.backing, Backing::Ram { .. });
        let mut saved = 0;
        // `check` bounded `len` by the capacity, which fits a `usize`.
        for segment in self.segments(offset, len as usize) {
            let words = &words[segment.start / 8..(segment.start + segment.len) / 8];
            let mask = segment.mask();
            let mut guard = self.chunks.lock(segment.chunk);
            let old_live = guard.live();
            if guard.undo().is_none() {
                // The file backing cannot tell zero blocks apart: it copies every block.
                guard.insert_undo(Undo::new(if sparse { old_live } else { u64::MAX }));
                self.dirty.insert(segment.chunk);
            }
            if let Some(undo) = guard.undo() {
                let to_save = undo.mark_dirty(mask) & undo.durable_live();
                let blocks = words.chunks_exact(block_bytes / 8);
                for (block, block_words) in (segment.first_block..).zip(blocks) {
                    if to_save & block_mask(block, 1) != 0 {
                        undo.save(block, block_words);
                        saved += block_bytes;
                    }
                }
            }
            let new_live = match content {
                Content::Data(data) => {
                    let start = segment.buf_start;
                    copy::store(words, &data[start..start + segment.len]);
                    old_live | mask
                }
                // RAM: a block with a clear live bit reads as zeros whatever its memory holds.
                Content::Zeroes if sparse => old_live & !mask,
                Content::Zeroes => {
                    words.iter().for_each(|word| word.store(0, Relaxed));
                    old_live
                }
            };
            if sparse && new_live != old_live {
                guard.set_live(new_live);
                self.account_live_change(segment.chunk, old_live, new_live);
            }
        }
        if saved > 0 {
            self.resident.add(saved as i64);
        }
        Ok(())
    }

    /// RAM: counts pages that gained or lost their last live block, and gives the latter back
    /// to the kernel. Call while holding the chunk.
    fn account_live_change(&self, chunk: usize, old: u64, new: u64) {
        let Backing::Ram { page_blocks } = self.backing else {
            return;
        };
        let (old_pages, new_pages) = (page_mask(old, page_blocks), page_mask(new, page_blocks));
        let (gained, lost) = (new_pages & !old_pages, old_pages & !new_pages);
        let page_bytes = (page_blocks as usize) << self.lba_shift;
        let pages = i64::from(gained.count_ones()) - i64::from(lost.count_ones());
        if pages != 0 {
            self.resident.add(pages * page_bytes as i64);
        }
        let chunk_start = chunk << self.chunk_shift;
        let mut lost = lost;
        while lost != 0 {
            let first = lost.trailing_zeros();
            let run = (!(lost >> first)).trailing_zeros();
            let start = chunk_start + first as usize * page_bytes;
            self.data.discard(start, run as usize * page_bytes);
            lost &= !block_mask(first, run);
        }
    }

    /// Checks alignment and range of an I/O.
    fn check(&self, offset: u64, len: u64) -> Result<(), StoreError> {
        let unaligned = u64::from(self.lba_size - 1);
        if (offset | len) & unaligned != 0 {
            return Err(StoreError::Misaligned {
                offset,
                len,
                lba_size: self.lba_size,
            });
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.capacity => Ok(()),
            _ => Err(StoreError::OutOfRange {
                offset,
                len,
                capacity: self.capacity,
            }),
        }
    }

    /// Splits a checked I/O into its per-chunk ranges.
    fn segments(&self, offset: u64, len: usize) -> impl Iterator<Item = Segment> + use<> {
        // Checked I/O lies inside the capacity, which `validate_geometry` fitted in a `usize`.
        let offset = offset as usize;
        let end = offset + len;
        let (chunk_shift, lba_shift) = (self.chunk_shift, self.lba_shift);
        let mut start = offset;
        std::iter::from_fn(move || {
            if start >= end {
                return None;
            }
            let chunk = start >> chunk_shift;
            let segment_end = ((chunk + 1) << chunk_shift).min(end);
            let segment = Segment {
                chunk,
                first_block: ((start - (chunk << chunk_shift)) >> lba_shift) as u32,
                blocks: ((segment_end - start) >> lba_shift) as u32,
                start,
                len: segment_end - start,
                buf_start: start - offset,
            };
            start = segment_end;
            Some(segment)
        })
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // Undo records are owned through raw pointers; the dirty set knows all of them. The
        // cached writes themselves stay (an orderly shutdown writes the cache back).
        let chunks = &self.chunks;
        self.dirty
            .drain(|chunk| drop(chunks.lock(chunk).take_undo()));
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("capacity", &self.capacity)
            .field("lba_size", &self.lba_size)
            .field("backing", &self.backing)
            .field("resident_bytes", &self.resident_bytes())
            .finish_non_exhaustive()
    }
}

/// Validates the geometry shared by both backings; returns the capacity as a `usize`.
fn validate_geometry(capacity_bytes: u64, lba_size: u32) -> Result<usize, StoreError> {
    if lba_size != 512 && lba_size != 4096 {
        return Err(StoreError::LbaSize { lba_size });
    }
    if capacity_bytes == 0 || !capacity_bytes.is_multiple_of(u64::from(lba_size)) {
        return Err(StoreError::Capacity {
            capacity_bytes,
            lba_size,
        });
    }
    usize::try_from(capacity_bytes).map_err(|_| StoreError::Reserve {
        bytes: capacity_bytes,
        source: io::ErrorKind::OutOfMemory.into(),
    })
}

/// The system's page size.
fn page_size() -> usize {
    // SAFETY: sysconf only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// Bits `first..first + count` (`first + count <= 64`).
fn block_mask(first: u32, count: u32) -> u64 {
    let ones = if count >= 64 {
        u64::MAX
    } else {
        (1 << count) - 1
    };
    ones << first
}

/// Folds a block mask into a page mask: bit `p` set if any of blocks
/// `p * page_blocks..(p + 1) * page_blocks` is set.
fn page_mask(blocks: u64, page_blocks: u32) -> u64 {
    if page_blocks == 1 {
        return blocks;
    }
    let group = block_mask(0, page_blocks);
    (0..CHUNK_BLOCKS / page_blocks)
        .filter(|page| (blocks >> (page * page_blocks)) & group != 0)
        .fold(0, |pages, page| pages | 1 << page)
}

/// Shards of [`ShardedCounter`]; threads beyond this share shards (correct, just slower).
const COUNTER_SHARDS: usize = 32;

/// A sum kept in cache-line-padded shards, one chosen per thread, so that updates from
/// different threads do not write the same cache line.
struct ShardedCounter {
    shards: Box<[CachePadded<AtomicI64>]>,
}

impl ShardedCounter {
    fn new() -> Self {
        Self {
            shards: (0..COUNTER_SHARDS)
                .map(|_| CachePadded::new(AtomicI64::new(0)))
                .collect(),
        }
    }

    fn add(&self, delta: i64) {
        static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);
        thread_local! {
            static SHARD: usize = NEXT_SHARD.fetch_add(1, Relaxed) % COUNTER_SHARDS;
        }
        self.shards[SHARD.with(|shard| *shard)].fetch_add(delta, Relaxed);
    }

    fn sum(&self) -> i64 {
        self.shards.iter().map(|shard| shard.load(Relaxed)).sum()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::thread;

    use proptest::prelude::*;
    use tempfile::NamedTempFile;

    use super::*;

    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const TIB: u64 = 1 << 40;

    /// Content of block `lba` written with `tag`: every byte depends on both, so a block
    /// landing at the wrong address or from the wrong write shows.
    fn pattern(tag: u8, lba: u64, block_bytes: usize) -> Vec<u8> {
        // A non-zero fill (cheap in debug builds) framed by the address and the tag.
        let fill = ((lba as u8).wrapping_mul(31) ^ tag.rotate_left(3)) | 1;
        let mut block = vec![fill; block_bytes];
        block[..8].copy_from_slice(&lba.to_le_bytes());
        block[block_bytes - 1] = tag;
        block
    }

    /// Content of `count` blocks from `lba`, all written with `tag`.
    fn patterns(tag: u8, lba: u64, count: u64, block_bytes: usize) -> Vec<u8> {
        let mut blocks = Vec::with_capacity(count as usize * block_bytes);
        (lba..lba + count).for_each(|lba| blocks.extend(pattern(tag, lba, block_bytes)));
        blocks
    }

    fn read_blocks(store: &Store, lba: u64, count: u64) -> Vec<u8> {
        let block_bytes = u64::from(store.lba_size());
        let mut buf = vec![0xEE; (count * block_bytes) as usize];
        store.read(lba * block_bytes, &mut buf).expect("read");
        buf
    }

    fn write_blocks(store: &Store, tag: u8, lba: u64, count: u64) {
        let block_bytes = store.lba_size();
        let data = patterns(tag, lba, count, block_bytes as usize);
        store
            .write(lba * u64::from(block_bytes), &data)
            .expect("write");
    }

    /// A zero-filled file of `capacity` bytes and a store on it.
    fn file_store(capacity: u64, lba_size: u32) -> (NamedTempFile, Store) {
        let file = NamedTempFile::new().expect("temp file");
        file.as_file().set_len(capacity).expect("size temp file");
        let store = Store::file(file.path(), capacity, lba_size).expect("file store");
        (file, store)
    }

    /// One store of each backing; the temp file lives as long as the store needs it.
    fn each_backing(capacity: u64, lba_size: u32, test: impl Fn(&Store)) {
        test(&Store::ram(capacity, lba_size).expect("ram store"));
        let (_file, store) = file_store(capacity, lba_size);
        test(&store);
    }

    #[test]
    fn constructors_reject_bad_geometry_naming_the_parameter() {
        for (capacity, lba_size) in [(0, 512), (1000, 512), (4096 + 512, 4096)] {
            let error = Store::ram(capacity, lba_size).expect_err("bad capacity accepted");
            assert!(matches!(error, StoreError::Capacity { .. }), "{error:?}");
            assert!(error.to_string().contains("capacity_bytes"), "{error}");
        }
        for lba_size in [0, 1, 1024, 8192] {
            let error = Store::ram(MIB, lba_size).expect_err("bad lba_size accepted");
            assert!(matches!(error, StoreError::LbaSize { .. }), "{error:?}");
            assert!(error.to_string().contains("lba_size"), "{error}");
        }
        let (file, _store) = file_store(64 * KIB, 512);
        let error = Store::file(file.path(), 0, 512).expect_err("zero capacity accepted");
        assert!(error.to_string().contains("capacity_bytes"), "{error}");
        assert!(matches!(
            Store::ram(u64::MAX - 511, 512),
            Err(StoreError::Reserve { .. })
        ));
    }

    #[test]
    fn file_store_rejects_missing_and_too_small_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("missing.img");
        let error = Store::file(&missing, MIB, 512).expect_err("missing file accepted");
        assert!(matches!(error, StoreError::Open { .. }), "{error:?}");
        assert!(error.to_string().contains("missing.img"), "{error}");

        let (file, _store) = file_store(64 * KIB, 512);
        let error = Store::file(file.path(), 128 * KIB, 512).expect_err("small file accepted");
        assert!(
            matches!(error, StoreError::FileTooSmall { file_bytes, .. } if file_bytes == 64 * KIB),
            "{error:?}"
        );
        // A larger file is fine: the namespace is its first capacity bytes.
        assert!(Store::file(file.path(), 32 * KIB, 4096).is_ok());
    }

    #[test]
    fn misaligned_or_out_of_range_io_is_an_error_not_a_panic() {
        each_backing(64 * KIB, 512, |store| {
            let capacity = store.capacity();
            let mut buf = vec![0; 1024];
            let misaligned = |result| matches!(result, Err(StoreError::Misaligned { .. }));
            let out_of_range = |result| matches!(result, Err(StoreError::OutOfRange { .. }));
            assert!(misaligned(store.read(1, &mut buf)));
            assert!(misaligned(store.read(0, &mut buf[..100])));
            assert!(misaligned(store.write(512, &buf[..513])));
            assert!(misaligned(store.write_zeroes(256, 512)));
            assert!(misaligned(store.deallocate(0, 1)));
            assert!(out_of_range(store.read(capacity, &mut buf)));
            assert!(out_of_range(store.read(capacity - 512, &mut buf)));
            assert!(out_of_range(store.write(u64::MAX - 511, &buf)));
            assert!(out_of_range(store.write_zeroes(512, u64::MAX - 511)));
            assert!(out_of_range(store.deallocate(capacity, 512)));
            // Empty I/O inside (or at the end of) the namespace is a no-op.
            assert!(store.read(capacity, &mut []).is_ok());
            assert!(store.write(0, &[]).is_ok());
        });
    }

    #[test]
    fn never_written_blocks_read_as_zeros() {
        for lba_size in [512, 4096] {
            each_backing(MIB, lba_size, |store| {
                let blocks = MIB / u64::from(lba_size);
                assert!(read_blocks(store, 0, blocks).iter().all(|&byte| byte == 0));
                write_blocks(store, 1, 3, 2);
                assert!(read_blocks(store, 0, 3).iter().all(|&byte| byte == 0));
                assert!(
                    read_blocks(store, 5, blocks - 5)
                        .iter()
                        .all(|&byte| byte == 0)
                );
            });
        }
    }

    #[test]
    fn reads_return_the_newest_writes_across_chunk_boundaries() {
        for lba_size in [512, 4096] {
            each_backing(4 * u64::from(CHUNK_BLOCKS * lba_size), lba_size, |store| {
                let chunk = u64::from(CHUNK_BLOCKS);
                let block_bytes = lba_size as usize;
                // 70 blocks from 3 blocks before the first chunk boundary: spans three chunks.
                write_blocks(store, 1, chunk - 3, chunk + 7);
                write_blocks(store, 2, chunk - 1, 2);
                let mut expected = patterns(1, chunk - 3, 2, block_bytes);
                expected.extend(patterns(2, chunk - 1, 2, block_bytes));
                expected.extend(patterns(1, chunk + 1, chunk + 3, block_bytes));
                assert!(read_blocks(store, chunk - 3, chunk + 7) == expected);
                // Unaligned sub-ranges and single blocks agree with the whole.
                assert!(read_blocks(store, chunk, 1) == patterns(2, chunk, 1, block_bytes));
                let tail = read_blocks(store, 2 * chunk - 1, 2);
                assert!(tail == patterns(1, 2 * chunk - 1, 2, block_bytes));
            });
        }
    }

    #[test]
    fn power_cut_keeps_flushed_data_and_drops_unflushed_writes() {
        for lba_size in [512, 4096] {
            each_backing(MIB, lba_size, |store| {
                let block_bytes = lba_size as usize;
                write_blocks(store, 0xA, 10, 100);
                store.flush().expect("flush");
                write_blocks(store, 0xB, 10, 100);
                write_blocks(store, 0xC, 200, 3);
                assert!(read_blocks(store, 10, 100) == patterns(0xB, 10, 100, block_bytes));
                store.power_cut().expect("power cut");
                assert!(read_blocks(store, 10, 100) == patterns(0xA, 10, 100, block_bytes));
                assert!(read_blocks(store, 200, 3).iter().all(|&byte| byte == 0));
                // The restored state is durable: a second power cut changes nothing.
                store.power_cut().expect("power cut");
                assert!(read_blocks(store, 10, 100) == patterns(0xA, 10, 100, block_bytes));
            });
        }
    }

    #[test]
    fn a_partial_power_cut_keeps_the_newest_content_of_the_blocks_it_is_told_to() {
        for lba_size in [512, 4096] {
            each_backing(MIB, lba_size, |store| {
                let block_bytes = lba_size as usize;
                write_blocks(store, 0xA, 10, 100);
                store.flush().expect("flush");
                write_blocks(store, 0xB, 10, 100);
                write_blocks(store, 0xC, 200, 3);
                // Odd blocks reached the medium before the power went; even ones did not.
                store
                    .power_cut_keeping(|lba| lba % 2 == 1)
                    .expect("power cut");
                for b in 10..110 {
                    let want = if b % 2 == 1 { 0xB } else { 0xA };
                    assert!(
                        read_blocks(store, b, 1) == patterns(want, b, 1, block_bytes),
                        "block {b}"
                    );
                }
                assert!(read_blocks(store, 200, 1).iter().all(|&byte| byte == 0));
                assert!(read_blocks(store, 201, 1) == patterns(0xC, 201, 1, block_bytes));
                assert!(read_blocks(store, 202, 1).iter().all(|&byte| byte == 0));
                // What survived is durable: a full power cut changes nothing.
                store.power_cut().expect("power cut");
                assert!(read_blocks(store, 11, 1) == patterns(0xB, 11, 1, block_bytes));
                assert!(read_blocks(store, 201, 1) == patterns(0xC, 201, 1, block_bytes));
            });
        }
    }

    #[test]
    fn deallocate_and_write_zeroes_read_back_zeros_and_are_undone_by_power_cut() {
        for lba_size in [512, 4096] {
            each_backing(MIB, lba_size, |store| {
                let block_bytes = lba_size as usize;
                let blocks = MIB / u64::from(lba_size);
                write_blocks(store, 7, 0, blocks);
                store.flush().expect("flush");
                let bytes = u64::from(lba_size);
                store.deallocate(bytes, 80 * bytes).expect("deallocate");
                store
                    .write_zeroes(100 * bytes, 3 * bytes)
                    .expect("write zeroes");
                assert!(read_blocks(store, 1, 80).iter().all(|&byte| byte == 0));
                assert!(read_blocks(store, 100, 3).iter().all(|&byte| byte == 0));
                assert!(read_blocks(store, 0, 1) == patterns(7, 0, 1, block_bytes));
                assert!(read_blocks(store, 81, 19) == patterns(7, 81, 19, block_bytes));
                store.power_cut().expect("power cut");
                assert!(read_blocks(store, 0, blocks) == patterns(7, 0, blocks, block_bytes));
                store.deallocate(0, MIB).expect("deallocate");
                store.flush().expect("flush");
                store.power_cut().expect("power cut");
                assert!(read_blocks(store, 0, blocks).iter().all(|&byte| byte == 0));
            });
        }
    }

    #[test]
    fn ram_resident_bytes_follow_writes_deallocation_and_power_cut() {
        let store = Store::ram(TIB, 512).expect("ram store");
        assert_eq!(store.resident_bytes(), 0);
        write_blocks(&store, 1, 0, 2048);
        assert_eq!(store.resident_bytes(), MIB);
        store.flush().expect("flush");
        assert_eq!(store.resident_bytes(), MIB);
        // Deallocating flushed data keeps a copy for power cut until the next flush.
        store.deallocate(0, MIB).expect("deallocate");
        assert_eq!(store.resident_bytes(), MIB);
        store.flush().expect("flush");
        assert_eq!(store.resident_bytes(), 0);
        // Unflushed writes are dropped by power cut, memory included.
        write_blocks(&store, 2, 1 << 30, 2048);
        store.power_cut().expect("power cut");
        assert_eq!(store.resident_bytes(), 0);
        // A page stays resident while any of its blocks is live.
        write_blocks(&store, 3, 0, 8);
        store.deallocate(0, 7 * 512).expect("deallocate");
        assert_eq!(store.resident_bytes(), 4 * KIB);
        store.deallocate(7 * 512, 512).expect("deallocate");
        assert_eq!(store.resident_bytes(), 0);
    }

    /// Resident set size of this process, from `/proc/self/statm`.
    fn process_rss() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").expect("read statm");
        let pages: u64 = statm
            .split_whitespace()
            .nth(1)
            .and_then(|f| f.parse().ok())
            .expect("rss");
        pages * page_size() as u64
    }

    #[test]
    fn ram_memory_grows_with_written_bytes_not_capacity() {
        // 1 GiB takes ~1 s in release builds; debug builds write a quarter of it.
        let written = if cfg!(debug_assertions) {
            256 * MIB
        } else {
            1 << 30
        };
        let slack = 64 * MIB;
        let before = process_rss();
        let store = Store::ram(TIB, 512).expect("1 TiB ram store");
        let mut buf = vec![0x5A; MIB as usize];
        for offset in (0..written).step_by(MIB as usize) {
            buf[..8].copy_from_slice(&offset.to_ne_bytes());
            store.write(offset, &buf).expect("write");
        }
        let grown = process_rss().saturating_sub(before);
        assert!(
            grown <= written + written / 10 + slack,
            "RSS grew {grown} B for {written} B"
        );
        assert!(
            grown >= written - written / 10,
            "RSS grew only {grown} B: not measuring"
        );
        assert_eq!(store.resident_bytes(), written);
        let mut check = vec![0; 512];
        store.read(written - MIB, &mut check).expect("read");
        assert_eq!(check[..8], (written - MIB).to_ne_bytes());
        // Never flushed: deallocating needs no copy, and the pages go back at once.
        store.deallocate(0, written).expect("deallocate");
        let left = process_rss().saturating_sub(before);
        assert!(
            left <= written / 10 + slack,
            "RSS still {left} B after deallocate"
        );
    }

    #[test]
    fn file_store_keeps_flushed_data_across_reopen_and_power_cut() {
        let (file, store) = file_store(256 * KIB, 4096);
        write_blocks(&store, 0xA, 0, 64);
        store.flush().expect("flush");
        write_blocks(&store, 0xB, 0, 64);
        store.power_cut().expect("power cut");
        drop(store);
        let store = Store::file(file.path(), 256 * KIB, 4096).expect("reopen");
        assert!(read_blocks(&store, 0, 64) == patterns(0xA, 0, 64, 4096));
        write_blocks(&store, 0xC, 10, 3);
        store.flush().expect("flush");
        drop(store);
        let on_disk = std::fs::read(file.path()).expect("read file");
        assert!(on_disk[10 * 4096..13 * 4096] == patterns(0xC, 10, 3, 4096));
        assert!(on_disk[..10 * 4096] == patterns(0xA, 0, 10, 4096));
    }

    #[test]
    fn threads_writing_their_own_regions_keep_everything_through_flush_and_power_cut() {
        const THREADS: u64 = 8;
        const REGION: u64 = 3 * CHUNK_BLOCKS as u64 + 5;
        let store = Arc::new(Store::ram(THREADS * REGION * 512, 512).expect("ram store"));
        let workers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let store = Arc::clone(&store);
                thread::spawn(move || {
                    let base = thread * REGION;
                    for round in 0..12u8 {
                        // Varying sizes and starts, including chunk-crossing ones.
                        let mut lba = 0;
                        while lba < REGION {
                            let count = (1 + (lba + u64::from(round)) % 33).min(REGION - lba);
                            write_blocks(&store, round, base + lba, count);
                            let got = read_blocks(&store, base + lba, count);
                            assert!(got == patterns(round, base + lba, count, 512));
                            lba += count;
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .for_each(|worker| worker.join().expect("worker panicked"));
        store.flush().expect("flush");
        store.power_cut().expect("power cut");
        for thread in 0..THREADS {
            let base = thread * REGION;
            assert!(read_blocks(&store, base, REGION) == patterns(11, base, REGION, 512));
        }
    }

    #[test]
    fn writes_completed_before_a_flush_survive_power_cut_despite_concurrent_io() {
        const THREADS: u64 = 4;
        const BLOCKS: u64 = 200;
        let store = Arc::new(Store::ram(2 * THREADS * BLOCKS * 512, 512).expect("ram store"));
        let workers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let store = Arc::clone(&store);
                thread::spawn(move || {
                    // Flushed region: each write is followed by this thread's own flush.
                    let flushed = thread * BLOCKS;
                    // Unflushed region: other threads' flushes may or may not cover it.
                    let racing = (THREADS + thread) * BLOCKS;
                    for lba in 0..BLOCKS {
                        write_blocks(&store, 1, racing + lba, 1);
                        write_blocks(&store, 2, flushed + lba, 1);
                        if lba % 8 == 7 {
                            store.flush().expect("flush");
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .for_each(|worker| worker.join().expect("worker panicked"));
        store.power_cut().expect("power cut");
        for thread in 0..THREADS {
            let flushed = thread * BLOCKS;
            assert!(read_blocks(&store, flushed, BLOCKS) == patterns(2, flushed, BLOCKS, 512));
            for lba in (THREADS + thread) * BLOCKS..(THREADS + thread + 1) * BLOCKS {
                let block = read_blocks(&store, lba, 1);
                let zero = block.iter().all(|&byte| byte == 0);
                assert!(zero || block == pattern(1, lba, 512), "block {lba} torn");
            }
        }
    }

    #[test]
    fn readers_never_see_a_torn_write_within_a_chunk() {
        const BLOCKS: usize = 4;
        let store = Arc::new(Store::ram(u64::from(CHUNK_BLOCKS) * 512, 512).expect("ram store"));
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..2u8)
            .map(|writer| {
                let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
                thread::spawn(move || {
                    let mut value = writer;
                    while !stop.load(Relaxed) {
                        value = value.wrapping_add(2);
                        store.write(0, &[value; BLOCKS * 512]).expect("write");
                        match value % 64 {
                            0 => store.flush().expect("flush"),
                            32 => store.power_cut().expect("power cut"),
                            _ => {}
                        }
                    }
                })
            })
            .collect();
        let mut buf = vec![0; BLOCKS * 512];
        let mut seen = [false; 256];
        // At least 5,000 reads, and on a loaded machine (where the writers may not run during
        // those) more, until they saw several writes or 10 s passed.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut reads = 0;
        let distinct = |seen: &[bool; 256]| seen.iter().filter(|&&seen| seen).count();
        while reads < 5_000 || (distinct(&seen) <= 2 && std::time::Instant::now() < deadline) {
            store.read(0, &mut buf).expect("read");
            assert!(
                buf.iter().all(|&byte| byte == buf[0]),
                "torn read: {:?}",
                &buf[..16]
            );
            seen[usize::from(buf[0])] = true;
            reads += 1;
        }
        stop.store(true, Relaxed);
        writers
            .into_iter()
            .for_each(|writer| writer.join().expect("writer panicked"));
        let distinct = distinct(&seen);
        assert!(
            distinct > 2,
            "reads overlapped too few writes ({distinct} values) to test"
        );
    }

    /// One step of the model test.
    #[derive(Debug, Clone)]
    enum Op {
        Write { lba: u64, blocks: u64, tag: u8 },
        Read { lba: u64, blocks: u64 },
        WriteZeroes { lba: u64, blocks: u64 },
        Deallocate { lba: u64, blocks: u64 },
        Flush,
        PowerCut,
    }

    /// Three chunks and a partial one, so that I/O crosses chunk boundaries and the end.
    const MODEL_BLOCKS: u64 = 3 * CHUNK_BLOCKS as u64 + 5;

    fn range() -> impl Strategy<Value = (u64, u64)> {
        (0..MODEL_BLOCKS).prop_flat_map(|lba| (Just(lba), 1..=(MODEL_BLOCKS - lba).min(80)))
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (range(), any::<u8>())
                .prop_map(|((lba, blocks), tag)| Op::Write { lba, blocks, tag }),
            3 => range().prop_map(|(lba, blocks)| Op::Read { lba, blocks }),
            1 => range().prop_map(|(lba, blocks)| Op::WriteZeroes { lba, blocks }),
            1 => range().prop_map(|(lba, blocks)| Op::Deallocate { lba, blocks }),
            1 => Just(Op::Flush),
            1 => Just(Op::PowerCut),
        ]
    }

    /// Per block: the tag of the write that produced it, `None` for zeros.
    #[derive(Default)]
    struct Model {
        durable: HashMap<u64, Option<u8>>,
        cached: HashMap<u64, Option<u8>>,
    }

    impl Model {
        fn block(&self, lba: u64, block_bytes: usize) -> Vec<u8> {
            let newest = self
                .cached
                .get(&lba)
                .or(self.durable.get(&lba))
                .copied()
                .flatten();
            newest.map_or_else(
                || vec![0; block_bytes],
                |tag| pattern(tag, lba, block_bytes),
            )
        }

        fn blocks(&self, lba: u64, count: u64, block_bytes: usize) -> Vec<u8> {
            let mut blocks = Vec::with_capacity(count as usize * block_bytes);
            (lba..lba + count).for_each(|lba| blocks.extend(self.block(lba, block_bytes)));
            blocks
        }
    }

    fn check_against_model(store: &Store, ops: &[Op]) -> Result<(), TestCaseError> {
        let block_bytes = store.lba_size() as usize;
        let bytes = u64::from(store.lba_size());
        let mut model = Model::default();
        for op in ops {
            match *op {
                Op::Write { lba, blocks, tag } => {
                    write_blocks(store, tag, lba, blocks);
                    model
                        .cached
                        .extend((lba..lba + blocks).map(|lba| (lba, Some(tag))));
                }
                Op::Read { lba, blocks } => {
                    let expected = model.blocks(lba, blocks, block_bytes);
                    prop_assert!(read_blocks(store, lba, blocks) == expected, "{op:?}");
                }
                Op::WriteZeroes { lba, blocks } => {
                    store
                        .write_zeroes(lba * bytes, blocks * bytes)
                        .expect("write zeroes");
                    model
                        .cached
                        .extend((lba..lba + blocks).map(|lba| (lba, None)));
                }
                Op::Deallocate { lba, blocks } => {
                    store
                        .deallocate(lba * bytes, blocks * bytes)
                        .expect("deallocate");
                    model
                        .cached
                        .extend((lba..lba + blocks).map(|lba| (lba, None)));
                }
                Op::Flush => {
                    store.flush().expect("flush");
                    let cached = std::mem::take(&mut model.cached);
                    model.durable.extend(cached);
                }
                Op::PowerCut => {
                    store.power_cut().expect("power cut");
                    model.cached.clear();
                }
            }
        }
        let expected = model.blocks(0, MODEL_BLOCKS, block_bytes);
        prop_assert!(
            read_blocks(store, 0, MODEL_BLOCKS) == expected,
            "final contents"
        );
        store.power_cut().expect("power cut");
        let expected = Model {
            durable: model.durable,
            cached: HashMap::new(),
        };
        let expected = expected.blocks(0, MODEL_BLOCKS, block_bytes);
        prop_assert!(
            read_blocks(store, 0, MODEL_BLOCKS) == expected,
            "durable contents"
        );
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn ram_store_behaves_like_a_cache_over_durable_blocks(
            four_k in any::<bool>(),
            huge in any::<bool>(),
            ops in prop::collection::vec(op(), 1..40),
        ) {
            let lba_size = if four_k { 4096 } else { 512 };
            let pages = if huge { RamPages::Huge } else { RamPages::Base };
            let capacity = MODEL_BLOCKS * u64::from(lba_size);
            let store = Store::ram_with_pages(capacity, lba_size, pages).expect("store");
            check_against_model(&store, &ops)?;
            // After the final power cut: exactly the pages holding data count as resident.
            let contents = read_blocks(&store, 0, MODEL_BLOCKS);
            let pages = contents.chunks(4096).filter(|page| page.iter().any(|&b| b != 0));
            prop_assert_eq!(store.resident_bytes(), pages.count() as u64 * 4 * KIB);
        }
    }

    proptest! {
        // Each flush and power cut of a file store is an fdatasync: fewer cases.
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn file_store_behaves_like_a_cache_over_durable_blocks(
            four_k in any::<bool>(),
            ops in prop::collection::vec(op(), 1..40),
        ) {
            let lba_size = if four_k { 4096 } else { 512 };
            let (_file, store) = file_store(MODEL_BLOCKS * u64::from(lba_size), lba_size);
            check_against_model(&store, &ops)?;
        }
    }
}
