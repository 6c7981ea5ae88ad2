//! Randomized operation sequences checked against an in-memory model: every result matches
//! the model, the unmounted image passes `fsck.f2fs`, and a remount reads the model back.

use std::collections::BTreeMap;
use std::sync::Arc;

use gofs::error::FsError;
use gofs::f2fs_tools;
use gofs::format::MemBlocks;
use gofs::fs::{Caller, FileType, Fs, Ino, MountOptions, ROOT_INO, SetAttr};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ME: Caller = Caller {
    uid: 1000,
    gid: 1000,
};

#[derive(Debug, Clone)]
enum Obj {
    Dir(BTreeMap<Vec<u8>, Ino>),
    File(Vec<u8>),
    Link(Vec<u8>),
}

#[derive(Debug, Default)]
struct Model {
    objs: BTreeMap<Ino, Obj>,
    links: BTreeMap<Ino, u32>,
}

impl Model {
    fn dirs(&self) -> Vec<Ino> {
        self.objs
            .iter()
            .filter(|(_, o)| matches!(o, Obj::Dir(_)))
            .map(|(i, _)| *i)
            .collect()
    }
    fn files(&self) -> Vec<Ino> {
        self.objs
            .iter()
            .filter(|(_, o)| matches!(o, Obj::File(_)))
            .map(|(i, _)| *i)
            .collect()
    }
    fn children(&self, d: Ino) -> &BTreeMap<Vec<u8>, Ino> {
        match &self.objs[&d] {
            Obj::Dir(c) => c,
            _ => unreachable!(),
        }
    }
    fn children_mut(&mut self, d: Ino) -> &mut BTreeMap<Vec<u8>, Ino> {
        match self.objs.get_mut(&d) {
            Some(Obj::Dir(c)) => c,
            _ => unreachable!(),
        }
    }
    fn is_dir(&self, i: Ino) -> bool {
        matches!(self.objs[&i], Obj::Dir(_))
    }
    /// Whether `d` is `anc` or below it.
    fn under(&self, d: Ino, anc: Ino) -> bool {
        if d == anc {
            return true;
        }
        self.dirs()
            .into_iter()
            .any(|p| self.children(p).values().any(|&c| c == d) && p != d && self.under(p, anc))
    }
    fn drop_link(&mut self, i: Ino) {
        let n = self.links.get_mut(&i).unwrap();
        *n -= 1;
        if *n == 0 || self.is_dir(i) {
            self.objs.remove(&i);
            self.links.remove(&i);
        }
    }
}

fn name(rng: &mut StdRng) -> Vec<u8> {
    let long = rng.random_bool(0.1);
    let n = if long {
        rng.random_range(20..=255)
    } else {
        rng.random_range(1..6)
    };
    (0..n)
        .map(|_| b"abcdefgh"[rng.random_range(0..8)])
        .collect()
}

fn pick<T: Copy>(rng: &mut StdRng, v: &[T]) -> Option<T> {
    if v.is_empty() {
        None
    } else {
        Some(v[rng.random_range(0..v.len())])
    }
}

fn data(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let b: u8 = rng.random();
    (0..len).map(|i| b.wrapping_add((i / 7) as u8)).collect()
}

fn step(fs: &Fs, m: &mut Model, rng: &mut StdRng) {
    let dirs = m.dirs();
    let files = m.files();
    match rng.random_range(0..100) {
        0..=17 => {
            let d = pick(rng, &dirs).unwrap();
            let n = name(rng);
            let r = fs.create(d, &n, FileType::Regular, 0o644, 0, ME);
            if m.children(d).contains_key(&n) {
                assert!(matches!(r, Err(FsError::Exists)), "{r:?}");
            } else {
                let st = r.unwrap();
                m.objs.insert(st.ino, Obj::File(Vec::new()));
                m.links.insert(st.ino, 1);
                m.children_mut(d).insert(n, st.ino);
            }
        }
        18..=39 => {
            let Some(f) = pick(rng, &files) else { return };
            let big = rng.random_bool(0.05);
            let off = if big {
                rng.random_range(0..5 << 20)
            } else {
                rng.random_range(0..20_000)
            };
            let len = rng.random_range(1..if big { 300_000 } else { 9000 });
            let d = data(rng, len);
            assert_eq!(fs.write(f, off as u64, &d).unwrap(), len);
            let Obj::File(v) = m.objs.get_mut(&f).unwrap() else {
                unreachable!()
            };
            if v.len() < off + len {
                v.resize(off + len, 0);
            }
            v[off..off + len].copy_from_slice(&d);
        }
        40..=47 => {
            let Some(f) = pick(rng, &files) else { return };
            let size = rng.random_range(0..30_000usize);
            fs.setattr(
                f,
                &SetAttr {
                    size: Some(size as u64),
                    ..Default::default()
                },
            )
            .unwrap();
            let Obj::File(v) = m.objs.get_mut(&f).unwrap() else {
                unreachable!()
            };
            v.resize(size, 0);
        }
        48..=57 => {
            let d = pick(rng, &dirs).unwrap();
            let kids: Vec<_> = m.children(d).clone().into_iter().collect();
            let Some((n, i)) = pick_pair(rng, &kids) else {
                return;
            };
            let r = fs.unlink(d, &n);
            if m.is_dir(i) {
                assert!(matches!(r, Err(FsError::IsDir)), "{r:?}");
            } else {
                r.unwrap();
                m.children_mut(d).remove(&n);
                m.drop_link(i);
            }
        }
        58..=67 => {
            let d = pick(rng, &dirs).unwrap();
            let n = name(rng);
            let r = fs.mkdir(d, &n, 0o755, ME);
            if m.children(d).contains_key(&n) {
                assert!(matches!(r, Err(FsError::Exists)), "{r:?}");
            } else {
                let st = r.unwrap();
                m.objs.insert(st.ino, Obj::Dir(BTreeMap::new()));
                m.links.insert(st.ino, 1);
                m.children_mut(d).insert(n, st.ino);
            }
        }
        68..=74 => {
            let d = pick(rng, &dirs).unwrap();
            let kids: Vec<_> = m.children(d).clone().into_iter().collect();
            let Some((n, i)) = pick_pair(rng, &kids) else {
                return;
            };
            let r = fs.rmdir(d, &n);
            if !m.is_dir(i) {
                assert!(matches!(r, Err(FsError::NotDir)), "{r:?}");
            } else if !m.children(i).is_empty() {
                assert!(matches!(r, Err(FsError::NotEmpty)), "{r:?}");
            } else {
                r.unwrap();
                m.children_mut(d).remove(&n);
                m.drop_link(i);
            }
        }
        75..=88 => {
            let d = pick(rng, &dirs).unwrap();
            let kids: Vec<_> = m.children(d).clone().into_iter().collect();
            let Some((n, i)) = pick_pair(rng, &kids) else {
                return;
            };
            let nd = pick(rng, &dirs).unwrap();
            let existing: Vec<_> = m.children(nd).keys().cloned().collect();
            let nn = if rng.random_bool(0.3) && !existing.is_empty() {
                existing[rng.random_range(0..existing.len())].clone()
            } else {
                name(rng)
            };
            let r = fs.rename(d, &n, nd, &nn);
            let target = m.children(nd).get(&nn).copied();
            let expect: Result<(), &str> = if m.is_dir(i) && m.under(nd, i) {
                Err("inval")
            } else {
                match target {
                    Some(t) if t == i => Ok(()),
                    Some(t) if m.is_dir(i) && !m.is_dir(t) => Err("notdir"),
                    Some(t) if !m.is_dir(i) && m.is_dir(t) => Err("isdir"),
                    Some(t) if m.is_dir(t) && !m.children(t).is_empty() => Err("notempty"),
                    _ => Ok(()),
                }
            };
            match (expect, r) {
                (Ok(()), Ok(())) => {
                    if target != Some(i) {
                        m.children_mut(d).remove(&n);
                        if let Some(t) = m.children_mut(nd).insert(nn, i) {
                            m.drop_link(t);
                        }
                    }
                }
                (Err("inval"), Err(FsError::InvalidArgument(_)))
                | (Err("notdir"), Err(FsError::NotDir))
                | (Err("isdir"), Err(FsError::IsDir))
                | (Err("notempty"), Err(FsError::NotEmpty)) => {}
                (e, r) => panic!("rename: expected {e:?}, got {r:?}"),
            }
        }
        89..=93 => {
            let Some(f) = pick(rng, &files) else { return };
            let d = pick(rng, &dirs).unwrap();
            let n = name(rng);
            let r = fs.link(f, d, &n);
            if m.children(d).contains_key(&n) {
                assert!(matches!(r, Err(FsError::Exists)), "{r:?}");
            } else {
                assert_eq!(r.unwrap().nlink, m.links[&f] + 1);
                *m.links.get_mut(&f).unwrap() += 1;
                m.children_mut(d).insert(n, f);
            }
        }
        94..=97 => {
            let d = pick(rng, &dirs).unwrap();
            let n = name(rng);
            let target = name(rng);
            let r = fs.symlink(d, &n, &target, ME);
            if m.children(d).contains_key(&n) {
                assert!(matches!(r, Err(FsError::Exists)), "{r:?}");
            } else {
                let st = r.unwrap();
                m.objs.insert(st.ino, Obj::Link(target));
                m.links.insert(st.ino, 1);
                m.children_mut(d).insert(n, st.ino);
            }
        }
        _ => fs.sync().unwrap(),
    }
}

fn pick_pair(rng: &mut StdRng, v: &[(Vec<u8>, Ino)]) -> Option<(Vec<u8>, Ino)> {
    if v.is_empty() {
        None
    } else {
        Some(v[rng.random_range(0..v.len())].clone())
    }
}

/// Compares the whole tree under `d` with the model.
fn check(fs: &Fs, m: &Model, d: Ino) {
    let mut got: Vec<_> = fs
        .readdir(d)
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.ino))
        .collect();
    got.sort();
    let want: Vec<_> = m.children(d).clone().into_iter().collect();
    assert_eq!(got, want, "directory {d}");
    let subdirs = want.iter().filter(|(_, i)| m.is_dir(*i)).count() as u32;
    assert_eq!(
        fs.getattr(d).unwrap().nlink,
        2 + subdirs,
        "links of directory {d}"
    );
    for (n, i) in want {
        let st = fs.lookup(d, &n).unwrap();
        assert_eq!(st.ino, i);
        match &m.objs[&i] {
            Obj::Dir(_) => check(fs, m, i),
            Obj::File(v) => {
                assert_eq!(st.size, v.len() as u64, "size of {i}");
                assert_eq!(st.nlink, m.links[&i], "links of {i}");
                let mut buf = vec![0u8; v.len()];
                assert_eq!(fs.read(i, 0, &mut buf).unwrap(), v.len());
                assert!(buf == *v, "contents of inode {i}");
            }
            Obj::Link(t) => assert_eq!(&fs.readlink(i).unwrap(), t),
        }
    }
}

/// Reads file `f` from a random offset in chunks of one random size (small chunks continue
/// each other, so the engine reads ahead) and compares every chunk with the model.
fn seq_read_check(fs: &Fs, m: &Model, rng: &mut StdRng) {
    let files = m.files();
    let Some(f) = pick(rng, &files) else { return };
    let Obj::File(v) = &m.objs[&f] else {
        unreachable!()
    };
    let chunk = if rng.random_bool(0.5) {
        4096
    } else {
        rng.random_range(1..9000)
    };
    let mut off = rng.random_range(0..=v.len());
    let mut buf = vec![0u8; chunk];
    for _ in 0..64 {
        let want = &v[off.min(v.len())..(off + chunk).min(v.len())];
        let n = fs.read(f, off as u64, &mut buf).unwrap();
        assert_eq!(n, want.len(), "read of {chunk} at {off} of inode {f}");
        assert!(buf[..n] == *want, "{chunk} bytes at {off} of inode {f}");
        if n == 0 {
            break;
        }
        off += n;
    }
}

fn opts() -> MountOptions {
    MountOptions {
        read_only: false,
        checkpoint_interval: None,
    }
}

fn run_sequence(seed: u64, ops: usize, tmp: &std::path::Path) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mem = Arc::new(MemBlocks::new(vec![0u8; 64 << 20]));
    gofs::mkfs::mkfs_io(mem.clone(), &gofs::mkfs::MkfsOptions::default()).unwrap();
    let mut fs = Fs::mount_io(mem.clone(), opts()).unwrap();
    let mut m = Model::default();
    m.objs.insert(ROOT_INO, Obj::Dir(BTreeMap::new()));
    m.links.insert(ROOT_INO, 1);
    // Its own generator, so the operation sequences stay those of earlier versions.
    let mut reads = StdRng::seed_from_u64(seed ^ 0x5EAD);
    for k in 0..ops {
        step(&fs, &mut m, &mut rng);
        if k % 4 == 0 {
            seq_read_check(&fs, &m, &mut reads);
        }
        if k == ops / 2 {
            fs.unmount().unwrap();
            fs = Fs::mount_io(mem.clone(), opts()).unwrap();
        }
    }
    check(&fs, &m, ROOT_INO);
    fs.unmount().unwrap();
    let img = tmp.join(format!("model-{seed}.img"));
    std::fs::write(&img, mem.to_vec()).unwrap();
    let out = f2fs_tools::fsck_full(&img).unwrap();
    assert!(
        f2fs_tools::fsck_problems(&out).is_empty(),
        "seed {seed}:\n{}",
        out.text
    );
    let inodes = format!(
        "valid_inode_count matched with CP              [Ok..] [0x{:x}]",
        m.objs.len()
    );
    assert!(
        out.text.contains(&inodes),
        "seed {seed}: fsck counts other inodes\n{}",
        out.text
    );
    std::fs::remove_file(&img).unwrap();
    let fs = Fs::mount_io(mem, opts()).unwrap();
    check(&fs, &m, ROOT_INO);
    fs.unmount().unwrap();
}

#[test]
fn random_sequences_match_the_model_pass_fsck_and_survive_remount() {
    let tmp = tempfile::tempdir().unwrap();
    for seed in 0..20 {
        run_sequence(seed, 200, tmp.path());
    }
}

#[test]
fn overwrite_churn_larger_than_the_volume_runs_gc_and_stays_consistent() {
    let tmp = tempfile::tempdir().unwrap();
    let mem = Arc::new(MemBlocks::new(vec![0u8; 64 << 20]));
    gofs::mkfs::mkfs_io(mem.clone(), &gofs::mkfs::MkfsOptions::default()).unwrap();
    let fs = Fs::mount_io(mem.clone(), opts()).unwrap();
    let free0 = fs.statfs().unwrap().blocks_free;
    let mut rng = StdRng::seed_from_u64(7);
    let mut files = Vec::new();
    for i in 0..4 {
        let f = fs
            .create(
                ROOT_INO,
                format!("f{i}").as_bytes(),
                FileType::Regular,
                0o644,
                0,
                ME,
            )
            .unwrap();
        files.push((f.ino, vec![0u8; 0]));
    }
    // ~150 MiB of overwrites on a 64 MiB volume: only GC keeps space available.
    for round in 0..150 {
        let (ino, content) = &mut files[round % 4];
        let len = 1 << 20;
        let d = data(&mut rng, len);
        let off = rng.random_range(0..3usize) << 20;
        fs.write(*ino, off as u64, &d).unwrap();
        if content.len() < off + len {
            content.resize(off + len, 0);
        }
        content[off..off + len].copy_from_slice(&d);
        // A sequential 4 KiB reader over another file keeps read-ahead windows alive while
        // the cleaner moves blocks under them.
        let (ino, content) = &files[(round + 1) % 4];
        let mut buf = [0u8; 4096];
        for k in 0..(content.len() / 4096).min(96) {
            let at = (round * 37 % 8 + k) * 4096;
            let n = fs.read(*ino, at as u64, &mut buf).unwrap();
            let want = &content[at.min(content.len())..(at + 4096).min(content.len())];
            assert!(
                buf[..n] == *want,
                "round {round}: block {} of inode {ino}",
                at / 4096
            );
        }
    }
    for (ino, content) in &files {
        let mut buf = vec![0u8; content.len()];
        fs.read(*ino, 0, &mut buf).unwrap();
        assert!(buf == *content);
    }
    assert!(fs.statfs().unwrap().blocks_free < free0);
    fs.unmount().unwrap();
    let img = tmp.path().join("gc.img");
    std::fs::write(&img, mem.to_vec()).unwrap();
    let out = f2fs_tools::fsck_full(&img).unwrap();
    assert!(f2fs_tools::fsck_problems(&out).is_empty(), "{}", out.text);
    let fs = Fs::mount_io(mem, opts()).unwrap();
    for (ino, content) in &files {
        let mut buf = vec![0u8; content.len()];
        fs.read(*ino, 0, &mut buf).unwrap();
        assert!(buf == *content);
    }
    fs.unmount().unwrap();
}

#[test]
fn concurrent_writers_and_readers_on_disjoint_ranges_of_one_file_see_their_own_data() {
    let mem = Arc::new(MemBlocks::new(vec![0u8; 64 << 20]));
    gofs::mkfs::mkfs_io(mem.clone(), &gofs::mkfs::MkfsOptions::default()).unwrap();
    let opts = MountOptions {
        read_only: false,
        checkpoint_interval: Some(std::time::Duration::from_millis(5)),
    };
    let fs = Arc::new(Fs::mount_io(mem.clone(), opts.clone()).unwrap());
    let f = fs
        .create(ROOT_INO, b"shared", FileType::Regular, 0o644, 0, ME)
        .unwrap()
        .ino;
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let chunk = 256 << 10;
                for round in 0..8u8 {
                    let d = vec![t.wrapping_mul(31).wrapping_add(round); chunk];
                    let off = u64::from(t) * chunk as u64;
                    fs.write(f, off, &d).unwrap();
                    let mut back = vec![0u8; chunk];
                    assert_eq!(fs.read(f, off, &mut back).unwrap(), chunk);
                    assert!(back == d, "thread {t} round {round} reads its own write");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    Arc::try_unwrap(fs).unwrap().unmount().unwrap();
    let fs = Fs::mount_io(mem, opts).unwrap();
    let mut all = vec![0u8; 1 << 20];
    assert_eq!(fs.read(f, 0, &mut all).unwrap(), 1 << 20);
    for t in 0..4u8 {
        let want = t.wrapping_mul(31).wrapping_add(7);
        assert!(
            all[t as usize * (256 << 10)..(t as usize + 1) * (256 << 10)]
                .iter()
                .all(|&b| b == want)
        );
    }
    fs.unmount().unwrap();
}

#[test]
fn lookup_path_resolves_through_the_path_table_and_follows_renames() {
    let mem = Arc::new(MemBlocks::new(vec![0u8; 64 << 20]));
    gofs::mkfs::mkfs_io(mem.clone(), &gofs::mkfs::MkfsOptions::default()).unwrap();
    let fs = Fs::mount_io(mem, opts()).unwrap();
    let a = fs.mkdir(ROOT_INO, b"a", 0o755, ME).unwrap().ino;
    let b = fs.mkdir(a, b"b", 0o755, ME).unwrap().ino;
    let c = fs
        .create(b, b"c", FileType::Regular, 0o644, 0, ME)
        .unwrap()
        .ino;
    assert_eq!(fs.lookup_path(b"/a/b/c").unwrap().ino, c);
    assert_eq!(
        fs.lookup_path(b"/a/b/c").unwrap().ino,
        c,
        "second time from the path table"
    );
    fs.rename(ROOT_INO, b"a", ROOT_INO, b"z").unwrap();
    assert!(matches!(fs.lookup_path(b"/a/b/c"), Err(FsError::NotFound)));
    assert_eq!(fs.lookup_path(b"/z/b/c").unwrap().ino, c);
    fs.unlink(b, b"c").unwrap();
    assert!(matches!(fs.lookup_path(b"/z/b/c"), Err(FsError::NotFound)));
    assert!(matches!(
        fs.lookup_path(b"/z/b/c/d"),
        Err(FsError::NotFound)
    ));
    fs.unmount().unwrap();
}

#[test]
fn unlinked_open_file_lives_until_release_and_a_crash_frees_it_at_mount() {
    let tmp = tempfile::tempdir().unwrap();
    let mem = Arc::new(MemBlocks::new(vec![0u8; 64 << 20]));
    gofs::mkfs::mkfs_io(mem.clone(), &gofs::mkfs::MkfsOptions::default()).unwrap();
    let fs = Fs::mount_io(mem.clone(), opts()).unwrap();
    let a = fs
        .create(ROOT_INO, b"a", FileType::Regular, 0o644, 0, ME)
        .unwrap()
        .ino;
    let b = fs
        .create(ROOT_INO, b"b", FileType::Regular, 0o644, 0, ME)
        .unwrap()
        .ino;
    for f in [a, b] {
        fs.write(f, 0, &[5u8; 100_000]).unwrap();
        fs.open_inode(f).unwrap();
        fs.unlink(ROOT_INO, if f == a { b"a" } else { b"b" })
            .unwrap();
    }
    let mut buf = vec![0u8; 100_000];
    assert_eq!(
        fs.read(a, 0, &mut buf).unwrap(),
        100_000,
        "still readable while open"
    );
    fs.release_inode(a).unwrap();
    assert!(
        matches!(fs.getattr(a), Err(FsError::NotFound)),
        "gone with its last release"
    );
    fs.sync().unwrap(); // b is an orphan in this checkpoint
    drop(fs); // crash: b never released
    let fs = Fs::mount_io(mem.clone(), opts()).unwrap();
    assert!(
        matches!(fs.getattr(b), Err(FsError::NotFound)),
        "orphan freed at mount"
    );
    assert!(fs.readdir(ROOT_INO).unwrap().is_empty());
    fs.unmount().unwrap();
    let img = tmp.path().join("orphan.img");
    std::fs::write(&img, mem.to_vec()).unwrap();
    let out = f2fs_tools::fsck_full(&img).unwrap();
    assert!(f2fs_tools::fsck_problems(&out).is_empty(), "{}", out.text);
}

/// Reads `f` sequentially in 4 KiB chunks from `from` to `to` and compares with `want`.
fn read_4k(fs: &Fs, f: Ino, from: usize, to: usize, want: &[u8]) {
    let mut buf = [0u8; 4096];
    for off in (from..to).step_by(4096) {
        let n = fs.read(f, off as u64, &mut buf).unwrap();
        let w = &want[off.min(want.len())..(off + 4096).min(want.len())];
        assert_eq!(n, w.len(), "length at {off}");
        assert!(buf[..n] == *w, "4 KiB at {off}");
    }
}

#[test]
fn read_ahead_windows_see_overwrites_truncates_and_reused_inode_numbers() {
    let mem = Arc::new(MemBlocks::new(vec![0u8; 64 << 20]));
    gofs::mkfs::mkfs_io(mem.clone(), &gofs::mkfs::MkfsOptions::default()).unwrap();
    let fs = Fs::mount_io(mem, opts()).unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let f = fs
        .create(ROOT_INO, b"ra", FileType::Regular, 0o644, 0, ME)
        .unwrap()
        .ino;
    let mut v = data(&mut rng, 1 << 20);
    fs.write(f, 0, &v).unwrap();
    // The second 4 KiB read starts a window of the following blocks.
    read_4k(&fs, f, 0, 16 << 10, &v);
    // Overwrite inside the window (and a partial block), then keep reading through it.
    let d = data(&mut rng, 5000);
    fs.write(f, 40_000, &d).unwrap();
    v[40_000..45_000].copy_from_slice(&d);
    read_4k(&fs, f, 16 << 10, 128 << 10, &v);
    // Shrink and grow again: the bytes past the cut read as zeros, in and past the window.
    read_4k(&fs, f, 128 << 10, 160 << 10, &v);
    for size in [150_000u64, 1 << 20] {
        fs.setattr(
            f,
            &SetAttr {
                size: Some(size),
                ..Default::default()
            },
        )
        .unwrap();
    }
    v[150_000..].fill(0);
    read_4k(&fs, f, 160 << 10, 512 << 10, &v);
    // A freed inode number taken by a new file: the old file's window must not answer for
    // it. Not open, so the unlink frees the inode at once.
    read_4k(&fs, f, 0, 64 << 10, &v);
    fs.unlink(ROOT_INO, b"ra").unwrap();
    let mut reused = None;
    for i in 0..64 {
        let name = format!("n{i}");
        let st = fs
            .create(ROOT_INO, name.as_bytes(), FileType::Regular, 0o644, 0, ME)
            .unwrap();
        if st.ino == f {
            // Empty: every read ends at once, where the old window held data.
            read_4k(&fs, st.ino, 48 << 10, 96 << 10, &[]);
            reused = Some(st.ino);
            break;
        }
    }
    assert!(reused.is_some(), "the freed inode number came back");
    fs.unmount().unwrap();
}

#[test]
fn a_sequential_reader_never_sees_data_older_than_a_finished_concurrent_write() {
    use std::sync::atomic::{AtomicU32, Ordering};
    const BLOCKS: usize = 256;
    let mem = Arc::new(MemBlocks::new(vec![0u8; 64 << 20]));
    gofs::mkfs::mkfs_io(mem.clone(), &gofs::mkfs::MkfsOptions::default()).unwrap();
    let fs = Arc::new(Fs::mount_io(mem, opts()).unwrap());
    let f = fs
        .create(ROOT_INO, b"race", FileType::Regular, 0o644, 0, ME)
        .unwrap()
        .ino;
    // Block k holds its index and a version in every 8-byte word.
    let block = |k: usize, ver: u32| -> Vec<u8> {
        let w = (k as u64) << 32 | u64::from(ver);
        (0..512).flat_map(|_| w.to_le_bytes()).collect()
    };
    let all: Vec<u8> = (0..BLOCKS).flat_map(|k| block(k, 0)).collect();
    fs.write(f, 0, &all).unwrap();
    let done: Arc<Vec<AtomicU32>> = Arc::new((0..BLOCKS).map(|_| AtomicU32::new(0)).collect());
    let writer = {
        let (fs, done) = (fs.clone(), done.clone());
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(3);
            for ver in 1..=400u32 {
                let k = rng.random_range(0..BLOCKS);
                fs.write(f, (k * 4096) as u64, &block(k, ver)).unwrap();
                done[k].fetch_max(ver, Ordering::SeqCst);
            }
        })
    };
    let mut buf = [0u8; 4096];
    while !writer.is_finished() {
        for k in 0..BLOCKS {
            let floor = done[k].load(Ordering::SeqCst);
            assert_eq!(fs.read(f, (k * 4096) as u64, &mut buf).unwrap(), 4096);
            let first = u64::from_le_bytes(buf[..8].try_into().unwrap());
            assert!(
                buf.chunks(8).all(|w| w == first.to_le_bytes()),
                "block {k} is one write"
            );
            assert_eq!(first >> 32, k as u64, "block {k} holds itself");
            assert!(
                first as u32 >= floor,
                "block {k}: version {} read after version {floor} was written",
                first as u32
            );
        }
    }
    writer.join().unwrap();
    Arc::try_unwrap(fs).unwrap().unmount().unwrap();
}
