//! A server's storage (PeakFS §III-B, "each worker thread's PStore slice holds a non-shared,
//! private physical space on the SSD (called a Zone)"): the NVMe device over the data file (or
//! block device, or a RAM-backed SwarmIO emulator), a server superblock, and one zone per
//! worker, each holding one [`PStore`].
//!
//! Layout in 4 KiB LBAs: LBA 0 is the server superblock (index, cluster shape, zone size); zone
//! `w` covers `[1 + w * zone_lbas, 1 + (w + 1) * zone_lbas)`.

use std::sync::Arc;

use gpu_nvme::controller::Controller;
use gpu_nvme::controller::file::{FileBackend, FileController, FileControllerConfig};
use gpu_nvme::controller::threads::IdleBackoff;
use gpu_nvme::device::{DeviceConfig, NvmeDevice};

use crate::config::{ControllerKind, ServerConfig};
use crate::placement::{Layout, ROOT_INO, SLOT_SHIFT};
use crate::pstore::inode::{Hint as StoreHint, Inode};
use crate::pstore::zone::PAGE;
use crate::pstore::{INODES_PER_BLOCK, PStore, PStoreConfig, PStoreError};

const LBA: u32 = 4096;
/// The superblock's magic is this prefix and the format version as one ASCII digit.
const SB_MAGIC_PREFIX: &[u8; 7] = b"PKFSSRV";
/// The on-disk format this build reads and writes. 2: file-based data is placed by the
/// inode's sequence number (`placement`), so data written by a format-1 build under the
/// file-based hint would be looked for on other slices. 3: a zone's superblock says where in
/// its log replay starts (checkpoints written between requests). 4: checkpoints are encoded
/// between requests too, as walks that end with a marker (`pstore::checkpoint`). 5: the log
/// holds frames written before the data they name was flushed, and marks after flushes
/// (`wal::Record::DataDurable`); the superblock names the boot that last opened the volume,
/// which tells a recovery whether those frames can be trusted.
pub const FORMAT_VERSION: u8 = 5;
const SB_MAGIC: u64 = u64::from_le_bytes(magic(FORMAT_VERSION));

const fn magic(version: u8) -> [u8; 8] {
    let p = SB_MAGIC_PREFIX;
    [p[0], p[1], p[2], p[3], p[4], p[5], p[6], b'0' + version]
}
/// Most workers the superblock and the device queues are sized for.
pub const MAX_WORKERS: u32 = 256;
/// Smallest WAL of a zone, in pages (1 MiB).
const WAL_PAGES_MIN: u64 = 256;
/// Largest WAL of a zone, in pages (64 MiB).
const WAL_PAGES_MAX: u64 = 16384;
/// The smallest zone formatted (4 MiB of 4 KiB LBAs).
const MIN_ZONE_LBAS: u64 = 1024;

/// Errors of the server's storage.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// the data file could not be created or sized
    #[error("data file {path}: {source}")]
    File {
        /// the file
        path: String,
        /// why
        source: std::io::Error,
    },
    /// the NVMe controller or device failed
    #[error("nvme device: {0}")]
    Device(String),
    /// a zone's PStore failed
    #[error("zone {zone}: {source}")]
    Store {
        /// the zone (worker)
        zone: u32,
        /// why
        source: PStoreError,
    },
    /// the data was formatted for another cluster shape
    #[error("data formatted for {what} {stored}, asked for {asked}")]
    Mismatch {
        /// the field
        what: &'static str,
        /// on disk
        stored: u64,
        /// asked for
        asked: u64,
    },
    /// the data holds a PeakFS volume of another format version
    #[error(
        "{path} holds a PeakFS volume of format {found}, this build reads format \
         {FORMAT_VERSION}: serve it with a build of its format, or erase it with --force-format"
    )]
    OtherFormat {
        /// the data file or device
        path: String,
        /// its format version
        found: u8,
    },
    /// the data is neither empty (zeros where the superblock goes) nor a PeakFS volume
    #[error(
        "{path} is not empty and holds no PeakFS superblock (another file system, or a \
         damaged one): refusing to format it; erase it with --force-format"
    )]
    NotPeakFs {
        /// the data file or device
        path: String,
    },
    /// the device is too small for the zones
    #[error(
        "the data ({bytes} bytes) is too small for {workers} zones: give it at least \
         {min_bytes} bytes (--data-size), or fewer workers"
    )]
    TooSmall {
        /// bytes of the device
        bytes: u64,
        /// zones asked for
        workers: u32,
        /// the least that holds them
        min_bytes: u64,
    },
}

/// The server superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerSuper {
    /// Server index in the cluster.
    pub index: u32,
    /// Servers of the cluster.
    pub servers: u32,
    /// Workers (zones) of this server.
    pub workers: u32,
    /// Bytes per file block.
    pub block_size: u32,
    /// LBAs per zone.
    pub zone_lbas: u64,
    /// The kernel's boot id when a server last opened the volume (zeros: unknown). A server
    /// that finds its own boot here knows the page cache kept everything the last one wrote.
    pub boot: [u8; 16],
}

/// Bytes of the superblock that its checksum covers.
const SB_BODY: usize = 48;

impl ServerSuper {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(LBA as usize);
        b.extend_from_slice(&SB_MAGIC.to_le_bytes());
        for v in [self.index, self.servers, self.workers, self.block_size] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.zone_lbas.to_le_bytes());
        b.extend_from_slice(&self.boot);
        let crc = common::hash::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b.resize(LBA as usize, 0);
        b
    }

    /// What LBA 0 holds.
    fn classify(b: &[u8]) -> Found {
        if b.iter().all(|&x| x == 0) {
            return Found::Empty;
        }
        // Each format has its own layout after the magic (and checksum position).
        if let Some(magic) = b.get(..8)
            && magic[..7] == SB_MAGIC_PREFIX[..]
            && magic != SB_MAGIC.to_le_bytes()
        {
            return Found::OtherFormat(magic[7].wrapping_sub(b'0'));
        }
        let (Some(body), Some(crc)) = (b.get(..SB_BODY), b.get(SB_BODY..SB_BODY + 4)) else {
            return Found::Foreign;
        };
        let crc = u32::from_le_bytes(crc.try_into().unwrap_or_default());
        if crc != common::hash::crc32c(body) || body[..8] != SB_MAGIC.to_le_bytes() {
            return Found::Foreign;
        }
        let u32_at = |i: usize| u32::from_le_bytes(body[i..i + 4].try_into().unwrap_or_default());
        let u64_at = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().unwrap_or_default());
        Found::Volume(Self {
            index: u32_at(8),
            servers: u32_at(12),
            workers: u32_at(16),
            block_size: u32_at(20),
            zone_lbas: u64_at(24),
            boot: body[32..48].try_into().unwrap_or_default(),
        })
    }
}

/// What the superblock's LBA holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// Zeros: a new data file or a zeroed device, formatted on first use.
    Empty,
    /// A volume of this build's format.
    Volume(ServerSuper),
    /// A PeakFS superblock of another format version.
    OtherFormat(u8),
    /// Anything else.
    Foreign,
}

/// The opened device of a server.
#[derive(Debug)]
pub struct Storage {
    dev: Arc<NvmeDevice>,
    existing: Option<ServerSuper>,
    /// Most Icache bytes per zone (`icache_mib`).
    icache_bytes: u64,
    /// Zone bytes per inode slot of a format (`bytes_per_inode`).
    bytes_per_inode: u64,
}

impl Storage {
    /// Opens the device of `cfg` (its controller, backend and workers): the file controller
    /// over `cfg.data` (created with `cfg.data_size` bytes when it is missing or empty) or a
    /// SwarmIO emulator of `cfg.data_size` bytes.
    pub fn open(cfg: &ServerConfig) -> Result<Self, StorageError> {
        let (path, size) = (cfg.data.as_path(), cfg.data_size);
        let workers = cfg.workers.clamp(1, MAX_WORKERS) as u16;
        // Three host queues per worker: its requests' commands, and the Icache write-backs and
        // the checkpoint pieces it does not wait for (see `zone_config`).
        let queues = 4 * workers;
        let ctrl: Arc<dyn Controller> = match cfg.controller {
            ControllerKind::File => {
                let file_err = |source| StorageError::File {
                    path: path.display().to_string(),
                    source,
                };
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)
                    .map_err(file_err)?;
                let meta = f.metadata().map_err(file_err)?;
                if meta.is_file() && meta.len() == 0 {
                    f.set_len(size).map_err(file_err)?;
                }
                let mut fc = FileControllerConfig::new(path);
                fc.lba_size = LBA;
                fc.workers = cfg.controller_workers.clamp(1, u32::from(workers)) as usize;
                fc.backend = cfg.backend;
                fc.max_io_queues = queues + 1;
                // Metadata operations reach the device rarely and in bursts (log syncs, Icache
                // write-backs). A controller thread that yields for milliseconds after each
                // burst (the default) takes turns on the cores the workers and the clients
                // run on: with 2,000 yields (about a millisecond) before it sleeps, metadata
                // throughput on 16 cores went up 2-8 %, IOR reads level or better
                // (bench/results/2026-11-26-peakfs-placement, calls X-Z).
                fc.idle = IdleBackoff {
                    spins: 2_000,
                    yields: 2_000,
                };
                // A worker waits for the commands of its first queue (data, log commits,
                // Icache misses): it runs them itself rather than spin while a controller
                // thread, on a core the clients and other workers need, does the copy (IOR
                // N-N writes on 16 cores went from 8.3-9.3 to 15.5-16.3 GB/s,
                // bench/results/2026-11-28-peakfs-controller-pin). The queues whose commands
                // the worker does not wait for stay with the controller's threads.
                if cfg.inline_data_queues && cfg.backend != FileBackend::Uring {
                    fc.inline_queues = (1..=workers).collect();
                }
                FileController::new(fc).map_err(|e| StorageError::Device(e.to_string()))?
            }
            ControllerKind::Swarmio => swarm(size, queues)?,
        };
        let dev = NvmeDevice::open(
            ctrl,
            DeviceConfig {
                io_queues: queues,
                ..DeviceConfig::default()
            },
        )
        .map_err(|e| StorageError::Device(e.to_string()))?;
        // The controller runs in this process: data reads land straight in reply buffers.
        dev.enable_direct_host_dma();
        let dev = Arc::new(dev);
        let mut sb = vec![0u8; LBA as usize];
        dev.read_blocks(0, &mut sb)
            .map_err(|e| StorageError::Device(e.to_string()))?;
        // Format only what is empty: a device with anything else on it is somebody's data.
        let existing = match (ServerSuper::classify(&sb), cfg.force_format) {
            (Found::Volume(sb), false) => Some(sb),
            (Found::Empty, _) | (_, true) => None,
            (Found::OtherFormat(found), false) => {
                let path = path.display().to_string();
                return Err(StorageError::OtherFormat { path, found });
            }
            (Found::Foreign, false) => {
                let path = path.display().to_string();
                return Err(StorageError::NotPeakFs { path });
            }
        };
        Ok(Self {
            existing,
            dev,
            icache_bytes: cfg.icache_mib << 20,
            bytes_per_inode: cfg.bytes_per_inode,
        })
    }

    /// The superblock if the data is formatted.
    pub fn existing(&self) -> Option<ServerSuper> {
        self.existing
    }

    /// Bytes of the device.
    pub fn capacity(&self) -> u64 {
        let g = self.dev.geometry();
        g.capacity_blocks() * u64::from(g.block_size())
    }

    /// Fails when these data cannot serve `workers` zones: a volume formatted for another
    /// count, or empty data too small for them. What the server checks before it registers
    /// with the master, so that a server that cannot start takes no index.
    pub fn check_workers(&self, workers: u32) -> Result<(), StorageError> {
        match self.existing {
            Some(sb) if sb.workers != workers => Err(StorageError::Mismatch {
                what: "workers",
                stored: sb.workers.into(),
                asked: workers.into(),
            }),
            Some(_) => Ok(()),
            None => self.zone_lbas(workers).map(|_| ()),
        }
    }

    /// LBAs of each of `workers` zones formatted on this device (after the superblock's LBA).
    fn zone_lbas(&self, workers: u32) -> Result<u64, StorageError> {
        let geometry = self.dev.geometry();
        let lbas = geometry.capacity_blocks();
        let zone_lbas = (lbas.saturating_sub(1) / u64::from(workers)) & !7;
        if zone_lbas < MIN_ZONE_LBAS {
            return Err(StorageError::TooSmall {
                bytes: geometry.capacity_bytes(),
                workers,
                min_bytes: (1 + u64::from(workers) * MIN_ZONE_LBAS)
                    * u64::from(geometry.block_size()),
            });
        }
        Ok(zone_lbas)
    }

    /// Opens (WAL recovery) or formats the zones for server `index` of `layout`; returns one
    /// PStore per worker.
    pub fn zones(
        &mut self,
        index: u32,
        layout: &Layout,
        root_hint: StoreHint,
    ) -> Result<Vec<PStore>, StorageError> {
        let workers = layout.workers();
        self.check_workers(workers)?;
        if let Some(sb) = self.existing {
            for (what, stored, asked) in [
                ("index", sb.index, index),
                ("servers", sb.servers, layout.servers()),
                ("block size", sb.block_size, layout.block_size()),
            ] {
                if stored != asked {
                    return Err(StorageError::Mismatch {
                        what,
                        stored: stored.into(),
                        asked: asked.into(),
                    });
                }
            }
            let boot = boot_id();
            let survived = boot.is_some_and(|b| b == sb.boot);
            if !survived {
                tracing::info!(
                    "the machine restarted since the volume was last open: recovery keeps the \
                     log up to the last data flush"
                );
            }
            let stores = (0..workers)
                .map(|w| {
                    let mut cfg = self.zone_config(&sb, layout, w);
                    cfg.page_cache_survived = survived;
                    let ps = PStore::open(self.dev.clone(), &cfg)
                        .map_err(|source| StorageError::Store { zone: w, source })?;
                    let formatted = ps.stats().inode_slots;
                    if w == 0
                        && formatted.div_ceil(INODES_PER_BLOCK)
                            != cfg.inode_slots.div_ceil(INODES_PER_BLOCK)
                    {
                        tracing::warn!(
                            formatted,
                            asked = cfg.inode_slots,
                            "the volume keeps the inode slots per zone it was formatted with; \
                             bytes_per_inode applies when formatting"
                        );
                    }
                    Ok(ps)
                })
                .collect::<Result<Vec<_>, _>>()?;
            // Before any frame of this run is written: it is this boot's.
            let boot = boot.unwrap_or_default();
            if boot != sb.boot {
                self.write_super(&ServerSuper { boot, ..sb })?;
            }
            return Ok(stores);
        }
        let zone_lbas = self.zone_lbas(workers)?;
        let sb = ServerSuper {
            index,
            servers: layout.servers(),
            workers,
            block_size: layout.block_size(),
            zone_lbas,
            boot: boot_id().unwrap_or_default(),
        };
        let mut stores = Vec::with_capacity(workers as usize);
        for w in 0..workers {
            let cfg = self.zone_config(&sb, layout, w);
            let mut ps = PStore::format(self.dev.clone(), &cfg)
                .map_err(|source| StorageError::Store { zone: w, source })?;
            if layout.route(0)
                == (crate::placement::Route {
                    server: index,
                    worker: w,
                })
            {
                make_root(&mut ps, root_hint)
                    .map_err(|source| StorageError::Store { zone: w, source })?;
            }
            ps.checkpoint()
                .map_err(|source| StorageError::Store { zone: w, source })?;
            // That checkpoint (2-5 ms at two million inode slots) held no request.
            ps.clear_checkpoint_stops();
            stores.push(ps);
        }
        // The superblock last: a crash while formatting leaves an unformatted device.
        self.write_super(&sb)?;
        Ok(stores)
    }

    /// Writes and flushes the server superblock.
    fn write_super(&mut self, sb: &ServerSuper) -> Result<(), StorageError> {
        self.dev
            .write_blocks(0, &sb.encode())
            .and_then(|()| self.dev.flush())
            .map_err(|e| StorageError::Device(e.to_string()))?;
        self.existing = Some(*sb);
        Ok(())
    }
}

/// The kernel's id of this boot (`/proc/sys/kernel/random/boot_id`), if it can be read.
fn boot_id() -> Option<[u8; 16]> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    parse_boot_id(&text)
}

/// The 16 bytes of a boot id written as a UUID.
fn parse_boot_id(text: &str) -> Option<[u8; 16]> {
    let hex: String = text.trim().chars().filter(|&c| c != '-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, b) in id.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(id)
}

impl Storage {
    /// The PStore settings of zone `worker`: one inode slot per `bytes_per_inode` of it, and at
    /// most `icache_bytes` of Icache.
    fn zone_config(&self, sb: &ServerSuper, layout: &Layout, worker: u32) -> PStoreConfig {
        zone_config(sb, layout, worker, self.icache_bytes, self.bytes_per_inode)
    }
}

/// The PStore settings of zone `worker`, with at most `icache_bytes` of Icache and one inode
/// slot per `bytes_per_inode` of the zone.
fn zone_config(
    sb: &ServerSuper,
    layout: &Layout,
    worker: u32,
    icache_bytes: u64,
    bytes_per_inode: u64,
) -> PStoreConfig {
    let mut c = PStoreConfig::new(1 + u64::from(worker) * sb.zone_lbas, sb.zone_lbas);
    c.block_pages = sb.block_size / 4096;
    let pages = sb.zone_lbas * u64::from(LBA) / 4096;
    c.inode_slots = (sb.zone_lbas * u64::from(LBA) / bytes_per_inode.max(1)).max(INODES_PER_BLOCK);
    c.max_dentries = c.inode_slots;
    // The whole inode area when it fits the budget (§II-A, C4: memory is plentiful): a
    // miss is a device read on the request path, and the dirty limit, a share of the
    // cache, sets how often write-back interrupts it. The PStore caps the cache at the
    // inode area it was formatted with.
    c.icache_blocks = (icache_bytes / PAGE as u64).max(1) as usize;
    // One thirty-second of the zone (1 MiB at least, 64 MiB at most): every time the log
    // fills, a checkpoint writes all of the zone's tables and dentries.
    c.wal_pages = (pages / 32).clamp(WAL_PAGES_MIN, WAL_PAGES_MAX);
    // Inos of this slice: its slot in the high bits; sequence 1 of slot 0 is the root.
    c.ino_base = (u64::from(layout.slot(sb.index, worker)) << SLOT_SHIFT) | 2;
    // Each worker drives its own host queue pairs (the device has four per worker): the
    // per-thread queue path SPDK gives the paper. On the second, Icache write-backs go out
    // while the worker serves on (§III-C2's *write* state): waiting for them stalled the
    // requests behind them (0.65 ms per batch on average, up to 4 ms, on 16 cores), and on a
    // queue of their own their completions, polled between requests, never hold up the
    // worker's other commands.
    c.queue = Some(worker as usize);
    c.write_back_queue = Some((sb.workers + worker) as usize);
    // The third carries a checkpoint's pieces, written between requests: a piece waited for
    // held the worker about 0.5 ms, four fifths of it the device's write.
    c.checkpoint_queue = Some((2 * sb.workers + worker) as usize);
    // The fourth, the write-outs of staged data pages: on the second, behind an Icache
    // write-back, a worker could wait forever (see `WriteBehind`).
    c.data_write_out_queue = Some((3 * sb.workers + worker) as usize);
    c
}

/// The root directory inode, on the slice of slot 0.
fn make_root(ps: &mut PStore, hint: StoreHint) -> Result<(), PStoreError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    ps.insert_inode(&Inode {
        ino: ROOT_INO,
        mode: libc::S_IFDIR | 0o755,
        nlink: 2,
        atime_ns: now,
        mtime_ns: now,
        ctime_ns: now,
        hint,
        ..Inode::default()
    })?;
    Ok(())
}

/// A RAM-backed SwarmIO emulator with fast timing (tests, `--controller swarmio`).
pub(crate) fn swarm(size: u64, queues: u16) -> Result<Arc<swarmio::SwarmIo>, StorageError> {
    use swarmio::timing_model::{Targets, TimingConfig};
    let targets = Targets {
        read_miops: 50.0,
        read_latency_us: 1.0,
        write_miops: 50.0,
        write_latency_us: 1.0,
        block_bytes: 4096,
        lba_bytes: LBA,
        num_sched_insts: 1,
    };
    let timing =
        TimingConfig::from_targets(&targets).map_err(|e| StorageError::Device(e.to_string()))?;
    let mut config = swarmio::SwarmConfig::new(size, LBA, timing);
    config.service_units = 1;
    config.workers_per_unit = 1;
    config.max_io_queues = queues + 1;
    swarmio::SwarmIo::new(config).map_err(|e| StorageError::Device(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_BYTES_PER_INODE;
    use gpu_nvme::controller::FileBackend;
    use std::path::Path;

    #[test]
    fn lba_zero_is_empty_a_volume_another_format_or_foreign() {
        let sb = ServerSuper {
            index: 0,
            servers: 1,
            workers: 2,
            block_size: 65536,
            zone_lbas: 8192,
            boot: [7; 16],
        };
        assert_eq!(ServerSuper::classify(&[0; 4096]), Found::Empty);
        let b = sb.encode();
        assert_eq!(ServerSuper::classify(&b), Found::Volume(sb));
        assert_eq!(
            ServerSuper::classify(&with_format(&b, 1)),
            Found::OtherFormat(1)
        );
        for byte in [9, 20] {
            let mut torn = b.clone();
            torn[byte] ^= 0x40;
            assert_eq!(ServerSuper::classify(&torn), Found::Foreign, "byte {byte}");
        }
        // Shorter than a superblock and not all zeros.
        assert_eq!(ServerSuper::classify(&b[..10]), Found::Foreign);
        let mut other = vec![0u8; 4096];
        other[1024..1028].copy_from_slice(b"junk");
        assert_eq!(ServerSuper::classify(&other), Found::Foreign);
    }

    /// `sb` (an encoded superblock) as format `version` wrote it, its checksum redone.
    fn with_format(sb: &[u8], version: u8) -> Vec<u8> {
        let mut b = sb.to_vec();
        b[7] = b'0' + version;
        let crc = common::hash::crc32c(&b[..32]);
        b[32..36].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Frames written through (before their data was flushed) are replayed when the volume
    /// reopens on the boot that wrote them, and dropped when its superblock names another.
    #[test]
    fn a_volume_reopened_on_another_boot_keeps_its_log_up_to_the_last_data_flush() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let layout = Layout::new(1, 2, 65536).unwrap();
        let reg = libc::S_IFREG | 0o644;
        let write_through = |zones: &mut [PStore], name: &[u8]| {
            let z = &mut zones[0];
            z.defer_settle(true).unwrap();
            let f = z.create(ROOT_INO, name, reg, 0, 0, StoreHint::default());
            z.write(f.unwrap().ino, 0, b"bytes").unwrap();
            z.write_through().unwrap();
            // Dropped without a commit: a killed process.
        };
        let boot = boot_id();
        {
            let mut s = Storage::open(&two_workers(&path)).unwrap();
            let mut zones = s.zones(0, &layout, StoreHint::default()).unwrap();
            write_through(&mut zones, b"first");
        }
        {
            let mut s = Storage::open(&two_workers(&path)).unwrap();
            let mut zones = s.zones(0, &layout, StoreHint::default()).unwrap();
            assert_eq!(s.existing().unwrap().boot, boot.unwrap_or_default());
            // A machine without a boot id trusts no frame written through.
            let found = zones[0].lookup(ROOT_INO, b"first").is_some();
            assert_eq!(found, boot.is_some());
            write_through(&mut zones, b"second");
        }
        let mut s = Storage::open(&two_workers(&path)).unwrap();
        let another = ServerSuper {
            boot: [0xAB; 16],
            ..s.existing().unwrap()
        };
        s.write_super(&another).unwrap();
        let mut zones = s.zones(0, &layout, StoreHint::default()).unwrap();
        // The first came back with the last open's recovery, which flushed it.
        assert_eq!(
            zones[0].lookup(ROOT_INO, b"first").is_some(),
            boot.is_some()
        );
        assert!(zones[0].lookup(ROOT_INO, b"second").is_none());
        assert_eq!(s.existing().unwrap().boot, boot.unwrap_or_default());
    }

    #[test]
    fn a_boot_id_reads_as_its_16_bytes_and_anything_else_as_none() {
        let id = parse_boot_id("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\n").unwrap();
        assert_eq!(id[..4], [0x0f, 0x1e, 0x2d, 0x3c]);
        assert_eq!(id[15], 0xf0);
        for bad in ["", "0f1e2d3c", "zz1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"] {
            assert_eq!(parse_boot_id(bad), None, "{bad:?}");
        }
        // This machine's, when it has one: the same on every read.
        if let Some(b) = boot_id() {
            assert_eq!(boot_id(), Some(b));
        }
    }

    #[test]
    fn a_zone_has_an_inode_per_bytes_per_inode_an_icache_of_the_budget_a_log_of_a_32nd_and_three_queues()
     {
        let layout = Layout::new(2, 2, 65536).unwrap();
        let zone = |mib: u64| ServerSuper {
            index: 1,
            servers: 2,
            workers: 2,
            block_size: 65536,
            zone_lbas: (mib << 20) / u64::from(LBA),
            boot: [0; 16],
        };
        let default = DEFAULT_BYTES_PER_INODE;
        // 512 MiB: 32,768 inode slots (one per 16 KiB); 64 MiB of cache; WAL 16 MiB.
        let c = zone_config(&zone(512), &layout, 1, 64 << 20, default);
        assert_eq!((c.inode_slots, c.max_dentries), (32768, 32768));
        assert_eq!(
            c.icache_blocks, 16384,
            "the PStore caps it at its inode area"
        );
        assert_eq!(c.wal_pages, 4096);
        assert_eq!(
            (
                c.queue,
                c.write_back_queue,
                c.checkpoint_queue,
                c.data_write_out_queue
            ),
            (Some(1), Some(3), Some(5), Some(7))
        );
        assert_eq!(
            zone_config(&zone(512), &layout, 1, 1 << 20, default).icache_blocks,
            256
        );
        // One inode per page, and a tiny zone that still gets one Icache block of them.
        assert_eq!(
            zone_config(&zone(512), &layout, 1, 64 << 20, 4096).inode_slots,
            131072
        );
        assert_eq!(
            zone_config(&zone(1), &layout, 1, 64 << 20, 1 << 30).inode_slots,
            INODES_PER_BLOCK
        );
        // The log stays within 1..=64 MiB.
        assert_eq!(
            zone_config(&zone(16), &layout, 0, 64 << 20, default).wal_pages,
            256
        );
        assert_eq!(
            zone_config(&zone(4096), &layout, 0, 64 << 20, default).wal_pages,
            16384
        );
    }

    #[test]
    fn bytes_per_inode_sets_the_inodes_of_a_format_and_a_volume_keeps_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let layout = Layout::new(1, 2, 65536).unwrap();
        let slots = |cfg: &ServerConfig| {
            let mut s = Storage::open(cfg).unwrap();
            let zones = s.zones(0, &layout, StoreHint::default()).unwrap();
            zones
                .iter()
                .map(|z| z.stats().inode_slots)
                .collect::<Vec<_>>()
        };
        let dense = ServerConfig {
            bytes_per_inode: 4096,
            ..two_workers(&path)
        };
        // 64 MiB over two zones: 8,184 pages each, rounded up to whole Icache blocks.
        assert_eq!(slots(&dense), vec![8192, 8192]);
        // Reopened with another value (the default, 4x sparser): unchanged.
        assert_eq!(slots(&two_workers(&path)), vec![8192, 8192]);
        // Formatted anew with the default: a quarter of them.
        let forced = ServerConfig {
            force_format: true,
            ..two_workers(&path)
        };
        assert_eq!(slots(&forced), vec![2048, 2048]);
    }

    fn two_workers(data: &Path) -> ServerConfig {
        ServerConfig {
            workers: 2,
            data: data.to_path_buf(),
            data_size: 64 << 20,
            ..Default::default()
        }
    }

    /// Data one block short of two smallest zones is refused with the size that fits, and
    /// data of that size formats and serves.
    #[test]
    fn data_too_small_for_its_zones_is_refused_with_the_size_that_fits() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(1, 2, 65536).unwrap();
        let min = (1 + 2 * MIN_ZONE_LBAS) * u64::from(LBA);
        let short = ServerConfig {
            data_size: min - u64::from(LBA),
            ..two_workers(&dir.path().join("short"))
        };
        let mut s = Storage::open(&short).unwrap();
        assert!(matches!(
            s.check_workers(2),
            Err(StorageError::TooSmall { .. })
        ));
        s.check_workers(1).unwrap();
        let err = s.zones(0, &layout, StoreHint::default()).err().unwrap();
        assert!(
            matches!(err, StorageError::TooSmall { workers: 2, min_bytes, .. } if min_bytes == min),
            "{err:?}"
        );
        assert!(
            err.to_string().contains(&format!("at least {min} bytes")),
            "{err}"
        );
        let fits = ServerConfig {
            data_size: min,
            ..two_workers(&dir.path().join("fits"))
        };
        let mut s = Storage::open(&fits).unwrap();
        s.check_workers(2).unwrap();
        let mut zones = s.zones(0, &layout, StoreHint::default()).unwrap();
        let reg = libc::S_IFREG | 0o644;
        for z in &mut zones {
            let f = z
                .create(ROOT_INO, b"f", reg, 0, 0, StoreHint::default())
                .unwrap();
            z.write(f.ino, 0, b"bytes").unwrap();
        }
        drop(zones);
        // The volume now holds two zones, whatever it could hold.
        let s = Storage::open(&fits).unwrap();
        s.check_workers(2).unwrap();
        let err = s.check_workers(1).err().unwrap();
        assert!(
            matches!(
                err,
                StorageError::Mismatch {
                    what: "workers",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn formatted_data_reopens_with_its_root_and_rejects_another_shape() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let layout = Layout::new(1, 2, 65536).unwrap();
        {
            let mut s = Storage::open(&two_workers(&path)).unwrap();
            assert!(s.existing().is_none());
            let mut zones = s.zones(0, &layout, StoreHint::default()).unwrap();
            assert!(zones[0].getattr(ROOT_INO).unwrap().mode & libc::S_IFDIR != 0);
            assert!(zones[1].getattr(ROOT_INO).is_err());
            // Formatting served no request: no zone counts a checkpoint stop yet.
            for z in &zones {
                assert_eq!(z.stats().checkpoint_stops, Default::default());
            }
        }
        let mut s = Storage::open(&two_workers(&path)).unwrap();
        assert_eq!(s.existing().map(|sb| sb.index), Some(0));
        assert!(matches!(
            s.zones(0, &Layout::new(2, 2, 65536).unwrap(), StoreHint::default()),
            Err(StorageError::Mismatch {
                what: "servers",
                ..
            })
        ));
        let mut zones = s.zones(0, &layout, StoreHint::default()).unwrap();
        assert_eq!(zones[0].getattr(ROOT_INO).unwrap().ino, ROOT_INO);
        // Nor did opening, with its recovery's checkpoint.
        assert_eq!(zones[0].stats().checkpoint_stops, Default::default());
    }

    #[test]
    fn data_that_is_not_empty_is_formatted_only_when_forced() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(1, 2, 65536).unwrap();
        let refused = |cfg: &ServerConfig| Storage::open(cfg).err().map(|e| e.to_string());

        // Another file system (mkfs.ext4's, when the tool is here; bytes of its own otherwise).
        let foreign = dir.path().join("foreign");
        let mkfs = std::fs::File::create(&foreign)
            .and_then(|f| f.set_len(64 << 20))
            .and_then(|()| {
                std::process::Command::new("mkfs.ext4")
                    .args(["-q", "-F"])
                    .arg(&foreign)
                    .status()
            });
        if !matches!(mkfs, Ok(s) if s.success()) {
            println!("mkfs.ext4 not usable ({mkfs:?}): a file of other bytes stands in");
            std::fs::write(&foreign, vec![0xEBu8; 64 << 20]).unwrap();
        }
        let before = std::fs::read(&foreign).unwrap();
        let msg = refused(&two_workers(&foreign)).expect("a foreign device was opened");
        assert!(msg.contains("holds no PeakFS superblock"), "{msg}");
        assert_eq!(
            std::fs::read(&foreign).unwrap(),
            before,
            "refusing wrote to it"
        );
        let forced = ServerConfig {
            force_format: true,
            ..two_workers(&foreign)
        };
        let mut s = Storage::open(&forced).unwrap();
        assert!(s.existing().is_none());
        s.zones(0, &layout, StoreHint::default()).unwrap();
        drop(s);
        assert!(
            Storage::open(&two_workers(&foreign))
                .unwrap()
                .existing()
                .is_some()
        );

        // A volume of an older format (its file-based data would be looked for elsewhere).
        let old = dir.path().join("old");
        let mut s = Storage::open(&two_workers(&old)).unwrap();
        let mut zones = s.zones(0, &layout, StoreHint::default()).unwrap();
        let mode = libc::S_IFREG | 0o644;
        zones[0]
            .create(ROOT_INO, b"kept", mode, 0, 0, StoreHint::default())
            .unwrap();
        for z in &mut zones {
            z.checkpoint().unwrap();
        }
        drop((zones, s));
        let mut bytes = std::fs::read(&old).unwrap();
        let lba0 = with_format(&bytes[..4096], 1);
        bytes[..4096].copy_from_slice(&lba0);
        std::fs::write(&old, &bytes).unwrap();
        let msg = refused(&two_workers(&old)).expect("an older format was opened");
        let expected = format!("format 1, this build reads format {FORMAT_VERSION}");
        assert!(msg.contains(&expected), "{msg}");
        assert_eq!(std::fs::read(&old).unwrap(), bytes, "refusing wrote to it");
        let forced = ServerConfig {
            force_format: true,
            ..two_workers(&old)
        };
        let mut zones = Storage::open(&forced)
            .unwrap()
            .zones(0, &layout, StoreHint::default())
            .unwrap();
        assert_eq!(zones[0].lookup(ROOT_INO, b"kept"), None, "not erased");
    }

    #[test]
    fn every_backend_and_controller_thread_count_serves_the_same_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let layout = Layout::new(1, 2, 65536).unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut ino = None;
        for (backend, controller_workers, inline_data_queues) in [
            (FileBackend::Uring, 1, true),
            (FileBackend::Mmap, 2, true),
            (FileBackend::Mmap, 1, false),
            (FileBackend::Psync, 2, true),
        ] {
            let cfg = ServerConfig {
                backend,
                controller_workers,
                inline_data_queues,
                ..two_workers(&path)
            };
            let mut s = Storage::open(&cfg).unwrap();
            // Queues 1 and 2 are the workers' own (data) queues.
            let ctrl = s.dev.controller();
            let inline = inline_data_queues && backend != FileBackend::Uring;
            assert_eq!(
                (
                    ctrl.serves_inline(1),
                    ctrl.serves_inline(2),
                    ctrl.serves_inline(3)
                ),
                (inline, inline, false),
                "{backend:?}, inline data queues {inline_data_queues}"
            );
            let mut zones = s.zones(0, &layout, StoreHint::default()).unwrap();
            let z = &mut zones[0];
            let i = match ino {
                None => {
                    let mode = libc::S_IFREG | 0o644;
                    let a = z
                        .create(ROOT_INO, b"f", mode, 0, 0, StoreHint::default())
                        .unwrap();
                    z.write(a.ino, 0, &data).unwrap();
                    z.fsync().unwrap();
                    *ino.insert(a.ino)
                }
                Some(i) => i,
            };
            let mut back = vec![0u8; data.len()];
            assert_eq!(z.read(i, 0, &mut back).unwrap(), data.len());
            assert_eq!(
                back, data,
                "{backend:?} x {controller_workers}, inline {inline_data_queues}"
            );
            for z in &mut zones {
                z.checkpoint().unwrap();
            }
        }
    }
}
