//! A real PeakFS cluster for client tests: `peakfs-master` and `peakfs-server` processes on
//! loopback ([`LocalCluster`]), children of the test, stopped when the cluster is dropped.

#![allow(dead_code, reason = "each test crate uses a subset")]

use std::path::Path;
use std::time::Duration;

use peakfs::client::{Client, ClientOptions};
use peakfs::local_cluster::{LocalCluster, LocalClusterConfig, Node};

/// A master and `n` servers (2 workers each) on loopback.
pub struct Cluster {
    /// The servers (fields drop in order: servers, then the master, then their folder).
    pub servers: Vec<Node>,
    /// The master.
    cluster: LocalCluster,
    pub master_addr: String,
    pub dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts the cluster and waits until it is ready.
    pub fn start(n: usize) -> Self {
        Self::start_with(n, &[])
    }

    /// [`Cluster::start`] with more arguments for every server.
    pub fn start_with(n: usize, server_args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bin = Path::new(env!("CARGO_BIN_EXE_peakfs-server"));
        let cfg = LocalClusterConfig {
            bin_dir: bin.parent().unwrap().to_path_buf(),
            work_dir: dir.path().to_path_buf(),
            servers: n,
            workers: 2,
            data_bytes: 64 << 20,
            server_args: ["--no-pin"]
                .iter()
                .chain(server_args)
                .map(|a| a.to_string())
                .collect(),
            server_cpus: Vec::new(),
        };
        let mut cluster = LocalCluster::start(&cfg).unwrap();
        let servers = std::mem::take(&mut cluster.servers);
        Self {
            servers,
            master_addr: cluster.master_addr().to_string(),
            cluster,
            dir,
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
        Client::connect(&self.master_addr, Self::options()).unwrap()
    }
}
