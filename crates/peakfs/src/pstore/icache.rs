//! Icache: PMeta's inode cache (PeakFS §III-C2, "Local inode cache", Fig. 8).
//!
//! A fixed number of cache blocks, each holding the `K` inodes of one page of the inode zone
//! (block `offset / K`), indexed by a hashtable. Each block moves through the paper's state
//! machine: *free* → *read* (filling from the SSD) → *ready*; a modification makes it *dirty*;
//! write-back puts it in *write* and then back to *ready*. With no free block, the least
//! recently used *ready* block is freed. When dirty blocks exceed the dirty ratio, the least
//! recently used dirty blocks are written back, down to half the ratio, after one sync of the
//! log (one device flush per batch, not per block). A miss also prefetches the next block in
//! the same read when a block can be spared for it, since inodes of a directory are allocated
//! together. A block that holds no inode yet is not read at all ([`Icache::install_empty`]).
//!
//! Reads are synchronous, so *read* lasts for the duration of one device call. A write-back
//! over the dirty limit goes *behind* when the I/O can ([`InodeIo::start_write_behind`]): the
//! blocks stay in *write* while the owner goes on, each block's bytes are taken from the cache
//! as its command goes out, and [`Icache::poll_write_behind`] returns them to *ready* once the
//! device has them. A block changed meanwhile is *dirty* again and goes in a later batch; the
//! first change copies it as it was, and that copy is what the batch sends (its log covers
//! the block as it was at the start, not the change).
//! One batch is in flight at a time; when the dirty blocks reach twice the limit anyway, the
//! next write waits for it. Otherwise, and for eviction and [`Icache::flush`], the blocks of a
//! batch go to the device in one call, their writes in flight together.

use super::table::U64Map;
use super::zone::KeyedPages;

/// Where cache blocks come from and go to.
pub trait InodeIo {
    /// The error of the I/O.
    type Error;
    /// Reads `buf.len() / page` consecutive inode blocks starting at `block`.
    fn read_blocks(&mut self, block: u64, buf: &mut [u8]) -> Result<(), Self::Error>;
    /// Writes inode blocks, each `(block, bytes)` (called after
    /// [`InodeIo::before_write_back`]); on an error any of them may have been written.
    fn write_blocks(&mut self, blocks: &[(u64, &[u8])]) -> Result<(), Self::Error>;
    /// Makes the log durable before any inode reaches its home location (the WAL rule).
    /// `sent` gives the blocks of a write-behind in flight (see
    /// [`InodeIo::start_write_behind`]), which this may wait for.
    fn before_write_back(&mut self, sent: &dyn KeyedPages) -> Result<(), Self::Error>;
    /// Starts writing the log, then (once it is durable) inode blocks `blocks` without
    /// waiting. Each block's bytes are taken from `sent` (keyed by block) when its write goes
    /// out, in this call or a later one given `sent` again: they are the bytes it had now.
    /// `Ok(false)`: this I/O cannot, the caller writes them synchronously.
    fn start_write_behind(
        &mut self,
        _blocks: &[u64],
        _sent: &dyn KeyedPages,
    ) -> Result<bool, Self::Error> {
        Ok(false)
    }
    /// The result of the started write-behind once it is complete (waiting for it with
    /// `wait`); `None` while it runs, and when none was started. `sent` as in
    /// [`InodeIo::start_write_behind`].
    fn poll_write_behind(
        &mut self,
        _wait: bool,
        _sent: &dyn KeyedPages,
    ) -> Option<Result<(), Self::Error>> {
        None
    }
    /// Whether a write-behind that is not the Icache's (the log written ahead) is in flight,
    /// which a write-back over the limit would wait for.
    fn busy_behind(&self) -> bool {
        false
    }
}

/// The state of an Icache block (Fig. 8(b)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Holds nothing.
    Free,
    /// Being filled from the SSD.
    Read,
    /// Holds the SSD's copy.
    Ready,
    /// Holds changes not yet written.
    Dirty,
    /// Being written to the SSD.
    Write,
}

/// Counters of the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IcacheStats {
    /// Accesses served from memory.
    pub hits: u64,
    /// Accesses that read from the SSD.
    pub misses: u64,
    /// Blocks read ahead of use.
    pub prefetched: u64,
    /// Blocks written back.
    pub write_backs: u64,
    /// Blocks copied because they changed while their write-back was in flight.
    pub copied_in_flight: u64,
}

const NIL: u32 = u32::MAX;

struct Entry {
    block: u64,
    state: State,
    data: Box<[u8]>,
    prev: u32,
    next: u32,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The page itself is noise in a debug dump.
        f.debug_struct("Entry")
            .field("block", &self.block)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// The inode cache of one worker.
#[derive(Debug)]
pub struct Icache {
    page: usize,
    blocks_total: u64,
    entries: Vec<Entry>,
    index: U64Map<u32>,
    free: Vec<u32>,
    /// Most recently used end.
    head: u32,
    /// Least recently used end.
    tail: u32,
    dirty: usize,
    max_dirty: usize,
    /// The blocks of the write-behind in flight.
    writing: Vec<u32>,
    /// Blocks of the write-behind in flight that changed since it started, as they were
    /// then: what it sends for them.
    as_started: U64Map<Box<[u8]>>,
    /// Buffers for `as_started`, kept between write-behinds.
    spare: Vec<Box<[u8]>>,
    /// Write-behinds started so far: the one in flight, if any, has this number.
    behinds: u64,
    /// The number of the last write-behind that failed (0: none).
    behind_failed: u64,
    stats: IcacheStats,
}

impl Icache {
    /// `capacity` blocks of `page` bytes over an inode zone of `blocks_total` blocks (no more
    /// than the zone has, and two at least); at most `dirty_ratio` of them dirty (at least one).
    pub fn new(capacity: usize, page: usize, blocks_total: u64, dirty_ratio: f64) -> Self {
        let capacity = capacity
            .min(usize::try_from(blocks_total).unwrap_or(usize::MAX))
            .max(2);
        let entries = (0..capacity)
            .map(|_| Entry {
                block: 0,
                state: State::Free,
                data: vec![0u8; page].into_boxed_slice(),
                prev: NIL,
                next: NIL,
            })
            .collect();
        Self {
            page,
            blocks_total,
            entries,
            // Sized for every block it can hold: it never grows (and rehashes) while serving.
            index: U64Map::with_capacity_and_hasher(capacity, Default::default()),
            free: (0..capacity as u32).rev().collect(),
            head: NIL,
            tail: NIL,
            dirty: 0,
            max_dirty: ((capacity as f64 * dirty_ratio) as usize).max(1),
            writing: Vec::new(),
            as_started: U64Map::default(),
            spare: Vec::new(),
            behinds: 0,
            behind_failed: 0,
            stats: IcacheStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> IcacheStats {
        self.stats
    }

    /// Dirty blocks now.
    pub fn dirty_blocks(&self) -> usize {
        self.dirty
    }

    /// The state of the block caching inode block `block` (`Free`: not cached).
    pub fn state_of(&self, block: u64) -> State {
        self.index
            .get(&block)
            .map_or(State::Free, |&i| self.entries[i as usize].state)
    }

    fn unlink(&mut self, i: u32) {
        let (p, n) = (self.entries[i as usize].prev, self.entries[i as usize].next);
        if p == NIL {
            self.head = n;
        } else {
            self.entries[p as usize].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.entries[n as usize].prev = p;
        }
    }

    fn push_front(&mut self, i: u32) {
        self.entries[i as usize].prev = NIL;
        self.entries[i as usize].next = self.head;
        if self.head != NIL {
            self.entries[self.head as usize].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    fn touch(&mut self, i: u32) {
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
    }

    /// A free block, evicting the least recently used ready one (writing back dirty ones if
    /// nothing else is left). `pinned` is never evicted.
    fn take_free<I: InodeIo>(&mut self, io: &mut I, pinned: u64) -> Result<u32, I::Error> {
        if let Some(i) = self.free.pop() {
            return Ok(i);
        }
        let mut cur = self.tail;
        while cur != NIL {
            let e = &self.entries[cur as usize];
            if e.state == State::Ready && e.block != pinned {
                break;
            }
            cur = e.prev;
        }
        if cur == NIL && !self.writing.is_empty() {
            // Nothing to evict but blocks on their way to the device: they will be ready.
            self.poll_write_behind(io, true)?;
            return self.take_free(io, pinned);
        }
        if cur == NIL {
            // Everything is dirty: write back the least recently used one.
            cur = self.tail;
            while cur != NIL && self.entries[cur as usize].block == pinned {
                cur = self.entries[cur as usize].prev;
            }
            if cur == NIL {
                cur = self.tail;
            }
            self.write_back(io, cur)?;
        }
        self.unlink(cur);
        let e = &mut self.entries[cur as usize];
        self.index.remove(&e.block);
        e.state = State::Free;
        Ok(cur)
    }

    fn write_back<I: InodeIo>(&mut self, io: &mut I, i: u32) -> Result<(), I::Error> {
        self.write_back_all(io, &[i])
    }

    /// `(inode block, bytes)` of cache entries `entries`.
    fn block_bytes(&self, entries: &[u32]) -> Vec<(u64, &[u8])> {
        entries
            .iter()
            .map(|&i| {
                let e = &self.entries[i as usize];
                (e.block, &e.data[..])
            })
            .collect()
    }

    /// Writes back the dirty ones of `blocks` after one sync of the log.
    fn write_back_all<I: InodeIo>(&mut self, io: &mut I, blocks: &[u32]) -> Result<(), I::Error> {
        if !blocks
            .iter()
            .any(|&i| self.entries[i as usize].state == State::Dirty)
        {
            return Ok(());
        }
        io.before_write_back(&*self)?;
        let dirty: Vec<u32> = blocks
            .iter()
            .copied()
            .filter(|&i| self.entries[i as usize].state == State::Dirty)
            .collect();
        for &i in &dirty {
            self.entries[i as usize].state = State::Write;
        }
        let r = io.write_blocks(&self.block_bytes(&dirty));
        // A failed batch keeps its blocks dirty, to be retried.
        let state = if r.is_ok() {
            State::Ready
        } else {
            State::Dirty
        };
        for &i in &dirty {
            self.entries[i as usize].state = state;
        }
        r?;
        self.dirty -= dirty.len();
        self.stats.write_backs += dirty.len() as u64;
        Ok(())
    }

    /// Caches inode block `block`, which holds no inode, as zeros without reading it (its
    /// slots are all free, so its old bytes are never looked at).
    pub fn install_empty<I: InodeIo>(&mut self, io: &mut I, block: u64) -> Result<(), I::Error> {
        if self.index.contains_key(&block) {
            return Ok(());
        }
        let i = self.take_free(io, u64::MAX)?;
        let zeros = vec![0u8; self.page];
        self.install(i, block, &zeros);
        Ok(())
    }

    /// The cache block holding inode block `block`, reading it (and prefetching the next) on
    /// a miss.
    fn load<I: InodeIo>(&mut self, io: &mut I, block: u64) -> Result<u32, I::Error> {
        if let Some(&i) = self.index.get(&block) {
            self.stats.hits += 1;
            self.touch(i);
            return Ok(i);
        }
        self.stats.misses += 1;
        let i = self.take_free(io, u64::MAX)?;
        let ahead = block + 1;
        let prefetch =
            ahead < self.blocks_total && !self.index.contains_key(&ahead) && !self.free.is_empty();
        let n = if prefetch { 2 } else { 1 };
        let mut buf = vec![0u8; n * self.page];
        self.entries[i as usize].state = State::Read;
        if let Err(e) = io.read_blocks(block, &mut buf) {
            self.entries[i as usize].state = State::Free;
            self.free.push(i);
            return Err(e);
        }
        self.install(i, block, &buf[..self.page]);
        if prefetch && let Some(j) = self.free.pop() {
            self.install(j, ahead, &buf[self.page..]);
            // The prefetched block is less recent than the one asked for.
            self.unlink(j);
            self.push_front(j);
            self.touch(i);
            self.stats.prefetched += 1;
        }
        Ok(i)
    }

    fn install(&mut self, i: u32, block: u64, data: &[u8]) {
        let e = &mut self.entries[i as usize];
        e.block = block;
        e.data.copy_from_slice(data);
        e.state = State::Ready;
        self.index.insert(block, i);
        self.push_front(i);
    }

    /// Copies `out.len()` bytes at byte `offset` of inode block `block` into `out`.
    pub fn read<I: InodeIo>(
        &mut self,
        io: &mut I,
        block: u64,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), I::Error> {
        let i = self.load(io, block)?;
        out.copy_from_slice(&self.entries[i as usize].data[offset..offset + out.len()]);
        Ok(())
    }

    /// Writes `data` at byte `offset` of inode block `block`; the block becomes dirty, and the
    /// least recently used dirty block is written back if the dirty ratio is exceeded.
    pub fn write<I: InodeIo>(
        &mut self,
        io: &mut I,
        block: u64,
        offset: usize,
        data: &[u8],
    ) -> Result<(), I::Error> {
        let i = self.load(io, block)?;
        let e = &mut self.entries[i as usize];
        if e.state == State::Write {
            // The write-behind in flight sends the block as it was when it started.
            let mut copy = self
                .spare
                .pop()
                .unwrap_or_else(|| vec![0u8; self.page].into_boxed_slice());
            copy.copy_from_slice(&e.data);
            self.as_started.insert(block, copy);
            self.stats.copied_in_flight += 1;
        }
        e.data[offset..offset + data.len()].copy_from_slice(data);
        if e.state != State::Dirty {
            e.state = State::Dirty;
            self.dirty += 1;
        }
        if self.dirty > self.max_dirty {
            self.write_back_over_limit(io)?;
        }
        Ok(())
    }

    /// Writes back the least recently used dirty blocks, down to half the limit: behind if
    /// the I/O can, after the batch in flight, its own or the I/O's (if the dirty blocks
    /// reached twice the limit meanwhile, that one is waited for; below, the next write tries
    /// again).
    fn write_back_over_limit<I: InodeIo>(&mut self, io: &mut I) -> Result<(), I::Error> {
        let wait = self.dirty >= 2 * self.max_dirty;
        if !self.writing.is_empty() && !self.poll_write_behind(io, wait)? {
            return Ok(());
        }
        // Another batch of the I/O in flight is waited for alike.
        if self.writing.is_empty() && !wait && io.busy_behind() {
            return Ok(());
        }
        let keep = self.max_dirty / 2;
        let mut victims = Vec::new();
        let mut cur = self.tail;
        while cur != NIL && self.dirty - victims.len() > keep {
            if self.entries[cur as usize].state == State::Dirty {
                victims.push(cur);
            }
            cur = self.entries[cur as usize].prev;
        }
        self.write_back_behind(io, victims)
    }

    /// Writes back dirty entries `dirty` behind if the I/O can (they become the write-behind
    /// in flight, none being in flight), else at once.
    fn write_back_behind<I: InodeIo>(
        &mut self,
        io: &mut I,
        mut dirty: Vec<u32>,
    ) -> Result<(), I::Error> {
        // In block order: neighbours join one command.
        dirty.sort_unstable_by_key(|&i| self.entries[i as usize].block);
        let blocks: Vec<u64> = dirty
            .iter()
            .map(|&i| self.entries[i as usize].block)
            .collect();
        if !io.start_write_behind(&blocks, &*self)? {
            return self.write_back_all(io, &dirty);
        }
        for &i in &dirty {
            self.entries[i as usize].state = State::Write;
        }
        self.dirty -= dirty.len();
        self.writing = dirty;
        self.behinds += 1;
        Ok(())
    }

    /// The entries in state dirty.
    fn dirty_entries(&self) -> Vec<u32> {
        (0..self.entries.len() as u32)
            .filter(|&i| self.entries[i as usize].state == State::Dirty)
            .collect()
    }

    /// Starts writing back every block dirty now, behind if the I/O can (once the
    /// write-behind in flight is done), else at once. Returns a mark for
    /// [`Self::wait_written`].
    pub fn write_back_dirty<I: InodeIo>(&mut self, io: &mut I) -> Result<u64, I::Error> {
        self.poll_write_behind(io, true)?;
        let mark = self.behinds + 1;
        let dirty = self.dirty_entries();
        if !dirty.is_empty() {
            self.write_back_behind(io, dirty)?;
        }
        Ok(mark)
    }

    /// Returns once every block that was dirty at [`Self::write_back_dirty`]'s `mark` is on
    /// the SSD as it was then or newer: waits for that write-behind, and if it (or a later
    /// one) failed, writes back every dirty block now.
    pub fn wait_written<I: InodeIo>(&mut self, io: &mut I, mark: u64) -> Result<(), I::Error> {
        if self.behinds == mark && !self.writing.is_empty() {
            // A failure is recorded in `behind_failed`; the flush below retries its blocks and
            // returns the error if that fails too.
            let _ = self.poll_write_behind(io, true);
        }
        if self.behind_failed >= mark {
            self.flush(io)?;
        }
        Ok(())
    }

    /// Moves the write-behind in flight on (waiting for it with `wait`); its blocks that did
    /// not change meanwhile become *ready* once it completed (*dirty* again if it failed, to
    /// be retried, and the failure is returned). Returns whether it is still in flight.
    pub fn poll_write_behind<I: InodeIo>(
        &mut self,
        io: &mut I,
        wait: bool,
    ) -> Result<bool, I::Error> {
        if self.writing.is_empty() {
            return Ok(false);
        }
        let Some(r) = io.poll_write_behind(wait, &*self) else {
            return Ok(true);
        };
        let copies = std::mem::take(&mut self.as_started);
        self.spare.extend(copies.into_values());
        let next = if r.is_ok() {
            State::Ready
        } else {
            self.behind_failed = self.behinds;
            State::Dirty
        };
        for i in std::mem::take(&mut self.writing) {
            let e = &mut self.entries[i as usize];
            if e.state == State::Write {
                e.state = next;
                if next == State::Dirty {
                    self.dirty += 1;
                } else {
                    self.stats.write_backs += 1;
                }
            }
        }
        r.map(|()| false)
    }

    /// Writes back every dirty block (after the write-behind in flight).
    pub fn flush<I: InodeIo>(&mut self, io: &mut I) -> Result<(), I::Error> {
        self.poll_write_behind(io, true)?;
        let dirty = self.dirty_entries();
        self.write_back_all(io, &dirty)
    }
}

/// The bytes a write-behind in flight sends for an inode block: its copy as the write-behind
/// started if it changed since, else the cached block (unchanged since). Only the blocks of
/// the write-behind are asked for.
impl KeyedPages for Icache {
    fn page(&self, block: u64) -> Option<&[u8]> {
        match self.as_started.get(&block) {
            Some(copy) => Some(copy),
            None => self
                .index
                .get(&block)
                .map(|&i| &self.entries[i as usize].data[..]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An inode zone in memory that counts I/O and checks the WAL rule.
    #[derive(Default)]
    struct Mem {
        blocks: Vec<Vec<u8>>,
        reads: usize,
        writes: Vec<u64>,
        log_synced: bool,
        syncs: usize,
        /// Calls of `write_blocks`.
        batches: usize,
        /// `write_blocks` fails.
        fail_writes: bool,
    }

    impl InodeIo for Mem {
        type Error = ();
        fn read_blocks(&mut self, block: u64, buf: &mut [u8]) -> Result<(), ()> {
            self.reads += 1;
            for (k, chunk) in buf.chunks_mut(64).enumerate() {
                chunk.copy_from_slice(&self.blocks[block as usize + k]);
            }
            Ok(())
        }
        fn write_blocks(&mut self, blocks: &[(u64, &[u8])]) -> Result<(), ()> {
            assert!(self.log_synced, "inode written before its log");
            self.batches += 1;
            if self.fail_writes {
                return Err(());
            }
            for &(block, buf) in blocks {
                self.writes.push(block);
                self.blocks[block as usize].copy_from_slice(buf);
            }
            Ok(())
        }
        fn before_write_back(&mut self, _sent: &dyn KeyedPages) -> Result<(), ()> {
            self.log_synced = true;
            self.syncs += 1;
            Ok(())
        }
    }

    /// [`Mem`] whose write-backs go behind: the blocks land when `land` is set, with the bytes
    /// the cache gives for them then.
    #[derive(Default)]
    struct Behind {
        mem: Mem,
        staged: Option<Vec<u64>>,
        land: bool,
        fail: bool,
        /// Another batch of the I/O (the log written ahead) is in flight.
        busy: bool,
    }

    impl InodeIo for Behind {
        type Error = ();
        fn read_blocks(&mut self, block: u64, buf: &mut [u8]) -> Result<(), ()> {
            self.mem.read_blocks(block, buf)
        }
        fn write_blocks(&mut self, blocks: &[(u64, &[u8])]) -> Result<(), ()> {
            assert!(
                self.staged.is_none(),
                "a synchronous write beside one in flight"
            );
            self.mem.write_blocks(blocks)
        }
        fn before_write_back(&mut self, sent: &dyn KeyedPages) -> Result<(), ()> {
            self.mem.before_write_back(sent)
        }
        fn busy_behind(&self) -> bool {
            self.busy
        }
        fn start_write_behind(&mut self, blocks: &[u64], _: &dyn KeyedPages) -> Result<bool, ()> {
            assert!(self.staged.is_none(), "one write-behind at a time");
            // The other batch is waited for first.
            self.busy = false;
            self.staged = Some(blocks.to_vec());
            Ok(true)
        }
        fn poll_write_behind(
            &mut self,
            wait: bool,
            sent: &dyn KeyedPages,
        ) -> Option<Result<(), ()>> {
            if !(self.land || wait) {
                return None;
            }
            let staged = self.staged.take()?;
            if self.fail {
                return Some(Err(()));
            }
            for block in staged {
                self.mem.writes.push(block);
                let data = sent.page(block).expect("a block of the write-behind");
                self.mem.blocks[block as usize].copy_from_slice(data);
            }
            Some(Ok(()))
        }
    }

    #[test]
    fn a_write_back_over_the_limit_waits_for_another_batch_in_flight_until_twice_the_limit() {
        let mut io = Behind {
            mem: zone(100),
            busy: true,
            ..Behind::default()
        };
        // Two dirty blocks allowed.
        let mut c = Icache::new(10, 64, 100, 0.2);
        for blk in [0, 10, 20] {
            c.write(&mut io, blk, 0, &[0xEE]).unwrap();
        }
        assert!(
            io.staged.is_none(),
            "over the limit, behind the other batch"
        );
        assert_eq!(c.dirty_blocks(), 3);
        // The other batch landed: the next write over the limit starts one, down to half the
        // limit.
        io.busy = false;
        c.write(&mut io, 30, 0, &[0xEE]).unwrap();
        assert_eq!(io.staged.take(), Some(vec![0, 10, 20]));
        io.mem.log_synced = true;
        // With the other batch in flight again, four dirty blocks (twice the limit) go anyway.
        let mut c = Icache::new(10, 64, 100, 0.2);
        io.busy = true;
        for blk in [0, 10, 20, 30] {
            c.write(&mut io, blk, 0, &[0xEE]).unwrap();
        }
        assert_eq!(io.staged, Some(vec![0, 10, 20]));
        assert!(!io.busy);
    }

    #[test]
    fn a_write_back_behind_keeps_its_blocks_in_write_until_the_device_has_them() {
        let mut io = Behind {
            mem: zone(100),
            ..Behind::default()
        };
        let mut c = Icache::new(10, 64, 100, 0.4);
        for blk in [0, 10, 20, 30, 40] {
            c.write(&mut io, blk, 0, &[0xEE]).unwrap();
        }
        assert_eq!(c.state_of(0), State::Write);
        assert_eq!(
            (c.state_of(20), c.state_of(30)),
            (State::Write, State::Dirty)
        );
        assert_eq!(c.dirty_blocks(), 2, "blocks in write are not dirty");
        assert!(io.mem.writes.is_empty());
        // Changed in flight (twice): dirty again, and the write-behind, which takes the bytes
        // only as it sends them, gets the block as it was when it started, copied once.
        c.write(&mut io, 10, 1, &[0x66]).unwrap();
        c.write(&mut io, 10, 1, &[0x77]).unwrap();
        assert_eq!((c.state_of(10), c.dirty_blocks()), (State::Dirty, 3));
        assert_eq!(c.stats().copied_in_flight, 1);
        assert!(
            c.poll_write_behind(&mut io, false).unwrap(),
            "still in flight"
        );
        io.land = true;
        assert!(!c.poll_write_behind(&mut io, false).unwrap());
        assert_eq!(io.mem.writes, vec![0, 10, 20], "in block order");
        assert_eq!((io.mem.blocks[10][0], io.mem.blocks[10][1]), (0xEE, 10));
        assert_eq!((io.mem.blocks[20][0], io.mem.blocks[20][1]), (0xEE, 20));
        assert!(
            c.as_started.is_empty(),
            "the copy goes with its write-behind"
        );
        assert_eq!(
            (c.state_of(0), c.state_of(10)),
            (State::Ready, State::Dirty)
        );
        assert_eq!(
            c.stats().write_backs,
            2,
            "the changed block is counted when written"
        );
        c.flush(&mut io).unwrap();
        assert_eq!(io.mem.blocks[10][1], 0x77);
        assert_eq!(c.dirty_blocks(), 0);
    }

    #[test]
    fn a_failed_write_back_behind_makes_its_blocks_dirty_and_a_full_cache_waits_for_one() {
        let mut io = Behind {
            mem: zone(100),
            fail: true,
            ..Behind::default()
        };
        let mut c = Icache::new(4, 64, 100, 0.25);
        c.write(&mut io, 1, 0, &[1]).unwrap();
        c.write(&mut io, 2, 0, &[2]).unwrap();
        assert_eq!((c.state_of(1), c.state_of(2)), (State::Write, State::Write));
        io.land = true;
        assert!(c.poll_write_behind(&mut io, false).is_err());
        assert_eq!((c.state_of(1), c.dirty_blocks()), (State::Dirty, 2));
        io.fail = false;
        io.land = false;
        // Two dirty blocks with one allowed: the next write sends both, then two more
        // blocks fill the cache and a miss must wait for the write in flight.
        c.write(&mut io, 3, 0, &[3]).unwrap();
        assert_eq!(c.state_of(3), State::Write);
        c.write(&mut io, 4, 0, &[4]).unwrap();
        let mut b = [0u8; 1];
        c.read(&mut io, 50, 0, &mut b).unwrap();
        assert_eq!(b[0], 50);
        // Written, then ready, and the least recently used of them evicted for block 50.
        assert_eq!((io.mem.blocks[1][0], io.mem.blocks[2][0]), (1, 2));
        assert_eq!((c.state_of(1), c.state_of(2)), (State::Free, State::Ready));
    }

    /// A checkpoint's write-back: every block dirty when it starts goes out behind, in one
    /// write-behind; waiting for its mark waits for that one (changes made since stay dirty
    /// and are not written), and after a failed one writes the dirty blocks at once.
    #[test]
    fn waiting_for_a_write_back_of_every_dirty_block_waits_for_it_and_retries_a_failure() {
        for fail in [false, true] {
            let mut io = Behind {
                mem: zone(100),
                ..Behind::default()
            };
            let mut c = Icache::new(10, 64, 100, 0.5);
            for blk in [7, 3, 5] {
                c.write(&mut io, blk, 0, &[0xEE]).unwrap();
            }
            let mark = c.write_back_dirty(&mut io).unwrap();
            assert_eq!(
                io.staged,
                Some(vec![3, 5, 7]),
                "all dirty blocks, in block order"
            );
            assert_eq!(c.dirty_blocks(), 0);
            // Changed after the mark: not needed by it.
            c.write(&mut io, 5, 1, &[0x55]).unwrap();
            io.fail = fail;
            c.wait_written(&mut io, mark).unwrap();
            assert!(io.staged.is_none(), "the write-behind was waited for");
            for blk in [3, 5, 7] {
                assert_eq!(io.mem.blocks[blk][0], 0xEE, "block {blk} on the device");
            }
            // Sent as it was at the mark; after a failure, the retry sends it as it is now.
            assert_eq!(io.mem.blocks[5][1], if fail { 0x55 } else { 5 });
            assert_eq!(c.dirty_blocks(), usize::from(!fail));
        }
        // Nothing dirty: nothing to wait for.
        let mut io = Behind {
            mem: zone(10),
            ..Behind::default()
        };
        let mut c = Icache::new(4, 64, 10, 0.5);
        let mark = c.write_back_dirty(&mut io).unwrap();
        assert!(io.staged.is_none());
        c.wait_written(&mut io, mark).unwrap();
    }

    fn zone(n: usize) -> Mem {
        Mem {
            blocks: (0..n).map(|b| vec![b as u8; 64]).collect(),
            ..Mem::default()
        }
    }

    #[test]
    fn a_miss_reads_the_block_and_prefetches_the_next() {
        let mut io = zone(10);
        let mut c = Icache::new(4, 64, 10, 0.5);
        let mut b = [0u8; 4];
        c.read(&mut io, 3, 8, &mut b).unwrap();
        assert_eq!(b, [3; 4]);
        assert_eq!(c.state_of(4), State::Ready, "block 4 prefetched");
        c.read(&mut io, 4, 0, &mut b).unwrap();
        assert_eq!((io.reads, c.stats().hits, c.stats().prefetched), (1, 1, 1));
    }

    #[test]
    fn lru_evicts_the_least_recently_used_ready_block() {
        let mut io = zone(100);
        let mut c = Icache::new(3, 64, 100, 0.5);
        let mut b = [0u8; 1];
        for blk in [10, 20, 30] {
            c.read(&mut io, blk, 0, &mut b).unwrap();
        }
        // Prefetches took free blocks only while there were some: 10, 11, 20 cached, then 30
        // evicted the LRU (11).
        c.read(&mut io, 10, 0, &mut b).unwrap();
        c.read(&mut io, 40, 0, &mut b).unwrap();
        assert_eq!(c.state_of(10), State::Ready, "recently used stays");
        assert_eq!(c.state_of(40), State::Ready);
        assert_eq!(c.state_of(20), State::Free, "least recently used went");
    }

    #[test]
    fn dirty_ratio_triggers_write_back_of_the_oldest_dirty_blocks_after_one_log_sync() {
        let mut io = zone(100);
        let mut c = Icache::new(10, 64, 100, 0.4);
        for blk in [0, 10, 20, 30, 40] {
            c.write(&mut io, blk, 0, &[0xEE]).unwrap();
        }
        assert_eq!(
            io.writes,
            vec![0, 10, 20],
            "the fifth dirty block exceeds 4 of 10: back to 2"
        );
        assert_eq!(io.syncs, 1, "one log sync for the batch");
        assert_eq!(io.batches, 1, "one device call for the batch");
        assert_eq!(c.state_of(0), State::Ready);
        assert_eq!(c.dirty_blocks(), 2);
        c.flush(&mut io).unwrap();
        assert_eq!((c.dirty_blocks(), io.syncs), (0, 2));
        assert_eq!(io.blocks[40][0], 0xEE);
        assert_eq!(io.blocks[40][1], 40);
    }

    #[test]
    fn a_failed_write_back_keeps_its_blocks_dirty_until_a_retry_succeeds() {
        let mut io = zone(100);
        let mut c = Icache::new(10, 64, 100, 1.0);
        for blk in [1, 2, 3] {
            c.write(&mut io, blk, 0, &[0xAB]).unwrap();
        }
        io.fail_writes = true;
        assert!(c.flush(&mut io).is_err());
        assert_eq!(c.dirty_blocks(), 3);
        assert!([1, 2, 3].iter().all(|&b| c.state_of(b) == State::Dirty));
        io.fail_writes = false;
        c.flush(&mut io).unwrap();
        assert_eq!((c.dirty_blocks(), c.stats().write_backs), (0, 3));
        assert_eq!(io.writes, vec![1, 2, 3]);
        assert_eq!(io.blocks[2][0], 0xAB);
    }

    #[test]
    fn an_empty_block_is_installed_without_a_read() {
        let mut io = zone(10);
        let mut c = Icache::new(4, 64, 10, 0.5);
        c.install_empty(&mut io, 7).unwrap();
        c.write(&mut io, 7, 4, &[9]).unwrap();
        let mut b = [0xFFu8; 2];
        c.read(&mut io, 7, 3, &mut b).unwrap();
        assert_eq!((b, io.reads), ([0, 9], 0));
    }

    #[test]
    fn a_full_cache_of_dirty_blocks_writes_one_back_to_make_room() {
        let mut io = zone(100);
        let mut c = Icache::new(2, 64, 100, 1.0);
        c.write(&mut io, 50, 0, &[1]).unwrap();
        c.write(&mut io, 60, 0, &[2]).unwrap();
        let mut b = [0u8; 1];
        c.read(&mut io, 70, 0, &mut b).unwrap();
        assert_eq!(io.writes, vec![50]);
        c.read(&mut io, 50, 0, &mut b).unwrap();
        assert_eq!(b, [1], "written-back data reads back");
    }

    #[test]
    fn a_cache_larger_than_its_inode_zone_holds_only_the_zone() {
        let mut io = zone(6);
        let mut c = Icache::new(1000, 64, 6, 0.5);
        assert_eq!(c.entries.len(), 6, "one entry per block of the zone");
        let mut b = [0u8; 1];
        for blk in 0..6 {
            c.read(&mut io, blk, 0, &mut b).unwrap();
        }
        let (reads, hits) = (io.reads, c.stats().hits);
        for blk in 0..6 {
            c.read(&mut io, blk, 0, &mut b).unwrap();
        }
        assert_eq!(
            (io.reads, c.stats().hits),
            (reads, hits + 6),
            "the whole zone stays cached"
        );
        assert_eq!(
            Icache::new(1000, 64, 1, 0.5).entries.len(),
            2,
            "two at least"
        );
    }
}
