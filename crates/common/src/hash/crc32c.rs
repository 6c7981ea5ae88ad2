//! CRC-32C (Castagnoli): the checksums of pRPC frame headers, WAL frames and on-disk records.
//!
//! Most inputs here are short (a frame header is 20 bytes, a WAL frame of a create about 200),
//! where the `crc32c` crate's per-call set-up (its dispatch, byte-wise alignment and the
//! three-way split meant for long buffers) cost 140-340 instructions, several times the CRC
//! itself (callgrind of a PeakFS server under creates). Short inputs go through an inline
//! SSE4.2 loop; long ones, and CPUs without SSE4.2, through the crate.

/// Inputs up to this many bytes take the inline loop; the crate's three-way interleaving wins
/// above it.
const SHORT: usize = 512;

/// CRC-32C of `data`; `crc32c(b"123456789") == 0xE306_9283`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// Extends a CRC-32C: `crc32c_append(crc32c(a), b) == crc32c(a ++ b)`.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() <= SHORT && std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2, checked just above (a cached flag after the first call).
        return unsafe { short_sse42(crc, data) };
    }
    ::crc32c::crc32c_append(crc, data)
}

/// The CRC of `data` with the SSE4.2 `crc32` instruction, eight bytes at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn short_sse42(crc: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u8, _mm_crc32_u64};
    let mut c = u64::from(!crc);
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        c = _mm_crc32_u64(c, u64::from_le_bytes(b));
    }
    // The instruction leaves the upper half zero: the CRC is the low 32 bits.
    let mut c = c as u32;
    for &b in words.remainder() {
        c = _mm_crc32_u8(c, b);
    }
    !c
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn check_value_and_appends() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c_append(crc32c(b"1234"), b"56789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    proptest! {
        /// The inline loop and the crate agree on every length around the words and the
        /// short/long boundary, from any starting CRC.
        #[test]
        fn the_short_path_agrees_with_the_crate(
            data in proptest::collection::vec(any::<u8>(), 0..(2 * SHORT + 17)),
            seed in any::<u32>(),
        ) {
            prop_assert_eq!(crc32c_append(seed, &data), ::crc32c::crc32c_append(seed, &data));
            prop_assert_eq!(crc32c(&data), ::crc32c::crc32c(&data));
        }
    }
}
