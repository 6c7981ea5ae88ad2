//! F2FS checkpoint packs and orphan blocks (papers/gofs.md §3.5: crash consistency comes from
//! F2FS's checkpoint; mount picks the newest valid pack of the two).

use super::{
    BLOCK_SIZE, Block, ensure, f2fs_crc32, get_u16, get_u32, get_u64, put_u16, put_u32, put_u64,
    zero_block,
};
use crate::error::{FsError, Result};

/// Flag: written at unmount (node summaries are in the pack).
pub const CP_UMOUNT_FLAG: u32 = 0x1;
/// Flag: orphan blocks are present.
pub const CP_ORPHAN_PRESENT_FLAG: u32 = 0x2;
/// Flag: data summaries are compacted.
pub const CP_COMPACT_SUM_FLAG: u32 = 0x4;
/// Flag: fsck should run.
pub const CP_FSCK_FLAG: u32 = 0x10;
/// Flag: nat_bits are present at the end of the pack area.
pub const CP_NAT_BITS_FLAG: u32 = 0x80;
/// Flag: the NAT bitmap lives after the checkpoint header (not supported).
pub const CP_LARGE_NAT_BITMAP_FLAG: u32 = 0x400;
/// Flag: checkpointing disabled (not supported).
pub const CP_DISABLED_FLAG: u32 = 0x1000;
/// Offset of the version bitmaps in the checkpoint block.
pub const CP_BITMAP_OFFSET: usize = 192;
/// Default crc offset.
pub const CP_CHKSUM_OFFSET: usize = 4092;
/// Orphan inode numbers per orphan block.
pub const ORPHANS_PER_BLOCK: usize = 1020;

/// A checkpoint block (both copies of a pack are identical).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// version; the newer valid pack wins
    pub version: u64,
    /// blocks users may fill
    pub user_block_count: u64,
    /// valid blocks in the main area
    pub valid_block_count: u64,
    /// segments reserved for GC
    pub rsvd_segment_count: u32,
    /// overprovisioned segments
    pub overprov_segment_count: u32,
    /// free main segments
    pub free_segment_count: u32,
    /// current node segments (hot, warm, cold, then unused slots)
    pub cur_node_segno: [u32; 8],
    /// next free block in each node segment
    pub cur_node_blkoff: [u16; 8],
    /// current data segments
    pub cur_data_segno: [u32; 8],
    /// next free block in each data segment
    pub cur_data_blkoff: [u16; 8],
    /// CP_* flags
    pub flags: u32,
    /// blocks in the pack (both cp blocks included)
    pub pack_total_block_count: u32,
    /// first summary block, relative to the pack start
    pub pack_start_sum: u32,
    /// valid node blocks
    pub valid_node_count: u32,
    /// valid inodes
    pub valid_inode_count: u32,
    /// next free node id hint
    pub next_free_nid: u32,
    /// crc offset
    pub checksum_offset: u32,
    /// mounted time in seconds
    pub elapsed_time: u64,
    /// allocation type of each log (0 = LFS, 1 = SSR)
    pub alloc_type: [u8; 16],
    /// SIT version bitmap: bit i set = SIT block i is valid in the second copy
    pub sit_bitmap: Vec<u8>,
    /// NAT version bitmap
    pub nat_bitmap: Vec<u8>,
}

impl Checkpoint {
    /// Parses a checkpoint block, checking its crc and that its bitmaps have the sizes the
    /// superblock implies.
    pub fn parse(b: &Block, sit_bytes: usize, nat_bytes: usize) -> Result<Self> {
        let crc_off = get_u32(b, 164) as usize;
        ensure(
            (CP_BITMAP_OFFSET..=CP_CHKSUM_OFFSET).contains(&crc_off),
            || format!("checkpoint checksum_offset {crc_off}"),
        )?;
        let stored = get_u32(b, crc_off);
        let calc = f2fs_crc32(&b[..crc_off]);
        ensure(stored == calc, || {
            format!("checkpoint crc {stored:#x}, computed {calc:#x}")
        })?;
        let flags = get_u32(b, 132);
        if flags & (CP_LARGE_NAT_BITMAP_FLAG | CP_DISABLED_FLAG) != 0 {
            return Err(FsError::Corrupt(format!(
                "checkpoint flags {flags:#x}: large NAT bitmap / disabled checkpoints unsupported"
            )));
        }
        let sit_sz = get_u32(b, 156) as usize;
        let nat_sz = get_u32(b, 160) as usize;
        ensure(sit_sz == sit_bytes && nat_sz == nat_bytes, || {
            format!(
                "checkpoint bitmap sizes sit {sit_sz} nat {nat_sz}, \
                 expected {sit_bytes} {nat_bytes}"
            )
        })?;
        ensure(CP_BITMAP_OFFSET + sit_sz + nat_sz <= crc_off, || {
            format!(
                "checkpoint bitmaps of {} bytes overlap the crc",
                sit_sz + nat_sz
            )
        })?;
        let arr32 = |off: usize| std::array::from_fn(|i| get_u32(b, off + 4 * i));
        let arr16 = |off: usize| std::array::from_fn(|i| get_u16(b, off + 2 * i));
        let mut alloc_type = [0u8; 16];
        alloc_type.copy_from_slice(&b[176..192]);
        let bm = CP_BITMAP_OFFSET;
        Ok(Self {
            version: get_u64(b, 0),
            user_block_count: get_u64(b, 8),
            valid_block_count: get_u64(b, 16),
            rsvd_segment_count: get_u32(b, 24),
            overprov_segment_count: get_u32(b, 28),
            free_segment_count: get_u32(b, 32),
            cur_node_segno: arr32(36),
            cur_node_blkoff: arr16(68),
            cur_data_segno: arr32(84),
            cur_data_blkoff: arr16(116),
            flags,
            pack_total_block_count: get_u32(b, 136),
            pack_start_sum: get_u32(b, 140),
            valid_node_count: get_u32(b, 144),
            valid_inode_count: get_u32(b, 148),
            next_free_nid: get_u32(b, 152),
            checksum_offset: crc_off as u32,
            elapsed_time: get_u64(b, 168),
            alloc_type,
            sit_bitmap: b[bm..bm + sit_sz].to_vec(),
            nat_bitmap: b[bm + sit_sz..bm + sit_sz + nat_sz].to_vec(),
        })
    }

    /// The checkpoint block with its crc.
    pub fn serialize(&self) -> Box<Block> {
        let mut b = zero_block();
        put_u64(&mut b[..], 0, self.version);
        put_u64(&mut b[..], 8, self.user_block_count);
        put_u64(&mut b[..], 16, self.valid_block_count);
        put_u32(&mut b[..], 24, self.rsvd_segment_count);
        put_u32(&mut b[..], 28, self.overprov_segment_count);
        put_u32(&mut b[..], 32, self.free_segment_count);
        for i in 0..8 {
            put_u32(&mut b[..], 36 + 4 * i, self.cur_node_segno[i]);
            put_u16(&mut b[..], 68 + 2 * i, self.cur_node_blkoff[i]);
            put_u32(&mut b[..], 84 + 4 * i, self.cur_data_segno[i]);
            put_u16(&mut b[..], 116 + 2 * i, self.cur_data_blkoff[i]);
        }
        put_u32(&mut b[..], 132, self.flags);
        put_u32(&mut b[..], 136, self.pack_total_block_count);
        put_u32(&mut b[..], 140, self.pack_start_sum);
        put_u32(&mut b[..], 144, self.valid_node_count);
        put_u32(&mut b[..], 148, self.valid_inode_count);
        put_u32(&mut b[..], 152, self.next_free_nid);
        put_u32(&mut b[..], 156, self.sit_bitmap.len() as u32);
        put_u32(&mut b[..], 160, self.nat_bitmap.len() as u32);
        let crc_off = (self.checksum_offset as usize).clamp(CP_BITMAP_OFFSET, CP_CHKSUM_OFFSET);
        put_u32(&mut b[..], 164, crc_off as u32);
        put_u64(&mut b[..], 168, self.elapsed_time);
        b[176..192].copy_from_slice(&self.alloc_type);
        let bm = CP_BITMAP_OFFSET;
        let s = self.sit_bitmap.len().min(crc_off - bm);
        b[bm..bm + s].copy_from_slice(&self.sit_bitmap[..s]);
        let n = self.nat_bitmap.len().min(crc_off - bm - s);
        b[bm + s..bm + s + n].copy_from_slice(&self.nat_bitmap[..n]);
        let crc = f2fs_crc32(&b[..crc_off]);
        put_u32(&mut b[..], crc_off, crc);
        b
    }
}

/// Parses an orphan block: its inode numbers.
pub fn parse_orphan_block(b: &Block) -> Result<Vec<u32>> {
    let n = get_u32(b, 4088) as usize;
    ensure(n <= ORPHANS_PER_BLOCK, || {
        format!("orphan block entry_count {n}")
    })?;
    Ok((0..n).map(|i| get_u32(b, 4 * i)).collect())
}

/// Builds orphan block `index` of `count` holding `inos` (at most [`ORPHANS_PER_BLOCK`]).
pub fn orphan_block(inos: &[u32], index: u16, count: u16) -> Box<Block> {
    let mut b = zero_block();
    let n = inos.len().min(ORPHANS_PER_BLOCK);
    for (i, &ino) in inos[..n].iter().enumerate() {
        put_u32(&mut b[..], 4 * i, ino);
    }
    put_u16(&mut b[..], 4084, index + 1);
    put_u16(&mut b[..], 4086, count);
    put_u32(&mut b[..], 4088, n as u32);
    let crc = f2fs_crc32(&b[..4092]);
    put_u32(&mut b[..], 4092, crc);
    debug_assert_eq!(BLOCK_SIZE, 4096);
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn arb_cp() -> impl Strategy<Value = Checkpoint> {
        (
            any::<[u64; 4]>(),
            any::<[u32; 8]>(),
            any::<[u16; 8]>(),
            any::<[u32; 6]>(),
            vec(any::<u8>(), 64),
            vec(any::<u8>(), 128),
        )
            .prop_map(|(w, segs, offs, m, sit, nat)| Checkpoint {
                version: w[0],
                user_block_count: w[1],
                valid_block_count: w[2],
                rsvd_segment_count: m[0],
                overprov_segment_count: m[1],
                free_segment_count: m[2],
                cur_node_segno: segs,
                cur_node_blkoff: offs,
                cur_data_segno: segs,
                cur_data_blkoff: offs,
                flags: m[3] & !(CP_LARGE_NAT_BITMAP_FLAG | CP_DISABLED_FLAG),
                pack_total_block_count: m[4],
                pack_start_sum: m[5],
                valid_node_count: m[0],
                valid_inode_count: m[1],
                next_free_nid: m[2],
                checksum_offset: CP_CHKSUM_OFFSET as u32,
                elapsed_time: w[3],
                alloc_type: [0; 16],
                sit_bitmap: sit,
                nat_bitmap: nat,
            })
    }

    proptest! {
        #[test]
        fn checkpoint_parse_inverts_serialize(cp in arb_cp()) {
            let b = cp.serialize();
            prop_assert_eq!(Checkpoint::parse(&b, 64, 128).unwrap(), cp);
        }

        #[test]
        fn checkpoint_parse_of_random_bytes_never_panics(v in vec(any::<u8>(), 4096)) {
            let mut b = [0u8; 4096];
            b.copy_from_slice(&v);
            let _ = Checkpoint::parse(&b, 64, 128);
            let _ = parse_orphan_block(&b);
        }

        #[test]
        fn orphan_block_round_trips(inos in vec(any::<u32>(), 0..1020)) {
            let b = orphan_block(&inos, 0, 1);
            prop_assert_eq!(parse_orphan_block(&b).unwrap(), inos);
        }
    }

    #[test]
    fn flipped_checkpoint_byte_fails_the_crc() {
        let cp = Checkpoint {
            version: 7,
            user_block_count: 1,
            valid_block_count: 1,
            rsvd_segment_count: 1,
            overprov_segment_count: 1,
            free_segment_count: 1,
            cur_node_segno: [0; 8],
            cur_node_blkoff: [0; 8],
            cur_data_segno: [0; 8],
            cur_data_blkoff: [0; 8],
            flags: 0,
            pack_total_block_count: 8,
            pack_start_sum: 1,
            valid_node_count: 1,
            valid_inode_count: 1,
            next_free_nid: 4,
            checksum_offset: 4092,
            elapsed_time: 0,
            alloc_type: [0; 16],
            sit_bitmap: vec![0; 64],
            nat_bitmap: vec![0; 128],
        };
        let mut b = cp.serialize();
        b[20] ^= 1;
        assert!(
            matches!(Checkpoint::parse(&b, 64, 128), Err(FsError::Corrupt(m)) if m.contains("crc"))
        );
    }
}
