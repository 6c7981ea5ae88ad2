//! The server-side read cache with read-ahead (PeakFS §III-D): HPC files are mostly read
//! sequentially (C1), so a worker that sees a file read where the previous read of it ended
//! loads the whole current block and the next one into memory; later reads inside cached blocks
//! are served from there. The cache is not registered for zero-copy (§III-D): a hit is copied
//! into the reply, by the memcpy pool when it is large.
//!
//! Each worker owns its cache (shared nothing). Any request that may change a file's bytes or
//! size drops the file's blocks; name operations (unlink, rename, link) drop the whole cache,
//! since they may free an inode whose number the cache still knows.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::slice::{Failure, Slice};
use crate::protocol::Request;

/// A READ answered from the cache: `len` bytes of `src` from `offset`.
#[derive(Debug, Clone)]
pub struct CacheHit {
    /// The cached block.
    pub src: Arc<[u8]>,
    /// First byte of the reply in `src`.
    pub offset: usize,
    /// Bytes of the reply.
    pub len: usize,
}

#[derive(Debug)]
struct Entry {
    data: Arc<[u8]>,
    /// Bytes of `data` that hold file bytes (the store clips reads at the file size).
    valid: usize,
}

/// One worker's read cache.
#[derive(Debug)]
pub struct ReadCache {
    capacity: usize,
    bytes: usize,
    blocks: HashMap<(u64, u64), Entry>,
    /// Insertion order, for eviction (first in, first out).
    order: VecDeque<(u64, u64)>,
    /// Where the last read of each file ended (sequential detection).
    next_offset: HashMap<u64, u64>,
    /// Cached blocks per file (so that writes to uncached files cost one lookup).
    per_file: HashMap<u64, usize>,
    hits: u64,
}

impl ReadCache {
    /// A cache of at most `capacity` bytes (0 disables it).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            bytes: 0,
            blocks: HashMap::new(),
            order: VecDeque::new(),
            next_offset: HashMap::new(),
            per_file: HashMap::new(),
            hits: 0,
        }
    }

    /// Reads served from the cache so far.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// Serves READ `(ino, offset, len)`: a cache hit is returned for the caller to copy;
    /// otherwise `out` holds the bytes afterwards, written over what it held
    /// ([`Slice::read_reply`]; read from the store, with read-ahead when the read continues
    /// the previous one).
    pub fn read(
        &mut self,
        slice: &mut Slice,
        ino: u64,
        offset: u64,
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<Option<CacheHit>, Failure> {
        let bs = slice.block_bytes();
        let block = offset / bs;
        let in_block = (offset % bs) as usize;
        let one_block = in_block as u64 + len as u64 <= bs;
        let sequential = self.next_offset.get(&ino) == Some(&offset);
        self.next_offset
            .insert(ino, offset.saturating_add(len as u64));
        if self.capacity == 0 || !one_block {
            return self.direct(slice, ino, offset, len, out);
        }
        if !self.blocks.contains_key(&(ino, block)) {
            if !sequential {
                return self.direct(slice, ino, offset, len, out);
            }
            self.load(slice, ino, block)?;
        }
        if sequential {
            // Read-ahead of the next block.
            if !self.blocks.contains_key(&(ino, block + 1)) {
                self.load(slice, ino, block + 1)?;
            }
        }
        match self.blocks.get(&(ino, block)) {
            Some(e) => {
                self.hits += 1;
                let n = e.valid.saturating_sub(in_block).min(len);
                Ok(Some(CacheHit {
                    src: e.data.clone(),
                    offset: in_block,
                    len: n,
                }))
            }
            // Evicted by the read-ahead (a cache smaller than two blocks).
            None => self.direct(slice, ino, offset, len, out),
        }
    }

    fn direct(
        &mut self,
        slice: &mut Slice,
        ino: u64,
        offset: u64,
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<Option<CacheHit>, Failure> {
        let len = len.try_into().unwrap_or(u32::MAX);
        slice.read_reply(ino, offset, len, None, out)?;
        Ok(None)
    }

    fn load(&mut self, slice: &mut Slice, ino: u64, block: u64) -> Result<(), Failure> {
        let bs = slice.block_bytes();
        let mut buf = Vec::with_capacity(bs as usize);
        let req = Request::Read {
            ino,
            offset: block * bs,
            len: bs as u32,
            extent: None,
        };
        slice.execute(req, &mut buf)?;
        let valid = buf.len();
        buf.resize(bs as usize, 0);
        self.bytes += buf.len();
        if let Some(old) = self.blocks.insert(
            (ino, block),
            Entry {
                data: buf.into(),
                valid,
            },
        ) {
            self.bytes -= old.data.len();
        } else {
            *self.per_file.entry(ino).or_default() += 1;
            self.order.push_back((ino, block));
        }
        while self.bytes > self.capacity {
            let Some(key) = self.order.pop_front() else {
                break;
            };
            if let Some(e) = self.blocks.remove(&key) {
                self.bytes -= e.data.len();
                if let Some(n) = self.per_file.get_mut(&key.0) {
                    *n -= 1;
                    if *n == 0 {
                        self.per_file.remove(&key.0);
                    }
                }
            }
        }
        Ok(())
    }

    /// Drops what `req` may make stale, before it runs.
    pub fn invalidate_for(&mut self, req: &Request<'_>) {
        match *req {
            Request::Write { ino, .. }
            | Request::Truncate { ino, .. }
            | Request::SetAttr { ino, .. }
            | Request::SetHint { ino, .. }
            | Request::Open { ino, .. }
            | Request::RmInode { ino, .. } => self.drop_file(ino),
            Request::Unlink { .. } | Request::Rename { .. } | Request::Link { .. }
                if !self.blocks.is_empty() =>
            {
                self.blocks.clear();
                self.order.clear();
                self.per_file.clear();
                self.bytes = 0;
            }
            _ => {}
        }
    }

    fn drop_file(&mut self, ino: u64) {
        if self.per_file.remove(&ino).is_none() {
            return;
        }
        let mut freed = 0;
        self.blocks.retain(|&(i, _), e| {
            let keep = i != ino;
            if !keep {
                freed += e.data.len();
            }
            keep
        });
        self.bytes -= freed;
        self.order.retain(|&(i, _)| i != ino);
    }
}
