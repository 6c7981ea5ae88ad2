//! The POSIX API of GoFS (papers/gofs.md §3.7, "GoFS APIs": applications call file-system
//! functions; GoFS resolves paths and keeps open files): path resolution through the engine's
//! lookups (with "." / ".." and symlinks, ELOOP after [`SYMLOOP_MAX`] links), a file
//! descriptor table with per-descriptor offsets, and the calls open/read/write/pread/pwrite/
//! readv/writev/lseek/fsync/close, stat/lstat/fstat, mkdir/rmdir/readdir, unlink/rename,
//! symlink/readlink/link and truncate/ftruncate. Every error maps to an errno value.
//!
//! Access bits are not checked here: the API acts with the rights of its [`Caller`] only for
//! the ownership of new inodes (as the kernel does for root). The FUSE layer leaves permission
//! checks to the kernel (`default_permissions`).

use std::io::{IoSlice, IoSliceMut, SeekFrom};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::FsError;
use crate::fs::{Caller, DirEntry, FileType, Fs, Ino, ROOT_INO, SetAttr, Stat};

/// Most symbolic links followed while resolving one path (Linux's limit).
pub const SYMLOOP_MAX: u32 = 40;

/// Errors of the POSIX API.
#[derive(Debug, thiserror::Error)]
pub enum PosixError {
    /// the engine refused the operation
    #[error(transparent)]
    Fs(#[from] FsError),
    /// the descriptor is not open
    #[error("bad file descriptor {0}")]
    BadFd(u32),
    /// the descriptor is not open for this kind of access
    #[error("file descriptor {0} is not open for {1}")]
    WrongMode(u32, &'static str),
    /// too many symbolic links while resolving a path
    #[error("too many levels of symbolic links in {0:?}")]
    Loop(String),
    /// the path is empty or not absolute
    #[error("invalid path {0:?}: paths are absolute and non-empty")]
    BadPath(String),
    /// the operation does not apply to the last component ("." or "..")
    #[error("invalid last path component in {0:?}")]
    BadLastComponent(String),
    /// a seek went before the start of the file or past the largest offset
    #[error("invalid seek to {0}")]
    BadSeek(i128),
    /// the target of O_CREAT|O_EXCL exists
    #[error("{0:?} exists")]
    Exists(String),
}

impl PosixError {
    /// The POSIX errno value of this error.
    pub fn errno(&self) -> i32 {
        match self {
            Self::Fs(e) => e.errno(),
            Self::BadFd(_) | Self::WrongMode(..) => libc::EBADF,
            Self::Loop(_) => libc::ELOOP,
            Self::BadPath(_) => libc::ENOENT,
            Self::BadLastComponent(_) | Self::BadSeek(_) => libc::EINVAL,
            Self::Exists(_) => libc::EEXIST,
        }
    }
}

/// Result of the POSIX API.
pub type Result<T> = std::result::Result<T, PosixError>;

/// A file descriptor of a [`Posix`] instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fd(pub u32);

/// How [`Posix::open`] opens a file (the O_* flags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenFlags {
    /// Open for reading.
    pub read: bool,
    /// Open for writing.
    pub write: bool,
    /// O_CREAT: create a regular file if the name does not exist.
    pub create: bool,
    /// O_EXCL: with `create`, fail if the name exists.
    pub excl: bool,
    /// O_TRUNC: truncate a regular file to length 0 (needs `write`).
    pub trunc: bool,
    /// O_APPEND: every write goes to the end of the file.
    pub append: bool,
    /// O_DIRECTORY: fail unless the path names a directory.
    pub directory: bool,
}

impl OpenFlags {
    /// O_RDONLY.
    pub const READ: Self = Self {
        read: true,
        write: false,
        create: false,
        excl: false,
        trunc: false,
        append: false,
        directory: false,
    };
    /// O_RDWR.
    pub const READ_WRITE: Self = Self {
        write: true,
        ..Self::READ
    };
    /// O_WRONLY | O_CREAT | O_TRUNC (what `creat` does).
    pub const CREATE_TRUNC: Self = Self {
        read: false,
        write: true,
        create: true,
        trunc: true,
        ..Self::READ
    };
}

#[derive(Debug, Clone, Copy)]
struct OpenFile {
    ino: Ino,
    offset: u64,
    flags: OpenFlags,
}

/// A POSIX-like view of a mounted [`Fs`], with its own descriptor table.
#[derive(Debug)]
pub struct Posix {
    fs: Arc<Fs>,
    who: Caller,
    fds: Mutex<Vec<Option<OpenFile>>>,
}

/// A resolved path: the parent directory and the last name (empty for "/").
struct Parent {
    dir: Ino,
    name: Vec<u8>,
}

impl Posix {
    /// A POSIX view of `fs`; new inodes belong to `who`.
    pub fn new(fs: Arc<Fs>, who: Caller) -> Self {
        Self {
            fs,
            who,
            fds: Mutex::new(Vec::new()),
        }
    }

    /// The engine under this view.
    pub fn fs(&self) -> &Arc<Fs> {
        &self.fs
    }

    fn table(&self) -> MutexGuard<'_, Vec<Option<OpenFile>>> {
        // A panic while holding the lock cannot leave the table half-updated (every update is
        // one assignment), so a poisoned lock is still usable.
        self.fds.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn file(&self, fd: Fd) -> Result<OpenFile> {
        self.table()
            .get(fd.0 as usize)
            .copied()
            .flatten()
            .ok_or(PosixError::BadFd(fd.0))
    }

    /// Resolves `path` to its parent directory and last name, following symlinks in the
    /// directories on the way. "/" resolves to (root, "").
    fn resolve_parent(&self, path: &str) -> Result<Parent> {
        let mut budget = SYMLOOP_MAX;
        self.walk_parent(path, &mut budget)
    }

    fn walk_parent(&self, path: &str, budget: &mut u32) -> Result<Parent> {
        if !path.starts_with('/') {
            return Err(PosixError::BadPath(path.to_owned()));
        }
        // Pending components, last first, so symlink targets can be spliced in at the front.
        let mut todo: Vec<Vec<u8>> = components(path.as_bytes());
        let mut stack: Vec<Ino> = vec![ROOT_INO];
        while todo.len() > 1 {
            let name = todo.pop().unwrap_or_default();
            let dir = *stack.last().unwrap_or(&ROOT_INO);
            match name.as_slice() {
                b"." => continue,
                b".." => {
                    if stack.len() > 1 {
                        stack.pop();
                    }
                    continue;
                }
                _ => {}
            }
            let st = self.fs.lookup(dir, &name)?;
            match st.kind {
                FileType::Directory => stack.push(st.ino),
                FileType::Symlink => {
                    let target = self.take_link(st.ino, budget, path)?;
                    if target.first() == Some(&b'/') {
                        stack.truncate(1);
                    }
                    todo.extend(components(&target));
                }
                _ => return Err(FsError::NotDir.into()),
            }
        }
        let dir = *stack.last().unwrap_or(&ROOT_INO);
        // A directory has no parent entry to name it by, so ".." at the end is resolved here.
        match todo.pop() {
            None => Ok(Parent {
                dir: ROOT_INO,
                name: Vec::new(),
            }),
            Some(name) if name == b".." => {
                let up = if stack.len() > 1 {
                    stack[stack.len() - 2]
                } else {
                    ROOT_INO
                };
                Ok(Parent {
                    dir: up,
                    name: b".".to_vec(),
                })
            }
            Some(name) => Ok(Parent { dir, name }),
        }
    }

    fn take_link(&self, ino: Ino, budget: &mut u32, path: &str) -> Result<Vec<u8>> {
        if *budget == 0 {
            return Err(PosixError::Loop(path.to_owned()));
        }
        *budget -= 1;
        let target = self.fs.readlink(ino)?;
        if target.is_empty() {
            return Err(FsError::NotFound.into());
        }
        Ok(target)
    }

    /// Resolves `path` to the inode it names, following a symlink at the end when `follow`.
    pub(crate) fn resolve(&self, path: &str, follow: bool) -> Result<Stat> {
        let mut budget = SYMLOOP_MAX;
        let mut path = path.to_owned();
        loop {
            let p = self.walk_parent(&path, &mut budget)?;
            let st = self.stat_entry(&p)?;
            if !(follow && st.kind == FileType::Symlink) {
                return Ok(st);
            }
            let target = self.take_link(st.ino, &mut budget, &path)?;
            let target = String::from_utf8_lossy(&target).into_owned();
            path = if target.starts_with('/') {
                target
            } else {
                // Relative targets are resolved in the directory holding the link.
                format!("{}/{}", dir_part(&path), target)
            };
        }
    }

    fn stat_entry(&self, p: &Parent) -> Result<Stat> {
        if p.name.is_empty() || p.name == b"." {
            return Ok(self.fs.getattr(p.dir)?);
        }
        Ok(self.fs.lookup(p.dir, &p.name)?)
    }

    /// Opens (and with `create` makes) the file at `path`; returns the lowest free descriptor.
    pub fn open(&self, path: &str, flags: OpenFlags, mode: u16) -> Result<Fd> {
        let st = if flags.create {
            let p = self.resolve_parent(path)?;
            match self.stat_entry(&p) {
                Ok(_) if flags.excl => return Err(PosixError::Exists(path.to_owned())),
                Ok(_) => self.resolve(path, true)?,
                Err(PosixError::Fs(FsError::NotFound)) => {
                    self.named(&p, path)?;
                    self.fs.create(
                        p.dir,
                        &p.name,
                        FileType::Regular,
                        mode & 0o7777,
                        0,
                        self.who,
                    )?
                }
                Err(e) => return Err(e),
            }
        } else {
            self.resolve(path, true)?
        };
        if flags.directory && st.kind != FileType::Directory {
            return Err(FsError::NotDir.into());
        }
        if st.kind == FileType::Directory && (flags.write || flags.trunc) {
            return Err(FsError::IsDir.into());
        }
        if flags.trunc && flags.write && st.kind == FileType::Regular && st.size > 0 {
            self.fs.setattr(
                st.ino,
                &SetAttr {
                    size: Some(0),
                    ..SetAttr::default()
                },
            )?;
        }
        self.fs.open_inode(st.ino)?;
        let file = OpenFile {
            ino: st.ino,
            offset: 0,
            flags,
        };
        let mut table = self.table();
        let slot = match table.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                table.push(None);
                table.len() - 1
            }
        };
        table[slot] = Some(file);
        Ok(Fd(slot as u32))
    }

    /// Closes `fd`; an unlinked file's data goes when its last descriptor closes.
    pub fn close(&self, fd: Fd) -> Result<()> {
        let file = self
            .table()
            .get_mut(fd.0 as usize)
            .and_then(Option::take)
            .ok_or(PosixError::BadFd(fd.0))?;
        Ok(self.fs.release_inode(file.ino)?)
    }

    fn readable(&self, fd: Fd) -> Result<OpenFile> {
        let f = self.file(fd)?;
        if !f.flags.read {
            return Err(PosixError::WrongMode(fd.0, "reading"));
        }
        Ok(f)
    }

    fn writable(&self, fd: Fd) -> Result<OpenFile> {
        let f = self.file(fd)?;
        if !f.flags.write {
            return Err(PosixError::WrongMode(fd.0, "writing"));
        }
        Ok(f)
    }

    fn set_offset(&self, fd: Fd, offset: u64) {
        if let Some(Some(f)) = self.table().get_mut(fd.0 as usize) {
            f.offset = offset;
        }
    }

    /// Reads at `offset` without moving the descriptor's offset; short only at end of file.
    pub fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> Result<usize> {
        let f = self.readable(fd)?;
        Ok(self.fs.read(f.ino, offset, buf)?)
    }

    /// Writes at `offset` without moving the descriptor's offset.
    pub fn pwrite(&self, fd: Fd, data: &[u8], offset: u64) -> Result<usize> {
        let f = self.writable(fd)?;
        Ok(self.fs.write(f.ino, offset, data)?)
    }

    /// Reads at the descriptor's offset and advances it.
    pub fn read(&self, fd: Fd, buf: &mut [u8]) -> Result<usize> {
        let f = self.readable(fd)?;
        let n = self.fs.read(f.ino, f.offset, buf)?;
        self.set_offset(fd, f.offset + n as u64);
        Ok(n)
    }

    /// Writes at the descriptor's offset (at the end with `append`) and advances it.
    pub fn write(&self, fd: Fd, data: &[u8]) -> Result<usize> {
        let f = self.writable(fd)?;
        let at = self.write_offset(&f)?;
        let n = self.fs.write(f.ino, at, data)?;
        self.set_offset(fd, at + n as u64);
        Ok(n)
    }

    fn write_offset(&self, f: &OpenFile) -> Result<u64> {
        Ok(if f.flags.append {
            self.fs.getattr(f.ino)?.size
        } else {
            f.offset
        })
    }

    /// Reads into `bufs` in order at the descriptor's offset (readv); stops early at EOF.
    pub fn readv(&self, fd: Fd, bufs: &mut [IoSliceMut<'_>]) -> Result<usize> {
        let f = self.readable(fd)?;
        let mut done = 0usize;
        for b in bufs.iter_mut() {
            let n = self.fs.read(f.ino, f.offset + done as u64, b)?;
            done += n;
            if n < b.len() {
                break;
            }
        }
        self.set_offset(fd, f.offset + done as u64);
        Ok(done)
    }

    /// Writes `bufs` in order at the descriptor's offset (writev).
    pub fn writev(&self, fd: Fd, bufs: &[IoSlice<'_>]) -> Result<usize> {
        let f = self.writable(fd)?;
        let at = self.write_offset(&f)?;
        let mut done = 0usize;
        for b in bufs {
            done += self.fs.write(f.ino, at + done as u64, b)?;
        }
        self.set_offset(fd, at + done as u64);
        Ok(done)
    }

    /// Moves the descriptor's offset; returns the new offset.
    pub fn lseek(&self, fd: Fd, pos: SeekFrom) -> Result<u64> {
        let f = self.file(fd)?;
        let target: i128 = match pos {
            SeekFrom::Start(o) => i128::from(o),
            SeekFrom::Current(d) => i128::from(f.offset) + i128::from(d),
            SeekFrom::End(d) => i128::from(self.fs.getattr(f.ino)?.size) + i128::from(d),
        };
        let offset = u64::try_from(target)
            .ok()
            .filter(|&o| i64::try_from(o).is_ok())
            .ok_or(PosixError::BadSeek(target))?;
        self.set_offset(fd, offset);
        Ok(offset)
    }

    /// Makes the file durable.
    pub fn fsync(&self, fd: Fd) -> Result<()> {
        let f = self.file(fd)?;
        Ok(self.fs.fsync(f.ino)?)
    }

    /// Attributes of the open file.
    pub fn fstat(&self, fd: Fd) -> Result<Stat> {
        let f = self.file(fd)?;
        Ok(self.fs.getattr(f.ino)?)
    }

    /// Attributes of `path`, following a symlink at the end.
    pub fn stat(&self, path: &str) -> Result<Stat> {
        self.resolve(path, true)
    }

    /// Attributes of `path` itself (a symlink at the end is not followed).
    pub fn lstat(&self, path: &str) -> Result<Stat> {
        self.resolve(path, false)
    }

    /// EINVAL when the last component is missing ("/") or is "." or "..".
    fn named(&self, p: &Parent, path: &str) -> Result<()> {
        if p.name.is_empty() || p.name == b"." || p.name == b".." {
            return Err(PosixError::BadLastComponent(path.to_owned()));
        }
        Ok(())
    }

    /// Makes a directory.
    pub fn mkdir(&self, path: &str, mode: u16) -> Result<Stat> {
        let p = self.resolve_parent(path)?;
        if p.name.is_empty() || p.name == b"." {
            return Err(FsError::Exists.into());
        }
        Ok(self.fs.mkdir(p.dir, &p.name, mode & 0o7777, self.who)?)
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, path: &str) -> Result<()> {
        let p = self.resolve_parent(path)?;
        if p.name.is_empty() {
            return Err(FsError::PermissionDenied.into());
        }
        self.named(&p, path)?;
        Ok(self.fs.rmdir(p.dir, &p.name)?)
    }

    /// The entries of the directory at `path` (without "." and "..").
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        let st = self.resolve(path, true)?;
        if st.kind != FileType::Directory {
            return Err(FsError::NotDir.into());
        }
        Ok(self.fs.readdir(st.ino)?)
    }

    /// Removes a name (not a directory).
    pub fn unlink(&self, path: &str) -> Result<()> {
        let p = self.resolve_parent(path)?;
        if p.name.is_empty() || p.name == b"." {
            return Err(FsError::IsDir.into());
        }
        Ok(self.fs.unlink(p.dir, &p.name)?)
    }

    /// Renames `from` to `to`, replacing `to` as POSIX allows.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        let a = self.resolve_parent(from)?;
        let b = self.resolve_parent(to)?;
        self.named(&a, from)?;
        self.named(&b, to)?;
        Ok(self.fs.rename(a.dir, &a.name, b.dir, &b.name)?)
    }

    /// Makes a symbolic link at `path` pointing to `target`.
    pub fn symlink(&self, target: &str, path: &str) -> Result<Stat> {
        let p = self.resolve_parent(path)?;
        self.named(&p, path)?;
        Ok(self
            .fs
            .symlink(p.dir, &p.name, target.as_bytes(), self.who)?)
    }

    /// The target of the symbolic link at `path`.
    pub fn readlink(&self, path: &str) -> Result<Vec<u8>> {
        let st = self.lstat(path)?;
        if st.kind != FileType::Symlink {
            return Err(FsError::InvalidArgument(format!("{path:?} is not a symlink")).into());
        }
        Ok(self.fs.readlink(st.ino)?)
    }

    /// Makes `new` another name of the file at `existing` (which must not be a directory).
    pub fn link(&self, existing: &str, new: &str) -> Result<Stat> {
        let st = self.lstat(existing)?;
        if st.kind == FileType::Directory {
            return Err(FsError::PermissionDenied.into());
        }
        let p = self.resolve_parent(new)?;
        self.named(&p, new)?;
        Ok(self.fs.link(st.ino, p.dir, &p.name)?)
    }

    fn resize(&self, st: &Stat, len: u64) -> Result<()> {
        match st.kind {
            FileType::Regular => {}
            FileType::Directory => return Err(FsError::IsDir.into()),
            _ => return Err(FsError::InvalidArgument("truncate of a special file".into()).into()),
        }
        self.fs.setattr(
            st.ino,
            &SetAttr {
                size: Some(len),
                ..SetAttr::default()
            },
        )?;
        Ok(())
    }

    /// Sets the length of the file at `path` (cutting or zero-extending it).
    pub fn truncate(&self, path: &str, len: u64) -> Result<()> {
        let st = self.stat(path)?;
        self.resize(&st, len)
    }

    /// Sets the length of the open file (which must be open for writing).
    pub fn ftruncate(&self, fd: Fd, len: u64) -> Result<()> {
        let f = self.writable(fd)?;
        let st = self.fs.getattr(f.ino)?;
        self.resize(&st, len)
    }
}

impl Drop for Posix {
    fn drop(&mut self) {
        // Descriptors still open hold inode references; give them back so that unlinked
        // files are freed.
        let open: Vec<OpenFile> = self.table().drain(..).flatten().collect();
        for f in open {
            if let Err(e) = self.fs.release_inode(f.ino) {
                tracing::warn!(ino = f.ino, "releasing an open file at drop: {e}");
            }
        }
    }
}

/// The components of `path`, last first (empty components dropped).
fn components(path: &[u8]) -> Vec<Vec<u8>> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .rev()
        .map(<[u8]>::to_vec)
        .collect()
}

/// `path` without its last component ("/" for top-level names).
fn dir_part(path: &str) -> &str {
    let trimmed = path.trim_end_matches('/');
    match trimmed.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &trimmed[..i],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_come_last_first_without_empty_parts() {
        assert_eq!(
            components(b"//a/./b//c/"),
            vec![b"c".to_vec(), b"b".to_vec(), b".".to_vec(), b"a".to_vec()]
        );
        assert!(components(b"/").is_empty());
    }

    #[test]
    fn dir_part_strips_the_last_component() {
        assert_eq!(dir_part("/a/b/c"), "/a/b");
        assert_eq!(dir_part("/a"), "/");
        assert_eq!(dir_part("/a/b/"), "/a");
    }

    #[test]
    fn errors_map_to_their_errno() {
        assert_eq!(PosixError::Loop("/x".into()).errno(), libc::ELOOP);
        assert_eq!(PosixError::BadFd(3).errno(), libc::EBADF);
        assert_eq!(PosixError::Fs(FsError::NotEmpty).errno(), libc::ENOTEMPTY);
        assert_eq!(PosixError::BadSeek(-1).errno(), libc::EINVAL);
    }
}
