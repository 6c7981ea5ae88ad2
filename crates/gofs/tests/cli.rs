//! The `gofs` command line on images made by f2fs-tools: ls, cat, cp-in, cp-out, mkdir, rm,
//! mkfs; the image stays clean for fsck.f2fs.

mod posix_support;

use std::path::Path;
use std::process::{Command, Output};

use posix_support::{fsck_clean, image};

fn gofs(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_gofs"))
        .args(args.iter().map(|a| a.as_ref()))
        .output()
        .expect("run gofs");
    assert!(
        out.status.success(),
        "gofs {:?} failed: {}",
        args.iter().map(|a| a.as_ref()).collect::<Vec<_>>(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn tree(root: &Path) {
    std::fs::create_dir(root.join("docs")).unwrap();
    std::fs::write(root.join("docs/readme"), b"read me\n").unwrap();
}

#[test]
fn ls_and_cat_show_what_sload_loaded() {
    let img = image(64, tree);
    let ls = gofs(&[&"ls", &img.path, &"/docs", &"--json"]);
    let v: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    assert_eq!(v[0]["name"], "readme");
    assert_eq!(v[0]["size"], 8);
    assert_eq!(v[0]["kind"], "file");
    assert_eq!(
        gofs(&[&"cat", &img.path, &"/docs/readme"]).stdout,
        b"read me\n"
    );
}

#[test]
fn cp_in_cp_out_mkdir_and_rm_round_trip() {
    let img = image(64, tree);
    let host = img.dir.path().join("host.bin");
    let data: Vec<u8> = (0..1_500_000u32).map(|i| (i * 31 % 256) as u8).collect();
    std::fs::write(&host, &data).unwrap();
    gofs(&[&"mkdir", &img.path, &"/in"]);
    gofs(&[&"cp-in", &img.path, &host, &"/in/copy"]);
    let back = img.dir.path().join("back.bin");
    gofs(&[&"cp-out", &img.path, &"/in/copy", &back]);
    assert_eq!(std::fs::read(&back).unwrap(), data);
    fsck_clean(&img.path);
    gofs(&[&"rm", &img.path, &"/in/copy"]);
    gofs(&[&"rm", &img.path, &"/in"]);
    let ls = gofs(&[&"ls", &img.path, &"/", &"--json"]);
    let v: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(!names.contains(&"in"), "{names:?}");
    fsck_clean(&img.path);
}

#[test]
fn mkfs_makes_an_empty_file_system_fsck_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("new.img");
    gofs(&[&"mkfs", &img, &"--size", &"67108864"]);
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 64 << 20);
    fsck_clean(&img);
    let ls = gofs(&[&"ls", &img, &"/", &"--json"]);
    let v: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    assert!(v.as_array().unwrap().iter().all(|e| e["name"] != "docs"));
}

/// Runs `gofs fsck IMAGE --json`, returning the exit success and the report.
fn gofs_fsck(img: &Path) -> (bool, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_gofs"))
        .args(["fsck".as_ref(), img.as_os_str(), "--json".as_ref()])
        .output()
        .expect("run gofs");
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.success(), v)
}

#[test]
fn fsck_reads_every_entry_and_fails_on_a_damaged_inode() {
    let img = image(64, tree);
    let (ok, v) = gofs_fsck(&img.path);
    assert!(ok, "{v}");
    assert_eq!(
        (v["dirs"].as_u64(), v["files"].as_u64()),
        (Some(2), Some(1)),
        "{v}"
    );
    assert_eq!(
        (v["bytes"].as_u64(), v["errors"].as_u64()),
        (Some(8), Some(0)),
        "{v}"
    );

    // Overwrite the file's inode block with a pattern no inode has.
    let fs = posix_support::mount(&img.path);
    let ino = posix_support::posix(&fs).lstat("/docs/readme").unwrap().ino;
    let blk = fs.node_address(ino).unwrap();
    posix_support::unmount(fs);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&img.path)
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[0xA5; 4096], u64::from(blk) * 4096).unwrap();
    drop(f);
    let (ok, v) = gofs_fsck(&img.path);
    assert!(!ok, "a damaged inode passed: {v}");
    assert!(v["errors"].as_u64() >= Some(1), "{v}");
}

/// `gofs bench` on a small image with `extra` arguments; its JSON records.
fn small_bench(img: &Path, extra: &[&str]) -> Vec<serde_json::Value> {
    let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"bench", &"--image", &img];
    let small = [
        "--image-mib",
        "256",
        "--file-mib",
        "4",
        "--files",
        "40",
        "--random-ops",
        "100",
        "--seconds",
        "0.05",
        "--json",
    ];
    args.extend(
        small
            .iter()
            .chain(extra)
            .map(|a| a as &dyn AsRef<std::ffi::OsStr>),
    );
    String::from_utf8(gofs(&args).stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn bench_alternates_engine_and_raw_rounds_and_reports_their_median() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("bench.img");
    let records = small_bench(&img, &["--rounds", "3"]);
    // Random reads are also compared with raw reads of the file's footprint (--file-mib 4).
    for (workload, raw, span, suffix) in [
        ("randread-4k", "randread-4096b", 0, ""),
        ("randread-4k", "randread-4096b", 4, "_same_span"),
        ("seqread-4k", "seqread-4096b", 0, ""),
    ] {
        let rec = records.iter().find(|r| r["workload"] == workload).unwrap();
        let rounds: Vec<f64> = rec["extra"][format!("ratio_rounds{suffix}")]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(rounds.len(), 3, "{workload}{suffix}");
        let mut sorted = rounds.clone();
        sorted.sort_by(f64::total_cmp);
        let median = rec["extra"][format!("ratio_to_raw{suffix}")].as_f64();
        assert_eq!(median, Some(sorted[1]), "{workload}{suffix}");
        let raw_rounds: Vec<&serde_json::Value> = records
            .iter()
            .filter(|r| r["workload"] == raw && r["parameters"]["span_mib"] == span)
            .collect();
        let marks: Vec<u64> = raw_rounds
            .iter()
            .map(|r| r["parameters"]["round"].as_u64().unwrap())
            .collect();
        assert_eq!(marks, [0, 1, 2], "{raw} over {span} MiB");
        let mean = raw_rounds
            .iter()
            .map(|r| r["iops"].as_f64().unwrap())
            .sum::<f64>()
            / 3.0;
        let reported = rec["extra"][format!("raw_iops{suffix}")].as_f64().unwrap();
        assert!(
            (reported - mean).abs() <= 1e-9 * mean,
            "{reported} vs {mean}"
        );
    }
    let seq = records
        .iter()
        .find(|r| r["workload"] == "seqread-4k")
        .unwrap();
    assert!(seq["extra"].get("ratio_to_raw_same_span").is_none());
    assert!(!img.exists(), "the image is removed unless --keep-image");
    let none = small_bench(&img, &["--no-raw"]);
    assert!(
        none.iter()
            .all(|r| r["system"] == "gofs" && r["extra"].get("ratio_to_raw").is_none()),
        "{none:?}"
    );
}
