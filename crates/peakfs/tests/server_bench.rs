//! Metadata throughput against the RPC echo ceiling (the speed check), measured in one
//! run: a master and two `peakfs-server` processes on loopback, and client *processes* (this
//! test binary re-executed) that pipeline ECHO, then CREATE, then LOOKUP (stat by name) requests
//! over one connection per server.
//!
//! Ignored by default (it is a benchmark): `cargo test -p peakfs --release --test server_bench
//! -- --ignored --nocapture` (env: PEAKFS_BENCH_CLIENTS, PEAKFS_BENCH_OPS, PEAKFS_BENCH_WINDOW,
//! PEAKFS_BENCH_CONTROLLER = swarmio (default) or file).

mod server_support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fabric::{Opcode, RpcClient, TcpTransport, Transport};
use peakfs::master::fetch_view;
use peakfs::placement::{Hint, Layout, ROOT_INO};
use peakfs::protocol::{Request, op};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One client process: `ops` requests of kind `kind` pipelined with `window` per server;
/// prints the elapsed seconds and the error count.
fn client_main(uri: &str, kind: &str, id: usize, ops: usize, window: usize) {
    let view = fetch_view(uri, Duration::from_secs(10)).unwrap();
    let layout = Layout::new(view.servers_expected, view.workers, view.block_size).unwrap();
    let hint = Hint::from_byte(view.default_hint as u8).unwrap();
    assert!(hint.bigdir, "the bench creates in a bigdir root");
    // Requests per server, each with its λ.
    let mut per_server: Vec<Vec<(Opcode, Vec<u8>)>> = vec![Vec::new(); view.servers.len()];
    for i in 0..ops {
        let name = format!("bench.{id}.{i}");
        let lambda = layout.dentry_lambda(ROOT_INO, true, name.as_bytes());
        let (opc, payload) = match kind {
            "echo" => (Opcode::ECHO, Request::GetAttr { ino: 0 }.encode(lambda)),
            "create" => {
                let req = Request::Create {
                    pino: ROOT_INO,
                    mode: libc::S_IFREG | 0o644,
                    uid: 0,
                    gid: 0,
                    rdev: 0,
                    hint: Hint::default(),
                    io_unit: 0,
                    excl: true,
                    name: name.as_bytes(),
                };
                (op::CREATE, req.encode(lambda))
            }
            _ => (
                op::LOOKUP,
                Request::Lookup {
                    pino: ROOT_INO,
                    name: name.as_bytes(),
                }
                .encode(lambda),
            ),
        };
        per_server[layout.route(lambda).server as usize].push((opc, payload));
    }
    let t0 = Instant::now();
    let errors: usize = std::thread::scope(|s| {
        let hs: Vec<_> = per_server
            .iter()
            .zip(&view.servers)
            .map(|(reqs, srv)| {
                s.spawn(move || {
                    let t = TcpTransport::default();
                    let c = t.connect(&srv.data_addr, Duration::from_secs(5)).unwrap();
                    let mut rpc = RpcClient::new(c, window, Duration::from_secs(30));
                    let mut errors = 0;
                    for (opc, p) in reqs {
                        loop {
                            match rpc.submit(*opc, &[p]) {
                                Ok(_) => break,
                                Err(fabric::TransportError::WindowFull { .. }) => {
                                    errors +=
                                        usize::from(rpc.next_reply().unwrap().error().is_some());
                                }
                                Err(e) => panic!("{e}"),
                            }
                        }
                    }
                    while rpc.in_flight() > 0 {
                        errors += usize::from(rpc.next_reply().unwrap().error().is_some());
                    }
                    errors
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    println!("\nBENCH {} {}", t0.elapsed().as_secs_f64(), errors);
}

/// Kills and reaps its children on drop (also when the benchmark panics).
struct Reap(Vec<std::process::Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn_line(cmd: &mut Command) -> (std::process::Child, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (
        child,
        line.trim()
            .rsplit(' ')
            .next()
            .unwrap_or_default()
            .to_string(),
    )
}

#[test]
#[ignore = "benchmark"]
fn metadata_create_and_stat_throughput_against_the_echo_ceiling() {
    if let Ok(spec) = std::env::var("PEAKFS_BENCH_CHILD") {
        let v: Vec<&str> = spec.split(',').collect();
        client_main(
            v[0],
            v[1],
            v[2].parse().unwrap(),
            v[3].parse().unwrap(),
            v[4].parse().unwrap(),
        );
        return;
    }
    let clients = env("PEAKFS_BENCH_CLIENTS", 4);
    let ops = env("PEAKFS_BENCH_OPS", 20_000);
    let window = env("PEAKFS_BENCH_WINDOW", 32);
    let controller = std::env::var("PEAKFS_BENCH_CONTROLLER").unwrap_or_else(|_| "swarmio".into());
    let dir = tempfile::tempdir().unwrap();
    let (master, maddr) = spawn_line(Command::new(env!("CARGO_BIN_EXE_peakfs-master")).args([
        "--listen",
        "127.0.0.1:0",
        "--servers",
        "2",
    ]));
    let _master = Reap(vec![master]);
    let servers: Vec<_> = (0..2)
        .map(|i| {
            let data = dir.path().join(format!("s{i}.data"));
            spawn_line(Command::new(env!("CARGO_BIN_EXE_peakfs-server")).args([
                "--master",
                &maddr,
                "--listen",
                "127.0.0.1:0",
                "--data",
                data.to_str().unwrap(),
                "--data-size",
                &(1u64 << 30).to_string(),
                "--workers",
                "2",
                "--controller",
                &controller,
            ]))
            .0
        })
        .collect();
    let _servers = Reap(servers);
    let uri = format!("http://{maddr}");
    fetch_view(&uri, Duration::from_secs(20)).unwrap();
    let me = std::env::current_exe().unwrap();
    let mut rates = Vec::new();
    for kind in ["echo", "create", "stat"] {
        let t0 = Instant::now();
        let kids: Vec<_> = (0..clients)
            .map(|id| {
                Command::new(&me)
                    .args([
                        "--exact",
                        "metadata_create_and_stat_throughput_against_the_echo_ceiling",
                        "--ignored",
                        "--nocapture",
                        "--test-threads",
                        "1",
                    ])
                    .env(
                        "PEAKFS_BENCH_CHILD",
                        format!("{uri},{kind},{id},{ops},{window}"),
                    )
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut errors = 0;
        let mut slowest: f64 = 0.0;
        for k in kids {
            let out = k.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text
                .lines()
                .find_map(|l| l.strip_prefix("BENCH "))
                .unwrap_or_else(|| panic!("client output: {text}"));
            let mut w = line.split(' ');
            slowest = slowest.max(w.next().unwrap().parse().unwrap());
            errors += w.next().unwrap().parse::<usize>().unwrap();
        }
        let total = (clients * ops) as f64;
        let rate = total / slowest;
        println!(
            "{kind:>6}: {total} ops by {clients} client processes in {slowest:.3} s (wall incl. startup {:.3} s) = {rate:.0} ops/s, {errors} errors",
            t0.elapsed().as_secs_f64()
        );
        assert_eq!(errors, 0, "{kind}");
        rates.push(rate);
    }
    println!(
        "create/echo = {:.2}, stat/echo = {:.2}",
        rates[1] / rates[0],
        rates[2] / rates[0]
    );
    drop(_servers);
}
