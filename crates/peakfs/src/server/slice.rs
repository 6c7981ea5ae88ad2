//! One worker's resource slice (PeakFS §III-B, §III-C): its PStore and the request handlers
//! that run to completion on it. Multi-slice operations (mkdir in a regular directory, rmdir
//! of a bigdir, rename across slices) are driven by the client as sequences of single-slice
//! requests, documented in [`crate::protocol`] and /work/scratch/peakfs-protocol.md.

use std::collections::HashSet;

use crate::placement::{DataDist, Hint};
use crate::protocol::{
    Attr, DirEntry, Errno, MAX_IO, Removed, Reply, Request, SetAttr, StatFs, UnlinkFlags,
    is_dir_mode,
};
use crate::pstore::inode::{DataDistribution, Hint as StoreHint, Inode};
use crate::pstore::{self, PStore, PStoreError};

/// Most entries one READDIR reply carries.
const READDIR_MAX: usize = 1024;

/// A failed request: the errno and a message for the error reply.
pub type Failure = (Errno, String);

/// One worker's slice.
#[derive(Debug)]
pub struct Slice {
    store: PStore,
    /// Directories being removed (rmdir of a bigdir): no new entries here.
    sealed: HashSet<u64>,
}

fn fail(e: PStoreError) -> Failure {
    let errno = match &e {
        PStoreError::NoInode(_) | PStoreError::NoEntry { .. } => Errno::ENOENT,
        PStoreError::Exists(_) => Errno::EEXIST,
        PStoreError::NoSpace(_) => Errno::ENOSPC,
        PStoreError::Name(_) | PStoreError::Invalid(_) => Errno::EINVAL,
        PStoreError::Zone(_)
        | PStoreError::Bitmap(_)
        | PStoreError::Inode { .. }
        | PStoreError::Corrupt(_) => Errno::EIO,
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
    let data = match h.data {
        DataDist::Block => DataDistribution::Block,
        DataDist::File => DataDistribution::File,
        DataDist::Io => DataDistribution::Io,
    };
    StoreHint {
        data,
        bigdir: h.bigdir,
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
    }
}

impl Slice {
    /// A slice over an opened PStore.
    pub fn new(store: PStore) -> Self {
        Self {
            store,
            sealed: HashSet::new(),
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
        // When the parent's inode is here (regular directories always), it must be a directory.
        match self.local(pino)? {
            Some(p) if !is_dir_mode(p.mode) => Err(err(Errno::ENOTDIR, format!("{pino}"))),
            _ => Ok(()),
        }
    }

    /// Removes the entry `name` of `pino` holding `ino`; frees the inode (and its data here)
    /// when it is here and `keep_inode` is false.
    fn remove_entry(
        &mut self,
        pino: u64,
        name: &[u8],
        ino: u64,
        flags: UnlinkFlags,
    ) -> Result<Removed, Failure> {
        let local = self.local(ino)?;
        if let Some(i) = &local {
            match (flags.dir, is_dir_mode(i.mode)) {
                (true, false) => return Err(err(Errno::ENOTDIR, format!("ino {ino}"))),
                (false, true) => return Err(err(Errno::EISDIR, format!("ino {ino}"))),
                (true, true) if !flags.keep_inode && self.store.has_dentries(ino) => {
                    return Err(err(Errno::ENOTEMPTY, format!("directory {ino}")));
                }
                _ => {}
            }
        }
        self.store.remove_dentry(pino, name).map_err(fail)?;
        match local {
            Some(i) if !flags.keep_inode => {
                self.store.remove_inode(ino).map_err(fail)?;
                Ok(Removed {
                    ino,
                    mode: i.mode,
                    size: i.size,
                    inode_freed: true,
                    hint: hint_to_wire(i.hint),
                })
            }
            Some(i) => Ok(Removed {
                ino,
                mode: i.mode,
                size: i.size,
                inode_freed: false,
                hint: hint_to_wire(i.hint),
            }),
            None => Ok(Removed {
                ino,
                mode: 0,
                size: 0,
                inode_freed: false,
                hint: Hint::default(),
            }),
        }
    }

    /// Runs `req` on this slice and appends the reply payload to `out`.
    pub fn execute(&mut self, req: Request<'_>, out: &mut Vec<u8>) -> Result<(), Failure> {
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
                hint,
                excl,
                name,
            } => {
                self.check_open_dir(pino)?;
                if let Some(ino) = self.store.lookup(pino, name) {
                    match self.local(ino)? {
                        Some(i) if !excl => Reply::Attr(attr(&i)),
                        _ => return Err(err(Errno::EEXIST, String::from_utf8_lossy(name))),
                    }
                } else {
                    let i = self
                        .store
                        .create(pino, name, mode, uid, gid, hint_to_store(hint))
                        .map_err(fail)?;
                    Reply::Attr(attr(&i))
                }
            }
            Request::MkInode {
                mode,
                uid,
                gid,
                hint,
            } => {
                let ino = self.store.alloc_ino().map_err(fail)?;
                let now = now_ns();
                let i = Inode {
                    ino,
                    mode,
                    uid,
                    gid,
                    nlink: 1,
                    atime_ns: now,
                    mtime_ns: now,
                    ctime_ns: now,
                    hint: hint_to_store(hint),
                    ..Inode::default()
                };
                self.store.insert_inode(&i).map_err(fail)?;
                Reply::Attr(attr(&i))
            }
            Request::Link {
                pino,
                ino,
                mode,
                replace,
                name,
            } => {
                self.check_open_dir(pino)?;
                let replaced = match self.store.lookup(pino, name) {
                    Some(old) if old == ino => None,
                    Some(_) if !replace => {
                        return Err(err(Errno::EEXIST, String::from_utf8_lossy(name)));
                    }
                    Some(old) => {
                        let flags = UnlinkFlags {
                            dir: is_dir_mode(mode),
                            keep_inode: false,
                        };
                        Some(self.remove_entry(pino, name, old, flags)?)
                    }
                    None => None,
                };
                self.store.insert_dentry(pino, name, ino).map_err(fail)?;
                Reply::Removed(replaced)
            }
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
                Reply::Removed(Some(self.remove_entry(pino, name, ino, flags)?))
            }
            Request::RmInode { ino } => {
                let i = self.store.getattr(ino).map_err(fail)?;
                if is_dir_mode(i.mode) && self.store.has_dentries(ino) {
                    return Err(err(Errno::ENOTEMPTY, format!("directory {ino}")));
                }
                self.store.remove_inode(ino).map_err(fail)?;
                Reply::Empty
            }
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
                src_name,
                dst_name,
            } => {
                let ino = self.store.lookup(src_pino, src_name).ok_or_else(|| {
                    err(
                        Errno::ENOENT,
                        String::from_utf8_lossy(src_name).into_owned(),
                    )
                })?;
                self.check_open_dir(dst_pino)?;
                let mode = self.local(ino)?.map_or(0, |i| i.mode);
                let replaced = match self.store.lookup(dst_pino, dst_name) {
                    Some(old) if old == ino => None,
                    Some(old) => {
                        let flags = UnlinkFlags {
                            dir: is_dir_mode(mode),
                            keep_inode: false,
                        };
                        Some(self.remove_entry(dst_pino, dst_name, old, flags)?)
                    }
                    None => None,
                };
                self.store
                    .insert_dentry(dst_pino, dst_name, ino)
                    .map_err(fail)?;
                if (src_pino, src_name) != (dst_pino, dst_name) {
                    self.store.remove_dentry(src_pino, src_name).map_err(fail)?;
                }
                Reply::Removed(replaced)
            }
            Request::Open { ino, flags } => {
                let mut i = self.store.getattr(ino).map_err(fail)?;
                if flags & libc::O_TRUNC as u32 != 0 && !is_dir_mode(i.mode) && i.size != 0 {
                    self.store.truncate(ino, 0).map_err(fail)?;
                    i = self.store.getattr(ino).map_err(fail)?;
                }
                Reply::Attr(attr(&i))
            }
            Request::Close { .. } => Reply::Empty,
            Request::Write { ino, offset, data } => {
                let n = self.store.write(ino, offset, data).map_err(fail)?;
                Reply::Written(n as u32)
            }
            Request::Read { ino, offset, len } => {
                let len = len.min(MAX_IO) as usize;
                let start = out.len();
                out.resize(start + len, 0);
                let n = self
                    .store
                    .read(ino, offset, &mut out[start..])
                    .map_err(fail)?;
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
        let mut size = set.size;
        if let Some(to) = set.extend_to {
            let cur = self.store.getattr(ino).map_err(fail)?.size;
            if cur < to && size.is_none_or(|s| s < to) {
                size = Some(to);
            }
        }
        let change = pstore::SetAttr {
            mode: set.mode,
            uid: set.uid,
            gid: set.gid,
            size,
            atime_ns: set.atime_ns,
            mtime_ns: set.mtime_ns,
            hint: None,
        };
        let mut change = change;
        if let Some(m) = set.mode {
            // Permission bits only: the type stays.
            let cur = self.store.getattr(ino).map_err(fail)?.mode;
            change.mode = Some((cur & libc::S_IFMT) | (m & !libc::S_IFMT));
        }
        self.store
            .setattr(ino, &change)
            .map(|i| attr(&i))
            .map_err(fail)
    }

    /// Bytes of data held and the inodes here, for the master's usage report.
    pub fn usage(&self) -> (u64, u64, u64) {
        let s = self.store.stats();
        (s.data_pages * 4096, s.pages_used * 4096, s.inodes)
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}
