//! What every software controller does the same way with an I/O command: validate opcode,
//! namespace, LBA range and transfer size (with the NVMe status for each failure), and read a
//! Dataset Management range list.

use crate::spec::{IoOpcode, NamespaceGeometry, Status, SubmissionEntry};

use super::data::{DataPath, MAX_TRANSFER};

/// A validated I/O command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prepared {
    /// Read (`write == false`) or Write of `len` bytes at byte offset `off`.
    Rw { write: bool, off: u64, len: u64 },
    /// Flush.
    Flush,
    /// Write Zeroes of a byte range.
    Zero { off: u64, len: u64 },
    /// Dataset Management with `ranges` ranges to deallocate.
    Deallocate { ranges: u32 },
}

/// Checks opcode, namespace, LBA range and transfer size of an I/O command.
pub fn prepare(sqe: &SubmissionEntry, geometry: NamespaceGeometry) -> Result<Prepared, Status> {
    let Ok(op) = IoOpcode::try_from(sqe.opcode()) else {
        return Err(Status::invalid_opcode());
    };
    let broadcast = sqe.nsid == u32::MAX && op == IoOpcode::Flush;
    if sqe.nsid != 1 && !broadcast {
        return Err(Status::invalid_namespace());
    }
    match op {
        IoOpcode::Flush => Ok(Prepared::Flush),
        IoOpcode::Read | IoOpcode::Write => {
            let (off, len) = geometry
                .byte_range(sqe.slba(), u64::from(sqe.block_count()))
                .map_err(|_| Status::lba_out_of_range())?;
            if len > MAX_TRANSFER {
                return Err(Status::invalid_field());
            }
            Ok(Prepared::Rw {
                write: op == IoOpcode::Write,
                off,
                len,
            })
        }
        IoOpcode::WriteZeroes => {
            let (off, len) = geometry
                .byte_range(sqe.slba(), u64::from(sqe.block_count()))
                .map_err(|_| Status::lba_out_of_range())?;
            Ok(Prepared::Zero { off, len })
        }
        IoOpcode::DatasetManagement => {
            // Only deallocation (AD, cdw11 bit 2) changes anything; hints are accepted.
            let ranges = (sqe.cdw10 & 0xff) + 1;
            if sqe.cdw11 & 0b100 == 0 {
                return Ok(Prepared::Deallocate { ranges: 0 });
            }
            Ok(Prepared::Deallocate { ranges })
        }
    }
}

/// The byte ranges to deallocate that a Dataset Management command lists (`ranges` entries at
/// its PRPs); empty ranges are skipped, a range past the end is LBA Out of Range.
pub fn dsm_ranges(
    sqe: &SubmissionEntry,
    ranges: u32,
    geometry: NamespaceGeometry,
    path: &mut DataPath<'_>,
) -> Result<Vec<(u64, u64)>, Status> {
    if ranges == 0 {
        return Ok(Vec::new());
    }
    let len = u64::from(ranges) * 16;
    let segs = path.segments(sqe, len)?;
    let mut list = vec![0u8; len as usize];
    path.write_from(&segs, |pos, data| {
        list[pos as usize..pos as usize + data.len()].copy_from_slice(data);
        Ok(())
    })?;
    let mut todo = Vec::with_capacity(ranges as usize);
    for r in list.chunks_exact(16) {
        let nlb = u32::from_le_bytes([r[4], r[5], r[6], r[7]]);
        let slba = u64::from_le_bytes([r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]]);
        if nlb == 0 {
            continue;
        }
        let range = geometry
            .byte_range(slba, u64::from(nlb))
            .map_err(|_| Status::lba_out_of_range())?;
        todo.push(range);
    }
    Ok(todo)
}
