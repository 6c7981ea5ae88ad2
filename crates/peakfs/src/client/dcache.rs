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
use std::hash::BuildHasherDefault;
use std::time::{Duration, Instant};

use crate::protocol::Attr;
use crate::pstore::table::{U64Hasher, U64Map};

/// Most entries kept; the cache is cleared when full (directories are few, §III-C2).
const MAX_ENTRIES: usize = 65_536;

/// The cached sub-directories of one directory: name → attributes and expiry.
type Names = HashMap<Box<[u8]>, (Attr, Instant), BuildHasherDefault<U64Hasher>>;

/// Cached directory dentries: (parent ino, name) → the child directory's attributes.
#[derive(Debug)]
pub struct DentryCache {
    ttl: Duration,
    /// By parent, then by name: a lookup borrows the name (path resolution allocates nothing).
    dirs: U64Map<Names>,
    len: usize,
    /// The directory path resolved last, its attributes, and the earliest expiry of the
    /// entries it went through: the next path in that directory (mdtest's next file) skips
    /// the walk. Any removal drops it.
    last: Option<(String, Attr, Instant)>,
}

impl DentryCache {
    /// An empty cache whose entries live `ttl` (zero disables caching).
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            dirs: U64Map::default(),
            len: 0,
            last: None,
        }
    }

    /// The cached directory `name` of `pino`, if present and not expired.
    pub fn get(&mut self, pino: u64, name: &[u8]) -> Option<Attr> {
        match self.dirs.get(&pino)?.get(name) {
            Some((a, until)) if Instant::now() < *until => Some(*a),
            Some(_) => {
                self.remove(pino, name);
                None
            }
            None => None,
        }
    }

    /// The cached entry `name` of `pino` and when it expires (expired or not).
    pub fn entry(&self, pino: u64, name: &[u8]) -> Option<(Attr, Instant)> {
        self.dirs.get(&pino)?.get(name).copied()
    }

    /// The attributes of directory path `dir` if it is the one resolved last and none of its
    /// entries expired or went since.
    pub fn get_path(&self, dir: &str) -> Option<Attr> {
        match &self.last {
            Some((path, a, until)) if path == dir && Instant::now() < *until => Some(*a),
            _ => None,
        }
    }

    /// Remembers directory path `dir` (resolved through entries of which the first expires at
    /// `until`).
    pub fn put_path(&mut self, dir: &str, attr: &Attr, until: Instant) {
        if self.ttl.is_zero() {
            return;
        }
        match &mut self.last {
            Some((path, a, u)) => {
                path.clear();
                path.push_str(dir);
                (*a, *u) = (*attr, until);
            }
            None => self.last = Some((dir.to_string(), *attr, until)),
        }
    }

    /// Caches `attr` as entry `name` of `pino` if it is a directory.
    pub fn put(&mut self, pino: u64, name: &[u8], attr: &Attr) {
        if !attr.is_dir() || self.ttl.is_zero() {
            return;
        }
        if self.len >= MAX_ENTRIES {
            self.clear();
        }
        let until = Instant::now() + self.ttl;
        if self
            .dirs
            .entry(pino)
            .or_default()
            .insert(name.into(), (*attr, until))
            .is_none()
        {
            self.len += 1;
        }
    }

    /// Drops entry `name` of `pino`.
    pub fn remove(&mut self, pino: u64, name: &[u8]) {
        self.last = None;
        let Some(names) = self.dirs.get_mut(&pino) else {
            return;
        };
        if names.remove(name).is_some() {
            self.len -= 1;
        }
        if names.is_empty() {
            self.dirs.remove(&pino);
        }
    }

    /// Drops every entry (a directory moved: paths below it changed).
    pub fn clear(&mut self) {
        self.dirs.clear();
        self.len = 0;
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    #[derive(Debug, Clone)]
    enum Op {
        Put(u64, Vec<u8>, u64),
        Get(u64, Vec<u8>),
        Remove(u64, Vec<u8>),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few parents and short names, so that operations meet the same entries.
        let name = proptest::collection::vec(b'a'..b'd', 0..3);
        prop_oneof![
            4 => (0u64..3, name.clone(), 1u64..100).prop_map(|(p, n, i)| Op::Put(p, n, i)),
            4 => (0u64..3, name.clone()).prop_map(|(p, n)| Op::Get(p, n)),
            2 => (0u64..3, name).prop_map(|(p, n)| Op::Remove(p, n)),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        #[test]
        fn the_cache_answers_as_a_map_of_parent_and_name(ops in proptest::collection::vec(op(), 1..200)) {
            let mut c = DentryCache::new(Duration::from_secs(3600));
            let mut model: HashMap<(u64, Vec<u8>), u64> = HashMap::new();
            for op in ops {
                match op {
                    Op::Put(p, n, ino) => {
                        c.put(p, &n, &dir(ino));
                        model.insert((p, n), ino);
                    }
                    Op::Get(p, n) => {
                        prop_assert_eq!(c.get(p, &n).map(|a| a.ino), model.get(&(p, n)).copied());
                    }
                    Op::Remove(p, n) => {
                        c.remove(p, &n);
                        model.remove(&(p, n));
                    }
                    Op::Clear => {
                        c.clear();
                        model.clear();
                    }
                }
                prop_assert_eq!(c.len, model.len());
                prop_assert!(c.dirs.values().all(|names| !names.is_empty()));
            }
        }
    }

    #[test]
    fn the_last_path_is_remembered_until_an_entry_goes_or_its_first_entry_expires() {
        let mut c = DentryCache::new(Duration::from_secs(10));
        let soon = Instant::now() + Duration::from_millis(30);
        c.put_path("/a/b", &dir(7), soon);
        assert_eq!(c.get_path("/a/b").map(|a| a.ino), Some(7));
        assert!(c.get_path("/a").is_none() && c.get_path("/a/b/c").is_none());
        // Any removal (an rmdir or rename below may have changed the path) drops it.
        c.remove(3, b"x");
        assert!(c.get_path("/a/b").is_none());
        c.put_path("/a/b", &dir(7), soon);
        c.clear();
        assert!(c.get_path("/a/b").is_none());
        c.put_path("/a/b", &dir(8), soon);
        std::thread::sleep(Duration::from_millis(40));
        assert!(c.get_path("/a/b").is_none(), "expired with its first entry");
        let mut off = DentryCache::new(Duration::ZERO);
        off.put_path("/a", &dir(7), Instant::now() + Duration::from_secs(5));
        assert!(off.get_path("/a").is_none());
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
