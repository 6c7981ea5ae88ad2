//! The emulator end to end through NVMe queues: volatile write cache and power cuts, injected
//! media errors, latency spikes, and the sustained rate against a low target.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpu_nvme::device::{DeviceConfig, DeviceError, NvmeDevice};
use gpu_nvme::spec::Status;
use swarmio::timing_model::{Targets, TimingConfig};
use swarmio::{SwarmConfig, SwarmIo};

fn emulator(miops: f64, latency_us: f64, instances: u32) -> Arc<SwarmIo> {
    let targets = Targets {
        read_miops: miops,
        read_latency_us: latency_us,
        write_miops: miops,
        write_latency_us: latency_us,
        block_bytes: 4096,
        lba_bytes: 4096,
        num_sched_insts: instances,
    };
    let mut config = SwarmConfig::new(
        64 << 20,
        4096,
        TimingConfig::from_targets(&targets).unwrap(),
    );
    config.service_units = 1;
    config.workers_per_unit = 1;
    config.max_io_queues = 4;
    SwarmIo::new(config).unwrap()
}

fn device(ctrl: &Arc<SwarmIo>) -> NvmeDevice {
    NvmeDevice::open(
        ctrl.clone(),
        DeviceConfig {
            io_queues: 1,
            ..DeviceConfig::default()
        },
    )
    .unwrap()
}

#[test]
fn power_cut_keeps_flushed_writes_and_drops_the_rest() {
    let ctrl = emulator(1.0, 10.0, 2);
    let dev = device(&ctrl);
    let a = vec![0xAAu8; 8192];
    let b = vec![0xBBu8; 8192];
    dev.write_blocks(10, &a).unwrap();
    dev.flush().unwrap();
    dev.write_blocks(10, &b).unwrap();
    dev.write_blocks(100, &b).unwrap();
    let mut back = vec![0u8; 8192];
    dev.read_blocks(10, &mut back).unwrap();
    assert_eq!(back, b, "before the power cut the newest data is read");
    ctrl.power_cut().unwrap();
    dev.read_blocks(10, &mut back).unwrap();
    assert_eq!(back, a, "after the power cut the flushed data is back");
    dev.read_blocks(100, &mut back).unwrap();
    assert!(
        back.iter().all(|&x| x == 0),
        "a write never flushed is gone"
    );
}

#[test]
fn injected_media_errors_fail_reads_of_those_blocks_only() {
    let ctrl = emulator(1.0, 10.0, 2);
    let dev = device(&ctrl);
    ctrl.faults().add_media_error(50..52);
    let mut buf = vec![0u8; 4096];
    let err = dev.read_blocks(51, &mut buf).unwrap_err();
    assert!(
        matches!(err, DeviceError::Status { status, .. } if status == Status::unrecovered_read_error()),
        "{err}"
    );
    let mut two = vec![0u8; 8192];
    assert!(
        dev.read_blocks(49, &mut two).is_err(),
        "a read overlapping the bad block fails"
    );
    dev.read_blocks(52, &mut buf).unwrap();
    dev.write_blocks(50, &buf).unwrap();
    ctrl.faults().clear_media_errors();
    dev.read_blocks(51, &mut buf).unwrap();
}

#[test]
fn injected_write_faults_fail_writes_of_those_blocks_and_leave_them_as_they_were() {
    let ctrl = emulator(1.0, 10.0, 2);
    let dev = device(&ctrl);
    dev.write_blocks(60, &[7u8; 4096]).unwrap();
    ctrl.faults().add_write_fault(60..61);
    let err = dev.write_blocks(59, &[9u8; 8192]).unwrap_err();
    assert!(
        matches!(err, DeviceError::Status { status, .. } if status == Status::write_fault()),
        "{err}"
    );
    let mut buf = vec![0u8; 4096];
    dev.read_blocks(60, &mut buf).unwrap();
    assert!(
        buf.iter().all(|&x| x == 7),
        "the failed write changed the block"
    );
    dev.write_blocks(61, &[9u8; 4096]).unwrap();
    ctrl.faults().clear_media_errors();
    dev.write_blocks(60, &[9u8; 4096]).unwrap();
    dev.read_blocks(60, &mut buf).unwrap();
    assert!(buf.iter().all(|&x| x == 9));
}

#[test]
fn latency_spikes_delay_the_chosen_commands() {
    let ctrl = emulator(1.0, 10.0, 2);
    let dev = device(&ctrl);
    let mut buf = vec![0u8; 4096];
    ctrl.faults()
        .set_latency_spike(1, Duration::from_millis(30));
    let t = Instant::now();
    dev.read_blocks(0, &mut buf).unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(30),
        "spiked read took {:?}",
        t.elapsed()
    );
    ctrl.faults().set_latency_spike(0, Duration::ZERO);
    let t = Instant::now();
    dev.read_blocks(0, &mut buf).unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(30),
        "unspiked read took {:?}",
        t.elapsed()
    );
}

#[test]
fn completion_is_never_earlier_than_the_model_latency() {
    let ctrl = emulator(0.5, 200.0, 1);
    let dev = device(&ctrl);
    let mut buf = vec![0u8; 4096];
    for i in 0..20 {
        let t = Instant::now();
        dev.read_blocks(i, &mut buf).unwrap();
        assert!(
            t.elapsed() >= Duration::from_micros(200),
            "read {i} took {:?}",
            t.elapsed()
        );
    }
}

#[test]
fn bad_configurations_name_the_parameter() {
    let targets = Targets {
        read_miops: 1.0,
        read_latency_us: 1.0,
        write_miops: 1.0,
        write_latency_us: 1.0,
        block_bytes: 4096,
        lba_bytes: 4096,
        num_sched_insts: 8,
    };
    let err = TimingConfig::from_targets(&targets)
        .unwrap_err()
        .to_string();
    assert!(err.contains("min_delay"), "{err}");
    let zero = Targets {
        num_sched_insts: 0,
        ..targets
    };
    assert!(
        TimingConfig::from_targets(&zero)
            .unwrap_err()
            .to_string()
            .contains("num_sched_insts")
    );
    let ok = Targets {
        read_latency_us: 50.0,
        write_latency_us: 50.0,
        ..targets
    };
    let timing = TimingConfig::from_targets(&ok).unwrap();
    let err = SwarmIo::new(SwarmConfig::new((1 << 20) + 1, 4096, timing))
        .unwrap_err()
        .to_string();
    assert!(err.contains("capacity"), "{err}");
    let mut c = SwarmConfig::new(1 << 20, 4096, timing);
    c.service_units = 0;
    assert!(
        SwarmIo::new(c)
            .unwrap_err()
            .to_string()
            .contains("service_units")
    );
}

#[test]
fn baseline_and_pinned_modes_serve_the_same_data() {
    // Baseline (NVMeVirt-like: one dispatcher, per-request updates and copies) and pinned
    // SwarmIO mode are only different schedules of the same work: every byte must match.
    let build = |baseline: bool, pinned: bool| {
        let targets = Targets {
            read_miops: 1.0,
            read_latency_us: 5.0,
            write_miops: 1.0,
            write_latency_us: 5.0,
            block_bytes: 4096,
            lba_bytes: 4096,
            num_sched_insts: 4,
        };
        let mut config = SwarmConfig::new(
            16 << 20,
            4096,
            TimingConfig::from_targets(&targets).unwrap(),
        );
        config.workers_per_unit = 2;
        config.max_io_queues = 4;
        config.pin_threads = pinned;
        if baseline {
            config = config.baseline();
            assert!(!config.batched_copies && config.service_units == 1);
        }
        SwarmIo::new(config).unwrap()
    };
    for (baseline, pinned) in [(true, false), (false, true)] {
        let ctrl = build(baseline, pinned);
        let dev = device(&ctrl);
        let data: Vec<u8> = (0..64 * 4096).map(|i| (i * 7 % 251) as u8).collect();
        dev.write_blocks(3, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        dev.read_blocks(3, &mut back).unwrap();
        assert_eq!(back, data, "baseline {baseline}, pinned {pinned}");
    }
}
