//! F2FS directory entries: the TEA name hash, multi-level hashed buckets, dentry blocks and
//! inline dentries (papers/gofs.md §3.3: the on-disk side of GoFS's dentry cache).

use super::{Block, NAME_LEN, get_u16, get_u32, put_u16, put_u32, set_bit_le, test_bit_le};
use crate::error::Result;

/// Dentry slots in a dentry block.
pub const NR_DENTRY_IN_BLOCK: usize = 214;
/// Bytes of a name slot.
pub const SLOT_LEN: usize = 8;
/// Bytes of a dentry record.
pub const DIR_ENTRY_SIZE: usize = 11;
/// Deepest hash level.
pub const MAX_DIR_HASH_DEPTH: u32 = 63;

/// Dentry file types (`F2FS_FT_*`).
pub mod ft {
    /// unknown
    pub const UNKNOWN: u8 = 0;
    /// regular file
    pub const REG_FILE: u8 = 1;
    /// directory
    pub const DIR: u8 = 2;
    /// character device
    pub const CHRDEV: u8 = 3;
    /// block device
    pub const BLKDEV: u8 = 4;
    /// fifo
    pub const FIFO: u8 = 5;
    /// socket
    pub const SOCK: u8 = 6;
    /// symlink
    pub const SYMLINK: u8 = 7;
}

fn str2hashbuf(msg: &[u8], num: usize) -> [u32; 4] {
    let len = msg.len() as u32;
    let mut pad = len | (len << 8);
    pad |= pad << 16;
    let mut out = [pad; 4];
    let mut val = pad;
    let mut w = 0;
    let n = msg.len().min(num * 4);
    for (i, &c) in msg[..n].iter().enumerate() {
        if i % 4 == 0 {
            val = pad;
        }
        val = u32::from(c).wrapping_add(val << 8);
        if i % 4 == 3 {
            out[w] = val;
            w += 1;
            val = pad;
        }
    }
    if w < 4 {
        out[w] = val;
    }
    out
}

fn tea_transform(buf: &mut [u32; 4], inp: &[u32; 4]) {
    let (mut b0, mut b1) = (buf[0], buf[1]);
    let [a, b, c, d] = *inp;
    let mut sum = 0u32;
    for _ in 0..16 {
        sum = sum.wrapping_add(0x9E37_79B9);
        b0 = b0.wrapping_add(
            (b1 << 4).wrapping_add(a) ^ b1.wrapping_add(sum) ^ (b1 >> 5).wrapping_add(b),
        );
        b1 = b1.wrapping_add(
            (b0 << 4).wrapping_add(c) ^ b0.wrapping_add(sum) ^ (b0 >> 5).wrapping_add(d),
        );
    }
    buf[0] = buf[0].wrapping_add(b0);
    buf[1] = buf[1].wrapping_add(b1);
}

/// `f2fs_dentry_hash`: TEA over 16-byte chunks; "." and ".." hash to 0.
pub fn dentry_hash(name: &[u8]) -> u32 {
    if name == b"." || name == b".." {
        return 0;
    }
    let mut buf = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
    let mut p = name;
    loop {
        let inp = str2hashbuf(p, 4);
        tea_transform(&mut buf, &inp);
        if p.len() <= 16 {
            break;
        }
        p = &p[16..];
    }
    // F2FS_HASH_COL_BIT is bit 63, so masking the 32-bit hash with it changes nothing.
    buf[0]
}

/// Buckets of hash level `level` (`dir_buckets`).
pub fn dir_buckets(level: u32, dir_level: u32) -> u64 {
    if level + dir_level < MAX_DIR_HASH_DEPTH / 2 {
        1u64 << (level + dir_level)
    } else {
        1u64 << (MAX_DIR_HASH_DEPTH / 2 - 1)
    }
}

/// Blocks of each bucket at `level` (`bucket_blocks`).
pub fn bucket_blocks(level: u32) -> u64 {
    if level < MAX_DIR_HASH_DEPTH / 2 { 2 } else { 4 }
}

/// First file block of bucket `idx` at `level` (`dir_block_index`).
pub fn dir_block_index(level: u32, dir_level: u32, idx: u64) -> u64 {
    let mut bidx = 0u64;
    for i in 0..level {
        bidx = bidx.saturating_add(dir_buckets(i, dir_level) * bucket_blocks(i));
    }
    bidx.saturating_add(idx * bucket_blocks(level))
}

/// Name slots a name of `len` bytes takes.
pub fn slots_for(len: usize) -> usize {
    len.div_ceil(SLOT_LEN).max(1)
}

/// Where bitmap, dentries and names lie in a dentry area (block or inline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DentryLayout {
    /// slots
    pub nr: usize,
    /// offset of the dentry records
    pub dentry_off: usize,
    /// offset of the name slots
    pub name_off: usize,
}

impl DentryLayout {
    /// The layout of a 4 KiB dentry block.
    pub const BLOCK: Self = Self {
        nr: NR_DENTRY_IN_BLOCK,
        dentry_off: 27 + 3,
        name_off: 30 + DIR_ENTRY_SIZE * NR_DENTRY_IN_BLOCK,
    };

    /// The layout of inline dentries in an area of `max_inline` bytes.
    pub fn inline(max_inline: usize) -> Self {
        let nr = max_inline * 8 / ((DIR_ENTRY_SIZE + SLOT_LEN) * 8 + 1);
        let bitmap = nr.div_ceil(8);
        let reserved = max_inline - ((DIR_ENTRY_SIZE + SLOT_LEN) * nr + bitmap);
        let dentry_off = bitmap + reserved;
        Self {
            nr,
            dentry_off,
            name_off: dentry_off + DIR_ENTRY_SIZE * nr,
        }
    }
}

/// One entry found in a dentry area.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawDentry {
    /// slot index of the first name slot
    pub pos: usize,
    /// stored hash
    pub hash: u32,
    /// inode number
    pub ino: u32,
    /// file type (`ft::*`)
    pub file_type: u8,
    /// the name
    pub name: Vec<u8>,
}

/// Walks the used slots of a dentry area, validating name lengths and slot bounds.
pub fn parse_dentries(area: &[u8], l: DentryLayout) -> Result<Vec<RawDentry>> {
    super::ensure(area.len() >= l.name_off + l.nr * SLOT_LEN, || {
        format!("dentry area of {} bytes", area.len())
    })?;
    let mut out = Vec::new();
    let mut i = 0;
    while i < l.nr {
        if !test_bit_le(area, i) {
            i += 1;
            continue;
        }
        let d = l.dentry_off + i * DIR_ENTRY_SIZE;
        let name_len = get_u16(area, d + 8) as usize;
        let slots = slots_for(name_len);
        super::ensure(
            name_len > 0 && name_len <= NAME_LEN && i + slots <= l.nr,
            || format!("dentry slot {i}: name_len {name_len}"),
        )?;
        let n0 = l.name_off + i * SLOT_LEN;
        out.push(RawDentry {
            pos: i,
            hash: get_u32(area, d),
            ino: get_u32(area, d + 4),
            file_type: area[d + 10],
            name: area[n0..n0 + name_len].to_vec(),
        });
        i += slots;
    }
    Ok(out)
}

/// First run of `slots` free slots in a dentry area.
pub fn find_free_slots(area: &[u8], l: DentryLayout, slots: usize) -> Option<usize> {
    let mut run = 0;
    for i in 0..l.nr {
        if test_bit_le(area, i) {
            run = 0;
        } else {
            run += 1;
            if run == slots {
                return Some(i + 1 - slots);
            }
        }
    }
    None
}

/// Writes an entry at slot `pos` (the caller found room with [`find_free_slots`]).
pub fn put_dentry(
    area: &mut [u8],
    l: DentryLayout,
    pos: usize,
    hash: u32,
    ino: u32,
    file_type: u8,
    name: &[u8],
) {
    let slots = slots_for(name.len());
    if pos + slots > l.nr {
        return;
    }
    let d = l.dentry_off + pos * DIR_ENTRY_SIZE;
    put_u32(area, d, hash);
    put_u32(area, d + 4, ino);
    put_u16(area, d + 8, name.len() as u16);
    area[d + 10] = file_type;
    let n0 = l.name_off + pos * SLOT_LEN;
    area[n0..n0 + slots * SLOT_LEN].fill(0);
    area[n0..n0 + name.len()].copy_from_slice(name);
    for s in pos..pos + slots {
        set_bit_le(area, s, true);
    }
}

/// Clears the entry at slot `pos` of `slots` slots (its bitmap bits; F2FS leaves the bytes).
pub fn clear_dentry(area: &mut [u8], l: DentryLayout, pos: usize, slots: usize) {
    for s in pos..(pos + slots).min(l.nr) {
        set_bit_le(area, s, false);
    }
}

/// Points the entry at `pos` to another inode and type (rename over an existing name).
pub fn retarget_dentry(area: &mut [u8], l: DentryLayout, pos: usize, ino: u32, file_type: u8) {
    if pos < l.nr {
        let d = l.dentry_off + pos * DIR_ENTRY_SIZE;
        put_u32(area, d + 4, ino);
        area[d + 10] = file_type;
    }
}

/// A new directory's first dentry block with "." and "..".
pub fn new_dir_block(ino: u32, parent: u32) -> Box<Block> {
    let mut b = super::zero_block();
    put_dentry(&mut b[..], DentryLayout::BLOCK, 0, 0, ino, ft::DIR, b".");
    put_dentry(
        &mut b[..],
        DentryLayout::BLOCK,
        1,
        0,
        parent,
        ft::DIR,
        b"..",
    );
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    #[test]
    fn layouts_match_the_kernel_sizes() {
        assert_eq!(DentryLayout::BLOCK.name_off + 214 * 8, 4096);
        // inline xattr on (3488 bytes): 182 slots; off (3688 bytes): 192 slots.
        assert_eq!(DentryLayout::inline(3488).nr, 182);
        assert_eq!(DentryLayout::inline(3488).dentry_off, 23 + 7);
        assert_eq!(DentryLayout::inline(3688).nr, 192);
    }

    #[test]
    fn dot_entries_hash_to_zero_and_buckets_grow_as_the_kernel_does() {
        assert_eq!(dentry_hash(b"."), 0);
        assert_eq!(dentry_hash(b".."), 0);
        assert_eq!(dir_buckets(0, 0), 1);
        assert_eq!(dir_buckets(3, 0), 8);
        assert_eq!(dir_block_index(1, 0, 0), 2);
        assert_eq!(dir_block_index(2, 0, 1), 2 + 4 + 2);
        assert_eq!(bucket_blocks(31), 4);
    }

    proptest! {
        #[test]
        fn dentry_put_then_parse_returns_the_entry(
            name in vec(1u8..255, 1..=255),
            ino in any::<u32>(),
        ) {
            let mut b = [0u8; 4096];
            let l = DentryLayout::BLOCK;
            let pos = find_free_slots(&b, l, slots_for(name.len())).unwrap();
            put_dentry(&mut b, l, pos, dentry_hash(&name), ino, ft::REG_FILE, &name);
            let v = parse_dentries(&b, l).unwrap();
            prop_assert_eq!(v.len(), 1);
            prop_assert_eq!(&v[0].name, &name);
            prop_assert_eq!(v[0].ino, ino);
            prop_assert_eq!(v[0].hash, dentry_hash(&name));
        }

        #[test]
        fn dentry_parse_of_random_bytes_never_panics(v in vec(any::<u8>(), 4096)) {
            let _ = parse_dentries(&v, DentryLayout::BLOCK);
            let _ = parse_dentries(&v[..3488], DentryLayout::inline(3488));
            let _ = parse_dentries(&v[..100], DentryLayout::BLOCK);
        }
    }
}
