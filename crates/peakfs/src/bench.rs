//! `peakfs bench` (PeakFS §IV): mdtest- and IOR-style workloads run by many client
//! processes, with the RPC echo ceiling measured by the same processes in the same run.
//!
//! The driver spawns `procs` worker processes (the `peakfs` binary itself, `bench-worker`
//! subcommand). Each worker connects its own [`Client`] and then runs one phase per line it
//! reads on stdin, answering with one JSON line ([`PhaseResult`]). Every phase starts in all
//! workers at once (the driver writes the phase to every worker before reading any result);
//! a phase's throughput is the sum of operations over the span from the earliest start to the
//! latest end. Each phase also reports the requests its operations sent (`rpcs_per_op`: a
//! small-file create needs two, CREATE and WRITE; the other metadata ops one), the CPU
//! time its processes' threads spent per operation (`client_cpu_us_per_op`, from
//! getrusage: what the client side costs, whatever waits on the servers), the kernel's part
//! of it (`client_sys_us_per_op`) and how often they slept (`client_sleeps_per_op`). Phases that run
//! one operation at a time (`echo-spread`, `echo-routed`, `mdtest-*`) also time each operation
//! in every process, and their record carries the merged `latency_us`: a
//! bigdir phase that trails `echo-spread` by a shifted median costs more per operation, one
//! that trails by its tail waits on stalls.
//!
//! With [`BenchConfig::iterations`] above one (mdtest's -i) the selected phases run that many
//! times in order, every iteration on files of its own. A record then sums its phase's
//! iterations (its ops/s is their mean), and each fraction of a ceiling is the median over the
//! iterations of the phase against the ceiling measured in the same iteration, with the least
//! and the greatest (`*_min`, `*_max`) and the iterations' slowest and fastest ops/s
//! (`iops_min`, `iops_max`): on a host whose speed drifts from second to second, a phase is
//! compared with the ceiling of its own moment, and one slow moment moves the median little.
//!
//! Phases:
//! - `echo-sync` / `echo-pipelined`: ECHO requests (64 B), one in flight or
//!   [`BenchConfig::echo_window`] in flight per process: the RPC ceilings. With one in flight
//!   each process keeps to the server of its home slice ([`Client::home`]), served there by
//!   the home slice's worker: processes numbered one after another by the master have homes on
//!   different slices, so up to `servers × workers` processes each have a thread of their
//!   own, and no request waits for a server thread that went to sleep while the process
//!   talked to other servers: the ceiling is the best round trip the RPC layer gives.
//!   Pipelined echoes go round-robin over the servers in bursts, which keeps every server's
//!   threads busy;
//! - `echo-spread`: one in flight, each to the server that the λ of a bigdir entry with the
//!   same name as the mdtest phases' picks: the load spreads over the servers as the bigdir's
//!   does (at any moment some servers have several requests waiting and others none), with the
//!   server cost of an echo. Diagnostic, not a ceiling: bigdir / `echo-spread` is what a bigdir
//!   operation costs beyond an echo sent the same way (its server work, and the hop to the
//!   owning worker), `echo-spread` / `echo-sync` what spreading the load costs;
//! - `echo-routed`: `echo-spread`'s names, each sent as a ROUTED_ECHO
//!   ([`crate::protocol::op::ROUTED_ECHO`]): it travels as the bigdir request of that name
//!   does, hop to the owning worker included, and is answered there without slice work. The
//!   dispatch ceiling of a bigdir: bigdir / `echo-routed` is what the slice's work costs,
//!   `echo-routed` / `echo-sync` what spreading and the hop cost together;
//! - `echo-home`: one in flight, each process to the server that holds its private directory
//!   (where the `private` phases send every request, received by the same communicating
//!   thread). Diagnostic, not a ceiling: it loads the servers as the private phases do, so
//!   private / `echo-home` is what a private operation costs beyond an echo, and `echo-home` /
//!   `echo-sync` what the directories' placement costs. Its record tells how many processes
//!   share the busiest slice (`max_procs_per_slice`);
//! - `xfer-{write,read}`: the data-transfer ceiling of the IOR phases: XFER requests
//!   ([`crate::protocol::op::XFER`]) carrying 256 KiB to the server (write) or asking it for
//!   256 KiB (read), answered by the communicating thread without touching a slice, as many
//!   bytes per process as an IOR phase moves, [`XFER_WINDOW`] in flight, each process to its
//!   home server as in `echo-sync`. They run with any IOR phase; IOR records carry
//!   `fraction_of_xfer_{write,read}` (bytes per second against bytes per second): what the
//!   storage path and the client's data path cost beyond moving the bytes;
//! - `mdtest-{create,stat,remove}-{empty,3901}-{private,bigdir}`: `files` files per process,
//!   empty or 3,901 bytes, in a per-process regular directory or in one shared bigdir; the
//!   stat and remove phases take the files of the process [`BenchConfig::stride`] ranks on
//!   (mdtest's -N; the paper's runs used it so that no process touched its own files);
//! - `ior-nn-{write,read}`: one file per process (file-based distribution), 256 KiB
//!   transfers; each process reads the file another process wrote;
//! - `ior-n1-{write,read}`: one shared file (I/O-based distribution), 47,008-byte transfers,
//!   process `r` owns transfers `k·N + r`; reads again read another process's transfers.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::bench::{BenchRecord, BenchRecordBuilder, Engine, LatencyRecorder};
use serde::{Deserialize, Serialize};

use crate::client::{Client, ClientError, ClientOptions};
use crate::local_cluster::wait_or_kill;
use crate::placement::{DataDist, Hint, home_lambda, name_lambda};
use crate::usage::ThreadUsage;

/// Bytes of an mdtest "small file".
pub const SMALL_FILE: usize = 3901;
/// IOR N-N transfer size.
pub const NN_XFER: usize = 256 << 10;
/// IOR N-1 transfer size.
pub const N1_XFER: usize = 47_008;
/// ECHO payload bytes.
const ECHO_BYTES: usize = 64;
/// XFER requests in flight per process: the depth of the client's write pipeline
/// ([`ClientOptions::max_unfinished`]'s default).
pub const XFER_WINDOW: usize = 32;
/// The parent ino `echo-spread` and `echo-routed` hash their names under (any fixed ino
/// spreads them alike).
const BIGDIR_STAND_IN: u64 = 1 << 20;

/// Errors of the benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchFailure {
    /// a client operation failed
    #[error("client: {0}")]
    Client(#[from] ClientError),
    /// spawning or talking to a worker failed
    #[error("worker I/O: {0}")]
    Io(#[from] std::io::Error),
    /// a worker reported an error or sent garbage
    #[error("worker {rank}: {msg}")]
    Worker {
        /// Its rank.
        rank: usize,
        /// What went wrong.
        msg: String,
    },
    /// a record could not be built
    #[error("record: {0}")]
    Record(#[from] common::bench::BenchError),
}

/// Parameters shared by the driver and its workers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchConfig {
    /// Master address.
    pub master: String,
    /// Worker processes.
    pub procs: usize,
    /// mdtest files per process.
    pub files: usize,
    /// mdtest's -N: the stat and remove phases go to the files of process
    /// `(rank + stride) mod procs` (the paper's runs: no file is stat'ed or removed by the
    /// process that made it); 0: each process its own.
    #[serde(default)]
    pub stride: usize,
    /// ECHO requests per process per echo phase.
    pub echo_ops: u64,
    /// ECHO requests in flight per process in `echo-pipelined`.
    pub echo_window: usize,
    /// IOR bytes per process.
    pub ior_bytes: u64,
    /// Directory of the run (absolute).
    pub root: String,
    /// Command prefixes that start the workers, separated by ';' (worker `r` uses prefix
    /// `r mod count`), e.g. `ip netns exec pfs-c0;ip netns exec pfs-c1` to put the client
    /// processes on different (namespace) hosts; empty: plain child processes.
    #[serde(default)]
    pub spawn_prefix: String,
    /// The workers' private directories go where their names hash to instead of next to the
    /// worker serving each process ([`ClientOptions::dirs_near_client`] off).
    #[serde(default)]
    pub spread_dirs: bool,
    /// Microseconds a worker process polls for each reply before it sleeps
    /// ([`ClientOptions::reply_poll`]); echoes and metadata operations alike.
    #[serde(default)]
    pub reply_poll_us: u64,
    /// Times the selected phases run, the whole sequence each time (mdtest's and IOR's -i);
    /// 0 counts as 1. See [`drive`] for how iterations are summed up.
    #[serde(default)]
    pub iterations: usize,
}

/// What one worker measured in one phase.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseResult {
    /// Operations done.
    pub ops: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Requests (RPCs) sent.
    #[serde(default)]
    pub rpcs: u64,
    /// CPU time of the process's thread that ran the phase (user and system), ns.
    #[serde(default)]
    pub cpu_ns: u64,
    /// The system (kernel) part of `cpu_ns`, ns.
    #[serde(default)]
    pub sys_ns: u64,
    /// Times the thread slept (voluntary context switches: waits for a reply, mostly).
    #[serde(default)]
    pub sleeps: u64,
    /// Start, ns since the epoch.
    pub start_ns: u128,
    /// End, ns since the epoch.
    pub end_ns: u128,
    /// `echo-home`: the slot (slice) of the process's private directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home_slot: Option<u64>,
    /// Phases that time each operation (`echo-spread`, `echo-routed`, `mdtest-*`): the latency
    /// histogram as [`LatencyRecorder::buckets`] (nanoseconds, count).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency_ns: Vec<(u64, u64)>,
    /// An error instead of a result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn epoch_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The phases of a full run, in order.
pub fn phases() -> Vec<String> {
    let mut p = vec![
        "echo-sync".to_string(),
        "echo-pipelined".to_string(),
        "echo-spread".to_string(),
        "echo-routed".to_string(),
        "echo-home".to_string(),
    ];
    for place in ["private", "bigdir"] {
        for size in ["empty", "3901"] {
            for op in ["create", "stat", "remove"] {
                p.push(format!("mdtest-{op}-{size}-{place}"));
            }
        }
    }
    for p2 in [
        "xfer-write",
        "xfer-read",
        "ior-nn-write",
        "ior-nn-read",
        "ior-n1-write",
        "ior-n1-read",
    ] {
        p.push(p2.to_string());
    }
    p
}

/// Whose mdtest files process `rank` of `procs` works on in an `op` phase: its own for a
/// create, those of the process `stride` ranks on for a stat or remove (mdtest's -N).
fn files_owner(op: &str, rank: usize, stride: usize, procs: usize) -> usize {
    if op == "create" {
        rank
    } else {
        (rank + stride) % procs
    }
}

/// What the names of iteration `iteration`'s files carry (nothing in the first).
fn iteration_suffix(iteration: usize) -> String {
    if iteration == 0 {
        String::new()
    } else {
        format!("{iteration}.")
    }
}

/// One worker process: its client and rank.
#[derive(Debug)]
pub struct Worker {
    cfg: BenchConfig,
    rank: usize,
    client: Client,
    /// λ of the private directory's slice (its inode's home).
    home: u64,
    /// The running phase's per-operation latencies (phases that time each operation).
    latency: LatencyRecorder,
}

impl Worker {
    /// Connects worker `rank` and creates its private directory.
    pub fn new(cfg: BenchConfig, rank: usize) -> Result<Self, BenchFailure> {
        let opts = ClientOptions {
            // 10× the N-N transfer size (§IV-B "read-ahead ... 10 times transfer size").
            read_ahead: 10 * NN_XFER,
            dirs_near_client: !cfg.spread_dirs,
            reply_poll: Duration::from_micros(cfg.reply_poll_us),
            ..ClientOptions::default()
        };
        let mut client = Client::connect(&cfg.master, opts)?;
        let private = Hint {
            data: DataDist::Block,
            bigdir: false,
        };
        let dir = client.mkdir(&format!("{}/p{rank}", cfg.root), 0o755, Some(private))?;
        let home = home_lambda(dir.ino);
        Ok(Self {
            cfg,
            rank,
            client,
            home,
            latency: LatencyRecorder::new(),
        })
    }

    /// The path of process `rank`'s mdtest files of `size` in `place` in iteration
    /// `iteration`, up to their number: the path of file `i` is this prefix followed by `i`.
    /// Empty and 3,901-byte files have names of their own (`f` and `s`, the same length), so
    /// that the create phases of both sizes can run one after the other; the files of
    /// iteration `k > 0` carry `k.` after that letter, so that every iteration creates new
    /// files whatever phases it runs.
    fn file_prefix(
        cfg: &BenchConfig,
        rank: usize,
        place: &str,
        size: &str,
        iteration: usize,
    ) -> String {
        let kind = if size == "3901" { 's' } else { 'f' };
        let round = iteration_suffix(iteration);
        match place {
            "private" => format!("{}/p{rank}/{kind}{round}", cfg.root),
            _ => format!("{}/big/r{rank}.{kind}{round}", cfg.root),
        }
    }

    /// Runs phase `name` of iteration `iteration`; returns (ops, bytes).
    pub fn run(&mut self, name: &str, iteration: usize) -> Result<(u64, u64), BenchFailure> {
        let c = &mut self.client;
        let n = self.cfg.procs;
        let r = self.rank;
        let parts: Vec<&str> = name.split('-').collect();
        match parts.as_slice() {
            ["echo", way @ ("spread" | "routed")] => {
                let payload = [0x5au8; ECHO_BYTES];
                // The names of this process's bigdir files, as the mdtest phases make them.
                let path = Self::file_prefix(&self.cfg, r, "bigdir", "empty", iteration);
                let prefix = path.rsplit('/').next().unwrap_or_default();
                let mut name = String::with_capacity(prefix.len() + 20);
                let layout = *c.layout();
                for i in 0..self.cfg.echo_ops {
                    name.clear();
                    name.push_str(prefix);
                    let _ = write!(name, "{i}");
                    let lambda = name_lambda(BIGDIR_STAND_IN, name.as_bytes());
                    let t = Instant::now();
                    if *way == "spread" {
                        c.echo(layout.route(lambda).server, &payload, 1, 1)?;
                    } else {
                        c.routed_echo(lambda, &payload)?;
                    }
                    self.latency.record(t.elapsed());
                }
                Ok((self.cfg.echo_ops, self.cfg.echo_ops * ECHO_BYTES as u64))
            }
            ["echo", "home"] => {
                let payload = [0x5au8; ECHO_BYTES];
                let server = c.layout().route(self.home).server;
                c.echo(server, &payload, self.cfg.echo_ops, 1)?;
                Ok((self.cfg.echo_ops, self.cfg.echo_ops * ECHO_BYTES as u64))
            }
            ["echo", mode] => {
                let window = if *mode == "sync" {
                    1
                } else {
                    self.cfg.echo_window
                };
                let servers = c.layout().servers();
                let payload = [0x5au8; ECHO_BYTES];
                // Pipelined: bursts of `4 × window` per server, round-robin, so all servers are
                // loaded. Sync: one server per process (see the module docs).
                let (burst, step) = if window == 1 {
                    (self.cfg.echo_ops, 0)
                } else {
                    ((4 * window) as u64, 1)
                };
                let mut done = 0;
                let mut s = if window == 1 {
                    c.layout().route(c.home()).server
                } else {
                    r as u32 % servers
                };
                while done < self.cfg.echo_ops {
                    let k = burst.min(self.cfg.echo_ops - done);
                    c.echo(s, &payload, k, window)?;
                    done += k;
                    s = (s + step) % servers;
                }
                Ok((done, done * ECHO_BYTES as u64))
            }
            ["xfer", dir] => {
                let xfers = self.cfg.ior_bytes / NN_XFER as u64;
                let server = c.layout().route(c.home()).server;
                let (data, reply_len) = if *dir == "write" {
                    (vec![0x3cu8; NN_XFER], 0)
                } else {
                    (Vec::new(), NN_XFER as u32)
                };
                c.xfer(server, &data, reply_len, xfers, XFER_WINDOW)?;
                Ok((xfers, xfers * NN_XFER as u64))
            }
            ["mdtest", op, size, place] => {
                let data = vec![0xa5u8; if *size == "3901" { SMALL_FILE } else { 0 }];
                let files = self.cfg.files;
                let mut bytes = 0u64;
                // One buffer for every path, as mdtest's sprintf into a fixed array: the
                // harness should not add an allocation per operation that the echo lacks.
                let owner = files_owner(op, r, self.cfg.stride, n);
                let prefix = Self::file_prefix(&self.cfg, owner, place, size, iteration);
                let mut path = String::with_capacity(prefix.len() + 20);
                for i in 0..files {
                    path.clear();
                    path.push_str(&prefix);
                    let _ = write!(path, "{i}");
                    let path = path.as_str();
                    let t = Instant::now();
                    match *op {
                        "create" => {
                            let fd =
                                c.open(path, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644)?;
                            if !data.is_empty() {
                                c.write(fd, &data)?;
                                bytes += data.len() as u64;
                            }
                            c.close(fd)?;
                        }
                        "stat" => {
                            let a = c.stat(path)?;
                            if a.size != data.len() as u64 {
                                return Err(BenchFailure::Worker {
                                    rank: r,
                                    msg: format!("{path}: size {} not {}", a.size, data.len()),
                                });
                            }
                        }
                        _ => c.unlink(path)?,
                    }
                    self.latency.record(t.elapsed());
                }
                Ok((files as u64, bytes))
            }
            ["ior", "nn", rw] => {
                let xfers = self.cfg.ior_bytes / NN_XFER as u64;
                let buf = vec![(r as u8).wrapping_add(1); NN_XFER];
                if *rw == "write" {
                    let path = format!("{}/nn/f{r}{}", self.cfg.root, iteration_suffix(iteration));
                    let fd = c.create(&path, 0o644)?;
                    for k in 0..xfers {
                        c.pwrite(fd, &buf, k * NN_XFER as u64)?;
                    }
                    c.close(fd)?;
                } else {
                    let peer = (r + 1) % n;
                    let path = format!(
                        "{}/nn/f{peer}{}",
                        self.cfg.root,
                        iteration_suffix(iteration)
                    );
                    let fd = c.open(&path, libc::O_RDONLY, 0)?;
                    for k in 0..xfers {
                        let d = c.pread(fd, NN_XFER, k * NN_XFER as u64)?;
                        if d.len() != NN_XFER || d[0] != (peer as u8).wrapping_add(1) {
                            return Err(BenchFailure::Worker {
                                rank: r,
                                msg: format!("N-N read of transfer {k} returned wrong data"),
                            });
                        }
                    }
                    c.close(fd)?;
                }
                Ok((xfers, xfers * NN_XFER as u64))
            }
            ["ior", "n1", rw] => {
                let xfers = self.cfg.ior_bytes / N1_XFER as u64;
                let path = format!("{}/n1/shared{}", self.cfg.root, iteration_suffix(iteration));
                let (who, flags) = if *rw == "write" {
                    (r, libc::O_CREAT | libc::O_WRONLY)
                } else {
                    ((r + 1) % n, libc::O_RDONLY)
                };
                let fd = c.open(&path, flags, 0o644)?;
                let buf = vec![(who as u8).wrapping_add(1); N1_XFER];
                for k in 0..xfers {
                    let off = (k * n as u64 + who as u64) * N1_XFER as u64;
                    if *rw == "write" {
                        c.pwrite(fd, &buf, off)?;
                    } else {
                        let d = c.pread(fd, N1_XFER, off)?;
                        if d != buf {
                            return Err(BenchFailure::Worker {
                                rank: r,
                                msg: format!("N-1 read at {off} returned wrong data"),
                            });
                        }
                    }
                }
                c.close(fd)?;
                Ok((xfers, xfers * N1_XFER as u64))
            }
            _ => Err(BenchFailure::Worker {
                rank: r,
                msg: format!("unknown phase {name:?}"),
            }),
        }
    }

    /// Serves phases read from `input` until it ends, one per line (its name, then its
    /// iteration if not the first), writing one [`PhaseResult`] JSON line per phase to
    /// `output`.
    pub fn serve(&mut self, input: impl BufRead, mut output: impl Write) -> std::io::Result<()> {
        writeln!(output, "ready")?;
        output.flush()?;
        for line in input.lines() {
            let line = line?;
            let mut words = line.split_whitespace();
            let name = words.next().unwrap_or_default();
            let iteration = words.next().map(str::parse::<usize>);
            let sent = self.client.rpcs_sent();
            self.latency = LatencyRecorder::new();
            let usage = ThreadUsage::now();
            let start_ns = epoch_ns();
            let r = match iteration {
                None => self.run(name, 0),
                Some(Ok(iteration)) => self.run(name, iteration),
                Some(Err(_)) => Err(BenchFailure::Worker {
                    rank: self.rank,
                    msg: format!("bad phase line {line:?}"),
                }),
            };
            let end_ns = epoch_ns();
            let used = ThreadUsage::now().since(&usage);
            let (cpu_ns, sys_ns) = (used.cpu.as_nanos() as u64, used.system.as_nanos() as u64);
            let sleeps = used.voluntary_switches.max(0) as u64;
            let rpcs = self.client.rpcs_sent() - sent;
            let res = match r {
                Ok((ops, bytes)) => PhaseResult {
                    ops,
                    bytes,
                    rpcs,
                    cpu_ns,
                    sys_ns,
                    sleeps,
                    start_ns,
                    end_ns,
                    home_slot: (name == "echo-home").then_some(self.home),
                    latency_ns: self.latency.buckets(),
                    error: None,
                },
                Err(e) => PhaseResult {
                    ops: 0,
                    bytes: 0,
                    rpcs,
                    cpu_ns,
                    sys_ns,
                    sleeps,
                    start_ns,
                    end_ns,
                    home_slot: None,
                    latency_ns: Vec::new(),
                    error: Some(e.to_string()),
                },
            };
            writeln!(
                output,
                "{}",
                serde_json::to_string(&res).unwrap_or_default()
            )?;
            output.flush()?;
        }
        Ok(())
    }
}

struct Proc {
    child: Child,
    /// Phases go here; closing it ends the worker.
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

/// How long a worker whose input was closed may take to exit before it is killed (a worker
/// under a profiler such as callgrind writes its profile then).
const WORKER_EXIT_WAIT: Duration = Duration::from_secs(10);

impl Drop for Proc {
    fn drop(&mut self) {
        // End of input: the worker disconnects and exits by itself; a stuck one is killed.
        drop(self.stdin.take());
        wait_or_kill(&mut self.child, WORKER_EXIT_WAIT);
    }
}

impl Proc {
    fn line(&mut self, rank: usize) -> Result<String, BenchFailure> {
        let mut s = String::new();
        if self.stdout.read_line(&mut s)? == 0 {
            return Err(BenchFailure::Worker {
                rank,
                msg: "exited".into(),
            });
        }
        Ok(s)
    }
}

/// Aggregated result of one phase over all workers.
#[derive(Debug, Clone)]
pub struct Phase {
    /// Operations.
    pub ops: u64,
    /// Bytes.
    pub bytes: u64,
    /// Requests sent.
    pub rpcs: u64,
    /// CPU time of the client processes' threads that ran it, summed.
    pub client_cpu: Duration,
    /// The kernel's part of `client_cpu`.
    pub client_sys: Duration,
    /// Times those threads slept (waiting for replies), summed.
    pub client_sleeps: u64,
    /// Earliest start to latest end.
    pub duration: Duration,
    /// The quickest process's own start to end.
    pub fastest_proc: Duration,
    /// The slowest process's own start to end (a process that waits on a crowded slice
    /// stretches the phase: `slowest_proc` well above `fastest_proc` is imbalance).
    pub slowest_proc: Duration,
    /// `echo-home`: processes whose private directories share the busiest slice.
    pub max_procs_per_slice: Option<usize>,
    /// Every process's per-operation latencies (empty for phases that do not time each one).
    pub latency: LatencyRecorder,
}

fn ns_duration(ns: u128) -> Duration {
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

impl Phase {
    /// The iterations of one phase as one: their operations, bytes, requests and spans summed
    /// (its rate is the mean over the iterations' time), the quickest and the slowest process
    /// of any iteration, and every latency.
    fn total(runs: &[Phase]) -> Result<Phase, BenchFailure> {
        let mut total = Phase {
            ops: 0,
            bytes: 0,
            rpcs: 0,
            client_cpu: Duration::ZERO,
            client_sys: Duration::ZERO,
            client_sleeps: 0,
            duration: Duration::ZERO,
            fastest_proc: Duration::MAX,
            slowest_proc: Duration::ZERO,
            max_procs_per_slice: None,
            latency: LatencyRecorder::new(),
        };
        for run in runs {
            total.ops += run.ops;
            total.bytes += run.bytes;
            total.rpcs += run.rpcs;
            total.client_cpu += run.client_cpu;
            total.client_sys += run.client_sys;
            total.client_sleeps += run.client_sleeps;
            total.duration += run.duration;
            total.fastest_proc = total.fastest_proc.min(run.fastest_proc);
            total.slowest_proc = total.slowest_proc.max(run.slowest_proc);
            total.max_procs_per_slice = total.max_procs_per_slice.max(run.max_procs_per_slice);
            total.latency.merge(&run.latency)?;
        }
        Ok(total)
    }

    /// Operations per second.
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.duration.as_secs_f64().max(1e-9)
    }

    /// Bytes per second.
    pub fn bandwidth(&self) -> f64 {
        self.bytes as f64 / self.duration.as_secs_f64().max(1e-9)
    }
}

/// Adds extra `key` to a phase's record: the median over the iterations of the phase's
/// `metric` divided by its `ceiling` phase's in the same iteration (so that a host whose speed
/// drifts between iterations compares each phase with the ceiling it had then), and with
/// several iterations the least and greatest of those fractions as `key_min` and `key_max`.
fn paired(
    b: BenchRecordBuilder,
    key: &str,
    runs: &[Phase],
    ceiling: &[Phase],
    metric: fn(&Phase) -> f64,
) -> BenchRecordBuilder {
    let mut fractions: Vec<f64> = runs
        .iter()
        .zip(ceiling)
        .map(|(run, limit)| metric(run) / metric(limit))
        .collect();
    fractions.sort_by(f64::total_cmp);
    let Some(median) = median_of_sorted(&fractions) else {
        return b;
    };
    let b = b.extra(key, median);
    match fractions.as_slice() {
        [least, .., greatest] => b
            .extra(format!("{key}_min"), *least)
            .extra(format!("{key}_max"), *greatest),
        _ => b,
    }
}

/// The median of sorted values: the middle one, or the mean of the middle two.
fn median_of_sorted(sorted: &[f64]) -> Option<f64> {
    let mid = sorted.len() / 2;
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[mid]),
        _ => Some((sorted[mid - 1] + sorted[mid]) / 2.0),
    }
}

/// The phase that makes the files phase `name` reads: an mdtest stat or remove phase's create
/// phase, an IOR read phase's write phase.
fn maker(name: &str) -> Option<String> {
    if let Some(rest) = name
        .strip_prefix("mdtest-stat-")
        .or_else(|| name.strip_prefix("mdtest-remove-"))
    {
        return Some(format!("mdtest-create-{rest}"));
    }
    name.strip_suffix("-read")
        .filter(|p| p.starts_with("ior-"))
        .map(|p| format!("{p}-write"))
}

/// Whether phase `name` runs under the filter `only` (substrings of names; empty: all): the
/// echo ceilings always, the transfer ceilings whenever an IOR phase runs, and the phase that
/// makes a selected phase's files ([`maker`]).
fn selected(name: &str, only: &[String]) -> bool {
    let picked = |n: &str| only.is_empty() || only.iter().any(|o| n.contains(o.as_str()));
    name.starts_with("echo")
        || picked(name)
        || phases().iter().filter(|p| picked(p)).any(|p| {
            (name.starts_with("xfer") && p.starts_with("ior")) || maker(p).as_deref() == Some(name)
        })
}

/// The words of `only` that name no phase (a typo would otherwise run the echo phases alone).
pub fn unknown_phase_words(only: &[String]) -> Vec<&str> {
    let names = phases();
    only.iter()
        .map(String::as_str)
        .filter(|o| !names.iter().any(|n| n.contains(o)))
        .collect()
}

/// Runs phase `name` of iteration `iteration` in every worker process at once.
fn run_phase(procs: &mut [Proc], name: &str, iteration: usize) -> Result<Phase, BenchFailure> {
    let t = Instant::now();
    for (rank, p) in procs.iter_mut().enumerate() {
        let stdin = p.stdin.as_mut().ok_or(BenchFailure::Worker {
            rank,
            msg: "input closed".into(),
        })?;
        writeln!(stdin, "{name} {iteration}")?;
        stdin.flush()?;
    }
    let (mut ops, mut bytes, mut rpcs, mut cpu_ns, mut sys_ns, mut sleeps) = (0, 0, 0, 0, 0, 0);
    let (mut start, mut end) = (u128::MAX, 0u128);
    let (mut fastest, mut slowest) = (u128::MAX, 0u128);
    let mut home_slots = Vec::new();
    let mut latency = LatencyRecorder::new();
    let mut rank_ms = Vec::with_capacity(procs.len());
    for (rank, p) in procs.iter_mut().enumerate() {
        let l = p.line(rank)?;
        let r: PhaseResult = serde_json::from_str(&l).map_err(|e| BenchFailure::Worker {
            rank,
            msg: format!("bad result {l:?}: {e}"),
        })?;
        if let Some(msg) = r.error {
            return Err(BenchFailure::Worker {
                rank,
                msg: format!("{name}: {msg}"),
            });
        }
        ops += r.ops;
        bytes += r.bytes;
        rpcs += r.rpcs;
        cpu_ns += r.cpu_ns;
        sys_ns += r.sys_ns;
        sleeps += r.sleeps;
        start = start.min(r.start_ns);
        end = end.max(r.end_ns);
        let took = r.end_ns.saturating_sub(r.start_ns);
        fastest = fastest.min(took);
        slowest = slowest.max(took);
        rank_ms.push(format!("{:.1}", took as f64 / 1e6));
        home_slots.extend(r.home_slot);
        for (nanos, count) in r.latency_ns {
            latency.record_ns_n(nanos, count);
        }
    }
    home_slots.sort_unstable();
    let max_procs_per_slice = home_slots.chunk_by(|a, b| a == b).map(<[u64]>::len).max();
    let span = ns_duration(end.saturating_sub(start));
    // Each process's own span, by rank: a rank slow in every phase points at its cores.
    tracing::info!(phase = %name, iteration, ops, wall = ?t.elapsed(), rank_ms = %rank_ms.join(" "), "phase done");
    Ok(Phase {
        ops,
        bytes,
        rpcs,
        client_cpu: Duration::from_nanos(cpu_ns),
        client_sys: Duration::from_nanos(sys_ns),
        client_sleeps: sleeps,
        duration: span,
        fastest_proc: ns_duration(fastest),
        slowest_proc: ns_duration(slowest),
        max_procs_per_slice,
        latency,
    })
}

/// Runs the whole benchmark with `cfg.procs` worker processes started as `exe bench-worker`;
/// returns one record per phase (`phases` filters by substring; empty: all).
pub fn drive(
    cfg: &BenchConfig,
    exe: &std::path::Path,
    only: &[String],
) -> Result<Vec<BenchRecord>, BenchFailure> {
    let mut setup = Client::connect(&cfg.master, ClientOptions::default())?;
    setup.mkdir(&cfg.root, 0o755, Some(Hint::default()))?;
    setup.mkdir(
        &format!("{}/big", cfg.root),
        0o755,
        Some(Hint {
            data: DataDist::Block,
            bigdir: true,
        }),
    )?;
    setup.mkdir(
        &format!("{}/nn", cfg.root),
        0o755,
        Some(Hint {
            data: DataDist::File,
            bigdir: false,
        }),
    )?;
    setup.mkdir(
        &format!("{}/n1", cfg.root),
        0o755,
        Some(Hint {
            data: DataDist::Io,
            bigdir: false,
        }),
    )?;
    let cfg_json = serde_json::to_string(cfg).unwrap_or_default();
    let mut procs = Vec::new();
    for rank in 0..cfg.procs {
        let prefixes: Vec<Vec<&str>> = cfg
            .spawn_prefix
            .split(';')
            .map(|p| p.split_whitespace().collect::<Vec<_>>())
            .filter(|p| !p.is_empty())
            .collect();
        let mut argv: Vec<&str> = match prefixes.get(rank % prefixes.len().max(1)) {
            Some(p) => p.clone(),
            None => Vec::new(),
        };
        let exe_str = exe.to_str().ok_or_else(|| BenchFailure::Worker {
            rank,
            msg: format!("binary path {} is not UTF-8", exe.display()),
        })?;
        let rank_str = rank.to_string();
        argv.extend([
            exe_str,
            "bench-worker",
            "--rank",
            &rank_str,
            "--config",
            &cfg_json,
        ]);
        let mut child = Command::new(argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(BenchFailure::Worker {
                rank,
                msg: "no pipes".into(),
            });
        };
        procs.push(Proc {
            child,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
        });
    }
    for (rank, p) in procs.iter_mut().enumerate() {
        let l = p.line(rank)?;
        if l.trim() != "ready" {
            return Err(BenchFailure::Worker {
                rank,
                msg: format!("not ready: {l:?}"),
            });
        }
    }
    let mut results: Vec<(String, Vec<Phase>)> = phases()
        .into_iter()
        .filter(|name| selected(name, only))
        .map(|name| (name, Vec::new()))
        .collect();
    let iterations = cfg.iterations.max(1);
    for iteration in 0..iterations {
        for (name, runs) in &mut results {
            runs.push(run_phase(&mut procs, name, iteration)?);
        }
    }
    drop(procs);
    let runs_of = |n: &str| {
        results
            .iter()
            .find(|(p, _)| p == n)
            .map(|(_, runs)| runs.as_slice())
    };
    let (sync, piped) = (runs_of("echo-sync"), runs_of("echo-pipelined"));
    let (xfer_write, xfer_read) = (runs_of("xfer-write"), runs_of("xfer-read"));
    let mut records = Vec::new();
    for (name, runs) in &results {
        let r = &Phase::total(runs)?;
        let mut b = BenchRecord::new("peakfs", name.clone(), Engine::Cpu)
            .ops(r.ops)
            .bytes(r.bytes)
            .duration(r.duration)
            .param("procs", cfg.procs as u64)
            .param("servers", u64::from(setup.layout().servers()))
            .param("workers_per_server", u64::from(setup.layout().workers()))
            .param("reply_poll_us", cfg.reply_poll_us)
            .param("iterations", iterations as u64);
        if name.starts_with("mdtest") {
            b = b
                .param("files_per_proc", cfg.files as u64)
                .param("stride", cfg.stride as u64);
        } else if name.starts_with("ior") || name.starts_with("xfer") {
            b = b.param("bytes_per_proc", cfg.ior_bytes);
            b = b.param(
                "transfer",
                if name.contains("n1") {
                    N1_XFER as u64
                } else {
                    NN_XFER as u64
                },
            );
            if name.starts_with("xfer") {
                b = b.param("window", XFER_WINDOW as u64);
            } else {
                let (key, ceiling) = if name.ends_with("write") {
                    ("fraction_of_xfer_write", xfer_write)
                } else {
                    ("fraction_of_xfer_read", xfer_read)
                };
                if let Some(c) = ceiling {
                    b = paired(b, key, runs, c, Phase::bandwidth);
                }
            }
        } else {
            b = b.param(
                "window",
                if name == "echo-sync"
                    || name == "echo-spread"
                    || name == "echo-routed"
                    || name == "echo-home"
                {
                    1
                } else {
                    cfg.echo_window as u64
                },
            );
        }
        let rpcs_per_op = r.rpcs as f64 / r.ops.max(1) as f64;
        b = b
            .extra("rpcs_per_op", rpcs_per_op)
            .extra(
                "client_cpu_us_per_op",
                r.client_cpu.as_secs_f64() * 1e6 / r.ops.max(1) as f64,
            )
            .extra(
                "client_sys_us_per_op",
                r.client_sys.as_secs_f64() * 1e6 / r.ops.max(1) as f64,
            )
            .extra(
                "client_sleeps_per_op",
                r.client_sleeps as f64 / r.ops.max(1) as f64,
            )
            .extra("fastest_proc_s", r.fastest_proc.as_secs_f64())
            .extra("slowest_proc_s", r.slowest_proc.as_secs_f64());
        if r.latency.samples() > 0 {
            b = b.latency(&r.latency);
        }
        if let Some(m) = r.max_procs_per_slice {
            b = b.extra("max_procs_per_slice", m as f64);
        }
        if iterations > 1 {
            let rates = runs.iter().map(Phase::rate);
            b = b
                .extra("iops_min", rates.clone().fold(f64::INFINITY, f64::min))
                .extra("iops_max", rates.fold(0.0, f64::max));
        }
        if let Some(c) = piped {
            b = paired(b, "fraction_of_echo_pipelined", runs, c, Phase::rate);
        }
        if let Some(c) = sync {
            b = paired(b, "fraction_of_echo_sync", runs, c, Phase::rate);
        }
        records.push(b.finish()?);
    }
    Ok(records)
}

/// How far apart (of the fastest) a ceiling's iterations may run before
/// [`unsteady_ceilings`] warns about it.
pub const UNSTEADY_CEILING: f64 = 0.10;

/// One line for each ceiling that fractions are taken against (`echo-sync`,
/// `echo-pipelined`, `xfer-*`) whose iterations ran more than [`UNSTEADY_CEILING`] apart: on a
/// host whose speed drifted, a phase's fraction says as much about the moment its ceiling was
/// measured as about the phase. Measured on H200 hosts: one run's echo-sync iterations at
/// 347 K and 455 K ops/s, its bigdir fractions 0.06-0.2 above those of the runs around it.
pub fn unsteady_ceilings(records: &[BenchRecord]) -> Vec<String> {
    let ceiling = |w: &str| matches!(w, "echo-sync" | "echo-pipelined") || w.starts_with("xfer");
    records
        .iter()
        .filter(|r| ceiling(&r.workload))
        .filter_map(|r| {
            let get = |k: &str| r.extra.get(k).and_then(|v| v.as_f64());
            let (lo, hi) = (get("iops_min")?, get("iops_max")?);
            let apart = (hi - lo) / hi;
            (apart > UNSTEADY_CEILING).then(|| {
                format!(
                    "ceiling {} ran {:.0} to {:.0} ops/s across iterations ({:.0} % apart): \
                     the fractions against it are unsteady; run again or with more iterations",
                    r.workload,
                    lo,
                    hi,
                    apart * 100.0
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{
        files_owner, iteration_suffix, median_of_sorted, phases, selected, unknown_phase_words,
        unsteady_ceilings,
    };
    use common::bench::{BenchRecord, Engine};
    use std::time::Duration;

    #[test]
    fn a_phase_brings_the_phase_that_makes_its_files() {
        let run = |only: &[&str]| -> Vec<String> {
            let only: Vec<String> = only.iter().map(|s| s.to_string()).collect();
            phases()
                .into_iter()
                .filter(|p| !p.starts_with("echo") && selected(p, &only))
                .collect()
        };
        assert_eq!(
            run(&["mdtest-stat-empty-bigdir"]),
            ["mdtest-create-empty-bigdir", "mdtest-stat-empty-bigdir"]
        );
        assert_eq!(
            run(&["remove-3901-private"]),
            ["mdtest-create-3901-private", "mdtest-remove-3901-private"]
        );
        assert_eq!(
            run(&["ior-n1-read"]),
            ["xfer-write", "xfer-read", "ior-n1-write", "ior-n1-read"]
        );
        assert_eq!(
            run(&["create-empty-private"]),
            ["mdtest-create-empty-private"]
        );
        assert_eq!(run(&[]).len(), phases().len() - 5);
    }

    #[test]
    fn only_words_that_name_no_phase_are_reported() {
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(unknown_phase_words(&words(&["stat", "ior-n1", "3901", "bigdir"])).is_empty());
        assert_eq!(
            unknown_phase_words(&words(&["create", "stats", "ior-nn-rd"])),
            ["stats", "ior-nn-rd"]
        );
    }

    #[test]
    fn a_ceiling_whose_iterations_ran_far_apart_is_called_unsteady() {
        let record = |w: &str, lo: f64, hi: f64| -> BenchRecord {
            BenchRecord::new("peakfs", w, Engine::Cpu)
                .ops(1000)
                .duration(Duration::from_millis(1))
                .extra("iops_min", lo)
                .extra("iops_max", hi)
                .finish()
                .unwrap()
        };
        let records = [
            record("echo-sync", 347_419.0, 455_008.0),
            record("echo-pipelined", 4.7e6, 4.8e6),
            record("xfer-write", 100.0, 130.0),
            // Not a ceiling: its spread is the phase's own.
            record("mdtest-stat-empty-bigdir", 285_931.0, 353_837.0),
        ];
        let warned = unsteady_ceilings(&records);
        assert_eq!(warned.len(), 2, "{warned:?}");
        assert!(warned[0].starts_with("ceiling echo-sync ran 347419 to 455008"));
        assert!(warned[1].starts_with("ceiling xfer-write"));
        // One iteration: nothing to compare.
        let one = BenchRecord::new("peakfs", "echo-sync", Engine::Cpu)
            .ops(1)
            .duration(Duration::from_millis(1))
            .finish()
            .unwrap();
        assert!(unsteady_ceilings(&[one]).is_empty());
    }

    #[test]
    fn the_median_is_the_middle_value_or_the_mean_of_the_middle_two() {
        assert_eq!(median_of_sorted(&[]), None);
        assert_eq!(median_of_sorted(&[0.7]), Some(0.7));
        assert_eq!(median_of_sorted(&[0.5, 0.6, 0.9]), Some(0.6));
        assert_eq!(median_of_sorted(&[0.5, 0.6, 0.8, 0.9]), Some(0.7));
    }

    #[test]
    fn only_later_iterations_mark_their_file_names() {
        assert_eq!(iteration_suffix(0), "");
        assert_eq!(iteration_suffix(2), "2.");
    }

    #[test]
    fn a_stride_sends_stats_and_removes_to_another_process_files_and_creates_to_its_own() {
        assert_eq!(files_owner("create", 2, 1, 4), 2);
        assert_eq!(files_owner("stat", 2, 1, 4), 3);
        assert_eq!(files_owner("remove", 3, 1, 4), 0, "wraps around");
        assert_eq!(files_owner("stat", 1, 6, 4), 3);
        assert_eq!(files_owner("remove", 1, 0, 4), 1, "stride 0: its own");
    }
}
