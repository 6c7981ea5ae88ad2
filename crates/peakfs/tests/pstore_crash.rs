//! PStore crash consistency: power cuts of the emulated SSD's volatile write cache, and torn
//! or corrupt WAL tails written onto the device. After recovery, everything acknowledged by
//! `fsync` is there, nothing of a torn transaction is, and the page bitmap agrees with the
//! block mappings (no page mapped twice, none leaked).

mod pstore_support;

use std::collections::BTreeMap;
use std::sync::Arc;

use gpu_nvme::device::NvmeDevice;
use peakfs::pstore::inode::Hint;
use peakfs::pstore::{PStore, PStoreConfig, Relink};
use proptest::prelude::*;
use pstore_support::{
    check_pages, kept_prefix, small_config, swarm, swarm_queues, swarm_slow_writes,
    write_out_config,
};
use swarmio::SwarmIo;

const REG: u32 = 0o100644;
/// Zone page where the WAL starts (after the two superblock copies).
const WAL_PAGE: u64 = 2;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Names and contents of the files in directory 1.
fn state(s: &mut PStore) -> Model {
    let mut m = Model::new();
    for (name, ino) in s.readdir(1, None, usize::MAX) {
        let size = s.getattr(ino).unwrap().size as usize;
        let mut buf = vec![0u8; size];
        assert_eq!(s.read(ino, 0, &mut buf).unwrap(), size);
        m.insert(name, buf);
    }
    m
}

#[derive(Debug, Clone)]
enum Op {
    Create(u8),
    Write(u8, u32, u16, u8),
    Truncate(u8, u32),
    Unlink(u8),
    Fsync,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..12).prop_map(Op::Create),
        5 => (0u8..12, 0u32..40_000, 1u16..20_000, any::<u8>())
            .prop_map(|(f, o, l, b)| Op::Write(f, o, l, b)),
        1 => (0u8..12, 0u32..40_000).prop_map(|(f, n)| Op::Truncate(f, n)),
        1 => (0u8..12).prop_map(Op::Unlink),
        2 => Just(Op::Fsync),
    ]
}

fn name(f: u8) -> Vec<u8> {
    format!("job.{}.dat", f).into_bytes()
}

/// Applies `op` to the store and the model.
fn step(s: &mut PStore, m: &mut Model, op: &Op) {
    match *op {
        Op::Create(f) => {
            if let std::collections::btree_map::Entry::Vacant(e) = m.entry(name(f)) {
                s.create(1, &name(f), REG, 0, 0, Hint::default()).unwrap();
                e.insert(Vec::new());
            }
        }
        Op::Write(f, o, l, b) => {
            if let Some(content) = m.get_mut(&name(f)) {
                let ino = s.lookup(1, &name(f)).unwrap();
                let data = vec![b; usize::from(l)];
                s.write(ino, u64::from(o), &data).unwrap();
                let end = o as usize + data.len();
                if content.len() < end {
                    content.resize(end, 0);
                }
                content[o as usize..end].copy_from_slice(&data);
            }
        }
        Op::Truncate(f, n) => {
            if let Some(content) = m.get_mut(&name(f)) {
                let ino = s.lookup(1, &name(f)).unwrap();
                s.truncate(ino, u64::from(n)).unwrap();
                content.resize(n as usize, 0);
            }
        }
        Op::Unlink(f) => {
            if m.remove(&name(f)).is_some() {
                s.unlink(1, &name(f)).unwrap();
            }
        }
        Op::Fsync => s.fsync().unwrap(),
    }
}

/// Cuts the power of `ctrl`; with `kept`, after the write cache wrote about half of its
/// blocks back on its own (which ones: a hash of `kept` and the LBA).
fn power_cut(ctrl: &SwarmIo, kept: Option<u64>) {
    match kept {
        None => ctrl.power_cut().unwrap(),
        Some(seed) => ctrl
            .power_cut_keeping(|lba| {
                let mut x = seed ^ lba.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                x ^= x >> 31;
                x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
                (x ^ (x >> 29)) & 1 == 1
            })
            .unwrap(),
    }
}

/// A store over a fresh emulated SSD with three host queues; with `behind`, the second
/// carries Icache write-backs and the third checkpoint pieces, which the store does not wait
/// for.
fn crash_store(behind: bool) -> (Arc<SwarmIo>, Arc<NvmeDevice>, PStoreConfig) {
    let (ctrl, dev) = swarm_queues(32 << 20, 4096, 3);
    let mut c = small_config(4096);
    // A tiny Icache makes write-backs (and the log syncs before them) frequent: with one
    // dirty block allowed, every inode change starts one, and with both blocks on their way
    // to the device the next miss waits for them.
    c.icache_blocks = 2;
    c.dirty_ratio = 0.5;
    // The worker's own queue (the other tests use the device's shared queues).
    c.queue = Some(0);
    c.write_back_queue = behind.then_some(1);
    c.checkpoint_queue = behind.then_some(2);
    // Pumps write the log ahead once a page of it is unwritten, on the write-back queue when
    // there is one (in the proptest of write-backs in flight, dozens of times a run), so
    // write-backs and cuts meet it in flight.
    c.log_write_ahead = 4096;
    (ctrl, dev, c)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    #[test]
    fn after_a_power_cut_the_state_is_one_reached_since_the_last_fsync(
        ops in prop::collection::vec(op(), 1..40),
        defer in any::<bool>(),
        behind in any::<bool>(),
        pump in any::<bool>(),
        kept in prop::option::of(any::<u64>()),
        through in any::<bool>(),
    ) {
        let (ctrl, dev, cfg) = crash_store(behind);
        let s = PStore::format(dev.clone(), &cfg).unwrap();
        let run = Run { ctrl: &ctrl, dev, cfg: &cfg, defer, pump, kept, through, kill: false };
        run.then_cut(s, Model::new(), &ops)?;
    }

    /// A server writes through what a close acknowledges (its writes and truncates) before
    /// it answers. Killed (no power cut: the device keeps every write it got) and reopened on
    /// the same boot, the store shows a state reached since the last write through or fsync.
    #[test]
    fn after_a_kill_the_state_is_one_reached_since_the_last_write_through(
        ops in prop::collection::vec(op(), 1..40),
        defer in any::<bool>(),
        behind in any::<bool>(),
        pump in any::<bool>(),
    ) {
        let (ctrl, dev, mut cfg) = crash_store(behind);
        cfg.page_cache_survived = true;
        let s = PStore::format(dev.clone(), &cfg).unwrap();
        let run = Run {
            ctrl: &ctrl, dev, cfg: &cfg, defer, pump, kept: None, through: true, kill: true,
        };
        run.then_cut(s, Model::new(), &ops)?;
    }
}

/// A run of [`Op`]s over a store, then a power cut.
struct Run<'a> {
    ctrl: &'a SwarmIo,
    dev: Arc<NvmeDevice>,
    cfg: &'a PStoreConfig,
    /// [`PStore::defer_settle`].
    defer: bool,
    /// Pump after each operation, as a server does between requests.
    pump: bool,
    /// [`power_cut`]'s choice of blocks the write cache wrote back.
    kept: Option<u64>,
    /// [`PStore::write_through`] after each write and truncate, as a server does.
    through: bool,
    /// End with the process killed instead of the power cut: nothing the device got is lost.
    kill: bool,
}

impl Run<'_> {
    /// Runs `ops` on the store and its model `m`, cuts the power and reopens the store: the
    /// state recovered must be one reached since the last fsync ([`recovered_fits`]).
    /// Returns how many operations ran while a checkpoint was being written that went on
    /// being written after them, and how many checkpoints were made current.
    fn then_cut(
        self,
        mut s: PStore,
        mut m: Model,
        ops: &[Op],
    ) -> Result<(usize, u64), TestCaseError> {
        s.defer_settle(self.defer).unwrap();
        let (mut between_pieces, before) = (0, s.stats().checkpoints);
        // States the recovered store may show: from the last fsync on.
        let mut allowed = vec![m.clone()];
        for op in ops {
            let writing = s.stats().checkpoint_writing;
            step(&mut s, &mut m, op);
            between_pieces += usize::from(writing && s.stats().checkpoint_writing);
            if self.pump {
                s.pump().unwrap();
            }
            let written_through = self.through && matches!(op, Op::Write(..) | Op::Truncate(..));
            if written_through {
                s.write_through().unwrap();
            }
            if matches!(op, Op::Fsync) || (self.kill && written_through) {
                allowed.clear();
            }
            allowed.push(m.clone());
        }
        let made_current = s.stats().checkpoints - before;
        drop(s);
        if !self.kill {
            power_cut(self.ctrl, self.kept);
        }
        let mut r = PStore::open(self.dev, self.cfg).unwrap();
        let got = state(&mut r);
        if let Err(e) = recovered_fits(&got, &allowed) {
            prop_assert!(false, "{}", e);
        }
        check_pages(&mut r);
        Ok((between_pieces, made_current))
    }
}

/// Names of directory 1 → the inos they name, in a store with hard links.
type Names = BTreeMap<Vec<u8>, u64>;

#[derive(Debug, Clone)]
enum LinkOp {
    Create(u8),
    /// A second name for a file.
    Link(u8, u8),
    Unlink(u8),
    /// Drops a name; at the last link the inode stays an orphan (an open file).
    UnlinkOpen(u8),
    /// Rename over a name (dropping the link of the file it named).
    Rename(u8, u8),
    Fsync,
}

fn link_op() -> impl Strategy<Value = LinkOp> {
    prop_oneof![
        3 => (0u8..8).prop_map(LinkOp::Create),
        3 => (0u8..8, 0u8..8).prop_map(|(f, g)| LinkOp::Link(f, g)),
        2 => (0u8..8).prop_map(LinkOp::Unlink),
        1 => (0u8..8).prop_map(LinkOp::UnlinkOpen),
        2 => (0u8..8, 0u8..8).prop_map(|(f, g)| LinkOp::Rename(f, g)),
        2 => Just(LinkOp::Fsync),
    ]
}

/// Applies `op` to the store (frees orphans unless the op keeps them) and the model.
fn link_step(s: &mut PStore, m: &mut Names, op: &LinkOp) {
    match *op {
        LinkOp::Create(f) => {
            if let std::collections::btree_map::Entry::Vacant(e) = m.entry(name(f)) {
                let i = s.create(1, &name(f), REG, 0, 0, Hint::default()).unwrap();
                // Beyond the first block: hashtable blocks to free with the inode.
                s.write(i.ino, 0, &[f; 20_000]).unwrap();
                e.insert(i.ino);
            }
        }
        LinkOp::Link(f, g) => {
            if let (Some(&ino), None) = (m.get(&name(f)), m.get(&name(g))) {
                let change = Relink {
                    insert: Some((1, &name(g), ino)),
                    links: &[(ino, 1)],
                    ..Relink::default()
                };
                assert!(s.relink(&change).unwrap().is_empty());
                m.insert(name(g), ino);
            }
        }
        LinkOp::Unlink(f) => {
            if m.remove(&name(f)).is_some() {
                s.unlink(1, &name(f)).unwrap();
            }
        }
        LinkOp::UnlinkOpen(f) => {
            if let Some(ino) = m.remove(&name(f)) {
                let change = Relink {
                    remove: Some((1, &name(f))),
                    links: &[(ino, -1)],
                    ..Relink::default()
                };
                s.relink(&change).unwrap();
            }
        }
        LinkOp::Rename(f, g) => {
            let Some(&ino) = m.get(&name(f)) else { return };
            let old = m.get(&name(g)).copied();
            if f == g || old == Some(ino) {
                return;
            }
            let links: Vec<_> = old.map(|o| (o, -1)).into_iter().collect();
            // The replaced file is freed in the rename's own transaction.
            let change = Relink {
                remove: Some((1, &name(f))),
                insert: Some((1, &name(g), ino)),
                links: &links,
                free: old,
            };
            for unlinked in s.relink(&change).unwrap() {
                assert!(unlinked.freed, "freed with the rename");
                assert!(!s.is_orphan(unlinked.ino));
            }
            m.remove(&name(f));
            m.insert(name(g), ino);
        }
        LinkOp::Fsync => s.fsync().unwrap(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    #[test]
    fn after_a_power_cut_link_counts_match_the_names_and_no_orphan_is_left(
        ops in prop::collection::vec(link_op(), 1..40),
        defer in any::<bool>(),
        behind in any::<bool>(),
        kept in prop::option::of(any::<u64>()),
    ) {
        let (ctrl, dev, cfg) = crash_store(behind);
        let mut s = PStore::format(dev.clone(), &cfg).unwrap();
        s.defer_settle(defer).unwrap();
        let mut m = Names::new();
        let mut allowed = vec![m.clone()];
        for op in &ops {
            link_step(&mut s, &mut m, op);
            if matches!(op, LinkOp::Fsync) {
                allowed.clear();
            }
            allowed.push(m.clone());
        }
        drop(s);
        power_cut(&ctrl, kept);
        let mut r = PStore::open(dev, &cfg).unwrap();
        let got: Names = r.readdir(1, None, usize::MAX).into_iter().collect();
        prop_assert!(allowed.contains(&got), "recovered names {:?}", got);
        // Each inode has as many links as names, and nothing else survives: orphans and the
        // inodes whose last link went are freed with their data.
        let mut links: BTreeMap<u64, u32> = BTreeMap::new();
        for ino in got.values() {
            *links.entry(*ino).or_default() += 1;
        }
        for (ino, n) in &links {
            prop_assert_eq!(r.getattr(*ino).unwrap().nlink, *n, "ino {}", ino);
        }
        prop_assert_eq!(r.stats().inodes, links.len() as u64);
        prop_assert_eq!(r.stats().orphans, 0);
        check_pages(&mut r);
    }
}

/// Overwrites bytes of the zone through the device.
fn poke(dev: &Arc<NvmeDevice>, byte: u64, f: impl FnOnce(&mut [u8])) {
    let lba = byte / 4096;
    let mut page = vec![0u8; 8192];
    dev.read_blocks(lba, &mut page).unwrap();
    f(&mut page[(byte % 4096) as usize..]);
    dev.write_blocks(lba, &page).unwrap();
    dev.flush().unwrap();
}

/// Creates `a` (fsynced), then `b` with data (fsynced); returns the WAL range of `b`.
fn two_transactions(s: &mut PStore) -> (u64, u64) {
    let a = s.create(1, b"a", REG, 0, 0, Hint::default()).unwrap();
    s.write(a.ino, 0, b"first").unwrap();
    s.fsync().unwrap();
    let from = s.stats().wal_bytes;
    let checkpoints = s.stats().checkpoints;
    let b = s.create(1, b"b", REG, 0, 0, Hint::default()).unwrap();
    s.write(b.ino, 0, &[7u8; 10_000]).unwrap();
    s.fsync().unwrap();
    assert_eq!(
        s.stats().checkpoints,
        checkpoints,
        "no checkpoint in between"
    );
    (from, s.stats().wal_bytes)
}

fn expect_only_a(s: &mut PStore) {
    let got = state(s);
    assert_eq!(got.keys().collect::<Vec<_>>(), vec![&b"a".to_vec()]);
    assert_eq!(got[&b"a".to_vec()], b"first");
    check_pages(s);
}

#[test]
fn a_torn_wal_tail_is_ignored_and_its_pages_are_not_leaked() {
    for cut in [1u64, 17, 200] {
        let (_ctrl, dev) = swarm(32 << 20, 4096);
        let cfg = small_config(4096);
        let mut s = PStore::format(dev.clone(), &cfg).unwrap();
        let (from, to) = two_transactions(&mut s);
        drop(s);
        // Everything of b's frames after `cut` bytes never reached the disk.
        let start = WAL_PAGE * 4096 + from + cut;
        let end = WAL_PAGE * 4096 + to;
        for byte in (start..end).step_by(4096) {
            poke(&dev, byte, |b| {
                let n = b.len().min((end - byte) as usize);
                b[..n].fill(0);
            });
        }
        let mut r = PStore::open(dev, &cfg).unwrap();
        expect_only_a(&mut r);
    }
}

#[test]
fn a_corrupt_wal_record_ends_the_replay_before_it() {
    let (_ctrl, dev) = swarm(32 << 20, 4096);
    let cfg = small_config(4096);
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    let (from, _) = two_transactions(&mut s);
    drop(s);
    poke(&dev, WAL_PAGE * 4096 + from + 30, |b| b[0] ^= 0x40);
    let mut r = PStore::open(dev, &cfg).unwrap();
    expect_only_a(&mut r);
}

#[test]
fn pages_freed_by_an_unsynced_move_are_not_reused_before_the_log_is_durable() {
    let (ctrl, dev) = swarm(32 << 20, 4096);
    let mut cfg = small_config(4096);
    // A log large enough that filling the zone below takes no checkpoint.
    cfg.wal_pages = 256;
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    let a = s.create(1, b"a", REG, 0, 0, Hint::default()).unwrap();
    s.write(a.ino, 0, &[0xA1; 100]).unwrap();
    s.fsync().unwrap();
    let old = s.first_block(a.ino).unwrap();
    // Growing moves a's first block to a bigger run and frees the old page, unsynced.
    s.write(a.ino, 100, &[0xA2; 9000]).unwrap();
    assert_ne!(s.first_block(a.ino).unwrap(), old);
    // Then one-page blocks of b fill the zone, wrapping the allocator around.
    let b = s.create(1, b"b", REG, 0, 0, Hint::default()).unwrap();
    let bs = s.block_bytes();
    let mut k = 0;
    while s.write(b.ino, k * bs, &[0xBB; 100]).is_ok() {
        k += 1;
    }
    assert!(k > 1000, "only {k} blocks written");
    assert_eq!(s.stats().checkpoints, 1, "only the format's checkpoint");
    // Another worker's fsync flushes the shared device cache: b's data pages become durable
    // while this worker's log is not.
    dev.flush().unwrap();
    drop(s);
    ctrl.power_cut().unwrap();
    let mut r = PStore::open(dev, &cfg).unwrap();
    let mut buf = vec![0u8; 200];
    let n = r.read(a.ino, 0, &mut buf).unwrap();
    assert!(buf[..100].iter().all(|&x| x == 0xA1), "fsynced data intact");
    // The growth too where the zone's commit (below) made it durable.
    assert!(
        n == 100 || (n == 200 && buf[100..].iter().all(|&x| x == 0xA2)),
        "{n}"
    );
    // A full zone commits before it refuses a write (the move's free then counts): b is
    // there as far as that commit made it, every block of it b's own bytes.
    if let Some(ino) = r.lookup(1, b"b") {
        let size = r.getattr(ino).unwrap().size;
        let mut block = vec![0u8; 100];
        for k in 0..size.div_ceil(bs) {
            assert_eq!(r.read(ino, k * bs, &mut block).unwrap(), 100);
            assert!(block.iter().all(|&x| x == 0xBB), "block {k} of b");
        }
    }
    check_pages(&mut r);
}

#[test]
fn reopening_twice_replays_once_and_gives_the_same_state() {
    let (_ctrl, dev) = swarm(32 << 20, 4096);
    let cfg = small_config(4096);
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    let _ = two_transactions(&mut s);
    drop(s);
    // Opening twice replays, checkpoints, then finds an empty log.
    let mut r = PStore::open(dev.clone(), &cfg).unwrap();
    let first = state(&mut r);
    drop(r);
    let mut r = PStore::open(dev, &cfg).unwrap();
    assert_eq!(state(&mut r), first);
    assert_eq!(first.len(), 2);
    check_pages(&mut r);
}

#[test]
fn a_corrupt_checkpoint_or_superblock_is_reported_not_trusted() {
    let (_ctrl, dev) = swarm(32 << 20, 4096);
    let cfg = small_config(4096);
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    let _ = two_transactions(&mut s);
    s.checkpoint().unwrap();
    drop(s);
    let mut sb = vec![0u8; 8192];
    dev.read_blocks(0, &mut sb).unwrap();
    // The two checkpoint areas follow the WAL (before the inode zone and data, which this
    // garbles too and restores below); the current one is bad then.
    let ckpt = (WAL_PAGE + cfg.wal_pages) * 4096;
    let mut saved = vec![0u8; 4096 * 512];
    dev.read_blocks(ckpt / 4096, &mut saved).unwrap();
    let mut bad = saved.clone();
    for b in bad.iter_mut().step_by(97) {
        *b ^= 0x5A;
    }
    dev.write_blocks(ckpt / 4096, &bad).unwrap();
    let err = PStore::open(dev.clone(), &cfg).unwrap_err();
    assert!(err.to_string().contains("checkpoint"), "{err}");
    dev.write_blocks(ckpt / 4096, &saved).unwrap();
    // Both superblock copies garbled: nothing is trusted.
    let mut garbled = sb.clone();
    garbled[100] ^= 1;
    garbled[4096 + 100] ^= 1;
    dev.write_blocks(0, &garbled).unwrap();
    let err = PStore::open(dev.clone(), &cfg).unwrap_err();
    assert!(err.to_string().contains("superblock"), "{err}");
    dev.write_blocks(0, &sb).unwrap();
    let mut r = PStore::open(dev, &cfg).unwrap();
    assert_eq!(state(&mut r).len(), 2, "restored bytes open again");
}

#[derive(Debug, Clone)]
enum ManyOp {
    /// Creates file k with k's pattern in its first bytes (an inode change beyond the
    /// create, and data the log names).
    Create(u16, u16),
    Unlink(u16),
    Fsync,
}

fn many_op() -> impl Strategy<Value = ManyOp> {
    prop_oneof![
        6 => (0u16..400, 0u16..300).prop_map(|(k, n)| ManyOp::Create(k, n)),
        3 => (0u16..400).prop_map(ManyOp::Unlink),
        1 => Just(ManyOp::Fsync),
    ]
}

fn many_name(k: u16) -> Vec<u8> {
    format!("r{k:04}").into_bytes()
}

/// Name → size of the files in directory 1 (each holds its name's pattern).
type Sizes = BTreeMap<Vec<u8>, u64>;

fn many_state(s: &mut PStore) -> Sizes {
    let mut m = Sizes::new();
    for (name, ino) in s.readdir(1, None, usize::MAX) {
        let size = s.getattr(ino).unwrap().size;
        let mut buf = vec![0u8; size as usize];
        assert_eq!(s.read(ino, 0, &mut buf).unwrap(), buf.len());
        assert!(
            buf.iter().all(|&b| b == name[4]),
            "{} holds bytes not its own",
            String::from_utf8_lossy(&name)
        );
        m.insert(name, size);
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// Hundreds of inodes over many Icache blocks, three of them cached and one allowed
    /// dirty: write-backs start at almost every change, with the next one (or a miss) waiting
    /// for the one in flight when the I/O writes behind.
    #[test]
    fn after_a_power_cut_with_write_backs_in_flight_the_state_is_one_since_the_last_fsync(
        ops in prop::collection::vec(many_op(), 1..300),
        defer in any::<bool>(),
        behind in any::<bool>(),
        kept in prop::option::of(any::<u64>()),
    ) {
        let (ctrl, dev, mut cfg) = crash_store(behind);
        cfg.icache_blocks = 3;
        cfg.dirty_ratio = 0.34;
        let mut s = PStore::format(dev.clone(), &cfg).unwrap();
        s.defer_settle(defer).unwrap();
        let mut m = Sizes::new();
        let mut allowed = vec![m.clone()];
        for op in &ops {
            match *op {
                ManyOp::Create(k, n) => {
                    let name = many_name(k);
                    if !m.contains_key(&name) {
                        let i = s.create(1, &name, REG, 0, 0, Hint::default()).unwrap();
                        // Two operations: a write-back between them makes the empty file
                        // durable.
                        m.insert(name.clone(), 0);
                        allowed.push(m.clone());
                        s.write(i.ino, 0, &vec![name[4]; usize::from(n)]).unwrap();
                        m.insert(name, u64::from(n));
                    }
                }
                ManyOp::Unlink(k) => {
                    if m.remove(&many_name(k)).is_some() {
                        s.unlink(1, &many_name(k)).unwrap();
                    }
                }
                ManyOp::Fsync => {
                    s.fsync().unwrap();
                    allowed.clear();
                }
            }
            // Between requests a server moves the write-back on.
            s.pump().unwrap();
            allowed.push(m.clone());
        }
        drop(s);
        power_cut(&ctrl, kept);
        let mut r = PStore::open(dev, &cfg).unwrap();
        let got = many_state(&mut r);
        prop_assert!(
            allowed.contains(&got),
            "recovered {} files, none of the {} allowed states",
            got.len(),
            allowed.len()
        );
        check_pages(&mut r);
    }
}

#[test]
fn a_write_back_over_the_dirty_limit_goes_behind_and_completes_between_requests() {
    for behind in [true, false] {
        let (_ctrl, dev, mut cfg) = crash_store(behind);
        cfg.icache_blocks = 8;
        cfg.dirty_ratio = 0.25;
        // What goes behind here is the Icache's write-back, not the log written ahead.
        cfg.log_write_ahead = 1 << 20;
        let mut s = PStore::format(dev.clone(), &cfg).unwrap();
        // Two dirty blocks allowed: the third block's first inode starts a write-back.
        let mut started = None;
        for k in 0..3 * 32 {
            s.create(1, &many_name(k), REG, 0, 0, Hint::default())
                .unwrap();
            if s.pump().unwrap() {
                started = Some(k);
                break;
            }
        }
        if !behind {
            assert_eq!(
                started, None,
                "synchronous write-backs leave nothing in flight"
            );
            assert!(s.stats().icache.write_backs > 0);
            continue;
        }
        assert!(
            started.is_some(),
            "no write-back in flight after 96 creates"
        );
        assert_eq!(
            s.stats().icache.write_backs,
            0,
            "counted once the device has them"
        );
        while s.pump().unwrap() {
            std::thread::yield_now();
        }
        assert!(s.stats().icache.write_backs > 0);
        // The blocks are ready again and the store is consistent on reopening.
        drop(s);
        let mut r = PStore::open(dev, &cfg).unwrap();
        assert_eq!(many_state(&mut r).len(), usize::from(started.unwrap()) + 1);
    }
}

#[test]
fn inode_blocks_written_behind_never_reach_the_medium_ahead_of_their_log() {
    // The harshest cache: at the cut it had written back every block but the log's. Had a
    // batch sent its inode blocks before its log was durable, a file would come back with the
    // size and first-block mapping of a write whose page allocation the log lost.
    let wal_pages = WAL_PAGE..WAL_PAGE + 16;
    for writes in 1..40u16 {
        let (ctrl, dev, mut cfg) = crash_store(true);
        cfg.icache_blocks = 3;
        cfg.dirty_ratio = 0.34;
        assert_eq!(cfg.wal_pages, 16);
        let mut s = PStore::format(dev.clone(), &cfg).unwrap();
        let mut inos = Vec::new();
        for k in 0..96 {
            inos.push(
                s.create(1, &many_name(k), REG, 0, 0, Hint::default())
                    .unwrap()
                    .ino,
            );
        }
        // A checkpoint: from here the log holds no image of these inodes, so what the medium's
        // inode blocks say is what recovery starts from.
        s.checkpoint().unwrap();
        // Files of three different Icache blocks in turn: every write dirties another block.
        let written: Vec<(u16, u64)> = (0..writes)
            .map(|u| ((u % 3) * 32 + u / 3, 1 + u64::from(u % 50)))
            .collect();
        for &(k, n) in &written {
            let name = many_name(k);
            s.write(inos[usize::from(k)], 0, &vec![name[4]; n as usize])
                .unwrap();
        }
        // A write-back the last writes started gets past its first stage (the flush of the
        // data pages) and sends its next, then the store is gone.
        for _ in 0..2 {
            s.pump().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        drop(s);
        ctrl.power_cut_keeping(|lba| !wal_pages.contains(&lba))
            .unwrap();
        let mut r = PStore::open(dev, &cfg).unwrap();
        let got = many_state(&mut r);
        let prefix = (0..=written.len()).find(|&n| {
            let mut want: Sizes = (0..96).map(|k| (many_name(k), 0)).collect();
            for &(k, size) in &written[..n] {
                want.insert(many_name(k), size);
            }
            want == got
        });
        assert!(
            prefix.is_some(),
            "after {writes} writes: a state no prefix of them gives"
        );
        check_pages(&mut r);
    }
}

#[test]
fn a_power_cut_with_a_write_out_of_small_files_in_flight_keeps_what_fsync_acknowledged() {
    let content = |i: u16, version: u8| -> Vec<u8> {
        (0..3901u32)
            .map(|k| (k as u16 ^ i) as u8 ^ version)
            .collect()
    };
    let make = |s: &mut PStore, i: u16| {
        let name = format!("small.{i}");
        let f = s
            .create(1, name.as_bytes(), REG, 0, 0, Hint::default())
            .unwrap();
        s.write(f.ino, 0, &content(i, 0)).unwrap();
        f.ino
    };
    for seed in [None, Some(1), Some(2), Some(3)] {
        // Writes take 20 ms: the write-out started by the last writes is still in flight.
        let (ctrl, dev) = swarm_slow_writes(32 << 20, 4096, 2, 20_000.0);
        let cfg = write_out_config();
        let mut s = PStore::format(dev.clone(), &cfg).unwrap();
        s.defer_settle(true).unwrap();
        let inos: Vec<u64> = (0..100).map(|i| make(&mut s, i)).collect();
        s.fsync().unwrap();
        // Overwrites of acknowledged files in place, and new files, past a full stage.
        for (i, &ino) in inos.iter().enumerate().take(50) {
            s.write(ino, 0, &content(i as u16, 1)).unwrap();
        }
        for i in 100..350 {
            make(&mut s, i);
        }
        assert!(s.pump().unwrap(), "a write-out is in flight at the cut");
        drop(s);
        power_cut(&ctrl, seed);
        let mut r = PStore::open(dev, &cfg).unwrap();
        let got = state(&mut r);
        for i in 0..350u16 {
            let name = format!("small.{i}").into_bytes();
            match got.get(&name) {
                None => assert!(i >= 100, "{seed:?}: fsynced file {i} lost"),
                // An overwrite in place lands whole or not at all (its page is one command).
                Some(c) if i < 50 => assert!(
                    *c == content(i, 0) || *c == content(i, 1),
                    "{seed:?}: file {i} is neither its old nor its new content"
                ),
                // A file the log names has its data: data, flush, then the log.
                Some(c) => assert!(*c == content(i, 0), "{seed:?}: file {i} is torn"),
            }
        }
        check_pages(&mut r);
    }
}

#[test]
fn a_write_back_start_sends_the_staged_pages_its_log_names_without_waiting_for_them() {
    // Writes take 400 ms. A write-back's log names the small files' staged pages, which must
    // be on the medium before it: they go out on the write-back queue ahead of the batch's
    // flush, and the write that starts the batch does not wait for them.
    let (_ctrl, dev) = swarm_slow_writes(32 << 20, 4096, 2, 400_000.0);
    let mut cfg = write_out_config();
    cfg.icache_blocks = 8;
    cfg.dirty_ratio = 0.25;
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    let content = |k: u16| -> Vec<u8> { (0..3901u32).map(|i| (i as u16 ^ k) as u8).collect() };
    let mut longest = std::time::Duration::ZERO;
    let mut started = None;
    for k in 0..96u16 {
        let t = std::time::Instant::now();
        let f = s
            .create(1, &many_name(k), REG, 0, 0, Hint::default())
            .unwrap();
        s.write(f.ino, 0, &content(k)).unwrap();
        // A stage of 96 pages is no full stage: only an Icache write-back can be in flight.
        let in_flight = s.pump().unwrap();
        longest = longest.max(t.elapsed());
        if in_flight {
            started = Some(k);
            break;
        }
    }
    let started = started.expect("no write-back in flight after 96 files");
    assert!(
        longest < std::time::Duration::from_millis(200),
        "a create and write took {longest:?}: the staged pages were waited for"
    );
    while s.pump().unwrap() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // Without a commit the log of the batch is all that reopening finds. It covers every
    // file before the one whose create started it (whose write came after), and each file
    // it names has its bytes, not the zeros of pages that never landed.
    drop(s);
    let mut r = PStore::open(dev, &cfg).unwrap();
    let got = state(&mut r);
    for k in 0..=started {
        match got.get(&many_name(k)) {
            Some(c) if *c == content(k) => {}
            Some(c) if k == started && c.is_empty() => {}
            None if k == started => {}
            other => panic!(
                "file {k} of {started}: {:?} bytes, {:?} zeros",
                other.map(Vec::len),
                other.map(|c| c.iter().filter(|&&b| b == 0).count())
            ),
        }
    }
    check_pages(&mut r);
}

/// A crash while recovery checkpoints: after it freed an orphan (new frames after the replayed
/// ones) and before its new superblock is down. The next recovery still finds every fsynced
/// operation: recovery's own frames went after the ones it replayed, not over them.
#[test]
fn a_crash_while_recovery_checkpoints_loses_none_of_the_log_it_replayed() {
    let (ssd, dev) = swarm(32 << 20, 4096);
    let cfg = small_config(4096);
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    let kept = s.create(1, b"kept", REG, 0, 0, Hint::default()).unwrap();
    s.write(kept.ino, 0, &[5u8; 10_000]).unwrap();
    let open = s.create(1, b"open", REG, 0, 0, Hint::default()).unwrap();
    // Unlinked while a client holds it open: an orphan that recovery frees.
    s.relink(&Relink {
        remove: Some((1, b"open")),
        links: &[(open.ino, -1)],
        ..Relink::default()
    })
    .unwrap();
    s.fsync().unwrap();
    drop(s);
    ssd.power_cut().unwrap();
    // The superblock copies (zone pages 0 and 1) cannot be written: recovery stops there.
    ssd.faults().add_write_fault(0..2);
    assert!(PStore::open(dev.clone(), &cfg).is_err());
    ssd.faults().clear_media_errors();
    ssd.power_cut().unwrap();
    let mut s = PStore::open(dev, &cfg).unwrap();
    let ino = s.lookup(1, b"kept").expect("an fsynced create was lost");
    let mut buf = vec![0u8; 10_000];
    assert_eq!(s.read(ino, 0, &mut buf).unwrap(), buf.len());
    assert!(buf.iter().all(|&b| b == 5), "fsynced data was lost");
    assert_eq!(s.lookup(1, b"open"), None);
    assert_eq!(s.stats().orphans, 0, "the orphan is freed");
    check_pages(&mut s);
}

/// A checkpoint cut short by a failed write (of its superblock, or of its checkpoint area)
/// changes nothing durable: the store goes on with the last checkpoint and its log, and
/// after a power cut every fsynced operation, before the failed checkpoint and after it, is
/// there.
#[test]
fn a_checkpoint_cut_short_by_a_write_fault_loses_nothing_fsynced() {
    let cfg = small_config(4096);
    // Zone pages 0-1 are the superblocks; the two checkpoint areas follow the 16-page log,
    // 177 pages each for this zone (2,048 inode slots and dentries, 4,096 pages).
    let ckpt_areas = WAL_PAGE + cfg.wal_pages..WAL_PAGE + cfg.wal_pages + 2 * 177;
    for (what, lbas) in [("superblock", 0..2), ("checkpoint area", ckpt_areas)] {
        let (ssd, dev) = swarm(32 << 20, 4096);
        let mut s = PStore::format(dev.clone(), &cfg).unwrap();
        let mut m = Model::new();
        for op in [
            Op::Create(1),
            Op::Write(1, 0, 5000, 1),
            Op::Create(2),
            Op::Fsync,
        ] {
            step(&mut s, &mut m, &op);
        }
        ssd.faults().add_write_fault(lbas);
        assert!(
            s.checkpoint().is_err(),
            "{what}: the checkpoint wrote through a fault"
        );
        ssd.faults().clear_media_errors();
        for op in [
            Op::Write(2, 100, 3000, 2),
            Op::Unlink(1),
            Op::Create(3),
            Op::Fsync,
        ] {
            step(&mut s, &mut m, &op);
        }
        drop(s);
        ssd.power_cut().unwrap();
        let mut s = PStore::open(dev, &cfg).unwrap();
        assert_eq!(state(&mut s), m, "{what}");
        check_pages(&mut s);
    }
}

/// A checkpoint whose pieces fail on their way (written on the checkpoint queue while the
/// pumps go on) is dropped like one whose write failed while waited for: a pump returns the
/// error, the store goes on with the last checkpoint and its log, and after a power cut every
/// fsynced operation is there.
#[test]
fn a_checkpoint_whose_pieces_fail_on_their_way_is_dropped_and_loses_nothing_fsynced() {
    let (ctrl, dev, cfg, mut s, mut m) = store_in_pieces(300, true, Some(64));
    let areas = WAL_PAGE + cfg.wal_pages..WAL_PAGE + cfg.wal_pages + 2 * 177;
    ctrl.faults().add_write_fault(areas);
    let mut failed = None;
    for pumps in 0..100_000 {
        if let Err(e) = s.pump() {
            failed = Some(e);
            break;
        }
        assert!(
            s.stats().checkpoint_writing,
            "made current through a fault ({pumps} pumps)"
        );
    }
    let failed = failed.expect("no pump met the fault");
    assert!(
        !s.stats().checkpoint_writing,
        "still writing after: {failed}"
    );
    ctrl.faults().clear_media_errors();
    for op in [Op::Create(7), Op::Write(7, 0, 3000, 3), Op::Fsync] {
        step(&mut s, &mut m, &op);
    }
    drop(s);
    ctrl.power_cut().unwrap();
    let mut s = PStore::open(dev, &cfg).unwrap();
    assert_eq!(state(&mut s), m);
    check_pages(&mut s);
}

/// A store whose checkpoints are encoded a page at a time, over [`crash_store`]'s SSD,
/// holding `files` files that no later operation touches (each with a block in the block
/// table), with a checkpoint taken and not yet written: it takes many pieces, and the
/// caller's requests change the tables between them. `icache_blocks` replaces
/// [`crash_store`]'s two (which make every inode change sync the log).
fn store_in_pieces(
    files: u32,
    behind: bool,
    icache_blocks: Option<usize>,
) -> (Arc<SwarmIo>, Arc<NvmeDevice>, PStoreConfig, PStore, Model) {
    let (ctrl, dev, mut cfg) = crash_store(behind);
    cfg.icache_blocks = icache_blocks.unwrap_or(cfg.icache_blocks);
    cfg.checkpoint_step = 4096;
    // A log of 32 KiB: a checkpoint is taken every few dozen operations.
    cfg.wal_pages = 8;
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    let mut m = Model::new();
    for i in 0..files {
        let n = format!("old.{i}").into_bytes();
        let ino = s.create(1, &n, REG, 0, 0, Hint::default()).unwrap().ino;
        // Past the first block (inline in the inode): a mapping of the block table.
        let mut content = vec![0u8; 16_384];
        content.extend_from_slice(&i.to_le_bytes());
        s.write(ino, 16_384, &i.to_le_bytes()).unwrap();
        m.insert(n, content);
    }
    s.fsync().unwrap();
    // Operations on a file of its own until a checkpoint is taken (no pump writes it).
    step(&mut s, &mut m, &Op::Create(0));
    let mut i = 0u32;
    while !s.stats().checkpoint_writing {
        assert!(i < 1 << 20, "no checkpoint was taken");
        step(&mut s, &mut m, &Op::Write(0, i, 4, 1));
        i += 4;
    }
    (ctrl, dev, cfg, s, m)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    /// Checkpoints encoded and written a page at a time, between requests that change the
    /// tables they walk (see `pstore::checkpoint`): after a power cut, wherever it falls, the
    /// state is one reached since the last fsync, and the files no request touched are whole.
    #[test]
    fn checkpoints_written_in_pieces_between_changing_requests_lose_nothing_fsynced(
        ops in prop::collection::vec(op(), 60..120),
        defer in any::<bool>(),
        behind in any::<bool>(),
        kept in prop::option::of(any::<u64>()),
    ) {
        let (ctrl, dev, cfg, s, m) = store_in_pieces(300, behind, None);
        let run = Run {
            ctrl: &ctrl, dev, cfg: &cfg, defer, pump: true, kept, through: false, kill: false,
        };
        let (between_pieces, made_current) = run.then_cut(s, m, &ops)?;
        prop_assert!(between_pieces > 0, "no request ran while a checkpoint was being written");
        prop_assert!(made_current > 0, "no checkpoint was made current");
    }
}

/// Whether a recovered state is one reached since the last fsync (`allowed`: the states
/// since then): the same names and sizes as one of them, and in each file, byte by byte, what
/// that state or another one since the fsync holds there. A block's pages are overwritten in
/// place (PData), so the data of a write not yet fsynced may reach the device without the log
/// frame that maps it, as in any file system that overwrites in place.
fn recovered_fits(got: &Model, allowed: &[Model]) -> Result<(), String> {
    let sizes = |m: &Model| {
        m.iter()
            .map(|(n, c)| (n.clone(), c.len()))
            .collect::<Vec<_>>()
    };
    if !allowed.iter().any(|a| sizes(a) == sizes(got)) {
        let named = |m: &Model| {
            m.iter()
                .map(|(n, c)| format!("{}:{}", String::from_utf8_lossy(n), c.len()))
                .collect::<Vec<_>>()
                .join(" ")
        };
        return Err(format!(
            "recovered names and sizes [{}] are none of the {} allowed; the last is [{}]",
            named(got),
            allowed.len(),
            named(allowed.last().unwrap())
        ));
    }
    for (name, content) in got {
        for (i, &b) in content.iter().enumerate() {
            if !allowed
                .iter()
                .any(|a| a.get(name).and_then(|c| c.get(i)) == Some(&b))
            {
                return Err(format!(
                    "{} holds {b} at byte {i}, which no state since the fsync put there",
                    String::from_utf8_lossy(name)
                ));
            }
        }
    }
    Ok(())
}

/// While a checkpoint is written in pieces, each step creates a file and then removes an
/// old one; the power is cut the moment the checkpoint is made current, with nothing fsynced
/// since it was taken. The checkpoint's pieces saw some of these operations and not others
/// (a mix that never existed: new files sort before old ones in its walk), so the state
/// recovered is right only if the log that completes it was made durable with it.
#[test]
fn a_checkpoint_made_current_carries_the_log_of_what_its_pieces_saw() {
    // Inode blocks that stay in the Icache: no write-back syncs the log.
    let (ctrl, dev, cfg, mut s, mut m) = store_in_pieces(300, false, Some(64));
    let before = s.stats().checkpoints;
    let mut allowed = vec![m.clone()];
    let mut k = 0;
    while s.stats().checkpoints == before {
        step(&mut s, &mut m, &Op::Create(k % 12));
        let old = format!("old.{k}").into_bytes();
        s.unlink(1, &old).unwrap();
        m.remove(&old);
        allowed.push(m.clone());
        s.pump().unwrap();
        k += 1;
        assert!(k < 12, "the checkpoint took more than 12 steps");
    }
    drop(s);
    ctrl.power_cut().unwrap();
    let mut r = PStore::open(dev, &cfg).unwrap();
    let got = state(&mut r);
    assert!(
        recovered_fits(&got, &allowed).is_ok(),
        "{:?}",
        recovered_fits(&got, &allowed)
    );
    check_pages(&mut r);
}

/// A checkpoint is made current only together with the log that completes it: when that log
/// cannot be written (a write fault on the log's pages after the checkpoint's position), the
/// checkpoint is not made current, and a power cut recovers the state as of its position,
/// though its pieces saw later operations.
#[test]
fn a_checkpoint_whose_log_cannot_be_written_is_not_made_current() {
    let (ctrl, dev, cfg, mut s, mut m) = store_in_pieces(300, false, Some(64));
    let at_checkpoint = m.clone();
    let (before, from) = (s.stats().checkpoints, s.stats().wal_bytes / 4096);
    ctrl.faults()
        .add_write_fault(WAL_PAGE + from..WAL_PAGE + cfg.wal_pages);
    let mut k = 0;
    let failed = loop {
        step(&mut s, &mut m, &Op::Create(k % 12));
        s.unlink(1, format!("old.{k}").as_bytes()).unwrap();
        if let Err(e) = s.pump() {
            break e;
        }
        k += 1;
        assert!(k < 12, "the checkpoint took more than 12 steps");
    };
    assert_eq!(s.stats().checkpoints, before, "made current after {failed}");
    drop(s);
    ctrl.faults().clear_media_errors();
    ctrl.power_cut().unwrap();
    let mut r = PStore::open(dev, &cfg).unwrap();
    // The write that took the checkpoint logs after the checkpoint's position.
    let mut expect = at_checkpoint;
    let job0 = expect.get_mut(&name(0)).unwrap();
    job0.truncate(job0.len() - 4);
    let got = state(&mut r);
    assert!(
        got == expect,
        "{:?}",
        recovered_fits(&got, &[expect.clone()])
    );
    check_pages(&mut r);
}

/// Files unlinked while open (orphans) and freed while a checkpoint is written in pieces:
/// after a power cut, no orphan is left and no page leaks, though the checkpoint may list an
/// orphan whose inode its walk had passed before the inode was made.
#[test]
fn orphans_made_and_freed_while_a_checkpoint_is_written_in_pieces_are_all_freed() {
    let (ctrl, dev, cfg, mut s, m) = store_in_pieces(300, false, None);
    let mut made = 0;
    let mut f = 1u8;
    while made < 3 {
        let n = name(f);
        let ino = s.create(1, &n, REG, 0, 0, Hint::default()).unwrap().ino;
        s.write(ino, 0, &[f; 20_000]).unwrap();
        let writing = s.stats().checkpoint_writing;
        let change = Relink {
            remove: Some((1, &n)),
            links: &[(ino, -1)],
            ..Relink::default()
        };
        s.relink(&change).unwrap();
        assert!(s.is_orphan(ino));
        if f.is_multiple_of(2) {
            s.remove_inode(ino).unwrap();
        }
        made += usize::from(writing && s.stats().checkpoint_writing);
        s.pump().unwrap();
        f = f.checked_add(1).expect("no checkpoint ran long enough");
    }
    s.fsync().unwrap();
    drop(s);
    ctrl.power_cut().unwrap();
    let mut r = PStore::open(dev, &cfg).unwrap();
    assert_eq!(r.stats().orphans, 0);
    assert_eq!(state(&mut r), m);
    check_pages(&mut r);
}

/// A checkpoint taken when the log is three quarters full is written between requests
/// ([`PStore::pump`]) while requests go on. Cut before it is finished, when its superblock
/// cannot be written, after its superblock is down but before the frames logged since moved
/// to the start of the log, or after all of it: every fsynced operation survives a power cut,
/// and the store goes on after a failed step.
#[test]
fn a_checkpoint_written_between_requests_loses_nothing_fsynced_wherever_it_is_cut() {
    let cfg = small_config(4096);
    for cut in [
        "before finishing",
        "superblock",
        "moving the log",
        "finished",
    ] {
        let (ssd, dev) = swarm(32 << 20, 4096);
        let mut s = PStore::format(dev.clone(), &cfg).unwrap();
        let mut m = Model::new();
        let mut f = 0u8;
        while !s.stats().checkpoint_writing {
            step(&mut s, &mut m, &Op::Create(f));
            step(&mut s, &mut m, &Op::Write(f, 0, 300, f));
            f = f.checked_add(1).expect("no checkpoint was taken");
        }
        let taken = s.stats().checkpoints;
        // Requests go on while it is pending.
        for op in [
            Op::Create(f),
            Op::Write(f, 10, 5000, 1),
            Op::Unlink(0),
            Op::Fsync,
        ] {
            step(&mut s, &mut m, &op);
        }
        assert!(s.stats().checkpoint_writing, "{cut}: finished by a request");
        let faults = match cut {
            "superblock" => Some(0..2),
            "moving the log" => Some(WAL_PAGE..WAL_PAGE + 1),
            _ => None,
        };
        if cut != "before finishing" {
            if let Some(lbas) = faults.clone() {
                ssd.faults().add_write_fault(lbas);
            }
            let pumped = s.pump();
            assert_eq!(pumped.is_err(), faults.is_some(), "{cut}: {pumped:?}");
            ssd.faults().clear_media_errors();
            assert!(!s.stats().checkpoint_writing, "{cut}");
            let made_current = u64::from(cut != "superblock");
            assert_eq!(s.stats().checkpoints, taken + made_current, "{cut}");
            for op in [Op::Create(f + 1), Op::Write(1, 0, 2000, 9), Op::Fsync] {
                step(&mut s, &mut m, &op);
            }
        }
        drop(s);
        ssd.power_cut().unwrap();
        let mut s = PStore::open(dev, &cfg).unwrap();
        assert_eq!(state(&mut s), m, "{cut}");
        check_pages(&mut s);
    }
}

/// A store that is pumped between requests writes its log a megabyte at a time, without an
/// fsync: a checkpoint does not find it all unwritten. Nothing is promised for operations not
/// fsynced, but these, a megabyte back, are on the device.
#[test]
fn a_pumped_store_writes_its_log_a_megabyte_at_a_time() {
    let (ssd, dev) = swarm(32 << 20, 4096);
    let mut cfg = small_config(4096);
    cfg.wal_pages = 1024;
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    let f = s.create(1, b"f", REG, 0, 0, Hint::default()).unwrap();
    let mut i = 0u32;
    while s.stats().wal_bytes < 3 << 19 {
        s.write(f.ino, 0, &i.to_le_bytes()).unwrap();
        s.pump().unwrap();
        i += 1;
    }
    assert_eq!(s.stats().checkpoints, 1, "only format's");
    drop(s);
    ssd.power_cut().unwrap();
    let mut s = PStore::open(dev, &cfg).unwrap();
    let ino = s.lookup(1, b"f").expect("a megabyte of log was lost");
    let mut b = [0u8; 4];
    s.read(ino, 0, &mut b).unwrap();
    assert!(u32::from_le_bytes(b) > 0, "{b:?}");
    check_pages(&mut s);
}

/// A log written ahead whose write fails (a write fault on the log's pages) fails the pump
/// that takes its result and leaves its frames unwritten: once the fault is gone, the pumps
/// write them again, so that a power cut without an fsync finds every file created by then
/// (replay stops at the first frame missing from the device, and would lose all after it).
#[test]
fn a_log_written_ahead_that_failed_is_written_again() {
    let (ctrl, dev) = swarm_queues(32 << 20, 4096, 2);
    let mut cfg = write_out_config();
    cfg.log_write_ahead = 16 << 10;
    let mut s = PStore::format(dev.clone(), &cfg).unwrap();
    s.defer_settle(true).unwrap();
    ctrl.faults()
        .add_write_fault(WAL_PAGE..WAL_PAGE + cfg.wal_pages);
    let name = |i: u32| format!("ahead.{i}");
    let mut made = 0;
    // Files until the log goes ahead (a pump leaves it in flight), then pumps alone until its
    // write fails: the emulator's threads share this machine's cores with the test, and the
    // write may take a while to come back.
    let since = std::time::Instant::now();
    loop {
        if made < 600 {
            s.create(1, name(made).as_bytes(), REG, 0, 0, Hint::default())
                .unwrap();
            made += 1;
        } else {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        assert!(since.elapsed().as_secs() < 20, "no write of the log failed");
        if s.pump().is_err() {
            break;
        }
    }
    ctrl.faults().clear_media_errors();
    let failed_at = made;
    // The pumps write it again, more frames with it.
    for _ in 0..200 {
        s.create(1, name(made).as_bytes(), REG, 0, 0, Hint::default())
            .unwrap();
        made += 1;
        s.pump().unwrap();
    }
    while s.pump().unwrap() {
        std::thread::yield_now();
    }
    drop(s);
    ctrl.power_cut().unwrap();
    let mut r = PStore::open(dev, &cfg).unwrap();
    let kept = kept_prefix(&mut r, made, name);
    assert!(
        kept >= failed_at,
        "{kept} files back, {failed_at} made before the fault"
    );
    check_pages(&mut r);
}
