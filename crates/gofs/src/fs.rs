//! The GoFS host engine (papers/gofs.md §3): a POSIX file system on F2FS's on-disk format,
//! reached only through NVMe queues.

mod budget;
mod checkpoint;
mod dcache;
mod dir;
mod engine;
mod file;
mod gc;
mod nat;
mod ops;
mod pointer_cache;
mod range_locks;
mod readahead;
mod segment;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use gpu_nvme::device::NvmeDevice;

use crate::error::{FsError, Result};
use crate::format::{BlockIo, NvmeBlocks};
use engine::Engine;

/// Inode number: the F2FS node id of the inode.
pub type Ino = u32;
/// The root directory's inode number, as mkfs.f2fs writes it.
pub const ROOT_INO: Ino = 3;

/// File types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    /// regular file
    Regular,
    /// directory
    Directory,
    /// symbolic link
    Symlink,
    /// character device
    CharDevice,
    /// block device
    BlockDevice,
    /// named pipe
    Fifo,
    /// unix socket
    Socket,
}

/// A timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timespec {
    /// seconds since the epoch
    pub sec: i64,
    /// nanoseconds
    pub nsec: u32,
}

/// Attributes of an inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// inode number
    pub ino: Ino,
    /// file type
    pub kind: FileType,
    /// permission bits incl. suid/sgid/sticky
    pub mode: u16,
    /// link count
    pub nlink: u32,
    /// owner
    pub uid: u32,
    /// group
    pub gid: u32,
    /// size in bytes
    pub size: u64,
    /// allocated 512-byte units, like st_blocks
    pub blocks: u64,
    /// device number of device files
    pub rdev: u32,
    /// access time
    pub atime: Timespec,
    /// modification time
    pub mtime: Timespec,
    /// change time
    pub ctime: Timespec,
}

/// Attributes to change; `None` leaves one as it is.
#[derive(Debug, Clone, Default)]
pub struct SetAttr {
    /// permission bits
    pub mode: Option<u16>,
    /// owner
    pub uid: Option<u32>,
    /// group
    pub gid: Option<u32>,
    /// new size (truncate or extend)
    pub size: Option<u64>,
    /// access time
    pub atime: Option<Timespec>,
    /// modification time
    pub mtime: Option<Timespec>,
    /// change time
    pub ctime: Option<Timespec>,
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// the name
    pub name: Vec<u8>,
    /// its inode
    pub ino: Ino,
    /// its type
    pub kind: FileType,
}

/// File-system statistics.
#[derive(Debug, Clone, Copy)]
pub struct StatFs {
    /// block size in bytes
    pub block_size: u32,
    /// blocks of the main area
    pub blocks: u64,
    /// free blocks
    pub blocks_free: u64,
    /// inodes (node ids)
    pub files: u64,
    /// free node ids
    pub files_free: u64,
    /// longest name
    pub name_max: u32,
}

/// Mount settings.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// refuse every change
    pub read_only: bool,
    /// periodic checkpoint; `None` = only on sync/unmount
    pub checkpoint_interval: Option<Duration>,
}

impl Default for MountOptions {
    fn default() -> Self {
        Self {
            read_only: false,
            checkpoint_interval: Some(Duration::from_secs(30)),
        }
    }
}

/// Who is asking (for new-inode ownership).
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    /// user id
    pub uid: u32,
    /// group id
    pub gid: u32,
}

/// SIT blocks a volume uses (mkfs zeroes them).
pub(crate) fn sit_block_count(sb: &crate::format::superblock::Superblock) -> u32 {
    engine::sit_blocks(sb)
}

/// Writes the root directory and the first checkpoint of a fresh volume (mkfs).
pub(crate) fn format_root(
    io: Arc<dyn BlockIo>,
    sb: crate::format::superblock::Superblock,
    cp: crate::format::checkpoint::Checkpoint,
) -> Result<()> {
    let mut e = Engine::fresh(io, sb, cp)?;
    e.make_root()?;
    // Both packs valid, as mkfs.f2fs leaves them (fsck complains about an invalid one).
    e.checkpoint(true)?;
    e.checkpoint(true)
}

/// State shared with the background checkpoint thread.
#[derive(Debug)]
struct Shared {
    engine: Mutex<Engine>,
    /// the engine's device and read gate, reachable without the engine lock (reads run their
    /// device commands outside it)
    io: Arc<dyn BlockIo>,
    read_gate: Arc<RwLock<()>>,
    /// the engine's relocation count (see `fs/pointer_cache.rs`)
    relocations: Arc<AtomicU64>,
    ranges: range_locks::InodeRanges,
    /// bytes of all cached data pointers
    pointer_budget: pointer_cache::Budget,
    /// bytes of all read-ahead windows
    ra_budget: readahead::Budget,
    dcache: dcache::Dcache,
    stop: Mutex<bool>,
    wake: Condvar,
}

/// A mounted GoFS file system. All methods take `&self` (internal locking). Dropping it
/// without [`Fs::unmount`] loses what changed since the last checkpoint, as a crash would.
#[derive(Debug)]
pub struct Fs {
    shared: Arc<Shared>,
    flusher: Option<JoinHandle<()>>,
}

impl Fs {
    /// Mounts the F2FS image on `dev`.
    pub fn mount(dev: Arc<NvmeDevice>, opts: MountOptions) -> Result<Fs> {
        Self::mount_io(Arc::new(NvmeBlocks::new(dev)?), opts)
    }

    /// Mounts the F2FS image on any block store (an in-memory image for tests and fuzzing).
    pub fn mount_io(io: Arc<dyn BlockIo>, opts: MountOptions) -> Result<Fs> {
        let mut e = Engine::load(io, opts.read_only)?;
        e.recover_orphans()?;
        let shared = Arc::new(Shared {
            io: Arc::clone(&e.io),
            read_gate: Arc::clone(&e.read_gate),
            relocations: Arc::clone(&e.relocations),
            engine: Mutex::new(e),
            ranges: range_locks::InodeRanges::default(),
            ra_budget: readahead::Budget::default(),
            pointer_budget: pointer_cache::Budget::default(),
            dcache: dcache::Dcache::default(),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let flusher = match opts.checkpoint_interval {
            Some(every) if !opts.read_only => {
                let s = Arc::clone(&shared);
                Some(
                    std::thread::Builder::new()
                        .name("gofs-checkpoint".into())
                        .spawn(move || periodic_checkpoint(&s, every))
                        .map_err(|e| FsError::InvalidArgument(format!("checkpoint thread: {e}")))?,
                )
            }
            _ => None,
        };
        Ok(Fs { shared, flusher })
    }

    fn lock(&self) -> MutexGuard<'_, Engine> {
        self.shared.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A read hold on the engine's read gate (take it while holding the engine lock).
    fn read_gate(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.shared
            .read_gate
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn stop_flusher(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(h) = self.flusher.take() {
            let _ = h.join();
        }
    }

    /// Final checkpoint (CP_UMOUNT) and Flush.
    pub fn unmount(mut self) -> Result<()> {
        self.stop_flusher();
        let mut e = self.lock();
        e.checkpoint(false)
    }

    /// Checkpoint and Flush.
    pub fn sync(&self) -> Result<()> {
        self.lock().checkpoint(false)
    }

    /// Cleans one segment now, as F2FS's `F2FS_IOC_GARBAGE_COLLECT` does: the valid blocks of
    /// the segment with the fewest move to the cold log and a checkpoint frees it. False when
    /// no segment has both valid and invalid blocks.
    pub fn collect_garbage(&self) -> Result<bool> {
        gc::collect_one(&mut self.lock())
    }

    /// File-system statistics.
    pub fn statfs(&self) -> Result<StatFs> {
        self.lock().statfs()
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: Ino) -> Result<Stat> {
        self.lock().stat(ino)
    }

    /// Changes attributes; `size` truncates or extends (holding the range lock from the new
    /// size to the end).
    pub fn setattr(&self, ino: Ino, attr: &SetAttr) -> Result<Stat> {
        let Some(size) = attr.size else {
            return self.lock().setattr(ino, attr);
        };
        let node = self.shared.ranges.of(ino)?;
        let (o, n) = range_locks::clamp(size.min(self.lock().stat(ino)?.size), u64::MAX);
        let _range = node
            .range
            .acquire(o, n)
            .map_err(|e| FsError::InvalidArgument(e.to_string()))?;
        let r = self.lock().setattr(ino, attr);
        node.bump();
        r
    }

    /// Looks `name` up in `parent` (dentry cache first).
    pub fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Stat> {
        let mut e = self.lock();
        let dc = &self.shared.dcache;
        if let Some(ino) = dc.get(parent, name)
            && let Ok(st) = e.stat(ino)
        {
            return Ok(st);
        }
        let st = e.lookup(parent, name)?;
        if name != b"." && name != b".." {
            dc.insert(parent, name, st.ino);
        }
        Ok(st)
    }

    /// Resolves an absolute path ("/a/b/c") from the root: the full-path table first, then
    /// component by component through the dentry cache.
    pub fn lookup_path(&self, path: &[u8]) -> Result<Stat> {
        if let Some(ino) = self.shared.dcache.get_path(path)
            && let Ok(st) = self.lock().stat(ino)
        {
            return Ok(st);
        }
        let mut st = self.getattr(ROOT_INO)?;
        for comp in path.split(|&c| c == b'/').filter(|c| !c.is_empty()) {
            if st.kind != FileType::Directory {
                return Err(FsError::NotDir);
            }
            st = self.lookup(st.ino, comp)?;
        }
        // Inserted under the engine lock, as every removal is, so no stale path survives.
        let _e = self.lock();
        self.shared.dcache.insert_path(path, st.ino);
        Ok(st)
    }

    /// Entries of `dir` without "." and "..".
    pub fn readdir(&self, dir: Ino) -> Result<Vec<DirEntry>> {
        self.lock().readdir(dir)
    }

    /// Creates a regular file, fifo, socket or device file.
    pub fn create(
        &self,
        parent: Ino,
        name: &[u8],
        kind: FileType,
        mode: u16,
        rdev: u32,
        who: Caller,
    ) -> Result<Stat> {
        if matches!(kind, FileType::Directory | FileType::Symlink) {
            return Err(FsError::InvalidArgument(format!("create of a {kind:?}")));
        }
        self.make(parent, name, kind, mode, rdev, who, &[])
    }

    #[allow(clippy::too_many_arguments)]
    fn make(
        &self,
        parent: Ino,
        name: &[u8],
        kind: FileType,
        mode: u16,
        rdev: u32,
        who: Caller,
        data: &[u8],
    ) -> Result<Stat> {
        let mut e = self.lock();
        let st = e.make(parent, name, kind, mode, rdev, who, data)?;
        self.shared.dcache.insert(parent, name, st.ino);
        drop(e);
        // The number may have belonged to a freed inode: its read-ahead window is stale.
        if let Some(node) = self.shared.ranges.get(st.ino) {
            node.bump();
        }
        Ok(st)
    }

    /// Creates a directory.
    pub fn mkdir(&self, parent: Ino, name: &[u8], mode: u16, who: Caller) -> Result<Stat> {
        self.make(parent, name, FileType::Directory, mode, 0, who, &[])
    }

    /// Creates a symbolic link to `target`.
    pub fn symlink(&self, parent: Ino, name: &[u8], target: &[u8], who: Caller) -> Result<Stat> {
        if target.is_empty() || target.len() >= crate::format::BLOCK_SIZE {
            return Err(FsError::NameTooLong);
        }
        self.make(parent, name, FileType::Symlink, 0o777, 0, who, target)
    }

    /// Target of a symbolic link.
    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        self.lock().readlink(ino)
    }

    /// Adds a hard link to `ino`.
    pub fn link(&self, ino: Ino, new_parent: Ino, new_name: &[u8]) -> Result<Stat> {
        let mut e = self.lock();
        let st = e.link(ino, new_parent, new_name)?;
        self.shared.dcache.insert(new_parent, new_name, ino);
        Ok(st)
    }

    /// Removes a non-directory name.
    pub fn unlink(&self, parent: Ino, name: &[u8]) -> Result<()> {
        let mut e = self.lock();
        self.shared.dcache.remove(parent, name);
        e.remove(parent, name, false)
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, parent: Ino, name: &[u8]) -> Result<()> {
        let mut e = self.lock();
        self.shared.dcache.remove(parent, name);
        e.remove(parent, name, true)
    }

    /// Renames, replacing a compatible target.
    pub fn rename(&self, parent: Ino, name: &[u8], new_parent: Ino, new_name: &[u8]) -> Result<()> {
        let mut e = self.lock();
        self.shared.dcache.remove(parent, name);
        self.shared.dcache.remove(new_parent, new_name);
        e.rename(parent, name, new_parent, new_name)
    }

    /// Reads from `offset`; short at end of file. Holds the inode's range lock; the block
    /// addresses are resolved under the engine lock and the data read without it. A read that
    /// continues the previous one on the inode reads a whole read-ahead window, and the reads
    /// after it are copied from the window (see `fs/readahead.rs`).
    pub fn read(&self, ino: Ino, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.shared
            .ranges
            .with(ino, |node| self.read_inode(ino, node, offset, buf))?
    }

    /// [`read`](Self::read) of `ino`, whose shared state is `node`.
    fn read_inode(
        &self,
        ino: Ino,
        node: &range_locks::InodeShared,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize> {
        let (o, n) = range_locks::clamp(offset, buf.len() as u64);
        let _range = node
            .range
            .acquire(o, n)
            .map_err(|e| FsError::InvalidArgument(e.to_string()))?;
        let fill = {
            let mut ra = node.ra();
            if let Some(n) = ra.serve(node.data_gen(), offset, buf) {
                return Ok(n);
            }
            ra.miss(offset, buf.len(), &self.shared.ra_budget)
        };
        let Some(mut fill) = fill else {
            if let Some(n) = self.read_cached(node, offset, buf)? {
                return Ok(n);
            }
            return self.read_planned(ino, node, offset, buf).map(|r| r.0);
        };
        let start = fill.start;
        let got = self.read_planned(ino, node, start, &mut fill.data);
        let mut ra = node.ra();
        match got {
            Ok((got, stamp, true)) => {
                ra.fill(fill, Some((stamp, got)), &self.shared.ra_budget);
                // Our range lock has kept every overlapping change out since the stamp was
                // taken, so the window holds our bytes as they are now.
                if let Some(n) = ra.serve(stamp, offset, buf) {
                    return Ok(n);
                }
            }
            Ok(_) => ra.fill(fill, None, &self.shared.ra_budget),
            Err(e) => {
                ra.fill(fill, None, &self.shared.ra_budget);
                return Err(e);
            }
        }
        drop(ra);
        self.read_planned(ino, node, offset, buf).map(|r| r.0)
    }

    /// Reads `buf.len()` bytes at `offset` through the inode's cached data pointers, without
    /// the engine lock; `None` when the size or an address is not cached at the current
    /// version. The caller holds the range lock.
    fn read_cached(
        &self,
        node: &range_locks::InodeShared,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<Option<usize>> {
        // Before the version is read: see `fs/pointer_cache.rs` for why this order is safe.
        let _gate = self.read_gate();
        let version = pointer_cache::version(
            node.data_gen(),
            self.shared.relocations.load(Ordering::Acquire),
        );
        let cache = &node.pointers;
        let Some(size) = cache.size(version) else {
            return Ok(None);
        };
        if offset >= size || buf.is_empty() {
            return Ok(Some(0));
        }
        let len = (buf.len() as u64).min(size - offset) as usize;
        let bs = crate::format::BLOCK_SIZE as u64;
        let first = offset / bs;
        let last = (offset + len as u64).div_ceil(bs);
        let addrs = if last - first == 1 {
            let Some(a) = cache.get(first, version) else {
                return Ok(None);
            };
            file::Addrs::One([a])
        } else {
            let Some(v) = (first..last)
                .map(|i| cache.get(i, version))
                .collect::<Option<Vec<u32>>>()
            else {
                return Ok(None);
            };
            file::Addrs::Many(v)
        };
        let plan = file::ReadPlan::Blocks {
            addrs,
            skip: (offset % bs) as usize,
            len,
        };
        plan.run(self.shared.io.as_ref(), buf).map(Some)
    }

    /// Reads `buf.len()` bytes at `offset` of `ino` through the device: addresses resolved
    /// (and cached in the inode's data pointers) under the engine lock, data read without it.
    /// Returns the bytes read, the data generation at planning time, and whether block data
    /// was read (not inline data or nothing past the end of the file).
    fn read_planned(
        &self,
        ino: Ino,
        node: &range_locks::InodeShared,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(usize, readahead::Stamp, bool)> {
        let (plan, stamp, _gate) = {
            let mut e = self.lock();
            let plan = e.plan_file_read(ino, offset, buf)?;
            let stamp = node.data_gen();
            let len = match plan {
                file::ReadPlan::Done(n) => return Ok((n, stamp, false)),
                file::ReadPlan::Blocks { len, .. } => len,
            };
            let bs = crate::format::BLOCK_SIZE as u64;
            let version =
                pointer_cache::version(stamp, self.shared.relocations.load(Ordering::Acquire));
            e.cache_pointers(
                ino,
                (offset / bs, (offset + len as u64).div_ceil(bs)),
                &node.pointers,
                version,
                &self.shared.pointer_budget,
            )?;
            // Taken while the engine lock is held: segments are freed only by a checkpoint,
            // which holds the engine lock while it waits for the gate, so this never blocks,
            // and no segment holding these addresses is reused until the gate is dropped.
            (plan, stamp, self.read_gate())
        };
        Ok((plan.run(self.shared.io.as_ref(), buf)?, stamp, true))
    }

    /// Reads many files at once (the engine side of the batched API, papers/gofs.md §3.7):
    /// the block addresses of every request are resolved under one engine lock, then all
    /// whole-block reads go to the device as one batch kept in flight together. Requests that
    /// name the same file more than once are read one by one instead.
    pub fn read_many(&self, reqs: &mut [(Ino, u64, &mut [u8])]) -> Result<Vec<usize>> {
        let mut inos: Vec<Ino> = reqs.iter().map(|r| r.0).collect();
        inos.sort_unstable();
        inos.dedup();
        if inos.len() != reqs.len() {
            return reqs
                .iter_mut()
                .map(|(ino, off, buf)| self.read(*ino, *off, buf))
                .collect();
        }
        let locks = reqs
            .iter()
            .map(|r| self.shared.ranges.of(r.0))
            .collect::<Result<Vec<_>>>()?;
        let _ranges = locks
            .iter()
            .zip(reqs.iter())
            .map(|(node, (_, off, buf))| {
                let (o, n) = range_locks::clamp(*off, buf.len() as u64);
                node.range
                    .acquire(o, n)
                    .map_err(|e| FsError::InvalidArgument(e.to_string()))
            })
            .collect::<Result<Vec<_>>>()?;
        // As in `read`: the gate guard keeps the planned addresses from reuse.
        let (plans, _gate) = {
            let mut e = self.lock();
            let mut plans = Vec::with_capacity(reqs.len());
            for (ino, off, buf) in reqs.iter_mut() {
                plans.push(e.plan_file_read(*ino, *off, buf)?);
            }
            (plans, self.read_gate())
        };
        let mut bufs: Vec<&mut [u8]> = reqs.iter_mut().map(|r| &mut *r.2).collect();
        file::run_many(plans, self.shared.io.as_ref(), &mut bufs)
    }

    /// Writes `data` at `offset`, holding the inode's range lock.
    pub fn write(&self, ino: Ino, offset: u64, data: &[u8]) -> Result<usize> {
        let node = self.shared.ranges.of(ino)?;
        let (o, n) = range_locks::clamp(offset, data.len() as u64);
        let _range = node
            .range
            .acquire(o, n)
            .map_err(|e| FsError::InvalidArgument(e.to_string()))?;
        let r = self.lock().write(ino, offset, data);
        // Also after a failed write: part of it may have landed.
        node.bump();
        r
    }

    /// Makes this file durable (a checkpoint).
    pub fn fsync(&self, ino: Ino) -> Result<()> {
        let mut e = self.lock();
        e.inode(ino)?;
        e.checkpoint(false)
    }

    /// Marks `ino` open (unlinked open files stay until released).
    pub fn open_inode(&self, ino: Ino) -> Result<()> {
        let mut e = self.lock();
        e.inode(ino)?;
        *e.open.entry(ino).or_insert(0) += 1;
        Ok(())
    }

    /// Drops one open reference of `ino`; an unlinked inode goes away with its last one, and
    /// the inode's read-ahead window and cached data pointers with its last one in any case.
    pub fn release_inode(&self, ino: Ino) -> Result<()> {
        let mut e = self.lock();
        e.release(ino)?;
        if !e.open.contains_key(&ino) {
            drop(e);
            if let Some(node) = self.shared.ranges.get(ino) {
                node.ra().drop_window(&self.shared.ra_budget);
                // The whole range: no reader is inside the cache, and no filler (fills run
                // under a reader's range lock).
                let (o, n) = range_locks::clamp(0, u64::MAX);
                let _all = node
                    .range
                    .acquire(o, n)
                    .map_err(|e| FsError::InvalidArgument(e.to_string()))?;
                node.pointers.clear(&self.shared.pointer_budget);
            }
        }
        Ok(())
    }
}

/// What [`Fs::walk`] visited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalkStats {
    /// directories read
    pub dirs: u64,
    /// files and symlinks read
    pub files: u64,
    /// bytes read
    pub bytes: u64,
    /// entries that failed (corrupt inodes or data: EIO for that entry only)
    pub errors: u64,
}

impl Fs {
    /// Reads every directory, file and symlink reachable from the root, visiting at most
    /// `limit` entries: an online consistency check, and the fuzzer's driver. Errors of single
    /// entries are counted, not returned.
    pub fn walk(&self, limit: u64) -> WalkStats {
        let mut st = WalkStats::default();
        let mut stack = vec![ROOT_INO];
        let mut seen = std::collections::HashSet::new();
        let mut buf = vec![0u8; 1 << 16];
        while let Some(dir) = stack.pop() {
            if !seen.insert(dir) {
                continue;
            }
            st.dirs += 1;
            let Ok(entries) = self.readdir(dir) else {
                st.errors += 1;
                continue;
            };
            for e in entries {
                if st.dirs + st.files >= limit {
                    return st;
                }
                match self.lookup(dir, &e.name) {
                    Ok(s) if s.kind == FileType::Directory => stack.push(s.ino),
                    Ok(s) if s.kind == FileType::Symlink => {
                        st.files += 1;
                        match self.readlink(s.ino) {
                            Ok(t) => st.bytes += t.len() as u64,
                            Err(_) => st.errors += 1,
                        }
                    }
                    Ok(s) => {
                        st.files += 1;
                        let mut off = 0;
                        while off < s.size.min(64 << 20) {
                            match self.read(s.ino, off, &mut buf) {
                                Ok(0) => break,
                                Ok(n) => {
                                    st.bytes += n as u64;
                                    off += n as u64;
                                }
                                Err(_) => {
                                    st.errors += 1;
                                    break;
                                }
                            }
                        }
                    }
                    Err(_) => st.errors += 1,
                }
            }
        }
        st
    }

    /// The block data block `idx` of `ino` lives at now (NULL_ADDR for a hole): for tools and
    /// tests that inspect images.
    pub fn data_address(&self, ino: Ino, idx: u64) -> Result<u32> {
        Ok(self.lock().resolve(ino, idx, 1)?[0])
    }

    /// The block a node (inode, direct or indirect node) lives at now, from the NAT: for
    /// tools and tests that inspect or damage images.
    pub fn node_address(&self, nid: Ino) -> Result<u32> {
        let e = self.lock();
        e.nat.get(nid).map(|x| x.block_addr)
    }
}

impl Drop for Fs {
    fn drop(&mut self) {
        self.stop_flusher();
    }
}

fn periodic_checkpoint(s: &Shared, every: Duration) {
    let mut stop = s.stop.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        // `_while` checks the flag before it sleeps: a stop set before this thread first
        // waits must not be slept through.
        let (guard, _) = s
            .wake
            .wait_timeout_while(stop, every, |stop| !*stop)
            .unwrap_or_else(|e| e.into_inner());
        stop = guard;
        if *stop {
            return;
        }
        let mut e = s.engine.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(err) = e.checkpoint(false) {
            tracing::warn!("periodic checkpoint failed: {err}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::MemBlocks;

    #[test]
    fn the_last_close_frees_the_files_cached_pointers() {
        let mem = Arc::new(MemBlocks::new(vec![0u8; 64 << 20]));
        crate::mkfs::mkfs_io(mem.clone(), &crate::mkfs::MkfsOptions::default()).unwrap();
        let fs = Fs::mount_io(mem, MountOptions::default()).unwrap();
        let who = Caller { uid: 0, gid: 0 };
        let f = fs
            .create(ROOT_INO, b"f", FileType::Regular, 0o644, 0, who)
            .unwrap()
            .ino;
        fs.write(f, 0, &vec![7u8; 64 << 12]).unwrap();
        let held = || fs.shared.pointer_budget.held();
        fs.open_inode(f).unwrap();
        fs.open_inode(f).unwrap();
        let mut buf = vec![0u8; 4096];
        fs.read(f, 5 << 12, &mut buf).unwrap();
        assert!(held() > 0, "the read cached its pointers");
        fs.release_inode(f).unwrap();
        assert!(held() > 0, "still open once");
        fs.release_inode(f).unwrap();
        assert_eq!(held(), 0, "the last close freed them");
        assert_eq!(fs.read(f, 9 << 12, &mut buf).unwrap(), 4096);
        assert!(buf.iter().all(|&b| b == 7));
    }
}
