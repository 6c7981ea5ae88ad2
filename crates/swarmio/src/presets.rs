//! Named SSD profiles for the emulator's timing model.
//!
//! A preset holds the targets that SwarmIO's timing model is calibrated with (SwarmIO §II-C
//! "Timing model", §VI-A "Emulator Validation"): sustained random IOPS and unloaded latency per
//! direction, plus the advertised capacity, LBA size and number of scheduling instances.
//! [`Preset::timing`] turns one into a [`TimingConfig`] with SwarmIO's formulas.
//!
//! The IOPS figures are datasheet (or paper) values at `iops_block_bytes`. The timing model
//! applies them per unit of the `block_bytes` passed to [`Preset::timing`], so passing
//! `iops_block_bytes` reproduces the datasheet; a smaller block gets the same IOPS per (smaller)
//! request, a larger request spans several units. Each preset's `datasheet` field says where its
//! numbers come from and which of them are typical values rather than datasheet maxima.

use serde::Serialize;

use crate::timing_model::{DEFAULT_NUM_SCHED_INSTS, Targets, TimingConfig, TimingError};

/// A named SSD profile.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Preset {
    /// Lower-case name used to select the preset (matched case-insensitively).
    pub name: &'static str,
    /// One-line description of the device.
    pub description: &'static str,
    /// Where the numbers come from, and which ones are typical values rather than maxima.
    pub datasheet: &'static str,
    /// Sustained random-read throughput, in millions of requests per second.
    pub read_miops: f64,
    /// Unloaded read latency, in microseconds.
    pub read_latency_us: f64,
    /// Sustained random-write throughput, in millions of requests per second.
    pub write_miops: f64,
    /// Unloaded write latency, in microseconds.
    pub write_latency_us: f64,
    /// Request size at which the IOPS figures are quoted.
    pub iops_block_bytes: u32,
    /// Advertised capacity; how much of it is backed by memory is the backing store's choice.
    pub capacity_bytes: u64,
    /// Logical block size the namespace is formatted with.
    pub lba_size: u32,
    /// Number of scheduling instances; the timing model needs
    /// `latency >= num_sched_insts / IOPS` in both directions.
    pub num_sched_insts: u32,
}

impl Preset {
    /// The preset's targets with `block_bytes` as the unit its IOPS apply to.
    pub fn targets(&self, block_bytes: u32) -> Targets {
        Targets {
            read_miops: self.read_miops,
            read_latency_us: self.read_latency_us,
            write_miops: self.write_miops,
            write_latency_us: self.write_latency_us,
            block_bytes,
            lba_bytes: self.lba_size,
            num_sched_insts: self.num_sched_insts,
        }
    }

    /// The timing configuration for this device with `block_bytes` as the unit its IOPS apply
    /// to (pass `iops_block_bytes` to reproduce the datasheet). Fails if `block_bytes` is zero.
    pub fn timing(&self, block_bytes: u32) -> Result<TimingConfig, TimingError> {
        TimingConfig::from_targets(&self.targets(block_bytes))
    }
}

/// Capacity in bytes of an IDEMA-standard drive of `gigabytes` decimal GB (LBA1-02 formula:
/// 97,696,368 + 1,953,504 * (GB - 50) sectors of 512 bytes).
const fn idema_capacity_bytes(gigabytes: u64) -> u64 {
    (97_696_368 + 1_953_504 * (gigabytes - 50)) * 512
}

const PRESETS: [Preset; 4] = [
    Preset {
        name: "swarmio-default",
        description: "SwarmIO's default target: a future ultra-high-IOPS SSD",
        datasheet: "SwarmIO paper defaults (§V, §VI-B): 40 MIOPS at 512 B, 50 us target latency, \
                    8 scheduling instances; the paper gives no write target, so writes use the \
                    read figures. Capacity 64 GiB is our choice (fits a 128 GiB host; the paper \
                    reserves 128 GB of DRAM for emulation).",
        read_miops: 40.0,
        read_latency_us: 50.0,
        write_miops: 40.0,
        write_latency_us: 50.0,
        iops_block_bytes: 512,
        capacity_bytes: 64 << 30,
        lba_size: 512,
        num_sched_insts: DEFAULT_NUM_SCHED_INSTS,
    },
    Preset {
        name: "solidigm-d7-ps1010",
        description: "Solidigm D7-PS1010 1.92 TB, PCIe 5.0 enterprise TLC SSD",
        datasheet: "Reads: the SwarmIO paper's calibration of its 1.92 TB D7-PS1010 (§VI-A): \
                    50 us minimum latency and 2.47 MIOPS peak random read (measured, not the \
                    datasheet's 3.1M, which is for larger capacities). Writes are not in the \
                    paper: 0.4 MIOPS is the family's datasheet 4 KiB random-write maximum (not \
                    verified for 1.92 TB) and 25 us is an assumed typical latency, chosen at least \
                    the 20 us that 8 instances at 0.4 MIOPS require.",
        read_miops: 2.47,
        read_latency_us: 50.0,
        write_miops: 0.4,
        write_latency_us: 25.0,
        iops_block_bytes: 4096,
        capacity_bytes: idema_capacity_bytes(1920),
        lba_size: 512,
        num_sched_insts: DEFAULT_NUM_SCHED_INSTS,
    },
    Preset {
        name: "samsung-990-pro",
        description: "Samsung 990 Pro 4 TB, PCIe 4.0 client TLC SSD",
        datasheet: "Samsung 990 Pro 4 TB datasheet: up to 1,600K random-read and 1,550K \
                    random-write IOPS (4 KiB, QD32). The latencies (45 us read, 15 us write) are \
                    typical QD1 values, not datasheet maxima (Samsung quotes QD1 IOPS, about 22K \
                    read and 80K write, which imply 45 us and 12.5 us).",
        read_miops: 1.6,
        read_latency_us: 45.0,
        write_miops: 1.55,
        write_latency_us: 15.0,
        iops_block_bytes: 4096,
        capacity_bytes: idema_capacity_bytes(4000),
        lba_size: 512,
        num_sched_insts: DEFAULT_NUM_SCHED_INSTS,
    },
    Preset {
        name: "intel-optane-p5800x",
        description: "Intel Optane SSD DC P5800X 1.6 TB, PCIe 4.0 3D XPoint SSD",
        datasheet: "Intel P5800X product brief: 1.5M random-read and 1.5M random-write IOPS at \
                    4 KiB (4.6M random read at 512 B, not used here), about 5 us typical \
                    latency. 4 scheduling instances, since 8 would need at least 5.3 us at \
                    1.5 MIOPS.",
        read_miops: 1.5,
        read_latency_us: 5.0,
        write_miops: 1.5,
        write_latency_us: 5.0,
        iops_block_bytes: 4096,
        capacity_bytes: idema_capacity_bytes(1600),
        lba_size: 512,
        num_sched_insts: 4,
    },
];

/// All presets.
pub fn presets() -> &'static [Preset] {
    &PRESETS
}

/// The preset called `name` (case-insensitive). Fails with the list of valid names.
pub fn preset(name: &str) -> Result<&'static Preset, PresetError> {
    PRESETS
        .iter()
        .find(|preset| preset.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| PresetError::Unknown {
            name: name.to_owned(),
            valid: PRESETS
                .iter()
                .map(|preset| preset.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Errors in selecting a preset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PresetError {
    /// unknown SSD preset "{name}"; valid presets: {valid}
    #[error("unknown SSD preset \"{name}\"; valid presets: {valid}")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The valid names, comma-separated.
        valid: String,
    },
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::timing_model::IoDirection;

    #[test]
    fn every_preset_yields_a_valid_config_at_its_datasheet_block_size() {
        for preset in presets() {
            let config = preset
                .timing(preset.iops_block_bytes)
                .unwrap_or_else(|err| panic!("{}: {err}", preset.name));
            for (op, miops, latency_us) in [
                (IoDirection::Read, preset.read_miops, preset.read_latency_us),
                (
                    IoDirection::Write,
                    preset.write_miops,
                    preset.write_latency_us,
                ),
            ] {
                let iops = config.max_iops(op);
                assert!(
                    (iops / (miops * 1e6) - 1.0).abs() < 1e-6,
                    "{}: {iops}",
                    preset.name
                );
                let latency_ps = config.params(op).unloaded_latency_ps();
                assert_eq!(
                    latency_ps,
                    (latency_us * 1e6).round() as u64,
                    "{}",
                    preset.name
                );
            }
            assert_eq!(config.unit_bytes(), preset.iops_block_bytes);
            assert_eq!(config.lba_bytes(), preset.lba_size);
            assert_eq!(config.num_sched_insts(), preset.num_sched_insts);
        }
    }

    #[test]
    fn every_preset_describes_a_whole_number_of_blocks() {
        for preset in presets() {
            assert!(preset.capacity_bytes > 0, "{}", preset.name);
            assert_eq!(
                preset.capacity_bytes % u64::from(preset.lba_size),
                0,
                "{}",
                preset.name
            );
            assert_eq!(
                preset.iops_block_bytes % preset.lba_size,
                0,
                "{}",
                preset.name
            );
            assert!(!preset.description.is_empty() && !preset.datasheet.is_empty());
        }
    }

    #[test]
    fn preset_names_are_unique_ignoring_case() {
        let names: HashSet<String> = presets()
            .iter()
            .map(|preset| preset.name.to_ascii_lowercase())
            .collect();
        assert_eq!(names.len(), presets().len());
    }

    #[test]
    fn lookup_ignores_case() {
        assert_eq!(preset("SwarmIO-Default").unwrap().name, "swarmio-default");
        assert_eq!(preset("SOLIDIGM-D7-PS1010").unwrap().read_miops, 2.47);
    }

    #[test]
    fn unknown_name_error_lists_every_valid_name() {
        let message = preset("floppy").unwrap_err().to_string();
        assert!(message.contains("\"floppy\""), "{message}");
        for preset in presets() {
            assert!(message.contains(preset.name), "{message}");
        }
    }

    #[test]
    fn zero_block_size_is_rejected_by_name() {
        let err = preset("samsung-990-pro").unwrap().timing(0).unwrap_err();
        assert!(err.to_string().contains("block_bytes"), "{err}");
    }

    #[test]
    fn swarmio_default_matches_the_paper() {
        let config = preset("swarmio-default").unwrap().timing(512).unwrap();
        let read = config.params(IoDirection::Read);
        assert_eq!(read.sched_delay_ps, 200_000);
        assert_eq!(read.min_delay_ps, 49_800_000);
        assert_eq!(config.num_sched_insts(), 8);
    }

    #[test]
    fn idema_capacities_match_known_drives() {
        // A 4 TB drive has 7,814,037,168 sectors; a 1.92 TB drive 3,750,748,848.
        assert_eq!(idema_capacity_bytes(4000), 7_814_037_168 * 512);
        assert_eq!(idema_capacity_bytes(1920), 3_750_748_848 * 512);
    }
}
