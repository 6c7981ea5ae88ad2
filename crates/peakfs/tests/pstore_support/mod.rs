//! Devices and checks shared by the PStore integration tests.

#![allow(dead_code, reason = "each test crate uses a subset")]

use std::sync::Arc;

use gpu_nvme::device::{DeviceConfig, NvmeDevice};
use peakfs::pstore::{PStore, PStoreConfig};
use swarmio::timing_model::{Targets, TimingConfig};
use swarmio::{SwarmConfig, SwarmIo};

/// A fast RAM-backed emulated SSD with a volatile write cache, and the host device on it.
pub fn swarm(capacity: u64, lba: u32) -> (Arc<SwarmIo>, Arc<NvmeDevice>) {
    swarm_queues(capacity, lba, 1)
}

/// [`swarm`] with `queues` host I/O queues.
pub fn swarm_queues(capacity: u64, lba: u32, queues: u16) -> (Arc<SwarmIo>, Arc<NvmeDevice>) {
    swarm_slow_writes(capacity, lba, queues, 1.0)
}

/// [`swarm_queues`] whose writes each take `write_latency_us`.
pub fn swarm_slow_writes(
    capacity: u64,
    lba: u32,
    queues: u16,
    write_latency_us: f64,
) -> (Arc<SwarmIo>, Arc<NvmeDevice>) {
    let targets = Targets {
        read_miops: 50.0,
        read_latency_us: 1.0,
        write_miops: 50.0,
        write_latency_us,
        block_bytes: 4096,
        lba_bytes: lba,
        num_sched_insts: 1,
    };
    let mut config = SwarmConfig::new(capacity, lba, TimingConfig::from_targets(&targets).unwrap());
    config.service_units = 1;
    config.workers_per_unit = 1;
    config.max_io_queues = 4;
    let ctrl = SwarmIo::new(config).unwrap();
    let dev = NvmeDevice::open(
        ctrl.clone(),
        DeviceConfig {
            io_queues: queues,
            ..DeviceConfig::default()
        },
    )
    .unwrap();
    (ctrl, Arc::new(dev))
}

/// A small zone: 4096 pages, 2048 inode slots, a 16-page WAL, 4-page (16 KiB) file blocks.
pub fn small_config(lba: u32) -> PStoreConfig {
    let lbas = 4096 * 4096 / u64::from(lba);
    let mut c = PStoreConfig::new(0, lbas);
    c.inode_slots = 2048;
    c.max_dentries = 2048;
    c.wal_pages = 16;
    c.block_pages = 4;
    c.icache_blocks = 8;
    c.ino_base = 1000;
    c.dirty_ratio = 0.25;
    c
}

/// [`small_config`] for the write-out of full stages of small-file pages: the worker's own
/// queue (0) and a write-back queue (1), an Icache that holds every inode block (no inode
/// write-back waits on the way) and a log with room for hundreds of small files (no
/// checkpoint writes the staged pages out first).
pub fn write_out_config() -> PStoreConfig {
    let mut c = small_config(4096);
    c.queue = Some(0);
    c.write_back_queue = Some(1);
    c.icache_blocks = 128;
    c.dirty_ratio = 1.0;
    c.wal_pages = 256;
    c
}

/// Checks the page bitmap against the mappings: no page mapped twice, every mapped page
/// allocated, and no allocated page unmapped (no leak).
pub fn check_pages(s: &mut PStore) {
    let maps = s.mappings().unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for (ino, block, run) in &maps {
        for p in run.start..run.start + u64::from(run.pages) {
            assert!(
                seen.insert(p),
                "page {p} mapped twice (ino {ino} block {block})"
            );
            assert!(
                s.page_allocated(p),
                "page {p} of ino {ino} block {block} not allocated"
            );
        }
    }
    assert_eq!(
        s.stats().pages_used,
        seen.len() as u64,
        "allocated pages that no block maps (leak)"
    );
}

/// How many of the files `name(0..made)` of the root directory `s` holds, asserting that
/// they are a prefix: none after the first one missing (a log replays up to its first frame
/// missing from the device).
pub fn kept_prefix(s: &mut PStore, made: u32, name: impl Fn(u32) -> String) -> u32 {
    let kept = (0..made)
        .take_while(|&i| s.lookup(1, name(i).as_bytes()).is_some())
        .count() as u32;
    for i in kept..made {
        assert!(
            s.lookup(1, name(i).as_bytes()).is_none(),
            "file {i} after a gap"
        );
    }
    kept
}

/// Makes everything `s` did durable, cuts the device's power, and opens the store again.
pub fn fsync_cut_power_and_reopen(
    mut s: PStore,
    ssd: &SwarmIo,
    dev: Arc<NvmeDevice>,
    cfg: &PStoreConfig,
) -> PStore {
    s.fsync().unwrap();
    ssd.power_cut().unwrap();
    drop(s);
    PStore::open(dev, cfg).unwrap()
}
