//! PStore end to end over emulated and file-backed NVMe: metadata and data operations,
//! inline first blocks, remote blocks, checkpoints and reopening.

mod pstore_support;

use std::sync::Arc;

use gpu_nvme::controller::file::{FileController, FileControllerConfig};
use gpu_nvme::device::{DeviceConfig, NvmeDevice};
use peakfs::pstore::inode::{DataDistribution, Hint, WrittenBy};
use peakfs::pstore::zone::{KeyedPages, LateBytes, WriteBehind, Zone, ZoneError, ZoneTransfers};
use peakfs::pstore::{NewInode, PStore, PStoreConfig, PStoreError, Relink, SetAttr, Unlinked};
use proptest::prelude::*;
use pstore_support::{
    check_pages, fsync_cut_power_and_reopen, kept_prefix, small_config, swarm, swarm_queues,
    swarm_slow_writes, write_out_config,
};
use swarmio::SwarmIo;

const REG: u32 = 0o100644;
const DIR: u32 = 0o040755;

#[test]
fn the_inode_table_has_room_for_every_inode_slot_from_the_start_and_never_grows() {
    let (_c, dev) = swarm(32 << 20, 4096);
    let cfg = small_config(4096);
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    let room = s.stats().inode_table_room;
    assert!(room >= s.stats().inode_slots, "{room} entries of room");
    for i in 0..1500 {
        s.create(1, format!("f{i}").as_bytes(), REG, 0, 0, Hint::default())
            .unwrap();
    }
    assert_eq!(s.stats().inode_table_room, room, "grown while serving");
    s.fsync().unwrap();
    let inodes = s.stats().inodes;
    drop(s);
    let s = PStore::open(dev, &cfg).unwrap();
    assert_eq!(s.stats().inodes, inodes);
    assert!(s.stats().inode_table_room >= s.stats().inode_slots);
}

#[test]
fn created_entries_are_found_listed_in_order_and_unlinked() {
    let (_c, dev) = swarm(32 << 20, 4096);
    let mut s = PStore::format(dev, &small_config(4096)).unwrap();
    let d = s.create(1, b"dir", DIR, 0, 0, Hint::default()).unwrap();
    assert!(d.is_dir());
    let mut inos = Vec::new();
    for i in (0..50).rev() {
        let f = s
            .create(
                d.ino,
                format!("f.{i:02}").as_bytes(),
                REG,
                7,
                8,
                Hint::default(),
            )
            .unwrap();
        inos.push(f.ino);
    }
    assert!(matches!(
        s.create(d.ino, b"f.07", REG, 0, 0, Hint::default()),
        Err(PStoreError::Exists(_))
    ));
    let f7 = s.lookup(d.ino, b"f.07").unwrap();
    let a = s.getattr(f7).unwrap();
    assert_eq!((a.uid, a.gid, a.nlink, a.size), (7, 8, 1, 0));
    let page = s.readdir(d.ino, Some(b"f.09"), 3);
    let names: Vec<_> = page.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(
        names,
        vec![b"f.10".to_vec(), b"f.11".to_vec(), b"f.12".to_vec()]
    );
    assert_eq!(s.readdir(d.ino, None, 100).len(), 50);
    s.write(f7, 0, b"hello").unwrap();
    s.unlink(d.ino, b"f.07").unwrap();
    assert!(s.lookup(d.ino, b"f.07").is_none());
    assert!(matches!(s.getattr(f7), Err(PStoreError::NoInode(_))));
    assert!(matches!(
        s.unlink(d.ino, b"f.07"),
        Err(PStoreError::NoEntry { .. })
    ));
    s.fsync().unwrap();
    check_pages(&mut s);
    assert_eq!(s.stats().inodes, 50);
}

#[test]
fn with_deferred_settling_every_later_call_sees_the_last_operation_whole() {
    let (ctrl, dev) = swarm(32 << 20, 4096);
    let mut cfg = small_config(4096);
    // Two Icache blocks: the deferred inode images also go through evictions.
    cfg.icache_blocks = 2;
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    s.defer_settle(true).unwrap();
    let d = s.create(1, b"d", DIR, 0, 0, Hint::default()).unwrap();
    let mut inos = Vec::new();
    for i in 0..100u32 {
        // Each create's inode image waits; the getattr right after must settle it first.
        let f = s
            .create(
                d.ino,
                format!("f{i}").as_bytes(),
                REG,
                i,
                0,
                Hint::default(),
            )
            .unwrap();
        assert_eq!(s.getattr(f.ino).unwrap().uid, i);
        s.write(f.ino, 0, &i.to_le_bytes()).unwrap();
        inos.push(f.ino);
    }
    // A sub-directory raises its parent's link count in the same deferred transaction.
    s.create(d.ino, b"sub", DIR, 0, 0, Hint::default()).unwrap();
    assert_eq!(s.getattr(d.ino).unwrap().nlink, 3);
    let last = s
        .create(d.ino, b"last", REG, 7, 0, Hint::default())
        .unwrap();
    s.fsync().unwrap();
    // Not fsynced: may be lost, never half there.
    s.create(d.ino, b"after", REG, 0, 0, Hint::default())
        .unwrap();
    drop(s);
    ctrl.power_cut().unwrap();
    let mut r = PStore::open(dev, &cfg).unwrap();
    assert_eq!(r.getattr(last.ino).unwrap().uid, 7);
    for (i, ino) in inos.iter().enumerate() {
        let mut b = [0u8; 4];
        assert_eq!(r.read(*ino, 0, &mut b).unwrap(), 4);
        assert_eq!(u32::from_le_bytes(b), i as u32);
    }
    if let Some(ino) = r.lookup(d.ino, b"after") {
        assert_eq!(r.getattr(ino).unwrap().nlink, 1);
    }
    check_pages(&mut r);
}

#[test]
fn a_create_answered_before_its_dentry_is_in_place_is_seen_by_every_later_call() {
    let (_ctrl, dev) = swarm(32 << 20, 4096);
    let mut s = PStore::format(dev, &small_config(4096)).unwrap();
    s.defer_settle(true).unwrap();
    assert!(!s.is_unsettled(), "nothing done yet");
    let d = s.create(1, b"d", DIR, 0, 0, Hint::default()).unwrap();
    assert!(
        s.is_unsettled(),
        "a create answered early waits for the settle"
    );
    s.settle().unwrap();
    assert!(!s.is_unsettled(), "settled");
    let before = s.stats();
    // Each reader, first thing after a create whose dentry, inode-table entry and inode
    // image wait for the settle after its reply.
    type Reader = fn(&mut PStore, u64, u64);
    let readers: [(&str, Reader); 6] = [
        ("lookup", |s, d, f| assert_eq!(s.lookup(d, b"f"), Some(f))),
        ("readdir", |s, d, f| {
            assert_eq!(s.readdir(d, None, 10), vec![(b"f".to_vec(), f)]);
        }),
        ("has_dentries", |s, d, _| assert!(s.has_dentries(d))),
        ("inode_offset", |s, _, f| {
            assert!(s.inode_offset(f).is_some())
        }),
        ("getattr", |s, _, f| {
            assert_eq!(s.getattr(f).unwrap().uid, 42)
        }),
        ("create again", |s, d, _| {
            let again = s.create(d, b"f", REG, 0, 0, Hint::default());
            assert!(matches!(again, Err(PStoreError::Exists(_))), "{again:?}");
        }),
    ];
    for (what, read) in readers {
        let f = s.create(d.ino, b"f", REG, 42, 0, Hint::default()).unwrap();
        // The create is answered, its entries not yet in the tables.
        assert_eq!(s.stats().dentries, before.dentries, "{what}: not deferred");
        assert_eq!(s.stats().inodes, before.inodes, "{what}: not deferred");
        read(&mut s, d.ino, f.ino);
        assert_eq!(s.stats().dentries, before.dentries + 1, "{what}");
        assert_eq!(s.stats().inodes, before.inodes + 1, "{what}");
        s.unlink(d.ino, b"f").unwrap();
    }
    // A directory made here raises its parent's link count once it is in place.
    s.create(d.ino, b"sub", DIR, 0, 0, Hint::default()).unwrap();
    assert_eq!(s.getattr(d.ino).unwrap().nlink, 3);
    check_pages(&mut s);
}

#[test]
fn pages_freed_since_the_last_commit_are_reused_instead_of_refusing_a_write() {
    let (ctrl, dev) = swarm(32 << 20, 4096);
    let cfg = small_config(4096);
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    s.defer_settle(true).unwrap();
    // Two thirds of the data pages each: the second file fits only in the first one's pages.
    let len = (s.stats().data_pages * 2 / 3 * 4096) as usize;
    let a = s.create(1, b"a", REG, 0, 0, Hint::default()).unwrap();
    s.write(a.ino, 0, &vec![0xaa; len]).unwrap();
    s.unlink(1, b"a").unwrap();
    // No fsync: the unlink's frees are not durable, the pages not yet free.
    assert!(s.stats().pages_used > s.stats().data_pages / 2);
    let b = s.create(1, b"b", REG, 0, 0, Hint::default()).unwrap();
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    s.write(b.ino, 0, &data).unwrap();
    let mut back = vec![0u8; len];
    assert_eq!(s.read(b.ino, 0, &mut back).unwrap(), len);
    assert!(back == data, "the second file reads back");
    // More than all the pages at once is still refused.
    let c = s.create(1, b"c", REG, 0, 0, Hint::default()).unwrap();
    assert!(matches!(
        s.write(c.ino, 0, &vec![1; len]),
        Err(PStoreError::NoSpace(_))
    ));
    check_pages(&mut s);
    // The commit that freed the first file's pages made its unlink durable first: after a
    // power cut the first file is gone and no page is mapped twice.
    drop(s);
    ctrl.power_cut().unwrap();
    let mut r = PStore::open(dev, &cfg).unwrap();
    assert_eq!(r.lookup(1, b"a"), None);
    check_pages(&mut r);
}

#[test]
fn a_small_file_keeps_its_first_block_in_the_inode() {
    let (_c, dev) = swarm(32 << 20, 4096);
    let mut s = PStore::format(dev, &small_config(4096)).unwrap();
    let f = s.create(1, b"small", REG, 0, 0, Hint::default()).unwrap();
    s.write(f.ino, 0, &[9u8; 3000]).unwrap();
    let run = s.first_block(f.ino).unwrap();
    assert_eq!(run.pages, 1);
    assert_eq!(
        s.stats().blocks,
        0,
        "no hashtable entry for the first block"
    );
    // A block beyond the first goes to the hashtable.
    s.write(f.ino, 20_000, b"x").unwrap();
    assert_eq!(s.stats().blocks, 1);
    assert_eq!(s.getattr(f.ino).unwrap().size, 20_001);
}

#[test]
fn a_block_written_from_its_middle_takes_pages_from_there_only() {
    let (_c, dev) = swarm(32 << 20, 4096);
    let mut cfg = small_config(4096);
    cfg.block_pages = 16; // 64 KiB blocks, as a server's
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    let f = s.create(1, b"n1", REG, 0, 0, Hint::default()).unwrap();
    let mut model: Vec<u8> = Vec::new();
    let bytes =
        |seed: u8, n: usize| -> Vec<u8> { (0..n).map(|i| seed ^ (i % 251) as u8).collect() };
    let write = |s: &mut PStore, model: &mut Vec<u8>, at: usize, data: &[u8]| {
        s.write(f.ino, at as u64, data).unwrap();
        if model.len() < at + data.len() {
            model.resize(at + data.len(), 0);
        }
        model[at..at + data.len()].copy_from_slice(data);
    };
    let check = |s: &mut PStore, model: &[u8], what: &str| {
        let mut back = vec![0xEEu8; model.len()];
        assert_eq!(s.read(f.ino, 0, &mut back).unwrap(), model.len(), "{what}");
        assert!(back == model, "{what}: contents");
    };
    s.fsync().unwrap();
    let used = |s: &mut PStore| {
        s.fsync().unwrap();
        s.stats().pages_used
    };
    let before = used(&mut s);
    // Block 1 from byte 40,000 to its end, as an N-1 transfer leaves a slice's block: pages
    // 9..16, not 0..16.
    write(&mut s, &mut model, 65_536 + 40_000, &bytes(1, 25_536));
    assert_eq!(used(&mut s) - before, 7);
    check(&mut s, &model, "the tail of block 1");
    // Its head comes later: the block moves to a run from page 0.
    write(&mut s, &mut model, 65_536, &bytes(2, 10_000));
    assert_eq!(used(&mut s) - before, 16);
    check(&mut s, &model, "head and tail of block 1");
    // Block 2 from its middle up: one page, then a run that grows upwards from page 4.
    write(&mut s, &mut model, 131_072 + 20_000, &bytes(3, 100));
    assert_eq!(used(&mut s) - before, 17);
    write(&mut s, &mut model, 131_072 + 30_000, &bytes(4, 100));
    assert_eq!(used(&mut s) - before, 20, "block 2 holds pages 4..8");
    check(&mut s, &model, "two writes in block 2");
    // Whole pages inside the run go to the device as they are; page-aligned reads of them and
    // of the hole before the run.
    write(&mut s, &mut model, 131_072 + 5 * 4096, &bytes(5, 2 * 4096));
    let mut page = vec![0xEEu8; 4096];
    s.read(f.ino, 131_072 + 5 * 4096, &mut page).unwrap();
    assert!(page == model[131_072 + 5 * 4096..131_072 + 6 * 4096]);
    s.read(f.ino, 131_072, &mut page).unwrap();
    assert!(
        page.iter().all(|&b| b == 0),
        "the hole before block 2's run"
    );
    // Everything fsync'd survives a reopen (WAL replay), then a checkpoint and another.
    s.fsync().unwrap();
    drop(s);
    let mut s = PStore::open(dev.clone(), &cfg).unwrap();
    check(&mut s, &model, "after a reopen");
    check_pages(&mut s);
    s.checkpoint().unwrap();
    drop(s);
    let mut s = PStore::open(dev, &cfg).unwrap();
    check(&mut s, &model, "after a checkpoint and a reopen");
    // A cut below block 2's run frees it; a cut inside block 1 keeps its head.
    s.truncate(f.ino, 131_072 + 10_000).unwrap();
    model.truncate(131_072 + 10_000);
    check(&mut s, &model, "cut below block 2's run");
    assert_eq!(used(&mut s) - before, 16);
    s.truncate(f.ino, 65_536 + 5_000).unwrap();
    model.truncate(65_536 + 5_000);
    check(&mut s, &model, "cut inside block 1");
    assert_eq!(used(&mut s) - before, 2);
    check_pages(&mut s);
}

/// I/O-based distribution (§III-C1): each transfer of an N-1 file is an extent of its own. Its
/// pages start with its first byte and hold nothing else, so an unaligned 47,008-byte transfer
/// takes exactly 12 pages, reads back from its offset, and neither reads nor moves a
/// neighbour's page; extents survive a reopen and a checkpoint, and a truncate frees those
/// past the cut and cuts the one it crosses.
#[test]
fn an_io_based_transfer_is_an_extent_of_exactly_the_pages_it_needs() {
    const XFER: usize = 47_008;
    let (_c, dev) = swarm(32 << 20, 4096);
    let mut cfg = small_config(4096);
    cfg.block_pages = 16; // 64 KiB blocks, as a server's
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    let f = s.create(1, b"n1", REG, 0, 0, Hint::default()).unwrap();
    let bytes =
        |seed: u8, n: usize| -> Vec<u8> { (0..n).map(|i| seed ^ (i % 251) as u8).collect() };
    let used = |s: &mut PStore| {
        s.fsync().unwrap();
        s.stats().pages_used
    };
    let before = used(&mut s);
    // Transfers 1, 2 and 3 (the first crosses the first 64 KiB boundary of the file) and, at
    // transfer 5, one of three blocks' worth.
    let extents = [
        (XFER as u64, bytes(1, XFER)),
        (2 * XFER as u64, bytes(2, XFER)),
        (3 * XFER as u64, bytes(3, XFER)),
        (5 * XFER as u64, bytes(5, 150_000)),
    ];
    for (at, data) in &extents {
        assert_eq!(s.write_extent(f.ino, *at, *at, data).unwrap(), data.len());
    }
    assert_eq!(used(&mut s) - before, 3 * 12 + 16 + 16 + 5);
    let end = 5 * XFER as u64 + 150_000;
    assert_eq!(s.getattr(f.ino).unwrap().size, end);
    let check = |s: &mut PStore, what: &str| {
        for (at, data) in &extents {
            let mut back = vec![0xEEu8; data.len()];
            assert_eq!(
                s.read_extent(f.ino, *at, *at, &mut back).unwrap(),
                data.len()
            );
            assert!(back == *data, "{what}: the extent at {at}");
        }
        // Past the extent's bytes (inside the file): blanks.
        let mut more = vec![0xEEu8; XFER + 100];
        assert_eq!(
            s.read_extent(f.ino, XFER as u64, XFER as u64, &mut more)
                .unwrap(),
            XFER + 100
        );
        assert!(
            more[XFER..].iter().all(|&b| b == 0),
            "{what}: blanks after an extent"
        );
        // The file's blocks hold none of it.
        let mut plain = vec![0xEEu8; XFER];
        s.read(f.ino, XFER as u64, &mut plain).unwrap();
        assert!(plain.iter().all(|&b| b == 0), "{what}: file blocks");
    };
    check(&mut s, "written");
    s.fsync().unwrap();
    drop(s);
    let mut s = PStore::open(dev.clone(), &cfg).unwrap();
    check(&mut s, "after a reopen");
    check_pages(&mut s);
    s.checkpoint().unwrap();
    drop(s);
    let mut s = PStore::open(dev, &cfg).unwrap();
    check(&mut s, "after a checkpoint and a reopen");
    // A cut 1,000 bytes into transfer 2 frees transfers 3 and 5 and all but one page of 2.
    let cut = 2 * XFER as u64 + 1_000;
    s.truncate(f.ino, cut).unwrap();
    assert_eq!(used(&mut s) - before, 12 + 1);
    let mut back = vec![0xEEu8; XFER];
    assert_eq!(
        s.read_extent(f.ino, 2 * XFER as u64, 2 * XFER as u64, &mut back)
            .unwrap(),
        1_000
    );
    assert!(back[..1_000] == extents[1].1[..1_000]);
    // Grown again, the cut page reads blanks past the cut.
    let grow = SetAttr {
        size: Some(3 * XFER as u64),
        ..SetAttr::default()
    };
    s.setattr(f.ino, &grow).unwrap();
    assert_eq!(
        s.read_extent(f.ino, 2 * XFER as u64, 2 * XFER as u64, &mut back)
            .unwrap(),
        XFER
    );
    assert!(back[..1_000] == extents[1].1[..1_000]);
    assert!(back[1_000..].iter().all(|&b| b == 0), "blanks past the cut");
    assert_eq!(
        s.read_extent(f.ino, XFER as u64, XFER as u64, &mut back)
            .unwrap(),
        XFER
    );
    assert!(back == extents[0].1);
    check_pages(&mut s);
}

/// A fresh run takes pages another file used: the bytes of the run that no write has given a
/// value (before the data in its first page, after it in its last, the pages that round the run
/// up) read as zeros, then and after a later write inside the run.
#[test]
fn a_fresh_run_on_reused_pages_reads_zeros_wherever_nothing_was_written() {
    let (_c, dev) = swarm(32 << 20, 4096);
    let mut cfg = small_config(4096);
    cfg.block_pages = 16;
    let mut s = PStore::format(dev, &cfg).unwrap();
    // Every data page holds 0xAB, so that the runs below must take some of them.
    let old = s.create(1, b"old", REG, 0, 0, Hint::default()).unwrap();
    let block = vec![0xAB; 16 * 4096];
    let mut at = 0;
    while s.write(old.ino, at, &block).is_ok() {
        at += block.len() as u64;
    }
    let mut page = vec![0xAB; 4096];
    while s.write(old.ino, at, &page).is_ok() {
        at += 4096;
    }
    page.truncate(1);
    assert!(s.write(old.ino, at, &page).is_err(), "a page left free");
    s.fsync().unwrap();
    s.truncate(old.ino, 0).unwrap();
    s.fsync().unwrap();
    let f = s.create(1, b"f", REG, 0, 0, Hint::default()).unwrap();
    let mut model = vec![0u8; 65_536 + 14_010];
    let mut write = |s: &mut PStore, at: usize, data: &[u8]| {
        s.write(f.ino, at as u64, data).unwrap();
        model[at..at + data.len()].copy_from_slice(data);
        let mut back = vec![0xEE; model.len()];
        let n = s.read(f.ino, 0, &mut back).unwrap();
        assert!(back[..n] == model[..n], "contents after a write at {at}");
    };
    // Block 1 from byte 100 to 9,100: pages 0..3 of the block, rounded up to a run of 4.
    write(&mut s, 65_536 + 100, &[7; 9000]);
    // Page 3 of that run, which only the rounding took: its other bytes stay zeros.
    write(&mut s, 65_536 + 14_000, &[9; 10]);
    // A run of whole pages and partial ends across a block boundary.
    write(&mut s, 3000, &[5; 40_000]);
    s.fsync().unwrap();
    check_pages(&mut s);
}

#[test]
fn small_writes_are_staged_read_back_and_made_durable_by_fsync() {
    let (ssd, dev) = swarm(32 << 20, 4096);
    let cfg = small_config(4096);
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    let mut files = Vec::new();
    for i in 0..20u8 {
        let f = s
            .create(1, &[b'f', b'a' + i], REG, 0, 0, Hint::default())
            .unwrap();
        s.write(f.ino, 0, &[i; 3901]).unwrap();
        // A partial overwrite reads the staged page, not the device's.
        s.write(f.ino, 100, &[i ^ 0xFF; 10]).unwrap();
        files.push(f.ino);
    }
    assert!(s.stats().staged_pages > 0, "small writes wait in memory");
    let expect = |i: u8| {
        let mut v = vec![i; 3901];
        v[100..110].fill(i ^ 0xFF);
        v
    };
    for (i, &ino) in files.iter().enumerate() {
        let mut buf = vec![0u8; 3901];
        s.read(ino, 0, &mut buf).unwrap();
        assert_eq!(buf, expect(i as u8), "file {i} before fsync");
    }
    s.fsync().unwrap();
    assert_eq!(
        s.stats().staged_pages,
        0,
        "fsync writes the staged pages out"
    );
    ssd.power_cut().unwrap();
    drop(s);
    let mut s = PStore::open(dev, &cfg).unwrap();
    for (i, &ino) in files.iter().enumerate() {
        let mut buf = vec![0u8; 3901];
        assert_eq!(s.read(ino, 0, &mut buf).unwrap(), 3901);
        assert_eq!(buf, expect(i as u8), "file {i} after the power cut");
    }
    check_pages(&mut s);
}

#[test]
fn a_full_stage_goes_out_without_the_write_waiting_and_stays_readable_until_it_landed() {
    // Writes take 50 ms on this device: a write that waited for the write-out could not
    // leave it in flight behind it.
    let (ssd, dev) = swarm_slow_writes(32 << 20, 4096, 2, 50_000.0);
    let cfg = write_out_config();
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    s.defer_settle(true).unwrap();
    let content = |i: u16| -> Vec<u8> { (0..3901u32).map(|k| (k as u16 ^ i) as u8).collect() };
    let mut files = Vec::new();
    let mut in_flight_after = None;
    for i in 0..300u16 {
        let f = s
            .create(
                1,
                format!("small.{i}").as_bytes(),
                REG,
                0,
                0,
                Hint::default(),
            )
            .unwrap();
        s.write(f.ino, 0, &content(i)).unwrap();
        files.push(f.ino);
        if in_flight_after.is_none() && s.pump().unwrap() {
            in_flight_after = Some(i);
        }
    }
    let first = in_flight_after.expect("a write-out went out and stayed in flight");
    assert!(
        s.pump().unwrap(),
        "50 ms later than the write that started it, at the earliest"
    );
    assert!(
        s.stats().staged_pages > 256,
        "the pages in flight still count"
    );
    // Pages of the write-out in flight are read from memory; one of them overwritten now is
    // staged over it.
    let mut newer = content(0);
    newer[..100].fill(0xEE);
    s.write(files[0], 0, &newer[..100]).unwrap();
    let check = |s: &mut PStore, when: &str| {
        for (i, &ino) in files.iter().enumerate() {
            let mut buf = vec![0u8; 3901];
            assert_eq!(s.read(ino, 0, &mut buf).unwrap(), 3901);
            let want = if i == 0 { &newer } else { &content(i as u16) };
            assert!(buf == *want, "file {i} {when}");
        }
    };
    check(&mut s, "while its page may be in flight");
    // fsync waits for the write-out in flight before it writes the newer copy and the log.
    s.fsync().unwrap();
    assert!(!s.pump().unwrap());
    assert_eq!(s.stats().staged_pages, 0);
    ssd.power_cut().unwrap();
    drop(s);
    let mut s = PStore::open(dev, &cfg).unwrap();
    check(&mut s, "after the power cut");
    check_pages(&mut s);
    assert!(first >= 256, "staged first: {first}");
}

#[test]
fn the_log_is_written_ahead_without_a_pump_waiting_and_a_power_cut_keeps_what_it_wrote() {
    // Writes take 50 ms on this device: a pump that waited for the log it writes ahead could
    // not return at once with it in flight.
    let (ssd, dev) = swarm_slow_writes(32 << 20, 4096, 2, 50_000.0);
    let mut cfg = write_out_config();
    cfg.log_write_ahead = 16 << 10;
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    s.defer_settle(true).unwrap();
    let name = |i: u32| format!("empty.{i}");
    let (mut in_flight, mut longest) = (0, std::time::Duration::ZERO);
    for i in 0..600 {
        s.create(1, name(i).as_bytes(), REG, 0, 0, Hint::default())
            .unwrap();
        let t = std::time::Instant::now();
        in_flight += usize::from(s.pump().unwrap());
        longest = longest.max(t.elapsed());
    }
    // Nothing else writes here (no data, an Icache that holds every inode block dirty, a log
    // with room for all): what the pumps had in flight was the log written ahead.
    assert!(in_flight > 0, "the log never went ahead");
    assert!(longest.as_millis() < 40, "a pump waited {longest:?}");
    let checkpoints = s.stats().checkpoints;
    while s.pump().unwrap() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(
        s.stats().checkpoints,
        checkpoints,
        "no checkpoint wrote the log"
    );
    // No fsync: the files whose records the log had written ahead come back, in order.
    ssd.power_cut().unwrap();
    drop(s);
    let mut s = PStore::open(dev, &cfg).unwrap();
    let kept = kept_prefix(&mut s, 600, name);
    assert!(kept >= 300, "{kept} of 600 files came back");
    check_pages(&mut s);
}

#[test]
fn frees_go_back_to_the_bitmap_once_the_log_written_ahead_holds_them_and_not_before() {
    let (ssd, dev) = swarm_queues(32 << 20, 4096, 2);
    let mut cfg = write_out_config();
    cfg.log_write_ahead = 4096;
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    s.defer_settle(true).unwrap();
    let old: Vec<u64> = (0..200u16).map(|i| create_small(&mut s, i)).collect();
    s.fsync().unwrap();
    let used = s.stats().pages_used;
    for i in 0..200u16 {
        s.unlink(1, format!("s{i}").as_bytes()).unwrap();
    }
    s.settle().unwrap();
    // No frame of theirs has been written: their pages stay taken.
    assert_eq!(s.stats().pages_used, used);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while s.pump().unwrap() {
        assert!(std::time::Instant::now() < deadline, "the log never landed");
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    // The log written ahead landed without a commit: the frees in it are released (those of
    // its last, unwritten, few kilobytes wait).
    let freed = used - s.stats().pages_used;
    assert!(freed >= 150, "{freed} of 200 pages released");
    // New files take the released pages, unsynced. After a power cut, an old file whose
    // unlink the device lacks is whole: its pages were not reused.
    for i in 0..200u16 {
        let f = s
            .create(1, format!("n{i}").as_bytes(), REG, 0, 0, Hint::default())
            .unwrap();
        s.write(f.ino, 0, &[0xEE; 3901]).unwrap();
        s.pump().unwrap();
    }
    ssd.power_cut().unwrap();
    drop(s);
    let mut s = PStore::open(dev, &cfg).unwrap();
    let mut kept = 0;
    for (i, &ino) in old.iter().enumerate() {
        if s.lookup(1, format!("s{i}").as_bytes()).is_none() {
            continue;
        }
        kept += 1;
        let mut buf = vec![0u8; 3901];
        assert_eq!(s.read(ino, 0, &mut buf).unwrap(), 3901);
        assert!(buf == small_content(i as u16), "file {i}");
    }
    assert!(kept <= 50, "{kept} unlinks lost");
    check_pages(&mut s);
}

#[test]
fn a_checkpoints_commits_leave_all_but_a_little_log_to_be_written_ahead_first() {
    // A log of 2 MiB written ahead a megabyte at a time: a checkpoint becomes due with up to
    // a megabyte unwritten, which its pumps write ahead before its commits. No timeout:
    // the pumps wait as long as the writes take.
    let (ssd, dev) = swarm_queues(64 << 20, 4096, 2);
    let mut cfg = write_out_config();
    cfg.lbas = (64 << 20) / 4096;
    cfg.wal_pages = 512;
    cfg.inode_slots = 64 << 10;
    cfg.max_dentries = 64 << 10;
    // Every inode block cached: no Icache write-back writes the log meanwhile.
    cfg.icache_blocks = 4096;
    cfg.drain_wait = std::time::Duration::from_secs(3600);
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    s.defer_settle(true).unwrap();
    let name = |i: u32| format!("a-file-name-of-some-length.{i}");
    let mut made = 0;
    while s.stats().checkpoints < 2 {
        assert!(made < 60_000, "{:?}", s.stats());
        s.create(1, name(made).as_bytes(), REG, 0, 0, Hint::default())
            .unwrap();
        made += 1;
        if s.pump().unwrap() {
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
    }
    let stops = s.stats().checkpoint_stops;
    assert!(stops.log_bytes_written <= 64 << 10, "{stops:?}");
    let mut s = fsync_cut_power_and_reopen(s, &ssd, dev, &cfg);
    assert_eq!(kept_prefix(&mut s, made, name), made);
    check_pages(&mut s);
}

/// A store answering early, over a device whose writes take 50 ms, with a checkpoint queue,
/// a log of 64 KiB (a checkpoint every few hundred creates) and checkpoint pieces of a page.
fn store_with_slow_checkpoint_queue() -> (Arc<SwarmIo>, Arc<NvmeDevice>, PStoreConfig, PStore) {
    let (ssd, dev) = swarm_slow_writes(32 << 20, 4096, 3, 50_000.0);
    let mut cfg = write_out_config();
    cfg.checkpoint_queue = Some(2);
    cfg.wal_pages = 16;
    cfg.checkpoint_step = 4096;
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    s.defer_settle(true).unwrap();
    (ssd, dev, cfg, s)
}

#[test]
fn a_checkpoints_pieces_go_out_on_their_queue_without_a_pump_waiting_for_them() {
    // Writes take 50 ms: a pump that waited for its piece would stop that long.
    let (ssd, dev, cfg, mut s) = store_with_slow_checkpoint_queue();
    let before = s.stats().checkpoints;
    let name = |i: u32| format!("empty.{i}");
    let files = 400;
    // The most pieces on their way after a pump, and how many pumps left any.
    let (mut most, mut pumps_with_pieces) = (0, 0);
    let mut count = |s: &PStore| {
        let n = s.stats().checkpoint_pieces_in_flight;
        most = most.max(n);
        pumps_with_pieces += usize::from(n > 0);
    };
    for i in 0..files {
        s.create(1, name(i).as_bytes(), REG, 0, 0, Hint::default())
            .unwrap();
        s.pump().unwrap();
        count(&s);
    }
    while s.stats().checkpoint_writing {
        s.pump().unwrap();
        count(&s);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let stats = s.stats();
    assert!(pumps_with_pieces > 0, "no pump left a piece on its way");
    // Several at once, and never more than the store's limit of eight.
    assert!(
        (2..=8).contains(&most),
        "{most} pieces on their way at once"
    );
    assert!(stats.checkpoints > before, "no checkpoint was made current");
    let piece = stats.checkpoint_stops.piece;
    assert!(piece.as_millis() < 25, "a piece held its pump {piece:?}");
    let mut s = fsync_cut_power_and_reopen(s, &ssd, dev, &cfg);
    assert_eq!(kept_prefix(&mut s, files, name), files);
    check_pages(&mut s);
}

#[test]
fn a_power_cut_with_checkpoint_pieces_on_their_way_keeps_every_fsynced_file() {
    // Writes take 50 ms: pieces stay on their way while the files are made and fsynced.
    let (ssd, dev, cfg, mut s) = store_with_slow_checkpoint_queue();
    let name = |i: u32| format!("cut.{i}");
    let mut made = 0;
    while s.stats().checkpoint_pieces_in_flight == 0 {
        assert!(made < 1500, "no piece went on its way");
        s.create(1, name(made).as_bytes(), REG, 0, 0, Hint::default())
            .unwrap();
        made += 1;
        s.pump().unwrap();
    }
    s.fsync().unwrap();
    assert!(s.stats().checkpoint_pieces_in_flight > 0);
    // The cut comes with the pieces on their way (and the last checkpoint current).
    ssd.power_cut().unwrap();
    drop(s);
    let mut s = PStore::open(dev, &cfg).unwrap();
    assert_eq!(kept_prefix(&mut s, made, name), made);
    check_pages(&mut s);
}

/// The 3,901 bytes of small file `i`.
fn small_content(i: u16) -> Vec<u8> {
    (0..3901u32).map(|k| (k as u16 ^ !i) as u8).collect()
}

/// Makes small file `i` in the root directory; returns its ino.
fn create_small(s: &mut PStore, i: u16) -> u64 {
    let f = s
        .create(1, format!("s{i}").as_bytes(), REG, 0, 0, Hint::default())
        .unwrap();
    s.write(f.ino, 0, &small_content(i)).unwrap();
    f.ino
}

/// Syncs `s`, cuts the power and opens the store again: small file `i` is `files[i]`, whole,
/// and no page leaked.
fn power_cut_keeps_small_files(
    s: PStore,
    ssd: &SwarmIo,
    dev: Arc<NvmeDevice>,
    cfg: &PStoreConfig,
    files: &[u64],
) {
    let mut s = fsync_cut_power_and_reopen(s, ssd, dev, cfg);
    for (i, &ino) in files.iter().enumerate() {
        let mut buf = vec![0u8; 3901];
        assert_eq!(s.read(ino, 0, &mut buf).unwrap(), 3901);
        assert!(buf == small_content(i as u16), "file {i}");
    }
    check_pages(&mut s);
}

/// A server hands what a close acknowledges to the device before it answers
/// (`PStore::write_through`), without a flush. A killed process leaves that in the page cache:
/// the next open on the same boot replays all of it. After a power cut, the log pages may be
/// on the disk while the data pages they name are not: the next open (another boot) then
/// stops at the last mark of flushed data, and no file points at pages that lost its bytes.
#[test]
fn what_is_written_through_outlives_a_killed_process_and_no_frame_of_it_outlives_lost_data() {
    for page_cache_survived in [true, false] {
        let (ssd, dev) = swarm_queues(32 << 20, 4096, 2);
        let mut cfg = write_out_config();
        let mut s = PStore::format(dev.clone(), &cfg).unwrap();
        s.defer_settle(true).unwrap();
        let fsynced: Vec<u64> = (0..4).map(|i| create_small(&mut s, i)).collect();
        s.fsync().unwrap();
        let through: Vec<u64> = (4..12)
            .map(|i| {
                let ino = create_small(&mut s, i);
                s.write_through().unwrap();
                ino
            })
            .collect();
        if page_cache_survived {
            drop(s);
        } else {
            // The drive's cache kept every block written since the fsync but the new files'
            // data pages (4 KiB LBAs: zone page p is LBA first_lba + p).
            let lost: std::collections::BTreeSet<u64> = s
                .mappings()
                .unwrap()
                .iter()
                .filter(|(ino, _, _)| through.contains(ino))
                .flat_map(|(_, _, run)| run.start..run.start + u64::from(run.pages))
                .map(|p| cfg.first_lba + p)
                .collect();
            assert!(!lost.is_empty());
            ssd.power_cut_keeping(|lba| !lost.contains(&lba)).unwrap();
            drop(s);
        }
        cfg.page_cache_survived = page_cache_survived;
        let mut s = PStore::open(dev, &cfg).unwrap();
        let whole = |s: &mut PStore, i: usize, ino: u64| {
            let mut buf = vec![0u8; 3901];
            assert_eq!(s.read(ino, 0, &mut buf).unwrap(), 3901, "file {i}");
            assert!(buf == small_content(i as u16), "file {i}");
        };
        for (i, &ino) in fsynced.iter().enumerate() {
            whole(&mut s, i, ino);
        }
        for (i, &ino) in through.iter().enumerate().map(|(k, ino)| (k + 4, ino)) {
            if page_cache_survived {
                whole(&mut s, i, ino);
            } else {
                assert!(
                    s.lookup(1, format!("s{i}").as_bytes()).is_none(),
                    "file {i} came back after its data was lost"
                );
            }
        }
        check_pages(&mut s);
    }
}

#[test]
fn a_full_stage_sent_over_many_pumps_lands_whole() {
    // A fast device: the pages sent by one pump have landed before the next pump sends more.
    let (ssd, dev) = swarm_queues(32 << 20, 4096, 2);
    let cfg = write_out_config();
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    let files: Vec<u64> = (0..260u16).map(|i| create_small(&mut s, i)).collect();
    let mut pumps = 0;
    while s.pump().unwrap() {
        pumps += 1;
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    // 257 pages, a few dozen copied per pump.
    assert!(pumps >= 4, "{pumps} pumps");
    assert!(s.stats().staged_pages < 10, "{:?}", s.stats());
    power_cut_keeps_small_files(s, &ssd, dev, &cfg, &files);
}

#[test]
fn checkpoints_wait_for_staged_pages_to_be_written_behind_before_their_log_commits() {
    // As a server runs it: each request answered early, then a pump. A log of 192 KiB holds
    // about 450 small files' records, so checkpoints come every few hundred files while up to
    // 256 staged pages wait for a full stage.
    let (ssd, dev) = swarm_queues(32 << 20, 4096, 2);
    let mut cfg = write_out_config();
    cfg.wal_pages = 48;
    cfg.checkpoint_step = 4096;
    // No timeout: a checkpoint waits for its pages as long as their writes take.
    cfg.drain_wait = std::time::Duration::from_secs(3600);
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    s.defer_settle(true).unwrap();
    let mut files = Vec::new();
    for i in 0..1500u16 {
        files.push(create_small(&mut s, i));
        // The next request comes once the pumps are idle, or after 2 ms: a write-out in
        // flight lands meanwhile even on a busy machine, before the log runs short and a
        // checkpoint must go ahead.
        let next = std::time::Instant::now() + std::time::Duration::from_millis(2);
        while s.pump().unwrap() && std::time::Instant::now() < next {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
    let st = s.stats();
    assert!(st.checkpoints >= 3, "{st:?}");
    // Neither a take nor a last piece wrote out more than 16 staged pages itself (the pumps
    // had the rest written behind first); without that, up to 256.
    assert!(st.checkpoint_stops.staged_pages_written <= 16, "{st:?}");
    while s.pump().unwrap() {}
    power_cut_keeps_small_files(s, &ssd, dev, &cfg, &files);
}

/// A write placed by `layout` that keeps the set-ID bits.
fn laid(layout: DataDistribution) -> WrittenBy {
    WrittenBy {
        layout,
        drop_set_id: false,
    }
}

#[test]
fn a_write_holds_its_file_to_the_distribution_it_was_placed_by() {
    let (_c, dev) = swarm(32 << 20, 4096);
    let cfg = small_config(4096);
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    let f = s.create(1, b"f", REG, 0, 0, Hint::default()).unwrap();
    assert_eq!(f.hint.data, DataDistribution::Block);
    // Without a size the file takes the writer's distribution, with the write's size.
    s.write_laid_out(f.ino, 0, None, b"file-based", laid(DataDistribution::File))
        .unwrap();
    let i = s.getattr(f.ino).unwrap();
    assert_eq!((i.hint.data, i.size), (DataDistribution::File, 10));
    s.write_laid_out(f.ino, 10, None, b"!", laid(DataDistribution::File))
        .unwrap();
    // With a size, bytes placed otherwise are refused and nothing of them is written.
    for (extent, written) in [
        (None, DataDistribution::Block),
        (Some(0), DataDistribution::Io),
    ] {
        match s.write_laid_out(f.ino, 0, extent, b"XXXXXXXXXXXXXXXXX", laid(written)) {
            Err(PStoreError::LaidOutOtherwise {
                size: 11,
                held: DataDistribution::File,
                ..
            }) => {}
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    let mut buf = [0u8; 20];
    assert_eq!(s.read(f.ino, 0, &mut buf).unwrap(), 11);
    assert_eq!(&buf[..11], b"file-based!");
    // A directory holds no data, whatever a request says.
    let d = s.create(1, b"d", DIR, 0, 0, Hint::default()).unwrap();
    for layout in [None, Some(DataDistribution::File)] {
        let r = match layout {
            Some(l) => s.write_laid_out(d.ino, 0, None, b"x", laid(l)),
            None => s.write(d.ino, 0, b"x"),
        };
        assert!(matches!(r, Err(PStoreError::Invalid(_))), "{r:?}");
    }
    assert_eq!(s.getattr(d.ino).unwrap().hint, Hint::default());
    // A slice without the inode holds the bytes of any distribution.
    let remote = 0xABCD_0000_0001;
    s.write_laid_out(remote, 0, Some(0), b"unit", laid(DataDistribution::Io))
        .unwrap();
    s.write_laid_out(remote, 8192, None, b"block", laid(DataDistribution::Block))
        .unwrap();
    // The change is logged with the write.
    s.fsync().unwrap();
    drop(s);
    let mut s = PStore::open(dev, &cfg).unwrap();
    assert_eq!(s.getattr(f.ino).unwrap().hint.data, DataDistribution::File);
}

#[test]
fn a_write_that_drops_set_id_bits_drops_those_of_the_mode_held_here() {
    let (_c, dev) = swarm(32 << 20, 4096);
    let cfg = small_config(4096);
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    let dropping = WrittenBy {
        layout: DataDistribution::Block,
        drop_set_id: true,
    };
    // (mode before, mode after a dropping write): set-group-ID goes only with group execute.
    let cases = [
        (0o6755, 0o0755),
        (0o6745, 0o2745),
        (0o4700, 0o0700),
        (0o1777, 0o1777),
        (0o0644, 0o0644),
    ];
    let mut files = Vec::new();
    for (k, (before, after)) in cases.into_iter().enumerate() {
        let name = format!("f{k}");
        let f = s
            .create(
                1,
                name.as_bytes(),
                libc::S_IFREG | before,
                0,
                0,
                Hint::default(),
            )
            .unwrap();
        s.write_laid_out(f.ino, 0, None, b"data", laid(DataDistribution::Block))
            .unwrap();
        assert_eq!(s.getattr(f.ino).unwrap().mode & 0o7777, before, "kept");
        s.write_laid_out(f.ino, 4, None, b"more", dropping).unwrap();
        let i = s.getattr(f.ino).unwrap();
        assert_eq!(
            (i.mode & 0o7777, i.mode & libc::S_IFMT),
            (after, libc::S_IFREG)
        );
        assert_eq!(i.size, 8);
        files.push((f.ino, after));
    }
    // A slice without the inode takes the bytes alone.
    let remote = 0xABCD_0000_0001;
    s.write_laid_out(remote, 0, None, b"elsewhere", dropping)
        .unwrap();
    // Logged with the write.
    s.fsync().unwrap();
    drop(s);
    let mut s = PStore::open(dev, &cfg).unwrap();
    for (ino, after) in files {
        assert_eq!(s.getattr(ino).unwrap().mode & 0o7777, after);
    }
}

#[test]
fn blocks_of_a_file_whose_inode_is_elsewhere_live_in_the_hashtable() {
    let (_c, dev) = swarm(32 << 20, 4096);
    let mut s = PStore::format(dev, &small_config(4096)).unwrap();
    let remote = 0xABCD_0000_0001;
    s.write(remote, 100, b"remote data").unwrap();
    let mut buf = [1u8; 120];
    assert_eq!(s.read(remote, 0, &mut buf).unwrap(), 120);
    assert_eq!(&buf[100..111], b"remote data");
    assert!(buf[..100].iter().all(|&b| b == 0), "hole reads zeros");
    s.truncate_blocks(remote, 0).unwrap();
    s.fsync().unwrap();
    assert_eq!(s.stats().pages_used, 0);
}

#[test]
fn inodes_stored_for_other_workers_are_read_by_ino_and_by_offset() {
    let (_c, dev) = swarm(32 << 20, 4096);
    let mut s = PStore::format(dev, &small_config(4096)).unwrap();
    let inode = peakfs::pstore::inode::Inode {
        ino: 0x7700_0000_0042,
        mode: DIR,
        nlink: 2,
        ..Default::default()
    };
    let off = s.insert_inode(&inode).unwrap();
    assert_eq!(s.getattr(inode.ino).unwrap(), inode);
    assert_eq!(s.getattr_at(off).unwrap(), inode);
    assert!(matches!(
        s.insert_inode(&inode),
        Err(PStoreError::Exists(_))
    ));
    s.insert_dentry(9, b"sub", off).unwrap();
    assert_eq!(s.lookup(9, b"sub"), Some(off));
    let a = s
        .setattr(
            inode.ino,
            &SetAttr {
                mode: Some(0o040700),
                uid: Some(5),
                ..SetAttr::default()
            },
        )
        .unwrap();
    assert_eq!((a.mode, a.uid), (0o040700, 5));
}

#[test]
fn hard_links_share_one_inode_whose_last_unlink_frees_it_and_its_data() {
    let (_c, dev) = swarm(32 << 20, 4096);
    let mut s = PStore::format(dev, &small_config(4096)).unwrap();
    let f = s.create(1, b"a", REG, 0, 0, Hint::default()).unwrap();
    // Three 16 KiB blocks: the first inline, two in the hashtable.
    s.write(f.ino, 0, &[7u8; 40_000]).unwrap();
    let before = s.getattr(f.ino).unwrap();
    let orphaned = s
        .relink(&Relink {
            insert: Some((1, b"b", f.ino)),
            links: &[(f.ino, 1)],
            ..Relink::default()
        })
        .unwrap();
    assert!(orphaned.is_empty());
    let linked = s.getattr(f.ino).unwrap();
    assert_eq!(linked.nlink, 2);
    assert!(
        linked.ctime_ns > before.ctime_ns,
        "a new link changes ctime"
    );
    assert_eq!(s.lookup(1, b"b"), Some(f.ino));
    assert!(matches!(
        s.relink(&Relink {
            remove: Some((1, b"missing")),
            ..Relink::default()
        }),
        Err(PStoreError::NoEntry { .. })
    ));

    assert_eq!(s.unlink(1, b"a").unwrap(), f.ino);
    let left = s.getattr(f.ino).unwrap();
    assert_eq!(left.nlink, 1);
    assert!(left.ctime_ns > linked.ctime_ns, "an unlink changes ctime");
    let mut buf = vec![0u8; 40_000];
    assert_eq!(s.read(f.ino, 0, &mut buf).unwrap(), 40_000);
    assert!(
        buf.iter().all(|&b| b == 7),
        "data stays with the other link"
    );

    s.unlink(1, b"b").unwrap();
    assert!(matches!(s.getattr(f.ino), Err(PStoreError::NoInode(_))));
    s.fsync().unwrap();
    assert_eq!(s.stats().pages_used, 0, "the last unlink freed the data");
    assert_eq!((s.stats().inodes, s.stats().orphans), (0, 0));
    check_pages(&mut s);
}

#[test]
fn an_unlink_frees_its_inode_in_its_own_transaction_and_a_large_file_through_an_orphan() {
    let (_c, dev) = swarm(32 << 20, 4096);
    let mut s = PStore::format(dev, &small_config(4096)).unwrap();
    let empty = s.create(1, b"empty", REG, 0, 0, Hint::default()).unwrap();
    let small = s.create(1, b"small", REG, 0, 0, Hint::default()).unwrap();
    // Three 16 KiB blocks: the first inline, two in the hashtable.
    s.write(small.ino, 0, &[7u8; 40_000]).unwrap();
    // 80 blocks in the hashtable: more than one transaction frees.
    let large = s.create(1, b"large", REG, 0, 0, Hint::default()).unwrap();
    s.write(large.ino, 16_384, &vec![9u8; 80 * 16_384]).unwrap();
    s.fsync().unwrap();

    // The empty file's unlink logs no inode image: the dentry, the ino and the slot go in one
    // record set (the old two steps logged the image with no links and an orphan first).
    let before = s.stats().wal_bytes;
    s.unlink(1, b"empty").unwrap();
    s.fsync().unwrap();
    let grew = s.stats().wal_bytes - before;
    assert!(
        grew < peakfs::pstore::inode::INODE_BYTES as u64,
        "an unlink logged {grew} bytes"
    );
    assert!(matches!(s.getattr(empty.ino), Err(PStoreError::NoInode(_))));

    for (name, f) in [(&b"small"[..], small), (b"large", large)] {
        s.unlink(1, name).unwrap();
        assert!(matches!(s.getattr(f.ino), Err(PStoreError::NoInode(_))));
        assert!(!s.is_orphan(f.ino));
    }
    s.fsync().unwrap();
    let st = s.stats();
    assert_eq!(
        (st.inodes, st.orphans, st.blocks, st.pages_used),
        (0, 0, 0, 0)
    );
    check_pages(&mut s);
    // The slots are free for new inodes.
    for i in 0..3u8 {
        s.create(1, &[b'n', b'a' + i], REG, 0, 0, Hint::default())
            .unwrap();
    }
    assert_eq!(s.stats().inodes, 3);
}

#[test]
fn directories_count_their_subdirectories_in_their_link_count() {
    let (_c, dev) = swarm(32 << 20, 4096);
    let mut s = PStore::format(dev, &small_config(4096)).unwrap();
    let d = s.create(1, b"d", DIR, 0, 0, Hint::default()).unwrap();
    let e = s.create(1, b"e", DIR, 0, 0, Hint::default()).unwrap();
    assert_eq!(d.nlink, 2, "its entry and its .");
    let sub = s.create(d.ino, b"sub", DIR, 0, 0, Hint::default()).unwrap();
    s.create(d.ino, b"file", REG, 0, 0, Hint::default())
        .unwrap();
    assert_eq!(
        s.getattr(d.ino).unwrap().nlink,
        3,
        "sub's .. counts, file's entry not"
    );
    // Moving sub from d to e: both parents change with the entries, in one transaction.
    s.relink(&Relink {
        remove: Some((d.ino, b"sub")),
        insert: Some((e.ino, b"sub", sub.ino)),
        links: &[(d.ino, -1), (e.ino, 1)],
        free: None,
    })
    .unwrap();
    assert_eq!(s.getattr(d.ino).unwrap().nlink, 2);
    assert_eq!(s.getattr(e.ino).unwrap().nlink, 3);
    s.unlink(e.ino, b"sub").unwrap();
    assert_eq!(s.getattr(e.ino).unwrap().nlink, 2);
    assert!(matches!(s.getattr(sub.ino), Err(PStoreError::NoInode(_))));
    // A count set by SETATTR never reaches 0: the last link goes through relink.
    assert!(matches!(
        s.setattr(
            d.ino,
            &SetAttr {
                nlink: Some(0),
                ..SetAttr::default()
            }
        ),
        Err(PStoreError::Invalid(_))
    ));
}

#[test]
fn an_orphan_stays_usable_until_freed_and_reopening_frees_it() {
    // Answered before or after its records are in place (a server answers first).
    for defer in [false, true] {
        orphan_stays_usable_until_freed(defer);
    }
}

fn orphan_stays_usable_until_freed(defer: bool) {
    let (ssd, dev) = swarm(32 << 20, 4096);
    let cfg = small_config(4096);
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    s.defer_settle(defer).unwrap();
    let f = s.create(1, b"open", REG, 0, 0, Hint::default()).unwrap();
    s.write(f.ino, 0, &[1u8; 40_000]).unwrap();
    let orphaned = s
        .relink(&Relink {
            remove: Some((1, b"open")),
            links: &[(f.ino, -1)],
            ..Relink::default()
        })
        .unwrap();
    assert_eq!(
        orphaned,
        vec![Unlinked {
            ino: f.ino,
            freed: false
        }]
    );
    assert!(s.is_orphan(f.ino));
    assert_eq!(s.lookup(1, b"open"), None);
    assert_eq!(s.getattr(f.ino).unwrap().nlink, 0);
    // Still written and read through its ino, like an open file descriptor.
    s.write(f.ino, 40_000, b"more").unwrap();
    let mut buf = [0u8; 4];
    s.read(f.ino, 40_000, &mut buf).unwrap();
    assert_eq!(&buf, b"more");
    assert_eq!(s.stats().orphans, 1);
    // A checkpoint carries the orphan list; the store restarts without the client.
    s.checkpoint().unwrap();
    let g = s.create(1, b"kept", REG, 0, 0, Hint::default()).unwrap();
    // An unlink freed with its inode in one transaction: logged and applied even when the
    // next call on the store is the fsync.
    let h = s.create(1, b"gone", REG, 0, 0, Hint::default()).unwrap();
    let freed = s
        .relink(&Relink {
            remove: Some((1, b"gone")),
            links: &[(h.ino, -1)],
            free: Some(h.ino),
            ..Relink::default()
        })
        .unwrap();
    assert_eq!(
        freed,
        vec![Unlinked {
            ino: h.ino,
            freed: true
        }]
    );
    s.fsync().unwrap();
    drop(s);
    ssd.power_cut().unwrap();
    let mut s = PStore::open(dev, &cfg).unwrap();
    assert!(matches!(s.getattr(f.ino), Err(PStoreError::NoInode(_))));
    assert!(matches!(s.getattr(h.ino), Err(PStoreError::NoInode(_))));
    assert_eq!(s.lookup(1, b"gone"), None);
    assert_eq!(s.stats().orphans, 0);
    assert_eq!(s.getattr(g.ino).unwrap().nlink, 1);
    assert_eq!(s.stats().pages_used, 0, "the orphan's data was freed");
    check_pages(&mut s);
}

#[test]
fn device_numbers_and_link_counts_survive_a_power_cut_after_fsync() {
    let (ssd, dev) = swarm(32 << 20, 4096);
    let cfg = small_config(4096);
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    let new = NewInode {
        mode: libc::S_IFCHR | 0o600,
        rdev: 0x0103,
        ..NewInode::default()
    };
    let c = s.create_inode(1, b"null", &new).unwrap();
    assert_eq!(s.getattr(c.ino).unwrap().rdev, 0x0103);
    for name in [&b"l1"[..], b"l2"] {
        s.relink(&Relink {
            insert: Some((1, name, c.ino)),
            links: &[(c.ino, 1)],
            ..Relink::default()
        })
        .unwrap();
    }
    s.fsync().unwrap();
    // Not fsynced: lost with the cut.
    s.unlink(1, b"l2").unwrap();
    drop(s);
    ssd.power_cut().unwrap();
    let mut s = PStore::open(dev, &cfg).unwrap();
    let i = s.getattr(c.ino).unwrap();
    assert_eq!((i.rdev, i.nlink), (0x0103, 3));
    assert_eq!(s.lookup(1, b"l2"), Some(c.ino));
}

#[test]
fn everything_survives_close_and_reopen_across_many_checkpoints() {
    let (_c, dev) = swarm(32 << 20, 512);
    let cfg = small_config(512);
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    let mut files = Vec::new();
    for i in 0..600u32 {
        let f = s
            .create(
                1,
                format!("mdtest.{}.{}", i / 10, i % 10).as_bytes(),
                REG,
                0,
                0,
                Hint::default(),
            )
            .unwrap();
        s.write(f.ino, u64::from(i) * 7, &i.to_le_bytes()).unwrap();
        files.push(f.ino);
    }
    s.fsync().unwrap();
    let st = s.stats();
    assert!(
        st.checkpoints > 2,
        "a 16-page WAL forces checkpoints: {st:?}"
    );
    // Each was timed, by kind: every one was taken and made current, and the longest stop is
    // no longer than all together.
    let stops = st.checkpoint_stops;
    assert!(
        !stops.take.is_zero() && !stops.last.is_zero() && stops.longest() <= stops.total,
        "{st:?}"
    );
    drop(s);
    let mut s = PStore::open(dev, &cfg).unwrap();
    for (i, &ino) in files.iter().enumerate() {
        let name = format!("mdtest.{}.{}", i / 10, i % 10);
        assert_eq!(s.lookup(1, name.as_bytes()), Some(ino));
        let mut b = [0u8; 4];
        s.read(ino, i as u64 * 7, &mut b).unwrap();
        assert_eq!(u32::from_le_bytes(b), i as u32);
    }
    check_pages(&mut s);
    // New inos do not collide with old ones.
    let g = s.create(1, b"new", REG, 0, 0, Hint::default()).unwrap();
    assert!(!files.contains(&g.ino));
}

#[test]
fn the_file_backed_controller_holds_a_pstore_across_processes_of_the_device() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(32 << 20)
        .unwrap();
    let open = || {
        let mut fc = FileControllerConfig::new(&path);
        fc.workers = 1;
        fc.max_io_queues = 4;
        let ctrl = FileController::new(fc).unwrap();
        let dev = NvmeDevice::open(
            ctrl,
            DeviceConfig {
                io_queues: 1,
                ..DeviceConfig::default()
            },
        )
        .unwrap();
        Arc::new(dev)
    };
    let cfg = small_config(4096);
    {
        let mut s = PStore::format(open(), &cfg).unwrap();
        let f = s
            .create(1, b"persisted", REG, 0, 0, Hint::default())
            .unwrap();
        s.write(f.ino, 0, &vec![0x5A; 40_000]).unwrap();
        s.fsync().unwrap();
    }
    let mut s = PStore::open(open(), &cfg).unwrap();
    let ino = s.lookup(1, b"persisted").unwrap();
    let mut b = vec![0u8; 50_000];
    assert_eq!(s.read(ino, 0, &mut b).unwrap(), 40_000);
    assert!(b[..40_000].iter().all(|&x| x == 0x5A));
}

#[test]
fn workers_with_their_own_queues_share_a_namespace_in_disjoint_zones() {
    let (_c, dev) = swarm_queues(64 << 20, 512, 2);
    let cfgs: Vec<PStoreConfig> = (0..2u16)
        .map(|w| {
            let mut c = small_config(512);
            c.first_lba = u64::from(w) * c.lbas;
            c.queue = Some(usize::from(w));
            c.ino_base = (u64::from(w) << 48) | 2;
            c
        })
        .collect();
    let mut ws: Vec<PStore> = cfgs
        .iter()
        .map(|c| PStore::format(dev.clone(), c).unwrap())
        .collect();
    for i in 0..40u32 {
        let w = &mut ws[(i % 2) as usize];
        let f = w
            .create(1, format!("f{i}").as_bytes(), REG, 0, 0, Hint::default())
            .unwrap();
        // 9 pages: more than one command per request on the worker's queue.
        w.write(f.ino, 0, &vec![i as u8; 9 * 4096 + 5]).unwrap();
        w.fsync().unwrap();
    }
    drop(ws);
    for (w, c) in cfgs.iter().enumerate() {
        let mut s = PStore::open(dev.clone(), c).unwrap();
        assert_eq!(s.stats().inodes, 20);
        for i in (w as u32..40).step_by(2) {
            let ino = s.lookup(1, format!("f{i}").as_bytes()).unwrap();
            assert_eq!(ino >> 48, w as u64);
            let mut b = vec![0u8; 9 * 4096 + 5];
            s.read(ino, 0, &mut b).unwrap();
            assert!(b.iter().all(|&x| x == i as u8), "file {i} of worker {w}");
        }
    }
    let mut bad = small_config(512);
    bad.queue = Some(2);
    assert!(PStore::open(dev, &bad).is_err(), "queue 2 does not exist");
}

#[test]
fn a_write_behind_batch_sends_a_run_of_keys_as_one_command_and_waits_at_its_flush() {
    let (_ctrl, dev) = swarm_queues(32 << 20, 512, 2);
    let zone = Zone::new(dev.clone(), Some(0), 8, 64 * 8).unwrap();
    let mut batch = WriteBehind::default();
    assert!(
        matches!(
            zone.pump(&mut batch, &LateBytes::NONE),
            Some(Err(ZoneError::NoWriteBackQueue))
        ),
        "a zone without a write-back queue refuses"
    );
    let zone = zone.with_write_back_queue(1).unwrap();
    assert!(
        zone.clone().with_write_back_queue(2).is_err(),
        "queue 2 does not exist"
    );
    // Key k is page k, of bytes v.
    let pages = Pages(
        [(3, 1u8), (4, 2), (20, 3), (30, 5), (31, 6)]
            .into_iter()
            .map(|(k, v)| (k, vec![v; 4096]))
            .collect(),
    );
    let late = LateBytes {
        shared: &[],
        pages: &pages,
    };
    zone.stage_keyed(&mut batch, 3, 3..5).unwrap();
    zone.stage_flush(&mut batch);
    zone.stage_keyed(&mut batch, 20, 20..21).unwrap();
    assert!(matches!(
        zone.stage_keyed(&mut batch, 64, 64..65),
        Err(ZoneError::Range { .. })
    ));
    let writes = dev.controller().stats().writes;
    // The first round sends what precedes the flush and stops there.
    assert!(zone.pump(&mut batch, &late).is_none());
    let mut got = vec![0u8; 4096];
    zone.read(20, &mut got).unwrap();
    assert!(got.iter().all(|&x| x == 0), "page 20 waits for the flush");
    zone.finish(&mut batch, &late).unwrap();
    assert!(!batch.is_busy());
    // Pages 3 and 4 went as one command, page 20 as another.
    assert_eq!(dev.controller().stats().writes - writes, 2);
    for (p, v) in [(3, 1), (4, 2), (20, 3)] {
        zone.read(p, &mut got).unwrap();
        assert!(got.iter().all(|&x| x == v), "page {p}");
    }
    // An abandoned batch sends nothing more.
    zone.stage_keyed(&mut batch, 30, 30..31).unwrap();
    zone.stage_flush(&mut batch);
    zone.stage_keyed(&mut batch, 31, 31..32).unwrap();
    zone.pump(&mut batch, &late);
    zone.abandon(&mut batch).unwrap();
    zone.read(31, &mut got).unwrap();
    assert!(got.iter().all(|&x| x == 0), "page 31 was never sent");
}

#[test]
fn a_shared_write_takes_its_bytes_when_sent_pads_with_zeros_and_a_pump_sends_a_few_commands() {
    let (_ctrl, dev, zone) = zone_with_write_back_queue();
    let slot = dev.slot_bytes() as usize;
    let pages = 3 * slot / 4096;
    // Stale bytes in every bounce slot of the queue: the padding must not come from them.
    let mut batch = WriteBehind::default();
    let stale = Pages((0..pages as u64).map(|k| (k, vec![0xeeu8; 4096])).collect());
    zone.stage_keyed(&mut batch, 0, 0..pages as u64).unwrap();
    let late = LateBytes {
        shared: &[],
        pages: &stale,
    };
    zone.finish(&mut batch, &late).unwrap();
    // A log-like buffer: its first 5000 bytes at page 0 .. 2 (the second page padded), then,
    // in a second write, three slots' worth at page 2, which goes as three commands.
    let mut log: Vec<u8> = (0..3 * slot + 5000).map(|i| (i % 251) as u8).collect();
    zone.stage_shared(&mut batch, 0, 0..5000, 2 * 4096).unwrap();
    zone.stage_shared(&mut batch, 2, 5000..5000 + 3 * slot, 3 * slot)
        .unwrap();
    assert!(matches!(
        zone.stage_shared(&mut batch, 63, 0..8192, 8192),
        Err(ZoneError::Range { .. })
    ));
    // Appended after staging: a shared buffer may grow while its staged range stays.
    log.extend_from_slice(&[9u8; 4096]);
    let writes = dev.controller().stats().writes;
    let mut pumps = 0;
    while zone
        .pump(
            &mut batch,
            &LateBytes {
                shared: &log,
                pages: &(),
            },
        )
        .is_none()
    {
        pumps += 1;
        assert!(pumps < 1_000_000, "the batch never completed");
    }
    assert_eq!(dev.controller().stats().writes - writes, 4);
    let mut got = vec![0u8; 2 * 4096];
    zone.read(0, &mut got).unwrap();
    assert_eq!(&got[..5000], &log[..5000]);
    assert!(got[5000..].iter().all(|&x| x == 0), "padded with zeros");
    let mut got = vec![0u8; 3 * slot];
    zone.read(2, &mut got).unwrap();
    assert_eq!(got, &log[5000..5000 + 3 * slot]);
    // A buffer that lacks the staged range fails the batch instead of sending other bytes.
    zone.stage_shared(&mut batch, 40, 0..4096, 4096).unwrap();
    assert!(matches!(
        zone.finish(
            &mut batch,
            &LateBytes {
                shared: &log[..100],
                pages: &(),
            }
        ),
        Err(ZoneError::Device(_))
    ));
    // One pump sends a few commands however many could go: ten separate pages take at least
    // three pumps, and the first leaves commands queued.
    let apart = Pages((0..10u64).map(|p| (2 * p, vec![p as u8; 4096])).collect());
    for p in 0..10u64 {
        zone.stage_keyed(&mut batch, 2 * p, 2 * p..2 * p + 1)
            .unwrap();
    }
    let late = LateBytes {
        shared: &[],
        pages: &apart,
    };
    let writes = dev.controller().stats().writes;
    assert!(zone.pump(&mut batch, &late).is_none());
    std::thread::sleep(std::time::Duration::from_millis(20));
    let first = dev.controller().stats().writes - writes;
    assert!((1..10).contains(&first), "{first} of 10 sent by one pump");
    zone.finish(&mut batch, &late).unwrap();
    assert_eq!(dev.controller().stats().writes - writes, 10);
}

/// A zone of 64 pages at page 8 of an emulated device, on queue 0 with queue 1 for
/// write-backs; the controller is returned to keep it running.
fn zone_with_write_back_queue() -> (Arc<SwarmIo>, Arc<NvmeDevice>, Zone) {
    let (ctrl, dev) = swarm_queues(32 << 20, 512, 2);
    let zone = Zone::new(dev.clone(), Some(0), 8, 64 * 8)
        .unwrap()
        .with_write_back_queue(1)
        .unwrap();
    (ctrl, dev, zone)
}

/// Pages by key for keyed writes.
struct Pages(std::collections::BTreeMap<u64, Vec<u8>>);

impl KeyedPages for Pages {
    fn page(&self, key: u64) -> Option<&[u8]> {
        self.0.get(&key).map(|p| &p[..])
    }
}

#[test]
fn a_keyed_write_takes_its_pages_when_sent_one_command_per_slot_and_a_missing_page_fails_it() {
    let (_ctrl, dev, zone) = zone_with_write_back_queue();
    let per_slot = dev.slot_bytes() as u64 / 4096;
    let keys = 2 * per_slot + 3;
    let mut pages = Pages((0..keys).map(|k| (k, vec![1u8; 4096])).collect());
    let mut batch = WriteBehind::default();
    // Keys 0.. at page 5: three commands, and nothing copied yet.
    zone.stage_keyed(&mut batch, 5, 0..keys).unwrap();
    assert!(matches!(
        zone.stage_keyed(&mut batch, 60, 0..8),
        Err(ZoneError::Range { .. })
    ));
    // Changed after staging, before sending: the device gets the pages as they are then.
    for (k, p) in pages.0.iter_mut() {
        p.fill(*k as u8 + 10);
    }
    let writes = dev.controller().stats().writes;
    zone.finish(
        &mut batch,
        &LateBytes {
            shared: &[],
            pages: &pages,
        },
    )
    .unwrap();
    assert_eq!(dev.controller().stats().writes - writes, 3);
    let mut got = vec![0u8; keys as usize * 4096];
    zone.read(5, &mut got).unwrap();
    for (k, page) in got.chunks(4096).enumerate() {
        assert!(page.iter().all(|&x| x == k as u8 + 10), "key {k}");
    }
    // A key the pages lack fails the batch instead of sending other bytes; so does a page of
    // the wrong size.
    for (keys, page_1) in [(0..2, None), (1..2, Some(vec![0u8; 100]))] {
        match page_1 {
            None => pages.0.remove(&1),
            Some(p) => pages.0.insert(1, p),
        };
        zone.stage_keyed(&mut batch, 50, keys.clone()).unwrap();
        let late = LateBytes {
            shared: &[],
            pages: &pages,
        };
        assert!(
            matches!(zone.finish(&mut batch, &late), Err(ZoneError::Device(_))),
            "keys {keys:?}"
        );
    }
    zone.read(50, &mut got[..2 * 4096]).unwrap();
    assert!(
        got[..2 * 4096].iter().all(|&x| x == 0),
        "pages 50-51 never sent"
    );
}

#[test]
fn keys_staged_together_go_as_one_write_per_run_of_consecutive_keys() {
    let (_ctrl, dev, zone) = zone_with_write_back_queue();
    let keys = [3u64, 4, 5, 9, 20, 21];
    let pages = Pages(keys.iter().map(|&k| (k, vec![k as u8; 4096])).collect());
    let late = LateBytes {
        shared: &[],
        pages: &pages,
    };
    let mut batch = WriteBehind::default();
    // Key k goes to page 10 + k.
    zone.stage_keys(&mut batch, 10, keys).unwrap();
    zone.stage_keys(&mut batch, 10, []).unwrap();
    let writes = dev.controller().stats().writes;
    zone.finish(&mut batch, &late).unwrap();
    assert_eq!(
        dev.controller().stats().writes - writes,
        3,
        "runs 3-5, 9, 20-21"
    );
    let mut got = vec![0u8; 4096];
    for k in keys {
        zone.read(10 + k, &mut got).unwrap();
        assert!(got.iter().all(|&x| x == k as u8), "key {k}");
    }
    zone.read(10 + 6, &mut got).unwrap();
    assert!(got.iter().all(|&x| x == 0), "no key 6");
}

#[test]
fn runs_written_together_land_at_their_pages_through_own_and_shared_queues() {
    let (_c, dev) = swarm_queues(32 << 20, 512, 1);
    for queue in [Some(0), None] {
        let zone = Zone::new(dev.clone(), queue, 8, 64 * 8).unwrap();
        let (a, b, c) = (vec![1u8; 2 * 4096], vec![2u8; 4096], vec![3u8; 3 * 4096]);
        // Out of order, apart, and more pages than one command each.
        zone.write_runs(&[(40, &c), (3, &a), (20, &b), (9, &[])])
            .unwrap();
        let mut got = vec![0u8; 64 * 4096];
        zone.read(0, &mut got).unwrap();
        let page = |p: usize| &got[p * 4096..(p + 1) * 4096];
        for (p, v) in [(3, 1), (4, 1), (20, 2), (40, 3), (41, 3), (42, 3)] {
            assert!(page(p).iter().all(|&x| x == v), "page {p} via {queue:?}");
        }
        for p in [2, 5, 19, 21, 39, 43] {
            assert!(
                page(p).iter().all(|&x| x == 0),
                "page {p} untouched via {queue:?}"
            );
        }
        // A run past the end refuses the whole call before anything is written.
        let d = vec![9u8; 4096];
        assert!(matches!(
            zone.write_runs(&[(10, &d), (64, &d)]),
            Err(ZoneError::Range { .. })
        ));
        zone.read(10, &mut got[..4096]).unwrap();
        assert!(got[..4096].iter().all(|&x| x == 0));
        zone.write(40, &vec![0u8; 3 * 4096]).unwrap();
        zone.write_runs(&[(3, &[0u8; 2 * 4096]), (20, &[0u8; 4096])])
            .unwrap();
    }
}

#[test]
fn runs_read_together_come_from_their_pages_through_own_and_shared_queues_and_direct() {
    let (_c, dev) = swarm_queues(32 << 20, 512, 1);
    let data: Vec<u8> = (0..64 * 4096)
        .map(|i| (i / 4096 * 13 + i % 239) as u8)
        .collect();
    for (queue, direct) in [(Some(0), false), (None, false), (Some(0), true)] {
        if direct {
            dev.enable_direct_host_dma();
        }
        let zone = Zone::new(dev.clone(), queue, 8, 64 * 8).unwrap();
        zone.write(0, &data).unwrap();
        // Out of order, apart, one longer than a bounce slot (16 pages), one empty, one
        // buffer not dword aligned.
        let (mut a, mut b, mut c) = (vec![0u8; 2 * 4096], vec![0u8; 4096], vec![0u8; 20 * 4096]);
        let mut odd = vec![0u8; 3 * 4096 + 1];
        zone.read_runs(&mut [
            (40, &mut c[..]),
            (3, &mut a[..]),
            (9, &mut []),
            (20, &mut b[..]),
            (30, &mut odd[1..]),
        ])
        .unwrap();
        let pages = |p: usize, n: usize| &data[p * 4096..(p + n) * 4096];
        let how = format!("queue {queue:?}, direct {direct}");
        assert!(a == pages(3, 2), "run at 3 via {how}");
        assert!(b == pages(20, 1), "run at 20 via {how}");
        assert!(c == pages(40, 20), "run at 40 via {how}");
        assert!(odd[1..] == *pages(30, 3), "unaligned run at 30 via {how}");
        // A run past the end refuses the whole call.
        let mut late = vec![0u8; 2 * 4096];
        assert!(matches!(
            zone.read_runs(&mut [(3, &mut a[..]), (63, &mut late[..])]),
            Err(ZoneError::Range { .. })
        ));
    }
}

#[test]
fn long_runs_move_alike_through_slots_and_direct_transfers_from_any_buffer() {
    let (_c, dev) = swarm_queues(32 << 20, 512, 1);
    // 2.5 MiB: more than one slot (64 KiB) and more than one direct command (1 MiB) each.
    const PAGES: usize = 640;
    let zone = Zone::new(dev.clone(), Some(0), 8, PAGES as u64 * 8).unwrap();
    let data: Vec<u8> = (0..PAGES * 4096)
        .map(|i| (i / 4096 * 7 + i % 251) as u8)
        .collect();
    zone.write(0, &data).unwrap();
    let mut through_slots = vec![0u8; data.len()];
    zone.read(0, &mut through_slots).unwrap();
    assert!(through_slots == data, "bounce-slot read");
    let both = data.len() as u64 * 2;
    assert_eq!(
        zone.transfers(),
        ZoneTransfers {
            direct: 0,
            copied: both
        }
    );
    dev.enable_direct_host_dma();
    let mut direct = vec![0u8; data.len()];
    zone.read(0, &mut direct).unwrap();
    assert!(direct == data, "direct read");
    // A buffer that is not dword aligned cannot be named by PRPs: it goes through the slots,
    // and the zone's counts say so.
    let mut odd = vec![0u8; data.len() + 1];
    zone.read(0, &mut odd[1..]).unwrap();
    assert!(odd[1..] == data[..], "unaligned read");
    let len = data.len() as u64;
    assert_eq!(
        zone.clone().transfers(),
        ZoneTransfers {
            direct: len,
            copied: both + len
        }
    );
    // From the middle of the zone, across a direct command's boundary.
    let mut mid = vec![0u8; 300 * 4096];
    zone.read(200, &mut mid).unwrap();
    assert!(mid == data[200 * 4096..500 * 4096], "read from page 200");
    // An aligned run over two direct commands and an unaligned one, written in one call,
    // land alike.
    let new: Vec<u8> = data.iter().map(|b| b ^ 0x5A).collect();
    let mut odd_new = vec![0u8; 100 * 4096 + 1];
    odd_new[1..].copy_from_slice(&new[500 * 4096..600 * 4096]);
    let before = zone.transfers();
    zone.write_runs(&[(10, &new[10 * 4096..310 * 4096]), (500, &odd_new[1..])])
        .unwrap();
    // One buffer off alignment sends the whole call through the slots.
    assert_eq!(zone.transfers().copied - before.copied, 400 * 4096);
    zone.read(0, &mut direct).unwrap();
    for (p, (got, want)) in direct.chunks(4096).zip(data.chunks(4096)).enumerate() {
        let rewritten = (10..310).contains(&p) || (500..600).contains(&p);
        let want: Vec<u8> = want
            .iter()
            .map(|b| if rewritten { b ^ 0x5A } else { *b })
            .collect();
        assert!(got == want, "page {p} after the rewrite");
    }
}

#[test]
fn an_unformatted_or_too_small_zone_is_refused() {
    let (_c, dev) = swarm(32 << 20, 4096);
    assert!(matches!(
        PStore::open(dev.clone(), &small_config(4096)),
        Err(PStoreError::Corrupt(_))
    ));
    let mut tiny = PStoreConfig::new(0, 64);
    tiny.wal_pages = 60;
    assert!(matches!(
        PStore::format(dev.clone(), &tiny),
        Err(PStoreError::Invalid(_))
    ));
    let past_end = PStoreConfig::new(8000, 1000);
    assert!(PStore::format(dev, &past_end).is_err());
}

#[derive(Debug, Clone)]
enum DataOp {
    Write(u64, Vec<u8>),
    Truncate(u64),
}

/// `data` written at byte `at` of the byte-vector model of a file.
fn model_write(model: &mut Vec<u8>, at: u64, data: &[u8]) {
    let (at, end) = (at as usize, at as usize + data.len());
    if model.len() < end {
        model.resize(end, 0);
    }
    model[at..end].copy_from_slice(data);
}

fn data_op() -> impl Strategy<Value = DataOp> {
    prop_oneof![
        4 => (0u64..70_000, prop::collection::vec(any::<u8>(), 1..9000))
            .prop_map(|(o, d)| DataOp::Write(o, d)),
        // Whole pages: the paths that hand the data to the device as it is.
        2 => (0u64..17, 1usize..9, any::<u8>())
            .prop_map(|(p, n, b)| DataOp::Write(p * 4096, (0..n * 4096).map(|i| b ^ (i / 7) as u8).collect())),
        // Over several blocks in one call: their device writes go out together, their
        // reads come back together.
        1 => (0u64..40_000, prop::collection::vec(any::<u8>(), 60_000..140_000))
            .prop_map(|(o, d)| DataOp::Write(o, d)),
        1 => (0u64..10, 17usize..48, any::<u8>())
            .prop_map(|(p, n, b)| DataOp::Write(p * 4096, (0..n * 4096).map(|i| b ^ (i / 11) as u8).collect())),
        1 => (0u64..70_000).prop_map(DataOp::Truncate),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn file_contents_follow_a_byte_vector_model(
        ops in prop::collection::vec(data_op(), 1..25),
        ranges in prop::collection::vec((0usize..80_000, 1usize..70_000), 0..6),
        direct in any::<bool>(),
        defer in any::<bool>(),
        big_blocks in any::<bool>(),
    ) {
        let (_c, dev) = swarm(32 << 20, 4096);
        let mut cfg = small_config(4096);
        if big_blocks {
            // Blocks of more pages than are staged: their writes go to the device, all the
            // blocks of one call together.
            cfg.block_pages = 16;
        }
        if direct {
            // The worker's own queue with direct transfers, as a server runs it.
            dev.enable_direct_host_dma();
            cfg.queue = Some(0);
        }
        let mut s = PStore::format(dev, &cfg).unwrap();
        s.defer_settle(defer).unwrap();
        let f = s.create(1, b"f", REG, 0, 0, Hint::default()).unwrap();
        let mut model: Vec<u8> = Vec::new();
        for op in ops {
            match op {
                DataOp::Write(o, d) => {
                    s.write(f.ino, o, &d).unwrap();
                    model_write(&mut model, o, &d);
                }
                DataOp::Truncate(n) => {
                    s.truncate(f.ino, n).unwrap();
                    model.resize(n as usize, 0);
                }
            }
            prop_assert_eq!(s.getattr(f.ino).unwrap().size, model.len() as u64);
        }
        let mut back = vec![0xFFu8; model.len() + 100];
        let n = s.read(f.ino, 0, &mut back).unwrap();
        prop_assert_eq!(n, model.len());
        prop_assert!(back[..n] == model[..], "contents differ");
        // Reads of any range: whole mapped pages straight into the buffer, the bytes around
        // them (partial pages, holes) through a copy; clipped at the size.
        for (at, len) in ranges {
            let mut got = vec![0xFFu8; len];
            let n = s.read(f.ino, at as u64, &mut got).unwrap();
            let want = model.get(at..model.len().min(at + len)).unwrap_or_default();
            prop_assert_eq!(n, want.len());
            prop_assert!(got[..n] == *want, "read of {} at {}", len, at);
        }
        // Page-aligned reads of whole pages, each block's pages straight into the buffer.
        for p in 0..model.len() / 4096 {
            let mut page = vec![0xFFu8; 4096];
            prop_assert_eq!(s.read(f.ino, p as u64 * 4096, &mut page).unwrap(), 4096);
            prop_assert!(page[..] == model[p * 4096..(p + 1) * 4096], "page {}", p);
        }
        s.fsync().unwrap();
        check_pages(&mut s);
    }
}

/// The pieces of bytes `[at, at + len)` in I/O units of `unit` bytes: (unit start, offset,
/// length), as a client cuts an I/O-based file's requests.
fn unit_pieces(unit: u64, at: u64, len: u64) -> Vec<(u64, u64, u64)> {
    let mut pieces = Vec::new();
    let mut pos = at;
    while pos < at + len {
        let origin = pos / unit * unit;
        let n = (origin + unit).min(at + len) - pos;
        pieces.push((origin, pos, n));
        pos += n;
    }
    pieces
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// An I/O-based file's units (extents) written at any offset inside them, overlapping,
    /// across units, and cut by truncates, read back at any offset as a byte vector, also
    /// after a reopen; no page is lost or shared.
    #[test]
    fn io_units_written_and_read_anywhere_follow_a_byte_vector_model(
        unit in prop_oneof![Just(4096u64), Just(47_008), Just(100_000)],
        ops in prop::collection::vec(data_op(), 1..25),
        ranges in prop::collection::vec((0usize..200_000, 1usize..120_000), 1..6),
    ) {
        let (_c, dev) = swarm(32 << 20, 4096);
        let mut cfg = small_config(4096);
        cfg.block_pages = 16; // 64 KiB blocks, as a server's: a 100,000-byte unit is two
        let mut s = PStore::format(dev.clone(), &cfg).unwrap();
        let f = s.create(1, b"n1", REG, 0, 0, Hint::default()).unwrap();
        let mut model: Vec<u8> = Vec::new();
        for op in ops {
            match op {
                DataOp::Write(o, d) => {
                    for (origin, at, n) in unit_pieces(unit, o, d.len() as u64) {
                        let piece = &d[(at - o) as usize..(at - o + n) as usize];
                        s.write_extent(f.ino, origin, at, piece).unwrap();
                    }
                    model_write(&mut model, o, &d);
                }
                DataOp::Truncate(n) => {
                    s.truncate(f.ino, n).unwrap();
                    model.resize(n as usize, 0);
                }
            }
        }
        let read = |s: &mut PStore, at: usize, len: usize| -> Vec<u8> {
            let mut out = Vec::new();
            for (origin, pos, n) in unit_pieces(unit, at as u64, len as u64) {
                let mut got = vec![0xFFu8; n as usize];
                let k = s.read_extent(f.ino, origin, pos, &mut got).unwrap();
                out.extend_from_slice(&got[..k]);
                if k < n as usize {
                    break;
                }
            }
            out
        };
        for reopened in [false, true] {
            for &(at, len) in &ranges {
                let want = model.get(at..model.len().min(at + len)).unwrap_or_default();
                prop_assert!(read(&mut s, at, len) == want, "{} at {} (reopened {})", len, at, reopened);
            }
            prop_assert!(read(&mut s, 0, model.len() + 1) == model, "whole (reopened {})", reopened);
            s.fsync().unwrap();
            check_pages(&mut s);
            drop(s);
            s = PStore::open(dev.clone(), &cfg).unwrap();
        }
        // Writes outside the unit they name are refused.
        prop_assert!(s.write_extent(f.ino, unit, unit - 1, b"x").is_err());
    }
}

#[test]
fn staged_data_pages_go_out_on_their_own_queue_when_given_one_and_survive_a_power_cut() {
    let (ssd, dev) = swarm_slow_writes(32 << 20, 4096, 3, 1.0);
    let mut cfg = write_out_config();
    cfg.data_write_out_queue = Some(3);
    assert!(
        PStore::format(dev.clone(), &cfg).is_err(),
        "queue 3 of a device with 3 queues"
    );
    cfg.data_write_out_queue = Some(2);
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    s.defer_settle(true).unwrap();
    let mut files = Vec::new();
    for i in 0..600u16 {
        let name = format!("small.{i}");
        let f = s
            .create(1, name.as_bytes(), REG, 0, 0, Hint::default())
            .unwrap();
        s.write(f.ino, 0, &small_content(i)).unwrap();
        files.push(f.ino);
        s.pump().unwrap();
    }
    s.fsync().unwrap();
    assert_eq!(s.stats().staged_pages, 0);
    power_cut_keeps_small_files(s, &ssd, dev, &cfg, &files);
}
