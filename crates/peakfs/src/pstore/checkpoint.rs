//! Checkpoints of a PStore's tables, encoded and written between requests.
//!
//! A checkpoint is taken at a log position P. Encoding it whole when it is taken held the
//! worker 25-38 ms at a million inodes (an H200 host), so it is encoded a piece at a time
//! instead, while requests go on changing the tables between the pieces: a *fuzzy*
//! checkpoint, as ARIES takes them. Recovery loads it and replays the log from P. That gives
//! the state of the crash because of two properties:
//!
//! - **Each walk visits every key that stays once.** Inodes are walked in slot order, files'
//!   blocks in the order of the files listed when the checkpoint was taken, and dentries
//!   directory by directory in name order, each piece resuming after the last key written
//!   ([`super::cart::Cart::for_each_in_dir`]). A key that no request changes after P is
//!   written once, with its value at P. A key changed after P may be written with any value it
//!   had, or not at all.
//! - **Every change after P is in the log, and replaying it is idempotent.** The records set
//!   or clear a key (a bitmap run, a hashtable entry, a dentry, an inode image), so replaying
//!   them from P in order leaves every changed key with its last value, whatever the
//!   checkpoint held for it. Replay forces bitmap bits rather than refusing a bit already in
//!   the state asked for, and an orphan's inode is checked once the replay is done.
//!
//! The checkpoint is made current only once the log holds every change that its pieces saw
//! (the log is committed first) and every inode block dirty at P is on the device (an Icache
//! write-behind started at P).
//!
//! Layout, little-endian words; each section that is walked ends with [`END`]:
//!
//! ```text
//! magic, next ino (at P)
//! inodes:   (ino, slot)*                          END
//! blocks:   (ino, block, first page, pages: u32)* END
//! dentries: (pino, name length: u8, name, value)* END
//! inode bitmap words, page bitmap words
//! orphans:  count, ino*
//! ```

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use super::bitmap::Bitmap;
use super::cart::Cart;
use super::table::{BlockTable, InodeIndex};
use super::wal;
use super::{PAGE, PStoreError};

/// First word of a checkpoint.
pub const CKPT_MAGIC: u64 = u64::from_le_bytes(*b"PSTCKPT2");
/// Ends each walked section (never an ino or a directory's ino).
const END: u64 = u64::MAX;
/// Units of encoding work (a unit: an inode slot looked at, or a byte encoded) that looking
/// up one file's blocks or one directory's dentries counts for: a piece of a checkpoint stops
/// after as much work as it may encode bytes, so that stretches of empty slots or of files
/// without blocks left cannot hold the worker longer than a full piece.
const VISIT_WORK: usize = 64;

/// The tables a checkpoint holds.
pub(super) struct Tables<'a> {
    pub next_ino: u64,
    pub inodes: &'a InodeIndex,
    pub blocks: &'a BlockTable,
    pub cart: &'a Cart,
    pub islots: &'a Bitmap,
    pub pages: &'a Bitmap,
    pub orphans: &'a BTreeSet<u64>,
}

/// Where the encoding is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Section {
    /// Next slot to look at.
    Inodes(u64),
    /// Next file of the list to write.
    Blocks(usize),
    /// Directory of the list, and the last name written in it.
    Dentries(usize, Option<Vec<u8>>),
    /// Next word of the inode bitmap, then of the page bitmap.
    Bitmaps(usize),
    Orphans,
    Done,
}

/// A checkpoint being encoded, a piece at a time.
#[derive(Debug)]
pub(super) struct Encoder {
    section: Section,
    /// Files with mapped blocks when the checkpoint was taken.
    files: Vec<u64>,
    /// Directories with dentries when the checkpoint was taken.
    dirs: Vec<u64>,
    /// Encoded bytes not yet handed out.
    buf: Vec<u8>,
    /// Bytes encoded in all, and their CRC-32C.
    len: u64,
    crc: u32,
}

fn put(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}

impl Encoder {
    /// Starts a checkpoint of `t` as of now (its header, and the files and directories to
    /// walk); `buf` is a buffer to reuse.
    pub fn new(t: &Tables<'_>, mut buf: Vec<u8>) -> Self {
        buf.clear();
        put(&mut buf, CKPT_MAGIC);
        put(&mut buf, t.next_ino);
        Self {
            section: Section::Inodes(0),
            files: t.blocks.files(),
            dirs: t.cart.dirs(),
            buf,
            len: 0,
            crc: 0,
        }
    }

    /// Whether every section is encoded.
    pub fn is_done(&self) -> bool {
        self.section == Section::Done
    }

    /// Encodes on until `want` bytes (a page at least) wait in the buffer, `want` units of
    /// work are done ([`VISIT_WORK`]), or the checkpoint is done. Each call makes progress.
    pub fn encode(&mut self, t: &Tables<'_>, want: usize) {
        let want = want.max(PAGE);
        let mut work = 0;
        while self.buf.len() < want && work < want && !self.is_done() {
            let before = self.buf.len();
            let visited = self.piece(t, want, want - work);
            work += self.buf.len() - before + visited;
        }
    }

    /// One piece of the current section, doing about `budget` units of work at most; returns
    /// the work of the keys it visited (the bytes it encoded aside).
    fn piece(&mut self, t: &Tables<'_>, want: usize, budget: usize) -> usize {
        let b = &mut self.buf;
        let mut visited = 0;
        self.section = match std::mem::replace(&mut self.section, Section::Done) {
            Section::Inodes(mut slot) => {
                let slots = t.inodes.slots();
                // Whole pages of the slot array at a time: a stretch of free slots costs little,
                // but not nothing (a million of them, 2-4 ms on an H200 host).
                let stop = slot.saturating_add(4096).min(slots);
                let first = slot;
                while slot < stop && b.len() < want {
                    if let Some(ino) = t.inodes.ino_at(slot) {
                        put(b, ino);
                        put(b, slot);
                    }
                    slot += 1;
                }
                visited = (slot - first) as usize;
                if slot < slots {
                    Section::Inodes(slot)
                } else {
                    put(b, END);
                    Section::Blocks(0)
                }
            }
            Section::Blocks(mut i) => {
                // A file listed at P may have no block left: looking it up is work too.
                while i < self.files.len() && b.len() < want && visited < budget {
                    visited += VISIT_WORK;
                    let ino = self.files[i];
                    for (block, run) in t.blocks.file_blocks(ino) {
                        put(b, ino);
                        put(b, block);
                        put(b, run.start);
                        b.extend_from_slice(&run.packed_pages().to_le_bytes());
                    }
                    i += 1;
                }
                if i < self.files.len() {
                    Section::Blocks(i)
                } else {
                    put(b, END);
                    Section::Dentries(0, None)
                }
            }
            Section::Dentries(i, after) => match self.dirs.get(i) {
                None => {
                    put(b, END);
                    Section::Bitmaps(0)
                }
                Some(&pino) => {
                    visited = VISIT_WORK;
                    let mut last = None;
                    t.cart
                        .for_each_in_dir(pino, after.as_deref(), |name, value| {
                            put(b, pino);
                            b.push(name.len() as u8);
                            b.extend_from_slice(name);
                            put(b, value);
                            if b.len() < want {
                                ControlFlow::Continue(())
                            } else {
                                last = Some(name.to_vec());
                                ControlFlow::Break(())
                            }
                        });
                    match last {
                        Some(name) => Section::Dentries(i, Some(name)),
                        None => Section::Dentries(i + 1, None),
                    }
                }
            },
            Section::Bitmaps(mut w) => {
                let (islots, pages) = (t.islots.words(), t.pages.words());
                let total = islots.len() + pages.len();
                let stop = total.min(w + (want.saturating_sub(b.len()) / 8).max(1));
                while w < stop {
                    put(
                        b,
                        if w < islots.len() {
                            islots[w]
                        } else {
                            pages[w - islots.len()]
                        },
                    );
                    w += 1;
                }
                if w < total {
                    Section::Bitmaps(w)
                } else {
                    Section::Orphans
                }
            }
            Section::Orphans => {
                put(b, t.orphans.len() as u64);
                for &ino in t.orphans {
                    put(b, ino);
                }
                Section::Done
            }
            Section::Done => Section::Done,
        };
        visited
    }

    /// The whole pages encoded so far (all that is left, padded to a page, once done), taken
    /// out of the buffer by `write`; returns what `write` returned.
    pub fn take_pages<E>(&mut self, write: impl FnOnce(&[u8]) -> Result<(), E>) -> Result<(), E> {
        let n = self.seal_pages();
        if n == 0 {
            return Ok(());
        }
        let r = write(&self.buf[..n]);
        self.buf.drain(..n);
        r
    }

    /// [`Self::take_pages`] into `piece` (its old bytes dropped), for a write that outlives
    /// this call: the buffers trade places, so only the part of a page left over is copied.
    /// Returns the bytes taken.
    pub fn take_pages_into(&mut self, piece: &mut Vec<u8>) -> usize {
        let n = self.seal_pages();
        piece.clear();
        if n == 0 {
            return 0;
        }
        std::mem::swap(&mut self.buf, piece);
        self.buf.extend_from_slice(&piece[n..]);
        piece.truncate(n);
        n
    }

    /// Counts the bytes about to be taken (into the length and the CRC) and returns how many:
    /// the whole pages, or once done all of it, padded.
    fn seal_pages(&mut self) -> usize {
        if self.is_done() {
            let whole = self.buf.len();
            self.account(whole);
            self.buf.resize(whole.div_ceil(PAGE) * PAGE, 0);
            self.buf.len()
        } else {
            let n = self.buf.len() / PAGE * PAGE;
            self.account(n);
            n
        }
    }

    fn account(&mut self, n: usize) {
        self.crc = common::hash::crc32c_append(self.crc, &self.buf[..n]);
        self.len += n as u64;
    }

    /// Bytes of the checkpoint (unpadded) and their CRC-32C, once done and taken.
    pub fn len_and_crc(&self) -> (u64, u32) {
        (self.len, self.crc)
    }

    /// Bytes taken so far and waiting, padded to pages.
    pub fn pages_bytes(&self) -> u64 {
        self.len + (self.buf.len().div_ceil(PAGE) * PAGE) as u64
    }

    /// The buffer, for the next checkpoint.
    pub fn into_buf(self) -> Vec<u8> {
        self.buf
    }
}

/// The tables of a checkpoint.
#[derive(Debug)]
pub struct Loaded {
    /// The next ino to hand out, as of the checkpoint's position.
    pub next_ino: u64,
    /// Inode hashtable.
    pub inodes: InodeIndex,
    /// Block hashtable.
    pub blocks: BlockTable,
    /// Dentries.
    pub cart: Cart,
    /// Inode bitmap.
    pub islots: Bitmap,
    /// Page bitmap.
    pub pages: Bitmap,
    /// Orphans (inodes without links, not yet freed).
    pub orphans: BTreeSet<u64>,
}

/// The geometry a checkpoint is checked against (its zone's).
#[derive(Debug, Clone, Copy)]
pub struct Geometry {
    /// Inode slots.
    pub inode_slots: u64,
    /// Data pages.
    pub data_pages: u64,
    /// Pages of a file block.
    pub block_pages: u32,
}

/// Decodes checkpoint `b` (its CRC already checked). Nothing is checked across tables:
/// replay may still change any of them (an orphan's inode is checked after it).
pub fn load(b: &[u8], g: &Geometry) -> Result<Loaded, PStoreError> {
    let bad = |what: &str| PStoreError::Corrupt(format!("checkpoint: {what}"));
    let mut r = wal::Reader::new(b);
    let u64_ = |r: &mut wal::Reader<'_>| r.u64().map_err(|_| bad("truncated"));
    if u64_(&mut r)? != CKPT_MAGIC {
        return Err(bad("bad magic"));
    }
    let next_ino = u64_(&mut r)?;
    let mut inodes = InodeIndex::new(g.inode_slots);
    loop {
        let ino = u64_(&mut r)?;
        if ino == END {
            break;
        }
        let slot = u64_(&mut r)?;
        if ino == 0 || slot >= g.inode_slots {
            return Err(bad("inode slot out of range"));
        }
        inodes.insert(ino, slot);
    }
    let mut blocks = BlockTable::default();
    loop {
        let ino = u64_(&mut r)?;
        if ino == END {
            break;
        }
        let block = u64_(&mut r)?;
        let run = r.run().map_err(|_| bad("truncated"))?;
        if run.end() > g.block_pages {
            return Err(bad("a block run past the end of its block"));
        }
        blocks.insert(ino, block, run);
    }
    let mut cart = Cart::new();
    loop {
        let pino = u64_(&mut r)?;
        if pino == END {
            break;
        }
        let name = r.name().map_err(|_| bad("truncated"))?;
        let value = u64_(&mut r)?;
        cart.insert(pino, &name, value)?;
    }
    let words = |bits: u64, r: &mut wal::Reader<'_>| -> Result<Bitmap, PStoreError> {
        let w = (0..bits.div_ceil(64))
            .map(|_| u64_(r))
            .collect::<Result<Vec<_>, _>>()?;
        Bitmap::from_words(bits, w).ok_or_else(|| bad("bitmap"))
    };
    let islots = words(g.inode_slots, &mut r)?;
    let pages = words(g.data_pages, &mut r)?;
    let mut orphans = BTreeSet::new();
    for _ in 0..u64_(&mut r)? {
        orphans.insert(u64_(&mut r)?);
    }
    if !r.is_done() {
        return Err(bad("bytes after the orphans"));
    }
    Ok(Loaded {
        next_ino,
        inodes,
        blocks,
        cart,
        islots,
        pages,
        orphans,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pstore::table::PageRun;
    use proptest::prelude::*;

    const GEOMETRY: Geometry = Geometry {
        inode_slots: 300,
        data_pages: 1000,
        block_pages: 16,
    };

    /// Tables filled from `entries`: (ino, slot) inodes, each with some blocks; dentries named
    /// after them in a few directories; an orphan or two.
    fn tables(entries: &[(u64, u64, u8)]) -> Loaded {
        let mut t = Loaded {
            next_ino: 7777,
            inodes: InodeIndex::new(GEOMETRY.inode_slots),
            blocks: BlockTable::default(),
            cart: Cart::new(),
            islots: Bitmap::new(GEOMETRY.inode_slots),
            pages: Bitmap::new(GEOMETRY.data_pages),
            orphans: BTreeSet::new(),
        };
        for &(ino, slot, blocks) in entries {
            if t.inodes.get(ino).is_some() || t.inodes.ino_at(slot).is_some() {
                continue;
            }
            t.inodes.insert(ino, slot);
            t.islots.set_run(slot, 1).unwrap();
            for b in 0..u64::from(blocks % 4) {
                let start = (ino * 4 + b) % GEOMETRY.data_pages;
                t.blocks
                    .insert(ino, b, PageRun::new(start, 1 + (blocks as u32 % 3)));
                let _ = t.pages.set_run(start, 1);
            }
            let name = format!("mdtest.{}.{}", ino % 7, ino);
            t.cart.insert(ino % 3, name.as_bytes(), ino).unwrap();
            if blocks % 5 == 0 {
                t.orphans.insert(ino);
            }
        }
        t
    }

    impl Loaded {
        fn tables(&self) -> Tables<'_> {
            Tables {
                next_ino: self.next_ino,
                inodes: &self.inodes,
                blocks: &self.blocks,
                cart: &self.cart,
                islots: &self.islots,
                pages: &self.pages,
                orphans: &self.orphans,
            }
        }
    }

    /// Encodes `t` in pieces of `piece` bytes; returns the bytes taken and the length and
    /// CRC the encoder reports. `into`: each piece is taken with [`Encoder::take_pages_into`]
    /// into one of two buffers in turn (as a write in flight keeps one), else with
    /// [`Encoder::take_pages`].
    fn encode_taking(t: &Loaded, piece: usize, into: bool) -> (Vec<u8>, (u64, u32)) {
        let src = t.tables();
        let mut enc = Encoder::new(&src, Vec::new());
        let mut out = Vec::new();
        let mut pieces = [Vec::new(), Vec::new()];
        let mut turn = 0;
        loop {
            enc.encode(&src, piece);
            if into {
                let n = enc.take_pages_into(&mut pieces[turn]);
                assert_eq!((n % PAGE, n), (0, pieces[turn].len()), "whole pages");
                out.extend_from_slice(&pieces[turn]);
                turn = 1 - turn;
            } else {
                enc.take_pages(|b| {
                    assert_eq!(b.len() % PAGE, 0, "whole pages");
                    out.extend_from_slice(b);
                    Ok::<(), ()>(())
                })
                .unwrap();
            }
            if enc.is_done() {
                break;
            }
        }
        (out, enc.len_and_crc())
    }

    fn encode(t: &Loaded, piece: usize) -> (Vec<u8>, (u64, u32)) {
        encode_taking(t, piece, false)
    }

    #[test]
    fn a_piece_over_empty_slots_or_files_without_blocks_stops_after_its_share_of_work() {
        // A million slots with one inode at the end, and 50,000 files listed with blocks
        // whose blocks are gone by the time the walk reaches them.
        let mut t = tables(&[]);
        t.inodes = InodeIndex::new(1 << 20);
        t.inodes.insert(42, (1 << 20) - 1);
        let src = t.tables();
        let mut enc = Encoder::new(&src, Vec::new());
        enc.files = (1..=50_000).collect();
        let want = 8 * PAGE;
        let mut pieces = 0u32;
        while matches!(enc.section, Section::Inodes(_) | Section::Blocks(_)) {
            let before = enc.section.clone();
            enc.encode(&src, want);
            enc.take_pages(|_| Ok::<(), ()>(())).unwrap();
            pieces += 1;
            // Within a section, a piece moves on by about `want` units: slots, or
            // `VISIT_WORK` per file.
            match (before, &enc.section) {
                (Section::Inodes(a), Section::Inodes(b)) => {
                    assert!(b - a <= (want + 4096) as u64, "{a} -> {b}")
                }
                (Section::Blocks(a), Section::Blocks(b)) => {
                    assert!((b - a) * VISIT_WORK <= want + VISIT_WORK, "{a} -> {b}")
                }
                _ => {}
            }
        }
        // 2^20 slots in pieces of 32 Ki slots, 50,000 files in pieces of 512.
        assert!(pieces >= 32 + 97, "{pieces} pieces");
    }

    /// A checkpoint's inodes, blocks and dentries, each sorted.
    type Entries = (
        Vec<(u64, u64)>,
        Vec<(u64, u64, PageRun)>,
        Vec<(u64, Vec<u8>, u64)>,
    );

    fn entries(t: &Loaded) -> Entries {
        let mut inodes: Vec<_> = t
            .inodes
            .inos()
            .map(|i| (i, t.inodes.get(i).unwrap()))
            .collect();
        inodes.sort_unstable();
        let mut blocks: Vec<_> = t.blocks.iter().collect();
        blocks.sort_unstable_by_key(|e| (e.0, e.1));
        let mut dentries = Vec::new();
        let mut dirs = t.cart.dirs();
        dirs.sort_unstable();
        for p in dirs {
            for (n, v) in t.cart.iter_dir(p) {
                dentries.push((p, n, v));
            }
        }
        (inodes, blocks, dentries)
    }

    proptest! {
        /// Whatever the size of its pieces, a checkpoint of tables that do not change loads
        /// back as the same tables, and its length and CRC are those of its bytes.
        /// Pieces taken into buffers of their own (for writes that go on after the take)
        /// are the same bytes, length and CRC as pieces written from the encoder's buffer.
        #[test]
        fn pieces_taken_into_their_own_buffers_are_the_pieces_written_in_place(
            e in prop::collection::vec((1u64..5000, 0u64..300, any::<u8>()), 0..200),
            piece in 1usize..20_000,
        ) {
            let t = tables(&e);
            prop_assert_eq!(encode_taking(&t, piece, true), encode(&t, piece));
        }

        #[test]
        fn a_checkpoint_encoded_in_pieces_of_any_size_loads_back_the_same_tables(
            e in prop::collection::vec((1u64..5000, 0u64..300, any::<u8>()), 0..200),
            piece in 1usize..20_000,
        ) {
            let t = tables(&e);
            let (bytes, (len, crc)) = encode(&t, piece);
            prop_assert_eq!(bytes.len() as u64, len.div_ceil(PAGE as u64) * PAGE as u64);
            let bytes = &bytes[..len as usize];
            prop_assert_eq!(common::hash::crc32c(bytes), crc);
            let back = load(bytes, &GEOMETRY).unwrap();
            prop_assert_eq!(back.next_ino, t.next_ino);
            prop_assert_eq!(entries(&back), entries(&t));
            prop_assert_eq!(back.islots.words(), t.islots.words());
            prop_assert_eq!(back.pages.words(), t.pages.words());
            prop_assert_eq!(&back.orphans, &t.orphans);
            prop_assert_eq!(encode(&t, 1 << 20).0, encode(&t, piece).0, "the same bytes");
        }

        /// Damaged or cut checkpoints (recovery checks their CRC first, but a bug or a
        /// collision must not crash it) load or fail with an error, never a panic.
        #[test]
        fn a_damaged_checkpoint_fails_to_load_without_a_panic(
            e in prop::collection::vec((1u64..5000, 0u64..300, any::<u8>()), 0..50),
            flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let t = tables(&e);
            let (mut bytes, (len, _)) = encode(&t, 4096);
            bytes.truncate(len as usize);
            for (at, x) in flips {
                let i = at.index(bytes.len());
                bytes[i] ^= x;
            }
            let cut = cut.index(bytes.len() + 1);
            let _ = load(&bytes[..cut], &GEOMETRY);
        }
    }
}
