//! `nvme-bench --span-mib`: a run's accesses stay within the first MiB it names.

use clap::Parser;
use gpu_nvme::bench::{self, BenchArgs};
use gpu_nvme::controller::FileBackend;
use gpu_nvme::cuda::Gpu;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

#[test]
fn random_writes_with_a_span_touch_only_that_span() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    let args = Cli::parse_from([
        "t",
        "--threads",
        "1",
        "--queues",
        "1",
        "--workers",
        "1",
        "--lba-size",
        "4096",
        "--block-size",
        "4096",
        "--inflight",
        "4",
        "--op",
        "write",
        "--verify",
        "--duration",
        "0.3",
        "--span-mib",
        "1",
    ])
    .bench;
    let factory = |b: &BenchArgs, gpu: Option<&Gpu>, queues: u16| {
        bench::file_controller(&path, FileBackend::Psync, b, gpu, queues)
    };
    let (record, _) = bench::run(&args, "gpu-nvme", &factory).unwrap();
    assert!(record.ops > 100, "{} writes", record.ops);
    assert_eq!(record.parameters["span_mib"], 1);
    let data = std::fs::read(&path).unwrap();
    let written = |range: std::ops::Range<usize>| {
        data[range]
            .chunks(4096)
            .filter(|b| b.iter().any(|&x| x != 0))
            .count()
    };
    assert!(written(0..1 << 20) > 64, "the span was written");
    assert_eq!(written(1 << 20..data.len()), 0, "nothing past the span");
}
