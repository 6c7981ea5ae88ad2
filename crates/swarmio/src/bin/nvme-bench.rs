//! nvme-bench: block I/O through gpu-nvme's queues from CPU threads or GPU threads against a
//! file-backed controller or the SwarmIO emulator, in the spirit of BaM's nvm-block-bench.
//! Prints IOPS, GB/s and latency percentiles; `--json` emits the common bench record.
//!
//! It lives in the swarmio crate because it reaches both controllers: gpu-nvme (which holds the
//! benchmark itself, `gpu_nvme::bench`) cannot depend on the emulator built on top of it.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Parser;
use common::bench::{BenchRecord, render_table};
use gpu_nvme::bench::{self, BenchArgs, BenchError};
use gpu_nvme::controller::{Controller, FileBackend};
use gpu_nvme::cuda::Gpu;
use swarmio::bench::{Emulation, run_one};

/// Block I/O benchmark over gpu-nvme queue pairs against a file, a block device or the SwarmIO
/// emulator.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The controller: `file:PATH` (a file or block device as the namespace) or `swarmio` (the
    /// emulator, set up by the emulation flags).
    #[arg(long, default_value = "file:/dev/shm/nvme-bench.img")]
    controller: String,
    #[command(flatten)]
    emulation: Emulation,
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
    if args.controller == "swarmio" {
        let record = run_one(&args.emulation, &args.bench)?;
        return report(&args, record, &[]);
    }
    let path = PathBuf::from(
        args.controller
            .strip_prefix("file:")
            .context("--controller must be file:PATH or swarmio")?,
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
        bench::file_controller(&path, backend, b, gpu, queues)
    };
    let (mut record, notes) = bench::run(&args.bench, "gpu-nvme", &factory)?;
    record
        .parameters
        .insert("backend".into(), args.backend.clone().into());
    report(&args, record, &notes)
}

/// Prints the record (a table and the notes, or a JSON line) and fails on failed commands.
fn report(args: &Args, mut record: BenchRecord, notes: &[String]) -> Result<()> {
    record
        .parameters
        .insert("controller".into(), args.controller.clone().into());
    if args.bench.json {
        println!("{}", record.to_json_line());
    } else {
        println!("{}", render_table(std::slice::from_ref(&record)));
        for n in notes {
            println!("note: {n}");
        }
    }
    let (errors, mismatches) = bench::failures(&record);
    if errors > 0 || mismatches > 0 {
        bail!("{errors} commands failed and {mismatches} reads did not match the pattern");
    }
    Ok(())
}
