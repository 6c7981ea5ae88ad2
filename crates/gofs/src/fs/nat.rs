//! Node address table management (papers/gofs.md §3.3): the NAT in memory, free node ids,
//! and the node-block cache. Nodes change in memory and reach the disk, out of place, at the
//! next checkpoint.

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use crate::error::{FsError, Result};
use crate::format::NEW_ADDR;
use crate::format::node::Node;
use crate::format::segment::{NAT_ENTRIES_PER_BLOCK, NatEntry};

/// Hash of a node id for the node cache, which every read looks up several times: one
/// multiply (Fibonacci hashing) instead of SipHash. Node ids are small integers of a local
/// image, so the flooding resistance of SipHash buys nothing here.
#[derive(Debug, Default, Clone, Copy)]
pub struct NidHasher(u64);

impl Hasher for NidHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The NAT, the node cache and the dirty-node set.
#[derive(Debug)]
pub struct Nat {
    /// one entry per node id
    pub entries: Vec<NatEntry>,
    /// NAT blocks changed since the last checkpoint
    pub dirty_blocks: BTreeSet<u32>,
    /// cached node blocks (clean and dirty)
    pub cache: HashMap<u32, Node, BuildHasherDefault<NidHasher>>,
    /// nodes changed since the last checkpoint
    pub dirty_nodes: BTreeSet<u32>,
    /// where the free-nid scan resumes
    next_free: u32,
    /// first nid users may take (after root)
    first_nid: u32,
}

impl Nat {
    /// Wraps the loaded entries; `first_nid` is the lowest nid new nodes may take.
    pub fn new(entries: Vec<NatEntry>, first_nid: u32) -> Self {
        Self {
            entries,
            dirty_blocks: BTreeSet::new(),
            cache: HashMap::default(),
            dirty_nodes: BTreeSet::new(),
            next_free: first_nid,
            first_nid,
        }
    }

    /// The entry of `nid`.
    pub fn get(&self, nid: u32) -> Result<NatEntry> {
        self.entries
            .get(nid as usize)
            .copied()
            .ok_or_else(|| FsError::Corrupt(format!("node id {nid} past the NAT")))
    }

    /// The cached node `nid` (callers load it first).
    pub fn cached(&self, nid: u32) -> Result<&Node> {
        self.cache
            .get(&nid)
            .ok_or_else(|| FsError::Corrupt(format!("node {nid} missing from the node cache")))
    }

    /// Changes the entry of `nid`.
    pub fn set(&mut self, nid: u32, e: NatEntry) {
        if let Some(x) = self.entries.get_mut(nid as usize) {
            *x = e;
            self.dirty_blocks.insert(nid / NAT_ENTRIES_PER_BLOCK as u32);
        }
    }

    /// Takes a free node id for a node of inode `ino` (`ino` = 0: the node is an inode and
    /// owns itself). Its entry becomes NEW_ADDR until the checkpoint writes it.
    pub fn alloc(&mut self, ino: u32) -> Result<u32> {
        let n = self.entries.len() as u32;
        let start = self.next_free.clamp(self.first_nid, n.max(self.first_nid));
        let found = (start..n)
            .chain(self.first_nid..start)
            .find(|&i| self.entries[i as usize].block_addr == 0)
            .ok_or(FsError::NoSpace)?;
        let ver = self.entries[found as usize].version;
        let owner = if ino == 0 { found } else { ino };
        self.set(
            found,
            NatEntry {
                version: ver,
                ino: owner,
                block_addr: NEW_ADDR,
            },
        );
        self.next_free = found + 1;
        Ok(found)
    }

    /// Frees `nid`: its entry is cleared and its version bumped, so stale summaries of its
    /// data no longer match.
    pub fn free(&mut self, nid: u32) {
        if let Some(e) = self.entries.get(nid as usize).copied() {
            self.set(
                nid,
                NatEntry {
                    version: e.version.wrapping_add(1),
                    ino: 0,
                    block_addr: 0,
                },
            );
            self.cache.remove(&nid);
            self.dirty_nodes.remove(&nid);
            self.next_free = self.next_free.min(nid);
        }
    }

    /// Free node ids.
    pub fn free_count(&self) -> u64 {
        self.entries
            .iter()
            .skip(self.first_nid as usize)
            .filter(|e| e.block_addr == 0)
            .count() as u64
    }

    /// The lowest free nid (the checkpoint's `next_free_nid`).
    pub fn first_free(&self) -> u32 {
        (self.first_nid..self.entries.len() as u32)
            .find(|&i| self.entries[i as usize].block_addr == 0)
            .unwrap_or(self.entries.len() as u32)
    }

    /// Marks a cached node dirty.
    pub fn mark_dirty(&mut self, nid: u32) {
        self.dirty_nodes.insert(nid);
    }

    /// Drops clean cached nodes when the cache grows past `limit` (dirty nodes stay).
    pub fn trim_cache(&mut self, limit: usize) {
        if self.cache.len() > limit {
            let dirty = &self.dirty_nodes;
            self.cache.retain(|nid, _| dirty.contains(nid));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn nid_hash_spreads_consecutive_ids_over_distinct_low_bits() {
        let b = BuildHasherDefault::<NidHasher>::default();
        let low: BTreeSet<u64> = (3..3 + 4096u32).map(|n| b.hash_one(n) & 4095).collect();
        assert_eq!(low.len(), 4096);
    }

    #[test]
    fn alloc_skips_used_ids_and_free_bumps_the_version() {
        let mut e = vec![NatEntry::default(); 10];
        e[4].block_addr = 100;
        let mut n = Nat::new(e, 4);
        let a = n.alloc(0).unwrap();
        assert_eq!(a, 5);
        assert_eq!(n.get(5).unwrap().ino, 5);
        n.free(5);
        assert_eq!(n.get(5).unwrap().version, 1);
        assert_eq!(n.alloc(3).unwrap(), 5);
        assert_eq!(n.get(5).unwrap().ino, 3);
        for _ in 6..10 {
            n.alloc(3).unwrap();
        }
        assert!(matches!(n.alloc(3), Err(FsError::NoSpace)));
    }
}
