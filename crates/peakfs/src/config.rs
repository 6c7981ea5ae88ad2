//! Configuration of the PeakFS master and servers (PeakFS §III-A): a TOML file whose values the
//! command-line flags override.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gpu_nvme::controller::FileBackend;
use serde::Deserialize;

use crate::placement::{DEFAULT_BLOCK_SIZE, Hint, Layout};

/// Errors reading a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// the file could not be read
    #[error("cannot read config {path}: {source}")]
    Read {
        /// the file
        path: PathBuf,
        /// why
        source: std::io::Error,
    },
    /// the file is not valid TOML for this config
    #[error("invalid config {path}: {source}")]
    Parse {
        /// the file
        path: PathBuf,
        /// why
        source: Box<toml::de::Error>,
    },
    /// a value is out of range
    #[error("invalid config value {field} = {value}: {why}")]
    Value {
        /// the key
        field: &'static str,
        /// its value
        value: String,
        /// why it is wrong
        why: String,
    },
}

/// The master's settings (`[master]` keys at the top level of its TOML file).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MasterConfig {
    /// gRPC listen address.
    pub listen: String,
    /// Servers in the cluster (the view is ready once all registered).
    pub servers: u32,
    /// Bytes per file block.
    pub block_size: u32,
    /// Default distribution hint (`placement::Hint::parse` words, e.g. `"bigdir,block"`).
    pub default_hint: String,
    /// How often servers report, in milliseconds.
    pub report_interval_ms: u32,
}

impl Default for MasterConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:7300".into(),
            servers: 1,
            block_size: DEFAULT_BLOCK_SIZE,
            // §III-C1: "default to the bigdir strategy so that the metadata is always
            // distributed in a balanced manner".
            default_hint: "bigdir,block".into(),
            report_interval_ms: 1000,
        }
    }
}

impl MasterConfig {
    /// The default hint, parsed.
    pub fn hint(&self) -> Result<Hint, ConfigError> {
        Hint::parse(&self.default_hint).ok_or_else(|| ConfigError::Value {
            field: "default_hint",
            value: self.default_hint.clone(),
            why: "words are block, file, io, bigdir, dir".into(),
        })
    }

    /// Checks the values that the cluster's layout depends on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.hint()?;
        Layout::new(self.servers, 1, self.block_size).map_err(|e| ConfigError::Value {
            field: "servers/block_size",
            value: format!("{}/{}", self.servers, self.block_size),
            why: e.to_string(),
        })?;
        if self.report_interval_ms == 0 {
            return Err(ConfigError::Value {
                field: "report_interval_ms",
                value: "0".into(),
                why: "must be positive".into(),
            });
        }
        Ok(())
    }
}

/// Which NVMe controller a server's workers drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ControllerKind {
    /// `gpu_nvme::controller::file` over the data file or block device.
    #[default]
    File,
    /// The RAM-backed SwarmIO emulator (tests; nothing survives a restart).
    Swarmio,
}

/// A server's settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Master's gRPC address (`http://` is added when missing).
    pub master: String,
    /// pRPC listen address.
    pub listen: String,
    /// Address registered with the master (default: the bound listen address).
    pub advertise: Option<String>,
    /// Data file or block device.
    pub data: PathBuf,
    /// Size of a data file created when missing, in bytes.
    pub data_size: u64,
    /// Worker threads, each owning one zone of the data.
    pub workers: u32,
    /// memcpy threads (§III-B: about network bandwidth / one thread's copy bandwidth).
    pub memcpy_threads: u32,
    /// Copies larger than this go to the memcpy pool.
    pub memcpy_threshold: usize,
    /// Pin worker threads to cores.
    pub pin: bool,
    /// The cores workers are pinned to, worker `w` on `cpus[w mod len]` (TOML: a list, or a
    /// Linux cpu-list string such as `"0-3,8"`); empty: worker `w` on core `w`. Servers that
    /// share a host need disjoint lists, or their workers pile onto the same cores.
    #[serde(deserialize_with = "deserialize_cpus")]
    pub cpus: Vec<usize>,
    /// Microseconds a worker keeps polling after its last work before it sleeps in its
    /// poller (0: sleep at once). A sleeping worker costs each request that reaches it an
    /// eventfd write and a wake-up; a polling one yields its core between polls. Unset:
    /// [`ServerConfig::spin`] picks by `cpus`.
    pub spin_us: Option<u64>,
    /// NVMe controller.
    pub controller: ControllerKind,
    /// How the file controller reaches the data (TOML: `"uring"`, `"psync"` or `"mmap"`):
    /// io_uring suits block devices and files on disk; mmap maps the whole file at start and
    /// copies in the controller's thread (a data file on tmpfs; it costs the file's size in
    /// memory at once).
    #[serde(deserialize_with = "deserialize_backend")]
    pub backend: FileBackend,
    /// Threads of the file controller (each serves every `controller_workers`-th worker's
    /// queue): the device side of the server, like an SSD's own parallelism.
    pub controller_workers: u32,
    /// With the psync or mmap backend, each worker runs the commands of the queue it waits on
    /// itself (the file controller's inline queues) instead of waiting while a controller
    /// thread copies. On 16 cores (8 x 1) this doubled IOR and cost metadata requests 9-12 %
    /// of their rate (bench/results/2026-11-28-peakfs-controller-pin); off for metadata-only
    /// servers.
    pub inline_data_queues: bool,
    /// Entries per SPSC / MPMC / MPSC ring.
    pub ring_capacity: usize,
    /// Most MiB of Icache per worker; a zone whose inode area is smaller caches all of it.
    /// A metadata request that misses the Icache, or an Icache that writes back often, waits
    /// for the device on the request path.
    pub icache_mib: u64,
    /// Bytes of a zone per inode slot when the data is formatted (like mkfs.ext4's `-i`):
    /// the most files and directories a zone holds is its size over this. A volume keeps the
    /// inode count it was formatted with.
    pub bytes_per_inode: u64,
    /// Format the data even when it holds something (another file system, a PeakFS volume
    /// of another format version, or one of this format: all of it is erased). Unset, only
    /// data whose superblock LBA is zeros is formatted.
    pub force_format: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            master: "127.0.0.1:7300".into(),
            listen: "127.0.0.1:7400".into(),
            advertise: None,
            data: PathBuf::from("peakfs.data"),
            data_size: 1 << 30,
            workers: 2,
            memcpy_threads: 1,
            memcpy_threshold: 4096,
            pin: true,
            cpus: Vec::new(),
            spin_us: None,
            controller: ControllerKind::File,
            backend: FileBackend::Uring,
            controller_workers: 1,
            inline_data_queues: true,
            ring_capacity: 4096,
            icache_mib: 64,
            // §II-A, C2: metadata-heavy HPC workloads of many small files.
            bytes_per_inode: DEFAULT_BYTES_PER_INODE,
            force_format: false,
        }
    }
}

impl ServerConfig {
    /// How long a worker polls before it sleeps: `spin_us`, or when unset 1 ms for workers
    /// given cores of their own (`cpus`: nothing else wants them; on the 16-core host, 4 x 2
    /// pinned workers, every metadata phase moved closer to the echo ceiling with 1 ms than
    /// with 50 us, bench/results/2026-11-25-peakfs-16core-hops) and 50 us otherwise, where
    /// the workers share their cores with clients and other servers.
    pub fn spin(&self) -> Duration {
        let us = match (self.spin_us, self.cpus.is_empty()) {
            (Some(us), _) => us,
            (None, true) => 50,
            (None, false) => 1000,
        };
        Duration::from_micros(us)
    }

    /// Checks ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field, value: String, why: &str| {
            Err(ConfigError::Value {
                field,
                value,
                why: why.into(),
            })
        };
        if self.workers == 0 || self.workers > 256 {
            return bad("workers", self.workers.to_string(), "must be in 1..=256");
        }
        if self.controller_workers == 0 || self.controller_workers > self.workers {
            return bad(
                "controller_workers",
                self.controller_workers.to_string(),
                "must be in 1..=workers (one queue per worker)",
            );
        }
        if self.memcpy_threads > 64 {
            return bad(
                "memcpy_threads",
                self.memcpy_threads.to_string(),
                "at most 64",
            );
        }
        if let Some(us) = self.spin_us
            && us > 1_000_000
        {
            return bad("spin_us", us.to_string(), "at most 1000000 (one second)");
        }
        if let Some(&c) = self.cpus.iter().find(|&&c| c >= MAX_CPU) {
            return bad("cpus", c.to_string(), "cores are numbered below 1024");
        }
        if !(1..=1 << 20).contains(&self.icache_mib) {
            return bad(
                "icache_mib",
                self.icache_mib.to_string(),
                "must be in 1..=2^20",
            );
        }
        if !BYTES_PER_INODE.contains(&self.bytes_per_inode) {
            return bad(
                "bytes_per_inode",
                self.bytes_per_inode.to_string(),
                "must be in 1024..=2^30",
            );
        }
        if !(2..=1 << 20).contains(&self.ring_capacity) {
            return bad(
                "ring_capacity",
                self.ring_capacity.to_string(),
                "must be in 2..=2^20",
            );
        }
        Ok(())
    }

    /// The master's URI for tonic.
    pub fn master_uri(&self) -> String {
        if self.master.contains("://") {
            self.master.clone()
        } else {
            format!("http://{}", self.master)
        }
    }
}

/// Zone bytes per inode slot unless configured: one inode per 4 pages.
pub const DEFAULT_BYTES_PER_INODE: u64 = 16384;
/// The values `bytes_per_inode` may take.
pub const BYTES_PER_INODE: std::ops::RangeInclusive<u64> = 1024..=1 << 30;

/// Cores a cpu set can name (glibc's `CPU_SETSIZE`).
pub const MAX_CPU: usize = 1024;

/// Parses a Linux cpu-list (`"0-3,8,10-11"`) into core numbers, in order, each below
/// [`MAX_CPU`].
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |s: &str| {
            s.trim()
                .parse::<usize>()
                .ok()
                .filter(|&c| c < MAX_CPU)
                .ok_or_else(|| format!("{s:?} is not a core number below {MAX_CPU}"))
        };
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (num(lo)?, num(hi)?);
                if lo > hi {
                    return Err(format!("range {part:?} runs backwards"));
                }
                cpus.extend(lo..=hi);
            }
            None => cpus.push(num(part)?),
        }
    }
    if cpus.is_empty() {
        return Err(format!("cpu list {text:?} names no core"));
    }
    Ok(cpus)
}

/// `cpus` from TOML: a list of cores or a cpu-list string.
fn deserialize_cpus<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<usize>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Cpus {
        List(Vec<usize>),
        Text(String),
    }
    match Cpus::deserialize(d)? {
        Cpus::List(l) => Ok(l),
        Cpus::Text(t) => parse_cpu_list(&t).map_err(serde::de::Error::custom),
    }
}

/// `backend` from TOML: a backend name.
fn deserialize_backend<'de, D: serde::Deserializer<'de>>(d: D) -> Result<FileBackend, D::Error> {
    String::deserialize(d)?
        .parse()
        .map_err(serde::de::Error::custom)
}

/// Reads a TOML config file into `T`, or the defaults when `path` is `None`.
pub fn load<T: for<'de> Deserialize<'de> + Default>(path: Option<&Path>) -> Result<T, ConfigError> {
    let Some(path) = path else {
        return Ok(T::default());
    };
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.into(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.into(),
        source: Box::new(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_overrides_defaults_and_rejects_unknown_keys() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.toml");
        std::fs::write(
            &p,
            "workers = 4\ncontroller = \"swarmio\"\nbackend = \"mmap\"\nbytes_per_inode = 4096\n",
        )
        .unwrap();
        let c: ServerConfig = load(Some(&p)).unwrap();
        assert_eq!((c.workers, c.controller), (4, ControllerKind::Swarmio));
        assert_eq!((c.backend, c.bytes_per_inode), (FileBackend::Mmap, 4096));
        assert_eq!(c.memcpy_threshold, 4096);
        std::fs::write(&p, "wrokers = 4\n").unwrap();
        assert!(matches!(
            load::<ServerConfig>(Some(&p)),
            Err(ConfigError::Parse { .. })
        ));
        assert!(matches!(
            load::<MasterConfig>(Some(&dir.path().join("missing"))),
            Err(ConfigError::Read { .. })
        ));
    }

    #[test]
    fn cpu_lists_parse_as_linux_writes_them() {
        assert_eq!(
            parse_cpu_list("0-3,8, 10-11").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpu_list("5").unwrap(), vec![5]);
        for bad in ["", "3-1", "x", "0-", "1024", "0-2000"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad:?} accepted");
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.toml");
        std::fs::write(&p, "cpus = \"4-5\"\n").unwrap();
        assert_eq!(load::<ServerConfig>(Some(&p)).unwrap().cpus, vec![4, 5]);
        std::fs::write(&p, "cpus = [7, 2]\n").unwrap();
        assert_eq!(load::<ServerConfig>(Some(&p)).unwrap().cpus, vec![7, 2]);
        std::fs::write(&p, "cpus = \"2-1\"\n").unwrap();
        assert!(matches!(
            load::<ServerConfig>(Some(&p)),
            Err(ConfigError::Parse { .. })
        ));
    }

    #[test]
    fn validation_names_the_bad_value() {
        let m = MasterConfig {
            default_hint: "huge".into(),
            ..Default::default()
        };
        assert!(m.validate().unwrap_err().to_string().contains("huge"));
        let m = MasterConfig {
            servers: 0,
            ..Default::default()
        };
        assert!(m.validate().is_err());
        let s = ServerConfig {
            workers: 0,
            ..Default::default()
        };
        assert!(s.validate().unwrap_err().to_string().contains("workers"));
        let s = ServerConfig {
            spin_us: Some(2_000_000),
            ..Default::default()
        };
        assert!(s.validate().unwrap_err().to_string().contains("spin_us"));
        // Unset, the spin follows whether the workers have cores of their own.
        let mut s = ServerConfig::default();
        assert_eq!(s.spin(), Duration::from_micros(50));
        s.cpus = vec![4, 5];
        assert_eq!(s.spin(), Duration::from_millis(1));
        s.spin_us = Some(0);
        assert_eq!(s.spin(), Duration::ZERO);
        let s = ServerConfig {
            controller_workers: 3,
            ..Default::default()
        };
        assert!(
            s.validate()
                .unwrap_err()
                .to_string()
                .contains("controller_workers")
        );
        let s = ServerConfig {
            cpus: vec![0, 4096],
            ..Default::default()
        };
        assert!(s.validate().unwrap_err().to_string().contains("cpus"));
        let s = ServerConfig {
            icache_mib: 0,
            ..Default::default()
        };
        assert!(s.validate().unwrap_err().to_string().contains("icache_mib"));
        for bytes_per_inode in [0, 1023, (1 << 30) + 1] {
            let s = ServerConfig {
                bytes_per_inode,
                ..Default::default()
            };
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains("bytes_per_inode"), "{e}");
        }
        assert_eq!(
            ServerConfig::default().master_uri(),
            "http://127.0.0.1:7300"
        );
    }
}
