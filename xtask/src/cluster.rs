//! `cargo xtask cluster`: the PeakFS cluster recipe (§IV's setup on one machine): a master, N
//! servers and the client side, on 127.0.0.1 or, with `--netns`, each host in its own network
//! namespace joined by veth pairs and a bridge. The recipe itself is `ci/peakfs-cluster.sh`:
//! shell, so that it also runs on the GPU machine, which has no cargo. This builds the binaries
//! it runs and gives it the options.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

use anyhow::Result;
use clap::Parser;

use crate::cargo;

/// The recipe's script, relative to the workspace root.
const SCRIPT: &str = "ci/peakfs-cluster.sh";

/// Arguments of `cargo xtask cluster`.
#[derive(Debug, clap::Parser)]
pub struct ClusterArgs {
    /// Give the master, every server and every client host its own network namespace, joined
    /// by veth pairs to a bridge (10.77.0.0/24; needs root). Default: all on 127.0.0.1.
    #[arg(long)]
    netns: bool,
    /// Storage servers.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100))]
    servers: u32,
    /// Client hosts: the default benchmark spreads its processes over them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    clients: u32,
    /// Worker threads per server (default: the host's cores shared out among the servers).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    workers: Option<u32>,
    /// Size of each server's data file, in MiB.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(64..))]
    data_mib: u64,
    /// Run release binaries (default: debug).
    #[arg(long)]
    release: bool,
    /// Copy the master's and servers' logs into this directory when the cluster stops.
    #[arg(long)]
    keep_logs: Option<PathBuf>,
    /// The client side, run in the first client host with `PEAKFS_MASTER` (the master's
    /// address), `PEAKFS` (the client binary) and `PEAKFS_SPAWN` (a `peakfs bench
    /// --spawn-prefix` value) set. Default: `peakfs bench --procs 4 --files 500 --ior-mib 8`,
    /// its processes spread over the client hosts.
    #[arg(last = true)]
    command: Vec<OsString>,
}

impl ClusterArgs {
    /// The recipe in network namespaces with 3 servers and 2 client hosts, running its default
    /// benchmark: what CI runs.
    pub fn netns_check() -> Self {
        Self::parse_from(["cluster", "--netns", "--servers", "3", "--clients", "2"])
    }
}

/// Builds the PeakFS binaries, then runs the recipe; fails when its command does.
pub fn run(args: &ClusterArgs) -> Result<()> {
    let profile = if args.release { "release" } else { "debug" };
    let mut build = cargo::command();
    build.args(["build", "-p", "peakfs"]);
    for bin in ["peakfs", "peakfs-master", "peakfs-server"] {
        build.args(["--bin", bin]);
    }
    if args.release {
        build.arg("--release");
    }
    cargo::run(&mut build)?;
    let bin_dir = cargo::Workspace::load()?.target_dir.join(profile);

    let mut recipe = Command::new("bash");
    recipe
        .arg(cargo::workspace_root().join(SCRIPT))
        .current_dir(cargo::workspace_root())
        .env("PEAKFS_BIN_DIR", bin_dir)
        .env("PEAKFS_DATA_MIB", args.data_mib.to_string())
        .args(["--servers", &args.servers.to_string()])
        .args(["--clients", &args.clients.to_string()]);
    if args.netns {
        recipe.arg("--netns");
    }
    if let Some(workers) = args.workers {
        recipe.env("PEAKFS_SERVER_WORKERS", workers.to_string());
    }
    if let Some(dir) = &args.keep_logs {
        recipe.env("PEAKFS_KEEP_LOGS", dir);
    }
    recipe.arg("--").args(&args.command);
    cargo::run(&mut recipe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_s_run_is_three_servers_and_two_client_hosts_in_namespaces_with_the_defaults() {
        let args = ClusterArgs::netns_check();
        assert!(args.netns && !args.release && args.command.is_empty());
        assert_eq!((args.servers, args.clients, args.data_mib), (3, 2, 1024));
        assert_eq!(args.workers, None);
    }
}
