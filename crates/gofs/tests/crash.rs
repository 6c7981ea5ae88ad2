//! Crash consistency over the SwarmIO emulator with its volatile write cache: a workload is
//! cut at an exact device command (power cut: unflushed writes dropped, every later command
//! fails), the image remounts, equals the state of the last checkpoint or a later one, and
//! passes `fsck.f2fs`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use gofs::error::{FsError, Result};
use gofs::f2fs_tools;
use gofs::format::{BlockIo, NvmeBlocks};
use gofs::fs::{Caller, FileType, Fs, MountOptions, ROOT_INO, SetAttr};
use gpu_nvme::device::{DeviceConfig, NvmeDevice};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use swarmio::timing_model::{Targets, TimingConfig};
use swarmio::{SwarmConfig, SwarmIo};

const ME: Caller = Caller { uid: 0, gid: 0 };
const CAPACITY: u64 = 64 << 20;

/// Passes commands through until its budget of writes and flushes is spent, then cuts the
/// power and fails everything after.
#[derive(Debug)]
struct CuttingIo {
    inner: NvmeBlocks,
    ctrl: Arc<SwarmIo>,
    budget: AtomicI64,
}

impl CuttingIo {
    fn spend(&self) -> Result<()> {
        let left = self.budget.fetch_sub(1, Ordering::SeqCst);
        if left == 1 {
            self.ctrl.power_cut().unwrap();
        }
        if left <= 1 {
            Err(FsError::Corrupt("power is off".into()))
        } else {
            Ok(())
        }
    }
}

impl BlockIo for CuttingIo {
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn read(&self, blk: u64, buf: &mut [u8]) -> Result<()> {
        if self.budget.load(Ordering::SeqCst) <= 0 {
            return Err(FsError::Corrupt("power is off".into()));
        }
        self.inner.read(blk, buf)
    }
    fn write(&self, blk: u64, buf: &[u8]) -> Result<()> {
        self.spend()?;
        self.inner.write(blk, buf)
    }
    fn flush(&self) -> Result<()> {
        self.spend()?;
        self.inner.flush()
    }
    fn trim(&self, blk: u64, count: u32) -> Result<()> {
        self.spend()?;
        self.inner.trim(blk, count)
    }
}

fn emulator() -> (Arc<SwarmIo>, Arc<NvmeDevice>) {
    let targets = Targets {
        read_miops: 20.0,
        read_latency_us: 1.0,
        write_miops: 20.0,
        write_latency_us: 1.0,
        block_bytes: 4096,
        lba_bytes: 4096,
        num_sched_insts: 2,
    };
    let mut config = SwarmConfig::new(
        CAPACITY,
        4096,
        TimingConfig::from_targets(&targets).unwrap(),
    );
    config.service_units = 1;
    config.workers_per_unit = 1;
    config.max_io_queues = 4;
    let ctrl = SwarmIo::new(config).unwrap();
    let dev = NvmeDevice::open(
        ctrl.clone(),
        DeviceConfig {
            io_queues: 1,
            ..Default::default()
        },
    )
    .unwrap();
    (ctrl, Arc::new(dev))
}

fn opts() -> MountOptions {
    MountOptions {
        read_only: false,
        checkpoint_interval: None,
    }
}

type Tree = BTreeMap<Vec<u8>, Vec<u8>>;

/// Runs the seeded workload until it ends or the device dies. Returns the model after each
/// completed operation and the index of the last snapshot known durable (after a sync).
fn workload(fs: &Fs, seed: u64) -> (Vec<Tree>, usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tree = Tree::new();
    let mut inos = BTreeMap::new();
    let mut snaps = vec![tree.clone()];
    let mut durable = 0;
    for op in 0..80 {
        let name = format!("f{}", rng.random_range(0..8)).into_bytes();
        let r: Result<()> = (|| {
            match rng.random_range(0..10) {
                0..=1 if !tree.contains_key(&name) => {
                    let st = fs.create(ROOT_INO, &name, FileType::Regular, 0o644, 0, ME)?;
                    inos.insert(name.clone(), st.ino);
                    tree.insert(name.clone(), Vec::new());
                }
                2..=5 if tree.contains_key(&name) => {
                    let off = rng.random_range(0..200_000usize);
                    let len = rng.random_range(1..100_000usize);
                    let b: u8 = rng.random();
                    let d: Vec<u8> = (0..len).map(|i| b ^ (i as u8)).collect();
                    fs.write(inos[&name], off as u64, &d)?;
                    let v = tree.get_mut(&name).unwrap();
                    if v.len() < off + len {
                        v.resize(off + len, 0);
                    }
                    v[off..off + len].copy_from_slice(&d);
                }
                6 if tree.contains_key(&name) => {
                    let size = rng.random_range(0..150_000usize);
                    fs.setattr(
                        inos[&name],
                        &SetAttr {
                            size: Some(size as u64),
                            ..Default::default()
                        },
                    )?;
                    tree.get_mut(&name).unwrap().resize(size, 0);
                }
                7 if tree.contains_key(&name) => {
                    fs.unlink(ROOT_INO, &name)?;
                    tree.remove(&name);
                    inos.remove(&name);
                }
                8 if tree.contains_key(&name) => {
                    let to = format!("f{}", rng.random_range(0..8)).into_bytes();
                    fs.rename(ROOT_INO, &name, ROOT_INO, &to)?;
                    if to != name {
                        let v = tree.remove(&name).unwrap();
                        let i = inos.remove(&name).unwrap();
                        tree.insert(to.clone(), v);
                        inos.insert(to, i);
                    }
                }
                _ => {}
            }
            if op % 6 == 5 {
                fs.fsync(ROOT_INO)?;
                durable = snaps.len();
            }
            Ok(())
        })();
        if r.is_err() {
            return (snaps, durable);
        }
        snaps.push(tree.clone());
        if op % 6 == 5 {
            durable = snaps.len() - 1;
        }
    }
    (snaps, durable)
}

fn read_tree(fs: &Fs) -> Tree {
    let mut t = Tree::new();
    for e in fs.readdir(ROOT_INO).unwrap() {
        let st = fs.getattr(e.ino).unwrap();
        let mut buf = vec![0u8; st.size as usize];
        assert_eq!(fs.read(e.ino, 0, &mut buf).unwrap(), buf.len());
        t.insert(e.name, buf);
    }
    t
}

fn fsck_device(dev: &NvmeDevice, dir: &std::path::Path) {
    let mut img = vec![0u8; CAPACITY as usize];
    for (i, chunk) in img.chunks_mut(1 << 20).enumerate() {
        dev.read_blocks((i * 256) as u64, chunk).unwrap();
    }
    let path = dir.join("crash.img");
    std::fs::write(&path, img).unwrap();
    let out = f2fs_tools::fsck_full(&path).unwrap();
    assert!(f2fs_tools::fsck_problems(&out).is_empty(), "{}", out.text);
}

/// One run cut after `budget` writes/flushes; returns how many the whole workload takes when
/// the budget is not reached.
fn run(seed: u64, budget: i64, dir: &std::path::Path) -> i64 {
    let (ctrl, dev) = emulator();
    gofs::mkfs::mkfs(&dev, &gofs::mkfs::MkfsOptions::default()).unwrap();
    let io = Arc::new(CuttingIo {
        inner: NvmeBlocks::new(dev.clone()).unwrap(),
        ctrl: ctrl.clone(),
        budget: AtomicI64::new(budget),
    });
    let fs = Fs::mount_io(io.clone(), opts()).unwrap();
    let (snaps, durable) = workload(&fs, seed);
    if io.budget.load(Ordering::SeqCst) > 0 {
        // The workload ended; the cut may still land inside the unmount's checkpoint.
        let r = fs.unmount();
        if io.budget.load(Ordering::SeqCst) > 0 {
            r.unwrap();
            return budget - io.budget.load(Ordering::SeqCst);
        }
    } else {
        drop(fs);
    }
    let fs = Fs::mount_io(Arc::new(NvmeBlocks::new(dev.clone()).unwrap()), opts()).unwrap();
    let got = read_tree(&fs);
    assert!(
        snaps[durable..].contains(&got),
        "seed {seed} cut at {budget}: recovered {:?} matches none of the {} states since \
         the last sync",
        got.iter()
            .map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), v.len()))
            .collect::<Vec<_>>(),
        snaps.len() - durable
    );
    fs.unmount().unwrap();
    fsck_device(&dev, dir);
    0
}

#[test]
fn power_cuts_at_random_commands_recover_to_a_checkpointed_state_that_passes_fsck() {
    let dir = tempfile::tempdir().unwrap();
    let seed = 11;
    let total = run(seed, i64::MAX / 2, dir.path());
    assert!(total > 50, "the workload issues {total} writes and flushes");
    let mut rng = StdRng::seed_from_u64(5);
    for _ in 0..20 {
        run(seed, rng.random_range(1..total), dir.path());
    }
}
