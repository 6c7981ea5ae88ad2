//! `cargo xtask bench`: runs systems' benchmark programs, keeps their JSON-lines records under
//! `target/bench/<system>.jsonl`, prints them side by side and plots them into
//! `target/bench/compare.svg` (ARCHITECTURE.md, "Conventions").

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, Result, bail};
use common::bench::{BenchRecord, Engine, render_table, si_suffix};
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::cargo;

/// How to run one system's benchmark program.
///
/// Contract of every benchmark program: with `args` it prints one [`BenchRecord`] JSON line
/// per result on stdout (other stdout lines are echoed, not parsed) and needs nothing set up
/// beforehand; `quick_args` shorten it to seconds; `cpu_args`/`gpu_args` pick the engine.
#[derive(Debug)]
pub struct BenchSystem {
    /// Name on the command line and of `target/bench/<name>.jsonl`.
    pub name: &'static str,
    /// Workspace package holding the program.
    pub package: &'static str,
    /// Binary target of the program.
    pub bin: &'static str,
    /// Arguments of every run (they must include the one that selects JSON output).
    pub args: &'static [&'static str],
    /// Further arguments of a short run (`--quick`, the demo).
    pub quick_args: &'static [&'static str],
    /// Further arguments that make it run on the CPU engine.
    pub cpu_args: &'static [&'static str],
    /// Further arguments that make it run on the GPU engine.
    pub gpu_args: &'static [&'static str],
    /// Other binaries of the package that the program starts (built before it runs).
    pub helpers: &'static [&'static str],
}

impl BenchSystem {
    /// The arguments that select `engine`.
    pub fn engine_args(&self, engine: Engine) -> &'static [&'static str] {
        match engine {
            Engine::Cpu => self.cpu_args,
            Engine::Gpu => self.gpu_args,
        }
    }
}

/// Every system with a benchmark program; adding one is adding an entry.
pub const SYSTEMS: &[BenchSystem] = &[
    BenchSystem {
        name: "gpu-nvme",
        // The benchmark is gpu-nvme's; its program lives in swarmio, which reaches both controllers.
        package: "swarmio",
        bin: "nvme-bench",
        // The file controller on its default namespace file, created (256 MiB) by the run itself.
        args: &["--json", "--create-mib", "256"],
        quick_args: &["--duration", "2"],
        cpu_args: &["--initiator", "cpu"],
        // GPU submitters come in whole warps.
        gpu_args: &["--initiator", "gpu", "--threads", "1024"],
        helpers: &[],
    },
    BenchSystem {
        name: "swarmio",
        package: "swarmio",
        bin: "swarmio",
        // The emulator on a sparse RAM namespace; the target is what a 2-core machine sustains on
        // the CPU (measured: 99% of 50 K IOPS), and the paper's default (40 MIOPS of 512 B reads) on a GPU.
        args: &["bench", "--json"],
        quick_args: &["--duration", "2"],
        // One submitter, one dispatcher and one worker: more spinning threads than cores
        // starve each other on a 2-core machine.
        cpu_args: &[
            "--initiator",
            "cpu",
            "--threads",
            "1",
            "--inflight",
            "128",
            "--units",
            "1",
            "--workers",
            "1",
            "--target-miops",
            "0.05",
            "--instances",
            "2",
        ],
        gpu_args: &[
            "--initiator",
            "gpu",
            "--threads",
            "65536",
            "--queues",
            "256",
            "--block-size",
            "512",
            "--target-miops",
            "40",
            "--units",
            "2",
            "--workers",
            "6",
        ],
        helpers: &[],
    },
    BenchSystem {
        name: "gofs",
        package: "gofs",
        bin: "gofs",
        // The host engine over the file controller on a tmpfs image that the run makes itself,
        // with the raw controller measured in the same run. GoFS has no GPU engine yet: both
        // engine choices run the host engine (its records say `cpu`). The full run's files
        // (a 128 MiB file and twice 10,000 of 16 KiB) need the default 1 GiB image: in 512 MiB
        // it ran out of space; the quick run's fit in 512 MiB.
        args: &["bench", "--json"],
        quick_args: &[
            "--image-mib",
            "512",
            "--files",
            "1000",
            "--file-mib",
            "32",
            "--random-ops",
            "5000",
            "--seconds",
            "1",
        ],
        cpu_args: &[],
        gpu_args: &[],
        helpers: &[],
    },
    BenchSystem {
        name: "peakfs",
        package: "peakfs",
        bin: "peakfs",
        // The whole mdtest/IOR bench against the RPC echo ceiling of the same run, on a cluster
        // of 2 servers that the run starts on loopback and stops (data files on /dev/shm,
        // which the mmap backend reaches by memory copies). PeakFS runs on CPUs only: both
        // engine choices run the same bench.
        args: &[
            "bench",
            "--json",
            "--local-cluster",
            "2",
            "--procs",
            "4",
            "--local-backend",
            "mmap",
        ],
        quick_args: &[
            "--files",
            "1000",
            "--echo-ops",
            "5000",
            "--ior-mib",
            "16",
            "--local-data-mib",
            "256",
        ],
        cpu_args: &[],
        gpu_args: &[],
        helpers: &["peakfs-master", "peakfs-server"],
    },
];

/// Where records and the plot go, below the target directory.
const OUTPUT_DIR: &str = "bench";
/// Size of the comparison plot in pixels.
const PLOT_SIZE: (u32, u32) = (1280, 560);

/// Arguments of `cargo xtask bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Systems to run (see --list).
    systems: Vec<String>,
    /// Run every registered system.
    #[arg(long, conflicts_with = "systems")]
    all: bool,
    /// Short runs, as in the demo.
    #[arg(long)]
    quick: bool,
    /// Engine to ask for (default: the program's own choice).
    #[arg(long, value_enum)]
    engine: Option<EngineArg>,
    /// Also compare the records of these JSON-lines files (e.g. results from the GPU machine).
    #[arg(long = "input", value_name = "FILE")]
    inputs: Vec<PathBuf>,
    /// List the registered systems and exit.
    #[arg(long)]
    list: bool,
}

/// `--engine` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum EngineArg {
    Cpu,
    Gpu,
}

impl From<EngineArg> for Engine {
    fn from(engine: EngineArg) -> Self {
        match engine {
            EngineArg::Cpu => Engine::Cpu,
            EngineArg::Gpu => Engine::Gpu,
        }
    }
}

impl BenchArgs {
    /// The demo's benchmark run: every system, short, on the GPU when this machine has one.
    pub fn demo() -> Self {
        Self {
            systems: Vec::new(),
            all: true,
            quick: true,
            engine: Some(if gpu_present() {
                EngineArg::Gpu
            } else {
                EngineArg::Cpu
            }),
            inputs: Vec::new(),
            list: false,
        }
    }
}

/// Whether an NVIDIA driver is loaded on this machine.
fn gpu_present() -> bool {
    Path::new("/proc/driver/nvidia/version").exists() || Path::new("/dev/nvidiactl").exists()
}

/// Runs the selected benchmarks, then prints and plots every record gathered.
pub fn run(args: &BenchArgs) -> Result<()> {
    if args.list {
        for system in SYSTEMS {
            println!(
                "{}: cargo run --release -p {} --bin {} -- {}\n  quick: {}\n  cpu: {}\n  gpu: {}",
                system.name,
                system.package,
                system.bin,
                system.args.join(" "),
                system.quick_args.join(" "),
                system.cpu_args.join(" "),
                system.gpu_args.join(" "),
            );
        }
        return Ok(());
    }
    let selected = select(args)?;
    let workspace = cargo::Workspace::load()?;
    let output_dir = workspace.target_dir.join(OUTPUT_DIR);
    std::fs::create_dir_all(&output_dir)
        .with_context(|| format!("cannot create {}", output_dir.display()))?;

    let mut records = Vec::new();
    for input in &args.inputs {
        let text = std::fs::read_to_string(input)
            .with_context(|| format!("cannot read {}", input.display()))?;
        records.extend(records_in(&text, &input.display().to_string())?);
    }
    let mut failed = Vec::new();
    for system in selected {
        let has_program = workspace.package(system.package).is_some_and(|package| {
            package
                .targets
                .iter()
                .any(|target| target.name == system.bin && target.is_binary())
        });
        if !has_program {
            println!(
                "{}: not built yet (no binary `{}` in package `{}`); skipped",
                system.name, system.bin, system.package
            );
            continue;
        }
        match run_system(system, args) {
            Ok(system_records) => {
                let path = output_dir.join(format!("{}.jsonl", system.name));
                write_json_lines(&path, &system_records)?;
                println!(
                    "{}: {} record(s) in {}",
                    system.name,
                    system_records.len(),
                    path.display()
                );
                records.extend(system_records);
            }
            Err(error) => {
                eprintln!("{}: {error:#}", system.name);
                failed.push(system.name);
            }
        }
    }

    print!("{}", render_table(&records));
    if !records.is_empty() {
        let plot_path = output_dir.join("compare.svg");
        std::fs::write(&plot_path, comparison_svg(&records)?)
            .with_context(|| format!("cannot write {}", plot_path.display()))?;
        println!("plot: {}", plot_path.display());
    }
    if !failed.is_empty() {
        bail!("benchmarks failed: {}", failed.join(", "));
    }
    Ok(())
}

/// The registered systems the arguments name.
fn select(args: &BenchArgs) -> Result<Vec<&'static BenchSystem>> {
    if args.all {
        return Ok(SYSTEMS.iter().collect());
    }
    if args.systems.is_empty() && args.inputs.is_empty() {
        bail!("name systems to run, --all, or --input files (see --list)");
    }
    args.systems
        .iter()
        .map(|name| {
            SYSTEMS
                .iter()
                .find(|system| system.name == name)
                .with_context(|| {
                    let known: Vec<&str> = SYSTEMS.iter().map(|system| system.name).collect();
                    format!("unknown system `{name}`; registered: {}", known.join(", "))
                })
        })
        .collect()
}

/// Runs one benchmark program and parses the records it prints.
fn run_system(system: &BenchSystem, args: &BenchArgs) -> Result<Vec<BenchRecord>> {
    if !system.helpers.is_empty() {
        let mut build = cargo::command();
        build.args(["build", "--release", "-p", system.package]);
        for helper in system.helpers {
            build.args(["--bin", helper]);
        }
        cargo::run(&mut build)?;
    }
    let mut command = cargo::command();
    command
        .args([
            "run",
            "--release",
            "-p",
            system.package,
            "--bin",
            system.bin,
            "--",
        ])
        .args(system.args);
    if args.quick {
        command.args(system.quick_args);
    }
    if let Some(engine) = args.engine {
        command.args(system.engine_args(engine.into()));
    }
    let line = cargo::describe(&command);
    eprintln!("$ {line}");
    let output = command
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot start `{line}`"))?;
    if !output.status.success() {
        bail!("`{line}` failed ({})", output.status);
    }
    records_in(
        &String::from_utf8_lossy(&output.stdout),
        &format!("`{line}`"),
    )
}

/// The records in a benchmark program's output or a JSON-lines file: lines starting with `{`
/// are records, other lines are echoed. `origin` names the text in errors.
fn records_in(text: &str, origin: &str) -> Result<Vec<BenchRecord>> {
    let mut records = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with('{') {
            let record = BenchRecord::from_json(line)
                .with_context(|| format!("line {} of {origin}", index + 1))?;
            records.push(record);
        } else if !line.trim().is_empty() {
            println!("{line}");
        }
    }
    if records.is_empty() {
        bail!("{origin} holds no benchmark records");
    }
    Ok(records)
}

fn write_json_lines(path: &Path, records: &[BenchRecord]) -> Result<()> {
    let text: String = records
        .iter()
        .map(|record| record.to_json_line() + "\n")
        .collect();
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Bar charts of IOPS and of GB/s, one bar per record, coloured by engine.
fn comparison_svg(records: &[BenchRecord]) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, PLOT_SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let panels = root.split_evenly((1, 2));
        bar_chart(&panels[0], "IOPS", records, |record| record.iops)?;
        bar_chart(&panels[1], "GB/s (1e9 bytes)", records, |record| {
            record.gbps
        })?;
        root.present()?;
    }
    Ok(svg)
}

/// One bar chart of `metric` over `records` into `area`.
fn bar_chart(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    records: &[BenchRecord],
    metric: fn(&BenchRecord) -> f64,
) -> Result<()> {
    let values: Vec<f64> = records.iter().map(metric).collect();
    let highest = values.iter().copied().fold(0.0, f64::max);
    let top = if highest > 0.0 { highest * 1.15 } else { 1.0 };
    let labels: Vec<String> = records
        .iter()
        .map(|record| {
            format!(
                "{} {} ({})",
                record.system,
                record.workload,
                record.engine.as_str()
            )
        })
        .collect();
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(70)
        // An integer range is inclusive on the axis: 0..last gives one segment per record.
        .build_cartesian_2d(
            (0..records.len().saturating_sub(1)).into_segmented(),
            0.0..top,
        )?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(WHITE)
        .x_labels(records.len())
        .x_label_formatter(&|position| match position {
            SegmentValue::CenterOf(index) => labels.get(*index).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_label_formatter(&|value| si_suffix(*value))
        .draw()?;
    chart.draw_series(
        Histogram::vertical(&chart)
            .margin(12)
            .style_func(|index, _| {
                engine_color(
                    records[match index {
                        SegmentValue::Exact(i) | SegmentValue::CenterOf(i) => *i,
                        SegmentValue::Last => records.len() - 1,
                    }]
                    .engine,
                )
                .filled()
            })
            .data(
                values
                    .iter()
                    .enumerate()
                    .map(|(index, value)| (index, *value)),
            ),
    )?;
    chart.draw_series(values.iter().enumerate().map(|(index, value)| {
        Text::new(
            si_suffix(*value),
            (SegmentValue::CenterOf(index), *value + top * 0.01),
            TextStyle::from(("sans-serif", 14).into_font())
                .pos(Pos::new(HPos::Center, VPos::Bottom)),
        )
    }))?;
    Ok(())
}

fn engine_color(engine: Engine) -> RGBColor {
    match engine {
        Engine::Cpu => RGBColor(0x1f, 0x77, 0xb4),
        Engine::Gpu => RGBColor(0x2c, 0xa0, 0x2c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn record(system: &str, engine: Engine, ops: u64) -> BenchRecord {
        BenchRecord::new(system, "randread-4k", engine)
            .ops(ops)
            .bytes(ops * 4096)
            .duration(Duration::from_secs(1))
            .finish()
            .unwrap()
    }

    #[test]
    fn plot_has_a_labelled_bar_per_record_in_each_panel() {
        let records = [
            record("gpu-nvme", Engine::Gpu, 2_345_678),
            record("swarmio", Engine::Cpu, 876_543),
        ];
        let svg = comparison_svg(&records).unwrap();
        let texts = |wanted: &str| {
            let contents = svg.split("<text").skip(1).filter_map(|element| {
                let (_, rest) = element.split_once('>')?;
                Some(rest.split_once("</text>")?.0.trim())
            });
            contents.filter(|content| *content == wanted).count()
        };
        // Axis labels appear once per panel; bar values once each.
        assert_eq!(texts("gpu-nvme randread-4k (gpu)"), 2);
        assert_eq!(texts("swarmio randread-4k (cpu)"), 2);
        assert_eq!(texts("2.35M"), 1);
        assert_eq!(texts("877K"), 1);
        assert_eq!(texts("9.61"), 1);
        assert_eq!(texts("3.59"), 1);
        assert_eq!(svg.matches(r##"fill="#2CA02C""##).count(), 2);
        assert_eq!(svg.matches(r##"fill="#1F77B4""##).count(), 2);
    }

    #[test]
    fn every_registered_system_has_a_unique_name_and_json_output() {
        for (index, system) in SYSTEMS.iter().enumerate() {
            assert!(
                SYSTEMS[..index]
                    .iter()
                    .all(|other| other.name != system.name)
            );
            assert!(system.args.contains(&"--json"), "{}", system.name);
        }
    }

    #[test]
    fn unknown_systems_are_refused() {
        let args = BenchArgs {
            systems: vec!["nope".to_owned()],
            ..BenchArgs::demo()
        };
        let args = BenchArgs { all: false, ..args };
        assert!(
            select(&args)
                .unwrap_err()
                .to_string()
                .contains("unknown system `nope`")
        );
        let args = BenchArgs {
            systems: Vec::new(),
            ..args
        };
        assert!(select(&args).is_err());
    }
}
