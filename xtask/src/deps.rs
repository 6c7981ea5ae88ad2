//! Installing what the test suite needs: system packages (through apt) and cargo-nextest.

use std::path::Path;
use std::process::Command;

use anyhow::{Result, bail};

use crate::cargo;

/// Debian packages the CPU tests use, each with one program it provides, or an absolute path
/// of a file it installs (to tell if it is there).
const APT_PACKAGES: &[(&str, &str)] = &[
    ("dbench", "dbench"),
    ("e2fsprogs", "mkfs.ext4"),
    ("f2fs-tools", "mkfs.f2fs"),
    ("fio", "fio"),
    ("fsmark", "fs_mark"),
    ("fuse3", "fusermount3"),
    ("iproute2", "ip"),
    // pjdfstest (built by `cargo install` for the POSIX suites) links libacl.
    ("libacl1-dev", "/usr/include/sys/acl.h"),
    // fabric's `rdma` feature builds rdma-core with cmake and its bindings with bindgen.
    ("cmake", "cmake"),
    ("libclang-dev", "/usr/share/doc/libclang-dev/copyright"),
];

/// What the `rdma` feature's build needs of [`APT_PACKAGES`].
const RDMA_BUILD_PACKAGES: &[&str] = &["cmake", "libclang-dev"];

/// Directories searched for the programs besides `PATH` (mkfs tools live in sbin).
const SBIN_DIRS: &[&str] = &["/usr/sbin", "/sbin"];

/// Installs the missing apt packages (when it can) and cargo-nextest.
pub fn ensure_test_tools() -> Result<()> {
    ensure_apt_packages();
    ensure_nextest()
}

/// The packages missing for building the `rdma` feature, if any.
pub fn missing_for_rdma() -> Vec<&'static str> {
    APT_PACKAGES
        .iter()
        .filter(|(package, probe)| RDMA_BUILD_PACKAGES.contains(package) && !program_exists(probe))
        .map(|(package, _)| *package)
        .collect()
}

/// Installs missing packages as root with apt; otherwise says exactly what is missing. Tests
/// that need a missing tool skip themselves, so this never fails the run.
fn ensure_apt_packages() {
    let missing: Vec<&str> = APT_PACKAGES
        .iter()
        .filter(|(_, program)| !program_exists(program))
        .map(|(package, _)| *package)
        .collect();
    if missing.is_empty() {
        return;
    }
    let list = missing.join(" ");
    if !is_root() || !cargo::program_runs("apt-get", &["--version"]) {
        eprintln!(
            "warning: missing system packages: {list}\n  install them with: sudo apt-get \
             install -y {list}\n  tests that need them will be skipped"
        );
        return;
    }
    let apt = |args: &[&str]| {
        let mut command = Command::new("apt-get");
        command.env("DEBIAN_FRONTEND", "noninteractive").args(args);
        cargo::run(&mut command)
    };
    let installed = apt(&["update", "-q"]).and_then(|()| {
        let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
        args.extend(&missing);
        apt(&args)
    });
    if let Err(error) = installed {
        eprintln!(
            "warning: could not install {list}: {error:#}\n  tests that need them will be skipped"
        );
    }
}

/// pjdfstest (crates.io) for the POSIX suites, installed into `.cache/cargo-bin` when missing;
/// `None` (with the reason printed) where the suites cannot run: not root, or no /dev/fuse.
pub fn ensure_pjdfstest(root: &Path) -> Result<Option<std::path::PathBuf>> {
    if !is_root() || !Path::new("/dev/fuse").exists() {
        eprintln!(
            "xtask: skipping the POSIX suites (pjdfstest, fio): they need root and /dev/fuse"
        );
        return Ok(None);
    }
    let install_root = root.join(".cache/cargo-bin");
    let binary = install_root.join("bin/pjdfstest");
    if !is_executable(&binary) {
        cargo::run(
            cargo::command()
                .args(["install", "--locked", "-q", "pjdfstest", "--root"])
                .arg(&install_root),
        )?;
    }
    Ok(Some(binary))
}

/// Installs cargo-nextest unless cargo already finds it.
fn ensure_nextest() -> Result<()> {
    if nextest_found() {
        return Ok(());
    }
    cargo::run(cargo::command().args(["install", "cargo-nextest", "--locked"]))?;
    if !nextest_found() {
        bail!("cargo-nextest was installed but `cargo nextest` cannot find it");
    }
    Ok(())
}

fn nextest_found() -> bool {
    cargo::command()
        .args(["nextest", "--version"])
        .output()
        .is_ok_and(|output| output.status.success())
}

/// Whether `program` is an executable file on `PATH` or in an sbin directory (or, given as an
/// absolute path, whether that file exists).
fn program_exists(program: &str) -> bool {
    if Path::new(program).is_absolute() {
        return Path::new(program).exists();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(SBIN_DIRS.iter().map(Into::into))
        .any(|dir| is_executable(&dir.join(program)))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

/// Whether we run as root (`id -u` prints 0).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| output.status.success() && output.stdout.trim_ascii() == b"0")
}
