//! The engine state behind [`super::Fs`]: mounting (superblock and checkpoint choice, NAT and
//! SIT with their journals, cursegs, orphans) and node I/O (papers/gofs.md §3.3, §3.5).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::nat::Nat;
use super::segment::{Curseg, Log, Segments};
use crate::error::{FsError, Result};
use crate::format::checkpoint::{
    CP_COMPACT_SUM_FLAG, CP_ORPHAN_PRESENT_FLAG, CP_UMOUNT_FLAG, Checkpoint, parse_orphan_block,
};
use crate::format::node::Node;
use crate::format::segment::{
    Journal, JournalKind, NAT_ENTRIES_PER_BLOCK, NatEntry, SIT_ENTRIES_PER_BLOCK, SUM_TYPE_DATA,
    SUM_TYPE_NODE, SitEntry, Summary, SummaryBlock, parse_compacted, parse_nat_block,
    parse_sit_block,
};
use crate::format::superblock::{FEATURE_FLEXIBLE_INLINE_XATTR, SUPER_OFFSET, Superblock};
use crate::format::{
    BLOCK_SIZE, BLOCKS_PER_SEG, BlockIo, NEW_ADDR, corrupt, read_block, test_bit_msb,
};

/// Clean node blocks kept cached at most.
pub(crate) const NODE_CACHE_LIMIT: usize = 65_536;

/// Everything a mounted file system holds in memory.
#[derive(Debug)]
pub struct Engine {
    /// the device
    pub io: Arc<dyn BlockIo>,
    /// the superblock
    pub sb: Superblock,
    /// the last durable checkpoint
    pub cp: Checkpoint,
    /// which pack (0 or 1) holds it
    pub cp_pack: u32,
    /// NAT and node cache
    pub nat: Nat,
    /// SIT, logs, free segments
    pub segs: Segments,
    /// unlinked inodes still open (and those found at mount before recovery)
    pub orphans: BTreeSet<u32>,
    /// open references per inode
    pub open: HashMap<u32, u32>,
    /// refuse changes
    pub read_only: bool,
    /// whether anything changed since the last checkpoint
    pub dirty: bool,
    /// held shared by reads running without the engine lock; a checkpoint takes it
    /// exclusively before freed segments can be reused, so no such read sees a reused block
    pub read_gate: Arc<RwLock<()>>,
    /// bumped whenever data blocks change address without their file's range lock (the
    /// cleaner moving them, an inode's removal): cached data pointers name it in their version
    pub relocations: Arc<AtomicU64>,
}

/// The pack start of checkpoint pack `pack`.
pub(crate) fn cp_start(sb: &Superblock, pack: u32) -> u64 {
    u64::from(sb.cp_blkaddr) + u64::from(pack) * u64::from(BLOCKS_PER_SEG)
}

impl Engine {
    /// Reads and validates the metadata of the image on `io`.
    pub fn load(io: Arc<dyn BlockIo>, read_only: bool) -> Result<Self> {
        let blocks = io.block_count();
        if blocks < 2 {
            return Err(corrupt(format!("device of {blocks} blocks")));
        }
        let sb = load_superblock(io.as_ref(), blocks)?;
        if sb.segs_per_sec != 1 {
            return Err(FsError::Unsupported("segments per section other than 1"));
        }
        if sb.cp_payload != 0 {
            return Err(FsError::Unsupported(
                "checkpoint payload blocks (huge SIT bitmaps)",
            ));
        }
        let (cp, cp_pack) = load_checkpoint(io.as_ref(), &sb)?;
        validate_cursegs(&sb, &cp)?;
        let sums = load_summaries(io.as_ref(), &sb, &cp, cp_pack)?;
        let nat = load_nat(io.as_ref(), &sb, &cp, &sums[0].journal)?;
        let sit = load_sit(io.as_ref(), &sb, &cp, &sums[2].journal)?;
        let cursegs = sums
            .into_iter()
            .enumerate()
            .map(|(i, sum)| {
                let (segno, blkoff) = curseg_pos(&cp, i);
                // GoFS appends only (LFS): an SSR log is treated as full, so the first
                // allocation closes it (its summary goes to the SSA) and opens a free segment.
                let blkoff = if cp.alloc_type[i] != 0 {
                    BLOCKS_PER_SEG as u16
                } else {
                    blkoff
                };
                Curseg { segno, blkoff, sum }
            })
            .collect();
        let mut segs = Segments::new(sit, cursegs)?;
        // Journals are always written back empty: the areas get their entries instead.
        for c in segs.cursegs.iter_mut() {
            match &mut c.sum.journal {
                Journal::Nat(v) => v.clear(),
                Journal::Sit(v) => {
                    for (seg, _) in v.drain(..) {
                        segs.sit_dirty.insert(seg / SIT_ENTRIES_PER_BLOCK as u32);
                    }
                }
                Journal::Raw(_) => {}
            }
        }
        let mut orphans = BTreeSet::new();
        if cp.flags & CP_ORPHAN_PRESENT_FLAG != 0 {
            let start = cp_start(&sb, cp_pack) + 1;
            for i in 0..u64::from(cp.pack_start_sum.saturating_sub(1)) {
                let b = read_block(io.as_ref(), start + i)?;
                for ino in parse_orphan_block(&b)? {
                    if ino < 3 || nat.get(ino)?.block_addr == 0 {
                        return Err(corrupt(format!("orphan inode {ino}")));
                    }
                    orphans.insert(ino);
                }
            }
        }
        segs.now = cp.elapsed_time;
        Ok(Self {
            io,
            sb,
            cp,
            cp_pack,
            nat,
            segs,
            orphans,
            open: HashMap::new(),
            read_only,
            dirty: false,
            read_gate: Arc::default(),
            relocations: Arc::default(),
        })
    }

    /// An empty volume's state for mkfs: nothing allocated but the reserved node ids, the
    /// logs at the checkpoint's segments. Its first checkpoint goes to pack 0.
    pub fn fresh(io: Arc<dyn BlockIo>, sb: Superblock, cp: Checkpoint) -> Result<Self> {
        let mut entries = vec![NatEntry::default(); sb.max_nid() as usize];
        for nid in [sb.node_ino, sb.meta_ino] {
            if let Some(e) = entries.get_mut(nid as usize) {
                *e = NatEntry {
                    version: 0,
                    ino: nid,
                    block_addr: 1,
                };
            }
        }
        let mut nat = Nat::new(entries, sb.root_ino + 1);
        nat.dirty_blocks.insert(0);
        let cursegs = (0..6)
            .map(|i| {
                let (segno, blkoff) = curseg_pos(&cp, i);
                let ty = if i < 3 { SUM_TYPE_DATA } else { SUM_TYPE_NODE };
                Curseg {
                    segno,
                    blkoff,
                    sum: SummaryBlock::new(ty, JournalKind::of_curseg(i)),
                }
            })
            .collect::<Vec<_>>();
        let mut sit = vec![SitEntry::default(); sb.segment_count_main as usize];
        for (i, c) in cursegs.iter().enumerate() {
            if let Some(e) = sit.get_mut(c.segno as usize) {
                e.seg_type = i as u8;
            }
        }
        let mut segs = Segments::new(sit, cursegs)?;
        segs.sit_dirty.extend(0..sit_blocks(&sb));
        Ok(Self {
            io,
            sb,
            cp,
            cp_pack: 1,
            nat,
            segs,
            orphans: BTreeSet::new(),
            open: HashMap::new(),
            read_only: false,
            dirty: true,
            read_gate: Arc::default(),
            relocations: Arc::default(),
        })
    }

    /// Creates the root directory (mkfs): inode `root_ino` with "." and ".." to itself.
    pub fn make_root(&mut self) -> Result<()> {
        let root = self.sb.root_ino;
        self.nat.set(
            root,
            NatEntry {
                version: 0,
                ino: root,
                block_addr: NEW_ADDR,
            },
        );
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let n = self.new_node(root, root, 0, false);
        n.set_mode(crate::format::node::S_IFDIR | 0o755);
        n.set_links(2);
        n.set_blocks(1);
        n.set_atime(t);
        n.set_ctime(t);
        n.set_mtime(t);
        n.set_pino(root);
        n.set_current_depth(1);
        self.write_blocks(
            root,
            0,
            &crate::format::dentry::new_dir_block(root, root)[..],
        )?;
        self.inode(root)?.set_size(BLOCK_SIZE as u64);
        Ok(())
    }

    /// Whether the image uses per-inode inline xattr sizes.
    pub fn flexible(&self) -> bool {
        self.sb.feature & FEATURE_FLEXIBLE_INLINE_XATTR != 0
    }

    /// Fails on a read-only mount.
    pub fn writable(&self) -> Result<()> {
        if self.read_only {
            Err(FsError::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// The node `nid` of inode `ino` (`ino` = None: any owner), from the cache or the disk,
    /// validated: its block in the main area, its footer naming it.
    pub fn node(&mut self, nid: u32, ino: Option<u32>) -> Result<&mut Node> {
        if !self.nat.cache.contains_key(&nid) {
            let e = self.nat.get(nid)?;
            if nid < 3 || e.block_addr == 0 || e.block_addr == NEW_ADDR {
                return Err(corrupt(format!(
                    "node {nid} has NAT address {:#x}",
                    e.block_addr
                )));
            }
            if !self.sb.in_main(e.block_addr) {
                return Err(corrupt(format!(
                    "node {nid} at block {} outside the main area",
                    e.block_addr
                )));
            }
            let b = read_block(self.io.as_ref(), u64::from(e.block_addr))?;
            let n = Node::from_block(b);
            if n.nid() != nid || n.ino() != e.ino {
                return Err(corrupt(format!(
                    "node {nid} block {} has footer nid {} ino {}, NAT ino {}",
                    e.block_addr,
                    n.nid(),
                    n.ino(),
                    e.ino
                )));
            }
            self.nat.trim_cache(NODE_CACHE_LIMIT);
            self.nat.cache.insert(nid, n);
        }
        let n = self
            .nat
            .cache
            .get_mut(&nid)
            .ok_or_else(|| corrupt("node cache"))?;
        if let Some(ino) = ino
            && n.ino() != ino
        {
            return Err(corrupt(format!(
                "node {nid} belongs to inode {}, not {ino}",
                n.ino()
            )));
        }
        Ok(n)
    }

    /// The inode `ino`, validated to be an inode.
    pub fn inode(&mut self, ino: u32) -> Result<&mut Node> {
        if ino < 3 || self_free(&self.nat, ino) {
            return Err(FsError::NotFound);
        }
        let n = self.node(ino, Some(ino))?;
        if !n.is_inode() {
            return Err(corrupt(format!(
                "node {ino} is not an inode (offset {})",
                n.ofs()
            )));
        }
        Ok(n)
    }

    /// A new cached node with its footer set, dirty.
    pub fn new_node(&mut self, nid: u32, ino: u32, ofs: u32, cold: bool) -> &mut Node {
        let mut n = Node::zeroed();
        n.set_footer(nid, ino, ofs, cold);
        self.nat.cache.insert(nid, n);
        self.nat.mark_dirty(nid);
        self.dirty = true;
        self.nat
            .cache
            .get_mut(&nid)
            .unwrap_or_else(|| unreachable!())
    }

    /// Records that data blocks changed address outside their file's range lock (before the
    /// checkpoint that may free the old blocks).
    pub fn relocated(&self) {
        self.relocations.fetch_add(1, Ordering::AcqRel);
    }

    /// Marks `nid` changed.
    pub fn touch(&mut self, nid: u32) {
        self.nat.mark_dirty(nid);
        self.dirty = true;
    }

    /// Takes a block in `log` for the owner `sum`; writes finished SSA blocks as logs fill.
    pub fn alloc_block(&mut self, log: Log, sum: Summary) -> Result<u32> {
        let (segno, off) = self.segs.alloc(log, sum)?;
        self.flush_ssa()?;
        self.dirty = true;
        Ok(self.sb.seg_start(segno) + off)
    }

    /// Writes the summaries of logs that filled up to their SSA blocks.
    pub fn flush_ssa(&mut self) -> Result<()> {
        for (segno, sum) in std::mem::take(&mut self.segs.ssa_pending) {
            let blk = u64::from(self.sb.ssa_blkaddr) + u64::from(segno);
            self.io.write(blk, &sum.serialize()[..])?;
        }
        Ok(())
    }

    /// Marks main-area block `blk` no longer used.
    pub fn invalidate(&mut self, blk: u32) -> Result<()> {
        if blk == 0 || blk == NEW_ADDR {
            return Ok(());
        }
        if !self.sb.in_main(blk) {
            return Err(corrupt(format!(
                "block address {blk} outside the main area"
            )));
        }
        let segno = self.sb.segno(blk);
        self.dirty = true;
        self.segs.set_invalid(segno, blk - self.sb.seg_start(segno))
    }
}

fn self_free(nat: &Nat, ino: u32) -> bool {
    nat.get(ino).map(|e| e.block_addr == 0).unwrap_or(false)
}

fn load_superblock(io: &dyn BlockIo, blocks: u64) -> Result<Superblock> {
    let mut first_err = None;
    for blk in 0..2 {
        let b = read_block(io, blk)?;
        match Superblock::parse(&b[SUPER_OFFSET..], blocks) {
            Ok(sb) => return Ok(sb),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    Err(first_err.unwrap_or_else(|| corrupt("no superblock")))
}

fn load_pack(io: &dyn BlockIo, sb: &Superblock, pack: u32) -> Result<Checkpoint> {
    let start = cp_start(sb, pack);
    let (s, n) = (sb.sit_bitmap_bytes(), sb.nat_bitmap_bytes());
    let first = Checkpoint::parse(&*read_block(io, start)?, s, n)?;
    let total = first.pack_total_block_count;
    if !(3..=BLOCKS_PER_SEG).contains(&total) {
        return Err(corrupt(format!("checkpoint pack of {total} blocks")));
    }
    let last = Checkpoint::parse(&*read_block(io, start + u64::from(total) - 1)?, s, n)?;
    if last.version != first.version {
        return Err(corrupt(format!(
            "checkpoint pack {pack} versions {} and {} differ",
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
        return Err(corrupt(format!(
            "checkpoint cp_pack_start_sum {} with {total} blocks",
            first.pack_start_sum
        )));
    }
    Ok(first)
}

fn load_checkpoint(io: &dyn BlockIo, sb: &Superblock) -> Result<(Checkpoint, u32)> {
    let a = load_pack(io, sb, 0);
    let b = load_pack(io, sb, 1);
    match (a, b) {
        (Ok(a), Ok(b)) => Ok(if b.version > a.version {
            (b, 1)
        } else {
            (a, 0)
        }),
        (Ok(a), Err(_)) => Ok((a, 0)),
        (Err(_), Ok(b)) => Ok((b, 1)),
        (Err(e), Err(_)) => Err(e),
    }
}

fn curseg_pos(cp: &Checkpoint, i: usize) -> (u32, u16) {
    if i < 3 {
        (cp.cur_data_segno[i], cp.cur_data_blkoff[i])
    } else {
        (cp.cur_node_segno[i - 3], cp.cur_node_blkoff[i - 3])
    }
}

fn validate_cursegs(sb: &Superblock, cp: &Checkpoint) -> Result<()> {
    let mut seen = BTreeSet::new();
    for i in 0..6 {
        let (segno, off) = curseg_pos(cp, i);
        if segno >= sb.segment_count_main || u32::from(off) > BLOCKS_PER_SEG {
            return Err(corrupt(format!(
                "current segment {i}: segno {segno} blkoff {off}"
            )));
        }
        if !seen.insert(segno) {
            return Err(corrupt(format!("current segment {segno} used by two logs")));
        }
    }
    Ok(())
}

fn load_summaries(
    io: &dyn BlockIo,
    sb: &Superblock,
    cp: &Checkpoint,
    pack: u32,
) -> Result<Vec<SummaryBlock>> {
    let start = cp_start(sb, pack);
    let total = u64::from(cp.pack_total_block_count);
    let umount = cp.flags & CP_UMOUNT_FLAG != 0;
    let mut out = Vec::with_capacity(6);
    if cp.flags & CP_COMPACT_SUM_FLAG != 0 {
        let first = start + u64::from(cp.pack_start_sum);
        // An SSR log's summary covers its whole segment.
        let offs = [0, 1, 2].map(|i| {
            if cp.alloc_type[i] != 0 {
                BLOCKS_PER_SEG as usize
            } else {
                cp.cur_data_blkoff[i] as usize
            }
        });
        let n = crate::format::segment::compacted_blocks(offs) as u64;
        let blocks = (0..n)
            .map(|i| read_block(io, first + i))
            .collect::<Result<Vec<_>>>()?;
        out.extend(parse_compacted(&blocks, offs)?);
    } else {
        let base = if umount { 7 } else { 4 };
        for t in 0..3 {
            let b = read_block(io, start + total - base + t as u64)?;
            out.push(SummaryBlock::parse(&b, JournalKind::of_curseg(t))?);
        }
    }
    for t in 3..6 {
        let (segno, blkoff) = curseg_pos(cp, t);
        let sum = if umount {
            let b = read_block(io, start + total - 7 + t as u64)?;
            SummaryBlock::parse(&b, JournalKind::Raw)?
        } else {
            // Not unmounted cleanly: rebuild the node summaries from the node footers, as
            // the kernel's restore_node_summary does.
            let mut sum = SummaryBlock::new(SUM_TYPE_NODE, JournalKind::Raw);
            let first = u64::from(sb.seg_start(segno));
            for off in 0..u64::from(blkoff) {
                let n = Node::from_block(read_block(io, first + off)?);
                sum.entries[off as usize] = Summary {
                    nid: n.nid(),
                    version: 0,
                    ofs_in_node: 0,
                };
            }
            sum
        };
        out.push(sum);
    }
    for (t, s) in out.iter_mut().enumerate() {
        let want = if t < 3 { SUM_TYPE_DATA } else { SUM_TYPE_NODE };
        s.entry_type = want;
    }
    Ok(out)
}

/// Reads one copy-selected table (NAT or SIT): `blocks` blocks, copy chosen per block by
/// `bitmap`; `addr(i, second)` gives the block address.
fn read_table(
    io: &dyn BlockIo,
    blocks: u32,
    bitmap: &[u8],
    addr: impl Fn(u32, bool) -> u64,
) -> Result<Vec<Box<crate::format::Block>>> {
    let mut out = Vec::with_capacity(blocks as usize);
    // Read runs of consecutive addresses in one command each.
    let mut i = 0;
    while i < blocks {
        let a0 = addr(i, test_bit_msb(bitmap, i as usize));
        let mut n = 1;
        while i + n < blocks
            && n < 256
            && addr(i + n, test_bit_msb(bitmap, (i + n) as usize)) == a0 + u64::from(n)
        {
            n += 1;
        }
        let mut buf = vec![0u8; n as usize * BLOCK_SIZE];
        io.read(a0, &mut buf)?;
        for c in buf.chunks_exact(BLOCK_SIZE) {
            let mut b = crate::format::zero_block();
            b.copy_from_slice(c);
            out.push(b);
        }
        i += n;
    }
    Ok(out)
}

/// The block address of NAT block `i` in the copy `second`.
pub(crate) fn nat_addr(sb: &Superblock, i: u32, second: bool) -> u64 {
    let seg_off = i / BLOCKS_PER_SEG;
    u64::from(sb.nat_blkaddr)
        + u64::from(seg_off) * 2 * u64::from(BLOCKS_PER_SEG)
        + u64::from(i % BLOCKS_PER_SEG)
        + if second { u64::from(BLOCKS_PER_SEG) } else { 0 }
}

/// The block address of SIT block `i` in the copy `second`.
pub(crate) fn sit_addr(sb: &Superblock, i: u32, second: bool) -> u64 {
    u64::from(sb.sit_blkaddr)
        + u64::from(i)
        + if second {
            u64::from(sb.segment_count_sit / 2 * BLOCKS_PER_SEG)
        } else {
            0
        }
}

/// NAT blocks in use: enough for every node id.
pub(crate) fn nat_blocks(sb: &Superblock) -> u32 {
    sb.segment_count_nat / 2 * BLOCKS_PER_SEG
}

/// SIT blocks in use: one entry per main segment.
pub(crate) fn sit_blocks(sb: &Superblock) -> u32 {
    sb.segment_count_main.div_ceil(SIT_ENTRIES_PER_BLOCK as u32)
}

fn load_nat(io: &dyn BlockIo, sb: &Superblock, cp: &Checkpoint, journal: &Journal) -> Result<Nat> {
    let blocks = read_table(io, nat_blocks(sb), &cp.nat_bitmap, |i, s| {
        nat_addr(sb, i, s)
    })?;
    let mut entries = Vec::with_capacity(blocks.len() * NAT_ENTRIES_PER_BLOCK);
    for b in &blocks {
        entries.extend(parse_nat_block(b));
    }
    let mut dirty = BTreeSet::new();
    if let Journal::Nat(v) = journal {
        for (nid, e) in v {
            let slot = entries
                .get_mut(*nid as usize)
                .ok_or_else(|| corrupt(format!("NAT journal nid {nid} past the NAT")))?;
            *slot = *e;
            dirty.insert(*nid / NAT_ENTRIES_PER_BLOCK as u32);
        }
    }
    for (nid, e) in entries.iter().enumerate().skip(3) {
        if e.block_addr != 0 && !sb.in_main(e.block_addr) {
            return Err(corrupt(format!(
                "NAT entry of node {nid} points to block {} outside the main area",
                e.block_addr
            )));
        }
    }
    let mut nat = Nat::new(entries, sb.root_ino + 1);
    nat.dirty_blocks = dirty;
    Ok(nat)
}

fn load_sit(
    io: &dyn BlockIo,
    sb: &Superblock,
    cp: &Checkpoint,
    journal: &Journal,
) -> Result<Vec<crate::format::segment::SitEntry>> {
    let blocks = read_table(io, sit_blocks(sb), &cp.sit_bitmap, |i, s| {
        sit_addr(sb, i, s)
    })?;
    let mut sit = Vec::with_capacity(blocks.len() * SIT_ENTRIES_PER_BLOCK);
    for (i, b) in blocks.iter().enumerate() {
        let parsed = parse_sit_block(b).map_err(|e| corrupt(format!("SIT block {i}: {e}")))?;
        sit.extend(parsed);
    }
    sit.truncate(sb.segment_count_main as usize);
    if let Journal::Sit(v) = journal {
        for (seg, e) in v {
            let slot = sit
                .get_mut(*seg as usize)
                .ok_or_else(|| corrupt(format!("SIT journal segment {seg} past the main area")))?;
            *slot = *e;
        }
    }
    Ok(sit)
}

/// Curseg log of node blocks: directory (and non-cold) direct nodes hot, file direct nodes
/// warm, indirect nodes cold (`__get_segment_type_6`).
pub(crate) fn node_log(n: &Node) -> Log {
    if !crate::format::node::is_dnode_ofs(n.ofs()) {
        Log::ColdNode
    } else if n.footer_flag() & crate::format::node::COLD_BIT != 0 {
        Log::WarmNode
    } else {
        Log::HotNode
    }
}
