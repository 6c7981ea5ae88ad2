//! Checkpointing (papers/gofs.md §3.5): dirty nodes go out of place to the node logs, dirty
//! NAT and SIT blocks to their other copies (version bitmaps flipped), then a new checkpoint
//! pack to the other pack area, with a Flush before and after its final block.
//!
//! Every checkpoint is written as F2FS writes one at unmount (`CP_UMOUNT_FLAG`, node
//! summaries in the pack, empty journals): GoFS has no roll-forward recovery, so each
//! checkpoint is a complete consistent state.

use std::sync::Arc;

use super::engine::{Engine, cp_start, nat_addr, node_log, sit_addr};
use crate::error::Result;
use crate::format::checkpoint::{
    CP_ORPHAN_PRESENT_FLAG, CP_UMOUNT_FLAG, ORPHANS_PER_BLOCK, orphan_block,
};
use crate::format::segment::{
    NAT_ENTRIES_PER_BLOCK, NatEntry, SIT_ENTRIES_PER_BLOCK, Summary, nat_block, sit_block,
};
use crate::format::{BLOCK_SIZE, NEW_ADDR, set_bit_msb, test_bit_msb};

impl Engine {
    /// Writes a checkpoint if anything changed (or `force`), and flushes the device.
    pub fn checkpoint(&mut self, force: bool) -> Result<()> {
        if self.read_only || (!self.dirty && !force) {
            return Ok(());
        }
        let version = self.cp.version.wrapping_add(1);
        self.write_dirty_nodes(version)?;
        self.segs.close_full_logs()?;
        self.flush_ssa()?;
        self.write_tables()?;
        let pack = 1 - self.cp_pack;
        let mut cp = self.cp.clone();
        cp.version = version;
        // Prefree segments are free in the new checkpoint; trim them.
        let released: Vec<u32> = std::mem::take(&mut self.segs.prefree).into_iter().collect();
        cp.free_segment_count = (self.segs.free_count() + released.len()) as u32;
        cp.valid_block_count = self.segs.valid_blocks();
        let (mut nodes, mut inodes) = (0u32, 0u32);
        for (nid, e) in self.nat.entries.iter().enumerate().skip(3) {
            if e.block_addr != 0 {
                nodes += 1;
                if e.ino as usize == nid {
                    inodes += 1;
                }
            }
        }
        cp.valid_node_count = nodes;
        cp.valid_inode_count = inodes;
        cp.next_free_nid = self.nat.first_free();
        for i in 0..3 {
            cp.cur_data_segno[i] = self.segs.cursegs[i].segno;
            cp.cur_data_blkoff[i] = self.segs.cursegs[i].blkoff;
            cp.cur_node_segno[i] = self.segs.cursegs[i + 3].segno;
            cp.cur_node_blkoff[i] = self.segs.cursegs[i + 3].blkoff;
        }
        cp.alloc_type = [0; 16];
        cp.elapsed_time = self.segs.now;
        let orphans: Vec<u32> = self.orphans.iter().copied().collect();
        let orphan_blocks = orphans.len().div_ceil(ORPHANS_PER_BLOCK) as u32;
        cp.flags = CP_UMOUNT_FLAG
            | if orphans.is_empty() {
                0
            } else {
                CP_ORPHAN_PRESENT_FLAG
            };
        cp.pack_start_sum = 1 + orphan_blocks;
        cp.pack_total_block_count = 2 + orphan_blocks + 6;
        cp.checksum_offset = crate::format::checkpoint::CP_CHKSUM_OFFSET as u32;
        let mut body = Vec::with_capacity((cp.pack_total_block_count as usize - 1) * BLOCK_SIZE);
        let cp_block = cp.serialize();
        body.extend_from_slice(&cp_block[..]);
        for (i, chunk) in orphans.chunks(ORPHANS_PER_BLOCK).enumerate() {
            body.extend_from_slice(&orphan_block(chunk, i as u16, orphan_blocks as u16)[..]);
        }
        for c in &self.segs.cursegs {
            body.extend_from_slice(&c.sum.serialize()[..]);
        }
        let start = cp_start(&self.sb, pack);
        self.io.write(start, &body)?;
        self.io.flush()?;
        self.io.write(
            start + u64::from(cp.pack_total_block_count) - 1,
            &cp_block[..],
        )?;
        self.io.flush()?;
        self.cp = cp;
        self.cp_pack = pack;
        self.dirty = false;
        let gate = Arc::clone(&self.read_gate);
        let _no_reads = gate.write().unwrap_or_else(|e| e.into_inner());
        for segno in released {
            self.segs.release(segno)?;
            let blk = u64::from(self.sb.seg_start(segno));
            // Trimming is advice to the device; a device that refuses it loses nothing.
            let _ = self.io.trim(blk, crate::format::BLOCKS_PER_SEG);
        }
        Ok(())
    }

    /// Writes every dirty node to its log with the new checkpoint version in its footer
    /// (GC during those writes may dirty more nodes: loop until none is left).
    fn write_dirty_nodes(&mut self, version: u64) -> Result<()> {
        while !self.nat.dirty_nodes.is_empty() {
            let dirty: Vec<u32> = std::mem::take(&mut self.nat.dirty_nodes)
                .into_iter()
                .collect();
            for nid in dirty {
                self.write_node(nid, version)?;
            }
        }
        Ok(())
    }

    /// Writes cached node `nid` out of place now: a new block in its log, the old one
    /// invalidated, the NAT pointed at the new one.
    pub(crate) fn write_node(&mut self, nid: u32, version: u64) -> Result<()> {
        let Some(node) = self.nat.cache.get(&nid) else {
            return Ok(());
        };
        let log = node_log(node);
        let old = self.nat.get(nid)?;
        let blk = self.alloc_block(
            log,
            Summary {
                nid,
                version: 0,
                ofs_in_node: 0,
            },
        )?;
        self.invalidate(old.block_addr)?;
        let node = self
            .nat
            .cache
            .get_mut(&nid)
            .unwrap_or_else(|| unreachable!());
        node.set_cp_ver(version);
        node.set_next_blkaddr(blk + 1);
        self.io.write(u64::from(blk), &node.bytes()[..])?;
        self.nat.set(
            nid,
            NatEntry {
                block_addr: blk,
                ..old
            },
        );
        Ok(())
    }

    /// Writes dirty NAT and SIT blocks to their other copies and flips the version bits.
    fn write_tables(&mut self) -> Result<()> {
        for i in std::mem::take(&mut self.nat.dirty_blocks) {
            let lo = i as usize * NAT_ENTRIES_PER_BLOCK;
            let hi = (lo + NAT_ENTRIES_PER_BLOCK).min(self.nat.entries.len());
            let Some(entries) = self.nat.entries.get(lo..hi) else {
                continue;
            };
            debug_assert!(entries.iter().all(|e| e.block_addr != NEW_ADDR));
            let second = !test_bit_msb(&self.cp.nat_bitmap, i as usize);
            self.io
                .write(nat_addr(&self.sb, i, second), &nat_block(entries)[..])?;
            set_bit_msb(&mut self.cp.nat_bitmap, i as usize, second);
        }
        for i in std::mem::take(&mut self.segs.sit_dirty) {
            let lo = i as usize * SIT_ENTRIES_PER_BLOCK;
            let hi = (lo + SIT_ENTRIES_PER_BLOCK).min(self.segs.sit.len());
            let Some(entries) = self.segs.sit.get(lo..hi) else {
                continue;
            };
            let second = !test_bit_msb(&self.cp.sit_bitmap, i as usize);
            self.io
                .write(sit_addr(&self.sb, i, second), &sit_block(entries)[..])?;
            set_bit_msb(&mut self.cp.sit_bitmap, i as usize, second);
        }
        Ok(())
    }
}
