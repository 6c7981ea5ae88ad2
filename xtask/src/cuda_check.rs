//! `cargo xtask cuda-check`: compiles every CUDA source under `crates/*/cuda/` to PTX with NVRTC,
//! so device code is checked on machines without a GPU (ARCHITECTURE.md, "Where things run").
//!
//! A `.cu` file is compiled as it is. A `.cuh` header is compiled through a generated
//! translation unit that includes it twice, which also checks that it is self-contained and
//! guarded against double inclusion. NVRTC is loaded at run time (cudarc's dynamic loading); when
//! the system has none, PyPI's `nvidia-cuda-nvrtc` wheel is installed into `.cache/nvrtc` and
//! xtask re-executes itself with that library directory on `LD_LIBRARY_PATH` (the dynamic loader
//! reads that variable only when a process starts).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use cudarc::nvrtc::{CompileError, CompileOptions};

use crate::cargo;

/// Virtual architecture the PTX is generated for (Hopper: H100/H200).
const GPU_ARCHITECTURE: &str = "compute_90";
/// Language standard of the device code.
const CXX_STANDARD: &str = "-std=c++17";
/// The headers every crate's CUDA code may include.
const COMMON_CUDA_DIR: &str = "crates/common/cuda";
/// Where the NVRTC wheel is installed, relative to the workspace root (git-ignored).
const NVRTC_CACHE_DIR: &str = ".cache/nvrtc";
/// The pip requirement for NVRTC; its major version matches cudarc's `cuda-13000` feature.
const NVRTC_REQUIREMENT: &str = "nvidia-cuda-nvrtc==13.0.*";
/// Set in the environment of the re-executed xtask, so it never re-executes again.
const REEXEC_MARKER: &str = "XTASK_NVRTC_REEXECUTED";

/// Compiles every CUDA source and reports each; fails if any fails.
pub fn run() -> Result<()> {
    if !nvrtc_loadable() {
        return run_with_cached_nvrtc();
    }
    let root = cargo::workspace_root();
    let sources = find_sources(root)?;
    if sources.is_empty() {
        println!("cuda-check: no CUDA sources under crates/*/cuda/");
        return Ok(());
    }
    let mut failures = 0;
    for source in &sources {
        let shown = source
            .path
            .strip_prefix(root)
            .unwrap_or(&source.path)
            .display();
        match compile(root, source) {
            Ok(()) => println!("OK    {shown}"),
            Err(log) => {
                failures += 1;
                println!("FAIL  {shown}");
                for line in log.lines() {
                    println!("      {line}");
                }
            }
        }
    }
    println!(
        "cuda-check: {} passed, {failures} failed ({GPU_ARCHITECTURE}, {CXX_STANDARD})",
        sources.len() - failures
    );
    if failures > 0 {
        bail!("{failures} CUDA source(s) failed to compile");
    }
    Ok(())
}

/// Whether cudarc can load an NVRTC library.
fn nvrtc_loadable() -> bool {
    // SAFETY: this only dlopens candidate `libnvrtc` names and closes them again; loading runs
    // the library's own initialisers and calls none of its functions.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Makes NVRTC available from the wheel cache and runs `cuda-check` again in a new process
/// whose `LD_LIBRARY_PATH` names it.
fn run_with_cached_nvrtc() -> Result<()> {
    if let Some(path) = std::env::var_os(REEXEC_MARKER) {
        bail!(
            "NVRTC cannot be loaded even with LD_LIBRARY_PATH={}",
            PathBuf::from(path).display()
        );
    }
    let library_dir = cached_nvrtc_dir()?;
    let library_path = library_path_with(&library_dir)?;
    let mut again = Command::new(std::env::current_exe().context("cannot locate xtask itself")?);
    again
        .arg("cuda-check")
        .env("LD_LIBRARY_PATH", &library_path)
        .env(REEXEC_MARKER, &library_path);
    let status = again.status().context("cannot re-execute xtask")?;
    if !status.success() {
        bail!("cuda-check failed ({status})");
    }
    Ok(())
}

/// Makes NVRTC loadable by child processes: `None` when the system already has it, otherwise
/// the wheel cache's library directory (installed on first use) for their `LD_LIBRARY_PATH`.
pub fn ensure_nvrtc() -> Result<Option<PathBuf>> {
    if nvrtc_loadable() {
        Ok(None)
    } else {
        cached_nvrtc_dir().map(Some)
    }
}

/// `LD_LIBRARY_PATH` with `dir` in front of what it holds now.
pub fn library_path_with(dir: &Path) -> Result<std::ffi::OsString> {
    let old = std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default();
    Ok(std::env::join_paths(
        std::iter::once(dir.to_path_buf()).chain(std::env::split_paths(&old)),
    )?)
}

/// The library directory of the NVRTC wheel in the cache, installing the wheel if needed.
fn cached_nvrtc_dir() -> Result<PathBuf> {
    let cache = cargo::workspace_root().join(NVRTC_CACHE_DIR);
    Ok(match find_nvrtc_dir(&cache) {
        Some(dir) => dir,
        None => {
            eprintln!(
                "cuda-check: no NVRTC found; installing {NVRTC_REQUIREMENT} into {}",
                cache.display()
            );
            cargo::run(
                Command::new("python3")
                    .args(["-m", "pip", "install", "--quiet", "--target"])
                    .arg(&cache)
                    .arg(NVRTC_REQUIREMENT),
            )
            .context("cannot install NVRTC (needs python3 with pip and access to PyPI)")?;
            find_nvrtc_dir(&cache).with_context(|| {
                format!(
                    "the {NVRTC_REQUIREMENT} wheel in {} has no libnvrtc.so*",
                    cache.display()
                )
            })?
        }
    })
}

/// The directory under `dir` holding `libnvrtc.so*`, if any.
fn find_nvrtc_dir(dir: &Path) -> Option<PathBuf> {
    let files = walk(dir).ok()?;
    files.into_iter().find_map(|file| {
        let name = file.file_name()?.to_str()?;
        name.starts_with("libnvrtc.so")
            .then(|| file.parent().map(Path::to_path_buf))
            .flatten()
    })
}

/// One CUDA source and the `cuda/` directory of its crate.
#[derive(Debug)]
struct CudaSource {
    path: PathBuf,
    crate_cuda_dir: PathBuf,
}

/// Every `.cu` and `.cuh` under `crates/*/cuda/`, sorted.
fn find_sources(root: &Path) -> Result<Vec<CudaSource>> {
    let crates_dir = root.join("crates");
    let mut sources = Vec::new();
    let mut crate_dirs: Vec<PathBuf> = std::fs::read_dir(&crates_dir)
        .with_context(|| format!("cannot list {}", crates_dir.display()))?
        .map(|entry| entry.map(|entry| entry.path().join("cuda")))
        .collect::<Result<_, _>>()?;
    crate_dirs.sort();
    for crate_cuda_dir in crate_dirs.into_iter().filter(|dir| dir.is_dir()) {
        for path in walk(&crate_cuda_dir)? {
            if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("cu" | "cuh")
            ) {
                sources.push(CudaSource {
                    path,
                    crate_cuda_dir: crate_cuda_dir.clone(),
                });
            }
        }
    }
    Ok(sources)
}

/// Every file below `dir`, sorted.
fn walk(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current)
            .with_context(|| format!("cannot list {}", current.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Compiles one source to PTX; the error is NVRTC's log (or why it could not run).
fn compile(root: &Path, source: &CudaSource) -> Result<(), String> {
    let file_name = source
        .path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (program, program_name) = if source.path.extension().is_some_and(|e| e == "cuh") {
        // The absolute path names this very header even if another include directory has a
        // header of the same name.
        let line = format!("#include \"{}\"\n", source.path.display());
        (line.repeat(2), format!("{file_name}.check.cu"))
    } else {
        let text = std::fs::read_to_string(&source.path)
            .map_err(|error| format!("cannot read: {error}"))?;
        (text, file_name)
    };
    if program.contains('\0') {
        return Err("source contains a NUL byte".to_owned());
    }
    let include_paths = [root.join(COMMON_CUDA_DIR), source.crate_cuda_dir.clone()];
    let options = CompileOptions {
        arch: Some(GPU_ARCHITECTURE),
        include_paths: include_paths
            .iter()
            .map(|dir| dir.display().to_string())
            .collect(),
        options: vec![CXX_STANDARD.to_owned()],
        name: Some(program_name),
        ..CompileOptions::default()
    };
    match cudarc::nvrtc::compile_ptx_with_opts(program, options) {
        Ok(_) => Ok(()),
        Err(CompileError::CompileError { log, .. }) => Err(log.to_string_lossy().into_owned()),
        Err(other) => Err(format!("NVRTC error: {other}")),
    }
}
