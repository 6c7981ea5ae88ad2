//! F2FS node blocks: inodes, direct and indirect nodes, and their footers (papers/gofs.md
//! §3.3: the tree of data pointers that GoFS walks level by level).

use super::{BLOCK_SIZE, Block, get_u16, get_u32, get_u64, put_u16, put_u32, put_u64, zero_block};

/// Address slots in an inode before extra attributes and inline xattrs are taken out.
pub const DEF_ADDRS_PER_INODE: usize = 923;
/// Address slots in a direct node.
pub const ADDRS_PER_BLOCK: usize = 1018;
/// Node ids in an indirect node.
pub const NIDS_PER_BLOCK: usize = 1018;
/// Inline xattr slots when the inode has the inline-xattr flag.
pub const DEFAULT_INLINE_XATTR_ADDRS: usize = 50;
/// `i_inline`: inline xattrs.
pub const F2FS_INLINE_XATTR: u8 = 0x01;
/// `i_inline`: inline data.
pub const F2FS_INLINE_DATA: u8 = 0x02;
/// `i_inline`: inline dentries.
pub const F2FS_INLINE_DENTRY: u8 = 0x04;
/// `i_inline`: inline data present.
pub const F2FS_DATA_EXIST: u8 = 0x08;
/// `i_inline`: implicit dot entries.
pub const F2FS_INLINE_DOTS: u8 = 0x10;
/// `i_inline`: extra attributes.
pub const F2FS_EXTRA_ATTR: u8 = 0x20;
/// Footer flag bit: cold node.
pub const COLD_BIT: u32 = 0x1;
/// Offset of `i_addr` in the inode.
pub const I_ADDR_OFFSET: usize = 360;
/// Offset of `i_nid` in the inode.
pub const I_NID_OFFSET: usize = I_ADDR_OFFSET + 4 * DEF_ADDRS_PER_INODE;
/// Offset of the footer.
pub const FOOTER_OFFSET: usize = 4072;
/// Node offset of the first indirect node (i_nid[2]).
pub const NODE_IND1: u32 = 3;
/// Node offset of the second indirect node (i_nid[3]).
pub const NODE_IND2: u32 = 4 + NIDS_PER_BLOCK as u32;
/// Node offset of the double-indirect node (i_nid[4]).
pub const NODE_DIND: u32 = 5 + 2 * NIDS_PER_BLOCK as u32;

/// POSIX file-type bits of `i_mode`.
pub const S_IFMT: u16 = 0o170000;
/// Regular file.
pub const S_IFREG: u16 = 0o100000;
/// Directory.
pub const S_IFDIR: u16 = 0o040000;
/// Symbolic link.
pub const S_IFLNK: u16 = 0o120000;
/// Character device.
pub const S_IFCHR: u16 = 0o020000;
/// Block device.
pub const S_IFBLK: u16 = 0o060000;
/// FIFO.
pub const S_IFIFO: u16 = 0o010000;
/// Socket.
pub const S_IFSOCK: u16 = 0o140000;

/// A node block held as its raw bytes, with typed accessors for the inode, direct-node,
/// indirect-node and footer views (a node is all of them at once, as in F2FS's union).
#[derive(Clone, PartialEq, Eq)]
pub struct Node(pub Box<Block>);

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("nid", &self.nid())
            .field("ino", &self.ino())
            .field("ofs", &self.ofs())
            .finish()
    }
}

macro_rules! field {
    ($get:ident, $set:ident, $ty:ty, $rd:ident, $wr:ident, $off:expr, $doc:literal) => {
        #[doc = concat!("`", $doc, "`")]
        pub fn $get(&self) -> $ty {
            $rd(&self.0[..], $off)
        }
        #[doc = concat!("Sets `", $doc, "`")]
        pub fn $set(&mut self, v: $ty) {
            $wr(&mut self.0[..], $off, v)
        }
    };
}

impl Node {
    /// A zeroed node block.
    pub fn zeroed() -> Self {
        Self(zero_block())
    }

    /// Wraps a block read from disk.
    pub fn from_block(b: Box<Block>) -> Self {
        Self(b)
    }

    field!(mode, set_mode, u16, get_u16, put_u16, 0, "i_mode");
    field!(uid, set_uid, u32, get_u32, put_u32, 4, "i_uid");
    field!(gid, set_gid, u32, get_u32, put_u32, 8, "i_gid");
    field!(links, set_links, u32, get_u32, put_u32, 12, "i_links");
    field!(size, set_size, u64, get_u64, put_u64, 16, "i_size");
    field!(
        blocks,
        set_blocks,
        u64,
        get_u64,
        put_u64,
        24,
        "i_blocks (4 KiB units, inode included)"
    );
    field!(atime, set_atime, u64, get_u64, put_u64, 32, "i_atime");
    field!(ctime, set_ctime, u64, get_u64, put_u64, 40, "i_ctime");
    field!(mtime, set_mtime, u64, get_u64, put_u64, 48, "i_mtime");
    field!(
        atime_nsec,
        set_atime_nsec,
        u32,
        get_u32,
        put_u32,
        56,
        "i_atime_nsec"
    );
    field!(
        ctime_nsec,
        set_ctime_nsec,
        u32,
        get_u32,
        put_u32,
        60,
        "i_ctime_nsec"
    );
    field!(
        mtime_nsec,
        set_mtime_nsec,
        u32,
        get_u32,
        put_u32,
        64,
        "i_mtime_nsec"
    );
    field!(
        generation,
        set_generation,
        u32,
        get_u32,
        put_u32,
        68,
        "i_generation"
    );
    field!(
        current_depth,
        set_current_depth,
        u32,
        get_u32,
        put_u32,
        72,
        "i_current_depth"
    );
    field!(
        xattr_nid,
        set_xattr_nid,
        u32,
        get_u32,
        put_u32,
        76,
        "i_xattr_nid"
    );
    field!(flags, set_flags, u32, get_u32, put_u32, 80, "i_flags");
    field!(pino, set_pino, u32, get_u32, put_u32, 84, "i_pino");
    field!(namelen, set_namelen, u32, get_u32, put_u32, 88, "i_namelen");
    field!(
        extra_isize,
        set_extra_isize,
        u16,
        get_u16,
        put_u16,
        360,
        "i_extra_isize"
    );
    field!(
        inline_xattr_size,
        set_inline_xattr_size,
        u16,
        get_u16,
        put_u16,
        362,
        "i_inline_xattr_size"
    );
    field!(
        nid,
        set_nid,
        u32,
        get_u32,
        put_u32,
        FOOTER_OFFSET,
        "footer.nid"
    );
    field!(
        ino,
        set_ino,
        u32,
        get_u32,
        put_u32,
        FOOTER_OFFSET + 4,
        "footer.ino"
    );
    field!(
        footer_flag,
        set_footer_flag,
        u32,
        get_u32,
        put_u32,
        FOOTER_OFFSET + 8,
        "footer.flag"
    );
    field!(
        cp_ver,
        set_cp_ver,
        u64,
        get_u64,
        put_u64,
        FOOTER_OFFSET + 12,
        "footer.cp_ver"
    );
    field!(
        next_blkaddr,
        set_next_blkaddr,
        u32,
        get_u32,
        put_u32,
        FOOTER_OFFSET + 20,
        "footer.next_blkaddr"
    );

    /// `i_advise`.
    pub fn advise(&self) -> u8 {
        self.0[2]
    }
    /// `i_inline`.
    pub fn inline_flags(&self) -> u8 {
        self.0[3]
    }
    /// Sets `i_inline`.
    pub fn set_inline_flags(&mut self, v: u8) {
        self.0[3] = v;
    }
    /// `i_dir_level`.
    pub fn dir_level(&self) -> u8 {
        self.0[347]
    }
    /// Sets `i_dir_level`.
    pub fn set_dir_level(&mut self, v: u8) {
        self.0[347] = v;
    }
    /// The name stored for recovery (`i_name`, up to 255 bytes).
    pub fn name(&self) -> &[u8] {
        &self.0[92..92 + (self.namelen() as usize).min(super::NAME_LEN)]
    }
    /// Sets `i_name`/`i_namelen`.
    pub fn set_name(&mut self, name: &[u8]) {
        let n = name.len().min(super::NAME_LEN);
        self.0[92..92 + super::NAME_LEN].fill(0);
        self.0[92..92 + n].copy_from_slice(&name[..n]);
        self.set_namelen(n as u32);
    }
    /// Clears the cached extent (`i_ext`).
    pub fn clear_extent(&mut self) {
        self.0[348..360].fill(0);
    }

    /// Node offset in its file's tree (footer flag >> 3).
    pub fn ofs(&self) -> u32 {
        self.footer_flag() >> 3
    }

    /// Sets the footer: ids, node offset, cold bit, checkpoint version, next block.
    pub fn set_footer(&mut self, nid: u32, ino: u32, ofs: u32, cold: bool) {
        self.set_nid(nid);
        self.set_ino(ino);
        self.set_footer_flag((ofs << 3) | if cold { COLD_BIT } else { 0 });
    }

    /// Whether this node is an inode (its own nid is its ino and offset 0).
    pub fn is_inode(&self) -> bool {
        self.ofs() == 0 && self.nid() == self.ino()
    }

    /// Address slots reserved at the start of `i_addr` for extra attributes.
    pub fn extra_isize_addrs(&self) -> usize {
        if self.inline_flags() & F2FS_EXTRA_ATTR != 0 {
            (self.extra_isize() as usize / 4).min(DEF_ADDRS_PER_INODE)
        } else {
            0
        }
    }

    /// Address slots reserved at the end of `i_addr` for inline xattrs.
    pub fn inline_xattr_addrs(&self, flexible: bool) -> usize {
        if flexible && self.inline_flags() & F2FS_EXTRA_ATTR != 0 {
            (self.inline_xattr_size() as usize).min(DEF_ADDRS_PER_INODE)
        } else if self.inline_flags() & F2FS_INLINE_XATTR != 0 {
            DEFAULT_INLINE_XATTR_ADDRS
        } else {
            0
        }
    }

    /// Data addresses the inode itself holds (`addrs_per_inode`).
    pub fn addrs_per_inode(&self, flexible: bool) -> usize {
        DEF_ADDRS_PER_INODE
            .saturating_sub(self.extra_isize_addrs())
            .saturating_sub(self.inline_xattr_addrs(flexible))
    }

    /// Address `i` of the inode's `i_addr` after the extra attributes (0 past the array).
    pub fn i_addr(&self, i: usize) -> u32 {
        let slot = self.extra_isize_addrs() + i;
        if slot < DEF_ADDRS_PER_INODE {
            get_u32(&self.0[..], I_ADDR_OFFSET + 4 * slot)
        } else {
            0
        }
    }

    /// Sets inode address `i` (after the extra attributes).
    pub fn set_i_addr(&mut self, i: usize, v: u32) {
        let slot = self.extra_isize_addrs() + i;
        if slot < DEF_ADDRS_PER_INODE {
            put_u32(&mut self.0[..], I_ADDR_OFFSET + 4 * slot, v);
        }
    }

    /// `i_nid[k]` (k < 5).
    pub fn i_nid(&self, k: usize) -> u32 {
        if k < 5 {
            get_u32(&self.0[..], I_NID_OFFSET + 4 * k)
        } else {
            0
        }
    }

    /// Sets `i_nid[k]`.
    pub fn set_i_nid(&mut self, k: usize, v: u32) {
        if k < 5 {
            put_u32(&mut self.0[..], I_NID_OFFSET + 4 * k, v);
        }
    }

    /// Entry `i` of a direct node's addresses or an indirect node's nids (0 past the end).
    pub fn slot(&self, i: usize) -> u32 {
        if i < ADDRS_PER_BLOCK {
            get_u32(&self.0[..], 4 * i)
        } else {
            0
        }
    }

    /// Sets entry `i` of a direct or indirect node.
    pub fn set_slot(&mut self, i: usize, v: u32) {
        if i < ADDRS_PER_BLOCK {
            put_u32(&mut self.0[..], 4 * i, v);
        }
    }

    /// Bytes available for inline data or inline dentries (`MAX_INLINE_DATA`).
    pub fn max_inline(&self, flexible: bool) -> usize {
        4 * DEF_ADDRS_PER_INODE
            .saturating_sub(self.inline_xattr_addrs(flexible))
            .saturating_sub(self.extra_isize_addrs())
            .saturating_sub(1)
    }

    /// The inline data area (`i_addr[extra + 1..]`, [`Node::max_inline`] bytes).
    pub fn inline_area(&self, flexible: bool) -> &[u8] {
        let start = I_ADDR_OFFSET + 4 * (self.extra_isize_addrs() + 1);
        &self.0[start..start + self.max_inline(flexible)]
    }

    /// The inline data area, writable.
    pub fn inline_area_mut(&mut self, flexible: bool) -> &mut [u8] {
        let start = I_ADDR_OFFSET + 4 * (self.extra_isize_addrs() + 1);
        let n = self.max_inline(flexible);
        &mut self.0[start..start + n]
    }

    /// The raw block.
    pub fn bytes(&self) -> &Block {
        &self.0
    }
}

/// At most three steps of a node path, kept inline: every 4 KiB read resolves a path, and
/// heap vectors cost it two allocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathSteps<T> {
    items: [T; 3],
    len: u8,
}

impl<T: Copy + Default> PathSteps<T> {
    /// The steps `items` (at most three: F2FS trees are three nodes deep).
    fn of(items: &[T]) -> Self {
        let mut steps = Self {
            items: [T::default(); 3],
            len: items.len().min(3) as u8,
        };
        steps.items[..usize::from(steps.len)].copy_from_slice(&items[..usize::from(steps.len)]);
        steps
    }
}

impl<T> std::ops::Deref for PathSteps<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.items[..usize::from(self.len)]
    }
}

/// Where the `idx`-th data block of a file lives in the node tree (`get_node_path`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodePath {
    /// in `i_addr[idx]`
    Inode(usize),
    /// in a node reached through `i_nid[nid_slot]` and then `offsets`; `node_ofs` are the
    /// node offsets of every node on the way; `slot` is the address inside the direct node
    Tree {
        /// which `i_nid`
        nid_slot: usize,
        /// indexes inside the indirect nodes on the way (0, 1 or 2 of them)
        offsets: PathSteps<usize>,
        /// node offset (footer) of each node on the way, top to bottom
        node_ofs: PathSteps<u32>,
        /// address index inside the direct node
        slot: usize,
    },
}

/// The path to data block `idx` of a file whose inode holds `addrs_per_inode` addresses, as
/// F2FS's `get_node_path` defines it; `None` past the largest file.
pub fn node_path(idx: u64, addrs_per_inode: usize) -> Option<NodePath> {
    let d = ADDRS_PER_BLOCK as u64;
    let n = NIDS_PER_BLOCK as u64;
    let mut b = idx;
    if b < addrs_per_inode as u64 {
        return Some(NodePath::Inode(b as usize));
    }
    b -= addrs_per_inode as u64;
    for k in 0..2u32 {
        if b < d {
            return Some(NodePath::Tree {
                nid_slot: k as usize,
                offsets: PathSteps::of(&[]),
                node_ofs: PathSteps::of(&[1 + k]),
                slot: b as usize,
            });
        }
        b -= d;
    }
    for k in 0..2u64 {
        if b < d * n {
            let top = if k == 0 { NODE_IND1 } else { NODE_IND2 };
            let i = b / d;
            return Some(NodePath::Tree {
                nid_slot: 2 + k as usize,
                offsets: PathSteps::of(&[i as usize]),
                node_ofs: PathSteps::of(&[top, top + 1 + i as u32]),
                slot: (b % d) as usize,
            });
        }
        b -= d * n;
    }
    if b < d * n * n {
        let i = b / (d * n);
        let j = (b / d) % n;
        let mid = NODE_DIND + 1 + (i as u32) * (n as u32 + 1);
        return Some(NodePath::Tree {
            nid_slot: 4,
            offsets: PathSteps::of(&[i as usize, j as usize]),
            node_ofs: PathSteps::of(&[NODE_DIND, mid, mid + 1 + j as u32]),
            slot: (b % d) as usize,
        });
    }
    None
}

/// Whether node offset `ofs` is a direct node (or inode) rather than an indirect one
/// (`IS_DNODE`).
pub fn is_dnode_ofs(ofs: u32) -> bool {
    if ofs == NODE_IND1 || ofs == NODE_IND2 || ofs == NODE_DIND {
        return false;
    }
    if ofs > NODE_DIND {
        return !(ofs - NODE_DIND - 1).is_multiple_of(NIDS_PER_BLOCK as u32 + 1);
    }
    true
}

/// The first file block index covered by direct node `ofs` (a direct node's offset), given
/// `addrs_per_inode`: the inverse of [`node_path`] (`start_bidx_of_node`).
pub fn start_bidx_of_node(ofs: u32, addrs_per_inode: usize) -> u64 {
    let n = NIDS_PER_BLOCK as u64;
    let indirect_blks = 2 * n + 4;
    let ofs = u64::from(ofs);
    if ofs == 0 {
        return 0;
    }
    let bidx = if ofs <= 2 {
        ofs - 1
    } else if ofs <= indirect_blks {
        ofs - 2 - (ofs - 4) / (n + 1)
    } else {
        ofs - 5 - (ofs - indirect_blks - 3) / (n + 1)
    };
    bidx * ADDRS_PER_BLOCK as u64 + addrs_per_inode as u64
}

const _: () = assert!(FOOTER_OFFSET + 24 == BLOCK_SIZE);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    #[test]
    fn node_offsets_match_get_node_path() {
        let a = 923;
        assert_eq!(node_path(0, a), Some(NodePath::Inode(0)));
        let p = node_path(923, a).unwrap();
        assert!(
            matches!(p, NodePath::Tree { nid_slot: 0, ref node_ofs, slot: 0, .. }
                if node_ofs[..] == [1])
        );
        let p = node_path(923 + 2036, a).unwrap();
        assert!(
            matches!(p, NodePath::Tree { nid_slot: 2, ref node_ofs, .. } if node_ofs[..] == [3, 4])
        );
        let p = node_path(923 + 2036 + 1018 * 1018, a).unwrap();
        assert!(matches!(p, NodePath::Tree { nid_slot: 3, ref node_ofs, .. }
                if node_ofs[..] == [1022, 1023]));
        let p = node_path(923 + 2036 + 2 * 1018 * 1018, a).unwrap();
        assert!(matches!(p, NodePath::Tree { nid_slot: 4, ref node_ofs, .. }
                if node_ofs[..] == [2041, 2042, 2043]));
        let last = 923 + 2036 + 2 * 1018 * 1018 + 1018u64 * 1018 * 1018;
        assert_eq!(node_path(last, a), None);
    }

    proptest! {
        #[test]
        fn start_bidx_inverts_node_path(idx in 0u64..(923 + 2036 + 3 * 1018 * 1018 * 1018)) {
            if let Some(NodePath::Tree { node_ofs, slot, .. }) = node_path(idx, 873) {
                let last = *node_ofs.last().unwrap();
                prop_assert!(is_dnode_ofs(last));
                prop_assert!(node_ofs[..node_ofs.len() - 1].iter().all(|&o| !is_dnode_ofs(o)));
                prop_assert_eq!(start_bidx_of_node(last, 873) + slot as u64, idx);
            }
        }

        #[test]
        fn inode_fields_round_trip(
            mode in any::<u16>(),
            size in any::<u64>(),
            name in vec(any::<u8>(), 0..=255),
        ) {
            let mut n = Node::zeroed();
            n.set_mode(mode);
            n.set_size(size);
            n.set_name(&name);
            n.set_footer(7, 7, 0, true);
            let back = Node::from_block(Box::new(*n.bytes()));
            prop_assert_eq!(back.mode(), mode);
            prop_assert_eq!(back.size(), size);
            prop_assert_eq!(back.name(), &name[..]);
            prop_assert!(back.is_inode());
        }

        #[test]
        fn node_accessors_never_panic_on_random_bytes(v in vec(any::<u8>(), 4096)) {
            let mut b = [0u8; 4096];
            b.copy_from_slice(&v);
            let n = Node::from_block(Box::new(b));
            let _ = (n.name(), n.inline_area(true), n.inline_area(false), n.addrs_per_inode(true));
            for i in 0..1100 { let _ = (n.i_addr(i), n.slot(i)); }
        }
    }
}
