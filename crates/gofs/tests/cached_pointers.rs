//! Reads served from the cached data pointers (`fs/pointer_cache.rs`) stay right while the
//! addresses behind them change: overwrites, truncation, removal, and the cleaner moving
//! blocks under a concurrent reader.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use gofs::error::FsError;
use gofs::format::MemBlocks;
use gofs::fs::{Caller, FileType, Fs, Ino, MountOptions, ROOT_INO};

const ME: Caller = Caller { uid: 0, gid: 0 };
const BLOCK: usize = 4096;

fn volume(mib: usize, checkpoint_interval: Option<Duration>) -> (Arc<MemBlocks>, Fs) {
    let mem = Arc::new(MemBlocks::new(vec![0u8; mib << 20]));
    gofs::mkfs::mkfs_io(mem.clone(), &gofs::mkfs::MkfsOptions::default()).unwrap();
    let fs = Fs::mount_io(
        mem.clone(),
        MountOptions {
            read_only: false,
            checkpoint_interval,
        },
    )
    .unwrap();
    (mem, fs)
}

fn create(fs: &Fs, name: &str) -> Ino {
    fs.create(ROOT_INO, name.as_bytes(), FileType::Regular, 0o644, 0, ME)
        .unwrap()
        .ino
}

/// Block `k` of a tagged file: every 8 bytes hold `tag * 2^32 + k`.
fn tagged(tag: u64, k: u64) -> Vec<u8> {
    (0..BLOCK / 8)
        .flat_map(|_| ((tag << 32) | k).to_le_bytes())
        .collect()
}

/// Reads block `k` of `ino` (a 4 KiB read that is not sequential: the read-ahead windows
/// stay out of it).
fn read_block(fs: &Fs, ino: Ino, k: u64) -> Vec<u8> {
    let mut buf = vec![0u8; BLOCK];
    let n = fs.read(ino, k * BLOCK as u64, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn overwrites_truncation_and_extension_are_seen_through_cached_pointers() {
    let (_mem, fs) = volume(64, None);
    let f = create(&fs, "f");
    for k in 0..256 {
        fs.write(f, k * BLOCK as u64, &tagged(1, k)).unwrap();
    }
    // Every block twice, in an order no read-ahead follows: the second pass is served from
    // the cache the first filled.
    for _ in 0..2 {
        for k in (0..256).map(|i| i * 97 % 256) {
            assert_eq!(read_block(&fs, f, k), tagged(1, k), "block {k}");
        }
    }
    fs.write(f, 5 * BLOCK as u64, &tagged(2, 5)).unwrap();
    assert_eq!(read_block(&fs, f, 5), tagged(2, 5), "an overwrite");
    assert_eq!(read_block(&fs, f, 200), tagged(1, 200), "its neighbours");
    fs.setattr(
        f,
        &gofs::fs::SetAttr {
            size: Some(8 * BLOCK as u64),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        read_block(&fs, f, 200),
        Vec::<u8>::new(),
        "past the new end"
    );
    fs.write(f, 300 * BLOCK as u64, &tagged(3, 300)).unwrap();
    assert_eq!(
        read_block(&fs, f, 200),
        vec![0u8; BLOCK],
        "a hole after extension"
    );
    assert_eq!(read_block(&fs, f, 7), tagged(1, 7));
    assert_eq!(read_block(&fs, f, 300), tagged(3, 300));
    // A read spanning blocks, not block-aligned.
    let mut buf = vec![0u8; 3 * BLOCK];
    assert_eq!(
        fs.read(f, 4 * BLOCK as u64 + 100, &mut buf).unwrap(),
        3 * BLOCK
    );
    let want: Vec<u8> = [tagged(1, 4), tagged(2, 5), tagged(1, 6), tagged(1, 7)].concat();
    assert!(buf[..] == want[100..100 + 3 * BLOCK]);
}

#[test]
fn a_removed_file_is_not_read_through_its_cached_pointers() {
    let (_mem, fs) = volume(64, None);
    let f = create(&fs, "gone");
    for k in 0..16 {
        fs.write(f, k * BLOCK as u64, &tagged(1, k)).unwrap();
    }
    for k in [3, 9, 1, 12] {
        assert_eq!(read_block(&fs, f, k), tagged(1, k));
    }
    fs.unlink(ROOT_INO, b"gone").unwrap();
    let mut buf = vec![0u8; BLOCK];
    assert!(
        matches!(
            fs.read(f, 9 * BLOCK as u64, &mut buf),
            Err(FsError::NotFound)
        ),
        "the inode is gone"
    );
    // Its number may come back as another file: that file reads as itself.
    let g = create(&fs, "again");
    fs.write(g, 0, &tagged(5, 0)).unwrap();
    fs.write(g, 9 * BLOCK as u64, &tagged(5, 9)).unwrap();
    assert_eq!(read_block(&fs, g, 9), tagged(5, 9));
    assert_eq!(read_block(&fs, g, 3), vec![0u8; BLOCK]);
}

#[test]
fn a_reader_of_cached_pointers_sees_its_file_while_the_cleaner_moves_it() {
    const BLOCKS: u64 = 512;
    let (mem, fs) = volume(64, Some(Duration::from_millis(5)));
    let fs = Arc::new(fs);
    let keep = create(&fs, "keep");
    let junk = create(&fs, "junk");
    // One block of `keep` to three of `junk`: with `junk` removed, `keep`'s segments are a
    // quarter valid, the cheapest victims of the cleaner.
    for k in 0..BLOCKS {
        fs.write(keep, k * BLOCK as u64, &tagged(7, k)).unwrap();
        fs.write(junk, 3 * k * BLOCK as u64, &[0xAB; 3 * BLOCK])
            .unwrap();
    }
    let before: Vec<u32> = (0..BLOCKS)
        .map(|k| fs.data_address(keep, k).unwrap())
        .collect();
    fs.unlink(ROOT_INO, b"junk").unwrap();
    fs.sync().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (fs, stop) = (Arc::clone(&fs), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut reads = 0u64;
            let mut k = 1u64;
            while !stop.load(Ordering::Relaxed) {
                k = (k * 97 + 13) % BLOCKS;
                assert_eq!(read_block(&fs, keep, k), tagged(7, k), "block {k}");
                reads += 1;
            }
            reads
        })
    };
    // The cleaner empties `keep`'s segments one by one, and new data reuses them.
    let fill = create(&fs, "fill");
    let piece = vec![0x5A; 512 << 10];
    let mut cleaned = 0;
    for round in 0..8u64 {
        cleaned += usize::from(fs.collect_garbage().unwrap());
        fs.write(fill, (round % 4) * piece.len() as u64, &piece)
            .unwrap();
        fs.sync().unwrap();
    }
    assert!(cleaned > 0, "the cleaner found victims");
    stop.store(true, Ordering::Relaxed);
    let reads = reader.join().unwrap();
    assert!(reads > 0, "the reader ran");
    let moved = (0..BLOCKS)
        .filter(|&k| fs.data_address(keep, k).unwrap() != before[k as usize])
        .count();
    assert!(
        moved > 0,
        "the cleaner moved blocks of the file under the reader"
    );
    for k in 0..BLOCKS {
        assert_eq!(
            read_block(&fs, keep, k),
            tagged(7, k),
            "block {k} at the end"
        );
    }
    let fs = Arc::try_unwrap(fs).ok().unwrap();
    fs.unmount().unwrap();
    let fs = Fs::mount_io(mem, MountOptions::default()).unwrap();
    for k in (0..BLOCKS).step_by(61) {
        assert_eq!(
            read_block(&fs, keep, k),
            tagged(7, k),
            "block {k} after remount"
        );
    }
}
