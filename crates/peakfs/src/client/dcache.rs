//! The client dentry cache (PeakFS §III-C2): only dentries whose child is a directory are
//! cached, each with an expiration time.
//!
//! The paper keeps the cache consistent with read/write tokens granted by the parent
//! directory, expiring on both sides. This implementation keeps the simplest correct subset:
//! expiry only, no server-side tokens. Its own rmdir/rename of a directory invalidates the
//! entry at once; another client's rmdir/rename of a directory is seen after at most the TTL
//! (until then, paths through the old name may still resolve to the old directory, whose
//! operations then fail with ENOENT at the server once it is gone). Files are never cached.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::protocol::Attr;

/// Most entries kept; the cache is cleared when full (directories are few, §III-C2).
const MAX_ENTRIES: usize = 65_536;

/// Cached directory dentries: (parent ino, name) → the child directory's attributes.
#[derive(Debug)]
pub struct DentryCache {
    ttl: Duration,
    map: HashMap<(u64, Vec<u8>), (Attr, Instant)>,
}

impl DentryCache {
    /// An empty cache whose entries live `ttl` (zero disables caching).
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            map: HashMap::new(),
        }
    }

    /// The cached directory `name` of `pino`, if present and not expired.
    pub fn get(&mut self, pino: u64, name: &[u8]) -> Option<Attr> {
        let key = (pino, name.to_vec());
        match self.map.get(&key) {
            Some((a, until)) if Instant::now() < *until => Some(*a),
            Some(_) => {
                self.map.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Caches `attr` as entry `name` of `pino` if it is a directory.
    pub fn put(&mut self, pino: u64, name: &[u8], attr: &Attr) {
        if !attr.is_dir() || self.ttl.is_zero() {
            return;
        }
        if self.map.len() >= MAX_ENTRIES {
            self.map.clear();
        }
        self.map
            .insert((pino, name.to_vec()), (*attr, Instant::now() + self.ttl));
    }

    /// Drops entry `name` of `pino`.
    pub fn remove(&mut self, pino: u64, name: &[u8]) {
        self.map.remove(&(pino, name.to_vec()));
    }

    /// Drops every entry (a directory moved: paths below it changed).
    pub fn clear(&mut self) {
        self.map.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(ino: u64) -> Attr {
        Attr {
            ino,
            mode: libc::S_IFDIR | 0o755,
            ..Default::default()
        }
    }

    #[test]
    fn only_directories_are_cached_and_entries_expire() {
        let mut c = DentryCache::new(Duration::from_millis(30));
        c.put(1, b"d", &dir(7));
        let file = Attr {
            ino: 8,
            mode: libc::S_IFREG | 0o644,
            ..Default::default()
        };
        c.put(1, b"f", &file);
        assert_eq!(c.get(1, b"d").map(|a| a.ino), Some(7));
        assert!(c.get(1, b"f").is_none());
        std::thread::sleep(Duration::from_millis(40));
        assert!(c.get(1, b"d").is_none());
    }

    #[test]
    fn removed_entries_are_gone_and_zero_ttl_caches_nothing() {
        let mut c = DentryCache::new(Duration::from_secs(10));
        c.put(1, b"d", &dir(7));
        c.remove(1, b"d");
        assert!(c.get(1, b"d").is_none());
        let mut off = DentryCache::new(Duration::ZERO);
        off.put(1, b"d", &dir(7));
        assert!(off.get(1, b"d").is_none());
    }
}
