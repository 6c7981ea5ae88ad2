//! mkfs for GoFS: lays out an F2FS volume as `mkfs.f2fs` 1.15 does on a single, non-zoned
//! device (2 MiB zones, one segment per section), and writes the root directory through the
//! engine's own node, segment and checkpoint code (papers/gofs.md §3.2: GoFS keeps F2FS's
//! on-disk format, so `fsck.f2fs` accepts what this writes).

use std::sync::Arc;

use gpu_nvme::device::NvmeDevice;

use crate::error::{FsError, Result};
use crate::format::checkpoint::{CP_CHKSUM_OFFSET, Checkpoint};
use crate::format::segment::{NAT_ENTRIES_PER_BLOCK, SIT_ENTRIES_PER_BLOCK};
use crate::format::superblock::{SUPER_OFFSET, SUPER_SIZE, Superblock};
use crate::format::{BLOCK_SIZE, BLOCKS_PER_SEG, BlockIo, F2FS_SUPER_MAGIC, NvmeBlocks};

/// Settings of [`mkfs`].
#[derive(Debug, Clone, Default)]
pub struct MkfsOptions {
    /// overprovision ratio in percent; `None` picks the best as mkfs.f2fs does
    pub overprovision: Option<f64>,
    /// trim the whole device first
    pub discard: bool,
}

/// Makes an empty F2FS file system on `dev`.
pub fn mkfs(dev: &Arc<NvmeDevice>, opts: &MkfsOptions) -> Result<()> {
    mkfs_io(Arc::new(NvmeBlocks::new(Arc::clone(dev))?), opts)
}

/// The volume layout mkfs.f2fs would choose for `blocks` 4 KiB blocks.
pub fn layout(blocks: u64) -> Result<Superblock> {
    let seg = u64::from(BLOCKS_PER_SEG);
    let segment0 = BLOCKS_PER_SEG; // zone-aligned start after the two superblock blocks
    let total_segments = blocks.saturating_sub(u64::from(segment0)) / seg;
    if !(9 + 6..=(16 << 20) / 2).contains(&total_segments) {
        return Err(FsError::InvalidArgument(format!(
            "a device of {blocks} blocks is outside the F2FS size range"
        )));
    }
    let segment_count = total_segments as u32;
    let ckpt = 2u32;
    let sit_blocks = segment_count.div_ceil(SIT_ENTRIES_PER_BLOCK as u32);
    let sit_segs = sit_blocks.div_ceil(BLOCKS_PER_SEG);
    let avail = (segment_count - ckpt - 2 * sit_segs) * BLOCKS_PER_SEG;
    let mut nat_segs = avail
        .div_ceil(NAT_ENTRIES_PER_BLOCK as u32)
        .div_ceil(BLOCKS_PER_SEG);
    let sit_bitmap = sit_segs * BLOCKS_PER_SEG / 8;
    let max_bitmap = (CP_CHKSUM_OFFSET - crate::format::checkpoint::CP_BITMAP_OFFSET) as u32;
    if sit_bitmap + 64 > max_bitmap {
        return Err(FsError::Unsupported(
            "volumes whose SIT bitmap needs checkpoint payload",
        ));
    }
    let max_nat_segs = (max_bitmap - sit_bitmap) * 8 / BLOCKS_PER_SEG;
    nat_segs = nat_segs.min(max_nat_segs);
    let avail = (segment_count - ckpt - 2 * sit_segs - 2 * nat_segs) * BLOCKS_PER_SEG;
    let ssa_segs = (avail / BLOCKS_PER_SEG + 1).div_ceil(BLOCKS_PER_SEG);
    let meta = ckpt + 2 * sit_segs + 2 * nat_segs + ssa_segs;
    let main = segment_count - meta;
    let s0 = segment0;
    let mut raw = vec![0u8; SUPER_SIZE];
    let version = b"GoFS mkfs (F2FS format)";
    raw[1668..1668 + version.len()].copy_from_slice(version);
    raw[1924..1924 + version.len()].copy_from_slice(version);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    raw[108..124].copy_from_slice(&t.to_le_bytes());
    let sb = Superblock {
        major_ver: 1,
        minor_ver: 15,
        log_sectorsize: 9,
        log_sectors_per_block: 3,
        log_blocksize: 12,
        log_blocks_per_seg: 9,
        segs_per_sec: 1,
        secs_per_zone: 1,
        checksum_offset: 0,
        block_count: blocks,
        section_count: main,
        segment_count,
        segment_count_ckpt: ckpt,
        segment_count_sit: 2 * sit_segs,
        segment_count_nat: 2 * nat_segs,
        segment_count_ssa: ssa_segs,
        segment_count_main: main,
        segment0_blkaddr: s0,
        cp_blkaddr: s0,
        sit_blkaddr: s0 + ckpt * BLOCKS_PER_SEG,
        nat_blkaddr: s0 + (ckpt + 2 * sit_segs) * BLOCKS_PER_SEG,
        ssa_blkaddr: s0 + (ckpt + 2 * sit_segs + 2 * nat_segs) * BLOCKS_PER_SEG,
        main_blkaddr: s0 + meta * BLOCKS_PER_SEG,
        root_ino: 3,
        node_ino: 1,
        meta_ino: 2,
        cp_payload: 0,
        feature: 0,
        raw,
    };
    let bytes = sb.serialize();
    Superblock::parse(&bytes, blocks).map_err(|e| match e {
        FsError::Corrupt(m) => FsError::InvalidArgument(format!("layout: {m}")),
        e => e,
    })
}

/// Overprovision ratio and reserved segments as mkfs.f2fs chooses them.
fn overprovision(main: u32, ratio: Option<f64>) -> (f64, u32) {
    let reserved = |c: f64| ((2.0 * (100.0 / c + 1.0) + 6.0) as u32).min(main);
    let ratio = ratio.filter(|r| *r > 0.0).unwrap_or_else(|| {
        let (mut c, end, diff): (f64, f64, f64) = if main < 256 {
            (10.0, 95.0, 5.0)
        } else {
            (0.01, 10.0, 0.01)
        };
        let (mut best, mut best_space) = (0.0, 0.0);
        while c <= end {
            let r = 2.0 * (100.0 / c + 1.0) + 6.0;
            let ovp = (f64::from(main) - r) * c / 100.0;
            let space = f64::from(main) - r - ovp;
            if best_space < space {
                best_space = space;
                best = c;
            }
            c += diff;
        }
        best
    });
    (ratio, reserved(ratio))
}

/// Makes an empty F2FS file system on any block store.
pub fn mkfs_io(io: Arc<dyn BlockIo>, opts: &MkfsOptions) -> Result<()> {
    let blocks = io.block_count();
    let sb = layout(blocks)?;
    if opts.discard {
        let mut blk = 0u64;
        while blk < blocks {
            let n = (blocks - blk).min(1 << 16) as u32;
            let _ = io.trim(blk, n);
            blk += u64::from(n);
        }
    }
    // Copy 0 of the NAT and SIT, both checkpoint packs' first blocks and the pack-1 end
    // must read as zeros: write them out rather than trusting trim.
    let zeros = vec![0u8; 256 * BLOCK_SIZE];
    let zero = |start: u64, count: u64| -> Result<()> {
        let mut b = start;
        while b < start + count {
            let n = (start + count - b).min(256);
            io.write(b, &zeros[..n as usize * BLOCK_SIZE])?;
            b += n;
        }
        Ok(())
    };
    zero(u64::from(sb.cp_blkaddr), 2 * u64::from(BLOCKS_PER_SEG))?;
    zero(
        u64::from(sb.sit_blkaddr),
        u64::from(crate::fs::sit_block_count(&sb)),
    )?;
    for s in 0..sb.segment_count_nat / 2 {
        zero(
            u64::from(sb.nat_blkaddr + 2 * s * BLOCKS_PER_SEG),
            u64::from(BLOCKS_PER_SEG),
        )?;
    }
    let main = sb.segment_count_main;
    let (ratio, reserved) = overprovision(main, opts.overprovision);
    let ovp = ((f64::from(main - reserved) * ratio / 100.0) as u32 + reserved).min(main);
    if ovp + 6 >= main {
        return Err(FsError::InvalidArgument(format!(
            "{main} main segments leave no room after {ovp} overprovisioned ones"
        )));
    }
    let cp = Checkpoint {
        version: 0,
        user_block_count: u64::from(main - ovp) * u64::from(BLOCKS_PER_SEG),
        valid_block_count: 0,
        rsvd_segment_count: reserved,
        overprov_segment_count: ovp,
        free_segment_count: main - 6,
        cur_node_segno: [3, 4, 5, u32::MAX, u32::MAX, u32::MAX, u32::MAX, u32::MAX],
        cur_node_blkoff: [0; 8],
        cur_data_segno: [0, 1, 2, u32::MAX, u32::MAX, u32::MAX, u32::MAX, u32::MAX],
        cur_data_blkoff: [0; 8],
        flags: 0,
        pack_total_block_count: 8,
        pack_start_sum: 1,
        valid_node_count: 0,
        valid_inode_count: 0,
        next_free_nid: 4,
        checksum_offset: CP_CHKSUM_OFFSET as u32,
        elapsed_time: 0,
        alloc_type: [0; 16],
        sit_bitmap: vec![0; sb.sit_bitmap_bytes()],
        nat_bitmap: vec![0; sb.nat_bitmap_bytes()],
    };
    crate::fs::format_root(Arc::clone(&io), sb.clone(), cp)?;
    let mut block = vec![0u8; BLOCK_SIZE];
    block[SUPER_OFFSET..SUPER_OFFSET + SUPER_SIZE].copy_from_slice(&sb.serialize());
    debug_assert_eq!(
        crate::format::get_u32(&block, SUPER_OFFSET),
        F2FS_SUPER_MAGIC
    );
    io.write(1, &block)?;
    io.write(0, &block)?;
    io.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_mkfs_f2fs_for_a_128_mib_volume() {
        // Values mkfs.f2fs 1.15 prints into the superblock of a 128 MiB image.
        let sb = layout(32768).unwrap();
        assert_eq!(sb.segment_count, 63);
        assert_eq!(sb.segment_count_sit, 2);
        assert_eq!(sb.segment_count_nat, 2);
        assert_eq!(sb.segment_count_ssa, 1);
        assert_eq!(sb.segment_count_main, 56);
        assert_eq!(sb.main_blkaddr, 512 + 7 * 512);
    }

    #[test]
    fn tiny_devices_are_refused() {
        assert!(matches!(layout(1000), Err(FsError::InvalidArgument(_))));
    }
}
