//! The POSIX operations of the engine (papers/gofs.md §3.5: the host client's view of the
//! file system): name and type rules, link counts, timestamps, orphans.

use super::engine::Engine;
use super::{Caller, DirEntry, FileType, Ino, SetAttr, Stat, StatFs, Timespec};
use crate::error::{FsError, Result};
use crate::format::dentry::{ft, new_dir_block};
use crate::format::node::{
    F2FS_EXTRA_ATTR, F2FS_INLINE_XATTR, Node, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT,
    S_IFREG, S_IFSOCK,
};
use crate::format::superblock::{FEATURE_EXTRA_ATTR, FEATURE_FLEXIBLE_INLINE_XATTR};
use crate::format::{BLOCK_SIZE, NAME_LEN, corrupt};

/// Most links an inode may have.
const LINK_MAX: u32 = 0xFFFF_FFFE;

fn now() -> Timespec {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timespec {
        sec: d.as_secs() as i64,
        nsec: d.subsec_nanos(),
    }
}

fn kind_of(mode: u16) -> Option<FileType> {
    Some(match mode & S_IFMT {
        S_IFREG => FileType::Regular,
        S_IFDIR => FileType::Directory,
        S_IFLNK => FileType::Symlink,
        S_IFCHR => FileType::CharDevice,
        S_IFBLK => FileType::BlockDevice,
        S_IFIFO => FileType::Fifo,
        S_IFSOCK => FileType::Socket,
        _ => return None,
    })
}

fn type_bits(k: FileType) -> u16 {
    match k {
        FileType::Regular => S_IFREG,
        FileType::Directory => S_IFDIR,
        FileType::Symlink => S_IFLNK,
        FileType::CharDevice => S_IFCHR,
        FileType::BlockDevice => S_IFBLK,
        FileType::Fifo => S_IFIFO,
        FileType::Socket => S_IFSOCK,
    }
}

fn dentry_type(k: FileType) -> u8 {
    match k {
        FileType::Regular => ft::REG_FILE,
        FileType::Directory => ft::DIR,
        FileType::Symlink => ft::SYMLINK,
        FileType::CharDevice => ft::CHRDEV,
        FileType::BlockDevice => ft::BLKDEV,
        FileType::Fifo => ft::FIFO,
        FileType::Socket => ft::SOCK,
    }
}

fn kind_of_dentry(t: u8) -> FileType {
    match t {
        ft::DIR => FileType::Directory,
        ft::SYMLINK => FileType::Symlink,
        ft::CHRDEV => FileType::CharDevice,
        ft::BLKDEV => FileType::BlockDevice,
        ft::FIFO => FileType::Fifo,
        ft::SOCK => FileType::Socket,
        _ => FileType::Regular,
    }
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_LEN {
        return Err(FsError::NameTooLong);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(FsError::InvalidArgument(format!(
            "name {:?}",
            String::from_utf8_lossy(name)
        )));
    }
    Ok(())
}

fn set_mtime(n: &mut Node, t: Timespec) {
    n.set_mtime(t.sec as u64);
    n.set_mtime_nsec(t.nsec);
}

fn set_ctime(n: &mut Node, t: Timespec) {
    n.set_ctime(t.sec as u64);
    n.set_ctime_nsec(t.nsec);
}

/// Linux `dev_t` (as `stat` reports it) to the kernel's major/minor.
fn dev_split(rdev: u32) -> (u32, u32) {
    (
        (rdev & 0xfff00) >> 8,
        (rdev & 0xff) | ((rdev >> 12) & 0xfff00),
    )
}

impl Engine {
    /// Frees orphan inodes left by a crash (or an unmount with files still open).
    pub fn recover_orphans(&mut self) -> Result<()> {
        if self.orphans.is_empty() || self.read_only {
            return Ok(());
        }
        for ino in std::mem::take(&mut self.orphans) {
            self.remove_inode(ino)?;
        }
        self.checkpoint(true)
    }

    /// File-system statistics.
    pub fn statfs(&mut self) -> Result<StatFs> {
        let user = self.cp.user_block_count;
        Ok(StatFs {
            block_size: BLOCK_SIZE as u32,
            blocks: user,
            blocks_free: user.saturating_sub(self.segs.valid_blocks()),
            files: self.nat.entries.len() as u64,
            files_free: self.nat.free_count(),
            name_max: NAME_LEN as u32,
        })
    }

    /// Attributes of `ino`.
    pub fn stat(&mut self, ino: Ino) -> Result<Stat> {
        let flexible = self.flexible();
        let n = self.inode(ino)?;
        let mode = n.mode();
        let kind = kind_of(mode).ok_or_else(|| corrupt(format!("inode {ino} mode {mode:#o}")))?;
        let rdev = if matches!(kind, FileType::CharDevice | FileType::BlockDevice) {
            let old = n.i_addr(0);
            if old != 0 {
                let (ma, mi) = ((old >> 8) & 0xff, old & 0xff);
                (mi & 0xff) | (ma << 8)
            } else {
                n.i_addr(1)
            }
        } else {
            0
        };
        let _ = flexible;
        let ts = |s: u64, ns: u32| Timespec {
            sec: s as i64,
            nsec: ns,
        };
        Ok(Stat {
            ino,
            kind,
            mode: mode & !S_IFMT,
            nlink: n.links(),
            uid: n.uid(),
            gid: n.gid(),
            size: n.size(),
            blocks: n.blocks().saturating_sub(1) * (BLOCK_SIZE as u64 / 512),
            rdev,
            atime: ts(n.atime(), n.atime_nsec()),
            mtime: ts(n.mtime(), n.mtime_nsec()),
            ctime: ts(n.ctime(), n.ctime_nsec()),
        })
    }

    /// Changes attributes.
    pub fn setattr(&mut self, ino: Ino, a: &SetAttr) -> Result<Stat> {
        self.writable()?;
        let t = now();
        if let Some(size) = a.size {
            let n = self.inode(ino)?;
            match kind_of(n.mode()) {
                Some(FileType::Directory) => return Err(FsError::IsDir),
                Some(FileType::Regular) => {}
                _ => return Err(FsError::InvalidArgument("size of a special file".into())),
            }
            if size != n.size() {
                super::gc::maybe_collect(self)?;
                self.truncate(ino, size)?;
                let n = self.inode(ino)?;
                set_mtime(n, t);
            }
        }
        let n = self.inode(ino)?;
        if let Some(m) = a.mode {
            n.set_mode((n.mode() & S_IFMT) | (m & !S_IFMT));
        }
        if let Some(u) = a.uid {
            n.set_uid(u);
        }
        if let Some(g) = a.gid {
            n.set_gid(g);
        }
        if let Some(x) = a.atime {
            n.set_atime(x.sec as u64);
            n.set_atime_nsec(x.nsec);
        }
        if let Some(x) = a.mtime {
            set_mtime(n, x);
        }
        set_ctime(n, a.ctime.unwrap_or(t));
        self.touch(ino);
        self.stat(ino)
    }

    fn dir_inode(&mut self, dir: Ino) -> Result<()> {
        if self.is_dir(dir)? {
            Ok(())
        } else {
            Err(FsError::NotDir)
        }
    }

    /// Looks `name` up in `parent`.
    pub fn lookup(&mut self, parent: Ino, name: &[u8]) -> Result<Stat> {
        self.dir_inode(parent)?;
        if name.len() > NAME_LEN {
            return Err(FsError::NameTooLong);
        }
        if name == b"." {
            return self.stat(parent);
        }
        if name == b".." {
            let up = self
                .find_entry(parent, b"..")?
                .map(|f| f.d.ino)
                .unwrap_or_else(|| self.inode(parent).map(|n| n.pino()).unwrap_or(parent));
            return self.stat(up);
        }
        let f = self.find_entry(parent, name)?.ok_or(FsError::NotFound)?;
        self.stat(f.d.ino)
    }

    /// Entries without "." and "..".
    pub fn readdir(&mut self, dir: Ino) -> Result<Vec<DirEntry>> {
        self.dir_inode(dir)?;
        Ok(self
            .dir_entries(dir)?
            .into_iter()
            .filter(|d| d.name != b"." && d.name != b"..")
            .map(|d| DirEntry {
                name: d.name,
                ino: d.ino,
                kind: kind_of_dentry(d.file_type),
            })
            .collect())
    }

    /// Creates any kind of inode named `name` in `parent`; `data` is a symlink's target.
    #[allow(clippy::too_many_arguments)]
    pub fn make(
        &mut self,
        parent: Ino,
        name: &[u8],
        kind: FileType,
        mode: u16,
        rdev: u32,
        who: Caller,
        data: &[u8],
    ) -> Result<Stat> {
        self.writable()?;
        check_name(name)?;
        self.dir_inode(parent)?;
        if self.find_entry(parent, name)?.is_some() {
            return Err(FsError::Exists);
        }
        let is_dir = kind == FileType::Directory;
        if is_dir && self.inode(parent)?.links() >= LINK_MAX {
            return Err(FsError::TooManyLinks);
        }
        super::gc::maybe_collect(self)?;
        let ino = self.nat.alloc(0)?;
        let t = now();
        let features = self.sb.feature;
        let n = self.new_node(ino, ino, 0, !is_dir);
        n.set_mode(type_bits(kind) | (mode & !S_IFMT));
        n.set_uid(who.uid);
        n.set_gid(who.gid);
        n.set_links(if is_dir { 2 } else { 1 });
        n.set_blocks(1);
        for (s, ns) in [(32, 56), (40, 60), (48, 64)] {
            crate::format::put_u64(&mut n.0[..], s, t.sec as u64);
            crate::format::put_u32(&mut n.0[..], ns, t.nsec);
        }
        n.set_generation(ino);
        n.set_pino(parent);
        n.set_name(name);
        if features & FEATURE_EXTRA_ATTR != 0 {
            n.set_inline_flags(F2FS_EXTRA_ATTR | F2FS_INLINE_XATTR);
            n.set_extra_isize(36);
            if features & FEATURE_FLEXIBLE_INLINE_XATTR != 0 {
                n.set_inline_xattr_size(50);
            }
        }
        if matches!(kind, FileType::CharDevice | FileType::BlockDevice) {
            let (ma, mi) = dev_split(rdev);
            if ma < 256 && mi < 256 {
                n.set_i_addr(0, (ma << 8) | mi);
            } else {
                n.set_i_addr(1, (mi & 0xff) | (ma << 8) | ((mi & !0xff) << 12));
            }
        }
        if is_dir {
            n.set_current_depth(1);
            self.write_blocks(ino, 0, &new_dir_block(ino, parent)[..])?;
            self.inode(ino)?.set_size(BLOCK_SIZE as u64);
        }
        if kind == FileType::Symlink {
            self.write_data(ino, 0, data)?;
        }
        if let Err(e) = self.add_entry(parent, name, ino, dentry_type(kind)) {
            self.remove_inode(ino)?;
            return Err(e);
        }
        let p = self.inode(parent)?;
        if is_dir {
            p.set_links(p.links() + 1);
        }
        set_mtime(p, t);
        set_ctime(p, t);
        self.touch(parent);
        self.stat(ino)
    }

    /// Target of a symlink.
    pub fn readlink(&mut self, ino: Ino) -> Result<Vec<u8>> {
        let n = self.inode(ino)?;
        if n.mode() & S_IFMT != S_IFLNK {
            return Err(FsError::InvalidArgument(format!(
                "inode {ino} is not a symlink"
            )));
        }
        let size = n.size();
        if size == 0 || size >= BLOCK_SIZE as u64 {
            return Err(corrupt(format!("symlink {ino} of size {size}")));
        }
        let mut buf = vec![0u8; size as usize];
        let got = self.read_data(ino, 0, &mut buf)?;
        buf.truncate(got);
        Ok(buf)
    }

    /// Adds a hard link.
    pub fn link(&mut self, ino: Ino, parent: Ino, name: &[u8]) -> Result<Stat> {
        self.writable()?;
        check_name(name)?;
        self.dir_inode(parent)?;
        let n = self.inode(ino)?;
        let kind = kind_of(n.mode()).ok_or_else(|| corrupt(format!("inode {ino} mode")))?;
        if kind == FileType::Directory {
            return Err(FsError::PermissionDenied);
        }
        if n.links() >= LINK_MAX {
            return Err(FsError::TooManyLinks);
        }
        if n.links() == 0 {
            return Err(FsError::NotFound);
        }
        if self.find_entry(parent, name)?.is_some() {
            return Err(FsError::Exists);
        }
        super::gc::maybe_collect(self)?;
        self.add_entry(parent, name, ino, dentry_type(kind))?;
        let t = now();
        let n = self.inode(ino)?;
        n.set_links(n.links() + 1);
        set_ctime(n, t);
        self.touch(ino);
        let p = self.inode(parent)?;
        set_mtime(p, t);
        set_ctime(p, t);
        self.touch(parent);
        self.stat(ino)
    }

    /// Drops one link of `ino`; the inode goes away (or becomes an orphan while open).
    fn drop_link(&mut self, ino: Ino, dir: bool) -> Result<()> {
        let t = now();
        let n = self.inode(ino)?;
        let links = if dir { 0 } else { n.links().saturating_sub(1) };
        n.set_links(links);
        set_ctime(n, t);
        self.touch(ino);
        if links == 0 {
            if self.open.get(&ino).copied().unwrap_or(0) > 0 {
                self.orphans.insert(ino);
            } else {
                self.remove_inode(ino)?;
            }
        }
        Ok(())
    }

    /// unlink (`dir` false) or rmdir (`dir` true).
    pub fn remove(&mut self, parent: Ino, name: &[u8], dir: bool) -> Result<()> {
        self.writable()?;
        self.dir_inode(parent)?;
        if name.len() > NAME_LEN {
            return Err(FsError::NameTooLong);
        }
        if dir && name == b"." {
            return Err(FsError::InvalidArgument("rmdir of \".\"".into()));
        }
        if dir && name == b".." {
            return Err(FsError::NotEmpty);
        }
        let f = self.find_entry(parent, name)?.ok_or(FsError::NotFound)?;
        let child = f.d.ino;
        let is_dir = self.is_dir(child)?;
        match (dir, is_dir) {
            (false, true) => return Err(FsError::IsDir),
            (true, false) => return Err(FsError::NotDir),
            (true, true) if !self.dir_is_empty(child)? => return Err(FsError::NotEmpty),
            _ => {}
        }
        super::gc::maybe_collect(self)?;
        self.remove_entry(parent, &f)?;
        let t = now();
        let p = self.inode(parent)?;
        if is_dir {
            p.set_links(p.links().saturating_sub(1));
        }
        set_mtime(p, t);
        set_ctime(p, t);
        self.touch(parent);
        self.drop_link(child, is_dir)
    }

    /// Whether `dir` is `anc` or lies below it.
    fn is_under(&mut self, mut dir: Ino, anc: Ino) -> Result<bool> {
        let root = self.sb.root_ino;
        for _ in 0..4096 {
            if dir == anc {
                return Ok(true);
            }
            if dir == root {
                return Ok(false);
            }
            let up = self.find_entry(dir, b"..")?.map(|f| f.d.ino);
            dir = match up {
                Some(u) => u,
                None => self.inode(dir)?.pino(),
            };
        }
        Err(corrupt(format!("directory loop above inode {dir}")))
    }

    /// Renames `parent/name` to `new_parent/new_name`, replacing a compatible target.
    pub fn rename(&mut self, parent: Ino, name: &[u8], np: Ino, new_name: &[u8]) -> Result<()> {
        self.writable()?;
        check_name(new_name)?;
        if name.len() > NAME_LEN {
            return Err(FsError::NameTooLong);
        }
        self.dir_inode(parent)?;
        self.dir_inode(np)?;
        let src = self.find_entry(parent, name)?.ok_or(FsError::NotFound)?;
        let ino = src.d.ino;
        let src_dir = self.is_dir(ino)?;
        if src_dir && self.is_under(np, ino)? {
            return Err(FsError::InvalidArgument(
                "rename of a directory into itself".into(),
            ));
        }
        let dst = self.find_entry(np, new_name)?;
        if let Some(d) = &dst {
            if d.d.ino == ino {
                return Ok(());
            }
            let dst_dir = self.is_dir(d.d.ino)?;
            match (src_dir, dst_dir) {
                (true, false) => return Err(FsError::NotDir),
                (false, true) => return Err(FsError::IsDir),
                (true, true) if !self.dir_is_empty(d.d.ino)? => return Err(FsError::NotEmpty),
                _ => {}
            }
        }
        super::gc::maybe_collect(self)?;
        let t = now();
        let kind = src.d.file_type;
        match &dst {
            Some(d) => {
                let old = d.d.ino;
                let old_dir = self.is_dir(old)?;
                self.retarget_entry(np, d, ino, kind)?;
                if old_dir {
                    let p = self.inode(np)?;
                    p.set_links(p.links().saturating_sub(1));
                }
                self.drop_link(old, old_dir)?;
            }
            None => self.add_entry(np, new_name, ino, kind)?,
        }
        // The source entry may have moved if the target was added to the same directory.
        let src = self
            .find_entry(parent, name)?
            .ok_or_else(|| corrupt("rename source vanished"))?;
        self.remove_entry(parent, &src)?;
        if src_dir && parent != np {
            if let Some(dd) = self.find_entry(ino, b"..")? {
                self.retarget_entry(ino, &dd, np, ft::DIR)?;
            }
            let p = self.inode(parent)?;
            p.set_links(p.links().saturating_sub(1));
            let q = self.inode(np)?;
            q.set_links(q.links() + 1);
        }
        let n = self.inode(ino)?;
        n.set_pino(np);
        n.set_name(new_name);
        set_ctime(n, t);
        self.touch(ino);
        for d in [parent, np] {
            let p = self.inode(d)?;
            set_mtime(p, t);
            set_ctime(p, t);
            self.touch(d);
        }
        Ok(())
    }

    /// Writes file bytes.
    pub fn write(&mut self, ino: Ino, off: u64, data: &[u8]) -> Result<usize> {
        self.writable()?;
        let n = self.inode(ino)?;
        match kind_of(n.mode()) {
            Some(FileType::Regular) => {}
            Some(FileType::Directory) => return Err(FsError::IsDir),
            _ => {
                return Err(FsError::InvalidArgument(format!(
                    "write to special inode {ino}"
                )));
            }
        }
        super::gc::maybe_collect(self)?;
        let done = self.write_data(ino, off, data)?;
        let t = now();
        let n = self.inode(ino)?;
        set_mtime(n, t);
        set_ctime(n, t);
        self.touch(ino);
        Ok(done)
    }

    /// Drops an open reference.
    pub fn release(&mut self, ino: Ino) -> Result<()> {
        let c = self.open.get(&ino).copied().unwrap_or(0);
        if c <= 1 {
            self.open.remove(&ino);
            if self.orphans.contains(&ino) && !self.read_only {
                self.remove_inode(ino)?;
            }
        } else {
            self.open.insert(ino, c - 1);
        }
        Ok(())
    }
}
