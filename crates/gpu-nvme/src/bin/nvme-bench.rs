//! nvme-bench: block I/O through gpu-nvme's queues from CPU threads or GPU threads against a
//! file-backed controller, in the spirit of BaM's nvm-block-bench. Prints IOPS, GB/s and
//! latency percentiles; `--json` emits the common bench record. The same benchmark runs
//! against the SwarmIO emulator as `swarmio bench`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Parser;
use common::bench::render_table;
use gpu_nvme::bench::{self, BenchArgs, BenchError};
use gpu_nvme::controller::{Controller, FileBackend, FileController, FileControllerConfig};
use gpu_nvme::cuda::Gpu;

/// Block I/O benchmark over gpu-nvme queue pairs against a file or block device.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The controller: `file:PATH` (a file or block device as the namespace).
    #[arg(long, default_value = "file:/dev/shm/nvme-bench.img")]
    controller: String,
    /// Create (or grow) the namespace file to this many MiB, filled with the check pattern.
    #[arg(long)]
    create_mib: Option<u64>,
    /// How the file controller reaches the file: uring, psync or mmap.
    #[arg(long, default_value = "mmap")]
    backend: String,
    #[command(flatten)]
    bench: BenchArgs,
}

fn main() -> Result<()> {
    bench::init_logging();
    let args = Args::parse();
    let path = PathBuf::from(
        args.controller
            .strip_prefix("file:")
            .context("--controller must be file:PATH")?,
    );
    if let Some(mib) = args.create_mib {
        bench::create_namespace(&path, mib)
            .with_context(|| format!("creating {}", path.display()))?;
    }
    let backend = args.backend.parse::<FileBackend>()?;
    let factory = |b: &BenchArgs,
                   gpu: Option<&Gpu>,
                   queues: u16|
     -> Result<Arc<dyn Controller>, BenchError> {
        let mut config = FileControllerConfig::new(&path);
        config.lba_size = b.lba_size;
        config.workers = b.workers;
        config.backend = backend;
        config.null_data = b.null;
        config.max_io_queues = queues;
        config.gpu = gpu.cloned();
        Ok(FileController::new(config)?)
    };
    let (mut record, notes) = bench::run(&args.bench, "gpu-nvme", &factory)?;
    record
        .parameters
        .insert("controller".into(), args.controller.clone().into());
    record
        .parameters
        .insert("backend".into(), args.backend.clone().into());
    if args.bench.json {
        println!("{}", record.to_json_line());
    } else {
        println!("{}", render_table(std::slice::from_ref(&record)));
        for n in &notes {
            println!("note: {n}");
        }
    }
    let (errors, mismatches) = bench::failures(&record);
    if errors > 0 || mismatches > 0 {
        bail!("{errors} commands failed and {mismatches} reads did not match the pattern");
    }
    Ok(())
}
