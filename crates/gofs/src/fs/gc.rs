//! Garbage collection (papers/gofs.md §3.3, F2FS's cleaner): greedy victim choice (fewest
//! valid blocks, logs skipped), valid data and node blocks moved using the SSA to find their
//! owners; the emptied victims become free at the next checkpoint.

use super::engine::Engine;
use super::segment::Log;
use crate::error::{FsError, Result};
use crate::format::BLOCKS_PER_SEG;
use crate::format::segment::{JournalKind, Summary, SummaryBlock};

/// Free segments below which the foreground collector runs: 5% of the main area, at least 3
/// (the checkpoint that frees the victims needs node blocks itself).
pub fn threshold(e: &Engine) -> usize {
    (e.segs.main_segs() as usize / 20).max(3)
}

/// Runs the foreground collector when free segments are scarce.
pub fn maybe_collect(e: &mut Engine) -> Result<()> {
    if e.segs.free_count() < threshold(e) {
        collect(e, threshold(e) + 1)?;
    }
    Ok(())
}

/// Moves the valid blocks of victims until `want` segments are free or prefree, then
/// checkpoints so the victims become free.
pub fn collect(e: &mut Engine, want: usize) -> Result<()> {
    let mut moved_any = false;
    while e.segs.free_count() + e.segs.prefree.len() < want {
        let Some(victim) = pick_victim(e) else { break };
        move_segment(e, victim)?;
        moved_any = true;
    }
    if moved_any || !e.segs.prefree.is_empty() {
        e.checkpoint(true)?;
    }
    if e.segs.free_count() == 0 {
        return Err(FsError::NoSpace);
    }
    Ok(())
}

/// Moves the valid blocks of one victim (the greedy choice) and checkpoints so it becomes
/// free; false when there is no victim.
pub fn collect_one(e: &mut Engine) -> Result<bool> {
    let Some(victim) = pick_victim(e) else {
        return Ok(false);
    };
    move_segment(e, victim)?;
    e.checkpoint(true)?;
    Ok(true)
}

/// The non-log, non-empty segment with the fewest valid blocks (not full).
fn pick_victim(e: &Engine) -> Option<u32> {
    (0..e.segs.main_segs())
        .filter(|&s| !e.segs.is_curseg(s) && !e.segs.prefree.contains(&s))
        .map(|s| (e.segs.sit[s as usize].valid_blocks, s))
        .filter(|&(v, _)| v > 0 && u32::from(v) < BLOCKS_PER_SEG)
        .min()
        .map(|(_, s)| s)
}

fn move_segment(e: &mut Engine, segno: u32) -> Result<()> {
    let ssa = crate::format::read_block(
        e.io.as_ref(),
        u64::from(e.sb.ssa_blkaddr) + u64::from(segno),
    )?;
    let sum = SummaryBlock::parse(&ssa, JournalKind::Raw)?;
    let is_node = e.segs.sit[segno as usize].seg_type >= 3;
    if !is_node {
        // First, so that even a move that fails half-way leaves no cached pointer valid.
        e.relocated();
    }
    let start = e.sb.seg_start(segno);
    for off in 0..BLOCKS_PER_SEG {
        if !e.segs.is_valid(segno, off) {
            continue;
        }
        let blk = start + off;
        let s = sum.entries[off as usize];
        if is_node {
            move_node(e, s, blk)?;
        } else {
            move_data(e, s, blk)?;
        }
    }
    Ok(())
}

fn move_node(e: &mut Engine, s: Summary, blk: u32) -> Result<()> {
    let ne = e.nat.get(s.nid)?;
    if ne.block_addr != blk {
        return Err(FsError::Corrupt(format!(
            "GC: node block {blk} claims node {} whose NAT address is {}",
            s.nid, ne.block_addr
        )));
    }
    e.node(s.nid, None)?;
    let ver = e.cp.version;
    e.write_node(s.nid, ver)
}

fn move_data(e: &mut Engine, s: Summary, blk: u32) -> Result<()> {
    let ne = e.nat.get(s.nid)?;
    let n = e.node(s.nid, None)?;
    let ofs = usize::from(s.ofs_in_node);
    let cur = if n.is_inode() {
        n.i_addr(ofs)
    } else {
        n.slot(ofs)
    };
    if cur != blk || ne.version != s.version {
        return Err(FsError::Corrupt(format!(
            "GC: data block {blk} claims node {} slot {ofs}, which holds {cur}",
            s.nid
        )));
    }
    let data = crate::format::read_block(e.io.as_ref(), u64::from(blk))?;
    let new = e.alloc_block(Log::ColdData, s)?;
    e.io.write(u64::from(new), &data[..])?;
    let n = e.node(s.nid, None)?;
    if n.is_inode() {
        n.set_i_addr(ofs, new);
    } else {
        n.set_slot(ofs, new);
    }
    e.touch(s.nid);
    let owner = ne.ino;
    e.inode(owner)?.clear_extent();
    e.touch(owner);
    e.invalidate(blk)
}
