//! The dentry cache (papers/gofs.md §3.3, "scalable accesses to dentry"): cached
//! `(parent, name) → inode` entries in a hash table with one lock per bucket (instead of RCU),
//! and a direct lookup hash table (DLHT) from full paths to inodes as the fast path of path
//! resolution. Only positive entries are cached; every namespace change updates the cache
//! while it holds the engine lock, so the cache never disagrees with the directories.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

/// Buckets of the name cache.
const BUCKETS: usize = 256;
/// Entries per bucket kept at most (a full bucket is emptied: simple, bounded).
const BUCKET_LIMIT: usize = 1024;
/// Full paths kept at most.
const PATH_LIMIT: usize = 65_536;

type Bucket = Mutex<HashMap<(u32, Vec<u8>), u32>>;

/// The cache.
#[derive(Debug)]
pub struct Dcache {
    buckets: Vec<Bucket>,
    paths: Mutex<HashMap<Vec<u8>, u32>>,
}

impl Default for Dcache {
    fn default() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| Mutex::default()).collect(),
            paths: Mutex::default(),
        }
    }
}

impl Dcache {
    fn bucket(
        &self,
        parent: u32,
        name: &[u8],
    ) -> std::sync::MutexGuard<'_, HashMap<(u32, Vec<u8>), u32>> {
        let mut h = DefaultHasher::new();
        (parent, name).hash(&mut h);
        self.buckets[h.finish() as usize % BUCKETS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The cached inode of `parent/name`.
    pub fn get(&self, parent: u32, name: &[u8]) -> Option<u32> {
        self.bucket(parent, name)
            .get(&(parent, name.to_vec()))
            .copied()
    }

    /// Caches `parent/name → ino`.
    pub fn insert(&self, parent: u32, name: &[u8], ino: u32) {
        let mut b = self.bucket(parent, name);
        if b.len() >= BUCKET_LIMIT {
            b.clear();
        }
        b.insert((parent, name.to_vec()), ino);
    }

    /// Drops `parent/name`, and every cached full path (a removed or renamed name may be a
    /// prefix of any of them).
    pub fn remove(&self, parent: u32, name: &[u8]) {
        self.bucket(parent, name).remove(&(parent, name.to_vec()));
        self.paths.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// The cached inode of a full path.
    pub fn get_path(&self, path: &[u8]) -> Option<u32> {
        self.paths
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
            .copied()
    }

    /// Caches a full path.
    pub fn insert_path(&self, path: &[u8], ino: u32) {
        let mut p = self.paths.lock().unwrap_or_else(|e| e.into_inner());
        if p.len() >= PATH_LIMIT {
            p.clear();
        }
        p.insert(path.to_vec(), ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removing_a_name_drops_it_and_all_full_paths() {
        let c = Dcache::default();
        c.insert(3, b"a", 10);
        c.insert_path(b"/a/b", 11);
        assert_eq!(c.get(3, b"a"), Some(10));
        assert_eq!(c.get_path(b"/a/b"), Some(11));
        c.remove(3, b"a");
        assert_eq!(c.get(3, b"a"), None);
        assert_eq!(c.get_path(b"/a/b"), None);
    }
}
