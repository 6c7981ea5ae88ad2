// TEMPORARY timing (not committed): stat cost with many files open in one client.
use std::path::Path;
use std::time::{Duration, Instant};
use peakfs::client::{Client, ClientOptions};
use peakfs::local_cluster::{LocalCluster, LocalClusterConfig};

#[test]
fn stat_with_open_files() {
    let dir = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_peakfs-server"));
    let cfg = LocalClusterConfig {
        bin_dir: bin.parent().unwrap().to_path_buf(),
        work_dir: dir.path().to_path_buf(),
        servers: 1,
        workers: 1,
        data_bytes: 1 << 30,
        server_args: vec!["--no-pin".into()],
        server_cpus: Vec::new(),
    };
    let cluster = LocalCluster::start(&cfg).unwrap();
    let opts = ClientOptions { timeout: Duration::from_secs(5), ready_wait: Duration::from_secs(15), ..Default::default() };
    let mut c = Client::connect(&cluster.master_addr().to_string(), opts).unwrap();
    c.mkdir("/d", 0o755, None).unwrap();
    let n = 20_000;
    let mut fds = Vec::new();
    let time = |c: &mut Client| {
        let t = Instant::now();
        for i in 0..2000 { c.stat(&format!("/d/f{}", i % 100)).unwrap(); }
        t.elapsed().as_secs_f64() / 2000.0 * 1e6
    };
    for i in 0..100 { let fd = c.create(&format!("/d/f{i}"), 0o644).unwrap(); c.close(fd).unwrap(); }
    let t0 = time(&mut c);
    for i in 0..n { fds.push(c.open(&format!("/d/g{i}"), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap()); }
    let t1 = time(&mut c);
    eprintln!("RESULT stat: {t0:.1} us with 0 open, {t1:.1} us with {n} open");
}
