//! Damaged images: bad magic, bad checksums, truncation, addresses outside the main area,
//! node chains that loop, impossible sizes, and random byte damage. Mount refuses or the
//! damaged file gives EIO; nothing panics.

use std::sync::Arc;

use gofs::error::FsError;
use gofs::format::{BLOCK_SIZE, MemBlocks};
use gofs::fs::{Caller, FileType, Fs, Ino, MountOptions, ROOT_INO};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ME: Caller = Caller { uid: 0, gid: 0 };

fn opts() -> MountOptions {
    MountOptions {
        read_only: false,
        checkpoint_interval: None,
    }
}

fn ro() -> MountOptions {
    MountOptions {
        read_only: true,
        checkpoint_interval: None,
    }
}

#[derive(Debug)]
struct Image {
    bytes: Vec<u8>,
    small: Ino,
    big: Ino,
    dir: Ino,
}

/// A 64 MiB image with a small file, a 5 MiB file (direct and indirect nodes) and a directory
/// (built once; each test damages its own copy).
fn populated() -> Image {
    static IMG: std::sync::OnceLock<Image> = std::sync::OnceLock::new();
    let i = IMG.get_or_init(build);
    Image {
        bytes: i.bytes.clone(),
        ..*i
    }
}

fn build() -> Image {
    let mem = Arc::new(MemBlocks::new(vec![0u8; 64 << 20]));
    gofs::mkfs::mkfs_io(mem.clone(), &gofs::mkfs::MkfsOptions::default()).unwrap();
    let fs = Fs::mount_io(mem.clone(), opts()).unwrap();
    let small = fs
        .create(ROOT_INO, b"small", FileType::Regular, 0o644, 0, ME)
        .unwrap()
        .ino;
    fs.write(small, 0, &[7u8; 10_000]).unwrap();
    let big = fs
        .create(ROOT_INO, b"big", FileType::Regular, 0o644, 0, ME)
        .unwrap()
        .ino;
    fs.write(big, 0, &vec![9u8; 5 << 20]).unwrap();
    let dir = fs.mkdir(ROOT_INO, b"dir", 0o755, ME).unwrap().ino;
    for i in 0..50 {
        fs.create(
            dir,
            format!("e{i}").as_bytes(),
            FileType::Regular,
            0o644,
            0,
            ME,
        )
        .unwrap();
    }
    fs.unmount().unwrap();
    Image {
        bytes: mem.to_vec(),
        small,
        big,
        dir,
    }
}

fn mount(bytes: Vec<u8>, o: MountOptions) -> Result<Fs, FsError> {
    Fs::mount_io(Arc::new(MemBlocks::new(bytes)), o)
}

fn node_addr(img: &Image, nid: Ino) -> usize {
    let fs = mount(img.bytes.clone(), ro()).unwrap();
    fs.node_address(nid).unwrap() as usize
}

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn bad_superblock_magic_in_both_copies_refuses_mount() {
    let mut b = populated().bytes;
    for blk in 0..2 {
        b[blk * BLOCK_SIZE + 1024] ^= 0xFF;
    }
    assert!(matches!(mount(b, ro()), Err(FsError::Corrupt(m)) if m.contains("magic")));
}

#[test]
fn one_bad_superblock_copy_falls_back_to_the_other() {
    let mut b = populated().bytes;
    b[1024] ^= 0xFF;
    let fs = mount(b, ro()).unwrap();
    assert_eq!(fs.lookup(ROOT_INO, b"small").unwrap().size, 10_000);
}

#[test]
fn checkpoint_crc_damage_falls_back_to_the_older_pack_or_refuses() {
    let img = populated();
    let cp = 512 * BLOCK_SIZE; // cp_blkaddr of a mkfs volume
    // Damage pack 0 only: the other pack is valid, mount works.
    let mut one = img.bytes.clone();
    one[cp + 100] ^= 1;
    let _ = mount(one, ro()).unwrap();
    // Damage both packs: no valid checkpoint.
    let mut both = img.bytes.clone();
    both[cp + 100] ^= 1;
    both[cp + 512 * BLOCK_SIZE + 100] ^= 1;
    assert!(matches!(mount(both, ro()), Err(FsError::Corrupt(m)) if m.contains("crc")));
}

#[test]
fn truncated_image_refuses_mount() {
    let mut b = populated().bytes;
    b.truncate(20 << 20);
    assert!(matches!(mount(b, ro()), Err(FsError::Corrupt(m)) if m.contains("main area")));
    assert!(mount(vec![0u8; 4096], ro()).is_err());
    assert!(mount(Vec::new(), ro()).is_err());
}

#[test]
fn data_address_outside_the_main_area_gives_eio_for_that_file_only() {
    let img = populated();
    let at = node_addr(&img, img.small) * BLOCK_SIZE;
    let mut b = img.bytes.clone();
    put32(&mut b, at + 360, 5); // i_addr[0] into the superblock area
    let fs = mount(b, ro()).unwrap();
    let mut buf = vec![0u8; 100];
    let err = fs.read(img.small, 0, &mut buf).unwrap_err();
    assert_eq!(err.errno(), libc::EIO, "{err}");
    assert_eq!(fs.read(img.big, 0, &mut buf).unwrap(), 100);
    let st = fs.walk(1000);
    assert_eq!(st.errors, 1);
}

#[test]
fn nat_entry_outside_the_main_area_refuses_mount() {
    let img = populated();
    let addr = node_addr(&img, img.big) as u32;
    let mut pat = vec![0u8];
    pat.extend_from_slice(&img.big.to_le_bytes());
    pat.extend_from_slice(&addr.to_le_bytes());
    let mut b = img.bytes.clone();
    let (nat_lo, nat_hi) = (2560 * BLOCK_SIZE, 3584 * BLOCK_SIZE);
    let mut hits = 0;
    for i in nat_lo..nat_hi - 9 {
        if b[i + 1..i + 9] == pat[1..] {
            put32(&mut b, i + 5, 0xFFFF_FF00);
            hits += 1;
        }
    }
    assert!(hits > 0, "the NAT entry of the big file was found");
    assert!(
        matches!(mount(b, ro()), Err(FsError::Corrupt(m)) if m.contains("outside the main area"))
    );
}

#[test]
fn node_chain_pointing_back_to_the_inode_gives_eio() {
    let img = populated();
    let at = node_addr(&img, img.big) * BLOCK_SIZE;
    let mut b = img.bytes.clone();
    // i_nid[0] (the first direct node) now names the inode itself: a loop.
    put32(&mut b, at + 360 + 4 * 923, img.big);
    let fs = mount(b, ro()).unwrap();
    let mut buf = vec![0u8; 4096];
    let err = fs.read(img.big, 923 * 4096, &mut buf).unwrap_err();
    assert_eq!(err.errno(), libc::EIO, "{err}");
    assert_eq!(
        fs.read(img.big, 0, &mut buf).unwrap(),
        4096,
        "blocks in the inode still read"
    );
}

#[test]
fn impossible_sizes_give_errors_not_panics() {
    let img = populated();
    let mut b = img.bytes.clone();
    let at = node_addr(&img, img.dir) * BLOCK_SIZE;
    b[at + 16..at + 24].copy_from_slice(&u64::MAX.to_le_bytes()); // directory i_size
    let at = node_addr(&img, img.small) * BLOCK_SIZE;
    b[at + 16..at + 24].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    let fs = mount(b, ro()).unwrap();
    assert!(fs.readdir(img.dir).is_err());
    let mut buf = vec![0u8; 64];
    // Far past the largest file F2FS can map: an error, not a panic or a huge allocation.
    assert!(fs.read(img.small, u64::MAX / 4, &mut buf).is_err());
    let _ = fs.walk(1000);
}

#[test]
fn random_metadata_damage_never_panics() {
    let img = populated();
    let mut rng = StdRng::seed_from_u64(3);
    let meta_end = 4096 * BLOCK_SIZE + 16 * 512 * BLOCK_SIZE;
    for _ in 0..60 {
        let mut b = img.bytes.clone();
        for _ in 0..rng.random_range(1..40) {
            let i = rng.random_range(0..meta_end);
            b[i] = rng.random();
        }
        if let Ok(fs) = mount(b, opts()) {
            let _ = fs.walk(500);
            let _ = fs.create(ROOT_INO, b"new", FileType::Regular, 0o644, 0, ME);
            let _ = fs.unmount();
        }
    }
}
