//! PData: the data engine of a worker (PeakFS §III-C). The data zone is divided into pages;
//! files into file blocks of `block_pages` pages. A bitmap hands each file block a run of
//! consecutive pages, and a hashtable maps (ino, block) to its run. The first block of a file
//! whose inode lives on this worker is mapped inside the inode instead (the caller keeps that
//! mapping); PData only moves bytes for it.
//!
//! A block gets as many pages as its highest written byte needs, rounded up to a power of two
//! so that appends rarely move it; a move copies the block to a new run and frees the old one.
//! Freed pages stay reserved until the WAL frame that frees them is durable, so a crash can
//! never expose a run that an acknowledged file still maps to new data.
//!
//! Small writes (a few pages: small files, the edges of larger writes) are staged in memory and
//! reach the device together in one batch ([`PData::write_out`]), which PStore runs before it
//! writes any WAL frame: a mapping never becomes durable before the data it maps, and a worker
//! pays one round trip to its NVMe queue per batch instead of one per small write. Reads see
//! staged pages.

use std::collections::BTreeMap;

use super::PStoreError;
use super::bitmap::Bitmap;
use super::table::{BlockTable, PageRun};
use super::wal::Record;
use super::zone::{PAGE, Zone};

/// The data engine state of one worker.
#[derive(Debug)]
pub struct PData {
    pub(super) pages: Bitmap,
    pub(super) blocks: BlockTable,
    block_pages: u32,
    /// Zone page of data page 0.
    base: u64,
    pending_free: Vec<PageRun>,
    /// Staged pages by zone page, newer than the device's copy.
    staged: BTreeMap<u64, Box<[u8]>>,
}

/// Writes of at most this many pages are staged.
const STAGE_PAGES: usize = 4;
/// Staged pages are written out once there are more than this many.
const STAGED_MAX: usize = 256;

impl PData {
    /// A data zone of `pages` pages starting at zone page `base`.
    pub fn new(base: u64, pages: Bitmap, blocks: BlockTable, block_pages: u32) -> Self {
        Self {
            pages,
            blocks,
            block_pages,
            base,
            pending_free: Vec::new(),
            staged: BTreeMap::new(),
        }
    }

    /// Reads whole pages at zone page `at`, staged pages over the device's copy.
    fn read_pages(&self, zone: &Zone, at: u64, buf: &mut [u8]) -> Result<(), PStoreError> {
        let end = at + (buf.len() / PAGE) as u64;
        if self.staged.range(at..end).count() < buf.len() / PAGE {
            zone.read(at, buf)?;
        }
        for (&p, page) in self.staged.range(at..end) {
            let i = (p - at) as usize * PAGE;
            buf[i..i + PAGE].copy_from_slice(page);
        }
        Ok(())
    }

    /// Writes whole pages at zone page `at`: a few pages are staged, more go to the device now
    /// (replacing any staged copy).
    fn write_pages(&mut self, zone: &Zone, at: u64, buf: &[u8]) -> Result<(), PStoreError> {
        let pages = buf.len() / PAGE;
        if pages > STAGE_PAGES {
            zone.write(at, buf)?;
            let end = at + pages as u64;
            let stale: Vec<u64> = self.staged.range(at..end).map(|(&p, _)| p).collect();
            for p in stale {
                self.staged.remove(&p);
            }
            return Ok(());
        }
        for (k, page) in buf.chunks_exact(PAGE).enumerate() {
            self.staged.insert(at + k as u64, page.into());
        }
        if self.staged.len() > STAGED_MAX {
            self.write_out(zone)?;
        }
        Ok(())
    }

    /// Writes every staged page to the device, consecutive pages as one run, all runs in
    /// flight together. On an error the pages stay staged (a later write-out retries them).
    pub fn write_out(&mut self, zone: &Zone) -> Result<(), PStoreError> {
        let mut runs: Vec<(u64, Vec<u8>)> = Vec::new();
        for (&p, page) in &self.staged {
            match runs.last_mut() {
                Some((start, buf)) if p == *start + (buf.len() / PAGE) as u64 => {
                    buf.extend_from_slice(page);
                }
                _ => runs.push((p, page.to_vec())),
            }
        }
        let runs: Vec<(u64, &[u8])> = runs.iter().map(|(p, b)| (*p, &b[..])).collect();
        zone.write_runs(&runs)?;
        self.staged.clear();
        Ok(())
    }

    /// Pages staged and not yet written to the device.
    pub fn staged_pages(&self) -> usize {
        self.staged.len()
    }

    /// Bytes of a file block.
    pub fn block_bytes(&self) -> usize {
        self.block_pages as usize * PAGE
    }

    /// The run mapped to `(ino, block)` in the hashtable (none: a hole).
    pub fn run_of(&self, ino: u64, block: u64) -> PageRun {
        self.blocks
            .get(&(ino, block))
            .copied()
            .unwrap_or(PageRun::NONE)
    }

    /// Blocks of `ino` in the hashtable (for removal of files whose size is unknown here).
    pub fn blocks_of(&self, ino: u64) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .blocks
            .keys()
            .filter(|k| k.0 == ino)
            .map(|k| k.1)
            .collect();
        v.sort_unstable();
        v
    }

    /// Applies a record to the bitmap or the hashtable; `live` defers page frees to the commit.
    /// Returns `false` for records of other components.
    pub fn apply(&mut self, rec: &Record, live: bool) -> Result<bool, PStoreError> {
        match rec {
            Record::PageAlloc { run } => {
                self.pages.set_run(run.start, u64::from(run.pages))?;
            }
            Record::PageFree { run } if live => self.pending_free.push(*run),
            Record::PageFree { run } => self.pages.clear_run(run.start, u64::from(run.pages))?,
            Record::BlockMap { ino, block, run } => {
                self.blocks.insert((*ino, *block), *run);
            }
            Record::BlockUnmap { ino, block } => {
                self.blocks.remove(&(*ino, *block));
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Releases the pages of frees that are now durable.
    pub fn commit_frees(&mut self) -> Result<(), PStoreError> {
        for run in std::mem::take(&mut self.pending_free) {
            self.pages.clear_run(run.start, u64::from(run.pages))?;
        }
        Ok(())
    }

    /// Pages whose free is not yet durable.
    pub fn pending_free_pages(&self) -> u64 {
        self.pending_free.iter().map(|r| u64::from(r.pages)).sum()
    }

    fn alloc(&mut self, pages: u32, tx: &mut Vec<Record>) -> Result<PageRun, PStoreError> {
        let start = self
            .pages
            .alloc_run(u64::from(pages))
            .ok_or(PStoreError::NoSpace("data pages"))?;
        let run = PageRun { start, pages };
        tx.push(Record::PageAlloc { run });
        Ok(run)
    }

    /// Frees a run (durably at the next commit).
    pub fn free(&mut self, run: PageRun, tx: &mut Vec<Record>) {
        if !run.is_none() {
            tx.push(Record::PageFree { run });
            self.pending_free.push(run);
        }
    }

    /// Maps `(ino, block)` to `run` in the hashtable (`NONE` unmaps).
    pub fn map(&mut self, ino: u64, block: u64, run: PageRun, tx: &mut Vec<Record>) {
        let rec = if run.is_none() {
            Record::BlockUnmap { ino, block }
        } else {
            Record::BlockMap { ino, block, run }
        };
        // Cannot fail: map records touch the hashtable only.
        let _ = self.apply(&rec, true);
        tx.push(rec);
    }

    /// Writes `data` at byte `off` of a block mapped to `run`; returns the block's run, which
    /// is new when the block needed more pages.
    pub fn write_block(
        &mut self,
        zone: &Zone,
        run: PageRun,
        off: usize,
        data: &[u8],
        tx: &mut Vec<Record>,
    ) -> Result<PageRun, PStoreError> {
        let end = off + data.len();
        let need = end.div_ceil(PAGE) as u32;
        if need > self.block_pages {
            return Err(PStoreError::Invalid(format!(
                "write of {}..{end} crosses a block of {} bytes",
                off,
                self.block_bytes()
            )));
        }
        let whole_pages = off.is_multiple_of(PAGE) && end.is_multiple_of(PAGE);
        if run.pages >= need {
            let first = off / PAGE;
            if whole_pages {
                // Nothing of the old pages survives: the data goes to the device as it is.
                self.write_pages(zone, self.base + run.start + first as u64, data)?;
                return Ok(run);
            }
            let pages = need as usize - first;
            let mut buf = vec![0u8; pages * PAGE];
            let at = self.base + run.start + first as u64;
            if !off.is_multiple_of(PAGE) {
                self.read_pages(zone, at, &mut buf[..PAGE])?;
            }
            if !end.is_multiple_of(PAGE) && (pages > 1 || off.is_multiple_of(PAGE)) {
                let last = (pages - 1) * PAGE;
                self.read_pages(zone, at + pages as u64 - 1, &mut buf[last..])?;
            }
            buf[off - first * PAGE..end - first * PAGE].copy_from_slice(data);
            self.write_pages(zone, at, &buf)?;
            return Ok(run);
        }
        let pages = need.next_power_of_two().min(self.block_pages);
        let new = self.alloc(pages, tx)?;
        if off == 0 && data.len() == pages as usize * PAGE {
            // The data fills the new run and replaces all of the old one.
            self.write_pages(zone, self.base + new.start, data)?;
            self.free(run, tx);
            return Ok(new);
        }
        // Zero-filled so that bytes never written read as zeros after a later extension.
        let mut buf = vec![0u8; pages as usize * PAGE];
        if !run.is_none() {
            self.read_pages(
                zone,
                self.base + run.start,
                &mut buf[..run.pages as usize * PAGE],
            )?;
        }
        buf[off..end].copy_from_slice(data);
        self.write_pages(zone, self.base + new.start, &buf)?;
        self.free(run, tx);
        Ok(new)
    }

    /// Reads `out.len()` bytes at byte `off` of a block mapped to `run` (holes read zeros).
    pub fn read_block(
        &self,
        zone: &Zone,
        run: PageRun,
        off: usize,
        out: &mut [u8],
    ) -> Result<(), PStoreError> {
        let mapped = run.pages as usize * PAGE;
        let end = off + out.len();
        if off.is_multiple_of(PAGE) && end.is_multiple_of(PAGE) && end <= mapped {
            // Whole mapped pages: straight into `out`.
            return self.read_pages(zone, self.base + run.start + (off / PAGE) as u64, out);
        }
        out.fill(0);
        if off >= mapped {
            return Ok(());
        }
        let first = off / PAGE;
        let last = end.min(mapped).div_ceil(PAGE);
        let mut buf = vec![0u8; (last - first) * PAGE];
        self.read_pages(zone, self.base + run.start + first as u64, &mut buf)?;
        let n = end.min(mapped) - off;
        out[..n].copy_from_slice(&buf[off - first * PAGE..off - first * PAGE + n]);
        Ok(())
    }

    /// Cuts a block to its first `keep` bytes: frees pages past them and zeroes the rest of
    /// the last kept page. Returns the block's new run.
    pub fn shrink_block(
        &mut self,
        zone: &Zone,
        run: PageRun,
        keep: usize,
        tx: &mut Vec<Record>,
    ) -> Result<PageRun, PStoreError> {
        let keep_pages = keep.div_ceil(PAGE) as u32;
        if keep_pages >= run.pages && keep >= run.pages as usize * PAGE {
            return Ok(run);
        }
        if keep_pages == 0 {
            self.free(run, tx);
            return Ok(PageRun::NONE);
        }
        let mut kept = run;
        if keep_pages < run.pages {
            self.free(
                PageRun {
                    start: run.start + u64::from(keep_pages),
                    pages: run.pages - keep_pages,
                },
                tx,
            );
            kept.pages = keep_pages;
        }
        if !keep.is_multiple_of(PAGE) {
            let at = self.base + run.start + u64::from(keep_pages) - 1;
            let mut page = vec![0u8; PAGE];
            self.read_pages(zone, at, &mut page)?;
            page[keep % PAGE..].fill(0);
            self.write_pages(zone, at, &page)?;
        }
        Ok(kept)
    }
}
