//! gpu-nvme's controller conformance suite, run against the SwarmIO emulator (RAM namespace,
//! a fast timing model so the suite runs quickly).

use std::sync::Arc;

use gpu_nvme::conformance;
use gpu_nvme::controller::Controller;
use swarmio::timing_model::{Targets, TimingConfig};
use swarmio::{SwarmConfig, SwarmIo};

fn factory(lba: u32, blocks: u64) -> Arc<dyn Controller> {
    let targets = Targets {
        read_miops: 2.0,
        read_latency_us: 5.0,
        write_miops: 2.0,
        write_latency_us: 5.0,
        block_bytes: 4096,
        lba_bytes: lba,
        num_sched_insts: 4,
    };
    let timing = TimingConfig::from_targets(&targets).expect("timing");
    let mut config = SwarmConfig::new(u64::from(lba) * blocks, lba, timing);
    config.service_units = 2;
    config.workers_per_unit = 1;
    config.max_io_queues = 8;
    SwarmIo::new(config).expect("emulator")
}

#[test]
fn every_conformance_check_passes() {
    for (name, check) in conformance::CHECKS {
        println!("conformance: {name}");
        check(&factory);
    }
}
