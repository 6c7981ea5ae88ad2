//! A PeakFS cluster on this machine: one `peakfs-master` and `n` `peakfs-server` processes on
//! loopback, children of the caller, for `peakfs bench --local-cluster` (a measurement that
//! needs nothing set up beforehand) and for tests. Stopping it sends SIGTERM (the processes
//! shut down cleanly) and kills what has not exited within a few seconds.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a stopped process may take to exit after SIGTERM before it is killed.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// Errors of starting a local cluster.
#[derive(Debug, thiserror::Error)]
pub enum LocalClusterError {
    /// a program could not be started
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// the program
        program: String,
        /// why
        source: std::io::Error,
    },
    /// a program did not say where it listens
    #[error("{program} did not start (it said {said:?}); the end of its log {log}:\n{tail}")]
    NoAddress {
        /// the program
        program: String,
        /// its first line of output
        said: String,
        /// the file with its log (gone with the cluster's folder)
        log: String,
        /// the last lines of that log
        tail: String,
    },
    /// the log file could not be created
    #[error("cannot create {path}: {source}")]
    Log {
        /// the file
        path: String,
        /// why
        source: std::io::Error,
    },
}

/// What a local cluster looks like.
#[derive(Debug, Clone)]
pub struct LocalClusterConfig {
    /// Folder holding `peakfs-master` and `peakfs-server`.
    pub bin_dir: PathBuf,
    /// Folder for the servers' data files and every process's log.
    pub work_dir: PathBuf,
    /// Servers.
    pub servers: usize,
    /// Workers per server.
    pub workers: u32,
    /// Bytes of each server's data file.
    pub data_bytes: u64,
    /// Extra arguments of every server (e.g. `--backend mmap`, `--no-pin`).
    pub server_args: Vec<String>,
    /// Server `i`'s `--cpus` list, when given (see [`split_cores`]).
    pub server_cpus: Vec<String>,
}

/// Cores for a cluster and its clients on one machine of `cores` cores: server `i`'s
/// `workers` workers on cores `i * workers ..`, the clients on the cores after all of them
/// (4 servers x 2 workers on 16 cores: servers on 0-7, clients on 8-15, the layout that
/// measured best there). `None` when the servers' workers leave no core for clients.
pub fn split_cores(servers: usize, workers: u32, cores: usize) -> Option<(Vec<String>, String)> {
    let per = workers as usize;
    let used = servers.checked_mul(per)?;
    if used == 0 || used >= cores {
        return None;
    }
    let lists = (0..servers)
        .map(|i| format!("{}-{}", i * per, i * per + per - 1))
        .collect();
    Some((lists, format!("{used}-{}", cores - 1)))
}

/// A temporary folder for a run's data files, named `prefix…`: in `parent`, else in /dev/shm
/// when it exists (memory, as the cluster recipes use), else in the system's temporary folder.
pub fn scratch_dir(parent: Option<&Path>, prefix: &str) -> std::io::Result<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    let parent = match parent {
        Some(p) => p.to_path_buf(),
        None if shm.is_dir() => shm.to_path_buf(),
        None => std::env::temp_dir(),
    };
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&parent)
        .map_err(|e| {
            std::io::Error::new(e.kind(), format!("a folder in {}: {e}", parent.display()))
        })
}

/// A process of the cluster and the address it listens on; dropping it stops it.
#[derive(Debug)]
pub struct Node {
    /// The process.
    pub child: Child,
    /// Where it listens (`host:port`).
    pub addr: String,
}

impl Node {
    /// Starts `program` with `args`, its stderr into `log`, and waits for its
    /// `"... listening on ADDR"` line.
    fn start(program: &Path, args: &[String], log: &Path) -> Result<Self, LocalClusterError> {
        let name = program.display().to_string();
        let log_file = std::fs::File::create(log).map_err(|source| LocalClusterError::Log {
            path: log.display().to_string(),
            source,
        })?;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .map_err(|source| LocalClusterError::Spawn {
                program: name.clone(),
                source,
            })?;
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            // EOF (the process died) leaves the line empty: reported below.
            let _ = BufReader::new(out).read_line(&mut line);
        }
        match line.trim().rsplit(' ').next() {
            Some(addr) if line.contains("listening on") && addr.contains(':') => Ok(Self {
                addr: addr.to_string(),
                child,
            }),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                // The log goes with the cluster's folder: its end goes into the error.
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(5)..].join("\n");
                Err(LocalClusterError::NoAddress {
                    program: name,
                    said: line.trim().to_string(),
                    log: log.display().to_string(),
                    tail,
                })
            }
        }
    }

    /// Sends SIGTERM and waits for the exit, killing the process after [`STOP_WAIT`] (at
    /// once when it has exited already).
    pub fn stop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) on our own child's pid, which we have not reaped yet.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        wait_or_kill(&mut self.child, STOP_WAIT);
    }
}

/// Waits up to `wait` for `child` to exit, then kills it (and reaps it either way).
pub fn wait_or_kill(child: &mut Child, wait: Duration) {
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A running local cluster; dropping it stops every process, the servers first.
#[derive(Debug)]
pub struct LocalCluster {
    /// The servers, in the order they registered (declared first: dropped first).
    pub servers: Vec<Node>,
    /// The master.
    pub master: Node,
}

impl LocalCluster {
    /// Starts the master, then the servers one after another (each formats its data file and
    /// registers before the next starts, so server `i` gets index `i`).
    pub fn start(cfg: &LocalClusterConfig) -> Result<Self, LocalClusterError> {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let master = Node::start(
            &cfg.bin_dir.join("peakfs-master"),
            &args(&[
                "--listen",
                "127.0.0.1:0",
                "--servers",
                &cfg.servers.to_string(),
                "--report-interval-ms",
                "100",
            ]),
            &cfg.work_dir.join("master.log"),
        )?;
        let mut cluster = Self {
            servers: Vec::with_capacity(cfg.servers),
            master,
        };
        for i in 0..cfg.servers {
            let data = cfg.work_dir.join(format!("s{i}.data"));
            let mut a = args(&[
                "--master",
                &cluster.master.addr,
                "--listen",
                "127.0.0.1:0",
                "--data",
                &data.display().to_string(),
                "--data-size",
                &cfg.data_bytes.to_string(),
                "--workers",
                &cfg.workers.to_string(),
            ]);
            a.extend(cfg.server_args.iter().cloned());
            if let Some(cpus) = cfg.server_cpus.get(i) {
                a.extend(["--cpus".to_string(), cpus.clone()]);
            }
            let server = Node::start(
                &cfg.bin_dir.join("peakfs-server"),
                &a,
                &cfg.work_dir.join(format!("s{i}.log")),
            )?;
            cluster.servers.push(server);
        }
        Ok(cluster)
    }

    /// Where clients find the cluster.
    pub fn master_addr(&self) -> &str {
        &self.master.addr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_cores_gives_each_server_its_own_cores_and_the_clients_the_rest() {
        let (lists, clients) = split_cores(4, 2, 16).unwrap();
        assert_eq!(lists, ["0-1", "2-3", "4-5", "6-7"]);
        assert_eq!(clients, "8-15");
        assert_eq!(
            split_cores(1, 1, 2).unwrap(),
            (vec!["0-0".to_string()], "1-1".to_string())
        );
        assert!(split_cores(4, 4, 16).is_none(), "no core left for clients");
        assert!(split_cores(0, 2, 16).is_none());
        assert!(split_cores(usize::MAX, 2, 16).is_none());
    }
}
