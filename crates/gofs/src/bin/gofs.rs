//! gofs: the GoFS command line (papers/gofs.md §3.7 "Daemon setup"): format an image, mount it
//! through FUSE (the host client), work on it without mounting (ls, cat, cp-in, cp-out, mkdir,
//! rm), and run the microbenchmarks. Images are reached through the file-backed NVMe
//! controller, as every GoFS block I/O goes through NVMe queues.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use common::bench::print_records;
use gofs::bench::{self, BenchArgs, open_image};
use gofs::fs::{Caller, FileType, Fs, MountOptions, Stat};
use gofs::fuse::FuseOptions;
use gofs::posix::{OpenFlags, Posix};
use gpu_nvme::controller::FileBackend;

/// GoFS: a file system on F2FS's on-disk format, reached through NVMe queues.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// How the file-backed controller reaches the image: psync, uring or mmap.
    #[arg(long, global = true, default_value = "psync")]
    backend: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Formats IMAGE as F2FS (creating or growing the file to --size first).
    Mkfs {
        /// The image file or block device.
        image: PathBuf,
        /// Size in bytes (a regular file smaller than this is extended).
        #[arg(long)]
        size: Option<u64>,
    },
    /// Mounts IMAGE at MOUNTPOINT with FUSE until SIGINT/SIGTERM or an external unmount.
    Mount {
        /// The image.
        image: PathBuf,
        /// An empty directory.
        mountpoint: PathBuf,
        /// Mount read-only.
        #[arg(long)]
        read_only: bool,
        /// Only the mounting user may enter (no allow_other).
        #[arg(long)]
        private: bool,
        /// Threads serving kernel requests.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Seconds between periodic checkpoints (0: only on fsync, sync and unmount).
        #[arg(long, default_value_t = 30)]
        checkpoint_secs: u64,
        /// Stay in the foreground (the only mode; accepted for familiarity).
        #[arg(long, short = 'f')]
        foreground: bool,
    },
    /// Lists a directory (or describes a file).
    Ls {
        /// The image.
        image: PathBuf,
        /// Absolute path inside the image.
        #[arg(default_value = "/")]
        path: String,
        /// Emit JSON.
        #[arg(long)]
        json: bool,
    },
    /// Writes a file's content to stdout.
    Cat {
        /// The image.
        image: PathBuf,
        /// Absolute path inside the image.
        path: String,
    },
    /// Copies a host file into the image.
    CpIn {
        /// The image.
        image: PathBuf,
        /// File on the host.
        host_file: PathBuf,
        /// Absolute path inside the image.
        path: String,
    },
    /// Copies a file out of the image.
    CpOut {
        /// The image.
        image: PathBuf,
        /// Absolute path inside the image.
        path: String,
        /// File on the host.
        host_file: PathBuf,
    },
    /// Makes a directory.
    Mkdir {
        /// The image.
        image: PathBuf,
        /// Absolute path inside the image.
        path: String,
    },
    /// Removes a file or an empty directory.
    Rm {
        /// The image.
        image: PathBuf,
        /// Absolute path inside the image.
        path: String,
    },
    /// Checks an image read-only, as fsck.f2fs does (`gofs::fsck`): superblock and
    /// checkpoint, NAT, node footers, block ownership, SIT, SSA, directories, link counts.
    /// Exits non-zero when it finds an error.
    Fsck {
        /// The image.
        image: PathBuf,
        /// Problems listed at most (all are counted).
        #[arg(long, default_value_t = 1000)]
        max_problems: usize,
        /// Emit JSON.
        #[arg(long)]
        json: bool,
    },
    /// Runs the microbenchmarks on a fresh image.
    Bench(BenchArgs),
}

/// Logs to stderr, filtered by `RUST_LOG`; by default GoFS's own progress and every warning
/// (fuser's notes about requests GoFS leaves unimplemented, such as xattrs, are left out).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,gofs=info,fuser=error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> Result<()> {
    init_logging();
    let cli = Cli::parse();
    let backend: FileBackend = cli.backend.parse()?;
    match cli.cmd {
        Cmd::Mkfs { image, size } => mkfs(&image, size, backend),
        Cmd::Mount {
            image,
            mountpoint,
            read_only,
            private,
            threads,
            checkpoint_secs,
            foreground: _,
        } => {
            let opts = MountOptions {
                read_only,
                checkpoint_interval: (checkpoint_secs > 0)
                    .then(|| Duration::from_secs(checkpoint_secs)),
            };
            let fuse = FuseOptions {
                allow_other: !private,
                read_only,
                threads,
            };
            mount(&image, &mountpoint, backend, opts, &fuse)
        }
        Cmd::Ls { image, path, json } => with_image(&image, backend, true, |p| ls(p, &path, json)),
        Cmd::Cat { image, path } => with_image(&image, backend, true, |p| {
            let stdout = std::io::stdout();
            copy_out(p, &path, &mut stdout.lock())
        }),
        Cmd::CpIn {
            image,
            host_file,
            path,
        } => with_image(&image, backend, false, |p| copy_in(p, &host_file, &path)),
        Cmd::CpOut {
            image,
            path,
            host_file,
        } => with_image(&image, backend, true, |p| {
            let mut f = std::fs::File::create(&host_file)
                .with_context(|| format!("creating {}", host_file.display()))?;
            copy_out(p, &path, &mut f)
        }),
        Cmd::Mkdir { image, path } => with_image(&image, backend, false, |p| {
            p.mkdir(&path, 0o755)?;
            Ok(())
        }),
        Cmd::Rm { image, path } => with_image(&image, backend, false, |p| {
            if p.lstat(&path)?.kind == FileType::Directory {
                p.rmdir(&path)?;
            } else {
                p.unlink(&path)?;
            }
            Ok(())
        }),
        Cmd::Fsck {
            image,
            max_problems,
            json,
        } => fsck(&image, backend, max_problems, json),
        Cmd::Bench(args) => run_bench(&args),
    }
}

fn fsck(image: &Path, backend: FileBackend, max_problems: usize, json: bool) -> Result<()> {
    let dev = open_image(image, backend).with_context(|| format!("opening {}", image.display()))?;
    let io = gofs::format::NvmeBlocks::new(dev).context("opening the namespace")?;
    let rep = gofs::fsck::check(&io, &gofs::fsck::FsckOptions { max_problems })
        .with_context(|| format!("checking {}", image.display()))?;
    if json {
        let mut v = rep.to_json();
        v["image"] = image.display().to_string().into();
        println!("{v}");
    } else {
        for p in &rep.problems {
            println!("{p}");
        }
        println!(
            "{}: checkpoint pack {} version {}; {} directories, {} files, {} nodes, \
             {} data blocks; {} errors, {} warnings",
            image.display(),
            rep.checkpoint_pack
                .map_or_else(|| "-".to_owned(), |p| p.to_string()),
            rep.checkpoint_version,
            rep.dirs,
            rep.files,
            rep.nodes,
            rep.data_blocks,
            rep.errors,
            rep.warnings
        );
    }
    if !rep.is_clean() {
        bail!("{} errors in {}", rep.errors, image.display());
    }
    Ok(())
}

fn mount_fs(image: &Path, backend: FileBackend, opts: MountOptions) -> Result<Fs> {
    let dev = open_image(image, backend).with_context(|| format!("opening {}", image.display()))?;
    Fs::mount(dev, opts).with_context(|| format!("mounting {}", image.display()))
}

/// Mounts the image without FUSE, runs `f` on a POSIX view, and unmounts (checkpointing when
/// the image was written).
fn with_image(
    image: &Path,
    backend: FileBackend,
    read_only: bool,
    f: impl FnOnce(&Posix) -> Result<()>,
) -> Result<()> {
    let fs = Arc::new(mount_fs(
        image,
        backend,
        MountOptions {
            read_only,
            checkpoint_interval: None,
        },
    )?);
    let posix = Posix::new(Arc::clone(&fs), caller());
    let result = f(&posix);
    drop(posix);
    let fs = Arc::try_unwrap(fs).map_err(|_| anyhow::anyhow!("the engine is still in use"))?;
    let unmounted = fs.unmount().context("unmounting");
    result.and(unmounted)
}

fn caller() -> Caller {
    // SAFETY: getuid and getgid cannot fail and touch no memory of ours.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    Caller { uid, gid }
}

fn mkfs(image: &Path, size: Option<u64>, backend: FileBackend) -> Result<()> {
    if let Some(size) = size {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(image)
            .with_context(|| format!("opening {}", image.display()))?;
        let meta = f.metadata()?;
        if meta.is_file() && meta.len() < size {
            f.set_len(size)
                .with_context(|| format!("extending {} to {size} bytes", image.display()))?;
        }
    }
    format_image(image, backend)
}

/// Formats the image with the engine's mkfs (the layout mkfs.f2fs 1.15 picks).
fn format_image(image: &Path, backend: FileBackend) -> Result<()> {
    let dev = open_image(image, backend).with_context(|| format!("opening {}", image.display()))?;
    gofs::mkfs::mkfs(&dev, &gofs::mkfs::MkfsOptions::default())
        .with_context(|| format!("formatting {}", image.display()))
}

/// How long an unmount may take before the session threads are left behind.
const UNMOUNT_GRACE: Duration = Duration::from_secs(5);

fn mount(
    image: &Path,
    mountpoint: &Path,
    backend: FileBackend,
    opts: MountOptions,
    fuse: &FuseOptions,
) -> Result<()> {
    // Signals are routed to a flag before any thread starts, so none is lost.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .context("installing signal handlers")?;
    let fs = Arc::new(mount_fs(image, backend, opts)?);
    let session = gofs::fuse::spawn_mount(Arc::clone(&fs), mountpoint, fuse)
        .with_context(|| format!("FUSE mount at {}", mountpoint.display()))?;
    tracing::info!("mounted {} at {}", image.display(), mountpoint.display());
    let mut by_signal = false;
    loop {
        if signals.pending().next().is_some() {
            by_signal = true;
            break;
        }
        if session.guard.is_finished() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if by_signal {
        tracing::info!("signal received: unmounting {}", mountpoint.display());
        // The session's threads end when the kernel drops the connection, which it does only
        // when no mount namespace holds a copy of the mount any more (one made by `unshare -m`
        // while we were mounted keeps it alive). Then checkpoint and exit without them.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(session.umount_and_join()));
        match rx.recv_timeout(UNMOUNT_GRACE) {
            Ok(r) => r.context("FUSE unmount")?,
            Err(_) => {
                tracing::warn!(
                    "the FUSE connection outlived the unmount (is the mount still visible in \
                     another mount namespace?): final checkpoint without the session"
                );
                fs.sync().context("final checkpoint")?;
                tracing::info!("clean unmount of {}", image.display());
                std::process::exit(0);
            }
        }
    } else {
        tracing::info!("unmounted externally");
        session.join().context("FUSE session")?;
    }
    let fs = Arc::try_unwrap(fs).map_err(|_| anyhow::anyhow!("the engine is still in use"))?;
    fs.unmount().context("final checkpoint")?;
    tracing::info!("clean unmount of {}", image.display());
    Ok(())
}

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::Regular => "file",
        FileType::Directory => "dir",
        FileType::Symlink => "symlink",
        FileType::CharDevice => "chardev",
        FileType::BlockDevice => "blockdev",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
    }
}

fn stat_json(name: &str, st: &Stat) -> serde_json::Value {
    serde_json::json!({
        "name": name,
        "ino": st.ino,
        "kind": kind_name(st.kind),
        "mode": format!("{:o}", st.mode),
        "nlink": st.nlink,
        "uid": st.uid,
        "gid": st.gid,
        "size": st.size,
        "mtime": st.mtime.sec,
    })
}

fn ls(p: &Posix, path: &str, json: bool) -> Result<()> {
    let st = p.lstat(path)?;
    let mut rows = Vec::new();
    if st.kind == FileType::Directory {
        for e in p.readdir(path)? {
            let name = String::from_utf8_lossy(&e.name).into_owned();
            let full = format!("{}/{}", path.trim_end_matches('/'), name);
            rows.push((name, p.lstat(&full)?));
        }
        rows.sort_by(|a, b| a.0.cmp(&b.0));
    } else {
        rows.push((path.to_owned(), st));
    }
    let mut out = std::io::stdout().lock();
    if json {
        let list: Vec<_> = rows.iter().map(|(n, s)| stat_json(n, s)).collect();
        writeln!(out, "{}", serde_json::Value::Array(list))?;
    } else {
        for (name, s) in &rows {
            writeln!(
                out,
                "{:8} {:>5o} {:>3} {:>5} {:>5} {:>12} {}",
                kind_name(s.kind),
                s.mode,
                s.nlink,
                s.uid,
                s.gid,
                s.size,
                name
            )?;
        }
    }
    Ok(())
}

const COPY_CHUNK: usize = 1 << 20;

fn copy_out(p: &Posix, path: &str, out: &mut dyn Write) -> Result<()> {
    let fd = p.open(path, OpenFlags::READ, 0)?;
    let mut buf = vec![0u8; COPY_CHUNK];
    let result = (|| -> Result<()> {
        loop {
            let n = p.read(fd, &mut buf)?;
            if n == 0 {
                return Ok(());
            }
            out.write_all(&buf[..n])?;
        }
    })();
    p.close(fd)?;
    result?;
    out.flush()?;
    Ok(())
}

fn copy_in(p: &Posix, host_file: &Path, path: &str) -> Result<()> {
    use std::io::Read;
    let mut src = std::fs::File::open(host_file)
        .with_context(|| format!("opening {}", host_file.display()))?;
    let fd = p.open(path, OpenFlags::CREATE_TRUNC, 0o644)?;
    let mut buf = vec![0u8; COPY_CHUNK];
    let result = (|| -> Result<()> {
        loop {
            let n = src.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            let written = p.write(fd, &buf[..n])?;
            if written != n {
                bail!("short write into {path}: {written} of {n} bytes");
            }
        }
    })();
    p.close(fd)?;
    result
}

fn run_bench(args: &BenchArgs) -> Result<()> {
    let backend: FileBackend = args.backend.parse()?;
    let records = bench::run(args, &|image| {
        format_image(image, backend).map_err(|e| bench::BenchError::Invalid(format!("{e:#}")))
    })?;
    if print_records(&records, args.json) {
        for r in &records {
            if let Some(ratio) = r.extra.get("ratio_to_raw").and_then(|v| v.as_f64()) {
                println!(
                    "{}: GoFS at {:.1}% of the raw controller (median of {} alternating rounds; \
                     {:.0} vs {:.0} IOPS overall)",
                    r.workload,
                    ratio * 100.0,
                    r.extra
                        .get("ratio_rounds")
                        .and_then(|v| v.as_array())
                        .map_or(0, Vec::len),
                    r.iops,
                    r.extra
                        .get("raw_iops")
                        .and_then(|v| v.as_f64())
                        .unwrap_or(0.0)
                );
                if let Some(same) = r
                    .extra
                    .get("ratio_to_raw_same_span")
                    .and_then(|v| v.as_f64())
                {
                    println!(
                        "{}: {:.1}% of raw reads confined to the file's footprint (median)",
                        r.workload,
                        same * 100.0
                    );
                }
            }
        }
    }
    Ok(())
}
