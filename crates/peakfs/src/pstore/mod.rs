//! PStore (PeakFS §III-C, "HPC-Oriented Storage Backend"): the storage backend of one worker
//! thread, made of PMeta (dentries in [`cart`], inodes through the [`icache`], the inode
//! bitmap and the ino → offset hashtable) and PData ([`pdata`]: pages, the page bitmap and the
//! (ino, block) → pages hashtable), all logged in a [`wal`] and checkpointed.
//!
//! Each worker owns one `PStore` over its own zone of a namespace (shared nothing: no locks, no
//! `Sync` needed), and with [`PStoreConfig::queue`] its own host queue of the device
//! ([`zone`]). The zone's layout, in 4 KiB pages:
//!
//! ```text
//! 0, 1        superblock copies (the newer valid generation wins)
//! WAL         wal_pages
//! ckpt A, B   checkpoints of the tables, bitmaps and dentries (alternating)
//! inodes      inode_slots * 128 bytes (Icache blocks of 32 inodes)
//! data        the rest, in pages
//! ```
//!
//! Every operation is one WAL transaction. `fsync` writes the log and flushes the device, so
//! everything before it survives a crash; [`PStore::open`] loads the last checkpoint, replays
//! the complete transactions of the log from where the superblock says (a torn tail is
//! ignored) and checkpoints.
//!
//! With a quarter of the log left, a checkpoint is taken at the log's position, and
//! [`PStore::pump`] encodes and writes it between requests, 256 KiB at a time, while
//! requests go on changing the tables and logging ([`checkpoint`]: recovery replays the log
//! from that position over it); then the superblock names it, and the frames logged since move
//! to the start of the log. Taking it holds the caller only to commit the log and start an
//! Icache write-back. `pump` also writes the log a megabyte at a time, so that no checkpoint
//! finds tens of megabytes of it unwritten.
//!
//! Link counts are POSIX's (hard links; a directory counts its sub-directories' `..`):
//! [`PStore::relink`] changes dentries and the link counts of local inodes in one transaction.
//! An inode left without links becomes an *orphan* in that transaction: the caller frees it
//! ([`PStore::remove_inode`]) at once, or keeps it while a client holds it open (POSIX keeps
//! an unlinked open file). [`PStore::open`] frees the orphans it finds, so neither a crash
//! between the two steps nor a client that never came back leaks the inode or its data here.
//!
//! Distribution strategies (§III-C1) are decided by the server: a dentry's value is whatever it
//! stores (an ino or an inode offset), [`PStore::insert_inode`] takes inodes created elsewhere,
//! and data calls accept blocks of files whose inode is on another worker.

pub mod bitmap;
pub mod cart;
pub mod checkpoint;
pub mod icache;
pub mod inode;
pub mod pdata;
mod probe;
pub mod table;
pub mod wal;
pub mod zone;

use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpu_nvme::device::NvmeDevice;

use bitmap::{Bitmap, BitmapError};
use cart::{Cart, CartError};
use checkpoint::{Encoder, Geometry, Tables};
use icache::{Icache, IcacheStats, InodeIo};
use inode::{DataDistribution, Hint, INODE_BYTES, Inode, InodeError, WrittenBy};
use pdata::{BlockKeys, BlockWrite, PData, ReadPlan};
use table::{BlockTable, InodeIndex, PageRun};
use wal::{MAX_RECORD, Record, Wal};
use zone::{KeyedPages, LateBytes, PAGE, WriteBehind, Zone, ZoneError, ZoneTransfers};

const SB_MAGIC: u64 = u64::from_le_bytes(*b"PSTORE02");
/// Inodes of one inode block (one Icache block).
pub const INODES_PER_BLOCK: u64 = (PAGE / INODE_BYTES) as u64;
/// Checkpoint bytes per dentry, at most (pino, name length, name, value).
const CKPT_DENTRY: u64 = 8 + 1 + 255 + 8;
/// Most file blocks one write transaction covers.
const BLOCKS_PER_TX: usize = 64;
/// Errors of PStore.
#[derive(Debug, thiserror::Error)]
pub enum PStoreError {
    /// device I/O failed
    #[error(transparent)]
    Zone(#[from] ZoneError),
    /// a bitmap update conflicts (a corrupt log or checkpoint)
    #[error(transparent)]
    Bitmap(#[from] BitmapError),
    /// a dentry name or value is invalid
    #[error(transparent)]
    Name(#[from] CartError),
    /// an inode slot holds no valid inode
    #[error("inode {ino}: {source}")]
    Inode {
        /// the ino asked for
        ino: u64,
        /// why its slot is unreadable
        source: InodeError,
    },
    /// no such inode on this worker
    #[error("no inode {0} here")]
    NoInode(u64),
    /// no such dentry
    #[error("no dentry {name:?} in directory {pino}")]
    NoEntry {
        /// parent
        pino: u64,
        /// name
        name: String,
    },
    /// the dentry or inode exists already
    #[error("{0} exists already")]
    Exists(String),
    /// a resource of the zone is used up
    #[error("no space left: {0}")]
    NoSpace(&'static str),
    /// the zone holds no valid superblock or checkpoint, or a field is out of range
    #[error("corrupt PStore: {0}")]
    Corrupt(String),
    /// an argument is out of range
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// the data pages a log write names did not reach the device (they are staged again)
    #[error("the data pages named by the log failed to write")]
    DataNotWritten,
    /// bytes placed by one data distribution, for a file that holds data placed by another:
    /// its distribution changed while they were being written, and its readers would not
    /// find them
    #[error(
        "file {ino} holds {size} bytes laid out {held:?}, but these were laid out {written:?} \
         (its distribution changed while they were being written)"
    )]
    LaidOutOtherwise {
        /// the file
        ino: u64,
        /// its size
        size: u64,
        /// its distribution
        held: DataDistribution,
        /// the writer's
        written: DataDistribution,
    },
    /// an operation's records outgrew the log room it had reserved: memory holds changes the
    /// log lacks, so the store writes nothing more until a restart recovers it from the log
    #[error(
        "the store stopped: an operation's log records outgrew the room reserved for them; \
         restart the server to recover from its log"
    )]
    Halted,
}

/// Sizing of a worker's PStore.
#[derive(Debug, Clone, PartialEq)]
pub struct PStoreConfig {
    /// First LBA of the zone.
    pub first_lba: u64,
    /// LBAs in the zone.
    pub lbas: u64,
    /// The device's host queue this worker owns (`None`: the device's shared queues).
    pub queue: Option<usize>,
    /// A second host queue this worker owns, for Icache write-backs it does not wait for
    /// (`None`: write-backs are synchronous).
    pub write_back_queue: Option<usize>,
    /// A third host queue this worker owns, for the pieces of a checkpoint written between
    /// requests ([`PStore::pump`]), which then go on while the worker serves (`None`: each
    /// piece is written before the pump returns).
    pub checkpoint_queue: Option<usize>,
    /// A fourth host queue this worker owns, for the write-outs of staged data pages (`None`:
    /// they share the write-back queue, which only one batch in flight at a time may use
    /// safely: see [`zone::WriteBehind`]).
    pub data_write_out_queue: Option<usize>,
    /// Inode slots (rounded up to whole Icache blocks). Format only.
    pub inode_slots: u64,
    /// Dentries the checkpoint area is sized for. Format only.
    pub max_dentries: u64,
    /// WAL pages. Format only.
    pub wal_pages: u64,
    /// Pages of a file block. Format only.
    pub block_pages: u32,
    /// Inode numbers handed out start here (the server puts the worker id in the high bits;
    /// ino 1 is the root directory). Format only.
    pub ino_base: u64,
    /// Icache blocks held in memory.
    pub icache_blocks: usize,
    /// Most dirty Icache blocks, as a fraction of all.
    pub dirty_ratio: f64,
    /// Bytes of a checkpoint encoded and written per [`PStore::pump`] (256 KiB; at least a
    /// page).
    pub checkpoint_step: usize,
    /// Unwritten log bytes that [`PStore::pump`] writes ahead (1 MiB; at least a page).
    pub log_write_ahead: usize,
    /// How long a checkpoint to take, or one to make current, waits at most for the data and
    /// log its commit would write to be written behind (2 ms; see [`DRAIN_WAIT`]).
    pub drain_wait: Duration,
    /// Whether the page cache of the device outlived whatever wrote the zone last (the same
    /// boot: a server process killed, not a machine gone down). Then recovery replays the
    /// frames written before the data pages they name were flushed
    /// ([`PStore::write_through`]); otherwise only those up to the last
    /// [`wal::Record::DataDurable`] mark (false by default).
    pub page_cache_survived: bool,
}

impl PStoreConfig {
    /// Defaults for a zone: one inode slot per 16 pages, 1 MiB WAL, 64 KiB file blocks,
    /// 256 Icache blocks, 5 % dirty (the paper's example).
    pub fn new(first_lba: u64, lbas: u64) -> Self {
        let approx_pages = lbas / 8;
        Self {
            first_lba,
            lbas,
            queue: None,
            write_back_queue: None,
            checkpoint_queue: None,
            data_write_out_queue: None,
            inode_slots: (approx_pages / 16).max(INODES_PER_BLOCK),
            max_dentries: (approx_pages / 16).max(INODES_PER_BLOCK),
            wal_pages: 256,
            block_pages: 16,
            ino_base: 2,
            icache_blocks: 256,
            dirty_ratio: 0.05,
            checkpoint_step: CHECKPOINT_STEP,
            log_write_ahead: LOG_WRITE_AHEAD,
            drain_wait: DRAIN_WAIT,
            page_cache_survived: false,
        }
    }
}

/// The on-disk geometry and the checkpoint pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Superblock {
    generation: u64,
    fs_id: u64,
    zone_pages: u64,
    wal_start: u64,
    wal_pages: u64,
    ckpt_start: [u64; 2],
    ckpt_pages: u64,
    inode_start: u64,
    inode_slots: u64,
    data_start: u64,
    data_pages: u64,
    block_pages: u32,
    max_dentries: u64,
    ino_base: u64,
    /// Which checkpoint area is current.
    active: u8,
    ckpt_len: u64,
    ckpt_crc: u32,
    /// Sequence number of the first WAL frame after the checkpoint.
    wal_seq: u64,
    /// Byte of the log where that frame starts (0 but for a moment after a checkpoint
    /// written between requests: see [`PStore::make_checkpoint_current`]).
    wal_offset: u64,
}

impl Superblock {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(PAGE);
        b.extend_from_slice(&SB_MAGIC.to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        for v in [
            self.generation,
            self.fs_id,
            self.zone_pages,
            self.wal_start,
            self.wal_pages,
            self.ckpt_start[0],
            self.ckpt_start[1],
            self.ckpt_pages,
            self.inode_start,
            self.inode_slots,
            self.data_start,
            self.data_pages,
            u64::from(self.block_pages),
            self.max_dentries,
            self.ino_base,
            u64::from(self.active),
            self.ckpt_len,
            u64::from(self.ckpt_crc),
            self.wal_seq,
            self.wal_offset,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.resize(PAGE, 0);
        let crc = common::hash::crc32c(&b[12..]);
        b[8..12].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Self> {
        let mut r = wal::Reader::new(b);
        if r.u64().ok()? != SB_MAGIC {
            return None;
        }
        let crc = r.u32().ok()?;
        if crc != common::hash::crc32c(b.get(12..)?) {
            return None;
        }
        let mut v = [0u64; 20];
        for x in &mut v {
            *x = r.u64().ok()?;
        }
        Some(Self {
            generation: v[0],
            fs_id: v[1],
            zone_pages: v[2],
            wal_start: v[3],
            wal_pages: v[4],
            ckpt_start: [v[5], v[6]],
            ckpt_pages: v[7],
            inode_start: v[8],
            inode_slots: v[9],
            data_start: v[10],
            data_pages: v[11],
            block_pages: u32::try_from(v[12]).ok()?,
            max_dentries: v[13],
            ino_base: v[14],
            active: u8::try_from(v[15]).ok()?,
            ckpt_len: v[16],
            ckpt_crc: u32::try_from(v[17]).ok()?,
            wal_seq: v[18],
            wal_offset: v[19],
        })
    }

    /// Checks that the regions lie inside the zone in order.
    fn validate(&self, zone_pages: u64) -> Result<(), PStoreError> {
        // Saturating: the fields come from disk and may be anything.
        let ends = [
            (2, self.wal_start),
            (
                self.wal_start.saturating_add(self.wal_pages),
                self.ckpt_start[0],
            ),
            (
                self.ckpt_start[0].saturating_add(self.ckpt_pages),
                self.ckpt_start[1],
            ),
            (
                self.ckpt_start[1].saturating_add(self.ckpt_pages),
                self.inode_start,
            ),
            (
                self.inode_start
                    .saturating_add(self.inode_slots.div_ceil(INODES_PER_BLOCK)),
                self.data_start,
            ),
            (
                self.data_start.saturating_add(self.data_pages),
                zone_pages + 1,
            ),
        ];
        let ok = ends.iter().all(|&(a, b)| a <= b)
            && self.zone_pages <= zone_pages
            && self.active < 2
            && self.ckpt_len <= self.ckpt_pages.saturating_mul(PAGE as u64)
            && self.wal_offset <= self.wal_pages.saturating_mul(PAGE as u64)
            && (1..=1024).contains(&self.block_pages)
            && self.wal_pages > 0;
        if ok {
            Ok(())
        } else {
            Err(PStoreError::Corrupt(format!(
                "superblock geometry {self:?} does not fit {zone_pages} pages"
            )))
        }
    }
}

/// Attribute changes of [`PStore::setattr`]; `None` leaves a field alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New mode.
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (truncates or extends this worker's blocks).
    pub size: Option<u64>,
    /// New access time.
    pub atime_ns: Option<i64>,
    /// New modification time.
    pub mtime_ns: Option<i64>,
    /// New hint.
    pub hint: Option<Hint>,
    /// New [`Inode::io_unit`] (a directory's unit for its new I/O-based files; a file's is
    /// fixed once, by [`PStore::fix_io_unit`]).
    pub io_unit: Option<u32>,
    /// New link count (0 is refused: an inode loses its last link through [`PStore::relink`]).
    pub nlink: Option<u32>,
}

/// Attributes of an inode [`PStore::create_inode`] makes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NewInode {
    /// File type and permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number of a device node.
    pub rdev: u32,
    /// Distribution hint.
    pub hint: Hint,
    /// I/O unit ([`Inode::io_unit`]; 0: none).
    pub io_unit: u32,
}

/// The part of a create that [`PStore::create_inode`] leaves for after its reply under
/// [`PStore::defer_settle`]: the inode image, its inode-table entry, the dentry, and a
/// parent directory's new link count. Its ino, inode slot and the `NextIno` / `InodeAlloc`
/// records are taken before the reply.
#[derive(Debug)]
struct PendingCreate {
    slot: u64,
    inode: Inode,
    pino: u64,
    name: Vec<u8>,
    /// A new directory's parent here: its inode offset and new image.
    parent: Option<(u64, Inode)>,
}

/// What [`PStore::relink`] leaves for after its reply under [`PStore::defer_settle`]: all of
/// its records, worked out before the reply (the dentries removed and put, the inodes' new
/// link counts, the inode freed with its blocks), so that the reply can be sent first.
#[derive(Debug)]
struct PendingRelink {
    remove: Option<(u64, Vec<u8>)>,
    insert: Option<(u64, Vec<u8>, u64)>,
    /// Inode slot, inode before the change, and its link count's change.
    inodes: Vec<(u64, Inode, i64)>,
    /// The inode freed in this transaction when its links reach 0, with its mapped blocks.
    free: Option<(u64, Vec<u64>)>,
}

/// An operation answered before its changes were put in place (with
/// [`PStore::defer_settle`]); every later call on the store puts them there first.
#[derive(Debug)]
enum Pending {
    Create(PendingCreate),
    Relink(PendingRelink),
}

/// An inode that [`PStore::relink`] left without links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unlinked {
    /// Its ino.
    pub ino: u64,
    /// Freed with its data in the same transaction; otherwise an orphan now
    /// ([`PStore::is_orphan`]), for [`PStore::remove_inode`] or its last close.
    pub freed: bool,
}

/// Dentry changes and link counts that [`PStore::relink`] applies in one transaction.
#[derive(Debug, Clone, Copy, Default)]
pub struct Relink<'a> {
    /// Dentry `(pino, name)` removed (it must exist).
    pub remove: Option<(u64, &'a [u8])>,
    /// Dentry `(pino, name) → value` inserted, or its value replaced (after `remove`).
    pub insert: Option<(u64, &'a [u8], u64)>,
    /// Link count changes `(ino, delta)` of inodes here (others are skipped; several changes of
    /// one inode add up). Counts stop at 0; each change sets the inode's ctime.
    pub links: &'a [(u64, i32)],
    /// An inode freed in the same transaction, with its data, if its links reach 0 (an unlink
    /// or rmdir whose target nobody keeps open): one log append instead of two, and no
    /// orphan in between. A file with more mapped blocks than one transaction takes becomes
    /// an orphan instead, for [`PStore::remove_inode`].
    pub free: Option<u64>,
}

/// Counters and occupancy of a PStore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PStoreStats {
    /// Inodes here.
    pub inodes: u64,
    /// Inode slots in all.
    pub inode_slots: u64,
    /// Dentries here.
    pub dentries: u64,
    /// Mapped file blocks in the hashtable (first blocks in inodes not counted).
    pub blocks: u64,
    /// Data pages in use (including frees not yet durable).
    pub pages_used: u64,
    /// Data pages in all.
    pub data_pages: u64,
    /// Data pages written but staged in memory (written out before the next WAL write).
    pub staged_pages: u64,
    /// WAL bytes in use.
    pub wal_bytes: u64,
    /// Checkpoints taken since open.
    pub checkpoints: u64,
    /// The times checkpoints held their caller (a server's worker serves nothing meanwhile).
    pub checkpoint_stops: CheckpointStops,
    /// A checkpoint is taken and being written between requests ([`PStore::pump`]).
    pub checkpoint_writing: bool,
    /// Pieces of that checkpoint on their way to the device on the checkpoint queue
    /// ([`PStoreConfig::checkpoint_queue`]) while the caller goes on serving.
    pub checkpoint_pieces_in_flight: usize,
    /// Inodes without links kept until freed (open unlinked files).
    pub orphans: u64,
    /// Entries the inode table holds without growing (sized for every inode slot when the
    /// store opens).
    pub inode_table_room: u64,
    /// Icache counters.
    pub icache: IcacheStats,
    /// What the zone's synchronous reads and writes moved, direct or copied.
    pub transfers: ZoneTransfers,
}

/// The times checkpoints held their caller, by kind of stop: the longest of each, and all of
/// them together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointStops {
    /// Taking one: the log's commit, the start of the Icache write-back, listing what to walk.
    pub take: Duration,
    /// A piece encoded and written between requests, but the last.
    pub piece: Duration,
    /// The last piece, which makes the checkpoint current (and moves the log to its start).
    pub last: Duration,
    /// Every stop together.
    pub total: Duration,
    /// The most staged data pages one of these stops wrote out itself (a take's or a last
    /// piece's log commit writes them before the log; [`PStore::pump`] first has the rest
    /// written behind).
    pub staged_pages_written: usize,
    /// The most log bytes one of these stops wrote itself (the rest was written ahead).
    pub log_bytes_written: usize,
}

impl CheckpointStops {
    /// The longest stop of any kind.
    pub fn longest(&self) -> Duration {
        self.take.max(self.piece).max(self.last)
    }

    fn record(&mut self, kind: Stop, took: Duration) {
        let longest = match kind {
            Stop::Take => &mut self.take,
            Stop::Piece => &mut self.piece,
            Stop::Last => &mut self.last,
        };
        *longest = (*longest).max(took);
        self.total += took;
    }
}

/// What a checkpoint's stop did ([`CheckpointStops`]).
#[derive(Debug, Clone, Copy)]
enum Stop {
    Take,
    Piece,
    Last,
}

/// An Icache write-back in flight on the zone's write-back queue: a flush if data pages went
/// out since the last one, the log pages, a flush, then the inode blocks (the WAL rule,
/// without the worker waiting for it). Or the log written ahead alone, without inode blocks
/// ([`PStore::write_log_ahead`]).
#[derive(Debug, Default)]
struct Behind {
    batch: WriteBehind,
    /// Whether a write-back was started and its result not yet taken.
    started: bool,
    /// It writes the log ahead, for [`PStore::pump`] to take its result (the Icache takes
    /// those of its write-backs).
    log_ahead: bool,
    /// The log bytes its log pages cover ([`Wal::mark_written`] once they are durable).
    log_upto: Option<usize>,
    /// Its first command waits for the data write-out that holds the pages its log names
    /// ([`PData::write_out_failures`] as it was then).
    after_data: Option<u64>,
    /// Its result once complete, until the Icache takes it.
    done: Option<Result<(), PStoreError>>,
}

impl Behind {
    /// Started, and its result not yet come back.
    fn in_flight(&self) -> bool {
        self.started && self.done.is_none()
    }
}

/// The icache's view of the device: inode blocks, and the log (with the staged data pages it
/// maps) to sync before write-back.
struct MetaIo<'a> {
    zone: &'a Zone,
    wal: &'a mut Wal,
    data: &'a mut PData,
    wal_start: u64,
    inode_start: u64,
    synced: &'a mut bool,
    behind: &'a mut Behind,
}

impl MetaIo<'_> {
    /// Records the result of the write-behind: its log pages are written if it succeeded
    /// (otherwise the next log write writes them again).
    fn complete_behind(&mut self, r: Result<(), PStoreError>) {
        let r = match self.behind.log_upto.take() {
            Some(upto) if r.is_ok() => {
                self.wal.mark_written(upto);
                // The batch flushed after its log pages: the frees in them are durable.
                self.data.commit_frees_upto(self.wal.written_len())
            }
            _ => r,
        };
        if r.is_err() {
            // Its data flush may not have happened.
            self.data.mark_unflushed();
        }
        self.behind.done = Some(r);
    }

    /// Waits until no write-behind command is in flight (its result is kept for the Icache).
    /// `sent`: the Icache's blocks ([`InodeIo::start_write_behind`]).
    fn finish_behind(&mut self, sent: &dyn KeyedPages) {
        if self.behind.in_flight() {
            let r = match self.behind.after_data.take() {
                Some(failures) => {
                    let data = self.data.finish_writing(self.zone);
                    self.data_written(data, failures)
                }
                None => Ok(()),
            };
            let r = r.and_then(|()| {
                let late = LateBytes {
                    shared: self.wal.buffer(),
                    pages: sent,
                };
                Ok(self.zone.finish(&mut self.behind.batch, &late)?)
            });
            self.complete_behind(r);
        }
    }

    /// Moves the write-behind on without waiting: its commands go once the data pages its
    /// log names are on the device. Returns its result once complete. The data write-out is
    /// not pumped here: [`PStore::pump`] does that first, every round.
    fn pump_behind(&mut self, sent: &dyn KeyedPages) -> Option<Result<(), PStoreError>> {
        if let Some(failures) = self.behind.after_data {
            if self.data.is_writing() {
                return None;
            }
            self.behind.after_data = None;
            if let Err(e) = self.data_written(Ok(()), failures) {
                return Some(Err(e));
            }
        }
        let late = LateBytes {
            shared: self.wal.buffer(),
            pages: sent,
        };
        let r = self.zone.pump(&mut self.behind.batch, &late)?;
        Some(r.map_err(PStoreError::from))
    }

    /// Whether the data write-out awaited by the write-behind put its pages on the device:
    /// its own result, or a failure that another caller took meanwhile. If not, the batch
    /// (nothing of it sent yet) is dropped: its log must not reach the device first.
    fn data_written(
        &mut self,
        data: Result<(), PStoreError>,
        failures: u64,
    ) -> Result<(), PStoreError> {
        let r = data.and_then(|()| {
            if self.data.write_out_failures() == failures {
                Ok(())
            } else {
                Err(PStoreError::DataNotWritten)
            }
        });
        if r.is_err() {
            let _ = self.zone.abandon(&mut self.behind.batch);
        }
        r
    }

    /// Writes the staged data pages, then the unwritten WAL frames, and flushes the device
    /// (after any write-behind, `sent` as in [`MetaIo::finish_behind`]: the log is written in
    /// order). Without `durable`, nothing is flushed: both only reach the device (see
    /// [`PStore::write_through`]).
    fn sync_log(&mut self, sent: &dyn KeyedPages, durable: bool) -> Result<(), PStoreError> {
        self.finish_behind(sent);
        self.data.write_out(self.zone)?;
        if durable {
            // Ordered: the data pages are durable before the log that names them is written
            // (a drive's cache may write the log back first; a crash then would leave a file
            // pointing at pages that never got its bytes).
            if self.data.take_unflushed()
                && let Err(e) = self.zone.flush()
            {
                self.data.mark_unflushed();
                return Err(e.into());
            }
            self.mark_data_durable()?;
        }
        let (zone, wal_start) = (self.zone, self.wal_start);
        self.wal
            .write_out(|page, bytes| zone.write(wal_start + page, bytes))?;
        if durable && !*self.synced {
            zone.flush()?;
            *self.synced = true;
        }
        Ok(())
    }

    /// Marks the frames so far as naming only flushed data pages (see [`wal::Record::DataDurable`]).
    fn mark_data_durable(&mut self) -> Result<(), PStoreError> {
        // Wal::fits kept the room: a refusal means the log is not what this store wrote.
        self.wal
            .mark_data_durable()
            .map_err(|e| PStoreError::Corrupt(format!("log mark: {e}")))
    }
}

impl InodeIo for MetaIo<'_> {
    type Error = PStoreError;

    fn read_blocks(&mut self, block: u64, buf: &mut [u8]) -> Result<(), PStoreError> {
        Ok(self.zone.read(self.inode_start + block, buf)?)
    }

    fn write_blocks(&mut self, blocks: &[(u64, &[u8])]) -> Result<(), PStoreError> {
        *self.synced = false;
        let runs: Vec<(u64, &[u8])> = blocks
            .iter()
            .map(|&(block, buf)| (self.inode_start + block, buf))
            .collect();
        Ok(self.zone.write_runs(&runs)?)
    }

    fn before_write_back(&mut self, sent: &dyn KeyedPages) -> Result<(), PStoreError> {
        self.sync_log(sent, true)
    }

    fn start_write_behind(
        &mut self,
        blocks: &[u64],
        sent: &dyn KeyedPages,
    ) -> Result<bool, PStoreError> {
        if !self.zone.writes_behind() {
            return Ok(false);
        }
        // The Icache takes each result before it starts another; anything left is waited out
        // (a log written ahead that failed is written again by this batch).
        self.finish_behind(sent);
        self.behind.done = None;
        self.behind.log_ahead = false;
        // The log names the staged data pages: they go first, as in `sync_log`, on this
        // queue too (the batch's first command, a flush, waits for them). Written here and
        // waited for, a stage of 256 pages held the worker about a millisecond.
        let failures = self.data.write_out_failures();
        self.data.start_write_out(self.zone)?;
        self.behind.after_data = Some(failures);
        let staged = self.stage_behind(blocks);
        if staged.is_err() {
            self.behind.batch = WriteBehind::default();
            self.behind.log_upto = None;
            self.behind.after_data = None;
            self.data.mark_unflushed();
            return staged.map(|()| false);
        }
        *self.synced = false;
        self.behind.started = true;
        if let Some(r) = self.pump_behind(sent) {
            self.complete_behind(r);
        }
        Ok(true)
    }

    fn busy_behind(&self) -> bool {
        // Not moved on here: that would copy its commands' bytes inside the request's log
        // work. The next pump does.
        self.behind.log_ahead && self.behind.in_flight()
    }

    fn poll_write_behind(
        &mut self,
        wait: bool,
        sent: &dyn KeyedPages,
    ) -> Option<Result<(), PStoreError>> {
        if !self.behind.started {
            return None;
        }
        if wait {
            self.finish_behind(sent);
        } else if self.behind.done.is_none()
            && let Some(r) = self.pump_behind(sent)
        {
            self.complete_behind(r);
        }
        let r = self.behind.done.take()?;
        self.behind.started = false;
        Some(r)
    }
}

impl MetaIo<'_> {
    /// Stages the log pages not yet written, a flush, and inode blocks `blocks` (in block
    /// order; their bytes as they are now, which the log covers: inode images reach the
    /// Icache only after their records reached the log buffer). Nothing is copied now: the
    /// log's frames stay where they are in its buffer until the batch completed (only then
    /// does [`Wal::mark_written`] move them), the Icache keeps the blocks as they are now
    /// until then ([`InodeIo::start_write_behind`]), and each command copies its bytes as it
    /// goes out.
    fn stage_behind(&mut self, blocks: &[u64]) -> Result<(), PStoreError> {
        // Ordered, as in `sync_log`: data pages, flush, log, flush, inode blocks.
        if self.data.take_unflushed() {
            self.zone.stage_flush(&mut self.behind.batch);
        }
        self.mark_data_durable()?;
        let b = &mut self.behind;
        if let Some((page, upto, frames)) = self.wal.unwritten_range() {
            let pages = frames.len().div_ceil(PAGE) * PAGE;
            self.zone
                .stage_shared(&mut b.batch, self.wal_start + page, frames, pages)?;
            b.log_upto = Some(upto);
        }
        self.zone.stage_flush(&mut b.batch);
        self.zone
            .stage_keys(&mut b.batch, self.inode_start, blocks.iter().copied())?;
        Ok(())
    }
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// The storage backend of one worker.
#[derive(Debug)]
pub struct PStore {
    zone: Zone,
    sb: Superblock,
    cart: Cart,
    inos: InodeIndex,
    islots: Bitmap,
    icache: Icache,
    data: PData,
    wal: Wal,
    next_ino: u64,
    /// Inodes without links, not yet freed.
    orphans: BTreeSet<u64>,
    /// Records of the transaction being built (or, while `unsettled`, of the last one).
    tx: Vec<Record>,
    /// `tx` is a finished transaction whose WAL append and inode images wait for
    /// [`PStore::settle`].
    unsettled: bool,
    /// Finished transactions wait for [`PStore::settle`] ([`PStore::defer_settle`]).
    defer: bool,
    /// A create or relink answered before its changes were put in place (with `defer`);
    /// every later call puts them there first.
    pending: Option<Pending>,
    /// The failure of putting a pending operation in place, for the next settle to return.
    deferred_error: Option<PStoreError>,
    /// A transaction could not be logged ([`PStoreError::Halted`]).
    halted: bool,
    /// Whether the device holds nothing unflushed.
    synced: bool,
    /// The Icache write-back in flight, if any.
    behind: Behind,
    checkpoints: u64,
    checkpoint_stops: CheckpointStops,
    /// The last checkpoint's encoding buffer (a piece of about a megabyte), kept for the next.
    ckpt_buf: Vec<u8>,
    /// The last checkpoint's pieces ([`CheckpointJob::pieces`]), kept for the next.
    ckpt_pieces: Vec<Piece>,
    /// The checkpoint being written between requests, if any.
    ckpt_job: Option<CheckpointJob>,
    /// The zone with [`PStoreConfig::checkpoint_queue`] as its write-back queue, on which the
    /// pumps write a checkpoint's pieces without waiting.
    ckpt_zone: Option<Zone>,
    /// A checkpoint is due and waits for a pump to take it: since when.
    ckpt_wanted: Option<Instant>,
    /// [`PStoreConfig::checkpoint_step`].
    checkpoint_step: usize,
    /// [`PStoreConfig::log_write_ahead`].
    log_write_ahead: usize,
    /// [`PStoreConfig::drain_wait`].
    drain_wait: Duration,
}

/// A checkpoint taken and not yet all on the device.
#[derive(Debug)]
struct CheckpointJob {
    /// The tables, encoded a piece at a time as they are then ([`checkpoint`]).
    enc: Encoder,
    /// Bytes of it written to the inactive checkpoint area, or on their way there.
    sent: u64,
    /// The superblock that makes it current (its length and CRC filled in at the end).
    sb: Superblock,
    /// The Icache write-behind of the inode blocks dirty when it was taken.
    inode_mark: u64,
    /// Taken again, whole, because the one taken before outgrew the area (a checkpoint
    /// written between requests may hold more keys than the tables ever do at once).
    retaken: bool,
    /// When it was all written, since which it waits for data and log to be written behind
    /// before it is made current ([`PStore::go_ahead`]).
    all_written: Option<Instant>,
    /// Its pieces on their way on the checkpoint queue, [`PIECES_IN_FLIGHT`] at most (idle
    /// ones kept for their buffers).
    pieces: Vec<Piece>,
}

/// Pieces of a checkpoint that may be on their way to the device at once: the pumps go on
/// encoding while the last ones are written, so that a checkpoint takes about a pump per
/// piece. With one at a time a piece took dozens of pumps to land, and the log that its
/// last stop commits and moves grew with them (its longest stop on an H200 host rose from
/// 3.7 to 5.6-6.2 ms at a million inodes). Eight of [`CHECKPOINT_STEP`] hold 256 KiB.
const PIECES_IN_FLIGHT: usize = 8;

/// A piece of a checkpoint on its way to the checkpoint area: its bytes, and their writes.
#[derive(Debug)]
struct Piece {
    bytes: Vec<u8>,
    batch: WriteBehind,
}

impl CheckpointJob {
    /// Pieces on their way.
    fn pieces_in_flight(&self) -> usize {
        self.pieces.iter().filter(|p| p.batch.is_busy()).count()
    }

    /// The first page of the checkpoint area that the next piece goes to.
    fn next_page(&self) -> u64 {
        self.sb.ckpt_start[usize::from(self.sb.active)] + self.sent / PAGE as u64
    }

    /// A piece free to take the next pages, if the pieces on their way leave room for one.
    fn free_piece(&mut self) -> Option<usize> {
        if let Some(k) = self.pieces.iter().position(|p| !p.batch.is_busy()) {
            return Some(k);
        }
        (self.pieces.len() < PIECES_IN_FLIGHT).then(|| {
            // Together they keep to half the queue's depth, whatever the size of a piece.
            self.pieces.push(Piece {
                bytes: Vec::new(),
                batch: WriteBehind::with_depth_divisor(2 * PIECES_IN_FLIGHT),
            });
            self.pieces.len() - 1
        })
    }

    /// Takes the pages encoded so far into piece `k` and sends them to their place in the
    /// checkpoint area on `zone`'s write-back queue, without waiting.
    fn send_piece(&mut self, zone: &Zone, k: usize) -> Result<(), ZoneError> {
        let first = self.next_page();
        let p = &mut self.pieces[k];
        let n = self.enc.take_pages_into(&mut p.bytes);
        if n == 0 {
            return Ok(());
        }
        zone.stage_shared(&mut p.batch, first, 0..n, n)?;
        self.sent += n as u64;
        let late = LateBytes {
            shared: &p.bytes,
            pages: &(),
        };
        match zone.pump(&mut p.batch, &late) {
            Some(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }

    /// Takes the completions of the pieces on their way (`wait`: until all landed). After a
    /// failed one the others are abandoned, and the error returned.
    fn land_pieces(&mut self, zone: &Zone, wait: bool) -> Result<(), ZoneError> {
        let mut failed = None;
        for p in self.pieces.iter_mut().filter(|p| p.batch.is_busy()) {
            let late = LateBytes {
                shared: &p.bytes,
                pages: &(),
            };
            let landed = if wait {
                Some(zone.finish(&mut p.batch, &late))
            } else {
                zone.pump(&mut p.batch, &late)
            };
            if let Some(Err(e)) = landed {
                failed.get_or_insert(e);
            }
        }
        match failed {
            None => Ok(()),
            Some(e) => {
                self.abandon_pieces(zone);
                Err(e)
            }
        }
    }

    /// Sends nothing more of the pieces on their way and waits for what the device has.
    fn abandon_pieces(&mut self, zone: &Zone) {
        for p in self.pieces.iter_mut().filter(|p| p.batch.is_busy()) {
            let _ = zone.abandon(&mut p.batch);
        }
    }
}

/// Unwritten log bytes that [`PStore::pump`] writes ahead by default.
const LOG_WRITE_AHEAD: usize = 1 << 20;

/// Staged data pages that a checkpoint's log commit may write out itself; with more, the
/// pumps have them written behind first ([`PStore::drained`]). A commit wrote out up to a
/// megabyte of them and waited: the last piece held the worker 2.5-4.3 ms on the 2-core box
/// (bench/results/2026-11-27-peakfs-layouts).
const COMMIT_STAGED_PAGES: usize = 16;

/// Unwritten log bytes that a checkpoint's log commit may write itself; with more, the pumps
/// write the log ahead first ([`PStore::drained`]). Below [`LOG_WRITE_AHEAD`] nothing wrote
/// it: at a million inodes a take's commit wrote up to 0.9 MB of unlinks' log and waited 3.6
/// ms on the 2-core box.
const COMMIT_LOG_BYTES: usize = 64 << 10;

/// How long a checkpoint to take, or one to make current, waits at most for the data and
/// log its commit would write out to be written behind; then it goes ahead and writes what
/// is left itself. It was 64 pumps: at a pump per request of a slice (1.5-3.3 us) that was
/// 0.1-0.2 ms, less than writing a stage of data pages or a megabyte of log behind takes, and
/// a take at a million inodes then wrote them itself (0.8-4.4 ms on the 2-core box). The log
/// room bounds the wait too: with an eighth of the log left, [`PStore::begin`] takes it.
const DRAIN_WAIT: Duration = Duration::from_millis(2);

/// Bytes of a checkpoint encoded and written per [`PStore::pump`] by default. Written on the
/// checkpoint queue without the pump waiting, pieces of 32 KiB held an H200 host's workers
/// up to 0.22-0.43 ms in mdtest runs of 40,000 files per process (8 x 1), against 1.5-1.9 ms
/// for 256 KiB, and the bigdir create's p99.9 fell from 297-379 to 183-205 us
/// (bench/results/2026-11-28-peakfs-checkpoint-step).
const CHECKPOINT_STEP: usize = 32 << 10;

/// Log bytes written since a checkpoint was taken beyond which its pumps encode
/// [`CATCH_UP_PIECES`] pieces at a time. The last stop commits that log and moves it to the
/// log's start. With 32 KiB pieces and one pump per request (small-file writes, 300,000
/// files, the 2-core box), 2.3 MB of it held the worker 35 ms, against 8 ms with 256 KiB
/// pieces. In mdtest runs a worker pumps several times per request, and its checkpoints
/// stay below this.
const CATCH_UP_LOG: u64 = 64 << 10;

/// Pieces' worth a pump encodes at a time once the log outruns the checkpoint
/// ([`CATCH_UP_LOG`]).
const CATCH_UP_PIECES: usize = 8;

/// Bytes a pump encodes of a checkpoint in pieces of `step`, with `logged` bytes of log
/// written since it was taken.
fn piece_bytes(step: usize, logged: u64) -> usize {
    if logged > CATCH_UP_LOG {
        CATCH_UP_PIECES * step
    } else {
        step
    }
}

impl Drop for PStore {
    /// A store dropped with an Icache write-back or a data write-out in flight (a crash
    /// test, a failed start) submits nothing more of it and waits for what the device already
    /// has: afterwards nothing of this store reaches the device.
    fn drop(&mut self) {
        if self.behind.in_flight() {
            let _ = self.zone.abandon(&mut self.behind.batch);
        }
        if let (Some(job), Some(zone)) = (&mut self.ckpt_job, &self.ckpt_zone) {
            job.abandon_pieces(zone);
        }
        self.data.abandon_writing(&self.zone);
    }
}

/// The keys of the extent starting at `origin`, for an I/O at `offset` inside it.
fn extent_keys(origin: u64, offset: u64) -> Result<BlockKeys, PStoreError> {
    if origin > offset {
        return Err(PStoreError::Invalid(format!(
            "I/O at {offset} before the start of its extent at {origin}"
        )));
    }
    Ok(BlockKeys::Extent { origin })
}

impl PStore {
    fn zone(dev: Arc<NvmeDevice>, cfg: &PStoreConfig) -> Result<Zone, PStoreError> {
        let zone = Zone::new(dev, cfg.queue, cfg.first_lba, cfg.lbas)?;
        Ok(match cfg.write_back_queue {
            Some(q) => zone.with_write_back_queue(q)?,
            None => zone,
        })
    }

    /// Formats an empty PStore over the zone of `cfg` and returns it opened.
    pub fn format(dev: Arc<NvmeDevice>, cfg: &PStoreConfig) -> Result<Self, PStoreError> {
        let zone = Self::zone(dev, cfg)?;
        let zp = zone.pages();
        if cfg.inode_slots == 0 || cfg.wal_pages == 0 || !(1..=1024).contains(&cfg.block_pages) {
            return Err(PStoreError::Invalid(format!(
                "{cfg:?}: need inode slots, WAL pages and 1..=1024 pages per block"
            )));
        }
        let inode_slots = cfg.inode_slots.div_ceil(INODES_PER_BLOCK) * INODES_PER_BLOCK;
        let inode_pages = inode_slots / INODES_PER_BLOCK;
        // Inode table, orphan list (at most one entry per inode), ...
        let ckpt_bytes = 64
            + inode_slots * 24
            + inode_slots.div_ceil(64) * 8
            + cfg.max_dentries * CKPT_DENTRY
            + zp * 28
            + zp.div_ceil(64) * 8;
        let ckpt_pages = ckpt_bytes.div_ceil(PAGE as u64);
        let wal_start = 2;
        let ckpt_a = wal_start + cfg.wal_pages;
        let ckpt_b = ckpt_a + ckpt_pages;
        let inode_start = ckpt_b + ckpt_pages;
        let data_start = inode_start + inode_pages;
        let data_pages = zp
            .checked_sub(data_start)
            .filter(|&d| d > 0)
            .ok_or_else(|| {
                PStoreError::Invalid(format!(
                    "zone of {zp} pages holds no data after {data_start} metadata pages"
                ))
            })?;
        let sb = Superblock {
            generation: 0,
            fs_id: common::hash::mix64(now_ns() as u64 ^ cfg.first_lba.rotate_left(32)),
            zone_pages: zp,
            wal_start,
            wal_pages: cfg.wal_pages,
            ckpt_start: [ckpt_a, ckpt_b],
            ckpt_pages,
            inode_start,
            inode_slots,
            data_start,
            data_pages,
            block_pages: cfg.block_pages,
            max_dentries: cfg.max_dentries,
            ino_base: cfg.ino_base,
            active: 1,
            ckpt_len: 0,
            ckpt_crc: 0,
            wal_seq: 1,
            wal_offset: 0,
        };
        // Both superblock copies are replaced so that an older format cannot win (from the
        // heap: a constant's odd address would send it through a bounce slot).
        zone.write(0, &vec![0u8; 2 * PAGE])?;
        let mut s = Self::assemble(
            zone,
            sb,
            cfg,
            Cart::new(),
            InodeIndex::new(sb.inode_slots),
            None,
        )?;
        s.next_ino = cfg.ino_base;
        s.checkpoint()?;
        // The empty store's first checkpoint held no request: the stops count from here.
        s.clear_checkpoint_stops();
        Ok(s)
    }

    fn assemble(
        zone: Zone,
        sb: Superblock,
        cfg: &PStoreConfig,
        cart: Cart,
        inos: InodeIndex,
        bitmaps: Option<(Bitmap, Bitmap, BlockTable)>,
    ) -> Result<Self, PStoreError> {
        let ckpt_zone = match cfg.checkpoint_queue {
            Some(q) => Some(zone.clone().with_write_back_queue(q)?),
            None => None,
        };
        if let Some(q) = cfg.data_write_out_queue {
            // Checks that the queue exists.
            zone.clone().with_write_back_queue(q)?;
        }
        let (islots, pages, blocks) = bitmaps.unwrap_or_else(|| {
            (
                Bitmap::new(sb.inode_slots),
                Bitmap::new(sb.data_pages),
                BlockTable::default(),
            )
        });
        Ok(Self {
            icache: Icache::new(
                cfg.icache_blocks,
                PAGE,
                sb.inode_slots / INODES_PER_BLOCK,
                cfg.dirty_ratio,
            ),
            data: PData::new(sb.data_start, pages, blocks, sb.block_pages)
                .with_write_out_queue(cfg.data_write_out_queue),
            wal: Wal::new(sb.fs_id, PAGE, sb.wal_pages * PAGE as u64, sb.wal_seq),
            zone,
            next_ino: sb.ino_base,
            orphans: BTreeSet::new(),
            sb,
            cart,
            inos,
            islots,
            tx: Vec::new(),
            unsettled: false,
            defer: false,
            pending: None,
            deferred_error: None,
            halted: false,
            synced: false,
            // An Icache write-back copies nothing into its batch: its log pages and blocks are
            // taken from the log's buffer and the Icache as they go out.
            behind: Behind::default(),
            checkpoints: 0,
            checkpoint_stops: CheckpointStops::default(),
            ckpt_buf: Vec::new(),
            ckpt_pieces: Vec::new(),
            ckpt_job: None,
            ckpt_zone,
            ckpt_wanted: None,
            checkpoint_step: cfg.checkpoint_step.max(PAGE),
            log_write_ahead: cfg.log_write_ahead.max(PAGE),
            drain_wait: cfg.drain_wait,
        })
    }

    /// Opens the PStore in the zone of `cfg` (only the zone and Icache settings and
    /// [`PStoreConfig::page_cache_survived`] are used):
    /// loads the last checkpoint, replays the WAL and checkpoints.
    pub fn open(dev: Arc<NvmeDevice>, cfg: &PStoreConfig) -> Result<Self, PStoreError> {
        let zone = Self::zone(dev, cfg)?;
        let mut pages = vec![0u8; 2 * PAGE];
        zone.read(0, &mut pages)?;
        let sb = [&pages[..PAGE], &pages[PAGE..]]
            .into_iter()
            .filter_map(Superblock::decode)
            .max_by_key(|s| s.generation)
            .ok_or_else(|| PStoreError::Corrupt("no valid superblock".into()))?;
        sb.validate(zone.pages())?;
        let mut ckpt = vec![0u8; (sb.ckpt_len as usize).div_ceil(PAGE) * PAGE];
        zone.read(sb.ckpt_start[usize::from(sb.active)], &mut ckpt)?;
        ckpt.truncate(sb.ckpt_len as usize);
        if common::hash::crc32c(&ckpt) != sb.ckpt_crc {
            return Err(PStoreError::Corrupt("checkpoint checksum mismatch".into()));
        }
        let mut s = Self::load_checkpoint(zone, sb, cfg, &ckpt)?;
        let mut log = vec![0u8; (sb.wal_pages as usize) * PAGE];
        s.zone.read(sb.wal_start, &mut log)?;
        let from = usize::try_from(sb.wal_offset).unwrap_or(usize::MAX);
        let mut replay = Wal::replay(sb.fs_id, &log[from..], sb.wal_seq);
        let found = replay.frames.len();
        if !cfg.page_cache_survived {
            replay.keep_flushed();
        }
        tracing::debug!(
            frames = replay.frames.len(),
            dropped = found - replay.frames.len(),
            bytes = replay.end,
            "PStore WAL replay"
        );
        for frame in &replay.frames {
            for rec in frame {
                s.apply(rec, false)?;
            }
        }
        s.wal = Wal::after_replay(sb.fs_id, PAGE, &log, from, &replay);
        if let Some(ino) = s.orphans.iter().find(|&&i| !s.inos.contains(i)) {
            return Err(PStoreError::Corrupt(format!("orphan {ino} has no inode")));
        }
        // Orphans: open files of clients gone with the restart, or frees a crash cut short.
        let orphans: Vec<u64> = s.orphans.iter().copied().collect();
        if !orphans.is_empty() {
            tracing::info!(orphans = orphans.len(), "PStore frees orphan inodes");
        }
        for ino in orphans {
            s.remove_inode(ino)?;
        }
        s.checkpoint()?;
        // The recovery's checkpoint held no request either.
        s.clear_checkpoint_stops();
        Ok(s)
    }

    fn load_checkpoint(
        zone: Zone,
        sb: Superblock,
        cfg: &PStoreConfig,
        b: &[u8],
    ) -> Result<Self, PStoreError> {
        let geometry = Geometry {
            inode_slots: sb.inode_slots,
            data_pages: sb.data_pages,
            block_pages: sb.block_pages,
        };
        let t = checkpoint::load(b, &geometry)?;
        let mut s = Self::assemble(
            zone,
            sb,
            cfg,
            t.cart,
            t.inodes,
            Some((t.islots, t.pages, t.blocks)),
        )?;
        s.next_ino = t.next_ino;
        s.orphans = t.orphans;
        Ok(s)
    }

    /// The tables as a checkpoint sees them.
    fn tables(&self) -> Tables<'_> {
        Tables {
            next_ino: self.next_ino,
            inodes: &self.inos,
            blocks: &self.data.blocks,
            cart: &self.cart,
            islots: &self.islots,
            pages: &self.data.pages,
            orphans: &self.orphans,
        }
    }

    /// Forgets the checkpoint stops so far ([`PStoreStats::checkpoint_stops`]): a caller that
    /// prepares the store before it serves (a server's first checkpoint, with the root
    /// directory) counts from there.
    pub fn clear_checkpoint_stops(&mut self) {
        self.checkpoint_stops = CheckpointStops::default();
    }

    /// Writes all state to the inactive checkpoint area, switches the superblock to it and
    /// empties the WAL (first finishing a checkpoint being written between requests).
    pub fn checkpoint(&mut self) -> Result<(), PStoreError> {
        self.finish_checkpoint()?;
        self.start_checkpoint()?;
        self.finish_checkpoint()
    }

    /// Takes a checkpoint as of now and leaves its encoding and writing to [`Self::pump`] (a
    /// piece per call) or [`Self::finish_checkpoint`]. Requests go on meanwhile: their frames
    /// follow in the log, and the pieces see their changes too (see [`checkpoint`]). Taking it
    /// commits the log and starts writing back the Icache's dirty blocks, so that the log from
    /// here on is all the checkpoint needs. The commit also releases the pages of every free
    /// logged so far: the checkpoint's bitmap must show them free, since its log replay
    /// starts after their records.
    fn start_checkpoint(&mut self) -> Result<(), PStoreError> {
        let start = Instant::now();
        self.ckpt_wanted = None;
        self.settle()?;
        self.count_commit_writes();
        self.commit()?;
        let (cache, mut io) = self.meta_io();
        let inode_mark = cache.write_back_dirty(&mut io)?;
        let mut sb = self.sb;
        sb.active = 1 - sb.active;
        sb.generation += 1;
        sb.wal_seq = self.wal.next_seq();
        sb.wal_offset = self.wal.len();
        let buf = std::mem::take(&mut self.ckpt_buf);
        let enc = Encoder::new(&self.tables(), buf);
        self.ckpt_job = Some(CheckpointJob {
            enc,
            sent: 0,
            sb,
            inode_mark,
            retaken: false,
            all_written: None,
            pieces: std::mem::take(&mut self.ckpt_pieces),
        });
        self.checkpoint_stops.record(Stop::Take, start.elapsed());
        Ok(())
    }

    /// Encodes and writes the next piece of the checkpoint being written, if any (`all`: the
    /// rest of it); once all of it is written, it is made current
    /// ([`Self::make_checkpoint_current`]): at once with `all`, else by the first pump that
    /// finds the data its log commit would write out written behind ([`Self::drained`]).
    /// Each call is a stop of the caller. With a checkpoint queue a pump's piece goes on
    /// while the worker serves, and the pumps after it take its completions: a piece waited
    /// for held a worker about 0.5 ms on the 2-core box, four fifths of it the device's
    /// write. A failed write drops the checkpoint (the last one stays current).
    fn write_checkpoint_step(&mut self, all: bool) -> Result<(), PStoreError> {
        let Some(mut job) = self.ckpt_job.take() else {
            return Ok(());
        };
        let start = Instant::now();
        if let Some(zone) = &self.ckpt_zone
            && let Err(e) = job.land_pieces(zone, all)
        {
            self.drop_checkpoint(job);
            return Err(e.into());
        }
        while !job.enc.is_done() {
            let free = match &self.ckpt_zone {
                Some(_) if !all => match job.free_piece() {
                    Some(k) => Some(k),
                    // Every piece is on its way: the next pump encodes on.
                    None => break,
                },
                _ => None,
            };
            let want = piece_bytes(self.checkpoint_step, self.wal.len() - job.sb.wal_offset);
            job.enc.encode(&self.tables(), want);
            if job.enc.pages_bytes() > job.sb.ckpt_pages * PAGE as u64 {
                let retaken = job.retaken;
                self.drop_checkpoint(job);
                if retaken {
                    return Err(PStoreError::NoSpace("checkpoint area"));
                }
                tracing::debug!(
                    "a checkpoint written between requests outgrew its area: taken whole"
                );
                self.start_checkpoint()?;
                if let Some(j) = self.ckpt_job.as_mut() {
                    j.retaken = true;
                }
                return self.write_checkpoint_step(true);
            }
            let sent = match (&self.ckpt_zone, free) {
                (Some(zone), Some(k)) => job.send_piece(zone, k),
                _ => {
                    let first = job.next_page();
                    let zone = &self.zone;
                    let mut n = 0;
                    let wrote = job.enc.take_pages(|b| {
                        n = b.len() as u64;
                        zone.write(first, b)
                    });
                    wrote.map(|()| job.sent += n)
                }
            };
            if let Err(e) = sent {
                self.drop_checkpoint(job);
                return Err(e.into());
            }
            if !all {
                break;
            }
        }
        if job.pieces_in_flight() > 0 {
            self.ckpt_job = Some(job);
            self.checkpoint_stops.record(Stop::Piece, start.elapsed());
            return Ok(());
        }
        let done = job.enc.is_done();
        if done {
            (job.sb.ckpt_len, job.sb.ckpt_crc) = job.enc.len_and_crc();
        }
        let ready = if !done {
            false
        } else if all {
            true
        } else {
            let since = *job.all_written.get_or_insert_with(Instant::now);
            match self.go_ahead(since) {
                Ok(ready) => ready,
                Err(e) => {
                    self.ckpt_job = Some(job);
                    return Err(e);
                }
            }
        };
        self.ckpt_job = Some(job);
        let made_current = if ready {
            self.make_checkpoint_current()
        } else {
            Ok(())
        };
        let kind = if ready { Stop::Last } else { Stop::Piece };
        self.checkpoint_stops.record(kind, start.elapsed());
        made_current
    }

    /// Whether a checkpoint to take or to make current, waiting since `since`, goes ahead
    /// now: [`Self::drained`], or it waited [`PStoreConfig::drain_wait`].
    fn go_ahead(&mut self, since: Instant) -> Result<bool, PStoreError> {
        Ok(since.elapsed() >= self.drain_wait || self.drained()?)
    }

    /// Whether a log commit now would wait for little: no data write-out and no Icache
    /// write-back or log written ahead in flight, at most [`COMMIT_STAGED_PAGES`] staged data
    /// pages and at most [`COMMIT_LOG_BYTES`] of unwritten log. With more staged, it starts
    /// writing them out on the write-back queue (without waiting), for a later pump to find
    /// them written; with more log, the pump's [`Self::write_log_ahead`] writes it.
    fn drained(&mut self) -> Result<bool, PStoreError> {
        if self.behind.in_flight() || self.data.is_writing() {
            return Ok(false);
        }
        if self.data.staged_pages() > COMMIT_STAGED_PAGES {
            self.data.start_write_out(&self.zone)?;
            // A zone without a write-back queue wrote them out at once.
            return Ok(!self.data.is_writing());
        }
        // Called only for a commit that is due (its job may be out of `ckpt_job` meanwhile).
        Ok(self.wal.unwritten_bytes() <= self.commit_log_bytes())
    }

    /// Unwritten log bytes that a checkpoint's log commit may write itself.
    fn commit_log_bytes(&self) -> usize {
        self.log_write_ahead.min(COMMIT_LOG_BYTES)
    }

    /// Unwritten log bytes from which [`Self::write_log_ahead`] writes them: fewer while a
    /// checkpoint waits to take or to be made current ([`COMMIT_LOG_BYTES`]).
    fn log_ahead_bytes(&self) -> usize {
        let commit_due = self.ckpt_wanted.is_some()
            || self
                .ckpt_job
                .as_ref()
                .is_some_and(|j| j.all_written.is_some());
        if commit_due {
            self.commit_log_bytes()
        } else {
            self.log_write_ahead
        }
    }

    /// Notes the staged data pages and the log bytes that the log commit of a checkpoint's
    /// stop is about to write out itself.
    fn count_commit_writes(&mut self) {
        let stops = &mut self.checkpoint_stops;
        stops.staged_pages_written = stops.staged_pages_written.max(self.data.staged_pages());
        stops.log_bytes_written = stops.log_bytes_written.max(self.wal.unwritten_bytes());
    }

    /// Encodes and writes what is left of the checkpoint being written, if any, and makes it
    /// current.
    fn finish_checkpoint(&mut self) -> Result<(), PStoreError> {
        self.write_checkpoint_step(true)
    }

    /// Drops a checkpoint that failed or is taken again: its pieces on their way are
    /// abandoned, its buffers kept for the next one.
    fn drop_checkpoint(&mut self, mut job: CheckpointJob) {
        if let Some(zone) = &self.ckpt_zone {
            job.abandon_pieces(zone);
        }
        self.keep_buffers(job);
    }

    /// Keeps a finished or dropped checkpoint's buffers for the next one.
    fn keep_buffers(&mut self, job: CheckpointJob) {
        self.ckpt_buf = job.enc.into_buf();
        self.ckpt_pieces = job.pieces;
    }

    /// Makes the checkpoint written to the device current, then moves the frames logged since
    /// it was taken to the start of the log.
    ///
    /// First the log is committed (it then holds every change the checkpoint's pieces saw)
    /// and the inode blocks dirty when it was taken are waited for. The superblock then names
    /// the checkpoint and the byte of the log where its frames start. The frames then move to
    /// the log's start, when they end before where they are (so that neither copy is ever
    /// half overwritten), and a second superblock names offset 0. A crash anywhere in between
    /// replays from whichever superblock is down. When nothing was logged since the
    /// checkpoint was taken (a checkpoint written at once), one superblock does it all.
    fn make_checkpoint_current(&mut self) -> Result<(), PStoreError> {
        let Some(mut job) = self.ckpt_job.take() else {
            return Ok(());
        };
        // The commit's flush also makes the checkpoint's pages and those inode blocks durable.
        self.count_commit_writes();
        let ready = self
            .settle()
            .and_then(|()| {
                let (cache, mut io) = self.meta_io();
                cache.wait_written(&mut io, job.inode_mark)
            })
            .and_then(|()| self.commit());
        if let Err(e) = ready {
            self.keep_buffers(job);
            return Err(e);
        }
        let since = self.wal.len() - job.sb.wal_offset;
        if since == 0 {
            job.sb.wal_offset = 0;
        }
        let made_current = self
            .zone
            .write(job.sb.generation % 2, &job.sb.encode())
            .and_then(|()| self.zone.flush());
        let sb = job.sb;
        self.keep_buffers(job);
        made_current?;
        self.sb = sb;
        self.checkpoints += 1;
        let page = PAGE as u64;
        if since == 0 {
            self.wal.reset();
            self.synced = true;
        } else if since.div_ceil(page) <= self.sb.wal_offset / page {
            // The copy's pages end before the page where the frames are now.
            self.move_log_to_start()?;
        }
        Ok(())
    }

    /// Copies the frames from the superblock's log offset to the end of the log to the log's
    /// start, then names offset 0 in a new superblock (see [`Self::make_checkpoint_current`],
    /// which committed the log: the copy is read back from the device).
    fn move_log_to_start(&mut self) -> Result<(), PStoreError> {
        debug_assert!(!self.wal.has_unwritten(), "frames the copy would miss");
        let (from, end) = (self.sb.wal_offset, self.wal.len());
        let first = from / PAGE as u64;
        let mut pages = vec![0u8; ((end.div_ceil(PAGE as u64) - first) as usize) * PAGE];
        self.zone.read(self.sb.wal_start + first, &mut pages)?;
        let skip = (from - first * PAGE as u64) as usize;
        let mut frames = pages[skip..skip + (end - from) as usize].to_vec();
        let len = frames.len();
        frames.resize(len.div_ceil(PAGE) * PAGE, 0);
        self.zone.write(self.sb.wal_start, &frames)?;
        self.zone.flush()?;
        let mut sb = self.sb;
        sb.generation += 1;
        sb.wal_offset = 0;
        self.zone.write(sb.generation % 2, &sb.encode())?;
        self.zone.flush()?;
        self.sb = sb;
        self.wal.continue_after(&frames[..len]);
        self.synced = true;
        Ok(())
    }

    /// Writes the WAL and flushes the device: every operation so far becomes durable.
    fn commit(&mut self) -> Result<(), PStoreError> {
        self.synced = false;
        let (cache, mut io) = self.meta_io();
        io.sync_log(&*cache, true)?;
        self.data.commit_frees()
    }

    /// Moves the Icache write-back and the write-out of staged data pages in flight on
    /// without waiting (a server calls it between requests); returns whether either is still
    /// in flight. A failed one is returned here: its blocks dirty again, its pages staged
    /// again.
    pub fn pump(&mut self) -> Result<bool, PStoreError> {
        if self.halted {
            return Ok(false);
        }
        // Data first: an Icache write-back may wait for the pages its log names.
        let data = self.data.pump_writing(&self.zone);
        let (cache, mut io) = self.meta_io();
        let icache = cache.poll_write_behind(&mut io, false)?;
        // A failed data write-out is returned before the checkpoint and log steps can fail.
        let data = data?;
        if let Some(since) = self.ckpt_wanted {
            // Its first piece waits for the next pump: one stop per pump.
            if self.go_ahead(since)? {
                self.start_checkpoint()?;
            }
        } else {
            self.write_checkpoint_step(false)?;
        }
        let log = self.write_log_ahead()?;
        Ok(data || icache || log || self.ckpt_job.is_some() || self.ckpt_wanted.is_some())
    }

    /// Writes the log ahead once [`PStoreConfig::log_write_ahead`] bytes of it are
    /// unwritten, on the write-back queue as an Icache write-back without inode blocks (its
    /// data pages first), and takes the result of the one in flight. Returns whether one is
    /// in flight. A zone without a write-back queue commits it at once.
    ///
    /// A log that nothing writes (no fsync, no Icache write-back) was written all at once by
    /// the next checkpoint: tens of megabytes of unlinks held the worker 110-260 ms on the
    /// 2-core box. Then it was committed a megabyte at a time by the pump, which waited for
    /// it: in 10,000 creates per process the pumps' stops over 50 us held the 8 workers of
    /// an H200 host 86-115 ms in all, against 19-34 ms written ahead, and in a bigdir every
    /// client soon waits for a stopped worker (bench/results/2026-11-27-peakfs-procs).
    fn write_log_ahead(&mut self) -> Result<bool, PStoreError> {
        if self.behind.log_ahead {
            let (cache, mut io) = self.meta_io();
            let Some(r) = io.poll_write_behind(false, &*cache) else {
                return Ok(true);
            };
            self.behind.log_ahead = false;
            // Its log pages stay unwritten: the next write of the log writes them again.
            r?;
        }
        if self.wal.unwritten_bytes() < self.log_ahead_bytes() || self.behind.started {
            // Too little yet, or an Icache write-back in flight, which writes the log too.
            return Ok(self.behind.log_ahead);
        }
        let (cache, mut io) = self.meta_io();
        if !io.start_write_behind(&[], &*cache)? {
            self.commit()?;
            return Ok(false);
        }
        self.behind.log_ahead = true;
        Ok(true)
    }

    /// Hands every operation so far to the device without flushing it: the staged data
    /// pages, then the log. A server does it before it answers what a close or an fsync
    /// acknowledges: a process killed after that loses none of it (the page cache, or the
    /// device, holds it), and a restart on the same boot replays it
    /// ([`PStoreConfig::page_cache_survived`]). After a power cut only what an fsync, a
    /// checkpoint or a later log write made durable stays. With the mmap backend and the
    /// worker's own queue this is a copy into the mapping.
    pub fn write_through(&mut self) -> Result<(), PStoreError> {
        self.settle()?;
        let (cache, mut io) = self.meta_io();
        io.sync_log(&*cache, false)
    }

    /// Makes every operation so far durable (the data written and all metadata).
    pub fn fsync(&mut self) -> Result<(), PStoreError> {
        self.settle()?;
        self.commit()
    }

    // ---- transactions ----

    /// Starts an operation that logs at most `bytes` of records. With a quarter of the log
    /// left, a checkpoint is due: the next pumps take it ([`Self::pump`], once the data its
    /// log commit would write out is written behind) and write it between requests. With an
    /// eighth left and none taken yet, it is taken now. Out of room, it is finished now (or
    /// one is taken and written at once).
    fn begin(&mut self, bytes: usize) -> Result<(), PStoreError> {
        self.settle()?;
        let reserve = (self.sb.wal_pages as usize * PAGE) / 4;
        if self.ckpt_job.is_none() && !self.wal.fits(bytes.saturating_add(reserve)) {
            if !self.wal.fits(bytes.saturating_add(reserve / 2)) {
                self.start_checkpoint()?;
            } else if self.ckpt_wanted.is_none() {
                self.ckpt_wanted = Some(Instant::now());
            }
        }
        if !self.wal.fits(bytes) {
            self.finish_checkpoint()?;
        }
        if !self.wal.fits(bytes) {
            self.checkpoint()?;
        }
        if !self.wal.fits(bytes) {
            return Err(PStoreError::NoSpace("WAL"));
        }
        Ok(())
    }

    /// Finishes the transaction built so far: logs it, then applies its inode images (only
    /// then, so that an Icache write-back never carries a change the log lacks). With
    /// [`Self::defer_settle`] both wait for [`Self::settle`].
    fn end(&mut self) -> Result<(), PStoreError> {
        // A pending operation's records join `tx` when it is put in place (a deferred relink
        // leaves `tx` empty until then).
        if self.tx.is_empty() && self.pending.is_none() {
            return Ok(());
        }
        self.unsettled = true;
        if self.defer { Ok(()) } else { self.settle() }
    }

    /// Lets a caller answer an operation before its log append: the WAL append and the inode
    /// images of each finished transaction wait for [`Self::settle`], which every later call
    /// on this store does first (so nothing can see the store without them), and which a
    /// server calls after it sent the reply. A create and a relink also leave their changes to
    /// the tables, bitmaps and dentries for then (`PendingCreate`, `PendingRelink`); every
    /// other operation changes them before it returns. Nothing becomes durable before
    /// [`Self::fsync`] or a checkpoint, both of which settle first. A failure of a deferred
    /// step (an Icache write-back's I/O) is returned by the call that settles it.
    pub fn defer_settle(&mut self, on: bool) -> Result<(), PStoreError> {
        self.settle()?;
        self.defer = on;
        Ok(())
    }

    /// Whether a transaction could not be logged: every call fails with
    /// [`PStoreError::Halted`] until the store is opened again.
    pub fn is_halted(&self) -> bool {
        self.halted
    }

    /// Whether [`Self::settle`] has anything to do: a finished transaction, or an operation
    /// answered early, waits for it.
    pub fn is_unsettled(&self) -> bool {
        self.unsettled || self.pending.is_some()
    }

    /// Logs the finished transaction that waits (see [`Self::defer_settle`]) and applies its
    /// inode images.
    pub fn settle(&mut self) -> Result<(), PStoreError> {
        if self.halted {
            return Err(PStoreError::Halted);
        }
        self.finish_pending();
        // A pending operation may have put no record at all (a relink that changed nothing).
        if !std::mem::take(&mut self.unsettled) || self.tx.is_empty() {
            return self.deferred_error.take().map_or(Ok(()), Err);
        }
        let mut tx = std::mem::take(&mut self.tx);
        let logged = self.wal.append(&tx);
        let applied = match logged {
            Ok(_) => {
                self.synced = false;
                self.data.frees_logged(self.wal.len());
                tx.iter().try_for_each(|rec| match rec {
                    Record::Inode { slot, image } => self.put_inode_image(*slot, image),
                    _ => Ok(()),
                })
            }
            Err(e) => {
                // Its changes are in memory (tables, bitmaps, dentries) but in no frame: a
                // checkpoint or an Icache write-back would make them durable without the rest
                // of the operation, and later frames would build on them. Every call fails
                // from here on; a restart replays the log up to the last frame written.
                tracing::error!(error = %e, records = tx.len(), "a transaction outgrew its log room; the store stops");
                self.halted = true;
                Err(PStoreError::Halted)
            }
        };
        // The buffer goes back for the next transaction: one allocation per worker, not per op.
        tx.clear();
        self.tx = tx;
        match self.deferred_error.take() {
            Some(e) => Err(e),
            None => applied,
        }
    }

    /// Puts the create or relink answered early in place: its records join the transaction
    /// that [`Self::settle`] logs (as if the operation had made them before its reply).
    fn finish_pending(&mut self) {
        let put = match self.pending.take() {
            None => return,
            Some(Pending::Create(p)) => self.put_create(p),
            Some(Pending::Relink(p)) => self.put_relink(p),
        };
        if let Err(e) = put {
            self.deferred_error.get_or_insert(e);
        }
    }

    /// The inode image, inode-table entry and dentry of a create, and its parent's image.
    fn put_create(&mut self, p: PendingCreate) -> Result<(), PStoreError> {
        self.map_inode(p.slot, &p.inode)?;
        self.log(Record::DentryPut {
            pino: p.pino,
            name: p.name,
            value: p.inode.ino,
        })?;
        if let Some((slot, parent)) = p.parent {
            self.log_inode(slot, &parent)?;
        }
        Ok(())
    }

    /// Runs `op` as one transaction of at most `bytes` of records.
    fn run<T>(
        &mut self,
        bytes: usize,
        op: impl FnOnce(&mut Self) -> Result<T, PStoreError>,
    ) -> Result<T, PStoreError> {
        self.begin(bytes)?;
        // The op may write data pages; the next write-back must flush first.
        self.synced = false;
        let r = op(self);
        // Whatever the op applied before failing is logged, so memory and log agree.
        self.end()?;
        r
    }

    /// Applies a record to the in-memory state (replay, or a live op for PMeta records).
    fn apply(&mut self, rec: &Record, live: bool) -> Result<(), PStoreError> {
        if self.data.apply(rec, live)? {
            return Ok(());
        }
        match rec {
            // Replay: the checkpoint, written between requests, may hold the change already.
            Record::InodeAlloc { slot } => self.islots.mark_run(*slot, 1, true, live)?,
            Record::InodeFree { slot } => self.islots.mark_run(*slot, 1, false, live)?,
            Record::InoMap { ino, slot } => {
                if *slot >= self.sb.inode_slots || *ino == 0 {
                    return Err(PStoreError::Corrupt(format!("inode {ino} in slot {slot}")));
                }
                self.inos.insert(*ino, *slot);
            }
            Record::InoUnmap { ino } => {
                self.inos.remove(*ino);
                self.orphans.remove(ino);
            }
            Record::DentryPut { pino, name, value } => {
                self.cart.insert(*pino, name, *value)?;
            }
            Record::DentryDel { pino, name } => {
                self.cart.remove(*pino, name);
            }
            Record::Inode { slot, image } => self.put_inode_image(*slot, image)?,
            Record::NextIno { next } => self.next_ino = self.next_ino.max(*next),
            Record::Orphan { ino } => {
                // In replay the inode may be missing until the replay ends: a checkpoint
                // written between requests may lack an inode that a later record unmaps.
                if live && !self.inos.contains(*ino) {
                    return Err(PStoreError::Corrupt(format!("orphan {ino} has no inode")));
                }
                self.orphans.insert(*ino);
            }
            _ => {}
        }
        Ok(())
    }

    /// Applies a PMeta record now and adds it to the transaction (inode images wait for
    /// [`Self::end`]).
    fn log(&mut self, rec: Record) -> Result<(), PStoreError> {
        if !matches!(rec, Record::Inode { .. }) {
            self.apply(&rec, true)?;
        }
        self.tx.push(rec);
        Ok(())
    }

    fn meta_io(&mut self) -> (&mut Icache, MetaIo<'_>) {
        (
            &mut self.icache,
            MetaIo {
                zone: &self.zone,
                wal: &mut self.wal,
                data: &mut self.data,
                wal_start: self.sb.wal_start,
                inode_start: self.sb.inode_start,
                synced: &mut self.synced,
                behind: &mut self.behind,
            },
        )
    }

    fn put_inode_image(&mut self, slot: u64, image: &[u8; INODE_BYTES]) -> Result<(), PStoreError> {
        if slot >= self.sb.inode_slots {
            return Err(PStoreError::Corrupt(format!("inode slot {slot}")));
        }
        let block = slot / INODES_PER_BLOCK;
        let first = block * INODES_PER_BLOCK;
        let empty = (first..first + INODES_PER_BLOCK).all(|s| s == slot || !self.islots.is_used(s));
        let (cache, mut io) = self.meta_io();
        if empty {
            // A fresh block (a new directory's first inodes): nothing on the device to read.
            cache.install_empty(&mut io, block)?;
        }
        cache.write(
            &mut io,
            block,
            (slot % INODES_PER_BLOCK) as usize * INODE_BYTES,
            image,
        )
    }

    fn log_inode(&mut self, slot: u64, inode: &Inode) -> Result<(), PStoreError> {
        self.log(Record::Inode {
            slot,
            image: Box::new(inode.encode()),
        })
    }

    // ---- metadata ----

    /// Hands out a new inode number of this worker.
    pub fn alloc_ino(&mut self) -> Result<u64, PStoreError> {
        self.settle()?;
        self.run(32, |s| {
            let ino = s.next_ino;
            s.log(Record::NextIno { next: ino + 1 })?;
            Ok(ino)
        })
    }

    /// Creates a file or directory: a new ino, its inode here, and the dentry `(pino, name)`
    /// whose value is the ino. Fails if the dentry exists. See [`Self::create_inode`].
    pub fn create(
        &mut self,
        pino: u64,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
        hint: Hint,
    ) -> Result<Inode, PStoreError> {
        self.settle()?;
        let new = NewInode {
            mode,
            uid,
            gid,
            rdev: 0,
            hint,
            io_unit: 0,
        };
        self.create_inode(pino, name, &new)
    }

    /// Creates an inode of any type with dentry `(pino, name)` naming it, in one transaction:
    /// a file starts with one link, a directory with two (its entry and its `.`), and a new
    /// directory raises the link count of its parent (its `..`) when the parent is here.
    pub fn create_inode(
        &mut self,
        pino: u64,
        name: &[u8],
        new: &NewInode,
    ) -> Result<Inode, PStoreError> {
        self.settle()?;
        cart::check_name(name)?;
        if self.cart.get(pino, name).is_some() {
            return Err(PStoreError::Exists(format!(
                "dentry {:?} in {pino}",
                String::from_utf8_lossy(name)
            )));
        }
        self.check_dentry_room()?;
        let dir = new.mode & libc::S_IFMT == libc::S_IFDIR;
        let parent = match self.inode_offset(pino) {
            Some(slot) if dir => Some((slot, self.getattr(pino)?)),
            _ => None,
        };
        if self.next_ino > cart::MAX_VALUE {
            return Err(CartError::BadValue(self.next_ino).into());
        }
        self.run(3 * MAX_RECORD + 400, |s| {
            let ino = s.next_ino;
            s.log(Record::NextIno { next: ino + 1 })?;
            let now = now_ns();
            let inode = Inode {
                ino,
                mode: new.mode,
                uid: new.uid,
                gid: new.gid,
                nlink: if dir { 2 } else { 1 },
                atime_ns: now,
                mtime_ns: now,
                ctime_ns: now,
                hint: new.hint,
                rdev: new.rdev,
                io_unit: new.io_unit,
                ..Inode::default()
            };
            let slot = s.reserve_slot()?;
            let parent = parent.map(|(slot, mut p)| {
                p.nlink = p.nlink.saturating_add(1);
                p.ctime_ns = now;
                (slot, p)
            });
            let pending = PendingCreate {
                slot,
                inode,
                pino,
                name: name.to_vec(),
                parent,
            };
            // Answer first: the rest waits for the settle after the reply (on 16 cores a
            // create's time before its reply went from 730 to 254 ns,
            // bench/results/2026-11-26-peakfs-deferred-create).
            if s.defer {
                s.pending = Some(Pending::Create(pending));
                Ok(inode)
            } else {
                s.put_create(pending).map(|()| inode)
            }
        })
    }

    fn check_dentry_room(&self) -> Result<(), PStoreError> {
        if self.cart.len() as u64 >= self.sb.max_dentries {
            return Err(PStoreError::NoSpace("dentries"));
        }
        Ok(())
    }

    fn add_inode(&mut self, inode: &Inode) -> Result<u64, PStoreError> {
        let slot = self.reserve_slot()?;
        self.map_inode(slot, inode)?;
        Ok(slot)
    }

    /// Allocates an inode slot.
    fn reserve_slot(&mut self) -> Result<u64, PStoreError> {
        let slot = self
            .islots
            .alloc_run(1)
            .ok_or(PStoreError::NoSpace("inode slots"))?;
        // Found by the allocator; the record below sets the bit, live and in replay alike.
        self.islots.clear_run(slot, 1)?;
        self.log(Record::InodeAlloc { slot })?;
        Ok(slot)
    }

    /// Writes `inode` to `slot` and maps its ino there.
    fn map_inode(&mut self, slot: u64, inode: &Inode) -> Result<(), PStoreError> {
        self.log_inode(slot, inode)?;
        self.log(Record::InoMap {
            ino: inode.ino,
            slot,
        })
    }

    /// Stores an inode whose number was assigned elsewhere (e.g. a sub-directory's inode
    /// sharded to this worker); returns its inode offset.
    pub fn insert_inode(&mut self, inode: &Inode) -> Result<u64, PStoreError> {
        self.settle()?;
        if self.inos.contains(inode.ino) {
            return Err(PStoreError::Exists(format!("inode {}", inode.ino)));
        }
        let mut inode = *inode;
        inode.first_block = PageRun::NONE;
        self.run(400, |s| s.add_inode(&inode))
    }

    /// The value of dentry `(pino, name)`.
    pub fn lookup(&mut self, pino: u64, name: &[u8]) -> Option<u64> {
        self.finish_pending();
        self.cart.get(pino, name)
    }

    /// Inserts or replaces a dentry; returns the previous value.
    pub fn insert_dentry(
        &mut self,
        pino: u64,
        name: &[u8],
        value: u64,
    ) -> Result<Option<u64>, PStoreError> {
        self.settle()?;
        cart::check_name(name)?;
        if value > cart::MAX_VALUE {
            return Err(CartError::BadValue(value).into());
        }
        let old = self.cart.get(pino, name);
        if old.is_none() {
            self.check_dentry_room()?;
        }
        self.run(MAX_RECORD, |s| {
            s.log(Record::DentryPut {
                pino,
                name: name.to_vec(),
                value,
            })
        })?;
        Ok(old)
    }

    /// Removes a dentry; returns its value (`None`: there was none).
    pub fn remove_dentry(&mut self, pino: u64, name: &[u8]) -> Result<Option<u64>, PStoreError> {
        self.settle()?;
        let Some(old) = self.cart.get(pino, name) else {
            return Ok(None);
        };
        self.run(MAX_RECORD, |s| {
            s.log(Record::DentryDel {
                pino,
                name: name.to_vec(),
            })
        })?;
        Ok(Some(old))
    }

    /// Up to `limit` dentries of `pino` in name order, after `after` if given (readdir pages).
    pub fn readdir(
        &mut self,
        pino: u64,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Vec<(Vec<u8>, u64)> {
        self.finish_pending();
        let mut out = Vec::new();
        if limit == 0 {
            return out;
        }
        self.cart.for_each_in_dir(pino, after, |n, v| {
            out.push((n.to_vec(), v));
            if out.len() == limit {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        out
    }

    /// Whether directory `pino` has dentries on this worker.
    pub fn has_dentries(&mut self, pino: u64) -> bool {
        self.finish_pending();
        self.cart.has_dir(pino)
    }

    /// The inode offset of `ino`, if its inode is here.
    pub fn inode_offset(&mut self, ino: u64) -> Option<u64> {
        self.finish_pending();
        self.inos.get(ino)
    }

    /// The inode at inode offset `slot` (a dentry value under the bigdir strategy).
    pub fn getattr_at(&mut self, slot: u64) -> Result<Inode, PStoreError> {
        self.settle()?;
        if !self.islots.is_used(slot) {
            return Err(PStoreError::Invalid(format!("inode offset {slot} is free")));
        }
        let mut b = [0u8; INODE_BYTES];
        let (cache, mut io) = self.meta_io();
        cache.read(
            &mut io,
            slot / INODES_PER_BLOCK,
            (slot % INODES_PER_BLOCK) as usize * INODE_BYTES,
            &mut b,
        )?;
        Inode::decode(&b).map_err(|source| PStoreError::Inode { ino: slot, source })
    }

    /// The inode of `ino`.
    pub fn getattr(&mut self, ino: u64) -> Result<Inode, PStoreError> {
        self.settle()?;
        let slot = self.inode_offset(ino).ok_or(PStoreError::NoInode(ino))?;
        let i = self.getattr_at(slot).map_err(|e| match e {
            PStoreError::Inode { source, .. } => PStoreError::Inode { ino, source },
            e => e,
        })?;
        if i.ino != ino {
            return Err(PStoreError::Corrupt(format!(
                "slot {slot} of ino {ino} holds ino {}",
                i.ino
            )));
        }
        Ok(i)
    }

    /// Changes attributes; a size change truncates or extends the blocks held here.
    pub fn setattr(&mut self, ino: u64, attr: &SetAttr) -> Result<Inode, PStoreError> {
        self.settle()?;
        if let Some(size) = attr.size {
            self.truncate(ino, size)?;
        }
        let slot = self.inode_offset(ino).ok_or(PStoreError::NoInode(ino))?;
        let mut i = self.getattr(ino)?;
        i.mode = attr.mode.unwrap_or(i.mode);
        i.uid = attr.uid.unwrap_or(i.uid);
        i.gid = attr.gid.unwrap_or(i.gid);
        i.atime_ns = attr.atime_ns.unwrap_or(i.atime_ns);
        i.mtime_ns = attr.mtime_ns.unwrap_or(i.mtime_ns);
        i.hint = attr.hint.unwrap_or(i.hint);
        i.io_unit = attr.io_unit.unwrap_or(i.io_unit);
        match attr.nlink {
            Some(0) => {
                return Err(PStoreError::Invalid(format!(
                    "link count 0 for inode {ino} (relink drops the last link)"
                )));
            }
            Some(n) => i.nlink = n,
            None => {}
        }
        i.ctime_ns = now_ns();
        self.run(MAX_RECORD, |s| s.log_inode(slot, &i))?;
        Ok(i)
    }

    /// Gives `ino` (whose inode is here) the I/O unit `unit` ([`Inode::io_unit`]) unless it has
    /// one: the first writer's unit holds for every writer after it. Returns the inode.
    pub fn fix_io_unit(&mut self, ino: u64, unit: u32) -> Result<Inode, PStoreError> {
        self.settle()?;
        let slot = self.inode_offset(ino).ok_or(PStoreError::NoInode(ino))?;
        let mut i = self.getattr(ino)?;
        if i.io_unit == 0 {
            i.io_unit = unit;
            i.ctime_ns = now_ns();
            self.run(MAX_RECORD, |s| s.log_inode(slot, &i))?;
        }
        Ok(i)
    }

    /// Applies dentry changes and link counts in one transaction (see [`Relink`]); returns the
    /// inodes it left without links. Those it did not free ([`Relink::free`]) are orphans now
    /// ([`Self::is_orphan`]): free each with [`Self::remove_inode`], or keep it while it is
    /// open.
    pub fn relink(&mut self, change: &Relink<'_>) -> Result<Vec<Unlinked>, PStoreError> {
        self.settle()?;
        if let Some((pino, name)) = change.remove
            && self.cart.get(pino, name).is_none()
        {
            return Err(PStoreError::NoEntry {
                pino,
                name: String::from_utf8_lossy(name).into_owned(),
            });
        }
        if let Some((pino, name, value)) = change.insert {
            cart::check_name(name)?;
            if value > cart::MAX_VALUE {
                return Err(CartError::BadValue(value).into());
            }
            // With a removal in the same change (rename) the dentry count does not grow.
            if change.remove.is_none() && self.cart.get(pino, name).is_none() {
                self.check_dentry_room()?;
            }
        }
        // Net change per local inode, in first-seen order.
        let mut net: Vec<(u64, u64, i64)> = Vec::new();
        for &(ino, delta) in change.links {
            match net.iter_mut().find(|e| e.0 == ino) {
                Some(e) => e.2 += i64::from(delta),
                None => {
                    if let Some(slot) = self.inode_offset(ino) {
                        net.push((ino, slot, i64::from(delta)));
                    }
                }
            }
        }
        net.retain(|e| e.2 != 0);
        let mut inodes = Vec::with_capacity(net.len());
        for &(ino, slot, delta) in &net {
            inodes.push((slot, self.getattr(ino)?, delta));
        }
        // The blocks of the inode to free, when they fit this transaction.
        let free = change
            .free
            .map(|ino| (ino, self.data.blocks_of(ino)))
            .filter(|(_, blocks)| blocks.len() <= BLOCKS_PER_TX);
        let free_bytes = free.as_ref().map_or(0, |(_, b)| b.len() * 80 + 200);
        let bytes = 2 * MAX_RECORD + inodes.len() * (INODE_BYTES + 32) + free_bytes;
        // Which inodes the change leaves without links, known before it is applied: the
        // reply needs no more.
        let unlinked = inodes
            .iter()
            .filter(|(_, i, delta)| i64::from(i.nlink) + delta <= 0)
            .filter_map(|(_, i, _)| {
                let freed = free.as_ref().is_some_and(|(ino, _)| *ino == i.ino);
                (freed || !self.orphans.contains(&i.ino)).then_some(Unlinked { ino: i.ino, freed })
            })
            .collect();
        let pending = PendingRelink {
            remove: change.remove.map(|(pino, name)| (pino, name.to_vec())),
            insert: change
                .insert
                .map(|(pino, name, value)| (pino, name.to_vec(), value)),
            inodes,
            free,
        };
        self.run(bytes, |s| {
            // Answer first, as a create does: the dentry removal and the frees wait for the
            // settle after the reply.
            if s.defer {
                s.pending = Some(Pending::Relink(pending));
                Ok(())
            } else {
                s.put_relink(pending)
            }
        })?;
        Ok(unlinked)
    }

    /// The records of a relink (see [`PendingRelink`]), applied.
    fn put_relink(&mut self, p: PendingRelink) -> Result<(), PStoreError> {
        if let Some((pino, name)) = p.remove {
            self.log(Record::DentryDel { pino, name })?;
        }
        if let Some((pino, name, value)) = p.insert {
            self.log(Record::DentryPut { pino, name, value })?;
        }
        let now = now_ns();
        for (slot, mut i, delta) in p.inodes {
            let n = (i64::from(i.nlink) + delta).clamp(0, i64::from(u32::MAX));
            i.nlink = n as u32;
            i.ctime_ns = now;
            if let Some((ino, blocks)) = &p.free
                && i.nlink == 0
                && *ino == i.ino
            {
                // Its image is not written: the slot is free from this transaction on.
                self.free_inode(slot, &i, blocks)?;
                continue;
            }
            self.log_inode(slot, &i)?;
            if i.nlink == 0 && !self.orphans.contains(&i.ino) {
                self.log(Record::Orphan { ino: i.ino })?;
            }
        }
        Ok(())
    }

    /// Whether inode `ino` is an orphan (here, without links, not yet freed).
    pub fn is_orphan(&mut self, ino: u64) -> bool {
        self.finish_pending();
        self.orphans.contains(&ino)
    }

    /// Removes dentry `(pino, name)` and drops one link of the inode it names if that inode
    /// is here (the value is taken as an ino, as [`Self::create`] stores): a file at its last
    /// link, or a directory (all its links, and one of a parent here), is freed with its data
    /// here. Returns the value.
    pub fn unlink(&mut self, pino: u64, name: &[u8]) -> Result<u64, PStoreError> {
        self.settle()?;
        let value = self
            .cart
            .get(pino, name)
            .ok_or_else(|| PStoreError::NoEntry {
                pino,
                name: String::from_utf8_lossy(name).into_owned(),
            })?;
        let mut links = Vec::new();
        if self.inode_offset(value).is_some() {
            let i = self.getattr(value)?;
            if i.is_dir() {
                links.push((pino, -1));
                links.push((value, -i32::try_from(i.nlink.max(1)).unwrap_or(i32::MAX)));
            } else {
                links.push((value, -1));
            }
        }
        let change = Relink {
            remove: Some((pino, name)),
            insert: None,
            links: &links,
            free: Some(value),
        };
        for u in self.relink(&change)? {
            if !u.freed {
                self.remove_inode(u.ino)?;
            }
        }
        Ok(value)
    }

    /// Removes inode `ino` and all of its data blocks here (the free of an orphan; it takes
    /// several transactions, and an orphan whose free a crash cut short is freed at open).
    pub fn remove_inode(&mut self, ino: u64) -> Result<(), PStoreError> {
        self.settle()?;
        let slot = self.inode_offset(ino).ok_or(PStoreError::NoInode(ino))?;
        let i = self.getattr(ino)?;
        self.drop_blocks(ino, 0)?;
        self.run(200, |s| s.free_inode(slot, &i, &[]))
    }

    /// Adds to the transaction the free of inode `i` at `slot`: its mapped `blocks` (each with
    /// its pages), its first block's pages, its ino and its slot.
    fn free_inode(&mut self, slot: u64, i: &Inode, blocks: &[u64]) -> Result<(), PStoreError> {
        self.data.unmap_blocks(i.ino, blocks, &mut self.tx);
        self.data.free(i.first_block, &mut self.tx);
        self.log(Record::InoUnmap { ino: i.ino })?;
        self.log(Record::InodeFree { slot })
    }

    /// Frees the hashtable blocks of `ino` that start at or past byte `size` (file blocks and
    /// extents alike), a transaction per batch.
    fn drop_blocks(&mut self, ino: u64, size: u64) -> Result<(), PStoreError> {
        let bs = self.block_bytes();
        let blocks: Vec<u64> = self
            .data
            .blocks_of(ino)
            .into_iter()
            .filter(|&b| BlockKeys::start_of(b, bs) >= size)
            .collect();
        for chunk in blocks.chunks(BLOCKS_PER_TX) {
            self.run(chunk.len() * 80, |s| {
                s.data.unmap_blocks(ino, chunk, &mut s.tx);
                Ok(())
            })?;
        }
        Ok(())
    }

    // ---- data ----

    /// The run of block `block` of `ino`: inline in the inode for block 0 of a local inode.
    fn block_run(&self, local: Option<&Inode>, ino: u64, block: u64) -> PageRun {
        match local {
            Some(i) if block == 0 => i.first_block,
            _ => self.data.run_of(ino, block),
        }
    }

    /// Bytes of a file block.
    pub fn block_bytes(&self) -> u64 {
        self.data.block_bytes() as u64
    }

    /// Writes `data` at `offset` of file `ino`, into the blocks held here. When the inode is
    /// here, its first block is mapped inline and its size and mtime follow the write.
    pub fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> Result<usize, PStoreError> {
        self.write_keyed(ino, offset, data, BlockKeys::File, None)
    }

    /// [`Self::write`], or [`Self::write_extent`] for an `extent` starting at the given
    /// origin, of bytes a writer placed by distribution `by.layout`: when the inode is here,
    /// the file is held to it first ([`Inode::hold_layout`]), and nothing is written if it
    /// lays its data out otherwise; the write drops the set-ID bits if `by` says so.
    pub fn write_laid_out(
        &mut self,
        ino: u64,
        offset: u64,
        extent: Option<u64>,
        data: &[u8],
        by: WrittenBy,
    ) -> Result<usize, PStoreError> {
        let keys = match extent {
            Some(origin) => extent_keys(origin, offset)?,
            None => BlockKeys::File,
        };
        self.write_keyed(ino, offset, data, keys, Some(by))
    }

    /// Writes `data` at `offset` of file `ino` into the extent that starts at file offset
    /// `origin` (`origin <= offset`; [`BlockKeys::Extent`]: an I/O unit of an I/O-based
    /// file). Its pages hold nothing of any other extent: an extent written whole from its
    /// origin is exactly the pages its bytes need. When the inode is here, its size and
    /// mtime follow the write.
    pub fn write_extent(
        &mut self,
        ino: u64,
        origin: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<usize, PStoreError> {
        self.write_keyed(ino, offset, data, extent_keys(origin, offset)?, None)
    }

    fn write_keyed(
        &mut self,
        ino: u64,
        offset: u64,
        data: &[u8],
        keys: BlockKeys,
        by: Option<WrittenBy>,
    ) -> Result<usize, PStoreError> {
        self.settle()?;
        let bs = self.block_bytes();
        offset
            .checked_add(data.len() as u64)
            .filter(|end| *end <= i64::MAX as u64)
            .ok_or_else(|| PStoreError::Invalid(format!("write at {offset} overflows")))?;
        let mut done = 0usize;
        while done < data.len() {
            // One transaction per batch of blocks.
            let start = offset + done as u64;
            let (_, _, first_end) = keys.locate(start, bs);
            let batch_end =
                (first_end + (BLOCKS_PER_TX as u64 - 1) * bs).min(offset + data.len() as u64);
            let piece = &data[done..done + (batch_end - start) as usize];
            let batch = |s: &mut Self| {
                s.run(BLOCKS_PER_TX * 100 + MAX_RECORD, |s| {
                    s.write_batch(ino, start, piece, keys, by)
                })
            };
            match batch(self) {
                // Pages freed since the last commit (unlinks, truncates, overwrites) come back
                // once their frees are durable: commit and try again before refusing. A
                // failed batch maps none of its new runs and frees them.
                Err(PStoreError::NoSpace(pdata::NO_DATA_PAGES))
                    if self.data.pending_free_pages() > 0 =>
                {
                    self.fsync()?;
                    batch(self)?;
                }
                r => r?,
            }
            done += piece.len();
        }
        Ok(data.len())
    }

    fn write_batch(
        &mut self,
        ino: u64,
        offset: u64,
        data: &[u8],
        keys: BlockKeys,
        by: Option<WrittenBy>,
    ) -> Result<(), PStoreError> {
        let bs = self.block_bytes();
        let slot = self.inode_offset(ino);
        let mut local = match slot {
            Some(_) => Some(self.getattr(ino)?),
            None => None,
        };
        if let Some(i) = local.as_mut() {
            if i.is_dir() {
                // Its hint is a default for new files, and its size no file's.
                return Err(PStoreError::Invalid(format!(
                    "inode {ino} is a directory: it holds no data"
                )));
            }
            if let Some(by) = by {
                // Logged with the size below.
                i.hold_layout(by.layout)?;
                if by.drop_set_id {
                    i.drop_set_id_bits();
                }
            }
        }
        // The blocks' device writes go out together: one wait for the device per request,
        // not one per block. A block's new run is mapped, and its old one freed, only once
        // its data is on the device.
        let mut direct = Vec::new();
        let mut moved = Vec::new();
        let mut at = 0usize;
        let mut gathered = Ok(());
        while at < data.len() {
            let (block, off, _) = keys.locate(offset + at as u64, bs);
            let n = (bs as usize - off).min(data.len() - at);
            let run = self.block_run(local.as_ref(), ino, block);
            let w = BlockWrite {
                run,
                off,
                data: &data[at..at + n],
                grows: keys == BlockKeys::File,
            };
            match self
                .data
                .write_block(&self.zone, w, &mut direct, &mut self.tx)
            {
                Ok(new) if new != run => moved.push((block, run, new)),
                Ok(_) => {}
                Err(e) => {
                    // The blocks before this one are written all the same.
                    gathered = Err(e);
                    break;
                }
            }
            at += n;
        }
        if let Err(e) = self.data.write_direct(&self.zone, &direct) {
            // No block maps pages its data may not have reached: the new runs go back.
            for (_, _, new) in moved {
                self.data.free(new, &mut self.tx);
            }
            return Err(e);
        }
        for (block, old, new) in moved {
            self.data.free(old, &mut self.tx);
            match local.as_mut() {
                Some(i) if block == 0 => i.first_block = new,
                _ => self.data.map(ino, block, new, &mut self.tx),
            }
        }
        gathered?;
        if let (Some(slot), Some(mut i)) = (slot, local) {
            i.size = i.size.max(offset + data.len() as u64);
            i.mtime_ns = now_ns();
            i.ctime_ns = i.mtime_ns;
            self.log_inode(slot, &i)?;
        }
        Ok(())
    }

    /// Reads into `buf` from `offset` of file `ino`; returns the bytes read. With the inode
    /// here, reading stops at the file size; otherwise the whole buffer is filled from the
    /// blocks here (holes read zeros).
    pub fn read(&mut self, ino: u64, offset: u64, buf: &mut [u8]) -> Result<usize, PStoreError> {
        self.read_keyed(ino, offset, buf, BlockKeys::File)
    }

    /// Reads into `buf` from `offset` of file `ino`, out of the extent that starts at
    /// `origin` ([`Self::write_extent`]), as [`Self::read`] reads file blocks: bytes the
    /// extent does not hold read as zeros.
    pub fn read_extent(
        &mut self,
        ino: u64,
        origin: u64,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, PStoreError> {
        self.read_keyed(ino, offset, buf, extent_keys(origin, offset)?)
    }

    fn read_keyed(
        &mut self,
        ino: u64,
        offset: u64,
        buf: &mut [u8],
        keys: BlockKeys,
    ) -> Result<usize, PStoreError> {
        self.settle()?;
        let bs = self.block_bytes();
        let local = match self.inode_offset(ino) {
            Some(_) => Some(self.getattr(ino)?),
            None => None,
        };
        let len = match &local {
            Some(i) => i.size.saturating_sub(offset).min(buf.len() as u64) as usize,
            None => buf.len(),
        };
        // The pages of every block are read together, as a write's are written.
        let mut plan = ReadPlan::default();
        let mut at = 0usize;
        while at < len {
            let (block, off, _) = keys.locate(offset + at as u64, bs);
            let n = (bs as usize - off).min(len - at);
            let run = self.block_run(local.as_ref(), ino, block);
            self.data.plan_block(run, off, n, at, &mut plan);
            at += n;
        }
        self.data.read_planned(&self.zone, &plan, &mut buf[..len])?;
        Ok(len)
    }

    /// The pages of file block 0 of a local inode (clients read small files from there).
    pub fn first_block(&mut self, ino: u64) -> Result<PageRun, PStoreError> {
        self.settle()?;
        Ok(self.getattr(ino)?.first_block)
    }

    /// Sets the size of `ino` (whose inode is here): blocks past it are freed and the tail of
    /// the last block zeroed.
    pub fn truncate(&mut self, ino: u64, size: u64) -> Result<(), PStoreError> {
        self.settle()?;
        let slot = self.inode_offset(ino).ok_or(PStoreError::NoInode(ino))?;
        self.truncate_blocks(ino, size)?;
        let mut i = self.getattr(ino)?;
        if size < i.size {
            let keep = size.min(self.block_bytes()) as usize;
            self.run(200, |s| {
                let run = s
                    .data
                    .shrink_block(&s.zone, i.first_block, keep, &mut s.tx)?;
                i.first_block = run;
                Ok(())
            })?;
        }
        i.size = size;
        i.mtime_ns = now_ns();
        i.ctime_ns = i.mtime_ns;
        self.run(MAX_RECORD, |s| s.log_inode(slot, &i))
    }

    /// Cuts the hashtable blocks of `ino` held here to `size` bytes (for files whose inode is
    /// elsewhere the server calls this on every worker holding blocks).
    pub fn truncate_blocks(&mut self, ino: u64, size: u64) -> Result<(), PStoreError> {
        self.settle()?;
        let bs = self.block_bytes();
        self.drop_blocks(ino, size)?;
        // The blocks the cut goes through: the file block holding byte `size`, and extents
        // that hold it.
        let cut: Vec<(u64, u64)> = self
            .data
            .blocks_of(ino)
            .into_iter()
            .map(|b| (b, BlockKeys::start_of(b, bs)))
            .filter(|&(_, start)| start < size && size - start < bs)
            .collect();
        for (block, start) in cut {
            let run = self.data.run_of(ino, block);
            let keep = (size - start) as usize;
            self.run(200, |s| {
                let new = s.data.shrink_block(&s.zone, run, keep, &mut s.tx)?;
                if new != run {
                    s.data.map(ino, block, new, &mut s.tx);
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Occupancy and counters (a create answered under [`Self::defer_settle`] counts once
    /// the next call or settle has put it in place).
    pub fn stats(&self) -> PStoreStats {
        PStoreStats {
            inodes: self.inos.len() as u64,
            inode_slots: self.sb.inode_slots,
            inode_table_room: self.inos.capacity() as u64,
            dentries: self.cart.len() as u64,
            blocks: self.data.blocks.len() as u64,
            pages_used: self.data.pages.used(),
            data_pages: self.sb.data_pages,
            staged_pages: self.data.staged_pages() as u64,
            wal_bytes: self.wal.len(),
            orphans: self.orphans.len() as u64,
            checkpoints: self.checkpoints,
            checkpoint_stops: self.checkpoint_stops,
            checkpoint_writing: self.ckpt_job.is_some(),
            checkpoint_pieces_in_flight: self
                .ckpt_job
                .as_ref()
                .map_or(0, CheckpointJob::pieces_in_flight),
            icache: self.icache.stats(),
            transfers: self.zone.transfers(),
        }
    }

    /// The dentry index (for memory accounting).
    pub fn cart(&self) -> &Cart {
        &self.cart
    }

    /// Whether data page `page` is allocated (for consistency checks).
    pub fn page_allocated(&self, page: u64) -> bool {
        self.data.pages.is_used(page)
    }

    /// Every (ino, block, run) mapping here, block 0 of local inodes included (for consistency
    /// checks and tools).
    pub fn mappings(&mut self) -> Result<Vec<(u64, u64, PageRun)>, PStoreError> {
        self.settle()?;
        let mut v: Vec<_> = self.data.blocks.iter().collect();
        let inos: Vec<u64> = self.inos.inos().collect();
        for ino in inos {
            let run = self.getattr(ino)?.first_block;
            if !run.is_none() {
                v.push((ino, 0, run));
            }
        }
        v.sort_unstable_by_key(|e| (e.0, e.1));
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_nvme::device::{DeviceConfig, NvmeDevice};

    /// A transaction whose records outgrow the log room its operation reserved (an estimate
    /// that fell short) stops the store: its changes are in memory only, so nothing more is
    /// answered or written, and a restart recovers what the log held before it.
    #[test]
    fn a_transaction_that_outgrows_its_log_room_halts_the_store_until_a_restart() {
        const REG: u32 = 0o100644;
        let ssd = crate::server::storage::swarm(16 << 20, 2).unwrap();
        let dev = Arc::new(NvmeDevice::open(ssd.clone(), DeviceConfig::default()).unwrap());
        let mut cfg = PStoreConfig::new(0, 4096);
        cfg.inode_slots = 256;
        cfg.max_dentries = 256;
        cfg.wal_pages = 16;
        cfg.ino_base = 1000;
        let mut s = PStore::format(dev.clone(), &cfg).unwrap();
        s.defer_settle(true).unwrap();
        let kept = s.create(1, b"kept", REG, 0, 0, Default::default()).unwrap();
        s.fsync().unwrap();
        let answered = s
            .create(1, b"answered", REG, 0, 0, Default::default())
            .unwrap();
        // Settling the create answered above logs its records and these, more than the log
        // holds.
        let big = Record::DentryPut {
            pino: 1,
            name: vec![b'x'; 255],
            value: kept.ino,
        };
        let mut one = Vec::new();
        big.encode(&mut one);
        let room = (cfg.wal_pages as usize * PAGE) / one.len() + 1;
        s.tx.extend(std::iter::repeat_n(big, room));
        s.unsettled = true;
        assert!(matches!(s.settle(), Err(PStoreError::Halted)));
        assert!(s.is_halted());
        let e = s.create(1, b"after", REG, 0, 0, Default::default());
        assert!(matches!(e, Err(PStoreError::Halted)), "{e:?}");
        assert!(matches!(s.getattr(kept.ino), Err(PStoreError::Halted)));
        assert!(matches!(s.fsync(), Err(PStoreError::Halted)));
        assert!(matches!(s.checkpoint(), Err(PStoreError::Halted)));
        assert!(!s.pump().unwrap(), "a halted store has nothing in flight");
        assert!(PStoreError::Halted.to_string().contains("restart"));
        drop(s);
        ssd.power_cut().unwrap();
        let mut r = PStore::open(dev, &cfg).unwrap();
        assert_eq!(r.lookup(1, b"kept"), Some(kept.ino));
        assert_eq!(r.getattr(kept.ino).unwrap().mode, REG);
        assert_eq!(
            r.lookup(1, b"answered"),
            None,
            "{answered:?} was never logged"
        );
        assert_eq!(r.lookup(1, b"after"), None);
        assert!(r.create(1, b"after", REG, 0, 0, Default::default()).is_ok());
    }

    #[test]
    fn a_checkpoint_that_the_log_outruns_is_encoded_eight_pieces_a_pump() {
        assert_eq!(piece_bytes(CHECKPOINT_STEP, 0), 32 << 10);
        assert_eq!(piece_bytes(CHECKPOINT_STEP, CATCH_UP_LOG), 32 << 10);
        assert_eq!(piece_bytes(CHECKPOINT_STEP, CATCH_UP_LOG + 1), 256 << 10);
        assert_eq!(piece_bytes(4096, 1 << 20), 32 << 10);
    }
}
