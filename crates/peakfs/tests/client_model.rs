//! Several clients (each its own [`Client`]) doing random operations on one real cluster
//! (master + 2 servers), checked against a model under commit consistency (§III-D): a file's
//! content and size must equal the model's once every writer committed (fsync or close);
//! while another client holds uncommitted writes to a file, its content is not checked.
//! Namespace operations are synchronous and checked always (stat, readdir, errno).
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

#[derive(Default)]
struct Model {
    /// path → content after all acknowledged writes (what a reader sees once committed).
    files: BTreeMap<String, Vec<u8>>,
    /// path → its open writer (at most one per file, as in a checkpointing HPC job).
    writers: BTreeMap<String, Writer>,
}

const DIRS: [&str; 3] = ["/blk", "/big", "/io"];
const CLIENTS: usize = 3;
const MAX_FILE: u64 = 256 << 10;

fn content(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(131) as usize + i * 13 + i / 509) as u8)
        .collect()
}

fn read_all(c: &mut Client, path: &str) -> Vec<u8> {
    let fd = c.open(path, libc::O_RDONLY, 0).unwrap();
    let d = c.pread(fd, MAX_FILE as usize * 2, 0).unwrap();
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
        let exists = m.files.contains_key(&path);
        let c = &mut clients[ci];
        match rng.below(9) {
            // create (O_EXCL): EEXIST exactly when the model has it.
            0 => match c.open(&path, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644) {
                Ok(fd) => {
                    assert!(!exists, "{ctx}: O_EXCL create of an existing file");
                    m.files.insert(path.clone(), Vec::new());
                    c.close(fd).unwrap();
                }
                Err(e) => {
                    assert!(exists, "{ctx}: create failed: {e}");
                    assert_eq!(e.errno(), libc::EEXIST, "{ctx}");
                }
            },
            // write through this file's writer (opened on first use).
            1 | 2 if exists => {
                let w = match m.writers.get_mut(&path) {
                    Some(w) => w,
                    None => {
                        let fd = c.open(&path, libc::O_WRONLY, 0).unwrap();
                        m.writers.entry(path.clone()).or_insert(Writer {
                            client: ci,
                            fd,
                            dirty: false,
                        })
                    }
                };
                let len = 1 + rng.below(64 << 10) as usize;
                let off = if dir == "/io" {
                    // I/O-based files are read back at the offsets written: keep one stream.
                    0
                } else {
                    rng.below(MAX_FILE - len as u64)
                };
                let data = content(rng.next(), len);
                clients[w.client].pwrite(w.fd, &data, off).unwrap();
                w.dirty = true;
                let f = m.files.get_mut(&path).unwrap();
                let end = off as usize + len;
                if f.len() < end {
                    f.resize(end, 0);
                }
                f[off as usize..end].copy_from_slice(&data);
            }
            // commit: fsync or close of the writer.
            3 => {
                if let Some(w) = m.writers.get_mut(&path) {
                    if rng.below(2) == 0 {
                        clients[w.client].fsync(w.fd).unwrap();
                        w.dirty = false;
                    } else {
                        let w = m.writers.remove(&path).unwrap();
                        clients[w.client].close(w.fd).unwrap();
                    }
                }
            }
            // read + stat by any client: exact once committed.
            4 | 5 => {
                let committed = m.writers.get(&path).is_none_or(|w| !w.dirty);
                match c.stat(&path) {
                    Ok(a) => {
                        assert!(exists, "{ctx}: stat found a removed file");
                        if committed {
                            let want = &m.files[&path];
                            assert_eq!(a.size, want.len() as u64, "{ctx}: size");
                            let got = read_all(c, &path);
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
            6 if !m.writers.contains_key(&path) => match c.unlink(&path) {
                Ok(()) => {
                    assert!(exists, "{ctx}: unlinked a missing file");
                    m.files.remove(&path);
                }
                Err(e) => {
                    assert!(!exists, "{ctx}: unlink failed: {e}");
                    assert_eq!(e.errno(), libc::ENOENT, "{ctx}");
                }
            },
            // rename within the directory (files without writers on either side).
            7 => {
                let to = format!("{dir}/f{}", rng.below(6));
                if exists
                    && to != path
                    && !m.writers.contains_key(&path)
                    && !m.writers.contains_key(&to)
                {
                    c.rename(&path, &to)
                        .unwrap_or_else(|e| panic!("{ctx} → {to}: {e}"));
                    let f = m.files.remove(&path).unwrap();
                    m.files.insert(to, f);
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
                    .files
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
    for (path, want) in &m.files {
        for c in &mut clients {
            assert_eq!(
                c.stat(path).unwrap().size,
                want.len() as u64,
                "seed {seed} {path}"
            );
            assert!(
                read_all(c, path) == *want,
                "seed {seed} {path}: final content differs"
            );
        }
    }
}
