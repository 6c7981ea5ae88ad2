//! pRPC messages (PeakFS §III-A, §III-D): the opcodes of every metadata and data operation and
//! their request/reply payloads, carried in `fabric` frames.
//!
//! Every request payload starts with the request's characteristic value λ (u64, §III-C1): the
//! client computes it with [`crate::placement::Layout`], sends the request to server
//! `λ mod servers`, and that server's communicating thread forwards it to worker
//! `λ / servers mod workers`. All integers are little-endian; a name is the rest of the
//! payload or length-prefixed (u16) when another name follows. Failures come back as fabric
//! `ERROR` frames whose code is [`Errno::error_code`] (`USER_FIRST + errno`).
//!
//! Decoding never panics: any short, long or out-of-range payload is a [`ProtoError`].
//!
//! # HELLO
//!
//! A client's first frame on a connection is [`op::HELLO`] with the index of the
//! communicating thread it asks for ([`hello_payload`]). The server's acceptor peeks at it
//! before it hands the connection to a thread, so that client `i` is served by thread
//! `i mod T` (§III-B) with `i` numbered by the master across the whole cluster, not by the
//! order in which one server happened to accept. A connection that says nothing else first
//! gets the next thread in turn; the thread answers HELLO with an empty reply.
//!
//! # Multi-slice operations
//!
//! Every request runs on one slice, as one PStore transaction. The client drives operations
//! that span slices as ordered steps, each ordered so that an interrupted sequence leaves a
//! link count too high (a leak) rather than an entry naming a freed inode:
//!
//! - **mkdir** in a regular directory: MKINODE at `hash(pino, name)`, or with `near` at the
//!   client's home slice, where the worker that receives it keeps the inode (see
//!   [`Request::MkInode`]), then LINK at `home(pino)`
//!   (RMINODE undoes the inode if the LINK fails). In a bigdir: one CREATE.
//! - **hard link** `ino` as `(pino, name)`: LINK with `new_link` when the entry's slice holds
//!   the inode (one transaction); otherwise SETATTR `nlink_delta: +1` at `home(ino)`, then
//!   LINK (undone with RMINODE if it fails).
//! - **unlink**: UNLINK at the entry's slice drops the link when the inode is there
//!   ([`Fate`]); with the inode elsewhere, RMINODE at `home(ino)` drops it. Once freed, the
//!   client TRUNCATEs the file's data on the other slices.
//! - **rmdir**: DIRSEAL on the slices of the directory's entries, UNLINK of its entry, RMINODE
//!   at its home if it is elsewhere.
//! - **rename**: one RENAME when both entries are on one slice; otherwise LINK (`replace`) at
//!   the target's slice, then UNLINK (`keep_inode`) at the source's.
//! - **directory link counts** (2 + sub-directories): a slice changing the entry of a
//!   directory adjusts the parent's count in the same transaction when the parent's inode is
//!   there (always for regular directories); otherwise the client sends SETATTR
//!   `nlink_delta` to the parent's home.
//! - **open unlinked files**: a client holding files open sets `orphan` on UNLINK, RMINODE,
//!   LINK and RENAME; an inode losing its last link then stays as an orphan until the client's
//!   last close sends RMINODE (or the server restarts).

use fabric::{ErrorCode, Opcode};

use crate::placement::{DataDist, Hint, PlacementError};

/// Longest name component.
pub const NAME_MAX: usize = 255;
/// Largest data payload of one WRITE or READ (fabric's default frame limit is 16 MiB + 4 KiB).
pub const MAX_IO: u32 = 16 << 20;
/// Bytes of an encoded [`Attr`].
pub const ATTR_BYTES: usize = 72;
/// Set in the encoded offset of a WRITE or READ of an extent ([`Request::Write::extent`]);
/// the offset is then followed by the distance from the extent's start (u32). File offsets
/// stay below 2^63, so the bit is free.
const EXTENT_FLAG: u64 = 1 << 63;

/// The version of the pRPC request and reply layouts, raised with every change to them. The
/// frames themselves carry fabric's version; this one goes through the master: a server of
/// another version is refused registration, and a client of another version refuses the
/// cluster view, since a request of one layout read by the other may not fail to decode (a
/// WRITE of version 1 read as version 2 would take 4 data bytes for its distribution).
/// 2: WRITE and SETATTR name the distribution their bytes were placed by.
/// 3: WRITE and SETATTR carry [`Request::Write::drop_set_id`].
pub const PROTOCOL: u32 = 3;

/// pRPC opcodes.
pub mod op {
    use fabric::Opcode;
    /// Look a name up in a directory slice.
    pub const LOOKUP: Opcode = Opcode(0x0101);
    /// Create a dentry and its inode here (file; or directory of a bigdir).
    pub const CREATE: Opcode = Opcode(0x0102);
    /// Allocate an inode without a dentry (a regular directory's sub-directory).
    pub const MKINODE: Opcode = Opcode(0x0103);
    /// Insert a dentry naming an existing (possibly remote) inode.
    pub const LINK: Opcode = Opcode(0x0104);
    /// Attributes by ino.
    pub const GETATTR: Opcode = Opcode(0x0105);
    /// Change attributes by ino.
    pub const SETATTR: Opcode = Opcode(0x0106);
    /// List this slice's entries of a directory.
    pub const READDIR: Opcode = Opcode(0x0107);
    /// Remove a dentry (and its inode when it is here and unreferenced).
    pub const UNLINK: Opcode = Opcode(0x0108);
    /// Remove a free-standing inode by ino (a directory only when it is empty here).
    pub const RMINODE: Opcode = Opcode(0x0109);
    /// Seal or unseal a directory on this slice before rmdir of a bigdir.
    pub const DIRSEAL: Opcode = Opcode(0x010A);
    /// Rename within one slice.
    pub const RENAME: Opcode = Opcode(0x010B);
    /// Open a file (checks it, returns attributes).
    pub const OPEN: Opcode = Opcode(0x010C);
    /// Close a file (drops server read-ahead state).
    pub const CLOSE: Opcode = Opcode(0x010D);
    /// Fix the I/O unit of an I/O-based file unless it has one (its first writer sends it).
    pub const IO_UNIT: Opcode = Opcode(0x010E);
    /// Change the placement hints of an inode here: a file's data distribution while it holds
    /// no data, a directory's defaults for its new files.
    pub const SET_HINT: Opcode = Opcode(0x010F);
    /// Write bytes of a file piece.
    pub const WRITE: Opcode = Opcode(0x0201);
    /// Read bytes of a file piece.
    pub const READ: Opcode = Opcode(0x0202);
    /// Make this slice's writes durable.
    pub const FSYNC: Opcode = Opcode(0x0203);
    /// Drop data beyond a size on this slice (and set the size if the inode is here).
    pub const TRUNCATE: Opcode = Opcode(0x0204);
    /// Capacity and usage of this slice.
    pub const STATFS: Opcode = Opcode(0x0205);
    /// The first frame of a connection: the communicating thread the client asks for (no λ).
    pub const HELLO: Opcode = Opcode(0x0001);
    /// Fabric's echo (answered with the same payload, no λ).
    pub const ECHO: Opcode = Opcode::ECHO;
    /// The benchmark's data-transfer ceiling (no λ; answered by the communicating thread, as
    /// an ECHO): the payload starts with the reply's length ([`xfer_reply_len`]), the rest
    /// is dropped, and the reply is that many zero bytes. Bulk bytes cross the transport one
    /// way, as a WRITE's or a READ's do, with no slice work.
    pub const XFER: Opcode = Opcode(0x0002);
    /// The benchmark's dispatch ceiling: an ECHO that carries a λ and travels as a metadata
    /// request with that λ does (to the λ's server, received by the client's communicating
    /// thread, forwarded to the λ's worker), where it is answered with its whole payload
    /// without touching the slice. A bigdir operation's round trip against this one is what
    /// the slice's work on it costs; this one's against ECHO's, what the hop costs.
    pub const ROUTED_ECHO: Opcode = Opcode(0x0003);
    /// Every file system opcode; each carries a λ (as ROUTED_ECHO does, which is none).
    pub const ALL: [Opcode; 20] = [
        LOOKUP, CREATE, MKINODE, LINK, GETATTR, SETATTR, READDIR, UNLINK, RMINODE, DIRSEAL, RENAME,
        OPEN, CLOSE, IO_UNIT, SET_HINT, WRITE, READ, FSYNC, TRUNCATE, STATFS,
    ];
    /// Short name of an opcode for logs and benchmark tables.
    pub fn name(op: Opcode) -> &'static str {
        match op {
            LOOKUP => "lookup",
            CREATE => "create",
            MKINODE => "mkinode",
            LINK => "link",
            GETATTR => "getattr",
            SETATTR => "setattr",
            READDIR => "readdir",
            UNLINK => "unlink",
            RMINODE => "rminode",
            DIRSEAL => "dirseal",
            RENAME => "rename",
            OPEN => "open",
            CLOSE => "close",
            IO_UNIT => "io-unit",
            SET_HINT => "set-hint",
            WRITE => "write",
            READ => "read",
            FSYNC => "fsync",
            TRUNCATE => "truncate",
            STATFS => "statfs",
            ECHO => "echo",
            XFER => "xfer",
            ROUTED_ECHO => "routed-echo",
            HELLO => "hello",
            _ => "unknown",
        }
    }
}

/// The reply length an XFER payload asks for: its first 4 bytes (little-endian), at most
/// [`MAX_IO`]; `None` when they are missing or ask for more.
pub fn xfer_reply_len(payload: &[u8]) -> Option<usize> {
    let n = u32::from_le_bytes(*payload.first_chunk::<4>()?);
    (n <= MAX_IO).then_some(n as usize)
}

/// The payload of a HELLO asking for communicating thread `thread` (taken mod the server's
/// thread count).
pub fn hello_payload(thread: u64) -> [u8; 8] {
    thread.to_le_bytes()
}

/// The communicating thread a HELLO frame asks for: `None` for any other frame, or a HELLO
/// whose payload is not one u64.
pub fn hello_thread(opcode: Opcode, payload: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = payload.try_into().ok()?;
    (opcode == op::HELLO).then(|| u64::from_le_bytes(bytes))
}

/// Errors decoding a pRPC payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// the payload ends before a field
    #[error("payload truncated: {field} needs {need} bytes, {have} left")]
    Truncated {
        /// the field being read
        field: &'static str,
        /// bytes it needs
        need: usize,
        /// bytes left
        have: usize,
    },
    /// bytes after the last field
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
    /// a name is empty, too long, or holds '/' or NUL
    #[error("invalid name of {len} bytes (1..=255, no '/' or NUL)")]
    BadName {
        /// its length
        len: usize,
    },
    /// a field holds a value outside its range
    #[error("field {field} holds invalid value {value}")]
    BadValue {
        /// the field
        field: &'static str,
        /// the value
        value: u64,
    },
    /// not a PeakFS opcode
    #[error("unknown opcode {0:#06x}")]
    UnknownOpcode(u16),
    /// bad distribution hint
    #[error(transparent)]
    Hint(#[from] PlacementError),
}

impl ProtoError {
    /// The errno a server answers a request it cannot decode with.
    pub fn errno(&self) -> Errno {
        match self {
            ProtoError::BadName { len } if *len > NAME_MAX => Errno::ENAMETOOLONG,
            ProtoError::UnknownOpcode(_) => Errno::ENOSYS,
            _ => Errno::EINVAL,
        }
    }
}

/// A POSIX errno carried in error replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// No such file or directory.
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    /// File exists.
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    /// Not a directory.
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    /// Is a directory.
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    /// Directory not empty.
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    /// Invalid argument (also: undecodable request).
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    /// No space left.
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    /// I/O error (device or corrupt metadata).
    pub const EIO: Errno = Errno(libc::EIO);
    /// Name too long.
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    /// The request reached a server or worker that does not own its λ (stale cluster view).
    pub const ESTALE: Errno = Errno(libc::ESTALE);
    /// Operation crosses slices: the client must run the multi-step protocol.
    pub const EXDEV: Errno = Errno(libc::EXDEV);
    /// Not implemented.
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    /// Server busy (queues full); retry.
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    /// Value too large (offset + length overflows).
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    /// Busy: a file's distribution cannot change once it holds data.
    pub const EBUSY: Errno = Errno(libc::EBUSY);

    /// The fabric error code of this errno.
    pub fn error_code(self) -> ErrorCode {
        ErrorCode(ErrorCode::USER_FIRST + self.0.unsigned_abs())
    }

    /// The errno of a fabric error code: PeakFS codes map back, fabric's own codes map to
    /// `EINVAL` (malformed/oversize), `ENOSYS` (unknown opcode) or `EIO`.
    pub fn from_error_code(code: ErrorCode) -> Errno {
        match code {
            ErrorCode::MALFORMED | ErrorCode::OVERSIZE => Errno::EINVAL,
            ErrorCode::UNKNOWN_OPCODE => Errno::ENOSYS,
            ErrorCode(c) if c > ErrorCode::USER_FIRST && c - ErrorCode::USER_FIRST < 4096 => {
                Errno((c - ErrorCode::USER_FIRST) as i32)
            }
            _ => Errno::EIO,
        }
    }
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

/// Attributes of an inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Attr {
    /// Inode number.
    pub ino: u64,
    /// Type and permission bits (`S_IFREG | 0o644`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Links.
    pub nlink: u32,
    /// Bytes.
    pub size: u64,
    /// Access time, ns since the epoch.
    pub atime_ns: i64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// Status change time, ns since the epoch.
    pub ctime_ns: i64,
    /// Distribution hints.
    pub hint: Hint,
    /// Device number of a character or block device node.
    pub rdev: u32,
    /// The I/O unit of an I/O-based file (0: none yet; see [`Request::IoUnit`]).
    pub io_unit: u32,
}

impl Attr {
    /// True for a directory.
    pub fn is_dir(&self) -> bool {
        is_dir_mode(self.mode)
    }

    fn put(&self, w: &mut Vec<u8>) {
        let start = w.len();
        w.extend_from_slice(&self.ino.to_le_bytes());
        w.extend_from_slice(&self.mode.to_le_bytes());
        w.extend_from_slice(&self.uid.to_le_bytes());
        w.extend_from_slice(&self.gid.to_le_bytes());
        w.extend_from_slice(&self.nlink.to_le_bytes());
        w.extend_from_slice(&self.size.to_le_bytes());
        w.extend_from_slice(&self.atime_ns.to_le_bytes());
        w.extend_from_slice(&self.mtime_ns.to_le_bytes());
        w.extend_from_slice(&self.ctime_ns.to_le_bytes());
        w.push(self.hint.to_byte());
        w.extend_from_slice(&self.rdev.to_le_bytes());
        w.extend_from_slice(&self.io_unit.to_le_bytes());
        w.resize(start + ATTR_BYTES, 0);
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, ProtoError> {
        let b = r.bytes("attr", ATTR_BYTES)?;
        let mut a = Reader(b);
        Ok(Self {
            ino: a.u64("ino")?,
            mode: a.u32("mode")?,
            uid: a.u32("uid")?,
            gid: a.u32("gid")?,
            nlink: a.u32("nlink")?,
            size: a.u64("size")?,
            atime_ns: a.i64("atime")?,
            mtime_ns: a.i64("mtime")?,
            ctime_ns: a.i64("ctime")?,
            hint: Hint::from_byte(a.u8("hint")?)?,
            rdev: a.u32("rdev")?,
            io_unit: a.u32("io_unit")?,
        })
    }
}

/// True if `mode` is a directory's.
pub fn is_dir_mode(mode: u32) -> bool {
    mode & libc::S_IFMT == libc::S_IFDIR
}

/// Which attributes a SETATTR changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetAttr {
    /// New permission bits (the type bits are kept).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (metadata only: data beyond it is dropped with TRUNCATE on the data slices).
    pub size: Option<u64>,
    /// Raise the size to at least this (commit of pipelined writes at fsync/close).
    pub extend_to: Option<u64>,
    /// The distribution the bytes being committed were placed by, held to the file as
    /// [`Request::Write::dist`] is.
    pub layout: Option<DataDist>,
    /// New access time.
    pub atime_ns: Option<i64>,
    /// New modification time.
    pub mtime_ns: Option<i64>,
    /// Drop the set-ID bits of the mode held here (after `mode`, if given), as a write by a
    /// caller without CAP_FSETID does: a commit of such writes to other slices.
    pub drop_set_id: bool,
    /// Added to the link count, which stays at least 1 (2 for a directory); ENOENT for an
    /// inode without links. A client adjusts a directory whose inode is on another slice
    /// than a changed sub-directory entry, and raises a file's count before a hard link on
    /// another slice. Dropping a link is [`Request::RmInode`]'s.
    pub nlink_delta: Option<i32>,
}

/// One directory entry of a READDIR reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirEntry<'a> {
    /// The child's ino.
    pub ino: u64,
    /// The child's mode (type bits at least).
    pub mode: u32,
    /// The name.
    pub name: &'a [u8],
}

/// What became of the inode of a removed entry (or of an RMINODE's inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// The inode is on another slice: the client drops the link there (RMINODE), unless it
    /// keeps it (the second step of a rename).
    Elsewhere,
    /// The inode is here and keeps links (other hard links, or kept by a rename).
    Linked,
    /// The inode lost its last link but stays, without links, as an orphan (the client holds
    /// it open, request flag `orphan`): the client frees it with RMINODE at its last close;
    /// the server frees it at its next start otherwise.
    Orphan,
    /// The inode lost its last link and was freed with its data on this slice: the client
    /// frees the data on other slices.
    Freed,
}

impl Fate {
    fn to_byte(self) -> u8 {
        match self {
            Fate::Elsewhere => 0,
            Fate::Linked => 1,
            Fate::Orphan => 2,
            Fate::Freed => 3,
        }
    }

    fn from_byte(b: u8) -> Result<Self, ProtoError> {
        Ok(match b {
            0 => Fate::Elsewhere,
            1 => Fate::Linked,
            2 => Fate::Orphan,
            3 => Fate::Freed,
            _ => {
                return Err(ProtoError::BadValue {
                    field: "fate",
                    value: b.into(),
                });
            }
        })
    }
}

/// What an UNLINK, LINK (replace), RENAME or RMINODE removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    /// The unlinked ino.
    pub ino: u64,
    /// Its mode when the inode is on this slice (0 otherwise).
    pub mode: u32,
    /// Its size when the inode is on this slice (0 otherwise): once it is freed, the client
    /// frees the data pieces of `[0, size)` on other slices with TRUNCATE.
    pub size: u64,
    /// What became of the inode.
    pub fate: Fate,
    /// Its hint when the inode is on this slice (default otherwise): with `size`, where the
    /// file's data lies, so that an unlink needs no LOOKUP first.
    pub hint: Hint,
}

/// Capacity and usage of one slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatFs {
    /// Bytes of data pages.
    pub bytes_total: u64,
    /// Bytes of data pages in use.
    pub bytes_used: u64,
    /// Inode slots.
    pub inodes_total: u64,
    /// Inodes in use.
    pub inodes_used: u64,
}

impl std::iter::Sum for StatFs {
    /// The capacity and usage of several slices together.
    fn sum<I: Iterator<Item = Self>>(slices: I) -> Self {
        slices.fold(Self::default(), |sum, s| Self {
            bytes_total: sum.bytes_total + s.bytes_total,
            bytes_used: sum.bytes_used + s.bytes_used,
            inodes_total: sum.inodes_total + s.inodes_total,
            inodes_used: sum.inodes_used + s.inodes_used,
        })
    }
}

/// UNLINK flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UnlinkFlags {
    /// The entry must be a directory (rmdir); otherwise it must not be one (unlink).
    pub dir: bool,
    /// Remove only the dentry, keep the inode (second step of a cross-slice rename).
    pub keep_inode: bool,
    /// The client may hold the file open: at its last link it becomes an orphan
    /// ([`Fate::Orphan`]) instead of being freed.
    pub orphan: bool,
}

/// LINK flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkFlags {
    /// Replace an existing entry (rename) instead of failing with EEXIST.
    pub replace: bool,
    /// A new hard link: raise the inode's link count in the same transaction (the inode must
    /// be on this slice, EXDEV otherwise; elsewhere the client raises it first with SETATTR).
    pub new_link: bool,
    /// As [`UnlinkFlags::orphan`], for a replaced file.
    pub orphan: bool,
}

/// RENAME flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RenameFlags {
    /// The source is a directory (its inode may be elsewhere): the parents' link counts change.
    pub dir: bool,
    /// As [`UnlinkFlags::orphan`], for a replaced file.
    pub orphan: bool,
}

/// A decoded request (without its λ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// [`op::LOOKUP`]: reply [`Reply::Lookup`].
    Lookup {
        /// Parent directory.
        pino: u64,
        /// Name.
        name: &'a [u8],
    },
    /// [`op::CREATE`]: reply [`Reply::Attr`]; EEXIST if the name exists and `excl`, else the
    /// existing entry's attributes (open with O_CREAT).
    Create {
        /// Parent directory.
        pino: u64,
        /// Type and permissions.
        mode: u32,
        /// Owner.
        uid: u32,
        /// Group.
        gid: u32,
        /// Device number (device nodes).
        rdev: u32,
        /// Hints of the new inode.
        hint: Hint,
        /// Its [`Attr::io_unit`] (0: none; at most [`MAX_IO`]).
        io_unit: u32,
        /// Fail if it exists.
        excl: bool,
        /// Name.
        name: &'a [u8],
    },
    /// [`op::MKINODE`]: reply [`Reply::Attr`]. The inode goes to the slice of λ's worker, or
    /// with `near` to the slice of the communicating thread that receives the request on
    /// server `λ mod servers` ([`Request::runs_on_receiver`]).
    MkInode {
        /// Type and permissions.
        mode: u32,
        /// Owner.
        uid: u32,
        /// Group.
        gid: u32,
        /// Hints.
        hint: Hint,
        /// Its [`Attr::io_unit`] (0: none; at most [`MAX_IO`]).
        io_unit: u32,
        /// Place the inode on the receiving worker's slice instead of λ's worker's.
        near: bool,
    },
    /// [`op::LINK`]: reply [`Reply::Removed`] (the replaced entry, with `replace`). A
    /// directory's entry raises the parent's link count when the parent's inode is here.
    Link {
        /// Parent directory.
        pino: u64,
        /// The inode the dentry names.
        ino: u64,
        /// Its mode.
        mode: u32,
        /// Flags.
        flags: LinkFlags,
        /// Name.
        name: &'a [u8],
    },
    /// [`op::GETATTR`]: reply [`Reply::Attr`].
    GetAttr {
        /// The inode.
        ino: u64,
    },
    /// [`op::SETATTR`]: reply [`Reply::Attr`].
    SetAttr {
        /// The inode.
        ino: u64,
        /// Changes.
        set: SetAttr,
    },
    /// [`op::READDIR`]: reply [`Reply::Entries`].
    ReadDir {
        /// Directory.
        pino: u64,
        /// At most this many entries.
        max: u32,
        /// Continue after this name (the last one of the previous reply); empty: from the
        /// start. Entries come in name order.
        after: &'a [u8],
    },
    /// [`op::UNLINK`]: reply [`Reply::Removed`] (always `Some`). Drops a link of the inode
    /// when it is here (see [`Fate`]); a directory's entry lowers the parent's link count when
    /// the parent's inode is here.
    Unlink {
        /// Parent directory.
        pino: u64,
        /// Flags.
        flags: UnlinkFlags,
        /// Name.
        name: &'a [u8],
    },
    /// [`op::RMINODE`]: reply [`Reply::Removed`] (always `Some`). At an inode's home: frees
    /// a directory (ENOTEMPTY with entries here) or an orphan (the last close of an unlinked
    /// open file), drops one link of any other file (see [`Fate`]).
    RmInode {
        /// The inode.
        ino: u64,
        /// As [`UnlinkFlags::orphan`].
        orphan: bool,
    },
    /// [`op::DIRSEAL`]: reply [`Reply::Count`] (entries of `pino` on this slice). While
    /// sealed, CREATE/LINK into `pino` on this slice fail with ENOENT.
    DirSeal {
        /// Directory.
        pino: u64,
        /// Seal (true) or unseal.
        seal: bool,
    },
    /// [`op::RENAME`]: reply [`Reply::Removed`] (the replaced target); EXDEV when the two
    /// names are not both on this slice.
    Rename {
        /// Source directory.
        src_pino: u64,
        /// Target directory.
        dst_pino: u64,
        /// Flags.
        flags: RenameFlags,
        /// Source name.
        src_name: &'a [u8],
        /// Target name.
        dst_name: &'a [u8],
    },
    /// [`op::OPEN`]: reply [`Reply::Attr`].
    Open {
        /// The inode.
        ino: u64,
        /// open(2) flags (O_TRUNC truncates here).
        flags: u32,
    },
    /// [`op::CLOSE`]: reply [`Reply::Empty`].
    Close {
        /// The inode.
        ino: u64,
    },
    /// [`op::IO_UNIT`]: reply [`Reply::Attr`], whose `io_unit` is the unit in force: `unit`
    /// if the file had none, else the one an earlier writer fixed.
    IoUnit {
        /// The inode.
        ino: u64,
        /// Bytes of each I/O unit (1..=[`MAX_IO`]).
        unit: u32,
    },
    /// [`op::SET_HINT`]: reply [`Reply::Attr`]. EBUSY for a new data distribution of a file
    /// that has a size or an I/O unit (its data would lie where the new one does not look);
    /// EINVAL for an `io_unit` of anything but a directory, or a hint of anything but a
    /// regular file or a directory. A directory's bigdir flag never changes: every client
    /// caches it, and its entries lie where it says.
    SetHint {
        /// The inode.
        ino: u64,
        /// New data distribution: a file's own, a directory's default for new files.
        data: Option<DataDist>,
        /// A directory's I/O unit for its new I/O-based files (0: none; at most [`MAX_IO`]).
        io_unit: Option<u32>,
    },
    /// [`op::WRITE`]: reply [`Reply::Written`].
    Write {
        /// The file.
        ino: u64,
        /// File offset of the first byte.
        offset: u64,
        /// The file offset where the extent holding these bytes starts: an I/O unit of an
        /// I/O-based file (§III-C1), whose pages no other unit shares, counted from the
        /// unit's first byte. `None`: file blocks. The bytes lie within [`MAX_IO`] of it.
        extent: Option<u64>,
        /// The distribution the writer placed these bytes by ([`DataDist::Io`] exactly when
        /// `extent` is given). The inode's home slice holds the file to it: a file without
        /// size takes it, one with a size laid out otherwise refuses the write (EIO), since
        /// its readers would look for these bytes elsewhere.
        dist: DataDist,
        /// The writer's writes drop the file's set-ID bits (a caller without CAP_FSETID,
        /// FUSE_WRITE_KILL_SUIDGID): the home slice drops them from the mode it holds as it
        /// takes the write, whatever mode the writer last saw. Other slices hold no inode;
        /// the commit's SETATTR carries it home for the bytes they took
        /// ([`SetAttr::drop_set_id`]).
        drop_set_id: bool,
        /// The bytes (the rest of the payload).
        data: &'a [u8],
    },
    /// [`op::READ`]: reply [`Reply::Data`] (holes read as zeros; clipped at the size only if
    /// the inode is on this slice).
    Read {
        /// The file.
        ino: u64,
        /// File offset.
        offset: u64,
        /// Bytes wanted (≤ [`MAX_IO`]).
        len: u32,
        /// The start of the extent holding these bytes (see [`Request::Write::extent`]).
        extent: Option<u64>,
    },
    /// [`op::FSYNC`]: reply [`Reply::Empty`] once every acknowledged write on this slice is
    /// durable.
    Fsync {
        /// The file (0: the whole slice).
        ino: u64,
    },
    /// [`op::TRUNCATE`]: reply [`Reply::Empty`].
    Truncate {
        /// The file.
        ino: u64,
        /// New size.
        size: u64,
    },
    /// [`op::STATFS`]: reply [`Reply::StatFs`].
    StatFs,
}

impl<'a> Request<'a> {
    /// Whether the request with `opcode` and `payload` runs on the slice of the communicating
    /// thread that receives it rather than on λ's worker: a MKINODE with `near` (λ still picks
    /// the server). Looks at MKINODE payloads only; a payload that does not decode runs where
    /// λ says, which answers it with the decoding error.
    pub fn runs_on_receiver(opcode: Opcode, payload: &[u8]) -> bool {
        opcode == op::MKINODE
            && matches!(
                Request::decode(opcode, payload),
                Ok((_, Request::MkInode { near: true, .. }))
            )
    }

    /// Whether its server hands what it changed to the device before it replies, so that a
    /// killed server process loses none of it: what a close or an fsync acknowledges (a
    /// file's bytes, size or attributes, §III-D's commit consistency), and the inode of a new
    /// directory, which an entry on another slice then names (made durable by an fsync of
    /// its parent directory).
    pub fn is_written_through(&self) -> bool {
        match self {
            Request::Write { .. }
            | Request::SetAttr { .. }
            | Request::Truncate { .. }
            | Request::IoUnit { .. }
            | Request::MkInode { .. } => true,
            Request::Open { flags, .. } => flags & libc::O_TRUNC as u32 != 0,
            _ => false,
        }
    }

    /// The opcode of this request.
    pub fn opcode(&self) -> Opcode {
        match self {
            Request::Lookup { .. } => op::LOOKUP,
            Request::Create { .. } => op::CREATE,
            Request::MkInode { .. } => op::MKINODE,
            Request::Link { .. } => op::LINK,
            Request::GetAttr { .. } => op::GETATTR,
            Request::SetAttr { .. } => op::SETATTR,
            Request::ReadDir { .. } => op::READDIR,
            Request::Unlink { .. } => op::UNLINK,
            Request::RmInode { .. } => op::RMINODE,
            Request::DirSeal { .. } => op::DIRSEAL,
            Request::Rename { .. } => op::RENAME,
            Request::Open { .. } => op::OPEN,
            Request::Close { .. } => op::CLOSE,
            Request::IoUnit { .. } => op::IO_UNIT,
            Request::SetHint { .. } => op::SET_HINT,
            Request::Write { .. } => op::WRITE,
            Request::Read { .. } => op::READ,
            Request::Fsync { .. } => op::FSYNC,
            Request::Truncate { .. } => op::TRUNCATE,
            Request::StatFs => op::STATFS,
        }
    }

    /// Appends λ and the request's fields to `out`, except a WRITE's data, which the caller
    /// sends as a second slice (zero copy): the payload is `out ++ data`.
    pub fn encode_head(&self, lambda: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(&lambda.to_le_bytes());
        let w = out;
        match *self {
            Request::Lookup { pino, name } => {
                put_u64(w, pino);
                w.extend_from_slice(name);
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
                put_u64(w, pino);
                put_u32(w, mode);
                put_u32(w, uid);
                put_u32(w, gid);
                put_u32(w, rdev);
                w.push(hint.to_byte());
                put_u32(w, io_unit);
                w.push(u8::from(excl));
                w.extend_from_slice(name);
            }
            Request::MkInode {
                mode,
                uid,
                gid,
                hint,
                io_unit,
                near,
            } => {
                put_u32(w, mode);
                put_u32(w, uid);
                put_u32(w, gid);
                w.push(hint.to_byte());
                put_u32(w, io_unit);
                w.push(u8::from(near));
            }
            Request::Link {
                pino,
                ino,
                mode,
                flags,
                name,
            } => {
                put_u64(w, pino);
                put_u64(w, ino);
                put_u32(w, mode);
                w.push(
                    u8::from(flags.replace)
                        | (u8::from(flags.new_link) << 1)
                        | (u8::from(flags.orphan) << 2),
                );
                w.extend_from_slice(name);
            }
            Request::GetAttr { ino } | Request::Close { ino } | Request::Fsync { ino } => {
                put_u64(w, ino)
            }
            Request::RmInode { ino, orphan } => {
                put_u64(w, ino);
                w.push(u8::from(orphan));
            }
            Request::SetAttr { ino, set } => {
                put_u64(w, ino);
                let mut mask = 0u8;
                for (bit, on) in [
                    set.mode.is_some(),
                    set.uid.is_some(),
                    set.gid.is_some(),
                    set.size.is_some(),
                    set.extend_to.is_some(),
                    set.atime_ns.is_some(),
                    set.mtime_ns.is_some(),
                    set.nlink_delta.is_some(),
                ]
                .into_iter()
                .enumerate()
                {
                    mask |= u8::from(on) << bit;
                }
                w.push(mask);
                put_u32(w, set.mode.unwrap_or(0));
                put_u32(w, set.uid.unwrap_or(0));
                put_u32(w, set.gid.unwrap_or(0));
                put_u64(w, set.size.unwrap_or(0));
                put_u64(w, set.extend_to.unwrap_or(0));
                put_u64(w, set.atime_ns.unwrap_or(0) as u64);
                put_u64(w, set.mtime_ns.unwrap_or(0) as u64);
                w.extend_from_slice(&set.nlink_delta.unwrap_or(0).to_le_bytes());
                // The mask is full: 0 for none, else 1 + the distribution's byte; then flags.
                w.push(set.layout.map_or(0, |d| 1 + d.to_byte()));
                w.push(u8::from(set.drop_set_id));
            }
            Request::ReadDir { pino, max, after } => {
                put_u64(w, pino);
                put_u32(w, max);
                w.extend_from_slice(after);
            }
            Request::Unlink { pino, flags, name } => {
                put_u64(w, pino);
                w.push(
                    u8::from(flags.dir)
                        | (u8::from(flags.keep_inode) << 1)
                        | (u8::from(flags.orphan) << 2),
                );
                w.extend_from_slice(name);
            }
            Request::DirSeal { pino, seal } => {
                put_u64(w, pino);
                w.push(u8::from(seal));
            }
            Request::Rename {
                src_pino,
                dst_pino,
                flags,
                src_name,
                dst_name,
            } => {
                put_u64(w, src_pino);
                put_u64(w, dst_pino);
                w.push(u8::from(flags.dir) | (u8::from(flags.orphan) << 1));
                // Names are checked to be ≤ 255 bytes by the decoder; a longer one is sent
                // with a truncated length and rejected there.
                put_u16(w, src_name.len().min(u16::MAX as usize) as u16);
                w.extend_from_slice(src_name);
                w.extend_from_slice(dst_name);
            }
            Request::Open { ino, flags } => {
                put_u64(w, ino);
                put_u32(w, flags);
            }
            Request::IoUnit { ino, unit } => {
                put_u64(w, ino);
                put_u32(w, unit);
            }
            Request::SetHint { ino, data, io_unit } => {
                put_u64(w, ino);
                w.push(u8::from(data.is_some()) | (u8::from(io_unit.is_some()) << 1));
                w.push(data.unwrap_or_default().to_byte());
                put_u32(w, io_unit.unwrap_or(0));
            }
            Request::Write {
                ino,
                offset,
                extent,
                dist,
                drop_set_id,
                ..
            } => {
                put_u64(w, ino);
                put_extent(w, offset, extent);
                // Four bytes (distribution, flags, two zero bytes), not two: the data after
                // them stays dword aligned in the server's receive buffer, which lets the
                // controller take it straight from there (`Zone::write_runs`) instead of
                // through a bounce slot.
                w.extend_from_slice(&[dist.to_byte(), u8::from(drop_set_id), 0, 0]);
            }
            Request::Read {
                ino,
                offset,
                len,
                extent,
            } => {
                put_u64(w, ino);
                put_extent(w, offset, extent);
                put_u32(w, len);
            }
            Request::Truncate { ino, size } => {
                put_u64(w, ino);
                put_u64(w, size);
            }
            Request::StatFs => {}
        }
    }

    /// The whole payload (λ, fields and a WRITE's data) in one vector.
    pub fn encode(&self, lambda: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        self.encode_head(lambda, &mut out);
        if let Request::Write { data, .. } = self {
            out.extend_from_slice(data);
        }
        out
    }

    /// Parses the payload of a request with opcode `opcode` into (λ, request).
    pub fn decode(opcode: Opcode, payload: &'a [u8]) -> Result<(u64, Self), ProtoError> {
        let mut r = Reader(payload);
        let lambda = r.u64("lambda")?;
        let req = match opcode {
            op::LOOKUP => Request::Lookup {
                pino: r.u64("pino")?,
                name: r.name_rest()?,
            },
            op::CREATE => Request::Create {
                pino: r.u64("pino")?,
                mode: r.u32("mode")?,
                uid: r.u32("uid")?,
                gid: r.u32("gid")?,
                rdev: r.u32("rdev")?,
                hint: Hint::from_byte(r.u8("hint")?)?,
                io_unit: io_unit(&mut r)?,
                excl: r.bool("excl")?,
                name: r.name_rest()?,
            },
            op::MKINODE => Request::MkInode {
                mode: r.u32("mode")?,
                uid: r.u32("uid")?,
                gid: r.u32("gid")?,
                hint: Hint::from_byte(r.u8("hint")?)?,
                io_unit: io_unit(&mut r)?,
                near: r.bool("near")?,
            },
            op::LINK => {
                let (pino, ino, mode) = (r.u64("pino")?, r.u64("ino")?, r.u32("mode")?);
                let f = r.flags("flags", 3)?;
                Request::Link {
                    pino,
                    ino,
                    mode,
                    flags: LinkFlags {
                        replace: f & 1 != 0,
                        new_link: f & 2 != 0,
                        orphan: f & 4 != 0,
                    },
                    name: r.name_rest()?,
                }
            }
            op::GETATTR => Request::GetAttr { ino: r.u64("ino")? },
            op::RMINODE => Request::RmInode {
                ino: r.u64("ino")?,
                orphan: r.bool("orphan")?,
            },
            op::CLOSE => Request::Close { ino: r.u64("ino")? },
            op::FSYNC => Request::Fsync { ino: r.u64("ino")? },
            op::SETATTR => {
                let ino = r.u64("ino")?;
                let mask = r.u8("mask")?;
                let on = |bit: u8| mask & (1 << bit) != 0;
                let (mode, uid, gid) = (r.u32("mode")?, r.u32("uid")?, r.u32("gid")?);
                let (size, extend_to) = (r.u64("size")?, r.u64("extend_to")?);
                let (atime, mtime) = (r.i64("atime")?, r.i64("mtime")?);
                let nlink_delta = r.i32("nlink_delta")?;
                let layout = match r.u8("layout")? {
                    0 => None,
                    b => Some(DataDist::from_byte(b - 1)?),
                };
                let drop_set_id = r.flags("setattr flags", 1)? != 0;
                Request::SetAttr {
                    ino,
                    set: SetAttr {
                        mode: on(0).then_some(mode),
                        uid: on(1).then_some(uid),
                        gid: on(2).then_some(gid),
                        size: on(3).then_some(size),
                        extend_to: on(4).then_some(extend_to),
                        atime_ns: on(5).then_some(atime),
                        mtime_ns: on(6).then_some(mtime),
                        nlink_delta: on(7).then_some(nlink_delta),
                        layout,
                        drop_set_id,
                    },
                }
            }
            op::READDIR => {
                let pino = r.u64("pino")?;
                let max = r.u32("max")?;
                let after = r.rest();
                if !after.is_empty() {
                    check_name(after)?;
                }
                Request::ReadDir { pino, max, after }
            }
            op::UNLINK => {
                let pino = r.u64("pino")?;
                let f = r.flags("flags", 3)?;
                let flags = UnlinkFlags {
                    dir: f & 1 != 0,
                    keep_inode: f & 2 != 0,
                    orphan: f & 4 != 0,
                };
                Request::Unlink {
                    pino,
                    flags,
                    name: r.name_rest()?,
                }
            }
            op::DIRSEAL => Request::DirSeal {
                pino: r.u64("pino")?,
                seal: r.bool("seal")?,
            },
            op::RENAME => {
                let src_pino = r.u64("src_pino")?;
                let dst_pino = r.u64("dst_pino")?;
                let f = r.flags("flags", 2)?;
                let src_len = usize::from(r.u16("src_len")?);
                let src_name = check_name(r.bytes("src_name", src_len)?)?;
                Request::Rename {
                    src_pino,
                    dst_pino,
                    flags: RenameFlags {
                        dir: f & 1 != 0,
                        orphan: f & 2 != 0,
                    },
                    src_name,
                    dst_name: r.name_rest()?,
                }
            }
            op::OPEN => Request::Open {
                ino: r.u64("ino")?,
                flags: r.u32("flags")?,
            },
            op::IO_UNIT => {
                let ino = r.u64("ino")?;
                match io_unit(&mut r)? {
                    0 => {
                        return Err(ProtoError::BadValue {
                            field: "io_unit",
                            value: 0,
                        });
                    }
                    unit => Request::IoUnit { ino, unit },
                }
            }
            op::SET_HINT => {
                let ino = r.u64("ino")?;
                let f = r.flags("flags", 2)?;
                let data = DataDist::from_byte(r.u8("data")?)?;
                let unit = io_unit(&mut r)?;
                Request::SetHint {
                    ino,
                    data: (f & 1 != 0).then_some(data),
                    io_unit: (f & 2 != 0).then_some(unit),
                }
            }
            op::WRITE => {
                let ino = r.u64("ino")?;
                let (offset, extent) = get_extent(&mut r)?;
                let b = r.u8("dist")?;
                let dist = DataDist::from_byte(b)
                    .ok()
                    .filter(|d| extent.is_some() == (*d == DataDist::Io))
                    .ok_or(ProtoError::BadValue {
                        field: "dist",
                        value: b.into(),
                    })?;
                let drop_set_id = r.flags("write flags", 1)? != 0;
                let zero = r.u16("write reserved")?;
                if zero != 0 {
                    return Err(ProtoError::BadValue {
                        field: "write reserved",
                        value: zero.into(),
                    });
                }
                let data = r.rest();
                check_range(offset, data.len() as u64)?;
                check_extent(offset, data.len() as u64, extent)?;
                Request::Write {
                    ino,
                    offset,
                    extent,
                    dist,
                    drop_set_id,
                    data,
                }
            }
            op::READ => {
                let ino = r.u64("ino")?;
                let (offset, extent) = get_extent(&mut r)?;
                let len = r.u32("len")?;
                if len > MAX_IO {
                    return Err(ProtoError::BadValue {
                        field: "len",
                        value: len.into(),
                    });
                }
                check_range(offset, len.into())?;
                check_extent(offset, len.into(), extent)?;
                Request::Read {
                    ino,
                    offset,
                    len,
                    extent,
                }
            }
            op::TRUNCATE => Request::Truncate {
                ino: r.u64("ino")?,
                size: r.u64("size")?,
            },
            op::STATFS => Request::StatFs,
            other => return Err(ProtoError::UnknownOpcode(other.0)),
        };
        r.finish()?;
        Ok((lambda, req))
    }
}

/// A decoded reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<'a> {
    /// Attributes (CREATE, MKINODE, GETATTR, SETATTR, OPEN, IO_UNIT, SET_HINT).
    Attr(Attr),
    /// LOOKUP: the child's ino and mode, and its attributes when its inode is on this slice.
    Lookup {
        /// The child.
        ino: u64,
        /// Its mode.
        mode: u32,
        /// Its attributes if the inode is here (else GETATTR at `home(ino)`).
        attr: Option<Attr>,
    },
    /// READDIR: entries in name order; mode 0 means unknown (the inode is on another slice).
    Entries {
        /// More entries follow: call again with `after` = the last name.
        more: bool,
        /// The entries.
        entries: Vec<DirEntry<'a>>,
    },
    /// UNLINK, LINK, RENAME, RMINODE: what was removed.
    Removed(Option<Removed>),
    /// DIRSEAL: entries held here.
    Count(u64),
    /// WRITE: bytes written.
    Written(u32),
    /// READ: the bytes.
    Data(&'a [u8]),
    /// STATFS.
    StatFs(StatFs),
    /// CLOSE, FSYNC, TRUNCATE.
    Empty,
}

impl<'a> Reply<'a> {
    /// Appends the reply payload to `out` (a READ's bytes are better sent as their own slice:
    /// the payload of [`Reply::Data`] is just the bytes).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Attr(a) => a.put(out),
            Reply::Lookup { ino, mode, attr } => {
                put_u64(out, *ino);
                put_u32(out, *mode);
                out.push(u8::from(attr.is_some()));
                if let Some(a) = attr {
                    a.put(out);
                }
            }
            Reply::Entries { more, entries } => {
                out.push(u8::from(*more));
                put_u32(out, entries.len() as u32);
                for e in entries {
                    put_u64(out, e.ino);
                    put_u32(out, e.mode);
                    out.push(e.name.len().min(255) as u8);
                    out.extend_from_slice(&e.name[..e.name.len().min(255)]);
                }
            }
            Reply::Removed(r) => {
                out.push(u8::from(r.is_some()));
                if let Some(r) = r {
                    put_u64(out, r.ino);
                    put_u32(out, r.mode);
                    put_u64(out, r.size);
                    out.push(r.fate.to_byte());
                    out.push(r.hint.to_byte());
                }
            }
            Reply::Count(n) => put_u64(out, *n),
            Reply::Written(n) => put_u32(out, *n),
            Reply::Data(d) => out.extend_from_slice(d),
            Reply::StatFs(s) => {
                put_u64(out, s.bytes_total);
                put_u64(out, s.bytes_used);
                put_u64(out, s.inodes_total);
                put_u64(out, s.inodes_used);
            }
            Reply::Empty => {}
        }
    }

    /// Parses the payload of a (non-error) reply to a request with opcode `opcode`.
    pub fn decode(opcode: Opcode, payload: &'a [u8]) -> Result<Self, ProtoError> {
        let mut r = Reader(payload);
        let reply = match opcode {
            op::CREATE
            | op::MKINODE
            | op::GETATTR
            | op::SETATTR
            | op::OPEN
            | op::IO_UNIT
            | op::SET_HINT => Reply::Attr(Attr::get(&mut r)?),
            op::LOOKUP => {
                let ino = r.u64("ino")?;
                let mode = r.u32("mode")?;
                let attr = if r.bool("has_attr")? {
                    Some(Attr::get(&mut r)?)
                } else {
                    None
                };
                Reply::Lookup { ino, mode, attr }
            }
            op::READDIR => {
                let more = r.bool("more")?;
                let n = r.u32("count")? as usize;
                // Each entry takes at least 14 bytes: bound the allocation by the payload.
                let mut entries = Vec::with_capacity(n.min(payload.len() / 14));
                for _ in 0..n {
                    let ino = r.u64("entry ino")?;
                    let mode = r.u32("entry mode")?;
                    let len = usize::from(r.u8("entry name len")?);
                    let name = check_name(r.bytes("entry name", len)?)?;
                    entries.push(DirEntry { ino, mode, name });
                }
                Reply::Entries { more, entries }
            }
            op::UNLINK | op::LINK | op::RENAME | op::RMINODE => {
                if r.bool("removed")? {
                    Reply::Removed(Some(Removed {
                        ino: r.u64("ino")?,
                        mode: r.u32("mode")?,
                        size: r.u64("size")?,
                        fate: Fate::from_byte(r.u8("fate")?)?,
                        hint: Hint::from_byte(r.u8("hint")?)?,
                    }))
                } else {
                    Reply::Removed(None)
                }
            }
            op::DIRSEAL => Reply::Count(r.u64("count")?),
            op::WRITE => Reply::Written(r.u32("written")?),
            op::READ | op::ECHO => Reply::Data(r.rest()),
            op::STATFS => Reply::StatFs(StatFs {
                bytes_total: r.u64("bytes_total")?,
                bytes_used: r.u64("bytes_used")?,
                inodes_total: r.u64("inodes_total")?,
                inodes_used: r.u64("inodes_used")?,
            }),
            op::CLOSE | op::FSYNC | op::TRUNCATE => Reply::Empty,
            other => return Err(ProtoError::UnknownOpcode(other.0)),
        };
        r.finish()?;
        Ok(reply)
    }
}

/// Checks a name component: 1..=255 bytes, no '/' or NUL.
pub fn check_name(name: &[u8]) -> Result<&[u8], ProtoError> {
    if name.is_empty() || name.len() > NAME_MAX || name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(ProtoError::BadName { len: name.len() });
    }
    Ok(name)
}

/// A WRITE's or READ's offset as encoded: for an extent, [`EXTENT_FLAG`] set and the
/// distance from the extent's start after it.
fn put_extent(w: &mut Vec<u8>, offset: u64, extent: Option<u64>) {
    match extent {
        None => put_u64(w, offset),
        Some(origin) => {
            put_u64(w, offset | EXTENT_FLAG);
            // Past u32 only in a request `check_extent` refuses: it saturates, and is refused.
            put_u32(
                w,
                u32::try_from(offset.wrapping_sub(origin)).unwrap_or(u32::MAX),
            );
        }
    }
}

/// The offset and extent start that [`put_extent`] wrote.
/// An inode's I/O unit field: 0 (none) up to [`MAX_IO`].
fn io_unit(r: &mut Reader<'_>) -> Result<u32, ProtoError> {
    let unit = r.u32("io_unit")?;
    if unit > MAX_IO {
        return Err(ProtoError::BadValue {
            field: "io_unit",
            value: unit.into(),
        });
    }
    Ok(unit)
}

fn get_extent(r: &mut Reader<'_>) -> Result<(u64, Option<u64>), ProtoError> {
    let encoded = r.u64("offset")?;
    let offset = encoded & !EXTENT_FLAG;
    if encoded & EXTENT_FLAG == 0 {
        return Ok((offset, None));
    }
    let into = u64::from(r.u32("extent")?);
    let origin = offset.checked_sub(into).ok_or(ProtoError::BadValue {
        field: "extent",
        value: into,
    })?;
    Ok((offset, Some(origin)))
}

/// Bytes `[offset, offset + len)` of an extent lie within [`MAX_IO`] of its start, as every
/// I/O unit does: an extent's pages then never reach another unit's start.
fn check_extent(offset: u64, len: u64, extent: Option<u64>) -> Result<(), ProtoError> {
    match extent {
        Some(origin) if offset + len - origin > u64::from(MAX_IO) => Err(ProtoError::BadValue {
            field: "extent",
            value: origin,
        }),
        _ => Ok(()),
    }
}

fn check_range(offset: u64, len: u64) -> Result<(), ProtoError> {
    // Offsets stay below 2^63 so that they fit off_t.
    match offset.checked_add(len) {
        Some(end) if end <= i64::MAX as u64 => Ok(()),
        _ => Err(ProtoError::BadValue {
            field: "offset",
            value: offset,
        }),
    }
}

fn put_u16(w: &mut Vec<u8>, v: u16) {
    w.extend_from_slice(&v.to_le_bytes());
}

fn put_u32(w: &mut Vec<u8>, v: u32) {
    w.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(w: &mut Vec<u8>, v: u64) {
    w.extend_from_slice(&v.to_le_bytes());
}

/// A bounds-checked little-endian cursor.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], ProtoError> {
        if self.0.len() < n {
            return Err(ProtoError::Truncated {
                field,
                need: n,
                have: self.0.len(),
            });
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], ProtoError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(field, N)?);
        Ok(a)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, ProtoError> {
        Ok(self.array::<1>(field)?[0])
    }

    fn bool(&mut self, field: &'static str) -> Result<bool, ProtoError> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(ProtoError::BadValue {
                field,
                value: v.into(),
            }),
        }
    }

    /// A flags byte of which only the low `bits` bits may be set.
    fn flags(&mut self, field: &'static str, bits: u32) -> Result<u8, ProtoError> {
        let f = self.u8(field)?;
        if u32::from(f) >> bits != 0 {
            return Err(ProtoError::BadValue {
                field,
                value: f.into(),
            });
        }
        Ok(f)
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, ProtoError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, ProtoError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, ProtoError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, ProtoError> {
        Ok(i32::from_le_bytes(self.array(field)?))
    }

    fn i64(&mut self, field: &'static str) -> Result<i64, ProtoError> {
        Ok(i64::from_le_bytes(self.array(field)?))
    }

    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }

    fn name_rest(&mut self) -> Result<&'a [u8], ProtoError> {
        check_name(self.rest())
    }

    fn finish(&self) -> Result<(), ProtoError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ProtoError::Trailing(self.0.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn name() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            any::<u8>().prop_filter("no / or NUL", |b| *b != b'/' && *b != 0),
            1..=255,
        )
    }

    fn hint() -> impl Strategy<Value = Hint> {
        (0u8..3, any::<bool>()).prop_map(|(d, bigdir)| Hint {
            data: [DataDist::Block, DataDist::File, DataDist::Io][usize::from(d)],
            bigdir,
        })
    }

    fn opt<T: std::fmt::Debug + Clone>(
        s: impl Strategy<Value = T>,
    ) -> impl Strategy<Value = Option<T>> {
        proptest::option::of(s)
    }

    /// Owned form of a request, so that proptest can generate it.
    #[derive(Debug, Clone)]
    enum Owned {
        Lookup(u64, Vec<u8>),
        Create(u64, [u32; 4], Hint, u32, bool, Vec<u8>),
        MkInode(u32, u32, u32, Hint, u32, bool),
        Link(u64, u64, u32, LinkFlags, Vec<u8>),
        GetAttr(u64),
        SetAttr(u64, SetAttr),
        ReadDir(u64, u32, Vec<u8>),
        Unlink(u64, UnlinkFlags, Vec<u8>),
        RmInode(u64, bool),
        DirSeal(u64, bool),
        Rename(u64, u64, RenameFlags, Vec<u8>, Vec<u8>),
        Open(u64, u32),
        Close(u64),
        IoUnit(u64, u32),
        SetHint(u64, Option<DataDist>, Option<u32>),
        Write(u64, u64, Option<u64>, bool, bool, Vec<u8>),
        Read(u64, u64, u32, Option<u64>),
        Fsync(u64),
        Truncate(u64, u64),
        StatFs,
    }

    impl Owned {
        fn borrow(&self) -> Request<'_> {
            match self {
                Owned::Lookup(p, n) => Request::Lookup { pino: *p, name: n },
                Owned::Create(p, [m, u, g, r], h, io, e, n) => Request::Create {
                    pino: *p,
                    mode: *m,
                    uid: *u,
                    gid: *g,
                    rdev: *r,
                    hint: *h,
                    io_unit: *io,
                    excl: *e,
                    name: n,
                },
                Owned::MkInode(m, u, g, h, io, near) => Request::MkInode {
                    mode: *m,
                    uid: *u,
                    gid: *g,
                    hint: *h,
                    io_unit: *io,
                    near: *near,
                },
                Owned::Link(p, i, m, f, n) => Request::Link {
                    pino: *p,
                    ino: *i,
                    mode: *m,
                    flags: *f,
                    name: n,
                },
                Owned::GetAttr(i) => Request::GetAttr { ino: *i },
                Owned::SetAttr(i, s) => Request::SetAttr { ino: *i, set: *s },
                Owned::ReadDir(p, m, a) => Request::ReadDir {
                    pino: *p,
                    max: *m,
                    after: a,
                },
                Owned::Unlink(p, f, n) => Request::Unlink {
                    pino: *p,
                    flags: *f,
                    name: n,
                },
                Owned::RmInode(i, o) => Request::RmInode {
                    ino: *i,
                    orphan: *o,
                },
                Owned::DirSeal(p, s) => Request::DirSeal { pino: *p, seal: *s },
                Owned::Rename(a, b, f, s, d) => Request::Rename {
                    src_pino: *a,
                    dst_pino: *b,
                    flags: *f,
                    src_name: s,
                    dst_name: d,
                },
                Owned::Open(i, f) => Request::Open { ino: *i, flags: *f },
                Owned::Close(i) => Request::Close { ino: *i },
                Owned::IoUnit(i, u) => Request::IoUnit { ino: *i, unit: *u },
                Owned::SetHint(i, d, u) => Request::SetHint {
                    ino: *i,
                    data: *d,
                    io_unit: *u,
                },
                Owned::Write(i, o, e, file, drop_set_id, d) => Request::Write {
                    ino: *i,
                    offset: *o,
                    extent: *e,
                    dist: match (e, file) {
                        (Some(_), _) => DataDist::Io,
                        (None, true) => DataDist::File,
                        (None, false) => DataDist::Block,
                    },
                    drop_set_id: *drop_set_id,
                    data: d,
                },
                Owned::Read(i, o, l, e) => Request::Read {
                    ino: *i,
                    offset: *o,
                    len: *l,
                    extent: *e,
                },
                Owned::Fsync(i) => Request::Fsync { ino: *i },
                Owned::Truncate(i, s) => Request::Truncate { ino: *i, size: *s },
                Owned::StatFs => Request::StatFs,
            }
        }
    }

    fn setattr() -> impl Strategy<Value = SetAttr> {
        (
            opt(any::<u32>()),
            opt(any::<u32>()),
            opt(any::<u32>()),
            opt(any::<u64>()),
            opt(any::<u64>()),
            opt(any::<i64>()),
            opt(any::<i64>()),
            opt(any::<i32>()),
            opt(hint()),
            any::<bool>(),
        )
            .prop_map(
                |(
                    mode,
                    uid,
                    gid,
                    size,
                    extend_to,
                    atime_ns,
                    mtime_ns,
                    nlink_delta,
                    layout,
                    drop_set_id,
                )| {
                    SetAttr {
                        mode,
                        uid,
                        gid,
                        size,
                        extend_to,
                        atime_ns,
                        mtime_ns,
                        nlink_delta,
                        layout: layout.map(|h| h.data),
                        drop_set_id,
                    }
                },
            )
    }

    fn link_flags() -> impl Strategy<Value = LinkFlags> {
        any::<[bool; 3]>().prop_map(|[replace, new_link, orphan]| LinkFlags {
            replace,
            new_link,
            orphan,
        })
    }

    fn unlink_flags() -> impl Strategy<Value = UnlinkFlags> {
        any::<[bool; 3]>().prop_map(|[dir, keep_inode, orphan]| UnlinkFlags {
            dir,
            keep_inode,
            orphan,
        })
    }

    fn rename_flags() -> impl Strategy<Value = RenameFlags> {
        any::<[bool; 2]>().prop_map(|[dir, orphan]| RenameFlags { dir, orphan })
    }

    fn fate() -> impl Strategy<Value = Fate> {
        prop_oneof![
            Just(Fate::Elsewhere),
            Just(Fate::Linked),
            Just(Fate::Orphan),
            Just(Fate::Freed),
        ]
    }

    fn request() -> impl Strategy<Value = Owned> {
        let off = 0u64..1 << 50;
        prop_oneof![
            (any::<u64>(), name()).prop_map(|(p, n)| Owned::Lookup(p, n)),
            (
                any::<u64>(),
                any::<[u32; 4]>(),
                hint(),
                0..=MAX_IO,
                any::<bool>(),
                name()
            )
                .prop_map(|(p, a, h, io, e, n)| Owned::Create(p, a, h, io, e, n)),
            (any::<[u32; 3]>(), hint(), 0..=MAX_IO, any::<bool>())
                .prop_map(|([m, u, g], h, io, near)| Owned::MkInode(m, u, g, h, io, near)),
            (
                any::<u64>(),
                any::<u64>(),
                any::<u32>(),
                link_flags(),
                name()
            )
                .prop_map(|(p, i, m, f, n)| Owned::Link(p, i, m, f, n)),
            any::<u64>().prop_map(Owned::GetAttr),
            (any::<u64>(), setattr()).prop_map(|(i, s)| Owned::SetAttr(i, s)),
            (any::<u64>(), any::<u32>(), proptest::option::of(name()))
                .prop_map(|(p, m, a)| Owned::ReadDir(p, m, a.unwrap_or_default())),
            (any::<u64>(), unlink_flags(), name()).prop_map(|(p, f, n)| Owned::Unlink(p, f, n)),
            (any::<u64>(), any::<bool>()).prop_map(|(i, o)| Owned::RmInode(i, o)),
            (any::<u64>(), any::<bool>()).prop_map(|(p, s)| Owned::DirSeal(p, s)),
            (any::<u64>(), any::<u64>(), rename_flags(), name(), name())
                .prop_map(|(a, b, f, s, d)| Owned::Rename(a, b, f, s, d)),
            (any::<u64>(), any::<u32>()).prop_map(|(i, f)| Owned::Open(i, f)),
            any::<u64>().prop_map(Owned::Close),
            (any::<u64>(), 1..=MAX_IO).prop_map(|(i, u)| Owned::IoUnit(i, u)),
            (any::<u64>(), opt(hint()), opt(0..=MAX_IO)).prop_map(|(i, h, u)| Owned::SetHint(
                i,
                h.map(|h| h.data),
                u
            )),
            // An extent's start lies at most `MAX_IO - len` bytes before the offset.
            (
                any::<u64>(),
                off.clone(),
                opt(0..=u64::from(MAX_IO) - 512),
                any::<bool>(),
                any::<bool>(),
                proptest::collection::vec(any::<u8>(), 0..512)
            )
                .prop_map(|(i, o, into, file, drop_set_id, d)| Owned::Write(
                    i,
                    o,
                    into.map(|n| o - n.min(o)),
                    file,
                    drop_set_id,
                    d
                )),
            (any::<u64>(), off, 0..=MAX_IO, opt(any::<u64>())).prop_map(|(i, o, l, into)| {
                let most = u64::from(MAX_IO - l).min(o);
                Owned::Read(i, o, l, into.map(|n| o - n % (most + 1)))
            }),
            any::<u64>().prop_map(Owned::Fsync),
            (any::<u64>(), any::<u64>()).prop_map(|(i, s)| Owned::Truncate(i, s)),
            Just(Owned::StatFs),
        ]
    }

    fn attr() -> impl Strategy<Value = Attr> {
        (
            any::<[u64; 2]>(),
            any::<[u32; 6]>(),
            any::<[i64; 3]>(),
            hint(),
        )
            .prop_map(
                |(
                    [ino, size],
                    [mode, uid, gid, nlink, rdev, io_unit],
                    [atime_ns, mtime_ns, ctime_ns],
                    hint,
                )| {
                    Attr {
                        ino,
                        mode,
                        uid,
                        gid,
                        nlink,
                        size,
                        atime_ns,
                        mtime_ns,
                        ctime_ns,
                        hint,
                        rdev,
                        io_unit,
                    }
                },
            )
    }

    #[test]
    fn errno_maps_to_error_code_and_back() {
        for e in [
            Errno::ENOENT,
            Errno::EEXIST,
            Errno::ENOTEMPTY,
            Errno::ESTALE,
            Errno::EXDEV,
        ] {
            assert_eq!(Errno::from_error_code(e.error_code()), e);
        }
        assert_eq!(Errno::from_error_code(ErrorCode::MALFORMED), Errno::EINVAL);
        assert_eq!(
            Errno::from_error_code(ErrorCode::UNKNOWN_OPCODE),
            Errno::ENOSYS
        );
        assert_eq!(Errno::from_error_code(ErrorCode(0x7FFF_FFFF)), Errno::EIO);
    }

    #[test]
    fn every_file_system_opcode_has_a_name_of_its_own() {
        let names: std::collections::HashSet<_> = op::ALL.iter().map(|&o| op::name(o)).collect();
        assert_eq!(names.len(), op::ALL.len());
        assert!(!names.contains("unknown"));
    }

    #[test]
    fn names_with_slash_nul_or_bad_length_are_rejected() {
        for bad in [&b""[..], b"a/b", b"a\0", &[b'x'; 256]] {
            let req = Request::Lookup { pino: 1, name: bad }.encode(0);
            assert!(matches!(
                Request::decode(op::LOOKUP, &req),
                Err(ProtoError::BadName { .. })
            ));
        }
        let long = Request::Lookup {
            pino: 1,
            name: &[b'x'; 256],
        }
        .encode(0);
        assert_eq!(
            Request::decode(op::LOOKUP, &long).unwrap_err().errno(),
            Errno::ENAMETOOLONG
        );
    }

    #[test]
    fn unknown_flag_bits_and_fates_are_errors() {
        let link = Request::Link {
            pino: 1,
            ino: 2,
            mode: 0,
            flags: LinkFlags::default(),
            name: b"n",
        }
        .encode(0);
        let unlink = Request::Unlink {
            pino: 1,
            flags: UnlinkFlags::default(),
            name: b"n",
        }
        .encode(0);
        let rename = Request::Rename {
            src_pino: 1,
            dst_pino: 1,
            flags: RenameFlags::default(),
            src_name: b"a",
            dst_name: b"b",
        }
        .encode(0);
        let rminode = Request::RmInode {
            ino: 1,
            orphan: false,
        }
        .encode(0);
        // The flags byte of each, and the first value with an unknown bit set.
        for (o, mut p, at, bad) in [
            (op::LINK, link, 28, 8u8),
            (op::UNLINK, unlink, 16, 8),
            (op::RENAME, rename, 24, 4),
            (op::RMINODE, rminode, 16, 2),
        ] {
            assert!(Request::decode(o, &p).is_ok());
            p[at] = bad;
            assert!(
                matches!(Request::decode(o, &p), Err(ProtoError::BadValue { .. })),
                "{}",
                op::name(o)
            );
        }
        let mut out = Vec::new();
        Reply::Removed(Some(Removed {
            ino: 1,
            mode: 0,
            size: 0,
            fate: Fate::Freed,
            hint: Hint::default(),
        }))
        .encode(&mut out);
        out[21] = 4;
        assert!(matches!(
            Reply::decode(op::UNLINK, &out),
            Err(ProtoError::BadValue { field: "fate", .. })
        ));
    }

    #[test]
    fn unknown_opcode_and_trailing_bytes_are_errors() {
        assert_eq!(
            Request::decode(Opcode(0x0999), &[0; 8]),
            Err(ProtoError::UnknownOpcode(0x999))
        );
        let mut p = Request::GetAttr { ino: 5 }.encode(9);
        p.push(0);
        assert_eq!(
            Request::decode(op::GETATTR, &p),
            Err(ProtoError::Trailing(1))
        );
        let read = Request::Read {
            ino: 1,
            offset: 0,
            len: MAX_IO + 1,
            extent: None,
        }
        .encode(0);
        assert!(Request::decode(op::READ, &read).is_err());
        // Past off_t's range, extent or not.
        for extent in [None, Some(i64::MAX as u64 - 1)] {
            let write = Request::Write {
                ino: 1,
                offset: i64::MAX as u64 - 1,
                extent,
                dist: if extent.is_some() {
                    DataDist::Io
                } else {
                    DataDist::Block
                },
                drop_set_id: false,
                data: b"xyz",
            }
            .encode(0);
            assert!(Request::decode(op::WRITE, &write).is_err());
        }
    }

    #[test]
    fn a_commit_carries_the_distribution_its_bytes_were_placed_by() {
        let set = SetAttr {
            extend_to: Some(300_000),
            layout: Some(DataDist::File),
            ..SetAttr::default()
        };
        let req = Request::SetAttr { ino: 9, set };
        let mut b = req.encode(1);
        // The layout byte, then the flags byte.
        let layout = b.len() - 2;
        assert_eq!(b[layout..], [1 + DataDist::File.to_byte(), 0]);
        assert_eq!(Request::decode(op::SETATTR, &b), Ok((1, req)));
        b[layout] = 0;
        assert!(matches!(
            Request::decode(op::SETATTR, &b),
            Ok((
                _,
                Request::SetAttr {
                    set: SetAttr { layout: None, .. },
                    ..
                }
            ))
        ));
        b[layout] = 4;
        assert!(
            Request::decode(op::SETATTR, &b).is_err(),
            "no distribution 3"
        );
    }

    #[test]
    fn writes_and_commits_say_whether_they_drop_set_id_bits() {
        let write = |drop_set_id| Request::Write {
            ino: 3,
            offset: 0,
            extent: None,
            dist: DataDist::Block,
            drop_set_id,
            data: b"ab",
        };
        let mut b = write(true).encode(5);
        assert_eq!(b[24..28], [DataDist::Block.to_byte(), 1, 0, 0]);
        assert_eq!(Request::decode(op::WRITE, &b), Ok((5, write(true))));
        b[25] = 0;
        assert_eq!(Request::decode(op::WRITE, &b), Ok((5, write(false))));
        // Unknown flags and the two reserved bytes are refused.
        for (at, v) in [(25, 2), (26, 1), (27, 1)] {
            let mut bad = b.clone();
            bad[at] = v;
            assert!(Request::decode(op::WRITE, &bad).is_err(), "byte {at} = {v}");
        }
        let set = SetAttr {
            drop_set_id: true,
            ..SetAttr::default()
        };
        let req = Request::SetAttr { ino: 9, set };
        let mut b = req.encode(1);
        assert_eq!(b.last(), Some(&1));
        assert_eq!(Request::decode(op::SETATTR, &b), Ok((1, req)));
        *b.last_mut().unwrap() = 2;
        assert!(Request::decode(op::SETATTR, &b).is_err(), "unknown flag");
    }

    #[test]
    fn an_extent_is_the_top_bit_of_the_offset_and_its_start_follows_as_a_distance() {
        let write = |extent: Option<u64>| Request::Write {
            ino: 3,
            offset: 47_008 + 100,
            extent,
            dist: if extent.is_some() {
                DataDist::Io
            } else {
                DataDist::File
            },
            drop_set_id: false,
            data: b"ab",
        };
        let (plain, ext) = (write(None).encode(5), write(Some(47_008)).encode(5));
        assert_eq!(plain[16..24], 47_108u64.to_le_bytes());
        assert_eq!(
            plain[24..28],
            u32::from(DataDist::File.to_byte()).to_le_bytes()
        );
        assert_eq!(ext[16..24], (47_108u64 | 1 << 63).to_le_bytes());
        assert_eq!(ext[24..28], 100u32.to_le_bytes());
        assert_eq!(ext[28..32], u32::from(DataDist::Io.to_byte()).to_le_bytes());
        // The data starts dword aligned (see `encode_head`).
        assert_eq!((plain.len() - 2, ext.len() - 2), (28, 32));
        // The distribution must say what the offset says: an extent is I/O-based, and only
        // an extent is.
        let mut io_without_extent = plain.clone();
        io_without_extent[24] = DataDist::Io.to_byte();
        assert!(Request::decode(op::WRITE, &io_without_extent).is_err());
        let mut extent_of_blocks = ext.clone();
        extent_of_blocks[28] = DataDist::Block.to_byte();
        assert!(Request::decode(op::WRITE, &extent_of_blocks).is_err());
        for (at, b) in [(24, 9), (25, 2)] {
            let mut unknown = plain.clone();
            unknown[at] = b;
            assert!(Request::decode(op::WRITE, &unknown).is_err());
        }
        assert_eq!(
            Request::decode(op::WRITE, &ext),
            Ok((5, write(Some(47_008))))
        );
        let read = Request::Read {
            ino: 3,
            offset: 47_008,
            len: 9,
            extent: Some(0),
        };
        assert_eq!(Request::decode(op::READ, &read.encode(5)), Ok((5, read)));
        // An extent starting before byte 0, or holding bytes past MAX_IO from its start.
        let mut before = write(Some(47_008)).encode(5);
        before[24..28].copy_from_slice(&47_109u32.to_le_bytes());
        assert!(Request::decode(op::WRITE, &before).is_err());
        let far = Request::Read {
            ino: 3,
            offset: u64::from(MAX_IO),
            len: 1,
            extent: Some(0),
        };
        assert!(Request::decode(op::READ, &far.encode(5)).is_err());
        let at_end = Request::Read {
            ino: 3,
            offset: u64::from(MAX_IO),
            len: 0,
            extent: Some(0),
        };
        assert_eq!(
            Request::decode(op::READ, &at_end.encode(5)),
            Ok((5, at_end))
        );
        // A unit of 0 bytes, or of more than MAX_IO.
        for unit in [0, MAX_IO + 1] {
            let p = Request::IoUnit { ino: 3, unit }.encode(5);
            assert!(Request::decode(op::IO_UNIT, &p).is_err(), "unit {unit}");
        }
    }

    #[test]
    fn hints_refuse_units_over_max_io_unknown_flags_and_distributions() {
        let set = |data, io_unit| Request::SetHint {
            ino: 3,
            data,
            io_unit,
        };
        let p = set(None, Some(MAX_IO + 1)).encode(5);
        assert!(Request::decode(op::SET_HINT, &p).is_err());
        for (at, byte) in [(16, 4u8), (17, 3)] {
            let mut p = set(Some(DataDist::Io), Some(4096)).encode(5);
            p[at] = byte;
            assert!(
                Request::decode(op::SET_HINT, &p).is_err(),
                "byte {at} = {byte}"
            );
        }
        let create = Request::MkInode {
            mode: libc::S_IFDIR | 0o755,
            uid: 1,
            gid: 2,
            hint: Hint::default(),
            io_unit: MAX_IO + 1,
            near: false,
        };
        assert!(Request::decode(op::MKINODE, &create.encode(7)).is_err());
    }

    #[test]
    fn only_a_near_mkinode_runs_on_the_receiving_worker() {
        let mk = |near| Request::MkInode {
            mode: libc::S_IFDIR | 0o755,
            uid: 1,
            gid: 2,
            hint: Hint::default(),
            io_unit: 0,
            near,
        };
        assert!(Request::runs_on_receiver(op::MKINODE, &mk(true).encode(7)));
        assert!(!Request::runs_on_receiver(
            op::MKINODE,
            &mk(false).encode(7)
        ));
        // A truncated one runs where λ says, which answers it with the decoding error.
        let cut = mk(true).encode(7);
        assert!(!Request::runs_on_receiver(
            op::MKINODE,
            &cut[..cut.len() - 1]
        ));
        // Same bytes under another opcode: routed by λ.
        assert!(!Request::runs_on_receiver(op::GETATTR, &mk(true).encode(7)));
    }

    proptest! {
        #[test]
        fn request_round_trips(req in request(), lambda in any::<u64>()) {
            let r = req.borrow();
            let bytes = r.encode(lambda);
            prop_assert_eq!(Request::decode(r.opcode(), &bytes), Ok((lambda, r)));
        }

        #[test]
        fn requests_cut_inside_their_fixed_fields_are_errors(req in request(), cut in 0usize..8) {
            let r = req.borrow();
            let bytes = r.encode(3);
            prop_assert!(Request::decode(r.opcode(), &bytes[..cut]).is_err());
            if !matches!(r, Request::StatFs) {
                prop_assert!(Request::decode(r.opcode(), &bytes[..8 + cut.min(3)]).is_err());
            }
        }

        #[test]
        fn garbage_requests_and_replies_never_panic(
            op in any::<u16>(), bytes in proptest::collection::vec(any::<u8>(), 0..400),
        ) {
            let _ = Request::decode(Opcode(op), &bytes);
            let _ = Reply::decode(Opcode(op), &bytes);
            for o in op::ALL {
                let _ = Request::decode(o, &bytes);
                let _ = Reply::decode(o, &bytes);
            }
        }

        #[test]
        fn attr_replies_round_trip(a in attr(), opi in 0usize..7) {
            let o = [
                op::CREATE,
                op::MKINODE,
                op::GETATTR,
                op::SETATTR,
                op::OPEN,
                op::IO_UNIT,
                op::SET_HINT,
            ][opi];
            let mut out = Vec::new();
            Reply::Attr(a).encode(&mut out);
            prop_assert_eq!(out.len(), ATTR_BYTES);
            prop_assert_eq!(Reply::decode(o, &out), Ok(Reply::Attr(a)));
        }

        #[test]
        fn other_replies_round_trip(
            a in opt(attr()), ino in any::<u64>(), mode in any::<u32>(), h in hint(),
            names in proptest::collection::vec(name(), 0..20), more in any::<bool>(),
            fate in opt(fate()), n in any::<u64>(), st in any::<[u64; 4]>(),
        ) {
            let removed = fate.map(|fate| Removed { ino, mode, size: n, fate, hint: h });
            let cases: Vec<(Opcode, Reply<'_>)> = vec![
                (op::LOOKUP, Reply::Lookup { ino, mode, attr: a }),
                (op::READDIR, Reply::Entries {
                    more,
                    entries: names.iter().map(|nm| DirEntry { ino, mode, name: nm }).collect(),
                }),
                (op::UNLINK, Reply::Removed(removed)),
                (op::RMINODE, Reply::Removed(removed)),
                (op::DIRSEAL, Reply::Count(n)),
                (op::WRITE, Reply::Written(mode)),
                (op::READ, Reply::Data(names.first().map_or(&[][..], |v| v))),
                (op::STATFS, Reply::StatFs(StatFs {
                    bytes_total: st[0], bytes_used: st[1], inodes_total: st[2], inodes_used: st[3],
                })),
                (op::FSYNC, Reply::Empty),
            ];
            for (o, rep) in cases {
                let mut out = Vec::new();
                rep.encode(&mut out);
                prop_assert_eq!(Reply::decode(o, &out), Ok(rep));
            }
        }
    }
}
