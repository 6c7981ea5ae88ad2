//! `cargo xtask`: the project's automation (ARCHITECTURE.md, "Conventions"): the CPU test suite,
//! everything CI checks, the NVRTC compile check of the CUDA sources, benchmarks side by side,
//! the demo, and the bundle of binaries for the GPU machine.

mod bench;
mod bundle;
mod cargo;
mod cluster;
mod cuda_check;
mod deps;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

/// Project automation for the GPU-storage workspace.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", version, about)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Install the tools the tests need, then run the CPU test suite (nextest and doctests).
    Test,
    /// Everything CI checks: fmt, clippy, the tests, the loom tests and cuda-check.
    Ci,
    /// Compile every `.cu`/`.cuh` under `crates/*/cuda/` to PTX with NVRTC.
    CudaCheck,
    /// Run systems' benchmarks, then print them side by side and plot them.
    Bench(bench::BenchArgs),
    /// The PeakFS cluster recipe: a master, servers and clients on localhost or in network
    /// namespaces (`ci/peakfs-cluster.sh`), running a command or the default benchmark.
    Cluster(cluster::ClusterArgs),
    /// The project's demo: every benchmark, short, on the default (emulated) setup.
    Demo,
    /// Build release binaries and GPU test binaries into `gpu-bundle/` with a `run.sh`.
    GpuBundle,
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Test => test(),
        Task::Ci => ci(),
        Task::CudaCheck => cuda_check::run(),
        Task::Bench(args) => bench::run(&args),
        Task::Cluster(args) => cluster::run(&args),
        Task::Demo => demo(),
        Task::GpuBundle => bundle::run(),
    }
}

/// The CPU test suite: nextest runs every test target, cargo test the doctests it cannot run.
/// NVRTC (from the wheel cache when the system has none) is put within the tests' reach, and
/// `NVRTC_TESTS=1` makes the tests that compile CUDA sources fail instead of skipping.
fn test() -> Result<()> {
    deps::ensure_test_tools()?;
    let mut nextest = cargo::command();
    nextest.args([
        "nextest",
        "run",
        "--workspace",
        "--all-targets",
        "--no-tests=warn",
    ]);
    match cuda_check::ensure_nvrtc() {
        Ok(dir) => {
            if let Some(dir) = dir {
                nextest.env("LD_LIBRARY_PATH", cuda_check::library_path_with(&dir)?);
            }
            nextest.env("NVRTC_TESTS", "1");
        }
        Err(e) => eprintln!("xtask: NVRTC is not available ({e:#}); tests that need it skip"),
    }
    cargo::run(&mut nextest)?;
    cargo::run(cargo::command().args(["test", "--workspace", "--doc"]))?;
    rdma_unit_tests()?;
    posix_suites()?;
    cluster_in_namespaces()
}

/// The unit tests of fabric's RDMA transport: its parts that need no RDMA device (none exists
/// on these machines), built with the `rdma` feature, which the workspace run leaves off.
fn rdma_unit_tests() -> Result<()> {
    if !rdma_builds() {
        return Ok(());
    }
    cargo::run(cargo::command().args([
        "nextest",
        "run",
        "-p",
        "fabric",
        "--features",
        "rdma",
        "--lib",
    ]))
}

/// Whether the `rdma` feature can be built here; says why not otherwise.
fn rdma_builds() -> bool {
    let missing = deps::missing_for_rdma();
    if !missing.is_empty() {
        eprintln!(
            "xtask: skipping fabric's rdma feature (its build and unit tests): missing {}",
            missing.join(" ")
        );
    }
    missing.is_empty()
}

/// The POSIX suites of the FUSE mounts (pjdfstest and fio --verify jobs, `ci/*-posix.sh`): they
/// need root and /dev/fuse, and skip with the reason otherwise.
fn posix_suites() -> Result<()> {
    let root = cargo::workspace_root();
    let Some(pjdfstest) = deps::ensure_pjdfstest(root)? else {
        return Ok(());
    };
    for script in ["ci/gofs-posix.sh", "ci/peakfs-posix.sh"] {
        let mut command = std::process::Command::new("bash");
        command
            .arg(root.join(script))
            .current_dir(root)
            .env("PJDFSTEST", &pjdfstest);
        cargo::run(&mut command)?;
    }
    Ok(())
}

/// The PeakFS cluster recipe with every host in its own network namespace, running its default
/// benchmark over two client hosts (whose processes read back each other's data): it needs root
/// and iproute2, and skips with the reason otherwise.
fn cluster_in_namespaces() -> Result<()> {
    if !deps::is_root() || !cargo::program_runs("ip", &["-V"]) {
        eprintln!("xtask: skipping the PeakFS cluster in network namespaces: it needs root and ip");
        return Ok(());
    }
    cluster::run(&cluster::ClusterArgs::netns_check())
}

/// Everything CI checks, stopping at the first failure.
fn ci() -> Result<()> {
    cargo::run(cargo::command().args(["fmt", "--all", "--check"]))?;
    cargo::run(cargo::command().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    test()?;
    if rdma_builds() {
        cargo::run(cargo::command().args([
            "clippy",
            "-p",
            "fabric",
            "--features",
            "rdma",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))?;
    }
    loom_tests()?;
    fuzz_check()?;
    cuda_check::run()
}

/// Type-checks every cargo-fuzz crate (`crates/*/fuzz`, workspaces of their own that no other
/// step builds) against its committed lock file, so that a change of the APIs they fuzz or
/// of the dependencies shows here and not at the next fuzzing run. One target directory for
/// all of them: they share most dependencies.
fn fuzz_check() -> Result<()> {
    let workspace = cargo::Workspace::load()?;
    let crates = cargo::workspace_root().join("crates");
    let mut manifests: Vec<_> = std::fs::read_dir(&crates)
        .with_context(|| crates.display().to_string())?
        .filter_map(|entry| Some(entry.ok()?.path().join("fuzz").join("Cargo.toml")))
        .filter(|manifest| manifest.is_file())
        .collect();
    manifests.sort();
    if manifests.is_empty() {
        bail!("no cargo-fuzz crate under {}", crates.display());
    }
    for manifest in manifests {
        cargo::run(
            cargo::command()
                .env("CARGO_TARGET_DIR", workspace.target_dir.join("fuzz-check"))
                .arg("check")
                .arg("--manifest-path")
                .arg(&manifest)
                .args(["--bins", "--locked"]),
        )?;
    }
    Ok(())
}

/// Runs every test target whose name contains `loom`, built with `--cfg loom` in release mode
/// in its own target directory (so the normal build is not invalidated).
fn loom_tests() -> Result<()> {
    let workspace = cargo::Workspace::load()?;
    let mut found = false;
    for package in &workspace.packages {
        let loom_targets: Vec<&str> = package
            .targets
            .iter()
            .filter(|target| target.is_integration_test() && target.name.contains("loom"))
            .map(|target| target.name.as_str())
            .collect();
        if loom_targets.is_empty() {
            continue;
        }
        found = true;
        let rustflags = match std::env::var("RUSTFLAGS") {
            Ok(flags) if !flags.trim().is_empty() => format!("{flags} --cfg loom"),
            _ => "--cfg loom".to_owned(),
        };
        let mut command = cargo::command();
        command
            .env("RUSTFLAGS", rustflags)
            .env("CARGO_TARGET_DIR", workspace.target_dir.join("loom"))
            .args(["test", "--release", "-p", &package.name]);
        for target in loom_targets {
            command.args(["--test", target]);
        }
        cargo::run(&mut command)?;
    }
    if !found {
        println!("loom: no test target whose name contains `loom`; skipped");
    }
    Ok(())
}

/// The demo: every registered benchmark, short, on the GPU when there is one.
fn demo() -> Result<()> {
    bench::run(&bench::BenchArgs::demo())
}
