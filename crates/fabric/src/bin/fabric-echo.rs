//! fabric-echo: the RPC echo ceiling of a transport (PeakFS §III-D reports every result
//! against it): the most small request/reply round trips per second, with N client threads
//! each keeping a window of requests in flight against the reference server's communicating
//! threads. Prints round trips/s and latency percentiles; `--json` emits the common record.
//!
//! `fabric-echo serve` runs only the server (until SIGINT/SIGTERM), so clients and server can
//! be separate processes (or network namespaces); `fabric-echo bench` starts an in-process
//! server unless `--connect` names one.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args as ClapArgs, Parser, Subcommand};
use common::bench::{BenchRecord, Engine, LatencyRecorder, render_table};
use fabric::frame::ErrorCode;
use fabric::{Connection, Opcode, RpcClient, Server, TcpConfig, TcpTransport, Transport, serve};

/// RPC echo benchmark and server over the fabric TCP transport.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serves echo requests until SIGINT/SIGTERM.
    Serve(ServeArgs),
    /// Measures round trips per second and latency.
    Bench(BenchArgs),
}

#[derive(Debug, ClapArgs)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7400")]
    listen: String,
    /// Communicating threads (client i is served by thread i mod T).
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

#[derive(Debug, ClapArgs)]
struct BenchArgs {
    /// Server to load; without it an in-process server on 127.0.0.1 is started.
    #[arg(long)]
    connect: Option<String>,
    /// Communicating threads of the in-process server.
    #[arg(long, default_value_t = 1)]
    server_threads: usize,
    /// Client threads, one connection each.
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 1)]
    window: usize,
    /// Payload bytes per request (at least 8: the send timestamp travels in it).
    #[arg(long, default_value_t = 8)]
    payload: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Unmeasured seconds before.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Seconds a reply may take before the run fails.
    #[arg(long, default_value_t = 5.0)]
    timeout: f64,
    /// Print the common bench record as one JSON line instead of a table.
    #[arg(long)]
    json: bool,
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Serve(args) => run_server(&args),
        Command::Bench(args) => run_bench(&args),
    }
}

/// The reference server with no user opcodes: only ECHO is answered.
fn start_server(transport: &TcpTransport, listen: &str, threads: usize) -> Result<Server> {
    let listener = transport
        .listen(listen)
        .with_context(|| format!("listening on {listen}"))?;
    let handler = Arc::new(|_: &fabric::Header, _: &[u8], _: &mut Vec<u8>| {
        Err((
            ErrorCode::UNKNOWN_OPCODE,
            "fabric-echo serves only ECHO".to_owned(),
        ))
    });
    Ok(serve(transport, listener, threads, handler)?)
}

fn run_server(args: &ServeArgs) -> Result<()> {
    let transport = TcpTransport::default();
    let server = start_server(&transport, &args.listen, args.threads)?;
    tracing::info!(addr = %server.local_addr(), threads = args.threads, "serving echo");
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .context("installing signal handlers")?;
    // Printed on stdout so a parent process can wait for it.
    println!("listening on {}", server.local_addr());
    let _ = signals.forever().next();
    tracing::info!("stopping");
    server.stop()?;
    Ok(())
}

/// What one client thread measured.
struct ClientResult {
    ops: u64,
    latency: LatencyRecorder,
}

fn seconds(name: &str, value: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(value)
        .with_context(|| format!("--{name} {value} is not a duration"))
}

fn run_bench(args: &BenchArgs) -> Result<()> {
    if args.payload < 8 {
        bail!(
            "--payload {} is below 8 bytes (the timestamp travels in the payload)",
            args.payload
        );
    }
    if args.clients == 0 || args.window == 0 {
        bail!("--clients and --window must be at least 1");
    }
    let measured = seconds("duration", args.duration)?;
    let warmup = seconds("warmup", args.warmup)?;
    let timeout = seconds("timeout", args.timeout)?;
    let transport = TcpTransport::new(TcpConfig::default());
    let (server, addr) = match &args.connect {
        Some(addr) => (None, addr.clone()),
        None => {
            let server = start_server(&transport, "127.0.0.1:0", args.server_threads)?;
            let addr = server.local_addr().to_string();
            (Some(server), addr)
        }
    };
    let epoch = Instant::now();
    let measure_from = epoch + warmup;
    let stop_at = measure_from + measured;
    let clients = (0..args.clients)
        .map(|n| {
            let conn = transport
                .connect(&addr, timeout)
                .with_context(|| format!("client {n} connecting to {addr}"))?;
            let (window, payload) = (args.window, args.payload);
            Ok(thread::spawn(move || {
                client_loop(conn, window, payload, timeout, epoch, measure_from, stop_at)
            }))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut ops = 0;
    let mut latency = LatencyRecorder::new();
    for client in clients {
        let result = client
            .join()
            .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
        ops += result.ops;
        latency.merge(&result.latency)?;
    }
    if let Some(server) = server {
        server.stop()?;
    }
    let record = BenchRecord::new("fabric", format!("rpc-echo-{}b", args.payload), Engine::Cpu)
        .param("transport", "tcp")
        .param("clients", args.clients as u64)
        .param("window", args.window as u64)
        .param("payload_bytes", args.payload as u64)
        .param("server_threads", args.server_threads as u64)
        .param("server", if args.connect.is_some() { "external" } else { "in-process" })
        .ops(ops)
        .bytes(ops * 2 * args.payload as u64)
        .duration(measured)
        .latency(&latency)
        .notes("round trips over loopback; latency from submit to reply, queueing in the window included")
        .finish()?;
    if args.json {
        println!("{}", record.to_json_line());
    } else {
        println!("{}", render_table(std::slice::from_ref(&record)));
    }
    Ok(())
}

/// Nanoseconds from `epoch` to now.
fn now_ns(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Keeps `window` echo requests in flight until `stop_at`; each carries its send time, so the
/// reply alone gives its latency (no per-request bookkeeping, no allocation).
fn client_loop(
    conn: impl Connection,
    window: usize,
    payload: usize,
    timeout: Duration,
    epoch: Instant,
    measure_from: Instant,
    stop_at: Instant,
) -> Result<ClientResult> {
    let mut rpc = RpcClient::new(conn, window, timeout);
    let mut body = vec![0u8; payload];
    let mut latency = LatencyRecorder::new();
    let mut ops = 0;
    for _ in 0..window {
        body[..8].copy_from_slice(&now_ns(epoch).to_le_bytes());
        rpc.submit(Opcode::ECHO, &[&body])?;
    }
    loop {
        let reply = rpc.next_reply()?;
        let sent = reply
            .payload
            .first_chunk::<8>()
            .map(|stamp| u64::from_le_bytes(*stamp))
            .context("echo reply shorter than its timestamp")?;
        let now = Instant::now();
        if now >= stop_at {
            break;
        }
        if now >= measure_from {
            latency.record_ns(now_ns(epoch).saturating_sub(sent));
            ops += 1;
        }
        body[..8].copy_from_slice(&now_ns(epoch).to_le_bytes());
        rpc.submit(Opcode::ECHO, &[&body])?;
    }
    while rpc.in_flight() > 0 {
        rpc.next_reply()?;
    }
    rpc.connection().close()?;
    Ok(ClientResult { ops, latency })
}
