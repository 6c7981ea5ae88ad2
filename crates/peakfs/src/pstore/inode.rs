//! The on-disk inode of PMeta (PeakFS §III-C): attributes, the distribution-strategy hint
//! (§III-C1), and the mapping of the first file block, kept inline so that a client holding
//! the inode reaches a small file's data without another lookup.

use super::PStoreError;
use super::table::PageRun;

/// Bytes of one on-disk inode; an Icache block holds `PAGE / INODE_BYTES` of them.
pub const INODE_BYTES: usize = 128;

const MAGIC: u32 = u32::from_le_bytes(*b"PINO");

/// Errors decoding an inode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InodeError {
    /// the slot does not hold an inode (bad magic)
    #[error("inode slot holds no inode (magic {0:#010x})")]
    NoInode(u32),
    /// the inode's checksum does not match
    #[error("inode checksum {stored:#010x} does not match {computed:#010x}")]
    Checksum {
        /// stored in the slot
        stored: u32,
        /// computed from the slot
        computed: u32,
    },
    /// a field holds a value no inode has
    #[error("inode field {field} holds invalid value {value}")]
    Field {
        /// the field
        field: &'static str,
        /// its value
        value: u64,
    },
}

/// How a file's data is spread over servers (§III-C1, "Data distribution based on sharing
/// modes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DataDistribution {
    /// By hash of (ino, block); the first block lives with the inode.
    #[default]
    Block,
    /// The whole file on one server (N-N patterns).
    File,
    /// Each I/O owns its pages (equal-size, non-overlapping I/O).
    Io,
}

/// The strategy hints of a file or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hint {
    /// Data distribution of a file (or the default for a directory's new files).
    pub data: DataDistribution,
    /// A directory with many entries: its children's metadata is sharded by (pino, name)
    /// (§III-C1, "Metadata distribution based on directory sizes").
    pub bigdir: bool,
}

impl Hint {
    fn encode(self) -> u8 {
        let d = match self.data {
            DataDistribution::Block => 0,
            DataDistribution::File => 1,
            DataDistribution::Io => 2,
        };
        d | (u8::from(self.bigdir) << 4)
    }

    fn decode(b: u8) -> Result<Self, InodeError> {
        let data = match b & 0xF {
            0 => DataDistribution::Block,
            1 => DataDistribution::File,
            2 => DataDistribution::Io,
            _ => {
                return Err(InodeError::Field {
                    field: "hint",
                    value: u64::from(b),
                });
            }
        };
        if b >> 5 != 0 {
            return Err(InodeError::Field {
                field: "hint",
                value: u64::from(b),
            });
        }
        Ok(Self {
            data,
            bigdir: b & 0x10 != 0,
        })
    }
}

/// An inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Inode {
    /// Inode number.
    pub ino: u64,
    /// File type and permission bits (`S_IFREG | 0o644`, ...).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Hard links.
    pub nlink: u32,
    /// Bytes.
    pub size: u64,
    /// Access time, ns since the epoch.
    pub atime_ns: i64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// Status change time, ns since the epoch.
    pub ctime_ns: i64,
    /// Pages of file block 0 when they are on this worker (none: a hole or elsewhere).
    pub first_block: PageRun,
    /// Distribution-strategy hint.
    pub hint: Hint,
    /// Device number of a character or block device node (0 otherwise).
    pub rdev: u32,
    /// Bytes of each I/O unit of an I/O-based file: bytes `[k·u, (k+1)·u)` are one extent,
    /// on the slice of offset `k·u`. Fixed by the file's first write (0: none yet).
    pub io_unit: u32,
}

/// The permission bits a file of mode `mode` keeps after a write, a truncate or a change of
/// owner, when that drops set-ID bits (Linux's rule): set-user-ID, and set-group-ID when the
/// group may execute the file (without group execute it marks mandatory locking). None when
/// nothing drops (a directory never drops any).
pub fn mode_without_set_id_bits(mode: u32) -> Option<u32> {
    if mode & libc::S_IFMT == libc::S_IFDIR {
        return None;
    }
    let mut bits = mode & libc::S_ISUID;
    if mode & (libc::S_ISGID | libc::S_IXGRP) == libc::S_ISGID | libc::S_IXGRP {
        bits |= libc::S_ISGID;
    }
    (bits != 0).then_some(mode & 0o7777 & !bits)
}

/// `mode` (type and permission bits) after a drop of its set-ID bits; None when nothing drops
/// ([`mode_without_set_id_bits`]).
pub fn mode_after_set_id_drop(mode: u32) -> Option<u32> {
    mode_without_set_id_bits(mode).map(|bits| (mode & libc::S_IFMT) | bits)
}

/// What a writer asks of the file its bytes go to, where the file's inode is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrittenBy {
    /// The distribution the bytes were placed by ([`Inode::hold_layout`]).
    pub layout: DataDistribution,
    /// The write drops the file's set-ID bits ([`mode_without_set_id_bits`]).
    pub drop_set_id: bool,
}

impl Inode {
    /// Drops the set-ID bits a write by a caller without CAP_FSETID drops.
    pub fn drop_set_id_bits(&mut self) {
        if let Some(mode) = mode_after_set_id_drop(self.mode) {
            self.mode = mode;
        }
    }

    /// Holds the file to `written`, the distribution a writer placed its bytes by. A file
    /// without size has no data laid out yet and takes it (true: the inode changed), which
    /// undoes a hint given while those bytes were on their way; a file with a size must hold
    /// it already, since its readers look where its distribution says.
    pub fn hold_layout(&mut self, written: DataDistribution) -> Result<bool, PStoreError> {
        if self.hint.data == written {
            Ok(false)
        } else if self.size == 0 {
            tracing::info!(
                ino = self.ino,
                hint = ?self.hint.data,
                written = ?written,
                "a file's distribution changed while a writer's bytes were on their way: \
                 it keeps the writer's, where those bytes lie"
            );
            self.hint.data = written;
            Ok(true)
        } else {
            Err(PStoreError::LaidOutOtherwise {
                ino: self.ino,
                size: self.size,
                held: self.hint.data,
                written,
            })
        }
    }

    /// The on-disk form, with magic and checksum.
    pub fn encode(&self) -> [u8; INODE_BYTES] {
        let mut b = [0u8; INODE_BYTES];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..16].copy_from_slice(&self.ino.to_le_bytes());
        b[16..20].copy_from_slice(&self.mode.to_le_bytes());
        b[20..24].copy_from_slice(&self.uid.to_le_bytes());
        b[24..28].copy_from_slice(&self.gid.to_le_bytes());
        b[28..32].copy_from_slice(&self.nlink.to_le_bytes());
        b[32..40].copy_from_slice(&self.size.to_le_bytes());
        b[40..48].copy_from_slice(&self.atime_ns.to_le_bytes());
        b[48..56].copy_from_slice(&self.mtime_ns.to_le_bytes());
        b[56..64].copy_from_slice(&self.ctime_ns.to_le_bytes());
        b[64..72].copy_from_slice(&self.first_block.start.to_le_bytes());
        b[72..76].copy_from_slice(&self.first_block.packed_pages().to_le_bytes());
        b[76] = self.hint.encode();
        // Bytes 77..80 stay zero; inodes written before rdev existed read back rdev 0.
        b[80..84].copy_from_slice(&self.rdev.to_le_bytes());
        // Inodes written before the I/O unit existed read back 0 here: none yet.
        b[84..88].copy_from_slice(&self.io_unit.to_le_bytes());
        let crc = common::hash::crc32c(&b[8..]);
        b[4..8].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses an on-disk inode.
    pub fn decode(b: &[u8; INODE_BYTES]) -> Result<Self, InodeError> {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(w)
        };
        let magic = u32_at(0);
        if magic != MAGIC {
            return Err(InodeError::NoInode(magic));
        }
        let stored = u32_at(4);
        let computed = common::hash::crc32c(&b[8..]);
        if stored != computed {
            return Err(InodeError::Checksum { stored, computed });
        }
        Ok(Self {
            ino: u64_at(8),
            mode: u32_at(16),
            uid: u32_at(20),
            gid: u32_at(24),
            nlink: u32_at(28),
            size: u64_at(32),
            atime_ns: u64_at(40) as i64,
            mtime_ns: u64_at(48) as i64,
            ctime_ns: u64_at(56) as i64,
            first_block: PageRun::unpack(u64_at(64), u32_at(72)),
            hint: Hint::decode(b[76])?,
            rdev: u32_at(80),
            io_unit: u32_at(84),
        })
    }

    /// Whether the mode says directory.
    pub fn is_dir(&self) -> bool {
        self.mode & 0o170000 == 0o040000
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn encode_decode_round_trips_and_any_flipped_bit_is_caught(
            ino: u64, mode: u32, size: u64, mtime: i64, start: u64, pages in 0u32..=1024,
            first in 0u16..1024, bigdir: bool, nlink: u32, rdev: u32, io_unit: u32,
            flip in 0usize..INODE_BYTES * 8,
        ) {
            let i = Inode {
                ino, mode, size, mtime_ns: mtime, nlink, rdev, io_unit,
                first_block: PageRun { start, pages, first },
                hint: Hint { data: DataDistribution::File, bigdir },
                ..Inode::default()
            };
            let mut b = i.encode();
            prop_assert_eq!(Inode::decode(&b), Ok(i));
            b[flip / 8] ^= 1 << (flip % 8);
            prop_assert!(Inode::decode(&b).is_err());
        }
    }
}
