//! `gofs::fsck` against real images: clean ones (our mkfs, mkfs.f2fs + sload.f2fs, a GoFS
//! session) pass; each class of damage is found and named, and `fsck.f2fs --dry-run` agrees
//! that the damaged image is broken; random damage to the metadata never panics.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use gofs::f2fs_tools;
use gofs::format::checkpoint::Checkpoint;
use gofs::format::dentry::{DentryLayout, RawDentry, parse_dentries};
use gofs::format::node::Node;
use gofs::format::segment::SIT_ENTRIES_PER_BLOCK;
use gofs::format::superblock::{SUPER_OFFSET, Superblock};
use gofs::format::{BLOCK_SIZE, BLOCKS_PER_SEG, MemBlocks, test_bit_msb};
use gofs::fs::{Caller, FileType, Fs, Ino, MountOptions, ROOT_INO};
use gofs::fsck::{Check, FsckOptions, FsckReport, check};
use proptest::prelude::*;

const ME: Caller = Caller { uid: 0, gid: 0 };

fn opts(read_only: bool) -> MountOptions {
    MountOptions {
        read_only,
        checkpoint_interval: None,
    }
}

fn fsck(bytes: &[u8]) -> FsckReport {
    check(&MemBlocks::new(bytes.to_vec()), &FsckOptions::default()).unwrap()
}

fn assert_clean(bytes: &[u8], what: &str) -> FsckReport {
    let r = fsck(bytes);
    assert!(r.is_clean(), "{what}: {:#?}", r.problems);
    assert_eq!(r.warnings, 0, "{what}: {:#?}", r.problems);
    r
}

/// Runs fsck.f2fs --dry-run on `bytes`; `None` when the tool is not installed.
fn f2fs_problems(bytes: &[u8]) -> Option<Vec<String>> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("img");
    std::fs::write(&p, bytes).unwrap();
    match f2fs_tools::fsck(&p) {
        Ok(out) => Some(f2fs_tools::fsck_problems(&out)),
        Err(f2fs_tools::ToolError::Spawn(..)) => None,
        Err(e) => panic!("{e}"),
    }
}

/// An image a GoFS session made: files small and large (direct nodes), a directory with
/// 600 entries (several hash levels), a hard link, a symlink, renames of a file and of a
/// directory, an unlink and a truncate; then unmounted.
#[derive(Debug)]
struct Session {
    bytes: Vec<u8>,
    small: Ino,
    big: Ino,
    other: Ino,
    dir: Ino,
}

fn session() -> &'static Session {
    static S: OnceLock<Session> = OnceLock::new();
    S.get_or_init(|| {
        let mem = Arc::new(MemBlocks::new(fresh_image()));
        let fs = Fs::mount_io(mem.clone(), opts(false)).unwrap();
        let mk = |dir, name: &str| {
            fs.create(dir, name.as_bytes(), FileType::Regular, 0o644, 0, ME)
                .unwrap()
                .ino
        };
        let small = mk(ROOT_INO, "small");
        fs.write(small, 0, &[7u8; 10_000]).unwrap();
        let big = mk(ROOT_INO, "big");
        fs.write(big, 0, &vec![9u8; 5 << 20]).unwrap();
        let other = mk(ROOT_INO, "other");
        fs.write(other, 0, &[3u8; 3 * BLOCK_SIZE]).unwrap();
        let dir = fs.mkdir(ROOT_INO, b"dir", 0o755, ME).unwrap().ino;
        let sub = fs.mkdir(dir, b"sub", 0o755, ME).unwrap().ino;
        // Past the two blocks of hash level 0: the names spread over buckets of level 1+.
        for i in 0..600 {
            mk(dir, &format!("entry-{i}"));
        }
        fs.link(small, sub, b"small-link").unwrap();
        fs.symlink(dir, b"sym", b"../small", ME).unwrap();
        fs.rename(dir, b"entry-3", sub, b"moved").unwrap();
        // A directory moved to another parent: its '..' and both parents' links change.
        fs.mkdir(ROOT_INO, b"moving", 0o755, ME).unwrap();
        fs.rename(ROOT_INO, b"moving", sub, b"moved-dir").unwrap();
        fs.unlink(dir, b"entry-4").unwrap();
        let t = mk(ROOT_INO, "truncated");
        fs.write(t, 0, &[1u8; 5 * BLOCK_SIZE]).unwrap();
        let attr = gofs::fs::SetAttr {
            size: Some(100),
            ..Default::default()
        };
        fs.setattr(t, &attr).unwrap();
        fs.unmount().unwrap();
        Session {
            bytes: mem.to_vec(),
            small,
            big,
            other,
            dir,
        }
    })
}

/// Where things live in an image whose NAT and SIT journals are empty (GoFS writes them
/// back to the areas at every checkpoint).
#[derive(Debug)]
struct Layout {
    sb: Superblock,
    cp: Checkpoint,
    cp_pack: u32,
}

impl Layout {
    fn of(bytes: &[u8]) -> Self {
        let blocks = (bytes.len() / BLOCK_SIZE) as u64;
        let sb = Superblock::parse(&bytes[SUPER_OFFSET..BLOCK_SIZE], blocks).unwrap();
        let cp_pack = fsck(bytes).checkpoint_pack.unwrap();
        let at = (sb.cp_blkaddr + cp_pack * BLOCKS_PER_SEG) as usize * BLOCK_SIZE;
        let mut b = [0u8; BLOCK_SIZE];
        b.copy_from_slice(&bytes[at..at + BLOCK_SIZE]);
        let cp = Checkpoint::parse(&b, sb.sit_bitmap_bytes(), sb.nat_bitmap_bytes()).unwrap();
        Self { sb, cp, cp_pack }
    }

    /// Byte offset of the active NAT entry of `nid`.
    fn nat_entry(&self, nid: u32) -> usize {
        let i = nid / 455;
        let second = test_bit_msb(&self.cp.nat_bitmap, i as usize);
        let blk = self.sb.nat_blkaddr
            + i / BLOCKS_PER_SEG * 2 * BLOCKS_PER_SEG
            + i % BLOCKS_PER_SEG
            + if second { BLOCKS_PER_SEG } else { 0 };
        blk as usize * BLOCK_SIZE + (nid % 455) as usize * 9
    }

    fn node_addr(&self, bytes: &[u8], nid: u32) -> u32 {
        let o = self.nat_entry(nid) + 5;
        u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap())
    }

    fn node(&self, bytes: &[u8], nid: u32) -> (usize, Node) {
        let at = self.node_addr(bytes, nid) as usize * BLOCK_SIZE;
        let mut b = Box::new([0u8; BLOCK_SIZE]);
        b.copy_from_slice(&bytes[at..at + BLOCK_SIZE]);
        (at, Node::from_block(b))
    }

    /// Byte offset of the active SIT entry of main segment `segno`.
    fn sit_entry(&self, segno: u32) -> usize {
        let i = segno / SIT_ENTRIES_PER_BLOCK as u32;
        let second = test_bit_msb(&self.cp.sit_bitmap, i as usize);
        let blk = self.sb.sit_blkaddr
            + i
            + if second {
                self.sb.segment_count_sit / 2 * BLOCKS_PER_SEG
            } else {
                0
            };
        blk as usize * BLOCK_SIZE + (segno as usize % SIT_ENTRIES_PER_BLOCK) * 74
    }

    fn is_curseg(&self, segno: u32) -> bool {
        self.cp.cur_data_segno[..3].contains(&segno) || self.cp.cur_node_segno[..3].contains(&segno)
    }
}

fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Damages a copy of the session image with `f`, then expects our check to report `want`
/// and fsck.f2fs (where installed) to find a problem too.
fn damaged(want: Check, f: impl FnOnce(&Layout, &mut Vec<u8>)) -> FsckReport {
    let s = session();
    let mut bytes = s.bytes.clone();
    let l = Layout::of(&bytes);
    f(&l, &mut bytes);
    let r = fsck(&bytes);
    assert!(
        r.has(want),
        "{} not reported: {:#?}",
        want.name(),
        r.problems
    );
    assert!(!r.is_clean());
    if let Some(p) = f2fs_problems(&bytes) {
        assert!(
            !p.is_empty(),
            "fsck.f2fs accepts the image damaged for {}",
            want.name()
        );
    }
    r
}

#[test]
fn an_image_our_mkfs_made_is_clean() {
    let r = assert_clean(&fresh_image(), "fresh mkfs");
    assert_eq!((r.dirs, r.files, r.nodes), (1, 0, 1));
}

#[test]
fn an_image_mkfs_f2fs_and_sload_f2fs_made_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    // A deep tree, a directory of 3000 names (several hash levels), a file past the
    // direct nodes (indirect nodes), a symlink, a hard link.
    let mut deep = src.clone();
    for i in 0..40 {
        deep = deep.join(format!("level{i}"));
    }
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("leaf"), b"deep").unwrap();
    let wide = src.join("wide");
    std::fs::create_dir(&wide).unwrap();
    for i in 0..3000 {
        std::fs::write(wide.join(format!("name-{i:05}")), b"").unwrap();
    }
    std::fs::write(src.join("big"), vec![5u8; 14 << 20]).unwrap();
    std::os::unix::fs::symlink("big", src.join("link")).unwrap();
    std::fs::hard_link(src.join("big"), src.join("hard")).unwrap();
    let img = dir.path().join("img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(128 << 20)
        .unwrap();
    let tools = f2fs_tools::mkfs(&img).and_then(|_| f2fs_tools::sload(&src, &img));
    if let Err(f2fs_tools::ToolError::Spawn(..)) = tools {
        eprintln!("f2fs-tools not installed: skipped");
        return;
    }
    tools.unwrap();
    let bytes = std::fs::read(&img).unwrap();
    let r = assert_clean(&bytes, "sload.f2fs image");
    assert_eq!(r.dirs, 1 + 40 + 1, "{r:?}");
    assert_eq!(r.files, 1 + 3000 + 1 + 1, "{r:?}");
    assert!(f2fs_problems(&bytes).unwrap().is_empty());
}

#[test]
fn an_image_a_gofs_session_left_is_clean() {
    let s = session();
    let r = assert_clean(&s.bytes, "GoFS session");
    assert_eq!(r.dirs, 4);
    if let Some(p) = f2fs_problems(&s.bytes) {
        assert!(p.is_empty(), "{p:?}");
    }
}

#[test]
fn a_flipped_sit_bit_is_an_unowned_valid_block() {
    damaged(Check::SitUnowned, |l, b| {
        // The last block of the main area: free in a 64 MiB image this small session uses.
        let segno = l.sb.segment_count_main - 1;
        assert!(!l.is_curseg(segno));
        let at = l.sit_entry(segno) + 2 + 63;
        b[at] ^= 0x01;
    });
}

#[test]
fn a_nat_entry_pointing_at_another_node_is_caught() {
    let s = session();
    let r = damaged(Check::NodeFooter, |l, b| {
        let other = l.node_addr(b, s.other);
        put_u32(b, l.nat_entry(s.small) + 5, other);
    });
    assert!(r.has(Check::BlockTwice), "{:#?}", r.problems);
}

#[test]
fn a_data_address_shared_by_two_files_is_owned_twice() {
    let s = session();
    damaged(Check::BlockTwice, |l, b| {
        let (_, big) = l.node(b, s.big);
        let (at, small) = l.node(b, s.small);
        let shared = big.i_addr(0);
        let slot = gofs::format::node::I_ADDR_OFFSET + 4 * small.extra_isize_addrs();
        put_u32(b, at + slot, shared);
    });
}

#[test]
fn a_dentry_naming_an_unused_nid_is_caught() {
    let s = session();
    let r = damaged(Check::DentryIno, |l, b| {
        let (_, root) = l.node(b, ROOT_INO);
        let blk = root.i_addr(0) as usize * BLOCK_SIZE;
        let lay = DentryLayout::BLOCK;
        let d = parse_dentries(&b[blk..blk + BLOCK_SIZE], lay).unwrap();
        let e = d.iter().find(|e| e.name == b"other").unwrap();
        let unused = l.sb.max_nid() - 1;
        put_u32(b, blk + lay.dentry_off + e.pos * 11 + 4, unused);
    });
    // The file it named is now reachable from nothing.
    let leaked = r
        .problems
        .iter()
        .any(|p| p.check == Check::LeakedNid && p.nid == Some(s.other));
    assert!(leaked, "{:#?}", r.problems);
}

#[test]
fn a_wrong_link_count_is_caught() {
    let s = session();
    damaged(Check::Links, |l, b| {
        let (at, _) = l.node(b, s.other);
        put_u32(b, at + 12, 5);
    });
}

#[test]
fn an_ssa_entry_naming_the_wrong_owner_is_caught() {
    let s = session();
    damaged(Check::Ssa, |l, b| {
        let (_, big) = l.node(b, s.big);
        // A data block of the big file in a full segment (its summary is in the SSA area).
        let blk = (0..big.addrs_per_inode(true))
            .map(|i| big.i_addr(i))
            .find(|&a| !l.is_curseg(l.sb.segno(a)))
            .unwrap();
        let (segno, off) = (l.sb.segno(blk), (blk - l.sb.main_blkaddr) % BLOCKS_PER_SEG);
        let at = (l.sb.ssa_blkaddr + segno) as usize * BLOCK_SIZE + off as usize * 7;
        put_u32(b, at, s.other);
    });
}

#[test]
fn a_sit_count_that_disagrees_with_its_bitmap_is_caught() {
    damaged(Check::SitCount, |l, b| {
        let segno = (0..l.sb.segment_count_main)
            .find(|&s| {
                let at = l.sit_entry(s);
                u16::from_le_bytes([b[at], b[at + 1]]) & 0x3FF > 1
            })
            .unwrap();
        let at = l.sit_entry(segno);
        let v = u16::from_le_bytes([b[at], b[at + 1]]) - 1;
        b[at..at + 2].copy_from_slice(&v.to_le_bytes());
    });
}

#[test]
fn a_checkpoint_block_count_that_disagrees_is_caught() {
    damaged(Check::CheckpointCounts, |l, b| {
        let mut cp = l.cp.clone();
        cp.valid_block_count += 3;
        let blk = cp.serialize();
        let first = (l.sb.cp_blkaddr + l.cp_pack * BLOCKS_PER_SEG) as usize;
        let last = first + cp.pack_total_block_count as usize - 1;
        for at in [first, last] {
            b[at * BLOCK_SIZE..(at + 1) * BLOCK_SIZE].copy_from_slice(&blk[..]);
        }
    });
}

/// Byte offset and entry of dentry `name` in the non-inline directory `dir`.
fn find_dentry(l: &Layout, b: &[u8], dir: Ino, name: &[u8]) -> (usize, RawDentry) {
    let (_, n) = l.node(b, dir);
    let blocks = (n.size() as usize).div_ceil(BLOCK_SIZE);
    let per = n.addrs_per_inode(true);
    assert!(blocks <= per, "the directory fits in its inode's addresses");
    for i in 0..blocks {
        let blk = n.i_addr(i) as usize * BLOCK_SIZE;
        if blk == 0 {
            continue;
        }
        let d = parse_dentries(&b[blk..blk + BLOCK_SIZE], DentryLayout::BLOCK).unwrap();
        if let Some(e) = d.into_iter().find(|e| e.name == name) {
            return (blk + DentryLayout::BLOCK.dentry_off + e.pos * 11, e);
        }
    }
    panic!("no dentry {name:?}");
}

#[test]
fn a_dentry_whose_hash_is_wrong_is_caught() {
    let s = session();
    damaged(Check::DentryHash, |l, b| {
        let (at, e) = find_dentry(l, b, s.dir, b"entry-599");
        put_u32(b, at, e.hash ^ 0x8000_0001);
    });
}

#[test]
fn a_dot_dot_naming_the_wrong_parent_is_caught() {
    let s = session();
    damaged(Check::Dots, |l, b| {
        let (at, _) = find_dentry(l, b, s.dir, b"..");
        put_u32(b, at + 4, s.dir);
    });
}

#[test]
fn an_i_blocks_that_disagrees_with_the_mapping_is_caught() {
    let s = session();
    damaged(Check::IBlocks, |l, b| {
        let (at, n) = l.node(b, s.big);
        b[at + 24..at + 32].copy_from_slice(&(n.blocks() + 1).to_le_bytes());
    });
}

#[test]
fn inline_data_flags_on_a_mapped_file_are_caught() {
    let s = session();
    damaged(Check::Inline, |l, b| {
        let (at, _) = l.node(b, s.other);
        b[at + 3] |= gofs::format::node::F2FS_INLINE_DATA;
    });
}

#[test]
fn a_crash_image_with_an_orphan_is_clean() {
    let mem = Arc::new(MemBlocks::new(fresh_image()));
    let fs = Fs::mount_io(mem.clone(), opts(false)).unwrap();
    let f = fs
        .create(ROOT_INO, b"open-unlinked", FileType::Regular, 0o644, 0, ME)
        .unwrap()
        .ino;
    fs.write(f, 0, &[4u8; 3 * BLOCK_SIZE]).unwrap();
    fs.open_inode(f).unwrap();
    fs.unlink(ROOT_INO, b"open-unlinked").unwrap();
    fs.sync().unwrap();
    // A crash: no unmount, so no CP_UMOUNT and the orphan stays listed.
    drop(fs);
    let bytes = mem.to_vec();
    let r = assert_clean(&bytes, "synced image with an orphan");
    assert_eq!(r.files, 1, "the orphan is checked: {r:?}");
    if let Some(p) = f2fs_problems(&bytes) {
        assert!(p.is_empty(), "{p:?}");
    }
}

/// A fresh 64 MiB image of our mkfs.
fn fresh_image() -> Vec<u8> {
    let mem = Arc::new(MemBlocks::new(vec![0u8; 64 << 20]));
    gofs::mkfs::mkfs_io(mem.clone(), &gofs::mkfs::MkfsOptions::default()).unwrap();
    mem.to_vec()
}

#[test]
fn the_cli_exits_nonzero_and_prints_json_on_damage() {
    let s = session();
    let dir = tempfile::tempdir().unwrap();
    let run = |p: &Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gofs"))
            .args(["fsck".as_ref(), p.as_os_str(), "--json".as_ref()])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.success(), v)
    };
    let good = dir.path().join("good");
    std::fs::write(&good, &s.bytes).unwrap();
    let (ok, v) = run(&good);
    assert!(ok, "{v}");
    assert_eq!(v["errors"], 0);
    let mut bytes = s.bytes.clone();
    let l = Layout::of(&bytes);
    let (at, _) = l.node(&bytes, s.other);
    put_u32(&mut bytes, at + 12, 9);
    let bad = dir.path().join("bad");
    std::fs::write(&bad, &bytes).unwrap();
    let (ok, v) = run(&bad);
    assert!(!ok, "{v}");
    let p = &v["problems"][0];
    assert_eq!(
        (p["check"].as_str(), p["ino"].as_u64()),
        (Some("links"), Some(u64::from(s.other))),
        "{v}"
    );
}

#[test]
fn images_without_a_superblock_are_reported_not_refused() {
    // Zeros, and a device too small for even the superblock blocks.
    let r = fsck(&vec![0u8; 1 << 20]);
    assert!(r.has(Check::Superblock), "{r:?}");
    assert_eq!(r.superblock_copy, None);
    assert!(
        check(
            &MemBlocks::new(vec![0u8; BLOCK_SIZE]),
            &FsckOptions::default()
        )
        .is_err()
    );
    // One problem kept, all counted.
    let mut b = session().bytes.clone();
    let l = Layout::of(&b);
    for ino in [session().small, session().big, session().other] {
        let (at, _) = l.node(&b, ino);
        put_u32(&mut b, at + 12, 77);
    }
    let r = check(&MemBlocks::new(b), &FsckOptions { max_problems: 1 }).unwrap();
    assert_eq!((r.problems.len(), r.errors), (1, 3), "{r:?}");
}

/// A small image with a directory of a few files, and the main-area blocks worth damaging:
/// its inodes and both directories' dentry blocks (built once).
fn small_image() -> &'static (Vec<u8>, Vec<u32>) {
    static IMG: OnceLock<(Vec<u8>, Vec<u32>)> = OnceLock::new();
    IMG.get_or_init(|| {
        let mem = Arc::new(MemBlocks::new(fresh_image()));
        let fs = Fs::mount_io(mem.clone(), opts(false)).unwrap();
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, ME).unwrap().ino;
        let mut inos = vec![ROOT_INO, d];
        for i in 0..5u8 {
            let f = fs
                .create(d, &[b'f', b'0' + i], FileType::Regular, 0o644, 0, ME)
                .unwrap()
                .ino;
            fs.write(f, 0, &vec![i; 3000 * usize::from(i)]).unwrap();
            inos.push(f);
        }
        fs.unmount().unwrap();
        let b = mem.to_vec();
        let l = Layout::of(&b);
        let mut targets: Vec<u32> = inos.iter().map(|&i| l.node_addr(&b, i)).collect();
        targets.extend([ROOT_INO, d].map(|dir| l.node(&b, dir).1.i_addr(0)));
        (b, targets)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random bytes in the metadata area (superblocks, checkpoints, SIT, NAT, SSA) or in the
    /// inodes and dentry blocks: the check reports, it never panics.
    #[test]
    fn random_metadata_damage_never_panics(
        hits in proptest::collection::vec((any::<u32>(), any::<u8>()), 1..64),
        in_main in any::<bool>(),
    ) {
        let (img, main) = small_image();
        let mut b = img.clone();
        let sb = Superblock::parse(&b[SUPER_OFFSET..BLOCK_SIZE], (b.len() / BLOCK_SIZE) as u64)
            .unwrap();
        // The blocks that hold something: both superblocks, both checkpoint packs, the
        // first SIT, NAT and SSA blocks of both copies, the first node blocks.
        let mut targets: Vec<u32> = vec![0, 1];
        for base in [sb.cp_blkaddr, sb.cp_blkaddr + BLOCKS_PER_SEG] {
            targets.extend(base..base + 8);
        }
        let sit2 = sb.sit_blkaddr + sb.segment_count_sit / 2 * BLOCKS_PER_SEG;
        for base in [sb.sit_blkaddr, sit2, sb.nat_blkaddr, sb.nat_blkaddr + BLOCKS_PER_SEG] {
            targets.extend(base..base + 2);
        }
        targets.extend(sb.ssa_blkaddr..sb.ssa_blkaddr + 6);
        if in_main {
            targets = main.clone();
        }
        for (k, v) in hits {
            let blk = targets[k as usize % targets.len()] as usize;
            b[blk * BLOCK_SIZE + (k >> 20) as usize % BLOCK_SIZE] = v;
        }
        let _ = check(&MemBlocks::new(b), &FsckOptions::default());
    }
}
