//! `peakfs`: the PeakFS client tools (§III-A): `mount` (FUSE), `bench` (§IV), and small
//! commands over the client library (`ls`, `stat`, `put`, `get`, `mkdir`, `rm`, `rmdir`,
//! `mv`, `hint`, `echo`, `df`), which name the path in each error.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use peakfs::bench::{BenchConfig, Worker};
use peakfs::client::{Client, ClientOptions};
use peakfs::local_cluster::{LocalCluster, LocalClusterConfig, split_cores};
use peakfs::placement::Hint;
use peakfs::protocol::StatFs;
use peakfs::show;
use peakfs::xattr::{HintAttr, SetFlags};

/// PeakFS client tools.
#[derive(Debug, Parser)]
struct Args {
    /// Master address (host:port).
    #[arg(long, global = true, default_value = "127.0.0.1:7300")]
    master: String,
    /// RPC timeout in milliseconds.
    #[arg(long, global = true, default_value_t = 10_000)]
    timeout_ms: u64,
    /// Hint of new files and directories, e.g. "bigdir,file" (env PEAKFS_DIST).
    #[arg(long, global = true)]
    dist: Option<String>,
    /// Put new directories on the worker their name hashes to, not on the one serving this
    /// client (env PEAKFS_SPREAD_DIRS=1).
    #[arg(long, global = true)]
    spread_dirs: bool,
    /// Microseconds a wait for a reply polls its connection before it sleeps (env
    /// PEAKFS_REPLY_POLL_US; default 0: sleep at once). For client processes with cores of
    /// their own.
    #[arg(long, global = true)]
    reply_poll_us: Option<u64>,
    /// Bytes of the I/O unit of an I/O-based file this client writes first (env
    /// PEAKFS_IO_UNIT; default: the length of that first write), 4096 to 16 MiB.
    #[arg(long, global = true)]
    io_unit: Option<u32>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Mount the file system with FUSE until SIGINT/SIGTERM or an external unmount.
    Mount {
        /// Mount point.
        mountpoint: PathBuf,
        /// FUSE threads, each with a client of its own: requests about different files
        /// proceed side by side (1 to 256).
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
        threads: u16,
    },
    /// mdtest/IOR-style benchmark with many client processes and the RPC echo ceiling.
    Bench {
        /// Client processes.
        #[arg(long, default_value_t = 4)]
        procs: usize,
        /// mdtest files per process.
        #[arg(long, default_value_t = 2000)]
        files: usize,
        /// mdtest's -N: the stat and remove phases go to the files of process (rank + N) mod
        /// procs, as the paper ran them (no file is stat'ed or removed by the process that
        /// made it); 0: each process its own.
        #[arg(long, default_value_t = 0)]
        stride: usize,
        /// ECHO requests per process per echo phase.
        #[arg(long, default_value_t = 40_000)]
        echo_ops: u64,
        /// ECHO requests in flight per process (pipelined ceiling).
        #[arg(long, default_value_t = 16)]
        echo_window: usize,
        /// IOR MiB per process.
        #[arg(long, default_value_t = 16)]
        ior_mib: u64,
        /// Run the selected phases this many times, the whole sequence each time (mdtest's
        /// -i): ops/s is then the mean over the iterations, and each fraction of a ceiling the
        /// median of the iterations' fractions, each against the ceiling measured in its own
        /// iteration (with its least and greatest in the JSON records).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
        iterations: u16,
        /// Run only phases whose name contains one of these (echo phases always run, and so
        /// does the phase that makes a selected phase's files).
        #[arg(long)]
        only: Vec<String>,
        /// Directory of the run (default: /bench-PID).
        #[arg(long)]
        root: Option<String>,
        /// Print JSON lines (common BenchRecord) instead of a table.
        #[arg(long)]
        json: bool,
        /// Worker command prefixes separated by ';' (worker r uses prefix r mod count),
        /// e.g. "ip netns exec pfs-c0;ip netns exec pfs-c1".
        #[arg(long, default_value = "")]
        spawn_prefix: String,
        /// Start a master and this many servers on loopback for the run (the programs next to
        /// this one, data files in a temporary folder inside --local-dir) and stop them after
        /// it; --master is then ignored.
        #[arg(long)]
        local_cluster: Option<usize>,
        /// Where --local-cluster makes its temporary folder (default: /dev/shm when it exists,
        /// else the system's temporary folder).
        #[arg(long, requires = "local_cluster")]
        local_dir: Option<PathBuf>,
        /// Workers per server of --local-cluster.
        #[arg(long, default_value_t = 2, requires = "local_cluster")]
        local_workers: u32,
        /// MiB of each --local-cluster server's data file.
        #[arg(long, default_value_t = 1024, requires = "local_cluster")]
        local_data_mib: u64,
        /// Pin the --local-cluster servers' workers to cores of their own (server i on cores
        /// i*W..) and the bench processes to the cores after them (taskset); default: nothing
        /// pinned.
        #[arg(long, requires = "local_cluster", conflicts_with = "spawn_prefix")]
        local_pin: bool,
        /// How the --local-cluster servers' file controllers reach their data files (the
        /// servers' default, uring, when not given); mmap moves the bytes of a data file on
        /// tmpfs (the default --local-dir) by memory copies.
        #[arg(long, requires = "local_cluster",
              value_parser = clap::builder::PossibleValuesParser::new(["psync", "uring", "mmap"]))]
        local_backend: Option<String>,
        /// One more argument for every --local-cluster server (repeatable), e.g.
        /// `--local-server-arg=--controller-workers=2`.
        #[arg(long, requires = "local_cluster", allow_hyphen_values = true)]
        local_server_arg: Vec<String>,
        /// Copy the --local-cluster processes' logs (master.log, s0.log, ...) into this folder
        /// once they have stopped (the servers' last lines count each worker's requests,
        /// forwards and hop times); otherwise they go with the cluster's temporary folder.
        #[arg(long, requires = "local_cluster")]
        local_logs: Option<PathBuf>,
    },
    /// One worker process of `bench` (internal).
    #[command(hide = true)]
    BenchWorker {
        #[arg(long)]
        rank: usize,
        #[arg(long)]
        config: String,
    },
    /// List a directory: one name a line (a directory's with a "/"), or with --long one
    /// `ls -l` line each.
    Ls {
        path: String,
        /// Mode, links, owner, group, size and modification time of each entry (one stat
        /// each).
        #[arg(short, long)]
        long: bool,
        /// JSON output: an array of entries (with their attributes under "attr" with --long).
        #[arg(long)]
        json: bool,
    },
    /// Attributes of a path.
    Stat {
        path: String,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Copy a local file (or stdin with "-") into PeakFS.
    Put { local: PathBuf, path: String },
    /// Copy a PeakFS file to a local file (or stdout with "-").
    Get { path: String, local: PathBuf },
    /// Create a directory.
    Mkdir { path: String },
    /// Remove a file.
    Rm { path: String },
    /// Remove an empty directory.
    Rmdir { path: String },
    /// Rename.
    Mv { from: String, to: String },
    /// Show or change a file's or directory's placement hints, as the mount's extended
    /// attributes user.peakfs.dist and user.peakfs.io_unit do.
    Hint {
        path: String,
        /// New data distribution: a file's own (while it is empty), a directory's for its
        /// new files ("block", "file" or "io"; "bigdir"/"dir" must say what it is).
        #[arg(long = "set-dist")]
        dist: Option<String>,
        /// I/O unit in bytes: a directory's for its new I/O-based files, or an I/O-based
        /// file's before its first write.
        #[arg(long = "set-io-unit")]
        unit: Option<String>,
    },
    /// Capacity and usage of the whole cluster.
    Df {
        /// Also each slice's (server/worker): how evenly the distribution spread the data and
        /// inodes.
        #[arg(long)]
        slices: bool,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Round-trip ECHO requests to every server.
    Echo {
        /// Requests per server.
        #[arg(long, default_value_t = 1000)]
        count: u64,
        /// In flight.
        #[arg(long, default_value_t = 1)]
        window: usize,
    },
}

/// `--spread-dirs`, or PEAKFS_SPREAD_DIRS=1.
fn spread_dirs(a: &Args) -> bool {
    a.spread_dirs || std::env::var("PEAKFS_SPREAD_DIRS").is_ok_and(|v| v == "1")
}

/// `--reply-poll-us`, or PEAKFS_REPLY_POLL_US.
fn reply_poll_us(a: &Args) -> Result<u64> {
    match (a.reply_poll_us, std::env::var("PEAKFS_REPLY_POLL_US")) {
        (Some(us), _) => Ok(us),
        (None, Ok(v)) => v
            .parse()
            .with_context(|| format!("bad PEAKFS_REPLY_POLL_US {v:?}")),
        (None, Err(_)) => Ok(0),
    }
}

/// `--io-unit`, or PEAKFS_IO_UNIT, checked against the units a file can have.
fn io_unit(a: &Args) -> Result<Option<u32>> {
    let unit = match (a.io_unit, std::env::var("PEAKFS_IO_UNIT")) {
        (Some(u), _) => u,
        (None, Ok(v)) => v
            .parse()
            .with_context(|| format!("bad PEAKFS_IO_UNIT {v:?}"))?,
        (None, Err(_)) => return Ok(None),
    };
    let range = peakfs::client::IO_UNITS;
    anyhow::ensure!(
        range.contains(&unit),
        "an I/O unit of {unit} bytes: it must be {} to {} bytes",
        range.start(),
        range.end()
    );
    Ok(Some(unit))
}

fn client(a: &Args) -> Result<Client> {
    let dist = a.dist.clone().or_else(|| std::env::var("PEAKFS_DIST").ok());
    let hint = match &dist {
        Some(d) => Some(Hint::parse(d).with_context(|| format!("bad --dist {d:?}"))?),
        None => None,
    };
    let opts = ClientOptions {
        timeout: Duration::from_millis(a.timeout_ms),
        hint,
        dirs_near_client: !spread_dirs(a),
        reply_poll: Duration::from_micros(reply_poll_us(a)?),
        io_unit: io_unit(a)?,
        ..ClientOptions::default()
    };
    Client::connect(&a.master, opts).with_context(|| format!("connecting to {}", a.master))
}

fn mount(a: &Args, mountpoint: &std::path::Path, threads: u16) -> Result<()> {
    let clients = (0..threads)
        .map(|_| client(a))
        .collect::<Result<Vec<_>>>()?;
    // Signals go to a flag before any thread starts, so none is lost.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .context("installing signal handlers")?;
    let session = peakfs::fuse::spawn_mount(clients, mountpoint)
        .with_context(|| format!("FUSE mount at {}", mountpoint.display()))?;
    tracing::info!("mounted at {}", mountpoint.display());
    println!("peakfs mounted at {}", mountpoint.display());
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
        session.umount_and_join().context("FUSE unmount")?;
    } else {
        session.join().context("FUSE session")?;
    }
    tracing::info!("unmounted {}", mountpoint.display());
    Ok(())
}

/// Starts `peakfs bench --local-cluster`'s cluster: the master and servers next to `exe`,
/// their data and logs in a temporary folder (removed with the returned guard).
/// With `pin`, also the cpu-list for the bench's processes. `server_args` go to every server.
fn start_local_cluster(
    exe: &std::path::Path,
    parent: Option<&std::path::Path>,
    servers: usize,
    workers: u32,
    data_mib: u64,
    pin: bool,
    mut server_args: Vec<String>,
) -> Result<(LocalCluster, tempfile::TempDir, Option<String>)> {
    if servers == 0 || workers == 0 {
        bail!("--local-cluster and --local-workers must be at least 1");
    }
    let (server_cpus, client_cpus) = if pin {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let (lists, clients) = split_cores(servers, workers, cores).with_context(|| {
            format!("--local-pin: {servers} servers x {workers} workers leave none of the {cores} cores for the bench's processes")
        })?;
        (lists, Some(clients))
    } else {
        (Vec::new(), None)
    };
    if !pin {
        // Unpinned, clients share the cores: workers float, and a 2-core machine keeps its
        // echo.
        server_args.insert(0, "--no-pin".into());
    }
    let bin_dir = exe.parent().context("the folder of the peakfs binary")?;
    let dir = peakfs::local_cluster::scratch_dir(parent, "peakfs-local-")?;
    let cfg = LocalClusterConfig {
        bin_dir: bin_dir.to_path_buf(),
        work_dir: dir.path().to_path_buf(),
        servers,
        workers,
        data_bytes: data_mib << 20,
        server_args,
        server_cpus,
    };
    tracing::info!(servers, workers, dir = %dir.path().display(), "starting a local cluster");
    let cluster = LocalCluster::start(&cfg)?;
    Ok((cluster, dir, client_cpus))
}

/// Copies the `*.log` files of a stopped local cluster's folder `from` into folder `to`.
fn keep_logs(from: &std::path::Path, to: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "log") {
            let name = path.file_name().context("a log file's name")?;
            std::fs::copy(&path, to.join(name))
                .with_context(|| format!("copying {} into {}", path.display(), to.display()))?;
        }
    }
    Ok(())
}

/// `peakfs put`: the input into a new (or truncated) file, durable when it returns.
fn put(c: &mut Client, input: &mut dyn Read, path: &str) -> Result<()> {
    let fd = c.create(path, 0o644)?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = input.read(&mut buf)?;
        if n == 0 {
            break;
        }
        c.write(fd, &buf[..n])?;
    }
    c.fsync(fd)?;
    c.close(fd)?;
    Ok(())
}

/// `peakfs get`: a file's bytes to the output. A reader that goes away (`| head`) ends the
/// copy quietly, as SIGPIPE would end a C tool.
fn get(c: &mut Client, path: &str, out: &mut dyn Write) -> Result<()> {
    let fd = c.open(path, libc::O_RDONLY, 0)?;
    loop {
        let d = c.read(fd, 1 << 20)?;
        if d.is_empty() {
            break;
        }
        match out.write_all(&d) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => break,
            other => other?,
        }
    }
    c.close(fd)?;
    Ok(())
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line, each cause after the path it is about: "peakfs: /a/b: No such file...".
            eprintln!("peakfs: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(a: Args) -> Result<()> {
    match &a.cmd {
        Cmd::Mount {
            mountpoint,
            threads,
        } => mount(&a, mountpoint, *threads),
        Cmd::Bench {
            procs,
            files,
            stride,
            echo_ops,
            echo_window,
            ior_mib,
            iterations,
            only,
            root,
            json,
            spawn_prefix,
            local_cluster,
            local_dir,
            local_workers,
            local_data_mib,
            local_pin,
            local_backend,
            local_server_arg,
            local_logs,
        } => {
            let unknown = peakfs::bench::unknown_phase_words(only);
            if !unknown.is_empty() {
                bail!(
                    "--only {unknown:?} names no phase; the phases are {}",
                    peakfs::bench::phases().join(", ")
                );
            }
            if *procs == 0 {
                bail!("--procs must be at least 1");
            }
            let exe = std::env::current_exe().context("locating the peakfs binary")?;
            let local = match local_cluster {
                Some(servers) => Some(start_local_cluster(
                    &exe,
                    local_dir.as_deref(),
                    *servers,
                    *local_workers,
                    *local_data_mib,
                    *local_pin,
                    local_backend
                        .iter()
                        .flat_map(|b| ["--backend".to_string(), b.clone()])
                        .chain(local_server_arg.iter().cloned())
                        .collect(),
                )?),
                None => None,
            };
            let master = local.as_ref().map_or_else(
                || a.master.clone(),
                |(cluster, _, _)| cluster.master_addr().to_string(),
            );
            let spawn_prefix = match local.as_ref().and_then(|(_, _, cpus)| cpus.as_ref()) {
                Some(cpus) => format!("taskset -c {cpus}"),
                None => spawn_prefix.clone(),
            };
            let cfg = BenchConfig {
                master,
                procs: *procs,
                files: *files,
                stride: *stride,
                echo_ops: *echo_ops,
                echo_window: *echo_window,
                ior_bytes: ior_mib << 20,
                root: root
                    .clone()
                    .unwrap_or_else(|| format!("/bench-{}", std::process::id())),
                spawn_prefix,
                spread_dirs: spread_dirs(&a),
                reply_poll_us: reply_poll_us(&a)?,
                iterations: usize::from(*iterations),
            };
            let records = peakfs::bench::drive(&cfg, &exe, only);
            if let Some((cluster, dir, _)) = local {
                drop(cluster);
                if let Some(to) = local_logs {
                    keep_logs(dir.path(), to)?;
                }
            }
            let records = records?;
            for warning in peakfs::bench::unsteady_ceilings(&records) {
                eprintln!("warning: {warning}");
            }
            if common::bench::print_records(&records, *json) {
                println!(
                    "{:<34} {:>12} {:>12} {:>12} {:>8} {:>8} {:>8}",
                    "workload", "ops/s", "/echo-sync", "/echo-pipe", "rpcs/op", "GB/s", "/xfer"
                );
                for r in &records {
                    let f = |k: &str| r.extra.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
                    let of_xfer = f("fraction_of_xfer_write").min(f("fraction_of_xfer_read"));
                    println!(
                        "{:<34} {:>12.0} {:>12.3} {:>12.3} {:>8.2} {:>8.2} {:>8.3}",
                        r.workload,
                        r.iops,
                        f("fraction_of_echo_sync"),
                        f("fraction_of_echo_pipelined"),
                        f("rpcs_per_op"),
                        r.gbps,
                        of_xfer
                    );
                }
                if *iterations > 1 {
                    println!(
                        "({iterations} iterations: ops/s is the mean; each fraction the median of the iterations' own)"
                    );
                }
            }
            Ok(())
        }
        Cmd::BenchWorker { rank, config } => {
            let cfg: BenchConfig = serde_json::from_str(config).context("worker config")?;
            let mut w = Worker::new(cfg, *rank)?;
            w.serve(std::io::stdin().lock(), std::io::stdout().lock())?;
            Ok(())
        }
        Cmd::Ls { path, long, json } => {
            let mut c = client(&a)?;
            let mut entries = c.readdir(path).with_context(|| path.clone())?;
            entries.sort_by(|x, y| x.name.cmp(&y.name));
            let mut listing = Vec::new();
            for e in entries {
                let name = String::from_utf8_lossy(&e.name).into_owned();
                let attr = if *long {
                    let child = format!("{}/{name}", path.trim_end_matches('/'));
                    Some(c.stat(&child).with_context(|| child.clone())?)
                } else {
                    None
                };
                if *json {
                    let mut entry = serde_json::json!({"name": name, "ino": e.ino,
                        "type": show::type_name(e.mode)});
                    if let Some(attr) = &attr {
                        entry["attr"] = show::stat_json(attr);
                    }
                    listing.push(entry);
                } else if let Some(attr) = &attr {
                    println!("{}", show::long_line(&name, attr));
                } else if e.mode & libc::S_IFMT == libc::S_IFDIR {
                    println!("{name}/");
                } else {
                    println!("{name}");
                }
            }
            if *json {
                println!("{}", serde_json::Value::Array(listing));
            }
            Ok(())
        }
        Cmd::Stat { path, json } => {
            let s = client(&a)?.stat(path).with_context(|| path.clone())?;
            if *json {
                println!("{}", show::stat_json(&s));
            } else {
                print!("{}", show::stat_text(path, &s));
            }
            Ok(())
        }
        Cmd::Put { local, path } => {
            let mut c = client(&a)?;
            let mut input: Box<dyn Read> = if local.as_os_str() == "-" {
                Box::new(std::io::stdin().lock())
            } else {
                Box::new(std::fs::File::open(local).with_context(|| local.display().to_string())?)
            };
            put(&mut c, &mut input, path).with_context(|| path.clone())
        }
        Cmd::Get { path, local } => {
            let mut c = client(&a)?;
            let mut out: Box<dyn Write> = if local.as_os_str() == "-" {
                Box::new(std::io::stdout().lock())
            } else {
                Box::new(std::fs::File::create(local).with_context(|| local.display().to_string())?)
            };
            get(&mut c, path, &mut out).with_context(|| path.clone())
        }
        Cmd::Hint { path, dist, unit } => {
            let mut c = client(&a)?;
            for (attr, value) in [(HintAttr::Dist, dist), (HintAttr::IoUnit, unit)] {
                if let Some(value) = value {
                    let now = c.stat(path).with_context(|| path.clone())?;
                    let change =
                        peakfs::xattr::set(attr, &now, value.as_bytes(), SetFlags::default())
                            .with_context(|| format!("{path}: {value:?}"))?;
                    peakfs::xattr::apply(&mut c, now.ino, change)
                        .with_context(|| format!("{path}: {value:?}"))?;
                }
            }
            let s = c.stat(path).with_context(|| path.clone())?;
            println!("{path}: dist {} io_unit {}", s.hint.words(), s.io_unit);
            Ok(())
        }
        Cmd::Mkdir { path } => {
            client(&a)?
                .mkdir(path, 0o755, None)
                .with_context(|| path.clone())?;
            Ok(())
        }
        Cmd::Rm { path } => Ok(client(&a)?.unlink(path).with_context(|| path.clone())?),
        Cmd::Rmdir { path } => Ok(client(&a)?.rmdir(path).with_context(|| path.clone())?),
        Cmd::Mv { from, to } => Ok(client(&a)?
            .rename(from, to)
            .with_context(|| format!("{from} -> {to}"))?),
        Cmd::Df { slices, json } => {
            let per_slice = client(&a)?.statfs_slices()?;
            let total: StatFs = per_slice.iter().map(|(_, s)| *s).sum();
            let shown = if *slices { &per_slice[..] } else { &[] };
            if *json {
                println!("{}", show::df_json(&total, shown));
            } else {
                print!("{}", show::df_text(&total, shown));
            }
            Ok(())
        }
        Cmd::Echo { count, window } => {
            let mut c = client(&a)?;
            for s in 0..c.layout().servers() {
                let t = Instant::now();
                c.echo(s, &[0u8; 64], *count, *window)?;
                let dt = t.elapsed();
                println!(
                    "server {s}: {count} echoes in {dt:?} ({:.0}/s, window {window})",
                    *count as f64 / dt.as_secs_f64()
                );
            }
            Ok(())
        }
    }
}
