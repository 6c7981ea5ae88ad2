//! File data: the tree of data pointers (inode, direct, indirect, double-indirect nodes),
//! resolved level-synchronously (papers/gofs.md §3.3, "parallel traversal of data pointers":
//! all node blocks of one level of a request are fetched in one batch before the next
//! level), out-of-place data writes, inline data, and truncation.

use std::collections::BTreeSet;

use super::engine::Engine;
use super::pointer_cache::{self, PointerCache};
use super::segment::Log;
use crate::error::{FsError, Result};
use crate::format::node::{
    ADDRS_PER_BLOCK, F2FS_DATA_EXIST, F2FS_INLINE_DATA, NIDS_PER_BLOCK, Node, NodePath, S_IFDIR,
    S_IFLNK, S_IFMT, S_IFREG, node_path,
};
use crate::format::segment::Summary;
use crate::format::{BLOCK_SIZE, BlockIo, NEW_ADDR, NULL_ADDR, corrupt};

/// Data blocks a file can have at most.
pub const MAX_FILE_BLOCKS: u64 =
    923 + 2 * ADDRS_PER_BLOCK as u64 + 2 * 1018 * 1018 + 1018 * 1018 * 1018;

/// The block addresses of a read: one without a heap allocation (the common 4 KiB read).
#[derive(Debug)]
pub enum Addrs {
    /// a single block
    One([u32; 1]),
    /// several blocks
    Many(Vec<u32>),
}

impl std::ops::Deref for Addrs {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        match self {
            Self::One(a) => a,
            Self::Many(v) => v,
        }
    }
}

/// A read whose block addresses are resolved (see [`Engine::plan_read`]).
#[derive(Debug)]
pub enum ReadPlan {
    /// finished: this many bytes are in the buffer
    Done(usize),
    /// read these blocks, then copy `len` bytes from byte `skip` of the first
    Blocks {
        /// one address per block (NULL_ADDR/NEW_ADDR: zeros)
        addrs: Addrs,
        /// offset inside the first block
        skip: usize,
        /// bytes to copy out
        len: usize,
    },
}

impl ReadPlan {
    /// Performs the device reads and fills `buf`; returns the bytes read.
    pub fn run(self, io: &dyn BlockIo, buf: &mut [u8]) -> Result<usize> {
        match self {
            Self::Done(n) => Ok(n),
            Self::Blocks { addrs, skip, len } => {
                let out = buf
                    .get_mut(..len)
                    .ok_or_else(|| corrupt("read plan longer than buffer"))?;
                // Whole blocks go straight into the caller's buffer; only a partial first or
                // last block goes through a one-block bounce buffer.
                let mut addrs: &[u32] = &addrs;
                let mut out = out;
                let mut block = Vec::new();
                if skip != 0 || out.len() < BLOCK_SIZE {
                    let (&a, rest) = addrs
                        .split_first()
                        .ok_or_else(|| corrupt("empty read plan"))?;
                    let n = out.len().min(BLOCK_SIZE - skip);
                    block.resize(BLOCK_SIZE, 0);
                    read_addrs(io, &[a], &mut block)?;
                    let (head, tail) = out.split_at_mut(n);
                    head.copy_from_slice(&block[skip..skip + n]);
                    addrs = rest;
                    out = tail;
                }
                let whole = out.len() / BLOCK_SIZE;
                let (mid, tail) = out.split_at_mut(whole * BLOCK_SIZE);
                let mid_addrs = addrs
                    .get(..whole)
                    .ok_or_else(|| corrupt("short read plan"))?;
                read_addrs(io, mid_addrs, mid)?;
                if !tail.is_empty() {
                    let a = *addrs.get(whole).ok_or_else(|| corrupt("short read plan"))?;
                    block.resize(BLOCK_SIZE, 0);
                    read_addrs(io, &[a], &mut block)?;
                    tail.copy_from_slice(&block[..tail.len()]);
                }
                Ok(len)
            }
        }
    }
}

/// Runs many plans with one batch of device reads: the whole-block runs of all of them go to
/// [`BlockIo::read_many`] together (kept in flight at once by a device that can), while a plan
/// that starts or ends inside a block runs on its own. Returns the bytes read per plan.
pub fn run_many(
    plans: Vec<ReadPlan>,
    io: &dyn BlockIo,
    bufs: &mut [&mut [u8]],
) -> Result<Vec<usize>> {
    let mut done = Vec::with_capacity(plans.len());
    let mut runs: Vec<(u64, &mut [u8])> = Vec::new();
    for (plan, buf) in plans.into_iter().zip(bufs.iter_mut()) {
        let buf: &mut [u8] = std::mem::take(buf);
        match plan {
            ReadPlan::Blocks {
                addrs,
                skip: 0,
                len,
            } if len % BLOCK_SIZE == 0 && addrs.len() >= len / BLOCK_SIZE => {
                let out = buf
                    .get_mut(..len)
                    .ok_or_else(|| corrupt("read plan longer than buffer"))?;
                push_runs(&addrs[..len / BLOCK_SIZE], out, &mut runs);
                done.push(len);
            }
            other => done.push(other.run(io, buf)?),
        }
    }
    io.read_many(&mut runs)?;
    Ok(done)
}

/// Splits `out` into one piece per run of consecutive addresses (up to 64 blocks), queued on
/// `runs`; holes are zero-filled here.
fn push_runs<'b>(addrs: &[u32], mut out: &'b mut [u8], runs: &mut Vec<(u64, &'b mut [u8])>) {
    let mut k = 0;
    while k < addrs.len() {
        let a = addrs[k];
        if a == NULL_ADDR || a == NEW_ADDR {
            let (hole, rest) = std::mem::take(&mut out).split_at_mut(BLOCK_SIZE);
            hole.fill(0);
            out = rest;
            k += 1;
            continue;
        }
        let mut r = 1;
        while k + r < addrs.len() && r < 64 && a.checked_add(r as u32) == Some(addrs[k + r]) {
            r += 1;
        }
        let (piece, rest) = std::mem::take(&mut out).split_at_mut(r * BLOCK_SIZE);
        runs.push((u64::from(a), piece));
        out = rest;
        k += r;
    }
}

/// Reads the blocks at `addrs` into `buf`, one command per run of consecutive addresses;
/// holes read as zeros.
fn read_addrs(io: &dyn BlockIo, addrs: &[u32], buf: &mut [u8]) -> Result<()> {
    let n = addrs.len().min(buf.len() / BLOCK_SIZE);
    let mut k = 0;
    while k < n {
        let a = addrs[k];
        if a == NULL_ADDR || a == NEW_ADDR {
            buf[k * BLOCK_SIZE..(k + 1) * BLOCK_SIZE].fill(0);
            k += 1;
            continue;
        }
        let mut r = 1;
        while k + r < n && r < 64 && addrs[k + r] == a + r as u32 {
            r += 1;
        }
        io.read(u64::from(a), &mut buf[k * BLOCK_SIZE..(k + r) * BLOCK_SIZE])?;
        k += r;
    }
    Ok(())
}

fn node_addr(n: &Node, ofs: usize) -> u32 {
    if n.is_inode() {
        n.i_addr(ofs)
    } else {
        n.slot(ofs)
    }
}

impl Engine {
    /// Whether inode `ino` is a directory.
    pub fn is_dir(&mut self, ino: u32) -> Result<bool> {
        Ok(self.inode(ino)?.mode() & S_IFMT == S_IFDIR)
    }

    /// The log data blocks of `ino` go to: directories hot, everything else warm.
    fn data_log(&mut self, ino: u32) -> Result<Log> {
        Ok(if self.is_dir(ino)? {
            Log::HotData
        } else {
            Log::WarmData
        })
    }

    /// Loads the given nodes of `ino` into the cache, reading the uncached ones in runs of
    /// consecutive addresses (one command per run).
    fn load_nodes(&mut self, ino: u32, nids: &BTreeSet<u32>) -> Result<()> {
        let mut want: Vec<(u32, u32)> = Vec::new();
        for &nid in nids {
            if !self.nat.cache.contains_key(&nid) {
                let e = self.nat.get(nid)?;
                if !self.sb.in_main(e.block_addr) {
                    return Err(corrupt(format!(
                        "node {nid} of inode {ino} at block {:#x} outside the main area",
                        e.block_addr
                    )));
                }
                want.push((e.block_addr, nid));
            }
        }
        want.sort_unstable();
        // One batch of device reads for the whole level: runs of consecutive addresses are
        // one command each, and all commands are in flight together.
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let mut i = 0;
        while i < want.len() {
            let mut n = 1;
            while i + n < want.len() && n < 16 && want[i + n].0 == want[i].0 + n as u32 {
                n += 1;
            }
            runs.push((i, n));
            i += n;
        }
        let mut bufs: Vec<Vec<u8>> = runs
            .iter()
            .map(|&(_, n)| vec![0u8; n * BLOCK_SIZE])
            .collect();
        let mut reqs: Vec<(u64, &mut [u8])> = runs
            .iter()
            .zip(bufs.iter_mut())
            .map(|(&(i, _), b)| (u64::from(want[i].0), b.as_mut_slice()))
            .collect();
        self.io.read_many(&mut reqs)?;
        for (&(i, _), buf) in runs.iter().zip(&bufs) {
            for (k, c) in buf.chunks_exact(BLOCK_SIZE).enumerate() {
                let mut b = crate::format::zero_block();
                b.copy_from_slice(c);
                let nid = want[i + k].1;
                let node = Node::from_block(b);
                if node.nid() != nid || node.ino() != ino {
                    return Err(corrupt(format!(
                        "node {nid} of inode {ino}: footer names node {} of inode {}",
                        node.nid(),
                        node.ino()
                    )));
                }
                self.nat.cache.insert(nid, node);
            }
        }
        Ok(())
    }

    /// Block addresses of data blocks `first..first+count` of `ino` (NULL_ADDR for holes),
    /// resolved one tree level at a time.
    pub fn resolve(&mut self, ino: u32, first: u64, count: u64) -> Result<Vec<u32>> {
        if count == 1 {
            return Ok(vec![self.resolve_one(ino, first)?]);
        }
        let flexible = self.flexible();
        let inode = self.inode(ino)?;
        let api = inode.addrs_per_inode(flexible);
        let mut paths = Vec::with_capacity(count as usize);
        let mut out = vec![NULL_ADDR; count as usize];
        // cursor per block: (current nid, depth reached)
        let mut cur: Vec<(u32, usize)> = Vec::with_capacity(count as usize);
        for (k, idx) in (first..first + count).enumerate() {
            let p = node_path(idx, api).ok_or_else(|| {
                FsError::InvalidArgument(format!("block {idx} past the largest file"))
            })?;
            match &p {
                NodePath::Inode(i) => out[k] = inode.i_addr(*i),
                NodePath::Tree { .. } => {}
            }
            let top = match &p {
                NodePath::Tree { nid_slot, .. } => inode.i_nid(*nid_slot),
                NodePath::Inode(_) => 0,
            };
            cur.push((top, 0));
            paths.push(p);
        }
        for level in 0..3 {
            let need: BTreeSet<u32> = cur
                .iter()
                .zip(&paths)
                .filter(|((nid, d), p)| {
                    *nid != 0 && *d == level && matches!(p, NodePath::Tree { .. })
                })
                .map(|((nid, _), _)| *nid)
                .collect();
            if need.is_empty() {
                break;
            }
            self.load_nodes(ino, &need)?;
            for (k, p) in paths.iter().enumerate() {
                let NodePath::Tree {
                    offsets,
                    node_ofs,
                    slot,
                    ..
                } = p
                else {
                    continue;
                };
                let (nid, d) = cur[k];
                if nid == 0 || d != level {
                    continue;
                }
                let n = self.nat.cached(nid)?;
                if n.ofs() != node_ofs[level] {
                    return Err(corrupt(format!(
                        "node {nid} of inode {ino} has offset {}, expected {}",
                        n.ofs(),
                        node_ofs[level]
                    )));
                }
                if level < offsets.len() {
                    cur[k] = (n.slot(offsets[level]), level + 1);
                } else {
                    out[k] = n.slot(*slot);
                    cur[k] = (0, level + 1);
                }
            }
        }
        for (k, &a) in out.iter().enumerate() {
            self.check_data_addr(ino, first + k as u64, a)?;
        }
        Ok(out)
    }

    /// [`Engine::resolve`] of one block (the common 4 KiB read): the same walk, one node per
    /// level, without the per-request sets and vectors of the batched walk.
    fn resolve_one(&mut self, ino: u32, idx: u64) -> Result<u32> {
        let Some((nid, slot)) = self.locate(ino, idx)? else {
            return Ok(NULL_ADDR);
        };
        let n = self.nat.cached(nid)?;
        let a = node_addr(n, slot);
        self.check_data_addr(ino, idx, a)?;
        Ok(a)
    }

    /// The node (the inode or a direct node, cached on return) holding the address of data
    /// block `idx` of `ino`, and the slot of the address in it; `None` when a node on the way
    /// is missing (the block is a hole).
    fn locate(&mut self, ino: u32, idx: u64) -> Result<Option<(u32, usize)>> {
        let flexible = self.flexible();
        let inode = self.inode(ino)?;
        let api = inode.addrs_per_inode(flexible);
        let p = node_path(idx, api).ok_or_else(|| {
            FsError::InvalidArgument(format!("block {idx} past the largest file"))
        })?;
        let (mut nid, offsets, node_ofs, slot) = match p {
            NodePath::Inode(i) => return Ok(Some((ino, i))),
            NodePath::Tree {
                nid_slot,
                offsets,
                node_ofs,
                slot,
            } => (inode.i_nid(nid_slot), offsets, node_ofs, slot),
        };
        for (level, &want_ofs) in node_ofs.iter().enumerate() {
            if nid == 0 {
                return Ok(None);
            }
            if !self.nat.cache.contains_key(&nid) {
                self.load_nodes(ino, &BTreeSet::from([nid]))?;
            }
            let n = self.nat.cached(nid)?;
            if n.ofs() != want_ofs {
                return Err(corrupt(format!(
                    "node {nid} of inode {ino} has offset {}, expected {want_ofs}",
                    n.ofs()
                )));
            }
            match offsets.get(level) {
                Some(&o) => nid = n.slot(o),
                None => return Ok(Some((nid, slot))),
            }
        }
        Err(corrupt(format!("node path of block {idx} of inode {ino}")))
    }

    /// Caches in `cache`, at `version`, the size of `ino` and the data pointers of blocks
    /// `first..last` (a read just resolved them), one [`pointer_cache::CHUNK`] at a time: for
    /// each chunk the read touches, every address of that chunk in the same node as the
    /// read's first block there. Holes and addresses outside the main area stay uncached.
    pub fn cache_pointers(
        &mut self,
        ino: u32,
        (first, last): (u64, u64),
        cache: &PointerCache,
        version: u64,
        budget: &pointer_cache::Budget,
    ) -> Result<()> {
        let flexible = self.flexible();
        let inode = self.inode(ino)?;
        let size = inode.size();
        let api = inode.addrs_per_inode(flexible) as u64;
        let chunk = pointer_cache::CHUNK as u64;
        let mut idx = first;
        while idx < last {
            let chunk_end = (idx - idx % chunk + chunk).min(pointer_cache::MAX_BLOCKS);
            let Some((nid, slot)) = self.locate(ino, idx)? else {
                idx += 1;
                continue;
            };
            let n = self.nat.cached(nid)?;
            let per_node = if n.is_inode() {
                api
            } else {
                ADDRS_PER_BLOCK as u64
            };
            let node_first = idx - slot as u64;
            let lo = (idx - idx % chunk).max(node_first);
            let hi = chunk_end.min(node_first + per_node);
            let mut addrs = [NULL_ADDR; pointer_cache::CHUNK];
            for (k, i) in (lo..hi).enumerate() {
                let a = node_addr(n, (i - node_first) as usize);
                if a != NEW_ADDR && self.sb.in_main(a) {
                    addrs[k] = a;
                }
            }
            if !cache.fill(version, size, lo, &addrs[..(hi - lo) as usize], budget) {
                break;
            }
            idx = chunk_end.max(idx + 1);
        }
        Ok(())
    }

    /// Refuses a data address of block `idx` of `ino` outside the main area.
    fn check_data_addr(&self, ino: u32, idx: u64, a: u32) -> Result<()> {
        if a != NULL_ADDR && a != NEW_ADDR && !self.sb.in_main(a) {
            return Err(corrupt(format!(
                "block {idx} of inode {ino} at address {a:#x} outside the main area"
            )));
        }
        Ok(())
    }

    /// The direct node (or inode) and slot holding data block `idx` of `ino`, creating the
    /// nodes on the way.
    fn dnode_for(&mut self, ino: u32, idx: u64) -> Result<(u32, usize)> {
        let flexible = self.flexible();
        let dir = self.is_dir(ino)?;
        let api = self.inode(ino)?.addrs_per_inode(flexible);
        let p = node_path(idx, api).ok_or_else(|| {
            FsError::InvalidArgument(format!("block {idx} past the largest file"))
        })?;
        let NodePath::Tree {
            nid_slot,
            offsets,
            node_ofs,
            slot,
        } = p
        else {
            let NodePath::Inode(i) = p else {
                unreachable!()
            };
            return Ok((ino, i));
        };
        let mut nid = self.inode(ino)?.i_nid(nid_slot);
        // (parent nid, slot in parent; None = the inode's i_nid slot)
        let mut parent: (u32, Option<usize>) = (ino, None);
        for (level, &ofs) in node_ofs.iter().enumerate() {
            if nid == 0 {
                nid = self.nat.alloc(ino)?;
                self.new_node(nid, ino, ofs, !dir);
                let (pn, ps) = parent;
                let pnode = self.node(pn, Some(ino))?;
                match ps {
                    None => pnode.set_i_nid(nid_slot, nid),
                    Some(s) => pnode.set_slot(s, nid),
                }
                self.touch(pn);
                let inode = self.inode(ino)?;
                inode.set_blocks(inode.blocks() + 1);
                self.touch(ino);
            } else {
                let n = self.node(nid, Some(ino))?;
                if n.ofs() != ofs {
                    return Err(corrupt(format!(
                        "node {nid} of inode {ino} has offset {}, expected {ofs}",
                        n.ofs()
                    )));
                }
            }
            if level < offsets.len() {
                parent = (nid, Some(offsets[level]));
                nid = self.node(nid, Some(ino))?.slot(offsets[level]);
            }
        }
        Ok((nid, slot))
    }

    /// Writes whole blocks `first..` of `ino` out of place: new blocks from the log, the old
    /// ones invalidated, holes counted into `i_blocks`.
    pub fn write_blocks(&mut self, ino: u32, first: u64, data: &[u8]) -> Result<()> {
        let n = data.len() / BLOCK_SIZE;
        let log = self.data_log(ino)?;
        let mut fresh = 0u64;
        let mut run_start = 0usize;
        let mut run_addr = 0u32;
        for k in 0..n {
            let (dn, ofs) = self.dnode_for(ino, first + k as u64)?;
            let version = self.nat.get(dn)?.version;
            let old = node_addr(self.node(dn, Some(ino))?, ofs);
            if old == NULL_ADDR || old == NEW_ADDR {
                fresh += 1;
            }
            if self.segs.valid_blocks() + fresh > self.cp.user_block_count {
                return Err(FsError::NoSpace);
            }
            let blk = self.alloc_block(
                log,
                Summary {
                    nid: dn,
                    version,
                    ofs_in_node: ofs as u16,
                },
            )?;
            let node = self.node(dn, Some(ino))?;
            if node.is_inode() {
                node.set_i_addr(ofs, blk);
            } else {
                node.set_slot(ofs, blk);
            }
            self.touch(dn);
            self.invalidate(old)?;
            // Coalesce consecutive addresses into one write.
            if k > run_start && blk != run_addr + (k - run_start) as u32 {
                self.io.write(
                    u64::from(run_addr),
                    &data[run_start * BLOCK_SIZE..k * BLOCK_SIZE],
                )?;
                run_start = k;
            }
            if k == run_start {
                run_addr = blk;
            }
        }
        if n > run_start {
            self.io.write(
                u64::from(run_addr),
                &data[run_start * BLOCK_SIZE..n * BLOCK_SIZE],
            )?;
        }
        let inode = self.inode(ino)?;
        inode.set_blocks(inode.blocks() + fresh);
        // The cached largest extent (i_ext) would name moved blocks: F2FS drops it too.
        inode.clear_extent();
        self.touch(ino);
        Ok(())
    }

    /// Reads whole blocks `first..` of `ino` into `buf` (holes read as zeros).
    pub fn read_blocks(&mut self, ino: u32, first: u64, buf: &mut [u8]) -> Result<()> {
        let n = buf.len() / BLOCK_SIZE;
        let addrs = self.resolve(ino, first, n as u64)?;
        read_addrs(self.io.as_ref(), &addrs, buf)
    }

    /// Plans a read of file bytes at `off`: inline data is copied into `buf` at once, block
    /// data comes back as addresses for [`ReadPlan::run`], which needs no engine lock.
    pub fn plan_read(&mut self, ino: u32, off: u64, buf: &mut [u8]) -> Result<ReadPlan> {
        self.plan(ino, off, buf, false)
    }

    /// [`Engine::plan_read`] for the file read call: a directory is refused with `IsDir`
    /// (checked on the inode the plan looks up anyway).
    pub fn plan_file_read(&mut self, ino: u32, off: u64, buf: &mut [u8]) -> Result<ReadPlan> {
        self.plan(ino, off, buf, true)
    }

    fn plan(&mut self, ino: u32, off: u64, buf: &mut [u8], refuse_dir: bool) -> Result<ReadPlan> {
        let flexible = self.flexible();
        let inode = self.inode(ino)?;
        if refuse_dir && inode.mode() & S_IFMT == S_IFDIR {
            return Err(FsError::IsDir);
        }
        let size = inode.size();
        if off >= size || buf.is_empty() {
            return Ok(ReadPlan::Done(0));
        }
        let len = (buf.len() as u64).min(size - off) as usize;
        if inode.inline_flags() & F2FS_INLINE_DATA != 0 {
            let area = inode.inline_area(flexible);
            if size > area.len() as u64 {
                return Err(corrupt(format!("inline file {ino} of size {size}")));
            }
            buf[..len].copy_from_slice(&area[off as usize..off as usize + len]);
            return Ok(ReadPlan::Done(len));
        }
        let first = off / BLOCK_SIZE as u64;
        let last = (off + len as u64).div_ceil(BLOCK_SIZE as u64);
        let addrs = if last - first == 1 {
            Addrs::One([self.resolve_one(ino, first)?])
        } else {
            Addrs::Many(self.resolve(ino, first, last - first)?)
        };
        Ok(ReadPlan::Blocks {
            addrs,
            skip: (off % BLOCK_SIZE as u64) as usize,
            len,
        })
    }

    /// Moves inline data to block 0 so the file uses ordinary blocks.
    pub fn convert_inline_data(&mut self, ino: u32) -> Result<()> {
        let flexible = self.flexible();
        let inode = self.inode(ino)?;
        if inode.inline_flags() & F2FS_INLINE_DATA == 0 {
            return Ok(());
        }
        let size = (inode.size() as usize).min(inode.max_inline(flexible));
        let mut block = vec![0u8; BLOCK_SIZE];
        block[..size].copy_from_slice(&inode.inline_area(flexible)[..size]);
        inode.inline_area_mut(flexible).fill(0);
        inode.set_inline_flags(inode.inline_flags() & !(F2FS_INLINE_DATA | F2FS_DATA_EXIST));
        self.touch(ino);
        if size > 0 {
            self.write_blocks(ino, 0, &block)?;
        }
        Ok(())
    }

    /// Reads file bytes at `off` (short at end of file).
    pub fn read_data(&mut self, ino: u32, off: u64, buf: &mut [u8]) -> Result<usize> {
        let plan = self.plan_read(ino, off, buf)?;
        plan.run(self.io.as_ref(), buf)
    }

    /// Writes file bytes at `off`, growing the size; partial blocks are merged with their
    /// old contents.
    pub fn write_data(&mut self, ino: u32, off: u64, data: &[u8]) -> Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        let end = off
            .checked_add(data.len() as u64)
            .filter(|&e| e.div_ceil(BLOCK_SIZE as u64) <= MAX_FILE_BLOCKS)
            .ok_or_else(|| {
                FsError::InvalidArgument(format!("write at {off} past the largest file"))
            })?;
        let flexible = self.flexible();
        let inode = self.inode(ino)?;
        if inode.inline_flags() & F2FS_INLINE_DATA != 0 {
            if end <= inode.max_inline(flexible) as u64 {
                let area = inode.inline_area_mut(flexible);
                area[off as usize..end as usize].copy_from_slice(data);
                inode.set_inline_flags(inode.inline_flags() | F2FS_DATA_EXIST);
                if end > inode.size() {
                    inode.set_size(end);
                }
                self.touch(ino);
                return Ok(data.len());
            }
            self.convert_inline_data(ino)?;
        }
        let size = self.inode(ino)?.size();
        let first = off / BLOCK_SIZE as u64;
        let last = end.div_ceil(BLOCK_SIZE as u64);
        let nblk = (last - first) as usize;
        let mut buf = vec![0u8; nblk * BLOCK_SIZE];
        let skip = (off % BLOCK_SIZE as u64) as usize;
        // Old contents are needed only for the partial first and last blocks inside the file.
        if skip != 0 && first * (BLOCK_SIZE as u64) < size {
            self.read_blocks(ino, first, &mut buf[..BLOCK_SIZE])?;
        }
        if !end.is_multiple_of(BLOCK_SIZE as u64)
            && (last - 1) * (BLOCK_SIZE as u64) < size
            && (nblk > 1 || skip == 0)
        {
            self.read_blocks(ino, last - 1, &mut buf[(nblk - 1) * BLOCK_SIZE..])?;
        }
        buf[skip..skip + data.len()].copy_from_slice(data);
        self.write_blocks(ino, first, &buf)?;
        let inode = self.inode(ino)?;
        if end > inode.size() {
            inode.set_size(end);
        }
        self.touch(ino);
        Ok(data.len())
    }

    /// Frees a data block address of `ino` (`i_blocks` goes down).
    fn free_addr(&mut self, ino: u32, addr: u32) -> Result<()> {
        if addr == NULL_ADDR {
            return Ok(());
        }
        self.invalidate(addr)?;
        let inode = self.inode(ino)?;
        inode.set_blocks(inode.blocks().saturating_sub(1));
        inode.clear_extent();
        self.touch(ino);
        Ok(())
    }

    /// Frees a node of `ino`: its block, its NAT entry, one `i_blocks`.
    fn free_node(&mut self, ino: u32, nid: u32) -> Result<()> {
        let e = self.nat.get(nid)?;
        self.invalidate(e.block_addr)?;
        self.nat.free(nid);
        if nid != ino {
            let inode = self.inode(ino)?;
            inode.set_blocks(inode.blocks().saturating_sub(1));
        }
        self.dirty = true;
        Ok(())
    }

    /// Frees the data of node `nid` (depth 1 = direct, 2 = indirect, 3 = double indirect)
    /// covering file blocks from `base`, for blocks `>= from`; returns whether the node
    /// itself went away.
    fn free_tree(&mut self, ino: u32, nid: u32, depth: u32, base: u64, from: u64) -> Result<bool> {
        if nid == 0 {
            return Ok(false);
        }
        let span = (NIDS_PER_BLOCK as u64).pow(depth - 1);
        let mut changed = false;
        for s in 0..ADDRS_PER_BLOCK {
            let child_base = base + s as u64 * span;
            if child_base + span <= from {
                continue;
            }
            let v = self.node(nid, Some(ino))?.slot(s);
            if v == 0 {
                continue;
            }
            let gone = if depth == 1 {
                self.free_addr(ino, v)?;
                true
            } else {
                self.free_tree(ino, v, depth - 1, child_base, from)?
            };
            if gone {
                self.node(nid, Some(ino))?.set_slot(s, 0);
                changed = true;
            }
        }
        if base >= from {
            self.free_node(ino, nid)?;
            return Ok(true);
        }
        if changed {
            self.touch(nid);
        }
        Ok(false)
    }

    /// Frees every data block of `ino` at index `from` or beyond, and nodes left empty.
    pub fn truncate_blocks(&mut self, ino: u32, from: u64) -> Result<()> {
        let flexible = self.flexible();
        let api = self.inode(ino)?.addrs_per_inode(flexible);
        for i in (from as usize).min(api)..api {
            let a = self.inode(ino)?.i_addr(i);
            if a != NULL_ADDR {
                self.free_addr(ino, a)?;
                self.inode(ino)?.set_i_addr(i, NULL_ADDR);
            }
        }
        let d = ADDRS_PER_BLOCK as u64;
        let n = NIDS_PER_BLOCK as u64;
        let bases = [0, d, 2 * d, 2 * d + d * n, 2 * d + 2 * d * n];
        let depths = [1, 1, 2, 2, 3];
        for k in 0..5 {
            let nid = self.inode(ino)?.i_nid(k);
            let base = api as u64 + bases[k];
            let span = d * n.pow(depths[k] - 1);
            if nid == 0 || base + span <= from {
                continue;
            }
            if self.free_tree(ino, nid, depths[k], base, from)? {
                self.inode(ino)?.set_i_nid(k, 0);
            }
        }
        self.touch(ino);
        Ok(())
    }

    /// Sets the size of `ino`: blocks past it are freed and the tail of the last block
    /// zeroed.
    pub fn truncate(&mut self, ino: u32, size: u64) -> Result<()> {
        if size.div_ceil(BLOCK_SIZE as u64) > MAX_FILE_BLOCKS {
            return Err(FsError::InvalidArgument(format!(
                "size {size} past the largest file"
            )));
        }
        let flexible = self.flexible();
        let inode = self.inode(ino)?;
        let old = inode.size();
        if inode.inline_flags() & F2FS_INLINE_DATA != 0 {
            if size <= inode.max_inline(flexible) as u64 {
                if size < old {
                    inode.inline_area_mut(flexible)[size as usize..].fill(0);
                }
                inode.set_size(size);
                self.touch(ino);
                return Ok(());
            }
            self.convert_inline_data(ino)?;
        }
        if size < old {
            let from = size.div_ceil(BLOCK_SIZE as u64);
            self.truncate_blocks(ino, from)?;
            let tail = (size % BLOCK_SIZE as u64) as usize;
            if tail != 0 {
                let idx = size / BLOCK_SIZE as u64;
                if self.resolve(ino, idx, 1)?[0] != NULL_ADDR {
                    let mut b = vec![0u8; BLOCK_SIZE];
                    self.read_blocks(ino, idx, &mut b)?;
                    b[tail..].fill(0);
                    self.write_blocks(ino, idx, &b)?;
                }
            }
        }
        self.inode(ino)?.set_size(size);
        self.touch(ino);
        Ok(())
    }

    /// Frees data block `idx` of `ino`, leaving a hole.
    pub fn punch_block(&mut self, ino: u32, idx: u64) -> Result<()> {
        let a = self.resolve(ino, idx, 1)?[0];
        if a == NULL_ADDR {
            return Ok(());
        }
        let (dn, ofs) = self.dnode_for(ino, idx)?;
        let node = self.node(dn, Some(ino))?;
        if node.is_inode() {
            node.set_i_addr(ofs, NULL_ADDR);
        } else {
            node.set_slot(ofs, NULL_ADDR);
        }
        self.touch(dn);
        self.free_addr(ino, a)
    }

    /// Frees an inode and everything it owns.
    pub fn remove_inode(&mut self, ino: u32) -> Result<()> {
        // First, so that even a removal that fails half-way leaves no cached pointer valid.
        self.relocated();
        let n = self.inode(ino)?;
        let inline = n.inline_flags() & F2FS_INLINE_DATA != 0;
        // Device files keep their device number in i_addr: they own no blocks.
        let has_data = matches!(n.mode() & S_IFMT, S_IFREG | S_IFDIR | S_IFLNK);
        if !inline && has_data {
            self.truncate_blocks(ino, 0)?;
        }
        let x = self.inode(ino)?.xattr_nid();
        if x != 0 {
            self.free_node(ino, x)?;
        }
        self.free_node(ino, ino)?;
        self.orphans.remove(&ino);
        self.open.remove(&ino);
        Ok(())
    }
}
