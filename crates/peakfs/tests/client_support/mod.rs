//! A real PeakFS cluster for client tests: `peakfs-master` and `peakfs-server` processes on
//! loopback, children of the test, killed when the cluster is dropped.

#![allow(dead_code, reason = "each test crate uses a subset")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use peakfs::client::{Client, ClientOptions};

/// A child process killed on drop.
pub struct Proc {
    pub child: Child,
    pub addr: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `bin` with `args` and waits for its "... listening on ADDR" line.
pub fn spawn(bin: &str, args: &[&str], log: &Path) -> Proc {
    let mut child = Command::new(bin)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(
        addr.contains(':'),
        "{bin} did not start: {line:?}; log: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    Proc { child, addr }
}

/// A master and `n` servers (2 workers each) on loopback.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub master: Proc,
    pub servers: Vec<Proc>,
}

impl Cluster {
    /// Starts the cluster and waits until it is ready.
    pub fn start(n: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d: PathBuf = dir.path().to_path_buf();
        let master = spawn(
            env!("CARGO_BIN_EXE_peakfs-master"),
            &[
                "--listen",
                "127.0.0.1:0",
                "--servers",
                &n.to_string(),
                "--report-interval-ms",
                "100",
            ],
            &d.join("master.log"),
        );
        let servers = (0..n)
            .map(|i| {
                let data = d.join(format!("s{i}.data"));
                spawn(
                    env!("CARGO_BIN_EXE_peakfs-server"),
                    &[
                        "--master",
                        &master.addr,
                        "--listen",
                        "127.0.0.1:0",
                        "--data",
                        data.to_str().unwrap(),
                        "--data-size",
                        &(64u64 << 20).to_string(),
                        "--workers",
                        "2",
                        "--no-pin",
                    ],
                    &d.join(format!("s{i}.log")),
                )
            })
            .collect();
        Self {
            dir,
            master,
            servers,
        }
    }

    /// Options with a short timeout for tests.
    pub fn options() -> ClientOptions {
        ClientOptions {
            timeout: Duration::from_secs(5),
            ready_wait: Duration::from_secs(15),
            ..Default::default()
        }
    }

    /// A new client of this cluster.
    pub fn client(&self) -> Client {
        Client::connect(&self.master.addr, Self::options()).unwrap()
    }
}
