//! One worker's resource slice (PeakFS §III-B, §III-C): its PStore and the request handlers
//! that run to completion on it. Multi-slice operations (mkdir in a regular directory, rmdir
//! of a bigdir, rename across slices, hard links to an inode elsewhere) are driven by the
//! client as sequences of single-slice requests, documented in [`crate::protocol`].
//!
//! Each request that changes entries is one PStore transaction with the link counts it
//! changes here: its target's, and the parent directory's when a directory entry changes and
//! the parent's inode is here.

use crate::placement::{DataDist, Hint};
use crate::protocol::{
    Attr, DirEntry, Errno, Fate, LinkFlags, MAX_IO, Removed, RenameFlags, Reply, Request, SetAttr,
    StatFs, is_dir_mode,
};
use crate::pstore::inode::{
    DataDistribution, Hint as StoreHint, Inode, WrittenBy, mode_after_set_id_drop,
};
use crate::pstore::table::U64Set;
use crate::pstore::zone::ZoneTransfers;
use crate::pstore::{self, NewInode, PStore, PStoreError, Relink};

/// Most entries one READDIR reply carries.
const READDIR_MAX: usize = 1024;

/// A failed request: the errno and a message for the error reply.
pub type Failure = (Errno, String);

/// One worker's slice.
#[derive(Debug)]
pub struct Slice {
    store: PStore,
    /// Directories being removed (rmdir of a bigdir): no new entries here.
    sealed: U64Set,
    /// Inos whose local inode was seen to be a directory. A type never changes and an ino is
    /// never handed out twice, so a parent checked once needs no inode read per create.
    known_dirs: U64Set,
}

/// Most entries of [`Slice::known_dirs`] (it starts over when full).
const KNOWN_DIRS_MAX: usize = 1 << 16;

fn fail(e: PStoreError) -> Failure {
    if let PStoreError::NoSpace(what @ ("inode slots" | "dentries")) = e {
        // The client sees ENOSPC with data pages to spare: say what is full, and what to do.
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            tracing::warn!(
                full = what,
                "a zone is out of inode slots: more files need a data volume formatted with a \
                 smaller --bytes-per-inode, or a bigger one"
            );
        });
        let msg = format!("{e} (the zone's inode slots are set at format by --bytes-per-inode)");
        return (Errno::ENOSPC, msg);
    }
    let errno = match &e {
        PStoreError::NoInode(_) | PStoreError::NoEntry { .. } => Errno::ENOENT,
        PStoreError::Exists(_) => Errno::EEXIST,
        PStoreError::NoSpace(_) => Errno::ENOSPC,
        PStoreError::Name(_) | PStoreError::Invalid(_) => Errno::EINVAL,
        PStoreError::Zone(_)
        | PStoreError::Bitmap(_)
        | PStoreError::Inode { .. }
        | PStoreError::Corrupt(_)
        | PStoreError::DataNotWritten
        | PStoreError::LaidOutOtherwise { .. }
        | PStoreError::Halted => Errno::EIO,
    };
    (errno, e.to_string())
}

fn err(errno: Errno, msg: impl Into<String>) -> Failure {
    (errno, msg.into())
}

/// The wire hint of a stored hint.
pub fn hint_to_wire(h: StoreHint) -> Hint {
    let data = match h.data {
        DataDistribution::Block => DataDist::Block,
        DataDistribution::File => DataDist::File,
        DataDistribution::Io => DataDist::Io,
    };
    Hint {
        data,
        bigdir: h.bigdir,
    }
}

/// The stored hint of a wire hint.
pub fn hint_to_store(h: Hint) -> StoreHint {
    StoreHint {
        data: dist_to_store(h.data),
        bigdir: h.bigdir,
    }
}

fn dist_to_store(d: DataDist) -> DataDistribution {
    match d {
        DataDist::Block => DataDistribution::Block,
        DataDist::File => DataDistribution::File,
        DataDist::Io => DataDistribution::Io,
    }
}

fn attr(i: &Inode) -> Attr {
    Attr {
        ino: i.ino,
        mode: i.mode,
        uid: i.uid,
        gid: i.gid,
        nlink: i.nlink,
        size: i.size,
        atime_ns: i.atime_ns,
        mtime_ns: i.mtime_ns,
        ctime_ns: i.ctime_ns,
        hint: hint_to_wire(i.hint),
        rdev: i.rdev,
        io_unit: i.io_unit,
    }
}

/// The inode an entry names, as far as this slice knows it.
#[derive(Debug, Clone, Copy)]
struct Target {
    ino: u64,
    /// Its inode, when it is here.
    local: Option<Inode>,
    /// It is a directory (from its inode, else from the request).
    dir: bool,
}

impl Target {
    /// The link change of removing an entry of this target: one link of a file, every link
    /// of a directory (an empty directory goes with its entry); none for an inode elsewhere.
    fn drop_link(&self) -> Option<(u64, i32)> {
        let i = self.local?;
        // At least one: a directory left with a bad count of 0 still goes.
        let all = i32::try_from(i.nlink.max(1)).unwrap_or(i32::MAX);
        Some((self.ino, if self.dir { -all } else { -1 }))
    }
}

impl Slice {
    /// A slice over an opened PStore.
    pub fn new(store: PStore) -> Self {
        Self {
            store,
            sealed: U64Set::default(),
            known_dirs: U64Set::default(),
        }
    }

    /// The PStore (checkpoint at shutdown, statistics).
    pub fn store(&mut self) -> &mut PStore {
        &mut self.store
    }

    /// Bytes of a file block.
    pub fn block_bytes(&self) -> u64 {
        self.store.block_bytes()
    }

    /// The local inode of `ino`, if it is on this slice.
    fn local(&mut self, ino: u64) -> Result<Option<Inode>, Failure> {
        if self.store.inode_offset(ino).is_none() {
            return Ok(None);
        }
        self.store.getattr(ino).map(Some).map_err(fail)
    }

    fn check_open_dir(&mut self, pino: u64) -> Result<(), Failure> {
        if self.sealed.contains(&pino) {
            return Err(err(
                Errno::ENOENT,
                format!("directory {pino} is being removed"),
            ));
        }
        if self.known_dirs.contains(&pino) {
            return Ok(());
        }
        // When the parent's inode is here (regular directories always), it must be a directory.
        match self.local(pino)? {
            Some(p) if !is_dir_mode(p.mode) => Err(err(Errno::ENOTDIR, format!("{pino}"))),
            Some(_) => {
                if self.known_dirs.len() >= KNOWN_DIRS_MAX {
                    self.known_dirs.clear();
                }
                self.known_dirs.insert(pino);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// The target `ino` of an entry being removed, checked: a directory for rmdir (`dir`),
    /// else not one; an rmdir'ed directory must be empty here unless its inode is kept.
    fn removable(&mut self, ino: u64, dir: bool, keep_inode: bool) -> Result<Target, Failure> {
        let local = self.local(ino)?;
        if let Some(i) = &local {
            match (dir, is_dir_mode(i.mode)) {
                (true, false) => return Err(err(Errno::ENOTDIR, format!("ino {ino}"))),
                (false, true) => return Err(err(Errno::EISDIR, format!("ino {ino}"))),
                (true, true) if !keep_inode && self.store.has_dentries(ino) => {
                    return Err(err(Errno::ENOTEMPTY, format!("directory {ino}")));
                }
                _ => {}
            }
        }
        Ok(Target { ino, local, dir })
    }

    /// Adds the change of parent `pino`'s link count (its sub-directories' `..`) by `delta`
    /// when an entry of a directory changes and the parent's inode is here; the client
    /// adjusts a parent elsewhere.
    fn parent_link(&mut self, pino: u64, dir: bool, delta: i32, links: &mut Vec<(u64, i32)>) {
        if dir && self.store.inode_offset(pino).is_some() {
            links.push((pino, delta));
        }
    }

    /// Applies `change` and settles the removed target, if any: an inode here left without
    /// links is freed (in the same transaction), unless it is a file the client may hold open
    /// (`orphan`).
    fn apply(
        &mut self,
        change: &Relink<'_>,
        removed: Option<(Target, bool)>,
        orphan: bool,
    ) -> Result<Option<Removed>, Failure> {
        // A file the client may hold open stays, as an orphan, until its last close.
        let free = removed
            .as_ref()
            .filter(|(t, kept)| !kept && t.local.is_some() && (t.dir || !orphan))
            .map(|(t, _)| t.ino);
        let change = Relink { free, ..*change };
        let orphaned = self.store.relink(&change).map_err(fail)?;
        let Some((t, kept)) = removed else {
            return Ok(None);
        };
        let Some(i) = t.local else {
            return Ok(Some(Removed {
                ino: t.ino,
                mode: 0,
                size: 0,
                fate: if kept { Fate::Linked } else { Fate::Elsewhere },
                hint: Hint::default(),
            }));
        };
        let fate = match orphaned.iter().find(|u| u.ino == t.ino) {
            None => Fate::Linked,
            Some(_) if orphan && !t.dir => Fate::Orphan,
            Some(u) => {
                // Freed by the relink, unless its blocks took more than one transaction.
                if !u.freed {
                    self.store.remove_inode(t.ino).map_err(fail)?;
                }
                Fate::Freed
            }
        };
        Ok(Some(Removed {
            ino: t.ino,
            mode: i.mode,
            size: i.size,
            fate,
            hint: hint_to_wire(i.hint),
        }))
    }

    /// LINK: entry `(pino, name)` naming `ino`.
    fn link(
        &mut self,
        pino: u64,
        name: &[u8],
        ino: u64,
        mode: u32,
        flags: LinkFlags,
    ) -> Result<Option<Removed>, Failure> {
        self.check_open_dir(pino)?;
        let local = self.local(ino)?;
        let dir = local.map_or(is_dir_mode(mode), |i| is_dir_mode(i.mode));
        let mut links = Vec::new();
        if flags.new_link {
            match local {
                None => {
                    return Err(err(
                        Errno::EXDEV,
                        format!("inode {ino} of a new link is not here"),
                    ));
                }
                Some(_) if dir => {
                    return Err(err(Errno(libc::EPERM), format!("{ino} is a directory")));
                }
                Some(i) if i.nlink == 0 => {
                    return Err(err(Errno::ENOENT, format!("inode {ino} has no links")));
                }
                Some(_) => links.push((ino, 1)),
            }
        }
        let replaced = match self.store.lookup(pino, name) {
            Some(_) if !flags.replace || flags.new_link => {
                return Err(err(Errno::EEXIST, String::from_utf8_lossy(name)));
            }
            // A rename onto another name of the same inode: nothing to do.
            Some(old) if old == ino => return Ok(None),
            Some(old) => {
                let t = self.removable(old, dir, false)?;
                links.extend(t.drop_link());
                self.parent_link(pino, t.dir, -1, &mut links);
                Some((t, false))
            }
            None => None,
        };
        self.parent_link(pino, dir, 1, &mut links);
        let change = Relink {
            remove: None,
            insert: Some((pino, name, ino)),
            links: &links,
            free: None,
        };
        self.apply(&change, replaced, flags.orphan)
    }

    /// RENAME of `(src_pino, src_name)` to `(dst_pino, dst_name)`, both on this slice.
    fn rename(
        &mut self,
        src: (u64, &[u8]),
        dst: (u64, &[u8]),
        flags: RenameFlags,
    ) -> Result<Option<Removed>, Failure> {
        let ((src_pino, src_name), (dst_pino, dst_name)) = (src, dst);
        let ino = self.store.lookup(src_pino, src_name).ok_or_else(|| {
            err(
                Errno::ENOENT,
                String::from_utf8_lossy(src_name).into_owned(),
            )
        })?;
        self.check_open_dir(dst_pino)?;
        let dir = self.local(ino)?.map_or(flags.dir, |i| is_dir_mode(i.mode));
        let mut links = Vec::new();
        let replaced = match self.store.lookup(dst_pino, dst_name) {
            // The same inode (or the same entry): nothing to do.
            Some(old) if old == ino => return Ok(None),
            Some(old) => {
                let t = self.removable(old, dir, false)?;
                links.extend(t.drop_link());
                self.parent_link(dst_pino, t.dir, -1, &mut links);
                Some((t, false))
            }
            None => None,
        };
        self.parent_link(src_pino, dir, -1, &mut links);
        self.parent_link(dst_pino, dir, 1, &mut links);
        let change = Relink {
            remove: Some((src_pino, src_name)),
            insert: Some((dst_pino, dst_name, ino)),
            links: &links,
            free: None,
        };
        self.apply(&change, replaced, flags.orphan)
    }

    /// RMINODE at the inode's home.
    fn rm_inode(&mut self, ino: u64, orphan: bool) -> Result<Removed, Failure> {
        let i = self.store.getattr(ino).map_err(fail)?;
        let dir = is_dir_mode(i.mode);
        if dir && self.store.has_dentries(ino) {
            return Err(err(Errno::ENOTEMPTY, format!("directory {ino}")));
        }
        let t = Target {
            ino,
            local: Some(i),
            dir,
        };
        if self.store.is_orphan(ino) {
            // The last close of an unlinked open file.
            self.store.remove_inode(ino).map_err(fail)?;
            return Ok(Removed {
                ino,
                mode: i.mode,
                size: i.size,
                fate: Fate::Freed,
                hint: hint_to_wire(i.hint),
            });
        }
        let links: Vec<_> = t.drop_link().into_iter().collect();
        let change = Relink {
            links: &links,
            ..Relink::default()
        };
        let removed = self.apply(&change, Some((t, false)), orphan)?;
        removed.ok_or_else(|| err(Errno::EIO, "rminode removed nothing"))
    }

    /// Answers READ `(ino, offset, len, extent)` in `out`, which holds nothing else: its bytes
    /// are the reply payload afterwards. The bytes `out` already holds (the last reply built in
    /// it) are written over, not zeroed first: the store writes every byte it returns (holes
    /// as zeros), and what lies past them is cut off. Zeroing a 256 KiB reply first took 9 %
    /// of a worker's time in IOR's N-N read (bench/results/2026-11-29-peakfs-profile).
    pub fn read_reply(
        &mut self,
        ino: u64,
        offset: u64,
        len: u32,
        extent: Option<u64>,
        out: &mut Vec<u8>,
    ) -> Result<(), Failure> {
        if self.store.is_halted() {
            return Err(fail(PStoreError::Halted));
        }
        let len = len.min(MAX_IO) as usize;
        if out.len() < len {
            out.resize(len, 0);
        }
        let n = self.read_to(ino, offset, extent, &mut out[..len])?;
        out.truncate(n);
        Ok(())
    }

    /// Reads into `buf` (file blocks, or the extent that starts at `extent`); returns the
    /// bytes read, every one of them written.
    fn read_to(
        &mut self,
        ino: u64,
        offset: u64,
        extent: Option<u64>,
        buf: &mut [u8],
    ) -> Result<usize, Failure> {
        match extent {
            Some(origin) => self.store.read_extent(ino, origin, offset, buf),
            None => self.store.read(ino, offset, buf),
        }
        .map_err(fail)
    }

    /// Runs `req` on this slice and appends the reply payload to `out`. What a close or an
    /// fsync acknowledges reaches the device (not flushed) before the reply
    /// ([`Request::is_written_through`]): a server killed after it answered loses none of it
    /// ([`PStore::write_through`]).
    pub fn execute(&mut self, req: Request<'_>, out: &mut Vec<u8>) -> Result<(), Failure> {
        let through = req.is_written_through();
        self.run(req, out)?;
        if through {
            self.store.write_through().map_err(fail)?;
        }
        Ok(())
    }

    fn run(&mut self, req: Request<'_>, out: &mut Vec<u8>) -> Result<(), Failure> {
        // Its memory may hold changes its log lacks: no answer from it either.
        if self.store.is_halted() {
            return Err(fail(PStoreError::Halted));
        }
        let reply = match req {
            Request::Lookup { pino, name } => {
                let ino = self.store.lookup(pino, name).ok_or_else(|| {
                    err(
                        Errno::ENOENT,
                        format!("{:?} in {pino}", String::from_utf8_lossy(name)),
                    )
                })?;
                let local = self.local(ino)?;
                Reply::Lookup {
                    ino,
                    mode: local.as_ref().map_or(0, |i| i.mode),
                    attr: local.as_ref().map(attr),
                }
            }
            Request::Create {
                pino,
                mode,
                uid,
                gid,
                rdev,
                hint,
                io_unit,
                excl,
                name,
            } => {
                self.check_open_dir(pino)?;
                let new = NewInode {
                    mode,
                    uid,
                    gid,
                    rdev,
                    hint: hint_to_store(hint),
                    io_unit,
                };
                // The store refuses an existing name itself: one dentry lookup, not two.
                match self.store.create_inode(pino, name, &new) {
                    Ok(i) => Reply::Attr(attr(&i)),
                    Err(PStoreError::Exists(_)) if !excl => {
                        let ino = self
                            .store
                            .lookup(pino, name)
                            .ok_or_else(|| err(Errno::ENOENT, String::from_utf8_lossy(name)))?;
                        match self.local(ino)? {
                            Some(i) => Reply::Attr(attr(&i)),
                            None => return Err(err(Errno::EEXIST, String::from_utf8_lossy(name))),
                        }
                    }
                    Err(e) => return Err(fail(e)),
                }
            }
            Request::MkInode {
                mode,
                uid,
                gid,
                hint,
                io_unit,
                // `near` chose the slice (RingSched ran it here); the inode is the same.
                ..
            } => {
                let ino = self.store.alloc_ino().map_err(fail)?;
                let now = now_ns();
                let i = Inode {
                    ino,
                    mode,
                    uid,
                    gid,
                    // A directory's entry and its `.`.
                    nlink: if is_dir_mode(mode) { 2 } else { 1 },
                    atime_ns: now,
                    mtime_ns: now,
                    ctime_ns: now,
                    hint: hint_to_store(hint),
                    io_unit,
                    ..Inode::default()
                };
                self.store.insert_inode(&i).map_err(fail)?;
                Reply::Attr(attr(&i))
            }
            Request::Link {
                pino,
                ino,
                mode,
                flags,
                name,
            } => Reply::Removed(self.link(pino, name, ino, mode, flags)?),
            Request::GetAttr { ino } => {
                let i = self.store.getattr(ino).map_err(fail)?;
                Reply::Attr(attr(&i))
            }
            Request::SetAttr { ino, set } => Reply::Attr(self.setattr(ino, set)?),
            Request::ReadDir { pino, max, after } => {
                let limit = (max as usize).clamp(1, READDIR_MAX);
                let after = (!after.is_empty()).then_some(after);
                // One more than asked tells whether more follow.
                let mut names = self.store.readdir(pino, after, limit + 1);
                let more = names.len() > limit;
                names.truncate(limit);
                let mut modes = Vec::with_capacity(names.len());
                for (_, ino) in &names {
                    modes.push(self.local(*ino)?.map_or(0, |i| i.mode));
                }
                let entries = names
                    .iter()
                    .zip(modes)
                    .map(|((name, ino), mode)| DirEntry {
                        ino: *ino,
                        mode,
                        name,
                    })
                    .collect();
                Reply::Entries { more, entries }.encode(out);
                return Ok(());
            }
            Request::Unlink { pino, flags, name } => {
                let ino = self.store.lookup(pino, name).ok_or_else(|| {
                    err(
                        Errno::ENOENT,
                        format!("{:?} in {pino}", String::from_utf8_lossy(name)),
                    )
                })?;
                let t = self.removable(ino, flags.dir, flags.keep_inode)?;
                let mut links = Vec::new();
                self.parent_link(pino, t.dir, -1, &mut links);
                if !flags.keep_inode {
                    links.extend(t.drop_link());
                }
                let change = Relink {
                    remove: Some((pino, name)),
                    insert: None,
                    links: &links,
                    free: None,
                };
                let removed = self.apply(&change, Some((t, flags.keep_inode)), flags.orphan)?;
                Reply::Removed(removed)
            }
            Request::RmInode { ino, orphan } => Reply::Removed(Some(self.rm_inode(ino, orphan)?)),
            Request::DirSeal { pino, seal } => {
                if seal {
                    self.sealed.insert(pino);
                } else {
                    self.sealed.remove(&pino);
                }
                Reply::Count(u64::from(self.store.has_dentries(pino)))
            }
            Request::Rename {
                src_pino,
                dst_pino,
                flags,
                src_name,
                dst_name,
            } => Reply::Removed(self.rename((src_pino, src_name), (dst_pino, dst_name), flags)?),
            Request::Open { ino, flags } => {
                let mut i = self.store.getattr(ino).map_err(fail)?;
                if flags & libc::O_TRUNC as u32 != 0 && !is_dir_mode(i.mode) && i.size != 0 {
                    self.store.truncate(ino, 0).map_err(fail)?;
                    i = self.store.getattr(ino).map_err(fail)?;
                }
                Reply::Attr(attr(&i))
            }
            Request::Close { .. } => Reply::Empty,
            Request::IoUnit { ino, unit } => {
                let i = self.store.getattr(ino).map_err(fail)?;
                if i.mode & libc::S_IFMT != libc::S_IFREG {
                    return Err(err(
                        Errno::EINVAL,
                        format!("inode {ino} is not a regular file: no I/O unit"),
                    ));
                }
                let i = self.store.fix_io_unit(ino, unit).map_err(fail)?;
                // Durable before any writer lays data out by it: a unit lost in a crash could
                // be fixed again differently while a writer still holds the old one.
                self.store.fsync().map_err(fail)?;
                Reply::Attr(attr(&i))
            }
            Request::SetHint { ino, data, io_unit } => {
                Reply::Attr(self.set_hint(ino, data, io_unit)?)
            }
            Request::Write {
                ino,
                offset,
                extent,
                dist,
                drop_set_id,
                data,
            } => {
                let by = WrittenBy {
                    layout: dist_to_store(dist),
                    drop_set_id,
                };
                let n = self.store.write_laid_out(ino, offset, extent, data, by);
                Reply::Written(n.map_err(fail)? as u32)
            }
            Request::Read {
                ino,
                offset,
                len,
                extent,
            } => {
                let start = out.len();
                out.resize(start + len.min(MAX_IO) as usize, 0);
                let n = self.read_to(ino, offset, extent, &mut out[start..])?;
                out.truncate(start + n);
                return Ok(());
            }
            Request::Fsync { .. } => {
                self.store.fsync().map_err(fail)?;
                Reply::Empty
            }
            Request::Truncate { ino, size } => {
                if self.store.inode_offset(ino).is_some() {
                    self.store.truncate(ino, size).map_err(fail)?;
                } else {
                    self.store.truncate_blocks(ino, size).map_err(fail)?;
                }
                Reply::Empty
            }
            Request::StatFs => {
                let s = self.store.stats();
                Reply::StatFs(StatFs {
                    bytes_total: s.data_pages * 4096,
                    bytes_used: s.pages_used * 4096,
                    inodes_total: s.inode_slots,
                    inodes_used: s.inodes,
                })
            }
        };
        reply.encode(out);
        Ok(())
    }

    fn setattr(&mut self, ino: u64, set: SetAttr) -> Result<Attr, Failure> {
        let needs_cur = set.extend_to.is_some()
            || set.layout.is_some()
            || set.mode.is_some()
            || set.drop_set_id
            || set.nlink_delta.is_some();
        let cur = if needs_cur {
            Some(self.store.getattr(ino).map_err(fail)?)
        } else {
            None
        };
        let mut change = pstore::SetAttr {
            mode: set.mode,
            uid: set.uid,
            gid: set.gid,
            size: set.size,
            atime_ns: set.atime_ns,
            mtime_ns: set.mtime_ns,
            hint: None,
            io_unit: None,
            nlink: None,
        };
        if let Some(mut cur) = cur {
            if set.layout.is_some() && is_dir_mode(cur.mode) {
                return Err(err(
                    Errno::EISDIR,
                    format!("inode {ino} is a directory: no data was laid out for it"),
                ));
            }
            if let Some(layout) = set.layout
                && cur.hold_layout(dist_to_store(layout)).map_err(fail)?
            {
                change.hint = Some(cur.hint);
            }
            if let Some(to) = set.extend_to
                && cur.size < to
                && set.size.is_none_or(|s| s < to)
            {
                change.size = Some(to);
            }
            if let Some(m) = set.mode {
                // Permission bits only: the type stays.
                change.mode = Some((cur.mode & libc::S_IFMT) | (m & !libc::S_IFMT));
            }
            // From the mode held here, not one the client saw: another client may have set a
            // bit since.
            if set.drop_set_id
                && let Some(mode) = mode_after_set_id_drop(change.mode.unwrap_or(cur.mode))
            {
                change.mode = Some(mode);
            }
            if let Some(delta) = set.nlink_delta {
                if cur.nlink == 0 {
                    return Err(err(Errno::ENOENT, format!("inode {ino} has no links")));
                }
                // Never the last link (RMINODE drops it) nor a directory's own two.
                let floor = if is_dir_mode(cur.mode) { 2 } else { 1 };
                let n = (i64::from(cur.nlink) + i64::from(delta)).clamp(floor, u32::MAX.into());
                change.nlink = Some(n as u32);
            }
        }
        self.store
            .setattr(ino, &change)
            .map(|i| attr(&i))
            .map_err(fail)
    }

    /// [`Request::SetHint`]: made durable before the reply, as an I/O unit is: a writer lays
    /// data out by the hint it is given, which a crash must not take back.
    fn set_hint(
        &mut self,
        ino: u64,
        data: Option<DataDist>,
        io_unit: Option<u32>,
    ) -> Result<Attr, Failure> {
        let cur = self.store.getattr(ino).map_err(fail)?;
        let hint = hint_to_wire(cur.hint);
        match cur.mode & libc::S_IFMT {
            libc::S_IFDIR => {}
            libc::S_IFREG => {
                if io_unit.is_some() {
                    return Err(err(
                        Errno::EINVAL,
                        format!("inode {ino} is a file: its I/O unit is fixed by its first writer"),
                    ));
                }
                let changes = data.is_some_and(|d| d != hint.data);
                if changes && (cur.size > 0 || cur.io_unit != 0) {
                    return Err(err(
                        Errno::EBUSY,
                        format!(
                            "file {ino} already holds data laid out {} (size {}, I/O unit {}): \
                             its distribution changes only while it is empty",
                            hint.data.word(),
                            cur.size,
                            cur.io_unit
                        ),
                    ));
                }
            }
            _ => {
                return Err(err(
                    Errno::EINVAL,
                    format!("inode {ino} is neither a file nor a directory: no placement hint"),
                ));
            }
        }
        let change = pstore::SetAttr {
            hint: data.map(|data| hint_to_store(Hint { data, ..hint })),
            io_unit,
            ..pstore::SetAttr::default()
        };
        let i = self.store.setattr(ino, &change).map_err(fail)?;
        self.store.fsync().map_err(fail)?;
        Ok(attr(&i))
    }

    /// Bytes of data held and the inodes here, for the master's usage report, and the data
    /// the zone moved direct and through bounce slots.
    pub fn usage(&self) -> SliceUsage {
        let s = self.store.stats();
        SliceUsage {
            capacity: s.data_pages * 4096,
            used: s.pages_used * 4096,
            inodes: s.inodes,
            transfers: s.transfers,
        }
    }
}

/// What [`Slice::usage`] reports.
#[derive(Debug, Clone, Copy)]
pub struct SliceUsage {
    /// Bytes of data pages.
    pub capacity: u64,
    /// Bytes of data pages in use.
    pub used: u64,
    /// Inodes.
    pub inodes: u64,
    /// Data the zone moved, by path.
    pub transfers: ZoneTransfers,
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerConfig;
    use crate::placement::{Hint, Layout, ROOT_INO};
    use crate::server::storage::Storage;

    #[test]
    fn a_read_reply_writes_over_the_last_reply_and_holes_read_as_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = ServerConfig {
            data: dir.path().join("data"),
            data_size: 64 << 20,
            workers: 1,
            ..ServerConfig::default()
        };
        let layout = Layout::new(1, 1, 64 << 10).unwrap();
        let zone = Storage::open(&cfg)
            .unwrap()
            .zones(0, &layout, hint_to_store(Hint::default()))
            .unwrap()
            .pop()
            .unwrap();
        let mut slice = Slice::new(zone);
        let mode = libc::S_IFREG | 0o644;
        let mut file = |name: &[u8]| {
            let s = slice.store();
            s.create(ROOT_INO, name, mode, 0, 0, Default::default())
                .unwrap()
                .ino
        };
        let (full, sparse) = (file(b"full"), file(b"sparse"));
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8 | 1).collect();
        slice.store().write(full, 0, &data).unwrap();
        // 200 KiB of hole, then 5 bytes; an extent of 47,008 bytes elsewhere.
        slice.store().write(sparse, 200 << 10, b"tail!").unwrap();
        let extent = vec![0x3cu8; 47_008];
        slice
            .store()
            .write_extent(sparse, 1 << 20, 1 << 20, &extent)
            .unwrap();
        let mut out = Vec::new();
        slice.read_reply(full, 0, 300_000, None, &mut out).unwrap();
        assert!(out == data, "a read into an empty buffer");
        // The buffer now holds the first file's bytes: a read of the hole must not show them.
        slice
            .read_reply(sparse, 0, 256 << 10, None, &mut out)
            .unwrap();
        assert_eq!(out.len(), 256 << 10);
        assert_eq!(&out[200 << 10..(200 << 10) + 5], b"tail!");
        out[200 << 10..(200 << 10) + 5].fill(0);
        assert!(out.iter().all(|&b| b == 0), "the holes around it");
        slice.read_reply(full, 1000, 10, None, &mut out).unwrap();
        assert_eq!(out, data[1000..1010]);
        slice
            .read_reply(sparse, 1 << 20, 47_008, Some(1 << 20), &mut out)
            .unwrap();
        assert!(out == extent, "the extent over a shorter buffer");
        out.fill(0xEE);
        out.resize(300_000, 0xEE);
        slice
            .read_reply(sparse, 512 << 10, 4096, Some(512 << 10), &mut out)
            .unwrap();
        assert_eq!(out, vec![0; 4096], "no extent starts there");
        slice
            .read_reply(sparse, 2 << 20, 4096, None, &mut out)
            .unwrap();
        assert!(out.is_empty(), "past the end");
    }

    #[test]
    fn a_zone_out_of_inode_slots_says_how_to_get_more() {
        for what in ["inode slots", "dentries"] {
            let (errno, msg) = fail(PStoreError::NoSpace(what));
            assert_eq!(errno, Errno::ENOSPC);
            assert!(
                msg.contains(what) && msg.contains("--bytes-per-inode"),
                "{msg}"
            );
        }
        let (errno, msg) = fail(PStoreError::NoSpace("WAL"));
        assert_eq!(errno, Errno::ENOSPC);
        assert!(!msg.contains("bytes-per-inode"), "{msg}");
    }
}
