//! Namespace geometry (NVM Command Set 1.x §4.1.5 "LBA Format" and §3.2.x range checks): the
//! logical block size and capacity a controller exposes, and the LBA range checks every Read,
//! Write, Write Zeroes and Dataset Management range goes through.

use super::status::Status;

/// A supported logical block data size (LBADS, log2 of the block size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LbaFormat {
    /// 512-byte blocks (LBADS 9), SwarmIO's default.
    Bytes512,
    /// 4096-byte blocks (LBADS 12).
    Bytes4096,
}

impl LbaFormat {
    /// LBA Data Size: log2 of the block size.
    pub const fn lbads(self) -> u8 {
        match self {
            Self::Bytes512 => 9,
            Self::Bytes4096 => 12,
        }
    }

    /// Block size in bytes.
    pub const fn block_size(self) -> u32 {
        1 << self.lbads()
    }

    /// The format with LBA Data Size `lbads` (9 or 12).
    pub fn from_lbads(lbads: u8) -> Result<Self, GeometryError> {
        match lbads {
            9 => Ok(Self::Bytes512),
            12 => Ok(Self::Bytes4096),
            _ => Err(GeometryError::UnsupportedLbads(lbads)),
        }
    }

    /// The format with `bytes`-byte blocks (512 or 4096).
    pub fn from_block_size(bytes: u32) -> Result<Self, GeometryError> {
        match bytes {
            512 => Ok(Self::Bytes512),
            4096 => Ok(Self::Bytes4096),
            _ => Err(GeometryError::UnsupportedBlockSize(bytes)),
        }
    }
}

/// A namespace geometry that cannot exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    /// LBA data size 2^{0} is not supported (only 512 and 4096-byte blocks)
    #[error("LBA data size 2^{0} is not supported (only 512 and 4096-byte blocks)")]
    UnsupportedLbads(u8),
    /// block size {0} is not supported (only 512 and 4096 bytes)
    #[error("block size {0} is not supported (only 512 and 4096 bytes)")]
    UnsupportedBlockSize(u32),
    /// a namespace needs at least one block
    #[error("a namespace needs at least one block")]
    Empty,
    /// {blocks} blocks of {block_size} bytes do not fit a 64-bit byte offset
    #[error("{blocks} blocks of {block_size} bytes do not fit a 64-bit byte offset")]
    TooLarge {
        /// Capacity asked for.
        blocks: u64,
        /// Block size.
        block_size: u32,
    },
}

/// An LBA range a command may not touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// a range of zero blocks
    #[error("a range of zero blocks")]
    ZeroBlocks,
    /// {blocks} blocks from LBA {slba} exceed the capacity of {capacity} blocks
    #[error("{blocks} blocks from LBA {slba} exceed the capacity of {capacity} blocks")]
    OutOfRange {
        /// First LBA.
        slba: u64,
        /// Blocks asked for.
        blocks: u64,
        /// Namespace capacity in blocks.
        capacity: u64,
    },
}

impl RangeError {
    /// The status a controller completes the command with: Invalid Field for an empty range,
    /// LBA Out of Range otherwise.
    pub const fn status(&self) -> Status {
        match self {
            Self::ZeroBlocks => Status::invalid_field(),
            Self::OutOfRange { .. } => Status::lba_out_of_range(),
        }
    }
}

/// Block size and capacity of a namespace; every byte offset of it fits in a `u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NamespaceGeometry {
    format: LbaFormat,
    capacity_blocks: u64,
}

impl NamespaceGeometry {
    /// A namespace of `capacity_blocks` (> 0) blocks of `format`.
    pub fn new(format: LbaFormat, capacity_blocks: u64) -> Result<Self, GeometryError> {
        if capacity_blocks == 0 {
            return Err(GeometryError::Empty);
        }
        if capacity_blocks
            .checked_mul(u64::from(format.block_size()))
            .is_none()
        {
            return Err(GeometryError::TooLarge {
                blocks: capacity_blocks,
                block_size: format.block_size(),
            });
        }
        Ok(Self {
            format,
            capacity_blocks,
        })
    }

    /// The LBA format.
    pub const fn format(&self) -> LbaFormat {
        self.format
    }

    /// Block size in bytes.
    pub const fn block_size(&self) -> u32 {
        self.format.block_size()
    }

    /// Capacity in blocks (NSZE).
    pub const fn capacity_blocks(&self) -> u64 {
        self.capacity_blocks
    }

    /// Capacity in bytes.
    pub const fn capacity_bytes(&self) -> u64 {
        // Checked in `new`.
        self.capacity_blocks << self.format.lbads()
    }

    /// Byte offset of block `lba`, which must exist.
    pub fn lba_to_byte(&self, lba: u64) -> Result<u64, RangeError> {
        Ok(self.byte_range(lba, 1)?.0)
    }

    /// `(byte offset, byte length)` of `blocks` (> 0) blocks from `slba`, all of which must
    /// exist: what a file-backed namespace hands to `pread`/`pwrite`.
    pub fn byte_range(&self, slba: u64, blocks: u64) -> Result<(u64, u64), RangeError> {
        if blocks == 0 {
            return Err(RangeError::ZeroBlocks);
        }
        match slba.checked_add(blocks) {
            Some(end) if end <= self.capacity_blocks => {
                let shift = self.format.lbads();
                Ok((slba << shift, blocks << shift))
            }
            _ => Err(RangeError::OutOfRange {
                slba,
                blocks,
                capacity: self.capacity_blocks,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn formats_are_512_and_4096_bytes() {
        assert_eq!(
            (
                LbaFormat::Bytes512.lbads(),
                LbaFormat::Bytes512.block_size()
            ),
            (9, 512)
        );
        assert_eq!(
            (
                LbaFormat::Bytes4096.lbads(),
                LbaFormat::Bytes4096.block_size()
            ),
            (12, 4096)
        );
        assert_eq!(LbaFormat::from_lbads(12), Ok(LbaFormat::Bytes4096));
        assert_eq!(
            LbaFormat::from_lbads(10),
            Err(GeometryError::UnsupportedLbads(10))
        );
        assert_eq!(LbaFormat::from_block_size(512), Ok(LbaFormat::Bytes512));
        assert_eq!(
            LbaFormat::from_block_size(1024),
            Err(GeometryError::UnsupportedBlockSize(1024))
        );
    }

    #[test]
    fn geometry_rejects_empty_and_unaddressable_namespaces() {
        assert_eq!(
            NamespaceGeometry::new(LbaFormat::Bytes512, 0),
            Err(GeometryError::Empty)
        );
        assert_eq!(
            NamespaceGeometry::new(LbaFormat::Bytes4096, 1 << 52),
            Err(GeometryError::TooLarge {
                blocks: 1 << 52,
                block_size: 4096
            })
        );
        let largest = NamespaceGeometry::new(LbaFormat::Bytes4096, (1 << 52) - 1).unwrap();
        assert_eq!(largest.capacity_bytes(), ((1 << 52) - 1) << 12);
    }

    #[test]
    fn ranges_inside_the_namespace_map_to_bytes() {
        let geometry = NamespaceGeometry::new(LbaFormat::Bytes512, 100).unwrap();
        assert_eq!(geometry.byte_range(0, 100), Ok((0, 51_200)));
        assert_eq!(geometry.byte_range(99, 1), Ok((50_688, 512)));
        assert_eq!(geometry.lba_to_byte(3), Ok(1536));
        assert_eq!(geometry.capacity_bytes(), 51_200);
    }

    #[test]
    fn ranges_past_the_end_are_lba_out_of_range() {
        let geometry = NamespaceGeometry::new(LbaFormat::Bytes4096, 100).unwrap();
        let err = geometry.byte_range(99, 2).unwrap_err();
        assert_eq!(
            err,
            RangeError::OutOfRange {
                slba: 99,
                blocks: 2,
                capacity: 100
            }
        );
        assert_eq!(err.status(), Status::lba_out_of_range());
        assert_eq!(
            geometry.lba_to_byte(100).unwrap_err().status(),
            Status::lba_out_of_range()
        );
        let wrap = geometry.byte_range(u64::MAX, 2).unwrap_err();
        assert_eq!(wrap.status(), Status::lba_out_of_range());
        assert_eq!(geometry.byte_range(0, 0), Err(RangeError::ZeroBlocks));
        assert_eq!(RangeError::ZeroBlocks.status(), Status::invalid_field());
    }

    proptest! {
        #[test]
        fn a_range_is_accepted_iff_it_lies_inside_the_namespace(
            capacity in 1u64..(1 << 40), slba: u64, blocks in 0u64..=65536, big: bool,
        ) {
            let format = if big { LbaFormat::Bytes4096 } else { LbaFormat::Bytes512 };
            let geometry = NamespaceGeometry::new(format, capacity).unwrap();
            let slba = if slba % 2 == 0 { slba % (capacity + 10) } else { slba };
            let end = u128::from(slba) + u128::from(blocks);
            let inside = blocks > 0 && end <= u128::from(capacity);
            match geometry.byte_range(slba, blocks) {
                Ok((offset, len)) => {
                    prop_assert!(inside);
                    prop_assert_eq!(offset, slba * u64::from(format.block_size()));
                    prop_assert_eq!(len, blocks * u64::from(format.block_size()));
                    prop_assert!(offset + len <= geometry.capacity_bytes());
                }
                Err(_) => prop_assert!(!inside),
            }
        }
    }
}
