//! Several clients (each its own [`Client`]) doing random operations on one real cluster
//! (master + 2 servers), checked against a model under commit consistency (§III-D): a file's
//! content and size must equal the model's once every writer committed (fsync or close);
//! while another client holds uncommitted writes to a file, its content is not checked.
//! Namespace operations are synchronous and checked always (stat, readdir, errno, and the link
//! count of files with hard links, also across directories and slices).
//!
//! The seed is printed; `PEAKFS_MODEL_SEED=N` replays a run, `PEAKFS_MODEL_OPS=N` sets its
//! length.

mod client_support;

use std::collections::{BTreeMap, BTreeSet};

use client_support::Cluster;
use peakfs::client::Client;
use peakfs::placement::{DataDist, Hint};

/// SplitMix64: a small deterministic generator, so a seed replays a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// An open writer: client `client` holds descriptor `fd` on `path`; `dirty`: it wrote since
/// its last commit.
struct Writer {
    client: usize,
    fd: u64,
    dirty: bool,
}

/// A file of the model.
struct File {
    /// Content after all acknowledged writes (what a reader sees once committed).
    content: Vec<u8>,
}

#[derive(Default)]
struct Model {
    /// path → file id (hard links: several paths, one id).
    names: BTreeMap<String, u64>,
    /// file id → the file.
    files: BTreeMap<u64, File>,
    /// file id → its open writer (at most one per file, as in a checkpointing HPC job).
    writers: BTreeMap<u64, Writer>,
    next_id: u64,
}

impl Model {
    fn links(&self, id: u64) -> u32 {
        self.names.values().filter(|&&i| i == id).count() as u32
    }

    /// Drops name `path`; the file goes with its last name.
    fn unname(&mut self, path: &str) {
        if let Some(id) = self.names.remove(path)
            && self.links(id) == 0
        {
            self.files.remove(&id);
        }
    }
}

const DIRS: [&str; 3] = ["/blk", "/big", "/io"];
const CLIENTS: usize = 3;
const MAX_FILE: u64 = 256 << 10;

fn content(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(131) as usize + i * 13 + i / 509) as u8)
        .collect()
}

/// The whole file, read `chunk` bytes at a time.
fn read_all(c: &mut Client, path: &str, chunk: usize) -> Vec<u8> {
    let fd = c.open(path, libc::O_RDONLY, 0).unwrap();
    let mut d = Vec::new();
    loop {
        let got = c.pread(fd, chunk, d.len() as u64).unwrap();
        if got.is_empty() {
            break;
        }
        d.extend_from_slice(&got);
    }
    c.close(fd).unwrap();
    d
}

#[test]
fn random_operations_of_several_clients_match_a_commit_consistent_model() {
    let seed = std::env::var("PEAKFS_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let ops: usize = std::env::var("PEAKFS_MODEL_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    println!("model seed {seed} ops {ops}");
    let mut rng = Rng(seed);
    let cl = Cluster::start(2);
    let mut clients: Vec<Client> = (0..CLIENTS).map(|_| cl.client()).collect();
    let hints = [
        Hint {
            data: DataDist::Block,
            bigdir: false,
        },
        Hint {
            data: DataDist::Block,
            bigdir: true,
        },
        Hint {
            data: DataDist::Io,
            bigdir: false,
        },
    ];
    for (d, h) in DIRS.iter().zip(hints) {
        clients[0].mkdir(d, 0o755, Some(h)).unwrap();
    }
    let mut m = Model::default();
    for step in 0..ops {
        let ci = rng.below(CLIENTS as u64) as usize;
        let dir = DIRS[rng.below(DIRS.len() as u64) as usize];
        let path = format!("{dir}/f{}", rng.below(6));
        let ctx = format!("seed {seed} step {step} client {ci} {path}");
        let id = m.names.get(&path).copied();
        let exists = id.is_some();
        let c = &mut clients[ci];
        match rng.below(10) {
            // create (O_EXCL): EEXIST exactly when the model has it.
            0 => match c.open(&path, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644) {
                Ok(fd) => {
                    assert!(!exists, "{ctx}: O_EXCL create of an existing file");
                    let file = File {
                        content: Vec::new(),
                    };
                    m.next_id += 1;
                    m.files.insert(m.next_id, file);
                    m.names.insert(path.clone(), m.next_id);
                    c.close(fd).unwrap();
                }
                Err(e) => {
                    assert!(exists, "{ctx}: create failed: {e}");
                    assert_eq!(e.errno(), libc::EEXIST, "{ctx}");
                }
            },
            // write through this file's writer (opened on first use).
            1 | 2 if exists => {
                let id = id.unwrap();
                let w = match m.writers.get_mut(&id) {
                    Some(w) => w,
                    None => {
                        let fd = c.open(&path, libc::O_WRONLY, 0).unwrap();
                        m.writers.entry(id).or_insert(Writer {
                            client: ci,
                            fd,
                            dirty: false,
                        })
                    }
                };
                let len = 1 + rng.below(64 << 10) as usize;
                // Any offset, in every directory: an I/O-based file's writes overlap and straddle
                // its I/O units (fixed by its first write) as a block file's cross blocks.
                let off = rng.below(MAX_FILE - len as u64);
                let data = content(rng.next(), len);
                clients[w.client].pwrite(w.fd, &data, off).unwrap();
                w.dirty = true;
                let f = &mut m.files.get_mut(&id).unwrap().content;
                let end = off as usize + len;
                if f.len() < end {
                    f.resize(end, 0);
                }
                f[off as usize..end].copy_from_slice(&data);
            }
            // commit: fsync or close of the writer.
            3 => {
                if let Some(id) = id
                    && let Some(w) = m.writers.get_mut(&id)
                {
                    if rng.below(2) == 0 {
                        clients[w.client].fsync(w.fd).unwrap();
                        w.dirty = false;
                    } else {
                        let w = m.writers.remove(&id).unwrap();
                        clients[w.client].close(w.fd).unwrap();
                    }
                }
            }
            // read + stat by any client: the link count always, data exact once committed.
            4 | 5 => {
                let committed = id.is_none_or(|id| m.writers.get(&id).is_none_or(|w| !w.dirty));
                match c.stat(&path) {
                    Ok(a) => {
                        let id = id.unwrap_or_else(|| panic!("{ctx}: stat found a removed file"));
                        assert_eq!(a.nlink, m.links(id), "{ctx}: link count");
                        if committed {
                            let want = &m.files[&id].content;
                            assert_eq!(a.size, want.len() as u64, "{ctx}: size");
                            // Any read size: reads cut through I/O units and blocks.
                            let chunk = 1 + rng.below(MAX_FILE) as usize;
                            let got = read_all(c, &path, chunk);
                            assert!(got == *want, "{ctx}: content differs ({} bytes)", got.len());
                        }
                    }
                    Err(e) => {
                        assert!(!exists, "{ctx}: stat failed: {e}");
                        assert_eq!(e.errno(), libc::ENOENT, "{ctx}");
                    }
                }
            }
            // unlink (not while open for writing).
            6 if id.is_none_or(|id| !m.writers.contains_key(&id)) => match c.unlink(&path) {
                Ok(()) => {
                    assert!(exists, "{ctx}: unlinked a missing file");
                    m.unname(&path);
                }
                Err(e) => {
                    assert!(!exists, "{ctx}: unlink failed: {e}");
                    assert_eq!(e.errno(), libc::ENOENT, "{ctx}");
                }
            },
            // rename within the directory (files without writers on either side).
            7 => {
                let to = format!("{dir}/f{}", rng.below(6));
                let to_id = m.names.get(&to).copied();
                let busy = |i: Option<u64>| i.is_some_and(|i| m.writers.contains_key(&i));
                if exists && to != path && !busy(id) && !busy(to_id) {
                    c.rename(&path, &to)
                        .unwrap_or_else(|e| panic!("{ctx} → {to}: {e}"));
                    // Two names of one file: rename does nothing.
                    if to_id != id {
                        m.unname(&to);
                        m.names.remove(&path);
                        m.names.insert(to, id.unwrap());
                    }
                }
            }
            // hard link, into any of the directories: EEXIST exactly when the name is taken.
            8 => {
                let to_dir = DIRS[rng.below(DIRS.len() as u64) as usize];
                let to = format!("{to_dir}/f{}", rng.below(6));
                match c.link(&path, &to) {
                    Ok(a) => {
                        let id = id.unwrap_or_else(|| panic!("{ctx}: linked a missing file"));
                        assert!(!m.names.contains_key(&to), "{ctx} → {to}: replaced a name");
                        m.names.insert(to, id);
                        assert_eq!(a.nlink, m.links(id), "{ctx}: link count after link");
                    }
                    Err(e) if exists => {
                        assert!(m.names.contains_key(&to), "{ctx} → {to}: link failed: {e}");
                        assert_eq!(e.errno(), libc::EEXIST, "{ctx} → {to}");
                    }
                    Err(e) => assert_eq!(e.errno(), libc::ENOENT, "{ctx} → {to}"),
                }
            }
            // readdir of the directory: exactly the model's names.
            _ => {
                let got: BTreeSet<String> = c
                    .readdir(dir)
                    .unwrap()
                    .into_iter()
                    .map(|e| format!("{dir}/{}", String::from_utf8_lossy(&e.name)))
                    .collect();
                let want: BTreeSet<String> = m
                    .names
                    .keys()
                    .filter(|p| p.starts_with(&format!("{dir}/")))
                    .cloned()
                    .collect();
                assert_eq!(got, want, "{ctx}: readdir");
            }
        }
    }
    // Every writer commits: then every file reads back exactly, by every client.
    for (_, w) in std::mem::take(&mut m.writers) {
        clients[w.client].close(w.fd).unwrap();
    }
    for (path, id) in &m.names {
        let want = &m.files[id].content;
        for c in &mut clients {
            let a = c.stat(path).unwrap();
            assert_eq!(
                (a.size, a.nlink),
                (want.len() as u64, m.links(*id)),
                "seed {seed} {path}"
            );
            assert!(
                read_all(c, path, 2 * MAX_FILE as usize) == *want,
                "seed {seed} {path}: final content differs"
            );
        }
    }
}
