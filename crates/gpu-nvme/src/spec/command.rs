//! Submission queue entry (NVMe Base 2.x §4.1, Figure "Common Command Format"), the admin
//! commands that set up queues (§5.4 Create I/O CQ, §5.5 Create I/O SQ, §5.6/5.7 Delete, §5.17
//! Identify, §5.27 Set Features / Number of Queues) and the NVM command set's I/O commands (NVM
//! Command Set 1.x §3.2: Read, Write, Flush, Write Zeroes, Dataset Management).

use core::mem::{offset_of, size_of};

use super::identify::Cns;
use super::le;

/// Most logical blocks one Read/Write/Write Zeroes moves: NLB is a 16-bit 0-based count.
pub const MAX_BLOCKS_PER_COMMAND: u32 = 1 << 16;
/// Most ranges one Dataset Management command carries: NR is an 8-bit 0-based count.
pub const MAX_DSM_RANGES: u32 = 256;
/// Most entries an I/O queue may have: QSIZE is a 16-bit 0-based count.
pub const MAX_QUEUE_ENTRIES: u32 = 1 << 16;
/// Feature Identifier of Number of Queues (§5.27.1.7).
pub const FEATURE_NUMBER_OF_QUEUES: u8 = 0x07;

/// First and last valid namespace IDs of one namespace; 0 is none, `u32::MAX` is broadcast.
const NSID_RANGE: core::ops::RangeInclusive<u32> = 1..=0xFFFF_FFFE;
/// Queue memory, identify pages and DSM range lists are placed by a single PRP, which needs the
/// buffer inside one memory page; 4 KiB is the smallest page size, so alignment to it suffices.
const SINGLE_PAGE_ALIGN: u64 = 4096;
/// Dataset Management "Attribute - Deallocate" (AD), CDW11 bit 2.
const DSM_ATTRIBUTE_DEALLOCATE: u32 = 1 << 2;
/// Physically Contiguous (PC), CDW11 bit 0 of both Create I/O queue commands.
const QUEUE_PHYSICALLY_CONTIGUOUS: u32 = 1 << 0;
/// Interrupts Enabled (IEN), CDW11 bit 1 of Create I/O Completion Queue.
const QUEUE_INTERRUPTS_ENABLED: u32 = 1 << 1;

wire_enum! {
    /// Admin command opcodes (NVMe Base 2.x Figure "Opcodes for Admin Commands").
    pub enum AdminOpcode ("admin opcode") {
        DeleteIoSq = 0x00 => "Delete I/O Submission Queue",
        CreateIoSq = 0x01 => "Create I/O Submission Queue",
        GetLogPage = 0x02 => "Get Log Page",
        DeleteIoCq = 0x04 => "Delete I/O Completion Queue",
        CreateIoCq = 0x05 => "Create I/O Completion Queue",
        Identify = 0x06 => "Identify",
        Abort = 0x08 => "Abort",
        SetFeatures = 0x09 => "Set Features",
        GetFeatures = 0x0A => "Get Features",
    }
}

wire_enum! {
    /// NVM command set I/O opcodes (NVM Command Set 1.x Figure "Opcodes for NVM Commands").
    pub enum IoOpcode ("I/O opcode") {
        Flush = 0x00 => "Flush",
        Write = 0x01 => "Write",
        Read = 0x02 => "Read",
        WriteZeroes = 0x08 => "Write Zeroes",
        DatasetManagement = 0x09 => "Dataset Management",
    }
}

/// A command argument that cannot be encoded, or names something that cannot exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// block count {0} is outside 1..=65536
    #[error("block count {0} is outside 1..=65536")]
    InvalidBlockCount(u32),
    /// {blocks} blocks from LBA {slba} run past the largest LBA
    #[error("{blocks} blocks from LBA {slba} run past the largest LBA")]
    LbaRangeOverflow {
        /// First LBA.
        slba: u64,
        /// Number of blocks.
        blocks: u32,
    },
    /// namespace ID {0:#x} does not name one namespace
    #[error("namespace ID {0:#x} does not name one namespace")]
    InvalidNamespaceId(u32),
    /// address {addr:#x} is not aligned to {align} bytes
    #[error("address {addr:#x} is not aligned to {align} bytes")]
    MisalignedAddress {
        /// The address given.
        addr: u64,
        /// The alignment it needs.
        align: u64,
    },
    /// {count} Dataset Management ranges at {addr:#x} cross a 4 KiB page
    #[error("{count} Dataset Management ranges at {addr:#x} cross a 4 KiB page")]
    RangeListCrossesPage {
        /// Address of the range list.
        addr: u64,
        /// Number of ranges.
        count: u32,
    },
    /// range count {0} is outside 1..=256
    #[error("range count {0} is outside 1..=256")]
    InvalidRangeCount(u32),
    /// queue ID 0 is the admin queue, not an I/O queue
    #[error("queue ID 0 is the admin queue, not an I/O queue")]
    AdminQueueId,
    /// queue size {0} is outside 2..=65536 entries
    #[error("queue size {0} is outside 2..=65536 entries")]
    InvalidQueueSize(u32),
    /// queue count {0} is outside 1..=65535
    #[error("queue count {0} is outside 1..=65535")]
    InvalidQueueCount(u32),
}

/// Priority of an I/O submission queue under weighted round robin arbitration (QPRIO).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum QueuePriority {
    /// Urgent.
    Urgent = 0,
    /// High.
    High = 1,
    /// Medium (what round robin arbitration, the default, ignores anyway).
    #[default]
    Medium = 2,
    /// Low.
    Low = 3,
}

impl QueuePriority {
    const fn from_low_bits(bits: u32) -> Self {
        match bits & 0x3 {
            0 => Self::Urgent,
            1 => Self::High,
            2 => Self::Medium,
            _ => Self::Low,
        }
    }
}

/// Numbers of I/O submission and completion queues, as requested with Set Features Number of
/// Queues (CDW11) and granted in its completion (dword 0): NSQR bits 0-15 and NCQR bits 16-31,
/// both 0-based; 65535 is the most either can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueueCounts {
    submission: u32,
    completion: u32,
}

impl QueueCounts {
    /// Most queues of one kind: the 0-based value 0xFFFF is reserved.
    pub const MAX: u32 = 0xFFFF;

    /// `submission` SQs and `completion` CQs, each 1..=65535.
    pub fn new(submission: u32, completion: u32) -> Result<Self, CommandError> {
        for count in [submission, completion] {
            if !(1..=Self::MAX).contains(&count) {
                return Err(CommandError::InvalidQueueCount(count));
            }
        }
        Ok(Self {
            submission,
            completion,
        })
    }

    /// Number of I/O submission queues.
    pub const fn submission(self) -> u32 {
        self.submission
    }

    /// Number of I/O completion queues.
    pub const fn completion(self) -> u32 {
        self.completion
    }

    /// The dword on the wire (0-based counts).
    pub const fn to_dword(self) -> u32 {
        (self.submission - 1) | ((self.completion - 1) << 16)
    }

    /// Decodes a Number of Queues dword; 0xFFFF in either half is reserved.
    pub fn from_dword(dword: u32) -> Result<Self, CommandError> {
        Self::new((dword & 0xFFFF) + 1, (dword >> 16) + 1)
    }
}

/// One Dataset Management range (NVM Command Set 1.x Figure "Dataset Management – Range
/// Definition"). Unlike a command's NLB, `nlb` here is a 1-based block count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(C)]
pub struct DsmRange {
    /// Context attributes (access hints); 0 when deallocating.
    pub attributes: u32,
    /// Length in logical blocks (1-based).
    pub nlb: u32,
    /// Starting LBA.
    pub slba: u64,
}

const _: () = assert!(size_of::<DsmRange>() == 16);
const _: () = assert!(offset_of!(DsmRange, attributes) == 0);
const _: () = assert!(offset_of!(DsmRange, nlb) == 4);
const _: () = assert!(offset_of!(DsmRange, slba) == 8);

impl DsmRange {
    /// Size of one range on the wire.
    pub const SIZE: usize = size_of::<DsmRange>();

    /// The range of `blocks` blocks from `slba`, no attributes; `blocks` must be at least 1 and
    /// the range must not run past the largest LBA.
    pub fn new(slba: u64, blocks: u32) -> Result<Self, CommandError> {
        if blocks == 0 {
            return Err(CommandError::InvalidBlockCount(blocks));
        }
        if slba.checked_add(u64::from(blocks)).is_none() {
            return Err(CommandError::LbaRangeOverflow { slba, blocks });
        }
        Ok(Self {
            attributes: 0,
            nlb: blocks,
            slba,
        })
    }

    /// Decodes a range from its 16 little-endian bytes; every byte pattern is a range.
    pub fn from_bytes(bytes: &[u8; Self::SIZE]) -> Self {
        Self {
            attributes: le::u32_at(bytes, offset_of!(Self, attributes)),
            nlb: le::u32_at(bytes, offset_of!(Self, nlb)),
            slba: le::u64_at(bytes, offset_of!(Self, slba)),
        }
    }

    /// The 16 little-endian bytes of this range.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut bytes = [0; Self::SIZE];
        le::put_u32(&mut bytes, offset_of!(Self, attributes), self.attributes);
        le::put_u32(&mut bytes, offset_of!(Self, nlb), self.nlb);
        le::put_u64(&mut bytes, offset_of!(Self, slba), self.slba);
        bytes
    }
}

/// A 64-byte submission queue entry, laid out as on the wire (and as `struct nvme_sqe` in
/// `cuda/nvme_spec.cuh`) so it can be written into a queue in place.
///
/// Data is always described by PRPs (PSDT 0, `prp1`/`prp2` are the data pointer). Fields are
/// public because a controller must be able to look at any command, valid or not; the
/// constructors only build valid ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(C)]
pub struct SubmissionEntry {
    /// Opcode (bits 0-7), fused operation (8-9), PRP or SGL selector PSDT (14-15), CID (16-31).
    pub cdw0: u32,
    /// Namespace ID.
    pub nsid: u32,
    /// Command dword 2 (command specific).
    pub cdw2: u32,
    /// Command dword 3 (command specific).
    pub cdw3: u32,
    /// Metadata pointer.
    pub mptr: u64,
    /// PRP entry 1 (first half of the data pointer).
    pub prp1: u64,
    /// PRP entry 2 or PRP list pointer (second half of the data pointer).
    pub prp2: u64,
    /// Command dword 10.
    pub cdw10: u32,
    /// Command dword 11.
    pub cdw11: u32,
    /// Command dword 12.
    pub cdw12: u32,
    /// Command dword 13.
    pub cdw13: u32,
    /// Command dword 14.
    pub cdw14: u32,
    /// Command dword 15.
    pub cdw15: u32,
}

const _: () = assert!(size_of::<SubmissionEntry>() == 64);
const _: () = assert!(offset_of!(SubmissionEntry, cdw0) == 0);
const _: () = assert!(offset_of!(SubmissionEntry, nsid) == 4);
const _: () = assert!(offset_of!(SubmissionEntry, cdw2) == 8);
const _: () = assert!(offset_of!(SubmissionEntry, cdw3) == 12);
const _: () = assert!(offset_of!(SubmissionEntry, mptr) == 16);
const _: () = assert!(offset_of!(SubmissionEntry, prp1) == 24);
const _: () = assert!(offset_of!(SubmissionEntry, prp2) == 32);
const _: () = assert!(offset_of!(SubmissionEntry, cdw10) == 40);
const _: () = assert!(offset_of!(SubmissionEntry, cdw11) == 44);
const _: () = assert!(offset_of!(SubmissionEntry, cdw12) == 48);
const _: () = assert!(offset_of!(SubmissionEntry, cdw13) == 52);
const _: () = assert!(offset_of!(SubmissionEntry, cdw14) == 56);
const _: () = assert!(offset_of!(SubmissionEntry, cdw15) == 60);

fn check_nsid(nsid: u32) -> Result<(), CommandError> {
    if NSID_RANGE.contains(&nsid) {
        Ok(())
    } else {
        Err(CommandError::InvalidNamespaceId(nsid))
    }
}

fn check_aligned(addr: u64, align: u64) -> Result<(), CommandError> {
    if addr.is_multiple_of(align) {
        Ok(())
    } else {
        Err(CommandError::MisalignedAddress { addr, align })
    }
}

/// Validates a block range and returns NLB, the 0-based block count.
fn encode_blocks(slba: u64, blocks: u32) -> Result<u32, CommandError> {
    if !(1..=MAX_BLOCKS_PER_COMMAND).contains(&blocks) {
        return Err(CommandError::InvalidBlockCount(blocks));
    }
    if slba.checked_add(u64::from(blocks)).is_none() {
        return Err(CommandError::LbaRangeOverflow { slba, blocks });
    }
    Ok(blocks - 1)
}

/// Validates an I/O queue ID and entry count and returns CDW10 of a create command.
fn encode_queue(qid: u16, entries: u32) -> Result<u32, CommandError> {
    if qid == 0 {
        return Err(CommandError::AdminQueueId);
    }
    if !(2..=MAX_QUEUE_ENTRIES).contains(&entries) {
        return Err(CommandError::InvalidQueueSize(entries));
    }
    Ok(u32::from(qid) | ((entries - 1) << 16))
}

impl SubmissionEntry {
    /// Size of an entry on the wire.
    pub const SIZE: usize = size_of::<SubmissionEntry>();

    /// An entry with `opcode`, `cid` and `nsid` set and everything else zero.
    const fn with_header(opcode: u8, cid: u16, nsid: u32) -> Self {
        Self {
            cdw0: opcode as u32 | ((cid as u32) << 16),
            nsid,
            cdw2: 0,
            cdw3: 0,
            mptr: 0,
            prp1: 0,
            prp2: 0,
            cdw10: 0,
            cdw11: 0,
            cdw12: 0,
            cdw13: 0,
            cdw14: 0,
            cdw15: 0,
        }
    }

    fn read_write(
        opcode: IoOpcode,
        cid: u16,
        nsid: u32,
        slba: u64,
        blocks: u32,
        prp1: u64,
        prp2: u64,
    ) -> Result<Self, CommandError> {
        check_nsid(nsid)?;
        let nlb = encode_blocks(slba, blocks)?;
        // PRP1 may carry a page offset but must be dword aligned (§4.1.1).
        check_aligned(prp1, 4)?;
        let mut sqe = Self::with_header(opcode.code(), cid, nsid);
        sqe.prp1 = prp1;
        sqe.prp2 = prp2;
        sqe.set_slba(slba);
        sqe.cdw12 = nlb;
        Ok(sqe)
    }

    /// Read `blocks` (1..=65536) blocks from `slba` of namespace `nsid` into the buffer described
    /// by `prp1`/`prp2` (see [`PrpPlan`](super::PrpPlan)).
    pub fn read(
        cid: u16,
        nsid: u32,
        slba: u64,
        blocks: u32,
        prp1: u64,
        prp2: u64,
    ) -> Result<Self, CommandError> {
        Self::read_write(IoOpcode::Read, cid, nsid, slba, blocks, prp1, prp2)
    }

    /// Write `blocks` (1..=65536) blocks at `slba` of namespace `nsid` from the buffer described
    /// by `prp1`/`prp2`.
    pub fn write(
        cid: u16,
        nsid: u32,
        slba: u64,
        blocks: u32,
        prp1: u64,
        prp2: u64,
    ) -> Result<Self, CommandError> {
        Self::read_write(IoOpcode::Write, cid, nsid, slba, blocks, prp1, prp2)
    }

    /// Flush the volatile write cache of namespace `nsid` (`u32::MAX`: all namespaces).
    pub fn flush(cid: u16, nsid: u32) -> Result<Self, CommandError> {
        if nsid == 0 {
            return Err(CommandError::InvalidNamespaceId(nsid));
        }
        Ok(Self::with_header(IoOpcode::Flush.code(), cid, nsid))
    }

    /// Write zeroes to `blocks` (1..=65536) blocks from `slba`; no data buffer.
    pub fn write_zeroes(cid: u16, nsid: u32, slba: u64, blocks: u32) -> Result<Self, CommandError> {
        check_nsid(nsid)?;
        let mut sqe = Self::with_header(IoOpcode::WriteZeroes.code(), cid, nsid);
        sqe.set_slba(slba);
        sqe.cdw12 = encode_blocks(slba, blocks)?;
        Ok(sqe)
    }

    /// Deallocate (trim) the `ranges` (1..=256) [`DsmRange`]s stored at `prp1`; the list must lie
    /// within one 4 KiB page.
    pub fn dataset_management_deallocate(
        cid: u16,
        nsid: u32,
        ranges: u32,
        prp1: u64,
    ) -> Result<Self, CommandError> {
        check_nsid(nsid)?;
        if !(1..=MAX_DSM_RANGES).contains(&ranges) {
            return Err(CommandError::InvalidRangeCount(ranges));
        }
        check_aligned(prp1, 4)?;
        let list_bytes = u64::from(ranges) * DsmRange::SIZE as u64;
        if prp1 % SINGLE_PAGE_ALIGN + list_bytes > SINGLE_PAGE_ALIGN {
            return Err(CommandError::RangeListCrossesPage {
                addr: prp1,
                count: ranges,
            });
        }
        let mut sqe = Self::with_header(IoOpcode::DatasetManagement.code(), cid, nsid);
        sqe.prp1 = prp1;
        sqe.cdw10 = ranges - 1;
        sqe.cdw11 = DSM_ATTRIBUTE_DEALLOCATE;
        Ok(sqe)
    }

    /// Identify: the `cns` data structure for `nsid` into the 4 KiB buffer at `prp1`, which must
    /// be 4 KiB aligned (so one PRP covers it for any memory page size).
    pub fn identify(cid: u16, cns: Cns, nsid: u32, prp1: u64) -> Result<Self, CommandError> {
        check_aligned(prp1, SINGLE_PAGE_ALIGN)?;
        let mut sqe = Self::with_header(AdminOpcode::Identify.code(), cid, nsid);
        sqe.prp1 = prp1;
        sqe.cdw10 = u32::from(cns.code());
        Ok(sqe)
    }

    /// Create I/O completion queue `qid` (1..) of `entries` (2..=65536) 16-byte entries in the
    /// physically contiguous, 4 KiB aligned memory at `prp1`. Interrupts are disabled: every
    /// consumer of our queues polls the phase tag.
    pub fn create_io_cq(cid: u16, qid: u16, entries: u32, prp1: u64) -> Result<Self, CommandError> {
        let cdw10 = encode_queue(qid, entries)?;
        check_aligned(prp1, SINGLE_PAGE_ALIGN)?;
        let mut sqe = Self::with_header(AdminOpcode::CreateIoCq.code(), cid, 0);
        sqe.prp1 = prp1;
        sqe.cdw10 = cdw10;
        sqe.cdw11 = QUEUE_PHYSICALLY_CONTIGUOUS;
        Ok(sqe)
    }

    /// Create I/O submission queue `qid` (1..) of `entries` (2..=65536) 64-byte entries in the
    /// physically contiguous, 4 KiB aligned memory at `prp1`, completing into CQ `cqid` (1..).
    pub fn create_io_sq(
        cid: u16,
        qid: u16,
        entries: u32,
        cqid: u16,
        prp1: u64,
        priority: QueuePriority,
    ) -> Result<Self, CommandError> {
        let cdw10 = encode_queue(qid, entries)?;
        if cqid == 0 {
            return Err(CommandError::AdminQueueId);
        }
        check_aligned(prp1, SINGLE_PAGE_ALIGN)?;
        let mut sqe = Self::with_header(AdminOpcode::CreateIoSq.code(), cid, 0);
        sqe.prp1 = prp1;
        sqe.cdw10 = cdw10;
        sqe.cdw11 = QUEUE_PHYSICALLY_CONTIGUOUS
            | (u32::from(priority as u8) << 1)
            | (u32::from(cqid) << 16);
        Ok(sqe)
    }

    fn delete_queue(opcode: AdminOpcode, cid: u16, qid: u16) -> Result<Self, CommandError> {
        if qid == 0 {
            return Err(CommandError::AdminQueueId);
        }
        let mut sqe = Self::with_header(opcode.code(), cid, 0);
        sqe.cdw10 = u32::from(qid);
        Ok(sqe)
    }

    /// Delete I/O submission queue `qid` (1..).
    pub fn delete_io_sq(cid: u16, qid: u16) -> Result<Self, CommandError> {
        Self::delete_queue(AdminOpcode::DeleteIoSq, cid, qid)
    }

    /// Delete I/O completion queue `qid` (1..); its SQs must be deleted first.
    pub fn delete_io_cq(cid: u16, qid: u16) -> Result<Self, CommandError> {
        Self::delete_queue(AdminOpcode::DeleteIoCq, cid, qid)
    }

    /// Get Features `fid` (current value, SEL 0) with feature specific `cdw11`.
    pub const fn get_features(cid: u16, fid: u8, cdw11: u32) -> Self {
        let mut sqe = Self::with_header(AdminOpcode::GetFeatures as u8, cid, 0);
        sqe.cdw10 = fid as u32;
        sqe.cdw11 = cdw11;
        sqe
    }

    /// Set Features `fid` (not saved across resets) to the feature specific `cdw11`.
    pub const fn set_features(cid: u16, fid: u8, cdw11: u32) -> Self {
        let mut sqe = Self::with_header(AdminOpcode::SetFeatures as u8, cid, 0);
        sqe.cdw10 = fid as u32;
        sqe.cdw11 = cdw11;
        sqe
    }

    /// Set Features Number of Queues: ask for `counts`; the completion's dword 0 holds the
    /// counts granted ([`QueueCounts::from_dword`]).
    pub const fn set_number_of_queues(cid: u16, counts: QueueCounts) -> Self {
        Self::set_features(cid, FEATURE_NUMBER_OF_QUEUES, counts.to_dword())
    }

    /// Decodes an entry from its 64 little-endian bytes; every byte pattern is an entry.
    pub fn from_bytes(bytes: &[u8; Self::SIZE]) -> Self {
        let dword = |offset| le::u32_at(bytes, offset);
        let qword = |offset| le::u64_at(bytes, offset);
        Self {
            cdw0: dword(offset_of!(Self, cdw0)),
            nsid: dword(offset_of!(Self, nsid)),
            cdw2: dword(offset_of!(Self, cdw2)),
            cdw3: dword(offset_of!(Self, cdw3)),
            mptr: qword(offset_of!(Self, mptr)),
            prp1: qword(offset_of!(Self, prp1)),
            prp2: qword(offset_of!(Self, prp2)),
            cdw10: dword(offset_of!(Self, cdw10)),
            cdw11: dword(offset_of!(Self, cdw11)),
            cdw12: dword(offset_of!(Self, cdw12)),
            cdw13: dword(offset_of!(Self, cdw13)),
            cdw14: dword(offset_of!(Self, cdw14)),
            cdw15: dword(offset_of!(Self, cdw15)),
        }
    }

    /// The 64 little-endian bytes of this entry.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut bytes = [0; Self::SIZE];
        let dwords = [
            (offset_of!(Self, cdw0), self.cdw0),
            (offset_of!(Self, nsid), self.nsid),
            (offset_of!(Self, cdw2), self.cdw2),
            (offset_of!(Self, cdw3), self.cdw3),
            (offset_of!(Self, cdw10), self.cdw10),
            (offset_of!(Self, cdw11), self.cdw11),
            (offset_of!(Self, cdw12), self.cdw12),
            (offset_of!(Self, cdw13), self.cdw13),
            (offset_of!(Self, cdw14), self.cdw14),
            (offset_of!(Self, cdw15), self.cdw15),
        ];
        for (offset, value) in dwords {
            le::put_u32(&mut bytes, offset, value);
        }
        le::put_u64(&mut bytes, offset_of!(Self, mptr), self.mptr);
        le::put_u64(&mut bytes, offset_of!(Self, prp1), self.prp1);
        le::put_u64(&mut bytes, offset_of!(Self, prp2), self.prp2);
        bytes
    }

    /// Opcode (CDW0 bits 0-7); admin or I/O depending on the queue it was read from.
    pub const fn opcode(&self) -> u8 {
        (self.cdw0 & 0xFF) as u8
    }

    /// The opcode as an admin command.
    pub fn admin_opcode(&self) -> Result<AdminOpcode, super::UnknownCode> {
        AdminOpcode::try_from(self.opcode())
    }

    /// The opcode as an NVM command set I/O command.
    pub fn io_opcode(&self) -> Result<IoOpcode, super::UnknownCode> {
        IoOpcode::try_from(self.opcode())
    }

    /// Fused operation (CDW0 bits 8-9): 0 normal, 1 first, 2 second of a fused pair.
    pub const fn fuse(&self) -> u8 {
        ((self.cdw0 >> 8) & 0x3) as u8
    }

    /// PRP or SGL for Data Transfer (CDW0 bits 14-15): 0 means PRPs, the only kind we support.
    pub const fn psdt(&self) -> u8 {
        ((self.cdw0 >> 14) & 0x3) as u8
    }

    /// Command identifier (CDW0 bits 16-31), echoed in the completion.
    pub const fn cid(&self) -> u16 {
        (self.cdw0 >> 16) as u16
    }

    /// Replaces the command identifier, keeping the rest of CDW0.
    pub fn set_cid(&mut self, cid: u16) {
        self.cdw0 = (self.cdw0 & 0xFFFF) | (u32::from(cid) << 16);
    }

    /// Starting LBA of Read/Write/Write Zeroes (CDW10 low, CDW11 high).
    pub const fn slba(&self) -> u64 {
        self.cdw10 as u64 | ((self.cdw11 as u64) << 32)
    }

    fn set_slba(&mut self, slba: u64) {
        self.cdw10 = (slba & 0xFFFF_FFFF) as u32;
        self.cdw11 = (slba >> 32) as u32;
    }

    /// Number of Logical Blocks of Read/Write/Write Zeroes as on the wire (CDW12 bits 0-15),
    /// **0-based**: see [`block_count`](Self::block_count).
    pub const fn nlb(&self) -> u16 {
        (self.cdw12 & 0xFFFF) as u16
    }

    /// Number of blocks Read/Write/Write Zeroes move: `nlb() + 1`, in 1..=65536.
    pub const fn block_count(&self) -> u32 {
        self.nlb() as u32 + 1
    }

    /// Number of ranges of Dataset Management (CDW10 bits 0-7 plus one), in 1..=256.
    pub const fn dsm_range_count(&self) -> u32 {
        (self.cdw10 & 0xFF) + 1
    }

    /// Whether Dataset Management asks to deallocate its ranges (CDW11 bit 2).
    pub const fn dsm_deallocate(&self) -> bool {
        self.cdw11 & DSM_ATTRIBUTE_DEALLOCATE != 0
    }

    /// Controller or Namespace Structure of Identify (CDW10 bits 0-7); see [`Cns`].
    pub const fn cns(&self) -> u8 {
        (self.cdw10 & 0xFF) as u8
    }

    /// Queue ID of Create/Delete I/O SQ/CQ (CDW10 bits 0-15).
    pub const fn queue_id(&self) -> u16 {
        (self.cdw10 & 0xFFFF) as u16
    }

    /// Number of entries of Create I/O SQ/CQ (CDW10 bits 16-31 plus one), in 1..=65536; a
    /// controller rejects 1 (QSIZE 0) with Invalid Queue Size.
    pub const fn queue_entries(&self) -> u32 {
        (self.cdw10 >> 16) + 1
    }

    /// Physically Contiguous of Create I/O SQ/CQ (CDW11 bit 0).
    pub const fn physically_contiguous(&self) -> bool {
        self.cdw11 & QUEUE_PHYSICALLY_CONTIGUOUS != 0
    }

    /// Interrupts Enabled of Create I/O CQ (CDW11 bit 1).
    pub const fn interrupts_enabled(&self) -> bool {
        self.cdw11 & QUEUE_INTERRUPTS_ENABLED != 0
    }

    /// Completion Queue ID of Create I/O SQ (CDW11 bits 16-31).
    pub const fn completion_queue_id(&self) -> u16 {
        (self.cdw11 >> 16) as u16
    }

    /// Queue Priority of Create I/O SQ (CDW11 bits 1-2).
    pub const fn queue_priority(&self) -> QueuePriority {
        QueuePriority::from_low_bits(self.cdw11 >> 1)
    }

    /// Feature Identifier of Get/Set Features (CDW10 bits 0-7).
    pub const fn feature_id(&self) -> u8 {
        (self.cdw10 & 0xFF) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn read_command_bytes_follow_the_spec_layout() {
        let sqe =
            SubmissionEntry::read(0xBEEF, 1, 0x0123_4567_89AB_CDEF, 8, 0x1000, 0x2000).unwrap();
        let bytes = sqe.to_bytes();
        assert_eq!(bytes[0], 0x02, "opcode Read");
        assert_eq!(bytes[1], 0x00, "not fused, PRPs");
        assert_eq!(&bytes[2..4], &[0xEF, 0xBE], "CID");
        assert_eq!(&bytes[4..8], &[1, 0, 0, 0], "NSID");
        assert_eq!(&bytes[24..32], &0x1000u64.to_le_bytes(), "PRP1");
        assert_eq!(&bytes[32..40], &0x2000u64.to_le_bytes(), "PRP2");
        assert_eq!(
            &bytes[40..48],
            &0x0123_4567_89AB_CDEFu64.to_le_bytes(),
            "SLBA"
        );
        assert_eq!(&bytes[48..50], &[7, 0], "NLB is 0-based");
        assert!(bytes[8..24].iter().chain(&bytes[50..64]).all(|&b| b == 0));
        assert_eq!(sqe.io_opcode(), Ok(IoOpcode::Read));
        assert_eq!(
            (sqe.cid(), sqe.slba(), sqe.nlb(), sqe.block_count()),
            (0xBEEF, 0x0123_4567_89AB_CDEF, 7, 8)
        );
    }

    #[test]
    fn write_of_65536_blocks_encodes_nlb_0xffff() {
        let sqe = SubmissionEntry::write(1, 1, 0, MAX_BLOCKS_PER_COMMAND, 0, 0).unwrap();
        assert_eq!(sqe.opcode(), 0x01);
        assert_eq!(sqe.nlb(), 0xFFFF);
        assert_eq!(sqe.block_count(), MAX_BLOCKS_PER_COMMAND);
    }

    #[test]
    fn read_write_reject_unencodable_arguments() {
        use CommandError::*;
        assert_eq!(
            SubmissionEntry::read(0, 1, 0, 0, 0, 0),
            Err(InvalidBlockCount(0))
        );
        assert_eq!(
            SubmissionEntry::read(0, 1, 0, 65537, 0, 0),
            Err(InvalidBlockCount(65537))
        );
        assert_eq!(
            SubmissionEntry::write(0, 1, u64::MAX, 1, 0, 0),
            Err(LbaRangeOverflow {
                slba: u64::MAX,
                blocks: 1
            })
        );
        assert_eq!(
            SubmissionEntry::read(0, 0, 0, 1, 0, 0),
            Err(InvalidNamespaceId(0))
        );
        assert_eq!(
            SubmissionEntry::read(0, u32::MAX, 0, 1, 0, 0),
            Err(InvalidNamespaceId(u32::MAX))
        );
        assert_eq!(
            SubmissionEntry::read(0, 1, 0, 1, 0x1002, 0),
            Err(MisalignedAddress {
                addr: 0x1002,
                align: 4
            })
        );
        assert_eq!(
            SubmissionEntry::write_zeroes(0, 1, 0, 0),
            Err(InvalidBlockCount(0))
        );
        assert_eq!(SubmissionEntry::flush(0, 0), Err(InvalidNamespaceId(0)));
    }

    #[test]
    fn flush_accepts_the_broadcast_namespace() {
        let sqe = SubmissionEntry::flush(3, u32::MAX).unwrap();
        assert_eq!((sqe.opcode(), sqe.cid(), sqe.nsid), (0x00, 3, u32::MAX));
    }

    #[test]
    fn write_zeroes_has_no_data_pointer() {
        let sqe = SubmissionEntry::write_zeroes(9, 2, 1 << 40, 16).unwrap();
        assert_eq!(sqe.io_opcode(), Ok(IoOpcode::WriteZeroes));
        assert_eq!(
            (sqe.slba(), sqe.block_count(), sqe.prp1, sqe.prp2),
            (1 << 40, 16, 0, 0)
        );
        assert_eq!(sqe.to_bytes()[0], 0x08);
    }

    #[test]
    fn dsm_deallocate_encodes_0_based_range_count_and_ad_bit() {
        let sqe = SubmissionEntry::dataset_management_deallocate(4, 1, 256, 0x10_0000).unwrap();
        let bytes = sqe.to_bytes();
        assert_eq!(bytes[0], 0x09);
        assert_eq!(bytes[40], 255, "NR is 0-based");
        assert_eq!(bytes[44], 0b100, "AD is CDW11 bit 2");
        assert_eq!((sqe.dsm_range_count(), sqe.dsm_deallocate()), (256, true));
    }

    #[test]
    fn dsm_rejects_bad_range_lists() {
        use CommandError::*;
        let dsm = SubmissionEntry::dataset_management_deallocate;
        assert_eq!(dsm(0, 1, 0, 0), Err(InvalidRangeCount(0)));
        assert_eq!(dsm(0, 1, 257, 0), Err(InvalidRangeCount(257)));
        assert_eq!(dsm(0, 1, 1, 0x1FF0).map(|s| s.prp1), Ok(0x1FF0));
        assert_eq!(
            dsm(0, 1, 2, 0x1FF0),
            Err(RangeListCrossesPage {
                addr: 0x1FF0,
                count: 2
            })
        );
    }

    #[test]
    fn dsm_range_layout_is_attributes_length_slba() {
        let range = DsmRange::new(0x1122_3344_5566_7788, 3).unwrap();
        let bytes = range.to_bytes();
        assert_eq!(&bytes[0..4], &[0; 4]);
        assert_eq!(&bytes[4..8], &[3, 0, 0, 0], "length is 1-based");
        assert_eq!(&bytes[8..16], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(DsmRange::from_bytes(&bytes), range);
        assert_eq!(DsmRange::new(0, 0), Err(CommandError::InvalidBlockCount(0)));
        assert!(DsmRange::new(u64::MAX, 1).is_err());
    }

    #[test]
    fn identify_puts_cns_in_cdw10_and_needs_an_aligned_page() {
        let sqe = SubmissionEntry::identify(5, Cns::Controller, 0, 0x8000).unwrap();
        assert_eq!(
            (sqe.admin_opcode(), sqe.cns(), sqe.prp1),
            (Ok(AdminOpcode::Identify), 1, 0x8000)
        );
        assert_eq!(sqe.to_bytes()[0], 0x06);
        assert_eq!(
            SubmissionEntry::identify(5, Cns::Namespace, 1, 0x8800),
            Err(CommandError::MisalignedAddress {
                addr: 0x8800,
                align: 4096
            })
        );
    }

    #[test]
    fn create_io_cq_is_contiguous_without_interrupts() {
        let sqe = SubmissionEntry::create_io_cq(1, 3, 1024, 0x20_0000).unwrap();
        let bytes = sqe.to_bytes();
        assert_eq!(bytes[0], 0x05);
        assert_eq!(&bytes[40..44], &[3, 0, 0xFF, 0x03], "QID 3, QSIZE 1023");
        assert_eq!(bytes[44], 0b01, "PC set, IEN clear");
        assert_eq!((sqe.queue_id(), sqe.queue_entries()), (3, 1024));
        assert!(sqe.physically_contiguous() && !sqe.interrupts_enabled());
    }

    #[test]
    fn create_io_sq_names_its_cq_and_priority() {
        let sqe =
            SubmissionEntry::create_io_sq(2, 7, 65536, 5, 0x40_0000, QueuePriority::Low).unwrap();
        let bytes = sqe.to_bytes();
        assert_eq!(bytes[0], 0x01);
        assert_eq!(&bytes[40..44], &[7, 0, 0xFF, 0xFF]);
        assert_eq!(&bytes[44..48], &[0b111, 0, 5, 0], "PC, QPRIO 3, CQID 5");
        assert_eq!(
            (
                sqe.queue_id(),
                sqe.queue_entries(),
                sqe.completion_queue_id(),
                sqe.queue_priority()
            ),
            (7, 65536, 5, QueuePriority::Low)
        );
    }

    #[test]
    fn queue_commands_reject_admin_ids_and_bad_sizes() {
        use CommandError::*;
        assert_eq!(
            SubmissionEntry::create_io_cq(0, 0, 16, 0),
            Err(AdminQueueId)
        );
        assert_eq!(
            SubmissionEntry::create_io_cq(0, 1, 1, 0),
            Err(InvalidQueueSize(1))
        );
        assert_eq!(
            SubmissionEntry::create_io_cq(0, 1, 65537, 0),
            Err(InvalidQueueSize(65537))
        );
        assert_eq!(
            SubmissionEntry::create_io_cq(0, 1, 2, 0x10),
            Err(MisalignedAddress {
                addr: 0x10,
                align: 4096
            })
        );
        let prio = QueuePriority::Medium;
        assert_eq!(
            SubmissionEntry::create_io_sq(0, 1, 16, 0, 0, prio),
            Err(AdminQueueId)
        );
        assert_eq!(SubmissionEntry::delete_io_sq(0, 0), Err(AdminQueueId));
        assert_eq!(SubmissionEntry::delete_io_cq(0, 0), Err(AdminQueueId));
    }

    #[test]
    fn delete_commands_carry_the_queue_id() {
        let sq = SubmissionEntry::delete_io_sq(1, 9).unwrap();
        let cq = SubmissionEntry::delete_io_cq(1, 9).unwrap();
        assert_eq!((sq.opcode(), sq.queue_id()), (0x00, 9));
        assert_eq!((cq.opcode(), cq.queue_id()), (0x04, 9));
    }

    #[test]
    fn number_of_queues_is_0_based_in_both_halves() {
        let counts = QueueCounts::new(4, 2).unwrap();
        assert_eq!(counts.to_dword(), 0x0001_0003);
        let sqe = SubmissionEntry::set_number_of_queues(1, counts);
        assert_eq!(
            (sqe.admin_opcode(), sqe.feature_id(), sqe.cdw11),
            (Ok(AdminOpcode::SetFeatures), 0x07, 0x0001_0003)
        );
        let get = SubmissionEntry::get_features(2, FEATURE_NUMBER_OF_QUEUES, 0);
        assert_eq!((get.opcode(), get.feature_id()), (0x0A, 0x07));
        assert_eq!(
            QueueCounts::from_dword(0xFFFE_0000),
            QueueCounts::new(1, 65535)
        );
        assert_eq!(
            QueueCounts::from_dword(0x0000_FFFF),
            Err(CommandError::InvalidQueueCount(65536))
        );
        assert_eq!(
            QueueCounts::new(0, 1),
            Err(CommandError::InvalidQueueCount(0))
        );
    }

    #[test]
    fn unknown_opcodes_are_errors() {
        assert!(IoOpcode::try_from(0x03).is_err());
        assert!(AdminOpcode::try_from(0x03).is_err());
        assert_eq!(
            IoOpcode::try_from(0x7F).unwrap_err().to_string(),
            "unknown I/O opcode 0x7f"
        );
        for &op in IoOpcode::ALL {
            assert_eq!(IoOpcode::try_from(op.code()), Ok(op));
        }
        for &op in AdminOpcode::ALL {
            assert_eq!(AdminOpcode::try_from(op.code()), Ok(op));
        }
    }

    #[test]
    fn set_cid_keeps_opcode_and_flags() {
        let mut sqe = SubmissionEntry {
            cdw0: 0x1234_C302,
            ..Default::default()
        };
        sqe.set_cid(0xABCD);
        assert_eq!(sqe.cdw0, 0xABCD_C302);
        assert_eq!((sqe.opcode(), sqe.fuse(), sqe.psdt()), (0x02, 0x3, 0x3));
    }

    proptest! {
        #[test]
        fn any_64_bytes_roundtrip(bytes in proptest::collection::vec(any::<u8>(), 64)) {
            let raw: [u8; 64] = bytes.try_into().unwrap();
            let sqe = SubmissionEntry::from_bytes(&raw);
            prop_assert_eq!(sqe.to_bytes(), raw);
            // Accessors are total on arbitrary entries.
            prop_assert_eq!(sqe.block_count(), u32::from(sqe.nlb()) + 1);
            prop_assert!((1..=256).contains(&sqe.dsm_range_count()));
            let _ = (sqe.io_opcode(), sqe.admin_opcode(), sqe.queue_priority());
        }

        #[test]
        fn read_roundtrips_its_arguments(
            cid: u16, nsid in 1u32..0xFFFF_FFFF, slba in 0u64..(1 << 48),
            blocks in 1u32..=65536, prp1 in any::<u64>().prop_map(|p| p & !3), prp2: u64,
        ) {
            let sqe = SubmissionEntry::read(cid, nsid, slba, blocks, prp1, prp2).unwrap();
            let back = SubmissionEntry::from_bytes(&sqe.to_bytes());
            prop_assert_eq!(back, sqe);
            prop_assert_eq!(
                (back.io_opcode(), back.cid(), back.nsid, back.slba(), back.block_count()),
                (Ok(IoOpcode::Read), cid, nsid, slba, blocks)
            );
            prop_assert_eq!((back.prp1, back.prp2), (prp1, prp2));
        }
    }
}
