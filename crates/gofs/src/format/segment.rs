//! NAT, SIT and SSA structures (papers/gofs.md §3.3: the block bitmaps GoFS shards are F2FS's
//! SIT valid maps; the NAT maps node ids to blocks; the SSA names each block's owner).

use super::{
    BLOCKS_PER_SEG, Block, ensure, get_u16, get_u32, get_u64, put_u16, put_u32, put_u64, zero_block,
};
use crate::error::Result;

/// NAT entries per NAT block (9 bytes each).
pub const NAT_ENTRIES_PER_BLOCK: usize = 455;
/// SIT entries per SIT block (74 bytes each).
pub const SIT_ENTRIES_PER_BLOCK: usize = 55;
/// Summary entries per summary block.
pub const ENTRIES_IN_SUM: usize = 512;
/// Bytes of a summary entry.
pub const SUMMARY_SIZE: usize = 7;
/// Bytes of the journal area of a summary block (n_nats/n_sits + 505).
pub const SUM_JOURNAL_SIZE: usize = 507;
/// NAT journal entries in a summary block.
pub const NAT_JOURNAL_ENTRIES: usize = 38;
/// SIT journal entries in a summary block.
pub const SIT_JOURNAL_ENTRIES: usize = 6;
/// Summary footer type: data.
pub const SUM_TYPE_DATA: u8 = 0;
/// Summary footer type: node.
pub const SUM_TYPE_NODE: u8 = 1;
/// Bits of `vblocks` holding the valid count.
const SIT_VBLOCKS_SHIFT: u16 = 10;

/// One NAT entry: where node `nid` lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NatEntry {
    /// version, bumped when the node is freed
    pub version: u8,
    /// owning inode
    pub ino: u32,
    /// block address (0 = free)
    pub block_addr: u32,
}

impl NatEntry {
    fn parse(b: &[u8]) -> Self {
        Self {
            version: b.first().copied().unwrap_or(0),
            ino: get_u32(b, 1),
            block_addr: get_u32(b, 5),
        }
    }
    fn write(&self, b: &mut [u8]) {
        if let Some(v) = b.first_mut() {
            *v = self.version;
        }
        put_u32(b, 1, self.ino);
        put_u32(b, 5, self.block_addr);
    }
}

/// Parses a NAT block into its 455 entries.
pub fn parse_nat_block(b: &Block) -> Vec<NatEntry> {
    (0..NAT_ENTRIES_PER_BLOCK)
        .map(|i| NatEntry::parse(&b[i * 9..i * 9 + 9]))
        .collect()
}

/// Builds a NAT block from up to 455 entries.
pub fn nat_block(entries: &[NatEntry]) -> Box<Block> {
    let mut b = zero_block();
    for (i, e) in entries.iter().take(NAT_ENTRIES_PER_BLOCK).enumerate() {
        e.write(&mut b[i * 9..i * 9 + 9]);
    }
    b
}

/// One SIT entry: a segment's type, valid count, valid map and age.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SitEntry {
    /// curseg type of the segment (0..6)
    pub seg_type: u8,
    /// valid blocks
    pub valid_blocks: u16,
    /// valid map, one bit per block, most significant bit first
    pub valid_map: [u8; 64],
    /// segment age
    pub mtime: u64,
}

impl Default for SitEntry {
    fn default() -> Self {
        Self {
            seg_type: 0,
            valid_blocks: 0,
            valid_map: [0; 64],
            mtime: 0,
        }
    }
}

impl SitEntry {
    /// Parses 74 bytes, checking the valid count against the map.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let v = get_u16(b, 0);
        let mut valid_map = [0u8; 64];
        if let Some(s) = b.get(2..66) {
            valid_map.copy_from_slice(s);
        }
        let e = Self {
            seg_type: (v >> SIT_VBLOCKS_SHIFT) as u8,
            valid_blocks: v & ((1 << SIT_VBLOCKS_SHIFT) - 1),
            valid_map,
            mtime: get_u64(b, 66),
        };
        let bits: u32 = valid_map.iter().map(|x| x.count_ones()).sum();
        ensure(
            u32::from(e.valid_blocks) == bits && bits <= BLOCKS_PER_SEG,
            || {
                format!(
                    "SIT entry valid count {} but {bits} bits in its map",
                    e.valid_blocks
                )
            },
        )?;
        ensure(e.seg_type < 6, || {
            format!("SIT entry segment type {}", e.seg_type)
        })?;
        Ok(e)
    }

    /// Writes the 74 bytes.
    pub fn write(&self, b: &mut [u8]) {
        put_u16(
            b,
            0,
            (u16::from(self.seg_type) << SIT_VBLOCKS_SHIFT) | self.valid_blocks,
        );
        if let Some(s) = b.get_mut(2..66) {
            s.copy_from_slice(&self.valid_map);
        }
        put_u64(b, 66, self.mtime);
    }
}

/// Parses a SIT block into its 55 entries.
pub fn parse_sit_block(b: &Block) -> Result<Vec<SitEntry>> {
    (0..SIT_ENTRIES_PER_BLOCK)
        .map(|i| SitEntry::parse(&b[i * 74..i * 74 + 74]))
        .collect()
}

/// Builds a SIT block from up to 55 entries.
pub fn sit_block(entries: &[SitEntry]) -> Box<Block> {
    let mut b = zero_block();
    for (i, e) in entries.iter().take(SIT_ENTRIES_PER_BLOCK).enumerate() {
        e.write(&mut b[i * 74..i * 74 + 74]);
    }
    b
}

/// One summary entry: who owns a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// for data: the direct node holding the address; for nodes: the node itself
    pub nid: u32,
    /// node version (data blocks)
    pub version: u8,
    /// index of the address inside its node (data blocks)
    pub ofs_in_node: u16,
}

impl Summary {
    fn parse(b: &[u8]) -> Self {
        Self {
            nid: get_u32(b, 0),
            version: b.get(4).copied().unwrap_or(0),
            ofs_in_node: get_u16(b, 5),
        }
    }
    fn write(&self, b: &mut [u8]) {
        put_u32(b, 0, self.nid);
        if let Some(v) = b.get_mut(4) {
            *v = self.version;
        }
        put_u16(b, 5, self.ofs_in_node);
    }
}

/// The journal area of a summary block: NAT or SIT entries (or raw extra info).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Journal {
    /// NAT journal: (nid, entry)
    Nat(Vec<(u32, NatEntry)>),
    /// SIT journal: (segno, entry)
    Sit(Vec<(u32, SitEntry)>),
    /// other curseg types: raw bytes kept as they are
    Raw(Vec<u8>),
}

impl Journal {
    /// Parses 507 journal bytes of the kind `kind` (0 NAT, 1 SIT, other raw).
    pub fn parse(b: &[u8], kind: JournalKind) -> Result<Self> {
        let n = get_u16(b, 0) as usize;
        match kind {
            JournalKind::Nat => {
                ensure(n <= NAT_JOURNAL_ENTRIES, || {
                    format!("NAT journal n_nats {n}")
                })?;
                Ok(Self::Nat(
                    (0..n)
                        .map(|i| {
                            let e = &b[2 + 13 * i..2 + 13 * i + 13];
                            (get_u32(e, 0), NatEntry::parse(&e[4..]))
                        })
                        .collect(),
                ))
            }
            JournalKind::Sit => {
                ensure(n <= SIT_JOURNAL_ENTRIES, || {
                    format!("SIT journal n_sits {n}")
                })?;
                let mut v = Vec::with_capacity(n);
                for i in 0..n {
                    let e = &b[2 + 78 * i..2 + 78 * i + 78];
                    v.push((get_u32(e, 0), SitEntry::parse(&e[4..])?));
                }
                Ok(Self::Sit(v))
            }
            JournalKind::Raw => Ok(Self::Raw(b[..SUM_JOURNAL_SIZE.min(b.len())].to_vec())),
        }
    }

    /// Writes the 507 journal bytes.
    pub fn write(&self, b: &mut [u8]) {
        match self {
            Self::Nat(v) => {
                put_u16(b, 0, v.len().min(NAT_JOURNAL_ENTRIES) as u16);
                for (i, (nid, e)) in v.iter().take(NAT_JOURNAL_ENTRIES).enumerate() {
                    put_u32(b, 2 + 13 * i, *nid);
                    e.write(&mut b[6 + 13 * i..2 + 13 * i + 13]);
                }
            }
            Self::Sit(v) => {
                put_u16(b, 0, v.len().min(SIT_JOURNAL_ENTRIES) as u16);
                for (i, (seg, e)) in v.iter().take(SIT_JOURNAL_ENTRIES).enumerate() {
                    put_u32(b, 2 + 78 * i, *seg);
                    e.write(&mut b[6 + 78 * i..2 + 78 * i + 78]);
                }
            }
            Self::Raw(r) => {
                let n = r.len().min(SUM_JOURNAL_SIZE).min(b.len());
                b[..n].copy_from_slice(&r[..n]);
            }
        }
    }
}

/// Which journal a curseg summary carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalKind {
    /// hot data curseg
    Nat,
    /// cold data curseg
    Sit,
    /// the others
    Raw,
}

impl JournalKind {
    /// The journal of curseg `ty` (0 hot data, 2 cold data).
    pub fn of_curseg(ty: usize) -> Self {
        match ty {
            0 => Self::Nat,
            2 => Self::Sit,
            _ => Self::Raw,
        }
    }
}

/// A summary block: 512 entries, a journal, a footer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryBlock {
    /// owner of each block of the segment
    pub entries: Vec<Summary>,
    /// the journal area
    pub journal: Journal,
    /// SUM_TYPE_DATA or SUM_TYPE_NODE
    pub entry_type: u8,
    /// footer checksum (F2FS does not check it; kept as read)
    pub check_sum: u32,
}

impl SummaryBlock {
    /// An empty summary of the given type.
    pub fn new(entry_type: u8, kind: JournalKind) -> Self {
        Self {
            entries: vec![Summary::default(); ENTRIES_IN_SUM],
            journal: match kind {
                JournalKind::Nat => Journal::Nat(Vec::new()),
                JournalKind::Sit => Journal::Sit(Vec::new()),
                JournalKind::Raw => Journal::Raw(vec![0; SUM_JOURNAL_SIZE]),
            },
            entry_type,
            check_sum: 0,
        }
    }

    /// Parses a summary block whose journal is of `kind`.
    pub fn parse(b: &Block, kind: JournalKind) -> Result<Self> {
        let jo = ENTRIES_IN_SUM * SUMMARY_SIZE;
        let entry_type = b[jo + SUM_JOURNAL_SIZE];
        ensure(entry_type <= SUM_TYPE_NODE, || {
            format!("summary footer type {entry_type}")
        })?;
        Ok(Self {
            entries: (0..ENTRIES_IN_SUM)
                .map(|i| Summary::parse(&b[i * 7..i * 7 + 7]))
                .collect(),
            journal: Journal::parse(&b[jo..jo + SUM_JOURNAL_SIZE], kind)?,
            entry_type,
            check_sum: get_u32(b, jo + SUM_JOURNAL_SIZE + 1),
        })
    }

    /// The 4 KiB block.
    pub fn serialize(&self) -> Box<Block> {
        let mut b = zero_block();
        for (i, e) in self.entries.iter().take(ENTRIES_IN_SUM).enumerate() {
            e.write(&mut b[i * 7..i * 7 + 7]);
        }
        let jo = ENTRIES_IN_SUM * SUMMARY_SIZE;
        self.journal.write(&mut b[jo..jo + SUM_JOURNAL_SIZE]);
        b[jo + SUM_JOURNAL_SIZE] = self.entry_type;
        put_u32(&mut b[..], jo + SUM_JOURNAL_SIZE + 1, self.check_sum);
        b
    }
}

/// Parses compacted data summaries (`CP_COMPACT_SUM_FLAG`): NAT journal, SIT journal, then
/// the entries of the hot, warm and cold data cursegs (`blkoffs[i]` each) packed across
/// `blocks`. Returns the three data summary blocks.
pub fn parse_compacted(blocks: &[Box<Block>], blkoffs: [usize; 3]) -> Result<[SummaryBlock; 3]> {
    let first = blocks
        .first()
        .ok_or_else(|| super::corrupt("no compacted summary block"))?;
    let mut sums = [
        SummaryBlock::new(SUM_TYPE_DATA, JournalKind::Nat),
        SummaryBlock::new(SUM_TYPE_DATA, JournalKind::Raw),
        SummaryBlock::new(SUM_TYPE_DATA, JournalKind::Sit),
    ];
    sums[0].journal = Journal::parse(&first[..SUM_JOURNAL_SIZE], JournalKind::Nat)?;
    sums[2].journal = Journal::parse(
        &first[SUM_JOURNAL_SIZE..2 * SUM_JOURNAL_SIZE],
        JournalKind::Sit,
    )?;
    let (mut blk, mut off) = (0usize, 2 * SUM_JOURNAL_SIZE);
    for (t, &n) in blkoffs.iter().enumerate() {
        ensure(n <= ENTRIES_IN_SUM, || {
            format!("compacted summary count {n}")
        })?;
        for j in 0..n {
            let b = blocks
                .get(blk)
                .ok_or_else(|| super::corrupt(format!("compacted summaries past block {blk}")))?;
            sums[t].entries[j] = Summary::parse(&b[off..off + SUMMARY_SIZE]);
            off += SUMMARY_SIZE;
            if off + SUMMARY_SIZE > super::BLOCK_SIZE - 5 {
                blk += 1;
                off = 0;
            }
        }
    }
    Ok(sums)
}

/// Blocks the compacted summaries of `blkoffs` take (1..=3), as the kernel counts them.
pub fn compacted_blocks(blkoffs: [usize; 3]) -> usize {
    let total: usize = blkoffs.iter().sum();
    let per_block = (super::BLOCK_SIZE - 5) / SUMMARY_SIZE;
    let first = (super::BLOCK_SIZE - 2 * SUM_JOURNAL_SIZE - 5) / SUMMARY_SIZE;
    if total <= first {
        1
    } else if total <= first + per_block {
        2
    } else {
        3
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn arb_sit() -> impl Strategy<Value = SitEntry> {
        (0u8..6, any::<[u8; 32]>(), any::<[u8; 32]>(), any::<u64>()).prop_map(|(t, a, b, m)| {
            let mut valid_map = [0u8; 64];
            valid_map[..32].copy_from_slice(&a);
            valid_map[32..].copy_from_slice(&b);
            let n: u32 = valid_map.iter().map(|x| x.count_ones()).sum();
            SitEntry {
                seg_type: t,
                valid_blocks: n as u16,
                valid_map,
                mtime: m,
            }
        })
    }

    fn arb_nat() -> impl Strategy<Value = NatEntry> {
        (any::<u8>(), any::<u32>(), any::<u32>()).prop_map(|(version, ino, block_addr)| NatEntry {
            version,
            ino,
            block_addr,
        })
    }

    proptest! {
        #[test]
        fn nat_block_round_trips(v in vec(arb_nat(), 455)) {
            prop_assert_eq!(parse_nat_block(&nat_block(&v)), v);
        }

        #[test]
        fn sit_block_round_trips(v in vec(arb_sit(), 55)) {
            prop_assert_eq!(parse_sit_block(&sit_block(&v)).unwrap(), v);
        }

        #[test]
        fn summary_block_with_journals_round_trips(
            nids in vec((any::<u32>(), any::<u8>(), any::<u16>()), 512),
            nat in vec((any::<u32>(), arb_nat()), 0..=38),
            sit in vec((any::<u32>(), arb_sit()), 0..=6),
            ty in 0u8..2,
        ) {
            let entries: Vec<Summary> = nids.iter()
                .map(|&(nid, version, ofs_in_node)| Summary { nid, version, ofs_in_node })
                .collect();
            for (kind, journal) in [(JournalKind::Nat, Journal::Nat(nat.clone())),
                                    (JournalKind::Sit, Journal::Sit(sit.clone()))] {
                let s = SummaryBlock {
                    entries: entries.clone(),
                    journal,
                    entry_type: ty,
                    check_sum: 9,
                };
                prop_assert_eq!(SummaryBlock::parse(&s.serialize(), kind).unwrap(), s);
            }
        }

        #[test]
        fn segment_parsers_never_panic_on_random_bytes(v in vec(any::<u8>(), 4096)) {
            let mut b = [0u8; 4096];
            b.copy_from_slice(&v);
            let _ = parse_nat_block(&b);
            let _ = parse_sit_block(&b);
            for k in [JournalKind::Nat, JournalKind::Sit, JournalKind::Raw] {
                let _ = SummaryBlock::parse(&b, k);
            }
            let blocks = vec![Box::new(b)];
            let _ = parse_compacted(&blocks, [512, 512, 512]);
        }
    }
}
