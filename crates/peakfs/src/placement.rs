//! Flexible metadata and data distribution (PeakFS §III-C1): the characteristic value λ of a
//! request and its route, shared by clients (to pick a server) and servers (to pick a worker).
//!
//! A request with characteristic value λ goes to server `λ mod servers` and is processed by
//! worker `λ / servers mod workers` there (§III-C1). Every slice (one worker of one server) has a
//! *slot* number `worker * servers + server`, which is a λ that routes to that slice; inode
//! numbers carry the slot of the slice that holds the inode in their high bits (from
//! [`SLOT_SHIFT`] on), so an ino alone tells where its inode lives.
//!
//! Metadata (§III-C1, "Metadata distribution based on directory sizes"):
//! - a **regular directory** `d` keeps the dentries of all its children, and the inodes of its
//!   sub-files, on the slice of its own inode (`λ = home(d)`). The paper sends the inode of a
//!   sub-directory to the server `hash(d, name)` names; here, by default (MKINODE `near`), it
//!   goes to the creating client's *home slice*: client number `i` (handed out by the master,
//!   consecutive over the clients that connect) is served on every server by worker `i mod T`
//!   (§III-B; its HELLO asks for it) and is at home on that worker's slice of server
//!   `(i / T) mod servers`, so the worker that receives the MKINODE keeps the inode, and any
//!   `servers × T` consecutive clients have homes on different slices. The dentry in `d`
//!   holds the ino, so nothing needs to recompute the choice. This is ours, not the paper's:
//!   a directory is mostly used by the client that made it (mdtest's per-process directories,
//!   per-rank output directories); then every operation on its children runs to completion on
//!   the thread that receives it, without the hop to another worker and back (§III-B counts
//!   two forwards for a request whose slice is elsewhere), and N clients' directories lie on
//!   N different slices (with the name's hash, several land on one slice by chance and its
//!   clients queue there while other slices idle: 8 processes on 4 x 2 slices had 2-4 of them
//!   on the busiest slice, and the phase took as long as the busiest slice's). A tree one
//!   client makes for many others lies on one slice; such trees want the hash (`--spread-dirs`:
//!   `ClientOptions::dirs_near_client` off, server and worker by `hash(d, name)`) or bigdirs;
//! - a **bigdir** `b` shards each child (dentry and inode together) by `λ = hash(b, name)`.
//!
//! Data (§III-C1, "Data distribution based on sharing modes"):
//! - **block-based** (default): block `k` of file `i` at `λ = hash(i, k)`, except block 0,
//!   which stays with the inode (`λ = home(i)`), so small files need no extra hop;
//! - **file-based**: every block of file `i` at one λ: `i`'s sequence number plus a hash of the
//!   slot that made it. The paper hashes the file; files made one after another on one slice
//!   (the N-N files of a job, created together in one directory) go here to consecutive
//!   slices instead, one file per slice as far as there are slices, where a hash puts two or
//!   three on some slices and none on others (8 files over 8 slices: 5.25 slices used on
//!   average), and the busiest slice sets the job's pace (IOR N-N on 4 x 2 slices on 16
//!   cores: its fastest process took 0.20 s, its slowest 0.58 s);
//! - **I/O-based**: each I/O owns its pages. The file's first write fixes its I/O unit `u`
//!   (that write's length, at least a page); bytes `[k·u, (k+1)·u)` are one extent at
//!   `λ = hash(i, k·u)`. Equal-size, non-overlapping I/O (what the strategy is for) makes
//!   every I/O an extent of its own; any other I/O is cut at the units, and reads of any
//!   offset and length find every byte.

use common::hash::{crc32c, mix64};

/// An ino's slot starts at this bit; the bits below are the slice's sequence number.
pub const SLOT_SHIFT: u32 = 48;
/// The most slices (servers × workers) a cluster can have (inos stay below 2^63, the largest
/// dentry value of PStore's cART).
pub const MAX_SLOTS: u64 = 1 << 15;
/// Mask of the sequence bits of an ino.
pub const SEQ_MASK: u64 = (1 << SLOT_SHIFT) - 1;
/// The root directory: ino 1, on slot 0 (server 0, worker 0).
pub const ROOT_INO: u64 = 1;
/// Default file block size of the block-based distribution (PStore's default block).
pub const DEFAULT_BLOCK_SIZE: u32 = 64 << 10;

/// Errors of placement parameters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// servers × workers must be in 1..=32768
    #[error("cluster of {servers} servers × {workers} workers does not fit 1..=32768 slots")]
    BadShape {
        /// servers in the cluster
        servers: u32,
        /// workers per server
        workers: u32,
    },
    /// a distribution hint byte no strategy has
    #[error("invalid distribution hint byte {0:#04x}")]
    BadHint(u8),
    /// block size must be a power of two between 4 KiB and 64 MiB
    #[error("invalid block size {0} (power of two in 4096..=67108864)")]
    BadBlockSize(u32),
}

/// How a file's data is spread over slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DataDist {
    /// By hash of (ino, block); block 0 with the inode.
    #[default]
    Block,
    /// The whole file on one slice (N-N patterns).
    File,
    /// Each I/O at its own place (equal-size, non-overlapping I/O).
    Io,
}

/// The distribution hints of a file or directory (kept in its inode; a directory's data hint
/// is the default of its new files).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Hint {
    /// Data distribution.
    pub data: DataDist,
    /// The directory shards its children by (pino, name).
    pub bigdir: bool,
}

impl DataDist {
    /// One byte: 0 block, 1 file, 2 I/O.
    pub fn to_byte(self) -> u8 {
        match self {
            DataDist::Block => 0,
            DataDist::File => 1,
            DataDist::Io => 2,
        }
    }

    /// Parses [`DataDist::to_byte`]'s encoding.
    pub fn from_byte(b: u8) -> Result<Self, PlacementError> {
        match b {
            0 => Ok(DataDist::Block),
            1 => Ok(DataDist::File),
            2 => Ok(DataDist::Io),
            _ => Err(PlacementError::BadHint(b)),
        }
    }

    /// Its hint word (`block`, `file`, `io`).
    pub fn word(self) -> &'static str {
        match self {
            DataDist::Block => "block",
            DataDist::File => "file",
            DataDist::Io => "io",
        }
    }
}

impl Hint {
    /// One byte: data distribution in bits 0..4 ([`DataDist::to_byte`]), bigdir in bit 4.
    pub fn to_byte(self) -> u8 {
        self.data.to_byte() | (u8::from(self.bigdir) << 4)
    }

    /// Parses [`Hint::to_byte`]'s encoding.
    pub fn from_byte(b: u8) -> Result<Self, PlacementError> {
        if b >> 5 != 0 {
            return Err(PlacementError::BadHint(b));
        }
        let data = DataDist::from_byte(b & 0xF).map_err(|_| PlacementError::BadHint(b))?;
        Ok(Self {
            data,
            bigdir: b & 0x10 != 0,
        })
    }

    /// Its words as [`Hint::parse`] reads them: the data distribution, then `bigdir` for a
    /// bigdir (e.g. `"io,bigdir"`).
    pub fn words(self) -> String {
        let data = self.data.word();
        if self.bigdir {
            format!("{data},bigdir")
        } else {
            data.to_string()
        }
    }

    /// Parses a hint as written in configs and `PEAKFS_DIST` ([`HintWords::parse`]); what
    /// the words leave out is the default.
    pub fn parse(text: &str) -> Option<Self> {
        let words = HintWords::parse(text).ok()?;
        Some(Self {
            data: words.data.unwrap_or_default(),
            bigdir: words.bigdir.unwrap_or(false),
        })
    }
}

/// The parts of a hint that its words give, each `None` when left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HintWords {
    /// `block`, `file` or `io`.
    pub data: Option<DataDist>,
    /// `bigdir` (true) or `dir` (false).
    pub bigdir: Option<bool>,
}

impl HintWords {
    /// Parses a comma-separated list of `block`, `file`, `io`, `bigdir`, `dir` (e.g.
    /// `"bigdir,file"`; a later word wins); an unknown word is the error.
    pub fn parse(text: &str) -> Result<Self, &str> {
        let mut words = Self::default();
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "block" => words.data = Some(DataDist::Block),
                "file" => words.data = Some(DataDist::File),
                "io" => words.data = Some(DataDist::Io),
                "bigdir" => words.bigdir = Some(true),
                "dir" => words.bigdir = Some(false),
                unknown => return Err(unknown),
            }
        }
        Ok(words)
    }
}

/// Where a λ goes: a server and one of its workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// Server index (the master's stable order).
    pub server: u32,
    /// Worker (processing thread) on that server.
    pub worker: u32,
}

/// The shape of a cluster: the λ routing function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    servers: u32,
    workers: u32,
    block_size: u32,
}

impl Layout {
    /// A cluster of `servers` servers with `workers` workers each and `block_size`-byte blocks.
    pub fn new(servers: u32, workers: u32, block_size: u32) -> Result<Self, PlacementError> {
        let slots = u64::from(servers) * u64::from(workers);
        if slots == 0 || slots > MAX_SLOTS {
            return Err(PlacementError::BadShape { servers, workers });
        }
        if !block_size.is_power_of_two() || !(4096..=64 << 20).contains(&block_size) {
            return Err(PlacementError::BadBlockSize(block_size));
        }
        Ok(Self {
            servers,
            workers,
            block_size,
        })
    }

    /// Servers in the cluster.
    pub fn servers(&self) -> u32 {
        self.servers
    }

    /// Workers per server.
    pub fn workers(&self) -> u32 {
        self.workers
    }

    /// Bytes per file block.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Slices in the cluster (servers × workers).
    pub fn slots(&self) -> u32 {
        self.servers * self.workers
    }

    /// The route of `lambda`: server `λ mod servers`, worker `λ / servers mod workers`.
    pub fn route(&self, lambda: u64) -> Route {
        let s = u64::from(self.servers);
        Route {
            server: (lambda % s) as u32,
            worker: ((lambda / s) % u64::from(self.workers)) as u32,
        }
    }

    /// The slot (a λ routing there) of worker `worker` on server `server`.
    pub fn slot(&self, server: u32, worker: u32) -> u16 {
        // In range for server < servers and worker < workers (checked shape: ≤ 2^15 slots).
        ((u64::from(worker) * u64::from(self.servers) + u64::from(server)) % MAX_SLOTS) as u16
    }

    /// λ of the metadata of entry `name` of directory `pino` (create, lookup, unlink, link).
    pub fn dentry_lambda(&self, pino: u64, parent_bigdir: bool, name: &[u8]) -> u64 {
        if parent_bigdir {
            name_lambda(pino, name)
        } else {
            home_lambda(pino)
        }
    }

    /// λ of the data block holding byte `offset` of file `ino` under `dist`.
    pub fn data_lambda(&self, ino: u64, dist: DataDist, offset: u64) -> u64 {
        match dist {
            DataDist::Block => match offset / u64::from(self.block_size) {
                0 => home_lambda(ino),
                block => mix64(mix64(ino) ^ block),
            },
            DataDist::File => (ino & SEQ_MASK).wrapping_add(mix64(ino >> SLOT_SHIFT)),
            DataDist::Io => mix64(mix64(ino) ^ offset.rotate_left(32)),
        }
    }

    /// Splits the byte range `[offset, offset + len)` of a file into the pieces that go to one
    /// λ each: block boundaries for block-based data, one piece otherwise.
    pub fn split(&self, ino: u64, dist: DataDist, offset: u64, len: u64) -> Vec<Piece> {
        let mut pieces = Vec::new();
        let end = offset.saturating_add(len);
        let mut at = offset;
        while at < end {
            let next = match dist {
                DataDist::Block => (at / u64::from(self.block_size) + 1)
                    .saturating_mul(u64::from(self.block_size))
                    .min(end),
                DataDist::File | DataDist::Io => end,
            };
            pieces.push(Piece {
                lambda: self.data_lambda(ino, dist, at),
                offset: at,
                len: next - at,
            });
            at = next;
        }
        pieces
    }
}

/// One piece of a data request: the bytes `[offset, offset + len)` of a file, sent to `lambda`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Where the piece goes.
    pub lambda: u64,
    /// File offset.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

/// λ of the slice that holds inode `ino` (its slot bits).
pub fn home_lambda(ino: u64) -> u64 {
    ino >> SLOT_SHIFT
}

/// The ino with sequence number `seq` (below 2^48) allocated on slot `slot`.
pub fn make_ino(slot: u16, seq: u64) -> u64 {
    (u64::from(slot) << SLOT_SHIFT) | (seq & SEQ_MASK)
}

/// λ of `hash(pino, name)`: a bigdir's child, or the inode of a regular directory's sub-dir.
pub fn name_lambda(pino: u64, name: &[u8]) -> u64 {
    mix64(mix64(pino) ^ u64::from(crc32c(name)) ^ ((name.len() as u64) << 32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn slot_routes_to_its_own_server_and_worker() {
        let l = Layout::new(3, 5, DEFAULT_BLOCK_SIZE).unwrap();
        for server in 0..3 {
            for worker in 0..5 {
                let slot = l.slot(server, worker);
                assert_eq!(l.route(u64::from(slot)), Route { server, worker });
                assert_eq!(
                    l.route(home_lambda(make_ino(slot, 77))),
                    Route { server, worker }
                );
            }
        }
        assert_eq!(
            l.route(home_lambda(ROOT_INO)),
            Route {
                server: 0,
                worker: 0
            }
        );
    }

    #[test]
    fn layout_rejects_bad_shapes_and_block_sizes() {
        assert!(Layout::new(0, 4, 4096).is_err());
        assert!(Layout::new(300, 300, 4096).is_err());
        assert!(Layout::new(256, 256, 4096).is_err());
        assert!(Layout::new(2, 2, 5000).is_err());
        assert!(Layout::new(2, 2, 1024).is_err());
        assert!(Layout::new(128, 256, 4096).is_ok());
    }

    #[test]
    fn block_zero_stays_with_the_inode_and_others_spread() {
        let l = Layout::new(2, 4, 4096).unwrap();
        let ino = make_ino(l.slot(1, 3), 9);
        assert_eq!(
            l.route(l.data_lambda(ino, DataDist::Block, 4095)),
            Route {
                server: 1,
                worker: 3
            }
        );
        let mut seen = std::collections::HashSet::new();
        for b in 1..200u64 {
            seen.insert(l.route(l.data_lambda(ino, DataDist::Block, b * 4096)));
        }
        assert_eq!(seen.len(), 8, "blocks reach every slice");
        let f: std::collections::HashSet<_> = (0..50u64)
            .map(|b| l.data_lambda(ino, DataDist::File, b * 4096))
            .collect();
        assert_eq!(f.len(), 1, "file-based keeps one λ");
    }

    #[test]
    fn files_made_one_after_another_on_a_slice_spread_one_per_slice() {
        for (servers, workers) in [(4, 2), (3, 5), (1, 1), (6, 60)] {
            let l = Layout::new(servers, workers, 4096).unwrap();
            let slots = (servers * workers) as u64;
            for maker in [l.slot(0, 0), l.slot(servers - 1, workers - 1)] {
                for first in [2u64, 1000, 1 << 40] {
                    let used: std::collections::HashSet<_> = (first..first + slots)
                        .map(|seq| l.route(l.data_lambda(make_ino(maker, seq), DataDist::File, 0)))
                        .collect();
                    assert_eq!(
                        used.len() as u64,
                        slots,
                        "{servers} x {workers}, made on slot {maker} from {first}"
                    );
                }
            }
        }
    }

    #[test]
    fn bigdir_children_spread_and_regular_children_stay() {
        let l = Layout::new(2, 2, 4096).unwrap();
        let mut big = std::collections::HashSet::new();
        for i in 0..100 {
            let name = format!("file.{i}");
            big.insert(l.route(l.dentry_lambda(ROOT_INO, true, name.as_bytes())));
            assert_eq!(
                l.dentry_lambda(ROOT_INO, false, name.as_bytes()),
                home_lambda(ROOT_INO)
            );
        }
        assert_eq!(big.len(), 4);
    }

    #[test]
    fn hint_parses_words() {
        assert_eq!(
            Hint::parse("bigdir,file"),
            Some(Hint {
                data: DataDist::File,
                bigdir: true
            })
        );
        assert_eq!(Hint::parse(""), Some(Hint::default()));
        assert_eq!(Hint::parse("huge"), None);
    }

    #[test]
    fn hint_words_parse_back_to_the_hint() {
        for b in [0x00, 0x01, 0x02, 0x10, 0x11, 0x12] {
            let h = Hint::from_byte(b).unwrap();
            assert_eq!(Hint::parse(&h.words()), Some(h), "{}", h.words());
        }
        assert_eq!(
            Hint {
                data: DataDist::Io,
                bigdir: true
            }
            .words(),
            "io,bigdir"
        );
    }

    proptest! {
        #[test]
        fn hint_byte_round_trips_and_garbage_is_an_error(b in any::<u8>()) {
            match Hint::from_byte(b) {
                Ok(h) => prop_assert_eq!(h.to_byte(), b),
                Err(PlacementError::BadHint(x)) => prop_assert_eq!(x, b),
                Err(e) => prop_assert!(false, "{e}"),
            }
        }

        #[test]
        fn split_pieces_cover_the_range_without_crossing_blocks(
            off in 0u64..1 << 40, len in 0u64..1 << 24, dist in 0u8..3,
        ) {
            let l = Layout::new(2, 3, 65536).unwrap();
            let dist = Hint::from_byte(dist).unwrap().data;
            let pieces = l.split(make_ino(3, 42), dist, off, len);
            let mut at = off;
            for p in &pieces {
                prop_assert_eq!(p.offset, at);
                prop_assert!(p.len > 0);
                if dist == DataDist::Block {
                    prop_assert_eq!(p.offset / 65536, (p.offset + p.len - 1) / 65536);
                }
                at += p.len;
            }
            prop_assert_eq!(at, off + len);
        }
    }
}
