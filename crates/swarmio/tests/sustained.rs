//! An end-to-end CPU-initiated run through gpu-nvme's benchmark: the rate the emulator
//! sustains follows a low target (it runs alone under nextest: see .config/nextest.toml).

use std::sync::Arc;

use clap::Parser;
use gpu_nvme::bench::{self, BenchArgs, BenchError};
use gpu_nvme::controller::Controller;
use gpu_nvme::cuda::Gpu;
use swarmio::timing_model::{Targets, TimingConfig};
use swarmio::{SwarmConfig, SwarmIo};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

#[test]
fn cpu_initiated_load_sustains_a_low_target_within_tolerance() {
    let target_iops = 20_000.0;
    let targets = Targets {
        read_miops: target_iops / 1e6,
        read_latency_us: 100.0,
        write_miops: target_iops / 1e6,
        write_latency_us: 100.0,
        block_bytes: 4096,
        lba_bytes: 4096,
        num_sched_insts: 1,
    };
    let timing = TimingConfig::from_targets(&targets).unwrap();
    let args = Cli::parse_from([
        "t",
        "--threads",
        "1",
        "--queues",
        "1",
        "--workers",
        "1",
        "--lba-size",
        "4096",
        "--block-size",
        "4096",
        "--inflight",
        "128",
        "--duration",
        "2",
    ])
    .bench;
    let factory = |b: &BenchArgs,
                   gpu: Option<&Gpu>,
                   queues: u16|
     -> Result<Arc<dyn Controller>, BenchError> {
        let mut c = SwarmConfig::new(64 << 20, b.lba_size, timing);
        c.service_units = 1;
        c.workers_per_unit = 1;
        c.max_io_queues = queues;
        c.gpu = gpu.cloned();
        Ok(SwarmIo::new(c)?)
    };
    let (record, _) = bench::run(&args, "swarmio", &factory).unwrap();
    let fraction = record.iops / target_iops;
    println!(
        "sustained {:.0} IOPS = {:.1}% of {target_iops}",
        record.iops,
        fraction * 100.0
    );
    assert!(fraction <= 1.03, "the model must cap the rate: {fraction}");
    assert!(fraction >= 0.85, "too far below the target: {fraction}");
}
