//! The GoFS host client (papers/gofs.md §3.2: "host applications access GoFS via the host
//! client, which uses FUSE to intercept all filesystem calls"): a `fuser::Filesystem` over the
//! host engine [`Fs`].
//!
//! A FUSE inode number is `generation << 32 | nid`, with the F2FS root (nid [`ROOT_INO`]) and
//! nid 1 (F2FS's node inode, never shown) swapped so the root is FUSE inode 1. Every inode this
//! mount creates gets a new generation of its nid: the engine reuses freed nids at once, while
//! the kernel may still hold the old inode (a removed directory stays pinned, marked dead, by an
//! open file in it), and reusing its number would make the new one look dead too.
//! Permission checks are the kernel's (`default_permissions`). Attributes are not cached by
//! the kernel (TTL 0: hard links and renames change ctime and link counts of other names),
//! names are cached for [`ENTRY_TTL`]. Open files hold an engine reference
//! (`open_inode`/`release_inode`), so an unlinked open file keeps its data until released.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::error::FsError;
use crate::fs::{Caller, DirEntry, FileType, Fs, Ino, ROOT_INO, SetAttr, Stat, Timespec};

/// How long the kernel may cache a name → inode mapping.
pub const ENTRY_TTL: Duration = Duration::from_secs(1);
/// How long the kernel may cache attributes (0: every stat asks the engine).
pub const ATTR_TTL: Duration = Duration::ZERO;

/// Settings of a FUSE mount.
#[derive(Debug, Clone)]
pub struct FuseOptions {
    /// Let other users than the mounting one in (`allow_other`).
    pub allow_other: bool,
    /// Mount read-only.
    pub read_only: bool,
    /// Threads serving kernel requests.
    pub threads: usize,
}

impl Default for FuseOptions {
    fn default() -> Self {
        Self {
            allow_other: true,
            read_only: false,
            threads: 2,
        }
    }
}

/// The FUSE file system: kernel requests become engine calls.
#[derive(Debug)]
pub struct GofsFuse {
    fs: Arc<Fs>,
    gens: Generations,
    /// Directory snapshots of open directory handles (readdir is called once per reply page).
    dirs: Mutex<HashMap<u64, Arc<Vec<DirEntry>>>>,
    next_fh: AtomicU64,
}

/// Mounts `fs` at `mountpoint` and serves it from background threads; dropping (or
/// `umount_and_join`ing) the session unmounts it.
pub fn spawn_mount(
    fs: Arc<Fs>,
    mountpoint: &Path,
    opts: &FuseOptions,
) -> std::io::Result<fuser::BackgroundSession> {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("gofs".into()),
        fuser::MountOption::Subtype("gofs".into()),
        fuser::MountOption::DefaultPermissions,
        if opts.read_only {
            fuser::MountOption::RO
        } else {
            fuser::MountOption::RW
        },
    ];
    if opts.allow_other {
        config.acl = fuser::SessionACL::All;
    }
    config.n_threads = Some(opts.threads.max(1));
    fuser::spawn_mount(GofsFuse::new(fs), mountpoint, &config)
}

/// Swaps the root's nid and nid 1, so that the root is FUSE inode 1.
fn swap_root(nid: u64) -> u64 {
    match nid {
        n if n == u64::from(ROOT_INO) => 1,
        1 => u64::from(ROOT_INO),
        other => other,
    }
}

/// The generation of every nid this mount created inodes on (absent: generation 0).
#[derive(Debug, Default)]
pub struct Generations(Mutex<HashMap<Ino, u32>>);

impl Generations {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Ino, u32>> {
        // Each update is one insert, so a poisoned map is still consistent.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The FUSE inode number of engine inode `ino` now.
    pub fn to_fuse(&self, ino: Ino) -> INodeNo {
        let generation = self.map().get(&ino).copied().unwrap_or(0);
        INodeNo(u64::from(generation) << 32 | swap_root(u64::from(ino)))
    }

    /// The engine inode of FUSE inode `ino`; ESTALE when that inode's nid was reused since.
    pub fn from_fuse(&self, ino: INodeNo) -> Result<Ino, Errno> {
        let nid = swap_root(ino.0 & u64::from(u32::MAX)) as Ino;
        let generation = (ino.0 >> 32) as u32;
        if self.map().get(&nid).copied().unwrap_or(0) != generation {
            return Err(Errno::ESTALE);
        }
        Ok(nid)
    }

    /// Starts a new generation of `ino`: it names a newly created inode.
    pub fn renew(&self, ino: Ino) {
        let mut map = self.map();
        let g = map.entry(ino).or_insert(0);
        *g = g.wrapping_add(1);
    }

    /// The current generation of `ino`.
    fn generation(&self, ino: Ino) -> Generation {
        Generation(u64::from(self.map().get(&ino).copied().unwrap_or(0)))
    }
}

fn errno(e: &FsError) -> Errno {
    if matches!(e, FsError::Io(_) | FsError::Corrupt(_)) {
        tracing::error!("engine error: {e}");
    }
    Errno::from_i32(e.errno())
}

fn to_system_time(t: Timespec) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec.unsigned_abs(), t.nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + Duration::from_nanos(t.nsec.into())
    }
}

/// `t` as an engine timestamp.
pub fn to_timespec(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec {
            sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nsec: d.subsec_nanos(),
        },
        Err(before) => {
            let d = before.duration();
            // Round toward minus infinity so that nsec stays in 0..1e9.
            let (sec, nsec) = if d.subsec_nanos() == 0 {
                (-(d.as_secs() as i64), 0)
            } else {
                (-(d.as_secs() as i64) - 1, 1_000_000_000 - d.subsec_nanos())
            };
            Timespec { sec, nsec }
        }
    }
}

fn time_or_now(t: TimeOrNow) -> Timespec {
    to_timespec(match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    })
}

fn kind_to_fuse(kind: FileType) -> fuser::FileType {
    match kind {
        FileType::Regular => fuser::FileType::RegularFile,
        FileType::Directory => fuser::FileType::Directory,
        FileType::Symlink => fuser::FileType::Symlink,
        FileType::CharDevice => fuser::FileType::CharDevice,
        FileType::BlockDevice => fuser::FileType::BlockDevice,
        FileType::Fifo => fuser::FileType::NamedPipe,
        FileType::Socket => fuser::FileType::Socket,
    }
}

/// The file type encoded in the S_IFMT bits of `mode`.
fn kind_of_mode(mode: u32) -> Result<FileType, Errno> {
    Ok(match mode & libc::S_IFMT {
        0 | libc::S_IFREG => FileType::Regular,
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFIFO => FileType::Fifo,
        libc::S_IFSOCK => FileType::Socket,
        _ => return Err(Errno::EINVAL),
    })
}

/// FUSE attributes of an engine inode known to the kernel as `ino`.
pub fn to_attr(st: &Stat, ino: INodeNo) -> FileAttr {
    FileAttr {
        ino,
        size: st.size,
        blocks: st.blocks,
        atime: to_system_time(st.atime),
        mtime: to_system_time(st.mtime),
        ctime: to_system_time(st.ctime),
        crtime: to_system_time(st.ctime),
        kind: kind_to_fuse(st.kind),
        perm: st.mode & 0o7777,
        nlink: st.nlink,
        uid: st.uid,
        gid: st.gid,
        rdev: st.rdev,
        blksize: 4096,
        flags: 0,
    }
}

/// Permission bits of a mode, with the umask the kernel left to us applied.
fn perm(mode: u32, umask: u32) -> u16 {
    (mode & !umask & 0o7777) as u16
}

impl GofsFuse {
    /// The FUSE view of `fs`.
    pub fn new(fs: Arc<Fs>) -> Self {
        Self {
            fs,
            gens: Generations::default(),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        }
    }

    fn dirs(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Vec<DirEntry>>>> {
        // Every update is a single insert/remove, so a poisoned map is still consistent.
        self.dirs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Who creates an inode in `parent`: the caller, with the group of a set-group-ID
    /// directory (and such a directory's subdirectories inherit the bit).
    fn creator(&self, req: &Request, parent: Ino) -> Result<(Caller, bool), FsError> {
        let dir = self.fs.getattr(parent)?;
        let sgid = dir.mode & libc::S_ISGID as u16 != 0;
        let gid = if sgid { dir.gid } else { req.gid() };
        Ok((
            Caller {
                uid: req.uid(),
                gid,
            },
            sgid,
        ))
    }

    fn attr(&self, st: &Stat) -> FileAttr {
        to_attr(st, self.gens.to_fuse(st.ino))
    }

    fn reply_entry(&self, reply: ReplyEntry, r: Result<Stat, FsError>) {
        match r {
            Ok(st) => reply.entry_with_ttls(
                &ATTR_TTL,
                &ENTRY_TTL,
                &self.attr(&st),
                self.gens.generation(st.ino),
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// Replies with a newly created inode, under a new generation of its nid.
    fn reply_created(&self, reply: ReplyEntry, r: Result<Stat, FsError>) {
        if let Ok(st) = &r {
            self.gens.renew(st.ino);
        }
        self.reply_entry(reply, r);
    }

    fn reply_empty(reply: ReplyEmpty, r: Result<(), FsError>) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn do_setattr(
        &self,
        ino: Ino,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
    ) -> Result<Stat, FsError> {
        let attr = SetAttr {
            mode: mode.map(|m| (m & 0o7777) as u16),
            uid,
            gid,
            size,
            atime: atime.map(time_or_now),
            mtime: mtime.map(time_or_now),
            ctime: ctime.map(to_timespec),
        };
        self.fs.setattr(ino, &attr)
    }

    fn do_rename(
        &self,
        parent: Ino,
        name: &OsStr,
        new_parent: Ino,
        new_name: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno::EINVAL);
        }
        if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            match self.fs.lookup(new_parent, new_name.as_bytes()) {
                Ok(_) => return Err(Errno::EEXIST),
                Err(FsError::NotFound) => {}
                Err(e) => return Err(errno(&e)),
            }
        }
        self.fs
            .rename(parent, name.as_bytes(), new_parent, new_name.as_bytes())
            .map_err(|e| errno(&e))
    }
}

/// The engine inode of FUSE inode `$ino`, or an ESTALE reply through `$reply`.
macro_rules! ino_or_reply {
    ($self:ident, $ino:expr, $reply:ident) => {
        match $self.gens.from_fuse($ino) {
            Ok(i) => i,
            Err(e) => return $reply.error(e),
        }
    };
}

impl fuser::Filesystem for GofsFuse {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let parent = ino_or_reply!(self, parent, reply);
        self.reply_entry(reply, self.fs.lookup(parent, name.as_bytes()));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let ino = ino_or_reply!(self, ino, reply);
        match self.fs.getattr(ino) {
            Ok(st) => reply.attr(&ATTR_TTL, &self.attr(&st)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let ino = ino_or_reply!(self, ino, reply);
        match self.do_setattr(ino, mode, uid, gid, size, atime, mtime, ctime) {
            Ok(st) => reply.attr(&ATTR_TTL, &self.attr(&st)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let ino = ino_or_reply!(self, ino, reply);
        match self.fs.readlink(ino) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let parent = ino_or_reply!(self, parent, reply);
        let kind = match kind_of_mode(mode) {
            Ok(FileType::Directory | FileType::Symlink) => return reply.error(Errno::EINVAL),
            Ok(k) => k,
            Err(e) => return reply.error(e),
        };
        let r = self.creator(req, parent).and_then(|(who, _)| {
            self.fs
                .create(parent, name.as_bytes(), kind, perm(mode, umask), rdev, who)
        });
        self.reply_created(reply, r);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let parent = ino_or_reply!(self, parent, reply);
        let r = self.creator(req, parent).and_then(|(who, sgid)| {
            let mut mode = perm(mode, umask);
            if sgid {
                mode |= libc::S_ISGID as u16;
            }
            self.fs.mkdir(parent, name.as_bytes(), mode, who)
        });
        self.reply_created(reply, r);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let parent = ino_or_reply!(self, parent, reply);
        Self::reply_empty(reply, self.fs.unlink(parent, name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let parent = ino_or_reply!(self, parent, reply);
        Self::reply_empty(reply, self.fs.rmdir(parent, name.as_bytes()));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let parent = ino_or_reply!(self, parent, reply);
        let r = self.creator(req, parent).and_then(|(who, _)| {
            self.fs.symlink(
                parent,
                link_name.as_bytes(),
                target.as_os_str().as_bytes(),
                who,
            )
        });
        self.reply_created(reply, r);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let parent = ino_or_reply!(self, parent, reply);
        let newparent = ino_or_reply!(self, newparent, reply);
        match self.do_rename(parent, name, newparent, newname, flags) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let ino = ino_or_reply!(self, ino, reply);
        let newparent = ino_or_reply!(self, newparent, reply);
        self.reply_entry(reply, self.fs.link(ino, newparent, newname.as_bytes()));
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let ino = ino_or_reply!(self, ino, reply);
        match self.fs.open_inode(ino) {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let ino = ino_or_reply!(self, ino, reply);
        let mut buf = vec![0u8; size as usize];
        match self.fs.read(ino, offset, &mut buf) {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let ino = ino_or_reply!(self, ino, reply);
        match self.fs.write(ino, offset, data) {
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Writes go to the engine synchronously; nothing is buffered per handle.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let ino = ino_or_reply!(self, ino, reply);
        Self::reply_empty(reply, self.fs.release_inode(ino));
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let ino = ino_or_reply!(self, ino, reply);
        Self::reply_empty(reply, self.fs.fsync(ino));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let ino = ino_or_reply!(self, ino, reply);
        match self.fs.readdir(ino) {
            Ok(entries) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                self.dirs().insert(fh, Arc::new(entries));
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let dir = ino_or_reply!(self, ino, reply);
        // A rewind (offset 0) takes a fresh snapshot, so rewinddir sees new entries.
        let snapshot = if offset == 0 {
            self.fs.readdir(dir).map(Arc::new).inspect(|e| {
                self.dirs().insert(fh.0, Arc::clone(e));
            })
        } else {
            self.dirs()
                .get(&fh.0)
                .cloned()
                .map_or_else(|| self.fs.readdir(dir).map(Arc::new), Ok)
        };
        let entries = match snapshot {
            Ok(e) => e,
            Err(e) => return reply.error(errno(&e)),
        };
        let dots = [
            (ino, fuser::FileType::Directory, OsStr::new(".")),
            (ino, fuser::FileType::Directory, OsStr::new("..")),
        ];
        let all = dots.into_iter().chain(entries.iter().map(|e| {
            (
                self.gens.to_fuse(e.ino),
                kind_to_fuse(e.kind),
                OsStr::from_bytes(&e.name),
            )
        }));
        for (i, (ino, kind, name)) in all.enumerate().skip(offset as usize) {
            if reply.add(ino, i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs().remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let ino = ino_or_reply!(self, ino, reply);
        Self::reply_empty(reply, self.fs.fsync(ino));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.fs.statfs() {
            Ok(s) => reply.statfs(
                s.blocks,
                s.blocks_free,
                s.blocks_free,
                s.files,
                s.files_free,
                s.block_size,
                s.name_max,
                s.block_size,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let parent = ino_or_reply!(self, parent, reply);
        let r = self.creator(req, parent).and_then(|(who, _)| {
            let st = self.fs.create(
                parent,
                name.as_bytes(),
                FileType::Regular,
                perm(mode, umask),
                0,
                who,
            )?;
            self.fs.open_inode(st.ino)?;
            Ok(st)
        });
        match r {
            Ok(st) => {
                self.gens.renew(st.ino);
                reply.created(
                    &ATTR_TTL,
                    &self.attr(&st),
                    self.gens.generation(st.ino),
                    FileHandle(0),
                    FopenFlags::empty(),
                );
            }
            Err(e) => reply.error(errno(&e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_map_both_ways_with_root_at_one() {
        let g = Generations::default();
        assert_eq!(g.to_fuse(ROOT_INO), INodeNo::ROOT);
        assert_eq!(g.from_fuse(INodeNo::ROOT), Ok(ROOT_INO));
        for nid in [1u32, 2, 4, 5, 1000, u32::MAX] {
            assert_eq!(g.from_fuse(g.to_fuse(nid)), Ok(nid));
        }
    }

    #[test]
    fn a_reused_nid_gets_a_new_inode_number_and_the_old_one_goes_stale() {
        let g = Generations::default();
        let old = g.to_fuse(42);
        g.renew(42);
        let new = g.to_fuse(42);
        assert_ne!(old, new);
        assert_eq!(g.from_fuse(new), Ok(42));
        assert_eq!(g.from_fuse(old), Err(Errno::ESTALE));
        assert_eq!(g.to_fuse(43), INodeNo(43), "other nids keep their numbers");
    }

    #[test]
    fn timestamps_round_trip_through_system_time() {
        for t in [
            Timespec { sec: 0, nsec: 0 },
            Timespec {
                sec: 1_700_000_000,
                nsec: 123_456_789,
            },
            Timespec {
                sec: -5,
                nsec: 250_000_000,
            },
        ] {
            assert_eq!(to_timespec(to_system_time(t)), t);
        }
    }

    #[test]
    fn modes_give_file_types_and_masked_permissions() {
        assert_eq!(kind_of_mode(libc::S_IFIFO | 0o644), Ok(FileType::Fifo));
        assert_eq!(kind_of_mode(0o644), Ok(FileType::Regular));
        assert_eq!(perm(libc::S_IFREG | 0o4777, 0o022), 0o4755);
    }
}
