//! The emulator as the controller of gpu-nvme's block benchmark: the flags that describe the
//! emulated SSD ([`Emulation`]) and one run against it ([`run_one`]). `swarmio bench`,
//! `swarmio validate` and `nvme-bench --controller swarmio` share them.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use common::bench::BenchRecord;
use gpu_nvme::bench::{self as block_bench, BenchArgs, BenchError};
use gpu_nvme::controller::Controller;
use gpu_nvme::cuda::Gpu;

use crate::presets::{self, Preset};
use crate::timing_model::{IoDirection, Targets, TimingConfig, UpdateMode};
use crate::{Backing, SwarmConfig, SwarmIo};

/// The emulated SSD.
#[derive(Debug, Clone, Args)]
pub struct Emulation {
    /// Start from a preset (`swarmio presets`); the flags below override it.
    #[arg(long)]
    pub preset: Option<String>,
    /// Target read IOPS (e.g. 2000000); overrides the preset.
    #[arg(long, conflicts_with = "target_miops")]
    pub target_iops: Option<f64>,
    /// Target read IOPS in millions.
    #[arg(long)]
    pub target_miops: Option<f64>,
    /// Target read latency at low load, in microseconds.
    #[arg(long)]
    pub latency_us: Option<f64>,
    /// Target write IOPS in millions (default: the read target).
    #[arg(long)]
    pub write_miops: Option<f64>,
    /// Target write latency in microseconds (default: the read latency).
    #[arg(long)]
    pub write_latency_us: Option<f64>,
    /// Scheduling instances of the timing model.
    #[arg(long)]
    pub instances: Option<u32>,
    /// Namespace size in MiB (RAM, sparse).
    #[arg(long, default_value_t = 1024)]
    pub capacity_mib: u64,
    /// A file or block device as the namespace instead of RAM.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Back the RAM namespace with transparent huge pages (faster random reads; a sparse write
    /// may make a whole 2 MiB region resident).
    #[arg(long, conflicts_with = "file")]
    pub huge_pages: bool,
    /// Fill the namespace with the check pattern first (needed by --verify on reads).
    #[arg(long)]
    pub fill: bool,
    /// Service units (dispatchers); the workers of each are `--workers`.
    #[arg(long, default_value_t = 2)]
    pub units: usize,
    /// NVMeVirt-like baseline: one dispatcher, per-request updates, no coalescing, one copy
    /// into GPU memory at a time.
    #[arg(long)]
    pub baseline: bool,
    /// Send and wait for each request's copy into GPU memory alone instead of one batch per
    /// worker batch (ablation).
    #[arg(long)]
    pub no_batched_copies: bool,
    /// Requests each worker pops ahead, with their data prefetched into the cache (0: none).
    #[arg(long, default_value_t = 8)]
    pub prefetch_ahead: usize,
    /// Pin each dispatcher and worker thread to a core of its own.
    #[arg(long)]
    pub pin_threads: bool,
    /// Turn coalesced fetching off (ablation).
    #[arg(long)]
    pub no_coalesce: bool,
    /// Per-request timing updates instead of aggregated ones (ablation).
    #[arg(long)]
    pub per_request: bool,
}

/// Timing targets from the preset and the flags.
fn timing(emu: &Emulation, block_bytes: u32, lba: u32) -> Result<TimingConfig, BenchError> {
    let invalid = |e: &dyn std::fmt::Display| BenchError::Invalid(e.to_string());
    let base: &Preset = presets::preset(emu.preset.as_deref().unwrap_or("swarmio-default"))
        .map_err(|e| invalid(&e))?;
    let mut t: Targets = base.targets(block_bytes);
    t.lba_bytes = lba;
    if let Some(iops) = emu.target_iops {
        t.read_miops = iops / 1e6;
        t.write_miops = iops / 1e6;
    }
    if let Some(m) = emu.target_miops {
        t.read_miops = m;
        t.write_miops = m;
    }
    if let Some(l) = emu.latency_us {
        t.read_latency_us = l;
        t.write_latency_us = l;
    }
    if let Some(m) = emu.write_miops {
        t.write_miops = m;
    }
    if let Some(l) = emu.write_latency_us {
        t.write_latency_us = l;
    }
    if let Some(n) = emu.instances {
        t.num_sched_insts = n;
    }
    TimingConfig::from_targets(&t).map_err(|e| invalid(&e))
}

/// Runs gpu-nvme's block benchmark against a fresh emulator built from `emu`, and adds the
/// emulation's settings and the fraction of the target sustained to the record.
pub fn run_one(emu: &Emulation, args: &BenchArgs) -> Result<BenchRecord, BenchError> {
    let timing = timing(emu, args.block_size, args.lba_size)?;
    let capacity = emu.capacity_mib << 20;
    let fill = emu.fill;
    let factory = |b: &BenchArgs,
                   gpu: Option<&Gpu>,
                   queues: u16|
     -> Result<Arc<dyn Controller>, BenchError> {
        let mut c = SwarmConfig::new(capacity, b.lba_size, timing);
        if let Some(f) = &emu.file {
            c.backing = Backing::File(f.clone());
        } else if emu.huge_pages {
            c.backing = Backing::RamHugePages;
        }
        c.service_units = emu.units;
        c.workers_per_unit = b.workers;
        c.max_io_queues = queues;
        c.gpu = gpu.cloned();
        c.null_data = b.null;
        if emu.no_coalesce {
            c.max_fetch = 1;
        }
        if emu.per_request {
            c.update_mode = UpdateMode::PerRequest;
        }
        c.batched_copies = !emu.no_batched_copies;
        c.pin_threads = emu.pin_threads;
        c.prefetch_ahead = emu.prefetch_ahead;
        if emu.baseline {
            c = c.baseline();
        }
        let ctrl = SwarmIo::new(c)?;
        if fill {
            let chunk = 4 << 20;
            let mut buf = vec![0u8; chunk];
            let mut off = 0u64;
            while off < capacity {
                let n = chunk.min((capacity - off) as usize);
                block_bench::fill_pattern(&mut buf[..n], off);
                ctrl.store()
                    .write(off, &buf[..n])
                    .map_err(|e| BenchError::Invalid(e.to_string()))?;
                off += n as u64;
            }
        }
        Ok(ctrl)
    };
    let (mut record, _notes) = block_bench::run(args, "swarmio", &factory)?;
    let timing_desc = format!(
        "read {:.3} MIOPS {:.1} us",
        timing.max_iops(IoDirection::Read) / 1e6,
        timing.params(IoDirection::Read).unloaded_latency_ps() as f64 / 1e6
    );
    let mode = if emu.baseline {
        "baseline"
    } else if emu.no_coalesce || emu.per_request || emu.no_batched_copies {
        "ablation"
    } else {
        "swarmio"
    };
    for (k, v) in [
        ("mode", serde_json::Value::from(mode)),
        ("target", timing_desc.into()),
        ("target_iops", timing.max_iops(IoDirection::Read).into()),
        (
            "target_latency_us",
            (timing.params(IoDirection::Read).unloaded_latency_ps() as f64 / 1e6).into(),
        ),
        ("units", emu.units.into()),
        ("coalesce", (!emu.no_coalesce && !emu.baseline).into()),
        ("aggregated", (!emu.per_request && !emu.baseline).into()),
        (
            "batched_copies",
            (!emu.no_batched_copies && !emu.baseline).into(),
        ),
        ("pinned", emu.pin_threads.into()),
        ("prefetch_ahead", emu.prefetch_ahead.into()),
        (
            "preset",
            emu.preset
                .clone()
                .unwrap_or_else(|| "swarmio-default".into())
                .into(),
        ),
    ] {
        record.parameters.insert(k.into(), v);
    }
    let achieved = record.iops / timing.max_iops(IoDirection::Read);
    record
        .extra
        .insert("fraction_of_target".into(), achieved.into());
    Ok(record)
}
