//! `peakfs-master`: the PeakFS control plane (§III-A): server registration, usage reports and
//! the cluster view, over gRPC. Stops cleanly on SIGINT/SIGTERM.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use peakfs::config::{self, MasterConfig};

/// PeakFS master.
#[derive(Debug, Parser)]
struct Args {
    /// gRPC listen address (overrides the config).
    #[arg(long)]
    listen: Option<String>,
    /// TOML config file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Servers in the cluster (overrides the config).
    #[arg(long)]
    servers: Option<u32>,
    /// Default distribution hint, e.g. "bigdir,block" (overrides the config).
    #[arg(long)]
    default_hint: Option<String>,
    /// Report interval of the servers in ms (overrides the config).
    #[arg(long)]
    report_interval_ms: Option<u32>,
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
    let args = Args::parse();
    let mut cfg: MasterConfig = config::load(args.config.as_deref())?;
    if let Some(v) = args.listen {
        cfg.listen = v;
    }
    if let Some(v) = args.servers {
        cfg.servers = v;
    }
    if let Some(v) = args.default_hint {
        cfg.default_hint = v;
    }
    if let Some(v) = args.report_interval_ms {
        cfg.report_interval_ms = v;
    }
    cfg.validate()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        // Caught before the line below, which a script may answer with a SIGTERM at once.
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let listener = tokio::net::TcpListener::bind(&cfg.listen)
            .await
            .with_context(|| format!("listening on {}", cfg.listen))?;
        tracing::info!(addr = %listener.local_addr()?, servers = cfg.servers, "master listening");
        // The line tests and scripts wait for.
        println!("peakfs-master listening on {}", listener.local_addr()?);
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            tracing::info!("master shutting down");
        };
        peakfs::master::serve(cfg, listener, shutdown).await
    })
}
