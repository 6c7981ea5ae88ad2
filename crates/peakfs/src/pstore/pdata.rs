//! PData: the data engine of a worker (PeakFS §III-C). The data zone is divided into pages;
//! files into file blocks of `block_pages` pages. A bitmap hands each file block a run of
//! consecutive pages, and a hashtable maps (ino, block) to its run. The first block of a file
//! whose inode lives on this worker is mapped inside the inode instead (the caller keeps that
//! mapping); PData only moves bytes for it.
//!
//! A block gets the pages from its lowest to its highest written byte, rounded up to a power
//! of two so that appends rarely move it (a block written only from its middle takes no pages
//! for its head); a move copies the block to a new run and frees the old one.
//!
//! An I/O unit of a file with I/O-based distribution (§III-C1) is an extent of its own
//! ([`BlockKeys::Extent`]): its blocks are counted from its first byte, so its pages start
//! with that byte, hold nothing of any other unit (an unaligned N-1 transfer, one unit, needs
//! no read of a neighbour's page, and two transfers never share one) and, written whole, get
//! exactly the pages its bytes need: a new extent run is not rounded up to grow; the rest of
//! its last page reads as blanks.
//! Freed pages stay reserved until the WAL frame that frees them is durable, so a crash can
//! never expose a run that an acknowledged file still maps to new data.
//!
//! Small writes (a few pages: small files, the edges of larger writes) are staged in memory and
//! reach the device together in one batch ([`PData::write_out`]), which PStore runs before it
//! writes any WAL frame, with a flush between them whenever data pages went out since the last
//! one ([`PData::take_unflushed`]): a mapping never becomes durable before the data it maps,
//! even on a drive whose cache writes blocks back in any order, and a worker pays one round
//! trip to its NVMe queue per batch instead of one per small write. Reads see staged pages.
//! An Icache write-back, whose log goes out behind the worker, hands the staged pages to the
//! write-out below instead of waiting for them, and its batch's flush waits for that.
//!
//! A batch that fills up between commits goes out on the worker's write-back queue without
//! being waited for: the write that fills it only hands its pages over, and the pumps after
//! its reply ([`PData::pump_writing`], run between requests) copy them into the batch a few
//! dozen at a time, submit them and later take the completion. Its pages stay readable from
//! memory until the device has them, at most one such batch is in flight (the next waits for
//! it, so two writes of one page are never in flight together), and everything that must
//! follow data on the device (a flush before a log write, a direct write of the same pages)
//! waits for it first. A failed batch's pages are staged again, so the next write-out (at the
//! latest the commit, whose caller gets the error) retries them.

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;

use super::PStoreError;
use super::bitmap::Bitmap;
use super::table::{BlockTable, PageRun};
use super::wal::Record;
use super::zone::{KeyedPages, LateBytes, PAGE, WriteBehind, Zone, ZoneError};

/// Where the bytes of a read come from ([`PData::plan_block`]): every byte of the buffer
/// belongs to exactly one whole-page run, partial page or hole.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ReadPlan {
    /// `(first zone page, bytes of the buffer)`: whole mapped pages, read straight into the
    /// buffer, in the buffer's order.
    whole: Vec<(u64, Range<usize>)>,
    /// `(zone page, bytes within the page, where they go in the buffer)`: pages only part of
    /// which is read.
    partial: Vec<(u64, Range<usize>, usize)>,
    /// Bytes of the buffer that no mapped page holds: zeros.
    holes: Vec<Range<usize>>,
}

/// The data engine state of one worker.
#[derive(Debug)]
pub struct PData {
    pub(super) pages: Bitmap,
    pub(super) blocks: BlockTable,
    block_pages: u32,
    /// Zone page of data page 0.
    base: u64,
    /// Frees of the transaction being built, not yet in the log.
    pending_free: Vec<PageRun>,
    /// Frees in the log, not yet durable: each with the log's length after its frame
    /// ([`Self::frees_logged`]), in log order.
    logged_free: VecDeque<(u64, PageRun)>,
    /// Staged pages by zone page, newer than the device's copy.
    staged: BTreeMap<u64, Box<[u8]>>,
    /// Pages of the write-out in flight on the write-back queue (older than `staged`, newer
    /// than the device's copy until `writing` completes).
    writing: BTreeMap<u64, Box<[u8]>>,
    /// The write-out in flight: the pages of `writing` staged by zone page
    /// ([`Zone::stage_keyed`]), each copied into its command's bounce slot when it is sent.
    batch: WriteBehind,
    /// Data pages were written to the device since the last flush.
    unflushed: bool,
    /// Write-outs on the write-back queue that failed, ever (see [`Self::write_out_failures`]).
    failed_write_outs: u64,
}

/// Device writes of whole pages gathered for one request, `(zone page, bytes)`: the client's
/// own bytes where whole pages are written, a merged copy where a write meets old pages.
pub type DirectWrites<'a> = Vec<(u64, Cow<'a, [u8]>)>;

/// What a write that finds no run of free pages reports ([`PStoreError::NoSpace`]).
pub(super) const NO_DATA_PAGES: &str = "data pages";
/// Writes of at most this many pages are staged.
const STAGE_PAGES: usize = 4;
/// Staged pages are written out once there are more than this many.
const STAGED_MAX: usize = 256;
/// Zeros that pad fresh runs on the device (16 pages at a time), page aligned: the controller
/// takes a buffer directly only from a dword-aligned address (`Zone::write_runs`), which a
/// byte array does not promise (a constant of zeros of the format landed at an odd one).
#[repr(C, align(4096))]
struct ZeroPages([u8; 16 * PAGE]);
static ZERO_PAGES: ZeroPages = ZeroPages([0; 16 * PAGE]);
const _: () = assert!(align_of::<ZeroPages>() == PAGE && size_of::<ZeroPages>() == 16 * PAGE);

/// Set in the hashtable key of an extent's block; file blocks are numbered from 0, far below.
const EXTENT_KEY: u64 = 1 << 63;

/// How the bytes of a write or read map to hashtable keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKeys {
    /// File blocks: byte `pos` of the file is byte `pos % bs` of block `pos / bs`.
    File,
    /// The extent (I/O unit) starting at byte `origin`: its blocks are counted from `origin`
    /// and keyed by their first byte's file offset with [`EXTENT_KEY`] set.
    Extent {
        /// File offset of the extent's first byte (below 2^63).
        origin: u64,
    },
}

impl BlockKeys {
    /// The key of the block holding file byte `pos` (of an I/O keyed this way), `pos`'s offset
    /// in that block, and the file offset where the block ends.
    pub fn locate(self, pos: u64, block_bytes: u64) -> (u64, usize, u64) {
        match self {
            BlockKeys::File => (
                pos / block_bytes,
                (pos % block_bytes) as usize,
                (pos / block_bytes + 1) * block_bytes,
            ),
            BlockKeys::Extent { origin } => {
                let into = pos - origin;
                let start = origin + into / block_bytes * block_bytes;
                (
                    EXTENT_KEY | start,
                    (into % block_bytes) as usize,
                    start + block_bytes,
                )
            }
        }
    }

    /// The file offset of the first byte of the block with hashtable key `key`.
    pub fn start_of(key: u64, block_bytes: u64) -> u64 {
        if key & EXTENT_KEY != 0 {
            key & !EXTENT_KEY
        } else {
            key * block_bytes
        }
    }
}

/// One block's part of a write ([`PData::write_block`]).
#[derive(Debug, Clone, Copy)]
pub struct BlockWrite<'a> {
    /// The block's run (none: a hole).
    pub run: PageRun,
    /// Byte of the block where `data` starts.
    pub off: usize,
    /// The bytes.
    pub data: &'a [u8],
    /// A new run gets room to grow (its length a power of two within the block), as a file
    /// block appended to may need; otherwise just the pages the block's bytes need (an
    /// extent's, mostly written whole).
    pub grows: bool,
}

/// The pages of a write-out by zone page: what its keyed writes send.
impl KeyedPages for BTreeMap<u64, Box<[u8]>> {
    fn page(&self, key: u64) -> Option<&[u8]> {
        self.get(&key).map(|p| &p[..])
    }
}

impl PData {
    /// A data zone of `pages` pages starting at zone page `base`.
    pub fn new(base: u64, pages: Bitmap, blocks: BlockTable, block_pages: u32) -> Self {
        Self {
            pages,
            blocks,
            block_pages,
            base,
            pending_free: Vec::new(),
            logged_free: VecDeque::new(),
            staged: BTreeMap::new(),
            writing: BTreeMap::new(),
            batch: WriteBehind::small(),
            unflushed: false,
            failed_write_outs: 0,
        }
    }

    /// The data zone with its write-outs on host queue `queue` (`None`: the zone's write-back
    /// queue).
    pub fn with_write_out_queue(mut self, queue: Option<usize>) -> Self {
        self.batch.on_queue(queue);
        self
    }

    /// Reads whole pages at zone page `at`, staged pages over the device's copy.
    fn read_pages(&self, zone: &Zone, at: u64, buf: &mut [u8]) -> Result<(), PStoreError> {
        self.read_direct(zone, &mut [(at, buf)])
    }

    /// Reads runs of whole pages, each `(zone page, buffer)`, staged pages (and those of the
    /// write-out in flight) over the device's copy: the device reads of all runs are in flight
    /// together (the blocks of one READ request, planned by [`PData::plan_block`]).
    fn read_direct(&self, zone: &Zone, runs: &mut [(u64, &mut [u8])]) -> Result<(), PStoreError> {
        let in_memory = |at: u64, buf: &[u8]| {
            let pages = at..at + (buf.len() / PAGE) as u64;
            let writing = self.writing.range(pages.clone());
            self.staged.range(pages).count()
                + writing
                    .filter(|(p, _)| !self.staged.contains_key(p))
                    .count()
        };
        let mut device: Vec<(u64, &mut [u8])> = runs
            .iter_mut()
            .filter(|(at, buf)| in_memory(*at, buf) < buf.len() / PAGE)
            .map(|(at, buf)| (*at, &mut **buf))
            .collect();
        zone.read_runs(&mut device)?;
        for (at, buf) in runs.iter_mut() {
            let end = *at + (buf.len() / PAGE) as u64;
            // The older copy first: a staged page replaces the one being written.
            for (&p, page) in self
                .writing
                .range(*at..end)
                .chain(self.staged.range(*at..end))
            {
                let i = (p - *at) as usize * PAGE;
                buf[i..i + PAGE].copy_from_slice(page);
            }
        }
        Ok(())
    }

    /// Puts whole pages at zone page `at`: a few pages are staged; more join `direct`, the
    /// device writes that [`PData::write_direct`] sends together.
    fn put_pages<'a>(
        &mut self,
        zone: &Zone,
        at: u64,
        buf: Cow<'a, [u8]>,
        direct: &mut DirectWrites<'a>,
    ) -> Result<(), PStoreError> {
        if buf.len() / PAGE > STAGE_PAGES {
            direct.push((at, buf));
            return Ok(());
        }
        self.stage(zone, at, buf)
    }

    /// Puts the `pages` pages from zone page `at` on: `data` at byte `lead` (less than a page)
    /// of the first, zeros around it. Only the partial first and last pages are built here;
    /// the whole pages between are `data` itself and the pages after it a shared zero page.
    fn put_zero_padded<'a>(
        &mut self,
        zone: &Zone,
        at: u64,
        pages: usize,
        lead: usize,
        data: &'a [u8],
        direct: &mut DirectWrites<'a>,
    ) -> Result<(), PStoreError> {
        debug_assert!(lead < PAGE && lead + data.len() <= pages * PAGE);
        let (mut page, mut used) = (0usize, 0usize);
        if lead > 0 || data.len() < PAGE {
            let n = (PAGE - lead).min(data.len());
            let mut first = vec![0u8; PAGE];
            first[lead..lead + n].copy_from_slice(&data[..n]);
            self.put_pages(zone, at, Cow::Owned(first), direct)?;
            (page, used) = (1, n);
        }
        let whole = (data.len() - used) / PAGE;
        if whole > 0 {
            let middle = &data[used..used + whole * PAGE];
            self.put_pages(zone, at + page as u64, Cow::Borrowed(middle), direct)?;
            page += whole;
            used += whole * PAGE;
        }
        if used < data.len() {
            let mut last = vec![0u8; PAGE];
            last[..data.len() - used].copy_from_slice(&data[used..]);
            self.put_pages(zone, at + page as u64, Cow::Owned(last), direct)?;
            page += 1;
        }
        while page < pages {
            let n = (pages - page).min(ZERO_PAGES.0.len() / PAGE);
            let zeros = Cow::Borrowed(&ZERO_PAGES.0[..n * PAGE]);
            self.put_pages(zone, at + page as u64, zeros, direct)?;
            page += n;
        }
        Ok(())
    }

    /// Stages whole pages at zone page `at` (sent to the device once too many are staged).
    fn stage(&mut self, zone: &Zone, at: u64, buf: Cow<'_, [u8]>) -> Result<(), PStoreError> {
        match buf {
            // A page built for this write (a small file's) is kept as it is, not copied.
            Cow::Owned(page) if page.len() == PAGE => {
                self.staged.insert(at, page.into_boxed_slice());
            }
            buf => {
                for (k, page) in buf.chunks_exact(PAGE).enumerate() {
                    self.staged.insert(at + k as u64, page.into());
                }
            }
        }
        if self.staged.len() > STAGED_MAX {
            self.start_write_out(zone)?;
        }
        Ok(())
    }

    /// Sends every staged page to the device on the write-back queue without waiting (a zone
    /// without one writes them out now), after the write-out still in flight, if any.
    /// The write that calls this only hands the pages over, copying nothing: each command
    /// copies its pages from `writing`, which keeps them until the write-out completed, when
    /// the next pumps (after its reply), or whatever waits for them first, submit it. Copied
    /// into the batch instead, a full stage (1 MB) held the worker 0.2 ms, or 50-110 us a
    /// pump when spread over pumps (bench/results/2026-11-27-peakfs-icache-late-copy, call G).
    /// An Icache write-back hands over the pages its log names this way, and its batch waits
    /// for them ([`Self::write_out_failures`]). A page that cannot be staged (outside the
    /// zone) ends the write-out: every page goes back to the stage.
    pub(super) fn start_write_out(&mut self, zone: &Zone) -> Result<(), PStoreError> {
        if !zone.writes_behind() {
            return self.write_out(zone);
        }
        self.finish_writing(zone)?;
        if self.staged.is_empty() {
            return Ok(());
        }
        self.writing = std::mem::take(&mut self.staged);
        self.unflushed = true;
        let staged = zone.stage_keys(&mut self.batch, 0, self.writing.keys().copied());
        if let Err(e) = staged {
            let _ = zone.abandon(&mut self.batch);
            return self.complete_writing(Err(e));
        }
        Ok(())
    }

    /// Takes the result of the write-out that completed: its pages leave memory, or, if it
    /// failed, are staged again (under any newer staged copy).
    fn complete_writing(&mut self, r: Result<(), ZoneError>) -> Result<(), PStoreError> {
        let written = std::mem::take(&mut self.writing);
        if let Err(e) = r {
            self.failed_write_outs += 1;
            for (p, page) in written {
                self.staged.entry(p).or_insert(page);
            }
            return Err(e.into());
        }
        Ok(())
    }

    /// Moves the write-out in flight on without waiting; returns whether it is still in
    /// flight. A failed one is returned here (its pages staged again).
    pub fn pump_writing(&mut self, zone: &Zone) -> Result<bool, PStoreError> {
        if self.writing.is_empty() {
            return Ok(false);
        }
        let late = LateBytes {
            shared: &[],
            pages: &self.writing,
        };
        match zone.pump(&mut self.batch, &late) {
            None => Ok(true),
            Some(r) => self.complete_writing(r).map(|()| false),
        }
    }

    /// Whether a write-out is in flight (or handed over and not yet complete).
    pub(super) fn is_writing(&self) -> bool {
        !self.writing.is_empty()
    }

    /// Write-outs on the write-back queue that failed so far. Whoever waits for pages handed
    /// over by [`Self::start_write_out`] compares it before and after: once nothing is in
    /// flight and no write-out failed meanwhile, those pages are on the device (a failure may
    /// have been taken by another caller, which then got its error).
    pub(super) fn write_out_failures(&self) -> u64 {
        self.failed_write_outs
    }

    /// Waits for the write-out in flight, if any.
    pub(super) fn finish_writing(&mut self, zone: &Zone) -> Result<(), PStoreError> {
        if self.writing.is_empty() {
            return Ok(());
        }
        let late = LateBytes {
            shared: &[],
            pages: &self.writing,
        };
        let r = zone.finish(&mut self.batch, &late);
        self.complete_writing(r)
    }

    /// Submits nothing more of the write-out in flight and waits for what the device already
    /// has (a store dropped without a commit: a crash test, a failed start).
    pub fn abandon_writing(&mut self, zone: &Zone) {
        if !self.writing.is_empty() {
            let _ = zone.abandon(&mut self.batch);
        }
        self.writing.clear();
    }

    /// Writes runs of whole pages gathered by [`PData::write_block`] to the device, all in
    /// flight together (replacing any staged copy of their pages).
    pub fn write_direct(
        &mut self,
        zone: &Zone,
        direct: &DirectWrites<'_>,
    ) -> Result<(), PStoreError> {
        if direct.is_empty() {
            return Ok(());
        }
        let in_flight = |(at, b): &(u64, Cow<'_, [u8]>)| {
            let end = *at + (b.len() / PAGE) as u64;
            self.writing.range(*at..end).next().is_some()
        };
        if direct.iter().any(in_flight) {
            // Two writes of one page in flight together may land in either order.
            self.finish_writing(zone)?;
        }
        self.unflushed = true;
        let runs: Vec<(u64, &[u8])> = direct.iter().map(|(at, b)| (*at, &b[..])).collect();
        zone.write_runs(&runs)?;
        for (at, b) in direct {
            let (at, end) = (*at, *at + (b.len() / PAGE) as u64);
            let stale: Vec<u64> = self.staged.range(at..end).map(|(&p, _)| p).collect();
            for p in stale {
                self.staged.remove(&p);
            }
        }
        Ok(())
    }

    /// Whether data pages reached the device since the last call (the caller flushes them
    /// before the log that names them is written; [`Self::mark_unflushed`] if it could not).
    pub fn take_unflushed(&mut self) -> bool {
        std::mem::take(&mut self.unflushed)
    }

    /// Records that data pages written earlier may not be durable.
    pub fn mark_unflushed(&mut self) {
        self.unflushed = true;
    }

    /// Writes every staged page to the device and waits for them and for the write-out in
    /// flight: consecutive pages as one run, all runs in flight together. On an error the
    /// pages stay staged (a later write-out retries them).
    pub fn write_out(&mut self, zone: &Zone) -> Result<(), PStoreError> {
        self.finish_writing(zone)?;
        // A lone page goes as it is staged: a server writes a small file's page through
        // before its reply, and a copy of it cost an allocation each time.
        let mut runs: Vec<(u64, Cow<'_, [u8]>)> = Vec::new();
        for (&p, page) in &self.staged {
            match runs.last_mut() {
                Some((start, buf)) if p == *start + (buf.len() / PAGE) as u64 => {
                    buf.to_mut().extend_from_slice(page);
                }
                _ => runs.push((p, Cow::Borrowed(&page[..]))),
            }
        }
        let runs: Vec<(u64, &[u8])> = runs.iter().map(|(p, b)| (*p, &b[..])).collect();
        self.unflushed |= !runs.is_empty();
        zone.write_runs(&runs)?;
        self.staged.clear();
        Ok(())
    }

    /// Pages staged or in flight, not yet known to be on the device.
    pub fn staged_pages(&self) -> usize {
        self.staged.len() + self.writing.len()
    }

    /// Bytes of a file block.
    pub fn block_bytes(&self) -> usize {
        self.block_pages as usize * PAGE
    }

    /// The run mapped to `(ino, block)` in the hashtable (none: a hole).
    pub fn run_of(&self, ino: u64, block: u64) -> PageRun {
        self.blocks.get(ino, block).unwrap_or(PageRun::NONE)
    }

    /// Blocks of `ino` in the hashtable (for removal of files whose size is unknown here).
    pub fn blocks_of(&self, ino: u64) -> Vec<u64> {
        self.blocks.blocks_of(ino)
    }

    /// Frees the pages of `blocks` of `ino` and unmaps them, adding the records to `tx`.
    pub fn unmap_blocks(&mut self, ino: u64, blocks: &[u64], tx: &mut Vec<Record>) {
        for &b in blocks {
            let run = self.run_of(ino, b);
            self.free(run, tx);
            self.map(ino, b, PageRun::NONE, tx);
        }
    }

    /// Applies a record to the bitmap or the hashtable; `live` defers page frees to the commit.
    /// Returns `false` for records of other components.
    pub fn apply(&mut self, rec: &Record, live: bool) -> Result<bool, PStoreError> {
        match rec {
            // Replay: the checkpoint, written between requests, may hold the change already.
            Record::PageAlloc { run } => {
                self.pages
                    .mark_run(run.start, u64::from(run.pages), true, live)?;
            }
            Record::PageFree { run } if live => self.pending_free.push(*run),
            Record::PageFree { run } => {
                self.pages
                    .force_run(run.start, u64::from(run.pages), false)?;
            }
            Record::BlockMap { ino, block, run } => {
                if run.end() > self.block_pages {
                    return Err(PStoreError::Corrupt(format!(
                        "block {block} of {ino} mapped to pages {}..{} of a {}-page block",
                        run.first,
                        run.end(),
                        self.block_pages
                    )));
                }
                self.blocks.insert(*ino, *block, *run);
            }
            Record::BlockUnmap { ino, block } => {
                self.blocks.remove(*ino, *block);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The frees so far are in the log, whose length after their frame is `log_end`.
    pub fn frees_logged(&mut self, log_end: u64) {
        self.logged_free
            .extend(self.pending_free.drain(..).map(|run| (log_end, run)));
    }

    /// Releases the pages of every logged free: all of the log is durable. Frees not yet in
    /// the log wait for the settle that logs them.
    pub fn commit_frees(&mut self) -> Result<(), PStoreError> {
        self.commit_frees_upto(u64::MAX)
    }

    /// Releases the pages of the frees whose frames end within the log's first `durable`
    /// bytes, which are on the device. The log written behind calls it as it lands: frees
    /// left for the next commit piled up between checkpoints, and releasing 718,000 of them
    /// held a checkpoint's last stop 3.8 ms (unlinks at a million inodes, the 2-core box).
    pub fn commit_frees_upto(&mut self, durable: u64) -> Result<(), PStoreError> {
        while let Some(&(end, run)) = self.logged_free.front()
            && end <= durable
        {
            self.pages.clear_run(run.start, u64::from(run.pages))?;
            self.logged_free.pop_front();
        }
        Ok(())
    }

    /// Pages whose free is not yet durable.
    pub fn pending_free_pages(&self) -> u64 {
        let logged = self.logged_free.iter().map(|(_, r)| r);
        self.pending_free
            .iter()
            .chain(logged)
            .map(|r| u64::from(r.pages))
            .sum()
    }

    /// A new run of `pages` pages holding a block from its page `first`.
    fn alloc(
        &mut self,
        first: u32,
        pages: u32,
        tx: &mut Vec<Record>,
    ) -> Result<PageRun, PStoreError> {
        let start = self
            .pages
            .alloc_run(u64::from(pages))
            .ok_or(PStoreError::NoSpace(NO_DATA_PAGES))?;
        let run = PageRun {
            start,
            pages,
            // Below the block's page count (at most 1,024).
            first: first as u16,
        };
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

    /// Writes `w.data` at byte `w.off` of a block mapped to `w.run`; returns the block's run,
    /// which is new when the block needed pages outside its run. Writes of more than a few
    /// pages join `direct` for [`PData::write_direct`]; until they reached the device, a new
    /// run must not be mapped nor the old one freed (the caller does both after).
    ///
    /// The writes gathered for one request never overlap pages this call reads: each block of
    /// a request is written once, its runs are its own, and freed pages are not handed out
    /// again before the transaction that frees them is durable.
    pub fn write_block<'a>(
        &mut self,
        zone: &Zone,
        w: BlockWrite<'a>,
        direct: &mut DirectWrites<'a>,
        tx: &mut Vec<Record>,
    ) -> Result<PageRun, PStoreError> {
        let BlockWrite {
            run,
            off,
            data,
            grows,
        } = w;
        let end = off + data.len();
        let need = end.div_ceil(PAGE) as u32;
        if need > self.block_pages {
            return Err(PStoreError::Invalid(format!(
                "write of {}..{end} crosses a block of {} bytes",
                off,
                self.block_bytes()
            )));
        }
        let from = (off / PAGE) as u32;
        let whole_pages = off.is_multiple_of(PAGE) && end.is_multiple_of(PAGE);
        if !run.is_none() && from >= u32::from(run.first) && need <= run.end() {
            let at = self.base + run.start + u64::from(from - u32::from(run.first));
            if whole_pages {
                // Nothing of the old pages survives: the data goes to the device as it is.
                self.put_pages(zone, at, Cow::Borrowed(data), direct)?;
                return Ok(run);
            }
            let pages = (need - from) as usize;
            let mut buf = vec![0u8; pages * PAGE];
            if !off.is_multiple_of(PAGE) {
                self.read_pages(zone, at, &mut buf[..PAGE])?;
            }
            if !end.is_multiple_of(PAGE) && (pages > 1 || off.is_multiple_of(PAGE)) {
                let last = (pages - 1) * PAGE;
                self.read_pages(zone, at + pages as u64 - 1, &mut buf[last..])?;
            }
            let base = from as usize * PAGE;
            buf[off - base..end - base].copy_from_slice(data);
            self.put_pages(zone, at, Cow::Owned(buf), direct)?;
            return Ok(run);
        }
        // A new run from the lower of the old run's and the write's first page to the higher
        // end; a growing block's length rounded up to a power of two (within the block) so
        // that appends rarely move it.
        let (first, last) = if run.is_none() {
            (from, need)
        } else {
            (from.min(u32::from(run.first)), need.max(run.end()))
        };
        let pages = if grows {
            (last - first)
                .next_power_of_two()
                .min(self.block_pages - first)
        } else {
            last - first
        };
        let new = self.alloc(first, pages, tx)?;
        let base = first as usize * PAGE;
        if off == base && data.len() == pages as usize * PAGE {
            // The data fills the new run and covers all of the old one.
            self.put_pages(zone, self.base + new.start, Cow::Borrowed(data), direct)?;
            return Ok(new);
        }
        if run.is_none() {
            // A fresh run (`base` is the data's first page): the data goes as it is, with its
            // partial first and last pages and the padding after it put around it, rather
            // than copied into a zeroed buffer of the whole run.
            self.put_zero_padded(
                zone,
                self.base + new.start,
                pages as usize,
                off - base,
                data,
                direct,
            )?;
            return Ok(new);
        }
        // The old run moves into the new one; zero-filled so that bytes never written read as
        // zeros after a later extension.
        let mut buf = vec![0u8; pages as usize * PAGE];
        let old = (u32::from(run.first) - first) as usize * PAGE;
        self.read_pages(
            zone,
            self.base + run.start,
            &mut buf[old..old + run.pages as usize * PAGE],
        )?;
        buf[off - base..end - base].copy_from_slice(data);
        self.put_pages(zone, self.base + new.start, Cow::Owned(buf), direct)?;
        Ok(new)
    }

    /// Plans the read of bytes `off..off + len` of a block mapped to `run` into bytes
    /// `at..at + len` of a buffer (see [`ReadPlan`]). Blocks are planned in the order of their
    /// bytes in the buffer.
    pub fn plan_block(&self, run: PageRun, off: usize, len: usize, at: usize, plan: &mut ReadPlan) {
        let (lo, hi) = (usize::from(run.first) * PAGE, run.end() as usize * PAGE);
        let end = off + len;
        let (from, to) = (off.max(lo), end.min(hi));
        if from >= to {
            plan.holes.push(at..at + len);
            return;
        }
        if off < from {
            plan.holes.push(at..at + (from - off));
        }
        if to < end {
            plan.holes.push(at + (to - off)..at + len);
        }
        // Page `p` of the block is zone page `zone_page(p)`.
        let zone_page = |p: usize| self.base + run.start + p as u64 - u64::from(run.first);
        let mut b = from;
        while b < to {
            let p = b / PAGE;
            let whole_end = to / PAGE * PAGE;
            if b.is_multiple_of(PAGE) && b < whole_end {
                plan.whole
                    .push((zone_page(p), at + (b - off)..at + (whole_end - off)));
                b = whole_end;
            } else {
                let e = ((p + 1) * PAGE).min(to);
                plan.partial
                    .push((zone_page(p), b - p * PAGE..e - p * PAGE, at + (b - off)));
                b = e;
            }
        }
    }

    /// Reads what `plan` names into `buf`: whole pages straight into it and partial pages
    /// through a scratch page each, all in one batch of device reads (one wait for the
    /// device), then the partial pages' bytes copied over and the holes zeroed.
    pub fn read_planned(
        &self,
        zone: &Zone,
        plan: &ReadPlan,
        buf: &mut [u8],
    ) -> Result<(), PStoreError> {
        let mut scratch = vec![0u8; plan.partial.len() * PAGE];
        let mut runs: Vec<(u64, &mut [u8])> =
            Vec::with_capacity(plan.whole.len() + plan.partial.len());
        let (mut rest, mut consumed) = (&mut *buf, 0);
        for (page, bytes) in &plan.whole {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(bytes.start - consumed);
            let (piece, tail) = tail.split_at_mut(bytes.len());
            runs.push((*page, piece));
            (rest, consumed) = (tail, bytes.end);
        }
        let pages = plan.partial.iter().map(|(page, ..)| *page);
        runs.extend(pages.zip(scratch.chunks_exact_mut(PAGE)));
        self.read_direct(zone, &mut runs)?;
        for ((_, bytes, to), page) in plan.partial.iter().zip(scratch.chunks_exact(PAGE)) {
            buf[*to..*to + bytes.len()].copy_from_slice(&page[bytes.clone()]);
        }
        for hole in &plan.holes {
            buf[hole.clone()].fill(0);
        }
        Ok(())
    }

    /// Cuts a block to its first `keep` bytes: frees pages past them, and when the cut falls
    /// inside a page, moves the kept pages to a new run with the rest of that page zeroed.
    /// Returns the block's new run.
    pub fn shrink_block(
        &mut self,
        zone: &Zone,
        run: PageRun,
        keep: usize,
        tx: &mut Vec<Record>,
    ) -> Result<PageRun, PStoreError> {
        let keep_end = keep.div_ceil(PAGE) as u32;
        if run.is_none() || (keep_end >= run.end() && keep >= run.end() as usize * PAGE) {
            return Ok(run);
        }
        if keep_end <= u32::from(run.first) {
            // Every page of the run lies past the cut.
            self.free(run, tx);
            return Ok(PageRun::NONE);
        }
        let kept_pages = keep_end - u32::from(run.first);
        if !keep.is_multiple_of(PAGE) {
            // The cut page's tail is zeroed in a copy of the kept pages, not in place: the
            // pages in place may hold what the last fsync made durable, and a power cut that
            // kept the zeroed page without the cut's log record (a truncate written through
            // before its reply) would leave zeros inside the size the log still gives the
            // file. The old run is freed like any other: reused only once the cut is durable.
            let first = u32::from(run.first);
            let copy = self.alloc(first, kept_pages, tx)?;
            let mut buf = vec![0u8; kept_pages as usize * PAGE];
            self.read_pages(zone, self.base + run.start, &mut buf)?;
            buf[keep - first as usize * PAGE..].fill(0);
            self.stage(zone, self.base + copy.start, Cow::Owned(buf))?;
            self.free(run, tx);
            return Ok(copy);
        }
        let mut kept = run;
        if kept_pages < run.pages {
            let tail = PageRun::new(run.start + u64::from(kept_pages), run.pages - kept_pages);
            self.free(tail, tx);
            kept.pages = kept_pages;
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every byte of an I/O lands in the block that starts where `start_of` says, at its
        /// distance from that start; an extent's blocks start at its first byte and follow
        /// each other a block apart, and no extent key is a file block's.
        #[test]
        fn a_byte_is_found_at_its_offset_from_its_blocks_start(
            origin in 0u64..1 << 50,
            into in 0u64..1 << 26,
            shift in 12u32..27,
        ) {
            let bs = 1u64 << shift;
            let pos = origin + into;
            for keys in [BlockKeys::File, BlockKeys::Extent { origin }] {
                let (key, off, end) = keys.locate(pos, bs);
                let start = BlockKeys::start_of(key, bs);
                prop_assert_eq!(start + off as u64, pos);
                prop_assert!((off as u64) < bs);
                prop_assert_eq!(end, start + bs);
                prop_assert_eq!(key & EXTENT_KEY != 0, keys != BlockKeys::File);
            }
            let (key, off, _) = BlockKeys::Extent { origin }.locate(pos, bs);
            prop_assert_eq!(BlockKeys::start_of(key, bs), origin + into / bs * bs);
            prop_assert_eq!(off as u64, into % bs);
        }

        /// A read plan sends every byte of the buffer to the page and byte the block's run
        /// holds it in, or zeros it when the run does not hold it; whole pages come in the
        /// buffer's order and only partly read pages go through a scratch page.
        #[test]
        fn a_read_plan_puts_every_byte_where_the_run_holds_it(
            first in 0u16..16,
            pages in 0u32..16,
            off in 0usize..16 * PAGE,
            len in 1usize..16 * PAGE,
            at in 0usize..3 * PAGE,
            before in 0usize..2,
        ) {
            let data = PData::new(1000, Bitmap::new(64), BlockTable::default(), 16);
            let run = PageRun { start: 7, pages, first };
            let len = len.min(16 * PAGE - off);
            let mut plan = ReadPlan::default();
            // Another block's bytes ahead of this one's in the buffer.
            if before == 1 && at >= PAGE {
                data.plan_block(PageRun::new(40, 1), 0, PAGE, at - PAGE, &mut plan);
            }
            let skip = plan.clone();
            data.plan_block(run, off, len, at, &mut plan);
            // Where each byte of the buffer comes from: (zone page, byte), or None for zero.
            let mut from: Vec<Option<Option<(u64, usize)>>> = vec![None; at + len];
            let mut put = |i: usize, src: Option<(u64, usize)>| {
                assert!(from[i].is_none(), "byte {i} of the buffer planned twice");
                from[i] = Some(src);
            };
            let mut last_end = 0;
            for (page, bytes) in &plan.whole[skip.whole.len()..] {
                assert!(bytes.start >= last_end && bytes.len().is_multiple_of(PAGE) && !bytes.is_empty());
                last_end = bytes.end;
                for i in bytes.clone() {
                    put(i, Some((page + ((i - bytes.start) / PAGE) as u64, (i - bytes.start) % PAGE)));
                }
            }
            for (page, bytes, to) in &plan.partial[skip.partial.len()..] {
                assert!(bytes.len() < PAGE && !bytes.is_empty() && bytes.end <= PAGE);
                for (k, b) in bytes.clone().enumerate() {
                    put(to + k, Some((*page, b)));
                }
            }
            for hole in &plan.holes[skip.holes.len()..] {
                for i in hole.clone() {
                    put(i, None);
                }
            }
            let (lo, hi) = (usize::from(first) * PAGE, (usize::from(first) + pages as usize) * PAGE);
            for (k, got) in from[at..].iter().enumerate() {
                let b = off + k;
                let want = (lo..hi)
                    .contains(&b)
                    .then(|| (1000 + 7 + (b / PAGE - usize::from(first)) as u64, b % PAGE));
                prop_assert_eq!(*got, Some(want), "byte {} of the block", b);
            }
            prop_assert!(from[..at].iter().all(|f| before == 1 && at >= PAGE || f.is_none()));
        }
    }
}
