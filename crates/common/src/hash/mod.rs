//! Hashing shared by the distributed systems: placement, GNStor's FTL table and checksums.
//!
//! - [`placement`]: jump consistent hash and rendezvous (highest random weight) hashing, the
//!   "hash-based load-balance function" `hash([VID,VBA], factor)` with which GNStor clients
//!   choose target SSDs and each deEngine re-checks that it is a valid target (GNStor §4.1,
//!   "Access control"); PeakFS uses the same functions to map keys to servers and threads.
//! - [`cuckoo`]: the fixed-capacity cuckoo hash table that maps (VID, VBA) to a PPA inside the
//!   SSD's FTL (GNStor §4.1, "Metadata persistence and recovery"; Pagh & Rodler 2004).
//! - [`crc32c()`] / [`crc32c_append`]: CRC-32C (Castagnoli) checksums, hardware-accelerated
//!   where the CPU supports it (short inputs inline, long ones through the `crc32c` crate).
//!
//! All key mixing goes through [`mix64`], so that a future CUDA twin has one function to
//! reproduce bit for bit.

mod crc32c;
pub mod cuckoo;
pub mod placement;

pub use self::crc32c::{crc32c, crc32c_append};

/// The weyl-sequence increment of SplitMix64 (2^64 / golden ratio, odd).
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// One step of SplitMix64 (Steele, Lea & Flood 2014): a bijective 64-bit mixer with full
/// avalanche, so every input bit affects every output bit. `mix64(0)` is SplitMix64's first
/// output for seed 0, `0xE220_A839_7B1D_CDAF`.
pub const fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(GOLDEN_GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix64_matches_splitmix64_reference_stream_for_seed_zero() {
        // SplitMix64 seeded with 0 emits mix64(0), mix64(γ), mix64(2γ), ... (Vigna's
        // reference generator, splitmix64.c).
        assert_eq!(mix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(mix64(GOLDEN_GAMMA), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(mix64(GOLDEN_GAMMA.wrapping_mul(2)), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn mix64_flips_about_half_the_output_bits_per_input_bit() {
        let mut total = 0u32;
        let samples = 1_000u64;
        for i in 0..samples {
            let x = mix64(i);
            for bit in 0..64 {
                total += (mix64(x) ^ mix64(x ^ (1 << bit))).count_ones();
            }
        }
        let mean = f64::from(total) / (samples as f64 * 64.0);
        assert!((31.0..33.0).contains(&mean), "mean flipped bits {mean}");
    }
}
