//! Segment management (papers/gofs.md §3.3, "scalable block allocation"): the SIT in memory,
//! six current segments (logs) as F2FS places blocks, the SSA entries of every block, and the
//! free/prefree segment sets. Segments whose last valid block goes away stay *prefree* until
//! the next checkpoint, so the last durable checkpoint never sees its blocks overwritten.
//!
//! Free segments are kept in `common::bitmap::sharded` (the paper's per-SM block bitmaps with
//! coalesced allocation) at segment granularity: one allocator unit per main segment, one shard
//! per log, so each log takes its next segment from its own shard and the shards are rebalanced
//! when one runs low.

use std::collections::BTreeSet;

use common::bitmap::sharded::{ShardedAllocator, ShardedConfig};

use crate::error::{FsError, Result};
use crate::format::segment::{
    ENTRIES_IN_SUM, JournalKind, SUM_TYPE_DATA, SUM_TYPE_NODE, SitEntry, Summary, SummaryBlock,
};
use crate::format::{BLOCKS_PER_SEG, set_bit_msb, test_bit_msb};

/// The six logs, in F2FS's curseg order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Log {
    /// directory data
    HotData = 0,
    /// regular file data
    WarmData = 1,
    /// cold data (GC'd data is moved here)
    ColdData = 2,
    /// directory direct nodes and inodes
    HotNode = 3,
    /// file direct nodes and inodes
    WarmNode = 4,
    /// indirect nodes
    ColdNode = 5,
}

/// A current segment: where the log appends next.
#[derive(Debug, Clone)]
pub struct Curseg {
    /// main-area segment number
    pub segno: u32,
    /// next free block inside it
    pub blkoff: u16,
    /// its summary, written to the SSA when the segment is full and into the checkpoint
    pub sum: SummaryBlock,
}

/// The in-memory SIT, cursegs and free-segment state.
#[derive(Debug)]
pub struct Segments {
    /// one entry per main segment
    pub sit: Vec<SitEntry>,
    /// SIT blocks changed since the last checkpoint
    pub sit_dirty: BTreeSet<u32>,
    /// the six logs
    pub cursegs: Vec<Curseg>,
    /// segments with no valid blocks that are not cursegs or prefree (allocated units are
    /// segments in use)
    pub free: ShardedAllocator,
    /// segments emptied since the last checkpoint
    pub prefree: BTreeSet<u32>,
    /// full segments' summaries not yet written to the SSA (segno, summary)
    pub ssa_pending: Vec<(u32, SummaryBlock)>,
    /// seconds since mount base, for SIT mtime
    pub now: u64,
    /// valid blocks in the main area
    pub valid_total: u64,
}

impl Segments {
    /// Builds the free set from the SIT and the cursegs.
    pub fn new(sit: Vec<SitEntry>, cursegs: Vec<Curseg>) -> Result<Self> {
        let cur: BTreeSet<u32> = cursegs.iter().map(|c| c.segno).collect();
        let n = sit.len() as u64;
        let shards = (cursegs.len() as u32).clamp(1, sit.len().max(1) as u32);
        let free = ShardedAllocator::new(ShardedConfig::new(n, 1, shards), |s| {
            sit[s as usize].valid_blocks != 0 || cur.contains(&(s as u32))
        })
        .map_err(|e| FsError::Corrupt(format!("{n} main segments: {e}")))?;
        Ok(Self {
            valid_total: sit.iter().map(|e| u64::from(e.valid_blocks)).sum(),
            sit,
            sit_dirty: BTreeSet::new(),
            cursegs,
            free,
            prefree: BTreeSet::new(),
            ssa_pending: Vec::new(),
            now: 0,
        })
    }

    /// Main segments.
    pub fn main_segs(&self) -> u32 {
        self.sit.len() as u32
    }

    /// Whether `segno` is one of the logs.
    pub fn is_curseg(&self, segno: u32) -> bool {
        self.cursegs.iter().any(|c| c.segno == segno)
    }

    fn mark_dirty(&mut self, segno: u32) {
        self.sit_dirty
            .insert(segno / crate::format::segment::SIT_ENTRIES_PER_BLOCK as u32);
    }

    /// Marks block `off` of segment `segno` valid; a block already valid means the
    /// in-memory state is inconsistent.
    pub fn set_valid(&mut self, segno: u32, off: u32) -> Result<()> {
        let now = self.now;
        let e = self
            .sit
            .get_mut(segno as usize)
            .ok_or_else(|| FsError::Corrupt(format!("segment {segno} out of range")))?;
        if test_bit_msb(&e.valid_map, off as usize) {
            return Err(FsError::Corrupt(format!(
                "block {off} of segment {segno} already valid"
            )));
        }
        set_bit_msb(&mut e.valid_map, off as usize, true);
        e.valid_blocks += 1;
        e.mtime = now;
        self.valid_total += 1;
        self.mark_dirty(segno);
        Ok(())
    }

    /// Marks block `off` of segment `segno` invalid; an emptied non-log segment becomes
    /// prefree.
    pub fn set_invalid(&mut self, segno: u32, off: u32) -> Result<()> {
        let e = self
            .sit
            .get_mut(segno as usize)
            .ok_or_else(|| FsError::Corrupt(format!("segment {segno} out of range")))?;
        if !test_bit_msb(&e.valid_map, off as usize) {
            return Err(FsError::Corrupt(format!(
                "block {off} of segment {segno} not valid"
            )));
        }
        set_bit_msb(&mut e.valid_map, off as usize, false);
        e.valid_blocks -= 1;
        self.valid_total -= 1;
        let empty = e.valid_blocks == 0;
        self.mark_dirty(segno);
        if empty && !self.is_curseg(segno) {
            self.prefree.insert(segno);
        }
        Ok(())
    }

    /// Whether block `off` of `segno` is valid.
    pub fn is_valid(&self, segno: u32, off: u32) -> bool {
        self.sit
            .get(segno as usize)
            .is_some_and(|e| test_bit_msb(&e.valid_map, off as usize))
    }

    /// Takes the next block of log `log` for an owner described by `sum`; returns
    /// `(segno, offset)`. Opens a new segment from the free set when the log is full.
    pub fn alloc(&mut self, log: Log, sum: Summary) -> Result<(u32, u32)> {
        let li = log as usize;
        if u32::from(self.cursegs[li].blkoff) >= BLOCKS_PER_SEG {
            self.new_segment(log)?;
        }
        let c = &mut self.cursegs[li];
        let (segno, off) = (c.segno, u32::from(c.blkoff));
        c.sum.entries[off as usize] = sum;
        c.blkoff += 1;
        self.set_valid(segno, off)?;
        Ok((segno, off))
    }

    /// Moves every full log to a fresh segment: a checkpoint may not record a log with no
    /// room (`fsck.f2fs` calls such a checkpoint polluted).
    pub fn close_full_logs(&mut self) -> Result<()> {
        for li in 0..self.cursegs.len() {
            if u32::from(self.cursegs[li].blkoff) >= BLOCKS_PER_SEG {
                let log = [
                    Log::HotData,
                    Log::WarmData,
                    Log::ColdData,
                    Log::HotNode,
                    Log::WarmNode,
                    Log::ColdNode,
                ][li];
                self.new_segment(log)?;
            }
        }
        Ok(())
    }

    /// Free segments available to the logs.
    pub fn free_count(&self) -> usize {
        self.free.free_blocks() as usize
    }

    /// Returns a segment emptied before the last checkpoint to the free set.
    pub fn release(&mut self, segno: u32) -> Result<()> {
        self.free
            .free(u64::from(segno), 1)
            .map_err(|e| FsError::Corrupt(format!("freeing segment {segno}: {e}")))
    }

    /// Whether `segno` is free.
    #[cfg(test)]
    pub fn is_free(&self, segno: u32) -> bool {
        self.free.is_allocated(u64::from(segno)) == Some(false)
    }

    fn new_segment(&mut self, log: Log) -> Result<()> {
        let li = log as usize;
        let old = self.cursegs[li].segno;
        let next = self
            .free
            .alloc(li as u32, 1)
            .map_err(|_| FsError::NoSpace)?
            .blocks()
            .next()
            .ok_or(FsError::NoSpace)? as u32;
        let entry_type = if li >= 3 {
            SUM_TYPE_NODE
        } else {
            SUM_TYPE_DATA
        };
        let mut sum = SummaryBlock::new(entry_type, JournalKind::of_curseg(li));
        // The journal travels with the log (it belongs to the curseg, not the segment).
        std::mem::swap(&mut sum.journal, &mut self.cursegs[li].sum.journal);
        let full = std::mem::replace(
            &mut self.cursegs[li],
            Curseg {
                segno: next,
                blkoff: 0,
                sum,
            },
        );
        self.ssa_pending.push((full.segno, full.sum));
        if self.sit[old as usize].valid_blocks == 0 {
            self.prefree.insert(old);
        }
        let e = &mut self.sit[next as usize];
        e.seg_type = li as u8;
        e.mtime = self.now;
        self.mark_dirty(next);
        Ok(())
    }

    /// Valid blocks in the main area.
    pub fn valid_blocks(&self) -> u64 {
        self.valid_total
    }
}

const _: () = assert!(ENTRIES_IN_SUM == BLOCKS_PER_SEG as usize);

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(n: usize) -> Segments {
        let cursegs = (0..6)
            .map(|i| Curseg {
                segno: i as u32,
                blkoff: 0,
                sum: SummaryBlock::new(
                    if i >= 3 { SUM_TYPE_NODE } else { SUM_TYPE_DATA },
                    JournalKind::of_curseg(i),
                ),
            })
            .collect();
        Segments::new(vec![SitEntry::default(); n], cursegs).unwrap()
    }

    #[test]
    fn full_log_moves_to_a_free_segment_and_queues_its_summary() {
        let mut s = segs(10);
        assert_eq!(s.free_count(), 4);
        for _ in 0..BLOCKS_PER_SEG + 1 {
            s.alloc(Log::WarmData, Summary::default()).unwrap();
        }
        assert!(s.cursegs[1].segno >= 6);
        assert_eq!(s.ssa_pending.len(), 1);
        assert_eq!(s.sit[1].valid_blocks as u32, BLOCKS_PER_SEG);
        assert_eq!(s.free_count(), 3);
    }

    #[test]
    fn emptied_segment_is_prefree_not_free() {
        let mut s = segs(10);
        for _ in 0..BLOCKS_PER_SEG + 1 {
            s.alloc(Log::WarmData, Summary::default()).unwrap();
        }
        for off in 0..BLOCKS_PER_SEG {
            s.set_invalid(1, off).unwrap();
        }
        assert!(s.prefree.contains(&1) && !s.is_free(1));
        s.release(1).unwrap();
        assert!(s.is_free(1));
        assert!(s.set_invalid(1, 0).is_err(), "double free is detected");
    }

    #[test]
    fn allocation_without_free_segments_is_nospace() {
        let mut s = segs(6);
        for _ in 0..BLOCKS_PER_SEG {
            s.alloc(Log::HotData, Summary::default()).unwrap();
        }
        assert!(matches!(
            s.alloc(Log::HotData, Summary::default()),
            Err(FsError::NoSpace)
        ));
    }
}
