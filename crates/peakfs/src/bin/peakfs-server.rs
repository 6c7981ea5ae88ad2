//! `peakfs-server`: one PeakFS storage server (§III-A, §III-B): registers with the master,
//! serves pRPC with RingSched over one PStore zone per worker. On SIGINT/SIGTERM it stops
//! accepting, finishes in-flight requests, checkpoints every zone and exits 0.

use std::path::PathBuf;

use clap::Parser;
use gpu_nvme::controller::FileBackend;
use peakfs::config::{self, ControllerKind, ServerConfig};
use peakfs::server::Server;

/// PeakFS storage server.
#[derive(Debug, Parser)]
struct Args {
    /// Master gRPC address (host:port).
    #[arg(long)]
    master: Option<String>,
    /// pRPC listen address (host:port; port 0 picks one).
    #[arg(long)]
    listen: Option<String>,
    /// Address to register with the master (default: the bound listen address).
    #[arg(long)]
    advertise: Option<String>,
    /// Data file or block device (formatted when empty, recovered when it holds a volume of
    /// this build's format, refused otherwise).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Size of a data file created when missing (bytes).
    #[arg(long)]
    data_size: Option<u64>,
    /// Worker threads (one zone each).
    #[arg(long)]
    workers: Option<u32>,
    /// memcpy threads.
    #[arg(long)]
    memcpy_threads: Option<u32>,
    /// Microseconds a worker keeps polling after its last work before it sleeps (default:
    /// 1000 with --cpus, 50 without).
    #[arg(long)]
    spin_us: Option<u64>,
    /// NVMe controller: file (the data path) or swarmio (RAM emulator, tests).
    #[arg(long, value_enum)]
    controller: Option<ControllerKind>,
    /// How the file controller reaches the data: uring (default), psync, or mmap (maps the
    /// whole file at start: for a data file on tmpfs).
    #[arg(long)]
    backend: Option<FileBackend>,
    /// File controller threads (1..=workers).
    #[arg(long)]
    controller_workers: Option<u32>,
    /// Most MiB of inode cache per worker (a smaller inode area is cached whole).
    #[arg(long)]
    icache_mib: Option<u64>,
    /// Zone bytes per inode slot when formatting (default 16384): the most files a zone
    /// holds is its size over this. A formatted volume keeps its inode count.
    #[arg(long)]
    bytes_per_inode: Option<u64>,
    /// Leave every command to the file controller's threads: no worker runs its own data
    /// queue's commands (with psync or mmap they do by default: faster data, slower metadata).
    #[arg(long)]
    no_inline_data_queues: bool,
    /// Do not pin workers to cores.
    #[arg(long)]
    no_pin: bool,
    /// Cores to pin the workers to, as a cpu-list (`0-3,8`): worker w on the w-th core of the
    /// list (default: worker w on core w). Give servers sharing a host disjoint lists.
    #[arg(long, conflicts_with = "no_pin")]
    cpus: Option<String>,
    /// Format the data even when it is not empty (a PeakFS volume of any format included):
    /// erases what it holds. Without it only data whose first 4 KiB are zeros is formatted.
    #[arg(long)]
    force_format: bool,
    /// TOML config file.
    #[arg(long)]
    config: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        // Warnings by default: a daemon's warnings say what its clients cannot see.
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let a = Args::parse();
    let mut cfg: ServerConfig = config::load(a.config.as_deref())?;
    macro_rules! set {
        ($($field:ident),*) => { $(if let Some(v) = a.$field { cfg.$field = v; })* };
    }
    set!(
        master,
        listen,
        data,
        data_size,
        workers,
        memcpy_threads,
        controller,
        backend,
        controller_workers,
        icache_mib,
        bytes_per_inode
    );
    if a.spin_us.is_some() {
        cfg.spin_us = a.spin_us;
    }
    if a.advertise.is_some() {
        cfg.advertise = a.advertise;
    }
    if a.force_format {
        cfg.force_format = true;
    }
    if a.no_pin {
        cfg.pin = false;
    }
    if a.no_inline_data_queues {
        cfg.inline_data_queues = false;
    }
    if let Some(list) = a.cpus {
        cfg.cpus = config::parse_cpu_list(&list).map_err(|e| anyhow::anyhow!("--cpus: {e}"))?;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Caught from before the start on: a SIGTERM during recovery, or right after the line
    // below, stops the server cleanly once it has started.
    let (mut term, mut int) = {
        let _runtime = rt.enter();
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
        )
    };
    let server = Server::start(&cfg)?;
    // The line tests and scripts wait for.
    println!(
        "peakfs-server {} listening on {}",
        server.index(),
        server.local_addr()
    );
    rt.block_on(async {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    });
    tracing::info!("shutting down");
    server.stop()?;
    tracing::info!("stopped cleanly");
    Ok(())
}
