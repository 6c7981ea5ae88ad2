//! Data movement of a software controller: PRPs to memory segments, and the copies into and
//! out of host or GPU memory.
//!
//! Host memory is reached directly (the controller's "DMA"). GPU memory is reached with the
//! GPU's copy engines: reads land in a page-locked bounce buffer and go up in a batch of
//! asynchronous host-to-device copies that the worker waits for once per batch, before it posts
//! the batch's completions. The alternative, the GPU pulling from a bounce slot that the
//! submitter names in its PRP, needs nothing from the controller: the PRP then points at host
//! memory (see `cuda/nvme.cuh`).

use std::io;

use crate::cuda::{CopyRange, Gpu, PinnedBuffer, Stream};
use crate::memory::{DmaMap, DmaView, RegionKind};
use crate::spec::{self, Status, SubmissionEntry};

/// Whether a backing store refused a write with `errno` for want of space (a sparse
/// namespace file on a full file system, a quota): the command then fails with Capacity
/// Exceeded, so that the host reads the cause and not a media fault.
pub fn out_of_space(errno: Option<i32>) -> bool {
    matches!(errno, Some(libc::ENOSPC | libc::EDQUOT))
}

/// The status of a write `sink` refused with `e`.
fn sink_status(e: &io::Error) -> Status {
    if out_of_space(e.raw_os_error()) {
        Status::capacity_exceeded()
    } else {
        Status::data_transfer_error()
    }
}

/// Largest transfer (MDTS): 2 MiB with 4 KiB pages (the controllers' CC.MPS = 0).
pub const MAX_TRANSFER: u64 = spec::DEFAULT_MAX_TRANSFER as u64;
/// Bounce buffer of one worker for GPU copies.
const BOUNCE_BYTES: usize = 8 << 20;

/// A contiguous piece of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Host pointer (host memory) or device pointer (GPU memory).
    pub addr: u64,
    /// Bytes.
    pub len: usize,
    /// Where it lives.
    pub kind: RegionKind,
}

/// The segments of one transfer: inline for the usual one or two, listed for PRP lists.
#[derive(Debug, Clone)]
pub enum Segments {
    /// Up to two segments (the first `usize` of the array are used).
    Inline([Segment; 2], usize),
    /// Any number of segments.
    Listed(Vec<Segment>),
}

impl std::ops::Deref for Segments {
    type Target = [Segment];

    fn deref(&self) -> &[Segment] {
        match self {
            Self::Inline(segs, n) => &segs[..*n],
            Self::Listed(segs) => segs,
        }
    }
}

/// A worker's copy engine for GPU memory: a stream and a page-locked bounce buffer.
#[derive(Debug)]
pub struct GpuCopier {
    stream: Stream,
    bounce: PinnedBuffer,
    used: usize,
    pending: Vec<CopyRange>,
}

impl GpuCopier {
    /// A copier with its own stream.
    pub fn new(gpu: &Gpu) -> Result<Self, crate::cuda::CudaError> {
        Ok(Self {
            stream: gpu.new_stream()?,
            bounce: PinnedBuffer::new(gpu, BOUNCE_BYTES)?,
            used: 0,
            pending: Vec::new(),
        })
    }

    /// Sends every staged copy in one batch and waits for it.
    fn wait(&mut self) -> Result<(), Status> {
        if !self.pending.is_empty() {
            // SAFETY: each range's source is a part of the bounce buffer that nothing touches
            // until `used` is reset below, and each destination was resolved inside registered
            // GPU memory.
            unsafe { self.stream.copy_batch_async(&self.pending) }
                .and_then(|()| self.stream.synchronize())
                .map_err(|_| Status::data_transfer_error())?;
            self.pending.clear();
        }
        self.used = 0;
        Ok(())
    }
}

/// Resolves and performs the data transfers of one worker.
#[derive(Debug)]
pub struct DataPath<'a> {
    view: DmaView<'a>,
    gpu: Option<GpuCopier>,
    prp: spec::PrpConfig,
}

impl<'a> DataPath<'a> {
    /// A data path over `dma`; GPU memory is reachable only with a copier.
    pub fn new(dma: &'a DmaMap, gpu: Option<GpuCopier>) -> Self {
        Self {
            view: dma.view(),
            gpu,
            prp: spec::PrpConfig::default(),
        }
    }

    /// Picks up regions registered since the last call.
    pub fn refresh(&mut self) {
        self.view.refresh();
    }

    /// The segments of the `len`-byte transfer that `sqe`'s PRPs describe.
    ///
    /// Misaligned or short PRPs are Invalid Field; addresses outside registered memory (or a
    /// PRP list in GPU memory) are Data Transfer Error.
    pub fn segments(&self, sqe: &SubmissionEntry, len: u64) -> Result<Segments, Status> {
        // Most commands name at most two pages: no list to read, no walker, no allocation.
        if let Some(found) = two_page_segments(sqe.prp1, sqe.prp2, len) {
            let (pieces, n) = found?;
            let mut out = [Segment {
                addr: 0,
                len: 0,
                kind: RegionKind::Host,
            }; 2];
            for (slot, &(addr, seg_len)) in out.iter_mut().zip(&pieces[..n]) {
                let r = self
                    .view
                    .resolve(addr, seg_len)
                    .ok_or_else(Status::data_transfer_error)?;
                *slot = Segment {
                    addr,
                    len: seg_len as usize,
                    kind: r.kind,
                };
            }
            return Ok(Segments::Inline(out, n));
        }
        let view = &self.view;
        let read_list = |addr: u64, entries: &mut [u64]| -> Result<(), ()> {
            let bytes = entries.len() as u64 * 8;
            match view.resolve(addr, bytes) {
                Some(r) if r.kind == RegionKind::Host => {
                    for (i, e) in entries.iter_mut().enumerate() {
                        // SAFETY: resolved inside registered host memory; unaligned reads are
                        // allowed, and the list is not written while the command is in flight.
                        *e = unsafe { std::ptr::read_unaligned((r.addr as *const u64).add(i)) };
                    }
                    Ok(())
                }
                _ => Err(()),
            }
        };
        let pieces = spec::prp_segments(sqe.prp1, sqe.prp2, len, &self.prp, read_list)
            .map_err(|e| e.status())?;
        let mut out: Vec<Segment> = Vec::with_capacity(pieces.len());
        for (addr, seg_len) in pieces {
            let r = view
                .resolve(addr, u64::from(seg_len))
                .ok_or_else(Status::data_transfer_error)?;
            out.push(Segment {
                addr,
                len: seg_len as usize,
                kind: r.kind,
            });
        }
        Ok(Segments::Listed(out))
    }

    /// Fills the segments, in order, from `fill(offset_in_transfer, buffer)`: the controller
    /// writes into host or GPU memory (a Read command).
    pub fn read_into(
        &mut self,
        segs: &[Segment],
        mut fill: impl FnMut(u64, &mut [u8]) -> io::Result<()>,
    ) -> Result<(), Status> {
        let mut pos = 0u64;
        for seg in segs {
            match seg.kind {
                RegionKind::Host => {
                    // SAFETY: the segment was resolved inside registered host memory, which the
                    // submitter leaves alone until the command completes (DMA contract).
                    let buf =
                        unsafe { std::slice::from_raw_parts_mut(seg.addr as *mut u8, seg.len) };
                    fill(pos, buf).map_err(|_| Status::data_transfer_error())?;
                }
                RegionKind::Device => {
                    let copier = self.gpu.as_mut().ok_or_else(Status::data_transfer_error)?;
                    let mut done = 0;
                    while done < seg.len {
                        let chunk = (seg.len - done).min(BOUNCE_BYTES);
                        if copier.used + chunk > BOUNCE_BYTES {
                            copier.wait()?;
                        }
                        let at = copier.used;
                        // SAFETY: at + chunk <= BOUNCE_BYTES; this slice of the bounce buffer
                        // is not the source of a copy in flight (those lie below `at`).
                        let buf = unsafe {
                            std::slice::from_raw_parts_mut(
                                copier.bounce.as_mut_ptr().add(at),
                                chunk,
                            )
                        };
                        fill(pos + done as u64, buf).map_err(|_| Status::data_transfer_error())?;
                        copier.pending.push(CopyRange::htod(
                            seg.addr + done as u64,
                            buf.as_ptr(),
                            chunk,
                        ));
                        copier.used += chunk;
                        done += chunk;
                    }
                }
            }
            pos += seg.len as u64;
        }
        Ok(())
    }

    /// Drains the segments, in order, into `sink(offset_in_transfer, data)`: the controller
    /// reads host or GPU memory (a Write command). A sink out of space fails the command with
    /// Capacity Exceeded ([`out_of_space`]), any other sink error with Data Transfer Error.
    pub fn write_from(
        &mut self,
        segs: &[Segment],
        mut sink: impl FnMut(u64, &[u8]) -> io::Result<()>,
    ) -> Result<(), Status> {
        let mut pos = 0u64;
        for seg in segs {
            match seg.kind {
                RegionKind::Host => {
                    // SAFETY: resolved inside registered host memory (DMA contract, as above).
                    let buf = unsafe { std::slice::from_raw_parts(seg.addr as *const u8, seg.len) };
                    sink(pos, buf).map_err(|e| sink_status(&e))?;
                }
                RegionKind::Device => {
                    let copier = self.gpu.as_mut().ok_or_else(Status::data_transfer_error)?;
                    copier.wait()?;
                    let mut done = 0;
                    while done < seg.len {
                        let chunk = (seg.len - done).min(BOUNCE_BYTES);
                        let dst = copier.bounce.as_mut_ptr();
                        // SAFETY: no copy is in flight (waited above); chunk fits the bounce.
                        unsafe {
                            copier
                                .stream
                                .copy_dtoh_async(dst, seg.addr + done as u64, chunk)
                        }
                        .and_then(|()| copier.stream.synchronize())
                        .map_err(|_| Status::data_transfer_error())?;
                        // SAFETY: the copy above completed into these `chunk` bytes.
                        let buf = unsafe { std::slice::from_raw_parts(dst, chunk) };
                        sink(pos + done as u64, buf).map_err(|e| sink_status(&e))?;
                        done += chunk;
                    }
                }
            }
            pos += seg.len as u64;
        }
        Ok(())
    }

    /// Copies `src` into the segments (Identify pages and other controller-made data).
    pub fn copy_to_host_memory(&mut self, segs: &[Segment], src: &[u8]) -> Result<(), Status> {
        self.read_into(segs, |off, buf| {
            let off = off as usize;
            let n = buf.len().min(src.len().saturating_sub(off));
            buf[..n].copy_from_slice(&src[off..off + n]);
            Ok(())
        })?;
        self.finish()
    }

    /// Starts loading the lines of `sqe`'s `len`-byte buffer into the cache (see
    /// [`crate::memory::prefetch`]), for writing when the command reads the namespace into
    /// them. Only buffers of one or two pages (PRP lists are left alone); the PRPs are not
    /// resolved, as a prefetch never faults (GPU addresses are simply not cached).
    pub fn prefetch(&self, sqe: &SubmissionEntry, len: u64) {
        let fill = sqe.opcode() == crate::spec::IoOpcode::Read.code();
        if let Some(Ok((pieces, n))) = two_page_segments(sqe.prp1, sqe.prp2, len) {
            for &(addr, len) in &pieces[..n] {
                if fill {
                    crate::memory::prefetch_for_write(addr as *const u8, len as usize);
                } else {
                    crate::memory::prefetch(addr as *const u8, len as usize);
                }
            }
        }
    }

    /// Whether copies into GPU memory were sent that [`finish`](Self::finish) has not waited
    /// for yet.
    pub fn copies_pending(&self) -> bool {
        self.gpu.as_ref().is_some_and(|c| !c.pending.is_empty())
    }

    /// Waits until every copy into GPU memory has landed; call before posting completions.
    pub fn finish(&mut self) -> Result<(), Status> {
        match self.gpu.as_mut() {
            Some(copier) => copier.wait(),
            None => Ok(()),
        }
    }
}

/// Up to two `(address, length)` pieces and how many of them are used.
type TwoPages = ([(u64, u64); 2], usize);

/// The pieces of a transfer that spans at most two memory pages, validated as the general PRP
/// walker validates them; `None` when the transfer needs a PRP list.
fn two_page_segments(prp1: u64, prp2: u64, len: u64) -> Option<Result<TwoPages, Status>> {
    const PAGE: u64 = 4096;
    let first = PAGE - prp1 % PAGE;
    if len == 0 || len > first + PAGE {
        return None;
    }
    if prp1 == 0 || !prp1.is_multiple_of(4) || prp1.checked_add(len).is_none() {
        return Some(Err(Status::invalid_field()));
    }
    if len <= first {
        return Some(Ok(([(prp1, len), (0, 0)], 1)));
    }
    if prp2 == 0 || !prp2.is_multiple_of(PAGE) {
        return Some(Err(Status::invalid_field()));
    }
    if prp1 + first == prp2 {
        return Some(Ok(([(prp1, len), (0, 0)], 1)));
    }
    Some(Ok(([(prp1, first), (prp2, len - first)], 2)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The allocation-free fast path agrees with the general PRP walker on every transfer
        /// of at most two pages: same segments, or an error in both.
        #[test]
        fn two_page_fast_path_agrees_with_the_walker(
            prp1 in prop_oneof![Just(0u64), 0u64..1 << 20, (1u64..256).prop_map(|p| p * 4096)],
            prp2 in prop_oneof![Just(0u64), 0u64..1 << 20, (1u64..256).prop_map(|p| p * 4096)],
            len in 1u64..=8192,
        ) {
            let walked = spec::prp_segments(prp1, prp2, len, &spec::PrpConfig::default(), |_, _| Err(()));
            if let Some(fast) = two_page_segments(prp1, prp2, len) {
                match (fast, walked) {
                    (Ok((pieces, n)), Ok(segs)) => {
                        let fast: Vec<(u64, u64)> = pieces[..n].to_vec();
                        let slow: Vec<(u64, u64)> = segs.iter().map(|&(a, l)| (a, u64::from(l))).collect();
                        prop_assert_eq!(fast, slow);
                    }
                    (Err(a), Err(b)) => prop_assert_eq!(a, b.status()),
                    (fast, slow) => prop_assert!(false, "fast {:?} but walker {:?}", fast, slow),
                }
            }
        }
    }
}
