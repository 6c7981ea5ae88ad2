//! The F2FS on-disk format, unchanged (papers/gofs.md §3.2, §3.5: GoFS keeps F2FS's layout so
//! the host F2FS stack and f2fs-tools work on its images). Every parser validates what it reads
//! and returns [`FsError::Corrupt`] naming the bad value; none panics on any byte pattern.

pub mod checkpoint;
pub mod dentry;
pub mod node;
pub mod segment;
pub mod superblock;

use crate::error::{FsError, Result};

/// Bytes in a block (F2FS supports only 4 KiB blocks).
pub const BLOCK_SIZE: usize = 4096;
/// Blocks in a segment (2 MiB segments).
pub const BLOCKS_PER_SEG: u32 = 512;
/// The superblock magic, also the seed of every F2FS CRC.
pub const F2FS_SUPER_MAGIC: u32 = 0xF2F5_2010;
/// A block address that is not allocated.
pub const NULL_ADDR: u32 = 0;
/// A block address that is reserved but not yet written (reads as zeros).
pub const NEW_ADDR: u32 = 0xFFFF_FFFF;
/// Longest file name.
pub const NAME_LEN: usize = 255;

/// One 4 KiB block.
pub type Block = [u8; BLOCK_SIZE];

/// A fresh zeroed block on the heap.
pub fn zero_block() -> Box<Block> {
    Box::new([0u8; BLOCK_SIZE])
}

/// F2FS's CRC32 (`f2fs_cal_crc32`: reflected polynomial 0xEDB88320, no final xor), seeded
/// with [`F2FS_SUPER_MAGIC`] for every on-disk checksum.
pub fn f2fs_crc32(buf: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0xEDB8_8320
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    buf.iter().fold(F2FS_SUPER_MAGIC, |crc, &b| {
        (crc >> 8) ^ TABLE[((crc ^ u32::from(b)) & 0xFF) as usize]
    })
}

/// Little-endian field access on a byte slice; callers pass offsets inside the slice (all
/// format offsets are constants within a block), and out-of-range reads yield zero rather
/// than panicking.
pub(crate) fn get_u16(b: &[u8], off: usize) -> u16 {
    b.get(off..off + 2)
        .map_or(0, |s| u16::from_le_bytes([s[0], s[1]]))
}

/// See [`get_u16`].
pub(crate) fn get_u32(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// See [`get_u16`].
pub(crate) fn get_u64(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8).map_or(0, |s| {
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        u64::from_le_bytes(a)
    })
}

/// Writes a little-endian `u16`; writes past the slice are dropped (offsets are constants).
pub(crate) fn put_u16(b: &mut [u8], off: usize, v: u16) {
    if let Some(s) = b.get_mut(off..off + 2) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// See [`put_u16`].
pub(crate) fn put_u32(b: &mut [u8], off: usize, v: u32) {
    if let Some(s) = b.get_mut(off..off + 4) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// See [`put_u16`].
pub(crate) fn put_u64(b: &mut [u8], off: usize, v: u64) {
    if let Some(s) = b.get_mut(off..off + 8) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// Tests bit `i` of an F2FS bitmap in the order the kernel's `f2fs_test_bit` uses (most
/// significant bit first within a byte): NAT/SIT version bitmaps and SIT valid maps.
pub fn test_bit_msb(map: &[u8], i: usize) -> bool {
    map.get(i / 8).is_some_and(|b| b & (0x80 >> (i % 8)) != 0)
}

/// Sets or clears bit `i` (most significant bit first); bits past the map are ignored.
pub fn set_bit_msb(map: &mut [u8], i: usize, on: bool) {
    if let Some(b) = map.get_mut(i / 8) {
        if on {
            *b |= 0x80 >> (i % 8);
        } else {
            *b &= !(0x80 >> (i % 8));
        }
    }
}

/// Tests bit `i` in little-endian bit order (`test_bit_le`: dentry bitmaps).
pub fn test_bit_le(map: &[u8], i: usize) -> bool {
    map.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0)
}

/// Sets or clears bit `i` in little-endian bit order.
pub fn set_bit_le(map: &mut [u8], i: usize, on: bool) {
    if let Some(b) = map.get_mut(i / 8) {
        if on {
            *b |= 1 << (i % 8);
        } else {
            *b &= !(1 << (i % 8));
        }
    }
}

/// `Corrupt` error helper.
pub(crate) fn corrupt(msg: impl Into<String>) -> FsError {
    FsError::Corrupt(msg.into())
}

/// Checks `cond`, else `Corrupt(msg)`.
pub(crate) fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result<()> {
    if cond {
        Ok(())
    } else {
        Err(FsError::Corrupt(msg()))
    }
}

/// A block-addressed store the format code and the engine read and write through: an NVMe
/// device in production, an in-memory image for fuzzing and unit tests.
pub trait BlockIo: Send + Sync + std::fmt::Debug {
    /// Blocks in the store.
    fn block_count(&self) -> u64;
    /// Reads `buf.len() / 4096` blocks from block `blk`.
    fn read(&self, blk: u64, buf: &mut [u8]) -> Result<()>;
    /// Writes `buf.len() / 4096` blocks at block `blk`.
    fn write(&self, blk: u64, buf: &[u8]) -> Result<()>;
    /// Makes earlier writes durable.
    fn flush(&self) -> Result<()>;
    /// Discards blocks (they may read back as zeros).
    fn trim(&self, blk: u64, count: u32) -> Result<()>;
    /// Reads several block runs `(first block, buffer)` as one batch: a device that can keeps
    /// them all in flight at once (the level-synchronous pointer walk issues one batch per
    /// tree level). The default reads them one after another.
    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Result<()> {
        for (blk, buf) in reqs.iter_mut() {
            self.read(*blk, buf)?;
        }
        Ok(())
    }
}

/// [`BlockIo`] over an NVMe namespace of 512 B or 4 KiB LBAs.
#[derive(Debug)]
pub struct NvmeBlocks {
    dev: std::sync::Arc<gpu_nvme::device::NvmeDevice>,
    /// LBAs per 4 KiB block.
    lbas_per_block: u64,
    blocks: u64,
}

impl NvmeBlocks {
    /// Wraps `dev`; its LBA size must divide 4096.
    pub fn new(dev: std::sync::Arc<gpu_nvme::device::NvmeDevice>) -> Result<Self> {
        let g = dev.geometry();
        let lba = u64::from(g.block_size());
        if lba == 0 || lba > BLOCK_SIZE as u64 || !(BLOCK_SIZE as u64).is_multiple_of(lba) {
            return Err(FsError::InvalidArgument(format!(
                "LBA size {lba} does not divide the 4096-byte block"
            )));
        }
        let lbas_per_block = BLOCK_SIZE as u64 / lba;
        // Our controllers (the file controller, SwarmIO) run in this process: reads may land
        // in the caller's buffer with no bounce copy (`read`).
        dev.enable_direct_host_dma();
        Ok(Self {
            blocks: g.capacity_blocks() / lbas_per_block,
            dev,
            lbas_per_block,
        })
    }

    fn check(&self, blk: u64, len: usize) -> Result<()> {
        let n = (len / BLOCK_SIZE) as u64;
        if len == 0 || !len.is_multiple_of(BLOCK_SIZE) || blk.saturating_add(n) > self.blocks {
            return Err(corrupt(format!(
                "block range {blk}+{n} outside the device of {} blocks",
                self.blocks
            )));
        }
        Ok(())
    }
}

/// Largest read sent as one direct command (the controllers' largest transfer, MDTS).
const MAX_DIRECT_READ: usize = gpu_nvme::controller::data::MAX_TRANSFER as usize;

impl NvmeBlocks {
    /// Whether a read into `buf` can name `buf` in its PRPs (one command, no bounce copy).
    fn direct(buf: &[u8]) -> bool {
        (buf.as_ptr() as usize).is_multiple_of(4) && buf.len() <= MAX_DIRECT_READ
    }
}

impl BlockIo for NvmeBlocks {
    fn block_count(&self) -> u64 {
        self.blocks
    }
    fn read(&self, blk: u64, buf: &mut [u8]) -> Result<()> {
        self.check(blk, buf.len())?;
        let lba = blk * self.lbas_per_block;
        // Straight into the caller's buffer when it can be named in PRPs: the controller's
        // copy is the only one, as with O_DIRECT. Otherwise the driver goes through bounce
        // slots.
        if Self::direct(buf) {
            Ok(self.dev.thread_queue().read_direct(lba, buf)?)
        } else {
            Ok(self.dev.read_blocks(lba, buf)?)
        }
    }
    fn write(&self, blk: u64, buf: &[u8]) -> Result<()> {
        self.check(blk, buf.len())?;
        Ok(self.dev.write_blocks(blk * self.lbas_per_block, buf)?)
    }
    fn flush(&self) -> Result<()> {
        Ok(self.dev.flush()?)
    }
    fn trim(&self, blk: u64, count: u32) -> Result<()> {
        self.check(blk, count as usize * BLOCK_SIZE)?;
        let lbas = u64::from(count) * self.lbas_per_block;
        let lbas = u32::try_from(lbas).map_err(|_| FsError::InvalidArgument("trim".into()))?;
        Ok(self.dev.deallocate(&[(blk * self.lbas_per_block, lbas)])?)
    }
    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Result<()> {
        for (blk, buf) in reqs.iter() {
            self.check(*blk, buf.len())?;
        }
        if !reqs.iter().all(|(_, buf)| Self::direct(buf)) {
            return reqs
                .iter_mut()
                .try_for_each(|(blk, buf)| self.read(*blk, buf));
        }
        // All of them in flight together, each into its own buffer, dealt over every host
        // queue so that a controller with a worker per queue serves them in parallel.
        let mut lbas: Vec<(u64, &mut [u8])> = reqs
            .iter_mut()
            .map(|(blk, buf)| (*blk * self.lbas_per_block, &mut **buf))
            .collect();
        Ok(self.dev.read_direct_spread(&mut lbas)?)
    }
}

/// [`BlockIo`] over bytes in memory (fuzzing, unit tests, images built on the host).
#[derive(Debug)]
pub struct MemBlocks {
    data: std::sync::Mutex<Vec<u8>>,
}

impl MemBlocks {
    /// An image of `bytes` (a trailing partial block is ignored).
    pub fn new(mut bytes: Vec<u8>) -> Self {
        bytes.truncate(bytes.len() / BLOCK_SIZE * BLOCK_SIZE);
        Self {
            data: std::sync::Mutex::new(bytes),
        }
    }

    /// A copy of the image.
    pub fn to_vec(&self) -> Vec<u8> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn range(&self, len: usize, blk: u64, buf_len: usize) -> Result<std::ops::Range<usize>> {
        let start = usize::try_from(blk)
            .ok()
            .and_then(|b| b.checked_mul(BLOCK_SIZE))
            .filter(|_| buf_len.is_multiple_of(BLOCK_SIZE));
        match start.and_then(|s| s.checked_add(buf_len).map(|e| s..e)) {
            Some(r) if r.end <= len => Ok(r),
            _ => Err(corrupt(format!(
                "block range {blk}+{} outside the image of {} blocks",
                buf_len / BLOCK_SIZE,
                len / BLOCK_SIZE
            ))),
        }
    }
}

impl BlockIo for MemBlocks {
    fn block_count(&self) -> u64 {
        (self.lock().len() / BLOCK_SIZE) as u64
    }
    fn read(&self, blk: u64, buf: &mut [u8]) -> Result<()> {
        let d = self.lock();
        let r = self.range(d.len(), blk, buf.len())?;
        buf.copy_from_slice(&d[r]);
        Ok(())
    }
    fn write(&self, blk: u64, buf: &[u8]) -> Result<()> {
        let mut d = self.lock();
        let r = self.range(d.len(), blk, buf.len())?;
        d[r].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
    fn trim(&self, blk: u64, count: u32) -> Result<()> {
        let mut d = self.lock();
        let r = self.range(d.len(), blk, count as usize * BLOCK_SIZE)?;
        d[r].fill(0);
        Ok(())
    }
}

/// Reads one block.
pub fn read_block(io: &dyn BlockIo, blk: u64) -> Result<Box<Block>> {
    let mut b = zero_block();
    io.read(blk, &mut b[..])?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_f2fs_tools_bitwise_definition() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut crc = F2FS_SUPER_MAGIC;
        for &b in &data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = (crc >> 1) ^ if crc & 1 != 0 { 0xEDB8_8320 } else { 0 };
            }
        }
        assert_eq!(f2fs_crc32(&data), crc);
    }

    #[test]
    fn bit_orders_differ_as_f2fs_defines_them() {
        let mut m = [0u8; 2];
        set_bit_msb(&mut m, 0, true);
        assert_eq!(m[0], 0x80);
        set_bit_le(&mut m, 8, true);
        assert_eq!(m[1], 0x01);
        assert!(test_bit_msb(&m, 0) && test_bit_le(&m, 8) && !test_bit_le(&m, 0));
        set_bit_msb(&mut m, 99, true); // past the end: ignored
    }

    #[test]
    fn mem_blocks_reject_ranges_past_the_end() {
        let m = MemBlocks::new(vec![0; 3 * BLOCK_SIZE]);
        let mut b = [0u8; BLOCK_SIZE];
        assert!(m.read(2, &mut b).is_ok());
        assert!(matches!(m.read(3, &mut b), Err(FsError::Corrupt(_))));
        assert!(m.read(u64::MAX, &mut b).is_err());
    }
}
