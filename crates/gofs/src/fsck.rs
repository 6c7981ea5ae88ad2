//! `gofs fsck`: an offline consistency check of an F2FS image, read-only, through the same
//! [`BlockIo`] and format parsers the engine uses (papers/gofs.md §3.2: GoFS keeps F2FS's
//! layout, so an image must stay what `fsck.f2fs` accepts; §3.5: the checkpoint, NAT, SIT and
//! SSA it leaves behind must agree). It checks what `fsck.f2fs` checks: the superblock and
//! checkpoint copies, the NAT and node footers of every node reachable from the root and the
//! orphan list, double ownership of node and data blocks, SIT bitmaps and counts against the
//! blocks found, SSA owners, directory hashing and placement, dot entries, dentry types and
//! link counts, `i_blocks` and inline-data rules. Every problem names the inode, node and
//! block it concerns; nothing in the image can make the check panic.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use crate::error::Result;
use crate::format::checkpoint::{
    CP_COMPACT_SUM_FLAG, CP_ORPHAN_PRESENT_FLAG, CP_UMOUNT_FLAG, Checkpoint, parse_orphan_block,
};
use crate::format::dentry::{
    DentryLayout, MAX_DIR_HASH_DEPTH, RawDentry, bucket_blocks, dentry_hash, dir_buckets, ft,
    parse_dentries,
};
use crate::format::node::{
    ADDRS_PER_BLOCK, F2FS_INLINE_DATA, F2FS_INLINE_DENTRY, NIDS_PER_BLOCK, NODE_DIND, NODE_IND1,
    NODE_IND2, Node, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK,
    start_bidx_of_node,
};
use crate::format::segment::{
    Journal, JournalKind, NAT_ENTRIES_PER_BLOCK, NatEntry, SIT_ENTRIES_PER_BLOCK, SUM_TYPE_DATA,
    SUM_TYPE_NODE, SitEntry, SummaryBlock, compacted_blocks, parse_compacted, parse_nat_block,
};
use crate::format::superblock::{FEATURE_FLEXIBLE_INLINE_XATTR, SUPER_OFFSET, Superblock};
use crate::format::{
    BLOCK_SIZE, BLOCKS_PER_SEG, Block, BlockIo, NEW_ADDR, read_block, test_bit_msb, zero_block,
};

/// The footer offset of an xattr node (`XATTR_NODE_OFFSET`: all offset bits set).
const XATTR_NODE_OFS: u32 = u32::MAX >> 3;
/// Blocks read per batch (NAT, SIT, SSA, inodes, dentry blocks, a node's children).
const READ_BATCH: usize = 256;
/// `CP_CRC_RECOVERY_FLAG`: node footers' `cp_ver` carries the checkpoint CRC in its high half.
const CP_CRC_RECOVERY_FLAG: u32 = 0x40;

/// The rule a problem breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Check {
    /// a superblock copy is unreadable or invalid
    Superblock,
    /// a checkpoint pack is invalid, or its summaries/orphans cannot be read
    Checkpoint,
    /// the image uses a layout this check does not read
    Unsupported,
    /// the current segments of the checkpoint are inconsistent
    Curseg,
    /// a NAT entry is missing, out of range or names the wrong inode
    Nat,
    /// a node's footer (nid, ino, offset, cp_ver) disagrees with how it is reached
    NodeFooter,
    /// a node id is reached twice
    NodeTwice,
    /// an allocated node id is not reachable from the root or the orphan list
    LeakedNid,
    /// a block address lies outside the main area
    BlockAddress,
    /// a block is owned twice
    BlockTwice,
    /// a block is valid in the SIT but owned by nothing
    SitUnowned,
    /// an owned block is not valid in the SIT
    SitMissing,
    /// a segment's SIT valid-block count disagrees with its bitmap or its owned blocks
    SitCount,
    /// a block lies in a segment of the wrong type (data in a node segment or vice versa)
    SegmentType,
    /// the checkpoint's total block/node/inode counts disagree with what was found
    CheckpointCounts,
    /// a summary (SSA) entry does not name the block's owner
    Ssa,
    /// an inode's mode is not a known file type
    Mode,
    /// a dentry's stored hash differs from the name's hash
    DentryHash,
    /// a dentry sits in a block its hash does not lead to
    DentryPosition,
    /// a dentry's name is invalid
    DentryName,
    /// a dentry names a free, out-of-range or non-inode node id
    DentryIno,
    /// a dentry's file type differs from its inode's mode
    DentryType,
    /// '.' or '..' is missing, doubled or names the wrong inode
    Dots,
    /// an inode's link count differs from the dentries naming it
    Links,
    /// an inode's `i_blocks` differs from the blocks it maps
    IBlocks,
    /// inline data or dentry flags disagree with the inode's use of `i_addr`
    Inline,
    /// an inode's size disagrees with the blocks it maps
    Size,
    /// an orphan inode is invalid
    Orphan,
    /// a block could not be read
    Read,
}

impl Check {
    /// The check's stable name (JSON and text output).
    pub fn name(self) -> &'static str {
        match self {
            Self::Superblock => "superblock",
            Self::Checkpoint => "checkpoint",
            Self::Unsupported => "unsupported",
            Self::Curseg => "curseg",
            Self::Nat => "nat",
            Self::NodeFooter => "node-footer",
            Self::NodeTwice => "node-twice",
            Self::LeakedNid => "leaked-nid",
            Self::BlockAddress => "block-address",
            Self::BlockTwice => "block-twice",
            Self::SitUnowned => "sit-unowned",
            Self::SitMissing => "sit-missing",
            Self::SitCount => "sit-count",
            Self::SegmentType => "segment-type",
            Self::CheckpointCounts => "checkpoint-counts",
            Self::Ssa => "ssa",
            Self::Mode => "mode",
            Self::DentryHash => "dentry-hash",
            Self::DentryPosition => "dentry-position",
            Self::DentryName => "dentry-name",
            Self::DentryIno => "dentry-ino",
            Self::DentryType => "dentry-type",
            Self::Dots => "dots",
            Self::Links => "links",
            Self::IBlocks => "i-blocks",
            Self::Inline => "inline",
            Self::Size => "size",
            Self::Orphan => "orphan",
            Self::Read => "read",
        }
    }
}

/// How bad a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// the image is inconsistent
    Error,
    /// a redundant copy is damaged or a soft counter is off; the image still reads right
    Warning,
}

/// One finding, with the inode, node and block it concerns where known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// the rule broken
    pub check: Check,
    /// error or warning
    pub severity: Severity,
    /// the inode concerned
    pub ino: Option<u32>,
    /// the node id concerned
    pub nid: Option<u32>,
    /// the block address concerned
    pub blk: Option<u32>,
    /// what was found
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{sev} [{}]", self.check.name())?;
        for (k, v) in [("ino", self.ino), ("nid", self.nid), ("blk", self.blk)] {
            if let Some(v) = v {
                write!(f, " {k} {v}")?;
            }
        }
        write!(f, ": {}", self.message)
    }
}

/// Settings of [`check`].
#[derive(Debug, Clone)]
pub struct FsckOptions {
    /// Problems kept in the report; later ones are only counted (a wrecked image can have
    /// one per block).
    pub max_problems: usize,
}

impl Default for FsckOptions {
    fn default() -> Self {
        Self { max_problems: 1000 }
    }
}

/// What [`check`] found.
#[derive(Debug, Clone, Default)]
pub struct FsckReport {
    /// the superblock copy used (0 or 1)
    pub superblock_copy: Option<u32>,
    /// the checkpoint pack used (0 or 1)
    pub checkpoint_pack: Option<u32>,
    /// its version
    pub checkpoint_version: u64,
    /// directories reached
    pub dirs: u64,
    /// other inodes reached (files, symlinks, devices)
    pub files: u64,
    /// bytes in the non-directory inodes reached (their `i_size`)
    pub bytes: u64,
    /// node blocks reached (inodes included)
    pub nodes: u64,
    /// data blocks reached (those reserved as NEW_ADDR included)
    pub data_blocks: u64,
    /// findings, at most [`FsckOptions::max_problems`]
    pub problems: Vec<Problem>,
    /// errors found (counted past the kept problems too)
    pub errors: u64,
    /// warnings found
    pub warnings: u64,
}

impl FsckReport {
    /// No errors (warnings allowed).
    pub fn is_clean(&self) -> bool {
        self.errors == 0
    }

    /// Whether a kept problem breaks `c` (with severity error).
    pub fn has(&self, c: Check) -> bool {
        self.problems
            .iter()
            .any(|p| p.check == c && p.severity == Severity::Error)
    }

    /// The report as JSON (`gofs fsck --json`).
    pub fn to_json(&self) -> serde_json::Value {
        let problems: Vec<serde_json::Value> = self
            .problems
            .iter()
            .map(|p| {
                serde_json::json!({
                    "check": p.check.name(),
                    "severity": match p.severity {
                        Severity::Error => "error",
                        Severity::Warning => "warning",
                    },
                    "ino": p.ino,
                    "nid": p.nid,
                    "blk": p.blk,
                    "message": p.message,
                })
            })
            .collect();
        serde_json::json!({
            "superblock_copy": self.superblock_copy,
            "checkpoint_pack": self.checkpoint_pack,
            "checkpoint_version": self.checkpoint_version,
            "dirs": self.dirs,
            "files": self.files,
            "bytes": self.bytes,
            "nodes": self.nodes,
            "data_blocks": self.data_blocks,
            "errors": self.errors,
            "warnings": self.warnings,
            "problems": problems,
        })
    }

    fn push(&mut self, max: usize, p: Problem) {
        match p.severity {
            Severity::Error => self.errors += 1,
            Severity::Warning => self.warnings += 1,
        }
        if self.problems.len() < max {
            self.problems.push(p);
        }
    }
}

/// Builds a [`Problem`]: `at(check)` then optional subjects.
#[derive(Debug, Clone, Copy)]
struct At {
    ino: Option<u32>,
    nid: Option<u32>,
    blk: Option<u32>,
}

const NOWHERE: At = At {
    ino: None,
    nid: None,
    blk: None,
};

fn at(ino: Option<u32>, nid: Option<u32>, blk: Option<u32>) -> At {
    At { ino, nid, blk }
}

/// The metadata the walk checks against: superblock, checkpoint, NAT and SIT (with the
/// checkpoint's journals applied), the current segments' summaries and the orphan list.
#[derive(Debug)]
struct Meta {
    sb: Superblock,
    cp: Checkpoint,
    nat: Vec<NatEntry>,
    sit: Vec<SitEntry>,
    /// summaries of the six current segments; node ones are `None` after an unclean
    /// shutdown (the kernel rebuilds them from the footers)
    sums: Vec<Option<SummaryBlock>>,
    orphans: Vec<u32>,
}

/// Checks the image on `io` read-only. Returns `Err` only when the device itself fails on
/// the superblock; everything wrong with the image is a [`Problem`] in the report.
pub fn check(io: &dyn BlockIo, opts: &FsckOptions) -> Result<FsckReport> {
    let mut c = Checker {
        io,
        max: opts.max_problems,
        rep: FsckReport::default(),
    };
    if let Some(meta) = c.load()? {
        Walk::new(&mut c, &meta).run();
    }
    Ok(c.rep)
}

/// The report under construction and the device.
struct Checker<'a> {
    io: &'a dyn BlockIo,
    max: usize,
    rep: FsckReport,
}

impl Checker<'_> {
    fn error(&mut self, check: Check, a: At, message: String) {
        self.problem(check, Severity::Error, a, message);
    }

    fn warn(&mut self, check: Check, a: At, message: String) {
        self.problem(check, Severity::Warning, a, message);
    }

    fn problem(&mut self, check: Check, severity: Severity, a: At, message: String) {
        let p = Problem {
            check,
            severity,
            ino: a.ino,
            nid: a.nid,
            blk: a.blk,
            message,
        };
        self.rep.push(self.max, p);
    }

    /// Reads one block, reporting a failure.
    fn read(&mut self, blk: u64, a: At) -> Option<Box<Block>> {
        match read_block(self.io, blk) {
            Ok(b) => Some(b),
            Err(e) => {
                self.error(Check::Read, a, format!("block {blk}: {e}"));
                None
            }
        }
    }

    /// Reads `blks` in batches an NVMe device keeps in flight together (one command per
    /// block costs a round trip each); a failed batch is read again block by block, so the
    /// failure names its block. `None` for an unreadable block.
    fn read_batch(&mut self, blks: &[u64], a: At) -> Vec<Option<Box<Block>>> {
        let mut out = Vec::with_capacity(blks.len());
        for chunk in blks.chunks(READ_BATCH) {
            let mut bufs: Vec<Box<Block>> = chunk.iter().map(|_| zero_block()).collect();
            let mut reqs: Vec<(u64, &mut [u8])> = chunk
                .iter()
                .copied()
                .zip(bufs.iter_mut().map(|b| &mut b[..]))
                .collect();
            let ok = self.io.read_many(&mut reqs).is_ok();
            drop(reqs);
            if ok {
                out.extend(bufs.into_iter().map(Some));
            } else {
                out.extend(chunk.iter().map(|&b| self.read(b, a)));
            }
        }
        out
    }

    /// Superblock, checkpoint, summaries, NAT, SIT, orphans; `None` when they are too broken
    /// to walk the tree.
    fn load(&mut self) -> Result<Option<Meta>> {
        let blocks = self.io.block_count();
        let mut sbs = Vec::new();
        for copy in 0..2u32 {
            let b = read_block(self.io, u64::from(copy))?;
            match Superblock::parse(&b[SUPER_OFFSET..], blocks) {
                Ok(sb) => sbs.push((copy, sb)),
                Err(e) => self.warn(
                    Check::Superblock,
                    at(None, None, Some(copy)),
                    format!("superblock copy {copy}: {e}"),
                ),
            }
        }
        let Some((copy, sb)) = sbs.first().cloned() else {
            self.error(Check::Superblock, NOWHERE, "no valid superblock".into());
            return Ok(None);
        };
        if let [(_, a), (_, b)] = &sbs[..]
            && a.raw != b.raw
        {
            self.warn(
                Check::Superblock,
                NOWHERE,
                "the superblock copies differ".into(),
            );
        }
        self.rep.superblock_copy = Some(copy);
        if sb.segs_per_sec != 1 || sb.cp_payload != 0 {
            self.error(
                Check::Unsupported,
                NOWHERE,
                format!(
                    "segs_per_sec {} cp_payload {}: only 1 and 0 are read",
                    sb.segs_per_sec, sb.cp_payload
                ),
            );
            return Ok(None);
        }
        let Some((cp, pack)) = self.load_checkpoint(&sb) else {
            return Ok(None);
        };
        self.rep.checkpoint_pack = Some(pack);
        self.rep.checkpoint_version = cp.version;
        if !self.cursegs_valid(&sb, &cp) {
            return Ok(None);
        }
        let sums = match load_summaries(self.io, &sb, &cp, pack) {
            Ok(s) => s,
            Err(e) => {
                let msg = format!("checkpoint pack {pack} summaries: {e}");
                self.error(Check::Checkpoint, NOWHERE, msg);
                return Ok(None);
            }
        };
        let Some(nat) = self.load_nat(&sb, &cp, sums.first()) else {
            return Ok(None);
        };
        let Some(sit) = self.load_sit(&sb, &cp, sums.get(2)) else {
            return Ok(None);
        };
        let orphans = self.load_orphans(&sb, &cp, pack);
        Ok(Some(Meta {
            sb,
            cp,
            nat,
            sit,
            sums,
            orphans,
        }))
    }

    fn load_checkpoint(&mut self, sb: &Superblock) -> Option<(Checkpoint, u32)> {
        let mut packs = Vec::new();
        for pack in 0..2 {
            match load_pack(self.io, sb, pack) {
                Ok(cp) => packs.push((cp, pack)),
                Err(e) => self.warn(
                    Check::Checkpoint,
                    NOWHERE,
                    format!("checkpoint pack {pack}: {e}"),
                ),
            }
        }
        // The newer pack; pack 0 on a tie, as f2fs-tools and the kernel choose (sload.f2fs
        // rewrites the pack with the same version).
        let best = packs
            .into_iter()
            .reduce(|a, b| if b.0.version > a.0.version { b } else { a });
        if best.is_none() {
            self.error(
                Check::Checkpoint,
                NOWHERE,
                "no valid checkpoint pack".into(),
            );
        }
        best
    }

    fn cursegs_valid(&mut self, sb: &Superblock, cp: &Checkpoint) -> bool {
        let mut ok = true;
        let mut seen = BTreeMap::new();
        for i in 0..6 {
            let (segno, off) = curseg_pos(cp, i);
            if segno >= sb.segment_count_main || u32::from(off) > BLOCKS_PER_SEG {
                self.error(
                    Check::Curseg,
                    NOWHERE,
                    format!("log {i}: segment {segno} offset {off} outside the main area"),
                );
                ok = false;
            } else if let Some(j) = seen.insert(segno, i) {
                let msg = format!("logs {j} and {i} share segment {segno}");
                self.error(Check::Curseg, NOWHERE, msg);
                ok = false;
            }
        }
        ok
    }

    fn load_nat(
        &mut self,
        sb: &Superblock,
        cp: &Checkpoint,
        sum: Option<&Option<SummaryBlock>>,
    ) -> Option<Vec<NatEntry>> {
        let blocks = sb.segment_count_nat / 2 * BLOCKS_PER_SEG;
        let mut nat = Vec::with_capacity(blocks as usize * NAT_ENTRIES_PER_BLOCK);
        let addrs: Vec<u64> = (0..blocks)
            .map(|i| {
                let second = test_bit_msb(&cp.nat_bitmap, i as usize);
                u64::from(sb.nat_blkaddr)
                    + u64::from(i / BLOCKS_PER_SEG) * 2 * u64::from(BLOCKS_PER_SEG)
                    + u64::from(i % BLOCKS_PER_SEG)
                    + if second { u64::from(BLOCKS_PER_SEG) } else { 0 }
            })
            .collect();
        for b in self.read_batch(&addrs, NOWHERE) {
            let b = b?;
            nat.extend(parse_nat_block(&b));
        }
        if let Some(Some(SummaryBlock {
            journal: Journal::Nat(v),
            ..
        })) = sum
        {
            for (nid, e) in v {
                match nat.get_mut(*nid as usize) {
                    Some(slot) => *slot = *e,
                    None => self.error(
                        Check::Nat,
                        at(None, Some(*nid), None),
                        "NAT journal entry past the NAT".into(),
                    ),
                }
            }
        }
        Some(nat)
    }

    fn load_sit(
        &mut self,
        sb: &Superblock,
        cp: &Checkpoint,
        sum: Option<&Option<SummaryBlock>>,
    ) -> Option<Vec<SitEntry>> {
        let main = sb.segment_count_main as usize;
        let blocks = sb.segment_count_main.div_ceil(SIT_ENTRIES_PER_BLOCK as u32);
        let mut sit = Vec::with_capacity(main);
        let addrs: Vec<u64> = (0..blocks)
            .map(|i| {
                let second = test_bit_msb(&cp.sit_bitmap, i as usize);
                u64::from(sb.sit_blkaddr)
                    + u64::from(i)
                    + if second {
                        u64::from(sb.segment_count_sit / 2 * BLOCKS_PER_SEG)
                    } else {
                        0
                    }
            })
            .collect();
        for b in self.read_batch(&addrs, NOWHERE) {
            let b = b?;
            for k in 0..SIT_ENTRIES_PER_BLOCK {
                // Parsed leniently (the strict parser refuses a count that differs from the
                // map): the mismatch is a finding here, not a reason to stop.
                let raw = &b[k * 74..k * 74 + 74];
                let v = u16::from_le_bytes([raw[0], raw[1]]);
                let mut valid_map = [0u8; 64];
                valid_map.copy_from_slice(&raw[2..66]);
                let mut mtime = [0u8; 8];
                mtime.copy_from_slice(&raw[66..74]);
                sit.push(SitEntry {
                    seg_type: (v >> 10) as u8,
                    valid_blocks: v & 0x3FF,
                    valid_map,
                    mtime: u64::from_le_bytes(mtime),
                });
            }
        }
        sit.truncate(main);
        if let Some(Some(SummaryBlock {
            journal: Journal::Sit(v),
            ..
        })) = sum
        {
            for (seg, e) in v {
                match sit.get_mut(*seg as usize) {
                    Some(slot) => *slot = *e,
                    None => self.error(
                        Check::SitCount,
                        NOWHERE,
                        format!("SIT journal segment {seg} past the main area"),
                    ),
                }
            }
        }
        for (segno, e) in sit.iter().enumerate() {
            let bits: u32 = e.valid_map.iter().map(|x| x.count_ones()).sum();
            if u32::from(e.valid_blocks) != bits {
                let blk = Some(sb.seg_start(segno as u32));
                self.error(
                    Check::SitCount,
                    at(None, None, blk),
                    format!(
                        "segment {segno}: SIT valid count {} but {bits} bits set",
                        e.valid_blocks
                    ),
                );
            }
        }
        Some(sit)
    }

    fn load_orphans(&mut self, sb: &Superblock, cp: &Checkpoint, pack: u32) -> Vec<u32> {
        let mut out = Vec::new();
        if cp.flags & CP_ORPHAN_PRESENT_FLAG == 0 {
            return out;
        }
        let start = cp_start(sb, pack) + 1;
        for i in 0..u64::from(cp.pack_start_sum.saturating_sub(1)) {
            let Some(b) = self.read(start + i, NOWHERE) else {
                continue;
            };
            match parse_orphan_block(&b) {
                Ok(v) => out.extend(v),
                Err(e) => self.error(Check::Orphan, NOWHERE, format!("orphan block {i}: {e}")),
            }
        }
        out
    }
}

/// The pack start of checkpoint pack `pack`.
fn cp_start(sb: &Superblock, pack: u32) -> u64 {
    u64::from(sb.cp_blkaddr) + u64::from(pack) * u64::from(BLOCKS_PER_SEG)
}

/// Reads and validates checkpoint pack `pack` (both its checkpoint blocks, its size).
fn load_pack(io: &dyn BlockIo, sb: &Superblock, pack: u32) -> Result<Checkpoint> {
    let start = cp_start(sb, pack);
    let (s, n) = (sb.sit_bitmap_bytes(), sb.nat_bitmap_bytes());
    let first = Checkpoint::parse(&*read_block(io, start)?, s, n)?;
    let total = first.pack_total_block_count;
    if !(3..=BLOCKS_PER_SEG).contains(&total) {
        return Err(crate::format::corrupt(format!("pack of {total} blocks")));
    }
    let last = Checkpoint::parse(&*read_block(io, start + u64::from(total) - 1)?, s, n)?;
    if last.version != first.version {
        return Err(crate::format::corrupt(format!(
            "versions {} and {} differ",
            first.version, last.version
        )));
    }
    let sum_blocks = if first.flags & CP_COMPACT_SUM_FLAG != 0 {
        1
    } else {
        3
    };
    let node_sums = if first.flags & CP_UMOUNT_FLAG != 0 {
        3
    } else {
        0
    };
    if first.pack_start_sum < 1 || first.pack_start_sum + sum_blocks + node_sums + 1 > total {
        return Err(crate::format::corrupt(format!(
            "cp_pack_start_sum {} with {total} blocks",
            first.pack_start_sum
        )));
    }
    Ok(first)
}

/// Segment and next free block of current log `i` (0..3 data, 3..6 node).
fn curseg_pos(cp: &Checkpoint, i: usize) -> (u32, u16) {
    if i < 3 {
        (cp.cur_data_segno[i], cp.cur_data_blkoff[i])
    } else {
        (cp.cur_node_segno[i - 3], cp.cur_node_blkoff[i - 3])
    }
}

/// The checkpoint's summaries of the six current segments (compacted or not).
fn load_summaries(
    io: &dyn BlockIo,
    sb: &Superblock,
    cp: &Checkpoint,
    pack: u32,
) -> Result<Vec<Option<SummaryBlock>>> {
    let start = cp_start(sb, pack);
    let total = u64::from(cp.pack_total_block_count);
    let umount = cp.flags & CP_UMOUNT_FLAG != 0;
    let mut out = Vec::with_capacity(6);
    if cp.flags & CP_COMPACT_SUM_FLAG != 0 {
        let first = start + u64::from(cp.pack_start_sum);
        let offs = [0, 1, 2].map(|i| {
            if cp.alloc_type[i] != 0 {
                BLOCKS_PER_SEG as usize
            } else {
                cp.cur_data_blkoff[i] as usize
            }
        });
        let blocks = (0..compacted_blocks(offs) as u64)
            .map(|i| read_block(io, first + i))
            .collect::<Result<Vec<_>>>()?;
        out.extend(parse_compacted(&blocks, offs)?.into_iter().map(Some));
    } else {
        let base = if umount { 7 } else { 4 };
        for t in 0..3 {
            let b = read_block(io, start + total - base + t as u64)?;
            out.push(Some(SummaryBlock::parse(&b, JournalKind::of_curseg(t))?));
        }
    }
    for t in 3..6u64 {
        out.push(if umount {
            let b = read_block(io, start + total - 7 + t)?;
            Some(SummaryBlock::parse(&b, JournalKind::Raw)?)
        } else {
            None
        });
    }
    Ok(out)
}

/// Who owns a main-area block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// node block of node id `nid`
    Node { nid: u32 },
    /// data block at address slot `ofs` of node `nid` (of inode `ino`)
    Data { ino: u32, nid: u32, ofs: u16 },
}

/// The outcome of claiming a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// outside the main area (reported)
    Outside,
    /// owned before (reported); its content is still worth a look for a node
    Twice,
    /// now owned by the claimant
    Fresh,
}

/// What the walk records per inode for the link-count check.
#[derive(Debug, Clone, Copy)]
struct InodeRec {
    mode: u16,
    i_links: u32,
    /// dentries (other than dots) naming it
    named: u32,
    /// subdirectories found in it
    subdirs: u32,
}

/// A dentry naming an inode.
#[derive(Debug, Clone)]
struct Ref {
    dir: u32,
    ino: u32,
    file_type: u8,
    name: String,
    blk: Option<u32>,
}

/// One inode waiting to be checked, first named in directory `parent` (`None`: an orphan).
#[derive(Debug, Clone, Copy)]
struct Pending {
    ino: u32,
    parent: Option<u32>,
}

/// The tree walk and the cross-checks after it.
struct Walk<'c, 'a, 'm> {
    c: &'c mut Checker<'a>,
    m: &'m Meta,
    flexible: bool,
    /// owner of each main-area block
    owners: Vec<Option<Owner>>,
    /// node ids reached
    seen: Vec<bool>,
    inodes: HashMap<u32, InodeRec>,
    queue: Vec<Pending>,
    /// inodes queued once already
    queued: HashSet<u32>,
    /// dentries naming inodes, resolved after the walk
    refs: Vec<Ref>,
    /// node blocks read ahead in a batch, by address
    cache: HashMap<u32, Box<Block>>,
    new_addrs: u64,
}

/// What one inode's tree walk collects.
#[derive(Debug, Default)]
struct Mapped {
    /// blocks counted as `i_blocks` counts them (the inode, its nodes, its data)
    blocks: u64,
    /// (file block index, address) of each real data block, for directories
    dir_blocks: Vec<(u64, u32)>,
    /// highest file block index mapped, plus one
    end: u64,
}

impl<'c, 'a, 'm> Walk<'c, 'a, 'm> {
    fn new(c: &'c mut Checker<'a>, m: &'m Meta) -> Self {
        let main = m.sb.segment_count_main as usize * BLOCKS_PER_SEG as usize;
        Self {
            c,
            m,
            flexible: m.sb.feature & FEATURE_FLEXIBLE_INLINE_XATTR != 0,
            owners: vec![None; main],
            seen: vec![false; m.nat.len()],
            inodes: HashMap::new(),
            queue: Vec::new(),
            queued: HashSet::new(),
            refs: Vec::new(),
            cache: HashMap::new(),
            new_addrs: 0,
        }
    }

    fn run(mut self) {
        let root = self.m.sb.root_ino;
        self.queued.insert(root);
        self.queue.push(Pending {
            ino: root,
            parent: Some(root),
        });
        self.drain();
        if self
            .inodes
            .get(&root)
            .is_some_and(|r| r.mode & S_IFMT != S_IFDIR)
        {
            self.c.error(
                Check::Mode,
                at(Some(root), Some(root), None),
                "the root is not a directory".into(),
            );
        }
        for &ino in &self.m.orphans {
            if self.nat(ino).is_none_or(|e| e.block_addr == 0) || !self.queued.insert(ino) {
                let msg = "orphan entry names a free, out-of-range or linked inode".into();
                self.c
                    .error(Check::Orphan, at(Some(ino), Some(ino), None), msg);
                continue;
            }
            self.queue.push(Pending { ino, parent: None });
            self.drain();
        }
        self.check_links();
        self.check_leaks();
        self.check_sit();
        self.check_ssa();
        self.check_counts();
    }

    fn nat(&self, nid: u32) -> Option<NatEntry> {
        self.m.nat.get(nid as usize).copied()
    }

    /// Checks the queued inodes, reading each batch's inode blocks together.
    fn drain(&mut self) {
        while !self.queue.is_empty() {
            let batch = self
                .queue
                .split_off(self.queue.len().saturating_sub(READ_BATCH));
            self.prefetch(batch.iter().map(|p| p.ino));
            for p in batch.into_iter().rev() {
                self.check_inode(p);
            }
            self.cache.clear();
        }
    }

    /// Reads the node blocks of `nids` ahead in one batch (those with a usable NAT entry
    /// whose block nothing owns yet); [`Self::node`] takes them from the cache.
    fn prefetch(&mut self, nids: impl Iterator<Item = u32>) {
        let sb = &self.m.sb;
        let addrs: Vec<u32> = nids
            .filter_map(|nid| self.nat(nid))
            .map(|e| e.block_addr)
            .filter(|&a| {
                sb.in_main(a)
                    && !self.cache.contains_key(&a)
                    && self
                        .owners
                        .get((a - sb.main_blkaddr) as usize)
                        .is_some_and(Option::is_none)
            })
            .collect();
        let blks: Vec<u64> = addrs.iter().map(|&a| u64::from(a)).collect();
        for (a, b) in addrs.into_iter().zip(self.c.read_batch(&blks, NOWHERE)) {
            if let Some(b) = b {
                self.cache.insert(a, b);
            }
        }
    }

    /// Claims main-area block `blk` for `owner`: in the main area, owned once, valid in the
    /// SIT, in a segment of the right type.
    fn claim(&mut self, blk: u32, owner: Owner, a: At) -> Claim {
        let sb = &self.m.sb;
        if !sb.in_main(blk) {
            let msg = format!("address {blk} outside the main area");
            self.c.error(Check::BlockAddress, a, msg);
            return Claim::Outside;
        }
        let idx = (blk - sb.main_blkaddr) as usize;
        let Some(slot) = self.owners.get_mut(idx) else {
            return Claim::Outside;
        };
        if let Some(prev) = *slot {
            let msg = format!("block {blk} already owned by {prev:?}, now claimed by {owner:?}");
            self.c.error(Check::BlockTwice, a, msg);
            return Claim::Twice;
        }
        *slot = Some(owner);
        let (segno, off) = (idx / BLOCKS_PER_SEG as usize, idx % BLOCKS_PER_SEG as usize);
        if let Some(se) = self.m.sit.get(segno) {
            if !test_bit_msb(&se.valid_map, off) {
                let msg = format!("block {blk} is owned but clear in segment {segno}'s SIT map");
                self.c.error(Check::SitMissing, a, msg);
            }
            let node = matches!(owner, Owner::Node { .. });
            if se.valid_blocks > 0 && (se.seg_type >= 3) != node {
                let what = if node { "node" } else { "data" };
                let msg = format!("{what} block in segment {segno} of type {}", se.seg_type);
                self.c.error(Check::SegmentType, a, msg);
            }
        }
        Claim::Fresh
    }

    /// Reads node `nid` of inode `ino` expected at footer offset `ofs`, after checking its NAT
    /// entry and claiming its block. `None` when it cannot be used.
    fn node(&mut self, nid: u32, ino: u32, ofs: u32) -> Option<Node> {
        let a = at(Some(ino), Some(nid), None);
        let sb = &self.m.sb;
        let Some(e) = self.nat(nid).filter(|_| nid >= 3) else {
            self.c.error(Check::Nat, a, "node id out of range".into());
            return None;
        };
        if nid == sb.node_ino || nid == sb.meta_ino {
            self.c
                .error(Check::Nat, a, "reserved node id used by a file".into());
            return None;
        }
        // In range: the NAT (which `seen` mirrors) has an entry for `nid`.
        if self
            .seen
            .get_mut(nid as usize)
            .is_none_or(|s| std::mem::replace(s, true))
        {
            self.c
                .error(Check::NodeTwice, a, "node id reached twice".into());
            return None;
        }
        let a = at(Some(ino), Some(nid), Some(e.block_addr));
        if e.block_addr == 0 || e.block_addr == NEW_ADDR {
            let msg = format!("reachable node has NAT address {:#x}", e.block_addr);
            self.c.error(Check::Nat, a, msg);
            return None;
        }
        if e.ino != ino {
            let msg = format!("NAT entry names inode {}, the tree inode {ino}", e.ino);
            self.c.error(Check::Nat, a, msg);
        }
        let claim = self.claim(e.block_addr, Owner::Node { nid }, a);
        if claim == Claim::Outside {
            return None;
        }
        if claim == Claim::Fresh {
            self.c.rep.nodes += 1;
        }
        let b = match self.cache.remove(&e.block_addr) {
            Some(b) => b,
            None => self.c.read(u64::from(e.block_addr), a)?,
        };
        let n = Node::from_block(b);
        if n.nid() != nid || n.ino() != ino || n.ofs() != ofs {
            let msg = format!(
                "footer nid {} ino {} offset {}, expected nid {nid} ino {ino} offset {ofs}",
                n.nid(),
                n.ino(),
                n.ofs()
            );
            self.c.error(Check::NodeFooter, a, msg);
            return None;
        }
        let cp = &self.m.cp;
        let (ver, cur) = if cp.flags & CP_CRC_RECOVERY_FLAG != 0 {
            (n.cp_ver() & 0xFFFF_FFFF, cp.version & 0xFFFF_FFFF)
        } else {
            (n.cp_ver(), cp.version)
        };
        if ver > cur {
            let msg = format!("footer cp_ver {ver} newer than the checkpoint's {cur}");
            self.c.error(Check::NodeFooter, a, msg);
        }
        // A block owned twice was walked through its first owner.
        (claim == Claim::Fresh).then_some(n)
    }

    /// One data address at slot `ofs` of node `nid`, file block `idx`.
    fn data(&mut self, ino: u32, nid: u32, ofs: usize, idx: u64, blk: u32, out: &mut Mapped) {
        if blk == 0 {
            return;
        }
        out.blocks += 1;
        out.end = out.end.max(idx + 1);
        self.c.rep.data_blocks += 1;
        if blk == NEW_ADDR {
            self.new_addrs += 1;
            return;
        }
        let owner = Owner::Data {
            ino,
            nid,
            ofs: ofs as u16,
        };
        if self.claim(blk, owner, at(Some(ino), Some(nid), Some(blk))) == Claim::Fresh {
            out.dir_blocks.push((idx, blk));
        }
    }

    /// A direct node at footer offset `ofs`.
    fn direct(&mut self, ino: u32, nid: u32, ofs: u32, per_inode: usize, out: &mut Mapped) {
        let Some(n) = self.node(nid, ino, ofs) else {
            return;
        };
        out.blocks += 1;
        let base = start_bidx_of_node(ofs, per_inode);
        for i in 0..ADDRS_PER_BLOCK {
            self.data(ino, nid, i, base + i as u64, n.slot(i), out);
        }
    }

    /// An indirect node at `ofs` whose children are direct (`double` false) or indirect.
    fn indirect(
        &mut self,
        ino: u32,
        nid: u32,
        ofs: u32,
        double: bool,
        pi: usize,
        out: &mut Mapped,
    ) {
        let Some(n) = self.node(nid, ino, ofs) else {
            return;
        };
        out.blocks += 1;
        self.prefetch((0..NIDS_PER_BLOCK).map(|i| n.slot(i)).filter(|&c| c != 0));
        for i in 0..NIDS_PER_BLOCK {
            let child = n.slot(i);
            if child == 0 {
                continue;
            }
            if double {
                let mid = ofs + 1 + i as u32 * (NIDS_PER_BLOCK as u32 + 1);
                self.indirect(ino, child, mid, false, pi, out);
            } else {
                self.direct(ino, child, ofs + 1 + i as u32, pi, out);
            }
        }
    }

    fn check_inode(&mut self, p: Pending) {
        let ino = p.ino;
        let a = at(Some(ino), Some(ino), None);
        let Some(n) = self.node(ino, ino, 0) else {
            return;
        };
        let mode = n.mode();
        let is_dir = mode & S_IFMT == S_IFDIR;
        self.inodes.insert(
            ino,
            InodeRec {
                mode,
                i_links: n.links(),
                named: 0,
                subdirs: 0,
            },
        );
        if ft_of_mode(mode).is_none() {
            self.c
                .error(Check::Mode, a, format!("mode {mode:#o} is no file type"));
        }
        if is_dir {
            self.c.rep.dirs += 1;
        } else {
            self.c.rep.files += 1;
            self.c.rep.bytes = self.c.rep.bytes.saturating_add(n.size());
        }
        let mut m = Mapped {
            blocks: 1,
            ..Mapped::default()
        };
        let x = n.xattr_nid();
        if x != 0 && self.node(x, ino, XATTR_NODE_OFS).is_some() {
            m.blocks += 1;
        }
        let flags = n.inline_flags();
        let inline = flags & (F2FS_INLINE_DATA | F2FS_INLINE_DENTRY);
        if inline != 0 {
            self.check_inline(&n, p, is_dir);
        } else {
            let per_inode = n.addrs_per_inode(self.flexible);
            for i in 0..per_inode {
                self.data(ino, ino, i, i as u64, n.i_addr(i), &mut m);
            }
            self.prefetch((0..5).map(|k| n.i_nid(k)).filter(|&c| c != 0));
            for k in 0..5 {
                let nid = n.i_nid(k);
                if nid == 0 {
                    continue;
                }
                match k {
                    0 | 1 => self.direct(ino, nid, 1 + k as u32, per_inode, &mut m),
                    2 => self.indirect(ino, nid, NODE_IND1, false, per_inode, &mut m),
                    3 => self.indirect(ino, nid, NODE_IND2, false, per_inode, &mut m),
                    _ => self.indirect(ino, nid, NODE_DIND, true, per_inode, &mut m),
                }
            }
        }
        if n.blocks() != m.blocks {
            let msg = format!("i_blocks {} but {} blocks mapped", n.blocks(), m.blocks);
            self.c.error(Check::IBlocks, a, msg);
        }
        if is_dir && inline == 0 {
            let size_blocks = n.size().div_ceil(BLOCK_SIZE as u64);
            if m.end > size_blocks {
                let msg = format!("size {} but block {} is mapped", n.size(), m.end - 1);
                self.c.error(Check::Size, a, msg);
            }
            let mut scan = DirScan::new(p, &n);
            let blks: Vec<u64> = m.dir_blocks.iter().map(|&(_, b)| u64::from(b)).collect();
            let read = self.c.read_batch(&blks, at(Some(ino), None, None));
            for (&(idx, blk), b) in m.dir_blocks.iter().zip(read) {
                if let Some(b) = b {
                    self.dentries(&b[..], DentryLayout::BLOCK, Some((idx, blk)), &mut scan);
                }
            }
            self.check_dots(ino, scan.dots);
        }
    }

    /// Inline data or dentries: flags consistent with the mode, `i_addr[0]` and the node
    /// slots unused, the size within the inline area.
    fn check_inline(&mut self, n: &Node, p: Pending, is_dir: bool) {
        let ino = p.ino;
        let a = at(Some(ino), Some(ino), None);
        let flags = n.inline_flags();
        let dentry = flags & F2FS_INLINE_DENTRY != 0;
        if flags & F2FS_INLINE_DATA != 0 && dentry {
            self.c.error(
                Check::Inline,
                a,
                "both inline data and inline dentry".into(),
            );
        }
        if dentry != is_dir {
            let msg = format!("inline flags {flags:#x} on mode {:#o}", n.mode());
            self.c.error(Check::Inline, a, msg);
        }
        if n.i_addr(0) != 0 {
            let msg = format!("inline inode with i_addr[0] = {:#x}", n.i_addr(0));
            self.c.error(Check::Inline, a, msg);
        }
        if (0..5).any(|k| n.i_nid(k) != 0) {
            self.c
                .error(Check::Inline, a, "inline inode with node ids".into());
        }
        let max = n.max_inline(self.flexible);
        if !dentry && n.size() > max as u64 {
            let msg = format!("inline size {} past the {max}-byte inline area", n.size());
            self.c.error(Check::Size, a, msg);
        }
        if dentry && is_dir {
            let area = n.inline_area(self.flexible).to_vec();
            let mut scan = DirScan::new(p, n);
            self.dentries(&area, DentryLayout::inline(max), None, &mut scan);
            self.check_dots(ino, scan.dots);
        }
    }

    /// Checks the dentries of one block (`pos` = its file block index and address) or of
    /// the inline area (`pos` None) of the directory `scan` reads, queueing the inodes they
    /// name.
    fn dentries(
        &mut self,
        area: &[u8],
        l: DentryLayout,
        pos: Option<(u64, u32)>,
        scan: &mut DirScan,
    ) {
        let dir = scan.p.ino;
        let blk = pos.map(|(_, b)| b);
        let a = at(Some(dir), None, blk);
        let list = match parse_dentries(area, l) {
            Ok(v) => v,
            Err(e) => {
                self.c
                    .error(Check::DentryName, a, format!("dentry area: {e}"));
                return;
            }
        };
        let bucket = pos.map(|(idx, _)| bucket_of_block(idx, scan.dir_level));
        for d in list {
            let name = String::from_utf8_lossy(&d.name).into_owned();
            let hash = dentry_hash(&d.name);
            if d.hash != hash {
                let msg = format!("'{name}': stored hash {:#x}, computed {hash:#x}", d.hash);
                self.c.error(Check::DentryHash, a, msg);
            }
            let dot = d.name == b"." || d.name == b"..";
            match bucket {
                Some(None) => {
                    let msg = format!("'{name}' in a block past the last hash level");
                    self.c.error(Check::DentryPosition, a, msg);
                }
                Some(Some((level, b, nb))) if !dot && u64::from(hash) % nb != b => {
                    let msg = format!(
                        "'{name}' (hash {hash:#x}) in level {level} bucket {b} of {nb}, \
                         belongs in bucket {}",
                        u64::from(hash) % nb
                    );
                    self.c.error(Check::DentryPosition, a, msg);
                }
                _ => {}
            }
            if dot {
                self.dot(&d, scan, pos);
                continue;
            }
            if d.name.iter().any(|&c| c == b'/' || c == 0) {
                self.c
                    .error(Check::DentryName, a, format!("'{name}' holds '/' or NUL"));
            }
            self.link(&d, &name, dir, blk);
        }
    }

    /// One '.' or '..' dentry.
    fn dot(&mut self, d: &RawDentry, scan: &mut DirScan, pos: Option<(u64, u32)>) {
        let dir = scan.p.ino;
        let a = at(Some(dir), None, pos.map(|(_, b)| b));
        let (count, want, what) = if d.name == b"." {
            (&mut scan.dots.dot, Some(dir), "'.'")
        } else {
            (&mut scan.dots.dotdot, scan.p.parent, "'..'")
        };
        *count += 1;
        if pos.is_some_and(|(idx, _)| idx != 0) {
            self.c
                .error(Check::Dots, a, format!("{what} outside the first block"));
        }
        if want.is_some_and(|w| w != d.ino) {
            let msg = format!(
                "{what} names inode {}, expected {}",
                d.ino,
                want.unwrap_or(0)
            );
            self.c.error(Check::Dots, a, msg);
        }
        if d.file_type != ft::DIR {
            let msg = format!("{what} has file type {}", d.file_type);
            self.c.error(Check::Dots, a, msg);
        }
    }

    fn check_dots(&mut self, dir: u32, dots: Dots) {
        if dots.dot != 1 || dots.dotdot != 1 {
            let msg = format!("{} '.' and {} '..' entries", dots.dot, dots.dotdot);
            self.c.error(Check::Dots, at(Some(dir), None, None), msg);
        }
    }

    /// A dentry naming `d.ino` in directory `dir`: checks the target is an allocated node,
    /// records the reference (resolved once every inode is read) and queues the target the
    /// first time it is named (a queue, not recursion: trees may be deep).
    fn link(&mut self, d: &RawDentry, name: &str, dir: u32, blk: Option<u32>) {
        let ino = d.ino;
        let a = at(Some(dir), Some(ino), blk);
        let free = self.nat(ino).is_none_or(|e| e.block_addr == 0);
        let sb = &self.m.sb;
        if ino < 3 || ino == sb.node_ino || ino == sb.meta_ino || free {
            let msg = format!("'{name}' names inode {ino}, which is free or reserved");
            self.c.error(Check::DentryIno, a, msg);
            return;
        }
        self.refs.push(Ref {
            dir,
            ino,
            file_type: d.file_type,
            name: name.to_owned(),
            blk,
        });
        if self.queued.insert(ino) {
            self.queue.push(Pending {
                ino,
                parent: Some(dir),
            });
        }
    }

    /// Resolves the dentry references: each names an inode that was read, with its type;
    /// directories are named once; counts links and subdirectories.
    fn resolve_refs(&mut self) {
        for r in std::mem::take(&mut self.refs) {
            let a = at(Some(r.dir), Some(r.ino), r.blk);
            let name = &r.name;
            let Some(t) = self.inodes.get_mut(&r.ino) else {
                let msg = format!("'{name}' names node {}, which is not a usable inode", r.ino);
                self.c.error(Check::DentryIno, a, msg);
                continue;
            };
            t.named += 1;
            let (mode, named) = (t.mode, t.named);
            let is_dir = mode & S_IFMT == S_IFDIR;
            if is_dir && let Some(p) = self.inodes.get_mut(&r.dir) {
                p.subdirs += 1;
            }
            let want = ft_of_mode(mode);
            if want.is_some_and(|w| w != r.file_type) {
                let msg = format!(
                    "'{name}' has type {}, its inode mode {mode:#o} (type {})",
                    r.file_type,
                    want.unwrap_or(0)
                );
                self.c.error(Check::DentryType, a, msg);
            }
            if is_dir && named > 1 {
                let msg = format!("directory {} is named by a second dentry '{name}'", r.ino);
                self.c.error(Check::Links, a, msg);
            }
        }
    }

    /// `i_links`: a directory has 2 plus one per subdirectory, anything else one per dentry;
    /// the root is named by no dentry.
    fn check_links(&mut self) {
        self.resolve_refs();
        let mut v: Vec<(u32, InodeRec)> = self.inodes.iter().map(|(k, r)| (*k, *r)).collect();
        v.sort_unstable_by_key(|(k, _)| *k);
        let orphans: HashSet<u32> = self.m.orphans.iter().copied().collect();
        for (ino, r) in v {
            let want = if orphans.contains(&ino) {
                0
            } else if r.mode & S_IFMT == S_IFDIR {
                2 + r.subdirs
            } else {
                r.named
            };
            if r.i_links != want {
                let msg = format!(
                    "i_links {} but {} dentries and {} subdirectories found",
                    r.i_links, r.named, r.subdirs
                );
                self.c
                    .error(Check::Links, at(Some(ino), Some(ino), None), msg);
            }
        }
    }

    /// NAT entries in use that nothing reached.
    fn check_leaks(&mut self) {
        let sb = &self.m.sb;
        let (node_ino, meta_ino) = (sb.node_ino, sb.meta_ino);
        for (nid, e) in self.m.nat.iter().enumerate() {
            let nid = nid as u32;
            if nid == 0 || nid == node_ino || nid == meta_ino || e.block_addr == 0 {
                continue;
            }
            if !self.seen.get(nid as usize).copied().unwrap_or(true) {
                let msg = format!("allocated node (inode {}) reachable from nothing", e.ino);
                self.c.error(
                    Check::LeakedNid,
                    at(Some(e.ino), Some(nid), Some(e.block_addr)),
                    msg,
                );
            }
        }
    }

    /// Every valid SIT bit has an owner; each segment's count equals its owned blocks; the
    /// current segments hold nothing past their write offsets.
    fn check_sit(&mut self) {
        let sb = &self.m.sb;
        let cursegs: Vec<(u32, u16, u8)> = (0..6)
            .map(|i| {
                let (s, o) = curseg_pos(&self.m.cp, i);
                (s, o, self.m.cp.alloc_type[i])
            })
            .collect();
        for (segno, se) in self.m.sit.iter().enumerate() {
            let start = segno * BLOCKS_PER_SEG as usize;
            let mut owned = 0u32;
            let cur = cursegs.iter().find(|c| c.0 as usize == segno);
            for off in 0..BLOCKS_PER_SEG as usize {
                let o = self.owners.get(start + off).copied().flatten();
                owned += u32::from(o.is_some());
                let blk = sb.main_blkaddr + (start + off) as u32;
                if test_bit_msb(&se.valid_map, off) && o.is_none() {
                    let msg = format!("block valid in segment {segno}'s SIT map but unowned");
                    self.c
                        .error(Check::SitUnowned, at(None, None, Some(blk)), msg);
                }
                if let Some(&(_, blkoff, 0)) = cur
                    && off >= blkoff as usize
                    && o.is_some()
                {
                    let msg = format!("owned block past current segment {segno}'s offset {blkoff}");
                    self.c.error(Check::Curseg, at(None, None, Some(blk)), msg);
                }
            }
            if u32::from(se.valid_blocks) != owned {
                let msg = format!(
                    "segment {segno}: SIT valid count {}, {owned} blocks owned",
                    se.valid_blocks
                );
                let blk = Some(sb.seg_start(segno as u32));
                self.c.error(Check::SitCount, at(None, None, blk), msg);
            }
        }
    }

    /// Each owned block's summary entry names its owner: the SSA block of a full segment,
    /// the checkpoint's summary of a current one.
    fn check_ssa(&mut self) {
        let sb = &self.m.sb;
        let per_seg = BLOCKS_PER_SEG as usize;
        let cur_of = |segno: u32| (0..6).find(|&i| curseg_pos(&self.m.cp, i).0 == segno);
        // The SSA blocks of the full segments holding anything, read in batches.
        let full: Vec<u32> = self
            .owners
            .chunks(per_seg)
            .enumerate()
            .filter(|(_, seg)| seg.iter().any(Option::is_some))
            .map(|(segno, _)| segno as u32)
            .filter(|&segno| cur_of(segno).is_none())
            .collect();
        let addrs: Vec<u64> = full
            .iter()
            .map(|&segno| u64::from(sb.ssa_blkaddr) + u64::from(segno))
            .collect();
        let mut ssa: HashMap<u32, Option<Box<Block>>> = full
            .into_iter()
            .zip(self.c.read_batch(&addrs, NOWHERE))
            .collect();
        for segno in 0..sb.segment_count_main {
            let start = segno as usize * per_seg;
            let Some(seg) = self.owners.get(start..start + per_seg) else {
                continue;
            };
            if seg.iter().all(Option::is_none) {
                continue;
            }
            let seg = seg.to_vec();
            let cur = cur_of(segno);
            let seg_blk = Some(sb.seg_start(segno));
            let sum = match cur {
                Some(i) => match self.m.sums.get(i).cloned().flatten() {
                    Some(s) => s,
                    None => continue,
                },
                None => {
                    let Some(b) = ssa.remove(&segno).flatten() else {
                        continue;
                    };
                    match SummaryBlock::parse(&b, JournalKind::Raw) {
                        Ok(s) => s,
                        Err(e) => {
                            let msg = format!("SSA block of segment {segno}: {e}");
                            self.c.error(Check::Ssa, at(None, None, seg_blk), msg);
                            continue;
                        }
                    }
                }
            };
            let node_seg = seg
                .iter()
                .flatten()
                .any(|o| matches!(o, Owner::Node { .. }));
            let want_type = if node_seg {
                SUM_TYPE_NODE
            } else {
                SUM_TYPE_DATA
            };
            if cur.is_none() && sum.entry_type != want_type {
                let msg = format!("SSA of segment {segno} has type {}", sum.entry_type);
                self.c.error(Check::Ssa, at(None, None, seg_blk), msg);
            }
            for (off, o) in seg.iter().enumerate() {
                let (Some(o), Some(s)) = (o, sum.entries.get(off)) else {
                    continue;
                };
                let blk = sb.seg_start(segno) + off as u32;
                let (ok, ino, nid) = match *o {
                    Owner::Node { nid } => (s.nid == nid, None, nid),
                    Owner::Data { ino, nid, ofs } => {
                        (s.nid == nid && s.ofs_in_node == ofs, Some(ino), nid)
                    }
                };
                if !ok {
                    let msg = format!(
                        "summary names nid {} offset {}, the owner is {o:?}",
                        s.nid, s.ofs_in_node
                    );
                    self.c.error(Check::Ssa, at(ino, Some(nid), Some(blk)), msg);
                }
            }
        }
    }

    /// The checkpoint's totals against the walk's, and the free-segment count.
    fn check_counts(&mut self) {
        let cp = &self.m.cp;
        let owned = self.owners.iter().filter(|o| o.is_some()).count() as u64;
        let sit_total: u64 = self.m.sit.iter().map(|s| u64::from(s.valid_blocks)).sum();
        let inodes = self.inodes.len() as u64;
        let found = [
            (
                "valid_block_count",
                cp.valid_block_count,
                owned + self.new_addrs,
            ),
            (
                "valid_node_count",
                u64::from(cp.valid_node_count),
                self.c.rep.nodes,
            ),
            ("valid_inode_count", u64::from(cp.valid_inode_count), inodes),
            ("SIT valid blocks", sit_total, owned),
        ];
        for (what, stored, walked) in found {
            if stored != walked {
                let msg = format!("{what} {stored}, found {walked}");
                self.c.error(Check::CheckpointCounts, NOWHERE, msg);
            }
        }
        let cur: Vec<u32> = (0..6).map(|i| curseg_pos(cp, i).0).collect();
        let free = self
            .m
            .sit
            .iter()
            .enumerate()
            .filter(|(s, e)| e.valid_blocks == 0 && !cur.contains(&(*s as u32)))
            .count() as u64;
        if u64::from(cp.free_segment_count) > free {
            let msg = format!(
                "free_segment_count {} but only {free} segments are free",
                cp.free_segment_count
            );
            self.c.warn(Check::CheckpointCounts, NOWHERE, msg);
        }
    }
}

/// One directory being read: how it was reached, its hash layout, the dots seen.
#[derive(Debug, Clone, Copy)]
struct DirScan {
    p: Pending,
    dir_level: u32,
    dots: Dots,
}

impl DirScan {
    fn new(p: Pending, inode: &Node) -> Self {
        Self {
            p,
            dir_level: u32::from(inode.dir_level()),
            dots: Dots::default(),
        }
    }
}

/// '.' and '..' entries seen in one directory.
#[derive(Debug, Default, Clone, Copy)]
struct Dots {
    dot: u32,
    dotdot: u32,
}

/// The hash level, bucket and bucket count of directory block `idx`; `None` past the last
/// level (`dir_block_index` inverted).
fn bucket_of_block(idx: u64, dir_level: u32) -> Option<(u32, u64, u64)> {
    let mut start = 0u64;
    for level in 0..MAX_DIR_HASH_DEPTH {
        let nb = dir_buckets(level, dir_level);
        let bb = bucket_blocks(level);
        let end = start.saturating_add(nb.saturating_mul(bb));
        if idx < end {
            return Some((level, (idx - start) / bb, nb));
        }
        start = end;
    }
    None
}

/// The dentry file type of an inode mode.
fn ft_of_mode(mode: u16) -> Option<u8> {
    Some(match mode & S_IFMT {
        S_IFREG => ft::REG_FILE,
        S_IFDIR => ft::DIR,
        S_IFLNK => ft::SYMLINK,
        S_IFCHR => ft::CHRDEV,
        S_IFBLK => ft::BLKDEV,
        S_IFIFO => ft::FIFO,
        S_IFSOCK => ft::SOCK,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_of_block_inverts_dir_block_index() {
        use crate::format::dentry::dir_block_index;
        for dir_level in [0, 2] {
            for level in 0..6 {
                for b in 0..dir_buckets(level, dir_level) {
                    let idx = dir_block_index(level, dir_level, b);
                    let nb = dir_buckets(level, dir_level);
                    assert_eq!(bucket_of_block(idx, dir_level), Some((level, b, nb)));
                    assert_eq!(bucket_of_block(idx + 1, dir_level), Some((level, b, nb)));
                }
            }
        }
        assert_eq!(bucket_of_block(u64::MAX, 0), None);
    }

    #[test]
    fn every_file_type_maps_and_unknown_modes_do_not() {
        assert_eq!(ft_of_mode(S_IFDIR | 0o755), Some(ft::DIR));
        assert_eq!(ft_of_mode(S_IFLNK), Some(ft::SYMLINK));
        assert_eq!(ft_of_mode(0o170000), None);
        assert_eq!(ft_of_mode(0), None);
    }
}
