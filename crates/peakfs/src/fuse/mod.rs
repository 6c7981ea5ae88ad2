//! `peakfs mount`: a FUSE file system over the client library (PeakFS §III-A: the paper's
//! client intercepts system calls; here the kernel forwards them through FUSE).
//!
//! FUSE inode numbers are PeakFS inos (the root is ino 1 in both). The mount runs a client per
//! FUSE thread ([`lanes`]), so the requests of different files proceed side by side; a FUSE
//! file handle names a client file descriptor, so the write pipeline and commit consistency
//! of [`crate::client`] apply per open file: `write` returns once sent, `flush` (every close(2))
//! commits, `fsync` also makes the data durable. Attributes are not cached by the kernel
//! (TTL 0: other clients' commits change sizes), names for [`ENTRY_TTL`]. Permission checks are
//! the kernel's (`default_permissions`). Hard links are entries naming one inode, whose link
//! count its home slice keeps (the paper's PeakFS has none, §III-A); a file unlinked while open
//! here stays usable until its last release ([`crate::client`]); symlinks are S_IFLNK inodes
//! holding the target as data; FIFOs, sockets and device nodes are inodes of their type with
//! their device number. Placement hints are the extended attributes of [`crate::xattr`].

pub mod lanes;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::client::{Caller, Client, ClientError, Entry};
use crate::protocol::{Attr, SetAttr};
use crate::xattr::{self, Change, HintAttr, SetFlags, XattrError};

use lanes::Lanes;

/// How long the kernel may cache a name → inode mapping.
pub const ENTRY_TTL: Duration = Duration::from_secs(1);
/// How long the kernel may cache attributes.
pub const ATTR_TTL: Duration = Duration::ZERO;
/// Block size reported to stat and statfs.
const BLKSIZE: u32 = 4096;

/// The FUSE file system.
#[derive(Debug)]
pub struct PeakFuse {
    lanes: Lanes,
    /// Directory snapshots of open directory handles.
    dirs: Mutex<HashMap<u64, Arc<Vec<Entry>>>>,
    next_dir: AtomicU64,
}

/// Mounts the file system of `clients` (its lanes, 1 to [`lanes::MAX_LANES`]) at
/// `mountpoint` with a FUSE thread per client; dropping (or `umount_and_join`ing) the session
/// unmounts it.
pub fn spawn_mount(
    clients: Vec<Client>,
    mountpoint: &Path,
) -> std::io::Result<fuser::BackgroundSession> {
    let threads = clients.len();
    let fs = PeakFuse::new(clients).map_err(std::io::Error::other)?;
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("peakfs".into()),
        fuser::MountOption::Subtype("peakfs".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::RW,
    ];
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(threads);
    fuser::spawn_mount(fs, mountpoint, &config)
}

fn errno(e: &ClientError) -> Errno {
    match e {
        ClientError::Errno(_) => {}
        // A full slice is the user's to act on (the message names the format option); other
        // refusals (no such name, not empty, ...) are the caller's everyday answers.
        ClientError::Refused { errno, .. } if errno.0 == libc::ENOSPC => {
            tracing::warn!("server: {e}");
        }
        ClientError::Refused { .. } => tracing::debug!("server: {e}"),
        _ => tracing::warn!("client error: {e}"),
    }
    Errno::from_i32(e.errno())
}

fn to_time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn to_ns(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
    }
}

fn time_or_now(t: TimeOrNow) -> i64 {
    to_ns(match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    })
}

fn kind(mode: u32) -> fuser::FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => fuser::FileType::Directory,
        libc::S_IFLNK => fuser::FileType::Symlink,
        libc::S_IFIFO => fuser::FileType::NamedPipe,
        libc::S_IFSOCK => fuser::FileType::Socket,
        libc::S_IFCHR => fuser::FileType::CharDevice,
        libc::S_IFBLK => fuser::FileType::BlockDevice,
        _ => fuser::FileType::RegularFile,
    }
}

/// FUSE attributes of a PeakFS inode.
pub fn to_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: to_time(a.atime_ns),
        mtime: to_time(a.mtime_ns),
        ctime: to_time(a.ctime_ns),
        crtime: to_time(a.ctime_ns),
        kind: kind(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: BLKSIZE,
        flags: 0,
    }
}

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
    }
}

impl PeakFuse {
    /// The FUSE view of `clients`, the mount's lanes ([`Lanes::new`]).
    pub fn new(clients: Vec<Client>) -> Result<Self, ClientError> {
        Ok(Self {
            lanes: Lanes::new(clients)?,
            dirs: Mutex::new(HashMap::new()),
            next_dir: AtomicU64::new(1),
        })
    }

    fn dirs(&self) -> MutexGuard<'_, HashMap<u64, Arc<Vec<Entry>>>> {
        self.dirs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn reply_entry(reply: ReplyEntry, r: Result<Attr, ClientError>) {
        match r {
            Ok(a) => reply.entry_with_ttls(&ATTR_TTL, &ENTRY_TTL, &to_attr(&a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// Sets mtime (and so ctime: every SETATTR sets it) of directories whose entries
    /// changed, and ctime of a renamed inode (`mtime: false`). The servers do not touch a
    /// parent on CREATE/UNLINK (the parent inode usually lives on another slice, §III-C1),
    /// so the FUSE layer pays one SETATTR per changed directory for POSIX times; the library
    /// calls (and `peakfs bench`) do not.
    fn touch(c: &mut Client, inos: &[u64], mtime: bool) {
        let now = to_ns(SystemTime::now());
        for &ino in inos {
            let set = SetAttr {
                mtime_ns: mtime.then_some(now),
                ..SetAttr::default()
            };
            if let Err(e) = c.setattr(ino, set) {
                tracing::debug!(ino, "time update failed: {e}");
            }
        }
    }

    /// Replies to a call that created an entry in `parent`, updating the parent's times.
    fn reply_new(c: &mut Client, reply: ReplyEntry, parent: u64, r: Result<Attr, ClientError>) {
        if r.is_ok() {
            Self::touch(c, &[parent], true);
        }
        Self::reply_entry(reply, r);
    }

    /// Replies to a call that removed an entry of `parent`, updating the parent's times.
    fn reply_removed(c: &mut Client, reply: ReplyEmpty, parent: u64, r: Result<(), ClientError>) {
        if r.is_ok() {
            Self::touch(c, &[parent], true);
        }
        Self::reply_empty(reply, r);
    }

    fn reply_empty(reply: ReplyEmpty, r: Result<(), ClientError>) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// The group a new inode in `parent` gets: the parent's on a set-group-ID directory.
    fn creator(c: &mut Client, req: &Request, parent: u64) -> Result<(Caller, bool), ClientError> {
        let mut who = caller(req);
        let p = c.getattr(parent)?;
        let sgid = p.mode & libc::S_ISGID != 0;
        if sgid {
            who.gid = p.gid;
        }
        Ok((who, sgid))
    }

    /// Carries out what a set or remove of a hint attribute asks of `ino` (`change`, from its
    /// attributes), or answers why not (and logs it: the caller sees only the errno).
    fn change_hint(
        &self,
        ino: u64,
        change: impl FnOnce(&Attr) -> Result<Change, XattrError>,
        reply: ReplyEmpty,
    ) {
        let mut c = self.lanes.for_ino(ino);
        let r = c.getattr(ino).and_then(|a| {
            let change = change(&a).map_err(ClientError::from)?;
            xattr::apply(&mut c, ino, change)
        });
        match r {
            Err(ClientError::Refused { errno, message }) => {
                tracing::info!("extended attribute refused: {message}");
                reply.error(Errno::from_i32(errno.0));
            }
            r => Self::reply_empty(reply, r),
        }
    }
}

/// Answers getxattr(2) and listxattr(2): the value's size when asked with `size` 0, the value
/// when it fits, ERANGE otherwise.
fn reply_value(reply: ReplyXattr, size: u32, value: &[u8]) {
    match u32::try_from(value.len()) {
        Ok(n) if size == 0 => reply.size(n),
        Ok(n) if n <= size => reply.data(value),
        _ => reply.error(Errno::ERANGE),
    }
}

fn perm(mode: u32, umask: u32) -> u32 {
    mode & !umask & 0o7777
}

/// How the kernel treats a descriptor opened with open(2) `flags`. An O_DIRECT one bypasses
/// the page cache by the file's own path (FOPEN_DIRECT_IO), on which the kernel lets O_DIRECT
/// writes within the file's size run side by side (FOPEN_PARALLEL_DIRECT_WRITES): on the
/// page cache's path it holds the inode's lock across each one, so threads writing one file
/// wrote one at a time (8 threads, 4 KiB, 2-core box: 4.7 K writes/s on one file, 16.5 K on
/// a file each).
fn open_reply_flags(flags: i32) -> FopenFlags {
    if flags & libc::O_DIRECT != 0 {
        FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
    } else {
        FopenFlags::empty()
    }
}

impl fuser::Filesystem for PeakFuse {
    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> std::io::Result<()> {
        // The set-ID bits that writes, truncates and changes of owner drop are dropped here
        // (the write flag, `setattr`, `open`). Without it, the kernel would ask for
        // `security.capability` before every write(2): one more round trip through FUSE each.
        if let Err(e) = config.add_capabilities(fuser::InitFlags::FUSE_HANDLE_KILLPRIV_V2) {
            tracing::warn!("the kernel lacks {e:?}: it drops set-ID bits itself");
        }
        // An O_DIRECT descriptor (FOPEN_DIRECT_IO, `open_reply_flags`) may then be mapped
        // shared, as on the page cache's path; without it, such an mmap fails with ENODEV.
        if let Err(e) = config.add_capabilities(fuser::InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP) {
            tracing::warn!("the kernel lacks {e:?}: O_DIRECT descriptors cannot be mapped shared");
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        Self::reply_entry(reply, self.lanes.any().lookup(parent.0, name.as_bytes()));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.lanes.for_ino(ino.0).getattr(ino.0) {
            Ok(a) => reply.attr(&ATTR_TTL, &to_attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // A change of owner drops the set-ID bits, and so does a truncate by anyone but root
        // (FUSE_HANDLE_KILLPRIV_V2; the kernel's own flag for it does not reach us): the home
        // slice drops them from the mode it holds, unless a mode is given.
        let kill = uid.is_some() || gid.is_some() || (size.is_some() && req.uid() != 0);
        let set = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            drop_set_id: kill && mode.is_none(),
            uid,
            gid,
            size,
            extend_to: None,
            atime_ns: atime.map(time_or_now),
            mtime_ns: mtime.map(time_or_now),
            nlink_delta: None,
            layout: None,
        };
        let r = self.lanes.for_ino(ino.0).setattr(ino.0, set);
        if size.is_some() {
            self.lanes.resized(ino.0);
        }
        match r {
            Ok(a) => reply.attr(&ATTR_TTL, &to_attr(&a)),
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
        let ty = match mode & libc::S_IFMT {
            0 => libc::S_IFREG,
            libc::S_IFDIR => return reply.error(Errno::EINVAL),
            t => t,
        };
        let mut c = self.lanes.any();
        let r = Self::creator(&mut c, req, parent.0).and_then(|(who, _)| {
            let mode = ty | perm(mode, umask);
            let dev = matches!(ty, libc::S_IFCHR | libc::S_IFBLK);
            let rdev = if dev { rdev } else { 0 };
            c.mknod_at(parent.0, name.as_bytes(), mode, rdev, true, who)
        });
        Self::reply_new(&mut c, reply, parent.0, r);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        // On the file's lane: the attributes returned include its uncommitted writes.
        let mut c = self.lanes.for_ino(ino.0);
        let r = c.link_at(ino.0, newparent.0, newname.as_bytes());
        Self::reply_new(&mut c, reply, newparent.0, r);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        // A symlink is an inode of type S_IFLNK whose data is the target.
        let mut c = self.lanes.any();
        let r = Self::creator(&mut c, req, parent.0).and_then(|(who, _)| {
            let a = c.mknod_at(
                parent.0,
                link_name.as_bytes(),
                libc::S_IFLNK | 0o777,
                0,
                true,
                who,
            )?;
            let fd = c.open_ino(a.ino, libc::O_WRONLY)?;
            let w = c.pwrite(fd, target.as_os_str().as_bytes(), 0);
            c.close(fd)?;
            w?;
            c.getattr(a.ino)
        });
        Self::reply_new(&mut c, reply, parent.0, r);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let mut c = self.lanes.any();
        let r = c.open_ino(ino.0, libc::O_RDONLY).and_then(|fd| {
            let d = c.pread(fd, libc::PATH_MAX as usize, 0);
            c.close(fd)?;
            d
        });
        match r {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(errno(&e)),
        }
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
        let mut c = self.lanes.any();
        let r = Self::creator(&mut c, req, parent.0).and_then(|(who, sgid)| {
            let mut mode = perm(mode, umask);
            if sgid {
                mode |= libc::S_ISGID;
            }
            c.mkdir_at(parent.0, name.as_bytes(), mode, who, None)
        });
        Self::reply_new(&mut c, reply, parent.0, r);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut c = self.lanes.any();
        let r = c.unlink_at(parent.0, name.as_bytes());
        Self::reply_removed(&mut c, reply, parent.0, r);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut c = self.lanes.any();
        let r = c.rmdir_at(parent.0, name.as_bytes());
        Self::reply_removed(&mut c, reply, parent.0, r);
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
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::EINVAL);
        }
        let mut c = self.lanes.any();
        if flags.contains(RenameFlags::RENAME_NOREPLACE)
            && c.lookup(newparent.0, newname.as_bytes()).is_ok()
        {
            return reply.error(Errno::EEXIST);
        }
        let r = c.rename_at(parent.0, name.as_bytes(), newparent.0, newname.as_bytes());
        let moved = c.lookup(newparent.0, newname.as_bytes()).map(|a| a.ino);
        if r.is_ok() {
            Self::touch(
                &mut c,
                &[parent.0, newparent.0][..if parent == newparent { 1 } else { 2 }],
                true,
            );
            drop(c);
            // On the moved file's lane: its uncommitted writes come before the change.
            if let Ok(ino) = moved {
                Self::touch(&mut self.lanes.for_ino(ino), &[ino], false);
            }
        }
        Self::reply_empty(reply, r);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = self.lanes.open(ino.0, flags.0, |c| {
            let fd = c.open_ino(ino.0, flags.0)?;
            // An open that truncates drops the set-ID bits as a truncate does.
            if flags.0 & libc::O_TRUNC != 0 && req.uid() != 0 {
                c.drop_set_id_bits(fd)?;
            }
            Ok(fd)
        });
        match r {
            Ok(fh) => reply.opened(FileHandle(fh), open_reply_flags(flags.0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let r = self
            .lanes
            .on_handle_synced(fh.0, ino.0, |c, fd| c.pread(fd, size as usize, offset));
        match r {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self.lanes.on_write(fh.0, ino.0, |c, fd| {
            if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                c.drop_set_id_bits(fd)?;
            }
            c.pwrite(fd, data, offset)
        });
        match r {
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2): commit, so that the data is visible to every client.
        let r = self.lanes.on_handle(fh.0, |c, fd| c.flush(fd));
        Self::reply_empty(reply, r);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let writable = lanes::is_writable(flags.0);
        Self::reply_empty(reply, self.lanes.close(fh.0, ino.0, writable));
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self
            .lanes
            .on_handle_synced(fh.0, ino.0, |c, fd| c.fsync(fd));
        Self::reply_empty(reply, r);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.lanes.any().readdir_ino(ino.0) {
            Ok(entries) => {
                let fh = self.next_dir.fetch_add(1, Ordering::Relaxed);
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
        // A rewind (offset 0) takes a fresh snapshot, so rewinddir sees new entries.
        let cached = if offset == 0 {
            None
        } else {
            self.dirs().get(&fh.0).cloned()
        };
        let entries = match cached {
            Some(e) => e,
            None => match self.lanes.any().readdir_ino(ino.0) {
                Ok(e) => {
                    let e = Arc::new(e);
                    self.dirs().insert(fh.0, Arc::clone(&e));
                    e
                }
                Err(e) => return reply.error(errno(&e)),
            },
        };
        let dots = [
            (ino, fuser::FileType::Directory, OsStr::new(".")),
            (ino, fuser::FileType::Directory, OsStr::new("..")),
        ];
        let all = dots.into_iter().chain(
            entries
                .iter()
                .map(|e| (INodeNo(e.ino), kind(e.mode), OsStr::from_bytes(&e.name))),
        );
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
        Self::reply_empty(reply, self.lanes.any().fsync_dir_ino(ino.0));
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let Some(attr) = HintAttr::from_name(name.as_bytes()) else {
            return reply.error(Errno::ENOTSUP);
        };
        let flags = SetFlags::from_bits(flags);
        self.change_hint(ino.0, |a| xattr::set(attr, a, value, flags), reply);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        // Anything else (the kernel asks for `security.capability` before writes) is absent,
        // answered without a request to a server.
        let Some(attr) = HintAttr::from_name(name.as_bytes()) else {
            return reply.error(Errno::ENODATA);
        };
        match self.lanes.for_ino(ino.0).getattr(ino.0) {
            Ok(a) => match attr.get(&a) {
                Some(v) => reply_value(reply, size, &v),
                None => reply.error(Errno::ENODATA),
            },
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.lanes.for_ino(ino.0).getattr(ino.0) {
            Ok(a) => reply_value(reply, size, &xattr::list(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(attr) = HintAttr::from_name(name.as_bytes()) else {
            return reply.error(Errno::ENODATA);
        };
        self.change_hint(ino.0, |a| xattr::remove(attr, a), reply);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.lanes.any().statfs() {
            Ok(s) => {
                let b = u64::from(BLKSIZE);
                let free = s.bytes_total.saturating_sub(s.bytes_used) / b;
                let ffree = s.inodes_total.saturating_sub(s.inodes_used);
                reply.statfs(
                    s.bytes_total / b,
                    free,
                    free,
                    s.inodes_total,
                    ffree,
                    BLKSIZE,
                    255,
                    BLKSIZE,
                );
            }
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
        flags: i32,
        reply: ReplyCreate,
    ) {
        let start = to_ns(SystemTime::now());
        let r = self.lanes.create(flags, |c| {
            let (who, _) = Self::creator(c, req, parent.0)?;
            let (fd, a) =
                c.create_open_at(parent.0, name.as_bytes(), perm(mode, umask), flags, who)?;
            // A new inode has ctime ≥ start; an existing one opened with O_CREAT does not.
            if a.ctime_ns >= start {
                Self::touch(c, &[parent.0], true);
            }
            Ok((fd, a))
        });
        match r {
            Ok((fh, a)) => reply.created(
                &ATTR_TTL,
                &to_attr(&a),
                Generation(0),
                FileHandle(fh),
                open_reply_flags(flags),
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_o_direct_descriptors_bypass_the_page_cache_and_write_side_by_side() {
        let direct = FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
        assert_eq!(open_reply_flags(libc::O_RDWR | libc::O_DIRECT), direct);
        assert_eq!(
            open_reply_flags(libc::O_RDONLY | libc::O_DIRECT | libc::O_CREAT),
            direct
        );
        for flags in [
            libc::O_RDONLY,
            libc::O_WRONLY | libc::O_APPEND,
            libc::O_RDWR | libc::O_SYNC,
        ] {
            assert_eq!(open_reply_flags(flags), FopenFlags::empty(), "{flags:#o}");
        }
    }

    #[test]
    fn timestamps_round_trip_through_system_time() {
        for ns in [0i64, 1, 1_795_000_000_123_456_789, -5_000_000_001] {
            assert_eq!(to_ns(to_time(ns)), ns);
        }
    }

    #[test]
    fn attributes_keep_type_permissions_and_size() {
        let a = Attr {
            ino: 7,
            mode: libc::S_IFDIR | 0o1755,
            size: 1000,
            nlink: 2,
            ..Default::default()
        };
        let f = to_attr(&a);
        assert_eq!(f.kind, fuser::FileType::Directory);
        assert_eq!(f.perm, 0o1755);
        assert_eq!((f.ino, f.size, f.blocks), (INodeNo(7), 1000, 2));
    }
}
