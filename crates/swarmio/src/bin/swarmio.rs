//! `swarmio`: the SwarmIO NVMe SSD emulator's command line.
//!
//! - `swarmio presets`: the SSD presets and their timing.
//! - `swarmio bench ...`: CPU- or GPU-initiated load through gpu-nvme against the emulator
//!   (nvme-bench's benchmark with `--controller swarmio`).
//! - `swarmio validate ...`: the paper's sweeps, as JSON lines and an SVG plot.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use common::bench::BenchRecord;
use gpu_nvme::bench::{self, BenchArgs, GpuData};
use swarmio::bench::{Emulation, run_one};
use swarmio::presets;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "SwarmIO: an NVMe SSD emulator fast enough for GPU-initiated I/O"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the SSD presets.
    Presets,
    /// Drive load against the emulator and report what it sustains.
    Bench(BenchCommand),
    /// Run the paper's validation sweeps; write JSON lines and an SVG plot.
    Validate(ValidateCommand),
}

#[derive(Debug, Args)]
struct BenchCommand {
    #[command(flatten)]
    emulation: Emulation,
    #[command(flatten)]
    bench: BenchArgs,
}

#[derive(Debug, Args)]
struct ValidateCommand {
    #[command(flatten)]
    emulation: Emulation,
    #[command(flatten)]
    bench: BenchArgs,
    /// Target sweep, MIOPS.
    #[arg(long, value_delimiter = ',', default_value = "5,10,20,30,40")]
    targets: Vec<f64>,
    /// Queue-count sweep.
    #[arg(long, value_delimiter = ',', default_value = "16,64,256,1024,2048")]
    queue_counts: Vec<u16>,
    /// Block-size sweep, bytes.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "512,1024,2048,4096,8192,16384"
    )]
    block_sizes: Vec<u32>,
    /// Where the JSON lines and the plot go.
    #[arg(long, default_value = "target/swarmio-validate")]
    out: PathBuf,
}

fn main() -> Result<()> {
    bench::init_logging();
    match Cli::parse().command {
        Command::Presets => {
            for p in presets::presets() {
                println!(
                    "{:<22} read {:>6.2} MIOPS {:>6.1} us, write {:>6.2} MIOPS {:>6.1} us, {} instances  {}",
                    p.name,
                    p.read_miops,
                    p.read_latency_us,
                    p.write_miops,
                    p.write_latency_us,
                    p.num_sched_insts,
                    p.description
                );
            }
            Ok(())
        }
        Command::Bench(cmd) => {
            let record = run_one(&cmd.emulation, &cmd.bench)?;
            print_records(&cmd.bench, std::slice::from_ref(&record));
            check(&record)
        }
        Command::Validate(cmd) => validate(&cmd),
    }
}

fn print_records(args: &BenchArgs, records: &[BenchRecord]) {
    if common::bench::print_records(records, args.json) {
        for r in records {
            let f = r
                .extra
                .get("fraction_of_target")
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(0.0);
            println!("{}: sustained {:.1}% of the target", r.workload, f * 100.0);
        }
    }
}

fn check(record: &BenchRecord) -> Result<()> {
    let (errors, mismatches) = bench::failures(record);
    if errors > 0 || mismatches > 0 {
        bail!("{errors} commands failed and {mismatches} reads did not match the pattern");
    }
    Ok(())
}

/// The paper's sweeps (§V): sustained IOPS against targets, latency against load, queue counts,
/// block sizes, baseline against SwarmIO, and the ablation of coalescing, aggregation and batched
/// copies.
fn validate(cmd: &ValidateCommand) -> Result<()> {
    std::fs::create_dir_all(&cmd.out).with_context(|| format!("creating {}", cmd.out.display()))?;
    let mut records: Vec<(String, BenchRecord)> = Vec::new();
    let mut run = |sweep: &str, emu: &Emulation, args: &BenchArgs| -> Result<()> {
        let r = run_one(emu, args)?;
        let f = r
            .extra
            .get("fraction_of_target")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0);
        let p50 = r.latency_us.as_ref().map_or(0.0, |l| l.p50);
        eprintln!(
            "{sweep:<10} {:>10.3} MIOPS ({:>5.1}% of target) p50 {p50:>8.1} us  {}",
            r.iops / 1e6,
            f * 100.0,
            r.command
        );
        records.push((sweep.to_string(), r));
        Ok(())
    };
    for &t in &cmd.targets {
        let emu = Emulation {
            target_miops: Some(t),
            target_iops: None,
            ..cmd.emulation.clone()
        };
        run("target", &emu, &cmd.bench)?;
    }
    for &q in &cmd.queue_counts {
        let args = BenchArgs {
            queues: q,
            ..cmd.bench.clone()
        };
        run("queues", &cmd.emulation, &args)?;
    }
    for &b in &cmd.block_sizes {
        let args = BenchArgs {
            block_size: b,
            ..cmd.bench.clone()
        };
        run("block", &cmd.emulation, &args)?;
    }
    let base = Emulation {
        baseline: true,
        ..cmd.emulation.clone()
    };
    // NVMeVirt's data path: the controller itself copies each request into GPU memory.
    let base_args = BenchArgs {
        gpu_data: GpuData::Direct,
        ..cmd.bench.clone()
    };
    run("baseline", &base, &base_args)?;
    run("swarmio", &cmd.emulation, &cmd.bench)?;
    let no_coalesce = Emulation {
        no_coalesce: true,
        ..cmd.emulation.clone()
    };
    run("ablation", &no_coalesce, &cmd.bench)?;
    let per_request = Emulation {
        per_request: true,
        ..cmd.emulation.clone()
    };
    run("ablation", &per_request, &cmd.bench)?;
    let one_copy_at_a_time = Emulation {
        no_batched_copies: true,
        ..cmd.emulation.clone()
    };
    run("ablation", &one_copy_at_a_time, &cmd.bench)?;

    let jsonl = cmd.out.join("validate.jsonl");
    let mut text = String::new();
    for (sweep, r) in &records {
        let mut r = r.clone();
        r.parameters.insert("sweep".into(), sweep.clone().into());
        text.push_str(&r.to_json_line());
        text.push('\n');
    }
    std::fs::write(&jsonl, text)?;
    let svg = cmd.out.join("validate.svg");
    std::fs::write(&svg, plot(&records)?)?;
    let all: Vec<BenchRecord> = records.iter().map(|(_, r)| r.clone()).collect();
    print_records(&cmd.bench, &all);
    let speedup = {
        let get = |s: &str| {
            records
                .iter()
                .find(|(k, _)| k == s)
                .map_or(0.0, |(_, r)| r.iops)
        };
        get("swarmio") / get("baseline").max(1.0)
    };
    println!(
        "SwarmIO mode over baseline: {speedup:.1}x; wrote {} and {}",
        jsonl.display(),
        svg.display()
    );
    Ok(())
}

/// Sustained against target IOPS (with the ideal line), and p50 latency against load.
fn plot(records: &[(String, BenchRecord)]) -> Result<String> {
    use plotters::prelude::*;
    let points: Vec<(f64, f64, f64)> = records
        .iter()
        .filter(|(s, _)| s == "target")
        .map(|(_, r)| {
            let target = r
                .parameters
                .get("target_iops")
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(0.0)
                / 1e6;
            (
                target,
                r.iops / 1e6,
                r.latency_us.as_ref().map_or(0.0, |l| l.p50),
            )
        })
        .collect();
    let max_x = points.iter().map(|p| p.0).fold(1.0, f64::max) * 1.1;
    let max_lat = points.iter().map(|p| p.2).fold(1.0, f64::max) * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 420)).into_drawing_area();
        root.fill(&WHITE)?;
        let (left, right) = root.split_horizontally(500);
        let mut chart = ChartBuilder::on(&left)
            .caption("sustained vs target (MIOPS)", ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(45)
            .build_cartesian_2d(0.0..max_x, 0.0..max_x)?;
        chart
            .configure_mesh()
            .x_desc("target")
            .y_desc("sustained")
            .draw()?;
        chart.draw_series(LineSeries::new(
            [(0.0, 0.0), (max_x, max_x)],
            &BLACK.mix(0.3),
        ))?;
        chart.draw_series(LineSeries::new(points.iter().map(|p| (p.0, p.1)), &BLUE))?;
        chart.draw_series(
            points
                .iter()
                .map(|p| Circle::new((p.0, p.1), 4, BLUE.filled())),
        )?;
        let mut lat = ChartBuilder::on(&right)
            .caption("p50 latency vs target load (us)", ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..max_x, 0.0..max_lat)?;
        lat.configure_mesh()
            .x_desc("target MIOPS")
            .y_desc("p50 us")
            .draw()?;
        lat.draw_series(LineSeries::new(points.iter().map(|p| (p.0, p.2)), &RED))?;
        root.present()?;
    }
    Ok(svg)
}
