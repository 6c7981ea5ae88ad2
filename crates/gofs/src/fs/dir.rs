//! Directories on disk (papers/gofs.md §3.3, the on-disk side of the dentry cache): lookup
//! through the multi-level hash buckets, inline dentries, insertion at the lowest level with
//! room (growing `i_current_depth` as the kernel does), removal that punches emptied blocks.

use super::engine::Engine;
use crate::error::{FsError, Result};
use crate::format::dentry::{
    DentryLayout, MAX_DIR_HASH_DEPTH, RawDentry, bucket_blocks, clear_dentry, dentry_hash,
    dir_block_index, dir_buckets, find_free_slots, parse_dentries, put_dentry, retarget_dentry,
    slots_for,
};
use crate::format::node::{F2FS_INLINE_DENTRY, F2FS_INLINE_DOTS};
use crate::format::{BLOCK_SIZE, NULL_ADDR, corrupt};

/// Where an entry lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loc {
    /// in the inode's inline dentry area
    Inline,
    /// in dentry block `idx` of the directory
    Block(u64),
}

/// A found entry.
#[derive(Debug, Clone)]
pub struct Found {
    /// where
    pub loc: Loc,
    /// the entry
    pub d: RawDentry,
}

impl Engine {
    fn inline_layout(&mut self, dir: u32) -> Result<(bool, DentryLayout)> {
        let flexible = self.flexible();
        let n = self.inode(dir)?;
        Ok((
            n.inline_flags() & F2FS_INLINE_DENTRY != 0,
            DentryLayout::inline(n.max_inline(flexible)),
        ))
    }

    fn read_dentry_block(&mut self, dir: u32, idx: u64) -> Result<Option<Vec<u8>>> {
        if self.resolve(dir, idx, 1)?[0] == NULL_ADDR {
            return Ok(None);
        }
        let mut b = vec![0u8; BLOCK_SIZE];
        self.read_blocks(dir, idx, &mut b)?;
        Ok(Some(b))
    }

    /// Every entry of `dir` ("." and ".." included when stored).
    pub fn dir_entries(&mut self, dir: u32) -> Result<Vec<RawDentry>> {
        let (inline, l) = self.inline_layout(dir)?;
        if inline {
            let flexible = self.flexible();
            let n = self.inode(dir)?;
            return parse_dentries(n.inline_area(flexible), l);
        }
        let size = self.inode(dir)?.size();
        let nblk = size.div_ceil(BLOCK_SIZE as u64);
        if nblk > crate::fs::file::MAX_FILE_BLOCKS {
            return Err(corrupt(format!("directory {dir} of size {size}")));
        }
        let mut out = Vec::new();
        let mut idx = 0;
        while idx < nblk {
            let n = (nblk - idx).min(256);
            let addrs = self.resolve(dir, idx, n)?;
            let mut buf = vec![0u8; n as usize * BLOCK_SIZE];
            self.read_blocks(dir, idx, &mut buf)?;
            for (k, c) in buf.chunks_exact(BLOCK_SIZE).enumerate() {
                if addrs[k] != NULL_ADDR {
                    out.extend(parse_dentries(c, DentryLayout::BLOCK)?);
                }
            }
            idx += n;
        }
        Ok(out)
    }

    /// Finds `name` in `dir` through the hash buckets.
    pub fn find_entry(&mut self, dir: u32, name: &[u8]) -> Result<Option<Found>> {
        let (inline, l) = self.inline_layout(dir)?;
        if inline {
            let flexible = self.flexible();
            let n = self.inode(dir)?;
            let hit = parse_dentries(n.inline_area(flexible), l)?
                .into_iter()
                .find(|d| d.name == name);
            return Ok(hit.map(|d| Found {
                loc: Loc::Inline,
                d,
            }));
        }
        let hash = dentry_hash(name);
        let n = self.inode(dir)?;
        let depth = n.current_depth();
        let dir_level = u32::from(n.dir_level());
        let nblk = n.size().div_ceil(BLOCK_SIZE as u64);
        if depth > MAX_DIR_HASH_DEPTH || dir_level > MAX_DIR_HASH_DEPTH {
            return Err(corrupt(format!(
                "directory {dir} depth {depth} level {dir_level}"
            )));
        }
        for level in 0..depth {
            let nb = dir_buckets(level, dir_level);
            let bidx = dir_block_index(level, dir_level, u64::from(hash) % nb);
            for idx in bidx..bidx + bucket_blocks(level) {
                if idx >= nblk {
                    break;
                }
                let Some(b) = self.read_dentry_block(dir, idx)? else {
                    continue;
                };
                if let Some(d) = parse_dentries(&b, DentryLayout::BLOCK)?
                    .into_iter()
                    .find(|d| d.hash == hash && d.name == name)
                {
                    return Ok(Some(Found {
                        loc: Loc::Block(idx),
                        d,
                    }));
                }
            }
        }
        Ok(None)
    }

    /// Moves inline dentries to dentry block 0 (same slots: the inline area is smaller).
    pub fn convert_inline_dir(&mut self, dir: u32) -> Result<()> {
        let (inline, l) = self.inline_layout(dir)?;
        if !inline {
            return Ok(());
        }
        let flexible = self.flexible();
        let n = self.inode(dir)?;
        let entries = parse_dentries(n.inline_area(flexible), l)?;
        let mut b = vec![0u8; BLOCK_SIZE];
        let has_dots =
            n.inline_flags() & F2FS_INLINE_DOTS == 0 || entries.iter().any(|d| d.name == b".");
        if !has_dots {
            return Err(FsError::Unsupported(
                "inline directories with implicit dot entries",
            ));
        }
        for d in &entries {
            put_dentry(
                &mut b,
                DentryLayout::BLOCK,
                d.pos,
                d.hash,
                d.ino,
                d.file_type,
                &d.name,
            );
        }
        n.inline_area_mut(flexible).fill(0);
        n.set_inline_flags(n.inline_flags() & !F2FS_INLINE_DENTRY);
        n.set_current_depth(1);
        n.set_size(BLOCK_SIZE as u64);
        self.touch(dir);
        self.write_blocks(dir, 0, &b)
    }

    /// Adds `name` → `ino` to `dir` at the lowest hash level with room.
    pub fn add_entry(&mut self, dir: u32, name: &[u8], ino: u32, ft: u8) -> Result<()> {
        self.convert_inline_dir(dir)?;
        let hash = dentry_hash(name);
        let slots = slots_for(name.len());
        let n = self.inode(dir)?;
        let mut depth = n.current_depth();
        let dir_level = u32::from(n.dir_level());
        let mut level = 0;
        loop {
            if depth >= MAX_DIR_HASH_DEPTH {
                return Err(FsError::NoSpace);
            }
            if level == depth {
                depth += 1;
            }
            let nb = dir_buckets(level, dir_level);
            let bidx = dir_block_index(level, dir_level, u64::from(hash) % nb);
            for idx in bidx..bidx + bucket_blocks(level) {
                let mut b = self
                    .read_dentry_block(dir, idx)?
                    .unwrap_or_else(|| vec![0; BLOCK_SIZE]);
                if let Some(pos) = find_free_slots(&b, DentryLayout::BLOCK, slots) {
                    put_dentry(&mut b, DentryLayout::BLOCK, pos, hash, ino, ft, name);
                    self.write_blocks(dir, idx, &b)?;
                    let n = self.inode(dir)?;
                    n.set_current_depth(depth);
                    let end = (idx + 1) * BLOCK_SIZE as u64;
                    if n.size() < end {
                        n.set_size(end);
                    }
                    self.touch(dir);
                    return Ok(());
                }
            }
            level += 1;
        }
    }

    /// Removes the entry `f` from `dir`; a dentry block left empty is freed.
    pub fn remove_entry(&mut self, dir: u32, f: &Found) -> Result<()> {
        let slots = slots_for(f.d.name.len());
        match f.loc {
            Loc::Inline => {
                let (_, l) = self.inline_layout(dir)?;
                let flexible = self.flexible();
                clear_dentry(
                    self.inode(dir)?.inline_area_mut(flexible),
                    l,
                    f.d.pos,
                    slots,
                );
                self.touch(dir);
            }
            Loc::Block(idx) => {
                let mut b = self
                    .read_dentry_block(dir, idx)?
                    .ok_or_else(|| corrupt(format!("directory {dir} block {idx} vanished")))?;
                clear_dentry(&mut b, DentryLayout::BLOCK, f.d.pos, slots);
                if b[..27].iter().all(|&x| x == 0) {
                    self.punch_block(dir, idx)?;
                } else {
                    self.write_blocks(dir, idx, &b)?;
                }
            }
        }
        Ok(())
    }

    /// Points the entry `f` of `dir` at another inode.
    pub fn retarget_entry(&mut self, dir: u32, f: &Found, ino: u32, ft: u8) -> Result<()> {
        match f.loc {
            Loc::Inline => {
                let (_, l) = self.inline_layout(dir)?;
                let flexible = self.flexible();
                retarget_dentry(
                    self.inode(dir)?.inline_area_mut(flexible),
                    l,
                    f.d.pos,
                    ino,
                    ft,
                );
                self.touch(dir);
                Ok(())
            }
            Loc::Block(idx) => {
                let mut b = self
                    .read_dentry_block(dir, idx)?
                    .ok_or_else(|| corrupt(format!("directory {dir} block {idx} vanished")))?;
                retarget_dentry(&mut b, DentryLayout::BLOCK, f.d.pos, ino, ft);
                self.write_blocks(dir, idx, &b)
            }
        }
    }

    /// Whether `dir` holds nothing but "." and "..".
    pub fn dir_is_empty(&mut self, dir: u32) -> Result<bool> {
        Ok(self
            .dir_entries(dir)?
            .iter()
            .all(|d| d.name == b"." || d.name == b".."))
    }
}
