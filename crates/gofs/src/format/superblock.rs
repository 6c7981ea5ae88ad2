//! The F2FS superblock (papers/gofs.md §3.2): two copies, at byte 1024 of blocks 0 and 1.

use super::{
    BLOCKS_PER_SEG, ensure, f2fs_crc32, get_u16, get_u32, get_u64, put_u16, put_u32, put_u64,
};
use crate::error::{FsError, Result};

/// Byte offset of the superblock inside its block.
pub const SUPER_OFFSET: usize = 1024;
/// Size of the superblock structure.
pub const SUPER_SIZE: usize = 3072;
/// Feature bit: extra inode attributes.
pub const FEATURE_EXTRA_ATTR: u32 = 0x0008;
/// Feature bit: inode checksums.
pub const FEATURE_INODE_CHKSUM: u32 = 0x0020;
/// Feature bit: per-inode inline xattr size.
pub const FEATURE_FLEXIBLE_INLINE_XATTR: u32 = 0x0040;
/// Feature bit: inode creation time (an extra attribute).
pub const FEATURE_INODE_CRTIME: u32 = 0x0100;
/// Feature bit: lost+found created by mkfs.
pub const FEATURE_LOST_FOUND: u32 = 0x0200;
/// Feature bit: superblock checksum.
pub const FEATURE_SB_CHKSUM: u32 = 0x0800;
/// Features the engine understands; images with others are refused.
pub const SUPPORTED_FEATURES: u32 = FEATURE_EXTRA_ATTR
    | FEATURE_FLEXIBLE_INLINE_XATTR
    | FEATURE_INODE_CRTIME
    | FEATURE_LOST_FOUND
    | FEATURE_SB_CHKSUM;

/// The superblock fields the engine uses; the raw bytes keep the rest (uuid, volume name,
/// extension lists, versions, device list) so a rewrite changes nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// major version
    pub major_ver: u16,
    /// minor version
    pub minor_ver: u16,
    /// log2 of the sector size
    pub log_sectorsize: u32,
    /// log2 of sectors per block
    pub log_sectors_per_block: u32,
    /// log2 of the block size (12)
    pub log_blocksize: u32,
    /// log2 of blocks per segment (9)
    pub log_blocks_per_seg: u32,
    /// segments per section
    pub segs_per_sec: u32,
    /// sections per zone
    pub secs_per_zone: u32,
    /// offset of the crc (when the sb checksum feature is on)
    pub checksum_offset: u32,
    /// blocks of the volume
    pub block_count: u64,
    /// sections of the main area
    pub section_count: u32,
    /// segments of the volume after segment 0
    pub segment_count: u32,
    /// checkpoint segments (2)
    pub segment_count_ckpt: u32,
    /// SIT segments (two copies)
    pub segment_count_sit: u32,
    /// NAT segments (two copies)
    pub segment_count_nat: u32,
    /// SSA segments
    pub segment_count_ssa: u32,
    /// main-area segments
    pub segment_count_main: u32,
    /// first block of segment 0
    pub segment0_blkaddr: u32,
    /// first checkpoint block
    pub cp_blkaddr: u32,
    /// first SIT block
    pub sit_blkaddr: u32,
    /// first NAT block
    pub nat_blkaddr: u32,
    /// first SSA block
    pub ssa_blkaddr: u32,
    /// first main-area block
    pub main_blkaddr: u32,
    /// root directory inode
    pub root_ino: u32,
    /// node inode
    pub node_ino: u32,
    /// meta inode
    pub meta_ino: u32,
    /// extra checkpoint payload blocks
    pub cp_payload: u32,
    /// feature bits
    pub feature: u32,
    /// raw structure bytes
    pub raw: Vec<u8>,
}

impl Superblock {
    /// Parses and validates the 3072 bytes of a superblock against a device of
    /// `device_blocks` blocks.
    pub fn parse(b: &[u8], device_blocks: u64) -> Result<Self> {
        let b = b
            .get(..SUPER_SIZE)
            .ok_or_else(|| super::corrupt(format!("superblock of {} bytes", b.len())))?;
        let magic = get_u32(b, 0);
        ensure(magic == super::F2FS_SUPER_MAGIC, || {
            format!("superblock magic {magic:#x}")
        })?;
        let sb = Self {
            major_ver: get_u16(b, 4),
            minor_ver: get_u16(b, 6),
            log_sectorsize: get_u32(b, 8),
            log_sectors_per_block: get_u32(b, 12),
            log_blocksize: get_u32(b, 16),
            log_blocks_per_seg: get_u32(b, 20),
            segs_per_sec: get_u32(b, 24),
            secs_per_zone: get_u32(b, 28),
            checksum_offset: get_u32(b, 32),
            block_count: get_u64(b, 36),
            section_count: get_u32(b, 44),
            segment_count: get_u32(b, 48),
            segment_count_ckpt: get_u32(b, 52),
            segment_count_sit: get_u32(b, 56),
            segment_count_nat: get_u32(b, 60),
            segment_count_ssa: get_u32(b, 64),
            segment_count_main: get_u32(b, 68),
            segment0_blkaddr: get_u32(b, 72),
            cp_blkaddr: get_u32(b, 76),
            sit_blkaddr: get_u32(b, 80),
            nat_blkaddr: get_u32(b, 84),
            ssa_blkaddr: get_u32(b, 88),
            main_blkaddr: get_u32(b, 92),
            root_ino: get_u32(b, 96),
            node_ino: get_u32(b, 100),
            meta_ino: get_u32(b, 104),
            cp_payload: get_u32(b, OFF_CP_PAYLOAD),
            feature: get_u32(b, OFF_FEATURE),
            raw: b.to_vec(),
        };
        sb.validate(device_blocks)?;
        Ok(sb)
    }

    fn validate(&self, device_blocks: u64) -> Result<()> {
        if self.feature & FEATURE_SB_CHKSUM != 0 {
            let off = self.checksum_offset as usize;
            ensure(off == SUPER_SIZE - 4, || {
                format!("superblock checksum_offset {off}")
            })?;
            let stored = get_u32(&self.raw, off);
            let calc = f2fs_crc32(&self.raw[..off]);
            ensure(stored == calc, || {
                format!("superblock crc {stored:#x}, computed {calc:#x}")
            })?;
        }
        ensure(self.log_blocksize == 12, || {
            format!("log_blocksize {}", self.log_blocksize)
        })?;
        ensure(self.log_blocks_per_seg == 9, || {
            format!("log_blocks_per_seg {}", self.log_blocks_per_seg)
        })?;
        ensure(
            (9..=12).contains(&self.log_sectorsize)
                && self.log_sectorsize + self.log_sectors_per_block == 12,
            || {
                format!(
                    "log_sectorsize {} + log_sectors_per_block {}",
                    self.log_sectorsize, self.log_sectors_per_block
                )
            },
        )?;
        ensure(self.segs_per_sec >= 1 && self.secs_per_zone >= 1, || {
            format!(
                "segs_per_sec {} secs_per_zone {}",
                self.segs_per_sec, self.secs_per_zone
            )
        })?;
        ensure(self.segment_count_ckpt == 2, || {
            format!("segment_count_ckpt {}", self.segment_count_ckpt)
        })?;
        ensure(
            self.segment_count_sit >= 2 && self.segment_count_sit.is_multiple_of(2),
            || format!("segment_count_sit {}", self.segment_count_sit),
        )?;
        ensure(
            self.segment_count_nat >= 2 && self.segment_count_nat.is_multiple_of(2),
            || format!("segment_count_nat {}", self.segment_count_nat),
        )?;
        ensure(self.segment_count_main >= 6, || {
            format!("segment_count_main {}", self.segment_count_main)
        })?;
        let seg = u64::from(BLOCKS_PER_SEG);
        let chain = [
            ("cp_blkaddr", self.cp_blkaddr, self.segment0_blkaddr, 0),
            (
                "sit_blkaddr",
                self.sit_blkaddr,
                self.cp_blkaddr,
                self.segment_count_ckpt,
            ),
            (
                "nat_blkaddr",
                self.nat_blkaddr,
                self.sit_blkaddr,
                self.segment_count_sit,
            ),
            (
                "ssa_blkaddr",
                self.ssa_blkaddr,
                self.nat_blkaddr,
                self.segment_count_nat,
            ),
            (
                "main_blkaddr",
                self.main_blkaddr,
                self.ssa_blkaddr,
                self.segment_count_ssa,
            ),
        ];
        for (name, addr, prev, segs) in chain {
            ensure(
                u64::from(addr) == u64::from(prev) + u64::from(segs) * seg,
                || format!("{name} {addr} does not follow the previous area at {prev}"),
            )?;
        }
        let meta = u64::from(self.segment_count_ckpt)
            + u64::from(self.segment_count_sit)
            + u64::from(self.segment_count_nat)
            + u64::from(self.segment_count_ssa);
        ensure(
            meta + u64::from(self.segment_count_main) <= u64::from(self.segment_count),
            || format!("segment_count {} below the areas' sum", self.segment_count),
        )?;
        ensure(
            u64::from(self.segment_count_ssa) * seg >= u64::from(self.segment_count_main),
            || format!("segment_count_ssa {} too small", self.segment_count_ssa),
        )?;
        let end = u64::from(self.main_blkaddr) + u64::from(self.segment_count_main) * seg;
        ensure(end <= self.block_count && end <= device_blocks, || {
            format!(
                "main area ends at block {end}, block_count {} device {device_blocks}",
                self.block_count
            )
        })?;
        // The SIT must hold one entry per main segment in each copy (55 entries a block).
        ensure(
            u64::from(self.segment_count_sit / 2) * seg * 55 >= u64::from(self.segment_count_main),
            || format!("segment_count_sit {} too small", self.segment_count_sit),
        )?;
        ensure(self.cp_payload < BLOCKS_PER_SEG / 2, || {
            format!("cp_payload {}", self.cp_payload)
        })?;
        ensure(self.root_ino >= 3 && self.root_ino < self.max_nid(), || {
            format!("root_ino {}", self.root_ino)
        })?;
        let unknown = self.feature & !SUPPORTED_FEATURES;
        if unknown != 0 {
            return Err(FsError::Corrupt(format!(
                "superblock features {unknown:#x} are not supported by this engine"
            )));
        }
        Ok(())
    }

    /// Writes the fields back into the raw bytes (and the crc when the feature is on).
    pub fn serialize(&self) -> Vec<u8> {
        let mut b = self.raw.clone();
        b.resize(SUPER_SIZE, 0);
        put_u32(&mut b, 0, super::F2FS_SUPER_MAGIC);
        put_u16(&mut b, 4, self.major_ver);
        put_u16(&mut b, 6, self.minor_ver);
        let words = [
            (8, self.log_sectorsize),
            (12, self.log_sectors_per_block),
            (16, self.log_blocksize),
            (20, self.log_blocks_per_seg),
            (24, self.segs_per_sec),
            (28, self.secs_per_zone),
            (32, self.checksum_offset),
            (44, self.section_count),
            (48, self.segment_count),
            (52, self.segment_count_ckpt),
            (56, self.segment_count_sit),
            (60, self.segment_count_nat),
            (64, self.segment_count_ssa),
            (68, self.segment_count_main),
            (72, self.segment0_blkaddr),
            (76, self.cp_blkaddr),
            (80, self.sit_blkaddr),
            (84, self.nat_blkaddr),
            (88, self.ssa_blkaddr),
            (92, self.main_blkaddr),
            (96, self.root_ino),
            (100, self.node_ino),
            (104, self.meta_ino),
            (OFF_CP_PAYLOAD, self.cp_payload),
            (OFF_FEATURE, self.feature),
        ];
        for (off, v) in words {
            put_u32(&mut b, off, v);
        }
        put_u64(&mut b, 36, self.block_count);
        if self.feature & FEATURE_SB_CHKSUM != 0 {
            let off = (self.checksum_offset as usize).min(SUPER_SIZE - 4);
            let crc = f2fs_crc32(&b[..off]);
            put_u32(&mut b, off, crc);
        }
        b
    }

    /// Node ids the NAT can hold (one copy of the NAT, 455 entries a block).
    pub fn max_nid(&self) -> u32 {
        let blocks = u64::from(self.segment_count_nat / 2) * u64::from(BLOCKS_PER_SEG);
        u32::try_from(blocks * super::segment::NAT_ENTRIES_PER_BLOCK as u64).unwrap_or(u32::MAX)
    }

    /// Bytes of the SIT version bitmap in the checkpoint.
    pub fn sit_bitmap_bytes(&self) -> usize {
        (self.segment_count_sit / 2 * BLOCKS_PER_SEG / 8) as usize
    }

    /// Bytes of the NAT version bitmap in the checkpoint.
    pub fn nat_bitmap_bytes(&self) -> usize {
        (self.segment_count_nat / 2 * BLOCKS_PER_SEG / 8) as usize
    }

    /// Whether `blk` lies in the main area.
    pub fn in_main(&self, blk: u32) -> bool {
        blk >= self.main_blkaddr
            && u64::from(blk)
                < u64::from(self.main_blkaddr)
                    + u64::from(self.segment_count_main) * u64::from(BLOCKS_PER_SEG)
    }

    /// Main-area segment of `blk` (which must be in the main area).
    pub fn segno(&self, blk: u32) -> u32 {
        (blk - self.main_blkaddr) / BLOCKS_PER_SEG
    }

    /// First block of main-area segment `segno`.
    pub fn seg_start(&self, segno: u32) -> u32 {
        self.main_blkaddr + segno * BLOCKS_PER_SEG
    }
}

/// Byte offset of `cp_payload`: after uuid, volume name and the extension list.
const OFF_CP_PAYLOAD: usize = 108 + 16 + 512 * 2 + 4 + 64 * 8;
/// Byte offset of `feature`: after cp_payload and two 256-byte version strings.
const OFF_FEATURE: usize = OFF_CP_PAYLOAD + 4 + 256 * 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_offsets_match_f2fs_fs_h() {
        assert_eq!(OFF_CP_PAYLOAD, 1664);
        assert_eq!(OFF_FEATURE, 2180);
    }
}
