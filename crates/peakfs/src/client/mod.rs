//! The PeakFS client library (§III-A "Client Lib", §III-C1, §III-C2, §III-D): fetches the
//! cluster view from the master, connects to every server, routes each operation by its
//! characteristic value λ ([`crate::placement`]), resolves paths through the client dentry
//! cache ([`dcache`]), keeps the file map of open files, and runs the non-blocking write
//! pipeline with commit consistency:
//!
//! - a write returns once its requests are sent; the file's `unfinished_cnt` counts writes
//!   whose replies have not arrived, bounded by [`ClientOptions::max_unfinished`];
//! - `fsync` and `close` wait until `unfinished_cnt` is zero and then *commit*: one SETATTR
//!   raises the size to the end of the writes at the inode's home and sets the mtime to the
//!   time of the last of them, unless every write went to the home slice (a WRITE there does
//!   both itself: a small file costs CREATE + WRITE); a change of attributes commits first;
//!   `fsync` also makes every slice written since the last commit durable (FSYNC). Data is visible to other clients
//!   after `fsync` or `close` (commit consistency), not before;
//! - a read cache with read-ahead per open file ([`readahead`]): a short read of block- or
//!   file-distributed data keeps [`ClientOptions::read_ahead`] bytes ahead of the reader in
//!   flight, as READs of at most [`readahead::READ_PIECE`] bytes, and a strided reader's next
//!   transfers; a read returns when the READs holding its bytes are answered;
//! - zero copy where the transport allows it: write data goes from the caller's buffer to the
//!   socket as its own `writev` slice (fabric sends payloads ≥ 16 KiB without copying), and a
//!   large reply that a caller waits for is received from the socket into the buffer the read
//!   returns ([`fabric::Connection::recv_for`]), not copied out of the receive buffer.
//!
//! Every request is bounded by [`ClientOptions::timeout`]: an unreachable or dead server is an
//! error ([`ClientError::Unreachable`]), never a hang.
//!
//! POSIX link counts: hard links ([`Client::link_at`]), directories counting their
//! sub-directories, and files unlinked while open here: while this client holds files open,
//! its unlinks and renames ask the servers to keep an inode losing its last link as an orphan;
//! one of its own open files stays readable and writable and is freed at its last
//! [`Client::close`], any other is freed at once. Open state is this client's only: another
//! client's unlink frees a file this client holds open, and an orphan whose client dies is
//! freed when its server restarts (its data on other slices is then not freed: a leak of
//! pages, never a wrong read).
//!
//! A [`Client`] is one connection set used from one thread at a time (`&mut self`); share it
//! behind a mutex, or open one per thread or process (as HPC client processes do). Clients
//! that must act as one, the lanes of a FUSE mount, form a [`group`] ([`Client::join`]).

pub mod conn;
pub mod dcache;
pub mod filemap;
pub mod group;
pub mod readahead;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::hash::mix64;

use crate::placement::{DataDist, Hint, Layout, ROOT_INO, Route, home_lambda, name_lambda};
use crate::protocol::{
    Attr, Errno, Fate, LinkFlags, MAX_IO, NAME_MAX, ProtoError, Removed, RenameFlags, Reply,
    Request, SetAttr, StatFs, UnlinkFlags, is_dir_mode, op,
};
use crate::pstore::inode::mode_without_set_id_bits;

use conn::Conns;
use dcache::DentryCache;
use filemap::{FileMap, OfIno};
use group::Group;
use readahead::{READ_PIECE, ReadAhead, Stream};

/// Errors of client operations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// an errno of this client's own (a request it did not send)
    #[error("{0}")]
    Errno(Errno),
    /// a server refused the request: its errno, and what it said about it
    #[error("{errno}: {message}")]
    Refused {
        /// The errno.
        errno: Errno,
        /// The server's message.
        message: String,
    },
    /// a server cannot be reached or did not answer in time
    #[error("server {server} ({addr}) unreachable: {reason}")]
    Unreachable {
        /// Server index.
        server: u32,
        /// Its address.
        addr: String,
        /// The transport failure.
        reason: String,
        /// The failure was a timeout.
        timed_out: bool,
    },
    /// the master cannot be reached or the cluster is not ready
    #[error("master {addr}: {reason}")]
    Master {
        /// Master address.
        addr: String,
        /// What failed.
        reason: String,
    },
    /// a reply could not be decoded
    #[error("bad reply: {0}")]
    Protocol(String),
    /// a path is not absolute or holds an invalid component
    #[error("invalid path {0:?}")]
    BadPath(String),
    /// a file descriptor that is not open
    #[error("file descriptor {0} is not open")]
    BadFd(u64),
    /// an internal invariant broke
    #[error("internal client error: {0}")]
    Internal(&'static str),
}

impl ClientError {
    /// The errno a POSIX caller (FUSE) gets for this error.
    pub fn errno(&self) -> i32 {
        match self {
            ClientError::Errno(e) | ClientError::Refused { errno: e, .. } => e.0,
            ClientError::Unreachable {
                timed_out: true, ..
            } => libc::ETIMEDOUT,
            ClientError::BadPath(_) => libc::EINVAL,
            ClientError::BadFd(_) => libc::EBADF,
            _ => libc::EIO,
        }
    }
}

impl ClientError {
    /// Whether this is errno `e`, of this client's own or a server's.
    pub fn is(&self, e: Errno) -> bool {
        matches!(self, ClientError::Errno(x) | ClientError::Refused { errno: x, .. } if *x == e)
    }
}

impl From<Errno> for ClientError {
    fn from(e: Errno) -> Self {
        ClientError::Errno(e)
    }
}

impl From<ProtoError> for ClientError {
    fn from(e: ProtoError) -> Self {
        ClientError::Protocol(e.to_string())
    }
}

/// Result of client operations.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// Settings of a client.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Bound on connecting and on every reply wait.
    pub timeout: Duration,
    /// How long [`Client::connect`] waits for the cluster to become ready.
    pub ready_wait: Duration,
    /// Requests in flight per server connection.
    pub window: usize,
    /// Upper bound of a file's `unfinished_cnt` (unacknowledged pipelined writes).
    pub max_unfinished: usize,
    /// Lifetime of cached directory dentries (zero: no cache).
    pub dentry_ttl: Duration,
    /// Bytes a short read fetches ahead (zero: no read cache).
    pub read_ahead: usize,
    /// Hint of new files and directories (default: the parent directory's).
    pub hint: Option<Hint>,
    /// A new directory in a regular directory gets its inode, and with it its entries and
    /// files, on this client's home slice (true, the default): the worker there serves this
    /// client's connection, so its metadata needs no hop between workers, and consecutive
    /// clients (numbered by the master) have homes on different slices, so the directories of
    /// many clients spread evenly. False: where the name hashes to (server and worker), as in
    /// the paper; for trees one client makes for many others to use.
    pub dirs_near_client: bool,
    /// How long a wait for a reply polls the connection before it sleeps (zero: sleeps at
    /// once). Worth it where every client process has a core of its own: the reply then costs
    /// no wake-up ([`fabric::TcpConfig::reply_poll`]).
    pub reply_poll: Duration,
    /// The I/O unit this client gives an I/O-based file that it writes first (none: the
    /// length of that first write), within [`MIN_IO_UNIT`]..=[`MAX_IO`]. For writers whose
    /// first write is not their transfer size (a header, or the kernel's pieces through
    /// FUSE).
    pub io_unit: Option<u32>,
    /// Owner of files created through the path API.
    pub uid: u32,
    /// Group of files created through the path API.
    pub gid: u32,
}

impl Default for ClientOptions {
    fn default() -> Self {
        // SAFETY: geteuid/getegid have no preconditions and cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Self {
            timeout: Duration::from_secs(10),
            ready_wait: Duration::from_secs(10),
            window: 64,
            max_unfinished: 32,
            dentry_ttl: Duration::from_secs(2),
            read_ahead: 1 << 20,
            hint: None,
            dirs_near_client: true,
            reply_poll: Duration::ZERO,
            io_unit: None,
            uid,
            gid,
        }
    }
}

/// Who creates an inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

/// A directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Name.
    pub name: Vec<u8>,
    /// Inode number.
    pub ino: u64,
    /// Type and permission bits (type bits at least).
    pub mode: u32,
}

/// What a directory gives its new entries: its hint (bigdir or not, and the data distribution
/// of new files) and the I/O unit of its new I/O-based files ([`Attr::io_unit`] of a
/// directory; 0: none, their first write fixes it).
#[derive(Debug, Clone, Copy)]
struct DirDefaults {
    hint: Hint,
    io_unit: u32,
}

impl DirDefaults {
    fn of(a: &Attr) -> Self {
        Self {
            hint: a.hint,
            io_unit: a.io_unit,
        }
    }
}

/// An open file of this client (the "File Map" of §III-A).
#[derive(Debug)]
struct OpenFile {
    ino: u64,
    /// Type and permission bits as last seen.
    mode: u32,
    dist: DataDist,
    /// The I/O unit of an I/O-based file as last seen (0: none yet).
    io_unit: u32,
    writable: bool,
    append: bool,
    /// The size last seen at the home slice.
    size: u64,
    /// Position of `read`/`write` without an offset.
    pos: u64,
    /// End of the writes since the last commit.
    written_end: Option<u64>,
    /// Time of the last write since the last commit: the mtime its commit sets.
    written_at_ns: i64,
    /// Slices written since the last commit (to FSYNC), by route.
    dirty: BTreeMap<(u32, u32), u64>,
    /// The writes since the last commit drop the file's set-ID bits ([`Client::drop_set_id_bits`]).
    drop_set_id: bool,
    /// The server keeps read-ahead state for this file (CLOSE drops it).
    read_sent: bool,
    /// The read cache with the reads sent ahead.
    ahead: ReadAhead,
    /// The last read, `(offset, length, distance from the read before)`: a strided reader
    /// shows the same distance and length twice.
    last_read: Option<(u64, usize, u64)>,
}

impl OpenFile {
    /// The file's size as this descriptor sees it: the size last seen at the home slice, or
    /// the end of its own uncommitted writes.
    fn seen_size(&self) -> u64 {
        self.size.max(self.written_end.unwrap_or(0))
    }
}

impl OfIno for OpenFile {
    fn ino(&self) -> u64 {
        self.ino
    }
}

/// Most transfers of a strided reader fetched together.
const STRIDED_AHEAD: u64 = 64;

/// Smallest I/O unit a first write fixes: a page, so that tiny first writes (a header) do not
/// cut every later transfer into thousands of extents.
pub const MIN_IO_UNIT: u32 = 4096;

/// The I/O units a file can have, in bytes.
pub const IO_UNITS: std::ops::RangeInclusive<u32> = MIN_IO_UNIT..=MAX_IO;

/// One data request: λ, file offset, length, and for I/O-based data the start of the I/O
/// unit (extent) holding the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DataRequest {
    lambda: u64,
    offset: u64,
    len: u64,
    extent: Option<u64>,
}

/// The data requests of bytes `[offset, offset + len)` of file `ino`: the layout's pieces, cut
/// at `piece` bytes; for I/O-based data, cut at the file's I/O units (`unit` bytes, at most
/// [`MAX_IO`]), each on the slice of the unit's first byte, whoever writes or reads it.
fn io_requests(
    layout: &Layout,
    ino: u64,
    dist: DataDist,
    unit: u32,
    offset: u64,
    len: u64,
    piece: u64,
) -> Vec<DataRequest> {
    let mut requests = Vec::new();
    let end = offset + len;
    if dist == DataDist::Io {
        let unit = u64::from(unit.clamp(1, MAX_IO));
        let mut at = offset;
        while at < end {
            let origin = at / unit * unit;
            let n = (origin + unit).min(end) - at;
            requests.push(DataRequest {
                lambda: layout.data_lambda(ino, dist, origin),
                offset: at,
                len: n,
                extent: Some(origin),
            });
            at += n;
        }
        return requests;
    }
    let cut = piece.clamp(1, u64::from(MAX_IO));
    for p in layout.split(ino, dist, offset, len) {
        let mut at = p.offset;
        while at < p.offset + p.len {
            let n = (p.offset + p.len - at).min(cut);
            let lambda = if at == p.offset {
                p.lambda
            } else {
                layout.data_lambda(ino, dist, at)
            };
            requests.push(DataRequest {
                lambda,
                offset: at,
                len: n,
                extent: None,
            });
            at += n;
        }
    }
    requests
}

/// A connected PeakFS client.
#[derive(Debug)]
pub struct Client {
    opts: ClientOptions,
    conns: Conns,
    layout: Layout,
    dcache: DentryCache,
    /// What this client shares with the others of its group: what directories give their new
    /// entries (a directory's bigdir flag never changes; its defaults for new files may,
    /// [`Client::set_hint`], and a client outside the group sees the change when it next
    /// looks the directory up), and which inodes are open and which of them are orphans.
    group: Arc<Group>,
    files: FileMap<OpenFile>,
    next_fd: u64,
    /// λ of this client's home slice: its directories go there (near placement), and every
    /// server serves it on that slice's worker.
    home: u64,
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

fn attr_of(opcode: fabric::Opcode, bytes: &[u8]) -> Result<Attr> {
    match Reply::decode(opcode, bytes)? {
        Reply::Attr(a) => Ok(a),
        _ => Err(ClientError::Protocol(format!(
            "{} reply without attributes",
            op::name(opcode)
        ))),
    }
}

fn removed_of(opcode: fabric::Opcode, bytes: &[u8]) -> Result<Option<Removed>> {
    match Reply::decode(opcode, bytes)? {
        Reply::Removed(r) => Ok(r),
        _ => Err(ClientError::Protocol(format!(
            "{} reply without removal",
            op::name(opcode)
        ))),
    }
}

/// Splits an absolute path into its components (`.` ignored; `..` refused; a name longer
/// than NAME_MAX is ENAMETOOLONG).
fn components(path: &str) -> Result<Vec<&[u8]>> {
    if !path.starts_with('/') {
        return Err(ClientError::BadPath(path.to_string()));
    }
    let mut out = Vec::new();
    for c in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
        if c == ".." {
            return Err(ClientError::BadPath(path.to_string()));
        }
        if c.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG.into());
        }
        out.push(c.as_bytes());
    }
    Ok(out)
}

/// `path` as its directory and a plain last name (`/a/b/f` → `/a/b`, `f`), for the fast path
/// of a directory resolved just before; `None` where the walk must decide (the root's own
/// entries, trailing slashes, `.` or `..` last, a name too long).
fn split_dir(path: &str) -> Option<(&str, &[u8])> {
    let (dir, last) = path.rsplit_once('/')?;
    let plain = !last.is_empty() && last != "." && last != ".." && last.len() <= NAME_MAX;
    (plain && dir.len() > 1 && dir.starts_with('/')).then_some((dir, last.as_bytes()))
}

impl Client {
    /// Connects to the cluster whose master listens at `master` (`host:port` or
    /// `http://host:port`): fetches the cluster view (waiting until it is ready) and opens one
    /// connection per server.
    pub fn connect(master: &str, opts: ClientOptions) -> Result<Self> {
        let uri = if master.contains("://") {
            master.to_string()
        } else {
            format!("http://{master}")
        };
        let view =
            crate::master::fetch_view(&uri, opts.ready_wait).map_err(|e| ClientError::Master {
                addr: master.to_string(),
                reason: format!("{e:#}"),
            })?;
        let layout =
            Layout::new(view.servers_expected, view.workers, view.block_size).map_err(|e| {
                ClientError::Master {
                    addr: master.to_string(),
                    reason: e.to_string(),
                }
            })?;
        let mut addrs = vec![String::new(); view.servers_expected as usize];
        for s in &view.servers {
            match addrs.get_mut(s.index as usize) {
                Some(a) => *a = s.data_addr.clone(),
                None => {
                    return Err(ClientError::Master {
                        addr: master.to_string(),
                        reason: format!("server index {} out of range", s.index),
                    });
                }
            }
        }
        let mut client = Self::numbered(layout, addrs, opts, view.client_number)?;
        client.conns.ask_master_on_failure(uri);
        Ok(client)
    }

    /// Connects to servers given directly (`addrs[i]` = server i) with layout `layout`. With no
    /// master to number it, the client takes a home slice at random.
    pub fn with_servers(layout: Layout, addrs: Vec<String>, opts: ClientOptions) -> Result<Self> {
        static CLIENTS: AtomicU64 = AtomicU64::new(0);
        let nonce = now_ns().unsigned_abs() ^ (u64::from(std::process::id()) << 32);
        let number = mix64(nonce ^ CLIENTS.fetch_add(1, Ordering::Relaxed));
        Self::numbered(layout, addrs, opts, number)
    }

    /// Client number `number` (§III-B's client i) asks every server for communicating thread
    /// `i mod T`, and is at home on that thread's slice of server `(i / T) mod servers`:
    /// consecutive numbers have homes on different slices, all of them in turn.
    fn numbered(
        layout: Layout,
        addrs: Vec<String>,
        opts: ClientOptions,
        number: u64,
    ) -> Result<Self> {
        let (servers, threads) = (u64::from(layout.servers()), u64::from(layout.workers()));
        let thread = number % threads;
        let server = (number / threads) % servers;
        // Both below 2^15 (a layout's bound), so the casts are exact.
        let home = u64::from(layout.slot(server as u32, thread as u32));
        let conns = Conns::connect(
            layout,
            addrs,
            opts.window,
            opts.timeout,
            opts.reply_poll,
            thread,
        )?;
        Ok(Self {
            home,
            dcache: DentryCache::new(opts.dentry_ttl),
            opts,
            conns,
            layout,
            group: Arc::default(),
            files: FileMap::default(),
            next_fd: 3,
        })
    }

    /// The cluster layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// λ of this client's home slice (see [`ClientOptions::dirs_near_client`]).
    pub fn home(&self) -> u64 {
        self.home
    }

    /// The options.
    pub fn options(&self) -> &ClientOptions {
        &self.opts
    }

    fn caller(&self) -> Caller {
        Caller {
            uid: self.opts.uid,
            gid: self.opts.gid,
        }
    }

    fn call(&mut self, lambda: u64, req: &Request<'_>) -> Result<Vec<u8>> {
        self.conns.call(lambda, req)
    }

    fn same_slice(&self, a: u64, b: u64) -> bool {
        self.layout.route(a) == self.layout.route(b)
    }

    /// Joins the group of `other`: from now on the two act as one client towards the servers
    /// for open files, orphans and directory defaults ([`group`]). For a client with no file
    /// open (EBUSY otherwise): what it knew of directories is dropped.
    pub fn join(&mut self, other: &Client) -> Result<()> {
        if !self.files.is_empty() {
            return Err(Errno::EBUSY.into());
        }
        self.group = Arc::clone(&other.group);
        Ok(())
    }

    /// Whether an unlink or rename must let an inode losing its last link become an orphan:
    /// it may be a file open in this client's group (the reply tells which inode it was).
    fn keep_orphans(&self) -> bool {
        self.group.any_open()
    }

    fn learn(&mut self, a: &Attr) {
        if a.is_dir() {
            self.group.learn_dir(a.ino, DirDefaults::of(a));
        }
    }

    // ---- inode-level API (FUSE uses it) ----

    /// Attributes of inode `ino` (the size includes this client's uncommitted writes).
    pub fn getattr(&mut self, ino: u64) -> Result<Attr> {
        let b = self.call(home_lambda(ino), &Request::GetAttr { ino })?;
        let a = attr_of(op::GETATTR, &b)?;
        self.learn(&a);
        Ok(self.with_local_writes(a))
    }

    /// Fixes the I/O unit of I/O-based file `ino` to `unit` bytes unless a writer did first;
    /// returns the unit in force.
    pub fn fix_io_unit(&mut self, ino: u64, unit: u32) -> Result<u32> {
        let b = self.call(home_lambda(ino), &Request::IoUnit { ino, unit })?;
        match attr_of(op::IO_UNIT, &b)?.io_unit {
            0 => Err(ClientError::Protocol(format!(
                "inode {ino} kept no I/O unit"
            ))),
            u => Ok(u),
        }
    }

    /// Changes the placement hints of `ino` ([`Request::SetHint`]) and returns its attributes:
    /// `data`, a file's data distribution (only while the file holds no data) or a directory's
    /// for its new files; `io_unit`, a directory's unit for its new I/O-based files
    /// ([`MIN_IO_UNIT`]..=[`MAX_IO`], or 0 for none). A directory's bigdir flag is fixed at
    /// mkdir. EBUSY for a file this client has written to since its last commit: those
    /// bytes lie where the old distribution put them.
    pub fn set_hint(
        &mut self,
        ino: u64,
        data: Option<DataDist>,
        io_unit: Option<u32>,
    ) -> Result<Attr> {
        if io_unit.is_some_and(|u| u != 0 && !IO_UNITS.contains(&u)) {
            return Err(Errno::EINVAL.into());
        }
        if data.is_some() && self.files.of_ino(ino).any(|f| f.written_end.is_some()) {
            return Err(Errno::EBUSY.into());
        }
        let b = self.call(home_lambda(ino), &Request::SetHint { ino, data, io_unit })?;
        let a = attr_of(op::SET_HINT, &b)?;
        self.learn(&a);
        let conns = &mut self.conns;
        self.files.for_each_of_ino(ino, |f| {
            f.dist = a.hint.data;
            f.ahead.clear(conns);
        });
        Ok(self.with_local_writes(a))
    }

    /// `a` with its size raised to the end of this client's uncommitted writes to it, and
    /// its mtime to the last of them.
    fn with_local_writes(&self, mut a: Attr) -> Attr {
        for f in self.files.of_ino(a.ino) {
            if let Some(end) = f.written_end {
                a.size = a.size.max(end);
                a.mtime_ns = a.mtime_ns.max(f.written_at_ns);
            }
        }
        a
    }

    fn dir_defaults(&mut self, ino: u64) -> Result<DirDefaults> {
        if let Some(d) = self.group.dir_defaults(ino) {
            return Ok(d);
        }
        let a = self.getattr(ino)?;
        if !a.is_dir() {
            return Err(Errno::ENOTDIR.into());
        }
        Ok(DirDefaults::of(&a))
    }

    fn dir_hint(&mut self, ino: u64) -> Result<Hint> {
        Ok(self.dir_defaults(ino)?.hint)
    }

    fn dentry_lambda(&mut self, pino: u64, name: &[u8]) -> Result<u64> {
        let hint = self.dir_hint(pino)?;
        Ok(self.layout.dentry_lambda(pino, hint.bigdir, name))
    }

    /// Looks `name` up in directory `pino` (always asks the server).
    pub fn lookup(&mut self, pino: u64, name: &[u8]) -> Result<Attr> {
        let l = self.dentry_lambda(pino, name)?;
        let b = self.call(l, &Request::Lookup { pino, name })?;
        let a = match Reply::decode(op::LOOKUP, &b)? {
            Reply::Lookup { attr: Some(a), .. } => a,
            Reply::Lookup {
                ino, attr: None, ..
            } => self.getattr(ino)?,
            _ => return Err(ClientError::Protocol("lookup reply".into())),
        };
        self.learn(&a);
        self.dcache.put(pino, name, &a);
        Ok(self.with_local_writes(a))
    }

    /// Like [`Client::lookup`], but a cached directory dentry answers without an RPC.
    fn lookup_cached(&mut self, pino: u64, name: &[u8]) -> Result<Attr> {
        match self.dcache.get(pino, name) {
            Some(a) => Ok(a),
            None => self.lookup(pino, name),
        }
    }

    /// Creates regular file `name` in `pino` (`mode`: permission bits; `excl`: fail with
    /// EEXIST if it exists, else return the existing file).
    pub fn create_at(
        &mut self,
        pino: u64,
        name: &[u8],
        mode: u32,
        excl: bool,
        who: Caller,
    ) -> Result<Attr> {
        self.mknod_at(pino, name, libc::S_IFREG | (mode & 0o7777), 0, excl, who)
    }

    /// Creates a non-directory inode `name` in `pino` of type and permissions `mode`
    /// (regular, FIFO, socket, symlink, device: the servers only tell directories apart) and
    /// device number `rdev`. `excl` as in [`Client::create_at`].
    pub fn mknod_at(
        &mut self,
        pino: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
        excl: bool,
        who: Caller,
    ) -> Result<Attr> {
        if mode & libc::S_IFMT == libc::S_IFDIR {
            return Err(ClientError::Errno(Errno(libc::EINVAL)));
        }
        let parent = self.dir_defaults(pino)?;
        let mut hint = self.opts.hint.unwrap_or(parent.hint);
        hint.bigdir = false;
        // A new I/O-based file takes this client's unit, else its directory's; with neither,
        // its first write fixes one.
        let io_unit = if mode & libc::S_IFMT == libc::S_IFREG && hint.data == DataDist::Io {
            match self.opts.io_unit {
                Some(unit) => unit.clamp(MIN_IO_UNIT, MAX_IO),
                None => parent.io_unit,
            }
        } else {
            0
        };
        let l = self.layout.dentry_lambda(pino, parent.hint.bigdir, name);
        let req = Request::Create {
            pino,
            mode,
            uid: who.uid,
            gid: who.gid,
            rdev,
            hint,
            io_unit,
            excl,
            name,
        };
        match self.call(l, &req) {
            // The entry exists and its inode is on another slice (a hard link, a renamed
            // file), which cannot answer with the attributes.
            Err(e) if !excl && e.is(Errno::EEXIST) => self.lookup(pino, name),
            r => attr_of(op::CREATE, &r?),
        }
    }

    /// Adds entry `name` of directory `pino` naming existing file `ino` (a hard link) and
    /// returns the file's attributes. When the entry's slice holds the inode, one LINK raises
    /// the link count with it; otherwise the count rises at the inode's home first (an
    /// interrupted link leaves a count one too high, never an entry without its link).
    pub fn link_at(&mut self, ino: u64, pino: u64, name: &[u8]) -> Result<Attr> {
        let a = self.getattr(ino)?;
        if a.is_dir() {
            return Err(Errno(libc::EPERM).into());
        }
        if a.nlink == 0 {
            // An unlinked open file cannot get a name again.
            return Err(Errno::ENOENT.into());
        }
        let l = self.dentry_lambda(pino, name)?;
        let here = self.same_slice(l, home_lambda(ino));
        if !here {
            let set = SetAttr {
                nlink_delta: Some(1),
                ..SetAttr::default()
            };
            self.call(home_lambda(ino), &Request::SetAttr { ino, set })?;
        }
        let link = Request::Link {
            pino,
            ino,
            mode: a.mode,
            flags: LinkFlags {
                new_link: here,
                ..LinkFlags::default()
            },
            name,
        };
        if let Err(e) = self.call(l, &link) {
            if !here {
                let undo = Request::RmInode { ino, orphan: false };
                if let Err(u) = self.call(home_lambda(ino), &undo) {
                    tracing::warn!(ino, "link count of a failed link not restored: {u}");
                }
            }
            return Err(e);
        }
        self.getattr(ino)
    }

    /// Sends the link count changes `(pino, entry λ, delta)` of parents whose inode is not on
    /// the slice that changed their directory entry (that slice changed the others itself).
    fn adjust_parents(&mut self, changes: &[(u64, u64, i32)]) -> Result<()> {
        let mut net: BTreeMap<u64, i32> = BTreeMap::new();
        for &(pino, l, delta) in changes {
            if !self.same_slice(l, home_lambda(pino)) {
                *net.entry(pino).or_default() += delta;
            }
        }
        let reqs: Vec<_> = net
            .into_iter()
            .filter(|(_, d)| *d != 0)
            .map(|(ino, d)| {
                let set = SetAttr {
                    nlink_delta: Some(d),
                    ..SetAttr::default()
                };
                (home_lambda(ino), Request::SetAttr { ino, set })
            })
            .collect();
        for r in self.conns.call_many(&reqs) {
            r?;
        }
        Ok(())
    }

    /// Creates directory `name` in `pino` with hint `hint` (default: [`ClientOptions::hint`],
    /// else the parent's).
    pub fn mkdir_at(
        &mut self,
        pino: u64,
        name: &[u8],
        mode: u32,
        who: Caller,
        hint: Option<Hint>,
    ) -> Result<Attr> {
        let parent = self.dir_defaults(pino)?;
        let hint = hint.or(self.opts.hint).unwrap_or(parent.hint);
        // A new directory keeps its parent's unit for new I/O-based files.
        let io_unit = parent.io_unit;
        let mode = libc::S_IFDIR | (mode & 0o7777);
        let l = self.layout.dentry_lambda(pino, parent.hint.bigdir, name);
        let a = if parent.hint.bigdir {
            // A bigdir's child keeps dentry and inode together.
            let req = Request::Create {
                pino,
                mode,
                uid: who.uid,
                gid: who.gid,
                rdev: 0,
                hint,
                io_unit,
                excl: true,
                name,
            };
            attr_of(op::CREATE, &self.call(l, &req)?)?
        } else {
            let mk = Request::MkInode {
                mode,
                uid: who.uid,
                gid: who.gid,
                hint,
                io_unit,
                near: self.opts.dirs_near_client,
            };
            let at = if self.opts.dirs_near_client {
                self.home
            } else {
                name_lambda(pino, name)
            };
            let a = attr_of(op::MKINODE, &self.call(at, &mk)?)?;
            let link = Request::Link {
                pino,
                ino: a.ino,
                mode,
                flags: LinkFlags::default(),
                name,
            };
            if let Err(e) = self.call(l, &link) {
                let undo = Request::RmInode {
                    ino: a.ino,
                    orphan: false,
                };
                let _ = self.call(home_lambda(a.ino), &undo);
                return Err(e);
            }
            a
        };
        self.learn(&a);
        // The new directory's `..`.
        self.adjust_parents(&[(pino, l, 1)])?;
        Ok(a)
    }

    /// The λs other than the home slice that may hold bytes `[from, to)` of a file, one per
    /// slice.
    fn data_slices(&self, ino: u64, dist: DataDist, from: u64, to: u64) -> Vec<u64> {
        if to <= from {
            return Vec::new();
        }
        let home = self.layout.route(home_lambda(ino));
        let mut by_route: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        let blocks = (to - from).div_ceil(u64::from(self.layout.block_size()));
        let every_slot = dist == DataDist::Io
            || (dist == DataDist::Block && blocks > 4 * u64::from(self.layout.slots()));
        if every_slot {
            for l in 0..u64::from(self.layout.slots()) {
                let r = self.layout.route(l);
                by_route.insert((r.server, r.worker), l);
            }
        } else {
            for p in self.layout.split(ino, dist, from, to - from) {
                let r = self.layout.route(p.lambda);
                by_route.insert((r.server, r.worker), p.lambda);
            }
        }
        by_route
            .into_iter()
            .filter(|((s, w), _)| {
                Route {
                    server: *s,
                    worker: *w,
                } != home
            })
            .map(|(_, l)| l)
            .collect()
    }

    /// Drops the bytes at and beyond `size` of file `ino` on its non-home slices.
    fn truncate_remote(&mut self, ino: u64, dist: DataDist, size: u64, old: u64) -> Result<()> {
        let reqs: Vec<_> = self
            .data_slices(ino, dist, size, old)
            .into_iter()
            .map(|l| (l, Request::Truncate { ino, size }))
            .collect();
        for r in self.conns.call_many(&reqs) {
            r?;
        }
        Ok(())
    }

    /// Settles what an unlink or replacing rename removed (`orphan`: the request let an inode
    /// become an orphan): drops the link at the inode's home when it is elsewhere; keeps an
    /// orphan open here until its last close and frees any other; frees a freed file's data
    /// on the other slices.
    fn settle_removed(&mut self, r: Removed, orphan: bool) -> Result<()> {
        let r = if r.fate == Fate::Elsewhere {
            let req = Request::RmInode { ino: r.ino, orphan };
            match self.call(home_lambda(r.ino), &req) {
                // Already gone (another client's unlink): nothing of it left to free.
                Err(e) if e.is(Errno::ENOENT) => return Ok(()),
                other => removed_of(op::RMINODE, &other?)?
                    .ok_or_else(|| ClientError::Protocol("rminode reply without inode".into()))?,
            }
        } else {
            r
        };
        match r.fate {
            Fate::Orphan if self.group.keep_orphan(r.ino) => Ok(()),
            Fate::Orphan => self.free_orphan(r.ino),
            Fate::Freed => self.free_data(&r),
            Fate::Linked | Fate::Elsewhere => Ok(()),
        }
    }

    /// Frees orphan `ino` at its home, then its data on the other slices.
    fn free_orphan(&mut self, ino: u64) -> Result<()> {
        let req = Request::RmInode { ino, orphan: false };
        let b = self.call(home_lambda(ino), &req)?;
        match removed_of(op::RMINODE, &b)? {
            Some(r) if r.fate == Fate::Freed => self.free_data(&r),
            _ => Ok(()),
        }
    }

    /// Drops the data of a freed file (`r`, from its home slice) on the other slices.
    fn free_data(&mut self, r: &Removed) -> Result<()> {
        if is_dir_mode(r.mode) {
            return Ok(());
        }
        self.truncate_remote(r.ino, r.hint.data, 0, r.size)
    }

    /// Removes file `name` of `pino`.
    pub fn unlink_at(&mut self, pino: u64, name: &[u8]) -> Result<()> {
        let l = self.dentry_lambda(pino, name)?;
        // One UNLINK: when the inode was on that slice, the reply tells its fate, size and
        // hint (where its data lies).
        let flags = UnlinkFlags {
            orphan: self.keep_orphans(),
            ..UnlinkFlags::default()
        };
        let unlinked = self.call(l, &Request::Unlink { pino, flags, name })?;
        let Some(r) = removed_of(op::UNLINK, &unlinked)? else {
            return Err(Errno::ENOENT.into());
        };
        self.settle_removed(r, flags.orphan)
    }

    /// The slices holding entries of directory `ino`: its home slice, or every slice for a
    /// bigdir.
    fn dir_slices(&self, ino: u64, bigdir: bool) -> Vec<u64> {
        if bigdir {
            (0..u64::from(self.layout.slots())).collect()
        } else {
            vec![home_lambda(ino)]
        }
    }

    /// Seals directory `c` against new entries; ENOTEMPTY (unsealed again) if it has any.
    fn seal_empty(&mut self, c: &Attr) -> Result<Vec<u64>> {
        let slices = self.dir_slices(c.ino, c.hint.bigdir);
        let seal: Vec<_> = slices
            .iter()
            .map(|l| {
                (
                    *l,
                    Request::DirSeal {
                        pino: c.ino,
                        seal: true,
                    },
                )
            })
            .collect();
        let mut failure = None;
        for r in self.conns.call_many(&seal) {
            let count = r.and_then(|b| match Reply::decode(op::DIRSEAL, &b)? {
                Reply::Count(n) => Ok(n),
                _ => Err(ClientError::Protocol("dirseal reply".into())),
            });
            match count {
                Ok(0) => {}
                Ok(_) => {
                    failure.get_or_insert(ClientError::Errno(Errno::ENOTEMPTY));
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        match failure {
            Some(e) => {
                self.unseal(c.ino, &slices);
                Err(e)
            }
            None => Ok(slices),
        }
    }

    fn unseal(&mut self, ino: u64, slices: &[u64]) {
        let unseal: Vec<_> = slices
            .iter()
            .map(|l| {
                (
                    *l,
                    Request::DirSeal {
                        pino: ino,
                        seal: false,
                    },
                )
            })
            .collect();
        let _ = self.conns.call_many(&unseal);
    }

    /// Removes empty directory `name` of `pino`.
    pub fn rmdir_at(&mut self, pino: u64, name: &[u8]) -> Result<()> {
        let c = self.lookup(pino, name)?;
        if !c.is_dir() {
            return Err(Errno::ENOTDIR.into());
        }
        let slices = self.seal_empty(&c)?;
        let l = self.dentry_lambda(pino, name)?;
        let flags = UnlinkFlags {
            dir: true,
            ..UnlinkFlags::default()
        };
        let removed = match self
            .call(l, &Request::Unlink { pino, flags, name })
            .and_then(|b| removed_of(op::UNLINK, &b))
        {
            Ok(r) => r,
            Err(e) => {
                self.unseal(c.ino, &slices);
                return Err(e);
            }
        };
        self.dcache.remove(pino, name);
        self.group.forget_dir(c.ino);
        let r = removed.ok_or(ClientError::Errno(Errno::ENOENT))?;
        self.adjust_parents(&[(pino, l, -1)])?;
        self.settle_removed(r, false)
    }

    /// Renames `sname` of `spino` to `dname` of `dpino`, replacing a file or an empty
    /// directory there.
    pub fn rename_at(&mut self, spino: u64, sname: &[u8], dpino: u64, dname: &[u8]) -> Result<()> {
        let src = self.lookup(spino, sname)?;
        let dst = match self.lookup(dpino, dname) {
            Ok(a) => Some(a),
            Err(e) if e.is(Errno::ENOENT) => None,
            Err(e) => return Err(e),
        };
        let mut sealed = Vec::new();
        if let Some(d) = &dst {
            if d.ino == src.ino {
                return Ok(());
            }
            match (src.is_dir(), d.is_dir()) {
                (true, false) => return Err(Errno::ENOTDIR.into()),
                (false, true) => return Err(Errno::EISDIR.into()),
                (true, true) => sealed = self.seal_empty(d)?,
                (false, false) => {}
            }
        }
        let sl = self.dentry_lambda(spino, sname)?;
        let dl = self.dentry_lambda(dpino, dname)?;
        let orphan = self.keep_orphans();
        let result = if self.same_slice(sl, dl) {
            let req = Request::Rename {
                src_pino: spino,
                dst_pino: dpino,
                flags: RenameFlags {
                    dir: src.is_dir(),
                    orphan,
                },
                src_name: sname,
                dst_name: dname,
            };
            self.call(sl, &req).and_then(|b| removed_of(op::RENAME, &b))
        } else {
            let link = Request::Link {
                pino: dpino,
                ino: src.ino,
                mode: src.mode,
                flags: LinkFlags {
                    replace: true,
                    orphan,
                    ..LinkFlags::default()
                },
                name: dname,
            };
            self.call(dl, &link)
                .and_then(|b| removed_of(op::LINK, &b))
                .and_then(|replaced| {
                    let flags = UnlinkFlags {
                        dir: src.is_dir(),
                        keep_inode: true,
                        ..UnlinkFlags::default()
                    };
                    self.call(
                        sl,
                        &Request::Unlink {
                            pino: spino,
                            flags,
                            name: sname,
                        },
                    )?;
                    Ok(replaced)
                })
        };
        let replaced = match result {
            Ok(r) => r,
            Err(e) => {
                if let Some(d) = &dst {
                    self.unseal(d.ino, &sealed);
                }
                return Err(e);
            }
        };
        if src.is_dir() || dst.is_some_and(|d| d.is_dir()) {
            // Paths below a moved directory changed.
            self.dcache.clear();
        }
        self.dcache.remove(spino, sname);
        // Parents' `..` counts: the moved directory's, and a replaced one's.
        let mut parents = Vec::new();
        if src.is_dir() {
            parents.extend([(spino, sl, -1), (dpino, dl, 1)]);
        }
        if dst.is_some_and(|d| d.is_dir()) {
            parents.push((dpino, dl, -1));
        }
        self.adjust_parents(&parents)?;
        if let Some(r) = replaced {
            self.settle_removed(r, orphan)?;
        }
        Ok(())
    }

    /// Changes attributes of `ino`; a new size truncates or extends the file.
    ///
    /// This client's uncommitted writes to the file came before the change, so they are
    /// committed first: their commit sets the mtime and drops set-ID bits at the home slice,
    /// and landing after the change it would undo it (tar sets each file's times before it
    /// closes it; a chmod u+s after a write would lose its bit).
    pub fn setattr(&mut self, ino: u64, set: SetAttr) -> Result<Attr> {
        self.commit_writes_of(ino)?;
        let Some(size) = set.size else {
            let b = self.call(home_lambda(ino), &Request::SetAttr { ino, set })?;
            let a = attr_of(op::SETATTR, &b)?;
            self.files.for_each_of_ino(ino, |f| f.mode = a.mode);
            return Ok(a);
        };
        let old = self.getattr(ino)?;
        if old.is_dir() {
            return Err(Errno::EISDIR.into());
        }
        let mut set = set;
        set.mtime_ns.get_or_insert_with(now_ns);
        let b = self.call(home_lambda(ino), &Request::SetAttr { ino, set })?;
        let a = attr_of(op::SETATTR, &b)?;
        if size < old.size {
            self.truncate_remote(ino, old.hint.data, size, old.size)?;
        }
        let conns = &mut self.conns;
        self.files.for_each_of_ino(ino, |f| {
            f.ahead.clear(conns);
            f.mode = a.mode;
            f.size = size;
            f.written_end = f.written_end.map(|e| e.min(size));
        });
        Ok(a)
    }

    /// Drops the set-user-ID bit of `fd`'s file, and its set-group-ID bit when it is
    /// group-executable, as a write by a process without CAP_FSETID must (FUSE leaves it to
    /// the file system under FUSE_HANDLE_KILLPRIV_V2); called before such a write.
    ///
    /// The writes until the next commit say so ([`Request::Write::drop_set_id`]): the home
    /// slice drops the bits of the mode it holds as it takes one, and the commit's SETATTR
    /// for the bytes other slices took. So a bit another client set after this one last saw
    /// the mode is dropped too, without a request per write. A bit this client saw set is
    /// dropped at once as well (one SETATTR), so that it is gone before the commit.
    pub fn drop_set_id_bits(&mut self, fd: u64) -> Result<()> {
        let f = self.file(fd)?;
        f.drop_set_id = true;
        let ino = f.ino;
        if let Some(mode) = mode_without_set_id_bits(f.mode) {
            let set = SetAttr {
                mode: Some(mode),
                ..SetAttr::default()
            };
            self.setattr(ino, set)?;
        }
        Ok(())
    }

    /// Entries of directory `ino` (without `.` and `..`).
    pub fn readdir_ino(&mut self, ino: u64) -> Result<Vec<Entry>> {
        let bigdir = self.dir_hint(ino)?.bigdir;
        let mut out = Vec::new();
        for l in self.dir_slices(ino, bigdir) {
            let mut after: Vec<u8> = Vec::new();
            loop {
                let req = Request::ReadDir {
                    pino: ino,
                    max: 1024,
                    after: &after,
                };
                let b = self.call(l, &req)?;
                let Reply::Entries { more, entries } = Reply::decode(op::READDIR, &b)? else {
                    return Err(ClientError::Protocol("readdir reply".into()));
                };
                for e in &entries {
                    out.push(Entry {
                        name: e.name.to_vec(),
                        ino: e.ino,
                        mode: e.mode,
                    });
                }
                match entries.last() {
                    Some(last) if more => after = last.name.to_vec(),
                    _ => break,
                }
            }
        }
        // Entries whose inode lives on another slice come without a type.
        for e in out.iter_mut().filter(|e| e.mode & libc::S_IFMT == 0) {
            if let Ok(a) = self.getattr(e.ino) {
                e.mode = a.mode;
            }
        }
        Ok(out)
    }

    /// Capacity and usage summed over every slice.
    pub fn statfs(&mut self) -> Result<StatFs> {
        Ok(self.statfs_slices()?.into_iter().map(|(_, s)| s).sum())
    }

    /// Capacity and usage of each slice by server and worker (asked of all at once): how
    /// evenly the distribution spread what the cluster holds.
    pub fn statfs_slices(&mut self) -> Result<Vec<(Route, StatFs)>> {
        let reqs: Vec<_> = (0..u64::from(self.layout.slots()))
            .map(|l| (l, Request::StatFs))
            .collect();
        let replies = self.conns.call_many(&reqs);
        let mut slices = reqs
            .iter()
            .zip(replies)
            .map(|(&(l, _), r)| match Reply::decode(op::STATFS, &r?)? {
                Reply::StatFs(s) => Ok((self.layout.route(l), s)),
                _ => Err(ClientError::Protocol("STATFS reply without usage".into())),
            })
            .collect::<Result<Vec<_>>>()?;
        slices.sort_by_key(|(r, _)| (r.server, r.worker));
        Ok(slices)
    }

    fn install(&mut self, a: &Attr, flags: i32) -> Result<u64> {
        let acc = flags & libc::O_ACCMODE;
        let writable = acc == libc::O_WRONLY || acc == libc::O_RDWR;
        if a.is_dir() && writable {
            return Err(Errno::EISDIR.into());
        }
        let fd = self.next_fd;
        self.next_fd += 1;
        self.group.opened(a.ino);
        self.files.insert(
            fd,
            OpenFile {
                ino: a.ino,
                mode: a.mode,
                dist: a.hint.data,
                io_unit: a.io_unit,
                writable,
                append: flags & libc::O_APPEND != 0,
                size: a.size,
                pos: 0,
                written_end: None,
                written_at_ns: 0,
                dirty: BTreeMap::new(),
                read_sent: false,
                ahead: ReadAhead::default(),
                last_read: None,
                drop_set_id: false,
            },
        );
        if flags & libc::O_TRUNC != 0 && writable && a.size > 0 {
            let set = SetAttr {
                size: Some(0),
                ..Default::default()
            };
            if let Err(e) = self.setattr(a.ino, set) {
                self.files.remove(fd);
                if self.group.closed(a.ino) {
                    // Unlinked meanwhile elsewhere in the group, and open nowhere else now.
                    let _ = self.free_orphan(a.ino);
                }
                return Err(e);
            }
        }
        Ok(fd)
    }

    /// Opens inode `ino` with open(2) `flags`; returns a file descriptor of this client.
    pub fn open_ino(&mut self, ino: u64, flags: i32) -> Result<u64> {
        let req = Request::Open {
            ino,
            flags: (flags & !libc::O_TRUNC) as u32,
        };
        let a = attr_of(op::OPEN, &self.call(home_lambda(ino), &req)?)?;
        self.install(&a, flags)
    }

    /// Creates (or with `!excl` opens) file `name` of `pino` and opens it with `flags`.
    pub fn create_open_at(
        &mut self,
        pino: u64,
        name: &[u8],
        mode: u32,
        flags: i32,
        who: Caller,
    ) -> Result<(u64, Attr)> {
        let a = self.create_at(pino, name, mode, flags & libc::O_EXCL != 0, who)?;
        let fd = self.install(&a, flags)?;
        Ok((fd, a))
    }

    fn file(&mut self, fd: u64) -> Result<&mut OpenFile> {
        self.files.get_mut(fd).ok_or(ClientError::BadFd(fd))
    }

    /// Writes `data` at `offset` of open file `fd`; returns once sent (write pipeline).
    pub fn pwrite(&mut self, fd: u64, data: &[u8], offset: u64) -> Result<usize> {
        let max = self.opts.max_unfinished;
        let layout = self.layout;
        let f = self.files.get_mut(fd).ok_or(ClientError::BadFd(fd))?;
        if !f.writable {
            return Err(Errno(libc::EBADF).into());
        }
        let offset = if f.append {
            // The end of the file as this client sees it: its other descriptors' writes
            // count too.
            let ino = f.ino;
            self.files
                .of_ino(ino)
                .map(OpenFile::seen_size)
                .max()
                .unwrap_or(0)
        } else {
            offset
        };
        let f = self.files.get_mut(fd).ok_or(ClientError::BadFd(fd))?;
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|e| *e <= i64::MAX as u64)
            .ok_or(ClientError::Errno(Errno::EFBIG))?;
        if data.is_empty() {
            return Ok(0);
        }
        let (ino, dist, drop_set_id, no_unit) = (f.ino, f.dist, f.drop_set_id, f.io_unit == 0);
        // What any descriptor of the file read ahead may hold the bytes this write replaces.
        let conns = &mut self.conns;
        self.files.for_each_of_ino(ino, |f| f.ahead.clear(conns));
        if dist == DataDist::Io && no_unit {
            // The first write of an I/O-based file fixes its unit: this client's, or this
            // write's length, unless another writer's came first.
            let want = match self.opts.io_unit {
                Some(unit) => unit,
                None => u32::try_from(data.len()).unwrap_or(MAX_IO),
            };
            let unit = self.fix_io_unit(ino, want.clamp(MIN_IO_UNIT, MAX_IO))?;
            self.file(fd)?.io_unit = unit;
        }
        let unit = self.file(fd)?.io_unit;
        let pieces = io_requests(
            &layout,
            ino,
            dist,
            unit,
            offset,
            data.len() as u64,
            u64::from(MAX_IO),
        );
        for p in pieces {
            let s = (p.offset - offset) as usize;
            let req = Request::Write {
                ino,
                offset: p.offset,
                extent: p.extent,
                dist,
                drop_set_id,
                data: &data[s..s + p.len as usize],
            };
            self.conns.submit_write(fd, p.lambda, &req, max)?;
            let r = layout.route(p.lambda);
            self.file(fd)?.dirty.insert((r.server, r.worker), p.lambda);
        }
        let f = self.file(fd)?;
        f.written_end = Some(f.written_end.unwrap_or(0).max(end));
        f.written_at_ns = now_ns();
        Ok(data.len())
    }

    /// Writes at the file position (or the end with O_APPEND) and advances it.
    pub fn write(&mut self, fd: u64, data: &[u8]) -> Result<usize> {
        let pos = self.file(fd)?.pos;
        let n = self.pwrite(fd, data, pos)?;
        let f = self.file(fd)?;
        f.pos = if f.append {
            f.written_end.unwrap_or(pos)
        } else {
            pos + n as u64
        };
        Ok(n)
    }

    /// Waits for `fd`'s pipelined writes and commits them (size at the home slice); with
    /// `durable`, FSYNC on every slice written since the last commit.
    fn commit(&mut self, fd: u64, durable: bool) -> Result<()> {
        let drained = self.conns.drain_writes(fd);
        let f = self.file(fd)?;
        let (ino, dist) = (f.ino, f.dist);
        let end = f.written_end.take();
        let written_at_ns = f.written_at_ns;
        let dirty = std::mem::take(&mut f.dirty);
        let drop_set_id = std::mem::take(&mut f.drop_set_id);
        drained?;
        let home = self.layout.route(home_lambda(ino));
        // A WRITE to the home slice raises the size there itself: only writes that went to
        // other slices need the SETATTR that carries the end of the writes home.
        let remote = dirty
            .keys()
            .any(|&(server, worker)| Route { server, worker } != home);
        let mut reqs = Vec::new();
        if let Some(end) = end.filter(|_| remote) {
            // The distribution goes with the size: had another client changed it since these
            // writes were placed, the home slice holds the file to theirs (or refuses). So
            // does the dropping of set-ID bits the WRITEs to other slices could not do.
            let set = SetAttr {
                extend_to: Some(end),
                layout: Some(dist),
                mtime_ns: Some(written_at_ns),
                drop_set_id,
                ..Default::default()
            };
            reqs.push((home_lambda(ino), Request::SetAttr { ino, set }));
        }
        // An fsync reaches every slice the group's writes to the file reached since their last
        // FSYNC, through this descriptor or others, closed ones included: fsync(2) makes all
        // of a file's data durable (a package manager writes and closes files, then opens
        // each again to fsync it).
        let mut synced = if durable {
            let mut slices = self.group.take_unsynced(ino);
            slices.extend(dirty.iter().map(|(&k, &v)| (k, v)));
            for l in slices.values().filter(|l| self.layout.route(**l) != home) {
                reqs.push((*l, Request::Fsync { ino }));
            }
            reqs.push((home_lambda(ino), Request::Fsync { ino }));
            slices
        } else {
            dirty
        };
        let mut size = None;
        let mut failed = None;
        for (i, r) in self.conns.call_many(&reqs).into_iter().enumerate() {
            match r {
                Ok(b) if i == 0 && remote && end.is_some() => {
                    size = Some(attr_of(op::SETATTR, &b)?.size);
                }
                Ok(_) => {}
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        // Not made durable (not asked to, or an FSYNC failed): the next fsync's to do. Every
        // fsync reaches the home slice anyway, so a small file (written at home only) costs
        // the group nothing to remember.
        if !durable || failed.is_some() {
            synced.remove(&(home.server, home.worker));
            let overflow = self.group.wrote(ino, synced);
            self.sync_slices(&overflow)?;
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let f = self.file(fd)?;
        match (size, end) {
            (Some(s), _) => f.size = s,
            // The home slice's size is at least the end of the writes it acknowledged.
            (None, Some(e)) => f.size = f.size.max(e),
            (None, None) => {}
        }
        Ok(())
    }

    /// FSYNCs slices `(ino, λ)` (one request per slice).
    fn sync_slices(&mut self, slices: &[(u64, u64)]) -> Result<()> {
        let mut seen = std::collections::BTreeSet::new();
        let reqs: Vec<_> = slices
            .iter()
            .filter(|(_, l)| {
                let r = self.layout.route(*l);
                seen.insert((r.server, r.worker))
            })
            .map(|&(ino, l)| (l, Request::Fsync { ino }))
            .collect();
        for r in self.conns.call_many(&reqs) {
            r?;
        }
        Ok(())
    }

    /// Commits the writes of this client's descriptors of `ino` that have uncommitted ones:
    /// other clients see them from then on.
    pub fn commit_writes_of(&mut self, ino: u64) -> Result<()> {
        self.commit_writes_except(ino, None)
    }

    /// [`Self::commit_writes_of`], but for descriptor `except`.
    fn commit_writes_except(&mut self, ino: u64, except: Option<u64>) -> Result<()> {
        let fds = self.files.fds_of_ino(ino).to_vec();
        for fd in fds.into_iter().filter(|&fd| Some(fd) != except) {
            let pending = self.conns.unfinished(fd) > 0
                || self
                    .files
                    .get_mut(fd)
                    .is_some_and(|f| f.written_end.is_some());
            if pending {
                self.commit(fd, false)?;
            }
        }
        Ok(())
    }

    /// Forgets what this client's descriptors of `ino` read ahead, and the size its read-only
    /// ones saw, which they ask for again before their next read: another client of the
    /// group changed the file (a FUSE lane other than the one holding its writers).
    pub fn forget_reads_of(&mut self, ino: u64) {
        let conns = &mut self.conns;
        self.files.for_each_of_ino(ino, |f| {
            f.ahead.clear(conns);
            if !f.writable {
                f.size = 0;
            }
        });
    }

    /// Makes the writes to `fd`'s file visible and durable: `fd`'s, those of the client's
    /// other descriptors of the file, and those the group committed to it since its last
    /// fsync (fsync(2) covers all of a file's data, whoever wrote it).
    pub fn fsync(&mut self, fd: u64) -> Result<()> {
        let ino = self.file(fd)?.ino;
        self.commit_writes_except(ino, Some(fd))?;
        self.commit(fd, true)
    }

    /// Makes the entries of directory `ino` durable (fsync of a directory): an FSYNC to each
    /// slice that holds them ([`Self::dir_slices`]). A new subdirectory's inode, on another
    /// slice, was durable before its entry was made (MKINODE is written through).
    pub fn fsync_dir_ino(&mut self, ino: u64) -> Result<()> {
        let bigdir = self.dir_hint(ino)?.bigdir;
        let reqs: Vec<_> = self
            .dir_slices(ino, bigdir)
            .into_iter()
            .map(|l| (l, Request::Fsync { ino }))
            .collect();
        for r in self.conns.call_many(&reqs) {
            r?;
        }
        Ok(())
    }

    /// [`Self::fsync_dir_ino`] of directory `path`.
    pub fn fsync_dir(&mut self, path: &str) -> Result<()> {
        let comps = components(path)?;
        let d = self.resolve_dir(&comps)?;
        self.fsync_dir_ino(d.ino)
    }

    /// Makes `fd`'s writes visible (commit without FSYNC: FUSE flush).
    pub fn flush(&mut self, fd: u64) -> Result<()> {
        self.commit(fd, false)
    }

    /// Closes `fd`: waits for its writes and commits them.
    pub fn close(&mut self, fd: u64) -> Result<()> {
        let committed = self.commit(fd, false);
        self.conns.forget(fd);
        let mut f = self.files.remove(fd).ok_or(ClientError::BadFd(fd))?;
        f.ahead.clear(&mut self.conns);
        if f.read_sent {
            let _ = self.call(home_lambda(f.ino), &Request::Close { ino: f.ino });
        }
        // The group's last close of a file unlinked while open frees it.
        let freed = if self.group.closed(f.ino) {
            self.free_orphan(f.ino)
        } else {
            Ok(())
        };
        committed.and(freed)
    }

    /// Sends the READs of bytes `[at, at + len)` of open file `fd` into its read-ahead (not
    /// flushed).
    fn send_reads(&mut self, fd: u64, at: u64, len: u64) -> Result<()> {
        let f = self.files.get_mut(fd).ok_or(ClientError::BadFd(fd))?;
        let (ino, dist) = (f.ino, f.dist);
        f.read_sent = true;
        let unit = f.io_unit;
        for p in io_requests(&self.layout, ino, dist, unit, at, len, READ_PIECE) {
            let req = Request::Read {
                ino,
                offset: p.offset,
                len: p.len as u32,
                extent: p.extent,
            };
            let t = self.conns.submit(p.lambda, &req)?;
            f.ahead.push(p.offset, p.len, t);
        }
        Ok(())
    }

    /// Sends what `fd`'s read-ahead stream wants next, for a reader of `[offset, end)`:
    /// everything up to `end`, then ranges while the bytes held from `offset` on stay within
    /// the stream's budget (and the file).
    fn send_ahead(&mut self, fd: u64, offset: u64, end: u64) -> Result<()> {
        loop {
            let f = self.file(fd)?;
            let size = f.seen_size();
            let Some(s) = f.ahead.stream() else {
                return Ok(());
            };
            if s.next >= size || (s.next >= end && f.ahead.ahead_of(offset) + s.len > s.budget) {
                return Ok(());
            }
            f.ahead.advance(s.next + s.step);
            self.send_reads(fd, s.next, s.len.min(size - s.next))?;
        }
    }

    /// Reads up to `len` bytes at `offset` of open file `fd` (short at the end of file).
    pub fn pread(&mut self, fd: u64, len: usize, offset: u64) -> Result<Vec<u8>> {
        // Read-your-writes within one descriptor: wait for its writes in flight.
        if self.conns.unfinished(fd) > 0 {
            self.commit(fd, false)?;
        }
        let ra = self.opts.read_ahead as u64;
        let f = self.files.get_mut(fd).ok_or(ClientError::BadFd(fd))?;
        let (ino, dist) = (f.ino, f.dist);
        let want_end = offset.saturating_add(len as u64);
        // A read where the last one ended, or a first read at the start: a sequential reader,
        // whose next bytes are read ahead. A random reader's are not: each of its reads would
        // otherwise send a window of READs the next read drops (4 KiB random reads through
        // the mount on the 2-core box: 760 us each, most of it read-ahead thrown away).
        let sequential = match f.last_read {
            Some((o, l, _)) => offset == o.saturating_add(l as u64),
            None => offset == 0,
        };
        // The same length at the same distance from the last read as that one from the read
        // before, with a gap between: a strided reader (an N-1 reader taking every Nth
        // transfer). Its next transfers are read ahead.
        let stride = match f.last_read {
            Some((o, l, d)) if offset > o => {
                let distance = offset - o;
                f.last_read = Some((offset, len, distance));
                (l == len && d == distance && distance > len as u64).then_some(distance)
            }
            _ => {
                f.last_read = Some((offset, len, 0));
                None
            }
        };
        let mut size = f.seen_size();
        let no_unit = dist == DataDist::Io && f.io_unit == 0;
        if want_end > size || no_unit {
            // Another client may have committed more since, and fixed the file's I/O unit.
            let a = self.getattr(ino)?;
            let f = self.file(fd)?;
            f.size = a.size;
            if f.io_unit == 0 {
                f.io_unit = a.io_unit;
            }
            size = f.seen_size();
        }
        if offset >= size || len == 0 {
            return Ok(Vec::new());
        }
        let n = (size - offset).min(len as u64);
        let end = offset + n;
        let f = self.files.get_mut(fd).ok_or(ClientError::BadFd(fd))?;
        if dist == DataDist::Io && f.io_unit == 0 {
            // No write fixed a unit: the file is holes (a truncate made its size).
            return Ok(vec![0; n as usize]);
        }
        if !f.ahead.serves(offset, end) {
            f.ahead.clear(&mut self.conns);
            let stream = if let Some(stride) = stride.filter(|_| ra > n) {
                // At most STRIDED_AHEAD transfers: tiny reads far apart would make thousands.
                Some(Stream {
                    next: offset,
                    len: n,
                    step: stride,
                    budget: (ra / n).min(STRIDED_AHEAD) * n,
                })
            } else if sequential && dist != DataDist::Io && n < ra {
                let piece = READ_PIECE.min(ra);
                Some(Stream {
                    next: offset,
                    len: piece,
                    step: piece,
                    budget: ra,
                })
            } else {
                None
            };
            f.ahead.restart(stream);
            if stream.is_none() {
                self.send_reads(fd, offset, n)?;
            }
        }
        let sent = self.send_ahead(fd, offset, end);
        self.conns.flush_all();
        let f = self.files.get_mut(fd).ok_or(ClientError::BadFd(fd))?;
        if let Err(e) = sent {
            f.ahead.clear(&mut self.conns);
            return Err(e);
        }
        f.ahead.take(&mut self.conns, offset, end)
    }

    /// Reads at the file position and advances it.
    pub fn read(&mut self, fd: u64, len: usize) -> Result<Vec<u8>> {
        let pos = self.file(fd)?.pos;
        let d = self.pread(fd, len, pos)?;
        self.file(fd)?.pos = pos + d.len() as u64;
        Ok(d)
    }

    /// Attributes of open file `fd` (its size and mtime include this client's uncommitted
    /// writes, [`Client::getattr`]).
    pub fn fstat(&mut self, fd: u64) -> Result<Attr> {
        let ino = self.file(fd)?.ino;
        self.getattr(ino)
    }

    /// Requests this client has sent (the benchmark's RPCs per operation).
    pub fn rpcs_sent(&self) -> u64 {
        self.conns.sent()
    }

    /// Writes of `fd` sent but not acknowledged (`unfinished_cnt`).
    pub fn unfinished(&self, fd: u64) -> usize {
        self.conns.unfinished(fd)
    }

    // ---- path API ----

    /// Attributes of the directory at `path`, resolved through the dentry cache.
    fn resolve_dir(&mut self, comps: &[&[u8]]) -> Result<Attr> {
        let mut cur = match self.group.dir_defaults(ROOT_INO) {
            Some(d) => Attr {
                ino: ROOT_INO,
                mode: libc::S_IFDIR,
                hint: d.hint,
                io_unit: d.io_unit,
                ..Default::default()
            },
            None => self.getattr(ROOT_INO)?,
        };
        for c in comps {
            cur = self.lookup_cached(cur.ino, c)?;
            if !cur.is_dir() {
                return Err(Errno::ENOTDIR.into());
            }
        }
        Ok(cur)
    }

    /// The parent directory's ino and the last name of `path`.
    fn parent<'p>(&mut self, path: &'p str) -> Result<(u64, &'p [u8])> {
        self.resolve_parent(path)?
            .ok_or_else(|| ClientError::BadPath(path.to_string()))
    }

    /// As [`Self::parent`]; `None` for the root itself.
    fn resolve_parent<'p>(&mut self, path: &'p str) -> Result<Option<(u64, &'p [u8])>> {
        if let Some((dir, last)) = split_dir(path)
            && let Some(p) = self.dcache.get_path(dir)
        {
            return Ok(Some((p.ino, last)));
        }
        let comps = components(path)?;
        let Some((last, dirs)) = comps.split_last() else {
            return Ok(None);
        };
        let p = self.resolve_dir(dirs)?;
        if let Some((dir, _)) = split_dir(path) {
            self.remember_dir(dir, dirs, &p);
        }
        Ok(Some((p.ino, last)))
    }

    /// Remembers `dir`, just resolved to `attr` through components `comps`, until the first
    /// of the entries it went through expires.
    fn remember_dir(&mut self, dir: &str, comps: &[&[u8]], attr: &Attr) {
        let mut pino = ROOT_INO;
        let mut until = None::<Instant>;
        for c in comps {
            let Some((a, expiry)) = self.dcache.entry(pino, c) else {
                return;
            };
            until = Some(until.map_or(expiry, |u| u.min(expiry)));
            pino = a.ino;
        }
        if let Some(until) = until {
            self.dcache.put_path(dir, attr, until);
        }
    }

    /// Attributes of `path`.
    pub fn stat(&mut self, path: &str) -> Result<Attr> {
        match self.resolve_parent(path)? {
            None => self.getattr(ROOT_INO),
            Some((p, last)) => self.lookup(p, last),
        }
    }

    /// Creates directory `path` (hint: see [`Client::mkdir_at`]).
    pub fn mkdir(&mut self, path: &str, mode: u32, hint: Option<Hint>) -> Result<Attr> {
        let (p, name) = self.parent(path)?;
        let who = self.caller();
        self.mkdir_at(p, name, mode, who, hint)
    }

    /// Removes empty directory `path`.
    pub fn rmdir(&mut self, path: &str) -> Result<()> {
        let (p, name) = self.parent(path)?;
        self.rmdir_at(p, name)
    }

    /// Removes file `path`.
    pub fn unlink(&mut self, path: &str) -> Result<()> {
        let (p, name) = self.parent(path)?;
        self.unlink_at(p, name)
    }

    /// Renames `from` to `to`.
    pub fn rename(&mut self, from: &str, to: &str) -> Result<()> {
        // A directory moved below itself would leave the tree as a loop no walk from the root
        // reaches (EINVAL, as rename(2)). Paths here name no `..` and follow no symlink, so
        // `to` is below `from` exactly when `from`'s components begin `to`'s. (The kernel makes
        // this check for the mount, which calls `rename_at`.)
        let (sp, sn) = self.parent(from)?;
        let (dp, dn) = self.parent(to)?;
        let (src, dst) = (components(from)?, components(to)?);
        if dst.len() > src.len() && dst.starts_with(&src) {
            return Err(Errno::EINVAL.into());
        }
        self.rename_at(sp, sn, dp, dn)
    }

    /// Adds the name `to` for the file at `from` (a hard link); returns its attributes.
    pub fn link(&mut self, from: &str, to: &str) -> Result<Attr> {
        let a = self.stat(from)?;
        let (p, name) = self.parent(to)?;
        self.link_at(a.ino, p, name)
    }

    /// Entries of directory `path`.
    pub fn readdir(&mut self, path: &str) -> Result<Vec<Entry>> {
        let comps = components(path)?;
        let d = self.resolve_dir(&comps)?;
        self.readdir_ino(d.ino)
    }

    /// Sets the size of `path`.
    pub fn truncate(&mut self, path: &str, size: u64) -> Result<()> {
        let a = self.stat(path)?;
        self.setattr(
            a.ino,
            SetAttr {
                size: Some(size),
                ..Default::default()
            },
        )?;
        Ok(())
    }

    /// Opens `path` with open(2) `flags` (O_CREAT creates it with permission bits `mode`).
    pub fn open(&mut self, path: &str, flags: i32, mode: u32) -> Result<u64> {
        let (p, name) = self.parent(path)?;
        if flags & libc::O_CREAT != 0 {
            let who = self.caller();
            return Ok(self.create_open_at(p, name, mode, flags, who)?.0);
        }
        let a = self.lookup(p, name)?;
        if a.is_dir() {
            // Directories need no server-side open state.
            return self.install(&a, flags);
        }
        self.open_ino(a.ino, flags)
    }

    /// Creates (truncating) `path` for writing.
    pub fn create(&mut self, path: &str, mode: u32) -> Result<u64> {
        self.open(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode)
    }

    /// Sends `count` ECHO requests of `payload` bytes to server `server` with `window` in
    /// flight (the RPC ceiling).
    pub fn echo(&mut self, server: u32, payload: &[u8], count: u64, window: usize) -> Result<()> {
        self.conns
            .burst(server, op::ECHO, &[payload], count, window)
    }

    /// Sends one ROUTED_ECHO of `payload` with λ `lambda` ([`op::ROUTED_ECHO`]): to the λ's
    /// server, which forwards it to the λ's worker as it would a request of that λ, and waits
    /// for it to come back.
    pub fn routed_echo(&mut self, lambda: u64, payload: &[u8]) -> Result<()> {
        let server = self.layout.route(lambda).server;
        self.conns.burst(
            server,
            op::ROUTED_ECHO,
            &[&lambda.to_le_bytes(), payload],
            1,
            1,
        )
    }

    /// Sends `count` XFER requests carrying `data` and asking for `reply_len` bytes back to
    /// server `server` with `window` in flight (the data-transfer ceiling: bulk bytes one way,
    /// no slice work).
    pub fn xfer(
        &mut self,
        server: u32,
        data: &[u8],
        reply_len: u32,
        count: u64,
        window: usize,
    ) -> Result<()> {
        self.conns.burst(
            server,
            op::XFER,
            &[&reply_len.to_le_bytes(), data],
            count,
            window,
        )
    }

    /// Runs independent raw requests pipelined: all are sent, then all replies collected
    /// (benchmarks batching metadata requests).
    pub fn call_many(&mut self, reqs: &[(u64, Request<'_>)]) -> Vec<Result<Vec<u8>>> {
        self.conns.call_many(reqs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_be_absolute_and_dotdot_is_refused() {
        assert!(components("a/b").is_err());
        assert!(components("/a/../b").is_err());
        assert_eq!(components("/a//./b/").unwrap(), vec![&b"a"[..], b"b"]);
        assert!(components("/").unwrap().is_empty());
        let long = components(&format!("/{}", "x".repeat(256))).unwrap_err();
        assert_eq!(long.errno(), libc::ENAMETOOLONG, "{long}");
        assert_eq!(
            components(&format!("/{}", "x".repeat(255))).unwrap().len(),
            1
        );
    }

    #[test]
    fn errors_map_to_posix_errnos() {
        assert_eq!(ClientError::Errno(Errno::ENOENT).errno(), libc::ENOENT);
        let refused = ClientError::Refused {
            errno: Errno::ENOSPC,
            message: "no inode slots".into(),
        };
        assert_eq!(refused.errno(), libc::ENOSPC);
        assert!(refused.is(Errno::ENOSPC) && !refused.is(Errno::ENOENT));
        assert!(ClientError::Errno(Errno::EEXIST).is(Errno::EEXIST));
        assert!(
            refused.to_string().ends_with(": no inode slots"),
            "{refused}"
        );
        let dead = ClientError::Unreachable {
            server: 0,
            addr: "x".into(),
            reason: "timeout".into(),
            timed_out: true,
        };
        assert_eq!(dead.errno(), libc::ETIMEDOUT);
        assert_eq!(ClientError::BadFd(9).errno(), libc::EBADF);
    }
}
