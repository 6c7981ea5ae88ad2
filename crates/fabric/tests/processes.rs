//! The echo server and load generator as separate processes over loopback: `fabric-echo serve`
//! serves several `fabric-echo bench --connect` processes at once and stops cleanly on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::bench::BenchRecord;
use fabric::{Opcode, RpcClient, TcpTransport, Transport};

const ECHO: &str = env!("CARGO_BIN_EXE_fabric-echo");

/// A child process killed (and reaped) on drop, so a failing test leaves nothing behind.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        // Both fail harmlessly if the test already stopped and reaped it.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `fabric-echo serve` on an ephemeral port; returns the child and its address.
fn spawn_server(threads: usize) -> (Reaped, String) {
    let mut child = Command::new(ECHO)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--threads",
            &threads.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .expect("server announces its address");
    (Reaped(child), addr.to_owned())
}

/// Sends SIGTERM to `child`.
fn terminate(child: &Child) {
    let pid = libc::pid_t::try_from(child.id()).expect("pids fit pid_t");
    // SAFETY: `kill` has no memory effects; `pid` is a child this test spawned and has not
    // reaped, so it names no other process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
}

#[test]
fn an_echo_server_process_serves_several_client_processes_and_stops_on_sigterm() {
    let (mut server, addr) = spawn_server(2);

    // An in-test client first: the server answers while the load processes run too.
    let conn = TcpTransport::default()
        .connect(&addr, Duration::from_secs(5))
        .unwrap();
    let mut rpc = RpcClient::new(conn, 1, Duration::from_secs(5));
    assert_eq!(rpc.call(Opcode::ECHO, &[b"ping"]).unwrap().payload, b"ping");

    let clients: Vec<Child> = (0..3)
        .map(|_| {
            Command::new(ECHO)
                .args([
                    "bench",
                    "--connect",
                    &addr,
                    "--clients",
                    "2",
                    "--window",
                    "4",
                ])
                .args(["--duration", "0.3", "--warmup", "0.1", "--json"])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for client in clients {
        let output = client.wait_with_output().unwrap();
        assert!(output.status.success(), "{output:?}");
        let record = BenchRecord::from_json(String::from_utf8(output.stdout).unwrap().trim())
            .expect("bench prints one valid record");
        assert!(record.ops > 0);
        assert_eq!(record.parameters["server"], "external");
    }
    assert_eq!(
        rpc.call(Opcode::ECHO, &[b"still"]).unwrap().payload,
        b"still"
    );

    terminate(&server.0);
    let status = server.0.wait().unwrap();
    assert!(status.success(), "server exited with {status}");
    assert!(
        rpc.call(Opcode::ECHO, &[b"gone"]).is_err(),
        "the stopped server still answered"
    );
}

/// Two network namespaces joined by a veth pair, removed on drop.
struct NetnsPair {
    names: [String; 2],
}

impl NetnsPair {
    /// Creates `a` (10.77.x.1) and `b` (10.77.x.2); `None` where namespaces cannot be made
    /// (not root, no `ip`).
    fn create() -> Option<NetnsPair> {
        let id = std::process::id();
        let names = [format!("fabric-a-{id}"), format!("fabric-b-{id}")];
        let subnet = id % 250;
        let ip = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .status()
                .is_ok_and(|s| s.success())
        };
        if !ip(&["netns", "add", &names[0]]) {
            return None;
        }
        let pair = NetnsPair { names };
        let [a, b] = &pair.names;
        let (va, vb) = (
            format!("fva{}", id % 100_000),
            format!("fvb{}", id % 100_000),
        );
        let addr_a = format!("10.77.{subnet}.1/24");
        let addr_b = format!("10.77.{subnet}.2/24");
        let steps: [&[&str]; 9] = [
            &["netns", "add", b],
            &["link", "add", &va, "type", "veth", "peer", "name", &vb],
            &["link", "set", &va, "netns", a],
            &["link", "set", &vb, "netns", b],
            &["-n", a, "addr", "add", &addr_a, "dev", &va],
            &["-n", b, "addr", "add", &addr_b, "dev", &vb],
            &["-n", a, "link", "set", &va, "up"],
            &["-n", b, "link", "set", &vb, "up"],
            &["-n", a, "link", "set", "lo", "up"],
        ];
        for step in steps {
            assert!(ip(step), "ip {step:?} failed");
        }
        Some(pair)
    }

    fn subnet(&self) -> u32 {
        std::process::id() % 250
    }

    /// `fabric-echo ARGS` inside namespace `which`.
    fn echo(&self, which: usize, args: &[&str]) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.names[which], ECHO])
            .args(args);
        command
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        for name in &self.names {
            // Deleting a namespace also deletes the veth end inside it.
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

#[test]
fn echo_works_across_a_veth_pair_and_an_unreachable_peer_times_out() {
    let Some(pair) = NetnsPair::create() else {
        eprintln!("skipped: cannot create network namespaces here (needs root and iproute2)");
        return;
    };
    let subnet = pair.subnet();
    let listen = format!("10.77.{subnet}.1:7400");
    let mut server = Reaped(
        pair.echo(0, &["serve", "--listen", &listen])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(server.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), format!("listening on {listen}"));

    let output = pair
        .echo(
            1,
            &[
                "bench",
                "--connect",
                &listen,
                "--clients",
                "2",
                "--window",
                "8",
            ],
        )
        .args(["--duration", "0.3", "--warmup", "0.1", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let record = BenchRecord::from_json(String::from_utf8(output.stdout).unwrap().trim()).unwrap();
    assert!(record.ops > 0);

    // 10.77.x.3 is on the link but nobody answers ARP for it: the connect must give up at its
    // timeout, not hang.
    let unreachable = format!("10.77.{subnet}.3:7400");
    let started = std::time::Instant::now();
    let output = pair
        .echo(
            1,
            &[
                "bench",
                "--connect",
                &unreachable,
                "--timeout",
                "0.3",
                "--duration",
                "0.1",
            ],
        )
        .output()
        .unwrap();
    let waited = started.elapsed();
    assert!(!output.status.success(), "connecting to nobody succeeded");
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The connect timeout fired (ARP giving up would say "No route to host", after ~3 s).
    assert!(
        stderr.contains(&unreachable) && stderr.contains("timed out"),
        "{stderr}"
    );
    assert!(waited < Duration::from_secs(10), "took {waited:?}");

    // `ip netns exec` execs fabric-echo in place, so the child's pid is the server's.
    terminate(&server.0);
    assert!(server.0.wait().unwrap().success());
}
