//! `peakfs bench` end to end on a real cluster: the driver starts its worker processes, every
//! phase runs in all of them, and each record counts what the workers did.

mod client_support;

use client_support::Cluster;
use peakfs::bench::{BenchConfig, drive};

/// Two processes of the bench over `cluster` in directory `root`, one request in flight each
/// (4 in the pipelined echo), no IOR bytes.
fn config(cluster: &Cluster, root: &str) -> BenchConfig {
    BenchConfig {
        master: cluster.master_addr.clone(),
        procs: 2,
        files: 10,
        stride: 0,
        echo_ops: 100,
        echo_window: 4,
        ior_bytes: 0,
        root: root.into(),
        spawn_prefix: String::new(),
        spread_dirs: false,
        reply_poll_us: 0,
        iterations: 1,
    }
}

#[test]
fn every_phase_counts_the_operations_of_all_processes_at_one_request_each() {
    let cluster = Cluster::start(2);
    // The driver waits for the cluster view like any client.
    drop(cluster.client());
    let cfg = BenchConfig {
        files: 40,
        echo_ops: 300,
        // The worker processes poll for their replies: the bench runs the same with them.
        reply_poll_us: 20,
        ..config(&cluster, "/bench-test")
    };
    let only = [
        "create-empty".to_string(),
        "stat-empty".into(),
        "remove-empty".into(),
    ];
    let records = drive(&cfg, env!("CARGO_BIN_EXE_peakfs").as_ref(), &only).unwrap();
    let workloads: Vec<&str> = records.iter().map(|r| r.workload.as_str()).collect();
    assert_eq!(
        workloads,
        [
            "echo-sync",
            "echo-pipelined",
            "echo-spread",
            "echo-routed",
            "echo-home",
            "mdtest-create-empty-private",
            "mdtest-stat-empty-private",
            "mdtest-remove-empty-private",
            "mdtest-create-empty-bigdir",
            "mdtest-stat-empty-bigdir",
            "mdtest-remove-empty-bigdir",
        ]
    );
    // Both processes' private directories are on slices of the cluster: one or both per slice.
    let home = records.iter().find(|r| r.workload == "echo-home").unwrap();
    let crowd = home.extra["max_procs_per_slice"].as_f64().unwrap();
    assert!((1.0..=2.0).contains(&crowd), "{crowd}");
    for r in &records {
        let per_proc = if r.workload.starts_with("echo") {
            cfg.echo_ops
        } else {
            cfg.files as u64
        };
        assert_eq!(r.ops, per_proc * cfg.procs as u64, "{}", r.workload);
        // One request per operation; a process's first operation in a directory may look the
        // directory up first (its dentry cache starts cold).
        let rpcs = r.extra["rpcs_per_op"].as_f64().unwrap();
        let warm_up = 2.0 / cfg.files as f64;
        assert!(
            (1.0..=1.0 + warm_up).contains(&rpcs),
            "{}: {rpcs}",
            r.workload
        );
        assert_eq!(r.parameters["reply_poll_us"], 20, "{}", r.workload);
        let secs = |k: &str| r.extra[k].as_f64().unwrap();
        let (fastest, slowest) = (secs("fastest_proc_s"), secs("slowest_proc_s"));
        assert!(
            0.0 < fastest && fastest <= slowest && slowest <= r.duration_s,
            "{}: {fastest} {slowest} {}",
            r.workload,
            r.duration_s
        );
        assert!(
            r.extra.contains_key("fraction_of_echo_sync"),
            "{}",
            r.workload
        );
        // The client threads' CPU time fits in their spans (with a scheduler tick each of
        // slack: getrusage may count in ticks).
        let cpu_us = r.extra["client_cpu_us_per_op"].as_f64().unwrap() * r.ops as f64;
        let spans_us = (slowest * 1e6 + 10_000.0) * cfg.procs as f64;
        assert!(
            (0.0..=spans_us).contains(&cpu_us),
            "{}: {cpu_us} us of CPU against {spans_us} us of processes",
            r.workload
        );
        let sys_us = r.extra["client_sys_us_per_op"].as_f64().unwrap() * r.ops as f64;
        assert!(
            (0.0..=cpu_us).contains(&sys_us),
            "{}: {sys_us} us in the kernel",
            r.workload
        );
        // A process sleeps at most about once per small reply it waits for (a large one may
        // arrive in pieces).
        let sleeps = r.extra["client_sleeps_per_op"].as_f64().unwrap();
        let most = r.extra["rpcs_per_op"].as_f64().unwrap() * 1.5;
        assert!(
            sleeps >= 0.0 && (r.workload.starts_with("ior") || sleeps <= most),
            "{}: {sleeps} sleeps per operation",
            r.workload
        );
        // The phases that run one operation at a time time each one, in every process.
        let timed = r.workload.starts_with("mdtest")
            || r.workload == "echo-spread"
            || r.workload == "echo-routed";
        match (&r.latency_us, timed) {
            (Some(l), true) => {
                assert_eq!(l.samples, r.ops, "{}", r.workload);
                // A process's operations took no longer than the process itself.
                let spent_us = l.mean * r.ops as f64;
                let spans_us = slowest * 1e6 * cfg.procs as f64;
                assert!(
                    0.0 < l.p50 && spent_us <= spans_us,
                    "{}: {l:?} against {spans_us} us of processes",
                    r.workload
                );
            }
            (None, false) => {}
            (l, _) => panic!("{}: latency {l:?}", r.workload),
        }
    }
}

#[test]
fn creates_of_both_sizes_run_back_to_back_and_a_stride_stats_the_files_of_another_process() {
    let cluster = Cluster::start(2);
    drop(cluster.client());
    let cfg = BenchConfig {
        procs: 3,
        files: 12,
        // Each stat checks the size of process (rank + 1)'s file of its kind.
        stride: 1,
        echo_ops: 20,
        ..config(&cluster, "/bench-stride")
    };
    // No remove phase: the empty files are still there when the 3,901-byte ones are made.
    let only = ["create".to_string(), "stat".into()];
    let records = drive(&cfg, env!("CARGO_BIN_EXE_peakfs").as_ref(), &only).unwrap();
    let mdtest: Vec<&str> = records
        .iter()
        .map(|r| r.workload.as_str())
        .filter(|w| w.starts_with("mdtest"))
        .collect();
    assert_eq!(
        mdtest,
        [
            "mdtest-create-empty-private",
            "mdtest-stat-empty-private",
            "mdtest-create-3901-private",
            "mdtest-stat-3901-private",
            "mdtest-create-empty-bigdir",
            "mdtest-stat-empty-bigdir",
            "mdtest-create-3901-bigdir",
            "mdtest-stat-3901-bigdir",
        ]
    );
    for r in records.iter().filter(|r| r.workload.starts_with("mdtest")) {
        assert_eq!(r.ops, 36, "{}", r.workload);
        assert_eq!(r.parameters["stride"], 1, "{}", r.workload);
    }
}

#[test]
fn iterations_make_new_files_each_time_and_pair_each_fraction_with_its_own_ceiling() {
    let cluster = Cluster::start(2);
    let mut client = cluster.client();
    let cfg = BenchConfig {
        files: 15,
        echo_ops: 50,
        iterations: 3,
        ..config(&cluster, "/bench-iterations")
    };
    // No remove phase: an iteration that reused the names of the one before would fail its
    // exclusive creates, and one that stat'ed them would check the wrong files.
    let only = [
        "create-3901".to_string(),
        "stat-3901".into(),
        "ior-n1".into(),
    ];
    let cfg = BenchConfig {
        ior_bytes: 1 << 20,
        ..cfg
    };
    let records = drive(&cfg, env!("CARGO_BIN_EXE_peakfs").as_ref(), &only).unwrap();
    for r in &records {
        assert_eq!(r.parameters["iterations"], 3, "{}", r.workload);
        let per_proc = if r.workload.starts_with("echo") {
            cfg.echo_ops
        } else if r.workload.starts_with("mdtest") {
            cfg.files as u64
        } else if r.workload.starts_with("ior") {
            cfg.ior_bytes / 47_008
        } else {
            cfg.ior_bytes / (256 << 10)
        };
        assert_eq!(r.ops, 3 * per_proc * cfg.procs as u64, "{}", r.workload);
        let extra = |k: &str| {
            r.extra[k]
                .as_f64()
                .unwrap_or_else(|| panic!("{}: {k}", r.workload))
        };
        let (low, high) = (extra("iops_min"), extra("iops_max"));
        assert!(
            low <= r.iops && r.iops <= high,
            "{}: {low} {} {high}",
            r.workload,
            r.iops
        );
        for key in ["fraction_of_echo_sync", "fraction_of_echo_pipelined"] {
            let (low, mid, high) = (
                extra(&format!("{key}_min")),
                extra(key),
                extra(&format!("{key}_max")),
            );
            assert!(
                0.0 < low && low <= mid && mid <= high,
                "{}: {key} {low} {mid} {high}",
                r.workload
            );
        }
    }
    // echo-sync against itself in each iteration: exactly 1 every time.
    let sync = records.iter().find(|r| r.workload == "echo-sync").unwrap();
    for key in [
        "fraction_of_echo_sync",
        "fraction_of_echo_sync_min",
        "fraction_of_echo_sync_max",
    ] {
        assert_eq!(sync.extra[key].as_f64(), Some(1.0), "{key}");
    }
    // Every iteration's files are there, 3,901 bytes each, under names of their own.
    let private = client.readdir("/bench-iterations/p0").unwrap();
    assert_eq!(private.len(), 3 * cfg.files, "{private:?}");
    for name in ["s0", "s1.0", "s2.14"] {
        let a = client
            .stat(&format!("/bench-iterations/p0/{name}"))
            .unwrap();
        assert_eq!(a.size, 3901, "{name}");
    }
    let big = client.readdir("/bench-iterations/big").unwrap();
    assert_eq!(big.len(), 3 * cfg.files * cfg.procs);
    let shared = client.readdir("/bench-iterations/n1").unwrap();
    assert_eq!(
        shared.len(),
        3,
        "one shared N-1 file per iteration: {shared:?}"
    );
}

#[test]
fn worker_processes_exit_by_themselves_when_the_driver_is_done() {
    let cluster = Cluster::start(1);
    drop(cluster.client());
    // Each worker runs under a wrapper that notes the worker's exit status once it returns:
    // a worker killed by the driver (or a wrapper killed with it) leaves no note, and a
    // profiler in the wrapper's place would write no profile.
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("w.sh");
    std::fs::write(
        &wrapper,
        format!("\"$@\"\necho $? > {}/exit.$$\n", dir.path().display()),
    )
    .unwrap();
    let cfg = BenchConfig {
        files: 1,
        echo_ops: 50,
        spawn_prefix: format!("bash {}", wrapper.display()),
        ..config(&cluster, "/bench-exit")
    };
    let records = drive(
        &cfg,
        env!("CARGO_BIN_EXE_peakfs").as_ref(),
        &["echo-sync".into()],
    )
    .unwrap();
    assert_eq!(records.len(), 5, "the echo phases");
    let notes: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("exit."))
        .map(|e| {
            std::fs::read_to_string(e.path())
                .unwrap()
                .trim()
                .to_string()
        })
        .collect();
    assert_eq!(notes, ["0", "0"], "both workers exited with status 0");
}

#[test]
fn bench_with_a_local_cluster_needs_nothing_running_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_peakfs"))
        .args([
            "--master",
            "127.0.0.1:1", // ignored: the run starts its own cluster
            "bench",
            "--local-cluster",
            "2",
            "--local-workers",
            "1",
            "--local-data-mib",
            "64",
            // The servers' controllers copy to and from their mapped data files.
            "--local-backend",
            "mmap",
            "--local-dir",
            dir.path().to_str().unwrap(),
            "--procs",
            "2",
            "--files",
            "20",
            "--echo-ops",
            "100",
            "--ior-mib",
            "1",
            "--only",
            "create-empty-private",
            "--only",
            "ior-nn",
            "--json",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let records: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = records
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "echo-sync",
            "echo-pipelined",
            "echo-spread",
            "echo-routed",
            "echo-home",
            "mdtest-create-empty-private",
            "xfer-write",
            "xfer-read",
            "ior-nn-write",
            "ior-nn-read"
        ]
    );
    assert!(records.iter().all(|r| r["parameters"]["servers"] == 2));
    // The transfer ceilings move as many bytes as the IOR phases (1 MiB per process), and
    // each IOR phase is reported against the one of its direction.
    for r in &records[6..] {
        assert_eq!(r["bytes"], 2 << 20, "{}", r["workload"]);
    }
    for (name, key) in [
        ("ior-nn-write", "fraction_of_xfer_write"),
        ("ior-nn-read", "fraction_of_xfer_read"),
    ] {
        let r = records.iter().find(|r| r["workload"] == name).unwrap();
        let f = r["extra"][key].as_f64().unwrap();
        assert!(f > 0.0 && f.is_finite(), "{name}: {f}");
    }
    // The cluster's folder (data files and logs) is gone with it.
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn local_logs_keep_the_servers_last_lines_with_the_hop_times_of_forwarded_requests() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_peakfs"))
        // The stopping workers' counts are info lines.
        .env("RUST_LOG", "info")
        .args(["bench", "--local-cluster", "1", "--local-workers", "2"])
        .args(["--local-data-mib", "64", "--local-dir"])
        .arg(dir.path())
        .arg("--local-logs")
        .arg(&logs)
        // A bigdir's entries hash over both workers: about half of the creates are forwarded.
        .args(["--procs", "1", "--files", "200", "--echo-ops", "20"])
        .args(["--only", "create-empty-bigdir", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server_log = std::fs::read_to_string(logs.join("s0.log")).unwrap();
    assert!(logs.join("master.log").is_file());
    let stopped: Vec<&str> = server_log
        .lines()
        .filter(|l| l.contains("worker stopped"))
        .collect();
    assert_eq!(stopped.len(), 2, "one line per worker:\n{server_log}");
    // `key="mean/p50/p99"` in microseconds, or `-` without samples.
    let timed = |line: &str, key: &str| -> Option<Vec<f64>> {
        let value = line
            .split(&format!(" {key}=\""))
            .nth(1)?
            .split('"')
            .next()?;
        value.split('/').map(|v| v.parse().ok()).collect()
    };
    // `key=number`.
    let field = |line: &str, key: &str| -> Option<f64> {
        line.split(&format!(" {key}="))
            .nth(1)?
            .split(' ')
            .next()?
            .parse()
            .ok()
    };
    let forwarded = |line: &str| field(line, "forwarded").unwrap() as u64;
    assert!(
        stopped.iter().map(|l| forwarded(l)).sum::<u64>() > 50,
        "{stopped:?}"
    );
    for (i, line) in stopped.iter().enumerate() {
        // A worker that forwarded timed each whole hop; the other one (with two workers, the
        // owner of every forward) timed their wait in its ring and its work.
        let other = stopped[1 - i];
        let keys: &[(&str, &str)] = if forwarded(line) > 0 {
            &[
                (line, "hop_us"),
                (other, "hop_queued_us"),
                (other, "hop_served_us"),
            ]
        } else {
            &[]
        };
        for (line, key) in keys {
            let t = timed(line, key).unwrap_or_else(|| panic!("{key} in {line}"));
            assert!(t.len() == 3 && t.iter().all(|t| *t > 0.0), "{key}: {t:?}");
        }
        if forwarded(line) == 0 {
            assert!(line.contains(r#" hop_us="-""#), "{line}");
        }
        // Both slices took creates: each worker logged after replies, and gives its store's
        // counters.
        for key in ["checkpoints", "icache_write_backs", "icache_misses"] {
            assert!(field(line, key).is_some(), "{key} in {line}");
        }
        // Log work: `max_us/total_ms/stalls/stalled_ms`, the settle's and the pump's. The
        // settles logged creates; stalls are rounds over 50 us, so no more of them than that
        // the time they took allows.
        for key in ["settle_max_us_ms_stalls_ms", "pump_max_us_ms_stalls_ms"] {
            let [max_us, total_ms, stalls, stalled_ms] = timed(line, key)
                .and_then(|t| <[f64; 4]>::try_from(t).ok())
                .unwrap_or_else(|| panic!("{key} in {line}"));
            assert!(max_us <= total_ms * 1e3 + 50.0, "{key}: {line}");
            assert!(stalled_ms <= total_ms + 0.1, "{key}: {line}");
            assert!(stalls * 0.05 <= stalled_ms + 0.1, "{key}: {line}");
            if key.starts_with("settle") {
                assert!(max_us > 0.0, "{line}");
            }
        }
        // The store was formatted with a checkpoint. Its stop is not the workers' (their
        // stops count from when the store serves), so the longest one may be 0 here; the
        // total is in ms with one decimal: it may print as 0.0.
        assert!(
            field(line, "checkpoints").is_some_and(|n| n >= 1.0),
            "{line}"
        );
        assert!(
            field(line, "checkpoint_max_us").is_some_and(|us| us >= 0.0),
            "{line}"
        );
        assert!(
            field(line, "checkpoint_ms").is_some_and(|ms| ms >= 0.0),
            "{line}"
        );
        // What the thread cost: time in rounds that served something, and its page faults
        // and context switches (getrusage).
        assert!(field(line, "busy_ms").is_some_and(|ms| ms > 0.0), "{line}");
        for key in ["minor_faults", "voluntary_switches", "involuntary_switches"] {
            assert!(
                field(line, key).is_some_and(|v| v >= 0.0),
                "{key} in {line}"
            );
        }
    }
    // Every client frame arrived at one worker: the creates and four echo phases' echoes.
    let frames: f64 = stopped.iter().map(|l| field(l, "frames").unwrap()).sum();
    assert!(frames >= (200 + 4 * 20) as f64, "{frames}: {stopped:?}");
}

#[test]
fn bench_with_a_pinned_local_cluster_runs_and_is_refused_where_no_core_is_left_for_clients() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if cores < 2 {
        println!("skipped: --local-pin needs 2 cores, this machine has {cores}");
        return;
    }
    let run = |workers: &str, extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_peakfs"))
            .args(["bench", "--local-cluster", "1", "--local-workers", workers])
            .args(["--local-data-mib", "64", "--procs", "1", "--files", "20"])
            .args([
                "--echo-ops",
                "100",
                "--only",
                "create-empty-private",
                "--json",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run("1", &["--local-pin"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .count();
    assert_eq!(records, 6, "five echo phases and the create phase");
    // One worker per core and nothing left for the clients: refused before anything starts.
    let out = run(&cores.to_string(), &["--local-pin"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--local-pin"));
}

#[test]
fn the_slice_bench_times_each_request_kind_over_all_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_peakfs-slice-bench"))
        .args([
            "--files",
            "300",
            "--rounds",
            "2",
            "--other-mib",
            "2",
            "--data-mib",
            "256",
            "--writes",
            "40",
            "--backend",
            "mmap",
        ])
        .arg("--dir")
        .arg(dir.path())
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records: Vec<common::bench::BenchRecord> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let workloads: Vec<&str> = records.iter().map(|r| r.workload.as_str()).collect();
    assert_eq!(
        workloads,
        [
            "create",
            "write-3901",
            "lookup",
            "unlink",
            "write-262144",
            "write-47008"
        ]
    );
    for r in &records {
        let (ops, bytes) = match r.workload.strip_prefix("write-") {
            // One small file into each file made.
            Some("3901") => (300, 300 * 3901),
            Some(size) => (40, 40 * size.parse::<u64>().unwrap()),
            None => (300, 0),
        };
        assert_eq!((r.ops, r.bytes), (ops, bytes), "{}", r.workload);
        assert!(r.duration_s > 0.0);
        // What a client waits for is part of the whole request.
        let before = r.extra["ns_before_reply_per_op"].as_f64().unwrap();
        assert!(before > 0.0 && before <= r.extra["ns_per_op"].as_f64().unwrap());
        // 2 MiB in 64 KiB blocks, the first in the inode: 31 in the hashtable (the data
        // workloads' blocks are dropped after each round).
        assert_eq!(r.parameters["other_blocks"], 31);
    }
    // The bench's folder and data file are gone with it.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_local_server_that_does_not_start_is_reported_with_the_end_of_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_peakfs"))
        .args(["bench", "--local-cluster", "1", "--local-dir"])
        .arg(dir.path())
        .arg("--local-server-arg=--no-such-flag")
        .output()
        .unwrap();
    assert!(!out.status.success());
    // The log lies in the cluster's folder, removed with it: what the server said is in the
    // error itself.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("did not start"), "{stderr}");
    assert!(stderr.contains("--no-such-flag"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
